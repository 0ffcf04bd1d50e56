//! Resuming KCL applications of every version (2.x to 3.5) from their own
//! lease tables, and handing the tables back: the fixtures of
//! `tests/fixtures/kcl` (README.md there) loaded into moto, 100 records per
//! shard in kinesis-local, checkpoints at the 50th.
//!
//! Each run must deliver exactly records 51 to 100 of every shard (nothing
//! before a checkpoint, nothing missed), and afterwards every non-lease
//! item of the KCL (leader lock, worker metrics, migration states, stream
//! items, the 3.0-3.4 side tables) must be as it was, attribute by
//! attribute, and every item still readable by the KCL's format rules
//! (`tidemark_tests::kcl::kcl_format_problems`). Tables the KCL is still
//! migrating, or that a live KCL fleet still uses, are refused at start with
//! the KCL's own step, and nothing is written to them.
//!
//! Needs the local stack: run with the `stack` feature (docs/testing.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_consumer::kinesis::{LeaseAssignment, ReadMode, StatusHandle, StreamEntry};
use tidemark_consumer::lease::DynamoLeaderStore;
use tidemark_consumer::{ConsumerError, KinesisConfig, KinesisSource, Record};
use tidemark_schema::Origin;
use tidemark_tests::kcl::{Fixture, Loaded};
use tidemark_tests::{LocalStack, unique_name, wait_until};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const FAILOVER: Duration = Duration::from_secs(2);

fn init_logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Every record delivered, in order: (shard, sequence number).
type Deliveries = Arc<Mutex<Vec<(String, String)>>>;

struct Worker {
    stop: CancellationToken,
    task: JoinHandle<Result<(), ConsumerError>>,
    status: StatusHandle,
}

impl Worker {
    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap().expect("a clean stop");
    }

    fn owned(&self) -> usize {
        self.status.owned_shards().len()
    }
}

/// The source's settings for fixture runs: a 2 s failover, quick passes.
fn config(loaded: &Loaded, worker: &str, mode: ReadMode) -> KinesisConfig {
    let mut c = KinesisConfig::new(&loaded.stream, &loaded.lease_table, worker);
    c.read_mode = mode;
    c.failover_time = FAILOVER;
    c.checkpoint_interval = Duration::from_millis(300);
    c.shard_sync_interval = Duration::from_secs(2);
    c.idle_poll = Duration::from_millis(100);
    c.shutdown_grace = Duration::from_secs(3);
    c.subscription_renewal = Duration::from_secs(30);
    c
}

/// Starts a source; every record it delivers is logged and acknowledged.
fn start(
    stack: &LocalStack,
    config: KinesisConfig,
    leader_table: Option<&str>,
    log: &Deliveries,
) -> Worker {
    let mut source = KinesisSource::new(config.clone(), stack.kinesis(), stack.dynamodb());
    if let Some(coord) = leader_table {
        source = source.with_leader_store(Arc::new(DynamoLeaderStore::new(
            stack.dynamodb(),
            coord,
            &config.lease_table,
        )));
    }
    let status = source.status_handle();
    let (tx, mut rx) = mpsc::channel::<Vec<Record>>(8);
    let stop = CancellationToken::new();
    let log = log.clone();
    tokio::spawn(async move {
        while let Some(batch) = rx.recv().await {
            for r in batch {
                let Origin::Kinesis {
                    shard_id,
                    sequence_number,
                    ..
                } = &r.origin
                else {
                    panic!("a Kinesis origin");
                };
                log.lock()
                    .unwrap()
                    .push((shard_id.to_string(), sequence_number.to_string()));
                r.ack.done();
            }
        }
    });
    let task = tokio::spawn(source.run(tx, stop.clone()));
    Worker { stop, task, status }
}

/// Waits until every record after the checkpoints was delivered, then
/// checks that nothing else was (and nothing twice when `once`).
async fn assert_reads_exactly_after_checkpoints(loaded: &Loaded, log: &Deliveries, once: bool) {
    let want = loaded.after_checkpoints();
    wait_until(
        &format!("{}: records after the checkpoints", loaded.fixture.name),
        Duration::from_secs(60),
        || async {
            let got: BTreeSet<(String, String)> = log.lock().unwrap().iter().cloned().collect();
            want.is_subset(&got).then_some(())
        },
    )
    .await;
    // A moment more: a record before a checkpoint would show up now.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = log.lock().unwrap().clone();
    let distinct: BTreeSet<(String, String)> = got.iter().cloned().collect();
    let before: Vec<&(String, String)> = distinct.difference(&want).collect();
    assert!(
        before.is_empty(),
        "{}: records at or before a checkpoint read again: {before:?}",
        loaded.fixture.name
    );
    if once {
        assert_eq!(
            got.len(),
            want.len(),
            "{}: a record delivered twice",
            loaded.fixture.name
        );
    }
}

/// Waits until every lease's checkpoint is at its shard's last record.
async fn wait_checkpointed_to_the_end(stack: &LocalStack, loaded: &Loaded) {
    let ddb = stack.dynamodb();
    let lease = loaded.lease();
    wait_until(
        "checkpoints at the last records",
        Duration::from_secs(30),
        || async {
            for key in &lease.leases {
                let shard = key.rsplit(':').next().unwrap();
                let last = loaded.seq(shard, tidemark_tests::kcl::RECORDS_PER_SHARD);
                let got = ddb
                    .get_item()
                    .table_name(&lease.name)
                    .key("leaseKey", AttributeValue::S(key.clone()))
                    .consistent_read(true)
                    .send()
                    .await
                    .ok()?;
                let cp = got.item()?.get("checkpoint")?.as_s().ok()?.clone();
                if cp != last {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// A KCL 2.x table: resumed from each `checkpoint`, never from the
/// prepared `pendingCheckpoint` of shard 1 (record 70), which Tidemark's
/// checkpoint removes as the KCL's own does.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcl_2x_table_resumes_at_its_checkpoints() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let loaded = Fixture::get("kcl2x").load(&stack).await;
    let log = Deliveries::default();
    let w = start(
        &stack,
        config(&loaded, "tidemark-1", ReadMode::Polling),
        None,
        &log,
    );
    assert_reads_exactly_after_checkpoints(&loaded, &log, true).await;
    wait_checkpointed_to_the_end(&stack, &loaded).await;
    w.stop().await;
    loaded.compare_after_run(&stack).await;
    loaded.delete_stream(&stack).await;
}

/// A KCL 3.5 single-table table (leader lock, worker metrics, migration
/// and stream items beside the leases) read by two workers: the second
/// gets half the shards (the KCL's items are not leases to balance), and
/// every KCL item is left exactly as it was.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcl_35_single_table_is_resumed_and_balanced_by_two_workers() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let loaded = Fixture::get("kcl3x_single_table").load(&stack).await;
    let log = Deliveries::default();
    let a = start(
        &stack,
        config(&loaded, "tidemark-a", ReadMode::Polling),
        None,
        &log,
    );
    wait_until(
        "worker a holds every shard",
        Duration::from_secs(20),
        || async { (a.owned() == 4).then_some(()) },
    )
    .await;
    assert_reads_exactly_after_checkpoints(&loaded, &log, true).await;
    let b = start(
        &stack,
        config(&loaded, "tidemark-b", ReadMode::Polling),
        None,
        &log,
    );
    wait_until(
        "two shards each",
        Duration::from_secs(10 * FAILOVER.as_secs()),
        || async { (a.owned() == 2 && b.owned() == 2).then_some(()) },
    )
    .await;
    wait_checkpointed_to_the_end(&stack, &loaded).await;
    b.stop().await;
    a.stop().await;
    loaded.compare_after_run(&stack).await;
    loaded.delete_stream(&stack).await;
}

/// A KCL 3.5 multi-stream table (its STREAM item keyed by the bare stream
/// identifier, the KCL's own #1792 case), read with enhanced fan-out.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcl_35_multi_stream_table_resumes_with_fan_out() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let loaded = Fixture::get("kcl3x_single_table_multistream")
        .load(&stack)
        .await;
    let mut c = config(&loaded, "tidemark-1", ReadMode::FanOut);
    c.consumer_name = Some(unique_name("kcl-ms"));
    c.streams = vec![StreamEntry {
        stream: c.stream.clone(),
        account_id: None,
        creation_epoch: None,
        event: None,
    }];
    c.stream = String::new();
    let log = Deliveries::default();
    let w = start(&stack, c, None, &log);
    assert_reads_exactly_after_checkpoints(&loaded, &log, true).await;
    wait_checkpointed_to_the_end(&stack, &loaded).await;
    w.stop().await;
    loaded.compare_after_run(&stack).await;
    loaded.delete_stream(&stack).await;
}

/// A KCL 3.0-3.4 application (its migration state and leader lock in
/// `<app>-CoordinatorState`, worker metrics in `<app>-WorkerMetricStats`),
/// resumed in leader mode: the two side tables are read, never written.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcl_3x_application_with_side_tables_resumes_in_leader_mode() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let loaded = Fixture::get("kcl3x_separate_tables").load(&stack).await;
    let mut c = config(&loaded, "tidemark-1", ReadMode::Polling);
    c.lease_assignment = LeaseAssignment::Leader;
    let coord = unique_name("kcl-coord");
    let log = Deliveries::default();
    let w = start(&stack, c, Some(&coord), &log);
    assert_reads_exactly_after_checkpoints(&loaded, &log, true).await;
    wait_checkpointed_to_the_end(&stack, &loaded).await;
    w.stop().await;
    loaded.compare_after_run(&stack).await;
    loaded.delete_stream(&stack).await;
}

/// A KCL 3.5 migration rolled back to 2.x-compatible mode (worker metrics
/// left in the table), resumed in leader mode with fan-out.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_kcl_migration_resumes_in_leader_mode_with_fan_out() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let loaded = Fixture::get("kcl_rolled_back_2x").load(&stack).await;
    let mut c = config(&loaded, "tidemark-1", ReadMode::FanOut);
    c.consumer_name = Some(unique_name("kcl-rb"));
    c.lease_assignment = LeaseAssignment::Leader;
    let coord = unique_name("kcl-coord");
    let log = Deliveries::default();
    let w = start(&stack, c, Some(&coord), &log);
    assert_reads_exactly_after_checkpoints(&loaded, &log, true).await;
    wait_checkpointed_to_the_end(&stack, &loaded).await;
    w.stop().await;
    loaded.compare_after_run(&stack).await;
    loaded.delete_stream(&stack).await;
}

/// Bumps `key`'s `leaseCounter` every 500 ms until `stop`, as the old owner
/// of a KCL hand-off (`checkpointOwner`) renews it.
fn renew_as_kcl(
    stack: &LocalStack,
    table: &str,
    key: &str,
    stop: CancellationToken,
) -> JoinHandle<()> {
    let (ddb, table, key) = (stack.dynamodb(), table.to_string(), key.to_string());
    tokio::spawn(async move {
        while !stop.is_cancelled() {
            ddb.update_item()
                .table_name(&table)
                .key("leaseKey", AttributeValue::S(key.clone()))
                .update_expression("ADD leaseCounter :one")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .send()
                .await
                .expect("the old owner's renewal");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// A lease a KCL leader was handing from one worker to another when the
/// KCL stopped: while its old owner still renews it, no Tidemark worker
/// takes it; once the renewals stop it is taken within two failover
/// times, its `checkpointOwner` removed, and read from its checkpoint.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_in_kcl_hand_off_waits_for_its_old_owner_then_is_taken() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let loaded = Fixture::get("kcl3x_handoff").load(&stack).await;
    let handoff = loaded.lease().in_handoff[0].clone();
    let old_owner = CancellationToken::new();
    let renewals = renew_as_kcl(&stack, &loaded.lease_table, &handoff, old_owner.clone());
    let log = Deliveries::default();
    let w = start(
        &stack,
        config(&loaded, "tidemark-1", ReadMode::Polling),
        None,
        &log,
    );
    // The old owner counts as a live worker meanwhile: Tidemark takes its
    // share of the three expired leases (two of four), not the hand-off.
    wait_until("expired leases taken", Duration::from_secs(20), || async {
        (w.owned() >= 2).then_some(())
    })
    .await;
    // Three failover times with the old owner alive: never taken.
    let until = tokio::time::Instant::now() + 3 * FAILOVER;
    while tokio::time::Instant::now() < until {
        assert!(
            !w.status.owned_shards().contains(&handoff),
            "a lease still renewed by its KCL owner was taken"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    old_owner.cancel();
    renewals.await.unwrap();
    let stopped = std::time::Instant::now();
    wait_until(
        "the hand-off lease taken",
        2 * FAILOVER + Duration::from_secs(1),
        || async { w.status.owned_shards().contains(&handoff).then_some(()) },
    )
    .await;
    eprintln!(
        "hand-off lease taken {:?} after the last renewal",
        stopped.elapsed()
    );
    assert_reads_exactly_after_checkpoints(&loaded, &log, true).await;
    wait_checkpointed_to_the_end(&stack, &loaded).await;
    w.stop().await;
    loaded.compare_after_run(&stack).await;
    loaded.delete_stream(&stack).await;
}

/// A KCL leader starting a hand-off of a lease Tidemark holds (leaseOwner
/// = the next owner, checkpointOwner = the holder, counter untouched): the
/// holder's next write fails, it stops reading the shard, and writes no
/// checkpoint after.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcl_hand_off_of_a_held_lease_stops_its_reader() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let loaded = Fixture::get("kcl2x").load(&stack).await;
    let log = Deliveries::default();
    let mut c = config(&loaded, "tidemark-1", ReadMode::Polling);
    // Long enough that the lease is not taken back during the test.
    c.failover_time = Duration::from_secs(6);
    let w = start(&stack, c, None, &log);
    wait_until("every shard held", Duration::from_secs(30), || async {
        (w.owned() == 4).then_some(())
    })
    .await;
    let key = loaded.lease().leases[0].clone();
    let ddb = stack.dynamodb();
    ddb.update_item()
        .table_name(&loaded.lease_table)
        .key("leaseKey", AttributeValue::S(key.clone()))
        .update_expression("SET leaseOwner = :next, checkpointOwner = :me")
        .expression_attribute_values(":next", AttributeValue::S("kcl3-worker-b".into()))
        .expression_attribute_values(":me", AttributeValue::S("tidemark-1".into()))
        .send()
        .await
        .unwrap();
    // A hand-off that leaves leaseOwner as it is (the KCL hands a lease to
    // its current owner's name): the counter and owner conditions alone
    // would not see it; `attribute_not_exists(checkpointOwner)` does.
    let other = loaded.lease().leases[1].clone();
    ddb.update_item()
        .table_name(&loaded.lease_table)
        .key("leaseKey", AttributeValue::S(other.clone()))
        .update_expression("SET checkpointOwner = :kcl")
        .expression_attribute_values(":kcl", AttributeValue::S("kcl3-worker-a".into()))
        .send()
        .await
        .unwrap();
    wait_until("both shards given up", Duration::from_secs(6), || async {
        let owned = w.status.owned_shards();
        (!owned.contains(&key) && !owned.contains(&other)).then_some(())
    })
    .await;
    let item = || async {
        ddb.get_item()
            .table_name(&loaded.lease_table)
            .key("leaseKey", AttributeValue::S(key.clone()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item()
            .cloned()
            .unwrap()
    };
    let after = item().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(item().await, after, "the old holder wrote the lease again");
    assert_eq!(after["checkpointOwner"].as_s().unwrap(), "tidemark-1");
    w.stop.cancel();
    // Its other leases are released cleanly; this one is the hand-off's.
    let _ = w.task.await.unwrap();
    loaded.delete_stream(&stack).await;
}

/// Tables a KCL fleet is still migrating are refused at start, naming the
/// state and the KCL's step to finish first; nothing is written to them.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcl_tables_mid_migration_are_refused_with_the_kcls_step() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let cases = [
        ("kcl_mid_migration", "CLIENT_VERSION_UPGRADE_FROM_2X"),
        (
            "kcl_mid_migration_3x_with_rollback",
            "CLIENT_VERSION_3X_WITH_ROLLBACK",
        ),
        (
            "kcl3x_table_migration_pending",
            "TABLE_MIGRATION_STATUS_PENDING",
        ),
    ];
    for (name, evidence) in cases {
        let fixture = Fixture::get(name);
        assert_eq!(fixture.takeover, "refuse");
        let loaded = fixture.load(&stack).await;
        let log = Deliveries::default();
        let w = start(
            &stack,
            config(&loaded, "tidemark-1", ReadMode::Polling),
            None,
            &log,
        );
        let e = tokio::time::timeout(Duration::from_secs(20), w.task)
            .await
            .unwrap_or_else(|_| panic!("{name}: not refused at start"))
            .unwrap()
            .expect_err("refused")
            .to_string();
        let step = fixture.kcl_step.clone().unwrap();
        for needle in [loaded.lease_table.as_str(), evidence, step.as_str()] {
            assert!(e.contains(needle), "{name}: {needle} missing from: {e}");
        }
        assert!(log.lock().unwrap().is_empty(), "{name}: records read");
        loaded.assert_untouched(&stack).await;
        loaded.delete_stream(&stack).await;
    }
}

/// A KCL fleet that still reports worker metrics is refused: the KCL
/// would take its leases back.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_kcl_fleet_is_refused() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let mut loaded = Fixture::get("kcl3x_single_table").load(&stack).await;
    let now = chrono::Utc::now().timestamp();
    stack
        .dynamodb()
        .update_item()
        .table_name(&loaded.lease_table)
        .key("leaseKey", AttributeValue::S("kcl3-worker-a".into()))
        .update_expression("SET lut = :now")
        .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
        .send()
        .await
        .unwrap();
    let log = Deliveries::default();
    let w = start(
        &stack,
        config(&loaded, "tidemark-1", ReadMode::Polling),
        None,
        &log,
    );
    let e = tokio::time::timeout(Duration::from_secs(20), w.task)
        .await
        .expect("refused at start")
        .unwrap()
        .expect_err("refused")
        .to_string();
    for needle in ["kcl3-worker-a", "stop every KCL worker"] {
        assert!(e.contains(needle), "{needle} missing from: {e}");
    }
    assert!(log.lock().unwrap().is_empty(), "records read");
    let lease = loaded.tables.get_mut("lease").unwrap();
    for item in &mut lease.items {
        if item["leaseKey"].as_s().unwrap() == "kcl3-worker-a" {
            item.insert("lut".into(), AttributeValue::N(now.to_string()));
        }
    }
    loaded.assert_untouched(&stack).await;
    loaded.delete_stream(&stack).await;
}

/// The MD5 hash key of a partition key, as Kinesis (and the KCL's
/// de-aggregator) computes it.
fn hash_key(partition_key: &str) -> u128 {
    use md5::{Digest, Md5};
    u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into())
}

/// A KPL aggregate whose sub-records' keys hash outside the shard it was
/// put to, as on an `AUTO` stream, where Kinesis places records itself:
/// the KCL drops such sub-records (`AggregatorUtil`, the "KCL consumers
/// can silently drop aggregated records" of the AWS docs); Tidemark keeps
/// every one of them.
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_sub_records_hashing_outside_their_shard_are_kept() {
    let stack = tidemark_tests::stack().await;
    init_logs();
    let kinesis = stack.kinesis();
    let stream = unique_name("kpl-auto");
    // Two shards: shard 0 takes hash keys below 2^127.
    tidemark_tests::create_stream(&kinesis, &stream, 2).await;
    let half = 1u128 << 127;
    // Sub-records whose partition keys hash into shard 1's range, and
    // sub-records whose explicit hash keys are in shard 1's range.
    let outside: Vec<String> = (0..)
        .map(|i| format!("device-{i}"))
        .filter(|k| hash_key(k) >= half)
        .take(10)
        .collect();
    let top = (half + 12_345).to_string();
    let mut subs: Vec<(&str, Option<&str>, Vec<u8>)> = outside
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), None, format!("{{\"n\":{i}}}").into_bytes()))
        .collect();
    for i in 10..15 {
        subs.push((
            "any",
            Some(top.as_str()),
            format!("{{\"n\":{i}}}").into_bytes(),
        ));
    }
    let refs: Vec<(&str, Option<&str>, &[u8])> = subs
        .iter()
        .map(|(k, h, d)| (*k, *h, d.as_slice()))
        .collect();
    let aggregate = tidemark_consumer::testing::kpl::aggregate_with_hash_keys(&refs);
    let put = kinesis
        .put_record()
        .stream_name(&stream)
        .partition_key("aggregate")
        .explicit_hash_key("0")
        .data(aws_sdk_kinesis::primitives::Blob::new(aggregate))
        .send()
        .await
        .unwrap();
    assert_eq!(put.shard_id(), "shardId-000000000000");
    let leases = unique_name("kpl-auto-leases");
    let mut c = KinesisConfig::new(&stream, &leases, "tidemark-1");
    c.failover_time = FAILOVER;
    c.idle_poll = Duration::from_millis(100);
    let log = Deliveries::default();
    let w = start(&stack, c, None, &log);
    wait_until("every sub-record", Duration::from_secs(30), || async {
        (log.lock().unwrap().len() == subs.len()).then_some(())
    })
    .await;
    let got = log.lock().unwrap().clone();
    assert!(
        got.iter()
            .all(|(shard, seq)| shard == "shardId-000000000000" && seq == put.sequence_number()),
        "{got:?}"
    );
    w.stop().await;
    let _ = kinesis
        .delete_stream()
        .stream_name(&stream)
        .enforce_consumer_deletion(true)
        .send()
        .await;
}
