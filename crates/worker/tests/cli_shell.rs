//! The binary in ordinary shell use: a closed pipe ends a command quietly,
//! logs carry no colour into files and can be JSON, `status --watch` writes
//! no screen codes into a file, JSON values are JSON; and the conveniences
//! a user expects: `config init`, `config explain`, relative times in
//! `query`, `-q`, a man page per subcommand, `config show FILE`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tidemark-shell-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example_config() -> String {
    root()
        .join("localstack/tidemark.toml")
        .to_str()
        .unwrap()
        .to_string()
}

fn command(env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOSTNAME", "test-host")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(args);
    c
}

fn tidemark(env: &[(&str, &str)], args: &[&str]) -> Output {
    command(env, args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs with standard output a pipe whose reader is already gone, as
/// `| head -1` is once it has its line: every write fails with EPIPE.
fn into_closed_pipe(env: &[(&str, &str)], args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut c = command(env, args);
    c.stdout(Stdio::from(writer)).stderr(Stdio::piped());
    c.output().unwrap()
}

const EVENT: &str = r#"{"deviceId":"d1","timestamp":"2026-11-22T05:00:00Z","eventId":"e1"}"#;

/// Every printer: tables, JSON, JSON lines, CSV, plain text, roff, the
/// completion script.
#[test]
fn no_printer_panics_on_a_closed_pipe() {
    let config = example_config();
    let mut cases: Vec<Vec<&str>> = Vec::new();
    for output in ["table", "json", "jsonl", "csv"] {
        cases.push(vec![
            "plan",
            "--events-per-sec",
            "100",
            "--item-bytes",
            "200",
            "-o",
            output,
        ]);
        cases.push(vec!["config", "show", "--config", &config, "-o", output]);
        cases.push(vec![
            "key", "--config", &config, "--event", EVENT, "-o", output,
        ]);
    }
    cases.push(vec!["config", "check", &config]);
    cases.push(vec!["config", "check", &config, "-o", "json"]);
    cases.push(vec!["completions", "bash"]);
    cases.push(vec!["completions", "zsh"]);
    cases.push(vec!["man"]);
    cases.push(vec!["--help"]);
    cases.push(vec!["plan", "--help"]);
    for args in cases {
        let o = into_closed_pipe(&[], &args);
        let err = text(&o.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// An endpoint that answers every request at once with an AWS error: the
/// service is reachable, and every call fails.
fn refusing_endpoint() -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    if std::io::Read::read_exact(&mut reader, &mut body).is_err() {
                        return;
                    }
                    let answer = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"}"#;
                    let reply = format!(
                        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{answer}",
                        answer.len()
                    );
                    if conn.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// Logs into a file or pipe carry no colour codes, and `--log-format json`
/// makes every log line JSON, for every command.
#[test]
fn logs_off_a_terminal_have_no_colour_and_can_be_json() {
    let config = example_config();
    let endpoint = refusing_endpoint();
    let env = [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    let args = [
        "tables",
        "list",
        "--config",
        &config,
        "--endpoint-url",
        &endpoint,
        "-vv",
    ];
    let o = tidemark(&env, &args);
    let err = text(&o.stderr);
    assert!(err.contains("DEBUG"), "no logs: {err}");
    assert!(!err.contains('\u{1b}'), "colour codes in a pipe: {err:?}");
    let mut json = args.to_vec();
    json.extend(["--log-format", "json"]);
    let o = tidemark(&env, &json);
    let err = text(&o.stderr);
    let logs: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("error:") && !l.starts_with("hint:"))
        .collect();
    assert!(!logs.is_empty(), "{err}");
    for l in logs {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string(), "{l}");
    }
}

/// `status --watch` into a file: no screen-clearing codes. (Stopped after
/// a few looks: it watches until interrupted.)
#[test]
fn status_watch_off_a_terminal_writes_no_screen_codes() {
    let config = example_config();
    let endpoint = refusing_endpoint();
    let mut child = command(
        &[
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
        ],
        &[
            "status",
            "--watch",
            "1s",
            "--config",
            &config,
            "--endpoint-url",
            &endpoint,
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut { stdout }, &mut s).ok();
        s
    });
    std::thread::sleep(std::time::Duration::from_secs(4));
    child.kill().ok();
    child.wait().unwrap();
    let out = reader.join().unwrap();
    assert!(out.contains("tables: error"), "no look printed: {out}");
    assert!(!out.contains('\u{1b}'), "screen codes in a file: {out:?}");
}

/// `config show -o json`: values are JSON values, not TOML text in strings.
#[test]
fn config_show_json_values_are_json() {
    let o = tidemark(
        &[],
        &[
            "config",
            "show",
            "--config",
            &example_config(),
            "-o",
            "json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text(&o.stdout)).unwrap();
    let value = |k: &str| {
        rows.iter()
            .find(|r| r["key"] == k)
            .unwrap_or_else(|| panic!("{k}"))["value"]
            .clone()
    };
    assert_eq!(value("writer.linger"), serde_json::json!("50ms"));
    assert_eq!(
        value("writer.max_in_flight_items"),
        serde_json::json!(20000)
    );
    assert_eq!(value("maintenance.enabled"), serde_json::json!(true));
    assert_eq!(value("schema.key.shards"), serde_json::json!(10));
    assert_eq!(
        value("schema.key.strategy"),
        serde_json::json!("time_bucket")
    );
}

/// `config show FILE`, as `config check FILE`.
#[test]
fn config_show_takes_the_file_as_check_does() {
    let o = tidemark(&[], &["config", "show", &example_config()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("schema.period"));
}

/// `config init` writes a commented starter config that checks clean.
#[test]
fn config_init_writes_a_config_that_checks() {
    let d = dir("init");
    let file = d.join("tidemark.toml");
    for (flags, want) in [
        (
            vec![
                "--source",
                "kinesis",
                "--stream",
                "clicks",
                "--prefix",
                "clicks",
                "--period",
                "hour",
                "--strategy",
                "calculated_suffix",
                "--shards",
                "8",
            ],
            "stream = \"clicks\"",
        ),
        (
            vec![
                "--source",
                "sqs",
                "--queue-url",
                "https://sqs.eu-west-1.amazonaws.com/123456789012/events",
                "--prefix",
                "events",
            ],
            "queue_url = \"https://sqs.eu-west-1.amazonaws.com/123456789012/events\"",
        ),
    ] {
        let mut args = vec!["config", "init", "--out", file.to_str().unwrap(), "--force"];
        args.extend(flags.iter().copied());
        let o = tidemark(&[], &args);
        assert_eq!(o.status.code(), Some(0), "{flags:?}: {}", text(&o.stderr));
        let written = std::fs::read_to_string(&file).unwrap();
        assert!(written.contains(want), "{written}");
        assert!(written.contains("\n# "), "commented: {written}");
        let o = tidemark(&[], &["config", "check", file.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{flags:?}: {}\n{written}",
            text(&o.stderr)
        );
    }
    // An existing file is not overwritten without --force.
    let o = tidemark(
        &[],
        &[
            "config",
            "init",
            "--out",
            file.to_str().unwrap(),
            "--stream",
            "x",
            "--prefix",
            "x",
        ],
    );
    assert_ne!(o.status.code(), Some(0));
    // Without --out it prints the config.
    let o = tidemark(
        &[],
        &["config", "init", "--stream", "events", "--prefix", "events"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("[source]"));
    std::fs::remove_dir_all(&d).ok();
}

/// `config explain KEY`: the reference text of a key, offline.
#[test]
fn config_explain_gives_the_reference_of_a_key() {
    let o = tidemark(&[], &["config", "explain", "schema.key"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for word in ["time_bucket", "calculated_suffix", "shards"] {
        assert!(out.contains(word), "{word}: {out}");
    }
    let o = tidemark(&[], &["config", "explain", "writer.linger"]);
    assert!(text(&o.stdout).contains("Default"), "{}", text(&o.stdout));
    let o = tidemark(&[], &["config", "explain", "writer.lingr"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("writer.linger"),
        "{}",
        text(&o.stderr)
    );
}

/// `query --since 1h` and `--last 15m` are ranges (AWS then fails: 69, not
/// a usage error); without any range the message names every form.
#[test]
fn query_takes_relative_times_and_names_every_range_form() {
    let config = example_config();
    let env = [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    for range in [&["--since", "1h"][..], &["--last", "15m"]] {
        let mut args = vec![
            "query",
            "--config",
            &config,
            "--entity",
            "d1",
            "--endpoint-url",
            "http://127.0.0.1:9",
            "--give-up-after",
            "2s",
        ];
        args.extend(range);
        let o = tidemark(&env, &args);
        assert_eq!(o.status.code(), Some(69), "{range:?}: {}", text(&o.stderr));
    }
    let o = tidemark(&env, &["query", "--config", &config, "--entity", "d1"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    for form in ["--latest", "--from", "--since", "--last"] {
        assert!(err.contains(form), "{form} not named: {err}");
    }
}

/// `-q` on every command that shows progress, as the docs name it.
#[test]
fn quiet_is_accepted_wherever_progress_shows() {
    let config = example_config();
    let env = [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    for cmd in [
        &["record", "--out", "/dev/null"][..],
        &["tables", "ensure"],
        &["produce", "--count", "1"],
        &["verify", "--manifest", "/dev/null"],
        &["replay", "--fixture", "/dev/null"],
        &["migrate", "backfill", "--period", "2026-11-22"],
    ] {
        let mut args = cmd.to_vec();
        args.extend([
            "-q",
            "--config",
            &config,
            "--endpoint-url",
            "http://127.0.0.1:9",
            "--give-up-after",
            "2s",
        ]);
        let o = tidemark(&env, &args);
        assert_ne!(o.status.code(), Some(2), "{cmd:?}: {}", text(&o.stderr));
    }
}

/// A man page per subcommand, with that subcommand's options; every page
/// at once into a directory.
#[test]
fn man_pages_per_subcommand() {
    let o = tidemark(&[], &["man", "tables", "ensure"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let page = text(&o.stdout);
    assert!(page.contains(".TH tidemark-tables-ensure"), "{page}");
    assert!(
        page.contains("dry\\-run"),
        "options of the subcommand: {page}"
    );
    let d = dir("man");
    let o = tidemark(&[], &["man", "--out", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    for page in ["tidemark.1", "tidemark-plan.1", "tidemark-tables-rotate.1"] {
        assert!(d.join(page).exists(), "{page}");
    }
    std::fs::remove_dir_all(&d).ok();
}

/// Help teaches the current spellings; commands that need no AWS do not
/// list AWS options.
#[test]
fn help_has_no_drift() {
    for cmd in ["plan", "query", "status", "tables", "verify"] {
        let help = text(&tidemark(&[], &[cmd, "--help"]).stdout);
        for old in ["--json", "--format"] {
            assert!(!help.contains(old), "{cmd} --help teaches {old}: {help}");
        }
    }
    for cmd in [
        &["plan"][..],
        &["key"],
        &["config", "show"],
        &["completions"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let help = text(&tidemark(&[], &args).stdout);
        for aws in ["--profile", "--region", "--endpoint-url"] {
            assert!(!help.contains(aws), "{cmd:?} --help lists {aws}");
        }
    }
    let help = text(&tidemark(&[], &["status", "--help"]).stdout);
    for aws in ["--profile", "--region", "--endpoint-url", "--timeout"] {
        assert!(help.contains(aws), "status --help lacks {aws}");
    }
}
