//! Per-shard status, readable while the consumer runs (health checks, tests).
//! Keyed by shard id, or by lease key (`account:stream:epoch:shardId`) with
//! several streams.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What a shard's reader is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardState {
    /// Lease held; waiting for parent shards to reach SHARD_END.
    #[default]
    WaitingForParents,
    /// Reading.
    Reading,
    /// Read to its end; waiting for the last acknowledgements.
    Draining,
    /// SHARD_END checkpointed.
    Ended,
    /// Past the lease deadline without a renewal: submitting nothing and
    /// checkpointing nothing until a renewal succeeds (or the lease is lost).
    Paused,
    /// Lease lost to another worker (or not renewed in time).
    Lost,
    /// Released at shutdown.
    Released,
}

/// Status of one shard as seen by this worker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardStatus {
    /// True while this worker holds the lease.
    pub owned: bool,
    /// What the reader is doing.
    pub state: ShardState,
    /// Last checkpoint written (`sequence.sub` or a sentinel).
    pub checkpoint: Option<String>,
    /// MillisBehindLatest of the last GetRecords.
    pub millis_behind_latest: Option<i64>,
    /// Records delivered and not yet acknowledged.
    pub in_flight: usize,
    /// User records delivered since this worker took the lease.
    pub records_read: u64,
    /// Checkpoint lag: records read that the last written checkpoint does
    /// not cover (acknowledged or not).
    pub checkpoint_lag_records: u64,
    /// Checkpoint lag: how long ago the oldest record the last written
    /// checkpoint does not cover was read, ms (0 when it covers all).
    pub checkpoint_lag_ms: u64,
}

/// Shared, cloneable view of every shard this worker has touched.
#[derive(Debug, Clone, Default)]
pub struct StatusHandle {
    inner: Arc<Mutex<BTreeMap<String, ShardStatus>>>,
    /// Multi-stream mode: prepended to each shard id (`account:stream:epoch:`),
    /// so the shards of every stream share one map under their lease keys.
    prefix: Option<Arc<str>>,
}

impl StatusHandle {
    /// A copy of every shard's status.
    pub fn snapshot(&self) -> BTreeMap<String, ShardStatus> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Shards whose lease this worker holds now.
    pub fn owned_shards(&self) -> Vec<String> {
        self.snapshot()
            .into_iter()
            .filter(|(_, s)| s.owned)
            .map(|(k, _)| k)
            .collect()
    }

    /// Updates one shard's status.
    pub(crate) fn update(&self, shard: &str, f: impl FnOnce(&mut ShardStatus)) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = match &self.prefix {
            Some(p) => format!("{p}{shard}"),
            None => shard.to_string(),
        };
        f(map.entry(key).or_default());
    }

    /// The same map, with this handle's shards keyed `prefix` + shard id.
    pub(crate) fn scoped(&self, prefix: String) -> Self {
        Self {
            inner: self.inner.clone(),
            prefix: Some(prefix.into()),
        }
    }
}
