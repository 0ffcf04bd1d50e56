//! `tidemark run` with a Kinesis source, in-process: a run stopped through
//! its shutdown future mid-stream and started again loses nothing and stores
//! nothing twice; `query` plans return exactly the stored events of a range;
//! malformed records among good ones are dead-lettered, the good ones stored.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use serde_json::Value;
use tidemark_consumer::fixture::read_fixture;
use tidemark_schema::query::TimeRange;
use tidemark_schema::route::Router;
use tidemark_tests::worker::{
    Running, config, item_count, kinesis_source, produce, sdk, test_toml,
};
use tidemark_tests::{repo_root, unique_name, wait_until};
use tidemark_worker::tools::produce::{ProduceSpec, Target};

fn toml(name: &str, dead: &std::path::Path) -> String {
    test_toml(&kinesis_source(name), name, dead, "127.0.0.1:0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn run_stopped_mid_stream_then_restarted_loses_and_duplicates_nothing() {
    let stack = tidemark_tests::stack().await;
    const EVENTS: u64 = 3000;
    let name = unique_name("e2e");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let config = config(&dir, &toml(&name, &dead));
    let sdk = sdk(&stack);
    tidemark_tests::create_stream(&stack.kinesis(), &name, 2).await;

    // The producer keeps writing (paced) while the first run is stopped, so
    // the stop really falls mid-stream.
    let target = Target::kinesis(stack.kinesis(), name.clone());
    let spec = ProduceSpec {
        devices: 20,
        count: EVENTS,
        hot_factor: 5,
        seed: 1,
    };
    // First run, beside the producer: stopped once a third is stored.
    let first_run = async {
        let run1 = Running::start(&config, &sdk).await;
        wait_until(
            "the first run stores a third",
            Duration::from_secs(60),
            || async { (run1.stored() >= EVENTS / 3).then_some(()) },
        )
        .await;
        run1.stop().await
    };
    let (manifest, report1) = tokio::join!(produce(&target, &spec, EVENTS, 500), first_run);
    assert!(
        report1.stored < EVENTS,
        "the first run was stopped mid-stream ({} stored)",
        report1.stored
    );

    // Second run finishes the stream.
    let run2 = Running::start(&config, &sdk).await;
    wait_until(
        "the second run stores the rest",
        Duration::from_secs(90),
        || async { (report1.stored + run2.stored() >= EVENTS).then_some(()) },
    )
    .await;
    let report2 = run2.stop().await;

    // Nothing twice: a graceful stop checkpoints every stored record, so the
    // second run stores exactly the rest.
    assert_eq!(
        report1.stored + report2.stored,
        EVENTS,
        "run 1: {report1:?}, run 2: {report2:?}"
    );
    assert_eq!(report1.dead_lettered() + report2.dead_lettered(), 0);
    // Nothing lost: every event is there, with its content.
    let router = Router::new(config.schema.clone()).unwrap();
    let ddb = stack.dynamodb();
    let verified =
        tidemark_worker::tools::verify::verify(&ddb, &router, &manifest, &Default::default())
            .await
            .unwrap();
    assert_eq!(verified.found, EVENTS, "{verified:?}");
    // And nothing else: the table holds exactly the events.
    let first: Value = serde_json::from_slice(&manifest[0]).unwrap();
    let table = format!("{name}_{}", &first["timestamp"].as_str().unwrap()[..10]);
    assert_eq!(item_count(&ddb, &table).await, EVENTS);
    assert!(!dead.exists(), "no dead letters expected");

    // The query plans return exactly the stored events of a range, in time
    // order.
    let events: Vec<Value> = manifest
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .filter(|e: &Value| e["deviceId"] == "device-0000")
        .collect();
    let mut times: Vec<chrono::DateTime<chrono::Utc>> = events
        .iter()
        .map(|e| e["timestamp"].as_str().unwrap().parse().unwrap())
        .collect();
    times.sort();
    let (from, to) = (times[times.len() / 4], times[times.len() * 3 / 4]);
    let mut expected: Vec<(i64, String)> = events
        .iter()
        .map(|e| {
            let t: chrono::DateTime<chrono::Utc> =
                e["timestamp"].as_str().unwrap().parse().unwrap();
            (
                t.timestamp_millis(),
                e["eventId"].as_str().unwrap().to_string(),
            )
        })
        .filter(|(t, _)| from.timestamp_millis() <= *t && *t <= to.timestamp_millis())
        .collect();
    expected.sort();
    let range = TimeRange {
        start_ms: from.timestamp_millis(),
        end_ms: to.timestamp_millis(),
    };
    let got: Vec<(i64, String)> =
        tidemark_worker::tools::query::range(&ddb, &config.schema, "device-0000", range)
            .await
            .unwrap()
            .iter()
            .map(tidemark_worker::tools::query::to_json)
            .map(|v| {
                let t: chrono::DateTime<chrono::Utc> = v["ts"].as_str().unwrap().parse().unwrap();
                (
                    t.timestamp_millis(),
                    v["event_id"].as_str().unwrap().to_string(),
                )
            })
            .collect();
    assert!(!expected.is_empty());
    assert_eq!(got, expected, "the range, oldest first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn malformed_records_are_dead_lettered_and_good_ones_stored() {
    let stack = tidemark_tests::stack().await;
    let name = unique_name("kw");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let config = config(&dir, &toml(&name, &dead));
    tidemark_tests::create_stream(&stack.kinesis(), &name, 2).await;
    // 500 good events (timestamps now, so inside the current period) and the
    // malformed fixture's records in between.
    let now = chrono::Utc::now();
    let mut input: Vec<(String, Vec<u8>)> = (0..500)
        .map(|i| {
            let dev = format!("sensor-{}", i % 17);
            let ts = (now - chrono::Duration::milliseconds(i)).to_rfc3339();
            let body = format!("{{\"deviceId\":\"{dev}\",\"timestamp\":\"{ts}\",\"value\":{i}}}");
            (dev, body.into_bytes())
        })
        .collect();
    let malformed = read_fixture(&repo_root().join("tests/fixtures/malformed.jsonl")).unwrap();
    for (i, m) in malformed.iter().enumerate() {
        input.insert(i * 50, (m.partition_key.clone(), m.bytes().unwrap()));
    }
    let entries: Vec<_> = input
        .iter()
        .map(|(pk, d)| {
            PutRecordsRequestEntry::builder()
                .partition_key(pk)
                .data(Blob::new(d.clone()))
                .build()
                .unwrap()
        })
        .collect();
    for chunk in entries.chunks(500) {
        let out = stack
            .kinesis()
            .put_records()
            .stream_name(&name)
            .set_records(Some(chunk.to_vec()))
            .send()
            .await
            .unwrap();
        assert_eq!(out.failed_record_count(), Some(0));
    }

    let run = Running::start(&config, &sdk(&stack)).await;
    // The malformed fixture's records all fail routing under the default
    // field names (deviceId/timestamp): its two well-formed events use
    // device_id/ts, so they are missing fields here.
    let dead_lines = || {
        std::fs::read_to_string(&dead)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    wait_until(
        "every record stored or dead-lettered",
        Duration::from_secs(60),
        || async { (run.stored() >= 500 && dead_lines() >= malformed.len()).then_some(()) },
    )
    .await;
    let report = run.stop().await;
    assert_eq!(report.records, input.len() as u64, "{report:?}");
    assert_eq!(report.stored, 500, "{report:?}");
    assert_eq!(report.dead_lettered(), malformed.len() as u64, "{report:?}");
    assert_eq!(dead_lines(), malformed.len());
    // Every stored event is one item.
    // The events span half a second before `now`: one day's table, or two
    // at midnight.
    let days: std::collections::BTreeSet<String> = [now, now - chrono::Duration::milliseconds(500)]
        .iter()
        .map(|t| t.format("%Y-%m-%d").to_string())
        .collect();
    let mut items = 0;
    for day in days {
        let table = format!("{name}_{day}");
        if stack
            .dynamodb()
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .is_ok()
        {
            items += item_count(&stack.dynamodb(), &table).await;
        }
    }
    assert_eq!(items, 500, "one item per event");
}
