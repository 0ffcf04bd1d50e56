//! One lease item in the KCL 2.x format, and its checkpoint.
//!
//! Item format (one item per shard, hash key `leaseKey` = shard id, or
//! `account:stream:creationEpoch:shardId` with `streamName` and `shardId`
//! attributes in multi-stream mode, see [`super::key`]):
//! `leaseOwner` (S, absent when free), `leaseCounter` (N, bumped by every
//! write and used as the fencing token of all conditional writes),
//! `checkpoint` (S: a sequence number or `TRIM_HORIZON` / `LATEST` /
//! `AT_TIMESTAMP` / `SHARD_END`), `checkpointSubSequenceNumber` (N),
//! `ownerSwitchesSinceCheckpoint` (N), `parentShardId` (SS),
//! `childShardIds` (SS), `startingHashKey` / `endingHashKey` (S).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::key::parse_lease_key;
use crate::keyschema::{KeyAttr, KeySpec};
use crate::kinesis::checkpoint::Position;

/// `checkpoint` value of a shard read to its end.
pub(crate) const SHARD_END: &str = "SHARD_END";
/// `checkpoint` value: start at the oldest record.
pub(crate) const TRIM_HORIZON: &str = "TRIM_HORIZON";
/// `checkpoint` value: start at the newest record.
pub(crate) const LATEST: &str = "LATEST";
/// `checkpoint` value: start at the configured timestamp.
pub(crate) const AT_TIMESTAMP: &str = "AT_TIMESTAMP";

/// A lease's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkpoint {
    /// Not read yet; start at the oldest record.
    TrimHorizon,
    /// Not read yet; start at the newest record.
    Latest,
    /// Not read yet; start at the configured timestamp.
    AtTimestamp,
    /// Read to its end: children may be read.
    ShardEnd,
    /// Every user record up to and including this position is handled.
    At(Position),
}

impl Checkpoint {
    fn from_parts(s: &str, sub: u64) -> Self {
        match s {
            TRIM_HORIZON => Self::TrimHorizon,
            LATEST => Self::Latest,
            AT_TIMESTAMP => Self::AtTimestamp,
            SHARD_END => Self::ShardEnd,
            seq => Self::At(Position::new(seq, sub)),
        }
    }

    pub(crate) fn to_parts(&self) -> (&str, u64) {
        match self {
            Self::TrimHorizon => (TRIM_HORIZON, 0),
            Self::Latest => (LATEST, 0),
            Self::AtTimestamp => (AT_TIMESTAMP, 0),
            Self::ShardEnd => (SHARD_END, 0),
            Self::At(p) => (p.sequence.as_str(), p.sub_sequence),
        }
    }
}

/// One lease item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Shard id (`leaseKey`).
    pub key: String,
    /// Current owner; `None` when free.
    pub owner: Option<String>,
    /// Fencing counter.
    pub counter: u64,
    /// Checkpoint.
    pub checkpoint: Checkpoint,
    /// Owner changes since the last checkpoint write.
    pub owner_switches_since_checkpoint: u64,
    /// Parent shard ids (two after a merge).
    pub parents: Vec<String>,
    /// Child shard ids, written at shard end.
    pub children: Vec<String>,
    /// (startingHashKey, endingHashKey).
    pub hash_range: Option<(String, String)>,
}

impl Lease {
    /// A new, free lease.
    pub fn new(key: impl Into<String>, checkpoint: Checkpoint, parents: Vec<String>) -> Self {
        Self {
            key: key.into(),
            owner: None,
            counter: 0,
            checkpoint,
            owner_switches_since_checkpoint: 0,
            parents,
            children: Vec::new(),
            hash_range: None,
        }
    }

    /// True when the shard was read to its end.
    pub fn is_finished(&self) -> bool {
        self.checkpoint == Checkpoint::ShardEnd
    }

    /// The DynamoDB item.
    pub fn to_item(&self) -> HashMap<String, AttributeValue> {
        let mut item = HashMap::new();
        item.insert("leaseKey".into(), AttributeValue::S(self.key.clone()));
        if let Some(o) = &self.owner {
            item.insert("leaseOwner".into(), AttributeValue::S(o.clone()));
        }
        item.insert("leaseCounter".into(), n(self.counter));
        let (cp, sub) = self.checkpoint.to_parts();
        item.insert("checkpoint".into(), AttributeValue::S(cp.to_string()));
        item.insert("checkpointSubSequenceNumber".into(), n(sub));
        item.insert(
            "ownerSwitchesSinceCheckpoint".into(),
            n(self.owner_switches_since_checkpoint),
        );
        // DynamoDB rejects empty sets: absent means none.
        if !self.parents.is_empty() {
            item.insert(
                "parentShardId".into(),
                AttributeValue::Ss(self.parents.clone()),
            );
        }
        if !self.children.is_empty() {
            item.insert(
                "childShardIds".into(),
                AttributeValue::Ss(self.children.clone()),
            );
        }
        if let Some((start, end)) = &self.hash_range {
            item.insert("startingHashKey".into(), AttributeValue::S(start.clone()));
            item.insert("endingHashKey".into(), AttributeValue::S(end.clone()));
        }
        // A KCL multi-stream lease also names its stream and shard.
        if let Some((stream, shard)) = parse_lease_key(&self.key) {
            item.insert("streamName".into(), AttributeValue::S(stream.to_string()));
            item.insert("shardId".into(), AttributeValue::S(shard.to_string()));
        }
        item
    }

    /// Parses an item; `None` names the first missing or malformed attribute.
    pub(crate) fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Self, String> {
        let s = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
        let num = |k: &str| -> Result<u64, String> {
            match item.get(k) {
                None => Ok(0),
                Some(v) => v
                    .as_n()
                    .ok()
                    .and_then(|x| x.parse().ok())
                    .ok_or_else(|| format!("{k} is not a number")),
            }
        };
        let set = |k: &str| -> Vec<String> {
            match item.get(k) {
                Some(AttributeValue::Ss(v)) => v.clone(),
                // Some writers store a single parent as a plain string.
                Some(AttributeValue::S(v)) => vec![v.clone()],
                _ => Vec::new(),
            }
        };
        let key = s("leaseKey").ok_or("leaseKey missing or not a string")?;
        let checkpoint = s("checkpoint").unwrap_or_else(|| TRIM_HORIZON.to_string());
        Ok(Self {
            key,
            owner: s("leaseOwner"),
            counter: num("leaseCounter")?,
            checkpoint: Checkpoint::from_parts(&checkpoint, num("checkpointSubSequenceNumber")?),
            owner_switches_since_checkpoint: num("ownerSwitchesSinceCheckpoint")?,
            parents: set("parentShardId"),
            children: set("childShardIds"),
            hash_range: s("startingHashKey").zip(s("endingHashKey")),
        })
    }
}

/// The key schema of a table in the KCL lease format.
pub(crate) fn lease_key_spec() -> KeySpec {
    KeySpec::hash_only(KeyAttr::string("leaseKey"))
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinesis::lease::key::StreamIdentifier;

    #[test]
    fn items_carry_the_kcl_multi_stream_attributes() {
        let id = StreamIdentifier::new("123456789012", "orders", 5).unwrap();
        let lease = Lease::new(
            id.lease_key("shardId-000000000002"),
            Checkpoint::TrimHorizon,
            vec!["shardId-000000000000".into()],
        );
        let item = lease.to_item();
        assert_eq!(item["streamName"].as_s().unwrap(), "123456789012:orders:5");
        assert_eq!(item["shardId"].as_s().unwrap(), "shardId-000000000002");
        assert_eq!(
            item["parentShardId"].as_ss().unwrap(),
            &["shardId-000000000000".to_string()],
            "parents stay bare shard ids, as the KCL writes them"
        );
        let single = Lease::new("shardId-000000000002", Checkpoint::TrimHorizon, vec![]);
        assert!(!single.to_item().contains_key("streamName"));
    }
}
