//! 10,000 items across 3 provisioned tables, written through the writer and
//! read back, through an in-process limits proxy in front of the local stack
//! (moto) that throttles like AWS: each table's single partition serves only
//! 300 WCU/s, though the table says 1,000, so the writer starts too fast, is
//! throttled, and must adapt without losing anything.
//!
//! Needs the local stack: run with the `stack` feature (see docs/testing.md);
//! without it the test is listed as ignored. Moved here from
//! crates/writer/tests/integration.rs.

// Test code: a panic in a helper is a failed assertion (clippy.toml allows
// this in #[test] functions only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::{Item, ItemKey, KeyAttributes};
use tidemark_tests::TableCapacity;
use tidemark_writer::{Completion, Submission, WriteOutcome, Writer, WriterConfig};

const ITEMS: usize = 10_000;
const TABLES: usize = 3;

async fn create_table(c: &Client, name: &str) {
    let capacity = TableCapacity::Provisioned {
        read: 1_000,
        write: 1_000,
    };
    tidemark_tests::create_table(c, name, true, capacity).await;
}

/// The (pk, sk) keys stored in `table`.
async fn read_back(c: &Client, table: &str) -> HashSet<(String, String)> {
    let mut keys = HashSet::new();
    for it in tidemark_tests::scan_items(c, table).await {
        if let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
            (it.get("pk"), it.get("sk"))
        {
            keys.insert((pk.clone(), sk.clone()));
        }
    }
    keys
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_items_across_three_tables_are_all_stored() {
    let stack = tidemark_tests::stack().await;
    let proxy = tidemark_tests::start_limits_proxy(&stack, |limits| {
        limits.partition_wcu = 300.0;
        limits.initial_credit_secs = 0.0;
        limits.burst_secs = 0.0;
    })
    .await;
    let ep = proxy.url.clone();
    let c = stack.dynamodb_at(&ep);
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let tables: Vec<String> = (0..TABLES)
        .map(|i| format!("tidemark_it_{run}_{i}"))
        .collect();
    for t in &tables {
        create_table(&c, t).await;
    }

    let (h, task) = Writer::builder(
        c.clone(),
        stack.dynamodb_transport_at(&ep),
        KeyAttributes::default(),
    )
    .config(WriterConfig::default())
    .start();
    let stored = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let mut expected: Vec<HashSet<(String, String)>> = vec![HashSet::new(); TABLES];
    for i in 0..ITEMS {
        let t = i % TABLES;
        let key = ItemKey::new(
            &format!("device-{:03}#{}", i % 97, i % 4),
            &format!("2025-11-22T06:00:00.{i:06}Z"),
        );
        expected[t].insert((key.pk().to_owned(), key.sk().to_owned()));
        let mut item = Item::new();
        item.insert("pk".into(), AttributeValue::S(key.pk().to_owned()));
        item.insert("sk".into(), AttributeValue::S(key.sk().to_owned()));
        item.insert("payload".into(), AttributeValue::S("x".repeat(150)));
        let stored = stored.clone();
        h.submit(Submission {
            table: tables[t].as_str().into(),
            key,
            item: tidemark_schema::WireItem::encode(&item),
            done: Completion::from_fn(move |o| {
                assert_eq!(o, WriteOutcome::Stored);
                stored.fetch_add(1, Ordering::Relaxed);
            }),
        })
        .await
        .unwrap();
    }
    tokio::time::timeout(Duration::from_secs(300), h.flush())
        .await
        .expect("flush within 5 minutes");
    let elapsed = started.elapsed();
    let stats = h.stats();
    h.close();
    task.await.unwrap().unwrap();
    assert_eq!(stored.load(Ordering::Relaxed), ITEMS as u64);
    println!(
        "{ITEMS} items in {:.1} s ({:.0} items/s) via {ep}: {stats:?}",
        elapsed.as_secs_f64(),
        ITEMS as f64 / elapsed.as_secs_f64()
    );
    // The proxy did throttle, and accepted every item at least once.
    let counters = proxy.proxy.stats().dynamodb.counters;
    assert!(
        counters.requests_throttled + counters.requests_partial > 0,
        "the proxy never throttled: {counters:?}"
    );
    assert!(counters.items_accepted >= ITEMS as u64, "{counters:?}");
    // Read back from the emulator itself, past the proxy.
    let direct = stack.dynamodb();
    for (t, want) in tables.iter().zip(&expected) {
        let got = read_back(&direct, t).await;
        assert_eq!(got.len(), want.len(), "{t}");
        assert_eq!(&got, want, "{t}");
        let _ = direct.delete_table().table_name(t).send().await;
    }
}
