//! Dead letters: every record that cannot be stored, with its source position,
//! reason, error text, raw payload (base64) and time.
//!
//! Guarantees:
//! - A record's source position is acknowledged only after its dead-letter
//!   entry is durable: in the configured destination (an SQS queue, a
//!   DynamoDB table, or a JSON-lines file), or else in the local fallback file.
//! - Every entry fits its destination: the error text is capped at
//!   `MAX_ERROR_TEXT` (2 KiB), and the whole entry is sized against the
//!   destination's limit (SQS: 256 KiB per message and per batch; DynamoDB:
//!   400 KB per item) before it is sent, by truncating the payload (its full
//!   size and SHA-256 are kept).
//! - A slow or failing destination is waited for, never given up: a
//!   transient failure (throttling, a timeout, a 5xx, no connection) is
//!   retried with capped back-off until it answers, with `CONCURRENCY`
//!   batches in flight. The queue is bounded by bytes (`QUEUE_BYTES`):
//!   while it is full the pipeline waits, and so do the sources.
//! - Only an entry the destination refuses for good (access denied, a
//!   missing queue or table, a refused message) goes to the fallback file,
//!   and only when `fallback_path` is configured (it must be on durable
//!   storage: its records are acknowledged); without one such a refusal is
//!   fatal (the worker stops; the records stay unacknowledged).
//! - On a FIFO queue the deduplication id is a hash of the source position
//!   and the reason: two different records with the same bytes are both kept.
//!
//! One file per part: [`DeadLetter`] (the entry, `entry.rs`); the
//! destinations behind the [`DeadLetterSink`] trait, each sized to its
//! limits and telling a transient failure from a refusal for good
//! (`sqs.rs`, `dynamodb.rs`, `file.rs`); `DeadLetters`, the bounded queue
//! and its task with retries, concurrency, splitting and the fallback file
//! (`delivery.rs`).

mod delivery;
mod dynamodb;
mod entry;
mod file;
mod sqs;

use std::path::PathBuf;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub(crate) use delivery::DeadLetters;
pub use dynamodb::DynamoDbSink;
pub(crate) use dynamodb::check_dead_letter_table;
pub use entry::DeadLetter;
pub(crate) use file::FileSink;
pub use sqs::SqsSink;

/// Where dead letters go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DeadLetterConfig {
    /// An SQS queue (standard or FIFO); one message per entry.
    Sqs {
        /// Queue URL.
        queue_url: String,
        /// Local JSON-lines file for entries the queue refuses for good
        /// (access denied, a deleted queue), so the shard moves on: their
        /// records are acknowledged once the line is written, so it must be
        /// on durable storage (an EFS or EBS mount), never a container's
        /// ephemeral disk. Unset (the default): such a refusal stops the
        /// worker, its records unacknowledged. A slow or failing queue is
        /// never a refusal: it is retried until it answers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback_path: Option<PathBuf>,
    },
    /// A DynamoDB table with string hash key `pk` (source position) and string
    /// range key `sk` (time); `tidemark tables ensure` creates it.
    Dynamodb {
        /// Table name.
        table: String,
        /// Local JSON-lines file for entries the table refuses for good,
        /// as for `kind = "sqs"`: on durable storage only; unset (the
        /// default), such a refusal stops the worker.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback_path: Option<PathBuf>,
    },
    /// A local JSON-lines file, appended and fsynced per batch.
    File {
        /// File path.
        path: PathBuf,
    },
}

impl DeadLetterConfig {
    /// The fallback file, when one is configured (a file destination that
    /// fails has no better place to go).
    pub(crate) fn fallback(&self) -> Option<PathBuf> {
        match self {
            DeadLetterConfig::Sqs { fallback_path, .. }
            | DeadLetterConfig::Dynamodb { fallback_path, .. } => fallback_path.clone(),
            DeadLetterConfig::File { .. } => None,
        }
    }
}

/// Errors writing dead letters.
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    /// The destination refused or could not be reached.
    #[error("dead-letter destination {destination}: {message}")]
    Destination {
        /// Which destination.
        destination: String,
        /// What went wrong.
        message: String,
        /// True when the destination refused for good (access denied, a
        /// missing queue or table, a refused entry): trying again cannot
        /// help. False for what passes (throttling, a timeout, a 5xx, no
        /// connection): tried again until it answers.
        permanent: bool,
    },
}

impl DeadLetterError {
    /// True when trying again cannot help.
    pub fn is_permanent(&self) -> bool {
        match self {
            DeadLetterError::Destination { permanent, .. } => *permanent,
        }
    }

    /// A failure of a call to `destination`, permanent unless its class is
    /// one a retry fixes.
    pub(crate) fn of_class(
        destination: String,
        message: String,
        class: tidemark_aws_errors::ErrorClass,
    ) -> Self {
        DeadLetterError::Destination {
            destination,
            message,
            permanent: !class.is_retryable(),
        }
    }
}

/// A durable destination for dead letters. New destinations (an S3 bucket,
/// say) implement this and a [`DeadLetterConfig`] variant; the queue,
/// retries, concurrency and fallback are shared.
pub trait DeadLetterSink: Send + Sync + 'static {
    /// Writes every entry durably, or fails, saying whether for good
    /// ([`DeadLetterError::is_permanent`]): a transient failure is tried
    /// again as it is, a refusal split to find the refused entries (a
    /// repeat of an entry is harmless).
    fn write<'a>(&'a self, entries: &'a [DeadLetter])
    -> BoxFuture<'a, Result<(), DeadLetterError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback file is an operator's decision (a durable mount), never
    /// a default: an entry the destination refuses for good with no
    /// fallback configured stops the worker, its record unacknowledged.
    #[test]
    fn no_fallback_file_unless_configured() {
        for text in [
            "kind = \"sqs\"\nqueue_url = \"https://q\"",
            "kind = \"dynamodb\"\ntable = \"dl\"",
            "kind = \"file\"\npath = \"/data/dl.jsonl\"",
        ] {
            let c: DeadLetterConfig = toml::from_str(text).unwrap();
            assert_eq!(c.fallback(), None, "{text}");
        }
        let c: DeadLetterConfig = toml::from_str(
            "kind = \"sqs\"\nqueue_url = \"https://q\"\nfallback_path = \"/mnt/efs/dl.jsonl\"",
        )
        .unwrap();
        assert_eq!(c.fallback(), Some(PathBuf::from("/mnt/efs/dl.jsonl")));
    }
}
