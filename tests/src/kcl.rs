//! KCL lease-table fixtures (`tests/fixtures/kcl`, see its README.md) on
//! the local stack, and the KCL's format rules as a checker.
//!
//! - [`Fixture::load`] creates a 4-shard stream with 100 records per shard
//!   and the fixture's tables (as `states.json` shapes them), fills the
//!   placeholders (sequence numbers, stream name and identifier) and puts
//!   every item: a KCL application's table as the KCL left it, checkpoints
//!   at the 50th record of each shard.
//! - [`Loaded::compare_after_run`] checks a table after Tidemark ran on it:
//!   every non-lease item unchanged attribute by attribute, the attributes
//!   Tidemark does not own kept on every lease, and every item still
//!   readable by the KCL ([`kcl_format_problems`]).
//! - [`kcl_format_problems`]: the KCL serializers' rules (attribute names
//!   and types from `catalogue.json`, the attributes a lease cannot do
//!   without, the values a checkpoint can take). Without a JVM in CI these
//!   rules stand in for running the KCL's own deserializer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, ScalarAttributeType, TableStatus,
};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use serde_json::Value;

use crate::{LocalStack, unique_name, wait_until};

/// One DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// The shards of every fixture's stream.
pub const SHARDS: usize = 4;
/// Records put per shard.
pub const RECORDS_PER_SHARD: usize = 100;
/// Every fixture checkpoint is at this record (1-based) of its shard.
pub const CHECKPOINT_AT: usize = 50;

/// The attributes of a lease Tidemark never writes: they must survive a
/// run unchanged.
pub const KEPT_LEASE_ATTRIBUTES: [&str; 7] = [
    "entityType",
    "throughputKBps",
    "startingHashKey",
    "endingHashKey",
    "parentShardId",
    "streamName",
    "shardId",
];

fn dir() -> PathBuf {
    crate::repo_root().join("tests/fixtures/kcl")
}

fn json(file: &str) -> Value {
    let path = dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// One fixture of `states.json`.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Its name in `states.json`.
    pub name: String,
    /// `allow` or `refuse`.
    pub takeover: String,
    /// The KCL step a refusal names.
    pub kcl_step: Option<String>,
    /// Its `states.json` entry.
    pub state: Value,
}

impl Fixture {
    /// The fixture `name`.
    pub fn get(name: &str) -> Fixture {
        let states = json("states.json");
        let state = states
            .get(name)
            .unwrap_or_else(|| panic!("no fixture {name} in states.json"))
            .clone();
        Fixture {
            name: name.to_string(),
            takeover: state["takeover"].as_str().unwrap_or_default().to_string(),
            kcl_step: state["kcl_step"].as_str().map(str::to_string),
            state,
        }
    }

    /// The table roles of this fixture (`lease`, `coordinator_state`,
    /// `worker_metric_stats`).
    pub fn roles(&self) -> Vec<String> {
        self.state["tables"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The items of table `role` with the placeholders filled by made-up
    /// values (sequence numbers `4960<shard><n>`, stream `orders`), for
    /// tests without the stack.
    pub fn items_offline(&self, role: &str) -> Vec<Item> {
        let seqs: BTreeMap<String, Vec<String>> = (0..SHARDS)
            .map(|s| {
                let shard = format!("shardId-{s:012}");
                let seqs = (1..=RECORDS_PER_SHARD)
                    .map(|n| format!("4960{s:02}{n:050}"))
                    .collect();
                (shard, seqs)
            })
            .collect();
        let file = self.state["tables"][role]["file"]
            .as_str()
            .expect("a table file");
        let text = std::fs::read_to_string(dir().join(file)).expect("fixture file");
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let line = fill(l, &seqs, "orders", "000000000000:orders:1764000000", "app");
                decode_item(&line).expect("DynamoDB JSON")
            })
            .collect()
    }

    /// Every fixture's name.
    pub fn names() -> Vec<String> {
        json("states.json")
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Creates the stream and the tables, writes the records and the
    /// items. The lease table is named `lease_table` (the 3.0-3.4 tables
    /// `<lease_table>-CoordinatorState` and `-WorkerMetricStats`, as the
    /// KCL names them).
    pub async fn load(&self, stack: &LocalStack) -> Loaded {
        let lease_table = unique_name("kcl-app");
        let stream = unique_name("kcl-stream");
        let kinesis = stack.kinesis();
        // The local stack's shard limit is shared with every other test:
        // wait for room rather than fail.
        wait_until("room for 4 shards", Duration::from_secs(120), || async {
            match kinesis
                .create_stream()
                .stream_name(&stream)
                .shard_count(SHARDS as i32)
                .send()
                .await
            {
                Ok(_) => Some(()),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_limit_exceeded_exception()) =>
                {
                    None
                }
                Err(e) => panic!("CreateStream {stream}: {e:?}"),
            }
        })
        .await;
        crate::wait_stream_active(&kinesis, &stream).await;
        let seqs = put_per_shard(&kinesis, &stream).await;
        let summary = kinesis
            .describe_stream_summary()
            .stream_name(&stream)
            .send()
            .await
            .expect("DescribeStreamSummary");
        let s = summary.stream_description_summary().expect("a summary");
        let account = s.stream_arn().split(':').nth(4).unwrap_or("000000000000");
        let stream_id = format!(
            "{account}:{stream}:{}",
            s.stream_creation_timestamp().secs()
        );
        let ddb = stack.dynamodb();
        let fill = |text: &str| fill(text, &seqs, &stream, &stream_id, &lease_table);
        let mut tables = BTreeMap::new();
        for role in self.roles() {
            let t = &self.state["tables"][&role];
            let schema = &t["schema"];
            let name = fill(schema["TableName"].as_str().expect("TableName"));
            create_table(&ddb, &name, schema).await;
            let file = t["file"].as_str().expect("file");
            let text = std::fs::read_to_string(dir().join(file)).expect("fixture file");
            let mut items = Vec::new();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let item = decode_item(&fill(line)).unwrap_or_else(|e| panic!("{file}: {e}"));
                ddb.put_item()
                    .table_name(&name)
                    .set_item(Some(item.clone()))
                    .send()
                    .await
                    .expect("PutItem");
                items.push(item);
            }
            let strings = |v: &Value| -> Vec<String> {
                v.as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).map(&fill).collect())
                    .unwrap_or_default()
            };
            let not_leases = t["not_leases"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (fill(k), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            tables.insert(
                role.clone(),
                LoadedTable {
                    name,
                    hash_key: schema["KeySchema"][0]["AttributeName"]
                        .as_str()
                        .expect("a hash key")
                        .to_string(),
                    items,
                    leases: strings(&t["leases"]),
                    not_leases,
                    in_handoff: strings(&t["in_handoff"]),
                },
            );
        }
        Loaded {
            fixture: self.clone(),
            stream,
            stream_id,
            lease_table,
            seqs,
            tables,
        }
    }
}

/// One table of a loaded fixture.
#[derive(Debug, Clone)]
pub struct LoadedTable {
    /// Its name.
    pub name: String,
    /// Its hash key attribute.
    pub hash_key: String,
    /// The items as written.
    pub items: Vec<Item>,
    /// The keys of its leases.
    pub leases: Vec<String>,
    /// The keys of its other items, with their KCL entity type.
    pub not_leases: BTreeMap<String, String>,
    /// The leases in a graceful hand-off.
    pub in_handoff: Vec<String>,
}

impl LoadedTable {
    /// The item written under `key`.
    pub fn item(&self, key: &str) -> &Item {
        self.items
            .iter()
            .find(|i| i.get(&self.hash_key).and_then(|v| v.as_s().ok()) == Some(&key.to_string()))
            .unwrap_or_else(|| panic!("no item {key} in {}", self.name))
    }
}

/// A fixture on the local stack.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The fixture.
    pub fixture: Fixture,
    /// The stream.
    pub stream: String,
    /// `account:stream:creationEpoch`, as the KCL's multi-stream keys have it.
    pub stream_id: String,
    /// The lease table.
    pub lease_table: String,
    /// Per shard id, the sequence numbers of its records in order.
    pub seqs: BTreeMap<String, Vec<String>>,
    /// The tables by role.
    pub tables: BTreeMap<String, LoadedTable>,
}

impl Loaded {
    /// The lease table as loaded.
    pub fn lease(&self) -> &LoadedTable {
        &self.tables["lease"]
    }

    /// The (shard, sequence number) of every record after the checkpoints.
    pub fn after_checkpoints(&self) -> BTreeSet<(String, String)> {
        self.seqs
            .iter()
            .flat_map(|(shard, seqs)| {
                seqs[CHECKPOINT_AT..]
                    .iter()
                    .map(move |s| (shard.clone(), s.clone()))
            })
            .collect()
    }

    /// The sequence number of the `n`-th record (1-based) of `shard`.
    pub fn seq(&self, shard: &str, n: usize) -> &str {
        &self.seqs[shard][n - 1]
    }

    /// Every item of every table now (consistent Scans), by role and key.
    pub async fn scan(&self, stack: &LocalStack) -> BTreeMap<String, BTreeMap<String, Item>> {
        let ddb = stack.dynamodb();
        let mut out = BTreeMap::new();
        for (role, t) in &self.tables {
            let mut by_key = BTreeMap::new();
            let mut start = None;
            loop {
                let page = ddb
                    .scan()
                    .table_name(&t.name)
                    .consistent_read(true)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .expect("Scan");
                for i in page.items() {
                    let key = i[&t.hash_key].as_s().expect("a string key").clone();
                    by_key.insert(key, i.clone());
                }
                start = page.last_evaluated_key().cloned();
                if start.is_none() {
                    break;
                }
            }
            out.insert(role.clone(), by_key);
        }
        out
    }

    /// Deletes the stream (the local stack's shard limit is shared by every
    /// test); the tables are left, as other tests leave theirs.
    pub async fn delete_stream(&self, stack: &LocalStack) {
        let _ = stack
            .kinesis()
            .delete_stream()
            .stream_name(&self.stream)
            .enforce_consumer_deletion(true)
            .send()
            .await;
    }

    /// Asserts that nothing was written: every table holds exactly its
    /// items as loaded.
    pub async fn assert_untouched(&self, stack: &LocalStack) {
        let now = self.scan(stack).await;
        for (role, t) in &self.tables {
            let want: BTreeMap<String, Item> = t
                .items
                .iter()
                .map(|i| (i[&t.hash_key].as_s().expect("key").clone(), i.clone()))
                .collect();
            assert_eq!(
                now[role], want,
                "{}: table {role} changed",
                self.fixture.name
            );
        }
    }

    /// After a run that checkpointed every lease: every non-lease item is
    /// unchanged attribute by attribute, every other table untouched, every
    /// lease kept the attributes Tidemark does not own and lost
    /// `checkpointOwner` and any prepared checkpoint, and every item is
    /// still readable by the KCL. Returns the lease table as scanned.
    pub async fn compare_after_run(&self, stack: &LocalStack) -> BTreeMap<String, Item> {
        let now = self.scan(stack).await;
        let name = &self.fixture.name;
        for (role, t) in &self.tables {
            let found = &now[role];
            for (key, entity) in &t.not_leases {
                let was = t.item(key);
                let is = found
                    .get(key)
                    .unwrap_or_else(|| panic!("{name}: {role} item {key} ({entity}) deleted"));
                assert_eq!(
                    attribute_diff(was, is),
                    Vec::<String>::new(),
                    "{name}: {role} item {key} ({entity}) changed"
                );
            }
            if role != "lease" {
                assert_eq!(
                    found.len(),
                    t.items.len(),
                    "{name}: items added to or removed from {role}"
                );
            }
            let problems = kcl_format_problems(role, &found.values().cloned().collect::<Vec<_>>());
            assert!(
                problems.is_empty(),
                "{name}: the KCL would not read {role}: {problems:#?}"
            );
        }
        let lease = self.lease();
        let found = &now["lease"];
        for key in &lease.leases {
            let was = lease.item(key);
            let is = found
                .get(key)
                .unwrap_or_else(|| panic!("{name}: lease {key} deleted"));
            for a in KEPT_LEASE_ATTRIBUTES {
                assert_eq!(was.get(a), is.get(a), "{name}: lease {key} changed {a}");
            }
            assert!(
                !is.contains_key("checkpointOwner"),
                "{name}: lease {key} still in a hand-off after Tidemark took it: {is:?}"
            );
            for a in [
                "pendingCheckpoint",
                "pendingCheckpointSubSequenceNumber",
                "pendingCheckpointState",
            ] {
                assert!(
                    !is.contains_key(a),
                    "{name}: lease {key} kept {a} past Tidemark's checkpoint: {is:?}"
                );
            }
        }
        found.clone()
    }
}

/// The attributes that differ between two items, named.
pub fn attribute_diff(was: &Item, is: &Item) -> Vec<String> {
    let names: BTreeSet<&String> = was.keys().chain(is.keys()).collect();
    names
        .into_iter()
        .filter(|n| was.get(*n) != is.get(*n))
        .map(|n| format!("{n}: {:?} -> {:?}", was.get(n), is.get(n)))
        .collect()
}

/// 100 records per shard (explicit hash keys at each shard's start), in
/// order; the sequence numbers per shard.
async fn put_per_shard(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for shard in 0..SHARDS {
        let hash = (u128::from(shard as u32) << 126).to_string();
        let entries: Vec<PutRecordsRequestEntry> = (1..=RECORDS_PER_SHARD)
            .map(|n| {
                let body = format!("{{\"pk\":\"s{shard}\",\"n\":{n}}}");
                PutRecordsRequestEntry::builder()
                    .partition_key(format!("s{shard}"))
                    .explicit_hash_key(&hash)
                    .data(Blob::new(body))
                    .build()
                    .expect("partition key and data are set")
            })
            .collect();
        let res = kinesis
            .put_records()
            .stream_name(stream)
            .set_records(Some(entries))
            .send()
            .await
            .expect("PutRecords");
        assert_eq!(res.failed_record_count(), Some(0));
        for r in res.records() {
            out.entry(r.shard_id().expect("shard").to_string())
                .or_default()
                .push(r.sequence_number().expect("sequence").to_string());
        }
    }
    assert_eq!(out.len(), SHARDS, "one shard per hash key");
    assert!(out.values().all(|v| v.len() == RECORDS_PER_SHARD));
    out
}

/// Replaces the placeholders of a fixture line (README.md, "Placeholders").
fn fill(
    text: &str,
    seqs: &BTreeMap<String, Vec<String>>,
    stream: &str,
    stream_id: &str,
    lease_table: &str,
) -> String {
    let mut out = text
        .replace("{{STREAM_ID}}", stream_id)
        .replace("{{STREAM}}", stream)
        .replace("{{LEASE_TABLE}}", lease_table);
    while let Some(start) = out.find("{{SEQ:") {
        let len = out[start..].find("}}").expect("a closed placeholder");
        let inner = &out[start + 6..start + len];
        let (shard, n) = inner.rsplit_once(':').expect("SEQ:<shard>:<n>");
        let n: usize = n.parse().expect("a record number");
        let seq = seqs[shard][n - 1].clone();
        out.replace_range(start..start + len + 2, &seq);
    }
    out
}

/// Creates a table from its `CreateTable` shape in `states.json`.
async fn create_table(ddb: &aws_sdk_dynamodb::Client, name: &str, schema: &Value) {
    let key = |k: &Value| {
        KeySchemaElement::builder()
            .attribute_name(k["AttributeName"].as_str().expect("name"))
            .key_type(KeyType::from(k["KeyType"].as_str().expect("type")))
            .build()
            .expect("key")
    };
    let mut req = ddb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest);
    for k in schema["KeySchema"].as_array().expect("KeySchema") {
        req = req.key_schema(key(k));
    }
    for a in schema["AttributeDefinitions"]
        .as_array()
        .expect("definitions")
    {
        req = req.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(a["AttributeName"].as_str().expect("name"))
                .attribute_type(ScalarAttributeType::from(
                    a["AttributeType"].as_str().expect("type"),
                ))
                .build()
                .expect("definition"),
        );
    }
    for g in schema["GlobalSecondaryIndexes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut index = GlobalSecondaryIndex::builder()
            .index_name(g["IndexName"].as_str().expect("index name"))
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::KeysOnly)
                    .build(),
            );
        for k in g["KeySchema"].as_array().expect("index keys") {
            index = index.key_schema(key(k));
        }
        req = req.global_secondary_indexes(index.build().expect("index"));
    }
    req.send()
        .await
        .unwrap_or_else(|e| panic!("CreateTable {name}: {e:?}"));
    wait_until("table ACTIVE", Duration::from_secs(30), || async {
        let d = ddb.describe_table().table_name(name).send().await.ok()?;
        (d.table()?.table_status() == Some(&TableStatus::Active)).then_some(())
    })
    .await;
}

/// The KCL's entity types (`leases/EntityType.java`) other than `LEASE`.
const ENTITIES: [&str; 5] = [
    "STREAM",
    "LEADER",
    "CLIENT_VERSION_MIGRATION",
    "TABLE_MIGRATION",
    "WORKER_METRIC_STATS",
];

/// Keys the KCL types by name when `entityType` is absent
/// (`CoordinatorStateDAODelegate.resolveEntityType`).
const LEGACY_KEYS: [(&str, &str); 3] = [
    ("Leader", "LEADER"),
    ("Migration3.0", "CLIENT_VERSION_MIGRATION"),
    ("TableMigration3.5", "TABLE_MIGRATION"),
];

/// Lease attributes every KCL reads with `new Long(av.n())` or requires
/// (`Lease.leaseCounter(@NonNull Long)` in 2.x).
const LEASE_LONGS: [&str; 3] = [
    "leaseCounter",
    "checkpointSubSequenceNumber",
    "ownerSwitchesSinceCheckpoint",
];

fn type_of(v: &AttributeValue) -> &'static str {
    match v {
        AttributeValue::S(_) => "S",
        AttributeValue::N(_) => "N",
        AttributeValue::B(_) => "B",
        AttributeValue::Ss(_) => "SS",
        AttributeValue::Ns(_) => "NS",
        AttributeValue::Bs(_) => "BS",
        AttributeValue::M(_) => "M",
        AttributeValue::L(_) => "L",
        AttributeValue::Bool(_) => "BOOL",
        AttributeValue::Null(_) => "NULL",
        _ => "?",
    }
}

fn is_sequence(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A key a KCL lease can have: a shard id, or `account:stream:epoch:shard`.
fn is_lease_key(key: &str) -> bool {
    let shard = match key.rsplit_once(':') {
        None => key,
        Some((stream, shard)) => {
            let parts: Vec<&str> = stream.split(':').collect();
            if parts.len() != 3
                || !is_sequence(parts[0])
                || parts[1].is_empty()
                || !is_sequence(parts[2])
            {
                return false;
            }
            shard
        }
    };
    shard.starts_with("shardId-")
}

/// What the KCL (2.x to 3.5.1) would refuse or misread in `items` of a
/// table of role `role` (`lease`, `coordinator_state`,
/// `worker_metric_stats`); empty when it reads every item as it should.
///
/// Lease table: an item whose `entityType` is absent or `LEASE` is a lease
/// (`DynamoDBLeaseSerializer.fromDynamoRecord`), so it must have a shard's
/// key, the numeric attributes every KCL requires, a checkpoint value the
/// KCL knows, no prepared checkpoint behind its checkpoint, and a
/// hand-off only with both owners; any other `entityType` must be one the
/// KCL knows. Every attribute of every item must be one the KCL writes
/// for its entity type, with that type (`catalogue.json`).
pub fn kcl_format_problems(role: &str, items: &[Item]) -> Vec<String> {
    let catalogue = json("catalogue.json");
    let entities = &catalogue["entities"];
    let pk = match role {
        "lease" => "leaseKey",
        "coordinator_state" => "key",
        "worker_metric_stats" => "wid",
        other => panic!("no table role {other}"),
    };
    let mut out = Vec::new();
    for item in items {
        let Some(key) = item.get(pk).and_then(|v| v.as_s().ok()) else {
            out.push(format!("an item without a string {pk}: {item:?}"));
            continue;
        };
        let entity = match (role, item.get("entityType")) {
            (_, Some(AttributeValue::S(e))) if e == "LEASE" && role == "lease" => "LEASE",
            (_, Some(AttributeValue::S(e))) if ENTITIES.contains(&e.as_str()) => ENTITIES
                .iter()
                .find(|x| **x == e)
                .copied()
                .unwrap_or_default(),
            (_, Some(other)) => {
                out.push(format!(
                    "{key}: entityType {other:?} is not one the KCL knows"
                ));
                continue;
            }
            ("lease", None) => "LEASE",
            ("worker_metric_stats", None) => "WORKER_METRIC_STATS",
            (_, None) => match LEGACY_KEYS.iter().find(|(k, _)| *k == key) {
                Some((_, e)) => e,
                None => {
                    out.push(format!("{key}: no entityType and not a key the KCL types"));
                    continue;
                }
            },
        };
        let spec = &entities[entity];
        for (name, value) in item {
            let want = if name == pk && entity != "LEASE" {
                &spec["PK"]["type"]
            } else {
                &spec[name.as_str()]["type"]
            };
            match want.as_str() {
                None => out.push(format!(
                    "{key} ({entity}): attribute {name} is not one the KCL writes"
                )),
                Some(t) if t != type_of(value) => out.push(format!(
                    "{key} ({entity}): {name} is {} where the KCL writes {t}",
                    type_of(value)
                )),
                Some(_) => {}
            }
        }
        if entity == "LEASE" {
            out.extend(lease_problems(key, item));
        }
    }
    out
}

fn lease_problems(key: &str, item: &Item) -> Vec<String> {
    let mut out = Vec::new();
    if !is_lease_key(key) {
        out.push(format!(
            "{key}: read as a lease, but not a shard's lease key"
        ));
    }
    for a in LEASE_LONGS {
        match item.get(a).and_then(|v| v.as_n().ok()) {
            Some(n) if n.parse::<i64>().is_ok() => {}
            _ => out.push(format!("{key}: {a} missing or not a whole number")),
        }
    }
    if let Some(n) = item.get("throughputKBps").and_then(|v| v.as_n().ok())
        && n.parse::<f64>().is_err()
    {
        out.push(format!("{key}: throughputKBps {n} is not a number"));
    }
    let checkpoint = item.get("checkpoint").and_then(|v| v.as_s().ok());
    match checkpoint.map(String::as_str) {
        Some("TRIM_HORIZON" | "LATEST" | "AT_TIMESTAMP" | "SHARD_END") => {}
        Some(s) if is_sequence(s) => {}
        other => out.push(format!(
            "{key}: checkpoint {other:?} is not one the KCL reads"
        )),
    }
    if let Some(p) = item.get("pendingCheckpoint").and_then(|v| v.as_s().ok()) {
        let behind = match checkpoint {
            Some(c) if is_sequence(c) && is_sequence(p) => {
                (p.len(), p.as_str()) <= (c.len(), c.as_str())
            }
            Some(c) => c == "SHARD_END",
            None => false,
        };
        if behind {
            out.push(format!(
                "{key}: a prepared checkpoint {p} at or behind the checkpoint"
            ));
        }
    }
    if item.contains_key("checkpointOwner") && !item.contains_key("leaseOwner") {
        out.push(format!("{key}: checkpointOwner without a leaseOwner"));
    }
    out
}

/// One item of DynamoDB JSON (a fixture line).
fn decode_item(line: &str) -> Result<Item, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    tidemark_schema::wire::decode_map(&v).map_err(|e| e.0)
}
