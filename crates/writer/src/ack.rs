//! Acknowledgements: who to tell when a submission ends ([`Complete`],
//! [`Completion`]), how it ended ([`WriteOutcome`]), and what a submission
//! carries through batching (its token and the memory permits it holds).
//! Depends on no other module of the crate.

use std::fmt;
use std::sync::Arc;

use tidemark_schema::Reason;
use tokio::sync::OwnedSemaphorePermit;

/// Receives the outcomes of submissions. One target serves many submissions,
/// told apart by their tags; the writer reports the submissions of one
/// written batch that share a target in one call, so a caller can settle a
/// whole group (one lock, one checkpoint update) instead of one per item.
pub trait Complete: Send + Sync + 'static {
    /// The submissions tagged `tags` ended with `outcome`. Each tag of each
    /// accepted submission is reported exactly once.
    fn complete(&self, tags: &[u64], outcome: &WriteOutcome);
}

/// Who to tell when a submission ends: a shared [`Complete`] target and this
/// submission's tag. Told exactly once per accepted submission, after
/// DynamoDB confirmed the write or the item was rejected for good.
pub struct Completion {
    target: Arc<dyn Complete>,
    tag: u64,
}

impl Completion {
    /// Reports to `target` under `tag`.
    pub fn new(target: Arc<dyn Complete>, tag: u64) -> Self {
        Completion { target, tag }
    }

    /// Reports by calling `f` (one allocation per submission: for callers
    /// that write few items).
    pub fn from_fn(f: impl FnOnce(WriteOutcome) + Send + 'static) -> Self {
        let f: OnceFn = Box::new(f);
        Completion::new(Arc::new(CallOnce(std::sync::Mutex::new(Some(f)))), 0)
    }

    /// This submission's tag.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Whether `self` and `other` report to the same target.
    pub(crate) fn same_target(&self, other: &Arc<dyn Complete>) -> bool {
        Arc::ptr_eq(&self.target, other)
    }

    /// The target, to report a group to.
    pub(crate) fn target(&self) -> &Arc<dyn Complete> {
        &self.target
    }

    /// Reports this submission alone.
    pub fn finish(self, outcome: WriteOutcome) {
        self.target.complete(&[self.tag], &outcome);
    }
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

type OnceFn = Box<dyn FnOnce(WriteOutcome) + Send + 'static>;

/// [`Completion::from_fn`]'s target: runs the function on the first report.
struct CallOnce(std::sync::Mutex<Option<OnceFn>>);

impl Complete for CallOnce {
    fn complete(&self, _tags: &[u64], outcome: &WriteOutcome) {
        let f = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(f) = f {
            f(outcome.clone());
        }
    }
}

/// How one submission ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// DynamoDB confirmed the item (or a later submission of the same key
    /// that superseded it) is stored.
    Stored,
    /// The item can never be stored; the caller dead-letters it.
    Rejected {
        /// `ItemTooLarge`, `DynamodbRejected`, `TableMissing` or `LateBacklog`.
        reason: Reason,
        /// Details, e.g. DynamoDB's ValidationException message.
        message: String,
    },
}

/// Memory held by one accepted submission, released when it completes:
/// its part of the writer's bound and of its table's share.
#[derive(Debug)]
pub(crate) struct Permits {
    pub(crate) items: OwnedSemaphorePermit,
    pub(crate) bytes: OwnedSemaphorePermit,
    pub(crate) share_items: OwnedSemaphorePermit,
    pub(crate) share_bytes: OwnedSemaphorePermit,
}

impl Permits {
    /// Takes over `other`'s permits, so that one drop releases both (they
    /// come from the same writer's and the same table's semaphores).
    pub(crate) fn merge(&mut self, other: Permits) {
        self.items.merge(other.items);
        self.bytes.merge(other.bytes);
        self.share_items.merge(other.share_items);
        self.share_bytes.merge(other.share_bytes);
    }
}

/// A submission's acknowledgement, carried through batching.
pub(crate) struct Token {
    pub(crate) done: Completion,
    pub(crate) seq: u64,
    pub(crate) permits: Permits,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}
