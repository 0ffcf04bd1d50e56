//! The `tidemark` worker: wiring of schema, consumer and writer into a
//! runnable [`Worker`], plus the command line and the tools it uses.
//!
//! Data flow of `tidemark run` (one box per module; crate in brackets):
//!
//! ```text
//!  source [consumer: kinesis | sqs]
//!     │ Vec<Record> (each with an Ack)
//!     ▼
//!  pipeline ──route──▶ [schema: route]      unroutable ──▶ deadletter
//!     │ Submission
//!     ▼
//!  writer [writer] ──missing table──▶ maintenance (CreateMissingTables)
//!     │ WriteOutcome: Stored ──▶ Ack.done()   Rejected ──▶ deadletter ──▶ Ack.done()
//!     ▼
//!  checkpoint [consumer: lease/checkpoint (Kinesis) | delete (SQS)]
//! ```
//!
//! Modules, by subsystem:
//! - The running worker (crate-private but for [`Worker`] and its
//!   [`Report`]):
//!   - `worker.rs`: [`Worker::build`] / [`Worker::run`], everything `run`
//!     does (data path, sources, maintenance loop, telemetry, readiness;
//!     drains on shutdown within `shutdown_timeout`; stops on a fatal
//!     error), and the `DataPath` `replay` shares;
//!   - `pipeline.rs`: source records → route → writer → acknowledgement;
//!     every record is acknowledged only once stored or durably
//!     dead-lettered. The sources hand over one record per event (a source
//!     record of several, by `record_format`, is split at the source): each
//!     event is stored or dead-lettered on its own, and its source record
//!     acknowledged once all of them are. During a shard migration
//!     (`schema.migrate_from`) an event
//!     whose old key differs is written under both, and acknowledged once
//!     both are stored;
//!   - `telemetry/`: `/metrics` (Prometheus, every metric described),
//!     `/healthz` (503 with the cause while a fatal error stops the
//!     worker), `/readyz`, the `healthcheck` client, and the process's
//!     recorder with its typed `MetricsSnapshot`, which `emf.rs` (CloudWatch
//!     Embedded Metric Format lines on stdout every `telemetry.emf_interval`
//!     when `telemetry.emf` is on) and `report.rs` (each worker's report in
//!     the coordinator table: lag per shard, SQS receive age, which
//!     `status` shows instead of reading the stream) read;
//!   - `metrics.rs`: this crate's metric names and help texts;
//!   - `sdk.rs`, `credentials.rs`: the AWS SDK configuration (standard
//!     chain plus timeouts, the command line's profile, region and
//!     endpoint), with credentials that keep serving while still valid
//!     when a refresh fails.
//! - [`config`]: the TOML config with `TIDEMARK__SECTION__KEY` overrides;
//!   every key used or refused (checked against the schema generated from
//!   the types), every problem reported at once with its key, value, source
//!   (file:line or variable) and fix; the effective config with sources.
//! - [`deadletter`]: dead-letter entries and their destinations (SQS,
//!   DynamoDB, JSON-lines file, one file each), sized to fit them; written
//!   before the ack, with bounded retries, then to a local fallback file.
//! - [`maintenance`]: period table maintenance (create, resize by lifecycle
//!   tier, delete, tag or export when expired) planned purely and applied
//!   by the table manager, creation of missing tables on demand, the
//!   fenced maintenance lease (one maintainer at a time; a stale holder's
//!   table changes are refused) and its loop, and shard-count migrations.
//! - [`tools`]: what only the command line uses besides `run`: synthetic
//!   events (`produce`, with templates), reading events back (`query`),
//!   checking a manifest against DynamoDB (`verify`, under an adaptive
//!   limit that cannot overload the backend).
//! - [`cli`]: the command line (`cli::main`, which `src/main.rs` calls):
//!   parses, loads the config, starts logs, dispatches to
//!   `cli/cmd/<command>.rs` (each owning its clap arguments) and maps errors
//!   to the documented exit codes (78 config, 69 AWS unavailable, 2 usage,
//!   1 otherwise); `cli/cmd/render.rs` is the one place output is formatted
//!   (tables, CSV, JSON lines). The only module that uses `anyhow`.
//!
//! AWS errors are told apart by the SDK's typed methods
//! (`is_resource_not_found_exception()`, ...) or, where no typed error
//! exists, by the shared classifier `tidemark-aws-errors`; never by string.
//!
//! Guarantees: at-least-once. A record is acknowledged (checkpointed or
//! deleted) only after DynamoDB confirmed its write or its dead letter is
//! durable; a graceful shutdown drains everything in flight first, for at
//! most `shutdown_timeout` (past it in-flight work is abandoned, never
//! acknowledged, and `run` fails). No zombie: a fatal writer, dead-letter or
//! pipeline error stops the worker with an error naming the cause.

pub mod cli;
pub mod config;
mod credentials;
pub mod deadletter;
mod emf;
pub mod maintenance;
mod metrics;
mod pipeline;
mod report;
mod sdk;
mod telemetry;
pub mod tools;
mod worker;

/// Time between a running worker's reports (what `status` shows): a test
/// waits this long for one.
pub use report::REPORT_INTERVAL;
pub use worker::{Progress, Report, Worker, WorkerError};
