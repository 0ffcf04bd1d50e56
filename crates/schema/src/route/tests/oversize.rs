//! `schema.oversize`: the size decision (`oversize_bytes`) and the pointer
//! item of `oversize = "s3"` (its attributes and its projection).

use super::*;
use crate::Item;
use crate::route::oversize::{Offload, Oversize, OversizeS3, POINTER_ATTRIBUTES, sha256_hex};

fn s3(edit: impl FnOnce(&mut OversizeS3)) -> OversizeS3 {
    let mut s3 = OversizeS3 {
        bucket: "big-events".into(),
        prefix: "oversize".into(),
        kms_key_id: None,
        fields: None,
        projection_bytes: 4096,
        max_retry_time: Duration::from_secs(30),
    };
    edit(&mut s3);
    s3
}

fn offloading(edit: impl FnOnce(&mut OversizeS3)) -> Router {
    let s3 = s3(edit);
    router(|c| {
        c.oversize = Oversize::S3;
        c.oversize_s3 = Some(s3);
    })
}

/// An event of about `blob` bytes, with small fields around its blob.
fn event(blob: usize) -> String {
    format!(
        r#"{{"deviceId":"d-1","timestamp":1795323600,"eventId":"e-1","kind":"photo","blob":"{}","n":42,"ok":true}}"#,
        "a".repeat(blob)
    )
}

fn s(item: &Item, name: &str) -> Option<String> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        Some(AttributeValue::N(n)) => Some(n.clone()),
        Some(AttributeValue::Bool(b)) => Some(b.to_string()),
        _ => None,
    }
}

/// Today's defect: a 500 KB event is dead-lettered as `item_too_large`
/// even with `oversize = "s3"`. It is routed to a pointer item holding the
/// attributes every item carries, the payload's location, size and hash,
/// and its small fields, and names the content-addressed object.
#[test]
fn a_500_kb_event_with_oversize_s3_is_a_pointer_item() {
    let r = offloading(|_| {});
    let plain = router(|_| {});
    let now = at("2026-11-22T05:00:00Z");
    let data = event(500_000);
    assert_eq!(
        plain
            .route_alone(data.as_bytes(), &origin(), now)
            .unwrap_err()
            .reason(),
        Reason::ItemTooLarge,
        "dead_letter (the default) refuses it as before"
    );
    let full_key = plain
        .route_alone(event(10).as_bytes(), &origin(), now)
        .unwrap()
        .key;
    let routed = r.route_alone(data.as_bytes(), &origin(), now).unwrap();
    let hex = sha256_hex(data.as_bytes());
    let offload = routed.offload.clone().expect("an object to write first");
    assert_eq!(
        offload,
        Offload {
            bucket: "big-events".into(),
            key: format!("oversize/sha256/{hex}"),
            sha256: hex.clone(),
            bytes: data.len(),
        }
    );
    assert_eq!(routed.key, full_key, "the same key as a stored item");
    let item = routed.item.to_item().unwrap();
    assert_eq!(routed.item.size(), size::item_size(&item));
    assert_eq!(routed.wcu, routed.item.wcu());
    assert!(routed.item.size() < 4096 + 512, "{}", routed.item.size());
    for (name, want) in [
        ("pk", Some(routed.key.pk().to_owned())),
        ("entity_id", Some("d-1".into())),
        ("event_id", Some("e-1".into())),
        ("ts", Some("2026-11-22T05:00:00.000Z".into())),
        ("ts_ms", Some("1795323600000".into())),
        (
            "tidemark_payload_s3",
            Some(format!("s3://big-events/oversize/sha256/{hex}")),
        ),
        ("tidemark_payload_bytes", Some(data.len().to_string())),
        ("tidemark_payload_sha256", Some(hex.clone())),
        ("kind", Some("photo".into())),
        ("n", Some("42".into())),
        ("ok", Some("true".into())),
        ("blob", None),
    ] {
        assert_eq!(s(&item, name), want, "{name}");
    }
    // A replay routes the same item to the same object.
    let again = r.route_alone(data.as_bytes(), &origin(), now).unwrap();
    assert_eq!(again, routed);
}

/// `oversize_bytes` lowers the limit, measured as DynamoDB measures items,
/// for both kinds: an item at the limit is stored whole, one byte over is
/// dead-lettered (`dead_letter`) or a pointer (`s3`).
#[test]
fn oversize_bytes_is_the_limit_in_dynamodb_bytes() {
    let limit = 8192;
    let dl = router(|c| c.oversize_bytes = limit);
    let off = {
        let s3 = s3(|s| s.projection_bytes = 1024);
        router(|c| {
            c.oversize_bytes = limit;
            c.oversize = Oversize::S3;
            c.oversize_s3 = Some(s3);
        })
    };
    let now = at("2026-11-22T05:00:00Z");
    let fixed = dl
        .route_alone(event(0).as_bytes(), &origin(), now)
        .unwrap()
        .item
        .size();
    let at_limit = event(limit - fixed);
    for r in [&dl, &off] {
        let whole = r.route_alone(at_limit.as_bytes(), &origin(), now).unwrap();
        assert_eq!(whole.item.size(), limit);
        assert_eq!(whole.offload, None);
    }
    let over = event(limit - fixed + 1);
    let e = dl.route_alone(over.as_bytes(), &origin(), now).unwrap_err();
    assert_eq!(e.reason(), Reason::ItemTooLarge);
    assert!(e.to_string().contains("8192"), "{e}");
    let pointer = off.route_alone(over.as_bytes(), &origin(), now).unwrap();
    assert_eq!(pointer.offload.map(|o| o.bytes), Some(over.len()));
    let item = pointer.item.to_item().unwrap();
    assert_eq!(s(&item, "blob"), None);
    assert_eq!(s(&item, "kind").as_deref(), Some("photo"));
}

/// The projection: the configured fields in their order, each kept when its
/// name and value fit in what is left of the budget, others skipped.
#[test]
fn the_projection_keeps_the_fields_that_fit_in_order() {
    let r = offloading(|s| {
        s.fields = Some(vec![
            "c".into(),
            "big".into(),
            "absent".into(),
            "a".into(),
            "b".into(),
        ]);
        s.projection_bytes = 1 + 300 + 1 + 10;
    });
    let now = at("2026-11-22T05:00:00Z");
    let data = format!(
        r#"{{"deviceId":"d","timestamp":1795323600,"eventId":"e","a":"{}","b":"{}","big":"{}","c":"{}","blob":"{}"}}"#,
        "a".repeat(10),
        "b".repeat(10),
        "g".repeat(1000),
        "c".repeat(300),
        "x".repeat(500_000)
    );
    let routed = r.route_alone(data.as_bytes(), &origin(), now).unwrap();
    let item = routed.item.to_item().unwrap();
    assert_eq!(s(&item, "c"), Some("c".repeat(300)));
    assert_eq!(s(&item, "a"), Some("a".repeat(10)));
    assert_eq!(s(&item, "big"), None, "over the budget");
    assert_eq!(s(&item, "b"), None, "the budget is spent");
    assert_eq!(s(&item, "blob"), None, "not listed");
    // In the configured order, after the pointer attributes.
    let json = std::str::from_utf8(routed.item.json()).unwrap();
    let at = |n: &str| json.find(n).unwrap();
    assert!(at("tidemark_payload_sha256") < at("\"c\"") && at("\"c\"") < at("\"a\""));
}

/// While `oversize = "s3"`, the pointer attributes' names are reserved
/// (a payload field of that name would make a stored item read as a
/// pointer): prefixed by `on_clash` (the default), like any reserved name.
#[test]
fn pointer_attribute_names_are_reserved_with_oversize_s3() {
    let r = offloading(|_| {});
    let now = at("2026-11-22T05:00:00Z");
    for name in POINTER_ATTRIBUTES {
        let data = format!(r#"{{"deviceId":"d","timestamp":1795323600,"{name}":"x"}}"#);
        let item = r
            .route_alone(data.as_bytes(), &origin(), now)
            .unwrap()
            .item
            .to_item()
            .unwrap();
        assert_eq!(s(&item, name), None, "{name}");
        assert_eq!(s(&item, &format!("payload_{name}")).as_deref(), Some("x"));
        let plain = router(|_| {})
            .route_alone(data.as_bytes(), &origin(), now)
            .unwrap()
            .item
            .to_item()
            .unwrap();
        assert_eq!(
            s(&plain, name).as_deref(),
            Some("x"),
            "not reserved by default"
        );
    }
}

#[test]
fn oversize_settings_are_checked() {
    type Edit = fn(&mut RouterConfig);
    let cases: [(Edit, &str); 4] = [
        (|c| c.oversize = Oversize::S3, "schema.oversize_s3"),
        (
            |c| c.oversize_bytes = size::MAX_ITEM_BYTES + 1,
            "schema.oversize_bytes",
        ),
        (|c| c.oversize_bytes = 100, "schema.oversize_bytes"),
        (
            |c| {
                c.oversize_s3 = Some(s3(|s| s.projection_bytes = 500_000));
            },
            "schema.oversize_s3.projection_bytes",
        ),
    ];
    for (edit, key) in cases {
        let mut c = RouterConfig::with_prefix("tm");
        edit(&mut c);
        let e = Router::new(c).unwrap_err();
        assert_eq!(e.key_path(), key, "{e}");
    }
}

/// During a shard migration both items of an oversized event are pointers
/// to the one object (written once by the pipeline, which dedups by key).
#[test]
fn a_migration_writes_two_pointers_to_one_object() {
    let tb = |shards| KeyStrategy::TimeBucket {
        shards,
        bucket: crate::strategy::Bucket::Hour,
    };
    let s3 = s3(|_| {});
    let r = router(|c| {
        c.oversize = Oversize::S3;
        c.oversize_s3 = Some(s3);
        c.key = tb(8);
        c.migrate_from = Some(tb(4));
    });
    let now = at("2026-11-22T05:00:00Z");
    // Entities until one whose two layouts differ.
    let routes = (0..100)
        .map(|i| {
            let data = event(450_000).replace("d-1", &format!("d-{i}"));
            r.route(
                data.as_bytes(),
                &origin(),
                0,
                now,
                &mut RouteCache::default(),
            )
            .unwrap()
        })
        .find(|routes| routes.old.is_some())
        .expect("an entity keyed differently by 4 and 8 shards");
    let old = routes.old.unwrap();
    assert_ne!(routes.new.key, old.key);
    assert!(routes.new.offload.is_some());
    assert_eq!(routes.new.offload, old.offload);
}
