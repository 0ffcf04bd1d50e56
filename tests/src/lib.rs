//! Shared helpers for Tidemark's end-to-end tests.
//!
//! Where tests live (see docs/testing.md): every test that needs the local
//! AWS stack (`localstack/up`) is in `tests/tests/stack_<area>.rs`, carries
//! `#[cfg_attr(not(feature = "stack"), ignore = "needs the local AWS stack
//! (scripts/test runs it)")]` and starts with [`stack`]. A plain
//! `cargo test` lists those tests as ignored; with `--features
//! tidemark-tests/stack` (what `scripts/test` runs) they run, and an absent
//! stack fails them. The endpoints come from the standard
//! `AWS_ENDPOINT_URL_*` variables (or from `localstack/.env` when those are
//! unset), and must be loopback addresses: a test never talks to real AWS.
//!
//! Helpers:
//! - [`stack`]: the [`LocalStack`] handle (clients), or a panic saying why
//!   not; its DynamoDB goes through a limits proxy (capacity enforced).
//! - Kinesis: [`create_stream`], [`wait_stream_active`], [`put_records`].
//! - DynamoDB: [`create_table`], [`put_items`] (capacity-aware), [`scan_items`],
//!   [`count_items`].
//! - SQS: [`create_queue`], [`send_messages`], [`queue_counts`].
//! - The limits proxy in-process: [`start_limits_proxy`], [`LimitsProxy`].
//! - A counting HTTP forward proxy (`HTTP_PROXY` tests):
//!   [`forward_proxy::start_forward_proxy`].
//! - [`fault_proxy::FaultProxy`]: a TCP proxy that passes, refuses, freezes
//!   or denies, switched while a worker runs.
//! - [`kcl`]: KCL lease-table fixtures (2.x to 3.5) on the stack, and the
//!   KCL's format rules as a checker.
//! - [`EMF_METRICS`]: the worker's CloudWatch metrics the ECS stack reads.
//! - [`unique_name`], [`wait_until`] and [`wait_until_or`] (poll a
//!   condition with a deadline), [`free_port`].

// Test support: a panic here is a failed test, with the message saying why.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::types::{AttributeValue, Select};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};

pub mod fault_proxy;
pub mod forward_proxy;
pub mod kcl;
pub mod worker;

/// The worker's Embedded Metric Format metrics that the ECS stack's alarms
/// and dashboard read (docs/operations.md#metrics-in-cloudwatch): each has
/// the dimension set [TablePrefix] in the namespace `MetricsNamespace`.
pub const EMF_METRICS: &[&str] = &[
    "LagSeconds",
    "ItemsStored",
    "ItemsThrottled",
    "DeadLetters",
    "DeadLetterFallbacks",
    "CheckpointLagSeconds",
    "WriterItemsInFlight",
    "SecondsSinceMaintenance",
    "NextTableReady",
    "SecondsToNextPeriod",
    "MaintenanceQuotaErrors",
    "EstimatedCostUSD",
];

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

/// Endpoints and clients of the local stack.
#[derive(Debug, Clone)]
pub struct LocalStack {
    /// Shared SDK config (region, credentials) without endpoints.
    pub sdk: SdkConfig,
    /// Kinesis endpoint URL.
    pub kinesis_url: String,
    /// DynamoDB endpoint URL: from [`stack`], the limits proxy every stack
    /// test writes through (capacity, partitions and burst credit enforced
    /// as on AWS); from [`LocalStack::from_env`], the emulator itself.
    pub dynamodb_url: String,
    /// The DynamoDB emulator itself (what a limits proxy forwards to).
    pub dynamodb_direct_url: String,
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
        std::sync::Arc::new(tidemark_writer::SdkTransport::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&self.sdk).endpoint_url(url),
        ))
    }

    /// The same stack with the SDK's own retries off, so a test sees every
    /// throttle and fault (e.g. `stack.without_retries().dynamodb_at(proxy)`).
    /// Endpoints stay per client: an `AWS_ENDPOINT_URL_*` variable would
    /// override one set on the shared config.
    pub fn without_retries(&self) -> LocalStack {
        LocalStack {
            sdk: self
                .sdk
                .to_builder()
                .retry_config(RetryConfig::disabled())
                .build(),
            ..self.clone()
        }
    }

    /// A DynamoDB client for the local stack (through the limits proxy
    /// when from [`stack`]).
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        self.dynamodb_at(&self.dynamodb_url)
    }

    /// The same stack with DynamoDB straight to the emulator, no limits
    /// enforced. A test that uses it says why (e.g. it puts a proxy of its
    /// own in front).
    pub fn direct(&self) -> LocalStack {
        LocalStack {
            dynamodb_url: self.dynamodb_direct_url.clone(),
            ..self.clone()
        }
    }

    /// An Application Auto Scaling client for the local stack (moto, which
    /// also serves SQS).
    pub fn autoscaling(&self) -> aws_sdk_applicationautoscaling::Client {
        let conf = aws_sdk_applicationautoscaling::config::Builder::from(&self.sdk)
            .endpoint_url(&self.sqs_url)
            .build();
        aws_sdk_applicationautoscaling::Client::from_conf(conf)
    }

    /// An S3 client for the local stack (`AWS_ENDPOINT_URL_S3`, else the
    /// SQS endpoint: moto and LocalStack serve S3 there too), addressing
    /// buckets by path as the worker does against a local endpoint.
    pub fn s3(&self) -> aws_sdk_s3::Client {
        let conf = aws_sdk_s3::config::Builder::from(&self.sdk)
            .endpoint_url(self.s3_url())
            .force_path_style(true)
            .build();
        aws_sdk_s3::Client::from_conf(conf)
    }

    /// The S3 endpoint: `AWS_ENDPOINT_URL_S3`, else the SQS endpoint.
    pub fn s3_url(&self) -> String {
        std::env::var("AWS_ENDPOINT_URL_S3")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| self.sqs_url.clone())
    }

    /// The `tidemark` binary at `bin` with the stack's endpoints, test
    /// credentials and no `TIDEMARK_CONFIG`.
    pub fn command(&self, bin: &str) -> std::process::Command {
        let mut c = std::process::Command::new(bin);
        c.env("AWS_ENDPOINT_URL_DYNAMODB", &self.dynamodb_url)
            .env("AWS_ENDPOINT_URL_KINESIS", &self.kinesis_url)
            .env("AWS_ENDPOINT_URL_SQS", &self.sqs_url)
            .env("AWS_ENDPOINT_URL_S3", self.s3_url())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("TIDEMARK_CONFIG");
        c
    }

    /// An SQS client for the local stack.
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        let conf = aws_sdk_sqs::config::Builder::from(&self.sdk)
            .endpoint_url(&self.sqs_url)
            .build();
        aws_sdk_sqs::Client::from_conf(conf)
    }
}

/// The local stack, for a test in `tests/tests/stack_*.rs`. Panics, saying
/// what to do, when an endpoint is missing, not on loopback, or does not
/// accept a connection: with the `stack` feature on, an absent stack is a
/// failure, never a skip.
///
/// DynamoDB goes through a limits proxy ([`tidemark_limits`], AWS's
/// defaults: provisioned capacity, partitions, burst credit, on-demand
/// limits), one per test process, so what a test writes is throttled as on
/// AWS; the emulators alone accept any rate. [`LocalStack::direct`] is the
/// way around it, for a test that must say why.
pub async fn stack() -> LocalStack {
    let mut stack = match LocalStack::from_env().await {
        Ok(stack) => stack,
        Err(e) => panic!("this test needs the local AWS stack, but {e}"),
    };
    for url in [&stack.kinesis_url, &stack.dynamodb_url, &stack.sqs_url] {
        if let Err(e) = probe(url).await {
            panic!(
                "this test needs the local AWS stack, but {url} is unreachable ({e}): run localstack/up"
            );
        }
    }
    stack.dynamodb_url = shared_limits_proxy(&stack);
    stack
}

/// The URL of this test process's limits proxy in front of `stack`'s
/// emulators, started on first use on a thread (and runtime) of its own, so
/// that it outlives every test's runtime.
fn shared_limits_proxy(stack: &LocalStack) -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let config = tidemark_limits::Config::with_upstreams(
            &stack.dynamodb_direct_url,
            &stack.kinesis_url,
            &stack.sqs_url,
        );
        config.validate().expect("a valid limits proxy config");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("limits-proxy".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("the limits proxy's runtime");
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                        .await
                        .expect("bind 127.0.0.1:0");
                    let url = format!("http://{}", listener.local_addr().expect("bound address"));
                    let proxy =
                        Arc::new(tidemark_limits::Proxy::new(config).expect("limits proxy"));
                    tx.send(url)
                        .expect("the test waits for the proxy's address");
                    // It serves until the process ends.
                    let _ =
                        tidemark_limits::serve(listener, proxy, std::future::pending::<()>()).await;
                });
            })
            .expect("spawn the limits proxy's thread");
        rx.recv().expect("the limits proxy started")
    })
    .clone()
}

/// Opens (and drops) a TCP connection to a loopback URL's host and port.
async fn probe(url: &str) -> Result<(), String> {
    let authority = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let addr = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !authority.ends_with(']')
    {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    match tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(&addr),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 3 s".to_owned()),
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
            dynamodb_direct_url: dynamodb_url.clone(),
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

/// Puts `(partition key, data)` records in calls of 500, in order, and
/// returns (shard id, sequence number) per record. Panics if an entry fails
/// (kinesis-local never throttles; behind a limits proxy, put directly).
pub async fn put_records(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    records: &[(String, Vec<u8>)],
) -> Vec<(String, String)> {
    let mut out = Vec::with_capacity(records.len());
    for chunk in records.chunks(500) {
        let entries: Vec<_> = chunk
            .iter()
            .map(|(pk, d)| {
                PutRecordsRequestEntry::builder()
                    .partition_key(pk)
                    .data(Blob::new(d.clone()))
                    .build()
                    .expect("partition key and data are set")
            })
            .collect();
        let res = client
            .put_records()
            .stream_name(stream)
            .set_records(Some(entries))
            .send()
            .await
            .expect("PutRecords");
        assert_eq!(
            res.failed_record_count(),
            Some(0),
            "PutRecords to {stream} failed some entries"
        );
        for r in res.records() {
            out.push((
                r.shard_id().expect("a stored record's shard").to_owned(),
                r.sequence_number()
                    .expect("a stored record's sequence number")
                    .to_owned(),
            ));
        }
    }
    out
}

/// Writes `items` to `table` with BatchWriteItem, 25 a call, sending what
/// DynamoDB (the limits proxy) returns unprocessed again after a growing
/// pause, as a careful client does: a table's capacity is enforced.
pub async fn put_items(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    items: Vec<HashMap<String, AttributeValue>>,
) {
    use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
    for chunk in items.chunks(25) {
        let mut reqs: Vec<WriteRequest> = chunk
            .iter()
            .map(|i| {
                WriteRequest::builder()
                    .put_request(
                        PutRequest::builder()
                            .set_item(Some(i.clone()))
                            .build()
                            .expect("an item"),
                    )
                    .build()
            })
            .collect();
        let mut pause = Duration::from_millis(50);
        let deadline = Instant::now() + Duration::from_secs(120);
        while !reqs.is_empty() {
            match client
                .batch_write_item()
                .request_items(table, reqs.clone())
                .send()
                .await
            {
                Ok(out) => {
                    reqs = out
                        .unprocessed_items()
                        .and_then(|u| u.get(table))
                        .cloned()
                        .unwrap_or_default();
                }
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_provisioned_throughput_exceeded_exception()) => {}
                Err(e) => panic!("BatchWriteItem {table}: {e:?}"),
            }
            if reqs.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "BatchWriteItem {table}: {} items still unprocessed after 120 s",
                reqs.len()
            );
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

/// Every item of `table` (a paginated Scan).
pub async fn scan_items(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Vec<HashMap<String, AttributeValue>> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("Scan");
        out.extend(page.items().iter().cloned());
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return out;
        }
    }
}

/// The stored item `routed` names (a consistent read), if any.
pub async fn routed_item(
    client: &aws_sdk_dynamodb::Client,
    routed: &tidemark_schema::Routed,
) -> Option<HashMap<String, AttributeValue>> {
    client
        .get_item()
        .table_name(routed.table.as_str())
        .key("pk", AttributeValue::S(routed.key.pk().to_owned()))
        .key("sk", AttributeValue::S(routed.key.sk().to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
}

/// The number of items in `table` (a paginated `Select::Count` Scan).
pub async fn count_items(client: &aws_sdk_dynamodb::Client, table: &str) -> usize {
    let mut n = 0;
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .select(Select::Count)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("Scan");
        n += usize::try_from(page.count()).expect("a count is never negative");
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return n;
        }
    }
}

/// Creates a queue named [`unique_name`]`(prefix)` (with `.fifo` and the
/// FIFO attribute when `fifo`); returns its URL.
pub async fn create_queue(client: &aws_sdk_sqs::Client, prefix: &str, fifo: bool) -> String {
    let mut req = client.create_queue();
    if fifo {
        req = req
            .queue_name(format!("{}.fifo", unique_name(prefix)))
            .attributes(QueueAttributeName::FifoQueue, "true");
    } else {
        req = req.queue_name(unique_name(prefix));
    }
    req.send()
        .await
        .unwrap_or_else(|e| panic!("CreateQueue failed (is the local stack up?): {e:?}"))
        .queue_url
        .expect("CreateQueue returns the queue's URL")
}

/// Sends `(FIFO group, body)` messages, 10 per call, in order; a FIFO
/// message gets a deduplication id unique within the call sequence.
pub async fn send_messages(
    client: &aws_sdk_sqs::Client,
    url: &str,
    bodies: &[(Option<String>, String)],
) {
    for (c, chunk) in bodies.chunks(10).enumerate() {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, (group, body))| {
                let mut e = SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_body(body);
                if let Some(g) = group {
                    e = e
                        .message_group_id(g)
                        .message_deduplication_id(format!("d{c}-{i}"));
                }
                e.build().expect("id and body are set")
            })
            .collect();
        let out = client
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .expect("SendMessageBatch");
        assert!(out.failed().is_empty(), "{:?}", out.failed());
    }
}

/// (visible, in flight) message counts of a queue.
pub async fn queue_counts(client: &aws_sdk_sqs::Client, url: &str) -> (u64, u64) {
    let attrs = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes
        .expect("the asked attributes");
    let n = |k: QueueAttributeName| {
        attrs[&k]
            .parse::<u64>()
            .expect("a message count is a number")
    };
    (
        n(QueueAttributeName::ApproximateNumberOfMessages),
        n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    )
}

/// A limits proxy running in-process on 127.0.0.1 in front of the local
/// stack; it stops when dropped.
#[derive(Debug)]
pub struct LimitsProxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The proxy, for reading its stats directly.
    pub proxy: Arc<tidemark_limits::Proxy>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for LimitsProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may have ended already; nothing to stop then.
            let _ = stop.send(());
        }
    }
}

/// Starts a limits proxy in front of `stack`'s emulators (never in front of
/// the shared one), its config adjusted by `tweak` (AWS's limits by
/// default).
pub async fn start_limits_proxy(
    stack: &LocalStack,
    tweak: impl FnOnce(&mut tidemark_limits::Config),
) -> LimitsProxy {
    let mut config = tidemark_limits::Config::with_upstreams(
        &stack.dynamodb_direct_url,
        &stack.kinesis_url,
        &stack.sqs_url,
    );
    tweak(&mut config);
    config.validate().expect("a valid limits proxy config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let url = format!("http://{}", listener.local_addr().expect("bound address"));
    let proxy = Arc::new(tidemark_limits::Proxy::new(config).expect("limits proxy"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(tidemark_limits::serve(
        listener,
        proxy.clone(),
        async move {
            // A dropped sender stops the server too.
            let _ = stopped.await;
        },
    ));
    LimitsProxy {
        url,
        proxy,
        stop: Some(stop),
    }
}

/// Creates an on-demand table keyed `hash` (string) alone, as a KCL lease
/// table or Tidemark's coordinator table (`leaseKey`) is.
pub async fn create_hash_only(client: &aws_sdk_dynamodb::Client, table: &str, hash: &str) {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(hash)
                .key_type(KeyType::Hash)
                .build()
                .expect("name and type are set"),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(hash)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("name and type are set"),
        )
        .send()
        .await
        .expect("CreateTable");
}

/// Polls `check` until it returns `Some`, or panics with `what` after `deadline`.
pub async fn wait_until<T, F, Fut>(what: &str, deadline: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_until_or(what, deadline, check, String::new).await
}

/// [`wait_until`], with `context()` (e.g. a process's last log lines) in
/// the timeout's panic message.
pub async fn wait_until_or<T, F, Fut>(
    what: &str,
    deadline: Duration,
    mut check: F,
    context: impl Fn() -> String,
) -> T
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
            "timed out after {deadline:?} waiting for {what}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A TCP port free on 127.0.0.1 right now (for a server the test starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local address")
        .port()
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
