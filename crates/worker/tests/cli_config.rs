//! `config check` names every problem by its full key path and true source
//! (the variable or the file line of the value itself, also inside tagged
//! tables such as `schema.key` and `source.initial_position`), reports
//! every problem of a file in one run, structural and semantic, refuses or
//! warns about contradictions. (`config check --environment`, which checks
//! AWS, is in `stack_environment.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

const GOOD: &str = r#"[source]
kind = "kinesis"
stream = "events"
lease_table = "tidemark-leases"
initial_position = { type = "trim_horizon" }

[schema]
table_prefix = "events"
key = { strategy = "time_bucket", shards = 10, bucket = "hour" }
billing = { mode = "on_demand" }

[writer]
linger = "50ms"

[dead_letters]
kind = "file"
path = "dead-letters.jsonl"
"#;

fn file(name: &str, text: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tidemark-config-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join(format!("{name}.toml"));
    std::fs::write(&f, text).unwrap();
    f
}

fn check(env: &[(&str, &str)], path: &Path, extra: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOSTNAME", "test-host");
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(["config", "check", path.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

/// A problem as (key, origin text, message).
type Found = (String, String, String);

/// The problems of `config check -o json`, and its warnings.
fn problems(env: &[(&str, &str)], path: &Path) -> (Vec<Found>, Vec<Value>) {
    let o = check(env, path, &["-o", "json"]);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let list = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let origin = match p["origin"]["from"].as_str() {
                Some("file") => format!(
                    "{}:{}",
                    p["origin"]["path"].as_str().unwrap(),
                    p["origin"]["line"]
                ),
                Some("env") => p["origin"]["var"].as_str().unwrap().to_string(),
                other => format!("{other:?}"),
            };
            (
                p["key"].as_str().unwrap_or_default().to_string(),
                origin,
                p["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let warnings = v["warnings"].as_array().cloned().unwrap_or_default();
    (list, warnings)
}

/// The line of `needle` in `text`, 1-based.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

#[test]
fn nested_and_tagged_values_keep_their_path_and_true_source() {
    let good = file("good", GOOD);
    let g = good.to_str().unwrap().to_string();
    let bad_position = GOOD.replace("type = \"trim_horizon\"", "type = \"oldest\"");
    let bad_writer = GOOD.replace(
        "linger = \"50ms\"",
        "linger = \"50ms\"\nmax_in_flight_items = 0",
    );
    // (name, environment, file text, key, where its value came from)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, &'a str, String);
    let cases: Vec<Case> = vec![
        (
            "env into a tagged table",
            vec![("TIDEMARK__SCHEMA__KEY__SHARDS", "six")],
            GOOD.to_string(),
            "schema.key.shards",
            "TIDEMARK__SCHEMA__KEY__SHARDS".into(),
        ),
        (
            "env into a nested tagged table",
            vec![("TIDEMARK__SOURCE__INITIAL_POSITION__TYPE", "oldest")],
            GOOD.to_string(),
            "source.initial_position.type",
            "TIDEMARK__SOURCE__INITIAL_POSITION__TYPE".into(),
        ),
        (
            "file value in a nested tagged table",
            vec![],
            bad_position.clone(),
            "source.initial_position.type",
            format!(":{}", line_of(&bad_position, "oldest")),
        ),
        (
            "writer check",
            vec![],
            bad_writer.clone(),
            "writer.max_in_flight_items",
            format!(":{}", line_of(&bad_writer, "max_in_flight_items")),
        ),
        (
            "env writer check",
            vec![("TIDEMARK__WRITER__CAPACITY_SHARE", "2")],
            GOOD.to_string(),
            "writer.capacity_share",
            "TIDEMARK__WRITER__CAPACITY_SHARE".into(),
        ),
        (
            "env into the billing variant",
            vec![("TIDEMARK__SCHEMA__BILLING__WARM_WRITE_UNITS", "lots")],
            GOOD.to_string(),
            "schema.billing.warm_write_units",
            "TIDEMARK__SCHEMA__BILLING__WARM_WRITE_UNITS".into(),
        ),
    ];
    for (name, env, text, key, source) in cases {
        let f = file(&name.replace(' ', "-"), &text);
        let (list, _) = problems(&env, &f);
        let found = list.iter().find(|(k, _, _)| k == key);
        let Some((_, origin, message)) = found else {
            panic!("{name}: no problem at `{key}` in {list:#?}");
        };
        let want = if let Some(line) = source.strip_prefix(':') {
            format!("{}:{line}", f.to_str().unwrap())
        } else {
            source
        };
        assert_eq!(origin, &want, "{name}: {message}");
        // Nothing is blamed on a section or a file line of a valid value.
        for (k, _, _) in &list {
            assert!(
                k.contains('.') || k == "shutdown_timeout",
                "{name}: bare section `{k}` in {list:#?}"
            );
        }
    }
    // The good file is good.
    assert_eq!(check(&[], &good, &[]).status.code(), Some(0), "{g}");
}

/// Every structural and semantic problem of a file in one run, each at
/// its key and line, and the contradictions among them.
#[test]
fn every_problem_of_a_file_in_one_run() {
    let text = r#"[source]
kind = "kinesis"
stream = "s"
lease_table = "l"
initial_position = { type = "oldest" }

[event]
entity_field = "a"
entity_fields = ["b", "c"]

[schema]
table_prefix = "p"
period = "hour"
retention = "30m"
key = { strategy = "time_bucket", shards = 0, bucket = "day" }
tiers = { active = { read = 1, write = 0 } }

[writer]
linger = "soon"
max_in_flight_items = 0

[dead_letters]
kind = "file"
path = "x"
"#;
    let f = file("multi", text);
    let (list, warnings) = problems(&[], &f);
    let path = f.to_str().unwrap();
    for (key, needle) in [
        ("source.initial_position.type", "oldest"),
        ("event.entity_fields", "entity_fields"),
        ("schema.key.shards", "key ="),
        ("schema.tiers.active.write", "tiers ="),
        ("writer.linger", "linger"),
        ("writer.max_in_flight_items", "max_in_flight_items"),
    ] {
        let found = list.iter().find(|(k, _, _)| k == key);
        let Some((_, origin, _)) = found else {
            panic!("no problem at `{key}` in one run: {list:#?}");
        };
        assert_eq!(
            origin,
            &format!("{path}:{}", line_of(text, needle)),
            "{key}: {list:#?}"
        );
    }
    let warnings = serde_json::to_string(&warnings).unwrap();
    assert!(warnings.contains("schema.retention"), "{warnings}");
    assert!(warnings.contains("schema.key.bucket"), "{warnings}");
    // Only what is likely a mistake: the good file warns of nothing.
    let (none, good_warnings) = problems(&[], &file("good-warnings", GOOD));
    assert!(
        none.is_empty() && good_warnings.is_empty(),
        "{good_warnings:?}"
    );
    // The text form lists them all too, with a count.
    let o = check(&[], &f, &[]);
    assert_eq!(o.status.code(), Some(78));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{} problems", list.len())), "{err}");
}

/// The seeds' hot-key case: a known 2,000 events/s entity
/// (`schema.peak_key_events_per_sec`) under `time_bucket` is warned about
/// (one entity stays on one partition, whatever `shards` is) unless
/// adaptive sharding is on; the warning says what turning it on costs
/// reads.
#[test]
fn a_hot_key_under_time_bucket_is_warned_unless_adaptive_sharding_is_on() {
    let hot = GOOD.replace(
        "billing = { mode = \"on_demand\" }",
        "billing = { mode = \"on_demand\" }\npeak_key_events_per_sec = 2000",
    );
    let (problems_off, warnings) = problems(&[], &file("hot-key", &hot));
    assert!(problems_off.is_empty(), "{problems_off:?}");
    let w = serde_json::to_string(&warnings).unwrap();
    assert!(w.contains("schema.peak_key_events_per_sec"), "{w}");
    assert!(
        w.contains("one partition") && w.contains("adaptive_sharding") && w.contains("read"),
        "{w}"
    );
    let on = hot.replace(
        "peak_key_events_per_sec = 2000",
        "peak_key_events_per_sec = 2000\nadaptive_sharding = { enabled = true }",
    );
    let (problems_on, warnings) = problems(&[], &file("hot-key-adaptive", &on));
    assert!(
        problems_on.is_empty() && warnings.is_empty(),
        "{problems_on:?} {warnings:?}"
    );
}

/// `run` says what `config check` warns about, in its log, before it
/// starts (a worker started without a check still tells).
#[test]
fn run_logs_the_config_warnings() {
    let text = GOOD.replace(
        "table_prefix = \"events\"",
        "table_prefix = \"events\"\nperiod = \"day\"\nretention = \"2h\"",
    );
    let f = file("run-warnings", &text);
    // Nothing listens there: `run` gives up at once (exit 69), after
    // loading the config and starting its log.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOSTNAME", "test-host")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "x")
        .env("AWS_SECRET_ACCESS_KEY", "x")
        .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
        .args([
            "run",
            "--config",
            f.to_str().unwrap(),
            "--timeout",
            "10s",
            "--give-up-after",
            "2s",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("schema.retention") && err.contains("shorter than one period"),
        "{err}"
    );
}
