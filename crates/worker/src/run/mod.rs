//! The running worker: what `tidemark run` does, as a library.
//!
//! Files, by job (each imports only the files listed after it):
//! - `worker.rs`: [`Worker::build`] / [`Worker::run`]: wiring, the named
//!   tasks of a run, how it stops (gracefully within `shutdown_timeout`, at
//!   once on a fatal error);
//! - `supervisor.rs`: the named-task supervisor `run` uses;
//! - `background.rs`: the maintenance round and the readiness probe;
//! - `data_path.rs`: [`DataPath`] (router, writer creating missing tables,
//!   dead letters, pipeline; shared with `replay`), [`Report`],
//!   [`Progress`];
//! - `pipeline.rs`: source records → route → writer → acknowledgement;
//! - `offload.rs`: oversized events' payloads (`schema.oversize = "s3"`)
//!   written to S3, within the writer's bounds, before their pointer items;
//! - `splits.rs`: adaptive write sharding's I/O: reading a table's split
//!   records, recording one (conditional PutItem), the refresh task that
//!   keeps the routers' learned splits current, and the task that turns keys
//!   the writer saw held at their partition's limit into splits (also used
//!   by `query`, `verify`, `key` and `status`);
//! - `error.rs`: [`WorkerError`];
//! - `telemetry/`: `/metrics`, `/healthz`, `/readyz`, the `healthcheck`
//!   client and the process's recorder with its typed snapshot, which
//!   `emf.rs` (CloudWatch Embedded Metric Format lines) and `report.rs`
//!   (each worker's report in the coordinator table, which `status` reads)
//!   read.
//!
//! Nothing here names a source type: the source is whatever
//! `tidemark_consumer::build` makes of the `[source]` section.

mod background;
mod data_path;
pub(crate) mod emf;
mod error;
mod offload;
mod pipeline;
pub(crate) mod report;
pub(crate) mod splits;
mod supervisor;
pub(crate) mod telemetry;
mod worker;

pub(crate) use data_path::DataPath;
pub use data_path::{Progress, Report};
pub use error::WorkerError;
pub use splits::adaptive_sharding;
pub use worker::Worker;
