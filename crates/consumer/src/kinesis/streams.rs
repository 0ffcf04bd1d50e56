//! Several streams per worker (`streams`), in the KCL's multi-stream lease
//! format.
//!
//! Each stream gets its own lease coordinator, renewer and readers (a
//! [`KinesisSource`] over [`LeaseTable::scoped`]): shard discovery, lease
//! creation, balancing, checkpoints, resharding and fan-out run per stream
//! exactly as in single-stream mode, while every lease item on the wire is
//! keyed `account:stream:creationEpoch:shardId` ([`crate::lease_key`]). All
//! streams share the worker's record channel, governors, status map (keyed
//! by lease key) and shutdown; a fatal error of one stream stops them all.
//!
//! Balancing is per stream: each stream's shards are spread evenly over the
//! workers that read it (the KCL balances the table's total instead), and
//! `max_leases` bounds each stream's leases.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info};

use super::KinesisSource;
use crate::config::StreamEntry;
use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::lease::LeaseTable;
use crate::lease_key::{KeyFormat, StreamIdentifier, refuse_other_format};
use crate::record::Record;

/// Attempts of DescribeStreamSummary per stream at start (20 calls/s per
/// account: a throttle or a blip is retried, a missing stream is not).
const DESCRIBE_ATTEMPTS: usize = 5;

/// Runs one [`KinesisSource`] per configured stream until `shutdown`; see
/// the module docs.
pub(super) async fn run(
    src: KinesisSource,
    sink: mpsc::Sender<Vec<Record>>,
    shutdown: CancellationToken,
) -> Result<(), ConsumerError> {
    src.config.validate()?;
    src.table.create_if_absent(Duration::from_secs(60)).await?;
    refuse_other_format(&src.table, KeyFormat::MultiStream).await?;
    // One stream's fatal error stops the others (and the worker).
    let stop = shutdown.child_token();
    let mut runs = Vec::with_capacity(src.config.streams.len());
    for entry in &src.config.streams {
        let id = identify(&src.kinesis, entry).await?;
        info!(stream = %entry.stream, lease_key_prefix = %id, "multi-stream: reading");
        let mut config = src.config.clone();
        config.stream = entry.stream.clone();
        config.streams = Vec::new();
        // Leader mode: a lock and heartbeats per stream (each stream's
        // coordinator assigns its own leases).
        let coord = match &src.coord {
            Some(c) => Some(c.scoped(&id.to_string()).ok_or_else(|| {
                ConsumerError::from(crate::config::ConfigError {
                    key: "lease_assignment",
                    problem: "this coordination store cannot keep several streams apart".into(),
                })
            })?),
            None => None,
        };
        let sub = KinesisSource {
            coord,
            config,
            kinesis: src.kinesis.clone(),
            table: src.table.scoped(&id),
            status: src.status.scoped(format!("{id}:")),
            govs: src.govs.clone(),
        };
        let (sink, stop) = (sink.clone(), stop.clone());
        // Every log line of the stream's coordinator, renewer and readers
        // names the stream (shard ids repeat across streams).
        let span = tracing::info_span!("stream", stream = %id.name);
        runs.push(async move {
            let r = Box::pin(sub.run(sink, stop.clone()).instrument(span)).await;
            if r.is_err() {
                stop.cancel();
            }
            // Drain errors name lease keys: shard ids repeat across streams.
            r.map_err(|e| match e {
                ConsumerError::DrainIncomplete { shards } => ConsumerError::DrainIncomplete {
                    shards: shards.iter().map(|s| id.lease_key(s)).collect(),
                },
                e => e,
            })
        });
    }
    drop(sink);
    let mut unfinished = Vec::new();
    let mut first = None;
    for r in futures::future::join_all(runs).await {
        match r {
            Ok(()) => {}
            Err(ConsumerError::DrainIncomplete { shards }) => unfinished.extend(shards),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None if unfinished.is_empty() => Ok(()),
        None => Err(ConsumerError::DrainIncomplete { shards: unfinished }),
    }
}

/// Labels of a per-shard metric: `shard`, plus `stream` (its name) in
/// multi-stream mode, where shard ids repeat across streams.
pub(crate) fn shard_labels(table: &LeaseTable, shard: &str) -> Vec<metrics::Label> {
    let mut labels = vec![metrics::Label::new("shard", shard.to_string())];
    if let Some(id) = table.scope() {
        labels.push(metrics::Label::new("stream", id.name.clone()));
    }
    labels
}

/// `labels` and one more.
pub(crate) fn with(
    mut labels: Vec<metrics::Label>,
    key: &'static str,
    value: &'static str,
) -> Vec<metrics::Label> {
    labels.push(metrics::Label::new(key, value));
    labels
}

/// The stream's identity in lease keys: the configured account id and
/// creation epoch, else DescribeStreamSummary's (the account from the
/// stream ARN, the epoch from its creation time in seconds, as the KCL's
/// `StreamIdentifier.multiStreamInstance` takes them).
pub async fn identify(
    kinesis: &aws_sdk_kinesis::Client,
    entry: &StreamEntry,
) -> Result<StreamIdentifier, ConsumerError> {
    let name = entry.stream_name();
    let (account, epoch) = match (
        entry
            .account_id
            .clone()
            .or_else(|| arn_account(&entry.stream)),
        entry.creation_epoch,
    ) {
        (Some(a), Some(e)) => (a, e),
        (account, epoch) => {
            let (arn, created) = describe(kinesis, &entry.stream).await?;
            let account = account.or_else(|| arn_account(&arn)).ok_or_else(|| {
                bad(
                    entry,
                    &format!("no account id in its ARN `{arn}`: set account_id"),
                )
            })?;
            (account, epoch.unwrap_or(created))
        }
    };
    StreamIdentifier::new(account, name, epoch).map_err(|p| bad(entry, &p))
}

fn bad(entry: &StreamEntry, problem: &str) -> ConsumerError {
    crate::config::ConfigError {
        key: "streams",
        problem: format!("`{}`: {problem}", entry.stream),
    }
    .into()
}

/// The account id of `arn:PARTITION:kinesis:REGION:ACCOUNT:stream/NAME`.
fn arn_account(arn: &str) -> Option<String> {
    let account = arn.split(':').nth(4)?;
    (!account.is_empty() && account.bytes().all(|b| b.is_ascii_digit()))
        .then(|| account.to_string())
}

/// The stream's ARN and creation time (epoch seconds), with a few bounded
/// retries of throttles and transient failures.
async fn describe(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<(String, u64), ConsumerError> {
    let mut delays = super::retry_backoff().take(DESCRIBE_ATTEMPTS - 1);
    loop {
        let mut req = kinesis.describe_stream_summary();
        req = if stream.starts_with("arn:") {
            req.stream_arn(stream)
        } else {
            req.stream_name(stream)
        };
        match req.send().await {
            Ok(out) => {
                let Some(s) = out.stream_description_summary() else {
                    return Err(AwsError {
                        op: "DescribeStreamSummary",
                        class: ErrorClass::Fatal,
                        message: format!("no summary returned for {stream}"),
                    }
                    .into());
                };
                let created = u64::try_from(s.stream_creation_timestamp().secs()).unwrap_or(0);
                return Ok((s.stream_arn().to_string(), created));
            }
            Err(e) => {
                let err = AwsError::new("DescribeStreamSummary", &e);
                match delays.next() {
                    Some(d) if matches!(err.class, ErrorClass::Retry | ErrorClass::Throttled) => {
                        tokio::time::sleep(d).await;
                    }
                    _ => return Err(err.into()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_ids_come_from_stream_arns() {
        assert_eq!(
            arn_account("arn:aws:kinesis:us-east-1:123456789012:stream/orders").as_deref(),
            Some("123456789012")
        );
        assert_eq!(
            arn_account("arn:aws-cn:kinesis:cn-north-1:000000000000:stream/a-b").as_deref(),
            Some("000000000000")
        );
        assert_eq!(arn_account("orders"), None);
        assert_eq!(arn_account("arn:aws:kinesis:us-east-1::stream/x"), None);
    }

    #[test]
    fn per_shard_metrics_name_the_stream_only_with_several_streams() {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        let table = LeaseTable::new(aws_sdk_dynamodb::Client::from_conf(conf), "t");
        let keys = |labels: Vec<metrics::Label>| -> Vec<(String, String)> {
            labels
                .iter()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect()
        };
        let shard = ("shard".to_string(), "shardId-1".to_string());
        assert_eq!(
            keys(shard_labels(&table, "shardId-1")),
            std::slice::from_ref(&shard)
        );
        let id = StreamIdentifier::new("1", "orders", 5).unwrap();
        let scoped = table.scoped(&id);
        assert_eq!(
            keys(with(shard_labels(&scoped, "shardId-1"), "result", "ok")),
            [
                shard,
                ("stream".into(), "orders".into()),
                ("result".into(), "ok".into())
            ]
        );
    }

    #[tokio::test]
    async fn configured_identities_need_no_call() {
        // No endpoint behind this client: any call would fail.
        let conf = aws_sdk_kinesis::Config::builder()
            .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
            .region(aws_sdk_kinesis::config::Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:9")
            .build();
        let kinesis = aws_sdk_kinesis::Client::from_conf(conf);
        let entry = StreamEntry {
            stream: "arn:aws:kinesis:us-east-1:123456789012:stream/orders".into(),
            account_id: None,
            creation_epoch: Some(1_700_000_000),
            event: None,
        };
        let id = identify(&kinesis, &entry).await.unwrap();
        assert_eq!(id.to_string(), "123456789012:orders:1700000000");
        let entry = StreamEntry {
            stream: "clicks".into(),
            account_id: Some("000000000001".into()),
            creation_epoch: Some(7),
            event: None,
        };
        let id = identify(&kinesis, &entry).await.unwrap();
        assert_eq!(id.lease_key("shardId-1"), "000000000001:clicks:7:shardId-1");
    }
}
