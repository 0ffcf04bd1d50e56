//! `tidemark produce`: synthetic events to the configured source, in the
//! built-in IoT shape or a template's (`--template`).

use std::io::Write as _;
use std::path::PathBuf;

use crate::config::Config;
use crate::tools::produce::{KinesisStream, ProduceSpec, Produced, Target, pad};
use crate::tools::template::Template;
use anyhow::{Context, Result};
use chrono::Utc;
use futures::StreamExt as _;

use super::render::outln;
use super::source::{PerKind, per_kind};
use super::stream_name;

/// Arguments of `produce`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
    /// With `source.streams`: the stream to write to.
    #[arg(long)]
    stream: Option<String>,
    /// Number of devices.
    #[arg(long, default_value_t = 200)]
    devices: u32,
    /// Events per second in total (0: as fast as the source takes them).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Number of events.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// Device 0 sends this many times the rate of each other device.
    #[arg(long, default_value_t = 1)]
    hot_factor: u32,
    /// Generator seed (same seed, same devices and values).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write every produced event, one JSON per line, to this file.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Kinesis only: pack this many events into each record as a KPL
    /// aggregate (1: one event per record).
    #[arg(long, default_value_t = 1)]
    aggregate: usize,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Generate events in this template's shape instead of the IoT one: a
    /// JSON event whose strings may hold placeholders such as `{{entity}}`,
    /// `{{int|1|9}}`, `{{time|epoch_micros}}` (docs/event-mapping.md).
    #[arg(long)]
    template: Option<PathBuf>,
    /// Pad each event's JSON to exactly this size with a `padding` field:
    /// bytes, or with a unit (900KB, 900KiB, 1MiB). On Kinesis, refused
    /// above what the stream's records take (`MaxRecordSizeInKiB`, 1 MiB
    /// unless raised, partition key included).
    #[arg(long, value_parser = crate::tools::produce::parse_size)]
    size: Option<usize>,
}

pub(crate) async fn run(config: &Config, args: &Args) -> Result<()> {
    // Produce retries failed calls itself (one budget of 50 attempts); an
    // attempt gets 30 s, as a loaded emulator can take seconds per call.
    let sdk = crate::sdk::single_attempt(&super::sdk().await?, std::time::Duration::from_secs(30));
    let mut target = per_kind(
        &config.source,
        Destination {
            sdk: &sdk,
            stream: args.stream.as_deref(),
            aggregate: args.aggregate,
        },
    )?;
    let template = match &args.template {
        Some(p) => Some(
            Template::parse(
                &std::fs::read_to_string(p)
                    .with_context(|| format!("reading template {}", p.display()))?,
            )
            .with_context(|| format!("template {}", p.display()))?,
        ),
        None => None,
    };
    let spec = ProduceSpec {
        devices: args.devices,
        count: args.count,
        hot_factor: args.hot_factor,
        seed: args.seed,
    };
    if let Target::Kinesis(k) | Target::KinesisAggregated(k, _) = &mut target
        && let Err(e) = k.read_max_record().await
    {
        tracing::warn!(
            stream = %k.stream,
            error = %e,
            "cannot read the stream's MaxRecordSizeInKiB; records are kept to the default 1024 KiB"
        );
    }
    if let Some(size) = args.size {
        // The longest partition key the IoT events use; a template's keys
        // are checked record by record as they are sent.
        let key_len = match &template {
            Some(_) => 1,
            None => format!("device-{:04}", args.devices.max(1) - 1).len(),
        };
        target
            .check_event_size(size, key_len)
            .map_err(anyhow::Error::msg)?;
    }
    let mut manifest = match &args.manifest {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .with_context(|| format!("creating manifest {}", p.display()))?,
        )),
        None => None,
    };
    let bar = super::progress_bar(
        args.count,
        "{bar:40} {pos}/{len} events {per_sec} eta {eta}",
    );
    let start = std::time::Instant::now();
    let batch = target.batch_size() as u64;
    // Several calls in flight: a single emulator (or shard) call is slow
    // compared to the per-call work here.
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut n = 0;
    let mut sent = 0;
    while sent < args.count {
        while n < args.count && in_flight.len() < args.concurrency.max(1) {
            let end = (n + batch).min(args.count);
            let now = Utc::now();
            let mut events: Vec<Produced> = (n..end)
                .map(|i| match &template {
                    Some(t) => t.render(&spec, i, now),
                    None => spec.produced(i, now),
                })
                .collect();
            if let Some(size) = args.size {
                for e in &mut events {
                    pad(&mut e.body, size).map_err(anyhow::Error::msg)?;
                }
            }
            if let Some(m) = manifest.as_mut() {
                for e in &events {
                    m.write_all(&e.body)?;
                    m.write_all(b"\n")?;
                }
            }
            let target = target.clone();
            in_flight.push(async move {
                target
                    .send_produced(&events)
                    .await
                    .map(|()| events.len() as u64)
            });
            n = end;
        }
        if let Some(done) = in_flight.next().await {
            sent += done?;
            bar.set_position(sent);
        }
        if args.rate > 0 {
            // Pace to the rate: sleep until this many events are due.
            let due = std::time::Duration::from_secs_f64(sent as f64 / args.rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
    bar.finish_and_clear();
    if let Some(mut m) = manifest {
        m.flush()?;
    }
    let secs = start.elapsed().as_secs_f64();
    outln!(
        "produced {} events from {} devices in {:.1}s ({:.0} events/s)",
        args.count,
        args.devices,
        secs,
        args.count as f64 / secs.max(1e-9)
    )?;
    Ok(())
}

/// Where `produce` sends: the source's stream (`--stream` picks one of
/// several; `--aggregate` packs KPL aggregates) or its queue.
struct Destination<'a> {
    sdk: &'a aws_config::SdkConfig,
    stream: Option<&'a str>,
    aggregate: usize,
}

impl<'c> PerKind<'c> for Destination<'_> {
    type Output = Result<Target>;

    fn kinesis(self, k: &'c tidemark_consumer::KinesisConfig) -> Result<Target> {
        let k = super::one_stream(k, self.stream)?;
        let stream = KinesisStream::new(
            aws_sdk_kinesis::Client::new(self.sdk),
            stream_name(&k.stream),
        );
        Ok(if self.aggregate > 1 {
            Target::KinesisAggregated(stream, self.aggregate)
        } else {
            Target::Kinesis(stream)
        })
    }

    fn sqs(self, q: &'c tidemark_consumer::SqsConfig) -> Result<Target> {
        Ok(Target::Sqs(
            aws_sdk_sqs::Client::new(self.sdk),
            q.queue_url.clone(),
        ))
    }
}
