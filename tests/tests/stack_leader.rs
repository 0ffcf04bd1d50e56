//! `lease_assignment = "leader"` against the local stack: three workers on a
//! 4-shard stream, one elected leader assigning leases, the others finding
//! theirs through the lease table's owner index. The leader is killed
//! (no release, no goodbye): its leases go to the survivors, no shard is
//! read by two workers for longer than a renewal interval, and every record
//! written is delivered. Needs the local stack (see docs/testing.md).

// Test helpers panic on failure like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_consumer::kinesis::{LeaseAssignment, ReadMode, StatusHandle};
use tidemark_consumer::lease::{DynamoLeaderStore, OWNER_INDEX};
use tidemark_consumer::sim::LeaderStore;
use tidemark_consumer::{Ack, KinesisConfig, KinesisSource, Record};
use tidemark_schema::Origin;
use tidemark_tests::{LocalStack, put_records, stack, unique_name, wait_until};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const FAILOVER: Duration = Duration::from_secs(3);

/// (when, worker, shard, payload) of every delivered record.
type Log = Arc<Mutex<Vec<(Instant, String, String, Vec<u8>)>>>;

struct Worker {
    id: String,
    status: StatusHandle,
    stop: CancellationToken,
    run: JoinHandle<()>,
    sink: JoinHandle<()>,
}

fn start(
    stack: &LocalStack,
    stream: &str,
    leases: &str,
    coord: &str,
    id: &str,
    log: &Log,
) -> Worker {
    start_in(ReadMode::Polling, stack, stream, leases, coord, id, log)
}

fn start_in(
    mode: ReadMode,
    stack: &LocalStack,
    stream: &str,
    leases: &str,
    coord: &str,
    id: &str,
    log: &Log,
) -> Worker {
    let mut c = KinesisConfig::new(stream, leases, id);
    c.read_mode = mode;
    c.failover_time = FAILOVER;
    c.checkpoint_interval = Duration::from_millis(500);
    c.shard_sync_interval = Duration::from_secs(2);
    c.idle_poll = Duration::from_millis(100);
    c.shutdown_grace = Duration::from_secs(2);
    c.lease_assignment = LeaseAssignment::Leader;
    let coord = DynamoLeaderStore::new(stack.dynamodb(), coord, leases);
    let source =
        KinesisSource::new(c, stack.kinesis(), stack.dynamodb()).with_leader_store(Arc::new(coord));
    let status = source.status_handle();
    let (tx, mut rx) = mpsc::channel::<Vec<Record>>(4);
    let stop = CancellationToken::new();
    let run = {
        let stop = stop.clone();
        tokio::spawn(async move {
            source.run(tx, stop).await.expect("a clean run");
        })
    };
    let (log, who) = (log.clone(), id.to_string());
    let sink = tokio::spawn(async move {
        while let Some(batch) = rx.recv().await {
            let now = Instant::now();
            let mut l = log.lock().unwrap();
            for r in &batch {
                if let Origin::Kinesis { shard_id, .. } = &r.origin {
                    l.push((now, who.clone(), shard_id.to_string(), r.data.to_vec()));
                }
            }
            drop(l);
            Ack::done_all(batch.into_iter().map(|r| r.ack));
        }
    });
    Worker {
        id: id.to_string(),
        status,
        stop,
        run,
        sink,
    }
}

/// The first of `ids` that is not `dead`.
fn survivors_first(ids: &[&str], dead: &str) -> String {
    ids.iter().find(|i| **i != dead).unwrap().to_string()
}

/// Shard -> the live workers that hold it.
fn owners(workers: &[&Worker]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for w in workers {
        for s in w.status.owned_shards() {
            out.entry(s).or_default().push(w.id.clone());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn polling_leader_assigns_and_reassigns_a_dead_leaders_leases() {
    kill_the_leader(ReadMode::Polling).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn fan_out_leader_assigns_and_reassigns_a_dead_leaders_leases() {
    kill_the_leader(ReadMode::FanOut).await;
}

/// Three workers; the leader killed, then a survivor stopped cleanly.
async fn kill_the_leader(mode: ReadMode) {
    let stack = stack().await;
    let stream = unique_name("leader");
    tidemark_tests::create_stream(&stack.kinesis(), &stream, 4).await;
    let leases = format!("{stream}-leases");
    let coord_table = format!("{stream}-coord");
    let log: Log = Arc::default();
    let written = Arc::new(Mutex::new(BTreeSet::new()));
    let producing = CancellationToken::new();
    let producer = {
        let (k, stream, stop, written) = (
            stack.kinesis(),
            stream.clone(),
            producing.clone(),
            written.clone(),
        );
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                let recs: Vec<_> = (n..n + 8)
                    .map(|i| (format!("pk-{i}"), format!("{{\"n\":{i}}}").into_bytes()))
                    .collect();
                put_records(&k, &stream, &recs).await;
                written
                    .lock()
                    .unwrap()
                    .extend(recs.into_iter().map(|r| r.1));
                n += 8;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let ids = ["worker-a", "worker-b", "worker-c"];
    let workers: Vec<Worker> = ids
        .iter()
        .map(|id| start_in(mode, &stack, &stream, &leases, &coord_table, id, &log))
        .collect();

    // Every shard held by exactly one worker, and spread (max - min <= 1).
    wait_until(
        "leases assigned and balanced",
        Duration::from_secs(60),
        || async {
            let o = owners(&workers.iter().collect::<Vec<_>>());
            let mut per: BTreeMap<&str, usize> = ids.iter().map(|i| (*i, 0)).collect();
            for ws in o.values() {
                for w in ws {
                    *per.get_mut(w.as_str()).unwrap() += 1;
                }
            }
            let (max, min) = (per.values().max().unwrap(), per.values().min().unwrap());
            (o.len() == 4 && o.values().all(|w| w.len() == 1) && max - min <= 1).then_some(())
        },
    )
    .await;
    // The table Tidemark created has the owner index, and it answers.
    assert!(
        owner_index(&stack, &leases).await.is_some(),
        "lease table without {OWNER_INDEX}"
    );
    let lock = DynamoLeaderStore::new(stack.dynamodb(), &coord_table, &leases)
        .lock()
        .await
        .unwrap()
        .expect("a leader");
    let (dead, alive): (Vec<Worker>, Vec<Worker>) =
        workers.into_iter().partition(|w| w.id == lock.owner);
    let dead = dead.into_iter().next().expect("the leader is one of ours");
    let dead_shards = dead.status.owned_shards();
    eprintln!("killing the leader {} holding {dead_shards:?}", dead.id);

    // Kill the leader: its reader tasks die with its run future.
    dead.run.abort();
    let killed = Instant::now();
    let _ = dead.run.await;
    dead.sink.abort();
    let survivors: Vec<&Worker> = alive.iter().collect();
    let took = wait_until("the survivors hold every shard", FAILOVER * 10, || async {
        let o = owners(&survivors);
        (o.len() == 4 && o.values().all(|w| w.len() == 1)).then(|| killed.elapsed())
    })
    .await;
    eprintln!("the dead leader's leases were taken {took:?} after the kill");
    // The counter rule alone: one failover time seen, after a new leader
    // was elected (failover + skew); the heartbeat rule makes it faster.
    assert!(took <= FAILOVER * 4, "took {took:?}");
    // A new leader among the survivors.
    wait_until("a new leader", FAILOVER * 4, || async {
        let l = DynamoLeaderStore::new(stack.dynamodb(), &coord_table, &leases)
            .lock()
            .await
            .unwrap();
        l.filter(|l| l.owner != dead.id).map(|_| ())
    })
    .await;

    // A clean stop of one survivor: its leases are released, and the last
    // worker holds them within about a renewal interval (the leader's next
    // pass, or the lock released by a stopping leader).
    let (stopping, last): (Vec<Worker>, Vec<Worker>) = alive
        .into_iter()
        .partition(|w| w.id == survivors_first(&ids, &dead.id));
    let stopping = stopping.into_iter().next().unwrap();
    stopping.stop.cancel();
    let stopped = Instant::now();
    tokio::time::timeout(Duration::from_secs(30), stopping.run)
        .await
        .expect("a clean stop")
        .unwrap();
    let _ = stopping.sink.await;
    let last_one: Vec<&Worker> = last.iter().collect();
    let handed = wait_until(
        "the last worker holds every shard",
        FAILOVER * 10,
        || async { (owners(&last_one).len() == 4).then(|| stopped.elapsed()) },
    )
    .await;
    eprintln!("a clean stop handed its leases over {handed:?} after the stop began");
    assert!(handed <= FAILOVER * 2, "handed over after {handed:?}");
    let alive = last;

    // Stop writing; every record written is delivered (at least once).
    producing.cancel();
    producer.await.unwrap();
    let all = written.lock().unwrap().clone();
    wait_until(
        "every record delivered",
        Duration::from_secs(60),
        || async {
            let got: BTreeSet<Vec<u8>> = log.lock().unwrap().iter().map(|d| d.3.clone()).collect();
            all.is_subset(&got).then_some(())
        },
    )
    .await;
    for w in &alive {
        w.stop.cancel();
    }
    for w in alive {
        tokio::time::timeout(Duration::from_secs(30), w.run)
            .await
            .expect("a survivor stops")
            .unwrap();
        let _ = w.sink.await;
    }

    // No shard read by two workers past a renewal interval: when a shard's
    // deliveries switch from one worker to another, the first delivers
    // nothing more than a renewal interval (plus a poll) later.
    let log = log.lock().unwrap();
    let mut by_shard: BTreeMap<&str, Vec<(Instant, &str)>> = BTreeMap::new();
    for (t, w, s, _) in log.iter() {
        by_shard.entry(s).or_default().push((*t, w));
    }
    let slack = FAILOVER / 3 + Duration::from_millis(500);
    for (shard, mut ds) in by_shard {
        ds.sort();
        let mut last: BTreeMap<&str, Instant> = BTreeMap::new();
        for (t, w) in &ds {
            last.insert(w, *t);
        }
        let mut firsts: BTreeMap<&str, Instant> = BTreeMap::new();
        for (t, w) in &ds {
            firsts.entry(w).or_insert(*t);
        }
        for (a, a_last) in &last {
            for (b, b_first) in &firsts {
                if a != b && b_first < a_last {
                    let overlap = a_last.duration_since(*b_first);
                    let a_first = firsts[a];
                    // Only a hand-over from a to b counts (a started first).
                    if a_first < *b_first {
                        assert!(
                            overlap <= slack,
                            "{shard}: {a} read on {overlap:?} after {b} started"
                        );
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn leader_mode_adds_the_owner_index_to_an_existing_table() {
    let stack = stack().await;
    let stream = unique_name("leader-idx");
    tidemark_tests::create_stream(&stack.kinesis(), &stream, 1).await;
    let leases = format!("{stream}-leases");
    // A lease table as a KCL 2.x application (or an older Tidemark) made it.
    tidemark_tests::create_hash_only(&stack.dynamodb(), &leases, "leaseKey").await;
    let log: Log = Arc::default();
    let w = start(
        &stack,
        &stream,
        &leases,
        &format!("{stream}-coord"),
        "worker-a",
        &log,
    );
    wait_until("the shard is read", Duration::from_secs(60), || async {
        (w.status.owned_shards().len() == 1).then_some(())
    })
    .await;
    let index = owner_index(&stack, &leases)
        .await
        .expect("the index was added");
    let keys: Vec<_> = index
        .key_schema()
        .iter()
        .map(|k| k.attribute_name())
        .collect();
    assert_eq!(keys, ["leaseOwner", "leaseKey"]);
    w.stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), w.run)
        .await
        .expect("the worker stops")
        .unwrap();
}

/// The owner index of lease table `leases`, as DescribeTable shows it.
async fn owner_index(
    stack: &tidemark_tests::LocalStack,
    leases: &str,
) -> Option<aws_sdk_dynamodb::types::GlobalSecondaryIndexDescription> {
    let described = stack
        .dynamodb()
        .describe_table()
        .table_name(leases)
        .send()
        .await
        .unwrap();
    described
        .table()
        .unwrap()
        .global_secondary_indexes()
        .iter()
        .find(|i| i.index_name() == Some(OWNER_INDEX))
        .cloned()
}
