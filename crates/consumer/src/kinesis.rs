//! The live Kinesis source: a coordinator task that discovers shards, takes
//! and steals leases; a renewer task that renews held leases concurrently;
//! and one reader task per leased shard.
//!
//! Guarantees:
//! - a shard is read by at most one reader of this worker, only while the
//!   worker holds its lease; a lost lease (refused write, or no successful
//!   renewal for `failover_time`) stops the reader before its next call;
//! - each reader has a lease deadline (send time of the last successful
//!   renewal + `failover_time` - margin, [`LeaseTiming::phase`]): past it,
//!   it submits nothing and checkpoints nothing until a renewal succeeds,
//!   whatever the coordinator is doing, so it stops before another worker
//!   may take the shard;
//! - records are delivered in shard order; a child shard is read only after
//!   every parent lease is at `SHARD_END` (or deleted by [`cleanup`], which
//!   deletes only finished leases whose children all started);
//! - checkpoints only move over acknowledged records, and every checkpoint
//!   write is conditional on the lease counter (a stolen lease cannot be
//!   checkpointed by its old owner).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tidemark_governor::{Governor, Outcome};

use aws_sdk_kinesis::types::{Shard, ShardIteratorType};
use futures::StreamExt;
use tokio::sync::{Mutex, Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info, warn};

use crate::checkpoint::AckTracker;
use crate::config::{InitialPosition, KinesisConfig, LeaseAssignment};
use crate::convert::push_kinesis_records;
use crate::coord_store::CoordStore;
use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::lease::{
    self, BalanceInput, Checkpoint, Fenced, Lease, LeasePhase, LeaseTable, LeaseTiming,
    Observations, Written,
};
use crate::pacer::Pacer;
use crate::record::Record;
use crate::status::{ShardState, StatusHandle};
use tidemark_schema::SharedStr;

use crate::metrics::kinesis as metric;

mod assign;
pub mod cleanup;
pub mod fanout;
pub mod streams;

/// A held lease, shared by the renewer, the coordinator and the reader.
#[derive(Debug)]
struct HeldLease {
    key: String,
    /// The fencing counter. Every counter-bumping write (renew, checkpoint,
    /// release) holds this lock, so they never race each other.
    counter: Mutex<u64>,
    /// Send time of the last successful fenced write: the lease deadline
    /// ([`LeaseTiming::phase`]) is judged from it.
    renewed: watch::Sender<Instant>,
    /// Cancelled when the lease is lost (refused write, or past the failover
    /// time without a renewal): no more writes, the reader stops.
    lost: CancellationToken,
    /// Set once released: no more writes.
    released: AtomicBool,
    /// The last write ended unanswered: it may have been applied.
    unsure: AtomicBool,
    /// The shard's acknowledgements: the renewer checkpoints from them.
    tracker: Arc<AckTracker>,
    /// The checkpoint written last, and when.
    checkpoint: std::sync::Mutex<CheckpointState>,
}

#[derive(Debug)]
struct CheckpointState {
    written: Checkpoint,
    /// When `written` was written (or the lease taken).
    at: Instant,
}

impl HeldLease {
    fn new(key: &str, written: Written, checkpoint: Checkpoint, tracker: Arc<AckTracker>) -> Self {
        Self {
            key: key.to_string(),
            counter: Mutex::new(written.counter),
            renewed: watch::Sender::new(written.sent),
            lost: CancellationToken::new(),
            released: AtomicBool::new(false),
            unsure: AtomicBool::new(false),
            tracker,
            checkpoint: std::sync::Mutex::new(CheckpointState {
                written: checkpoint,
                at: Instant::now(),
            }),
        }
    }

    fn cp(&self) -> std::sync::MutexGuard<'_, CheckpointState> {
        self.checkpoint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The checkpoint written last (or read at acquisition).
    fn written(&self) -> Checkpoint {
        self.cp().written.clone()
    }

    /// Records a written checkpoint.
    fn set_written(&self, cp: Checkpoint) {
        let mut st = self.cp();
        st.written = cp;
        st.at = Instant::now();
    }

    /// The checkpoint the renewer writes now: what the tracker says is
    /// acknowledged, when it is past the written one (never behind it, nor
    /// over `SHARD_END`) and `interval` passed since the last checkpoint
    /// write.
    fn due_checkpoint(&self, interval: Duration, now: Instant) -> Option<Checkpoint> {
        let pos = self.tracker.checkpoint()?;
        let st = self.cp();
        if now.saturating_duration_since(st.at) < interval {
            return None;
        }
        let cp = Checkpoint::At(pos);
        (!covers(&st.written, &cp)).then_some(cp)
    }

    /// Sends a fenced write of this lease at `*counter` (the caller holds
    /// the counter lock) and records its outcome. When an earlier write
    /// ended unanswered, a refusal may only mean that one was applied: the
    /// lease is read back, and if it shows us as owner at the next counter,
    /// that counter is adopted and the write sent once more. The lease time
    /// is not extended by the adoption itself (its send time is unknown).
    async fn write<F, Fut>(
        &self,
        table: &LeaseTable,
        me: &str,
        counter: &mut u64,
        send: F,
    ) -> Fenced
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Fenced>,
    {
        let mut r = send(*counter).await;
        if matches!(r, Ok(None)) && self.unsure.swap(false, Ordering::Relaxed) {
            r = match table.get(&self.key).await {
                Ok(Some(l)) if l.owner.as_deref() == Some(me) && l.counter == *counter + 1 => {
                    info!(shard = %self.key, "an unanswered lease write was applied; lease kept");
                    *counter = l.counter;
                    send(*counter).await
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            };
        }
        match &r {
            Ok(Some(w)) => {
                self.unsure.store(false, Ordering::Relaxed);
                self.record_write(counter, *w);
            }
            Ok(None) => {}
            Err(_) => self.unsure.store(true, Ordering::Relaxed),
        }
        r
    }

    /// True once lost or released.
    fn is_gone(&self) -> bool {
        self.lost.is_cancelled() || self.released.load(Ordering::Relaxed)
    }

    /// Records a successful fenced write (called with the counter lock held).
    fn record_write(&self, counter: &mut u64, w: Written) {
        *counter = w.counter;
        // Keep the latest send time: a renew and a checkpoint may overlap.
        self.renewed.send_if_modified(|t| {
            let newer = w.sent > *t;
            if newer {
                *t = w.sent;
            }
            newer
        });
    }

    /// Marks the lease lost (once), with metrics and status.
    fn fence(&self, status: &StatusHandle) {
        if self.lost.is_cancelled() {
            return;
        }
        self.lost.cancel();
        metrics::counter!(metric::LEASE_CHANGES, "kind" => "lost").increment(1);
        status.update(&self.key, |s| {
            s.owned = false;
            s.state = ShardState::Lost;
        });
    }
}

/// True when checkpoint `written` is at or past `next`.
fn covers(written: &Checkpoint, next: &Checkpoint) -> bool {
    match (written, next) {
        (Checkpoint::ShardEnd, _) => true,
        (Checkpoint::At(w), Checkpoint::At(p)) => p <= w,
        (w, p) => w == p,
    }
}

#[derive(Debug)]
struct Held {
    lease: Arc<HeldLease>,
    task: AbortOnDrop,
}

/// A reader task that is aborted when its handle is dropped, so that dropping
/// (or aborting) the `run` future stops every reader with it, like a crash:
/// nothing is checkpointed or released.
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl AbortOnDrop {
    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What every task shares.
#[derive(Debug)]
struct Ctx {
    config: KinesisConfig,
    kinesis: aws_sdk_kinesis::Client,
    table: LeaseTable,
    status: StatusHandle,
    /// Leases held now, renewed by the renewer task.
    held: std::sync::Mutex<HashMap<String, Arc<HeldLease>>>,
    /// Latest lease-table snapshot, for parent checks.
    snapshot: watch::Sender<Arc<Vec<Lease>>>,
    /// A shard ended: run shard discovery now.
    sync_now: Notify,
    /// Leader mode: this worker holds the leader lock (finished-lease
    /// cleanup runs only there; followers keep a partial snapshot).
    leading: std::sync::atomic::AtomicBool,
    sink: mpsc::Sender<Vec<Record>>,
    shutdown: CancellationToken,
    /// Set when the shutdown drain started; readers finish by this deadline.
    drain_deadline: std::sync::Mutex<Option<Instant>>,
    /// Governors of the Kinesis endpoint (admits GetRecords) and of
    /// DynamoDB (while its breaker is open, readers hold their GetRecords:
    /// the records could not be written anyway).
    govs: Option<Governors>,
    /// Shards whose drain did not finish (final checkpoint or release
    /// failed, or the reader was aborted): `run` then returns an error.
    unfinished: std::sync::Mutex<Vec<String>>,
    /// `fan_out`: the registered stream consumer's ARN (`None`: polling).
    consumer_arn: Option<String>,
    /// A reader's error no retry can fix (access denied, a KMS key the role
    /// cannot use): the source stops with it rather than retry for ever.
    fatal: std::sync::Mutex<Option<ConsumerError>>,
    /// `lease_assignment = "leader"`: the leader lock and heartbeats.
    coord: Option<Arc<dyn CoordStore>>,
}

/// The endpoint governors a [`KinesisSource`] shares with the rest of the
/// worker.
#[derive(Debug, Clone)]
pub struct Governors {
    /// The DynamoDB endpoint's governor (lease writes; the writer).
    pub dynamodb: Governor,
    /// The Kinesis endpoint's governor (GetRecords).
    pub kinesis: Governor,
}

impl Ctx {
    fn unfinished(&self, shard: &str) {
        self.unfinished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(shard.to_string());
    }
}

/// The Kinesis source. See the module docs for its guarantees.
#[derive(Debug)]
pub struct KinesisSource {
    config: KinesisConfig,
    kinesis: aws_sdk_kinesis::Client,
    table: LeaseTable,
    status: StatusHandle,
    govs: Option<Governors>,
    coord: Option<Arc<dyn CoordStore>>,
}

impl KinesisSource {
    /// A source reading `config.stream` with leases in `config.lease_table`.
    pub fn new(
        config: KinesisConfig,
        kinesis: aws_sdk_kinesis::Client,
        dynamodb: aws_sdk_dynamodb::Client,
    ) -> Self {
        let table = LeaseTable::with_timing(
            dynamodb,
            config.lease_table.clone(),
            LeaseTiming::new(config.failover_time),
        );
        Self::with_lease_table(config, kinesis, table)
    }

    /// A source whose leases live in `table` (the fleet simulator passes
    /// an in-memory store; [`KinesisSource::new`] uses DynamoDB).
    pub fn with_lease_table(
        config: KinesisConfig,
        kinesis: aws_sdk_kinesis::Client,
        table: LeaseTable,
    ) -> Self {
        Self {
            config,
            kinesis,
            table,
            status: StatusHandle::default(),
            govs: None,
            coord: None,
        }
    }

    /// Where `lease_assignment = "leader"` keeps its leader lock and
    /// heartbeats (the worker passes its coordinator table,
    /// [`DynamoCoord`](crate::coord_store::DynamoCoord)); required in that
    /// mode, unused otherwise.
    pub fn with_coordination(mut self, coord: Arc<dyn CoordStore>) -> Self {
        self.coord = Some(coord);
        self
    }

    /// Shares the worker's endpoint governors: lease writes and GetRecords
    /// are admitted by them, and reading pauses while DynamoDB's breaker is
    /// open.
    pub fn with_governors(mut self, govs: Governors) -> Self {
        self.table = self.table.with_governor(govs.dynamodb.clone());
        self.govs = Some(govs);
        self
    }

    /// Per-shard status, live while `run` runs.
    pub fn status_handle(&self) -> StatusHandle {
        self.status.clone()
    }

    /// Runs until `shutdown` is cancelled, then stops reading, waits (at most
    /// `shutdown_grace`) for in-flight acknowledgements, checkpoints, releases
    /// the leases and returns. Records go to `sink` in per-shard order, one
    /// batch per GetRecords call; awaiting `send` is the backpressure.
    /// [`ConsumerError::DrainIncomplete`] when a shard's final checkpoint or
    /// release failed (the stop was not clean, though nothing is lost).
    pub async fn run(
        self,
        sink: mpsc::Sender<Vec<Record>>,
        shutdown: CancellationToken,
    ) -> Result<(), ConsumerError> {
        if self.config.is_multi_stream() {
            return Box::pin(streams::run(self, sink, shutdown)).await;
        }
        self.config.validate()?;
        self.table.create_if_absent(Duration::from_secs(60)).await?;
        // A stream's scoped view is checked once for the whole table.
        if self.table.scope().is_none() {
            crate::lease_key::refuse_other_format(
                &self.table,
                crate::lease_key::KeyFormat::SingleStream,
            )
            .await?;
        }
        let coord = match (self.config.lease_assignment, self.coord) {
            (LeaseAssignment::Leader, None) => {
                return Err(crate::config::ConfigError {
                    key: "lease_assignment",
                    problem: "\"leader\" needs a coordinator table for its lock and heartbeats (KinesisSource::with_coordination)".into(),
                }
                .into());
            }
            (LeaseAssignment::Leader, Some(c)) => {
                // Large tables take a while to index: allow for it.
                self.table
                    .ensure_owner_index(Duration::from_secs(600))
                    .await?;
                c.ensure(Duration::from_secs(60)).await?;
                Some(c)
            }
            (LeaseAssignment::Listing, _) => None,
        };
        let consumer_arn = match self.config.read_mode {
            crate::config::ReadMode::FanOut => {
                Some(fanout::register(&self.kinesis, &self.config).await?)
            }
            crate::config::ReadMode::Polling => None,
        };
        let ctx = Arc::new(Ctx {
            config: self.config,
            kinesis: self.kinesis,
            table: self.table,
            status: self.status,
            held: std::sync::Mutex::new(HashMap::new()),
            snapshot: watch::Sender::new(Arc::new(Vec::new())),
            sync_now: Notify::new(),
            leading: std::sync::atomic::AtomicBool::new(false),
            sink,
            shutdown,
            drain_deadline: std::sync::Mutex::new(None),
            govs: self.govs,
            unfinished: std::sync::Mutex::new(Vec::new()),
            consumer_arn,
            fatal: std::sync::Mutex::new(None),
            coord,
        });
        coordinate(Arc::clone(&ctx)).await?;
        if let Some(e) = ctx
            .fatal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            return Err(e);
        }
        let mut shards = std::mem::take(
            &mut *ctx
                .unfinished
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if shards.is_empty() {
            return Ok(());
        }
        shards.sort();
        shards.dedup();
        Err(ConsumerError::DrainIncomplete { shards })
    }
}

async fn coordinate(ctx: Arc<Ctx>) -> Result<(), ConsumerError> {
    let cfg = &ctx.config;
    let tick = cfg.failover_time / 3;
    let mut held: HashMap<String, Held> = HashMap::new();
    let mut obs = Observations::default();
    let mut next_sync = Instant::now();
    let mut sync_failures = 0u32;
    let tuning = cfg.lease_tuning;
    let mut passes = 0u64;
    // A reader saw a shard end: sync on this worker, leader or not.
    let mut sync_asked = false;
    // The previous pass planned a steal.
    let mut steal_armed = false;
    // Renewals run on their own clock: a slow Scan or ListShards in this
    // loop never delays them.
    let renewer_stop = CancellationToken::new();
    let renewer = AbortOnDrop(tokio::spawn(
        renew_loop(ctx.clone(), renewer_stop.clone()).in_current_span(),
    ));
    let mut assigner = ctx
        .coord
        .clone()
        .filter(|_| cfg.lease_assignment == LeaseAssignment::Leader)
        .map(|c| assign::Assigner::start(&ctx, c));
    let cleaner = AbortOnDrop(tokio::spawn(
        cleanup::run(ctx.clone(), renewer_stop.clone()).in_current_span(),
    ));
    loop {
        if ctx.shutdown.is_cancelled() {
            break;
        }
        prune(&ctx, &mut held);
        let pass_start = Instant::now();
        let mut wake = pass_start + tick;
        passes += 1;
        // Leader mode: its own pass (kinesis/assign.rs).
        if let Some(a) = assigner.as_mut() {
            let wake = a.pass(&ctx, &mut held).await?;
            metrics::gauge!(metric::LEASES_HELD).set(held.len() as f64);
            tokio::select! {
                _ = ctx.shutdown.cancelled() => {}
                _ = tokio::time::sleep_until(wake) => {}
                _ = ctx.sync_now.notified() => a.sync_asked(),
            }
            continue;
        }
        if !tuning.leader_shard_sync && Instant::now() >= next_sync {
            match sync_shards(&ctx, None).await {
                Ok(_) => {
                    sync_failures = 0;
                    next_sync = Instant::now() + cfg.shard_sync_interval;
                }
                Err(e) => {
                    if let Some(e) = sync_failed(e, held.is_empty(), &mut sync_failures) {
                        return Err(e);
                    }
                    next_sync = Instant::now() + tick;
                }
            }
        }
        let mut listed = ctx.table.list_with(!tuning.eventual_listing).await;
        // Tuned shard sync: on the leader (or when a shard ended here, or
        // on an empty table), with this pass's listing.
        if tuning.leader_shard_sync
            && Instant::now() >= next_sync
            && let Ok(leases) = &listed
        {
            let now = Instant::now();
            obs.observe(leases, now);
            let leader = is_sync_leader(&cfg.worker_id, leases, &obs, now, cfg.failover_time);
            if sync_asked || leases.is_empty() || leader {
                match sync_shards(&ctx, Some(leases)).await {
                    Ok(created) => {
                        sync_failures = 0;
                        sync_asked = false;
                        next_sync = Instant::now() + cfg.shard_sync_interval;
                        if created > 0 {
                            listed = ctx.table.list_with(!tuning.eventual_listing).await;
                        }
                    }
                    Err(e) => {
                        if let Some(e) = sync_failed(e, held.is_empty(), &mut sync_failures) {
                            return Err(e);
                        }
                        next_sync = Instant::now() + tick;
                    }
                }
            } else {
                next_sync = Instant::now() + cfg.shard_sync_interval;
            }
        }
        match listed {
            Ok(leases) => {
                let now = Instant::now();
                obs.observe(&leases, now);
                // Published before any reader starts: a new reader checks its
                // parents against this pass's table, never an older one.
                ctx.snapshot.send_replace(Arc::new(leases.clone()));
                let held_keys: HashSet<String> = held.keys().cloned().collect();
                let mut plan = lease::plan(BalanceInput {
                    me: &cfg.worker_id,
                    held: &held_keys,
                    leases: &leases,
                    observations: &obs,
                    now,
                    failover: cfg.failover_time,
                    max_leases: cfg.max_leases,
                    steal_at_target: tuning.steal_at_target,
                    patient: tuning.patient_steals,
                });
                // Ramped takes: of leases never taken yet (counter 0: a cold
                // start, new children) at most as many as held (at least
                // one) per pass, so a worker that sees few others does not
                // take leases it must give up again; released and expired
                // leases are taken at once. A capped pass is followed by
                // another half a tick later.
                let mut capped = false;
                if tuning.ramped_takes {
                    let fresh: HashSet<&str> = leases
                        .iter()
                        .filter(|l| l.counter == 0)
                        .map(|l| l.key.as_str())
                        .collect();
                    let cap = held.len().max(1);
                    let mut taken = 0;
                    plan.take.retain(|k| {
                        if !fresh.contains(k.as_str()) {
                            return true;
                        }
                        taken += 1;
                        taken <= cap
                    });
                    capped = taken > cap;
                }
                // Patient steals: carried out when the previous pass planned
                // one too (a lease released meanwhile is taken instead).
                let steals: &[String] = if !tuning.patient_steals || steal_armed {
                    &plan.steal
                } else {
                    &[]
                };
                steal_armed = !plan.steal.is_empty();
                debug!(
                    worker = %cfg.worker_id,
                    held = held.len(),
                    target = plan.target,
                    take = plan.take.len(),
                    steal = plan.steal.len(),
                    "balancing pass"
                );
                for (keys, kind) in [(plan.take.as_slice(), "take"), (steals, "steal")] {
                    for key in keys {
                        // A lease taken now would only be released again.
                        if ctx.shutdown.is_cancelled() {
                            break;
                        }
                        let Some(observed) = leases.iter().find(|l| &l.key == key) else {
                            continue;
                        };
                        match ctx.table.acquire(observed, &cfg.worker_id).await {
                            Ok(Some(written)) => {
                                info!(worker = %cfg.worker_id, shard = %key, kind, "lease acquired");
                                metrics::counter!(metric::LEASE_CHANGES, "kind" => kind)
                                    .increment(1);
                                let mut lease = observed.clone();
                                lease.counter = written.counter;
                                lease.owner = Some(cfg.worker_id.clone());
                                let h = spawn_reader(&ctx, lease, written);
                                if let Ok(mut m) = ctx.held.lock() {
                                    m.insert(key.clone(), h.lease.clone());
                                }
                                held.insert(key.clone(), h);
                            }
                            Ok(None) => debug!(shard = %key, "lease race lost"),
                            Err(e) => warn!(shard = %key, error = %e, "acquire failed"),
                        }
                    }
                }
                // Nothing to do and nothing free or expired: the next pass
                // can wait a failover time (an expiry still wakes it below).
                let settled = tuning.settled_passes
                    && live_workers(&cfg.worker_id, &leases, &obs, now, cfg.failover_time)
                        > SMALL_FLEET
                    && plan.take.is_empty()
                    && plan.steal.is_empty()
                    && held.len() + 1 >= plan.target
                    && !leases.iter().any(|l| {
                        !l.is_finished()
                            && l.owner.as_deref() != Some(cfg.worker_id.as_str())
                            && obs.is_expired(l, now, cfg.failover_time)
                    });
                if settled {
                    wake = pass_start
                        + cfg
                            .failover_time
                            .mul_f64(pass_jitter(&cfg.worker_id, passes));
                }
                if capped {
                    wake = wake.min(pass_start + tick / 2);
                }
                if let Some(t) = obs.next_expiry(&leases, &cfg.worker_id, now, cfg.failover_time) {
                    wake = wake.min(t + Duration::from_millis(5));
                }
            }
            Err(e) => warn!(error = %e, "listing leases failed"),
        }
        metrics::gauge!(metric::LEASES_HELD).set(held.len() as f64);
        tokio::select! {
            _ = ctx.shutdown.cancelled() => {}
            _ = tokio::time::sleep_until(wake) => {}
            _ = ctx.sync_now.notified() => {
                next_sync = Instant::now();
                sync_asked = true;
            }
        }
    }
    if let Some(a) = assigner.take() {
        a.stop(&ctx).await;
    }
    // Shutdown: readers drain, checkpoint and release on their own; the
    // renewer keeps their leases meanwhile so nobody steals them mid-drain.
    let deadline = Instant::now() + cfg.shutdown_grace;
    if let Ok(mut d) = ctx.drain_deadline.lock() {
        *d = Some(deadline);
    }
    // Past the grace, a reader still writes its final checkpoint and its
    // release: two fenced operations, each bounded by the table's op_bound.
    let hard_stop = deadline + ctx.table.timing().op_bound() * 2 + cfg.failover_time / 10;
    loop {
        held.retain(|_, h| !h.task.is_finished());
        if held.is_empty() || Instant::now() >= hard_stop {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50).min(tick)).await;
    }
    renewer_stop.cancel();
    drop(renewer);
    drop(cleaner);
    for key in held.keys() {
        warn!(shard = %key, "reader did not finish in time; aborting it");
        ctx.unfinished(key);
    }
    drop(held);
    metrics::gauge!(metric::LEASES_HELD).set(0.0);
    Ok(())
}

/// Most lease renewals in flight at once.
const MAX_CONCURRENT_RENEWALS: usize = 16;

/// Drops leases that are lost, released, or whose reader finished.
fn prune(ctx: &Ctx, held: &mut HashMap<String, Held>) {
    held.retain(|key, h| {
        let keep = !h.task.is_finished() && !h.lease.is_gone();
        if !keep {
            // Make sure the status no longer claims it.
            ctx.status.update(key, |s| s.owned = false);
            if let Ok(mut m) = ctx.held.lock() {
                m.remove(key);
            }
        }
        keep
    });
}

/// Renews every held lease once per `failover_time / 3`, concurrently (at
/// most [`MAX_CONCURRENT_RENEWALS`] at once), each bounded by the lease
/// table's operation deadline (below the renewal period), and writes the
/// periodic checkpoints: what each shard's tracker says is acknowledged,
/// whatever its reader is doing (waiting on back-pressure included).
async fn renew_loop(ctx: Arc<Ctx>, stop: CancellationToken) {
    // Folded checkpoints: look twice per renewal interval, write a lease
    // once its last write is a renewal interval old. Unfolded: checkpoints
    // are written apart from renewals, checked at least every
    // `checkpoint_interval`.
    let every = if ctx.config.lease_tuning.fold_checkpoints {
        ctx.config.failover_time / 6
    } else {
        (ctx.config.failover_time / 3).min(ctx.config.checkpoint_interval)
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let leases: Vec<Arc<HeldLease>> = match ctx.held.lock() {
            Ok(m) => m.values().cloned().collect(),
            Err(_) => return,
        };
        futures::stream::iter(leases)
            .for_each_concurrent(MAX_CONCURRENT_RENEWALS, |l| renew_one(&ctx, l))
            .await;
    }
}

/// One renewal, or a checkpoint write in its place; marks the lease lost
/// when refused or past the failover time.
async fn renew_one(ctx: &Ctx, lease: Arc<HeldLease>) {
    let me = &ctx.config.worker_id;
    let timing = ctx.table.timing();
    let mut counter = lease.counter.lock().await;
    if lease.is_gone() {
        return;
    }
    let in_flight = lease.tracker.in_flight();
    ctx.status.update(&lease.key, |s| s.in_flight = in_flight);
    let fold = ctx.config.lease_tuning.fold_checkpoints;
    let since = *lease.renewed.borrow();
    let now = Instant::now();
    // A checkpoint is written only while the lease is live, as the
    // reader's own checkpoints are; it renews the lease as well.
    let live = matches!(timing.phase(since, now), LeasePhase::Live { .. });
    let due = if live {
        lease.due_checkpoint(ctx.config.checkpoint_interval, now)
    } else {
        None
    };
    let min_age = if fold {
        ctx.config.failover_time / 3
    } else {
        ctx.config.failover_time / 6
    };
    // Folded: one write per renewal interval, a checkpoint taking the
    // renewal's place. Unfolded: a due checkpoint goes at once.
    if now.saturating_duration_since(since) < min_age && (fold || due.is_none()) {
        return;
    }
    let table = &ctx.table;
    let renewed = match &due {
        Some(cp) => {
            lease
                .write(table, me, &mut counter, |c| {
                    table.checkpoint(&lease.key, me, c, cp, &[])
                })
                .await
        }
        None => {
            lease
                .write(table, me, &mut counter, |c| table.renew(&lease.key, me, c))
                .await
        }
    };
    match renewed {
        Ok(Some(_)) => {
            if let Some(cp) = due {
                metrics::counter!(
                    metric::CHECKPOINTS,
                    streams::with(
                        streams::shard_labels(&ctx.table, &lease.key),
                        "result",
                        "ok"
                    )
                )
                .increment(1);
                let text = shown(&cp);
                ctx.status.update(&lease.key, |s| s.checkpoint = Some(text));
                lease.set_written(cp);
            }
        }
        Ok(None) => {
            info!(shard = %lease.key, "lease lost");
            lease.fence(&ctx.status);
        }
        // A failed checkpoint is tried again from the tracker next time.
        Err(e) => warn!(shard = %lease.key, error = %e, "renew failed"),
    }
    // Self-fencing: others may take a lease we failed to renew in time.
    if !lease.is_gone() && timing.phase(*lease.renewed.borrow(), Instant::now()) == LeasePhase::Lost
    {
        warn!(shard = %lease.key, "lease not renewed within failover time; giving it up");
        lease.fence(&ctx.status);
    }
}

fn spawn_reader(ctx: &Arc<Ctx>, lease: Lease, written: Written) -> Held {
    let tracker = Arc::new(AckTracker::new());
    let held = Arc::new(HeldLease::new(
        &lease.key,
        written,
        lease.checkpoint.clone(),
        tracker.clone(),
    ));
    ctx.status.update(&lease.key, |s| {
        *s = Default::default();
        s.owned = true;
    });
    let reader = Reader {
        ctx: ctx.clone(),
        shard: lease.key.clone(),
        lease: held.clone(),
        renewed: held.renewed.subscribe(),
        tracker,
        handed: 0,
    };
    let task = AbortOnDrop(tokio::spawn(reader.run(lease).in_current_span()));
    Held { lease: held, task }
}

/// ListShards, then a lease for every shard that has none, parents first.
/// `existing` is a listing taken just before; without one the table is
/// scanned (consistently). Returns how many leases were created.
async fn sync_shards(ctx: &Ctx, existing: Option<&[Lease]>) -> Result<usize, ConsumerError> {
    let shards = list_shards(ctx).await?;
    let scanned;
    let existing = match existing {
        Some(e) => e,
        None => {
            scanned = ctx.table.list().await?;
            &scanned
        }
    };
    let mut new = new_leases(&shards, existing, &ctx.config.initial_position);
    // Finished shards whose leases the cleanup deleted stay deleted.
    let done = cleanup::done_ancestors(&shards, existing);
    new.retain(|l| !done.contains(&l.key));
    let mut created = 0;
    for l in new {
        if ctx.table.create_lease(&l).await? {
            created += 1;
            info!(shard = %l.key, checkpoint = ?l.checkpoint, "lease created");
        }
    }
    Ok(created)
}

/// A failed shard sync: the stream may be momentarily unreachable (retry
/// next pass), but a stream missing at start is fatal (`Some`).
fn sync_failed(e: ConsumerError, holds_none: bool, failures: &mut u32) -> Option<ConsumerError> {
    *failures += 1;
    warn!(error = %e, "shard sync failed");
    let fatal = matches!(&e, ConsumerError::Aws(a) if a.class == ErrorClass::NotFound || a.class == ErrorClass::Fatal);
    (fatal && holds_none && *failures >= 3).then_some(e)
}

/// The periodic shard-sync leader: the lowest id among this worker and the
/// owners of live leases in `leases`, as the KCL's deterministic leader.
fn is_sync_leader(
    me: &str,
    leases: &[Lease],
    obs: &Observations,
    now: Instant,
    failover: Duration,
) -> bool {
    !leases.iter().any(|l| {
        l.owner.as_deref().is_some_and(|o| o < me)
            && !l.is_finished()
            && !obs.is_expired(l, now, failover)
    })
}

/// Fleets of at most this many workers never settle: each lists at the
/// renewal cadence, which costs at most about 0.4 RCU/s per 10 shards
/// (eventually consistent, 258-byte leases, 10 s failover; within the
/// read target), and so takes a released lease within a third of the
/// failover time. Larger fleets settle, and take a released lease within
/// one failover time.
const SMALL_FLEET: usize = 4;

/// This worker plus the distinct owners of live (unfinished, unexpired)
/// leases other than this worker's.
fn live_workers(
    me: &str,
    leases: &[Lease],
    obs: &Observations,
    now: Instant,
    failover: Duration,
) -> usize {
    let owners: HashSet<&str> = leases
        .iter()
        .filter(|l| !l.is_finished() && !obs.is_expired(l, now, failover))
        .filter_map(|l| l.owner.as_deref())
        .filter(|o| *o != me)
        .collect();
    owners.len() + 1
}

/// A factor in [0.9, 1.1) that differs per worker and pass, so that
/// settled workers do not list the table in step.
fn pass_jitter(me: &str, pass: u64) -> f64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (me, pass).hash(&mut h);
    0.9 + (h.finish() % 1000) as f64 / 5000.0
}

async fn list_shards(ctx: &Ctx) -> Result<Vec<Shard>, ConsumerError> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut req = ctx.kinesis.list_shards();
        req = match &token {
            // With a NextToken the stream must not be named again.
            Some(t) => req.next_token(t),
            None if ctx.config.stream_is_arn() => req.stream_arn(&ctx.config.stream),
            None => req.stream_name(&ctx.config.stream),
        };
        let page = req
            .send()
            .await
            .map_err(|e| AwsError::new("ListShards", &e))?;
        out.extend(page.shards().iter().cloned());
        match page.next_token() {
            Some(t) => token = Some(t.to_string()),
            None => return Ok(out),
        }
    }
}

/// The leases to create for shards that have none (pure; parents first).
///
/// On a fresh table every shard gets the configured initial position, except
/// that with `LATEST` closed shards are marked `SHARD_END` (nothing new will
/// ever arrive in them). Later, a shard whose parent is known starts at
/// `TRIM_HORIZON`: a child of a shard we read must be read in full.
pub fn new_leases(shards: &[Shard], existing: &[Lease], initial: &InitialPosition) -> Vec<Lease> {
    let have: HashSet<&str> = existing.iter().map(|l| l.key.as_str()).collect();
    let listed: HashSet<&str> = shards.iter().map(|s| s.shard_id()).collect();
    let fresh = existing.is_empty();
    let mut out: Vec<Lease> = shards
        .iter()
        .filter(|s| !have.contains(s.shard_id()))
        .map(|s| {
            let parents: Vec<String> = [s.parent_shard_id(), s.adjacent_parent_shard_id()]
                .into_iter()
                .flatten()
                .map(str::to_string)
                .collect();
            let closed = s
                .sequence_number_range()
                .is_some_and(|r| r.ending_sequence_number().is_some());
            let parent_known = parents
                .iter()
                .any(|p| have.contains(p.as_str()) || listed.contains(p.as_str()));
            let checkpoint = if !fresh && parent_known {
                Checkpoint::TrimHorizon
            } else {
                match initial {
                    InitialPosition::TrimHorizon => Checkpoint::TrimHorizon,
                    InitialPosition::Latest if closed => Checkpoint::ShardEnd,
                    InitialPosition::Latest => Checkpoint::Latest,
                    InitialPosition::AtTimestamp { .. } => Checkpoint::AtTimestamp,
                }
            };
            let mut l = Lease::new(s.shard_id(), checkpoint, parents);
            l.hash_range = s.hash_key_range().map(|h| {
                (
                    h.starting_hash_key().to_string(),
                    h.ending_hash_key().to_string(),
                )
            });
            l
        })
        .collect();
    // Shard ids grow with creation, so parents sort before their children and
    // no other worker can ever see a child lease without its parent's.
    out.sort_by(|a, b| a.key.len().cmp(&b.key.len()).then(a.key.cmp(&b.key)));
    out
}

/// Failed SHARD_END writes (each a full lease-write operation) before the
/// lease is released instead.
const SHARD_END_ATTEMPTS: u32 = 5;

enum Stop {
    /// Lease lost: no more writes.
    Lost,
    /// Shutdown: drain, checkpoint, release.
    Shutdown,
}

struct Reader {
    ctx: Arc<Ctx>,
    shard: String,
    lease: Arc<HeldLease>,
    /// Send times of successful renewals of `lease`.
    renewed: watch::Receiver<Instant>,
    /// The shard's acknowledgements (also the held lease's: the renewer
    /// checkpoints from them).
    tracker: Arc<AckTracker>,
    /// Records handed to the sink so far: registered records after them
    /// (a batch dropped at shutdown) can never be acknowledged, so a drain
    /// waits only for these.
    handed: u64,
}

impl Reader {
    async fn run(mut self, lease: Lease) {
        let stop = self.read(&lease).await;
        match stop {
            Ok(Stop::Lost) => {}
            Ok(Stop::Shutdown) => self.drain_and_release().await,
            Err(
                e @ ConsumerError::Aws(AwsError {
                    class: ErrorClass::Fatal,
                    ..
                }),
            ) => {
                // Access denied (a KMS-encrypted stream without kms:Decrypt,
                // a missing kinesis:GetRecords): every shard would fail the
                // same way. Stop the whole source, loudly.
                error!(shard = %self.shard, error = %e, "reading the shard is refused; stopping");
                self.ctx
                    .fatal
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get_or_insert(e);
                self.ctx.shutdown.cancel();
                self.drain_and_release().await;
            }
            Err(e) => {
                warn!(shard = %self.shard, error = %e, "reader failed; releasing lease");
                self.drain_and_release().await;
            }
        }
    }

    fn stopped(&self) -> Option<Stop> {
        if self.lease.lost.is_cancelled() {
            Some(Stop::Lost)
        } else if self.ctx.shutdown.is_cancelled() {
            Some(Stop::Shutdown)
        } else {
            None
        }
    }

    /// Awaits `fut` unless the lease is lost or shutdown starts first.
    async fn guard<T>(&self, fut: impl Future<Output = T>) -> Result<T, Stop> {
        tokio::select! {
            biased;
            _ = self.lease.lost.cancelled() => Err(Stop::Lost),
            _ = self.ctx.shutdown.cancelled() => Err(Stop::Shutdown),
            v = fut => Ok(v),
        }
    }

    /// The lease's phase now.
    fn phase(&self) -> LeasePhase {
        self.ctx
            .table
            .timing()
            .phase(*self.renewed.borrow(), Instant::now())
    }

    /// Returns the lease deadline once the lease is live; while it is past
    /// its deadline (paused), waits for a renewal. Past the failover time the
    /// lease is lost, whatever the coordinator is doing.
    async fn wait_live(&mut self) -> Result<Instant, Stop> {
        let mut paused = false;
        loop {
            if let Some(stop) = self.stopped() {
                return Err(stop);
            }
            let sent = *self.renewed.borrow_and_update();
            match self.ctx.table.timing().phase(sent, Instant::now()) {
                LeasePhase::Live { until } => {
                    if paused {
                        info!(shard = %self.shard, "lease renewed in time; reading resumes");
                        self.ctx
                            .status
                            .update(&self.shard, |s| s.state = ShardState::Reading);
                    }
                    return Ok(until);
                }
                LeasePhase::Paused { lost_at } => {
                    if !paused {
                        paused = true;
                        warn!(shard = %self.shard, "lease deadline passed without a renewal; not submitting or checkpointing until one succeeds");
                        metrics::counter!(metric::LEASE_PAUSES).increment(1);
                        self.ctx
                            .status
                            .update(&self.shard, |s| s.state = ShardState::Paused);
                    }
                    let lost = self.lease.lost.clone();
                    let shutdown = self.ctx.shutdown.clone();
                    tokio::select! {
                        _ = lost.cancelled() => {}
                        _ = shutdown.cancelled() => {}
                        _ = self.renewed.changed() => {}
                        _ = tokio::time::sleep_until(lost_at) => {}
                    }
                }
                LeasePhase::Lost => {
                    warn!(shard = %self.shard, "lease not renewed within failover time; giving it up");
                    self.lease.fence(&self.ctx.status);
                    return Err(Stop::Lost);
                }
            }
        }
    }

    /// Hands `batch` to the sink, only while the lease is live: a send that
    /// would complete past the lease deadline waits for a renewal instead.
    async fn submit(&mut self, batch: Vec<Record>) -> Result<(), Stop> {
        loop {
            let until = self.wait_live().await?;
            let sink = self.ctx.sink.clone();
            let permit = tokio::select! {
                biased;
                _ = self.lease.lost.cancelled() => return Err(Stop::Lost),
                _ = self.ctx.shutdown.cancelled() => return Err(Stop::Shutdown),
                p = sink.reserve() => match p {
                    Ok(p) => p,
                    // The pipeline is gone: nothing more can be acknowledged.
                    Err(_) => return Err(Stop::Shutdown),
                },
                _ = tokio::time::sleep_until(until) => continue,
            };
            if matches!(self.phase(), LeasePhase::Live { .. }) {
                self.handed += batch.len() as u64;
                permit.send(batch);
                return Ok(());
            }
        }
    }

    async fn read(&mut self, lease: &Lease) -> Result<Stop, ConsumerError> {
        let cfg = self.ctx.config.clone();
        // Shared by every record of this shard (see `SharedStr`).
        let stream = SharedStr::from(cfg.stream_name());
        let shard_id = SharedStr::from(self.shard.as_str());
        // Parents first: per-key order across a reshard depends on it.
        let mut rx = self.ctx.snapshot.subscribe();
        loop {
            let ready = {
                let snap = rx.borrow_and_update();
                lease.parents.iter().all(|p| {
                    snap.iter()
                        .find(|l| &l.key == p)
                        .is_none_or(Lease::is_finished)
                })
            };
            if ready {
                break;
            }
            match self.guard(rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Ok(Stop::Shutdown),
                Err(stop) => return Ok(stop),
            }
        }
        self.ctx
            .status
            .update(&self.shard, |s| s.state = ShardState::Reading);
        if let Some(arn) = self.ctx.consumer_arn.clone() {
            return self.read_fan_out(lease, &arn).await;
        }
        let skip = match &lease.checkpoint {
            Checkpoint::At(p) => Some(p.clone()),
            _ => None,
        };
        let mut last_read: Option<SharedStr> = None;
        let mut iterator = match self.guard(self.iterator(&lease.checkpoint, None)).await {
            Ok(it) => it?,
            Err(stop) => return Ok(stop),
        };
        let mut pacer = Pacer::new(cfg.idle_poll);
        let mut retry = retry_backoff();
        let shard_label = streams::shard_labels(&self.ctx.table, &self.shard);
        loop {
            if let Some(stop) = self.stopped() {
                return Ok(stop);
            }
            let max = cfg.max_unacked_per_shard;
            if let Err(stop) = self
                .guard(self.tracker.wait_for(|w| w.in_flight() < max))
                .await
            {
                return Ok(stop);
            }
            if let Err(stop) = self.guard(pacer.ready()).await {
                return Ok(stop);
            }
            // Past the lease deadline, reading waits for a renewal.
            if let Err(stop) = self.wait_live().await {
                return Ok(stop);
            }
            let room = max.saturating_sub(self.tracker.in_flight()).max(1);
            let limit = i32::try_from(room)
                .unwrap_or(i32::MAX)
                .min(cfg.max_records_per_call);
            let permit = match &self.ctx.govs {
                Some(g) => {
                    let admitted = async {
                        g.dynamodb.wait_closed().await;
                        g.kinesis.admit().await
                    };
                    match self.guard(admitted).await {
                        Ok(p) => Some(p),
                        Err(stop) => return Ok(stop),
                    }
                }
                None => None,
            };
            let started = Instant::now();
            metrics::counter!(metric::GET_RECORDS, shard_label.clone()).increment(1);
            let res = self
                .ctx
                .kinesis
                .get_records()
                .shard_iterator(&iterator)
                .limit(limit)
                .send()
                .await;
            if let Some(p) = permit {
                p.finish(match &res {
                    Ok(_) => Outcome::Answered,
                    Err(e) => Outcome::of_class(tidemark_aws_errors::classify(e)),
                });
            }
            let out = match res {
                Ok(out) => out,
                Err(e) => {
                    let err = AwsError::new("GetRecords", &e);
                    match err.class {
                        ErrorClass::Throttled => {
                            metrics::counter!(metric::THROTTLED, shard_label.clone()).increment(1);
                            let d = pacer.on_throttled(started);
                            debug!(shard = %self.shard, delay = ?d, "GetRecords throttled");
                        }
                        ErrorClass::ExpiredIterator => {
                            // Renew from the last position read, or from the
                            // checkpoint we started at.
                            let from = last_read.clone();
                            iterator =
                                match self.guard(self.iterator(&lease.checkpoint, from)).await {
                                    Ok(it) => it?,
                                    Err(stop) => return Ok(stop),
                                };
                            pacer.on_error(started);
                        }
                        ErrorClass::Fatal => return Err(err.into()),
                        _ => {
                            let d = retry.next().unwrap_or(Duration::from_secs(10));
                            warn!(shard = %self.shard, error = %err, delay = ?d, "GetRecords failed; retrying");
                            pacer.on_error(started + d);
                        }
                    }
                    continue;
                }
            };
            retry = retry_backoff();
            let behind = out.millis_behind_latest();
            let mut batch = Vec::with_capacity(out.records().len());
            let pushed = push_kinesis_records(
                out.records(),
                &stream,
                &shard_id,
                skip.as_ref(),
                &self.tracker,
                &mut batch,
            )?;
            let (bytes, corrupt) = (pushed.bytes, pushed.corrupt);
            if pushed.last.is_some() {
                last_read = pushed.last;
            }
            pacer.on_success(started, bytes, out.records().len(), behind == Some(0));
            if corrupt > 0 {
                metrics::counter!(metric::CORRUPT_AGGREGATES, shard_label.clone())
                    .increment(corrupt as u64);
            }
            if let Some(ms) = behind {
                metrics::gauge!(metric::MILLIS_BEHIND, shard_label.clone()).set(ms as f64);
            }
            let n = batch.len() as u64;
            metrics::counter!(metric::RECORDS_READ, shard_label.clone()).increment(n);
            let in_flight = self.tracker.in_flight();
            self.ctx.status.update(&self.shard, |s| {
                s.millis_behind_latest = behind;
                s.records_read += n;
                s.in_flight = in_flight;
            });
            if !batch.is_empty()
                && let Err(stop) = self.submit(batch).await
            {
                return Ok(stop);
            }
            match out.next_shard_iterator() {
                Some(next) => iterator = next.to_string(),
                None => {
                    let children: Vec<String> = out
                        .child_shards()
                        .iter()
                        .map(|c| c.shard_id().to_string())
                        .collect();
                    return self.finish_shard(children).await;
                }
            }
        }
    }

    /// At the shard's end: wait for every acknowledgement, checkpoint
    /// SHARD_END (with the children), release, and trigger shard discovery.
    async fn finish_shard(&mut self, children: Vec<String>) -> Result<Stop, ConsumerError> {
        self.ctx
            .status
            .update(&self.shard, |s| s.state = ShardState::Draining);
        // Meanwhile the renewer checkpoints what is acknowledged.
        if let Err(stop) = self
            .guard(self.tracker.wait_for(|w| w.in_flight() == 0))
            .await
        {
            return Ok(stop);
        }
        // The SHARD_END write is what lets the children start: a failed one
        // is tried again (a refused one means the lease is lost) before the
        // lease is released for another reader to finish the shard.
        let mut retry = retry_backoff();
        let mut attempts = 0;
        let written = loop {
            if let Err(stop) = self.wait_live().await {
                return Ok(stop);
            }
            if self.write_checkpoint(Checkpoint::ShardEnd, &children).await {
                break true;
            }
            attempts += 1;
            if self.lease.is_gone() || attempts >= SHARD_END_ATTEMPTS {
                break false;
            }
            let d = retry.next().unwrap_or(Duration::from_secs(10));
            if let Err(stop) = self.guard(tokio::time::sleep(d)).await {
                return Ok(stop);
            }
        };
        if !written && !self.lease.is_gone() {
            warn!(shard = %self.shard, attempts, "SHARD_END checkpoint failed; releasing the lease");
            self.release().await;
        }
        if written {
            info!(shard = %self.shard, ?children, "shard ended");
            self.ctx.status.update(&self.shard, |s| {
                s.state = ShardState::Ended;
                s.checkpoint = Some(lease::SHARD_END.to_string());
            });
            // Discovery first: the coordinator may drop this task once the
            // lease is released.
            self.ctx.sync_now.notify_one();
            self.release().await;
        }
        Ok(Stop::Lost)
    }

    /// Shutdown path: wait (bounded) for acknowledgements, checkpoint, release.
    async fn drain_and_release(&mut self) {
        let deadline = self
            .ctx
            .drain_deadline
            .lock()
            .ok()
            .and_then(|d| *d)
            .unwrap_or_else(|| Instant::now() + self.ctx.config.shutdown_grace);
        let lost = self.lease.lost.clone();
        let handed = self.handed;
        tokio::select! {
            _ = self.tracker.wait_for(|w| w.acked_prefix() >= handed) => {}
            _ = tokio::time::sleep_until(deadline) => {
                warn!(shard = %self.shard, in_flight = self.tracker.in_flight(), "shutdown grace over; checkpointing what is done");
            }
            _ = lost.cancelled() => return,
        }
        self.checkpoint_acknowledged().await;
        let checkpointed = |r: &Self| {
            r.tracker
                .checkpoint()
                .is_none_or(|p| Checkpoint::At(p) == r.lease.written())
        };
        // A final checkpoint skipped at the lease deadline (a renewal late
        // on a loaded machine) or whose write failed is tried again until
        // the drain deadline: the renewer still runs during the drain, so a
        // paused lease comes back.
        let mut retry = retry_backoff();
        while !checkpointed(self) && !self.lease.is_gone() {
            let next = Instant::now() + retry.next().unwrap_or(Duration::from_secs(1));
            if next >= deadline {
                break;
            }
            tokio::select! {
                _ = lost.cancelled() => return,
                _ = self.renewed.changed() => {}
                _ = tokio::time::sleep_until(next) => {}
            }
            self.checkpoint_acknowledged().await;
        }
        let checkpointed = checkpointed(self);
        let mut released = self.release().await;
        // Likewise a failed release, while the renewer keeps the lease.
        while !released && !self.lease.is_gone() {
            let next = Instant::now() + retry.next().unwrap_or(Duration::from_secs(1));
            if next >= deadline {
                break;
            }
            tokio::select! {
                _ = lost.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
            }
            released = self.release().await;
        }
        // A lost lease is the new owner's to finish; anything else left
        // undone means records are read again: the stop was not clean.
        let finished = checkpointed && released;
        if !finished && !self.lease.lost.is_cancelled() {
            self.ctx.unfinished(&self.shard);
        }
        self.ctx.status.update(&self.shard, |s| {
            s.owned = false;
            s.state = ShardState::Released;
        });
    }

    /// Writes what the tracker says is acknowledged, if it moved (the
    /// final checkpoint of a drain; periodic ones are the renewer's).
    async fn checkpoint_acknowledged(&mut self) {
        let in_flight = self.tracker.in_flight();
        self.ctx
            .status
            .update(&self.shard, |s| s.in_flight = in_flight);
        let Some(pos) = self.tracker.checkpoint() else {
            return;
        };
        let cp = Checkpoint::At(pos);
        if cp == self.lease.written() {
            return;
        }
        self.write_checkpoint(cp, &[]).await;
    }

    /// A fenced checkpoint write, only while the lease is live; a failed
    /// condition means the lease is lost.
    async fn write_checkpoint(&mut self, cp: Checkpoint, children: &[String]) -> bool {
        let me = &self.ctx.config.worker_id;
        let lease = self.lease.clone();
        let mut counter = lease.counter.lock().await;
        // Judged with the lock held: a renewal in flight may have moved it.
        if lease.is_gone() || !matches!(self.phase(), LeasePhase::Live { .. }) {
            return false;
        }
        let label = streams::shard_labels(&self.ctx.table, &self.shard);
        let table = &self.ctx.table;
        let written = lease
            .write(table, me, &mut counter, |c| {
                table.checkpoint(&self.shard, me, c, &cp, children)
            })
            .await;
        // A successful conditional write proves ownership like a renewal.
        match written {
            Ok(Some(_)) => {
                metrics::counter!(metric::CHECKPOINTS, streams::with(label, "result", "ok"))
                    .increment(1);
                let shown = shown(&cp);
                self.ctx
                    .status
                    .update(&self.shard, |s| s.checkpoint = Some(shown));
                lease.set_written(cp);
                true
            }
            Ok(None) => {
                metrics::counter!(metric::CHECKPOINTS, streams::with(label, "result", "lost"))
                    .increment(1);
                info!(shard = %self.shard, "checkpoint refused: lease lost");
                lease.fence(&self.ctx.status);
                false
            }
            Err(e) => {
                metrics::counter!(metric::CHECKPOINTS, streams::with(label, "result", "error"))
                    .increment(1);
                warn!(shard = %self.shard, error = %e, "checkpoint write failed; will retry");
                false
            }
        }
    }

    /// Releases the lease; false when the release call failed.
    async fn release(&mut self) -> bool {
        let me = &self.ctx.config.worker_id;
        let lease = self.lease.clone();
        let mut counter = lease.counter.lock().await;
        if lease.is_gone() {
            return true;
        }
        lease.released.store(true, Ordering::Relaxed);
        let table = &self.ctx.table;
        let shard = &self.shard;
        let released = match lease
            .write(table, me, &mut counter, |c| table.release(shard, me, c))
            .await
        {
            Ok(Some(_)) => {
                // Logged so lease hand-overs can be reconstructed from logs.
                info!(shard = %self.shard, "lease released");
                metrics::counter!(metric::LEASE_CHANGES, "kind" => "release").increment(1);
                true
            }
            // Refused: another worker took the lease (it finishes the
            // shard), so this drain is not incomplete.
            Ok(None) => {
                lease.fence(&self.ctx.status);
                true
            }
            Err(e) => {
                warn!(shard = %self.shard, error = %e, "release failed; lease expires after failover time unless released again");
                // Still ours: renewed, and released again by a drain with
                // time left.
                lease.released.store(false, Ordering::Relaxed);
                false
            }
        };
        self.ctx.status.update(&self.shard, |s| s.owned = false);
        released
    }

    /// A shard iterator: after `after` when given (iterator renewal), else
    /// from the lease checkpoint.
    async fn iterator(
        &self,
        cp: &Checkpoint,
        after: Option<SharedStr>,
    ) -> Result<String, ConsumerError> {
        let mut retry = retry_backoff();
        loop {
            let mut req = self.ctx.kinesis.get_shard_iterator().shard_id(&self.shard);
            req = if self.ctx.config.stream_is_arn() {
                req.stream_arn(&self.ctx.config.stream)
            } else {
                req.stream_name(&self.ctx.config.stream)
            };
            req = match (&after, cp) {
                (Some(seq), _) => req
                    .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                    .starting_sequence_number(seq.as_str()),
                // AT, not AFTER: the checkpoint may sit inside a KPL aggregate
                // whose later sub-records are not done; those before are skipped.
                (None, Checkpoint::At(p)) => req
                    .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                    .starting_sequence_number(p.sequence.as_str()),
                (None, Checkpoint::Latest) => req.shard_iterator_type(ShardIteratorType::Latest),
                (None, Checkpoint::AtTimestamp) => match &self.ctx.config.initial_position {
                    InitialPosition::AtTimestamp { timestamp } => req
                        .shard_iterator_type(ShardIteratorType::AtTimestamp)
                        .timestamp(aws_smithy_types::DateTime::from_millis(
                            timestamp.timestamp_millis(),
                        )),
                    _ => {
                        warn!(shard = %self.shard, "lease says AT_TIMESTAMP but no timestamp is configured; reading from TRIM_HORIZON");
                        req.shard_iterator_type(ShardIteratorType::TrimHorizon)
                    }
                },
                (None, _) => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
            };
            match req.send().await {
                Ok(out) => {
                    if let Some(it) = out.shard_iterator() {
                        return Ok(it.to_string());
                    }
                    return Err(AwsError {
                        op: "GetShardIterator",
                        class: ErrorClass::Fatal,
                        message: "no iterator returned".into(),
                    }
                    .into());
                }
                Err(e) => {
                    let err = AwsError::new("GetShardIterator", &e);
                    if matches!(err.class, ErrorClass::Retry | ErrorClass::Throttled) {
                        let d = retry.next().unwrap_or(Duration::from_secs(10));
                        tokio::time::sleep(d).await;
                        continue;
                    }
                    return Err(err.into());
                }
            }
        }
    }
}

/// A checkpoint as the status shows it.
fn shown(cp: &Checkpoint) -> String {
    match cp {
        Checkpoint::At(p) => format!("{}.{}", p.sequence, p.sub_sequence),
        other => format!("{other:?}"),
    }
}

fn retry_backoff() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kinesis::types::{HashKeyRange, SequenceNumberRange};

    fn shard(id: &str, parents: &[&str], closed: bool) -> Shard {
        let mut range = SequenceNumberRange::builder().starting_sequence_number("1");
        if closed {
            range = range.ending_sequence_number("99");
        }
        Shard::builder()
            .shard_id(id)
            .set_parent_shard_id(parents.first().map(|p| p.to_string()))
            .set_adjacent_parent_shard_id(parents.get(1).map(|p| p.to_string()))
            .hash_key_range(
                HashKeyRange::builder()
                    .starting_hash_key("0")
                    .ending_hash_key("10")
                    .build()
                    .unwrap(),
            )
            .sequence_number_range(range.build().unwrap())
            .build()
            .unwrap()
    }

    mod adoption {
        use super::super::*;
        use aws_sdk_dynamodb::Client;
        use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
        use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
        use aws_sdk_dynamodb::types::AttributeValue;
        use aws_smithy_mocks::{RuleMode, mock, mock_client};

        const REFUSED: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}"#;

        fn item(owner: &str, counter: u64) -> GetItemOutput {
            GetItemOutput::builder()
                .item("leaseKey", AttributeValue::S("s".into()))
                .item("leaseOwner", AttributeValue::S(owner.into()))
                .item("leaseCounter", AttributeValue::N(counter.to_string()))
                .build()
        }

        /// A renewal at counter 5 after an earlier unanswered write (or not),
        /// against a table that refuses the first UpdateItem, then accepts,
        /// and reads back `owner` at counter 6.
        async fn renew_after(unsure: bool, owner: &'static str) -> (Fenced, u64, usize) {
            let update = mock!(Client::update_item)
                .sequence()
                .http_status(400, Some(REFUSED.to_string()))
                .output(|| UpdateItemOutput::builder().build())
                .build();
            let get = mock!(Client::get_item).then_output(move || item(owner, 6));
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&update, &get]);
            let table = LeaseTable::new(client, "leases");
            let lease = HeldLease::new(
                "s",
                Written {
                    counter: 5,
                    sent: Instant::now(),
                },
                Checkpoint::TrimHorizon,
                Arc::new(AckTracker::new()),
            );
            lease.unsure.store(unsure, Ordering::Relaxed);
            let mut counter = 5;
            let r = lease
                .write(&table, "me", &mut counter, |c| table.renew("s", "me", c))
                .await;
            (r, counter, get.num_calls())
        }

        #[tokio::test]
        async fn an_applied_unanswered_write_is_adopted_and_the_write_resent() {
            let (r, counter, reads) = renew_after(true, "me").await;
            assert_eq!(r.unwrap().map(|w| w.counter), Some(7));
            assert_eq!((counter, reads), (7, 1));
        }

        #[tokio::test]
        async fn a_refusal_is_a_lost_lease_when_nothing_was_unanswered_or_not_ours() {
            let (r, counter, reads) = renew_after(false, "me").await;
            assert_eq!(r.unwrap(), None);
            assert_eq!((counter, reads), (5, 0), "no re-read without doubt");
            let (r, counter, reads) = renew_after(true, "other").await;
            assert_eq!(r.unwrap(), None);
            assert_eq!((counter, reads), (5, 1));
        }
    }

    /// A reader of shard `s` whose lease (counter 1, just renewed, failover
    /// 10 s) is in a table answered by `update` (UpdateItem), reading through
    /// `kinesis` into `sink`.
    pub(super) fn test_reader(
        update: &aws_smithy_mocks::Rule,
        kinesis: aws_sdk_kinesis::Client,
        mut config: KinesisConfig,
        sink: mpsc::Sender<Vec<Record>>,
    ) -> (Reader, Arc<HeldLease>) {
        use aws_smithy_mocks::{RuleMode, mock_client};
        let failover = Duration::from_secs(10);
        let ddb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [update]);
        config.failover_time = failover;
        let ctx = Arc::new(Ctx {
            table: LeaseTable::with_timing(ddb, "t", LeaseTiming::new(failover)),
            config,
            kinesis,
            status: StatusHandle::default(),
            held: std::sync::Mutex::new(HashMap::new()),
            snapshot: watch::Sender::new(Arc::new(Vec::new())),
            sync_now: Notify::new(),
            leading: std::sync::atomic::AtomicBool::new(false),
            sink,
            shutdown: CancellationToken::new(),
            drain_deadline: std::sync::Mutex::new(None),
            govs: None,
            unfinished: std::sync::Mutex::new(Vec::new()),
            consumer_arn: None,
            fatal: std::sync::Mutex::new(None),
            coord: None,
        });
        let written = Written {
            counter: 1,
            sent: Instant::now(),
        };
        let tracker = Arc::new(AckTracker::new());
        let lease = Arc::new(HeldLease::new(
            "s",
            written,
            Checkpoint::TrimHorizon,
            tracker.clone(),
        ));
        let reader = Reader {
            ctx,
            shard: "s".into(),
            renewed: lease.renewed.subscribe(),
            lease: lease.clone(),
            tracker,
            handed: 0,
        };
        (reader, lease)
    }

    /// The shutdown drain and checkpoint bookkeeping of one reader, against
    /// a mocked lease table.
    mod drain {
        use super::super::*;
        use crate::checkpoint::Position;
        use crate::record::AckTarget;
        use aws_sdk_dynamodb::Client;
        use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
        use aws_smithy_mocks::{Rule, mock};

        fn reader(update: &Rule) -> (Reader, Arc<HeldLease>) {
            // Never called: the drain reads nothing.
            let kinesis = aws_sdk_kinesis::Client::from_conf(
                aws_sdk_kinesis::Config::builder()
                    .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
                    .region(aws_sdk_kinesis::config::Region::new("us-east-1"))
                    .build(),
            );
            let (sink, _) = mpsc::channel(1);
            super::test_reader(update, kinesis, KinesisConfig::new("s", "t", "me"), sink)
        }

        #[tokio::test(start_paused = true)]
        async fn a_final_checkpoint_at_the_lease_deadline_waits_for_the_renewal() {
            let update =
                mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
            let (mut reader, lease) = reader(&update);
            let serial = reader.tracker.push(Position::new("5", 0)).unwrap();
            reader.tracker.ack(serial);
            reader.handed = 1;
            reader.ctx.shutdown.cancel();
            // The last renewal 9 s ago: past the lease deadline (8 s), not
            // lost (10 s). The renewer's next one lands 500 ms later.
            tokio::time::advance(Duration::from_secs(9)).await;
            let renewer = lease.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                renewer.renewed.send_replace(Instant::now());
            });
            reader.drain_and_release().await;
            assert_eq!(lease.written(), Checkpoint::At(Position::new("5", 0)));
            assert!(
                reader.ctx.unfinished.lock().unwrap().is_empty(),
                "the stop counted as incomplete"
            );
            // The final checkpoint, then the release.
            assert_eq!(update.num_calls(), 2);
        }

        #[tokio::test(start_paused = true)]
        async fn a_failed_final_release_is_tried_again_within_the_grace() {
            // The final checkpoint goes through; the release meets 12 server
            // errors in a row (more than one operation's retry budget).
            let update = mock!(Client::update_item)
                .sequence()
                .output(|| UpdateItemOutput::builder().build())
                .http_status(500, None)
                .times(12)
                .output(|| UpdateItemOutput::builder().build())
                .build();
            let (mut reader, lease) = reader(&update);
            let serial = reader.tracker.push(Position::new("5", 0)).unwrap();
            reader.tracker.ack(serial);
            reader.handed = 1;
            reader.ctx.shutdown.cancel();
            reader.drain_and_release().await;
            assert!(
                reader.ctx.unfinished.lock().unwrap().is_empty(),
                "the stop counted as incomplete"
            );
            assert!(lease.released.load(Ordering::Relaxed));
            assert_eq!(update.num_calls(), 14);
        }

        #[tokio::test(start_paused = true)]
        async fn a_failed_shard_end_checkpoint_is_tried_again() {
            // 12 server errors in a row: more than one operation's retries.
            let update = mock!(Client::update_item)
                .sequence()
                .http_status(500, None)
                .times(12)
                .output(|| UpdateItemOutput::builder().build())
                .times(2)
                .build();
            let (mut reader, lease) = reader(&update);
            let stop = reader.finish_shard(vec!["c".into()]).await.unwrap();
            assert!(matches!(stop, Stop::Lost), "the reader's work is done");
            assert_eq!(lease.written(), Checkpoint::ShardEnd);
            assert!(lease.released.load(Ordering::Relaxed));
            // The SHARD_END write went through on a later operation, then
            // the release.
            assert_eq!(update.num_calls(), 14);
        }

        /// The pipeline is slow (DynamoDB throttles): the reader waits on
        /// the sink's back-pressure with a batch in hand, while the records
        /// of its first batch were acknowledged long ago. Their checkpoint
        /// must not wait for the reader: the renewer writes it within two
        /// renewal intervals, or a lease move reads them again.
        #[tokio::test(start_paused = true)]
        async fn acknowledged_records_are_checkpointed_while_the_reader_waits_on_back_pressure() {
            let update =
                mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
            let kinesis = aws_sdk_kinesis::Client::from_conf(
                aws_sdk_kinesis::Config::builder()
                    .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
                    .region(aws_sdk_kinesis::config::Region::new("us-east-1"))
                    .build(),
            );
            let mut config = KinesisConfig::new("s", "t", "me");
            config.checkpoint_interval = Duration::from_secs(1);
            // Room for one batch: the second one waits.
            let (sink, mut pipeline) = mpsc::channel(1);
            let (mut reader, lease) = super::test_reader(&update, kinesis, config, sink);
            reader
                .ctx
                .held
                .lock()
                .unwrap()
                .insert("s".into(), lease.clone());
            let batch = |reader: &Reader, seqs: &[&str]| -> Vec<Record> {
                seqs.iter()
                    .map(|s| {
                        let serial = reader.tracker.push(Position::new(*s, 0)).unwrap();
                        Record {
                            origin: tidemark_schema::Origin::Kinesis {
                                stream: "s".into(),
                                shard_id: "s".into(),
                                sequence_number: (*s).into(),
                                sub_sequence_number: 0,
                            },
                            partition_key: "k".into(),
                            data: bytes::Bytes::from_static(b"{}"),
                            arrival_ms: 0,
                            ack: crate::record::Ack::new(reader.tracker.clone(), serial),
                            defect: None,
                        }
                    })
                    .collect()
            };
            let renewer_stop = CancellationToken::new();
            let renewer = tokio::spawn(renew_loop(reader.ctx.clone(), renewer_stop.clone()));
            // The first batch is taken and stored; the second fills the
            // channel; the third waits on back-pressure.
            let first = batch(&reader, &["1", "2"]);
            reader.submit(first).await.ok().unwrap();
            let taken = pipeline.recv().await.unwrap();
            crate::record::Ack::done_all(taken.into_iter().map(|r| r.ack));
            let acked = Instant::now();
            let second = batch(&reader, &["3"]);
            reader.submit(second).await.ok().unwrap();
            let third = batch(&reader, &["4"]);
            let blocked = tokio::spawn(async move {
                let r = reader.submit(third).await;
                (reader, r.is_ok())
            });
            let renewal = Duration::from_secs(10) / 3;
            let want = Checkpoint::At(Position::new("2", 0));
            while lease.written() != want {
                assert!(
                    acked.elapsed() <= 2 * renewal,
                    "no checkpoint within two renewal intervals of the acknowledgement: {:?}",
                    lease.written()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(!blocked.is_finished(), "the reader still waits on the sink");
            assert!(!lease.is_gone(), "the lease is still held");
            renewer_stop.cancel();
            renewer.await.unwrap();
            blocked.abort();
        }

        /// The renewer writes only a checkpoint past the written one, never
        /// one behind it nor over `SHARD_END`, and at most once per
        /// `checkpoint_interval`.
        #[tokio::test(start_paused = true)]
        async fn the_renewer_writes_no_checkpoint_behind_the_written_one() {
            let update =
                mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
            let (reader, lease) = reader(&update);
            let at = |s: &str| Checkpoint::At(Position::new(s, 0));
            let interval = Duration::from_secs(5);
            let ack = |s: &str| {
                let serial = reader.tracker.push(Position::new(s, 0)).unwrap();
                reader.tracker.ack(serial);
            };
            ack("5");
            assert_eq!(
                lease.due_checkpoint(interval, Instant::now()),
                None,
                "too soon after taking the lease"
            );
            tokio::time::advance(interval).await;
            assert_eq!(
                lease.due_checkpoint(interval, Instant::now()),
                Some(at("5"))
            );
            lease.set_written(at("7"));
            tokio::time::advance(interval).await;
            assert_eq!(
                lease.due_checkpoint(interval, Instant::now()),
                None,
                "behind the written one"
            );
            ack("9");
            assert_eq!(
                lease.due_checkpoint(interval, Instant::now()),
                Some(at("9"))
            );
            lease.set_written(Checkpoint::ShardEnd);
            tokio::time::advance(interval).await;
            assert_eq!(lease.due_checkpoint(interval, Instant::now()), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn live_workers_count_owners_of_unexpired_unfinished_leases() {
        let fo = Duration::from_secs(10);
        let lease = |key: &str, owner: Option<&str>| {
            let mut l = Lease::new(key, Checkpoint::TrimHorizon, vec![]);
            l.owner = owner.map(str::to_string);
            l
        };
        let mut done = lease("d", Some("c"));
        done.checkpoint = Checkpoint::ShardEnd;
        let leases = vec![
            lease("s0", Some("a")),
            lease("s1", Some("a")),
            lease("s2", Some("b")),
            lease("s3", Some("me")),
            lease("s4", None),
            done,
        ];
        let mut obs = Observations::default();
        let t0 = Instant::now();
        obs.observe(&leases, t0);
        // a and b (c's only lease is finished), plus this worker.
        assert_eq!(live_workers("me", &leases, &obs, t0, fo), 3);
        // A failover time later nothing moved: only this worker is left.
        assert_eq!(live_workers("me", &leases, &obs, t0 + fo, fo), 1);
    }

    #[test]
    fn new_leases_start_positions_and_order() {
        let shards = vec![
            shard(
                "shardId-000000000002",
                &["shardId-000000000000", "shardId-000000000001"],
                false,
            ),
            shard("shardId-000000000000", &[], true),
            shard("shardId-000000000001", &[], true),
        ];
        // Fresh table, TRIM_HORIZON: everything from the start, parents first.
        let l = new_leases(&shards, &[], &InitialPosition::TrimHorizon);
        let keys: Vec<_> = l.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "shardId-000000000000",
                "shardId-000000000001",
                "shardId-000000000002"
            ]
        );
        assert!(l.iter().all(|l| l.checkpoint == Checkpoint::TrimHorizon));
        assert_eq!(l[2].parents.len(), 2);
        assert_eq!(l[2].hash_range, Some(("0".into(), "10".into())));
        // Fresh table, LATEST: closed shards are done, open ones start at
        // the tip (only new data, as asked).
        let l = new_leases(&shards, &[], &InitialPosition::Latest);
        assert_eq!(l[0].checkpoint, Checkpoint::ShardEnd);
        assert_eq!(l[2].checkpoint, Checkpoint::Latest);
        // Existing table: a new child of a known parent is read in full
        // whatever the initial position.
        let existing = vec![Lease::new(
            "shardId-000000000000",
            Checkpoint::Latest,
            vec![],
        )];
        let l = new_leases(&shards[..2], &existing, &InitialPosition::Latest);
        assert_eq!(l.len(), 1, "only the missing lease");
        assert_eq!(l[0].key, "shardId-000000000002");
        assert_eq!(l[0].checkpoint, Checkpoint::TrimHorizon);
    }
}
