//! A record's JSON kept as text: the one parse of a record, its members
//! as raw values ([`serde_json::value::RawValue`]) and the objects opened on
//! the way. Payload numbers therefore reach DynamoDB with exactly the digits
//! the producer wrote, which an `f64` round trip cannot promise past 17
//! digits. Imports no other module of the crate.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON value kept as text, or an object opened up because a configured
/// field was taken out of it.
#[derive(Debug, Clone)]
pub(crate) enum Node<'a> {
    /// Untouched JSON text.
    Raw(&'a RawValue),
    /// An object, member by member, in record order.
    Object(Vec<(Name<'a>, Node<'a>)>),
}

/// A member name: borrowed from the record unless it had escapes (one
/// allocation less per payload field).
pub(crate) type Name<'a> = Cow<'a, str>;

/// A member name as read: borrowed where the text allows.
pub(crate) struct NameSeed<'a>(pub(crate) Name<'a>);

impl<'de> Deserialize<'de> for NameSeed<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NameSeed<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(NameSeed(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(NameSeed(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(NameSeed(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The JSON type of a raw value, from its first byte. JSON whitespace is
/// ASCII, so raw values are trimmed bytewise (`trim_ascii`), not by
/// `str::trim`'s Unicode scan: that cost ~1% of routing, once per member.
pub(crate) fn json_kind(raw: &RawValue) -> &'static str {
    match raw.get().trim_ascii_start().as_bytes().first() {
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

/// The kind of a top-level JSON document, for the not-an-object error.
pub(crate) fn document_kind(data: &[u8]) -> &'static str {
    match data.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

/// The record parse with the configured fields set aside as they are met,
/// so extraction need not search the members and shift them out after.
/// Names in the order entity, timestamp, event id; `None` is not set aside.
/// As with removing a member, a repeated name's last value wins and the
/// earlier ones are dropped.
pub(crate) struct Split<'e>(pub(crate) [Option<&'e str>; 3]);

/// What the parse set aside for one configured field.
#[derive(Clone, Copy)]
pub(crate) enum Slot<'a> {
    /// Set aside, and the record had it.
    Found(&'a RawValue),
    /// Set aside, and the record did not have it.
    Absent,
    /// Not set aside: look among the members.
    NotSplit,
}

/// An object's members, and what the parse set aside.
pub(crate) type SplitObject<'a> = (Vec<(Name<'a>, Node<'a>)>, [Slot<'a>; 3]);

impl<'de> DeserializeSeed<'de> for Split<'_> {
    type Value = SplitObject<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct V<'e>([Option<&'e str>; 3]);
        impl<'de> Visitor<'de> for V<'_> {
            type Value = SplitObject<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                let mut slots = self.0.map(|n| {
                    if n.is_some() {
                        Slot::Absent
                    } else {
                        Slot::NotSplit
                    }
                });
                while let Some(k) = map.next_key::<NameSeed<'de>>()? {
                    let v: &'de RawValue = map.next_value()?;
                    match self.0.iter().position(|n| *n == Some(k.0.as_ref())) {
                        Some(i) => slots[i] = Slot::Found(v),
                        None => members.push((k.0, Node::Raw(v))),
                    }
                }
                Ok((members, slots))
            }
        }
        d.deserialize_map(V(self.0))
    }
}

/// The members of a JSON object, in record order (nothing set aside).
pub(crate) fn open_object(raw: &RawValue) -> Result<Vec<(Name<'_>, Node<'_>)>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let (members, _) = Split([None; 3]).deserialize(&mut de)?;
    de.end()?;
    Ok(members)
}

/// A JSON string's contents: borrowed from the record when it has no
/// escapes (the usual id or timestamp), decoded otherwise.
pub(crate) fn string_text(raw: &RawValue) -> Result<Cow<'_, str>, serde_json::Error> {
    let text = raw.get().trim_ascii();
    // The parser already checked the string, so quotes and no backslash mean
    // its contents are the text between them.
    match text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|inner| !inner.contains('\\'))
    {
        Some(inner) => Ok(Cow::Borrowed(inner)),
        None => serde_json::from_str::<String>(text).map(Cow::Owned),
    }
}
