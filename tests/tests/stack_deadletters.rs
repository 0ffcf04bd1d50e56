//! Dead-letter destinations against the local stack: entries written to an
//! SQS queue and to a DynamoDB table come back exactly, and an entry too large
//! for SQS keeps its digest and size with a truncated payload; on a FIFO
//! queue two different records with the same bytes are both kept, and
//! entries that only fit a SendMessageBatch call in groups are all sent.
//! The SQS sink is sized to its queue (a 700 KB entry whole on a 1 MiB
//! queue) and sends what its queue cannot take whole to S3; with
//! `kind = "s3"` every entry, 1 KB to 900 KB, is found whole in gzip
//! JSON-lines objects, from the sink and end to end through a worker.

// Helpers outside #[test] fns: a panic there is a failed assertion too.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use chrono::Utc;
use tidemark_schema::{Origin, Reason};
use tidemark_tests::deadletters::{
    drop_tables, keys, new_bucket, object, objects, queue_of_size, remove_bucket,
};
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
    let url = tidemark_tests::create_queue(&sqs, "dlq", false).await;
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
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
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
    ddb.delete_table().table_name(&table).send().await.unwrap();
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
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
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
    let stack = tidemark_tests::stack().await;
    let sqs = stack.sqs();
    let url = queue_of_size(&sqs, "dlq-1mib", 1_048_576).await;
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

/// `n`'s payload: `size` bytes, different for every entry.
fn payload(n: u32, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u32 ^ n.wrapping_mul(2654435761)) as u8)
        .collect()
}

/// With `kind = "s3"`, 200 entries of 1 KB to 900 KB (the sizes of poison
/// records a 1 MiB Kinesis stream carries), written as the delivery task
/// does (several batches at once, sharing objects), are each found whole,
/// byte for byte, in gzip JSON-lines objects under the documented key
/// layout. About 10 s (90 MB through moto).
#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn s3_destination_keeps_200_entries_of_1_kb_to_900_kb_whole() {
    use tidemark_worker::deadletter::{ObjectWriter, S3Sink};
    let stack = tidemark_tests::stack().await;
    let s3 = stack.s3();
    let bucket = new_bucket(&s3).await;
    let sink = S3Sink::new(
        ObjectWriter::new(s3.clone(), bucket.clone(), "dl".into(), None, "worker-1"),
        8 * 1024 * 1024,
        std::time::Duration::from_millis(300),
    );
    let written: Vec<DeadLetter> = (0..200u32)
        .map(|n| {
            let size = 1_000 + (n as usize) * (899_000 / 199);
            DeadLetter::new(
                Origin::Kinesis {
                    stream: "events".into(),
                    shard_id: "shardId-000000000000".into(),
                    sequence_number: format!("9{n:05}").into(),
                    sub_sequence_number: 0,
                },
                Reason::InvalidJson,
                "not JSON".into(),
                &payload(n, size),
                Utc::now(),
            )
        })
        .collect();
    // Four batches at a time, as the delivery task writes.
    for group in written.chunks(80) {
        let calls = group.chunks(20).map(|b| sink.write(b));
        for r in futures::future::join_all(calls).await {
            r.unwrap();
        }
    }
    let found = objects(&s3, &bucket, "dl/").await;
    let layout = |k: &str| {
        let parts: Vec<&str> = k.split('/').collect();
        parts.len() == 6
            && parts[1].len() == 4
            && parts[2..5].iter().all(|p| p.len() == 2)
            && parts[5].starts_with("worker-1-")
            && parts[5].ends_with(".jsonl.gz")
    };
    assert!(
        found.iter().all(|(k, _)| layout(k)),
        "{:?}",
        found.iter().map(|(k, _)| k).collect::<Vec<_>>()
    );
    assert!(
        found.len() > 1 && found.len() < 200,
        "{} objects",
        found.len()
    );
    let by_source: BTreeMap<String, DeadLetter> = found
        .into_iter()
        .flat_map(|(_, e)| e)
        .map(|e| (e.source.to_string(), e))
        .collect();
    assert_eq!(by_source.len(), written.len());
    for (n, w) in written.iter().enumerate() {
        let r = &by_source[&w.source.to_string()];
        assert!(!r.payload_truncated);
        assert_eq!(
            r.payload().unwrap(),
            payload(n as u32, w.payload_bytes),
            "entry {n}"
        );
    }
    remove_bucket(&s3, &bucket).await;
}

/// An entry too large for its queue goes whole to S3 when the SQS
/// destination has a bucket: the message points at the object. About 1 s.
#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sqs_destination_sends_an_entry_too_large_for_the_queue_whole_to_s3() {
    use tidemark_worker::deadletter::ObjectWriter;
    let stack = tidemark_tests::stack().await;
    let (sqs, s3) = (stack.sqs(), stack.s3());
    let bucket = new_bucket(&s3).await;
    let url = queue_of_size(&sqs, "dlq-64k", 65_536).await;
    let big = payload(7, 700_000);
    let written = vec![
        DeadLetter::new(
            Origin::Kinesis {
                stream: "events".into(),
                shard_id: "shardId-000000000000".into(),
                sequence_number: "1".into(),
                sub_sequence_number: 0,
            },
            Reason::ItemTooLarge,
            "item is 700000 bytes".into(),
            &big,
            Utc::now(),
        ),
        DeadLetter::new(
            Origin::Kinesis {
                stream: "events".into(),
                shard_id: "shardId-000000000000".into(),
                sequence_number: "2".into(),
                sub_sequence_number: 0,
            },
            Reason::InvalidJson,
            "not JSON".into(),
            b"{oops",
            Utc::now(),
        ),
    ];
    let sink = SqsSink::for_queue(sqs.clone(), url.clone())
        .await
        .unwrap()
        .with_overflow(ObjectWriter::new(
            s3.clone(),
            bucket.clone(),
            "large".into(),
            None,
            "w",
        ));
    assert_eq!(sink.max_message_size(), 65536);
    sink.write(&written).await.unwrap();
    let got = sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let read: BTreeMap<String, DeadLetter> = got
        .messages()
        .iter()
        .map(|m| serde_json::from_str::<DeadLetter>(m.body().unwrap()).unwrap())
        .map(|e| (e.source.to_string(), e))
        .collect();
    assert_eq!(read.len(), 2);
    let small = &read[&written[1].source.to_string()];
    assert_eq!(
        (small.payload_s3.as_deref(), small.payload().unwrap()),
        (None, b"{oops".to_vec())
    );
    let pointer = &read[&written[0].source.to_string()];
    let at = pointer.payload_s3.clone().unwrap();
    assert!(at.starts_with(&format!("s3://{bucket}/large/")), "{at}");
    assert_eq!(
        (pointer.payload_bytes, &pointer.payload_sha256),
        (700_000, &written[0].payload_sha256)
    );
    let stored = objects(&s3, &bucket, "large/").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(at, format!("s3://{bucket}/{}", stored[0].0));
    assert_eq!(
        stored[0].1[0].payload().unwrap(),
        big,
        "whole, byte for byte"
    );
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
    remove_bucket(&s3, &bucket).await;
}

/// End to end with `dead_letters.kind = "s3"`: poison records of 1 KB to
/// 900 KB on a Kinesis stream are each found in S3 whole, byte for byte,
/// and their shards move on (the worker's own S3 client, by path against
/// the local endpoint). The local Kinesis (kinesis-local) accepts records
/// up to 1 MiB (1,048,576 bytes with the partition key) unless the stream's
/// `MaxRecordSizeInKiB` is raised; 900 KB stays under that. 20 records
/// here (9 MB): kinesis-local spends about 1 s of CPU per MB put and read
/// (9 to 12 s for these, while this process spends about 1 s), so the 200
/// of the sink test above (90 MB) would take minutes; the sink test and
/// crates/worker/tests/stack_oversize.rs (200 records replayed from a
/// fixture through the binary's pipeline) cover 200. About 15 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn poison_records_of_1_kb_to_900_kb_are_each_found_whole_in_s3() {
    use tidemark_tests::worker::{Running, config, kinesis_source, sdk, test_toml};
    let stack = tidemark_tests::stack().await;
    let (s3, kinesis) = (stack.s3(), stack.kinesis());
    let bucket = new_bucket(&s3).await;
    let name = unique_name("dl-s3");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let toml = test_toml(&kinesis_source(&name), &name, &dead, "127.0.0.1:0").replace(
        &format!("kind = \"file\"\npath = \"{}\"", dead.display()),
        &format!(
            "kind = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"poison\"\nmax_object_age = \"200ms\""
        ),
    );
    assert!(toml.contains("kind = \"s3\""));
    let config = config(&dir, &toml);
    tidemark_tests::create_stream(&kinesis, &name, 4).await;
    // Not JSON: every record is dead-lettered (`invalid_json`).
    let records = tidemark_tests::deadletters::poison_records(20);
    for (c, chunk) in records.chunks(10).enumerate() {
        let puts = chunk.iter().enumerate().map(|(i, data)| {
            kinesis
                .put_record()
                .stream_name(&name)
                .partition_key(format!("k{}", c * 10 + i))
                .data(aws_sdk_kinesis::primitives::Blob::new(data.clone()))
                .send()
        });
        for r in futures::future::join_all(puts).await {
            r.unwrap();
        }
    }
    let run = Running::start(&config, &sdk(&stack)).await;
    // Each object read once, as it appears.
    let seen = std::sync::Mutex::new(BTreeMap::<String, Vec<DeadLetter>>::new());
    tidemark_tests::wait_until(
        "every dead letter in S3",
        std::time::Duration::from_secs(90),
        || async {
            for key in keys(&s3, &bucket, "poison/").await {
                if !seen.lock().unwrap().contains_key(&key) {
                    let entries = object(&s3, &bucket, &key).await;
                    seen.lock().unwrap().insert(key, entries);
                }
            }
            let n: usize = seen.lock().unwrap().values().map(Vec::len).sum();
            (n >= records.len()).then_some(())
        },
    )
    .await;
    let found: Vec<DeadLetter> = seen.into_inner().unwrap().into_values().flatten().collect();
    let report = run.stop().await;
    assert_eq!(report.dead_lettered(), records.len() as u64, "{report:?}");
    tidemark_tests::deadletters::assert_each_found_whole(&records, &found);
    assert!(!dead.exists(), "nothing in a file");
    kinesis
        .delete_stream()
        .stream_name(&name)
        .send()
        .await
        .unwrap();
    remove_bucket(&s3, &bucket).await;
    // The worker's lease, coordinator and period tables.
    let ddb = stack.dynamodb();
    drop_tables(&ddb, &format!("{name}-")).await;
    drop_tables(&ddb, &format!("{name}_")).await;
}
