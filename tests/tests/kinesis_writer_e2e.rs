//! The full path with the real pieces: Kinesis (kinesis-local) ->
//! KinesisSource -> schema Router -> Writer -> DynamoDB (moto), with
//! acknowledgements only after the writer reports the item stored (or the
//! record dead-lettered). Skipped unless TIDEMARK_IT=1.

// Test helpers panic on failure like the tests themselves (house rules allow
// unwrap/expect in tests; clippy only exempts #[test] functions).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, Select,
};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, StreamStatus};
use futures::future::BoxFuture;
use tidemark_consumer::fixture::read_fixture;
use tidemark_consumer::{KinesisConfig, KinesisSource, Record};
use tidemark_schema::Reason;
use tidemark_schema::route::{Router, RouterConfig};
use tidemark_tests::{integration, repo_root, unique_name, wait_until};
use tidemark_writer::{
    Completion, MissingTableAction, MissingTableHandler, Submission, WriteOutcome, Writer,
    WriterConfig,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Creates a missing period table (pk/sk strings, on demand), then retries.
struct CreateTables(aws_sdk_dynamodb::Client);

impl MissingTableHandler for CreateTables {
    fn on_missing(&self, table: &str) -> BoxFuture<'static, MissingTableAction> {
        let (ddb, table) = (self.0.clone(), table.to_string());
        Box::pin(async move {
            let key = |name: &str, kt: KeyType| {
                KeySchemaElement::builder()
                    .attribute_name(name)
                    .key_type(kt)
                    .build()
                    .unwrap()
            };
            let attr = |name: &str| {
                AttributeDefinition::builder()
                    .attribute_name(name)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap()
            };
            let _ = ddb
                .create_table()
                .table_name(&table)
                .billing_mode(BillingMode::PayPerRequest)
                .key_schema(key("pk", KeyType::Hash))
                .key_schema(key("sk", KeyType::Range))
                .attribute_definitions(attr("pk"))
                .attribute_definitions(attr("sk"))
                .send()
                .await;
            MissingTableAction::Retry
        })
    }
}

#[derive(Debug, Default)]
struct Outcomes {
    stored: usize,
    dead: BTreeMap<Reason, usize>,
    tables: std::collections::BTreeSet<String>,
}

/// The pipeline glue: route each record, submit it, acknowledge on outcome.
fn spawn_pipeline(
    router: Router,
    writer: tidemark_writer::WriterHandle,
    out: Arc<Mutex<Outcomes>>,
) -> (mpsc::Sender<Vec<Record>>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Vec<Record>>(8);
    let task = tokio::spawn(async move {
        while let Some(batch) = rx.recv().await {
            for r in batch {
                if let Some(defect) = &r.defect {
                    *out.lock().unwrap().dead.entry(defect.reason).or_default() += 1;
                    r.ack.done();
                    continue;
                }
                match router.route(&r.data, &r.origin, chrono::Utc::now()) {
                    Err(e) => {
                        *out.lock().unwrap().dead.entry(e.reason()).or_default() += 1;
                        r.ack.done();
                    }
                    Ok(routed) => {
                        out.lock().unwrap().tables.insert(routed.table.to_string());
                        let (ack, out2) = (r.ack, out.clone());
                        writer
                            .submit(Submission {
                                table: routed.table,
                                key: routed.key,
                                item: routed.item,
                                done: Completion::from_fn(move |outcome| {
                                    let mut o = out2.lock().unwrap();
                                    match outcome {
                                        WriteOutcome::Stored => o.stored += 1,
                                        WriteOutcome::Rejected { reason, .. } => {
                                            *o.dead.entry(reason).or_default() += 1
                                        }
                                    }
                                    ack.done();
                                }),
                            })
                            .await
                            .expect("writer accepts");
                    }
                }
            }
        }
    });
    (tx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kinesis_through_router_and_writer() {
    let Some(stack) = integration("kinesis_through_router_and_writer").await else {
        return;
    };
    let k = stack.kinesis();
    let stream = unique_name("kw");
    k.create_stream()
        .stream_name(&stream)
        .shard_count(2)
        .send()
        .await
        .unwrap();
    wait_until("stream ACTIVE", Duration::from_secs(30), || async {
        let d = k
            .describe_stream_summary()
            .stream_name(&stream)
            .send()
            .await
            .ok()?;
        (d.stream_description_summary()?.stream_status() == &StreamStatus::Active).then_some(())
    })
    .await;
    // 500 good events (timestamps now, so inside the current period) and the
    // malformed fixture's records in between.
    let now = chrono::Utc::now();
    let mut input: Vec<(String, Vec<u8>)> = (0..500)
        .map(|i| {
            let dev = format!("sensor-{}", i % 17);
            let ts = (now - chrono::Duration::milliseconds(i)).to_rfc3339();
            let body = format!("{{\"deviceId\":\"{dev}\",\"timestamp\":\"{ts}\",\"value\":{i}}}");
            (dev, body.into_bytes())
        })
        .collect();
    let malformed = read_fixture(&repo_root().join("tests/fixtures/malformed.jsonl")).unwrap();
    for (i, m) in malformed.iter().enumerate() {
        input.insert(i * 50, (m.partition_key.clone(), m.bytes().unwrap()));
    }
    for chunk in input.chunks(500) {
        let entries: Vec<_> = chunk
            .iter()
            .map(|(pk, d)| {
                PutRecordsRequestEntry::builder()
                    .partition_key(pk)
                    .data(Blob::new(d.clone()))
                    .build()
                    .unwrap()
            })
            .collect();
        k.put_records()
            .stream_name(&stream)
            .set_records(Some(entries))
            .send()
            .await
            .unwrap();
    }
    let prefix = unique_name("tm").replace('-', "_");
    let router = Router::new(RouterConfig::with_prefix(&prefix)).expect("router config");
    let (writer, writer_task) = Writer::start(
        stack.dynamodb(),
        stack.dynamodb_transport_at(&stack.dynamodb_url),
        WriterConfig::default(),
        Arc::new(CreateTables(stack.dynamodb())),
    );
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let (sink, pipeline) = spawn_pipeline(router, writer.clone(), outcomes.clone());
    let mut cfg = KinesisConfig::new(&stream, unique_name("leases"), "worker");
    cfg.failover_time = Duration::from_secs(2);
    cfg.checkpoint_interval = Duration::from_millis(500);
    cfg.idle_poll = Duration::from_millis(100);
    let source = KinesisSource::new(cfg, stack.kinesis(), stack.dynamodb());
    let stop = CancellationToken::new();
    let run = tokio::spawn(source.run(sink, stop.clone()));
    let total = input.len();
    wait_until(
        "every record stored or dead-lettered",
        Duration::from_secs(60),
        || async {
            let o = outcomes.lock().unwrap();
            (o.stored + o.dead.values().sum::<usize>() >= total).then_some(())
        },
    )
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    pipeline.await.unwrap();
    writer.close();
    writer_task.await.unwrap().unwrap();
    let o = std::mem::take(&mut *outcomes.lock().unwrap());
    eprintln!("outcomes: stored {}, dead {:?}", o.stored, o.dead);
    // The malformed fixture's records all fail routing under the default
    // field names (deviceId/timestamp): its two well-formed events use
    // device_id/ts, so they are missing fields here.
    let good_in_malformed = 0;
    assert_eq!(o.stored, 500 + good_in_malformed);
    assert_eq!(
        o.dead.values().sum::<usize>(),
        malformed.len() - good_in_malformed
    );
    // Every stored event is one item.
    let ddb = stack.dynamodb();
    let mut items = 0;
    for t in &o.tables {
        let mut start = None;
        loop {
            let page = ddb
                .scan()
                .table_name(t)
                .select(Select::Count)
                .set_exclusive_start_key(start)
                .send()
                .await
                .unwrap();
            items += page.count() as usize;
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
    }
    assert_eq!(items, 500 + good_in_malformed, "one item per event");
}
