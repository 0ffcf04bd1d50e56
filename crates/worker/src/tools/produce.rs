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
        let mut rng = self.rng(n);
        let device = self.pick_device(&mut rng);
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

impl ProduceSpec {
    /// Event `n` as sent: keyed by its device, its JSON.
    pub(crate) fn produced(&self, n: u64, at: DateTime<Utc>) -> Produced {
        let e = self.event(n, at);
        Produced {
            // Serializing strings and finite floats cannot fail.
            body: serde_json::to_vec(&e).unwrap_or_default(),
            key: e.device_id,
            id: e.event_id,
        }
    }

    /// The generator of event `n`: the same seed and `n`, the same values.
    pub(crate) fn rng(&self, n: u64) -> fastrand::Rng {
        fastrand::Rng::with_seed(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// A device (entity) number: device 0 gets `hot_factor` shares of the
    /// traffic, every other device one share.
    pub(crate) fn pick_device(&self, rng: &mut fastrand::Rng) -> u64 {
        let shares = u64::from(self.devices.max(1) - 1) + u64::from(self.hot_factor.max(1));
        let pick = rng.u64(0..shares);
        if pick < u64::from(self.hot_factor.max(1)) {
            0
        } else {
            pick - u64::from(self.hot_factor.max(1)) + 1
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
        let produced = events
            .iter()
            .map(|e| {
                Ok(Produced {
                    key: e.device_id.clone(),
                    id: e.event_id.clone(),
                    body: serde_json::to_vec(e).map_err(|e| self.error(e.to_string()))?,
                })
            })
            .collect::<Result<Vec<_>, ProduceError>>()?;
        self.send_produced(&produced).await
    }

    fn error(&self, message: String) -> ProduceError {
        ProduceError {
            target: self.name(),
            message,
        }
    }

    /// Sends events already encoded (a template's), as [`Target::send`].
    pub(crate) async fn send_produced(&self, events: &[Produced]) -> Result<(), ProduceError> {
        let err = |message: String| self.error(message);
        match self {
            Target::Kinesis(client, stream) => {
                let records = events
                    .iter()
                    .map(|e| (e.key.clone(), e.body.clone()))
                    .collect();
                put_kinesis(client, stream, records).await.map_err(err)
            }
            Target::KinesisAggregated(client, stream, n) => {
                let mut records = Vec::new();
                for chunk in events.chunks((*n).max(1)) {
                    let users: Vec<(String, Vec<u8>)> = chunk
                        .iter()
                        .map(|e| (e.key.clone(), e.body.clone()))
                        .collect();
                    // The KPL puts an aggregate under its first user record's key.
                    let key = users.first().map(|u| u.0.clone()).unwrap_or_default();
                    records.push((key, tidemark_consumer::kinesis::kpl_aggregate(&users)));
                }
                put_kinesis(client, stream, records).await.map_err(err)
            }
            Target::Sqs(client, queue) => send_sqs(client, queue, events).await.map_err(err),
        }
    }
}

/// One encoded event to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Produced {
    /// Partition key (Kinesis) or message group (SQS FIFO).
    pub key: String,
    /// Unique id (SQS FIFO deduplication id).
    pub id: String,
    /// The event's JSON.
    pub body: Vec<u8>,
}

/// SendMessageBatch of events (at most 10), retrying refused entries.
async fn send_sqs(
    client: &aws_sdk_sqs::Client,
    queue: &str,
    events: &[Produced],
) -> Result<(), String> {
    let fifo = queue.ends_with(".fifo");
    until_accepted(events.to_vec(), async |pending: &[Produced]| {
        let entries = pending
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let body = String::from_utf8(e.body.clone())
                    .map_err(|e| CallFailed::Fatal(e.to_string()))?;
                let mut m = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body);
                if fifo {
                    m = m.message_group_id(&e.key).message_deduplication_id(&e.id);
                }
                m.build().map_err(|e| CallFailed::Fatal(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = client
            .send_message_batch()
            .queue_url(queue)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| {
                let text = tidemark_aws_errors::describe(&e);
                CallFailed::of(&e, text)
            })?;
        Ok(out
            .failed()
            .iter()
            .filter_map(|f| f.id().parse().ok())
            .collect())
    })
    .await
}

/// Why one call sent nothing.
#[derive(Debug, Clone, PartialEq)]
enum CallFailed {
    /// No answer or a transient one (timeout, connection, 5xx, throttling):
    /// every entry counts as refused and is sent again after the back-off.
    Transient(String),
    /// An answer no retry changes (permissions, a missing stream or queue).
    Fatal(String),
}

impl CallFailed {
    /// Sorts an SDK error by the shared classifier.
    fn of<E, R>(e: &aws_sdk_kinesis::error::SdkError<E, R>, text: String) -> Self
    where
        E: aws_sdk_kinesis::error::ProvideErrorMetadata,
        R: tidemark_aws_errors::HttpStatus,
    {
        if tidemark_aws_errors::classify(e).is_retryable() {
            Self::Transient(text)
        } else {
            Self::Fatal(text)
        }
    }
}

/// Sends `pending` with `call`, which returns the indexes of the entries the
/// service refused (throttled), and sends those again after a back-off with
/// jitter, until none is refused or 50 attempts have failed. A call that
/// failed transiently (it timed out, say, under a loaded emulator) refuses
/// every entry and takes one of those attempts: the SDK's own retries are
/// off for produce, so one budget bounds every retry.
async fn until_accepted<T: Clone>(
    mut pending: Vec<T>,
    mut call: impl AsyncFnMut(&[T]) -> Result<Vec<usize>, CallFailed>,
) -> Result<(), String> {
    use backon::BackoffBuilder;
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .with_max_times(50)
        .build();
    let mut last_failure = None;
    while !pending.is_empty() {
        match call(&pending).await {
            Ok(refused) => {
                pending = refused
                    .into_iter()
                    .filter_map(|i| pending.get(i).cloned())
                    .collect();
                if pending.is_empty() {
                    break;
                }
            }
            Err(CallFailed::Fatal(e)) => return Err(e),
            Err(CallFailed::Transient(e)) => last_failure = Some(e),
        }
        match delays.next() {
            Some(d) => tokio::time::sleep(d).await,
            None => {
                let why = last_failure.map_or(String::new(), |e| format!(" (last failure: {e})"));
                return Err(format!(
                    "{} entries still refused after 50 attempts{why}",
                    pending.len()
                ));
            }
        }
    }
    Ok(())
}

/// Most data bytes in one PutRecords call. The API allows 5 MiB, but a call
/// that large takes seconds on a loaded emulator (kinesis-local took 6.5 s
/// for 4 MB), long enough to hit the attempt timeout; 1 MiB calls keep each
/// attempt short and a retry cheap.
const MAX_PUT_BYTES: usize = 1 << 20;

/// Splits `records` into PutRecords calls of at most 500 records and
/// [`MAX_PUT_BYTES`] of keys and data (a record larger than that goes alone).
fn put_calls(records: Vec<(String, Vec<u8>)>) -> Vec<Vec<(String, Vec<u8>)>> {
    let mut calls = Vec::new();
    let mut call: Vec<(String, Vec<u8>)> = Vec::new();
    let mut bytes = 0;
    for r in records {
        let size = r.0.len() + r.1.len();
        if !call.is_empty() && (call.len() == 500 || bytes + size > MAX_PUT_BYTES) {
            calls.push(std::mem::take(&mut call));
            bytes = 0;
        }
        bytes += size;
        call.push(r);
    }
    if !call.is_empty() {
        calls.push(call);
    }
    calls
}

/// PutRecords of raw `(partition key, data)` records, in calls of at most
/// [`MAX_PUT_BYTES`], retrying refused ones.
async fn put_kinesis(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    records: Vec<(String, Vec<u8>)>,
) -> Result<(), String> {
    for records in put_calls(records) {
        until_accepted(records, async |pending: &[(String, Vec<u8>)]| {
            let entries = pending
                .iter()
                .map(|(k, d)| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(k)
                        .data(Blob::new(d.clone()))
                        .build()
                        .map_err(|e| CallFailed::Fatal(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = client
                .put_records()
                .stream_name(stream)
                .set_records(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    let text = tidemark_aws_errors::describe(&e);
                    CallFailed::of(&e, text)
                })?;
            Ok(out
                .records()
                .iter()
                .enumerate()
                .filter(|(_, r)| r.error_code().is_some())
                .map(|(i, _)| i)
                .collect())
        })
        .await?;
    }
    Ok(())
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

    #[tokio::test(start_paused = true)]
    async fn a_failed_call_is_sent_again_and_a_fatal_one_ends_at_once() {
        let mut calls = 0;
        let result = until_accepted(vec![1, 2, 3], async |pending: &[i32]| {
            calls += 1;
            match calls {
                1 | 2 => Err(CallFailed::Transient("attempt timeout".into())),
                _ => Ok(if pending.len() == 3 { vec![] } else { vec![0] }),
            }
        })
        .await;
        assert_eq!(result, Ok(()));
        assert_eq!(calls, 3, "two timed-out calls, then every entry at once");

        let mut calls = 0;
        let result = until_accepted(vec![1], async |_: &[i32]| {
            calls += 1;
            Err(CallFailed::Fatal("AccessDenied".into()))
        })
        .await;
        assert_eq!(result, Err("AccessDenied".to_string()));
        assert_eq!(calls, 1, "a fatal answer is not retried");

        let result = until_accepted(vec![1], async |_: &[i32]| {
            Err(CallFailed::Transient("attempt timeout".into()))
        })
        .await;
        assert_eq!(
            result,
            Err("1 entries still refused after 50 attempts (last failure: attempt timeout)".into())
        );
    }

    #[test]
    fn put_calls_hold_at_most_500_records_and_a_mebibyte() {
        let record = |n: usize| ("k".to_string(), vec![0u8; n]);
        // 600 small records: 500 + 100.
        let sizes: Vec<usize> = put_calls((0..600).map(|_| record(10)).collect())
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, vec![500, 100]);
        // 300 KiB records: three fit in 1 MiB, the fourth starts a new call.
        let calls = put_calls((0..7).map(|_| record(300 << 10)).collect());
        assert_eq!(
            calls.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![3, 3, 1]
        );
        for call in &calls {
            let bytes: usize = call.iter().map(|(k, d)| k.len() + d.len()).sum();
            assert!(bytes <= MAX_PUT_BYTES, "{bytes}");
        }
        // A record over the cap goes alone; nothing is lost or reordered.
        let calls = put_calls(vec![record(1), record(2 << 20), record(3)]);
        assert_eq!(
            calls.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1, 1, 1]
        );
        let lens: Vec<usize> = calls.concat().iter().map(|r| r.1.len()).collect();
        assert_eq!(lens, vec![1, 2 << 20, 3]);
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
