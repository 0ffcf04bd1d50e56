//! Why a record cannot be routed.

use thiserror::Error;

use crate::event::EventError;
use crate::reason::Reason;
use crate::wire::payload::PayloadError;

/// Why a record cannot be routed. [`RouteError::reason`] gives the
/// dead-letter reason; the message names the field or limit.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RouteError {
    /// The record is not a usable event.
    #[error(transparent)]
    Event(#[from] EventError),
    /// The entity id cannot be placed in a key.
    #[error("field `{field}` (entity id) {problem}")]
    BadEntity {
        /// The configured entity field.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// A payload attribute cannot be stored.
    #[error("payload field `{field}` {problem}")]
    BadAttribute {
        /// Path of the attribute in the record.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The item exceeds DynamoDB's item size limit.
    #[error("item is {size} bytes, over DynamoDB's {limit}-byte item limit")]
    ItemTooLarge {
        /// Computed item size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The event's period is past retention, or expires within
    /// `expiry_guard`.
    #[error(
        "event time {timestamp} falls in table {table}, expired or about to (retention {retention_s} s, less schema.expiry_guard)"
    )]
    ExpiredPeriod {
        /// Event time, ISO.
        timestamp: String,
        /// The (expired) table.
        table: String,
        /// Configured retention, seconds.
        retention_s: u64,
    },
    /// The event is too far ahead of now.
    #[error("event time {timestamp} is more than max_future_skew ({skew_s} s) ahead of now {now}")]
    FutureEvent {
        /// Event time, ISO.
        timestamp: String,
        /// Now, ISO.
        now: String,
        /// Configured skew, seconds.
        skew_s: u64,
    },
    /// Adaptive sharding: the splits of the event's table are not known
    /// recently enough to key it. Not a defect of the record: the worker
    /// holds the event until its next refresh of the splits.
    #[error(transparent)]
    SplitsNotLearned(#[from] crate::split::NotLearned),
}

impl RouteError {
    /// True when the record is fine and must be routed again later (after
    /// the next refresh of the splits), never dead-lettered.
    pub fn is_hold(&self) -> bool {
        matches!(self, RouteError::SplitsNotLearned(_))
    }

    /// The dead-letter reason.
    pub fn reason(&self) -> Reason {
        match self {
            RouteError::Event(e) => e.reason(),
            RouteError::BadEntity { .. } | RouteError::BadAttribute { .. } => Reason::InvalidField,
            RouteError::ItemTooLarge { .. } => Reason::ItemTooLarge,
            RouteError::ExpiredPeriod { .. } => Reason::ExpiredPeriod,
            RouteError::FutureEvent { .. } => Reason::FutureEvent,
            // Never dead-lettered by the worker (it holds the event); a tool
            // that routes one event shows the message.
            RouteError::SplitsNotLearned(_) => Reason::TableMissing,
        }
    }
}

impl From<PayloadError> for RouteError {
    fn from(e: PayloadError) -> RouteError {
        RouteError::BadAttribute {
            field: e.field,
            problem: e.problem,
        }
    }
}
