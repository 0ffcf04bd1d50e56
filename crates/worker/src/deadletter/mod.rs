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
//! - Retries are bounded: a failing batch is retried a few times, then split
//!   in halves down to single entries, all within `WRITE_DEADLINE` (30 s); an entry
//!   that still fails goes to the fallback file (`fallback_path`), so the
//!   shard moves on. Only when the fallback file cannot be written either is
//!   the dead-letter task's error fatal (the worker stops; the records stay
//!   unacknowledged).
//! - On a FIFO queue the deduplication id is a hash of the source position
//!   and the reason: two different records with the same bytes are both kept.
//!
//! One file per part: [`DeadLetter`] (the entry, `entry.rs`); the
//! destinations behind the [`DeadLetterSink`] trait, each sized to its
//! limits (`sqs.rs`, `dynamodb.rs`, `file.rs`); `DeadLetters`, the queue
//! and its task with retries, splitting and the fallback file
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
        /// Local JSON-lines file for entries the queue refuses for good (or
        /// that it does not take within 30 s), so the shard moves on. Put it
        /// on a writable volume. Default `/tmp/tidemark-dead-letters.jsonl`.
        #[serde(default = "default_fallback_path")]
        fallback_path: PathBuf,
    },
    /// A DynamoDB table with string hash key `pk` (source position) and string
    /// range key `sk` (time); `tidemark tables ensure` creates it.
    Dynamodb {
        /// Table name.
        table: String,
        /// Local JSON-lines file for entries the table refuses for good (or
        /// that it does not take within 30 s), so the shard moves on. Put it
        /// on a writable volume. Default `/tmp/tidemark-dead-letters.jsonl`.
        #[serde(default = "default_fallback_path")]
        fallback_path: PathBuf,
    },
    /// A local JSON-lines file, appended and fsynced per batch.
    File {
        /// File path.
        path: PathBuf,
    },
}

/// Where entries go when the destination fails for good: `/tmp` is
/// writable in most containers, even with a read-only root file system when
/// a volume is mounted there.
pub(crate) fn default_fallback_path() -> PathBuf {
    PathBuf::from("/tmp/tidemark-dead-letters.jsonl")
}

impl DeadLetterConfig {
    /// The fallback file, when the destination is not a file already (a
    /// file destination that fails has no better place to go).
    pub(crate) fn fallback(&self) -> Option<PathBuf> {
        match self {
            DeadLetterConfig::Sqs { fallback_path, .. }
            | DeadLetterConfig::Dynamodb { fallback_path, .. } => Some(fallback_path.clone()),
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
    },
}

/// A durable destination for dead letters.
pub trait DeadLetterSink: Send + Sync + 'static {
    /// Writes every entry durably, or fails (the caller retries them all, or
    /// splits them; a repeat of an entry is harmless).
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
