//! Adaptive write sharding end to end, through the limits proxy enforcing
//! small partitions: two workers on one stream, one entity hotter than a
//! partition (a low `hold_threshold` makes the split quick); a split is
//! recorded and used, one worker is killed mid-way (its records are
//! written again by the other, under the same keys), and `query` (range
//! and latest) and `verify` find every event of the split entity exactly
//! once, in time order, across the split moment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use tidemark_schema::query::TimeRange;
use tidemark_schema::route::Router;
use tidemark_schema::split::{SPLITS_PK, Split};
use tidemark_tests::worker::{Running, config, kinesis_source, sdk, test_toml};
use tidemark_tests::{start_limits_proxy, unique_name, wait_until};

/// One partition serves this many WCU/s here (AWS: 1,000): the hot entity
/// offers three times that (throttled for sure, even on a busy emulator).
const PARTITION_WCU: f64 = 20.0;
const HOT: &str = "sensor-alpha-001";
const HOT_PER_SEC: u64 = 60;
/// Ticks (of 100 ms) produced after the first split is seen, and the most
/// before it.
const AFTER_SPLIT_TICKS: u64 = 50;
const MAX_TICKS: u64 = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_hot_entity_is_split_and_read_back_exactly_once_across_a_killed_worker() {
    let stack = tidemark_tests::stack().await;
    let name = unique_name("adaptive");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let table = format!("{name}_{today}");
    let proxy = start_limits_proxy(&stack, |c| {
        c.partition_wcu = PARTITION_WCU;
        c.initial_credit_secs = 0.0;
        c.burst_secs = 0.0;
        c.partitions = vec![(table.clone(), 64)];
    })
    .await;
    let mut limited = stack.clone();
    limited.dynamodb_url = proxy.url.clone();
    let worker_config = |id: &str| {
        let source = kinesis_source(&name).replace("e2e-worker", id);
        let mut toml = test_toml(&source, &name, &dead, "127.0.0.1:0");
        toml = toml.replace(
            "ttl_attribute = \"expires_at\"",
            "ttl_attribute = \"expires_at\"\nadaptive_sharding = { enabled = true, max_fan_out = 8, hold_threshold = \"2s\", refresh_interval = \"500ms\", learn_delay = \"2s\" }",
        );
        toml.push_str(&format!("\n[writer]\nmax_key_wcu = {PARTITION_WCU}\n"));
        config(&dir.join(id), &toml)
    };
    let (config_a, config_b) = (worker_config("worker-a"), worker_config("worker-b"));
    tidemark_tests::create_stream(&stack.kinesis(), &name, 2).await;

    let a = Running::start(&config_a, &sdk(&limited)).await;
    let b = Running::start(&config_b, &sdk(&limited)).await;

    // The hot entity at 3 partitions' worth, four cold ones at 2.5/s each
    // (far below a partition: they must not be split), stamped as sent,
    // until 5 s after the first split is recorded.
    let mut manifest: Vec<(String, i64, String, Vec<u8>)> = Vec::new();
    let started = std::time::Instant::now();
    let mut a = Some(a);
    let mut split_at = None;
    for tick in 0..MAX_TICKS {
        let now = chrono::Utc::now();
        let mut entries = Vec::new();
        let per_tick = HOT_PER_SEC / 10;
        for i in 0..=per_tick {
            let entity = if i < per_tick {
                HOT.to_owned()
            } else {
                format!("cold-{}", (tick + i) % 4)
            };
            let ts = now + chrono::Duration::milliseconds(i as i64);
            let id = format!("ev-{tick:06}-{i:03}");
            let body = format!(
                r#"{{"deviceId":"{entity}","timestamp":"{}","eventId":"{id}","v":{i}}}"#,
                ts.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            );
            entries.push(
                PutRecordsRequestEntry::builder()
                    .partition_key(format!("{entity}-{i}"))
                    .data(Blob::new(body.clone().into_bytes()))
                    .build()
                    .unwrap(),
            );
            manifest.push((entity, ts.timestamp_millis(), id, body.into_bytes()));
        }
        let out = stack
            .kinesis()
            .put_records()
            .stream_name(&name)
            .set_records(Some(entries))
            .send()
            .await
            .unwrap();
        assert_eq!(out.failed_record_count(), Some(0));
        // Worker A is killed (no drain, no checkpoint of what it holds)
        // once the split is recorded, half-way: B takes its shard over and
        // writes its records again.
        if split_at.is_none() && tick % 5 == 0 && !splits_of(&stack, &table).await.is_empty() {
            split_at = Some(tick);
            a.take().unwrap().kill().await;
        }
        if split_at.is_some_and(|t| tick >= t + AFTER_SPLIT_TICKS) {
            break;
        }
        let due = Duration::from_millis(100 * (tick + 1));
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }

    assert!(split_at.is_some(), "no split within {MAX_TICKS} ticks");
    let ddb = stack.dynamodb();
    let router = Router::new(config_b.schema.clone()).unwrap();
    let events: Vec<Vec<u8>> = manifest.iter().map(|m| m.3.clone()).collect();
    // Every event stored (after the failover, B reads A's shard again).
    let verified = wait_until("every event stored", Duration::from_secs(60), || async {
        let v = tidemark_worker::tools::verify::verify(&ddb, &router, &events, &Default::default())
            .await
            .unwrap();
        (v.found == events.len() as u64).then_some(v)
    })
    .await;
    eprintln!("all stored after {:.1}s", started.elapsed().as_secs_f64());
    assert_eq!(
        (verified.missing, verified.mismatched),
        (0, 0),
        "{verified:?}"
    );
    b.stop().await;

    // A split was recorded before use, and the hot entity's items spread
    // over its sub-keys.
    let splits = splits_of(&stack, &table).await;
    assert!(
        splits.iter().any(|s| s.entity == HOT && s.fan_out >= 2),
        "{splits:?}"
    );
    assert!(
        splits.iter().all(|s| s.entity == HOT),
        "only the hot entity: {splits:?}"
    );
    let first_from = splits.iter().map(|s| s.from_ms).min().unwrap();
    let hot: Vec<&(String, i64, String, Vec<u8>)> =
        manifest.iter().filter(|m| m.0 == HOT).collect();
    assert!(
        hot.iter().any(|m| m.1 < first_from) && hot.iter().any(|m| m.1 >= first_from),
        "the events span the split moment"
    );
    let items = tidemark_tests::scan_items(&ddb, &table).await;
    let hot_pks: BTreeSet<String> = items
        .iter()
        .filter(|i| i.get("entity_id") == Some(&AttributeValue::S(HOT.into())))
        .filter_map(|i| match i.get("pk") {
            Some(AttributeValue::S(pk)) => Some(pk.clone()),
            _ => None,
        })
        .collect();
    assert!(hot_pks.len() >= 2, "{hot_pks:?}");

    // `query`: each event of the split entity once, in time order.
    let mut expected: Vec<(i64, String)> = hot.iter().map(|m| (m.1, m.2.clone())).collect();
    expected.sort();
    let range = TimeRange {
        start_ms: expected[0].0 - 1000,
        end_ms: expected[expected.len() - 1].0 + 1000,
    };
    let order_key = |v: serde_json::Value| {
        (
            v["ts_ms"].as_i64().unwrap(),
            v["event_id"].as_str().unwrap().to_owned(),
        )
    };
    let got: Vec<(i64, String)> =
        tidemark_worker::tools::query::range(&ddb, &config_b.schema, HOT, range)
            .await
            .unwrap()
            .iter()
            .map(tidemark_worker::tools::query::to_json)
            .map(order_key)
            .collect();
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected, "exactly once, oldest first");
    let latest = tidemark_worker::tools::query::latest(&ddb, &config_b.schema, HOT, range)
        .await
        .unwrap()
        .map(|i| order_key(tidemark_worker::tools::query::to_json(&i)));
    assert_eq!(latest.as_ref(), expected.last());
    // Every item of the table is an event or a split record: nothing twice.
    assert_eq!(items.len(), manifest.len() + splits.len());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = ddb.delete_table().table_name(&table).send().await;
    let _ = stack
        .kinesis()
        .delete_stream()
        .stream_name(&name)
        .send()
        .await;
}

/// The split records of `table` (none while it does not exist).
async fn splits_of(stack: &tidemark_tests::LocalStack, table: &str) -> Vec<Split> {
    let Ok(out) = stack
        .dynamodb()
        .query()
        .table_name(table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(SPLITS_PK.into()))
        .consistent_read(true)
        .send()
        .await
    else {
        return Vec::new();
    };
    out.items()
        .iter()
        .map(|i| Split::from_item(i, &Default::default()).unwrap())
        .collect()
}
