//! Issue 24: a migration backfill beside live traffic, through the limits
//! proxy (a 100 WCU provisioned table, no burst credit). Live traffic
//! offers 50 WCU/s through a writer of its own; the backfill copies 300
//! old-layout items at the same time. Measured, per scenario: the share of
//! live item attempts DynamoDB throttled (UnprocessedItems, or a throttled
//! call) while the backfill ran:
//! - `alone`: no backfill (the floor);
//! - `share 0.25`: `migrate backfill`'s default `--capacity-share`;
//! - `share 1.0`: a backfill allowed the whole table (the baseline the
//!   share protects against).
//!
//! Asserts the default stays under 2%; prints every figure.
//!
//! Needs the local stack: run with the `stack` feature (see docs/testing.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, Tag};
use bytes::Bytes;
use futures::future::BoxFuture;
use tidemark_schema::route::RouterConfig;
use tidemark_schema::strategy::{Bucket, KeyStrategy};
use tidemark_schema::{Item, ItemKey, KeyAttributes, WireItem};
use tidemark_tests::TableCapacity;
use tidemark_worker::maintenance::migrate::{self, BackfillOptions};
use tidemark_worker::maintenance::{LAYOUT_FROM_TAG, LAYOUT_TAG, MIGRATION_TAG, layout_of};
use tidemark_writer::{
    Completion, RawResponse, Submission, Transport, TransportError, Writer, WriterConfig,
};

const OLD_ITEMS: usize = 300;
const LIVE_PER_SEC: u64 = 50;
const TABLE_WCU: i64 = 100;

fn tb(shards: u32) -> KeyStrategy {
    KeyStrategy::TimeBucket {
        shards,
        bucket: Bucket::Hour,
    }
}

/// Counts item attempts and throttled item attempts of the calls through it.
struct Counting {
    inner: Arc<dyn Transport>,
    items: Arc<AtomicU64>,
    throttled: Arc<AtomicU64>,
}

/// Items of a BatchWriteItem request or its UnprocessedItems.
fn count_items(map: &serde_json::Value) -> u64 {
    map.as_object()
        .map(|m| {
            m.values()
                .map(|v| v.as_array().map_or(0, Vec::len) as u64)
                .sum()
        })
        .unwrap_or(0)
}

impl Transport for Counting {
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
        let sent = serde_json::from_slice::<serde_json::Value>(&body)
            .map(|v| count_items(&v["RequestItems"]))
            .unwrap_or(0);
        let call = self.inner.batch_write_item(body);
        let (items, throttled) = (self.items.clone(), self.throttled.clone());
        Box::pin(async move {
            let out = call.await;
            items.fetch_add(sent, Ordering::Relaxed);
            if let Ok(r) = &out {
                let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
                let lost = if r.status == 200 {
                    count_items(&v["UnprocessedItems"])
                } else if v["__type"]
                    .as_str()
                    .is_some_and(|t| t.contains("Throughput") || t.contains("Throttl"))
                {
                    sent
                } else {
                    0
                };
                throttled.fetch_add(lost, Ordering::Relaxed);
            }
            out
        })
    }
}

/// An event item under `key`'s layout.
fn event_item(key: &KeyStrategy, i: usize, ts: i64) -> (ItemKey, Item) {
    let (entity, id) = (format!("dev-{}", i % 40), format!("ev-{i}"));
    let k = key.key(&entity, ts, &id);
    let s = |v: &str| AttributeValue::S(v.to_string());
    let item: Item = [
        ("pk", s(k.pk())),
        ("sk", s(k.sk())),
        ("entity_id", s(&entity)),
        ("event_id", s(&id)),
        ("ts", s(&tidemark_schema::timefmt::iso_millis(ts))),
        ("ts_ms", AttributeValue::N(ts.to_string())),
        ("payload", s(&"x".repeat(120))),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    (k, item)
}

/// A dual table holding `OLD_ITEMS` items of the 4-shard layout, written
/// past the proxy (they are the table's past, not part of the measure).
async fn dual_table(
    stack: &tidemark_tests::LocalStack,
    via_proxy: &aws_sdk_dynamodb::Client,
    name: &str,
) {
    let capacity = TableCapacity::Provisioned {
        read: 1_000,
        write: TABLE_WCU,
    };
    tidemark_tests::create_table(via_proxy, name, true, capacity).await;
    let direct = stack.dynamodb();
    let ts = chrono::Utc::now().timestamp_millis() - 60_000;
    let items = (0..OLD_ITEMS)
        .map(|i| event_item(&tb(4), i, ts + i as i64).1)
        .collect();
    // Written through the test process's own limits proxy (the scenario
    // measures another one): unprocessed items are sent again.
    tidemark_tests::put_items(&direct, name, items).await;
    let arn = direct
        .describe_table()
        .table_name(name)
        .send()
        .await
        .unwrap()
        .table
        .unwrap()
        .table_arn
        .unwrap();
    let mut req = direct.tag_resource().resource_arn(arn);
    for (k, v) in [
        (LAYOUT_TAG, layout_of(&tb(8))),
        (LAYOUT_FROM_TAG, layout_of(&tb(4))),
        (MIGRATION_TAG, "dual".to_string()),
    ] {
        req = req.tags(Tag::builder().key(k).value(v).build().unwrap());
    }
    req.send().await.unwrap();
}

/// (live attempts, live attempts throttled, live items stored, seconds)
/// of one scenario: live traffic for as long as the backfill (with
/// `share`) runs, or for 6 s without one.
async fn scenario(
    stack: &tidemark_tests::LocalStack,
    proxy_url: &str,
    coordinator: &str,
    name: &str,
    share: Option<f64>,
) -> (u64, u64, u64, f64) {
    let via_proxy = stack.without_retries().dynamodb_at(proxy_url);
    dual_table(stack, &via_proxy, name).await;
    let (items, throttled) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let transport = Arc::new(Counting {
        inner: stack.dynamodb_transport_at(proxy_url),
        items: items.clone(),
        throttled: throttled.clone(),
    });
    let (live, task) = Writer::builder(via_proxy.clone(), transport, KeyAttributes::default())
        .config(WriterConfig::default())
        .start();
    let stop = Arc::new(AtomicBool::new(false));
    let stored = Arc::new(AtomicU64::new(0));
    let producer = {
        let (live, stop, stored, name) =
            (live.clone(), stop.clone(), stored.clone(), name.to_string());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1000 / LIVE_PER_SEC));
            let ts = chrono::Utc::now().timestamp_millis();
            let mut i = 100_000;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let (key, item) = event_item(&tb(8), i, ts + i as i64);
                i += 1;
                let stored = stored.clone();
                live.submit(Submission {
                    table: name.as_str().into(),
                    key,
                    item: WireItem::encode(&item),
                    done: Completion::from_fn(move |_| {
                        stored.fetch_add(1, Ordering::Relaxed);
                    }),
                })
                .await
                .unwrap();
            }
        })
    };
    let started = Instant::now();
    match share {
        None => tokio::time::sleep(Duration::from_secs(6)).await,
        Some(share) => {
            let mut config = RouterConfig::with_prefix("pacing");
            config.key = tb(8);
            config.migrate_from = Some(tb(4));
            let opts = BackfillOptions {
                page_size: 100,
                max_pages: None,
                writer: WriterConfig {
                    capacity_share: share,
                    ..WriterConfig::default()
                },
            };
            // With the SDK's retries, as `tidemark migrate backfill` has
            // them (Scan and cursor saves are single calls).
            let done = migrate::backfill(
                &stack.dynamodb_at(proxy_url),
                stack.dynamodb_transport_at(proxy_url),
                &config,
                coordinator,
                name,
                &opts,
                |_| {},
            )
            .await
            .unwrap();
            // Entities whose shard stays need no copy.
            let moved = (0..OLD_ITEMS)
                .filter(|&i| event_item(&tb(4), i, 0).0 != event_item(&tb(8), i, 0).0)
                .count() as u64;
            assert!(done.done && done.copied == moved && moved > 0, "{done:?}");
        }
    }
    let secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    producer.await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), live.flush())
        .await
        .unwrap();
    live.close();
    task.await.unwrap().unwrap();
    stack
        .dynamodb()
        .delete_table()
        .table_name(name)
        .send()
        .await
        .ok();
    (
        items.load(Ordering::Relaxed),
        throttled.load(Ordering::Relaxed),
        stored.load(Ordering::Relaxed),
        secs,
    )
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_at_its_default_share_leaves_live_traffic_unthrottled() {
    let stack = tidemark_tests::stack().await;
    let proxy = tidemark_tests::start_limits_proxy(&stack, |limits| {
        limits.initial_credit_secs = 0.0;
        limits.burst_secs = 0.0;
    })
    .await;
    let name = tidemark_tests::unique_name("pacing");
    let coordinator = format!("{name}-coordinator");
    // The backfill keeps its cursor in the coordinator table (leaseKey).
    tidemark_tests::create_hash_only(&stack.dynamodb(), &coordinator, "leaseKey").await;
    let mut shares = Vec::new();
    for (i, share) in [None, Some(0.25), Some(1.0)].into_iter().enumerate() {
        let (items, throttled, stored, secs) = scenario(
            &stack,
            &proxy.url,
            &coordinator,
            &format!("{name}_{i}"),
            share,
        )
        .await;
        let live_share = throttled as f64 / items.max(1) as f64;
        println!(
            "backfill {share:?}: {secs:.1} s, live {stored} stored, {items} attempts, {throttled} throttled ({:.2}%)",
            100.0 * live_share
        );
        assert!(stored > 0);
        shares.push(live_share);
    }
    assert!(shares[1] < 0.02, "live throttled share {:?}", shares);
    stack
        .dynamodb()
        .delete_table()
        .table_name(&coordinator)
        .send()
        .await
        .ok();
}
