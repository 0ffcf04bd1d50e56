//! Dead letters: every record that cannot be stored, with its source position,
//! reason, error text, raw payload (base64) and time.
//!
//! Guarantees:
//! - A record's source position is acknowledged only after its dead-letter
//!   entry is durable: in the configured destination (an SQS queue, a
//!   DynamoDB table, gzip JSON-lines objects in an S3 bucket, or a
//!   JSON-lines file), or else in the local fallback file.
//! - Every entry fits its destination: the error text is capped at
//!   `MAX_ERROR_TEXT` (2 KiB), and the whole entry is sized against the
//!   destination's limit (SQS: the queue's `MaximumMessageSize`, read at
//!   start, per message and per batch; DynamoDB: 400,000 bytes per item;
//!   S3: none, every entry whole) before it is sent, by truncating the payload (its full
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
//! One file per part: [`DeadLetterConfig`] (`config.rs`); [`DeadLetter`]
//! (the entry, `entry.rs`); the [`DeadLetterSink`] trait and
//! [`DeadLetterError`] (`sink.rs`); the destinations behind it, each sized
//! to its limits and telling a transient failure from a refusal for good
//! (`sqs.rs`, `dynamodb.rs`, `s3.rs`, `file.rs`; `s3.rs` also writes
//! the objects that hold SQS entries too large for their queue); `DeadLetters`, the bounded queue
//! and its task with retries, concurrency, splitting and the fallback file
//! (`delivery.rs`). The files import each other, never this one.

mod config;
mod delivery;
mod dynamodb;
mod entry;
mod file;
mod s3;
mod sink;
mod sqs;

pub use config::DeadLetterConfig;
pub(crate) use delivery::DeadLetters;
pub use dynamodb::DynamoDbSink;
pub(crate) use dynamodb::check_dead_letter_table;
pub use entry::DeadLetter;
pub(crate) use file::FileSink;
pub use s3::{ObjectWriter, S3Sink};
pub use sink::{DeadLetterError, DeadLetterSink};
pub use sqs::SqsSink;
