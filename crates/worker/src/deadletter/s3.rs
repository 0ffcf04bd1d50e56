//! The S3 bucket destination: entries batched into gzip JSON-lines objects
//! (by size and by age), each entry with its whole payload; and the
//! [`ObjectWriter`] that writes one such object, which the SQS destination
//! also uses for entries too large for its queue.
//!
//! A batch handed to [`S3Sink::write`] joins the object being filled; the
//! call returns once that object is written (PutObject answered 200), so
//! the delivery task acknowledges its records only then. The object is
//! written by whichever call fills it past `max_object_bytes`, or by the
//! first call still waiting when its first entry is `max_object_age` old.
//! A failed PutObject fails every batch the object held; each is tried
//! again by the delivery task (in a new object), so an entry may be
//! written twice, never lost.

use std::io::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use super::entry::DeadLetter;
use super::sink::{DeadLetterError, DeadLetterSink};

/// Where objects go and how they are named and encrypted.
#[derive(Debug)]
pub struct ObjectWriter {
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
    kms_key_id: Option<String>,
    /// `<worker>-<process start, Unix ms>`: no two processes share it.
    name: String,
    seq: AtomicU64,
}

impl ObjectWriter {
    /// Objects in `bucket` under `prefix`, named after `worker`.
    pub fn new(
        client: aws_sdk_s3::Client,
        bucket: String,
        prefix: String,
        kms_key_id: Option<String>,
        worker: &str,
    ) -> Self {
        // A worker id is a host name or a task id; keep keys plain.
        let worker: String = worker
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        ObjectWriter {
            client,
            bucket,
            prefix,
            kms_key_id,
            name: format!("{worker}-{}", Utc::now().timestamp_millis()),
            seq: AtomicU64::new(0),
        }
    }

    /// The key of the next object written at `now`:
    /// `<prefix>/yyyy/mm/dd/hh/<worker>-<start>-<n>.jsonl.gz`.
    fn next_key(&self, now: DateTime<Utc>) -> String {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let hour = now.format("%Y/%m/%d/%H");
        if self.prefix.is_empty() {
            format!("{hour}/{}-{n:06}.jsonl.gz", self.name)
        } else {
            format!("{}/{hour}/{}-{n:06}.jsonl.gz", self.prefix, self.name)
        }
    }

    /// Writes `lines` (JSON lines) gzipped as a new object; returns its
    /// `s3://bucket/key` once S3 confirmed it.
    pub(crate) async fn put(&self, lines: Vec<u8>) -> Result<String, DeadLetterError> {
        let destination = format!("s3://{}/{}", self.bucket, self.prefix);
        let gz = tokio::task::spawn_blocking(move || gzip(&lines))
            .await
            .map_err(|e| DeadLetterError::Destination {
                destination: destination.clone(),
                message: format!("compressing the object failed: {e}"),
                permanent: false,
            })?;
        let key = self.next_key(Utc::now());
        let mut put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .content_type("application/x-ndjson")
            .content_encoding("gzip")
            .body(aws_sdk_s3::primitives::ByteStream::from(gz));
        if let Some(k) = &self.kms_key_id {
            put = put
                .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::AwsKms)
                .ssekms_key_id(k);
        }
        put.send().await.map_err(|e| {
            DeadLetterError::of_class(
                destination,
                tidemark_aws_errors::describe(&e),
                tidemark_aws_errors::classify(&e),
            )
        })?;
        Ok(format!("s3://{}/{key}", self.bucket))
    }
}

/// `data` gzipped (fast level: dead letters are rare, latency counts).
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 4 + 64),
        flate2::Compression::fast(),
    );
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// Entries as JSON lines, each whole.
pub(crate) fn json_lines(entries: &[DeadLetter]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        out.extend_from_slice(e.to_json().as_bytes());
        out.push(b'\n');
    }
    out
}

/// The outcome of one object, shared by every batch it holds.
type Outcome = Option<Result<(), DeadLetterError>>;

/// The object being filled.
struct Open {
    id: u64,
    lines: Vec<u8>,
    due: Instant,
    done: watch::Sender<Outcome>,
}

/// S3 bucket destination (`dead_letters.kind = "s3"`).
pub struct S3Sink {
    objects: ObjectWriter,
    max_bytes: usize,
    max_age: Duration,
    open: Mutex<Option<Open>>,
    ids: AtomicU64,
}

impl std::fmt::Debug for S3Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Sink")
            .field("objects", &self.objects)
            .field("max_bytes", &self.max_bytes)
            .field("max_age", &self.max_age)
            .finish_non_exhaustive()
    }
}

impl S3Sink {
    /// Objects written by `objects`, each once it holds `max_bytes` of JSON
    /// lines or its first entry is `max_age` old.
    pub fn new(objects: ObjectWriter, max_bytes: usize, max_age: Duration) -> Self {
        S3Sink {
            objects,
            max_bytes,
            max_age,
            open: Mutex::new(None),
            ids: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Open>> {
        // Plain data: consistent whatever panicked while holding it.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the sealed object `o` and tells every batch in it.
    async fn flush(&self, o: Open) -> Result<(), DeadLetterError> {
        let result = self.objects.put(o.lines).await.map(|_| ());
        o.done.send_replace(Some(result.clone()));
        result
    }
}

impl DeadLetterSink for S3Sink {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        Box::pin(async move {
            let lines = json_lines(entries);
            // Join the open object (or open one); seal it when full.
            let (id, due, mut rx, full) = {
                let mut open = self.lock();
                let o = open.get_or_insert_with(|| Open {
                    id: self.ids.fetch_add(1, Ordering::Relaxed),
                    lines: Vec::new(),
                    due: Instant::now() + self.max_age,
                    done: watch::channel(None).0,
                });
                o.lines.extend_from_slice(&lines);
                let joined = (o.id, o.due, o.done.subscribe());
                let full = if o.lines.len() >= self.max_bytes {
                    open.take()
                } else {
                    None
                };
                (joined.0, joined.1, joined.2, full)
            };
            if let Some(o) = full {
                return self.flush(o).await;
            }
            tokio::select! {
                r = rx.wait_for(Option::is_some) => {
                    if let Ok(outcome) = r
                        && let Some(result) = outcome.as_ref()
                    {
                        return result.clone();
                    }
                }
                () = tokio::time::sleep_until(due) => {}
            }
            // Due: seal it unless another call already did.
            let sealed = {
                let mut open = self.lock();
                match open.as_ref() {
                    Some(o) if o.id == id => open.take(),
                    _ => None,
                }
            };
            if let Some(o) = sealed {
                return self.flush(o).await;
            }
            match rx.wait_for(Option::is_some).await {
                Ok(outcome) => outcome.clone().unwrap_or(Ok(())),
                // The sealing call was dropped (its write timed out) before
                // it said: tried again, as any transient failure.
                Err(_) => Err(DeadLetterError::Destination {
                    destination: format!("s3://{}", self.objects.bucket),
                    message: "the object holding these entries was abandoned".into(),
                    permanent: false,
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::entry::samples::entry;
    use super::*;
    use std::io::Read as _;

    fn writer() -> ObjectWriter {
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .build();
        ObjectWriter::new(
            aws_sdk_s3::Client::from_conf(conf),
            "b".into(),
            "dl".into(),
            None,
            "ip-10-0-0-1.ec2/task 7",
        )
    }

    #[test]
    fn keys_follow_the_documented_layout() {
        let w = writer();
        let t = DateTime::parse_from_rfc3339("2026-03-04T05:06:07Z")
            .unwrap()
            .with_timezone(&Utc);
        let a = w.next_key(t);
        let b = w.next_key(t);
        assert!(
            a.starts_with("dl/2026/03/04/05/ip-10-0-0-1.ec2_task_7-"),
            "{a}"
        );
        assert!(a.ends_with("-000000.jsonl.gz") && b.ends_with("-000001.jsonl.gz"));
    }

    #[test]
    fn objects_are_gzip_json_lines_of_whole_entries() {
        let entries: Vec<DeadLetter> = [10usize, 700_000]
            .iter()
            .enumerate()
            .map(|(n, size)| entry(n as u32, &vec![b'k'; *size]))
            .collect();
        let gz = gzip(&json_lines(&entries));
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap();
        let back: Vec<DeadLetter> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, entries);
        assert!(!back[1].payload_truncated);
    }
}
