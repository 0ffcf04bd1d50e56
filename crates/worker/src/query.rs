//! Reading back: runs the schema's query plans against DynamoDB (queries in
//! parallel, pages followed to the end) and merges the results in time order.

use aws_sdk_dynamodb::error::DisplayErrorContext;
use futures::StreamExt;
use tidemark_schema::Item;
use tidemark_schema::period::TableNaming;
use tidemark_schema::query::{
    PlannedQuery, TimeRange, item_order_key, merge_items, plan_latest, plan_range,
};
use tidemark_schema::route::RouterConfig;

/// Queries run at once.
const PARALLEL_QUERIES: usize = 16;

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
    let plan = plan_range(&config.key, &naming(config), entity, range)?;
    let results = run_all(client, config, plan.queries).await?;
    Ok(merge_items(results, &config.attributes).collect())
}

/// The newest stored event of `entity` in `range`.
pub async fn latest(
    client: &aws_sdk_dynamodb::Client,
    config: &RouterConfig,
    entity: &str,
    range: TimeRange,
) -> Result<Option<Item>, QueryError> {
    let plan = plan_latest(&config.key, &naming(config), entity, range)?;
    for step in plan.steps {
        let found = run_all(client, config, step).await?;
        if let Some(newest) = found
            .into_iter()
            .flatten()
            .max_by_key(|i| item_order_key(i, &config.attributes))
        {
            return Ok(Some(newest));
        }
    }
    Ok(None)
}

async fn run_all(
    client: &aws_sdk_dynamodb::Client,
    config: &RouterConfig,
    queries: Vec<PlannedQuery>,
) -> Result<Vec<Vec<Item>>, QueryError> {
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
                    message: DisplayErrorContext(e).to_string(),
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
