//! Synthetic IoT events for demos, tests and benchmarks: K devices reporting
//! temperature, humidity and pressure at R events/s in total, optionally one
//! hot device at M times the rate of the others. Deterministic for a seed, so
//! a run can be verified event by event afterwards.

use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

/// What to generate.
#[derive(Debug, Clone)]
pub struct ProduceSpec {
    /// Number of devices.
    pub devices: u32,
    /// Total events.
    pub count: u64,
    /// Rate multiplier of device 0 (1 = no hot device).
    pub hot_factor: u32,
    /// Seed of the generator.
    pub seed: u64,
}

/// One generated event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IotEvent {
    /// Device id (`device-0000` is the hot one).
    #[serde(rename = "deviceId")]
    pub device_id: String,
    /// Event time, RFC 3339 with milliseconds.
    pub timestamp: String,
    /// Unique event id.
    #[serde(rename = "eventId")]
    pub event_id: String,
    /// Degrees Celsius.
    pub temperature: f64,
    /// Percent.
    pub humidity: f64,
    /// Hectopascal.
    pub pressure: f64,
}

impl ProduceSpec {
    /// Event `n` of the run, stamped at `at`. Device 0 gets `hot_factor`
    /// shares of the traffic, every other device one share.
    pub fn event(&self, n: u64, at: DateTime<Utc>) -> IotEvent {
        let mut rng = fastrand::Rng::with_seed(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let shares = u64::from(self.devices.max(1) - 1) + u64::from(self.hot_factor.max(1));
        let pick = rng.u64(0..shares);
        let device = if pick < u64::from(self.hot_factor.max(1)) {
            0
        } else {
            pick - u64::from(self.hot_factor.max(1)) + 1
        };
        let round = |x: f64| (x * 100.0).round() / 100.0;
        IotEvent {
            device_id: format!("device-{device:04}"),
            timestamp: at.to_rfc3339_opts(SecondsFormat::Millis, true),
            event_id: format!("evt-{:08x}-{n:010}", self.seed as u32),
            temperature: round(15.0 + rng.f64() * 15.0),
            humidity: round(30.0 + rng.f64() * 50.0),
            pressure: round(990.0 + rng.f64() * 40.0),
        }
    }
}

/// Where produced events go.
#[derive(Debug, Clone)]
pub enum Target {
    /// A Kinesis stream (PutRecords, 500 per call).
    Kinesis(aws_sdk_kinesis::Client, String),
    /// A Kinesis stream, events packed as KPL aggregates of this many user
    /// records each (the KPL's own format, deaggregated by the consumer).
    KinesisAggregated(aws_sdk_kinesis::Client, String, usize),
    /// An SQS queue (SendMessageBatch, 10 per call).
    Sqs(aws_sdk_sqs::Client, String),
}

/// Errors producing.
#[derive(Debug, thiserror::Error)]
#[error("producing to {target}: {message}")]
pub struct ProduceError {
    target: String,
    message: String,
}

impl Target {
    fn name(&self) -> String {
        match self {
            Target::Kinesis(_, s) | Target::KinesisAggregated(_, s, _) => format!("stream {s}"),
            Target::Sqs(_, q) => format!("queue {q}"),
        }
    }

    /// Most events per call.
    pub fn batch_size(&self) -> usize {
        match self {
            Target::Kinesis(..) => 500,
            Target::KinesisAggregated(_, _, n) => 500 * n.max(&1),
            Target::Sqs(..) => 10,
        }
    }

    /// Sends `events` (at most `batch_size`), retrying the entries the
    /// service refused (throttled) until all are in.
    pub async fn send(&self, events: &[IotEvent]) -> Result<(), ProduceError> {
        let err = |message: String| ProduceError {
            target: self.name(),
            message,
        };
        let json = |e: &IotEvent| serde_json::to_vec(e).map_err(|e| err(e.to_string()));
        match self {
            Target::Kinesis(client, stream) => {
                let records = events
                    .iter()
                    .map(|e| Ok((e.device_id.clone(), json(e)?)))
                    .collect::<Result<Vec<_>, ProduceError>>()?;
                put_kinesis(client, stream, records).await.map_err(err)
            }
            Target::KinesisAggregated(client, stream, n) => {
                let mut records = Vec::new();
                for chunk in events.chunks((*n).max(1)) {
                    let users = chunk
                        .iter()
                        .map(|e| Ok((e.device_id.clone(), json(e)?)))
                        .collect::<Result<Vec<_>, ProduceError>>()?;
                    // The KPL puts an aggregate under its first user record's key.
                    let key = users.first().map(|u| u.0.clone()).unwrap_or_default();
                    records.push((key, tidemark_consumer::kpl::aggregate(&users)));
                }
                put_kinesis(client, stream, records).await.map_err(err)
            }
            Target::Sqs(client, queue) => send_sqs(client, queue, events).await.map_err(err),
        }
    }
}

/// SendMessageBatch of events (at most 10), retrying refused entries.
async fn send_sqs(
    client: &aws_sdk_sqs::Client,
    queue: &str,
    events: &[IotEvent],
) -> Result<(), String> {
    let fifo = queue.ends_with(".fifo");
    until_accepted(events.to_vec(), async |pending: &[IotEvent]| {
        let entries = pending
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let body = serde_json::to_string(e).map_err(|e| e.to_string())?;
                let mut m = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body);
                if fifo {
                    m = m
                        .message_group_id(&e.device_id)
                        .message_deduplication_id(&e.event_id);
                }
                m.build().map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = client
            .send_message_batch()
            .queue_url(queue)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
        Ok(out
            .failed()
            .iter()
            .filter_map(|f| f.id().parse().ok())
            .collect())
    })
    .await
}

/// Sends `pending` with `call`, which returns the indexes of the entries the
/// service refused (throttled), and sends those again after a back-off with
/// jitter, until none is refused or 50 attempts have failed.
async fn until_accepted<T: Clone>(
    mut pending: Vec<T>,
    mut call: impl AsyncFnMut(&[T]) -> Result<Vec<usize>, String>,
) -> Result<(), String> {
    use backon::BackoffBuilder;
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .with_max_times(50)
        .build();
    while !pending.is_empty() {
        let refused = call(&pending).await?;
        pending = refused
            .into_iter()
            .filter_map(|i| pending.get(i).cloned())
            .collect();
        if pending.is_empty() {
            break;
        }
        match delays.next() {
            Some(d) => tokio::time::sleep(d).await,
            None => {
                return Err(format!(
                    "{} entries still refused after 50 attempts",
                    pending.len()
                ));
            }
        }
    }
    Ok(())
}

/// PutRecords of raw `(partition key, data)` records, retrying refused ones.
async fn put_kinesis(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    records: Vec<(String, Vec<u8>)>,
) -> Result<(), String> {
    until_accepted(records, async |pending: &[(String, Vec<u8>)]| {
        let entries = pending
            .iter()
            .map(|(k, d)| {
                PutRecordsRequestEntry::builder()
                    .partition_key(k)
                    .data(Blob::new(d.clone()))
                    .build()
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = client
            .put_records()
            .stream_name(stream)
            .set_records(Some(entries))
            .send()
            .await
            .map_err(|e| aws_sdk_kinesis::error::DisplayErrorContext(e).to_string())?;
        Ok(out
            .records()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.error_code().is_some())
            .map(|(i, _)| i)
            .collect())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn refused_entries_alone_are_sent_again_until_accepted() {
        let mut calls: Vec<Vec<u32>> = Vec::new();
        // The service refuses entry 7 twice and entry 3 once.
        let mut refusals = std::collections::HashMap::from([(7, 2), (3, 1)]);
        let result = until_accepted((0..10u32).collect(), async |pending: &[u32]| {
            calls.push(pending.to_vec());
            let mut refused = Vec::new();
            for (i, e) in pending.iter().enumerate() {
                if let Some(n) = refusals.get_mut(e).filter(|n| **n > 0) {
                    *n -= 1;
                    refused.push(i);
                }
            }
            Ok(refused)
        })
        .await;
        assert_eq!(result, Ok(()));
        assert_eq!(
            calls,
            vec![(0..10).collect::<Vec<_>>(), vec![3, 7], vec![7]]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_fifty_attempts_and_says_how_many() {
        let mut attempts = 0;
        let result = until_accepted(vec![1, 2], async |pending: &[i32]| {
            attempts += 1;
            Ok((0..pending.len()).collect())
        })
        .await;
        assert_eq!(attempts, 51, "the first call and 50 retries");
        assert_eq!(
            result,
            Err("2 entries still refused after 50 attempts".to_string())
        );
    }

    #[test]
    fn events_are_deterministic_and_the_hot_device_is_hot() {
        let spec = ProduceSpec {
            devices: 200,
            count: 20_000,
            hot_factor: 20,
            seed: 7,
        };
        let at = Utc::now();
        assert_eq!(spec.event(5, at), spec.event(5, at));
        let mut per_device = std::collections::HashMap::<String, u64>::new();
        for n in 0..spec.count {
            *per_device.entry(spec.event(n, at).device_id).or_default() += 1;
        }
        let hot = per_device["device-0000"] as f64;
        let others: f64 = per_device
            .iter()
            .filter(|(d, _)| *d != "device-0000")
            .map(|(_, c)| *c as f64)
            .sum::<f64>()
            / (per_device.len() - 1) as f64;
        let ratio = hot / others;
        assert!(
            (15.0..25.0).contains(&ratio),
            "hot device at {ratio:.1}x the others"
        );
        assert_eq!(per_device.len(), 200);
        let ids: std::collections::HashSet<_> =
            (0..1000).map(|n| spec.event(n, at).event_id).collect();
        assert_eq!(ids.len(), 1000, "event ids are unique");
    }
}
