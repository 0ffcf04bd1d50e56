//! The dead-letter entry: what every destination stores, sized to fit.

use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tidemark_schema::{Origin, Reason};

/// Bytes of error text an entry keeps. Error texts can quote the input (a
/// 300 KB number, a huge field): the payload already holds the input, so
/// the text only needs to say what is wrong.
pub(crate) const MAX_ERROR_TEXT: usize = 2048;

/// One dead-letter entry, as written to every destination (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetter {
    /// When the record was dead-lettered (UTC, RFC 3339 with milliseconds).
    pub time: String,
    /// Why, as a stable snake_case name.
    pub reason: Reason,
    /// The error text (field, limit, or DynamoDB's message).
    pub error: String,
    /// Source position: stream/shard/sequence or queue/message id.
    pub source: Origin,
    /// The raw record bytes, base64 (possibly truncated; see below).
    pub payload_base64: String,
    /// Size of the full raw payload in bytes.
    pub payload_bytes: usize,
    /// SHA-256 of the full raw payload, hex.
    pub payload_sha256: String,
    /// True when `payload_base64` holds only the first bytes of the payload
    /// because the whole did not fit the destination's size limit.
    #[serde(default)]
    pub payload_truncated: bool,
    /// Position of the event inside its record, for Kinesis records holding
    /// several (`record_format` other than `json`); the payload is then
    /// that event alone. Absent for a record of one event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner: Option<u32>,
    /// Where the whole entry was written when it did not fit its
    /// destination (`s3://bucket/key` of a gzip JSON-lines object holding
    /// it): the SQS destination with `s3_bucket` sends this pointer, with
    /// `payload_base64` empty, instead of a truncated payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_s3: Option<String>,
}

impl DeadLetter {
    /// An entry for `payload` from `source`, dead-lettered `now`.
    pub fn new(
        source: Origin,
        reason: Reason,
        error: String,
        payload: &[u8],
        now: DateTime<Utc>,
    ) -> Self {
        // The whole payload: only a destination's own limit cuts it
        // (`to_json_within`), and the queue of entries is bounded by bytes.
        DeadLetter {
            time: now.to_rfc3339_opts(SecondsFormat::Millis, true),
            reason,
            error: cap_text(error, MAX_ERROR_TEXT),
            source,
            payload_base64: base64::engine::general_purpose::STANDARD.encode(payload),
            payload_bytes: payload.len(),
            payload_sha256: hex(&Sha256::digest(payload)),
            payload_truncated: false,
            inner: None,
            payload_s3: None,
        }
    }

    /// The entry of inner event `inner` of its record.
    pub(crate) fn with_inner(mut self, inner: Option<u32>) -> Self {
        self.inner = inner;
        self
    }

    /// Where the event came from, as text: the source position, and the
    /// inner event's index when the record held several (two dead events of
    /// one record must not share a key or a deduplication id).
    pub(crate) fn position(&self) -> String {
        match self.inner {
            None => self.source.to_string(),
            Some(i) => format!("{}@{i}", self.source),
        }
    }

    /// About how many bytes this entry holds in memory: what the
    /// dead-letter queue's bound counts.
    pub(crate) fn cost(&self) -> usize {
        // Strings, plus the struct and the position's parts.
        self.payload_base64.len() + self.error.len() + self.payload_sha256.len() + 256
    }

    /// The raw payload (or its kept prefix when truncated).
    pub fn payload(&self) -> Result<Vec<u8>, base64::DecodeError> {
        base64::engine::general_purpose::STANDARD.decode(&self.payload_base64)
    }

    /// The entry as one JSON line, shrunk to at most `limit` bytes by
    /// truncating the payload when needed.
    pub(crate) fn to_json_within(&self, limit: usize) -> String {
        let json = self.to_json();
        if json.len() <= limit {
            return json;
        }
        let mut shrunk = self.clone();
        let raw = self.payload().unwrap_or_default();
        // Each 3 payload bytes take 4 base64 characters; leave room for the rest.
        let room = limit.saturating_sub(json.len() - self.payload_base64.len() + 64);
        let keep = (room / 4 * 3).min(raw.len());
        shrunk.payload_base64 = base64::engine::general_purpose::STANDARD.encode(&raw[..keep]);
        shrunk.payload_truncated = true;
        shrunk.to_json()
    }

    /// The entry without its payload, pointing at `location` where it is
    /// kept whole.
    pub(crate) fn pointer_to(&self, location: String) -> DeadLetter {
        DeadLetter {
            payload_base64: String::new(),
            payload_truncated: true,
            payload_s3: Some(location),
            ..self.clone()
        }
    }

    pub(super) fn to_json(&self) -> String {
        // Serializing plain strings and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The SQS FIFO deduplication id: a hash of where the record came from
    /// and why it failed. Not the payload's hash: two different records with
    /// the same bytes are two dead letters, and SQS would drop the second.
    pub(crate) fn dedup_id(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.position().as_bytes());
        h.update(b"\n");
        h.update(self.reason.as_str().as_bytes());
        hex(&h.finalize())
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), saying how
/// much was cut.
fn cap_text(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    // Room for the note; a char boundary at or below the cut.
    let mut cut = max.saturating_sub(48);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!("... ({} of {total} bytes cut)", total - cut));
    text
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
pub(super) mod samples {
    //! Entries for the tests of every destination.
    use super::*;

    /// A Kinesis position.
    pub(crate) fn origin() -> Origin {
        Origin::Kinesis {
            stream: "s".into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: "1".into(),
            sub_sequence_number: 0,
        }
    }

    /// An entry of record `n` of a shard, with `payload`.
    pub(crate) fn entry(n: u32, payload: &[u8]) -> DeadLetter {
        let source = Origin::Kinesis {
            stream: "s".into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: n.to_string().into(),
            sub_sequence_number: 0,
        };
        DeadLetter::new(
            source,
            Reason::InvalidJson,
            "bad".into(),
            payload,
            Utc::now(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::samples::{entry, origin};
    use super::*;

    #[test]
    fn entry_round_trips_and_keeps_payload() {
        let e = DeadLetter::new(
            origin(),
            Reason::InvalidJson,
            "bad".into(),
            b"{not json",
            Utc::now(),
        );
        let back: DeadLetter = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.payload().unwrap(), b"{not json");
        assert!(!back.payload_truncated);
    }

    #[test]
    fn error_text_is_capped_on_a_char_boundary() {
        // A 300 KB number quoted by the parser's message.
        let huge = format!("number out of range: {}", "9".repeat(300_000));
        let e = DeadLetter::new(origin(), Reason::InvalidJson, huge, b"1", Utc::now());
        assert!(e.error.len() <= MAX_ERROR_TEXT, "{} bytes", e.error.len());
        assert!(e.error.starts_with("number out of range: 999"));
        assert!(
            e.error.ends_with("bytes cut)"),
            "{}",
            &e.error[e.error.len() - 40..]
        );
        let wide = "é".repeat(MAX_ERROR_TEXT);
        let e = DeadLetter::new(origin(), Reason::InvalidJson, wide, b"1", Utc::now());
        assert!(e.error.len() <= MAX_ERROR_TEXT);
        let short = DeadLetter::new(
            origin(),
            Reason::InvalidJson,
            "short".into(),
            b"1",
            Utc::now(),
        );
        assert_eq!(short.error, "short");
    }

    #[test]
    fn fifo_dedup_id_is_source_and_reason_not_payload() {
        let (a, b) = (entry(1, b"same"), entry(2, b"same"));
        assert_ne!(a.dedup_id(), b.dedup_id(), "two records, two dead letters");
        assert_eq!(
            a.dedup_id(),
            entry(1, b"other").dedup_id(),
            "a resend is deduplicated"
        );
        let mut c = entry(1, b"same");
        c.reason = Reason::MissingField;
        assert_ne!(a.dedup_id(), c.dedup_id());
        assert!(a.dedup_id().len() <= 128, "SQS's limit");
    }
}
