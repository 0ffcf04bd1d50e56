//! Three short scenarios, one worker each, that each break one promise the
//! full run cannot reach, and assert it holds:
//!
//! - `bomb`: one gzip record that inflates to about 22 million NDJSON
//!   events among good records. The worker's peak RSS stays under 96 MB,
//!   the bomb is one dead letter (`too_many_events`, with its hash), every
//!   good event is stored, and the checkpoint passes the bomb within 60 s.
//! - `revoked`: once the worker holds its leases, the limits proxy answers
//!   every call on the lease table with AccessDeniedException (a revoked
//!   permission; a deleted or KMS-disabled table looks alike to the
//!   worker). The worker must exit non-zero, or `/healthz` answer 503,
//!   within three failover times.
//! - `dlq-hang`: the dead-letter queue (SQS) hangs for 35 s while poison
//!   records arrive. Afterwards every poison record has its entry in the
//!   queue, none is only in the local fallback file, and no checkpoint
//!   written during the hang passed a poison record put during it (its
//!   entry could not be durable yet).
//!
//! Each prints its figures and a last line `<scenario>: ...`, and returns
//! whether it passed.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use chrono::Utc;
use sha2::{Digest, Sha256};
use tidemark_consumer::kinesis::Position;
use tidemark_consumer::lease::{Checkpoint, LeaseTable};
use tidemark_schema::{Origin, Reason, Router};
use tidemark_tests::{LocalStack, TableCapacity, create_table, free_port, repo_root};
use tidemark_worker::config::Config;
use tidemark_worker::deadletter::DeadLetter;
use tidemark_worker::tools::produce::ProduceSpec;
use tokio_util::sync::CancellationToken;

use crate::events::{self, PoisonKind, find_marker};
use crate::workers::{Fleet, Launch};
use crate::{Args, Scenario, check, say};

/// What the bomb record holds: `{}` lines, 3 bytes each.
const BOMB_LINE: &[u8] = b"{}\n";

/// Good NDJSON events per record.
const EVENTS_PER_RECORD: usize = 10;

/// Runs `scenario`.
pub(crate) async fn run(scenario: Scenario, args: &Args) -> Result<bool> {
    match scenario {
        Scenario::Bomb => bomb(args).await,
        Scenario::Revoked => revoked(args).await,
        Scenario::DlqHang => dlq_hang(args).await,
        Scenario::Brownout | Scenario::Late => unreachable_scenario(),
    }
}

fn unreachable_scenario() -> Result<bool> {
    Err(anyhow!("brownout and late run in the main loop"))
}

/// One scenario's world: the limits proxy (no faults but the scenario's
/// own) in front of the stack, the run's names and directory, one worker.
struct World {
    stack: LocalStack,
    proxy: Arc<tidemark_limits::Proxy>,
    proxy_url: String,
    stop_proxy: CancellationToken,
    run_id: String,
    dir: PathBuf,
    /// The worker's telemetry port.
    port: u16,
}

impl World {
    async fn new(kind: &str, args: &Args) -> Result<World> {
        let run_id = format!(
            "{kind}-{}-{}",
            Utc::now().format("%H%M%S"),
            std::process::id()
        );
        let dir = args
            .out
            .clone()
            .unwrap_or_else(|| repo_root().join("localstack/.run").join(&run_id));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let stack = LocalStack::from_env().await.map_err(|e| anyhow!(e))?;
        let cfg = tidemark_limits::Config::with_upstreams(
            &stack.dynamodb_url,
            &stack.kinesis_url,
            &stack.sqs_url,
        );
        cfg.validate().map_err(|e| anyhow!(e))?;
        let proxy = Arc::new(tidemark_limits::Proxy::new(cfg)?);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let proxy_url = format!("http://{}", listener.local_addr()?);
        let stop_proxy = CancellationToken::new();
        tokio::spawn(tidemark_limits::serve(
            listener,
            proxy.clone(),
            stop_proxy.clone().cancelled_owned(),
        ));
        say(format!("{kind} run {run_id}: logs in {}", dir.display()));
        Ok(World {
            stack,
            proxy,
            proxy_url,
            stop_proxy,
            run_id,
            dir,
            port: free_port(),
        })
    }

    fn lease_table(&self) -> String {
        format!("{}-leases", self.run_id)
    }

    fn dead_table(&self) -> String {
        format!("{}-dead-letters", self.run_id)
    }

    /// Writes the worker's config (`source_extra` and `dead_letters` are
    /// TOML lines of those sections) and parses it back.
    fn config(&self, args: &Args, source_extra: &str, dead_letters: &str) -> Result<PathBuf> {
        let run = &self.run_id;
        let listen = format!("127.0.0.1:{}", self.port);
        let toml = crate::workercfg::WorkerToml {
            run,
            failover: args.failover,
            top: "shutdown_timeout = \"20s\"\n",
            checkpoint_interval: "1s",
            shutdown_grace: "10s",
            source_extra,
            writer_extra: "",
            dead_letters,
            maintenance_interval: "1h",
            listen: &listen,
        }
        .render();
        let path = self.dir.join("tidemark.toml");
        std::fs::write(&path, &toml)?;
        Config::from_toml(&toml, &path.display().to_string(), &BTreeMap::new())
            .map_err(|e| anyhow!("generated config: {e}"))?;
        Ok(path)
    }

    fn router(&self, config: &Path) -> Result<Router> {
        let text = std::fs::read_to_string(config)?;
        let c = Config::from_toml(&text, &config.display().to_string(), &BTreeMap::new())
            .map_err(|e| anyhow!("generated config: {e}"))?;
        Ok(Router::new(c.schema)?)
    }

    fn start_worker(&self, args: &Args, config: &Path) -> Result<Fleet> {
        Fleet::start(
            Launch {
                tidemark: args.tidemark.clone(),
                config: config.to_path_buf(),
                dir: self.dir.clone(),
                endpoint: self.proxy_url.clone(),
                region: self
                    .stack
                    .sdk
                    .region()
                    .map_or_else(|| "us-east-1".to_string(), ToString::to_string),
                env: Vec::new(),
            },
            1,
        )
    }

    /// GET `path` on the worker's telemetry port: its status code, if
    /// anything answered within a second.
    async fn status_of(&self, path: &str) -> Option<u16> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let get = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .ok()?;
            s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
                .await
                .ok()?;
            let mut text = String::new();
            s.read_to_string(&mut text).await.ok()?;
            text.split(' ').nth(1)?.parse().ok()
        };
        tokio::time::timeout(Duration::from_secs(1), get)
            .await
            .ok()
            .flatten()
    }

    /// Each shard's lease checkpoint.
    async fn checkpoints(&self) -> Result<HashMap<String, Checkpoint>> {
        let leases = LeaseTable::new(self.stack.dynamodb(), self.lease_table());
        Ok(leases
            .list()
            .await
            .context("listing leases")?
            .into_iter()
            .map(|l| (l.key, l.checkpoint))
            .collect())
    }

    /// Each shard's lease owner.
    async fn owners(&self) -> Result<HashMap<String, Option<String>>> {
        let leases = LeaseTable::new(self.stack.dynamodb(), self.lease_table());
        Ok(leases
            .list()
            .await
            .context("listing leases")?
            .into_iter()
            .map(|l| (l.key, l.owner))
            .collect())
    }

    /// Deletes what the run made (after a pass).
    async fn clean_up(&self, tables: &[String]) {
        let ddb = self.stack.dynamodb();
        let mut names: Vec<String> = tables.to_vec();
        names.extend([
            self.lease_table(),
            self.dead_table(),
            format!("{}-coordinator", self.run_id),
        ]);
        for t in names {
            let _ = ddb.delete_table().table_name(t).send().await;
        }
        let _ = self
            .stack
            .kinesis()
            .delete_stream()
            .stream_name(&self.run_id)
            .send()
            .await;
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop_proxy.cancel();
    }
}

/// Puts `records` (partition key, data) to `stream` in order, one call per
/// 100 (or per 4 MiB), each accepted before the next; returns each
/// record's (shard, position) in the same order.
async fn put(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    records: &[(String, Vec<u8>)],
) -> Result<Vec<(String, Position)>> {
    let mut out = Vec::with_capacity(records.len());
    let mut start = 0;
    while start < records.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < records.len() && end - start < 100 {
            bytes += records[end].1.len();
            if end > start && bytes > 4 * 1024 * 1024 {
                break;
            }
            end += 1;
        }
        let entries = records[start..end]
            .iter()
            .map(|(k, d)| {
                PutRecordsRequestEntry::builder()
                    .partition_key(k)
                    .data(Blob::new(d.clone()))
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut tries = 0;
        let resp = loop {
            let sent = kinesis
                .put_records()
                .stream_name(stream)
                .set_records(Some(entries.clone()))
                .send()
                .await;
            match sent {
                Ok(r) if r.failed_record_count().unwrap_or(0) == 0 => break r,
                Ok(_) | Err(_) if tries < 20 => {
                    // Refused entries: the whole call again keeps the order
                    // (the emulator accepts or refuses calls whole).
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(r) => anyhow::bail!("PutRecords kept refusing entries: {r:?}"),
                Err(e) => anyhow::bail!(
                    "PutRecords: {}",
                    aws_sdk_kinesis::error::DisplayErrorContext(e)
                ),
            }
        };
        for e in resp.records() {
            let shard = e.shard_id().unwrap_or_default().to_string();
            let seq = e.sequence_number().unwrap_or_default();
            out.push((shard, Position::new(seq, 0)));
        }
        start = end;
    }
    Ok(out)
}

/// The last position put to each shard.
fn last_per_shard(positions: &[(String, Position)]) -> HashMap<String, Position> {
    let mut last: HashMap<String, Position> = HashMap::new();
    for (shard, p) in positions {
        let slot = last.entry(shard.clone()).or_insert_with(|| p.clone());
        if *p > *slot {
            *slot = p.clone();
        }
    }
    last
}

/// True when every shard's checkpoint is at or past its last position put.
fn at_end(cps: &HashMap<String, Checkpoint>, last: &HashMap<String, Position>) -> bool {
    last.iter().all(|(shard, want)| match cps.get(shard) {
        Some(Checkpoint::At(p)) => p >= want,
        Some(Checkpoint::ShardEnd) => true,
        _ => false,
    })
}

/// The worker process's (current, peak) resident set size in bytes, from
/// `/proc/<pid>/status` (VmRSS, VmHWM).
fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    };
    Some((kb("VmRSS:")?, kb("VmHWM:")?))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1_000_000.0
}

/// Good events `first..first + n`, as NDJSON records of [`EVENTS_PER_RECORD`].
fn good_records(
    spec: &ProduceSpec,
    first: u64,
    n: u64,
    valid: &mut Vec<Vec<u8>>,
) -> Vec<(String, Vec<u8>)> {
    let now = Utc::now();
    let events: Vec<Vec<u8>> = (first..first + n)
        .map(|i| events::valid(spec, i, now))
        .collect();
    valid.extend(events.iter().cloned());
    events
        .chunks(EVENTS_PER_RECORD)
        .enumerate()
        .map(|(i, chunk)| (format!("good-{first}-{i}"), chunk.join(&b'\n')))
        .collect()
}

/// The bomb: `lines` `{}` lines, gzip-compressed at the best ratio.
fn bomb_record(lines: u64) -> Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let chunk: Vec<u8> = BOMB_LINE.repeat(64 * 1024);
    let mut left = lines;
    while left > 0 {
        let n = left.min(64 * 1024);
        gz.write_all(&chunk[..n as usize * BOMB_LINE.len()])?;
        left -= n;
    }
    Ok(gz.finish()?)
}

/// Every entry of a DynamoDB dead-letter table.
async fn table_entries(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<Vec<DeadLetter>> {
    check::scan(ddb, table)
        .await?
        .iter()
        .map(|item| match item.get("entry").map(|v| v.as_s()) {
            Some(Ok(json)) => serde_json::from_str(json).context("a dead-letter entry"),
            _ => Err(anyhow!("a dead-letter item has no `entry`")),
        })
        .collect()
}

/// `bomb`: see the module docs.
async fn bomb(args: &Args) -> Result<bool> {
    let w = World::new("bomb", args).await?;
    let config = w.config(
        args,
        r#"record_format = "ndjson""#,
        &format!("kind = \"dynamodb\"\ntable = \"{}\"", w.dead_table()),
    )?;
    let router = w.router(&config)?;
    let kinesis = w.stack.kinesis();
    let ddb = w.stack.dynamodb();
    tidemark_tests::create_stream(&kinesis, &w.run_id, 1).await;
    create_table(&ddb, &w.dead_table(), true, TableCapacity::OnDemand).await;
    let bomb = bomb_record(args.bomb_lines)?;
    say(format!(
        "the bomb: {} lines of `{{}}` ({:.1} MB), {} bytes gzip-compressed",
        args.bomb_lines,
        mb(args.bomb_lines * BOMB_LINE.len() as u64),
        bomb.len()
    ));
    let mut fleet = w.start_worker(args, &config)?;
    let pid = fleet.pid(0).context("the worker's pid")?;

    let spec = ProduceSpec {
        devices: 50,
        count: args.bomb_good,
        hot_factor: 1,
        seed: args.seed.unwrap_or(7),
    };
    let half = args.bomb_good / 2;
    let mut valid = Vec::new();
    let mut records = good_records(&spec, 0, half, &mut valid);
    let bomb_at = records.len();
    records.push(("bomb".into(), bomb.clone()));
    records.extend(good_records(&spec, half, args.bomb_good - half, &mut valid));
    let positions = put(&kinesis, &w.run_id, &records).await?;
    let put_done = Instant::now();
    let last = last_per_shard(&positions);
    let bomb_position = positions[bomb_at].1.clone();
    say(format!(
        "put {} good events in {} records around the bomb at {}",
        valid.len(),
        records.len() - 1,
        bomb_position.sequence
    ));

    // Until the checkpoint passes the last record (60 s), sampling memory;
    // a worker past `rss_guard` is killed to spare the machine.
    let mut failures = Vec::new();
    let mut peak_rss = 0u64;
    let mut passed_after: Option<f64> = None;
    let mut exited = None;
    let limit = put_done + args.bomb_within;
    while Instant::now() < limit {
        if let Some((now, hwm)) = rss(pid) {
            peak_rss = peak_rss.max(hwm);
            if now > args.rss_guard {
                failures.push(format!(
                    "the worker grew to {:.0} MB {:.0} s after the last put: killed (guard {:.0} MB)",
                    mb(now),
                    put_done.elapsed().as_secs_f64(),
                    mb(args.rss_guard)
                ));
                fleet.kill_all();
                break;
            }
        }
        if let Some(status) = fleet.exited(0)? {
            exited = Some(status);
            failures.push(format!("the worker exited on its own: {status}"));
            break;
        }
        if passed_after.is_none() && at_end(&w.checkpoints().await.unwrap_or_default(), &last) {
            passed_after = Some(put_done.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if passed_after.is_none() {
        failures.push(format!(
            "the checkpoint did not pass the bomb within {:?}",
            args.bomb_within
        ));
    }
    if let Some((_, hwm)) = rss(pid) {
        peak_rss = peak_rss.max(hwm);
    }
    let unclean = if exited.is_none() {
        fleet.stop_all(Duration::from_secs(40)).await?
    } else {
        Vec::new()
    };
    if !unclean.is_empty() {
        failures.push(format!("not stopped cleanly by SIGTERM: {unclean:?}"));
    }
    if peak_rss >= args.bomb_rss_limit {
        failures.push(format!(
            "peak RSS {:.0} MB (limit {:.0} MB)",
            mb(peak_rss),
            mb(args.bomb_rss_limit)
        ));
    }
    let items = check::items(&ddb, &router, &valid).await?;
    if items.lost > 0 || items.mismatched > 0 {
        failures.push(format!(
            "good events: {} lost, {} mismatched",
            items.lost, items.mismatched
        ));
    }
    let count = check::item_count(&ddb, &w.dead_table()).await?;
    let bomb_sha = hex(&Sha256::digest(&bomb));
    let mut bomb_entries = 0;
    let mut dead_line = format!("{count} dead letters");
    if count > 1000 {
        failures.push(format!(
            "{count} dead letters: the bomb was split into events"
        ));
    } else {
        let entries = table_entries(&ddb, &w.dead_table()).await?;
        for e in &entries {
            let at_bomb = matches!(&e.source, Origin::Kinesis { sequence_number, .. }
                if sequence_number.as_str() == bomb_position.sequence.as_str());
            if !at_bomb {
                failures.push(format!(
                    "unexpected dead letter {} at {}: {}",
                    e.reason, e.source, e.error
                ));
                continue;
            }
            bomb_entries += 1;
            dead_line = format!(
                "{count} dead letter(s): {} ({}), payload {} bytes, sha256 {}",
                e.reason,
                e.error,
                e.payload_bytes,
                if e.payload_sha256 == bomb_sha {
                    "matches"
                } else {
                    "DIFFERS"
                }
            );
            if e.reason.as_str() != "too_many_events"
                || e.payload_sha256 != bomb_sha
                || e.payload_bytes != bomb.len()
                || e.inner.is_some()
            {
                failures.push(format!(
                    "the bomb's entry: reason {}, {} payload bytes of {}, inner {:?}, hash {}",
                    e.reason,
                    e.payload_bytes,
                    bomb.len(),
                    e.inner,
                    if e.payload_sha256 == bomb_sha {
                        "ok"
                    } else {
                        "wrong"
                    }
                ));
            }
        }
        if bomb_entries == 0 {
            failures.push("the bomb has no dead letter".into());
        }
    }
    let passed = failures.is_empty();
    println!();
    println!("bomb run {}: {}", w.run_id, verdict(passed));
    println!(
        "  bomb                {} lines, {} bytes gzip ({:.1} MB inflated)",
        args.bomb_lines,
        bomb.len(),
        mb(args.bomb_lines * 3)
    );
    println!(
        "  peak RSS            {:.0} MB (limit {:.0} MB)",
        mb(peak_rss),
        mb(args.bomb_rss_limit)
    );
    println!(
        "  good events         {} of {} stored with their content",
        items.found,
        valid.len()
    );
    println!("  dead letters        {dead_line}");
    match passed_after {
        Some(s) => println!("  checkpoint          past the bomb {s:.1} s after the last put"),
        None => println!("  checkpoint          NOT past the bomb"),
    }
    report_failures(&failures);
    finish(&w, passed, args, &items.tables).await;
    println!(
        "bomb: peak RSS {:.0} MB, good stored {}/{}, bomb entries {bomb_entries} of {count} dead letters, checkpoint past it {}",
        mb(peak_rss),
        items.found,
        valid.len(),
        passed_after.map_or_else(|| "never".to_string(), |s| format!("after {s:.1} s"))
    );
    Ok(passed)
}

/// `revoked`: see the module docs.
async fn revoked(args: &Args) -> Result<bool> {
    let w = World::new("revoked", args).await?;
    let config = w.config(
        args,
        r#"record_format = "ndjson""#,
        &format!("kind = \"dynamodb\"\ntable = \"{}\"", w.dead_table()),
    )?;
    let kinesis = w.stack.kinesis();
    let ddb = w.stack.dynamodb();
    tidemark_tests::create_stream(&kinesis, &w.run_id, 2).await;
    create_table(&ddb, &w.dead_table(), true, TableCapacity::OnDemand).await;
    let mut fleet = w.start_worker(args, &config)?;
    let worker = fleet.history[0].id.clone();
    let spec = ProduceSpec {
        devices: 20,
        count: 1_000_000,
        hot_factor: 1,
        seed: args.seed.unwrap_or(7),
    };
    // Events trickle in all along.
    let stop_producing = CancellationToken::new();
    let producer = {
        let kinesis = kinesis.clone();
        let stream = w.run_id.clone();
        let stop = stop_producing.clone();
        tokio::spawn(async move {
            let mut valid = Vec::new();
            let mut n = 0;
            while !stop.is_cancelled() {
                let records = good_records(&spec, n, 20, &mut valid);
                n += 20;
                let _ = put(&kinesis, &stream, &records).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    // Both leases held (or the worker died trying).
    let held_by = Instant::now() + Duration::from_secs(60);
    let mut failures = Vec::new();
    loop {
        let owners = w.owners().await.unwrap_or_default();
        if owners.len() == 2 && owners.values().all(|o| o.as_deref() == Some(&worker)) {
            break;
        }
        if let Some(status) = fleet.exited(0)? {
            failures.push(format!(
                "the worker exited before holding its leases: {status}"
            ));
            break;
        }
        if Instant::now() >= held_by {
            failures.push("the worker did not hold both leases within 60 s".into());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let limit = args.failover * 3;
    let mut health_503: Option<f64> = None;
    let mut exit: Option<(f64, String, bool)> = None;
    let revoked_at = Instant::now();
    if failures.is_empty() {
        w.proxy.deny_table(Some(&w.lease_table()));
        say(format!(
            "lease table {} refused from now on (AccessDeniedException)",
            w.lease_table()
        ));
        // Watch for the limit and a little longer, to report what came late.
        let watch_until = revoked_at + limit + Duration::from_secs(15);
        while Instant::now() < watch_until && exit.is_none() {
            if let Some(status) = fleet.exited(0)? {
                exit = Some((
                    revoked_at.elapsed().as_secs_f64(),
                    status.to_string(),
                    status.success(),
                ));
                break;
            }
            if health_503.is_none() && w.status_of("/healthz").await == Some(503) {
                health_503 = Some(revoked_at.elapsed().as_secs_f64());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let first = [health_503, exit.as_ref().map(|e| e.0)]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min);
        if first > limit.as_secs_f64() {
            failures.push(format!(
                "neither an exit nor /healthz 503 within three failover times ({limit:?})"
            ));
        }
        if let Some((_, status, true)) = &exit {
            failures.push(format!("the worker exited with success ({status})"));
        }
    }
    stop_producing.cancel();
    let _ = producer.await;
    w.proxy.deny_table(None);
    if exit.is_none() {
        // Still running: stop it (its status does not matter here).
        let _ = fleet.stop_all(Duration::from_secs(30)).await?;
    }
    let stats = w.proxy.stats();
    let passed = failures.is_empty();
    println!();
    println!("revoked run {}: {}", w.run_id, verdict(passed));
    println!(
        "  lease table refused {} calls answered AccessDeniedException",
        stats.faults.access_denied
    );
    println!(
        "  /healthz            {}",
        health_503.map_or_else(
            || "never 503".to_string(),
            |s| format!("503 after {s:.1} s")
        )
    );
    println!(
        "  exit                {}",
        exit.as_ref().map_or_else(
            || "none (still running)".to_string(),
            |(s, status, _)| format!("{status} after {s:.1} s")
        )
    );
    println!(
        "  limit               {:.0} s (three failover times)",
        limit.as_secs_f64()
    );
    report_failures(&failures);
    finish(&w, passed, args, &[]).await;
    println!(
        "revoked: /healthz 503 {}, exit {} (limit {:.0} s)",
        health_503.map_or_else(|| "never".into(), |s| format!("after {s:.1} s")),
        exit.as_ref().map_or_else(
            || "never".into(),
            |(s, status, _)| format!("{status} after {s:.1} s")
        ),
        limit.as_secs_f64()
    );
    Ok(passed)
}

/// `dlq-hang`: see the module docs.
async fn dlq_hang(args: &Args) -> Result<bool> {
    let w = World::new("dlq-hang", args).await?;
    let sqs = w.stack.sqs();
    let queue_url = tidemark_tests::create_queue(&sqs, &w.run_id, false).await;
    let fallback = w.dir.join("fallback.jsonl");
    let config = w.config(
        args,
        r#"record_format = "ndjson""#,
        &format!(
            "kind = \"sqs\"\nqueue_url = \"{queue_url}\"\nfallback_path = \"{}\"",
            fallback.display()
        ),
    )?;
    let router = w.router(&config)?;
    let kinesis = w.stack.kinesis();
    let ddb = w.stack.dynamodb();
    tidemark_tests::create_stream(&kinesis, &w.run_id, 1).await;
    let mut fleet = w.start_worker(args, &config)?;
    let spec = ProduceSpec {
        devices: 20,
        count: 1_000_000,
        hot_factor: 1,
        seed: args.seed.unwrap_or(7),
    };
    let retention = chrono::Duration::days(7);
    let mut valid = Vec::new();
    let mut poison: Vec<(u64, PoisonKind)> = Vec::new();
    let mut next = 0u64;
    // `n` good events and `p` poison records, interleaved.
    let mut batch = |n: u64, p: u64, valid: &mut Vec<Vec<u8>>, poison: &mut Vec<_>| {
        let mut records = good_records(&spec, next, n, valid);
        next += n;
        let now = Utc::now();
        for i in 0..p {
            let idx = 1_000_000 + next + i;
            let kind = [PoisonKind::InvalidJson, PoisonKind::MissingEntity][i as usize % 2];
            poison.push((idx, kind));
            let at = (i as usize * 2).min(records.len());
            records.insert(
                at,
                (
                    format!("poison-{idx}"),
                    events::poison(idx, kind, now, retention),
                ),
            );
        }
        next += p;
        records
    };
    let mut failures = Vec::new();

    // Healthy: the first dead letters reach the queue.
    let first = batch(40, 4, &mut valid, &mut poison);
    let mut positions = put(&kinesis, &w.run_id, &first).await?;
    let healthy_by = Instant::now() + Duration::from_secs(60);
    while tidemark_tests::queue_counts(&sqs, &queue_url).await.0 < 4 {
        if Instant::now() >= healthy_by {
            failures.push("the first 4 dead letters did not reach the queue within 60 s".into());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The hang: poison and good records arrive while SQS does not answer.
    w.proxy.hang_sqs(args.hang_for);
    let hang_start = Instant::now();
    say(format!("SQS hangs for {:?}", args.hang_for));
    let mut during: Vec<Position> = Vec::new();
    let mut max_cp_during: Option<Position> = None;
    let mut puts = 0;
    while hang_start.elapsed() < args.hang_for {
        if puts < 5 && hang_start.elapsed() >= Duration::from_secs(2 * puts) {
            let records = batch(20, 4, &mut valid, &mut poison);
            let put_at = put(&kinesis, &w.run_id, &records).await?;
            for ((key, _), (_, p)) in records.iter().zip(&put_at) {
                if key.starts_with("poison-") {
                    during.push(p.clone());
                }
            }
            positions.extend(put_at);
            puts += 1;
        }
        if let Some(Checkpoint::At(p)) = w.checkpoints().await.unwrap_or_default().values().next()
            && max_cp_during.as_ref().is_none_or(|m| p > m)
        {
            max_cp_during = Some(p.clone());
        }
        if let Some(status) = fleet.exited(0)? {
            failures.push(format!("the worker exited during the hang: {status}"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let hang_end = Instant::now();
    say("SQS answers again");
    // After the hang, a few more; then everything must settle.
    let after = batch(20, 2, &mut valid, &mut poison);
    positions.extend(put(&kinesis, &w.run_id, &after).await?);
    let last = last_per_shard(&positions);
    let settle_by = Instant::now() + Duration::from_secs(90);
    let mut settled_after = None;
    while Instant::now() < settle_by {
        if fleet.exited(0)?.is_some() {
            break;
        }
        if at_end(&w.checkpoints().await.unwrap_or_default(), &last) {
            settled_after = Some(hang_end.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if settled_after.is_none() {
        failures.push(
            "the checkpoint did not reach the last record within 90 s of the recovery".into(),
        );
    }
    let first_poison_during = during.iter().min().cloned();
    if let (Some(cp), Some(p)) = (&max_cp_during, &first_poison_during)
        && cp >= p
    {
        failures.push(format!(
            "during the hang the checkpoint reached {} past poison record {} whose entry could not be in the queue",
            cp.sequence, p.sequence
        ));
    }
    let unclean = fleet.stop_all(Duration::from_secs(40)).await?;
    if !unclean.is_empty() {
        failures.push(format!("not stopped cleanly by SIGTERM: {unclean:?}"));
    }

    // Every poison record's entry is in the queue; nothing else is.
    let entries = drain_queue(&sqs, &queue_url).await?;
    let mut found: HashMap<u64, Vec<Reason>> = HashMap::new();
    let mut unexpected = 0;
    for e in &entries {
        match e.payload().ok().as_deref().and_then(find_marker) {
            Some(n) => found.entry(n).or_default().push(e.reason),
            None => unexpected += 1,
        }
    }
    let mut missing = 0;
    let mut wrong = 0;
    for (n, kind) in &poison {
        match found.get(n) {
            None => missing += 1,
            Some(rs) if rs.iter().all(|r| *r == kind.reason()) => {}
            Some(_) => wrong += 1,
        }
    }
    let duplicates = entries.len() - unexpected - found.len();
    if missing + wrong + unexpected > 0 {
        failures.push(format!(
            "dead letters: {missing} poison missing from the queue, {wrong} with a wrong reason, {unexpected} unexpected entries"
        ));
    }
    let in_file = std::fs::read_to_string(&fallback)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    if in_file > 0 {
        failures.push(format!("{in_file} entries in the local fallback file"));
    }
    let items = check::items(&ddb, &router, &valid).await?;
    if items.lost > 0 || items.mismatched > 0 {
        failures.push(format!(
            "good events: {} lost, {} mismatched",
            items.lost, items.mismatched
        ));
    }
    let stats = w.proxy.stats();
    let passed = failures.is_empty();
    println!();
    println!("dlq-hang run {}: {}", w.run_id, verdict(passed));
    println!(
        "  hang                {:?}, {} SQS calls held",
        args.hang_for, stats.faults.sqs_held
    );
    println!(
        "  dead letters        {} of {} poison records in the queue ({} entries, {duplicates} repeats), {in_file} in the fallback file",
        poison.len() - missing,
        poison.len(),
        entries.len()
    );
    println!(
        "  checkpoint          during the hang at most {}, first poison put during it at {}",
        max_cp_during
            .as_ref()
            .map_or_else(|| "none".to_string(), |p| p.sequence.to_string()),
        first_poison_during
            .as_ref()
            .map_or_else(|| "none".to_string(), |p| p.sequence.to_string())
    );
    println!(
        "  good events         {} of {} stored; settled {}",
        items.found,
        valid.len(),
        settled_after.map_or_else(
            || "never".into(),
            |s| format!("{s:.1} s after the recovery")
        )
    );
    report_failures(&failures);
    finish(&w, passed, args, &items.tables).await;
    if passed {
        let _ = sqs.delete_queue().queue_url(&queue_url).send().await;
    }
    println!(
        "dlq-hang: {} of {} dead letters in the queue, {in_file} in a local file, checkpoint held during the hang: {}, settled {}",
        poison.len() - missing,
        poison.len(),
        match (&max_cp_during, &first_poison_during) {
            (Some(cp), Some(p)) => cp < p,
            _ => true,
        },
        settled_after.map_or_else(
            || "never".into(),
            |s| format!("{s:.1} s after the recovery")
        )
    );
    Ok(passed)
}

/// Receives (and deletes) every message of the queue: the dead letters.
async fn drain_queue(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<Vec<DeadLetter>> {
    let mut out = Vec::new();
    let mut empty = 0;
    while empty < 3 {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(300)
            .wait_time_seconds(1)
            .send()
            .await
            .map_err(|e| anyhow!(aws_sdk_sqs::error::DisplayErrorContext(e).to_string()))?;
        let messages = got.messages();
        if messages.is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        for m in messages {
            let body = m.body().unwrap_or_default();
            out.push(serde_json::from_str(body).context("a dead-letter message")?);
        }
    }
    Ok(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn verdict(passed: bool) -> &'static str {
    if passed { "PASS" } else { "FAIL" }
}

fn report_failures(failures: &[String]) {
    for f in failures {
        println!("  FAILED: {f}");
    }
}

/// Cleans up after a pass (a failing run keeps its tables and logs for a
/// look). The stream goes either way: the emulator's shard limit is shared.
async fn finish(w: &World, passed: bool, args: &Args, tables: &[String]) {
    if passed && !args.keep {
        w.clean_up(tables).await;
    } else {
        let _ = w
            .stack
            .kinesis()
            .delete_stream()
            .stream_name(&w.run_id)
            .send()
            .await;
        println!("  kept                tables and logs of {}", w.run_id);
    }
}
