//! Table maintenance: the period tables' life, done by the worker itself
//! (the seeds use a Lambda on a cron).
//!
//! A round reads the tables of ours (names `{prefix}_{label}` that parse back
//! to a period; any other table is never touched), checks each one's key
//! schema (a table with other keys is an error naming found and expected),
//! computes its lifecycle state at `now`, and plans with the pure
//! [`plan_round`] what brings every table to its desired state: it
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
//! tables per round in turn ([`FROZEN_CHECKS_PER_ROUND`]), so a 90-table
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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tidemark_governor::Governor;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::delete_table::DeleteTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::operation::update_table::UpdateTableError;
use aws_sdk_dynamodb::types::{
    BillingMode, ExportFormat as SdkExportFormat, ExportStatus as SdkExportStatus,
    PointInTimeRecoverySpecification, PointInTimeRecoveryStatus, ProvisionedThroughput,
    TableStatus, Tag, TimeToLiveSpecification, TimeToLiveStatus, WarmThroughput,
};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::Serialize;
use tidemark_aws_errors::{ErrorClass, classify, is_access_denied};
use tidemark_consumer::keyschema::{KeyAttr, KeySchemaMismatch, KeySpec};
use tidemark_schema::period::{
    Billing, Capacity, CapacityTiers, Lifecycle, LifecycleState, PeriodRef, TableNaming,
};
use tidemark_schema::route::RouterConfig;
use tidemark_writer::{MissingTableAction, MissingTableHandler};
use tracing::{error, info, warn};

use crate::config::{ExpiryAction, ExportConfig, ExportFormat};
use crate::metrics as m;

/// The tag put on expired tables kept for archiving.
pub const EXPIRED_TAG: &str = "tidemark:expired";
/// The tag every period table carries: its table prefix. IAM conditions on
/// it (`aws:ResourceTag/tidemark:prefix`) keep another team's `prefix_*`
/// tables out of the task role's reach.
pub const PREFIX_TAG: &str = "tidemark:prefix";
/// The tag recording the key layout a table is written with (strategy,
/// shard count, bucket): `strategy=time_bucket/bucket=hour/shards=10`.
/// Keys of one table must never change silently: `query` would miss every
/// item written before.
pub const LAYOUT_TAG: &str = "tidemark:layout";
/// During a shard migration: the layout a table was written with before,
/// still read (and written) beside [`LAYOUT_TAG`]'s until the cutover.
pub const LAYOUT_FROM_TAG: &str = "tidemark:layout-from";
/// During a shard migration: the table's state, `dual` (both layouts
/// written and read), `backfilled` (every old item copied to the new
/// layout) or `new-only` (cut over: only [`LAYOUT_TAG`]'s layout is read,
/// old-layout items may be removed). See `crate::migrate`.
pub const MIGRATION_TAG: &str = "tidemark:migration";
/// The tag holding the ARN of a table's export to S3 (`on_expiry = "export"`).
pub const EXPORT_TAG: &str = "tidemark:export-arn";
/// Frozen tables whose TTL, PITR and tags are read per round, in turn.
pub const FROZEN_CHECKS_PER_ROUND: usize = 5;

/// An expired table's export to S3, as DynamoDB reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExportState {
    /// Started, not finished.
    InProgress,
    /// Done: the table may be deleted.
    Completed,
    /// Failed (or unknown to DynamoDB): started again.
    Failed(String),
}

/// Settings read with calls of their own (not in DescribeTable); `None`
/// where not read this round.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Details {
    /// The TTL attribute when TTL is enabled (or being enabled); `Some(None)`
    /// when disabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Option<String>>,
    /// Point-in-time recovery on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pitr: Option<bool>,
    /// The table's tags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// The export started for this table, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export: Option<ExportState>,
}

/// What maintenance knows about one of our tables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableInfo {
    /// Table name.
    pub name: String,
    /// Its period label, e.g. `2026-11-22`.
    pub period: String,
    /// Lifecycle state at the round's `now`.
    pub state: LifecycleState,
    /// DynamoDB's table status (`ACTIVE`, `CREATING`, `UPDATING`, ...).
    pub status: String,
    /// Provisioned capacity; `None` when on demand.
    pub capacity: Option<Capacity>,
    /// Already tagged as expired (kept for archiving).
    pub tagged_expired: bool,
    /// Warm write throughput DynamoDB reports, units/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_write_units: Option<u64>,
    /// Deletion protection on.
    pub deletion_protection: bool,
    /// Settings read with extra calls.
    #[serde(skip_serializing_if = "is_default")]
    pub details: Details,
    /// Table ARN.
    #[serde(skip)]
    pub arn: String,
    /// Period start, for ordering.
    #[serde(skip)]
    pub start_ms: i64,
}

fn is_default(d: &Details) -> bool {
    *d == Details::default()
}

/// One maintenance action: the drift it repairs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Create a table for a period that has none.
    Create {
        /// Table name.
        table: String,
        /// State it is created in (active or prebuild; cold or frozen for a
        /// backfill, on demand).
        state: LifecycleState,
        /// Provisioned capacity; `None` for on demand.
        capacity: Option<Capacity>,
        /// Warm write throughput for an on-demand prebuilt table.
        warm_write_units: Option<u64>,
    },
    /// Change provisioned capacity to the tier of the table's state.
    Resize {
        /// Table name.
        table: String,
        /// Its state.
        state: LifecycleState,
        /// Current capacity.
        from: Capacity,
        /// Tier capacity.
        to: Capacity,
    },
    /// Raise an on-demand table's warm write throughput.
    SetWarmThroughput {
        /// Table name.
        table: String,
        /// Current warm write units/s, if reported.
        from: Option<u64>,
        /// Wanted.
        to: u64,
    },
    /// Enable TTL on the configured attribute.
    SetTtl {
        /// Table name.
        table: String,
        /// The attribute TTL is on now (`None`: disabled).
        from: Option<String>,
        /// The configured attribute.
        to: String,
    },
    /// Turn point-in-time recovery on or off.
    SetPitr {
        /// Table name.
        table: String,
        /// Wanted.
        enabled: bool,
    },
    /// Turn deletion protection on or off.
    SetDeletionProtection {
        /// Table name.
        table: String,
        /// Wanted.
        enabled: bool,
    },
    /// Put the `tidemark:prefix` tag on a table that lacks it.
    TagPrefix {
        /// Table name.
        table: String,
        /// Table ARN.
        #[serde(skip)]
        arn: String,
    },
    /// Record the config's key layout on a table that has none.
    TagLayout {
        /// Table name.
        table: String,
        /// Table ARN.
        #[serde(skip)]
        arn: String,
    },
    /// Export an expired table to S3 (`on_expiry = "export"`).
    Export {
        /// Table name.
        table: String,
        /// Table ARN.
        #[serde(skip)]
        arn: String,
    },
    /// Delete a table past retention.
    Delete {
        /// Table name.
        table: String,
    },
    /// Tag a table past retention (kept for archiving).
    TagExpired {
        /// Table name.
        table: String,
    },
}

impl Action {
    /// The action's kind, as in its serialized form.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Create { .. } => "create",
            Action::Resize { .. } => "resize",
            Action::SetWarmThroughput { .. } => "set_warm_throughput",
            Action::SetTtl { .. } => "set_ttl",
            Action::SetPitr { .. } => "set_pitr",
            Action::SetDeletionProtection { .. } => "set_deletion_protection",
            Action::TagPrefix { .. } => "tag_prefix",
            Action::TagLayout { .. } => "tag_layout",
            Action::Export { .. } => "export",
            Action::Delete { .. } => "delete",
            Action::TagExpired { .. } => "tag_expired",
        }
    }

    /// The table the action is about.
    pub fn table(&self) -> &str {
        match self {
            Action::Create { table, .. }
            | Action::Resize { table, .. }
            | Action::SetWarmThroughput { table, .. }
            | Action::SetTtl { table, .. }
            | Action::SetPitr { table, .. }
            | Action::SetDeletionProtection { table, .. }
            | Action::TagPrefix { table, .. }
            | Action::TagLayout { table, .. }
            | Action::Export { table, .. }
            | Action::Delete { table }
            | Action::TagExpired { table } => table,
        }
    }
}

/// Which actions a round may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundKind {
    /// Only create missing current/prebuild tables (`tables ensure`).
    Ensure,
    /// Everything: create, reconcile, expire (`tables rotate`, and `run`).
    Rotate,
}

/// Settings of table maintenance.
#[derive(Debug, Clone)]
pub struct TablePolicy {
    /// Names of our tables.
    pub naming: TableNaming,
    /// Lifecycle timing.
    pub lifecycle: Lifecycle,
    /// Capacity per state (provisioned billing).
    pub tiers: CapacityTiers,
    /// Provisioned or on demand.
    pub billing: Billing,
    /// Delete, tag or export expired tables.
    pub on_expiry: ExpiryAction,
    /// Where exports go (`on_expiry = "export"`).
    pub export: ExportConfig,
    /// Point-in-time recovery on tables younger than cold (and off once
    /// cold); `false` leaves it as it is.
    pub pitr: bool,
    /// Deletion protection on tables younger than cold (and off once cold);
    /// `false` leaves it as it is.
    pub deletion_protection: bool,
    /// Partition key attribute name.
    pub pk: String,
    /// Sort key attribute name.
    pub sk: String,
    /// TTL attribute, enabled on every table when set.
    pub ttl_attribute: Option<String>,
    /// The key layout new items are written with ([`layout_of`]).
    pub layout: String,
    /// During a shard migration (`schema.migrate_from`): the old layout,
    /// written beside `layout`.
    pub layout_from: Option<String>,
}

/// What a table in some state should look like; `None` where the policy
/// leaves a setting alone.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Desired {
    capacity: Option<Capacity>,
    warm_write_units: Option<u64>,
    pitr: Option<bool>,
    deletion_protection: Option<bool>,
}

impl TablePolicy {
    /// The policy a router config implies, with tiers, billing and expiry;
    /// no PITR or deletion protection management, no export destination.
    pub fn new(
        router: &RouterConfig,
        tiers: CapacityTiers,
        billing: Billing,
        on_expiry: ExpiryAction,
    ) -> Self {
        TablePolicy {
            naming: TableNaming {
                prefix: router.table_prefix.clone(),
                period: router.period,
            },
            lifecycle: router.lifecycle(),
            tiers,
            billing,
            on_expiry,
            export: ExportConfig::default(),
            pitr: false,
            deletion_protection: false,
            pk: router.key_attributes.pk.clone(),
            sk: router.key_attributes.sk.clone(),
            ttl_attribute: router.ttl_attribute.clone(),
            layout: layout_of(&router.key),
            layout_from: router.migrate_from.as_ref().map(layout_of),
        }
    }

    /// The key schema every period table must have.
    pub fn key_spec(&self) -> KeySpec {
        KeySpec::hash_range(KeyAttr::string(&self.pk), KeyAttr::string(&self.sk))
    }

    /// The state and creation settings of a period's table at `now`. A
    /// period already cold or frozen is a backfill: its table is created
    /// on demand (no capacity to size, nothing held at the active tier).
    fn creation(
        &self,
        p: &PeriodRef,
        now_ms: i64,
    ) -> (LifecycleState, Option<Capacity>, Option<u64>) {
        let state = self.lifecycle.state_at(p, now_ms);
        if is_backfill(state) {
            return (state, None, None);
        }
        (
            state,
            self.billing.capacity(&self.tiers, state),
            self.billing.warm_write_units(state),
        )
    }

    fn desired(&self, state: LifecycleState) -> Desired {
        let young = matches!(
            state,
            LifecycleState::Prebuild | LifecycleState::Active | LifecycleState::Cooling
        );
        Desired {
            capacity: self.billing.capacity(&self.tiers, state),
            warm_write_units: self.billing.warm_write_units(state),
            pitr: self.pitr.then_some(young),
            deletion_protection: self.deletion_protection.then_some(young),
        }
    }
}

/// The layout tag value of a key strategy: its serialized fields as
/// `name=value` pairs, in name order, joined by `/` (only characters tag
/// values allow).
pub fn layout_of(key: &tidemark_schema::strategy::KeyStrategy) -> String {
    let mut pairs: Vec<String> = match serde_json::to_value(key) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
            .collect(),
        _ => Vec::new(),
    };
    pairs.sort();
    pairs.join("/")
}

/// A layout tag value as the body of a TOML inline table
/// (`bucket = "hour", shards = 4, strategy = "time_bucket"`).
pub fn layout_toml(value: &str) -> String {
    value
        .split('/')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| match v.parse::<u64>() {
            Ok(_) => format!("{k} = {v}"),
            Err(_) => format!("{k} = \"{v}\""),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The key strategy of a layout tag value ([`layout_of`]'s inverse);
/// `None` for a value no strategy gives.
pub fn parse_layout(value: &str) -> Option<tidemark_schema::strategy::KeyStrategy> {
    let mut fields = serde_json::Map::new();
    for pair in value.split('/') {
        let (k, v) = pair.split_once('=')?;
        let v = match v.parse::<u64>() {
            Ok(n) => serde_json::Value::from(n),
            Err(_) => serde_json::Value::from(v),
        };
        fields.insert(k.to_string(), v);
    }
    let key = serde_json::from_value(serde_json::Value::Object(fields)).ok()?;
    (layout_of(&key) == value).then_some(key)
}

/// A table for a period already past its grace: created for a backfill.
fn is_backfill(state: LifecycleState) -> bool {
    matches!(state, LifecycleState::Cold | LifecycleState::Frozen)
}

/// Plans one round: a pure function of the tables that exist and `now`.
pub fn plan_round(
    policy: &TablePolicy,
    existing: &[TableInfo],
    now: DateTime<Utc>,
    kind: RoundKind,
) -> Vec<Action> {
    let now_ms = now.timestamp_millis();
    let mut actions = Vec::new();
    let current = policy.naming.period.containing(now_ms);
    for p in [current, current.next()] {
        let name = policy.naming.name_of(&p);
        let (state, capacity, warm_write_units) = policy.creation(&p, now_ms);
        let wanted = matches!(state, LifecycleState::Active | LifecycleState::Prebuild);
        if wanted && !existing.iter().any(|t| t.name == name) {
            actions.push(Action::Create {
                table: name,
                state,
                capacity,
                warm_write_units,
            });
        }
    }
    if kind == RoundKind::Ensure {
        return actions;
    }
    for t in existing {
        // DynamoDB refuses changes to a table that is not ACTIVE (being
        // created, updated or deleted): next round.
        if t.status != TableStatus::Active.as_str() {
            continue;
        }
        match t.state {
            LifecycleState::Expired => expire(policy, t, &mut actions),
            state => reconcile(policy, t, state, &mut actions),
        }
    }
    actions
}

/// The actions that bring a live table to its desired state.
fn reconcile(policy: &TablePolicy, t: &TableInfo, state: LifecycleState, out: &mut Vec<Action>) {
    let want = policy.desired(state);
    let table = || t.name.clone();
    // One UpdateTable per table per round: the table is UPDATING after one,
    // and DynamoDB refuses the next until it is ACTIVE again.
    if let (Some(from), Some(to)) = (t.capacity, want.capacity)
        && from != to
    {
        out.push(Action::Resize {
            table: table(),
            state,
            from,
            to,
        });
    } else if let Some(enabled) = want.deletion_protection
        && t.deletion_protection != enabled
    {
        out.push(Action::SetDeletionProtection {
            table: table(),
            enabled,
        });
    } else if let Some(to) = want.warm_write_units
        && t.capacity.is_none()
        && t.warm_write_units.unwrap_or(0) < to
    {
        out.push(Action::SetWarmThroughput {
            table: table(),
            from: t.warm_write_units,
            to,
        });
    }
    if let (Some(to), Some(from)) = (&policy.ttl_attribute, &t.details.ttl)
        && from.as_ref() != Some(to)
    {
        out.push(Action::SetTtl {
            table: table(),
            from: from.clone(),
            to: to.clone(),
        });
    }
    if let (Some(enabled), Some(on)) = (want.pitr, t.details.pitr)
        && enabled != on
    {
        out.push(Action::SetPitr {
            table: table(),
            enabled,
        });
    }
    if let Some(tags) = &t.details.tags
        && tags.get(PREFIX_TAG) != Some(&policy.naming.prefix)
    {
        out.push(Action::TagPrefix {
            table: table(),
            arn: t.arn.clone(),
        });
    }
    // A table from before layouts were recorded is taken to have been
    // written with the config's layout (the start-up check refuses a
    // different one on tables that take writes).
    if let Some(tags) = &t.details.tags
        && !tags.contains_key(LAYOUT_TAG)
    {
        out.push(Action::TagLayout {
            table: table(),
            arn: t.arn.clone(),
        });
    }
}

/// What happens to a table past retention.
fn expire(policy: &TablePolicy, t: &TableInfo, out: &mut Vec<Action>) {
    let table = || t.name.clone();
    let delete = |out: &mut Vec<Action>| {
        // Protection this policy set is lifted first; protection set by
        // hand is kept, and the delete's refusal reported every round.
        if policy.deletion_protection && t.deletion_protection {
            out.push(Action::SetDeletionProtection {
                table: table(),
                enabled: false,
            });
        } else {
            out.push(Action::Delete { table: table() });
        }
    };
    match policy.on_expiry {
        ExpiryAction::Delete => delete(out),
        ExpiryAction::Tag if !t.tagged_expired => out.push(Action::TagExpired { table: table() }),
        ExpiryAction::Tag => {}
        ExpiryAction::Export => match (&t.details.export, t.details.pitr) {
            (Some(ExportState::Completed), _) => delete(out),
            (Some(ExportState::InProgress), _) => {}
            // The export reads the table's point-in-time backup.
            (_, Some(false)) => out.push(Action::SetPitr {
                table: table(),
                enabled: true,
            }),
            (None | Some(ExportState::Failed(_)), Some(true)) => out.push(Action::Export {
                table: table(),
                arn: t.arn.clone(),
            }),
            // Not read this round.
            (_, None) => {}
        },
    }
}

/// A read's answer, or `None` (warned) when it failed: the setting is then
/// not reconciled this round.
fn read_or_warn<T, E: std::error::Error>(table: &str, what: &str, r: Result<T, E>) -> Option<T> {
    r.map_err(|e| warn!(table, error = %DisplayErrorContext(&e), "reading {what} failed"))
        .ok()
}

/// A table's name and ARN.
struct TableRef {
    name: String,
    arn: String,
}

/// Errors of table maintenance calls.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    /// A DynamoDB call failed.
    #[error("{operation} {table}: {message}")]
    Call {
        /// The operation.
        operation: &'static str,
        /// The table ("" for ListTables).
        table: String,
        /// DynamoDB's error code, when it gave one.
        code: Option<String>,
        /// The error text.
        message: String,
        /// The call got no answer (connection refused, timeout): DynamoDB
        /// is unreachable (`tables` exits 69).
        unreachable: bool,
    },
    /// An account quota refused the call (LimitExceededException on
    /// CreateTable or a capacity change): an operator must act.
    #[error(
        "{operation} {table}: account quota reached ({message}); raise the DynamoDB \
         table or capacity quota, lower schema.tiers, or delete old tables"
    )]
    Quota {
        /// The operation.
        operation: &'static str,
        /// The table.
        table: String,
        /// The error text.
        message: String,
    },
    /// A table that takes writes and has items was written with another
    /// key layout than the config's.
    #[error(
        "table {table} was written with key layout {recorded}, but the config says {configured}: \
         its items would be written and read under other keys (queries would miss every item \
         written before). Set schema.key back to {recorded}, or migrate: keep the new \
         schema.key and add schema.migrate_from = {{ {recorded_toml} }} (dual writes, then \
         `tidemark migrate backfill` and `tidemark migrate cutover`); see 'Changing the shard \
         count' in docs/keys-and-tables.md"
    )]
    LayoutChanged {
        /// The table.
        table: String,
        /// Its `tidemark:layout` tag.
        recorded: String,
        /// The config's layout.
        configured: String,
        /// The recorded layout as a TOML inline table's body.
        recorded_toml: String,
    },
    /// A table of ours has another key schema than the config's.
    #[error(transparent)]
    KeySchema(#[from] KeySchemaMismatch),
    /// The table did not become ACTIVE in time.
    #[error("table {0} did not become ACTIVE within {1:?}")]
    NotActive(String, Duration),
    /// The round's guard refused an action (the maintenance lease is no
    /// longer ours): the round stopped before it.
    #[error("{action} {table} refused: {reason}")]
    Refused {
        /// The action's kind.
        action: &'static str,
        /// The table.
        table: String,
        /// Why.
        reason: String,
    },
}

/// Asked before each mutating call of a round (the maintenance lease, see
/// `coordinator`): an error stops the round before the call.
pub trait ActionGuard: Sync {
    /// `Ok` when `action` may run now.
    fn confirm<'a>(&'a self, action: &'a Action) -> BoxFuture<'a, Result<(), String>>;
}

/// The guard of commands an operator runs by hand (`tables rotate`).
#[derive(Debug, Clone, Copy)]
pub struct Unguarded;

impl ActionGuard for Unguarded {
    fn confirm<'a>(&'a self, _action: &'a Action) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

impl TablesError {
    fn call<E: ProvideErrorMetadata + std::error::Error + 'static>(
        operation: &'static str,
        table: &str,
        e: aws_sdk_dynamodb::error::SdkError<E>,
    ) -> Self {
        let code = e.code().map(str::to_string);
        let unreachable = matches!(
            e,
            aws_sdk_dynamodb::error::SdkError::DispatchFailure(_)
                | aws_sdk_dynamodb::error::SdkError::TimeoutError(_)
        );
        TablesError::Call {
            operation,
            table: table.to_string(),
            code,
            message: DisplayErrorContext(e).to_string(),
            unreachable,
        }
    }

    /// The call got no answer at all: DynamoDB is unreachable.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            TablesError::Call {
                unreachable: true,
                ..
            }
        )
    }

    /// A quota refusal: logged as an error and counted, for the alarm.
    fn quota<E: std::error::Error + 'static>(
        operation: &'static str,
        table: &str,
        e: aws_sdk_dynamodb::error::SdkError<E>,
    ) -> Self {
        let err = TablesError::Quota {
            operation,
            table: table.to_string(),
            message: DisplayErrorContext(e).to_string(),
        };
        metrics::counter!(m::QUOTA_ERRORS, "operation" => operation).increment(1);
        error!(table, operation, error = %err, "DynamoDB quota reached");
        err
    }

    fn build(operation: &'static str, table: &str, e: impl std::fmt::Display) -> Self {
        TablesError::Call {
            operation,
            table: table.to_string(),
            code: None,
            message: e.to_string(),
            unreachable: false,
        }
    }

    fn code(&self) -> Option<&str> {
        match self {
            TablesError::Call { code, .. } => code.as_deref(),
            _ => None,
        }
    }
}

/// The outcome of one applied action.
#[derive(Debug, Serialize)]
pub struct Applied {
    /// The action.
    #[serde(flatten)]
    pub action: Action,
    /// `None` when done; the error text when it failed (retried next round).
    pub error: Option<String>,
    /// The failure was DynamoDB not answering at all.
    #[serde(skip)]
    pub unreachable: bool,
}

/// Runs maintenance against DynamoDB.
#[derive(Debug, Clone)]
pub struct TableManager {
    client: aws_sdk_dynamodb::Client,
    policy: TablePolicy,
    /// The DynamoDB endpoint's governor: table calls wait while it is open.
    gov: Option<Governor>,
    /// Rounds so far: which frozen tables get their details read.
    rounds: Arc<AtomicUsize>,
    /// How long a created table may take to become ACTIVE.
    pub active_timeout: Duration,
}

impl TableManager {
    /// A manager for `policy`'s tables.
    pub fn new(client: aws_sdk_dynamodb::Client, policy: TablePolicy) -> Self {
        TableManager {
            client,
            policy,
            gov: None,
            rounds: Arc::new(AtomicUsize::new(0)),
            active_timeout: Duration::from_secs(300),
        }
    }

    /// Table calls (DescribeTable polling included) are admitted by the
    /// DynamoDB endpoint's shared governor.
    pub fn with_governor(mut self, gov: Governor) -> Self {
        self.gov = Some(gov);
        self
    }

    /// One SDK call, through the governor when there is one.
    async fn call<T, E, R>(
        &self,
        fut: impl std::future::Future<Output = Result<T, aws_sdk_dynamodb::error::SdkError<E, R>>>,
    ) -> Result<T, aws_sdk_dynamodb::error::SdkError<E, R>>
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata,
        R: tidemark_aws_errors::HttpStatus,
    {
        Governor::run_opt(self.gov.as_ref(), fut).await
    }

    /// The policy.
    pub fn policy(&self) -> &TablePolicy {
        &self.policy
    }

    /// Our tables, oldest period first, with their state at `now`. A table
    /// of ours with another key schema is an error naming it.
    pub async fn list(&self, now: DateTime<Utc>) -> Result<Vec<TableInfo>, TablesError> {
        self.list_with(now, None).await
    }

    /// [`list`](Self::list); with `round`, the details (TTL, PITR, tags,
    /// export) of tables younger than frozen, of expired ones, and of a
    /// rotating few frozen ones are read too.
    async fn list_with(
        &self,
        now: DateTime<Utc>,
        round: Option<usize>,
    ) -> Result<Vec<TableInfo>, TablesError> {
        let now_ms = now.timestamp_millis();
        let mut names = Vec::new();
        let mut pages = self.client.list_tables().into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| TablesError::call("ListTables", "", e))?;
            names.extend(page.table_names().iter().cloned());
        }
        let spec = self.policy.key_spec();
        let mut out = Vec::new();
        for name in names {
            let Some(period) = self.policy.naming.parse(&name) else {
                continue;
            };
            let d = match self
                .call(self.client.describe_table().table_name(&name).send())
                .await
            {
                Ok(d) => d,
                // Deleted between the listing and now.
                Err(e)
                    if e.as_service_error()
                        .is_some_and(DescribeTableError::is_resource_not_found_exception) =>
                {
                    continue;
                }
                Err(e) => return Err(TablesError::call("DescribeTable", &name, e)),
            };
            let Some(table) = d.table() else { continue };
            spec.check(&name, "period table", table)?;
            let on_demand = table
                .billing_mode_summary()
                .and_then(|b| b.billing_mode())
                .is_some_and(|m| *m == BillingMode::PayPerRequest);
            let capacity = if on_demand {
                None
            } else {
                table.provisioned_throughput().map(|t| Capacity {
                    read: t.read_capacity_units().unwrap_or(0).max(0) as u64,
                    write: t.write_capacity_units().unwrap_or(0).max(0) as u64,
                })
            };
            let state = self.policy.lifecycle.state_at(&period, now_ms);
            out.push(TableInfo {
                name: name.clone(),
                period: period.label(),
                state,
                status: table
                    .table_status()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                capacity,
                tagged_expired: false,
                warm_write_units: table
                    .warm_throughput()
                    .and_then(|w| w.write_units_per_second())
                    .map(|w| w.max(0) as u64),
                deletion_protection: table.deletion_protection_enabled().unwrap_or(false),
                details: Details::default(),
                arn: table.table_arn().unwrap_or_default().to_string(),
                start_ms: period.start_ms,
            });
        }
        out.sort_by_key(|t| t.start_ms);
        // Frozen tables get their details read a few per round, in turn.
        let frozen: Vec<usize> = (0..out.len())
            .filter(|&i| out[i].state == LifecycleState::Frozen)
            .collect();
        let checked_frozen: Vec<usize> = match round {
            Some(r) if !frozen.is_empty() => (0..FROZEN_CHECKS_PER_ROUND.min(frozen.len()))
                .map(|k| frozen[(r * FROZEN_CHECKS_PER_ROUND + k) % frozen.len()])
                .collect(),
            _ => Vec::new(),
        };
        for (i, t) in out.iter_mut().enumerate() {
            // Expired tables: tags always (tagged? exported?), as before.
            let deep = t.state == LifecycleState::Expired
                || (round.is_some() && t.state != LifecycleState::Frozen)
                || checked_frozen.contains(&i);
            if deep && t.status == TableStatus::Active.as_str() {
                let details = self.details(t).await;
                t.tagged_expired = details
                    .tags
                    .as_ref()
                    .is_some_and(|tags| tags.contains_key(EXPIRED_TAG));
                t.details = details;
            }
        }
        Ok(out)
    }

    /// The settings of `t` read with calls of their own. A failed read
    /// leaves its field `None` (not reconciled this round).
    async fn details(&self, t: &TableInfo) -> Details {
        let expired = t.state == LifecycleState::Expired;
        let exporting = expired && self.policy.on_expiry == ExpiryAction::Export;
        let mut d = Details::default();
        let tags = self
            .call(
                self.client
                    .list_tags_of_resource()
                    .resource_arn(&t.arn)
                    .send(),
            )
            .await;
        d.tags = read_or_warn(&t.name, "tags", tags).map(|out| {
            out.tags()
                .iter()
                .map(|t| (t.key().to_string(), t.value().to_string()))
                .collect()
        });
        if !expired && self.policy.ttl_attribute.is_some() {
            let ttl = self
                .call(
                    self.client
                        .describe_time_to_live()
                        .table_name(&t.name)
                        .send(),
                )
                .await;
            d.ttl = read_or_warn(&t.name, "TTL", ttl).map(|out| {
                let desc = out.time_to_live_description();
                let on = desc.and_then(|d| d.time_to_live_status()).is_some_and(|s| {
                    matches!(s, TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
                });
                on.then(|| desc.and_then(|d| d.attribute_name()).map(str::to_string))
                    .flatten()
            });
        }
        if (!expired && self.policy.pitr) || exporting {
            let backups = self
                .call(
                    self.client
                        .describe_continuous_backups()
                        .table_name(&t.name)
                        .send(),
                )
                .await;
            d.pitr = read_or_warn(&t.name, "PITR", backups).map(|out| {
                out.continuous_backups_description()
                    .and_then(|c| c.point_in_time_recovery_description())
                    .and_then(|p| p.point_in_time_recovery_status())
                    == Some(&PointInTimeRecoveryStatus::Enabled)
            });
        }
        if exporting && let Some(arn) = d.tags.as_ref().and_then(|t| t.get(EXPORT_TAG)) {
            d.export = Some(self.export_state(arn).await);
        }
        d
    }

    async fn export_state(&self, arn: &str) -> ExportState {
        match self
            .call(self.client.describe_export().export_arn(arn).send())
            .await
        {
            Ok(out) => match out.export_description().and_then(|e| e.export_status()) {
                Some(SdkExportStatus::Completed) => ExportState::Completed,
                Some(SdkExportStatus::InProgress) => ExportState::InProgress,
                other => ExportState::Failed(
                    out.export_description()
                        .and_then(|e| e.failure_message())
                        .map_or_else(|| format!("status {other:?}"), str::to_string),
                ),
            },
            Err(e) => match classify(&e) {
                // Unknown to DynamoDB: started again.
                ErrorClass::NotFound | ErrorClass::Invalid => {
                    ExportState::Failed(DisplayErrorContext(e).to_string())
                }
                // Cannot tell: wait (never delete on a guess).
                _ => ExportState::InProgress,
            },
        }
    }

    /// Refuses a silent key-layout change: every table that takes writes
    /// at `now` (prebuild, active, cooling) and records another layout than
    /// the config's is an error when it has items; an empty one is tagged
    /// with the config's layout instead. Run at start, before any write.
    pub async fn check_layouts(&self, now: DateTime<Utc>) -> Result<(), TablesError> {
        let now_ms = now.timestamp_millis();
        let current = self.policy.naming.period.containing(now_ms);
        // Only the previous, current and next periods can take writes.
        for p in [current.prev(), current, current.next()] {
            let state = self.policy.lifecycle.state_at(&p, now_ms);
            if !matches!(
                state,
                LifecycleState::Prebuild | LifecycleState::Active | LifecycleState::Cooling
            ) {
                continue;
            }
            let name = self.policy.naming.name_of(&p);
            let arn = match self
                .call(self.client.describe_table().table_name(&name).send())
                .await
            {
                Ok(d) => match d.table() {
                    Some(t) => {
                        self.policy.key_spec().check(&name, "period table", t)?;
                        t.table_arn().unwrap_or_default().to_string()
                    }
                    None => continue,
                },
                Err(e)
                    if e.as_service_error()
                        .is_some_and(DescribeTableError::is_resource_not_found_exception) =>
                {
                    continue;
                }
                Err(e) => return Err(TablesError::call("DescribeTable", &name, e)),
            };
            let t = TableRef { name, arn };
            let tags = self
                .call(
                    self.client
                        .list_tags_of_resource()
                        .resource_arn(&t.arn)
                        .send(),
                )
                .await
                .map_err(|e| TablesError::call("ListTagsOfResource", &t.name, e))?;
            // The last one: DynamoDB replaces a tag set again, but moto
            // lists both values, the newer last.
            let Some(recorded) = tags
                .tags()
                .iter()
                .rfind(|tag| tag.key() == LAYOUT_TAG)
                .map(|tag| tag.value().to_string())
            else {
                continue;
            };
            if recorded == self.policy.layout {
                continue;
            }
            // The migration's start on this table: from now on both layouts
            // are written and read. One TagResource sets all three, so no
            // reader sees the new layout without the old one.
            if let Some(from) = &self.policy.layout_from
                && *from == recorded
            {
                info!(
                    table = t.name,
                    from = recorded,
                    to = self.policy.layout,
                    "shard migration: table now dual-written"
                );
                self.tag_many(
                    &t.name,
                    &t.arn,
                    &[
                        (LAYOUT_TAG, &self.policy.layout),
                        (LAYOUT_FROM_TAG, from),
                        (MIGRATION_TAG, "dual"),
                    ],
                )
                .await?;
                continue;
            }
            let items = self
                .call(
                    self.client
                        .scan()
                        .table_name(&t.name)
                        .limit(1)
                        .select(aws_sdk_dynamodb::types::Select::Count)
                        .send(),
                )
                .await
                .map_err(|e| TablesError::call("Scan", &t.name, e))?;
            if items.count() == 0 && items.last_evaluated_key().is_none() {
                warn!(
                    table = t.name,
                    from = recorded,
                    to = self.policy.layout,
                    "empty table: its recorded key layout follows the config"
                );
                self.tag(&t.name, &t.arn, LAYOUT_TAG, &self.policy.layout)
                    .await?;
                continue;
            }
            return Err(TablesError::LayoutChanged {
                table: t.name,
                recorded_toml: layout_toml(&recorded),
                recorded,
                configured: self.policy.layout.clone(),
            });
        }
        Ok(())
    }

    /// One round at `now`: plan, then apply unless `dry_run`.
    pub async fn round(
        &self,
        now: DateTime<Utc>,
        kind: RoundKind,
        dry_run: bool,
    ) -> Result<Vec<Applied>, TablesError> {
        self.round_guarded(now, kind, dry_run, &Unguarded).await
    }

    /// [`round`](Self::round), asking `guard` before each mutating call; a
    /// refusal stops the round with [`TablesError::Refused`]. Sets the
    /// `tidemark_maintenance_next_table_active` gauge.
    pub async fn round_guarded(
        &self,
        now: DateTime<Utc>,
        kind: RoundKind,
        dry_run: bool,
        guard: &dyn ActionGuard,
    ) -> Result<Vec<Applied>, TablesError> {
        let round = self.rounds.fetch_add(1, Ordering::Relaxed);
        let existing = self
            .list_with(now, (kind == RoundKind::Rotate).then_some(round))
            .await?;
        let actions = plan_round(&self.policy, &existing, now, kind);
        let mut applied = Vec::with_capacity(actions.len());
        for action in actions {
            let mut unreachable = false;
            let error = if dry_run {
                None
            } else {
                if let Err(reason) = guard.confirm(&action).await {
                    return Err(TablesError::Refused {
                        action: action.kind(),
                        table: action.table().to_string(),
                        reason,
                    });
                }
                let result = self.apply(&action).await;
                let outcome = if result.is_ok() { "ok" } else { "error" };
                metrics::counter!(m::MAINTENANCE_ACTIONS, "action" => action.kind(), "outcome" => outcome)
                    .increment(1);
                unreachable = result.as_ref().is_err_and(TablesError::is_unreachable);
                result.err().map(|e| {
                    warn!(table = action.table(), action = action.kind(), error = %e, "maintenance action failed; retried next round");
                    e.to_string()
                })
            };
            applied.push(Applied {
                action,
                error,
                unreachable,
            });
        }
        if !dry_run {
            let next = self.policy.naming.name_of(
                &self
                    .policy
                    .naming
                    .period
                    .containing(now.timestamp_millis())
                    .next(),
            );
            let ready = existing
                .iter()
                .any(|t| t.name == next && t.status == TableStatus::Active.as_str())
                || applied.iter().any(|a| {
                    matches!(&a.action, Action::Create { table, .. } if *table == next)
                        && a.error.is_none()
                });
            metrics::gauge!(m::NEXT_TABLE_ACTIVE).set(if ready { 1.0 } else { 0.0 });
        }
        Ok(applied)
    }

    /// Applies one action.
    pub async fn apply(&self, action: &Action) -> Result<(), TablesError> {
        match action {
            Action::Create {
                table,
                capacity,
                warm_write_units,
                ..
            } => self.create(table, *capacity, *warm_write_units).await,
            Action::Resize { table, to, .. } => {
                let req = self
                    .client
                    .update_table()
                    .table_name(table)
                    .provisioned_throughput(throughput(table, *to)?);
                self.update(table, req.send()).await?;
                info!(table, read = to.read, write = to.write, "table resized");
                Ok(())
            }
            Action::SetWarmThroughput { table, to, .. } => {
                let req = self
                    .client
                    .update_table()
                    .table_name(table)
                    .warm_throughput(
                        WarmThroughput::builder()
                            .write_units_per_second(*to as i64)
                            .build(),
                    );
                self.update(table, req.send()).await?;
                info!(table, write_units = to, "warm throughput set");
                Ok(())
            }
            Action::SetDeletionProtection { table, enabled } => {
                let req = self
                    .client
                    .update_table()
                    .table_name(table)
                    .deletion_protection_enabled(*enabled);
                self.update(table, req.send()).await?;
                info!(table, enabled, "deletion protection set");
                Ok(())
            }
            Action::SetTtl { table, to, .. } => self.enable_ttl(table, to).await,
            Action::SetPitr { table, enabled } => {
                let spec = PointInTimeRecoverySpecification::builder()
                    .point_in_time_recovery_enabled(*enabled)
                    .build()
                    .map_err(|e| TablesError::build("UpdateContinuousBackups", table, e))?;
                self.call(
                    self.client
                        .update_continuous_backups()
                        .table_name(table)
                        .point_in_time_recovery_specification(spec)
                        .send(),
                )
                .await
                .map_err(|e| TablesError::call("UpdateContinuousBackups", table, e))?;
                info!(table, enabled, "point-in-time recovery set");
                Ok(())
            }
            Action::TagPrefix { table, arn } => {
                self.tag(table, arn, PREFIX_TAG, &self.policy.naming.prefix)
                    .await
            }
            Action::TagLayout { table, arn } => {
                self.tag(table, arn, LAYOUT_TAG, &self.policy.layout).await
            }
            Action::Export { table, arn } => self.export(table, arn).await,
            Action::Delete { table } => {
                match self
                    .call(self.client.delete_table().table_name(table).send())
                    .await
                {
                    Ok(_) => {}
                    Err(e)
                        if e.as_service_error()
                            .is_some_and(DeleteTableError::is_resource_not_found_exception) => {}
                    Err(e) => return Err(TablesError::call("DeleteTable", table, e)),
                }
                info!(table, "expired table deleted");
                Ok(())
            }
            Action::TagExpired { table } => {
                let d = self
                    .call(self.client.describe_table().table_name(table).send())
                    .await
                    .map_err(|e| TablesError::call("DescribeTable", table, e))?;
                let arn = d
                    .table()
                    .and_then(|t| t.table_arn())
                    .unwrap_or_default()
                    .to_string();
                self.tag(table, &arn, EXPIRED_TAG, "true").await?;
                info!(table, "expired table tagged for archiving");
                Ok(())
            }
        }
    }

    /// One UpdateTable; a quota refusal is reported as such.
    async fn update<R>(
        &self,
        table: &str,
        fut: impl std::future::Future<
            Output = Result<R, aws_sdk_dynamodb::error::SdkError<UpdateTableError>>,
        >,
    ) -> Result<(), TablesError> {
        match self.call(fut).await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(UpdateTableError::is_limit_exceeded_exception) =>
            {
                Err(TablesError::quota("UpdateTable", table, e))
            }
            Err(e) => Err(TablesError::call("UpdateTable", table, e)),
        }
    }

    async fn tag(&self, table: &str, arn: &str, key: &str, value: &str) -> Result<(), TablesError> {
        self.tag_many(table, arn, &[(key, value)]).await
    }

    /// Sets several tags in one TagResource (all or none).
    async fn tag_many(
        &self,
        table: &str,
        arn: &str,
        tags: &[(&str, &str)],
    ) -> Result<(), TablesError> {
        let mut req = self.client.tag_resource().resource_arn(arn);
        for (key, value) in tags {
            let tag = Tag::builder()
                .key(*key)
                .value(*value)
                .build()
                .map_err(|e| TablesError::build("TagResource", table, e))?;
            req = req.tags(tag);
        }
        self.call(req.send())
            .await
            .map_err(|e| TablesError::call("TagResource", table, e))?;
        Ok(())
    }

    /// Starts the export of an expired table to S3 and records its ARN in a
    /// tag, so the next rounds follow it and delete the table once done.
    async fn export(&self, table: &str, arn: &str) -> Result<(), TablesError> {
        let e = &self.policy.export;
        let format = match e.format {
            ExportFormat::DynamodbJson => SdkExportFormat::DynamodbJson,
            ExportFormat::Ion => SdkExportFormat::Ion,
        };
        let out = self
            .call(
                self.client
                    .export_table_to_point_in_time()
                    .table_arn(arn)
                    .s3_bucket(&e.bucket)
                    .s3_prefix(e.prefix_of(table))
                    .set_s3_bucket_owner(e.bucket_owner.clone())
                    .export_format(format)
                    .send(),
            )
            .await
            .map_err(|err| TablesError::call("ExportTableToPointInTime", table, err))?;
        let export_arn = out
            .export_description()
            .and_then(|d| d.export_arn())
            .unwrap_or_default()
            .to_string();
        self.tag(table, arn, EXPORT_TAG, &export_arn).await?;
        info!(
            table,
            export = export_arn,
            bucket = e.bucket,
            "export to S3 started"
        );
        Ok(())
    }

    async fn enable_ttl(&self, table: &str, attribute: &str) -> Result<(), TablesError> {
        let spec = TimeToLiveSpecification::builder()
            .enabled(true)
            .attribute_name(attribute)
            .build()
            .map_err(|e| TablesError::build("UpdateTimeToLive", table, e))?;
        match self
            .call(
                self.client
                    .update_time_to_live()
                    .table_name(table)
                    .time_to_live_specification(spec)
                    .send(),
            )
            .await
        {
            Ok(_) => {
                info!(table, attribute, "TTL enabled");
                Ok(())
            }
            Err(e) => Err(TablesError::call("UpdateTimeToLive", table, e)),
        }
    }

    /// Creates a table (a concurrent creation by another worker counts as
    /// success), tagged with its prefix, waits until it is ACTIVE, then
    /// enables TTL when configured.
    pub async fn create(
        &self,
        table: &str,
        capacity: Option<Capacity>,
        warm_write_units: Option<u64>,
    ) -> Result<(), TablesError> {
        let p = &self.policy;
        let spec = p.key_spec();
        let build_err =
            |e: aws_sdk_dynamodb::error::BuildError| TablesError::build("CreateTable", table, e);
        let prefix_tag = Tag::builder()
            .key(PREFIX_TAG)
            .value(&p.naming.prefix)
            .build()
            .map_err(build_err)?;
        let layout_tag = Tag::builder()
            .key(LAYOUT_TAG)
            .value(&p.layout)
            .build()
            .map_err(build_err)?;
        let mut req = self
            .client
            .create_table()
            .table_name(table)
            .set_key_schema(Some(spec.elements().map_err(build_err)?))
            .set_attribute_definitions(Some(spec.definitions().map_err(build_err)?))
            .tags(prefix_tag)
            .tags(layout_tag);
        // Created during a migration: dual-written from its first item.
        if let Some(from) = &p.layout_from {
            for (k, v) in [(LAYOUT_FROM_TAG, from.as_str()), (MIGRATION_TAG, "dual")] {
                req = req.tags(Tag::builder().key(k).value(v).build().map_err(build_err)?);
            }
        }
        req = match capacity {
            Some(c) => req
                .billing_mode(BillingMode::Provisioned)
                .provisioned_throughput(throughput(table, c)?),
            None => req.billing_mode(BillingMode::PayPerRequest),
        };
        if let Some(w) = warm_write_units {
            req = req.warm_throughput(
                WarmThroughput::builder()
                    .write_units_per_second(w as i64)
                    .build(),
            );
        }
        if p.deletion_protection {
            let period = p.naming.parse(table);
            let young = period.is_some_and(|period| {
                p.desired(p.lifecycle.state_at(&period, Utc::now().timestamp_millis()))
                    .deletion_protection
                    == Some(true)
            });
            req = req.deletion_protection_enabled(young);
        }
        match self.call(req.send()).await {
            Ok(_) => info!(table, "table created"),
            // Another worker is creating it; wait for ACTIVE below.
            Err(e)
                if e.as_service_error()
                    .is_some_and(CreateTableError::is_resource_in_use_exception) => {}
            Err(e)
                if e.as_service_error()
                    .is_some_and(CreateTableError::is_limit_exceeded_exception) =>
            {
                return Err(TablesError::quota("CreateTable", table, e));
            }
            Err(e) => return Err(TablesError::call("CreateTable", table, e)),
        }
        self.wait_active(table).await?;
        if let Some(ttl) = &p.ttl_attribute {
            match self.enable_ttl(table, ttl).await {
                Ok(()) => {}
                // Already enabled (a concurrent creator got there first).
                // A failure otherwise is repaired by the next round.
                Err(e) if e.code() == Some("ValidationException") => {}
                Err(e) => warn!(table, error = %e, "enabling TTL failed; the next round retries"),
            }
        }
        Ok(())
    }

    async fn wait_active(&self, table: &str) -> Result<(), TablesError> {
        let start = Instant::now();
        loop {
            let d = self
                .call(self.client.describe_table().table_name(table).send())
                .await;
            match d {
                Ok(d) if d.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) => {
                    if let Some(t) = d.table() {
                        self.policy.key_spec().check(table, "period table", t)?;
                    }
                    return Ok(());
                }
                Ok(_) => {}
                Err(e)
                    if e.as_service_error()
                        .is_some_and(DescribeTableError::is_resource_not_found_exception) => {}
                Err(e) => return Err(TablesError::call("DescribeTable", table, e)),
            }
            if start.elapsed() > self.active_timeout {
                return Err(TablesError::NotActive(
                    table.to_string(),
                    self.active_timeout,
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn throughput(table: &str, c: Capacity) -> Result<ProvisionedThroughput, TablesError> {
    ProvisionedThroughput::builder()
        .read_capacity_units(c.read as i64)
        .write_capacity_units(c.write as i64)
        .build()
        .map_err(|e| TablesError::build("UpdateTable", table, e))
}

/// Creates a missing period table when the writer finds one (an event for a
/// table that does not exist yet must not be lost); refuses tables that are
/// not ours or are expired. A table a quota keeps from being created is
/// retried for `quota_retry_for`, then refused (its records dead-lettered
/// with the reason) so shards move on.
#[derive(Debug, Clone)]
pub struct CreateMissingTables {
    manager: TableManager,
    quota_retry_for: Duration,
    /// When each table first failed for a quota.
    quota_since: Arc<std::sync::Mutex<HashMap<String, Instant>>>,
}

impl CreateMissingTables {
    /// A handler creating tables with `manager`'s policy.
    pub fn new(manager: TableManager) -> Self {
        CreateMissingTables {
            manager,
            quota_retry_for: Duration::from_secs(600),
            quota_since: Arc::default(),
        }
    }

    /// How long a quota refusal is retried before the table's records are
    /// dead-lettered.
    pub fn with_quota_retry_for(mut self, d: Duration) -> Self {
        self.quota_retry_for = d;
        self
    }
}

impl MissingTableHandler for CreateMissingTables {
    fn on_missing(&self, table: &str) -> BoxFuture<'static, MissingTableAction> {
        let this = self.clone();
        let table = table.to_string();
        Box::pin(async move {
            let manager = &this.manager;
            let Some(period) = manager.policy.naming.parse(&table) else {
                return MissingTableAction::Reject(format!(
                    "table {table} does not exist and is not a Tidemark period table"
                ));
            };
            let (state, capacity, warm) = manager
                .policy
                .creation(&period, Utc::now().timestamp_millis());
            if matches!(state, LifecycleState::Expired) {
                return MissingTableAction::Reject(format!("table {table} is past retention"));
            }
            let result = manager.create(&table, capacity, warm).await;
            let mut since = this
                .quota_since
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match result {
                Ok(()) => {
                    since.remove(&table);
                    MissingTableAction::Retry
                }
                Err(e) if is_access_denied(e.code()) => {
                    MissingTableAction::Reject(format!("cannot create table {table}: {e}"))
                }
                Err(e @ TablesError::KeySchema(_)) => MissingTableAction::Reject(e.to_string()),
                Err(e @ TablesError::Quota { .. }) => {
                    let first = *since.entry(table.clone()).or_insert_with(Instant::now);
                    if first.elapsed() >= this.quota_retry_for {
                        error!(table, error = %e, after = ?this.quota_retry_for, "giving up creating the table: its records are dead-lettered");
                        MissingTableAction::Reject(format!(
                            "table {table} could not be created for {:?}: {e}",
                            this.quota_retry_for
                        ))
                    } else {
                        MissingTableAction::Retry
                    }
                }
                Err(e) => {
                    // Transient: the writer asks again on its next attempt.
                    warn!(table, error = %e, "creating missing table failed; will retry");
                    MissingTableAction::Retry
                }
            }
        })
    }
}

/// Rows for `tables list`, keyed by name.
pub fn rows(tables: &[TableInfo]) -> BTreeMap<String, &TableInfo> {
    tables.iter().map(|t| (t.name.clone(), t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_schema::period::Period;

    fn policy(on_expiry: ExpiryAction) -> TablePolicy {
        let mut router = RouterConfig::with_prefix("iot");
        router.period = Period::Day;
        router.retention = Duration::from_secs(3 * 86_400);
        TablePolicy::new(
            &router,
            CapacityTiers::default(),
            Billing::Provisioned,
            on_expiry,
        )
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn info(p: &TablePolicy, name: &str, now: DateTime<Utc>, capacity: Capacity) -> TableInfo {
        let period = p.naming.parse(name).unwrap();
        TableInfo {
            name: name.into(),
            period: period.label(),
            state: p.lifecycle.state(&period, now),
            status: "ACTIVE".into(),
            capacity: Some(capacity),
            tagged_expired: false,
            warm_write_units: None,
            deletion_protection: false,
            details: Details::default(),
            arn: format!("arn:aws:dynamodb:us-east-1:1:table/{name}"),
            start_ms: period.start_ms,
        }
    }

    /// The actions of a round about `table` only (the round also creates
    /// the current and next tables these tests leave out).
    fn plan_for(p: &TablePolicy, t: &TableInfo, now: DateTime<Utc>) -> Vec<Action> {
        plan_round(p, std::slice::from_ref(t), now, RoundKind::Rotate)
            .into_iter()
            .filter(|a| a.table() == t.name)
            .collect()
    }

    /// A table whose TTL, PITR and tags were read, all as wanted.
    fn read(p: &TablePolicy, mut t: TableInfo) -> TableInfo {
        t.details = Details {
            ttl: Some(p.ttl_attribute.clone()),
            pitr: Some(false),
            tags: Some(
                [
                    (PREFIX_TAG.to_string(), p.naming.prefix.clone()),
                    (LAYOUT_TAG.to_string(), p.layout.clone()),
                ]
                .into(),
            ),
            export: None,
        };
        t
    }

    #[test]
    fn ensure_creates_current_and_prebuild_only() {
        let p = policy(ExpiryAction::Delete);
        let now = at("2026-11-22T23:50:00Z");
        let actions = plan_round(&p, &[], now, RoundKind::Ensure);
        let names: Vec<_> = actions.iter().map(Action::table).collect();
        assert_eq!(names, ["iot_2026-11-22", "iot_2026-11-23"]);
        let early = plan_round(&p, &[], at("2026-11-22T12:00:00Z"), RoundKind::Ensure);
        assert_eq!(
            early.len(),
            1,
            "next table is not due before prebuild_ahead"
        );
    }

    #[test]
    fn rotate_resizes_by_state_and_expires() {
        let p = policy(ExpiryAction::Delete);
        let now = at("2026-11-22T01:00:00Z");
        let active = CapacityTiers::default().active;
        let existing = vec![
            info(&p, "iot_2026-11-18", now, Capacity { read: 1, write: 1 }),
            info(&p, "iot_2026-11-20", now, CapacityTiers::default().cold),
            info(&p, "iot_2026-11-21", now, active),
            info(&p, "iot_2026-11-22", now, active),
        ];
        let actions = plan_round(&p, &existing, now, RoundKind::Rotate);
        assert!(actions.contains(&Action::Delete {
            table: "iot_2026-11-18".into()
        }));
        assert!(actions.contains(&Action::Resize {
            table: "iot_2026-11-20".into(),
            state: LifecycleState::Frozen,
            from: CapacityTiers::default().cold,
            to: CapacityTiers::default().frozen,
        }));
        assert!(actions.contains(&Action::Resize {
            table: "iot_2026-11-21".into(),
            state: LifecycleState::Cold,
            from: active,
            to: CapacityTiers::default().cold,
        }));
        assert!(
            !actions.iter().any(|a| a.table() == "iot_2026-11-22"),
            "{actions:?}"
        );
    }

    #[test]
    fn tag_mode_tags_once_and_never_deletes() {
        let p = policy(ExpiryAction::Tag);
        let now = at("2026-11-22T01:00:00Z");
        let mut old = info(&p, "iot_2026-11-10", now, Capacity { read: 1, write: 1 });
        let actions = plan_round(&p, std::slice::from_ref(&old), now, RoundKind::Rotate);
        assert!(actions.contains(&Action::TagExpired {
            table: "iot_2026-11-10".into()
        }));
        old.tagged_expired = true;
        let actions = plan_round(&p, &[old], now, RoundKind::Rotate);
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::Delete { .. } | Action::TagExpired { .. }))
        );
    }

    #[test]
    fn on_demand_never_resizes() {
        let mut p = policy(ExpiryAction::Delete);
        p.billing = Billing::OnDemand {
            warm_write_units: Some(10_000),
        };
        let now = at("2026-11-22T23:50:00Z");
        let mut t = info(&p, "iot_2026-11-21", now, Capacity { read: 5, write: 5 });
        t.capacity = None;
        let actions = plan_round(&p, &[t], now, RoundKind::Rotate);
        assert!(
            actions.iter().all(|a| matches!(a, Action::Create { .. })),
            "{actions:?}"
        );
        let prebuild = actions
            .iter()
            .find(|a| a.table() == "iot_2026-11-23")
            .unwrap();
        assert_eq!(
            prebuild,
            &Action::Create {
                table: "iot_2026-11-23".into(),
                state: LifecycleState::Prebuild,
                capacity: None,
                warm_write_units: Some(10_000),
            }
        );
    }

    #[test]
    fn drift_behind_the_workers_back_is_repaired() {
        let mut p = policy(ExpiryAction::Delete);
        p.ttl_attribute = Some("expires_at".into());
        let now = at("2026-11-22T01:00:00Z");
        let active = CapacityTiers::default().active;
        let clean = read(&p, info(&p, "iot_2026-11-22", now, active));
        assert_eq!(
            plan_round(&p, std::slice::from_ref(&clean), now, RoundKind::Rotate),
            [],
            "a table in its desired state needs nothing"
        );
        let mut drifted = clean.clone();
        drifted.capacity = Some(Capacity { read: 5, write: 5 });
        drifted.details.ttl = Some(None);
        drifted.details.tags.as_mut().unwrap().remove(PREFIX_TAG);
        let actions = plan_round(&p, &[drifted], now, RoundKind::Rotate);
        assert_eq!(
            actions,
            [
                Action::Resize {
                    table: "iot_2026-11-22".into(),
                    state: LifecycleState::Active,
                    from: Capacity { read: 5, write: 5 },
                    to: active,
                },
                Action::SetTtl {
                    table: "iot_2026-11-22".into(),
                    from: None,
                    to: "expires_at".into(),
                },
                Action::TagPrefix {
                    table: "iot_2026-11-22".into(),
                    arn: clean.arn.clone(),
                },
            ]
        );
    }

    #[test]
    fn settings_not_read_this_round_are_left_alone_and_busy_tables_wait() {
        let mut p = policy(ExpiryAction::Delete);
        p.ttl_attribute = Some("expires_at".into());
        p.pitr = true;
        let now = at("2026-11-22T01:00:00Z");
        let unread = info(&p, "iot_2026-11-22", now, CapacityTiers::default().active);
        assert_eq!(plan_round(&p, &[unread], now, RoundKind::Rotate), []);
        let mut busy = info(&p, "iot_2026-11-22", now, Capacity { read: 5, write: 5 });
        busy.status = "UPDATING".into();
        assert_eq!(plan_round(&p, &[busy], now, RoundKind::Rotate), []);
    }

    #[test]
    fn protection_is_on_while_young_and_lifted_once_cold_then_one_update_per_round() {
        let mut p = policy(ExpiryAction::Delete);
        p.pitr = true;
        p.deletion_protection = true;
        let now = at("2026-11-22T01:00:00Z");
        let tiers = CapacityTiers::default();
        let young = read(&p, info(&p, "iot_2026-11-22", now, tiers.active));
        let actions = plan_for(&p, &young, now);
        assert!(actions.contains(&Action::SetPitr {
            table: "iot_2026-11-22".into(),
            enabled: true
        }));
        assert!(actions.contains(&Action::SetDeletionProtection {
            table: "iot_2026-11-22".into(),
            enabled: true
        }));
        let mut cold = read(&p, info(&p, "iot_2026-11-21", now, tiers.active));
        cold.deletion_protection = true;
        cold.details.pitr = Some(true);
        let actions = plan_for(&p, &cold, now);
        // The resize to the cold tier goes first; protection comes off next
        // round (DynamoDB takes one UpdateTable at a time).
        assert!(matches!(actions[0], Action::Resize { .. }), "{actions:?}");
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::SetDeletionProtection { .. })),
            "{actions:?}"
        );
        assert!(actions.contains(&Action::SetPitr {
            table: "iot_2026-11-21".into(),
            enabled: false
        }));
        cold.capacity = Some(tiers.cold);
        let actions = plan_for(&p, &cold, now);
        assert!(actions.contains(&Action::SetDeletionProtection {
            table: "iot_2026-11-21".into(),
            enabled: false
        }));
    }

    #[test]
    fn a_protected_expired_table_is_unprotected_before_its_delete() {
        let mut p = policy(ExpiryAction::Delete);
        p.deletion_protection = true;
        let now = at("2026-11-22T01:00:00Z");
        let mut old = info(&p, "iot_2026-11-10", now, Capacity { read: 1, write: 1 });
        old.deletion_protection = true;
        assert_eq!(
            plan_for(&p, &old, now),
            [Action::SetDeletionProtection {
                table: "iot_2026-11-10".into(),
                enabled: false
            }]
        );
        old.deletion_protection = false;
        assert_eq!(
            plan_for(&p, &old, now),
            [Action::Delete {
                table: "iot_2026-11-10".into()
            }]
        );
    }

    #[test]
    fn export_mode_enables_pitr_exports_waits_and_deletes_only_when_completed() {
        let p = policy(ExpiryAction::Export);
        let now = at("2026-11-22T01:00:00Z");
        let mut old = info(&p, "iot_2026-11-10", now, Capacity { read: 1, write: 1 });
        let name = || "iot_2026-11-10".to_string();
        let plan = |t: &TableInfo| plan_for(&p, t, now);
        assert_eq!(plan(&old), [], "nothing read: nothing done");
        old.details.pitr = Some(false);
        assert_eq!(
            plan(&old),
            [Action::SetPitr {
                table: name(),
                enabled: true
            }]
        );
        old.details.pitr = Some(true);
        let export = Action::Export {
            table: name(),
            arn: old.arn.clone(),
        };
        assert_eq!(plan(&old), std::slice::from_ref(&export));
        old.details.export = Some(ExportState::InProgress);
        assert_eq!(plan(&old), [], "never deleted while the export runs");
        old.details.export = Some(ExportState::Failed("S3 access denied".into()));
        assert_eq!(plan(&old), [export], "a failed export is started again");
        old.details.export = Some(ExportState::Completed);
        assert_eq!(plan(&old), [Action::Delete { table: name() }]);
    }

    #[test]
    fn backfill_tables_are_created_on_demand_and_prebuilt_ones_at_their_tier() {
        let p = policy(ExpiryAction::Delete);
        let now = at("2026-11-22T01:00:00Z").timestamp_millis();
        let week_ago = p.naming.parse("iot_2026-11-20").unwrap();
        let (state, capacity, warm) = p.creation(&week_ago, now);
        assert_eq!(state, LifecycleState::Frozen);
        assert_eq!((capacity, warm), (None, None));
        let current = p.naming.parse("iot_2026-11-22").unwrap();
        assert_eq!(
            p.creation(&current, now).1,
            Some(CapacityTiers::default().active)
        );
    }

    #[test]
    fn warm_throughput_is_raised_on_a_prebuilt_on_demand_table() {
        let mut p = policy(ExpiryAction::Delete);
        p.billing = Billing::OnDemand {
            warm_write_units: Some(10_000),
        };
        let now = at("2026-11-22T23:50:00Z");
        let mut t = read(
            &p,
            info(&p, "iot_2026-11-23", now, Capacity { read: 1, write: 1 }),
        );
        t.capacity = None;
        t.warm_write_units = Some(4_000);
        assert_eq!(
            plan_round(&p, &[t], now, RoundKind::Rotate)
                .into_iter()
                .filter(|a| a.table() == "iot_2026-11-23")
                .collect::<Vec<_>>(),
            [Action::SetWarmThroughput {
                table: "iot_2026-11-23".into(),
                from: Some(4_000),
                to: 10_000
            }]
        );
    }

    #[test]
    fn layouts_are_tag_values_that_change_with_the_shard_count() {
        use tidemark_schema::strategy::{Bucket, KeyStrategy};
        let four = layout_of(&KeyStrategy::TimeBucket {
            shards: 4,
            bucket: Bucket::Hour,
        });
        assert_eq!(four, "bucket=hour/shards=4/strategy=time_bucket");
        let eight = layout_of(&KeyStrategy::TimeBucket {
            shards: 8,
            bucket: Bucket::Hour,
        });
        assert_ne!(four, eight);
        assert_eq!(layout_of(&KeyStrategy::Entity), "strategy=entity");
        // Read back from the tag: per-table layouts for queries and backfill.
        for k in [
            KeyStrategy::Entity,
            KeyStrategy::RandomSuffix { shards: 3 },
            KeyStrategy::CalculatedSuffix { shards: 12 },
            KeyStrategy::TimeBucket {
                shards: 4,
                bucket: Bucket::Hour,
            },
        ] {
            assert_eq!(parse_layout(&layout_of(&k)), Some(k));
        }
        assert_eq!(parse_layout("strategy=entity/shards=2"), None);
        assert_eq!(parse_layout("nonsense"), None);
        // The refusal's suggested `schema.migrate_from` parses as the layout.
        let toml_body = layout_toml(&four);
        assert_eq!(
            toml_body,
            r#"bucket = "hour", shards = 4, strategy = "time_bucket""#
        );
        let back: KeyStrategy = toml::from_str(&toml_body.replace(", ", "\n")).unwrap();
        assert_eq!(layout_of(&back), four);
        // Only characters DynamoDB tag values allow.
        assert!(
            four.chars()
                .all(|c| c.is_alphanumeric() || " _.:/=+-@".contains(c)),
            "{four}"
        );
    }

    #[test]
    fn a_table_without_a_recorded_layout_gets_the_configs() {
        let p = policy(ExpiryAction::Delete);
        let now = at("2026-11-22T01:00:00Z");
        let mut t = read(
            &p,
            info(&p, "iot_2026-11-22", now, CapacityTiers::default().active),
        );
        t.details.tags.as_mut().unwrap().remove(LAYOUT_TAG);
        assert_eq!(
            plan_for(&p, &t, now),
            [Action::TagLayout {
                table: "iot_2026-11-22".into(),
                arn: t.arn.clone()
            }]
        );
    }
}
