//! `tidemark key`: where an event lands and what is stored, as `run`
//! writes it: the whole item (DynamoDB JSON), both copies during a shard
//! migration, events from a file or stdin (one or NDJSON), and never a
//! guessed source position.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

fn config(name: &str, schema_extra: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tidemark-key-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join("t.toml");
    std::fs::write(
        &f,
        format!(
            "[event]\nentity_field = \"deviceId\"\nevent_id_field = \"eventId\"\n\
             [schema]\ntable_prefix = \"x\"\nretention = \"36500d\"\n{schema_extra}\n"
        ),
    )
    .unwrap();
    f
}

fn key(config: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args([
            "key",
            "--config",
            config.to_str().unwrap(),
            "--now",
            "2026-11-22T06:00:00Z",
        ])
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const E1: &str = r#"{"deviceId":"d1","timestamp":"2026-11-22T05:00:00Z","eventId":"e1","t":21.5}"#;
const E2: &str = r#"{"deviceId":"d2","timestamp":"2026-11-22T05:30:00Z","eventId":"e2","t":7}"#;

#[test]
fn key_shows_the_whole_item_as_stored() {
    let f = config("item", "");
    let o = key(&f, &["--event", E1, "-o", "json"], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: Value = serde_json::from_str(&text(&o.stdout)).unwrap();
    let copy = &v[0];
    assert_eq!(copy["table"], "x_2026-11-22");
    assert_eq!(copy["pk"], "d1");
    // The item in DynamoDB JSON, with every attribute `run` writes.
    let item = &copy["item"];
    assert_eq!(item["pk"]["S"], "d1", "{v:#}");
    assert_eq!(item["t"]["N"], "21.5", "{v:#}");
    assert_eq!(item["event_id"]["S"], "e1", "{v:#}");
    assert!(item["sk"]["S"].as_str().unwrap().ends_with("#e1"), "{v:#}");
    assert_eq!(copy["event_id_from"], "event", "{v:#}");
}

#[test]
fn key_shows_both_copies_during_a_migration() {
    let f = config(
        "migration",
        "key = { strategy = \"calculated_suffix\", shards = 8 }\nmigrate_from = { strategy = \"entity\" }",
    );
    let o = key(&f, &["--event", E1], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["layout"], "key");
    assert!(lines[0]["pk"].as_str().unwrap().starts_with("d1#"));
    assert_eq!(lines[1]["layout"], "migrate_from");
    assert_eq!(lines[1]["pk"], "d1");
}

#[test]
fn key_reads_events_from_a_file_or_stdin() {
    let f = config("files", "");
    let ndjson = format!("{E1}\n\n{E2}\n");
    let file = f.with_file_name("events.ndjson");
    std::fs::write(&file, &ndjson).unwrap();
    let o = key(&f, &["--file", file.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let pks: Vec<String> = text(&o.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["pk"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(pks, ["d1", "d2"]);
    let o = key(&f, &["--file", "-"], Some(&ndjson));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 2);
    // One event spread over several lines (pretty-printed) is one event.
    let pretty = serde_json::to_string_pretty(&serde_json::from_str::<Value>(E2).unwrap()).unwrap();
    let o = key(&f, &["--file", "-"], Some(&pretty));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 1, "{}", text(&o.stdout));
}

#[test]
fn key_refuses_to_guess_a_position() {
    let f = config(
        "position",
        "key = { strategy = \"calculated_suffix\", shards = 8 }",
    );
    let no_id = r#"{"deviceId":"d1","timestamp":"2026-11-22T05:00:00Z"}"#;
    let o = key(&f, &["--event", no_id], None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("--position"),
        "{}",
        text(&o.stderr)
    );
    // With the position `run` would have read it at, the key `run` writes.
    let at = |pos: &str| {
        let o = key(&f, &["--event", no_id, "--position", pos], None);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        serde_json::from_str::<Value>(text(&o.stdout).trim()).unwrap()
    };
    let a = at("shardId-000000000001:49590338271490256608559692538361571095921575989136588898");
    let b = at("shardId-000000000001:49590338271490256608559692538361571095921575989136589898");
    assert_eq!(a["event_id_from"], "position");
    assert_eq!(
        a["item"]["event_id"]["S"],
        "shardId-000000000001:49590338271490256608559692538361571095921575989136588898:0"
    );
    assert_ne!(a["sk"], b["sk"]);
    let sqs = at("sqs:8b1a9953-6c2c-4bd4-9b1a-0d4c8f6e6a01:2");
    assert_eq!(
        sqs["item"]["event_id"]["S"],
        "sqs:8b1a9953-6c2c-4bd4-9b1a-0d4c8f6e6a01:2"
    );
    let o = key(&f, &["--event", no_id, "--position", "nonsense"], None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
