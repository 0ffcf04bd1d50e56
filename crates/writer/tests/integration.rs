//! 10,000 items across 3 provisioned tables, written through the writer and
//! read back, against the local stack (moto) or, when TIDEMARK_LIMITS_DYNAMODB
//! is set, through the limits proxy that throttles like AWS.
//!
//! Skipped unless TIDEMARK_IT=1; then it fails loudly if the stack is down.
//! Start the stack with `localstack/up` and load `localstack/.env`.

// Test code: a panic in a helper is a failed assertion (clippy.toml allows
// this in #[test] functions only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::{Item, ItemKey};
use tidemark_tests::TableCapacity;
use tidemark_writer::{RejectMissing, Submission, WriteOutcome, Writer, WriterConfig};

const ITEMS: usize = 10_000;
const TABLES: usize = 3;

fn endpoint() -> Option<String> {
    if std::env::var("TIDEMARK_IT").ok().as_deref() != Some("1") {
        println!(
            "skipped: set TIDEMARK_IT=1 (and load localstack/.env) to run against the local stack"
        );
        return None;
    }
    let ep = std::env::var("TIDEMARK_LIMITS_DYNAMODB")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_DYNAMODB"))
        .expect("TIDEMARK_IT=1 needs AWS_ENDPOINT_URL_DYNAMODB (source localstack/.env) or TIDEMARK_LIMITS_DYNAMODB");
    assert!(
        ep.contains("127.0.0.1") || ep.contains("localhost"),
        "integration tests only talk to 127.0.0.1, not {ep}"
    );
    Some(ep)
}

async fn client(ep: &str) -> Client {
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(ep)
        .region(Region::new(region))
        .credentials_provider(Credentials::new("test", "test", None, None, "tidemark-it"))
        .build();
    Client::from_conf(conf)
}

async fn create_table(c: &Client, name: &str) {
    let capacity = TableCapacity::Provisioned {
        read: 1_000,
        write: 1_000,
    };
    tidemark_tests::create_table(c, name, true, capacity).await;
}

async fn read_back(c: &Client, table: &str) -> HashSet<(String, String)> {
    let mut keys = HashSet::new();
    let mut start = None;
    loop {
        let out = c
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for it in out.items() {
            if let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
                (it.get("pk"), it.get("sk"))
            {
                keys.insert((pk.clone(), sk.clone()));
            }
        }
        start = out.last_evaluated_key().cloned();
        if start.is_none() {
            return keys;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_items_across_three_tables_are_all_stored() {
    let Some(ep) = endpoint() else { return };
    let c = client(&ep).await;
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

    let (h, task) = Writer::start(c.clone(), WriterConfig::default(), Arc::new(RejectMissing));
    let stored = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let mut expected: Vec<HashSet<(String, String)>> = vec![HashSet::new(); TABLES];
    for i in 0..ITEMS {
        let t = i % TABLES;
        let key = ItemKey {
            pk: format!("device-{:03}#{}", i % 97, i % 4),
            sk: format!("2025-11-22T06:00:00.{i:06}Z"),
        };
        expected[t].insert((key.pk.clone(), key.sk.clone()));
        let mut item = Item::new();
        item.insert("pk".into(), AttributeValue::S(key.pk.clone()));
        item.insert("sk".into(), AttributeValue::S(key.sk.clone()));
        item.insert("payload".into(), AttributeValue::S("x".repeat(150)));
        let stored = stored.clone();
        h.submit(Submission {
            table: tables[t].clone(),
            key,
            item,
            done: Box::new(move |o| {
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
    for (t, want) in tables.iter().zip(&expected) {
        let got = read_back(&c, t).await;
        assert_eq!(got.len(), want.len(), "{t}");
        assert_eq!(&got, want, "{t}");
        let _ = c.delete_table().table_name(t).send().await;
    }
}
