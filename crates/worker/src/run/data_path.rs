//! The data path `run` and `replay` share ([`DataPath`]: router, writer
//! creating missing tables, dead letters, pipeline) and what it reports
//! ([`Report`], [`Progress`]).

use std::sync::Arc;

use aws_config::SdkConfig;
use chrono::Utc;
use tidemark_consumer::{Governors, Record};
use tidemark_governor::{Governor, Params as GovernorParams};
use tidemark_schema::route::Router;
use tidemark_writer::{Writer, WriterError, WriterHandle, WriterStats};
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;
use tracing::warn;

use super::error::WorkerError;
use super::pipeline::{LateByLifecycle, Pipeline, system_clock};
use crate::config::Config;
use crate::deadletter::{
    DeadLetterConfig, DeadLetterError, DeadLetterSink, DeadLetters, DynamoDbSink, FileSink,
    ObjectWriter, S3Sink, SqsSink, check_dead_letter_table,
};
use crate::maintenance::migrate::record_layouts;
use crate::maintenance::{CreateMissingTables, RoundKind, TableManager, TablesError};
use crate::run::offload::{Offloader, S3Payloads};
use crate::sdk::{own_retries, s3_client};
use tidemark_schema::route::Oversize;

/// What one run (or replay) did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Records received from the source.
    pub records: u64,
    /// Records handed to the writer.
    pub submitted: u64,
    /// Items the writer stored.
    pub stored: u64,
    /// Records dead-lettered before the writer (unroutable, defective).
    pub dead_lettered_unroutable: u64,
    /// Records the writer dead-lettered (rejected by DynamoDB).
    pub dead_lettered_by_writer: u64,
    /// Write calls DynamoDB throttled.
    pub throttled_calls: u64,
}

impl Report {
    /// Every dead-lettered record, before or by the writer.
    pub fn dead_lettered(&self) -> u64 {
        self.dead_lettered_unroutable + self.dead_lettered_by_writer
    }
}

/// Live counters of a running worker (for tests and progress displays).
#[derive(Debug, Clone)]
pub struct Progress {
    pub(super) writer: WriterHandle,
}

impl Progress {
    /// The writer's counters so far.
    pub fn writer(&self) -> WriterStats {
        self.writer.stats()
    }
}

/// The data path shared by `run` and `replay`: router, writer (creating
/// missing tables), dead letters, pipeline.
#[derive(Debug)]
pub(crate) struct DataPath {
    pub(super) manager: TableManager,
    /// The endpoint governors every AWS caller of this worker shares.
    pub(super) governors: Governors,
    /// The writer's transport: /readyz probes through it.
    pub(super) transport: Arc<tidemark_writer::SdkTransport>,
    pub(super) writer: WriterHandle,
    // Aborted when dropped: an abandoned drain must not keep writing.
    writer_task: AbortOnDropHandle<Result<(), WriterError>>,
    dead_task: AbortOnDropHandle<Result<(), DeadLetterError>>,
    /// Adaptive sharding: keeps the routers' learned splits current.
    splits_task: Option<AbortOnDropHandle<()>>,
    pipeline: Pipeline,
}

impl DataPath {
    /// Creates the current tables (best effort: missing ones are created on
    /// first write) and starts the writer and the dead-letter task.
    pub(crate) async fn start(config: &Config, sdk: &SdkConfig) -> Result<DataPath, WorkerError> {
        let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
        let router = Router::new(config.schema.clone())?;
        // Each table's recorded key layouts, shared by the routers and kept
        // current by maintenance (see `check_layouts` below).
        let table_layouts = router.table_layouts().clone();
        // Adaptive sharding: one registry of learned splits for every router.
        let splits = router.splits().clone();
        let router = Arc::new(router);
        let (hot_keys, splits_task) = if router.keys_by_splits() {
            let worker = config
                .source
                .worker_id()
                .map(str::to_owned)
                .unwrap_or_else(|| crate::config::default_worker_id(&crate::config::process_env()));
            let (hook, task) =
                super::splits::adaptive_sharding(dynamodb.clone(), router.clone(), worker).await;
            (Some(hook), Some(task))
        } else {
            (None, None)
        };
        // One governor per endpoint, shared by the writer, the table
        // manager, the lease table and the readers (see tidemark-governor).
        let governors = Governors {
            dynamodb: Governor::new("dynamodb", GovernorParams::default()),
            kinesis: Governor::new("kinesis", GovernorParams::default()),
        };
        let manager = TableManager::from_config(config, dynamodb.clone())
            .with_autoscaling(aws_sdk_applicationautoscaling::Client::new(sdk))
            .with_governor(governors.dynamodb.clone())
            .with_table_layouts(table_layouts.clone(), config.schema.clone());
        // Tables for now are created before reading starts, so the first
        // events do not wait on a creation.
        match manager.round(Utc::now(), RoundKind::Ensure, false).await {
            Ok(_) => {}
            // A table of ours with other keys would fail every write: refuse
            // to start, naming it.
            Err(TablesError::KeySchema(e)) => return Err(e.into()),
            Err(e) => {
                warn!(error = %e, "creating the current tables failed; they are created on first write");
            }
        }
        // Keys of a table with items never change silently.
        match manager.check_layouts(Utc::now()).await {
            Ok(found) => record_layouts(&table_layouts, &found, &config.schema),
            Err(e @ (TablesError::LayoutChanged { .. } | TablesError::KeySchema(_))) => {
                return Err(WorkerError::Tables(e));
            }
            Err(e) => warn!(error = %e, "checking the tables' key layouts failed"),
        }
        if let DeadLetterConfig::Dynamodb { table, .. } = &config.dead_letters {
            check_dead_letter_table(&dynamodb, table).await?;
        }
        // Writes go through the SDK's own DynamoDB client for `sdk` (endpoint,
        // identity cache, signing, HTTP client), with pre-encoded bodies (see
        // tidemark_writer::transport).
        let transport = Arc::new(tidemark_writer::SdkTransport::new(sdk)?);
        let writer_builder = Writer::builder(
            dynamodb.clone(),
            transport.clone(),
            config.schema.key_attributes.clone(),
        )
        .config(config.writer.clone())
        .missing_tables(Arc::new(
            CreateMissingTables::new(manager.clone())
                .with_quota_retry_for(config.maintenance.quota_retry_for),
        ))
        // Late data never stalls the pipeline (see tidemark_writer::LateTables).
        .late_tables(Arc::new(LateByLifecycle {
            router: router.clone(),
            clock: system_clock(),
        }))
        .governor(governors.dynamodb.clone());
        // Adaptive sharding hears of keys held at their partition's limit.
        let writer_builder = match hot_keys {
            Some(h) => writer_builder.hot_keys(h),
            None => writer_builder,
        };
        let (writer, writer_task) = writer_builder.start();
        let sink: Arc<dyn DeadLetterSink> = match &config.dead_letters {
            DeadLetterConfig::File { path } => Arc::new(FileSink::new(path.clone())),
            // The delivery task retries (with back-off, several batches at
            // a time): one attempt per call, not the SDK's three.
            // Sized to the queue's own MaximumMessageSize, read now.
            DeadLetterConfig::Sqs {
                queue_url,
                s3_bucket,
                s3_prefix,
                s3_kms_key_id,
                ..
            } => {
                let sink = SqsSink::for_queue(
                    aws_sdk_sqs::Client::new(&own_retries(sdk)),
                    queue_url.clone(),
                )
                .await?;
                Arc::new(match s3_bucket {
                    Some(bucket) => sink.with_overflow(ObjectWriter::new(
                        s3_client(&own_retries(sdk)),
                        bucket.clone(),
                        s3_prefix.clone(),
                        s3_kms_key_id.clone(),
                        &worker_id(config),
                    )),
                    None => sink,
                })
            }
            DeadLetterConfig::S3 {
                bucket,
                prefix,
                max_object_bytes,
                max_object_age,
                kms_key_id,
                ..
            } => Arc::new(S3Sink::new(
                ObjectWriter::new(
                    s3_client(&own_retries(sdk)),
                    bucket.clone(),
                    prefix.clone(),
                    kms_key_id.clone(),
                    &worker_id(config),
                ),
                *max_object_bytes,
                *max_object_age,
            )),
            DeadLetterConfig::Dynamodb { table, .. } => Arc::new(
                DynamoDbSink::new(
                    aws_sdk_dynamodb::Client::new(&own_retries(sdk)),
                    table.clone(),
                )
                .with_governor(governors.dynamodb.clone()),
            ),
        };
        let (dead_letters, dead_task) = DeadLetters::start(sink, config.dead_letters.fallback());
        let mut stream_routers = std::collections::HashMap::new();
        for (stream, schema) in config.stream_schemas() {
            let router = Router::new(schema)?
                .with_table_layouts(table_layouts.clone())
                .with_splits(splits.clone());
            stream_routers.insert(stream, Arc::new(router));
        }
        let mut pipeline = Pipeline::new(router, writer.clone(), dead_letters, system_clock())
            .with_stream_routers(stream_routers);
        // Oversized events' payloads: one attempt per PutObject call, the
        // offloader retries within the writer's bounds.
        if let (Oversize::S3, Some(s3)) = (config.schema.oversize, &config.schema.oversize_s3) {
            pipeline = pipeline.with_offloader(Arc::new(Offloader::new(
                Box::new(S3Payloads {
                    client: s3_client(&own_retries(sdk)),
                    kms_key_id: s3.kms_key_id.clone(),
                }),
                &config.writer,
                s3.max_retry_time,
            )));
        }
        Ok(DataPath {
            manager,
            governors,
            transport,
            writer,
            writer_task: AbortOnDropHandle::new(writer_task),
            dead_task: AbortOnDropHandle::new(dead_task),
            splits_task,
            pipeline,
        })
    }

    /// Live counters of this data path.
    pub(crate) fn progress(&self) -> Progress {
        Progress {
            writer: self.writer.clone(),
        }
    }

    /// Handles batches from `rx` until it closes, then drains: every
    /// submitted record is stored or dead-lettered, and every dead letter
    /// written, before this returns. A fatal writer or dead-letter error
    /// ends it at once, whatever the pipeline was waiting on (records not
    /// yet stored stay unacknowledged).
    pub(crate) async fn run(self, rx: mpsc::Receiver<Vec<Record>>) -> Result<Report, WorkerError> {
        let DataPath {
            manager: _,
            governors: _,
            transport: _,
            writer,
            mut writer_task,
            mut dead_task,
            splits_task,
            pipeline,
        } = self;
        // Dropped (stopped) when the data path ends.
        let _splits_task = splits_task;
        // Both tasks outlive the pipeline unless they failed: one that ends
        // first is a fatal error, reported now rather than at the next batch.
        let counts = tokio::select! {
            counts = pipeline.run(rx) => counts,
            written = &mut writer_task => {
                let written = written.map_err(|source| WorkerError::Task { task: "writer", source })?;
                return Err(written.err().unwrap_or(WriterError::Closed).into());
            }
            dead = &mut dead_task => {
                dead.map_err(|source| WorkerError::Task { task: "dead-letter", source })??;
                return Err(WorkerError::PipelineStopped);
            }
        };
        // The pipeline holds a writer handle and the dead-letter queue;
        // dropping it lets the dead-letter task end once written out.
        drop(pipeline);
        // A handle kept for the final counters; close() ends the writer
        // whatever other handles exist.
        let stats_handle = writer.clone();
        writer.close();
        let written = writer_task.await.map_err(|source| WorkerError::Task {
            task: "writer",
            source,
        })?;
        let dead = dead_task.await.map_err(|source| WorkerError::Task {
            task: "dead-letter",
            source,
        })?;
        // The writer's own error names the cause; the pipeline only saw a
        // closed writer.
        written?;
        dead?;
        let counts = counts?;
        let stats = stats_handle.stats();
        Ok(Report {
            records: counts.records,
            submitted: counts.submitted,
            stored: stats.stored,
            dead_lettered_unroutable: counts.dead_lettered,
            dead_lettered_by_writer: stats.dead_lettered,
            throttled_calls: stats.throttled_calls,
        })
    }
}

/// This worker's id (`source.worker_id`, else the task id or host name),
/// which names its dead-letter objects.
fn worker_id(config: &Config) -> String {
    match config.source.worker_id() {
        Some(id) => id.to_string(),
        None => crate::config::default_worker_id(&crate::config::process_env()),
    }
}
