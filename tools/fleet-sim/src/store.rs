//! The in-memory lease table: DynamoDB's conditional-write semantics
//! ([`LeaseWrite::apply`], the reference the DynamoDB store's conditions
//! follow), the capacity each call would consume, and injected latency,
//! throttling and failures.
//!
//! Capacity follows DynamoDB's published rules: a read unit is 4 KB
//! (strongly consistent) or two 4 KB reads (eventually consistent, 0.5 per
//! 4 KB); a Scan page sums the sizes of the items it returns (at most 1 MB
//! per page) and rounds up to 4 KB; a write unit is 1 KB of the larger of the
//! item before and after the write, at least 1, and a refused conditional
//! write still costs its units. Throttled calls cost nothing.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::future::BoxFuture;
use tidemark_consumer::ConsumerError;
use tidemark_consumer::error::{AwsError, ErrorClass};
use tidemark_consumer::lease::Lease;
use tidemark_consumer::sim::{LeaseDelete, LeaseStore, LeaseWrite, ScanPage};
use tokio::time::Instant;

/// Largest Scan page.
const PAGE_BYTES: usize = 1024 * 1024;
/// One read unit reads this much (strongly consistent).
const RCU_BYTES: usize = 4096;

/// Faults and limits of the simulated table.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Added to every call (simulated time).
    pub latency: Duration,
    /// Share of calls failing with a 5xx-like error before reaching the
    /// table (0..1).
    pub fail_rate: f64,
    /// Read units per second the table serves; more is throttled.
    pub rcu_limit: Option<f64>,
    /// Write units per second the table serves; more is throttled.
    pub wcu_limit: Option<f64>,
    /// Seed of the failure draws.
    pub seed: u64,
}

/// What the table did in one simulated second.
#[derive(Debug, Clone, Copy, Default)]
pub struct Second {
    /// Read units consumed.
    pub rcu: f64,
    /// Write units consumed.
    pub wcu: f64,
    /// Calls refused by throttling.
    pub throttled: u64,
    /// Calls failed by injection.
    pub failed: u64,
    /// Scans (pages) served.
    pub scans: u64,
    /// Of `rcu`: Queries of the owner index.
    pub index_rcu: f64,
    /// Of `wcu`: owner-index writes (a change of `leaseOwner`).
    pub index_wcu: f64,
    /// Owner-index Queries served.
    pub queries: u64,
}

/// A successful write of note, for the figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `worker` took the lease (from someone else, or free).
    Acquired {
        /// Lease key.
        key: String,
        /// New owner.
        worker: String,
        /// The previous owner.
        from: Option<String>,
    },
    /// `worker` wrote a checkpoint.
    Checkpointed {
        /// Lease key.
        key: String,
        /// The writer.
        worker: String,
    },
}

#[derive(Debug)]
struct Item {
    lease: Lease,
    size: usize,
}

#[derive(Debug)]
struct State {
    items: BTreeMap<String, Item>,
    seconds: Vec<Second>,
    changes: Vec<(Duration, Change)>,
    rng: fastrand::Rng,
}

/// The in-memory lease table, shared by every simulated worker.
#[derive(Debug)]
pub struct MemTable {
    name: String,
    faults: Faults,
    start: Instant,
    state: Mutex<State>,
}

fn size_of(lease: &Lease) -> usize {
    tidemark_schema::size::item_size(&lease.to_item())
}

/// The owner index's entry of `lease` (keys only: `leaseOwner`,
/// `leaseKey`), `None` when it has no owner (not indexed).
fn index_entry_size(lease: &Lease) -> Option<usize> {
    let owner = lease.owner.as_ref()?;
    let item = std::collections::HashMap::from([
        ("leaseKey".to_string(), AttributeValue::S(lease.key.clone())),
        ("leaseOwner".to_string(), AttributeValue::S(owner.clone())),
    ]);
    Some(tidemark_schema::size::item_size(&item))
}

/// Write units of the owner index for a write from `before` to `after`:
/// nothing unless `leaseOwner` changes; then a delete of the old entry and
/// a put of the new one, each at least one unit (DynamoDB's GSI rules).
fn index_write_units(before: Option<&Lease>, after: Option<&Lease>) -> f64 {
    let owner = |l: Option<&Lease>| l.and_then(|l| l.owner.clone());
    if owner(before) == owner(after) {
        return 0.0;
    }
    [before, after]
        .into_iter()
        .filter_map(|l| l.and_then(index_entry_size))
        .map(|b| tidemark_schema::size::wcu_for_size(b) as f64)
        .sum()
}

fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(RCU_BYTES).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

impl MemTable {
    /// An empty table `name` with `faults`, metering from now.
    pub fn new(name: &str, faults: Faults) -> Self {
        Self {
            name: name.to_string(),
            state: Mutex::new(State {
                items: BTreeMap::new(),
                seconds: Vec::new(),
                changes: Vec::new(),
                rng: fastrand::Rng::with_seed(faults.seed),
            }),
            faults,
            start: Instant::now(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn elapsed(&self) -> Duration {
        Instant::now().duration_since(self.start)
    }

    /// Per-second capacity, from the start.
    pub fn seconds(&self) -> Vec<Second> {
        self.lock().seconds.clone()
    }

    /// Successful acquisitions and checkpoints, with their times.
    pub fn changes(&self) -> Vec<(Duration, Change)> {
        self.lock().changes.clone()
    }

    /// A copy of every lease.
    pub fn leases(&self) -> Vec<Lease> {
        self.lock()
            .items
            .values()
            .map(|i| i.lease.clone())
            .collect()
    }

    /// Average item size in bytes (0 when empty).
    pub fn mean_item_size(&self) -> usize {
        let s = self.lock();
        s.items
            .values()
            .map(|i| i.size)
            .sum::<usize>()
            .checked_div(s.items.len())
            .unwrap_or(0)
    }

    /// Admits a call that will cost `rcu`/`wcu` (charged when admitted), or
    /// refuses it (throttled or failed).
    fn admit(
        &self,
        state: &mut State,
        op: &'static str,
        rcu: f64,
        wcu: f64,
    ) -> Result<(), AwsError> {
        let sec = self.elapsed().as_secs() as usize;
        if state.seconds.len() <= sec {
            state.seconds.resize(sec + 1, Second::default());
        }
        if self.faults.fail_rate > 0.0 && state.rng.f64() < self.faults.fail_rate {
            state.seconds[sec].failed += 1;
            return Err(AwsError {
                op,
                class: ErrorClass::Retry,
                message: "injected failure (500)".into(),
            });
        }
        let s = &mut state.seconds[sec];
        let over = |used: f64, add: f64, limit: Option<f64>| {
            limit.is_some_and(|l| add > 0.0 && used + add > l)
        };
        if over(s.rcu, rcu, self.faults.rcu_limit) || over(s.wcu, wcu, self.faults.wcu_limit) {
            s.throttled += 1;
            return Err(AwsError {
                op,
                class: ErrorClass::Throttled,
                message: "ProvisionedThroughputExceededException (simulated)".into(),
            });
        }
        s.rcu += rcu;
        s.wcu += wcu;
        Ok(())
    }

    async fn delay(&self) {
        if !self.faults.latency.is_zero() {
            tokio::time::sleep(self.faults.latency).await;
        }
    }

    async fn scan(
        &self,
        consistent: bool,
        start: Option<String>,
    ) -> Result<ScanPage, ConsumerError> {
        self.delay().await;
        let mut st = self.lock();
        let mut leases = Vec::new();
        let mut bytes = 0;
        let mut next = None;
        let range = match &start {
            Some(k) => st
                .items
                .range::<String, _>((std::ops::Bound::Excluded(k), std::ops::Bound::Unbounded)),
            None => st.items.range::<String, _>(..),
        };
        for (k, item) in range {
            if bytes + item.size > PAGE_BYTES && !leases.is_empty() {
                next = leases.last().map(|l: &Lease| l.key.clone());
                break;
            }
            bytes += item.size;
            leases.push(item.lease.clone());
            let _ = k;
        }
        self.admit(&mut st, "Scan", read_units(bytes, consistent), 0.0)?;
        let sec = self.elapsed().as_secs() as usize;
        st.seconds[sec].scans += 1;
        Ok(ScanPage { leases, next })
    }

    async fn get_item(&self, key: &str) -> Result<Option<Lease>, AwsError> {
        self.delay().await;
        let mut st = self.lock();
        let (lease, size) = match st.items.get(key) {
            Some(i) => (Some(i.lease.clone()), i.size),
            None => (None, 0),
        };
        self.admit(&mut st, "GetItem", read_units(size, true), 0.0)?;
        Ok(lease)
    }

    /// A Query of the owner index: eventually consistent (GSIs offer
    /// nothing else), charged on the entries returned (1 MB pages).
    async fn query_owner(&self, owner: &str) -> Result<Vec<String>, ConsumerError> {
        self.delay().await;
        let mut st = self.lock();
        let mut keys = Vec::new();
        let mut bytes = 0;
        for item in st.items.values() {
            if item.lease.owner.as_deref() == Some(owner) {
                bytes += index_entry_size(&item.lease).unwrap_or(0);
                keys.push(item.lease.key.clone());
            }
        }
        let pages = bytes.div_ceil(PAGE_BYTES).max(1);
        let rcu = read_units(bytes, false).max(0.5 * pages as f64);
        self.admit(&mut st, "Query", rcu, 0.0)?;
        let sec = self.elapsed().as_secs() as usize;
        st.seconds[sec].index_rcu += rcu;
        st.seconds[sec].queries += 1;
        Ok(keys)
    }

    async fn send(&self, w: &LeaseWrite) -> Result<(), AwsError> {
        self.delay().await;
        let mut st = self.lock();
        let key = w.key();
        let current = st.items.get(key);
        let before = current.map_or(0, |i| i.size);
        let result = w.apply(current.map(|i| &i.lease));
        let after = result.as_ref().map_or(0, size_of);
        let index_wcu = index_write_units(current.map(|i| &i.lease), result.as_ref().ok());
        let wcu = tidemark_schema::size::wcu_for_size(before.max(after)) as f64 + index_wcu;
        self.admit(&mut st, w.op(), 0.0, wcu)?;
        let sec = self.elapsed().as_secs() as usize;
        st.seconds[sec].index_wcu += index_wcu;
        let new = result?;
        let now = self.elapsed();
        match w {
            LeaseWrite::Acquire { me, .. } => {
                let from = current_owner(&st, key);
                st.changes.push((
                    now,
                    Change::Acquired {
                        key: key.to_string(),
                        worker: me.clone(),
                        from,
                    },
                ));
            }
            LeaseWrite::Checkpoint { me, .. } => st.changes.push((
                now,
                Change::Checkpointed {
                    key: key.to_string(),
                    worker: me.clone(),
                },
            )),
            _ => {}
        }
        st.items.insert(
            key.to_string(),
            Item {
                lease: new,
                size: after,
            },
        );
        Ok(())
    }
}

impl MemTable {
    async fn delete_item(&self, d: &LeaseDelete) -> Result<(), AwsError> {
        self.delay().await;
        let mut st = self.lock();
        let current = st.items.get(&d.key);
        let size = current.map_or(0, |i| i.size);
        let result = d.apply(current.map(|i| &i.lease));
        let wcu = tidemark_schema::size::wcu_for_size(size) as f64;
        self.admit(&mut st, "DeleteItem", 0.0, wcu)?;
        result?;
        st.items.remove(&d.key);
        Ok(())
    }
}

fn current_owner(st: &State, key: &str) -> Option<String> {
    st.items.get(key).and_then(|i| i.lease.owner.clone())
}

impl LeaseStore for MemTable {
    fn name(&self) -> &str {
        &self.name
    }

    fn ensure_table(&self, _timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
        Box::pin(async { Ok(()) })
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

    fn ensure_owner_index(&self, _timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
        Box::pin(async { Ok(()) })
    }

    fn delete<'a>(&'a self, delete: &'a LeaseDelete) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(self.delete_item(delete))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tidemark_consumer::lease::Checkpoint;

    #[tokio::test(start_paused = true)]
    async fn capacity_is_metered_by_dynamodb_rules() {
        let t = MemTable::new("t", Faults::default());
        for i in 0..100 {
            let l = Lease::new(format!("shardId-{i:012}"), Checkpoint::TrimHorizon, vec![]);
            t.send(&LeaseWrite::Create(l)).await.unwrap();
        }
        let size = t.mean_item_size();
        assert!((80..200).contains(&size), "{size}");
        let page = t.scan(true, None).await.unwrap();
        assert_eq!(page.leases.len(), 100);
        assert!(page.next.is_none());
        t.scan(false, None).await.unwrap();
        let s = t.seconds()[0];
        let consistent = (100 * size).div_ceil(4096) as f64;
        assert_eq!(s.rcu, consistent * 1.5);
        assert_eq!(s.wcu, 100.0);
        // A refused write costs its units too.
        let stale = LeaseWrite::Renew {
            key: "shardId-000000000000".into(),
            me: "a".into(),
            counter: 7,
        };
        assert_eq!(
            t.send(&stale).await.unwrap_err().class,
            ErrorClass::ConditionFailed
        );
        assert_eq!(t.seconds()[0].wcu, 101.0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_owner_index_is_charged_only_for_owner_changes_and_queries() {
        let t = MemTable::new("t", Faults::default());
        let key = "shardId-000000000000";
        let l = Lease::new(key, Checkpoint::TrimHorizon, vec![]);
        t.send(&LeaseWrite::Create(l)).await.unwrap();
        let acquire = |counter, me: &str| LeaseWrite::Acquire {
            key: key.into(),
            counter,
            me: me.into(),
            switches: 1,
        };
        // Free -> a: one index put. a -> b: a delete and a put.
        t.send(&acquire(0, "a")).await.unwrap();
        assert_eq!(t.seconds()[0].index_wcu, 1.0);
        t.send(&acquire(1, "b")).await.unwrap();
        assert_eq!(t.seconds()[0].index_wcu, 3.0);
        // A renewal changes no index key: no index write.
        let renew = LeaseWrite::Renew {
            key: key.into(),
            me: "b".into(),
            counter: 2,
        };
        t.send(&renew).await.unwrap();
        assert_eq!(t.seconds()[0].index_wcu, 3.0);
        assert_eq!(t.query_owner("b").await.unwrap(), vec![key.to_string()]);
        assert!(t.query_owner("a").await.unwrap().is_empty());
        // Eventually consistent, at least half a unit per Query.
        assert_eq!((t.seconds()[0].index_rcu, t.seconds()[0].queries), (1.0, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn throttles_past_the_limit_and_pages_at_one_megabyte() {
        let t = MemTable::new(
            "t",
            Faults {
                wcu_limit: Some(10.0),
                ..Faults::default()
            },
        );
        let mut throttled = 0;
        for i in 0..20 {
            let mut l = Lease::new(format!("k{i:05}"), Checkpoint::TrimHorizon, vec![]);
            l.children = vec!["x".repeat(1500)];
            if let Err(e) = t.send(&LeaseWrite::Create(l)).await {
                assert_eq!(e.class, ErrorClass::Throttled);
                throttled += 1;
            }
        }
        // Items of about 1.6 KB: 2 WCU each, 5 fit in 10 WCU.
        assert_eq!(throttled, 15);
        tokio::time::advance(Duration::from_secs(1)).await;
        let big = MemTable::new("b", Faults::default());
        for i in 0..600 {
            let mut l = Lease::new(format!("k{i:05}"), Checkpoint::TrimHorizon, vec![]);
            l.children = vec!["x".repeat(2000)];
            big.send(&LeaseWrite::Create(l)).await.unwrap();
        }
        let first = big.scan(true, None).await.unwrap();
        assert!(first.next.is_some() && first.leases.len() < 600);
        let rest = big.scan(true, first.next).await.unwrap();
        assert_eq!(first.leases.len() + rest.leases.len(), 600);
    }
}
