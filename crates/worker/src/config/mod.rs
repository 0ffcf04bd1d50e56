//! The worker's configuration: one TOML file, every value also settable by
//! environment as `TIDEMARK__SECTION__KEY` (e.g. `TIDEMARK__SOURCE__STREAM`,
//! `TIDEMARK__SCHEMA__KEY__SHARDS`), validated at start.
//!
//! Every key is either used or rejected: the JSON Schema generated from the
//! types ([`json_schema`]) names every key, including those of each variant
//! of a tagged table (`schema.key`, `source`, `schema.billing`). One load
//! reports every problem at once ([`LoadError::Invalid`]), each with its
//! dotted key, value, source (file and line, or the variable) and fix.
//!
//! Files (each imports only files listed after it):
//! - `load.rs`: [`Config::load`] and [`Config::from_toml`]: the file merged
//!   with its environment overrides, typed section by section so that one
//!   load reports every bad value; `effective`, `load_router` (and
//!   `load_routing`, with tiers and billing), `warnings` (what loads but is
//!   likely a mistake);
//! - `validate.rs`: the cross-field checks ([`Config::validate`]);
//! - `check.rs`: where each value came from, unknown keys, messages without
//!   Rust type names, near-miss variables, the effective config;
//! - `schema.rs`: the JSON Schema generated from the types;
//! - `error.rs`: [`LoadError`];
//! - `sections.rs`: [`Config`] and its sections (the `[source]` section is
//!   the consumer's [`SourceConfig`]);
//! - `env.rs`: the `TIDEMARK__` overrides and the default worker id.

mod check;
mod env;
mod error;
mod load;
mod schema;
mod sections;
mod validate;

#[cfg(test)]
mod tests;

pub use check::{Problem, ValueOrigin};
pub use env::ENV_PREFIX;
pub(crate) use env::{default_worker_id, process_env};
pub use error::LoadError;
pub(crate) use load::{SchemaExtras, env_warnings};
pub use schema::json_schema;
pub use sections::{
    Config, ExpiryAction, ExportConfig, ExportFormat, LateLift, LogFormat, MaintenanceConfig,
    TelemetryConfig,
};
/// The `[source]` section: the consumer's own type (each source's keys and
/// checks live with the source).
pub use tidemark_consumer::SourceConfig;
pub(crate) use validate::check_log_level;
