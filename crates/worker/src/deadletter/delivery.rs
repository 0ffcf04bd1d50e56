//! [`DeadLetters`]: the queue every dead letter goes through, bounded by
//! bytes, and the task that makes each entry durable before its record is
//! acknowledged: several batches in flight, transient failures retried
//! until the destination answers, an entry refused for good isolated by
//! halving its batch and then written to the fallback file when one is
//! configured, or else the worker stops.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tidemark_consumer::record::Ack;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tracing::{error, warn};

use super::entry::DeadLetter;
use super::file::FileSink;
use super::sink::{DeadLetterError, DeadLetterSink};

/// Bytes of dead letters queued or being written at once. Past it,
/// [`DeadLetters::send_bounded`] waits: a slow destination slows the
/// pipeline, and so the sources, instead of filling memory.
pub(crate) const QUEUE_BYTES: usize = 16 * 1024 * 1024;

/// Batches written at once: a slow destination (a queue answering in
/// seconds) still takes this many batches per round trip.
pub(crate) const CONCURRENCY: usize = 4;

/// Entries per batch handed to the destination (which splits it into its
/// own calls: 10 messages per SQS call, one item per DynamoDB put).
const BATCH_ENTRIES: usize = 100;

/// Longest one write of a batch may take before it counts as a transient
/// failure and is tried again: the SDK bounds each attempt by its own
/// timeout; this guards a destination that has none.
const WRITE_LIMIT: Duration = Duration::from_secs(60);

/// Failures of one batch between two warnings (the first is always logged).
const WARN_EVERY: u32 = 10;

/// A dead letter waiting to be written, with the acknowledgement to give
/// once it is durable (None for records with no source to advance).
type Pending = (DeadLetter, Option<Ack>);

/// Bytes held by queued and in-flight entries, with a wake-up when some
/// are freed.
#[derive(Debug)]
struct Budget {
    used: Mutex<usize>,
    cap: usize,
    freed: Notify,
}

impl Budget {
    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        // A plain counter: consistent whatever panicked while holding it.
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `n` bytes once they fit (an entry larger than the whole
    /// budget goes alone, when nothing else is held).
    async fn take(&self, n: usize) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut used = self.lock();
                if *used == 0 || *used + n <= self.cap {
                    *used += n;
                    return;
                }
            }
            freed.await;
        }
    }

    /// Takes `n` bytes now, past the cap if need be.
    fn force(&self, n: usize) {
        *self.lock() += n;
    }

    fn give(&self, n: usize) {
        {
            let mut used = self.lock();
            *used = used.saturating_sub(n);
            metrics::gauge!(crate::metrics::DEAD_LETTER_QUEUE_BYTES).set(*used as f64);
        }
        self.freed.notify_waiters();
    }

    fn used(&self) -> usize {
        *self.lock()
    }
}

/// Cheap, cloneable handle that queues dead letters for the writer task.
#[derive(Debug, Clone)]
pub(crate) struct DeadLetters {
    tx: mpsc::UnboundedSender<Pending>,
    budget: Arc<Budget>,
    /// Set once the "task has stopped" warning was logged: after a stop,
    /// every record still arriving would log it again.
    stopped_said: Arc<AtomicBool>,
}

impl DeadLetters {
    /// Starts the task writing to `sink`, with entries refused for good
    /// going to the file at `fallback` (none: such a refusal is fatal). It
    /// ends when every handle is dropped and the queue is written out, or
    /// with an error when an entry could be written nowhere.
    pub(crate) fn start(
        sink: Arc<dyn DeadLetterSink>,
        fallback: Option<PathBuf>,
    ) -> (
        DeadLetters,
        tokio::task::JoinHandle<Result<(), DeadLetterError>>,
    ) {
        Self::start_with(sink, fallback, QUEUE_BYTES)
    }

    /// [`start`](Self::start) with a queue of `queue_bytes`.
    pub(crate) fn start_with(
        sink: Arc<dyn DeadLetterSink>,
        fallback: Option<PathBuf>,
        queue_bytes: usize,
    ) -> (
        DeadLetters,
        tokio::task::JoinHandle<Result<(), DeadLetterError>>,
    ) {
        // The channel itself is unbounded: the byte budget is the bound.
        let (tx, rx) = mpsc::unbounded_channel();
        let budget = Arc::new(Budget {
            used: Mutex::new(0),
            cap: queue_bytes,
            freed: Notify::new(),
        });
        let fallback = fallback.map(|p| Arc::new(FileSink::new(p)));
        let task = tokio::spawn(run(sink, fallback, rx, budget.clone()));
        let handle = DeadLetters {
            tx,
            budget,
            stopped_said: Arc::new(AtomicBool::new(false)),
        };
        (handle, task)
    }

    /// Queues `entry` once the queue has room for it; `ack` is acknowledged
    /// once it is durable. The way for callers that may wait (the
    /// pipeline): a slow destination holds them back.
    pub(crate) async fn send_bounded(&self, entry: DeadLetter, ack: Option<Ack>) {
        let cost = entry.cost();
        self.budget.take(cost).await;
        self.enqueue(entry, ack, cost);
    }

    /// Queues `entry` now, past the queue's bound if need be: for callers
    /// that cannot wait (the writer's completions, whose number its own
    /// in-flight limit bounds).
    pub(crate) fn send(&self, entry: DeadLetter, ack: Option<Ack>) {
        let cost = entry.cost();
        self.budget.force(cost);
        self.enqueue(entry, ack, cost);
    }

    /// Bytes of entries queued or being written.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.budget.used()
    }

    fn enqueue(&self, entry: DeadLetter, ack: Option<Ack>, cost: usize) {
        metrics::counter!(crate::metrics::DEAD_LETTERS, "reason" => entry.reason.as_str())
            .increment(1);
        metrics::gauge!(crate::metrics::DEAD_LETTER_QUEUE_BYTES).set(self.budget.used() as f64);
        if let Err(mpsc::error::SendError((entry, _ack))) = self.tx.send((entry, ack)) {
            self.budget.give(cost);
            // Only after the task stopped: the record stays unacknowledged,
            // so the source delivers it again on restart. Nothing is lost.
            if !self.stopped_said.swap(true, Ordering::Relaxed) {
                warn!(reason = %entry.reason, source = %entry.source, "dead-letter task has stopped; this record and any later ones are left unacknowledged");
            }
        }
    }
}

async fn run(
    sink: Arc<dyn DeadLetterSink>,
    fallback: Option<Arc<FileSink>>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    budget: Arc<Budget>,
) -> Result<(), DeadLetterError> {
    let mut writing = JoinSet::new();
    let mut open = true;
    let mut buf: Vec<Pending> = Vec::new();
    loop {
        tokio::select! {
            n = rx.recv_many(&mut buf, BATCH_ENTRIES), if open && writing.len() < CONCURRENCY => {
                if n == 0 {
                    open = false;
                    continue;
                }
                let (entries, acks): (Vec<DeadLetter>, Vec<Option<Ack>>) = buf.drain(..).unzip();
                writing.spawn(write_batch(
                    sink.clone(),
                    fallback.clone(),
                    entries,
                    acks,
                    budget.clone(),
                ));
            }
            Some(done) = writing.join_next(), if !writing.is_empty() => {
                // A batch written nowhere ends the task; the batches still
                // being written are dropped with it, unacknowledged.
                match done {
                    Ok(result) => result?,
                    Err(e) => {
                        return Err(DeadLetterError::Destination {
                            destination: "dead letters".into(),
                            message: format!("a dead-letter write task failed: {e}"),
                            permanent: true,
                        });
                    }
                }
            }
            else => return Ok(()),
        }
    }
}

/// Makes one batch durable, then acknowledges its records and frees its
/// bytes. Entries the destination refuses for good go to the fallback file;
/// without one, or when it fails too, the error is returned (fatal).
async fn write_batch(
    sink: Arc<dyn DeadLetterSink>,
    fallback: Option<Arc<FileSink>>,
    entries: Vec<DeadLetter>,
    acks: Vec<Option<Ack>>,
    budget: Arc<Budget>,
) -> Result<(), DeadLetterError> {
    let cost: usize = entries.iter().map(DeadLetter::cost).sum();
    let (refused, last_error) = store(sink.as_ref(), &entries).await;
    if !refused.is_empty() {
        let left: Vec<DeadLetter> = refused.iter().map(|i| entries[*i].clone()).collect();
        let Some(file) = fallback else {
            // Named after the destination's own error: the cause.
            let (destination, why) = match last_error {
                Some(DeadLetterError::Destination {
                    destination,
                    message,
                    ..
                }) => (destination, message),
                None => ("dead letters".into(), "refused".into()),
            };
            let e = DeadLetterError::Destination {
                destination,
                message: format!(
                    "{} entries refused for good: {why} (no dead_letters.fallback_path is configured)",
                    left.len()
                ),
                permanent: true,
            };
            error!(error = %e, "dead letters cannot be stored: stopping");
            return Err(e);
        };
        warn!(
            entries = left.len(),
            path = %file.path().display(),
            error = last_error.map(|e| e.to_string()),
            "dead-letter destination refused entries for good: writing them to the fallback file"
        );
        if let Err(e) = file.write(&left).await {
            error!(error = %e, "the dead-letter fallback file cannot be written either: stopping");
            return Err(e);
        }
        metrics::counter!(crate::metrics::DEAD_LETTER_FALLBACKS).increment(left.len() as u64);
    }
    Ack::done_all(acks.into_iter().flatten());
    budget.give(cost);
    Ok(())
}

/// Writes `entries` to `sink`: a transient failure (throttling, a timeout,
/// a 5xx, no answer) is retried with capped back-off until the destination
/// answers, never given up; a part refused for good is split in halves
/// (each retried the same way) down to the single entries it refuses.
/// Returns the indexes of the entries refused for good, and the last
/// refusal.
async fn store(
    sink: &dyn DeadLetterSink,
    entries: &[DeadLetter],
) -> (Vec<usize>, Option<DeadLetterError>) {
    let backoff = || {
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(5))
            .with_jitter()
            .without_max_times()
            .build()
    };
    let mut delays = backoff();
    // (start index, length) of each part still to write.
    let mut todo = vec![(0usize, entries.len())];
    let mut refused = Vec::new();
    let mut last_refusal = None;
    let mut failures = 0u32;
    while let Some((start, len)) = todo.pop() {
        let part = &entries[start..start + len];
        let result = match tokio::time::timeout(WRITE_LIMIT, sink.write(part)).await {
            Ok(r) => r,
            Err(_) => Err(DeadLetterError::Destination {
                destination: "dead letters".into(),
                message: format!("no answer within {WRITE_LIMIT:?}"),
                permanent: false,
            }),
        };
        let e = match result {
            Ok(()) => {
                if failures > 0 {
                    delays = backoff();
                    failures = 0;
                }
                continue;
            }
            Err(e) => e,
        };
        metrics::counter!(crate::metrics::DEAD_LETTER_WRITE_ERRORS).increment(1);
        if e.is_permanent() {
            warn!(error = %e, entries = len, "dead-letter destination refused entries");
            if len > 1 {
                let half = len / 2;
                todo.push((start + half, len - half));
                todo.push((start, half));
            } else {
                refused.push(start);
            }
            last_refusal = Some(e);
            continue;
        }
        if failures.is_multiple_of(WARN_EVERY) {
            warn!(error = %e, entries = len, failures = failures + 1, "writing dead letters failed; retrying until the destination answers (records wait)");
        }
        failures += 1;
        tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(5))).await;
        todo.push((start, len));
    }
    refused.sort_unstable();
    (refused, last_refusal)
}

#[cfg(test)]
mod tests;
