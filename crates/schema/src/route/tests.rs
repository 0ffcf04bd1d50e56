use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;

use std::collections::HashMap;
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

/// JSON text of a string: plain and non-ASCII characters written as they
/// are, and every kind of escape, including a lone surrogate (which
/// cannot be read, and must fail the same way).
fn json_string(min_parts: usize) -> impl Strategy<Value = String> {
    let part = prop_oneof![
        6 => "[a-z0-9 #.]{1,4}",
        3 => "[^\"\\\\\\p{C}]",
        1 => prop::sample::select(vec![
            "\\\"", "\\\\", "\\/", "\\n", "\\t", "\\r", "\\b", "\\f", "\\u0000",
            "\\u001f", "\\u00e9", "\\u20ac", "\\ud83d\\ude00", "\\u0022", "\\ud800",
        ])
        .prop_map(str::to_owned),
    ];
    prop::collection::vec(part, min_parts..5).prop_map(|parts| format!("\"{}\"", parts.concat()))
}

fn json_number() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => any::<i64>().prop_map(|n| n.to_string()),
        12 => (-1e9..1e9f64).prop_map(|f| f.to_string()),
        12 => "-?(0|[1-9][0-9]{0,12})(\\.[0-9]{1,12})?([eE][-+]?[0-9]{1,2})?",
        1 => any::<f64>().prop_map(|f| f.to_string()),
        1 => "-?(0|[1-9][0-9]{0,44})(\\.[0-9]{1,44})?([eE][-+]?[0-9]{1,3})?",
        1 => prop::sample::select(vec!["0", "-0", "0.000", "1e2", "1E+2", "1.50", "9.99e125", "1e126", "1e-130", "0.1e-130", "1e99999999999999999999"])
            .prop_map(str::to_owned),
    ]
}

/// An entity id: mostly plain, sometimes any string (empty, with `#` or
/// escapes).
fn entity() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9-]{1,8}".prop_map(|e| format!("\"{e}\"")),
        1 => json_string(0),
    ]
}

/// An object member's name: few distinct names, so duplicates are common.
fn member_name() -> impl Strategy<Value = String> {
    prop_oneof![
        200 => "[a-d]{1,2}".prop_map(|k| format!("\"{k}\"")),
        20 => json_string(1),
        1 => Just("\"\"".to_owned()),
    ]
}

fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "", "", " ", "\n\t "])
}

/// JSON text of any value: scalars, nested objects (with duplicate and
/// empty keys) and arrays, and now and then a scalar deep in brackets
/// around DynamoDB's nesting limit.
fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        4 => json_string(0),
        4 => json_number(),
        1 => prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_owned),
    ];
    let tree = leaf.clone().prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec((inner.clone(), ws()), 0..5).prop_map(|xs| {
                let body: Vec<String> = xs.into_iter().map(|(v, w)| format!("{w}{v}{w}")).collect();
                format!("[{}]", body.join(","))
            }),
            prop::collection::vec((member_name(), inner, ws()), 0..5).prop_map(|ms| {
                let body: Vec<String> = ms
                    .into_iter()
                    .map(|(k, v, w)| format!("{w}{k}{w}:{w}{v}"))
                    .collect();
                format!("{{{}}}", body.join(","))
            }),
        ]
    });
    prop_oneof![
        60 => tree,
        1 => (leaf, 28usize..34).prop_map(|(v, n)| format!("{}{v}{}", "[".repeat(n), "]".repeat(n))),
    ]
}

/// Top-level payload members; some take reserved names (`pk`, `ts`,
/// `ttl`) or the empty name, and names repeat.
fn payload() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop_oneof![
        24 => "[a-z]{1,3}".prop_map(|k| format!("\"{k}\"")),
        4 => member_name(),
        1 => prop::sample::select(vec!["\"pk\"", "\"ts\"", "\"ttl\"", "\"entity_id\""]).prop_map(str::to_owned),
    ];
    prop::collection::vec((name, json_value()), 0..7)
}

/// Routers of different shapes: TTL or not, a time_bucket key, and an
/// entity id at a dotted path (whose enclosing object reaches the item
/// as an opened `Node::Object`).
fn routers() -> Vec<Router> {
    vec![
        router(|c| c.ttl_attribute = Some("ttl".into())),
        router(|c| {
            c.key = KeyStrategy::TimeBucket {
                shards: 4,
                bucket: crate::strategy::Bucket::Hour,
            };
        }),
        router(|c| {
            c.event.entity_field = "meta.id".into();
            c.key = KeyStrategy::CalculatedSuffix { shards: 3 };
        }),
        router(|c| c.event.on_clash = ClashPolicy::Refuse),
    ]
}

/// Each object in `json` (an item or any part of one) has distinct keys.
fn assert_distinct_keys(json: &RawValue) {
    match raw::json_kind(json) {
        "object" => {
            let members = raw::open_object(json).unwrap();
            for (i, (k, v)) in members.iter().enumerate() {
                assert!(
                    members[..i].iter().all(|(other, _)| other != k),
                    "{k} twice in {}",
                    json.get()
                );
                let Node::Raw(raw) = v else { panic!() };
                assert_distinct_keys(raw);
            }
        }
        "array" => {
            let elems: Vec<&RawValue> = serde_json::from_str(json.get()).unwrap();
            elems.into_iter().for_each(assert_distinct_keys);
        }
        _ => {}
    }
}

/// `route` against the attribute-map reference: same item, same size,
/// same error; and the JSON is valid with no repeated key.
fn check_against_reference(
    r: &Router,
    rec: &[u8],
    now: DateTime<Utc>,
) -> Result<(), TestCaseError> {
    let ours = r.route_alone(rec, &origin(), now);
    let theirs = reference::route_item(r, rec, &origin(), now);
    match (ours, theirs) {
        (Ok(routed), Ok(item)) => {
            let raw: &RawValue = serde_json::from_slice(routed.item.json())
                .map_err(|e| TestCaseError::fail(format!("invalid JSON {e}: {:?}", routed.item)))?;
            assert_distinct_keys(raw);
            prop_assert_eq!(routed.item.to_item().unwrap(), item.clone());
            prop_assert_eq!(routed.item.size(), size::item_size(&item));
            prop_assert_eq!(routed.wcu, size::item_wcu(&item));
        }
        (Err(a), Err(b)) => prop_assert_eq!(a, b),
        (a, b) => prop_assert!(false, "route {a:?}, reference {b:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(768))]

    #[test]
    fn route_builds_the_reference_item(
        which in 0usize..3,
        entity in entity(),
        meta in payload(),
        members in payload(),
        ws in ws(),
    ) {
        let member = |(k, v): &(String, String)| format!(",{ws}{k}{ws}:{ws}{v}");
        let meta: String = meta.iter().map(member).collect();
        let members: String = members.iter().map(member).collect();
        let rec = format!(
            r#"{{"deviceId":{entity},"meta":{{"id":{entity}{meta}}},"timestamp":1795323600000{members}}}"#
        );
        let r = &routers()[which];
        check_against_reference(r, rec.as_bytes(), at("2026-11-22T05:00:00Z"))?;
    }

    #[test]
    fn check_number_agrees_with_the_string_version(n in json_number(), junk in "[-+.eE0-9x]{0,4}") {
        prop_assert_eq!(check_number(&n), reference::check_number_by_string(&n));
        // The count it returns sizes the number as `number_size` does.
        if let Ok(significant) = check_number(&n) {
            prop_assert_eq!(size::size_of_significant(significant), size::number_size(&n));
        }
        let odd = format!("{n}{junk}");
        prop_assert_eq!(check_number(&odd), reference::check_number_by_string(&odd));
    }
}

#[test]
fn large_objects_index_their_names_like_small_ones_scan_them() {
    let now = at("2026-11-22T05:00:00Z");
    let r = router(|_| {});
    // Past DUPS_SCAN_MAX members, at the top level and nested, with a
    // duplicate first, in the middle and last.
    let names: Vec<String> = (0..DUPS_SCAN_MAX * 2)
        .map(|i| format!("k{}", i % 50))
        .collect();
    let obj: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, k)| format!(r#""{k}":{i}"#))
        .collect();
    let obj = obj.join(",");
    let nested = format!(r#"{{"deviceId":"d","timestamp":1795323600,"m":{{{obj}}}}}"#);
    check_against_reference(&r, nested.as_bytes(), now).unwrap();
    let routed = r.route_alone(nested.as_bytes(), &origin(), now).unwrap();
    let AttributeValue::M(m) = &routed.item.to_item().unwrap()["m"] else {
        panic!()
    };
    assert_eq!(m.len(), 50);
    assert_eq!(m["k0"], AttributeValue::N("50".into()));
    let top = format!(r#"{{"deviceId":"d","timestamp":1795323600,{obj}}}"#);
    let e = r.route_alone(top.as_bytes(), &origin(), now).unwrap_err();
    assert!(
        e.to_string().contains("`k0`") && e.to_string().contains("reserved"),
        "{e}"
    );
    check_against_reference(&r, top.as_bytes(), now).unwrap();
    let distinct: Vec<String> = (0..DUPS_SCAN_MAX * 2)
        .map(|i| format!(r#""k{i}":"v""#))
        .collect();
    let top = format!(
        r#"{{"deviceId":"d","timestamp":1795323600,{}}}"#,
        distinct.join(",")
    );
    check_against_reference(&r, top.as_bytes(), now).unwrap();
}

#[test]
fn item_json_is_valid_and_keeps_escaped_strings() {
    let r = router(|_| {});
    let rec = r#"{"deviceId":"d\"1","timestamp":1795323600,"eventId":"e\\1","s":"a\"b\\c\nd\u00e9\u0001\/\ud83d\ude00","plain":"héllo €","k\"ey\n":{"x\ty":["\u0041",""]}}"#;
    let routed = r
        .route_alone(rec.as_bytes(), &origin(), at("2026-11-22T05:00:00Z"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(routed.item.json()).unwrap();
    assert_eq!(v["s"]["S"], "a\"b\\c\nd\u{e9}\u{1}/\u{1f600}");
    assert_eq!(v["plain"]["S"], "héllo €");
    assert_eq!(v["entity_id"]["S"], "d\"1");
    assert_eq!(v["pk"]["S"], "d\"1");
    assert_eq!(v["event_id"]["S"], "e\\1");
    assert_eq!(v["k\"ey\n"]["M"]["x\ty"]["L"][0]["S"], "A");
    assert_eq!(v["k\"ey\n"]["M"]["x\ty"]["L"][1]["S"], "");
    // Verbatim copy of unescaped text, escapes re-encoded.
    let json = std::str::from_utf8(routed.item.json()).unwrap();
    assert!(json.contains(r#""plain":{"S":"héllo €"}"#), "{json}");
    assert!(
        json.contains(r#""s":{"S":"a\"b\\c\ndé\u0001/😀"}"#),
        "{json}"
    );
    check_against_reference(&r, rec.as_bytes(), at("2026-11-22T05:00:00Z")).unwrap();
    // Sizes count the decoded strings: "a\"b\\c\nd" is 7 bytes, é 2, \u0001 1, / 1, 😀 4.
    let item = routed.item.to_item().unwrap();
    assert_eq!(size::value_size(&item["s"]), 15);
    assert_eq!(routed.item.size(), size::item_size(&item));
}

/// The item of one record, as a map, routed at a fixed `now`.
fn item_of(r: &Router, rec: &str) -> Result<crate::size::Item, RouteError> {
    r.route_alone(rec.as_bytes(), &origin(), at("2025-11-22T06:00:00Z"))
        .map(|routed| routed.item.to_item().unwrap())
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: &str) -> AttributeValue {
    AttributeValue::N(v.into())
}

#[test]
fn composite_entities_array_paths_and_zoned_times() {
    let r = router(|c| {
        c.event.entity_fields = vec!["tenant".into(), "device.id".into()];
        c.event.timestamp_field = "at".into();
        c.event.timestamp_format = "%Y-%m-%d %H:%M:%S".parse().unwrap();
        c.event.timezone = Some("Europe/Paris".into());
        c.event.event_id_field = Some("items[1].id".into());
    });
    let item = item_of(
        &r,
        r#"{"tenant":"acme","device":{"id":7,"fw":"1.2"},"at":"2025-11-22 05:00:00","items":[{"id":"a"},{"id":"b"}]}"#,
    )
    .unwrap();
    assert_eq!(item["entity_id"], s("acme:7"));
    // 05:00 in Paris (UTC+1 in November) is 04:00Z.
    assert_eq!(item["ts"], s("2025-11-22T04:00:00.000Z"));
    assert_eq!(item["event_id"], s("b"));
    // The parts of the entity are taken out; an indexed path is only read.
    assert!(!item.contains_key("tenant"));
    let AttributeValue::M(device) = &item["device"] else {
        panic!("{item:?}")
    };
    assert_eq!(device.keys().collect::<Vec<_>>(), ["fw"]);
    let AttributeValue::L(items) = &item["items"] else {
        panic!()
    };
    assert_eq!(items.len(), 2);
    // A missing part names itself.
    let e = item_of(&r, r#"{"tenant":"acme","at":"2025-11-22 05:00:00"}"#).unwrap_err();
    assert!(e.to_string().contains("`device.id`"), "{e}");
    assert_eq!(e.reason(), Reason::MissingField);
}

#[test]
fn epoch_micros_nanos_and_auto_magnitudes() {
    let ts = |format: &str, v: &str| {
        let r = router(|c| c.event.timestamp_format = format.parse().unwrap());
        item_of(&r, &format!(r#"{{"deviceId":"d","timestamp":{v}}}"#)).map(|i| i["ts_ms"].clone())
    };
    let want = n("1763787600123");
    assert_eq!(ts("epoch_micros", "1763787600123456").unwrap(), want);
    assert_eq!(ts("epoch_nanos", "1763787600123456789").unwrap(), want);
    assert_eq!(ts("epoch_nanos", r#""1763787600123456789""#).unwrap(), want);
    // `auto` tells the unit by magnitude.
    assert_eq!(ts("auto", "1763787600123456").unwrap(), want);
    assert_eq!(ts("auto", "1763787600123456789").unwrap(), want);
    assert_eq!(ts("auto", "1763787600123").unwrap(), want);
    assert_eq!(ts("auto", "1763787600.123").unwrap(), want);
    // A zone-less time is refused by `auto` without a zone...
    let e = ts("auto", r#""2025-11-22 05:00:00""#).unwrap_err();
    assert_eq!(e.reason(), Reason::BadTimestamp);
    // ...and read in the zone with one.
    let r = router(|c| c.event.timezone = Some("+01:00".into()));
    let item = item_of(
        &r,
        r#"{"deviceId":"d","timestamp":"2025-11-22 05:00:00.5"}"#,
    )
    .unwrap();
    assert_eq!(item["ts"], s("2025-11-22T04:00:00.500Z"));
    // Offsets in the text still count.
    let item = item_of(&r, r#"{"deviceId":"d","timestamp":"2025-11-22T05:00:00Z"}"#).unwrap();
    assert_eq!(item["ts"], s("2025-11-22T05:00:00.000Z"));
    // A pattern that does not match dead-letters with the pattern named.
    let e = ts("%d/%m/%Y %H:%M", r#""2025-11-22 05:00""#).unwrap_err();
    assert!(e.to_string().contains("%d/%m/%Y"), "{e}");
    assert_eq!(
        ts("%d/%m/%Y %H:%M", r#""22/11/2025 05:00""#).unwrap(),
        n("1763787600000")
    );
}

#[test]
fn rename_include_exclude_and_types() {
    let r = router(|c| {
        c.event.rename = [
            ("user.name".to_owned(), "user_name".to_owned()),
            ("items[0].sku".to_owned(), "first_sku".to_owned()),
            ("n".to_owned(), "count".to_owned()),
        ]
        .into();
        c.event.include = Some(
            [
                "user_name",
                "first_sku",
                "count",
                "price",
                "code",
                "ok",
                "flag",
                "user",
            ]
            .map(str::to_owned)
            .to_vec(),
        );
        c.event.types = [
            ("count".to_owned(), FieldType::Number),
            ("price".to_owned(), FieldType::Number),
            ("code".to_owned(), FieldType::String),
            ("ok".to_owned(), FieldType::Bool),
            ("flag".to_owned(), FieldType::Bool),
        ]
        .into();
    });
    let item = item_of(
        &r,
        r#"{"deviceId":"d","timestamp":1763787600,"user":{"name":"ann","id":1},"items":[{"sku":"x1"}],
            "n":"12","price":"123456789012345678901234567890.5","code":404,"ok":"TRUE","flag":0,
            "debug":"dropped","count":"replaced by the rename"}"#,
    );
    let item = item.unwrap();
    assert_eq!(item["user_name"], s("ann"));
    assert_eq!(item["first_sku"], s("x1"));
    assert_eq!(item["count"], n("12"));
    assert_eq!(item["price"], n("123456789012345678901234567890.5"));
    assert_eq!(item["code"], s("404"));
    assert_eq!(item["ok"], AttributeValue::Bool(true));
    assert_eq!(item["flag"], AttributeValue::Bool(false));
    // `user` lost its renamed member; `items` and `debug` are not included.
    let AttributeValue::M(user) = &item["user"] else {
        panic!()
    };
    assert_eq!(user.keys().collect::<Vec<_>>(), ["id"]);
    assert!(!item.contains_key("items") && !item.contains_key("debug") && !item.contains_key("n"));
    // A value that does not coerce dead-letters its event, naming it.
    let e = item_of(
        &r,
        r#"{"deviceId":"d","timestamp":1763787600,"price":"12 euros"}"#,
    )
    .unwrap_err();
    assert_eq!(e.reason(), Reason::InvalidField);
    assert!(e.to_string().contains("`price`"), "{e}");
    let e = item_of(
        &r,
        r#"{"deviceId":"d","timestamp":1763787600,"ok":{"a":1}}"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("`ok`"), "{e}");
    // Exclude alone keeps everything else.
    let r = router(|c| c.event.exclude = vec!["debug".into()]);
    let item = item_of(
        &r,
        r#"{"deviceId":"d","timestamp":1763787600,"debug":1,"v":2}"#,
    )
    .unwrap();
    assert!(!item.contains_key("debug"));
    assert_eq!(item["v"], n("2"));
}

#[test]
fn clashing_fields_are_prefixed_or_refused() {
    let r = router(|c| c.ttl_attribute = Some("ttl".into()));
    let item = item_of(
        &r,
        r#"{"deviceId":"d","timestamp":1763787600,"ts":"x","ts_ms":1,"entity_id":"e","pk":2,"ttl":3,"payload_ts":"own"}"#,
    )
    .unwrap();
    assert_eq!(item["payload_ts_ms"], n("1"));
    assert_eq!(item["payload_entity_id"], s("e"));
    assert_eq!(item["payload_pk"], n("2"));
    assert_eq!(item["payload_ttl"], n("3"));
    // `payload_ts` is the payload's own: the clashing `ts` goes further.
    assert_eq!(item["payload_ts"], s("own"));
    assert_eq!(item["payload_payload_ts"], s("x"));
    assert_eq!(item["ts"], s("2025-11-22T05:00:00.000Z"));
    let r = router(|c| {
        c.event.on_clash = ClashPolicy::Refuse;
    });
    let e = item_of(&r, r#"{"deviceId":"d","timestamp":1763787600,"ts_ms":1}"#).unwrap_err();
    assert!(e.to_string().contains("`ts_ms`"), "{e}");
    assert_eq!(e.reason(), Reason::InvalidField);
}

#[test]
fn inner_events_get_their_own_derived_ids() {
    let r = router(|_| {});
    let now = at("2025-11-22T06:00:00Z");
    let rec = br#"{"deviceId":"d","timestamp":1763787600}"#;
    let id = |inner| {
        let Routes { new: routed, .. } = r
            .route(rec, &origin(), inner, now, &mut RouteCache::default())
            .unwrap();
        routed.item.to_item().unwrap()["event_id"].clone()
    };
    assert_eq!(
        id(0),
        s(&origin().derived_event_id()),
        "the first keeps the record's id"
    );
    assert_eq!(id(1), s(&format!("{}/1", origin().derived_event_id())));
    assert_eq!(id(7), id(7), "stable across replays");
    assert_ne!(id(1), id(2));
}

/// Every mapping error is refused when the router is built, naming the
/// key to fix.
#[test]
fn mapping_errors_name_their_key() {
    type Change = Box<dyn Fn(&mut RouterConfig)>;
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|c| c.event.entity_fields = vec!["a".into(), String::new()]),
            "entity_fields",
        ),
        (
            Box::new(|c| {
                c.event.entity_fields = vec!["a".into()];
                c.event.entity_field = "b".into();
            }),
            "entity_fields",
        ),
        (
            Box::new(|c| {
                c.event.entity_fields = vec!["a".into(), "b".into()];
                c.event.entity_separator = String::new();
            }),
            "entity_separator",
        ),
        (
            Box::new(|c| {
                c.event.entity_fields = vec!["a".into(), "b".into()];
                c.event.entity_separator = "#".into();
                c.key = KeyStrategy::TimeBucket {
                    shards: 2,
                    bucket: crate::strategy::Bucket::Day,
                };
            }),
            "event.entity_separator",
        ),
        (
            Box::new(|c| c.event.entity_field = "items[x].id".into()),
            "entity_field",
        ),
        (
            Box::new(|c| c.event.timestamp_field = "[0]".into()),
            "timestamp_field",
        ),
        (
            Box::new(|c| c.event.event_id_field = Some("a[1".into())),
            "event_id_field",
        ),
        (
            Box::new(|c| c.event.timestamp_format = "%H:%M".parse().unwrap()),
            "timestamp_format",
        ),
        (
            Box::new(|c| c.event.timezone = Some("Atlantis/Capital".into())),
            "timezone",
        ),
        (
            Box::new(|c| {
                c.event.timestamp_format = TimestampFormat::EpochMicros;
                c.event.timezone = Some("UTC".into());
            }),
            "timezone",
        ),
        (
            Box::new(|c| c.event.rename = [("a".into(), String::new())].into()),
            "rename",
        ),
        (
            Box::new(|c| {
                c.event.rename = [("a".into(), "x".into()), ("b".into(), "x".into())].into()
            }),
            "rename",
        ),
        (
            Box::new(|c| c.event.rename = [("deviceId".into(), "x".into())].into()),
            "rename",
        ),
        (
            Box::new(|c| c.event.rename = [("a".into(), "ts".into())].into()),
            "event.rename",
        ),
        (
            Box::new(|c| {
                c.event.rename = [("a".into(), "x".into())].into();
                c.event.include = Some(vec!["y".into()]);
            }),
            "rename",
        ),
        (
            Box::new(|c| c.event.include = Some(vec![String::new()])),
            "include",
        ),
        (
            Box::new(|c| {
                c.event.include = Some(vec!["a".into()]);
                c.event.exclude = vec!["a".into()];
            }),
            "exclude",
        ),
        (
            Box::new(|c| {
                c.event.exclude = vec!["a".into()];
                c.event.types = [("a".into(), FieldType::Number)].into();
            }),
            "types",
        ),
        (
            Box::new(|c| c.event.clash_prefix = String::new()),
            "clash_prefix",
        ),
        // One field in two roles names the later role's key.
        (
            Box::new(|c| c.event.timestamp_field = "deviceId".into()),
            "timestamp_field",
        ),
        (
            Box::new(|c| c.event.event_id_field = Some("timestamp".into())),
            "event_id_field",
        ),
        (
            Box::new(|c| c.event.entity_fields = vec!["a".into(), "a".into()]),
            "entity_fields",
        ),
        (
            Box::new(|c| c.event.timestamp_format = "%Y-%m-%d %Q".parse().unwrap()),
            "timestamp_format",
        ),
    ];
    for (i, (f, key)) in cases.iter().enumerate() {
        let mut c = RouterConfig::with_prefix("tm");
        f(&mut c);
        let err = Router::new(c).unwrap_err();
        let named = match &err {
            RouterConfigError::Event(e) => e.field,
            RouterConfigError::Invalid { key, .. } => key,
            RouterConfigError::Strategy(_) => "strategy",
        };
        assert_eq!(named, *key, "case {i}: {err}");
        assert_eq!(
            err.key_path(),
            format!("event.{}", key.trim_start_matches("event.")),
            "case {i}: {err}"
        );
        assert!(err.to_string().contains(key), "case {i}: {err}");
    }
    // Refusing instead of prefixing needs no prefix.
    let mut c = RouterConfig::with_prefix("tm");
    c.event.on_clash = ClashPolicy::Refuse;
    c.event.clash_prefix = String::new();
    assert!(Router::new(c).is_ok());
}

/// The stored attribute equals the JSON value it came from, numbers
/// digit for digit (objects: last of repeated names).
fn same_value(av: &AttributeValue, raw: &RawValue) -> bool {
    let text = raw.get().trim();
    match (raw::json_kind(raw), av) {
        ("number", AttributeValue::N(t)) => t == text,
        ("string", AttributeValue::S(t)) => *t == serde_json::from_str::<String>(text).unwrap(),
        ("boolean", AttributeValue::Bool(b)) => *b == (text == "true"),
        ("null", AttributeValue::Null(true)) => true,
        ("array", AttributeValue::L(items)) => {
            let elems: Vec<&RawValue> = serde_json::from_str(text).unwrap();
            elems.len() == items.len() && elems.iter().zip(items).all(|(e, a)| same_value(a, e))
        }
        ("object", AttributeValue::M(map)) => {
            let members = raw::open_object(raw).unwrap();
            let mut last: HashMap<String, &RawValue> = HashMap::new();
            for (k, v) in &members {
                let Node::Raw(v) = v else { return false };
                last.insert(k.to_string(), v);
            }
            last.len() == map.len()
                && last
                    .iter()
                    .all(|(k, v)| map.get(k).is_some_and(|a| same_value(a, v)))
        }
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    /// Any JSON object goes through an include-all mapping (every field
    /// listed in `include`) into the item unchanged: same fields, same
    /// values, every number with the producer's digits.
    #[test]
    fn include_all_mapping_round_trips_any_object(
        members in prop::collection::btree_map("f_[a-z0-9]{1,6}", json_value(), 0..8),
    ) {
        let body: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        let rec = format!(
            r#"{{"deviceId":"d","timestamp":"2025-11-22T05:00:00Z"{}{}}}"#,
            if body.is_empty() { "" } else { "," },
            body.join(",")
        );
        let r = router(|c| c.event.include = Some(members.keys().cloned().collect()));
        let item = item_of(&r, &rec);
        // Values DynamoDB cannot hold (deep nesting, 39-digit numbers)
        // are dead-lettered, as without a mapping.
        prop_assume!(item.is_ok());
        let item = item.unwrap();
        prop_assert_eq!(item.len(), members.len() + 6);
        for (k, v) in &members {
            let raw: Box<RawValue> = serde_json::from_str(v).unwrap();
            prop_assert!(same_value(&item[k], &raw), "{} = {} stored as {:?}", k, v, item[k]);
        }
    }
}
