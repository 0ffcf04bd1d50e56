//! The runnable worker: everything `tidemark run` does, as a library.
//!
//! [`Worker::build`] wires the data path (router, writer that creates
//! missing tables, dead letters, pipeline) and binds the telemetry listener;
//! [`Worker::run`] reads the configured source (Kinesis or SQS) until the
//! shutdown future completes, then drains: the pipeline finishes, the
//! writer stores or dead-letters everything submitted, the dead letters are
//! written, the sources checkpoint (Kinesis) or release (SQS) what was
//! acknowledged, and the maintenance lease is released. Signal handling is
//! the caller's: the binary turns SIGTERM/SIGINT into the shutdown future,
//! tests use a channel.
//!
//! Stops are bounded and fatal errors are never hidden:
//! - the whole stop (signal, source error or fatal error to return) takes at
//!   most `shutdown_timeout`; past it the drain is abandoned (its tasks
//!   aborted, nothing more acknowledged or checkpointed) and
//!   [`WorkerError::ShutdownTimeout`] returned;
//! - a fatal writer or dead-letter error, or a pipeline that ends on its own,
//!   stops the worker at once: `/healthz` reports the cause while it stops,
//!   the source gets [`FATAL_STOP_TIME`] to release what it can, and the
//!   error is returned (the binary exits non-zero).
//!
//! [`DataPath`] is the part `replay` shares: the same pipeline fed from a
//! channel instead of a source.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tidemark_consumer::kinesis::Governors;
use tidemark_governor::{Governor, Params as GovernorParams};

use aws_config::SdkConfig;
use chrono::Utc;
use tidemark_consumer::sqs::{SqsError, SqsSource};
use tidemark_consumer::{ConsumerError, KinesisSource, Record};
use tidemark_schema::route::Router;
use tidemark_writer::{Writer, WriterError, WriterHandle, WriterStats};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{error, info, warn};

use crate::config::{Config, SourceConfig, default_worker_id, process_env};
use crate::deadletter::{
    DeadLetterConfig, DeadLetterError, DeadLetterSink, DeadLetters, DynamoDbSink, FileSink,
    SqsSink, check_dead_letter_table,
};
use crate::maintenance::migrate::record_layouts;
use crate::maintenance::{
    CreateMissingTables, MaintenanceLease, MaintenanceLeaseError, RoundKind, TableManager,
    TablesError, maintain,
};
use crate::pipeline::{LateByLifecycle, Pipeline, system_clock};
use crate::telemetry::{self, Readiness};
use futures::future::BoxFuture;
use tidemark_consumer::keyschema::KeySchemaMismatch;

/// Why the worker could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The schema section does not make a router.
    #[error("schema: {0}")]
    Schema(#[from] tidemark_schema::route::RouterConfigError),
    /// The writer's transport could not be set up from the SDK config.
    #[error("writer transport: {0}")]
    Transport(#[from] tidemark_writer::transport::SettingsError),
    /// A table the worker would use has another key schema than it needs
    /// (a lease, coordinator, period or dead-letter table).
    #[error(transparent)]
    KeySchema(#[from] KeySchemaMismatch),
    /// A period table cannot be used as configured (its recorded key
    /// layout differs from the config's).
    #[error(transparent)]
    Tables(TablesError),
    /// The maintenance lease's table (the coordinator table) cannot be used.
    #[error(transparent)]
    MaintenanceLease(#[from] MaintenanceLeaseError),
    /// The telemetry address could not be bound.
    #[error("telemetry.listen: cannot listen on {listen}: {source}")]
    Listen {
        /// The configured address.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
    /// The metrics recorder could not be installed.
    #[error("installing the metrics recorder: {0}")]
    Recorder(#[from] metrics_exporter_prometheus::BuildError),
    /// The Kinesis source stopped with an error.
    #[error(transparent)]
    Kinesis(#[from] ConsumerError),
    /// The SQS source stopped with an error.
    #[error(transparent)]
    Sqs(#[from] SqsError),
    /// The writer stopped for good (records not submitted stay unacknowledged).
    #[error(transparent)]
    Writer(#[from] WriterError),
    /// A dead letter could be stored neither in its destination nor in the
    /// fallback file (its record stays unacknowledged).
    #[error(transparent)]
    DeadLetter(#[from] DeadLetterError),
    /// The data path (router, writer, dead letters) ended while the source
    /// still ran, without an error of its own.
    #[error("the pipeline stopped while the source was running")]
    PipelineStopped,
    /// The stop took longer than `shutdown_timeout`: in-flight work was
    /// abandoned (not acknowledged nor checkpointed: it is read again).
    #[error(
        "shutdown_timeout ({timeout:?}) passed before the drain finished: in-flight work \
         abandoned, to be read again by the next owner"
    )]
    ShutdownTimeout {
        /// The configured `shutdown_timeout`.
        timeout: Duration,
    },
    /// A task of the worker panicked or was cancelled.
    #[error("{task} task: {source}")]
    Task {
        /// Which task.
        task: &'static str,
        /// The join error.
        source: tokio::task::JoinError,
    },
}

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
    writer: WriterHandle,
}

impl Progress {
    /// The writer's counters so far.
    pub fn writer(&self) -> WriterStats {
        self.writer.stats()
    }
}

/// After a fatal error, how long the source may take to stop reading,
/// checkpoint what was acknowledged and release its leases before the
/// worker exits anyway (unreleased leases expire after `failover_time`).
pub(crate) const FATAL_STOP_TIME: Duration = Duration::from_secs(5);

/// The data path shared by `run` and `replay`: router, writer (creating
/// missing tables), dead letters, pipeline.
#[derive(Debug)]
pub(crate) struct DataPath {
    manager: TableManager,
    /// The endpoint governors every AWS caller of this worker shares.
    governors: Governors,
    /// The writer's transport: /readyz probes through it.
    transport: Arc<tidemark_writer::SdkTransport>,
    writer: WriterHandle,
    // Aborted when dropped: an abandoned drain must not keep writing.
    writer_task: AbortOnDropHandle<Result<(), WriterError>>,
    dead_task: AbortOnDropHandle<Result<(), DeadLetterError>>,
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
        let router = Arc::new(router);
        // One governor per endpoint, shared by the writer, the table
        // manager, the lease table and the readers (see tidemark-governor).
        let governors = Governors {
            dynamodb: Governor::new("dynamodb", GovernorParams::default()),
            kinesis: Governor::new("kinesis", GovernorParams::default()),
        };
        let manager = TableManager::from_config(config, dynamodb.clone())
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
        let (writer, writer_task) = Writer::builder(
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
        .governor(governors.dynamodb.clone())
        .start();
        let sink: Arc<dyn DeadLetterSink> = match &config.dead_letters {
            DeadLetterConfig::File { path } => Arc::new(FileSink::new(path.clone())),
            DeadLetterConfig::Sqs { queue_url, .. } => Arc::new(SqsSink::new(
                aws_sdk_sqs::Client::new(sdk),
                queue_url.clone(),
            )),
            DeadLetterConfig::Dynamodb { table, .. } => Arc::new(
                DynamoDbSink::new(dynamodb, table.clone())
                    .with_governor(governors.dynamodb.clone()),
            ),
        };
        let (dead_letters, dead_task) = DeadLetters::start(sink, config.dead_letters.fallback());
        let format = match &config.source {
            SourceConfig::Kinesis(k) => k.record_format,
            SourceConfig::Sqs(_) => tidemark_schema::framing::RecordFormat::Json,
        };
        let mut stream_routers = std::collections::HashMap::new();
        for (stream, schema) in config.stream_schemas() {
            let router = Router::new(schema)?.with_table_layouts(table_layouts.clone());
            stream_routers.insert(stream, Arc::new(router));
        }
        let pipeline = Pipeline::new(router, writer.clone(), dead_letters, system_clock())
            .with_record_format(format)
            .with_stream_routers(stream_routers);
        Ok(DataPath {
            manager,
            governors,
            transport,
            writer,
            writer_task: AbortOnDropHandle::new(writer_task),
            dead_task: AbortOnDropHandle::new(dead_task),
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
            pipeline,
        } = self;
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

/// A worker ready to run: data path wired, telemetry address bound.
#[derive(Debug)]
pub struct Worker {
    config: Config,
    sdk: SdkConfig,
    data: DataPath,
    /// The maintenance lease, when maintenance is enabled (its table checked).
    maintenance: Option<MaintenanceLease>,
    /// This worker's id (lease owner name, report key).
    worker_id: String,
    listener: TcpListener,
    telemetry_addr: SocketAddr,
}

impl Worker {
    /// Wires the worker for `config` with the AWS clients of `sdk`, creating
    /// the current period tables and binding `telemetry.listen`.
    pub async fn build(config: &Config, sdk: &SdkConfig) -> Result<Worker, WorkerError> {
        let listen_error = |source| WorkerError::Listen {
            listen: config.telemetry.listen.to_string(),
            source,
        };
        let listener = TcpListener::bind(&config.telemetry.listen)
            .await
            .map_err(listen_error)?;
        let telemetry_addr = listener.local_addr().map_err(listen_error)?;
        // Boxed: these futures are large, and callers (tests, the binary's
        // main) hold `build` on their own stack.
        let data = Box::pin(DataPath::start(config, sdk)).await?;
        let worker_id = match &config.source {
            SourceConfig::Kinesis(k) => k.worker_id.clone(),
            SourceConfig::Sqs(_) => default_worker_id(&process_env()),
        };
        let maintenance = if config.maintenance.enabled {
            let lease = MaintenanceLease::new(
                aws_sdk_dynamodb::Client::new(sdk),
                config.maintenance.coordinator_table.clone(),
                worker_id.clone(),
                config.maintenance.interval,
            );
            // A coordinator table with other keys (the template once keyed
            // it `pk`) would leave the stack unmaintained: refuse to start.
            // Anything else is retried by the maintenance loop, loudly.
            match lease.ensure_table().await {
                Ok(()) => {}
                Err(e @ MaintenanceLeaseError::KeySchema(_)) => return Err(e.into()),
                Err(e) => {
                    warn!(error = %e, "coordinator table not usable yet; maintenance retries")
                }
            }
            Some(lease)
        } else {
            None
        };
        Ok(Worker {
            config: config.clone(),
            sdk: sdk.clone(),
            data,
            maintenance,
            worker_id,
            listener,
            telemetry_addr,
        })
    }

    /// The bound telemetry address (`/metrics`, `/healthz`, `/readyz`);
    /// useful when the config asked for port 0.
    pub fn telemetry_addr(&self) -> SocketAddr {
        self.telemetry_addr
    }

    /// Live counters of the worker.
    pub fn progress(&self) -> Progress {
        self.data.progress()
    }

    /// Runs until `shutdown` completes (or the source stops by itself, or a
    /// fatal error), then drains gracefully: nothing acknowledged is lost,
    /// nothing unacknowledged is checkpointed. Returns what the run did; an
    /// error when the source, the writer or the dead letters stopped with
    /// one, or when the stop took longer than `shutdown_timeout`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<Report, WorkerError> {
        let timeout = self.config.shutdown_timeout;
        let stop = CancellationToken::new();
        // On the heap: the whole run is a large future.
        let mut body = Box::pin(self.run_until(stop.clone()));
        tokio::pin!(shutdown);
        tokio::select! {
            result = &mut body => return result,
            () = &mut shutdown => stop.cancel(),
            // The worker stopped by itself (source error, fatal error).
            () = stop.cancelled() => {}
        }
        // One deadline for the whole stop, whatever part of the drain hangs
        // (a frozen DynamoDB never answers the final writes).
        match tokio::time::timeout(timeout, body).await {
            Ok(result) => result,
            Err(_) => {
                // Dropping the body aborts its tasks (AbortOnDropHandle):
                // nothing more is stored, acknowledged or checkpointed.
                let e = WorkerError::ShutdownTimeout { timeout };
                error!(error = %e, "stopping now");
                Err(e)
            }
        }
    }

    async fn run_until(self, shutdown: CancellationToken) -> Result<Report, WorkerError> {
        let Worker {
            config,
            sdk,
            data,
            maintenance,
            worker_id,
            listener,
            telemetry_addr,
        } = self;
        let (prometheus, typed_metrics) = telemetry::install_recorder()?;
        let readiness = Arc::new(Readiness::default());
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        // Telemetry outlives the drain (/metrics stays up while draining).
        let telemetry_stop = CancellationToken::new();
        let telemetry_task = AbortOnDropHandle::new(tokio::spawn(telemetry::serve(
            listener,
            prometheus.clone(),
            readiness.clone(),
            telemetry_stop.clone(),
        )));
        let _probe = AbortOnDropHandle::new(tokio::spawn(probe_dynamodb(
            data.transport.clone(),
            readiness.clone(),
            telemetry_stop.clone(),
        )));
        let maintenance = maintenance.map(|lease| {
            AbortOnDropHandle::new(tokio::spawn(maintain(
                lease,
                shutdown.clone(),
                rotate_round(
                    &data.manager,
                    dynamodb.clone(),
                    config.maintenance.coordinator_table.clone(),
                ),
            )))
        });

        let emf = config.telemetry.emf.then(|| {
            let progress = data.progress();
            let emitter = crate::emf::Emf::new(
                config.telemetry.emf_namespace.clone(),
                config.schema.table_prefix.clone(),
                config.schema.period,
                typed_metrics.clone(),
                move || progress.writer.items_in_flight(),
            );
            AbortOnDropHandle::new(tokio::spawn(crate::emf::run(
                emitter,
                config.telemetry.emf_interval,
                std::io::stdout(),
                telemetry_stop.clone(),
            )))
        });
        // Reports for `status` go where the maintenance lease lives.
        let reporter = config.maintenance.enabled.then(|| {
            AbortOnDropHandle::new(tokio::spawn(crate::report::run(
                dynamodb.clone(),
                config.maintenance.coordinator_table.clone(),
                worker_id.clone(),
                typed_metrics.clone(),
                data.writer.clone(),
                telemetry_stop.clone(),
            )))
        });
        // A small channel: the pipeline's pace (the writer's backpressure)
        // is what the sources read at.
        let (tx, rx) = mpsc::channel(16);
        let governors = data.governors.clone();
        let mut pipe = AbortOnDropHandle::new(tokio::spawn(data.run(rx)));
        info!(listen = %telemetry_addr, "tidemark running");
        readiness.source_running.store(true, Ordering::Relaxed);
        let source = async {
            match config.source.clone() {
                SourceConfig::Kinesis(k) => {
                    // Leader mode keeps its lock and heartbeats in the
                    // coordinator table (see tidemark_consumer::coord_store).
                    let coord = tidemark_consumer::coord_store::DynamoCoord::new(
                        dynamodb.clone(),
                        config.maintenance.coordinator_table.clone(),
                        &k.lease_table,
                    );
                    KinesisSource::new(k, aws_sdk_kinesis::Client::new(&sdk), dynamodb.clone())
                        .with_governors(governors)
                        .with_coordination(Arc::new(coord))
                        .run(tx, shutdown.clone())
                        .await
                        .map_err(WorkerError::from)
                }
                SourceConfig::Sqs(s) => SqsSource::new(s, aws_sdk_sqs::Client::new(&sdk))
                    .run(tx, shutdown.clone())
                    .await
                    .map_err(WorkerError::from),
            }
        };
        tokio::pin!(source);
        let source_result = tokio::select! {
            r = &mut source => r,
            // The source holds the channel open: a data path that ends first
            // failed (or panicked). No zombie: stop everything, say why.
            ended = &mut pipe => {
                let e = match ended {
                    Ok(Ok(_)) => WorkerError::PipelineStopped,
                    Ok(Err(e)) => e,
                    Err(source) => WorkerError::Task { task: "pipeline", source },
                };
                error!(error = %e, "fatal error: stopping the worker");
                readiness.set_fatal(e.to_string());
                shutdown.cancel();
                // Records not stored stay unacknowledged; the source only
                // checkpoints what was acknowledged and releases its leases.
                match tokio::time::timeout(FATAL_STOP_TIME, &mut source).await {
                    Ok(Err(source_error)) => warn!(error = %source_error, "source stopped with an error too"),
                    Ok(Ok(())) => {}
                    Err(_) => warn!(after = ?FATAL_STOP_TIME, "source did not stop in time; its leases expire by themselves"),
                }
                readiness.source_running.store(false, Ordering::Relaxed);
                return Err(e);
            }
        };
        readiness.source_running.store(false, Ordering::Relaxed);
        // The source may have stopped by itself (an error): the maintenance
        // loop stops on the same token, and the stop deadline starts.
        shutdown.cancel();
        if let Err(e) = &source_result {
            readiness.set_fatal(e.to_string());
        }
        let report = pipe.await.map_err(|source| WorkerError::Task {
            task: "pipeline",
            source,
        })?;
        if let Some(m) = maintenance {
            m.await.map_err(|source| WorkerError::Task {
                task: "maintenance",
                source,
            })?;
        }
        telemetry_stop.cancel();
        telemetry_task.await.map_err(|source| WorkerError::Task {
            task: "telemetry",
            source,
        })?;
        if let Some(reporter) = reporter {
            reporter.await.map_err(|source| WorkerError::Task {
                task: "report",
                source,
            })?;
        }
        if let Some(emf) = emf {
            // The final flush: the last interval's counts.
            emf.await.map_err(|source| WorkerError::Task {
                task: "emf",
                source,
            })?;
        }
        let report = report?;
        info!(
            records = report.records,
            stored = report.stored,
            dead_lettered = report.dead_lettered_unroutable,
            throttled_calls = report.throttled_calls,
            "tidemark stopped"
        );
        source_result.map(|()| report)
    }
}

/// The worker's maintenance round: a rotate round whose mutating calls the
/// maintenance lease confirms first.
fn rotate_round(
    manager: &TableManager,
    dynamodb: aws_sdk_dynamodb::Client,
    coordinator: String,
) -> impl for<'a> FnMut(&'a MaintenanceLease) -> BoxFuture<'a, ()> + use<> {
    let manager = manager.clone();
    move |lease| {
        let manager = manager.clone();
        let (dynamodb, coordinator) = (dynamodb.clone(), coordinator.clone());
        Box::pin(async move {
            // The late backlogs every worker reports: tables to lift.
            let backlogs = match crate::report::read(&dynamodb, &coordinator).await {
                Ok(reports) => crate::report::late_backlogs(reports.values()),
                Err(e) => {
                    warn!(error = %e, "reading the workers' reports failed: no late backlog known this round");
                    Default::default()
                }
            };
            match manager
                .round_guarded(Utc::now(), RoundKind::Rotate, false, lease, &backlogs)
                .await
            {
                Ok(applied) => {
                    // A lift renewed while its backlog lasts is no news.
                    for a in applied
                        .iter()
                        .filter(|a| a.action.kind() != "renew_lift" || a.error.is_some())
                    {
                        info!(table = a.action.table(), action = a.action.kind(), drift = ?a.action, error = a.error.as_deref(), "maintenance: drift repaired");
                    }
                    if applied.iter().all(|a| a.error.is_none()) {
                        metrics::gauge!(crate::metrics::MAINTENANCE_LAST_SUCCESS)
                            .set(Utc::now().timestamp_millis() as f64 / 1000.0);
                    }
                }
                Err(e) => warn!(error = %e, "maintenance round failed; retrying next round"),
            }
        })
    }
}

/// Keeps `dynamodb_reachable` current for /readyz with a cheap call on the
/// writer's own client: the endpoint, credentials, HTTP client (proxy) and
/// clock-skew state every write uses.
async fn probe_dynamodb(
    transport: Arc<tidemark_writer::SdkTransport>,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(15));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let ok = match transport.probe().await {
            Ok(()) => true,
            Err(e) => {
                warn!(error = %e, "readiness: DynamoDB unreachable on the write path");
                false
            }
        };
        readiness.dynamodb_reachable.store(ok, Ordering::Relaxed);
    }
}
