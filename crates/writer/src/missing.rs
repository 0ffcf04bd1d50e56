//! Writes to a table that does not exist: the caller's policy
//! ([`MissingTableHandler`], [`MissingTableAction`], [`RejectMissing`]) and
//! the table loop's pure bookkeeping of batches waiting for its answer.
//! Depends on no other module of the crate.

use futures::future::BoxFuture;

/// What the writer should do about writes to a table that does not exist.
pub trait MissingTableHandler: Send + Sync + 'static {
    /// Called when a write finds `table` missing. Writes to that table wait
    /// for the answer; at most one call per table is outstanding.
    fn on_missing(&self, table: &str) -> BoxFuture<'static, MissingTableAction>;
}

/// The answer of a [`MissingTableHandler`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissingTableAction {
    /// The table exists now (e.g. it was created): write again.
    Retry,
    /// Give up: the pending items are rejected with `TableMissing` and this
    /// message.
    Reject(String),
}

/// A handler that rejects every write to a missing table.
#[derive(Debug, Clone, Copy, Default)]
pub struct RejectMissing;

impl MissingTableHandler for RejectMissing {
    fn on_missing(&self, table: &str) -> BoxFuture<'static, MissingTableAction> {
        let msg = format!("table {table} does not exist");
        Box::pin(async move { MissingTableAction::Reject(msg) })
    }
}

/// Batches that found their table missing, parked until the handler
/// answers; at most one handler call per table is outstanding.
#[derive(Debug)]
pub(crate) struct MissingWait<B> {
    waiting: Vec<B>,
    asking: bool,
}

impl<B> Default for MissingWait<B> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            asking: false,
        }
    }
}

impl<B> MissingWait<B> {
    /// Parks `batch`. True when the handler must be asked now (no call is
    /// outstanding); the caller then starts exactly one call.
    pub(crate) fn park(&mut self, batch: B) -> bool {
        self.waiting.push(batch);
        !std::mem::replace(&mut self.asking, true)
    }

    /// The handler answered: the parked batches, oldest first.
    pub(crate) fn answered(&mut self) -> Vec<B> {
        self.asking = false;
        std::mem::take(&mut self.waiting)
    }

    /// True while a handler call is outstanding.
    pub(crate) fn asking(&self) -> bool {
        self.asking
    }

    /// True when nothing is parked and no call is outstanding.
    pub(crate) fn is_idle(&self) -> bool {
        self.waiting.is_empty() && !self.asking
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_question_per_wave_of_parked_batches() {
        let mut w = MissingWait::default();
        assert!(w.is_idle());
        assert!(w.park(1), "first batch asks");
        assert!(!w.park(2), "second waits for the same answer");
        assert!(w.asking() && !w.is_idle());
        assert_eq!(w.answered(), vec![1, 2]);
        assert!(w.is_idle());
        assert!(w.park(3), "after an answer the next batch asks again");
    }
}
