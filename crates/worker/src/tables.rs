//! Table maintenance: the period tables' life, done by the worker itself
//! (the seeds use a Lambda on a cron).
//!
//! A round reads the tables of ours (names `{prefix}_{label}` that parse back
//! to a period; any other table is never touched), computes each one's
//! lifecycle state at `now`, and plans actions with the pure [`plan_round`]:
//! create the current and the prebuild table (key schema from config, TTL
//! enabled, provisioned at the tier of its state or on demand with optional
//! warm throughput), resize tables whose capacity differs from their tier,
//! and delete or tag tables past retention. UpdateTable refusals
//! (LimitExceeded on decreases, a busy table) are reported and retried next
//! round, never fatal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tidemark_governor::Governor;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::delete_table::DeleteTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ProvisionedThroughput,
    ScalarAttributeType, TableStatus, Tag, TimeToLiveSpecification, WarmThroughput,
};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::Serialize;
use tidemark_aws_errors::{ErrorClass, classify, is_access_denied};
use tidemark_schema::period::{
    Billing, Capacity, CapacityTiers, Lifecycle, LifecycleState, PeriodRef, TableNaming,
};
use tidemark_schema::route::RouterConfig;
use tidemark_writer::{MissingTableAction, MissingTableHandler};
use tracing::{info, warn};

use crate::config::ExpiryAction;

/// The tag put on expired tables kept for archiving.
pub const EXPIRED_TAG: &str = "tidemark:expired";

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
    /// Period start, for ordering.
    #[serde(skip)]
    pub start_ms: i64,
}

/// One maintenance action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Create a table for a period that has none.
    Create {
        /// Table name.
        table: String,
        /// State it is created in (active or prebuild).
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
            Action::Delete { .. } => "delete",
            Action::TagExpired { .. } => "tag_expired",
        }
    }

    /// The table the action is about.
    pub fn table(&self) -> &str {
        match self {
            Action::Create { table, .. }
            | Action::Resize { table, .. }
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
    /// Everything: create, resize, expire (`tables rotate`, and `run`).
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
    /// Delete or tag expired tables.
    pub on_expiry: ExpiryAction,
    /// Partition key attribute name.
    pub pk: String,
    /// Sort key attribute name.
    pub sk: String,
    /// TTL attribute, enabled on created tables when set.
    pub ttl_attribute: Option<String>,
}

impl TablePolicy {
    /// The policy a router config implies, with tiers, billing and expiry.
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
            pk: router.key_attributes.pk.clone(),
            sk: router.key_attributes.sk.clone(),
            ttl_attribute: router.ttl_attribute.clone(),
        }
    }

    /// The state and creation settings of a period's table at `now`.
    fn creation(
        &self,
        p: &PeriodRef,
        now_ms: i64,
    ) -> (LifecycleState, Option<Capacity>, Option<u64>) {
        let state = self.lifecycle.state_at(p, now_ms);
        (
            state,
            self.billing.capacity(&self.tiers, state),
            self.billing.warm_write_units(state),
        )
    }
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
        match t.state {
            LifecycleState::Expired => match policy.on_expiry {
                ExpiryAction::Delete => actions.push(Action::Delete {
                    table: t.name.clone(),
                }),
                ExpiryAction::Tag if !t.tagged_expired => actions.push(Action::TagExpired {
                    table: t.name.clone(),
                }),
                ExpiryAction::Tag => {}
            },
            state => {
                if let (Some(from), Some(to)) =
                    (t.capacity, policy.billing.capacity(&policy.tiers, state))
                    && from != to
                {
                    actions.push(Action::Resize {
                        table: t.name.clone(),
                        state,
                        from,
                        to,
                    });
                }
            }
        }
    }
    actions
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
    },
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
        TablesError::Call {
            operation,
            table: table.to_string(),
            code,
            message: DisplayErrorContext(e).to_string(),
        }
    }

    fn code(&self) -> Option<&str> {
        match self {
            TablesError::Call { code, .. } => code.as_deref(),
            TablesError::NotActive(..) | TablesError::Refused { .. } => None,
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
}

/// Runs maintenance against DynamoDB.
#[derive(Debug, Clone)]
pub struct TableManager {
    client: aws_sdk_dynamodb::Client,
    policy: TablePolicy,
    /// The DynamoDB endpoint's governor: table calls wait while it is open.
    gov: Option<Governor>,
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

    /// Our tables, oldest period first, with their state at `now`.
    pub async fn list(&self, now: DateTime<Utc>) -> Result<Vec<TableInfo>, TablesError> {
        let now_ms = now.timestamp_millis();
        let mut names = Vec::new();
        let mut pages = self.client.list_tables().into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| TablesError::call("ListTables", "", e))?;
            names.extend(page.table_names().iter().cloned());
        }
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
            let tagged_expired = if state == LifecycleState::Expired {
                self.tagged_expired(table.table_arn().unwrap_or_default())
                    .await
            } else {
                false
            };
            out.push(TableInfo {
                name: name.clone(),
                period: period.label(),
                state,
                status: table
                    .table_status()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                capacity,
                tagged_expired,
                start_ms: period.start_ms,
            });
        }
        out.sort_by_key(|t| t.start_ms);
        Ok(out)
    }

    async fn tagged_expired(&self, arn: &str) -> bool {
        match self
            .client
            .list_tags_of_resource()
            .resource_arn(arn)
            .send()
            .await
        {
            Ok(t) => t.tags().iter().any(|t| t.key() == EXPIRED_TAG),
            Err(_) => false,
        }
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
    /// refusal stops the round with [`TablesError::Refused`].
    pub async fn round_guarded(
        &self,
        now: DateTime<Utc>,
        kind: RoundKind,
        dry_run: bool,
        guard: &dyn ActionGuard,
    ) -> Result<Vec<Applied>, TablesError> {
        let existing = self.list(now).await?;
        let actions = plan_round(&self.policy, &existing, now, kind);
        let mut applied = Vec::with_capacity(actions.len());
        for action in actions {
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
                self.apply(&action).await.err().map(|e| {
                    warn!(table = action.table(), error = %e, "maintenance action failed; retried next round");
                    e.to_string()
                })
            };
            applied.push(Applied { action, error });
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
                self.call(req.send())
                    .await
                    .map_err(|e| TablesError::call("UpdateTable", table, e))?;
                info!(table, read = to.read, write = to.write, "table resized");
                Ok(())
            }
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
                let tag = Tag::builder()
                    .key(EXPIRED_TAG)
                    .value("true")
                    .build()
                    .map_err(|e| TablesError::Call {
                        operation: "TagResource",
                        table: table.clone(),
                        code: None,
                        message: e.to_string(),
                    })?;
                self.client
                    .tag_resource()
                    .resource_arn(arn)
                    .tags(tag)
                    .send()
                    .await
                    .map_err(|e| TablesError::call("TagResource", table, e))?;
                info!(table, "expired table tagged for archiving");
                Ok(())
            }
        }
    }

    /// Creates a table (a concurrent creation by another worker counts as
    /// success), waits until it is ACTIVE, then enables TTL when configured.
    pub async fn create(
        &self,
        table: &str,
        capacity: Option<Capacity>,
        warm_write_units: Option<u64>,
    ) -> Result<(), TablesError> {
        let p = &self.policy;
        let key = |name: &str, kt: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kt)
                .build()
        };
        let attr = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
        };
        let build_err = |e: aws_sdk_dynamodb::error::BuildError| TablesError::Call {
            operation: "CreateTable",
            table: table.to_string(),
            code: None,
            message: e.to_string(),
        };
        let mut req = self
            .client
            .create_table()
            .table_name(table)
            .key_schema(key(&p.pk, KeyType::Hash).map_err(build_err)?)
            .key_schema(key(&p.sk, KeyType::Range).map_err(build_err)?)
            .attribute_definitions(attr(&p.pk).map_err(build_err)?)
            .attribute_definitions(attr(&p.sk).map_err(build_err)?);
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
        match self.call(req.send()).await {
            Ok(_) => info!(table, "table created"),
            // Another worker is creating it; wait for ACTIVE below.
            Err(e)
                if e.as_service_error()
                    .is_some_and(CreateTableError::is_resource_in_use_exception) => {}
            Err(e) => return Err(TablesError::call("CreateTable", table, e)),
        }
        self.wait_active(table).await?;
        if let Some(ttl) = &p.ttl_attribute {
            let spec = TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(ttl)
                .build()
                .map_err(build_err)?;
            match self
                .client
                .update_time_to_live()
                .table_name(table)
                .time_to_live_specification(spec)
                .send()
                .await
            {
                Ok(_) => {}
                // Already enabled (a concurrent creator got there first).
                // ValidationException is not a modelled error of the call.
                Err(e) if classify(&e) == ErrorClass::Invalid => {}
                Err(e) => return Err(TablesError::call("UpdateTimeToLive", table, e)),
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
        .map_err(|e| TablesError::Call {
            operation: "UpdateTable",
            table: table.to_string(),
            code: None,
            message: e.to_string(),
        })
}

/// Creates a missing period table when the writer finds one (an event for a
/// table that does not exist yet must not be lost); refuses tables that are
/// not ours or are expired.
#[derive(Debug, Clone)]
pub struct CreateMissingTables {
    manager: TableManager,
}

impl CreateMissingTables {
    /// A handler creating tables with `manager`'s policy.
    pub fn new(manager: TableManager) -> Self {
        CreateMissingTables { manager }
    }
}

impl MissingTableHandler for CreateMissingTables {
    fn on_missing(&self, table: &str) -> BoxFuture<'static, MissingTableAction> {
        let manager = self.manager.clone();
        let table = table.to_string();
        Box::pin(async move {
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
            // Backfill into an older period gets that period's tier, but at
            // least enough write capacity to take the backfill.
            let capacity = capacity.map(|c| Capacity {
                write: c.write.max(manager.policy.tiers.active.write),
                ..c
            });
            match manager.create(&table, capacity, warm).await {
                Ok(()) => MissingTableAction::Retry,
                Err(e) if is_access_denied(e.code()) => {
                    MissingTableAction::Reject(format!("cannot create table {table}: {e}"))
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
            start_ms: period.start_ms,
        }
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
}
