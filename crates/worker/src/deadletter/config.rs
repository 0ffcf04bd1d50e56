//! [`DeadLetterConfig`]: the `[dead_letters]` section, where dead letters
//! go.

use std::path::PathBuf;
use std::time::Duration;

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
        /// S3 bucket for entries too large for the queue: such an entry is
        /// written whole to `s3://<s3_bucket>/<s3_prefix>/...` (the key
        /// layout of `kind = "s3"`) and the queue gets the entry without its
        /// payload, with `payload_s3` naming the object. Unset (the
        /// default): such an entry keeps the first bytes of its payload,
        /// its full size and SHA-256.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        s3_bucket: Option<String>,
        /// Key prefix of those objects. Default `dead-letters`.
        #[serde(default = "default_s3_prefix")]
        s3_prefix: String,
        /// KMS key (id, ARN or alias) to encrypt those objects with
        /// (SSE-KMS). Unset: the bucket's default encryption.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        s3_kms_key_id: Option<String>,
    },
    /// An S3 bucket: entries batched into gzip JSON-lines objects, each
    /// with its whole payload, under
    /// `<prefix>/yyyy/mm/dd/hh/<worker>-<start>-<n>.jsonl.gz` (UTC hour the
    /// object was written; `<start>` is the worker process's start in Unix
    /// milliseconds, `<n>` counts its objects). A record is acknowledged
    /// only after the object holding its entry is written.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Key prefix (no leading or trailing `/`). Default `dead-letters`.
        #[serde(default = "default_s3_prefix")]
        prefix: String,
        /// An object is written once its entries reach this many bytes of
        /// JSON lines (before gzip). Default 8 MiB (8388608).
        #[serde(default = "default_max_object_bytes")]
        max_object_bytes: usize,
        /// ... or once its first entry has waited this long, whichever comes
        /// first: the longest a dead-lettered record waits for its
        /// acknowledgement. Default 1s.
        #[schemars(with = "String")]
        #[serde(default = "default_max_object_age", with = "humantime_serde")]
        max_object_age: Duration,
        /// KMS key (id, ARN or alias) to encrypt the objects with (SSE-KMS).
        /// Unset (the default): the bucket's default encryption.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kms_key_id: Option<String>,
        /// Local JSON-lines file for entries the bucket refuses for good,
        /// as for `kind = "sqs"`: on durable storage only; unset (the
        /// default), such a refusal stops the worker.
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
            | DeadLetterConfig::Dynamodb { fallback_path, .. }
            | DeadLetterConfig::S3 { fallback_path, .. } => fallback_path.clone(),
            DeadLetterConfig::File { .. } => None,
        }
    }
}

/// Default key prefix of dead-letter objects.
fn default_s3_prefix() -> String {
    "dead-letters".into()
}

/// Default size of a dead-letter object (JSON lines before gzip).
const fn default_max_object_bytes() -> usize {
    8 * 1024 * 1024
}

/// Default longest wait of an entry for its object.
const fn default_max_object_age() -> Duration {
    Duration::from_secs(1)
}

impl DeadLetterConfig {
    /// The S3 settings' problem, if any, as (key under `dead_letters`,
    /// what is wrong).
    pub(crate) fn problem(&self) -> Option<(&'static str, String)> {
        let prefix = |key: &'static str, p: &str| {
            (p.starts_with('/') || p.ends_with('/'))
                .then(|| (key, format!("{p:?} must not start or end with `/`")))
        };
        match self {
            DeadLetterConfig::S3 {
                bucket,
                prefix: p,
                max_object_bytes,
                max_object_age,
                ..
            } => {
                if bucket.is_empty() {
                    return Some(("bucket", "is empty".into()));
                }
                if let Some(problem) = prefix("prefix", p) {
                    return Some(problem);
                }
                if !(1024..=1024 * 1024 * 1024).contains(max_object_bytes) {
                    return Some((
                        "max_object_bytes",
                        format!("{max_object_bytes} is outside 1024..=1073741824"),
                    ));
                }
                if max_object_age.is_zero() || *max_object_age > Duration::from_secs(60) {
                    return Some((
                        "max_object_age",
                        format!(
                            "{max_object_age:?} is outside (0s, 60s]: records wait that long for their acknowledgement"
                        ),
                    ));
                }
                None
            }
            DeadLetterConfig::Sqs { s3_prefix, .. } => prefix("s3_prefix", s3_prefix),
            _ => None,
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
            "kind = \"s3\"\nbucket = \"b\"",
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

#[cfg(test)]
mod s3_tests {
    use super::*;

    #[test]
    fn s3_defaults_and_limits() {
        let c: DeadLetterConfig = toml::from_str("kind = \"s3\"\nbucket = \"b\"").unwrap();
        assert_eq!(
            c,
            DeadLetterConfig::S3 {
                bucket: "b".into(),
                prefix: "dead-letters".into(),
                max_object_bytes: 8 * 1024 * 1024,
                max_object_age: Duration::from_secs(1),
                kms_key_id: None,
                fallback_path: None,
            }
        );
        assert_eq!(c.problem(), None);
        for bad in [
            "kind = \"s3\"\nbucket = \"b\"\nprefix = \"/x\"",
            "kind = \"s3\"\nbucket = \"b\"\nmax_object_age = \"5m\"",
            "kind = \"s3\"\nbucket = \"b\"\nmax_object_bytes = 10",
            "kind = \"s3\"\nbucket = \"\"",
            "kind = \"sqs\"\nqueue_url = \"q\"\ns3_prefix = \"p/\"",
        ] {
            let c: DeadLetterConfig = toml::from_str(bad).unwrap();
            assert!(c.problem().is_some(), "{bad}");
        }
    }
}
