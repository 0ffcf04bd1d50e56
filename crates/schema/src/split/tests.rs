use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::period::{Period, TableNaming};
use crate::query::{self, TimeRange};
use crate::strategy::Bucket;

const BASE_MS: i64 = 1_795_305_600_000; // 2026-11-22T00:00:00Z
const ENTITIES: [&str; 3] = ["sensor-alpha-001", "capteur-é", "d"];
const LEARN: Duration = Duration::from_secs(20);

fn split(entity: &str, made_at_ms: i64, extra_ms: i64, fan_out: u32) -> Split {
    Split {
        entity: entity.to_owned(),
        from_ms: made_at_ms + LEARN.as_millis() as i64 + extra_ms,
        fan_out,
        made_at_ms,
        worker: "w".into(),
        evidence: "held back".into(),
    }
}

#[test]
fn records_round_trip_through_dynamodb_items() {
    let attrs = KeyAttributes::default();
    let s = split("a#b", BASE_MS, 5, 4);
    let item = s.to_item(&attrs);
    assert_eq!(item.get("pk"), Some(&AttributeValue::S(SPLITS_PK.into())));
    assert_eq!(item.get("sk"), Some(&AttributeValue::S("a#b#4".into())));
    assert_eq!(Split::from_item(&item, &attrs), Ok(s));
    let mut bad = item.clone();
    bad.insert(FAN_OUT.into(), AttributeValue::N("1".into()));
    assert!(Split::from_item(&bad, &attrs).is_err());
    bad.remove(FAN_OUT);
    assert!(Split::from_item(&bad, &attrs).is_err());
}

#[test]
fn fan_out_grows_in_powers_of_two_up_to_the_maximum() {
    let a = AdaptiveSharding {
        max_fan_out: 8,
        ..AdaptiveSharding::default()
    };
    assert_eq!(a.next_fan_out(1), Some(2));
    assert_eq!(a.next_fan_out(4), Some(8));
    assert_eq!(a.next_fan_out(8), None);
    assert!(a.problems().is_empty());
    let bad = AdaptiveSharding {
        max_fan_out: 6,
        learn_delay: Duration::from_secs(9),
        ..AdaptiveSharding::default()
    };
    let keys: Vec<_> = bad.problems().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "adaptive_sharding.max_fan_out",
            "adaptive_sharding.learn_delay"
        ]
    );
}

#[test]
fn the_split_that_applies_is_the_latest_started_one() {
    let t = TableSplits::from_splits([
        split("e", BASE_MS + 60_000, 0, 4),
        split("e", BASE_MS, 0, 2),
    ]);
    let from2 = BASE_MS + 20_000;
    let from4 = BASE_MS + 80_000;
    assert_eq!(t.fan_out_at("e", from2 - 1), 1);
    assert_eq!(t.fan_out_at("e", from2), 2);
    assert_eq!(t.fan_out_at("e", from4 - 1), 2);
    assert_eq!(t.fan_out_at("e", from4), 4);
    assert_eq!(t.fan_out_at("other", from4), 1);
    assert_eq!(t.sub_key_from("e", 0), Some(i64::MIN));
    assert_eq!(t.sub_key_from("e", 1), Some(from2));
    assert_eq!(t.sub_key_from("e", 3), Some(from4));
    assert_eq!(t.sub_key_from("e", 4), None);
    assert_eq!(t.max_fan_out("e"), 4);
}

/// Sub-keys spread one entity's events evenly; sub-key 0 is the base key.
#[test]
fn sub_keys_spread_events_evenly() {
    let base = ItemKey::new("3#2026-11-22T00", "e#2026-11-22T00:00:00.000Z#x");
    let mut counts = [0u32; 4];
    for i in 0..4000 {
        let k = split_key(base.clone(), &format!("ev-{i}"), 4);
        assert_eq!(k.sk(), base.sk());
        let sub = match k.pk().rsplit_once("#x") {
            Some((b, n)) if b == base.pk() => n.parse::<usize>().unwrap(),
            _ => {
                assert_eq!(k.pk(), base.pk());
                0
            }
        };
        counts[sub] += 1;
    }
    for c in counts {
        assert!((850..=1150).contains(&c), "{counts:?}");
    }
    assert_eq!(split_key(base.clone(), "any", 1), base);
}

#[test]
fn ids_that_look_like_sub_keys_are_ambiguous() {
    assert!(entity_id_is_ambiguous(SPLITS_PK));
    assert!(entity_id_is_ambiguous("pump#x3"));
    assert!(!entity_id_is_ambiguous("pump#x"));
    assert!(!entity_id_is_ambiguous("pump#xy"));
    assert!(!entity_id_is_ambiguous("pump-7"));
}

fn any_strategy() -> impl Strategy<Value = KeyStrategy> {
    prop_oneof![
        Just(KeyStrategy::Entity),
        (
            1u32..4,
            prop::sample::select(vec![Bucket::Minute, Bucket::Hour])
        )
            .prop_map(|(shards, bucket)| KeyStrategy::TimeBucket { shards, bucket }),
    ]
}

/// (entity, made at offset, extra delay, fan-out): a sequence of splits
/// as workers would make them within one hour.
fn any_splits() -> impl Strategy<Value = Vec<Split>> {
    prop::collection::vec(
        (
            0usize..ENTITIES.len(),
            0i64..3_000_000,
            0i64..60_000,
            prop::sample::select(vec![2u32, 4, 8]),
        ),
        0..6,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(e, made, extra, f)| split(ENTITIES[e], BASE_MS + made, extra, f))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Any worker that knows the same splits (in any order) keys an event
    /// alike; a worker that refreshed at `refreshed` and keys only what it
    /// `knows` gives the same key as one that knows every split; and the
    /// read plan of a range holding the event covers its key, as well as
    /// the base key an unaware worker would have written.
    #[test]
    fn keys_agree_across_workers_and_reads_cover_them(
        strategy in any_strategy(),
        splits in any_splits(),
        entity in 0usize..ENTITIES.len(),
        ts_off in 0i64..3_599_999,
        event in "[a-z0-9]{1,8}",
        refreshed_off in 0i64..3_600_000,
        before in 0i64..4_000_000,
        after in 0i64..4_000_000,
        rotate in 0usize..6,
    ) {
        let entity = ENTITIES[entity];
        let ts = BASE_MS + ts_off;
        let all = TableSplits::from_splits(splits.clone());
        let mut shuffled = splits.clone();
        let n = shuffled.len();
        shuffled.rotate_left(rotate.min(n));
        shuffled.reverse();
        let other = TableSplits::from_splits(shuffled);
        let key = key_with_splits(&strategy, &all, entity, ts, &event);
        prop_assert_eq!(&key, &key_with_splits(&strategy, &other, entity, ts, &event));

        // A worker that read the splits at `refreshed` knows those made by then.
        let refreshed = BASE_MS + refreshed_off;
        let learned = TableSplits::from_splits(
            splits.iter().filter(|s| s.made_at_ms <= refreshed).cloned(),
        );
        if TableSplits::knows(refreshed, LEARN, ts) {
            prop_assert_eq!(&key, &key_with_splits(&strategy, &learned, entity, ts, &event));
        }

        let naming = TableNaming { prefix: "tm".into(), period: Period::Day };
        let table = naming.name_of(&naming.period.containing(ts));
        let range = TimeRange { start_ms: ts - before, end_ms: ts + after };
        let lookup = |t: &str| (t == table).then_some(&all);
        let plan = query::plan_range_split(&strategy, &naming, entity, range, &lookup).unwrap();
        let base = strategy.key(entity, ts, &event);
        for k in [&key, &base] {
            let hits = plan.queries.iter().filter(|q| q.matches(&table, k.pk(), k.sk())).count();
            prop_assert_eq!(hits, 1, "{} in {:?}", k, plan.queries);
        }
        let latest = query::plan_latest_split(&strategy, &naming, entity, range, &lookup).unwrap();
        let hits = latest.steps.iter().flatten().filter(|q| q.matches(&table, key.pk(), key.sk())).count();
        prop_assert_eq!(hits, 1);

        // An entity that is not split reads as before; a split one adds
        // only queries of its own sub-keys, and only from its first split.
        for e in ENTITIES {
            let p = query::plan_range_split(&strategy, &naming, e, range, &lookup).unwrap();
            let plain = query::plan_range(&strategy, &naming, e, range).unwrap();
            let extra: Vec<_> = p.queries.iter().filter(|q| !plain.queries.contains(q)).collect();
            let first = all.of(e).iter().map(|s| s.from_ms).min();
            let reaches = first.is_some_and(|f| f <= range.end_ms);
            prop_assert_eq!(!extra.is_empty(), reaches, "{}: {:?}", e, extra);
            prop_assert!(extra.iter().all(|q| q.pk.contains("#x")));
        }
    }
}

/// The decision law: wait for the threshold, split from the base in steps
/// of two up to the maximum, and never on the evidence of items keyed
/// before the latest split (a backlog draining onto the old keys).
#[test]
fn splits_double_only_when_the_latest_split_is_not_enough() {
    let a = AdaptiveSharding {
        enabled: true,
        max_fan_out: 4,
        ..AdaptiveSharding::default()
    };
    let long = a.hold_threshold;
    let none = TableSplits::default();
    assert_eq!(
        decide(&a, &none, "e", BASE_MS, long - Duration::from_millis(1)),
        None
    );
    assert_eq!(decide(&a, &none, "e", BASE_MS, long), Some(2));
    let two = TableSplits::from_splits([split("e", BASE_MS, 0, 2)]);
    let from = BASE_MS + LEARN.as_millis() as i64;
    assert_eq!(decide(&a, &two, "e", from - 1, long), None, "backlog");
    assert_eq!(decide(&a, &two, "e", from, long), Some(4));
    assert_eq!(decide(&a, &two, "other", from, long), Some(2));
    let four = TableSplits::from_splits([split("e", BASE_MS, 0, 2), split("e", BASE_MS + 1, 0, 4)]);
    assert_eq!(
        decide(&a, &four, "e", from + 10, long),
        None,
        "at the maximum"
    );
    let off = AdaptiveSharding::default();
    assert_eq!(decide(&off, &none, "e", BASE_MS, long), None);
}

/// A held key traces back to its entity and event time, sub-keys included.
#[test]
fn keys_trace_back_to_their_entity_and_time() {
    let ts = BASE_MS + 1234;
    let tb = KeyStrategy::TimeBucket {
        shards: 4,
        bucket: Bucket::Hour,
    };
    for strategy in [KeyStrategy::Entity, tb] {
        for fan_out in [1, 8] {
            let k = split_key(strategy.key("sensor-1", ts, "ev-9"), "ev-9", fan_out);
            assert_eq!(
                entity_and_time_of(&strategy, &k),
                Some(("sensor-1".into(), ts)),
                "{k}"
            );
        }
    }
    let cs = KeyStrategy::CalculatedSuffix { shards: 2 };
    assert_eq!(entity_and_time_of(&cs, &cs.key("e", ts, "x")), None);
}
