//! [`KinesisSource`]: the live Kinesis source, as the worker starts it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::error::{ConsumerError, SourceConfigError};
use crate::kinesis::api::register_consumer;
use crate::kinesis::balancing;
use crate::kinesis::config::{KinesisConfig, LeaseAssignment, ReadMode};
use crate::kinesis::lease::key::KeyFormat;
use crate::kinesis::lease::leader_store::LeaderStore;
use crate::kinesis::lease::table::LeaseTable;
use crate::kinesis::lease::takeover;
use crate::kinesis::lease::timing::LeaseTiming;
use crate::kinesis::run::{RunParts, StreamRun};
use crate::kinesis::settings::{StreamSettings, stream_settings};
use crate::kinesis::status::StatusHandle;
use crate::kinesis::streams;
use crate::record::Record;
use crate::source::{Governors, Source};
use tracing::{info, warn};

/// The Kinesis source. See the module docs for its guarantees.
#[derive(Debug)]
pub struct KinesisSource {
    config: KinesisConfig,
    kinesis: aws_sdk_kinesis::Client,
    table: LeaseTable,
    status: StatusHandle,
    governors: Option<Governors>,
    leader_store: Option<Arc<dyn LeaderStore>>,
    running: Option<Arc<watch::Sender<bool>>>,
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
            running: None,
        }
    }

    /// Set to `true` once the source's start is done (lease table checked,
    /// stream described, consumer registered) and it reads: the worker's
    /// start-up ends there, not when it called `run`.
    pub fn with_running(mut self, running: Arc<watch::Sender<bool>>) -> Self {
        self.running = Some(running);
        self
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
        let (kinesis, governors, running) = (self.kinesis, self.governors, self.running);
        streams::run_all(streams, shutdown, |one, stop| {
            let source = KinesisSource {
                config: one.config,
                kinesis: kinesis.clone(),
                table: one.table,
                status: one.status,
                governors: governors.clone(),
                leader_store: one.leader_store,
                running: running.clone(),
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
        // The start (lease table, stream description, consumer
        // registration) can wait minutes on a slow AWS: a stop meanwhile
        // ends it at once, as nothing was read yet.
        let start = async {
            self.config.validate()?;
            self.table.create_if_absent(Duration::from_secs(60)).await?;
            // A stream's scoped view is checked once for the whole table.
            if self.table.scope().is_none() {
                takeover::check(&self.table, KeyFormat::SingleStream, &self.config).await?;
            }
            let leader_store = match (self.config.lease_assignment, self.leader_store.clone()) {
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
            let settings = read_settings(&self.kinesis, &self.config.stream).await;
            let consumer_arn = match self.config.read_mode {
                ReadMode::FanOut => {
                    Some(register_consumer(&self.kinesis, &self.config, settings.as_ref()).await?)
                }
                ReadMode::Polling => None,
            };
            Ok::<_, ConsumerError>((leader_store, consumer_arn))
        };
        let (leader_store, consumer_arn) = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            started = start => started?,
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
        if let Some(running) = &self.running {
            running.send_replace(true);
        }
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

/// The stream's settings, logged once at start (with the per-key order
/// caveat of an `AUTO` stream); `None`, with a warning, when unreadable:
/// reading does not depend on them.
async fn read_settings(kinesis: &aws_sdk_kinesis::Client, stream: &str) -> Option<StreamSettings> {
    let s = match stream_settings(kinesis, stream).await {
        Ok(s) => s,
        Err(e) => {
            warn!(stream, error = %e, "stream settings unreadable (the role needs kinesis:DescribeStreamSummary); reading without them");
            return None;
        }
    };
    let opt = |v: Option<i32>| v.map_or_else(|| "not reported".to_string(), |v| v.to_string());
    info!(
        stream = %s.stream,
        capacity_mode = s.capacity_mode.as_deref().unwrap_or("not reported"),
        record_distribution = s.record_distribution.as_deref().unwrap_or("not reported"),
        max_record_size_kib = %opt(s.max_record_size_kib),
        open_shards = s.open_shards,
        consumers = %opt(s.consumer_count),
        fan_out_limit = s.fan_out_limit,
        account_mode = %s.account_mode.describe(),
        warm_throughput_mibps = %s
            .warm_throughput
            .map_or_else(|| "none".to_string(), |w| format!("{} of {}", opt(w.current_mibps), opt(w.target_mibps))),
        "stream settings"
    );
    if s.auto_distribution() {
        warn!(
            stream = %s.stream,
            "record distribution AUTO: Kinesis places records on shards itself, so records of one partition key may be spread over shards and read out of order; order holds per shard only (docs/architecture.md, \"Stream settings\"). KPL aggregates are read whole, sub-records are never dropped"
        );
    }
    Some(s)
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
