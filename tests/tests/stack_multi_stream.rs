//! Several streams per worker (`source.streams`), against the local stack:
//! - two streams, each with its own event mapping, read by two workers that
//!   are both stopped mid-stream and started again: every event is stored
//!   once, and each stream's shards resume exactly at their checkpoints
//!   (nothing before a checkpoint is read again, nothing after it skipped);
//! - a lease table written as a KCL multi-stream application writes it
//!   (`account:stream:creationEpoch:shardId` keys, `streamName` and
//!   `shardId` attributes, checkpoints mid-shard, held by a KCL worker that
//!   is gone): Tidemark takes the leases over and reads each shard from its
//!   checkpoint on, without re-reading anything before it; a single-stream
//!   worker pointed at that table is then refused at start;
//! - with `read_mode = "fan_out"`, each stream gets its own registered
//!   consumer and both are read through SubscribeToShard.
//! - with `lease_assignment = "leader"`, each stream elects its own leader
//!   (one lock per stream), both workers get shards of both streams, and
//!   every event is stored once;
//! - a split in one stream is recorded in multi-stream keys (parent at
//!   `SHARD_END` with its children, children naming their parent), and a
//!   dead letter names the stream its record came from.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use serde_json::Value;
use tidemark_consumer::lease::parse_lease_key;
use tidemark_schema::route::Router;
use tidemark_tests::worker::{Running, config, item_count, sdk, test_toml};
use tidemark_tests::{put_records, unique_name, wait_until};
use tidemark_worker::tools::produce::ProduceSpec;

/// A `[source]` reading `streams` (TOML inline tables, one per line).
fn multi_source(name: &str, worker: &str, streams: &[String]) -> String {
    format!(
        r#"[source]
kind = "kinesis"
lease_table = "{name}-leases"
worker_id = "{worker}"
failover_time = "3s"
checkpoint_interval = "1s"
# One shard of each stream per worker: no lease moves while both run, so
# the records read are exactly those after the checkpoints.
max_leases = 1
streams = [
  {}
]
"#,
        streams.join(",\n  ")
    )
}

/// Configs of workers `w1` and `w2` reading streams `a` (shared mapping)
/// and `b` (its own mapping: entity field `sensor`), their `[source]`
/// passed through `edit`.
fn two_workers(
    name: &str,
    a: &str,
    b: &str,
    dead: &std::path::Path,
    edit: impl Fn(String) -> String,
) -> Vec<tidemark_worker::config::Config> {
    let dir = std::env::temp_dir().join(name);
    let streams = [
        format!(r#"{{ stream = "{a}" }}"#),
        format!(r#"{{ stream = "{b}", event = {{ entity_field = "sensor" }} }}"#),
    ];
    ["w1", "w2"]
        .iter()
        .map(|w| {
            let source = edit(multi_source(name, w, &streams));
            config(&dir.join(w), &test_toml(&source, name, dead, "127.0.0.1:0"))
        })
        .collect()
}

/// Events of `spec`, stamped now; stream B's name their entity `sensor`
/// instead of `deviceId` (its own mapping reads that field).
fn events(spec: &ProduceSpec, count: u64, rename_entity: bool) -> Vec<(String, Vec<u8>)> {
    let now = chrono::Utc::now();
    (0..count)
        .map(|i| {
            let mut v = serde_json::to_value(spec.event(i, now)).unwrap();
            let o = v.as_object_mut().unwrap();
            let device = o["deviceId"].as_str().unwrap().to_string();
            if rename_entity {
                let id = o.remove("deviceId").unwrap();
                o.insert("sensor".into(), id);
            }
            (device, serde_json::to_vec(&v).unwrap())
        })
        .collect()
}

/// Puts `records` at about `per_sec`, returning each one's (shard, sequence).
async fn put_paced(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    records: &[(String, Vec<u8>)],
    per_sec: usize,
) -> Vec<(String, String)> {
    let start = std::time::Instant::now();
    let mut out = Vec::new();
    for (i, chunk) in records.chunks(100).enumerate() {
        out.extend(put_records(kinesis, stream, chunk).await);
        // Pacing, not synchronisation: the stop must fall mid-stream.
        let due = Duration::from_secs_f64(((i + 1) * 100) as f64 / per_sec as f64);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
    out
}

/// Checks that each stream's events are stored, each with its stream's own
/// mapping (B's events name their entity `sensor`: the shared mapping could
/// not route them); returns the day's table.
async fn verify_both(
    ddb: &aws_sdk_dynamodb::Client,
    config: &tidemark_worker::config::Config,
    b: &str,
    recs_a: &[(String, Vec<u8>)],
    recs_b: &[(String, Vec<u8>)],
    name: &str,
) -> String {
    let manifest = |recs: &[(String, Vec<u8>)]| -> Vec<Vec<u8>> {
        recs.iter().map(|(_, d)| d.clone()).collect()
    };
    let router_a = Router::new(config.schema.clone()).unwrap();
    let (_, schema_b) = config
        .stream_schemas()
        .into_iter()
        .find(|(s, _)| s == b)
        .unwrap();
    let router_b = Router::new(schema_b).unwrap();
    for (router, recs) in [(&router_a, recs_a), (&router_b, recs_b)] {
        let v = tidemark_worker::tools::verify::verify(
            ddb,
            router,
            &manifest(recs),
            &Default::default(),
        )
        .await
        .unwrap();
        assert_eq!(v.found, recs.len() as u64, "{v:?}");
    }
    let first: Value = serde_json::from_slice(&recs_a[0].1).unwrap();
    format!("{name}_{}", &first["timestamp"].as_str().unwrap()[..10])
}

/// Sequence numbers compare as numbers (up to 56 digits).
fn seq_le(a: &str, b: &str) -> bool {
    (a.len(), a) <= (b.len(), b)
}

/// Every lease item of `table`: key -> (checkpoint, item).
async fn lease_items(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> BTreeMap<String, HashMap<String, AttributeValue>> {
    let out = ddb
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.items()
        .iter()
        .map(|i| (i["leaseKey"].as_s().unwrap().clone(), i.clone()))
        .collect()
}

/// Records of `put` (shard, sequence per record of `stream`) at or before
/// their shard's checkpoint in the lease table.
fn checkpointed(
    leases: &BTreeMap<String, HashMap<String, AttributeValue>>,
    stream: &str,
    put: &[(String, String)],
) -> u64 {
    let mut cps: HashMap<String, String> = HashMap::new();
    for (key, item) in leases {
        let (id, shard) = parse_lease_key(key).expect("multi-stream keys only");
        if id.name == stream {
            cps.insert(
                shard.to_string(),
                item["checkpoint"].as_s().unwrap().clone(),
            );
        }
    }
    put.iter()
        .filter(|(shard, seq)| {
            cps.get(shard)
                .is_some_and(|cp| cp.bytes().all(|b| b.is_ascii_digit()) && seq_le(seq, cp))
        })
        .count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn two_streams_two_workers_restart_store_each_event_once_and_resume() {
    let stack = tidemark_tests::stack().await;
    const EVENTS: u64 = 1500; // per stream
    let name = unique_name("ms");
    let (a, b) = (format!("{name}-a"), format!("{name}-b"));
    let kinesis = stack.kinesis();
    tidemark_tests::create_stream(&kinesis, &a, 2).await;
    tidemark_tests::create_stream(&kinesis, &b, 2).await;
    let dead = std::env::temp_dir().join(&name).join("dead.jsonl");
    let configs = two_workers(&name, &a, &b, &dead, |s| s);
    let sdk = sdk(&stack);
    let spec_a = ProduceSpec {
        devices: 20,
        count: EVENTS,
        hot_factor: 5,
        seed: 1,
    };
    let spec_b = ProduceSpec { seed: 2, ..spec_a };
    let recs_a = events(&spec_a, EVENTS, false);
    let recs_b = events(&spec_b, EVENTS, true);

    // Phase 1, beside the producers: both workers stopped (gracefully) once
    // a third of all events is stored.
    let phase1 = async {
        let w1 = Running::start(&configs[0], &sdk).await;
        let w2 = Running::start(&configs[1], &sdk).await;
        wait_until(
            "phase 1 stores a third",
            Duration::from_secs(90),
            || async { (w1.stored() + w2.stored() >= 2 * EVENTS / 3).then_some(()) },
        )
        .await;
        let (r1, r2) = tokio::join!(w1.stop(), w2.stop());
        (r1, r2)
    };
    let (put_a, put_b, (r1, r2)) = tokio::join!(
        put_paced(&kinesis, &a, &recs_a, 300),
        put_paced(&kinesis, &b, &recs_b, 300),
        phase1
    );
    let phase1_read = r1.records + r2.records;
    assert!(
        r1.stored + r2.stored < 2 * EVENTS,
        "stopped mid-stream: {r1:?} {r2:?}"
    );
    assert!(
        r1.records > 0 && r2.records > 0,
        "both workers read: {r1:?} {r2:?}"
    );

    // The lease table: KCL multi-stream keys only, four leases (two per
    // stream), each with its streamName and shardId.
    let ddb = stack.dynamodb();
    let leases = lease_items(&ddb, &format!("{name}-leases")).await;
    assert_eq!(leases.len(), 4, "{:?}", leases.keys());
    for (key, item) in &leases {
        let (id, shard) = parse_lease_key(key).unwrap_or_else(|| panic!("{key}"));
        assert!(id.name == a || id.name == b, "{key}");
        assert_eq!(item["streamName"].as_s().unwrap(), &id.to_string());
        assert_eq!(item["shardId"].as_s().unwrap(), shard);
        assert!(!item.contains_key("leaseOwner"), "released at stop: {key}");
    }
    let done = checkpointed(&leases, &a, &put_a) + checkpointed(&leases, &b, &put_b);
    // Everything read in phase 1 was acknowledged and checkpointed at the
    // graceful stop.
    assert_eq!(
        done, phase1_read,
        "phase 1 read {phase1_read}, checkpointed {done}"
    );

    // Phase 2: both workers again, until every event is stored.
    let total = 2 * EVENTS;
    let w1 = Running::start(&configs[0], &sdk).await;
    let w2 = Running::start(&configs[1], &sdk).await;
    wait_until(
        "phase 2 stores the rest",
        Duration::from_secs(120),
        || async { (w1.stored() + w2.stored() >= total - done).then_some(()) },
    )
    .await;
    let (s1, s2) = tokio::join!(w1.stop(), w2.stop());
    // Each shard resumed at its checkpoint: exactly the records after the
    // checkpoints were read, none before (no re-read), none skipped.
    assert_eq!(
        s1.records + s2.records,
        total - done,
        "phase 2 read {} + {}; {done} of {total} were checkpointed",
        s1.records,
        s2.records
    );
    assert_eq!(
        r1.stored + r2.stored + s1.stored + s2.stored,
        total,
        "{r1:?} {r2:?} {s1:?} {s2:?}"
    );
    assert!(
        !dead.exists(),
        "no dead letters: each stream's mapping routes it"
    );

    let table = verify_both(&ddb, &configs[0], &b, &recs_a, &recs_b, &name).await;
    assert_eq!(
        item_count(&ddb, &table).await,
        total,
        "nothing stored twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_kcl_multi_stream_lease_table_resumes_without_re_reading() {
    let stack = tidemark_tests::stack().await;
    const EVENTS: u64 = 400; // per stream
    let name = unique_name("kclms");
    let (x, y) = (format!("{name}-x"), format!("{name}-y"));
    let kinesis = stack.kinesis();
    tidemark_tests::create_stream(&kinesis, &x, 2).await;
    tidemark_tests::create_stream(&kinesis, &y, 1).await;
    let spec = ProduceSpec {
        devices: 10,
        count: EVENTS,
        hot_factor: 1,
        seed: 3,
    };
    let recs_x = events(&spec, EVENTS, false);
    let recs_y = events(&ProduceSpec { seed: 4, ..spec }, EVENTS, false);
    let put_x = put_records(&kinesis, &x, &recs_x).await;
    let put_y = put_records(&kinesis, &y, &recs_y).await;

    // The identities a KCL application would have used: x's from
    // DescribeStreamSummary (as Tidemark derives it), y's given in the
    // config as a migrating user would copy them from the table.
    let summary = kinesis
        .describe_stream_summary()
        .stream_name(&x)
        .send()
        .await
        .unwrap();
    let summary = summary.stream_description_summary().unwrap();
    let account = summary.stream_arn().split(':').nth(4).unwrap().to_string();
    let id_x = format!(
        "{account}:{x}:{}",
        summary.stream_creation_timestamp().secs()
    );
    let id_y = format!("123456789012:{y}:1600000000");

    // The lease table as the KCL creates it, with every shard checkpointed
    // mid-shard by a KCL worker that is gone (its leases expire).
    let ddb = stack.dynamodb();
    let table = format!("{name}-leases");
    ddb.create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("leaseKey")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("leaseKey")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let mut expected_after = 0u64;
    let mut checkpoints = BTreeMap::new();
    for (id, put) in [(&id_x, &put_x), (&id_y, &put_y)] {
        let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (shard, seq) in put.iter() {
            by_shard.entry(shard).or_default().push(seq);
        }
        for (shard, seqs) in by_shard {
            // Checkpoint at a record in the middle of the shard.
            let cp = seqs[seqs.len() / 2];
            expected_after += (seqs.len() - seqs.len() / 2 - 1) as u64;
            let s = |v: &str| AttributeValue::S(v.to_string());
            let n = |v: u64| AttributeValue::N(v.to_string());
            let key = format!("{id}:{shard}");
            checkpoints.insert(key.clone(), cp.to_string());
            ddb.put_item()
                .table_name(&table)
                .item("leaseKey", s(&key))
                .item("leaseOwner", s("kcl-app-worker-7"))
                .item("leaseCounter", n(1234))
                .item("checkpoint", s(cp))
                .item("checkpointSubSequenceNumber", n(0))
                .item("ownerSwitchesSinceCheckpoint", n(0))
                .item("streamName", s(id))
                .item("shardId", s(shard))
                .send()
                .await
                .unwrap();
        }
    }

    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let streams = [
        format!(r#"{{ stream = "{x}" }}"#),
        format!(
            r#"{{ stream = "{y}", account_id = "123456789012", creation_epoch = 1600000000 }}"#
        ),
    ];
    let toml = test_toml(
        &multi_source(&name, "tidemark-1", &streams).replace("max_leases = 1\n", ""),
        &name,
        &dead,
        "127.0.0.1:0",
    );
    let config = config(&dir, &toml);
    let sdk = sdk(&stack);
    let w = Running::start(&config, &sdk).await;
    wait_until(
        "the records after the KCL checkpoints are stored",
        Duration::from_secs(90),
        || async { (w.stored() >= expected_after).then_some(()) },
    )
    .await;
    let report = w.stop().await;
    assert_eq!(
        report.records, expected_after,
        "only the records after each KCL checkpoint are read: {report:?}"
    );
    assert_eq!(report.stored, expected_after, "{report:?}");
    let first: Value = serde_json::from_slice(&recs_x[0].1).unwrap();
    let data_table = format!("{name}_{}", &first["timestamp"].as_str().unwrap()[..10]);
    assert_eq!(item_count(&ddb, &data_table).await, expected_after);

    // The KCL's items were taken over in place: same keys (no other format
    // added), checkpoints moved past the KCL's, attributes kept.
    let leases = lease_items(&ddb, &table).await;
    assert_eq!(
        leases.keys().collect::<Vec<_>>(),
        checkpoints.keys().collect::<Vec<_>>()
    );
    for (key, item) in &leases {
        let cp = item["checkpoint"].as_s().unwrap();
        assert!(
            seq_le(&checkpoints[key], cp) && cp != &checkpoints[key],
            "{key}: checkpoint {cp} after the KCL's {}",
            checkpoints[key]
        );
        assert!(item.contains_key("streamName") && item.contains_key("shardId"));
        assert!(!item.contains_key("leaseOwner"), "released at stop: {key}");
    }

    // A single-stream worker pointed at this table is refused at start,
    // naming a multi-stream key, and writes nothing to it.
    let single = tidemark_tests::worker::config(
        &dir.join("single"),
        &test_toml(
            &format!(
                "[source]\nkind = \"kinesis\"\nstream = \"{x}\"\nlease_table = \"{table}\"\nworker_id = \"single\"\n"
            ),
            &name,
            &dead,
            "127.0.0.1:0",
        ),
    );
    let worker = tidemark_worker::Worker::build(&single, &sdk).await.unwrap();
    let run = Box::pin(worker.run(std::future::pending::<()>()));
    let e = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("refused at start")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("{id_x}:")) || e.contains(&format!("{id_y}:")),
        "{e}"
    );
    assert!(e.contains("source.streams"), "{e}");
    assert_eq!(lease_items(&ddb, &table).await.len(), checkpoints.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn fan_out_reads_every_stream_through_its_own_consumer() {
    let stack = tidemark_tests::stack().await;
    const EVENTS: u64 = 300; // per stream
    let name = unique_name("msfo");
    let (a, b) = (format!("{name}-a"), format!("{name}-b"));
    let kinesis = stack.kinesis();
    tidemark_tests::create_stream(&kinesis, &a, 1).await;
    tidemark_tests::create_stream(&kinesis, &b, 2).await;
    let spec = ProduceSpec {
        devices: 10,
        count: EVENTS,
        hot_factor: 1,
        seed: 5,
    };
    let recs_a = events(&spec, EVENTS, false);
    let recs_b = events(&ProduceSpec { seed: 6, ..spec }, EVENTS, true);
    put_records(&kinesis, &a, &recs_a).await;
    put_records(&kinesis, &b, &recs_b).await;

    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let streams = [
        format!(r#"{{ stream = "{a}" }}"#),
        format!(r#"{{ stream = "{b}", event = {{ entity_field = "sensor" }} }}"#),
    ];
    let source = multi_source(&name, "fo-1", &streams)
        .replace("max_leases = 1\n", "read_mode = \"fan_out\"\n");
    let config = config(&dir, &test_toml(&source, &name, &dead, "127.0.0.1:0"));
    let w = Running::start(&config, &sdk(&stack)).await;
    wait_until(
        "both streams are stored through fan-out",
        Duration::from_secs(90),
        || async { (w.stored() >= 2 * EVENTS).then_some(()) },
    )
    .await;
    let report = w.stop().await;
    assert_eq!(report.stored, 2 * EVENTS, "{report:?}");
    assert_eq!(report.dead_lettered(), 0, "{report:?}");
    // One consumer of the lease table's name on each stream.
    for stream in [&a, &b] {
        let arn = kinesis
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .unwrap()
            .stream_description_summary()
            .unwrap()
            .stream_arn()
            .to_string();
        let consumers = kinesis
            .list_stream_consumers()
            .stream_arn(&arn)
            .send()
            .await
            .unwrap();
        let names: Vec<_> = consumers
            .consumers()
            .iter()
            .map(|c| c.consumer_name())
            .collect();
        assert_eq!(names, [format!("{name}-leases")], "{stream}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_split_in_one_stream_and_a_dead_letter_carry_the_stream() {
    let stack = tidemark_tests::stack().await;
    const EVENTS: u64 = 200; // per stream and round
    let name = unique_name("msrs");
    let (a, b) = (format!("{name}-a"), format!("{name}-b"));
    let kinesis = stack.kinesis();
    tidemark_tests::create_stream(&kinesis, &a, 1).await;
    tidemark_tests::create_stream(&kinesis, &b, 1).await;
    let spec = ProduceSpec {
        devices: 10,
        count: 2 * EVENTS,
        hot_factor: 1,
        seed: 7,
    };
    let recs_a = events(&spec, 2 * EVENTS, false);
    let recs_b = events(&ProduceSpec { seed: 8, ..spec }, 2 * EVENTS, true);
    let n = EVENTS as usize;
    put_records(&kinesis, &a, &recs_a[..n]).await;
    put_records(&kinesis, &b, &recs_b[..n]).await;

    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let streams = [
        format!(r#"{{ stream = "{a}" }}"#),
        format!(r#"{{ stream = "{b}", event = {{ entity_field = "sensor" }} }}"#),
    ];
    let source = multi_source(&name, "rs-1", &streams).replace("max_leases = 1\n", "");
    let config = config(&dir, &test_toml(&source, &name, &dead, "127.0.0.1:0"));
    let w = Running::start(&config, &sdk(&stack)).await;
    wait_until(
        "the first round is stored",
        Duration::from_secs(60),
        || async { (w.stored() >= 2 * EVENTS).then_some(()) },
    )
    .await;

    // Split a's only shard; the second round goes to its children. One
    // malformed record in b is dead-lettered, naming b.
    let parent = kinesis
        .list_shards()
        .stream_name(&a)
        .send()
        .await
        .unwrap()
        .shards()[0]
        .clone();
    let r = parent.hash_key_range().unwrap();
    let (lo, hi): (u128, u128) = (
        r.starting_hash_key().parse().unwrap(),
        r.ending_hash_key().parse().unwrap(),
    );
    kinesis
        .split_shard()
        .stream_name(&a)
        .shard_to_split(parent.shard_id())
        .new_starting_hash_key((lo + (hi - lo) / 2).to_string())
        .send()
        .await
        .unwrap();
    tidemark_tests::wait_stream_active(&kinesis, &a).await;
    put_records(&kinesis, &a, &recs_a[n..]).await;
    put_records(&kinesis, &b, &recs_b[n..]).await;
    put_records(&kinesis, &b, &[("k".into(), b"not json".to_vec())]).await;
    wait_until(
        "the second round is stored",
        Duration::from_secs(90),
        || async { (w.stored() >= 4 * EVENTS).then_some(()) },
    )
    .await;
    let report = w.stop().await;
    assert_eq!(report.stored, 4 * EVENTS, "{report:?}");
    assert_eq!(report.dead_lettered(), 1, "{report:?}");

    // The dead letter names stream b.
    let text = std::fs::read_to_string(&dead).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0]["source"].to_string().contains(&b), "{text}");

    // The split in multi-stream keys: the parent at SHARD_END with its
    // children (bare shard ids, as the KCL writes them), each child keyed
    // with the stream and naming its parent.
    let leases = lease_items(&stack.dynamodb(), &format!("{name}-leases")).await;
    let of_a: Vec<_> = leases
        .iter()
        .filter(|(k, _)| parse_lease_key(k).unwrap().0.name == a)
        .collect();
    assert_eq!(of_a.len(), 3, "{:?}", leases.keys());
    let (pkey, pitem) = of_a
        .iter()
        .find(|(k, _)| k.ends_with(parent.shard_id()))
        .unwrap();
    assert_eq!(pitem["checkpoint"].as_s().unwrap(), "SHARD_END", "{pkey}");
    let children = pitem["childShardIds"].as_ss().unwrap();
    assert_eq!(children.len(), 2);
    for child in children {
        let (_, citem) = of_a
            .iter()
            .find(|(k, _)| parse_lease_key(k).unwrap().1 == child)
            .unwrap_or_else(|| panic!("no lease for child {child}"));
        assert_eq!(
            citem["parentShardId"].as_ss().unwrap(),
            &[parent.shard_id().to_string()]
        );
        assert_eq!(citem["shardId"].as_s().unwrap(), child);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn leader_mode_elects_a_leader_per_stream_and_stores_each_event_once() {
    let stack = tidemark_tests::stack().await;
    const EVENTS: u64 = 900; // per stream
    let name = unique_name("msld");
    let (a, b) = (format!("{name}-a"), format!("{name}-b"));
    let kinesis = stack.kinesis();
    tidemark_tests::create_stream(&kinesis, &a, 2).await;
    tidemark_tests::create_stream(&kinesis, &b, 2).await;
    let dead = std::env::temp_dir().join(&name).join("dead.jsonl");
    let configs = two_workers(&name, &a, &b, &dead, |s| {
        s.replace("max_leases = 1\n", "lease_assignment = \"leader\"\n")
    });
    let sdk = sdk(&stack);
    let spec = ProduceSpec {
        devices: 20,
        count: EVENTS,
        hot_factor: 1,
        seed: 7,
    };
    let recs_a = events(&spec, EVENTS, false);
    let recs_b = events(&ProduceSpec { seed: 8, ..spec }, EVENTS, true);
    let ddb = stack.dynamodb();
    let leases_table = format!("{name}-leases");

    let w1 = Running::start(&configs[0], &sdk).await;
    let w2 = Running::start(&configs[1], &sdk).await;
    let run = async {
        // Each stream's leader spreads its two shards over both workers.
        wait_until(
            "each worker holds a lease of each stream",
            Duration::from_secs(60),
            || async {
                let leases = lease_items(&ddb, &leases_table).await;
                let held = |w: &str, s: &str| {
                    leases.iter().any(|(k, i)| {
                        parse_lease_key(k).is_some_and(|(id, _)| id.name == s)
                            && i.get("leaseOwner").and_then(|o| o.as_s().ok())
                                == Some(&w.to_string())
                    })
                };
                (held("w1", &a) && held("w2", &a) && held("w1", &b) && held("w2", &b)).then_some(())
            },
        )
        .await;
        // One leader lock per stream in the coordinator table (a clean
        // stop deletes them, so this is looked at while both run).
        let coord = ddb
            .scan()
            .table_name(format!("{name}-coordinator"))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        let prefix = format!("kinesis-leader#{leases_table}#");
        let mut locks: Vec<String> = coord
            .items()
            .iter()
            .filter_map(|i| i["leaseKey"].as_s().ok())
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        locks.sort();
        assert_eq!(locks.len(), 2, "{locks:?}");
        assert!(locks[0].contains(&format!(":{a}:")), "{locks:?}");
        assert!(locks[1].contains(&format!(":{b}:")), "{locks:?}");
        wait_until(
            "every event is stored",
            Duration::from_secs(120),
            || async { (w1.stored() + w2.stored() >= 2 * EVENTS).then_some(()) },
        )
        .await;
    };
    tokio::join!(
        put_paced(&kinesis, &a, &recs_a, 150),
        put_paced(&kinesis, &b, &recs_b, 150),
        run
    );
    let (r1, r2) = tokio::join!(w1.stop(), w2.stop());
    assert!(r1.records > 0 && r2.records > 0, "{r1:?} {r2:?}");
    assert!(!dead.exists(), "no dead letters");

    let table = verify_both(&ddb, &configs[0], &b, &recs_a, &recs_b, &name).await;
    assert_eq!(
        item_count(&ddb, &table).await,
        2 * EVENTS,
        "stored once each"
    );
}
