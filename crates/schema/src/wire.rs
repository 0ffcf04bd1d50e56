//! Items already encoded as DynamoDB JSON, the form BatchWriteItem sends.
//!
//! The hot path encodes each item once, while routing, into the bytes of its
//! `Item` object (`{"pk":{"S":"..."},...}`). The writer then only copies those
//! bytes into request bodies, and a retry reuses them (a [`Bytes`] clone is a
//! reference count): no attribute map is built, cloned, or serialized again.
//! [`WireItem::encode`] turns an SDK [`Item`] into one (for callers that build
//! maps); [`WireItem::to_item`] decodes one back (tests, verification).
//!
//! Files: `encode` (SDK values to DynamoDB JSON), `decode` (back, and sizing
//! from the JSON), `payload` (a record's JSON text to DynamoDB JSON, sized as
//! it is written: the router's item encoder). None imports this file.

use std::fmt;

use bytes::Bytes;

use crate::size::{self, Item};

mod decode;
mod encode;
pub(crate) mod payload;

pub(crate) use decode::decode_item;
pub use decode::{Tree, WireError, decode_map, decode_value, wire_item_size};
pub use encode::{write_elements, write_members, write_str};
pub(crate) use encode::{write_map, write_tagged_str};

/// One item as DynamoDB JSON, with its DynamoDB size.
#[derive(Clone, PartialEq, Eq)]
pub struct WireItem {
    json: Bytes,
    size: usize,
}

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashMap;

    use aws_sdk_dynamodb::primitives::Blob;
    use aws_sdk_dynamodb::types::AttributeValue;
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use serde_json::Value;

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
