//! The `tidemark` worker: wiring of schema, consumer and writer.
//!
//! Modules:
//! - [`config`]: the TOML config with `TIDEMARK__SECTION__KEY` overrides,
//!   validated at start with errors naming the key.
//! - [`pipeline`]: source records → route → writer → acknowledgement; every
//!   record is acknowledged only once stored or durably dead-lettered.
//! - [`coordinator`]: the maintenance lease (one maintainer at a time).
//! - [`deadletter`]: dead-letter entries and their destinations (SQS,
//!   DynamoDB, JSON-lines file); written with unlimited retries before the ack.
//! - [`produce`]: deterministic synthetic IoT events (with a hot device).
//! - [`query`]: reads an entity's events back through the query plans.
//! - [`sdk`]: the AWS SDK configuration (standard chain plus timeouts).
//! - [`tables`]: period table maintenance (create, resize by lifecycle tier,
//!   delete or tag when expired) and creation of missing tables on demand.
//! - [`telemetry`]: `/metrics` (Prometheus, with the writer's and consumer's
//!   HELP lines), `/healthz`, `/readyz`, and the `healthcheck` client.
//!
//! AWS errors are told apart by the SDK's typed methods
//! (`is_resource_not_found_exception()`, ...) or, where no typed error
//! exists, by the shared classifier `tidemark-aws-errors`; never by string.
//! - [`verify`]: reads produced events back from DynamoDB, content compared.

pub mod config;
pub mod coordinator;
pub mod deadletter;
pub mod pipeline;
pub mod produce;
pub mod query;
pub mod sdk;
pub mod tables;
pub mod telemetry;
pub mod verify;
