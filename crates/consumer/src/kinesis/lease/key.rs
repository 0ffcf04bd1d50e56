//! KCL multi-stream lease keys (pure).
//!
//! In multi-stream mode the KCL (2.3+, and 3.x) keys every lease
//! `account:stream:creationEpoch:shardId` (`MultiStreamLease.getLeaseKey`:
//! the serialized `StreamIdentifier` plus `:` plus the shard id) and writes
//! two more attributes, `streamName` (the serialized stream identifier, so
//! named "for legacy reasons") and `shardId`
//! (`DynamoDBMultiStreamLeaseSerializer`). Parent shard ids stay bare shard
//! ids. In single-stream mode the key is the bare shard id.

use std::fmt;

/// A stream as the KCL names it in multi-stream lease keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamIdentifier {
    /// The owning AWS account id (digits).
    pub account: String,
    /// The stream name.
    pub name: String,
    /// The stream's creation time in seconds since the epoch (> 0):
    /// a stream deleted and created again under the same name gets new keys.
    pub creation_epoch: u64,
}

impl StreamIdentifier {
    /// Checks the parts as the KCL's `STREAM_IDENTIFIER_PATTERN`
    /// (`[0-9]+:[^:]+:[0-9]+`, epoch above 0) does.
    pub(crate) fn new(
        account: impl Into<String>,
        name: impl Into<String>,
        creation_epoch: u64,
    ) -> Result<Self, String> {
        let (account, name) = (account.into(), name.into());
        if account.is_empty() || !account.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("account id `{account}` is not all digits"));
        }
        if name.is_empty() || name.contains(':') {
            return Err(format!("stream name `{name}` is empty or contains ':'"));
        }
        if creation_epoch == 0 {
            return Err("creation epoch must be above 0".into());
        }
        Ok(Self {
            account,
            name,
            creation_epoch,
        })
    }

    /// Parses `account:stream:creationEpoch`.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split(':');
        let (account, name, epoch) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !epoch.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Self::new(account, name, epoch.parse().ok()?).ok()
    }

    /// The lease key of `shard_id` of this stream.
    pub(crate) fn lease_key(&self, shard_id: &str) -> String {
        format!("{self}:{shard_id}")
    }
}

/// `account:stream:creationEpoch`, as `StreamIdentifier.serialize()`.
impl fmt::Display for StreamIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.account, self.name, self.creation_epoch)
    }
}

/// Splits a multi-stream lease key into its stream and shard id; `None` for
/// a single-stream key (a bare shard id) or anything else.
pub fn parse_lease_key(key: &str) -> Option<(StreamIdentifier, &str)> {
    let mut cut = key.match_indices(':').map(|(i, _)| i);
    let (_, _, third) = (cut.next()?, cut.next()?, cut.next()?);
    let shard = &key[third + 1..];
    if shard.is_empty() || shard.contains(':') {
        return None;
    }
    Some((StreamIdentifier::parse(&key[..third])?, shard))
}

/// The two lease-key formats a table can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyFormat {
    /// Bare shard ids (`source.stream`; the KCL's single-stream mode).
    SingleStream,
    /// `account:stream:creationEpoch:shardId` (`source.streams`).
    MultiStream,
}

impl KeyFormat {
    /// The format of one lease key.
    pub(crate) fn of(key: &str) -> Self {
        if parse_lease_key(key).is_some() {
            Self::MultiStream
        } else {
            Self::SingleStream
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::SingleStream => "single-stream keys (bare shard ids, `source.stream`)",
            Self::MultiStream => {
                "KCL multi-stream keys (`account:stream:creationEpoch:shardId`, `source.streams`)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let id = StreamIdentifier::new("123456789012", "orders", 1_603_840_000).unwrap();
        assert_eq!(id.to_string(), "123456789012:orders:1603840000");
        let key = id.lease_key("shardId-000000000007");
        assert_eq!(key, "123456789012:orders:1603840000:shardId-000000000007");
        let (back, shard) = parse_lease_key(&key).unwrap();
        assert_eq!((back, shard), (id.clone(), "shardId-000000000007"));
        assert_eq!(StreamIdentifier::parse(&id.to_string()), Some(id));
    }

    #[test]
    fn names_with_dashes_dots_and_underscores_and_long_epochs() {
        // Stream names may hold `-`, `.`, `_`; account ids keep leading zeros.
        let key = "000000000000:click-stream.v2_eu:1764000000:shardId-000000000012";
        let (id, shard) = parse_lease_key(key).unwrap();
        assert_eq!(id.account, "000000000000");
        assert_eq!(id.name, "click-stream.v2_eu");
        assert_eq!(id.creation_epoch, 1_764_000_000);
        assert_eq!(shard, "shardId-000000000012");
        assert_eq!(id.lease_key(shard), key);
        let far = StreamIdentifier::new("1", "s", u64::MAX).unwrap();
        assert_eq!(parse_lease_key(&far.lease_key("x")).unwrap().0, far);
    }

    #[test]
    fn single_stream_and_malformed_keys_are_not_multi_stream() {
        for key in [
            "shardId-000000000001",
            "",
            "orders:shardId-1",
            "acct:orders:1:shardId-1",           // account not digits
            "123:orders:0:shardId-1",            // epoch 0
            "123:orders:-5:shardId-1",           // epoch negative
            "123:orders:1:",                     // no shard id
            "123::1:shardId-1",                  // no stream name
            "123:orders:1:shardId-1:extra",      // too many parts
            "123:orders:99999999999999999999:s", // epoch past u64
        ] {
            assert_eq!(parse_lease_key(key), None, "{key}");
            assert_eq!(KeyFormat::of(key), KeyFormat::SingleStream, "{key}");
        }
        assert_eq!(
            KeyFormat::of("1:s:1:shardId-000000000000"),
            KeyFormat::MultiStream
        );
        assert!(StreamIdentifier::new("12a", "s", 1).is_err());
        assert!(StreamIdentifier::new("12", "a:b", 1).is_err());
        assert!(StreamIdentifier::parse("12:s").is_none());
    }
}
