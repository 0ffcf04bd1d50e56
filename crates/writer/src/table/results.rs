//! What a call's answer does: stored items are acknowledged, unprocessed
//! and throttled ones requeued (after the table's back-off, the key's own
//! pacing, or the endpoint's), a refused batch bisected down to the item
//! DynamoDB rejects, and a missing table handed to its handler.

use std::sync::Arc;

use futures::FutureExt;
use tidemark_governor::{Outcome, Permit};
use tidemark_schema::{ItemKey, Reason};
use tokio::time::Instant;

use super::{
    Answer, Batch, CLEAN_CALLS_TO_RESET, CallResult, KEY_SATURATION, TableTask, backoff_schedule,
};
use crate::ack::{Complete, Permits, WriteOutcome};
use crate::error::{Failure, WriterError, classify_raw};
use crate::keyrate::{ItemResult, Scope};
use crate::missing::MissingTableAction;
use crate::rate::CallFeedback;
use crate::response::{self, BatchAnswer};
use crate::transport::TransportError;

impl TableTask {
    pub(super) fn on_call(
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
                    self.answers
                        .push(async move { Answer::Missing(fut.await) }.boxed());
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

    pub(super) fn on_missing_answer(&mut self, action: MissingTableAction) {
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

    /// Reports a finished call's entries and releases their keys.
    fn complete(&mut self, entries: Batch, outcome: &WriteOutcome) {
        self.queue.release(&entries);
        self.report(entries, outcome);
    }

    /// Reports entries that ended (their keys already released, or never
    /// in flight: pending entries taken out of the queue).
    pub(super) fn report(&mut self, entries: Batch, outcome: &WriteOutcome) {
        if entries.is_empty() {
            return;
        }
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
        if self.pending_tokens == 0 {
            self.busy_since = None;
        }
        match outcome {
            WriteOutcome::Stored => {
                self.last_stored = Some(Instant::now());
                self.stats.stored(items, tokens);
                if self.is_late {
                    self.stats.late_stored(tokens);
                }
            }
            WriteOutcome::Rejected { reason, .. } => self.stats.dead_letter(*reason, tokens),
        }
    }
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
