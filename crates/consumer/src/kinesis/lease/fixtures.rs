//! The KCL lease-table fixtures (`tests/fixtures/kcl`, made by its
//! `gen.py`) for unit tests: each table's items with the placeholders
//! filled by fixed values, and what `states.json` says of them.

use std::collections::HashMap;
use std::path::PathBuf;

use aws_sdk_dynamodb::types::AttributeValue;

/// The stream name put for `{{STREAM}}`.
pub(crate) const STREAM: &str = "orders";
/// The stream identifier put for `{{STREAM_ID}}`.
pub(crate) const STREAM_ID: &str = "000000000000:orders:1764000000";

/// One table of one fixture.
#[derive(Debug, Clone)]
pub(crate) struct FixtureTable {
    /// Its items, placeholders filled.
    pub(crate) items: Vec<HashMap<String, AttributeValue>>,
    /// The keys of its leases.
    pub(crate) leases: Vec<String>,
    /// The keys of its other items, with their KCL entity type.
    pub(crate) not_leases: HashMap<String, String>,
    /// The leases in a graceful hand-off.
    pub(crate) in_handoff: Vec<String>,
}

/// One fixture: what `states.json` says, and its tables by role (`lease`,
/// `coordinator_state`, `worker_metric_stats`).
#[derive(Debug, Clone)]
pub(crate) struct Fixture {
    pub(crate) name: String,
    /// `allow` or `refuse`.
    pub(crate) takeover: String,
    /// The KCL step a refusal names.
    pub(crate) kcl_step: Option<String>,
    pub(crate) tables: HashMap<String, FixtureTable>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/kcl")
}

/// `{{SEQ:<shard>:<n>}}` as a sequence-number-like string of digits.
fn fill(text: &str) -> String {
    let mut out = text
        .replace("{{STREAM_ID}}", STREAM_ID)
        .replace("{{STREAM}}", STREAM);
    while let Some(start) = out.find("{{SEQ:") {
        let Some(len) = out[start..].find("}}") else {
            break;
        };
        let inner = &out[start + 6..start + len];
        let (shard, n) = inner.rsplit_once(':').unwrap_or((inner, "0"));
        let shard: u64 = shard.trim_start_matches("shardId-").parse().unwrap_or(0);
        let n: u64 = n.parse().unwrap_or(0);
        let seq = format!("4960{shard:02}{n:050}");
        out.replace_range(start..start + len + 2, &seq);
    }
    out
}

/// Every fixture of `states.json`.
pub(crate) fn all() -> Vec<Fixture> {
    let states = std::fs::read_to_string(dir().join("states.json")).expect("states.json");
    let states: serde_json::Value = serde_json::from_str(&states).expect("states.json is JSON");
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|x| x.as_str()).map(fill).collect())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for (name, f) in states.as_object().expect("an object") {
        let mut tables = HashMap::new();
        for (role, t) in f["tables"].as_object().expect("tables") {
            let file = t["file"].as_str().expect("file");
            let text = std::fs::read_to_string(dir().join(file)).expect("fixture file");
            let items = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(&fill(l)).expect("JSON");
                    tidemark_schema::wire::decode_map(&v).expect("DynamoDB JSON")
                })
                .collect();
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
                FixtureTable {
                    items,
                    leases: strings(&t["leases"]),
                    not_leases,
                    in_handoff: strings(&t["in_handoff"]),
                },
            );
        }
        out.push(Fixture {
            name: name.clone(),
            takeover: f["takeover"].as_str().unwrap_or_default().to_string(),
            kcl_step: f["kcl_step"].as_str().map(str::to_string),
            tables,
        });
    }
    assert!(out.len() >= 9, "every fixture of states.json");
    out
}

/// The fixture `name`.
pub(crate) fn get(name: &str) -> Fixture {
    all()
        .into_iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
}
