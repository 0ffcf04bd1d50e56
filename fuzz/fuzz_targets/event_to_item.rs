//! Arbitrary bytes as one event record, routed by several router
//! configurations (every key strategy, dotted field paths, each timestamp
//! format, several periods).
//!
//! Invariants:
//! - `route` never panics;
//! - an Ok item is valid DynamoDB JSON whose size (summed by the router as
//!   it encoded) is its size by the schema's rules; it is at most 400 KB,
//!   costs `ceil(size / 1 KB)` WCU, holds every key and fixed attribute with the
//!   values of `Routed`, and its key is what the strategy computes and fits
//!   DynamoDB's key limits; its table parses back to the event's period;
//! - routing the same input twice gives the same result (determinism);
//! - an Err maps to one of the reasons routing can give, and to
//!   `invalid_json` exactly when the bytes are not a JSON object (lone
//!   surrogate escapes may go either way: serde_json only checks them when it
//!   decodes the string);
//! - a routed record is a JSON object, and its item nests no deeper than
//!   DynamoDB's 32 levels.
#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use tidemark_schema::event::TimestampFormat;
use tidemark_schema::period::Period;
use tidemark_schema::route::{RouteCache, Routed, Router, RouterConfig};
use tidemark_schema::size::{self, Item};
use tidemark_schema::strategy::{self, Bucket, KeyStrategy};
use tidemark_schema::{Origin, Reason, timefmt};

/// Fixed "now": the fixtures' day (2026-11-25) plus an hour, so their events
/// are neither expired nor in the future.
const NOW_MS: i64 = 1_795_586_400_000;

fn config(edit: impl FnOnce(&mut RouterConfig)) -> RouterConfig {
    let mut c = RouterConfig::with_prefix("fz");
    edit(&mut c);
    c
}

static ROUTERS: LazyLock<Vec<Router>> = LazyLock::new(|| {
    let configs = [
        // The defaults (deviceId / timestamp / eventId, auto), with a TTL.
        config(|c| c.ttl_attribute = Some("expires_at".into())),
        // The fixtures' field names, RFC 3339 only, random suffix, hourly tables.
        config(|c| {
            c.event.entity_field = "device_id".into();
            c.event.timestamp_field = "ts".into();
            c.event.timestamp_format = TimestampFormat::Rfc3339;
            c.key = KeyStrategy::RandomSuffix { shards: 7 };
            c.period = Period::Hour;
        }),
        // Dotted paths, epoch millis, calculated suffix, monthly tables.
        config(|c| {
            c.event.entity_field = "meta.device.id".into();
            c.event.timestamp_field = "meta.ts".into();
            c.event.event_id_field = Some("meta.id".into());
            c.event.timestamp_format = TimestampFormat::EpochMillis;
            c.key = KeyStrategy::CalculatedSuffix { shards: 10 };
            c.period = Period::Month;
            c.retention = Duration::from_secs(400 * 86_400);
        }),
        // Epoch seconds, time bucket, no event id field, renamed attributes,
        // weekly tables, a short retention.
        config(|c| {
            c.event.timestamp_format = TimestampFormat::EpochSeconds;
            c.event.event_id_field = None;
            c.key = KeyStrategy::TimeBucket {
                shards: 16,
                bucket: Bucket::Minute,
            };
            c.key_attributes.pk = "PK".into();
            c.key_attributes.sk = "SK".into();
            c.attributes.entity = "deviceId".into();
            c.period = Period::Week;
            c.retention = Duration::from_secs(86_400);
            c.late_arrival_grace = Duration::from_secs(600);
            c.ttl_attribute = Some("ttl".into());
        }),
        // Auto format, time bucket by day, quarterly tables.
        config(|c| {
            c.event.entity_field = "device.id".into();
            c.key = KeyStrategy::TimeBucket {
                shards: 3,
                bucket: Bucket::Day,
            };
            c.period = Period::Quarter;
            c.retention = Duration::from_secs(3650 * 86_400);
        }),
    ];
    configs
        .into_iter()
        .map(|c| Router::new(c).expect("fuzz router configs are valid"))
        .collect()
});

static NOW: LazyLock<DateTime<Utc>> =
    LazyLock::new(|| DateTime::<Utc>::from_timestamp_millis(NOW_MS).expect("NOW_MS is in range"));

/// The reasons `Router::route` may give (the rest belong to other stages).
const ROUTE_REASONS: [Reason; 7] = [
    Reason::InvalidJson,
    Reason::MissingField,
    Reason::InvalidField,
    Reason::BadTimestamp,
    Reason::ItemTooLarge,
    Reason::ExpiredPeriod,
    Reason::FutureEvent,
];

fn s<'a>(item: &'a Item, name: &str) -> &'a str {
    match item.get(name) {
        Some(AttributeValue::S(v)) => v,
        other => panic!("attribute {name} should be a string, is {other:?}"),
    }
}

fn n<'a>(item: &'a Item, name: &str) -> &'a str {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v,
        other => panic!("attribute {name} should be a number, is {other:?}"),
    }
}

/// Containers around the deepest scalar of a value.
fn depth(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::L(l) => 1 + l.iter().map(depth).max().unwrap_or(0),
        AttributeValue::M(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Checks a routed record; returns its item, decoded from its DynamoDB JSON.
fn check_ok(router: &Router, r: &Routed) -> Item {
    let cfg = router.config();
    let item = r
        .item
        .to_item()
        .expect("a routed item is valid DynamoDB JSON");
    let size = size::item_size(&item);
    // The size the router summed while encoding is the size of what it wrote.
    assert_eq!(r.item.size(), size, "encoded size differs from the item's");
    assert!(
        size <= size::MAX_ITEM_BYTES,
        "item of {size} bytes accepted"
    );
    assert_eq!(r.wcu, size::wcu_for_size(size));
    assert!((1..=400).contains(&r.wcu));
    for (name, v) in &item {
        assert!(!name.is_empty());
        // A top-level attribute is level 1: at most 31 containers below it.
        assert!(depth(v) < size::MAX_NESTING_LEVELS, "{name} nests too deep");
    }

    let ka = &cfg.key_attributes;
    let ia = &cfg.attributes;
    assert_eq!(s(&item, &ka.pk), r.key.pk());
    assert_eq!(s(&item, &ka.sk), r.key.sk());
    assert!(!r.key.pk().is_empty() && r.key.pk().len() <= strategy::MAX_PARTITION_KEY_BYTES);
    assert!(!r.key.sk().is_empty() && r.key.sk().len() <= strategy::MAX_SORT_KEY_BYTES);
    let entity = s(&item, &ia.entity);
    let event_id = s(&item, &ia.event_id);
    assert!(!entity.is_empty());
    assert!(!event_id.is_empty());
    assert_eq!(s(&item, &ia.timestamp), timefmt::iso_millis(r.timestamp_ms));
    assert_eq!(n(&item, &ia.timestamp_ms), r.timestamp_ms.to_string());
    if let Some(ttl) = &cfg.ttl_attribute {
        let expires: i64 = n(&item, ttl).parse().expect("ttl is an integer");
        assert!(expires >= r.timestamp_ms.div_euclid(1000));
    }
    assert_eq!(cfg.key.key(entity, r.timestamp_ms, event_id), r.key);
    if cfg.key.forbids_hash_in_entity() {
        assert!(!entity.contains('#'));
    }

    assert!(timefmt::in_range(r.timestamp_ms), "{}", r.timestamp_ms);
    assert!(r.timestamp_ms <= NOW_MS + tidemark_ms(cfg.max_future_skew));
    let period = cfg.period.containing(r.timestamp_ms);
    assert!(period.contains(r.timestamp_ms));
    assert_eq!(router.naming().parse(&r.table), Some(period), "{}", r.table);
    assert!(period.end_ms() + tidemark_ms(cfg.retention) > NOW_MS);
    item
}

fn tidemark_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn origin() -> Origin {
    Origin::Kinesis {
        stream: "fuzz".into(),
        shard_id: "shardId-000000000000".into(),
        sequence_number: "49590338271490256608559692538361571095921575989136588898".into(),
        sub_sequence_number: 0,
    }
}

fuzz_target!(|data: &[u8]| {
    let origin = origin();
    // Two oracles: a full parse (strings decoded, numbers as f64, nesting
    // limited to 128) and a lax one (RawValue: syntax only). Between the two
    // (a lone surrogate escape, 1e400, very deep nesting) either outcome is
    // fine: e.g. a numeric event id of 1e400 is valid, kept as its text.
    let strict_object = matches!(
        serde_json::from_slice::<serde_json::Value>(data),
        Ok(serde_json::Value::Object(_))
    );
    let lax_object = serde_json::from_slice::<&serde_json::value::RawValue>(data).is_ok()
        && data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    for router in ROUTERS.iter() {
        let first = router
            .route(data, &origin, 0, *NOW, &mut RouteCache::default())
            .map(|r| r.new);
        let second = router
            .route(data, &origin, 0, *NOW, &mut RouteCache::default())
            .map(|r| r.new);
        assert_eq!(first, second, "routing is not deterministic");
        match &first {
            Ok(r) => {
                assert!(lax_object, "routed a record that is not a JSON object");
                let item = check_ok(router, r);
                // The extractor (used by `tidemark key` and the planner)
                // agrees with the router on the event's identity.
                let ev = router
                    .extractor()
                    .extract(data, &origin)
                    .expect("a routed record extracts");
                let ia = &router.config().attributes;
                assert_eq!(ev.entity_id, s(&item, &ia.entity));
                assert_eq!(ev.event_id, s(&item, &ia.event_id));
                assert_eq!(ev.timestamp_ms, r.timestamp_ms);
            }
            Err(e) => {
                let reason = e.reason();
                assert!(ROUTE_REASONS.contains(&reason), "{reason} from route: {e}");
                assert!(!e.to_string().is_empty());
                if reason == Reason::InvalidJson {
                    assert!(!strict_object, "a JSON object is invalid_json: {e}");
                } else {
                    assert!(lax_object, "not a JSON object, yet {reason}: {e}");
                }
            }
        }
    }
});
