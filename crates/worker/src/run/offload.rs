//! Oversized events' payloads (`schema.oversize = "s3"`): the object a
//! pointer item names is written, and confirmed, before the item is handed
//! to the writer, so an item never points at nothing; the record is
//! acknowledged only once its item is stored, so the checkpoint follows
//! both. Objects are content-addressed (`<prefix>/sha256/<hex>`): a replay
//! writes the same key with the same bytes.
//!
//! A failing PutObject is retried with the writer's back-off, each attempt
//! bounded by the writer's call timeout, for at most
//! `oversize_s3.max_retry_time`; a refusal (access denied, no such bucket)
//! is not retried. Either way the event is then dead-lettered whole with
//! the reason `payload_store_failed`: never dropped, and its shard moves on.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use bytes::Bytes;
use futures::future::BoxFuture;
use tidemark_schema::route::Offload;
use tokio::time::Instant;
use tracing::warn;

/// Why one PutObject failed.
#[derive(Debug, Clone)]
pub(crate) struct StoreError {
    pub(crate) message: String,
    /// No retry can fix it (refused, not throttled or unanswered).
    pub(crate) permanent: bool,
}

/// Where payloads go: S3 in a worker, a fake in tests.
pub(crate) trait PayloadStore: Send + Sync {
    /// Writes `payload` as `object` (one attempt).
    fn put<'a>(
        &'a self,
        object: &'a Offload,
        payload: Bytes,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// Payloads in S3, encrypted with `kms_key_id` when set.
pub(crate) struct S3Payloads {
    pub(crate) client: aws_sdk_s3::Client,
    pub(crate) kms_key_id: Option<String>,
}

impl PayloadStore for S3Payloads {
    fn put<'a>(
        &'a self,
        object: &'a Offload,
        payload: Bytes,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut put = self
                .client
                .put_object()
                .bucket(&object.bucket)
                .key(&object.key)
                .content_type("application/octet-stream")
                .body(aws_sdk_s3::primitives::ByteStream::from(payload));
            if let Some(k) = &self.kms_key_id {
                put = put
                    .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::AwsKms)
                    .ssekms_key_id(k);
            }
            put.send().await.map(|_| ()).map_err(|e| StoreError {
                message: tidemark_aws_errors::describe(&e),
                permanent: !tidemark_aws_errors::classify(&e).is_retryable(),
            })
        })
    }
}

/// Writes payloads within bounds.
pub(crate) struct Offloader {
    store: Box<dyn PayloadStore>,
    backoff_base: Duration,
    backoff_cap: Duration,
    call_timeout: Duration,
    max_retry_time: Duration,
}

impl Offloader {
    /// Writes to `store`, retrying with `writer`'s back-off and call
    /// timeout for at most `max_retry_time`.
    pub(crate) fn new(
        store: Box<dyn PayloadStore>,
        writer: &tidemark_writer::WriterConfig,
        max_retry_time: Duration,
    ) -> Offloader {
        Offloader {
            store,
            backoff_base: writer.backoff_base,
            backoff_cap: writer.backoff_cap,
            call_timeout: writer.call_timeout,
            max_retry_time,
        }
    }

    /// Writes `payload` as `object`, retried within the bounds; the error
    /// says why it is not written (for the dead letter).
    pub(crate) async fn store(&self, object: &Offload, payload: Bytes) -> Result<(), String> {
        let deadline = Instant::now() + self.max_retry_time;
        let mut delays = ExponentialBuilder::default()
            .with_min_delay(self.backoff_base)
            .with_max_delay(self.backoff_cap)
            .with_jitter()
            .without_max_times()
            .build();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let error = match tokio::time::timeout(
                self.call_timeout,
                self.store.put(object, payload.clone()),
            )
            .await
            {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) if e.permanent => {
                    return Err(format!("S3 refused {}: {}", object.url(), e.message));
                }
                Ok(Err(e)) => e.message,
                Err(_) => format!("no answer within {:?}", self.call_timeout),
            };
            let delay = delays.next().unwrap_or(self.backoff_cap);
            if Instant::now() + delay >= deadline {
                return Err(format!(
                    "writing {} failed {attempts} times within {:?}: {error}",
                    object.url(),
                    self.max_retry_time
                ));
            }
            warn!(object = %object.url(), attempts, %error, "an oversized event's payload was not written to S3; retrying");
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Payloads in memory; the first `fail` puts fail (transiently, or for
    /// good with `permanent`), and puts never answer with `hang`.
    #[derive(Default)]
    pub(crate) struct Fake {
        pub(crate) objects: Mutex<HashMap<String, Bytes>>,
        pub(crate) puts: Mutex<u32>,
        pub(crate) fail: u32,
        pub(crate) permanent: bool,
        pub(crate) hang: bool,
    }

    impl PayloadStore for std::sync::Arc<Fake> {
        fn put<'a>(
            &'a self,
            object: &'a Offload,
            payload: Bytes,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                let n = {
                    let mut puts = self.puts.lock().unwrap();
                    *puts += 1;
                    *puts
                };
                if self.hang {
                    std::future::pending::<()>().await;
                }
                if n <= self.fail {
                    return Err(StoreError {
                        message: "SlowDown".into(),
                        permanent: self.permanent,
                    });
                }
                self.objects
                    .lock()
                    .unwrap()
                    .insert(object.key.clone(), payload);
                Ok(())
            })
        }
    }

    fn object() -> Offload {
        Offload {
            bucket: "b".into(),
            key: "oversize/sha256/00".into(),
            sha256: "00".into(),
            bytes: 3,
        }
    }

    fn offloader(fake: &std::sync::Arc<Fake>) -> Offloader {
        Offloader::new(
            Box::new(fake.clone()),
            &tidemark_writer::WriterConfig::default(),
            Duration::from_secs(30),
        )
    }

    /// Transient failures are retried until the put succeeds.
    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried() {
        let fake = std::sync::Arc::new(Fake {
            fail: 3,
            ..Fake::default()
        });
        offloader(&fake)
            .store(&object(), Bytes::from_static(b"abc"))
            .await
            .unwrap();
        assert_eq!(*fake.puts.lock().unwrap(), 4);
        assert_eq!(
            fake.objects.lock().unwrap()["oversize/sha256/00"],
            Bytes::from_static(b"abc")
        );
    }

    /// A refusal is not retried; a put that never answers is given up
    /// within `max_retry_time` (plus one call timeout), with the reason.
    #[tokio::test(start_paused = true)]
    async fn refusals_and_hangs_end_within_bounds() {
        let refused = std::sync::Arc::new(Fake {
            fail: u32::MAX,
            permanent: true,
            ..Fake::default()
        });
        let e = offloader(&refused)
            .store(&object(), Bytes::from_static(b"abc"))
            .await
            .unwrap_err();
        assert!(e.contains("refused") && e.contains("SlowDown"), "{e}");
        assert_eq!(*refused.puts.lock().unwrap(), 1);

        let hung = std::sync::Arc::new(Fake {
            hang: true,
            ..Fake::default()
        });
        let start = Instant::now();
        let e = offloader(&hung)
            .store(&object(), Bytes::from_static(b"abc"))
            .await
            .unwrap_err();
        let took = start.elapsed();
        let call = tidemark_writer::WriterConfig::default().call_timeout;
        assert!(took <= Duration::from_secs(30) + call, "{took:?}");
        assert!(
            took >= Duration::from_secs(30) - call - Duration::from_secs(5),
            "{took:?}"
        );
        assert!(e.contains("no answer"), "{e}");
        assert!(hung.objects.lock().unwrap().is_empty());
    }
}
