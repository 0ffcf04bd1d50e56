//! The primary key of one item, as plain strings.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Partition key and sort key values of an item. Two items with equal
/// `ItemKey`s in the same table are the same DynamoDB item.
///
/// Both values live in one buffer: every routed item carries its key to
/// the writer (to coalesce and to match unprocessed items), and one
/// allocation per item instead of two measurably cuts the write path's CPU.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "KeyParts", from = "KeyParts")]
pub struct ItemKey {
    /// The partition key value, then the sort key value.
    text: String,
    /// Where the sort key value starts in `text`.
    pk_len: usize,
}

impl ItemKey {
    /// A key from its two values.
    pub fn new(pk: &str, sk: &str) -> ItemKey {
        let mut text = String::with_capacity(pk.len() + sk.len());
        text.push_str(pk);
        text.push_str(sk);
        ItemKey {
            text,
            pk_len: pk.len(),
        }
    }

    /// A key written in place: `pk` and then `sk` append their value to the
    /// buffer (sized for `capacity` bytes in all).
    pub fn build(
        capacity: usize,
        pk: impl FnOnce(&mut String),
        sk: impl FnOnce(&mut String),
    ) -> ItemKey {
        let mut text = String::with_capacity(capacity);
        pk(&mut text);
        let pk_len = text.len();
        sk(&mut text);
        ItemKey { text, pk_len }
    }

    /// Partition (hash) key value.
    pub fn pk(&self) -> &str {
        self.text.get(..self.pk_len).unwrap_or_default()
    }

    /// Sort (range) key value.
    pub fn sk(&self) -> &str {
        self.text.get(self.pk_len..).unwrap_or_default()
    }
}

impl fmt::Debug for ItemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemKey")
            .field("pk", &self.pk())
            .field("sk", &self.sk())
            .finish()
    }
}

impl fmt::Display for ItemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}|{}", self.pk(), self.sk())
    }
}

/// By partition key, then sort key.
impl Ord for ItemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.pk(), self.sk()).cmp(&(other.pk(), other.sk()))
    }
}

impl PartialOrd for ItemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The serialized form: `{"pk": ..., "sk": ...}`.
#[derive(Serialize, Deserialize)]
struct KeyParts {
    pk: String,
    sk: String,
}

impl From<ItemKey> for KeyParts {
    fn from(k: ItemKey) -> KeyParts {
        KeyParts {
            pk: k.pk().to_owned(),
            sk: k.sk().to_owned(),
        }
    }
}

impl From<KeyParts> for ItemKey {
    fn from(p: KeyParts) -> ItemKey {
        ItemKey::new(&p.pk, &p.sk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buffer's split is part of the key: moving bytes between the
    /// values makes another key; order and the serialized form are by the
    /// two values.
    #[test]
    fn keys_compare_by_their_two_values() {
        let (a, b) = (ItemKey::new("ab", "c"), ItemKey::new("a", "bc"));
        assert_ne!(a, b);
        assert_eq!((a.pk(), a.sk()), ("ab", "c"));
        assert!(b < a, "'a' sorts before 'ab'");
        assert_eq!(a, ItemKey::build(3, |t| t.push_str("ab"), |t| t.push('c')));
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(json, r#"{"pk":"a","sk":"bc"}"#);
        assert_eq!(serde_json::from_str::<ItemKey>(&json).unwrap(), b);
    }
}
