//! The live Kinesis source: a coordinator task that discovers shards, renews,
//! takes and steals leases, and one reader task per leased shard.
//!
//! Guarantees:
//! - a shard is read by at most one reader of this worker, only while the
//!   worker holds its lease; a lost lease (failed renewal, or no successful
//!   renewal for `failover_time`) stops the reader before its next call;
//! - records are delivered in shard order; a child shard is read only after
//!   every parent lease is at `SHARD_END`;
//! - checkpoints only move over acknowledged records, and every checkpoint
//!   write is conditional on the lease counter (a stolen lease cannot be
//!   checkpointed by its old owner).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_kinesis::types::{Shard, ShardIteratorType};
use tokio::sync::{Mutex, Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::checkpoint::AckTracker;
use crate::config::{InitialPosition, KinesisConfig};
use crate::convert::{RawRecord, push_user_records};
use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::lease::{self, BalanceInput, Checkpoint, Lease, LeaseTable, Observations};
use crate::pacer::Pacer;
use crate::record::Record;
use crate::status::{ShardState, StatusHandle};
use tidemark_schema::SharedStr;

use crate::metrics::kinesis as metric;

/// Fencing state of a held lease, shared by renewer and checkpointer so their
/// counter-bumping writes never race.
#[derive(Debug)]
struct LeaseState {
    counter: u64,
    last_renewed: Instant,
    /// Set once the lease is lost or released: no more writes.
    gone: bool,
}

#[derive(Debug)]
struct Held {
    state: Arc<Mutex<LeaseState>>,
    lost: CancellationToken,
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
    /// Latest lease-table snapshot, for parent checks.
    snapshot: watch::Sender<Arc<Vec<Lease>>>,
    /// A shard ended: run shard discovery now.
    sync_now: Notify,
    sink: mpsc::Sender<Vec<Record>>,
    shutdown: CancellationToken,
    /// Set when the shutdown drain started; readers finish by this deadline.
    drain_deadline: std::sync::Mutex<Option<Instant>>,
    /// Shards whose drain did not finish (final checkpoint or release
    /// failed, or the reader was aborted): `run` then returns an error.
    unfinished: std::sync::Mutex<Vec<String>>,
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
}

impl KinesisSource {
    /// A source reading `config.stream` with leases in `config.lease_table`.
    pub fn new(
        config: KinesisConfig,
        kinesis: aws_sdk_kinesis::Client,
        dynamodb: aws_sdk_dynamodb::Client,
    ) -> Self {
        let table = LeaseTable::new(dynamodb, config.lease_table.clone());
        Self {
            config,
            kinesis,
            table,
            status: StatusHandle::default(),
        }
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
        self.config.validate()?;
        self.table.create_if_absent(Duration::from_secs(60)).await?;
        let ctx = Arc::new(Ctx {
            config: self.config,
            kinesis: self.kinesis,
            table: self.table,
            status: self.status,
            snapshot: watch::Sender::new(Arc::new(Vec::new())),
            sync_now: Notify::new(),
            sink,
            shutdown,
            drain_deadline: std::sync::Mutex::new(None),
            unfinished: std::sync::Mutex::new(Vec::new()),
        });
        coordinate(Arc::clone(&ctx)).await?;
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
    loop {
        if ctx.shutdown.is_cancelled() {
            break;
        }
        let pass_start = Instant::now();
        let mut wake = pass_start + tick;
        if Instant::now() >= next_sync {
            match sync_shards(&ctx).await {
                Ok(()) => {
                    sync_failures = 0;
                    next_sync = Instant::now() + cfg.shard_sync_interval;
                }
                Err(e) => {
                    // The stream may be momentarily unreachable: retry next pass,
                    // but a missing stream at start is fatal.
                    sync_failures += 1;
                    warn!(error = %e, "shard sync failed");
                    if matches!(&e, ConsumerError::Aws(a) if a.class == ErrorClass::NotFound || a.class == ErrorClass::Fatal)
                        && held.is_empty()
                        && sync_failures >= 3
                    {
                        return Err(e);
                    }
                    next_sync = Instant::now() + tick;
                }
            }
        }
        renew_all(&ctx, &mut held).await;
        match ctx.table.list().await {
            Ok(leases) => {
                let now = Instant::now();
                obs.observe(&leases, now);
                // Published before any reader starts: a new reader checks its
                // parents against this pass's table, never an older one.
                ctx.snapshot.send_replace(Arc::new(leases.clone()));
                let held_keys: HashSet<String> = held.keys().cloned().collect();
                let plan = lease::plan(BalanceInput {
                    me: &cfg.worker_id,
                    held: &held_keys,
                    leases: &leases,
                    observations: &obs,
                    now,
                    failover: cfg.failover_time,
                    max_leases: cfg.max_leases,
                });
                debug!(
                    worker = %cfg.worker_id,
                    held = held.len(),
                    target = plan.target,
                    take = plan.take.len(),
                    steal = plan.steal.len(),
                    "balancing pass"
                );
                for (keys, kind) in [(&plan.take, "take"), (&plan.steal, "steal")] {
                    for key in keys {
                        let Some(observed) = leases.iter().find(|l| &l.key == key) else {
                            continue;
                        };
                        match ctx.table.acquire(observed, &cfg.worker_id).await {
                            Ok(Some(counter)) => {
                                info!(worker = %cfg.worker_id, shard = %key, kind, "lease acquired");
                                metrics::counter!(metric::LEASE_CHANGES, "kind" => kind)
                                    .increment(1);
                                let mut lease = observed.clone();
                                lease.counter = counter;
                                lease.owner = Some(cfg.worker_id.clone());
                                held.insert(key.clone(), spawn_reader(&ctx, lease));
                            }
                            Ok(None) => debug!(shard = %key, "lease race lost"),
                            Err(e) => warn!(shard = %key, error = %e, "acquire failed"),
                        }
                    }
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
            _ = ctx.sync_now.notified() => next_sync = Instant::now(),
        }
    }
    // Shutdown: readers drain, checkpoint and release on their own; keep their
    // leases renewed meanwhile so nobody steals them mid-drain.
    let deadline = Instant::now() + cfg.shutdown_grace;
    if let Ok(mut d) = ctx.drain_deadline.lock() {
        *d = Some(deadline);
    }
    let hard_stop = deadline + cfg.failover_time / 3;
    loop {
        held.retain(|_, h| !h.task.is_finished());
        if held.is_empty() || Instant::now() >= hard_stop {
            break;
        }
        renew_all(&ctx, &mut held).await;
        tokio::time::sleep(Duration::from_millis(50).min(tick)).await;
    }
    for key in held.keys() {
        warn!(shard = %key, "reader did not finish in time; aborting it");
        ctx.unfinished(key);
    }
    drop(held);
    metrics::gauge!(metric::LEASES_HELD).set(0.0);
    Ok(())
}

/// Renews every held lease at most once per `failover_time / 3`; drops leases
/// that are lost, unrenewed for `failover_time`, or whose reader finished.
async fn renew_all(ctx: &Ctx, held: &mut HashMap<String, Held>) {
    let me = &ctx.config.worker_id;
    let fo = ctx.config.failover_time;
    let renew_every = fo / 3;
    let mut dropped = Vec::new();
    for (key, h) in held.iter() {
        if h.task.is_finished() {
            dropped.push(key.clone());
            continue;
        }
        let mut st = h.state.lock().await;
        if st.gone {
            // Given up by its reader (checkpoint refused, or released): make
            // sure the status no longer claims it.
            ctx.status.update(key, |s| s.owned = false);
            dropped.push(key.clone());
            continue;
        }
        if st.last_renewed.elapsed() < renew_every / 2 {
            continue;
        }
        match ctx.table.renew(key, me, st.counter).await {
            Ok(Some(c)) => {
                st.counter = c;
                st.last_renewed = Instant::now();
            }
            Ok(None) => {
                info!(shard = %key, "lease lost");
                st.gone = true;
            }
            Err(e) => warn!(shard = %key, error = %e, "renew failed"),
        }
        // Self-fencing: others may take a lease we failed to renew in time.
        if !st.gone && st.last_renewed.elapsed() >= fo {
            warn!(shard = %key, "lease not renewed within failover time; giving it up");
            st.gone = true;
        }
        if st.gone {
            h.lost.cancel();
            metrics::counter!(metric::LEASE_CHANGES, "kind" => "lost").increment(1);
            ctx.status.update(key, |s| {
                s.owned = false;
                s.state = ShardState::Lost;
            });
            dropped.push(key.clone());
        }
    }
    for k in dropped {
        held.remove(&k);
    }
}

fn spawn_reader(ctx: &Arc<Ctx>, lease: Lease) -> Held {
    let state = Arc::new(Mutex::new(LeaseState {
        counter: lease.counter,
        last_renewed: Instant::now(),
        gone: false,
    }));
    let lost = CancellationToken::new();
    ctx.status.update(&lease.key, |s| {
        *s = Default::default();
        s.owned = true;
    });
    let reader = Reader {
        ctx: ctx.clone(),
        shard: lease.key.clone(),
        state: state.clone(),
        lost: lost.clone(),
        tracker: Arc::new(AckTracker::new()),
        written: lease.checkpoint.clone(),
        last_write: Instant::now(),
    };
    let task = AbortOnDrop(tokio::spawn(reader.run(lease)));
    Held { state, lost, task }
}

/// ListShards, then a lease for every shard that has none, parents first.
async fn sync_shards(ctx: &Ctx) -> Result<(), ConsumerError> {
    let shards = list_shards(ctx).await?;
    let existing = ctx.table.list().await?;
    let new = new_leases(&shards, &existing, &ctx.config.initial_position);
    for l in new {
        if ctx.table.create_lease(&l).await? {
            info!(shard = %l.key, checkpoint = ?l.checkpoint, "lease created");
        }
    }
    Ok(())
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

enum Stop {
    /// Lease lost: no more writes.
    Lost,
    /// Shutdown: drain, checkpoint, release.
    Shutdown,
}

struct Reader {
    ctx: Arc<Ctx>,
    shard: String,
    state: Arc<Mutex<LeaseState>>,
    lost: CancellationToken,
    tracker: Arc<AckTracker>,
    /// Last checkpoint written (or read at acquisition).
    written: Checkpoint,
    last_write: Instant,
}

impl Reader {
    async fn run(mut self, lease: Lease) {
        let stop = self.read(&lease).await;
        match stop {
            Ok(Stop::Lost) => {}
            Ok(Stop::Shutdown) => self.drain_and_release().await,
            Err(e) => {
                warn!(shard = %self.shard, error = %e, "reader failed; releasing lease");
                self.drain_and_release().await;
            }
        }
    }

    fn stopped(&self) -> Option<Stop> {
        if self.lost.is_cancelled() {
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
            _ = self.lost.cancelled() => Err(Stop::Lost),
            _ = self.ctx.shutdown.cancelled() => Err(Stop::Shutdown),
            v = fut => Ok(v),
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
        let shard_label = self.shard.clone();
        loop {
            if let Some(stop) = self.stopped() {
                return Ok(stop);
            }
            self.maybe_checkpoint(false).await;
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
            let room = max.saturating_sub(self.tracker.in_flight()).max(1);
            let limit = i32::try_from(room)
                .unwrap_or(i32::MAX)
                .min(cfg.max_records_per_call);
            let started = Instant::now();
            metrics::counter!(metric::GET_RECORDS, "shard" => shard_label.clone()).increment(1);
            let res = self
                .ctx
                .kinesis
                .get_records()
                .shard_iterator(&iterator)
                .limit(limit)
                .send()
                .await;
            let out = match res {
                Ok(out) => out,
                Err(e) => {
                    let err = AwsError::new("GetRecords", &e);
                    match err.class {
                        ErrorClass::Throttled => {
                            metrics::counter!(metric::THROTTLED, "shard" => shard_label.clone())
                                .increment(1);
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
            let mut bytes = 0usize;
            let mut batch = Vec::with_capacity(out.records().len());
            let mut corrupt = 0;
            for r in out.records() {
                bytes += r.data().as_ref().len();
                let raw = RawRecord {
                    sequence_number: r.sequence_number().into(),
                    partition_key: r.partition_key().unwrap_or_default().to_string(),
                    data: bytes::Bytes::copy_from_slice(r.data().as_ref()),
                    arrival_ms: r
                        .approximate_arrival_timestamp()
                        .and_then(|t| t.to_millis().ok())
                        .unwrap_or(0),
                };
                last_read = Some(raw.sequence_number.clone());
                corrupt += push_user_records(
                    &stream,
                    &shard_id,
                    raw,
                    skip.as_ref(),
                    &self.tracker,
                    &mut batch,
                )?;
            }
            pacer.on_success(started, bytes, out.records().len(), behind == Some(0));
            if corrupt > 0 {
                metrics::counter!(metric::CORRUPT_AGGREGATES, "shard" => shard_label.clone())
                    .increment(corrupt as u64);
            }
            if let Some(ms) = behind {
                metrics::gauge!(metric::MILLIS_BEHIND, "shard" => shard_label.clone())
                    .set(ms as f64);
            }
            let n = batch.len() as u64;
            metrics::counter!(metric::RECORDS_READ, "shard" => shard_label.clone()).increment(n);
            let in_flight = self.tracker.in_flight();
            self.ctx.status.update(&self.shard, |s| {
                s.millis_behind_latest = behind;
                s.records_read += n;
                s.in_flight = in_flight;
            });
            if !batch.is_empty() {
                match self.guard(self.ctx.sink.send(batch)).await {
                    Ok(Ok(())) => {}
                    // The pipeline is gone: nothing more can be acknowledged.
                    Ok(Err(_)) => return Ok(Stop::Shutdown),
                    Err(stop) => return Ok(stop),
                }
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
        loop {
            let tick = tokio::time::sleep(self.ctx.config.checkpoint_interval);
            let drained = self.guard(async {
                tokio::select! {
                    _ = self.tracker.wait_for(|w| w.in_flight() == 0) => true,
                    _ = tick => false,
                }
            });
            match drained.await {
                Ok(true) => break,
                Ok(false) => self.maybe_checkpoint(false).await,
                Err(stop) => return Ok(stop),
            }
        }
        let written = self.write_checkpoint(Checkpoint::ShardEnd, &children).await;
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
        let lost = self.lost.clone();
        tokio::select! {
            _ = self.tracker.wait_for(|w| w.in_flight() == 0) => {}
            _ = tokio::time::sleep_until(deadline) => {
                warn!(shard = %self.shard, in_flight = self.tracker.in_flight(), "shutdown grace over; checkpointing what is done");
            }
            _ = lost.cancelled() => return,
        }
        self.maybe_checkpoint(true).await;
        let checkpointed = self
            .tracker
            .checkpoint()
            .is_none_or(|p| Checkpoint::At(p) == self.written);
        let released = self.release().await;
        // A lost lease is the new owner's to finish; anything else left
        // undone means records are read again: the stop was not clean.
        let finished = checkpointed && released;
        if !finished && !self.lost.is_cancelled() {
            self.ctx.unfinished(&self.shard);
        }
        self.ctx.status.update(&self.shard, |s| {
            s.owned = false;
            s.state = ShardState::Released;
        });
    }

    /// Writes the watermark if it moved and `checkpoint_interval` passed
    /// (or `force`).
    async fn maybe_checkpoint(&mut self, force: bool) {
        let in_flight = self.tracker.in_flight();
        self.ctx
            .status
            .update(&self.shard, |s| s.in_flight = in_flight);
        if !force && self.last_write.elapsed() < self.ctx.config.checkpoint_interval {
            return;
        }
        let Some(pos) = self.tracker.checkpoint() else {
            return;
        };
        let cp = Checkpoint::At(pos);
        if cp == self.written {
            return;
        }
        self.write_checkpoint(cp, &[]).await;
    }

    /// A fenced checkpoint write; a failed condition means the lease is lost.
    async fn write_checkpoint(&mut self, cp: Checkpoint, children: &[String]) -> bool {
        let me = &self.ctx.config.worker_id;
        let mut st = self.state.lock().await;
        if st.gone {
            return false;
        }
        let label = self.shard.clone();
        self.last_write = Instant::now();
        match self
            .ctx
            .table
            .checkpoint(&self.shard, me, st.counter, &cp, children)
            .await
        {
            Ok(Some(c)) => {
                st.counter = c;
                // A successful conditional write proves ownership like a renewal.
                st.last_renewed = Instant::now();
                metrics::counter!(metric::CHECKPOINTS, "shard" => label, "result" => "ok")
                    .increment(1);
                let shown = match &cp {
                    Checkpoint::At(p) => format!("{}.{}", p.sequence, p.sub_sequence),
                    other => format!("{other:?}"),
                };
                self.ctx
                    .status
                    .update(&self.shard, |s| s.checkpoint = Some(shown));
                self.written = cp;
                true
            }
            Ok(None) => {
                metrics::counter!(metric::CHECKPOINTS, "shard" => label, "result" => "lost")
                    .increment(1);
                info!(shard = %self.shard, "checkpoint refused: lease lost");
                st.gone = true;
                self.lost.cancel();
                metrics::counter!(metric::LEASE_CHANGES, "kind" => "lost").increment(1);
                self.ctx.status.update(&self.shard, |s| {
                    s.owned = false;
                    s.state = ShardState::Lost;
                });
                false
            }
            Err(e) => {
                metrics::counter!(metric::CHECKPOINTS, "shard" => label, "result" => "error")
                    .increment(1);
                warn!(shard = %self.shard, error = %e, "checkpoint write failed; will retry");
                false
            }
        }
    }

    /// Releases the lease; false when the release call failed.
    async fn release(&mut self) -> bool {
        let me = &self.ctx.config.worker_id;
        let mut st = self.state.lock().await;
        if st.gone {
            return true;
        }
        st.gone = true;
        let released = match self.ctx.table.release(&self.shard, me, st.counter).await {
            Ok(Some(_)) => {
                // Logged so lease hand-overs can be reconstructed from logs.
                info!(shard = %self.shard, "lease released");
                metrics::counter!(metric::LEASE_CHANGES, "kind" => "release").increment(1);
                true
            }
            Ok(None) => true,
            Err(e) => {
                warn!(shard = %self.shard, error = %e, "release failed; lease expires after failover time");
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
