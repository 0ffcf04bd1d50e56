//! The writer against a fake DynamoDB built with aws-smithy-mocks: a store,
//! plus a script of faults for the next calls. Completions check, when they
//! run, that the fake really holds the item (acknowledge-after-store).

// Test code: a panic in a helper is a failed assertion (clippy.toml allows
// this in #[test] functions only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
use aws_sdk_dynamodb::types::{
    AttributeValue, BillingMode, BillingModeSummary, ProvisionedThroughputDescription,
    TableDescription,
};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use bytes::Bytes;
use futures::future::BoxFuture;
use tidemark_schema::wire::decode_map;
use tidemark_schema::{Item, ItemKey, KeyAttributes, Reason, WireItem};
use tidemark_writer::{
    Complete, Completion, LateTables, MissingTableAction, MissingTableHandler, RawResponse,
    Submission, Transport, TransportError, WriteOutcome, Writer, WriterConfig, WriterError,
    WriterHandle,
};
use tokio::sync::mpsc;

/// What the fake does with the next call.
#[derive(Debug, Clone)]
enum Fault {
    /// HTTP 400 ProvisionedThroughputExceededException, as DynamoDB sends it.
    Throttle,
    /// HTTP 500.
    ServerError,
    /// Store all but these partition keys, return them as UnprocessedItems.
    Unprocessed(Vec<String>),
    /// A fatal error code.
    Fatal(&'static str),
}

#[derive(Default)]
struct State {
    store: HashMap<(String, String, String), Item>,
    /// Partition keys of every call, in order.
    calls: Vec<(String, Vec<String>)>,
    script: VecDeque<Fault>,
    /// Items with this attribute make the whole call fail validation.
    poison_attr: Option<String>,
    /// Tables that do not exist.
    missing: Vec<String>,
    /// While set, every call is throttled.
    throttle_all: bool,
    /// Tables whose every call is throttled.
    throttle_tables: Vec<String>,
    /// Partition keys whose partition is full: their items always come
    /// back in UnprocessedItems, the other items of the call are stored.
    hot: Vec<String>,
    /// While set, every call hangs (an overloaded endpoint: no answer before
    /// the writer's call timeout).
    hang_all: bool,
    /// DescribeTable calls answered, per table.
    describes: HashMap<String, usize>,
    /// Provisioned WCU DescribeTable reports, when set (1,000 otherwise):
    /// what table auto scaling changes behind the writer's back.
    wcu: Option<i64>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<State>>);

fn raw(status: u16, type_: &str, message: &str) -> RawResponse {
    let body =
        format!(r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{type_}","message":"{message}"}}"#);
    RawResponse {
        status,
        body: body.into(),
    }
}

fn s(item: &Item, k: &str) -> String {
    match item.get(k) {
        Some(AttributeValue::S(v)) => v.clone(),
        _ => String::new(),
    }
}

/// The table and the put requests of a BatchWriteItem body the writer built
/// (its first table: the writer sends one per call).
fn requests(body: &[u8]) -> (String, Vec<serde_json::Value>) {
    let mut req: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(req["ReturnConsumedCapacity"], "TOTAL");
    let (table, reqs) = req["RequestItems"]
        .as_object_mut()
        .unwrap()
        .iter_mut()
        .next()
        .unwrap();
    (table.clone(), reqs.as_array_mut().unwrap().split_off(0))
}

/// The fake's BatchWriteItem: reads the JSON body the writer built, and
/// answers in DynamoDB's JSON.
impl Transport for Fake {
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
        if self.0.lock().unwrap().hang_all {
            self.0
                .lock()
                .unwrap()
                .calls
                .push(("hung".into(), Vec::new()));
            return Box::pin(futures::future::pending());
        }
        let answer = self.write(&body);
        Box::pin(async move { Ok(answer) })
    }
}

impl Fake {
    fn write(&self, body: &[u8]) -> RawResponse {
        let (table, reqs) = requests(body);
        let table = &table;
        let items: Vec<Item> = reqs
            .iter()
            .map(|r| decode_map(&r["PutRequest"]["Item"]).unwrap())
            .collect();
        let mut g = self.0.lock().unwrap();
        g.calls
            .push((table.clone(), items.iter().map(|i| s(i, "pk")).collect()));
        assert!(items.len() <= 25, "a call of {} items", items.len());
        if g.missing.contains(table) {
            return raw(
                400,
                "ResourceNotFoundException",
                "Requested resource not found",
            );
        }
        if g.throttle_all || g.throttle_tables.contains(table) {
            return raw(400, "ProvisionedThroughputExceededException", "slow down");
        }
        if let Some(p) = &g.poison_attr
            && items.iter().any(|i| i.contains_key(p))
        {
            return raw(
                400,
                "ValidationException",
                "One or more parameter values were invalid: poisoned",
            );
        }
        let mut unprocessed = Vec::new();
        match g.script.pop_front() {
            Some(Fault::Throttle) => {
                return raw(400, "ProvisionedThroughputExceededException", "slow down");
            }
            Some(Fault::ServerError) => return raw(500, "InternalServerError", "oops"),
            Some(Fault::Fatal(code)) => return raw(400, code, "no"),
            Some(Fault::Unprocessed(keys)) => unprocessed = keys,
            None => {}
        }
        unprocessed.extend(g.hot.iter().cloned());
        let mut back = Vec::new();
        let mut wcu = 0.0;
        for it in items {
            if unprocessed.contains(&s(&it, "pk")) {
                let json: serde_json::Value =
                    serde_json::from_slice(WireItem::encode(&it).json()).unwrap();
                back.push(serde_json::json!({"PutRequest": {"Item": json}}));
            } else {
                wcu += 1.0;
                g.store
                    .insert((table.clone(), s(&it, "pk"), s(&it, "sk")), it);
            }
        }
        let mut out = serde_json::json!({
            "UnprocessedItems": {},
            "ConsumedCapacity": [{"TableName": table, "CapacityUnits": wcu}],
        });
        if !back.is_empty() {
            out["UnprocessedItems"][table] = serde_json::Value::Array(back);
        }
        RawResponse {
            status: 200,
            body: serde_json::to_vec(&out).unwrap().into(),
        }
    }

    fn client(&self, on_demand: bool) -> Client {
        let state = self.0.clone();
        let describe = mock!(Client::describe_table).then_compute_output(move |req| {
            let mut st = state.lock().unwrap();
            *st.describes
                .entry(req.table_name().unwrap().to_string())
                .or_default() += 1;
            let wcu = st.wcu.unwrap_or(1_000);
            drop(st);
            let mut t = TableDescription::builder().table_name(req.table_name().unwrap());
            t = if on_demand {
                t.billing_mode_summary(
                    BillingModeSummary::builder()
                        .billing_mode(BillingMode::PayPerRequest)
                        .build(),
                )
            } else {
                t.provisioned_throughput(
                    ProvisionedThroughputDescription::builder()
                        .write_capacity_units(wcu)
                        .read_capacity_units(100)
                        .build(),
                )
            };
            DescribeTableOutput::builder().table(t.build()).build()
        });
        mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&describe])
    }

    fn script(&self, f: Fault) {
        self.0.lock().unwrap().script.push_back(f);
    }
    fn calls(&self) -> Vec<(String, Vec<String>)> {
        self.0.lock().unwrap().calls.clone()
    }
    fn stored(&self, table: &str, pk: &str) -> Option<Item> {
        self.0
            .lock()
            .unwrap()
            .store
            .get(&(table.to_owned(), pk.to_owned(), "s".to_owned()))
            .cloned()
    }
}

fn item(pk: &str, v: &str) -> Item {
    let mut it = Item::new();
    it.insert("pk".into(), AttributeValue::S(pk.into()));
    it.insert("sk".into(), AttributeValue::S("s".into()));
    it.insert("v".into(), AttributeValue::S(v.into()));
    it
}

type Outcomes = mpsc::UnboundedReceiver<(String, WriteOutcome)>;

/// Submits an item whose completion reports (tag, outcome), and asserts a
/// Stored outcome only arrives once the fake holds exactly this value.
async fn submit(
    h: &WriterHandle,
    fake: &Fake,
    tx: &mpsc::UnboundedSender<(String, WriteOutcome)>,
    table: &str,
    it: Item,
    tag: &str,
) -> Result<(), WriterError> {
    h.submit(submission(fake, tx, table, it, tag)).await
}

/// The submission `submit` makes.
fn submission(
    fake: &Fake,
    tx: &mpsc::UnboundedSender<(String, WriteOutcome)>,
    table: &str,
    it: Item,
    tag: &str,
) -> Submission {
    let (fake, tx, tag2) = (fake.clone(), tx.clone(), tag.to_owned());
    let pk = s(&it, "pk");
    let table2 = table.to_owned();
    Submission {
        table: table.into(),
        key: ItemKey::new(&pk, "s"),
        item: WireItem::encode(&it),
        done: Completion::from_fn(move |o| {
            if o == WriteOutcome::Stored {
                assert!(
                    fake.stored(&table2, &pk).is_some(),
                    "{tag2} acknowledged before DynamoDB stored it"
                );
            }
            tx.send((tag2, o)).unwrap();
        }),
    }
}

fn config() -> WriterConfig {
    WriterConfig {
        linger: Duration::from_secs(10),
        ..WriterConfig::default()
    }
}

fn drain(rx: &mut Outcomes) -> HashMap<String, Vec<WriteOutcome>> {
    let mut m: HashMap<String, Vec<WriteOutcome>> = HashMap::new();
    while let Ok((tag, o)) = rx.try_recv() {
        m.entry(tag).or_default().push(o);
    }
    m
}

fn start(
    fake: &Fake,
    cfg: WriterConfig,
) -> (
    WriterHandle,
    tokio::task::JoinHandle<Result<(), WriterError>>,
) {
    Writer::builder(
        fake.client(false),
        Arc::new(fake.clone()),
        KeyAttributes::default(),
    )
    .config(cfg)
    .start()
}

#[tokio::test(start_paused = true)]
async fn throttled_then_success() {
    let fake = Fake::default();
    fake.script(Fault::Throttle);
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..3 {
        submit(
            &h,
            &fake,
            &tx,
            "t",
            item(&format!("k{i}"), "v"),
            &format!("k{i}"),
        )
        .await
        .unwrap();
    }
    h.flush().await;
    let out = drain(&mut rx);
    assert_eq!(out.len(), 3);
    assert!(out.values().all(|v| v == &vec![WriteOutcome::Stored]));
    assert_eq!(fake.calls().len(), 2, "one throttled call, one retry");
    let st = h.stats();
    assert_eq!(
        (st.stored, st.calls, st.throttled_calls, st.retries),
        (3, 2, 1, 3)
    );
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn server_errors_are_retried_not_dropped() {
    let fake = Fake::default();
    for _ in 0..4 {
        fake.script(Fault::ServerError);
    }
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    submit(&h, &fake, &tx, "t", item("a", "v"), "a")
        .await
        .unwrap();
    h.flush().await;
    assert_eq!(drain(&mut rx)["a"], vec![WriteOutcome::Stored]);
    assert_eq!(fake.calls().len(), 5);
    assert_eq!(h.stats().transient_errors, 4);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn partial_unprocessed_items_are_resent_alone() {
    let fake = Fake::default();
    fake.script(Fault::Unprocessed(vec![
        "k3".into(),
        "k17".into(),
        "k20".into(),
    ]));
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..25 {
        submit(
            &h,
            &fake,
            &tx,
            "t",
            item(&format!("k{i}"), "v"),
            &format!("k{i}"),
        )
        .await
        .unwrap();
    }
    h.flush().await;
    let calls = fake.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].1.len(), 25);
    assert_eq!(calls[1].1, vec!["k3", "k17", "k20"]);
    let out = drain(&mut rx);
    assert_eq!(out.len(), 25);
    assert!(out.values().all(|v| v == &vec![WriteOutcome::Stored]));
    assert_eq!(h.stats().unprocessed, 3);
    h.close();
    task.await.unwrap().unwrap();
}

/// Answers the first call with its first item unprocessed (echoed back as
/// DynamoDB does) and stores everything after; counts each call's items.
#[derive(Default)]
struct FirstItemBack(Mutex<Vec<usize>>);

impl Transport for FirstItemBack {
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
        let (table, reqs) = requests(&body);
        let mut calls = self.0.lock().unwrap();
        let mut out = serde_json::json!({
            "UnprocessedItems": {},
            "ConsumedCapacity": [{"TableName": table, "CapacityUnits": reqs.len()}],
        });
        if calls.is_empty() {
            out["UnprocessedItems"][table] = serde_json::json!([reqs[0]]);
        }
        calls.push(reqs.len());
        let answer = RawResponse {
            status: 200,
            body: serde_json::to_vec(&out).unwrap().into(),
        };
        Box::pin(async move { Ok(answer) })
    }
}

/// Answers the first call with every item unprocessed, listed under the
/// table's ARN instead of the name the request used; stores everything
/// after. Counts each call's items.
#[derive(Default)]
struct AllBackUnderArn(Mutex<Vec<usize>>);

impl Transport for AllBackUnderArn {
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
        let (table, reqs) = requests(&body);
        let mut calls = self.0.lock().unwrap();
        let mut out = serde_json::json!({
            "UnprocessedItems": {},
            "ConsumedCapacity": [{"TableName": table, "CapacityUnits": 0}],
        });
        if calls.is_empty() {
            let arn = format!("arn:aws:dynamodb:us-east-1:123456789012:table/{table}");
            out["UnprocessedItems"][arn] = serde_json::Value::Array(reqs.clone());
        }
        calls.push(reqs.len());
        let answer = RawResponse {
            status: 200,
            body: serde_json::to_vec(&out).unwrap().into(),
        };
        Box::pin(async move { Ok(answer) })
    }
}

/// The writer reads the keys DynamoDB returns unprocessed by the key
/// attribute names it is built with: with `id` / `at`, the one item
/// returned is resent alone, the others are acknowledged (were the names
/// not the tables', no key could be read and the whole batch would go again).
#[tokio::test(start_paused = true)]
async fn unprocessed_keys_are_read_by_the_writers_key_attributes() {
    let transport = Arc::new(FirstItemBack::default());
    let (h, task) = Writer::builder(
        Fake::default().client(false),
        transport.clone(),
        KeyAttributes {
            pk: "id".into(),
            sk: "at".into(),
        },
    )
    .config(config())
    .start();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..3 {
        let mut it = Item::new();
        it.insert("id".into(), AttributeValue::S(format!("d{i}")));
        it.insert("at".into(), AttributeValue::S("2026".into()));
        let tx = tx.clone();
        h.submit(Submission {
            table: "t".into(),
            key: ItemKey::new(&format!("d{i}"), "2026"),
            item: WireItem::encode(&it),
            done: Completion::from_fn(move |o| tx.send((format!("d{i}"), o)).unwrap()),
        })
        .await
        .unwrap();
    }
    h.flush().await;
    assert_eq!(*transport.0.lock().unwrap(), vec![3, 1]);
    let out = drain(&mut rx);
    assert_eq!(out.len(), 3);
    assert!(out.values().all(|v| v == &vec![WriteOutcome::Stored]));
    h.close();
    task.await.unwrap().unwrap();
}

/// UnprocessedItems listed under any key but the table name the request
/// used (an ARN, say) cannot be matched to submissions: the safe reading
/// is "nothing of this call is confirmed", so every item is sent again and
/// none is acknowledged before that second call stored it.
#[tokio::test(start_paused = true)]
async fn unprocessed_items_under_another_table_key_are_all_sent_again() {
    let transport = Arc::new(AllBackUnderArn::default());
    let (h, task) = Writer::builder(
        Fake::default().client(false),
        transport.clone(),
        KeyAttributes::default(),
    )
    .config(config())
    .start();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..3 {
        let mut it = Item::new();
        it.insert("pk".into(), AttributeValue::S(format!("d{i}")));
        it.insert("sk".into(), AttributeValue::S("2026".into()));
        let tx = tx.clone();
        h.submit(Submission {
            table: "t".into(),
            key: ItemKey::new(&format!("d{i}"), "2026"),
            item: WireItem::encode(&it),
            done: Completion::from_fn(move |o| tx.send((format!("d{i}"), o)).unwrap()),
        })
        .await
        .unwrap();
    }
    h.flush().await;
    assert_eq!(
        *transport.0.lock().unwrap(),
        vec![3, 3],
        "every item of the first call is sent again"
    );
    let out = drain(&mut rx);
    assert_eq!(out.len(), 3);
    assert!(out.values().all(|v| v == &vec![WriteOutcome::Stored]));
    h.close();
    task.await.unwrap().unwrap();
}

/// Without a partition key name the writer could match no unprocessed
/// item: it refuses to start, naming the problem.
#[tokio::test(start_paused = true)]
async fn key_attributes_without_a_partition_key_are_refused() {
    let fake = Fake::default();
    let (h, task) = Writer::builder(
        fake.client(false),
        Arc::new(fake.clone()),
        KeyAttributes {
            pk: String::new(),
            sk: "sk".into(),
        },
    )
    .start();
    match task.await.unwrap() {
        Err(WriterError::Config(msg)) => assert!(msg.contains("partition key"), "{msg}"),
        other => panic!("the writer started: {other:?}"),
    }
    let (tx, _rx) = mpsc::unbounded_channel();
    let late = submit(&h, &fake, &tx, "t", item("a", "v"), "a").await;
    assert!(matches!(late, Err(WriterError::Closed)), "{late:?}");
}

#[tokio::test(start_paused = true)]
async fn one_poisoned_item_among_25_is_dead_lettered_alone() {
    let fake = Fake::default();
    fake.0.lock().unwrap().poison_attr = Some("poison".into());
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..25 {
        let mut it = item(&format!("k{i}"), "v");
        if i == 13 {
            it.insert("poison".into(), AttributeValue::Bool(true));
        }
        submit(&h, &fake, &tx, "t", it, &format!("k{i}"))
            .await
            .unwrap();
    }
    h.flush().await;
    let out = drain(&mut rx);
    assert_eq!(out.len(), 25);
    for (tag, o) in &out {
        if tag == "k13" {
            assert_eq!(
                o,
                &vec![WriteOutcome::Rejected {
                    reason: Reason::DynamodbRejected,
                    message: "One or more parameter values were invalid: poisoned".into()
                }]
            );
        } else {
            assert_eq!(o, &vec![WriteOutcome::Stored], "{tag}");
        }
    }
    assert!(fake.stored("t", "k13").is_none());
    // Bisection: 1 + 2 per level down to the single item (25 -> 13 -> 7 -> 4 -> 2 -> 1).
    assert!(fake.calls().len() <= 11, "{} calls", fake.calls().len());
    assert_eq!(h.stats().dead_lettered, 1);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn sixty_submissions_make_calls_of_25_25_10() {
    let fake = Fake::default();
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..60 {
        submit(
            &h,
            &fake,
            &tx,
            "t",
            item(&format!("k{i}"), "v"),
            &format!("k{i}"),
        )
        .await
        .unwrap();
    }
    h.flush().await;
    let sizes: Vec<usize> = fake.calls().iter().map(|c| c.1.len()).collect();
    assert_eq!(sizes, vec![25, 25, 10]);
    assert_eq!(drain(&mut rx).len(), 60);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn linger_sends_a_partial_batch() {
    let fake = Fake::default();
    let cfg = WriterConfig {
        linger: Duration::from_millis(50),
        ..WriterConfig::default()
    };
    let (h, task) = start(&fake, cfg);
    let (tx, mut rx) = mpsc::unbounded_channel();
    submit(&h, &fake, &tx, "t", item("a", "v"), "a")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(fake.calls().is_empty(), "sent before linger");
    let got = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await;
    assert_eq!(got.unwrap().unwrap().1, WriteOutcome::Stored);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn duplicate_keys_are_coalesced_and_every_token_acknowledged() {
    let fake = Fake::default();
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    submit(&h, &fake, &tx, "t", item("dup", "first"), "d1")
        .await
        .unwrap();
    submit(&h, &fake, &tx, "t", item("other", "x"), "o")
        .await
        .unwrap();
    submit(&h, &fake, &tx, "t", item("dup", "second"), "d2")
        .await
        .unwrap();
    submit(&h, &fake, &tx, "t", item("dup", "third"), "d3")
        .await
        .unwrap();
    h.flush().await;
    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1, vec!["dup", "other"]);
    assert_eq!(
        fake.stored("t", "dup").unwrap()["v"],
        AttributeValue::S("third".into())
    );
    let out = drain(&mut rx);
    for tag in ["d1", "d2", "d3", "o"] {
        assert_eq!(out[tag], vec![WriteOutcome::Stored], "{tag}");
    }
    assert_eq!(h.stats().stored, 4);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn item_over_400_kb_is_refused_before_any_call() {
    let fake = Fake::default();
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let big = item("big", &"x".repeat(400 * 1024));
    submit(&h, &fake, &tx, "t", big, "big").await.unwrap();
    let (_, o) = rx.try_recv().expect("completed at once");
    assert!(matches!(
        o,
        WriteOutcome::Rejected {
            reason: Reason::ItemTooLarge,
            ..
        }
    ));
    // Just under the limit is written.
    let ok = item("ok", &"x".repeat(400 * 1024 - 20));
    submit(&h, &fake, &tx, "t", ok, "ok").await.unwrap();
    h.flush().await;
    assert_eq!(drain(&mut rx)["ok"], vec![WriteOutcome::Stored]);
    assert_eq!(fake.calls().len(), 1);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn requests_stay_under_16_mb() {
    let fake = Fake::default();
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    // 390 KB of control characters: ~2.3 MB each once JSON-escaped.
    let payload = "\u{1}".repeat(390 * 1024);
    for i in 0..25 {
        submit(
            &h,
            &fake,
            &tx,
            "t",
            item(&format!("k{i}"), &payload),
            &format!("k{i}"),
        )
        .await
        .unwrap();
    }
    h.flush().await;
    let sizes: Vec<usize> = fake.calls().iter().map(|c| c.1.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 25);
    // Each is 6 x 390 KB = 2.4 MB once escaped: 7 fit in 16 MiB, 8 would not.
    assert!(sizes.iter().all(|n| *n <= 7), "{sizes:?}");
    assert!(sizes.len() >= 4, "{sizes:?}");
    assert_eq!(drain(&mut rx).len(), 25);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn submit_waits_at_the_in_flight_bound() {
    let fake = Fake::default();
    fake.0.lock().unwrap().throttle_all = true;
    let cfg = WriterConfig {
        max_in_flight_items: 10,
        // One table may take the whole bound here: the bound is under test.
        max_table_share: 1.0,
        linger: Duration::from_millis(5),
        ..WriterConfig::default()
    };
    let (h, task) = start(&fake, cfg);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let accepted = Arc::new(AtomicUsize::new(0));
    let producer = {
        let (h, fake, tx, accepted) = (h.clone(), fake.clone(), tx.clone(), accepted.clone());
        tokio::spawn(async move {
            for i in 0..20 {
                submit(
                    &h,
                    &fake,
                    &tx,
                    "t",
                    item(&format!("k{i}"), "v"),
                    &format!("k{i}"),
                )
                .await
                .unwrap();
                accepted.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 10, "backpressure bound");
    assert!(
        rx.try_recv().is_err(),
        "nothing acknowledged while throttled"
    );
    assert!(h.stats().throttled_calls > 3, "kept retrying");
    fake.0.lock().unwrap().throttle_all = false;
    producer.await.unwrap();
    h.flush().await;
    assert_eq!(drain(&mut rx).len(), 20);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_throttled_table_does_not_hold_back_another() {
    let fake = Fake::default();
    fake.0.lock().unwrap().throttle_tables.push("slow".into());
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    submit(&h, &fake, &tx, "slow", item("a", "v"), "slow")
        .await
        .unwrap();
    submit(&h, &fake, &tx, "fast", item("b", "v"), "fast")
        .await
        .unwrap();
    let h2 = h.clone();
    // Flushing waits for both; "fast" must complete while "slow" is stuck.
    let flushing = tokio::spawn(async move { h2.flush().await });
    let (tag, o) = tokio::time::timeout(Duration::from_secs(1), rx.recv())
        .await
        .expect("fast table completed while the other is throttled")
        .unwrap();
    assert_eq!((tag.as_str(), o), ("fast", WriteOutcome::Stored));
    assert!(fake.stored("slow", "a").is_none());
    fake.0.lock().unwrap().throttle_tables.clear();
    flushing.await.unwrap();
    assert_eq!(drain(&mut rx)["slow"], vec![WriteOutcome::Stored]);
    h.close();
    task.await.unwrap().unwrap();
}

/// A table that throttles for ever (an old period's table scaled down to
/// 1 WCU, meeting late events) may fill only its share of the in-flight
/// bound: with a small bound and its items submitted first, a write to the
/// current period's table still completes within a second.
#[tokio::test(start_paused = true)]
async fn a_table_throttled_for_ever_never_takes_the_whole_in_flight_bound() {
    let fake = Fake::default();
    fake.0.lock().unwrap().throttle_tables.push("late".into());
    let cfg = WriterConfig {
        max_in_flight_items: 10,
        linger: Duration::from_millis(5),
        ..WriterConfig::default()
    };
    let (h, task) = start(&fake, cfg);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let late = {
        let (h, fake, tx) = (h.clone(), fake.clone(), tx.clone());
        tokio::spawn(async move {
            for i in 0..20 {
                let tag = format!("late{i}");
                let _ = submit(&h, &fake, &tx, "late", item(&tag, "v"), &tag).await;
            }
        })
    };
    // Long enough for the late items to take whatever the writer lets them.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        h.stats().throttled_calls > 3,
        "the late table kept retrying"
    );
    let sent = tokio::time::timeout(
        Duration::from_secs(1),
        submit(&h, &fake, &tx, "now", item("current", "v"), "current"),
    )
    .await;
    assert!(
        matches!(sent, Ok(Ok(()))),
        "a write to another table waited on the throttled table's items"
    );
    let done = tokio::time::timeout(Duration::from_secs(1), async {
        loop {
            let (tag, outcome) = rx.recv().await.unwrap();
            if tag == "current" {
                return outcome;
            }
        }
    })
    .await
    .expect("the current item completed within a second");
    assert_eq!(done, WriteOutcome::Stored);
    late.abort();
    drop(h);
    task.abort();
}

/// Table auto scaling raises a table's capacity behind the writer's back:
/// the writer reads the capacity again (every `capacity_refresh`) and paces
/// to the raised one, in simulated time.
#[tokio::test(start_paused = true)]
async fn a_capacity_raised_by_auto_scaling_is_followed() {
    let fake = Fake::default();
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    submit(&h, &fake, &tx, "events", item("a", "v"), "first")
        .await
        .unwrap();
    h.flush().await;
    let before = h.stats().rate_wcu["events"];
    fake.0.lock().unwrap().wcu = Some(4_000);
    // Kept busy (a table idle long enough retires) past a refresh.
    for i in 0..15 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let tag = format!("w{i}");
        submit(&h, &fake, &tx, "events", item(&tag, "v"), &tag)
            .await
            .unwrap();
        h.flush().await;
    }
    let after = h.stats().rate_wcu["events"];
    assert!(before > 0.0, "{before}");
    assert!(
        (after / before - 4.0).abs() < 0.01,
        "paced at {before} WCU/s of 1,000, then {after} of 4,000"
    );
    assert_eq!(drain(&mut rx).len(), 16);
    h.close();
    task.await.unwrap().unwrap();
}

/// A table written once is not described for ever after: its task retires
/// once idle, so a worker that has written to many tables (hourly tables,
/// days of uptime) does not poll every one of them every minute.
#[tokio::test(start_paused = true)]
async fn tables_written_once_are_not_described_for_ever() {
    let fake = Fake::default();
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    for t in 0..50 {
        let table = format!("events_{t:02}");
        submit(&h, &fake, &tx, &table, item("a", "v"), &table)
            .await
            .unwrap();
    }
    h.flush().await;
    assert_eq!(drain(&mut rx).len(), 50);
    // An hour of uptime with nothing written.
    tokio::time::sleep(Duration::from_secs(3000)).await;
    let before: usize = fake.0.lock().unwrap().describes.values().sum();
    tokio::time::sleep(Duration::from_secs(600)).await;
    let after: usize = fake.0.lock().unwrap().describes.values().sum();
    assert_eq!(
        after - before,
        0,
        "DescribeTable calls in 10 idle minutes, 50 tables written an hour ago"
    );
    // Written to again: described again, and stored.
    submit(&h, &fake, &tx, "events_07", item("b", "v"), "again")
        .await
        .unwrap();
    h.flush().await;
    assert_eq!(drain(&mut rx)["again"], vec![WriteOutcome::Stored]);
    assert!(fake.0.lock().unwrap().describes["events_07"] >= 2);
    h.close();
    task.await.unwrap().unwrap();
}

/// Tables named `old*` take late data.
struct OldIsLate;

impl LateTables for OldIsLate {
    fn is_late(&self, table: &str) -> bool {
        table.starts_with("old")
    }
}

/// Late items never wait: past their table's share they are dead-lettered
/// at once, and past `late_max_wait` in its queue too; the current table's
/// writes stay prompt throughout, and late items are stored once the table
/// takes writes again.
#[tokio::test(start_paused = true)]
async fn late_items_past_their_share_or_their_wait_are_dead_lettered_not_waited_for() {
    let fake = Fake::default();
    fake.0.lock().unwrap().throttle_tables.push("old".into());
    let cfg = WriterConfig {
        max_in_flight_items: 10,
        linger: Duration::from_millis(5),
        late_max_wait: Duration::from_secs(60),
        ..WriterConfig::default()
    };
    let (h, task) = Writer::builder(
        fake.client(false),
        Arc::new(fake.clone()),
        KeyAttributes::default(),
    )
    .config(cfg)
    .late_tables(Arc::new(OldIsLate))
    .start();
    assert_eq!(h.table_share_items(), 5);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let subs: Vec<Submission> = (0..20)
        .map(|i| {
            let tag = format!("late{i}");
            submission(&fake, &tx, "old", item(&tag, "v"), &tag)
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(1), h.submit_all(subs))
        .await
        .expect("late items never wait for their table")
        .unwrap();
    let refused = drain(&mut rx);
    assert_eq!(refused.len(), 15, "past the share: refused at once");
    assert!(refused.values().all(|o| matches!(
        &o[..],
        [WriteOutcome::Rejected { reason: Reason::LateBacklog, message }] if message.contains("max_table_share")
    )));
    tokio::time::timeout(
        Duration::from_secs(1),
        submit(&h, &fake, &tx, "now", item("current", "v"), "current"),
    )
    .await
    .expect("the current table's write is accepted at once")
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(drain(&mut rx)["current"], vec![WriteOutcome::Stored]);
    let load = h.stats().tables["old"];
    assert_eq!((load.items, load.late), (5, true));
    assert!(load.seconds_since_stored >= 1.0, "{load:?}");
    // The five accepted wait at most late_max_wait.
    tokio::time::sleep(Duration::from_secs(65)).await;
    let expired = drain(&mut rx);
    assert_eq!(expired.len(), 5, "{expired:?}");
    assert!(expired.values().all(|o| matches!(
        &o[..],
        [WriteOutcome::Rejected { reason: Reason::LateBacklog, message }] if message.contains("late_max_wait")
    )));
    assert_eq!(h.stats().tables["old"].items, 0);
    // Capacity back: late items are stored, and counted as such.
    fake.0.lock().unwrap().throttle_tables.clear();
    submit(&h, &fake, &tx, "old", item("late-ok", "v"), "late-ok")
        .await
        .unwrap();
    h.flush().await;
    assert_eq!(drain(&mut rx)["late-ok"], vec![WriteOutcome::Stored]);
    assert_eq!(h.stats().late_stored, 1);
    h.close();
    task.await.unwrap().unwrap();
}

struct CreateOnMissing(Fake, Arc<AtomicUsize>);

impl MissingTableHandler for CreateOnMissing {
    fn on_missing(&self, table: &str) -> BoxFuture<'static, MissingTableAction> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.0.lock().unwrap().missing.retain(|t| t != table);
        Box::pin(async { MissingTableAction::Retry })
    }
}

#[tokio::test(start_paused = true)]
async fn missing_table_handler_can_create_and_retry() {
    let fake = Fake::default();
    fake.0.lock().unwrap().missing.push("period_2025_11".into());
    let asked = Arc::new(AtomicUsize::new(0));
    let (h, task) = Writer::builder(
        fake.client(false),
        Arc::new(fake.clone()),
        KeyAttributes::default(),
    )
    .config(config())
    .missing_tables(Arc::new(CreateOnMissing(fake.clone(), asked.clone())))
    .start();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..30 {
        submit(
            &h,
            &fake,
            &tx,
            "period_2025_11",
            item(&format!("k{i}"), "v"),
            &format!("k{i}"),
        )
        .await
        .unwrap();
    }
    h.flush().await;
    let out = drain(&mut rx);
    assert_eq!(out.len(), 30);
    assert!(out.values().all(|v| v == &vec![WriteOutcome::Stored]));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn missing_table_rejected_by_handler_dead_letters_with_reason() {
    let fake = Fake::default();
    fake.0.lock().unwrap().missing.push("gone".into());
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    submit(&h, &fake, &tx, "gone", item("a", "v"), "a")
        .await
        .unwrap();
    h.flush().await;
    let out = drain(&mut rx);
    assert!(matches!(
        &out["a"][..],
        [WriteOutcome::Rejected { reason: Reason::TableMissing, message }] if message.contains("gone")
    ));
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn access_denied_is_fatal_and_completes_nothing() {
    let fake = Fake::default();
    fake.script(Fault::Fatal("AccessDeniedException"));
    let (h, task) = start(&fake, config());
    let (tx, mut rx) = mpsc::unbounded_channel();
    submit(&h, &fake, &tx, "t", item("a", "v"), "a")
        .await
        .unwrap();
    h.flush().await;
    let err = task.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, WriterError::Fatal { code, table, .. } if code == "AccessDeniedException" && table == "t"),
        "{err}"
    );
    assert!(rx.try_recv().is_err(), "an in-flight item was completed");
    let late = submit(&h, &fake, &tx, "t", item("b", "v"), "b").await;
    assert!(matches!(late, Err(WriterError::Closed)));
}

#[tokio::test(start_paused = true)]
async fn close_writes_everything_then_ends_ok() {
    let fake = Fake::default();
    let (h, task) = Writer::builder(
        fake.client(true),
        Arc::new(fake.clone()),
        KeyAttributes::default(),
    )
    .config(config())
    .start();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..40 {
        submit(
            &h,
            &fake,
            &tx,
            "t",
            item(&format!("k{i}"), "v"),
            &format!("k{i}"),
        )
        .await
        .unwrap();
    }
    let h2 = h.clone();
    h.close();
    task.await.unwrap().unwrap();
    assert_eq!(drain(&mut rx).len(), 40);
    assert!(matches!(
        submit(&h2, &fake, &tx, "t", item("late", "v"), "late").await,
        Err(WriterError::Closed)
    ));
    // On-demand table: rate starts at the configured initial rate.
    let rate = h2.stats().rate_wcu["t"];
    assert!((4_000.0..4_100.0).contains(&rate), "{rate}");
}

/// A group larger than the in-flight bound is cut into groups that fit (no
/// wait for permits that can never come), runs of one table travel together,
/// an oversized item in the middle is rejected alone, and every permit comes
/// back (a second full group is accepted afterwards).
#[tokio::test(start_paused = true)]
async fn submit_all_cuts_groups_to_the_bounds_and_returns_every_permit() {
    let fake = Fake::default();
    let cfg = WriterConfig {
        max_in_flight_items: 10,
        linger: Duration::from_millis(5),
        ..WriterConfig::default()
    };
    let (h, task) = start(&fake, cfg);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut subs = Vec::new();
    for i in 0..30 {
        let table = if i < 20 { "a" } else { "b" };
        subs.push(submission(
            &fake,
            &tx,
            table,
            item(&format!("k{i}"), "v"),
            &format!("k{i}"),
        ));
        if i == 12 {
            let big = item("big", &"x".repeat(400 * 1024));
            subs.push(submission(&fake, &tx, "a", big, "big"));
        }
    }
    tokio::time::timeout(Duration::from_secs(60), h.submit_all(subs))
        .await
        .expect("a group over the bound must not wait forever")
        .unwrap();
    h.flush().await;
    let got = drain(&mut rx);
    assert_eq!(got.len(), 31);
    assert!(matches!(
        got["big"].as_slice(),
        [WriteOutcome::Rejected {
            reason: Reason::ItemTooLarge,
            ..
        }]
    ));
    assert_eq!(
        got.values()
            .filter(|o| o.as_slice() == [WriteOutcome::Stored])
            .count(),
        30
    );
    let stored_a = fake
        .calls()
        .iter()
        .filter(|c| c.0 == "a")
        .map(|c| c.1.len())
        .sum::<usize>();
    assert_eq!(stored_a, 20);
    let again: Vec<Submission> = (0..10)
        .map(|i| {
            submission(
                &fake,
                &tx,
                "a",
                item(&format!("n{i}"), "v"),
                &format!("n{i}"),
            )
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(60), h.submit_all(again))
        .await
        .expect("every permit of the first groups was returned")
        .unwrap();
    h.flush().await;
    assert_eq!(drain(&mut rx).len(), 10);
    h.close();
    task.await.unwrap().unwrap();
}

/// Records each report a shared target gets.
#[derive(Default)]
struct Reports(std::sync::Mutex<Vec<(Vec<u64>, WriteOutcome)>>);

impl Complete for Reports {
    fn complete(&self, tags: &[u64], outcome: &WriteOutcome) {
        self.0
            .lock()
            .unwrap()
            .push((tags.to_vec(), outcome.clone()));
    }
}

/// Submissions sharing a completion target are reported once per written
/// call, in submission order, each tag exactly once; a second target's
/// items in the same call get their own report.
#[tokio::test(start_paused = true)]
async fn a_shared_target_hears_once_per_call() {
    let fake = Fake::default();
    let (h, task) = start(&fake, config());
    let (first, second) = (Arc::new(Reports::default()), Arc::new(Reports::default()));
    let subs: Vec<Submission> = (0..60u64)
        .map(|i| {
            // Items 20..25 go to the second target: the first call holds
            // both targets' items.
            let (target, tag): (Arc<dyn Complete>, u64) = if (20..25).contains(&i) {
                (second.clone(), i - 20)
            } else {
                (first.clone(), i)
            };
            Submission {
                table: "t".into(),
                key: ItemKey::new(&format!("k{i}"), "s"),
                item: WireItem::encode(&item(&format!("k{i}"), "v")),
                done: Completion::new(target, tag),
            }
        })
        .collect();
    h.submit_all(subs).await.unwrap();
    h.flush().await;
    assert_eq!(fake.calls().len(), 3, "25 + 25 + 10");
    let first = first.0.lock().unwrap().clone();
    let second = second.0.lock().unwrap().clone();
    // The first call is 0..20 (first), 20..25 (second): two reports for
    // the first target would mean a report per item or per run.
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(second, vec![((0..5).collect(), WriteOutcome::Stored)]);
    let mut tags: Vec<u64> = Vec::new();
    for (t, o) in &first {
        assert_eq!(o, &WriteOutcome::Stored);
        assert!(t.windows(2).all(|w| w[0] < w[1]), "in order: {t:?}");
        tags.extend(t);
    }
    tags.sort_unstable();
    let want: Vec<u64> = (0..20).chain(25..60).collect();
    assert_eq!(tags, want);
    h.close();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_brownout_holds_new_calls_instead_of_piling_on() {
    // Every call hangs past the call timeout for 60 s, then DynamoDB answers
    // again. The endpoint governor opens its breaker: far fewer calls than a
    // retry per timeout per concurrent call, and everything is stored after.
    let fake = Fake::default();
    let cfg = WriterConfig {
        linger: Duration::from_millis(5),
        ..WriterConfig::default()
    };
    let timeout = cfg.call_timeout;
    let (h, task) = start(&fake, cfg);
    let (tx, mut rx) = mpsc::unbounded_channel();
    fake.0.lock().unwrap().hang_all = true;
    let brown_start = tokio::time::Instant::now();
    // New work keeps arriving through the brownout.
    let feeder = feed(&h, &fake, &tx, 600);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let hung = fake.calls().len();
    eprintln!("brownout: {hung} calls in 60 s");
    fake.0.lock().unwrap().hang_all = false;
    feeder.await.unwrap();
    h.flush().await;
    let out = drain(&mut rx);
    assert_eq!(out.len(), 600, "every submission completed");
    assert!(out.values().all(|v| v == &vec![WriteOutcome::Stored]));
    // Without a governor the writer's 16 concurrent calls would each be
    // resent after every timeout: 16 x 60 s / timeout.
    let ungoverned = 16 * (60 / timeout.as_secs().max(1)) as usize;
    assert!(
        hung * 4 <= ungoverned,
        "{hung} calls during the brownout (ungoverned about {ungoverned}); {:?}",
        brown_start.elapsed()
    );
    h.close();
    task.await.unwrap().unwrap();
}

/// After a brownout, writing flows again within about one breaker open
/// period and then without a stall. Calls sent just before the recovery
/// hang until their timeout, which falls after it: such a late timeout must
/// neither reopen the breaker nor hold the table for a retry back-off (up to
/// 20 s after a brownout) while DynamoDB answers every other call. Run with
/// several seeds of the jitter, each deterministic.
#[tokio::test(start_paused = true)]
async fn after_a_brownout_writing_resumes_within_an_open_period_and_does_not_stall() {
    let open_max = tidemark_governor::Params::default().open_max;
    let mut results = Vec::new();
    for seed in 1..=8 {
        fastrand::seed(seed);
        results.push(brownout_then_recovery().await);
    }
    eprintln!("backlog stored after the recovery, longest stall after it: {results:?}");
    for (backlog, stall) in results {
        assert!(
            backlog <= open_max + Duration::from_secs(2),
            "the backlog took {backlog:?} after the recovery (open period at most {open_max:?})"
        );
        assert!(
            stall <= Duration::from_secs(1),
            "writing stalled for {stall:?} after the recovery"
        );
    }
}

/// Ten submissions a second through 60 s of brownout (every call hangs)
/// and 30 s after it. Returns when the brownout's backlog was stored after
/// the recovery, and the longest time without a completion after that.
async fn brownout_then_recovery() -> (Duration, Duration) {
    let fake = Fake::default();
    let cfg = WriterConfig {
        linger: Duration::from_millis(5),
        ..WriterConfig::default()
    };
    let (h, task) = start(&fake, cfg);
    let (tx, mut rx) = mpsc::unbounded_channel();
    fake.0.lock().unwrap().hang_all = true;
    let feeder = feed(&h, &fake, &tx, 900);
    tokio::time::sleep(Duration::from_secs(60)).await;
    fake.0.lock().unwrap().hang_all = false;
    let recovered = tokio::time::Instant::now();
    // Completions sampled every 100 ms (simulated time).
    let mut out = HashMap::new();
    let mut backlog_done = None;
    let mut last_progress = recovered;
    let mut longest_stall = Duration::ZERO;
    while recovered.elapsed() < Duration::from_secs(29) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = out.len();
        out.extend(drain(&mut rx));
        let now = tokio::time::Instant::now();
        if out.len() > before {
            last_progress = now;
        }
        if backlog_done.is_none() && out.len() >= 600 {
            backlog_done = Some(recovered.elapsed());
        }
        if backlog_done.is_some() {
            longest_stall = longest_stall.max(now - last_progress);
        }
    }
    feeder.await.unwrap();
    h.flush().await;
    out.extend(drain(&mut rx));
    assert_eq!(out.len(), 900, "every submission completed");
    assert!(out.values().all(|v| v == &vec![WriteOutcome::Stored]));
    h.close();
    task.await.unwrap().unwrap();
    (backlog_done.unwrap_or(Duration::MAX), longest_stall)
}

/// Submits `n` items (`k0`, `k1`, ...) to table `t`, one every 100 ms.
fn feed(
    h: &WriterHandle,
    fake: &Fake,
    tx: &mpsc::UnboundedSender<(String, WriteOutcome)>,
    n: usize,
) -> tokio::task::JoinHandle<()> {
    let (h, fake, tx) = (h.clone(), fake.clone(), tx.clone());
    tokio::spawn(async move {
        for i in 0..n {
            let k = format!("k{i}");
            submit(&h, &fake, &tx, "t", item(&k, "v"), &k)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// One hot partition key (its items always come back unprocessed) among
/// cold ones sent in the same calls: with per-key pacing the cold items are
/// stored round after round while the hot key waits on its own; with the
/// table-wide control alone, the hot key's throttles hold the whole table.
/// Either way the hot key's submissions are stored once it cools, each
/// acknowledged exactly once.
#[tokio::test(start_paused = true)]
async fn a_hot_key_does_not_hold_back_the_other_keys() {
    for key_pacing in [true, false] {
        let fake = Fake::default();
        fake.0.lock().unwrap().hot.push("hot".into());
        let cfg = WriterConfig {
            linger: Duration::from_millis(5),
            key_pacing,
            ..WriterConfig::default()
        };
        let (h, task) = start(&fake, cfg);
        let (tx, mut rx) = mpsc::unbounded_channel();
        for r in 0..20 {
            for i in 0..24 {
                let pk = format!("c{r}-{i}");
                submit(&h, &fake, &tx, "t", item(&pk, "v"), &pk)
                    .await
                    .unwrap();
            }
            let tag = format!("hot{r}");
            submit(&h, &fake, &tx, "t", item("hot", &tag), &tag)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let got = drain(&mut rx);
        let cold_done = (0..20)
            .flat_map(|r| (0..24).map(move |i| format!("c{r}-{i}")))
            .filter(|t| got.get(t) == Some(&vec![WriteOutcome::Stored]))
            .count();
        assert!(
            !got.keys().any(|t| t.starts_with("hot")),
            "hot stored early"
        );
        if key_pacing {
            assert_eq!(cold_done, 480, "cold keys waited behind the hot one");
        } else {
            assert!(
                cold_done < 480,
                "the table-wide control no longer holds cold keys back: this test shows nothing"
            );
        }
        fake.0.lock().unwrap().hot.clear();
        h.flush().await;
        let mut got2 = got;
        for (t, o) in drain(&mut rx) {
            got2.entry(t).or_default().extend(o);
        }
        for r in 0..20 {
            assert_eq!(got2[&format!("hot{r}")], vec![WriteOutcome::Stored]);
        }
        assert_eq!(got2.len(), 500);
        assert!(got2.values().all(|o| o == &vec![WriteOutcome::Stored]));
        h.close();
        task.await.unwrap().unwrap();
    }
}
