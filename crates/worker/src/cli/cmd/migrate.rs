//! `tidemark migrate`: a shard-count migration's status, backfill and
//! cutover (the library side is `crate::maintenance::migrate`).

use std::sync::Arc;

use crate::config::Config;
use crate::maintenance::TableManager;
use crate::maintenance::migrate::{self, BackfillOptions, MigrationState};
use anyhow::{Result, bail};
use chrono::Utc;
use serde::Serialize;

use super::render::{self, Output, outln};

/// Arguments of `migrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
}

/// Which table a step acts on.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
struct Target {
    /// The period table, by name.
    #[arg(long)]
    table: Option<String>,
    /// The period table, by period label (e.g. 2026-11-24).
    #[arg(long)]
    period: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Per period table: old-only, dual, backfilled or new-only.
    Status,
    /// Copy a dual table's old-layout items to the new layout (idempotent,
    /// resumable, paced by the writer's rate control); tags it backfilled.
    Backfill {
        #[command(flatten)]
        target: Target,
        /// Share of the table's write capacity the copy may use (the rest
        /// is left to live traffic).
        #[arg(long, default_value_t = 0.25)]
        capacity_share: f64,
        /// Items per Scan page (the cursor is saved after each page).
        #[arg(long, default_value_t = 100)]
        page_size: i32,
        /// Stop after this many pages (run again to go on from the cursor).
        #[arg(long)]
        max_pages: Option<u64>,
    },
    /// Record a backfilled table as new-only: reads use the new layout
    /// alone, and old-layout items may be removed.
    Cutover {
        #[command(flatten)]
        target: Target,
    },
}

/// One row of `migrate status`.
#[derive(Debug, Serialize)]
struct Row {
    table: String,
    period: String,
    lifecycle: String,
    migration: MigrationState,
    layout: Option<String>,
    layout_from: Option<String>,
}

impl Target {
    fn table(&self, config: &Config) -> Result<String> {
        let naming = tidemark_schema::period::TableNaming {
            prefix: config.schema.table_prefix.clone(),
            period: config.schema.period,
        };
        let name = match (&self.table, &self.period) {
            (Some(t), _) => t.clone(),
            (None, Some(p)) => format!("{}_{p}", naming.prefix),
            (None, None) => bail!("give --table or --period"),
        };
        if naming.parse(&name).is_none() {
            bail!(
                "{name} is not a period table of this config (prefix {}, period {:?})",
                naming.prefix,
                config.schema.period
            );
        }
        Ok(name)
    }
}

pub(crate) async fn run(config: &Config, args: &Args) -> Result<()> {
    let sdk = super::sdk().await?;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let schema = &config.schema;
    match &args.action {
        Action::Status => {
            let manager = TableManager::from_config(config, client.clone());
            let mut rows = Vec::new();
            for t in manager.list(Utc::now()).await? {
                let layout = migrate::table_layout(&client, &t.name)
                    .await?
                    .map(|(_, l)| l)
                    .unwrap_or_default();
                rows.push(Row {
                    migration: layout.state(schema),
                    lifecycle: serde_json::to_value(t.state)?
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    table: t.name,
                    period: t.period,
                    layout: layout.layout,
                    layout_from: layout.layout_from,
                });
            }
            let output = super::output(Output::Table);
            match output {
                Output::Table | Output::Csv => {
                    let cells = rows
                        .iter()
                        .map(|r| {
                            vec![
                                r.table.clone(),
                                r.period.clone(),
                                r.lifecycle.clone(),
                                r.migration.to_string(),
                                r.layout.clone().unwrap_or_default(),
                                r.layout_from.clone().unwrap_or_default(),
                            ]
                        })
                        .collect();
                    render::print_rows(
                        &[
                            "TABLE",
                            "PERIOD",
                            "STATE",
                            "MIGRATION",
                            "LAYOUT",
                            "LAYOUT_FROM",
                        ],
                        cells,
                        &[],
                        output,
                        &rows,
                    )?;
                }
                Output::Json | Output::Jsonl => render::print_json(&rows, output)?,
            }
        }
        Action::Backfill {
            target,
            capacity_share,
            page_size,
            max_pages,
        } => {
            let table = target.table(config)?;
            if !(*capacity_share > 0.0 && *capacity_share <= 1.0) {
                bail!("--capacity-share must be > 0 and <= 1");
            }
            let mut writer = config.writer.clone();
            writer.capacity_share = *capacity_share;
            let opts = BackfillOptions {
                page_size: (*page_size).max(1),
                max_pages: *max_pages,
                writer,
            };
            let transport = Arc::new(tidemark_writer::SdkTransport::new(&sdk)?);
            let bar = super::progress_bar(0, "{spinner} {msg} {elapsed}");
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            let done = migrate::backfill(
                &client,
                transport,
                schema,
                &config.maintenance.coordinator_table,
                &table,
                &opts,
                |p| {
                    bar.set_message(format!(
                        "{}: {} read, {} copied, {} pages",
                        p.table, p.scanned, p.copied, p.pages
                    ));
                    // Logged too: the bar is hidden without a terminal.
                    tracing::info!(
                        table = p.table,
                        scanned = p.scanned,
                        copied = p.copied,
                        pages = p.pages,
                        "backfill progress"
                    );
                },
            )
            .await;
            bar.finish_and_clear();
            let done = done?;
            render::print_json(&done, super::output(Output::Jsonl))?;
        }
        Action::Cutover { target } => {
            let table = target.table(config)?;
            let state = migrate::cutover(&client, schema, &table).await?;
            outln!("{table}: {state}")?;
        }
    }
    Ok(())
}
