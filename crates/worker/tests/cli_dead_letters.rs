//! `tidemark dead-letters replay --dry-run` on a dead-letter file, with no
//! AWS at all (every endpoint refuses): it says what would be stored where
//! and what would fail again, and leaves the file byte for byte as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::process::Command;

use chrono::Utc;
use serde_json::Value;
use tidemark_schema::{Origin, Reason};
use tidemark_worker::deadletter::DeadLetter;

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

#[test]
fn a_dry_run_changes_nothing_and_says_what_would_happen() {
    let now = Utc::now().timestamp_millis();
    let origin = |n: u32| Origin::Kinesis {
        stream: "events".into(),
        shard_id: "shardId-000000000000".into(),
        sequence_number: n.to_string().into(),
        sub_sequence_number: 0,
    };
    let entries = [
        DeadLetter::new(
            origin(1),
            Reason::MissingField,
            "field `deviceId` is missing".into(),
            format!(r#"{{"device":"d-1","timestamp":{now}}}"#).as_bytes(),
            Utc::now(),
        ),
        DeadLetter::new(
            origin(2),
            Reason::InvalidJson,
            "not JSON".into(),
            b"{oops",
            Utc::now(),
        ),
    ];
    let dir = std::env::temp_dir().join(format!("tidemark-dl-dry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dead-letters.jsonl");
    let text: String = entries
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    std::fs::write(&path, &text).unwrap();
    let config =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../localstack/tidemark.toml");
    let out = Command::new(BIN)
        .args([
            "dead-letters",
            "replay",
            "--dry-run",
            "-o",
            "json",
            "--from-file",
        ])
        .arg(&path)
        .arg("--config")
        .arg(config)
        // The fix (the events key their entity as `device`), and an AWS
        // that refuses every connection: a dry run needs none.
        .envs([
            ("TIDEMARK__EVENT__ENTITY_FIELD", "device"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
        ])
        .env_remove("TIDEMARK_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let planned: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(planned.len(), 2);
    assert_eq!(planned[0]["outcome"], "store", "{planned:?}");
    assert!(planned[0]["table"].as_str().unwrap().starts_with("demo_"));
    assert_eq!(planned[1]["outcome"], "fail");
    assert_eq!(planned[1]["reason"], "invalid_json");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the file changed"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
