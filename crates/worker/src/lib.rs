//! The `tidemark` worker: wiring of schema, consumer and writer into a
//! runnable [`Worker`], plus the command line and the tools it uses.
//!
//! Data flow of `tidemark run` (one box per module; crate in brackets; the
//! function by function path is the code map in `docs/architecture.md`):
//!
//! ```text
//!  source [consumer: whatever `build` makes of [source]]
//!     │ Vec<Record> (one per event, each with an Ack)
//!     ▼
//!  run/pipeline ──route──▶ [schema: route]      unroutable ──▶ deadletter
//!     │ Submission
//!     ▼
//!  writer [writer] ──missing table──▶ maintenance (CreateMissingTables)
//!     │ WriteOutcome: Stored ──▶ Ack.done()   Rejected ──▶ deadletter ──▶ Ack.done()
//!     ▼
//!  checkpoint [consumer: kinesis/renewer, kinesis/drain (Kinesis) | sqs/delete (SQS)]
//! ```
//!
//! Modules, by subsystem:
//! - `run/` (crate-private but for [`Worker`], [`WorkerError`], [`Report`],
//!   [`Progress`] and [`adaptive_sharding`], which a writer of one's own,
//!   the benchmark driver's, wires in): the running worker. `worker.rs`: [`Worker::build`]
//!   / [`Worker::run`], the named tasks of a run (`supervisor.rs`) and how
//!   it stops (drains on shutdown within `shutdown_timeout`; stops at once
//!   on a fatal error); `data_path.rs`: the `DataPath` `replay` shares;
//!   `pipeline.rs`: source records → route → writer → acknowledgement,
//!   every record acknowledged only once stored or durably dead-lettered
//!   (the sources hand over one record per event, a source record of
//!   several, by `record_format`, split at the source; each event is stored
//!   or dead-lettered on its own, and its source record acknowledged once
//!   all of them are; during a shard migration, `schema.migrate_from`, an
//!   event whose old key differs is written under both, and acknowledged
//!   once both are stored; an oversized event's pointer item, with
//!   `schema.oversize = "s3"`, only once `offload.rs` wrote its payload to
//!   S3); `telemetry/`: `/metrics` (Prometheus, every
//!   metric described), `/healthz` (503 with the cause while a fatal error
//!   stops the worker), `/readyz`, the `healthcheck` client, and the
//!   process's recorder with its typed `MetricsSnapshot`, which `emf.rs`
//!   (CloudWatch Embedded Metric Format lines on stdout every
//!   `telemetry.emf_interval` when `telemetry.emf` is on) and `report.rs`
//!   (each worker's report in the coordinator table: lag per shard, SQS
//!   receive age, which `status` shows instead of reading the stream) read.
//! - `sdk/`: the AWS SDK configuration every command uses (standard chain
//!   plus timeouts, the command line's profile, region and endpoint), with
//!   credentials that keep serving while still valid when a refresh fails
//!   (`sdk/credentials.rs`).
//! - `metrics.rs`: this crate's metric names and help texts (the running
//!   worker's, the dead letters' and maintenance's).
//! - [`config`]: the TOML config with `TIDEMARK__SECTION__KEY` overrides;
//!   every key used or refused (checked against the schema generated from
//!   the types), every problem reported at once with its key, value, source
//!   (file:line or variable) and fix; the effective config with sources.
//!   Files: `load.rs`, `validate.rs`, `check.rs`, `schema.rs`, `error.rs`,
//!   `sections.rs`, `env.rs`.
//! - [`deadletter`]: dead-letter entries and their destinations (SQS,
//!   DynamoDB, JSON-lines file, one file each), sized to fit them; written
//!   before the ack, with bounded retries, then to a local fallback file.
//! - [`maintenance`]: period table maintenance (create, resize by lifecycle
//!   tier, delete, tag or export when expired) planned purely and applied
//!   by the table manager, creation of missing tables on demand, the
//!   fenced maintenance lease (one maintainer at a time; a stale holder's
//!   table changes are refused) and its loop, and shard-count migrations.
//! - [`tools`]: what only the command line uses besides `run`: synthetic
//!   events (`produce`, with templates), reading events back (`query`,
//!   oversized events' payloads fetched from S3 and checked by hash:
//!   `payloads`), checking a manifest against DynamoDB (`verify`, under an adaptive
//!   limit that cannot overload the backend).
//! - [`cli`]: the command line (`cli::main`, which `src/main.rs` calls):
//!   parses, loads the config, starts logs, dispatches to
//!   `cli/cmd/<command>.rs` (each owning its clap arguments) and maps errors
//!   to the documented exit codes (78 config, 69 AWS unavailable, 2 usage,
//!   1 otherwise); `cli/cmd/render.rs` is the one place output is formatted
//!   (tables, CSV, JSON lines), `cli/cmd/source.rs` the one place the
//!   command line tells source kinds apart. The only module that uses
//!   `anyhow`.
//!
//! No two modules import each other (`scripts/module-pairs`): a folder's
//! `mod.rs` declares and re-exports, its files import each other directly.
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
pub mod deadletter;
pub mod maintenance;
mod metrics;
mod run;
mod sdk;
pub mod tools;

/// Time between a running worker's reports (what `status` shows): a test
/// waits this long for one.
pub use run::report::REPORT_INTERVAL;
pub use run::{Progress, Report, Worker, WorkerError, adaptive_sharding};
