//! The SQS source: concurrent long-poll receivers, visibility heartbeats and
//! delete-after-acknowledgement.
//!
//! Tasks (all stop on one cancellation token):
//! - receivers (1 to `max_receivers`, adapted by [`scaler::Scaler`]) each
//!   loop: take in-flight permits (backpressure), ReceiveMessage (up to 10,
//!   long poll), decode each body by `record_format` ([`body`]: one record
//!   per inner event, its position the record's index), admit the messages to the
//!   [`ledger::Ledger`] and send their records to the sink as one batch;
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
//! - Bounded memory: at most `max_in_flight_messages` messages are held;
//!   receiving waits for room, and awaiting the sink is backpressure too.
//! - Shutdown: receiving stops, messages not yet handed to the pipeline are
//!   made visible again at once, in-flight ones get `shutdown_grace` to be
//!   stored and deleted, and the rest are then made visible at once.
//!
//! [`Ack`]: crate::record::Ack

pub mod body;
pub mod config;
pub mod ledger;
pub mod scaler;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageSystemAttributeName,
};
use aws_smithy_types::timeout::TimeoutConfig;
use backon::{BackoffBuilder, ExponentialBuilder};
use bytes::Bytes;
use tidemark_schema::{Origin, Reason};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use config::{SqsConfig, SqsConfigError};

use crate::error::{AwsError, ErrorClass};
use crate::metrics::sqs as metric;
use crate::record::{Ack, AckTarget, Defect, Record};
use config::MAX_RECEIVE_BATCH;
use ledger::{Admit, Entry, Ledger, Phase, Released};
use scaler::{Decision, Scaler};

/// Calls of DeleteMessageBatch in flight at once.
const DELETE_CONCURRENCY: usize = 4;
/// How often the deleter looks for deletes to retry.
const DELETE_RETRY_TICK: Duration = Duration::from_secs(1);
/// Pause after an empty short poll (`wait_time` 0), so an idle queue is not
/// polled in a hot loop.
const EMPTY_SHORT_POLL_PAUSE: Duration = Duration::from_millis(100);
/// After the shutdown grace, how long the last deletes may take.
const FINAL_DELETE_TIME: Duration = Duration::from_secs(5);
/// Time a long poll's answer may take beyond its `wait_time`.
const RECEIVE_MARGIN: Duration = Duration::from_secs(10);

/// Errors of the SQS source.
#[derive(Debug, thiserror::Error)]
pub enum SqsError {
    /// Invalid configuration.
    #[error(transparent)]
    Config(#[from] SqsConfigError),
    /// An SQS call failed in a way that stops the source (missing queue,
    /// access denied).
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// A task of the source panicked (a bug).
    #[error("sqs source task failed: {0}")]
    Task(String),
}

/// The ledger plus what every removal must update; the records' [`Ack`]s
/// point here.
struct Shared {
    ledger: Mutex<Ledger>,
    /// Fully acknowledged message ids, for the deleter.
    done_tx: mpsc::UnboundedSender<u64>,
    /// Records of FIFO messages whose turn came, for the releaser.
    start_tx: mpsc::UnboundedSender<Vec<Record>>,
    /// One permit per message that may still be received.
    permits: Arc<Semaphore>,
    /// Messages in the ledger (shutdown waits for 0).
    in_flight: watch::Sender<usize>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("in_flight", &*self.in_flight.borrow())
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Ledger> {
        // A panic elsewhere must not stop acknowledgements: the ledger's
        // invariants hold between its method calls.
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Accounts for `n` messages that left the ledger.
    fn left(&self, n: usize, len: usize) {
        if n > 0 {
            self.permits.add_permits(n);
        }
        self.in_flight.send_replace(len);
        metrics::gauge!(metric::IN_FLIGHT).set(len as f64);
    }

    fn remove(&self, id: u64) {
        let mut l = self.lock();
        let n = usize::from(l.remove(id));
        let len = l.len();
        drop(l);
        self.left(n, len);
    }

    fn with_removal(&self, f: impl FnOnce(&mut Ledger) -> Vec<Released>) -> Vec<Released> {
        let mut l = self.lock();
        let out = f(&mut l);
        let len = l.len();
        drop(l);
        self.left(out.len(), len);
        out
    }
}

impl AckTarget for Shared {
    fn ack(&self, serial: u64) {
        let effect = self.lock().ack(serial);
        if let Some(id) = effect.done {
            let _ = self.done_tx.send(id);
        }
        if let Some(records) = effect.start {
            let _ = self.start_tx.send(records);
        }
    }
}

/// What every task shares.
#[derive(Debug)]
struct Ctx {
    cfg: SqsConfig,
    client: aws_sdk_sqs::Client,
    /// Queue name, for record origins.
    queue: String,
    fifo: bool,
    shared: Arc<Shared>,
    sink: mpsc::Sender<Vec<Record>>,
    /// Stop receiving (shutdown, a fatal error, or the sink closed).
    stop: CancellationToken,
    /// End the background tasks (after the shutdown drain).
    finish: CancellationToken,
    error: Mutex<Option<SqsError>>,
    scaler: Mutex<Scaler>,
    grow_tx: mpsc::UnboundedSender<()>,
}

impl Ctx {
    fn fail(&self, e: SqsError) {
        warn!(error = %e, "sqs source stopping");
        let mut slot = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        slot.get_or_insert(e);
        self.stop.cancel();
    }

    fn visibility_secs(&self) -> i32 {
        i32::try_from(self.cfg.visibility_timeout.as_secs()).unwrap_or(i32::MAX)
    }

    /// Visibility of a given-up message on its `receive_count`-th receive:
    /// exponential from `retry_backoff_min`, capped, with jitter.
    fn retry_visibility(&self, receive_count: u32) -> i32 {
        let delay = retry_delay(&self.cfg, receive_count);
        i32::try_from(delay.as_secs()).unwrap_or(i32::MAX)
    }
}

/// The back-off of a given-up message on its `receive_count`-th receive.
pub fn retry_delay(cfg: &SqsConfig, receive_count: u32) -> Duration {
    // Past 64 doublings every delay is the cap; bounds the iteration.
    let step = usize::try_from(receive_count.saturating_sub(1).min(64)).unwrap_or(64);
    ExponentialBuilder::new()
        .with_min_delay(cfg.retry_backoff_min)
        .with_max_delay(cfg.retry_backoff_max)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
        .nth(step)
        .unwrap_or(cfg.retry_backoff_max)
        .min(config::MAX_VISIBILITY_TIMEOUT)
}

/// Back-off between failed receive calls.
/// The client's timeouts with an attempt limit that outlasts a long poll of
/// `wait`. The worker's 10 s attempt timeout is shorter than SQS's 20 s long
/// poll: every poll of a quiet queue would time out, and a message that
/// arrived during an abandoned poll would stay invisible, its receive count
/// raised, until its visibility ended.
fn receive_timeouts(base: Option<&TimeoutConfig>, wait: Duration) -> TimeoutConfig {
    let attempt = wait + RECEIVE_MARGIN;
    let mut builder = base.map_or_else(TimeoutConfig::builder, TimeoutConfig::to_builder);
    if base
        .and_then(TimeoutConfig::operation_attempt_timeout)
        .is_none_or(|t| t < attempt)
    {
        builder = builder.operation_attempt_timeout(attempt);
    }
    // The operation limit (all attempts) must leave room for one attempt too.
    if base
        .and_then(TimeoutConfig::operation_timeout)
        .is_some_and(|t| t < attempt)
    {
        builder = builder.operation_timeout(attempt);
    }
    builder.build()
}

fn receive_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(20))
        .with_jitter()
        .without_max_times()
        .build()
}

/// The SQS source. See the module docs for its guarantees.
#[derive(Debug)]
pub struct SqsSource {
    config: SqsConfig,
    client: aws_sdk_sqs::Client,
}

impl SqsSource {
    /// A source reading `config.queue_url`.
    pub fn new(config: SqsConfig, client: aws_sdk_sqs::Client) -> Self {
        Self { config, client }
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
    ) -> Result<(), SqsError> {
        self.config.validate()?;
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let (start_tx, start_rx) = mpsc::unbounded_channel();
        let (grow_tx, mut grow_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            ledger: Mutex::new(Ledger::default()),
            done_tx,
            start_tx,
            permits: Arc::new(Semaphore::new(self.config.max_in_flight_messages)),
            in_flight: watch::Sender::new(0),
        });
        let ctx = Arc::new(Ctx {
            queue: self.config.queue_name().to_string(),
            fifo: self.config.is_fifo(),
            scaler: Mutex::new(Scaler::new(self.config.max_receivers)),
            cfg: self.config,
            client: self.client,
            shared: Arc::clone(&shared),
            sink,
            stop: shutdown.child_token(),
            finish: CancellationToken::new(),
            error: Mutex::new(None),
            grow_tx,
        });
        info!(queue = %ctx.queue, fifo = ctx.fifo, "sqs source starting");
        let mut background = JoinSet::new();
        background.spawn(deleter(Arc::clone(&ctx), done_rx));
        background.spawn(heartbeat(Arc::clone(&ctx)));
        background.spawn(releaser(Arc::clone(&ctx), start_rx));

        let mut receivers = JoinSet::new();
        receivers.spawn(receiver(Arc::clone(&ctx)));
        metrics::gauge!(metric::RECEIVERS).set(1.0);
        loop {
            tokio::select! {
                _ = ctx.stop.cancelled() => break,
                Some(()) = grow_rx.recv() => {
                    receivers.spawn(receiver(Arc::clone(&ctx)));
                }
                Some(res) = receivers.join_next() => {
                    if let Err(e) = res {
                        ctx.fail(SqsError::Task(e.to_string()));
                    } else if receivers.is_empty() && !ctx.stop.is_cancelled() {
                        // The scaler never goes below one; keep one running.
                        receivers.spawn(receiver(Arc::clone(&ctx)));
                    }
                }
            }
        }
        let grace_end = Instant::now() + ctx.cfg.shutdown_grace;
        // Polls in progress finish (within wait_time); what they bring is
        // released at once by the receivers themselves.
        while let Some(res) = receivers.join_next().await {
            if let Err(e) = res {
                warn!(error = %e, "sqs receiver task failed");
            }
        }
        metrics::gauge!(metric::RECEIVERS).set(0.0);
        let unstarted = shared.with_removal(Ledger::drain_unstarted);
        release(&ctx, unstarted, |_| 0, "shutdown").await;
        let mut in_flight = shared.in_flight.subscribe();
        let drained = tokio::time::timeout_at(grace_end, async {
            let _ = in_flight.wait_for(|n| *n == 0).await;
        })
        .await;
        if drained.is_err() {
            let left = shared.with_removal(Ledger::drain_unfinished);
            warn!(
                count = left.len(),
                "shutdown grace over: releasing unfinished messages"
            );
            release(&ctx, left, |_| 0, "shutdown").await;
        }
        ctx.finish.cancel();
        while let Some(res) = background.join_next().await {
            if let Err(e) = res {
                warn!(error = %e, "sqs background task failed");
            }
        }
        // Held records point back at the ledger: break the cycle.
        shared.lock().clear();
        info!(queue = %ctx.queue, "sqs source stopped");
        let err = ctx
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

/// Takes at least one and at most 10 in-flight permits; `None` on stop.
async fn acquire(ctx: &Ctx) -> Option<usize> {
    let permits = &ctx.shared.permits;
    tokio::select! {
        p = permits.acquire() => p.ok()?.forget(),
        _ = ctx.stop.cancelled() => return None,
    }
    let mut n = 1;
    while n < MAX_RECEIVE_BATCH {
        match permits.try_acquire() {
            Ok(p) => {
                p.forget();
                n += 1;
            }
            Err(_) => break,
        }
    }
    Some(n)
}

async fn receiver(ctx: Arc<Ctx>) {
    let mut backoff = receive_backoff();
    let wait = i32::try_from(ctx.cfg.wait_time.as_secs()).unwrap_or(20);
    let timeouts = receive_timeouts(
        ctx.client.config().timeout_config(),
        Duration::from_secs(u64::from(wait.unsigned_abs())),
    );
    loop {
        if ctx.stop.is_cancelled() {
            return;
        }
        let Some(n) = acquire(&ctx).await else {
            return;
        };
        let sent_at = Instant::now();
        // Not raced against `stop`: a dropped poll could take messages with
        // it until their visibility ends; a finished one is released at once.
        let out = ctx
            .client
            .receive_message()
            .queue_url(&ctx.cfg.queue_url)
            .max_number_of_messages(i32::try_from(n).unwrap_or(10))
            .wait_time_seconds(wait)
            .visibility_timeout(ctx.visibility_secs())
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .customize()
            .config_override(
                aws_sdk_sqs::config::Builder::default().timeout_config(timeouts.clone()),
            )
            .send()
            .await;
        match out {
            Err(err) => {
                ctx.shared.permits.add_permits(n);
                let e = AwsError::new("ReceiveMessage", &err);
                metrics::counter!(metric::CALL_ERRORS, "op" => "receive").increment(1);
                if matches!(e.class, ErrorClass::Fatal | ErrorClass::NotFound) {
                    ctx.fail(e.into());
                    return;
                }
                let delay = backoff.next().unwrap_or(Duration::from_secs(20));
                warn!(error = %e, ?delay, "ReceiveMessage failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = ctx.stop.cancelled() => return,
                }
            }
            Ok(out) => {
                backoff = receive_backoff();
                let mut messages = out.messages.unwrap_or_default();
                let extra = if messages.len() > n {
                    messages.split_off(n)
                } else {
                    Vec::new()
                };
                let got = messages.len();
                ctx.shared.permits.add_permits(n - got);
                let decision = {
                    let mut s = ctx.scaler.lock().unwrap_or_else(PoisonError::into_inner);
                    let d = s.observe(got, n);
                    metrics::gauge!(metric::RECEIVERS).set(s.active() as f64);
                    d
                };
                if !extra.is_empty() {
                    // More than asked for (never from SQS): no permits for
                    // them, so hand them straight back.
                    release_raw(&ctx, &extra).await;
                }
                debug!(asked = n, got, took = ?sent_at.elapsed(), "received");
                dispatch(&ctx, messages, sent_at).await;
                if got == 0 && wait == 0 {
                    tokio::select! {
                        _ = tokio::time::sleep(EMPTY_SHORT_POLL_PAUSE) => {}
                        _ = ctx.stop.cancelled() => return,
                    }
                }
                match decision {
                    Decision::Grow => {
                        debug!("sqs batches come back full: adding a receiver");
                        let _ = ctx.grow_tx.send(());
                    }
                    Decision::Shrink => {
                        debug!("sqs batches come back sparse: removing a receiver");
                        return;
                    }
                    Decision::Hold => {}
                }
            }
        }
    }
}

fn system_attr<'a>(m: &'a Message, name: &MessageSystemAttributeName) -> Option<&'a str> {
    m.attributes().and_then(|a| a.get(name)).map(String::as_str)
}

/// Admits received messages (one permit each, already taken) and sends the
/// records of those that may start to the sink.
async fn dispatch(ctx: &Arc<Ctx>, messages: Vec<Message>, sent_at: Instant) {
    if messages.is_empty() {
        return;
    }
    if ctx.stop.is_cancelled() {
        let n = messages.len();
        release_raw(ctx, &messages).await;
        ctx.shared.permits.add_permits(n);
        return;
    }
    let now = Instant::now();
    let target: Arc<dyn AckTarget> = ctx.shared.clone();
    let mut batch = Vec::new();
    let mut started = Vec::new();
    // How far behind the queue's head this receive is (status and EMF read it).
    let now_ms = chrono::Utc::now().timestamp_millis();
    if let Some(oldest) = messages
        .iter()
        .filter_map(|m| system_attr(m, &MessageSystemAttributeName::SentTimestamp))
        .filter_map(|v| v.parse::<i64>().ok())
        .min()
    {
        metrics::gauge!(metric::RECEIVE_AGE).set((now_ms - oldest).max(0) as f64 / 1000.0);
    }
    for m in messages {
        let (Some(receipt), Some(message_id)) = (m.receipt_handle.clone(), m.message_id.clone())
        else {
            warn!("message without id or receipt handle skipped");
            ctx.shared.permits.add_permits(1);
            continue;
        };
        let receive_count = system_attr(&m, &MessageSystemAttributeName::ApproximateReceiveCount)
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let arrival_ms = system_attr(&m, &MessageSystemAttributeName::SentTimestamp)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let group = if ctx.fifo {
            system_attr(&m, &MessageSystemAttributeName::MessageGroupId).map(str::to_string)
        } else {
            None
        };
        let parts: Vec<(Bytes, Option<Defect>)> =
            match body::decode(m.body.unwrap_or_default(), ctx.cfg.record_format) {
                Ok(d) => {
                    metrics::counter!(metric::MESSAGES_RECEIVED, "format" => d.format.as_str())
                        .increment(1);
                    d.events.into_iter().map(|b| (b, None)).collect()
                }
                Err(u) => {
                    metrics::counter!(metric::MESSAGES_RECEIVED, "format" => "undecodable")
                        .increment(1);
                    warn!(message_id, reason = %u.reason, "undecodable sqs message");
                    let defect = Defect {
                        reason: Reason::UndecodableMessage,
                        message: u.reason,
                    };
                    vec![(Bytes::from(u.body), Some(defect))]
                }
            };
        let mut ledger = ctx.shared.lock();
        let id = ledger.reserve_id();
        let partition_key = group.clone().unwrap_or_else(|| message_id.clone());
        let records: Vec<Record> = parts
            .into_iter()
            .enumerate()
            .map(|(i, (data, defect))| Record {
                origin: Origin::Sqs {
                    queue: ctx.queue.clone(),
                    message_id: message_id.clone(),
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                },
                partition_key: partition_key.clone(),
                data,
                arrival_ms,
                ack: Ack::new(Arc::clone(&target), id),
                defect,
            })
            .collect();
        let entry = Entry {
            message_id,
            receipt,
            group,
            unacked: 0,
            phase: Phase::Started,
            // Visibility started after the call was sent: a safe lower bound.
            visible_until: sent_at + ctx.cfg.visibility_timeout,
            received_at: now,
            receive_count,
        };
        let admit = ledger.admit(id, entry, records);
        let len = ledger.len();
        drop(ledger);
        ctx.shared.in_flight.send_replace(len);
        metrics::gauge!(metric::IN_FLIGHT).set(len as f64);
        match admit {
            Admit::Start(records) => {
                batch.extend(records);
                started.push(id);
            }
            Admit::Wait => {}
            Admit::Done => {
                let _ = ctx.shared.done_tx.send(id);
            }
        }
    }
    deliver(ctx, batch, &started).await;
}

/// Sends started records to the sink; on stop (or a closed sink) they are
/// not started after all: released at once.
async fn deliver(ctx: &Ctx, batch: Vec<Record>, ids: &[u64]) {
    if batch.is_empty() {
        return;
    }
    let n = batch.len() as u64;
    let sent = tokio::select! {
        r = ctx.sink.send(batch) => match r {
            Ok(()) => true,
            Err(_) => {
                // The pipeline is gone: nothing more can be acknowledged.
                info!("sqs sink closed: stopping");
                ctx.stop.cancel();
                false
            }
        },
        _ = ctx.stop.cancelled() => false,
    };
    if sent {
        metrics::counter!(metric::RECORDS_DELIVERED).increment(n);
        return;
    }
    let released = ctx.shared.with_removal(|l| l.abandon(ids));
    release(ctx, released, |_| 0, "shutdown").await;
}

/// Hands FIFO messages whose turn came to the sink.
async fn releaser(ctx: Arc<Ctx>, mut start_rx: mpsc::UnboundedReceiver<Vec<Record>>) {
    loop {
        let records = tokio::select! {
            r = start_rx.recv() => match r {
                Some(r) => r,
                None => return,
            },
            _ = ctx.finish.cancelled() => return,
        };
        let ids: Vec<u64> = records
            .first()
            .map(|r| r.ack.serial())
            .into_iter()
            .collect();
        deliver(&ctx, records, &ids).await;
    }
}

/// Per-call settings of a heartbeat's ChangeMessageVisibilityBatch: one
/// attempt, at most `margin / 2` in all. The SDK's retries (3 attempts of
/// up to 10 s each) would outlast the margin, so the extension would come
/// after the visibility ended; the next tick (every `margin / 3`) is the
/// retry instead, and it still comes before the visibility ends.
fn heartbeat_call(base: Option<&TimeoutConfig>, margin: Duration) -> aws_sdk_sqs::config::Builder {
    let bound = margin / 2;
    let timeouts = base
        .map_or_else(TimeoutConfig::builder, TimeoutConfig::to_builder)
        .operation_timeout(bound)
        .operation_attempt_timeout(bound)
        .build();
    aws_sdk_sqs::config::Builder::default()
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
        .timeout_config(timeouts)
}

/// Outcome of [`change_visibility`]: indexes into the request's items.
#[derive(Debug, Default)]
struct VisibilityOutcome {
    ok: HashSet<usize>,
    /// Refused entries with SQS's error code.
    refused: Vec<(usize, String)>,
}

/// Sets the visibility of `items` (receipt, seconds), 10 per call, the calls
/// concurrently, each with the client's settings changed by `call`.
async fn change_visibility(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    items: &[(String, i32)],
    call: Option<&aws_sdk_sqs::config::Builder>,
) -> VisibilityOutcome {
    let calls = items.chunks(MAX_RECEIVE_BATCH).enumerate().map(|(c, chunk)| {
        let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = chunk
            .iter()
            .enumerate()
            .filter_map(|(i, (receipt, secs))| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id((c * MAX_RECEIVE_BATCH + i).to_string())
                    .receipt_handle(receipt)
                    .visibility_timeout(*secs)
                    .build()
                    .ok()
            })
            .collect();
        async move {
            let mut request = client
                .change_message_visibility_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .customize();
            if let Some(call) = call {
                request = request.config_override(call.clone());
            }
            let out = request.send().await;
            let mut outcome = VisibilityOutcome::default();
            match out {
                Ok(out) => {
                    outcome.ok = out
                        .successful()
                        .iter()
                        .filter_map(|s| s.id().parse::<usize>().ok())
                        .collect();
                    outcome.refused = out
                        .failed()
                        .iter()
                        .filter_map(|f| Some((f.id().parse::<usize>().ok()?, f.code().to_string())))
                        .collect();
                }
                Err(err) => {
                    metrics::counter!(metric::CALL_ERRORS, "op" => "change_visibility")
                        .increment(1);
                    warn!(error = %AwsError::new("ChangeMessageVisibilityBatch", &err), "visibility change failed");
                }
            }
            outcome
        }
    });
    let mut all = VisibilityOutcome::default();
    for o in futures::future::join_all(calls).await {
        all.ok.extend(o.ok);
        all.refused.extend(o.refused);
    }
    all
}

/// Makes messages that left the ledger visible again after `visibility(m)`
/// seconds. Best effort: a failure only means they come back when their
/// current visibility ends.
async fn release(
    ctx: &Ctx,
    released: Vec<Released>,
    visibility: impl Fn(&Released) -> i32,
    reason: &'static str,
) {
    if released.is_empty() {
        return;
    }
    let items: Vec<(String, i32)> = released
        .iter()
        .map(|r| (r.receipt.clone(), visibility(r)))
        .collect();
    let out = change_visibility(&ctx.client, &ctx.cfg.queue_url, &items, None).await;
    metrics::counter!(metric::MESSAGES_RELEASED, "reason" => reason).increment(out.ok.len() as u64);
    debug!(count = released.len(), released = out.ok.len(), refused = ?out.refused, reason, "messages made visible");
}

/// Releases messages that were never admitted.
async fn release_raw(ctx: &Ctx, messages: &[Message]) {
    let items: Vec<(String, i32)> = messages
        .iter()
        .filter_map(|m| m.receipt_handle.clone())
        .map(|r| (r, 0))
        .collect();
    let out = change_visibility(&ctx.client, &ctx.cfg.queue_url, &items, None).await;
    metrics::counter!(metric::MESSAGES_RELEASED, "reason" => "shutdown")
        .increment(out.ok.len() as u64);
}

/// Extends visibility before it runs out; gives up stale messages.
async fn heartbeat(ctx: Arc<Ctx>) {
    let margin = ctx.cfg.heartbeat_margin;
    let tick = (margin / 3).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let call = heartbeat_call(ctx.client.config().timeout_config(), margin);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = ctx.finish.cancelled() => return,
        }
        let now = Instant::now();
        let stale = ctx
            .shared
            .with_removal(|l| l.stale(now, ctx.cfg.max_processing_time));
        if !stale.is_empty() {
            warn!(
                count = stale.len(),
                "messages unacknowledged for max_processing_time: given up"
            );
            release(
                &ctx,
                stale,
                |r| ctx.retry_visibility(r.receive_count),
                "stale",
            )
            .await;
        }
        let due = ctx.shared.lock().due_for_heartbeat(now, margin);
        if due.is_empty() {
            continue;
        }
        let sent_at = Instant::now();
        let items: Vec<(String, i32)> = due
            .iter()
            .map(|(_, receipt)| (receipt.clone(), ctx.visibility_secs()))
            .collect();
        let out = change_visibility(&ctx.client, &ctx.cfg.queue_url, &items, Some(&call)).await;
        debug!(due = due.len(), extended = out.ok.len(), took = ?sent_at.elapsed(), "heartbeat");
        metrics::counter!(metric::VISIBILITY_EXTENDED).increment(out.ok.len() as u64);
        let until = sent_at + ctx.cfg.visibility_timeout;
        let mut ledger = ctx.shared.lock();
        for i in out.ok {
            if let Some((id, _)) = due.get(i) {
                ledger.extended(*id, until);
            }
        }
        for (i, code) in out.refused {
            let Some((id, _)) = due.get(i) else { continue };
            // A message deleted meanwhile is no news; one still waiting for
            // its writes may be delivered again (its writes are idempotent).
            let live = ledger
                .get(*id)
                .is_some_and(|e| !matches!(e.phase, Phase::Deleting | Phase::Done));
            if live {
                metrics::counter!(metric::CALL_ERRORS, "op" => "change_visibility").increment(1);
                warn!(
                    code,
                    message_id = ledger.get(*id).map(|e| e.message_id.as_str()),
                    "visibility extension refused"
                );
            }
        }
    }
}

/// Deletes fully acknowledged messages.
async fn deleter(ctx: Arc<Ctx>, mut done_rx: mpsc::UnboundedReceiver<u64>) {
    let mut pending: VecDeque<u64> = VecDeque::new();
    let mut calls = JoinSet::new();
    let mut retry = tokio::time::interval(DELETE_RETRY_TICK);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut final_deadline: Option<Instant> = None;
    loop {
        tokio::select! {
            Some(id) = done_rx.recv() => pending.push_back(id),
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
            _ = retry.tick() => {
                // Deletes that failed went back to Done: try them again.
                let known: HashSet<u64> = pending.iter().copied().collect();
                pending.extend(ctx.shared.lock().done_ids().into_iter().filter(|id| !known.contains(id)));
            }
            _ = ctx.finish.cancelled(), if final_deadline.is_none() => {
                final_deadline = Some(Instant::now() + FINAL_DELETE_TIME);
            }
        }
        while let Ok(id) = done_rx.try_recv() {
            pending.push_back(id);
        }
        while calls.len() < DELETE_CONCURRENCY && !pending.is_empty() {
            let mut batch = Vec::new();
            {
                let mut ledger = ctx.shared.lock();
                while batch.len() < MAX_RECEIVE_BATCH {
                    let Some(id) = pending.pop_front() else { break };
                    if let Some(receipt) = ledger.take_for_delete(id) {
                        batch.push((id, receipt));
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            calls.spawn(delete_batch(Arc::clone(&ctx), batch));
        }
        if let Some(deadline) = final_deadline {
            let idle = calls.is_empty() && ctx.shared.lock().is_empty();
            if idle || Instant::now() >= deadline {
                calls.abort_all();
                return;
            }
        }
    }
}

async fn delete_batch(ctx: Arc<Ctx>, batch: Vec<(u64, String)>) {
    let entries: Vec<DeleteMessageBatchRequestEntry> = batch
        .iter()
        .filter_map(|(id, receipt)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(id.to_string())
                .receipt_handle(receipt)
                .build()
                .ok()
        })
        .collect();
    let out = ctx
        .client
        .delete_message_batch()
        .queue_url(&ctx.cfg.queue_url)
        .set_entries(Some(entries))
        .send()
        .await;
    match out {
        Ok(out) => {
            let mut deleted = 0u64;
            for s in out.successful() {
                if let Ok(id) = s.id().parse::<u64>() {
                    ctx.shared.remove(id);
                    deleted += 1;
                }
            }
            metrics::counter!(metric::MESSAGES_DELETED).increment(deleted);
            let failed: HashMap<u64, (bool, String)> = out
                .failed()
                .iter()
                .filter_map(|f| {
                    let id = f.id().parse::<u64>().ok()?;
                    Some((id, (f.sender_fault(), f.code().to_string())))
                })
                .collect();
            for (id, (sender_fault, code)) in failed {
                metrics::counter!(metric::CALL_ERRORS, "op" => "delete").increment(1);
                if sender_fault {
                    // The receipt is no longer valid (the message came back
                    // or is gone): retrying cannot help; its writes are
                    // idempotent if it is delivered again.
                    warn!(code, "delete refused; message dropped from tracking");
                    ctx.shared.remove(id);
                } else {
                    ctx.shared.lock().delete_failed(id);
                }
            }
        }
        Err(err) => {
            metrics::counter!(metric::CALL_ERRORS, "op" => "delete").increment(1);
            let e = AwsError::new("DeleteMessageBatch", &err);
            warn!(error = %e, "delete failed; retrying");
            let mut ledger = ctx.shared.lock();
            for (id, _) in &batch {
                ledger.delete_failed(*id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_poll_outlasts_the_attempt_timeout_and_keeps_the_rest() {
        let wait = Duration::from_secs(20);
        // The worker's SDK settings: 3.1 s to connect, 10 s an attempt.
        let worker = TimeoutConfig::builder()
            .connect_timeout(Duration::from_millis(3100))
            .operation_attempt_timeout(Duration::from_secs(10))
            .build();
        let t = receive_timeouts(Some(&worker), wait);
        assert_eq!(t.operation_attempt_timeout(), Some(wait + RECEIVE_MARGIN));
        assert_eq!(t.connect_timeout(), Some(Duration::from_millis(3100)));
        assert_eq!(t.operation_timeout(), None);
        // A longer attempt limit stays; an operation limit shorter than one
        // poll grows to it.
        let roomy = TimeoutConfig::builder()
            .operation_attempt_timeout(Duration::from_secs(60))
            .operation_timeout(Duration::from_secs(15))
            .build();
        let t = receive_timeouts(Some(&roomy), wait);
        assert_eq!(t.operation_attempt_timeout(), Some(Duration::from_secs(60)));
        assert_eq!(t.operation_timeout(), Some(wait + RECEIVE_MARGIN));
        // No client timeouts at all: the poll still gets a bound.
        let t = receive_timeouts(None, Duration::ZERO);
        assert_eq!(t.operation_attempt_timeout(), Some(RECEIVE_MARGIN));
    }

    /// A heartbeat to an SQS that accepts connections and never answers:
    /// one attempt (no SDK retry), given up within half the margin, though
    /// the client itself would try 3 times for 10 s each.
    #[tokio::test]
    async fn a_hung_heartbeat_is_one_attempt_bounded_below_the_margin() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&connections);
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                held.push(conn);
            }
        });
        let worker_timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_millis(3100))
            .operation_attempt_timeout(Duration::from_secs(10))
            .build();
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .endpoint_url(&url)
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::standard().with_max_attempts(3))
            .timeout_config(worker_timeouts.clone())
            .build();
        let client = aws_sdk_sqs::Client::from_conf(conf);
        let margin = Duration::from_secs(2);
        let call = heartbeat_call(Some(&worker_timeouts), margin);
        let items: Vec<(String, i32)> = (0..3).map(|i| (format!("r{i}"), 30)).collect();
        let started = std::time::Instant::now();
        let out = change_visibility(
            &client,
            &format!("{url}/000000000000/q"),
            &items,
            Some(&call),
        )
        .await;
        let took = started.elapsed();
        assert!(out.ok.is_empty() && out.refused.is_empty(), "{out:?}");
        assert!(
            took < margin,
            "the heartbeat took {took:?}, margin {margin:?}"
        );
        assert!(
            took >= margin / 2 - Duration::from_millis(100),
            "gave up early: {took:?}"
        );
        assert_eq!(
            connections.load(Ordering::SeqCst),
            1,
            "one attempt, no SDK retry"
        );
        server.abort();
    }

    #[test]
    fn retry_delay_grows_from_min_and_is_capped() {
        let mut cfg = SqsConfig::new("http://127.0.0.1:4566/000000000000/q");
        cfg.retry_backoff_min = Duration::from_secs(10);
        cfg.retry_backoff_max = Duration::from_secs(60);
        // Jitter only adds (up to one more step), so bounds, not exact values.
        let first = retry_delay(&cfg, 1);
        assert!(
            first >= Duration::from_secs(10) && first <= Duration::from_secs(20),
            "{first:?}"
        );
        let third = retry_delay(&cfg, 3);
        assert!(third >= Duration::from_secs(40), "{third:?}");
        for n in [10, 1000, u32::MAX] {
            assert!(
                retry_delay(&cfg, n) <= Duration::from_secs(120),
                "receive {n}"
            );
        }
        cfg.retry_backoff_max = config::MAX_VISIBILITY_TIMEOUT;
        assert!(retry_delay(&cfg, 40) <= config::MAX_VISIBILITY_TIMEOUT);
    }

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
