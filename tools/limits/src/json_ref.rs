//! [`JsonRef`]: parsed JSON whose strings borrow from the bytes it was read
//! from, for the schema crate's wire readers ([`Tree`]).
//!
//! The proxy reads every BatchWriteItem it admits (keys, sizes, digests). As
//! serde_json's `Value`, each attribute of each item cost a String for its
//! name, another for its tag, a map node and a String for its text; as
//! `JsonRef` the texts stay in the request and an object is one vector. The
//! readers in `tidemark_schema::wire` take either through [`Tree`].

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Number, Value};

use tidemark_schema::wire::Tree;

/// A JSON value whose strings and names borrow from the text it was parsed
/// from where they have no escapes. Objects keep their members in the order
/// read; a repeated name keeps its first place and its last value.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonRef<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(Number),
    /// A string.
    String(Cow<'a, str>),
    /// An array.
    Array(Vec<JsonRef<'a>>),
    /// An object's members.
    Object(Vec<(Cow<'a, str>, JsonRef<'a>)>),
}

impl<'a> JsonRef<'a> {
    /// Parses JSON text, borrowing from it.
    pub fn parse(text: &'a [u8]) -> Result<JsonRef<'a>, serde_json::Error> {
        // One UTF-8 check of the whole text, then a parse from `str`: from
        // bytes, serde_json checks each string again as it lends it out.
        match std::str::from_utf8(text) {
            Ok(text) => serde_json::from_str(text),
            // Let the parser report where the bad bytes are.
            Err(_) => serde_json::from_slice(text),
        }
    }

    /// The same value as serde_json's [`Value`] (copies every string).
    pub fn to_value(&self) -> Value {
        match self {
            JsonRef::Null => Value::Null,
            JsonRef::Bool(b) => Value::Bool(*b),
            JsonRef::Number(n) => Value::Number(n.clone()),
            JsonRef::String(s) => Value::String(s.to_string()),
            JsonRef::Array(a) => Value::Array(a.iter().map(JsonRef::to_value).collect()),
            JsonRef::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.to_string(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

impl Tree for JsonRef<'_> {
    fn as_str(&self) -> Option<&str> {
        match self {
            JsonRef::String(s) => Some(s),
            _ => None,
        }
    }
    fn as_bool(&self) -> Option<bool> {
        match self {
            JsonRef::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn as_array(&self) -> Option<&[Self]> {
        match self {
            JsonRef::Array(a) => Some(a),
            _ => None,
        }
    }
    fn members(&self) -> Option<impl ExactSizeIterator<Item = (&str, &Self)>> {
        match self {
            JsonRef::Object(m) => Some(m.iter().map(|(k, v)| (k.as_ref(), v))),
            _ => None,
        }
    }
}

impl fmt::Display for JsonRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

impl Serialize for JsonRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            JsonRef::Null => s.serialize_unit(),
            JsonRef::Bool(b) => s.serialize_bool(*b),
            JsonRef::Number(n) => n.serialize(s),
            JsonRef::String(t) => s.serialize_str(t),
            JsonRef::Array(a) => a.serialize(s),
            JsonRef::Object(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(k.as_ref(), v)?;
                }
                map.end()
            }
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = JsonRef<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(JsonRef::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
        Ok(JsonRef::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Self::Value, E> {
        Ok(JsonRef::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Self::Value, E> {
        Ok(JsonRef::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Self::Value, E> {
        // JSON text has no NaN or infinity, so this is always a number.
        Ok(Number::from_f64(n).map_or(JsonRef::Null, JsonRef::Number))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(JsonRef::String(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(JsonRef::String(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(JsonRef::String(Cow::Owned(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(JsonRef::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members: Vec<(Cow<'de, str>, JsonRef<'de>)> = Vec::new();
        // A member name read as a JsonRef is a string, borrowed where it has
        // no escapes (serde_json lends names out as it lends out strings).
        while let Some(name) = map.next_key::<JsonRef<'de>>()? {
            let JsonRef::String(k) = name else {
                return Err(serde::de::Error::custom("a member name is not a string"));
            };
            let v = map.next_value()?;
            match members.iter_mut().find(|(name, _)| *name == k) {
                Some(slot) => slot.1 = v,
                None => members.push((k, v)),
            }
        }
        Ok(JsonRef::Object(members))
    }
}

impl<'de> Deserialize<'de> for JsonRef<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use tidemark_schema::wire::wire_item_size;

    #[test]
    fn reads_like_value_and_borrows_plain_strings() {
        let text = br#"{"a":[1,-2,3.5,true,null,"x\ny"],"b":{"c":"plain"},"a":{"d":false}}"#;
        let r = JsonRef::parse(text).unwrap();
        let v: Value = serde_json::from_slice(text).unwrap();
        // A repeated name keeps its last value, as serde_json's maps do.
        assert_eq!(r.to_value(), v);
        assert_eq!(r.members().unwrap().len(), 2);
        assert_eq!(r.get("a").unwrap().get("d").unwrap().as_bool(), Some(false));
        let plain = r.get("b").unwrap().get("c").unwrap();
        assert!(matches!(plain, JsonRef::String(Cow::Borrowed("plain"))));
        // Serialized back, it is the same JSON.
        let again: Value = serde_json::from_str(&r.to_string()).unwrap();
        assert_eq!(again, v);
        assert!(JsonRef::parse(b"{\"a\":").is_err());
        assert!(JsonRef::parse(b"{\"a\":\"caf\xe9\"}").is_err());
    }

    /// JSON shaped like DynamoDB attribute values: tag-like names (and a
    /// foreign one), any leaf, nesting; well-formed and malformed mixed.
    fn attr_like() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(Value::from),
            "(\\PC|[\"\\\\\u{0}-\u{1f}é])*".prop_map(Value::from),
            "[A-Za-z0-9+/]{0,6}=?".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("S"),
                        Just("N"),
                        Just("B"),
                        Just("BOOL"),
                        Just("NULL"),
                        Just("SS"),
                        Just("NS"),
                        Just("BS"),
                        Just("L"),
                        Just("M"),
                        Just("a\"b"),
                    ]
                    .prop_map(str::to_owned),
                    inner,
                    0..3,
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The schema's wire readers give a borrowed tree the answers, errors
        /// included, they give serde_json's `Value` for the same text.
        #[test]
        fn wire_item_size_reads_a_borrowed_tree_like_value(
            item in proptest::collection::btree_map("[a-z]{1,3}", attr_like(), 0..5),
        ) {
            let v = Value::Object(item.into_iter().collect());
            let text = v.to_string();
            let borrowed = JsonRef::parse(text.as_bytes()).unwrap();
            prop_assert_eq!(wire_item_size(&borrowed), wire_item_size(&v));
            prop_assert_eq!(borrowed.to_value(), v);
        }
    }
}
