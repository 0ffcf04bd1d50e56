//! Benchmark helper: the planner's write-shard recommendation for even
//! partitions (`tidemark plan`'s `even_write_shards`), without building the
//! worker. Used by bench/hot-partition's `time_bucket` rerun.
//!
//! plan_shards EVENTS_PER_SEC ITEM_BYTES PARTITIONS [MAX_SKEW]
//! Prints one JSON line: the plan's shard and skew figures.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a bench helper: panics are its error report

use tidemark_schema::sizing::{Prices, SizingInput, recommend};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    assert!(
        (4..=5).contains(&a.len()),
        "usage: plan_shards EVENTS_PER_SEC ITEM_BYTES PARTITIONS [MAX_SKEW]"
    );
    let eps: f64 = a[1].parse().expect("EVENTS_PER_SEC");
    let input = SizingInput {
        avg_events_per_sec: eps,
        peak_events_per_sec: eps,
        peak_key_events_per_sec: None,
        avg_item_bytes: a[2].parse().expect("ITEM_BYTES"),
        avg_record_bytes: None,
        retention: std::time::Duration::from_secs(30 * 86_400),
        safety_factor: 1.0,
        prices: Prices::default(),
        table_partitions: Some(a[3].parse().expect("PARTITIONS")),
        max_partition_skew: a.get(4).map_or(1.25, |s| s.parse().expect("MAX_SKEW")),
    };
    let p = recommend(&input).expect("a valid sizing input");
    println!(
        "{}",
        serde_json::json!({
            "recommended_write_shards": p.recommended_write_shards,
            "recommended_partition_skew": p.recommended_partition_skew,
            "recommended_usable_fraction": p.recommended_usable_fraction,
            "even_write_shards": p.even_write_shards,
            "even_partition_skew": p.even_partition_skew,
            "even_usable_fraction": p.even_usable_fraction,
            "table_partitions": p.table_partitions,
        })
    );
}
