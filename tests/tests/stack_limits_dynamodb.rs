//! DynamoDB through the proxy with the AWS SDK for Rust (and boto3), against
//! the local stack. Needs the local stack: run with the `stack` feature
//! (see docs/testing.md). Moved here from tools/limits/tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::ProvideErrorMetadata as _;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use tidemark_tests::TableCapacity;

async fn create_table(c: &Client, name: &str, wcu: i64) {
    let capacity = TableCapacity::Provisioned {
        read: 10,
        write: wcu,
    };
    tidemark_tests::create_table(c, name, true, capacity).await;
}

fn put(pk: &str, sk: &str, pad: usize) -> WriteRequest {
    let item: HashMap<String, AttributeValue> = [
        ("pk".to_string(), AttributeValue::S(pk.into())),
        ("sk".to_string(), AttributeValue::S(sk.into())),
        ("data".to_string(), AttributeValue::S("x".repeat(pad))),
    ]
    .into();
    WriteRequest::builder()
        .put_request(PutRequest::builder().set_item(Some(item)).build().unwrap())
        .build()
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn sdk_writes_and_reads_through_the_proxy_and_gets_dynamodb_validation_errors() {
    let stack = tidemark_tests::stack().await;
    let proxy = tidemark_tests::start_limits_proxy(&stack, |_| {}).await;
    let c = stack.without_retries().dynamodb_at(&proxy.url);
    let table = tidemark_tests::unique_name("limits-it");
    create_table(&c, &table, 1000).await;

    // 25 items pass and land in the emulator.
    let batch: Vec<_> = (0..25).map(|i| put("p", &format!("s{i}"), 10)).collect();
    let out = c
        .batch_write_item()
        .request_items(&table, batch)
        .send()
        .await
        .expect("25-item batch");
    assert!(out.unprocessed_items().is_none_or(HashMap::is_empty));
    let q = c
        .query()
        .table_name(&table)
        .key_condition_expression("pk = :p")
        .expression_attribute_values(":p", AttributeValue::S("p".into()))
        .send()
        .await
        .expect("query");
    assert_eq!(q.count(), 25);

    // 26 items: rejected whole, with DynamoDB's message.
    let batch: Vec<_> = (0..26).map(|i| put("q", &format!("s{i}"), 10)).collect();
    let err = c
        .batch_write_item()
        .request_items(&table, batch)
        .send()
        .await
        .expect_err("26 items");
    let e = err.into_service_error();
    assert_eq!(e.code(), Some("ValidationException"));
    assert_eq!(
        e.message(),
        Some("Too many items requested for the BatchWriteItem call")
    );

    // The same key twice.
    let batch = vec![put("d", "same", 1), put("d", "same", 2)];
    let e = c
        .batch_write_item()
        .request_items(&table, batch)
        .send()
        .await
        .expect_err("dup")
        .into_service_error();
    assert_eq!(e.code(), Some("ValidationException"));
    assert_eq!(
        e.message(),
        Some("Provided list of item keys contains duplicates")
    );

    // An item over 400 KB.
    let batch = vec![put("big", "1", 400 * 1024)];
    let e = c
        .batch_write_item()
        .request_items(&table, batch)
        .send()
        .await
        .expect_err("big")
        .into_service_error();
    assert_eq!(
        e.message(),
        Some("Item size has exceeded the maximum allowed size")
    );

    // Nothing of the rejected calls reached the table.
    let q = c
        .query()
        .table_name(&table)
        .key_condition_expression("pk = :p")
        .expression_attribute_values(":p", AttributeValue::S("q".into()))
        .send()
        .await
        .expect("query");
    assert_eq!(q.count(), 0);
    let stats = proxy.proxy.stats();
    assert_eq!(stats.dynamodb.counters.requests_rejected, 3);
    assert_eq!(stats.dynamodb.tables[&table].stats.accepted_items, 25);
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn throttles_with_unprocessed_items_then_the_exception_and_sink_counts_exactly() {
    let stack = tidemark_tests::stack().await;
    let proxy = tidemark_tests::start_limits_proxy(&stack, |c| c.sink = true).await;
    let c = stack.without_retries().dynamodb_at(&proxy.url);
    let table = tidemark_tests::unique_name("limits-sink");
    // 50 WCU: one second of credit is 50 one-KB-or-less items.
    create_table(&c, &table, 50).await;

    let mut accepted = 0u64;
    let mut partial = 0;
    let mut throttled = 0;
    let mut i = 0;
    // Offer 25-item batches back to back until both outcomes were seen.
    while (partial == 0 || throttled == 0) && i < 2000 {
        let batch: Vec<_> = (0..25)
            .map(|j| put(&format!("k{i}"), &format!("{j}"), 100))
            .collect();
        i += 1;
        match c
            .batch_write_item()
            .request_items(&table, batch)
            .send()
            .await
        {
            Ok(out) => {
                let left = out
                    .unprocessed_items()
                    .and_then(|m| m.get(&table))
                    .map_or(0, Vec::len);
                if left > 0 {
                    partial += 1;
                }
                accepted += 25 - left as u64;
            }
            Err(err) => {
                let e = err.into_service_error();
                assert_eq!(
                    e.code(),
                    Some("ProvisionedThroughputExceededException"),
                    "{e:?}"
                );
                throttled += 1;
            }
        }
    }
    assert!(
        partial > 0 && throttled > 0,
        "partial {partial}, throttled {throttled}"
    );
    let s = proxy.proxy.stats();
    assert!(s.sink_mode);
    assert_eq!(s.dynamodb.counters.items_accepted, accepted);
    assert_eq!(
        s.dynamodb.sink[&table].items, accepted,
        "every accepted key recorded once"
    );
    assert_eq!(s.dynamodb.sink[&table].puts, accepted);
    assert_eq!(s.dynamodb.counters.requests_throttled, throttled);
    // Sink mode forwards nothing: the emulator's table stays empty.
    let scan = c.scan().table_name(&table).send().await.expect("scan");
    assert_eq!(scan.count(), 0);
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn partly_admitted_batches_forward_exactly_the_admitted_items() {
    let stack = tidemark_tests::stack().await;
    let proxy = tidemark_tests::start_limits_proxy(&stack, |_| {}).await;
    let c = stack.without_retries().dynamodb_at(&proxy.url);
    let table = tidemark_tests::unique_name("limits-fwd");
    create_table(&c, &table, 50).await;

    // Offer 25-item batches until one is split: the proxy forwards the
    // admitted part (a request it rebuilds) and returns the rest.
    let mut accepted = 0usize;
    let mut partial = 0;
    let mut i = 0;
    while partial == 0 && i < 2000 {
        let batch: Vec<_> = (0..25)
            .map(|j| put(&format!("k{i}"), &format!("{j}"), 100))
            .collect();
        i += 1;
        let Ok(out) = c
            .batch_write_item()
            .request_items(&table, batch)
            .return_consumed_capacity(aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total)
            .send()
            .await
        else {
            continue;
        };
        let left = out
            .unprocessed_items()
            .and_then(|m| m.get(&table))
            .map_or(0, Vec::len);
        partial += usize::from(left > 0 && left < 25);
        accepted += 25 - left;
    }
    assert!(partial > 0, "no batch was split in {i} tries");
    let mut stored = 0;
    let mut start = None;
    loop {
        let page = c
            .scan()
            .table_name(&table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan");
        stored += page.count() as usize;
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    assert_eq!(
        stored, accepted,
        "the emulator holds exactly what was admitted"
    );
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn boto3_works_through_the_proxy_unchanged() {
    let stack = tidemark_tests::stack().await;
    // moto's venv (localstack/up installs boto3 there); TIDEMARK_PYTHON
    // names another interpreter, e.g. from a worktree without its own venv.
    let python = std::env::var_os("TIDEMARK_PYTHON").map_or_else(
        || tidemark_tests::repo_root().join("localstack/.cache/venv/bin/python"),
        std::path::PathBuf::from,
    );
    assert!(
        python.exists(),
        "this test needs moto's venv with boto3 at {} (or TIDEMARK_PYTHON)",
        python.display()
    );
    let proxy = tidemark_tests::start_limits_proxy(&stack, |_| {}).await;
    let c = stack.without_retries().dynamodb_at(&proxy.url);
    let table = tidemark_tests::unique_name("limits-boto3");
    create_table(&c, &table, 1000).await;
    let script = format!(
        r#"
import boto3
t = boto3.resource("dynamodb", endpoint_url="{url}", region_name="us-east-1",
                   aws_access_key_id="test", aws_secret_access_key="test").Table("{table}")
with t.batch_writer() as b:
    for i in range(60):
        b.put_item(Item={{"pk": "b", "sk": str(i), "v": i}})
print(t.query(KeyConditionExpression=boto3.dynamodb.conditions.Key("pk").eq("b"))["Count"])
"#,
        url = proxy.url
    );
    let url = proxy.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg("-c")
            .arg(script)
            .env("AWS_ENDPOINT_URL_DYNAMODB", url)
            .output()
            .expect("run python")
    })
    .await
    .expect("join");
    assert!(
        out.status.success(),
        "boto3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "60");
    assert_eq!(
        proxy.proxy.stats().dynamodb.tables[&table]
            .stats
            .accepted_items,
        60
    );
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn injected_faults_reach_the_sdk_as_server_errors_and_dropped_connections() {
    let stack = tidemark_tests::stack().await;
    let proxy = tidemark_tests::start_limits_proxy(&stack, |c| {
        c.faults.fault_dynamodb_errors = 1.0;
        c.faults.fault_seed = Some(1);
    })
    .await;
    let c = stack.without_retries().dynamodb_at(&proxy.url);
    let err = c.list_tables().send().await.expect_err("injected 5xx");
    let status = err.raw_response().map(|r| r.status().as_u16());
    assert!(matches!(status, Some(500 | 503)), "{err:?}");
    assert_eq!(proxy.proxy.stats().faults.errors_injected, 1);

    let proxy = tidemark_tests::start_limits_proxy(&stack, |c| c.faults.fault_drop = 1.0).await;
    let c = stack.without_retries().dynamodb_at(&proxy.url);
    let err = c
        .list_tables()
        .send()
        .await
        .expect_err("dropped connection");
    // No HTTP response at all: a dispatch/IO failure, not a service error.
    assert!(err.raw_response().is_none(), "{err:?}");
    assert_eq!(proxy.proxy.stats().faults.connections_dropped, 1);
}
