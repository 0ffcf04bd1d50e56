use super::*;
use crate::route::RouterConfig;

fn input(avg: f64, peak: f64, bytes: u64) -> SizingInput {
    let mut i = SizingInput::new(avg, peak, bytes);
    i.safety_factor = 1.0;
    i
}

/// Seed 000: 600 events/s of 180 bytes fill 10 GB in "26 or 27 hours", so
/// daily tables; one partition, one key.
#[test]
fn seed_000_six_hundred_events_of_180_bytes_need_daily_tables() {
    let p = recommend(&input(600.0, 600.0, 180)).unwrap();
    assert!(
        (25.0..27.0).contains(&p.evaluation.partition_fill_hours),
        "{:#?}",
        p.arithmetic
    );
    assert_eq!(p.recommendation.period, Period::Day);
    assert!(p.evaluation.period_fits);
    assert_eq!(p.load.wcu_per_item, 1);
    assert_eq!(p.load.min_write_shards, 1);
    assert_eq!(p.recommendation.table_partitions, 1);
    assert!(
        p.arithmetic.iter().any(|l| l.contains("25.7 h")),
        "{:#?}",
        p.arithmetic
    );
}

/// Seed 000: 5,000 average and 6,000 peak events/s of 1 KB need 6,000 WCU
/// and a suffix of 6 on the one key (`_1` to `_6`); one byte more doubles it.
#[test]
fn seed_000_five_thousand_average_six_thousand_peak() {
    let p = recommend(&input(5000.0, 6000.0, 1024)).unwrap();
    assert_eq!(p.load.wcu_per_item, 1);
    assert_eq!(p.load.peak_wcu, 6000);
    assert_eq!(p.load.min_write_shards, 6);
    assert_eq!(p.load.head_room_shards, 6);
    assert_eq!(p.kinesis.shards_by_records, 6);
    // 6000 x 1 KiB = 5.86 MiB/s.
    assert_eq!(p.kinesis.shards_by_bytes, 6);
    // The one key needs a suffix; its keys must also spread over the
    // partitions, so the plan takes at least the seed's 6.
    assert!(p.recommendation.key.spreads_one_entity());
    assert!(p.recommendation.key.shards() >= 6);
    assert!(p.evaluation.holds_peak, "{:#?}", p.arithmetic);
    let p2 = recommend(&input(5000.0, 6000.0, 1025)).unwrap();
    assert_eq!(p2.load.peak_wcu, 12_000);
    assert_eq!(p2.load.min_write_shards, 12);
}

/// Seed 003: one sensor bursting to 2,000 writes/s needs at least 2 keys,
/// and 10 with 5x head-room.
#[test]
fn seed_003_bursting_sensor_needs_two_shards_and_ten_with_head_room() {
    let mut i = input(50_000.0, 50_000.0, 500);
    i.peak_key_events_per_sec = Some(2000.0);
    let p = recommend(&i).unwrap();
    assert_eq!(p.load.hot_key_wcu, 2000);
    assert_eq!(p.load.min_write_shards, 2);
    i.safety_factor = 5.0;
    let p = recommend(&i).unwrap();
    assert_eq!(p.load.head_room_shards, 10);
    assert!(p.recommendation.key.shards() >= 10);
    assert!(
        p.evaluation.hottest_key_wcu <= 200.0 + 1e-9,
        "{:?}",
        p.evaluation
    );
}

/// The newcomer's case: every line is about the one layout recommended.
#[test]
fn a_hot_key_gets_a_suffix_and_lines_that_agree() {
    let mut i = SizingInput::new(5000.0, 6000.0, 180);
    i.peak_key_events_per_sec = Some(2000.0);
    let p = recommend(&i).unwrap();
    let r = &p.recommendation;
    assert!(
        matches!(r.key, KeyStrategy::CalculatedSuffix { .. }),
        "{r:?}"
    );
    let n = r.key.shards();
    assert!((4..=32).contains(&n), "{n}");
    assert_eq!(r.table_partitions, 8);
    assert_eq!(r.active_write_capacity, 7500);
    let e = &p.evaluation;
    assert!(e.holds_peak && e.hottest_partition_wcu <= 1000.0, "{e:?}");
    assert_eq!(e.queries_per_read, n);
    // One key fewer overloads a partition (the fewest that fit).
    let fewer = spread::spread(
        &KeyStrategy::CalculatedSuffix { shards: n - 1 },
        &Traffic {
            hot: 2000.0,
            rest: 4000.0,
            others: None,
        },
        8,
    );
    assert!(
        n == p.load.head_room_shards || fewer.hottest_partition > 1000.0,
        "{fewer:?}"
    );
    // The period from the busiest partition's share, not one partition.
    assert!(e.partition_fill_hours > 12.0, "{e:?}");
    assert_eq!(r.period, Period::TwelveHours);
    assert_eq!(e.tables_alive, 62);
    let strategy = &p.decisions[0];
    assert!(strategy.reason.contains("`time_bucket`"), "{strategy:?}");
    let verdicts: Vec<(&str, bool)> = p.strategies.iter().map(|v| (v.strategy, v.fits)).collect();
    assert_eq!(
        verdicts,
        [
            ("entity", false),
            ("time_bucket", false),
            ("calculated_suffix", true),
            ("random_suffix", true)
        ]
    );
    // No line of the arithmetic names another shard count.
    for l in &p.arithmetic {
        assert!(l.starts_with("Kinesis") || !l.contains(" shards"), "{l}");
    }
}

/// Many small entities, the busiest well under a key's limit: one key per
/// entity, one query per read.
#[test]
fn many_small_entities_keep_entity_keys() {
    let mut i = SizingInput::new(5000.0, 6000.0, 180);
    i.peak_key_events_per_sec = Some(20.0);
    i.entities = Some(50_000);
    let p = recommend(&i).unwrap();
    assert_eq!(p.recommendation.key, KeyStrategy::Entity);
    assert_eq!(p.evaluation.queries_per_read, 1);
    assert!(
        p.warnings.iter().all(|w| !w.contains("--entities")),
        "{:?}",
        p.warnings
    );
    // Unknown count: the plan says how many it relies on.
    i.entities = None;
    i.peak_key_events_per_sec = Some(100.0);
    let p = recommend(&i).unwrap();
    assert_eq!(p.recommendation.key, KeyStrategy::Entity);
    assert!(
        p.warnings.iter().any(|w| w.contains("with at least")),
        "{:?}",
        p.warnings
    );
    // Few entities at that rate do not spread over 8 partitions: suffixed.
    i.entities = Some(60);
    let p = recommend(&i).unwrap();
    assert!(
        p.recommendation.key.spreads_one_entity(),
        "{:?}",
        p.recommendation
    );
}

/// A big stream on many partitions: the capacity, partitions and period
/// grow together, and a long retention of short periods meets the quota.
#[test]
fn many_partitions_and_the_table_quota() {
    let mut i = SizingInput::new(100_000.0, 120_000.0, 400);
    i.peak_key_events_per_sec = Some(500.0);
    i.entities = Some(200_000);
    let p = recommend(&i).unwrap();
    assert_eq!(p.recommendation.table_partitions, 150);
    assert!(p.evaluation.holds_peak, "{:?}", p.evaluation);
    // 40 MB/s over 150 partitions: a few hours per partition.
    assert!(
        p.evaluation.partition_fill_hours > 6.0,
        "{:?}",
        p.evaluation
    );
    assert!(
        p.warnings.iter().any(|w| w.contains("40,000 WCU")),
        "{:?}",
        p.warnings
    );
    i.retention = Duration::from_secs(400 * 86_400);
    i.table_quota = 1000;
    let p = recommend(&i).unwrap();
    assert!(p.evaluation.tables_alive > 1000);
    assert!(
        p.warnings.iter().any(|w| w.contains("quota")),
        "{:?}",
        p.warnings
    );
}

/// A config's layout is judged by the same arithmetic.
#[test]
fn a_config_is_judged_beside_the_recommendation() {
    let mut i = SizingInput::new(5000.0, 6000.0, 180);
    i.peak_key_events_per_sec = Some(2000.0);
    i.current = Some(CurrentLayout {
        source: "t.toml".into(),
        key: KeyStrategy::TimeBucket {
            shards: 10,
            bucket: Bucket::Hour,
        },
        period: Period::Day,
        billing: Billing::Provisioned,
        active_write_capacity: 1000,
        adaptive_sharding: Default::default(),
    });
    let p = recommend(&i).unwrap();
    let c = p.config.unwrap();
    assert_eq!(c.table_partitions, 1);
    assert!(!c.evaluation.holds_peak);
    assert_eq!(c.evaluation.queries_per_read, 24);
    let decisions: Vec<&str> = c.differences.iter().map(|d| d.decision).collect();
    assert_eq!(decisions, ["strategy", "shards", "period", "capacity"]);
    assert!(
        c.differences[0].consequence.contains("throttled"),
        "{:?}",
        c.differences[0]
    );
    assert!(
        c.differences[3].consequence.contains("below"),
        "{:?}",
        c.differences[3]
    );
}

#[test]
fn costs_follow_the_shown_arithmetic() {
    let p = recommend(&input(1000.0, 2000.0, 200)).unwrap();
    let writes = 1000.0 * 730.0 * 3600.0 / 1e6 * 0.625;
    let storage = 1000.0 * 300.0 * 30.0 * 86_400.0 / 1e9 * 0.25;
    assert!((p.cost.on_demand_usd - (writes + storage)).abs() < 1e-6);
    let capacity = p.recommendation.active_write_capacity as f64;
    let overlap = 1.0 + 0.5 / average_hours(p.recommendation.period);
    let prov = capacity * overlap * 730.0 * 0.00065;
    assert!((p.cost.provisioned_usd - (prov + storage)).abs() < 1e-6);
    assert!(
        p.arithmetic.iter().any(|l| l.contains("1642.50")),
        "{:#?}",
        p.arithmetic
    );
    // 20,000 events/s of 1 KB fill a partition's 10 GB within the hour.
    let huge = recommend(&input(20_000.0, 20_000.0, 1000)).unwrap();
    assert!(
        huge.evaluation.partition_fill_hours > 1.0,
        "{:?}",
        huge.evaluation
    );
    // Slow streams get the longest period.
    assert_eq!(
        recommend(&input(1.0, 1.0, 100))
            .unwrap()
            .recommendation
            .period,
        Period::Quarter
    );
}

#[test]
fn invalid_input_names_the_field() {
    let e = recommend(&input(100.0, 50.0, 100)).unwrap_err();
    assert!(e.to_string().contains("peak_events_per_sec"));
    let e = recommend(&input(100.0, 100.0, 500_000)).unwrap_err();
    assert!(e.to_string().contains("avg_item_bytes"));
    let e = recommend(&input(f64::NAN, 100.0, 100)).unwrap_err();
    assert!(e.to_string().contains("avg_events_per_sec"));
    let mut i = input(100.0, 100.0, 100);
    i.peak_key_events_per_sec = Some(10.0);
    i.entities = Some(5);
    let e = recommend(&i).unwrap_err();
    assert!(e.to_string().contains("entities"), "{e}");
}

#[test]
fn sample_sizing_routes_the_sample() {
    let r = Router::new(RouterConfig::with_prefix("tm")).unwrap();
    let with_id = br#"{"deviceId":"d","timestamp":"1999-01-01T00:00:00Z","eventId":"e","t":1}"#;
    let n = item_bytes_of_sample(&r, with_id).unwrap();
    // pk(2+1) sk(2+26) entity_id(9+1) event_id(8+1) ts(2+24) ts_ms(5+5) t(1+2)
    assert_eq!(n, 3 + 28 + 10 + 9 + 26 + 10 + 3);
    let without = br#"{"deviceId":"d","timestamp":"1999-01-01T00:00:00Z","t":1}"#;
    assert!(item_bytes_of_sample(&r, without).unwrap() > n + 100);
}

#[test]
fn input_from_toml() {
    let i: SizingInput = toml::from_str(
        "avg_events_per_sec = 600\npeak_events_per_sec = 900\navg_item_bytes = 180\nretention = \"7d\"\n[prices]\nstorage_gb_month = 0.3",
    )
    .unwrap();
    assert_eq!(i.retention, Duration::from_secs(7 * 86_400));
    assert!((i.prices.storage_gb_month - 0.3).abs() < 1e-12);
    assert!((i.prices.on_demand_write_per_million - 0.625).abs() < 1e-12);
    assert!((i.safety_factor - 2.0).abs() < 1e-12);
    assert_eq!(i.max_queries_per_read, 32);
}

#[test]
fn thousands_separators() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(6000), "6,000");
    assert_eq!(thousands(1_234_567), "1,234,567");
}
