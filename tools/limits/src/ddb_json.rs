//! DynamoDB's wire JSON (`{"S": "..."}`, `{"N": "..."}`, ...) as the proxy sees it.
//!
//! Item sizes come from `tidemark_schema::wire::wire_item_size`, which reads
//! the wire JSON directly and is held by a proptest to the answer of
//! `tidemark_schema::size` on the decoded item, the rules the writer uses:
//! the proxy and the writer agree on what an item costs.
//!
//! Keys, sizes and digests take any [`Tree`]: BatchWriteItem requests are
//! read into a [`JsonRef`] that borrows from the request body, single-item
//! calls into serde_json's `Value`. Tests hold the two to the same answers.

pub use crate::json_ref::JsonRef;
use serde::Serialize;
use sha2::{Digest, Sha256};
pub use tidemark_schema::wire::Tree;
// serde_json's escaping (a proptest holds them together), copying strings
// that need none whole.
use tidemark_schema::wire::{write_elements, write_members, write_str};

// Decoding is the schema crate's (the writer's own items decode the same
// way); the proxy's names for it are kept.
pub use tidemark_schema::wire::{
    WireError, decode_map as to_item, decode_value as to_attribute_value, wire_item_size,
};

/// The scalar of a key attribute as bytes: what decides the partition and
/// what makes two keys equal. The type tag is part of it (`S "1"` and
/// `N "1"` are different keys).
pub fn key_bytes<T: Tree>(v: &T) -> Option<Vec<u8>> {
    let (tag, inner) = v.members()?.next()?;
    let text = inner.as_str()?;
    let mut out = Vec::with_capacity(tag.len() + 1 + text.len());
    out.extend_from_slice(tag.as_bytes());
    out.push(b':');
    if tag == "N" {
        // Numbers compare by value: "1.0" and "1" are the same key.
        out.extend_from_slice(normalize_number(text).as_bytes());
    } else {
        out.extend_from_slice(text.as_bytes());
    }
    Some(out)
}

fn normalize_number(n: &str) -> String {
    match n.parse::<f64>() {
        Ok(f) if f.is_finite() && n.len() <= 15 => format!("{f}"),
        _ => n.to_owned(),
    }
}

/// The primary key of an item (or a `Key` map) under a table's key schema,
/// as a printable string `pk` or `pk|sk`. `None` if an attribute is missing.
pub fn primary_key<T: Tree>(item: &T, hash: &str, range: Option<&str>) -> Option<String> {
    let h = key_bytes(item.get(hash)?)?;
    let mut out = String::from_utf8_lossy(&h).into_owned();
    if let Some(r) = range {
        let r = key_bytes(item.get(r)?)?;
        out.push('|');
        out.push_str(&String::from_utf8_lossy(&r));
    }
    Some(out)
}

/// Writes `v` as JSON with object keys sorted at every level, so equal items
/// always give equal bytes whatever order the client sent.
pub fn canonical_json<T: Tree + Serialize>(v: &T, out: &mut Vec<u8>) {
    // Written straight into `out`: sink mode digests every accepted item,
    // and a string per key and scalar made the proxy (which shares the
    // benchmark machine with the client it measures) needlessly heavy.
    if let Some(members) = v.members() {
        let mut members: Vec<(&str, &T)> = members.collect();
        // Requests usually list attributes unsorted; a map may not.
        if !members.is_sorted_by(|a, b| a.0 <= b.0) {
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
        }
        write_members(out, members, |out, inner| canonical_json(inner, out));
    } else if let Some(elems) = v.as_array() {
        write_elements(out, elems, |out, e| canonical_json(e, out));
    } else if let Some(text) = v.as_str() {
        write_str(out, text);
    } else {
        write_json(out, v);
    }
}

/// Appends a value's compact JSON; writing into a vector cannot fail.
fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    let _ = serde_json::to_writer(&mut *out, v);
}

/// A SHA-256 digest. Sink mode keeps one per item, as bytes (half the
/// memory of its hex, and no string per item); [`hex`] renders it.
pub type ItemDigest = [u8; 32];

/// SHA-256 of the canonical JSON of an item. Python computes the same (as
/// [`hex`] renders it) with `hashlib.sha256(json.dumps(item,
/// sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()`.
pub fn item_digest<T: Tree + Serialize>(v: &T) -> ItemDigest {
    let mut s = Vec::with_capacity(256);
    canonical_json(v, &mut s);
    Sha256::digest(&s).into()
}

/// A digest in lower-case hex.
pub fn hex(d: &ItemDigest) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(64);
    for b in d {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 15)]));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_smithy_types::Blob;
    use serde_json::{Value, json};
    use std::collections::HashMap;
    use tidemark_schema::Item;

    #[test]
    fn wire_size_agrees_with_schema_sizing() {
        // The same item built by hand as an SDK item and sent as wire JSON.
        let wire = json!({
            "pk": {"S": "héllo"},
            "n": {"N": "-123.4500"},
            "b": {"B": "AAEC"},
            "flag": {"BOOL": true},
            "nil": {"NULL": true},
            "tags": {"SS": ["a", "bc"]},
            "nums": {"NS": ["1", "22"]},
            "l": {"L": [{"S": "x"}, {"N": "7"}]},
            "m": {"M": {"a": {"S": "xy"}}}
        });
        let mut sdk: Item = HashMap::new();
        sdk.insert("pk".into(), AttributeValue::S("héllo".into()));
        sdk.insert("n".into(), AttributeValue::N("-123.4500".into()));
        sdk.insert("b".into(), AttributeValue::B(Blob::new(vec![0u8, 1, 2])));
        sdk.insert("flag".into(), AttributeValue::Bool(true));
        sdk.insert("nil".into(), AttributeValue::Null(true));
        sdk.insert(
            "tags".into(),
            AttributeValue::Ss(vec!["a".into(), "bc".into()]),
        );
        sdk.insert(
            "nums".into(),
            AttributeValue::Ns(vec!["1".into(), "22".into()]),
        );
        sdk.insert(
            "l".into(),
            AttributeValue::L(vec![
                AttributeValue::S("x".into()),
                AttributeValue::N("7".into()),
            ]),
        );
        let mut inner = HashMap::new();
        inner.insert("a".to_string(), AttributeValue::S("xy".into()));
        sdk.insert("m".into(), AttributeValue::M(inner));
        let expected = tidemark_schema::size::item_size(&sdk);
        assert_eq!(wire_item_size(&wire).unwrap(), expected);
        // Spot-check one rule independently: 3 decoded bytes, not 4 base64 chars.
        assert_eq!(wire_item_size(&json!({"b": {"B": "AAEC"}})).unwrap(), 1 + 3);
    }

    #[test]
    fn rejects_malformed_values() {
        assert!(to_attribute_value(&json!({"S": "a", "N": "1"})).is_err());
        assert!(to_attribute_value(&json!({"X": "a"})).is_err());
        assert!(to_attribute_value(&json!({"B": "!!"})).is_err());
        assert!(to_attribute_value(&json!("plain")).is_err());
    }

    #[test]
    fn keys_distinguish_types_and_normalize_numbers() {
        let a = json!({"pk": {"S": "1"}, "sk": {"N": "1.0"}});
        let b = json!({"pk": {"N": "1"}, "sk": {"N": "1"}});
        let c = json!({"pk": {"S": "1"}, "sk": {"N": "1"}});
        let k = |v: &Value| primary_key(v, "pk", Some("sk"));
        assert_ne!(k(&a), k(&b));
        assert_eq!(k(&a), k(&c));
        assert_eq!(primary_key(&a, "missing", None), None);
        // Read borrowed, the same keys.
        for v in [&a, &b, &c] {
            let text = v.to_string();
            let r = JsonRef::parse(text.as_bytes()).unwrap();
            assert_eq!(primary_key(&r, "pk", Some("sk")), k(v));
        }
    }

    #[test]
    fn digest_ignores_key_order() {
        let a: Value =
            serde_json::from_str(r#"{"a":{"S":"1"},"b":{"M":{"y":{"N":"2"},"x":{"N":"1"}}}}"#)
                .unwrap();
        let b: Value =
            serde_json::from_str(r#"{"b":{"M":{"x":{"N":"1"},"y":{"N":"2"}}},"a":{"S":"1"}}"#)
                .unwrap();
        assert_eq!(item_digest(&a), item_digest(&b));
        let c = json!({"a": {"S": "2"}});
        assert_ne!(item_digest(&a), item_digest(&c));
        let mut s = Vec::new();
        canonical_json(&a, &mut s);
        assert_eq!(
            String::from_utf8(s).unwrap(),
            r#"{"a":{"S":"1"},"b":{"M":{"x":{"N":"1"},"y":{"N":"2"}}}}"#
        );
        // What Python's hashlib gives for the same item (see `item_digest`).
        let python = "dde874f7b1937dccecf723a19f551bb736986c9daa9a559a89acb407c847b451";
        assert_eq!(hex(&item_digest(&a)), python);
        // Read borrowed, members stay in the client's order (here reversed at
        // both levels, with escapes and non-ASCII text); the digest does not.
        let text = r#"{"b":{"M":{"y":{"N":"2"},"x":{"N":"1"}}},"a":{"S":"1"}}"#;
        assert_eq!(
            hex(&item_digest(&JsonRef::parse(text.as_bytes()).unwrap())),
            python
        );
        let odd = r#"{"z":{"S":"\u00e9\"q\"\n"},"\u00e9":{"SS":["b","a"]},"a":{"L":[{"S":"é"}]}}"#;
        let as_value: Value = serde_json::from_str(odd).unwrap();
        let borrowed = JsonRef::parse(odd.as_bytes()).unwrap();
        assert_eq!(item_digest(&borrowed), item_digest(&as_value));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        canonical_json(&borrowed, &mut x);
        canonical_json(&as_value, &mut y);
        assert_eq!(String::from_utf8(x).unwrap(), String::from_utf8(y).unwrap());
    }
}
