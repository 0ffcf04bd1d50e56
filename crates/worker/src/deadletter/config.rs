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
