//! Property: for random events routed by each strategy, a range plan's
//! queries, run against a simulated DynamoDB (exact key-condition semantics,
//! results in sort-key byte order) and merged, return exactly the entity's
//! events in the range, once each, in time order; and the plan has no query
//! that could not hold such an event.

// Helpers here are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use proptest::prelude::*;
use tidemark_schema::period::{Period, TableNaming};
use tidemark_schema::query::{self, QueryPlan, TimeRange};
use tidemark_schema::route::{ItemAttributes, RouteCache, Router, RouterConfig};
use tidemark_schema::strategy::{Bucket, KeyStrategy, ShardMigration};
use tidemark_schema::{Item, Origin};

const BASE_MS: i64 = 1_795_305_600_000; // 2026-11-22T00:00:00Z: grid points hit boundaries
/// Points on the time grid across the window.
const GRID: i64 = 120;
const ENTITIES: [&str; 3] = ["sensor-a", "capteur-é", "d"];

/// Table -> (pk, sk) -> item: a key-ordered store like DynamoDB's.
type Store = BTreeMap<String, BTreeMap<(String, String), Item>>;

fn s(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(v)) => v.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

fn run(plan: &QueryPlan, store: &Store) -> Vec<Vec<Item>> {
    plan.queries
        .iter()
        .map(|q| {
            store
                .get(&q.table)
                .map(|t| {
                    // BTreeMap order on (pk, sk) is byte order, as DynamoDB sorts.
                    t.iter()
                        .filter(|((pk, sk), _)| q.matches(&q.table, pk, sk))
                        .map(|(_, i)| i.clone())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

fn any_strategy() -> impl Strategy<Value = KeyStrategy> {
    prop_oneof![
        Just(KeyStrategy::Entity),
        (1u32..6).prop_map(|shards| KeyStrategy::RandomSuffix { shards }),
        (1u32..6).prop_map(|shards| KeyStrategy::CalculatedSuffix { shards }),
        (
            1u32..6,
            prop::sample::select(vec![Bucket::Minute, Bucket::Hour, Bucket::Day])
        )
            .prop_map(|(shards, bucket)| KeyStrategy::TimeBucket { shards, bucket }),
    ]
}

/// Window of event times: wide enough to cross several tables and buckets,
/// narrow enough that minute buckets stay a few hundred queries.
fn window_ms(strategy: &KeyStrategy, period: Period) -> i64 {
    let by_bucket = match strategy {
        KeyStrategy::TimeBucket {
            bucket: Bucket::Minute,
            ..
        } => 3 * 3_600_000,
        KeyStrategy::TimeBucket {
            bucket: Bucket::Hour,
            ..
        } => 5 * 86_400_000,
        _ => 120 * 86_400_000,
    };
    let by_period = match period {
        Period::Hour => 2 * 86_400_000,
        _ => 120 * 86_400_000,
    };
    by_bucket.min(by_period)
}

#[derive(Debug, Clone)]
struct Ev {
    entity: usize,
    /// Grid step: events and range ends share a grid of GRID points, so
    /// events often sit exactly on a range boundary or share a timestamp.
    offset: i64,
    event_id: Option<u16>,
}

fn any_events() -> impl Strategy<Value = Vec<Ev>> {
    prop::collection::vec(
        (
            0usize..ENTITIES.len(),
            0i64..=GRID,
            prop::option::of(0u16..50),
        )
            .prop_map(|(entity, offset, event_id)| Ev {
                entity,
                offset,
                event_id,
            }),
        0..60,
    )
}

/// The instant of grid point `g`; odd points get a millisecond less, so
/// ends of buckets and tables (xx:59:59.999) are hit too.
fn at(window: i64, g: i64) -> i64 {
    BASE_MS + window / GRID * g - (g % 2)
}

fn router(strategy: KeyStrategy, period: Period) -> Router {
    let mut c = RouterConfig::with_prefix("tm");
    c.key = strategy;
    c.period = period;
    c.retention = Duration::from_secs(3650 * 86_400);
    Router::new(c).unwrap()
}

/// Routes the events, storing each under `keys_for` (one key, or two during
/// a migration). Returns the store and, per entity, the (ts, event id) set.
fn write(
    events: &[Ev],
    window: i64,
    router: &Router,
    extra_key: Option<&KeyStrategy>,
) -> (Store, BTreeMap<String, BTreeSet<(i64, String)>>) {
    let now: DateTime<Utc> = DateTime::from_timestamp_millis(BASE_MS + window + 1).unwrap();
    let mut store = Store::new();
    let mut truth: BTreeMap<String, BTreeSet<(i64, String)>> = BTreeMap::new();
    for (n, ev) in events.iter().enumerate() {
        let ts = at(window, ev.offset);
        let entity = ENTITIES[ev.entity];
        let id = ev
            .event_id
            .map(|i| format!(",\"eventId\":\"e{i}\""))
            .unwrap_or_default();
        let rec = format!("{{\"deviceId\":\"{entity}\",\"timestamp\":{ts}{id},\"v\":{n}}}");
        let origin = Origin::Sqs {
            queue: "q".into(),
            message_id: format!("m{n}"),
            index: 0,
        };
        let routed = router
            .route(rec.as_bytes(), &origin, 0, now, &mut RouteCache::default())
            .unwrap()
            .new;
        let item = routed.item.to_item().unwrap();
        let attrs = ItemAttributes::default();
        truth
            .entry(entity.to_owned())
            .or_default()
            .insert((ts, s(&item, &attrs.event_id)));
        let table = store.entry(routed.table.to_string()).or_default();
        if let Some(old) = extra_key {
            let k = old.key(entity, ts, &s(&item, &attrs.event_id));
            let mut copy = item.clone();
            copy.insert("pk".into(), AttributeValue::S(k.pk().to_owned()));
            copy.insert("sk".into(), AttributeValue::S(k.sk().to_owned()));
            table.insert((k.pk().to_owned(), k.sk().to_owned()), copy);
        }
        table.insert(
            (routed.key.pk().to_owned(), routed.key.sk().to_owned()),
            item,
        );
    }
    (store, truth)
}

fn read(plan: &QueryPlan, store: &Store) -> Vec<(i64, String)> {
    let attrs = ItemAttributes::default();
    query::merge_items(run(plan, store), &attrs)
        .map(|i| {
            let (ts, _, id) = query::item_order_key(&i, &attrs);
            (ts, id)
        })
        .collect()
}

fn expected(
    truth: &BTreeMap<String, BTreeSet<(i64, String)>>,
    entity: &str,
    r: TimeRange,
) -> Vec<(i64, String)> {
    truth
        .get(entity)
        .map(|set| {
            set.iter()
                .filter(|(ts, _)| (r.start_ms..=r.end_ms).contains(ts))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Distinct (table, bucket) pairs any instant of the range falls in.
fn partitions_needed(strategy: &KeyStrategy, naming: &TableNaming, r: TimeRange) -> usize {
    let step = match strategy {
        KeyStrategy::TimeBucket {
            bucket: Bucket::Minute,
            ..
        } => 60_000,
        _ => 3_600_000, // every period and hour/day bucket boundary is on the hour
    };
    let mut set = BTreeSet::new();
    let mut t = r.start_ms;
    let mut add = |t: i64| {
        let bucket = match strategy {
            KeyStrategy::TimeBucket { bucket, .. } => bucket.label(t),
            _ => String::new(),
        };
        set.insert((naming.table_for(t), bucket));
    };
    while t <= r.end_ms {
        add(t);
        t += step;
    }
    add(r.end_ms);
    match strategy {
        // The entity's shard is fixed: one partition per (table, bucket).
        KeyStrategy::TimeBucket { .. } => set.len(),
        // Suffixes are unknown to a reader: every one, in every table.
        _ => set.len() * strategy.shards() as usize,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn range_plans_find_exactly_the_events_in_range(
        strategy in any_strategy(),
        period in prop::sample::select(Period::ALL.to_vec()),
        events in any_events(),
        entity in 0usize..ENTITIES.len(),
        a in 0i64..=GRID,
        b in 0i64..=GRID,
    ) {
        let window = window_ms(&strategy, period);
        let r = router(strategy.clone(), period);
        let (store, truth) = write(&events, window, &r, None);
        let range = TimeRange { start_ms: at(window, a.min(b)), end_ms: at(window, a.max(b)) };
        let entity = ENTITIES[entity];
        let plan = query::plan_range(&strategy, r.naming(), entity, range).unwrap();

        prop_assert_eq!(read(&plan, &store), expected(&truth, entity, range));

        // Nothing more than needed: one query per partition that can hold a
        // matching event, no duplicates.
        let distinct: BTreeSet<_> = plan.queries.iter().map(|q| (q.table.clone(), q.pk.clone())).collect();
        prop_assert_eq!(distinct.len(), plan.queries.len());
        prop_assert_eq!(plan.queries.len(), partitions_needed(&strategy, r.naming(), range));
    }

    #[test]
    fn latest_plan_finds_the_newest_event(
        strategy in any_strategy(),
        period in prop::sample::select(Period::ALL.to_vec()),
        events in any_events(),
        entity in 0usize..ENTITIES.len(),
        a in 0i64..=GRID,
        b in 0i64..=GRID,
    ) {
        let window = window_ms(&strategy, period);
        let r = router(strategy.clone(), period);
        let (store, truth) = write(&events, window, &r, None);
        let range = TimeRange { start_ms: at(window, a.min(b)), end_ms: at(window, a.max(b)) };
        let entity = ENTITIES[entity];
        let plan = query::plan_latest(&strategy, r.naming(), entity, range).unwrap();
        let attrs = ItemAttributes::default();
        let mut found = None;
        let mut steps_run = 0;
        for step in &plan.steps {
            steps_run += 1;
            // Each query descending, limit 1: its newest item.
            let heads: Vec<Item> = step
                .iter()
                .filter_map(|q| {
                    let t = store.get(&q.table)?;
                    t.iter().rev().find(|((pk, sk), _)| q.matches(&q.table, pk, sk)).map(|(_, i)| i.clone())
                })
                .collect();
            if let Some(best) = heads.iter().map(|i| query::item_order_key(i, &attrs)).max() {
                found = Some((best.0, best.2));
                break;
            }
        }
        prop_assert_eq!(found, expected(&truth, entity, range).last().cloned());
        prop_assert!(steps_run <= plan.steps.len());
    }

    #[test]
    fn migration_reads_see_each_event_once(
        old_shards in 1u32..6,
        new_shards in 1u32..12,
        bucket in prop::sample::select(vec![Bucket::Hour, Bucket::Day]),
        events in any_events(),
        entity in 0usize..ENTITIES.len(),
    ) {
        let m = ShardMigration {
            from: KeyStrategy::TimeBucket { shards: old_shards, bucket },
            to: KeyStrategy::TimeBucket { shards: new_shards, bucket },
        };
        let window = 3 * 86_400_000;
        let r = router(m.to.clone(), Period::Day);
        let (store, truth) = write(&events, window, &r, Some(&m.from));
        let range = TimeRange { start_ms: BASE_MS, end_ms: BASE_MS + window };
        let entity = ENTITIES[entity];
        let plan = query::plan_range_migration(&m, r.naming(), entity, range).unwrap();
        prop_assert_eq!(read(&plan, &store), expected(&truth, entity, range));
    }
}
