//! Oversized events (`schema.oversize`): what happens to an event whose
//! item would be larger than `schema.oversize_bytes`. With `"dead_letter"`
//! (the default) it is dead-lettered as `item_too_large`; with `"s3"` its
//! payload (the event's bytes, exactly as read) goes to S3 under a
//! content-addressed key, `<prefix>/sha256/<hex>`, and the table gets a
//! pointer item: the attributes every item carries, the payload's location,
//! size and SHA-256 ([`POINTER_ATTRIBUTES`]), and the payload's top-level
//! fields that fit a byte budget (the projection). The router builds the
//! pointer item and names the object ([`Offload`]); writing the object
//! before the item is the worker's (no I/O here).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::size;

/// What happens to an event whose item would exceed `oversize_bytes`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Oversize {
    /// Dead-lettered as `item_too_large`, with its whole payload.
    #[default]
    DeadLetter,
    /// Its payload written to S3 (`schema.oversize_s3`), a pointer item
    /// stored in its place.
    S3,
}

/// Where `oversize = "s3"` writes payloads, and what the pointer item keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OversizeS3 {
    /// Bucket name.
    pub bucket: String,
    /// Key prefix (no leading or trailing `/`): a payload is the object
    /// `<prefix>/sha256/<hex SHA-256 of the payload>`. Default `oversize`.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// KMS key (id, ARN or alias) to encrypt the objects with (SSE-KMS).
    /// Unset (the default): the bucket's default encryption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// Top-level payload fields the pointer item may keep, in this order
    /// (names after
    /// `event.rename`). Unset (the default): every
    /// top-level field, in the event's order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
    /// The pointer item keeps each of those fields whose name and value fit
    /// in what is left of this many bytes (DynamoDB's measure), skipping
    /// those that do not. Default 4096.
    #[serde(default = "default_projection_bytes")]
    pub projection_bytes: usize,
    /// A PutObject that fails (throttled, 5xx, timed out) is retried with
    /// the writer's back-off (`writer.backoff_base` to `writer.backoff_cap`,
    /// each attempt bounded by `writer.call_timeout`) for at most this long;
    /// then the event is dead-lettered as `payload_store_failed`, whole. A
    /// refusal (access denied, no such bucket) dead-letters it at once.
    /// Default 30s.
    #[schemars(with = "String")]
    #[serde(default = "default_max_retry_time", with = "humantime_serde")]
    pub max_retry_time: Duration,
}

fn default_prefix() -> String {
    "oversize".into()
}

const fn default_projection_bytes() -> usize {
    4096
}

const fn default_max_retry_time() -> Duration {
    Duration::from_secs(30)
}

/// Default `schema.oversize_bytes`: DynamoDB's item limit.
pub(crate) const fn default_oversize_bytes() -> usize {
    size::MAX_ITEM_BYTES
}

/// The attributes a pointer item carries besides those of every item: the
/// payload's `s3://bucket/key` (S), its size in bytes (N) and its SHA-256
/// in lower-case hex (S). Reserved in every item while `oversize = "s3"`.
pub const POINTER_ATTRIBUTES: [&str; 3] = [
    "tidemark_payload_s3",
    "tidemark_payload_bytes",
    "tidemark_payload_sha256",
];

/// The object an oversized event's payload goes to, before its pointer
/// item is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offload {
    /// Bucket.
    pub bucket: String,
    /// Object key: `<prefix>/sha256/<hex>`.
    pub key: String,
    /// SHA-256 of the payload, lower-case hex.
    pub sha256: String,
    /// Payload size in bytes.
    pub bytes: usize,
}

impl Offload {
    /// The object `payload` goes to under `s3`'s settings.
    pub fn of(payload: &[u8], s3: &OversizeS3) -> Offload {
        let sha256 = sha256_hex(payload);
        Offload {
            bucket: s3.bucket.clone(),
            key: object_key(&s3.prefix, &sha256),
            sha256,
            bytes: payload.len(),
        }
    }

    /// `s3://bucket/key`.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }
}

/// `<prefix>/sha256/<hex>` (`sha256/<hex>` under an empty prefix).
pub fn object_key(prefix: &str, sha256_hex: &str) -> String {
    if prefix.is_empty() {
        format!("sha256/{sha256_hex}")
    } else {
        format!("{prefix}/sha256/{sha256_hex}")
    }
}

/// SHA-256 of `data`, lower-case hex.
pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The problems of the oversize settings, as (key under `schema`, problem).
pub(super) fn problems(
    oversize: Oversize,
    oversize_bytes: usize,
    s3: Option<&OversizeS3>,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if !(MIN_OVERSIZE_BYTES..=size::MAX_ITEM_BYTES).contains(&oversize_bytes) {
        out.push((
            "oversize_bytes",
            format!(
                "is {oversize_bytes}: give {MIN_OVERSIZE_BYTES} to {} bytes (DynamoDB's item limit, the default)",
                size::MAX_ITEM_BYTES
            ),
        ));
    }
    match (oversize, s3) {
        (Oversize::S3, None) => out.push((
            "oversize_s3",
            "is missing: oversize = \"s3\" needs [schema.oversize_s3] with its bucket".into(),
        )),
        (_, Some(s3)) => {
            if s3.bucket.is_empty() {
                out.push(("oversize_s3.bucket", "is empty: name the bucket".into()));
            }
            if s3.prefix.starts_with('/') || s3.prefix.ends_with('/') {
                out.push((
                    "oversize_s3.prefix",
                    format!("is {:?}: no leading or trailing `/`", s3.prefix),
                ));
            }
            if s3.projection_bytes >= oversize_bytes {
                out.push((
                    "oversize_s3.projection_bytes",
                    format!(
                        "is {}: keep it well under oversize_bytes ({oversize_bytes}), or the pointer item could be oversized too",
                        s3.projection_bytes
                    ),
                ));
            }
        }
        (Oversize::DeadLetter, None) => {}
    }
    out
}

/// Smallest `oversize_bytes`: room for a pointer item's own attributes.
pub const MIN_OVERSIZE_BYTES: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_are_content_addressed() {
        // The SHA-256 of "abc" (FIPS 180-2's example).
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_hex(b"abc"), abc);
        assert_eq!(object_key("big", abc), format!("big/sha256/{abc}"));
        assert_eq!(object_key("", abc), format!("sha256/{abc}"));
        let s3 = OversizeS3 {
            bucket: "b".into(),
            prefix: "p/q".into(),
            kms_key_id: None,
            fields: None,
            projection_bytes: 10,
            max_retry_time: Duration::from_secs(1),
        };
        let o = Offload::of(b"abc", &s3);
        assert_eq!(o.url(), format!("s3://b/p/q/sha256/{abc}"));
        assert_eq!(o.bytes, 3);
        assert_eq!(
            o,
            Offload::of(b"abc", &s3),
            "the same payload, the same key"
        );
    }
}
