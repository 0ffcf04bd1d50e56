//! Benchmark driver: offers a paced load of ~N-byte items to one table through
//! the Tidemark writer (crates/writer), then prints a JSON summary. Used by
//! bench/writer-capacity and bench/hot-partition (built with
//! `cargo build -p tidemark-bench --bin write_load`); the proxy measures
//! goodput.
//!
//! write_load ENDPOINT TABLE RATE SECS ITEM_BYTES KEYS
//! KEYS: `spread` (1,000 devices), `time` (hour-only partition key),
//! `time_bucket:N` (seed 003: `{sha256(entity) mod N}#{hour}`), or
//! `hot_device:H` (the `entity` strategy: one partition key per device, 999
//! cold devices sharing RATE - H items/s and one device at H items/s).
//!
//! Environment: `TIDEMARK_KEY_PACING=0` turns the writer's per-key pacing
//! off (the table-wide control alone, for A/B runs); `BENCH_MAX_IN_FLIGHT`
//! sets `writer.max_in_flight_items` (a key hotter than its partition builds
//! a backlog; the default budget would then hold every other key's
//! submissions too). The summary has per-second stored and offered counts of
//! the hot device and of the cold ones, counted at acknowledgement.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a bench driver: panics are its error report

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::{ItemKey, KeyAttributes, shard_of};
use tidemark_writer::{Completion, Submission, WriteOutcome, Writer, WriterConfig};

/// The hot device's share of the items in `hot_device:H` mode, as every
/// `1/every`-th item.
fn hot_every(mode: &str, rate: f64) -> Option<u64> {
    let h: f64 = mode
        .strip_prefix("hot_device:")?
        .parse()
        .expect("hot_device:H");
    Some(((rate / h).round() as u64).max(1))
}

fn key(mode: &str, i: u64, hot_every: Option<u64>) -> (String, String) {
    if let Some(every) = hot_every {
        let dev = if i.is_multiple_of(every) {
            "dev#hot".to_owned()
        } else {
            format!("dev#{}", (i - i / every - 1) % 999)
        };
        return (dev, format!("{i:012}"));
    }
    let entity = format!("sensor-{}", i % 1000);
    let hour = "2026-11-22T06";
    match mode {
        "time" => (hour.to_owned(), format!("{entity}#{i:012}")),
        m if m.starts_with("time_bucket:") => {
            let n: u32 = m["time_bucket:".len()..].parse().expect("time_bucket:N");
            (
                format!("{}#{hour}", shard_of(&entity, n)),
                format!("{entity}#{i:012}"),
            )
        }
        _ => (format!("dev#{}", i % 1000), format!("{i:012}")),
    }
}

#[tokio::main]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    assert!(
        a.len() == 7,
        "usage: write_load ENDPOINT TABLE RATE SECS ITEM_BYTES KEYS"
    );
    let (endpoint, table) = (
        a[1].clone(),
        tidemark_schema::SharedStr::from(a[2].as_str()),
    );
    let rate: f64 = a[3].parse().expect("RATE");
    let secs: f64 = a[4].parse().expect("SECS");
    let size: usize = a[5].parse().expect("ITEM_BYTES");
    let mode = a[6].clone();

    let conf = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(&endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    let client = aws_sdk_dynamodb::Client::new(&conf);
    // Start-up: a bad endpoint is a usage error of this driver.
    let transport = tidemark_writer::SdkTransport::new(&conf).expect("a region and credentials");
    let mut cfg = WriterConfig {
        key_pacing: std::env::var("TIDEMARK_KEY_PACING").map_or(true, |v| v != "0"),
        ..WriterConfig::default()
    };
    if let Ok(n) = std::env::var("BENCH_MAX_IN_FLIGHT") {
        cfg.max_in_flight_items = n.parse().expect("BENCH_MAX_IN_FLIGHT");
    }
    let key_pacing = cfg.key_pacing;
    let (handle, task) = Writer::builder(client, Arc::new(transport), KeyAttributes::default())
        .config(cfg)
        .start();
    let stored = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let hot_every = hot_every(&mode, rate);
    // Stored and offered, hot device and cold ones: [stored_hot,
    // stored_cold, offered_hot, offered_cold], sampled once a second.
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let rows: Arc<std::sync::Mutex<Vec<[u64; 4]>>> = Arc::default();
    let sampler = {
        let (counts, rows) = (counts.clone(), rows.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let row = std::array::from_fn(|k| counts[k].load(Ordering::Relaxed));
                rows.lock().expect("rows").push(row);
            }
        })
    };

    let start = Instant::now();
    let mut i = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    loop {
        tick.tick().await;
        let el = start.elapsed().as_secs_f64();
        if el >= secs {
            break;
        }
        let due = (el * rate) as u64;
        while i < due {
            let (pk, sk) = key(&mode, i, hot_every);
            let hot = usize::from(pk != "dev#hot");
            counts[2 + hot].fetch_add(1, Ordering::Relaxed);
            let base = 2 + pk.len() + 2 + sk.len() + "payload".len();
            let item: HashMap<String, AttributeValue> = [
                ("pk".to_owned(), AttributeValue::S(pk.clone())),
                ("sk".to_owned(), AttributeValue::S(sk.clone())),
                (
                    "payload".to_owned(),
                    AttributeValue::S("x".repeat(size.saturating_sub(base))),
                ),
            ]
            .into();
            let (s, r, c) = (stored.clone(), rejected.clone(), counts.clone());
            let sub = Submission {
                table: table.clone(),
                key: ItemKey::new(&pk, &sk),
                item: tidemark_schema::WireItem::encode(&item),
                done: Completion::from_fn(move |o| match o {
                    WriteOutcome::Stored => {
                        s.fetch_add(1, Ordering::Relaxed);
                        c[hot].fetch_add(1, Ordering::Relaxed);
                    }
                    WriteOutcome::Rejected { .. } => {
                        r.fetch_add(1, Ordering::Relaxed);
                    }
                }),
            };
            // submit waits when the writer's in-flight budget is full: the
            // writer's back-pressure, so the offered load falls behind.
            handle.submit(sub).await.expect("submit");
            i += 1;
            if start.elapsed().as_secs_f64() >= secs {
                break;
            }
        }
    }
    let offered_secs = start.elapsed().as_secs_f64();
    let drain = Instant::now();
    handle.close();
    task.await.expect("join").expect("writer ended cleanly");
    sampler.abort();
    // Cumulative [stored_hot, stored_cold, offered_hot, offered_cold] at
    // the end of each second since the start (drain included).
    let cumulative = rows.lock().expect("rows").clone();
    println!(
        "{}",
        serde_json::json!({
            "submitted": i,
            "stored": stored.load(Ordering::Relaxed),
            "rejected": rejected.load(Ordering::Relaxed),
            "offered_secs": offered_secs,
            "drain_secs": drain.elapsed().as_secs_f64(),
            "key_pacing": key_pacing,
            "stored_hot": counts[0].load(Ordering::Relaxed),
            "stored_cold": counts[1].load(Ordering::Relaxed),
            "offered_hot": counts[2].load(Ordering::Relaxed),
            "offered_cold": counts[3].load(Ordering::Relaxed),
            "per_sec": cumulative,
        })
    );
}
