//! Kinesis through the proxy with the AWS SDK for Rust, against kinesis-local.
//! Needs the local stack: run with the `stack` feature
//! (see docs/testing.md). Moved here from tools/limits/tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::error::ProvideErrorMetadata as _;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ShardIteratorType};

async fn active_stream(c: &Client, name: &str) -> String {
    tidemark_tests::create_stream(c, name, 1).await;
    let shards = c
        .list_shards()
        .stream_name(name)
        .send()
        .await
        .expect("list shards");
    shards.shards()[0].shard_id().to_owned()
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn sixth_get_records_in_a_second_is_throttled_and_puts_are_capped_per_shard() {
    let stack = tidemark_tests::stack().await;
    let proxy = tidemark_tests::start_limits_proxy(&stack, |c| c.kinesis_write_records = 100).await;
    let c = stack.without_retries().kinesis_at(&proxy.url);
    let stream = tidemark_tests::unique_name("limits-it");
    let shard = active_stream(&c, &stream).await;

    let it = c
        .get_shard_iterator()
        .stream_name(&stream)
        .shard_id(&shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .expect("iterator")
        .shard_iterator()
        .expect("iterator string")
        .to_owned();
    let started = std::time::Instant::now();
    let mut next = it;
    for i in 0..5 {
        let out = c
            .get_records()
            .shard_iterator(&next)
            .send()
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e:?}"));
        next = out.next_shard_iterator().expect("open shard").to_owned();
    }
    let err = c
        .get_records()
        .shard_iterator(&next)
        .send()
        .await
        .expect_err("6th call")
        .into_service_error();
    // The rule is about one second; a slow machine that took longer proves nothing.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "five calls took {:?}",
        started.elapsed()
    );
    assert_eq!(err.code(), Some("ProvisionedThroughputExceededException"));
    assert_eq!(
        err.message(),
        Some(
            format!(
                "Rate exceeded for shard {shard} in stream {stream} under account 000000000000."
            )
            .as_str()
        )
    );
    let s = proxy.proxy.stats();
    let key = format!("{stream}/{shard}");
    assert_eq!(s.kinesis.shards[&key].get_records_calls, 5);
    assert_eq!(s.kinesis.shards[&key].get_records_throttled, 1);

    // One PutRecords of 500 is decided at one instant: with the write limit
    // set to 100 records/s exactly the shard's 100 tokens are admitted, the
    // rest come back per record with the throttle code in a 200 response.
    let entries: Vec<_> = (0..500)
        .map(|i| {
            PutRecordsRequestEntry::builder()
                .partition_key(format!("k{i}"))
                .data(Blob::new(vec![b'x'; 10]))
                .build()
                .unwrap()
        })
        .collect();
    let out = c
        .put_records()
        .stream_name(&stream)
        .set_records(Some(entries))
        .send()
        .await
        .expect("put records");
    let mut ok = 0;
    let mut throttled = 0;
    for r in out.records() {
        match r.error_code() {
            None => {
                assert!(r.sequence_number().is_some());
                ok += 1;
            }
            Some("ProvisionedThroughputExceededException") => {
                assert_eq!(
                    r.error_message(),
                    Some(format!("Rate exceeded for shard {shard} in stream {stream} under account 000000000000.").as_str())
                );
                throttled += 1;
            }
            Some(other) => panic!("unexpected error code {other}"),
        }
    }
    assert_eq!((ok, throttled), (100, 400));
    assert_eq!(out.failed_record_count(), Some(400));
    let s = proxy.proxy.stats();
    assert_eq!(s.kinesis.shards[&key].put_records, ok as u64);
    assert_eq!(
        s.kinesis.shards[&key].put_records_throttled,
        throttled as u64
    );
    let _ = c.delete_stream().stream_name(&stream).send().await;
}
