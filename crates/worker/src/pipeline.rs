//! The data path: source records → route (schema) → write (writer) → ack.
//!
//! Every record ends in exactly one of two ways, and only then is its source
//! position acknowledged:
//! - stored: DynamoDB confirmed the item (writer completion `Stored`), or
//!   both items during a shard migration's dual write;
//! - dead-lettered: a defect the source found, a routing error (bad JSON,
//!   missing field, expired period, ...), or a permanent write rejection; the
//!   dead-letter entry is durable before the ack.
//!
//! Records of one batch are routed, then submitted together, in order; the
//! writer's backpressure (bounded in-flight items and bytes) stops the
//! pipeline, which stops pulling from the sources' bounded channel, which
//! pauses reading.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use tidemark_consumer::record::{Ack, Record};
use tidemark_schema::Origin;
use tidemark_schema::framing::{self, GZIP_MAGIC, RecordFormat};
use tidemark_schema::route::{RouteCache, Routed, Router, Routes};
use tidemark_writer::{Complete, Completion, Submission, WriteOutcome, WriterError, WriterHandle};
use tokio::sync::mpsc;

use crate::deadletter::{DeadLetter, DeadLetters};

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
    /// Records received from the source.
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
    format: RecordFormat,
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
            format: RecordFormat::Json,
        }
    }

    /// Records hold events laid out as `format` (gzip detected in any
    /// format). Default [`RecordFormat::Json`].
    pub(crate) fn with_record_format(mut self, format: RecordFormat) -> Self {
        self.format = format;
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
            metrics::counter!(crate::metrics::RECORDS_READ).increment(batch.len() as u64);
            let n = batch.len() as u64;
            counts.records += n;
            let mut routed = Vec::with_capacity(batch.len());
            let mut slots = Vec::with_capacity(batch.len());
            for record in batch {
                counts.dead_lettered +=
                    self.prepare(record, now, &mut cache, &mut slots, &mut routed);
            }
            counts.submitted += routed.len() as u64;
            if routed.is_empty() {
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

    /// Routes one record's events: each routed item is pushed to `routed`
    /// (its event kept in `slots`, at the same index), each event that
    /// cannot be routed is dead-lettered (its ack travels with the entry).
    /// Returns the number dead-lettered.
    fn prepare(
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
            ..
        } = record;
        if let Some(defect) = defect {
            let entry = DeadLetter::new(origin, defect.reason, defect.message, &data, now);
            self.dead_letters.send(entry, Some(ack));
            return 1;
        }
        // The usual case, one plain event per record: no splitting.
        if self.format == RecordFormat::Json && !data.starts_with(&GZIP_MAGIC) {
            return self.prepare_event(origin, data, None, ack, now, cache, slots, routed);
        }
        let events = match framing::split(self.format, &data) {
            Ok(events) => events,
            Err(e) => {
                let entry = DeadLetter::new(origin, e.reason(), e.to_string(), &data, now);
                self.dead_letters.send(entry, Some(ack));
                return 1;
            }
        };
        let single = self.format == RecordFormat::Json;
        let acks = ack.split(events.len());
        let mut dead = 0;
        for (i, (event, ack)) in events.into_iter().zip(acks).enumerate() {
            let inner = (!single).then(|| u32::try_from(i).unwrap_or(u32::MAX));
            dead +=
                self.prepare_event(origin.clone(), event, inner, ack, now, cache, slots, routed);
        }
        dead
    }

    /// Routes one event (`inner`: its place in a record of several).
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
    ) -> u64 {
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
                0
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
                0
            }
            Err(e) => {
                let entry = DeadLetter::new(origin, e.reason(), e.to_string(), &data, now)
                    .with_inner(inner);
                self.dead_letters.send(entry, Some(ack));
                1
            }
        }
    }
}

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
mod tests {
    use super::*;
    use crate::deadletter::{DeadLetterError, DeadLetterSink};
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    use futures::future::BoxFuture;
    use std::time::Duration;
    use tidemark_consumer::checkpoint::{AckTracker, Position};
    use tidemark_schema::{KeyAttributes, Reason, RouterConfig};
    use tidemark_writer::{RawResponse, Transport, TransportError, Writer, WriterConfig};

    /// Stores every call, except that a call holding an item with
    /// "poison" in it is refused with a ValidationException.
    struct Fake;

    impl Transport for Fake {
        fn batch_write_item(
            &self,
            body: Bytes,
        ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
            const OLD_D17: &[u8] = br#""pk":{"S":"d17"}"#;
            let answer = if body.windows(6).any(|w| w == b"poison")
                || body.windows(OLD_D17.len()).any(|w| w == OLD_D17)
            {
                RawResponse {
                    status: 400,
                    body: Bytes::from_static(
                        br#"{"__type":"com.amazon.coral.validate#ValidationException","message":"poisoned"}"#,
                    ),
                }
            } else {
                RawResponse {
                    status: 200,
                    body: Bytes::from_static(b"{}"),
                }
            };
            Box::pin(async move { Ok(answer) })
        }
    }

    #[derive(Default)]
    struct Memory(Mutex<Vec<DeadLetter>>);

    impl DeadLetterSink for Arc<Memory> {
        fn write<'a>(
            &'a self,
            entries: &'a [DeadLetter],
        ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
            self.0.lock().unwrap().extend_from_slice(entries);
            Box::pin(async { Ok(()) })
        }
    }

    /// What [`setup`] makes: pipeline, writer, dead letters, and the writer's
    /// and dead letters' tasks.
    type Rig = (
        Pipeline,
        WriterHandle,
        Arc<Memory>,
        tokio::task::JoinHandle<Result<(), WriterError>>,
        tokio::task::JoinHandle<Result<(), DeadLetterError>>,
    );

    /// A pipeline over the fake transport and in-memory dead letters, at a
    /// fixed now, with its writer and the tasks to await at the end.
    fn setup() -> Rig {
        setup_with(RouterConfig::with_prefix("t"))
    }

    fn setup_with(config: RouterConfig) -> Rig {
        let sdk = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:1")
            .credentials_provider(Credentials::new("a", "b", None, None, "test"))
            .build();
        let (writer, task) = Writer::builder(
            aws_sdk_dynamodb::Client::from_conf(sdk),
            Arc::new(Fake),
            KeyAttributes::default(),
        )
        .config(WriterConfig {
            linger: Duration::from_millis(1),
            ..WriterConfig::default()
        })
        .start();
        let memory = Arc::new(Memory::default());
        let (dead_letters, dl_task) = DeadLetters::start(Arc::new(memory.clone()), None);
        let now = DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let router = Arc::new(Router::new(config).unwrap());
        let pipeline = Pipeline::new(router, writer.clone(), dead_letters, Arc::new(move || now));
        (pipeline, writer, memory, task, dl_task)
    }

    /// Forty records of devices d0..d39 at sequence numbers 1000..1039,
    /// each event with `extra(i)` appended to its fields.
    fn device_records(tracker: &Arc<AckTracker>, extra: fn(u64) -> &'static str) -> Vec<Record> {
        (0..40u64)
            .map(|i| {
                let data = format!(
                    r#"{{"deviceId":"d{i}","timestamp":"2026-11-22T09:59:00Z","eventId":"e{i}"{}}}"#,
                    extra(i)
                );
                let seq = format!("{}", 1000 + i);
                let serial = tracker.push(Position::new(seq.as_str(), 0)).unwrap();
                Record {
                    origin: Origin::Kinesis {
                        stream: "s".into(),
                        shard_id: "shardId-0".into(),
                        sequence_number: seq.into(),
                        sub_sequence_number: 0,
                    },
                    partition_key: format!("d{i}"),
                    data: Bytes::from(data),
                    arrival_ms: 0,
                    ack: Ack::new(tracker.clone(), serial),
                    defect: None,
                }
            })
            .collect()
    }

    /// Runs `records` through as one batch and waits until every one of
    /// them is acknowledged.
    async fn run_until_acked(
        pipeline: &Pipeline,
        writer: &WriterHandle,
        tracker: &AckTracker,
        records: Vec<Record>,
    ) -> PipelineCounts {
        let (tx, rx) = mpsc::channel(1);
        tx.send(records).await.unwrap();
        drop(tx);
        let counts = pipeline.run(rx).await.unwrap();
        writer.flush().await;
        tokio::time::timeout(
            Duration::from_secs(10),
            tracker.wait_for(|w| w.in_flight() == 0),
        )
        .await
        .expect("every record is acked");
        counts
    }

    /// With several streams, a stream with its own event mapping is routed
    /// by its router; the others by the shared one.
    #[tokio::test]
    async fn each_stream_is_routed_with_its_own_mapping() {
        let (pipeline, writer, memory, task, dl_task) = setup();
        let mut sensor = RouterConfig::with_prefix("t");
        sensor.event.entity_field = "sensor".into();
        let routers = [("other".to_string(), Arc::new(Router::new(sensor).unwrap()))];
        let pipeline = pipeline.with_stream_routers(routers.into_iter().collect());
        let tracker = Arc::new(AckTracker::new());
        let record = |stream: &str, field: &str, i: u64| {
            let seq = format!("{}", 2000 + i);
            let serial = tracker.push(Position::new(seq.as_str(), 0)).unwrap();
            Record {
                origin: Origin::Kinesis {
                    stream: stream.into(),
                    shard_id: "shardId-0".into(),
                    sequence_number: seq.into(),
                    sub_sequence_number: 0,
                },
                partition_key: "k".into(),
                data: Bytes::from(format!(
                    r#"{{"{field}":"d{i}","timestamp":"2026-11-22T09:59:00Z","eventId":"e{i}"}}"#
                )),
                arrival_ms: 0,
                ack: Ack::new(tracker.clone(), serial),
                defect: None,
            }
        };
        let records = vec![
            record("s", "deviceId", 0),
            record("other", "sensor", 1),
            // The shared mapping does not apply to `other`.
            record("other", "deviceId", 2),
        ];
        let counts = run_until_acked(&pipeline, &writer, &tracker, records).await;
        assert_eq!((counts.submitted, counts.dead_lettered), (2, 1));
        writer.close();
        task.await.unwrap().unwrap();
        drop(pipeline);
        dl_task.await.unwrap().unwrap();
        let dead = memory.0.lock().unwrap();
        assert_eq!(dead.len(), 1);
        assert!(
            matches!(&dead[0].source, Origin::Kinesis { stream, sequence_number, .. }
                if stream.as_str() == "other" && sequence_number.as_str() == "2002"),
            "{:?}",
            dead[0].source
        );
    }

    /// Records stored and rejected in one batch: every record is acked only
    /// after its outcome, the rejected one is dead-lettered with its own
    /// origin, bytes and DynamoDB's message, and the checkpoint covers all.
    #[tokio::test]
    async fn a_rejected_write_is_dead_lettered_with_its_record_and_all_are_acked() {
        // DescribeTable goes nowhere (refused), which the writer retries
        // later; writes go through the fake.
        let (pipeline, writer, memory, task, dl_task) = setup();
        let tracker = Arc::new(AckTracker::new());
        let records = device_records(&tracker, |i| if i == 17 { r#","poison":true"# } else { "" });
        let counts = run_until_acked(&pipeline, &writer, &tracker, records).await;
        assert_eq!((counts.records, counts.submitted), (40, 40));
        assert_eq!(tracker.checkpoint(), Some(Position::new("1039", 0)));
        let dead = memory.0.lock().unwrap().clone();
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert_eq!(dead[0].reason, Reason::DynamodbRejected);
        assert!(dead[0].error.contains("poisoned"), "{}", dead[0].error);
        assert_eq!(dead[0].source.to_string(), "kinesis:s/shardId-0/1017.0");
        assert_eq!(writer.stats().stored, 39);
        drop(pipeline);
        writer.close();
        task.await.unwrap().unwrap();
        dl_task.await.unwrap().unwrap();
    }

    /// NDJSON records, one of them gzip-compressed: each inner event is
    /// stored or dead-lettered on its own (the bad one with its position and
    /// its own bytes), and each record is acknowledged once all its events
    /// are.
    #[tokio::test]
    async fn inner_events_are_routed_alone_and_their_record_acked_after_all() {
        use std::io::Write;
        let (pipeline, writer, memory, task, dl_task) = setup();
        let pipeline = pipeline.with_record_format(RecordFormat::Ndjson);
        let tracker = Arc::new(AckTracker::new());
        let ev = |i: u32| format!(r#"{{"deviceId":"d{i}","timestamp":"2026-11-22T09:59:00Z"}}"#);
        let plain = format!("{}\n{{\"deviceId\":\"bad\"}}\n{}\n", ev(0), ev(2));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(format!("{}\r\n{}", ev(3), ev(4)).as_bytes())
            .unwrap();
        let records: Vec<Record> = [plain.into_bytes(), gz.finish().unwrap()]
            .into_iter()
            .enumerate()
            .map(|(i, data)| {
                let seq = format!("{}", 1000 + i);
                let serial = tracker.push(Position::new(seq.as_str(), 0)).unwrap();
                Record {
                    origin: Origin::Kinesis {
                        stream: "s".into(),
                        shard_id: "shardId-0".into(),
                        sequence_number: seq.into(),
                        sub_sequence_number: 0,
                    },
                    partition_key: "p".into(),
                    data: Bytes::from(data),
                    arrival_ms: 0,
                    ack: Ack::new(tracker.clone(), serial),
                    defect: None,
                }
            })
            .collect();
        let (tx, rx) = mpsc::channel(1);
        tx.send(records).await.unwrap();
        drop(tx);
        let counts = pipeline.run(rx).await.unwrap();
        assert_eq!(
            (counts.records, counts.submitted, counts.dead_lettered),
            (2, 4, 1)
        );
        writer.flush().await;
        tokio::time::timeout(
            Duration::from_secs(10),
            tracker.wait_for(|w| w.in_flight() == 0),
        )
        .await
        .expect("both records are acked");
        assert_eq!(tracker.checkpoint(), Some(Position::new("1001", 0)));
        assert_eq!(writer.stats().stored, 4);
        let dead = memory.0.lock().unwrap().clone();
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert_eq!(dead[0].reason, Reason::MissingField);
        assert_eq!(dead[0].inner, Some(1));
        assert_eq!(dead[0].payload().unwrap(), br#"{"deviceId":"bad"}"#);
        assert_eq!(dead[0].position(), "kinesis:s/shardId-0/1000.0@1");
        drop(pipeline);
        writer.close();
        task.await.unwrap().unwrap();
        dl_task.await.unwrap().unwrap();
    }

    /// A shard migration (entity -> calculated_suffix, so every event has
    /// two distinct keys): each event is submitted as two items, and its
    /// record is acknowledged only after both ended. The old-layout item of
    /// d17 is refused: that one item is dead-lettered, the record is still
    /// acknowledged (its other item stored), and nothing else is lost.
    #[tokio::test]
    async fn a_dual_write_acks_each_record_after_both_items() {
        let mut config = RouterConfig::with_prefix("t");
        config.key = tidemark_schema::KeyStrategy::CalculatedSuffix { shards: 8 };
        config.migrate_from = Some(tidemark_schema::KeyStrategy::Entity);
        let (pipeline, writer, memory, task, dl_task) = setup_with(config);
        let tracker = Arc::new(AckTracker::new());
        let records = device_records(&tracker, |_| "");
        let counts = run_until_acked(&pipeline, &writer, &tracker, records).await;
        assert_eq!((counts.records, counts.submitted), (40, 80));
        assert_eq!(tracker.checkpoint(), Some(Position::new("1039", 0)));
        assert_eq!(writer.stats().stored, 79);
        let dead = memory.0.lock().unwrap().clone();
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert_eq!(dead[0].source.to_string(), "kinesis:s/shardId-0/1017.0");
        drop(pipeline);
        writer.close();
        task.await.unwrap().unwrap();
        dl_task.await.unwrap().unwrap();
    }
}
