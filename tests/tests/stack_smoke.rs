//! Smoke test of the local AWS stack through the AWS SDK for Rust, with
//! endpoints from the environment: the foundation every other integration test
//! stands on. Needs the local stack: run with the `stack` feature (see
//! docs/testing.md); without it these tests are listed as ignored.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ShardIteratorType};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, QueueAttributeName, SendMessageBatchRequestEntry,
};
use tidemark_tests::{TableCapacity, unique_name};

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn kinesis_two_shards_round_trip() {
    let stack = tidemark_tests::stack().await;
    let kinesis = stack.kinesis();
    let stream = unique_name("smoke");
    tidemark_tests::create_stream(&kinesis, &stream, 2).await;

    let entries: Vec<_> = (0..100)
        .map(|i| {
            PutRecordsRequestEntry::builder()
                .partition_key(format!("device-{i}"))
                .data(Blob::new(format!("{{\"n\":{i}}}")))
                .build()
                .unwrap()
        })
        .collect();
    let put = kinesis
        .put_records()
        .stream_name(&stream)
        .set_records(Some(entries))
        .send()
        .await
        .expect("PutRecords");
    assert_eq!(put.failed_record_count(), Some(0));

    let shards = kinesis
        .list_shards()
        .stream_name(&stream)
        .send()
        .await
        .expect("ListShards");
    let shards = shards.shards();
    assert_eq!(shards.len(), 2);

    let mut seen = BTreeSet::new();
    let mut per_shard = Vec::new();
    for shard in shards {
        let mut iterator = kinesis
            .get_shard_iterator()
            .stream_name(&stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("GetShardIterator")
            .shard_iterator
            .expect("iterator");
        let mut count = 0;
        // Read until a call comes back empty and caught up.
        loop {
            let out = kinesis
                .get_records()
                .shard_iterator(&iterator)
                .send()
                .await
                .expect("GetRecords");
            for r in out.records() {
                let text = String::from_utf8(r.data().as_ref().to_vec()).unwrap();
                assert!(seen.insert(text), "record read twice");
                count += 1;
            }
            if out.records().is_empty() && out.millis_behind_latest() == Some(0) {
                break;
            }
            iterator = out
                .next_shard_iterator
                .expect("open shard has a next iterator");
        }
        per_shard.push(count);
    }
    assert_eq!(seen.len(), 100, "every record read back exactly once");
    assert!(
        per_shard.iter().all(|&c| c > 0),
        "records spread over both shards: {per_shard:?}"
    );
    kinesis
        .delete_stream()
        .stream_name(&stream)
        .send()
        .await
        .ok();
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn dynamodb_batch_write_then_query() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let table = unique_name("smoke");
    tidemark_tests::create_table(&ddb, &table, true, TableCapacity::OnDemand).await;

    let writes: Vec<_> = (0..25)
        .map(|i| {
            let item = HashMap::from([
                ("pk".to_string(), AttributeValue::S("sensor-1".into())),
                (
                    "sk".to_string(),
                    AttributeValue::S(format!("2026-11-22T05:00:{i:02}.000Z")),
                ),
                ("value".to_string(), AttributeValue::N(i.to_string())),
            ]);
            WriteRequest::builder()
                .put_request(PutRequest::builder().set_item(Some(item)).build().unwrap())
                .build()
        })
        .collect();
    let out = ddb
        .batch_write_item()
        .request_items(&table, writes)
        .send()
        .await
        .expect("BatchWriteItem");
    assert!(out.unprocessed_items().is_none_or(|u| u.is_empty()));

    let q = ddb
        .query()
        .table_name(&table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S("sensor-1".into()))
        .send()
        .await
        .expect("Query");
    let values: Vec<i64> = q
        .items()
        .iter()
        .map(|it| it["value"].as_n().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        values,
        (0..25).collect::<Vec<_>>(),
        "all 25 items, in sort-key order"
    );
    ddb.delete_table().table_name(&table).send().await.ok();
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn sqs_batch_with_dead_letter_queue() {
    let stack = tidemark_tests::stack().await;
    let sqs = stack.sqs();
    let dlq_url = sqs
        .create_queue()
        .queue_name(unique_name("smoke-dlq"))
        .send()
        .await
        .expect("CreateQueue dlq")
        .queue_url
        .unwrap();
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    let url = sqs
        .create_queue()
        .queue_name(unique_name("smoke"))
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!("{{\"deadLetterTargetArn\":\"{dlq_arn}\",\"maxReceiveCount\":\"3\"}}"),
        )
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .unwrap();

    let entries: Vec<_> = (0..10)
        .map(|i| {
            SendMessageBatchRequestEntry::builder()
                .id(format!("m{i}"))
                .message_body(format!("{{\"n\":{i}}}"))
                .build()
                .unwrap()
        })
        .collect();
    let sent = sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(entries))
        .send()
        .await
        .expect("SendMessageBatch");
    assert_eq!(sent.successful().len(), 10);

    let mut bodies = BTreeSet::new();
    let mut handles = Vec::new();
    while bodies.len() < 10 {
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("ReceiveMessage");
        assert!(
            !got.messages().is_empty(),
            "queue ran dry with {} of 10 received",
            bodies.len()
        );
        for m in got.messages() {
            assert!(
                bodies.insert(m.body().unwrap().to_string()),
                "message received twice"
            );
            handles.push(m.receipt_handle().unwrap().to_string());
        }
    }
    let deleted = sqs
        .delete_message_batch()
        .queue_url(&url)
        .set_entries(Some(
            handles
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(format!("d{i}"))
                        .receipt_handle(h)
                        .build()
                        .unwrap()
                })
                .collect(),
        ))
        .send()
        .await
        .expect("DeleteMessageBatch");
    assert_eq!(deleted.successful().len(), 10);
    assert!(deleted.failed().is_empty());

    // Nothing visible, nothing in flight.
    assert_eq!(tidemark_tests::queue_counts(&sqs, &url).await, (0, 0));
    sqs.delete_queue().queue_url(&url).send().await.ok();
    sqs.delete_queue().queue_url(&dlq_url).send().await.ok();
}
