//! The data path: source records → route (schema) → write (writer) → ack.
//!
//! The sources hand over one record per event (they split records holding
//! several by `record_format`, see `tidemark_schema::framing`). Every record
//! ends in exactly one of two ways, and only then is its source position
//! acknowledged:
//! - stored: DynamoDB confirmed the item (writer completion `Stored`), or
//!   both items during a shard migration's dual write;
//! - dead-lettered: a defect the source found, a routing error (bad JSON,
//!   missing field, expired period, ...), or a permanent write rejection; the
//!   dead-letter entry is durable before the ack.
//!
//! An oversized event's pointer item (`schema.oversize = "s3"`) is handed
//! to the writer only once its payload's object is written (`offload`); a
//! payload that cannot be written dead-letters its event instead.
//!
//! Records of one batch are routed, then submitted together, in order; the
//! writer's backpressure (bounded in-flight items and bytes) stops the
//! pipeline, which stops pulling from the sources' bounded channel, which
//! pauses reading.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tidemark_consumer::record::{Ack, Record};
use tidemark_schema::Origin;
use tidemark_schema::route::{RouteCache, Routed, Router, Routes};
use tidemark_writer::{Complete, Completion, Submission, WriteOutcome, WriterError, WriterHandle};
use tokio::sync::mpsc;
use tracing::warn;

use crate::deadletter::{DeadLetter, DeadLetters};
use crate::run::offload::Offloader;

/// The clock routing decisions use (period of "now", future skew, expiry).
pub(crate) type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The wall clock.
pub(crate) fn system_clock() -> Clock {
    Arc::new(Utc::now)
}

/// The writer's [`LateTables`](tidemark_writer::LateTables): a table takes
/// late data when its period is past the late-arrival grace at the
/// pipeline's clock (cold or frozen: scaled down below the active tier).
pub(crate) struct LateByLifecycle {
    pub(crate) router: Arc<Router>,
    pub(crate) clock: Clock,
}

impl tidemark_writer::LateTables for LateByLifecycle {
    fn is_late(&self, table: &str) -> bool {
        self.router.takes_late_data(table, (self.clock)())
    }
}

/// Counts of what one pipeline run handled.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PipelineCounts {
    /// Source records received (the events of one record holding several
    /// count once).
    pub records: u64,
    /// Items submitted to the writer (a record may hold several events, and
    /// a shard migration's dual write gives an event two items).
    pub submitted: u64,
    /// Events dead-lettered before reaching the writer (a record that
    /// cannot be split counts as one).
    pub dead_lettered: u64,
}

/// Routes records and hands them to the writer and the dead letters.
#[derive(Clone)]
pub(crate) struct Pipeline {
    router: Arc<Router>,
    /// Multi-stream mode: the routers of streams with their own event
    /// mapping, by stream name; other records use `router`.
    stream_routers: Arc<HashMap<String, Arc<Router>>>,
    writer: WriterHandle,
    dead_letters: DeadLetters,
    clock: Clock,
    /// Writes oversized events' payloads (`schema.oversize = "s3"`).
    offloader: Option<Arc<Offloader>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline over a router, a running writer and dead-letter queue.
    pub(crate) fn new(
        router: Arc<Router>,
        writer: WriterHandle,
        dead_letters: DeadLetters,
        clock: Clock,
    ) -> Self {
        Pipeline {
            router,
            stream_routers: Arc::default(),
            writer,
            dead_letters,
            clock,
            offloader: None,
        }
    }

    /// Oversized events' payloads go through `offloader`.
    pub(crate) fn with_offloader(mut self, offloader: Arc<Offloader>) -> Self {
        self.offloader = Some(offloader);
        self
    }

    /// Records of these streams (by name) are routed by their own router.
    pub(crate) fn with_stream_routers(mut self, routers: HashMap<String, Arc<Router>>) -> Self {
        self.stream_routers = Arc::new(routers);
        self
    }

    /// The router of `origin`'s stream.
    fn router_for(&self, origin: &Origin) -> &Router {
        match origin {
            Origin::Kinesis { stream, .. } if !self.stream_routers.is_empty() => self
                .stream_routers
                .get(stream.as_str())
                .unwrap_or(&self.router),
            _ => &self.router,
        }
    }

    /// Handles batches until the channel closes (every source stopped).
    /// Fails only when the writer stopped for good (a fatal error): records
    /// not yet submitted then stay unacknowledged, so nothing is lost.
    pub(crate) async fn run(
        &self,
        mut rx: mpsc::Receiver<Vec<Record>>,
    ) -> Result<PipelineCounts, WriterError> {
        let mut counts = PipelineCounts::default();
        let mut cache = RouteCache::default();
        while let Some(batch) = rx.recv().await {
            let now = (self.clock)();
            let n = batch.iter().filter(|r| r.starts_source_record()).count() as u64;
            metrics::counter!(crate::metrics::RECORDS_READ).increment(n);
            counts.records += n;
            let mut routed = Vec::with_capacity(batch.len());
            let mut slots = Vec::with_capacity(batch.len());
            for record in batch {
                counts.dead_lettered += self
                    .prepare(record, now, &mut cache, &mut slots, &mut routed)
                    .await;
            }
            let failed = self.offload(&routed, &mut slots, now).await;
            counts.dead_lettered += failed.len() as u64;
            counts.submitted += (routed.len() - failed.len()) as u64;
            if routed.len() == failed.len() {
                continue;
            }
            // One completion target per batch: the writer reports a written
            // call's items together, so acks are settled per group, not per
            // record (see `BatchDone`).
            let target: Arc<dyn Complete> = Arc::new(BatchDone {
                slots: Mutex::new(slots),
                dead_letters: self.dead_letters.clone(),
                clock: self.clock.clone(),
            });
            let subs = routed
                .into_iter()
                .enumerate()
                .filter(|(tag, _)| !failed.contains(tag))
                .map(|(tag, r)| Submission {
                    table: r.table,
                    key: r.key,
                    item: r.item,
                    done: Completion::new(target.clone(), tag as u64),
                })
                .collect();
            // One hand-off per batch: the writer takes the group's permits
            // at once (the records stay in source order).
            self.writer.submit_all(subs).await?;
        }
        Ok(counts)
    }

    /// Writes the payloads of the pointer items in `routed`, each object
    /// once, several at a time; a pointer whose payload is not written is
    /// dead-lettered (its slot emptied) and its index returned, so that it
    /// is not submitted.
    async fn offload(
        &self,
        routed: &[Routed],
        slots: &mut [Slot],
        now: DateTime<Utc>,
    ) -> Vec<usize> {
        let mut objects: Vec<(tidemark_schema::route::Offload, Bytes, Vec<usize>)> = Vec::new();
        for (i, r) in routed.iter().enumerate() {
            let (Some(object), Some(Some(kept))) = (&r.offload, slots.get(i)) else {
                continue;
            };
            match objects.iter_mut().find(|(o, _, _)| o.key == object.key) {
                Some((_, _, users)) => users.push(i),
                None => objects.push((object.clone(), kept.data.clone(), vec![i])),
            }
        }
        if objects.is_empty() {
            return Vec::new();
        }
        // Owned futures: a batch's objects are written while the pipeline
        // waits (the writer gets the batch once they are).
        let puts: Vec<_> = objects
            .into_iter()
            .map(|(object, data, users)| {
                let offloader = self.offloader.clone();
                async move {
                    let result = match offloader {
                        Some(o) => o.store(&object, data).await.inspect(|()| {
                            metrics::counter!(crate::metrics::OVERSIZE_PAYLOAD_BYTES)
                                .increment(object.bytes as u64);
                        }),
                        None => Err("no S3 client for oversized events' payloads".to_owned()),
                    };
                    (users, result)
                }
            })
            .collect();
        let results: Vec<(Vec<usize>, Result<(), String>)> = futures::stream::iter(puts)
            .buffer_unordered(PARALLEL_OFFLOADS)
            .collect()
            .await;
        let mut failed = Vec::new();
        for (users, result) in results {
            let outcome = if result.is_ok() { "stored" } else { "failed" };
            metrics::counter!(crate::metrics::OVERSIZE_PAYLOADS, "outcome" => outcome).increment(1);
            let Err(message) = result else { continue };
            for i in users {
                if let Some(k) = slots.get_mut(i).and_then(Option::take) {
                    let entry = DeadLetter::new(
                        k.origin,
                        tidemark_schema::Reason::PayloadStoreFailed,
                        message.clone(),
                        &k.data,
                        now,
                    )
                    .with_inner(k.inner);
                    self.dead_letters.send_bounded(entry, Some(k.ack)).await;
                }
                failed.push(i);
            }
        }
        failed
    }

    /// Routes one event: its routed item (two during a shard migration's
    /// dual write) is pushed to `routed` (the event kept in `slots`, at the
    /// same index); an event that cannot be routed, or that the source knew
    /// was bad, is dead-lettered (its ack travels with the entry), waiting
    /// for room in the dead-letter queue: a slow destination holds the
    /// sources back instead of filling memory. Returns the number
    /// dead-lettered.
    async fn prepare(
        &self,
        record: Record,
        now: DateTime<Utc>,
        cache: &mut RouteCache,
        slots: &mut Vec<Slot>,
        routed: &mut Vec<Routed>,
    ) -> u64 {
        let Record {
            origin,
            data,
            ack,
            defect,
            inner,
            ..
        } = record;
        if let Some(defect) = defect {
            let entry = DeadLetter::new(origin, defect.reason, defect.message, &data, now)
                .with_inner(inner);
            self.dead_letters.send_bounded(entry, Some(ack)).await;
            return 1;
        }
        let (mut origin, mut data, mut ack, mut now) = (origin, data, ack, now);
        let held_since = std::time::Instant::now();
        let mut told = held_since;
        loop {
            match self.prepare_event(origin, data, inner, ack, now, cache, slots, routed) {
                Prepared::Routed => return 0,
                Prepared::Dead(entry, ack) => {
                    self.dead_letters.send_bounded(entry, Some(ack)).await;
                    return 1;
                }
                // Adaptive sharding: the table's splits are not known for
                // this event's time. Guessing could key it differently from
                // another worker: wait for the refresh (the refresh task is
                // asked for the table), holding the source back meanwhile.
                Prepared::Held(o, d, a, why) => {
                    if told.elapsed() >= HOLD_WARN_EVERY {
                        told = std::time::Instant::now();
                        warn!(waited_s = held_since.elapsed().as_secs(), reason = %why, "an event waits for the splits of its table");
                    }
                    (origin, data, ack) = (o, d, a);
                    tokio::time::sleep(HOLD_POLL).await;
                    now = (self.clock)();
                }
            }
        }
    }

    /// Routes one event (`inner`: its place in a record of several); the
    /// dead letter to send if it cannot be routed.
    #[allow(clippy::too_many_arguments)] // the batch's buffers, threaded through
    fn prepare_event(
        &self,
        origin: Origin,
        data: Bytes,
        inner: Option<u32>,
        ack: Ack,
        now: DateTime<Utc>,
        cache: &mut RouteCache,
        slots: &mut Vec<Slot>,
        routed: &mut Vec<Routed>,
    ) -> Prepared {
        match self
            .router_for(&origin)
            .route(&data, &origin, inner.unwrap_or(0), now, cache)
        {
            Ok(Routes { new: r, old: None }) => {
                slots.push(Some(Kept {
                    origin,
                    data,
                    ack,
                    inner,
                }));
                routed.push(r);
                Prepared::Routed
            }
            // A shard migration's dual write: the event is acknowledged
            // only once both its items are stored (or dead-lettered).
            Ok(Routes {
                new,
                old: Some(old),
            }) => {
                for (r, ack) in [new, old].into_iter().zip(ack.split(2)) {
                    slots.push(Some(Kept {
                        origin: origin.clone(),
                        data: data.clone(),
                        ack,
                        inner,
                    }));
                    routed.push(r);
                }
                Prepared::Routed
            }
            Err(e) if e.is_hold() => Prepared::Held(origin, data, ack, e.to_string()),
            Err(e) => {
                let entry = DeadLetter::new(origin, e.reason(), e.to_string(), &data, now)
                    .with_inner(inner);
                Prepared::Dead(entry, ack)
            }
        }
    }
}

/// What routing one event came to.
enum Prepared {
    /// Its items are in the batch.
    Routed,
    /// To the dead letters, with its ack.
    Dead(DeadLetter, Ack),
    /// Not routable yet (its table's splits are not known for its time):
    /// the event back, to route again, and why.
    Held(Origin, Bytes, Ack, String),
}

/// Oversized events' payloads written at once.
const PARALLEL_OFFLOADS: usize = 4;

/// How often a held event is routed again.
const HOLD_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// How often a held event is logged.
const HOLD_WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// What a routed record keeps until its write ends: its ack, and what a
/// dead letter needs if the write is rejected.
struct Kept {
    origin: Origin,
    data: Bytes,
    ack: Ack,
    inner: Option<u32>,
}

/// A routed record's place in its batch; emptied when its write ends.
type Slot = Option<Kept>;

/// The completion target of one source batch. The writer reports the items
/// of one call together; their acks are then settled in one go per source
/// shard (one lock and one checkpoint update instead of one per record).
struct BatchDone {
    slots: Mutex<Vec<Slot>>,
    dead_letters: DeadLetters,
    clock: Clock,
}

impl Complete for BatchDone {
    fn complete(&self, tags: &[u64], outcome: &WriteOutcome) {
        let kept: Vec<Kept> = {
            // A panic while holding this lock leaves every slot either taken
            // or not, so poisoning is moot.
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            tags.iter()
                .filter_map(|t| {
                    usize::try_from(*t)
                        .ok()
                        .and_then(|i| slots.get_mut(i))
                        .and_then(Option::take)
                })
                .collect()
        };
        match outcome {
            WriteOutcome::Stored => Ack::done_all(kept.into_iter().map(|k| k.ack)),
            WriteOutcome::Rejected { reason, message } => {
                let now = (self.clock)();
                for k in kept {
                    let entry = DeadLetter::new(k.origin, *reason, message.clone(), &k.data, now)
                        .with_inner(k.inner);
                    self.dead_letters.send(entry, Some(k.ack));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
