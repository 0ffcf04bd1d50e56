//! `chaos`: proves, with the real `tidemark` binary, that nothing is lost
//! or stalled under crashes, resharding, faults, throttling and poison.
//!
//! Run through `scripts/chaos` (which starts the local stack and builds the
//! binaries). It starts the limits proxy in-process (5xx faults and added
//! latency on), a 4-shard stream, and three `tidemark run` workers behind the
//! proxy; produces events (1% poison of six kinds) while it kills -9 a random
//! worker every 15 s and restarts it, splits a shard, merges two, and lowers
//! the active table's WCU for a while. Then it waits until every shard's
//! checkpoint is at its end, stops the workers with SIGTERM, and checks:
//! every valid event stored exactly once by key with its content, no other
//! items, every poison record dead-lettered with its reason, checkpoints at
//! the end, and no two workers holding one shard for more than one failover
//! time. Prints the figures; exits non-zero on any failure.
//!
//! `chaos brownout` runs one scenario instead: one worker; after a healthy
//! start every DynamoDB call is held past the attempt timeout for 60 s, then
//! DynamoDB recovers. It checks the same things and two figures: the
//! DynamoDB request rate during the brownout over the healthy rate
//! (amplification, at most 1.5) and the time from recovery until every
//! checkpoint is at its end (at most 30 s); its last line is
//! `brownout: lost N, duplicates N, amplification X.Yx, recovery N s`.
//!
//! `chaos bomb`, `chaos revoked` and `chaos dlq-hang` run one short
//! scenario each (`scenarios.rs`): a decompression bomb among good records,
//! the lease table's permission revoked under a running worker, and a
//! dead-letter queue that hangs while poison arrives.

mod check;
mod events;
mod overlap;
mod producer;
mod scenarios;
mod workercfg;
mod workers;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use aws_sdk_dynamodb::types::ProvisionedThroughput;
use chrono::Utc;
use clap::Parser;
use tidemark_consumer::lease::LeaseTable;
use tidemark_schema::Router;
use tidemark_tests::{LocalStack, TableCapacity, create_table, repo_root};
use tidemark_worker::config::Config;
use tidemark_worker::tools::produce::ProduceSpec;
use tokio_util::sync::CancellationToken;

use crate::workers::{Ending, Fleet, Launch};

fn duration(s: &str) -> Result<Duration, String> {
    humantime_serde::re::humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Named scenarios run instead of the full chaos run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    /// One worker; after a healthy start, every DynamoDB call is held past
    /// the attempt timeout for `--brownout-for`, then DynamoDB recovers.
    /// No kills, reshards, throttling, 5xx or poison: only the brownout.
    Brownout,
    /// One worker, hourly tables, default tiers, capacity enforced by the
    /// limits proxy, the worker's clock faked (libfaketime) to just before
    /// an hour boundary: it runs for `--late-up`, is stopped for
    /// `--late-down` while the period ends and events keep arriving, a
    /// quarter of them from a device flushing an hour-old buffer into a
    /// cold (1 WCU) table; then it catches up across the boundary. Checks
    /// the current events are all stored (in the old and the new period's
    /// tables) within `--late-current-within` of production's end, every
    /// checkpoint advances every `--late-check-every`, and every late event
    /// is stored or dead-lettered as `late_backlog`.
    Late,
    /// One worker; a gzip record inflating to `--bomb-lines` NDJSON events
    /// among `--bomb-good` good events: bounded memory, one dead letter,
    /// every good event stored, the checkpoint past it.
    Bomb,
    /// One worker; once it holds its leases, every call on the lease table
    /// is refused (AccessDenied): it must stop or turn unhealthy within
    /// three failover times.
    Revoked,
    /// One worker with an SQS dead-letter queue that hangs for
    /// `--hang-for` while poison arrives: every entry reaches the queue,
    /// none only a local file, no checkpoint passes an entry not yet stored.
    DlqHang,
}

/// Chaos run: three workers, faults, kills, reshards, throttling, poison.
#[derive(Debug, Clone, Parser)]
#[command(name = "chaos", about)]
struct Args {
    /// A named scenario instead of the full run (`brownout`, `bomb`,
    /// `revoked`, `dlq-hang`).
    #[arg(value_enum)]
    scenario: Option<Scenario>,
    /// brownout: how long every DynamoDB call is held.
    #[arg(long, default_value = "60s", value_parser = duration)]
    brownout_for: Duration,
    /// brownout: how long each DynamoDB call is held before it is forwarded
    /// (past the worker's 10 s attempt timeout).
    #[arg(long, default_value = "15s", value_parser = duration)]
    brownout_delay: Duration,
    /// brownout: healthy time before it starts (the baseline request rate
    /// is measured over its last two thirds).
    #[arg(long, default_value = "30s", value_parser = duration)]
    brownout_after: Duration,
    /// brownout: events produced, evenly over the healthy time and the
    /// brownout (production ends when DynamoDB recovers).
    #[arg(long, default_value_t = 12_000)]
    brownout_events: u64,
    /// late: events produced (current and late), evenly over
    /// `--late-produce-for`.
    #[arg(long, default_value_t = 8_000)]
    late_events: u64,
    /// late: every this-th event is late.
    #[arg(long, default_value_t = 4)]
    late_every: u64,
    /// late: how old the device's buffer is at the start (its table is
    /// past the grace, at the cold tier: 1 WCU).
    #[arg(long, default_value = "1h", value_parser = duration)]
    late_age: Duration,
    /// late: how long production lasts.
    #[arg(long, default_value = "60s", value_parser = duration)]
    late_produce_for: Duration,
    /// late: how long the worker runs before it is stopped.
    #[arg(long, default_value = "20s", value_parser = duration)]
    late_up: Duration,
    /// late: how long the worker is stopped; the hour boundary (of its
    /// faked clock) falls in the middle.
    #[arg(long, default_value = "30s", value_parser = duration)]
    late_down: Duration,
    /// late: the workers' `writer.late_max_wait`.
    #[arg(long, default_value = "30s", value_parser = duration)]
    late_max_wait: Duration,
    /// late: every shard's checkpoint must advance (or be at its end) at
    /// least this often once the worker runs.
    #[arg(long, default_value = "45s", value_parser = duration)]
    late_check_every: Duration,
    /// late: every current event must be stored within this long after
    /// production ends.
    #[arg(long, default_value = "60s", value_parser = duration)]
    late_current_within: Duration,
    /// bomb: `{}` lines the bomb record inflates to (3 bytes each).
    #[arg(long, default_value_t = 20_971_520)]
    bomb_lines: u64,
    /// bomb: good events around it (half before, half after).
    #[arg(long, default_value_t = 2_000)]
    bomb_good: u64,
    /// bomb: the worker's peak RSS must stay under this, bytes (about 35 MB
    /// idle; a bomb inflated whole would pass it).
    #[arg(long, default_value_t = 96_000_000)]
    bomb_rss_limit: u64,
    /// bomb: the checkpoint must pass the last record within this.
    #[arg(long, default_value = "60s", value_parser = duration)]
    bomb_within: Duration,
    /// bomb: a worker whose RSS passes this is killed (spares the machine
    /// when the bound does not hold), bytes.
    #[arg(long, default_value_t = 2_000_000_000)]
    rss_guard: u64,
    /// dlq-hang: how long every SQS call is held.
    #[arg(long, default_value = "35s", value_parser = duration)]
    hang_for: Duration,
    /// The `tidemark` binary to run as workers.
    #[arg(long)]
    tidemark: PathBuf,
    /// Records to produce (valid events and poison).
    #[arg(long, default_value_t = 100_000)]
    events: u64,
    /// Share of poison records.
    #[arg(long, default_value_t = 0.01)]
    poison_rate: f64,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Shards the stream starts with.
    #[arg(long, default_value_t = 4)]
    shards: i32,
    /// Kill -9 a random worker this often (0s: never).
    #[arg(long, default_value = "15s", value_parser = duration)]
    kill_every: Duration,
    /// Keep killing this long after production ended.
    #[arg(long, default_value = "45s", value_parser = duration)]
    kill_after: Duration,
    /// How long production lasts (paced).
    #[arg(long, default_value = "150s", value_parser = duration)]
    produce_for: Duration,
    /// Devices sending events (device-0000 is hot).
    #[arg(long, default_value_t = 300)]
    devices: u32,
    /// How many times the hot device's rate is the others'.
    #[arg(long, default_value_t = 20)]
    hot_factor: u32,
    /// Events per KPL aggregate record.
    #[arg(long, default_value_t = 50)]
    aggregate: usize,
    /// Probability of an injected 5xx on each DynamoDB and Kinesis request.
    #[arg(long, default_value_t = 0.02)]
    fault_rate: f64,
    /// Latency added to every request through the proxy, ms.
    #[arg(long, default_value_t = 5)]
    latency_ms: u64,
    /// Extra random latency, 0..=this ms.
    #[arg(long, default_value_t = 10)]
    jitter_ms: u64,
    /// The workers' lease failover time.
    #[arg(long, default_value = "6s", value_parser = duration)]
    failover: Duration,
    /// WCU the active table is lowered to (0: no throttling phase).
    #[arg(long, default_value_t = 100)]
    throttle_wcu: i64,
    /// How long the table stays lowered.
    #[arg(long, default_value = "20s", value_parser = duration)]
    throttle_for: Duration,
    /// After production (and the kills after it), how long the workers get
    /// to bring every checkpoint to its shard's end.
    #[arg(long, default_value = "600s", value_parser = duration)]
    timeout: Duration,
    /// Seed of the event generator and the faults (random by default).
    #[arg(long)]
    seed: Option<u64>,
    /// Self-test of the verifier: delete one stored event and copy another
    /// under a second key before checking, so the run must fail with one
    /// lost event, one extra item and one duplicate.
    #[arg(long, hide = true)]
    sabotage: bool,
    /// Keep the stream and tables after a passing run (a failing run always
    /// keeps them, for inspection).
    #[arg(long)]
    keep: bool,
    /// Directory for the config, the workers' logs and the summary
    /// (default: localstack/.run/<run id>).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Provisioned write capacity of the active tier (the config's default).
const ACTIVE_WCU: i64 = 1000;
/// Provisioned read capacity of the active tier.
const ACTIVE_RCU: i64 = 300;

fn say(msg: impl AsRef<str>) {
    eprintln!("chaos: {}", msg.as_ref());
}

fn config_toml(run: &str, args: &Args) -> String {
    let fmt = humantime_serde::re::humantime::format_duration;
    // The late scenario: a small in-flight bound (a table's share of it is
    // 1,000 items), a short late budget, and maintenance rounds often
    // enough to lift the frozen table while its backlog lasts.
    let (in_flight, late_wait, interval) = if args.scenario == Some(Scenario::Late) {
        (2000, fmt(args.late_max_wait).to_string(), "10s")
    } else {
        // Long: the one round at start must not undo the lowered WCU mid-run.
        (20000, "10m".to_string(), "1h")
    };
    let dead_letters = format!("kind = \"dynamodb\"\ntable = \"{run}-dead-letters\"");
    workercfg::WorkerToml {
        run,
        failover: args.failover,
        top: "",
        checkpoint_interval: "2s",
        shutdown_grace: "15s",
        source_extra: "",
        writer_extra: &format!(
            "max_in_flight_items = {in_flight}\nlate_max_wait = \"{late_wait}\"\n"
        ),
        dead_letters: &dead_letters,
        maintenance_interval: interval,
        listen: "127.0.0.1:0",
    }
    .render()
}

/// Splits the open shard with the widest hash range at its middle.
async fn split(k: &aws_sdk_kinesis::Client, stream: &str) -> Result<String> {
    let shards = open_shards(k, stream).await?;
    let (id, lo, hi) = shards
        .iter()
        .max_by_key(|(_, lo, hi)| hi - lo)
        .cloned()
        .context("no open shard")?;
    k.split_shard()
        .stream_name(stream)
        .shard_to_split(&id)
        .new_starting_hash_key((lo + (hi - lo) / 2).to_string())
        .send()
        .await
        .map_err(|e| anyhow!(aws_sdk_kinesis::error::DisplayErrorContext(e).to_string()))
        .context("SplitShard")?;
    wait_active(k, stream).await?;
    Ok(format!("split {id}"))
}

/// Merges the first two adjacent open shards.
async fn merge(k: &aws_sdk_kinesis::Client, stream: &str) -> Result<String> {
    let mut shards = open_shards(k, stream).await?;
    shards.sort_by_key(|s| s.1);
    let (a, b) = shards
        .windows(2)
        .find(|w| w[0].2 + 1 == w[1].1)
        .map(|w| (w[0].0.clone(), w[1].0.clone()))
        .context("no two adjacent open shards")?;
    k.merge_shards()
        .stream_name(stream)
        .shard_to_merge(&a)
        .adjacent_shard_to_merge(&b)
        .send()
        .await
        .map_err(|e| anyhow!(aws_sdk_kinesis::error::DisplayErrorContext(e).to_string()))
        .context("MergeShards")?;
    wait_active(k, stream).await?;
    Ok(format!("merge {a} + {b}"))
}

/// Open shards with their hash ranges.
async fn open_shards(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<Vec<(String, u128, u128)>> {
    let out = k
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .map_err(|e| anyhow!(aws_sdk_kinesis::error::DisplayErrorContext(e).to_string()))
        .context("ListShards")?;
    let mut open = Vec::new();
    for s in out.shards() {
        if s.sequence_number_range()
            .is_some_and(|r| r.ending_sequence_number().is_some())
        {
            continue;
        }
        let r = s.hash_key_range().context("shard without hash range")?;
        open.push((
            s.shard_id().to_string(),
            r.starting_hash_key().parse()?,
            r.ending_hash_key().parse()?,
        ));
    }
    Ok(open)
}

async fn wait_active(k: &aws_sdk_kinesis::Client, stream: &str) -> Result<()> {
    use aws_sdk_kinesis::types::StreamStatus;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = k.describe_stream_summary().stream_name(stream).send().await;
        if let Ok(d) = d
            && d.stream_description_summary()
                .is_some_and(|s| s.stream_status() == &StreamStatus::Active)
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("stream {stream} not ACTIVE within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn set_wcu(client: &aws_sdk_dynamodb::Client, table: &str, wcu: i64) -> Result<()> {
    client
        .update_table()
        .table_name(table)
        .provisioned_throughput(
            ProvisionedThroughput::builder()
                .read_capacity_units(ACTIVE_RCU)
                .write_capacity_units(wcu)
                .build()?,
        )
        .send()
        .await
        .map_err(|e| anyhow!(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string()))
        .with_context(|| format!("UpdateTable {table} to {wcu} WCU"))?;
    Ok(())
}

/// Chaos events, as they happened.
#[derive(Debug, Default)]
struct Timeline {
    reshards: Vec<String>,
    throttle: Option<(String, Duration)>,
    kills_during: u64,
    kills_after: u64,
    crashed: Vec<String>,
    notes: Vec<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let ok = run(args).await?;
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

async fn run(mut args: Args) -> Result<bool> {
    if let Some(s @ (Scenario::Bomb | Scenario::Revoked | Scenario::DlqHang)) = args.scenario {
        return scenarios::run(s, &args).await;
    }
    let brownout = args.scenario == Some(Scenario::Brownout);
    if brownout {
        args.events = args.brownout_events;
        args.produce_for = args.brownout_after + args.brownout_for;
        args.poison_rate = 0.0;
        args.workers = 1;
        args.kill_every = Duration::ZERO;
        args.kill_after = Duration::ZERO;
        args.fault_rate = 0.0;
        args.latency_ms = 0;
        args.jitter_ms = 0;
        args.throttle_wcu = 0;
    }
    let late = args.scenario == Some(Scenario::Late);
    if late {
        args.events = args.late_events;
        args.produce_for = args.late_produce_for;
        args.poison_rate = 0.0;
        args.workers = 1;
        args.kill_every = Duration::ZERO;
        args.kill_after = Duration::ZERO;
        args.fault_rate = 0.0;
        args.latency_ms = 0;
        args.jitter_ms = 0;
        args.throttle_wcu = 0;
        // One event per record: a dead letter's payload is the event.
        args.aggregate = 1;
        // Before anything is created: without libfaketime, nothing to run.
        faketime_lib()?;
    }
    let began = Instant::now();
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let run_id = format!(
        "chaos-{}-{}",
        Utc::now().format("%H%M%S"),
        std::process::id()
    );
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| repo_root().join("localstack/.run").join(&run_id));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let stack = LocalStack::from_env().await.map_err(|e| anyhow!(e))?;

    // The limits proxy, in-process, faults on.
    let mut lcfg = tidemark_limits::Config::with_upstreams(
        &stack.dynamodb_url,
        &stack.kinesis_url,
        &stack.sqs_url,
    );
    // Short burst credit: a lowered table throttles within seconds.
    lcfg.burst_secs = 10.0;
    lcfg.faults.fault_dynamodb_errors = args.fault_rate;
    lcfg.faults.fault_kinesis_errors = args.fault_rate;
    lcfg.faults.fault_latency_ms = args.latency_ms;
    lcfg.faults.fault_jitter_ms = args.jitter_ms;
    lcfg.faults.fault_seed = Some(seed);
    lcfg.validate().map_err(|e| anyhow!(e))?;
    let proxy = Arc::new(tidemark_limits::Proxy::new(lcfg)?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let proxy_url = format!("http://{}", listener.local_addr()?);
    let stop_proxy = CancellationToken::new();
    let proxy_task = tokio::spawn(tidemark_limits::serve(
        listener,
        proxy.clone(),
        stop_proxy.clone().cancelled_owned(),
    ));

    // Config, shared by every worker.
    let toml = config_toml(&run_id, &args);
    let config_path = dir.join("tidemark.toml");
    std::fs::write(&config_path, &toml)?;
    let config = Config::from_toml(&toml, &config_path.display().to_string(), &BTreeMap::new())
        .map_err(|e| anyhow!("generated config: {e}"))?;
    let router = Router::new(config.schema.clone())?;
    let dead_table = format!("{run_id}-dead-letters");
    let lease_table = format!("{run_id}-leases");

    say(format!(
        "run {run_id}: {} records ({}% poison), {} workers, {} shards, kill every {:?}, faults {}% 5xx + {}..{} ms, seed {seed}",
        args.events,
        args.poison_rate * 100.0,
        args.workers,
        args.shards,
        args.kill_every,
        args.fault_rate * 100.0,
        args.latency_ms,
        args.latency_ms + args.jitter_ms
    ));
    say(format!("logs, config and summary in {}", dir.display()));

    // Control plane straight to the emulators: the set-up is not under test.
    let kinesis = stack.kinesis();
    let dynamodb = stack.dynamodb();
    tidemark_tests::create_stream(&kinesis, &run_id, args.shards).await;
    create_table(&dynamodb, &dead_table, true, TableCapacity::OnDemand).await;
    // The late scenario's clock: the worker's (faked) and the events' clock
    // run `offset` ahead of this host's, so that an hour boundary falls in
    // the middle of the worker's stop.
    let clock = if late {
        Some(LateClock::new(&args)?)
    } else {
        None
    };
    let offset = clock
        .as_ref()
        .map_or(chrono::Duration::zero(), |c| c.offset);
    // The late scenario's old period (the device's buffer): its table
    // exists, past the grace, at the cold tier (100 RCU / 1 WCU) as
    // maintenance leaves it.
    let late_at = Utc::now() + offset - chrono::Duration::from_std(args.late_age)?;
    let late_table = router.naming().table_for(late_at.timestamp_millis());
    if let Some(c) = &clock {
        create_table(
            &dynamodb,
            &late_table,
            true,
            TableCapacity::Provisioned {
                read: 100,
                write: 1,
            },
        )
        .await;
        // Tagged as the worker tags its tables, or maintenance leaves it
        // alone (and never lifts it).
        tag_period_table(&dynamodb, &late_table, &run_id, &config).await?;
        say(format!(
            "late: worker clock +{} s (libfaketime): now {}, boundary {} in {:?}; worker up {:?}, then down {:?} across it",
            c.offset.num_seconds(),
            (Utc::now() + offset).format("%H:%M:%S"),
            c.boundary.format("%H:%M:%S"),
            c.boundary_at.saturating_duration_since(Instant::now()),
            args.late_up,
            args.late_down
        ));
        say(format!(
            "late: {late_table} at 1 WCU; every {}th event from a buffer {:?} old",
            args.late_every, args.late_age
        ));
    }

    let mut fleet = Fleet::start(
        Launch {
            tidemark: args.tidemark.clone(),
            config: config_path.clone(),
            dir: dir.clone(),
            endpoint: proxy_url.clone(),
            region: stack
                .sdk
                .region()
                .map_or_else(|| "us-east-1".to_string(), ToString::to_string),
            env: clock.as_ref().map_or_else(Vec::new, LateClock::env),
        },
        args.workers,
    )?;

    // Producer.
    let retention = chrono::Duration::from_std(config.schema.retention)?;
    let spec = producer::ProducerSpec {
        events: ProduceSpec {
            devices: args.devices,
            count: args.events,
            hot_factor: args.hot_factor,
            seed,
        },
        plan: events::plan(args.events, args.poison_rate, seed),
        aggregate: args.aggregate,
        duration: args.produce_for,
        retention,
        late: late.then_some(producer::LateEvents {
            every: args.late_every,
            at: late_at,
        }),
        clock_offset: offset,
    };
    let progress = Arc::new(AtomicU64::new(0));
    let produce_task = tokio::spawn(producer::produce(
        stack.kinesis_at(&proxy_url),
        run_id.clone(),
        spec,
        progress.clone(),
    ));
    let proxied_ddb = stack.dynamodb_at(&proxy_url);

    // Chaos while producing, and for `kill_after` after.
    let mut tl = Timeline::default();
    let total = args.events.max(1);
    let mut next_kill = Instant::now() + args.kill_every;
    let mut produced = None;
    let mut produce_end: Option<Instant> = None;
    let mut throttled_at: Option<(Instant, String)> = None;
    let mut restored = false;
    let mut produce_task = Some(produce_task);
    // Brownout figures: DynamoDB requests at the start of the healthy
    // window, at the brownout's start and at its end.
    let production_start = Instant::now();
    let mut healthy_mark: Option<(Instant, u64)> = None;
    let mut brown_start: Option<(Instant, u64)> = None;
    let mut brown_end: Option<(Instant, u64)> = None;
    let ddb_requests = || proxy.stats().faults.dynamodb_requests;
    let mut watch = LateWatch::default();
    let leases = LeaseTable::new(dynamodb.clone(), lease_table.clone());
    if late {
        watch.worker_started = Some(Instant::now());
    }
    loop {
        if let Some(c) = &clock {
            let pct = progress.load(Ordering::Relaxed) as f64 / args.events.max(1) as f64 * 100.0;
            if watch.stopped.is_none() && Instant::now() + args.late_down / 2 >= c.boundary_at {
                // Killed, like a crash or a lost host: a SIGTERM would
                // drain the late backlog for up to shutdown_timeout, past
                // the boundary.
                let killed = fleet.kill(0)?;
                watch.stop_down();
                say(format!(
                    "late: worker {killed} killed -9 {:.0} s before the boundary ({pct:.0}% produced)",
                    c.boundary_at
                        .saturating_duration_since(Instant::now())
                        .as_secs_f64()
                ));
            }
            if watch.worker_started.is_none()
                && Instant::now() >= c.boundary_at + args.late_down / 2
            {
                fleet.add()?;
                watch.worker_started = Some(Instant::now());
                watch.restarted = true;
                say(format!(
                    "late: worker restarted {:.0} s past the boundary ({pct:.0}% produced)",
                    c.boundary_at.elapsed().as_secs_f64()
                ));
            }
            watch
                .sample(&kinesis, &leases, &run_id, None, args.late_check_every)
                .await?;
        }
        if brownout {
            let t = production_start.elapsed();
            if healthy_mark.is_none() && t >= args.brownout_after / 3 {
                healthy_mark = Some((Instant::now(), ddb_requests()));
            }
            if brown_start.is_none() && t >= args.brownout_after {
                brown_start = Some((Instant::now(), ddb_requests()));
                proxy.brownout(args.brownout_for, args.brownout_delay);
                say(format!(
                    "brownout: every DynamoDB call held {:?} for {:?}",
                    args.brownout_delay, args.brownout_for
                ));
            }
            if let Some((at, _)) = brown_start
                && brown_end.is_none()
                && at.elapsed() >= args.brownout_for
            {
                brown_end = Some((Instant::now(), ddb_requests()));
                say("brownout over: DynamoDB answers again");
            }
        }
        let done = progress.load(Ordering::Relaxed) as f64 / total as f64;
        if let Some(t) = produce_task.as_mut()
            && t.is_finished()
        {
            let p = t.await.context("producer task")??;
            say(format!(
                "produced {} records ({} Kinesis records) in {:.0} s",
                args.events,
                p.records,
                began.elapsed().as_secs_f64()
            ));
            produced = Some(p);
            produce_end = Some(Instant::now());
            produce_task = None;
        }
        let killing = match produce_end {
            None => true,
            Some(end) => end.elapsed() < args.kill_after,
        };
        if !args.kill_every.is_zero() && killing && Instant::now() >= next_kill {
            let slot = fastrand::usize(..fleet.slots());
            let killed = fleet.kill_and_restart(slot)?;
            if produce_end.is_some() {
                tl.kills_after += 1;
            } else {
                tl.kills_during += 1;
            }
            say(format!("kill -9 {killed} ({:.0}% produced)", done * 100.0));
            next_kill += args.kill_every;
        }
        for id in fleet.reap_crashed()? {
            say(format!("worker {id} exited on its own; restarted"));
            tl.crashed.push(id);
        }
        if !brownout && !late && tl.reshards.is_empty() && done >= 0.3 {
            let what = split(&kinesis, &run_id).await?;
            say(format!("{what} ({:.0}% produced)", done * 100.0));
            tl.reshards.push(what);
        }
        if !brownout && !late && tl.reshards.len() == 1 && done >= 0.6 {
            let what = merge(&kinesis, &run_id).await?;
            say(format!("{what} ({:.0}% produced)", done * 100.0));
            tl.reshards.push(what);
        }
        if args.throttle_wcu > 0 && throttled_at.is_none() && done >= 0.4 {
            let table = router.naming().table_for(Utc::now().timestamp_millis());
            match set_wcu(&proxied_ddb, &table, args.throttle_wcu).await {
                Ok(()) => {
                    say(format!("{table} lowered to {} WCU", args.throttle_wcu));
                    throttled_at = Some((Instant::now(), table));
                }
                Err(e) => tl
                    .notes
                    .push(format!("lowering WCU failed, retrying: {e:#}")),
            }
        }
        if let Some((at, table)) = &throttled_at
            && !restored
            && at.elapsed() >= args.throttle_for
        {
            match set_wcu(&proxied_ddb, table, ACTIVE_WCU).await {
                Ok(()) => {
                    say(format!("{table} back to {ACTIVE_WCU} WCU"));
                    tl.throttle = Some((table.clone(), at.elapsed()));
                    restored = true;
                }
                Err(e) => tl
                    .notes
                    .push(format!("restoring WCU failed, retrying: {e:#}")),
            }
        }
        if produce_task.is_none()
            && !killing
            && (restored || args.throttle_wcu <= 0)
            && (!brownout || brown_end.is_some())
            && (!late || watch.restarted)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let Some(produced) = produced else {
        bail!("producer ended without a result");
    };
    let production_s = produce_end.map_or(0.0, |e| (e - began).as_secs_f64());

    // Converge: every checkpoint at its shard's end, within the deadline.
    say("waiting until every shard's checkpoint is at its end");
    // Current events (late scenario): every one accepted by a period table
    // other than the late one.
    let current_events = (produced.valid.len() - produced.late.len()) as u64;
    let current_accepted = || -> u64 {
        proxy
            .stats()
            .dynamodb
            .tables
            .iter()
            .filter(|(n, _)| **n != late_table && router.naming().parse(n).is_some())
            .map(|(_, t)| t.stats.accepted_items)
            .sum()
    };
    let deadline = Instant::now() + args.timeout;
    let converge_start = Instant::now();
    // Recovery phases (brownout): items the proxy let through, sampled each
    // pass, give the first write after the recovery and when writing settled.
    let accepted_now = || -> u64 {
        proxy
            .stats()
            .dynamodb
            .tables
            .values()
            .map(|t| t.stats.accepted_items)
            .sum()
    };
    let accepted_at_end = accepted_now();
    let mut first_write: Option<f64> = None;
    let mut last_write: Option<(f64, u64)> = None;
    let mut ends;
    loop {
        if let Some((at, _)) = brown_end {
            let n = accepted_now();
            if n > last_write.map_or(accepted_at_end, |w| w.1) {
                let t = at.elapsed().as_secs_f64();
                first_write.get_or_insert(t);
                last_write = Some((t, n));
            }
        }
        for id in fleet.reap_crashed()? {
            say(format!("worker {id} exited on its own; restarted"));
            tl.crashed.push(id);
        }
        if late {
            watch
                .sample(
                    &kinesis,
                    &leases,
                    &run_id,
                    Some(&produced.last),
                    args.late_check_every,
                )
                .await?;
            if watch.current_stored_s.is_none() && current_accepted() >= current_events {
                watch.current_stored_s = produce_end.map(|e| e.elapsed().as_secs_f64());
            }
        }
        ends = check::checkpoints(&kinesis, &leases, &run_id, &produced.last).await?;
        if ends.iter().all(|e| e.at_end) {
            break;
        }
        if Instant::now() >= deadline {
            say("deadline passed with checkpoints short of their shard's end:");
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let converged = ends.iter().all(|e| e.at_end);
    if late && watch.current_stored_s.is_none() && current_accepted() >= current_events {
        watch.current_stored_s = produce_end.map(|e| e.elapsed().as_secs_f64());
    }
    let converge_s = converge_start.elapsed().as_secs_f64();
    // Recovery: from DynamoDB answering again until every checkpoint is at
    // its shard's end (production ended with the brownout: lag 0).
    let recovery_s = brown_end.map(|(at, _)| at.elapsed().as_secs_f64());
    let phases = match (first_write, last_write) {
        (Some(first), Some((last, n))) => format!(
            "first write +{first:.0} s, writing settled +{last:.0} s ({} items, {:.0}/s)",
            n - accepted_at_end,
            (n - accepted_at_end) as f64 / (last - first).max(1.0)
        ),
        _ => "no write after the recovery".to_string(),
    };
    say(format!(
        "checkpoints at end after {converge_s:.0} s more: {converged}"
    ));

    // Stop the workers gracefully, then check everything.
    let unclean = fleet.stop_all(Duration::from_secs(60)).await?;
    let final_ends = check::checkpoints(&kinesis, &leases, &run_id, &produced.last).await?;
    if args.sabotage {
        let victim = check::sabotage(&dynamodb, &router, &produced.valid).await?;
        say(format!(
            "sabotage: deleted {victim}; the verifier must report them"
        ));
    }
    let items = check::items(&dynamodb, &router, &produced.valid).await?;
    let dead = check::dead_letters(&dynamodb, &dead_table, &produced.poison).await?;
    let late_report = if late {
        Some(late_figures(&dynamodb, &dead_table, &produced, &items).await?)
    } else {
        None
    };
    let stats = proxy.stats();
    stop_proxy.cancel();
    let _ = proxy_task.await;

    // Lease overlap from the logs.
    let mut intervals = Vec::new();
    // Kept for a failing brownout's report below.
    let mut logs = Vec::new();
    for inc in &fleet.history {
        let text = std::fs::read_to_string(&inc.log).unwrap_or_default();
        let ended = inc.ended.as_ref().map_or_else(Utc::now, |(t, _)| *t);
        intervals.extend(overlap::intervals(&inc.id, &text, ended));
        logs.push((inc.id.clone(), text));
    }
    let boundary = match &clock {
        Some(c) => Some(boundary_figures(&dynamodb, &router, c, &stats, &logs).await),
        None => None,
    };
    let limit_ms = i64::try_from(args.failover.as_millis()).unwrap_or(i64::MAX);
    let ov = overlap::overlaps(&intervals, limit_ms);

    // Figures.
    let accepted_in_tables: u64 = stats
        .dynamodb
        .tables
        .iter()
        .filter(|(name, _)| items.tables.contains(name))
        .map(|(_, t)| t.stats.accepted_items)
        .sum();
    let throttled_items = stats.dynamodb.counters.items_throttled;
    let mut failures = Vec::new();
    match &late_report {
        // Late events may be dead-lettered (late_backlog) instead of stored.
        Some(l) => {
            failures.extend(l.failures(&watch, &args));
            failures.extend(boundary.iter().flat_map(|b| b.failures(&watch)));
        }
        None if items.lost > 0 => failures.push(format!("{} valid events lost", items.lost)),
        None => {}
    }
    if items.mismatched > 0 {
        failures.push(format!("{} items with wrong content", items.mismatched));
    }
    if items.extra > 0 {
        failures.push(format!("{} extra items", items.extra));
    }
    if items.duplicates > 0 {
        failures.push(format!("{} events stored under two keys", items.duplicates));
    }
    if dead.missing > 0 || dead.wrong_reason > 0 || (dead.unexpected > 0 && !late) {
        failures.push(format!(
            "dead letters: {} poison missing, {} with a wrong reason, {} unexpected entries",
            dead.missing, dead.wrong_reason, dead.unexpected
        ));
    }
    if !converged || !final_ends.iter().all(|e| e.at_end) {
        failures.push("a checkpoint is not at its shard's end".into());
    }
    if !ov.over_limit.is_empty() {
        failures.push(format!(
            "{} lease overlaps longer than the failover time",
            ov.over_limit.len()
        ));
    }
    if !tl.crashed.is_empty() {
        failures.push(format!("workers exited on their own: {:?}", tl.crashed));
    }
    if !unclean.is_empty() {
        failures.push(format!(
            "workers not stopped cleanly by SIGTERM: {unclean:?}"
        ));
    }
    if args.throttle_wcu > 0 && throttled_items == 0 {
        failures.push("the lowered table never throttled a write".into());
    }
    if !brownout && !late && tl.reshards.len() < 2 {
        failures.push("the split and the merge did not both happen".into());
    }
    // Requests per second the proxy received while healthy and during the
    // brownout, and their ratio.
    let amplification = match (healthy_mark, brown_start, brown_end) {
        (Some((h, hn)), Some((b, bn)), Some((e, en))) => {
            let healthy = (bn - hn) as f64 / (b - h).as_secs_f64().max(1e-3);
            let during = (en - bn) as f64 / (e - b).as_secs_f64().max(1e-3);
            Some((healthy, during, during / healthy.max(1e-9)))
        }
        _ => None,
    };
    if brownout {
        match amplification {
            Some((_, _, a)) if a > 1.5 => failures.push(format!(
                "amplification {a:.2}x: more than 1.5x the healthy request rate during the brownout"
            )),
            Some(_) => {}
            None => failures.push("the brownout did not run its course".into()),
        }
        match recovery_s {
            Some(r) if r > 30.0 => failures.push(format!(
                "recovery took {r:.0} s (at most 30 s after DynamoDB answers again)"
            )),
            Some(_) => {}
            None => failures.push("no recovery measured".into()),
        }
    }

    let valid = produced.valid.len() as u64;
    let poison = produced.poison.len() as u64;
    let kills = fleet.kills;
    let redeliveries = accepted_in_tables.saturating_sub(items.found + items.mismatched);
    let total_s = began.elapsed().as_secs_f64();
    let passed = failures.is_empty();
    let closed = final_ends.iter().filter(|e| e.closed).count();
    println!();
    println!(
        "chaos run {run_id}: {}",
        if passed { "PASS" } else { "FAIL" }
    );
    println!(
        "  events              {} ({valid} valid, {poison} poison)",
        args.events
    );
    println!(
        "  duration            {total_s:.0} s (production {production_s:.0} s, then checkpoints at end in {converge_s:.0} s)"
    );
    println!(
        "  workers             {} slots, {} incarnations; kills {kills} ({} during production, {} after)",
        args.workers,
        fleet.history.len(),
        tl.kills_during,
        tl.kills_after
    );
    println!(
        "  reshards            {}: {}",
        tl.reshards.len(),
        tl.reshards.join("; ")
    );
    println!(
        "  faults injected     {} 5xx (each DynamoDB and Kinesis request at {}%), latency {}..{} ms",
        stats.faults.errors_injected,
        args.fault_rate * 100.0,
        args.latency_ms,
        args.latency_ms + args.jitter_ms
    );
    match &tl.throttle {
        Some((t, d)) => println!(
            "  throttled           {throttled_items} items refused by the proxy; {t} at {} WCU for {:.0} s",
            args.throttle_wcu,
            d.as_secs_f64()
        ),
        None => println!("  throttled           {throttled_items} items refused by the proxy"),
    }
    // In `late`, late events dead-lettered as `late_backlog` are accounted
    // for, not lost: say so rather than print them as lost.
    match &late_report {
        Some(l) => println!(
            "  stored              {} of {valid} found with their content; lost {}, mismatched {}, extra {}, duplicates {}; {} late events dead-lettered as late_backlog (by design)",
            items.found,
            l.lost_current + l.lost_late,
            items.mismatched,
            items.extra,
            items.duplicates,
            l.late_dead
        ),
        None => println!(
            "  stored              {} of {valid} found with their content; lost {}, mismatched {}, extra {}, duplicates {}",
            items.found, items.lost, items.mismatched, items.extra, items.duplicates
        ),
    }
    println!(
        "  writes accepted     {accepted_in_tables} into {} period table(s): {redeliveries} redeliveries (at-least-once, same keys overwritten)",
        items.tables.len()
    );
    let by_reason: Vec<String> = dead
        .by_reason
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    println!(
        "  dead letters        {} entries ({}); poison {}/{poison} matched, {} missing, {} wrong reason, {} unexpected",
        dead.entries,
        by_reason.join(", "),
        dead.matched,
        dead.missing,
        dead.wrong_reason,
        // late_backlog entries are the late scenario's expected outcome.
        if late_report.is_some() {
            dead.unexpected
                .saturating_sub(dead.by_reason.get("late_backlog").copied().unwrap_or(0))
        } else {
            dead.unexpected
        }
    );
    println!(
        "  checkpoints         {} shards ({closed} closed at SHARD_END, {} open at their last record): {}",
        final_ends.len(),
        final_ends.len() - closed,
        if final_ends.iter().all(|e| e.at_end) {
            "all at end"
        } else {
            "NOT all at end"
        }
    );
    for e in final_ends.iter().filter(|e| !e.at_end) {
        println!(
            "    {} (closed: {}) checkpoint {}",
            e.shard, e.closed, e.checkpoint
        );
    }
    println!(
        "  lease overlap       max {:.2} s (limit {:.0} s) over {} holding intervals",
        ov.max_ms as f64 / 1000.0,
        args.failover.as_secs_f64(),
        ov.intervals
    );
    if let Some((a, b)) = &ov.worst {
        println!(
            "    worst: {} on {} {}..{} and {} {}..{}",
            a.shard,
            a.worker,
            a.start.format("%H:%M:%S%.3f"),
            a.end.format("%H:%M:%S%.3f"),
            b.worker,
            b.start.format("%H:%M:%S%.3f"),
            b.end.format("%H:%M:%S%.3f")
        );
    }
    println!(
        "  producer            {} Kinesis records, {} entries refused and re-sent, {} calls failed and re-sent",
        produced.records, produced.refused_entries, produced.failed_calls
    );
    // Late: dead-lettered late events show as lost and as unexpected dead
    // letters here; the late lines below sort them out.
    if !late {
        for e in items.examples.iter().chain(&dead.examples) {
            println!("    {e}");
        }
    }
    if let Some(l) = &late_report {
        l.print(&watch, &late_table, &logs);
        if let (Some(b), Some(c)) = (&boundary, &clock) {
            b.print(c);
        }
    }
    for n in &tl.notes {
        println!("  note: {n}");
    }
    for f in &failures {
        println!("  FAILED: {f}");
    }
    let crashed_any = fleet
        .history
        .iter()
        .any(|i| matches!(i.ended, Some((_, Ending::Crashed(_)))));
    let mut summary = serde_json::json!({
        "run": run_id,
        "passed": passed,
        "events": args.events, "valid": valid, "poison": poison,
        "duration_s": total_s, "production_s": production_s, "converge_s": converge_s,
        "scenario": if brownout { "brownout" } else if late { "late" } else { "full" },
        "brownout_requests_per_s": amplification.map(|(h, d, _)| [h, d]),
        "amplification": amplification.map(|a| a.2), "recovery_s": recovery_s,
        "kills": kills, "kills_during": tl.kills_during, "kills_after": tl.kills_after,
        "incarnations": fleet.history.len(), "crashed": crashed_any,
        "reshards": tl.reshards,
        "faults_injected": stats.faults.errors_injected,
        "throttled_items": throttled_items,
        "found": items.found, "lost": items.lost, "mismatched": items.mismatched,
        "extra": items.extra, "duplicates": items.duplicates,
        "writes_accepted": accepted_in_tables, "redeliveries": redeliveries,
        "dead_letters": dead.by_reason, "dead_letter_entries": dead.entries,
        "poison_matched": dead.matched, "poison_missing": dead.missing,
        "poison_wrong_reason": dead.wrong_reason, "dead_letters_unexpected": dead.unexpected,
        "max_overlap_ms": ov.max_ms, "failover_ms": limit_ms,
        "failures": failures,
        "incarnations_detail": fleet.history.iter().map(|i| serde_json::json!({
            "id": i.id,
            "started": i.started.to_rfc3339(),
            "ended": i.ended.as_ref().map(|(t, e)| format!("{} {e:?}", t.to_rfc3339())),
        })).collect::<Vec<_>>(),
    });
    // Beside the macro: its recursion limit is reached.
    summary["recovery_writes_s"] = serde_json::json!([first_write, last_write.map(|w| w.0)]);
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    println!(
        "  summary             {}",
        dir.join("summary.json").display()
    );
    let brownout_line = amplification.map(|(healthy, during, a)| {
        println!(
            "  brownout            {:.0} s held {:?}; DynamoDB requests/s healthy {healthy:.1}, during {during:.2}; recovery {:.0} s: {phases}, checkpoints at end +{:.0} s",
            args.brownout_for.as_secs_f64(),
            args.brownout_delay,
            recovery_s.unwrap_or(f64::NAN),
            recovery_s.unwrap_or(f64::NAN)
        );
        format!(
            "brownout: lost {}, duplicates {}, amplification {a:.1}x, recovery {:.0} s",
            items.lost,
            items.duplicates,
            recovery_s.unwrap_or(f64::NAN)
        )
    });
    if brownout_line.is_some() && !passed {
        // What the worker saw after the recovery, for a failure in CI
        // (where only this output survives).
        for (id, text) in &logs {
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| !l.contains("\"level\":\"DEBUG\""))
                .collect();
            println!("  log of {id} (last 40 lines):");
            for l in &lines[lines.len().saturating_sub(40)..] {
                println!("    {}", l.chars().take(240).collect::<String>());
            }
        }
    }
    if passed && !args.keep {
        // Repeated runs on one stack: do not let the emulators grow.
        let mut names = items.tables.clone();
        names.extend([dead_table, lease_table, format!("{run_id}-coordinator")]);
        for t in names {
            let _ = dynamodb.delete_table().table_name(t).send().await;
        }
        let _ = kinesis.delete_stream().stream_name(&run_id).send().await;
    } else {
        println!("  kept                stream and tables named {run_id}*");
    }
    if let Some(l) = &late_report {
        // The scenario's figures, last, in one line.
        println!(
            "late: lost {}, duplicates {}, late stored {}/{}, late dead-lettered {}, current stored +{} s, longest checkpoint wait {:.0} s",
            l.lost_current + l.lost_late,
            items.duplicates,
            l.late_stored,
            l.late,
            l.late_dead,
            watch
                .current_stored_s
                .map_or("n/a".into(), |s| format!("{s:.0}")),
            watch.max_still_s
        );
    }
    if brownout {
        // The scenario's figures, last, in one line.
        println!(
            "{}",
            brownout_line.unwrap_or_else(|| format!(
                "brownout: lost {}, duplicates {}, amplification n/a, recovery n/a",
                items.lost, items.duplicates
            ))
        );
    }
    Ok(passed)
}

/// What the late scenario watches while it runs.
#[derive(Debug, Default)]
struct LateWatch {
    /// When the worker was started.
    worker_started: Option<Instant>,
    /// When checkpoints were last looked at.
    last_sample: Option<Instant>,
    /// Each shard's checkpoint, and since when it has not moved while
    /// short of its end.
    still: BTreeMap<String, (String, Instant)>,
    /// Looks taken.
    samples: u64,
    /// The longest a checkpoint stood still short of its end, seconds.
    max_still_s: f64,
    /// Shards whose checkpoint stood still longer than allowed.
    stalls: Vec<String>,
    /// Seconds from production's end until every current event was stored.
    current_stored_s: Option<f64>,
    /// When the worker was stopped before the boundary.
    stopped: Option<Instant>,
    /// Whether it was started again past the boundary.
    restarted: bool,
}

/// How often the late scenario looks at the checkpoints.
const LATE_LOOK: Duration = Duration::from_secs(2);

impl LateWatch {
    /// The worker is down: nothing to look at, and no checkpoint stands
    /// still while it is.
    fn stop_down(&mut self) {
        self.stopped = Some(Instant::now());
        self.worker_started = None;
        self.last_sample = None;
        self.still.clear();
    }

    /// Every [`LATE_LOOK`] once the worker runs: how long each shard's
    /// checkpoint has not moved while short of its end (`last`: the last
    /// positions put, once production has ended); longer than `limit` is
    /// a stall.
    async fn sample(
        &mut self,
        kinesis: &aws_sdk_kinesis::Client,
        leases: &LeaseTable,
        stream: &str,
        last: Option<&std::collections::HashMap<String, tidemark_consumer::kinesis::Position>>,
        limit: Duration,
    ) -> Result<()> {
        let Some(started) = self.worker_started else {
            return Ok(());
        };
        // The worker's first lease takes a moment.
        if started.elapsed() < LATE_LOOK * 5
            || self.last_sample.is_some_and(|at| at.elapsed() < LATE_LOOK)
        {
            return Ok(());
        }
        self.last_sample = Some(Instant::now());
        self.samples += 1;
        let none = std::collections::HashMap::new();
        let ends = check::checkpoints(kinesis, leases, stream, last.unwrap_or(&none)).await?;
        let now = Instant::now();
        for e in ends {
            if e.at_end {
                self.still.remove(&e.shard);
                continue;
            }
            let since = match self.still.get(&e.shard) {
                Some((cp, since)) if *cp == e.checkpoint => *since,
                _ => now,
            };
            let still = now.duration_since(since);
            self.max_still_s = self.max_still_s.max(still.as_secs_f64());
            if still > limit && !self.stalls.iter().any(|s| s.starts_with(&e.shard)) {
                self.stalls.push(format!(
                    "{} checkpoint {} unchanged for more than {limit:?}",
                    e.shard, e.checkpoint
                ));
            }
            self.still.insert(e.shard, (e.checkpoint, since));
        }
        Ok(())
    }
}

/// The late scenario's clock: the worker runs under libfaketime, `offset`
/// ahead of this host, so that its clock reaches an hour boundary while it
/// is stopped; the events' time follows the same clock.
#[derive(Debug)]
struct LateClock {
    /// The worker's and the events' clock minus this host's.
    offset: chrono::Duration,
    /// The hour boundary on the faked clock.
    boundary: chrono::DateTime<Utc>,
    /// When (on this host) the faked clock reaches it.
    boundary_at: Instant,
    /// libfaketime's shared library.
    lib: PathBuf,
}

impl LateClock {
    /// The boundary falls `--late-up` plus half of `--late-down` from now.
    fn new(args: &Args) -> Result<LateClock> {
        let lib = faketime_lib()?;
        let lead = args.late_up + args.late_down / 2;
        let now = Utc::now();
        let start = Instant::now();
        let at = now + chrono::Duration::from_std(lead)?;
        // Whole seconds (libfaketime's offset), at most an hour ahead.
        let real_b = at.timestamp();
        let offset_s = 3600 - real_b.rem_euclid(3600);
        let boundary = chrono::DateTime::from_timestamp(real_b + offset_s, 0)
            .context("boundary out of range")?;
        let until =
            chrono::DateTime::from_timestamp(real_b, 0).context("boundary out of range")? - now;
        Ok(LateClock {
            offset: chrono::Duration::seconds(offset_s),
            boundary,
            boundary_at: start + until.to_std().unwrap_or_default(),
            lib,
        })
    }

    /// The worker's environment: libfaketime preloaded with the offset.
    /// The monotonic clock is left alone (tokio's timers and deadlines).
    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), self.lib.display().to_string()),
            (
                "FAKETIME".into(),
                format!("+{}s", self.offset.num_seconds()),
            ),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ]
    }
}

/// Tags `table` with the prefix and layout tags the worker gives the tables
/// it creates.
async fn tag_period_table(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    prefix: &str,
    config: &Config,
) -> Result<()> {
    use aws_sdk_dynamodb::types::Tag;
    use tidemark_worker::maintenance::{LAYOUT_TAG, PREFIX_TAG, layout_of};
    let arn = dynamodb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .context("DescribeTable")?
        .table
        .and_then(|t| t.table_arn)
        .context("no table ARN")?;
    dynamodb
        .tag_resource()
        .resource_arn(arn)
        .tags(Tag::builder().key(PREFIX_TAG).value(prefix).build()?)
        .tags(
            Tag::builder()
                .key(LAYOUT_TAG)
                .value(layout_of(&config.schema.key))
                .build()?,
        )
        .send()
        .await
        .context("TagResource")?;
    Ok(())
}

/// libfaketime's `libfaketime.so.1`: `TIDEMARK_LIBFAKETIME`, or the one the
/// `libfaketime` wheel installs into moto's venv (`localstack/up`; the venv
/// of `TIDEMARK_PYTHON` when set).
fn faketime_lib() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("TIDEMARK_LIBFAKETIME") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("TIDEMARK_LIBFAKETIME={}: no such file", p.display());
    }
    let mut venvs = Vec::new();
    if let Some(py) = std::env::var_os("TIDEMARK_PYTHON")
        && let Some(venv) = PathBuf::from(py).parent().and_then(|b| b.parent())
    {
        venvs.push(venv.to_path_buf());
    }
    venvs.push(repo_root().join("localstack/.cache/venv"));
    for venv in &venvs {
        let Ok(dirs) = std::fs::read_dir(venv.join("lib")) else {
            continue;
        };
        for d in dirs.flatten() {
            let so = d
                .path()
                .join("site-packages/libfaketime/vendor/libfaketime/src/libfaketime.so.1");
            if so.is_file() {
                return Ok(so);
            }
        }
    }
    bail!(
        "the late scenario runs the worker under libfaketime, not found in {}: run localstack/up (it installs the libfaketime wheel from localstack/requirements.txt) or set TIDEMARK_LIBFAKETIME to a libfaketime.so.1",
        venvs
            .iter()
            .map(|v| v.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The late scenario's boundary figures.
#[derive(Debug, Default)]
struct BoundaryReport {
    /// The period that ended while the worker was down, and the next.
    old_table: String,
    new_table: String,
    /// Items the proxy let into each.
    old_items: u64,
    new_items: u64,
    /// Seconds the new table was created before the boundary (negative:
    /// after it).
    prebuilt_s: Option<f64>,
    /// Their provisioned WCU at the end.
    old_wcu: Option<i64>,
    new_wcu: Option<i64>,
    /// Maintenance actions skipped for clock skew (log lines).
    skew_skips: usize,
}

async fn boundary_figures(
    dynamodb: &aws_sdk_dynamodb::Client,
    router: &Router,
    clock: &LateClock,
    stats: &tidemark_limits::StatsReport,
    logs: &[(String, String)],
) -> BoundaryReport {
    let b = clock.boundary.timestamp_millis();
    let old_table = router.naming().table_for(b - 1);
    let new_table = router.naming().table_for(b);
    let items = |t: &str| {
        stats
            .dynamodb
            .tables
            .get(t)
            .map_or(0, |t| t.stats.accepted_items)
    };
    let describe = |t: String| async move {
        dynamodb
            .describe_table()
            .table_name(t)
            .send()
            .await
            .ok()
            .and_then(|d| d.table)
    };
    let old = describe(old_table.clone()).await;
    let new = describe(new_table.clone()).await;
    let wcu = |t: &Option<aws_sdk_dynamodb::types::TableDescription>| {
        t.as_ref()
            .and_then(|t| t.provisioned_throughput.as_ref())
            .and_then(|p| p.write_capacity_units)
    };
    // The emulator keeps this host's clock: the boundary there is the
    // faked one minus the offset.
    let real_boundary = clock.boundary - clock.offset;
    let prebuilt_s = new.as_ref().and_then(|t| t.creation_date_time).map(|c| {
        (real_boundary.timestamp_millis() - c.to_millis().unwrap_or(i64::MAX)) as f64 / 1000.0
    });
    BoundaryReport {
        old_items: items(&old_table),
        new_items: items(&new_table),
        old_wcu: wcu(&old),
        new_wcu: wcu(&new),
        old_table,
        new_table,
        prebuilt_s,
        skew_skips: logs
            .iter()
            .flat_map(|(_, text)| text.lines())
            .filter(|l| l.contains("maintenance action skipped"))
            .count(),
    }
}

impl BoundaryReport {
    fn failures(&self, watch: &LateWatch) -> Vec<String> {
        let mut out = Vec::new();
        if self.old_table == self.new_table {
            out.push("no period boundary between the old and the new table".into());
        }
        if self.old_items == 0 || self.new_items == 0 {
            out.push(format!(
                "events of both periods must be stored: {} in {}, {} in {}",
                self.old_items, self.old_table, self.new_items, self.new_table
            ));
        }
        match self.prebuilt_s {
            Some(s) if s > 0.0 => {}
            Some(s) => out.push(format!(
                "{} created {:.0} s after the boundary, not prebuilt",
                self.new_table, -s
            )),
            None => out.push(format!("{} not found", self.new_table)),
        }
        if self.new_wcu != Some(ACTIVE_WCU) {
            out.push(format!(
                "{} (current) at {} WCU, not the active tier's {ACTIVE_WCU}",
                self.new_table,
                wcu_text(self.new_wcu)
            ));
        }
        if watch.stopped.is_none() || !watch.restarted {
            out.push("the worker was not stopped and restarted across the boundary".into());
        }
        out
    }

    fn print(&self, clock: &LateClock) {
        println!(
            "  period boundary     {} (worker clock +{} s); {} items into {} (ended while the worker was down, {} WCU at the end), {} into {} (prebuilt {}, {} WCU)",
            clock.boundary.format("%Y-%m-%d %H:%M:%S"),
            clock.offset.num_seconds(),
            self.old_items,
            self.old_table,
            wcu_text(self.old_wcu),
            self.new_items,
            self.new_table,
            self.prebuilt_s
                .map_or("never".into(), |s| format!("{s:.0} s before the boundary")),
            wcu_text(self.new_wcu)
        );
        println!(
            "  clock check         {} maintenance actions skipped (the worker's clock is {} s ahead of DynamoDB's)",
            self.skew_skips,
            clock.offset.num_seconds()
        );
    }
}

/// A table's write capacity for the report: "unknown" when it was not read.
fn wcu_text(w: Option<i64>) -> String {
    w.map_or_else(|| "unknown".into(), |w| w.to_string())
}

/// The late scenario's figures.
#[derive(Debug, Default)]
struct LateReport {
    /// Late events produced.
    late: u64,
    /// Late events stored.
    late_stored: u64,
    /// Late events dead-lettered as `late_backlog`.
    late_dead: u64,
    /// Late events neither stored nor dead-lettered as `late_backlog`.
    lost_late: u64,
    /// Current events not stored (dead-lettered or lost).
    lost_current: u64,
}

async fn late_figures(
    dynamodb: &aws_sdk_dynamodb::Client,
    dead_table: &str,
    produced: &producer::Produced,
    items: &check::ItemReport,
) -> Result<LateReport> {
    let payloads = check::dead_letter_payloads(dynamodb, dead_table).await?;
    let late: std::collections::HashSet<usize> = produced.late.iter().copied().collect();
    let mut r = LateReport {
        late: late.len() as u64,
        ..LateReport::default()
    };
    let mut lost_late = 0;
    for i in &items.lost_events {
        let dead_late = produced
            .valid
            .get(*i)
            .and_then(|b| payloads.get(b))
            .is_some_and(|rs| {
                rs.iter()
                    .all(|r| *r == tidemark_schema::Reason::LateBacklog)
            });
        match (late.contains(i), dead_late) {
            (true, true) => r.late_dead += 1,
            (true, false) => lost_late += 1,
            (false, _) => r.lost_current += 1,
        }
    }
    r.lost_late = lost_late;
    r.late_stored = r.late - r.late_dead - r.lost_late;
    Ok(r)
}

impl LateReport {
    fn failures(&self, watch: &LateWatch, args: &Args) -> Vec<String> {
        let mut out = Vec::new();
        if self.lost_current > 0 {
            out.push(format!("{} current events not stored", self.lost_current));
        }
        if self.lost_late > 0 {
            out.push(format!(
                "{} late events neither stored nor dead-lettered as late_backlog",
                self.lost_late
            ));
        }
        if self.late == 0 {
            out.push("no late event produced".into());
        }
        match watch.current_stored_s {
            Some(s) if s > args.late_current_within.as_secs_f64() => out.push(format!(
                "current events stored {s:.0} s after production ended (at most {:?})",
                args.late_current_within
            )),
            Some(_) => {}
            None => out.push("not every current event was stored".into()),
        }
        if watch.samples < 10 {
            out.push(format!(
                "checkpoints looked at {} times: too few to tell they advance",
                watch.samples
            ));
        }
        for s in &watch.stalls {
            out.push(format!("checkpoint stalled: {s}"));
        }
        out
    }

    fn print(&self, watch: &LateWatch, table: &str, logs: &[(String, String)]) {
        let lifts: Vec<&str> = logs
            .iter()
            .flat_map(|(_, text)| text.lines())
            .filter(|l| l.contains("table lifted for a late backlog") || l.contains("lift ended"))
            .collect();
        println!(
            "  late events         {} into {table} (cold, 1 WCU): {} stored, {} dead-lettered (late_backlog), {} lost",
            self.late, self.late_stored, self.late_dead, self.lost_late
        );
        println!(
            "  current events      all stored {} after production ended; {} not stored",
            watch
                .current_stored_s
                .map_or("never".into(), |s| format!("{s:.0} s")),
            self.lost_current
        );
        println!(
            "  checkpoint waits    longest {:.0} s short of the shard's end ({} looks, every {:?}); {} stalls",
            watch.max_still_s,
            watch.samples,
            LATE_LOOK,
            watch.stalls.len()
        );
        println!("  capacity lifts      {} log lines", lifts.len());
        for l in lifts.iter().take(6) {
            println!("    {}", l.chars().take(240).collect::<String>());
        }
    }
}
