//! Items already encoded as DynamoDB JSON, the form BatchWriteItem sends.
//!
//! The hot path encodes each item once, while routing, into the bytes of its
//! `Item` object (`{"pk":{"S":"..."},...}`). The writer then only copies those
//! bytes into request bodies, and a retry reuses them (a [`Bytes`] clone is a
//! reference count): no attribute map is built, cloned, or serialized again.
//! [`WireItem::encode`] turns an SDK [`Item`] into one (for callers that build
//! maps); [`WireItem::to_item`] decodes one back (tests, verification).

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use serde_json::Value;
use thiserror::Error;

use crate::size::{self, Item};

/// What the wire readers need of a parsed JSON value: serde_json's [`Value`]
/// here, or a tree that borrows its strings from the request (the limits
/// proxy's `JsonRef`, in tools/limits).
pub trait Tree: Sized + fmt::Display {
    /// The text of a string.
    fn as_str(&self) -> Option<&str>;
    /// A boolean's value.
    fn as_bool(&self) -> Option<bool>;
    /// An array's elements.
    fn as_array(&self) -> Option<&[Self]>;
    /// An object's members, each name once (a repeated name keeps its last
    /// value, as serde_json's maps do).
    fn members(&self) -> Option<impl ExactSizeIterator<Item = (&str, &Self)>>;
    /// An object's member by name.
    fn get(&self, name: &str) -> Option<&Self> {
        self.members()?.find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

impl Tree for Value {
    fn as_str(&self) -> Option<&str> {
        Value::as_str(self)
    }
    fn as_bool(&self) -> Option<bool> {
        Value::as_bool(self)
    }
    fn as_array(&self) -> Option<&[Value]> {
        Value::as_array(self).map(Vec::as_slice)
    }
    fn members(&self) -> Option<impl ExactSizeIterator<Item = (&str, &Value)>> {
        Some(self.as_object()?.iter().map(|(k, v)| (k.as_str(), v)))
    }
    fn get(&self, name: &str) -> Option<&Value> {
        self.as_object()?.get(name)
    }
}

/// One item as DynamoDB JSON, with its DynamoDB size.
#[derive(Clone, PartialEq, Eq)]
pub struct WireItem {
    json: Bytes,
    size: usize,
}

/// The bytes are not an item in DynamoDB JSON.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("not a DynamoDB JSON item: {0}")]
pub struct WireError(pub String);

impl WireItem {
    /// An item from its encoded object and its size by DynamoDB's rules. The
    /// caller guarantees both (the router computes them as it encodes).
    pub fn from_parts(json: Vec<u8>, size: usize) -> WireItem {
        // As a boxed slice, `Bytes` takes the buffer as is; a vector with
        // spare capacity would cost it a shared header allocation per item
        // (the shrink is in place).
        WireItem {
            json: Bytes::from(json.into_boxed_slice()),
            size,
        }
    }

    /// Encodes an SDK item.
    pub fn encode(item: &Item) -> WireItem {
        let mut out = Vec::with_capacity(64 * item.len().max(1));
        write_map(&mut out, item);
        WireItem::from_parts(out, size::item_size(item))
    }

    /// The `Item` object's bytes.
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// The item's size by DynamoDB's rules (names plus values).
    pub fn size(&self) -> usize {
        self.size
    }

    /// WCUs one write of the item costs.
    pub fn wcu(&self) -> u64 {
        size::wcu_for_size(self.size)
    }

    /// Decodes the item back into SDK values.
    pub fn to_item(&self) -> Result<Item, WireError> {
        decode_item(&self.json)
    }
}

impl fmt::Debug for WireItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WireItem")
            .field("json", &String::from_utf8_lossy(&self.json))
            .field("size", &self.size)
            .finish()
    }
}

impl From<&Item> for WireItem {
    fn from(item: &Item) -> WireItem {
        WireItem::encode(item)
    }
}

/// Appends `s` as a JSON string (quotes and escapes included), with
/// serde_json's escaping.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    // serde_json escapes exactly `"`, `\\` and control characters; a string
    // with none of them (nearly every key and value) is copied whole. The
    // check has no early exit so that it vectorizes.
    let plain = !s.bytes().fold(false, |esc, b| {
        esc | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if plain {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// Appends `{"name":<value>,...}`.
fn write_map(out: &mut Vec<u8>, m: &HashMap<String, AttributeValue>) {
    write_members(out, m.iter().map(|(k, v)| (k.as_str(), v)), write_value);
}

/// Appends a JSON object of `members`, each value written by `each`.
pub fn write_members<'k, V>(
    out: &mut Vec<u8>,
    members: impl IntoIterator<Item = (&'k str, V)>,
    mut each: impl FnMut(&mut Vec<u8>, V),
) {
    out.push(b'{');
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, k);
        out.push(b':');
        each(out, v);
    }
    out.push(b'}');
}

fn write_list<T>(out: &mut Vec<u8>, tag: &str, xs: &[T], each: impl FnMut(&mut Vec<u8>, &T)) {
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(b"\":");
    write_elements(out, xs, each);
    out.push(b'}');
}

/// Appends a JSON array of `xs`, each written by `each`.
pub fn write_elements<T>(out: &mut Vec<u8>, xs: &[T], mut each: impl FnMut(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, x) in xs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        each(out, x);
    }
    out.push(b']');
}

/// Appends `{"<tag>":"<s>"}`, e.g. `{"S":"text"}`.
pub fn write_tagged_str(out: &mut Vec<u8>, tag: &str, s: &str) {
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(b"\":");
    write_str(out, s);
    out.push(b'}');
}

fn blob(out: &mut Vec<u8>, b: &Blob) {
    write_str(out, &BASE64.encode(b.as_ref()));
}

/// Appends one attribute value in DynamoDB JSON.
pub fn write_value(out: &mut Vec<u8>, v: &AttributeValue) {
    match v {
        AttributeValue::S(s) => write_tagged_str(out, "S", s),
        AttributeValue::N(n) => write_tagged_str(out, "N", n),
        AttributeValue::B(b) => {
            out.extend_from_slice(b"{\"B\":");
            blob(out, b);
            out.push(b'}');
        }
        AttributeValue::Bool(b) => {
            out.extend_from_slice(if *b {
                b"{\"BOOL\":true}"
            } else {
                b"{\"BOOL\":false}"
            });
        }
        AttributeValue::Null(_) => out.extend_from_slice(b"{\"NULL\":true}"),
        AttributeValue::Ss(v) => write_list(out, "SS", v, |o, s| write_str(o, s)),
        AttributeValue::Ns(v) => write_list(out, "NS", v, |o, s| write_str(o, s)),
        AttributeValue::Bs(v) => write_list(out, "BS", v, blob),
        AttributeValue::L(v) => write_list(out, "L", v, write_value),
        AttributeValue::M(m) => {
            out.extend_from_slice(b"{\"M\":");
            write_map(out, m);
            out.push(b'}');
        }
        // A variant added by a future SDK: NULL keeps the JSON valid; the
        // router never produces one.
        _ => out.extend_from_slice(b"{\"NULL\":true}"),
    }
}

/// Decodes an `Item` object of DynamoDB JSON.
pub fn decode_item(json: &[u8]) -> Result<Item, WireError> {
    let v: Value = serde_json::from_slice(json).map_err(|e| WireError(e.to_string()))?;
    decode_map(&v)
}

/// Decodes a JSON object of attribute values.
pub fn decode_map(v: &Value) -> Result<Item, WireError> {
    object(v)?
        .map(|(k, v)| Ok((k.to_owned(), decode_value(v)?)))
        .collect()
}

/// An item's size by DynamoDB's rules, read straight from its wire JSON:
/// the same answer as `size::item_size(&decode_map(v)?)` and the same
/// errors, without building the SDK's maps and strings (the limits proxy
/// sizes every item it admits; a proptest holds the two together).
pub fn wire_item_size<T: Tree>(v: &T) -> Result<usize, WireError> {
    object(v)?.try_fold(0, |sum, (k, v)| Ok(sum + k.len() + wire_value_size(v)?))
}

/// Decodes one attribute value (`{"S":"..."}`, `{"M":{...}}`, ...).
pub fn decode_value(v: &Value) -> Result<AttributeValue, WireError> {
    let (tag, inner) = tagged(v)?;
    let text = || string_of(tag, inner).map(str::to_owned);
    let owned = |set: Vec<&str>| set.into_iter().map(str::to_owned).collect();
    Ok(match tag {
        "S" => AttributeValue::S(text()?),
        "N" => AttributeValue::N(text()?),
        "B" => AttributeValue::B(unblob(string_of(tag, inner)?)?),
        "BOOL" => AttributeValue::Bool(boolean(inner)?),
        "NULL" => AttributeValue::Null(true),
        "SS" => AttributeValue::Ss(owned(strings(inner)?)),
        "NS" => AttributeValue::Ns(owned(strings(inner)?)),
        "BS" => AttributeValue::Bs(
            strings(inner)?
                .into_iter()
                .map(unblob)
                .collect::<Result<_, _>>()?,
        ),
        "L" => AttributeValue::L(
            list(inner)?
                .iter()
                .map(decode_value)
                .collect::<Result<_, _>>()?,
        ),
        "M" => AttributeValue::M(decode_map(inner)?),
        other => return Err(WireError(format!("unknown attribute type {other}"))),
    })
}

/// One attribute value's size (see [`size::value_size`]), checked as
/// [`decode_value`] checks it.
fn wire_value_size<T: Tree>(v: &T) -> Result<usize, WireError> {
    let (tag, inner) = tagged(v)?;
    let blob_len = |s: &str| unblob(s).map(|b| b.as_ref().len());
    Ok(match tag {
        "S" => string_of(tag, inner)?.len(),
        "N" => size::number_size(string_of(tag, inner)?),
        "B" => blob_len(string_of(tag, inner)?)?,
        "BOOL" => boolean(inner).map(|_| 1)?,
        "NULL" => 1,
        "SS" => strings(inner)?.iter().map(|s| s.len()).sum(),
        "NS" => strings(inner)?.into_iter().map(size::number_size).sum(),
        "BS" => strings(inner)?
            .into_iter()
            .map(blob_len)
            .sum::<Result<usize, _>>()?,
        // Containers: 3 bytes, plus 1 per element (see `size::value_size`).
        "L" => list(inner)?
            .iter()
            .try_fold(3, |sum, e| Ok(sum + 1 + wire_value_size(e)?))?,
        "M" => 3 + object(inner)?.len() + wire_item_size(inner)?,
        other => return Err(WireError(format!("unknown attribute type {other}"))),
    })
}

/// An item or M value's members.
fn object<T: Tree>(v: &T) -> Result<impl ExactSizeIterator<Item = (&str, &T)>, WireError> {
    v.members()
        .ok_or_else(|| WireError("an item must be an object".into()))
}

/// An attribute value's one tag and what it holds.
fn tagged<T: Tree>(v: &T) -> Result<(&str, &T), WireError> {
    let mut members = v
        .members()
        .filter(|m| m.len() == 1)
        .ok_or_else(|| WireError(format!("{v} is not a tagged attribute value")))?;
    members
        .next()
        .ok_or_else(|| WireError("empty attribute value".into()))
}

/// The string a scalar tag holds.
fn string_of<'v, T: Tree>(tag: &str, inner: &'v T) -> Result<&'v str, WireError> {
    inner
        .as_str()
        .ok_or_else(|| WireError(format!("{tag} must hold a string")))
}

fn boolean<T: Tree>(inner: &T) -> Result<bool, WireError> {
    inner
        .as_bool()
        .ok_or_else(|| WireError("BOOL must hold a boolean".into()))
}

fn list<T: Tree>(inner: &T) -> Result<&[T], WireError> {
    inner
        .as_array()
        .ok_or_else(|| WireError("L must hold an array".into()))
}

/// A set's members (SS, NS, BS hold strings).
fn strings<T: Tree>(v: &T) -> Result<Vec<&str>, WireError> {
    v.as_array()
        .ok_or_else(|| WireError("a set must be an array".into()))?
        .iter()
        .map(|s| {
            s.as_str()
                .ok_or_else(|| WireError("a set member must be a string".into()))
        })
        .collect()
}

fn unblob(s: &str) -> Result<Blob, WireError> {
    BASE64
        .decode(s)
        .map(Blob::new)
        .map_err(|e| WireError(format!("binary value: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// Attribute-like JSON: mostly well-formed values of every type, with
    /// malformed ones mixed in (wrong inner types, unknown tags, bad base64,
    /// two tags).
    fn wire_attr() -> impl Strategy<Value = Value> {
        use serde_json::json;
        let leaf = prop_oneof![
            any::<String>().prop_map(|s| json!({ "S": s })),
            "-?[0-9]{1,6}(\\.[0-9]{1,4})?(e[0-9])?".prop_map(|n| json!({ "N": n })),
            proptest::collection::vec(any::<u8>(), 0..9)
                .prop_map(|b| json!({ "B": BASE64.encode(b) })),
            "[A-Za-z0-9+/=]{0,7}".prop_map(|s| json!({ "B": s })),
            any::<bool>().prop_map(|b| json!({ "BOOL": b })),
            Just(json!({ "NULL": true })),
            proptest::collection::vec(".{0,4}", 0..4).prop_map(|v| json!({ "SS": v })),
            proptest::collection::vec("[0-9]{1,4}", 0..4).prop_map(|v| json!({ "NS": v })),
            proptest::collection::vec("[A-Za-z0-9+/]{0,3}=?", 0..3)
                .prop_map(|v| json!({ "BS": v })),
            prop_oneof![
                Just(json!(1)),
                Just(json!("x")),
                Just(json!({ "S": 1 })),
                Just(json!({ "N": true })),
                Just(json!({ "BOOL": "yes" })),
                Just(json!({ "SS": "a" })),
                Just(json!({ "NS": [1] })),
                Just(json!({ "Q": "x" })),
                Just(json!({})),
                Just(json!({ "S": "a", "N": "1" })),
                Just(json!({ "L": {} })),
                Just(json!({ "M": [] })),
            ],
        ];
        leaf.prop_recursive(3, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(|v| json!({ "L": v })),
                proptest::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                    .prop_map(|m| json!({ "M": m })),
            ]
        })
    }

    proptest! {
        /// Sizing the wire JSON directly agrees with decoding it and sizing
        /// the SDK item: same size, same error.
        #[test]
        fn wire_item_size_matches_decoded_size(
            item in proptest::collection::btree_map("[a-z]{1,3}", wire_attr(), 0..5),
            not_an_object in any::<bool>(),
        ) {
            let v = if not_an_object {
                Value::Array(item.into_values().collect())
            } else {
                Value::Object(item.into_iter().collect())
            };
            let want = decode_map(&v).map(|i| size::item_size(&i));
            // The limits proxy's borrowed tree (tools/limits, `JsonRef`) is
            // held to these answers by its own proptest.
            prop_assert_eq!(wire_item_size(&v), want);
        }

        /// The copy-whole path and serde_json's escaping give the same bytes.
        #[test]
        fn write_str_matches_serde_json(s in "(\\PC|[\"\\\\\u{0}-\u{1f}\u{7f}é€😀])*") {
            let mut out = b"x".to_vec();
            write_str(&mut out, &s);
            let want = serde_json::to_vec(&s).unwrap();
            prop_assert_eq!(&out[1..], want.as_slice());
        }
    }

    fn sample() -> Item {
        let mut m = HashMap::new();
        m.insert("a\"b".to_owned(), AttributeValue::S("x\ny\u{1}é".into()));
        m.insert("n".to_owned(), AttributeValue::N("-12.50".into()));
        m.insert("t".to_owned(), AttributeValue::Bool(false));
        m.insert("z".to_owned(), AttributeValue::Null(true));
        m.insert(
            "bin".to_owned(),
            AttributeValue::B(Blob::new(vec![0, 1, 255])),
        );
        m.insert(
            "ss".to_owned(),
            AttributeValue::Ss(vec!["p".into(), "q".into()]),
        );
        m.insert("ns".to_owned(), AttributeValue::Ns(vec!["1".into()]));
        m.insert(
            "bs".to_owned(),
            AttributeValue::Bs(vec![Blob::new(b"hi".to_vec())]),
        );
        let mut inner = HashMap::new();
        inner.insert(
            "k".to_owned(),
            AttributeValue::L(vec![AttributeValue::Bool(true)]),
        );
        m.insert("m".to_owned(), AttributeValue::M(inner));
        m
    }

    #[test]
    fn encode_then_decode_gives_the_same_item_and_size() {
        let item = sample();
        let w = WireItem::encode(&item);
        assert_eq!(w.to_item().unwrap(), item);
        assert_eq!(w.size(), size::item_size(&item));
        // Valid JSON that serde_json reads as an object.
        let v: Value = serde_json::from_slice(w.json()).unwrap();
        assert_eq!(v["n"]["N"], "-12.50");
        assert_eq!(v["a\"b"]["S"], "x\ny\u{1}é");
    }

    #[test]
    fn decode_refuses_what_is_not_an_item() {
        assert!(decode_item(b"[]").is_err());
        assert!(decode_item(br#"{"a":{"S":1}}"#).is_err());
        assert!(decode_item(br#"{"a":{"X":"1"}}"#).is_err());
        assert!(decode_item(br#"{"a":{"S":"1","N":"2"}}"#).is_err());
        assert!(decode_item(b"{").is_err());
    }
}
