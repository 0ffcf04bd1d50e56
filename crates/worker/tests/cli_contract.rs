//! The command-line contract of the real `tidemark` binary, without AWS:
//! broken configs exit 78 naming the key and where its value came from,
//! offline commands need only what they use, exit codes, help, output
//! formats, completions and man page.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

const GOOD: &str = r#"[source]
kind = "kinesis"
stream = "events"
lease_table = "tidemark-leases"

[schema]
table_prefix = "events"

[dead_letters]
kind = "file"
path = "dead-letters.jsonl"
"#;

/// A fresh directory for one test's files.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tidemark-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The binary with a clean environment (no inherited TIDEMARK_* or AWS_*).
fn tidemark(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOSTNAME", "test-host");
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A broken config: name, file text, environment, the key and the source
/// its message must name.
type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, &'a str, &'a str);

#[test]
fn broken_configs_exit_78_naming_key_and_source() {
    let d = dir("broken");
    // (name, file text, environment, key named, source named)
    let with = |from: &str, to: &str| GOOD.replace(from, to);
    let cases: Vec<Case> = vec![
        (
            "unknown key",
            with("lease_table", "lease_tabel"),
            vec![],
            "source.lease_tabel",
            ":4",
        ),
        (
            "unknown section",
            format!("{GOOD}[writter]\nlinger = \"1s\"\n"),
            vec![],
            "writter",
            ":12",
        ),
        (
            "schema.event ignored",
            format!("{GOOD}[schema.event]\nentity_field = \"user.id\"\n"),
            vec![],
            "schema.event",
            ":12",
        ),
        (
            "shards with entity",
            with(
                "table_prefix = \"events\"",
                "table_prefix = \"events\"\nkey = { strategy = \"entity\", shards = 10 }",
            ),
            vec![],
            "schema.key.shards",
            ":8",
        ),
        (
            "writer.pk_attribute",
            format!("{GOOD}[writer]\npk_attribute = \"id\"\n"),
            vec![],
            "writer.pk_attribute",
            ":13",
        ),
        (
            "wrong type",
            format!("{GOOD}[writer]\nmax_in_flight_items = \"many\"\n"),
            vec![],
            "writer.max_in_flight_items",
            ":13",
        ),
        (
            "negative number",
            format!("{GOOD}[writer]\nmax_in_flight_items = -1\n"),
            vec![],
            "writer.max_in_flight_items",
            ":13",
        ),
        (
            "bad duration",
            format!("{GOOD}[maintenance]\ninterval = \"soon\"\n"),
            vec![],
            "maintenance.interval",
            ":13",
        ),
        (
            "bad enum value",
            with(
                "table_prefix = \"events\"",
                "table_prefix = \"events\"\nperiod = \"fortnight\"",
            ),
            vec![],
            "schema.period",
            ":8",
        ),
        (
            "bad source kind",
            with("kind = \"kinesis\"", "kind = \"kinesys\""),
            vec![],
            "source.kind",
            ":2",
        ),
        (
            "zero capacity",
            with(
                "table_prefix = \"events\"",
                "table_prefix = \"events\"\ntiers.active = { read = 300, write = 0 }",
            ),
            vec![],
            "schema.tiers.active.write",
            ":8",
        ),
        (
            "listen without port",
            format!("{GOOD}[telemetry]\nlisten = \"localhost:abc\"\n"),
            vec![],
            "telemetry.listen",
            ":13",
        ),
        (
            "log level",
            format!("{GOOD}[telemetry]\nlog_level = \"verbose\"\n"),
            vec![],
            "telemetry.log_level",
            ":13",
        ),
        (
            "missing key",
            with("table_prefix = \"events\"", ""),
            vec![],
            "schema.table_prefix",
            ":6",
        ),
        (
            "env unknown key",
            GOOD.to_string(),
            vec![("TIDEMARK__SOURCE__STREEM", "x")],
            "source.streem",
            "TIDEMARK__SOURCE__STREEM",
        ),
        (
            "env bad value",
            GOOD.to_string(),
            vec![("TIDEMARK__SCHEMA__PERIOD", "fortnight")],
            "schema.period",
            "TIDEMARK__SCHEMA__PERIOD",
        ),
        (
            "env into a value",
            GOOD.to_string(),
            vec![("TIDEMARK__SOURCE__STREAM__X", "1")],
            "source.stream.x",
            "TIDEMARK__SOURCE__STREAM__X",
        ),
        (
            "env shards with entity",
            GOOD.to_string(),
            vec![
                ("TIDEMARK__SCHEMA__KEY__STRATEGY", "entity"),
                ("TIDEMARK__SCHEMA__KEY__SHARDS", "4"),
            ],
            "schema.key.shards",
            "TIDEMARK__SCHEMA__KEY__SHARDS",
        ),
        (
            "env zero leases",
            GOOD.to_string(),
            vec![("TIDEMARK__SOURCE__MAX_LEASES", "0")],
            "source.max_leases",
            "TIDEMARK__SOURCE__MAX_LEASES",
        ),
    ];
    assert!(cases.len() >= 15);
    for (name, text, env, key, source) in cases {
        let file = d.join(format!("{}.toml", name.replace(' ', "-")));
        std::fs::write(&file, &text).unwrap();
        let path = file.to_str().unwrap();
        let o = tidemark(&env, &["config", "check", path]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(78), "{name}: {err}");
        assert!(
            err.contains(&format!("`{key}`")),
            "{name}: key {key} not named in {err}"
        );
        let source = if source.starts_with(':') {
            format!("{path}{source}")
        } else {
            source.to_string()
        };
        assert!(
            err.contains(&source),
            "{name}: source {source} not named in {err}"
        );
        for rust in ["usize", "u64", "i64", "struct ", "enum ", "variant"] {
            assert!(!err.contains(rust), "{name}: Rust name {rust} in {err}");
        }
        // `run` refuses it the same way, before any AWS call.
        let o = tidemark(&env, &["run", "--config", path]);
        assert_eq!(o.status.code(), Some(78), "{name} (run): {}", stderr(&o));
    }
}

#[test]
fn all_problems_of_a_config_are_reported_in_one_run() {
    let d = dir("all");
    let file = d.join("t.toml");
    std::fs::write(
        &file,
        format!("{GOOD}[writer]\nlingr = \"1s\"\nmax_in_flight_items = \"x\"\n[telemetry]\nlog_level = \"verbose\"\n"),
    )
    .unwrap();
    let o = tidemark(
        &[],
        &[
            "config",
            "check",
            file.to_str().unwrap(),
            "--output",
            "json",
        ],
    );
    assert_eq!(o.status.code(), Some(78));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let keys: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["key"].as_str())
        .collect();
    assert_eq!(keys.len(), 3, "{v}");
    for k in ["writer.lingr", "writer.max_in_flight_items"] {
        assert!(keys.contains(&k), "{k}: {v}");
    }
}

#[test]
fn good_config_checks_ok_and_near_miss_variables_are_warned() {
    let d = dir("ok");
    let file = d.join("t.toml");
    std::fs::write(&file, GOOD).unwrap();
    let o = tidemark(
        &[
            ("TIDEMARK_SCHEMA__TABLE_PREFIX", "x"),
            ("tidemark__source__stream", "y"),
        ],
        &["config", "check", file.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("use TIDEMARK__SCHEMA__TABLE_PREFIX"), "{err}");
    assert!(
        !err.contains("tidemark__source__stream"),
        "lower case is honoured, not warned about: {err}"
    );
}

#[test]
fn variable_names_are_case_insensitive_and_upper_case_wins_a_tie() {
    let d = dir("case");
    let file = d.join("t.toml");
    std::fs::write(&file, GOOD).unwrap();
    let show = |env: &[(&str, &str)]| {
        let o = tidemark(
            env,
            &[
                "config",
                "show",
                "--config",
                file.to_str().unwrap(),
                "-o",
                "jsonl",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let period = stdout(&o)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|r| r["key"] == "schema.period")
            .unwrap();
        period["value"]
            .as_str()
            .unwrap()
            .trim_matches('"')
            .to_string()
    };
    assert_eq!(show(&[("tidemark__schema__period", "hour")]), "hour");
    assert_eq!(
        show(&[
            ("tidemark__schema__period", "hour"),
            ("TIDEMARK__SCHEMA__PERIOD", "day")
        ]),
        "day"
    );
}

#[test]
fn config_show_gives_each_value_its_source() {
    let d = dir("show");
    let file = d.join("t.toml");
    std::fs::write(&file, GOOD).unwrap();
    let o = tidemark(
        &[("TIDEMARK__SCHEMA__PERIOD", "hour")],
        &[
            "config",
            "show",
            "--config",
            file.to_str().unwrap(),
            "-o",
            "jsonl",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let find = |k: &str| {
        rows.iter()
            .find(|r| r["key"] == k)
            .unwrap_or_else(|| panic!("{k}"))
    };
    assert_eq!(find("source.stream")["origin"]["line"], 3);
    assert_eq!(
        find("schema.period")["origin"]["var"],
        "TIDEMARK__SCHEMA__PERIOD"
    );
    assert_eq!(find("writer.linger")["origin"]["from"], "default");
}

#[test]
fn key_needs_no_source_section() {
    let d = dir("key");
    let file = d.join("t.toml");
    std::fs::write(
        &file,
        "[event]\nentity_field = \"id\"\n[schema]\ntable_prefix = \"x\"\n",
    )
    .unwrap();
    let o = tidemark(
        &[],
        &[
            "key",
            "--config",
            file.to_str().unwrap(),
            "--event",
            r#"{"id":"d1","timestamp":"2026-11-22T05:00:00Z","eventId":"e1"}"#,
            "--now",
            "2026-11-22T05:00:00Z",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["pk"], "d1");
    assert_eq!(v["table"], "x_2026-11-22");
}

/// `key` and `plan` route with the config's whole `[event]` mapping (the
/// documented clickstream one), and a mapping error stops them at start,
/// naming its key.
#[test]
fn key_and_plan_use_the_event_mapping_and_refuse_its_errors() {
    let d = dir("mapping");
    let file = d.join("t.toml");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mapping =
        std::fs::read_to_string(root.join("tests/fixtures/clickstream/mapping.toml")).unwrap();
    let events =
        std::fs::read_to_string(root.join("tests/fixtures/clickstream/events.ndjson")).unwrap();
    let first = events.lines().next().unwrap();
    std::fs::write(
        &file,
        format!("{mapping}\n[schema]\ntable_prefix = \"x\"\nretention = \"36500d\"\n"),
    )
    .unwrap();
    let o = tidemark(
        &[],
        &[
            "key",
            "--config",
            file.to_str().unwrap(),
            "--event",
            first,
            "--now",
            "2025-11-22T06:00:00Z",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["pk"], "acme:1000", "composite entity");
    assert_eq!(v["table"], "x_2025-11-22");
    let o = tidemark(
        &[],
        &[
            "plan",
            "--events-per-sec",
            "100",
            "--config",
            file.to_str().unwrap(),
            "--sample-event",
            first,
            "-o",
            "json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));

    std::fs::write(
        &file,
        format!(
            "{}\n[schema]\ntable_prefix = \"x\"\n",
            mapping.replace("Europe/Paris", "Europe/Atlantis")
        ),
    )
    .unwrap();
    let o = tidemark(
        &[],
        &["key", "--config", file.to_str().unwrap(), "--event", first],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("`timezone`") && stderr(&o).contains("Europe/Atlantis"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn plan_sizes_with_the_configs_field_names_and_prints_tidy_numbers() {
    let d = dir("plan");
    let file = d.join("t.toml");
    std::fs::write(
        &file,
        "[event]\nentity_field = \"id\"\n[schema]\ntable_prefix = \"x\"\n",
    )
    .unwrap();
    let sample = r#"{"id":"d1","timestamp":1763790000000,"t":21.5}"#;
    let args = [
        "plan",
        "--events-per-sec",
        "600.7",
        "--sample-event",
        sample,
        "-o",
        "json",
    ];
    // Without the config the default field (deviceId) is missing.
    assert!(!tidemark(&[], &args).status.success());
    let mut with = args.to_vec();
    with.extend(["--config", file.to_str().unwrap()]);
    let o = tidemark(&[], &with);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for number in out.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
        if let Some((_, decimals)) = number.split_once('.') {
            assert!(decimals.len() <= 6, "float noise {number} in {out}");
        }
    }
}

#[test]
fn help_describes_the_tool_and_the_exit_codes() {
    let o = tidemark(&[], &["--help"]);
    let out = stdout(&o);
    assert!(
        out.starts_with("Tidemark moves time-series events"),
        "{out}"
    );
    assert!(
        out.contains("78") && out.contains("69") && out.contains("77"),
        "{out}"
    );
    assert!(out.contains("--output"), "{out}");
    // AWS options belong to the commands that call AWS.
    let aws = stdout(&tidemark(&[], &["status", "--help"]));
    assert!(aws.contains("--endpoint-url"), "{aws}");
    let o = tidemark(&[], &["verify", "--nonsense"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
}

#[test]
fn completions_and_man_page() {
    let o = tidemark(&[], &["completions", "bash"]);
    assert!(
        o.status.success() && stdout(&o).contains("tidemark"),
        "{}",
        stderr(&o)
    );
    let o = tidemark(&[], &["man"]);
    assert!(
        o.status.success() && stdout(&o).contains(".TH tidemark"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn verify_without_an_endpoint_exits_69() {
    let d = dir("verify");
    let file = d.join("t.toml");
    std::fs::write(&file, GOOD).unwrap();
    let manifest = d.join("m.jsonl");
    std::fs::write(
        &manifest,
        "{\"deviceId\":\"d1\",\"timestamp\":\"2026-11-22T05:00:00Z\",\"eventId\":\"e1\"}\n",
    )
    .unwrap();
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let o = tidemark(
        &[
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
        ],
        &[
            "verify",
            "--config",
            file.to_str().unwrap(),
            "--manifest",
            manifest.to_str().unwrap(),
            "--region",
            "us-east-1",
            "--endpoint-url",
            &endpoint,
            "--give-up-after",
            "2s",
        ],
    );
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains(&endpoint), "{}", stderr(&o));
}

#[test]
fn an_unreachable_aws_endpoint_exits_69_for_any_command() {
    let d = dir("unreachable");
    let file = d.join("t.toml");
    std::fs::write(&file, GOOD).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for command in [&["status"][..], &["tables", "list"], &["tables", "ensure"]] {
        let endpoint = format!("http://127.0.0.1:{port}");
        let mut args: Vec<&str> = command.to_vec();
        args.extend([
            "--config",
            file.to_str().unwrap(),
            "--region",
            "us-east-1",
            "--endpoint-url",
            &endpoint,
        ]);
        let o = tidemark(
            &[
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
            ],
            &args,
        );
        assert_eq!(o.status.code(), Some(69), "{command:?}: {}", stderr(&o));
    }
}

/// `run` against an AWS endpoint that accepts connections and never
/// answers: `/healthz` answers within a second or two, saying `starting`
/// (an orchestrator's health check must not kill a task that is waiting
/// for AWS), `/readyz` is 503, and SIGTERM during start-up stops it at
/// once with status 0 (nothing was read, so nothing is left to drain).
#[test]
fn run_answers_healthz_while_starting_and_stops_on_sigterm() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let d = dir("starting");
    let aws = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", aws.local_addr().unwrap());
    // Accepts and holds every connection, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in aws.incoming() {
            held.push(s);
        }
    });
    let telemetry = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let file = d.join("t.toml");
    std::fs::write(
        &file,
        format!("{GOOD}\n[telemetry]\nlisten = \"{telemetry}\"\n"),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOSTNAME", "test-host")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .args(["run", "--config", file.to_str().unwrap()])
        .args(["--region", "us-east-1", "--endpoint-url", &endpoint])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let get = |path: &str| -> Option<String> {
        let mut s = std::net::TcpStream::connect(telemetry).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        Some(text)
    };
    let started = Instant::now();
    let health = loop {
        if let Some(text) = get("/healthz") {
            break text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "/healthz did not answer within 3 s of start"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(health.starts_with("HTTP/1.0 200"), "{health}");
    assert!(health.contains("starting"), "{health}");
    let ready = get("/readyz").unwrap_or_default();
    assert!(ready.starts_with("HTTP/1.0 503"), "{ready}");
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if stopped.elapsed() > Duration::from_secs(5) {
            child.kill().unwrap();
            panic!("SIGTERM during start-up: still running after 5 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "SIGTERM during start-up");
}

/// `run` as a new user tries it against an AWS endpoint that is not there
/// (a closed port, then one that accepts and never answers): within 2 s it
/// says what it waits for, naming the call, the endpoint and where the
/// endpoint came from; it says so again with back-off, and exits 69 at its
/// deadline (`--give-up-after`, shortened here).
#[test]
fn run_says_what_it_waits_for_at_start_up_and_exits_69_at_its_deadline() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let d = dir("waiting");
    let file = d.join("t.toml");
    let telemetry = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    std::fs::write(
        &file,
        format!("{GOOD}\n[telemetry]\nlisten = \"{telemetry}\"\n"),
    )
    .unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hole_port = hole.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in hole.incoming() {
            held.push(s);
        }
    });
    for (port, give_up, why) in [
        (closed, "20s", "connection refused"),
        (hole_port, "6s", "no answer"),
    ] {
        let endpoint = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let mut child = Command::new(BIN)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOSTNAME", "test-host")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .args([
                "run",
                "--config",
                file.to_str().unwrap(),
                "--log-format",
                "text",
            ])
            .args(["--region", "us-east-1", "--endpoint-url", &endpoint])
            .args(["--give-up-after", give_up])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send((started.elapsed(), line)).is_err() {
                    break;
                }
            }
        });
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(40) {
                child.kill().unwrap();
                panic!("{endpoint}: still running after 40 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let took = started.elapsed();
        std::thread::sleep(Duration::from_millis(200));
        let lines: Vec<(Duration, String)> = rx.try_iter().collect();
        let all = lines
            .iter()
            .map(|(t, l)| format!("{:.1}s {l}", t.as_secs_f64()))
            .collect::<Vec<_>>()
            .join("\n");
        let waiting: Vec<&(Duration, String)> = lines
            .iter()
            .filter(|(_, l)| l.contains("waiting for AWS") && l.contains(&endpoint))
            .collect();
        let first = waiting
            .first()
            .unwrap_or_else(|| panic!("{endpoint}: no line says what it waits for:\n{all}"));
        assert!(
            first.0 <= Duration::from_secs(2),
            "{endpoint}: the first waiting line came after {:?}:\n{all}",
            first.0
        );
        assert!(
            first.1.contains("--endpoint-url") && first.1.contains(why),
            "{endpoint}: the line names the endpoint's origin and why:\n{all}"
        );
        assert!(
            waiting.len() >= 2,
            "{endpoint}: said again while it waits:\n{all}"
        );
        assert_eq!(status.code(), Some(69), "{endpoint}:\n{all}");
        let limit = humantime_serde::re::humantime::parse_duration(give_up).unwrap();
        assert!(
            took <= limit + Duration::from_secs(3),
            "{endpoint}: exited after {took:?}, deadline {give_up}:\n{all}"
        );
    }
}
