//! Thirty simulated days of hourly tables (7-day retention): the writer
//! and table maintenance run against a fake DynamoDB in simulated time,
//! writing every minute to the current hour's table and now and then to a
//! table three days old (late data). The control-plane calls per day must
//! stay flat once retention is reached, and the writer's live table tasks
//! bounded: a worker's DescribeTable rate must not grow with its uptime.

// Test code: a panic in a helper is a failed assertion.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::create_table::CreateTableOutput;
use aws_sdk_dynamodb::operation::delete_table::DeleteTableOutput;
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use aws_sdk_dynamodb::operation::list_tags_of_resource::ListTagsOfResourceOutput;
use aws_sdk_dynamodb::operation::tag_resource::TagResourceOutput;
use aws_sdk_dynamodb::operation::update_table::UpdateTableOutput;
use aws_sdk_dynamodb::types::error::ResourceNotFoundException;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, BillingModeSummary, KeySchemaElement,
    KeyType, ProvisionedThroughputDescription, ScalarAttributeType, TableDescription, TableStatus,
    Tag,
};
use aws_smithy_mocks::{MockResponse, RuleMode, mock, mock_client};
use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use futures::future::BoxFuture;
use tidemark_schema::period::{Billing, CapacityTiers, Period};
use tidemark_schema::route::RouterConfig;
use tidemark_schema::{Item, ItemKey, KeyAttributes, WireItem};
use tidemark_worker::config::ExpiryAction;
use tidemark_worker::maintenance::{CreateMissingTables, RoundKind, TableManager, TablePolicy};
use tidemark_writer::{
    Completion, RawResponse, Submission, Transport, TransportError, Writer, WriterConfig,
};

/// One table of the fake.
#[derive(Debug, Clone)]
struct Table {
    /// Provisioned (read, write); `None`: on demand.
    capacity: Option<(i64, i64)>,
    tags: BTreeMap<String, String>,
}

/// The fake DynamoDB: its tables, and the control-plane calls per
/// operation since the last [`Fake::take_calls`].
#[derive(Default)]
struct State {
    tables: BTreeMap<String, Table>,
    calls: BTreeMap<&'static str, u64>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<State>>);

fn arn(name: &str) -> String {
    format!("arn:aws:dynamodb:us-east-1:111122223333:table/{name}")
}

fn description(name: &str, t: &Table) -> TableDescription {
    let key = |n: &str, k| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(k)
            .build()
            .unwrap()
    };
    let attr = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    let mut d = TableDescription::builder()
        .table_name(name)
        .table_arn(arn(name))
        .table_status(TableStatus::Active)
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .attribute_definitions(attr("pk"))
        .attribute_definitions(attr("sk"));
    d = match t.capacity {
        Some((read, write)) => d.provisioned_throughput(
            ProvisionedThroughputDescription::builder()
                .read_capacity_units(read)
                .write_capacity_units(write)
                .build(),
        ),
        None => d.billing_mode_summary(
            BillingModeSummary::builder()
                .billing_mode(BillingMode::PayPerRequest)
                .build(),
        ),
    };
    d.build()
}

impl Fake {
    fn count(&self, op: &'static str) {
        *self.0.lock().unwrap().calls.entry(op).or_default() += 1;
    }

    fn take_calls(&self) -> BTreeMap<&'static str, u64> {
        std::mem::take(&mut self.0.lock().unwrap().calls)
    }

    fn tables(&self) -> usize {
        self.0.lock().unwrap().tables.len()
    }

    /// A client on the fake. ListTables answers as raw HTTP carrying a
    /// `Date` (DynamoDB's clock, which maintenance checks before it
    /// deletes); the other calls answer typed outputs.
    fn client(&self) -> Client {
        let f = self.clone();
        let list = mock!(Client::list_tables).then_compute_response(move |_| {
            f.count("ListTables");
            let names: Vec<String> = f.0.lock().unwrap().tables.keys().cloned().collect();
            let body = serde_json::json!({ "TableNames": names }).to_string();
            let mut resp = aws_smithy_runtime_api::http::Response::new(
                aws_smithy_runtime_api::http::StatusCode::try_from(200).unwrap(),
                SdkBody::from(body),
            );
            resp.headers_mut().insert(
                "date",
                Utc::now().format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
            );
            resp.headers_mut()
                .insert("content-type", "application/x-amz-json-1.0");
            MockResponse::Http(resp)
        });
        let f = self.clone();
        let describe = mock!(Client::describe_table).then_compute_response(move |req| {
            f.count("DescribeTable");
            let name = req.table_name().unwrap();
            match f.0.lock().unwrap().tables.get(name) {
                Some(t) => MockResponse::Output(
                    DescribeTableOutput::builder()
                        .table(description(name, t))
                        .build(),
                ),
                None => MockResponse::Error(DescribeTableError::ResourceNotFoundException(
                    ResourceNotFoundException::builder()
                        .message("Requested resource not found")
                        .build(),
                )),
            }
        });
        let f = self.clone();
        let create = mock!(Client::create_table).then_compute_output(move |req| {
            f.count("CreateTable");
            let name = req.table_name().unwrap().to_string();
            let capacity = req
                .provisioned_throughput()
                .map(|p| (p.read_capacity_units(), p.write_capacity_units()));
            let tags = req
                .tags()
                .iter()
                .map(|t| (t.key().to_string(), t.value().to_string()))
                .collect();
            let t = Table { capacity, tags };
            let d = description(&name, &t);
            f.0.lock().unwrap().tables.insert(name, t);
            CreateTableOutput::builder().table_description(d).build()
        });
        let f = self.clone();
        let update = mock!(Client::update_table).then_compute_output(move |req| {
            f.count("UpdateTable");
            let mut g = f.0.lock().unwrap();
            if let (Some(t), Some(p)) = (
                g.tables.get_mut(req.table_name().unwrap()),
                req.provisioned_throughput(),
            ) {
                t.capacity = Some((p.read_capacity_units(), p.write_capacity_units()));
            }
            UpdateTableOutput::builder().build()
        });
        let f = self.clone();
        let delete = mock!(Client::delete_table).then_compute_output(move |req| {
            f.count("DeleteTable");
            f.0.lock().unwrap().tables.remove(req.table_name().unwrap());
            DeleteTableOutput::builder().build()
        });
        let f = self.clone();
        let tags = mock!(Client::list_tags_of_resource).then_compute_output(move |req| {
            f.count("ListTagsOfResource");
            let name = req.resource_arn().unwrap().rsplit('/').next().unwrap();
            let tags: Vec<Tag> =
                f.0.lock()
                    .unwrap()
                    .tables
                    .get(name)
                    .map(|t| {
                        t.tags
                            .iter()
                            .map(|(k, v)| Tag::builder().key(k).value(v).build().unwrap())
                            .collect()
                    })
                    .unwrap_or_default();
            ListTagsOfResourceOutput::builder()
                .set_tags(Some(tags))
                .build()
        });
        let f = self.clone();
        let tag = mock!(Client::tag_resource).then_compute_output(move |req| {
            f.count("TagResource");
            let name = req.resource_arn().unwrap().rsplit('/').next().unwrap();
            if let Some(t) = f.0.lock().unwrap().tables.get_mut(name) {
                for tag in req.tags() {
                    t.tags
                        .insert(tag.key().to_string(), tag.value().to_string());
                }
            }
            TagResourceOutput::builder().build()
        });
        mock_client!(
            aws_sdk_dynamodb,
            RuleMode::MatchAny,
            [&list, &describe, &create, &update, &delete, &tags, &tag]
        )
    }
}

/// BatchWriteItem: stored when the table exists, ResourceNotFound
/// otherwise (the writer then asks its missing-table handler).
impl Transport for Fake {
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
        let req: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let table = req["RequestItems"]
            .as_object()
            .unwrap()
            .keys()
            .next()
            .unwrap()
            .clone();
        let exists = self.0.lock().unwrap().tables.contains_key(&table);
        let answer = if exists {
            RawResponse {
                status: 200,
                body: Bytes::from_static(b"{\"UnprocessedItems\":{}}"),
            }
        } else {
            RawResponse {
                status: 400,
                body: Bytes::from_static(
                    br#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"}"#,
                ),
            }
        };
        Box::pin(async move { Ok(answer) })
    }
}

fn submission(table: &str, n: u64, stored: &Arc<AtomicU64>) -> Submission {
    let (pk, sk) = (format!("device-{}", n % 50), format!("{n:012}"));
    let mut item = Item::new();
    item.insert("pk".into(), AttributeValue::S(pk.clone()));
    item.insert("sk".into(), AttributeValue::S(sk.clone()));
    let stored = stored.clone();
    Submission {
        table: table.into(),
        key: ItemKey::new(&pk, &sk),
        item: WireItem::encode(&item),
        done: Completion::from_fn(move |o| {
            assert_eq!(o, tidemark_writer::WriteOutcome::Stored);
            stored.fetch_add(1, Ordering::Relaxed);
        }),
    }
}

const DAYS: usize = 30;
/// Simulated minutes between writes.
const STEP: usize = 10;
/// Simulated minutes between maintenance rounds (60 s in production: the
/// per-day counts scale, their flatness does not; each round describes
/// every table, and the SDK's debug build is slow).
const ROUND_EVERY: usize = 12 * 60;

#[tokio::test(start_paused = true)]
async fn thirty_days_of_hourly_tables_keep_the_control_plane_rate_flat() {
    let fake = Fake::default();
    let mut router = RouterConfig::with_prefix("events");
    router.period = Period::Hour;
    router.retention = Duration::from_secs(7 * 86_400);
    let policy = TablePolicy::new(
        &router,
        CapacityTiers::default(),
        Billing::Provisioned,
        ExpiryAction::Delete,
    );
    let manager = TableManager::new(fake.client(), policy);
    let (writer, writer_task) = Writer::builder(
        fake.client(),
        Arc::new(fake.clone()),
        KeyAttributes::default(),
    )
    .config(WriterConfig::default())
    .missing_tables(Arc::new(CreateMissingTables::new(manager.clone())))
    .start();
    let naming = tidemark_schema::period::TableNaming {
        prefix: "events".into(),
        period: Period::Hour,
    };
    // Simulated time starts now (the missing-table handler judges on this
    // host's clock), at an hour's start.
    let t0: DateTime<Utc> = {
        let now = Utc::now().timestamp();
        Utc.timestamp_opt(now - now.rem_euclid(3600), 0).unwrap()
    };
    let start = tokio::time::Instant::now();
    let sim_now = || t0 + chrono::Duration::from_std(start.elapsed()).unwrap();
    let stored = Arc::new(AtomicU64::new(0));
    let mut n = 0u64;
    let mut per_day: Vec<BTreeMap<&'static str, u64>> = Vec::new();
    let mut tables_per_day = Vec::new();
    let mut max_live = 0usize;
    for minute in (0..DAYS * 24 * 60).step_by(STEP) {
        let now = sim_now();
        if minute.is_multiple_of(ROUND_EVERY) {
            let applied = manager.round(now, RoundKind::Rotate, false).await.unwrap();
            let failed: Vec<_> = applied.iter().filter(|a| a.error.is_some()).collect();
            assert!(failed.is_empty(), "day {}: {failed:?}", minute / 1440);
        }
        let current = naming.table_for(now.timestamp_millis());
        let mut subs: Vec<Submission> = (0..5)
            .map(|_| {
                n += 1;
                submission(&current, n, &stored)
            })
            .collect();
        // A device flushing an old buffer every six hours: late data for a
        // table three days old.
        if minute % 360 == 10 {
            let late = naming.table_for((now - chrono::Duration::days(3)).timestamp_millis());
            subs.extend((0..20).map(|_| {
                n += 1;
                submission(&late, n, &stored)
            }));
        }
        writer.submit_all(subs).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        max_live = max_live.max(writer.stats().live_tables);
        tokio::time::sleep(Duration::from_secs(60 * STEP as u64 - 1)).await;
        if (minute + STEP).is_multiple_of(1440) {
            per_day.push(fake.take_calls());
            tables_per_day.push(fake.tables());
        }
    }
    writer.flush().await;
    assert_eq!(stored.load(Ordering::Relaxed), n, "every item stored");
    let describes: Vec<u64> = per_day
        .iter()
        .map(|d| d.get("DescribeTable").copied().unwrap_or(0))
        .collect();
    let control: Vec<u64> = per_day.iter().map(|d| d.values().sum()).collect();
    eprintln!("DescribeTable per day: {describes:?}");
    eprintln!("control-plane calls per day: {control:?}");
    eprintln!("tables per day: {tables_per_day:?}; most live table tasks: {max_live}");
    // Retention reached on day 8: from then on, flat.
    let steady = &describes[8..];
    let (lo, hi) = (*steady.iter().min().unwrap(), *steady.iter().max().unwrap());
    assert!(
        hi as f64 <= lo as f64 * 1.05,
        "DescribeTable per day grows with uptime: {describes:?}"
    );
    let steady = &control[8..];
    let (lo, hi) = (*steady.iter().min().unwrap(), *steady.iter().max().unwrap());
    assert!(
        hi as f64 <= lo as f64 * 1.05,
        "control-plane calls per day grow with uptime: {control:?}"
    );
    // The writer polls only what it writes to: the current table, the
    // previous one for its last minutes, and the late one.
    assert!(
        (1..=3).contains(&max_live),
        "{max_live} table tasks at once"
    );
    // Bounded, not only flat: each round describes every table once, the
    // writer a table once a minute at most while it writes to it.
    let rounds = (24 * 60 / ROUND_EVERY) as u64;
    let bound = rounds * (7 * 24 + 2 + ROUND_EVERY / 60) as u64 + 2 * (24 * 60 / STEP) as u64;
    assert!(
        describes[8..].iter().all(|&d| d <= bound),
        "DescribeTable per day above {bound}: {describes:?}"
    );
    // Expired tables go: a week of hourly tables, the next one, and those
    // expired since the last round.
    assert!(
        tables_per_day[8..]
            .iter()
            .all(|&t| t <= 7 * 24 + 2 + ROUND_EVERY / 60),
        "{tables_per_day:?}"
    );
    writer.close();
    writer_task.await.unwrap().unwrap();
}
