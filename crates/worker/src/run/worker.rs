//! [`Worker`]: `tidemark run` as a library.
//!
//! [`Worker::build`] wires the data path (router, writer that creates
//! missing tables, dead letters, pipeline) and binds the telemetry listener;
//! [`Worker::run`] starts the source `tidemark_consumer::build` makes of the
//! `[source]` section (whatever its kind) and reads it until the shutdown
//! future completes, then drains: the pipeline finishes, the
//! writer stores or dead-letters everything submitted, the dead letters are
//! written, the sources checkpoint (Kinesis) or release (SQS) what was
//! acknowledged, and the maintenance lease is released. Signal handling is
//! the caller's: the binary turns SIGTERM/SIGINT into the shutdown future,
//! tests use a channel.
//!
//! Each part runs as a named task (`supervisor.rs`): the source, the
//! pipeline and the maintenance loop, stopped by the shutdown; the
//! telemetry endpoints, the readiness probe, EMF and reports, stopped after
//! them. The first task to end decides how the worker stops:
//! - the source (stopped, or failed): the graceful drain, which takes at
//!   most `shutdown_timeout` with the rest of the stop; past it the drain
//!   is abandoned (its tasks aborted, nothing more acknowledged or
//!   checkpointed) and [`WorkerError::ShutdownTimeout`] returned;
//! - any other task with an error (a fatal writer or dead-letter error, a
//!   panic), or the pipeline ending on its own: a fatal stop at once.
//!   `/healthz` reports the cause while it stops, the source gets
//!   [`FATAL_STOP_TIME`] to release what it can, and the error is returned
//!   (the binary exits non-zero).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use aws_config::SdkConfig;
use futures::FutureExt;
use tidemark_consumer::SourceContext;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{error, info, warn};

use super::background::{probe_dynamodb, rotate_round};
use super::data_path::{DataPath, Progress, Report};
use super::error::WorkerError;
use super::supervisor::Tasks;
use super::telemetry::{self, Readiness};
use crate::config::{Config, default_worker_id, process_env};
use crate::maintenance::{MaintenanceLease, MaintenanceLeaseError, maintain};

/// After a fatal error, how long the source may take to stop reading,
/// checkpoint what was acknowledged and release its leases before the
/// worker exits anyway (unreleased leases expire after `failover_time`).
pub(crate) const FATAL_STOP_TIME: Duration = Duration::from_secs(5);

/// The source's task: its end starts the stop.
const SOURCE: &str = "source";
/// The data path's task: ending before the source is a fatal error.
const PIPELINE: &str = "pipeline";

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
    listener: Arc<TcpListener>,
    telemetry_addr: SocketAddr,
    /// Shared with the endpoints: `starting` until [`Worker::run`].
    readiness: Arc<Readiness>,
    /// The endpoints served while `build` waits for AWS; stopped (and
    /// aborted if `build` fails) before `run` serves them for good.
    starting: (CancellationToken, AbortOnDropHandle<()>),
    /// `true` while the source runs: set by the source once its own start
    /// is done, cleared when it stops.
    running: Arc<watch::Sender<bool>>,
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
        // `/healthz` answers from now on (`starting`), while the rest waits
        // for AWS: a health check must not kill a task that is starting.
        let listener = Arc::new(listener);
        let (prometheus, _) = telemetry::install_recorder()?;
        let readiness = Arc::new(Readiness::default());
        readiness.starting.store(true, Ordering::Relaxed);
        let stop_starting = CancellationToken::new();
        let starting = AbortOnDropHandle::new(tokio::spawn(telemetry::serve(
            listener.clone(),
            prometheus,
            readiness.clone(),
            stop_starting.clone(),
        )));
        // Boxed: these futures are large, and callers (tests, the binary's
        // main) hold `build` on their own stack.
        let data = Box::pin(DataPath::start(config, sdk)).await?;
        let worker_id = match config.source.worker_id() {
            Some(id) => id.to_string(),
            None => default_worker_id(&process_env()),
        };
        let maintenance = if config.maintenance.enabled {
            // Its writes are fenced single attempts already; its reads are
            // polled again every interval.
            let lease = MaintenanceLease::new(
                aws_sdk_dynamodb::Client::new(&crate::sdk::own_retries(sdk)),
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
            readiness,
            starting: (stop_starting, starting),
            running: Arc::new(watch::Sender::new(false)),
        })
    }

    /// Whether the source runs: `true` once its own start is done (lease
    /// table checked, stream described, queue polled), `false` again when
    /// it stops. Until then the worker is starting.
    pub fn source_running(&self) -> watch::Receiver<bool> {
        self.running.subscribe()
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
                // Dropping the body aborts its tasks (see supervisor.rs):
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
            readiness,
            starting: (stop_starting, starting),
            running,
        } = self;
        let (prometheus, typed_metrics) = telemetry::install_recorder()?;
        // The start-up endpoints hand the listener over.
        stop_starting.cancel();
        let _ = starting.await;
        // Reports and the reading of them: tried again next interval (or
        // round), so one attempt per call.
        let dynamodb = aws_sdk_dynamodb::Client::new(&crate::sdk::own_retries(&sdk));

        // Telemetry outlives the drain (/metrics stays up while draining):
        // its tasks stop on their own token, once the data path has ended.
        let telemetry_stop = CancellationToken::new();
        let mut telemetry_tasks: Tasks<()> = Tasks::new();
        telemetry_tasks.spawn(
            "telemetry",
            telemetry::serve(
                listener,
                prometheus.clone(),
                readiness.clone(),
                telemetry_stop.clone(),
            )
            .map(Ok),
        );
        telemetry_tasks.spawn(
            "readiness probe",
            probe_dynamodb(
                data.transport.clone(),
                readiness.clone(),
                telemetry_stop.clone(),
            )
            .map(Ok),
        );
        // Health that follows progress: /healthz turns 503 while the
        // worker holds work and nothing moves.
        let in_writer = data.progress();
        telemetry_tasks.spawn(
            "stall watch",
            telemetry::watch_progress(
                typed_metrics.clone(),
                move || in_writer.writer.items_in_flight(),
                readiness.clone(),
                config.telemetry.stall_timeout,
                telemetry_stop.clone(),
            )
            .map(Ok),
        );
        if config.telemetry.emf {
            let progress = data.progress();
            let emitter = super::emf::Emf::new(
                config.telemetry.emf_namespace.clone(),
                config.schema.table_prefix.clone(),
                config.schema.period,
                typed_metrics.clone(),
                move || progress.writer.items_in_flight(),
            );
            // Stopped last but for the endpoints: its final flush holds the
            // last interval's counts.
            telemetry_tasks.spawn(
                "emf",
                super::emf::run(
                    emitter,
                    config.telemetry.emf_interval,
                    std::io::stdout(),
                    telemetry_stop.clone(),
                )
                .map(Ok),
            );
        }
        // Reports for `status` go where the maintenance lease lives.
        if config.maintenance.enabled {
            telemetry_tasks.spawn(
                "report",
                super::report::run(
                    dynamodb.clone(),
                    config.maintenance.coordinator_table.clone(),
                    config.telemetry.report_interval,
                    worker_id.clone(),
                    typed_metrics.clone(),
                    Some(data.writer.clone()),
                    telemetry_stop.clone(),
                )
                .map(Ok),
            );
        }

        // The data path and what runs beside it, stopped by `shutdown`. The
        // pipeline's value is the run's report.
        let mut data_tasks: Tasks<Option<Report>> = Tasks::new();
        if let Some(lease) = maintenance {
            let round = rotate_round(
                &data.manager,
                dynamodb.clone(),
                config.maintenance.coordinator_table.clone(),
            );
            data_tasks.spawn(
                "maintenance",
                maintain(lease, shutdown.clone(), round).map(|()| Ok(None)),
            );
        }
        // A small channel: the pipeline's pace (the writer's backpressure)
        // is what the sources read at.
        let (tx, rx) = mpsc::channel(16);
        let governors = data.governors.clone();
        data_tasks.spawn(PIPELINE, data.run(rx).map(|r| r.map(Some)));
        info!(listen = %telemetry_addr, "tidemark running");
        // `source_running` (and the end of `starting`) follow the source:
        // set once its own start is done, cleared when it stops.
        telemetry_tasks.spawn(
            "source state",
            follow_source(
                running.subscribe(),
                readiness.clone(),
                telemetry_stop.clone(),
            )
            .map(Ok),
        );
        let source = tidemark_consumer::build(
            &config.source,
            &SourceContext {
                sdk: sdk.clone(),
                governors,
                coordinator_table: config.maintenance.coordinator_table.clone(),
                running: running.clone(),
            },
        );
        info!(source = source.kind(), "source starting");
        data_tasks.spawn(
            SOURCE,
            source
                .run(tx, shutdown.clone())
                .map(|r| r.map(|()| None).map_err(WorkerError::from)),
        );

        // The first task to end decides how the worker stops.
        let mut early_report = None;
        let source_result = loop {
            let (task, result) = tokio::select! {
                Some(ended) = data_tasks.next() => ended,
                // Telemetry tasks end only on their token: one that ends
                // now failed.
                Some((task, result)) = telemetry_tasks.next() => (task, result.map(|()| None)),
                else => (PIPELINE, Ok(None)),
            };
            let e = match (task, result) {
                (SOURCE, result) => break result,
                // The pipeline ends by itself only once its channel closed,
                // that is once the source dropped its sender: the source is
                // ending, and its result (an error at start among them) says
                // how the worker stops. Only a source that does not end
                // leaves the pipeline's end unexplained.
                (PIPELINE, Ok(report)) => {
                    match data_tasks.wait_for(SOURCE, config.shutdown_timeout).await {
                        Some(result) => {
                            early_report = report;
                            break result;
                        }
                        None => WorkerError::PipelineStopped,
                    }
                }
                // Maintenance ends once asked to stop.
                (_, Ok(_)) => continue,
                (_, Err(e)) => e,
            };
            // No zombie: stop everything, say why.
            error!(error = %e, "fatal error: stopping the worker");
            readiness.set_fatal(e.to_string());
            shutdown.cancel();
            // Records not stored stay unacknowledged; the source only
            // checkpoints what was acknowledged and releases its leases.
            // The pipeline goes first: its channel closed tells the source
            // that what is missing will never be acknowledged, so it does
            // not wait out `shutdown_grace` (longer than this stop's time).
            data_tasks.abort(PIPELINE);
            match data_tasks.wait_for(SOURCE, FATAL_STOP_TIME).await {
                Some(Err(source_error)) => {
                    warn!(error = %source_error, "source stopped with an error too")
                }
                Some(Ok(_)) => {}
                None => {
                    warn!(after = ?FATAL_STOP_TIME, "source did not stop in time; its leases expire by themselves")
                }
            }
            running.send_replace(false);
            readiness.source_running.store(false, Ordering::Relaxed);
            // Dropping the tasks aborts what is left.
            return Err(e);
        };
        running.send_replace(false);
        readiness.source_running.store(false, Ordering::Relaxed);
        // The source may have stopped by itself (an error): the maintenance
        // loop stops on the same token, and the stop deadline starts.
        shutdown.cancel();
        if let Err(e) = &source_result {
            readiness.set_fatal(e.to_string());
        }
        // The drain: the pipeline stores or dead-letters what it was given,
        // the maintenance loop releases its lease; then telemetry stops.
        let drained = data_tasks.join_all().await;
        telemetry_stop.cancel();
        let telemetry_stopped = telemetry_tasks.join_all().await;
        let report = drained?
            .into_iter()
            .find_map(|(_, report)| report)
            .or(early_report)
            .ok_or(WorkerError::PipelineStopped)?;
        telemetry_stopped?;
        info!(
            records = report.records,
            stored = report.stored,
            dead_lettered = report.dead_lettered_unroutable,
            throttled_calls = report.throttled_calls,
            "tidemark stopped"
        );
        source_result.map(|_| report)
    }
}

/// Mirrors whether the source runs into `readiness`: `/readyz` needs it,
/// and `/healthz` says `starting` until the source's own start is done.
async fn follow_source(
    mut running: watch::Receiver<bool>,
    readiness: Arc<Readiness>,
    stop: CancellationToken,
) {
    loop {
        let now = *running.borrow_and_update();
        readiness.source_running.store(now, Ordering::Relaxed);
        if now {
            readiness.starting.store(false, Ordering::Relaxed);
        }
        tokio::select! {
            () = stop.cancelled() => return,
            changed = running.changed() => if changed.is_err() { return },
        }
    }
}
