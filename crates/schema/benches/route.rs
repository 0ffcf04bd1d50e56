//! Routing cost per event: extract, key and item for ~200-byte records, and
//! for a 12-field record without a mapping and with a 10-field
//! rename/include mapping (`route_mapping/*`).
//!
//! Run: `cargo bench -p tidemark-schema --bench route`. Criterion's
//! throughput line reports elements/s; time per iteration is ns per event.

// criterion_main! generates an undocumented `main`.
#![allow(missing_docs)]

use std::hint::black_box;

use chrono::{DateTime, Utc};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tidemark_schema::Origin;
use tidemark_schema::route::{RouteCache, Router, RouterConfig};
use tidemark_schema::strategy::{Bucket, KeyStrategy};

/// A typical IoT reading; padded to exactly 200 bytes.
fn record(i: u32) -> Vec<u8> {
    let mut s = format!(
        r#"{{"deviceId":"sensor-{:05}","timestamp":"2026-11-22T05:{:02}:{:02}.{:03}Z","eventId":"0f8fad5b-d9cb-469f-a165-{:012}","temperature":21.{},"humidity":48.2,"pressure":1013.25,"note":""#,
        i % 10_000,
        (i / 60) % 60,
        i % 60,
        i % 1000,
        i,
        i % 10
    );
    while s.len() < 198 {
        s.push('x');
    }
    s.push_str("\"}");
    s.into_bytes()
}

fn bench(c: &mut Criterion) {
    let records: Vec<Vec<u8>> = (0..1024).map(record).collect();
    assert!(records.iter().all(|r| r.len() == 200));
    let origin = Origin::Kinesis {
        stream: "s".into(),
        shard_id: "shardId-000000000000".into(),
        sequence_number: "49590338271490256608559692538361571095921575989136588898".into(),
        sub_sequence_number: 0,
    };
    let now: DateTime<Utc> = "2026-11-22T06:00:00Z".parse().unwrap_or_default();
    let mut group = c.benchmark_group("route_200B");
    group.throughput(Throughput::Elements(1));
    for (name, key) in [
        ("entity", KeyStrategy::Entity),
        ("random_suffix", KeyStrategy::RandomSuffix { shards: 10 }),
        (
            "calculated_suffix",
            KeyStrategy::CalculatedSuffix { shards: 10 },
        ),
        (
            "time_bucket",
            KeyStrategy::TimeBucket {
                shards: 10,
                bucket: Bucket::Hour,
            },
        ),
    ] {
        let mut cfg = RouterConfig::with_prefix("tidemark");
        cfg.key = key;
        cfg.ttl_attribute = Some("ttl".into());
        route_each(&mut group, name, cfg, &records, &origin, now);
    }
    group.finish();

    // A wider event (12 payload fields, ~330 bytes), routed as it is and
    // through a mapping that renames 5 fields (two from nested paths, one
    // through an array index) and includes 10.
    let wide: Vec<Vec<u8>> = (0..1024u32)
        .map(|i| {
            format!(
                r#"{{"deviceId":"sensor-{:05}","timestamp":"2026-11-22T05:{:02}:{:02}.{:03}Z","eventId":"e-{i:08}","temperature":21.{},"humidity":48.2,"pressure":1013.25,"site":{{"name":"plant-{}","zone":"z{}"}},"tags":["a","b"],"fw":"1.4.2","battery":87,"rssi":-61,"state":"ok","seq":{i},"debug":"x"}}"#,
                i % 10_000,
                (i / 60) % 60,
                i % 60,
                i % 1000,
                i % 10,
                i % 7,
                i % 3,
            )
            .into_bytes()
        })
        .collect();
    let mut group = c.benchmark_group("route_mapping");
    group.throughput(Throughput::Elements(1));
    let mapped = {
        let mut cfg = RouterConfig::with_prefix("tidemark");
        cfg.event.rename = [
            ("temperature", "temp_c"),
            ("humidity", "rh"),
            ("site.name", "site_name"),
            ("site.zone", "site_zone"),
            ("tags[0]", "first_tag"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
        cfg.event.include = Some(
            [
                "temp_c",
                "rh",
                "site_name",
                "site_zone",
                "first_tag",
                "pressure",
                "fw",
                "battery",
                "rssi",
                "state",
            ]
            .map(str::to_owned)
            .to_vec(),
        );
        cfg
    };
    for (name, cfg) in [
        ("wide_no_mapping", RouterConfig::with_prefix("tidemark")),
        ("wide_rename5_include10", mapped),
    ] {
        route_each(&mut group, name, cfg, &wide, &origin, now);
    }
    group.finish();
}

/// Benches routing `records` in turn with `cfg`.
fn route_each(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    cfg: RouterConfig,
    records: &[Vec<u8>],
    origin: &Origin,
    now: DateTime<Utc>,
) {
    let Ok(router) = Router::new(cfg) else {
        panic!("bench config is valid");
    };
    let mut i = 0usize;
    // One cache across the events, as the pipeline keeps one per run.
    let mut cache = RouteCache::default();
    group.bench_function(name, |b| {
        b.iter(|| {
            i = (i + 1) % records.len();
            let routed = router.route(black_box(&records[i]), origin, 0, now, &mut cache);
            black_box(routed.is_ok())
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
