//! Benchmark helper: the fewest `time_bucket` write shards whose expected
//! hottest partition is within a skew bound on a table of given partitions
//! (the planner's spread model, `tidemark_schema::sizing`), without
//! building the worker. Used by bench/hot-partition's `time_bucket` rerun.
//!
//! plan_shards EVENTS_PER_SEC ITEM_BYTES PARTITIONS [MAX_SKEW]
//! Prints one JSON line: the shard and skew figures.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a bench helper: panics are its error report

use tidemark_schema::size::wcu_for_size;
use tidemark_schema::sizing::{even_shards, partition_skew};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    assert!(
        (4..=5).contains(&a.len()),
        "usage: plan_shards EVENTS_PER_SEC ITEM_BYTES PARTITIONS [MAX_SKEW]"
    );
    let eps: f64 = a[1].parse().expect("EVENTS_PER_SEC");
    let bytes: usize = a[2].parse().expect("ITEM_BYTES");
    let partitions: u32 = a[3].parse().expect("PARTITIONS");
    let bound: f64 = a.get(4).map_or(1.25, |s| s.parse().expect("MAX_SKEW"));
    // The key rate alone: one shard per 1,000 WCU.
    let for_rate = (eps * wcu_for_size(bytes) as f64 / 1000.0).ceil().max(1.0) as u32;
    let skew = partition_skew(for_rate, partitions);
    let even = even_shards(for_rate, partitions, bound, 4096);
    let even_skew = even.map(|n| partition_skew(n, partitions));
    println!(
        "{}",
        serde_json::json!({
            "recommended_write_shards": for_rate,
            "recommended_partition_skew": skew,
            "recommended_usable_fraction": 1.0 / skew,
            "even_write_shards": even,
            "even_partition_skew": even_skew,
            "even_usable_fraction": even_skew.map(|k| 1.0 / k),
            "table_partitions": partitions,
        })
    );
}
