//! Offline tests of the committed Kinesis fixtures (no AWS, no Python): KPL
//! aggregates made by aws-kinesis-agg round-trip through the de-aggregator,
//! and replay keeps per-shard order and parents before children.

// Test helpers panic on failure like the tests themselves (house rules allow
// unwrap/expect in tests; clippy only exempts #[test] functions).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use tidemark_consumer::Record;
use tidemark_consumer::fixture::{ReplaySource, ReplaySummary, read_fixture};
use tidemark_consumer::kinesis::Position;
use tidemark_consumer::testing::kpl::{self, KplError};
use tidemark_schema::{Origin, Reason};
use tidemark_tests::repo_root;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

#[test]
fn kpl_fixtures_match_the_reference_implementation() {
    let lines = read_fixture(&fixture("kpl_aggregates.jsonl")).unwrap();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("kpl_expected.json")).unwrap())
            .unwrap();
    let corrupt: Vec<&str> = expected["corrupt_sequence_numbers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut got = Vec::new();
    let mut corrupt_seen = Vec::new();
    for l in &lines {
        let data = l.bytes().unwrap();
        match kpl::deaggregate(&data) {
            Ok(Some(users)) => {
                for u in users {
                    got.push(serde_json::json!({
                        "sequence_number": l.sequence_number,
                        "sub_sequence_number": u.sub_sequence_number,
                        "partition_key": u.partition_key,
                        "explicit_hash_key": u.explicit_hash_key,
                        "data": STANDARD.encode(&u.data),
                    }));
                }
            }
            Ok(None) => got.push(serde_json::json!({
                "sequence_number": l.sequence_number,
                "sub_sequence_number": 0,
                "partition_key": l.partition_key,
                "explicit_hash_key": null,
                "data": l.data,
            })),
            Err(e) => {
                assert_eq!(e, KplError::Md5Mismatch);
                corrupt_seen.push(l.sequence_number.clone());
            }
        }
    }
    assert_eq!(corrupt_seen, corrupt);
    let want = expected["user_records"].as_array().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w);
    }
    // Explicit hash keys are in the fixture and come back.
    assert!(got.iter().any(|g| !g["explicit_hash_key"].is_null()));
}

/// Replays a fixture, acknowledging every record, and returns the records
/// in delivery order with the summary.
async fn replay_all(name: &str) -> (Vec<Record>, ReplaySummary) {
    let (tx, mut rx) = mpsc::channel::<Vec<Record>>(2);
    let source = ReplaySource::open(&fixture(name)).unwrap();
    let task = tokio::spawn(source.replay(tx, CancellationToken::new()));
    let mut out = Vec::new();
    while let Some(batch) = rx.recv().await {
        for mut r in batch {
            // Ack now, keep the record (with a spent placeholder ack) for checks.
            let ack = std::mem::replace(&mut r.ack, placeholder_ack());
            ack.done();
            out.push(r);
        }
    }
    let summary = task.await.unwrap().unwrap();
    (out, summary)
}

fn placeholder_ack() -> tidemark_consumer::Ack {
    #[derive(Debug)]
    struct Nothing;
    impl tidemark_consumer::AckTarget for Nothing {
        fn ack(&self, _serial: u64) {}
    }
    tidemark_consumer::Ack::new(std::sync::Arc::new(Nothing), 0)
}

fn position(r: &Record) -> (String, Position) {
    let Origin::Kinesis {
        shard_id,
        sequence_number,
        sub_sequence_number,
        ..
    } = &r.origin
    else {
        panic!("kinesis origin")
    };
    (
        shard_id.to_string(),
        Position::new(sequence_number.clone(), *sub_sequence_number),
    )
}

#[tokio::test]
async fn replay_of_kpl_fixture_dead_letters_only_the_corrupt_aggregate() {
    let (records, summary) = replay_all("kpl_aggregates.jsonl").await;
    assert_eq!(records.len(), 262, "261 user records + 1 corrupt aggregate");
    assert_eq!(summary.corrupt_aggregates, 1);
    let defects: Vec<_> = records.iter().filter(|r| r.defect.is_some()).collect();
    assert_eq!(defects.len(), 1);
    assert_eq!(
        defects[0].defect.as_ref().unwrap().reason,
        Reason::CorruptAggregate
    );
    // The shard goes on after it: the last aggregate's 4 user records follow.
    let idx = records.iter().position(|r| r.defect.is_some()).unwrap();
    assert_eq!(records.len() - idx - 1, 4);
    assert!(
        records[idx + 1..]
            .iter()
            .all(|r| r.partition_key == "after")
    );
}

#[tokio::test]
async fn replay_of_malformed_fixture_delivers_every_record_untouched() {
    let lines = read_fixture(&fixture("malformed.jsonl")).unwrap();
    let (records, _) = replay_all("malformed.jsonl").await;
    // Judging payloads is the router's job: the consumer passes them through.
    assert_eq!(records.len(), lines.len());
    for (r, l) in records.iter().zip(&lines) {
        assert_eq!(r.data.to_vec(), l.bytes().unwrap());
        assert!(r.defect.is_none());
    }
}

#[tokio::test]
async fn replay_of_resharded_fixture_keeps_lineage_and_order() {
    let lines = read_fixture(&fixture("resharded.jsonl")).unwrap();
    let parents: HashMap<String, Vec<String>> = lines
        .iter()
        .map(|l| (l.shard_id.clone(), l.parent_shard_ids.clone()))
        .collect();
    assert!(
        parents.values().any(|p| p.len() == 2),
        "the fixture has a merge"
    );
    assert!(
        parents.values().filter(|p| p.len() == 1).count() >= 2,
        "the fixture has a split"
    );
    let (records, summary) = replay_all("resharded.jsonl").await;
    assert_eq!(records.len(), lines.len());
    assert_eq!(summary.per_shard.values().sum::<usize>(), lines.len());
    let positions: Vec<(String, Position)> = records.iter().map(position).collect();
    // Per shard, strictly increasing positions.
    let mut last: BTreeMap<&str, &Position> = BTreeMap::new();
    for (s, p) in &positions {
        if let Some(prev) = last.insert(s, p) {
            assert!(prev < p, "{s} out of order");
        }
    }
    // Every child record after every parent record.
    for (child, ps) in &parents {
        let first = positions.iter().position(|(s, _)| s == child).unwrap();
        for p in ps {
            if let Some(lp) = positions.iter().rposition(|(s, _)| s == p) {
                assert!(lp < first, "{child} started before {p} ended");
            }
        }
    }
    // Per partition key, the payload counter `n` only grows (it was written
    // in that order by the test that recorded the fixture).
    let mut last_n: HashMap<String, i64> = HashMap::new();
    for r in &records {
        let v: serde_json::Value = serde_json::from_slice(&r.data).unwrap();
        let n = v["n"].as_i64().unwrap();
        if let Some(prev) = last_n.insert(r.partition_key.clone(), n) {
            assert!(prev < n, "key {} went from {prev} to {n}", r.partition_key);
        }
    }
}

#[tokio::test]
async fn replay_stops_on_shutdown_without_acks() {
    let (tx, mut rx) = mpsc::channel::<Vec<Record>>(1);
    let stop = CancellationToken::new();
    let task = tokio::spawn(
        ReplaySource::open(&fixture("iot_plain.jsonl"))
            .unwrap()
            .with_batch_size(10)
            .replay(tx, stop.clone()),
    );
    // Take one batch and never acknowledge it: replay cannot finish alone.
    let first = rx.recv().await.unwrap();
    assert_eq!(first.len(), 10);
    tokio::task::yield_now().await;
    assert!(!task.is_finished());
    stop.cancel();
    let summary = task.await.unwrap().unwrap();
    assert!(summary.per_shard.values().sum::<usize>() < 200);
    drop(first);
}
