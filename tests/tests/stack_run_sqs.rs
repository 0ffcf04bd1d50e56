//! `tidemark run` with an SQS source, in-process: events sent to a queue end
//! up stored in DynamoDB with their content, every message is deleted, and a
//! run stopped mid-queue and started again loses nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use tidemark_schema::route::Router;
use tidemark_tests::worker::{Running, config, item_count, produce, queue_depth, sdk, test_toml};
use tidemark_tests::{unique_name, wait_until};
use tidemark_worker::produce::{ProduceSpec, Target};

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
    let verified = tidemark_worker::verify::verify(&ddb, &router, &manifest, &Default::default())
        .await
        .unwrap();
    assert_eq!(verified.found, EVENTS, "{verified:?}");
    let first: Value = serde_json::from_slice(&manifest[0]).unwrap();
    let table = format!("{name}_{}", &first["timestamp"].as_str().unwrap()[..10]);
    assert_eq!(item_count(&ddb, &table).await, EVENTS);
    assert!(!dead.exists(), "no dead letters expected");
}
