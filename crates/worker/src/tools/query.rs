//! Reading back: runs the schema's query plans against DynamoDB (queries in
//! parallel, pages followed to the end) and merges the results in time order.
//!
//! Each table is read in the layouts its tags record (see
//! [`crate::maintenance::migrate`]): both during a shard migration, the old one for a
//! table that ended before it, the config's when none is recorded. An event
//! stored under two layouts comes back once ([`merge_items`]).
//!
//! With adaptive sharding on, each table's split records of the entity are
//! read first (one Query of the reserved partition per table): a split
//! entity's plan adds its sub-keys from its first split on; `-v` logs each
//! query, those of sub-keys marked.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use tidemark_schema::Item;
use tidemark_schema::period::TableNaming;
use tidemark_schema::query::{
    PlannedQuery, TimeRange, item_order_key, merge_items, plan_latest, plan_latest_split,
    plan_range, plan_range_split,
};
use tidemark_schema::route::RouterConfig;
use tidemark_schema::split::TableSplits;
use tidemark_schema::strategy::KeyStrategy;
use tidemark_schema::timefmt;

use crate::maintenance::migrate::{self, config_strategies};

/// Queries run at once.
const PARALLEL_QUERIES: usize = 16;

/// Tables whose layout tags are read at once (ListTagsOfResource allows
/// about 10 calls/s).
const PARALLEL_LAYOUTS: usize = 4;

/// Errors reading back.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The plan cannot be made.
    #[error(transparent)]
    Plan(#[from] tidemark_schema::query::QueryError),
    /// A Query call failed.
    #[error("query of {table}: {message}")]
    Call {
        /// The table.
        table: String,
        /// The error text.
        message: String,
    },
}

fn naming(config: &RouterConfig) -> TableNaming {
    TableNaming {
        prefix: config.table_prefix.clone(),
        period: config.period,
    }
}

/// Every stored event of `entity` in `range`, oldest first.
pub async fn range(
    client: &aws_sdk_dynamodb::Client,
    config: &RouterConfig,
    entity: &str,
    range: TimeRange,
) -> Result<Vec<Item>, QueryError> {
    let naming = naming(config);
    // The tables of the range (whatever the layout: one per period).
    let tables: BTreeSet<String> = plan_range(&config.key, &naming, entity, range)?
        .queries
        .into_iter()
        .map(|q| q.table)
        .collect();
    let by_table = layouts(client, config, tables).await;
    let splits = splits_of(client, config, entity, by_table.keys().cloned()).await?;
    let lookup = |t: &str| splits.get(t);
    let mut strategies: Vec<&KeyStrategy> = by_table.values().flatten().collect();
    strategies.sort_by_key(|s| crate::maintenance::layout_of(s));
    strategies.dedup();
    let mut queries = Vec::new();
    for s in strategies {
        // Splits apply to the layout in force (the router keys by them
        // only there).
        let plan = if *s == config.key {
            plan_range_split(s, &naming, entity, range, &lookup)?
        } else {
            plan_range(s, &naming, entity, range)?
        };
        queries.extend(
            plan.queries
                .into_iter()
                .filter(|q| by_table.get(&q.table).is_some_and(|l| l.contains(s))),
        );
    }
    let results = run_all(client, config, queries).await?;
    Ok(merge_items(results, &config.attributes).collect())
}

/// The split records of `entity` in `tables`, when the config keys by
/// splits (adaptive sharding on, `time_bucket` or `entity`); tables
/// without any are left out.
async fn splits_of(
    client: &aws_sdk_dynamodb::Client,
    config: &RouterConfig,
    entity: &str,
    tables: impl IntoIterator<Item = String>,
) -> Result<BTreeMap<String, TableSplits>, QueryError> {
    if !(config.adaptive_sharding.enabled && config.key.takes_splits()) {
        return Ok(BTreeMap::new());
    }
    let attrs = &config.key_attributes;
    let found: Vec<_> = futures::stream::iter(tables)
        .map(|table| async move {
            let s = crate::run::splits::load(client, &table, attrs, Some(entity)).await;
            (table, s)
        })
        .buffer_unordered(PARALLEL_QUERIES)
        .collect()
        .await;
    let mut out = BTreeMap::new();
    for (table, s) in found {
        let s = s.map_err(|e| QueryError::Call {
            table: table.clone(),
            message: e.to_string(),
        })?;
        tracing::info!(
            table,
            entity,
            "query: the split records of the entity (1 query)"
        );
        if let Some(s) = s.filter(|s| !s.is_empty()) {
            for split in s.of(entity) {
                tracing::info!(table, split = %split.describe(), "query: split");
            }
            out.insert(table, s);
        }
    }
    Ok(out)
}

/// The layouts to read each table in: those its tags record, else the
/// config's. A table that does not exist is left out (nothing to read).
pub(crate) async fn layouts(
    client: &aws_sdk_dynamodb::Client,
    config: &RouterConfig,
    tables: BTreeSet<String>,
) -> BTreeMap<String, Vec<KeyStrategy>> {
    futures::stream::iter(tables)
        .map(|table| async move {
            match migrate::table_layout(client, &table).await {
                Ok(None) => None,
                Ok(Some((_, layout))) => {
                    let read = layout
                        .read_strategies()
                        .unwrap_or_else(|| config_strategies(config));
                    Some((table, read))
                }
                Err(e) => {
                    // Cannot tell (e.g. no tag permission): the config's
                    // layouts, which during a migration cover both.
                    tracing::warn!(error = %e, "reading with the config's key layouts");
                    Some((table, config_strategies(config)))
                }
            }
        })
        .buffer_unordered(PARALLEL_LAYOUTS)
        .filter_map(|x| async move { x })
        .collect()
        .await
}

/// The newest stored event of `entity` in `range`.
pub async fn latest(
    client: &aws_sdk_dynamodb::Client,
    config: &RouterConfig,
    entity: &str,
    range: TimeRange,
) -> Result<Option<Item>, QueryError> {
    let naming = naming(config);
    if range.end_ms < range.start_ms {
        // The plan's own error.
        plan_latest(&config.key, &naming, entity, range)?;
    }
    // Table by table, newest first, each in its own layouts; the newest of
    // the first table holding any event is the answer. Nothing outside the
    // accepted timestamps was ever written.
    let start_ms = range.start_ms.max(timefmt::MIN_TIMESTAMP_MS);
    let end_ms = range.end_ms.min(timefmt::END_TIMESTAMP_MS - 1);
    if end_ms < start_ms {
        return Ok(None);
    }
    let range = TimeRange { start_ms, end_ms };
    let mut p = naming.period.containing(range.end_ms);
    let mut tables = 0usize;
    while p.end_ms() > range.start_ms {
        tables += 1;
        if tables > tidemark_schema::query::MAX_PLANNED_QUERIES {
            return Err(tidemark_schema::query::QueryError::TooManyQueries.into());
        }
        let table = naming.name_of(&p);
        let slice = TimeRange {
            start_ms: range.start_ms.max(p.start_ms),
            end_ms: range.end_ms.min(p.end_ms() - 1),
        };
        let by_table = layouts(client, config, BTreeSet::from([table.clone()])).await;
        let splits = splits_of(client, config, entity, by_table.keys().cloned()).await?;
        let lookup = |t: &str| splits.get(t);
        let none = |_: &str| None;
        let mut newest: Option<Item> = None;
        for s in by_table.get(&table).into_iter().flatten() {
            let plan = if *s == config.key {
                plan_latest_split(s, &naming, entity, slice, &lookup)?
            } else {
                plan_latest_split(s, &naming, entity, slice, &none)?
            };
            for step in plan.steps {
                let found = run_all(client, config, step).await?;
                if let Some(item) = found
                    .into_iter()
                    .flatten()
                    .max_by_key(|i| item_order_key(i, &config.attributes))
                {
                    if newest.as_ref().is_none_or(|n| {
                        item_order_key(n, &config.attributes)
                            < item_order_key(&item, &config.attributes)
                    }) {
                        newest = Some(item);
                    }
                    break;
                }
            }
        }
        if newest.is_some() {
            return Ok(newest);
        }
        p = p.prev();
    }
    Ok(None)
}

async fn run_all(
    client: &aws_sdk_dynamodb::Client,
    config: &RouterConfig,
    queries: Vec<PlannedQuery>,
) -> Result<Vec<Vec<Item>>, QueryError> {
    for q in &queries {
        tracing::info!(
            table = %q.table,
            pk = %q.pk,
            sub_key = q.pk.contains("#x"),
            "query"
        );
    }
    futures::stream::iter(queries)
        .map(|q| run_one(client, config, q))
        .buffer_unordered(PARALLEL_QUERIES)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// One query, all pages (up to its limit). A table that does not exist holds
/// nothing: periods with no events never had a table.
async fn run_one(
    client: &aws_sdk_dynamodb::Client,
    config: &RouterConfig,
    q: PlannedQuery,
) -> Result<Vec<Item>, QueryError> {
    let cond = q.key_condition(&config.key_attributes);
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let mut req = client
            .query()
            .table_name(&q.table)
            .key_condition_expression(&cond.expression)
            .scan_index_forward(q.scan_forward)
            .set_exclusive_start_key(start.take());
        for (k, v) in &cond.names {
            req = req.expression_attribute_names(k, v);
        }
        for (k, v) in &cond.values {
            req = req.expression_attribute_values(k, v.clone());
        }
        if let Some(limit) = q.limit {
            req = req.limit(limit);
        }
        let out = match req.send().await {
            Ok(o) => o,
            Err(e)
                if e.as_service_error().is_some_and(
                    aws_sdk_dynamodb::operation::query::QueryError::is_resource_not_found_exception,
                ) =>
            {
                return Ok(items);
            }
            Err(e) => {
                return Err(QueryError::Call {
                    table: q.table.clone(),
                    message: tidemark_aws_errors::describe(&e),
                });
            }
        };
        items.extend(out.items().iter().cloned());
        let full = q.limit.is_some_and(|l| items.len() >= l as usize);
        match out.last_evaluated_key {
            Some(k) if !full => start = Some(k),
            _ => return Ok(items),
        }
    }
}

/// An item as plain JSON (numbers as numbers, maps as objects).
pub fn to_json(item: &Item) -> serde_json::Value {
    serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone()).unwrap_or(serde_json::Value::Null)
}
