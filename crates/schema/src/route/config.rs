//! The router's configuration (`[schema]` in the worker's file) and its
//! checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::oversize::{self, Oversize, OversizeS3};
use crate::event::{EventConfig, EventConfigError};
use crate::period::{self, Lifecycle, Period, TableNaming};
use crate::split::{self, AdaptiveSharding};
use crate::strategy::{Bucket, KeyAttributes, KeyStrategy, ShardMigration, StrategyError};

/// Names of the non-key attributes every item carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemAttributes {
    /// Entity id (S). Default `entity_id`.
    #[serde(default = "default_entity_attr")]
    pub entity: String,
    /// Event id (S). Default `event_id`.
    #[serde(default = "default_event_id_attr")]
    pub event_id: String,
    /// Event time as `YYYY-MM-DDTHH:MM:SS.mmmZ` (S). Default `ts`.
    #[serde(default = "default_ts_attr")]
    pub timestamp: String,
    /// Event time in epoch milliseconds (N). Default `ts_ms`.
    #[serde(default = "default_ts_ms_attr")]
    pub timestamp_ms: String,
}

fn default_entity_attr() -> String {
    "entity_id".to_owned()
}
fn default_event_id_attr() -> String {
    "event_id".to_owned()
}
fn default_ts_attr() -> String {
    "ts".to_owned()
}
fn default_ts_ms_attr() -> String {
    "ts_ms".to_owned()
}

impl Default for ItemAttributes {
    fn default() -> Self {
        ItemAttributes {
            entity: default_entity_attr(),
            event_id: default_event_id_attr(),
            timestamp: default_ts_attr(),
            timestamp_ms: default_ts_ms_attr(),
        }
    }
}

const fn default_future_skew() -> Duration {
    Duration::from_secs(5 * 60)
}

/// Everything needed to route an event. In TOML the key strategy is a table:
/// `[key]` with `strategy = "time_bucket"`, `shards = 10`, `bucket = "hour"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    /// Which record fields are the entity id, timestamp and event id. In the
    /// `tidemark` worker's file this is the top-level `[event]` table, which
    /// replaces any value written here.
    #[serde(default)]
    pub event: EventConfig,
    /// Key strategy. Default `entity`.
    #[serde(default)]
    pub key: KeyStrategy,
    /// The layout tables were written with before a change of `key` (a
    /// shard-count migration in progress), e.g. `{ strategy = "time_bucket",
    /// shards = 4, bucket = "hour" }`. While set, every event is written
    /// under both layouts (once when both give the same key) and `query`
    /// reads both. See "Changing the shard count" in docs/keys-and-tables.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrate_from: Option<KeyStrategy>,
    /// Key attribute names. Default `pk` / `sk`.
    #[serde(default)]
    pub key_attributes: KeyAttributes,
    /// Names of the entity, event id and timestamp attributes.
    #[serde(default)]
    pub attributes: ItemAttributes,
    /// Table name prefix: tables are `{table_prefix}_{period label}`.
    pub table_prefix: String,
    /// Period one table covers. Default `day`.
    #[serde(default)]
    pub period: Period,
    /// How long data is kept: a table expires this long after its period
    /// ends, and the TTL attribute is event time + retention. Default 30d.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "period::default_retention")]
    pub retention: Duration,
    /// TTL attribute name (N, epoch seconds); none when unset.
    #[serde(default)]
    pub ttl_attribute: Option<String>,
    /// How long after its period ends a table keeps write capacity for late
    /// events. Default 15m. Must not exceed `retention`. May be longer than
    /// a period: every table still inside its grace keeps the cooling tier.
    /// Events older than this (but inside `retention`) are late: see "Late
    /// data" in docs/keys-and-tables.md.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "period::default_grace")]
    pub late_arrival_grace: Duration,
    /// Writes to a table are refused (dead-lettered as `expired_period`)
    /// from this long before it expires, and maintenance exports or deletes
    /// it no sooner than this long after: every write acknowledged as
    /// stored is in the export. Default 10m. Must be less than `retention`,
    /// at least two `maintenance.interval`s, and at least half of
    /// `writer.late_max_wait` plus `writer.call_timeout`.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "period::default_expiry_guard")]
    pub expiry_guard: Duration,
    /// How long before its period starts a table is created. Default 15m.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "period::default_prebuild_ahead")]
    pub prebuild_ahead: Duration,
    /// Events further ahead of now than this are dead-lettered. Default 5m.
    /// At most `prebuild_ahead`, so an accepted event's table already exists.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "default_future_skew")]
    pub max_future_skew: Duration,
    /// Adaptive write sharding: an entity held back at one partition's
    /// limit gets more partition keys in the current table (`time_bucket`
    /// and `entity` strategies). See "Adaptive write sharding" in
    /// docs/keys-and-tables.md.
    #[serde(default)]
    pub adaptive_sharding: AdaptiveSharding,
    /// The busiest entity's peak events per second, if known. Only read by
    /// `config check` and `plan` (its `--peak-key-events-per-sec` by
    /// default), which warn when one partition (1,000 WCU/s) cannot take
    /// it under this config's keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_key_events_per_sec: Option<f64>,
    /// What happens to an event whose item would be larger than
    /// `oversize_bytes`: `"dead_letter"` (the default: dead-lettered as
    /// `item_too_large`, whole) or `"s3"` (its payload written to S3 under
    /// `oversize_s3`, a pointer item stored in its place). See "Oversized
    /// events" in docs/keys-and-tables.md.
    #[serde(default)]
    pub oversize: Oversize,
    /// Largest item stored as it is, in bytes as DynamoDB measures an item
    /// (attribute names plus values). Default 409600, DynamoDB's item limit
    /// (400 KB); at least 4096.
    #[serde(default = "oversize::default_oversize_bytes")]
    pub oversize_bytes: usize,
    /// Where `oversize = "s3"` writes payloads, and what pointer items keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oversize_s3: Option<OversizeS3>,
}

impl RouterConfig {
    /// A config with every default and the given prefix.
    pub fn with_prefix(prefix: impl Into<String>) -> RouterConfig {
        RouterConfig {
            event: EventConfig::default(),
            key: KeyStrategy::default(),
            migrate_from: None,
            key_attributes: KeyAttributes::default(),
            attributes: ItemAttributes::default(),
            table_prefix: prefix.into(),
            period: Period::default(),
            retention: period::default_retention(),
            ttl_attribute: None,
            late_arrival_grace: period::default_grace(),
            expiry_guard: period::default_expiry_guard(),
            prebuild_ahead: period::default_prebuild_ahead(),
            max_future_skew: default_future_skew(),
            adaptive_sharding: AdaptiveSharding::default(),
            peak_key_events_per_sec: None,
            oversize: Oversize::default(),
            oversize_bytes: oversize::default_oversize_bytes(),
            oversize_s3: None,
        }
    }

    /// The shard migration in progress, if `migrate_from` is set.
    pub fn migration(&self) -> Option<ShardMigration> {
        self.migrate_from.as_ref().map(|from| ShardMigration {
            from: from.clone(),
            to: self.key.clone(),
        })
    }

    /// True when an entity id with `#` cannot be keyed by a layout written.
    pub(super) fn forbids_hash_in_entity(&self) -> bool {
        self.key.forbids_hash_in_entity()
            || self
                .migrate_from
                .as_ref()
                .is_some_and(KeyStrategy::forbids_hash_in_entity)
    }

    /// The table lifecycle these settings imply.
    pub fn lifecycle(&self) -> Lifecycle {
        Lifecycle {
            prebuild_ahead: self.prebuild_ahead,
            late_arrival_grace: self.late_arrival_grace,
            retention: self.retention,
            expiry_guard: self.expiry_guard,
        }
    }
}

/// A router configuration that cannot work; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RouterConfigError {
    /// Field names of the event are unusable.
    #[error(transparent)]
    Event(#[from] EventConfigError),
    /// The key strategy is unusable.
    #[error(transparent)]
    Strategy(#[from] StrategyError),
    /// Any other setting.
    #[error("invalid router config: `{key}` {problem}")]
    Invalid {
        /// The offending config key.
        key: &'static str,
        /// What is wrong and how to fix it.
        problem: String,
    },
}

impl RouterConfigError {
    /// What is wrong and the fix, without the key (for a message that
    /// names the key already).
    pub fn problem(&self) -> String {
        match self {
            RouterConfigError::Event(e) => e.problem.clone(),
            RouterConfigError::Invalid { problem, .. } => problem.clone(),
            RouterConfigError::Strategy(e) => e.to_string(),
        }
    }

    /// The offending key as a dotted path of the configuration file
    /// (`event.timezone`, `schema.retention`), for errors that point at
    /// the line to fix.
    pub fn key_path(&self) -> String {
        match self {
            RouterConfigError::Event(e) => format!("event.{}", e.field),
            RouterConfigError::Invalid { key, .. } if key.starts_with("event.") => {
                (*key).to_owned()
            }
            RouterConfigError::Invalid { key, .. } => format!("schema.{key}"),
            RouterConfigError::Strategy(_) => "schema.key.shards".to_owned(),
        }
    }
}

impl RouterConfig {
    /// Every check of [`Router::new`](super::Router::new) after the event
    /// fields' (which building the [`Extractor`](crate::Extractor) makes):
    /// the first problem, naming its key.
    pub(super) fn validate(&self) -> Result<(), RouterConfigError> {
        match self.problems().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every problem of these settings (not of the event fields), each
    /// naming its key, so a config check lists them all in one run.
    pub fn problems(&self) -> Vec<RouterConfigError> {
        let config = self;
        let mut out = Vec::new();
        let mut invalid =
            |key, problem: String| out.push(RouterConfigError::Invalid { key, problem });
        for (name, strategy) in [
            ("key", Some(&config.key)),
            ("migrate_from", config.migrate_from.as_ref()),
        ] {
            let Some(strategy) = strategy else { continue };
            if let Err(e) = strategy.validate() {
                invalid(
                    if name == "key" {
                        "key.shards"
                    } else {
                        "migrate_from.shards"
                    },
                    e.to_string(),
                );
            }
        }
        if config.migrate_from.as_ref() == Some(&config.key) {
            invalid(
                "migrate_from",
                "is the same layout as `key`: remove it (no migration in progress)".into(),
            );
        }
        if !TableNaming::prefix_is_valid(&config.table_prefix) {
            invalid(
                "table_prefix",
                format!(
                    "is {:?}: use 1 to 200 characters of A-Z a-z 0-9 _ . -",
                    config.table_prefix
                ),
            );
        }
        let mut names: Vec<(&'static str, &str)> = FIXED_NAME_KEYS
            .into_iter()
            .zip(fixed_names(config))
            .collect();
        if let Some(ttl) = &config.ttl_attribute {
            names.push(("ttl_attribute", ttl));
        }
        for (i, (key, name)) in names.iter().enumerate() {
            if name.is_empty() || name.len() > 255 {
                invalid(
                    key,
                    format!("is {name:?}: attribute names are 1 to 255 bytes"),
                );
            } else if let Some((other, _)) = names[..i].iter().find(|(_, n)| n == name) {
                invalid(
                    key,
                    format!("is {name:?}, the same as `{other}`: pick distinct names"),
                );
            }
        }
        for target in config.event.rename.values() {
            if let Some((key, _)) = names.iter().find(|(_, n)| n == target) {
                invalid(
                    "event.rename",
                    format!(
                        "renames a field to {target:?}, the name of `{key}`: pick another name"
                    ),
                );
            }
        }
        if !config.event.entity_fields.is_empty()
            && config.forbids_hash_in_entity()
            && config.event.entity_separator.contains('#')
        {
            invalid(
                "event.entity_separator",
                "contains `#`, the key separator of the time_bucket strategy".into(),
            );
        }
        if config.retention.is_zero() {
            invalid(
                "retention",
                "is zero: give how long data is kept, e.g. \"30d\"".into(),
            );
        }
        if config.late_arrival_grace > config.retention {
            invalid(
                "late_arrival_grace",
                "exceeds `retention`: late events would target an expired table".into(),
            );
        }
        if config.expiry_guard >= config.retention {
            invalid(
                "expiry_guard",
                "is not less than `retention`: every event would be refused; lower it (default 10m)".into(),
            );
        }
        if config.max_future_skew > config.prebuild_ahead {
            invalid(
                "max_future_skew",
                "exceeds `prebuild_ahead`: an accepted event could target a table not built yet; raise prebuild_ahead or lower the skew".into(),
            );
        }
        for (key, problem) in config.adaptive_sharding.problems() {
            invalid(key, problem);
        }
        if let Some(rate) = config.peak_key_events_per_sec
            && !(rate.is_finite() && rate > 0.0)
        {
            invalid(
                "peak_key_events_per_sec",
                format!("is {rate}: give the busiest entity's events per second, above 0"),
            );
        }
        for (key, problem) in oversize::problems(
            config.oversize,
            config.oversize_bytes,
            config.oversize_s3.as_ref(),
        ) {
            invalid(key, problem);
        }
        out
    }

    /// What works but is likely a mistake, as (key under `schema`, why).
    pub fn warnings(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let period_ms = self.period.max_hours() * 3_600_000;
        if !self.retention.is_zero() && (self.retention.as_millis() as u64) < period_ms {
            out.push((
                "retention",
                format!(
                    "is shorter than one period (\"{}\"): items expire (TTL) while their table still takes writes, and each table is deleted that soon after its period ends",
                    self.period.as_str()
                ),
            ));
        }
        // A bucket longer than the table: it works (reads cover it), but
        // each table holds a slice of one bucket, so the bucket splits
        // nothing and reads still query per bucket.
        for (name, strategy) in [
            ("key", Some(&self.key)),
            ("migrate_from", self.migrate_from.as_ref()),
        ] {
            if let Some(KeyStrategy::TimeBucket {
                bucket: Bucket::Day,
                ..
            }) = strategy
                && self.period.max_hours() < 24
            {
                out.push((
                    if name == "key" { "key.bucket" } else { "migrate_from.bucket" },
                    format!(
                        "is \"day\", longer than period = \"{}\": each table holds a slice of one bucket; use bucket = \"hour\" (or a period of a day or more)",
                        self.period.as_str()
                    ),
                ));
            }
        }
        // A hot entity is named when its rate is given (`tidemark plan`
        // names it from its flags).
        if let Some(rate) = self.peak_key_events_per_sec
            && let Some((key, message)) = split::one_partition_warning(
                &self.key,
                &self.adaptive_sharding,
                rate,
                "peak_key_events_per_sec",
            )
        {
            out.push((key, message));
        }
        out
    }
}

/// The config keys of [`fixed_names`], in the same order.
pub(super) const FIXED_NAME_KEYS: [&str; 6] = [
    "key_attributes.pk",
    "key_attributes.sk",
    "attributes.entity",
    "attributes.event_id",
    "attributes.timestamp",
    "attributes.timestamp_ms",
];

/// Names of the attributes every item carries besides the TTL: pk, sk,
/// entity, event id, timestamp, timestamp_ms.
pub(super) fn fixed_names(config: &RouterConfig) -> [&str; 6] {
    let ka = &config.key_attributes;
    let ia = &config.attributes;
    [
        &ka.pk,
        &ka.sk,
        &ia.entity,
        &ia.event_id,
        &ia.timestamp,
        &ia.timestamp_ms,
    ]
}
