//! The exit-code contract, held by every subcommand: each one run against a
//! closed port, a black-hole port (accepts, never answers), no region, no
//! credentials and an unknown profile, asserting the exit code, the time it
//! took and that the message names the endpoint or the fix (never a Rust
//! `Debug` dump). Commands that need no AWS must not notice any of it.
//!
//! Every case of one failure kind runs at once (they mostly wait), so the
//! whole matrix takes about the longest case of each kind: about 30 s.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

const CONFIG: &str = r#"[source]
kind = "kinesis"
stream = "events"
lease_table = "tidemark-leases"

[event]
entity_field = "device_id"
timestamp_field = "ts"

[schema]
table_prefix = "events"
retention = "3650d"

[dead_letters]
kind = "file"
path = "DIR/dead-letters.jsonl"
"#;

/// How AWS is broken for one run of the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    ClosedPort,
    BlackHole,
    NoRegion,
    NoCredentials,
    UnknownProfile,
}

impl Kind {
    /// The exit status every AWS command must give, and the most time it
    /// may take.
    fn expected(self) -> (i32, Duration) {
        match self {
            Kind::ClosedPort => (69, Duration::from_secs(12)),
            Kind::BlackHole => (69, Duration::from_secs(30)),
            Kind::NoRegion | Kind::NoCredentials | Kind::UnknownProfile => {
                (78, Duration::from_secs(5))
            }
        }
    }

    /// What the message must name: the endpoint, or the fix.
    fn named(self, endpoint: &str) -> Vec<String> {
        match self {
            Kind::ClosedPort | Kind::BlackHole => {
                vec![endpoint.to_string(), "--endpoint-url".into()]
            }
            Kind::NoRegion => vec!["--region".into(), "AWS_REGION".into()],
            Kind::NoCredentials => vec!["credentials".into(), "aws sso login".into()],
            Kind::UnknownProfile => vec!["`nope`".into(), "default".into()],
        }
    }
}

/// Holds connections open and never answers; stops with the test.
fn black_hole() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c);
        }
    });
    port
}

/// A port nothing listens on: bound, then released.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Setup {
    dir: PathBuf,
    config: String,
    manifest: String,
    fixture: String,
}

fn setup(name: &str) -> Setup {
    let dir = std::env::temp_dir().join(format!("tidemark-exit-{name}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("home")).unwrap();
    // A shared config with a profile other than the one asked for.
    std::fs::write(
        dir.join("home/config"),
        "[default]\nregion = us-east-1\n[profile dev]\nregion = eu-west-1\n",
    )
    .unwrap();
    std::fs::write(dir.join("home/credentials"), "").unwrap();
    let config = dir.join("t.toml");
    std::fs::write(&config, CONFIG.replace("DIR", dir.to_str().unwrap())).unwrap();
    let manifest = dir.join("m.jsonl");
    std::fs::write(
        &manifest,
        "{\"device_id\":\"d1\",\"ts\":\"2026-11-22T05:00:00Z\",\"eventId\":\"e1\"}\n",
    )
    .unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/iot_plain.jsonl");
    Setup {
        config: config.to_str().unwrap().into(),
        manifest: manifest.to_str().unwrap().into(),
        fixture: fixture.to_str().unwrap().into(),
        dir,
    }
}

/// Every subcommand that calls AWS, with the arguments it needs.
fn aws_commands(s: &Setup) -> Vec<(&'static str, Vec<String>)> {
    let c = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        v.extend(["--config".to_string(), s.config.clone()]);
        v
    };
    let record_out = s.dir.join("recorded.jsonl");
    vec![
        ("run", c(&["run"])),
        ("status", c(&["status"])),
        ("tables list", c(&["tables", "list"])),
        ("tables ensure", c(&["tables", "ensure"])),
        ("tables rotate", c(&["tables", "rotate"])),
        ("migrate status", c(&["migrate", "status"])),
        (
            "migrate backfill",
            c(&["migrate", "backfill", "--period", "2026-11-22"]),
        ),
        (
            "migrate cutover",
            c(&["migrate", "cutover", "--period", "2026-11-22"]),
        ),
        ("produce", c(&["produce", "--count", "10"])),
        ("verify", c(&["verify", "--manifest", &s.manifest])),
        ("query latest", c(&["query", "--entity", "d1", "--latest"])),
        (
            "query range",
            c(&[
                "query",
                "--entity",
                "d1",
                "--from",
                "2026-11-22T00:00:00Z",
                "--to",
                "2026-11-22T01:00:00Z",
            ]),
        ),
        (
            "record",
            c(&["record", "--out", record_out.to_str().unwrap()]),
        ),
        ("replay", c(&["replay", "--fixture", &s.fixture])),
        (
            "consumer deregister",
            c(&["consumer", "deregister", "--yes"]),
        ),
    ]
}

/// Subcommands that need no AWS: they succeed whatever AWS does.
fn offline_commands(s: &Setup) -> Vec<(&'static str, Vec<String>)> {
    let v = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        (
            "plan",
            v(&["plan", "--events-per-sec", "100", "--item-bytes", "200"]),
        ),
        (
            "key",
            v(&[
                "key",
                "--config",
                &s.config,
                "--event",
                r#"{"device_id":"d1","ts":"2026-11-22T05:00:00Z","eventId":"e1"}"#,
            ]),
        ),
        ("config check", v(&["config", "check", &s.config])),
        ("config show", v(&["config", "show", "--config", &s.config])),
        ("completions", v(&["completions", "bash"])),
        ("man", v(&["man"])),
    ]
}

/// The environment and extra arguments of `kind`: credentials and region
/// from the environment, no instance metadata (tests talk to 127.0.0.1
/// only), shared files of the test's own.
fn invocation(kind: Kind, s: &Setup, endpoint: &str) -> (Vec<(&'static str, String)>, Vec<String>) {
    let home = s.dir.join("home");
    let mut env = vec![
        ("HOME", home.to_str().unwrap().to_string()),
        (
            "AWS_CONFIG_FILE",
            home.join("config").to_str().unwrap().into(),
        ),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            home.join("credentials").to_str().unwrap().into(),
        ),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        // `run`s of the matrix run at once: each its own metrics port.
        ("TIDEMARK__TELEMETRY__LISTEN", "127.0.0.1:0".into()),
    ];
    let creds = [
        ("AWS_ACCESS_KEY_ID", "test".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
    ];
    let mut args = vec!["--endpoint-url".to_string(), endpoint.to_string()];
    match kind {
        Kind::ClosedPort | Kind::BlackHole => {
            env.extend(creds);
            env.push(("AWS_REGION", "us-east-1".into()));
        }
        Kind::NoRegion => {
            env.extend(creds);
            // The default profile has a region: no profile file at all.
            env[1].1 = s.dir.join("none").to_str().unwrap().into();
        }
        Kind::NoCredentials => env.push(("AWS_REGION", "us-east-1".into())),
        Kind::UnknownProfile => {
            env.extend(creds);
            env.push(("AWS_REGION", "us-east-1".into()));
            args.extend(["--profile".to_string(), "nope".to_string()]);
        }
    }
    (env, args)
}

/// Runs the binary; one that has not ended 20 s past every limit is
/// killed (and fails its case).
fn run(args: &[String], env: &[(&str, String)]) -> (Output, Duration) {
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOSTNAME", "test-host")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let started = Instant::now();
    let mut child = c.args(args).spawn().unwrap();
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            r.read_to_end(&mut b).ok();
            b
        })
    };
    let stdout = pipe(Box::new(child.stdout.take().unwrap()));
    let stderr = pipe(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(50) {
            child.kill().ok();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = started.elapsed();
    let out = Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    (out, took)
}

/// Runs every command of the matrix against `kind` at once; returns the
/// rows that broke the contract.
fn matrix(kind: Kind, endpoint: &str, s: &Setup) -> Vec<String> {
    let (env, extra) = invocation(kind, s, endpoint);
    let (code, limit) = kind.expected();
    let mut cases: Vec<(&str, Vec<String>, i32, Duration)> = Vec::new();
    for (name, mut args) in aws_commands(s) {
        args.extend(extra.clone());
        cases.push((name, args, code, limit));
    }
    // Commands that need no AWS take no AWS options: the same broken AWS
    // reaches them as variables (a shell's AWS_PROFILE, AWS_ENDPOINT_URL).
    for (name, args) in offline_commands(s) {
        cases.push((name, args, 0, Duration::from_secs(5)));
    }
    let mut offline_env = env.clone();
    for pair in extra.chunks(2) {
        match pair[0].as_str() {
            "--endpoint-url" => offline_env.push(("AWS_ENDPOINT_URL", pair[1].clone())),
            "--profile" => offline_env.push(("AWS_PROFILE", pair[1].clone())),
            _ => {}
        }
    }
    let handles: Vec<_> = cases
        .into_iter()
        .map(|(name, args, code, limit)| {
            let env = if code == 0 {
                offline_env.clone()
            } else {
                env.clone()
            };
            std::thread::spawn(move || {
                let (out, took) = run(&args, &env);
                (name, code, limit, out, took)
            })
        })
        .collect();
    let mut broken = Vec::new();
    for h in handles {
        let (name, code, limit, out, took) = h.join().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let row = format!(
            "{kind:?} {name}: exit {:?} in {:.1}s (want {code} within {}s)",
            out.status.code(),
            took.as_secs_f64(),
            limit.as_secs()
        );
        eprintln!("{row}");
        if out.status.code() != Some(code) || took > limit {
            broken.push(format!("{row}\n{err}"));
            continue;
        }
        if code == 0 {
            continue;
        }
        for word in kind.named(endpoint) {
            if !err.contains(&word) {
                broken.push(format!("{row}: `{word}` not named in:\n{err}"));
            }
        }
        for dump in [
            "DispatchFailure",
            "ConnectorError",
            "hyper_util",
            "Os {",
            "unhandled error",
        ] {
            if err.contains(dump) {
                broken.push(format!("{row}: `{dump}` (a Debug dump) in:\n{err}"));
            }
        }
    }
    broken
}

#[test]
fn every_command_holds_the_exit_code_contract() {
    let s = setup("matrix");
    let closed = format!("http://127.0.0.1:{}", closed_port());
    let hole = format!("http://127.0.0.1:{}", black_hole());
    let mut broken = Vec::new();
    for (kind, endpoint) in [
        (Kind::ClosedPort, &closed),
        (Kind::NoRegion, &closed),
        (Kind::NoCredentials, &closed),
        (Kind::UnknownProfile, &closed),
        (Kind::BlackHole, &hole),
    ] {
        broken.extend(matrix(kind, endpoint, &s));
    }
    assert!(
        broken.is_empty(),
        "{} cases broke the contract:\n\n{}",
        broken.len(),
        broken.join("\n\n")
    );
    std::fs::remove_dir_all(&s.dir).ok();
}

/// `--timeout` bounds the whole command, whatever it waits for.
#[test]
fn timeout_bounds_the_whole_command() {
    let s = setup("timeout");
    let hole = format!("http://127.0.0.1:{}", black_hole());
    let (env, extra) = invocation(Kind::BlackHole, &s, &hole);
    let mut args: Vec<String> = vec![
        "status".into(),
        "--config".into(),
        s.config.clone(),
        "--timeout".into(),
        "3s".into(),
    ];
    args.extend(extra);
    let (out, took) = run(&args, &env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert!(err.contains("--timeout"), "{err}");
    std::fs::remove_dir_all(&s.dir).ok();
}

/// `replay` exits 1 when records were dead-lettered, after its summary.
#[test]
fn replay_with_dead_letters_exits_1() {
    let s = setup("replay");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/malformed.jsonl");
    // Every record is unroutable here (no such fields): dead-lettered
    // before any write, so AWS is never called.
    let config = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace("device_id", "no_such_field");
    std::fs::write(&s.config, config).unwrap();
    let (env, args) = invocation(Kind::ClosedPort, &s, "http://127.0.0.1:9");
    let mut all = vec![
        "replay".to_string(),
        "--config".into(),
        s.config.clone(),
        "--fixture".into(),
        fixture.to_str().unwrap().into(),
    ];
    all.extend(args);
    let (out, _) = run(&all, &env);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("dead-lettered"), "{text}");
    std::fs::remove_dir_all(&s.dir).ok();
}
