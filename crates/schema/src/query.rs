//! Query plans: which DynamoDB queries read back an entity's events.
//!
//! A plan for a time range lists every (table, partition key, sort-key
//! condition) that can hold an event of that entity in that range, and no
//! query whose partition cannot: one per table for `entity`, one per time
//! bucket per table for `time_bucket`, and one per suffix per table for the
//! suffix strategies (scatter-gather: the suffix depends on the event id,
//! which a reader does not know). Sort-key conditions are exact, so every
//! item returned is in range and no client-side filtering is needed.
//!
//! Each query returns items sorted by sort key, which within one partition
//! and entity is (timestamp, event id) order; [`merge_items`] k-way merges
//! those streams into one timeline.
//!
//! A table's split records (adaptive write sharding, [`crate::split`]) give
//! a split entity's sub-keys: the `_split` plans take each table's splits
//! and add, for that entity only, one query per sub-key and bucket from
//! the first time a split used the sub-key. A reader loads them first
//! ([`splits_query`] on each table of [`tables_of`]).
//!
//! Plans do not know which tables exist: a query on a missing (expired, or
//! never written) table should be treated as empty.

use aws_sdk_dynamodb::types::AttributeValue;
use itertools::Itertools;
use serde::Serialize;
use thiserror::Error;

use crate::period::TableNaming;
use crate::route::ItemAttributes;
use crate::size::Item;
use crate::split::{self, SPLITS_PK, TableSplits};
use crate::strategy::{KeyAttributes, KeyStrategy, ShardMigration, shard_of};
use crate::timefmt;

/// Largest plan built; a bigger one is an error (narrow the range, or use a
/// coarser bucket) rather than an accidental million-query read.
pub const MAX_PLANNED_QUERIES: usize = 100_000;

/// An inclusive range of event times, epoch milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct TimeRange {
    /// First millisecond included.
    pub start_ms: i64,
    /// Last millisecond included.
    pub end_ms: i64,
}

/// Condition on the sort key of a query.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum SortKeyCondition {
    /// `sk BETWEEN low AND high` (inclusive, byte-wise string order).
    Between {
        /// Lower bound.
        low: String,
        /// Upper bound.
        high: String,
    },
    /// `begins_with(sk, prefix)`.
    BeginsWith {
        /// The prefix.
        prefix: String,
    },
}

impl SortKeyCondition {
    /// True when a sort key value satisfies the condition (DynamoDB compares
    /// strings by UTF-8 bytes, as Rust's `str` ordering does).
    pub fn matches(&self, sk: &str) -> bool {
        match self {
            SortKeyCondition::Between { low, high } => low.as_str() <= sk && sk <= high.as_str(),
            SortKeyCondition::BeginsWith { prefix } => sk.starts_with(prefix.as_str()),
        }
    }
}

/// One DynamoDB Query.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PlannedQuery {
    /// Table to query.
    pub table: String,
    /// Partition key value.
    pub pk: String,
    /// Sort key condition; `None` reads the whole partition.
    pub sk_condition: Option<SortKeyCondition>,
    /// `ScanIndexForward`: true for oldest first.
    pub scan_forward: bool,
    /// `Limit`, if any.
    pub limit: Option<i32>,
}

/// A query's `KeyConditionExpression` with its placeholders filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyCondition {
    /// The expression, e.g. `#pk = :pk AND #sk BETWEEN :lo AND :hi`.
    pub expression: String,
    /// `ExpressionAttributeNames`.
    pub names: Vec<(String, String)>,
    /// `ExpressionAttributeValues` (all strings).
    pub values: Vec<(String, AttributeValue)>,
}

impl PlannedQuery {
    /// The key condition for the SDK's Query builder.
    pub fn key_condition(&self, attrs: &KeyAttributes) -> KeyCondition {
        let mut names = vec![("#pk".to_owned(), attrs.pk.clone())];
        let mut values = vec![(":pk".to_owned(), AttributeValue::S(self.pk.clone()))];
        let mut expression = "#pk = :pk".to_owned();
        match &self.sk_condition {
            None => {}
            Some(SortKeyCondition::Between { low, high }) => {
                names.push(("#sk".to_owned(), attrs.sk.clone()));
                values.push((":lo".to_owned(), AttributeValue::S(low.clone())));
                values.push((":hi".to_owned(), AttributeValue::S(high.clone())));
                expression.push_str(" AND #sk BETWEEN :lo AND :hi");
            }
            Some(SortKeyCondition::BeginsWith { prefix }) => {
                names.push(("#sk".to_owned(), attrs.sk.clone()));
                values.push((":prefix".to_owned(), AttributeValue::S(prefix.clone())));
                expression.push_str(" AND begins_with(#sk, :prefix)");
            }
        }
        KeyCondition {
            expression,
            names,
            values,
        }
    }

    /// True when an item with this table and key would be returned (ignoring
    /// `limit`). Used by tests and by callers that simulate a store.
    pub fn matches(&self, table: &str, pk: &str, sk: &str) -> bool {
        self.table == table
            && self.pk == pk
            && self.sk_condition.as_ref().is_none_or(|c| c.matches(sk))
    }
}

/// Queries that together return every event of an entity in a range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueryPlan {
    /// The queries, oldest table first; run them in any order or in parallel.
    pub queries: Vec<PlannedQuery>,
}

/// Newest-first search for an entity's latest event: run the steps in order,
/// each step's queries together, and stop at the first step that returns an
/// item; the newest item of that step is the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LatestPlan {
    /// Steps, newest first. Every query is descending with limit 1.
    pub steps: Vec<Vec<PlannedQuery>>,
}

/// A plan that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QueryError {
    /// The range ends before it starts.
    #[error("time range ends ({end_ms}) before it starts ({start_ms})")]
    EmptyRange {
        /// Range start.
        start_ms: i64,
        /// Range end.
        end_ms: i64,
    },
    /// The entity id can never have been written.
    #[error(
        "entity id {0:?} cannot have been written with this strategy (empty, or contains `#` under time_bucket)"
    )]
    BadEntity(String),
    /// The plan would exceed [`MAX_PLANNED_QUERIES`].
    #[error("the plan needs more than {MAX_PLANNED_QUERIES} queries: narrow the range")]
    TooManyQueries,
}

/// `(table, low, high)` pieces of the range, one per table, oldest first.
fn table_slices(
    naming: &TableNaming,
    range: TimeRange,
) -> Result<Vec<(String, i64, i64)>, QueryError> {
    if range.end_ms < range.start_ms {
        return Err(QueryError::EmptyRange {
            start_ms: range.start_ms,
            end_ms: range.end_ms,
        });
    }
    // Nothing outside the accepted range was ever written.
    let lo = range.start_ms.max(timefmt::MIN_TIMESTAMP_MS);
    let hi = range.end_ms.min(timefmt::END_TIMESTAMP_MS - 1);
    let mut out = Vec::new();
    if lo > hi {
        return Ok(out);
    }
    let mut p = naming.period.containing(lo);
    while p.start_ms <= hi {
        out.push((
            naming.name_of(&p),
            lo.max(p.start_ms),
            hi.min(p.end_ms() - 1),
        ));
        if out.len() > MAX_PLANNED_QUERIES {
            return Err(QueryError::TooManyQueries);
        }
        p = p.next();
    }
    Ok(out)
}

/// Sort-key bounds that hold exactly the events with timestamps in
/// `[lo, hi]`: `{prefix}{iso(lo)}#` up to `{prefix}{iso(hi)}$`. `$` is the
/// byte after `#`, so the upper bound is above every `{iso(hi)}#{event id}`
/// and below the next millisecond's keys.
fn between(prefix: &str, lo: i64, hi: i64) -> SortKeyCondition {
    let mut low = String::with_capacity(prefix.len() + 25);
    low.push_str(prefix);
    timefmt::push_iso_millis(&mut low, lo);
    low.push('#');
    let mut high = String::with_capacity(prefix.len() + 25);
    high.push_str(prefix);
    timefmt::push_iso_millis(&mut high, hi);
    high.push('$');
    SortKeyCondition::Between { low, high }
}

fn check_entity(strategy: &KeyStrategy, entity_id: &str) -> Result<(), QueryError> {
    if entity_id.is_empty() || (strategy.forbids_hash_in_entity() && entity_id.contains('#')) {
        return Err(QueryError::BadEntity(entity_id.to_owned()));
    }
    Ok(())
}

/// Queries for one table slice, in groups that hold the same time span
/// (one group per table for `entity` and the suffix strategies, one per
/// bucket for `time_bucket`), groups oldest first. A split entity's group
/// also holds its sub-keys, each from the first time a split used it.
#[allow(clippy::too_many_arguments)]
fn slice_queries(
    strategy: &KeyStrategy,
    splits: &TableSplits,
    entity_id: &str,
    table: &str,
    lo: i64,
    hi: i64,
    scan_forward: bool,
    limit: Option<i32>,
) -> Vec<Vec<PlannedQuery>> {
    let q = |pk: String, cond: SortKeyCondition| PlannedQuery {
        table: table.to_owned(),
        pk,
        sk_condition: Some(cond),
        scan_forward,
        limit,
    };
    // Sub-keys 1.. of a split entity, each with the first time it may hold.
    let subs: Vec<(u32, i64)> = if strategy.takes_splits() {
        (1..splits.max_fan_out(entity_id))
            .filter_map(|k| splits.sub_key_from(entity_id, k).map(|from| (k, from)))
            .collect()
    } else {
        Vec::new()
    };
    // The base key's query, then each sub-key's that can hold events in
    // [a, z].
    let group = |base: String, prefix: &str, a: i64, z: i64| -> Vec<PlannedQuery> {
        let mut out = Vec::with_capacity(1 + subs.len());
        for &(k, from) in &subs {
            if from <= z {
                out.push(q(split::sub_key(&base, k), between(prefix, a.max(from), z)));
            }
        }
        out.insert(0, q(base, between(prefix, a, z)));
        out
    };
    match *strategy {
        KeyStrategy::Entity => vec![group(entity_id.to_owned(), "", lo, hi)],
        KeyStrategy::RandomSuffix { shards } | KeyStrategy::CalculatedSuffix { shards } => {
            vec![
                (0..shards)
                    .map(|k| q(format!("{entity_id}#{k}"), between("", lo, hi)))
                    .collect(),
            ]
        }
        KeyStrategy::TimeBucket { shards, bucket } => {
            let shard = shard_of(entity_id, shards);
            let prefix = format!("{entity_id}#");
            let mut out = Vec::new();
            let mut b = bucket.start_of(lo);
            while b <= hi {
                let (a, z) = (lo.max(b), hi.min(b + bucket.len_ms() - 1));
                let mut pk = format!("{shard}#");
                bucket.push_label(&mut pk, b);
                out.push(group(pk, &prefix, a, z));
                b += bucket.len_ms();
            }
            out
        }
    }
}

/// The period tables a range touches, oldest first: the tables whose
/// splits a reader loads (see [`splits_query`]) before planning.
pub fn tables_of(naming: &TableNaming, range: TimeRange) -> Result<Vec<String>, QueryError> {
    Ok(table_slices(naming, range)?
        .into_iter()
        .map(|(t, _, _)| t)
        .collect())
}

/// The query that reads `entity_id`'s split records in `table` (strongly
/// consistent reads are the caller's to ask for). It may also return
/// records of entities whose id starts with `{entity_id}#`: keep those
/// whose [`Split::entity`](crate::split::Split) is the entity.
pub fn splits_query(table: &str, entity_id: &str) -> PlannedQuery {
    PlannedQuery {
        table: table.to_owned(),
        pk: SPLITS_PK.to_owned(),
        sk_condition: Some(SortKeyCondition::BeginsWith {
            prefix: format!("{entity_id}#"),
        }),
        scan_forward: true,
        limit: None,
    }
}

/// The queries that return exactly the events of `entity_id` with
/// timestamps in `range`, in tables without splits.
pub fn plan_range(
    strategy: &KeyStrategy,
    naming: &TableNaming,
    entity_id: &str,
    range: TimeRange,
) -> Result<QueryPlan, QueryError> {
    plan_range_split(strategy, naming, entity_id, range, &no_splits)
}

/// No table has splits.
fn no_splits(_: &str) -> Option<&'static TableSplits> {
    None
}

/// As [`plan_range`], where `splits` gives each table's recorded splits
/// (`None`: none): a split entity's plan adds its sub-keys, each only from
/// the first time a split used it; other entities' plans are unchanged.
pub fn plan_range_split<'s>(
    strategy: &KeyStrategy,
    naming: &TableNaming,
    entity_id: &str,
    range: TimeRange,
    splits: &dyn Fn(&str) -> Option<&'s TableSplits>,
) -> Result<QueryPlan, QueryError> {
    check_entity(strategy, entity_id)?;
    let none = TableSplits::default();
    let mut queries = Vec::new();
    for (table, lo, hi) in table_slices(naming, range)? {
        let s = splits(&table).unwrap_or(&none);
        queries.extend(
            slice_queries(strategy, s, entity_id, &table, lo, hi, true, None)
                .into_iter()
                .flatten(),
        );
        if queries.len() > MAX_PLANNED_QUERIES {
            return Err(QueryError::TooManyQueries);
        }
    }
    Ok(QueryPlan { queries })
}

/// During a shard migration: the queries of both layouts (new first),
/// without duplicates. Events written twice come back twice; [`merge_items`]
/// drops the copies.
pub fn plan_range_migration(
    migration: &ShardMigration,
    naming: &TableNaming,
    entity_id: &str,
    range: TimeRange,
) -> Result<QueryPlan, QueryError> {
    let mut queries: Vec<PlannedQuery> = Vec::new();
    for s in migration.read_strategies() {
        queries.extend(plan_range(s, naming, entity_id, range)?.queries);
    }
    let queries = queries.into_iter().unique().collect();
    Ok(QueryPlan { queries })
}

/// The newest-first search for the latest event of `entity_id` in `range`
/// (seed 004: descending, limit 1, stop at the first hit).
pub fn plan_latest(
    strategy: &KeyStrategy,
    naming: &TableNaming,
    entity_id: &str,
    range: TimeRange,
) -> Result<LatestPlan, QueryError> {
    plan_latest_split(strategy, naming, entity_id, range, &no_splits)
}

/// As [`plan_latest`], with each table's splits (see [`plan_range_split`]):
/// a split entity's step queries its sub-keys with its base key, and the
/// newest item of the step is the answer.
pub fn plan_latest_split<'s>(
    strategy: &KeyStrategy,
    naming: &TableNaming,
    entity_id: &str,
    range: TimeRange,
    splits: &dyn Fn(&str) -> Option<&'s TableSplits>,
) -> Result<LatestPlan, QueryError> {
    check_entity(strategy, entity_id)?;
    let none = TableSplits::default();
    let mut steps = Vec::new();
    let mut total = 0usize;
    for (table, lo, hi) in table_slices(naming, range)?.into_iter().rev() {
        let s = splits(&table).unwrap_or(&none);
        // Each group is one time span (a table, or a bucket): newest first,
        // one step each; the queries of a group split one span's events
        // over partitions, so the newest is the newest of all of them.
        let groups = slice_queries(strategy, s, entity_id, &table, lo, hi, false, Some(1));
        total += groups.iter().map(Vec::len).sum::<usize>();
        if total > MAX_PLANNED_QUERIES {
            return Err(QueryError::TooManyQueries);
        }
        steps.extend(groups.into_iter().rev());
    }
    Ok(LatestPlan { steps })
}

/// The order of items in a timeline: (timestamp ms, entity id, event id).
/// Items without the attributes sort first (they are not ours).
pub fn item_order_key(item: &Item, attrs: &ItemAttributes) -> (i64, String, String) {
    let s = |name: &str| match item.get(name) {
        Some(AttributeValue::S(v)) => v.clone(),
        _ => String::new(),
    };
    let ts = match item.get(&attrs.timestamp_ms) {
        Some(AttributeValue::N(n)) => n.parse().unwrap_or(i64::MIN),
        _ => i64::MIN,
    };
    (ts, s(&attrs.entity), s(&attrs.event_id))
}

/// K-way merge of streams that are each sorted by `key`, ascending.
pub(crate) fn merge_sorted<T, K, S, F>(
    streams: impl IntoIterator<Item = S>,
    key: F,
) -> impl Iterator<Item = T>
where
    S: IntoIterator<Item = T>,
    K: Ord,
    F: Fn(&T) -> K,
{
    streams.into_iter().kmerge_by(move |a, b| key(a) < key(b))
}

/// Merges the (sort-key ordered) results of a plan's queries into one
/// timeline, oldest first, dropping duplicate copies of the same event (as a
/// shard migration's dual writes produce).
pub fn merge_items<S>(
    results: impl IntoIterator<Item = S>,
    attrs: &ItemAttributes,
) -> impl Iterator<Item = Item>
where
    S: IntoIterator<Item = Item>,
{
    let keyed = results.into_iter().map(|s| {
        s.into_iter()
            .map(|i| (item_order_key(&i, attrs), i))
            .collect::<Vec<_>>()
    });
    merge_sorted(keyed, |(k, _): &((i64, String, String), Item)| k.clone())
        .dedup_by(|a, b| a.0 == b.0)
        .map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::period::Period;
    use crate::strategy::Bucket;

    fn naming(period: Period) -> TableNaming {
        TableNaming {
            prefix: "tm".into(),
            period,
        }
    }

    fn ms(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    fn range(a: &str, b: &str) -> TimeRange {
        TimeRange {
            start_ms: ms(a),
            end_ms: ms(b),
        }
    }

    #[test]
    fn entity_plan_is_one_query_per_table_with_exact_bounds() {
        let plan = plan_range(
            &KeyStrategy::Entity,
            &naming(Period::Day),
            "d",
            range("2026-11-21T22:00:00Z", "2026-11-23T01:00:00Z"),
        )
        .unwrap();
        let tables: Vec<_> = plan.queries.iter().map(|q| q.table.as_str()).collect();
        assert_eq!(tables, ["tm_2026-11-21", "tm_2026-11-22", "tm_2026-11-23"]);
        assert_eq!(
            plan.queries[0].sk_condition,
            Some(SortKeyCondition::Between {
                low: "2026-11-21T22:00:00.000Z#".into(),
                high: "2026-11-21T23:59:59.999Z$".into()
            })
        );
        let c = plan.queries[0].sk_condition.as_ref().unwrap();
        assert!(c.matches("2026-11-21T23:59:59.999Z#any-event-id"));
        assert!(c.matches("2026-11-21T22:00:00.000Z#"));
        assert!(!c.matches("2026-11-21T21:59:59.999Z#zzz"));
        let kc = plan.queries[1].key_condition(&KeyAttributes::default());
        assert_eq!(kc.expression, "#pk = :pk AND #sk BETWEEN :lo AND :hi");
        assert_eq!(kc.names[1], ("#sk".to_owned(), "sk".to_owned()));
    }

    #[test]
    fn time_bucket_plan_is_one_query_per_bucket_and_suffix_plans_scatter() {
        let tb = KeyStrategy::TimeBucket {
            shards: 16,
            bucket: Bucket::Hour,
        };
        let plan = plan_range(
            &tb,
            &naming(Period::Day),
            "sensor-alpha-001",
            range("2023-10-27T13:30:00Z", "2023-10-27T15:10:00Z"),
        )
        .unwrap();
        let s = shard_of("sensor-alpha-001", 16);
        let pks: Vec<_> = plan.queries.iter().map(|q| q.pk.clone()).collect();
        assert_eq!(
            pks,
            ["13", "14", "15"].map(|h| format!("{s}#2023-10-27T{h}"))
        );
        let cs = KeyStrategy::CalculatedSuffix { shards: 4 };
        let plan = plan_range(
            &cs,
            &naming(Period::Hour),
            "d",
            range("2023-10-27T13:30:00Z", "2023-10-27T14:10:00Z"),
        )
        .unwrap();
        assert_eq!(plan.queries.len(), 2 * 4);
        assert!(
            plan_range(
                &tb,
                &naming(Period::Day),
                "a#b",
                range("2023-10-27T13:30:00Z", "2023-10-27T15:10:00Z")
            )
            .is_err()
        );
        assert!(matches!(
            plan_range(
                &tb,
                &naming(Period::Day),
                "d",
                range("2023-10-27T13:30:00Z", "2023-10-27T13:00:00Z")
            ),
            Err(QueryError::EmptyRange { .. })
        ));
        let minute = KeyStrategy::TimeBucket {
            shards: 1,
            bucket: Bucket::Minute,
        };
        assert_eq!(
            plan_range(
                &minute,
                &naming(Period::Quarter),
                "d",
                range("2020-01-01T00:00:00Z", "2023-01-01T00:00:00Z")
            ),
            Err(QueryError::TooManyQueries)
        );
    }

    #[test]
    fn latest_plan_walks_newest_first() {
        let r = range("2026-11-20T12:00:00Z", "2026-11-22T05:00:00Z");
        let p = plan_latest(&KeyStrategy::Entity, &naming(Period::Day), "d", r).unwrap();
        let tables: Vec<_> = p.steps.iter().map(|s| s[0].table.as_str()).collect();
        assert_eq!(tables, ["tm_2026-11-22", "tm_2026-11-21", "tm_2026-11-20"]);
        assert!(
            p.steps
                .iter()
                .flatten()
                .all(|q| !q.scan_forward && q.limit == Some(1))
        );
        let p = plan_latest(
            &KeyStrategy::RandomSuffix { shards: 3 },
            &naming(Period::Day),
            "d",
            r,
        )
        .unwrap();
        assert_eq!(p.steps.len(), 3);
        assert!(p.steps.iter().all(|s| s.len() == 3));
        let tb = KeyStrategy::TimeBucket {
            shards: 3,
            bucket: Bucket::Day,
        };
        let p = plan_latest(&tb, &naming(Period::Week), "d", r).unwrap();
        let pks: Vec<_> = p
            .steps
            .iter()
            .map(|s| s[0].pk.split('#').nth(1).unwrap().to_owned())
            .collect();
        assert_eq!(pks, ["2026-11-22", "2026-11-21", "2026-11-20"]);
    }

    #[test]
    fn merge_orders_by_time_and_drops_duplicates() {
        let attrs = ItemAttributes::default();
        let item = |ts: i64, e: &str| -> Item {
            [
                ("ts_ms".to_owned(), AttributeValue::N(ts.to_string())),
                ("entity_id".to_owned(), AttributeValue::S("d".into())),
                ("event_id".to_owned(), AttributeValue::S(e.into())),
            ]
            .into_iter()
            .collect()
        };
        let a = vec![item(1, "a"), item(5, "b"), item(9, "c")];
        let b = vec![item(2, "x"), item(5, "b"), item(7, "y")];
        let c = vec![];
        let merged: Vec<_> = merge_items([a, b, c], &attrs)
            .map(|i| item_order_key(&i, &attrs).0)
            .collect();
        assert_eq!(merged, [1, 2, 5, 7, 9]);
    }

    #[test]
    fn migration_plan_reads_both_layouts_once() {
        let m = ShardMigration {
            from: KeyStrategy::TimeBucket {
                shards: 16,
                bucket: Bucket::Hour,
            },
            to: KeyStrategy::TimeBucket {
                shards: 32,
                bucket: Bucket::Hour,
            },
        };
        let r = range("2023-10-27T13:30:00Z", "2023-10-27T15:10:00Z");
        let p = plan_range_migration(&m, &naming(Period::Day), "sensor-alpha-001", r).unwrap();
        let same = shard_of("sensor-alpha-001", 16) == shard_of("sensor-alpha-001", 32);
        assert_eq!(p.queries.len(), if same { 3 } else { 6 });
    }
}
