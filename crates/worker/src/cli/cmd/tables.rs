//! `tidemark tables`: one maintenance round, or a listing of the tables.

use crate::config::Config;
use crate::maintenance::RoundKind;
use crate::maintenance::TableInfo;
use crate::maintenance::TableManager;
use anyhow::Result;
use chrono::{DateTime, Utc};
use tidemark_schema::period::TableClass;
use tidemark_schema::sizing::{Prices, table_monthly_usd};

use super::render::{self, Output, outln};

/// Arguments of `tables`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
    /// Act as if it were this time (RFC 3339); default: now.
    #[arg(long, global = true)]
    now: Option<DateTime<Utc>>,
    /// Print the actions without taking them.
    #[arg(long, global = true)]
    dry_run: bool,
    /// Former spelling of the global `--output json`.
    #[arg(long, global = true, hide = true)]
    json: bool,
    /// Prices for `list`'s monthly cost.
    #[command(flatten)]
    prices: super::plan::PriceArgs,
}

/// A listed table with its billing mode and estimated monthly cost.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Listed<'a> {
    #[serde(flatten)]
    pub(crate) table: &'a TableInfo,
    /// `provisioned` or `on_demand`.
    pub(crate) billing: &'static str,
    /// Capacity all month (provisioned) and storage at the class's prices,
    /// USD; on demand, storage only.
    pub(crate) monthly_usd: f64,
    /// False for on-demand tables: their requests are not in `monthly_usd`.
    pub(crate) monthly_usd_includes_requests: bool,
}

impl<'a> Listed<'a> {
    fn new(table: &'a TableInfo, prices: &Prices) -> Self {
        let capacity = table.capacity.map(|c| (c.read, c.write));
        Listed {
            table,
            billing: if capacity.is_some() {
                "provisioned"
            } else {
                "on_demand"
            },
            monthly_usd: table_monthly_usd(
                prices,
                capacity,
                table.table_class == TableClass::StandardInfrequentAccess,
                table.size_bytes,
            ),
            monthly_usd_includes_requests: capacity.is_some(),
        }
    }
}

#[derive(Debug, Clone, Copy, clap::Subcommand)]
enum Action {
    /// Create the current period's table and, when due, the next one.
    Ensure,
    /// A full round: create, resize to each state's tier, delete or tag expired.
    Rotate,
    /// List the period tables with their period, state and capacity.
    List,
}

pub(crate) async fn run(config: &Config, args: &Args) -> Result<()> {
    let sdk = super::sdk().await?;
    let manager = TableManager::from_config(config, aws_sdk_dynamodb::Client::new(&sdk))
        .with_autoscaling(aws_sdk_applicationautoscaling::Client::new(&sdk));
    let now = args.now.unwrap_or_else(Utc::now);
    let output = super::output(if args.json {
        Output::Json
    } else {
        Output::Table
    });
    let kind = match args.action {
        Action::List => {
            let prices = args.prices.prices()?;
            let listed = manager.list(now).await?;
            let tables: Vec<Listed> = listed.iter().map(|t| Listed::new(t, &prices)).collect();
            match output {
                Output::Table | Output::Csv => {
                    let (header, rows) = render::tables_list_rows(&tables)?;
                    render::print_rows(&header, rows, &[4, 5, 8, 9, 10], output, &tables)?;
                }
                Output::Json | Output::Jsonl => render::print_json(&tables, output)?,
            }
            return Ok(());
        }
        Action::Ensure => RoundKind::Ensure,
        Action::Rotate => RoundKind::Rotate,
    };
    // Creating a table and waiting for ACTIVE takes seconds to minutes.
    let spinner = super::progress_bar(0, "{spinner} {msg} {elapsed}");
    spinner.set_message("creating and updating tables, waiting until ACTIVE");
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    let applied = manager.round(now, kind, args.dry_run).await;
    spinner.finish_and_clear();
    let applied = applied?;
    if output != Output::Table {
        render::print_json(&applied, output)?;
    } else if applied.is_empty() {
        outln!("nothing to do at {}", now.to_rfc3339())?;
    } else {
        for a in &applied {
            let what = serde_json::to_string(&a.action)?;
            match (&a.error, args.dry_run) {
                (_, true) => outln!("would {what}")?,
                (None, false) => outln!("done  {what}")?,
                (Some(e), false) => outln!("FAILED {what}: {e} (retried next round)")?,
            }
        }
    }
    if applied.iter().any(|a| a.error.is_some()) {
        if applied.iter().all(|a| a.error.is_none() || a.unreachable) {
            return Err(
                super::Unavailable("DynamoDB did not answer the maintenance calls".into()).into(),
            );
        }
        return Err(super::Failed(
            "some maintenance actions failed; they are retried next round".into(),
        )
        .into());
    }
    Ok(())
}
