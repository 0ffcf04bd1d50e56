//! Dead-letter destinations for stack tests, made, read and removed: a
//! bucket and its gzip JSON-lines objects, a queue of a given message size,
//! tables by prefix. Every test that makes one removes it at its end.

use std::io::Read as _;

use aws_sdk_sqs::types::QueueAttributeName;
use tidemark_worker::deadletter::DeadLetter;

use crate::unique_name;

/// A new bucket named after [`unique_name`] (lower case, as S3 wants).
pub async fn new_bucket(s3: &aws_sdk_s3::Client) -> String {
    let name = unique_name("dl").to_ascii_lowercase().replace('_', "-");
    s3.create_bucket()
        .bucket(&name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateBucket {name} failed (is the local stack up?): {e:?}"));
    name
}

/// Deletes every object of `bucket`, then the bucket.
pub async fn remove_bucket(s3: &aws_sdk_s3::Client, bucket: &str) {
    for key in keys(s3, bucket, "").await {
        s3.delete_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .expect("DeleteObject");
    }
    s3.delete_bucket()
        .bucket(bucket)
        .send()
        .await
        .expect("DeleteBucket");
}

/// The keys under `prefix` in `bucket`.
pub async fn keys(s3: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pages = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        out.extend(
            page.expect("ListObjectsV2")
                .contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_string)),
        );
    }
    out
}

/// The entries of one gzip JSON-lines object.
pub async fn object(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Vec<DeadLetter> {
    let body = s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .expect("GetObject");
    let gz = body.body.collect().await.expect("object body").into_bytes();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .expect("a gzip object of text");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a dead-letter entry per line"))
        .collect()
}

/// Every object under `prefix` in `bucket`, as (key, its entries).
pub async fn objects(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
) -> Vec<(String, Vec<DeadLetter>)> {
    let mut out = Vec::new();
    for key in keys(s3, bucket, prefix).await {
        let entries = object(s3, bucket, &key).await;
        out.push((key, entries));
    }
    out
}

/// A queue named [`unique_name`]`(prefix)` whose `MaximumMessageSize` is
/// `max_message_size` bytes; returns its URL.
pub async fn queue_of_size(
    sqs: &aws_sdk_sqs::Client,
    prefix: &str,
    max_message_size: u32,
) -> String {
    sqs.create_queue()
        .queue_name(unique_name(prefix))
        .attributes(
            QueueAttributeName::MaximumMessageSize,
            max_message_size.to_string(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateQueue failed (is the local stack up?): {e:?}"))
        .queue_url
        .expect("CreateQueue returns the queue's URL")
}

/// The tables whose names start with `prefix`.
pub async fn tables(ddb: &aws_sdk_dynamodb::Client, prefix: &str) -> Vec<String> {
    let mut pages = ddb.list_tables().into_paginator().items().send();
    let mut out = Vec::new();
    while let Some(t) = pages.next().await {
        let t = t.expect("ListTables");
        if t.starts_with(prefix) {
            out.push(t);
        }
    }
    out
}

/// Deletes the tables whose names start with `prefix`.
pub async fn drop_tables(ddb: &aws_sdk_dynamodb::Client, prefix: &str) {
    for t in tables(ddb, prefix).await {
        ddb.delete_table()
            .table_name(&t)
            .send()
            .await
            .unwrap_or_else(|e| panic!("DeleteTable {t}: {e:?}"));
    }
}

/// `count` poison records of 1 KB to 900 KB, evenly spread: not JSON (each
/// is dead-lettered as `invalid_json`), and different from one another.
pub fn poison_records(count: u32) -> Vec<Vec<u8>> {
    assert!(count >= 2, "a spread needs two records");
    (0..count)
        .map(|n| {
            let size = 1_000 + n as usize * (899_000 / (count as usize - 1));
            let mut p = b"not json ".to_vec();
            p.extend((p.len()..size).map(|i| (i as u32 ^ n.wrapping_mul(2_654_435_761)) as u8));
            p
        })
        .collect()
}

/// Every one of `records` is among `found`, as an `invalid_json` entry
/// holding it whole, byte for byte.
pub fn assert_each_found_whole(records: &[Vec<u8>], found: &[DeadLetter]) {
    let by_sha: std::collections::BTreeMap<&str, &DeadLetter> = found
        .iter()
        .map(|e| (e.payload_sha256.as_str(), e))
        .collect();
    for (n, r) in records.iter().enumerate() {
        let hash = tidemark_schema::route::oversize::sha256_hex(r);
        let e = by_sha
            .get(hash.as_str())
            .unwrap_or_else(|| panic!("record {n} ({} bytes) not in S3", r.len()));
        assert_eq!(e.reason, tidemark_schema::Reason::InvalidJson);
        assert!(!e.payload_truncated, "record {n} was cut");
        assert!(
            e.payload().expect("a payload") == *r,
            "record {n}, byte for byte"
        );
    }
}
