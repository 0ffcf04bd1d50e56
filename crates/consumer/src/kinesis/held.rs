//! The leases this worker holds: each one's fencing state
//! ([`HeldLease`], shared by its reader, the renewer and the balancing
//! loop), and the one map of them with their readers ([`HeldLeases`]).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::{Mutex, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::info;

use crate::kinesis::checkpoint::AckTracker;
use crate::kinesis::lease::item::Checkpoint;
use crate::kinesis::lease::table::LeaseTable;
use crate::kinesis::lease::timing::{Fenced, Written};
use crate::kinesis::status::{ShardState, StatusHandle};
use crate::metrics::kinesis as metric;

/// A held lease, shared by the renewer, the balancing loop and the reader.
#[derive(Debug)]
pub(crate) struct HeldLease {
    pub(crate) key: String,
    /// The fencing counter. Every counter-bumping write (renew, checkpoint,
    /// release) holds this lock, so they never race each other.
    pub(crate) counter: Mutex<u64>,
    /// Send time of the last successful fenced write: the lease deadline
    /// ([`LeaseTiming::phase`](crate::kinesis::lease::timing::LeaseTiming::phase))
    /// is judged from it.
    pub(crate) renewed: watch::Sender<Instant>,
    /// Cancelled when the lease is lost (refused write, or past the failover
    /// time without a renewal): no more writes, the reader stops.
    pub(crate) lost: CancellationToken,
    /// Set once released: no more writes.
    pub(crate) released: AtomicBool,
    /// The last write ended unanswered: it may have been applied.
    pub(crate) unsure: AtomicBool,
    /// The shard's acknowledgements: the renewer checkpoints from them.
    pub(crate) tracker: Arc<AckTracker>,
    /// The checkpoint written last, and when.
    checkpoint: std::sync::Mutex<CheckpointState>,
}

#[derive(Debug)]
struct CheckpointState {
    written: Checkpoint,
    /// When `written` was written (or the lease taken).
    at: Instant,
}

impl HeldLease {
    pub(crate) fn new(
        key: &str,
        written: Written,
        checkpoint: Checkpoint,
        tracker: Arc<AckTracker>,
    ) -> Self {
        Self {
            key: key.to_string(),
            counter: Mutex::new(written.counter),
            renewed: watch::Sender::new(written.sent),
            lost: CancellationToken::new(),
            released: AtomicBool::new(false),
            unsure: AtomicBool::new(false),
            tracker,
            checkpoint: std::sync::Mutex::new(CheckpointState {
                written: checkpoint,
                at: Instant::now(),
            }),
        }
    }

    fn cp(&self) -> std::sync::MutexGuard<'_, CheckpointState> {
        self.checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The checkpoint written last (or read at acquisition).
    pub(crate) fn written(&self) -> Checkpoint {
        self.cp().written.clone()
    }

    /// Records a written checkpoint, and shows it in the status.
    pub(crate) fn set_written(&self, cp: Checkpoint, status: &StatusHandle) {
        let text = shown(&cp);
        match &cp {
            Checkpoint::At(p) => self.tracker.written(Some(p)),
            Checkpoint::ShardEnd => self.tracker.written(None),
            _ => {}
        }
        let lag = self.tracker.checkpoint_lag();
        status.update(&self.key, |s| {
            s.checkpoint = Some(text);
            s.checkpoint_lag_records = lag.records;
            s.checkpoint_lag_ms = lag.age.as_millis() as u64;
        });
        let mut st = self.cp();
        st.written = cp;
        st.at = Instant::now();
    }

    /// The checkpoint the renewer writes now: what the tracker says is
    /// acknowledged, when it is past the written one (never behind it, nor
    /// over `SHARD_END`) and `interval` passed since the last checkpoint
    /// write.
    pub(crate) fn due_checkpoint(&self, interval: Duration, now: Instant) -> Option<Checkpoint> {
        let pos = self.tracker.checkpoint()?;
        let st = self.cp();
        if now.saturating_duration_since(st.at) < interval {
            return None;
        }
        let cp = Checkpoint::At(pos);
        (!covers(&st.written, &cp)).then_some(cp)
    }

    /// Sends a fenced write of this lease at `*counter` (the caller holds
    /// the counter lock) and records its outcome. When an earlier write
    /// ended unanswered, a refusal may only mean that one was applied: the
    /// lease is read back, and if it shows us as owner at the next counter,
    /// that counter is adopted and the write sent once more. The lease time
    /// is not extended by the adoption itself (its send time is unknown).
    pub(crate) async fn write<F, Fut>(
        &self,
        table: &LeaseTable,
        me: &str,
        counter: &mut u64,
        send: F,
    ) -> Fenced
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Fenced>,
    {
        let mut r = send(*counter).await;
        if matches!(r, Ok(None)) && self.unsure.swap(false, Ordering::Relaxed) {
            r = match table.get(&self.key).await {
                Ok(Some(l)) if l.owner.as_deref() == Some(me) && l.counter == *counter + 1 => {
                    info!(shard = %self.key, "an unanswered lease write was applied; lease kept");
                    *counter = l.counter;
                    send(*counter).await
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            };
        }
        match &r {
            Ok(Some(w)) => {
                self.unsure.store(false, Ordering::Relaxed);
                self.record_write(counter, *w);
            }
            Ok(None) => {}
            Err(_) => self.unsure.store(true, Ordering::Relaxed),
        }
        r
    }

    /// True once lost or released.
    pub(crate) fn is_gone(&self) -> bool {
        self.lost.is_cancelled() || self.released.load(Ordering::Relaxed)
    }

    /// Records a successful fenced write (called with the counter lock held).
    fn record_write(&self, counter: &mut u64, w: Written) {
        *counter = w.counter;
        // Keep the latest send time: a renew and a checkpoint may overlap.
        self.renewed.send_if_modified(|t| {
            let newer = w.sent > *t;
            if newer {
                *t = w.sent;
            }
            newer
        });
    }

    /// Marks the lease lost (once), with metrics and status.
    pub(crate) fn fence(&self, status: &StatusHandle) {
        if self.lost.is_cancelled() {
            return;
        }
        self.lost.cancel();
        metrics::counter!(metric::LEASE_CHANGES, "kind" => "lost").increment(1);
        status.update(&self.key, |s| {
            s.owned = false;
            s.state = ShardState::Lost;
        });
    }
}

/// True when checkpoint `written` is at or past `next`.
fn covers(written: &Checkpoint, next: &Checkpoint) -> bool {
    match (written, next) {
        (Checkpoint::ShardEnd, _) => true,
        (Checkpoint::At(w), Checkpoint::At(p)) => p <= w,
        (w, p) => w == p,
    }
}

/// A checkpoint as the status shows it.
fn shown(cp: &Checkpoint) -> String {
    match cp {
        Checkpoint::At(p) => format!("{}.{}", p.sequence, p.sub_sequence),
        other => format!("{other:?}"),
    }
}

/// A held lease and its reader task. Dropping it aborts the reader, so
/// dropping (or aborting) the source's `run` stops every reader with it,
/// like a crash: nothing is checkpointed or released.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) lease: Arc<HeldLease>,
    pub(crate) task: AbortOnDropHandle<()>,
}

/// Every lease this worker holds, by key: the one map the balancing loop
/// adds to, the renewer and the heartbeat read, and the shutdown waits on.
#[derive(Debug, Default)]
pub(crate) struct HeldLeases(std::sync::Mutex<HashMap<String, Held>>);

impl HeldLeases {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `held` under `key`.
    pub(crate) fn insert(&self, key: String, held: Held) {
        self.map().insert(key, held);
    }

    /// The held leases' fencing states.
    pub(crate) fn leases(&self) -> Vec<Arc<HeldLease>> {
        self.map().values().map(|h| h.lease.clone()).collect()
    }

    /// The held leases' keys.
    pub(crate) fn keys(&self) -> HashSet<String> {
        self.map().keys().cloned().collect()
    }

    /// True when `key` is held.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.map().contains_key(key)
    }

    /// How many leases are held.
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    /// True when none is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// Drops leases that are lost, released, or whose reader finished; the
    /// status no longer claims them.
    pub(crate) fn prune(&self, status: &StatusHandle) {
        self.map().retain(|key, h| {
            let keep = !h.task.is_finished() && !h.lease.is_gone();
            if !keep {
                status.update(key, |s| s.owned = false);
            }
            keep
        });
    }

    /// Drops leases whose reader finished; true when none is left.
    pub(crate) fn drop_finished(&self) -> bool {
        let mut m = self.map();
        m.retain(|_, h| !h.task.is_finished());
        m.is_empty()
    }

    /// Aborts every reader still running; returns their keys.
    pub(crate) fn abort_all(&self) -> Vec<String> {
        let held = std::mem::take(&mut *self.map());
        held.into_keys().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinesis::checkpoint::Position;
    use crate::kinesis::lease::table::LeaseTable;
    use crate::record::AckTarget;
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    const REFUSED: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}"#;

    fn item(owner: &str, counter: u64) -> GetItemOutput {
        GetItemOutput::builder()
            .item("leaseKey", AttributeValue::S("s".into()))
            .item("leaseOwner", AttributeValue::S(owner.into()))
            .item("leaseCounter", AttributeValue::N(counter.to_string()))
            .build()
    }

    /// A renewal at counter 5 after an earlier unanswered write (or not),
    /// against a table that refuses the first UpdateItem, then accepts,
    /// and reads back `owner` at counter 6.
    async fn renew_after(unsure: bool, owner: &'static str) -> (Fenced, u64, usize) {
        let update = mock!(Client::update_item)
            .sequence()
            .http_status(400, Some(REFUSED.to_string()))
            .output(|| UpdateItemOutput::builder().build())
            .build();
        let get = mock!(Client::get_item).then_output(move || item(owner, 6));
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&update, &get]);
        let table = LeaseTable::new(client, "leases");
        let lease = HeldLease::new(
            "s",
            Written {
                counter: 5,
                sent: Instant::now(),
            },
            Checkpoint::TrimHorizon,
            Arc::new(AckTracker::new()),
        );
        lease.unsure.store(unsure, Ordering::Relaxed);
        let mut counter = 5;
        let r = lease
            .write(&table, "me", &mut counter, |c| table.renew("s", "me", c))
            .await;
        (r, counter, get.num_calls())
    }

    #[tokio::test]
    async fn an_applied_unanswered_write_is_adopted_and_the_write_resent() {
        let (r, counter, reads) = renew_after(true, "me").await;
        assert_eq!(r.unwrap().map(|w| w.counter), Some(7));
        assert_eq!((counter, reads), (7, 1));
    }

    #[tokio::test]
    async fn a_refusal_is_a_lost_lease_when_nothing_was_unanswered_or_not_ours() {
        let (r, counter, reads) = renew_after(false, "me").await;
        assert_eq!(r.unwrap(), None);
        assert_eq!((counter, reads), (5, 0), "no re-read without doubt");
        let (r, counter, reads) = renew_after(true, "other").await;
        assert_eq!(r.unwrap(), None);
        assert_eq!((counter, reads), (5, 1));
    }

    /// The renewer writes only a checkpoint past the written one, never
    /// one behind it nor over `SHARD_END`, and at most once per
    /// `checkpoint_interval`.
    #[tokio::test(start_paused = true)]
    async fn the_renewer_writes_no_checkpoint_behind_the_written_one() {
        let tracker = Arc::new(AckTracker::new());
        let written = Written {
            counter: 1,
            sent: Instant::now(),
        };
        let lease = HeldLease::new("s", written, Checkpoint::TrimHorizon, tracker.clone());
        let status = StatusHandle::default();
        let at = |s: &str| Checkpoint::At(Position::new(s, 0));
        let interval = Duration::from_secs(5);
        let ack = |s: &str| {
            let serial = tracker.push(Position::new(s, 0)).unwrap();
            tracker.ack(serial);
        };
        ack("5");
        assert_eq!(
            lease.due_checkpoint(interval, Instant::now()),
            None,
            "too soon after taking the lease"
        );
        tokio::time::advance(interval).await;
        assert_eq!(
            lease.due_checkpoint(interval, Instant::now()),
            Some(at("5"))
        );
        lease.set_written(at("7"), &status);
        tokio::time::advance(interval).await;
        assert_eq!(
            lease.due_checkpoint(interval, Instant::now()),
            None,
            "behind the written one"
        );
        ack("9");
        assert_eq!(
            lease.due_checkpoint(interval, Instant::now()),
            Some(at("9"))
        );
        lease.set_written(Checkpoint::ShardEnd, &status);
        tokio::time::advance(interval).await;
        assert_eq!(lease.due_checkpoint(interval, Instant::now()), None);
    }
}
