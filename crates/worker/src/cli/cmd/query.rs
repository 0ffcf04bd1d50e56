//! `tidemark query`: an entity's events, by range or the latest one.

use crate::tools::query;
use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use tidemark_schema::query::TimeRange;
use tidemark_schema::route::RouterConfig;

use super::render::{self, Output};

/// Arguments of `query`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    /// Entity id (e.g. the device id).
    #[arg(long)]
    entity: String,
    /// Range start (RFC 3339, inclusive).
    #[arg(long, requires = "to", conflicts_with = "latest")]
    from: Option<DateTime<Utc>>,
    /// Range end (RFC 3339, inclusive).
    #[arg(long, requires = "from")]
    to: Option<DateTime<Utc>>,
    /// Only the newest event (searched newest table first, within retention).
    #[arg(long, required_unless_present = "from")]
    latest: bool,
    /// Former name of the global --output (default here: jsonl).
    #[arg(long, value_enum, hide = true)]
    format: Option<Output>,
}

/// Reads with only the config's `[event]` and `[schema]`.
pub(crate) async fn run(schema: &RouterConfig, args: &Args) -> Result<()> {
    let sdk = super::sdk().await?;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let items = if args.latest {
        let now = Utc::now();
        let retention =
            chrono::Duration::from_std(schema.retention).unwrap_or(chrono::Duration::days(30));
        let range = TimeRange {
            start_ms: (now - retention).timestamp_millis(),
            end_ms: (now + chrono::Duration::from_std(schema.max_future_skew).unwrap_or_default())
                .timestamp_millis(),
        };
        query::latest(&client, schema, &args.entity, range)
            .await?
            .into_iter()
            .collect()
    } else {
        let (Some(from), Some(to)) = (args.from, args.to) else {
            bail!("give --from and --to, or --latest");
        };
        let range = TimeRange {
            start_ms: from.timestamp_millis(),
            end_ms: to.timestamp_millis(),
        };
        query::range(&client, schema, &args.entity, range).await?
    };
    let rows: Vec<serde_json::Value> = items.iter().map(query::to_json).collect();
    render::query_rows(
        &mut std::io::stdout().lock(),
        &rows,
        super::output(args.format.unwrap_or(Output::Jsonl)),
        schema,
    )
}
