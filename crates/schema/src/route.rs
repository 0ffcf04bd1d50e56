//! Routing: record bytes to (table, key, item), or a dead-letter reason.
//!
//! This is the per-event hot path. The record is parsed once; payload values
//! go straight from their JSON text into the item's DynamoDB JSON
//! ([`WireItem`]), so numbers keep their exact digits, and no attribute map
//! is built: one buffer per item, its size summed while it is written.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use thiserror::Error;

use crate::event::mapping::{self, ClashPolicy, Coerced, FieldType};
use crate::event::{EventConfig, EventConfigError, EventError, Extractor, RawEvent};
use crate::key::ItemKey;
use crate::origin::{Origin, SharedStr};
use crate::period::{self, Lifecycle, Period, PeriodRef, TableNaming};
use crate::raw::{self, Name, Node};
use crate::reason::Reason;
use crate::size;
use crate::strategy::{
    KeyAttributes, KeyStrategy, MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES, ShardCache,
    ShardMigration, StrategyError,
};
use crate::timefmt;
use crate::wire::{WireItem, write_str, write_tagged_str};

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
    /// events. Default 15m. Must not exceed `retention`.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "period::default_grace")]
    pub late_arrival_grace: Duration,
    /// How long before its period starts a table is created. Default 15m.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "period::default_prebuild_ahead")]
    pub prebuild_ahead: Duration,
    /// Events further ahead of now than this are dead-lettered. Default 5m.
    /// At most `prebuild_ahead`, so an accepted event's table already exists.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde", default = "default_future_skew")]
    pub max_future_skew: Duration,
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
            prebuild_ahead: period::default_prebuild_ahead(),
            max_future_skew: default_future_skew(),
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
    fn forbids_hash_in_entity(&self) -> bool {
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
        }
    }
}

/// A router configuration that cannot work; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
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

impl ConfigError {
    /// The offending key as a dotted path of the configuration file
    /// (`event.timezone`, `schema.retention`), for errors that point at
    /// the line to fix.
    pub fn key_path(&self) -> String {
        match self {
            ConfigError::Event(e) => format!("event.{}", e.field),
            ConfigError::Invalid { key, .. } if key.starts_with("event.") => (*key).to_owned(),
            ConfigError::Invalid { key, .. } => format!("schema.{key}"),
            ConfigError::Strategy(_) => "schema.key.shards".to_owned(),
        }
    }
}

/// An event that is ready to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    /// Target table (shared by the events of one period routed through one
    /// [`RouteCache`]).
    pub table: SharedStr,
    /// The item's key values (also inside `item`).
    pub key: ItemKey,
    /// The full item, encoded as DynamoDB JSON, with its size.
    pub item: WireItem,
    /// WCUs one write of the item costs.
    pub wcu: u64,
    /// Event time, epoch milliseconds.
    pub timestamp_ms: i64,
}

/// Why a record cannot be routed. [`RouteError::reason`] gives the
/// dead-letter reason; the message names the field or limit.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RouteError {
    /// The record is not a usable event.
    #[error(transparent)]
    Event(#[from] EventError),
    /// The entity id cannot be placed in a key.
    #[error("field `{field}` (entity id) {problem}")]
    BadEntity {
        /// The configured entity field.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// A payload attribute cannot be stored.
    #[error("payload field `{field}` {problem}")]
    BadAttribute {
        /// Path of the attribute in the record.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The item exceeds DynamoDB's item size limit.
    #[error("item is {size} bytes, over DynamoDB's {limit}-byte item limit")]
    ItemTooLarge {
        /// Computed item size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The event's period is past retention.
    #[error("event time {timestamp} falls in table {table}, expired (retention {retention_s} s)")]
    ExpiredPeriod {
        /// Event time, ISO.
        timestamp: String,
        /// The (expired) table.
        table: String,
        /// Configured retention, seconds.
        retention_s: u64,
    },
    /// The event is too far ahead of now.
    #[error("event time {timestamp} is more than max_future_skew ({skew_s} s) ahead of now {now}")]
    FutureEvent {
        /// Event time, ISO.
        timestamp: String,
        /// Now, ISO.
        now: String,
        /// Configured skew, seconds.
        skew_s: u64,
    },
}

impl RouteError {
    /// The dead-letter reason.
    pub fn reason(&self) -> Reason {
        match self {
            RouteError::Event(e) => e.reason(),
            RouteError::BadEntity { .. } | RouteError::BadAttribute { .. } => Reason::InvalidField,
            RouteError::ItemTooLarge { .. } => Reason::ItemTooLarge,
            RouteError::ExpiredPeriod { .. } => Reason::ExpiredPeriod,
            RouteError::FutureEvent { .. } => Reason::FutureEvent,
        }
    }
}

/// What routing remembers between events: the table name of the period
/// last routed, and the shards of recent entities. One per routing loop (it
/// is not shared): see [`Router::route_in`].
#[derive(Debug, Default)]
pub struct RouteCache {
    last: Option<(PeriodRef, SharedStr)>,
    shards: ShardCache,
    /// The shards under `migrate_from` (its own cache: one shared by two
    /// shard counts would start over at every event).
    old_shards: ShardCache,
}

impl RouteCache {
    fn name_of(&mut self, naming: &TableNaming, period: PeriodRef) -> SharedStr {
        match &self.last {
            Some((p, name)) if *p == period => name.clone(),
            _ => {
                let name = SharedStr::from(naming.name_of(&period));
                self.last = Some((period, name.clone()));
                name
            }
        }
    }
}

/// Routes records; build once, share freely (it is immutable).
#[derive(Debug, Clone)]
pub struct Router {
    config: RouterConfig,
    extractor: Extractor,
    naming: TableNaming,
    retention_ms: i64,
    skew_ms: i64,
    /// Output bytes of the attributes every item carries, less their values
    /// taken from the record or key: sizes each item's buffer.
    fixed_bytes: usize,
    /// `"name":` of the attributes every item carries, written once here
    /// rather than escaped again for every item: pk, sk, entity, event id,
    /// timestamp, timestamp_ms.
    heads: [Vec<u8>; 6],
    /// `"name":` of the TTL attribute, if configured.
    ttl_head: Option<Vec<u8>>,
}

impl Router {
    /// Validates the config; every error names the key to fix.
    pub fn new(config: RouterConfig) -> Result<Router, ConfigError> {
        let extractor = Extractor::new(config.event.clone())?;
        config.key.validate()?;
        let invalid = |key, problem: String| Err(ConfigError::Invalid { key, problem });
        if let Some(from) = &config.migrate_from {
            from.validate()?;
            if *from == config.key {
                return invalid(
                    "migrate_from",
                    "is the same layout as `key`: remove it (no migration in progress)".into(),
                );
            }
        }
        if !TableNaming::prefix_is_valid(&config.table_prefix) {
            return invalid(
                "table_prefix",
                format!(
                    "is {:?}: use 1 to 200 characters of A-Z a-z 0-9 _ . -",
                    config.table_prefix
                ),
            );
        }
        let mut names: Vec<(&'static str, &str)> = FIXED_NAME_KEYS
            .into_iter()
            .zip(fixed_names(&config))
            .collect();
        if let Some(ttl) = &config.ttl_attribute {
            names.push(("ttl_attribute", ttl));
        }
        for (i, (key, name)) in names.iter().enumerate() {
            if name.is_empty() || name.len() > 255 {
                return invalid(
                    key,
                    format!("is {name:?}: attribute names are 1 to 255 bytes"),
                );
            }
            if let Some((other, _)) = names[..i].iter().find(|(_, n)| n == name) {
                return invalid(
                    key,
                    format!("is {name:?}, the same as `{other}`: pick distinct names"),
                );
            }
        }
        for target in config.event.rename.values() {
            if let Some((key, _)) = names.iter().find(|(_, n)| n == target) {
                return invalid(
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
            return invalid(
                "event.entity_separator",
                "contains `#`, the key separator of the time_bucket strategy".into(),
            );
        }
        if config.retention.is_zero() {
            return invalid(
                "retention",
                "is zero: give how long data is kept, e.g. \"30d\"".into(),
            );
        }
        if config.late_arrival_grace > config.retention {
            return invalid(
                "late_arrival_grace",
                "exceeds `retention`: late events would target an expired table".into(),
            );
        }
        if config.max_future_skew > config.prebuild_ahead {
            return invalid(
                "max_future_skew",
                "exceeds `prebuild_ahead`: an accepted event could target a table not built yet; raise prebuild_ahead or lower the skew".into(),
            );
        }
        let fixed_bytes = 64 + names.iter().map(|(_, n)| n.len() + 16).sum::<usize>();
        let head = |name: &str| {
            let mut head = Vec::with_capacity(name.len() + 3);
            write_str(&mut head, name);
            head.push(b':');
            head
        };
        let heads = fixed_names(&config).map(head);
        let ttl_head = config.ttl_attribute.as_deref().map(head);
        Ok(Router {
            fixed_bytes,
            heads,
            ttl_head,
            extractor,
            naming: TableNaming {
                prefix: config.table_prefix.clone(),
                period: config.period,
            },
            retention_ms: period::duration_ms(config.retention),
            skew_ms: period::duration_ms(config.max_future_skew),
            config,
        })
    }

    /// The configuration this router was built from.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// Table naming (prefix and period).
    pub fn naming(&self) -> &TableNaming {
        &self.naming
    }

    /// The event extractor.
    pub fn extractor(&self) -> &Extractor {
        &self.extractor
    }

    /// Routes one record, judged against `now` for expiry and future skew.
    pub fn route(
        &self,
        data: &[u8],
        origin: &Origin,
        now: DateTime<Utc>,
    ) -> Result<Routed, RouteError> {
        self.route_in(data, origin, now, &mut RouteCache::default())
    }

    /// As [`Router::route`], remembering in `cache` what the next events
    /// will likely need again: the table name when the event's period is
    /// the one it last named (a stream's events mostly are: one shared name
    /// instead of a new string per event), and entities' shards.
    pub fn route_in(
        &self,
        data: &[u8],
        origin: &Origin,
        now: DateTime<Utc>,
        cache: &mut RouteCache,
    ) -> Result<Routed, RouteError> {
        // The new layout's item alone (the old one, if any, is not needed).
        self.route_inner(data, origin, 0, now, cache)
            .map(|(new, _)| new)
    }

    /// As [`Router::route_in`] for inner event `inner` of a record that
    /// holds several (see [`crate::framing`]): an event without its own id
    /// gets one derived from the record's position and `inner`. While a
    /// shard migration is in progress (`migrate_from`), also the same
    /// event's item under the old layout, in the same table. The second is
    /// `None` without a migration and when both layouts give the same key:
    /// an event is written once per distinct key, never twice under one.
    pub fn route_inner(
        &self,
        data: &[u8],
        origin: &Origin,
        inner: u32,
        now: DateTime<Utc>,
        cache: &mut RouteCache,
    ) -> Result<(Routed, Option<Routed>), RouteError> {
        let p = self.prepare(data, origin, inner, now, cache)?;
        let item = self.encode_item(&p, &p.key, data.len())?;
        let old = match &self.config.migrate_from {
            Some(from) => {
                let key = from.key_with_iso(
                    &p.ev.entity_id,
                    p.ev.timestamp_ms,
                    &p.iso,
                    &p.ev.event_id,
                    &mut cache.old_shards,
                );
                if key == p.key {
                    None
                } else {
                    self.check_key(&key)?;
                    let item = self.encode_item(&p, &key, data.len())?;
                    Some(Routed {
                        table: p.table.clone(),
                        key,
                        wcu: item.wcu(),
                        item,
                        timestamp_ms: p.ev.timestamp_ms,
                    })
                }
            }
            None => None,
        };
        let new = Routed {
            table: p.table,
            key: p.key,
            wcu: item.wcu(),
            item,
            timestamp_ms: p.ev.timestamp_ms,
        };
        Ok((new, old))
    }

    /// A key within DynamoDB's size limits, or why not.
    fn check_key(&self, key: &ItemKey) -> Result<(), RouteError> {
        if key.pk().len() > MAX_PARTITION_KEY_BYTES || key.sk().len() > MAX_SORT_KEY_BYTES {
            return Err(RouteError::BadEntity {
                field: self.config.event.entity_label(),
                problem: format!(
                    "(with the event id) makes a key over DynamoDB's limits ({} / {} bytes)",
                    MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES
                ),
            });
        }
        Ok(())
    }

    /// Everything but the item: the event, its table and its key, or why the
    /// record cannot be written.
    fn prepare<'a>(
        &self,
        data: &'a [u8],
        origin: &Origin,
        inner: u32,
        now: DateTime<Utc>,
        cache: &mut RouteCache,
    ) -> Result<Prepared<'a>, RouteError> {
        let ev = self.extractor.extract_raw(data, origin, inner)?;
        let cfg = &self.config;
        let ts = ev.timestamp_ms;
        let now_ms = now.timestamp_millis();

        if self.config.forbids_hash_in_entity() && ev.entity_id.contains('#') {
            return Err(RouteError::BadEntity {
                field: cfg.event.entity_label(),
                problem: "contains `#`, the key separator of the time_bucket strategy".into(),
            });
        }
        if ts > now_ms.saturating_add(self.skew_ms) {
            return Err(RouteError::FutureEvent {
                timestamp: timefmt::iso_millis(ts),
                now: timefmt::iso_millis(now_ms),
                skew_s: cfg.max_future_skew.as_secs(),
            });
        }
        let period = cfg.period.containing(ts);
        if period.end_ms().saturating_add(self.retention_ms) <= now_ms {
            return Err(RouteError::ExpiredPeriod {
                timestamp: timefmt::iso_millis(ts),
                table: self.naming.name_of(&period),
                retention_s: cfg.retention.as_secs(),
            });
        }
        let table = cache.name_of(&self.naming, period);

        let iso = match ev.iso {
            Some(text) => Cow::Borrowed(text),
            None => Cow::Owned(timefmt::iso_millis(ts)),
        };
        let key = cfg
            .key
            .key_with_iso(&ev.entity_id, ts, &iso, &ev.event_id, &mut cache.shards);
        self.check_key(&key)?;
        Ok(Prepared {
            ev,
            table,
            key,
            iso,
        })
    }

    /// Whether `name` is one of the attributes every item carries.
    fn is_fixed_name(&self, name: &str) -> bool {
        fixed_names(&self.config).contains(&name)
            || self.config.ttl_attribute.as_deref() == Some(name)
    }

    /// Encodes the item as DynamoDB JSON into one buffer and sums its size by
    /// DynamoDB's rules (those of [`size::item_size`]) on the way: no
    /// attribute map is built, and payload text is copied where it can be.
    fn encode_item(
        &self,
        p: &Prepared<'_>,
        key: &ItemKey,
        data_len: usize,
    ) -> Result<WireItem, RouteError> {
        let cfg = &self.config;
        let ka = &cfg.key_attributes;
        let ia = &cfg.attributes;
        let ev = &p.ev;
        let ts = ev.timestamp_ms;
        // Payload text is at most the record's; this is usually the final size.
        let mut out = Vec::with_capacity(
            self.fixed_bytes
                + data_len
                + key.pk().len()
                + key.sk().len()
                + ev.event_id.len()
                + PER_MEMBER_BYTES * ev.payload.len(),
        );
        out.push(b'{');
        let mut size = 0;
        let [pk, sk, entity, event_id, timestamp, timestamp_ms] = &self.heads;
        for (head, name, value) in [
            (pk, &ka.pk, key.pk()),
            (sk, &ka.sk, key.sk()),
            (entity, &ia.entity, &ev.entity_id),
            (event_id, &ia.event_id, &ev.event_id),
            (timestamp, &ia.timestamp, &p.iso),
        ] {
            put_head(&mut out, head);
            write_tagged_str(&mut out, "S", value);
            size += name.len() + value.len();
        }
        put_head(&mut out, timestamp_ms);
        size += ia.timestamp_ms.len() + put_int(&mut out, ts);
        if let (Some(ttl), Some(head)) = (&cfg.ttl_attribute, &self.ttl_head) {
            let expires = ts.div_euclid(1000).saturating_add(self.retention_ms / 1000);
            put_head(&mut out, head);
            size += ttl.len() + put_int(&mut out, expires);
        }

        let names = Dups::new(&ev.payload);
        let rules = self.extractor.rules();
        for (i, (name, node)) in ev.payload.iter().enumerate() {
            let rule = rules.map(|r| r.get(name));
            if rule.is_some_and(|r| !r.keep) {
                continue;
            }
            let reserved = || {
                RouteError::BadAttribute {
                field: name.to_string(),
                problem: "has the name of a reserved item attribute; rename it in the producer, change `attributes`, or set [event] on_clash = \"prefix\"".into(),
            }
            };
            // A top-level duplicate meets its earlier copy like a reserved name.
            if names.earlier(i) {
                return Err(reserved());
            }
            if name.is_empty() {
                return Err(RouteError::BadAttribute {
                    field: name.to_string(),
                    problem: "has an empty name, which DynamoDB rejects".into(),
                });
            }
            let stored: Cow<'_, str> = if self.is_fixed_name(name) {
                match self.extractor.clash() {
                    (ClashPolicy::Refuse, _) => return Err(reserved()),
                    (ClashPolicy::Prefix, prefix) => {
                        Cow::Owned(self.free_name(prefix, name, &ev.payload))
                    }
                }
            } else {
                Cow::Borrowed(name.as_ref())
            };
            match &stored {
                Cow::Borrowed(_) => put_name(&mut out, name),
                Cow::Owned(n) => {
                    separate(&mut out);
                    write_str(&mut out, n);
                    out.push(b':');
                }
            }
            let value_size = match rule.and_then(|r| r.ty) {
                None => write_node(&mut out, node, &Path::Top(name), 1)?,
                Some(ty) => write_coerced(&mut out, node, ty, name)?,
            };
            size += stored.len() + value_size;
        }
        out.push(b'}');

        if size > size::MAX_ITEM_BYTES {
            return Err(RouteError::ItemTooLarge {
                size,
                limit: size::MAX_ITEM_BYTES,
            });
        }
        Ok(WireItem::from_parts(out, size))
    }
}

impl Router {
    /// `prefix` + `name`, prefixed again while that is taken by an item
    /// attribute or another payload field. Each round makes the name longer
    /// than every name it could meet again, so it ends.
    fn free_name(&self, prefix: &str, name: &str, payload: &[(Name<'_>, Node<'_>)]) -> String {
        let mut candidate = format!("{prefix}{name}");
        while self.is_fixed_name(&candidate) || payload.iter().any(|(k, _)| *k == candidate) {
            candidate.insert_str(0, prefix);
        }
        candidate
    }
}

/// Appends a payload value coerced to `ty` and returns its size.
fn write_coerced(
    out: &mut Vec<u8>,
    node: &Node<'_>,
    ty: FieldType,
    name: &str,
) -> Result<usize, RouteError> {
    match mapping::coerce(node, ty) {
        Ok(Coerced::Same) => write_node(out, node, &Path::Top(name), 1),
        Ok(Coerced::Number(text)) => {
            let significant = check_number(&text).map_err(|p| bad(name, p))?;
            out.extend_from_slice(b"{\"N\":\"");
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"\"}");
            Ok(size::size_of_significant(significant))
        }
        Ok(Coerced::Str(text)) => {
            out.extend_from_slice(b"{\"S\":");
            write_str(out, &text);
            out.push(b'}');
            Ok(text.len())
        }
        Ok(Coerced::Bool(b)) => {
            out.extend_from_slice(if b {
                b"{\"BOOL\":true}"
            } else {
                b"{\"BOOL\":false}"
            });
            Ok(1)
        }
        Err(problem) => Err(RouteError::Event(EventError::Coercion {
            field: name.to_owned(),
            problem,
        })),
    }
}

/// The config keys of [`fixed_names`], in the same order.
const FIXED_NAME_KEYS: [&str; 6] = [
    "key_attributes.pk",
    "key_attributes.sk",
    "attributes.entity",
    "attributes.event_id",
    "attributes.timestamp",
    "attributes.timestamp_ms",
];

/// Names of the attributes every item carries besides the TTL: pk, sk,
/// entity, event id, timestamp, timestamp_ms.
fn fixed_names(config: &RouterConfig) -> [&str; 6] {
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

/// Output bytes a payload member adds beyond its text in the record (the
/// type tag and quotes), for sizing the buffer up front.
const PER_MEMBER_BYTES: usize = 12;

/// A record past its checks, before its item is built.
struct Prepared<'a> {
    ev: RawEvent<'a>,
    table: SharedStr,
    key: ItemKey,
    iso: Cow<'a, str>,
}

/// Where a payload value sits in the record (`a.b[2]`); rendered only for an
/// error message, so a route that succeeds formats no paths.
#[derive(Clone, Copy)]
enum Path<'a> {
    Top(&'a str),
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Top(name) => f.write_str(name),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// Repeated names among an object's members. Small objects (nearly all) are
/// scanned in place, without allocating; large ones are indexed once, as the
/// scans would be quadratic in the member count.
struct Dups<'m> {
    members: &'m [(Name<'m>, Node<'m>)],
    /// First and last position of each name, for large objects.
    index: Option<HashMap<&'m str, (usize, usize)>>,
}

/// Up to this many members an object's names are scanned, not indexed.
const DUPS_SCAN_MAX: usize = 32;

impl<'m> Dups<'m> {
    fn new(members: &'m [(Name<'m>, Node<'m>)]) -> Dups<'m> {
        let index = (members.len() > DUPS_SCAN_MAX).then(|| {
            let mut index = HashMap::with_capacity(members.len());
            for (i, (k, _)) in members.iter().enumerate() {
                index.entry(k.as_ref()).or_insert((i, i)).1 = i;
            }
            index
        });
        Dups { members, index }
    }

    /// Whether member `i`'s name occurs before it.
    fn earlier(&self, i: usize) -> bool {
        let Some((name, _)) = self.members.get(i) else {
            return false;
        };
        match &self.index {
            None => self.members.iter().take(i).any(|(k, _)| k == name),
            Some(index) => index
                .get(name.as_ref())
                .is_some_and(|&(first, _)| first < i),
        }
    }

    /// Whether member `i`'s name occurs after it.
    fn later(&self, i: usize) -> bool {
        let Some((name, _)) = self.members.get(i) else {
            return false;
        };
        match &self.index {
            None => self.members.iter().skip(i + 1).any(|(k, _)| k == name),
            Some(index) => index.get(name.as_ref()).is_some_and(|&(_, last)| last > i),
        }
    }
}

/// A comma before a member, unless it opens its object.
fn separate(out: &mut Vec<u8>) {
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
}

/// Appends an encoded `"name":`, after a comma unless it opens its object.
fn put_head(out: &mut Vec<u8>, head: &[u8]) {
    separate(out);
    out.extend_from_slice(head);
}

/// Appends `"name":`, after a comma unless it opens its object.
fn put_name(out: &mut Vec<u8>, name: &Name<'_>) {
    separate(out);
    match name {
        // Borrowed means the record spelled it without escapes, and the
        // parser refuses raw `"` and control characters: it needs none.
        Cow::Borrowed(plain) => {
            out.push(b'"');
            out.extend_from_slice(plain.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(name) => write_str(out, name),
    }
    out.push(b':');
}

/// Appends `{"N":"<n>"}` and returns the number's size.
fn put_int(out: &mut Vec<u8>, n: i64) -> usize {
    // itoa rather than write!: no formatting machinery per number.
    let mut digits = itoa::Buffer::new();
    let text = digits.format(n);
    out.extend_from_slice(b"{\"N\":\"");
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\"}");
    size::int_text_size(text)
}

fn bad(field: impl fmt::Display, problem: impl Into<String>) -> RouteError {
    RouteError::BadAttribute {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// A map or list at `level` is refused when its elements would lie below
/// DynamoDB's deepest level.
fn check_nesting(path: &Path<'_>, level: usize) -> Result<(), RouteError> {
    if level >= size::MAX_NESTING_LEVELS {
        return Err(bad(
            path,
            format!(
                "nests maps and lists deeper than DynamoDB's {} levels",
                size::MAX_NESTING_LEVELS
            ),
        ));
    }
    Ok(())
}

/// Appends one payload value and returns its size. `level` is the value's
/// nesting level (1 for a top-level attribute). The raw parse does not limit
/// nesting, so the level check also bounds the recursion: a record of deeply
/// nested brackets must be dead-lettered, not overflow the stack.
fn write_node(
    out: &mut Vec<u8>,
    node: &Node<'_>,
    path: &Path<'_>,
    level: usize,
) -> Result<usize, RouteError> {
    match node {
        Node::Object(members) => write_object(out, members, path, level),
        Node::Raw(raw) => write_raw(out, raw, path, level),
    }
}

fn write_object(
    out: &mut Vec<u8>,
    members: &[(Name<'_>, Node<'_>)],
    path: &Path<'_>,
    level: usize,
) -> Result<usize, RouteError> {
    check_nesting(path, level)?;
    out.extend_from_slice(b"{\"M\":{");
    let dups = Dups::new(members);
    let mut size = 3;
    for (i, (k, v)) in members.iter().enumerate() {
        let child = Path::Key(path, k);
        if k.is_empty() {
            return Err(bad(child, "has an empty name, which DynamoDB rejects"));
        }
        let mark = out.len();
        put_name(out, k);
        let value_size = write_node(out, v, &child, level + 1)?;
        // Duplicate keys: the last wins, as in serde_json. An earlier one is
        // still checked (its error dead-letters the record) but not kept.
        if dups.later(i) {
            out.truncate(mark);
        } else {
            size += 1 + k.len() + value_size;
        }
    }
    out.extend_from_slice(b"}}");
    Ok(size)
}

fn write_raw(
    out: &mut Vec<u8>,
    raw: &RawValue,
    path: &Path<'_>,
    level: usize,
) -> Result<usize, RouteError> {
    let text = raw.get().trim_ascii();
    let parse_err = |e: serde_json::Error| bad(path, format!("cannot be read: {e}"));
    match raw::json_kind(raw) {
        "object" => {
            check_nesting(path, level)?;
            let members = raw::open_object(raw).map_err(parse_err)?;
            write_object(out, &members, path, level)
        }
        "array" => {
            check_nesting(path, level)?;
            let elems: Vec<&RawValue> = serde_json::from_str(text).map_err(parse_err)?;
            out.extend_from_slice(b"{\"L\":[");
            let mut size = 3;
            for (i, e) in elems.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                size += 1 + write_raw(out, e, &Path::Index(path, i), level + 1)?;
            }
            out.extend_from_slice(b"]}");
            Ok(size)
        }
        "string" => {
            out.extend_from_slice(b"{\"S\":");
            let len = if text.contains('\\') {
                let s: String = serde_json::from_str(text).map_err(parse_err)?;
                write_str(out, &s);
                s.len()
            } else {
                // Without escapes the JSON text is the string in quotes (the
                // parse has already refused raw control characters).
                out.extend_from_slice(text.as_bytes());
                text.len().saturating_sub(2)
            };
            out.push(b'}');
            Ok(len)
        }
        "boolean" => {
            out.extend_from_slice(if text == "true" {
                b"{\"BOOL\":true}"
            } else {
                b"{\"BOOL\":false}"
            });
            Ok(1)
        }
        "null" => {
            out.extend_from_slice(b"{\"NULL\":true}");
            Ok(1)
        }
        _ => {
            let significant = check_number(text).map_err(|p| bad(path, p))?;
            out.extend_from_slice(b"{\"N\":\"");
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"\"}");
            Ok(size::size_of_significant(significant))
        }
    }
}

/// DynamoDB numbers: at most 38 significant digits, magnitude between 1e-130
/// and 9.99...e125 (or zero). Checked here so such an event is dead-lettered
/// with a reason instead of failing its whole batch. Returns the count of
/// significant digits, which also gives the number's size.
fn check_number(text: &str) -> Result<usize, String> {
    check_number_with(text, digit_counts)
}

/// Leading zeros and significant digits of the digits of `int_part` then
/// `frac_part`, counted in place (no String joining them: this runs for
/// every number of every record).
fn digit_counts(int_part: &str, frac_part: &str) -> (usize, usize) {
    let digits = || int_part.bytes().chain(frac_part.bytes());
    let total = int_part.len() + frac_part.len();
    let lead = digits().take_while(|&b| b == b'0').count();
    if lead == total {
        return (lead, 0);
    }
    let trail = digits().rev().take_while(|&b| b == b'0').count();
    (lead, total - lead - trail)
}

/// [`check_number`] with the digit counting given.
fn check_number_with(
    text: &str,
    counts: impl Fn(&str, &str) -> (usize, usize),
) -> Result<usize, String> {
    let body = text.trim_start_matches('-');
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (
            &body[..i],
            body[i + 1..]
                .parse::<i64>()
                .map_err(|_| format!("number {text} has an unusable exponent"))?,
        ),
        None => (body, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let (lead, significant) = counts(int_part, frac_part);
    if significant == 0 {
        return Ok(0);
    }
    if significant > 38 {
        return Err(format!(
            "number {text} has more than the 38 significant digits DynamoDB keeps"
        ));
    }
    // Decimal exponent of the leading significant digit.
    let int_len = i64::try_from(int_part.len()).unwrap_or(i64::MAX);
    let lead = i64::try_from(lead).unwrap_or(i64::MAX);
    let magnitude = exp
        .saturating_add(int_len)
        .saturating_sub(lead)
        .saturating_sub(1);
    if !(-130..=125).contains(&magnitude) {
        return Err(format!(
            "number {text} is outside DynamoDB's range 1e-130 to 9.99e125"
        ));
    }
    Ok(significant)
}

/// The attribute-map item building `route` did before it wrote DynamoDB JSON
/// directly, kept as the oracle of the equivalence tests.
#[cfg(test)]
mod reference {
    use std::collections::HashMap;

    use aws_sdk_dynamodb::types::AttributeValue;

    use super::*;
    use crate::size::Item;

    /// The item `route` built for a record, or its error.
    pub(super) fn route_item(
        router: &Router,
        data: &[u8],
        origin: &Origin,
        now: DateTime<Utc>,
    ) -> Result<Item, RouteError> {
        let Prepared { ev, key, iso, .. } =
            router.prepare(data, origin, 0, now, &mut RouteCache::default())?;
        let cfg = &router.config;
        let ts = ev.timestamp_ms;
        let ka = &cfg.key_attributes;
        let ia = &cfg.attributes;
        let mut item = Item::with_capacity(ev.payload.len() + 7);
        item.insert(ka.pk.clone(), AttributeValue::S(key.pk().to_owned()));
        item.insert(ka.sk.clone(), AttributeValue::S(key.sk().to_owned()));
        item.insert(
            ia.entity.clone(),
            AttributeValue::S(ev.entity_id.into_owned()),
        );
        item.insert(
            ia.event_id.clone(),
            AttributeValue::S(ev.event_id.into_owned()),
        );
        item.insert(ia.timestamp.clone(), AttributeValue::S(iso.into_owned()));
        item.insert(ia.timestamp_ms.clone(), AttributeValue::N(ts.to_string()));
        if let Some(ttl) = &cfg.ttl_attribute {
            let expires = ts
                .div_euclid(1000)
                .saturating_add(router.retention_ms / 1000);
            item.insert(ttl.clone(), AttributeValue::N(expires.to_string()));
        }
        let reserved = |name: String| {
            RouteError::BadAttribute {
            field: name,
            problem: "has the name of a reserved item attribute; rename it in the producer, change `attributes`, or set [event] on_clash = \"prefix\"".into(),
        }
        };
        let mut seen = std::collections::HashSet::new();
        for (name, node) in &ev.payload {
            let name = name.to_string();
            if !seen.insert(name.clone()) {
                return Err(reserved(name));
            }
            if name.is_empty() {
                return Err(RouteError::BadAttribute {
                    field: name,
                    problem: "has an empty name, which DynamoDB rejects".into(),
                });
            }
            let value = node_to_attribute(node, &name, 1)?;
            let stored = if item.contains_key(&name) {
                match cfg.event.on_clash {
                    ClashPolicy::Refuse => return Err(reserved(name)),
                    ClashPolicy::Prefix => {
                        router.free_name(&cfg.event.clash_prefix, &name, &ev.payload)
                    }
                }
            } else {
                name
            };
            item.insert(stored, value);
        }
        let item_size = size::item_size(&item);
        if item_size > size::MAX_ITEM_BYTES {
            return Err(RouteError::ItemTooLarge {
                size: item_size,
                limit: size::MAX_ITEM_BYTES,
            });
        }
        Ok(item)
    }

    fn nesting(path: &str, level: usize) -> Result<(), RouteError> {
        check_nesting(&Path::Top(path), level)
    }

    fn node_to_attribute(
        node: &Node<'_>,
        path: &str,
        level: usize,
    ) -> Result<AttributeValue, RouteError> {
        match node {
            Node::Object(members) => object_to_attribute(members, path, level),
            Node::Raw(raw) => raw_to_attribute(raw, path, level),
        }
    }

    fn object_to_attribute(
        members: &[(Name<'_>, Node<'_>)],
        path: &str,
        level: usize,
    ) -> Result<AttributeValue, RouteError> {
        nesting(path, level)?;
        let mut map = HashMap::with_capacity(members.len());
        for (k, v) in members {
            let child = format!("{path}.{k}");
            if k.is_empty() {
                return Err(bad(&child, "has an empty name, which DynamoDB rejects"));
            }
            map.insert(k.to_string(), node_to_attribute(v, &child, level + 1)?);
        }
        Ok(AttributeValue::M(map))
    }

    fn raw_to_attribute(
        raw: &RawValue,
        path: &str,
        level: usize,
    ) -> Result<AttributeValue, RouteError> {
        let text = raw.get().trim_ascii();
        let parse_err = |e: serde_json::Error| bad(path, format!("cannot be read: {e}"));
        match raw::json_kind(raw) {
            "object" => {
                nesting(path, level)?;
                let members = raw::open_object(raw).map_err(parse_err)?;
                object_to_attribute(&members, path, level)
            }
            "array" => {
                nesting(path, level)?;
                let elems: Vec<&RawValue> = serde_json::from_str(text).map_err(parse_err)?;
                let mut list = Vec::with_capacity(elems.len());
                for (i, e) in elems.iter().enumerate() {
                    list.push(raw_to_attribute(e, &format!("{path}[{i}]"), level + 1)?);
                }
                Ok(AttributeValue::L(list))
            }
            "string" => Ok(AttributeValue::S(
                serde_json::from_str(text).map_err(parse_err)?,
            )),
            "boolean" => Ok(AttributeValue::Bool(text == "true")),
            "null" => Ok(AttributeValue::Null(true)),
            _ => {
                check_number_by_string(text).map_err(|p| bad(path, p))?;
                Ok(AttributeValue::N(text.to_owned()))
            }
        }
    }

    /// `check_number` as it was, joining the digits into a String.
    pub(super) fn check_number_by_string(text: &str) -> Result<usize, String> {
        check_number_with(text, |int_part, frac_part| {
            let all: String = format!("{int_part}{frac_part}");
            let lead = all.len() - all.trim_start_matches('0').len();
            (
                lead,
                all.trim_start_matches('0').trim_end_matches('0').len(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;
    use proptest::prelude::*;

    use super::*;
    use crate::event::TimestampFormat;

    fn origin() -> Origin {
        Origin::Sqs {
            queue: "q".into(),
            message_id: "m-1".into(),
            index: 0,
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn router(f: impl FnOnce(&mut RouterConfig)) -> Router {
        let mut c = RouterConfig::with_prefix("tm");
        f(&mut c);
        Router::new(c).unwrap()
    }

    /// During a migration 4 -> 8 (time_bucket), each event gets its new
    /// key and, only where the shard differs, its old one: same table, same
    /// attributes but the key, and the old key is the one the 4-shard
    /// layout alone gives. Without `migrate_from` there is no second item.
    #[test]
    fn dual_routes_write_the_old_layout_only_where_it_differs() {
        let tb = |shards| KeyStrategy::TimeBucket {
            shards,
            bucket: crate::strategy::Bucket::Hour,
        };
        let dual = router(|c| {
            c.key = tb(8);
            c.migrate_from = Some(tb(4));
        });
        let plain = router(|c| c.key = tb(8));
        let now = at("2026-11-22T06:00:00Z");
        let mut cache = RouteCache::default();
        let (mut same, mut differ) = (0, 0);
        for i in 0..64 {
            let event = format!(
                r#"{{"deviceId":"d{i}","timestamp":"2026-11-22T05:00:00Z","eventId":"e{i}"}}"#
            );
            let (new, old) = dual
                .route_inner(event.as_bytes(), &origin(), 0, now, &mut cache)
                .unwrap();
            let alone = plain.route(event.as_bytes(), &origin(), now).unwrap();
            assert_eq!(new, alone);
            let want_old = tb(4).key(&format!("d{i}"), 1_795_323_600_000, &format!("e{i}"));
            match old {
                None => {
                    assert_eq!(new.key, want_old);
                    same += 1;
                }
                Some(old) => {
                    assert_eq!(old.key, want_old);
                    assert_ne!(old.key, new.key);
                    assert_eq!(old.table, new.table);
                    let text = String::from_utf8(old.item.json().to_vec()).unwrap();
                    assert!(text.contains(want_old.pk()), "{text}");
                    differ += 1;
                }
            }
            let (_, none) = plain
                .route_inner(
                    event.as_bytes(),
                    &origin(),
                    0,
                    now,
                    &mut RouteCache::default(),
                )
                .unwrap();
            assert!(none.is_none());
        }
        assert!(same > 0 && differ > 0, "{same} same, {differ} differ");
        let same_layout = RouterConfig {
            migrate_from: Some(tb(8)),
            key: tb(8),
            ..RouterConfig::with_prefix("tm")
        };
        assert!(matches!(
            Router::new(same_layout),
            Err(ConfigError::Invalid {
                key: "migrate_from",
                ..
            })
        ));
    }

    /// One `RouteCache` over events of several periods (crossing midnight
    /// and back, and an expired one between) names every table as a fresh
    /// route does: the cached name follows the period.
    #[test]
    fn table_names_follow_the_period() {
        let r = router(|_| {});
        let now = at("2026-11-23T00:30:00Z");
        let mut names = RouteCache::default();
        let mut tables = Vec::new();
        for ts in [
            "2026-11-22T23:59:59.999Z",
            "2026-11-22T12:00:00.000Z",
            "2026-11-23T00:00:00.000Z",
            "2020-01-01T00:00:00.000Z",
            "2026-11-22T23:00:00.000Z",
            "2026-11-23T00:10:00.000Z",
        ] {
            let event = format!(r#"{{"deviceId":"d","timestamp":"{ts}","eventId":"e"}}"#);
            let cached = r.route_in(event.as_bytes(), &origin(), now, &mut names);
            let fresh = r.route(event.as_bytes(), &origin(), now);
            match (cached, fresh) {
                (Ok(c), Ok(f)) => {
                    assert_eq!(c.table, f.table, "{ts}");
                    tables.push(c.table.to_string());
                }
                (Err(c), Err(f)) => assert_eq!(c, f, "{ts}"),
                (c, f) => panic!("{ts}: {c:?} against {f:?}"),
            }
        }
        assert_eq!(
            tables,
            [
                "tm_2026-11-22",
                "tm_2026-11-22",
                "tm_2026-11-23",
                "tm_2026-11-22",
                "tm_2026-11-23"
            ]
        );
    }

    #[test]
    fn builds_the_documented_item() {
        let r = router(|c| c.ttl_attribute = Some("ttl".into()));
        let out = r
            .route(
                br#"{"deviceId":"d-1","timestamp":"2026-11-22T05:00:00.250Z","eventId":"e-1","temp":21.50,"big":123456789012345678901234567890,"tags":["a",1,false,null],"m":{"x":{"y":1e2}}}"#,
                &origin(),
                at("2026-11-22T05:01:00Z"),
            )
            .unwrap();
        assert_eq!(out.table, "tm_2026-11-22");
        assert_eq!(out.key.pk(), "d-1");
        assert_eq!(out.key.sk(), "2026-11-22T05:00:00.250Z#e-1");
        let i = &out.item.to_item().unwrap();
        assert_eq!(i["pk"], AttributeValue::S("d-1".into()));
        assert_eq!(i["entity_id"], AttributeValue::S("d-1".into()));
        assert_eq!(i["event_id"], AttributeValue::S("e-1".into()));
        assert_eq!(
            i["ts"],
            AttributeValue::S("2026-11-22T05:00:00.250Z".into())
        );
        assert_eq!(i["ts_ms"], AttributeValue::N(out.timestamp_ms.to_string()));
        assert_eq!(
            i["ttl"],
            AttributeValue::N((out.timestamp_ms / 1000 + 30 * 86_400).to_string())
        );
        // Exact digits, including past f64 precision and the trailing zero.
        assert_eq!(i["temp"], AttributeValue::N("21.50".into()));
        assert_eq!(
            i["big"],
            AttributeValue::N("123456789012345678901234567890".into())
        );
        let AttributeValue::L(tags) = &i["tags"] else {
            panic!("{:?}", i["tags"])
        };
        assert_eq!(
            tags,
            &vec![
                AttributeValue::S("a".into()),
                AttributeValue::N("1".into()),
                AttributeValue::Bool(false),
                AttributeValue::Null(true)
            ]
        );
        let AttributeValue::M(m) = &i["m"] else {
            panic!()
        };
        let AttributeValue::M(x) = &m["x"] else {
            panic!()
        };
        assert_eq!(x["y"], AttributeValue::N("1e2".into()));
        assert!(
            !i.contains_key("deviceId")
                && !i.contains_key("timestamp")
                && !i.contains_key("eventId")
        );
        assert_eq!(out.wcu, size::item_wcu(i));
    }

    #[test]
    fn every_spelling_of_an_instant_routes_alike() {
        // The canonical spelling is read by the fast path and its text reused;
        // the others go through chrono and are rendered.
        let r = router(|c| {
            c.key = KeyStrategy::TimeBucket {
                shards: 7,
                bucket: crate::strategy::Bucket::Minute,
            }
        });
        let now = at("2026-11-22T06:00:00Z");
        for (canonical, ms) in [
            ("2026-11-22T05:59:59.999Z", 1_795_327_199_999_i64),
            ("2026-11-22T05:00:00.000Z", 1_795_323_600_000),
            ("2026-11-01T00:00:00.001Z", 1_793_491_200_001),
        ] {
            let spellings = [
                format!("\"{canonical}\""),
                format!("\"{}+00:00\"", canonical.trim_end_matches('Z')),
                format!("\"{}\"", canonical.replace('T', "t")),
                ms.to_string(),
            ];
            let routes: Vec<Routed> = spellings
                .iter()
                .map(|ts| {
                    let rec = format!(r#"{{"deviceId":"d","eventId":"e","timestamp":{ts}}}"#);
                    r.route(rec.as_bytes(), &origin(), now).unwrap()
                })
                .collect();
            for (spelling, routed) in spellings.iter().zip(&routes) {
                assert_eq!(routed, &routes[0], "{spelling}");
            }
            assert!(
                routes[0].key.sk().contains(canonical),
                "{:?}",
                routes[0].key
            );
            assert_eq!(routes[0].timestamp_ms, ms);
        }
    }

    #[test]
    fn replays_give_identical_routes() {
        for key in [
            KeyStrategy::Entity,
            KeyStrategy::RandomSuffix { shards: 7 },
            KeyStrategy::CalculatedSuffix { shards: 7 },
            KeyStrategy::TimeBucket {
                shards: 7,
                bucket: crate::strategy::Bucket::Hour,
            },
        ] {
            let r = router(|c| c.key = key.clone());
            let rec = br#"{"deviceId":"d","timestamp":1795323600000,"v":1}"#;
            let now = at("2026-11-22T05:00:00Z");
            let a = r.route(rec, &origin(), now).unwrap();
            let b = r.route(rec, &origin(), now).unwrap();
            assert_eq!(a, b);
            // A different source position without an event id is a different event.
            let other = Origin::Sqs {
                queue: "q".into(),
                message_id: "m-2".into(),
                index: 0,
            };
            assert_ne!(r.route(rec, &other, now).unwrap().key, a.key);
        }
    }

    #[test]
    fn expired_and_future_events_get_their_reasons() {
        let r = router(|_| {});
        let now = at("2026-11-22T05:00:00Z");
        let rec = |ts: &str| format!(r#"{{"deviceId":"d","timestamp":"{ts}"}}"#);
        // Day 2026-10-22 ended 2026-10-23T00:00Z; +30 d = 2026-11-22T00:00Z <= now.
        let e = r
            .route(rec("2026-10-22T23:59:59Z").as_bytes(), &origin(), now)
            .unwrap_err();
        assert_eq!(e.reason(), Reason::ExpiredPeriod);
        assert!(e.to_string().contains("tm_2026-10-22"), "{e}");
        assert!(
            r.route(rec("2026-10-23T00:00:00Z").as_bytes(), &origin(), now)
                .is_ok()
        );
        assert!(
            r.route(rec("2026-11-22T05:05:00Z").as_bytes(), &origin(), now)
                .is_ok()
        );
        let e = r
            .route(rec("2026-11-22T05:05:00.001Z").as_bytes(), &origin(), now)
            .unwrap_err();
        assert_eq!(e.reason(), Reason::FutureEvent);
        assert!(e.to_string().contains("max_future_skew"), "{e}");
    }

    #[test]
    fn field_errors_are_invalid_field() {
        let now = at("2026-11-22T05:00:00Z");
        let tb = router(|c| {
            c.key = KeyStrategy::TimeBucket {
                shards: 2,
                bucket: crate::strategy::Bucket::Day,
            };
        });
        let e = tb
            .route(
                br#"{"deviceId":"a#b","timestamp":1795323600}"#,
                &origin(),
                now,
            )
            .unwrap_err();
        assert_eq!(e.reason(), Reason::InvalidField);
        assert!(e.to_string().contains("deviceId"), "{e}");
        let r = router(|_| {});
        assert!(
            r.route(
                br#"{"deviceId":"a#b","timestamp":1795323600}"#,
                &origin(),
                now
            )
            .is_ok()
        );
        // Clashing names are prefixed by default (see
        // `clashing_fields_are_prefixed_or_refused`); refused here.
        let r = router(|c| c.event.on_clash = ClashPolicy::Refuse);
        for (rec, needle) in [
            (
                r#"{"deviceId":"d","timestamp":1795323600,"pk":"x"}"#,
                "`pk`",
            ),
            (
                r#"{"deviceId":"d","timestamp":1795323600,"ts":"x"}"#,
                "`ts`",
            ),
            (r#"{"deviceId":"d","timestamp":1795323600,"":"x"}"#, "empty"),
            (
                r#"{"deviceId":"d","timestamp":1795323600,"n":1e200}"#,
                "`n`",
            ),
            (
                r#"{"deviceId":"d","timestamp":1795323600,"a":[{"b":12345678901234567890123456789012345678901}]}"#,
                "`a[0].b`",
            ),
        ] {
            let e = r.route(rec.as_bytes(), &origin(), now).unwrap_err();
            assert_eq!(e.reason(), Reason::InvalidField, "{e}");
            assert!(e.to_string().contains(needle), "{e} lacks {needle}");
        }
        let long = "x".repeat(2100);
        let rec = format!(r#"{{"deviceId":"{long}","timestamp":1795323600}}"#);
        assert_eq!(
            r.route(rec.as_bytes(), &origin(), now)
                .unwrap_err()
                .reason(),
            Reason::InvalidField
        );
    }

    #[test]
    fn oversized_items_are_refused_at_the_limit() {
        let r = router(|_| {});
        let now = at("2026-11-22T05:00:00Z");
        let make = |n: usize| {
            format!(
                r#"{{"deviceId":"d","timestamp":1795323600,"eventId":"e","blob":"{}"}}"#,
                "a".repeat(n)
            )
        };
        let base = r.route(make(0).as_bytes(), &origin(), now).unwrap();
        let fixed = base.item.size();
        assert_eq!(fixed, size::item_size(&base.item.to_item().unwrap()));
        let fits = r
            .route(
                make(size::MAX_ITEM_BYTES - fixed).as_bytes(),
                &origin(),
                now,
            )
            .unwrap();
        assert_eq!(fits.item.size(), size::MAX_ITEM_BYTES);
        assert_eq!(
            size::item_size(&fits.item.to_item().unwrap()),
            size::MAX_ITEM_BYTES
        );
        assert_eq!(fits.wcu, 400);
        let e = r
            .route(
                make(size::MAX_ITEM_BYTES - fixed + 1).as_bytes(),
                &origin(),
                now,
            )
            .unwrap_err();
        assert_eq!(e.reason(), Reason::ItemTooLarge);
        assert!(e.to_string().contains("409600"), "{e}");
    }

    #[test]
    fn config_errors_name_the_key() {
        type Edit = fn(&mut RouterConfig);
        let cases: [(Edit, &str); 6] = [
            (|c| c.table_prefix = "bad prefix".into(), "table_prefix"),
            (
                |c| c.key = KeyStrategy::RandomSuffix { shards: 0 },
                "shards",
            ),
            (|c| c.attributes.entity = "pk".into(), "attributes.entity"),
            (|c| c.ttl_attribute = Some(String::new()), "ttl_attribute"),
            (
                |c| c.max_future_skew = Duration::from_secs(3600),
                "max_future_skew",
            ),
            (
                |c| c.late_arrival_grace = Duration::from_secs(40 * 86_400),
                "late_arrival_grace",
            ),
        ];
        for (f, needle) in cases {
            let mut c = RouterConfig::with_prefix("tm");
            f(&mut c);
            let e = Router::new(c).unwrap_err();
            assert!(e.to_string().contains(needle), "{e} lacks {needle}");
        }
    }

    #[test]
    fn toml_config() {
        let c: RouterConfig = toml::from_str(
            r#"
table_prefix = "metrics"
period = "hour"
retention = "7d"
ttl_attribute = "expires"
[event]
entity_field = "sensor"
[key]
strategy = "time_bucket"
shards = 10
bucket = "hour"
"#,
        )
        .unwrap();
        assert_eq!(c.period, Period::Hour);
        assert_eq!(c.retention, Duration::from_secs(7 * 86_400));
        assert_eq!(c.key.shards(), 10);
        assert_eq!(c.event.entity_field, "sensor");
        assert!(Router::new(c).is_ok());
        assert!(
            toml::from_str::<RouterConfig>("table_prefix = \"m\"\nperiodd = \"hour\"").is_err()
        );
    }

    #[test]
    fn nesting_is_limited_to_dynamodb_levels_without_recursing_deeper() {
        let r = router(|_| {});
        let now = at("2026-11-22T05:00:00Z");
        let rec = |open: &str, close: &str, n: usize| {
            format!(
                r#"{{"deviceId":"d","timestamp":1795323600,"a":{}1{}}}"#,
                open.repeat(n),
                close.repeat(n)
            )
        };
        // 31 containers around a scalar: the scalar is at level 32, stored.
        assert!(
            r.route(rec("[", "]", 31).as_bytes(), &origin(), now)
                .is_ok()
        );
        assert!(
            r.route(rec(r#"{"b":"#, "}", 31).as_bytes(), &origin(), now)
                .is_ok()
        );
        // 32: DynamoDB would reject the item, so it is dead-lettered here.
        for (open, close) in [("[", "]"), (r#"{"b":"#, "}")] {
            let e = r
                .route(rec(open, close, 32).as_bytes(), &origin(), now)
                .unwrap_err();
            assert_eq!(e.reason(), Reason::InvalidField, "{e}");
            assert!(e.to_string().contains("32 levels"), "{e}");
        }
        // Found by fuzzing: 200,000 levels overflowed the stack (the raw
        // parse has no depth limit); now it is refused at level 32.
        let e = r
            .route(rec("[", "]", 200_000).as_bytes(), &origin(), now)
            .unwrap_err();
        assert_eq!(e.reason(), Reason::InvalidField);
        // A dotted path opens objects on the way; the levels still count.
        let dotted = router(|c| c.event.entity_field = "m.id".into());
        let deep = format!(
            r#"{{"m":{{"id":"d","x":{}1{}}},"timestamp":1795323600}}"#,
            "[".repeat(31),
            "]".repeat(31)
        );
        let e = dotted.route(deep.as_bytes(), &origin(), now).unwrap_err();
        assert!(e.to_string().contains("`m.x"), "{e}");
    }

    #[test]
    fn number_limits() {
        assert!(check_number("0").is_ok());
        assert!(check_number("-0.000").is_ok());
        assert!(check_number("9.99e125").is_ok());
        assert!(check_number("1e126").is_err());
        assert!(check_number("1e-130").is_ok());
        assert!(check_number("0.1e-129").is_ok());
        assert!(check_number("0.1e-130").is_err());
        assert!(check_number(&"1".repeat(38)).is_ok());
        assert!(check_number(&"1".repeat(39)).is_err());
        assert!(check_number(&format!("1{}", "0".repeat(100))).is_ok());
    }

    /// JSON text of a string: plain and non-ASCII characters written as they
    /// are, and every kind of escape, including a lone surrogate (which
    /// cannot be read, and must fail the same way).
    fn json_string(min_parts: usize) -> impl Strategy<Value = String> {
        let part = prop_oneof![
            6 => "[a-z0-9 #.]{1,4}",
            3 => "[^\"\\\\\\p{C}]",
            1 => prop::sample::select(vec![
                "\\\"", "\\\\", "\\/", "\\n", "\\t", "\\r", "\\b", "\\f", "\\u0000",
                "\\u001f", "\\u00e9", "\\u20ac", "\\ud83d\\ude00", "\\u0022", "\\ud800",
            ])
            .prop_map(str::to_owned),
        ];
        prop::collection::vec(part, min_parts..5)
            .prop_map(|parts| format!("\"{}\"", parts.concat()))
    }

    fn json_number() -> impl Strategy<Value = String> {
        prop_oneof![
            12 => any::<i64>().prop_map(|n| n.to_string()),
            12 => (-1e9..1e9f64).prop_map(|f| f.to_string()),
            12 => "-?(0|[1-9][0-9]{0,12})(\\.[0-9]{1,12})?([eE][-+]?[0-9]{1,2})?",
            1 => any::<f64>().prop_map(|f| f.to_string()),
            1 => "-?(0|[1-9][0-9]{0,44})(\\.[0-9]{1,44})?([eE][-+]?[0-9]{1,3})?",
            1 => prop::sample::select(vec!["0", "-0", "0.000", "1e2", "1E+2", "1.50", "9.99e125", "1e126", "1e-130", "0.1e-130", "1e99999999999999999999"])
                .prop_map(str::to_owned),
        ]
    }

    /// An entity id: mostly plain, sometimes any string (empty, with `#` or
    /// escapes).
    fn entity() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-z0-9-]{1,8}".prop_map(|e| format!("\"{e}\"")),
            1 => json_string(0),
        ]
    }

    /// An object member's name: few distinct names, so duplicates are common.
    fn member_name() -> impl Strategy<Value = String> {
        prop_oneof![
            200 => "[a-d]{1,2}".prop_map(|k| format!("\"{k}\"")),
            20 => json_string(1),
            1 => Just("\"\"".to_owned()),
        ]
    }

    fn ws() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["", "", "", " ", "\n\t "])
    }

    /// JSON text of any value: scalars, nested objects (with duplicate and
    /// empty keys) and arrays, and now and then a scalar deep in brackets
    /// around DynamoDB's nesting limit.
    fn json_value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            4 => json_string(0),
            4 => json_number(),
            1 => prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_owned),
        ];
        let tree = leaf.clone().prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                prop::collection::vec((inner.clone(), ws()), 0..5).prop_map(|xs| {
                    let body: Vec<String> =
                        xs.into_iter().map(|(v, w)| format!("{w}{v}{w}")).collect();
                    format!("[{}]", body.join(","))
                }),
                prop::collection::vec((member_name(), inner, ws()), 0..5).prop_map(|ms| {
                    let body: Vec<String> = ms
                        .into_iter()
                        .map(|(k, v, w)| format!("{w}{k}{w}:{w}{v}"))
                        .collect();
                    format!("{{{}}}", body.join(","))
                }),
            ]
        });
        prop_oneof![
            60 => tree,
            1 => (leaf, 28usize..34).prop_map(|(v, n)| format!("{}{v}{}", "[".repeat(n), "]".repeat(n))),
        ]
    }

    /// Top-level payload members; some take reserved names (`pk`, `ts`,
    /// `ttl`) or the empty name, and names repeat.
    fn payload() -> impl Strategy<Value = Vec<(String, String)>> {
        let name = prop_oneof![
            24 => "[a-z]{1,3}".prop_map(|k| format!("\"{k}\"")),
            4 => member_name(),
            1 => prop::sample::select(vec!["\"pk\"", "\"ts\"", "\"ttl\"", "\"entity_id\""]).prop_map(str::to_owned),
        ];
        prop::collection::vec((name, json_value()), 0..7)
    }

    /// Routers of different shapes: TTL or not, a time_bucket key, and an
    /// entity id at a dotted path (whose enclosing object reaches the item
    /// as an opened `Node::Object`).
    fn routers() -> Vec<Router> {
        vec![
            router(|c| c.ttl_attribute = Some("ttl".into())),
            router(|c| {
                c.key = KeyStrategy::TimeBucket {
                    shards: 4,
                    bucket: crate::strategy::Bucket::Hour,
                };
            }),
            router(|c| {
                c.event.entity_field = "meta.id".into();
                c.key = KeyStrategy::CalculatedSuffix { shards: 3 };
            }),
            router(|c| c.event.on_clash = ClashPolicy::Refuse),
        ]
    }

    /// Each object in `json` (an item or any part of one) has distinct keys.
    fn assert_distinct_keys(json: &RawValue) {
        match raw::json_kind(json) {
            "object" => {
                let members = raw::open_object(json).unwrap();
                for (i, (k, v)) in members.iter().enumerate() {
                    assert!(
                        members[..i].iter().all(|(other, _)| other != k),
                        "{k} twice in {}",
                        json.get()
                    );
                    let Node::Raw(raw) = v else { panic!() };
                    assert_distinct_keys(raw);
                }
            }
            "array" => {
                let elems: Vec<&RawValue> = serde_json::from_str(json.get()).unwrap();
                elems.into_iter().for_each(assert_distinct_keys);
            }
            _ => {}
        }
    }

    /// `route` against the attribute-map reference: same item, same size,
    /// same error; and the JSON is valid with no repeated key.
    fn check_against_reference(
        r: &Router,
        rec: &[u8],
        now: DateTime<Utc>,
    ) -> Result<(), TestCaseError> {
        let ours = r.route(rec, &origin(), now);
        let theirs = reference::route_item(r, rec, &origin(), now);
        match (ours, theirs) {
            (Ok(routed), Ok(item)) => {
                let raw: &RawValue = serde_json::from_slice(routed.item.json()).map_err(|e| {
                    TestCaseError::fail(format!("invalid JSON {e}: {:?}", routed.item))
                })?;
                assert_distinct_keys(raw);
                prop_assert_eq!(routed.item.to_item().unwrap(), item.clone());
                prop_assert_eq!(routed.item.size(), size::item_size(&item));
                prop_assert_eq!(routed.wcu, size::item_wcu(&item));
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "route {a:?}, reference {b:?}"),
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(768))]

        #[test]
        fn route_builds_the_reference_item(
            which in 0usize..3,
            entity in entity(),
            meta in payload(),
            members in payload(),
            ws in ws(),
        ) {
            let member = |(k, v): &(String, String)| format!(",{ws}{k}{ws}:{ws}{v}");
            let meta: String = meta.iter().map(member).collect();
            let members: String = members.iter().map(member).collect();
            let rec = format!(
                r#"{{"deviceId":{entity},"meta":{{"id":{entity}{meta}}},"timestamp":1795323600000{members}}}"#
            );
            let r = &routers()[which];
            check_against_reference(r, rec.as_bytes(), at("2026-11-22T05:00:00Z"))?;
        }

        #[test]
        fn check_number_agrees_with_the_string_version(n in json_number(), junk in "[-+.eE0-9x]{0,4}") {
            prop_assert_eq!(check_number(&n), reference::check_number_by_string(&n));
            // The count it returns sizes the number as `number_size` does.
            if let Ok(significant) = check_number(&n) {
                prop_assert_eq!(size::size_of_significant(significant), size::number_size(&n));
            }
            let odd = format!("{n}{junk}");
            prop_assert_eq!(check_number(&odd), reference::check_number_by_string(&odd));
        }
    }

    #[test]
    fn large_objects_index_their_names_like_small_ones_scan_them() {
        let now = at("2026-11-22T05:00:00Z");
        let r = router(|_| {});
        // Past DUPS_SCAN_MAX members, at the top level and nested, with a
        // duplicate first, in the middle and last.
        let names: Vec<String> = (0..DUPS_SCAN_MAX * 2)
            .map(|i| format!("k{}", i % 50))
            .collect();
        let obj: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, k)| format!(r#""{k}":{i}"#))
            .collect();
        let obj = obj.join(",");
        let nested = format!(r#"{{"deviceId":"d","timestamp":1795323600,"m":{{{obj}}}}}"#);
        check_against_reference(&r, nested.as_bytes(), now).unwrap();
        let routed = r.route(nested.as_bytes(), &origin(), now).unwrap();
        let AttributeValue::M(m) = &routed.item.to_item().unwrap()["m"] else {
            panic!()
        };
        assert_eq!(m.len(), 50);
        assert_eq!(m["k0"], AttributeValue::N("50".into()));
        let top = format!(r#"{{"deviceId":"d","timestamp":1795323600,{obj}}}"#);
        let e = r.route(top.as_bytes(), &origin(), now).unwrap_err();
        assert!(
            e.to_string().contains("`k0`") && e.to_string().contains("reserved"),
            "{e}"
        );
        check_against_reference(&r, top.as_bytes(), now).unwrap();
        let distinct: Vec<String> = (0..DUPS_SCAN_MAX * 2)
            .map(|i| format!(r#""k{i}":"v""#))
            .collect();
        let top = format!(
            r#"{{"deviceId":"d","timestamp":1795323600,{}}}"#,
            distinct.join(",")
        );
        check_against_reference(&r, top.as_bytes(), now).unwrap();
    }

    #[test]
    fn item_json_is_valid_and_keeps_escaped_strings() {
        let r = router(|_| {});
        let rec = r#"{"deviceId":"d\"1","timestamp":1795323600,"eventId":"e\\1","s":"a\"b\\c\nd\u00e9\u0001\/\ud83d\ude00","plain":"héllo €","k\"ey\n":{"x\ty":["\u0041",""]}}"#;
        let routed = r
            .route(rec.as_bytes(), &origin(), at("2026-11-22T05:00:00Z"))
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(routed.item.json()).unwrap();
        assert_eq!(v["s"]["S"], "a\"b\\c\nd\u{e9}\u{1}/\u{1f600}");
        assert_eq!(v["plain"]["S"], "héllo €");
        assert_eq!(v["entity_id"]["S"], "d\"1");
        assert_eq!(v["pk"]["S"], "d\"1");
        assert_eq!(v["event_id"]["S"], "e\\1");
        assert_eq!(v["k\"ey\n"]["M"]["x\ty"]["L"][0]["S"], "A");
        assert_eq!(v["k\"ey\n"]["M"]["x\ty"]["L"][1]["S"], "");
        // Verbatim copy of unescaped text, escapes re-encoded.
        let json = std::str::from_utf8(routed.item.json()).unwrap();
        assert!(json.contains(r#""plain":{"S":"héllo €"}"#), "{json}");
        assert!(
            json.contains(r#""s":{"S":"a\"b\\c\ndé\u0001/😀"}"#),
            "{json}"
        );
        check_against_reference(&r, rec.as_bytes(), at("2026-11-22T05:00:00Z")).unwrap();
        // Sizes count the decoded strings: "a\"b\\c\nd" is 7 bytes, é 2, \u0001 1, / 1, 😀 4.
        let item = routed.item.to_item().unwrap();
        assert_eq!(size::value_size(&item["s"]), 15);
        assert_eq!(routed.item.size(), size::item_size(&item));
    }

    /// The item of one record, as a map, routed at a fixed `now`.
    fn item_of(r: &Router, rec: &str) -> Result<crate::size::Item, RouteError> {
        r.route(rec.as_bytes(), &origin(), at("2025-11-22T06:00:00Z"))
            .map(|routed| routed.item.to_item().unwrap())
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.into())
    }

    #[test]
    fn composite_entities_array_paths_and_zoned_times() {
        let r = router(|c| {
            c.event.entity_fields = vec!["tenant".into(), "device.id".into()];
            c.event.timestamp_field = "at".into();
            c.event.timestamp_format = "%Y-%m-%d %H:%M:%S".parse().unwrap();
            c.event.timezone = Some("Europe/Paris".into());
            c.event.event_id_field = Some("items[1].id".into());
        });
        let item = item_of(
            &r,
            r#"{"tenant":"acme","device":{"id":7,"fw":"1.2"},"at":"2025-11-22 05:00:00","items":[{"id":"a"},{"id":"b"}]}"#,
        )
        .unwrap();
        assert_eq!(item["entity_id"], s("acme:7"));
        // 05:00 in Paris (UTC+1 in November) is 04:00Z.
        assert_eq!(item["ts"], s("2025-11-22T04:00:00.000Z"));
        assert_eq!(item["event_id"], s("b"));
        // The parts of the entity are taken out; an indexed path is only read.
        assert!(!item.contains_key("tenant"));
        let AttributeValue::M(device) = &item["device"] else {
            panic!("{item:?}")
        };
        assert_eq!(device.keys().collect::<Vec<_>>(), ["fw"]);
        let AttributeValue::L(items) = &item["items"] else {
            panic!()
        };
        assert_eq!(items.len(), 2);
        // A missing part names itself.
        let e = item_of(&r, r#"{"tenant":"acme","at":"2025-11-22 05:00:00"}"#).unwrap_err();
        assert!(e.to_string().contains("`device.id`"), "{e}");
        assert_eq!(e.reason(), Reason::MissingField);
    }

    #[test]
    fn epoch_micros_nanos_and_auto_magnitudes() {
        let ts = |format: &str, v: &str| {
            let r = router(|c| c.event.timestamp_format = format.parse().unwrap());
            item_of(&r, &format!(r#"{{"deviceId":"d","timestamp":{v}}}"#))
                .map(|i| i["ts_ms"].clone())
        };
        let want = n("1763787600123");
        assert_eq!(ts("epoch_micros", "1763787600123456").unwrap(), want);
        assert_eq!(ts("epoch_nanos", "1763787600123456789").unwrap(), want);
        assert_eq!(ts("epoch_nanos", r#""1763787600123456789""#).unwrap(), want);
        // `auto` tells the unit by magnitude.
        assert_eq!(ts("auto", "1763787600123456").unwrap(), want);
        assert_eq!(ts("auto", "1763787600123456789").unwrap(), want);
        assert_eq!(ts("auto", "1763787600123").unwrap(), want);
        assert_eq!(ts("auto", "1763787600.123").unwrap(), want);
        // A zone-less time is refused by `auto` without a zone...
        let e = ts("auto", r#""2025-11-22 05:00:00""#).unwrap_err();
        assert_eq!(e.reason(), Reason::BadTimestamp);
        // ...and read in the zone with one.
        let r = router(|c| c.event.timezone = Some("+01:00".into()));
        let item = item_of(
            &r,
            r#"{"deviceId":"d","timestamp":"2025-11-22 05:00:00.5"}"#,
        )
        .unwrap();
        assert_eq!(item["ts"], s("2025-11-22T04:00:00.500Z"));
        // Offsets in the text still count.
        let item = item_of(&r, r#"{"deviceId":"d","timestamp":"2025-11-22T05:00:00Z"}"#).unwrap();
        assert_eq!(item["ts"], s("2025-11-22T05:00:00.000Z"));
        // A pattern that does not match dead-letters with the pattern named.
        let e = ts("%d/%m/%Y %H:%M", r#""2025-11-22 05:00""#).unwrap_err();
        assert!(e.to_string().contains("%d/%m/%Y"), "{e}");
        assert_eq!(
            ts("%d/%m/%Y %H:%M", r#""22/11/2025 05:00""#).unwrap(),
            n("1763787600000")
        );
    }

    #[test]
    fn rename_include_exclude_and_types() {
        let r = router(|c| {
            c.event.rename = [
                ("user.name".to_owned(), "user_name".to_owned()),
                ("items[0].sku".to_owned(), "first_sku".to_owned()),
                ("n".to_owned(), "count".to_owned()),
            ]
            .into();
            c.event.include = Some(
                [
                    "user_name",
                    "first_sku",
                    "count",
                    "price",
                    "code",
                    "ok",
                    "flag",
                    "user",
                ]
                .map(str::to_owned)
                .to_vec(),
            );
            c.event.types = [
                ("count".to_owned(), FieldType::Number),
                ("price".to_owned(), FieldType::Number),
                ("code".to_owned(), FieldType::String),
                ("ok".to_owned(), FieldType::Bool),
                ("flag".to_owned(), FieldType::Bool),
            ]
            .into();
        });
        let item = item_of(
            &r,
            r#"{"deviceId":"d","timestamp":1763787600,"user":{"name":"ann","id":1},"items":[{"sku":"x1"}],
                "n":"12","price":"123456789012345678901234567890.5","code":404,"ok":"TRUE","flag":0,
                "debug":"dropped","count":"replaced by the rename"}"#,
        );
        let item = item.unwrap();
        assert_eq!(item["user_name"], s("ann"));
        assert_eq!(item["first_sku"], s("x1"));
        assert_eq!(item["count"], n("12"));
        assert_eq!(item["price"], n("123456789012345678901234567890.5"));
        assert_eq!(item["code"], s("404"));
        assert_eq!(item["ok"], AttributeValue::Bool(true));
        assert_eq!(item["flag"], AttributeValue::Bool(false));
        // `user` lost its renamed member; `items` and `debug` are not included.
        let AttributeValue::M(user) = &item["user"] else {
            panic!()
        };
        assert_eq!(user.keys().collect::<Vec<_>>(), ["id"]);
        assert!(
            !item.contains_key("items") && !item.contains_key("debug") && !item.contains_key("n")
        );
        // A value that does not coerce dead-letters its event, naming it.
        let e = item_of(
            &r,
            r#"{"deviceId":"d","timestamp":1763787600,"price":"12 euros"}"#,
        )
        .unwrap_err();
        assert_eq!(e.reason(), Reason::InvalidField);
        assert!(e.to_string().contains("`price`"), "{e}");
        let e = item_of(
            &r,
            r#"{"deviceId":"d","timestamp":1763787600,"ok":{"a":1}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("`ok`"), "{e}");
        // Exclude alone keeps everything else.
        let r = router(|c| c.event.exclude = vec!["debug".into()]);
        let item = item_of(
            &r,
            r#"{"deviceId":"d","timestamp":1763787600,"debug":1,"v":2}"#,
        )
        .unwrap();
        assert!(!item.contains_key("debug"));
        assert_eq!(item["v"], n("2"));
    }

    #[test]
    fn clashing_fields_are_prefixed_or_refused() {
        let r = router(|c| c.ttl_attribute = Some("ttl".into()));
        let item = item_of(
            &r,
            r#"{"deviceId":"d","timestamp":1763787600,"ts":"x","ts_ms":1,"entity_id":"e","pk":2,"ttl":3,"payload_ts":"own"}"#,
        )
        .unwrap();
        assert_eq!(item["payload_ts_ms"], n("1"));
        assert_eq!(item["payload_entity_id"], s("e"));
        assert_eq!(item["payload_pk"], n("2"));
        assert_eq!(item["payload_ttl"], n("3"));
        // `payload_ts` is the payload's own: the clashing `ts` goes further.
        assert_eq!(item["payload_ts"], s("own"));
        assert_eq!(item["payload_payload_ts"], s("x"));
        assert_eq!(item["ts"], s("2025-11-22T05:00:00.000Z"));
        let r = router(|c| {
            c.event.on_clash = ClashPolicy::Refuse;
        });
        let e = item_of(&r, r#"{"deviceId":"d","timestamp":1763787600,"ts_ms":1}"#).unwrap_err();
        assert!(e.to_string().contains("`ts_ms`"), "{e}");
        assert_eq!(e.reason(), Reason::InvalidField);
    }

    #[test]
    fn inner_events_get_their_own_derived_ids() {
        let r = router(|_| {});
        let now = at("2025-11-22T06:00:00Z");
        let rec = br#"{"deviceId":"d","timestamp":1763787600}"#;
        let id = |inner| {
            let (routed, _) = r
                .route_inner(rec, &origin(), inner, now, &mut RouteCache::default())
                .unwrap();
            routed.item.to_item().unwrap()["event_id"].clone()
        };
        assert_eq!(
            id(0),
            s(&origin().derived_event_id()),
            "the first keeps the record's id"
        );
        assert_eq!(id(1), s(&format!("{}/1", origin().derived_event_id())));
        assert_eq!(id(7), id(7), "stable across replays");
        assert_ne!(id(1), id(2));
    }

    /// Every mapping error is refused when the router is built, naming the
    /// key to fix.
    #[test]
    fn mapping_errors_name_their_key() {
        type Change = Box<dyn Fn(&mut RouterConfig)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|c| c.event.entity_fields = vec!["a".into(), String::new()]),
                "entity_fields",
            ),
            (
                Box::new(|c| {
                    c.event.entity_fields = vec!["a".into()];
                    c.event.entity_field = "b".into();
                }),
                "entity_fields",
            ),
            (
                Box::new(|c| {
                    c.event.entity_fields = vec!["a".into(), "b".into()];
                    c.event.entity_separator = String::new();
                }),
                "entity_separator",
            ),
            (
                Box::new(|c| {
                    c.event.entity_fields = vec!["a".into(), "b".into()];
                    c.event.entity_separator = "#".into();
                    c.key = KeyStrategy::TimeBucket {
                        shards: 2,
                        bucket: crate::strategy::Bucket::Day,
                    };
                }),
                "event.entity_separator",
            ),
            (
                Box::new(|c| c.event.entity_field = "items[x].id".into()),
                "entity_field",
            ),
            (
                Box::new(|c| c.event.timestamp_field = "[0]".into()),
                "timestamp_field",
            ),
            (
                Box::new(|c| c.event.event_id_field = Some("a[1".into())),
                "event_id_field",
            ),
            (
                Box::new(|c| c.event.timestamp_format = "%H:%M".parse().unwrap()),
                "timestamp_format",
            ),
            (
                Box::new(|c| c.event.timezone = Some("Atlantis/Capital".into())),
                "timezone",
            ),
            (
                Box::new(|c| {
                    c.event.timestamp_format = TimestampFormat::EpochMicros;
                    c.event.timezone = Some("UTC".into());
                }),
                "timezone",
            ),
            (
                Box::new(|c| c.event.rename = [("a".into(), String::new())].into()),
                "rename",
            ),
            (
                Box::new(|c| {
                    c.event.rename = [("a".into(), "x".into()), ("b".into(), "x".into())].into()
                }),
                "rename",
            ),
            (
                Box::new(|c| c.event.rename = [("deviceId".into(), "x".into())].into()),
                "rename",
            ),
            (
                Box::new(|c| c.event.rename = [("a".into(), "ts".into())].into()),
                "event.rename",
            ),
            (
                Box::new(|c| {
                    c.event.rename = [("a".into(), "x".into())].into();
                    c.event.include = Some(vec!["y".into()]);
                }),
                "rename",
            ),
            (
                Box::new(|c| c.event.include = Some(vec![String::new()])),
                "include",
            ),
            (
                Box::new(|c| {
                    c.event.include = Some(vec!["a".into()]);
                    c.event.exclude = vec!["a".into()];
                }),
                "exclude",
            ),
            (
                Box::new(|c| {
                    c.event.exclude = vec!["a".into()];
                    c.event.types = [("a".into(), FieldType::Number)].into();
                }),
                "types",
            ),
            (
                Box::new(|c| c.event.clash_prefix = String::new()),
                "clash_prefix",
            ),
            // One field in two roles names the later role's key.
            (
                Box::new(|c| c.event.timestamp_field = "deviceId".into()),
                "timestamp_field",
            ),
            (
                Box::new(|c| c.event.event_id_field = Some("timestamp".into())),
                "event_id_field",
            ),
            (
                Box::new(|c| c.event.entity_fields = vec!["a".into(), "a".into()]),
                "entity_fields",
            ),
            (
                Box::new(|c| c.event.timestamp_format = "%Y-%m-%d %Q".parse().unwrap()),
                "timestamp_format",
            ),
        ];
        for (i, (f, key)) in cases.iter().enumerate() {
            let mut c = RouterConfig::with_prefix("tm");
            f(&mut c);
            let err = Router::new(c).unwrap_err();
            let named = match &err {
                ConfigError::Event(e) => e.field,
                ConfigError::Invalid { key, .. } => key,
                ConfigError::Strategy(_) => "strategy",
            };
            assert_eq!(named, *key, "case {i}: {err}");
            assert_eq!(
                err.key_path(),
                format!("event.{}", key.trim_start_matches("event.")),
                "case {i}: {err}"
            );
            assert!(err.to_string().contains(key), "case {i}: {err}");
        }
        // Refusing instead of prefixing needs no prefix.
        let mut c = RouterConfig::with_prefix("tm");
        c.event.on_clash = ClashPolicy::Refuse;
        c.event.clash_prefix = String::new();
        assert!(Router::new(c).is_ok());
    }

    /// The stored attribute equals the JSON value it came from, numbers
    /// digit for digit (objects: last of repeated names).
    fn same_value(av: &AttributeValue, raw: &RawValue) -> bool {
        let text = raw.get().trim();
        match (raw::json_kind(raw), av) {
            ("number", AttributeValue::N(t)) => t == text,
            ("string", AttributeValue::S(t)) => *t == serde_json::from_str::<String>(text).unwrap(),
            ("boolean", AttributeValue::Bool(b)) => *b == (text == "true"),
            ("null", AttributeValue::Null(true)) => true,
            ("array", AttributeValue::L(items)) => {
                let elems: Vec<&RawValue> = serde_json::from_str(text).unwrap();
                elems.len() == items.len() && elems.iter().zip(items).all(|(e, a)| same_value(a, e))
            }
            ("object", AttributeValue::M(map)) => {
                let members = raw::open_object(raw).unwrap();
                let mut last: HashMap<String, &RawValue> = HashMap::new();
                for (k, v) in &members {
                    let Node::Raw(v) = v else { return false };
                    last.insert(k.to_string(), v);
                }
                last.len() == map.len()
                    && last
                        .iter()
                        .all(|(k, v)| map.get(k).is_some_and(|a| same_value(a, v)))
            }
            _ => false,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(384))]

        /// Any JSON object goes through an include-all mapping (every field
        /// listed in `include`) into the item unchanged: same fields, same
        /// values, every number with the producer's digits.
        #[test]
        fn include_all_mapping_round_trips_any_object(
            members in prop::collection::btree_map("f_[a-z0-9]{1,6}", json_value(), 0..8),
        ) {
            let body: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let rec = format!(
                r#"{{"deviceId":"d","timestamp":"2025-11-22T05:00:00Z"{}{}}}"#,
                if body.is_empty() { "" } else { "," },
                body.join(",")
            );
            let r = router(|c| c.event.include = Some(members.keys().cloned().collect()));
            let item = item_of(&r, &rec);
            // Values DynamoDB cannot hold (deep nesting, 39-digit numbers)
            // are dead-lettered, as without a mapping.
            prop_assume!(item.is_ok());
            let item = item.unwrap();
            prop_assert_eq!(item.len(), members.len() + 6);
            for (k, v) in &members {
                let raw: Box<RawValue> = serde_json::from_str(v).unwrap();
                prop_assert!(same_value(&item[k], &raw), "{} = {} stored as {:?}", k, v, item[k]);
            }
        }
    }
}
