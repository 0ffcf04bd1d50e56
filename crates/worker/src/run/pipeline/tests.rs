//! Tests of `pipeline.rs`.

use super::*;
use crate::deadletter::{DeadLetterError, DeadLetterSink};
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use futures::future::BoxFuture;
use std::time::Duration;
use tidemark_consumer::kinesis::{AckTracker, Position};
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
    setup_on(config, Arc::new(Fake))
}

/// [`setup_with`], writing through `transport`.
fn setup_on(config: RouterConfig, transport: Arc<dyn Transport>) -> Rig {
    let sdk = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url("http://127.0.0.1:1")
        .credentials_provider(Credentials::new("a", "b", None, None, "test"))
        .build();
    let (writer, task) = Writer::builder(
        aws_sdk_dynamodb::Client::from_conf(sdk),
        transport,
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
                inner: None,
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
    tokio::time::timeout(Duration::from_secs(10), tracker.drained())
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
            inner: None,
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

/// Records holding several events (NDJSON), as the source hands them
/// over: one record per event, each naming its position (`inner`) and
/// holding a share of its record's acknowledgement. Each event is stored
/// or dead-lettered on its own (the bad one with its position and its
/// own bytes), and each record is acknowledged once all its events are.
#[tokio::test]
async fn inner_events_are_routed_alone_and_their_record_acked_after_all() {
    let (pipeline, writer, memory, task, dl_task) = setup();
    let tracker = Arc::new(AckTracker::new());
    let ev = |i: u32| format!(r#"{{"deviceId":"d{i}","timestamp":"2026-11-22T09:59:00Z"}}"#);
    let bad = r#"{"deviceId":"bad"}"#.to_string();
    let mut records = Vec::new();
    for (i, events) in [vec![ev(0), bad, ev(2)], vec![ev(3), ev(4)]]
        .into_iter()
        .enumerate()
    {
        let seq = format!("{}", 1000 + i);
        let serial = tracker.push(Position::new(seq.as_str(), 0)).unwrap();
        let acks = Ack::new(tracker.clone(), serial).split(events.len());
        for (inner, (event, ack)) in events.into_iter().zip(acks).enumerate() {
            records.push(Record {
                origin: Origin::Kinesis {
                    stream: "s".into(),
                    shard_id: "shardId-0".into(),
                    sequence_number: seq.as_str().into(),
                    sub_sequence_number: 0,
                },
                partition_key: "p".into(),
                data: Bytes::from(event),
                arrival_ms: 0,
                ack,
                defect: None,
                inner: Some(inner as u32),
            });
        }
    }
    let (tx, rx) = mpsc::channel(1);
    tx.send(records).await.unwrap();
    drop(tx);
    let counts = pipeline.run(rx).await.unwrap();
    assert_eq!(
        (counts.records, counts.submitted, counts.dead_lettered),
        (2, 4, 1)
    );
    writer.flush().await;
    tokio::time::timeout(Duration::from_secs(10), tracker.drained())
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

/// A dead-letter destination that hangs until `open` turns true.
#[derive(Clone)]
struct Gate {
    open: tokio::sync::watch::Receiver<bool>,
    stored: Arc<Mutex<usize>>,
}

impl DeadLetterSink for Gate {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        let mut open = self.open.clone();
        Box::pin(async move {
            let _ = open.wait_for(|o| *o).await;
            *self.stored.lock().unwrap() += entries.len();
            Ok(())
        })
    }
}

/// Records the source already knew were bad (here, corrupt aggregates of
/// 10 KB each) while the dead-letter destination hangs: the pipeline waits
/// for room in the dead-letter queue, whose bytes stay within its bound
/// (plus one entry), instead of queueing every entry past it; once the
/// destination answers, every entry is written and acknowledged.
#[tokio::test]
async fn poison_waits_for_room_in_the_dead_letter_queue() {
    let (open_tx, open) = tokio::sync::watch::channel(false);
    let stored = Arc::new(Mutex::new(0));
    let gate = Gate {
        open,
        stored: stored.clone(),
    };
    let cap = 64 * 1024;
    let (dead_letters, dl_task) = DeadLetters::start_with(Arc::new(gate), None, cap);
    let (plain, writer, _memory, task, _dl) = setup();
    let pipeline = Pipeline::new(
        plain.router.clone(),
        writer.clone(),
        dead_letters.clone(),
        plain.clock.clone(),
    );
    drop(plain);
    let tracker = Arc::new(AckTracker::new());
    let payload = Bytes::from(vec![b'x'; 10_000]);
    let (tx, rx) = mpsc::channel(1);
    let run = tokio::spawn(async move { pipeline.run(rx).await });
    let feeder = {
        let tracker = tracker.clone();
        tokio::spawn(async move {
            for batch in 0..10u64 {
                let records = (0..10u64)
                    .map(|i| {
                        let seq = format!("{}", 1000 + batch * 10 + i);
                        let serial = tracker.push(Position::new(seq.as_str(), 0)).unwrap();
                        Record {
                            origin: Origin::Kinesis {
                                stream: "s".into(),
                                shard_id: "shardId-0".into(),
                                sequence_number: seq.into(),
                                sub_sequence_number: 0,
                            },
                            partition_key: "p".into(),
                            data: payload.clone(),
                            arrival_ms: 0,
                            ack: Ack::new(tracker.clone(), serial),
                            defect: Some(tidemark_consumer::record::Defect {
                                reason: Reason::CorruptAggregate,
                                message: "corrupt".into(),
                            }),
                            inner: None,
                        }
                    })
                    .collect();
                if tx.send(records).await.is_err() {
                    return;
                }
            }
        })
    };
    // Until nothing moves any more (the destination hangs).
    let mut last = usize::MAX;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = dead_letters.queued_bytes();
        if now == last {
            break;
        }
        last = now;
    }
    let one = 10_000 * 4 / 3 + 1024;
    assert!(
        last <= cap + one,
        "{last} bytes of dead letters queued against a bound of {cap}"
    );
    assert!(
        !feeder.is_finished(),
        "the pipeline must hold the source back"
    );
    open_tx.send(true).unwrap();
    feeder.await.unwrap();
    let counts = run.await.unwrap().unwrap();
    assert_eq!(counts.dead_lettered, 100);
    tokio::time::timeout(Duration::from_secs(10), tracker.drained())
        .await
        .expect("every poison record acknowledged once written");
    assert_eq!(*stored.lock().unwrap(), 100);
    drop(dead_letters);
    dl_task.await.unwrap().unwrap();
    drop(writer);
    task.await.unwrap().unwrap();
}

/// Adaptive sharding: events whose table's splits are not known are held,
/// not dead-lettered and not keyed by a guess, and go once the splits are
/// read (here set by hand, as the refresh task would).
#[tokio::test]
async fn events_wait_for_their_tables_splits_and_none_is_dead_lettered() {
    let mut config = RouterConfig::with_prefix("t");
    config.adaptive_sharding.enabled = true;
    let (pipeline, writer, memory, task, dl_task) = setup_with(config);
    let tracker = Arc::new(AckTracker::new());
    let records = device_records(&tracker, |_| "");
    let (tx, rx) = mpsc::channel(1);
    tx.send(records).await.unwrap();
    drop(tx);
    let splits = pipeline.router.splits().clone();
    let run = tokio::spawn({
        let pipeline = pipeline.clone();
        async move { pipeline.run(rx).await }
    });
    // Nothing moves while the table's splits are unknown: the table is
    // asked for, nothing is stored or dead-lettered.
    let wanted = tidemark_tests_wait(|| {
        let w = splits.take_wanted();
        (!w.is_empty()).then_some(w)
    })
    .await;
    assert_eq!(wanted.into_iter().collect::<Vec<_>>(), ["t_2026-11-22"]);
    assert_eq!(writer.stats().stored, 0);
    assert!(memory.0.lock().unwrap().is_empty());
    assert!(!run.is_finished());
    // Read (no split): every event goes, keyed by its base key.
    let read_at = DateTime::parse_from_rfc3339("2026-11-22T09:59:30Z")
        .unwrap()
        .timestamp_millis();
    splits.set("t_2026-11-22", Default::default(), read_at);
    let counts = run.await.unwrap().unwrap();
    writer.flush().await;
    tokio::time::timeout(Duration::from_secs(10), tracker.drained())
        .await
        .expect("every record is acked");
    assert_eq!(
        (counts.records, counts.submitted, counts.dead_lettered),
        (40, 40, 0)
    );
    // The fake refuses d17's write (see `Fake`): a write's dead letter,
    // not a routing one.
    let dead = memory.0.lock().unwrap().clone();
    assert!(
        dead.iter().all(|d| d.reason == Reason::DynamodbRejected),
        "{dead:?}"
    );
    assert_eq!(writer.stats().stored + dead.len() as u64, 40);
    drop(pipeline);
    writer.close();
    task.await.unwrap().unwrap();
    dl_task.await.unwrap().unwrap();
}

/// Polls `f` (every 10 ms, up to 10 s) until it gives a value.
async fn tidemark_tests_wait<T>(mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing within 10 s");
}

mod oversize;
