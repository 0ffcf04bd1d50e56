//! Table maintenance: the period tables' life, done by the worker itself
//! (the seeds use a Lambda on a cron).
//!
//! A round reads the tables of ours (names `{prefix}_{label}` that parse back
//! to a period; any other table is never touched), checks each one's key
//! schema (a table with other keys is an error naming found and expected),
//! computes its lifecycle state at `now`, and finds with the pure
//! `round_actions` what brings every table to its desired state: it
//! *reconciles*, it does not only create.
//!
//! - Create the current and the prebuild table: key schema from config,
//!   tagged `tidemark:prefix`, TTL enabled, provisioned at the tier of its
//!   state or on demand with optional warm throughput, deletion protection
//!   when configured.
//! - For every existing table: capacity tier, warm throughput, TTL, the
//!   prefix tag, point-in-time recovery and deletion protection (both for
//!   tables younger than cold, when configured). A setting changed behind
//!   the worker's back, or a call that failed, is set again next round;
//!   each action is the drift it repairs (logged and returned).
//! - Past retention: delete, tag, or export to S3 and delete once the
//!   export completed.
//!
//! Settings that need a call of their own per table (TTL, PITR, tags) are
//! read each round for tables younger than frozen, and for a few frozen
//! tables per round in turn (five), so a 90-table
//! retention does not cost hundreds of control-plane calls a minute.
//!
//! Refusals (LimitExceeded on decreases, a busy table) are reported and
//! retried next round, never fatal. Quota errors (LimitExceededException on
//! CreateTable or a capacity increase) are logged as errors and counted
//! (`tidemark_maintenance_quota_errors_total`); a missing table that cannot
//! be created for a quota is retried for `maintenance.quota_retry_for`, then
//! its records are dead-lettered with the reason. Tables created for a
//! backfill (periods already cold or frozen) are created on demand, not at
//! the active tier.
//!
//! One maintainer at a time: the maintenance lease ([`MaintenanceLease`],
//! fenced, in the coordinator table) is confirmed before each mutating
//! call of a `run` round, so a worker that lost it cannot act on a table.
//!
//! Files:
//! - `drift.rs`: the pure plan: desired state per lifecycle state, drift,
//!   actions (`round_actions`); no I/O, unit-tested;
//! - `manager.rs`: [`TableManager`], the I/O that lists the tables and
//!   applies a round's actions, and the start-up key-layout check;
//!   `manager/scaling.rs`: table auto scaling per tier (Application Auto
//!   Scaling targets and Tidemark's target-tracking policy);
//! - `missing.rs`: [`CreateMissingTables`], the writer's handler for a
//!   table that does not exist yet;
//! - `tags.rs`: the tags on period tables and the layout tags' format;
//! - `clock.rs`: DynamoDB's clock from the `Date` of its answers, checked
//!   before actions that trust this host's clock;
//! - `error.rs`: [`TablesError`];
//! - `lease.rs`: the fenced maintenance lease and the loop that runs rounds
//!   while holding it ([`maintain`]);
//! - [`lift`]: capacity lifts for late backlogs (records in the
//!   coordinator table, sizing);
//! - `migrate.rs`: shard-count migrations (layouts and migration state per
//!   table, backfill, cutover).

mod clock;
mod drift;
mod error;
mod lease;
pub mod lift;
mod manager;
pub mod migrate;
mod missing;
mod tags;

pub use drift::{Action, RoundKind, Scaling, Side, TableInfo, TablePolicy};
pub use error::TablesError;
pub use lease::{MaintenanceLease, MaintenanceLeaseError, maintain};
pub use manager::{ActionGuard, Applied, SCALING_POLICY_NAME, TableManager};
pub use missing::CreateMissingTables;
pub use tags::{LAYOUT_FROM_TAG, LAYOUT_TAG, MIGRATION_TAG, PREFIX_TAG, layout_of};
