//! The per-table share of the in-flight bound (`writer.max_table_share`),
//! measured: the current period's throughput while a late table (an old
//! period's, scaled down to 1 WCU) throttles every call for ever, with the
//! share on (0.5, the default) against a baseline without it (1.0: one
//! table may hold the whole bound). One producer submits in stream order,
//! one late event among every ten, as a shard catching up across a
//! boundary does; the late table is known late (as the worker's router
//! says for a cold or frozen table), so its events past the share are
//! dead-lettered `late_backlog` instead of waiting. The fake DynamoDB
//! stores the current table's writes after 2 ms.
//!
//! `cargo bench -p tidemark-writer --bench share` prints, per setting, the
//! current items stored per second over the run (at most `RUN` long) and
//! how many were stored, then the ratio.

// A benchmark binary: its `main` is undocumented like criterion's.
#![allow(missing_docs)]
// Bench code: a panic in a helper is a failed assertion.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
use aws_sdk_dynamodb::types::{ProvisionedThroughputDescription, TableDescription};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use bytes::Bytes;
use futures::future::BoxFuture;
use tidemark_schema::{Item, ItemKey, KeyAttributes, WireItem};
use tidemark_writer::{
    Completion, LateTables, RawResponse, Submission, Transport, TransportError, WriteOutcome,
    Writer, WriterConfig,
};

/// Current events the producer submits (it stops earlier at `RUN`).
const CURRENT: u64 = 40_000;
/// Longest run per setting.
const RUN: Duration = Duration::from_secs(10);
/// The writer's in-flight bound (small, so the late table fills it fast).
const BOUND: usize = 2_000;

/// Throttles every call to `late`; stores every other call after 2 ms.
#[derive(Clone)]
struct Fake;

impl Transport for Fake {
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let (table, reqs) = v["RequestItems"]
            .as_object()
            .unwrap()
            .iter()
            .next()
            .map(|(t, r)| (t.clone(), r.as_array().unwrap().len()))
            .unwrap();
        Box::pin(async move {
            if table == "late" {
                let body = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"}"#;
                return Ok(RawResponse {
                    status: 400,
                    body: Bytes::from_static(body.as_bytes()),
                });
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            let out = serde_json::json!({
                "UnprocessedItems": {},
                "ConsumedCapacity": [{"TableName": table, "CapacityUnits": reqs}],
            });
            Ok(RawResponse {
                status: 200,
                body: serde_json::to_vec(&out).unwrap().into(),
            })
        })
    }
}

/// `late` takes late data.
struct LateIsLate;

impl LateTables for LateIsLate {
    fn is_late(&self, table: &str) -> bool {
        table == "late"
    }
}

fn client() -> Client {
    let describe = mock!(Client::describe_table).then_compute_output(|req| {
        let t = TableDescription::builder()
            .table_name(req.table_name().unwrap())
            .provisioned_throughput(
                ProvisionedThroughputDescription::builder()
                    .write_capacity_units(if req.table_name() == Some("late") {
                        1
                    } else {
                        40_000
                    })
                    .read_capacity_units(100)
                    .build(),
            )
            .build();
        DescribeTableOutput::builder().table(t).build()
    });
    mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&describe])
}

fn submission(table: &str, i: u64, stored: &Arc<AtomicU64>) -> Submission {
    let pk = format!("device-{:04}#{}", i % 1000, i % 8);
    let sk = format!("2026-11-26T18:{:02}:{:02}.{:06}Z", i / 60 % 60, i % 60, i);
    let mut it = Item::new();
    it.insert(
        "pk".into(),
        aws_sdk_dynamodb::types::AttributeValue::S(pk.clone()),
    );
    it.insert(
        "sk".into(),
        aws_sdk_dynamodb::types::AttributeValue::S(sk.clone()),
    );
    it.insert(
        "payload".into(),
        aws_sdk_dynamodb::types::AttributeValue::S("x".repeat(150)),
    );
    let current = table == "now";
    let stored = stored.clone();
    Submission {
        table: table.into(),
        key: ItemKey::new(&pk, &sk),
        item: WireItem::encode(&it),
        done: Completion::from_fn(move |o| {
            if current && o == WriteOutcome::Stored {
                stored.fetch_add(1, Ordering::Relaxed);
            }
        }),
    }
}

/// Current items stored per second with `share`, and how many.
async fn run(share: f64) -> (f64, u64) {
    let cfg = WriterConfig {
        max_in_flight_items: BOUND,
        max_table_share: share,
        linger: Duration::from_millis(5),
        ..WriterConfig::default()
    };
    let (h, task) = Writer::builder(client(), Arc::new(Fake), KeyAttributes::default())
        .config(cfg)
        .late_tables(Arc::new(LateIsLate))
        .start();
    let stored = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let producer = {
        let (h, stored) = (h.clone(), stored.clone());
        tokio::spawn(async move {
            for i in 0..CURRENT {
                if i % 10 == 9 {
                    // Refused at once past the share (late_backlog): the
                    // producer moves on either way.
                    let _ = h.submit(submission("late", i, &stored)).await;
                }
                if h.submit(submission("now", i, &stored)).await.is_err() {
                    return;
                }
            }
        })
    };
    while stored.load(Ordering::Relaxed) < CURRENT && start.elapsed() < RUN {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = start.elapsed();
    let n = stored.load(Ordering::Relaxed);
    producer.abort();
    drop(h);
    task.abort();
    (n as f64 / took.as_secs_f64(), n)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it once too.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (on, on_n) = rt.block_on(run(0.5));
    let (off, off_n) = rt.block_on(run(1.0));
    println!(
        "per-table share, a late table throttled for ever, 1 late event in 10, in-flight bound {BOUND}:"
    );
    println!("  share 0.5 (default): {on:>9.0} current items/s ({on_n} of {CURRENT} stored)");
    println!("  share 1.0 (baseline): {off:>8.0} current items/s ({off_n} of {CURRENT} stored)");
    println!("  ratio: {:.1}x", on / off.max(1.0));
}
