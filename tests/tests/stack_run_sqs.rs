//! `tidemark run` with an SQS source, in-process: events sent to a queue end
//! up stored in DynamoDB with their content, every message is deleted, and a
//! run stopped mid-queue and started again loses nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use tidemark_schema::route::{RouteCache, Router};
use tidemark_tests::worker::{Running, config, item_count, produce, queue_depth, sdk, test_toml};
use tidemark_tests::{create_queue, routed_item, unique_name, wait_until};
use tidemark_worker::tools::produce::{ProduceSpec, Target};

fn toml(name: &str, queue_url: &str, dead: &std::path::Path) -> String {
    let source =
        format!("[source]\nkind = \"sqs\"\nqueue_url = \"{queue_url}\"\nwait_time = \"1s\"\n");
    test_toml(&source, name, dead, "127.0.0.1:0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sqs_run_stores_every_event_deletes_every_message_and_restarts_without_loss() {
    let stack = tidemark_tests::stack().await;
    const EVENTS: u64 = 1000;
    let name = unique_name("e2e-sqs");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let sqs = stack.sqs();
    let queue = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let config = config(&dir, &toml(&name, &queue, &dead));
    let sdk = sdk(&stack);
    let target = Target::Sqs(sqs.clone(), queue.clone());
    let spec = ProduceSpec {
        devices: 20,
        count: EVENTS,
        hot_factor: 5,
        seed: 7,
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
    let (manifest, report1) = tokio::join!(produce(&target, &spec, EVENTS, 200), first_run);
    assert!(
        report1.stored < EVENTS,
        "the first run was stopped mid-queue ({} stored)",
        report1.stored
    );

    // Second run drains the queue.
    let run2 = Running::start(&config, &sdk).await;
    // Deleted, not merely invisible: the depth counts in-flight messages.
    wait_until(
        "every message is deleted",
        Duration::from_secs(90),
        || async { (queue_depth(&sqs, &queue).await == 0).then_some(()) },
    )
    .await;
    let report2 = run2.stop().await;

    // Every event is stored with its content, exactly once as an item
    // (at-least-once delivery may store one twice, on the same key).
    assert!(
        report1.stored + report2.stored >= EVENTS,
        "run 1: {report1:?}, run 2: {report2:?}"
    );
    assert_eq!(report1.dead_lettered() + report2.dead_lettered(), 0);
    let router = Router::new(config.schema.clone()).unwrap();
    let ddb = stack.dynamodb();
    let verified =
        tidemark_worker::tools::verify::verify(&ddb, &router, &manifest, &Default::default())
            .await
            .unwrap();
    assert_eq!(verified.found, EVENTS, "{verified:?}");
    let first: Value = serde_json::from_slice(&manifest[0]).unwrap();
    let table = format!("{name}_{}", &first["timestamp"].as_str().unwrap()[..10]);
    assert_eq!(item_count(&ddb, &table).await, EVENTS);
    assert!(!dead.exists(), "no dead letters expected");
}

fn gzip64(text: &str) -> String {
    use base64::Engine;
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(text.as_bytes()).unwrap();
    base64::engine::general_purpose::STANDARD.encode(enc.finish().unwrap())
}

/// SNS's envelope as it arrives in SQS (pretty-printed).
fn sns(message: &str) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "Type": "Notification",
        "MessageId": unique_name("sns"),
        "TopicArn": "arn:aws:sns:us-east-1:000000000000:events",
        "Message": message,
        "Timestamp": "2026-11-22T05:00:00.000Z",
    }))
    .unwrap()
}

/// `record_format = "ndjson"` on an SQS source: NDJSON bodies, plain,
/// base64-gzipped, in SNS envelopes (around either) and pretty-printed
/// single events are split into their events; each event without an id
/// gets `sqs:<message id>:<position>`; a bad line is its own dead letter
/// beside its stored neighbours; a body that cannot be split (broken gzip)
/// is one dead letter; and every message is deleted once all its events are
/// stored or dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sqs_ndjson_gzip_and_sns_bodies_store_each_inner_event_and_delete_after_all() {
    let stack = tidemark_tests::stack().await;
    let name = unique_name("sqs-nd");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let sqs = stack.sqs();
    let queue = create_queue(&sqs, "sqs-nd", false).await;
    let source = format!(
        "[source]\nkind = \"sqs\"\nqueue_url = \"{queue}\"\nwait_time = \"1s\"\nrecord_format = \"ndjson\"\n"
    );
    let config = config(&dir, &test_toml(&source, &name, &dead, "127.0.0.1:0"));
    let now = chrono::Utc::now();
    let ts = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut n = 0;
    let mut events = |k: usize| -> Vec<String> {
        (0..k)
            .map(|_| {
                n += 1;
                format!(
                    r#"{{"deviceId":"d{}","timestamp":"{ts}","seq":{n}}}"#,
                    n % 5
                )
            })
            .collect()
    };
    // (body, events stored from it); 3 rounds of 7 shapes.
    let mut bodies: Vec<(String, u64)> = Vec::new();
    for _ in 0..3 {
        bodies.push((events(3).join("\n"), 3));
        bodies.push((gzip64(&events(4).join("\r\n")), 4));
        bodies.push((sns(&events(2).join("\n")), 2));
        bodies.push((sns(&gzip64(&events(3).join("\n"))), 3));
        let e = events(2);
        bodies.push((
            format!("{}\n{{\"timestamp\":\"{ts}\"}}\n{}\n", e[0], e[1]),
            2,
        ));
        bodies.push(("H4sIAAAA-broken".to_string(), 0));
        let one: serde_json::Value = serde_json::from_str(&events(1)[0]).unwrap();
        bodies.push((serde_json::to_string_pretty(&one).unwrap(), 1));
    }
    let mut ids = Vec::new();
    for (body, _) in &bodies {
        let out = sqs
            .send_message()
            .queue_url(&queue)
            .message_body(body)
            .send()
            .await
            .unwrap();
        ids.push(out.message_id.unwrap());
    }
    let good: u64 = bodies.iter().map(|(_, k)| k).sum();

    let run = Running::start(&config, &sdk(&stack)).await;
    wait_until(
        "every message is deleted",
        Duration::from_secs(90),
        || async { (queue_depth(&sqs, &queue).await == 0).then_some(()) },
    )
    .await;
    let report = run.stop().await;
    assert_eq!(report.stored, good, "{report:?}");
    assert_eq!(report.dead_lettered(), 6, "{report:?}");

    // Dead letters: per round, the bad line alone (its position, its bytes)
    // and the broken body whole.
    let text = std::fs::read_to_string(&dead).unwrap();
    let entries: Vec<tidemark_worker::deadletter::DeadLetter> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(entries.len(), 6, "{text}");
    for round in 0..3 {
        for (k, reason, index, payload) in [
            (4, "missing_field", 1, format!("{{\"timestamp\":\"{ts}\"}}")),
            (5, "undecodable_message", 0, "H4sIAAAA-broken".to_string()),
        ] {
            let id = &ids[round * 7 + k];
            let found = entries
                .iter()
                .find(|e| {
                    matches!(&e.source, tidemark_schema::Origin::Sqs { message_id, .. } if message_id == id)
                })
                .unwrap_or_else(|| panic!("no dead letter for message {k} of round {round}"));
            assert_eq!(found.reason.to_string(), reason);
            let tidemark_schema::Origin::Sqs { index: at, .. } = &found.source else {
                unreachable!()
            };
            assert_eq!(*at, index);
            assert_eq!(found.payload().unwrap(), payload.as_bytes());
        }
    }

    // Every inner event is its own item (ids derived from positions are
    // distinct), and an item's event id names its message and position.
    let ddb = stack.dynamodb();
    let table = format!("{name}_{}", &ts[..10]);
    assert_eq!(item_count(&ddb, &table).await, good);
    let router = Router::new(config.schema.clone()).unwrap();
    let origin = tidemark_schema::Origin::Sqs {
        queue: name.clone(),
        message_id: ids[0].clone(),
        index: 2,
    };
    let third = r#"{"deviceId":"d3","timestamp":"TS","seq":3}"#.replace("TS", &ts);
    let routed = router
        .route(
            third.as_bytes(),
            &origin,
            0,
            chrono::Utc::now(),
            &mut RouteCache::default(),
        )
        .unwrap()
        .new;
    let item = routed_item(&ddb, &routed)
        .await
        .expect("the first message's third event is stored under its derived id");
    assert_eq!(
        item["event_id"].as_s().unwrap(),
        &format!("sqs:{}:2", ids[0])
    );
}
