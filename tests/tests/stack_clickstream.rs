//! The clickstream fixture (`tests/fixtures/clickstream`): events with
//! nested objects, arrays, a composite entity, local times in a named zone
//! and epoch-microsecond times, and fields named like Tidemark's own
//! attributes, sent as NDJSON records (some gzip-compressed) and read by
//! `tidemark run` with the documented mapping: nothing dead-lettered, and
//! `verify` finds every event stored with its mapped content.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use tidemark_schema::route::{RouteCache, Router};
use tidemark_tests::worker::{Running, config, kinesis_source, sdk, test_toml};
use tidemark_tests::{repo_root, routed_item, unique_name, wait_until};

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// The fixture's events packed into NDJSON records of 1, 2, 3 and 5 events
/// in turn, every third record gzip-compressed, some with a final newline.
fn records(events: &[&str]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    for k in 0.. {
        if i >= events.len() {
            break;
        }
        let n = [1, 2, 3, 5][k % 4].min(events.len() - i);
        let mut body = events[i..i + n].join(if k % 5 == 4 { "\r\n" } else { "\n" });
        if k % 2 == 1 {
            body.push('\n');
        }
        out.push(if k % 3 == 2 {
            gzip(body.as_bytes())
        } else {
            body.into_bytes()
        });
        i += n;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn clickstream_fixture_replays_with_its_mapping_and_verifies() {
    let stack = tidemark_tests::stack().await;
    let fixture = repo_root().join("tests/fixtures/clickstream");
    let text = std::fs::read_to_string(fixture.join("events.ndjson")).unwrap();
    let events: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mapping = std::fs::read_to_string(fixture.join("mapping.toml")).unwrap();

    let name = unique_name("click");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let source = format!("{}record_format = \"ndjson\"\n", kinesis_source(&name));
    // The fixture's times are fixed (November 2025): a long retention keeps
    // their tables writable.
    let toml = test_toml(&source, &name, &dead, "127.0.0.1:0").replace(
        "period = \"day\"",
        "period = \"day\"\nretention = \"36500d\"",
    ) + &mapping;
    let config = config(&dir, &toml);
    let sdk = sdk(&stack);
    tidemark_tests::create_stream(&stack.kinesis(), &name, 1).await;

    let records = records(&events);
    assert!(records.len() > 10 && records.iter().any(|r| r.starts_with(&[0x1f, 0x8b])));
    let entries: Vec<PutRecordsRequestEntry> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            PutRecordsRequestEntry::builder()
                .partition_key(format!("p{i}"))
                .data(Blob::new(r.clone()))
                .build()
                .unwrap()
        })
        .collect();
    let put = stack
        .kinesis()
        .put_records()
        .stream_name(&name)
        .set_records(Some(entries))
        .send()
        .await
        .unwrap();
    assert_eq!(put.failed_record_count(), Some(0));

    let run = Running::start(&config, &sdk).await;
    let total = events.len() as u64;
    wait_until(
        "every inner event is stored",
        Duration::from_secs(90),
        || async { (run.stored() >= total).then_some(()) },
    )
    .await;
    let report = run.stop().await;
    assert_eq!(report.stored, total, "{report:?}");
    assert_eq!(report.dead_lettered(), 0, "{report:?}");
    assert!(!dead.exists(), "no dead letters expected");

    // Every event stored with its mapped content.
    let router = Router::new(config.schema.clone()).unwrap();
    let ddb = stack.dynamodb();
    let manifest: Vec<Vec<u8>> = events.iter().map(|e| e.as_bytes().to_vec()).collect();
    let verified =
        tidemark_worker::tools::verify::verify(&ddb, &router, &manifest, &Default::default())
            .await
            .unwrap();
    assert_eq!(verified.found, total, "{verified:?}");
    assert_eq!(verified.unroutable, 0, "{verified:?}");

    // The first event's item, spelled out as docs/event-mapping.md shows it.
    let routed = router
        .route(
            events[0].as_bytes(),
            &tidemark_schema::Origin::Sqs {
                queue: "q".into(),
                message_id: "m".into(),
                index: 0,
            },
            0,
            chrono::Utc::now(),
            &mut RouteCache::default(),
        )
        .unwrap()
        .new;
    let item = routed_item(&ddb, &routed)
        .await
        .expect("the first event is stored");
    let s = |k: &str| item[k].as_s().unwrap().as_str();
    assert_eq!(s("entity_id"), "acme:1000");
    assert_eq!(s("ts"), "2025-11-22T04:00:00.000Z");
    assert_eq!(s("event_id"), "click-0000");
    assert_eq!(s("url"), "/");
    assert_eq!(s("status"), "404");
    assert_eq!(s("payload_ts"), "client-0");
    assert_eq!(item["is_new"], AttributeValue::Bool(true));
    let amount = item["amount"].as_n().unwrap();
    assert!(
        amount.trim_end_matches('0').trim_end_matches('.') == "12345678901234567890",
        "every digit kept: {amount}"
    );
    assert!(!item.contains_key("debug") && !item.contains_key("tenant"));
    let user = item["user"].as_m().unwrap();
    assert!(!user.contains_key("id"), "the entity part left the payload");
}
