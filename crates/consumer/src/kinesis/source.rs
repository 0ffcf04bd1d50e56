//! [`KinesisSource`]: the live Kinesis source, as the worker starts it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::{ConsumerError, SourceConfigError};
use crate::kinesis::api::register_consumer;
use crate::kinesis::balancing;
use crate::kinesis::config::{KinesisConfig, LeaseAssignment, ReadMode};
use crate::kinesis::lease::key::KeyFormat;
use crate::kinesis::lease::leader_store::LeaderStore;
use crate::kinesis::lease::table::{LeaseTable, refuse_other_format};
use crate::kinesis::lease::timing::LeaseTiming;
use crate::kinesis::run::{RunParts, StreamRun};
use crate::kinesis::status::StatusHandle;
use crate::kinesis::streams;
use crate::record::Record;
use crate::source::{Governors, Source};

/// The Kinesis source. See the module docs for its guarantees.
#[derive(Debug)]
pub struct KinesisSource {
    config: KinesisConfig,
    kinesis: aws_sdk_kinesis::Client,
    table: LeaseTable,
    status: StatusHandle,
    governors: Option<Governors>,
    leader_store: Option<Arc<dyn LeaderStore>>,
}

impl KinesisSource {
    /// A source reading `config.stream` with leases in `config.lease_table`.
    pub fn new(
        config: KinesisConfig,
        kinesis: aws_sdk_kinesis::Client,
        dynamodb: aws_sdk_dynamodb::Client,
    ) -> Self {
        let table = LeaseTable::with_timing(
            dynamodb,
            config.lease_table.clone(),
            LeaseTiming::new(config.failover_time),
        );
        Self::with_lease_table(config, kinesis, table)
    }

    /// A source whose leases live in `table` (the fleet simulator passes
    /// an in-memory store; [`KinesisSource::new`] uses DynamoDB).
    pub fn with_lease_table(
        config: KinesisConfig,
        kinesis: aws_sdk_kinesis::Client,
        table: LeaseTable,
    ) -> Self {
        Self {
            config,
            kinesis,
            table,
            status: StatusHandle::default(),
            governors: None,
            leader_store: None,
        }
    }

    /// Where `lease_assignment = "leader"` keeps its leader lock and
    /// heartbeats (the worker passes its coordinator table,
    /// [`DynamoLeaderStore`](crate::lease::DynamoLeaderStore)); required in
    /// that mode, unused otherwise.
    pub fn with_leader_store(mut self, store: Arc<dyn LeaderStore>) -> Self {
        self.leader_store = Some(store);
        self
    }

    /// Shares the worker's endpoint governors: lease writes and GetRecords
    /// are admitted by them, and reading pauses while DynamoDB's breaker is
    /// open.
    pub(crate) fn with_governors(mut self, governors: Governors) -> Self {
        self.table = self.table.with_governor(governors.dynamodb.clone());
        self.governors = Some(governors);
        self
    }

    /// Per-shard status, live while `run` runs.
    pub fn status_handle(&self) -> StatusHandle {
        self.status.clone()
    }

    /// Runs until `shutdown` is cancelled, then stops reading, waits (at most
    /// `shutdown_grace`) for in-flight acknowledgements, checkpoints, releases
    /// the leases and returns. Records go to `sink` in per-shard order, one
    /// batch per GetRecords call; awaiting `send` is the backpressure.
    /// [`ConsumerError::DrainIncomplete`] when a shard's final checkpoint or
    /// release failed (the stop was not clean, though nothing is lost).
    pub async fn run(
        self,
        sink: mpsc::Sender<Vec<Record>>,
        shutdown: CancellationToken,
    ) -> Result<(), ConsumerError> {
        if !self.config.is_multi_stream() {
            return self.run_stream(sink, shutdown).await;
        }
        let streams = streams::prepare(
            &self.config,
            &self.kinesis,
            &self.table,
            &self.status,
            self.leader_store.as_ref(),
        )
        .await?;
        let (kinesis, governors) = (self.kinesis, self.governors);
        streams::run_all(streams, shutdown, |one, stop| {
            let source = KinesisSource {
                config: one.config,
                kinesis: kinesis.clone(),
                table: one.table,
                status: one.status,
                governors: governors.clone(),
                leader_store: one.leader_store,
            };
            Box::pin(source.run_stream(sink.clone(), stop))
        })
        .await
    }

    /// Reads one stream (`config.stream`).
    async fn run_stream(
        self,
        sink: mpsc::Sender<Vec<Record>>,
        shutdown: CancellationToken,
    ) -> Result<(), ConsumerError> {
        self.config.validate()?;
        self.table.create_if_absent(Duration::from_secs(60)).await?;
        // A stream's scoped view is checked once for the whole table.
        if self.table.scope().is_none() {
            refuse_other_format(&self.table, KeyFormat::SingleStream).await?;
        }
        let leader_store = match (self.config.lease_assignment, self.leader_store) {
            (LeaseAssignment::Leader, None) => {
                return Err(SourceConfigError {
                    key: "lease_assignment",
                    problem: "\"leader\" needs a coordinator table for its lock and heartbeats (KinesisSource::with_leader_store)".into(),
                }
                .into());
            }
            (LeaseAssignment::Leader, Some(c)) => {
                // Large tables take a while to index: allow for it.
                self.table
                    .ensure_owner_index(Duration::from_secs(600))
                    .await?;
                c.ensure(Duration::from_secs(60)).await?;
                Some(c)
            }
            (LeaseAssignment::Listing, _) => None,
        };
        let consumer_arn = match self.config.read_mode {
            ReadMode::FanOut => Some(register_consumer(&self.kinesis, &self.config).await?),
            ReadMode::Polling => None,
        };
        let stream = Arc::new(StreamRun::new(RunParts {
            config: self.config,
            kinesis: self.kinesis,
            table: self.table,
            status: self.status,
            sink,
            shutdown,
            governors: self.governors,
            consumer_arn,
            leader_store,
        }));
        balancing::run(Arc::clone(&stream)).await?;
        if let Some(e) = stream.take_fatal() {
            return Err(e);
        }
        let shards = stream.take_unfinished();
        if shards.is_empty() {
            return Ok(());
        }
        Err(ConsumerError::DrainIncomplete { shards })
    }
}

impl Source for KinesisSource {
    fn kind(&self) -> &'static str {
        "kinesis"
    }

    fn run(
        self: Box<Self>,
        sink: mpsc::Sender<Vec<Record>>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), ConsumerError>> {
        Box::pin((*self).run(sink, shutdown))
    }
}
