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
//! cold devices sharing RATE - H items/s and one device at H items/s), or
//! `hot_entity:H:N` (the seeds' sensor: `sensor-alpha-001` at H events/s
//! among 999 cold sensors sharing RATE - H, routed by the product's
//! [`Router`] under `time_bucket` with N shards and hour buckets, so TABLE
//! is the table prefix: events of now go to `{TABLE}_{YYYY-MM-DD}`).
//!
//! In `hot_entity` mode adaptive write sharding is on unless
//! `TIDEMARK_ADAPTIVE=0`, with its defaults, wired as `run` wires it
//! ([`tidemark_worker::adaptive_sharding`]: the router's split registry, the
//! writer's hot-key hook, the refresh and decision tasks); events the router
//! cannot key yet (their table's splits not read recently enough) wait and
//! are routed again, as the pipeline does. Split records are read and
//! written at `BENCH_SPLITS_ENDPOINT` (default ENDPOINT): the proxy's sink
//! mode records writes without keeping them, so the bench points it at the
//! emulator. The summary adds the splits made (seconds from the start).
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
use tidemark_schema::strategy::Bucket;
use tidemark_schema::{
    ItemKey, KeyAttributes, KeyStrategy, Origin, RouteCache, Router, RouterConfig, shard_of,
};
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

/// The hot sensor of `hot_entity` mode (the seeds' name).
const HOT_SENSOR: &str = "sensor-alpha-001";

/// `hot_entity:H:N`: the hot sensor's rate and the time_bucket shards.
fn hot_entity(mode: &str) -> Option<(f64, u32)> {
    let (h, n) = mode.strip_prefix("hot_entity:")?.split_once(':')?;
    Some((
        h.parse().expect("hot_entity:H:N"),
        n.parse().expect("hot_entity:H:N"),
    ))
}

/// The router of `hot_entity` mode: the local stack's key (time_bucket,
/// hour buckets) with N shards, day tables under `prefix`.
fn hot_entity_router(prefix: &str, shards: u32, adaptive: bool) -> Router {
    let mut c = RouterConfig::with_prefix(prefix);
    c.key = KeyStrategy::TimeBucket {
        shards,
        bucket: Bucket::Hour,
    };
    c.adaptive_sharding.enabled = adaptive;
    Router::new(c).expect("a valid router config")
}

/// Event `i` of `hot_entity` mode as JSON (the default event mapping:
/// `deviceId`, `timestamp`), padded to about `size` bytes; hot or not.
fn hot_entity_event(i: u64, every: u64, now_ms: i64, size: usize) -> (Vec<u8>, bool) {
    let hot = i.is_multiple_of(every);
    let device = if hot {
        HOT_SENSOR.to_owned()
    } else {
        format!("sensor-{:03}", (i - i / every - 1) % 999)
    };
    let mut e = serde_json::json!({"deviceId": device, "timestamp": now_ms, "payload": ""});
    let base = e.to_string().len() + 60;
    e["payload"] = "x".repeat(size.saturating_sub(base)).into();
    (e.to_string().into_bytes(), hot)
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

fn wall_ms() -> i64 {
    chrono_now().timestamp_millis()
}

fn chrono_now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
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
    let hot_entity = hot_entity(&mode);
    let adaptive =
        hot_entity.is_some() && std::env::var("TIDEMARK_ADAPTIVE").map_or(true, |v| v != "0");
    let router = hot_entity.map(|(_, n)| Arc::new(hot_entity_router(&a[2], n, adaptive)));
    let mut builder =
        Writer::builder(client, Arc::new(transport), KeyAttributes::default()).config(cfg);
    // Adaptive sharding as `run` wires it: the router's registry, the
    // writer's hot-key hook, the refresh and decision tasks.
    let mut splits_task = None;
    if let (Some(router), true) = (&router, adaptive) {
        let at = std::env::var("BENCH_SPLITS_ENDPOINT").unwrap_or_else(|_| endpoint.clone());
        let splits_conf = aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(&at)
            .region(aws_config::Region::new("us-east-1"))
            .load()
            .await;
        let (hook, task) = tidemark_worker::adaptive_sharding(
            aws_sdk_dynamodb::Client::new(&splits_conf),
            router.clone(),
            "write_load".into(),
        )
        .await;
        builder = builder.hot_keys(hook);
        splits_task = Some(task);
    }
    let (handle, task) = builder.start();
    let stored = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let hot_every = match hot_entity {
        Some((h, _)) => Some(((rate / h).round() as u64).max(1)),
        None => hot_every(&mode, rate),
    };
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
    let start_ms = wall_ms();
    let mut i = 0u64;
    let mut submitted = 0u64;
    // hot_entity mode: events offered and not yet keyed (their table's
    // splits not known for their time), oldest first, with their class.
    let mut waiting: std::collections::VecDeque<(Vec<u8>, usize, u64)> = Default::default();
    let (mut route_holds, mut most_waiting) = (0u64, 0usize);
    let mut cache = RouteCache::default();
    let sub = |table, key, item, class: usize| Submission {
        table,
        key,
        item,
        done: {
            let (s, r, c) = (stored.clone(), rejected.clone(), counts.clone());
            Completion::from_fn(move |o| match o {
                WriteOutcome::Stored => {
                    s.fetch_add(1, Ordering::Relaxed);
                    c[class].fetch_add(1, Ordering::Relaxed);
                }
                WriteOutcome::Rejected { .. } => {
                    r.fetch_add(1, Ordering::Relaxed);
                }
            })
        },
    };
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut offering = true;
    loop {
        tick.tick().await;
        let el = start.elapsed().as_secs_f64();
        if el >= secs {
            offering = false;
        }
        let due = if offering { (el * rate) as u64 } else { i };
        while i < due {
            if let Some(every) = hot_every.filter(|_| router.is_some()) {
                let (data, hot) = hot_entity_event(i, every, wall_ms(), size);
                let class = usize::from(!hot);
                counts[2 + class].fetch_add(1, Ordering::Relaxed);
                waiting.push_back((data, class, i));
                i += 1;
                continue;
            }
            let (pk, sk) = key(&mode, i, hot_every);
            let class = usize::from(pk != "dev#hot");
            counts[2 + class].fetch_add(1, Ordering::Relaxed);
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
            let s = sub(
                table.clone(),
                ItemKey::new(&pk, &sk),
                tidemark_schema::WireItem::encode(&item),
                class,
            );
            // submit waits when the writer's in-flight budget is full: the
            // writer's back-pressure, so the offered load falls behind.
            handle.submit(s).await.expect("submit");
            submitted += 1;
            i += 1;
            if start.elapsed().as_secs_f64() >= secs {
                break;
            }
        }
        // Routed by the product's router, in order; an event its table's
        // splits are not known for waits (the refresh task was asked).
        if let Some(router) = &router {
            most_waiting = most_waiting.max(waiting.len());
            while let Some((data, class, n)) = waiting.front() {
                let origin = Origin::Kinesis {
                    stream: "bench".into(),
                    shard_id: "shardId-000000000000".into(),
                    sequence_number: n.to_string().into(),
                    sub_sequence_number: 0,
                };
                match router.route(data, &origin, 0, chrono_now(), &mut cache) {
                    Ok(routes) => {
                        let r = routes.new;
                        let s = sub(r.table, r.key, r.item, *class);
                        handle.submit(s).await.expect("submit");
                        submitted += 1;
                        waiting.pop_front();
                    }
                    Err(e) if e.is_hold() => {
                        route_holds += 1;
                        break;
                    }
                    Err(e) => panic!("event {n} cannot be routed: {e}"),
                }
            }
        }
        if !offering && waiting.is_empty() {
            break;
        }
    }
    let offered_secs = start.elapsed().as_secs_f64();
    let drain = Instant::now();
    handle.close();
    task.await.expect("join").expect("writer ended cleanly");
    sampler.abort();
    // The hot sensor's splits as this driver learned them, in seconds from
    // the start: [fan-out, decided, applies from].
    let mut splits: Vec<[f64; 3]> = Vec::new();
    if let Some(router) = &router {
        for (_, learned) in router.splits().snapshot() {
            for s in learned.splits.of(HOT_SENSOR) {
                let rel = |ms: i64| (ms - start_ms) as f64 / 1000.0;
                splits.push([f64::from(s.fan_out), rel(s.made_at_ms), rel(s.from_ms)]);
            }
        }
    }
    drop(splits_task);
    // Cumulative [stored_hot, stored_cold, offered_hot, offered_cold] at
    // the end of each second since the start (drain included).
    let cumulative = rows.lock().expect("rows").clone();
    println!(
        "{}",
        serde_json::json!({
            "submitted": submitted,
            "offered": i,
            "adaptive": adaptive,
            "splits": splits,
            "route_holds": route_holds,
            "most_waiting": most_waiting,
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
