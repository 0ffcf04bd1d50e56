//! The listing mode's pure balancing law: which leases a worker takes or
//! steals, from what it observed of each lease on its own clock.
//!
//! Expiry is judged on the observer's own clock, as the KCL does: a lease is
//! expired when its counter has not changed for `failover_time` since this
//! worker first saw that counter value, so clock skew between workers does not
//! matter.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use tokio::time::Instant;

use super::item::Lease;

/// What a worker saw of each lease, on its own clock.
#[derive(Debug, Default, Clone)]
pub struct Observations {
    seen: HashMap<String, (u64, Instant)>,
}

impl Observations {
    /// Records the counters of `leases` as seen at `now`.
    pub fn observe(&mut self, leases: &[Lease], now: Instant) {
        let keys: HashSet<&str> = leases.iter().map(|l| l.key.as_str()).collect();
        self.seen.retain(|k, _| keys.contains(k.as_str()));
        for l in leases {
            match self.seen.get(&l.key) {
                Some((c, _)) if *c == l.counter => {}
                _ => {
                    self.seen.insert(l.key.clone(), (l.counter, now));
                }
            }
        }
    }

    /// The earliest instant after `now` at which one of `leases` owned by
    /// someone else will expire if its counter does not move: a worker wakes
    /// then instead of at its next regular pass, which takes a tick off
    /// failover.
    /// Leases already expired are left out (waking for them again would spin).
    pub fn next_expiry(
        &self,
        leases: &[Lease],
        me: &str,
        now: Instant,
        failover: Duration,
    ) -> Option<Instant> {
        leases
            .iter()
            .filter(|l| !l.is_finished() && l.owner.as_deref().is_some_and(|o| o != me))
            .filter_map(|l| match self.seen.get(&l.key) {
                Some((c, since)) if *c == l.counter => Some(*since + failover),
                _ => None,
            })
            .filter(|t| *t > now)
            .min()
    }

    /// How long the lease's counter has stood still on this worker's clock
    /// (zero when not observed at this counter).
    pub(crate) fn unchanged_for(&self, lease: &Lease, now: Instant) -> Duration {
        match self.seen.get(&lease.key) {
            Some((c, since)) if *c == lease.counter => now.saturating_duration_since(*since),
            _ => Duration::ZERO,
        }
    }

    /// True when the lease is free, or its counter has not moved for
    /// `failover` on this worker's clock.
    pub fn is_expired(&self, lease: &Lease, now: Instant, failover: Duration) -> bool {
        if lease.owner.is_none() {
            return true;
        }
        match self.seen.get(&lease.key) {
            Some((c, since)) if *c == lease.counter => now.duration_since(*since) >= failover,
            // Not observed at this counter yet: it just moved, so it is alive.
            _ => false,
        }
    }
}

/// The balancing decision of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TakesAndSteals {
    /// Free or expired leases to take.
    pub take: Vec<String>,
    /// Live leases of over-loaded workers to steal.
    pub steal: Vec<String>,
    /// Leases per worker this pass aims at.
    pub target: usize,
}

/// Inputs of the balancing law.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BalanceInput<'a> {
    /// This worker's id.
    pub me: &'a str,
    /// Leases this worker holds (in memory, renewed by it).
    pub held: &'a HashSet<String>,
    /// The whole table.
    pub leases: &'a [Lease],
    /// Counter observations.
    pub observations: &'a Observations,
    /// Now.
    pub now: Instant,
    /// Failover time.
    pub failover: Duration,
    /// Optional cap on leases per worker.
    pub max_leases: Option<usize>,
    /// Also take one lease from each of some workers at the target when two
    /// or more below it ([`LeaseTuning::steal_at_target`](crate::kinesis::config::LeaseTuning)).
    pub steal_at_target: bool,
    /// One short of the target, leave a lease that just became free to
    /// others for half a failover time
    /// ([`LeaseTuning::patient_steals`](crate::kinesis::config::LeaseTuning)).
    pub patient: bool,
}

/// Decides which leases to take and steal. Finished (`SHARD_END`) leases are
/// not counted. Target = ceil(active leases / live workers), capped by
/// `max_leases`. Free and expired leases are taken first; a worker steals only
/// from a worker holding more than the target, and only down to the target,
/// so a steal never has to be undone: this is what keeps leases from
/// flapping. All missing leases are taken in one pass (the KCL takes one per
/// pass), so a joining worker converges in one renewal period.
pub(crate) fn takes_and_steals(input: BalanceInput<'_>) -> TakesAndSteals {
    let BalanceInput {
        me,
        held,
        leases,
        observations,
        now,
        failover,
        max_leases,
        steal_at_target,
        patient,
    } = input;
    let active: Vec<&Lease> = leases.iter().filter(|l| !l.is_finished()).collect();
    let mut per_owner: HashMap<&str, Vec<&Lease>> = HashMap::new();
    let mut available = Vec::new();
    for l in &active {
        if held.contains(&l.key) {
            continue;
        }
        match l.owner.as_deref() {
            // A lease in our name we do not hold (a previous run of this worker).
            Some(o) if o == me => available.push(*l),
            Some(o) if !observations.is_expired(l, now, failover) => {
                per_owner.entry(o).or_default().push(l)
            }
            _ => available.push(*l),
        }
    }
    let workers = per_owner.len() + 1;
    let mut target = active.len().div_ceil(workers);
    if let Some(max) = max_leases {
        target = target.min(max);
    }
    let mut need = target.saturating_sub(held.len());
    let mut out = TakesAndSteals {
        target,
        ..TakesAndSteals::default()
    };
    // Parents first (children must wait for them anyway), then an order that
    // differs per worker so that workers racing for leases pick different ones.
    let rank = |l: &Lease| {
        let unfinished_parent = l
            .parents
            .iter()
            .any(|p| leases.iter().any(|x| &x.key == p && !x.is_finished()));
        (unfinished_parent, spread(me, &l.key))
    };
    available.sort_by_key(|l| rank(l));
    // One short of the target, a worker leaves a lease that just became
    // free to workers further below for half a failover time: the
    // newcomer of a rolling deploy (whom the others cannot count yet: it
    // owns nothing) gets the leases its predecessor released, rather than
    // them moving twice.
    if patient && need == 1 {
        available
            .retain(|l| l.owner.is_some() || observations.unchanged_for(l, now) >= failover / 2);
    }
    for l in available.into_iter().take(need) {
        out.take.push(l.key.clone());
    }
    need -= out.take.len();
    if need > 0 {
        let mut victims: Vec<(&str, Vec<&Lease>)> = per_owner
            .iter()
            .filter(|(_, ls)| ls.len() > target)
            .map(|(o, ls)| (*o, ls.clone()))
            .collect();
        victims.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
        for (_, mut ls) in victims {
            if need == 0 {
                break;
            }
            let n = need.min(ls.len() - target);
            ls.sort_by_key(|l| rank(l));
            out.steal
                .extend(ls.into_iter().take(n).map(|l| l.key.clone()));
            need -= n;
        }
    }
    // When leases / workers is just under a whole number nobody is above
    // the target, yet a newcomer would stay far below it. As the KCL does,
    // a worker two or more below the target takes one lease from each of
    // some workers at the target, never past target - 1: the givers end at
    // target - 1 and cannot take it back, so nothing flaps.
    let mut mine = held.len() + out.take.len() + out.steal.len();
    if steal_at_target && mine + 2 <= target {
        let mut givers: Vec<(&str, &Vec<&Lease>)> = per_owner
            .iter()
            .filter(|(_, ls)| ls.len() == target)
            .map(|(o, ls)| (*o, ls))
            .collect();
        // A different order per worker spreads newcomers over the givers.
        givers.sort_by_key(|(o, _)| spread(me, o));
        for (_, ls) in givers {
            if mine + 2 > target {
                break;
            }
            if let Some(l) = ls.iter().min_by_key(|l| rank(l)) {
                out.steal.push(l.key.clone());
                mine += 1;
            }
        }
    }
    out
}

fn spread(me: &str, key: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (me, key).hash(&mut h);
    h.finish()
}

/// The periodic shard-sync leader: the lowest id among this worker and the
/// owners of live leases in `leases`, as the KCL's deterministic leader.
pub(crate) fn is_sync_leader(
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

/// This worker plus the distinct owners of live (unfinished, unexpired)
/// leases other than this worker's.
pub(crate) fn live_workers(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinesis::lease::item::Checkpoint;

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
}
