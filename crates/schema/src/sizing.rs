//! Sizing planner: from event rates and sizes to one recommendation per
//! decision (key strategy, write shards, period, billing mode), each with
//! its reason, the trade-off it makes and the arithmetic.
//!
//! The arithmetic follows seed 000 (DynamoDB's time-series guide): size the
//! item, count WCUs at the peak, keep every partition key and every
//! partition under 1,000 WCU, and pick the longest convenient period whose
//! data the table's busiest partition can hold (10 GB). One model (the
//! `spread` module) serves every line: how a key layout puts the busiest entity
//! and the rest of the stream on partition keys, and those keys on the
//! table's partitions. So the shard count, the usable capacity, the fill
//! time behind the period and the queries a read takes all describe the
//! same layout.
//!
//! Decisions, in order:
//! 1. strategy: `entity` (one key per entity, one query per table) when the
//!    busiest entity fits one partition key with head-room and the entities
//!    spread over the partitions; else `calculated_suffix`, the only kind
//!    that spreads one entity over several keys (`entity` and
//!    `time_bucket` keep one entity on one partition).
//! 2. shards: the fewest suffixes whose keys keep head-room and whose
//!    expected hottest partition stays under 1,000 WCU, at most
//!    `max_queries_per_read`; past that, more capacity (partitions).
//! 3. capacity: the peak times `max_partition_skew`, so the hottest
//!    partition may run that much over the mean.
//! 4. period: the longest one within the busiest partition's fill time; the
//!    tables alive over the retention are checked against the account's
//!    table quota.
//! 5. billing: the cheapest setup that meets the load (the `pricing`
//!    module): provisioned at a fixed capacity, provisioned with auto
//!    scaling (followed minute by minute over a day of the load's shape),
//!    or on demand with a ceiling; history tables in the standard or the
//!    infrequent-access class; PITR and export at expiry priced beside;
//!    the tables of every prefix against the account's quota.
//!
//! With the layout a config has ([`CurrentLayout`]), the same arithmetic
//! judges it and lists where it differs from the recommendation.

mod planner;
mod pricing;
mod spread;
#[cfg(test)]
mod tests;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::origin::Origin;
use crate::period::{self, Billing, CapacityTiers, Period};
use crate::route::{RouteCache, RouteError, Router};
use crate::size::{self, WCU_BYTES};
use crate::strategy::{Bucket, KeyStrategy};

use planner::Planner;
pub use pricing::{
    Choice, HistoryClass, LoadShape, Pricing, SetupCost, TableCount, WriteSetup, table_monthly_usd,
};
#[cfg(test)]
use spread::Traffic;
pub use spread::{SAMPLES, even_shards, partition_of, partition_skew};

/// Most WCU one partition (and one partition key) serves per second.
pub const PARTITION_WCU: f64 = 1000.0;

/// Data one partition holds: 10 GB, taken as 10^10 bytes (seed 000's
/// example, 600 events/s of 180 bytes filling it in "26 or 27 hours", uses
/// this reading: 25.7 h).
pub const PARTITION_BYTES: f64 = 1e10;

/// Storage overhead DynamoDB bills per item, in bytes.
pub(crate) const ITEM_STORAGE_OVERHEAD_BYTES: f64 = 100.0;

/// Kinesis shard write limits: records/s and bytes/s (1 MiB).
pub(crate) const KINESIS_SHARD_RECORDS: f64 = 1000.0;
/// See [`KINESIS_SHARD_RECORDS`].
pub(crate) const KINESIS_SHARD_BYTES: f64 = 1_048_576.0;

/// Hours in a billing month, as AWS prices it.
pub(crate) const HOURS_PER_MONTH: f64 = 730.0;

/// DynamoDB's default quota of tables per account and region.
pub const DEFAULT_TABLE_QUOTA: u32 = 2500;

/// The most tables an account may have in a region, even on request.
pub const MAX_TABLE_QUOTA: u32 = 10_000;

/// DynamoDB's default quota of write capacity per provisioned table.
pub const TABLE_WRITE_QUOTA: u64 = 40_000;

/// Writes per second a new on-demand table takes before it warms up.
pub const ON_DEMAND_INITIAL_WRITES: u64 = 4000;

/// Time each period a provisioned table holds the active capacity beside
/// the active one: the prebuilt next table (`prebuild_ahead`, 15 min) and
/// the cooling previous one (`late_arrival_grace`, 15 min), by default.
const OVERLAP_HOURS: f64 = 0.5;

/// Prices in USD. Defaults are the us-east-1 list prices in force since
/// the on-demand price cut of 1 November 2024 (as published on DynamoDB's
/// pricing pages): Standard and
/// Standard-Infrequent-Access table classes, PITR and export to S3.
/// Override them for another region or a later price list (`--prices`,
/// `--price`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// On-demand: per million write request units ($0.625).
    #[serde(default = "p_od_write")]
    pub on_demand_write_per_million: f64,
    /// On-demand: per million read request units ($0.125).
    #[serde(default = "p_od_read")]
    pub on_demand_read_per_million: f64,
    /// Provisioned: per WCU-hour ($0.00065).
    #[serde(default = "p_wcu_hour")]
    pub provisioned_wcu_hour: f64,
    /// Provisioned: per RCU-hour ($0.00013).
    #[serde(default = "p_rcu_hour")]
    pub provisioned_rcu_hour: f64,
    /// Storage: per GB-month ($0.25).
    #[serde(default = "p_storage")]
    pub storage_gb_month: f64,
    /// Standard-IA on demand: per million write request units ($0.78125).
    #[serde(default = "p_ia_od_write")]
    pub ia_on_demand_write_per_million: f64,
    /// Standard-IA on demand: per million read request units ($0.155).
    #[serde(default = "p_ia_od_read")]
    pub ia_on_demand_read_per_million: f64,
    /// Standard-IA provisioned: per WCU-hour ($0.00081).
    #[serde(default = "p_ia_wcu_hour")]
    pub ia_provisioned_wcu_hour: f64,
    /// Standard-IA provisioned: per RCU-hour ($0.00016).
    #[serde(default = "p_ia_rcu_hour")]
    pub ia_provisioned_rcu_hour: f64,
    /// Standard-IA storage: per GB-month ($0.10).
    #[serde(default = "p_ia_storage")]
    pub ia_storage_gb_month: f64,
    /// Continuous backups (PITR): per GB-month of table size ($0.20).
    #[serde(default = "p_pitr")]
    pub pitr_gb_month: f64,
    /// Export to S3: per GB of table size exported ($0.10).
    #[serde(default = "p_export")]
    pub export_gb: f64,
}

const fn p_od_write() -> f64 {
    0.625
}
const fn p_od_read() -> f64 {
    0.125
}
const fn p_wcu_hour() -> f64 {
    0.00065
}
const fn p_rcu_hour() -> f64 {
    0.00013
}
const fn p_storage() -> f64 {
    0.25
}
const fn p_ia_od_write() -> f64 {
    0.78125
}
const fn p_ia_od_read() -> f64 {
    0.155
}
const fn p_ia_wcu_hour() -> f64 {
    0.00081
}
const fn p_ia_rcu_hour() -> f64 {
    0.00016
}
const fn p_ia_storage() -> f64 {
    0.10
}
const fn p_pitr() -> f64 {
    0.20
}
const fn p_export() -> f64 {
    0.10
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            on_demand_write_per_million: p_od_write(),
            on_demand_read_per_million: p_od_read(),
            provisioned_wcu_hour: p_wcu_hour(),
            provisioned_rcu_hour: p_rcu_hour(),
            storage_gb_month: p_storage(),
            ia_on_demand_write_per_million: p_ia_od_write(),
            ia_on_demand_read_per_million: p_ia_od_read(),
            ia_provisioned_wcu_hour: p_ia_wcu_hour(),
            ia_provisioned_rcu_hour: p_ia_rcu_hour(),
            ia_storage_gb_month: p_ia_storage(),
            pitr_gb_month: p_pitr(),
            export_gb: p_export(),
        }
    }
}

/// A price's slot in [`Prices`].
type PriceSlot = fn(&mut Prices) -> &mut f64;

/// Every price by the name a price file gives it.
const PRICE_NAMES: [(&str, PriceSlot); 12] = [
    ("on_demand_write_per_million", |p| {
        &mut p.on_demand_write_per_million
    }),
    ("on_demand_read_per_million", |p| {
        &mut p.on_demand_read_per_million
    }),
    ("provisioned_wcu_hour", |p| &mut p.provisioned_wcu_hour),
    ("provisioned_rcu_hour", |p| &mut p.provisioned_rcu_hour),
    ("storage_gb_month", |p| &mut p.storage_gb_month),
    ("ia_on_demand_write_per_million", |p| {
        &mut p.ia_on_demand_write_per_million
    }),
    ("ia_on_demand_read_per_million", |p| {
        &mut p.ia_on_demand_read_per_million
    }),
    ("ia_provisioned_wcu_hour", |p| {
        &mut p.ia_provisioned_wcu_hour
    }),
    ("ia_provisioned_rcu_hour", |p| {
        &mut p.ia_provisioned_rcu_hour
    }),
    ("ia_storage_gb_month", |p| &mut p.ia_storage_gb_month),
    ("pitr_gb_month", |p| &mut p.pitr_gb_month),
    ("export_gb", |p| &mut p.export_gb),
];

impl Prices {
    /// Every price with its name, as a price file spells it.
    pub fn named(&self) -> [(&'static str, f64); 12] {
        let mut copy = *self;
        PRICE_NAMES.map(|(name, slot)| (name, *slot(&mut copy)))
    }

    /// Sets the price `name` (a price file's key); false when there is
    /// none of that name.
    pub fn set(&mut self, name: &str, value: f64) -> bool {
        match PRICE_NAMES.iter().find(|(n, _)| *n == name) {
            Some((_, slot)) => {
                *slot(self) = value;
                true
            }
            None => false,
        }
    }
}

const fn default_safety() -> f64 {
    2.0
}

const fn default_skew() -> f64 {
    1.25
}

const fn default_max_queries() -> u32 {
    32
}

const fn default_quota() -> u32 {
    DEFAULT_TABLE_QUOTA
}

const fn default_target() -> f64 {
    0.7
}

const fn default_scale_up_minutes() -> u32 {
    5
}

const fn default_prefixes() -> u32 {
    1
}

/// Most write shards the planner considers (reads would take that many
/// queries per table).
pub const MAX_PLANNED_SHARDS: u32 = 1024;

/// What the planner needs to know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizingInput {
    /// Average events per second, whole stream.
    pub avg_events_per_sec: f64,
    /// Peak events per second, whole stream.
    pub peak_events_per_sec: f64,
    /// Peak events per second of the busiest entity (one entity's burst,
    /// e.g. seed 003's sensor at 2,000/s). Unset: the whole peak, as if the
    /// stream were one key (seed 000's single time-keyed stream).
    #[serde(default)]
    pub peak_key_events_per_sec: Option<f64>,
    /// Entities writing at once (the busiest included). Unset: many, each
    /// small beside the busiest.
    #[serde(default)]
    pub entities: Option<u64>,
    /// Average item size in DynamoDB, bytes (see [`item_bytes_of_sample`]).
    pub avg_item_bytes: u64,
    /// Average Kinesis record size, bytes. Unset: the item size.
    #[serde(default)]
    pub avg_record_bytes: Option<u64>,
    /// How long data is kept (tables alive, storage). Default 30 days.
    #[serde(with = "humantime_serde", default = "period::default_retention")]
    pub retention: Duration,
    /// Head-room of one partition key: at the stated peak a key runs at
    /// most 1 / this of its 1,000 WCU. Default 2 (seed 003 suggests 2x to
    /// 10x the minimum).
    #[serde(default = "default_safety")]
    pub safety_factor: f64,
    /// Prices.
    #[serde(default)]
    pub prices: Prices,
    /// Partitions the table has (an existing table). Unset: as many as the
    /// recommended capacity makes (one per 1,000 WCU).
    #[serde(default)]
    pub table_partitions: Option<u32>,
    /// Capacity head-room of the table: it is provisioned at the peak times
    /// this, so its hottest partition may run this much over the mean.
    /// Default 1.25 (80% of the table usable).
    #[serde(default = "default_skew")]
    pub max_partition_skew: f64,
    /// Most queries one read of one entity may take per table (the suffix
    /// strategies read every suffix). Default 32.
    #[serde(default = "default_max_queries")]
    pub max_queries_per_read: u32,
    /// Tables the account may have in the region. Default 2,500 (DynamoDB's
    /// default quota; 10,000 at most on request).
    #[serde(default = "default_quota")]
    pub table_quota: u32,
    /// A config's layout, to judge beside the recommendation.
    #[serde(default)]
    pub current: Option<CurrentLayout>,
    /// Hours a day the stream runs at its peak (the rest at the rate that
    /// keeps the average). Unset: 1 hour when the peak is above the
    /// average.
    #[serde(default)]
    pub peak_hours_per_day: Option<f64>,
    /// Items read a day (queries of past periods, eventually consistent).
    #[serde(default)]
    pub reads_per_day: f64,
    /// Auto scaling's target utilisation. Default 0.7.
    #[serde(default = "default_target")]
    pub autoscale_target: f64,
    /// Minutes from the load rising until auto scaling's new capacity is
    /// in force, per step. Default 5.
    #[serde(default = "default_scale_up_minutes")]
    pub scale_up_minutes: u32,
    /// Price continuous backups (PITR) into every setup.
    #[serde(default)]
    pub pitr: bool,
    /// Price an export to S3 of every table at expiry into every setup.
    #[serde(default)]
    pub export_at_expiry: bool,
    /// Table prefixes (pipelines) sharing the account's table quota.
    /// Default 1.
    #[serde(default = "default_prefixes")]
    pub prefixes: u32,
    /// Capacity per lifecycle state, priced for provisioned setups (the
    /// history tables' and the active tier's reads). Default: the config
    /// defaults.
    #[serde(default)]
    pub tiers: CapacityTiers,
}

impl SizingInput {
    /// An input with the defaults for everything but the rates and size.
    pub fn new(avg_events_per_sec: f64, peak_events_per_sec: f64, avg_item_bytes: u64) -> Self {
        SizingInput {
            avg_events_per_sec,
            peak_events_per_sec,
            peak_key_events_per_sec: None,
            entities: None,
            avg_item_bytes,
            avg_record_bytes: None,
            retention: period::default_retention(),
            safety_factor: default_safety(),
            prices: Prices::default(),
            table_partitions: None,
            max_partition_skew: default_skew(),
            max_queries_per_read: default_max_queries(),
            table_quota: default_quota(),
            current: None,
            peak_hours_per_day: None,
            reads_per_day: 0.0,
            autoscale_target: default_target(),
            scale_up_minutes: default_scale_up_minutes(),
            pitr: false,
            export_at_expiry: false,
            prefixes: default_prefixes(),
            tiers: CapacityTiers::default(),
        }
    }
}

/// The layout a config has: what [`recommend`] judges beside its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurrentLayout {
    /// Where it comes from (a file name), for messages.
    pub source: String,
    /// `schema.key`.
    pub key: KeyStrategy,
    /// `schema.period`.
    pub period: Period,
    /// `schema.billing`.
    pub billing: Billing,
    /// `schema.tiers.active.write` (provisioned billing).
    pub active_write_capacity: u64,
    /// `schema.adaptive_sharding`.
    #[serde(default)]
    pub adaptive_sharding: crate::split::AdaptiveSharding,
}

impl CurrentLayout {
    /// The partitions its active table has: one per 1,000 WCU provisioned,
    /// or on demand those of its warm throughput (a new on-demand table
    /// takes about 4,000 writes/s).
    pub fn table_partitions(&self) -> u32 {
        let units = match self.billing {
            Billing::Provisioned => self.active_write_capacity,
            Billing::OnDemand { warm_write_units } => {
                warm_write_units.unwrap_or(0).max(ON_DEMAND_INITIAL_WRITES)
            }
        };
        ceil_u32(units as f64 / PARTITION_WCU).max(1)
    }

    /// Write capacity of its active table (on demand: its warm throughput).
    fn write_capacity(&self) -> u64 {
        u64::from(self.table_partitions()) * 1000
    }
}

/// How the recommended tables are billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BillingMode {
    /// Provisioned capacity, resized by lifecycle state.
    Provisioned,
    /// Pay per request.
    OnDemand,
}

impl BillingMode {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            BillingMode::Provisioned => "provisioned",
            BillingMode::OnDemand => "on_demand",
        }
    }
}

/// The rates in WCU, and what was assumed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Load {
    /// WCUs one write of an average item costs.
    pub wcu_per_item: u64,
    /// WCU at the average rate.
    pub avg_wcu: f64,
    /// WCU at the stream's peak.
    pub peak_wcu: u64,
    /// WCU of the busiest entity at its peak.
    pub hot_key_wcu: u64,
    /// True when the busiest entity's rate was not given (taken as the
    /// whole peak).
    pub hot_key_assumed: bool,
    /// Entities writing at once, when given.
    pub entities: Option<u64>,
    /// `ceil(peak key WCU / 1,000)`: fewer keys per entity throttle (seed
    /// 003's N).
    pub min_write_shards: u32,
    /// `ceil(peak key WCU x safety / 1,000)`: keys per entity with head-room.
    pub head_room_shards: u32,
}

/// The recommended layout: what to write in `[schema]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    /// `schema.key`.
    pub key: KeyStrategy,
    /// `schema.period`.
    pub period: Period,
    /// `schema.billing.mode`.
    pub billing: BillingMode,
    /// Write capacity of the active table: `schema.tiers.active.write`, or
    /// on demand `warm_write_units`.
    pub active_write_capacity: u64,
    /// Partitions that capacity gives the table.
    pub table_partitions: u32,
}

/// A layout judged on a table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    /// Expected load of the busiest partition key at the peak, WCU.
    pub hottest_key_wcu: f64,
    /// Expected load of the busiest partition at the peak, WCU.
    pub hottest_partition_wcu: f64,
    /// Mean partition load at the peak, WCU.
    pub mean_partition_wcu: f64,
    /// Share of the table's capacity usable before its hottest partition
    /// is full (mean over hottest).
    pub usable_fraction: f64,
    /// Hours until the busiest partition holds 10 GB at the average rate.
    pub partition_fill_hours: f64,
    /// Queries one read of one entity takes per table.
    pub queries_per_read: u32,
    /// Tables alive at once over the retention (the current and the
    /// prebuilt next one included).
    pub tables_alive: u64,
    /// False when a key or a partition is over 1,000 WCU at the peak.
    pub holds_peak: bool,
    /// False when the busiest partition fills 10 GB within a period.
    pub period_fits: bool,
}

/// One decision of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// `strategy`, `shards`, `period` or `billing`.
    pub decision: &'static str,
    /// The recommended value, as the config spells it.
    pub value: String,
    /// Why.
    pub reason: String,
    /// What it costs.
    pub trade_off: String,
}

/// What one strategy does with the busiest entity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyVerdict {
    /// The strategy's config name.
    pub strategy: &'static str,
    /// Whether it can spread one entity over several partition keys.
    pub spreads_one_entity: bool,
    /// Whether it can take this load.
    pub fits: bool,
    /// Why, in a sentence.
    pub note: String,
}

/// Where a config differs from the recommendation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    /// `strategy`, `shards`, `period`, `capacity` or `billing`.
    pub decision: &'static str,
    /// The config's value.
    pub config: String,
    /// The recommended value.
    pub recommended: String,
    /// What the config's value does at these rates.
    pub consequence: String,
}

/// A config's layout, judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigReview {
    /// Where it comes from.
    pub source: String,
    /// Its `schema.key`.
    pub key: KeyStrategy,
    /// Its `schema.period`.
    pub period: Period,
    /// Its billing mode.
    pub billing: BillingMode,
    /// Its active table's write capacity (on demand: warm throughput or
    /// the initial 4,000).
    pub active_write_capacity: u64,
    /// Partitions of its active table.
    pub table_partitions: u32,
    /// The same arithmetic as the recommendation's.
    pub evaluation: Evaluation,
    /// Where it differs from the recommendation, with what that does.
    pub differences: Vec<Difference>,
}

/// Kinesis shards for the stream's peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KinesisSizing {
    /// Shards needed for the record rate.
    pub shards_by_records: u32,
    /// Shards needed for the byte rate.
    pub shards_by_bytes: u32,
    /// The larger of the two.
    pub shards: u32,
}

/// Monthly cost of the recommended layout, writes and storage at the given
/// prices. Reads, auto scaling and table classes are not priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cost {
    /// Data kept at steady state (retention), GB.
    pub stored_gb: f64,
    /// Storage, USD per month.
    pub storage_usd: f64,
    /// Writes on demand at the average rate, USD per month.
    pub on_demand_writes_usd: f64,
    /// Provisioned write capacity (the active table's, and the prebuilt
    /// and cooling tables' at the boundaries), USD per month.
    pub provisioned_writes_usd: f64,
    /// On demand, writes plus storage.
    pub on_demand_usd: f64,
    /// Provisioned, writes plus storage.
    pub provisioned_usd: f64,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizingPlan {
    /// The rates in WCU.
    pub load: Load,
    /// One value per decision.
    pub recommendation: Recommendation,
    /// The recommendation, judged.
    pub evaluation: Evaluation,
    /// Each decision with its reason and trade-off: strategy, shards,
    /// period, billing.
    pub decisions: Vec<Decision>,
    /// What each strategy does with the busiest entity.
    pub strategies: Vec<StrategyVerdict>,
    /// Tables the account may have in the region.
    pub table_quota: u32,
    /// The config's layout, judged, when one was given.
    pub config: Option<ConfigReview>,
    /// Kinesis shards.
    pub kinesis: KinesisSizing,
    /// Monthly cost of writes and storage, provisioned at the peak or on
    /// demand (the figures before setups were priced; kept for scripts).
    pub cost: Cost,
    /// Every setup priced, the cheapest that meets the load and why, the
    /// prices used and the table count.
    pub pricing: Pricing,
    /// What the plan cannot promise, or assumed.
    pub warnings: Vec<String>,
    /// The arithmetic, one step per line.
    pub arithmetic: Vec<String>,
}

/// Input that cannot be planned.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SizingError {
    /// A rate or size is not positive, or peak is below average.
    #[error("planner input `{field}`: {problem}")]
    Invalid {
        /// The input field.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

fn ceil_u32(x: f64) -> u32 {
    // Inputs are validated finite and positive; saturate instead of wrapping.
    if x >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        x.ceil().max(0.0) as u32
    }
}

fn ceil_u64(x: f64) -> u64 {
    if x >= u64::MAX as f64 {
        u64::MAX
    } else {
        x.ceil().max(0.0) as u64
    }
}

/// `6000` as `6,000`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration as `30d`, `12h` or `90m` when whole, else humantime's form.
pub fn days(d: Duration) -> String {
    let s = d.as_secs();
    if d.subsec_nanos() == 0 && s > 0 {
        if s.is_multiple_of(86_400) {
            return format!("{}d", s / 86_400);
        }
        if s.is_multiple_of(3600) {
            return format!("{}h", s / 3600);
        }
        if s.is_multiple_of(60) {
            return format!("{}m", s / 60);
        }
    }
    humantime_serde::re::humantime::format_duration(d).to_string()
}

/// A WCU figure, rounded, with separators.
fn wcu(x: f64) -> String {
    thousands(x.round().max(0.0) as u64)
}

/// A rate as given (`5000` or `12.5`), with separators for whole numbers.
fn rate(x: f64) -> String {
    if x.fract() == 0.0 && x < 1e15 {
        thousands(x as u64)
    } else {
        format!("{x}")
    }
}

fn check(input: &SizingInput) -> Result<(), SizingError> {
    let invalid = |field, problem: &str| {
        Err(SizingError::Invalid {
            field,
            problem: problem.to_owned(),
        })
    };
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(input.avg_events_per_sec) {
        return invalid("avg_events_per_sec", "must be a positive number");
    }
    if !positive(input.peak_events_per_sec) || input.peak_events_per_sec < input.avg_events_per_sec
    {
        return invalid("peak_events_per_sec", "must be at least the average");
    }
    if let Some(k) = input.peak_key_events_per_sec
        && (!positive(k) || k > input.peak_events_per_sec)
    {
        return invalid(
            "peak_key_events_per_sec",
            "must be a positive number, at most the stream's peak",
        );
    }
    if input.avg_item_bytes == 0 || input.avg_item_bytes > size::MAX_ITEM_BYTES as u64 {
        return invalid(
            "avg_item_bytes",
            "must be 1 to 409,600 (DynamoDB's item limit)",
        );
    }
    if input.avg_record_bytes == Some(0) {
        return invalid("avg_record_bytes", "must be at least 1");
    }
    if input.retention.is_zero() {
        return invalid("retention", "must be longer than zero");
    }
    if !input.safety_factor.is_finite() || input.safety_factor < 1.0 {
        return invalid("safety_factor", "must be at least 1");
    }
    if !input.max_partition_skew.is_finite() || input.max_partition_skew < 1.0 {
        return invalid("max_partition_skew", "must be a number of at least 1");
    }
    if input.table_partitions == Some(0) {
        return invalid("table_partitions", "must be at least 1");
    }
    if !(1..=MAX_PLANNED_SHARDS).contains(&input.max_queries_per_read) {
        return invalid("max_queries_per_read", "must be 1 to 1,024");
    }
    if !(1..=MAX_TABLE_QUOTA).contains(&input.table_quota) {
        return invalid("table_quota", "must be 1 to 10,000 (DynamoDB's most)");
    }
    if let Some(h) = input.peak_hours_per_day
        && !(h.is_finite() && h > 0.0 && h <= 24.0)
    {
        return invalid("peak_hours_per_day", "must be more than 0 and at most 24");
    }
    if !input.reads_per_day.is_finite() || input.reads_per_day < 0.0 {
        return invalid("reads_per_day", "must be 0 or more");
    }
    if !(input.autoscale_target.is_finite() && (0.2..=0.9).contains(&input.autoscale_target)) {
        return invalid(
            "autoscale_target",
            "must be 0.2 to 0.9 (Application Auto Scaling's range for DynamoDB)",
        );
    }
    if !(1..=60).contains(&input.scale_up_minutes) {
        return invalid("scale_up_minutes", "must be 1 to 60");
    }
    if input.prefixes == 0 {
        return invalid("prefixes", "must be at least 1");
    }
    for (name, price) in input.prices.named() {
        if !price.is_finite() || price < 0.0 {
            return invalid("prices", &format!("`{name}` must be a price of 0 or more"));
        }
    }
    if input.entities == Some(0) {
        return invalid("entities", "must be at least 1");
    }
    if let (Some(e), Some(k)) = (input.entities, input.peak_key_events_per_sec)
        && (e as f64) * k < input.peak_events_per_sec
    {
        return invalid(
            "entities",
            "is too few: that many entities at the busiest entity's rate stay below the peak",
        );
    }
    Ok(())
}

/// Plans capacity for `input`.
pub fn recommend(input: &SizingInput) -> Result<SizingPlan, SizingError> {
    check(input)?;
    let mut p = Planner::new(input);
    let (key, partitions) = p.layout();
    let period = p.period(&key, partitions);
    let capacity = p.capacity(partitions);
    let evaluation = p.evaluate(&key, partitions, period);
    let kinesis = p.kinesis();
    let cost = p.cost(capacity, period);
    let pricing = p.pricing(capacity, period, evaluation.tables_alive);
    let billing = pricing.choice.setup.billing();
    let recommendation = Recommendation {
        key,
        period,
        billing,
        active_write_capacity: capacity,
        table_partitions: partitions,
    };
    let decisions = p.decisions(&recommendation, &evaluation, &pricing);
    let config = input
        .current
        .as_ref()
        .map(|c| p.review(c, &recommendation, &evaluation));
    // A given busiest entity the config's keys keep on one partition.
    if let Some(c) = &input.current
        && input.peak_key_events_per_sec.is_some()
    {
        let hot = p.load.hot_key_wcu as f64;
        let rate_key = "peak_key_events_per_sec";
        if let Some((key, why)) =
            crate::split::one_partition_warning(&c.key, &c.adaptive_sharding, hot, rate_key)
        {
            p.warnings.push(if key == rate_key {
                format!(
                    "{}: the busiest entity's {} WCU/s {why}",
                    c.source,
                    thousands(p.load.hot_key_wcu)
                )
            } else {
                format!("{}: `schema.{key}` {why}", c.source)
            });
        }
    }
    p.final_warnings(&recommendation, &evaluation);
    Ok(SizingPlan {
        load: p.load.clone(),
        strategies: p.verdicts(),
        recommendation,
        evaluation,
        decisions,
        table_quota: input.table_quota,
        config,
        kinesis,
        cost,
        pricing,
        warnings: p.warnings,
        arithmetic: p.lines,
    })
}

/// `1 partition`, `8 partitions`.
fn partitions_text(n: u32) -> String {
    if n == 1 {
        "1 partition".into()
    } else {
        format!("{n} partitions")
    }
}

/// The config name of a strategy.
pub fn strategy_name(k: &KeyStrategy) -> &'static str {
    match k {
        KeyStrategy::Entity => "entity",
        KeyStrategy::RandomSuffix { .. } => "random_suffix",
        KeyStrategy::CalculatedSuffix { .. } => "calculated_suffix",
        KeyStrategy::TimeBucket { .. } => "time_bucket",
    }
}

/// Queries one read of one entity's whole table takes: one per suffix, one
/// per bucket, or one.
fn queries_per_read(key: &KeyStrategy, period: Period) -> u32 {
    match key {
        KeyStrategy::Entity => 1,
        KeyStrategy::RandomSuffix { shards } | KeyStrategy::CalculatedSuffix { shards } => *shards,
        KeyStrategy::TimeBucket { bucket, .. } => {
            let bucket_h = match bucket {
                Bucket::Minute => 1.0 / 60.0,
                Bucket::Hour => 1.0,
                Bucket::Day => 24.0,
            };
            ceil_u32(average_hours(period) / bucket_h).max(1)
        }
    }
}

/// The average length of a period, hours (months and quarters as billed).
fn average_hours(p: Period) -> f64 {
    match p {
        Period::Month => HOURS_PER_MONTH,
        Period::Quarter => 3.0 * HOURS_PER_MONTH,
        other => other.max_hours() as f64,
    }
}

/// The DynamoDB size of the item `router` makes from a sample record. A
/// record without an event id is sized with a realistic derived one (a
/// Kinesis shard id and 56-digit sequence number).
pub fn item_bytes_of_sample(router: &Router, sample: &[u8]) -> Result<u64, RouteError> {
    let origin = Origin::Kinesis {
        stream: "sample".into(),
        shard_id: "shardId-000000000000".into(),
        sequence_number: "4".repeat(56).into(),
        sub_sequence_number: 0,
    };
    let event = router.extractor().extract(sample, &origin)?;
    // Judge the sample at its own time: it is neither expired nor early.
    let now = DateTime::<Utc>::from_timestamp_millis(event.timestamp_ms).unwrap_or_default();
    let routes = router.route(sample, &origin, 0, now, &mut RouteCache::default())?;
    Ok(routes.new.item.size() as u64)
}
