//! DynamoDB's wire JSON (`{"S": "..."}`, `{"N": "..."}`, ...) as the proxy sees it.
//!
//! Items are converted to the SDK's `AttributeValue` so their size comes from
//! `tidemark_schema::size`, the same code the writer uses: the proxy and the
//! writer can never disagree on what an item costs.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

// Decoding is the schema crate's (the writer's own items decode the same
// way); the proxy's names for it are kept.
pub use tidemark_schema::wire::{
    WireError, decode_map as to_item, decode_value as to_attribute_value,
};

/// Size of a wire item by DynamoDB's rules (see `tidemark_schema::size`).
pub fn wire_item_size(v: &Value) -> Result<usize, WireError> {
    Ok(tidemark_schema::size::item_size(&to_item(v)?))
}

/// The scalar of a key attribute as bytes: what decides the partition and
/// what makes two keys equal. The type tag is part of it (`S "1"` and
/// `N "1"` are different keys).
pub fn key_bytes(v: &Value) -> Option<Vec<u8>> {
    let obj = v.as_object()?;
    let (tag, inner) = obj.iter().next()?;
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
pub fn primary_key(item: &Map<String, Value>, hash: &str, range: Option<&str>) -> Option<String> {
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
pub fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                // Serializing a string cannot fail.
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push(':');
                if let Some(inner) = m.get(*k) {
                    canonical_json(inner, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(e, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// SHA-256 (hex) of the canonical JSON of an item. Python computes the same
/// with `hashlib.sha256(json.dumps(item, sort_keys=True,
/// separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()`.
pub fn item_digest(v: &Value) -> String {
    let mut s = String::new();
    canonical_json(v, &mut s);
    let d = Sha256::digest(s.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_smithy_types::Blob;
    use serde_json::json;
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
        let k = |v: &Value| primary_key(v.as_object().unwrap(), "pk", Some("sk"));
        assert_ne!(k(&a), k(&b));
        assert_eq!(k(&a), k(&c));
        assert_eq!(primary_key(a.as_object().unwrap(), "missing", None), None);
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
        let mut s = String::new();
        canonical_json(&a, &mut s);
        assert_eq!(
            s,
            r#"{"a":{"S":"1"},"b":{"M":{"x":{"N":"1"},"y":{"N":"2"}}}}"#
        );
    }
}
