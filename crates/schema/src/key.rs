//! The primary key of one item, as plain strings.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Partition key and sort key values of an item. Two items with equal
/// `ItemKey`s in the same table are the same DynamoDB item.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ItemKey {
    /// Partition (hash) key value.
    pub pk: String,
    /// Sort (range) key value.
    pub sk: String,
}

impl fmt::Display for ItemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}|{}", self.pk, self.sk)
    }
}
