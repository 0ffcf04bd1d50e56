//! `tidemark`: the worker binary. Thin: parses the command line, loads the
//! config, and calls into the library crates.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use tidemark_consumer::KinesisSource;
use tidemark_consumer::sqs::SqsSource;
use tidemark_schema::Origin;
use tidemark_schema::plan::{PlanInput, Prices, item_bytes_of_sample, plan};
use tidemark_schema::route::{Router, RouterConfig};
use tidemark_worker::config::{Config, LogFormat, SourceConfig, default_worker_id, process_env};
use tidemark_worker::coordinator::MaintenanceLease;
use tidemark_worker::deadletter::{
    DeadLetterConfig, DeadLetterSink, DeadLetters, DynamoDbSink, FileSink, SqsSink,
};
use tidemark_worker::pipeline::{Pipeline, system_clock};
use tidemark_worker::produce::{ProduceSpec, Target};
use tidemark_worker::query;
use tidemark_worker::tables::{CreateMissingTables, RoundKind, TableManager, TablePolicy};
use tidemark_worker::telemetry::{self, Readiness};
use tidemark_worker::verify::{VerifyError, VerifyOptions, verify};
use tidemark_writer::Writer;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// Moves time-series events from Kinesis or SQS into per-period DynamoDB
/// tables with write-sharded keys.
#[derive(Debug, Parser)]
#[command(name = "tidemark", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the worker: read the source, write DynamoDB, until SIGTERM/SIGINT.
    #[command(
        after_help = "Examples:\n  tidemark run --config localstack/tidemark.toml\n  TIDEMARK__SOURCE__STREAM=events tidemark run --config deploy/tidemark.toml"
    )]
    Run(ConfigArg),
    /// Size tables, write shards, Kinesis shards and monthly cost.
    #[command(
        after_help = "Examples:\n  tidemark plan --events-per-sec 5000 --peak-events-per-sec 6000 --item-bytes 1000\n  tidemark plan --events-per-sec 600 --item-bytes 180 --json\n  tidemark plan --events-per-sec 2000 --sample-event '{\"deviceId\":\"d1\",\"timestamp\":1763790000000,\"t\":21.5}'"
    )]
    Plan(PlanArgs),
    /// Print the table and key one event is written to, as `run` would.
    #[command(
        after_help = "Example:\n  tidemark key --config localstack/tidemark.toml --event '{\"deviceId\":\"d1\",\"timestamp\":\"2026-11-22T05:00:00Z\",\"eventId\":\"e1\"}'"
    )]
    Key(KeyArgs),
    /// Table maintenance: one round, or a listing of the period tables.
    #[command(
        after_help = "Examples:\n  tidemark tables ensure --config localstack/tidemark.toml\n  tidemark tables rotate --config localstack/tidemark.toml --now 2026-11-23T00:20:00Z --dry-run\n  tidemark tables list --config localstack/tidemark.toml"
    )]
    Tables(TablesArgs),
    /// Send synthetic IoT events (temperature, humidity, pressure) to the
    /// configured source (Kinesis stream or SQS queue).
    #[command(
        after_help = "Examples:\n  tidemark produce --config localstack/tidemark.toml --devices 200 --rate 2000 --count 50000 --hot-factor 20\n  tidemark produce --config localstack/tidemark.toml --count 1000 --manifest produced.jsonl"
    )]
    Produce(ProduceArgs),
    /// Check that every event of a manifest (from produce --manifest) is
    /// stored, with the right content, where `run` writes it.
    #[command(
        after_help = "Example:\n  tidemark verify --config localstack/tidemark.toml --manifest produced.jsonl\n\nExit status: 0 every event stored as produced, 1 some missing or different,\n69 DynamoDB unavailable (nothing answered for 120 s)."
    )]
    Verify(VerifyArgs),
    /// Read an entity's events back (parallel queries, merged in time order).
    #[command(
        after_help = "Examples:\n  tidemark query --config localstack/tidemark.toml --entity device-0000 --latest\n  tidemark query --config localstack/tidemark.toml --entity device-0007 --from 2026-11-22T05:00:00Z --to 2026-11-22T06:00:00Z --format csv"
    )]
    Query(QueryArgs),
    /// Per shard: owner, checkpoint and lag; per table: period, state, capacity.
    #[command(after_help = "Example:\n  tidemark status --config localstack/tidemark.toml")]
    Status(StatusArgs),
    /// Record a stream's raw records (all shards, from the oldest record to
    /// the current end) into a fixture file (JSON lines).
    #[command(
        after_help = "Example:\n  tidemark record --config localstack/tidemark.toml --out tests/fixtures/my-stream.jsonl"
    )]
    Record(RecordArgs),
    /// Replay a fixture through the same pipeline `run` uses (route, write,
    /// dead letters), with no Kinesis at all.
    #[command(
        after_help = "Example:\n  tidemark replay --config localstack/tidemark.toml --fixture tests/fixtures/iot_plain.jsonl"
    )]
    Replay(ReplayArgs),
    /// Exit 0 when the local worker's /healthz answers (container health check).
    #[command(after_help = "Example:\n  tidemark healthcheck --addr 127.0.0.1:9102")]
    Healthcheck(HealthcheckArgs),
}

#[derive(Debug, Args)]
struct ProduceArgs {
    #[command(flatten)]
    config: ConfigArg,
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
    /// Hide the progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Events to look for, one JSON per line.
    #[arg(long)]
    manifest: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct QueryArgs {
    #[command(flatten)]
    config: ConfigArg,
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
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Jsonl)]
    format: OutputFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum OutputFormat {
    /// One JSON object per line.
    Jsonl,
    /// Comma-separated values with a header.
    Csv,
    /// Aligned columns.
    Table,
}

#[derive(Debug, Args)]
struct StatusArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RecordArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Fixture file to write.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct ReplayArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Fixture file to replay.
    #[arg(long)]
    fixture: PathBuf,
    /// Hide the progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct HealthcheckArgs {
    /// The worker's telemetry address.
    #[arg(
        long,
        default_value = "127.0.0.1:9102",
        env = "TIDEMARK_HEALTHCHECK_ADDR"
    )]
    addr: std::net::SocketAddr,
    /// Path to check (/healthz: alive; /readyz: ready).
    #[arg(long, default_value = "/healthz")]
    path: String,
}

#[derive(Debug, Args)]
struct TablesArgs {
    #[command(subcommand)]
    action: TablesAction,
    #[command(flatten)]
    config: ConfigArg,
    /// Act as if it were this time (RFC 3339); default: now.
    #[arg(long, global = true)]
    now: Option<DateTime<Utc>>,
    /// Print the actions without taking them.
    #[arg(long, global = true)]
    dry_run: bool,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Clone, Copy, Subcommand)]
enum TablesAction {
    /// Create the current period's table and, when due, the next one.
    Ensure,
    /// A full round: create, resize to each state's tier, delete or tag expired.
    Rotate,
    /// List the period tables with their period, state and capacity.
    List,
}

#[derive(Debug, Args)]
struct ConfigArg {
    /// Config file (TOML); every key can also be set as TIDEMARK__SECTION__KEY.
    #[arg(long, short, env = "TIDEMARK_CONFIG", global = true)]
    config: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// Average events per second (whole stream).
    #[arg(long)]
    events_per_sec: f64,
    /// Peak events per second (whole stream); default: the average.
    #[arg(long)]
    peak_events_per_sec: Option<f64>,
    /// Peak events per second of the busiest single entity; default: the whole peak.
    #[arg(long)]
    peak_key_events_per_sec: Option<f64>,
    /// Average item size in DynamoDB, bytes.
    #[arg(
        long,
        conflicts_with = "sample_event",
        required_unless_present = "sample_event"
    )]
    item_bytes: Option<u64>,
    /// A sample event (JSON) to size instead of --item-bytes (default event fields).
    #[arg(long)]
    sample_event: Option<String>,
    /// Retention in days.
    #[arg(long, default_value_t = 30)]
    retention_days: u64,
    /// Head-room multiplier for the recommended write shards.
    #[arg(long, default_value_t = 2.0)]
    safety_factor: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct KeyArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The event, as the JSON the source would deliver.
    #[arg(long)]
    event: String,
    /// "Now" for period checks (RFC 3339); default: the current time.
    #[arg(long)]
    now: Option<DateTime<Utc>>,
}

// The data path allocates a few small blocks per record (strings of the
// record, its key and item bytes), freed on other threads; mimalloc served
// a 200k-record replay with 19% less CPU than glibc malloc (2.37 s against
// 2.93 s, three alternating runs each). Built with `no_thp` (workspace
// Cargo.toml): with transparent huge pages, each page mimalloc purged and
// reused came back as a fresh 2 MiB fault to clear (~11% of the replay's
// CPU in `clear_page_erms`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the whole cause chain on one line, without the
            // backtrace anyhow would add under RUST_BACKTRACE.
            eprintln!("error: {e:#}");
            // EX_UNAVAILABLE: the backend, not the data, is the problem, so
            // a caller (scripts/demo) can tell "try later" from "missing".
            if let Some(VerifyError::Unavailable { .. }) = e.downcast_ref::<VerifyError>() {
                return std::process::ExitCode::from(69);
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => cmd_plan(&args),
        Command::Key(args) => cmd_key(&args),
        Command::Healthcheck(args) => runtime()?.block_on(async {
            tidemark_worker::telemetry::check(
                args.addr,
                &args.path,
                std::time::Duration::from_secs(3),
            )
            .await
            .map_err(anyhow::Error::msg)
        }),
        Command::Produce(args) => {
            let config = load(&args.config)?;
            runtime()?.block_on(cmd_produce(&config, &args))
        }
        Command::Verify(args) => {
            let config = load(&args.config)?;
            runtime()?.block_on(cmd_verify(&config, &args))
        }
        Command::Query(args) => {
            let config = load(&args.config)?;
            runtime()?.block_on(cmd_query(&config, &args))
        }
        Command::Status(args) => {
            let config = load(&args.config)?;
            runtime()?.block_on(cmd_status(&config, &args))
        }
        Command::Record(args) => {
            let config = load(&args.config)?;
            runtime()?.block_on(cmd_record(&config, &args))
        }
        Command::Replay(args) => {
            let config = load(&args.config)?;
            runtime()?.block_on(cmd_replay(&config, &args))
        }
        Command::Tables(args) => {
            let config = load(&args.config)?;
            runtime()?.block_on(cmd_tables(&config, &args))
        }
        Command::Run(args) => {
            let config = load(&args)?;
            init_logs(&config);
            runtime()?.block_on(cmd_run(config))
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn table_manager(config: &Config, dynamodb: aws_sdk_dynamodb::Client) -> TableManager {
    let policy = TablePolicy::new(
        &config.schema,
        config.tiers,
        config.billing,
        config.maintenance.on_expiry,
    );
    TableManager::new(dynamodb, policy)
}

async fn cmd_tables(config: &Config, args: &TablesArgs) -> Result<()> {
    let sdk = tidemark_worker::sdk::load().await;
    let manager = table_manager(config, aws_sdk_dynamodb::Client::new(&sdk));
    let now = args.now.unwrap_or_else(Utc::now);
    let kind = match args.action {
        TablesAction::List => {
            let tables = manager.list(now).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&tables)?);
            } else {
                println!(
                    "{:<40} {:<14} {:<9} {:<10} {:>6} {:>6}",
                    "TABLE", "PERIOD", "STATE", "STATUS", "RCU", "WCU"
                );
                for t in &tables {
                    let (r, w) = t
                        .capacity
                        .map_or(("-".to_string(), "on-demand".to_string()), |c| {
                            (c.read.to_string(), c.write.to_string())
                        });
                    let state = serde_json::to_value(t.state)?;
                    println!(
                        "{:<40} {:<14} {:<9} {:<10} {:>6} {:>6}",
                        t.name,
                        t.period,
                        state.as_str().unwrap_or_default(),
                        t.status,
                        r,
                        w
                    );
                }
            }
            return Ok(());
        }
        TablesAction::Ensure => RoundKind::Ensure,
        TablesAction::Rotate => RoundKind::Rotate,
    };
    let applied = manager.round(now, kind, args.dry_run).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&applied)?);
    } else if applied.is_empty() {
        println!("nothing to do at {}", now.to_rfc3339());
    } else {
        for a in &applied {
            let what = serde_json::to_string(&a.action)?;
            match (&a.error, args.dry_run) {
                (_, true) => println!("would {what}"),
                (None, false) => println!("done  {what}"),
                (Some(e), false) => println!("FAILED {what}: {e} (retried next round)"),
            }
        }
    }
    if applied.iter().any(|a| a.error.is_some()) {
        bail!("some maintenance actions failed; they are retried next round");
    }
    Ok(())
}

/// Runs a maintenance round every interval while holding the maintenance
/// lease; releases it at shutdown.
async fn maintain(
    manager: TableManager,
    lease: MaintenanceLease,
    interval: std::time::Duration,
    shutdown: CancellationToken,
) {
    if let Err(e) = lease.ensure_table().await {
        error!(error = %e, "maintenance disabled: cannot use the coordinator table");
        return;
    }
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        match lease.try_acquire(Utc::now()).await {
            Ok(true) => {
                if let Err(e) = manager.round(Utc::now(), RoundKind::Rotate, false).await {
                    warn!(error = %e, "maintenance round failed; retrying next round");
                }
            }
            Ok(false) => {}
            Err(e) => warn!(error = %e, "maintenance lease unavailable"),
        }
    }
    if let Err(e) = lease.release().await {
        warn!(error = %e, "releasing the maintenance lease failed; it expires by itself");
    }
}

async fn cmd_produce(config: &Config, args: &ProduceArgs) -> Result<()> {
    use std::io::Write as _;
    let sdk = tidemark_worker::sdk::load().await;
    let target = match &config.source {
        SourceConfig::Kinesis(k) if args.aggregate > 1 => Target::KinesisAggregated(
            aws_sdk_kinesis::Client::new(&sdk),
            stream_name(&k.stream),
            args.aggregate,
        ),
        SourceConfig::Kinesis(k) => {
            Target::Kinesis(aws_sdk_kinesis::Client::new(&sdk), stream_name(&k.stream))
        }
        SourceConfig::Sqs(s) => Target::Sqs(aws_sdk_sqs::Client::new(&sdk), s.queue_url.clone()),
    };
    let spec = ProduceSpec {
        devices: args.devices,
        count: args.count,
        hot_factor: args.hot_factor,
        seed: args.seed,
    };
    let mut manifest = match &args.manifest {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .with_context(|| format!("creating manifest {}", p.display()))?,
        )),
        None => None,
    };
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(args.count)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} events {per_sec} eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
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
            let events: Vec<_> = (n..end).map(|i| spec.event(i, now)).collect();
            if let Some(m) = manifest.as_mut() {
                for e in &events {
                    serde_json::to_writer(&mut *m, e)?;
                    m.write_all(b"\n")?;
                }
            }
            let target = target.clone();
            in_flight.push(async move { target.send(&events).await.map(|()| events.len() as u64) });
            n = end;
        }
        if let Some(done) = futures::StreamExt::next(&mut in_flight).await {
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
    println!(
        "produced {} events from {} devices in {:.1}s ({:.0} events/s)",
        args.count,
        args.devices,
        secs,
        args.count as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// The stream name of a name or ARN (`arn:aws:kinesis:r:a:stream/NAME`).
fn stream_name(stream: &str) -> String {
    stream
        .rsplit_once(":stream/")
        .map_or(stream, |(_, n)| n)
        .to_string()
}

async fn cmd_verify(config: &Config, args: &VerifyArgs) -> Result<()> {
    let sdk = tidemark_worker::sdk::load().await;
    let router = Router::new(config.schema.clone())?;
    let text = std::fs::read_to_string(&args.manifest)
        .with_context(|| format!("reading {}", args.manifest.display()))?;
    let events: Vec<Vec<u8>> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.as_bytes().to_vec())
        .collect();
    let options = VerifyOptions::for_sdk(&sdk);
    let report = verify(
        &aws_sdk_dynamodb::Client::new(&sdk),
        &router,
        &events,
        &options,
    )
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "events {}  found {}  missing {}  mismatched {}  unroutable {}",
            report.events, report.found, report.missing, report.mismatched, report.unroutable
        );
        for e in &report.examples {
            println!("  {e}");
        }
    }
    if !report.complete() {
        bail!(
            "{} of {} events are not stored as produced",
            report.events - report.found,
            report.events
        );
    }
    Ok(())
}

async fn cmd_query(config: &Config, args: &QueryArgs) -> Result<()> {
    use tidemark_schema::query::TimeRange;
    let sdk = tidemark_worker::sdk::load().await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let items = if args.latest {
        let now = Utc::now();
        let retention = chrono::Duration::from_std(config.schema.retention)
            .unwrap_or(chrono::Duration::days(30));
        let range = TimeRange {
            start_ms: (now - retention).timestamp_millis(),
            end_ms: (now
                + chrono::Duration::from_std(config.schema.max_future_skew).unwrap_or_default())
            .timestamp_millis(),
        };
        query::latest(&client, &config.schema, &args.entity, range)
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
        query::range(&client, &config.schema, &args.entity, range).await?
    };
    let rows: Vec<serde_json::Value> = items.iter().map(query::to_json).collect();
    print_rows(&rows, args.format, &config.schema)?;
    Ok(())
}

/// Prints items: the time, entity and event id columns first, then the rest
/// in name order.
fn print_rows(
    rows: &[serde_json::Value],
    format: OutputFormat,
    schema: &RouterConfig,
) -> Result<()> {
    if let OutputFormat::Jsonl = format {
        for r in rows {
            println!("{r}");
        }
        return Ok(());
    }
    let first = [
        schema.attributes.timestamp.clone(),
        schema.attributes.entity.clone(),
        schema.attributes.event_id.clone(),
    ];
    let mut rest = std::collections::BTreeSet::new();
    for r in rows {
        if let Some(o) = r.as_object() {
            rest.extend(o.keys().filter(|k| !first.contains(k)).cloned());
        }
    }
    let columns: Vec<String> = first.into_iter().chain(rest).collect();
    let cell = |r: &serde_json::Value, c: &str| match r.get(c) {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    match format {
        OutputFormat::Csv => {
            let quote = |s: String| {
                if s.contains([',', '"', '\n']) {
                    format!("\"{}\"", s.replace('"', "\"\""))
                } else {
                    s
                }
            };
            println!(
                "{}",
                columns
                    .iter()
                    .cloned()
                    .map(quote)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            for r in rows {
                println!(
                    "{}",
                    columns
                        .iter()
                        .map(|c| quote(cell(r, c)))
                        .collect::<Vec<_>>()
                        .join(",")
                );
            }
        }
        OutputFormat::Table => {
            let widths: Vec<usize> = columns
                .iter()
                .map(|c| {
                    rows.iter()
                        .map(|r| cell(r, c).len())
                        .max()
                        .unwrap_or(0)
                        .max(c.len())
                })
                .collect();
            let line = |cells: Vec<String>| {
                cells
                    .iter()
                    .zip(&widths)
                    .map(|(c, w)| format!("{c:<w$}"))
                    .collect::<Vec<_>>()
                    .join("  ")
            };
            println!("{}", line(columns.clone()));
            for r in rows {
                println!("{}", line(columns.iter().map(|c| cell(r, c)).collect()));
            }
        }
        OutputFormat::Jsonl => {}
    }
    Ok(())
}

fn kinesis_source(config: &Config) -> Result<&tidemark_consumer::KinesisConfig> {
    match &config.source {
        SourceConfig::Kinesis(k) => Ok(k),
        SourceConfig::Sqs(_) => {
            bail!("this command needs a Kinesis source (source.kind = \"kinesis\")")
        }
    }
}

fn spinner(message: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(message.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

async fn cmd_record(config: &Config, args: &RecordArgs) -> Result<()> {
    let k = kinesis_source(config)?;
    let sdk = tidemark_worker::sdk::load().await;
    let bar = spinner(&format!("recording {}", k.stream));
    let n = tidemark_consumer::fixture::Recorder::new(aws_sdk_kinesis::Client::new(&sdk))
        .record(&stream_name(&k.stream), &args.out)
        .await?;
    bar.finish_and_clear();
    println!(
        "recorded {n} records of {} into {}",
        k.stream,
        args.out.display()
    );
    Ok(())
}

async fn cmd_replay(config: &Config, args: &ReplayArgs) -> Result<()> {
    // Scanned and checked up front; replayed from the file shard by shard.
    let replay = tidemark_consumer::fixture::ReplaySource::open(&args.fixture)?;
    let total = replay.len() as u64;
    let sdk = tidemark_worker::sdk::load().await;
    let Wiring {
        writer,
        writer_task,
        dead_task,
        pipeline,
        ..
    } = wire(config, &sdk).await?;
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(total)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} records {per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
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
    let pipe = tokio::spawn(async move { pipeline.run(pipe_rx).await });
    let summary = replay.replay(tx, CancellationToken::new()).await?;
    relay.await.context("relay task")?;
    let counts = pipe.await.context("pipeline task")??;
    let stats_handle = writer.clone();
    writer.close();
    writer_task.await.context("writer task")??;
    dead_task.await.context("dead-letter task")?;
    bar.finish_and_clear();
    println!(
        "replayed {} records from {} shards: {} stored, {} dead-lettered ({} corrupt aggregates)",
        counts.records,
        summary.per_shard.len(),
        stats_handle.stats().stored,
        counts.dead_lettered + stats_handle.stats().dead_lettered,
        summary.corrupt_aggregates
    );
    Ok(())
}

#[derive(Debug, serde::Serialize)]
struct ShardRow {
    shard: String,
    owner: Option<String>,
    checkpoint: String,
    parents: Vec<String>,
    millis_behind_latest: Option<i64>,
}

async fn cmd_status(config: &Config, args: &StatusArgs) -> Result<()> {
    use tidemark_consumer::lease::{Checkpoint, LeaseTable};
    let sdk = tidemark_worker::sdk::load().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let mut shards = Vec::new();
    if let SourceConfig::Kinesis(k) = &config.source {
        let kinesis = aws_sdk_kinesis::Client::new(&sdk);
        let stream = stream_name(&k.stream);
        let leases = match LeaseTable::new(dynamodb.clone(), k.lease_table.clone())
            .list()
            .await
        {
            Ok(l) => l,
            // No worker has run yet: no lease table, no shard to report.
            Err(e) if e.to_string().contains("ResourceNotFoundException") => {
                eprintln!(
                    "lease table {} does not exist yet (no worker has run)",
                    k.lease_table
                );
                Vec::new()
            }
            Err(e) => return Err(e.into()),
        };
        for l in leases {
            let (checkpoint, lag) = match &l.checkpoint {
                Checkpoint::At(p) => (
                    format!("{}.{}", p.sequence, p.sub_sequence),
                    lag_after(&kinesis, &stream, &l.key, p.sequence.as_str()).await,
                ),
                other => (format!("{other:?}").to_uppercase(), None),
            };
            shards.push(ShardRow {
                shard: l.key,
                owner: l.owner,
                checkpoint,
                parents: l.parents,
                millis_behind_latest: lag,
            });
        }
    }
    let tables = table_manager(config, dynamodb).list(Utc::now()).await?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "shards": shards, "tables": tables })
        );
        return Ok(());
    }
    if !shards.is_empty() {
        println!(
            "{:<24} {:<22} {:>12}  CHECKPOINT",
            "SHARD", "OWNER", "LAG (ms)"
        );
        for r in &shards {
            println!(
                "{:<24} {:<22} {:>12}  {}",
                r.shard,
                r.owner.as_deref().unwrap_or("-"),
                r.millis_behind_latest.map_or("-".into(), |m| m.to_string()),
                r.checkpoint
            );
        }
        println!();
    }
    println!(
        "{:<40} {:<14} {:<9} {:>6} {:>6}",
        "TABLE", "PERIOD", "STATE", "RCU", "WCU"
    );
    for t in &tables {
        let state = serde_json::to_value(t.state)?;
        let (r, w) = t
            .capacity
            .map_or(("-".to_string(), "on-demand".to_string()), |c| {
                (c.read.to_string(), c.write.to_string())
            });
        println!(
            "{:<40} {:<14} {:<9} {:>6} {:>6}",
            t.name,
            t.period,
            state.as_str().unwrap_or_default(),
            r,
            w
        );
    }
    Ok(())
}

/// MillisBehindLatest just after `sequence` (one GetRecords of one record).
async fn lag_after(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    shard: &str,
    sequence: &str,
) -> Option<i64> {
    let it = kinesis
        .get_shard_iterator()
        .stream_name(stream)
        .shard_id(shard)
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::AfterSequenceNumber)
        .starting_sequence_number(sequence)
        .send()
        .await
        .ok()?
        .shard_iterator?;
    kinesis
        .get_records()
        .shard_iterator(it)
        .limit(1)
        .send()
        .await
        .ok()?
        .millis_behind_latest
}

fn load(args: &ConfigArg) -> Result<Config> {
    Ok(Config::load(args.config.as_deref(), &process_env())?)
}

fn init_logs(config: &Config) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.telemetry.log_level));
    let json = match config.telemetry.log_format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn cmd_plan(args: &PlanArgs) -> Result<()> {
    let item_bytes = match (&args.item_bytes, &args.sample_event) {
        (Some(b), _) => *b,
        (None, Some(sample)) => {
            let router =
                Router::new(RouterConfig::with_prefix("plan")).context("default router")?;
            item_bytes_of_sample(&router, sample.as_bytes()).context("sizing --sample-event")?
        }
        (None, None) => bail!("give --item-bytes or --sample-event"),
    };
    let input = PlanInput {
        avg_events_per_sec: args.events_per_sec,
        peak_events_per_sec: args.peak_events_per_sec.unwrap_or(args.events_per_sec),
        peak_key_events_per_sec: args.peak_key_events_per_sec,
        avg_item_bytes: item_bytes,
        avg_record_bytes: None,
        retention: std::time::Duration::from_secs(args.retention_days * 86_400),
        safety_factor: args.safety_factor,
        prices: Prices::default(),
    };
    let p = plan(&input)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    let period = serde_json::to_value(p.recommended_period)?;
    let rows: [(&str, String); 9] = [
        ("WCU per item", p.wcu_per_item.to_string()),
        ("peak WCU", p.peak_wcu.to_string()),
        ("minimum write shards", p.min_write_shards.to_string()),
        (
            "recommended write shards",
            p.recommended_write_shards.to_string(),
        ),
        (
            "hours to fill a 10 GB partition",
            format!("{:.1}", p.partition_fill_hours),
        ),
        (
            "recommended period",
            period.as_str().unwrap_or_default().to_string(),
        ),
        ("Kinesis shards", p.kinesis_shards.to_string()),
        (
            "monthly cost, on-demand (USD)",
            format!("{:.2}", p.monthly_cost_on_demand_usd),
        ),
        (
            "monthly cost, provisioned (USD)",
            format!("{:.2}", p.monthly_cost_provisioned_usd),
        ),
    ];
    for (k, v) in rows {
        println!("{k:<34} {v:>12}");
    }
    println!("\nHow:");
    for line in &p.arithmetic {
        println!("  {line}");
    }
    Ok(())
}

fn cmd_key(args: &KeyArgs) -> Result<()> {
    let config = load(&args.config)?;
    let router = Router::new(config.schema.clone())?;
    // The same derived id `run` would give a record without an event id that
    // arrived at this position is not knowable here; a fixed CLI origin keeps
    // the output deterministic.
    let origin = Origin::Kinesis {
        stream: "cli".into(),
        shard_id: "shardId-000000000000".into(),
        sequence_number: "0".into(),
        sub_sequence_number: 0,
    };
    let now = args.now.unwrap_or_else(Utc::now);
    let routed = router.route(args.event.as_bytes(), &origin, now)?;
    // `pk` and `sk` are the values of the configured key attributes,
    // whatever they are named.
    let out = BTreeMap::from([
        ("table", routed.table.to_string()),
        ("pk", routed.key.pk().to_owned()),
        ("sk", routed.key.sk().to_owned()),
    ]);
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// The data path shared by `run` and `replay`: router, writer (creating
/// missing tables), dead letters, pipeline.
struct Wiring {
    manager: TableManager,
    writer: tidemark_writer::WriterHandle,
    writer_task: tokio::task::JoinHandle<Result<(), tidemark_writer::WriterError>>,
    dead_task: tokio::task::JoinHandle<()>,
    pipeline: Pipeline,
}

async fn wire(config: &Config, sdk: &aws_config::SdkConfig) -> Result<Wiring> {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let router = Arc::new(Router::new(config.schema.clone())?);
    let manager = table_manager(config, dynamodb.clone());
    // Tables for now are created before reading starts, so the first events
    // do not wait on a creation.
    if let Err(e) = manager.round(Utc::now(), RoundKind::Ensure, false).await {
        warn!(error = %e, "creating the current tables failed; they are created on first write");
    }
    // Writes bypass the SDK's operation layer (see tidemark_writer::transport)
    // but use the same region, credentials and endpoint.
    let transport = tidemark_writer::HttpTransport::from_sdk(sdk)?;
    let (writer, writer_task) = Writer::start(
        dynamodb.clone(),
        Arc::new(transport),
        config.writer.clone(),
        Arc::new(CreateMissingTables::new(manager.clone())),
    );
    let sink: Arc<dyn DeadLetterSink> = match &config.dead_letters {
        DeadLetterConfig::File { path } => Arc::new(FileSink::new(path.clone())),
        DeadLetterConfig::Sqs { queue_url } => Arc::new(SqsSink::new(
            aws_sdk_sqs::Client::new(sdk),
            queue_url.clone(),
        )),
        DeadLetterConfig::Dynamodb { table } => {
            Arc::new(DynamoDbSink::new(dynamodb.clone(), table.clone()))
        }
    };
    let (dead_letters, dead_task) = DeadLetters::start(sink);
    let pipeline = Pipeline::new(router, writer.clone(), dead_letters, system_clock());
    Ok(Wiring {
        manager,
        writer,
        writer_task,
        dead_task,
        pipeline,
    })
}

async fn cmd_run(config: Config) -> Result<()> {
    let prometheus = telemetry::install_recorder().context("installing the metrics recorder")?;
    let listener = tokio::net::TcpListener::bind(&config.telemetry.listen)
        .await
        .with_context(|| {
            format!(
                "telemetry.listen: cannot listen on {}",
                config.telemetry.listen
            )
        })?;
    let readiness = Arc::new(Readiness::default());
    let sdk = tidemark_worker::sdk::load().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let Wiring {
        manager,
        writer,
        writer_task,
        dead_task,
        pipeline,
    } = wire(&config, &sdk).await?;

    let shutdown = CancellationToken::new();
    tokio::spawn(watch_signals(shutdown.clone()));
    let telemetry_task = tokio::spawn(telemetry::serve(
        listener,
        prometheus,
        readiness.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(probe_dynamodb(
        dynamodb.clone(),
        readiness.clone(),
        shutdown.clone(),
    ));
    let maintenance = config.maintenance.enabled.then(|| {
        let owner = match &config.source {
            SourceConfig::Kinesis(k) => k.worker_id.clone(),
            SourceConfig::Sqs(_) => default_worker_id(&process_env()),
        };
        let lease = MaintenanceLease::new(
            dynamodb.clone(),
            config.maintenance.coordinator_table.clone(),
            owner,
            config.maintenance.interval * 3,
        );
        tokio::spawn(maintain(
            manager.clone(),
            lease,
            config.maintenance.interval,
            shutdown.clone(),
        ))
    });

    // A small channel: the pipeline's pace (the writer's backpressure) is
    // what the sources read at.
    let (tx, rx) = mpsc::channel(16);
    let pipe = tokio::spawn(async move { pipeline.run(rx).await });
    info!(listen = %config.telemetry.listen, "tidemark running");
    readiness
        .source_running
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let source_result = match config.source.clone() {
        SourceConfig::Kinesis(k) => {
            KinesisSource::new(k, aws_sdk_kinesis::Client::new(&sdk), dynamodb.clone())
                .run(tx, shutdown.clone())
                .await
                .map_err(anyhow::Error::from)
        }
        SourceConfig::Sqs(s) => SqsSource::new(s, aws_sdk_sqs::Client::new(&sdk))
            .run(tx, shutdown.clone())
            .await
            .map_err(anyhow::Error::from),
    };
    readiness
        .source_running
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let counts = pipe.await.context("pipeline task")??;
    // A handle kept for the final counters; close() ends the writer whatever
    // other handles exist.
    let stats_handle = writer.clone();
    writer.close();
    writer_task.await.context("writer task")??;
    dead_task.await.context("dead-letter task")?;
    if let Some(m) = maintenance {
        m.await.context("maintenance task")?;
    }
    shutdown.cancel();
    telemetry_task.await.context("telemetry task")?;
    let stats = stats_handle.stats();
    info!(
        records = counts.records,
        stored = stats.stored,
        dead_lettered = counts.dead_lettered,
        throttled_calls = stats.throttled_calls,
        "tidemark stopped"
    );
    source_result
}

/// Keeps `dynamodb_reachable` current for /readyz with a cheap call.
async fn probe_dynamodb(
    client: aws_sdk_dynamodb::Client,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(15));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let ok = client.list_tables().limit(1).send().await.is_ok();
        readiness
            .dynamodb_reachable
            .store(ok, std::sync::atomic::Ordering::Relaxed);
    }
}

/// First SIGTERM/SIGINT: graceful shutdown. Second: exit at once.
async fn watch_signals(shutdown: CancellationToken) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            error!(error = %e, "cannot watch SIGTERM");
            return;
        }
    };
    for n in 0..2 {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        if n == 0 {
            warn!("shutdown requested: finishing in-flight records (signal again to exit at once)");
            shutdown.cancel();
        } else {
            warn!("second signal: exiting now");
            std::process::exit(130);
        }
    }
}
