//! DynamoDB JSON back to SDK values, and an item's size read straight from
//! its JSON (for any parsed [`Tree`]).

use std::fmt;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
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

/// The bytes are not an item in DynamoDB JSON.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("not a DynamoDB JSON item: {0}")]
pub struct WireError(pub String);

/// Decodes an `Item` object of DynamoDB JSON.
pub(crate) fn decode_item(json: &[u8]) -> Result<Item, WireError> {
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
