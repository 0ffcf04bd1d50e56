//! `tidemark dead-letters list`, `stats` and `show` through the binary
//! against the local stack: entries written by the worker's own SQS,
//! DynamoDB and S3 sinks are all listed, filtered and counted, `show`
//! decodes a payload (also one an SQS entry keeps in S3 through
//! `payload_s3`), objects under `replayed/` are skipped, and listing an SQS
//! queue deletes nothing. `replay` from each destination: a dry run changes
//! nothing; after a config fix every replayable entry is stored once and
//! removed, the bad one stays with its reason, and a second run stores
//! nothing new.
//!
//! Lives in this crate to name the built binary (`CARGO_BIN_EXE_tidemark`).
//! Ignored unless the crate's `stack` feature is on.

// Helpers outside #[test] fns: a panic there is a failed assertion too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use chrono::Utc;
use serde_json::Value;
use tidemark_schema::{Origin, Reason};
use tidemark_tests::{LocalStack, TableCapacity, unique_name};
use tidemark_worker::deadletter::{
    DeadLetter, DeadLetterSink, DynamoDbSink, ObjectWriter, S3Sink, SqsSink,
};

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

/// Three entries: two of stream `events` (one `missing_field` with a JSON
/// payload, one `invalid_json`), one of a queue.
fn entries() -> Vec<DeadLetter> {
    let kinesis = |n: u32| Origin::Kinesis {
        stream: "events".into(),
        shard_id: "shardId-000000000001".into(),
        sequence_number: format!("49680{n:04}").into(),
        sub_sequence_number: 0,
    };
    vec![
        DeadLetter::new(
            kinesis(1),
            Reason::MissingField,
            "field `deviceId` is missing".into(),
            br#"{"device":"d-1","timestamp":1764190000000}"#,
            Utc::now(),
        ),
        DeadLetter::new(
            kinesis(2),
            Reason::InvalidJson,
            "not JSON".into(),
            b"{oops",
            Utc::now(),
        ),
        DeadLetter::new(
            Origin::Sqs {
                queue: "http://127.0.0.1/000000000000/orders".into(),
                message_id: "m-1".into(),
                index: 0,
            },
            Reason::MissingField,
            "field `deviceId` is missing".into(),
            b"{}",
            Utc::now(),
        ),
    ]
}

/// The binary with the local stack's endpoints and no config.
fn command(stack: &LocalStack) -> Command {
    stack.command(BIN)
}

fn tidemark(stack: &LocalStack, args: &[&str]) -> String {
    let out = command(stack).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "tidemark {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `list`, `stats` and `show` of the destination `from` names, holding
/// [`entries`].
fn check_destination(stack: &LocalStack, from: &[&str]) {
    let run = |args: &[&str]| {
        let mut all = vec!["dead-letters"];
        all.extend(args);
        all.extend(from);
        tidemark(stack, &all)
    };
    let list: Vec<Value> = serde_json::from_str(&run(&["list", "-o", "json"])).unwrap();
    assert_eq!(list.len(), 3, "{list:?}");
    let missing: Vec<Value> = serde_json::from_str(&run(&[
        "list",
        "-o",
        "json",
        "--reason",
        "missing_field",
        "--stream",
        "events",
    ]))
    .unwrap();
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(missing[0]["source"], "events");
    let stats: Value = serde_json::from_str(&run(&["stats", "-o", "json"])).unwrap();
    assert_eq!(stats["total"], 3);
    assert_eq!(stats["by_reason"]["missing_field"], 2);
    assert_eq!(stats["by_source"]["orders"], 1);
    let none: Value =
        serde_json::from_str(&run(&["stats", "-o", "json", "--until", "1h"])).unwrap();
    assert_eq!(none["total"], 0);
    let id = missing[0]["id"].as_str().unwrap();
    let shown: Value = serde_json::from_str(&run(&["show", &id[..8]])).unwrap();
    assert_eq!(shown["payload_encoding"], "json");
    assert_eq!(shown["payload"]["device"], "d-1");
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn dynamodb_dead_letters_are_listed_counted_and_shown() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let table = unique_name("dead-letters");
    tidemark_tests::create_table(&ddb, &table, true, TableCapacity::OnDemand).await;
    DynamoDbSink::new(ddb.clone(), table.clone())
        .write(&entries())
        .await
        .unwrap();
    check_destination(&stack, &["--from-table", &table]);
    ddb.delete_table().table_name(&table).send().await.unwrap();
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sqs_dead_letters_are_listed_without_being_deleted() {
    let stack = tidemark_tests::stack().await;
    let sqs = stack.sqs();
    let url = tidemark_tests::create_queue(&sqs, "dlq", false).await;
    SqsSink::new(sqs.clone(), url.clone())
        .write(&entries())
        .await
        .unwrap();
    check_destination(&stack, &["--from-queue-url", &url]);
    // Nothing deleted: every message is still in the queue (in flight
    // until its short visibility timeout ends).
    let (visible, in_flight) = tidemark_tests::queue_counts(&sqs, &url).await;
    assert_eq!(
        visible + in_flight,
        3,
        "visible {visible}, in flight {in_flight}"
    );
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
}

async fn new_bucket(s3: &aws_sdk_s3::Client) -> String {
    let bucket = unique_name("dl").to_ascii_lowercase().replace('_', "-");
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    bucket
}

async fn remove_bucket(s3: &aws_sdk_s3::Client, bucket: &str) {
    let mut pages = s3.list_objects_v2().bucket(bucket).into_paginator().send();
    while let Some(page) = pages.next().await {
        for o in page.unwrap().contents() {
            let key = o.key().unwrap();
            s3.delete_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await
                .unwrap();
        }
    }
    s3.delete_bucket().bucket(bucket).send().await.unwrap();
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn show_reads_the_payload_an_sqs_entry_keeps_in_s3() {
    use aws_sdk_sqs::types::QueueAttributeName;
    let stack = tidemark_tests::stack().await;
    let (sqs, s3) = (stack.sqs(), stack.s3());
    let bucket = new_bucket(&s3).await;
    let url = sqs
        .create_queue()
        .queue_name(unique_name("dlq-1k"))
        .attributes(QueueAttributeName::MaximumMessageSize, "1024")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    // 5 KB of JSON: too large for the queue, so it goes whole to S3.
    let body = format!(r#"{{"device":"d-9","pad":"{}"}}"#, "x".repeat(5_000));
    let big = DeadLetter::new(
        Origin::Kinesis {
            stream: "events".into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: "7".into(),
            sub_sequence_number: 0,
        },
        Reason::ItemTooLarge,
        "too large".into(),
        body.as_bytes(),
        Utc::now(),
    );
    SqsSink::for_queue(sqs.clone(), url.clone())
        .await
        .unwrap()
        .with_overflow(ObjectWriter::new(
            s3.clone(),
            bucket.clone(),
            "dl".into(),
            None,
            "w",
        ))
        .write(std::slice::from_ref(&big))
        .await
        .unwrap();
    let list: Vec<Value> = serde_json::from_str(&tidemark(
        &stack,
        &[
            "dead-letters",
            "list",
            "-o",
            "json",
            "--from-queue-url",
            &url,
        ],
    ))
    .unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    assert!(list[0]["payload_s3"].as_str().unwrap().starts_with("s3://"));
    let id = list[0]["id"].as_str().unwrap();
    let shown: Value = serde_json::from_str(&tidemark(
        &stack,
        &["dead-letters", "show", id, "--from-queue-url", &url],
    ))
    .unwrap();
    assert_eq!(shown["payload_encoding"], "json");
    assert_eq!(shown["payload"]["pad"].as_str().unwrap().len(), 5_000);
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
    remove_bucket(&s3, &bucket).await;
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn s3_dead_letters_are_listed_and_replayed_objects_skipped() {
    let stack = tidemark_tests::stack().await;
    let s3 = stack.s3();
    let bucket = new_bucket(&s3).await;
    let sink = S3Sink::new(
        ObjectWriter::new(s3.clone(), bucket.clone(), "dl".into(), None, "w"),
        8 * 1024 * 1024,
        std::time::Duration::from_millis(100),
    );
    sink.write(&entries()).await.unwrap();
    // An object already moved under `replayed/` is not listed.
    let moved = ObjectWriter::new(s3.clone(), bucket.clone(), "dl/replayed".into(), None, "w");
    S3Sink::new(moved, 1024 * 1024, std::time::Duration::from_millis(100))
        .write(&entries()[..1])
        .await
        .unwrap();
    check_destination(&stack, &["--from-bucket", &bucket, "--from-prefix", "dl"]);
    let mut pages = s3.list_objects_v2().bucket(&bucket).into_paginator().send();
    while let Some(page) = pages.next().await {
        for o in page.unwrap().contents() {
            let key = o.key().unwrap();
            s3.delete_object()
                .bucket(&bucket)
                .key(key)
                .send()
                .await
                .unwrap();
        }
    }
    s3.delete_bucket().bucket(&bucket).send().await.unwrap();
}

/// `tidemark` with the local stack's demo config, its tables under
/// `prefix`, no maintenance, and `extra` settings (a config fix).
fn replay_cmd(
    stack: &LocalStack,
    prefix: &str,
    extra: &[(&str, &str)],
    args: &[&str],
) -> (bool, String) {
    let config =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../localstack/tidemark.toml");
    let mut c = command(stack);
    c.arg("dead-letters")
        .args(args)
        .arg("--config")
        .arg(config)
        .env("TIDEMARK__SCHEMA__TABLE_PREFIX", prefix)
        .env("TIDEMARK__MAINTENANCE__ENABLED", "false");
    for (k, v) in extra {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Two events keyed by `device` (the config wants `deviceId`: dead-lettered
/// as `missing_field`) and one that is not JSON.
fn poison() -> Vec<DeadLetter> {
    let now = Utc::now().timestamp_millis();
    let kinesis = |n: u32| Origin::Kinesis {
        stream: "events".into(),
        shard_id: "shardId-000000000002".into(),
        sequence_number: format!("5{n:04}").into(),
        sub_sequence_number: 0,
    };
    let mut out: Vec<DeadLetter> = (1..=2)
        .map(|n| {
            DeadLetter::new(
                kinesis(n),
                Reason::MissingField,
                "field `deviceId` is missing".into(),
                format!(r#"{{"device":"d-{n}","timestamp":{now},"eventId":"e-{n}"}}"#).as_bytes(),
                Utc::now(),
            )
        })
        .collect();
    out.push(DeadLetter::new(
        kinesis(3),
        Reason::InvalidJson,
        "not JSON".into(),
        b"{oops",
        Utc::now(),
    ));
    out
}

/// The tables named `<prefix>_...`.
async fn tables(ddb: &aws_sdk_dynamodb::Client, prefix: &str) -> Vec<String> {
    let mut pages = ddb.list_tables().into_paginator().items().send();
    let mut out = Vec::new();
    while let Some(t) = pages.next().await {
        let t = t.unwrap();
        if t.starts_with(&format!("{prefix}_")) {
            out.push(t);
        }
    }
    out
}

/// What `list` reads from `from` (and releases at once, on SQS): entries
/// standing for the rows, of which only the count and the reasons are
/// compared.
fn listed(stack: &LocalStack, from: &[&str]) -> Vec<DeadLetter> {
    let mut args = vec!["dead-letters", "list", "-o", "json"];
    args.extend(from);
    let rows: Vec<Value> = serde_json::from_str(&tidemark(stack, &args)).unwrap();
    rows.iter()
        .map(|r| {
            let mut e = poison()[0].clone();
            e.reason = serde_json::from_value(r["reason"].clone()).unwrap();
            e
        })
        .collect()
}

/// Items in every table named `<prefix>_...`.
async fn stored(ddb: &aws_sdk_dynamodb::Client, prefix: &str) -> usize {
    let mut n = 0;
    for t in tables(ddb, prefix).await {
        n += tidemark_tests::count_items(ddb, &t).await;
    }
    n
}

async fn drop_tables(ddb: &aws_sdk_dynamodb::Client, prefix: &str) {
    for t in tables(ddb, prefix).await {
        ddb.delete_table().table_name(t).send().await.unwrap();
    }
}

/// Replay from `from` holding [`poison`]: a dry run changes nothing;
/// without the fix nothing is stored and every entry stays; with it the two
/// events are stored once, the bad one stays with its reason, and a second
/// run stores nothing new. `left` counts the destination's entries.
async fn replay_after_a_fix<F, Fut>(stack: &LocalStack, from: &[&str], left: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Vec<DeadLetter>>,
{
    let ddb = stack.dynamodb();
    let prefix = unique_name("dlr").to_ascii_lowercase().replace('-', "_");
    let fix = [("TIDEMARK__EVENT__ENTITY_FIELD", "device")];
    let args = |extra: &[&'static str]| {
        let mut a = vec!["replay"];
        a.extend(extra);
        a.extend(from.iter().copied());
        a
    };
    let (ok, out) = replay_cmd(stack, &prefix, &fix, &args(&["--dry-run", "-o", "json"]));
    assert!(ok, "{out}");
    let planned: Vec<Value> = serde_json::from_str(&out).unwrap();
    let would: Vec<&str> = planned
        .iter()
        .map(|p| p["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(would.iter().filter(|o| **o == "store").count(), 2, "{out}");
    assert_eq!(left().await.len(), 3, "a dry run removes nothing");
    assert_eq!(stored(&ddb, &prefix).await, 0, "a dry run stores nothing");

    let (ok, out) = replay_cmd(stack, &prefix, &[], &args(&[]));
    assert!(!ok, "entries failed again: exit 1\n{out}");
    assert_eq!(left().await.len(), 3, "{out}");
    assert_eq!(stored(&ddb, &prefix).await, 0);

    let (ok, out) = replay_cmd(stack, &prefix, &fix, &args(&[]));
    assert!(!ok, "the bad entry failed again\n{out}");
    assert!(
        out.contains("2 stored and removed, 1 failed again"),
        "{out}"
    );
    assert_eq!(stored(&ddb, &prefix).await, 2);
    let kept = left().await;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].reason, Reason::InvalidJson);

    let (_, out) = replay_cmd(stack, &prefix, &fix, &args(&["--reason", "missing_field"]));
    assert!(out.contains("replayed 0 entries"), "{out}");
    let (_, _) = replay_cmd(stack, &prefix, &fix, &args(&[]));
    assert_eq!(
        stored(&ddb, &prefix).await,
        2,
        "a second run stores nothing new"
    );
    assert_eq!(left().await.len(), 1);
    drop_tables(&ddb, &prefix).await;
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn replay_from_a_file_after_a_config_fix_stores_each_event_once() {
    let stack = tidemark_tests::stack().await;
    let dir = std::env::temp_dir().join(unique_name("dlr-file"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dead-letters.jsonl");
    let text: String = poison()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    std::fs::write(&path, text).unwrap();
    let read = || async {
        std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect::<Vec<DeadLetter>>()
    };
    replay_after_a_fix(&stack, &["--from-file", path.to_str().unwrap()], read).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn replay_from_dynamodb_after_a_config_fix_stores_each_event_once() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let table = unique_name("dead-letters");
    tidemark_tests::create_table(&ddb, &table, true, TableCapacity::OnDemand).await;
    DynamoDbSink::new(ddb.clone(), table.clone())
        .write(&poison())
        .await
        .unwrap();
    let read = || async {
        let scan = ddb
            .scan()
            .table_name(&table)
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        scan.items()
            .iter()
            .map(|it| serde_json::from_str(it["entry"].as_s().unwrap()).unwrap())
            .collect::<Vec<DeadLetter>>()
    };
    replay_after_a_fix(&stack, &["--from-table", &table], read).await;
    ddb.delete_table().table_name(&table).send().await.unwrap();
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn replay_from_sqs_after_a_config_fix_stores_each_event_once() {
    let stack = tidemark_tests::stack().await;
    let sqs = stack.sqs();
    let url = tidemark_tests::create_queue(&sqs, "dlq", false).await;
    SqsSink::new(sqs.clone(), url.clone())
        .write(&poison())
        .await
        .unwrap();
    let from = ["--from-queue-url", url.as_str()];
    let read = || async { listed(&stack, &from) };
    replay_after_a_fix(&stack, &from, read).await;
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
}

#[tokio::test]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn replay_from_s3_after_a_config_fix_stores_each_event_once() {
    let stack = tidemark_tests::stack().await;
    let s3 = stack.s3();
    let bucket = new_bucket(&s3).await;
    S3Sink::new(
        ObjectWriter::new(s3.clone(), bucket.clone(), "dl".into(), None, "w"),
        8 * 1024 * 1024,
        std::time::Duration::from_millis(100),
    )
    .write(&poison())
    .await
    .unwrap();
    let from = ["--from-bucket", bucket.as_str(), "--from-prefix", "dl"];
    let read = || async { listed(&stack, &from) };
    replay_after_a_fix(&stack, &from, read).await;
    // The replayed objects are kept, moved under `replayed/`.
    let mut moved = 0;
    let mut pages = s3
        .list_objects_v2()
        .bucket(&bucket)
        .prefix("dl/replayed/")
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        moved += page.unwrap().contents().len();
    }
    assert!(moved >= 1, "nothing under dl/replayed/");
    remove_bucket(&s3, &bucket).await;
}
