//! Dead letters: every record that cannot be stored, with its source position,
//! reason, error text, raw payload (base64) and time.
//!
//! Guarantees:
//! - A record's source position is acknowledged only after its dead-letter
//!   entry is durable: in the configured destination (an SQS queue, a
//!   DynamoDB table, or a JSON-lines file), or else in the local fallback file.
//! - Every entry fits its destination: the error text is capped at
//!   [`MAX_ERROR_TEXT`] bytes, and the whole entry is sized against the
//!   destination's limit (SQS: 256 KiB per message and per batch; DynamoDB:
//!   400 KB per item) before it is sent, by truncating the payload (its full
//!   size and SHA-256 are kept).
//! - Retries are bounded: a failing batch is retried a few times, then split
//!   in halves down to single entries, all within [`WRITE_DEADLINE`]; an entry
//!   that still fails goes to the fallback file (`fallback_path`), so the
//!   shard moves on. Only when the fallback file cannot be written either is
//!   the dead-letter task's error fatal (the worker stops; the records stay
//!   unacknowledged).
//! - On a FIFO queue the deduplication id is a hash of the source position
//!   and the reason: two different records with the same bytes are both kept.

use std::path::{Path, PathBuf};
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
use tokio::time::Instant;
use tracing::{error, warn};

/// Largest SQS message body (256 KiB). Entries bigger than this keep a
/// truncated payload plus its full size and SHA-256, so they still say
/// exactly which record it was.
pub const SQS_MAX_BODY: usize = 256 * 1024;

/// Largest SendMessageBatch request: the bodies of its (at most 10)
/// messages together, like one message.
pub const SQS_MAX_BATCH: usize = 256 * 1024;

/// Messages per SendMessageBatch call.
const SQS_MAX_BATCH_ENTRIES: usize = 10;

/// Room kept under SQS's limits for what a body's length does not count
/// exactly (message attributes SQS may add, rounding of the estimate).
const SQS_SLACK: usize = 1024;

/// Largest DynamoDB item (400 KB, attribute names and values, UTF-8).
pub const DYNAMODB_MAX_ITEM: usize = 400 * 1024;

/// Bytes of error text an entry keeps. Error texts can quote the input (a
/// 300 KB number, a huge field): the payload already holds the input, so
/// the text only needs to say what is wrong.
pub const MAX_ERROR_TEXT: usize = 2048;

/// How long one batch of dead letters may take, retries and splits
/// included, before what is left goes to the fallback file.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(30);

/// Attempts of a whole batch before it is split.
const BATCH_ATTEMPTS: usize = 3;

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
    /// Position of the event inside its record, for Kinesis records holding
    /// several (`record_format` other than `json`); the payload is then
    /// that event alone. Absent for a record of one event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner: Option<u32>,
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
            error: cap_text(error, MAX_ERROR_TEXT),
            source,
            payload_base64: base64::engine::general_purpose::STANDARD.encode(&payload[..keep]),
            payload_bytes: payload.len(),
            payload_sha256: hex(&Sha256::digest(payload)),
            payload_truncated: keep < payload.len(),
            inner: None,
        }
    }

    /// The entry of inner event `inner` of its record.
    pub fn with_inner(mut self, inner: Option<u32>) -> Self {
        self.inner = inner;
        self
    }

    /// Where the event came from, as text: the source position, and the
    /// inner event's index when the record held several (two dead events of
    /// one record must not share a key or a deduplication id).
    pub fn position(&self) -> String {
        match self.inner {
            None => self.source.to_string(),
            Some(i) => format!("{}@{i}", self.source),
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

    /// The SQS FIFO deduplication id: a hash of where the record came from
    /// and why it failed. Not the payload's hash: two different records with
    /// the same bytes are two dead letters, and SQS would drop the second.
    pub fn dedup_id(&self) -> String {
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
pub fn default_fallback_path() -> PathBuf {
    PathBuf::from("/tmp/tidemark-dead-letters.jsonl")
}

impl DeadLetterConfig {
    /// The fallback file, when the destination is not a file already (a
    /// file destination that fails has no better place to go).
    pub fn fallback(&self) -> Option<PathBuf> {
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

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
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
            for batch in sqs_batches(entries) {
                let n = batch.len();
                let mut request = Vec::with_capacity(n);
                for (i, (e, body)) in batch.into_iter().enumerate() {
                    let mut b = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body);
                    if fifo {
                        b = b
                            .message_group_id(e.reason.as_str())
                            .message_deduplication_id(e.dedup_id());
                    }
                    request.push(b.build().map_err(|e| err(e.to_string()))?);
                }
                let out = self
                    .client
                    .send_message_batch()
                    .queue_url(&self.queue_url)
                    .set_entries(Some(request))
                    .send()
                    .await
                    .map_err(|e| err(aws_sdk_sqs::error::DisplayErrorContext(e).to_string()))?;
                if let Some(f) = out.failed().first() {
                    return Err(err(format!(
                        "{} of {n} entries failed: {}",
                        out.failed().len(),
                        f.message().unwrap_or(f.code())
                    )));
                }
            }
            Ok(())
        })
    }
}

/// Entries as SQS message bodies, grouped into SendMessageBatch calls: at
/// most 10 messages, each body within [`SQS_MAX_BODY`] and their sum within
/// [`SQS_MAX_BATCH`] (both less [`SQS_SLACK`]). An entry that would not fit
/// beside others gets a call of its own.
fn sqs_batches(entries: &[DeadLetter]) -> Vec<Vec<(&DeadLetter, String)>> {
    let mut batches: Vec<Vec<(&DeadLetter, String)>> = Vec::new();
    let mut size = 0;
    for e in entries {
        let body = e.to_json_within(SQS_MAX_BODY - SQS_SLACK);
        let fits = batches.last().is_some_and(|b| {
            b.len() < SQS_MAX_BATCH_ENTRIES && size + body.len() <= SQS_MAX_BATCH - SQS_SLACK
        });
        if !fits {
            batches.push(Vec::new());
            size = 0;
        }
        size += body.len();
        if let Some(b) = batches.last_mut() {
            b.push((e, body));
        }
    }
    batches
}

/// DynamoDB table destination: `pk` = source position, `sk` = time.
#[derive(Debug)]
pub struct DynamoDbSink {
    client: aws_sdk_dynamodb::Client,
    table: String,
    gov: Option<tidemark_governor::Governor>,
}

impl DynamoDbSink {
    /// Writes entries to `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: String) -> Self {
        DynamoDbSink {
            client,
            table,
            gov: None,
        }
    }

    /// Puts are admitted by the DynamoDB endpoint's shared governor.
    pub fn with_governor(mut self, gov: tidemark_governor::Governor) -> Self {
        self.gov = Some(gov);
        self
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
                let put = self
                    .client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(dynamodb_item(e)))
                    .send();
                tidemark_governor::Governor::run_opt(self.gov.as_ref(), put)
                    .await
                    .map_err(
                        |e| err(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string()),
                    )?;
            }
            Ok(())
        })
    }
}

/// The DynamoDB item of an entry: `pk`, `sk`, `reason` and the entry's JSON,
/// which is sized so the whole item stays within [`DYNAMODB_MAX_ITEM`].
fn dynamodb_item(e: &DeadLetter) -> std::collections::HashMap<String, AttributeValue> {
    let mut item: std::collections::HashMap<String, AttributeValue> = [
        ("pk", e.position()),
        ("sk", e.time.clone()),
        ("reason", e.reason.as_str().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), AttributeValue::S(v)))
    .collect();
    // DynamoDB counts each attribute's name and value (UTF-8 bytes).
    let others: usize = item
        .iter()
        .map(|(k, v)| k.len() + v.as_s().map_or(0, String::len))
        .sum::<usize>()
        + "entry".len();
    let entry = e.to_json_within(DYNAMODB_MAX_ITEM - others - 1024);
    item.insert("entry".into(), AttributeValue::S(entry));
    item
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
    /// Starts the task writing to `sink`, with entries that fail for good
    /// going to the file at `fallback` (none: such a failure is fatal). It
    /// ends when every handle is dropped and the queue is written out, or
    /// with an error when an entry could be written nowhere.
    pub fn start(
        sink: Arc<dyn DeadLetterSink>,
        fallback: Option<PathBuf>,
    ) -> (
        DeadLetters,
        tokio::task::JoinHandle<Result<(), DeadLetterError>>,
    ) {
        // Unbounded is safe here: every entry is one in-flight record, and
        // those are bounded by the sources' and the writer's in-flight limits.
        let (tx, rx) = mpsc::unbounded_channel();
        let fallback = fallback.map(FileSink::new);
        let task = tokio::spawn(run(sink, fallback, rx));
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

async fn run(
    sink: Arc<dyn DeadLetterSink>,
    fallback: Option<FileSink>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
) -> Result<(), DeadLetterError> {
    let mut buf: Vec<Pending> = Vec::new();
    while rx.recv_many(&mut buf, 100).await > 0 {
        let entries: Vec<DeadLetter> = buf.iter().map(|(e, _)| e.clone()).collect();
        let deadline = Instant::now() + WRITE_DEADLINE;
        let (failed, last_error) = store(sink.as_ref(), &entries, deadline).await;
        if !failed.is_empty() {
            let left: Vec<DeadLetter> = failed.iter().map(|i| entries[*i].clone()).collect();
            let Some(file) = &fallback else {
                // Named after the destination's own last error: the cause.
                let (destination, why) = match last_error {
                    Some(DeadLetterError::Destination {
                        destination,
                        message,
                    }) => (destination, message),
                    None => ("dead letters".into(), "no answer".into()),
                };
                let e = DeadLetterError::Destination {
                    destination,
                    message: format!("{} entries could not be written: {why}", left.len()),
                };
                error!(error = %e, "dead letters cannot be stored: stopping");
                return Err(e);
            };
            warn!(
                entries = left.len(),
                path = %file.path().display(),
                "dead-letter destination failed for good: writing to the fallback file"
            );
            metrics::counter!(crate::metrics::DEAD_LETTER_FALLBACKS).increment(left.len() as u64);
            if let Err(e) = file.write(&left).await {
                error!(error = %e, "the dead-letter fallback file cannot be written either: stopping");
                return Err(e);
            }
        }
        for (_, ack) in buf.drain(..) {
            if let Some(ack) = ack {
                ack.done();
            }
        }
    }
    Ok(())
}

/// Writes `entries` to `sink` with bounded retries: the whole batch up to
/// [`BATCH_ATTEMPTS`] times, then each half on its own (recursively, so one
/// bad entry cannot hold back the others), all by `deadline`. Returns the
/// indexes of the entries that failed for good, and the last error seen.
async fn store(
    sink: &dyn DeadLetterSink,
    entries: &[DeadLetter],
    deadline: Instant,
) -> (Vec<usize>, Option<DeadLetterError>) {
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .without_max_times()
        .build();
    // (start index, length, attempts left) of each part still to write.
    let mut todo = vec![(0usize, entries.len(), BATCH_ATTEMPTS)];
    let mut failed = Vec::new();
    let mut last_error = None;
    while let Some((start, len, attempts)) = todo.pop() {
        let part = &entries[start..start + len];
        let result = match tokio::time::timeout_at(deadline, sink.write(part)).await {
            Ok(r) => r,
            Err(_) => Err(DeadLetterError::Destination {
                destination: "dead letters".into(),
                message: format!("no answer within {WRITE_DEADLINE:?}"),
            }),
        };
        let Err(e) = result else { continue };
        metrics::counter!(crate::metrics::DEAD_LETTER_WRITE_ERRORS).increment(1);
        warn!(error = %e, entries = len, "writing dead letters failed");
        last_error = Some(e);
        if Instant::now() >= deadline {
            failed.extend(start..start + len);
            failed.extend(todo.drain(..).flat_map(|(s, l, _)| s..s + l));
            break;
        }
        if attempts > 1 {
            let delay = delays.next().unwrap_or(Duration::from_secs(2));
            tokio::time::sleep_until((Instant::now() + delay).min(deadline)).await;
            todo.push((start, len, attempts - 1));
        } else if len > 1 {
            // Halves get one try each, and are split again if they fail.
            let half = len / 2;
            todo.push((start + half, len - half, 1));
            todo.push((start, half, 1));
        } else {
            failed.push(start);
        }
    }
    failed.sort_unstable();
    (failed, last_error)
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

    fn entry(n: u32, payload: &[u8]) -> DeadLetter {
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
    fn sqs_batches_fit_the_message_and_batch_limits() {
        // Large entries: each alone near the limit, never two together.
        let large: Vec<DeadLetter> = (0..3).map(|n| entry(n, &vec![b'x'; 300_000])).collect();
        // Mid-size ones: several per batch, never over the sum.
        let mid: Vec<DeadLetter> = (0..12).map(|n| entry(n, &vec![b'y'; 40_000])).collect();
        // Small ones: 10 per batch.
        let small: Vec<DeadLetter> = (0..25).map(|n| entry(n, b"{}")).collect();
        for (entries, batches) in [(&large, Some(3)), (&mid, None), (&small, Some(3))] {
            let got = sqs_batches(entries);
            let mut seen = 0;
            for b in &got {
                assert!(!b.is_empty() && b.len() <= SQS_MAX_BATCH_ENTRIES);
                assert!(
                    b.iter()
                        .all(|(_, body)| body.len() <= SQS_MAX_BODY - SQS_SLACK)
                );
                let sum: usize = b.iter().map(|(_, body)| body.len()).sum();
                assert!(sum <= SQS_MAX_BATCH - SQS_SLACK, "{sum} bytes in one call");
                seen += b.len();
            }
            assert_eq!(seen, entries.len(), "every entry sent once");
            if let Some(n) = batches {
                assert_eq!(got.len(), n);
            }
        }
        assert!(
            sqs_batches(&mid).len() >= 3,
            "about 5 mid-size entries per call"
        );
    }

    #[test]
    fn dynamodb_items_fit_400_kb() {
        for size in [10, 200_000, 400_000, 2_000_000] {
            let item = dynamodb_item(&entry(1, &vec![b'z'; size]));
            let bytes: usize = item
                .iter()
                .map(|(k, v)| k.len() + v.as_s().unwrap().len())
                .sum();
            assert!(
                bytes <= DYNAMODB_MAX_ITEM,
                "{size}-byte payload: {bytes}-byte item"
            );
            let back: DeadLetter = serde_json::from_str(item["entry"].as_s().unwrap()).unwrap();
            assert_eq!(back.payload_bytes, size);
        }
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

    /// Refuses any call holding an entry whose payload is "poison", or
    /// every call when `down`; never answers when `hang`. Counts calls.
    #[derive(Default)]
    struct Picky {
        calls: std::sync::Mutex<Vec<usize>>,
        down: bool,
        hang: bool,
    }

    impl DeadLetterSink for Arc<Picky> {
        fn write<'a>(
            &'a self,
            entries: &'a [DeadLetter],
        ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
            self.calls.lock().unwrap().push(entries.len());
            let poisoned = entries.iter().any(|e| e.payload().unwrap() == b"poison");
            let fail = self.down || poisoned;
            let hang = self.hang;
            Box::pin(async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                if fail {
                    return Err(DeadLetterError::Destination {
                        destination: "picky".into(),
                        message: "refused".into(),
                    });
                }
                Ok(())
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_batch_is_split_so_only_the_bad_entry_fails() {
        let sink = Arc::new(Picky::default());
        let entries: Vec<DeadLetter> = (0..10)
            .map(|n| entry(n, if n == 6 { b"poison" } else { b"fine" }))
            .collect();
        let (failed, last) = store(&sink, &entries, Instant::now() + WRITE_DEADLINE).await;
        assert_eq!(failed, vec![6]);
        assert!(last.is_some_and(|e| e.to_string().contains("refused")));
        let calls = sink.calls.lock().unwrap().clone();
        // 3 tries of the whole batch, then halves down to the bad entry.
        assert_eq!(&calls[..BATCH_ATTEMPTS], &[10, 10, 10]);
        assert!(calls.len() <= BATCH_ATTEMPTS + 2 * 10, "{calls:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_destination_that_never_answers_is_given_up_at_the_deadline() {
        let sink = Arc::new(Picky {
            hang: true,
            ..Picky::default()
        });
        let entries: Vec<DeadLetter> = (0..4).map(|n| entry(n, b"x")).collect();
        let started = Instant::now();
        let (failed, _) = store(&sink, &entries, started + WRITE_DEADLINE).await;
        assert_eq!(failed, vec![0, 1, 2, 3]);
        assert_eq!(started.elapsed(), WRITE_DEADLINE);
    }

    #[tokio::test(start_paused = true)]
    async fn entries_that_fail_for_good_go_to_the_fallback_file_and_are_acked() {
        use tidemark_consumer::kinesis::{AckTracker, Position};
        let dir = std::env::temp_dir().join(format!("tidemark-dlf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("fallback.jsonl");
        let _ = std::fs::remove_file(&path);
        let sink = Arc::new(Picky {
            down: true,
            ..Picky::default()
        });
        let (dead, task) = DeadLetters::start(Arc::new(sink.clone()), Some(path.clone()));
        let tracker = Arc::new(AckTracker::new());
        for n in 0..3u32 {
            let serial = tracker
                .push(Position::new(n.to_string().as_str(), 0))
                .unwrap();
            dead.send(entry(n, b"x"), Some(Ack::new(tracker.clone(), serial)));
        }
        drop(dead);
        task.await.unwrap().unwrap();
        assert_eq!(
            tracker.in_flight(),
            0,
            "acknowledged once in the fallback file"
        );
        let lines: Vec<DeadLetter> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);

        // No fallback (a file destination) and a failing sink: fatal, and
        // the record stays unacknowledged.
        let (dead, task) = DeadLetters::start(Arc::new(sink.clone()), None);
        let serial = tracker.push(Position::new("9", 0)).unwrap();
        dead.send(entry(9, b"x"), Some(Ack::new(tracker.clone(), serial)));
        drop(dead);
        let e = task.await.unwrap().unwrap_err().to_string();
        assert!(e.contains("1 entries could not be written: refused"), "{e}");
        assert_eq!(tracker.in_flight(), 1);
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
