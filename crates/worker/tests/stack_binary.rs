//! The real `tidemark` binary against the local stack: a run stopped by
//! SIGTERM mid-stream and started again loses nothing and stores nothing
//! twice; `key` names exactly the item `run` wrote; `query` returns exactly
//! the stored events of a range, in time order. With DynamoDB behind a
//! [`FaultProxy`]: a stop while DynamoDB refuses connections or hangs ends
//! within `shutdown_timeout` + 5 s, non-zero, and a restart loses nothing;
//! AccessDenied on writes stops the worker within 10 s, non-zero, with the
//! cause in the log and on `/healthz`; so does a dead letter that can be
//! written nowhere. The shard migration's commands (`migrate status`,
//! `backfill`, `cutover`) and `query` at each of its steps.
//!
//! A stack test (see docs/testing.md) that lives in this crate rather than in
//! `tests/`: only this crate's tests can name the built binary
//! (`CARGO_BIN_EXE_tidemark`). Ignored unless the crate's `stack` feature is on.

// Helpers outside #[test] fns: a panic there is a failed assertion too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, Select};
use serde_json::Value;
use tidemark_tests::fault_proxy::{Fault, FaultProxy};
use tidemark_tests::{LocalStack, unique_name};

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

struct Env {
    stack: LocalStack,
    dir: PathBuf,
    config: PathBuf,
    prefix: String,
    port: u16,
}

impl Env {
    fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env("TIDEMARK_CONFIG", &self.config)
            .env("AWS_ENDPOINT_URL_KINESIS", &self.stack.kinesis_url)
            .env("AWS_ENDPOINT_URL_DYNAMODB", &self.stack.dynamodb_url)
            .env("AWS_ENDPOINT_URL_SQS", &self.stack.sqs_url)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("RUST_BACKTRACE")
            .env("RUST_LOG", "info");
        c
    }

    fn output(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "tidemark {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn spawn_run(&self, log: &Path) -> Child {
        self.spawn_run_with_dynamodb(log, &self.stack.dynamodb_url)
    }

    /// `run` with DynamoDB at `dynamodb_url` (a [`FaultProxy`]).
    fn spawn_run_with_dynamodb(&self, log: &Path, dynamodb_url: &str) -> Child {
        self.cmd()
            .arg("run")
            .env("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_url)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap()
    }

    /// `produce` of `count` events into the configured source, with a manifest.
    fn produce(&self, count: u64, manifest: &Path) {
        self.produce_with(&[], count, manifest);
    }

    /// [`Env::produce`] with more arguments (`--stream NAME`).
    fn produce_with(&self, extra: &[&str], count: u64, manifest: &Path) {
        let out = self
            .cmd()
            .args(["produce", "--count", &count.to_string(), "--devices", "10"])
            .args(extra)
            .args(["--rate", "2000", "--quiet", "--manifest"])
            .arg(manifest)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "produce: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Every event of `manifest` is stored (`verify`).
    fn assert_all_stored(&self, manifest: &Path, count: u64) {
        let out = self.output(&["verify", "--manifest", manifest.to_str().unwrap(), "--json"]);
        let report: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["found"], count, "{report}");
    }

    /// GET `path` on the telemetry port: (status line, body), or None when
    /// nothing answers.
    async fn get(&self, path: &str) -> Option<String> {
        let url = format!("127.0.0.1:{}", self.port);
        let mut s = tokio::net::TcpStream::connect(&url).await.ok()?;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).await.ok()?;
        Some(body)
    }

    async fn metric(&self, name: &str) -> u64 {
        let Some(body) = self.get("/metrics").await else {
            return 0;
        };
        body.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// SIGTERM, then the exit status within `limit`.
fn terminate(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            start.elapsed() < limit,
            "worker did not exit within {limit:?} of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `stored=N` of the worker's final log line.
fn stored_in_log(log: &Path) -> u64 {
    let text = std::fs::read_to_string(log).unwrap();
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("tidemark stopped"))
        .unwrap_or_else(|| panic!("no final log line in {}:\n{text}", log.display()));
    let v: Value = serde_json::from_str(line).unwrap();
    v["fields"]["stored"].as_u64().unwrap()
}

async fn setup() -> Env {
    setup_with(2, "", |source| source).await
}

/// A Kinesis worker on a new stream of `shards` shards, with `top` before
/// the config's sections and its `[source]` section changed by `source`.
async fn setup_with(shards: i32, top: &str, source: impl FnOnce(String) -> String) -> Env {
    let stack = tidemark_tests::stack().await;
    let name = unique_name("e2e");
    let source = source(tidemark_tests::worker::kinesis_source(&name));
    let env = setup_source(stack, &name, top, &source);
    tidemark_tests::create_stream(&env.stack.kinesis(), &name, shards).await;
    env
}

/// A worker config for `source` (a whole `[source]` section), `top` first.
fn setup_source(stack: LocalStack, name: &str, top: &str, source: &str) -> Env {
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = name.to_string();
    let port = free_port();
    let config = dir.join("tidemark.toml");
    let toml = tidemark_tests::worker::test_toml(
        source,
        &prefix,
        &dir.join("dead.jsonl"),
        &format!("127.0.0.1:{port}"),
    );
    std::fs::write(&config, format!("{top}\n{toml}")).unwrap();
    Env {
        stack,
        dir,
        config,
        prefix,
        port,
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sigterm_mid_stream_then_restart_loses_and_duplicates_nothing() {
    let env = setup_with(2, "", no_failover_under_load).await;
    let manifest = stop_mid_stream_then_restart(&env).await;
    key_and_query_name_what_run_wrote(&env, &manifest).await;
}

/// The same in fan-out mode, with subscriptions renewed every 5 s; the
/// stream consumer stays registered after both runs until `tidemark
/// consumer deregister --yes` removes it.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn fan_out_sigterm_mid_stream_then_restart_loses_and_duplicates_nothing() {
    let env = setup_with(2, "", |source| {
        format!(
            "{}read_mode = \"fan_out\"\nsubscription_renewal = \"5s\"\n",
            no_failover_under_load(source)
        )
    })
    .await;
    stop_mid_stream_then_restart(&env).await;
    let refused = env.cmd().args(["consumer", "deregister"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--yes"));
    let out = env.output(&["consumer", "deregister", "--yes"]);
    assert!(out.contains("deregistered"), "{out}");
    // Deregistering takes a moment; meanwhile the command says so.
    let start = Instant::now();
    loop {
        let again = env
            .cmd()
            .args(["consumer", "deregister", "--yes"])
            .output()
            .unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&again.stdout),
            String::from_utf8_lossy(&again.stderr),
        );
        if again.status.success() {
            assert!(out.contains("was not registered"), "{out}");
            break;
        }
        assert!(err.contains("not ACTIVE"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(20), "still deleting");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A failover time of 10 s instead of 3 s: a graceful stop releases its
/// leases, so the restart takes them at once either way, but with 3 s a
/// renewal delayed by a loaded machine lost a lease mid-run and its
/// records were read and stored twice, which these tests count.
fn no_failover_under_load(source: String) -> String {
    source.replace("failover_time = \"3s\"", "failover_time = \"10s\"")
}

/// Produces 3,000 events while a run is stopped by SIGTERM a third of the
/// way, then a second run finishes: each run's stored count adds up to
/// exactly the events, and `verify` finds every one. Returns the manifest.
async fn stop_mid_stream_then_restart(env: &Env) -> PathBuf {
    const EVENTS: u64 = 3000;
    let manifest = env.dir.join("produced.jsonl");
    // First run: stopped once a third is stored. The producer starts once
    // it reads (holds its leases; in fan-out, its consumer is ACTIVE, which
    // takes seconds on a loaded machine), so the stop falls mid-stream.
    let log1 = env.dir.join("run1.log");
    let mut run1 = env.spawn_run(&log1);
    let start = Instant::now();
    while env.metric("tidemark_consumer_leases_held").await < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "first run took no leases"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The producer keeps writing (paced) while the first run is stopped, so
    // the stop really falls mid-stream.
    let mut producer = env
        .cmd()
        .args([
            "produce",
            "--count",
            &EVENTS.to_string(),
            "--devices",
            "20",
            "--hot-factor",
            "5",
        ])
        .args([
            "--rate",
            "500",
            "--concurrency",
            "1",
            "--quiet",
            "--manifest",
        ])
        .arg(&manifest)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();

    let start = Instant::now();
    while env.metric("tidemark_writer_items_stored_total").await < EVENTS / 3 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "first run stored too little"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = terminate(&mut run1, Duration::from_secs(30));
    assert!(status.success(), "first run exit: {status}");
    let stored1 = stored_in_log(&log1);
    assert!(
        stored1 < EVENTS,
        "the first run was stopped mid-stream ({stored1} stored)"
    );
    assert!(producer.wait().unwrap().success(), "producer failed");

    // Second run finishes the stream.
    let log2 = env.dir.join("run2.log");
    let mut run2 = env.spawn_run(&log2);
    let start = Instant::now();
    while stored1 + env.metric("tidemark_writer_items_stored_total").await < EVENTS {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "second run did not finish the stream"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = terminate(&mut run2, Duration::from_secs(30));
    assert!(status.success(), "second run exit: {status}");
    let stored2 = stored_in_log(&log2);

    // Nothing twice: a graceful stop checkpoints every stored record, so the
    // second run stores exactly the rest.
    assert_eq!(
        stored1 + stored2,
        EVENTS,
        "run 1 stored {stored1}, run 2 stored {stored2}"
    );
    // Nothing lost: every event is there, with its content.
    let out = env.output(&["verify", "--manifest", manifest.to_str().unwrap(), "--json"]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["found"], EVENTS, "{report}");
    // And nothing else: the table holds exactly the events.
    let table = format!("{}_{}", env.prefix, first_event_day(&manifest));
    let count = env
        .stack
        .dynamodb()
        .scan()
        .table_name(&table)
        .select(Select::Count)
        .send()
        .await
        .unwrap()
        .count();
    assert_eq!(count as u64, EVENTS);
    assert!(
        !env.dir.join("dead.jsonl").exists(),
        "no dead letters expected"
    );
    manifest
}

/// `key` and `query` name exactly what `run` stored of `manifest`.
async fn key_and_query_name_what_run_wrote(env: &Env, manifest: &Path) {
    // `key` names exactly the item `run` wrote.
    let line = std::fs::read_to_string(manifest)
        .unwrap()
        .lines()
        .nth(17)
        .unwrap()
        .to_string();
    let key: Value = serde_json::from_str(&env.output(&["key", "--event", &line])).unwrap();
    let got = env
        .stack
        .dynamodb()
        .get_item()
        .table_name(key["table"].as_str().unwrap())
        .key("pk", AttributeValue::S(key["pk"].as_str().unwrap().into()))
        .key("sk", AttributeValue::S(key["sk"].as_str().unwrap().into()))
        .send()
        .await
        .unwrap();
    let item = got.item().expect("the item `key` names exists");
    let event: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        item["event_id"].as_s().unwrap(),
        event["eventId"].as_str().unwrap()
    );
    assert_eq!(
        item["temperature"].as_n().unwrap(),
        &event["temperature"].to_string()
    );

    // `query` returns exactly the stored events of a range, in time order.
    let events: Vec<Value> = std::fs::read_to_string(manifest)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &Value| e["deviceId"] == "device-0000")
        .collect();
    let mut times: Vec<&str> = events
        .iter()
        .map(|e| e["timestamp"].as_str().unwrap())
        .collect();
    times.sort();
    let (from, to) = (times[times.len() / 4], times[times.len() * 3 / 4]);
    let mut expected: Vec<(String, String)> = events
        .iter()
        .filter(|e| {
            let t = e["timestamp"].as_str().unwrap();
            from <= t && t <= to
        })
        .map(|e| {
            (
                e["timestamp"].as_str().unwrap().to_string(),
                e["eventId"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    expected.sort();
    let out = env.output(&[
        "query",
        "--entity",
        "device-0000",
        "--from",
        from,
        "--to",
        to,
    ]);
    let got: Vec<(String, String)> = out
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["ts"].as_str().unwrap().to_string(),
                v["event_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(
        got, expected,
        "query returns exactly the range, oldest first"
    );
}

fn first_event_day(manifest: &Path) -> String {
    let line = std::fs::read_to_string(manifest)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let v: Value = serde_json::from_str(&line).unwrap();
    v["timestamp"].as_str().unwrap()[..10].to_string()
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn replay_stores_a_fixture_and_status_lists_its_table() {
    let env = setup().await;
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/iot_plain.jsonl");
    let records = std::fs::read_to_string(&fixture).unwrap().lines().count();
    let out = env
        .cmd()
        .args(["replay", "--quiet", "--fixture"])
        .arg(&fixture)
        // The fixture's own field names, and a retention that covers its dates.
        .env("TIDEMARK__EVENT__ENTITY_FIELD", "device_id")
        .env("TIDEMARK__EVENT__TIMESTAMP_FIELD", "ts")
        .env("TIDEMARK__SCHEMA__RETENTION", "3650d")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("{records} stored, 0 dead-lettered")),
        "{text}"
    );

    let status: Value = serde_json::from_str(
        &env.cmd()
            .args(["status", "--json"])
            .env("TIDEMARK__SCHEMA__RETENTION", "3650d")
            .output()
            .map(|o| String::from_utf8(o.stdout).unwrap())
            .unwrap(),
    )
    .unwrap();
    let tables = status["tables"].as_array().unwrap();
    assert!(!tables.is_empty(), "{status}");
    let mut total = 0;
    for t in tables {
        assert!(t["name"].as_str().unwrap().starts_with(&env.prefix));
        let count = env
            .stack
            .dynamodb()
            .scan()
            .table_name(t["name"].as_str().unwrap())
            .select(Select::Count)
            .send()
            .await
            .unwrap()
            .count();
        total += count as usize;
    }
    assert_eq!(total, records, "every fixture record stored once");
}

/// The stop bound of the fault tests: short, so the tests are too.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(8);

/// Events stored, then DynamoDB breaks (`fault`), with `in_flight` more
/// events read but not stored, then SIGTERM: the worker exits within
/// `shutdown_timeout` + 5 s, non-zero (the drain could not finish: final
/// writes or checkpoint and lease release), and a restart with DynamoDB
/// back stores every event.
async fn stop_while_dynamodb(fault: Fault, in_flight: u64) {
    let env = setup_with(
        1,
        &format!("shutdown_timeout = \"{}s\"", SHUTDOWN_TIMEOUT.as_secs()),
        // A failover time long enough that the worker, unable to renew,
        // does not give its lease up before it read the new events.
        |source| {
            source.replace("failover_time = \"3s\"", "failover_time = \"15s\"")
                + "shutdown_grace = \"2s\"\n"
        },
    )
    .await;
    let proxy = FaultProxy::start(&env.stack.dynamodb_url).await;
    let (first, second) = (env.dir.join("first.jsonl"), env.dir.join("second.jsonl"));
    env.produce(200, &first);
    let log1 = env.dir.join("run1.log");
    let mut run1 = env.spawn_run_with_dynamodb(&log1, &proxy.url);
    let start = Instant::now();
    while env.metric("tidemark_writer_items_stored_total").await < 200 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "first events not stored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.set(fault);
    if in_flight > 0 {
        env.produce(in_flight, &second);
    }
    // The new events are read, so the writer holds them when the stop comes.
    let start = Instant::now();
    while env.metric("tidemark_records_read_total").await < 200 + in_flight {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "new events not read"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stopping = Instant::now();
    let status = terminate(&mut run1, SHUTDOWN_TIMEOUT + Duration::from_secs(5));
    let took = stopping.elapsed();
    let log = std::fs::read_to_string(&log1).unwrap();
    assert!(
        !status.success(),
        "a stop that could not finish exits non-zero:\n{log}"
    );
    // With writes in flight the drain hangs until shutdown_timeout; without,
    // it ends once the grace is over (the final checkpoint and release are
    // retried until then) but they failed.
    let why = if in_flight > 0 {
        "error: shutdown_timeout"
    } else {
        "error: shutdown incomplete"
    };
    assert!(log.contains(why), "the log says `{why}`:\n{log}");
    eprintln!("{fault:?}: stopped in {took:?} with {status}");

    proxy.set(Fault::Pass);
    env.assert_all_stored(&first, 200);
    if in_flight == 0 {
        return;
    }
    let log2 = env.dir.join("run2.log");
    let mut run2 = env.spawn_run_with_dynamodb(&log2, &proxy.url);
    let start = Instant::now();
    // Once its leases are back (the first run's expire after failover_time).
    while env.metric("tidemark_writer_items_stored_total").await < in_flight {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the restart stored too little"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = terminate(&mut run2, Duration::from_secs(30));
    assert!(status.success(), "second run exit: {status}");
    env.assert_all_stored(&second, in_flight);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sigterm_while_dynamodb_refuses_connections_exits_in_time_and_loses_nothing() {
    stop_while_dynamodb(Fault::Refuse, 100).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sigterm_after_every_event_stored_while_dynamodb_refuses_is_not_a_clean_stop() {
    stop_while_dynamodb(Fault::Refuse, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn sigterm_while_dynamodb_hangs_exits_in_time_and_loses_nothing() {
    stop_while_dynamodb(Fault::Hang, 100).await;
}

/// A worker on a new SQS queue (quick polls, a short grace); its queue URL.
async fn sqs_env(prefix: &str) -> (Env, String) {
    let stack = tidemark_tests::stack().await;
    let name = unique_name(prefix);
    let queue = tidemark_tests::create_queue(&stack.sqs(), &name, false).await;
    let source = format!(
        "[source]\nkind = \"sqs\"\nqueue_url = \"{queue}\"\nwait_time = \"1s\"\n\
         visibility_timeout = \"10s\"\nheartbeat_margin = \"3s\"\nshutdown_grace = \"3s\"\n"
    );
    (setup_source(stack, &name, "", &source), queue)
}

/// A dead letter that can be written nowhere (a file destination in a
/// directory that does not exist): the worker exits non-zero within 10 s,
/// the log names the cause, and the poison message is not deleted.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_dead_letter_that_cannot_be_written_stops_the_worker() {
    let (env, queue) = sqs_env("e2e-deadfail").await;
    let config = std::fs::read_to_string(&env.config).unwrap();
    let dead = env.dir.join("dead.jsonl");
    let nowhere = env.dir.join("no-such-dir/dead.jsonl");
    std::fs::write(
        &env.config,
        config.replace(&dead.display().to_string(), &nowhere.display().to_string()),
    )
    .unwrap();
    let log = env.dir.join("run.log");
    let mut run = env.spawn_run(&log);
    let sqs = env.stack.sqs();
    tidemark_tests::send_messages(&sqs, &queue, &[(None, "{not json".to_string())]).await;
    let sent = Instant::now();
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "the worker still runs 10 s after the poison message:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "dead letter nowhere: exited {:?} after the message, with {status}",
        sent.elapsed()
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "exit status {status}:\n{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("fatal error") && l.contains("no-such-dir")),
        "a log line names the cause:\n{text}"
    );
    let (visible, in_flight) = tidemark_tests::queue_counts(&sqs, &queue).await;
    assert_eq!(visible + in_flight, 1, "the poison message is not deleted");
}

/// AccessDenied on every DynamoDB call once events flow (SQS source, so the
/// writer is the only DynamoDB user that matters): the worker exits
/// non-zero within 10 s, the log names the cause, `/healthz` reports it
/// while stopping, and a restart stores the events it left.
/// AWS answers at first (DynamoDB: the tables, the coordinator table, the
/// lease table), then the source's own start hangs (Kinesis accepts and
/// never answers DescribeStreamSummary): the start-up deadline still
/// holds. Meanwhile `/healthz` answers `starting` and `/readyz` says the
/// source is not running; at `--give-up-after` the worker exits 69 with a
/// line naming the Kinesis call and its endpoint.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_source_start_that_hangs_exits_69_at_the_start_up_deadline() {
    let env = setup().await;
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hole_url = format!("http://{}", hole.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in hole.incoming() {
            held.push(c);
        }
    });
    let log = env.dir.join("start.log");
    let mut run = env
        .cmd()
        .args(["run", "--give-up-after", "6s"])
        .env("AWS_ENDPOINT_URL_KINESIS", &hole_url)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let (mut health, mut ready) = (None, None);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = run.kill();
            panic!(
                "still running 30 s after start, its source waiting for Kinesis:\n{}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        // What the endpoints say while the source starts (the DynamoDB
        // probe behind /readyz has answered by 3 s).
        if start.elapsed() > Duration::from_secs(3) {
            if let Some(page) = env.get("/healthz").await {
                health = Some(page);
            }
            if let Some(page) = env.get("/readyz").await {
                ready = Some(page);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = start.elapsed();
    let text = std::fs::read_to_string(&log).unwrap();
    eprintln!("exited {status} after {took:?}");
    assert_eq!(status.code(), Some(69), "{text}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(
        text.lines()
            .any(|l| l.contains("Kinesis") && l.contains(&hole_url)),
        "a line names the Kinesis call and its endpoint:\n{text}"
    );
    let health = health.expect("/healthz answered while the source started");
    assert!(
        health.contains(" 200 ") && health.contains("starting"),
        "{health}"
    );
    let ready = ready.expect("/readyz answered while the source started");
    assert!(
        ready.contains(" 503 ") && ready.contains("source_running=false"),
        "{ready}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn access_denied_on_writes_stops_the_worker_within_10s() {
    let (env, _) = sqs_env("e2e-denied").await;
    let proxy = FaultProxy::start(&env.stack.dynamodb_url).await;
    let (first, second) = (env.dir.join("first.jsonl"), env.dir.join("second.jsonl"));
    let log1 = env.dir.join("run1.log");
    let mut run1 = env.spawn_run_with_dynamodb(&log1, &proxy.url);
    env.produce(50, &first);
    let start = Instant::now();
    while env.metric("tidemark_writer_items_stored_total").await < 50 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "first events not stored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.set(Fault::Deny);
    let denied = Instant::now();
    env.produce(20, &second);
    let mut health_said = None;
    let status = loop {
        if let Some(status) = run1.try_wait().unwrap() {
            break status;
        }
        assert!(
            denied.elapsed() < Duration::from_secs(10),
            "the worker still runs 10 s after AccessDenied:\n{}",
            std::fs::read_to_string(&log1).unwrap()
        );
        if let Some(page) = env.get("/healthz").await
            && page.contains(" 503 ")
        {
            health_said.get_or_insert(page);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!(
        "AccessDenied: exited {:?} after the switch, with {status}",
        denied.elapsed()
    );
    let log = std::fs::read_to_string(&log1).unwrap();
    assert!(!status.success(), "exit status {status}:\n{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("fatal error") && l.contains("AccessDeniedException")),
        "a log line names the cause:\n{log}"
    );
    let page = health_said.expect("/healthz reported the fatal error while stopping");
    assert!(page.contains("AccessDeniedException"), "{page}");

    proxy.set(Fault::Pass);
    let log2 = env.dir.join("run2.log");
    let mut run2 = env.spawn_run_with_dynamodb(&log2, &proxy.url);
    let start = Instant::now();
    while env.metric("tidemark_writer_items_stored_total").await < 20 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the restart stored too little"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = terminate(&mut run2, Duration::from_secs(30));
    assert!(status.success(), "second run exit: {status}");
    env.assert_all_stored(&first, 50);
    env.assert_all_stored(&second, 20);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn status_of_200_shards_with_ecs_owners_is_aligned_and_fast() {
    use tidemark_consumer::lease::{Checkpoint, Lease, LeaseTable};
    let env = setup().await;
    let config =
        tidemark_worker::config::Config::load(Some(&env.config), &Default::default()).unwrap();
    let tidemark_worker::config::SourceConfig::Kinesis(k) = &config.source else {
        panic!("kinesis expected")
    };
    let leases = LeaseTable::new(env.stack.dynamodb(), k.lease_table.clone());
    leases
        .create_if_absent(Duration::from_secs(30))
        .await
        .unwrap();
    // Owners of 36 characters (a UUID, as ECS task ids); a few shards unowned.
    let owner = |i: usize| format!("{:08x}-1234-5678-9abc-{:012x}", i % 4, i % 4);
    let seq = "49656964593812345678901234567890123456789012345678901234";
    for i in 0..200 {
        let mut l = Lease::new(
            format!("shardId-{i:012}"),
            Checkpoint::At(tidemark_consumer::kinesis::Position::new(seq, 0)),
            Vec::new(),
        );
        l.owner = (i % 50 != 0).then(|| owner(i));
        assert!(leases.create_lease(&l).await.unwrap());
    }
    let started = Instant::now();
    let text = env.output(&["status"]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "status took {took:?}");
    eprintln!("status of 200 shards took {took:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("200 shards (0 finished), 4 unowned, 4 workers"),
        "{text}"
    );
    let header = lines[1];
    let (owner_at, cp_at) = (
        header.find("OWNER").unwrap(),
        header.find("CHECKPOINT").unwrap(),
    );
    let shard_lines: Vec<&&str> = lines[2..]
        .iter()
        .take_while(|l| l.starts_with("shardId-"))
        .collect();
    assert_eq!(shard_lines.len(), 200, "{text}");
    for l in shard_lines {
        let chars: Vec<char> = l.chars().collect();
        assert_eq!(chars[owner_at - 1], ' ', "{l}");
        assert!(chars[owner_at] == '0' || chars[owner_at] == '(', "{l}");
        assert_eq!(chars[cp_at - 1], ' ', "{l}");
        assert_eq!(chars[cp_at], '…', "checkpoint shortened: {l}");
    }
    assert_eq!(owner(7).len(), 36);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn verify_of_events_never_stored_exits_1() {
    let env = setup().await;
    env.output(&["tables", "ensure"]);
    let manifest = env.dir.join("never.jsonl");
    let now = chrono::Utc::now().to_rfc3339();
    std::fs::write(
        &manifest,
        format!("{{\"deviceId\":\"d1\",\"timestamp\":\"{now}\",\"eventId\":\"never\"}}\n"),
    )
    .unwrap();
    let out = env
        .cmd()
        .args(["verify", "--manifest"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("missing 1"));
}

/// `tables list` shows each table's billing mode, class, capacity or
/// ceiling and estimated monthly cost at the planner's list prices, or at
/// the prices given. (Fails before the listing priced tables: no
/// `billing`, `table_class` or `monthly_usd`.)
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn tables_list_shows_billing_class_and_monthly_cost() {
    let env = setup().await;
    env.output(&["tables", "ensure"]);
    let list = |extra: &[&str]| -> Vec<Value> {
        let mut args = vec!["tables", "list", "-o", "json"];
        args.extend(extra);
        let v: Value = serde_json::from_str(&env.output(&args)).unwrap();
        v.as_array().unwrap().clone()
    };
    let tables = list(&[]);
    assert!(!tables.is_empty());
    for t in &tables {
        assert_eq!(t["billing"], "provisioned", "{t}");
        assert_eq!(t["table_class"], "standard", "{t}");
        let c = &t["capacity"];
        let (r, w) = (c["read"].as_f64().unwrap(), c["write"].as_f64().unwrap());
        let gb = t["size_bytes"].as_f64().unwrap() / 1e9;
        let expect = (r * 0.00013 + w * 0.00065) * 730.0 + gb * 0.25;
        let got = t["monthly_usd"].as_f64().unwrap();
        assert!((got - expect).abs() < 0.01, "{got} != {expect}: {t}");
        assert!(w > 0.0, "{t}");
    }
    // The planner's prices: capacity free, only reads and storage left.
    for t in list(&["--price", "provisioned_wcu_hour=0"]) {
        let c = &t["capacity"];
        let gb = t["size_bytes"].as_f64().unwrap() / 1e9;
        let expect = c["read"].as_f64().unwrap() * 0.00013 * 730.0 + gb * 0.25;
        assert!(
            (t["monthly_usd"].as_f64().unwrap() - expect).abs() < 0.01,
            "{t}"
        );
    }
    let text = env.output(&["tables", "list"]);
    let header = text.lines().next().unwrap_or_default();
    for col in ["BILLING", "CLASS", "CEILING", "USD/MONTH"] {
        assert!(header.contains(col), "{col}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn status_shows_the_lag_each_worker_reported_without_reading_the_stream() {
    let env = setup().await;
    let manifest = env.dir.join("produced.jsonl");
    env.produce(200, &manifest);
    let log = env.dir.join("run.log");
    let mut run = env.spawn_run(&log);
    let status =
        || -> Value { serde_json::from_str(&env.output(&["status", "-o", "json"])).unwrap() };
    // The first report is written at start (nothing read yet), the next one
    // a report interval later with the lag of each shard read.
    let deadline = Instant::now() + tidemark_worker::REPORT_INTERVAL + Duration::from_secs(30);
    let snap = loop {
        let snap = status();
        let shards = snap["shards"].as_array().cloned().unwrap_or_default();
        if shards.len() == 2 && shards.iter().all(|s| s["lag_ms"].is_i64()) {
            break snap;
        }
        assert!(Instant::now() < deadline, "no reported lag: {snap}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for s in snap["shards"].as_array().unwrap() {
        assert_eq!(s["owner"], "e2e-worker", "{snap}");
        assert!(s["lag_ms"].as_i64().unwrap() >= 0, "{snap}");
        assert!(s["lag_error"].is_null(), "{snap}");
        // Every record stored and checkpointed within a few seconds: the
        // owner reports the shard's checkpoint lag, bounded.
        let ckpt = &s["checkpoint_lag"];
        assert!(ckpt["records"].as_u64().unwrap() <= 200, "{snap}");
        assert!(ckpt["ms"].as_i64().unwrap() < 60_000, "{snap}");
    }
    assert!(snap["reports_error"].is_null(), "{snap}");
    assert_eq!(
        env.metric("tidemark_consumer_get_records_throttled_total")
            .await,
        0,
        "status made no reads competing with the worker's"
    );
    let exit = terminate(&mut run, Duration::from_secs(30));
    assert!(exit.success(), "run exit: {exit}");
    // A clean stop deletes the worker's report: no stale lag afterwards.
    let after = status();
    for s in after["shards"].as_array().unwrap() {
        assert!(s["lag_ms"].is_null(), "{after}");
        assert!(s["checkpoint_lag"].is_null(), "{after}");
    }
    env.assert_all_stored(&manifest, 200);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn status_of_an_sqs_source_shows_depth_and_the_oldest_message_age_workers_saw() {
    let (env, queue) = sqs_env("e2e-sqs-status").await;
    let sqs = env.stack.sqs();
    let now_ms = chrono::Utc::now().timestamp_millis();
    let events: Vec<(Option<String>, String)> = (0..50)
        .map(|i| {
            (
                None,
                format!(
                    r#"{{"deviceId":"d{}","timestamp":{now_ms},"eventId":"e{i}","n":{i}}}"#,
                    i % 5
                ),
            )
        })
        .collect();
    tidemark_tests::send_messages(&sqs, &queue, &events).await;
    let log = env.dir.join("run.log");
    let mut run = env.spawn_run(&log);
    let deadline = Instant::now() + tidemark_worker::REPORT_INTERVAL + Duration::from_secs(30);
    let snap = loop {
        let snap: Value = serde_json::from_str(&env.output(&["status", "-o", "json"])).unwrap();
        if snap["queue"]["oldest_age_ms"].is_i64() {
            break snap;
        }
        assert!(Instant::now() < deadline, "no reported queue age: {snap}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(snap["queue"]["visible"].is_u64(), "{snap}");
    assert!(
        snap["queue"]["oldest_age_ms"].as_i64().unwrap() >= 0,
        "{snap}"
    );
    let exit = terminate(&mut run, Duration::from_secs(30));
    assert!(exit.success(), "run exit: {exit}");
}

/// The migration commands through the binary: a 4-shard table with items;
/// `run` started with 8 shards and `schema.migrate_from` makes it dual;
/// `migrate status`, `migrate backfill` (progress as JSON), `migrate
/// cutover`; `query` returns each entity's events exactly once at each step.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn migrate_status_backfill_cutover_and_query_through_the_binary() {
    use tidemark_schema::Origin;
    use tidemark_schema::route::Router;
    let env = setup().await;
    let migration = [
        ("TIDEMARK__SCHEMA__KEY__SHARDS", "8"),
        ("TIDEMARK__SCHEMA__MIGRATE_FROM__STRATEGY", "time_bucket"),
        ("TIDEMARK__SCHEMA__MIGRATE_FROM__SHARDS", "4"),
        ("TIDEMARK__SCHEMA__MIGRATE_FROM__BUCKET", "hour"),
    ];
    let with = |args: &[&str]| {
        let out = env.cmd().args(args).envs(migration).output().unwrap();
        assert!(
            out.status.success(),
            "tidemark {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    env.output(&["tables", "ensure"]);
    // 60 events of 6 devices written at 4 shards, as `run` writes them.
    let config = tidemark_worker::config::Config::load(
        Some(&env.config),
        &std::collections::BTreeMap::new(),
    )
    .unwrap();
    let router = Router::new(config.schema.clone()).unwrap();
    let ddb = env.stack.dynamodb();
    let now = chrono::Utc::now();
    let at = now - chrono::Duration::seconds(120);
    let at = if at.date_naive() == now.date_naive() {
        at
    } else {
        now
    };
    let origin = Origin::Sqs {
        queue: "q".into(),
        message_id: "m".into(),
        index: 0,
    };
    let mut table = String::new();
    for i in 0..60 {
        let ts = (at + chrono::Duration::milliseconds(i)).to_rfc3339();
        let event = format!(
            r#"{{"deviceId":"dev-{}","timestamp":"{ts}","eventId":"ev-{i}"}}"#,
            i % 6
        );
        let routed = router
            .route(
                event.as_bytes(),
                &origin,
                0,
                now,
                &mut tidemark_schema::RouteCache::default(),
            )
            .unwrap()
            .new;
        table = routed.table.to_string();
        ddb.put_item()
            .table_name(&table)
            .set_item(Some(routed.item.to_item().unwrap()))
            .send()
            .await
            .unwrap();
    }
    let period = table.rsplit('_').next().unwrap().to_string();
    let (from, to) = (
        (at - chrono::Duration::seconds(1)).to_rfc3339(),
        (at + chrono::Duration::seconds(1)).to_rfc3339(),
    );
    let reads_exactly = |args_env: &dyn Fn(&[&str]) -> String, stage: &str| {
        for d in 0..6 {
            let entity = format!("dev-{d}");
            let out = args_env(&["query", "--entity", &entity, "--from", &from, "--to", &to]);
            let ids: Vec<String> = out
                .lines()
                .map(|l| {
                    let v: Value = serde_json::from_str(l).unwrap();
                    v["event_id"].as_str().unwrap().to_string()
                })
                .collect();
            let want: Vec<String> = (0..60)
                .filter(|i| i % 6 == d)
                .map(|i| format!("ev-{i}"))
                .collect();
            assert_eq!(ids, want, "{stage}: {entity}, in time order, once each");
        }
    };
    let status = |stage: &str| -> String {
        let out = with(&["migrate", "status", "--output", "json"]);
        let rows: Value = serde_json::from_str(&out).unwrap();
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["table"] == table.as_str())
            .unwrap_or_else(|| panic!("{stage}: {table} in {rows}"));
        row["migration"].as_str().unwrap().to_string()
    };
    assert_eq!(status("before"), "old-only");
    reads_exactly(&|a: &[&str]| env.output(a), "before");

    // `run` with the migration: the table becomes dual at start.
    let log = env.dir.join("run.log");
    let mut run = env
        .cmd()
        .arg("run")
        .envs(migration)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    tidemark_tests::wait_until("the table is dual", Duration::from_secs(30), || async {
        (status("start") == "dual").then_some(())
    })
    .await;
    reads_exactly(&with, "dual");
    let out = with(&["migrate", "backfill", "--period", &period, "--quiet"]);
    let done: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(done["done"], true, "{done}");
    assert!(done["copied"].as_u64().unwrap() > 0, "{done}");
    assert_eq!(status("backfilled"), "backfilled");
    reads_exactly(&with, "backfilled");
    let out = with(&["migrate", "cutover", "--period", &period]);
    assert!(out.contains("new-only"), "{out}");
    assert_eq!(status("cut over"), "new-only");
    reads_exactly(&with, "cut over");
    Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .unwrap();
    run.wait().unwrap();
}

/// `source.streams` through the binary: `produce --stream` into each
/// stream, `run` reads both, `status` lists each lease by its multi-stream
/// key with the lag its owner reported, `/metrics` names the stream, and
/// `verify --stream` checks each manifest with its stream's own mapping
/// (stream b stores its events without `humidity`: the shared mapping's
/// items would differ).
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn several_streams_through_produce_run_status_and_verify() {
    let stack = tidemark_tests::stack().await;
    let name = unique_name("e2ems");
    let (a, b) = (format!("{name}-a"), format!("{name}-b"));
    for s in [&a, &b] {
        tidemark_tests::create_stream(&stack.kinesis(), s, 1).await;
    }
    let source = format!(
        r#"[source]
kind = "kinesis"
lease_table = "{name}-leases"
worker_id = "e2e-worker"
failover_time = "3s"
checkpoint_interval = "1s"
streams = [
  {{ stream = "{a}" }},
  {{ stream = "{b}", event = {{ exclude = ["humidity"] }} }},
]
"#
    );
    let env = setup_source(stack, &name, "", &source);
    let manifest = |s: &str| env.dir.join(format!("{s}.jsonl"));
    for s in [&a, &b] {
        env.produce_with(&["--stream", s], 100, &manifest(s));
    }
    let log = env.dir.join("run.log");
    let mut run = env.spawn_run(&log);
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.metric("tidemark_writer_items_stored_total").await < 200 {
        assert!(Instant::now() < deadline, "not all stored");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = env.get("/metrics").await.unwrap();
    for s in [&a, &b] {
        assert!(
            metrics.contains(&format!("stream=\"{s}\"")),
            "per-shard metrics name {s}"
        );
    }
    // One lease per stream, by its full key, with the reported lag.
    let deadline = Instant::now() + tidemark_worker::REPORT_INTERVAL + Duration::from_secs(30);
    let snap = loop {
        let snap: Value = serde_json::from_str(&env.output(&["status", "-o", "json"])).unwrap();
        let shards = snap["shards"].as_array().cloned().unwrap_or_default();
        if shards.len() == 2 && shards.iter().all(|s| s["lag_ms"].is_i64()) {
            break snap;
        }
        assert!(Instant::now() < deadline, "no reported lag: {snap}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let keys: Vec<&str> = snap["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["shard"].as_str().unwrap())
        .collect();
    for s in [&a, &b] {
        assert!(
            keys.iter()
                .any(|k| k.contains(&format!(":{s}:")) && k.ends_with(":shardId-000000000000")),
            "{keys:?}"
        );
    }
    let exit = terminate(&mut run, Duration::from_secs(30));
    assert!(exit.success(), "run exit: {exit}");
    // Each manifest verifies with its stream's mapping...
    for s in [&a, &b] {
        let m = manifest(s);
        let out = env.output(&[
            "verify",
            "--stream",
            s,
            "--manifest",
            m.to_str().unwrap(),
            "--json",
        ]);
        let report: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["found"], 100, "{s}: {report}");
    }
    // ... and b's would not with the shared one.
    let out = env
        .cmd()
        .args(["verify", "--json", "--manifest"])
        .arg(manifest(&b))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["mismatched"], 100, "{report}");
    assert_eq!(out.status.code(), Some(1));
}

/// `status` on a KCL 3.5 table with a lease in a graceful hand-off: the
/// KCL's leader lock, worker metrics and migration state are shown as KCL
/// items, not as shards; the lease in hand-off names both owners; the
/// table's state and the way back to the KCL are named; the stream's
/// settings (DescribeStreamSummary) are shown. Nothing is written.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn status_shows_kcl_items_as_such_and_the_streams_settings() {
    let stack = tidemark_tests::stack().await;
    let loaded = tidemark_tests::kcl::Fixture::get("kcl3x_handoff")
        .load(&stack)
        .await;
    let name = unique_name("e2e-kcl");
    let source = format!(
        "[source]\nkind = \"kinesis\"\nstream = \"{}\"\nlease_table = \"{}\"\nworker_id = \"e2e\"\n",
        loaded.stream, loaded.lease_table
    );
    let env = setup_source(stack, &name, "", &source);
    let text = env.output(&["status", "-o", "json"]);
    let status: Value = serde_json::from_str(&text).unwrap();
    let shards: Vec<&str> = status["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["shard"].as_str().unwrap())
        .collect();
    assert_eq!(
        shards,
        loaded.lease().leases,
        "only leases are shards: {status}"
    );
    let kcl = &status["kcl"];
    assert_eq!(kcl["state"], "kcl35_single_table", "{status}");
    assert_eq!(kcl["way_back"], "KCL 3.5.0 or later", "{status}");
    let items: Vec<(String, String)> = kcl["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["key"].as_str().unwrap().to_string(),
                i["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = loaded
        .lease()
        .not_leases
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(items, want, "{status}");
    let handoff = &loaded.lease().in_handoff[0];
    let row = status["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["shard"] == handoff.as_str())
        .unwrap();
    assert_eq!(row["owner"], "kcl3-worker-a", "the worker still holding it");
    assert_eq!(row["handoff_to"], "ip-10-0-1-17.ec2.internal:kcl3-worker-b");
    assert_eq!(status["summary"]["shards"], 4);
    let stream = &status["streams"][0];
    assert_eq!(stream["stream"], loaded.stream.as_str(), "{status}");
    assert_eq!(stream["capacity_mode"], "PROVISIONED", "{status}");
    assert_eq!(stream["open_shards"], 4);
    assert_eq!(stream["fan_out_limit"], 20);
    // kinesis-local does not report MaxRecordSizeInKiB: the default shows,
    // marked as such.
    assert_eq!(stream["max_record_size_kib"], Value::Null, "{status}");
    assert_eq!(
        stream["max_record_size"],
        serde_json::json!({"kib": 1024, "reported": false}),
        "{status}"
    );
    // The table view names the state and the items too.
    let table = env.output(&["status"]);
    for needle in [
        "KCL 3.5 single table",
        "Leader (LEADER)",
        "hand-off",
        "PROVISIONED",
        "max record size 1024 KiB (default)",
    ] {
        assert!(table.contains(needle), "{needle} missing from:\n{table}");
    }
    loaded.assert_untouched(&env.stack).await;
    loaded.delete_stream(&env.stack).await;
}

/// A capacity lift maintenance recorded for a late backlog (table, WCU,
/// since when, why, the backlog last seen) is shown by `status`, read from
/// the coordinator table; a worker report in the same table is not a lift.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn status_shows_the_capacity_lifts_recorded_in_the_coordinator_table() {
    let env = setup().await;
    let client = env.stack.dynamodb();
    let coordinator = format!("{}-coordinator", env.prefix);
    tidemark_tests::create_hash_only(&client, &coordinator, "leaseKey").await;
    let table = format!("{}_2026-11-19", env.prefix);
    let since = chrono::Utc::now().timestamp_millis() - 600_000;
    let n = |v: i64| AttributeValue::N(v.to_string());
    client
        .put_item()
        .table_name(&coordinator)
        .item(
            "leaseKey",
            AttributeValue::S(format!("tidemark-lift#{table}")),
        )
        .item("table", AttributeValue::S(table.clone()))
        .item("write", n(350))
        .item("reason", AttributeValue::S("late_backlog".into()))
        .item("since", n(since))
        .item("renewed", n(since + 540_000))
        .item("backlogItems", n(20_000))
        .send()
        .await
        .unwrap();
    let json: Value = serde_json::from_str(&env.output(&["status", "-o", "json"])).unwrap();
    let lifts = json["lifts"].as_array().cloned().unwrap_or_default();
    assert_eq!(lifts.len(), 1, "{json}");
    let lift = &lifts[0];
    assert_eq!(lift["table"], table.as_str(), "{lift}");
    assert_eq!(lift["write"], 350, "{lift}");
    assert_eq!(lift["reason"], "late_backlog", "{lift}");
    assert_eq!(lift["since_ms"], since, "{lift}");
    assert_eq!(lift["backlog_items"], 20_000, "{lift}");
    let text = env.output(&["status"]);
    let line = text
        .lines()
        .find(|l| l.starts_with(&table) && l.contains("late_backlog"))
        .unwrap_or_else(|| panic!("no lift line for {table}:\n{text}"));
    assert!(line.contains("350"), "{line}");
    assert!(line.contains("10m"), "lifted 10 minutes ago: {line}");
}

/// The current table at 1 WCU behind the limits proxy (capacity enforced):
/// the worker reads every record at once but stores about one a second, so
/// its checkpoint stands behind what it read. MillisBehindLatest says the
/// reader is at the tip; `status` shows the shard's checkpoint lag, in
/// records and in time, growing from one report to the next.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn status_shows_a_checkpoint_held_back_by_a_slow_table_as_a_growing_checkpoint_lag() {
    // A failover time of 10 s (the default): a lease moved under a loaded
    // machine re-reads from the checkpoint, and the lag starts again.
    let env = setup_with(1, "", |source| {
        source.replace("failover_time = \"3s\"", "failover_time = \"10s\"")
    })
    .await;
    let manifest = env.dir.join("produced.jsonl");
    env.produce(1_500, &manifest);
    let log = env.dir.join("run.log");
    /// Kills the worker however the test ends (a failed assertion too).
    struct Killed(Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _run = Killed(
        env.cmd()
            .arg("run")
            .env("TIDEMARK__SCHEMA__TIERS__ACTIVE__WRITE", "1")
            .env("TIDEMARK__SCHEMA__TIERS__ACTIVE__READ", "1")
            // Reports every 5 s: two of them in seconds, not a minute.
            .env("TIDEMARK__TELEMETRY__REPORT_INTERVAL", "5s")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let status =
        || -> Value { serde_json::from_str(&env.output(&["status", "-o", "json"])).unwrap() };
    let lag_of = |snap: &Value| -> Option<(u64, i64)> {
        let s = &snap["shards"][0]["checkpoint_lag"];
        Some((s["records"].as_u64()?, s["ms"].as_i64()?))
    };
    let deadline = Instant::now() + Duration::from_secs(45);
    let first = loop {
        let snap = status();
        if let Some(l) = lag_of(&snap).filter(|l| l.0 > 0) {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint lag reported: {snap}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let next = loop {
        let snap = status();
        let l = lag_of(&snap).unwrap_or_else(|| panic!("{snap}"));
        if l.1 != first.1 {
            break (l, snap);
        }
        assert!(Instant::now() < deadline, "no second report: {snap}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let (second, snap) = next;
    assert!(second.0 > 0, "still records past the checkpoint: {snap}");
    assert!(
        second.1 >= first.1 + 3_000,
        "the checkpoint lag grows with the report interval: {first:?} then {second:?}"
    );
    assert!(
        snap["shards"][0]["lag_ms"]
            .as_i64()
            .is_none_or(|ms| ms < 10_000),
        "the reader itself is not behind: {snap}"
    );
    let text = env.output(&["status"]);
    assert!(text.contains("max checkpoint lag"), "{text}");
}

/// `produce --size` sends a record as large as the stream takes: 1 MiB,
/// partition key included, at the default `MaxRecordSizeInKiB` (which
/// kinesis-local does not report). kinesis-local itself accepts up to
/// 1 MiB of data whatever the key (measured: 1,048,576 bytes of data under
/// an 11-byte key in, 1,048,577 refused as InvalidArgumentException); AWS
/// counts the key too, so produce keeps to 1 MiB minus the key. The record
/// is read back whole, byte for byte as the manifest has it; a byte more
/// is refused before anything is sent, naming the setting.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn produce_sends_a_record_of_the_streams_largest_size_whole() {
    let env = setup_with(1, "", |source| source).await;
    let kinesis = env.stack.kinesis();
    let stream = env.prefix.clone();
    // Ten devices: keys `device-0000` to `device-0009`, 11 bytes.
    let largest = (1usize << 20) - "device-0000".len();
    let manifest = env.dir.join("large.jsonl");
    env.produce_with(&["--size", &largest.to_string()], 1, &manifest);
    let sent = std::fs::read(&manifest).unwrap();
    let sent = sent.strip_suffix(b"\n").unwrap();
    assert_eq!(sent.len(), largest);

    let shard = kinesis
        .list_shards()
        .stream_name(&stream)
        .send()
        .await
        .unwrap()
        .shards()[0]
        .shard_id()
        .to_string();
    let iterator = kinesis
        .get_shard_iterator()
        .stream_name(&stream)
        .shard_id(&shard)
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap()
        .shard_iterator()
        .unwrap()
        .to_string();
    let records = kinesis
        .get_records()
        .shard_iterator(iterator)
        .send()
        .await
        .unwrap();
    let records = records.records();
    assert_eq!(records.len(), 1);
    let key = records[0].partition_key().unwrap();
    assert!(key.starts_with("device-000") && key.len() == 11, "{key}");
    assert!(
        records[0].data().as_ref() == sent,
        "the record read back is {} bytes, not the {} sent",
        records[0].data().as_ref().len(),
        sent.len()
    );
    let event: Value = serde_json::from_slice(records[0].data().as_ref()).unwrap();
    assert_eq!(event["deviceId"], key);

    let refused = env
        .cmd()
        .args(["produce", "--count", "1", "--quiet"])
        .args(["--size", &(largest + 1).to_string()])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("MaxRecordSizeInKiB not reported, so the default 1024 KiB")
            && err.contains("update-max-record-size"),
        "{err}"
    );
    kinesis
        .delete_stream()
        .stream_name(&stream)
        .send()
        .await
        .unwrap();
}
