//! Where `lease_assignment = "leader"` keeps its leader lock and worker
//! heartbeats: the [`LeaderStore`] trait, and [`DynamoLeaderStore`], its
//! implementation over Tidemark's coordinator table.
//!
//! Why the coordinator table and not the lease table: every item of a lease
//! table is taken for a shard lease by KCL 2.x workers (and by Tidemark's
//! listing mode), so extra items there would be leased and "read". The
//! coordinator table (hash key `leaseKey`, on-demand, already created by
//! every worker for the maintenance lease) is small, so the leader lists
//! its heartbeats with a Scan of a few KB, and the KCL v3 keeps the same two
//! things in tables of its own (coordinator state, worker metrics).
//!
//! Items (each scoped by the lease table's name, so applications sharing one
//! coordinator table do not mix):
//! - the lock, `leaseKey` = `kinesis-leader#<lease table>`: `leaseOwner`,
//!   `leaseCounter` (bumped by every write; every write is conditional on
//!   it) and `lastUpdateTime` (the leader's wall clock, epoch ms);
//! - one heartbeat per worker, `leaseKey` =
//!   `kinesis-worker#<lease table>#<worker id>`: `workerId` and
//!   `lastUpdateTime` (the worker's wall clock, epoch ms). No `leaseOwner`,
//!   so heartbeats never enter the lease owner index.
//!
//! Wall clocks: a heartbeat or lock is stale when its `lastUpdateTime` is
//! older than the failover time plus `max_clock_skew` on the reader's
//! clock, as the KCL v3 judges its worker metrics' `lastUpdateTime`. This is
//! safe because a worker stops reading once its own last successful
//! heartbeat is `failover_time - margin` old on its monotonic clock; it needs
//! wall clocks within `max_clock_skew` of each other (NTP).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use futures::future::BoxFuture;

use super::table::LeaseTable;
use super::timing::LeaseTiming;
use crate::error::{AwsError, ConsumerError};

/// One worker's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The worker id.
    pub worker: String,
    /// When it was written, on the writer's wall clock (epoch ms).
    pub at_ms: u64,
}

/// The leader lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderLock {
    /// The leader.
    pub owner: String,
    /// Fencing counter, bumped by every write.
    pub counter: u64,
    /// When it was last written, on the leader's wall clock (epoch ms).
    pub at_ms: u64,
}

/// The calls leader mode makes on its coordination items, one attempt each
/// (a pass that fails one simply tries again at the next pass).
pub trait LeaderStore: Send + Sync + std::fmt::Debug {
    /// Creates the table unless it exists, and waits until it is usable.
    fn ensure(&self, timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>>;

    /// The wall clock heartbeats and the lock are stamped with (epoch ms;
    /// simulated time in the fleet simulator).
    fn now_ms(&self) -> u64;

    /// Writes `worker`'s heartbeat (unconditional).
    fn heartbeat<'a>(&'a self, worker: &'a str, at_ms: u64) -> BoxFuture<'a, Result<(), AwsError>>;

    /// Deletes `worker`'s heartbeat (clean shutdown).
    fn remove_heartbeat<'a>(&'a self, worker: &'a str) -> BoxFuture<'a, Result<(), AwsError>>;

    /// Every heartbeat of this application (eventually consistent).
    fn heartbeats(&self) -> BoxFuture<'_, Result<Vec<Heartbeat>, AwsError>>;

    /// The lock, `None` when there is none (eventually consistent: a stale
    /// answer can only make a write on it fail its condition).
    fn lock(&self) -> BoxFuture<'_, Result<Option<LeaderLock>, AwsError>>;

    /// Writes the lock in `me`'s name if its counter is still `seen`
    /// (`None`: no lock item exists); fails with `ConditionFailed` otherwise.
    fn write_lock<'a>(
        &'a self,
        me: &'a str,
        seen: Option<u64>,
        at_ms: u64,
    ) -> BoxFuture<'a, Result<(), AwsError>>;

    /// Deletes the lock if `me` holds it at `counter`.
    fn release_lock<'a>(&'a self, me: &'a str, counter: u64)
    -> BoxFuture<'a, Result<(), AwsError>>;

    /// The items of one stream of a multi-stream application (`source.streams`
    /// runs a coordinator per stream, each electing its own leader), `None`
    /// when this store cannot keep them apart.
    fn scoped(&self, _scope: &str) -> Option<Arc<dyn LeaderStore>> {
        None
    }
}

/// Wall-clock milliseconds since the epoch.
pub(crate) fn system_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The lock and heartbeats in a DynamoDB coordinator table.
#[derive(Debug, Clone)]
pub struct DynamoLeaderStore {
    client: Client,
    table: String,
    lock_key: String,
    worker_prefix: String,
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn num(item: &HashMap<String, AttributeValue>, k: &str) -> u64 {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl DynamoLeaderStore {
    /// The items of the application whose lease table is `lease_table`, in
    /// coordinator table `table`.
    pub fn new(client: Client, table: impl Into<String>, lease_table: &str) -> Self {
        Self {
            client,
            table: table.into(),
            lock_key: format!("kinesis-leader#{lease_table}"),
            worker_prefix: format!("kinesis-worker#{lease_table}#"),
        }
    }

    async fn ensure_table(&self, timeout: Duration) -> Result<(), ConsumerError> {
        // The maintenance lease's table: same key schema, same creation.
        LeaseTable::with_timing(self.client.clone(), &self.table, LeaseTiming::default())
            .with_role("coordinator table")
            .create_if_absent(timeout)
            .await
    }

    async fn put_heartbeat(&self, worker: &str, at_ms: u64) -> Result<(), AwsError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item("leaseKey", s(&format!("{}{worker}", self.worker_prefix)))
            .item("workerId", s(worker))
            .item("lastUpdateTime", n(at_ms))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::new("PutItem(heartbeat)", &e))
    }

    async fn delete_heartbeat(&self, worker: &str) -> Result<(), AwsError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("leaseKey", s(&format!("{}{worker}", self.worker_prefix)))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::new("DeleteItem(heartbeat)", &e))
    }

    async fn scan_heartbeats(&self) -> Result<Vec<Heartbeat>, AwsError> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(leaseKey, :p)")
                .expression_attribute_values(":p", s(&self.worker_prefix))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| AwsError::new("Scan(heartbeats)", &e))?;
            for item in page.items() {
                if let Some(w) = item.get("workerId").and_then(|v| v.as_s().ok()) {
                    out.push(Heartbeat {
                        worker: w.clone(),
                        at_ms: num(item, "lastUpdateTime"),
                    });
                }
            }
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(out),
            }
        }
    }

    async fn get_lock(&self) -> Result<Option<LeaderLock>, AwsError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("leaseKey", s(&self.lock_key))
            .send()
            .await
            .map_err(|e| AwsError::new("GetItem(leader lock)", &e))?;
        Ok(out.item().and_then(|item| {
            Some(LeaderLock {
                owner: item.get("leaseOwner")?.as_s().ok()?.clone(),
                counter: num(item, "leaseCounter"),
                at_ms: num(item, "lastUpdateTime"),
            })
        }))
    }

    async fn put_lock(&self, me: &str, seen: Option<u64>, at_ms: u64) -> Result<(), AwsError> {
        let req = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("leaseKey", s(&self.lock_key))
            .item("leaseOwner", s(me))
            .item("leaseCounter", n(seen.map_or(1, |c| c + 1)))
            .item("lastUpdateTime", n(at_ms));
        let req = match seen {
            None => req.condition_expression("attribute_not_exists(leaseKey)"),
            Some(c) => req
                .condition_expression("leaseCounter = :c")
                .expression_attribute_values(":c", n(c)),
        };
        req.send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::new("PutItem(leader lock)", &e))
    }

    async fn delete_lock(&self, me: &str, counter: u64) -> Result<(), AwsError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("leaseKey", s(&self.lock_key))
            .condition_expression("leaseCounter = :c AND leaseOwner = :me")
            .expression_attribute_values(":c", n(counter))
            .expression_attribute_values(":me", s(me))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::new("DeleteItem(leader lock)", &e))
    }
}

impl LeaderStore for DynamoLeaderStore {
    fn scoped(&self, scope: &str) -> Option<Arc<dyn LeaderStore>> {
        Some(Arc::new(Self {
            client: self.client.clone(),
            table: self.table.clone(),
            lock_key: format!("{}#{scope}", self.lock_key),
            worker_prefix: format!("{}{scope}#", self.worker_prefix),
        }))
    }

    fn ensure(&self, timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
        Box::pin(self.ensure_table(timeout))
    }

    fn now_ms(&self) -> u64 {
        system_now_ms()
    }

    fn heartbeat<'a>(&'a self, worker: &'a str, at_ms: u64) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(self.put_heartbeat(worker, at_ms))
    }

    fn remove_heartbeat<'a>(&'a self, worker: &'a str) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(self.delete_heartbeat(worker))
    }

    fn heartbeats(&self) -> BoxFuture<'_, Result<Vec<Heartbeat>, AwsError>> {
        Box::pin(self.scan_heartbeats())
    }

    fn lock(&self) -> BoxFuture<'_, Result<Option<LeaderLock>, AwsError>> {
        Box::pin(self.get_lock())
    }

    fn write_lock<'a>(
        &'a self,
        me: &'a str,
        seen: Option<u64>,
        at_ms: u64,
    ) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(self.put_lock(me, seen, at_ms))
    }

    fn release_lock<'a>(
        &'a self,
        me: &'a str,
        counter: u64,
    ) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(self.delete_lock(me, counter))
    }
}
