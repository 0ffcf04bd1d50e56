//! The data path: source records → route (schema) → write (writer) → ack.
//!
//! Every record ends in exactly one of two ways, and only then is its source
//! position acknowledged:
//! - stored: DynamoDB confirmed the item (writer completion `Stored`);
//! - dead-lettered: a defect the source found, a routing error (bad JSON,
//!   missing field, expired period, ...), or a permanent write rejection; the
//!   dead-letter entry is durable before the ack.
//!
//! Records of one batch are routed, then submitted together, in order; the
//! writer's backpressure (bounded in-flight items and bytes) stops the
//! pipeline, which stops pulling from the sources' bounded channel, which
//! pauses reading.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tidemark_consumer::record::Record;
use tidemark_schema::route::Router;
use tidemark_writer::{Submission, WriteOutcome, WriterError, WriterHandle};
use tokio::sync::mpsc;

use crate::deadletter::{DeadLetter, DeadLetters};

/// The clock routing decisions use (period of "now", future skew, expiry).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The wall clock.
pub fn system_clock() -> Clock {
    Arc::new(Utc::now)
}

/// Counts of what one pipeline run handled.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PipelineCounts {
    /// Records received from the source.
    pub records: u64,
    /// Records submitted to the writer.
    pub submitted: u64,
    /// Records dead-lettered before reaching the writer.
    pub dead_lettered: u64,
}

/// Routes records and hands them to the writer and the dead letters.
#[derive(Clone)]
pub struct Pipeline {
    router: Arc<Router>,
    writer: WriterHandle,
    dead_letters: DeadLetters,
    clock: Clock,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline over a router, a running writer and dead-letter queue.
    pub fn new(
        router: Arc<Router>,
        writer: WriterHandle,
        dead_letters: DeadLetters,
        clock: Clock,
    ) -> Self {
        Pipeline {
            router,
            writer,
            dead_letters,
            clock,
        }
    }

    /// Handles batches until the channel closes (every source stopped).
    /// Fails only when the writer stopped for good (a fatal error): records
    /// not yet submitted then stay unacknowledged, so nothing is lost.
    pub async fn run(
        &self,
        mut rx: mpsc::Receiver<Vec<Record>>,
    ) -> Result<PipelineCounts, WriterError> {
        let mut counts = PipelineCounts::default();
        while let Some(batch) = rx.recv().await {
            let now = (self.clock)();
            metrics::counter!("tidemark_records_read_total").increment(batch.len() as u64);
            let mut subs = Vec::with_capacity(batch.len());
            for record in batch {
                counts.records += 1;
                match self.prepare(record, now) {
                    Some(s) => subs.push(s),
                    None => counts.dead_lettered += 1,
                }
            }
            counts.submitted += subs.len() as u64;
            // One hand-off per batch: the writer takes the group's permits
            // at once (the records stay in source order).
            self.writer.submit_all(subs).await?;
        }
        Ok(counts)
    }

    /// Routes one record: the submission for the writer, or `None` when it
    /// was dead-lettered (its ack then travels with the dead-letter entry).
    fn prepare(&self, record: Record, now: DateTime<Utc>) -> Option<Submission> {
        let Record {
            origin,
            data,
            ack,
            defect,
            ..
        } = record;
        if let Some(defect) = defect {
            let entry = DeadLetter::new(origin, defect.reason, defect.message, &data, now);
            self.dead_letters.send(entry, Some(ack));
            return None;
        }
        match self.router.route(&data, &origin, now) {
            Ok(routed) => {
                let dead_letters = self.dead_letters.clone();
                let clock = self.clock.clone();
                let done = Box::new(move |outcome: WriteOutcome| match outcome {
                    WriteOutcome::Stored => ack.done(),
                    WriteOutcome::Rejected { reason, message } => {
                        let entry = DeadLetter::new(origin, reason, message, &data, clock());
                        dead_letters.send(entry, Some(ack));
                    }
                });
                Some(Submission {
                    table: routed.table,
                    key: routed.key,
                    item: routed.item,
                    done,
                })
            }
            Err(e) => {
                let entry = DeadLetter::new(origin, e.reason(), e.to_string(), &data, now);
                self.dead_letters.send(entry, Some(ack));
                None
            }
        }
    }
}
