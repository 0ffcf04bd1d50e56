//! `lease_assignment = "leader"`: one elected worker lists the lease table
//! and assigns leases; the others find theirs through the owner index.
//!
//! - **Heartbeats** ([`heartbeat_loop`]): every worker writes its heartbeat
//!   to the coordinator table ([`LeaderStore`]) every renewal interval, and
//!   stops reading every shard (fences its leases) once its own last
//!   successful heartbeat is `failover_time - margin` old. It adopts no
//!   lease meanwhile.
//! - **Election**: the lock item is taken by a write conditional on the
//!   counter seen, when absent or stale (its `lastUpdateTime` older than
//!   `failover_time + max_clock_skew` on the reader's wall clock). The
//!   leader rewrites it every pass and leads only while its last successful
//!   lock write is younger than `failover_time - margin`. Two leaders at once
//!   are not unsafe (every assignment is fenced on `leaseCounter`), only
//!   wasteful.
//! - **Leader pass**: an eventually consistent Scan of the lease table, the
//!   heartbeats, shard discovery when due, then [`assignments`]: free leases,
//!   leases of dead workers (stale heartbeat: at once) and expired leases
//!   (counter unchanged for a failover time on the leader's clock) go to the
//!   least-loaded live worker, then leases move from the most to the least
//!   loaded until max − min ≤ 1. Each assignment is the fenced acquire write
//!   in the new owner's name, on the counter seen.
//! - **Follower pass**: a Query of the owner index for this worker's leases;
//!   a lease not yet held is read (consistent GetItem, for its counter and
//!   checkpoint) and renewed in this worker's name (the fenced write that
//!   starts its lease deadline), then read like any other. Leases moved away
//!   are noticed by the renewer, whose next write is refused.
//!
//! Expiry is never hastened for a live worker: a stale heartbeat means the
//! worker has stopped reading (see [`crate::kinesis::lease::leader_store`]
//! for the clock assumption), and every other lease expires by the counter
//! rule.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{debug, error, info, warn};

use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::kinesis::discovery::{sync_failed, sync_shards};
use crate::kinesis::lease::balance::Observations;
use crate::kinesis::lease::item::Lease;
use crate::kinesis::lease::leader_store::{Heartbeat, LeaderStore};
use crate::kinesis::lease::timing::LeasePhase;
use crate::kinesis::listing::{REFUSED_LISTINGS, listing_answered, listing_failed};
use crate::kinesis::reader;
use crate::kinesis::run::StreamRun;

/// A heartbeat this many failover times old is deleted by the leader.
const FORGET_AFTER_FAILOVERS: u32 = 30;
/// Most such deletions per pass.
const FORGET_PER_PASS: usize = 10;

/// Most lease-table writes (assignments, adoptions) in flight at once.
const MAX_CONCURRENT_WRITES: usize = 16;

/// Heartbeats refused for good in a row, and the last such error (written
/// by the heartbeat task, read by the passes).
type BeatRefusals = Arc<std::sync::Mutex<(u32, Option<AwsError>)>>;

/// Leader-mode state of one worker.
#[derive(Debug)]
pub(crate) struct Assigner {
    store: Arc<dyn LeaderStore>,
    /// Send time of this worker's last successful heartbeat.
    beat: Arc<std::sync::Mutex<Option<Instant>>>,
    /// Heartbeats refused for good in a row, and the last such error.
    beat_refusals: BeatRefusals,
    beats: AbortOnDropHandle<()>,
    beats_stop: CancellationToken,
    /// The lock counter this worker wrote last, and that write's send time.
    lock: Option<(u64, Instant)>,
    obs: Observations,
    /// Live workers at the previous leader pass.
    last_live: BTreeSet<String>,
    next_sync: Instant,
    sync_asked: bool,
    sync_failures: u32,
    /// Consecutive lease-table reads refused for good
    /// (`listing::listing_failed`).
    list_refusals: u32,
    /// Finished leases at the last shard discovery (a set, not a count:
    /// finished leases may also be deleted).
    finished_synced: HashSet<String>,
}

impl Assigner {
    /// Starts the heartbeat task.
    pub(crate) fn start(stream: &Arc<StreamRun>, store: Arc<dyn LeaderStore>) -> Self {
        let beat = Arc::new(std::sync::Mutex::new(None));
        let beat_refusals = Arc::new(std::sync::Mutex::new((0, None)));
        let beats_stop = CancellationToken::new();
        let beats = AbortOnDropHandle::new(tokio::spawn(heartbeat_loop(
            stream.clone(),
            store.clone(),
            (beat.clone(), beat_refusals.clone()),
            beats_stop.clone(),
        )));
        Self {
            store,
            beat,
            beat_refusals,
            beats,
            beats_stop,
            lock: None,
            obs: Observations::default(),
            last_live: BTreeSet::new(),
            next_sync: Instant::now(),
            sync_asked: false,
            sync_failures: 0,
            list_refusals: 0,
            finished_synced: HashSet::new(),
        }
    }

    /// A reader saw a shard end on this worker.
    pub(crate) fn sync_asked(&mut self) {
        self.sync_asked = true;
    }

    /// The heartbeat's error once [`REFUSED_LISTINGS`] heartbeats in a row
    /// were refused for good.
    fn beat_refused(&self) -> Option<AwsError> {
        let refused = self.beat_refusals.lock().ok()?;
        match &*refused {
            (n, Some(e)) if *n >= REFUSED_LISTINGS => Some(e.clone()),
            _ => None,
        }
    }

    fn alive(&self, stream: &StreamRun, now: Instant) -> bool {
        let beat = self.beat.lock().ok().and_then(|b| *b);
        beat.is_some_and(|t| matches!(stream.table.timing().phase(t, now), LeasePhase::Live { .. }))
    }

    fn leading(&self, stream: &StreamRun, now: Instant) -> bool {
        self.lock.is_some_and(|(_, sent)| {
            matches!(
                stream.table.timing().phase(sent, now),
                LeasePhase::Live { .. }
            )
        })
    }

    /// One pass; returns when the next one is due.
    pub(crate) async fn pass(&mut self, stream: &Arc<StreamRun>) -> Result<Instant, ConsumerError> {
        let cfg = &stream.config;
        let start = Instant::now();
        let wake = start + cfg.failover_time / 3;
        if !self.alive(stream, start) {
            // No heartbeat: the leader may count this worker as dead, so it
            // adopts nothing. A coordinator table refusing the heartbeat
            // for good stops the source; so does a lease table refusing
            // the worker, which it still reads (else, in leader mode, a
            // revoked role would go unnoticed: no pass would list).
            if let Some(e) = self.beat_refused() {
                error!(error = %e, "the coordinator table refuses this worker's heartbeat; stopping");
                return Err(e.into());
            }
            match stream.table.owned_by(cfg.worker_id.as_str()).await {
                Ok(_) => listing_answered(&mut self.list_refusals),
                Err(e) => {
                    if let Some(e) = listing_failed(e, &mut self.list_refusals) {
                        return Err(e);
                    }
                }
            }
            return Ok(wake);
        }
        self.elect(stream).await;
        let leading = self.leading(stream, Instant::now());
        stream
            .leading
            .store(leading, std::sync::atomic::Ordering::Relaxed);
        if leading {
            self.lead(stream).await?;
        } else {
            self.follow(stream).await?;
        }
        Ok(wake)
    }

    async fn elect(&mut self, stream: &StreamRun) {
        let me = stream.config.worker_id.as_str();
        let stale_after = stream.config.failover_time + stream.config.max_clock_skew;
        let now_ms = self.store.now_ms();
        // The leader renews without reading: it knows its counter.
        let seen = match self.lock {
            Some((c, _)) => Some(c),
            None => match self.store.lock().await {
                Ok(None) => None,
                Ok(Some(l)) if l.owner == me => Some(l.counter),
                Ok(Some(l)) => {
                    let age = Duration::from_millis(now_ms.saturating_sub(l.at_ms));
                    if age < stale_after {
                        return;
                    }
                    info!(leader = %l.owner, ?age, "leader lock stale; taking it");
                    Some(l.counter)
                }
                Err(e) => {
                    warn!(error = %e, "reading the leader lock failed");
                    return;
                }
            },
        };
        let sent = Instant::now();
        match self.store.write_lock(me, seen, now_ms).await {
            Ok(()) => {
                if self.lock.is_none() {
                    info!(worker = %me, "leading lease assignment");
                }
                self.lock = Some((seen.map_or(1, |c| c + 1), sent));
            }
            Err(e) if e.class == ErrorClass::ConditionFailed => {
                if self.lock.is_some() {
                    info!(worker = %me, "leader lock lost");
                }
                self.lock = None;
            }
            // Unknown: keep leading until the last successful write is too
            // old; the next pass reads the lock if this one failed.
            Err(e) => warn!(error = %e, "writing the leader lock failed"),
        }
    }

    async fn lead(&mut self, stream: &Arc<StreamRun>) -> Result<(), ConsumerError> {
        let cfg = &stream.config;
        let me = cfg.worker_id.as_str();
        let mut leases = match stream.table.list_with(false).await {
            Ok(l) => l,
            Err(e) => match listing_failed(e, &mut self.list_refusals) {
                Some(e) => return Err(e),
                None => return Ok(()),
            },
        };
        listing_answered(&mut self.list_refusals);
        // Discovery: when due, asked, on an empty table, or when a shard
        // ended since the last one (children must be created).
        let finished: HashSet<String> = leases
            .iter()
            .filter(|l| l.is_finished())
            .map(|l| l.key.clone())
            .collect();
        if self.sync_asked
            || leases.is_empty()
            || !finished.is_subset(&self.finished_synced)
            || Instant::now() >= self.next_sync
        {
            match sync_shards(stream, Some(&leases)).await {
                Ok(created) => {
                    self.sync_failures = 0;
                    self.sync_asked = false;
                    self.finished_synced = finished;
                    self.next_sync = Instant::now() + cfg.shard_sync_interval;
                    if created > 0 {
                        match stream.table.list_with(false).await {
                            Ok(l) => leases = l,
                            Err(e) => warn!(error = %e, "listing leases failed"),
                        }
                    }
                }
                Err(e) => {
                    if let Some(e) = sync_failed(e, stream.held.is_empty(), &mut self.sync_failures)
                    {
                        return Err(e);
                    }
                }
            }
        }
        let now = Instant::now();
        self.obs.observe(&leases, now);
        stream.snapshot.send_replace(Arc::new(leases.clone()));
        let beats = match self.store.heartbeats().await {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "reading heartbeats failed");
                return Ok(());
            }
        };
        let Fleet { live, dead, forget } = sort_heartbeats(
            me,
            beats,
            self.store.now_ms(),
            cfg.failover_time,
            cfg.max_clock_skew,
        );
        // Long-dead workers' heartbeats (every replaced task leaves one)
        // would grow the heartbeat Scan for ever; their leases went long
        // ago. A few per pass.
        for w in forget.iter().take(FORGET_PER_PASS) {
            match self.store.remove_heartbeat(w).await {
                Ok(()) => debug!(worker = %w, "long-dead worker's heartbeat removed"),
                Err(e) => warn!(worker = %w, error = %e, "removing a dead heartbeat failed"),
            }
        }
        let stable = live == self.last_live;
        let moves = assignments(&AssignInput {
            leases: &leases,
            observations: &self.obs,
            now,
            failover: cfg.failover_time,
            live: &live,
            dead: &dead,
            stable,
        });
        self.last_live = live;
        debug!(worker = %me, moves = moves.len(), stable, "assignment pass");
        let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
        let work: Vec<(Lease, String)> = moves
            .into_iter()
            .filter_map(|(k, to)| by_key.get(k.as_str()).map(|l| ((*l).clone(), to)))
            .collect();
        let results: Vec<_> = futures::stream::iter(work)
            .map(|(observed, to)| async move {
                if stream.shutdown.is_cancelled() {
                    return None;
                }
                let r = stream.table.acquire(&observed, &to).await;
                Some((observed, to, r))
            })
            .buffer_unordered(MAX_CONCURRENT_WRITES)
            .collect()
            .await;
        for (mut observed, to, r) in results.into_iter().flatten() {
            match r {
                Ok(Some(written)) if to == me => {
                    observed.owner = Some(to);
                    observed.checkpoint_owner = None;
                    reader::spawn(stream, observed, written);
                }
                Ok(Some(_)) => debug!(shard = %observed.key, to = %to, "lease assigned"),
                Ok(None) => debug!(shard = %observed.key, "assignment race lost"),
                Err(e) => warn!(shard = %observed.key, error = %e, "assignment failed"),
            }
        }
        // Leases in this worker's name it does not hold (a previous run).
        let mine: Vec<String> = leases
            .iter()
            .filter(|l| {
                l.owner.as_deref() == Some(me)
                    && !l.is_finished()
                    && !l.in_handoff()
                    && !stream.held.contains(&l.key)
            })
            .map(|l| l.key.clone())
            .collect();
        self.adopt(stream, mine).await;
        Ok(())
    }

    async fn follow(&mut self, stream: &Arc<StreamRun>) -> Result<(), ConsumerError> {
        // A follower's view goes stale: forget it, so that a later
        // leadership starts from fresh observations.
        self.obs = Observations::default();
        self.last_live.clear();
        let me = stream.config.worker_id.as_str();
        let keys = match stream.table.owned_by(me).await {
            Ok(k) => k,
            Err(e) => match listing_failed(e, &mut self.list_refusals) {
                Some(e) => return Err(e),
                None => return Ok(()),
            },
        };
        listing_answered(&mut self.list_refusals);
        let new: Vec<String> = keys
            .into_iter()
            .filter(|k| !stream.held.contains(k))
            .collect();
        self.adopt(stream, new).await;
        Ok(())
    }

    /// Starts reading leases assigned to this worker: a consistent read
    /// (counter, checkpoint, parents), then a renewal in its name, the
    /// fenced write its lease deadline starts from.
    async fn adopt(&self, stream: &Arc<StreamRun>, keys: Vec<String>) {
        let me = stream.config.worker_id.as_str();
        let results: Vec<_> = futures::stream::iter(keys)
            .map(|key| async move {
                if stream.shutdown.is_cancelled() {
                    return None;
                }
                let lease = match stream.table.get(&key).await {
                    // A KCL hand-off to this worker: not ours until taken.
                    Ok(Some(l))
                        if l.owner.as_deref() == Some(me)
                            && !l.is_finished()
                            && !l.in_handoff() =>
                    {
                        l
                    }
                    Ok(_) => return None,
                    Err(e) => {
                        warn!(shard = %key, error = %e, "reading an assigned lease failed");
                        return None;
                    }
                };
                // Parents first: the leader assigns a child only once its
                // parents are finished; a lease in this worker's name from
                // elsewhere waits until they are.
                let mut parents = Vec::new();
                for p in &lease.parents {
                    match stream.table.get(p).await {
                        Ok(Some(pl)) if !pl.is_finished() => return None,
                        Ok(Some(pl)) => parents.push(pl),
                        Ok(None) => {}
                        Err(_) => return None,
                    }
                }
                let r = stream.table.renew(&lease.key, me, lease.counter).await;
                Some((lease, parents, r))
            })
            .buffer_unordered(MAX_CONCURRENT_WRITES)
            .collect()
            .await;
        for (lease, parents, r) in results.into_iter().flatten() {
            match r {
                Ok(Some(written)) => {
                    if !parents.is_empty() {
                        // The reader checks its parents in the snapshot.
                        stream.snapshot.send_modify(|snap| {
                            let mut v: Vec<Lease> = snap
                                .iter()
                                .filter(|l| !parents.iter().any(|p| p.key == l.key))
                                .cloned()
                                .collect();
                            v.extend(parents);
                            *snap = Arc::new(v);
                        });
                    }
                    debug!(shard = %lease.key, "assigned lease adopted");
                    reader::spawn(stream, lease, written);
                }
                Ok(None) => debug!(shard = %lease.key, "assigned lease moved on meanwhile"),
                Err(e) => warn!(shard = %lease.key, error = %e, "adopting a lease failed"),
            }
        }
    }

    /// Shutdown: no more heartbeats (the leader stops assigning to this
    /// worker and leaves its leases to the readers' releases), and the
    /// lock released so another worker leads at its next pass.
    pub(crate) async fn stop(mut self, stream: &StreamRun) {
        self.beats_stop.cancel();
        let me = stream.config.worker_id.as_str();
        let attempt = stream.table.timing().attempt;
        if let Some((counter, _)) = self.lock.take() {
            match tokio::time::timeout(attempt, self.store.release_lock(me, counter)).await {
                Ok(Ok(())) => info!(worker = %me, "leader lock released"),
                Ok(Err(e)) => warn!(error = %e, "releasing the leader lock failed"),
                Err(_) => warn!("releasing the leader lock timed out"),
            }
        }
        match tokio::time::timeout(attempt, self.store.remove_heartbeat(me)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "removing the heartbeat failed"),
            Err(_) => warn!("removing the heartbeat timed out"),
        }
        drop(self.beats);
    }
}

/// Writes this worker's heartbeat every renewal interval (checking twice as
/// often), and fences every held lease once the last successful one is
/// `failover_time - margin` old: past `failover_time + max_clock_skew` the
/// leader hands them to others without waiting for their counters.
async fn heartbeat_loop(
    stream: Arc<StreamRun>,
    store: Arc<dyn LeaderStore>,
    (beat, refusals): (Arc<std::sync::Mutex<Option<Instant>>>, BeatRefusals),
    stop: CancellationToken,
) {
    let timing = *stream.table.timing();
    let me = stream.config.worker_id.clone();
    let mut tick = tokio::time::interval(stream.config.failover_time / 6);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let last = beat.lock().ok().and_then(|b| *b);
        if last.is_none_or(|t| t.elapsed() >= stream.config.failover_time / 3) {
            let sent = Instant::now();
            match tokio::time::timeout(timing.attempt, store.heartbeat(&me, store.now_ms())).await {
                Ok(Ok(())) => {
                    if let Ok(mut b) = beat.lock() {
                        *b = Some(sent);
                    }
                    if let Ok(mut r) = refusals.lock() {
                        *r = (0, None);
                    }
                }
                Ok(Err(e)) => {
                    warn!(error = %e, "heartbeat failed");
                    if matches!(e.class, ErrorClass::Fatal | ErrorClass::NotFound)
                        && let Ok(mut r) = refusals.lock()
                    {
                        *r = (r.0 + 1, Some(e));
                    }
                }
                Err(_) => warn!("heartbeat timed out"),
            }
        }
        let last = beat.lock().ok().and_then(|b| *b);
        let stale = last
            .is_some_and(|t| !matches!(timing.phase(t, Instant::now()), LeasePhase::Live { .. }));
        if stale {
            for l in stream.held.leases().iter().filter(|l| !l.is_gone()) {
                warn!(shard = %l.key, "heartbeat not written within the failover time; stopping the shard");
                l.fence(&stream.status);
            }
        }
    }
}

/// Workers by heartbeat.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Fleet {
    /// Fresh heartbeat (and this worker, always).
    pub(super) live: BTreeSet<String>,
    /// Heartbeat older than `failover + skew`: stopped reading.
    pub(super) dead: HashSet<String>,
    /// Dead for [`FORGET_AFTER_FAILOVERS`] failover times: heartbeat to delete.
    pub(super) forget: Vec<String>,
}

/// Sorts heartbeats on the leader's wall clock `now_ms`. Pure.
pub(super) fn sort_heartbeats(
    me: &str,
    beats: Vec<Heartbeat>,
    now_ms: u64,
    failover: Duration,
    skew: Duration,
) -> Fleet {
    let mut fleet = Fleet {
        live: BTreeSet::from([me.to_string()]),
        ..Fleet::default()
    };
    for b in beats {
        let age = Duration::from_millis(now_ms.saturating_sub(b.at_ms));
        if age < failover + skew {
            fleet.live.insert(b.worker);
        } else if b.worker != me {
            if age >= failover * FORGET_AFTER_FAILOVERS {
                fleet.forget.push(b.worker.clone());
            }
            fleet.dead.insert(b.worker);
        }
    }
    fleet
}

/// Inputs of the assignment law.
#[derive(Debug, Clone, Copy)]
pub(super) struct AssignInput<'a> {
    /// The whole table.
    pub(super) leases: &'a [Lease],
    /// The leader's counter observations.
    pub(super) observations: &'a Observations,
    /// Now.
    pub(super) now: Instant,
    /// Failover time.
    pub(super) failover: Duration,
    /// Workers with a fresh heartbeat (the leader included).
    pub(super) live: &'a BTreeSet<String>,
    /// Workers whose heartbeat is stale: they stopped reading.
    pub(super) dead: &'a HashSet<String>,
    /// The live set is the same as at the previous pass: only then are
    /// never-taken leases assigned and live leases moved, so a cold start
    /// or a deploy that is still adding workers does not move leases twice.
    pub(super) stable: bool,
}

/// The assignment law: (lease key, new owner) pairs. Free leases, leases of
/// dead workers, and leases whose counter stood still for a failover time go
/// to the least-loaded live worker (children only once their parents are
/// finished); then, with a stable live set, leases move one at a time from
/// the most to the least loaded worker until max − min ≤ 1. Pure.
pub(super) fn assignments(input: &AssignInput<'_>) -> Vec<(String, String)> {
    let AssignInput {
        leases,
        observations,
        now,
        failover,
        live,
        dead,
        stable,
    } = *input;
    let finished: HashSet<&str> = leases
        .iter()
        .filter(|l| l.is_finished())
        .map(|l| l.key.as_str())
        .collect();
    let known: HashSet<&str> = leases.iter().map(|l| l.key.as_str()).collect();
    let mut load: BTreeMap<&str, Vec<&Lease>> = live.iter().map(|w| (w.as_str(), vec![])).collect();
    let mut available = Vec::new();
    for l in leases.iter().filter(|l| !l.is_finished()) {
        let parents_done = l
            .parents
            .iter()
            .all(|p| finished.contains(p.as_str()) || !known.contains(p.as_str()));
        // During a KCL hand-off the `checkpointOwner` holds the lease.
        let free = match l.actual_owner() {
            Some(o) if dead.contains(o) => true,
            Some(_) if observations.is_expired(l, now, failover) => true,
            Some(o) => {
                // Owned by a worker without a heartbeat (not yet written, or
                // another mode) is left alone until it expires.
                if let Some(v) = load.get_mut(o) {
                    v.push(l);
                }
                false
            }
            None => true,
        };
        if free && parents_done {
            available.push(l);
        }
    }
    let mut out = Vec::new();
    if load.is_empty() {
        return out;
    }
    // Least loaded first; ties by id, so the plan is deterministic.
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(usize, &str)>> = load
        .iter()
        .map(|(w, v)| std::cmp::Reverse((v.len(), *w)))
        .collect();
    available.sort_by(|a, b| a.key.cmp(&b.key));
    for l in available {
        // Never taken (a cold start, new children): only with a stable set.
        if l.counter == 0 && !stable {
            continue;
        }
        let Some(std::cmp::Reverse((n, w))) = heap.pop() else {
            break;
        };
        out.push((l.key.clone(), w.to_string()));
        if let Some(v) = load.get_mut(w) {
            v.push(l);
        }
        heap.push(std::cmp::Reverse((n + 1, w)));
    }
    if !stable {
        return out;
    }
    // Balance: most loaded gives its last lease to the least loaded.
    let moved: HashSet<String> = out.iter().map(|(k, _)| k.clone()).collect();
    while let (Some((max_w, max_n)), Some((min_w, min_n))) = (
        load.iter()
            .map(|(w, v)| (*w, v.len()))
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0))),
        load.iter()
            .map(|(w, v)| (*w, v.len()))
            .min_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(b.0))),
    ) {
        if max_n <= min_n + 1 {
            break;
        }
        let Some(pos) = load.get(max_w).and_then(|v| {
            v.iter()
                .rposition(|l| !moved.contains(&l.key) && !l.in_handoff())
        }) else {
            break;
        };
        let Some(l) = load.get_mut(max_w).map(|v| v.remove(pos)) else {
            break;
        };
        out.push((l.key.clone(), min_w.to_string()));
        if let Some(v) = load.get_mut(min_w) {
            v.push(l);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinesis::lease::item::Checkpoint;

    fn lease(key: &str, owner: Option<&str>, counter: u64) -> Lease {
        Lease {
            owner: owner.map(Into::into),
            counter,
            ..Lease::new(key, Checkpoint::TrimHorizon, vec![])
        }
    }

    /// Inputs at now, failover 10 s.
    fn input<'a>(
        leases: &'a [Lease],
        observations: &'a Observations,
        live: &'a BTreeSet<String>,
        dead: &'a HashSet<String>,
        stable: bool,
    ) -> AssignInput<'a> {
        AssignInput {
            leases,
            observations,
            now: Instant::now(),
            failover: Duration::from_secs(10),
            live,
            dead,
            stable,
        }
    }

    fn set(ws: &[&str]) -> BTreeSet<String> {
        ws.iter().map(|w| w.to_string()).collect()
    }

    fn counts(leases: &[Lease], moves: &[(String, String)]) -> BTreeMap<String, usize> {
        let mut owner: HashMap<String, Option<String>> = leases
            .iter()
            .map(|l| (l.key.clone(), l.owner.clone()))
            .collect();
        for (k, w) in moves {
            owner.insert(k.clone(), Some(w.clone()));
        }
        let mut c = BTreeMap::new();
        for o in owner.into_values().flatten() {
            *c.entry(o).or_default() += 1;
        }
        c
    }

    #[test]
    fn heartbeats_sort_into_live_dead_and_forgotten_with_the_skew_margin() {
        let fo = Duration::from_secs(10);
        let skew = Duration::from_secs(2);
        let now = 1_000_000_000;
        let beat = |w: &str, age_ms: u64| Heartbeat {
            worker: w.into(),
            at_ms: now - age_ms,
        };
        let f = sort_heartbeats(
            "me",
            vec![
                beat("fresh", 1_000),
                // Past the failover time but within the skew margin: live.
                beat("skewed", 11_999),
                beat("dead", 12_000),
                beat("gone", 300_000),
                // This worker's own stale heartbeat never makes it dead.
                beat("me", 50_000),
            ],
            now,
            fo,
            skew,
        );
        assert_eq!(f.live, set(&["fresh", "me", "skewed"]));
        assert_eq!(f.dead, HashSet::from(["dead".into(), "gone".into()]));
        assert_eq!(f.forget, vec!["gone".to_string()]);
    }

    #[tokio::test(start_paused = true)]
    async fn cold_start_waits_for_a_stable_set_then_spreads_evenly() {
        let leases: Vec<Lease> = (0..10).map(|i| lease(&format!("s{i}"), None, 0)).collect();
        let obs = Observations::default();
        let live = set(&["a", "b", "c"]);
        let none = HashSet::new();
        let mut input = input(&leases, &obs, &live, &none, false);
        assert!(assignments(&input).is_empty(), "never-taken leases wait");
        input.stable = true;
        let moves = assignments(&input);
        assert_eq!(moves.len(), 10);
        let c = counts(&leases, &moves);
        assert_eq!(c.values().copied().collect::<Vec<_>>(), vec![4, 3, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn dead_workers_leases_go_at_once_live_ones_only_when_expired() {
        let mut leases: Vec<Lease> = (0..4)
            .map(|i| lease(&format!("d{i}"), Some("dead"), 5))
            .collect();
        leases.extend((0..4).map(|i| lease(&format!("q{i}"), Some("quiet"), 5)));
        leases.extend((0..4).map(|i| lease(&format!("a{i}"), Some("a"), 5)));
        let t0 = Instant::now();
        let mut obs = Observations::default();
        obs.observe(&leases, t0);
        let live = set(&["a", "b"]);
        let dead = HashSet::from(["dead".to_string()]);
        let input = AssignInput {
            now: t0 + Duration::from_secs(1),
            ..input(&leases, &obs, &live, &dead, false)
        };
        let moves = assignments(&input);
        // The dead worker's 4 at once, all to b (a holds 4); "quiet" has no
        // heartbeat and its counters have not stood still long enough.
        assert_eq!(moves.len(), 4);
        assert!(moves.iter().all(|(k, w)| k.starts_with('d') && w == "b"));
        let later = AssignInput {
            now: t0 + Duration::from_secs(10),
            stable: true,
            ..input
        };
        let moves = assignments(&later);
        let c = counts(&leases, &moves);
        assert_eq!(
            c.get("a").copied().unwrap_or(0) + c.get("b").copied().unwrap_or(0),
            12
        );
        assert!(
            c.get("a").unwrap().abs_diff(*c.get("b").unwrap()) <= 1,
            "{c:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_join_moves_only_what_balancing_needs_and_children_wait_for_parents() {
        let mut leases: Vec<Lease> = (0..9)
            .map(|i| lease(&format!("a{i}"), Some("a"), 3))
            .collect();
        leases.extend((0..9).map(|i| lease(&format!("b{i}"), Some("b"), 3)));
        let mut child = lease("child", None, 0);
        child.parents = vec!["a0".into()];
        leases.push(child);
        let obs = Observations::default();
        let live = set(&["a", "b", "c"]);
        let none = HashSet::new();
        let input = input(&leases, &obs, &live, &none, true);
        let moves = assignments(&input);
        assert_eq!(moves.len(), 6, "{moves:?}");
        assert!(moves.iter().all(|(k, w)| w == "c" && k != "child"));
        let keys: HashSet<_> = moves.iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), moves.len(), "no lease moves twice");
        // The same table once balanced: nothing to do.
        let mut after = leases.clone();
        for (k, w) in &moves {
            if let Some(l) = after.iter_mut().find(|l| &l.key == k) {
                l.owner = Some(w.clone());
            }
        }
        let again = AssignInput {
            leases: &after,
            ..input
        };
        assert!(assignments(&again).is_empty());
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::*;
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::query::QueryError;
    use aws_sdk_dynamodb::operation::scan::ScanError;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use aws_smithy_types::error::ErrorMetadata;
    use futures::future::BoxFuture;

    use crate::kinesis::config::KinesisConfig;
    use crate::kinesis::lease::leader_store::LeaderLock;
    use crate::kinesis::lease::table::LeaseTable;
    use crate::kinesis::lease::timing::LeaseTiming;
    use crate::kinesis::run::RunParts;
    use crate::kinesis::shard::unused_kinesis;

    /// A coordinator table that refuses every call (the role lost its
    /// DynamoDB permissions).
    #[derive(Debug)]
    struct Refusing;

    fn denied(op: &'static str) -> AwsError {
        AwsError {
            op,
            class: ErrorClass::Fatal,
            message: "AccessDeniedException: not authorized".into(),
        }
    }

    impl LeaderStore for Refusing {
        fn ensure(&self, _: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
            Box::pin(async { Err(denied("DescribeTable").into()) })
        }
        fn now_ms(&self) -> u64 {
            0
        }
        fn heartbeat<'a>(&'a self, _: &'a str, _: u64) -> BoxFuture<'a, Result<(), AwsError>> {
            Box::pin(async { Err(denied("PutItem")) })
        }
        fn remove_heartbeat<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), AwsError>> {
            Box::pin(async { Err(denied("DeleteItem")) })
        }
        fn heartbeats(&self) -> BoxFuture<'_, Result<Vec<Heartbeat>, AwsError>> {
            Box::pin(async { Err(denied("Scan")) })
        }
        fn lock(&self) -> BoxFuture<'_, Result<Option<LeaderLock>, AwsError>> {
            Box::pin(async { Err(denied("GetItem")) })
        }
        fn write_lock<'a>(
            &'a self,
            _: &'a str,
            _: Option<u64>,
            _: u64,
        ) -> BoxFuture<'a, Result<(), AwsError>> {
            Box::pin(async { Err(denied("PutItem")) })
        }
        fn release_lock<'a>(&'a self, _: &'a str, _: u64) -> BoxFuture<'a, Result<(), AwsError>> {
            Box::pin(async { Err(denied("DeleteItem")) })
        }
    }

    /// Leader mode with every DynamoDB call refused: the heartbeat fails,
    /// so the worker never counts as alive, and it used to skip listing the
    /// lease table at every pass: it held nothing, did nothing and looked
    /// healthy for ever. The refusal stops the source within
    /// `REFUSED_LISTINGS` passes, as in listing mode.
    #[tokio::test(start_paused = true)]
    async fn a_refused_lease_table_stops_leader_mode_without_a_heartbeat() {
        let denied_meta = || {
            ErrorMetadata::builder()
                .code("AccessDeniedException")
                .message("not authorized")
                .build()
        };
        let query = mock!(Client::query).then_error(move || QueryError::generic(denied_meta()));
        let scan = mock!(Client::scan).then_error(move || {
            ScanError::generic(
                ErrorMetadata::builder()
                    .code("AccessDeniedException")
                    .build(),
            )
        });
        let ddb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&query, &scan]);
        let (pass, e) = passes_until_stopped(ddb).await;
        assert!(
            pass <= crate::kinesis::listing::REFUSED_LISTINGS + 1,
            "stopped only at pass {pass}"
        );
        assert!(e.to_string().contains("AccessDenied"), "{e}");
    }

    /// The lease table answers but the coordinator table refuses every
    /// heartbeat for good: the worker can never take part, so the source
    /// stops with the heartbeat's error.
    #[tokio::test(start_paused = true)]
    async fn a_refused_heartbeat_stops_leader_mode() {
        use aws_sdk_dynamodb::operation::query::QueryOutput;
        let query = mock!(Client::query).then_output(|| QueryOutput::builder().build());
        let ddb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&query]);
        let (pass, e) = passes_until_stopped(ddb).await;
        assert!(pass <= 6, "stopped only at pass {pass}");
        assert!(e.to_string().contains("PutItem"), "{e}");
    }

    /// Passes of an assigner over the lease table `ddb` and the refusing
    /// coordinator table until the source stops (at most 10): the pass
    /// that stopped it and the error.
    async fn passes_until_stopped(ddb: Client) -> (u32, ConsumerError) {
        let failover = Duration::from_secs(10);
        let mut config = KinesisConfig::new("s", "t", "me");
        config.failover_time = failover;
        let (sink, _pipeline) = tokio::sync::mpsc::channel(1);
        let store: Arc<dyn LeaderStore> = Arc::new(Refusing);
        let stream = Arc::new(StreamRun::new(RunParts {
            table: LeaseTable::with_timing(ddb, "t", LeaseTiming::new(failover)),
            config,
            kinesis: unused_kinesis(),
            status: Default::default(),
            sink,
            shutdown: Default::default(),
            governors: None,
            consumer_arn: None,
            leader_store: Some(store.clone()),
        }));
        let mut assigner = Assigner::start(&stream, store);
        let mut stopped = None;
        for pass in 1..=10u32 {
            match assigner.pass(&stream).await {
                Ok(wake) => tokio::time::sleep_until(wake).await,
                Err(e) => {
                    stopped = Some((pass, e));
                    break;
                }
            }
        }
        assigner.stop(&stream).await;
        stopped.expect("the source stops on a refusal for good")
    }
}
