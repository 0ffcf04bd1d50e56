//! Tests of the lease item, timing, write and balancing laws.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::balance::{BalanceInput, Observations, takes_and_steals};
use super::item::{Checkpoint, Lease};
use super::timing::{LeasePhase, LeaseTiming};
use super::write::write_once;
use crate::error::{AwsError, ErrorClass};
use crate::kinesis::checkpoint::Position;

fn lease(key: &str, owner: Option<&str>, counter: u64) -> Lease {
    let mut l = Lease::new(key, Checkpoint::TrimHorizon, vec![]);
    l.owner = owner.map(str::to_string);
    l.counter = counter;
    l
}

#[test]
fn item_round_trip_in_kcl_format() {
    let mut l = lease("shardId-000000000003", Some("w1"), 42);
    l.checkpoint = Checkpoint::At(Position::new(
        "4959000000000000000000000000000000000000000000000001",
        3,
    ));
    l.parents = vec!["shardId-000000000001".into(), "shardId-000000000002".into()];
    l.hash_range = Some(("0".into(), "170141183460469231731687303715884105727".into()));
    let item = l.to_item();
    assert_eq!(item["leaseKey"].as_s().unwrap(), "shardId-000000000003");
    assert_eq!(item["leaseCounter"].as_n().unwrap(), "42");
    assert_eq!(item["checkpointSubSequenceNumber"].as_n().unwrap(), "3");
    assert!(item["parentShardId"].as_ss().is_ok());
    assert!(
        !item.contains_key("childShardIds"),
        "empty sets are left out"
    );
    assert_eq!(Lease::from_item(&item).unwrap(), l);
    let mut free = l.clone();
    free.owner = None;
    free.checkpoint = Checkpoint::ShardEnd;
    assert!(!free.to_item().contains_key("leaseOwner"));
    assert_eq!(Lease::from_item(&free.to_item()).unwrap(), free);
}

#[test]
fn expiry_uses_the_observers_clock() {
    let t0 = Instant::now();
    let fo = Duration::from_secs(10);
    let mut obs = Observations::default();
    let l = lease("a", Some("w2"), 5);
    obs.observe(std::slice::from_ref(&l), t0);
    assert!(!obs.is_expired(&l, t0 + Duration::from_secs(9), fo));
    assert!(obs.is_expired(&l, t0 + fo, fo));
    // The counter moved: alive again, from the moment it was seen moving.
    let l6 = lease("a", Some("w2"), 6);
    obs.observe(std::slice::from_ref(&l6), t0 + fo);
    assert!(!obs.is_expired(&l6, t0 + fo + Duration::from_secs(9), fo));
    assert!(
        obs.is_expired(&lease("b", None, 1), t0, fo),
        "free is expired"
    );
}

#[tokio::test(start_paused = true)]
async fn lease_phases_on_the_holders_clock() {
    let t = LeaseTiming::new(Duration::from_secs(10));
    assert!(t.op_bound() < t.failover / 3, "{:?}", t.op_bound());
    let sent = Instant::now();
    let s = Duration::from_secs;
    assert_eq!(t.phase(sent, sent), LeasePhase::Live { until: sent + s(8) });
    assert_eq!(
        t.phase(sent, sent + s(8)),
        LeasePhase::Paused {
            lost_at: sent + s(10)
        }
    );
    assert_eq!(t.phase(sent, sent + s(10)), LeasePhase::Lost);
    // A renewal sent later moves every bound.
    let later = sent + s(7);
    assert!(matches!(
        t.phase(later, sent + s(9)),
        LeasePhase::Live { .. }
    ));
}

fn err(class: ErrorClass) -> AwsError {
    AwsError {
        op: "UpdateItem(renew)",
        class,
        message: "test".into(),
    }
}

/// A lease item as the server sees it: `counter`, and the attempts sent.
#[derive(Default)]
struct Server {
    counter: std::sync::Mutex<u64>,
    attempts: std::sync::atomic::AtomicU32,
    rereads: std::sync::atomic::AtomicU32,
}

/// Runs a renew of counter 5 against `server`, whose behaviour per
/// attempt number (0-based) is `script`.
async fn renew_with(
    server: &Server,
    script: impl Fn(u32) -> Step,
) -> (Result<Option<Instant>, AwsError>, Duration) {
    use std::sync::atomic::Ordering::SeqCst;
    let timing = LeaseTiming::new(Duration::from_secs(10));
    let started = Instant::now();
    let r = write_once(
        &timing,
        None,
        "UpdateItem(renew)",
        || {
            let n = server.attempts.fetch_add(1, SeqCst);
            let step = script(n);
            async move {
                let apply = || {
                    let mut c = server.counter.lock().unwrap();
                    if *c != 5 {
                        return Err(err(ErrorClass::ConditionFailed));
                    }
                    *c = 6;
                    Ok(())
                };
                match step {
                    Step::Answer => apply(),
                    // Applied, but the answer never comes.
                    Step::Hang => {
                        let _ = apply();
                        std::future::pending().await
                    }
                    Step::Fail(class) => Err(err(class)),
                }
            }
        },
        || {
            server.rereads.fetch_add(1, SeqCst);
            async { Ok(*server.counter.lock().unwrap() == 6) }
        },
    )
    .await;
    (r, started.elapsed())
}

#[derive(Clone, Copy)]
enum Step {
    Answer,
    Hang,
    Fail(ErrorClass),
}

fn server(counter: u64) -> Server {
    Server {
        counter: std::sync::Mutex::new(counter),
        ..Server::default()
    }
}

#[tokio::test(start_paused = true)]
async fn an_applied_write_whose_answer_was_lost_is_recognised_on_reread() {
    use std::sync::atomic::Ordering::SeqCst;
    let s = server(5);
    let t0 = Instant::now();
    let (r, took) = renew_with(&s, |n| if n == 0 { Step::Hang } else { Step::Answer }).await;
    // The resend failed its condition (our own first write moved the
    // counter); the re-read shows counter 6: accepted, with the first
    // attempt's send time.
    assert_eq!(r.unwrap(), Some(t0));
    assert_eq!(s.attempts.load(SeqCst), 2);
    assert_eq!(s.rereads.load(SeqCst), 1);
    assert!(took < LeaseTiming::new(Duration::from_secs(10)).op_bound());
}

#[tokio::test(start_paused = true)]
async fn a_plain_condition_failure_is_a_lost_lease_without_reread() {
    use std::sync::atomic::Ordering::SeqCst;
    let s = server(7);
    let (r, _) = renew_with(&s, |_| Step::Answer).await;
    assert_eq!(r.unwrap(), None);
    assert_eq!(s.rereads.load(SeqCst), 0);
    // A throttled attempt was not applied: still no re-read.
    let s = server(7);
    let (r, _) = renew_with(&s, |n| {
        if n == 0 {
            Step::Fail(ErrorClass::Throttled)
        } else {
            Step::Answer
        }
    })
    .await;
    assert_eq!(r.unwrap(), None);
    assert_eq!((s.attempts.load(SeqCst), s.rereads.load(SeqCst)), (2, 0));
}

#[tokio::test(start_paused = true)]
async fn a_reread_showing_another_write_is_a_lost_lease() {
    let s = server(5);
    // First attempt hangs without applying; meanwhile another worker
    // takes the lease (counter 9).
    let (r, _) = renew_with(&s, |n| {
        if n == 0 {
            *s.counter.lock().unwrap() = 9;
            Step::Fail(ErrorClass::Retry)
        } else {
            Step::Answer
        }
    })
    .await;
    assert_eq!(r.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn retries_are_bounded_by_the_operation_deadline() {
    use std::sync::atomic::Ordering::SeqCst;
    let timing = LeaseTiming::new(Duration::from_secs(10));
    let s = server(5);
    let (r, took) = renew_with(&s, |_| Step::Hang).await;
    assert!(r.is_err());
    assert!(took <= timing.op_bound(), "{took:?}");
    assert!(took < timing.failover / 3);
    assert!(s.attempts.load(SeqCst) >= 2, "retried within the budget");
    // A fatal error is not retried.
    let s = server(5);
    let (r, _) = renew_with(&s, |_| Step::Fail(ErrorClass::Fatal)).await;
    assert_eq!(r.unwrap_err().class, ErrorClass::Fatal);
    assert_eq!(s.attempts.load(SeqCst), 1);
}

struct Scenario {
    name: &'static str,
    /// (key, owner, counter)
    leases: Vec<(&'static str, Option<&'static str>, u64)>,
    held: Vec<&'static str>,
    max: Option<usize>,
    /// Seconds since the observation at t0.
    at: u64,
    take: usize,
    steal: usize,
    target: usize,
}

#[test]
fn table_driven_balancing() {
    let keys = ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"];
    let owned = |owner: Option<&'static str>, n: usize| -> Vec<_> {
        keys.iter().take(n).map(|k| (*k, owner, 1)).collect()
    };
    let scenarios = vec![
        Scenario {
            name: "alone, all free",
            leases: owned(None, 8),
            held: vec![],
            max: None,
            at: 0,
            take: 8,
            steal: 0,
            target: 8,
        },
        Scenario {
            name: "cap respected",
            leases: owned(None, 8),
            held: vec![],
            max: Some(3),
            at: 0,
            take: 3,
            steal: 0,
            target: 3,
        },
        Scenario {
            name: "join: steal half at once",
            leases: owned(Some("a"), 8),
            held: vec![],
            max: None,
            at: 1,
            take: 0,
            steal: 4,
            target: 4,
        },
        Scenario {
            name: "owner dead: take all",
            leases: owned(Some("a"), 8),
            held: vec![],
            max: None,
            at: 10,
            take: 8,
            steal: 0,
            target: 8,
        },
        Scenario {
            name: "odd split is stable",
            leases: {
                let mut v = owned(Some("a"), 3);
                v.extend(keys[3..5].iter().map(|k| (*k, Some("me"), 1)));
                v
            },
            held: vec!["s3", "s4"],
            max: None,
            at: 1,
            take: 0,
            steal: 0,
            target: 3,
        },
        Scenario {
            name: "three workers at target: no steal",
            leases: {
                let mut v: Vec<_> = keys[..3].iter().map(|k| (*k, Some("a"), 1)).collect();
                v.extend(keys[3..6].iter().map(|k| (*k, Some("b"), 1)));
                v.extend(keys[6..8].iter().map(|k| (*k, Some("me"), 1)));
                v
            },
            held: vec!["s6", "s7"],
            max: None,
            at: 1,
            take: 0,
            steal: 0,
            target: 3,
        },
        Scenario {
            name: "newcomer below target takes one from each worker at it",
            leases: {
                let mut v: Vec<_> = keys[..2].iter().map(|k| (*k, Some("a"), 1)).collect();
                v.extend(keys[2..4].iter().map(|k| (*k, Some("b"), 1)));
                v.extend(keys[4..6].iter().map(|k| (*k, Some("c"), 1)));
                v
            },
            held: vec![],
            max: None,
            at: 1,
            take: 0,
            steal: 1,
            target: 2,
        },
        Scenario {
            name: "own stale lease retaken",
            leases: vec![("s0", Some("me"), 4), ("s1", Some("a"), 1)],
            held: vec![],
            max: None,
            at: 1,
            take: 1,
            steal: 0,
            target: 1,
        },
    ];
    let t0 = Instant::now();
    for s in scenarios {
        let leases: Vec<Lease> = s.leases.iter().map(|(k, o, c)| lease(k, *o, *c)).collect();
        let mut obs = Observations::default();
        obs.observe(&leases, t0);
        let held: HashSet<String> = s.held.iter().map(|k| k.to_string()).collect();
        let p = takes_and_steals(BalanceInput {
            me: "me",
            held: &held,
            leases: &leases,
            observations: &obs,
            now: t0 + Duration::from_secs(s.at),
            failover: Duration::from_secs(10),
            max_leases: s.max,
            steal_at_target: true,
            patient: false,
        });
        assert_eq!(
            (p.take.len(), p.steal.len(), p.target),
            (s.take, s.steal, s.target),
            "scenario {}: {p:?}",
            s.name
        );
        for k in p.take.iter().chain(&p.steal) {
            assert!(!held.contains(k), "{}: plans to take a held lease", s.name);
        }
    }
}

#[test]
fn finished_leases_do_not_count_and_parents_go_first() {
    let mut parent = lease("p", None, 1);
    let child = {
        let mut c = lease("c", None, 1);
        c.parents = vec!["p".into()];
        c
    };
    let mut done = lease("old", None, 1);
    done.checkpoint = Checkpoint::ShardEnd;
    parent.owner = None;
    let leases = vec![child, parent, done];
    let obs = Observations::default();
    let p = takes_and_steals(BalanceInput {
        me: "me",
        held: &HashSet::new(),
        leases: &leases,
        observations: &obs,
        now: Instant::now(),
        failover: Duration::from_secs(10),
        max_leases: Some(1),
        steal_at_target: true,
        patient: false,
    });
    assert_eq!(p.take, vec!["p".to_string()]);
    assert_eq!(p.target, 1);
}

/// A simulated lease table with the real conditional-write semantics, and
/// workers running their passes on simulated time.
mod sim {
    use super::*;

    pub(super) struct Worker {
        pub(super) id: String,
        pub(super) held: HashMap<String, u64>,
        pub(super) obs: Observations,
    }

    /// One pass: renew, list, plan, take/steal. Returns ownership changes.
    pub(super) fn pass(
        w: &mut Worker,
        table: &mut HashMap<String, Lease>,
        now: Instant,
        fo: Duration,
    ) -> Vec<String> {
        let mut changes = Vec::new();
        let held: Vec<(String, u64)> = w.held.iter().map(|(k, c)| (k.clone(), *c)).collect();
        for (k, c) in held {
            let l = table.get_mut(&k).unwrap();
            if l.counter == c && l.owner.as_deref() == Some(&w.id) {
                l.counter += 1;
                w.held.insert(k, l.counter);
            } else {
                w.held.remove(&k);
            }
        }
        let leases: Vec<Lease> = table.values().cloned().collect();
        w.obs.observe(&leases, now);
        let held: HashSet<String> = w.held.keys().cloned().collect();
        let p = takes_and_steals(BalanceInput {
            me: &w.id,
            held: &held,
            leases: &leases,
            observations: &w.obs,
            now,
            failover: fo,
            max_leases: None,
            steal_at_target: true,
            patient: false,
        });
        for k in p.take.iter().chain(&p.steal) {
            let observed = leases.iter().find(|l| &l.key == k).unwrap();
            let l = table.get_mut(k).unwrap();
            if l.counter == observed.counter {
                l.counter += 1;
                l.owner = Some(w.id.clone());
                w.held.insert(k.clone(), l.counter);
                changes.push(k.clone());
            }
        }
        changes
    }
}

#[tokio::test(start_paused = true)]
async fn second_worker_joins_16_shards_converges_without_flapping() {
    let fo = Duration::from_secs(10);
    let tick = fo / 3;
    let mut table: HashMap<String, Lease> = (0..16)
        .map(|i| {
            (
                format!("shardId-{i:012}"),
                lease(&format!("shardId-{i:012}"), None, 0),
            )
        })
        .collect();
    let mut a = sim::Worker {
        id: "a".into(),
        held: HashMap::new(),
        obs: Observations::default(),
    };
    let mut b = sim::Worker {
        id: "b".into(),
        held: HashMap::new(),
        obs: Observations::default(),
    };
    // A alone for a while.
    for _ in 0..5 {
        sim::pass(&mut a, &mut table, Instant::now(), fo);
        tokio::time::advance(tick).await;
    }
    assert_eq!(a.held.len(), 16);
    // B joins, offset by half a tick; count owner changes from now on.
    let joined = Instant::now();
    let mut changes: HashMap<String, usize> = HashMap::new();
    let mut converged_at = None;
    tokio::time::advance(tick / 2).await;
    for round in 0..30 {
        for k in sim::pass(&mut b, &mut table, Instant::now(), fo) {
            *changes.entry(k).or_default() += 1;
        }
        tokio::time::advance(tick / 2).await;
        for k in sim::pass(&mut a, &mut table, Instant::now(), fo) {
            *changes.entry(k).or_default() += 1;
        }
        tokio::time::advance(tick / 2).await;
        let owned = |id: &str| {
            table
                .values()
                .filter(|l| l.owner.as_deref() == Some(id))
                .count()
        };
        if converged_at.is_none() && owned("a") == 8 && owned("b") == 8 && a.held.len() == 8 {
            converged_at = Some(Instant::now() - joined);
        }
        let _ = round;
    }
    let t = converged_at.expect("converged to 8/8");
    assert!(t <= 3 * fo, "converged after {t:?}, limit {:?}", 3 * fo);
    assert!(
        changes.values().all(|&c| c <= 1),
        "a lease changed owner twice: {changes:?}"
    );
    assert_eq!(changes.len(), 8, "exactly the 8 stolen leases moved");
}

#[tokio::test(start_paused = true)]
async fn dead_worker_leases_taken_within_two_failover_times() {
    let fo = Duration::from_secs(10);
    let tick = fo / 3;
    let mut table: HashMap<String, Lease> = (0..4)
        .map(|i| (format!("s{i}"), lease(&format!("s{i}"), None, 0)))
        .collect();
    let mut a = sim::Worker {
        id: "a".into(),
        held: HashMap::new(),
        obs: Observations::default(),
    };
    let mut b = sim::Worker {
        id: "b".into(),
        held: HashMap::new(),
        obs: Observations::default(),
    };
    for _ in 0..12 {
        sim::pass(&mut a, &mut table, Instant::now(), fo);
        sim::pass(&mut b, &mut table, Instant::now(), fo);
        tokio::time::advance(tick).await;
    }
    assert_eq!((a.held.len(), b.held.len()), (2, 2));
    let died = Instant::now();
    // A's last renewal happened one tick before it died.
    let last_renewal = died - tick;
    let mut took_all = None;
    for _ in 0..30 {
        sim::pass(&mut b, &mut table, Instant::now(), fo);
        if b.held.len() == 4 && took_all.is_none() {
            took_all = Some(Instant::now() - died);
        }
        tokio::time::advance(tick).await;
    }
    let t = took_all.expect("b took every lease");
    assert!(t <= 2 * fo, "took {t:?}");
    let since_renewal = died + t - last_renewal;
    assert!(
        since_renewal >= fo,
        "taken {since_renewal:?} after its last renewal"
    );
}

/// One stream's view of a multi-stream table (`ScopedStore`), through a
/// store and through the table.
mod scoped {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use futures::future::BoxFuture;

    use super::super::item::{Checkpoint, Lease};
    use super::super::key::{KeyFormat, StreamIdentifier};
    use super::super::scoped::ScopedStore;
    use super::super::store::{LeaseDelete, LeaseStore, LeaseWrite, ScanPage};
    use super::super::table::{LeaseTable, refuse_other_format};
    use crate::error::{AwsError, ConsumerError};

    /// An in-memory table with DynamoDB's conditional semantics
    /// ([`LeaseWrite::apply`]).
    #[derive(Debug, Default)]
    struct Mem(Mutex<std::collections::BTreeMap<String, Lease>>);

    impl LeaseStore for Mem {
        fn name(&self) -> &str {
            "mem"
        }
        fn ensure_table(&self, _: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
            Box::pin(async { Ok(()) })
        }
        fn scan_page(
            &self,
            _: bool,
            _: Option<String>,
        ) -> BoxFuture<'_, Result<ScanPage, ConsumerError>> {
            let leases = self.0.lock().unwrap().values().cloned().collect();
            Box::pin(async move { Ok(ScanPage { leases, next: None }) })
        }
        fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Lease>, AwsError>> {
            let l = self.0.lock().unwrap().get(key).cloned();
            Box::pin(async move { Ok(l) })
        }
        fn write<'a>(&'a self, w: &'a LeaseWrite) -> BoxFuture<'a, Result<(), AwsError>> {
            let mut m = self.0.lock().unwrap();
            let r = w.apply(m.get(w.key())).map(|l| {
                m.insert(l.key.clone(), l);
            });
            Box::pin(async move { r })
        }
        fn owned_by<'a>(
            &'a self,
            owner: &'a str,
        ) -> BoxFuture<'a, Result<Vec<String>, ConsumerError>> {
            let keys = (self.0.lock().unwrap().values())
                .filter(|l| l.owner.as_deref() == Some(owner))
                .map(|l| l.key.clone())
                .collect();
            Box::pin(async move { Ok(keys) })
        }
        fn ensure_owner_index(&self, _: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
            Box::pin(async { Ok(()) })
        }
        fn delete<'a>(&'a self, d: &'a LeaseDelete) -> BoxFuture<'a, Result<(), AwsError>> {
            let mut m = self.0.lock().unwrap();
            let r = d.apply(m.get(&d.key)).map(|()| {
                m.remove(&d.key);
            });
            Box::pin(async move { r })
        }
    }

    #[tokio::test]
    async fn a_scoped_store_queries_owners_and_deletes_only_its_own_stream() {
        let mem = Arc::new(Mem::default());
        let a = StreamIdentifier::new("111111111111", "a", 10).unwrap();
        let b = StreamIdentifier::new("111111111111", "b", 20).unwrap();
        for id in [&a, &b] {
            let mut l = Lease::new(id.lease_key("shardId-1"), Checkpoint::TrimHorizon, vec![]);
            l.owner = Some("w1".into());
            mem.0.lock().unwrap().insert(l.key.clone(), l);
        }
        let sa = ScopedStore::new(mem.clone(), a.clone());
        assert_eq!(
            sa.owned_by("w1").await.unwrap(),
            vec!["shardId-1".to_string()]
        );
        assert!(sa.owned_by("w2").await.unwrap().is_empty());
        let seen = sa.get("shardId-1").await.unwrap().unwrap();
        let d = LeaseDelete {
            key: "shardId-1".into(),
            counter: seen.counter,
            checkpoint: seen.checkpoint.clone(),
        };
        sa.delete(&d).await.unwrap();
        let keys: Vec<String> = mem.0.lock().unwrap().keys().cloned().collect();
        assert_eq!(keys, vec![b.lease_key("shardId-1")], "b's lease stays");
    }

    #[tokio::test]
    async fn a_scoped_table_sees_its_stream_under_shard_ids_and_writes_full_keys() {
        let mem = Arc::new(Mem::default());
        let table = LeaseTable::with_store(mem.clone(), Default::default());
        let a = StreamIdentifier::new("111111111111", "a", 10).unwrap();
        let b = StreamIdentifier::new("111111111111", "b", 20).unwrap();
        let (ta, tb) = (table.scoped(&a), table.scoped(&b));
        let lease = Lease::new("shardId-000000000000", Checkpoint::TrimHorizon, vec![]);
        assert!(ta.create_lease(&lease).await.unwrap());
        assert!(
            tb.create_lease(&lease).await.unwrap(),
            "same shard id, other stream"
        );
        let keys: Vec<String> = mem.0.lock().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "111111111111:a:10:shardId-000000000000",
                "111111111111:b:20:shardId-000000000000"
            ]
        );
        // Each view lists only its own stream, under the shard id.
        let listed = ta.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].key, "shardId-000000000000");
        // A fenced write through the view lands on the stream's item only.
        let w = ta.acquire(&listed[0], "me").await.unwrap();
        assert_eq!(w.map(|w| w.counter), Some(1));
        let got = ta.get("shardId-000000000000").await.unwrap().unwrap();
        assert_eq!(got.owner.as_deref(), Some("me"));
        let other = tb.get("shardId-000000000000").await.unwrap().unwrap();
        assert_eq!(other.owner, None);
        // The whole table is in multi-stream format; a single-stream worker
        // is refused, naming a key.
        refuse_other_format(&table, KeyFormat::MultiStream)
            .await
            .unwrap();
        let e = refuse_other_format(&table, KeyFormat::SingleStream)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("111111111111:a:10:shardId-000000000000"), "{e}");
        assert!(e.contains("source.stream"), "{e}");
    }

    #[tokio::test]
    async fn mixing_is_refused_both_ways() {
        let mem = Arc::new(Mem::default());
        let table = LeaseTable::with_store(mem.clone(), Default::default());
        // An empty table suits both modes.
        refuse_other_format(&table, KeyFormat::SingleStream)
            .await
            .unwrap();
        refuse_other_format(&table, KeyFormat::MultiStream)
            .await
            .unwrap();
        let lease = Lease::new("shardId-000000000001", Checkpoint::TrimHorizon, vec![]);
        assert!(table.create_lease(&lease).await.unwrap());
        refuse_other_format(&table, KeyFormat::SingleStream)
            .await
            .unwrap();
        let e = refuse_other_format(&table, KeyFormat::MultiStream)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ConsumerError::LeaseTable { table, .. } if table == "mem"),
            "{e}"
        );
        assert!(e.to_string().contains("`shardId-000000000001`"), "{e}");
    }
}
