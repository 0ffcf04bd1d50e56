//! The record every source hands to the pipeline, and its acknowledgement.
//!
//! An [`Ack`] is a serial number in a source-owned tracker plus a shared
//! pointer to that tracker: acknowledging costs one `Arc` clone at creation
//! and one short mutex section at `done()`. Dropping an `Ack` without calling
//! [`Ack::done`] leaves the record unacknowledged, so a checkpoint can never
//! pass a record that was lost on the way.

use std::fmt;
use std::sync::Arc;

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

    /// The record's serial within its tracker (for diagnostics).
    pub fn serial(&self) -> u64 {
        self.serial
    }
}

impl fmt::Debug for Ack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ack").field("serial", &self.serial).finish()
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

/// One record from any source, carrying the way to acknowledge it.
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
    /// Set when the source knows the record is bad (corrupt KPL aggregate).
    pub defect: Option<Defect>,
}
