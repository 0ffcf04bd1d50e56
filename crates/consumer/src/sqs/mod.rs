//! The SQS source: concurrent long-poll receivers, visibility heartbeats and
//! delete-after-acknowledgement.
//!
//! Tasks (all stop on one cancellation token):
//! - receivers (1 to `max_receivers`, adapted by `scaler::Scaler`) each
//!   loop: take in-flight permits (backpressure), ReceiveMessage (up to 10,
//!   long poll), decode each body by `record_format` (`body`: one record
//!   per inner event, its position the record's index), admit the messages to the
//!   `ledger::Ledger` and send their records to the sink as one batch;
//! - the deleter turns fully acknowledged messages into DeleteMessageBatch
//!   calls (10 per call, 4 calls at a time);
//! - the heartbeat extends the visibility of every message in flight whose
//!   visibility ends within `heartbeat_margin`, and gives up messages whose
//!   acknowledgement never came within `max_processing_time`; each of its
//!   calls is one attempt (no SDK retries) bounded by half the margin, so a
//!   hung call leaves time for the next tick's before visibility ends;
//! - the releaser hands held-back FIFO messages to the sink when their
//!   predecessor is acknowledged.
//!
//! Guarantees:
//! - Delete after store: a message is deleted only once every record made
//!   from it was acknowledged (stored or dead-lettered). A dropped [`Ack`]
//!   keeps its message from being deleted.
//! - No redelivery for slowness: while a message waits for its writes, its
//!   visibility is extended before it runs out (up to `max_processing_time`).
//! - FIFO order: on a `.fifo` queue, a message's records reach the sink only
//!   after every earlier message of its MessageGroupId is acknowledged, so a
//!   group's messages are stored in order whatever the writer's concurrency.
//! - Bounded memory: at most `max_in_flight_messages` messages are held,
//!   and their records at most `max_in_flight_bytes` decoded (plus one
//!   message): receiving waits for room, a receive batch is decoded message
//!   by message only while there is room (the rest is made visible again
//!   if room does not come in time), and awaiting the sink is backpressure
//!   too.
//! - Shutdown: receiving stops, messages not yet handed to the pipeline are
//!   made visible again at once, in-flight ones get `shutdown_grace` to be
//!   stored and deleted, and the rest are then made visible at once.
//!
//! Files: `receive` (receivers, dispatch, the FIFO releaser), `visibility`
//! (heartbeat, releases), `delete` (the deleter), `queue` (what the tasks
//! share), `ledger` (the pure in-flight bookkeeping), `scaler` (the pure
//! receiver-count law), `body` (what SQS wraps around a record),
//! `config`.
//!
//! [`Ack`]: crate::record::Ack

// `pub` items for the `testing` module (the fuzz target).
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod body;
mod config;
mod delete;
mod ledger;
mod queue;
mod receive;
mod scaler;
mod visibility;

use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use config::SqsConfig;

use crate::error::ConsumerError;
use crate::metrics::sqs as metric;
use crate::record::Record;
use crate::source::Source;
use delete::deleter;
use ledger::Ledger;
use queue::{InFlight, QueueRun};
use receive::{receiver, releaser};
use scaler::Scaler;
use visibility::{heartbeat, release};

/// The SQS source. See the module docs for its guarantees.
#[derive(Debug)]
pub struct SqsSource {
    config: SqsConfig,
    client: aws_sdk_sqs::Client,
    running: Option<Arc<watch::Sender<bool>>>,
}

impl SqsSource {
    /// A source reading `config.queue_url`.
    pub fn new(config: SqsConfig, client: aws_sdk_sqs::Client) -> Self {
        Self {
            config,
            client,
            running: None,
        }
    }

    /// Set to `true` once the source receives (the worker's start-up ends
    /// there).
    pub fn with_running(mut self, running: Arc<watch::Sender<bool>>) -> Self {
        self.running = Some(running);
        self
    }

    /// Runs until `shutdown` is cancelled (or the sink is closed), then
    /// drains as the module docs describe and returns. Records go to `sink`
    /// in batches (one per receive call, or one per held-back FIFO message);
    /// awaiting `send` is backpressure. Errors: invalid config, or an SQS
    /// error that retrying cannot fix (missing queue, access denied).
    pub async fn run(
        self,
        sink: mpsc::Sender<Vec<Record>>,
        shutdown: CancellationToken,
    ) -> Result<(), ConsumerError> {
        self.config.validate()?;
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let (start_tx, start_rx) = mpsc::unbounded_channel();
        let (grow_tx, mut grow_rx) = mpsc::unbounded_channel();
        let in_flight = Arc::new(InFlight {
            ledger: Mutex::new(Ledger::default()),
            done_tx,
            start_tx,
            permits: Arc::new(Semaphore::new(self.config.max_in_flight_messages)),
            count: watch::Sender::new(0),
            freed: Default::default(),
        });
        let queue = Arc::new(QueueRun {
            name: self.config.queue_name().to_string(),
            fifo: self.config.is_fifo(),
            scaler: Mutex::new(Scaler::new(self.config.max_receivers)),
            cfg: self.config,
            client: self.client,
            in_flight: Arc::clone(&in_flight),
            sink,
            stop: shutdown.child_token(),
            finish: CancellationToken::new(),
            error: Mutex::new(None),
            grow_tx,
        });
        info!(queue = %queue.name, fifo = queue.fifo, "sqs source starting");
        let mut background = JoinSet::new();
        background.spawn(deleter(Arc::clone(&queue), done_rx));
        background.spawn(heartbeat(Arc::clone(&queue)));
        background.spawn(releaser(Arc::clone(&queue), start_rx));

        let mut receivers = JoinSet::new();
        receivers.spawn(receiver(Arc::clone(&queue)));
        metrics::gauge!(metric::RECEIVERS).set(1.0);
        if let Some(running) = &self.running {
            running.send_replace(true);
        }
        loop {
            tokio::select! {
                _ = queue.stop.cancelled() => break,
                Some(()) = grow_rx.recv() => {
                    receivers.spawn(receiver(Arc::clone(&queue)));
                }
                Some(res) = receivers.join_next() => {
                    if let Err(e) = res {
                        queue.fail(ConsumerError::Task {
                            source_kind: "sqs",
                            message: e.to_string(),
                        });
                    } else if receivers.is_empty() && !queue.stop.is_cancelled() {
                        // The scaler never goes below one; keep one running.
                        receivers.spawn(receiver(Arc::clone(&queue)));
                    }
                }
            }
        }
        let grace_end = Instant::now() + queue.cfg.shutdown_grace;
        // Polls in progress finish (within wait_time); what they bring is
        // released at once by the receivers themselves.
        while let Some(res) = receivers.join_next().await {
            if let Err(e) = res {
                warn!(error = %e, "sqs receiver task failed");
            }
        }
        metrics::gauge!(metric::RECEIVERS).set(0.0);
        let unstarted = in_flight.with_removal(Ledger::drain_unstarted);
        release(&queue, unstarted, |_| 0, "shutdown").await;
        let mut count = in_flight.count.subscribe();
        // With the pipeline gone (a fatal stop), what is in flight will
        // never be acknowledged: release it now rather than at the grace.
        let sink = queue.sink.clone();
        let drained = tokio::time::timeout_at(grace_end, async {
            tokio::select! {
                _ = count.wait_for(|n| *n == 0) => Ok(()),
                () = sink.closed() => Err(()),
            }
        })
        .await
        .unwrap_or(Err(()));
        if drained.is_err() {
            let left = in_flight.with_removal(Ledger::drain_unfinished);
            warn!(
                count = left.len(),
                "shutdown grace over: releasing unfinished messages"
            );
            release(&queue, left, |_| 0, "shutdown").await;
        }
        queue.finish.cancel();
        while let Some(res) = background.join_next().await {
            if let Err(e) = res {
                warn!(error = %e, "sqs background task failed");
            }
        }
        // Held records point back at the ledger: break the cycle.
        in_flight.lock().clear();
        info!(queue = %queue.name, "sqs source stopped");
        let err = queue
            .error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Source for SqsSource {
    fn kind(&self) -> &'static str {
        "sqs"
    }

    fn run(
        self: Box<Self>,
        sink: mpsc::Sender<Vec<Record>>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), ConsumerError>> {
        Box::pin((*self).run(sink, shutdown))
    }
}

#[cfg(test)]
mod tests {
    use crate::error::{AwsError, ErrorClass};

    #[test]
    fn sqs_codes_are_classified() {
        use aws_sdk_sqs::error::SdkError;
        use aws_sdk_sqs::operation::receive_message::ReceiveMessageError;
        use aws_smithy_types::error::ErrorMetadata;
        let err = |code: &str| {
            let meta = ErrorMetadata::builder().code(code).build();
            SdkError::<ReceiveMessageError, ()>::service_error(
                ReceiveMessageError::generic(meta),
                (),
            )
        };
        assert_eq!(
            AwsError::new("ReceiveMessage", &err("RequestThrottled")).class,
            ErrorClass::Throttled
        );
        assert_eq!(
            AwsError::new("ReceiveMessage", &err("OverLimit")).class,
            ErrorClass::Throttled
        );
        assert_eq!(
            AwsError::new(
                "ReceiveMessage",
                &err("AWS.SimpleQueueService.NonExistentQueue")
            )
            .class,
            ErrorClass::NotFound
        );
        assert_eq!(
            AwsError::new("ReceiveMessage", &err("AccessDenied")).class,
            ErrorClass::Fatal
        );
        assert_eq!(
            AwsError::new("ReceiveMessage", &err("InternalError")).class,
            ErrorClass::Fatal
        );
        assert_eq!(
            AwsError::new("ReceiveMessage", &err("ServiceUnavailable")).class,
            ErrorClass::Retry
        );
    }
}
