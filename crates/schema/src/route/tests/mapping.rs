//! The `[event]` mapping as routed items show it: composite entities,
//! field paths, time formats, rename / include / exclude / types, clashes,
//! and the errors that name their key.

use super::encoding::json_value;
use super::*;

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
