//! `config check --environment` against the local stack: region,
//! credentials, the stream, the tables and the calls the worker makes at
//! start, each reported ok or with its fix.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

const CONFIG: &str = r#"[source]
kind = "kinesis"
stream = "STREAM"
lease_table = "LEASES"

[schema]
table_prefix = "PREFIX"

[dead_letters]
kind = "file"
path = "dead-letters.jsonl"
"#;

fn check(stack: &tidemark_tests::LocalStack, text: &str, extra: &[&str]) -> Output {
    let d = std::env::temp_dir().join(format!("tidemark-envcheck-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join(format!("{}.toml", tidemark_tests::unique_name("c")));
    std::fs::write(&f, text).unwrap();
    Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &d)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ENDPOINT_URL_KINESIS", &stack.kinesis_url)
        .env("AWS_ENDPOINT_URL_DYNAMODB", &stack.dynamodb_url)
        .env("AWS_ENDPOINT_URL_SQS", &stack.sqs_url)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .args(["config", "check", f.to_str().unwrap(), "--environment"])
        .args(extra)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn config_check_environment_against_the_local_stack() {
    let stack = tidemark_tests::stack().await;
    let stream = tidemark_tests::unique_name("envcheck");
    tidemark_tests::create_stream(&stack.kinesis(), &stream, 1).await;
    let text = CONFIG
        .replace("STREAM", &stream)
        .replace("LEASES", &format!("{stream}-leases"))
        .replace("PREFIX", &stream);
    let o = check(&stack, &text, &["-o", "json"]);
    let out: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(o.status.code(), Some(0), "{out:#}");
    let checks = out["environment"].as_array().unwrap();
    let named = |what: &str| {
        checks
            .iter()
            .find(|c| c["check"].as_str().unwrap().contains(what))
            .unwrap_or_else(|| panic!("no {what} check in {out:#}"))
            .clone()
    };
    for what in [
        "region",
        "credentials",
        "stream",
        "lease table",
        "period tables",
    ] {
        assert!(named(what)["ok"].is_boolean(), "{what}: {out:#}");
    }
    assert_eq!(named("region")["ok"], true, "{out:#}");
    assert_eq!(named("stream")["ok"], true, "{out:#}");
    // A stream that does not exist: reported with its fix, exit 1.
    let missing = text.replace(
        &format!("stream = \"{stream}\""),
        "stream = \"no-such-stream-anywhere\"",
    );
    let o = check(&stack, &missing, &[]);
    let shown = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{shown}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(shown.contains("no-such-stream-anywhere"), "{shown}");
    assert!(
        shown.contains("source.stream"),
        "the fix names the key: {shown}"
    );
}
