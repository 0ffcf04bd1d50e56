//! [`StreamRun`]: what every task of one running Kinesis source (one
//! stream: its balancing loop, renewer, cleaner and shard readers) shares.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::ConsumerError;
use crate::kinesis::config::KinesisConfig;
use crate::kinesis::held::HeldLeases;
use crate::kinesis::lease::item::Lease;
use crate::kinesis::lease::leader_store::LeaderStore;
use crate::kinesis::lease::table::LeaseTable;
use crate::kinesis::status::StatusHandle;
use crate::record::Record;
use crate::source::Governors;

/// One stream's running source.
#[derive(Debug)]
pub(crate) struct StreamRun {
    pub(crate) config: KinesisConfig,
    pub(crate) kinesis: aws_sdk_kinesis::Client,
    pub(crate) table: LeaseTable,
    pub(crate) status: StatusHandle,
    /// The leases held now, with their readers.
    pub(crate) held: HeldLeases,
    /// Latest lease-table snapshot, for parent checks.
    pub(crate) snapshot: watch::Sender<Arc<Vec<Lease>>>,
    /// A shard ended: run shard discovery now.
    pub(crate) sync_now: Notify,
    /// Leader mode: this worker holds the leader lock (finished-lease
    /// cleanup runs only there; followers keep a partial snapshot).
    pub(crate) leading: AtomicBool,
    pub(crate) sink: mpsc::Sender<Vec<Record>>,
    pub(crate) shutdown: CancellationToken,
    /// Set when the shutdown drain started; readers finish by this deadline.
    drain_deadline: Mutex<Option<Instant>>,
    /// Governors of the Kinesis endpoint (admits GetRecords) and of
    /// DynamoDB (while its breaker is open, readers hold their GetRecords:
    /// the records could not be written anyway).
    pub(crate) governors: Option<Governors>,
    /// Shards whose drain did not finish (final checkpoint or release
    /// failed, or the reader was aborted): `run` then returns an error.
    unfinished: Mutex<Vec<String>>,
    /// `fan_out`: the registered stream consumer's ARN (`None`: polling).
    pub(crate) consumer_arn: Option<String>,
    /// A reader's error no retry can fix (access denied, a KMS key the role
    /// cannot use): the source stops with it rather than retry for ever.
    fatal: Mutex<Option<ConsumerError>>,
    /// `lease_assignment = "leader"`: the leader lock and heartbeats.
    pub(crate) leader_store: Option<Arc<dyn LeaderStore>>,
}

/// The parts of a [`StreamRun`] its source brings.
#[derive(Debug)]
pub(crate) struct RunParts {
    pub(crate) config: KinesisConfig,
    pub(crate) kinesis: aws_sdk_kinesis::Client,
    pub(crate) table: LeaseTable,
    pub(crate) status: StatusHandle,
    pub(crate) sink: mpsc::Sender<Vec<Record>>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) governors: Option<Governors>,
    pub(crate) consumer_arn: Option<String>,
    pub(crate) leader_store: Option<Arc<dyn LeaderStore>>,
}

impl StreamRun {
    pub(crate) fn new(parts: RunParts) -> Self {
        let RunParts {
            config,
            kinesis,
            table,
            status,
            sink,
            shutdown,
            governors,
            consumer_arn,
            leader_store,
        } = parts;
        Self {
            config,
            kinesis,
            table,
            status,
            held: HeldLeases::default(),
            snapshot: watch::Sender::new(Arc::new(Vec::new())),
            sync_now: Notify::new(),
            leading: AtomicBool::new(false),
            sink,
            shutdown,
            drain_deadline: Mutex::new(None),
            governors,
            unfinished: Mutex::new(Vec::new()),
            consumer_arn,
            fatal: Mutex::new(None),
            leader_store,
        }
    }

    /// Shard `shard`'s drain did not finish.
    pub(crate) fn unfinished(&self, shard: &str) {
        self.unfinished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(shard.to_string());
    }

    /// The shards whose drain did not finish, sorted, once each.
    pub(crate) fn take_unfinished(&self) -> Vec<String> {
        let mut shards = std::mem::take(
            &mut *self
                .unfinished
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        shards.sort();
        shards.dedup();
        shards
    }

    /// Stops the whole source with `e` (the first such error is kept).
    pub(crate) fn fail(&self, e: ConsumerError) {
        self.fatal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(e);
        self.shutdown.cancel();
    }

    /// The error that stopped the source, if any.
    pub(crate) fn take_fatal(&self) -> Option<ConsumerError> {
        self.fatal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Readers finish their shutdown drain by `deadline`.
    pub(crate) fn set_drain_deadline(&self, deadline: Instant) {
        *self
            .drain_deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(deadline);
    }

    /// When readers must finish their shutdown drain (set at shutdown; a
    /// reader stopping on its own gets `shutdown_grace` from now).
    pub(crate) fn drain_deadline(&self) -> Instant {
        self.drain_deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or_else(|| Instant::now() + self.config.shutdown_grace)
    }

    /// Labels of a per-shard metric: `shard`, plus `stream` (its name) in
    /// multi-stream mode, where shard ids repeat across streams.
    pub(crate) fn shard_labels(&self, shard: &str) -> Vec<metrics::Label> {
        shard_labels(&self.table, shard)
    }
}

/// Labels of a per-shard metric of `table`'s stream (see
/// [`StreamRun::shard_labels`]).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinesis::lease::key::StreamIdentifier;

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
}
