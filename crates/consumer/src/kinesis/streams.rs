//! Several streams per worker (`streams`), in the KCL's multi-stream lease
//! format.
//!
//! Each stream gets its own balancing loop, renewer and readers (a
//! single-stream source over [`LeaseTable::scoped`]): shard discovery, lease
//! creation, balancing, checkpoints, resharding and fan-out run per stream
//! exactly as in single-stream mode, while every lease item on the wire is
//! keyed `account:stream:creationEpoch:shardId` (`lease::key`). All streams
//! share the worker's record channel, governors, status map (keyed by lease
//! key) and shutdown; a fatal error of one stream stops them all.
//!
//! Balancing is per stream: each stream's shards are spread evenly over the
//! workers that read it (the KCL balances the table's total instead), and
//! `max_leases` bounds each stream's leases.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info};

use crate::error::{ConsumerError, SourceConfigError};
use crate::kinesis::api::describe_stream;
use crate::kinesis::config::{KinesisConfig, StreamEntry};
use crate::kinesis::lease::key::{KeyFormat, StreamIdentifier};
use crate::kinesis::lease::leader_store::LeaderStore;
use crate::kinesis::lease::table::{LeaseTable, refuse_other_format};
use crate::kinesis::status::StatusHandle;

/// One stream of a multi-stream source, ready to run as a single-stream
/// source.
#[derive(Debug)]
pub(crate) struct OneStream {
    /// Its identity in lease keys.
    pub(crate) id: StreamIdentifier,
    /// The source's config with `stream` set to this one.
    pub(crate) config: KinesisConfig,
    /// The table's view of this stream's leases.
    pub(crate) table: LeaseTable,
    /// The shared status map, this stream's shards under their lease keys.
    pub(crate) status: StatusHandle,
    /// Leader mode: this stream's lock and heartbeats.
    pub(crate) leader_store: Option<Arc<dyn LeaderStore>>,
}

/// Checks the config and the table (created when absent; refused in the
/// other key format) and identifies each configured stream.
pub(crate) async fn prepare(
    config: &KinesisConfig,
    kinesis: &aws_sdk_kinesis::Client,
    table: &LeaseTable,
    status: &StatusHandle,
    leader_store: Option<&Arc<dyn LeaderStore>>,
) -> Result<Vec<OneStream>, ConsumerError> {
    config.validate()?;
    table.create_if_absent(Duration::from_secs(60)).await?;
    refuse_other_format(table, KeyFormat::MultiStream).await?;
    let mut out = Vec::with_capacity(config.streams.len());
    for entry in &config.streams {
        let id = identify(kinesis, entry).await?;
        info!(stream = %entry.stream, lease_key_prefix = %id, "multi-stream: reading");
        let mut one = config.clone();
        one.stream = entry.stream.clone();
        one.streams = Vec::new();
        // Leader mode: a lock and heartbeats per stream (each stream's
        // balancing loop assigns its own leases).
        let leader_store = match leader_store {
            Some(c) => Some(c.scoped(&id.to_string()).ok_or_else(|| {
                ConsumerError::from(SourceConfigError {
                    key: "lease_assignment",
                    problem: "this leader store cannot keep several streams apart".into(),
                })
            })?),
            None => None,
        };
        out.push(OneStream {
            table: table.scoped(&id),
            status: status.scoped(format!("{id}:")),
            config: one,
            leader_store,
            id,
        });
    }
    Ok(out)
}

/// Runs `run_one` for every stream until `shutdown` (or the first error of
/// one, which stops the others), then merges their outcomes: the first
/// error, else every unfinished shard by its lease key.
pub(crate) async fn run_all<F, Fut>(
    streams: Vec<OneStream>,
    shutdown: CancellationToken,
    run_one: F,
) -> Result<(), ConsumerError>
where
    F: Fn(OneStream, CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), ConsumerError>>,
{
    // One stream's fatal error stops the others (and the worker).
    let stop = shutdown.child_token();
    let mut runs = Vec::with_capacity(streams.len());
    for one in streams {
        let id = one.id.clone();
        // Every log line of the stream's balancing loop, renewer and
        // readers names the stream (shard ids repeat across streams).
        let span = tracing::info_span!("stream", stream = %id.name);
        let stop = stop.clone();
        let run = run_one(one, stop.clone());
        runs.push(async move {
            let r = Box::pin(run.instrument(span)).await;
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

/// The stream's identity in lease keys: the configured account id and
/// creation epoch, else DescribeStreamSummary's (the account from the
/// stream ARN, the epoch from its creation time in seconds, as the KCL's
/// `StreamIdentifier.multiStreamInstance` takes them).
pub(crate) async fn identify(
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
            let (arn, created) = describe_stream(kinesis, &entry.stream).await?;
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
    SourceConfigError {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinesis::config::StreamEntry;

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
