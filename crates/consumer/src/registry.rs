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
                KinesisSource::new(
                    k.clone(),
                    aws_sdk_kinesis::Client::new(&context.sdk),
                    dynamodb,
                )
                .with_governors(context.governors.clone())
                .with_leader_store(Arc::new(leader_store))
                .with_running(context.running.clone()),
            )
        }
        SourceConfig::Sqs(s) => Box::new(
            // Every SQS call of the source is retried by the source itself
            // (receivers and the deleter with back-off, heartbeats every
            // tick): one attempt per call, not the SDK's three.
            SqsSource::new(
                s.clone(),
                aws_sdk_sqs::Client::from_conf(
                    aws_sdk_sqs::config::Builder::from(&context.sdk)
                        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
                        .build(),
                ),
            )
            .with_running(context.running.clone()),
        ),
    }
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
