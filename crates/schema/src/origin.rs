//! Where a record came from: its source position.
//!
//! The origin is what a dead-letter entry points back to, and what a stable
//! event id is derived from when the record carries none, so that replaying the
//! same record writes the same item key (an overwrite, never a duplicate).

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An immutable string shared by reference count: a shard's stream name and
/// id, and a Kinesis record's sequence number, are carried by every record,
/// position and checkpoint made from it; cloning one is a count increment,
/// not an allocation. Serialized as a plain string.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SharedStr(Arc<str>);

impl SharedStr {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        SharedStr(Arc::from(s))
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        SharedStr(Arc::from(s))
    }
}

impl From<&SharedStr> for String {
    fn from(s: &SharedStr) -> String {
        s.as_str().to_owned()
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for SharedStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SharedStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(SharedStr::from)
    }
}

/// The source position of one record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Origin {
    /// A Kinesis user record (a KPL sub-record has a non-zero sub-sequence).
    Kinesis {
        /// Stream name.
        stream: SharedStr,
        /// Shard id, e.g. `shardId-000000000001`.
        shard_id: SharedStr,
        /// Sequence number as Kinesis returns it (up to 56 decimal digits).
        sequence_number: SharedStr,
        /// Sub-sequence number within a KPL aggregate; 0 for plain records.
        sub_sequence_number: u64,
    },
    /// One event of an SQS message (a message may hold a JSON array of events).
    Sqs {
        /// Queue URL or name.
        queue: String,
        /// SQS message id.
        message_id: String,
        /// Index of the event within the message body (0 for a single event).
        index: u32,
    },
}

impl Origin {
    /// A stable event id for a record that carries none: the same source
    /// position always gives the same id. The stream or queue name is left out
    /// on purpose: a stream re-created under another name and replayed from a
    /// fixture must still produce the same keys.
    pub fn derived_event_id(&self) -> String {
        match self {
            Origin::Kinesis {
                shard_id,
                sequence_number,
                sub_sequence_number,
                ..
            } => format!("{shard_id}:{sequence_number}:{sub_sequence_number}"),
            Origin::Sqs {
                message_id, index, ..
            } => format!("sqs:{message_id}:{index}"),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Kinesis {
                stream,
                shard_id,
                sequence_number,
                sub_sequence_number,
            } => write!(
                f,
                "kinesis:{stream}/{shard_id}/{sequence_number}.{sub_sequence_number}"
            ),
            Origin::Sqs {
                queue,
                message_id,
                index,
            } => write!(f, "sqs:{queue}/{message_id}#{index}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        let a = Origin::Kinesis {
            stream: "s".into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: "4959".into(),
            sub_sequence_number: 0,
        };
        let mut b = a.clone();
        assert_eq!(a.derived_event_id(), b.derived_event_id());
        if let Origin::Kinesis {
            sub_sequence_number,
            ..
        } = &mut b
        {
            *sub_sequence_number = 1;
        }
        assert_ne!(a.derived_event_id(), b.derived_event_id());
        let q = Origin::Sqs {
            queue: "q".into(),
            message_id: "m".into(),
            index: 2,
        };
        assert_eq!(q.derived_event_id(), "sqs:m:2");
    }

    /// Shared strings serialize as plain strings: dead-letter files and
    /// checkpoints written before `SharedStr` read back the same.
    #[test]
    fn shared_strings_serialize_as_plain_strings() {
        let a = Origin::Kinesis {
            stream: "s".into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: "4959".into(),
            sub_sequence_number: 1,
        };
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(
            json,
            r#"{"source":"kinesis","stream":"s","shard_id":"shardId-000000000000","sequence_number":"4959","sub_sequence_number":1}"#
        );
        assert_eq!(serde_json::from_str::<Origin>(&json).unwrap(), a);
        let shared = SharedStr::from("x");
        assert!(
            std::ptr::eq(shared.as_str(), shared.clone().as_str()),
            "a clone shares the text"
        );
    }
}
