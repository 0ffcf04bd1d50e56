//! The writer on the AWS SDK's machinery (issue 21), against the local
//! stack: a DynamoDB whose clock is 10 minutes ahead refuses the first
//! writes as signed too late; the SDK learns the skew from the answer's
//! `Date`, the writer retries, and everything is stored.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tidemark_tests::worker::{Running, config, item_count, produce, sdk, test_toml};
use tidemark_tests::{start_limits_proxy, unique_name, wait_until};
use tidemark_worker::tools::produce::{ProduceSpec, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_skewed_dynamodb_clock_is_corrected_and_nothing_is_dead_lettered() {
    let stack = tidemark_tests::stack().await;
    const EVENTS: u64 = 200;
    let name = unique_name("skew");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let sqs = stack.sqs();
    let queue = tidemark_tests::create_queue(&sqs, &name, false).await;
    // DynamoDB (all of the worker's DynamoDB calls) behind a proxy whose
    // clock runs 10 minutes ahead; SQS direct.
    let proxy = start_limits_proxy(&stack, |c| {
        c.clock_offset = Some(tidemark_limits::clock::Offset(600));
    })
    .await;
    let mut skewed = stack.clone();
    skewed.dynamodb_url = proxy.url.clone();
    let source = format!("[source]\nkind = \"sqs\"\nqueue_url = \"{queue}\"\nwait_time = \"1s\"\n");
    let config = config(&dir, &test_toml(&source, &name, &dead, "127.0.0.1:0"));
    let spec = ProduceSpec {
        devices: 20,
        count: EVENTS,
        hot_factor: 5,
        seed: 11,
    };
    let manifest = produce(
        &Target::Sqs(sqs.clone(), queue.clone()),
        &spec,
        EVENTS,
        1000,
    )
    .await;

    let run = Running::start(&config, &sdk(&skewed)).await;
    wait_until("every event stored", Duration::from_secs(60), || async {
        (run.stored() >= EVENTS).then_some(())
    })
    .await;
    let report = run.stop().await;

    assert!(
        proxy.proxy.clock_refused() >= 1,
        "the proxy refused no request: the test did not exercise skew"
    );
    assert_eq!(report.dead_lettered(), 0, "{report:?}");
    assert!(!dead.exists(), "no dead letters expected");
    let first: serde_json::Value = serde_json::from_slice(&manifest[0]).unwrap();
    let table = format!("{name}_{}", &first["timestamp"].as_str().unwrap()[..10]);
    assert_eq!(item_count(&stack.dynamodb(), &table).await, EVENTS);
}
