//! `HTTP_PROXY` / `NO_PROXY` reach the writer (issue 21): the real
//! `tidemark run` with `HTTP_PROXY` pointing at a counting forward proxy
//! sends every BatchWriteItem call through it and stores every event; with
//! `NO_PROXY` covering the endpoint the proxy sees nothing.
//!
//! A binary test (the SDK reads the proxy variables when it builds its HTTP
//! client, and a test process's environment is shared by parallel tests),
//! so it lives in this crate, under its `stack` feature (docs/testing.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tidemark_tests::forward_proxy::{ForwardProxy, start_forward_proxy};
use tidemark_tests::worker::{item_count, produce, test_toml};
use tidemark_tests::{LocalStack, unique_name};
use tidemark_worker::tools::produce::{ProduceSpec, Target};

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `tidemark run` on `config`, with the stack's endpoints, the proxy
/// variables given and every other proxy variable removed.
fn spawn_run(stack: &LocalStack, config: &Path, log: &Path, proxy: &[(&str, &str)]) -> Child {
    let mut c = Command::new(BIN);
    c.arg("run")
        .env("TIDEMARK_CONFIG", config)
        .env("AWS_ENDPOINT_URL_KINESIS", &stack.kinesis_url)
        .env("AWS_ENDPOINT_URL_DYNAMODB", &stack.dynamodb_url)
        .env("AWS_ENDPOINT_URL_SQS", &stack.sqs_url)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("RUST_LOG", "info");
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        c.env_remove(var);
    }
    for (k, v) in proxy {
        c.env(k, v);
    }
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// The sum of a metric's samples on the worker's /metrics (0 if down).
async fn metric(port: u16, name: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return 0;
    };
    if s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.is_err() {
        return 0;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body).await;
    body.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Runs the worker until it has stored `events`, then SIGTERM; returns the
/// BatchWriteItem calls it counted (its `tidemark_writer_calls_total`).
async fn run_until_stored(
    stack: &LocalStack,
    config: &Path,
    log: &Path,
    port: u16,
    events: u64,
    proxy: &[(&str, &str)],
) -> u64 {
    let mut child = spawn_run(stack, config, log, proxy);
    let start = Instant::now();
    while metric(port, "tidemark_writer_items_stored_total").await < events {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "worker exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the worker stored too little; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls = metric(port, "tidemark_writer_calls_total").await;
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "worker exit: {status}");
    calls
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn http_proxy_carries_every_write_and_no_proxy_bypasses_it() {
    let stack = tidemark_tests::stack().await;
    const EVENTS: u64 = 300;
    let name = unique_name("proxy");
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    let sqs = stack.sqs();
    let queue = tidemark_tests::create_queue(&sqs, &name, false).await;
    let port = free_port();
    let source = format!("[source]\nkind = \"sqs\"\nqueue_url = \"{queue}\"\nwait_time = \"1s\"\n");
    let config = dir.join("tidemark.toml");
    let toml = test_toml(
        &source,
        &name,
        &dir.join("dead.jsonl"),
        &format!("127.0.0.1:{port}"),
    );
    std::fs::write(&config, toml).unwrap();
    let target = Target::Sqs(sqs.clone(), queue.clone());
    let spec = |seed| ProduceSpec {
        devices: 20,
        count: EVENTS,
        hot_factor: 5,
        seed,
    };
    let proxy: ForwardProxy = start_forward_proxy().await;

    // Through the proxy: every write call the worker made, the proxy saw.
    let manifest = produce(&target, &spec(1), EVENTS, 2000).await;
    let calls = run_until_stored(
        &stack,
        &config,
        &dir.join("run1.log"),
        port,
        EVENTS,
        &[("HTTP_PROXY", &proxy.url)],
    )
    .await;
    let through = proxy.count("BatchWriteItem");
    assert!(calls >= 1, "no write calls counted");
    assert_eq!(
        through, calls,
        "BatchWriteItem calls through the proxy vs the worker's count"
    );

    // NO_PROXY covering the endpoint: nothing reaches the proxy.
    let before = proxy.total();
    produce(&target, &spec(2), EVENTS, 2000).await;
    run_until_stored(
        &stack,
        &config,
        &dir.join("run2.log"),
        port,
        EVENTS,
        &[("HTTP_PROXY", &proxy.url), ("NO_PROXY", "127.0.0.1")],
    )
    .await;
    assert_eq!(
        proxy.total(),
        before,
        "requests reached the proxy despite NO_PROXY"
    );

    let first: serde_json::Value = serde_json::from_slice(&manifest[0]).unwrap();
    let table = format!("{name}_{}", &first["timestamp"].as_str().unwrap()[..10]);
    assert_eq!(
        item_count(&stack.dynamodb(), &table).await,
        2 * EVENTS,
        "every event of both runs stored"
    );
}
