//! Oversized events' payloads in S3 (`schema.oversize = "s3"`), read back:
//! a pointer item names its object, size and SHA-256
//! ([`POINTER_ATTRIBUTES`]); [`fetch`] returns the object's bytes only when
//! both match, so `query` never prints an altered payload and `verify`
//! reports a missing or altered object instead of passing it.

use bytes::Bytes;
use tidemark_schema::Item;
use tidemark_schema::route::oversize::{POINTER_ATTRIBUTES, sha256_hex};

use aws_sdk_dynamodb::types::AttributeValue;

/// What a pointer item says of its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    /// `s3://bucket/key`, as the item holds it.
    pub url: String,
    /// Bucket.
    pub bucket: String,
    /// Object key.
    pub key: String,
    /// Payload size in bytes.
    pub bytes: u64,
    /// Payload SHA-256, lower-case hex.
    pub sha256: String,
}

/// `item`'s pointer, when it is a pointer item (all three attributes,
/// well-formed); `None` for an item stored whole.
pub fn pointer_of(item: &Item) -> Option<Pointer> {
    let [url, bytes, sha] = POINTER_ATTRIBUTES;
    let (
        Some(AttributeValue::S(url)),
        Some(AttributeValue::N(bytes)),
        Some(AttributeValue::S(sha)),
    ) = (item.get(url), item.get(bytes), item.get(sha))
    else {
        return None;
    };
    let (bucket, key) = url.strip_prefix("s3://")?.split_once('/')?;
    Some(Pointer {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        bytes: bytes.parse().ok()?,
        sha256: sha.clone(),
        url: url.clone(),
    })
}

/// Why a payload could not be read back as its pointer says.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// No such object (deleted, or never written).
    #[error("{url}: the object is missing")]
    Missing {
        /// The object.
        url: String,
    },
    /// The object is not the payload the item points at.
    #[error("{url}: the object differs from what its item says ({problem})")]
    Altered {
        /// The object.
        url: String,
        /// Size or hash, found and expected.
        problem: String,
    },
    /// GetObject failed (access denied, unreachable...).
    #[error("{url}: reading it failed: {message}")]
    Call {
        /// The object.
        url: String,
        /// The error text.
        message: String,
    },
}

/// Bytes read of one object at most: the largest Kinesis record (10 MiB),
/// with room to spare; a larger object is not an event's payload.
const MAX_PAYLOAD_BYTES: u64 = 16 * 1024 * 1024;

/// The payload `p` points at, checked against its size and SHA-256.
pub async fn fetch(client: &aws_sdk_s3::Client, p: &Pointer) -> Result<Bytes, PayloadError> {
    let call = |message: String| PayloadError::Call {
        url: p.url.clone(),
        message,
    };
    let out = match client
        .get_object()
        .bucket(&p.bucket)
        .key(&p.key)
        .send()
        .await
    {
        Ok(out) => out,
        Err(e) => {
            if e.as_service_error().is_some_and(|s| s.is_no_such_key()) {
                return Err(PayloadError::Missing { url: p.url.clone() });
            }
            return Err(call(tidemark_aws_errors::describe(&e)));
        }
    };
    let altered = |problem: String| PayloadError::Altered {
        url: p.url.clone(),
        problem,
    };
    let length = out.content_length().and_then(|n| u64::try_from(n).ok());
    if let Some(n) = length
        && n != p.bytes
    {
        return Err(altered(format!("{n} bytes, not {}", p.bytes)));
    }
    if p.bytes > MAX_PAYLOAD_BYTES {
        return Err(altered(format!(
            "{} bytes is over {MAX_PAYLOAD_BYTES}",
            p.bytes
        )));
    }
    let data = out
        .body
        .collect()
        .await
        .map_err(|e| call(e.to_string()))?
        .into_bytes();
    check(p, &data).map_err(altered)?;
    Ok(data)
}

/// Objects read at once.
const PARALLEL_FETCHES: usize = 8;

/// The payload of each of `items` that is a pointer item (`None` for the
/// others), fetched and checked, several at a time; the first failure.
pub async fn fetch_all(
    client: &aws_sdk_s3::Client,
    items: &[Item],
) -> Result<Vec<Option<Bytes>>, PayloadError> {
    use futures::StreamExt;
    futures::stream::iter(items.iter().map(|item| async move {
        match pointer_of(item) {
            Some(p) => fetch(client, &p).await.map(Some),
            None => Ok(None),
        }
    }))
    .buffered(PARALLEL_FETCHES)
    .collect::<Vec<_>>()
    .await
    .into_iter()
    .collect()
}

/// Whether `data` is the payload `p` points at: its size and SHA-256.
pub fn check(p: &Pointer, data: &[u8]) -> Result<(), String> {
    if data.len() as u64 != p.bytes {
        return Err(format!("{} bytes, not {}", data.len(), p.bytes));
    }
    let found = sha256_hex(data);
    if found != p.sha256 {
        return Err(format!("SHA-256 {found}, not {}", p.sha256));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn item(url: &str, bytes: &str, sha: &str) -> Item {
        [
            ("pk", AttributeValue::S("d".into())),
            (POINTER_ATTRIBUTES[0], AttributeValue::S(url.into())),
            (POINTER_ATTRIBUTES[1], AttributeValue::N(bytes.into())),
            (POINTER_ATTRIBUTES[2], AttributeValue::S(sha.into())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    #[test]
    fn pointers_are_read_from_their_three_attributes() {
        let sha = sha256_hex(b"abc");
        let p = pointer_of(&item("s3://b/p/sha256/x", "3", &sha)).unwrap();
        assert_eq!(
            (p.bucket.as_str(), p.key.as_str(), p.bytes),
            ("b", "p/sha256/x", 3)
        );
        assert!(check(&p, b"abc").is_ok());
        assert!(check(&p, b"abd").unwrap_err().contains("SHA-256"));
        assert!(check(&p, b"abcd").unwrap_err().contains("4 bytes"));
        // Not pointers: an attribute missing, or of another shape.
        let mut partial = item("s3://b/k", "3", &sha);
        partial.remove(POINTER_ATTRIBUTES[2]);
        assert_eq!(pointer_of(&partial), None);
        assert_eq!(pointer_of(&item("https://b/k", "3", &sha)), None);
        assert_eq!(pointer_of(&item("s3://b/k", "x", &sha)), None);
    }
}
