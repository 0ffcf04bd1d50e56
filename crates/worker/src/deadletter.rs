//! Dead letters: every record that cannot be stored, with its source position,
//! reason, error text, raw payload (base64) and time.
//!
//! Guarantee: a record's source position is acknowledged only after its
//! dead-letter entry is durable in the configured destination (an SQS queue, a
//! DynamoDB table, or a JSON-lines file). Writing a dead letter is retried
//! without limit; it is never dropped.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use backon::{BackoffBuilder, ExponentialBuilder};
use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tidemark_consumer::record::Ack;
use tidemark_schema::{Origin, Reason};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Mutex, mpsc};
use tracing::warn;

/// Largest SQS message body (256 KiB). Entries bigger than this keep a
/// truncated payload plus its full size and SHA-256, so they still say
/// exactly which record it was.
pub const SQS_MAX_BODY: usize = 256 * 1024;

/// Payload bytes kept when an entry must be truncated to fit its destination.
const TRUNCATED_PAYLOAD: usize = 64 * 1024;

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
        let keep = payload.len().min(TRUNCATED_PAYLOAD * 4);
        DeadLetter {
            time: now.to_rfc3339_opts(SecondsFormat::Millis, true),
            reason,
            error,
            source,
            payload_base64: base64::engine::general_purpose::STANDARD.encode(&payload[..keep]),
            payload_bytes: payload.len(),
            payload_sha256: hex(&Sha256::digest(payload)),
            payload_truncated: keep < payload.len(),
        }
    }

    /// The raw payload (or its kept prefix when truncated).
    pub fn payload(&self) -> Result<Vec<u8>, base64::DecodeError> {
        base64::engine::general_purpose::STANDARD.decode(&self.payload_base64)
    }

    /// The entry as one JSON line, shrunk to at most `limit` bytes by
    /// truncating the payload when needed.
    pub fn to_json_within(&self, limit: usize) -> String {
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

    fn to_json(&self) -> String {
        // Serializing plain strings and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where dead letters go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DeadLetterConfig {
    /// An SQS queue (standard or FIFO); one message per entry.
    Sqs {
        /// Queue URL.
        queue_url: String,
    },
    /// A DynamoDB table with string hash key `pk` (source position) and string
    /// range key `sk` (time); `tidemark tables ensure` creates it.
    Dynamodb {
        /// Table name.
        table: String,
    },
    /// A local JSON-lines file, appended and fsynced per batch.
    File {
        /// File path.
        path: PathBuf,
    },
}

/// Errors writing dead letters (always retried by the dead-letter task).
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
    /// Writes every entry durably, or fails (the caller retries them all;
    /// entries are idempotent by content, so a repeat is harmless).
    fn write<'a>(&'a self, entries: &'a [DeadLetter])
    -> BoxFuture<'a, Result<(), DeadLetterError>>;
}

/// JSON-lines file destination.
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    lock: Mutex<()>,
}

impl FileSink {
    /// Appends to `path` (created when absent).
    pub fn new(path: PathBuf) -> Self {
        FileSink {
            path,
            lock: Mutex::new(()),
        }
    }
}

impl DeadLetterSink for FileSink {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        Box::pin(async move {
            let _guard = self.lock.lock().await;
            let err = |e: std::io::Error| DeadLetterError::Destination {
                destination: self.path.display().to_string(),
                message: e.to_string(),
            };
            let mut text = String::new();
            for e in entries {
                text.push_str(&e.to_json());
                text.push('\n');
            }
            let mut f = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .await
                .map_err(err)?;
            f.write_all(text.as_bytes()).await.map_err(err)?;
            f.sync_data().await.map_err(err)
        })
    }
}

/// SQS queue destination.
#[derive(Debug)]
pub struct SqsSink {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsSink {
    /// Sends entries to `queue_url`.
    pub fn new(client: aws_sdk_sqs::Client, queue_url: String) -> Self {
        SqsSink { client, queue_url }
    }
}

impl DeadLetterSink for SqsSink {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        Box::pin(async move {
            let fifo = self.queue_url.ends_with(".fifo");
            let err = |message: String| DeadLetterError::Destination {
                destination: self.queue_url.clone(),
                message,
            };
            // SendMessageBatch takes 10 entries and 256 KiB in total, so send
            // one message per call when entries are large.
            for chunk in entries.chunks(10) {
                let per_entry = SQS_MAX_BODY / chunk.len();
                let mut batch = Vec::with_capacity(chunk.len());
                for (i, e) in chunk.iter().enumerate() {
                    let mut b = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(e.to_json_within(per_entry - 512));
                    if fifo {
                        b = b
                            .message_group_id(e.reason.as_str())
                            .message_deduplication_id(&e.payload_sha256[..32]);
                    }
                    batch.push(b.build().map_err(|e| err(e.to_string()))?);
                }
                let out = self
                    .client
                    .send_message_batch()
                    .queue_url(&self.queue_url)
                    .set_entries(Some(batch))
                    .send()
                    .await
                    .map_err(|e| err(aws_sdk_sqs::error::DisplayErrorContext(e).to_string()))?;
                if let Some(f) = out.failed().first() {
                    return Err(err(format!(
                        "{} of {} entries failed: {}",
                        out.failed().len(),
                        chunk.len(),
                        f.message().unwrap_or(f.code())
                    )));
                }
            }
            Ok(())
        })
    }
}

/// DynamoDB table destination: `pk` = source position, `sk` = time.
#[derive(Debug)]
pub struct DynamoDbSink {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoDbSink {
    /// Writes entries to `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: String) -> Self {
        DynamoDbSink { client, table }
    }
}

impl DeadLetterSink for DynamoDbSink {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        Box::pin(async move {
            let err = |message: String| DeadLetterError::Destination {
                destination: format!("dynamodb table {}", self.table),
                message,
            };
            // PutItem one by one: dead letters are rare, and a put per entry
            // keeps a large entry from failing its neighbours.
            for e in entries {
                let entry = e.to_json_within(300 * 1024);
                let item = [
                    ("pk", AttributeValue::S(e.source.to_string())),
                    ("sk", AttributeValue::S(e.time.clone())),
                    ("reason", AttributeValue::S(e.reason.as_str().to_string())),
                    ("entry", AttributeValue::S(entry)),
                ];
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(
                        item.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    ))
                    .send()
                    .await
                    .map_err(
                        |e| err(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string()),
                    )?;
            }
            Ok(())
        })
    }
}

/// A dead letter waiting to be written, with the acknowledgement to give
/// once it is durable (None for records with no source to advance).
type Pending = (DeadLetter, Option<Ack>);

/// Cheap, cloneable handle that queues dead letters for the writer task.
#[derive(Debug, Clone)]
pub struct DeadLetters {
    tx: mpsc::UnboundedSender<Pending>,
}

impl DeadLetters {
    /// Starts the task writing to `sink`. It ends when every handle is dropped
    /// and the queue is written out.
    pub fn start(sink: Arc<dyn DeadLetterSink>) -> (DeadLetters, tokio::task::JoinHandle<()>) {
        // Unbounded is safe here: every entry is one in-flight record, and
        // those are bounded by the sources' and the writer's in-flight limits.
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(sink, rx));
        (DeadLetters { tx }, task)
    }

    /// Queues `entry`; `ack` is acknowledged once it is durable.
    pub fn send(&self, entry: DeadLetter, ack: Option<Ack>) {
        metrics::counter!(crate::metrics::DEAD_LETTERS, "reason" => entry.reason.as_str())
            .increment(1);
        if let Err(mpsc::error::SendError((entry, _ack))) = self.tx.send((entry, ack)) {
            // Only after shutdown: the record stays unacknowledged, so the
            // source delivers it again on restart. Nothing is lost.
            warn!(reason = %entry.reason, source = %entry.source, "dead-letter task has stopped; record left unacknowledged");
        }
    }
}

async fn run(sink: Arc<dyn DeadLetterSink>, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let mut buf: Vec<Pending> = Vec::new();
    while rx.recv_many(&mut buf, 100).await > 0 {
        let entries: Vec<DeadLetter> = buf.iter().map(|(e, _)| e.clone()).collect();
        let mut delays = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(10))
            .with_jitter()
            .without_max_times()
            .build();
        while let Err(e) = sink.write(&entries).await {
            metrics::counter!(crate::metrics::DEAD_LETTER_WRITE_ERRORS).increment(1);
            warn!(error = %e, entries = entries.len(), "writing dead letters failed; retrying");
            tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(10))).await;
        }
        for (_, ack) in buf.drain(..) {
            if let Some(ack) = ack {
                ack.done();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin::Kinesis {
            stream: "s".into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: "1".into(),
            sub_sequence_number: 0,
        }
    }

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
    fn large_entries_are_truncated_to_fit_with_their_digest() {
        let big = vec![b'x'; 500 * 1024];
        let e = DeadLetter::new(
            origin(),
            Reason::ItemTooLarge,
            "too big".into(),
            &big,
            Utc::now(),
        );
        let json = e.to_json_within(SQS_MAX_BODY - 512);
        assert!(json.len() <= SQS_MAX_BODY - 512, "{} bytes", json.len());
        let back: DeadLetter = serde_json::from_str(&json).unwrap();
        assert!(back.payload_truncated);
        assert_eq!(back.payload_bytes, big.len());
        assert_eq!(back.payload_sha256, hex(&Sha256::digest(&big)));
        assert!(big.starts_with(&back.payload().unwrap()));
    }

    #[tokio::test]
    async fn file_sink_appends_lines() {
        let dir = std::env::temp_dir().join(format!("tidemark-dl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dl.jsonl");
        let _ = std::fs::remove_file(&path);
        let sink = FileSink::new(path.clone());
        let a = DeadLetter::new(origin(), Reason::BadTimestamp, "a".into(), b"1", Utc::now());
        let b = DeadLetter::new(origin(), Reason::FutureEvent, "b".into(), b"2", Utc::now());
        sink.write(std::slice::from_ref(&a)).await.unwrap();
        sink.write(std::slice::from_ref(&b)).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<DeadLetter> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, vec![a, b]);
    }
}
