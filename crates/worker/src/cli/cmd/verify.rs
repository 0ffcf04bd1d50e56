//! `tidemark verify`: every event of a manifest is stored, with its content.

use std::path::PathBuf;

use crate::config::Config;
use crate::tools::verify::{VerifyOptions, verify};
use anyhow::{Context, Result};
use tidemark_schema::route::Router;

use super::render::{self, Output, outln};

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
    /// Events to look for, one JSON per line.
    #[arg(long)]
    manifest: PathBuf,
    /// Former spelling of the global `--output json`.
    #[arg(long, hide = true)]
    json: bool,
    /// With `source.streams`: the stream the manifest's events were sent
    /// to (its own event mapping, if it has one, routes them).
    #[arg(long)]
    stream: Option<String>,
}

pub(crate) async fn run(config: &Config, args: &Args) -> Result<()> {
    let sdk = super::sdk().await?;
    let schema = match &args.stream {
        None => config.schema.clone(),
        Some(s) => {
            let k = super::source::kinesis_source(config)?;
            let name = super::one_stream(k, Some(s))?.stream_name().to_string();
            config
                .stream_schemas()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map_or_else(|| config.schema.clone(), |(_, schema)| schema)
        }
    };
    let router = Router::new(schema)?;
    let text = std::fs::read_to_string(&args.manifest)
        .with_context(|| format!("reading {}", args.manifest.display()))?;
    let events: Vec<Vec<u8>> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.as_bytes().to_vec())
        .collect();
    let bar = super::progress_bar(
        events.len() as u64,
        "{bar:40} {pos}/{len} events read {per_sec} eta {eta}",
    );
    let options = VerifyOptions {
        unavailable_after: super::give_up_after(),
        progress: Some(bar.clone()),
        ..VerifyOptions::for_sdk(&sdk)
    };
    let report = verify(
        &aws_sdk_dynamodb::Client::new(&sdk),
        &router,
        &events,
        &options,
    )
    .await;
    bar.finish_and_clear();
    let report = report?;
    let output = super::output(if args.json {
        Output::Json
    } else {
        Output::Table
    });
    if matches!(output, Output::Json | Output::Jsonl) {
        render::print_json(&report, output)?;
    } else {
        outln!(
            "events {}  found {}  missing {}  mismatched {}  unroutable {}{}",
            report.events,
            report.found,
            report.missing,
            report.mismatched,
            report.unroutable,
            if report.payloads > 0 {
                format!("  (payloads in S3 {})", report.payloads)
            } else {
                String::new()
            }
        )?;
        for e in &report.examples {
            outln!("  {e}")?;
        }
    }
    if !report.complete() {
        return Err(super::Failed(format!(
            "{} of {} events are not stored as produced",
            report.events - report.found,
            report.events
        ))
        .into());
    }
    Ok(())
}
