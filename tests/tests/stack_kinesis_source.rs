//! End-to-end tests of the Kinesis consumer against kinesis-local (Kinesis)
//! and moto (DynamoDB). Needs the local stack: run with the `stack` feature
//! (see docs/testing.md); without it these tests are listed as ignored.
//!
//! The sink glue here stores each record as one DynamoDB item keyed by the
//! record's derived event id (shard:sequence:sub-sequence) with plain
//! BatchWriteItem, then acknowledges it; records with a defect are
//! "dead-lettered" into a list, then acknowledged. Items are idempotent, so
//! "stored exactly once as an item" is checked by counting items and
//! comparing their contents with what was put.

// Test helpers panic on failure like the tests themselves (house rules allow
// unwrap/expect in tests; clippy only exempts #[test] functions).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use aws_sdk_kinesis::types::{Shard, ShardIteratorType};
use futures::StreamExt;
use tidemark_consumer::fixture::{ReplaySource, read_fixture};
use tidemark_consumer::kinesis::{ReadMode, StatusHandle};
use tidemark_consumer::{KinesisConfig, KinesisSource, Record};
use tidemark_schema::{Origin, Reason};
use tidemark_tests::{
    LocalStack, TableCapacity, count_items, put_records, repo_root, scan_items, unique_name,
    wait_stream_active, wait_until,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

// ---------- helpers ----------

/// Logs the consumer's decisions when RUST_LOG is set (e.g.
/// `RUST_LOG=tidemark_consumer=debug`), to diagnose a failing run.
fn init_logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

async fn create_stream(stack: &LocalStack, shards: i32) -> String {
    let name = unique_name("kin");
    tidemark_tests::create_stream(&stack.kinesis(), &name, shards).await;
    name
}

/// Splits the stream's first shard at the middle of its hash-key range, waits
/// until the stream is ACTIVE again, and returns the shards as listed before
/// the split.
async fn split_first_shard(stack: &LocalStack, stream: &str) -> Vec<Shard> {
    let k = stack.kinesis();
    let shards = k.list_shards().stream_name(stream).send().await.unwrap();
    let shards = shards.shards().to_vec();
    let s0 = &shards[0];
    let r = s0.hash_key_range().unwrap();
    let (lo, hi): (u128, u128) = (
        r.starting_hash_key().parse().unwrap(),
        r.ending_hash_key().parse().unwrap(),
    );
    k.split_shard()
        .stream_name(stream)
        .shard_to_split(s0.shard_id())
        .new_starting_hash_key((lo + (hi - lo) / 2).to_string())
        .send()
        .await
        .expect("SplitShard");
    wait_active(stack, stream).await;
    shards
}

async fn wait_active(stack: &LocalStack, name: &str) {
    wait_stream_active(&stack.kinesis(), name).await;
}

/// JSON events `{"pk":..,"n":..}` with `n` increasing per key.
fn events(keys: usize, count: usize, offset: usize) -> Vec<(String, Vec<u8>)> {
    (offset..offset + count)
        .map(|i| {
            let pk = format!("device-{}", i % keys);
            let body = format!("{{\"pk\":\"{pk}\",\"n\":{i}}}");
            (pk, body.into_bytes())
        })
        .collect()
}

async fn create_item_table(stack: &LocalStack) -> String {
    let name = unique_name("items");
    tidemark_tests::create_table(&stack.dynamodb(), &name, false, TableCapacity::OnDemand).await;
    name
}

fn config(stream: &str, leases: &str, worker: &str, failover_secs: u64) -> KinesisConfig {
    config_in(ReadMode::Polling, stream, leases, worker, failover_secs)
}

/// [`config`] in read mode `mode`; fan-out subscriptions are renewed every
/// 2 s, so every test sees renewals mid-stream.
fn config_in(
    mode: ReadMode,
    stream: &str,
    leases: &str,
    worker: &str,
    failover_secs: u64,
) -> KinesisConfig {
    let mut c = KinesisConfig::new(stream, leases, worker);
    c.read_mode = mode;
    c.subscription_renewal = Duration::from_secs(2);
    c.failover_time = Duration::from_secs(failover_secs);
    c.checkpoint_interval = Duration::from_millis(500);
    c.shard_sync_interval = Duration::from_secs(2);
    c.idle_poll = Duration::from_millis(100);
    c.shutdown_grace = Duration::from_secs(5);
    c
}

/// One delivered record, in delivery order.
#[derive(Debug, Clone)]
struct Delivery {
    shard: String,
    seq: String,
    sub: u64,
    pk: String,
    data: Vec<u8>,
}

#[derive(Debug, Default)]
struct Log {
    deliveries: Vec<Delivery>,
    dead: Vec<(Origin, Reason)>,
    /// Records stored (or dead-lettered) and acknowledged, duplicates
    /// included.
    acked: usize,
    /// Distinct payloads stored or dead-lettered.
    distinct: std::collections::HashSet<Vec<u8>>,
    /// Per stored record: ms from its arrival in Kinesis to its ack.
    latencies_ms: Vec<i64>,
}

/// Waits until the glue acknowledged `n` distinct payloads (cheap, unlike a
/// Scan; re-deliveries after a lease move do not count twice).
async fn wait_acked(log: &Arc<Mutex<Log>>, n: usize, deadline: Duration) {
    wait_until(&format!("{n} records acknowledged"), deadline, || async {
        (log.lock().unwrap().distinct.len() >= n).then_some(())
    })
    .await;
}

/// The sink glue: stores every record, dead-letters defects, then acks.
fn spawn_store(
    stack: &LocalStack,
    table: &str,
) -> (mpsc::Sender<Vec<Record>>, Arc<Mutex<Log>>, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Vec<Record>>(8);
    let log = Arc::new(Mutex::new(Log::default()));
    let ddb = stack.dynamodb();
    let table = table.to_string();
    let l2 = log.clone();
    let task = tokio::spawn(async move {
        while let Some(batch) = rx.recv().await {
            let mut items = Vec::new();
            let mut acks = Vec::new();
            let mut arrivals = Vec::new();
            for r in batch {
                let Origin::Kinesis {
                    shard_id,
                    sequence_number,
                    sub_sequence_number,
                    ..
                } = &r.origin
                else {
                    panic!("kinesis origin")
                };
                let d = Delivery {
                    shard: shard_id.to_string(),
                    seq: sequence_number.to_string(),
                    sub: *sub_sequence_number,
                    pk: r.partition_key.clone(),
                    data: r.data.to_vec(),
                };
                if let Some(defect) = &r.defect {
                    let mut log = l2.lock().unwrap();
                    log.dead.push((r.origin.clone(), defect.reason));
                    log.deliveries.push(d);
                    acks.push(r.ack);
                    continue;
                }
                l2.lock().unwrap().deliveries.push(d);
                arrivals.push(r.arrival_ms);
                items.push(item_of(&r));
                acks.push(r.ack);
            }
            let calls: Vec<_> = items
                .chunks(25)
                .map(|c| {
                    let (ddb, table, c) = (ddb.clone(), table.clone(), c.to_vec());
                    async move { write_batch(&ddb, &table, c).await }
                })
                .collect();
            futures::stream::iter(calls)
                .buffer_unordered(8)
                .collect::<Vec<()>>()
                .await;
            let n = acks.len();
            let now_ms = chrono::Utc::now().timestamp_millis();
            let latencies: Vec<i64> = arrivals.iter().map(|a| now_ms - a).collect();
            for a in acks {
                a.done();
            }
            l2.lock().unwrap().latencies_ms.extend(latencies);
            let mut log = l2.lock().unwrap();
            log.acked += n;
            let start = log.deliveries.len() - n;
            let fresh: Vec<Vec<u8>> = log.deliveries[start..]
                .iter()
                .map(|d| d.data.clone())
                .collect();
            log.distinct.extend(fresh);
        }
    });
    (tx, log, task)
}

fn item_of(r: &Record) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (
            "pk".to_string(),
            AttributeValue::S(r.origin.derived_event_id()),
        ),
        (
            "partition_key".to_string(),
            AttributeValue::S(r.partition_key.clone()),
        ),
        (
            "data".to_string(),
            AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(r.data.to_vec())),
        ),
        (
            "arrival_ms".to_string(),
            AttributeValue::N(r.arrival_ms.to_string()),
        ),
    ])
}

async fn write_batch(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    items: Vec<HashMap<String, AttributeValue>>,
) {
    let mut reqs: Vec<WriteRequest> = items
        .into_iter()
        .map(|i| {
            WriteRequest::builder()
                .put_request(PutRequest::builder().set_item(Some(i)).build().unwrap())
                .build()
        })
        .collect();
    while !reqs.is_empty() {
        let out = ddb
            .batch_write_item()
            .request_items(table, reqs.clone())
            .send()
            .await
            .expect("BatchWriteItem");
        reqs = out
            .unprocessed_items()
            .and_then(|u| u.get(table))
            .cloned()
            .unwrap_or_default();
    }
}

/// The (pk, data) multiset stored in `table`.
async fn stored_payloads(stack: &LocalStack, table: &str) -> BTreeMap<Vec<u8>, usize> {
    let mut m = BTreeMap::new();
    for it in scan_items(&stack.dynamodb(), table).await {
        let data = it["data"].as_b().unwrap().as_ref().to_vec();
        *m.entry(data).or_insert(0) += 1;
    }
    m
}

/// Asserts that each of `events` is stored exactly once in `table`.
async fn assert_stored_once(stack: &LocalStack, table: &str, events: &[(String, Vec<u8>)]) {
    let stored = stored_payloads(stack, table).await;
    for (_, d) in events {
        assert_eq!(stored.get(d), Some(&1), "{}", String::from_utf8_lossy(d));
    }
}

/// Puts 600 events, splits shard 0 at the middle of its range, puts 600
/// more, merges shards 1 and 2, puts 600 more. Returns the shards as listed
/// before the split (the three parents) and the 1,800 events put.
async fn split_then_merge(
    stack: &LocalStack,
    stream: &str,
) -> (Vec<Shard>, Vec<(String, Vec<u8>)>) {
    let k = stack.kinesis();
    let mut all = events(30, 600, 0);
    put_records(&k, stream, &all).await;
    let shards = split_first_shard(stack, stream).await;
    let more = events(30, 600, 600);
    put_records(&k, stream, &more).await;
    all.extend(more);
    k.merge_shards()
        .stream_name(stream)
        .shard_to_merge(shards[1].shard_id())
        .adjacent_shard_to_merge(shards[2].shard_id())
        .send()
        .await
        .expect("MergeShards");
    wait_active(stack, stream).await;
    let more = events(30, 600, 1200);
    put_records(&k, stream, &more).await;
    all.extend(more);
    (shards, all)
}

struct Worker {
    stop: CancellationToken,
    task: JoinHandle<Result<(), tidemark_consumer::ConsumerError>>,
    status: StatusHandle,
}

fn start_worker(stack: &LocalStack, cfg: KinesisConfig, sink: mpsc::Sender<Vec<Record>>) -> Worker {
    let source = KinesisSource::new(cfg, stack.kinesis(), stack.dynamodb());
    let status = source.status_handle();
    let stop = CancellationToken::new();
    let task = tokio::spawn(source.run(sink, stop.clone()));
    Worker { stop, task, status }
}

/// Leases `w` holds; panics if its `run` already ended (it should not).
fn owned(w: &Worker) -> usize {
    assert!(!w.task.is_finished(), "worker stopped early");
    w.status.owned_shards().len()
}

/// Two stack tests running `$body` (an `async fn(ReadMode)`): `$polling`
/// in polling mode, `$fan_out` in fan-out mode.
macro_rules! in_both_modes {
    ($polling:ident, $fan_out:ident, $body:ident) => {
        in_both_modes!(@one $polling, $body, Polling);
        in_both_modes!(@one $fan_out, $body, FanOut);
    };
    (@one $name:ident, $body:ident, $mode:ident) => {
        #[cfg_attr(
            not(feature = "stack"),
            ignore = "needs the local AWS stack (scripts/test runs it)"
        )]
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            $body(ReadMode::$mode).await;
        }
    };
}

// ---------- tests ----------

/// 4 shards, 20,000 records, two workers: every record stored exactly once,
/// leases split 2/2.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kinesis_two_workers_20k_records_exactly_once() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let stream = create_stream(&stack, 4).await;
    let leases = unique_name("leases");
    let table = create_item_table(&stack).await;
    let input = events(50, 20_000, 0);
    let (sink, log, store) = spawn_store(&stack, &table);
    let t = Instant::now();
    let a = start_worker(
        &stack,
        config(&stream, &leases, "worker-a", 2),
        sink.clone(),
    );
    // B joins once A holds every lease, so the 2/2 split needs steals.
    wait_until("A holds all 4", Duration::from_secs(20), || async {
        (owned(&a) == 4).then_some(())
    })
    .await;
    let b = start_worker(
        &stack,
        config(&stream, &leases, "worker-b", 2),
        sink.clone(),
    );
    drop(sink);
    // Consumption runs while the records are being put.
    put_records(&stack.kinesis(), &stream, &input).await;
    eprintln!("put 20000 records in {:?}", t.elapsed());
    wait_acked(&log, 20_000, Duration::from_secs(120)).await;
    eprintln!(
        "all 20000 stored after {:?} ({} deliveries, re-deliveries after the lease split included)",
        t.elapsed(),
        log.lock().unwrap().acked
    );
    wait_until("leases split 2/2", Duration::from_secs(20), || async {
        (owned(&a) == 2 && owned(&b) == 2).then_some(())
    })
    .await;
    // Contents: each put payload stored exactly once.
    let stored = stored_payloads(&stack, &table).await;
    assert_eq!(stored.len(), 20_000, "distinct payloads");
    for (_, d) in &input {
        assert_eq!(
            stored.get(d),
            Some(&1),
            "payload {}",
            String::from_utf8_lossy(d)
        );
    }
    assert_eq!(
        count_items(&stack.dynamodb(), &table).await,
        20_000,
        "no extra items"
    );
    let delivered = log.lock().unwrap().deliveries.len();
    assert!(delivered >= 20_000, "delivered {delivered}");
    a.stop.cancel();
    b.stop.cancel();
    a.task.await.unwrap().unwrap();
    b.task.await.unwrap().unwrap();
    store.await.unwrap();
}

/// Fan-out: records put in waves across several subscription renewals
/// (every 2 s) are each delivered exactly once, in shard order, by
/// SubscribeToShard; the consumer is registered once and reused.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fan_out_renewals_leave_no_gap_and_no_duplicate() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let stream = create_stream(&stack, 2).await;
    let leases = unique_name("leases");
    let table = create_item_table(&stack).await;
    let (sink, log, store) = spawn_store(&stack, &table);
    let cfg = config_in(ReadMode::FanOut, &stream, &leases, "worker", 2);
    let w = start_worker(&stack, cfg.clone(), sink);
    let mut all = Vec::new();
    let t = Instant::now();
    // Five waves, 1.5 s apart: the subscriptions are renewed between and
    // during them.
    for wave in 0..5 {
        let batch = events(20, 300, wave * 300);
        put_records(&stack.kinesis(), &stream, &batch).await;
        all.extend(batch);
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    wait_acked(&log, all.len(), Duration::from_secs(30)).await;
    assert!(t.elapsed() > Duration::from_secs(4), "spans renewals");
    let log_copy = std::mem::take(&mut *log.lock().unwrap());
    assert_eq!(
        log_copy.deliveries.len(),
        all.len(),
        "one worker, no lease move: no record delivered twice"
    );
    let mut last_pos: HashMap<String, tidemark_consumer::kinesis::Position> = HashMap::new();
    for d in &log_copy.deliveries {
        let p = tidemark_consumer::kinesis::Position::new(d.seq.clone(), d.sub);
        if let Some(prev) = last_pos.insert(d.shard.clone(), p.clone()) {
            assert!(
                prev < p,
                "shard {} went back from {prev:?} to {p:?}",
                d.shard
            );
        }
    }
    let stored = stored_payloads(&stack, &table).await;
    for (_, d) in &all {
        assert_eq!(stored.get(d), Some(&1), "{}", String::from_utf8_lossy(d));
    }
    w.stop.cancel();
    w.task.await.unwrap().unwrap();
    store.await.unwrap();
    // The consumer stays registered (never removed implicitly); cleaned up
    // here (`tidemark consumer deregister` is tested in stack_binary.rs).
    let k = stack.kinesis();
    let arn = tidemark_consumer::kinesis::stream_arn(&k, &cfg)
        .await
        .unwrap();
    let c = k
        .describe_stream_consumer()
        .stream_arn(&arn)
        .consumer_name(cfg.consumer_name())
        .send()
        .await
        .expect("still registered after the worker stopped");
    assert_eq!(
        c.consumer_description().unwrap().consumer_status(),
        &aws_sdk_kinesis::types::ConsumerStatus::Active
    );
    k.deregister_stream_consumer()
        .stream_arn(&arn)
        .consumer_name(cfg.consumer_name())
        .send()
        .await
        .unwrap();
}

/// A worker aborted without shutdown: the other holds every lease within
/// 2 x failover time and finishes; nothing lost.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kinesis_aborted_worker_leases_taken_over() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let failover = 2;
    let stream = create_stream(&stack, 4).await;
    let leases = unique_name("leases");
    let table = create_item_table(&stack).await;
    let first = events(20, 2_000, 0);
    put_records(&stack.kinesis(), &stream, &first).await;
    let (sink, _log, store) = spawn_store(&stack, &table);
    let a = start_worker(
        &stack,
        config(&stream, &leases, "worker-a", failover),
        sink.clone(),
    );
    let b = start_worker(
        &stack,
        config(&stream, &leases, "worker-b", failover),
        sink.clone(),
    );
    drop(sink);
    wait_until("leases split 2/2", Duration::from_secs(20), || async {
        (owned(&a) == 2 && owned(&b) == 2).then_some(())
    })
    .await;
    // Crash A: its tasks die, nothing is released.
    eprintln!("aborting A");
    a.task.abort();
    let crashed = Instant::now();
    let _ = a.task.await;
    // More records while B takes over (put concurrently: put time must not
    // count as takeover time).
    let second = events(20, 2_000, 2_000);
    let putter = {
        let (stack, stream, second) = (stack.clone(), stream.clone(), second.clone());
        tokio::spawn(async move { put_records(&stack.kinesis(), &stream, &second).await })
    };
    wait_until(
        "B holds all 4 leases",
        Duration::from_secs(failover * 2 + 5),
        || async { (owned(&b) == 4).then_some(()) },
    )
    .await;
    let took = crashed.elapsed();
    eprintln!("takeover after abort: {took:?}");
    assert!(
        took <= Duration::from_secs(2 * failover),
        "takeover took {took:?}, limit {}s",
        2 * failover
    );
    putter.await.unwrap();
    wait_acked(&_log, 4_000, Duration::from_secs(60)).await;
    let stored = stored_payloads(&stack, &table).await;
    for (_, d) in first.iter().chain(&second) {
        assert_eq!(
            stored.get(d),
            Some(&1),
            "lost or duplicated: {}",
            String::from_utf8_lossy(d)
        );
    }
    b.stop.cancel();
    b.task.await.unwrap().unwrap();
    store.await.unwrap();
}

in_both_modes!(
    kinesis_graceful_shutdown_hands_over_fast,
    fan_out_graceful_shutdown_hands_over_fast,
    graceful_shutdown_hands_over_fast
);

/// Graceful shutdown releases leases: the other worker holds them all in
/// under 2 s (failover 3 s, so expiry cannot explain it).
async fn graceful_shutdown_hands_over_fast(mode: ReadMode) {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let stream = create_stream(&stack, 4).await;
    let leases = unique_name("leases");
    let table = create_item_table(&stack).await;
    put_records(&stack.kinesis(), &stream, &events(10, 400, 0)).await;
    let (sink, _log, store) = spawn_store(&stack, &table);
    let a = start_worker(
        &stack,
        config_in(mode, &stream, &leases, "worker-a", 3),
        sink.clone(),
    );
    let b = start_worker(
        &stack,
        config_in(mode, &stream, &leases, "worker-b", 3),
        sink.clone(),
    );
    drop(sink);
    wait_until("leases split 2/2", Duration::from_secs(30), || async {
        (owned(&a) == 2 && owned(&b) == 2).then_some(())
    })
    .await;
    wait_acked(&_log, 400, Duration::from_secs(30)).await;
    // Before the hand-over, every shard's checkpoint in the table covers what
    // was delivered of it: the first split may have moved a lease whose
    // owner's checkpoint was still waiting for its renewal (checkpoints fold
    // into renewals), and replaying that is at-least-once doing its job, not
    // the hand-over this test is about.
    let table_leases = tidemark_consumer::lease::LeaseTable::new(stack.dynamodb(), &leases);
    wait_until(
        "checkpoints cover every delivery",
        Duration::from_secs(20),
        || async {
            // Sequence numbers are decimal strings too long for an integer:
            // compared by length, then digit by digit.
            let key = |s: &str| (s.len(), s.to_string());
            let last: std::collections::HashMap<String, (usize, String)> = {
                let log = _log.lock().unwrap();
                let mut last = std::collections::HashMap::new();
                for d in &log.deliveries {
                    let seq = key(&d.seq);
                    let e = last.entry(d.shard.clone()).or_insert((0, String::new()));
                    if seq > *e {
                        *e = seq;
                    }
                }
                last
            };
            let all = table_leases.list().await.ok()?;
            all.iter()
                .all(|l| match (&l.checkpoint, last.get(&l.key)) {
                    (_, None) => true,
                    (tidemark_consumer::lease::Checkpoint::At(p), Some(seq)) => {
                        key(p.sequence.as_str()) >= *seq
                    }
                    _ => false,
                })
                .then_some(())
        },
    )
    .await;
    let before = _log.lock().unwrap().deliveries.len();
    let t = Instant::now();
    a.stop.cancel();
    a.task.await.unwrap().unwrap();
    let a_done = t.elapsed();
    wait_until("B holds all 4", Duration::from_secs(10), || async {
        (owned(&b) == 4).then_some(())
    })
    .await;
    let handover = t.elapsed();
    eprintln!("shutdown of A took {a_done:?}; B held all leases after {handover:?}");
    assert!(
        handover < Duration::from_secs(2),
        "handover took {handover:?}"
    );
    let all = table_leases.list().await.unwrap();
    assert!(all.iter().all(|l| l.owner.as_deref() == Some("worker-b")));
    // B reads A's shards on from A's final checkpoints (in fan-out, with
    // subscriptions of its own once A's ended): records put after the
    // hand-over are stored, and none of the first 400 again.
    let later = events(10, 200, 400);
    put_records(&stack.kinesis(), &stream, &later).await;
    wait_acked(&_log, 600, Duration::from_secs(30)).await;
    {
        let log = _log.lock().unwrap();
        let earlier: std::collections::HashSet<(&str, &str)> = log.deliveries[..before]
            .iter()
            .map(|d| (d.shard.as_str(), d.seq.as_str()))
            .collect();
        let again = log.deliveries[before..]
            .iter()
            .filter(|d| earlier.contains(&(d.shard.as_str(), d.seq.as_str())))
            .count();
        assert_eq!(
            again, 0,
            "nothing delivered before the hand-over is delivered again"
        );
        assert_eq!(log.deliveries.len() - before, 200, "each later record once");
    }
    b.stop.cancel();
    b.task.await.unwrap().unwrap();
    // B released too: every lease is free now.
    let all = table_leases.list().await.unwrap();
    assert!(all.iter().all(|l| l.owner.is_none()), "{all:?}");
    store.await.unwrap();
}

in_both_modes!(
    kinesis_resumes_kcl_lease_table,
    fan_out_resumes_kcl_lease_table,
    resumes_kcl_lease_table
);

/// A KCL-format lease table with checkpoints written from KCL's documented
/// schema is resumed from those checkpoints, not from the start.
async fn resumes_kcl_lease_table(mode: ReadMode) {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let stream = create_stream(&stack, 2).await;
    let leases = unique_name("kcl-leases");
    let table = create_item_table(&stack).await;
    let input = events(10, 400, 0);
    let positions = put_records(&stack.kinesis(), &stream, &input).await;
    // Per shard, checkpoint at its 50th record.
    let mut per_shard: BTreeMap<String, Vec<(String, Vec<u8>)>> = BTreeMap::new();
    for ((shard, seq), (_, data)) in positions.iter().zip(&input) {
        per_shard
            .entry(shard.clone())
            .or_default()
            .push((seq.clone(), data.clone()));
    }
    // The table exactly as a KCL 2.x application leaves it (hash key
    // leaseKey, on-demand), written with plain DynamoDB calls.
    let ddb = stack.dynamodb();
    tidemark_tests::create_hash_only(&ddb, &leases, "leaseKey").await;
    let mut expected_after = BTreeSet::new();
    for (shard, recs) in &per_shard {
        assert!(recs.len() > 60, "enough records per shard");
        let (cp_seq, _) = &recs[49];
        ddb.put_item()
            .table_name(&leases)
            .item("leaseKey", AttributeValue::S(shard.clone()))
            .item("leaseOwner", AttributeValue::S("kcl-worker-old".into()))
            .item("leaseCounter", AttributeValue::N("1234".into()))
            .item("checkpoint", AttributeValue::S(cp_seq.clone()))
            .item("checkpointSubSequenceNumber", AttributeValue::N("0".into()))
            .item(
                "ownerSwitchesSinceCheckpoint",
                AttributeValue::N("0".into()),
            )
            .item("startingHashKey", AttributeValue::S("0".into()))
            .item("endingHashKey", AttributeValue::S("1".into()))
            .send()
            .await
            .unwrap();
        for (_, d) in &recs[50..] {
            expected_after.insert(d.clone());
        }
    }
    let (sink, log, store) = spawn_store(&stack, &table);
    let w = start_worker(
        &stack,
        config_in(mode, &stream, &leases, "new-worker", 2),
        sink,
    );
    wait_acked(&log, expected_after.len(), Duration::from_secs(30)).await;
    // Let it idle a moment: nothing older may show up.
    wait_until("caught up", Duration::from_secs(10), || async {
        let s = w.status.snapshot();
        (s.values()
            .filter(|s| s.millis_behind_latest == Some(0))
            .count()
            == 2)
            .then_some(())
    })
    .await;
    let stored: BTreeSet<Vec<u8>> = stored_payloads(&stack, &table).await.into_keys().collect();
    assert_eq!(
        stored, expected_after,
        "exactly the records after the KCL checkpoints"
    );
    assert_eq!(log.lock().unwrap().deliveries.len(), expected_after.len());
    w.stop.cancel();
    w.task.await.unwrap().unwrap();
    store.await.unwrap();
    // The KCL attributes are kept and the checkpoint moved on.
    let lt = tidemark_consumer::lease::LeaseTable::new(stack.dynamodb(), &leases);
    for l in lt.list().await.unwrap() {
        let last = &per_shard[&l.key].last().unwrap().0;
        assert_eq!(
            l.checkpoint,
            tidemark_consumer::lease::Checkpoint::At(tidemark_consumer::kinesis::Position::new(
                last.clone(),
                0
            ))
        );
        assert!(l.counter > 1234);
        assert!(l.owner.is_none(), "released at shutdown");
    }
}

in_both_modes!(
    kinesis_split_and_merge_mid_stream,
    fan_out_split_and_merge_mid_stream,
    split_and_merge_mid_stream
);

/// One shard split and two merged mid-stream: everything stored, per-key
/// stream order, children after parents.
async fn split_and_merge_mid_stream(mode: ReadMode) {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let k = stack.kinesis();
    let stream = create_stream(&stack, 3).await;
    let leases = unique_name("leases");
    let table = create_item_table(&stack).await;
    let (sink, log, store) = spawn_store(&stack, &table);
    let w = start_worker(&stack, config_in(mode, &stream, &leases, "worker", 2), sink);
    let (_, all) = split_then_merge(&stack, &stream).await;
    wait_acked(&log, 1800, Duration::from_secs(60)).await;
    assert_stored_once(&stack, &table, &all).await;
    // Per partition key, delivery follows the order of writing (n grows);
    // per shard, sequence numbers grow.
    // A copy, so no lock is held across the awaits below.
    let log = std::mem::take(&mut *log.lock().unwrap());
    let mut last_pos: HashMap<String, tidemark_consumer::kinesis::Position> = HashMap::new();
    for d in &log.deliveries {
        let p = tidemark_consumer::kinesis::Position::new(d.seq.clone(), d.sub);
        if let Some(prev) = last_pos.insert(d.shard.clone(), p.clone()) {
            assert!(
                prev < p,
                "shard {} went back from {prev:?} to {p:?}",
                d.shard
            );
        }
    }
    let mut last_n: HashMap<String, i64> = HashMap::new();
    for d in &log.deliveries {
        let v: serde_json::Value = serde_json::from_slice(&d.data).unwrap();
        let n = v["n"].as_i64().unwrap();
        let prev = last_n.insert(d.pk.clone(), n);
        assert!(
            prev.is_none_or(|p| p < n),
            "key {} went from {prev:?} to {n}",
            d.pk
        );
    }
    // Children only after their parents' last record.
    let listed = k.list_shards().stream_name(&stream).send().await.unwrap();
    for s in listed.shards() {
        let first_child = log.deliveries.iter().position(|d| d.shard == s.shard_id());
        for p in [s.parent_shard_id(), s.adjacent_parent_shard_id()]
            .into_iter()
            .flatten()
        {
            let last_parent = log.deliveries.iter().rposition(|d| d.shard == p);
            if let (Some(c), Some(pp)) = (first_child, last_parent) {
                assert!(pp < c, "{} read before parent {p} ended", s.shard_id());
            }
        }
    }
    assert_eq!(listed.shards().len(), 6, "3 + 2 children + 1 merged");
    drop(log);
    // Optionally refresh the committed resharded fixture from this stream.
    if std::env::var("TIDEMARK_WRITE_FIXTURES").is_ok_and(|v| v == "1") {
        let path = repo_root().join("tests/fixtures/resharded.jsonl");
        let n = tidemark_consumer::fixture::Recorder::new(stack.kinesis())
            .record_with(&stream, &path, &|_, _| {})
            .await
            .unwrap();
        eprintln!("wrote {n} records to {}", path.display());
    }
    w.stop.cancel();
    w.task.await.unwrap().unwrap();
    store.await.unwrap();
}

in_both_modes!(
    kinesis_finished_leases_deleted_after_split_and_merge,
    fan_out_finished_leases_deleted_after_split_and_merge,
    finished_leases_deleted_after_split_and_merge
);

/// A split, then a merge: once every child has started, the three parent
/// leases are deleted; every record is stored once; a worker started after
/// the deletions neither re-creates the parents' leases nor reads them again.
async fn finished_leases_deleted_after_split_and_merge(mode: ReadMode) {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let k = stack.kinesis();
    let stream = create_stream(&stack, 3).await;
    let leases = unique_name("leases");
    let table = create_item_table(&stack).await;
    let (sink, log, store) = spawn_store(&stack, &table);
    let w = start_worker(
        &stack,
        config_in(mode, &stream, &leases, "worker-a", 2),
        sink,
    );
    let (parents, all) = split_then_merge(&stack, &stream).await;
    wait_acked(&log, all.len(), Duration::from_secs(60)).await;
    let parent_ids: BTreeSet<String> = parents.iter().map(|s| s.shard_id().to_string()).collect();
    let lease_table = tidemark_consumer::lease::LeaseTable::new(stack.dynamodb(), &leases);
    let left = wait_until("parent leases deleted", Duration::from_secs(60), || async {
        let l = lease_table.list().await.unwrap();
        let keys: BTreeSet<String> = l.iter().map(|l| l.key.clone()).collect();
        keys.is_disjoint(&parent_ids).then_some(l)
    })
    .await;
    // The three children remain, each started.
    assert_eq!(left.len(), 3, "{left:?}");
    for l in &left {
        assert!(
            matches!(l.checkpoint, tidemark_consumer::lease::Checkpoint::At(_)),
            "{l:?}"
        );
    }
    assert_stored_once(&stack, &table, &all).await;
    w.stop.cancel();
    w.task.await.unwrap().unwrap();
    store.await.unwrap();
    let first: std::collections::HashSet<Vec<u8>> = all.iter().map(|(_, d)| d.clone()).collect();
    // A new worker after the deletions: only the children are read, from
    // their checkpoints (the clean stop checkpointed everything).
    let (sink, log, store) = spawn_store(&stack, &table);
    let w = start_worker(
        &stack,
        config_in(mode, &stream, &leases, "worker-b", 2),
        sink,
    );
    let later = events(30, 300, 1800);
    put_records(&k, &stream, &later).await;
    wait_acked(&log, later.len(), Duration::from_secs(60)).await;
    // Past a few shard syncs (2 s each) of the new worker.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let keys: BTreeSet<String> = lease_table
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.key)
        .collect();
    assert!(
        keys.is_disjoint(&parent_ids),
        "parent leases re-created: {keys:?}"
    );
    {
        let log = log.lock().unwrap();
        let again: Vec<&Delivery> = log
            .deliveries
            .iter()
            .filter(|d| parent_ids.contains(&d.shard) || first.contains(&d.data))
            .collect();
        assert!(
            again.is_empty(),
            "{} records read again: {:?}",
            again.len(),
            again.first()
        );
        assert_eq!(log.distinct.len(), later.len());
    }
    assert_stored_once(&stack, &table, &later).await;
    w.stop.cancel();
    w.task.await.unwrap().unwrap();
    store.await.unwrap();
}

in_both_modes!(
    kinesis_kpl_aggregates_live,
    fan_out_kpl_aggregates_live,
    kpl_aggregates_live
);

/// KPL aggregates made by aws-kinesis-agg, put into a stream: every user
/// record stored, the corrupt aggregate dead-lettered, the shard goes on.
async fn kpl_aggregates_live(mode: ReadMode) {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let fixture = read_fixture(&repo_root().join("tests/fixtures/kpl_aggregates.jsonl")).unwrap();
    let stream = create_stream(&stack, 1).await;
    let leases = unique_name("leases");
    let table = create_item_table(&stack).await;
    let input: Vec<(String, Vec<u8>)> = fixture
        .iter()
        .map(|f| (f.partition_key.clone(), f.bytes().unwrap()))
        .collect();
    put_records(&stack.kinesis(), &stream, &input).await;
    let (sink, log, store) = spawn_store(&stack, &table);
    let w = start_worker(&stack, config_in(mode, &stream, &leases, "worker", 2), sink);
    // 261 user records plus the dead-lettered aggregate.
    wait_acked(&log, 262, Duration::from_secs(30)).await;
    // A copy, so no lock is held across the awaits below.
    let log = std::mem::take(&mut *log.lock().unwrap());
    assert_eq!(log.dead.len(), 1, "one corrupt aggregate");
    assert_eq!(log.dead[0].1, Reason::CorruptAggregate);
    let after: Vec<_> = log.deliveries.iter().filter(|d| d.pk == "after").collect();
    assert_eq!(
        after.len(),
        4,
        "the aggregate after the corrupt one was read"
    );
    assert_eq!(
        after.iter().map(|d| d.sub).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    drop(log);
    w.stop.cancel();
    w.task.await.unwrap().unwrap();
    store.await.unwrap();
    assert_eq!(count_items(&stack.dynamodb(), &table).await, 261);
}

/// Replaying a recorded fixture produces the same items as live consumption.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kinesis_replay_equals_live() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let fixture = read_fixture(&repo_root().join("tests/fixtures/iot_plain.jsonl")).unwrap();
    let stream = create_stream(&stack, 2).await;
    let leases = unique_name("leases");
    let input: Vec<(String, Vec<u8>)> = fixture
        .iter()
        .map(|f| (f.partition_key.clone(), f.bytes().unwrap()))
        .collect();
    put_records(&stack.kinesis(), &stream, &input).await;
    // Live.
    let live = create_item_table(&stack).await;
    let (sink, live_log, store) = spawn_store(&stack, &live);
    let w = start_worker(&stack, config(&stream, &leases, "worker", 2), sink);
    wait_acked(&live_log, input.len(), Duration::from_secs(30)).await;
    w.stop.cancel();
    w.task.await.unwrap().unwrap();
    store.await.unwrap();
    // Record the same stream, then replay the recording with no Kinesis.
    let dir = std::env::temp_dir().join(unique_name("fixture"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("recorded.jsonl");
    // Progress (what `tidemark record` shows): counts that only grow, up to
    // every record, and every shard reached.
    let seen = std::sync::Mutex::new(Vec::new());
    let n = tidemark_consumer::fixture::Recorder::new(stack.kinesis())
        .record_with(&stream, &path, &|records, shards| {
            seen.lock().unwrap().push((records, shards));
        })
        .await
        .unwrap();
    assert_eq!(n, input.len());
    let seen = seen.into_inner().unwrap();
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "{seen:?}");
    let (last_count, (last_shard, shards)) = *seen.last().unwrap();
    assert_eq!(last_count, n as u64);
    assert_eq!(last_shard + 1, shards, "the last shard was reached");
    let replayed = create_item_table(&stack).await;
    let (sink, _log, store) = spawn_store(&stack, &replayed);
    let summary = ReplaySource::open(&path)
        .unwrap()
        .replay(sink, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(summary.per_shard.values().sum::<usize>(), input.len());
    store.await.unwrap();
    let norm = |items: Vec<HashMap<String, AttributeValue>>| {
        let mut v: Vec<_> = items
            .into_iter()
            .map(|i| {
                let mut kv: Vec<(String, String)> =
                    i.into_iter().map(|(k, v)| (k, format!("{v:?}"))).collect();
                kv.sort();
                kv
            })
            .collect();
        v.sort();
        v
    };
    let a = norm(scan_items(&stack.dynamodb(), &live).await);
    let b = norm(scan_items(&stack.dynamodb(), &replayed).await);
    assert_eq!(a.len(), input.len());
    assert_eq!(a, b, "replay wrote different items than live consumption");
}

/// Reading a stream directly (no consumer) gives its records: used to make
/// sure the shard iterator types the consumer relies on behave here.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn kinesis_local_at_sequence_number_includes_the_record() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let stream = create_stream(&stack, 1).await;
    let pos = put_records(&stack.kinesis(), &stream, &events(1, 3, 0)).await;
    let k = stack.kinesis();
    let it = k
        .get_shard_iterator()
        .stream_name(&stream)
        .shard_id(&pos[1].0)
        .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
        .starting_sequence_number(&pos[1].1)
        .send()
        .await
        .unwrap()
        .shard_iterator
        .unwrap();
    let out = k.get_records().shard_iterator(it).send().await.unwrap();
    let seqs: Vec<_> = out
        .records()
        .iter()
        .map(|r| r.sequence_number().to_string())
        .collect();
    assert_eq!(seqs, vec![pos[1].1.clone(), pos[2].1.clone()]);
}

/// At most `max_unacked_per_shard` records of a shard are in flight: with a
/// sink that holds every acknowledgement, reading pauses; once it
/// acknowledges, everything arrives.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kinesis_unacked_limit_pauses_reading() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let stream = create_stream(&stack, 1).await;
    let leases = unique_name("leases");
    put_records(&stack.kinesis(), &stream, &events(5, 1_000, 0)).await;
    let mut cfg = config(&stream, &leases, "worker", 2);
    cfg.max_unacked_per_shard = 100;
    let (tx, mut rx) = mpsc::channel::<Vec<Record>>(64);
    let w = start_worker(&stack, cfg, tx);
    // Hold every ack: at most 100 records may arrive.
    let mut held: Vec<Record> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while held.len() < 100 {
        assert!(Instant::now() < deadline, "only {} delivered", held.len());
        if let Ok(Some(batch)) = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
            held.extend(batch);
        }
    }
    // Several more poll periods (idle_poll 100 ms): nothing more may come.
    let more = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await;
    assert!(more.is_err(), "reading must pause at the unacked limit");
    assert_eq!(held.len(), 100);
    let in_flight: usize = w.status.snapshot().values().map(|s| s.in_flight).sum();
    assert_eq!(in_flight, 100);
    // Acknowledge as they come: the remaining 900 follow.
    let mut total = held.len();
    for r in held.drain(..) {
        r.ack.done();
    }
    while total < 1_000 {
        let batch = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("records keep coming once acknowledged")
            .unwrap();
        assert!(batch.len() <= 100);
        total += batch.len();
        for r in batch {
            r.ack.done();
        }
    }
    assert_eq!(total, 1_000);
    w.stop.cancel();
    w.task.await.unwrap().unwrap();
}

/// A stream resharded before the first worker ever starts: on its very first
/// pass the worker must still read the parent to its end before the children.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kinesis_resharded_before_start_reads_parent_first() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let stream = create_stream(&stack, 1).await;
    let mut all = events(10, 300, 0);
    put_records(&stack.kinesis(), &stream, &all).await;
    let shards = split_first_shard(&stack, &stream).await;
    let more = events(10, 300, 300);
    put_records(&stack.kinesis(), &stream, &more).await;
    all.extend(more);
    let table = create_item_table(&stack).await;
    let (sink, log, store) = spawn_store(&stack, &table);
    // Small calls make the parent take a dozen paced GetRecords: a child
    // started too early would interleave with it.
    let mut cfg = config(&stream, &unique_name("leases"), "worker", 2);
    cfg.max_records_per_call = 25;
    let w = start_worker(&stack, cfg, sink);
    wait_acked(&log, all.len(), Duration::from_secs(30)).await;
    let log = std::mem::take(&mut *log.lock().unwrap());
    let parent = shards[0].shard_id();
    let last_parent = log
        .deliveries
        .iter()
        .rposition(|d| d.shard == parent)
        .unwrap();
    let first_child = log
        .deliveries
        .iter()
        .position(|d| d.shard != parent)
        .unwrap();
    assert!(
        last_parent < first_child,
        "a child was read before its parent ended"
    );
    let mut last_n: HashMap<String, i64> = HashMap::new();
    for d in &log.deliveries {
        let v: serde_json::Value = serde_json::from_slice(&d.data).unwrap();
        let n = v["n"].as_i64().unwrap();
        let prev = last_n.insert(d.pk.clone(), n);
        assert!(prev.is_none_or(|p| p < n), "key {} out of order", d.pk);
    }
    w.stop.cancel();
    w.task.await.unwrap().unwrap();
    store.await.unwrap();
}

/// Why the emulator cannot take 1,000 records/s on a few shards: kinesis-local's
/// PutRecords slows down with the records already in the shard. Puts 4 rounds
/// of 3,000 records (PutRecords of 100, one at a time) into 1 shard and into
/// 16, printing each round's rate. A probe, ignored by default:
/// `cargo test -p tidemark-tests --features tidemark-tests/stack --test
/// stack_kinesis_source -- --ignored kinesis_local_put_rate --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "probe of the emulator (a minute): run with --ignored, see docs/read-modes.md"]
async fn kinesis_local_put_rate_by_records_in_shard() {
    let stack = tidemark_tests::stack().await;
    let k = stack.kinesis();
    for shards in [1, 16] {
        let stream = create_stream(&stack, shards).await;
        for round in 0..4 {
            let total = 3000;
            let evs = events(50, total, round * total);
            let start = Instant::now();
            for c in evs.chunks(100) {
                put_records(&k, &stream, c).await;
            }
            let rate = total as f64 / start.elapsed().as_secs_f64();
            eprintln!(
                "{shards} shard(s) holding {} records: {rate:.0} records/s",
                round * total
            );
            assert!(rate > 0.0);
        }
        // The emulator's shard limit is shared by every test.
        k.delete_stream().stream_name(&stream).send().await.unwrap();
    }
}

/// Ingest-to-stored latency with 1,000 records/s offered (what the emulator
/// accepts is printed), both read modes in the same run, alternating
/// (polling, fan-out, polling, fan-out), each on a fresh 16-shard stream for
/// 12 s (12,000 records; the first 2 s left out), product defaults
/// (`idle_poll` 250 ms). 16 shards because kinesis-local's puts slow down
/// with the records a shard holds (see
/// `kinesis_local_put_rate_by_records_in_shard`): on 2 shards it took only
/// about 200 records/s. Latency: the sink's ack time minus the record's
/// ApproximateArrivalTimestamp (one machine, one clock). Prints the figures
/// docs/read-modes.md reports; a benchmark, so ignored by default:
/// `cargo test -p tidemark-tests --features tidemark-tests/stack --test
/// stack_kinesis_source -- --ignored read_mode_latency --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark (minutes): run with --ignored, see docs/read-modes.md"]
async fn read_mode_latency_at_1000_records_per_second() {
    const SHARDS: usize = 16;
    const TICKS: u32 = 120;
    let stack = tidemark_tests::stack().await;
    init_logs();
    for mode in [
        ReadMode::Polling,
        ReadMode::FanOut,
        ReadMode::Polling,
        ReadMode::FanOut,
    ] {
        let stream = create_stream(&stack, SHARDS as i32).await;
        let leases = unique_name("leases");
        let table = create_item_table(&stack).await;
        let (sink, log, store) = spawn_store(&stack, &table);
        let mut cfg = KinesisConfig::new(&stream, &leases, "bench");
        cfg.read_mode = mode;
        let w = start_worker(&stack, cfg, sink);
        wait_until("leases held", Duration::from_secs(60), || async {
            (owned(&w) == SHARDS).then_some(())
        })
        .await;
        let k = stack.kinesis();
        let mut sent = 0;
        let start = tokio::time::Instant::now();
        // One PutRecords of 100 every 100 ms, each on its own task: the
        // emulator may take longer than 100 ms to answer one, so sequential
        // puts would fall short of the rate.
        let mut puts = Vec::new();
        for tick in 0..TICKS {
            tokio::time::sleep_until(start + Duration::from_millis(100) * tick).await;
            let batch = events(50, 100, sent);
            sent += batch.len();
            let (k, stream) = (k.clone(), stream.clone());
            puts.push(tokio::spawn(async move {
                put_records(&k, &stream, &batch).await;
            }));
        }
        for p in puts {
            p.await.unwrap();
        }
        let rate = sent as f64 / start.elapsed().as_secs_f64();
        wait_acked(&log, sent, Duration::from_secs(60)).await;
        let mut lat = std::mem::take(&mut log.lock().unwrap().latencies_ms);
        // Drop the first 2 s's records (warm-up: iterators and
        // subscriptions settle).
        let lat_all = lat.len();
        lat.drain(..2000.min(lat_all));
        lat.sort_unstable();
        let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize];
        eprintln!(
            "{mode:?}: {} records at {rate:.0}/s, ingest-to-stored p50 {} ms, p99 {} ms, max {} ms",
            lat.len(),
            pct(0.50),
            pct(0.99),
            lat[lat.len() - 1]
        );
        assert!(pct(0.5) >= 0, "clock went backwards");
        w.stop.cancel();
        w.task.await.unwrap().unwrap();
        store.await.unwrap();
        // 16 shards a run: give them back (the emulator's shard limit is
        // shared by every test).
        k.delete_stream().stream_name(&stream).send().await.unwrap();
    }
}
