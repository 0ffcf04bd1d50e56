//! Dead-letter destinations against the local stack: entries written to an
//! SQS queue and to a DynamoDB table come back exactly, and an entry too large
//! for SQS keeps its digest and size with a truncated payload; on a FIFO
//! queue two different records with the same bytes are both kept, and
//! entries that only fit a SendMessageBatch call in groups are all sent.

// Helpers outside #[test] fns: a panic there is a failed assertion too.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use chrono::Utc;
use tidemark_schema::{Origin, Reason};
use tidemark_tests::{TableCapacity, unique_name};
use tidemark_worker::deadletter::{DeadLetter, DeadLetterSink, DynamoDbSink, SqsSink};

fn entries() -> Vec<DeadLetter> {
    let origin = |n: u32| Origin::Kinesis {
        stream: "events".into(),
        shard_id: "shardId-000000000003".into(),
        sequence_number: format!("4968045226{n:04}").into(),
        sub_sequence_number: 0,
    };
    vec![
        DeadLetter::new(
            origin(1),
            Reason::InvalidJson,
            "not JSON".into(),
            b"{oops",
            Utc::now(),
        ),
        DeadLetter::new(
            origin(2),
            Reason::MissingField,
            "field `deviceId` is missing".into(),
            b"{}",
            Utc::now(),
        ),
        // Over SQS's 256 KiB message limit once base64-encoded.
        DeadLetter::new(
            origin(3),
            Reason::ItemTooLarge,
            "item is 500000 bytes".into(),
            &vec![b'z'; 500_000],
            Utc::now(),
        ),
    ]
}

/// Compares what came back with what was written (truncation allowed only
/// where marked, and then the kept bytes are a prefix of the original).
fn check(written: &[DeadLetter], read: Vec<DeadLetter>) {
    let by_source: BTreeMap<String, DeadLetter> = read
        .into_iter()
        .map(|e| (e.source.to_string(), e))
        .collect();
    assert_eq!(by_source.len(), written.len(), "{by_source:?}");
    for w in written {
        let r = &by_source[&w.source.to_string()];
        assert_eq!(
            (r.reason, &r.error, r.payload_bytes, &r.payload_sha256),
            (w.reason, &w.error, w.payload_bytes, &w.payload_sha256)
        );
        if r.payload_truncated {
            assert!(w.payload().unwrap().starts_with(&r.payload().unwrap()));
        } else {
            assert_eq!(r.payload().unwrap(), w.payload().unwrap());
        }
    }
    let big = &by_source[&written[2].source.to_string()];
    assert!(
        big.payload_truncated,
        "the 500 KB payload cannot fit an SQS message whole"
    );
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sqs_destination_keeps_every_entry() {
    let stack = tidemark_tests::stack().await;
    let sqs = stack.sqs();
    let url = sqs
        .create_queue()
        .queue_name(unique_name("dlq"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let written = entries();
    SqsSink::new(sqs.clone(), url.clone())
        .write(&written)
        .await
        .unwrap();
    let mut read = Vec::new();
    while read.len() < written.len() {
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        assert!(
            !got.messages().is_empty(),
            "queue ran dry after {} entries",
            read.len()
        );
        for m in got.messages() {
            assert!(m.body().unwrap().len() <= 256 * 1024);
            read.push(serde_json::from_str(m.body().unwrap()).unwrap());
        }
    }
    check(&written, read);
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn dynamodb_destination_keeps_every_entry() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let table = unique_name("dead-letters");
    tidemark_tests::create_table(&ddb, &table, true, TableCapacity::OnDemand).await;
    let written = entries();
    DynamoDbSink::new(ddb.clone(), table.clone())
        .write(&written)
        .await
        .unwrap();
    let scan = ddb.scan().table_name(&table).send().await.unwrap();
    let read = scan
        .items()
        .iter()
        .map(|it| {
            assert_eq!(
                it["pk"].as_s().unwrap(),
                &serde_json::from_str::<DeadLetter>(it["entry"].as_s().unwrap())
                    .unwrap()
                    .source
                    .to_string()
            );
            serde_json::from_str(it["entry"].as_s().unwrap()).unwrap()
        })
        .collect();
    check(&written, read);
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sqs_fifo_keeps_same_bytes_from_two_records_and_splits_large_batches() {
    let stack = tidemark_tests::stack().await;
    let sqs = stack.sqs();
    let url = tidemark_tests::create_queue(&sqs, "dlq", true).await;
    let origin = |n: u32| Origin::Kinesis {
        stream: "events".into(),
        shard_id: "shardId-000000000001".into(),
        sequence_number: format!("77{n:04}").into(),
        sub_sequence_number: 0,
    };
    // Two poison records with the same bytes, then 8 entries of 60 KB: over
    // 256 KiB together, so they need several SendMessageBatch calls.
    let mut written: Vec<DeadLetter> = (0..2)
        .map(|n| {
            DeadLetter::new(
                origin(n),
                Reason::InvalidJson,
                "bad".into(),
                b"{oops",
                Utc::now(),
            )
        })
        .collect();
    written.extend((2..10).map(|n| {
        DeadLetter::new(
            origin(n),
            Reason::MissingField,
            "no deviceId".into(),
            &vec![b'm'; 45_000],
            Utc::now(),
        )
    }));
    SqsSink::new(sqs.clone(), url.clone())
        .write(&written)
        .await
        .unwrap();
    let mut read: Vec<DeadLetter> = Vec::new();
    for _ in 0..20 {
        if read.len() >= written.len() {
            break;
        }
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        for m in got.messages() {
            read.push(serde_json::from_str(m.body().unwrap()).unwrap());
            sqs.delete_message()
                .queue_url(&url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    assert_eq!(read.len(), written.len(), "every entry arrived once");
    let mut sources: Vec<String> = read.iter().map(|e| e.source.to_string()).collect();
    sources.sort();
    sources.dedup();
    assert_eq!(
        sources.len(),
        written.len(),
        "same bytes, two records, two entries"
    );
    assert!(read.iter().all(|e| !e.payload_truncated));
}

/// A queue's own `MaximumMessageSize` (1 MiB, the default of new queues)
/// sizes the entries: a 700 KB payload is kept whole, not cut to the old
/// 256 KiB limit. moto enforces the queue's size (a body over it is
/// refused), so the body received is what SQS accepted. About 1 s.
#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sqs_destination_sized_to_the_queue_keeps_a_700_kb_entry_whole() {
    use aws_sdk_sqs::types::QueueAttributeName;
    let stack = tidemark_tests::stack().await;
    let sqs = stack.sqs();
    let url = sqs
        .create_queue()
        .queue_name(unique_name("dlq-1mib"))
        .attributes(QueueAttributeName::MaximumMessageSize, "1048576")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let payload: Vec<u8> = (0..700_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let written = vec![DeadLetter::new(
        Origin::Kinesis {
            stream: "events".into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: "700".into(),
            sub_sequence_number: 0,
        },
        Reason::ItemTooLarge,
        "item is 700000 bytes".into(),
        &payload,
        Utc::now(),
    )];
    let sink = SqsSink::for_queue(sqs.clone(), url.clone()).await.unwrap();
    sink.write(&written).await.unwrap();
    let got = sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let body = got.messages()[0].body().unwrap();
    assert!(body.len() > 900_000, "{} bytes", body.len());
    let back: DeadLetter = serde_json::from_str(body).unwrap();
    assert!(!back.payload_truncated, "the 700 KB entry was cut");
    assert_eq!(back.payload().unwrap(), payload, "byte for byte");
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
}
