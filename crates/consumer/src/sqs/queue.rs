//! [`QueueRun`]: what every task of one running SQS source shares, and
//! [`InFlight`], the messages in flight that the records' acknowledgements
//! point to.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::error::ConsumerError;
use crate::metrics::sqs as metric;
use crate::record::{AckTarget, Record};
use crate::sqs::config::{MAX_VISIBILITY_TIMEOUT, SqsConfig};
use crate::sqs::ledger::{Ledger, Released};
use crate::sqs::scaler::Scaler;

/// The ledger plus what every removal must update; the records' [`Ack`]s
/// point here.
pub(crate) struct InFlight {
    pub(crate) ledger: Mutex<Ledger>,
    /// Fully acknowledged message ids, for the deleter.
    pub(crate) done_tx: mpsc::UnboundedSender<u64>,
    /// Records of FIFO messages whose turn came, for the releaser.
    pub(crate) start_tx: mpsc::UnboundedSender<Vec<Record>>,
    /// One permit per message that may still be received.
    pub(crate) permits: Arc<Semaphore>,
    /// Messages in the ledger (shutdown waits for 0).
    pub(crate) count: watch::Sender<usize>,
    /// Woken when messages are done or leave: their bytes are free.
    pub(crate) freed: Notify,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("in_flight", &*self.count.borrow())
            .finish_non_exhaustive()
    }
}

impl InFlight {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Ledger> {
        // A panic elsewhere must not stop acknowledgements: the ledger's
        // invariants hold between its method calls.
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Accounts for `n` messages that left the ledger.
    pub(crate) fn left(&self, n: usize, len: usize) {
        if n > 0 {
            self.permits.add_permits(n);
            self.freed.notify_waiters();
        }
        self.count.send_replace(len);
        metrics::gauge!(metric::IN_FLIGHT).set(len as f64);
    }

    /// Waits until the unfinished messages hold less than `max` bytes;
    /// false if `deadline` came first.
    pub(crate) async fn wait_room(&self, max: usize, deadline: tokio::time::Instant) -> bool {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check: a release in between still wakes us.
            freed.as_mut().enable();
            if self.lock().bytes() < max as u64 {
                return true;
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep_until(deadline) => return false,
            }
        }
    }

    pub(crate) fn remove(&self, id: u64) {
        let mut l = self.lock();
        let n = usize::from(l.remove(id));
        let len = l.len();
        drop(l);
        self.left(n, len);
    }

    pub(crate) fn with_removal(
        &self,
        f: impl FnOnce(&mut Ledger) -> Vec<Released>,
    ) -> Vec<Released> {
        let mut l = self.lock();
        let out = f(&mut l);
        let len = l.len();
        drop(l);
        self.left(out.len(), len);
        out
    }
}

impl AckTarget for InFlight {
    fn ack(&self, serial: u64) {
        let effect = self.lock().ack(serial);
        if let Some(id) = effect.done {
            self.freed.notify_waiters();
            let _ = self.done_tx.send(id);
        }
        if let Some(records) = effect.start {
            let _ = self.start_tx.send(records);
        }
    }
}

/// What every task shares.
#[derive(Debug)]
pub(crate) struct QueueRun {
    pub(crate) cfg: SqsConfig,
    pub(crate) client: aws_sdk_sqs::Client,
    /// Queue name, for record origins.
    pub(crate) name: String,
    pub(crate) fifo: bool,
    pub(crate) in_flight: Arc<InFlight>,
    pub(crate) sink: mpsc::Sender<Vec<Record>>,
    /// Stop receiving (shutdown, a fatal error, or the sink closed).
    pub(crate) stop: CancellationToken,
    /// End the background tasks (after the shutdown drain).
    pub(crate) finish: CancellationToken,
    pub(crate) error: Mutex<Option<ConsumerError>>,
    pub(crate) scaler: Mutex<Scaler>,
    pub(crate) grow_tx: mpsc::UnboundedSender<()>,
}

impl QueueRun {
    pub(crate) fn fail(&self, e: ConsumerError) {
        warn!(error = %e, "sqs source stopping");
        let mut slot = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        slot.get_or_insert(e);
        self.stop.cancel();
    }

    pub(crate) fn visibility_secs(&self) -> i32 {
        i32::try_from(self.cfg.visibility_timeout.as_secs()).unwrap_or(i32::MAX)
    }

    /// Visibility of a given-up message on its `receive_count`-th receive:
    /// exponential from `retry_backoff_min`, capped, with jitter.
    pub(crate) fn retry_visibility(&self, receive_count: u32) -> i32 {
        let delay = retry_delay(&self.cfg, receive_count);
        i32::try_from(delay.as_secs()).unwrap_or(i32::MAX)
    }
}

/// The back-off of a given-up message on its `receive_count`-th receive.
pub(crate) fn retry_delay(cfg: &SqsConfig, receive_count: u32) -> Duration {
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
        .min(MAX_VISIBILITY_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        cfg.retry_backoff_max = MAX_VISIBILITY_TIMEOUT;
        assert!(retry_delay(&cfg, 40) <= MAX_VISIBILITY_TIMEOUT);
    }
}
