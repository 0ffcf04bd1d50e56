//! Synthetic IoT events for demos, tests and benchmarks: K devices reporting
//! temperature, humidity and pressure at R events/s in total, optionally one
//! hot device at M times the rate of the others. Deterministic for a seed, so
//! a run can be verified event by event afterwards.

use std::time::Duration;

use aws_sdk_kinesis::operation::put_records::PutRecordsOutput;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use tidemark_consumer::kinesis::MaxRecordSize;

/// What to generate.
#[derive(Debug, Clone)]
pub struct ProduceSpec {
    /// Number of devices.
    pub devices: u32,
    /// Total events.
    pub count: u64,
    /// Rate multiplier of device 0 (1 = no hot device).
    pub hot_factor: u32,
    /// Seed of the generator.
    pub seed: u64,
}

/// One generated event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IotEvent {
    /// Device id (`device-0000` is the hot one).
    #[serde(rename = "deviceId")]
    pub device_id: String,
    /// Event time, RFC 3339 with milliseconds.
    pub timestamp: String,
    /// Unique event id.
    #[serde(rename = "eventId")]
    pub event_id: String,
    /// Degrees Celsius.
    pub temperature: f64,
    /// Percent.
    pub humidity: f64,
    /// Hectopascal.
    pub pressure: f64,
}

impl ProduceSpec {
    /// Event `n` of the run, stamped at `at`. Device 0 gets `hot_factor`
    /// shares of the traffic, every other device one share.
    pub fn event(&self, n: u64, at: DateTime<Utc>) -> IotEvent {
        let mut rng = self.rng(n);
        let device = self.pick_device(&mut rng);
        let round = |x: f64| (x * 100.0).round() / 100.0;
        IotEvent {
            device_id: format!("device-{device:04}"),
            timestamp: at.to_rfc3339_opts(SecondsFormat::Millis, true),
            event_id: format!("evt-{:08x}-{n:010}", self.seed as u32),
            temperature: round(15.0 + rng.f64() * 15.0),
            humidity: round(30.0 + rng.f64() * 50.0),
            pressure: round(990.0 + rng.f64() * 40.0),
        }
    }
}

impl ProduceSpec {
    /// Event `n` as sent: keyed by its device, its JSON.
    pub(crate) fn produced(&self, n: u64, at: DateTime<Utc>) -> Produced {
        let e = self.event(n, at);
        Produced {
            // Serializing strings and finite floats cannot fail.
            body: serde_json::to_vec(&e).unwrap_or_default(),
            key: e.device_id,
            id: e.event_id,
        }
    }

    /// The generator of event `n`: the same seed and `n`, the same values.
    pub(crate) fn rng(&self, n: u64) -> fastrand::Rng {
        fastrand::Rng::with_seed(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// A device (entity) number: device 0 gets `hot_factor` shares of the
    /// traffic, every other device one share.
    pub(crate) fn pick_device(&self, rng: &mut fastrand::Rng) -> u64 {
        let shares = u64::from(self.devices.max(1) - 1) + u64::from(self.hot_factor.max(1));
        let pick = rng.u64(0..shares);
        if pick < u64::from(self.hot_factor.max(1)) {
            0
        } else {
            pick - u64::from(self.hot_factor.max(1)) + 1
        }
    }
}

/// Where produced events go.
#[derive(Debug, Clone)]
pub enum Target {
    /// A Kinesis stream (PutRecords, 500 per call).
    Kinesis(KinesisStream),
    /// A Kinesis stream, events packed as KPL aggregates of up to this many
    /// user records each (the KPL's own format, deaggregated by the
    /// consumer), each aggregate within the stream's record size.
    KinesisAggregated(KinesisStream, usize),
    /// An SQS queue (SendMessageBatch, 10 per call).
    Sqs(aws_sdk_sqs::Client, String),
}

/// A stream to put records on, and the largest record it takes.
#[derive(Debug, Clone)]
pub struct KinesisStream {
    /// The client.
    pub client: aws_sdk_kinesis::Client,
    /// Stream name (or ARN).
    pub stream: String,
    /// Partition key and data together, at most (the stream's
    /// `MaxRecordSizeInKiB`).
    pub max_record: MaxRecordSize,
    /// The stream's ARN, once read (for the command that raises the limit).
    pub arn: Option<String>,
}

impl KinesisStream {
    /// `stream` at the default record size (1 MiB) until
    /// [`KinesisStream::read_max_record`] reads the stream's own.
    pub fn new(client: aws_sdk_kinesis::Client, stream: String) -> Self {
        Self {
            client,
            stream,
            max_record: MaxRecordSize::of(None),
            arn: None,
        }
    }

    /// Reads the stream's `MaxRecordSizeInKiB` (DescribeStreamSummary). When
    /// it cannot be read (no `kinesis:DescribeStreamSummary`), the default
    /// stays and the reason is returned for a warning.
    pub async fn read_max_record(&mut self) -> Result<(), String> {
        match tidemark_consumer::kinesis::stream_settings(&self.client, &self.stream).await {
            Ok(s) => {
                self.max_record = s.max_record_size;
                self.arn = Some(s.arn);
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Errors producing.
#[derive(Debug, thiserror::Error)]
#[error("producing to {target}: {message}")]
pub struct ProduceError {
    target: String,
    message: String,
}

impl Target {
    /// `stream` at the default record size (1 MiB): a test's producer.
    /// `produce` reads the stream's own ([`KinesisStream::read_max_record`]).
    pub fn kinesis(client: aws_sdk_kinesis::Client, stream: String) -> Self {
        Target::Kinesis(KinesisStream::new(client, stream))
    }

    fn name(&self) -> String {
        match self {
            Target::Kinesis(k) | Target::KinesisAggregated(k, _) => format!("stream {}", k.stream),
            Target::Sqs(_, q) => format!("queue {q}"),
        }
    }

    /// Whether events of `size` bytes, under partition keys of `key_len`
    /// bytes, fit in one record; the refusal names the stream's setting and
    /// how to raise it. Always true for a queue (SQS answers for itself).
    pub fn check_event_size(&self, size: usize, key_len: usize) -> Result<(), String> {
        let (k, overhead) = match self {
            Target::Kinesis(k) => (k, 0),
            Target::KinesisAggregated(k, _) => (k, AGGREGATE_OVERHEAD + PER_USER_RECORD),
            Target::Sqs(..) => return Ok(()),
        };
        let room = k.max_record.bytes().saturating_sub(key_len + overhead);
        if size <= room {
            return Ok(());
        }
        let setting = if k.max_record.reported {
            format!("MaxRecordSizeInKiB = {}", k.max_record.kib)
        } else {
            format!(
                "MaxRecordSizeInKiB not reported, so the default {} KiB",
                k.max_record.kib
            )
        };
        let raise = if k.max_record.kib < MaxRecordSize::MOST_KIB {
            format!(
                "; raise the stream's limit (up to {} KiB) with `aws kinesis update-max-record-size --stream-arn {} --max-record-size-in-ki-b {}`",
                MaxRecordSize::MOST_KIB,
                k.arn.as_deref().unwrap_or("<the stream's ARN>"),
                MaxRecordSize::MOST_KIB
            )
        } else {
            String::new()
        };
        Err(format!(
            "--size {size} does not fit a record of stream {}: its records take at most {} bytes ({setting}), partition key{} included, which leaves {room} bytes for an event{raise}",
            k.stream,
            k.max_record.bytes(),
            if overhead > 0 {
                " and KPL aggregate framing"
            } else {
                ""
            },
        ))
    }

    /// Most events per call.
    pub fn batch_size(&self) -> usize {
        match self {
            Target::Kinesis(..) => 500,
            Target::KinesisAggregated(_, n) => 500 * n.max(&1),
            Target::Sqs(..) => 10,
        }
    }

    /// Sends `events` (at most `batch_size`), retrying the entries the
    /// service refused (throttled) until all are in.
    pub async fn send(&self, events: &[IotEvent]) -> Result<(), ProduceError> {
        let produced = events
            .iter()
            .map(|e| {
                Ok(Produced {
                    key: e.device_id.clone(),
                    id: e.event_id.clone(),
                    body: serde_json::to_vec(e).map_err(|e| self.error(e.to_string()))?,
                })
            })
            .collect::<Result<Vec<_>, ProduceError>>()?;
        self.send_produced(&produced).await
    }

    fn error(&self, message: String) -> ProduceError {
        ProduceError {
            target: self.name(),
            message,
        }
    }

    /// Sends events already encoded (a template's), as [`Target::send`].
    pub(crate) async fn send_produced(&self, events: &[Produced]) -> Result<(), ProduceError> {
        let err = |message: String| self.error(message);
        match self {
            Target::Kinesis(k) => {
                let records = events
                    .iter()
                    .map(|e| (e.key.clone(), e.body.clone()))
                    .collect();
                put_kinesis(k, records).await.map_err(err)
            }
            Target::KinesisAggregated(k, n) => {
                let records = aggregates(events, *n, k.max_record.bytes());
                put_kinesis(k, records).await.map_err(err)
            }
            Target::Sqs(client, queue) => send_sqs(client, queue, events).await.map_err(err),
        }
    }
}

/// One encoded event to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Produced {
    /// Partition key (Kinesis) or message group (SQS FIFO).
    pub key: String,
    /// Unique id (SQS FIFO deduplication id).
    pub id: String,
    /// The event's JSON.
    pub body: Vec<u8>,
}

/// SendMessageBatch of events (at most 10), in calls of at most
/// [`SQS_BATCH_BYTES`].
async fn send_sqs(
    client: &aws_sdk_sqs::Client,
    queue: &str,
    events: &[Produced],
) -> Result<(), String> {
    for call in calls_of(events.to_vec(), 10, SQS_BATCH_BYTES, |e| e.body.len()) {
        send_sqs_batch(client, queue, call).await?;
    }
    Ok(())
}

/// Bytes of message bodies `produce` puts in one SendMessageBatch: every
/// queue takes a batch of 256 KiB (the API's total was 256 KiB before the
/// 1 MiB messages), so large events (`--size`) never make a batch too long;
/// a larger message goes alone, within its queue's `MaximumMessageSize`.
const SQS_BATCH_BYTES: usize = 256 << 10;

/// One SendMessageBatch (at most 10 events), retrying refused entries.
async fn send_sqs_batch(
    client: &aws_sdk_sqs::Client,
    queue: &str,
    events: Vec<Produced>,
) -> Result<(), String> {
    let fifo = queue.ends_with(".fifo");
    until_accepted(events, async |pending: &[Produced]| {
        let entries = pending
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let body = String::from_utf8(e.body.clone())
                    .map_err(|e| CallFailed::Fatal(e.to_string()))?;
                let mut m = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body);
                if fifo {
                    m = m.message_group_id(&e.key).message_deduplication_id(&e.id);
                }
                m.build().map_err(|e| CallFailed::Fatal(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = client
            .send_message_batch()
            .queue_url(queue)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| {
                let text = tidemark_aws_errors::describe(&e);
                CallFailed::of(&e, text)
            })?;
        Ok(out
            .failed()
            .iter()
            .filter_map(|f| f.id().parse().ok())
            .collect())
    })
    .await
}

/// Why one call sent nothing.
#[derive(Debug, Clone, PartialEq)]
enum CallFailed {
    /// No answer or a transient one (timeout, connection, 5xx, throttling):
    /// every entry counts as refused and is sent again after the back-off.
    Transient(String),
    /// An answer no retry changes (permissions, a missing stream or queue).
    Fatal(String),
}

impl CallFailed {
    /// Sorts an SDK error by the shared classifier.
    fn of<E, R>(e: &aws_sdk_kinesis::error::SdkError<E, R>, text: String) -> Self
    where
        E: aws_sdk_kinesis::error::ProvideErrorMetadata,
        R: tidemark_aws_errors::HttpStatus,
    {
        if tidemark_aws_errors::classify(e).is_retryable() {
            Self::Transient(text)
        } else {
            Self::Fatal(text)
        }
    }
}

/// Sends `pending` with `call`, which returns the indexes of the entries the
/// service refused (throttled), and sends those again after a back-off with
/// jitter, until none is refused or 50 attempts have failed. A call that
/// failed transiently (it timed out, say, under a loaded emulator) refuses
/// every entry and takes one of those attempts: the SDK's own retries are
/// off for produce, so one budget bounds every retry.
async fn until_accepted<T: Clone>(
    mut pending: Vec<T>,
    mut call: impl AsyncFnMut(&[T]) -> Result<Vec<usize>, CallFailed>,
) -> Result<(), String> {
    use backon::BackoffBuilder;
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .with_max_times(50)
        .build();
    let mut last_failure = None;
    while !pending.is_empty() {
        match call(&pending).await {
            Ok(refused) => {
                pending = refused
                    .into_iter()
                    .filter_map(|i| pending.get(i).cloned())
                    .collect();
                if pending.is_empty() {
                    break;
                }
            }
            Err(CallFailed::Fatal(e)) => return Err(e),
            Err(CallFailed::Transient(e)) => last_failure = Some(e),
        }
        match delays.next() {
            Some(d) => tokio::time::sleep(d).await,
            None => {
                let why = last_failure.map_or(String::new(), |e| format!(" (last failure: {e})"));
                return Err(format!(
                    "{} entries still refused after 50 attempts{why}",
                    pending.len()
                ));
            }
        }
    }
    Ok(())
}

/// Bytes of keys and data `produce` puts in one PutRecords call. The API
/// allows 10 MiB, but a call that large takes seconds on a loaded emulator
/// (kinesis-local took 6.5 s for 4 MB), long enough to hit the attempt
/// timeout; 1 MiB calls keep each attempt short and a retry cheap. A larger
/// record (a stream may take up to 10 MiB) goes alone.
const MAX_PUT_BYTES: usize = 1 << 20;

/// Records per PutRecords call, at most.
const MAX_PUT_RECORDS: usize = 500;

/// A KPL aggregate's own bytes: the magic number, the MD5 trailer, slack.
const AGGREGATE_OVERHEAD: usize = 4 + 16 + 32;
/// A user record's framing in a KPL aggregate (protobuf tags and lengths,
/// its key's entry in the key table), at most.
const PER_USER_RECORD: usize = 32;

/// Packs `events` into KPL aggregates of at most `n` user records each,
/// starting a new aggregate where the next event would take it past
/// `max_record` bytes (its partition key included), as the KPL does.
/// An event too large for any aggregate goes alone; [`put_calls`] refuses it.
fn aggregates(events: &[Produced], n: usize, max_record: usize) -> Vec<(String, Vec<u8>)> {
    let mut records = Vec::new();
    let mut users: Vec<(String, Vec<u8>)> = Vec::new();
    let mut bytes = 0;
    let mut flush = |users: &mut Vec<(String, Vec<u8>)>| {
        // The KPL puts an aggregate under its first user record's key.
        let key = users.first().map(|u| u.0.clone()).unwrap_or_default();
        records.push((key, tidemark_consumer::kinesis::kpl_aggregate(users)));
        users.clear();
    };
    for e in events {
        let size = e.key.len() + e.body.len() + PER_USER_RECORD;
        let key_len = users.first().map_or(e.key.len(), |u| u.0.len());
        if !users.is_empty()
            && (users.len() >= n.max(1) || key_len + AGGREGATE_OVERHEAD + bytes + size > max_record)
        {
            flush(&mut users);
            bytes = 0;
        }
        bytes += size;
        users.push((e.key.clone(), e.body.clone()));
    }
    if !users.is_empty() {
        flush(&mut users);
    }
    records
}

/// A record to put: (partition key, data).
type KeyedRecord = (String, Vec<u8>);

/// Splits `records` into PutRecords calls of at most 500 records and
/// [`MAX_PUT_BYTES`] of keys and data (a record larger than that goes
/// alone). A record over `max_record` bytes (key and data) is refused before
/// anything is sent: Kinesis would refuse it, and retrying cannot help.
fn put_calls(
    records: Vec<KeyedRecord>,
    max_record: MaxRecordSize,
) -> Result<Vec<Vec<KeyedRecord>>, String> {
    if let Some((n, (k, d))) = records
        .iter()
        .enumerate()
        .find(|(_, (k, d))| k.len() + d.len() > max_record.bytes())
    {
        return Err(format!(
            "record {n} is {} bytes (partition key {} + data {}), over the stream's maximum record size of {} bytes ({}; MaxRecordSizeInKiB)",
            k.len() + d.len(),
            k.len(),
            d.len(),
            max_record.bytes(),
            max_record.describe()
        ));
    }
    Ok(calls_of(records, MAX_PUT_RECORDS, MAX_PUT_BYTES, |r| {
        r.0.len() + r.1.len()
    }))
}

/// Splits `items` in order into calls of at most `most` items and
/// `max_bytes` (by `size`); an item larger than `max_bytes` goes alone.
fn calls_of<T>(
    items: Vec<T>,
    most: usize,
    max_bytes: usize,
    size: impl Fn(&T) -> usize,
) -> Vec<Vec<T>> {
    let mut calls = Vec::new();
    let mut call: Vec<T> = Vec::new();
    let mut bytes = 0;
    for item in items {
        let n = size(&item);
        if !call.is_empty() && (call.len() >= most || bytes + n > max_bytes) {
            calls.push(std::mem::take(&mut call));
            bytes = 0;
        }
        bytes += n;
        call.push(item);
    }
    if !call.is_empty() {
        calls.push(call);
    }
    calls
}

/// The entries of a PutRecords answer to send again: throttled ones and
/// internal failures. Any other error code (`InvalidArgumentException` for
/// a record too large, a KMS key disabled or denied) is refused for good,
/// and the whole send fails with Kinesis's message rather than retrying 50
/// times.
fn refused_entries(out: &PutRecordsOutput) -> Result<Vec<usize>, CallFailed> {
    let mut again = Vec::new();
    for (i, r) in out.records().iter().enumerate() {
        match r.error_code() {
            None => {}
            Some(
                "ProvisionedThroughputExceededException"
                | "InternalFailure"
                | "KMSThrottlingException",
            ) => again.push(i),
            Some(code) => {
                return Err(CallFailed::Fatal(format!(
                    "record {i} refused: {code}: {}",
                    r.error_message().unwrap_or("no message")
                )));
            }
        }
    }
    Ok(again)
}

/// PutRecords of raw `(partition key, data)` records, in calls of at most
/// [`MAX_PUT_BYTES`], retrying throttled ones.
async fn put_kinesis(k: &KinesisStream, records: Vec<(String, Vec<u8>)>) -> Result<(), String> {
    for records in put_calls(records, k.max_record)? {
        until_accepted(records, async |pending: &[(String, Vec<u8>)]| {
            let entries = pending
                .iter()
                .map(|(key, d)| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(key)
                        .data(Blob::new(d.clone()))
                        .build()
                        .map_err(|e| CallFailed::Fatal(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = k
                .client
                .put_records()
                .stream_name(&k.stream)
                .set_records(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    let text = tidemark_aws_errors::describe(&e);
                    CallFailed::of(&e, text)
                })?;
            refused_entries(&out)
        })
        .await?;
    }
    Ok(())
}

/// Pads `body`, a JSON object, to exactly `size` bytes with a `padding`
/// field of `x`s added last, so `produce --size` makes large events that
/// stay valid JSON. Refused when the event is already too large for it.
pub(crate) fn pad(body: &mut Vec<u8>, size: usize) -> Result<(), String> {
    let Some(close) = body.iter().rposition(|b| *b == b'}') else {
        return Err("--size pads JSON objects; this event is not one".into());
    };
    let empty = body[..close]
        .iter()
        .rev()
        .find(|b| !b.is_ascii_whitespace())
        == Some(&b'{');
    let field = if empty {
        "\"padding\":\""
    } else {
        ",\"padding\":\""
    };
    let fixed = body.len() + field.len() + 1;
    let Some(fill) = size.checked_sub(fixed) else {
        return Err(format!(
            "--size {size} is smaller than an event with its padding field ({fixed} bytes)"
        ));
    };
    let tail = body.split_off(close);
    body.reserve(size - body.len());
    body.extend_from_slice(field.as_bytes());
    body.resize(body.len() + fill, b'x');
    body.push(b'"');
    body.extend_from_slice(&tail);
    Ok(())
}

/// A byte count as `--size` takes it: `900000`, `900KB`, `900KiB`, `1MiB`,
/// `1.5MB` (KB and MB are powers of 1000, KiB and MiB of 1024).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "kib" => 1024.0,
        "mb" | "m" => 1e6,
        "mib" => 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in size `{text}` (B, KB, KiB, MB or MiB)"
            ));
        }
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. 900KiB, 1MiB, 500000)"))?;
    let bytes = (n * scale).round();
    if !(1.0..=1e12).contains(&bytes) {
        return Err(format!("size `{text}` is out of range"));
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn refused_entries_alone_are_sent_again_until_accepted() {
        let mut calls: Vec<Vec<u32>> = Vec::new();
        // The service refuses entry 7 twice and entry 3 once.
        let mut refusals = std::collections::HashMap::from([(7, 2), (3, 1)]);
        let result = until_accepted((0..10u32).collect(), async |pending: &[u32]| {
            calls.push(pending.to_vec());
            let mut refused = Vec::new();
            for (i, e) in pending.iter().enumerate() {
                if let Some(n) = refusals.get_mut(e).filter(|n| **n > 0) {
                    *n -= 1;
                    refused.push(i);
                }
            }
            Ok(refused)
        })
        .await;
        assert_eq!(result, Ok(()));
        assert_eq!(
            calls,
            vec![(0..10).collect::<Vec<_>>(), vec![3, 7], vec![7]]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_fifty_attempts_and_says_how_many() {
        let mut attempts = 0;
        let result = until_accepted(vec![1, 2], async |pending: &[i32]| {
            attempts += 1;
            Ok((0..pending.len()).collect())
        })
        .await;
        assert_eq!(attempts, 51, "the first call and 50 retries");
        assert_eq!(
            result,
            Err("2 entries still refused after 50 attempts".to_string())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_call_is_sent_again_and_a_fatal_one_ends_at_once() {
        let mut calls = 0;
        let result = until_accepted(vec![1, 2, 3], async |pending: &[i32]| {
            calls += 1;
            match calls {
                1 | 2 => Err(CallFailed::Transient("attempt timeout".into())),
                _ => Ok(if pending.len() == 3 { vec![] } else { vec![0] }),
            }
        })
        .await;
        assert_eq!(result, Ok(()));
        assert_eq!(calls, 3, "two timed-out calls, then every entry at once");

        let mut calls = 0;
        let result = until_accepted(vec![1], async |_: &[i32]| {
            calls += 1;
            Err(CallFailed::Fatal("AccessDenied".into()))
        })
        .await;
        assert_eq!(result, Err("AccessDenied".to_string()));
        assert_eq!(calls, 1, "a fatal answer is not retried");

        let result = until_accepted(vec![1], async |_: &[i32]| {
            Err(CallFailed::Transient("attempt timeout".into()))
        })
        .await;
        assert_eq!(
            result,
            Err("1 entries still refused after 50 attempts (last failure: attempt timeout)".into())
        );
    }

    #[test]
    fn put_calls_hold_at_most_500_records_and_a_mebibyte() {
        let record = |n: usize| ("k".to_string(), vec![0u8; n]);
        // 600 small records: 500 + 100.
        let mib = MaxRecordSize::of(None);
        let sizes: Vec<usize> = put_calls((0..600).map(|_| record(10)).collect(), mib)
            .unwrap()
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, vec![500, 100]);
        // 300 KiB records: three fit in 1 MiB, the fourth starts a new call.
        let calls = put_calls((0..7).map(|_| record(300 << 10)).collect(), mib).unwrap();
        assert_eq!(
            calls.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![3, 3, 1]
        );
        for call in &calls {
            let bytes: usize = call.iter().map(|(k, d)| k.len() + d.len()).sum();
            assert!(bytes <= MAX_PUT_BYTES, "{bytes}");
        }
        // A record over the cap goes alone; nothing is lost or reordered.
        let ten = MaxRecordSize::of(Some(10_240));
        let calls = put_calls(vec![record(1), record(2 << 20), record(3)], ten).unwrap();
        assert_eq!(
            calls.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1, 1, 1]
        );
        let lens: Vec<usize> = calls.concat().iter().map(|r| r.1.len()).collect();
        assert_eq!(lens, vec![1, 2 << 20, 3]);
    }

    #[test]
    fn sqs_batches_of_large_events_stay_under_256_kib() {
        let event = |n: usize| Produced {
            key: "k".into(),
            id: "i".into(),
            body: vec![b'x'; n],
        };
        // Call sizes (in events) of `n` events of `bytes` each.
        let split = |n: usize, bytes: usize| -> Vec<usize> {
            calls_of(
                (0..n).map(|_| event(bytes)).collect(),
                10,
                SQS_BATCH_BYTES,
                |e| e.body.len(),
            )
            .iter()
            .map(Vec::len)
            .collect()
        };
        assert_eq!(split(10, 100_000), vec![2, 2, 2, 2, 2]);
        assert_eq!(split(25, 100), vec![10, 10, 5]);
        assert_eq!(split(2, 300_000), vec![1, 1], "a larger message goes alone");
    }

    #[test]
    fn a_record_over_the_streams_limit_is_refused_before_any_call() {
        // Partition key and data count together, as Kinesis counts them.
        let mib = MaxRecordSize::of(None);
        let key = "device-0000".to_string();
        let fits = (key.clone(), vec![b'x'; (1 << 20) - key.len()]);
        assert_eq!(put_calls(vec![fits.clone()], mib).unwrap().len(), 1);
        let over = (key.clone(), vec![b'x'; (1 << 20) - key.len() + 1]);
        let err = put_calls(vec![fits, over.clone()], mib).unwrap_err();
        assert!(
            err.contains("record 1 is 1048577 bytes") && err.contains("1024 KiB (default)"),
            "{err}"
        );
        // The same record fits a stream raised to 10 MiB, alone in its call.
        let ten = MaxRecordSize::of(Some(10_240));
        let calls = put_calls(vec![over.clone(), over], ten).unwrap();
        assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 1]);
    }

    #[test]
    fn a_record_refused_as_invalid_is_not_retried() {
        use aws_sdk_kinesis::types::PutRecordsResultEntry;
        let entry = |code: Option<&str>| {
            let e = PutRecordsResultEntry::builder();
            match code {
                Some(c) => e.error_code(c).error_message(format!("{c} message")),
                None => e.shard_id("shardId-000000000000").sequence_number("1"),
            }
            .build()
        };
        let answer = |codes: &[Option<&str>]| {
            PutRecordsOutput::builder()
                .set_records(Some(codes.iter().map(|c| entry(*c)).collect()))
                .build()
                .unwrap()
        };
        // Throttled and internal failures are sent again.
        let out = answer(&[
            None,
            Some("ProvisionedThroughputExceededException"),
            None,
            Some("InternalFailure"),
        ]);
        assert_eq!(refused_entries(&out), Ok(vec![1, 3]));
        // kinesis-local answers a record over 1 MiB so; AWS a KMS denial.
        for code in ["InvalidArgumentException", "KMSAccessDeniedException"] {
            let out = answer(&[None, Some(code)]);
            match refused_entries(&out) {
                Err(CallFailed::Fatal(e)) => {
                    assert!(e.contains(code) && e.contains("record 1"), "{e}")
                }
                other => panic!("{code}: {other:?}"),
            }
        }
    }

    #[test]
    fn events_are_padded_to_exactly_the_size_and_stay_json() {
        let spec = ProduceSpec {
            devices: 10,
            count: 10,
            hot_factor: 1,
            seed: 1,
        };
        for size in [300, 4096, (1 << 20) - 11] {
            let mut e = spec.produced(3, Utc::now());
            let before: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
            pad(&mut e.body, size).unwrap();
            assert_eq!(e.body.len(), size);
            let mut after: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
            let padding = after.as_object_mut().unwrap().remove("padding").unwrap();
            assert!(padding.as_str().unwrap().bytes().all(|b| b == b'x'));
            assert_eq!(after, before, "the event's own fields are unchanged");
        }
        let mut empty = b"{ }".to_vec();
        pad(&mut empty, 20).unwrap();
        assert_eq!(empty.len(), 20);
        serde_json::from_slice::<serde_json::Value>(&empty).unwrap();
        let mut e = spec.produced(3, Utc::now());
        let err = pad(&mut e.body, 50).unwrap_err();
        assert!(err.contains("--size 50 is smaller"), "{err}");
    }

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_size("900000"), Ok(900_000));
        assert_eq!(parse_size("900KB"), Ok(900_000));
        assert_eq!(parse_size("900KiB"), Ok(921_600));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1.5 MB"), Ok(1_500_000));
        assert_eq!(parse_size("10mib"), Ok(10 << 20));
        assert!(parse_size("1GB").unwrap_err().contains("unknown unit"));
        assert!(parse_size("big").is_err());
        assert!(parse_size("0").is_err());
    }

    fn stream(kib: Option<i32>) -> KinesisStream {
        let conf = aws_sdk_kinesis::Config::builder()
            .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
            .build();
        let mut s = KinesisStream::new(aws_sdk_kinesis::Client::from_conf(conf), "events".into());
        s.max_record = MaxRecordSize::of(kib);
        s
    }

    #[test]
    fn a_size_over_the_streams_record_limit_is_refused_with_the_way_to_raise_it() {
        let plain = Target::Kinesis(stream(None));
        assert_eq!(plain.check_event_size((1 << 20) - 11, 11), Ok(()));
        let err = plain.check_event_size((1 << 20) - 10, 11).unwrap_err();
        assert!(
            err.contains("MaxRecordSizeInKiB not reported, so the default 1024 KiB")
                && err.contains("update-max-record-size")
                && err.contains("--max-record-size-in-ki-b 10240")
                && err.contains("1048565 bytes for an event"),
            "{err}"
        );
        let raised = Target::Kinesis(stream(Some(10_240)));
        assert_eq!(raised.check_event_size(5 << 20, 11), Ok(()));
        let err = raised.check_event_size(10 << 20, 11).unwrap_err();
        assert!(
            err.contains("MaxRecordSizeInKiB = 10240") && !err.contains("update-max-record-size"),
            "{err}"
        );
        // An aggregate's framing counts too.
        let agg = Target::KinesisAggregated(stream(None), 10);
        assert!(agg.check_event_size((1 << 20) - 11, 11).is_err());
        assert_eq!(agg.check_event_size(900_000, 11), Ok(()));
    }

    /// The stream's own limit is read (and its ARN, for the command that
    /// raises it); a stream that cannot be described keeps the default.
    #[tokio::test]
    async fn the_streams_record_size_is_read_and_the_default_kept_when_unreadable() {
        use aws_sdk_kinesis::operation::describe_stream_summary::{
            DescribeStreamSummaryError, DescribeStreamSummaryOutput,
        };
        use aws_sdk_kinesis::types::{StreamDescriptionSummary, StreamStatus};
        use aws_smithy_mocks::{RuleMode, mock, mock_client};
        let arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/events";
        let described =
            mock!(aws_sdk_kinesis::Client::describe_stream_summary).then_output(move || {
                let s = StreamDescriptionSummary::builder()
                    .stream_name("events")
                    .stream_arn(arn)
                    .stream_status(StreamStatus::Active)
                    .retention_period_hours(24)
                    .stream_creation_timestamp(aws_smithy_types::DateTime::from_secs(1_764_000_000))
                    .set_enhanced_monitoring(Some(vec![]))
                    .open_shard_count(1)
                    .max_record_size_in_kib(10_240)
                    .build()
                    .unwrap();
                DescribeStreamSummaryOutput::builder()
                    .stream_description_summary(s)
                    .build()
            });
        let mut k = stream(None);
        k.client = mock_client!(aws_sdk_kinesis, RuleMode::MatchAny, [&described]);
        k.read_max_record().await.unwrap();
        assert_eq!(k.max_record, MaxRecordSize::of(Some(10_240)));
        assert_eq!(k.max_record.bytes(), 10 << 20);
        let err = Target::Kinesis(k.clone())
            .check_event_size(11 << 20, 11)
            .unwrap_err();
        assert!(err.contains("MaxRecordSizeInKiB = 10240"), "{err}");

        let denied = mock!(aws_sdk_kinesis::Client::describe_stream_summary).then_error(|| {
            DescribeStreamSummaryError::generic(
                aws_sdk_kinesis::error::ErrorMetadata::builder()
                    .code("AccessDeniedException")
                    .message("not authorized to perform kinesis:DescribeStreamSummary")
                    .build(),
            )
        });
        let mut k = stream(None);
        k.client = mock_client!(aws_sdk_kinesis, RuleMode::MatchAny, [&denied]);
        let why = k.read_max_record().await.unwrap_err();
        assert!(why.contains("DescribeStreamSummary"), "{why}");
        assert_eq!(k.max_record, MaxRecordSize::of(None), "the default stays");
        let err = Target::Kinesis(k)
            .check_event_size(2 << 20, 11)
            .unwrap_err();
        assert!(err.contains("<the stream's ARN>"), "{err}");
    }

    #[test]
    fn aggregates_stay_within_the_record_size_and_keep_every_event() {
        let spec = ProduceSpec {
            devices: 10,
            count: 40,
            hot_factor: 1,
            seed: 1,
        };
        let events: Vec<Produced> = (0..40)
            .map(|n| {
                let mut e = spec.produced(n, Utc::now());
                pad(&mut e.body, 300_000).unwrap();
                e
            })
            .collect();
        let max = MaxRecordSize::of(None).bytes();
        let records = aggregates(&events, 10, max);
        // Three events of 300 KB fit in 1 MiB, not four.
        assert_eq!(records.len(), 14);
        for (key, data) in &records {
            assert!(key.len() + data.len() <= max, "{}", data.len());
        }
        // Every event's bytes are in some aggregate (aggregates are checked
        // byte for byte against the consumer's deaggregation in its tests).
        let packed: usize = records.iter().map(|r| r.1.len()).sum();
        let bodies: usize = events.iter().map(|e| e.body.len()).sum();
        assert!(packed >= bodies && packed < bodies + 40 * PER_USER_RECORD + 14 * 64);
        // Small events: n per aggregate as before.
        let small: Vec<Produced> = (0..25).map(|n| spec.produced(n, Utc::now())).collect();
        assert_eq!(aggregates(&small, 10, max).len(), 3);
    }

    #[test]
    fn events_are_deterministic_and_the_hot_device_is_hot() {
        let spec = ProduceSpec {
            devices: 200,
            count: 20_000,
            hot_factor: 20,
            seed: 7,
        };
        let at = Utc::now();
        assert_eq!(spec.event(5, at), spec.event(5, at));
        let mut per_device = std::collections::HashMap::<String, u64>::new();
        for n in 0..spec.count {
            *per_device.entry(spec.event(n, at).device_id).or_default() += 1;
        }
        let hot = per_device["device-0000"] as f64;
        let others: f64 = per_device
            .iter()
            .filter(|(d, _)| *d != "device-0000")
            .map(|(_, c)| *c as f64)
            .sum::<f64>()
            / (per_device.len() - 1) as f64;
        let ratio = hot / others;
        assert!(
            (15.0..25.0).contains(&ratio),
            "hot device at {ratio:.1}x the others"
        );
        assert_eq!(per_device.len(), 200);
        let ids: std::collections::HashSet<_> =
            (0..1000).map(|n| spec.event(n, at).event_id).collect();
        assert_eq!(ids.len(), 1000, "event ids are unique");
    }
}
