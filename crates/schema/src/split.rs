//! Adaptive write sharding: split records, the keys they give, and the
//! `[schema.adaptive_sharding]` settings.
//!
//! A *split* gives one hot entity more partition keys in one period table
//! from an event time on. Its record lives in that table, under the
//! reserved partition key [`SPLITS_PK`] (sort key `{entity}#{fan_out}`), and
//! is written (conditionally: one record per entity and fan-out) before any
//! write uses it. A table carries its own splits: a new period starts from
//! the base layout, and an archived or exported table stays readable.
//!
//! Keying is pure: the split that applies to an event is the one of its
//! entity with the largest `from_ms <= event time` (ties: the larger
//! fan-out); the sub-key is `H(event id) mod fan_out` ([`shard_of`]), and
//! sub-key 0 is the base key, so the base key stays valid and still takes
//! `1/fan_out`. Sub-keys `k >= 1` append `#x{k}` to the base partition key;
//! the sort key is unchanged (so `time_bucket` reads still query each
//! sub-key with the entity as sort-key prefix).
//!
//! Why no two workers key one event differently: a split's `from_ms` is at
//! least `learn_delay` after it is made, and a worker keys an event whose
//! time is at or after `last_refresh + learn_delay` only after a fresh
//! refresh of the table's splits ([`TableSplits::knows`]). Every split a
//! worker does not know yet starts after every event it keys.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::key::ItemKey;
use crate::size::Item;
use crate::strategy::{KeyAttributes, KeyStrategy, shard_of};
use crate::timefmt;

/// The partition key value of a table's split records. Never an entity's
/// key: `entity` rejects it as an entity id, `time_bucket` keys start with
/// a number, and suffix keys end with one.
pub const SPLITS_PK: &str = "tidemark#splits";

/// Most sub-keys one entity may get in one table.
pub const MAX_FAN_OUT: u32 = 1024;

/// The separator of a sub-key: sub-key `k` of base partition key `p` is
/// `{p}#x{k}`.
const SUB_KEY_MARK: &str = "#x";

/// `[schema.adaptive_sharding]`: when a hot entity gets more write shards.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveSharding {
    /// Give an entity held back at one partition's limit more partition
    /// keys (for the `time_bucket` and `entity` strategies). Default false.
    #[serde(default)]
    pub enabled: bool,
    /// Most partition keys one entity gets in one table; fan-out grows 2,
    /// 4, 8, ... up to this. Default 8 (8,000 WCU/s for one entity).
    #[serde(default = "default_max_fan_out")]
    #[schemars(range(min = 2, max = 1024))]
    pub max_fan_out: u32,
    /// How long an entity's key must be held back at its partition's limit
    /// (continuously) before it is split, or split again. Default 10s.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "default_hold_threshold")]
    pub hold_threshold: Duration,
    /// How often every worker re-reads the splits of the tables it writes.
    /// Default 5s.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "default_refresh_interval")]
    pub refresh_interval: Duration,
    /// How far after its decision a split starts (in event time): every
    /// worker must have re-read the splits by then. At least two
    /// `refresh_interval`s; the rest is the margin for clocks that
    /// disagree. Default 20s.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "default_learn_delay")]
    pub learn_delay: Duration,
}

const fn default_max_fan_out() -> u32 {
    8
}
const fn default_hold_threshold() -> Duration {
    Duration::from_secs(10)
}
const fn default_refresh_interval() -> Duration {
    Duration::from_secs(5)
}
const fn default_learn_delay() -> Duration {
    Duration::from_secs(20)
}

impl Default for AdaptiveSharding {
    fn default() -> Self {
        AdaptiveSharding {
            enabled: false,
            max_fan_out: default_max_fan_out(),
            hold_threshold: default_hold_threshold(),
            refresh_interval: default_refresh_interval(),
            learn_delay: default_learn_delay(),
        }
    }
}

impl AdaptiveSharding {
    /// Every problem, as (key under `schema.adaptive_sharding`, why).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !(2..=MAX_FAN_OUT).contains(&self.max_fan_out) || !self.max_fan_out.is_power_of_two() {
            out.push((
                "adaptive_sharding.max_fan_out",
                format!(
                    "is {}: use a power of two from 2 to {MAX_FAN_OUT}",
                    self.max_fan_out
                ),
            ));
        }
        if self.hold_threshold.is_zero() {
            out.push((
                "adaptive_sharding.hold_threshold",
                "is zero: give how long a key must be held back, e.g. \"10s\"".into(),
            ));
        }
        if self.refresh_interval.is_zero() {
            out.push((
                "adaptive_sharding.refresh_interval",
                "is zero: give how often splits are re-read, e.g. \"5s\"".into(),
            ));
        }
        if self.learn_delay < self.refresh_interval * 2 {
            out.push((
                "adaptive_sharding.learn_delay",
                "is less than two `refresh_interval`s: a worker could key an event before it learned the split that applies; raise it".into(),
            ));
        }
        out
    }

    /// The fan-out after `current` (1 when not split): the next power of
    /// two, or `None` at `max_fan_out`.
    pub fn next_fan_out(&self, current: u32) -> Option<u32> {
        let next = current.max(1).checked_mul(2)?;
        (next <= self.max_fan_out).then_some(next)
    }
}

/// One recorded split: from `from_ms` (event time) on, `entity`'s events
/// in this table spread over `fan_out` partition keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Split {
    /// The entity id.
    pub entity: String,
    /// First event time (epoch ms) the split applies to.
    pub from_ms: i64,
    /// Partition keys the entity's events spread over (a power of two).
    pub fan_out: u32,
    /// When it was decided (epoch ms, the deciding worker's clock).
    pub made_at_ms: i64,
    /// The worker that decided it.
    pub worker: String,
    /// Why: what the worker saw (e.g. "key 3#2026-11-27T10 held back 10.0s
    /// at fan-out 2 and 1000 WCU/s": the hold at the fan-out it had).
    pub evidence: String,
}

/// A split record that cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("split record {sk:?}: {problem}")]
pub struct SplitError {
    /// The record's sort key.
    pub sk: String,
    /// What is missing or wrong.
    pub problem: String,
}

/// Attribute names of a split record besides the key attributes.
const ENTITY: &str = "split_entity";
const FROM_MS: &str = "split_from_ms";
const FAN_OUT: &str = "split_fan_out";
const MADE_AT_MS: &str = "split_made_at_ms";
const WORKER: &str = "split_worker";
const EVIDENCE: &str = "split_evidence";

impl Split {
    /// The record's sort key: `{entity}#{fan_out}` (one record per entity
    /// and fan-out, so two workers deciding the same step write one).
    pub fn sort_key(&self) -> String {
        format!("{}#{}", self.entity, self.fan_out)
    }

    /// The record as a DynamoDB item (write it with
    /// `attribute_not_exists` on the partition key).
    pub fn to_item(&self, attrs: &KeyAttributes) -> Item {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: i64| AttributeValue::N(v.to_string());
        [
            (attrs.pk.clone(), s(SPLITS_PK)),
            (attrs.sk.clone(), s(&self.sort_key())),
            (ENTITY.to_owned(), s(&self.entity)),
            (FROM_MS.to_owned(), n(self.from_ms)),
            (FAN_OUT.to_owned(), n(i64::from(self.fan_out))),
            (MADE_AT_MS.to_owned(), n(self.made_at_ms)),
            (WORKER.to_owned(), s(&self.worker)),
            (EVIDENCE.to_owned(), s(&self.evidence)),
        ]
        .into_iter()
        .collect()
    }

    /// A record read back from the table.
    pub fn from_item(item: &Item, attrs: &KeyAttributes) -> Result<Split, SplitError> {
        let sk = match item.get(&attrs.sk) {
            Some(AttributeValue::S(s)) => s.clone(),
            _ => String::new(),
        };
        let err = |problem: String| SplitError {
            sk: sk.clone(),
            problem,
        };
        let s = |name: &str| match item.get(name) {
            Some(AttributeValue::S(v)) => Ok(v.clone()),
            _ => Err(err(format!("no string attribute {name}"))),
        };
        let n = |name: &str| match item.get(name) {
            Some(AttributeValue::N(v)) => v
                .parse::<i64>()
                .map_err(|_| err(format!("{name} is not an integer: {v}"))),
            _ => Err(err(format!("no number attribute {name}"))),
        };
        let fan_out = u32::try_from(n(FAN_OUT)?)
            .ok()
            .filter(|f| (2..=MAX_FAN_OUT).contains(f))
            .ok_or_else(|| err(format!("{FAN_OUT} is not from 2 to {MAX_FAN_OUT}")))?;
        Ok(Split {
            entity: s(ENTITY)?,
            from_ms: n(FROM_MS)?,
            fan_out,
            made_at_ms: n(MADE_AT_MS)?,
            worker: s(WORKER).unwrap_or_default(),
            evidence: s(EVIDENCE).unwrap_or_default(),
        })
    }

    /// One line for logs and `status`.
    pub fn describe(&self) -> String {
        format!(
            "{} x{} from {} (by {}: {})",
            self.entity,
            self.fan_out,
            timefmt::iso_millis(self.from_ms),
            self.worker,
            self.evidence
        )
    }
}

/// The splits of one table, by entity, each entity's in the order they
/// apply. The same records give the same answers whatever order they were
/// added in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableSplits {
    by_entity: BTreeMap<String, Vec<Split>>,
}

impl TableSplits {
    /// The splits of `records` (any order; repeats are kept once).
    pub fn from_splits(records: impl IntoIterator<Item = Split>) -> TableSplits {
        let mut t = TableSplits::default();
        for s in records {
            t.add(s);
        }
        t
    }

    /// Adds one record (a repeat of a known one changes nothing).
    pub fn add(&mut self, split: Split) {
        let list = self.by_entity.entry(split.entity.clone()).or_default();
        if list
            .iter()
            .any(|s| s.fan_out == split.fan_out && s.from_ms == split.from_ms)
        {
            return;
        }
        list.push(split);
        list.sort_by_key(|s| (s.from_ms, s.fan_out));
    }

    /// No entity is split.
    pub fn is_empty(&self) -> bool {
        self.by_entity.is_empty()
    }

    /// The split entities, each with its splits in the order they apply.
    pub fn entities(&self) -> impl Iterator<Item = (&str, &[Split])> {
        self.by_entity
            .iter()
            .map(|(e, s)| (e.as_str(), s.as_slice()))
    }

    /// The splits of `entity`, in the order they apply.
    pub fn of(&self, entity: &str) -> &[Split] {
        self.by_entity.get(entity).map_or(&[], Vec::as_slice)
    }

    /// The fan-out of `entity` at event time `ts_ms`: that of its split
    /// with the largest `from_ms <= ts_ms` (1 when none applies).
    pub fn fan_out_at(&self, entity: &str, ts_ms: i64) -> u32 {
        self.of(entity)
            .iter()
            .rev()
            .find(|s| s.from_ms <= ts_ms)
            .map_or(1, |s| s.fan_out)
    }

    /// The largest fan-out `entity` has reached (1 when not split).
    pub fn max_fan_out(&self, entity: &str) -> u32 {
        self.of(entity).iter().map(|s| s.fan_out).max().unwrap_or(1)
    }

    /// The first event time sub-key `k` of `entity` may hold (`None`: no
    /// split ever uses it). Sub-key 0, the base key, holds any time.
    pub fn sub_key_from(&self, entity: &str, k: u32) -> Option<i64> {
        if k == 0 {
            return Some(i64::MIN);
        }
        self.of(entity)
            .iter()
            .filter(|s| s.fan_out > k)
            .map(|s| s.from_ms)
            .min()
    }

    /// True when splits read at `refreshed_at_ms` are enough to key an
    /// event at `ts_ms`: every split made after that read starts at or
    /// after `refreshed_at_ms + learn_delay`.
    pub fn knows(refreshed_at_ms: i64, learn_delay: Duration, ts_ms: i64) -> bool {
        let delay = i64::try_from(learn_delay.as_millis()).unwrap_or(i64::MAX);
        ts_ms < refreshed_at_ms.saturating_add(delay)
    }
}

/// One partition key takes at most this many WCU per second.
const PARTITION_WCU: f64 = 1000.0;

/// The warning for a busiest entity of `wcu_per_sec` (at least its events
/// per second: an item costs 1 WCU or more) under `strategy`: as (config
/// key under `schema`, why), or `None` when its keys can take it.
/// `rate_key` is the key that gave the rate.
pub fn one_partition_warning(
    strategy: &KeyStrategy,
    adaptive: &AdaptiveSharding,
    wcu_per_sec: f64,
    rate_key: &'static str,
) -> Option<(&'static str, String)> {
    if !strategy.takes_splits() || wcu_per_sec <= PARTITION_WCU {
        return None;
    }
    let name = match strategy {
        KeyStrategy::Entity => "entity",
        _ => "time_bucket",
    };
    if !adaptive.enabled {
        return Some((
            rate_key,
            format!(
                "is above one partition's 1,000 WCU/s, and `{name}` keeps one entity on one partition key whatever `shards` is: that entity is paced at about 1,000 WCU/s and falls behind for as long as its peak lasts. Turn on `schema.adaptive_sharding` (only that entity gets more partition keys, from the moment it is held back; a read of it then takes up to `max_fan_out` queries per {} instead of 1, other entities read as before) or use `calculated_suffix` (every read of every entity takes one query per suffix)",
                if name == "entity" { "table" } else { "bucket" }
            ),
        ));
    }
    let most = f64::from(adaptive.max_fan_out) * PARTITION_WCU;
    (wcu_per_sec > most).then(|| {
        (
            "adaptive_sharding.max_fan_out",
            format!(
                "is {}: adaptive sharding gives one entity at most {} WCU/s, below the busiest entity's {}; raise it",
                adaptive.max_fan_out, most, wcu_per_sec
            ),
        )
    })
}

/// What a worker learned of one table's splits, and when it read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    /// The table's splits.
    pub splits: Arc<TableSplits>,
    /// When the read that found them started (epoch ms): every split made
    /// later starts at or after this plus `learn_delay`.
    pub refreshed_at_ms: i64,
}

/// The event's table's splits are not known recently enough to key it
/// (never read, or read more than `learn_delay` before the event's time):
/// hold the event until the next refresh.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the splits of table {table} are not known for event time {at}: waiting for their refresh")]
pub struct NotLearned {
    /// The table.
    pub table: String,
    /// The event's time, ISO.
    pub at: String,
}

/// The splits a worker knows, by table, shared by its routers and
/// refreshed by its split task; tables a router asked for and did not find
/// are `wanted`, for the next refresh.
#[derive(Debug, Default)]
pub struct SplitRegistry {
    learn_delay: Duration,
    generation: AtomicU64,
    tables: RwLock<HashMap<String, Learned>>,
    wanted: Mutex<BTreeSet<String>>,
}

impl SplitRegistry {
    /// Nothing learned yet.
    pub fn new(learn_delay: Duration) -> SplitRegistry {
        SplitRegistry {
            learn_delay,
            ..SplitRegistry::default()
        }
    }

    /// Records a read of `table`'s splits started at `refreshed_at_ms`
    /// (an older read than the one known changes nothing).
    pub fn set(&self, table: &str, splits: TableSplits, refreshed_at_ms: i64) {
        let mut t = self.tables.write().unwrap_or_else(|e| e.into_inner());
        if t.get(table)
            .is_some_and(|l| l.refreshed_at_ms >= refreshed_at_ms)
        {
            return;
        }
        t.insert(
            table.to_owned(),
            Learned {
                splits: Arc::new(splits),
                refreshed_at_ms,
            },
        );
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// What is known of `table`.
    pub fn get(&self, table: &str) -> Option<Learned> {
        let t = self.tables.read().unwrap_or_else(|e| e.into_inner());
        t.get(table).cloned()
    }

    /// Every table known, by name.
    pub fn snapshot(&self) -> BTreeMap<String, Learned> {
        let t = self.tables.read().unwrap_or_else(|e| e.into_inner());
        t.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Forgets tables no longer written (the refresher keeps the live ones).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut t = self.tables.write().unwrap_or_else(|e| e.into_inner());
        let before = t.len();
        t.retain(|k, _| keep(k));
        if t.len() != before {
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// Bumped by every change.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The fan-out of `entity` at `ts_ms` in `table`, or [`NotLearned`]
    /// (the table is then wanted by the next refresh).
    pub fn fan_out(
        &self,
        learned: Option<&Learned>,
        table: &str,
        entity: &str,
        ts_ms: i64,
    ) -> Result<u32, NotLearned> {
        match learned {
            Some(l) if TableSplits::knows(l.refreshed_at_ms, self.learn_delay, ts_ms) => {
                Ok(l.splits.fan_out_at(entity, ts_ms))
            }
            _ => {
                self.want(table);
                Err(NotLearned {
                    table: table.to_owned(),
                    at: timefmt::iso_millis(ts_ms),
                })
            }
        }
    }

    /// Asks the next refresh for `table`'s splits.
    pub fn want(&self, table: &str) {
        self.wanted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(table.to_owned());
    }

    /// The tables routers asked for since the last call.
    pub fn take_wanted(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.wanted.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Sub-key `k` of a base partition key: the base itself for 0, else
/// `{base}#x{k}`.
pub fn sub_key(base_pk: &str, k: u32) -> String {
    if k == 0 {
        base_pk.to_owned()
    } else {
        format!("{base_pk}{SUB_KEY_MARK}{k}")
    }
}

/// The key of an event whose base key is `base`, under `fan_out`: sub-key
/// `H(event id) mod fan_out` (0, the base key itself, when not split).
pub fn split_key(base: ItemKey, event_id: &str, fan_out: u32) -> ItemKey {
    if fan_out <= 1 {
        return base;
    }
    match shard_of(event_id, fan_out) {
        0 => base,
        k => ItemKey::new(&sub_key(base.pk(), k), base.sk()),
    }
}

/// The key of an event under `strategy` and its table's `splits`: the base
/// key when the strategy cannot be split (the suffix strategies spread one
/// entity already) or the entity is not split at that time.
pub fn key_with_splits(
    strategy: &KeyStrategy,
    splits: &TableSplits,
    entity_id: &str,
    timestamp_ms: i64,
    event_id: &str,
) -> ItemKey {
    let base = strategy.key(entity_id, timestamp_ms, event_id);
    if !strategy.takes_splits() {
        return base;
    }
    split_key(base, event_id, splits.fan_out_at(entity_id, timestamp_ms))
}

/// The entity and event time of an item's key under `strategy` (with
/// adaptive sharding on): what a held-back key is traced back to. `None`
/// for a key this strategy does not make.
pub fn entity_and_time_of(strategy: &KeyStrategy, key: &ItemKey) -> Option<(String, i64)> {
    let (entity, rest) = match strategy {
        // pk `{entity}` or `{entity}#x{k}`; sk `{iso}#{event}`.
        KeyStrategy::Entity => {
            let pk = key.pk();
            let entity = match pk.rsplit_once(SUB_KEY_MARK) {
                Some((e, k)) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => e,
                _ => pk,
            };
            (entity, key.sk())
        }
        // sk `{entity}#{iso}#{event}` (entity ids hold no `#` here).
        KeyStrategy::TimeBucket { .. } => key.sk().split_once('#')?,
        _ => return None,
    };
    let iso = rest.get(..24)?;
    Some((entity.to_owned(), timefmt::parse_canonical(iso)?))
}

/// The decision law: the fan-out to record for `entity`, whose item of
/// event time `item_ts_ms` waits on a key held back at its partition's
/// limit for `held_for`, given the table's `splits` (`None`: no split).
///
/// A split only once the hold lasted `hold_threshold`, and only when the
/// held item is keyed by the latest split: items from before it (a backlog
/// still draining onto the old keys) say nothing about whether that split
/// is enough. Fan-out doubles up to `max_fan_out` and never shrinks.
pub fn decide(
    adaptive: &AdaptiveSharding,
    splits: &TableSplits,
    entity: &str,
    item_ts_ms: i64,
    held_for: Duration,
) -> Option<u32> {
    if !adaptive.enabled || held_for < adaptive.hold_threshold {
        return None;
    }
    let current = splits.fan_out_at(entity, item_ts_ms);
    if current < splits.max_fan_out(entity) {
        return None;
    }
    adaptive.next_fan_out(current)
}

/// True when `entity_id`, keyed by `entity` strategy, could be mistaken
/// for another entity's sub-key or the split records (`{e}#x{k}` is sub-key
/// `k` of entity `e`): such ids are refused while adaptive sharding is on.
pub fn entity_id_is_ambiguous(entity_id: &str) -> bool {
    if entity_id == SPLITS_PK {
        return true;
    }
    entity_id
        .rsplit_once(SUB_KEY_MARK)
        .is_some_and(|(_, k)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests;
