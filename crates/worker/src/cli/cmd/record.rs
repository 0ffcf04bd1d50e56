//! `tidemark record`: a stream's raw records into a fixture file.

use std::path::PathBuf;

use crate::config::Config;
use anyhow::Result;

use super::render::outln;
use super::source::kinesis_source;
use super::stream_name;

/// Arguments of `record`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
    /// Fixture file to write.
    #[arg(long)]
    out: PathBuf,
    /// With `source.streams`: the stream to record.
    #[arg(long)]
    stream: Option<String>,
}

pub(crate) async fn run(config: &Config, args: &Args) -> Result<()> {
    let k = &super::one_stream(kinesis_source(config)?, args.stream.as_deref())?;
    let sdk = super::sdk().await?;
    // The total is unknown until the stream is read: a count, a rate and
    // the shards done (hidden off a terminal).
    let bar = super::progress_bar(0, "{spinner} {msg}: {pos} records {per_sec} {elapsed}");
    bar.set_message(format!("recording {}", k.stream));
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let progress = |records: u64, (done, shards): (usize, usize)| {
        bar.set_position(records);
        bar.set_message(format!(
            "recording {} (shard {}/{shards})",
            k.stream,
            done + 1
        ));
    };
    let n = tidemark_consumer::fixture::Recorder::new(aws_sdk_kinesis::Client::new(&sdk))
        .record_with(&stream_name(&k.stream), &args.out, &progress)
        .await?;
    bar.finish_and_clear();
    outln!(
        "recorded {n} records of {} into {}",
        k.stream,
        args.out.display()
    )?;
    Ok(())
}
