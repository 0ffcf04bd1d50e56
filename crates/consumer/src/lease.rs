//! Shard leases in a DynamoDB table of the KCL 2.x format, and the pure law
//! that decides which leases a worker takes or steals.
//!
//! Item format (one item per shard, hash key `leaseKey` = shard id, or
//! `account:stream:creationEpoch:shardId` with `streamName` and `shardId`
//! attributes in multi-stream mode, see [`crate::lease_key`]):
//! `leaseOwner` (S, absent when free), `leaseCounter` (N, bumped by every
//! write and used as the fencing token of all conditional writes),
//! `checkpoint` (S: a sequence number or `TRIM_HORIZON` / `LATEST` /
//! `AT_TIMESTAMP` / `SHARD_END`), `checkpointSubSequenceNumber` (N),
//! `ownerSwitchesSinceCheckpoint` (N), `parentShardId` (SS),
//! `childShardIds` (SS), `startingHashKey` / `endingHashKey` (S).
//!
//! Expiry is judged on the observer's own clock, as the KCL does: a lease is
//! expired when its counter has not changed for `failover_time` since this
//! worker first saw that counter value, so clock skew between workers does not
//! matter.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::time::Duration;
use tidemark_governor::{Governor, Outcome};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use std::sync::Arc;
use tokio::time::Instant;

pub use crate::lease_store::{
    DynamoStore, LeaseDelete, LeaseStore, LeaseWrite, OWNER_INDEX, ScanPage,
};

use crate::checkpoint::Position;
use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::keyschema::{KeyAttr, KeySpec};

/// `checkpoint` value of a shard read to its end.
pub const SHARD_END: &str = "SHARD_END";
/// `checkpoint` value: start at the oldest record.
pub const TRIM_HORIZON: &str = "TRIM_HORIZON";
/// `checkpoint` value: start at the newest record.
pub const LATEST: &str = "LATEST";
/// `checkpoint` value: start at the configured timestamp.
pub const AT_TIMESTAMP: &str = "AT_TIMESTAMP";

/// A lease's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkpoint {
    /// Not read yet; start at the oldest record.
    TrimHorizon,
    /// Not read yet; start at the newest record.
    Latest,
    /// Not read yet; start at the configured timestamp.
    AtTimestamp,
    /// Read to its end: children may be read.
    ShardEnd,
    /// Every user record up to and including this position is handled.
    At(Position),
}

impl Checkpoint {
    fn from_parts(s: &str, sub: u64) -> Self {
        match s {
            TRIM_HORIZON => Self::TrimHorizon,
            LATEST => Self::Latest,
            AT_TIMESTAMP => Self::AtTimestamp,
            SHARD_END => Self::ShardEnd,
            seq => Self::At(Position::new(seq, sub)),
        }
    }

    pub(crate) fn to_parts(&self) -> (&str, u64) {
        match self {
            Self::TrimHorizon => (TRIM_HORIZON, 0),
            Self::Latest => (LATEST, 0),
            Self::AtTimestamp => (AT_TIMESTAMP, 0),
            Self::ShardEnd => (SHARD_END, 0),
            Self::At(p) => (p.sequence.as_str(), p.sub_sequence),
        }
    }
}

/// One lease item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Shard id (`leaseKey`).
    pub key: String,
    /// Current owner; `None` when free.
    pub owner: Option<String>,
    /// Fencing counter.
    pub counter: u64,
    /// Checkpoint.
    pub checkpoint: Checkpoint,
    /// Owner changes since the last checkpoint write.
    pub owner_switches_since_checkpoint: u64,
    /// Parent shard ids (two after a merge).
    pub parents: Vec<String>,
    /// Child shard ids, written at shard end.
    pub children: Vec<String>,
    /// (startingHashKey, endingHashKey).
    pub hash_range: Option<(String, String)>,
}

impl Lease {
    /// A new, free lease.
    pub fn new(key: impl Into<String>, checkpoint: Checkpoint, parents: Vec<String>) -> Self {
        Self {
            key: key.into(),
            owner: None,
            counter: 0,
            checkpoint,
            owner_switches_since_checkpoint: 0,
            parents,
            children: Vec::new(),
            hash_range: None,
        }
    }

    /// True when the shard was read to its end.
    pub fn is_finished(&self) -> bool {
        self.checkpoint == Checkpoint::ShardEnd
    }

    /// The DynamoDB item.
    pub fn to_item(&self) -> HashMap<String, AttributeValue> {
        let mut item = HashMap::new();
        item.insert("leaseKey".into(), AttributeValue::S(self.key.clone()));
        if let Some(o) = &self.owner {
            item.insert("leaseOwner".into(), AttributeValue::S(o.clone()));
        }
        item.insert("leaseCounter".into(), n(self.counter));
        let (cp, sub) = self.checkpoint.to_parts();
        item.insert("checkpoint".into(), AttributeValue::S(cp.to_string()));
        item.insert("checkpointSubSequenceNumber".into(), n(sub));
        item.insert(
            "ownerSwitchesSinceCheckpoint".into(),
            n(self.owner_switches_since_checkpoint),
        );
        // DynamoDB rejects empty sets: absent means none.
        if !self.parents.is_empty() {
            item.insert(
                "parentShardId".into(),
                AttributeValue::Ss(self.parents.clone()),
            );
        }
        if !self.children.is_empty() {
            item.insert(
                "childShardIds".into(),
                AttributeValue::Ss(self.children.clone()),
            );
        }
        if let Some((start, end)) = &self.hash_range {
            item.insert("startingHashKey".into(), AttributeValue::S(start.clone()));
            item.insert("endingHashKey".into(), AttributeValue::S(end.clone()));
        }
        // A KCL multi-stream lease also names its stream and shard.
        if let Some((stream, shard)) = crate::lease_key::parse_lease_key(&self.key) {
            item.insert("streamName".into(), AttributeValue::S(stream.to_string()));
            item.insert("shardId".into(), AttributeValue::S(shard.to_string()));
        }
        item
    }

    /// Parses an item; `None` names the first missing or malformed attribute.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Self, String> {
        let s = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
        let num = |k: &str| -> Result<u64, String> {
            match item.get(k) {
                None => Ok(0),
                Some(v) => v
                    .as_n()
                    .ok()
                    .and_then(|x| x.parse().ok())
                    .ok_or_else(|| format!("{k} is not a number")),
            }
        };
        let set = |k: &str| -> Vec<String> {
            match item.get(k) {
                Some(AttributeValue::Ss(v)) => v.clone(),
                // Some writers store a single parent as a plain string.
                Some(AttributeValue::S(v)) => vec![v.clone()],
                _ => Vec::new(),
            }
        };
        let key = s("leaseKey").ok_or("leaseKey missing or not a string")?;
        let checkpoint = s("checkpoint").unwrap_or_else(|| TRIM_HORIZON.to_string());
        Ok(Self {
            key,
            owner: s("leaseOwner"),
            counter: num("leaseCounter")?,
            checkpoint: Checkpoint::from_parts(&checkpoint, num("checkpointSubSequenceNumber")?),
            owner_switches_since_checkpoint: num("ownerSwitchesSinceCheckpoint")?,
            parents: set("parentShardId"),
            children: set("childShardIds"),
            hash_range: s("startingHashKey").zip(s("endingHashKey")),
        })
    }
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Timing of the lease-table writes and of a holder's lease deadline, all
/// derived from the failover time so that one setting keeps them consistent.
///
/// - `attempt`: one attempt of a conditional write (`failover / 8`, at most
///   10 s). The SDK does not retry these writes: a timed-out attempt may have
///   been applied, and a blind resend would fail its condition.
/// - `writes`: no new write attempt starts later than this after the first
///   (`failover / 5`). With the re-read that may follow, one operation ends
///   within `writes + attempt`, below `failover / 3`, the renewal period.
/// - `margin`: a holder stops submitting records and checkpointing at
///   `send time of its last successful renew + failover - margin`
///   (`failover / 5`), and treats the lease as lost at `+ failover`, the
///   earliest moment another worker may take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// The failover time: a lease whose counter stays put this long is free.
    pub failover: Duration,
    /// Longest wait for one attempt of a lease-table call.
    pub attempt: Duration,
    /// No new write attempt starts later than this after the first.
    pub writes: Duration,
    /// How long before the failover time a holder stops acting.
    pub margin: Duration,
}

/// Where a holder stands with its lease, judged on its own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeasePhase {
    /// Held: records may be submitted and checkpoints written until `until`.
    Live {
        /// The lease deadline.
        until: Instant,
    },
    /// Past the deadline: submit nothing, checkpoint nothing; a renewal sent
    /// before `lost_at` brings the lease back to live.
    Paused {
        /// When the lease counts as lost.
        lost_at: Instant,
    },
    /// Another worker may hold it now: stop for good.
    Lost,
}

impl LeaseTiming {
    /// The timing for `failover`.
    pub fn new(failover: Duration) -> Self {
        Self {
            failover,
            attempt: (failover / 8).min(Duration::from_secs(10)),
            writes: failover / 5,
            margin: failover / 5,
        }
    }

    /// The longest one lease-table operation (writes plus re-read) takes.
    pub fn op_bound(&self) -> Duration {
        self.writes + self.attempt
    }

    /// The phase at `now` of a lease whose last successful renew (or other
    /// fenced write) was sent at `renewed`. Another worker takes a lease only
    /// after seeing its counter unchanged for `failover` on its own clock,
    /// and it cannot see the new counter before the write was sent, so
    /// `renewed + failover` is the earliest instant the lease can move.
    pub fn phase(&self, renewed: Instant, now: Instant) -> LeasePhase {
        let lost_at = renewed + self.failover;
        let until = lost_at - self.margin;
        if now < until {
            LeasePhase::Live { until }
        } else if now < lost_at {
            LeasePhase::Paused { lost_at }
        } else {
            LeasePhase::Lost
        }
    }
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self::new(crate::config::default_failover_time())
    }
}

/// A fenced write that was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The lease counter after the write.
    pub counter: u64,
    /// When the operation's first attempt was sent: the lease is safe until
    /// `sent + failover` (see [`LeaseTiming::phase`]).
    pub sent: Instant,
}

/// Result of a fenced write: `Ok(Some(_))` when applied, `Ok(None)` when the
/// condition failed (someone else moved the lease), `Err` when it is unknown
/// (every attempt failed or timed out within the operation's deadline).
pub type Fenced = Result<Option<Written>, AwsError>;

/// Runs one conditional write with a bounded retry and no blind resends:
/// `attempt` sends it once; after an attempt that may have been applied
/// (timed out, connection lost, 5xx), a failed condition on a later attempt
/// is checked with `reread` (a consistent read, true when the item shows our
/// own write), as the KCL's `renewLease` does. Throttling is retried (the
/// write was not applied); any other error ends the operation. Returns the
/// first attempt's send time when applied.
///
/// This is the one place lease-table writes are sent and retried.
pub async fn write_once<A, AF, R, RF>(
    timing: &LeaseTiming,
    gov: Option<&Governor>,
    op: &'static str,
    mut attempt: A,
    mut reread: R,
) -> Result<Option<Instant>, AwsError>
where
    A: FnMut() -> AF,
    AF: Future<Output = Result<(), AwsError>>,
    R: FnMut() -> RF,
    RF: Future<Output = Result<bool, AwsError>>,
{
    let sent = Instant::now();
    let write_until = sent + timing.writes;
    let hard_stop = write_until + timing.attempt;
    let mut ambiguous = false;
    let mut delay = Duration::from_millis(20);
    loop {
        let now = Instant::now();
        let limit = (now + timing.attempt).min(hard_stop);
        // The endpoint's governor admits the attempt (within the same
        // deadline: an open breaker cannot hold a lease write past it).
        // Lease writes pass its rate limit: starved behind a backlog of
        // bulk writes, they would lose the leases and cause re-reads.
        let permit = match gov {
            Some(g) => match tokio::time::timeout_at(limit, g.admit_priority()).await {
                Ok(p) => Some(p),
                Err(_) => return Err(timed_out(op, "admission (DynamoDB congested)")),
            },
            None => None,
        };
        let result = tokio::time::timeout_at(limit, attempt()).await;
        if let Some(p) = permit {
            p.finish(match &result {
                Err(_) => Outcome::Congested,
                Ok(Err(e)) => Outcome::of_class(e.class),
                Ok(Ok(())) => Outcome::Answered,
            });
        }
        let err = match result {
            Ok(Ok(())) => return Ok(Some(sent)),
            Ok(Err(e)) if e.class == ErrorClass::ConditionFailed => {
                if !ambiguous {
                    return Ok(None);
                }
                return match tokio::time::timeout_at(hard_stop, reread()).await {
                    Ok(Ok(true)) => {
                        tracing::info!(
                            op,
                            "condition failed after an unanswered attempt, but the lease shows our write: accepted"
                        );
                        Ok(Some(sent))
                    }
                    Ok(Ok(false)) => Ok(None),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(timed_out(op, "GetItem (re-read)")),
                };
            }
            Ok(Err(e)) => match e.class {
                ErrorClass::Throttled => e,
                ErrorClass::Retry => {
                    ambiguous = true;
                    e
                }
                _ => return Err(e),
            },
            Err(_) => {
                ambiguous = true;
                timed_out(op, "attempt")
            }
        };
        // Full jitter keeps workers that failed together from retrying together.
        let pause = delay.mul_f64(jitter());
        if Instant::now() + pause >= write_until {
            return Err(err);
        }
        tokio::time::sleep(pause).await;
        delay = (delay * 2).min(timing.attempt);
    }
}

fn timed_out(op: &'static str, what: &str) -> AwsError {
    AwsError {
        op,
        class: ErrorClass::Retry,
        message: format!("{what} timed out"),
    }
}

/// A factor in [0.5, 1.5) from the clock's low bits: enough to spread retries
/// without a random-number dependency.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    0.5 + f64::from(nanos % 1000) / 1000.0
}

/// The lease table. Every write that touches an owned lease is conditional on
/// `leaseCounter` (and owner), so a worker that lost a lease cannot write it.
///
/// The calls go to a [`LeaseStore`]: DynamoDB ([`DynamoStore`], whose
/// conditional writes and re-reads use a client with SDK retries off and the
/// attempt timeout of [`LeaseTiming`]), or an in-memory table in the fleet
/// simulator. Retries follow [`write_once`] whatever the store.
#[derive(Debug, Clone)]
pub struct LeaseTable {
    pub(crate) store: Arc<dyn LeaseStore>,
    table: String,
    timing: LeaseTiming,
    gov: Option<Governor>,
    /// What the table is for, in key-schema errors.
    role: &'static str,
    /// Multi-stream mode: the one stream this handle shows
    /// ([`LeaseTable::scoped`]).
    pub(crate) scope: Option<crate::lease_key::StreamIdentifier>,
}

/// The key schema of a table in the KCL lease format.
pub fn lease_key_spec() -> KeySpec {
    KeySpec::hash_only(KeyAttr::string("leaseKey"))
}

impl LeaseTable {
    /// A handle on table `table`, with the timing of the default failover
    /// time.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self::with_timing(client, table, LeaseTiming::default())
    }

    /// A handle on table `table` whose writes follow `timing`.
    pub fn with_timing(client: Client, table: impl Into<String>, timing: LeaseTiming) -> Self {
        let store = DynamoStore::new(client, table, timing.attempt);
        Self::with_store(Arc::new(store), timing)
    }

    /// A handle on the table behind `store` whose writes follow `timing`.
    pub fn with_store(store: Arc<dyn LeaseStore>, timing: LeaseTiming) -> Self {
        Self {
            table: store.name().to_string(),
            store,
            timing,
            gov: None,
            role: "lease table",
            scope: None,
        }
    }

    /// Names what the table is for in errors (default `lease table`).
    pub fn with_role(mut self, role: &'static str) -> Self {
        self.role = role;
        self
    }

    /// Lease writes are admitted by, and report to, the DynamoDB endpoint's
    /// shared governor.
    pub fn with_governor(mut self, gov: Governor) -> Self {
        self.gov = Some(gov);
        self
    }

    /// The timing of this table's writes.
    pub fn timing(&self) -> &LeaseTiming {
        &self.timing
    }

    /// The table name.
    pub fn name(&self) -> &str {
        &self.table
    }

    /// Creates the table (on-demand billing) unless it exists, then waits
    /// until it is ACTIVE. An existing table with another key schema is
    /// refused ([`ConsumerError::KeySchema`], naming found and expected).
    pub async fn create_if_absent(&self, timeout: Duration) -> Result<(), ConsumerError> {
        match self.store.ensure_table(timeout).await {
            // The store knows the table; this handle knows what it is for.
            Err(ConsumerError::KeySchema(mut m)) => {
                m.role = self.role;
                Err(ConsumerError::KeySchema(m))
            }
            other => other,
        }
    }

    /// Every lease (strongly consistent scan).
    pub async fn list(&self) -> Result<Vec<Lease>, ConsumerError> {
        self.list_with(true).await
    }

    /// Every lease; `consistent` false reads eventually consistently (half
    /// the read capacity; may miss writes of the last second or so).
    pub async fn list_with(&self, consistent: bool) -> Result<Vec<Lease>, ConsumerError> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self.store.scan_page(consistent, start).await?;
            out.extend(page.leases);
            start = page.next;
            if start.is_none() {
                return Ok(out);
            }
        }
    }

    /// The keys of the leases `owner` holds, from the owner index (one
    /// eventually consistent Query; see [`LeaseStore::owned_by`]).
    pub async fn owned_by(&self, owner: &str) -> Result<Vec<String>, ConsumerError> {
        self.store.owned_by(owner).await
    }

    /// Makes sure the owner index exists (adding it when absent).
    pub async fn ensure_owner_index(&self, timeout: Duration) -> Result<(), ConsumerError> {
        self.store.ensure_owner_index(timeout).await
    }

    /// The lease `key` (consistent read); `None` when there is none. One
    /// attempt: it is the re-read of [`write_once`].
    pub async fn get(&self, key: &str) -> Result<Option<Lease>, AwsError> {
        self.store.get(key).await
    }

    /// Sends a conditional write with [`write_once`]; after an unanswered
    /// attempt, a failed condition is checked against the item: `ours` says
    /// whether it shows this write applied.
    async fn send_fenced(
        &self,
        write: LeaseWrite,
        counter_after: u64,
        ours: impl Fn(&Lease) -> bool,
    ) -> Fenced {
        let key = write.key().to_string();
        let sent = write_once(
            &self.timing,
            self.gov.as_ref(),
            write.op(),
            || self.store.write(&write),
            || async {
                Ok(self
                    .get(&key)
                    .await?
                    .is_some_and(|l| l.counter == counter_after && ours(&l)))
            },
        )
        .await?;
        Ok(sent.map(|sent| Written {
            counter: counter_after,
            sent,
        }))
    }

    /// Creates `lease` unless one with its key exists. Returns true if created.
    pub async fn create_lease(&self, lease: &Lease) -> Result<bool, AwsError> {
        // Whoever created it, the lease exists: a re-read only decides
        // whether to log "created".
        let r = self
            .send_fenced(LeaseWrite::Create(lease.clone()), lease.counter, |_| false)
            .await?;
        Ok(r.is_some())
    }

    /// Takes a free, expired or someone else's lease whose counter is still
    /// `observed.counter` (the same write serves take and steal).
    pub async fn acquire(&self, observed: &Lease, me: &str) -> Fenced {
        let write = LeaseWrite::Acquire {
            key: observed.key.clone(),
            counter: observed.counter,
            me: me.to_string(),
            switches: u64::from(observed.owner.as_deref() != Some(me)),
        };
        self.send_fenced(write, observed.counter + 1, |l| {
            l.owner.as_deref() == Some(me)
        })
        .await
    }

    /// Renews a held lease (bumps the counter).
    pub async fn renew(&self, key: &str, me: &str, counter: u64) -> Fenced {
        let write = LeaseWrite::Renew {
            key: key.to_string(),
            me: me.to_string(),
            counter,
        };
        self.send_fenced(write, counter + 1, |l| l.owner.as_deref() == Some(me))
            .await
    }

    /// Releases a held lease: owner cleared, so others take it at once.
    pub async fn release(&self, key: &str, me: &str, counter: u64) -> Fenced {
        let write = LeaseWrite::Release {
            key: key.to_string(),
            me: me.to_string(),
            counter,
        };
        self.send_fenced(write, counter + 1, |l| l.owner.is_none())
            .await
    }

    /// Writes a checkpoint of a held lease (and the child shard ids at shard
    /// end).
    pub async fn checkpoint(
        &self,
        key: &str,
        me: &str,
        counter: u64,
        checkpoint: &Checkpoint,
        children: &[String],
    ) -> Fenced {
        let write = LeaseWrite::Checkpoint {
            key: key.to_string(),
            me: me.to_string(),
            counter,
            checkpoint: checkpoint.clone(),
            children: children.to_vec(),
        };
        self.send_fenced(write, counter + 1, |l| {
            l.owner.as_deref() == Some(me) && &l.checkpoint == checkpoint
        })
        .await
    }
}

impl LeaseTable {
    /// Deletes the lease `observed` unless it changed since it was seen
    /// (counter and checkpoint), with the bounded retry of [`write_once`]:
    /// after an unanswered attempt, a lease found gone counts as deleted.
    /// True when deleted, false when it moved on (or was already gone).
    pub async fn delete(&self, observed: &Lease) -> Result<bool, AwsError> {
        let delete = LeaseDelete {
            key: observed.key.clone(),
            counter: observed.counter,
            checkpoint: observed.checkpoint.clone(),
        };
        let sent = write_once(
            &self.timing,
            self.gov.as_ref(),
            "DeleteItem",
            || self.store.delete(&delete),
            || async { Ok(self.get(&delete.key).await?.is_none()) },
        )
        .await?;
        Ok(sent.is_some())
    }
}

/// What a worker saw of each lease, on its own clock.
#[derive(Debug, Default, Clone)]
pub struct Observations {
    seen: HashMap<String, (u64, Instant)>,
}

impl Observations {
    /// Records the counters of `leases` as seen at `now`.
    pub fn observe(&mut self, leases: &[Lease], now: Instant) {
        let keys: HashSet<&str> = leases.iter().map(|l| l.key.as_str()).collect();
        self.seen.retain(|k, _| keys.contains(k.as_str()));
        for l in leases {
            match self.seen.get(&l.key) {
                Some((c, _)) if *c == l.counter => {}
                _ => {
                    self.seen.insert(l.key.clone(), (l.counter, now));
                }
            }
        }
    }

    /// The earliest instant after `now` at which one of `leases` owned by
    /// someone else will expire if its counter does not move: a worker wakes
    /// then instead of at its next regular pass, which takes a tick off
    /// failover.
    /// Leases already expired are left out (waking for them again would spin).
    pub fn next_expiry(
        &self,
        leases: &[Lease],
        me: &str,
        now: Instant,
        failover: Duration,
    ) -> Option<Instant> {
        leases
            .iter()
            .filter(|l| !l.is_finished() && l.owner.as_deref().is_some_and(|o| o != me))
            .filter_map(|l| match self.seen.get(&l.key) {
                Some((c, since)) if *c == l.counter => Some(*since + failover),
                _ => None,
            })
            .filter(|t| *t > now)
            .min()
    }

    /// How long the lease's counter has stood still on this worker's clock
    /// (zero when not observed at this counter).
    pub fn unchanged_for(&self, lease: &Lease, now: Instant) -> Duration {
        match self.seen.get(&lease.key) {
            Some((c, since)) if *c == lease.counter => now.saturating_duration_since(*since),
            _ => Duration::ZERO,
        }
    }

    /// True when the lease is free, or its counter has not moved for
    /// `failover` on this worker's clock.
    pub fn is_expired(&self, lease: &Lease, now: Instant, failover: Duration) -> bool {
        if lease.owner.is_none() {
            return true;
        }
        match self.seen.get(&lease.key) {
            Some((c, since)) if *c == lease.counter => now.duration_since(*since) >= failover,
            // Not observed at this counter yet: it just moved, so it is alive.
            _ => false,
        }
    }
}

/// The balancing decision of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Free or expired leases to take.
    pub take: Vec<String>,
    /// Live leases of over-loaded workers to steal.
    pub steal: Vec<String>,
    /// Leases per worker this pass aims at.
    pub target: usize,
}

/// Inputs of the balancing law.
#[derive(Debug, Clone, Copy)]
pub struct BalanceInput<'a> {
    /// This worker's id.
    pub me: &'a str,
    /// Leases this worker holds (in memory, renewed by it).
    pub held: &'a HashSet<String>,
    /// The whole table.
    pub leases: &'a [Lease],
    /// Counter observations.
    pub observations: &'a Observations,
    /// Now.
    pub now: Instant,
    /// Failover time.
    pub failover: Duration,
    /// Optional cap on leases per worker.
    pub max_leases: Option<usize>,
    /// Also take one lease from each of some workers at the target when two
    /// or more below it ([`LeaseTuning::steal_at_target`](crate::config::LeaseTuning)).
    pub steal_at_target: bool,
    /// One short of the target, leave a lease that just became free to
    /// others for half a failover time
    /// ([`LeaseTuning::patient_steals`](crate::config::LeaseTuning)).
    pub patient: bool,
}

/// Decides which leases to take and steal. Finished (`SHARD_END`) leases are
/// not counted. Target = ceil(active leases / live workers), capped by
/// `max_leases`. Free and expired leases are taken first; a worker steals only
/// from a worker holding more than the target, and only down to the target,
/// so a steal never has to be undone: this is what keeps leases from
/// flapping. All missing leases are taken in one pass (the KCL takes one per
/// pass), so a joining worker converges in one renewal period.
pub fn plan(input: BalanceInput<'_>) -> Plan {
    let BalanceInput {
        me,
        held,
        leases,
        observations,
        now,
        failover,
        max_leases,
        steal_at_target,
        patient,
    } = input;
    let active: Vec<&Lease> = leases.iter().filter(|l| !l.is_finished()).collect();
    let mut per_owner: HashMap<&str, Vec<&Lease>> = HashMap::new();
    let mut available = Vec::new();
    for l in &active {
        if held.contains(&l.key) {
            continue;
        }
        match l.owner.as_deref() {
            // A lease in our name we do not hold (a previous run of this worker).
            Some(o) if o == me => available.push(*l),
            Some(o) if !observations.is_expired(l, now, failover) => {
                per_owner.entry(o).or_default().push(l)
            }
            _ => available.push(*l),
        }
    }
    let workers = per_owner.len() + 1;
    let mut target = active.len().div_ceil(workers);
    if let Some(max) = max_leases {
        target = target.min(max);
    }
    let mut need = target.saturating_sub(held.len());
    let mut out = Plan {
        target,
        ..Plan::default()
    };
    // Parents first (children must wait for them anyway), then an order that
    // differs per worker so that workers racing for leases pick different ones.
    let rank = |l: &Lease| {
        let unfinished_parent = l
            .parents
            .iter()
            .any(|p| leases.iter().any(|x| &x.key == p && !x.is_finished()));
        (unfinished_parent, spread(me, &l.key))
    };
    available.sort_by_key(|l| rank(l));
    // One short of the target, a worker leaves a lease that just became
    // free to workers further below for half a failover time: the
    // newcomer of a rolling deploy (whom the others cannot count yet: it
    // owns nothing) gets the leases its predecessor released, rather than
    // them moving twice.
    if patient && need == 1 {
        available
            .retain(|l| l.owner.is_some() || observations.unchanged_for(l, now) >= failover / 2);
    }
    for l in available.into_iter().take(need) {
        out.take.push(l.key.clone());
    }
    need -= out.take.len();
    if need > 0 {
        let mut victims: Vec<(&str, Vec<&Lease>)> = per_owner
            .iter()
            .filter(|(_, ls)| ls.len() > target)
            .map(|(o, ls)| (*o, ls.clone()))
            .collect();
        victims.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
        for (_, mut ls) in victims {
            if need == 0 {
                break;
            }
            let n = need.min(ls.len() - target);
            ls.sort_by_key(|l| rank(l));
            out.steal
                .extend(ls.into_iter().take(n).map(|l| l.key.clone()));
            need -= n;
        }
    }
    // When leases / workers is just under a whole number nobody is above
    // the target, yet a newcomer would stay far below it. As the KCL does,
    // a worker two or more below the target takes one lease from each of
    // some workers at the target, never past target - 1: the givers end at
    // target - 1 and cannot take it back, so nothing flaps.
    let mut mine = held.len() + out.take.len() + out.steal.len();
    if steal_at_target && mine + 2 <= target {
        let mut givers: Vec<(&str, &Vec<&Lease>)> = per_owner
            .iter()
            .filter(|(_, ls)| ls.len() == target)
            .map(|(o, ls)| (*o, ls))
            .collect();
        // A different order per worker spreads newcomers over the givers.
        givers.sort_by_key(|(o, _)| spread(me, o));
        for (_, ls) in givers {
            if mine + 2 > target {
                break;
            }
            if let Some(l) = ls.iter().min_by_key(|l| rank(l)) {
                out.steal.push(l.key.clone());
                mine += 1;
            }
        }
    }
    out
}

fn spread(me: &str, key: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (me, key).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(key: &str, owner: Option<&str>, counter: u64) -> Lease {
        let mut l = Lease::new(key, Checkpoint::TrimHorizon, vec![]);
        l.owner = owner.map(str::to_string);
        l.counter = counter;
        l
    }

    #[test]
    fn item_round_trip_in_kcl_format() {
        let mut l = lease("shardId-000000000003", Some("w1"), 42);
        l.checkpoint = Checkpoint::At(Position::new(
            "4959000000000000000000000000000000000000000000000001",
            3,
        ));
        l.parents = vec!["shardId-000000000001".into(), "shardId-000000000002".into()];
        l.hash_range = Some(("0".into(), "170141183460469231731687303715884105727".into()));
        let item = l.to_item();
        assert_eq!(item["leaseKey"].as_s().unwrap(), "shardId-000000000003");
        assert_eq!(item["leaseCounter"].as_n().unwrap(), "42");
        assert_eq!(item["checkpointSubSequenceNumber"].as_n().unwrap(), "3");
        assert!(item["parentShardId"].as_ss().is_ok());
        assert!(
            !item.contains_key("childShardIds"),
            "empty sets are left out"
        );
        assert_eq!(Lease::from_item(&item).unwrap(), l);
        let mut free = l.clone();
        free.owner = None;
        free.checkpoint = Checkpoint::ShardEnd;
        assert!(!free.to_item().contains_key("leaseOwner"));
        assert_eq!(Lease::from_item(&free.to_item()).unwrap(), free);
    }

    #[test]
    fn expiry_uses_the_observers_clock() {
        let t0 = Instant::now();
        let fo = Duration::from_secs(10);
        let mut obs = Observations::default();
        let l = lease("a", Some("w2"), 5);
        obs.observe(std::slice::from_ref(&l), t0);
        assert!(!obs.is_expired(&l, t0 + Duration::from_secs(9), fo));
        assert!(obs.is_expired(&l, t0 + fo, fo));
        // The counter moved: alive again, from the moment it was seen moving.
        let l6 = lease("a", Some("w2"), 6);
        obs.observe(std::slice::from_ref(&l6), t0 + fo);
        assert!(!obs.is_expired(&l6, t0 + fo + Duration::from_secs(9), fo));
        assert!(
            obs.is_expired(&lease("b", None, 1), t0, fo),
            "free is expired"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn lease_phases_on_the_holders_clock() {
        let t = LeaseTiming::new(Duration::from_secs(10));
        assert!(t.op_bound() < t.failover / 3, "{:?}", t.op_bound());
        let sent = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(t.phase(sent, sent), LeasePhase::Live { until: sent + s(8) });
        assert_eq!(
            t.phase(sent, sent + s(8)),
            LeasePhase::Paused {
                lost_at: sent + s(10)
            }
        );
        assert_eq!(t.phase(sent, sent + s(10)), LeasePhase::Lost);
        // A renewal sent later moves every bound.
        let later = sent + s(7);
        assert!(matches!(
            t.phase(later, sent + s(9)),
            LeasePhase::Live { .. }
        ));
    }

    fn err(class: ErrorClass) -> AwsError {
        AwsError {
            op: "UpdateItem(renew)",
            class,
            message: "test".into(),
        }
    }

    /// A lease item as the server sees it: `counter`, and the attempts sent.
    #[derive(Default)]
    struct Server {
        counter: std::sync::Mutex<u64>,
        attempts: std::sync::atomic::AtomicU32,
        rereads: std::sync::atomic::AtomicU32,
    }

    /// Runs a renew of counter 5 against `server`, whose behaviour per
    /// attempt number (0-based) is `script`.
    async fn renew_with(
        server: &Server,
        script: impl Fn(u32) -> Step,
    ) -> (Result<Option<Instant>, AwsError>, Duration) {
        use std::sync::atomic::Ordering::SeqCst;
        let timing = LeaseTiming::new(Duration::from_secs(10));
        let started = Instant::now();
        let r = write_once(
            &timing,
            None,
            "UpdateItem(renew)",
            || {
                let n = server.attempts.fetch_add(1, SeqCst);
                let step = script(n);
                async move {
                    let apply = || {
                        let mut c = server.counter.lock().unwrap();
                        if *c != 5 {
                            return Err(err(ErrorClass::ConditionFailed));
                        }
                        *c = 6;
                        Ok(())
                    };
                    match step {
                        Step::Answer => apply(),
                        // Applied, but the answer never comes.
                        Step::Hang => {
                            let _ = apply();
                            std::future::pending().await
                        }
                        Step::Fail(class) => Err(err(class)),
                    }
                }
            },
            || {
                server.rereads.fetch_add(1, SeqCst);
                async { Ok(*server.counter.lock().unwrap() == 6) }
            },
        )
        .await;
        (r, started.elapsed())
    }

    #[derive(Clone, Copy)]
    enum Step {
        Answer,
        Hang,
        Fail(ErrorClass),
    }

    fn server(counter: u64) -> Server {
        Server {
            counter: std::sync::Mutex::new(counter),
            ..Server::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_applied_write_whose_answer_was_lost_is_recognised_on_reread() {
        use std::sync::atomic::Ordering::SeqCst;
        let s = server(5);
        let t0 = Instant::now();
        let (r, took) = renew_with(&s, |n| if n == 0 { Step::Hang } else { Step::Answer }).await;
        // The resend failed its condition (our own first write moved the
        // counter); the re-read shows counter 6: accepted, with the first
        // attempt's send time.
        assert_eq!(r.unwrap(), Some(t0));
        assert_eq!(s.attempts.load(SeqCst), 2);
        assert_eq!(s.rereads.load(SeqCst), 1);
        assert!(took < LeaseTiming::new(Duration::from_secs(10)).op_bound());
    }

    #[tokio::test(start_paused = true)]
    async fn a_plain_condition_failure_is_a_lost_lease_without_reread() {
        use std::sync::atomic::Ordering::SeqCst;
        let s = server(7);
        let (r, _) = renew_with(&s, |_| Step::Answer).await;
        assert_eq!(r.unwrap(), None);
        assert_eq!(s.rereads.load(SeqCst), 0);
        // A throttled attempt was not applied: still no re-read.
        let s = server(7);
        let (r, _) = renew_with(&s, |n| {
            if n == 0 {
                Step::Fail(ErrorClass::Throttled)
            } else {
                Step::Answer
            }
        })
        .await;
        assert_eq!(r.unwrap(), None);
        assert_eq!((s.attempts.load(SeqCst), s.rereads.load(SeqCst)), (2, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reread_showing_another_write_is_a_lost_lease() {
        let s = server(5);
        // First attempt hangs without applying; meanwhile another worker
        // takes the lease (counter 9).
        let (r, _) = renew_with(&s, |n| {
            if n == 0 {
                *s.counter.lock().unwrap() = 9;
                Step::Fail(ErrorClass::Retry)
            } else {
                Step::Answer
            }
        })
        .await;
        assert_eq!(r.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_bounded_by_the_operation_deadline() {
        use std::sync::atomic::Ordering::SeqCst;
        let timing = LeaseTiming::new(Duration::from_secs(10));
        let s = server(5);
        let (r, took) = renew_with(&s, |_| Step::Hang).await;
        assert!(r.is_err());
        assert!(took <= timing.op_bound(), "{took:?}");
        assert!(took < timing.failover / 3);
        assert!(s.attempts.load(SeqCst) >= 2, "retried within the budget");
        // A fatal error is not retried.
        let s = server(5);
        let (r, _) = renew_with(&s, |_| Step::Fail(ErrorClass::Fatal)).await;
        assert_eq!(r.unwrap_err().class, ErrorClass::Fatal);
        assert_eq!(s.attempts.load(SeqCst), 1);
    }

    struct Scenario {
        name: &'static str,
        /// (key, owner, counter)
        leases: Vec<(&'static str, Option<&'static str>, u64)>,
        held: Vec<&'static str>,
        max: Option<usize>,
        /// Seconds since the observation at t0.
        at: u64,
        take: usize,
        steal: usize,
        target: usize,
    }

    #[test]
    fn table_driven_balancing() {
        let keys = ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"];
        let owned = |owner: Option<&'static str>, n: usize| -> Vec<_> {
            keys.iter().take(n).map(|k| (*k, owner, 1)).collect()
        };
        let scenarios = vec![
            Scenario {
                name: "alone, all free",
                leases: owned(None, 8),
                held: vec![],
                max: None,
                at: 0,
                take: 8,
                steal: 0,
                target: 8,
            },
            Scenario {
                name: "cap respected",
                leases: owned(None, 8),
                held: vec![],
                max: Some(3),
                at: 0,
                take: 3,
                steal: 0,
                target: 3,
            },
            Scenario {
                name: "join: steal half at once",
                leases: owned(Some("a"), 8),
                held: vec![],
                max: None,
                at: 1,
                take: 0,
                steal: 4,
                target: 4,
            },
            Scenario {
                name: "owner dead: take all",
                leases: owned(Some("a"), 8),
                held: vec![],
                max: None,
                at: 10,
                take: 8,
                steal: 0,
                target: 8,
            },
            Scenario {
                name: "odd split is stable",
                leases: {
                    let mut v = owned(Some("a"), 3);
                    v.extend(keys[3..5].iter().map(|k| (*k, Some("me"), 1)));
                    v
                },
                held: vec!["s3", "s4"],
                max: None,
                at: 1,
                take: 0,
                steal: 0,
                target: 3,
            },
            Scenario {
                name: "three workers at target: no steal",
                leases: {
                    let mut v: Vec<_> = keys[..3].iter().map(|k| (*k, Some("a"), 1)).collect();
                    v.extend(keys[3..6].iter().map(|k| (*k, Some("b"), 1)));
                    v.extend(keys[6..8].iter().map(|k| (*k, Some("me"), 1)));
                    v
                },
                held: vec!["s6", "s7"],
                max: None,
                at: 1,
                take: 0,
                steal: 0,
                target: 3,
            },
            Scenario {
                name: "newcomer below target takes one from each worker at it",
                leases: {
                    let mut v: Vec<_> = keys[..2].iter().map(|k| (*k, Some("a"), 1)).collect();
                    v.extend(keys[2..4].iter().map(|k| (*k, Some("b"), 1)));
                    v.extend(keys[4..6].iter().map(|k| (*k, Some("c"), 1)));
                    v
                },
                held: vec![],
                max: None,
                at: 1,
                take: 0,
                steal: 1,
                target: 2,
            },
            Scenario {
                name: "own stale lease retaken",
                leases: vec![("s0", Some("me"), 4), ("s1", Some("a"), 1)],
                held: vec![],
                max: None,
                at: 1,
                take: 1,
                steal: 0,
                target: 1,
            },
        ];
        let t0 = Instant::now();
        for s in scenarios {
            let leases: Vec<Lease> = s.leases.iter().map(|(k, o, c)| lease(k, *o, *c)).collect();
            let mut obs = Observations::default();
            obs.observe(&leases, t0);
            let held: HashSet<String> = s.held.iter().map(|k| k.to_string()).collect();
            let p = plan(BalanceInput {
                me: "me",
                held: &held,
                leases: &leases,
                observations: &obs,
                now: t0 + Duration::from_secs(s.at),
                failover: Duration::from_secs(10),
                max_leases: s.max,
                steal_at_target: true,
                patient: false,
            });
            assert_eq!(
                (p.take.len(), p.steal.len(), p.target),
                (s.take, s.steal, s.target),
                "scenario {}: {p:?}",
                s.name
            );
            for k in p.take.iter().chain(&p.steal) {
                assert!(!held.contains(k), "{}: plans to take a held lease", s.name);
            }
        }
    }

    #[test]
    fn finished_leases_do_not_count_and_parents_go_first() {
        let mut parent = lease("p", None, 1);
        let child = {
            let mut c = lease("c", None, 1);
            c.parents = vec!["p".into()];
            c
        };
        let mut done = lease("old", None, 1);
        done.checkpoint = Checkpoint::ShardEnd;
        parent.owner = None;
        let leases = vec![child, parent, done];
        let obs = Observations::default();
        let p = plan(BalanceInput {
            me: "me",
            held: &HashSet::new(),
            leases: &leases,
            observations: &obs,
            now: Instant::now(),
            failover: Duration::from_secs(10),
            max_leases: Some(1),
            steal_at_target: true,
            patient: false,
        });
        assert_eq!(p.take, vec!["p".to_string()]);
        assert_eq!(p.target, 1);
    }

    /// A simulated lease table with the real conditional-write semantics, and
    /// workers running their passes on simulated time.
    mod sim {
        use super::*;

        pub(super) struct Worker {
            pub(super) id: String,
            pub(super) held: HashMap<String, u64>,
            pub(super) obs: Observations,
        }

        /// One pass: renew, list, plan, take/steal. Returns ownership changes.
        pub(super) fn pass(
            w: &mut Worker,
            table: &mut HashMap<String, Lease>,
            now: Instant,
            fo: Duration,
        ) -> Vec<String> {
            let mut changes = Vec::new();
            let held: Vec<(String, u64)> = w.held.iter().map(|(k, c)| (k.clone(), *c)).collect();
            for (k, c) in held {
                let l = table.get_mut(&k).unwrap();
                if l.counter == c && l.owner.as_deref() == Some(&w.id) {
                    l.counter += 1;
                    w.held.insert(k, l.counter);
                } else {
                    w.held.remove(&k);
                }
            }
            let leases: Vec<Lease> = table.values().cloned().collect();
            w.obs.observe(&leases, now);
            let held: HashSet<String> = w.held.keys().cloned().collect();
            let p = plan(BalanceInput {
                me: &w.id,
                held: &held,
                leases: &leases,
                observations: &w.obs,
                now,
                failover: fo,
                max_leases: None,
                steal_at_target: true,
                patient: false,
            });
            for k in p.take.iter().chain(&p.steal) {
                let observed = leases.iter().find(|l| &l.key == k).unwrap();
                let l = table.get_mut(k).unwrap();
                if l.counter == observed.counter {
                    l.counter += 1;
                    l.owner = Some(w.id.clone());
                    w.held.insert(k.clone(), l.counter);
                    changes.push(k.clone());
                }
            }
            changes
        }
    }

    #[tokio::test(start_paused = true)]
    async fn second_worker_joins_16_shards_converges_without_flapping() {
        let fo = Duration::from_secs(10);
        let tick = fo / 3;
        let mut table: HashMap<String, Lease> = (0..16)
            .map(|i| {
                (
                    format!("shardId-{i:012}"),
                    lease(&format!("shardId-{i:012}"), None, 0),
                )
            })
            .collect();
        let mut a = sim::Worker {
            id: "a".into(),
            held: HashMap::new(),
            obs: Observations::default(),
        };
        let mut b = sim::Worker {
            id: "b".into(),
            held: HashMap::new(),
            obs: Observations::default(),
        };
        // A alone for a while.
        for _ in 0..5 {
            sim::pass(&mut a, &mut table, Instant::now(), fo);
            tokio::time::advance(tick).await;
        }
        assert_eq!(a.held.len(), 16);
        // B joins, offset by half a tick; count owner changes from now on.
        let joined = Instant::now();
        let mut changes: HashMap<String, usize> = HashMap::new();
        let mut converged_at = None;
        tokio::time::advance(tick / 2).await;
        for round in 0..30 {
            for k in sim::pass(&mut b, &mut table, Instant::now(), fo) {
                *changes.entry(k).or_default() += 1;
            }
            tokio::time::advance(tick / 2).await;
            for k in sim::pass(&mut a, &mut table, Instant::now(), fo) {
                *changes.entry(k).or_default() += 1;
            }
            tokio::time::advance(tick / 2).await;
            let owned = |id: &str| {
                table
                    .values()
                    .filter(|l| l.owner.as_deref() == Some(id))
                    .count()
            };
            if converged_at.is_none() && owned("a") == 8 && owned("b") == 8 && a.held.len() == 8 {
                converged_at = Some(Instant::now() - joined);
            }
            let _ = round;
        }
        let t = converged_at.expect("converged to 8/8");
        assert!(t <= 3 * fo, "converged after {t:?}, limit {:?}", 3 * fo);
        assert!(
            changes.values().all(|&c| c <= 1),
            "a lease changed owner twice: {changes:?}"
        );
        assert_eq!(changes.len(), 8, "exactly the 8 stolen leases moved");
    }

    #[tokio::test(start_paused = true)]
    async fn dead_worker_leases_taken_within_two_failover_times() {
        let fo = Duration::from_secs(10);
        let tick = fo / 3;
        let mut table: HashMap<String, Lease> = (0..4)
            .map(|i| (format!("s{i}"), lease(&format!("s{i}"), None, 0)))
            .collect();
        let mut a = sim::Worker {
            id: "a".into(),
            held: HashMap::new(),
            obs: Observations::default(),
        };
        let mut b = sim::Worker {
            id: "b".into(),
            held: HashMap::new(),
            obs: Observations::default(),
        };
        for _ in 0..12 {
            sim::pass(&mut a, &mut table, Instant::now(), fo);
            sim::pass(&mut b, &mut table, Instant::now(), fo);
            tokio::time::advance(tick).await;
        }
        assert_eq!((a.held.len(), b.held.len()), (2, 2));
        let died = Instant::now();
        // A's last renewal happened one tick before it died.
        let last_renewal = died - tick;
        let mut took_all = None;
        for _ in 0..30 {
            sim::pass(&mut b, &mut table, Instant::now(), fo);
            if b.held.len() == 4 && took_all.is_none() {
                took_all = Some(Instant::now() - died);
            }
            tokio::time::advance(tick).await;
        }
        let t = took_all.expect("b took every lease");
        assert!(t <= 2 * fo, "took {t:?}");
        let since_renewal = died + t - last_renewal;
        assert!(
            since_renewal >= fo,
            "taken {since_renewal:?} after its last renewal"
        );
    }
}
