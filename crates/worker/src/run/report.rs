//! What each worker reports about itself, so `tidemark status` shows lag
//! from what the workers already measured instead of reading the stream.
//!
//! Every `telemetry.report_interval` (default [`REPORT_INTERVAL`]) a running worker puts one small item in the
//! coordinator table (the maintenance lease's table), keyed
//! `leaseKey = "tidemark-worker#{worker id}"`:
//!
//! - `reportedAt`: Unix milliseconds;
//! - `shardLagMs`: MillisBehindLatest of each shard it read since its last
//!   report (Kinesis);
//! - `checkpointLag`: per shard whose written checkpoint is behind what it
//!   read, `{records, ms}`: records read past the checkpoint and the age of
//!   the oldest (Kinesis);
//! - `queueAgeMs`: age of the oldest message of its latest receive (SQS);
//! - `lateBacklog`: per table taking late data, the late items waiting in
//!   its writer and their WCU (`{items, wcu}`): maintenance lifts the
//!   table's capacity for them (see `maintenance::lift`).
//!
//! One PutItem per worker per interval (100 workers: about 3 writes a
//! second); the item is deleted when the worker stops cleanly, and a report
//! older than [`STALE_AFTER`] is ignored (a worker that crashed). A failed
//! write is logged and retried at the next interval: reports are
//! information, never a reason to stop.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use tidemark_writer::WriterHandle;

use super::telemetry::{Last, TypedMetrics};
use crate::maintenance::lift::Backlog;

/// Default time between a worker's reports (`telemetry.report_interval`).
pub const REPORT_INTERVAL: Duration = Duration::from_secs(30);
/// Reports older than this are ignored (their worker is gone).
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(120);
/// Key prefix of report items in the coordinator table.
pub(crate) const KEY_PREFIX: &str = "tidemark-worker#";

/// One worker's report.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct WorkerReport {
    /// The worker id (the lease owner name).
    pub worker: String,
    /// When it was written, Unix ms.
    pub reported_at_ms: i64,
    /// MillisBehindLatest per shard read in the last interval.
    pub shard_lag_ms: BTreeMap<String, i64>,
    /// Checkpoint lag per held shard that has one.
    pub checkpoint_lag: BTreeMap<String, CheckpointLag>,
    /// Age of the oldest message of the latest SQS receive, ms.
    pub queue_age_ms: Option<i64>,
    /// Late items waiting in this worker's writer, per table.
    pub late_backlog: BTreeMap<String, Backlog>,
}

/// How far a shard's written checkpoint is behind what was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub(crate) struct CheckpointLag {
    /// Records read that the checkpoint does not cover.
    pub records: u64,
    /// How long ago the oldest of them was read, ms.
    pub ms: i64,
}

impl WorkerReport {
    /// The report's item.
    fn item(&self) -> HashMap<String, AttributeValue> {
        let mut item = HashMap::from([
            (
                "leaseKey".to_string(),
                AttributeValue::S(format!("{KEY_PREFIX}{}", self.worker)),
            ),
            (
                "reportedAt".to_string(),
                AttributeValue::N(self.reported_at_ms.to_string()),
            ),
            (
                "shardLagMs".to_string(),
                AttributeValue::M(
                    self.shard_lag_ms
                        .iter()
                        .map(|(k, v)| (k.clone(), AttributeValue::N(v.to_string())))
                        .collect(),
                ),
            ),
        ]);
        if let Some(age) = self.queue_age_ms {
            item.insert("queueAgeMs".into(), AttributeValue::N(age.to_string()));
        }
        if !self.checkpoint_lag.is_empty() {
            let n = |v: String| AttributeValue::N(v);
            let shards = self
                .checkpoint_lag
                .iter()
                .map(|(shard, l)| {
                    let m = HashMap::from([
                        ("records".to_string(), n(l.records.to_string())),
                        ("ms".to_string(), n(l.ms.to_string())),
                    ]);
                    (shard.clone(), AttributeValue::M(m))
                })
                .collect();
            item.insert("checkpointLag".into(), AttributeValue::M(shards));
        }
        if !self.late_backlog.is_empty() {
            let n = |v: u64| AttributeValue::N(v.to_string());
            let tables = self
                .late_backlog
                .iter()
                .map(|(t, b)| {
                    let m = HashMap::from([
                        ("items".to_string(), n(b.items)),
                        ("wcu".to_string(), n(b.wcu)),
                    ]);
                    (t.clone(), AttributeValue::M(m))
                })
                .collect();
            item.insert("lateBacklog".into(), AttributeValue::M(tables));
        }
        item
    }

    /// A report read back; `None` for items that are not reports.
    fn from_item(item: &HashMap<String, AttributeValue>) -> Option<WorkerReport> {
        let worker = item
            .get("leaseKey")?
            .as_s()
            .ok()?
            .strip_prefix(KEY_PREFIX)?
            .to_string();
        let num = |v: &AttributeValue| v.as_n().ok().and_then(|n| n.parse::<i64>().ok());
        Some(WorkerReport {
            worker,
            reported_at_ms: num(item.get("reportedAt")?)?,
            shard_lag_ms: item
                .get("shardLagMs")
                .and_then(|m| m.as_m().ok())
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), num(v)?)))
                        .collect()
                })
                .unwrap_or_default(),
            checkpoint_lag: item
                .get("checkpointLag")
                .and_then(|m| m.as_m().ok())
                .map(|m| {
                    m.iter()
                        .filter_map(|(shard, v)| {
                            let v = v.as_m().ok()?;
                            let lag = CheckpointLag {
                                records: u64::try_from(num(v.get("records")?)?).ok()?,
                                ms: num(v.get("ms")?)?,
                            };
                            Some((shard.clone(), lag))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            queue_age_ms: item.get("queueAgeMs").and_then(num),
            late_backlog: item
                .get("lateBacklog")
                .and_then(|m| m.as_m().ok())
                .map(|m| {
                    m.iter()
                        .filter_map(|(t, v)| {
                            let v = v.as_m().ok()?;
                            let get = |k: &str| {
                                v.get(k).and_then(num).and_then(|n| u64::try_from(n).ok())
                            };
                            let backlog = Backlog {
                                items: get("items")?,
                                wcu: get("wcu").unwrap_or(0),
                            };
                            Some((t.clone(), backlog))
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

/// The late backlogs of every report, summed per table.
pub(crate) fn late_backlogs<'a>(
    reports: impl IntoIterator<Item = &'a WorkerReport>,
) -> BTreeMap<String, Backlog> {
    let mut out: BTreeMap<String, Backlog> = BTreeMap::new();
    for r in reports {
        for (t, b) in &r.late_backlog {
            let sum = out.get(t).copied().unwrap_or_default() + *b;
            out.insert(t.clone(), sum);
        }
    }
    out
}

/// This worker's report now, from a snapshot of its metrics and its
/// writer's tables.
fn measure(
    worker: &str,
    metrics: &TypedMetrics,
    writer: Option<&WriterHandle>,
    last: &mut Last,
) -> WorkerReport {
    let snap = metrics.snapshot();
    let late_backlog = writer
        .map(|w| {
            w.stats()
                .tables
                .into_iter()
                .filter(|(_, l)| l.late && l.items > 0)
                .map(|(t, l)| {
                    let backlog = Backlog {
                        items: l.items,
                        wcu: l.wcu.max(l.items),
                    };
                    (t, backlog)
                })
                .collect()
        })
        .unwrap_or_default();
    WorkerReport {
        worker: worker.to_string(),
        reported_at_ms: chrono::Utc::now().timestamp_millis(),
        shard_lag_ms: snap
            .shard_lags(last)
            .into_iter()
            .map(|(k, v)| (k, v as i64))
            .collect(),
        checkpoint_lag: snap
            .checkpoint_lags()
            .into_iter()
            .map(|(shard, (records, secs))| {
                let ms = (secs * 1000.0) as i64;
                (shard, CheckpointLag { records, ms })
            })
            .collect(),
        queue_age_ms: (snap.sqs_messages_received > 0)
            .then_some(snap.sqs_receive_age)
            .flatten()
            .map(|age| (age * 1000.0) as i64),
        late_backlog,
    }
}

/// Writes this worker's report every `interval` until `shutdown`, then
/// deletes it.
pub(crate) async fn run(
    client: aws_sdk_dynamodb::Client,
    table: String,
    interval: Duration,
    worker: String,
    metrics: TypedMetrics,
    writer: Option<WriterHandle>,
    shutdown: CancellationToken,
) {
    let mut last = Last::new();
    let mut tick = tokio::time::interval(interval);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        let report = measure(&worker, &metrics, writer.as_ref(), &mut last);
        let put = client
            .put_item()
            .table_name(&table)
            .set_item(Some(report.item()))
            .send();
        // Raced against the stop: a put that hangs (up to its attempts'
        // timeouts) must not hold up a stop bounded by `shutdown_timeout`.
        let put = tokio::select! {
            () = shutdown.cancelled() => break,
            put = tokio::time::timeout(REPORT_INTERVAL, put) => put,
        };
        match put {
            Ok(Ok(_)) => debug!(shards = report.shard_lag_ms.len(), "worker report written"),
            Ok(Err(e)) => {
                warn!(table, error = %tidemark_aws_errors::describe(&e), "writing the worker report failed")
            }
            Err(_) => warn!(table, "writing the worker report timed out"),
        }
    }
    // Best effort and short: a report left behind goes stale by itself.
    let delete = client
        .delete_item()
        .table_name(&table)
        .key(
            "leaseKey",
            AttributeValue::S(format!("{KEY_PREFIX}{worker}")),
        )
        .send();
    if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(2), delete).await {
        debug!(error = %tidemark_aws_errors::describe(&e), "deleting the worker report failed");
    }
}

/// The fresh reports in `table` (reports older than [`STALE_AFTER`] are
/// left out), by worker id.
pub(crate) async fn read(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<
    BTreeMap<String, WorkerReport>,
    aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::scan::ScanError>,
> {
    let now = chrono::Utc::now().timestamp_millis();
    let mut out = BTreeMap::new();
    let mut pages = client
        .scan()
        .table_name(table)
        .filter_expression("begins_with(leaseKey, :p)")
        .expression_attribute_values(":p", AttributeValue::S(KEY_PREFIX.into()))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        for item in page?.items() {
            if let Some(r) = WorkerReport::from_item(item)
                && now - r.reported_at_ms <= STALE_AFTER.as_millis() as i64
            {
                out.insert(r.worker.clone(), r);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_through_its_item() {
        let r = WorkerReport {
            worker: "4f6c1c5e-9a51-4a5e-8a37-3f0f2c1d9b7e".into(),
            reported_at_ms: 1_763_787_600_123,
            shard_lag_ms: [("shardId-000000000001".to_string(), 1500)].into(),
            checkpoint_lag: [(
                "shardId-000000000001".to_string(),
                CheckpointLag {
                    records: 3_000,
                    ms: 1_800_000,
                },
            )]
            .into(),
            queue_age_ms: Some(42_000),
            late_backlog: [(
                "events_2026-11-19".to_string(),
                Backlog {
                    items: 2_000,
                    wcu: 2_400,
                },
            )]
            .into(),
        };
        assert_eq!(WorkerReport::from_item(&r.item()), Some(r.clone()));
        let mut other = r.item();
        other.insert(
            "leaseKey".into(),
            AttributeValue::S("tidemark-maintenance".into()),
        );
        assert_eq!(
            WorkerReport::from_item(&other),
            None,
            "the lease item is no report"
        );
    }

    #[test]
    fn a_worker_reports_the_lag_of_shards_it_read_and_the_queue_age() {
        use metrics_exporter_prometheus::PrometheusBuilder;
        let recorder =
            super::super::telemetry::TypedRecorder::new(PrometheusBuilder::new().build_recorder());
        let typed = recorder.metrics();
        let k = &tidemark_consumer::metrics::kinesis::GET_RECORDS;
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(*k, "shard" => "s1").increment(2);
            metrics::gauge!(tidemark_consumer::metrics::kinesis::MILLIS_BEHIND, "shard" => "s1")
                .set(2500.0);
            metrics::gauge!(tidemark_consumer::metrics::kinesis::MILLIS_BEHIND, "shard" => "gone")
                .set(9e6);
        });
        let mut last = Last::new();
        let r = measure("w1", &typed, None, &mut last);
        assert_eq!(r.shard_lag_ms, [("s1".to_string(), 2500)].into());
        assert!(r.checkpoint_lag.is_empty(), "no checkpoint lag yet: {r:?}");
        assert_eq!(r.queue_age_ms, None, "no SQS receive yet");
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(tidemark_consumer::metrics::sqs::MESSAGES_RECEIVED, "format" => "single")
                .increment(1);
            metrics::gauge!(tidemark_consumer::metrics::sqs::RECEIVE_AGE).set(42.5);
        });
        let r = measure("w1", &typed, None, &mut last);
        assert!(r.shard_lag_ms.is_empty(), "s1 was not read since: {r:?}");
        assert!(r.checkpoint_lag.is_empty());
        assert_eq!(r.queue_age_ms, Some(42_500));
    }

    /// A report put that hangs (DynamoDB accepts and never answers) does
    /// not hold up the stop: the worker's stop has its own deadline.
    #[tokio::test]
    async fn a_stop_does_not_wait_for_a_hanging_report_put() {
        use metrics_exporter_prometheus::PrometheusBuilder;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (accepted_tx, accepted) = tokio::sync::oneshot::channel();
        let server = tokio::spawn(async move {
            let (conn, _) = listener.accept().await.unwrap();
            let _ = accepted_tx.send(());
            let mut held = vec![conn];
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .endpoint_url(url)
            .build();
        let client = aws_sdk_dynamodb::Client::from_conf(conf);
        let recorder =
            super::super::telemetry::TypedRecorder::new(PrometheusBuilder::new().build_recorder());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(
            client,
            "coordinator".into(),
            REPORT_INTERVAL,
            "w1".into(),
            recorder.metrics(),
            None,
            shutdown.clone(),
        ));
        // The first report's put is in flight.
        tokio::time::timeout(Duration::from_secs(10), accepted)
            .await
            .expect("the report was never sent")
            .unwrap();
        shutdown.cancel();
        let asked = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the report task did not stop within 5 s")
            .unwrap();
        // The put is dropped at once; the delete has its 2 s.
        assert!(
            asked.elapsed() < Duration::from_secs(4),
            "{:?}",
            asked.elapsed()
        );
        server.abort();
    }

    /// A shard whose reader waits on back-pressure makes no GetRecords
    /// call, so its MillisBehindLatest is not reported; its checkpoint lag
    /// is, for as long as the checkpoint stands still.
    #[test]
    fn a_worker_reports_the_checkpoint_lag_of_shards_it_holds_read_or_not() {
        use metrics_exporter_prometheus::PrometheusBuilder;
        use tidemark_consumer::metrics::kinesis as k;
        let recorder =
            super::super::telemetry::TypedRecorder::new(PrometheusBuilder::new().build_recorder());
        let typed = recorder.metrics();
        let set = |records: f64, secs: f64| {
            metrics::with_local_recorder(&recorder, || {
                metrics::gauge!(k::CHECKPOINT_LAG_RECORDS, "shard" => "s1").set(records);
                metrics::gauge!(k::CHECKPOINT_LAG_SECONDS, "shard" => "s1").set(secs);
                metrics::gauge!(k::CHECKPOINT_LAG_RECORDS, "shard" => "s2").set(0.0);
                metrics::gauge!(k::CHECKPOINT_LAG_SECONDS, "shard" => "s2").set(0.0);
            });
        };
        let mut last = Last::new();
        set(4_000.0, 90.25);
        let r = measure("w1", &typed, None, &mut last);
        let lag = |records, ms| [("s1".to_string(), CheckpointLag { records, ms })].into();
        assert_eq!(r.checkpoint_lag, lag(4_000, 90_250));
        assert!(
            r.shard_lag_ms.is_empty(),
            "no GetRecords call in the interval"
        );
        set(4_000.0, 120.5);
        let r = measure("w1", &typed, None, &mut last);
        assert_eq!(r.checkpoint_lag, lag(4_000, 120_500), "it grows");
        assert_eq!(WorkerReport::from_item(&r.item()), Some(r.clone()));
    }
}
