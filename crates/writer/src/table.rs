//! One table's batching and sending loop: feeds the pure [`TableQueue`] and
//! [`RateController`] with arrivals, timers and call results, and turns call
//! results into completions, requeues, bisections or a fatal error.

use std::collections::VecDeque;
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use aws_sdk_dynamodb::types::{BillingMode, TableDescription};
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tidemark_governor::{Governor, Outcome, Permit};
use tidemark_schema::{ItemKey, KeyAttributes, Reason, WireItem};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::ack::{Complete, Permits, Token, WriteOutcome};
use crate::batch::{Entry, TableQueue};
use crate::config::WriterConfig;
use crate::error::{Failure, WriterError, classify_describe, classify_raw};
use crate::keyrate::{Gate, ItemResult, KeyPacer, KeyParams, Scope};
use crate::missing::{MissingTableAction, MissingTableHandler, MissingWait};
use crate::rate::{Admit, CallFeedback, Capacity, RateController, RateParams};
use crate::response::{self, BatchAnswer};
use crate::stats::{SharedStats, TableStats};
use crate::transport::{RawResponse, Transport, TransportError};

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

enum Event {
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
    events: FuturesUnordered<BoxFuture<'static, Event>>,
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
    pub(crate) stats: Arc<SharedStats>,
    pub(crate) gov: Governor,
}

impl TableTask {
    pub(crate) fn new(
        table: String,
        resources: WriterResources,
        rx: mpsc::UnboundedReceiver<TableMsg>,
    ) -> Self {
        let WriterResources {
            client,
            transport,
            cfg,
            key_attributes,
            missing,
            stats: shared,
            gov,
        } = resources;
        let now = Instant::now();
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
            events: FuturesUnordered::new(),
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
            cfg,
        }
    }

    pub(crate) async fn run(mut self) -> Result<(), WriterError> {
        loop {
            let now = Instant::now();
            if !self.describe_pending && now >= self.next_describe {
                self.start_describe(now);
            }
            let wake = self.dispatch(now)?;
            self.resolve_flushes();
            if !self.rx_open && self.idle() {
                return Ok(());
            }
            let deadline = wake.map_or(self.next_describe, |w| w.min(self.next_describe));
            tokio::select! {
                biased;
                Some(ev) = self.events.next(), if !self.events.is_empty() => self.on_event(ev)?,
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

    fn idle(&self) -> bool {
        self.queue.is_empty()
            && self.isolated.is_empty()
            && self.missing_wait.is_idle()
            && self.calls_in_flight == 0
    }

    fn on_msg(&mut self, m: TableMsg, now: std::time::Instant) {
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
        self.events.push(
            async move {
                let result = Box::new(tokio::time::timeout(timeout, call).await);
                Event::Call {
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

    fn start_describe(&mut self, now: Instant) {
        let permit = match self.gov.poll_admit() {
            Ok(p) => p,
            Err(wait) => {
                self.next_describe = now + wait;
                return;
            }
        };
        self.describe_pending = true;
        let call = self
            .client
            .describe_table()
            .table_name(self.table.clone())
            .send();
        let timeout = self.cfg.call_timeout;
        self.events.push(
            async move {
                Event::Described(
                    Box::new(tokio::time::timeout(timeout, call).await),
                    permit,
                )
            }
            .boxed(),
        );
    }

    fn on_event(&mut self, ev: Event) -> Result<(), WriterError> {
        match ev {
            Event::Call {
                batch,
                isolated,
                sent_at,
                permit,
                result,
            } => self.on_call(batch, isolated, sent_at, permit, *result),
            Event::Described(result, permit) => self.on_described(*result, permit),
            Event::Missing(action) => {
                self.on_missing_answer(action);
                Ok(())
            }
        }
    }

    fn on_described(&mut self, result: DescribeResult, permit: Permit) -> Result<(), WriterError> {
        let now = Instant::now();
        self.describe_pending = false;
        self.capacity_known = true;
        self.next_describe = now + self.cfg.capacity_refresh;
        match result {
            Ok(Ok(out)) => {
                permit.finish(Outcome::Answered);
                if let Some(cap) = out.table().and_then(capacity_of) {
                    self.ctl.on_capacity(cap, now.into_std());
                    self.stats.rate(self.ctl.rate());
                }
            }
            Ok(Err(e)) => {
                let failure = classify_describe(&e);
                permit.finish(failure.outcome());
                match failure {
                    Failure::Fatal { code, message } => {
                        return Err(WriterError::Fatal {
                            table: self.table.clone(),
                            code,
                            message,
                        });
                    }
                    // Writes will meet it and ask the handler.
                    Failure::TableMissing(_) => self.next_describe = now + self.cfg.backoff_cap,
                    other => {
                        tracing::warn!(table = %self.table, error = ?other, "DescribeTable failed; pacing at the initial rate");
                        self.next_describe = now + self.cfg.backoff_cap;
                    }
                }
            }
            Err(_) => {
                permit.finish(Outcome::Congested);
                tracing::warn!(table = %self.table, "DescribeTable timed out");
                self.next_describe = now + self.cfg.backoff_cap;
            }
        }
        Ok(())
    }

    fn on_call(
        &mut self,
        batch: Batch,
        isolated: bool,
        sent_at: Instant,
        permit: Permit,
        result: CallResult,
    ) -> Result<(), WriterError> {
        let now = Instant::now();
        self.calls_in_flight = self.calls_in_flight.saturating_sub(1);
        self.stats
            .call(now.saturating_duration_since(sent_at).as_secs_f64());
        let mut fb = CallFeedback {
            sent_at: sent_at.into_std(),
            consumed_wcu: 0.0,
            throttled: false,
            failed: false,
        };
        let class = match result {
            Err(_) => Failure::Transient("call timed out".into()),
            Ok(Ok(resp)) if resp.status == 200 => {
                match response::parse(
                    &resp.body,
                    &self.table,
                    &self.key_attributes.pk,
                    &self.key_attributes.sk,
                ) {
                    Ok(answer) => {
                        permit.finish(Outcome::Answered);
                        // Unprocessed items of a bisected half rejoin the normal
                        // queue: the half was valid, so they cannot poison a batch.
                        self.on_output(batch, answer, &mut fb, sent_at, now);
                        self.ctl.on_result(fb, now.into_std());
                        self.stats.rate(self.ctl.rate());
                        return Ok(());
                    }
                    // What was stored is unknown: send it all again (puts
                    // are idempotent); never acknowledge what was not confirmed.
                    Err(msg) => Failure::Transient(msg),
                }
            }
            Ok(Ok(resp)) => classify_raw(resp.status, &resp.body),
            Ok(Err(TransportError::Unavailable(msg))) => Failure::Transient(msg),
            Ok(Err(TransportError::Invalid(msg))) => Failure::Fatal {
                code: "RequestBuild".into(),
                message: msg,
            },
        };
        permit.finish(class.outcome());
        match class {
            Failure::Throttled(scope) => {
                let results: Vec<ItemResult> = batch
                    .iter()
                    .map(|e| ItemResult {
                        key: e.pk_hash,
                        wcu: e.wcu as f64,
                        stored: false,
                    })
                    .collect();
                fb.throttled = self.table_throttled(&results, scope, sent_at, now);
                self.stats.throttled(0);
                if fb.throttled || isolated {
                    self.retry(batch, isolated, now);
                } else {
                    self.requeue_paced(batch);
                }
            }
            Failure::Transient(msg) if self.gov.sent_before_close(sent_at) => {
                // Hung through the recovery and timed out after it: DynamoDB
                // has answered since, so no back-off (it could hold the table
                // for seconds) and no cut of the concurrency.
                tracing::debug!(table = %self.table, error = %msg, "BatchWriteItem sent before the recovery failed; resent at once");
                self.stats.transient();
                self.requeue_now(batch, isolated);
            }
            Failure::Transient(msg) => {
                tracing::debug!(table = %self.table, error = %msg, "transient BatchWriteItem failure");
                fb.failed = true;
                self.stats.transient();
                self.retry_congested(batch, isolated, now);
            }
            Failure::Invalid(msg) => self.bisect(batch, msg),
            Failure::TableMissing(msg) => {
                tracing::info!(table = %self.table, message = %msg, "table missing; asking the handler");
                if self.missing_wait.park(batch) {
                    let fut = self.missing.on_missing(&self.table);
                    self.events
                        .push(async move { Event::Missing(fut.await) }.boxed());
                }
            }
            Failure::Fatal { code, message } => {
                return Err(WriterError::Fatal {
                    table: self.table.clone(),
                    code,
                    message,
                });
            }
        }
        self.ctl.on_result(fb, now.into_std());
        self.stats.rate(self.ctl.rate());
        Ok(())
    }

    fn on_output(
        &mut self,
        batch: Batch,
        answer: BatchAnswer,
        fb: &mut CallFeedback,
        sent_at: Instant,
        now: Instant,
    ) {
        if let Some(wcu) = answer.consumed {
            self.stats.consumed(wcu);
        }
        let unprocessed = answer.unprocessed.len();
        let (stored, again) = if unprocessed == 0 {
            (batch, Vec::new())
        } else {
            match split_unprocessed(batch, &answer.unprocessed) {
                Ok(split) => split,
                // Cannot tell which were written: send them all again (puts
                // are idempotent); never acknowledge what was not confirmed.
                Err(all) => (Vec::new(), all),
            }
        };
        let stored_wcu: u64 = stored.iter().map(|e| e.wcu).sum();
        // Some emulators report 1 unit per call; never feed the controller
        // less than the stored items' own cost.
        fb.consumed_wcu = answer.consumed.unwrap_or(0.0).max(stored_wcu as f64);
        let table_throttled = if self.keys.is_some() {
            let results: Vec<ItemResult> = stored
                .iter()
                .map(|e| (e, true))
                .chain(again.iter().map(|e| (e, false)))
                .map(|(e, ok)| ItemResult {
                    key: e.pk_hash,
                    wcu: e.wcu as f64,
                    stored: ok,
                })
                .collect();
            self.table_throttled(&results, Scope::Unknown, sent_at, now)
        } else {
            !again.is_empty()
        };
        if !again.is_empty() {
            fb.throttled = table_throttled;
            self.stats.throttled(unprocessed as u64);
            if table_throttled {
                self.retry(again, false, now);
            } else {
                self.requeue_paced(again);
            }
        } else if self.backoff_used {
            self.clean_calls += 1;
            if self.clean_calls >= CLEAN_CALLS_TO_RESET {
                self.backoff = backoff_schedule(&self.cfg);
                self.backoff_used = false;
                self.clean_calls = 0;
            }
        }
        self.complete(stored, &WriteOutcome::Stored);
    }

    /// Feeds a call's items to per-key pacing; returns whether the table's
    /// own controller and back-off must treat the call as throttled (always,
    /// without key pacing, if anything was throttled).
    fn table_throttled(
        &mut self,
        results: &[ItemResult],
        scope: Scope,
        sent_at: Instant,
        now: Instant,
    ) -> bool {
        let std_now = now.into_std();
        let saturated = self.ctl.saturated(std_now, KEY_SATURATION);
        match self.keys.as_mut() {
            Some(k) => k.on_result(
                sent_at.into_std(),
                results,
                scope,
                saturated,
                std_now,
                self.rng.f64(),
            ),
            None => results.iter().any(|r| !r.stored),
        }
    }

    /// Items of keys throttled on their own: back to the queue, where their
    /// keys' pacing holds them; the table is not held.
    fn requeue_paced(&mut self, batch: Batch) {
        self.stats.retried(batch.len() as u64);
        self.queue.requeue_front(batch);
    }

    /// A call that timed out or failed with a 5xx: besides the table's own
    /// back-off, the endpoint's back-off and retry budget apply (the batch
    /// waits, it is never dropped).
    fn retry_congested(&mut self, batch: Batch, isolated: bool, now: Instant) {
        let mut delay = self.requeue(batch, isolated).max(self.gov.retry_delay());
        if let Err(wait) = self.gov.try_retry() {
            delay = delay.max(wait);
        }
        let until = now + delay;
        // Set now: only a close after this failure ends the hold early.
        self.congested_hold = Some((
            now,
            self.congested_hold.map_or(until, |(_, h)| h.max(until)),
        ));
    }

    /// Back to the front of the queue after a back-off with full jitter.
    fn retry(&mut self, batch: Batch, isolated: bool, now: Instant) {
        let until = now + self.requeue(batch, isolated);
        self.hold_until = Some(self.hold_until.map_or(until, |h| h.max(until)));
    }

    /// Puts a batch to retry back at the front; returns the table's next
    /// jittered back-off.
    fn requeue(&mut self, batch: Batch, isolated: bool) -> std::time::Duration {
        self.clean_calls = 0;
        self.requeue_now(batch, isolated);
        let cap = self.backoff.next().unwrap_or(self.cfg.backoff_cap);
        self.backoff_used = true;
        cap.mul_f64(self.rng.f64())
    }

    /// Puts a batch to retry back at the front, with no back-off.
    fn requeue_now(&mut self, batch: Batch, isolated: bool) {
        self.stats.retried(batch.len() as u64);
        if isolated {
            // Keep a bisected half apart from other items until it is settled.
            self.isolated.push_front(batch);
        } else {
            self.queue.requeue_front(batch);
        }
    }

    /// A batch DynamoDB refused: halves are tried alone until single items
    /// are left; those are rejected with DynamoDB's message.
    fn bisect(&mut self, mut batch: Batch, msg: String) {
        if batch.len() <= 1 {
            tracing::warn!(table = %self.table, message = %msg, "item rejected by DynamoDB");
            self.complete(
                batch,
                &WriteOutcome::Rejected {
                    reason: Reason::DynamodbRejected,
                    message: msg,
                },
            );
            return;
        }
        let second = batch.split_off(batch.len() / 2);
        self.isolated.push_front(second);
        self.isolated.push_front(batch);
    }

    fn on_missing_answer(&mut self, action: MissingTableAction) {
        let waiting = self.missing_wait.answered();
        match action {
            MissingTableAction::Retry => {
                for b in waiting.into_iter().rev() {
                    self.queue.requeue_front(b);
                }
                // The table may have been created with new capacity.
                if !self.describe_pending {
                    self.start_describe(Instant::now());
                }
                self.retry(Vec::new(), false, Instant::now());
            }
            MissingTableAction::Reject(msg) => {
                let outcome = WriteOutcome::Rejected {
                    reason: Reason::TableMissing,
                    message: msg,
                };
                let mut all: Batch = waiting.into_iter().flatten().collect();
                all.extend(self.isolated.drain(..).flatten());
                all.extend(self.queue.drain());
                self.complete(all, &outcome);
            }
        }
    }

    fn complete(&mut self, entries: Batch, outcome: &WriteOutcome) {
        if entries.is_empty() {
            return;
        }
        self.queue.release(&entries);
        let items = entries.len() as u64;
        let mut tokens = 0u64;
        let mut released: Option<Permits> = None;
        // Consecutive tokens of one target are reported in one call.
        let mut group: Option<Arc<dyn Complete>> = None;
        let mut tags: Vec<u64> = Vec::with_capacity(entries.len());
        for e in entries {
            for t in e.tokens {
                tokens += 1;
                self.pending_tokens -= 1;
                for w in &mut self.flush_waiters {
                    if t.seq < w.before {
                        w.remaining -= 1;
                    }
                }
                // One release of the whole call's permits: each release
                // takes the semaphore's lock.
                match &mut released {
                    Some(p) => p.merge(t.permits),
                    None => released = Some(t.permits),
                }
                match &group {
                    Some(g) if t.done.same_target(g) => {}
                    _ => {
                        if let Some(g) = group.take() {
                            g.complete(&tags, outcome);
                            tags.clear();
                        }
                        group = Some(t.done.target().clone());
                    }
                }
                tags.push(t.done.tag());
            }
        }
        if let Some(g) = group {
            g.complete(&tags, outcome);
        }
        drop(released);
        match outcome {
            WriteOutcome::Stored => self.stats.stored(items, tokens),
            WriteOutcome::Rejected { reason, .. } => self.stats.dead_letter(*reason, tokens),
        }
    }
}

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

/// Splits a batch into (stored, unprocessed) by matching the returned keys
/// to entries. `Err(batch)` if any returned key is unreadable or matches
/// nothing.
fn split_unprocessed(
    batch: Batch,
    unprocessed: &[Option<ItemKey>],
) -> Result<(Batch, Batch), Batch> {
    let mut again_idx = vec![false; batch.len()];
    for u in unprocessed {
        let found = u.as_ref().and_then(|k| {
            batch
                .iter()
                .enumerate()
                .position(|(i, e)| !again_idx[i] && e.key == *k)
        });
        match found {
            Some(i) => again_idx[i] = true,
            None => return Err(batch),
        }
    }
    let mut stored = Vec::new();
    let mut again = Vec::new();
    for (e, a) in batch.into_iter().zip(again_idx) {
        if a {
            again.push(e);
        } else {
            stored.push(e);
        }
    }
    Ok((stored, again))
}

/// The write capacity DescribeTable reports; `None` if it says nothing usable.
pub(crate) fn capacity_of(t: &TableDescription) -> Option<Capacity> {
    let on_demand = t
        .billing_mode_summary()
        .and_then(|b| b.billing_mode())
        .is_some_and(|m| *m == BillingMode::PayPerRequest);
    let table_wcu = t
        .provisioned_throughput()
        .and_then(|p| p.write_capacity_units())
        .filter(|w| *w > 0);
    match (on_demand, table_wcu) {
        (false, Some(wcu)) => {
            // A GSI with less write capacity throttles the table's writes.
            let gsi_min = t
                .global_secondary_indexes()
                .iter()
                .filter_map(|g| {
                    g.provisioned_throughput()
                        .and_then(|p| p.write_capacity_units())
                })
                .filter(|w| *w > 0)
                .min();
            let wcu = gsi_min.map_or(wcu, |g| g.min(wcu));
            Some(Capacity::Provisioned { wcu: wcu as f64 })
        }
        _ => Some(Capacity::OnDemand {
            max_wcu: t
                .on_demand_throughput()
                .and_then(|o| o.max_write_request_units())
                .filter(|w| *w > 0)
                .map(|w| w as f64),
            warm_wcu: t
                .warm_throughput()
                .and_then(|w| w.write_units_per_second())
                .filter(|w| *w > 0)
                .map(|w| w as f64),
        }),
    }
}
