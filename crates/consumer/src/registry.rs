//! Which sources exist and how each is built: the `[source]` section
//! ([`SourceConfig`]) and [`build`], the one place a source kind is matched
//! to its type.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use tidemark_schema::event::EventConfig;

use crate::error::SourceConfigError;
use crate::kinesis::KinesisSource;
use crate::kinesis::config::KinesisConfig;
use crate::kinesis::lease::leader_store::DynamoLeaderStore;
use crate::source::{Governors, Source};
use crate::sqs::{SqsConfig, SqsSource};

/// The source section: `kind = "kinesis"` or `kind = "sqs"` plus its keys.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SourceConfig {
    /// A Kinesis data stream, read with leases in a KCL-format table.
    Kinesis(KinesisConfig),
    /// An SQS queue (standard or FIFO).
    Sqs(SqsConfig),
}

/// What building a source needs besides its section.
#[derive(Debug, Clone)]
pub struct SourceContext {
    /// The AWS settings every client is made from.
    pub sdk: aws_types::SdkConfig,
    /// The endpoint governors the source shares with the writer.
    pub governors: Governors,
    /// The coordinator table: `lease_assignment = "leader"` keeps its lock
    /// and heartbeats there.
    pub coordinator_table: String,
    /// Set to `true` by the source once its own start is done and it
    /// reads (lease table checked, stream described; the queue polled).
    pub running: Arc<tokio::sync::watch::Sender<bool>>,
}

/// The source `config` describes, ready to run.
pub fn build(config: &SourceConfig, context: &SourceContext) -> Box<dyn Source> {
    match config {
        SourceConfig::Kinesis(k) => {
            let dynamodb = aws_sdk_dynamodb::Client::new(&context.sdk);
            // Leader mode keeps its lock and heartbeats in the coordinator
            // table (see `lease::leader_store`).
            let leader_store = DynamoLeaderStore::new(
                dynamodb.clone(),
                &context.coordinator_table,
                &k.lease_table,
            );
            Box::new(
                KinesisSource::new(k.clone(), kinesis_client(&context.sdk), dynamodb)
                    .with_governors(context.governors.clone())
                    .with_leader_store(Arc::new(leader_store))
                    .with_running(context.running.clone()),
            )
        }
        SourceConfig::Sqs(s) => Box::new(
            SqsSource::new(s.clone(), sqs_client(&context.sdk))
                .with_running(context.running.clone()),
        ),
    }
}

/// The SQS source's client. Every SQS call of the source is retried by the
/// source itself (receivers and the deleter with back-off, heartbeats every
/// tick): one attempt per call, not the SDK's three.
fn sqs_client(sdk: &aws_types::SdkConfig) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(sdk)
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .build(),
    )
}

/// The Kinesis source's client. Every Kinesis call of the source is retried
/// by the source itself: GetRecords by the reader (paced, with back-off),
/// GetShardIterator with back-off, ListShards at the next balancing pass,
/// SubscribeToShard by the fan-out reader, DescribeStreamSummary a few
/// times at start: one attempt per call, not the SDK's three.
fn kinesis_client(sdk: &aws_types::SdkConfig) -> aws_sdk_kinesis::Client {
    aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(sdk)
            .retry_config(aws_sdk_kinesis::config::retry::RetryConfig::disabled())
            .build(),
    )
}

impl SourceConfig {
    /// Checks values the types cannot (the checks each source runs when it
    /// starts), naming the key under `source`.
    pub fn validate(&self) -> Result<(), SourceConfigError> {
        match self {
            SourceConfig::Kinesis(k) => k.validate(),
            SourceConfig::Sqs(s) => s.validate(),
        }
    }

    /// How long a stop may wait for in-flight records.
    pub fn shutdown_grace(&self) -> Duration {
        match self {
            SourceConfig::Kinesis(k) => k.shutdown_grace,
            SourceConfig::Sqs(s) => s.shutdown_grace,
        }
    }

    /// This worker's id when the source names one (a Kinesis lease owner).
    pub fn worker_id(&self) -> Option<&str> {
        match self {
            SourceConfig::Kinesis(k) => Some(&k.worker_id),
            SourceConfig::Sqs(_) => None,
        }
    }

    /// Streams with an event mapping of their own (Kinesis `streams`):
    /// (their index in `streams`, their name, the mapping).
    pub fn stream_events(&self) -> Vec<(usize, &str, &EventConfig)> {
        match self {
            SourceConfig::Kinesis(k) => k
                .streams
                .iter()
                .enumerate()
                .filter_map(|(i, s)| Some((i, s.stream_name(), s.event.as_ref()?)))
                .collect(),
            SourceConfig::Sqs(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An endpoint on 127.0.0.1 that answers every request 500 and counts
    /// them.
    async fn failing_endpoint() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&count);
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    if matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {
                        seen.fetch_add(1, Ordering::SeqCst);
                        let body = r#"{"__type":"InternalFailure","message":"down"}"#;
                        let answer = format!(
                            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = conn.write_all(answer.as_bytes()).await;
                    }
                });
            }
        });
        (url, count, task)
    }

    /// The source's Kinesis and SQS clients send one attempt per call: the
    /// readers, the shard sync, the receivers and the deleter retry on
    /// their own, paced by the governor or their back-off, and the SDK's
    /// three attempts would multiply that outside the retry budget.
    #[tokio::test]
    async fn the_source_clients_send_one_attempt_per_call() {
        let (url, count, server) = failing_endpoint().await;
        let sdk = aws_types::SdkConfig::builder()
            .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
            .region(aws_types::region::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_kinesis::config::SharedCredentialsProvider::new(
                aws_sdk_kinesis::config::Credentials::new("test", "test", None, None, "test"),
            ))
            .retry_config(aws_types::sdk_config::RetryConfig::standard().with_max_attempts(3))
            .endpoint_url(&url)
            .build();
        let kinesis = kinesis_client(&sdk);
        assert!(kinesis.list_shards().stream_name("s").send().await.is_err());
        assert_eq!(count.swap(0, Ordering::SeqCst), 1, "Kinesis");
        let sqs = sqs_client(&sdk);
        assert!(
            sqs.receive_message()
                .queue_url(format!("{url}/000000000000/q"))
                .send()
                .await
                .is_err()
        );
        assert_eq!(count.swap(0, Ordering::SeqCst), 1, "SQS");
        server.abort();
    }
}
