use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use super::*;
use crate::event::{ClashPolicy, FieldType, TimestampFormat};
use crate::period::Period;
use crate::raw::{self, Node};
use crate::reason::Reason;
use crate::size;
use crate::strategy::KeyStrategy;
use crate::wire::payload::{DUPS_SCAN_MAX, check_number};

mod encoding;
mod mapping;
mod oversize;
mod reference;

/// The item of a record of one event under the layout in force, routed with
/// a fresh cache: what most tests look at.
trait RouteAlone {
    fn route_alone(
        &self,
        data: &[u8],
        origin: &Origin,
        now: DateTime<Utc>,
    ) -> Result<Routed, RouteError>;
}

impl RouteAlone for Router {
    fn route_alone(
        &self,
        data: &[u8],
        origin: &Origin,
        now: DateTime<Utc>,
    ) -> Result<Routed, RouteError> {
        self.route(data, origin, 0, now, &mut RouteCache::default())
            .map(|routes| routes.new)
    }
}

fn origin() -> Origin {
    Origin::Sqs {
        queue: "q".into(),
        message_id: "m-1".into(),
        index: 0,
    }
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn router(f: impl FnOnce(&mut RouterConfig)) -> Router {
    let mut c = RouterConfig::with_prefix("tm");
    f(&mut c);
    Router::new(c).unwrap()
}

/// During a migration 4 -> 8 (time_bucket), each event gets its new
/// key and, only where the shard differs, its old one: same table, same
/// attributes but the key, and the old key is the one the 4-shard
/// layout alone gives. Without `migrate_from` there is no second item.
#[test]
fn dual_routes_write_the_old_layout_only_where_it_differs() {
    let tb = |shards| KeyStrategy::TimeBucket {
        shards,
        bucket: crate::strategy::Bucket::Hour,
    };
    let dual = router(|c| {
        c.key = tb(8);
        c.migrate_from = Some(tb(4));
    });
    let plain = router(|c| c.key = tb(8));
    let now = at("2026-11-22T06:00:00Z");
    let mut cache = RouteCache::default();
    let (mut same, mut differ) = (0, 0);
    for i in 0..64 {
        let event =
            format!(r#"{{"deviceId":"d{i}","timestamp":"2026-11-22T05:00:00Z","eventId":"e{i}"}}"#);
        let Routes { new, old } = dual
            .route(event.as_bytes(), &origin(), 0, now, &mut cache)
            .unwrap();
        let alone = plain.route_alone(event.as_bytes(), &origin(), now).unwrap();
        assert_eq!(new, alone);
        let want_old = tb(4).key(&format!("d{i}"), 1_795_323_600_000, &format!("e{i}"));
        match old {
            None => {
                assert_eq!(new.key, want_old);
                same += 1;
            }
            Some(old) => {
                assert_eq!(old.key, want_old);
                assert_ne!(old.key, new.key);
                assert_eq!(old.table, new.table);
                let text = String::from_utf8(old.item.json().to_vec()).unwrap();
                assert!(text.contains(want_old.pk()), "{text}");
                differ += 1;
            }
        }
        let Routes { old: none, .. } = plain
            .route(
                event.as_bytes(),
                &origin(),
                0,
                now,
                &mut RouteCache::default(),
            )
            .unwrap();
        assert!(none.is_none());
    }
    assert!(same > 0 && differ > 0, "{same} same, {differ} differ");
    let same_layout = RouterConfig {
        migrate_from: Some(tb(8)),
        key: tb(8),
        ..RouterConfig::with_prefix("tm")
    };
    assert!(matches!(
        Router::new(same_layout),
        Err(RouterConfigError::Invalid {
            key: "migrate_from",
            ..
        })
    ));
}

/// One `RouteCache` over events of several periods (crossing midnight
/// and back, and an expired one between) names every table as a fresh
/// route does: the cached name follows the period.
#[test]
fn table_names_follow_the_period() {
    let r = router(|_| {});
    let now = at("2026-11-23T00:30:00Z");
    let mut names = RouteCache::default();
    let mut tables = Vec::new();
    for ts in [
        "2026-11-22T23:59:59.999Z",
        "2026-11-22T12:00:00.000Z",
        "2026-11-23T00:00:00.000Z",
        "2020-01-01T00:00:00.000Z",
        "2026-11-22T23:00:00.000Z",
        "2026-11-23T00:10:00.000Z",
    ] {
        let event = format!(r#"{{"deviceId":"d","timestamp":"{ts}","eventId":"e"}}"#);
        let cached = r
            .route(event.as_bytes(), &origin(), 0, now, &mut names)
            .map(|routes| routes.new);
        let fresh = r.route_alone(event.as_bytes(), &origin(), now);
        match (cached, fresh) {
            (Ok(c), Ok(f)) => {
                assert_eq!(c.table, f.table, "{ts}");
                tables.push(c.table.to_string());
            }
            (Err(c), Err(f)) => assert_eq!(c, f, "{ts}"),
            (c, f) => panic!("{ts}: {c:?} against {f:?}"),
        }
    }
    assert_eq!(
        tables,
        [
            "tm_2026-11-22",
            "tm_2026-11-22",
            "tm_2026-11-23",
            "tm_2026-11-22",
            "tm_2026-11-23"
        ]
    );
}

#[test]
fn builds_the_documented_item() {
    let r = router(|c| c.ttl_attribute = Some("ttl".into()));
    let out = r
        .route_alone(
            br#"{"deviceId":"d-1","timestamp":"2026-11-22T05:00:00.250Z","eventId":"e-1","temp":21.50,"big":123456789012345678901234567890,"tags":["a",1,false,null],"m":{"x":{"y":1e2}}}"#,
            &origin(),
            at("2026-11-22T05:01:00Z"),
        )
        .unwrap();
    assert_eq!(out.table, "tm_2026-11-22");
    assert_eq!(out.key.pk(), "d-1");
    assert_eq!(out.key.sk(), "2026-11-22T05:00:00.250Z#e-1");
    let i = &out.item.to_item().unwrap();
    assert_eq!(i["pk"], AttributeValue::S("d-1".into()));
    assert_eq!(i["entity_id"], AttributeValue::S("d-1".into()));
    assert_eq!(i["event_id"], AttributeValue::S("e-1".into()));
    assert_eq!(
        i["ts"],
        AttributeValue::S("2026-11-22T05:00:00.250Z".into())
    );
    assert_eq!(i["ts_ms"], AttributeValue::N(out.timestamp_ms.to_string()));
    assert_eq!(
        i["ttl"],
        AttributeValue::N((out.timestamp_ms / 1000 + 30 * 86_400).to_string())
    );
    // Exact digits, including past f64 precision and the trailing zero.
    assert_eq!(i["temp"], AttributeValue::N("21.50".into()));
    assert_eq!(
        i["big"],
        AttributeValue::N("123456789012345678901234567890".into())
    );
    let AttributeValue::L(tags) = &i["tags"] else {
        panic!("{:?}", i["tags"])
    };
    assert_eq!(
        tags,
        &vec![
            AttributeValue::S("a".into()),
            AttributeValue::N("1".into()),
            AttributeValue::Bool(false),
            AttributeValue::Null(true)
        ]
    );
    let AttributeValue::M(m) = &i["m"] else {
        panic!()
    };
    let AttributeValue::M(x) = &m["x"] else {
        panic!()
    };
    assert_eq!(x["y"], AttributeValue::N("1e2".into()));
    assert!(
        !i.contains_key("deviceId") && !i.contains_key("timestamp") && !i.contains_key("eventId")
    );
    assert_eq!(out.wcu, size::item_wcu(i));
}

#[test]
fn every_spelling_of_an_instant_routes_alike() {
    // The canonical spelling is read by the fast path and its text reused;
    // the others go through chrono and are rendered.
    let r = router(|c| {
        c.key = KeyStrategy::TimeBucket {
            shards: 7,
            bucket: crate::strategy::Bucket::Minute,
        }
    });
    let now = at("2026-11-22T06:00:00Z");
    for (canonical, ms) in [
        ("2026-11-22T05:59:59.999Z", 1_795_327_199_999_i64),
        ("2026-11-22T05:00:00.000Z", 1_795_323_600_000),
        ("2026-11-01T00:00:00.001Z", 1_793_491_200_001),
    ] {
        let spellings = [
            format!("\"{canonical}\""),
            format!("\"{}+00:00\"", canonical.trim_end_matches('Z')),
            format!("\"{}\"", canonical.replace('T', "t")),
            ms.to_string(),
        ];
        let routes: Vec<Routed> = spellings
            .iter()
            .map(|ts| {
                let rec = format!(r#"{{"deviceId":"d","eventId":"e","timestamp":{ts}}}"#);
                r.route_alone(rec.as_bytes(), &origin(), now).unwrap()
            })
            .collect();
        for (spelling, routed) in spellings.iter().zip(&routes) {
            assert_eq!(routed, &routes[0], "{spelling}");
        }
        assert!(
            routes[0].key.sk().contains(canonical),
            "{:?}",
            routes[0].key
        );
        assert_eq!(routes[0].timestamp_ms, ms);
    }
}

#[test]
fn replays_give_identical_routes() {
    for key in [
        KeyStrategy::Entity,
        KeyStrategy::RandomSuffix { shards: 7 },
        KeyStrategy::CalculatedSuffix { shards: 7 },
        KeyStrategy::TimeBucket {
            shards: 7,
            bucket: crate::strategy::Bucket::Hour,
        },
    ] {
        let r = router(|c| c.key = key.clone());
        let rec = br#"{"deviceId":"d","timestamp":1795323600000,"v":1}"#;
        let now = at("2026-11-22T05:00:00Z");
        let a = r.route_alone(rec, &origin(), now).unwrap();
        let b = r.route_alone(rec, &origin(), now).unwrap();
        assert_eq!(a, b);
        // A different source position without an event id is a different event.
        let other = Origin::Sqs {
            queue: "q".into(),
            message_id: "m-2".into(),
            index: 0,
        };
        assert_ne!(r.route_alone(rec, &other, now).unwrap().key, a.key);
    }
}

#[test]
fn expired_and_future_events_get_their_reasons() {
    let r = router(|_| {});
    let now = at("2026-11-22T05:00:00Z");
    let rec = |ts: &str| format!(r#"{{"deviceId":"d","timestamp":"{ts}"}}"#);
    // Day 2026-10-22 ended 2026-10-23T00:00Z; +30 d = 2026-11-22T00:00Z <= now.
    let e = r
        .route_alone(rec("2026-10-22T23:59:59Z").as_bytes(), &origin(), now)
        .unwrap_err();
    assert_eq!(e.reason(), Reason::ExpiredPeriod);
    assert!(e.to_string().contains("tm_2026-10-22"), "{e}");
    assert!(
        r.route_alone(rec("2026-10-23T00:00:00Z").as_bytes(), &origin(), now)
            .is_ok()
    );
    assert!(
        r.route_alone(rec("2026-11-22T05:05:00Z").as_bytes(), &origin(), now)
            .is_ok()
    );
    let e = r
        .route_alone(rec("2026-11-22T05:05:00.001Z").as_bytes(), &origin(), now)
        .unwrap_err();
    assert_eq!(e.reason(), Reason::FutureEvent);
    assert!(e.to_string().contains("max_future_skew"), "{e}");
}

/// An event whose table expires within the expiry guard is refused: a
/// write accepted a second before expiry, throttled at the frozen tier,
/// could land after the table's export (or deletion).
#[test]
fn an_event_whose_table_expires_within_the_guard_is_refused() {
    let r = router(|_| {});
    let rec = r#"{"deviceId":"d","timestamp":"2026-10-23T12:00:00Z"}"#.as_bytes();
    // tm_2026-10-23 expires at 2026-11-23T00:00Z (30 days after its end).
    let e = r
        .route_alone(rec, &origin(), at("2026-11-22T23:59:59Z"))
        .unwrap_err();
    assert_eq!(e.reason(), Reason::ExpiredPeriod);
    assert!(
        r.route_alone(rec, &origin(), at("2026-11-22T23:49:59Z"))
            .is_ok(),
        "ten minutes and a second before expiry: outside the default guard"
    );
}

/// A table recorded in another layout than the config's (its period ended
/// before a shard-count migration) gets its events keyed in that layout; a
/// dual table in both; other tables as the config says. A change of the
/// recorded layouts takes effect with the same cache.
#[test]
fn events_are_keyed_with_the_layouts_their_table_records() {
    use crate::strategy::Bucket;
    let four = KeyStrategy::TimeBucket {
        shards: 4,
        bucket: Bucket::Hour,
    };
    let eight = KeyStrategy::TimeBucket {
        shards: 8,
        bucket: Bucket::Hour,
    };
    let r = router(|c| c.key = eight.clone());
    let layouts = Arc::new(TableLayouts::for_config(r.config()));
    let r = r.with_table_layouts(layouts.clone());
    let now = at("2026-11-22T05:00:00Z");
    let key = |k: &KeyStrategy, dev: &str, ts: &str| {
        let iso = format!("{}.000Z", &ts[..19]);
        let ms = at(ts).timestamp_millis();
        k.key_with_iso(dev, ms, &iso, "e", &mut ShardCache::default())
    };
    // A device whose key moves from four shards to eight.
    let dev = (0..100)
        .map(|i| format!("dev-{i}"))
        .find(|d| key(&four, d, "2026-11-19T03:00:00Z") != key(&eight, d, "2026-11-19T03:00:00Z"))
        .unwrap();
    let rec = |ts: &str| format!(r#"{{"deviceId":"{dev}","timestamp":"{ts}","eventId":"e"}}"#);
    let old_day = rec("2026-11-19T03:00:00Z");
    let with = |k: &KeyStrategy, ts: &str| key(k, &dev, ts);
    let mut cache = RouteCache::default();
    let routes = r
        .route(old_day.as_bytes(), &origin(), 0, now, &mut cache)
        .unwrap();
    assert_eq!(routes.new.key, with(&eight, "2026-11-19T03:00:00Z"));
    layouts.set("tm_2026-11-19", vec![four.clone()]);
    assert_eq!(layouts.len(), 1);
    let routes = r
        .route(old_day.as_bytes(), &origin(), 0, now, &mut cache)
        .unwrap();
    assert_eq!(routes.new.key, with(&four, "2026-11-19T03:00:00Z"));
    assert_eq!(routes.old, None);
    layouts.set("tm_2026-11-19", vec![eight.clone(), four.clone()]);
    let routes = r
        .route(old_day.as_bytes(), &origin(), 0, now, &mut cache)
        .unwrap();
    assert_eq!(routes.new.key, with(&eight, "2026-11-19T03:00:00Z"));
    assert_eq!(
        routes.old.map(|o| o.key),
        Some(with(&four, "2026-11-19T03:00:00Z"))
    );
    // Other tables: the config's layout.
    let today = rec("2026-11-22T04:00:00Z");
    let routes = r
        .route(today.as_bytes(), &origin(), 0, now, &mut cache)
        .unwrap();
    assert_eq!(routes.new.key, with(&eight, "2026-11-22T04:00:00Z"));
    // Recorded as the config says: forgotten.
    layouts.set("tm_2026-11-19", vec![eight.clone()]);
    assert!(layouts.is_empty());
}

#[test]
fn field_errors_are_invalid_field() {
    let now = at("2026-11-22T05:00:00Z");
    let tb = router(|c| {
        c.key = KeyStrategy::TimeBucket {
            shards: 2,
            bucket: crate::strategy::Bucket::Day,
        };
    });
    let e = tb
        .route_alone(
            br#"{"deviceId":"a#b","timestamp":1795323600}"#,
            &origin(),
            now,
        )
        .unwrap_err();
    assert_eq!(e.reason(), Reason::InvalidField);
    assert!(e.to_string().contains("deviceId"), "{e}");
    let r = router(|_| {});
    assert!(
        r.route_alone(
            br#"{"deviceId":"a#b","timestamp":1795323600}"#,
            &origin(),
            now
        )
        .is_ok()
    );
    // Clashing names are prefixed by default (see
    // `clashing_fields_are_prefixed_or_refused`); refused here.
    let r = router(|c| c.event.on_clash = ClashPolicy::Refuse);
    for (rec, needle) in [
        (
            r#"{"deviceId":"d","timestamp":1795323600,"pk":"x"}"#,
            "`pk`",
        ),
        (
            r#"{"deviceId":"d","timestamp":1795323600,"ts":"x"}"#,
            "`ts`",
        ),
        (r#"{"deviceId":"d","timestamp":1795323600,"":"x"}"#, "empty"),
        (
            r#"{"deviceId":"d","timestamp":1795323600,"n":1e200}"#,
            "`n`",
        ),
        (
            r#"{"deviceId":"d","timestamp":1795323600,"a":[{"b":12345678901234567890123456789012345678901}]}"#,
            "`a[0].b`",
        ),
    ] {
        let e = r.route_alone(rec.as_bytes(), &origin(), now).unwrap_err();
        assert_eq!(e.reason(), Reason::InvalidField, "{e}");
        assert!(e.to_string().contains(needle), "{e} lacks {needle}");
    }
    let long = "x".repeat(2100);
    let rec = format!(r#"{{"deviceId":"{long}","timestamp":1795323600}}"#);
    assert_eq!(
        r.route_alone(rec.as_bytes(), &origin(), now)
            .unwrap_err()
            .reason(),
        Reason::InvalidField
    );
}

#[test]
fn oversized_items_are_refused_at_the_limit() {
    let r = router(|_| {});
    let now = at("2026-11-22T05:00:00Z");
    let make = |n: usize| {
        format!(
            r#"{{"deviceId":"d","timestamp":1795323600,"eventId":"e","blob":"{}"}}"#,
            "a".repeat(n)
        )
    };
    let base = r.route_alone(make(0).as_bytes(), &origin(), now).unwrap();
    let fixed = base.item.size();
    assert_eq!(fixed, size::item_size(&base.item.to_item().unwrap()));
    let fits = r
        .route_alone(
            make(size::MAX_ITEM_BYTES - fixed).as_bytes(),
            &origin(),
            now,
        )
        .unwrap();
    assert_eq!(fits.item.size(), size::MAX_ITEM_BYTES);
    assert_eq!(
        size::item_size(&fits.item.to_item().unwrap()),
        size::MAX_ITEM_BYTES
    );
    assert_eq!(fits.wcu, 400);
    let e = r
        .route_alone(
            make(size::MAX_ITEM_BYTES - fixed + 1).as_bytes(),
            &origin(),
            now,
        )
        .unwrap_err();
    assert_eq!(e.reason(), Reason::ItemTooLarge);
    assert!(e.to_string().contains("409600"), "{e}");
}

#[test]
fn config_errors_name_the_key() {
    type Edit = fn(&mut RouterConfig);
    let cases: [(Edit, &str); 6] = [
        (|c| c.table_prefix = "bad prefix".into(), "table_prefix"),
        (
            |c| c.key = KeyStrategy::RandomSuffix { shards: 0 },
            "shards",
        ),
        (|c| c.attributes.entity = "pk".into(), "attributes.entity"),
        (|c| c.ttl_attribute = Some(String::new()), "ttl_attribute"),
        (
            |c| c.max_future_skew = Duration::from_secs(3600),
            "max_future_skew",
        ),
        (
            |c| c.late_arrival_grace = Duration::from_secs(40 * 86_400),
            "late_arrival_grace",
        ),
    ];
    for (f, needle) in cases {
        let mut c = RouterConfig::with_prefix("tm");
        f(&mut c);
        let e = Router::new(c).unwrap_err();
        assert!(e.to_string().contains(needle), "{e} lacks {needle}");
    }
}

#[test]
fn toml_config() {
    let c: RouterConfig = toml::from_str(
        r#"
table_prefix = "metrics"
period = "hour"
retention = "7d"
ttl_attribute = "expires"
[event]
entity_field = "sensor"
[key]
strategy = "time_bucket"
shards = 10
bucket = "hour"
"#,
    )
    .unwrap();
    assert_eq!(c.period, Period::Hour);
    assert_eq!(c.retention, Duration::from_secs(7 * 86_400));
    assert_eq!(c.key.shards(), 10);
    assert_eq!(c.event.entity_field, "sensor");
    assert!(Router::new(c).is_ok());
    assert!(toml::from_str::<RouterConfig>("table_prefix = \"m\"\nperiodd = \"hour\"").is_err());
}

#[test]
fn nesting_is_limited_to_dynamodb_levels_without_recursing_deeper() {
    let r = router(|_| {});
    let now = at("2026-11-22T05:00:00Z");
    let rec = |open: &str, close: &str, n: usize| {
        format!(
            r#"{{"deviceId":"d","timestamp":1795323600,"a":{}1{}}}"#,
            open.repeat(n),
            close.repeat(n)
        )
    };
    // 31 containers around a scalar: the scalar is at level 32, stored.
    assert!(
        r.route_alone(rec("[", "]", 31).as_bytes(), &origin(), now)
            .is_ok()
    );
    assert!(
        r.route_alone(rec(r#"{"b":"#, "}", 31).as_bytes(), &origin(), now)
            .is_ok()
    );
    // 32: DynamoDB would reject the item, so it is dead-lettered here.
    for (open, close) in [("[", "]"), (r#"{"b":"#, "}")] {
        let e = r
            .route_alone(rec(open, close, 32).as_bytes(), &origin(), now)
            .unwrap_err();
        assert_eq!(e.reason(), Reason::InvalidField, "{e}");
        assert!(e.to_string().contains("32 levels"), "{e}");
    }
    // Found by fuzzing: 200,000 levels overflowed the stack (the raw
    // parse has no depth limit); now it is refused at level 32.
    let e = r
        .route_alone(rec("[", "]", 200_000).as_bytes(), &origin(), now)
        .unwrap_err();
    assert_eq!(e.reason(), Reason::InvalidField);
    // A dotted path opens objects on the way; the levels still count.
    let dotted = router(|c| c.event.entity_field = "m.id".into());
    let deep = format!(
        r#"{{"m":{{"id":"d","x":{}1{}}},"timestamp":1795323600}}"#,
        "[".repeat(31),
        "]".repeat(31)
    );
    let e = dotted
        .route_alone(deep.as_bytes(), &origin(), now)
        .unwrap_err();
    assert!(e.to_string().contains("`m.x"), "{e}");
}

#[test]
fn number_limits() {
    assert!(check_number("0").is_ok());
    assert!(check_number("-0.000").is_ok());
    assert!(check_number("9.99e125").is_ok());
    assert!(check_number("1e126").is_err());
    assert!(check_number("1e-130").is_ok());
    assert!(check_number("0.1e-129").is_ok());
    assert!(check_number("0.1e-130").is_err());
    assert!(check_number(&"1".repeat(38)).is_ok());
    assert!(check_number(&"1".repeat(39)).is_err());
    assert!(check_number(&format!("1{}", "0".repeat(100))).is_ok());
}

/// Adaptive sharding: a router keys a split entity's events by the splits
/// it learned (the event time decides, not arrival), holds an event its
/// table's splits are not known for (never dead-letters it), and refuses
/// entity ids that read as sub-keys under `entity`.
#[test]
fn routers_key_by_learned_splits_and_hold_what_they_do_not_know() {
    let r = router(|c| {
        c.key = KeyStrategy::TimeBucket {
            shards: 4,
            bucket: crate::strategy::Bucket::Hour,
        };
        c.adaptive_sharding.enabled = true;
    });
    let now = at("2026-11-22T10:30:00Z");
    let now_ms = now.timestamp_millis();
    let rec =
        |id: &str, ts: &str| format!(r#"{{"deviceId":"hot","timestamp":"{ts}","eventId":"{id}"}}"#);
    // Never read: held, and the table is wanted by the next refresh.
    let e = r
        .route_alone(rec("a", "2026-11-22T10:29:00Z").as_bytes(), &origin(), now)
        .unwrap_err();
    assert!(e.is_hold(), "{e}");
    assert_eq!(
        r.splits().take_wanted().into_iter().collect::<Vec<_>>(),
        ["tm_2026-11-22"]
    );
    // Learned at now - 1 s: a split x4 from 10:29:30.
    let split = crate::split::Split {
        entity: "hot".into(),
        from_ms: at("2026-11-22T10:29:30Z").timestamp_millis(),
        fan_out: 4,
        made_at_ms: at("2026-11-22T10:29:00Z").timestamp_millis(),
        worker: "w".into(),
        evidence: "test".into(),
    };
    let splits = crate::split::TableSplits::from_splits([split]);
    r.splits()
        .set("tm_2026-11-22", splits.clone(), now_ms - 1000);
    let mut cache = RouteCache::default();
    let mut subs = std::collections::BTreeSet::new();
    for i in 0..40 {
        let id = format!("e{i}");
        let before = r
            .route(
                rec(&id, "2026-11-22T10:29:29.999Z").as_bytes(),
                &origin(),
                0,
                now,
                &mut cache,
            )
            .unwrap()
            .new;
        let after = r
            .route(
                rec(&id, "2026-11-22T10:29:30Z").as_bytes(),
                &origin(),
                0,
                now,
                &mut cache,
            )
            .unwrap()
            .new;
        let ts = at("2026-11-22T10:29:30Z").timestamp_millis();
        assert_eq!(before.key.pk(), r.config().key.key("hot", ts - 1, &id).pk());
        assert_eq!(
            after.key,
            crate::split::key_with_splits(&r.config().key, &splits, "hot", ts, &id)
        );
        subs.insert(after.key.pk().to_owned());
    }
    assert_eq!(subs.len(), 4, "{subs:?}");
    // Past what that read vouches for (refreshed + learn_delay): held.
    let later = now + chrono::Duration::seconds(30);
    let e = r
        .route_alone(
            rec("z", "2026-11-22T10:30:20Z").as_bytes(),
            &origin(),
            later,
        )
        .unwrap_err();
    assert!(e.is_hold(), "{e}");

    let by_entity = router(|c| c.adaptive_sharding.enabled = true);
    for id in ["pump#x3", "tidemark#splits"] {
        let e = by_entity
            .route_alone(
                format!(r#"{{"deviceId":"{id}","timestamp":"2026-11-22T10:29:00Z"}}"#).as_bytes(),
                &origin(),
                now,
            )
            .unwrap_err();
        assert_eq!(e.reason(), Reason::InvalidField, "{id}: {e}");
    }
}
