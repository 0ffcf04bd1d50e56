//! `lease_assignment = "listing"`: every worker lists the lease table and
//! takes or steals its share itself (the KCL 2.x protocol). The peer of
//! leader mode's `Assigner` (`assign`): the balancing loop runs one pass of
//! either.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::error::{ConsumerError, ErrorClass};
use crate::kinesis::discovery::{sync_failed, sync_shards};
use crate::kinesis::lease::balance::{
    BalanceInput, Observations, is_sync_leader, live_workers, takes_and_steals,
};
use crate::kinesis::reader;
use crate::kinesis::run::StreamRun;
use crate::metrics::kinesis as metric;

/// Fleets of at most this many workers never settle: each lists at the
/// renewal cadence, which costs at most about 0.4 RCU/s per 10 shards
/// (eventually consistent, 258-byte leases, 10 s failover; within the
/// read target), and so takes a released lease within a third of the
/// failover time. Larger fleets settle, and take a released lease within
/// one failover time.
const SMALL_FLEET: usize = 4;

/// Consecutive listings the lease table refuses for good (access denied,
/// a deleted table, a KMS key the role cannot use) before the source stops
/// with the error: three passes, one failover time. Such a worker renews
/// nothing and holds nothing; retrying it for ever would look healthy to
/// the orchestrator while doing no work.
pub(crate) const REFUSED_LISTINGS: u32 = 3;

/// A failed listing of the lease table: the error when it is the
/// [`REFUSED_LISTINGS`]th refusal for good in a row (the source stops with
/// it), else `None` (logged; the next pass tries again). A failure that
/// passes (throttling, a timeout) resets nothing and counts nothing.
pub(crate) fn listing_failed(e: ConsumerError, refusals: &mut u32) -> Option<ConsumerError> {
    metrics::gauge!(metric::LEASE_LISTING_FAILING).set(1.0);
    let refused = matches!(&e, ConsumerError::Aws(a) if matches!(a.class, ErrorClass::NotFound | ErrorClass::Fatal));
    if !refused {
        warn!(error = %e, "listing leases failed");
        return None;
    }
    *refusals += 1;
    if *refusals >= REFUSED_LISTINGS {
        error!(error = %e, refusals = *refusals, "the lease table refuses this worker; stopping");
        return Some(e);
    }
    warn!(error = %e, refusals = *refusals, "listing leases refused; the source stops if it persists");
    None
}

/// A read of the lease table succeeded (see [`listing_failed`]).
pub(crate) fn listing_answered(refusals: &mut u32) {
    *refusals = 0;
    metrics::gauge!(metric::LEASE_LISTING_FAILING).set(0.0);
}

/// Listing-mode state of one worker.
#[derive(Debug)]
pub(crate) struct ListingBalancer {
    obs: Observations,
    next_sync: Instant,
    sync_failures: u32,
    /// Consecutive listings refused for good ([`listing_failed`]).
    list_refusals: u32,
    passes: u64,
    /// A reader saw a shard end: sync on this worker, leader or not.
    sync_asked: bool,
    /// The previous pass planned a steal.
    steal_armed: bool,
}

impl ListingBalancer {
    pub(crate) fn new() -> Self {
        Self {
            obs: Observations::default(),
            next_sync: Instant::now(),
            sync_failures: 0,
            list_refusals: 0,
            passes: 0,
            sync_asked: false,
            steal_armed: false,
        }
    }

    /// A reader saw a shard end on this worker: discover shards now.
    pub(crate) fn sync_asked(&mut self) {
        self.next_sync = Instant::now();
        self.sync_asked = true;
    }

    /// One pass: shard discovery when due, a listing, the balancing law,
    /// and the takes and steals it plans. Returns when the next pass is due.
    pub(crate) async fn pass(&mut self, stream: &Arc<StreamRun>) -> Result<Instant, ConsumerError> {
        let cfg = &stream.config;
        let tick = cfg.failover_time / 3;
        let tuning = cfg.lease_tuning;
        let pass_start = Instant::now();
        let mut wake = pass_start + tick;
        self.passes += 1;
        if !tuning.leader_shard_sync && Instant::now() >= self.next_sync {
            match sync_shards(stream, None).await {
                Ok(_) => {
                    self.sync_failures = 0;
                    self.next_sync = Instant::now() + cfg.shard_sync_interval;
                }
                Err(e) => {
                    if let Some(e) = sync_failed(e, stream.held.is_empty(), &mut self.sync_failures)
                    {
                        return Err(e);
                    }
                    self.next_sync = Instant::now() + tick;
                }
            }
        }
        let mut listed = stream.table.list_with(!tuning.eventual_listing).await;
        // Tuned shard sync: on the leader (or when a shard ended here, or
        // on an empty table), with this pass's listing.
        if tuning.leader_shard_sync
            && Instant::now() >= self.next_sync
            && let Ok(leases) = &listed
        {
            let now = Instant::now();
            self.obs.observe(leases, now);
            let leader = is_sync_leader(&cfg.worker_id, leases, &self.obs, now, cfg.failover_time);
            if self.sync_asked || leases.is_empty() || leader {
                match sync_shards(stream, Some(leases)).await {
                    Ok(created) => {
                        self.sync_failures = 0;
                        self.sync_asked = false;
                        self.next_sync = Instant::now() + cfg.shard_sync_interval;
                        if created > 0 {
                            listed = stream.table.list_with(!tuning.eventual_listing).await;
                        }
                    }
                    Err(e) => {
                        let holds_none = stream.held.is_empty();
                        if let Some(e) = sync_failed(e, holds_none, &mut self.sync_failures) {
                            return Err(e);
                        }
                        self.next_sync = Instant::now() + tick;
                    }
                }
            } else {
                self.next_sync = Instant::now() + cfg.shard_sync_interval;
            }
        }
        let leases = match listed {
            Ok(leases) => leases,
            Err(e) => match listing_failed(e, &mut self.list_refusals) {
                Some(e) => return Err(e),
                None => return Ok(wake),
            },
        };
        listing_answered(&mut self.list_refusals);
        let now = Instant::now();
        self.obs.observe(&leases, now);
        // Published before any reader starts: a new reader checks its
        // parents against this pass's table, never an older one.
        stream.snapshot.send_replace(Arc::new(leases.clone()));
        let held_keys: HashSet<String> = stream.held.keys();
        let mut plan = takes_and_steals(BalanceInput {
            me: &cfg.worker_id,
            held: &held_keys,
            leases: &leases,
            observations: &self.obs,
            now,
            failover: cfg.failover_time,
            max_leases: cfg.max_leases,
            steal_at_target: tuning.steal_at_target,
            patient: tuning.patient_steals,
        });
        // Ramped takes: of leases never taken yet (counter 0: a cold
        // start, new children) at most as many as held (at least one) per
        // pass, so a worker that sees few others does not take leases it
        // must give up again; released and expired leases are taken at
        // once. A capped pass is followed by another half a tick later.
        let mut capped = false;
        if tuning.ramped_takes {
            let fresh: HashSet<&str> = leases
                .iter()
                .filter(|l| l.counter == 0)
                .map(|l| l.key.as_str())
                .collect();
            let cap = held_keys.len().max(1);
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
        // Patient steals: carried out when the previous pass planned one
        // too (a lease released meanwhile is taken instead).
        let steals: &[String] = if !tuning.patient_steals || self.steal_armed {
            &plan.steal
        } else {
            &[]
        };
        self.steal_armed = !plan.steal.is_empty();
        debug!(
            worker = %cfg.worker_id,
            held = held_keys.len(),
            target = plan.target,
            take = plan.take.len(),
            steal = plan.steal.len(),
            "balancing pass"
        );
        for (keys, kind) in [(plan.take.as_slice(), "take"), (steals, "steal")] {
            for key in keys {
                // A lease taken now would only be released again.
                if stream.shutdown.is_cancelled() {
                    break;
                }
                let Some(observed) = leases.iter().find(|l| &l.key == key) else {
                    continue;
                };
                match stream.table.acquire(observed, &cfg.worker_id).await {
                    Ok(Some(written)) => {
                        info!(worker = %cfg.worker_id, shard = %key, kind, "lease acquired");
                        metrics::counter!(metric::LEASE_CHANGES, "kind" => kind).increment(1);
                        let mut lease = observed.clone();
                        lease.owner = Some(cfg.worker_id.clone());
                        lease.checkpoint_owner = None;
                        reader::spawn(stream, lease, written);
                    }
                    Ok(None) => debug!(shard = %key, "lease race lost"),
                    Err(e) => warn!(shard = %key, error = %e, "acquire failed"),
                }
            }
        }
        // Nothing to do and nothing free or expired: the next pass can
        // wait a failover time (an expiry still wakes it below).
        let settled = tuning.settled_passes
            && live_workers(&cfg.worker_id, &leases, &self.obs, now, cfg.failover_time)
                > SMALL_FLEET
            && plan.take.is_empty()
            && plan.steal.is_empty()
            && stream.held.len() + 1 >= plan.target
            && !leases.iter().any(|l| {
                !l.is_finished()
                    && l.owner.as_deref() != Some(cfg.worker_id.as_str())
                    && self.obs.is_expired(l, now, cfg.failover_time)
            });
        if settled {
            wake = pass_start
                + cfg
                    .failover_time
                    .mul_f64(pass_jitter(&cfg.worker_id, self.passes));
        }
        if capped {
            wake = wake.min(pass_start + tick / 2);
        }
        if let Some(t) = self
            .obs
            .next_expiry(&leases, &cfg.worker_id, now, cfg.failover_time)
        {
            wake = wake.min(t + Duration::from_millis(5));
        }
        Ok(wake)
    }
}

/// A factor in [0.9, 1.1) that differs per worker and pass, so that
/// settled workers do not list the table in step.
fn pass_jitter(me: &str, pass: u64) -> f64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (me, pass).hash(&mut h);
    0.9 + (h.finish() % 1000) as f64 / 5000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::AwsError;

    fn aws(class: ErrorClass) -> ConsumerError {
        ConsumerError::Aws(AwsError {
            op: "Scan",
            class,
            message: "AccessDeniedException: no".into(),
        })
    }

    /// A lease table that refuses for good (access denied, deleted) stops
    /// the source at the third listing in a row; what passes (throttling,
    /// timeouts) never does.
    #[test]
    fn a_lease_table_refusing_for_good_stops_the_source() {
        for class in [ErrorClass::Fatal, ErrorClass::NotFound] {
            let mut refusals = 0;
            assert!(listing_failed(aws(class), &mut refusals).is_none());
            assert!(listing_failed(aws(class), &mut refusals).is_none());
            assert!(listing_failed(aws(class), &mut refusals).is_some());
        }
        let mut refusals = 0;
        for _ in 0..10 {
            assert!(listing_failed(aws(ErrorClass::Throttled), &mut refusals).is_none());
            assert!(listing_failed(aws(ErrorClass::Retry), &mut refusals).is_none());
        }
    }
}
