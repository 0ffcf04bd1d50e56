//! Where lease items live: the [`LeaseStore`] trait under
//! [`LeaseTable`](super::table::LeaseTable), and its DynamoDB implementation
//! [`DynamoStore`].
//!
//! A store sends one attempt of one call and reports its outcome; retries,
//! deadlines, fencing and the re-read after an unanswered write stay in
//! [`LeaseTable`](super::table::LeaseTable) and
//! [`write_once`](super::write::write_once), so every store gets the same
//! lease protocol. The trait exists so that the fleet simulator
//! (`tools/fleet-sim`) runs the real lease code against an in-memory table
//! with DynamoDB's conditional-write semantics and capacity accounting.
//!
//! Guarantees of an implementation: a [`LeaseWrite`] is applied only when
//! its condition holds (`leaseCounter`, and `leaseOwner` for a holder's own
//! writes), atomically, and fails with [`ErrorClass::ConditionFailed`]
//! otherwise; items keep the KCL 2.x format ([`Lease::to_item`]).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, CreateGlobalSecondaryIndexAction,
    GlobalSecondaryIndex, GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType,
    Projection, ProjectionType, ProvisionedThroughput, ScalarAttributeType, TableStatus,
};
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::item::{Checkpoint, Lease};
use super::kcl::{Classified, OtherItem, SideTableNames, SideTables, classify};
use crate::error::{AwsError, ConsumerError, ErrorClass};

mod side;

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct ScanPage {
    /// The leases of this page.
    pub leases: Vec<Lease>,
    /// The items of this page that are not leases (the KCL's own items,
    /// unknown and unreadable ones): never taken, balanced or written.
    pub others: Vec<OtherItem>,
    /// The first KCL 3.x attribute seen on a lease of this page, as
    /// "lease `k` carries throughputKBps", if any.
    pub kcl3_sign: Option<String>,
    /// The key to continue after; `None` on the last page.
    pub next: Option<String>,
}

/// One conditional write of a lease item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseWrite {
    /// Put `lease` unless an item with its key exists.
    Create(Lease),
    /// Take (or steal) a lease whose counter is still `counter`: owner set
    /// to `me`, counter bumped, `ownerSwitchesSinceCheckpoint` += `switches`,
    /// a KCL hand-off's `checkpointOwner` removed (as the KCL's own take).
    Acquire {
        /// Lease key.
        key: String,
        /// The counter observed.
        counter: u64,
        /// The new owner.
        me: String,
        /// 1 when the owner changes, else 0.
        switches: u64,
    },
    /// Bump the counter of a lease held by `me` at `counter`.
    Renew {
        /// Lease key.
        key: String,
        /// The holder.
        me: String,
        /// The holder's counter.
        counter: u64,
    },
    /// Bump the counter and clear the owner of a lease held by `me`.
    Release {
        /// Lease key.
        key: String,
        /// The holder.
        me: String,
        /// The holder's counter.
        counter: u64,
    },
    /// Bump the counter and write the checkpoint (and the children at
    /// shard end) of a lease held by `me`; a KCL prepared checkpoint
    /// (`pendingCheckpoint*`) is removed, as the KCL's own checkpoint does.
    Checkpoint {
        /// Lease key.
        key: String,
        /// The holder.
        me: String,
        /// The holder's counter.
        counter: u64,
        /// The new checkpoint.
        checkpoint: Checkpoint,
        /// Child shard ids (at shard end), else empty.
        children: Vec<String>,
    },
}

impl LeaseWrite {
    /// The lease key written.
    pub fn key(&self) -> &str {
        match self {
            Self::Create(l) => &l.key,
            Self::Acquire { key, .. }
            | Self::Renew { key, .. }
            | Self::Release { key, .. }
            | Self::Checkpoint { key, .. } => key,
        }
    }

    /// The operation's name in logs and errors.
    pub fn op(&self) -> &'static str {
        match self {
            Self::Create(_) => "PutItem",
            Self::Acquire { .. } => "UpdateItem(acquire)",
            Self::Renew { .. } => "UpdateItem(renew)",
            Self::Release { .. } => "UpdateItem(release)",
            Self::Checkpoint { .. } => "UpdateItem(checkpoint)",
        }
    }

    /// Applies the write to `item` (the current item, `None` when absent)
    /// as DynamoDB would: `Err` with [`ErrorClass::ConditionFailed`] when the
    /// condition does not hold, else the new item. The reference semantics
    /// for in-memory stores; the DynamoDB store sends the same condition.
    pub fn apply(&self, item: Option<&Lease>) -> Result<Lease, AwsError> {
        let refused = || AwsError {
            op: self.op(),
            class: ErrorClass::ConditionFailed,
            message: "The conditional request failed".into(),
        };
        // A holder's writes also need no KCL hand-off under way: a KCL
        // leader starting one does not bump the counter.
        let held = |me: &str, counter: u64| -> Result<Lease, AwsError> {
            match item {
                Some(l)
                    if l.counter == counter
                        && l.owner.as_deref() == Some(me)
                        && l.checkpoint_owner.is_none() =>
                {
                    let mut l = l.clone();
                    l.counter = counter + 1;
                    Ok(l)
                }
                _ => Err(refused()),
            }
        };
        match self {
            Self::Create(lease) => match item {
                Some(_) => Err(refused()),
                None => Ok(lease.clone()),
            },
            Self::Acquire {
                counter,
                me,
                switches,
                ..
            } => match item {
                Some(l) if l.counter == *counter => {
                    let mut l = l.clone();
                    l.owner = Some(me.clone());
                    l.checkpoint_owner = None;
                    l.counter = counter + 1;
                    l.owner_switches_since_checkpoint += switches;
                    Ok(l)
                }
                _ => Err(refused()),
            },
            Self::Renew { me, counter, .. } => held(me, *counter),
            Self::Release { me, counter, .. } => {
                let mut l = held(me, *counter)?;
                l.owner = None;
                Ok(l)
            }
            Self::Checkpoint {
                me,
                counter,
                checkpoint,
                children,
                ..
            } => {
                let mut l = held(me, *counter)?;
                l.checkpoint = checkpoint.clone();
                l.owner_switches_since_checkpoint = 0;
                if !children.is_empty() {
                    l.children = children.clone();
                }
                Ok(l)
            }
        }
    }
}

/// The calls the lease code makes on its table, one attempt each.
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// The table name (errors and logs).
    fn name(&self) -> &str;

    /// Creates the table unless it exists and waits (until `timeout`) for it
    /// to be usable; an existing table's key schema is checked.
    fn ensure_table(&self, timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>>;

    /// One page of a Scan, starting after `start`; `consistent` asks for a
    /// strongly consistent read.
    fn scan_page(
        &self,
        consistent: bool,
        start: Option<String>,
    ) -> BoxFuture<'_, Result<ScanPage, ConsumerError>>;

    /// One attempt of a strongly consistent GetItem.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Lease>, AwsError>>;

    /// One attempt of a conditional write (see [`LeaseWrite::apply`]).
    fn write<'a>(&'a self, write: &'a LeaseWrite) -> BoxFuture<'a, Result<(), AwsError>>;

    /// The keys of the leases owned by `owner`, from the owner index
    /// ([`OWNER_INDEX`], keys only, eventually consistent: a lease assigned
    /// a moment ago may be missing, one moved away may still show).
    fn owned_by<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<Vec<String>, ConsumerError>>;

    /// Makes sure the owner index exists and is ACTIVE (adding it to an
    /// existing table when absent), within `timeout`; refuses with a
    /// message naming the fix when it cannot.
    fn ensure_owner_index(&self, timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>>;

    /// One attempt of a conditional delete (see [`LeaseDelete::apply`]).
    fn delete<'a>(&'a self, delete: &'a LeaseDelete) -> BoxFuture<'a, Result<(), AwsError>>;

    /// Reads (never writes) the KCL 3.0-3.4 side tables named in `names`:
    /// `Migration3.0` and `TableMigration3.5` of the coordinator-state
    /// table, every item of the worker-metrics table. A store without such
    /// tables (the fleet simulator's) has none.
    fn kcl_side_tables<'a>(
        &'a self,
        names: &'a SideTableNames,
    ) -> BoxFuture<'a, Result<SideTables, ConsumerError>> {
        let _ = names;
        Box::pin(async { Ok(SideTables::default()) })
    }
}

/// The conditional delete of a lease item: only while its `leaseCounter`
/// and `checkpoint` are still those seen, so a lease that anybody wrote
/// since (a take, a renewal, a checkpoint) is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseDelete {
    /// Lease key.
    pub key: String,
    /// The counter observed.
    pub counter: u64,
    /// The checkpoint observed.
    pub checkpoint: Checkpoint,
}

impl LeaseDelete {
    /// Applies the delete to `item` as DynamoDB would: `Err` with
    /// [`ErrorClass::ConditionFailed`] when the item is absent or moved on
    /// (the reference semantics for in-memory stores).
    pub fn apply(&self, item: Option<&Lease>) -> Result<(), AwsError> {
        match item {
            Some(l) if l.counter == self.counter && l.checkpoint == self.checkpoint => Ok(()),
            _ => Err(AwsError {
                op: "DeleteItem",
                class: ErrorClass::ConditionFailed,
                message: "The conditional request failed".into(),
            }),
        }
    }
}

/// The global secondary index on `leaseOwner` (hash) and `leaseKey`
/// (range), keys only: the KCL v3's name and shape, so a table serves
/// both. Renewals and checkpoints change no key of it, so they cost no
/// index write; only a change of owner does.
pub const OWNER_INDEX: &str = "LeaseOwnerToLeaseKeyIndex";

/// The lease table in DynamoDB.
///
/// Conditional writes and their re-reads use a copy of the client with SDK
/// retries off and the attempt timeout given, since
/// [`write_once`](super::write::write_once) decides on retries. Table set-up
/// and the Scan keep the client as given.
#[derive(Debug, Clone)]
pub(crate) struct DynamoStore {
    client: Client,
    writes: Client,
    table: String,
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

impl DynamoStore {
    /// The table `table`; single write attempts end after `attempt`.
    pub(crate) fn new(client: Client, table: impl Into<String>, attempt: Duration) -> Self {
        let conf = client.config();
        let connect = conf.timeout_config().and_then(|t| t.connect_timeout());
        let mut timeouts = aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(attempt);
        timeouts.set_connect_timeout(connect);
        let timeouts = timeouts.build();
        let writes = Client::from_conf(
            conf.to_builder()
                .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
                .timeout_config(timeouts)
                .build(),
        );
        Self {
            client,
            writes,
            table: table.into(),
        }
    }

    fn bad(&self, problem: &str) -> ConsumerError {
        ConsumerError::LeaseTable {
            table: self.table.clone(),
            problem: problem.to_string(),
        }
    }

    async fn ensure(&self, timeout: Duration) -> Result<(), ConsumerError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self
                .client
                .describe_table()
                .table_name(&self.table)
                .send()
                .await
            {
                Ok(out) => {
                    let Some(t) = out.table() else {
                        return Err(self.bad("DescribeTable returned no table"));
                    };
                    super::item::lease_key_spec()
                        .check(&self.table, "lease table", t)
                        .map_err(ConsumerError::KeySchema)?;
                    if t.table_status() == Some(&TableStatus::Active) {
                        return Ok(());
                    }
                }
                Err(e) => {
                    let err = AwsError::new("DescribeTable", &e);
                    match err.class {
                        ErrorClass::NotFound => self.create().await?,
                        ErrorClass::Retry | ErrorClass::Throttled => {}
                        _ => return Err(err.into()),
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(self.bad("not ACTIVE in time"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn create(&self) -> Result<(), ConsumerError> {
        let res = self
            .client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("leaseKey")
                    .key_type(KeyType::Hash)
                    .build()
                    .map_err(|e| self.bad(&e.to_string()))?,
            )
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("leaseKey")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(|e| self.bad(&e.to_string()))?,
            )
            .attribute_definitions(self.owner_attribute()?)
            .global_secondary_indexes(self.owner_index()?)
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) => {
                let err = AwsError::new("CreateTable", &e);
                // ResourceInUse: another worker created it first.
                if err.class == ErrorClass::Retry || err.class == ErrorClass::Throttled {
                    Ok(())
                } else {
                    Err(err.into())
                }
            }
        }
    }

    fn owner_attribute(&self) -> Result<AttributeDefinition, ConsumerError> {
        AttributeDefinition::builder()
            .attribute_name("leaseOwner")
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| self.bad(&e.to_string()))
    }

    fn owner_index(&self) -> Result<GlobalSecondaryIndex, ConsumerError> {
        let key = |name: &str, kind| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
                .map_err(|e| self.bad(&e.to_string()))
        };
        GlobalSecondaryIndex::builder()
            .index_name(OWNER_INDEX)
            .key_schema(key("leaseOwner", KeyType::Hash)?)
            .key_schema(key("leaseKey", KeyType::Range)?)
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::KeysOnly)
                    .build(),
            )
            .build()
            .map_err(|e| self.bad(&e.to_string()))
    }

    /// DescribeTable until the owner index is ACTIVE; adds it (UpdateTable)
    /// when the table has none.
    async fn ensure_index(&self, timeout: Duration) -> Result<(), ConsumerError> {
        let deadline = Instant::now() + timeout;
        let mut asked = false;
        loop {
            let out = self
                .client
                .describe_table()
                .table_name(&self.table)
                .send()
                .await
                .map_err(|e| AwsError::new("DescribeTable", &e))?;
            let index = out.table().and_then(|t| {
                t.global_secondary_indexes()
                    .iter()
                    .find(|i| i.index_name() == Some(OWNER_INDEX))
            });
            match index {
                Some(i) if i.index_status() == Some(&IndexStatus::Active) => return Ok(()),
                Some(_) => {}
                None if !asked => {
                    tracing::info!(table = %self.table, index = OWNER_INDEX, "adding the lease owner index");
                    // A provisioned table's index needs its own capacity:
                    // the table's, as the index is far smaller.
                    let provisioned = out
                        .table()
                        .filter(|t| {
                            t.billing_mode_summary().and_then(|b| b.billing_mode())
                                != Some(&BillingMode::PayPerRequest)
                        })
                        .and_then(|t| t.provisioned_throughput())
                        .and_then(|p| {
                            let (r, w) = (p.read_capacity_units()?, p.write_capacity_units()?);
                            (r > 0 && w > 0).then(|| {
                                ProvisionedThroughput::builder()
                                    .read_capacity_units(r)
                                    .write_capacity_units(w)
                                    .build()
                            })
                        })
                        .transpose()
                        .map_err(|e| self.bad(&e.to_string()))?;
                    let index = self.owner_index()?;
                    let update = GlobalSecondaryIndexUpdate::builder()
                        .create(
                            CreateGlobalSecondaryIndexAction::builder()
                                .index_name(OWNER_INDEX)
                                .set_key_schema(Some(index.key_schema().to_vec()))
                                .set_projection(index.projection().cloned())
                                .set_provisioned_throughput(provisioned)
                                .build()
                                .map_err(|e| self.bad(&e.to_string()))?,
                        )
                        .build();
                    let res = self
                        .client
                        .update_table()
                        .table_name(&self.table)
                        .attribute_definitions(self.owner_attribute()?)
                        .global_secondary_index_updates(update)
                        .send()
                        .await;
                    if let Err(e) = res {
                        let e = AwsError::new("UpdateTable", &e);
                        return Err(self.bad(&format!(
                            "has no {OWNER_INDEX} index, which lease_assignment = \"leader\" needs, and adding it failed ({e}); add a global secondary index {OWNER_INDEX} (hash key leaseOwner S, range key leaseKey S, projection KEYS_ONLY) or set lease_assignment = \"listing\""
                        )));
                    }
                    asked = true;
                }
                None => {}
            }
            if Instant::now() >= deadline {
                return Err(self.bad(&format!(
                    "index {OWNER_INDEX} not ACTIVE within {timeout:?} (large tables take longer to index: start again once DescribeTable shows it ACTIVE)"
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn query_owner(&self, owner: &str) -> Result<Vec<String>, ConsumerError> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(OWNER_INDEX)
                .key_condition_expression("leaseOwner = :o")
                .expression_attribute_values(":o", AttributeValue::S(owner.to_string()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| AwsError::new("Query", &e))?;
            out.extend(
                page.items()
                    .iter()
                    .filter_map(|i| i.get("leaseKey").and_then(|v| v.as_s().ok()).cloned()),
            );
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(out),
            }
        }
    }

    async fn scan(
        &self,
        consistent: bool,
        start: Option<String>,
    ) -> Result<ScanPage, ConsumerError> {
        let page = self
            .client
            .scan()
            .table_name(&self.table)
            .consistent_read(consistent)
            .set_exclusive_start_key(
                start.map(|k| HashMap::from([("leaseKey".to_string(), AttributeValue::S(k))])),
            )
            .send()
            .await
            .map_err(|e| AwsError::new("Scan", &e))?;
        let mut out = ScanPage {
            leases: Vec::with_capacity(page.items().len()),
            ..ScanPage::default()
        };
        for item in page.items() {
            match classify(item) {
                Classified::Lease(lease, sign) => {
                    if let Some(a) = sign
                        && out.kcl3_sign.is_none()
                    {
                        out.kcl3_sign = Some(format!("lease `{}` carries {a}", lease.key));
                    }
                    out.leases.push(lease);
                }
                Classified::Other(other) => out.others.push(other),
            }
        }
        out.next = page
            .last_evaluated_key()
            .and_then(|k| k.get("leaseKey"))
            .and_then(|v| v.as_s().ok())
            .cloned();
        Ok(out)
    }

    async fn get_item(&self, key: &str) -> Result<Option<Lease>, AwsError> {
        let out = self
            .writes
            .get_item()
            .table_name(&self.table)
            .key("leaseKey", AttributeValue::S(key.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::new("GetItem", &e))?;
        match out.item().map(classify) {
            None => Ok(None),
            Some(Classified::Lease(lease, _)) => Ok(Some(lease)),
            Some(Classified::Other(o)) => Err(AwsError {
                op: "GetItem",
                class: ErrorClass::Fatal,
                message: format!(
                    "item {key} in {} is not a lease ({}): Tidemark leaves it alone",
                    self.table,
                    o.kind.label()
                ),
            }),
        }
    }

    fn owned_update(
        &self,
        key: &str,
        me: &str,
        counter: u64,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.writes
            .update_item()
            .table_name(&self.table)
            .key("leaseKey", AttributeValue::S(key.to_string()))
            // No KCL hand-off under way: a KCL leader starting one does
            // not bump the counter, so the counter alone would not see it.
            .condition_expression(
                "leaseCounter = :c AND leaseOwner = :me AND attribute_not_exists(checkpointOwner)",
            )
            .expression_attribute_values(":c", n(counter))
            .expression_attribute_values(":n", n(counter + 1))
            .expression_attribute_values(":me", AttributeValue::S(me.to_string()))
    }

    async fn send(&self, w: &LeaseWrite) -> Result<(), AwsError> {
        let op = w.op();
        let req = match w {
            LeaseWrite::Create(lease) => {
                return self
                    .writes
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(lease.to_item()))
                    .condition_expression("attribute_not_exists(leaseKey)")
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| AwsError::new(op, &e));
            }
            LeaseWrite::Acquire {
                key,
                counter,
                me,
                switches,
            } => self
                .writes
                .update_item()
                .table_name(&self.table)
                .key("leaseKey", AttributeValue::S(key.clone()))
                .condition_expression("attribute_exists(leaseKey) AND leaseCounter = :c")
                // As the KCL's takeLease: a hand-off the KCL left unfinished
                // ends with the take.
                .update_expression(
                    "SET leaseOwner = :me, leaseCounter = :n ADD ownerSwitchesSinceCheckpoint :s REMOVE checkpointOwner",
                )
                .expression_attribute_values(":c", n(*counter))
                .expression_attribute_values(":n", n(counter + 1))
                .expression_attribute_values(":me", AttributeValue::S(me.clone()))
                .expression_attribute_values(":s", n(*switches)),
            LeaseWrite::Renew { key, me, counter } => self
                .owned_update(key, me, *counter)
                .update_expression("SET leaseCounter = :n"),
            LeaseWrite::Release { key, me, counter } => self
                .owned_update(key, me, *counter)
                .update_expression("SET leaseCounter = :n REMOVE leaseOwner"),
            LeaseWrite::Checkpoint {
                key,
                me,
                counter,
                checkpoint,
                children,
            } => {
                let (cp, sub) = checkpoint.to_parts();
                let req = self
                    .owned_update(key, me, *counter)
                    .expression_attribute_values(":cp", AttributeValue::S(cp.to_string()))
                    .expression_attribute_values(":sub", n(sub))
                    .expression_attribute_values(":zero", n(0));
                let set = "SET leaseCounter = :n, checkpoint = :cp, checkpointSubSequenceNumber = :sub, ownerSwitchesSinceCheckpoint = :zero";
                // A KCL prepared checkpoint is behind this one now: the KCL's
                // own checkpoint removes it too, so a KCL resuming after
                // Tidemark is not handed a stale one.
                let remove =
                    "REMOVE pendingCheckpoint, pendingCheckpointSubSequenceNumber, pendingCheckpointState";
                if children.is_empty() {
                    req.update_expression(format!("{set} {remove}"))
                } else {
                    req.update_expression(format!("{set}, childShardIds = :kids {remove}"))
                        .expression_attribute_values(":kids", AttributeValue::Ss(children.clone()))
                }
            }
        };
        req.send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::new(op, &e))
    }
}

impl DynamoStore {
    async fn delete_item(&self, d: &LeaseDelete) -> Result<(), AwsError> {
        // Every lease write bumps the counter, so counter and checkpoint
        // together pin the item as seen.
        let (cp, _) = d.checkpoint.to_parts();
        self.writes
            .delete_item()
            .table_name(&self.table)
            .key("leaseKey", AttributeValue::S(d.key.clone()))
            .condition_expression("leaseCounter = :c AND checkpoint = :cp")
            .expression_attribute_values(":c", n(d.counter))
            .expression_attribute_values(":cp", AttributeValue::S(cp.to_string()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::new("DeleteItem", &e))
    }
}

impl LeaseStore for DynamoStore {
    fn name(&self) -> &str {
        &self.table
    }

    fn ensure_table(&self, timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
        Box::pin(self.ensure(timeout))
    }

    fn scan_page(
        &self,
        consistent: bool,
        start: Option<String>,
    ) -> BoxFuture<'_, Result<ScanPage, ConsumerError>> {
        Box::pin(self.scan(consistent, start))
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Lease>, AwsError>> {
        Box::pin(self.get_item(key))
    }

    fn write<'a>(&'a self, write: &'a LeaseWrite) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(self.send(write))
    }

    fn owned_by<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<Vec<String>, ConsumerError>> {
        Box::pin(self.query_owner(owner))
    }

    fn ensure_owner_index(&self, timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
        Box::pin(self.ensure_index(timeout))
    }

    fn delete<'a>(&'a self, delete: &'a LeaseDelete) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(self.delete_item(delete))
    }

    fn kcl_side_tables<'a>(
        &'a self,
        names: &'a SideTableNames,
    ) -> BoxFuture<'a, Result<SideTables, ConsumerError>> {
        Box::pin(self.side_tables(names))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table without the owner index whose UpdateTable is refused (as the
    /// CloudFormation task role refuses it on a table it did not create):
    /// the worker stops with a message naming the index, its keys and the
    /// other mode.
    #[tokio::test]
    async fn a_missing_owner_index_that_cannot_be_added_is_refused_naming_the_fix() {
        use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
        use aws_sdk_dynamodb::types::TableDescription;
        use aws_smithy_mocks::{RuleMode, mock, mock_client};
        let describe = mock!(Client::describe_table).then_output(|| {
            DescribeTableOutput::builder()
                .table(
                    TableDescription::builder()
                        .table_name("leases")
                        .table_status(TableStatus::Active)
                        .build(),
                )
                .build()
        });
        let denied = r#"{"__type":"com.amazon.coral.service#AccessDeniedException","message":"not authorized to perform: dynamodb:UpdateTable"}"#;
        let update = mock!(Client::update_table)
            .sequence()
            .http_status(400, Some(denied.to_string()))
            .build();
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&describe, &update]);
        let store = DynamoStore::new(client, "leases", Duration::from_secs(1));
        let e = store
            .ensure_index(Duration::from_secs(5))
            .await
            .unwrap_err()
            .to_string();
        for needle in [
            OWNER_INDEX,
            "leaseOwner",
            "KEYS_ONLY",
            "listing",
            "UpdateTable",
        ] {
            assert!(e.contains(needle), "{needle} missing from: {e}");
        }
        assert_eq!(update.num_calls(), 1);
    }

    fn lease(owner: Option<&str>, counter: u64) -> Lease {
        let mut l = Lease::new("s", Checkpoint::TrimHorizon, vec![]);
        l.owner = owner.map(str::to_string);
        l.counter = counter;
        l
    }

    #[test]
    fn in_memory_semantics_fence_on_counter_and_owner() {
        let renew = LeaseWrite::Renew {
            key: "s".into(),
            me: "a".into(),
            counter: 3,
        };
        assert_eq!(renew.apply(Some(&lease(Some("a"), 3))).unwrap().counter, 4);
        for stale in [lease(Some("a"), 4), lease(Some("b"), 3), lease(None, 3)] {
            let e = renew.apply(Some(&stale)).unwrap_err();
            assert_eq!(e.class, ErrorClass::ConditionFailed, "{stale:?}");
        }
        assert!(renew.apply(None).is_err());
        let steal = LeaseWrite::Acquire {
            key: "s".into(),
            counter: 3,
            me: "b".into(),
            switches: 1,
        };
        let l = steal.apply(Some(&lease(Some("a"), 3))).unwrap();
        assert_eq!((l.owner.as_deref(), l.counter), (Some("b"), 4));
        assert_eq!(l.owner_switches_since_checkpoint, 1);
        assert!(steal.apply(Some(&lease(Some("a"), 2))).is_err());
        let create = LeaseWrite::Create(lease(None, 0));
        assert!(create.apply(None).is_ok());
        assert!(create.apply(Some(&lease(None, 0))).is_err());
        let release = LeaseWrite::Release {
            key: "s".into(),
            me: "b".into(),
            counter: 4,
        };
        let l = release.apply(Some(&l)).unwrap();
        assert_eq!((l.owner, l.counter), (None, 5));
    }

    #[test]
    fn a_delete_applies_only_to_the_lease_as_seen() {
        let mut done = lease(None, 7);
        done.checkpoint = Checkpoint::ShardEnd;
        let delete = LeaseDelete {
            key: "s".into(),
            counter: 7,
            checkpoint: Checkpoint::ShardEnd,
        };
        assert!(delete.apply(Some(&done)).is_ok());
        let mut moved = done.clone();
        moved.counter = 8;
        let mut reread = done.clone();
        reread.checkpoint = Checkpoint::TrimHorizon;
        for item in [Some(&moved), Some(&reread), None] {
            let e = delete.apply(item).unwrap_err();
            assert_eq!(e.class, ErrorClass::ConditionFailed, "{item:?}");
        }
    }
}
