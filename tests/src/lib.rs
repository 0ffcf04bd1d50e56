//! Shared helpers for Tidemark's end-to-end tests.
//!
//! Integration tests need the local AWS stack (`localstack/up`). They run only
//! when `TIDEMARK_IT=1` (set by `scripts/test`); otherwise [`integration`]
//! prints why the test is skipped and returns `None`. When enabled, the
//! endpoints come from the standard `AWS_ENDPOINT_URL_*` variables (or from
//! `localstack/.env` when those are unset), and must be loopback addresses: a
//! test never talks to real AWS.

// Test support: a panic here is a failed test, with the message saying why.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_config::{BehaviorVersion, SdkConfig};

pub mod worker;

/// The endpoint variables every integration test needs.
pub const ENDPOINT_VARS: [&str; 3] = [
    "AWS_ENDPOINT_URL_KINESIS",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
];

/// The repository root (the parent of this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Whether integration tests are switched on (`TIDEMARK_IT=1`).
pub fn integration_enabled() -> bool {
    std::env::var("TIDEMARK_IT").is_ok_and(|v| v == "1")
}

/// Endpoints and clients of the local stack.
#[derive(Debug, Clone)]
pub struct LocalStack {
    /// Shared SDK config (region, credentials) without endpoints.
    pub sdk: SdkConfig,
    /// Kinesis endpoint URL.
    pub kinesis_url: String,
    /// DynamoDB endpoint URL.
    pub dynamodb_url: String,
    /// SQS endpoint URL.
    pub sqs_url: String,
}

impl LocalStack {
    /// A Kinesis client for the local stack (or `url` instead, e.g. a proxy).
    pub fn kinesis_at(&self, url: &str) -> aws_sdk_kinesis::Client {
        let conf = aws_sdk_kinesis::config::Builder::from(&self.sdk)
            .endpoint_url(url)
            .build();
        aws_sdk_kinesis::Client::from_conf(conf)
    }

    /// A Kinesis client for the local stack.
    pub fn kinesis(&self) -> aws_sdk_kinesis::Client {
        self.kinesis_at(&self.kinesis_url)
    }

    /// A DynamoDB client for the local stack (or `url` instead, e.g. a proxy).
    pub fn dynamodb_at(&self, url: &str) -> aws_sdk_dynamodb::Client {
        let conf = aws_sdk_dynamodb::config::Builder::from(&self.sdk)
            .endpoint_url(url)
            .build();
        aws_sdk_dynamodb::Client::from_conf(conf)
    }

    /// The writer's BatchWriteItem transport to `url` (the local stack's
    /// DynamoDB, or a proxy), with the stack's region and credentials.
    pub fn dynamodb_transport_at(
        &self,
        url: &str,
    ) -> std::sync::Arc<dyn tidemark_writer::Transport> {
        let t = tidemark_writer::HttpTransport::new(tidemark_writer::HttpSettings {
            endpoint: url.to_owned(),
            region: self
                .sdk
                .region()
                .map_or_else(|| "us-east-1".to_owned(), |r| r.as_ref().to_owned()),
            credentials: self
                .sdk
                .credentials_provider()
                .expect("the local stack's SDK config has credentials"),
            connect_timeout: std::time::Duration::from_secs(3),
        })
        .expect("a valid local endpoint");
        std::sync::Arc::new(t)
    }

    /// A DynamoDB client for the local stack.
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        self.dynamodb_at(&self.dynamodb_url)
    }

    /// An SQS client for the local stack.
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        let conf = aws_sdk_sqs::config::Builder::from(&self.sdk)
            .endpoint_url(&self.sqs_url)
            .build();
        aws_sdk_sqs::Client::from_conf(conf)
    }
}

/// Returns the local stack, or `None` (after printing the reason) when
/// integration tests are off. Panics, saying what to do, when they are on but
/// the endpoints are missing or not on loopback.
pub async fn integration(test: &str) -> Option<LocalStack> {
    if !integration_enabled() {
        // Written to the stderr handle, not with eprintln!: libtest captures
        // the print macros of passing tests, and a skip must be visible.
        let _ = writeln!(
            std::io::stderr(),
            "skipping {test}: it needs the local AWS stack; run scripts/test, or localstack/up and then TIDEMARK_IT=1 cargo test"
        );
        return None;
    }
    match LocalStack::from_env().await {
        Ok(stack) => Some(stack),
        Err(e) => panic!("TIDEMARK_IT=1 but {e}"),
    }
}

impl LocalStack {
    /// The local stack's endpoints from the `AWS_ENDPOINT_URL_*` variables
    /// (or `localstack/.env` when unset), with dummy credentials. Fails,
    /// saying what to do, when an endpoint is missing or not on loopback.
    pub async fn from_env() -> Result<LocalStack, String> {
        let file = env_file();
        let get = |var: &str| {
            std::env::var(var)
                .ok()
                .or_else(|| file.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone()))
        };
        let endpoint = |var: &str| -> Result<String, String> {
            let value = get(var).ok_or_else(|| {
                format!("{var} is not set and localstack/.env is missing: run localstack/up first")
            })?;
            if !is_loopback_url(&value) {
                return Err(format!(
                    "{var}={value}: the tests only talk to 127.0.0.1/localhost"
                ));
            }
            Ok(value)
        };
        let kinesis_url = endpoint(ENDPOINT_VARS[0])?;
        let dynamodb_url = endpoint(ENDPOINT_VARS[1])?;
        let sqs_url = endpoint(ENDPOINT_VARS[2])?;
        let region = get("AWS_REGION").unwrap_or_else(|| "us-east-1".into());
        // Dummy credentials: the emulators accept any, and a developer's real
        // ones must never be picked up by a test.
        let creds = aws_sdk_dynamodb::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "tidemark-tests",
        );
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(aws_config::Region::new(region))
            .credentials_provider(creds)
            .load()
            .await;
        Ok(LocalStack {
            sdk,
            kinesis_url,
            dynamodb_url,
            sqs_url,
        })
    }
}

/// `KEY=value` pairs of `localstack/.env`, if it exists.
fn env_file() -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(repo_root().join("localstack/.env")) else {
        return Vec::new();
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// True for `http(s)://` URLs whose host is a loopback IP or `localhost`.
pub fn is_loopback_url(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority.split(':').next().unwrap_or_default()
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A name unique to this test process and call, for streams, tables and queues.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{:x}-{}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Capacity of a table created by [`create_table`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableCapacity {
    /// PAY_PER_REQUEST.
    OnDemand,
    /// Provisioned read and write units.
    Provisioned {
        /// RCU.
        read: i64,
        /// WCU.
        write: i64,
    },
}

/// Creates a table keyed by string `pk` (and string `sk` when `sort_key`),
/// as every Tidemark table is, and waits until it is ACTIVE.
pub async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    sort_key: bool,
    capacity: TableCapacity,
) {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ProvisionedThroughput,
        ScalarAttributeType, TableStatus,
    };
    let key = |n: &str, t| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .expect("key schema")
    };
    let attr = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("attribute definition")
    };
    let mut req = client
        .create_table()
        .table_name(name)
        .key_schema(key("pk", KeyType::Hash))
        .attribute_definitions(attr("pk"));
    if sort_key {
        req = req
            .key_schema(key("sk", KeyType::Range))
            .attribute_definitions(attr("sk"));
    }
    req = match capacity {
        TableCapacity::OnDemand => req.billing_mode(BillingMode::PayPerRequest),
        TableCapacity::Provisioned { read, write } => req.provisioned_throughput(
            ProvisionedThroughput::builder()
                .read_capacity_units(read)
                .write_capacity_units(write)
                .build()
                .expect("throughput"),
        ),
    };
    req.send()
        .await
        .unwrap_or_else(|e| panic!("CreateTable {name} failed (is the local stack up?): {e:?}"));
    wait_until("table ACTIVE", Duration::from_secs(30), || async {
        let d = client.describe_table().table_name(name).send().await.ok()?;
        (d.table()?.table_status() == Some(&TableStatus::Active)).then_some(())
    })
    .await;
}

/// Creates a stream with `shards` shards and waits until it is ACTIVE.
pub async fn create_stream(client: &aws_sdk_kinesis::Client, name: &str, shards: i32) {
    client
        .create_stream()
        .stream_name(name)
        .shard_count(shards)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateStream {name} failed (is the local stack up?): {e:?}"));
    wait_stream_active(client, name).await;
}

/// Waits until a stream (after a create, split or merge) is ACTIVE again.
pub async fn wait_stream_active(client: &aws_sdk_kinesis::Client, name: &str) {
    use aws_sdk_kinesis::types::StreamStatus;
    wait_until("stream ACTIVE", Duration::from_secs(30), || async {
        let d = client
            .describe_stream_summary()
            .stream_name(name)
            .send()
            .await
            .ok()?;
        (d.stream_description_summary()?.stream_status() == &StreamStatus::Active).then_some(())
    })
    .await;
}

/// Polls `check` until it returns `Some`, or panics with `what` after `deadline`.
pub async fn wait_until<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The local stack for a stack test (`tests/tests/stack_*.rs`). Panics, saying
/// what to do, when it is unreachable: with the `stack` feature on, an absent
/// stack is a failure, not a skip.
pub async fn stack() -> LocalStack {
    match LocalStack::from_env().await {
        Ok(stack) => stack,
        Err(e) => panic!("stack test without the local AWS stack: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_detection() {
        assert!(is_loopback_url("http://127.0.0.1:4566"));
        assert!(is_loopback_url("http://localhost:4568/"));
        assert!(is_loopback_url("http://[::1]:4566"));
        assert!(!is_loopback_url("https://dynamodb.us-east-1.amazonaws.com"));
        assert!(!is_loopback_url("http://10.0.0.5:4566"));
        assert!(!is_loopback_url("http://127.0.0.1.evil.example:80"));
    }
}
