//! The record every source hands to the pipeline, and its acknowledgement.
//!
//! An [`Ack`] is a serial number in a source-owned tracker plus a shared
//! pointer to that tracker: acknowledging costs one `Arc` clone at creation
//! and one short mutex section at `done()`. Dropping an `Ack` without calling
//! [`Ack::done`] leaves the record unacknowledged, so a checkpoint can never
//! pass a record that was lost on the way.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tidemark_schema::{Origin, Reason};

/// Something that learns when records it handed out are durably handled.
pub trait AckTarget: Send + Sync + 'static {
    /// Marks the record with this serial as stored or dead-lettered.
    fn ack(&self, serial: u64);

    /// Marks several records at once; a target that takes a lock per ack
    /// overrides this to take it once.
    fn ack_many(&self, serials: &[u64]) {
        for s in serials {
            self.ack(*s);
        }
    }
}

/// Acknowledgement handle of one record. Call [`Ack::done`] once the record is
/// stored or dead-lettered durably; dropping it instead means "not handled".
pub struct Ack {
    target: Arc<dyn AckTarget>,
    serial: u64,
}

impl Ack {
    /// An acknowledgement of record `serial` in `target`.
    pub fn new(target: Arc<dyn AckTarget>, serial: u64) -> Self {
        Self { target, serial }
    }

    /// Says the record is stored or dead-lettered durably.
    pub fn done(self) {
        self.target.ack(self.serial);
    }

    /// [`done`](Self::done) for several records: runs of acks with the same
    /// target are reported with one [`AckTarget::ack_many`] call.
    pub fn done_all(acks: impl IntoIterator<Item = Ack>) {
        let mut run: Option<Arc<dyn AckTarget>> = None;
        let mut serials = Vec::new();
        for a in acks {
            if let Some(t) = &run
                && !Arc::ptr_eq(t, &a.target)
            {
                t.ack_many(&serials);
                serials.clear();
                run = None;
            }
            serials.push(a.serial);
            if run.is_none() {
                run = Some(a.target);
            }
        }
        if let Some(t) = run {
            t.ack_many(&serials);
        }
    }

    /// Splits the acknowledgement of a record holding `n` events (NDJSON,
    /// a JSON array) into one per event: the record is acknowledged when
    /// every one of them is done, and never if one is dropped. With `n` = 0
    /// the record holds nothing to store and is acknowledged now.
    pub fn split(self, n: usize) -> Vec<Ack> {
        match n {
            0 => {
                self.done();
                Vec::new()
            }
            1 => vec![self],
            _ => {
                let fan: Arc<dyn AckTarget> = Arc::new(FanIn {
                    remaining: AtomicUsize::new(n),
                    whole: Mutex::new(Some(self)),
                });
                (0..n as u64).map(|i| Ack::new(fan.clone(), i)).collect()
            }
        }
    }

    /// The record's serial within its tracker (for diagnostics).
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }
}

impl fmt::Debug for Ack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ack").field("serial", &self.serial).finish()
    }
}

/// The acks of one record's inner events: the last one done acknowledges
/// the record. Each inner [`Ack`] is consumed by `done`, so each counts once.
struct FanIn {
    remaining: AtomicUsize,
    whole: Mutex<Option<Ack>>,
}

impl AckTarget for FanIn {
    fn ack(&self, _serial: u64) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Poisoning is moot: the slot is either taken or not.
            let whole = self.whole.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(whole) = whole {
                whole.done();
            }
        }
    }
}

/// A problem the source already knows about: the pipeline dead-letters the
/// record with this reason, then acknowledges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defect {
    /// Dead-letter reason, e.g. [`Reason::CorruptAggregate`].
    pub reason: Reason,
    /// Human-readable detail for the dead-letter entry.
    pub message: String,
}

/// One event from any source, carrying the way to acknowledge it.
#[derive(Debug)]
pub struct Record {
    /// Source position (stream, shard, sequence, sub-sequence).
    pub origin: Origin,
    /// Partition key (the user record's key for a KPL sub-record).
    pub partition_key: String,
    /// Payload bytes (empty for a defective aggregate).
    pub data: Bytes,
    /// ApproximateArrivalTimestamp, epoch milliseconds.
    pub arrival_ms: i64,
    /// Acknowledgement: call `done()` when stored or dead-lettered.
    pub ack: Ack,
    /// Set when the source knows the record is bad (corrupt KPL aggregate,
    /// a record or message body that cannot be split into events).
    pub defect: Option<Defect>,
    /// This event's position among the events of a source record holding
    /// several (`record_format` other than `json`): the events of one
    /// Kinesis record share its `origin` and are told apart by this, which
    /// a derived event id and a dead letter name. `None` for a record that
    /// is one event. (An SQS message's events are told apart by their
    /// origin's `index` instead, and leave this `None`.)
    pub inner: Option<u32>,
}

impl Record {
    /// True for the first (or only) event of a source record: counting
    /// these counts source records, not events.
    pub fn starts_source_record(&self) -> bool {
        self.inner.is_none_or(|i| i == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[derive(Default)]
    struct Count(AtomicU64);

    impl AckTarget for Count {
        fn ack(&self, _serial: u64) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_split_ack_acknowledges_once_after_every_part() {
        let target = Arc::new(Count::default());
        let mut parts = Ack::new(target.clone(), 7).split(3);
        assert_eq!(parts.len(), 3);
        parts.pop().unwrap().done();
        parts.pop().unwrap().done();
        assert_eq!(target.0.load(Ordering::SeqCst), 0, "one part still pending");
        Ack::done_all(parts);
        assert_eq!(target.0.load(Ordering::SeqCst), 1);

        // A dropped part leaves the record unacknowledged.
        let mut parts = Ack::new(target.clone(), 8).split(2);
        parts.pop().unwrap().done();
        drop(parts);
        assert_eq!(target.0.load(Ordering::SeqCst), 1);

        // Nothing inside: acknowledged at once; one inside: the ack itself.
        assert!(Ack::new(target.clone(), 9).split(0).is_empty());
        assert_eq!(target.0.load(Ordering::SeqCst), 2);
        let one = Ack::new(target.clone(), 10).split(1);
        assert_eq!(one[0].serial(), 10);
    }
}
