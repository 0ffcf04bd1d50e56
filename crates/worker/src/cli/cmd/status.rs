//! `tidemark status`: per shard owner, lag and checkpoint; a summary line;
//! the lease table's KCL state and the KCL's own items in it (never shown
//! as shards); the stream's settings (DescribeStreamSummary);
//! an SQS source's queue depth and the age of the oldest message the workers
//! received; per table period, state and capacity. Cheap: one lease-table
//! scan, one coordinator-table scan (the workers' reports: lag as each
//! worker last measured it, see `crate::run::report`), one
//! DescribeTable per period table, one GetQueueAttributes; no GetRecords
//! (those compete with the workers for a shard's 5 reads per second) unless
//! `--probe-lag`.

use std::time::Duration;

use crate::config::Config;
use crate::maintenance::TableInfo;
use crate::maintenance::TableManager;
use crate::maintenance::lift;
use crate::run::report::{self, WorkerReport};
use anyhow::Result;
use chrono::Utc;
use futures::StreamExt as _;
use futures::future::LocalBoxFuture;
use std::collections::BTreeMap;
use tidemark_consumer::kinesis::{StreamSettings, stream_settings};
use tidemark_consumer::lease::{Checkpoint, Inspection, LeaseTable, OtherItem, OtherKind};

use super::render::{self, Output, ShardRow, outln};
use super::source::{PerKind, per_kind};
use super::stream_name;

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
    /// Former spelling of the global `--output json`.
    #[arg(long, hide = true)]
    json: bool,
    /// Full checkpoints (Kinesis sequence numbers run to 56 digits).
    #[arg(long)]
    wide: bool,
    /// Refresh every INTERVAL (default 5s) until interrupted.
    #[arg(long, num_args = 0..=1, default_missing_value = "5s",
          value_parser = humantime_serde::re::humantime::parse_duration)]
    watch: Option<Duration>,
    /// Also measure each shard's lag with one GetRecords per shard (at most 4
    /// at once). Off by default: those reads compete with the workers'.
    #[arg(long)]
    probe_lag: bool,
}

/// Everything `status` shows, as its JSON output has it.
#[derive(Debug, serde::Serialize)]
struct Snapshot {
    summary: Option<Summary>,
    shards: Vec<ShardRow>,
    /// Why the shards could not be listed.
    shards_error: Option<String>,
    /// The lease table's KCL state and the KCL's own items in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    kcl: Option<KclStatus>,
    /// Each stream's settings (DescribeStreamSummary).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    streams: Vec<StreamSettings>,
    /// Why a stream's settings could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    streams_error: Option<String>,
    /// Why the workers' reports (lag, queue age) could not be read.
    reports_error: Option<String>,
    queue: Option<render::QueueRow>,
    queue_error: Option<String>,
    tables: Vec<TableInfo>,
    tables_error: Option<String>,
    /// Capacity lifts maintenance holds for late backlogs (from the
    /// coordinator table).
    lifts: Vec<render::LiftRow>,
    /// Why the lifts could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    lifts_error: Option<String>,
    /// Adaptive sharding: the split entities of the tables that take
    /// writes now.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    splits: Vec<SplitRow>,
    /// Why a table's splits could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    splits_error: Option<String>,
    /// The first failure, kept whole (its cause decides the exit status)
    /// for when no section could be read at all.
    #[serde(skip)]
    first_error: Option<anyhow::Error>,
    /// Sections that could be read.
    #[serde(skip)]
    read: usize,
}

/// One split entity of a current table.
#[derive(Debug, serde::Serialize)]
struct SplitRow {
    table: String,
    entity: String,
    /// Partition keys it spreads over now.
    fan_out: u32,
    /// From when (event time) that fan-out applies.
    from: String,
    /// The worker that recorded it, and why.
    worker: String,
    evidence: String,
}

/// What the lease table holds besides leases, and what Tidemark makes of it.
#[derive(Debug, serde::Serialize)]
struct KclStatus {
    /// The table's state (`kcl2x`, `kcl3x_separate_tables`,
    /// `kcl35_single_table`, ...).
    state: &'static str,
    /// The same in words.
    description: &'static str,
    /// Why a worker would refuse to start on it, with the step to take.
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<String>,
    /// Which KCL can read the table again.
    way_back: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
    /// Every item that is not a lease, by key.
    items: Vec<KclItemRow>,
}

/// One item of the lease table that is not a lease.
#[derive(Debug, serde::Serialize)]
struct KclItemRow {
    key: String,
    /// The KCL entity type, `unknown` or `unreadable lease`.
    kind: &'static str,
    /// What it says (a migration state, a lock owner, a last report), or
    /// why it is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

impl KclItemRow {
    fn of(o: &OtherItem) -> Self {
        let s = |a: &str| o.item.get(a).and_then(|v| v.as_s().ok()).cloned();
        let detail = match &o.kind {
            OtherKind::Unknown(why) | OtherKind::Unreadable(why) => Some(why.clone()),
            OtherKind::Kcl(e) => match e.as_str() {
                "CLIENT_VERSION_MIGRATION" => s("cv"),
                "TABLE_MIGRATION" => s("tm"),
                "LEADER" => s("ownerName").map(|o| format!("owner {o}")),
                "WORKER_METRIC_STATS" => o
                    .item
                    .get("lut")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse::<i64>().ok())
                    .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                    .map(|t| format!("last report {}", t.format("%Y-%m-%dT%H:%M:%SZ"))),
                _ => None,
            },
        };
        Self {
            key: o.key.clone(),
            kind: o.kind.label(),
            detail,
        }
    }
}

impl KclStatus {
    fn of(found: &Inspection) -> Self {
        let j = &found.judgement;
        let mut items: Vec<KclItemRow> = found.census.others.iter().map(KclItemRow::of).collect();
        items.sort_by(|a, b| a.key.cmp(&b.key));
        Self {
            state: j.state.name(),
            description: j.state.describe(),
            refused: j.refusal.clone(),
            way_back: j.way_back.clone(),
            warning: j.warning.clone(),
            items,
        }
    }
}

/// The summary line's numbers.
#[derive(Debug, serde::Serialize)]
struct Summary {
    shards: usize,
    finished: usize,
    unowned: usize,
    owners: usize,
    max_lag_ms: Option<i64>,
    /// The largest checkpoint lag the owners reported, ms.
    max_checkpoint_lag_ms: Option<i64>,
}

pub(crate) async fn run(config: &Config, args: &Args) -> Result<()> {
    let output = super::output(if args.json {
        Output::Json
    } else {
        Output::Table
    });
    let Some(every) = args.watch else {
        let mut snap = snapshot(config, args).await?;
        print(&snap, args, output)?;
        // Nothing could be read: fail, with the cause (exit 69 when AWS
        // did not answer).
        return match snap.first_error.take() {
            Some(e) if snap.read == 0 => Err(e.context("no part of the status could be read")),
            _ => Ok(()),
        };
    };
    // On a terminal each look replaces the last, as watch(1) does; into a
    // file or pipe they follow each other, each under its time.
    let terminal = {
        use std::io::IsTerminal;
        std::io::stdout().is_terminal()
    };
    loop {
        let snap = snapshot(config, args).await?;
        if output == Output::Table {
            if terminal {
                super::render::write_out(b"\x1b[2J\x1b[H")?;
            }
            outln!(
                "every {}  {}",
                humantime_serde::re::humantime::format_duration(every),
                Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
            )?;
        }
        print(&snap, args, output)?;
        if output == Output::Table && !terminal {
            outln!()?;
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// One look at the leases, the queue and the tables; a failed part is
/// reported in its section, the others still shown.
async fn snapshot(config: &Config, args: &Args) -> Result<Snapshot> {
    let sdk = super::sdk().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let mut snap = Snapshot {
        summary: None,
        shards: Vec::new(),
        shards_error: None,
        kcl: None,
        streams: Vec::new(),
        streams_error: None,
        reports_error: None,
        queue: None,
        queue_error: None,
        tables: Vec::new(),
        tables_error: None,
        lifts: Vec::new(),
        lifts_error: None,
        splits: Vec::new(),
        splits_error: None,
        first_error: None,
        read: 0,
    };
    // What the workers last reported (lag per shard, SQS receive age), from
    // the coordinator table: no stream reads.
    let reports = if config.maintenance.enabled {
        report::read(&dynamodb, &config.maintenance.coordinator_table)
            .await
            .map_err(|e| {
                format!(
                    "worker reports unreadable: {}",
                    tidemark_aws_errors::describe(&e)
                )
            })
    } else {
        Err("no worker reports (maintenance disabled)".to_string())
    };
    if !args.probe_lag {
        snap.reports_error = reports.as_ref().err().cloned();
    }
    per_kind(
        &config.source,
        SourceSection {
            sdk: &sdk,
            dynamodb: &dynamodb,
            probe_lag: args.probe_lag,
            reports: &reports,
            snap: &mut snap,
        },
    )
    .await;
    let dynamodb_for_lifts = dynamodb.clone();
    if config.schema.adaptive_sharding.enabled {
        let now_ms = Utc::now().timestamp_millis();
        let attrs = &config.schema.key_attributes;
        for table in crate::run::splits::live_tables_of(&config.schema, now_ms) {
            match crate::run::splits::load(&dynamodb, &table, attrs, None).await {
                Ok(Some(s)) => {
                    for (entity, list) in s.entities() {
                        let Some(last) = list.iter().max_by_key(|x| x.fan_out) else {
                            continue;
                        };
                        snap.splits.push(SplitRow {
                            table: table.clone(),
                            entity: entity.to_owned(),
                            fan_out: last.fan_out,
                            from: tidemark_schema::timefmt::iso_millis(last.from_ms),
                            worker: last.worker.clone(),
                            evidence: last.evidence.clone(),
                        });
                    }
                }
                Ok(None) => {}
                Err(e) => snap.splits_error = Some(e.to_string()),
            }
        }
    }
    match TableManager::from_config(config, dynamodb)
        .list(Utc::now())
        .await
    {
        Ok(t) => {
            snap.read += 1;
            snap.tables = t;
        }
        Err(e) => {
            snap.tables_error = Some(format!("{e:#}"));
            snap.first_error.get_or_insert(e.into());
        }
    }
    if config.maintenance.enabled {
        match lift::read(&dynamodb_for_lifts, &config.maintenance.coordinator_table).await {
            Ok(lifts) => {
                snap.lifts = lifts
                    .into_iter()
                    .map(|(table, l)| render::LiftRow {
                        table,
                        write: l.write,
                        on_demand: l.on_demand,
                        reason: l.reason,
                        since_ms: l.since_ms,
                        renewed_ms: l.renewed_ms,
                        backlog_items: l.backlog_items,
                    })
                    .collect();
            }
            // No coordinator table yet: no worker ran maintenance, no lift.
            Err(aws_sdk_dynamodb::Error::ResourceNotFoundException(_)) => {}
            Err(e) => snap.lifts_error = Some(format!("capacity lifts unreadable: {e}")),
        }
    }
    Ok(snap)
}

/// What `status` shows of the source: its shards from the lease table
/// (Kinesis) or its queue's depth and the oldest message's age (SQS).
struct SourceSection<'a> {
    sdk: &'a aws_config::SdkConfig,
    dynamodb: &'a aws_sdk_dynamodb::Client,
    probe_lag: bool,
    reports: &'a Result<BTreeMap<String, WorkerReport>, String>,
    snap: &'a mut Snapshot,
}

impl<'a> PerKind<'a> for SourceSection<'a> {
    // Not Send: `status` runs on the command's own task.
    type Output = LocalBoxFuture<'a, ()>;

    fn kinesis(self, k: &'a tidemark_consumer::KinesisConfig) -> LocalBoxFuture<'a, ()> {
        let SourceSection {
            sdk,
            dynamodb,
            probe_lag,
            reports,
            snap,
        } = self;
        Box::pin(async move {
            match shards(sdk, dynamodb, k, probe_lag, reports).await {
                Ok((rows, kcl)) => {
                    snap.read += 1;
                    snap.summary = Some(summary(&rows));
                    snap.shards = rows;
                    snap.kcl = kcl;
                }
                Err(e) => {
                    snap.shards_error = Some(format!("{e:#}"));
                    snap.first_error.get_or_insert(e);
                }
            }
            let kinesis = aws_sdk_kinesis::Client::new(sdk);
            let names: Vec<&str> = if k.streams.is_empty() {
                vec![k.stream.as_str()]
            } else {
                k.streams.iter().map(|s| s.stream.as_str()).collect()
            };
            for name in names {
                match stream_settings(&kinesis, name).await {
                    Ok(s) => snap.streams.push(s),
                    // Every stream's error, not only the last one's.
                    Err(e) => {
                        let e = format!("{name}: {e}");
                        snap.streams_error = Some(match snap.streams_error.take() {
                            Some(before) => format!("{before}; {e}"),
                            None => e,
                        });
                    }
                }
            }
        })
    }

    fn sqs(self, q: &'a tidemark_consumer::SqsConfig) -> LocalBoxFuture<'a, ()> {
        let SourceSection {
            sdk, reports, snap, ..
        } = self;
        Box::pin(async move {
            match queue(sdk, &q.queue_url).await {
                Ok(mut row) => {
                    // Unreadable reports are said once, above.
                    if let Ok(r) = reports {
                        row.oldest_age_ms = r.values().filter_map(|r| r.queue_age_ms).max();
                        if row.oldest_age_ms.is_none() {
                            row.oldest_age_error = Some("no worker report".into());
                        }
                    }
                    snap.read += 1;
                    snap.queue = Some(row);
                }
                Err(e) => {
                    snap.queue_error = Some(format!("{e:#}"));
                    snap.first_error.get_or_insert(e);
                }
            }
        })
    }
}

fn print(snap: &Snapshot, args: &Args, output: Output) -> Result<()> {
    if output != Output::Table {
        return render::print_json(snap, output);
    }
    if let Some(e) = &snap.shards_error {
        outln!("shards: error: {e}\n")?;
    }
    if let Some(s) = &snap.summary {
        let lag = s
            .max_lag_ms
            .map_or(String::new(), |ms| format!(", max lag {}", render::lag(ms)));
        let ckpt = s.max_checkpoint_lag_ms.map_or(String::new(), |ms| {
            format!(", max checkpoint lag {}", render::lag(ms))
        });
        outln!(
            "{} shards ({} finished), {} unowned, {} workers{lag}{ckpt}",
            s.shards,
            s.finished,
            s.unowned,
            s.owners
        )?;
        if !snap.shards.is_empty() {
            outln!("{}\n", render::status_shards(&snap.shards, args.wide))?;
        }
    }
    if let Some(e) = &snap.reports_error {
        outln!("lag: {e}\n")?;
    }
    if let Some(k) = &snap.kcl {
        print_kcl(k);
    }
    for st in &snap.streams {
        println!("{}", stream_line(st));
    }
    if let Some(e) = &snap.streams_error {
        println!("stream settings: error: {e}");
    }
    if !snap.streams.is_empty() || snap.streams_error.is_some() {
        println!();
    }
    if let Some(e) = &snap.queue_error {
        outln!("queue: error: {e}\n")?;
    }
    if let Some(q) = &snap.queue {
        outln!("{}\n", render::status_queue(q))?;
    }
    match &snap.tables_error {
        Some(e) => outln!("tables: error: {e}")?,
        None => outln!("{}", render::status_tables(&snap.tables)?)?,
    }
    if let Some(e) = &snap.lifts_error {
        outln!("\n{e}")?;
    }
    if let Some(e) = &snap.splits_error {
        outln!("\nsplits: error: {e}")?;
    }
    if !snap.splits.is_empty() {
        outln!("\nsplit entities (adaptive sharding):")?;
        for s in &snap.splits {
            outln!(
                "  {} {} x{} from {} (by {}: {})",
                s.table,
                s.entity,
                s.fan_out,
                s.from,
                s.worker,
                s.evidence
            )?;
        }
    }
    if !snap.lifts.is_empty() {
        let now = Utc::now().timestamp_millis();
        outln!(
            "\ncapacity lifts (maintenance lowers each once its backlog is gone):\n{}",
            render::status_lifts(&snap.lifts, now)
        )?;
    }
    Ok(())
}

/// The lease table's KCL state, and its KCL items one per line.
fn print_kcl(k: &KclStatus) {
    match &k.refused {
        Some(why) => println!(
            "lease table: {}: a worker will not start on it: {why}",
            k.description
        ),
        None => println!("lease table: {}; way back: {}", k.description, k.way_back),
    }
    if let Some(w) = &k.warning {
        println!("warning: {w}");
    }
    if !k.items.is_empty() {
        println!("KCL items (not shards, left as they are):");
        for i in &k.items {
            match &i.detail {
                Some(d) => println!("  {} ({}): {d}", i.key, i.kind),
                None => println!("  {} ({})", i.key, i.kind),
            }
        }
    }
    println!();
}

/// One stream's settings on one line.
fn stream_line(s: &StreamSettings) -> String {
    let or =
        |v: Option<i32>, unit: &str| v.map_or("not reported".to_string(), |v| format!("{v}{unit}"));
    let mut parts = vec![
        s.capacity_mode
            .clone()
            .unwrap_or_else(|| "capacity mode not reported".into()),
        format!("{} open shards", s.open_shards),
        format!("retention {} h", s.retention_hours),
        format!("max record size {}", s.max_record_size.describe()),
    ];
    if let Some(d) = &s.record_distribution {
        parts.push(if s.auto_distribution() {
            format!("record distribution {d} (per-key order not guaranteed; per-shard order holds)")
        } else {
            format!("record distribution {d}")
        });
    }
    parts.push(format!(
        "fan-out consumers {} of {} (account mode {})",
        or(s.consumer_count, ""),
        s.fan_out_limit,
        s.account_mode.describe()
    ));
    if let Some(w) = &s.warm_throughput {
        parts.push(format!(
            "warm throughput {} of {} MiB/s",
            or(w.current_mibps, ""),
            or(w.target_mibps, "")
        ));
    }
    format!("stream {}: {}", s.stream, parts.join(", "))
}

fn summary(rows: &[ShardRow]) -> Summary {
    let open: Vec<&ShardRow> = rows
        .iter()
        .filter(|r| r.checkpoint != "SHARD_END")
        .collect();
    let mut owners: Vec<&str> = rows.iter().filter_map(|r| r.owner.as_deref()).collect();
    owners.sort_unstable();
    owners.dedup();
    Summary {
        shards: rows.len(),
        finished: rows.len() - open.len(),
        unowned: open.iter().filter(|r| r.owner.is_none()).count(),
        owners: owners.len(),
        max_lag_ms: rows.iter().filter_map(|r| r.lag_ms).max(),
        max_checkpoint_lag_ms: rows
            .iter()
            .filter_map(|r| r.checkpoint_lag.map(|l| l.ms))
            .max(),
    }
}

/// The lease table's view of every shard (and lags when probed).
async fn shards(
    sdk: &aws_config::SdkConfig,
    dynamodb: &aws_sdk_dynamodb::Client,
    k: &tidemark_consumer::KinesisConfig,
    probe_lag: bool,
    reports: &Result<BTreeMap<String, WorkerReport>, String>,
) -> Result<(Vec<ShardRow>, Option<KclStatus>)> {
    if !table_exists(dynamodb, &k.lease_table).await? {
        // No worker has run yet: no lease table, no shard to report.
        eprintln!(
            "lease table {} does not exist yet (no worker has run)",
            k.lease_table
        );
        return Ok((Vec::new(), None));
    }
    // The same reads and verdict as a worker's start-up: the KCL's items
    // are listed as such, never as shards.
    let found = tidemark_consumer::lease::inspect(
        &LeaseTable::new(dynamodb.clone(), k.lease_table.clone()),
        &k.kcl_side_table_names(),
        k.max_clock_skew,
    )
    .await?;
    let kcl = KclStatus::of(&found);
    let mut rows: Vec<ShardRow> = found
        .census
        .leases
        .into_iter()
        .map(|l| ShardRow {
            // During a KCL hand-off the worker handing over still holds it.
            handoff_to: l
                .checkpoint_owner
                .is_some()
                .then(|| l.owner.clone())
                .flatten(),
            owner: l.actual_owner().map(str::to_string),
            checkpoint: match &l.checkpoint {
                Checkpoint::At(p) => format!("{}.{}", p.sequence, p.sub_sequence),
                Checkpoint::ShardEnd => "SHARD_END".into(),
                Checkpoint::TrimHorizon => "TRIM_HORIZON".into(),
                Checkpoint::Latest => "LATEST".into(),
                Checkpoint::AtTimestamp => "AT_TIMESTAMP".into(),
            },
            lag_ms: None,
            lag_error: None,
            checkpoint_lag: None,
            shard: l.key,
            parents: l.parents,
        })
        .collect();
    for r in &mut rows {
        if r.checkpoint == "SHARD_END" {
            continue;
        }
        match (reports, &r.owner) {
            // Said once, above the table.
            (Err(_), _) | (Ok(_), None) => {}
            (Ok(reports), Some(owner)) => {
                // Multi-stream reports key lags `stream/shard`.
                let key = match tidemark_consumer::lease::parse_lease_key(&r.shard) {
                    Some((id, shard)) => format!("{}/{shard}", id.name),
                    None => r.shard.clone(),
                };
                let report = reports.get(owner);
                match report.and_then(|w| w.shard_lag_ms.get(&key)) {
                    Some(ms) => r.lag_ms = Some(*ms),
                    None if report.is_some() => {
                        r.lag_error = Some("not read in the last report".into())
                    }
                    None => r.lag_error = Some("no report from the owner".into()),
                }
                // The owner reports only shards whose checkpoint is behind.
                r.checkpoint_lag =
                    report.map(|w| w.checkpoint_lag.get(&key).copied().unwrap_or_default());
            }
        }
    }
    rows.sort_by(|a, b| a.shard.cmp(&b.shard));
    if probe_lag {
        let kinesis = aws_sdk_kinesis::Client::new(sdk);
        let stream = stream_name(&k.stream);
        let probes = rows.iter().map(|r| {
            let kinesis = &kinesis;
            // A multi-stream lease key names its stream and shard.
            let (stream, shard) = match tidemark_consumer::lease::parse_lease_key(&r.shard) {
                Some((id, shard)) => (id.name, shard.to_string()),
                None => (stream.to_string(), r.shard.clone()),
            };
            let sequence = r
                .checkpoint
                .split('.')
                .next()
                .unwrap_or_default()
                .to_string();
            let reading = r.checkpoint.contains('.');
            async move {
                if reading {
                    lag_after(kinesis, &stream, &shard, &sequence)
                        .await
                        .map(Some)
                } else {
                    Ok(None)
                }
            }
        });
        let lags: Vec<Result<Option<i64>>> =
            futures::stream::iter(probes).buffered(4).collect().await;
        for (r, lag) in rows.iter_mut().zip(lags) {
            match lag {
                Ok(ms) => {
                    r.lag_ms = ms;
                    r.lag_error = None;
                }
                Err(e) => {
                    r.lag_ms = None;
                    r.lag_error = Some(format!("error: {e:#}"));
                }
            }
        }
    }
    Ok((rows, Some(kcl)))
}

/// An SQS source's queue depth.
async fn queue(sdk: &aws_config::SdkConfig, url: &str) -> Result<render::QueueRow> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = aws_sdk_sqs::Client::new(sdk)
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(A::ApproximateNumberOfMessagesDelayed)
        .send()
        .await?;
    let get = |a: A| {
        out.attributes()
            .and_then(|m| m.get(&a))
            .and_then(|v| v.parse().ok())
    };
    Ok(render::QueueRow {
        queue: url.rsplit('/').next().unwrap_or(url).to_string(),
        visible: get(A::ApproximateNumberOfMessages),
        in_flight: get(A::ApproximateNumberOfMessagesNotVisible),
        delayed: get(A::ApproximateNumberOfMessagesDelayed),
        oldest_age_ms: None,
        oldest_age_error: None,
    })
}

/// Whether `table` exists: the SDK's typed not-found error means no.
async fn table_exists(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Result<bool> {
    match dynamodb.describe_table().table_name(table).send().await {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(anyhow::Error::from(e).context(format!("describing table {table}"))),
    }
}

/// MillisBehindLatest just after `sequence` (one GetRecords of one record).
async fn lag_after(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    shard: &str,
    sequence: &str,
) -> Result<i64> {
    let it = kinesis
        .get_shard_iterator()
        .stream_name(stream)
        .shard_id(shard)
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::AfterSequenceNumber)
        .starting_sequence_number(sequence)
        .send()
        .await?
        .shard_iterator
        .ok_or_else(|| anyhow::anyhow!("no shard iterator"))?;
    kinesis
        .get_records()
        .shard_iterator(it)
        .limit(1)
        .send()
        .await?
        .millis_behind_latest
        .ok_or_else(|| anyhow::anyhow!("no MillisBehindLatest"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_consumer::kinesis::{AccountMode, MaxRecordSize};

    fn settings(reported_kib: Option<i32>) -> StreamSettings {
        StreamSettings {
            stream: "events".into(),
            arn: "arn:aws:kinesis:us-east-1:123456789012:stream/events".into(),
            status: "ACTIVE".into(),
            capacity_mode: Some("PROVISIONED".into()),
            record_distribution: None,
            max_record_size_kib: reported_kib,
            max_record_size: MaxRecordSize::of(reported_kib),
            open_shards: 4,
            retention_hours: 24,
            consumer_count: Some(0),
            warm_throughput: None,
            account_mode: AccountMode::NotApplicable,
            fan_out_limit: 20,
        }
    }

    /// kinesis-local (and any answer without `MaxRecordSizeInKiB`) shows
    /// the documented default, marked as such; a raised stream its own.
    #[test]
    fn the_record_size_limit_shows_the_default_when_not_reported() {
        let line = stream_line(&settings(None));
        assert!(
            line.contains("max record size 1024 KiB (default)"),
            "{line}"
        );
        let line = stream_line(&settings(Some(10_240)));
        assert!(line.contains("max record size 10240 KiB,"), "{line}");
        assert!(!line.contains("(default)"), "{line}");
    }

    #[test]
    fn json_has_the_record_size_limit_in_force() {
        let json = serde_json::to_value(settings(None)).unwrap();
        assert_eq!(json["max_record_size_kib"], serde_json::Value::Null);
        assert_eq!(
            json["max_record_size"],
            serde_json::json!({"kib": 1024, "reported": false})
        );
        let json = serde_json::to_value(settings(Some(2048))).unwrap();
        assert_eq!(
            json["max_record_size"],
            serde_json::json!({"kib": 2048, "reported": true})
        );
    }
}
