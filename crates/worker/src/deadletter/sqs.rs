//! The SQS queue destination: one message per entry, in SendMessageBatch
//! calls sized to the queue's own `MaximumMessageSize`, read at start.

use futures::future::BoxFuture;
use tracing::warn;

use std::borrow::Cow;

use super::entry::DeadLetter;
use super::s3::{ObjectWriter, json_lines};
use super::sink::{DeadLetterError, DeadLetterSink};

/// The message size assumed when the queue's own cannot be read (the
/// default of queues created before August 2025, and the lowest a queue
/// keeps unless it was set lower on purpose). Entries bigger than the
/// queue's size keep a truncated payload plus its full size and SHA-256,
/// so they still say exactly which record it was.
pub(crate) const SQS_MAX_BODY: usize = 256 * 1024;

/// The largest message SQS takes (and the largest SendMessageBatch
/// request): 1 MiB, the default of new queues.
pub(crate) const SQS_LARGEST_BODY: usize = 1024 * 1024;

/// Messages per SendMessageBatch call.
const SQS_MAX_BATCH_ENTRIES: usize = 10;

/// Room kept under SQS's limits for what a body's length does not count
/// exactly (message attributes SQS may add, rounding of the estimate).
const SQS_SLACK: usize = 1024;

/// SQS queue destination.
#[derive(Debug)]
pub struct SqsSink {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    /// The queue's largest message, which is also its largest
    /// SendMessageBatch request (the bodies of its messages together).
    max_body: usize,
    /// Where an entry too large for the queue is kept whole (its message
    /// then points there); none: its payload is truncated.
    overflow: Option<ObjectWriter>,
}

impl SqsSink {
    /// Sends entries to `queue_url`, assuming the old 256 KiB message
    /// size; [`SqsSink::for_queue`] reads the queue's own.
    pub fn new(client: aws_sdk_sqs::Client, queue_url: String) -> Self {
        SqsSink {
            client,
            queue_url,
            max_body: SQS_MAX_BODY,
            overflow: None,
        }
    }

    /// Entries too large for the queue are written whole by `objects`, and
    /// their message points there.
    pub fn with_overflow(mut self, objects: ObjectWriter) -> Self {
        self.overflow = Some(objects);
        self
    }

    /// `entries`, each one too large for the queue replaced by a pointer
    /// to the object now holding it whole (when an overflow bucket is set).
    async fn fitted<'e>(
        &self,
        entries: &'e [DeadLetter],
    ) -> Result<Vec<Cow<'e, DeadLetter>>, DeadLetterError> {
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            match &self.overflow {
                // The JSON's length is its payload's base64 plus a little:
                // no need to serialize the small ones to know.
                Some(objects) if e.cost() + 512 > self.max_body - SQS_SLACK => {
                    let json = e.to_json();
                    if json.len() > self.max_body - SQS_SLACK {
                        let at = objects.put(json_lines(std::slice::from_ref(e))).await?;
                        out.push(Cow::Owned(e.pointer_to(at)));
                        continue;
                    }
                    out.push(Cow::Borrowed(e));
                }
                _ => out.push(Cow::Borrowed(e)),
            }
        }
        Ok(out)
    }

    /// Sends entries to `queue_url`, sized to the queue's
    /// `MaximumMessageSize` (GetQueueAttributes). A queue that cannot be
    /// read for good (access denied) is written as if 256 KiB; a missing
    /// queue, or one that stays unreachable over a few tries, is an error.
    pub async fn for_queue(
        client: aws_sdk_sqs::Client,
        queue_url: String,
    ) -> Result<Self, DeadLetterError> {
        use aws_sdk_sqs::types::QueueAttributeName;
        let mut sink = SqsSink::new(client, queue_url);
        let mut tries = 0;
        let answer = loop {
            tries += 1;
            let call = sink
                .client
                .get_queue_attributes()
                .queue_url(&sink.queue_url)
                .attribute_names(QueueAttributeName::MaximumMessageSize)
                .send()
                .await;
            match call {
                Ok(out) => break Some(out),
                Err(e) => {
                    let class = tidemark_aws_errors::classify(&e);
                    let message = tidemark_aws_errors::describe(&e);
                    if class == tidemark_aws_errors::ErrorClass::NotFound
                        || (class.is_retryable() && tries >= 5)
                    {
                        return Err(DeadLetterError::of_class(
                            sink.queue_url.clone(),
                            format!("reading its MaximumMessageSize: {message}"),
                            class,
                        ));
                    }
                    if !class.is_retryable() {
                        warn!(queue = %sink.queue_url, error = %message,
                            "cannot read the dead-letter queue's MaximumMessageSize (grant sqs:GetQueueAttributes); entries are cut to 256 KiB");
                        break None;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200 << tries)).await;
                }
            }
        };
        if let Some(size) = answer
            .as_ref()
            .and_then(|out| out.attributes())
            .and_then(|a| a.get(&QueueAttributeName::MaximumMessageSize))
            .and_then(|v| v.parse::<usize>().ok())
        {
            sink.max_body = size.clamp(SQS_SLACK * 2, SQS_LARGEST_BODY);
        }
        Ok(sink)
    }

    /// The largest message body this sink sends.
    pub fn max_message_size(&self) -> usize {
        self.max_body
    }
}

impl DeadLetterSink for SqsSink {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        Box::pin(async move {
            let fifo = self.queue_url.ends_with(".fifo");
            let err = |message: String, permanent: bool| DeadLetterError::Destination {
                destination: self.queue_url.clone(),
                message,
                permanent,
            };
            let fitted = self.fitted(entries).await?;
            for batch in sqs_batches(fitted.iter().map(AsRef::as_ref), self.max_body) {
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
                    request.push(b.build().map_err(|e| err(e.to_string(), true))?);
                }
                let out = self
                    .client
                    .send_message_batch()
                    .queue_url(&self.queue_url)
                    .set_entries(Some(request))
                    .send()
                    .await
                    .map_err(|e| {
                        DeadLetterError::of_class(
                            self.queue_url.clone(),
                            tidemark_aws_errors::describe(&e),
                            tidemark_aws_errors::classify(&e),
                        )
                    })?;
                if let Some(f) = out.failed().first() {
                    // SenderFault: SQS refuses the entries themselves
                    // (their content); otherwise its own trouble, which
                    // passes.
                    let refused = out.failed().iter().all(|f| f.sender_fault());
                    return Err(err(
                        format!(
                            "{} of {n} entries failed: {} ({})",
                            out.failed().len(),
                            f.message().unwrap_or(f.code()),
                            f.code()
                        ),
                        refused,
                    ));
                }
            }
            Ok(())
        })
    }
}

/// Entries as SQS message bodies, grouped into SendMessageBatch calls: at
/// most 10 messages, each body within `max` (the queue's message size) and
/// their sum within `max` too (SQS's batch limit equals its message limit),
/// both less [`SQS_SLACK`]. An entry that would not fit beside others gets
/// a call of its own.
fn sqs_batches<'e>(
    entries: impl IntoIterator<Item = &'e DeadLetter>,
    max: usize,
) -> Vec<Vec<(&'e DeadLetter, String)>> {
    let mut batches: Vec<Vec<(&DeadLetter, String)>> = Vec::new();
    let mut size = 0;
    for e in entries {
        let body = e.to_json_within(max - SQS_SLACK);
        let fits = batches.last().is_some_and(|b| {
            b.len() < SQS_MAX_BATCH_ENTRIES && size + body.len() <= max - SQS_SLACK
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

#[cfg(test)]
mod tests {
    use super::super::entry::hex;
    use super::super::entry::samples::{entry, origin};
    use super::*;
    use chrono::Utc;
    use sha2::{Digest, Sha256};
    use tidemark_schema::Reason;

    /// An entry holds its whole payload, whatever its size: only a
    /// destination's limit cuts it (a 1 MiB queue keeps 700 KB whole).
    #[test]
    fn an_entry_keeps_its_whole_payload() {
        let big = vec![b'q'; 700_000];
        let e = DeadLetter::new(
            origin(),
            Reason::ItemTooLarge,
            "big".into(),
            &big,
            Utc::now(),
        );
        assert!(!e.payload_truncated);
        assert_eq!(e.payload().unwrap(), big);
        let json = e.to_json_within(1024 * 1024 - SQS_SLACK);
        let back: DeadLetter = serde_json::from_str(&json).unwrap();
        assert_eq!(back.payload().unwrap(), big, "fits a 1 MiB message whole");
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

    #[test]
    fn sqs_batches_fit_the_message_and_batch_limits() {
        // Large entries: each alone near the limit, never two together.
        let large: Vec<DeadLetter> = (0..3).map(|n| entry(n, &vec![b'x'; 300_000])).collect();
        // Mid-size ones: several per batch, never over the sum.
        let mid: Vec<DeadLetter> = (0..12).map(|n| entry(n, &vec![b'y'; 40_000])).collect();
        // Small ones: 10 per batch.
        let small: Vec<DeadLetter> = (0..25).map(|n| entry(n, b"{}")).collect();
        for (entries, batches) in [(&large, Some(3)), (&mid, None), (&small, Some(3))] {
            let got = sqs_batches(entries.iter(), SQS_MAX_BODY);
            let mut seen = 0;
            for b in &got {
                assert!(!b.is_empty() && b.len() <= SQS_MAX_BATCH_ENTRIES);
                assert!(
                    b.iter()
                        .all(|(_, body)| body.len() <= SQS_MAX_BODY - SQS_SLACK)
                );
                let sum: usize = b.iter().map(|(_, body)| body.len()).sum();
                assert!(sum <= SQS_MAX_BODY - SQS_SLACK, "{sum} bytes in one call");
                seen += b.len();
            }
            assert_eq!(seen, entries.len(), "every entry sent once");
            if let Some(n) = batches {
                assert_eq!(got.len(), n);
            }
        }
        assert!(
            sqs_batches(&mid, SQS_MAX_BODY).len() >= 3,
            "about 5 mid-size entries per call"
        );
    }
}
