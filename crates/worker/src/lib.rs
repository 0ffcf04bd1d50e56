//! The `tidemark` worker: wiring of schema, consumer and writer into a
//! runnable [`Worker`](worker::Worker), plus the pieces the CLI commands use.
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
//!  writer [writer] ──missing table──▶ tables (CreateMissingTables)
//!     │ WriteOutcome: Stored ──▶ Ack.done()   Rejected ──▶ deadletter ──▶ Ack.done()
//!     ▼
//!  checkpoint [consumer: lease/checkpoint (Kinesis) | delete (SQS)]
//! ```
//!
//! Library modules:
//! - [`worker`]: [`Worker::build`](worker::Worker::build) /
//!   [`Worker::run`](worker::Worker::run) (everything `run` does: data path,
//!   sources, maintenance loop, telemetry, readiness; drains on shutdown
//!   within `shutdown_timeout`; stops on a fatal error) and the
//!   [`DataPath`](worker::DataPath) `replay` shares.
//! - [`config`]: the TOML config with `TIDEMARK__SECTION__KEY` overrides;
//!   every key used or refused (checked against the schema generated from
//!   the types), every problem reported at once with its key, value, source
//!   (file:line or variable) and fix; the effective config with sources.
//! - [`pipeline`]: source records → route → writer → acknowledgement; every
//!   record is acknowledged only once stored or durably dead-lettered. A
//!   record of several events (`record_format` ndjson / json_array, gzip
//!   detected) is split: each event is stored or dead-lettered on its own,
//!   and the record acknowledged once all of them are. During a shard
//!   migration (`schema.migrate_from`) an event whose old key differs is
//!   written under both, and acknowledged once both are stored.
//! - [`credentials`]: [`KeepValid`](credentials::KeepValid), credentials
//!   that keep serving while still valid when a refresh fails.
//! - [`coordinator`]: the fenced maintenance lease (one maintainer at a
//!   time; a stale holder's table changes are refused) and the loop that
//!   runs rounds while holding it.
//! - [`deadletter`]: dead-letter entries and their destinations (SQS,
//!   DynamoDB, JSON-lines file), sized to fit them; written before the ack,
//!   with bounded retries, then to a local fallback file.
//! - [`emf`]: CloudWatch Embedded Metric Format lines on stdout every
//!   `telemetry.emf_interval` (lag, items stored/throttled per table, dead
//!   letters by reason, in-flight items, maintenance health) when
//!   `telemetry.emf` is on.
//! - [`metrics`]: this crate's metric names and their help texts.
//! - [`migrate`]: shard-count migrations: each table's recorded layouts and
//!   migration state (old-only, dual, backfilled, new-only), the layouts a
//!   reader queries per table, the cutover, and the backfill.
//! - [`produce`]: deterministic synthetic IoT events (with a hot device).
//! - [`template`]: events in the user's shape from a template file with
//!   placeholders (`produce --template`).
//! - [`query`]: reads an entity's events back through the query plans.
//! - [`report`]: each worker's report in the coordinator table (lag per
//!   shard, SQS receive age), which `status` shows instead of reading the
//!   stream.
//! - [`sdk`]: the AWS SDK configuration (standard chain plus timeouts, the
//!   command line's profile, region and endpoint, credentials wrapped in
//!   `KeepValid`).
//! - [`tables`]: period table maintenance (create, resize by lifecycle tier,
//!   delete or tag when expired) and creation of missing tables on demand.
//! - [`telemetry`]: `/metrics` (Prometheus, every metric described),
//!   `/healthz` (503 with the cause while a fatal error stops the worker),
//!   `/readyz`, and the `healthcheck` client.
//! - [`verify`]: reads produced events back from DynamoDB, content compared,
//!   under an adaptive limit that cannot overload the backend.
//!
//! The binary (`src/main.rs`) only parses, loads the config, starts logs,
//! dispatches to `src/cmd/<command>.rs` (each owning its clap arguments) and
//! maps errors to the documented exit codes (`cmd::exit_code`: 78 config,
//! 69 AWS unavailable, 2 usage, 1 otherwise); `src/cmd/render.rs` is the one place output
//! is formatted (tables, CSV, JSON lines).
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

pub mod config;
pub mod credentials;
pub mod deadletter;
pub mod emf;
pub mod maintenance;
pub mod metrics;
pub mod pipeline;
pub mod produce;
pub mod query;
pub mod report;
pub mod sdk;
pub mod telemetry;
pub mod template;
pub mod verify;
pub mod worker;
