//! [`DeadLetterConfig`]: the `[dead_letters]` section, where dead letters
//! go.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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
