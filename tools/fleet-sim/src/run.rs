//! Runs a scenario: real [`KinesisSource`]s (coordinator, renewer, readers)
//! on one current-thread runtime with paused time, sharing a [`MemTable`]
//! and a fake [`Stream`]; samples ownership every simulated second and
//! derives the figures.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_consumer::kinesis::{LeaseAssignment, ShardState, StatusHandle};
use tidemark_consumer::lease::{LeaseTable, LeaseTiming};
use tidemark_consumer::sim::LeaseTuning;
use tidemark_consumer::{Ack, KinesisConfig, KinesisSource, Record};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::coord::MemCoord;
use crate::scenario::{EventKind, Scenario};
use crate::store::{Change, Faults, MemTable};
use crate::stream::Stream;

/// The lease protocol a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// The lease code before tuning ([`LeaseTuning::before`]).
    Before,
    /// Every worker lists the table, tuned ([`LeaseTuning::tuned`]).
    Listing,
    /// `lease_assignment = "leader"` (with [`LeaseTuning::tuned`]'s renewals
    /// and folded checkpoints).
    Leader,
}

impl Protocol {
    /// The tuning switches.
    pub fn tuning(self) -> LeaseTuning {
        match self {
            Self::Before => LeaseTuning::before(),
            Self::Listing | Self::Leader => LeaseTuning::tuned(),
        }
    }

    /// The assignment mode.
    pub fn assignment(self) -> LeaseAssignment {
        match self {
            Self::Leader => LeaseAssignment::Leader,
            Self::Before | Self::Listing => LeaseAssignment::Listing,
        }
    }
}

/// The figures of one run. Times are measured from the reference event (the
/// last event's last step; the start for a cold start).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Figures {
    /// Scenario name.
    pub name: String,
    /// Shards and workers at the start.
    pub shards: usize,
    /// Workers at the start.
    pub workers: usize,
    /// Seconds until every active lease had a live owner (None: never).
    pub all_owned_s: Option<f64>,
    /// Seconds until max − min leases per live worker ≤ 1, for good.
    pub balanced_s: Option<f64>,
    /// Owner changes per shard after the first event: the most for one shard.
    pub max_moves: usize,
    /// Owner changes per shard after the first event: the mean.
    pub mean_moves: f64,
    /// Shards left without a live owner for longer than one failover time
    /// (after the first event).
    pub unowned_past_failover: usize,
    /// Lease-table read units per second, steady state (mean).
    pub rcu_steady: f64,
    /// Lease-table read units per second, highest one-second figure.
    pub rcu_peak: f64,
    /// Lease-table write units per second, steady state (mean).
    pub wcu_steady: f64,
    /// Highest one-second write units.
    pub wcu_peak: f64,
    /// Steady read units per second per 10 shards.
    pub rcu_per_10_shards: f64,
    /// Steady write units per shard per renewal interval (failover / 3).
    pub wcu_per_shard_renewal: f64,
    /// Scans (pages) per second, steady.
    pub scans_steady: f64,
    /// Of `rcu_steady`: owner-index Queries (leader mode).
    pub index_rcu_steady: f64,
    /// Of `wcu_steady`: owner-index writes (changes of owner).
    pub index_wcu_steady: f64,
    /// Owner-index Queries per second, steady.
    pub queries_steady: f64,
    /// Coordinator-table (leader lock, heartbeats) RCU/s, steady.
    pub coord_rcu_steady: f64,
    /// Coordinator-table WCU/s, steady.
    pub coord_wcu_steady: f64,
    /// Calls throttled over the run.
    pub throttled: u64,
    /// Shard-seconds (after the first event) during which two live workers
    /// both had the shard as owned and were reading it (duplicate
    /// processing windows: the old owner has not yet seen the steal).
    pub dup_hold_shard_s: u64,
    /// Times (after the first event) a worker handed on records of a shard
    /// within a failover time of its previous batch of it, while another
    /// worker had handed on records of that shard in between.
    pub dup_submits: u64,
    /// Checkpoints landed by a worker other than the shard's latest
    /// acquirer (must be 0: fencing refuses them).
    pub dup_checkpoints: u64,
    /// Leases owned (table) or held (status) by workers cut off from the
    /// coordinator table, at the end (leader mode: must be 0).
    pub isolated_holding: usize,
    /// Mean lease item size in bytes at the end.
    pub item_bytes: usize,
    /// Leases per live worker each second: (second, worker, leases).
    #[serde(skip)]
    pub series: Vec<(u64, String, usize)>,
}

struct Worker {
    id: String,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    sink: JoinHandle<()>,
    status: StatusHandle,
    crashed: bool,
}

impl Worker {
    fn live(&self) -> bool {
        !self.crashed && !self.task.is_finished()
    }
}

/// A worker's last batch of a shard: the shard's batch number, and when.
type LastBatch = (u64, Instant);

/// Record submissions per shard: who handed on its last batch, and when
/// each worker did last.
#[derive(Debug, Default)]
struct Submits {
    /// shard -> (worker -> sequence number of its last batch), plus the
    /// global batch counter per shard.
    shards: HashMap<String, (u64, HashMap<String, LastBatch>)>,
    dup: u64,
    /// Counted from here (the first event).
    from: Option<Instant>,
}

impl Submits {
    fn record(&mut self, shard: &str, worker: &str, now: Instant, failover: Duration) {
        let (n, by) = self.shards.entry(shard.to_string()).or_default();
        *n += 1;
        let mine = by.get(worker).copied();
        if let Some((prev, at)) = mine {
            // Someone else handed on this shard since my previous batch, and
            // I was still at it within a failover time: both processed it.
            let other = by.iter().any(|(w, (k, _))| w != worker && *k > prev);
            if other && now.duration_since(at) < failover && self.from.is_some_and(|f| now >= f) {
                self.dup += 1;
            }
        }
        by.insert(worker.to_string(), (*n, now));
    }
}

struct Fleet {
    sc: Scenario,
    table: Arc<MemTable>,
    stream: Stream,
    timing: LeaseTiming,
    workers: Vec<Worker>,
    submits: Arc<Mutex<Submits>>,
    next: usize,
    protocol: Protocol,
    coord: Arc<MemCoord>,
}

impl Fleet {
    fn spawn(&mut self, id: String, delay: Duration) {
        let mut cfg = KinesisConfig::new("sim", "leases", id.clone());
        cfg.failover_time = self.sc.failover;
        cfg.checkpoint_interval = self.sc.checkpoint_interval;
        cfg.idle_poll = self.sc.idle_poll;
        cfg.shutdown_grace = Duration::from_secs(5);
        cfg.lease_tuning = self.protocol.tuning();
        cfg.lease_assignment = self.protocol.assignment();
        let table = LeaseTable::with_store(self.table.clone(), self.timing);
        let source = KinesisSource::with_lease_table(cfg, self.stream.client(), table)
            .with_leader_store(self.coord.clone());
        let status = source.status_handle();
        let shutdown = CancellationToken::new();
        let (tx, mut rx) = mpsc::channel::<Vec<Record>>(64);
        let submits = self.submits.clone();
        let who = id.clone();
        let failover = self.sc.failover;
        let sink = tokio::spawn(async move {
            while let Some(batch) = rx.recv().await {
                let now = Instant::now();
                let mut shards = HashSet::new();
                for r in &batch {
                    if let tidemark_schema::Origin::Kinesis { shard_id, .. } = &r.origin {
                        shards.insert(shard_id.as_str().to_string());
                    }
                }
                if let Ok(mut s) = submits.lock() {
                    for shard in shards {
                        s.record(&shard, &who, now, failover);
                    }
                }
                Ack::done_all(batch.into_iter().map(|r| r.ack));
            }
        });
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = source.run(tx, stop).await;
        });
        self.workers.push(Worker {
            id,
            shutdown,
            task,
            sink,
            status,
            crashed: false,
        });
    }

    fn new_id(&mut self) -> String {
        self.next += 1;
        format!("worker-{:04}", self.next)
    }

    fn crash(&mut self, count: usize) {
        for w in self.workers.iter_mut().filter(|w| w.live()).take(count) {
            w.task.abort();
            w.sink.abort();
            w.crashed = true;
        }
    }

    fn isolate(&mut self, count: usize) {
        for w in self.workers.iter().filter(|w| w.live()).take(count) {
            self.coord.cut_off(&w.id);
        }
    }

    /// Replaces the `i`-th of the workers that were live at the deploy's
    /// start: the new one starts, the old one shuts down cleanly.
    fn replace(&mut self, old: &str) {
        let id = self.new_id();
        self.spawn(id, Duration::ZERO);
        if let Some(w) = self.workers.iter().find(|w| w.id == old) {
            w.shutdown.cancel();
        }
    }
}

/// One ownership sample.
struct Sample {
    at: Duration,
    /// live worker -> leases it owns in the table.
    per_worker: BTreeMap<String, usize>,
    /// Active leases without a live owner.
    unowned: HashSet<String>,
    /// Shards that two or more live workers were reading at once.
    dup_hold: usize,
}

/// Runs `sc` to the end on the current (paused-clock) runtime, every worker
/// with `protocol`.
pub async fn run(sc: Scenario, protocol: Protocol) -> Figures {
    let faults = Faults {
        latency: sc.faults.latency,
        fail_rate: sc.faults.fail_rate,
        rcu_limit: sc.faults.rcu_limit,
        wcu_limit: sc.faults.wcu_limit,
        seed: sc.seed,
    };
    let start = Instant::now();
    let table = Arc::new(MemTable::new("leases", faults));
    let stream = Stream::new(sc.shards, sc.records_per_second);
    let mut fleet = Fleet {
        timing: LeaseTiming::new(sc.failover),
        sc: sc.clone(),
        table: table.clone(),
        stream,
        workers: Vec::new(),
        submits: Arc::new(Mutex::new(Submits {
            from: Some(start + sc.first_event()),
            ..Submits::default()
        })),
        next: 0,
        protocol,
        coord: Arc::new(MemCoord::new(sc.faults.latency)),
    };
    for i in 0..sc.workers {
        let delay = sc.start_spread.mul_f64(i as f64 / sc.workers.max(1) as f64);
        let id = fleet.new_id();
        fleet.spawn(id, delay);
    }
    // Steps: (time, action), rolling deploys expanded.
    let mut steps: Vec<(Duration, EventKind, usize, Option<String>)> = Vec::new();
    for e in &sc.events {
        match e.kind {
            EventKind::Rolling => {
                let old: Vec<String> = fleet.workers.iter().map(|w| w.id.clone()).collect();
                for (j, id) in old.into_iter().take(e.count).enumerate() {
                    steps.push((e.at + e.every * j as u32, e.kind, 1, Some(id)));
                }
            }
            _ => steps.push((e.at, e.kind, e.count, None)),
        }
    }
    steps.sort_by_key(|s| s.0);
    let mut steps = steps.into_iter().peekable();
    let mut samples = Vec::new();
    let secs = sc.duration.as_secs();
    for s in 0..=secs {
        let at = Duration::from_secs(s);
        tokio::time::sleep_until(start + at).await;
        while let Some((_, kind, count, old)) = steps.next_if(|st| st.0 <= at) {
            match kind {
                EventKind::Join => {
                    for _ in 0..count {
                        let id = fleet.new_id();
                        fleet.spawn(id, Duration::ZERO);
                    }
                }
                EventKind::Crash => fleet.crash(count),
                EventKind::Rolling => {
                    if let Some(old) = old {
                        fleet.replace(&old);
                    }
                }
                EventKind::Isolate => fleet.isolate(count),
                EventKind::Split => {
                    fleet.stream.split(count);
                }
            }
        }
        samples.push(sample(&fleet, at));
    }
    let cut = fleet.coord.cut();
    let isolated_holding = fleet
        .table
        .leases()
        .iter()
        .filter(|l| l.owner.as_ref().is_some_and(|o| cut.contains(o)))
        .count()
        + fleet
            .workers
            .iter()
            .filter(|w| cut.contains(&w.id))
            .map(|w| w.status.owned_shards().len())
            .sum::<usize>();
    for w in &fleet.workers {
        w.task.abort();
        w.sink.abort();
    }
    let dup_submits = fleet.submits.lock().map(|s| s.dup).unwrap_or(0);
    let mut f = figures(&sc, &table, &samples, dup_submits);
    let coord = fleet.coord.seconds();
    let (w0, w1) = steady_window(&sc);
    let window = coord
        .iter()
        .enumerate()
        .filter(|(i, _)| (w0.as_secs()..w1.as_secs()).contains(&(*i as u64)));
    let n = (w1 - w0).as_secs().max(1) as f64;
    let (r, w) = window.fold((0.0, 0.0), |(r, w), (_, s)| (r + s.rcu, w + s.wcu));
    f.isolated_holding = isolated_holding;
    f.coord_rcu_steady = r / n;
    f.coord_wcu_steady = w / n;
    match protocol {
        Protocol::Before => f.name = format!("{} (before tuning)", f.name),
        Protocol::Leader => f.name = format!("{} (leader)", f.name),
        Protocol::Listing => {}
    }
    f
}

fn sample(fleet: &Fleet, at: Duration) -> Sample {
    let live: HashSet<&str> = fleet
        .workers
        .iter()
        .filter(|w| w.live())
        .map(|w| w.id.as_str())
        .collect();
    let mut per_worker: BTreeMap<String, usize> = live.iter().map(|w| (w.to_string(), 0)).collect();
    let mut unowned = HashSet::new();
    for l in fleet.table.leases() {
        if l.is_finished() {
            continue;
        }
        match l.owner.as_deref() {
            Some(o) if live.contains(o) => *per_worker.entry(o.to_string()).or_default() += 1,
            _ => {
                unowned.insert(l.key.clone());
            }
        }
    }
    let mut reading: HashMap<String, usize> = HashMap::new();
    for w in fleet.workers.iter().filter(|w| w.live()) {
        for (shard, s) in w.status.snapshot() {
            if s.owned && matches!(s.state, ShardState::Reading | ShardState::Draining) {
                *reading.entry(shard).or_default() += 1;
            }
        }
    }
    Sample {
        at,
        per_worker,
        unowned,
        dup_hold: reading.values().filter(|n| **n > 1).count(),
    }
}

fn balanced(s: &Sample) -> bool {
    let max = s.per_worker.values().max().copied().unwrap_or(0);
    let min = s.per_worker.values().min().copied().unwrap_or(0);
    s.unowned.is_empty() && max > 0 && max - min <= 1
}

/// The steady-state window: the `steady` seconds before the first event
/// (the end of the run when there is none).
fn steady_window(sc: &Scenario) -> (Duration, Duration) {
    let first = sc.first_event();
    if sc.events.is_empty() {
        (sc.duration.saturating_sub(sc.steady), sc.duration)
    } else {
        (first.saturating_sub(sc.steady), first)
    }
}

fn figures(sc: &Scenario, table: &MemTable, samples: &[Sample], dup_submits: u64) -> Figures {
    let reference = sc.last_event_end();
    let first = sc.first_event();
    let after = |s: &&Sample| s.at >= reference;
    let all_owned_s = samples
        .iter()
        .filter(after)
        // Before the first lease exists nothing is unowned, yet nothing is owned.
        .find(|s| s.unowned.is_empty() && s.per_worker.values().sum::<usize>() > 0)
        .map(|s| (s.at - reference).as_secs_f64());
    // Balanced for good: after the last unbalanced sample.
    let last_bad = samples.iter().filter(after).rev().find(|s| !balanced(s));
    let balanced_s = match last_bad {
        None => Some(0.0),
        Some(b) if b.at == samples.last().map_or(b.at, |l| l.at) => None,
        Some(b) => Some((b.at - reference).as_secs_f64() + 1.0),
    };
    // Unowned for longer than a failover time, after the first event.
    let mut since: HashMap<&str, Duration> = HashMap::new();
    let mut long = HashSet::new();
    for s in samples.iter().filter(|s| s.at >= first) {
        since.retain(|k, _| s.unowned.contains(*k));
        for k in &s.unowned {
            let t0 = *since.entry(k.as_str()).or_insert(s.at);
            if s.at - t0 > sc.failover {
                long.insert(k.clone());
            }
        }
    }
    // Moves: acquisitions by another worker than the previous acquirer.
    let mut last: HashMap<String, String> = HashMap::new();
    let mut moves: HashMap<String, usize> = HashMap::new();
    let mut dup_checkpoints = 0;
    for (t, c) in table.changes() {
        match c {
            Change::Acquired { key, worker, .. } => {
                let prev = last.insert(key.clone(), worker.clone());
                if t >= first && prev.is_some_and(|p| p != worker) {
                    *moves.entry(key).or_default() += 1;
                }
            }
            Change::Checkpointed { key, worker } => {
                // Fencing means only the shard's latest acquirer can land a
                // checkpoint. Comparing writers alone (A-B-A) also counted a
                // lease that legitimately moved back to A under load.
                if last.get(&key) != Some(&worker) {
                    dup_checkpoints += 1;
                }
            }
        }
    }
    let shards_now = table.leases().iter().filter(|l| !l.is_finished()).count();
    let max_moves = moves.values().max().copied().unwrap_or(0);
    let mean_moves = moves.values().sum::<usize>() as f64 / shards_now.max(1) as f64;
    let seconds = table.seconds();
    let (w0, w1) = steady_window(sc);
    let window: Vec<_> = seconds
        .iter()
        .enumerate()
        .filter(|(i, _)| (w0.as_secs()..w1.as_secs()).contains(&(*i as u64)))
        .map(|(_, s)| *s)
        .collect();
    let mean = |f: &dyn Fn(&crate::store::Second) -> f64| {
        window.iter().map(f).sum::<f64>() / window.len().max(1) as f64
    };
    let rcu_steady = mean(&|s| s.rcu);
    let wcu_steady = mean(&|s| s.wcu);
    let renewal = sc.failover.as_secs_f64() / 3.0;
    Figures {
        name: sc.name.clone(),
        shards: sc.shards,
        workers: sc.workers,
        all_owned_s,
        balanced_s,
        max_moves,
        mean_moves,
        unowned_past_failover: long.len(),
        rcu_steady,
        rcu_peak: seconds.iter().map(|s| s.rcu).fold(0.0, f64::max),
        wcu_steady,
        wcu_peak: seconds.iter().map(|s| s.wcu).fold(0.0, f64::max),
        rcu_per_10_shards: rcu_steady * 10.0 / sc.shards.max(1) as f64,
        wcu_per_shard_renewal: wcu_steady * renewal / sc.shards.max(1) as f64,
        scans_steady: mean(&|s| s.scans as f64),
        index_rcu_steady: mean(&|s| s.index_rcu),
        index_wcu_steady: mean(&|s| s.index_wcu),
        queries_steady: mean(&|s| s.queries as f64),
        coord_rcu_steady: 0.0,
        coord_wcu_steady: 0.0,
        isolated_holding: 0,
        throttled: seconds.iter().map(|s| s.throttled).sum(),
        dup_hold_shard_s: samples
            .iter()
            .filter(|s| s.at >= first)
            .map(|s| s.dup_hold as u64)
            .sum(),
        dup_submits,
        dup_checkpoints,
        item_bytes: table.mean_item_size(),
        series: samples
            .iter()
            .flat_map(|s| {
                s.per_worker
                    .iter()
                    .map(move |(w, n)| (s.at.as_secs(), w.clone(), *n))
            })
            .collect(),
    }
}

/// Runs `sc` on a fresh current-thread runtime with paused time.
pub fn run_blocking(sc: Scenario, protocol: Protocol) -> std::io::Result<Figures> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    Ok(rt.block_on(run(sc, protocol)))
}
