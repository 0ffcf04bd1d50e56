//! Oversized events with `schema.oversize = "s3"`: the payload's object is
//! written before the pointer item reaches DynamoDB, the record is acked
//! after both, and a payload that cannot be written dead-letters its event.

use super::*;
use crate::run::offload::Offloader;
use crate::run::offload::tests::Fake as FakeStore;
use tidemark_schema::route::{Oversize, OversizeS3};

/// Stores every call, noting each body and how many objects the payload
/// store held when it came.
struct Recording {
    store: Arc<FakeStore>,
    calls: Mutex<Vec<(Bytes, usize)>>,
}

impl Transport for Recording {
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
        let objects = self.store.objects.lock().unwrap().len();
        self.calls.lock().unwrap().push((body, objects));
        Box::pin(async {
            Ok(RawResponse {
                status: 200,
                body: Bytes::from_static(b"{}"),
            })
        })
    }
}

fn config() -> RouterConfig {
    let mut c = RouterConfig::with_prefix("t");
    c.oversize = Oversize::S3;
    c.oversize_s3 = Some(OversizeS3 {
        bucket: "big".into(),
        prefix: "oversize".into(),
        kms_key_id: None,
        fields: None,
        projection_bytes: 4096,
        max_retry_time: Duration::from_secs(30),
    });
    c
}

/// A pipeline with `config()`, writing payloads to `store` and items
/// through a recording transport.
fn rig(store: &Arc<FakeStore>) -> (Rig, Arc<Recording>) {
    let transport = Arc::new(Recording {
        store: store.clone(),
        calls: Mutex::default(),
    });
    let (pipeline, writer, memory, task, dl_task) = setup_on(config(), transport.clone());
    let offloader = Offloader::new(
        Box::new(store.clone()),
        &WriterConfig::default(),
        Duration::from_secs(30),
    );
    let pipeline = pipeline.with_offloader(Arc::new(offloader));
    ((pipeline, writer, memory, task, dl_task), transport)
}

/// Devices d0..d39, d1's event of 500 KB (over DynamoDB's item limit).
fn records(tracker: &Arc<AckTracker>) -> Vec<Record> {
    device_records(tracker, |i| {
        static BLOB: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        if i == 1 {
            BLOB.get_or_init(|| format!(r#","blob":"{}""#, "z".repeat(500_000)))
        } else {
            ""
        }
    })
}

/// Today's defect was a dead letter (`item_too_large`): the 500 KB event
/// is stored, as a pointer item sent only after its payload's object was
/// written (byte for byte the record's), and every record is acked.
#[tokio::test]
async fn an_oversized_event_is_stored_as_a_pointer_after_its_payload() {
    let store = Arc::new(FakeStore::default());
    let ((pipeline, writer, memory, task, dl_task), transport) = rig(&store);
    let tracker = Arc::new(AckTracker::new());
    let records = records(&tracker);
    let big = records[1].data.clone();
    let counts = run_until_acked(&pipeline, &writer, &tracker, records).await;
    assert_eq!((counts.submitted, counts.dead_lettered), (40, 0));
    assert_eq!(tracker.checkpoint(), Some(Position::new("1039", 0)));
    let key = format!(
        "oversize/sha256/{}",
        tidemark_schema::route::oversize::sha256_hex(&big)
    );
    assert_eq!(store.objects.lock().unwrap().get(&key), Some(&big));
    let calls = transport.calls.lock().unwrap().clone();
    let pointer = calls
        .iter()
        .find(|(body, _)| body.windows(key.len()).any(|w| w == key.as_bytes()))
        .expect("the pointer item was written");
    assert_eq!(pointer.1, 1, "the object was there before the item");
    assert!(calls.iter().all(|(body, _)| body.len() < 100_000));
    assert!(memory.0.lock().unwrap().is_empty());
    drop(pipeline);
    writer.close();
    task.await.unwrap().unwrap();
    dl_task.await.unwrap().unwrap();
}

/// A payload S3 refuses: its event is dead-lettered whole as
/// `payload_store_failed` (no pointer item written), the others stored,
/// and every record acked.
#[tokio::test]
async fn a_payload_that_cannot_be_written_is_dead_lettered_whole() {
    let store = Arc::new(FakeStore {
        fail: u32::MAX,
        permanent: true,
        ..FakeStore::default()
    });
    let ((pipeline, writer, memory, task, dl_task), transport) = rig(&store);
    let tracker = Arc::new(AckTracker::new());
    let records = records(&tracker);
    let big = records[1].data.clone();
    let counts = run_until_acked(&pipeline, &writer, &tracker, records).await;
    assert_eq!((counts.submitted, counts.dead_lettered), (39, 1));
    assert_eq!(tracker.checkpoint(), Some(Position::new("1039", 0)));
    drop(pipeline);
    writer.close();
    task.await.unwrap().unwrap();
    dl_task.await.unwrap().unwrap();
    let dead = memory.0.lock().unwrap().clone();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, Reason::PayloadStoreFailed);
    assert!(dead[0].error.contains("refused"), "{}", dead[0].error);
    assert_eq!(dead[0].source.to_string(), "kinesis:s/shardId-0/1001.0");
    assert_eq!(dead[0].payload().unwrap(), big.to_vec());
    let calls = transport.calls.lock().unwrap();
    assert!(
        !calls
            .iter()
            .any(|(b, _)| b.windows(19).any(|w| w == b"tidemark_payload_s3"))
    );
}

/// A payload whose PutObject never answers: no record of its batch is
/// acknowledged (no checkpoint passes it) until `max_retry_time` is spent;
/// then it is dead-lettered and the batch goes on. Simulated time.
#[tokio::test(start_paused = true)]
async fn nothing_is_acked_while_a_payload_is_unwritten() {
    let store = Arc::new(FakeStore {
        hang: true,
        ..FakeStore::default()
    });
    let ((pipeline, writer, memory, task, dl_task), _) = rig(&store);
    let tracker = Arc::new(AckTracker::new());
    let (tx, rx) = mpsc::channel(1);
    tx.send(records(&tracker)).await.unwrap();
    drop(tx);
    let started = tokio::time::Instant::now();
    let run = tokio::spawn({
        let pipeline = pipeline.clone();
        async move { pipeline.run(rx).await }
    });
    // Well inside max_retry_time (30 s): the put is in flight, nothing acked.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(*store.puts.lock().unwrap() >= 1);
    assert_eq!(tracker.checkpoint(), None, "acked before the object");
    let counts = run.await.unwrap().unwrap();
    writer.flush().await;
    tokio::time::timeout(Duration::from_secs(60), tracker.drained())
        .await
        .expect("every record is acked");
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(25), "{took:?}");
    assert_eq!((counts.submitted, counts.dead_lettered), (39, 1));
    assert_eq!(tracker.checkpoint(), Some(Position::new("1039", 0)));
    drop(pipeline);
    writer.close();
    task.await.unwrap().unwrap();
    dl_task.await.unwrap().unwrap();
    let dead = memory.0.lock().unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, Reason::PayloadStoreFailed);
    assert!(dead[0].error.contains("no answer"), "{}", dead[0].error);
}
