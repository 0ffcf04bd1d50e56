//! [`WorkerError`]: why the worker could not start, or stopped with an error.

use std::time::Duration;

use tidemark_consumer::ConsumerError;
use tidemark_consumer::keyschema::KeySchemaMismatch;
use tidemark_writer::WriterError;

use crate::deadletter::DeadLetterError;
use crate::maintenance::{MaintenanceLeaseError, TablesError};

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
    /// The source could not start, or stopped with an error.
    #[error(transparent)]
    Source(#[from] ConsumerError),
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
