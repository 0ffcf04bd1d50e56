//! DynamoDB write limits: the pure core. No I/O; every call takes `now`.
//!
//! Model (see `shared/reference/aws-facts.md`):
//! - each table has a token bucket refilled at its write capacity (provisioned
//!   WCU, or the on-demand table limit) that can bank up to `burst_secs` of
//!   unused capacity;
//! - each table has `partitions` partitions, each a bucket refilled at
//!   1,000 WCU/s holding one second of it; an item goes to the partition that
//!   owns its partition-key hash, as DynamoDB's hash ranges do (they start
//!   as equal ranges);
//! - optionally (`split_hot_after`), a partition that stays busy for that
//!   long (every second at least 80% of its rate consumed, or a throttle) is
//!   split in two at the middle of its hash range, each half
//!   with its own 1,000 WCU/s, as DynamoDB's adaptive capacity ("split for
//!   heat") does; at most `max_splits` per table. A single key hotter than a
//!   partition stays limited: a key never spans two partitions here;
//! - a write is admitted only if both its partition and its table hold its
//!   cost; otherwise it is throttled, naming which limit was hit.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::bucket::TokenBucket;

/// How a table is billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityMode {
    /// Provisioned WCU/RCU.
    Provisioned,
    /// PAY_PER_REQUEST, limited by the on-demand table limit.
    OnDemand,
}

/// What the proxy knows about a table, from its description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// Billing mode.
    pub mode: CapacityMode,
    /// Provisioned write capacity units (ignored on demand).
    pub wcu: u64,
    /// Provisioned read capacity units (used for the partition count).
    pub rcu: u64,
    /// Partition (HASH) key attribute name.
    pub hash_key: String,
    /// Sort (RANGE) key attribute name, if any.
    pub range_key: Option<String>,
}

/// Limits that apply to every table.
#[derive(Debug, Clone)]
pub struct DynamoLimits {
    /// Most WCU one partition serves per second (AWS: 1,000).
    pub partition_wcu: f64,
    /// Seconds of unused provisioned capacity a table banks as burst credit (AWS: 300).
    pub burst_secs: f64,
    /// Seconds of capacity a table holds when the proxy first learns of it.
    pub initial_credit_secs: f64,
    /// Write limit of an on-demand table in WCU/s (AWS's new-table figure: 4,000).
    pub on_demand_wcu: f64,
    /// Partition count per table, overriding the default formula.
    pub partition_overrides: HashMap<String, u32>,
    /// Split a partition that has been busy (each second: at least
    /// [`BUSY_SHARE`] of its rate consumed, or a throttle) for this long;
    /// `None`: never.
    pub split_hot_after: Option<std::time::Duration>,
    /// Most splits per table.
    pub max_splits: u32,
}

impl Default for DynamoLimits {
    fn default() -> Self {
        Self {
            partition_wcu: 1000.0,
            burst_secs: 300.0,
            initial_credit_secs: 1.0,
            on_demand_wcu: 4000.0,
            partition_overrides: HashMap::new(),
            split_hot_after: None,
            max_splits: 8,
        }
    }
}

/// Why a write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Throttle {
    /// The table's capacity (and burst credit) is used up.
    Table,
    /// The item's partition served its 1,000 WCU this second.
    KeyRange,
}

/// Counters of one partition.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PartitionStats {
    /// WCU consumed by admitted writes.
    pub consumed_wcu: u64,
    /// Items admitted.
    pub accepted_items: u64,
    /// Items refused because this partition was full.
    pub throttled_items: u64,
}

/// Counters of one table.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableStats {
    /// WCU consumed by admitted writes.
    pub consumed_wcu: u64,
    /// Items admitted.
    pub accepted_items: u64,
    /// Items refused for lack of table capacity.
    pub throttled_table: u64,
    /// Items refused because their partition was full.
    pub throttled_key_range: u64,
    /// Hot partitions split (adaptive capacity).
    pub splits: u64,
}

/// Share of a partition's rate that makes a second busy. DynamoDB splits a
/// partition for sustained high traffic, not only for throttles: a client
/// pacing itself just under the limit still gets its partition split.
pub const BUSY_SHARE: f64 = 0.8;

/// One partition: the hash range from `start` to the next partition's.
#[derive(Debug)]
struct Partition {
    start: u64,
    bucket: TokenBucket,
    stats: PartitionStats,
    /// Busy every second since then.
    hot_since: Option<Instant>,
    /// The current one-second window: start, WCU consumed, any throttle.
    window_start: Instant,
    window_wcu: f64,
    window_throttled: bool,
}

impl Partition {
    fn new(start: u64, pw: f64, now: Instant) -> Self {
        Partition {
            start,
            bucket: TokenBucket::new(pw, pw, pw, now),
            stats: PartitionStats::default(),
            hot_since: None,
            window_start: now,
            window_wcu: 0.0,
            window_throttled: false,
        }
    }

    /// Closes the one-second window if it is over: a busy one extends the
    /// hot spell, a quiet one (or a gap) ends it.
    fn roll(&mut self, now: Instant, pw: f64) {
        let age = now.saturating_duration_since(self.window_start);
        if age < std::time::Duration::from_secs(1) {
            return;
        }
        let busy = self.window_throttled || self.window_wcu >= BUSY_SHARE * pw;
        if busy && age < std::time::Duration::from_secs(2) {
            self.hot_since.get_or_insert(self.window_start);
        } else {
            self.hot_since = None;
        }
        self.window_start = now;
        self.window_wcu = 0.0;
        self.window_throttled = false;
    }
}

/// `n` partitions over equal hash ranges: partition `i` holds the hashes
/// `h` with `h * n / 2^64 == i`, as [`DynamoLimiter::partition_index`] says.
fn equal_partitions(n: usize, pw: f64, now: Instant) -> Vec<Partition> {
    (0..n)
        .map(|i| {
            let start = ((i as u128) << 64).div_ceil(n as u128);
            Partition::new(u64::try_from(start).unwrap_or(u64::MAX), pw, now)
        })
        .collect()
}

#[derive(Debug)]
struct TableState {
    spec: TableSpec,
    table: TokenBucket,
    partitions: Vec<Partition>,
    stats: TableStats,
}

/// Snapshot of one table for `/_limits/stats`.
#[derive(Debug, Clone, Serialize)]
pub struct TableReport {
    /// Billing mode.
    pub mode: CapacityMode,
    /// Write limit the table bucket refills at (WCU/s).
    pub write_limit_wcu: f64,
    /// Burst credit (WCU) available now.
    pub credit_wcu: f64,
    /// Counters.
    #[serde(flatten)]
    pub stats: TableStats,
    /// Per-partition counters, by partition index.
    pub partitions: Vec<PartitionStats>,
}

/// Per-table write limiter.
#[derive(Debug)]
pub struct DynamoLimiter {
    limits: DynamoLimits,
    tables: HashMap<String, TableState>,
}

impl DynamoLimiter {
    /// A limiter that knows no tables yet.
    pub fn new(limits: DynamoLimits) -> Self {
        Self {
            limits,
            tables: HashMap::new(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &DynamoLimits {
        &self.limits
    }

    /// Default partition count: `max(ceil(WCU/1000), ceil(RCU/3000), 1)`, or
    /// the table limit over the partition cap on demand, unless overridden.
    pub fn partition_count(&self, name: &str, spec: &TableSpec) -> u32 {
        if let Some(n) = self.limits.partition_overrides.get(name) {
            return (*n).max(1);
        }
        let n = match spec.mode {
            CapacityMode::Provisioned => spec.wcu.div_ceil(1000).max(spec.rcu.div_ceil(3000)),
            CapacityMode::OnDemand => {
                (self.limits.on_demand_wcu / self.limits.partition_wcu).ceil() as u64
            }
        };
        u32::try_from(n.max(1)).unwrap_or(u32::MAX)
    }

    fn write_limit(&self, spec: &TableSpec) -> f64 {
        match spec.mode {
            CapacityMode::Provisioned => spec.wcu as f64,
            CapacityMode::OnDemand => self.limits.on_demand_wcu,
        }
    }

    fn table_capacity(&self, spec: &TableSpec) -> f64 {
        let rate = self.write_limit(spec);
        match spec.mode {
            // Burst credit is a provisioned-mode concept; an on-demand table
            // is simply capped at its limit (one second of it).
            CapacityMode::Provisioned => rate * self.limits.burst_secs.max(1.0),
            CapacityMode::OnDemand => rate,
        }
    }

    /// Records a table's description (CreateTable, UpdateTable, DescribeTable
    /// seen through the proxy). A new table starts with `initial_credit_secs`
    /// of capacity; a known one keeps its credit and partitions never merge
    /// (a capacity decrease does not reduce the partition count, as in AWS).
    pub fn learn(&mut self, name: &str, spec: TableSpec, now: Instant) {
        let rate = self.write_limit(&spec);
        let capacity = self.table_capacity(&spec);
        let wanted = self.partition_count(name, &spec) as usize;
        let pw = self.limits.partition_wcu;
        match self.tables.get_mut(name) {
            Some(state) => {
                state.table.reconfigure(rate, capacity, now);
                let keep = if self.limits.partition_overrides.contains_key(name) {
                    wanted
                } else {
                    wanted.max(state.partitions.len())
                };
                if keep != state.partitions.len() {
                    // A new count re-hashes key ranges; start the new set full.
                    state.partitions = equal_partitions(keep, pw, now);
                }
                state.spec = spec;
            }
            None => {
                let initial = rate * self.limits.initial_credit_secs;
                self.tables.insert(
                    name.to_owned(),
                    TableState {
                        spec,
                        table: TokenBucket::new(rate, capacity, initial, now),
                        partitions: equal_partitions(wanted, pw, now),
                        stats: TableStats::default(),
                    },
                );
            }
        }
    }

    /// Forgets a table (DeleteTable, or a reset).
    pub fn forget(&mut self, name: &str) {
        self.tables.remove(name);
    }

    /// Forgets every table; they are learned again on next use.
    pub fn clear(&mut self) {
        self.tables.clear();
    }

    /// The known description of a table.
    pub fn spec(&self, name: &str) -> Option<&TableSpec> {
        self.tables.get(name).map(|t| &t.spec)
    }

    /// Partition count of a known table.
    pub fn partitions_of(&self, name: &str) -> Option<usize> {
        self.tables.get(name).map(|t| t.partitions.len())
    }

    /// The partition (of `n`) that owns a partition key: its hash's position
    /// in the 64-bit hash space split into `n` equal ranges.
    pub fn partition_index(pk: &[u8], n: usize) -> usize {
        ((u128::from(Self::key_hash(pk)) * n as u128) >> 64) as usize
    }

    /// A partition key's position in the 64-bit hash space: the first
    /// 8 bytes of its SHA-256, big-endian.
    pub fn key_hash(pk: &[u8]) -> u64 {
        let d = Sha256::digest(pk);
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        u64::from_be_bytes(b)
    }

    /// Splits partition `i` at the middle of its hash range.
    fn split(state: &mut TableState, i: usize, pw: f64, now: Instant) {
        let start = u128::from(state.partitions[i].start);
        let end = state
            .partitions
            .get(i + 1)
            .map_or(1u128 << 64, |p| u128::from(p.start));
        if end - start < 2 {
            return;
        }
        let mid = u64::try_from(start + (end - start) / 2).unwrap_or(u64::MAX);
        let p = &mut state.partitions[i];
        p.hot_since = None;
        // Both halves start with what the partition had left: a split adds
        // capacity from now on, never a burst.
        let left = p.bucket.available(now).max(0.0);
        let mut half = Partition::new(mid, pw, now);
        half.bucket = TokenBucket::new(pw, pw, left, now);
        state.partitions.insert(i + 1, half);
        state.stats.splits += 1;
    }

    /// Decides one write of `wcu` units to the item whose partition key is
    /// `pk` in a known table. `None` if the table is unknown.
    pub fn admit(
        &mut self,
        table: &str,
        pk: &[u8],
        wcu: u64,
        now: Instant,
    ) -> Option<Result<usize, Throttle>> {
        let state = self.tables.get_mut(table)?;
        let h = Self::key_hash(pk);
        let p = state
            .partitions
            .partition_point(|x| x.start <= h)
            .saturating_sub(1);
        let cost = wcu as f64;
        let part_ok = state.partitions[p].bucket.available(now) + 1e-9 >= cost;
        let table_ok = state.table.available(now) + 1e-9 >= cost;
        let verdict = if !part_ok {
            Err(Throttle::KeyRange)
        } else if !table_ok {
            Err(Throttle::Table)
        } else {
            state.partitions[p].bucket.charge(cost, now);
            state.table.charge(cost, now);
            Ok(p)
        };
        let pw = self.limits.partition_wcu;
        let part = &mut state.partitions[p];
        part.roll(now, pw);
        match verdict {
            Ok(_) => {
                state.stats.consumed_wcu += wcu;
                state.stats.accepted_items += 1;
                part.stats.consumed_wcu += wcu;
                part.stats.accepted_items += 1;
                part.window_wcu += cost;
            }
            Err(Throttle::KeyRange) => {
                state.stats.throttled_key_range += 1;
                part.stats.throttled_items += 1;
                part.window_throttled = true;
            }
            Err(Throttle::Table) => state.stats.throttled_table += 1,
        }
        if let Some(after) = self.limits.split_hot_after
            && part
                .hot_since
                .is_some_and(|h| now.saturating_duration_since(h) >= after)
            && state.stats.splits < u64::from(self.limits.max_splits)
        {
            Self::split(state, p, pw, now);
        }
        Some(verdict)
    }

    /// Zeroes every table's counters, keeping buckets.
    pub fn reset_stats(&mut self) {
        for t in self.tables.values_mut() {
            t.stats = TableStats::default();
            t.partitions
                .iter_mut()
                .for_each(|p| p.stats = PartitionStats::default());
        }
    }

    /// Snapshot of every known table.
    pub fn report(&mut self, now: Instant) -> HashMap<String, TableReport> {
        self.tables
            .iter_mut()
            .map(|(name, t)| {
                (
                    name.clone(),
                    TableReport {
                        mode: t.spec.mode,
                        write_limit_wcu: t.table.rate(),
                        credit_wcu: t.table.available(now),
                        stats: t.stats.clone(),
                        partitions: t.partitions.iter().map(|p| p.stats.clone()).collect(),
                    },
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn provisioned(wcu: u64, rcu: u64) -> TableSpec {
        TableSpec {
            mode: CapacityMode::Provisioned,
            wcu,
            rcu,
            hash_key: "pk".into(),
            range_key: Some("sk".into()),
        }
    }

    /// Offers `per_sec` writes of `wcu` each, spread evenly, for `secs`
    /// simulated seconds starting at `start`, keys from `key(i)`. Returns
    /// how many were admitted.
    fn offer(
        l: &mut DynamoLimiter,
        table: &str,
        start: Instant,
        secs: u64,
        per_sec: u64,
        wcu: u64,
        key: impl Fn(u64) -> String,
    ) -> u64 {
        let total = secs * per_sec;
        let step = Duration::from_secs(1).as_nanos() as u64 / per_sec;
        (0..total)
            .filter(|i| {
                let now = start + Duration::from_nanos(i * step);
                matches!(l.admit(table, key(*i).as_bytes(), wcu, now), Some(Ok(_)))
            })
            .count() as u64
    }

    #[test]
    fn default_partition_count_follows_the_formula() {
        let l = DynamoLimiter::new(DynamoLimits::default());
        assert_eq!(l.partition_count("t", &provisioned(1000, 10)), 1);
        assert_eq!(l.partition_count("t", &provisioned(1001, 10)), 2);
        assert_eq!(l.partition_count("t", &provisioned(10_000, 10)), 10);
        assert_eq!(l.partition_count("t", &provisioned(5, 9001)), 4);
        assert_eq!(l.partition_count("t", &provisioned(0, 0)), 1);
        let mut od = provisioned(0, 0);
        od.mode = CapacityMode::OnDemand;
        assert_eq!(l.partition_count("t", &od), 4);
        let mut over = DynamoLimits::default();
        over.partition_overrides.insert("t".into(), 7);
        assert_eq!(
            DynamoLimiter::new(over).partition_count("t", &provisioned(1000, 1)),
            7
        );
    }

    #[test]
    fn thousand_wcu_table_sustains_about_a_thousand_1kb_items_per_second() {
        let t0 = Instant::now();
        let mut l = DynamoLimiter::new(DynamoLimits::default());
        l.learn("t", provisioned(1000, 1), t0);
        // Offered twice the capacity for 30 s, distinct keys.
        let accepted = offer(&mut l, "t", t0, 30, 2000, 1, |i| format!("k{i}"));
        // 1,000/s sustained, plus the one second of credit a new table holds
        // and the partition's one-second bucket: 30,000 + at most 1,000.
        let expected = 30_000.0;
        let ratio = accepted as f64 / expected;
        assert!((0.95..=1.05).contains(&ratio), "accepted {accepted}");
    }

    #[test]
    fn burst_credit_accrues_while_idle_and_is_capped_at_300_seconds() {
        let t0 = Instant::now();
        let mut limits = DynamoLimits {
            initial_credit_secs: 0.0,
            ..DynamoLimits::default()
        };
        // Four partitions so the table, not one partition, is the limit.
        limits.partition_overrides.insert("t".into(), 4);
        let mut l = DynamoLimiter::new(limits.clone());
        l.learn("t", provisioned(1000, 1), t0);
        // Idle 60 s: 60,000 WCU of credit. Then offer 3,000/s for 40 s.
        let start = t0 + Duration::from_secs(60);
        let accepted = offer(&mut l, "t", start, 40, 3000, 1, |i| format!("k{i}"));
        let expected = 40_000.0 + 60_000.0;
        let ratio = accepted as f64 / expected;
        assert!(
            (0.95..=1.05).contains(&ratio),
            "accepted {accepted}, expected ~{expected}"
        );

        // Idle 1,000 s earns no more than 300 s of credit.
        let mut l = DynamoLimiter::new(limits);
        l.learn("t", provisioned(1000, 1), t0);
        let start = t0 + Duration::from_secs(1000);
        let accepted = offer(&mut l, "t", start, 200, 4000, 1, |i| format!("k{i}"));
        let expected = 200_000.0 + 300_000.0;
        let ratio = accepted as f64 / expected;
        assert!(
            (0.95..=1.05).contains(&ratio),
            "accepted {accepted}, expected ~{expected}"
        );
    }

    #[test]
    fn one_partition_key_is_capped_at_1000_wcu_on_a_10000_wcu_table() {
        let t0 = Instant::now();
        let mut l = DynamoLimiter::new(DynamoLimits::default());
        l.learn("t", provisioned(10_000, 1), t0);
        assert_eq!(l.partitions_of("t"), Some(10));
        let hot = offer(&mut l, "t", t0, 30, 5000, 1, |_| "2025-01-01T00".to_owned());
        let ratio = hot as f64 / 30_000.0;
        assert!((0.95..=1.05).contains(&ratio), "hot key accepted {hot}");
        let report = l.report(t0 + Duration::from_secs(30));
        let t = &report["t"];
        assert!(t.stats.throttled_key_range > 100_000);
        assert_eq!(t.stats.throttled_table, 0);
        // All of it landed on one partition.
        assert_eq!(
            t.partitions.iter().filter(|p| p.accepted_items > 0).count(),
            1
        );

        // Spread over many keys the same table takes 5,000/s without throttles.
        let mut l = DynamoLimiter::new(DynamoLimits::default());
        l.learn("t", provisioned(10_000, 1), t0);
        let spread = offer(&mut l, "t", t0 + Duration::from_secs(5), 5, 5000, 1, |i| {
            format!("k{i}")
        });
        assert_eq!(spread, 25_000);
    }

    #[test]
    fn item_cost_is_charged_in_wcu() {
        let t0 = Instant::now();
        let limits = DynamoLimits {
            initial_credit_secs: 1.0,
            ..DynamoLimits::default()
        };
        let mut l = DynamoLimiter::new(limits);
        l.learn("t", provisioned(100, 1), t0);
        // 100 WCU of credit: twenty 5-WCU items fit, the 21st does not.
        for i in 0..20 {
            assert!(matches!(
                l.admit("t", format!("k{i}").as_bytes(), 5, t0),
                Some(Ok(_))
            ));
        }
        assert_eq!(l.admit("t", b"k20", 5, t0), Some(Err(Throttle::Table)));
        assert_eq!(l.admit("unknown", b"k", 1, t0), None);
    }

    #[test]
    fn update_table_changes_rate_and_never_merges_partitions() {
        let t0 = Instant::now();
        let mut l = DynamoLimiter::new(DynamoLimits::default());
        l.learn("t", provisioned(4000, 1), t0);
        assert_eq!(l.partitions_of("t"), Some(4));
        l.learn("t", provisioned(100, 1), t0);
        assert_eq!(l.partitions_of("t"), Some(4));
        let r = l.report(t0);
        assert!((r["t"].write_limit_wcu - 100.0).abs() < 1e-9);
        l.learn("t", provisioned(6000, 1), t0);
        assert_eq!(l.partitions_of("t"), Some(6));
    }

    #[test]
    fn on_demand_tables_use_the_configured_limit() {
        let t0 = Instant::now();
        let limits = DynamoLimits {
            on_demand_wcu: 2000.0,
            ..DynamoLimits::default()
        };
        let mut l = DynamoLimiter::new(limits);
        let mut spec = provisioned(0, 0);
        spec.mode = CapacityMode::OnDemand;
        l.learn("t", spec, t0);
        let accepted = offer(&mut l, "t", t0, 30, 4000, 1, |i| format!("k{i}"));
        let ratio = accepted as f64 / 60_000.0;
        assert!((0.95..=1.05).contains(&ratio), "accepted {accepted}");
    }

    #[test]
    fn partition_ranges_match_partition_index() {
        let t0 = Instant::now();
        let mut l = DynamoLimiter::new(DynamoLimits::default());
        l.learn("t", provisioned(7_000, 1), t0);
        for i in 0..2_000 {
            let k = format!("S:k{i}");
            let want = DynamoLimiter::partition_index(k.as_bytes(), 7);
            assert_eq!(l.admit("t", k.as_bytes(), 1, t0), Some(Ok(want)), "{k}");
        }
    }

    #[test]
    fn a_partition_that_stays_hot_is_split_and_a_single_key_stays_capped() {
        let t0 = Instant::now();
        let limits = DynamoLimits {
            split_hot_after: Some(Duration::from_secs(2)),
            max_splits: 3,
            ..DynamoLimits::default()
        };
        let mut over = limits.clone();
        over.partition_overrides.insert("t".into(), 1);
        // 1,800 WCU/s over many keys on one partition of a 4,000 WCU table:
        // capped at 1,000 until the partition splits.
        let mut l = DynamoLimiter::new(over.clone());
        l.learn("t", provisioned(4_000, 1), t0);
        // Two seconds: one partition's 1,000/s plus its full bucket.
        let first = offer(&mut l, "t", t0, 2, 1800, 1, |i| format!("S:k{i}"));
        assert!(first <= 3_100, "before the split: {first}");
        // A hot spell of 2 s splits it; measured after 6 s of it.
        offer(&mut l, "t", t0 + Duration::from_secs(10), 6, 1800, 1, |i| {
            format!("S:k{i}")
        });
        let later = offer(
            &mut l,
            "t",
            t0 + Duration::from_secs(16),
            10,
            1800,
            1,
            |i| format!("S:k{i}"),
        );
        assert!(later >= 17_000, "after the split: {later} of 18,000");
        assert!(l.partitions_of("t").unwrap_or(0) >= 2);
        let splits = l.report(t0)["t"].stats.splits;
        assert!((1..=3).contains(&splits), "{splits}");
        // Without splitting, the same load stays at one partition's 1,000/s.
        let mut still = over.clone();
        still.split_hot_after = None;
        let mut l = DynamoLimiter::new(still);
        l.learn("t", provisioned(4_000, 1), t0);
        let capped = offer(&mut l, "t", t0, 12, 1800, 1, |i| format!("S:k{i}"));
        assert!(capped <= 13_100, "{capped}");
        // One key at 1,800/s: splits (up to max_splits) cannot help it.
        let mut l = DynamoLimiter::new(over);
        l.learn("t", provisioned(4_000, 1), t0);
        let hot = offer(&mut l, "t", t0, 20, 1800, 1, |_| "S:hot".to_owned());
        assert!(hot <= 21_100, "{hot}");
        assert_eq!(l.report(t0)["t"].stats.splits, 3);
    }

    #[test]
    fn partition_index_is_stable_and_spreads() {
        let n = 10;
        let a = DynamoLimiter::partition_index(b"S:x", n);
        assert_eq!(a, DynamoLimiter::partition_index(b"S:x", n));
        let mut hit = vec![0u32; n];
        for i in 0..10_000 {
            hit[DynamoLimiter::partition_index(format!("S:k{i}").as_bytes(), n)] += 1;
        }
        assert!(hit.iter().all(|&c| (800..1200).contains(&c)), "{hit:?}");
    }
}
