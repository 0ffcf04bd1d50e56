//! Deleting finished leases, as the KCL's `LeaseCleanupManager` does, so a
//! stream that reshards often does not grow its lease table for ever; and
//! keeping shard discovery from re-creating the leases it deleted.
//!
//! Rules (pure: [`finished_to_delete`], [`Garbage`], [`done_ancestors`]):
//! - **Finished.** A lease at `SHARD_END` is deleted once every child lease
//!   exists and has started (its checkpoint is a sequence number or
//!   `SHARD_END`, not `TRIM_HORIZON` / `LATEST` / `AT_TIMESTAMP`), and none
//!   of its own parents' leases is left (parents go first, as the KCL's
//!   `allParentShardLeasesDeleted`, so no lease is orphaned above a deleted
//!   one). A child that has never received a record keeps its parent's
//!   lease, as in the KCL.
//! - **Garbage.** A lease whose shard no longer exists (past the stream's
//!   retention) is deleted only when sure: absent from [`GARBAGE_LISTINGS`]
//!   complete ListShards in a row spanning at least [`GARBAGE_AFTER`], while
//!   the listing holds at least one leased shard (so this table is this
//!   stream's), the lease is free or expired, and its key is a plain shard
//!   id.
//! - **Discovery.** A listed shard without a lease but with a leased
//!   descendant was finished and its lease deleted (Tidemark creates leases
//!   parents first, and deletes them only after their children started;
//!   a KCL table has no leases for such shards either): no lease is
//!   created for it, so nothing is read twice after a restart.
//!
//! Safety: every delete is conditional on the `leaseCounter` and
//! `checkpoint` seen in a strongly consistent listing taken just before
//! ([`LeaseTable::delete`](crate::kinesis::lease::table::LeaseTable::delete)); at most
//! [`MAX_DELETES_PER_PASS`] per pass, one pass per `shard_sync_interval`, on
//! the shard-sync leader only. Each deletion is logged and counted
//! (`tidemark_consumer_lease_changes_total`, `kind` = `deleted_finished` /
//! `deleted_garbage`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_kinesis::types::Shard;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::kinesis::api::list_shards;
use crate::kinesis::config::LeaseAssignment;
use crate::kinesis::lease::balance::{Observations, is_sync_leader};
use crate::kinesis::lease::item::{Checkpoint, Lease};
use crate::kinesis::run::StreamRun;
use crate::metrics::kinesis as metric;

/// Most lease deletions in one pass (one write unit each).
pub(super) const MAX_DELETES_PER_PASS: usize = 25;

/// Complete shard listings in a row a lease's shard must be missing from
/// before the lease counts as garbage.
pub(super) const GARBAGE_LISTINGS: u32 = 3;

/// How long a lease's shard must be missing from the listings before the
/// lease counts as garbage (a shard leaves the listing only past the
/// stream's retention, at least 24 hours after it closed).
pub(super) const GARBAGE_AFTER: Duration = Duration::from_secs(600);

/// Why a lease is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    /// At `SHARD_END`, every child started.
    Finished,
    /// Its shard no longer exists.
    Garbage,
}

impl Reason {
    fn kind(self) -> &'static str {
        match self {
            Self::Finished => "deleted_finished",
            Self::Garbage => "deleted_garbage",
        }
    }
}

/// True when a lease's reading has begun: a child whose checkpoint is still
/// a start position may not have read anything yet.
fn started(l: &Lease) -> bool {
    matches!(l.checkpoint, Checkpoint::At(_) | Checkpoint::ShardEnd)
}

/// The child shard ids of `lease`: those written at its shard end, and any
/// lease naming it as parent (a lease marked `SHARD_END` without being read,
/// on a fresh table at `LATEST`, has no `childShardIds`).
fn children<'a>(lease: &'a Lease, leases: &'a [Lease]) -> HashSet<&'a str> {
    let mut kids: HashSet<&str> = lease.children.iter().map(String::as_str).collect();
    kids.extend(
        leases
            .iter()
            .filter(|l| l.parents.contains(&lease.key))
            .map(|l| l.key.as_str()),
    );
    kids
}

/// The finished leases of `leases` (a complete listing) that may be deleted.
pub(super) fn finished_to_delete(leases: &[Lease]) -> Vec<&Lease> {
    let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
    leases
        .iter()
        .filter(|l| l.is_finished())
        .filter(|l| l.parents.iter().all(|p| !by_key.contains_key(p.as_str())))
        .filter(|l| {
            let kids = children(l, leases);
            !kids.is_empty()
                && kids
                    .iter()
                    .all(|k| by_key.get(k).is_some_and(|c| started(c)))
        })
        .collect()
}

/// Listed shards that have no lease but a leased descendant: finished, their
/// lease deleted; discovery creates no lease for them.
pub(super) fn done_ancestors(shards: &[Shard], existing: &[Lease]) -> HashSet<String> {
    let mut parents: HashMap<&str, Vec<&str>> = HashMap::new();
    for s in shards {
        parents.insert(
            s.shard_id(),
            [s.parent_shard_id(), s.adjacent_parent_shard_id()]
                .into_iter()
                .flatten()
                .collect(),
        );
    }
    for l in existing {
        parents
            .entry(l.key.as_str())
            .or_default()
            .extend(l.parents.iter().map(String::as_str));
    }
    let leased: HashSet<&str> = existing.iter().map(|l| l.key.as_str()).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut todo: Vec<&str> = leased.iter().copied().collect();
    while let Some(k) = todo.pop() {
        for p in parents.get(k).into_iter().flatten() {
            if seen.insert(p) {
                todo.push(p);
            }
        }
    }
    seen.into_iter()
        .filter(|k| !leased.contains(k))
        .map(str::to_string)
        .collect()
}

/// Which leases' shards have been missing from the listings, since when and
/// how many listings in a row.
#[derive(Debug, Default)]
pub(super) struct Garbage {
    missing: HashMap<String, (u32, Instant)>,
}

impl Garbage {
    /// Records one complete listing of the stream's shards at `now`.
    /// Listings that share no shard with the table are not counted (the
    /// table would not be this stream's).
    pub(super) fn observe(&mut self, listed: &HashSet<String>, leases: &[Lease], now: Instant) {
        if !leases.iter().any(|l| listed.contains(&l.key)) {
            return;
        }
        let absent: HashSet<&str> = leases
            .iter()
            .map(|l| l.key.as_str())
            // Multi-stream keys (`account:stream:epoch:shard`) are not
            // this listing's to judge.
            .filter(|k| !k.contains(':') && !listed.contains(*k))
            .collect();
        self.missing.retain(|k, _| absent.contains(k.as_str()));
        for k in absent {
            self.missing
                .entry(k.to_string())
                .and_modify(|(n, _)| *n += 1)
                .or_insert((1, now));
        }
    }

    /// The leases of `leases` that are garbage at `now`: missing long
    /// enough, and free or expired in `obs`.
    pub(super) fn to_delete<'a>(
        &self,
        leases: &'a [Lease],
        obs: &Observations,
        now: Instant,
        failover: Duration,
    ) -> Vec<&'a Lease> {
        leases
            .iter()
            .filter(|l| {
                self.missing.get(&l.key).is_some_and(|(n, since)| {
                    *n >= GARBAGE_LISTINGS && now.saturating_duration_since(*since) >= GARBAGE_AFTER
                })
            })
            .filter(|l| obs.is_expired(l, now, failover))
            .collect()
    }
}

/// The cleanup task: one pass per `shard_sync_interval` until `stop`.
pub(crate) async fn run(stream: Arc<StreamRun>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(stream.config.shard_sync_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut obs = Observations::default();
    let mut garbage = Garbage::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = stream.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        pass(&stream, &mut obs, &mut garbage).await;
    }
}

/// One pass: on the sync leader, list shards (garbage), and when the latest
/// lease snapshot shows candidates, confirm them on a consistent listing
/// and delete them.
async fn pass(stream: &StreamRun, obs: &mut Observations, garbage: &mut Garbage) {
    let cfg = &stream.config;
    let snapshot = stream.snapshot.borrow().clone();
    if snapshot.is_empty() {
        return;
    }
    let now = Instant::now();
    obs.observe(&snapshot, now);
    // In leader mode only the lock holder sees the whole table; elsewhere
    // the KCL's deterministic shard-sync leader.
    let leader = match cfg.lease_assignment {
        LeaseAssignment::Leader => stream.leading.load(std::sync::atomic::Ordering::Relaxed),
        LeaseAssignment::Listing => {
            is_sync_leader(&cfg.worker_id, &snapshot, obs, now, cfg.failover_time)
        }
    };
    if !leader {
        return;
    }
    match list_shards(&stream.kinesis, &stream.config).await {
        Ok(shards) => {
            let listed: HashSet<String> = shards.iter().map(|s| s.shard_id().to_string()).collect();
            garbage.observe(&listed, &snapshot, now);
        }
        // Not counted: absences must come from listings in a row.
        Err(e) => debug!(error = %e, "lease cleanup: ListShards failed"),
    }
    let any = !finished_to_delete(&snapshot).is_empty()
        || !garbage
            .to_delete(&snapshot, obs, now, cfg.failover_time)
            .is_empty();
    if !any {
        return;
    }
    // Decided on a strongly consistent listing, not the pass's snapshot
    // (which may be eventually consistent).
    let leases = match stream.table.list().await {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "lease cleanup: listing leases failed");
            return;
        }
    };
    let now = Instant::now();
    obs.observe(&leases, now);
    let doomed: Vec<(&Lease, Reason)> = finished_to_delete(&leases)
        .into_iter()
        .map(|l| (l, Reason::Finished))
        .chain(
            garbage
                .to_delete(&leases, obs, now, cfg.failover_time)
                .into_iter()
                .map(|l| (l, Reason::Garbage)),
        )
        .take(MAX_DELETES_PER_PASS)
        .collect();
    for (lease, reason) in doomed {
        if stream.shutdown.is_cancelled() {
            return;
        }
        match stream.table.delete(lease).await {
            Ok(true) => {
                info!(shard = %lease.key, ?reason, children = ?lease.children, checkpoint = ?lease.checkpoint, "lease deleted");
                metrics::counter!(metric::LEASE_CHANGES, "kind" => reason.kind()).increment(1);
            }
            Ok(false) => debug!(shard = %lease.key, "lease changed since listed; not deleted"),
            Err(e) => {
                warn!(shard = %lease.key, error = %e, "lease delete failed; next pass retries")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinesis::checkpoint::Position;

    fn lease(key: &str, cp: Checkpoint, parents: &[&str], children: &[&str]) -> Lease {
        let mut l = Lease::new(key, cp, parents.iter().map(|p| p.to_string()).collect());
        l.children = children.iter().map(|c| c.to_string()).collect();
        l
    }

    fn at(seq: &str) -> Checkpoint {
        Checkpoint::At(Position::new(seq, 0))
    }

    fn keys(v: Vec<&Lease>) -> Vec<&str> {
        let mut k: Vec<&str> = v.into_iter().map(|l| l.key.as_str()).collect();
        k.sort_unstable();
        k
    }

    /// Split 0 -> 3, 4; merge 1 + 2 -> 5.
    #[test]
    fn a_finished_lease_goes_once_every_child_started_parents_first() {
        use Checkpoint::{ShardEnd, TrimHorizon};
        let table = |c3: Checkpoint, c4: Checkpoint, c5: Checkpoint| {
            vec![
                lease("s0", ShardEnd, &[], &["s3", "s4"]),
                lease("s1", ShardEnd, &[], &["s5"]),
                lease("s2", ShardEnd, &[], &["s5"]),
                lease("s3", c3, &["s0"], &[]),
                lease("s4", c4, &["s0"], &[]),
                lease("s5", c5, &["s1", "s2"], &[]),
            ]
        };
        // No child started: nothing goes.
        let t = table(TrimHorizon, TrimHorizon, TrimHorizon);
        assert!(finished_to_delete(&t).is_empty());
        // One of two split children started: the parent stays.
        let t = table(at("7"), TrimHorizon, at("9"));
        assert_eq!(keys(finished_to_delete(&t)), ["s1", "s2"]);
        // LATEST / AT_TIMESTAMP are start positions, not progress.
        let t = table(at("7"), Checkpoint::Latest, Checkpoint::AtTimestamp);
        assert!(finished_to_delete(&t).is_empty());
        // Every child started (one even finished).
        let t = table(at("7"), ShardEnd, at("9"));
        assert_eq!(keys(finished_to_delete(&t)), ["s0", "s1", "s2"]);
        // An unfinished lease is never deleted, whatever its children.
        let mut t = table(at("7"), at("8"), at("9"));
        t[0].checkpoint = at("5");
        assert_eq!(keys(finished_to_delete(&t)), ["s1", "s2"]);
        // A missing child lease keeps the parent (it may not be created yet).
        let t: Vec<Lease> = table(at("7"), at("8"), at("9"))
            .into_iter()
            .filter(|l| l.key != "s4")
            .collect();
        assert_eq!(keys(finished_to_delete(&t)), ["s1", "s2"]);
        // A finished child goes only after its parents: s3 is done and its
        // child started, but s0 is still there.
        let mut t = table(ShardEnd, at("8"), at("9"));
        t[3].children = vec!["s6".into()];
        t.push(lease("s6", at("1"), &["s3"], &[]));
        assert_eq!(keys(finished_to_delete(&t)), ["s0", "s1", "s2"]);
        let t: Vec<Lease> = t.into_iter().filter(|l| l.key != "s0").collect();
        assert_eq!(keys(finished_to_delete(&t)), ["s1", "s2", "s3"]);
        // No children known (closed shard marked SHARD_END at LATEST, no
        // lease names it as parent): kept.
        let t = vec![lease("s9", ShardEnd, &[], &[])];
        assert!(finished_to_delete(&t).is_empty());
        // Children found through their parentShardId when childShardIds is
        // absent.
        let t = vec![
            lease("s9", ShardEnd, &[], &[]),
            lease("s10", at("3"), &["s9"], &[]),
        ];
        assert_eq!(keys(finished_to_delete(&t)), ["s9"]);
    }

    fn shard(id: &str, parents: &[&str]) -> Shard {
        Shard::builder()
            .shard_id(id)
            .set_parent_shard_id(parents.first().map(|p| p.to_string()))
            .set_adjacent_parent_shard_id(parents.get(1).map(|p| p.to_string()))
            .build()
            .unwrap()
    }

    #[test]
    fn discovery_skips_shards_whose_leases_were_deleted() {
        use Checkpoint::TrimHorizon;
        let shards = vec![
            shard("s0", &[]),
            shard("s1", &[]),
            shard("s2", &[]),
            shard("s3", &["s0"]),
            shard("s4", &["s0"]),
            shard("s5", &["s1", "s2"]),
            shard("s6", &["s5"]),
            shard("s7", &[]),
        ];
        // s0..s2 deleted after their children started; s5 split into s6
        // (lease created), s7 a shard with no lease and no leased
        // descendant (new).
        let leases = vec![
            lease("s3", at("1"), &["s0"], &[]),
            lease("s4", at("1"), &["s0"], &[]),
            lease("s5", at("1"), &["s1", "s2"], &[]),
            lease("s6", TrimHorizon, &["s5"], &[]),
        ];
        let mut done: Vec<String> = done_ancestors(&shards, &leases).into_iter().collect();
        done.sort();
        assert_eq!(done, ["s0", "s1", "s2"]);
        // The lineage in the lease items alone is enough (parents no
        // longer listed, or listed without their parent ids).
        let bare: Vec<Shard> = shards.iter().map(|s| shard(s.shard_id(), &[])).collect();
        let mut done: Vec<String> = done_ancestors(&bare, &leases).into_iter().collect();
        done.sort();
        assert_eq!(done, ["s0", "s1", "s2"]);
        // Empty table: nothing is done.
        assert!(done_ancestors(&shards, &[]).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn garbage_only_after_listings_in_a_row_long_enough_and_expired() {
        let fo = Duration::from_secs(10);
        let mut gone = lease("s0", at("5"), &[], &[]);
        gone.owner = Some("dead".into());
        let leases = vec![gone, lease("s1", at("1"), &[], &[])];
        let listed: HashSet<String> = ["s1".to_string()].into();
        let mut g = Garbage::default();
        let mut obs = Observations::default();
        let every = Duration::from_secs(300);
        for i in 0..GARBAGE_LISTINGS {
            let now = Instant::now();
            obs.observe(&leases, now);
            g.observe(&listed, &leases, now);
            let doomed = g.to_delete(&leases, &obs, now, fo);
            if i + 1 < GARBAGE_LISTINGS {
                assert!(doomed.is_empty(), "after {} listings", i + 1);
            } else {
                assert_eq!(keys(doomed), ["s0"]);
            }
            tokio::time::advance(every).await;
        }
        // Seen again in one listing: the count starts over.
        let now = Instant::now();
        let both: HashSet<String> = ["s0".to_string(), "s1".to_string()].into();
        g.observe(&both, &leases, now);
        g.observe(&listed, &leases, now);
        assert!(g.to_delete(&leases, &obs, now, fo).is_empty());
        // Many listings in quick succession are not enough.
        let mut g = Garbage::default();
        for _ in 0..10 {
            g.observe(&listed, &leases, Instant::now());
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        assert!(g.to_delete(&leases, &obs, Instant::now(), fo).is_empty());
        // A live owner (counter moving) keeps it.
        let mut g = Garbage::default();
        let mut live = leases.clone();
        for _ in 0..GARBAGE_LISTINGS {
            live[0].counter += 1;
            obs.observe(&live, Instant::now());
            g.observe(&listed, &live, Instant::now());
            tokio::time::advance(every).await;
        }
        live[0].counter += 1;
        obs.observe(&live, Instant::now());
        assert!(g.to_delete(&live, &obs, Instant::now(), fo).is_empty());
        // A listing sharing no shard with the table (another stream's
        // table?) counts for nothing; nor do multi-stream keys.
        let mut g = Garbage::default();
        let other: HashSet<String> = ["x".to_string()].into();
        let multi = vec![
            lease("111:events:1:s0", at("1"), &[], &[]),
            lease("s1", at("1"), &[], &[]),
        ];
        for _ in 0..GARBAGE_LISTINGS + 1 {
            g.observe(&other, &leases, Instant::now());
            g.observe(&listed, &multi, Instant::now());
            tokio::time::advance(every).await;
        }
        obs.observe(&multi, Instant::now());
        tokio::time::advance(fo).await;
        assert!(g.to_delete(&leases, &obs, Instant::now(), fo).is_empty());
        assert!(g.to_delete(&multi, &obs, Instant::now(), fo).is_empty());
    }
}
