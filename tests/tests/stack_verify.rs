//! `tidemark verify` against the local stack: every stored item is found,
//! and missing or changed items (a missing table included) are reported as
//! such, not as an error.

// Helpers outside #[test] fns: a panic there is a failed assertion too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use chrono::Utc;
use tidemark_schema::Origin;
use tidemark_schema::route::{RouteCache, Router, RouterConfig};
use tidemark_tests::{TableCapacity, create_table, stack, unique_name};
use tidemark_worker::tools::produce::ProduceSpec;
use tidemark_worker::tools::verify::{VerifyOptions, verify};

/// Writes `items` to `table`, 25 a call, unprocessed ones resent.
async fn put_all(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    items: Vec<HashMap<String, AttributeValue>>,
) {
    for chunk in items.chunks(25) {
        let mut requests: Vec<WriteRequest> = chunk
            .iter()
            .map(|item| {
                WriteRequest::builder()
                    .put_request(
                        PutRequest::builder()
                            .set_item(Some(item.clone()))
                            .build()
                            .unwrap(),
                    )
                    .build()
            })
            .collect();
        for _ in 0..20 {
            let out = client
                .batch_write_item()
                .request_items(table, requests)
                .send()
                .await
                .unwrap();
            requests = out
                .unprocessed_items()
                .and_then(|u| u.get(table))
                .cloned()
                .unwrap_or_default();
            if requests.is_empty() {
                break;
            }
        }
        assert!(requests.is_empty(), "unprocessed writes left in {table}");
    }
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn verify_finds_every_stored_item_and_reports_missing_and_changed_ones() {
    let stack = stack().await;
    let client = stack.dynamodb();
    let router = Router::new(RouterConfig::with_prefix(unique_name("verify"))).unwrap();
    assert_eq!(
        (
            router.config().key_attributes.pk.as_str(),
            router.config().key_attributes.sk.as_str()
        ),
        ("pk", "sk"),
        "create_table keys tables by pk and sk"
    );
    let spec = ProduceSpec {
        devices: 20,
        count: 1500,
        hot_factor: 5,
        seed: 29,
    };
    let now = Utc::now();
    let mut events: Vec<Vec<u8>> = (0..spec.count)
        .map(|n| serde_json::to_vec(&spec.event(n, now)).unwrap())
        .collect();
    // Five events of a period whose table does not exist: missing, not an error.
    let old = now - chrono::Duration::days(3);
    events.extend((0..5).map(|n| serde_json::to_vec(&spec.event(10_000 + n, old)).unwrap()));

    let origin = Origin::Kinesis {
        stream: "s".into(),
        shard_id: "shardId-0".into(),
        sequence_number: "1".into(),
        sub_sequence_number: 0,
    };
    let mut by_table: HashMap<String, Vec<HashMap<String, AttributeValue>>> = HashMap::new();
    for raw in &events[..spec.count as usize] {
        let routed = router
            .route(raw, &origin, 0, now, &mut RouteCache::default())
            .unwrap()
            .new;
        by_table
            .entry(routed.table.to_string())
            .or_default()
            .push(routed.item.to_item().unwrap());
    }
    let mut missing = BTreeSet::new();
    let mut changed = BTreeSet::new();
    let key_of = |item: &HashMap<String, AttributeValue>| {
        format!(
            "{}|{}",
            item["pk"].as_s().unwrap(),
            item["sk"].as_s().unwrap()
        )
    };
    for raw in &events[spec.count as usize..] {
        missing.insert(key_of(
            &router
                .route(raw, &origin, 0, old, &mut RouteCache::default())
                .unwrap()
                .new
                .item
                .to_item()
                .unwrap(),
        ));
    }
    for (table, items) in &mut by_table {
        create_table(&client, table, true, TableCapacity::OnDemand).await;
        // Leave out every 150th item, and change one attribute of every
        // 200th-but-one item.
        let mut kept = Vec::new();
        for (i, mut item) in items.drain(..).enumerate() {
            let key = key_of(&item);
            if i % 150 == 0 {
                missing.insert(key);
                continue;
            }
            if i % 200 == 1 {
                item.insert("temperature".into(), AttributeValue::N("-273.15".into()));
                changed.insert(key);
            }
            kept.push(item);
        }
        put_all(&client, table, kept).await;
    }
    assert!(!missing.is_empty() && !changed.is_empty());

    let options = VerifyOptions {
        endpoint: stack.dynamodb_url.clone(),
        ..VerifyOptions::default()
    };
    let report = tokio::time::timeout(
        Duration::from_secs(120),
        verify(&client, &router, &events, &options),
    )
    .await
    .expect("verify finishes")
    .unwrap();

    let absent = missing.len() as u64;
    assert_eq!(report.events, spec.count + 5);
    assert_eq!(report.unroutable, 0);
    assert_eq!(report.missing, absent, "{report:?}");
    assert_eq!(report.mismatched, changed.len() as u64, "{report:?}");
    assert_eq!(report.found, report.events - absent - changed.len() as u64);
    assert!(!report.complete());
    // Examples name the keys, so a user can look them up.
    for example in &report.examples {
        let key = example.rsplit(' ').next().unwrap();
        let listed = if example.starts_with("missing") {
            missing.contains(key)
        } else {
            changed.contains(key)
        };
        assert!(listed, "unexpected example {example}");
    }
    // The emulator is shared and keeps everything in memory.
    for table in by_table.keys() {
        client
            .delete_table()
            .table_name(table)
            .send()
            .await
            .unwrap();
    }
}
