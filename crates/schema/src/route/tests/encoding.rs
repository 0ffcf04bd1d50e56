//! The item encoder against the attribute-map reference (`reference`):
//! generated records of every shape give the same item, size and error.

use super::*;

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
pub(super) fn json_value() -> impl Strategy<Value = String> {
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
