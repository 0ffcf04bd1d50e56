//! Routing: record bytes to (table, key, item), or a dead-letter reason.
//!
//! This is the per-event hot path. The record is parsed once; payload values
//! go straight from their JSON text into the item's DynamoDB JSON
//! ([`WireItem`]), so numbers keep their exact digits, and no attribute map
//! is built: one buffer per item, its size summed while it is written.
//!
//! Files: `config` ([`RouterConfig`] and its checks), `error`
//! ([`RouteError`]), `item` (the item encoder, over
//! [`crate::wire`]'s payload encoder); this file holds the [`Router`] and
//! imports them, none imports it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};

use crate::event::Extractor;
use crate::key::ItemKey;
use crate::origin::{Origin, SharedStr};
use crate::period::{self, PeriodRef, TableNaming};
use crate::split::{self, SplitRegistry};
use crate::strategy::{KeyStrategy, MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES, ShardCache};
use crate::timefmt;
use crate::wire::WireItem;

mod config;
mod error;
mod item;
pub mod oversize;

pub use config::{ItemAttributes, RouterConfig, RouterConfigError};
pub use error::RouteError;
pub use oversize::{Offload, Oversize, OversizeS3};

use item::{ItemLayout, Prepared};

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
    /// For a pointer item (`oversize = "s3"`): the object the event's
    /// payload must be written to, and confirmed, before the item.
    pub offload: Option<Offload>,
}

/// What routing one event gives: its item under the key layout in force and,
/// while a shard migration is in progress (`migrate_from`), the same event's
/// item under the old layout, in the same table.
#[derive(Debug, Clone, PartialEq)]
pub struct Routes {
    /// The item under `key`, the layout in force.
    pub new: Routed,
    /// The item under `migrate_from`'s layout: `None` without a migration,
    /// and when both layouts give the same key (an event is written once
    /// per distinct key, never twice under one).
    pub old: Option<Routed>,
}

/// What routing remembers between events: the table name of the period
/// last routed, the key layouts of that table, and the shards of recent
/// entities. One per routing loop (it is not shared): see [`Router::route`].
#[derive(Debug, Default)]
pub struct RouteCache {
    last: Option<(PeriodRef, SharedStr)>,
    /// The last table's recorded layouts when they differ from the
    /// config's, with the [`TableLayouts`] generation they were read at.
    layouts: Option<(SharedStr, u64, Option<Layouts>)>,
    shards: ShardCache,
    /// The last table's learned splits, with the registry generation they
    /// were read at.
    splits: Option<(SharedStr, u64, Option<crate::split::Learned>)>,
    /// The shards under `migrate_from` (its own cache: one shared by two
    /// shard counts would start over at every event).
    old_shards: ShardCache,
}

/// The key layouts one table is written with: the one in force first, then
/// the one it is migrating from, if any.
type Layouts = Arc<[KeyStrategy]>;

/// The key layouts tables record (their `tidemark:layout` tags), where
/// they differ from the config's: a table whose period ended before a
/// shard-count migration stays in its old layout, and a late event for it
/// must be keyed with that layout, or `query` (which reads each table in
/// the layouts it records) would never find it. Shared by the routers of a
/// worker and refreshed while it runs; tables not named here are written
/// with the config's `key` (and `migrate_from`).
#[derive(Debug, Default)]
pub struct TableLayouts {
    /// The config's layouts (`key`, then `migrate_from`).
    config: Vec<KeyStrategy>,
    generation: AtomicU64,
    tables: RwLock<HashMap<String, Arc<[KeyStrategy]>>>,
}

impl TableLayouts {
    /// No table recorded yet; tables written with `config`'s layouts are
    /// not recorded.
    pub fn for_config(config: &RouterConfig) -> TableLayouts {
        TableLayouts {
            config: std::iter::once(config.key.clone())
                .chain(config.migrate_from.clone())
                .collect(),
            ..TableLayouts::default()
        }
    }

    /// Records that `table` is written with `layouts` (the one in force
    /// first, then the one it is migrating from, if any); a table written
    /// as the config says is forgotten instead.
    pub fn set(&self, table: &str, layouts: Vec<KeyStrategy>) {
        let as_config = layouts == self.config;
        let mut t = self.tables.write().unwrap_or_else(|e| e.into_inner());
        let changed = if as_config || layouts.is_empty() {
            t.remove(table).is_some()
        } else {
            let new: Arc<[KeyStrategy]> = layouts.into();
            t.insert(table.to_string(), new.clone()).as_ref() != Some(&new)
        };
        if changed {
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// The layouts `table` is written with, when not the config's.
    pub fn get(&self, table: &str) -> Option<Arc<[KeyStrategy]>> {
        let t = self.tables.read().unwrap_or_else(|e| e.into_inner());
        t.get(table).cloned()
    }

    /// Tables with layouts of their own.
    pub fn len(&self) -> usize {
        self.tables.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// No table has layouts of its own.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
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
    lifecycle: period::Lifecycle,
    skew_ms: i64,
    /// The attributes every item carries, ready to write.
    layout: ItemLayout,
    /// Tables recorded with other key layouts than the config's.
    table_layouts: Arc<TableLayouts>,
    /// The splits this worker learned (adaptive sharding).
    splits: Arc<SplitRegistry>,
}

impl Router {
    /// Validates the config; every error names the key to fix.
    pub fn new(config: RouterConfig) -> Result<Router, RouterConfigError> {
        let extractor = Extractor::new(config.event.clone())?;
        config.validate()?;
        Ok(Router {
            layout: ItemLayout::new(&config),
            extractor,
            naming: TableNaming {
                prefix: config.table_prefix.clone(),
                period: config.period,
            },
            lifecycle: config.lifecycle(),
            skew_ms: period::duration_ms(config.max_future_skew),
            table_layouts: Arc::new(TableLayouts::for_config(&config)),
            splits: Arc::new(SplitRegistry::new(config.adaptive_sharding.learn_delay)),
            config,
        })
    }

    /// Keys each table's events with the layouts `layouts` records for it
    /// (the config's for the tables it does not name).
    pub fn with_table_layouts(mut self, layouts: Arc<TableLayouts>) -> Router {
        self.table_layouts = layouts;
        self
    }

    /// Keys events of split entities by the splits `splits` learned
    /// (with `schema.adaptive_sharding.enabled`).
    pub fn with_splits(mut self, splits: Arc<SplitRegistry>) -> Router {
        self.splits = splits;
        self
    }

    /// The splits this router keys by.
    pub fn splits(&self) -> &Arc<SplitRegistry> {
        &self.splits
    }

    /// True when this router keys by learned splits: adaptive sharding on
    /// and a strategy that takes them.
    pub fn keys_by_splits(&self) -> bool {
        self.config.adaptive_sharding.enabled && self.config.key.takes_splits()
    }

    /// The table layouts this router keys by.
    pub fn table_layouts(&self) -> &Arc<TableLayouts> {
        &self.table_layouts
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

    /// True when writes to `table` (one of this config's period tables) are
    /// late at `now`: its period is past the late-arrival grace. `false`
    /// for a name that is not a period table of this config.
    pub fn takes_late_data(&self, table: &str, now: DateTime<Utc>) -> bool {
        self.naming
            .parse(table)
            .is_some_and(|p| self.lifecycle.takes_late_data(&p, now.timestamp_millis()))
    }

    /// Routes event `inner` of a record (0 for a record of one event; see
    /// [`crate::framing`] for records holding several), judged against `now`
    /// for expiry and future skew. An event without its own id gets one
    /// derived from the record's position and `inner`.
    ///
    /// `cache` remembers what the next events will likely need again: the
    /// table name when the event's period is the one it last named (a
    /// stream's events mostly are: one shared name instead of a new string
    /// per event), and entities' shards. A routing loop keeps one; a single
    /// event takes `&mut RouteCache::default()`.
    pub fn route(
        &self,
        data: &[u8],
        origin: &Origin,
        inner: u32,
        now: DateTime<Utc>,
        cache: &mut RouteCache,
    ) -> Result<Routes, RouteError> {
        let p = self.prepare(data, origin, inner, now, cache)?;
        let (item, offload) = self.layout.encode(&p, &p.key, data, &self.extractor)?;
        let from = match &p.layouts {
            Some(l) => l.get(1),
            None => self.config.migrate_from.as_ref(),
        };
        let old = match from {
            Some(from) => {
                let mut own = ShardCache::default();
                let shards = if p.layouts.is_none() {
                    &mut cache.old_shards
                } else {
                    &mut own
                };
                let key = from.key_with_iso(
                    &p.ev.entity_id,
                    p.ev.timestamp_ms,
                    &p.iso,
                    &p.ev.event_id,
                    shards,
                );
                if key == p.key {
                    None
                } else {
                    self.check_key(&key)?;
                    let (item, offload) = self.layout.encode(&p, &key, data, &self.extractor)?;
                    Some(Routed {
                        table: p.table.clone(),
                        key,
                        wcu: item.wcu(),
                        item,
                        timestamp_ms: p.ev.timestamp_ms,
                        offload,
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
            offload,
        };
        Ok(Routes { new, old })
    }

    /// The layouts `table` records when they are not the config's (looked
    /// up once per table and generation of the [`TableLayouts`]).
    fn table_keys(&self, table: &SharedStr, cache: &mut RouteCache) -> Option<Arc<[KeyStrategy]>> {
        let generation = self.table_layouts.generation();
        match &cache.layouts {
            Some((t, g, l)) if t == table && *g == generation => l.clone(),
            _ => {
                let l = self.table_layouts.get(table.as_str());
                cache.layouts = Some((table.clone(), generation, l.clone()));
                l
            }
        }
    }

    /// The fan-out of `entity` at `ts_ms` in `table` (the learned splits
    /// looked up once per table and registry generation).
    fn fan_out_of(
        &self,
        table: &SharedStr,
        entity: &str,
        ts_ms: i64,
        cache: &mut RouteCache,
    ) -> Result<u32, RouteError> {
        let generation = self.splits.generation();
        let learned = match &cache.splits {
            Some((t, g, l)) if t == table && *g == generation => l.clone(),
            _ => {
                let l = self.splits.get(table.as_str());
                cache.splits = Some((table.clone(), generation, l.clone()));
                l
            }
        };
        Ok(self
            .splits
            .fan_out(learned.as_ref(), table.as_str(), entity, ts_ms)?)
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
        // `{e}#x{k}` would read as entity `e`'s sub-key `k`, and the split
        // records' key is no entity's.
        if matches!(cfg.key, KeyStrategy::Entity)
            && (ev.entity_id == split::SPLITS_PK
                || (cfg.adaptive_sharding.enabled && split::entity_id_is_ambiguous(&ev.entity_id)))
        {
            return Err(RouteError::BadEntity {
                field: cfg.event.entity_label(),
                problem: "is `tidemark#splits` or ends in `#x` and digits: reserved for adaptive sharding's split records and sub-keys".into(),
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
        // Refused from `expiry_guard` before the table's expiry: a write
        // accepted later could land after its export or deletion.
        if self.lifecycle.refuses_writes(&period, now_ms) {
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
        // Keyed with the layout its table records (a table from before a
        // shard-count migration stays in its old one), else the config's.
        let layouts = self.table_keys(&table, cache);
        let key = match layouts.as_ref().and_then(|l| l.first()) {
            Some(strategy) => strategy.key_with_iso(
                &ev.entity_id,
                ts,
                &iso,
                &ev.event_id,
                &mut ShardCache::default(),
            ),
            None => {
                let base =
                    cfg.key
                        .key_with_iso(&ev.entity_id, ts, &iso, &ev.event_id, &mut cache.shards);
                // Adaptive sharding: a split entity's sub-key (a table with
                // a layout of its own is keyed by that layout alone).
                if self.keys_by_splits() {
                    let fan_out = self.fan_out_of(&table, &ev.entity_id, ts, cache)?;
                    split::split_key(base, &ev.event_id, fan_out)
                } else {
                    base
                }
            }
        };
        self.check_key(&key)?;
        Ok(Prepared {
            ev,
            table,
            key,
            iso,
            layouts,
        })
    }
}

#[cfg(test)]
mod tests;
