//! Why a record is not an event, and why an `[event]` table cannot be used.

use thiserror::Error;

use crate::reason::Reason;

/// Why a record is not a valid event. Every variant names the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EventError {
    /// The bytes are not UTF-8 JSON.
    #[error("record is not valid JSON: {0}")]
    InvalidJson(String),
    /// The record is JSON but not an object.
    #[error("record is a JSON {0}, expected an object")]
    NotAnObject(&'static str),
    /// A required field is absent (or a path crosses a non-object).
    #[error("field `{field}` is missing")]
    Missing {
        /// The configured field name or path.
        field: String,
    },
    /// A field has the wrong JSON type.
    #[error("field `{field}` is a JSON {found}, expected {expected}")]
    WrongType {
        /// The configured field name or path.
        field: String,
        /// What the field must be.
        expected: &'static str,
        /// What it is.
        found: &'static str,
    },
    /// The entity id is the empty string.
    #[error("field `{field}` (entity id) is empty")]
    EmptyEntityId {
        /// The configured field name or path.
        field: String,
    },
    /// A payload field cannot be coerced to its configured type.
    #[error("field `{field}` {problem} (`types` coerces it)")]
    Coercion {
        /// The field, by its name after renaming.
        field: String,
        /// What the value is and why it does not convert.
        problem: String,
    },
    /// The timestamp cannot be read, or is outside 1900-01-01..9999-01-01.
    #[error("field `{field}` has an unusable timestamp {value:?}: {why}")]
    BadTimestamp {
        /// The configured field name or path.
        field: String,
        /// The raw value, shortened to 64 bytes.
        value: String,
        /// What is wrong with it.
        why: String,
    },
}

impl EventError {
    /// The dead-letter reason for this error.
    pub fn reason(&self) -> Reason {
        match self {
            EventError::InvalidJson(_) | EventError::NotAnObject(_) => Reason::InvalidJson,
            EventError::Missing { .. } => Reason::MissingField,
            EventError::WrongType { .. }
            | EventError::EmptyEntityId { .. }
            | EventError::Coercion { .. } => Reason::InvalidField,
            EventError::BadTimestamp { .. } => Reason::BadTimestamp,
        }
    }
}

/// The configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid event config: `{field}` {problem}")]
pub struct EventConfigError {
    /// The offending config key.
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub problem: String,
}
