//! Proof that events are stored: for each event of a manifest (one JSON
//! event per line, as `produce --manifest` writes), compute where `run`
//! writes it and read that item back with BatchGetItem, comparing content.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use backon::BackoffBuilder;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::Serialize;
use tidemark_schema::route::{RouteCache, Router};
use tidemark_schema::{Item, Origin};

/// Outcome of a verification.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct VerifyReport {
    /// Events in the manifest.
    pub events: u64,
    /// Stored with exactly the expected content.
    pub found: u64,
    /// Not stored.
    pub missing: u64,
    /// Stored under the right key but with other content.
    pub mismatched: u64,
    /// Manifest lines that do not route (would be dead-lettered).
    pub unroutable: u64,
    /// Up to 10 examples of missing or mismatched keys.
    pub examples: Vec<String>,
}

/// Errors verifying.
#[derive(Debug, thiserror::Error)]
#[error("verify: {0}")]
pub struct VerifyError(String);

/// Verifies `events` (raw JSON each) against DynamoDB.
pub async fn verify(
    client: &aws_sdk_dynamodb::Client,
    router: &Router,
    events: &[Vec<u8>],
) -> Result<VerifyReport, VerifyError> {
    let attrs = router.config().key_attributes.clone();
    let origin = Origin::Kinesis {
        stream: "verify".into(),
        shard_id: "verify".into(),
        sequence_number: "0".into(),
        sub_sequence_number: 0,
    };
    let mut report = VerifyReport::default();
    // table -> expected items by (pk, sk)
    let mut expected: HashMap<String, HashMap<(String, String), Item>> = HashMap::new();
    let mut cache = RouteCache::default();
    for raw in events {
        report.events += 1;
        // Route at the event's own time: placement depends only on the event,
        // and neither the future-skew nor the expiry check should apply here.
        let now = event_time(router, raw, &origin);
        // Stored items come back as attribute maps: compare against the
        // routed item decoded the same way.
        match router
            .route_in(raw, &origin, now, &mut cache)
            .map(|r| (r.item.to_item(), r))
        {
            Ok((Ok(item), r)) => {
                expected
                    .entry(r.table.to_string())
                    .or_default()
                    .insert((r.key.pk().to_owned(), r.key.sk().to_owned()), item);
            }
            Ok((Err(_), _)) | Err(_) => report.unroutable += 1,
        }
    }
    // Jobs read in parallel: verification of a large manifest is otherwise
    // bound by round trips. A partition with many expected keys is read with
    // paged Queries over its sort-key range (a handful of calls); the rest
    // with BatchGetItem, 100 keys a call.
    let mut jobs = Vec::new();
    for (table, items) in &expected {
        let mut by_pk: HashMap<&str, Vec<(String, String)>> = HashMap::new();
        for key in items.keys() {
            by_pk.entry(key.0.as_str()).or_default().push(key.clone());
        }
        let mut singles = Vec::new();
        for (_, keys) in by_pk {
            if keys.len() >= QUERY_THRESHOLD {
                jobs.push(Job::Partition(table.clone(), keys));
            } else {
                singles.extend(keys);
            }
        }
        for chunk in singles.chunks(100) {
            jobs.push(Job::Keys(table.clone(), chunk.to_vec()));
        }
    }
    let results: Vec<Result<JobResult, VerifyError>> = futures::stream::iter(jobs)
        .map(|job| async {
            match job {
                Job::Keys(table, chunk) => {
                    let stored = fetch(client, &table, &chunk, &attrs.pk, &attrs.sk).await?;
                    Ok((table, chunk, stored))
                }
                Job::Partition(table, keys) => {
                    let stored =
                        query_partition(client, &table, &keys, &attrs.pk, &attrs.sk).await?;
                    Ok((table, keys, stored))
                }
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for r in results {
        let (table, chunk, stored) = r?;
        let items = &expected[&table];
        for key in &chunk {
            match stored.get(key) {
                Some(item) if Some(item) == items.get(key) => report.found += 1,
                Some(_) => {
                    report.mismatched += 1;
                    note(&mut report, format!("mismatch {table} {}|{}", key.0, key.1));
                }
                None => {
                    report.missing += 1;
                    note(&mut report, format!("missing {table} {}|{}", key.0, key.1));
                }
            }
        }
    }
    Ok(report)
}

/// Expected keys in one partition from which a Query beats point reads.
const QUERY_THRESHOLD: usize = 200;

/// A job's table, the keys it looked for, and the items found by key.
type JobResult = (
    String,
    Vec<(String, String)>,
    HashMap<(String, String), Item>,
);

/// One unit of verification work.
enum Job {
    /// Point reads of up to 100 keys.
    Keys(String, Vec<(String, String)>),
    /// All expected keys of one partition (same pk), read by Query.
    Partition(String, Vec<(String, String)>),
}

/// Reads one partition's items between the smallest and largest expected
/// sort keys (consistent, all pages).
async fn query_partition(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &[(String, String)],
    pk: &str,
    sk: &str,
) -> Result<HashMap<(String, String), Item>, VerifyError> {
    let partition = keys.first().map(|k| k.0.clone()).unwrap_or_default();
    let low = keys.iter().map(|k| &k.1).min().cloned().unwrap_or_default();
    let high = keys.iter().map(|k| &k.1).max().cloned().unwrap_or_default();
    let mut stored = HashMap::new();
    let mut start = None;
    loop {
        let out = client
            .query()
            .table_name(table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
            .expression_attribute_names("#pk", pk)
            .expression_attribute_names("#sk", sk)
            .expression_attribute_values(":pk", AttributeValue::S(partition.clone()))
            .expression_attribute_values(":lo", AttributeValue::S(low.clone()))
            .expression_attribute_values(":hi", AttributeValue::S(high.clone()))
            .set_exclusive_start_key(start.take())
            .send()
            .await;
        let out = match out {
            Ok(o) => o,
            Err(e) if is_missing_table(&e) => return Ok(stored),
            Err(e) => {
                return Err(VerifyError(
                    aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
                ));
            }
        };
        for item in out.items() {
            let get = |name: &str| {
                item.get(name)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            stored.insert((get(pk), get(sk)), item.clone());
        }
        match out.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return Ok(stored),
        }
    }
}

/// Reads the items of `keys` in `table` (BatchGetItem, unprocessed keys
/// retried); a missing table holds nothing.
pub async fn fetch(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &[(String, String)],
    pk: &str,
    sk: &str,
) -> Result<HashMap<(String, String), Item>, VerifyError> {
    let mut request: Vec<HashMap<String, AttributeValue>> = keys
        .iter()
        .map(|(p, s)| {
            HashMap::from([
                (pk.to_string(), AttributeValue::S(p.clone())),
                (sk.to_string(), AttributeValue::S(s.clone())),
            ])
        })
        .collect();
    let mut stored = HashMap::new();
    // Unprocessed keys are read again after a back-off with jitter.
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_secs(1))
        .with_jitter()
        .without_max_times()
        .build();
    while !request.is_empty() {
        let ka = KeysAndAttributes::builder()
            .set_keys(Some(request))
            .consistent_read(true)
            .build()
            .map_err(|e| VerifyError(e.to_string()))?;
        let out = match client
            .batch_get_item()
            .request_items(table, ka)
            .send()
            .await
        {
            Ok(o) => o,
            Err(e) if is_missing_table(&e) => break,
            Err(e) => {
                return Err(VerifyError(
                    aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
                ));
            }
        };
        for item in out
            .responses()
            .and_then(|r| r.get(table))
            .into_iter()
            .flatten()
        {
            let get = |name: &str| {
                item.get(name)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            stored.insert((get(pk), get(sk)), item.clone());
        }
        request = out
            .unprocessed_keys()
            .and_then(|u| u.get(table))
            .map(|k| k.keys().to_vec())
            .unwrap_or_default();
        if !request.is_empty() {
            tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(1))).await;
        }
    }
    Ok(stored)
}

fn note(report: &mut VerifyReport, example: String) {
    if report.examples.len() < 10 {
        report.examples.push(example);
    }
}

/// Generic over the operation (BatchGetItem and Query both call it).
fn is_missing_table<E: ProvideErrorMetadata, R: tidemark_aws_errors::HttpStatus>(
    e: &aws_sdk_dynamodb::error::SdkError<E, R>,
) -> bool {
    tidemark_aws_errors::classify(e) == tidemark_aws_errors::ErrorClass::NotFound
}

fn event_time(router: &Router, raw: &[u8], origin: &Origin) -> DateTime<Utc> {
    router
        .extractor()
        .extract(raw, origin)
        .ok()
        .and_then(|e| DateTime::from_timestamp_millis(e.timestamp_ms))
        .unwrap_or_else(Utc::now)
}
