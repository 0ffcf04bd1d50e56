//! `tidemark replay`: a fixture through the same data path `run` uses.

use std::path::PathBuf;

use super::render::outln;
use crate::config::Config;
use crate::run::DataPath;
use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Arguments of `replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
    /// Fixture file to replay.
    #[arg(long)]
    fixture: PathBuf,
}

pub(crate) async fn run(config: &Config, args: &Args) -> Result<()> {
    // Scanned and checked up front; replayed from the file shard by shard.
    // Records of a recorded stream hold events as that stream's do.
    let format =
        super::source::kinesis_source(config).map_or(Default::default(), |k| k.record_format);
    let replay =
        tidemark_consumer::fixture::ReplaySource::open(&args.fixture)?.with_record_format(format);
    let total = replay.record_count() as u64;
    let sdk = super::sdk().await?;
    let data = DataPath::start(config, &sdk).await?;
    let bar = super::progress_bar(total, "{bar:40} {pos}/{len} records {per_sec} eta {eta}");
    // The replay delivers into a relay that counts what passes, for the bar.
    let (tx, mut relay_rx) = mpsc::channel::<Vec<tidemark_consumer::Record>>(16);
    let (pipe_tx, pipe_rx) = mpsc::channel(16);
    let relay_bar = bar.clone();
    let relay = tokio::spawn(async move {
        while let Some(batch) = relay_rx.recv().await {
            relay_bar.inc(batch.len() as u64);
            if pipe_tx.send(batch).await.is_err() {
                break;
            }
        }
    });
    let pipe = tokio::spawn(data.run(pipe_rx));
    let summary = replay.replay(tx, CancellationToken::new()).await?;
    relay.await.context("relay task")?;
    let report = pipe.await.context("pipeline task")??;
    bar.finish_and_clear();
    outln!(
        "replayed {} records from {} shards: {} stored, {} dead-lettered ({} corrupt aggregates)",
        report.records,
        summary.per_shard.len(),
        report.stored,
        report.dead_lettered(),
        summary.corrupt_aggregates
    )?;
    if report.dead_lettered() > 0 {
        return Err(super::Failed(format!(
            "{} of {} records were dead-lettered (their reasons are in the dead-letter destination)",
            report.dead_lettered(),
            report.records
        ))
        .into());
    }
    Ok(())
}
