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

/// The setup named `setup` with history in `class`.
fn setup(p: &SizingPlan, setup: WriteSetup, class: HistoryClass) -> &SetupCost {
    p.pricing
        .setups
        .iter()
        .find(|s| s.setup == setup && s.history_class == class)
        .unwrap()
}

/// Seed 000's 600 events/s, steady: the fixed capacity is 80% busy, far
/// above the break-even, so provisioned at a fixed capacity wins; a month
/// of history is cheaper in infrequent access.
#[test]
fn a_steady_load_is_cheapest_provisioned_fixed() {
    let p = recommend(&input(600.0, 600.0, 180)).unwrap();
    let c = &p.pricing.choice;
    assert_eq!(c.setup, WriteSetup::ProvisionedFixed, "{:#?}", p.pricing);
    assert_eq!(c.history_class, HistoryClass::StandardInfrequentAccess);
    assert_eq!(p.recommendation.billing, BillingMode::Provisioned);
    assert!(c.reason.contains("break-even"), "{}", c.reason);
    // The figures are the arithmetic's: 750 WCU x (1 + 0.5 h / 24 h) x
    // 730 h x $0.00065.
    let fixed = setup(&p, WriteSetup::ProvisionedFixed, HistoryClass::Standard);
    assert!((fixed.writes_usd - 750.0 * (1.0 + 0.5 / 24.0) * 730.0 * 0.00065).abs() < 0.01);
    let od = setup(&p, WriteSetup::OnDemand, HistoryClass::Standard);
    assert!((od.writes_usd - 600.0 * 730.0 * 3600.0 / 1e6 * 0.625).abs() < 0.01);
    assert!(od.total_usd > fixed.total_usd);
    // Steady: auto scaling at 70% holds more than the 80% of fixed.
    let auto = setup(
        &p,
        WriteSetup::ProvisionedAutoscaled,
        HistoryClass::Standard,
    );
    assert!(auto.meets_load && auto.total_usd > fixed.total_usd);
    // Standard-IA history: 30 of 31 days at $0.10 instead of $0.25.
    let ia = setup(
        &p,
        WriteSetup::ProvisionedFixed,
        HistoryClass::StandardInfrequentAccess,
    );
    let gb = p.pricing.stored_gb - p.pricing.current_gb;
    assert!((fixed.storage_usd - ia.storage_usd - gb * 0.15).abs() < 0.02);
    assert_eq!(c.total_usd, ia.total_usd);
}

/// The same kind of stream with its day in one 15-minute burst to 5,000/s:
/// capacity held for the burst idles, auto scaling cannot reach it in
/// time, so on demand wins.
#[test]
fn a_spiky_load_is_cheapest_on_demand() {
    let mut i = input(100.0, 5000.0, 180);
    i.peak_hours_per_day = Some(0.25);
    let p = recommend(&i).unwrap();
    let c = &p.pricing.choice;
    assert_eq!(c.setup, WriteSetup::OnDemand, "{:#?}", p.pricing);
    assert_eq!(p.recommendation.billing, BillingMode::OnDemand);
    assert!(c.reason.contains("idle"), "{}", c.reason);
    assert!(
        c.reason.contains("auto scaling cannot follow"),
        "{}",
        c.reason
    );
    let auto = setup(
        &p,
        WriteSetup::ProvisionedAutoscaled,
        HistoryClass::Standard,
    );
    assert!(!auto.meets_load, "{auto:?}");
    // Cheaper, but it does not meet the load: not chosen.
    assert!(auto.total_usd < c.total_usd);
    let od = setup(&p, WriteSetup::OnDemand, HistoryClass::Standard);
    assert!(od.max_write_units.unwrap() >= 5000);
}

/// An eight-hour daily plateau at twice the base: capacity follows it
/// within minutes and falls off-peak, so auto scaling beats both.
#[test]
fn a_long_daily_peak_is_cheapest_auto_scaled() {
    let mut i = input(1500.0, 3000.0, 180);
    i.peak_hours_per_day = Some(8.0);
    i.peak_key_events_per_sec = Some(10.0);
    let p = recommend(&i).unwrap();
    let c = &p.pricing.choice;
    assert_eq!(
        c.setup,
        WriteSetup::ProvisionedAutoscaled,
        "{:#?}",
        p.pricing
    );
    assert!(c.reason.contains("follows"), "{}", c.reason);
    let auto = setup(&p, WriteSetup::ProvisionedAutoscaled, c.history_class);
    assert!(auto.catch_up_minutes.unwrap() < 8 * 60);
    assert_eq!(auto.min_write_capacity, Some(1072));
    assert_eq!(auto.max_write_capacity, Some(4286));
}

/// PITR and export are priced beside and added to every total when asked.
#[test]
fn pitr_and_export_are_priced_and_added_when_asked() {
    let base = recommend(&input(600.0, 600.0, 180)).unwrap();
    let gb = base.pricing.stored_gb;
    assert!((base.pricing.pitr_usd - gb * 0.20).abs() < 0.01);
    let mut i = input(600.0, 600.0, 180);
    i.pitr = true;
    i.export_at_expiry = true;
    let p = recommend(&i).unwrap();
    let extra = p.pricing.pitr_usd + p.pricing.export_usd;
    for (a, b) in base.pricing.setups.iter().zip(&p.pricing.setups) {
        assert!(
            (b.total_usd - a.total_usd - extra).abs() < 0.02,
            "{a:?} {b:?}"
        );
    }
}

/// Hourly tables kept 30 days by many prefixes pass the 10,000 tables an
/// account may have.
#[test]
fn the_table_count_covers_every_prefix() {
    let mut i = input(600.0, 600.0, 180);
    i.prefixes = 400;
    let p = recommend(&i).unwrap();
    let t = &p.pricing.tables;
    assert_eq!(t.total, t.per_prefix * 400);
    assert!(t.total > 10_000);
    assert!(
        p.warnings.iter().any(|w| w.contains("10,000")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn invalid_cost_input_names_the_field() {
    let field = |f: &dyn Fn(&mut SizingInput)| {
        let mut i = input(100.0, 200.0, 100);
        f(&mut i);
        match recommend(&i) {
            Err(SizingError::Invalid { field, .. }) => field,
            Ok(_) => "accepted",
        }
    };
    assert_eq!(
        field(&|i| i.peak_hours_per_day = Some(0.0)),
        "peak_hours_per_day"
    );
    assert_eq!(
        field(&|i| i.peak_hours_per_day = Some(25.0)),
        "peak_hours_per_day"
    );
    assert_eq!(field(&|i| i.reads_per_day = -1.0), "reads_per_day");
    assert_eq!(field(&|i| i.autoscale_target = 0.95), "autoscale_target");
    assert_eq!(field(&|i| i.scale_up_minutes = 0), "scale_up_minutes");
    assert_eq!(field(&|i| i.prefixes = 0), "prefixes");
    assert_eq!(field(&|i| i.prices.export_gb = f64::NAN), "prices");
}

/// Every price a flag names is the price file's key of the same name.
#[test]
fn price_names_are_the_price_file_keys() {
    for (name, _) in Prices::default().named() {
        let from_file: Prices = toml::from_str(&format!("{name} = 9.5")).unwrap();
        let mut by_flag = Prices::default();
        assert!(by_flag.set(name, 9.5), "{name}");
        assert_eq!(from_file, by_flag, "{name}");
    }
    assert!(!Prices::default().set("nope", 1.0));
}

/// The shipped price file is the defaults, so a copy starts from them.
#[test]
fn the_shipped_price_file_is_the_defaults() {
    let text = include_str!("../../../../deploy/prices-us-east-1.toml");
    let file: Prices = toml::from_str(text).unwrap();
    assert_eq!(file, Prices::default());
}
