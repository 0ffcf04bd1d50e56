//! One table's batching and sending loop: feeds the pure [`TableQueue`] and
//! [`RateController`] with arrivals, timers and call results, and turns call
//! results into completions, requeues, bisections or a fatal error.
//!
//! Files: this one (the task's state, its loop, dispatch and sending),
//! `results` (what a call's answer does), `describe` (the table's capacity
//! from DescribeTable). Both add methods to [`TableTask`]; this file imports
//! neither.

use std::collections::VecDeque;
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tidemark_governor::{Governor, Permit};
use tidemark_schema::{ItemKey, KeyAttributes, WireItem};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::ack::Token;
use crate::batch::{Entry, TableQueue};
use crate::config::WriterConfig;
use crate::error::WriterError;
use crate::keyrate::{Gate, KeyPacer, KeyParams};
use crate::missing::{MissingTableAction, MissingTableHandler, MissingWait};
use crate::rate::{Admit, RateController, RateParams};
use crate::share::LateTables;
use crate::stats::{SharedStats, TableStats};
use crate::transport::{RawResponse, Transport, TransportError};

mod describe;
mod results;

type HttpResponse = aws_smithy_runtime_api::http::Response;
type Batch = Vec<Entry<Token>>;
type CallResult = Result<Result<RawResponse, TransportError>, tokio::time::error::Elapsed>;
type DescribeResult = Result<
    Result<DescribeTableOutput, SdkError<DescribeTableError, HttpResponse>>,
    tokio::time::error::Elapsed,
>;

/// One submission on its way to a table's queue.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) key: ItemKey,
    pub(crate) item: WireItem,
    pub(crate) wcu: u64,
    pub(crate) token: Token,
}

/// Messages from the dispatcher.
#[derive(Debug)]
pub(crate) enum TableMsg {
    /// Submissions, in order.
    Items(Vec<Pending>),
    Flush(oneshot::Sender<()>),
}

/// What the table's loop waits for besides messages: a BatchWriteItem
/// call's result, DescribeTable's, or the missing-table handler's answer.
enum Answer {
    Call {
        batch: Batch,
        isolated: bool,
        sent_at: Instant,
        permit: Permit,
        result: Box<CallResult>,
    },
    Described(Box<DescribeResult>, Permit),
    Missing(MissingTableAction),
}

/// What a table task tells the dispatcher about itself, so that an idle
/// one can be retired safely (see `Dispatcher::retire_idle`).
#[derive(Debug, Default)]
pub(crate) struct TaskState {
    /// Messages received from the dispatcher.
    received: std::sync::atomic::AtomicU64,
    /// Since when the task has had nothing queued, in flight or waiting.
    idle_since: std::sync::Mutex<Option<Instant>>,
}

impl TaskState {
    pub(crate) fn received(&self) -> u64 {
        self.received.load(std::sync::atomic::Ordering::Acquire)
    }

    /// How long the task has been idle at `now`, if it is.
    pub(crate) fn idle_for(&self, now: Instant) -> Option<std::time::Duration> {
        let since = *self.idle_since.lock().unwrap_or_else(|e| e.into_inner());
        since.map(|s| now.saturating_duration_since(s))
    }

    fn set_idle(&self, idle: bool, now: Instant) {
        let mut since = self.idle_since.lock().unwrap_or_else(|e| e.into_inner());
        match (idle, *since) {
            (true, None) => *since = Some(now),
            (false, Some(_)) => *since = None,
            _ => {}
        }
    }
}

pub(crate) struct TableTask {
    table: String,
    client: Client,
    transport: Arc<dyn Transport>,
    cfg: Arc<WriterConfig>,
    /// The tables' key attribute names (unprocessed keys are read by them).
    key_attributes: Arc<KeyAttributes>,
    missing: Arc<dyn MissingTableHandler>,
    rx: mpsc::UnboundedReceiver<TableMsg>,
    rx_open: bool,
    queue: TableQueue<Token>,
    /// Halves of a batch DynamoDB refused as invalid: sent alone, first.
    isolated: VecDeque<Batch>,
    /// Batches that found the table missing, waiting for the handler.
    missing_wait: MissingWait<Batch>,
    ctl: RateController,
    /// Per-key pacing of hot partition keys (`None`: `key_pacing = false`).
    keys: Option<KeyPacer>,
    last_expire: std::time::Instant,
    /// When a batch last drained held keys (see `dispatch`).
    last_parked_send: std::time::Instant,
    /// Calls and questions in flight, each ending in its answer.
    answers: FuturesUnordered<BoxFuture<'static, Answer>>,
    calls_in_flight: usize,
    hold_until: Option<Instant>,
    /// A hold after a timeout or 5xx: (when it was set, until). It ends
    /// early when the endpoint's breaker closes after it was set: DynamoDB
    /// answers again, and a back-off sized for the brownout (up to 20 s)
    /// must not keep the backlog waiting.
    congested_hold: Option<(Instant, Instant)>,
    backoff: ExponentialBackoff,
    backoff_used: bool,
    /// Clean calls since the last retry: the back-off resets only after a
    /// run of them, never on one success (a brownout answers now and then).
    clean_calls: u32,
    /// The endpoint's governor, shared with every other DynamoDB caller.
    gov: Governor,
    rng: fastrand::Rng,
    capacity_known: bool,
    describe_pending: bool,
    next_describe: Instant,
    next_seq: u64,
    /// Flushes waiting: the reply, and how many tokens accepted before the
    /// flush are not completed yet (tokens complete in any order, so each
    /// completion checks its sequence number against the flush's).
    flush_waiters: Vec<FlushWait>,
    stats: TableStats,
    /// Tokens accepted and not completed.
    pending_tokens: u64,
    /// Which tables take late data, and whether this one did at the last look.
    late: Arc<dyn LateTables>,
    is_late: bool,
    /// Hears of keys held back at their partition's limit.
    hot: Arc<dyn crate::share::HotKeys>,
    /// When lateness, the late budget and the load were last looked at.
    last_look: Instant,
    /// When an item was last stored, and since when items have waited.
    last_stored: Option<Instant>,
    busy_since: Option<Instant>,
    /// Shared with the dispatcher.
    state: Arc<TaskState>,
}

struct FlushWait {
    /// Tokens with a lower sequence number were accepted before the flush.
    before: u64,
    /// How many of those are not completed yet.
    remaining: u64,
    reply: oneshot::Sender<()>,
}

/// What every table task of one writer uses: its clients, settings, key
/// attribute names, missing-table handler, counters and governor.
#[derive(Clone)]
pub(crate) struct WriterResources {
    pub(crate) client: Client,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) cfg: Arc<WriterConfig>,
    /// The tables' key attribute names (unprocessed keys are read by them).
    pub(crate) key_attributes: Arc<KeyAttributes>,
    pub(crate) missing: Arc<dyn MissingTableHandler>,
    pub(crate) late: Arc<dyn LateTables>,
    pub(crate) hot: Arc<dyn crate::share::HotKeys>,
    pub(crate) stats: Arc<SharedStats>,
    pub(crate) gov: Governor,
}

impl TableTask {
    pub(crate) fn new(
        table: String,
        resources: WriterResources,
        rx: mpsc::UnboundedReceiver<TableMsg>,
        state: Arc<TaskState>,
    ) -> Self {
        let WriterResources {
            client,
            transport,
            cfg,
            key_attributes,
            missing,
            late,
            hot,
            stats: shared,
            gov,
        } = resources;
        let now = Instant::now();
        let is_late = late.is_late(&table);
        let params = RateParams {
            on_demand_initial: cfg.on_demand_initial_wcu,
            min_rate: cfg.min_rate_wcu,
            capacity_share: cfg.capacity_share,
            max_concurrency: cfg.max_concurrency_per_table,
            ..RateParams::default()
        };
        TableTask {
            stats: TableStats::new(&table, shared),
            ctl: RateController::new(params, now.into_std()),
            keys: cfg.key_pacing.then(|| {
                KeyPacer::new(
                    KeyParams {
                        max_key_wcu: cfg.max_key_wcu,
                        max_keys: cfg.max_paced_keys,
                        ..KeyParams::default()
                    },
                    now.into_std(),
                )
            }),
            last_expire: now.into_std(),
            last_parked_send: now.into_std(),
            backoff: backoff_schedule(&cfg),
            table,
            client,
            transport,
            key_attributes,
            missing,
            rx,
            rx_open: true,
            queue: TableQueue::default(),
            isolated: VecDeque::new(),
            missing_wait: MissingWait::default(),
            answers: FuturesUnordered::new(),
            calls_in_flight: 0,
            hold_until: None,
            congested_hold: None,
            backoff_used: false,
            clean_calls: 0,
            gov,
            rng: fastrand::Rng::new(),
            capacity_known: false,
            describe_pending: false,
            next_describe: now,
            next_seq: 0,
            flush_waiters: Vec::new(),
            pending_tokens: 0,
            is_late,
            late,
            hot,
            last_look: now,
            last_stored: None,
            busy_since: None,
            state,
            cfg,
        }
    }

    pub(crate) async fn run(mut self) -> Result<(), WriterError> {
        loop {
            let now = Instant::now();
            let idle = self.idle() && self.flush_waiters.is_empty();
            // An idle table is not described: its capacity is read again
            // when it next has something to write (and the task of a table
            // idle for long ends; see `Dispatcher::retire_idle`).
            if !self.describe_pending
                && now >= self.next_describe
                && (!self.capacity_known || !idle)
            {
                self.start_describe(now);
            }
            if now >= self.last_look + LOOK_EVERY {
                self.look(now);
            }
            let wake = self.dispatch(now)?;
            self.resolve_flushes();
            let idle = self.idle() && self.flush_waiters.is_empty();
            self.state.set_idle(idle, now);
            if !self.rx_open && self.idle() {
                self.stats.unload();
                return Ok(());
            }
            let mut deadline = wake.unwrap_or(now + IDLE_SLEEP);
            if !idle {
                deadline = deadline.min(self.last_look + LOOK_EVERY);
                if !self.describe_pending {
                    deadline = deadline.min(self.next_describe);
                }
            }
            tokio::select! {
                biased;
                Some(answer) = self.answers.next(), if !self.answers.is_empty() => self.on_answer(answer)?,
                msg = self.rx.recv(), if self.rx_open => match msg {
                    Some(m) => {
                        let now = Instant::now().into_std();
                        self.on_msg(m, now);
                        // Take what else is queued in one go: one pass of the
                        // loop per item would cost more than the batching.
                        for _ in 0..1024 {
                            match self.rx.try_recv() {
                                Ok(m) => self.on_msg(m, now),
                                Err(_) => break,
                            }
                        }
                    }
                    None => self.rx_open = false,
                },
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Once a second: whether the table takes late data now; late items
    /// waiting longer than `late_max_wait` are dead-lettered; the load is
    /// published (items in flight, pending WCU, time since a write).
    fn look(&mut self, now: Instant) {
        self.last_look = now;
        self.is_late = self.late.is_late(&self.table);
        if self.is_late
            && let Some(cutoff) = now.into_std().checked_sub(self.cfg.late_max_wait)
        {
            let expired = self.queue.take_where(|e| e.since <= cutoff);
            if !expired.is_empty() {
                let n = expired.len();
                let outcome = crate::ack::WriteOutcome::Rejected {
                    reason: tidemark_schema::Reason::LateBacklog,
                    message: format!(
                        "late event: waited {:?} (writer.late_max_wait) for capacity on table {}; replay it once the table's backlog is written",
                        self.cfg.late_max_wait, self.table
                    ),
                };
                tracing::warn!(table = %self.table, items = n, waited = ?self.cfg.late_max_wait, "late items past their budget dead-lettered (late_backlog)");
                self.report(expired, &outcome);
            }
        }
        let waiting_since = match (self.busy_since, self.last_stored) {
            (Some(b), Some(l)) => Some(b.max(l)),
            (b, _) => b,
        };
        self.stats.load(crate::stats::TableLoad {
            items: self.pending_tokens,
            wcu: self.queue.pending_wcu(),
            late: self.is_late,
            seconds_since_stored: waiting_since
                .filter(|_| self.pending_tokens > 0)
                .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64()),
        });
    }

    fn idle(&self) -> bool {
        self.queue.is_empty()
            && self.isolated.is_empty()
            && self.missing_wait.is_idle()
            && self.calls_in_flight == 0
    }

    fn on_msg(&mut self, m: TableMsg, now: std::time::Instant) {
        self.state
            .received
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        match m {
            TableMsg::Items(items) => {
                for Pending {
                    key,
                    item,
                    wcu,
                    mut token,
                } in items
                {
                    token.seq = self.next_seq;
                    self.next_seq += 1;
                    if self.pending_tokens == 0 {
                        self.busy_since = Some(Instant::now());
                    }
                    self.pending_tokens += 1;
                    self.queue.push(key, item, wcu, token, now);
                }
            }
            TableMsg::Flush(reply) => self.flush_waiters.push(FlushWait {
                before: self.next_seq,
                remaining: self.pending_tokens,
                reply,
            }),
        }
    }

    fn resolve_flushes(&mut self) {
        if self.flush_waiters.is_empty() {
            return;
        }
        let waiters = std::mem::take(&mut self.flush_waiters);
        for w in waiters {
            if w.remaining == 0 {
                let _ = w.reply.send(());
            } else {
                self.flush_waiters.push(w);
            }
        }
    }

    /// Sends every batch that is due and admitted; returns when to look again
    /// (None: only an event or a message can change anything).
    fn dispatch(&mut self, now: Instant) -> Result<Option<Instant>, WriterError> {
        if !self.capacity_known || self.missing_wait.asking() {
            return Ok(None);
        }
        if let Some(h) = self.hold_until {
            if now < h {
                return Ok(Some(h));
            }
            self.hold_until = None;
        }
        if let Some((since, h)) = self.congested_hold {
            // While the breaker is open or probing, it paces this endpoint
            // (and this table may be the one to probe); once it has closed
            // after the failure, DynamoDB answers again. Either way the
            // hold, sized for a long brownout, no longer applies.
            let superseded = !matches!(self.gov.state(), tidemark_governor::State::Closed)
                || self.gov.closed_since(since);
            if now < h && !superseded {
                // Looked at again soon: the breaker may trip or close first.
                return Ok(Some(h.min(now + HOLD_RECHECK)));
            }
            self.congested_hold = None;
        }
        let force = !self.rx_open || !self.flush_waiters.is_empty();
        let std_now = now.into_std();
        if let Some(k) = self.keys.as_mut()
            && std_now.saturating_duration_since(self.last_expire) >= KEY_EXPIRY_SWEEP
        {
            k.expire(std_now);
            self.last_expire = std_now;
            self.stats.paced_keys(k.tracked());
            // Adaptive sharding's evidence: keys held back at their
            // partition's limit, named by an item of theirs still waiting.
            for (pk, held_for, accepted) in k.held_at_limit(std_now) {
                let waiting = self.queue.parked_keys_of(pk, 64);
                if !waiting.is_empty() {
                    self.hot.held(&self.table, &waiting, held_for, accepted);
                }
            }
        }
        loop {
            let isolated = !self.isolated.is_empty();
            // A held key that may go again rides in the next batch the queue
            // makes anyway (held keys have first claim on its room); on its
            // own it makes a batch at most once per linger: sending a few of
            // its items in each call would shrink every batch, and calls in
            // flight are bounded.
            let (parked_ready, parked_wake) = self.parked(std_now);
            let parked_due_at = self.last_parked_send + self.cfg.linger;
            let parked_due = parked_ready && (force || std_now >= parked_due_at);
            if !isolated && !parked_due && !self.queue.due(std_now, self.cfg.linger, force) {
                let parked_next = if parked_ready {
                    Some(parked_due_at)
                } else {
                    parked_wake.map(|w| w.max(parked_due_at))
                };
                let next = self
                    .queue
                    .deadline(self.cfg.linger)
                    .into_iter()
                    .chain(parked_next)
                    .min()
                    .map(|d| now + d.saturating_duration_since(std_now));
                return Ok(next);
            }
            match self.ctl.poll_send(std_now) {
                Admit::Go => {}
                Admit::Wait(d) => return Ok(Some(now + d)),
                Admit::AtConcurrencyLimit => return Ok(None),
            }
            // The endpoint's breaker and congestion rate come after the
            // table's own pacing: while DynamoDB is congested, batches wait
            // here instead of piling onto it.
            let permit = match self.gov.poll_admit() {
                Ok(p) => p,
                Err(d) => return Ok(Some(now + d)),
            };
            let batch = if isolated {
                self.isolated.pop_front().unwrap_or_default()
            } else if let Some(k) = self.keys.as_mut() {
                if self.queue.parked_len() > 0 {
                    self.last_parked_send = std_now;
                }
                self.queue
                    .take_batch_gated(|pk, wcu| k.admit(pk, wcu as f64, std_now) == Gate::Go)
            } else {
                self.queue.take_batch()
            };
            if batch.is_empty() {
                // Every due key is in flight (a call result will wake us) or
                // held back by its own pacing (wake when the first may go).
                let (_, wake) = self.parked(std_now);
                return Ok(wake.map(|d| now + d.saturating_duration_since(std_now)));
            }
            self.send(batch, isolated, permit, now)?;
        }
    }

    /// Whether a held-back partition key may go now, and when the first
    /// one may go otherwise.
    fn parked(&mut self, now: std::time::Instant) -> (bool, Option<std::time::Instant>) {
        let Some(k) = self.keys.as_mut() else {
            return (false, None);
        };
        let mut wake: Option<std::time::Instant> = None;
        for pk in self.queue.parked_keys() {
            match k.ready_at(pk, now) {
                None => return (true, None),
                Some(t) => wake = Some(wake.map_or(t, |w| w.min(t))),
            }
        }
        (false, wake)
    }

    fn send(
        &mut self,
        batch: Batch,
        isolated: bool,
        permit: Permit,
        now: Instant,
    ) -> Result<(), WriterError> {
        let wcu: u64 = batch.iter().map(|e| e.wcu).sum();
        let body = crate::transport::request_body(&self.table, &batch);
        self.ctl.on_send(wcu as f64, now.into_std());
        self.calls_in_flight += 1;
        let call = self.transport.batch_write_item(body.into());
        let timeout = self.cfg.call_timeout;
        self.answers.push(
            async move {
                let result = Box::new(tokio::time::timeout(timeout, call).await);
                Answer::Call {
                    batch,
                    isolated,
                    sent_at: now,
                    permit,
                    result,
                }
            }
            .boxed(),
        );
        Ok(())
    }

    fn on_answer(&mut self, answer: Answer) -> Result<(), WriterError> {
        match answer {
            Answer::Call {
                batch,
                isolated,
                sent_at,
                permit,
                result,
            } => self.on_call(batch, isolated, sent_at, permit, *result),
            Answer::Described(result, permit) => self.on_described(*result, permit),
            Answer::Missing(action) => {
                self.on_missing_answer(action);
                Ok(())
            }
        }
    }
}

/// How often a table looks whether it takes late data, dead-letters late
/// items past their budget, and publishes its load.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// How long an idle task sleeps when nothing else wakes it (a message does).
const IDLE_SLEEP: std::time::Duration = std::time::Duration::from_secs(3600);

/// How often idle per-key pacing states are swept.
const KEY_EXPIRY_SWEEP: std::time::Duration = std::time::Duration::from_secs(1);
/// A table accepting this fraction of its capacity is full: a throttle
/// without a reason is then the table's, not a key range's.
const KEY_SATURATION: f64 = 0.97;

/// Clean calls in a row after which the table's back-off starts over.
const CLEAN_CALLS_TO_RESET: u32 = 8;

/// How often a table held after a timeout looks whether the endpoint's
/// breaker has closed since.
const HOLD_RECHECK: std::time::Duration = std::time::Duration::from_millis(200);

fn backoff_schedule(cfg: &WriterConfig) -> ExponentialBackoff {
    // backon gives the capped exponential schedule; full jitter (a uniform
    // draw below it, as AWS recommends) is applied by the caller, because
    // backon's own jitter only ever adds to the delay.
    ExponentialBuilder::default()
        .with_min_delay(cfg.backoff_base)
        .with_max_delay(cfg.backoff_cap)
        .with_factor(2.0)
        .without_max_times()
        .build()
}
