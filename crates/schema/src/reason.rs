//! Why a record was dead-lettered: one closed list shared by every crate, so
//! metrics, dead-letter entries and tests all speak the same names.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The reason a record could not be stored. Serialized in snake_case; the
/// names are part of the dead-letter format and of metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The record's bytes are not valid JSON (or not UTF-8).
    InvalidJson,
    /// A configured field (entity id, timestamp) is absent.
    MissingField,
    /// A field has the wrong JSON type, or the entity id is empty.
    InvalidField,
    /// The timestamp cannot be parsed or is out of range.
    BadTimestamp,
    /// The item would exceed DynamoDB's 400 KB limit.
    ItemTooLarge,
    /// The event's period is past retention: its table is (to be) deleted.
    ExpiredPeriod,
    /// The event is further ahead of now than `max_future_skew` allows.
    FutureEvent,
    /// A KPL aggregate whose MD5 does not match, or that cannot be decoded.
    CorruptAggregate,
    /// An SQS message body that is not an event, an array, or an SNS envelope.
    UndecodableMessage,
    /// DynamoDB refused the item (ValidationException), with its message.
    DynamodbRejected,
    /// The target table does not exist and could not be created.
    TableMissing,
    /// A late event (its period past the late-arrival grace) whose table
    /// already had its share of the writer's in-flight bound taken by late
    /// events, or that waited longer than `writer.late_max_wait`: set aside
    /// so that late data never stalls the worker.
    LateBacklog,
    /// A record (a Kinesis record, an SQS body) holding more events than
    /// [`MAX_EVENTS_PER_RECORD`](crate::framing::MAX_EVENTS_PER_RECORD), most likely a decompression bomb: it is
    /// dead-lettered whole, as one entry, instead of event by event.
    TooManyEvents,
    /// An oversized event (`schema.oversize = "s3"`) whose payload could
    /// not be written to S3 within `oversize_s3.max_retry_time`, or that
    /// S3 refused: its pointer item was not written.
    PayloadStoreFailed,
}

impl Reason {
    /// Every reason, for metrics pre-registration and exhaustive tests.
    pub const ALL: [Reason; 14] = [
        Reason::InvalidJson,
        Reason::MissingField,
        Reason::InvalidField,
        Reason::BadTimestamp,
        Reason::ItemTooLarge,
        Reason::ExpiredPeriod,
        Reason::FutureEvent,
        Reason::CorruptAggregate,
        Reason::UndecodableMessage,
        Reason::DynamodbRejected,
        Reason::TableMissing,
        Reason::LateBacklog,
        Reason::TooManyEvents,
        Reason::PayloadStoreFailed,
    ];

    /// The stable snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidJson => "invalid_json",
            Reason::MissingField => "missing_field",
            Reason::InvalidField => "invalid_field",
            Reason::BadTimestamp => "bad_timestamp",
            Reason::ItemTooLarge => "item_too_large",
            Reason::ExpiredPeriod => "expired_period",
            Reason::FutureEvent => "future_event",
            Reason::CorruptAggregate => "corrupt_aggregate",
            Reason::UndecodableMessage => "undecodable_message",
            Reason::DynamodbRejected => "dynamodb_rejected",
            Reason::TableMissing => "table_missing",
            Reason::LateBacklog => "late_backlog",
            Reason::TooManyEvents => "too_many_events",
            Reason::PayloadStoreFailed => "payload_store_failed",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_serde() {
        for r in Reason::ALL {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
        }
    }
}
