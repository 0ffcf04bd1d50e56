//! The I/O half of table maintenance: [`TableManager`] lists the period
//! tables and what they look like, applies a round's actions (planned by
//! [`round_actions`]) and refuses a silent key-layout change at start.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::delete_table::DeleteTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::operation::update_table::UpdateTableError;
use aws_sdk_dynamodb::types::{
    BillingMode, ExportFormat as SdkExportFormat, OnDemandThroughput,
    PointInTimeRecoverySpecification, ProvisionedThroughput, TableClass as SdkTableClass,
    TableStatus, Tag, TimeToLiveSpecification, WarmThroughput,
};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::Serialize;
use tidemark_governor::Governor;
use tidemark_schema::period::{Capacity, Ceiling, LifecycleState, TableClass};
use tidemark_schema::route::RouterConfig;
use tracing::{info, warn};

use super::clock::{ServerClock, skew_refusal};
use super::drift::{Action, RoundKind, TablePolicy, is_ours, round_actions};
use super::error::TablesError;
use super::lift::{self, Backlog, Lift};
use super::tags::{
    CLASS_REFUSED_TAG, EXPIRED_TAG, EXPORT_TAG, LAYOUT_FROM_TAG, LAYOUT_TAG, MIGRATION_TAG,
    PREFIX_TAG,
};
use crate::config::{Config, ExportFormat};
use crate::metrics as m;

mod listing;
mod scaling;
pub use scaling::POLICY_NAME as SCALING_POLICY_NAME;
#[cfg(test)]
mod tier_tests;

/// Attempts of one table call (see `TableManager::call`): with the
/// governor's back-off, a few seconds of trouble; a round that still fails
/// is reported and tried again next round.
const CALL_ATTEMPTS: u32 = 4;

/// Frozen tables whose TTL, PITR and tags are read per round, in turn.
const FROZEN_CHECKS_PER_ROUND: usize = 5;
/// DynamoDB's clock is judged from answers at most this old.
const CLOCK_FRESH: Duration = Duration::from_secs(300);

/// A read's answer, or `None` (warned) when it failed: the setting is then
/// not reconciled this round.
fn read_or_warn<T, E: std::error::Error + 'static>(
    table: &str,
    what: &str,
    r: Result<T, E>,
) -> Option<T> {
    r.map_err(|e| warn!(table, error = %tidemark_aws_errors::causes(&e), "reading {what} failed"))
        .ok()
}

/// A table's name and ARN.
struct TableRef {
    name: String,
    arn: String,
}

/// Asked before each mutating call of a round (the maintenance lease, see
/// [`MaintenanceLease`](super::MaintenanceLease)): an error stops the round before the call.
pub trait ActionGuard: Sync {
    /// `Ok` when `action` may run now.
    fn confirm<'a>(&'a self, action: &'a Action) -> BoxFuture<'a, Result<(), String>>;
}

/// The guard of commands an operator runs by hand (`tables rotate`).
#[derive(Debug, Clone, Copy)]
struct Unguarded;

impl ActionGuard for Unguarded {
    fn confirm<'a>(&'a self, _action: &'a Action) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
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
    /// The coordinator table, where capacity lifts are recorded.
    coordinator: Option<String>,
    /// DynamoDB's clock, from the `Date` of this client's answers.
    clock: ServerClock,
    /// Largest clock difference at which actions that trust this host's
    /// clock run.
    max_clock_skew: Duration,
    /// The routers' table layouts, refreshed from the tags a round reads.
    table_layouts: Option<(Arc<tidemark_schema::TableLayouts>, Arc<RouterConfig>)>,
    /// Application Auto Scaling, for tiers with `autoscale`; without it
    /// table auto scaling is left alone.
    autoscaling: Option<aws_sdk_applicationautoscaling::Client>,
}

impl TableManager {
    /// A manager for `policy`'s tables. Its client reads DynamoDB's clock
    /// from every answer (see [`clock`](super::clock)).
    pub fn new(client: aws_sdk_dynamodb::Client, policy: TablePolicy) -> Self {
        let clock = ServerClock::default();
        // One attempt per call: `call` retries, within the governor's
        // budget; the SDK's own three attempts would stay outside it.
        let client = aws_sdk_dynamodb::Client::from_conf(
            client
                .config()
                .to_builder()
                .interceptor(clock.interceptor())
                .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
                .build(),
        );
        TableManager {
            client,
            max_clock_skew: policy.lifecycle.late_arrival_grace / 4,
            policy,
            gov: None,
            rounds: Arc::new(AtomicUsize::new(0)),
            active_timeout: Duration::from_secs(300),
            coordinator: None,
            clock,
            table_layouts: None,
            autoscaling: None,
        }
    }

    /// Table auto scaling (tiers' `autoscale`) is read and set through
    /// `client`.
    pub fn with_autoscaling(mut self, client: aws_sdk_applicationautoscaling::Client) -> Self {
        self.autoscaling = Some(client);
        self
    }

    /// Each round records in `layouts` the key layouts of the tables whose
    /// tags it read (a running worker's routers key by them).
    pub(crate) fn with_table_layouts(
        mut self,
        layouts: Arc<tidemark_schema::TableLayouts>,
        config: RouterConfig,
    ) -> Self {
        self.table_layouts = Some((layouts, Arc::new(config)));
        self
    }

    /// Capacity lifts are recorded in (and read from) `table`, the
    /// coordinator table.
    pub fn with_coordinator(mut self, table: impl Into<String>) -> Self {
        self.coordinator = Some(table.into());
        self
    }

    /// Actions that trust this host's clock run only while it is within
    /// `skew` of DynamoDB's.
    pub fn with_max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = skew;
        self
    }

    /// DynamoDB's time now, as its answers tell (asking it once when none
    /// told lately; this host's time when it does not say).
    pub(crate) async fn server_now_checked(&self) -> DateTime<Utc> {
        if self.clock.offset(CLOCK_FRESH).is_none() {
            let _ = self
                .call(|| self.client.list_tables().limit(1).send())
                .await;
        }
        self.clock.server_now(CLOCK_FRESH)
    }

    /// Why actions that trust this host's clock may not run now, if they
    /// may not (asks DynamoDB once when no answer told its clock lately).
    pub(crate) async fn clock_refusal(&self) -> Option<String> {
        self.server_now_checked().await;
        skew_refusal(self.clock.offset(CLOCK_FRESH), self.max_clock_skew)
    }

    /// The manager of the period tables `config` describes: its schema,
    /// tiers, billing and `[maintenance]` section.
    pub fn from_config(config: &Config, dynamodb: aws_sdk_dynamodb::Client) -> Self {
        let mut policy = TablePolicy::new(
            &config.schema,
            config.tiers,
            config.billing,
            config.maintenance.on_expiry,
        );
        policy.export = config.maintenance.export.clone();
        policy.pitr = config.maintenance.pitr;
        policy.deletion_protection = config.maintenance.deletion_protection;
        policy.late_lift = lift::LiftPolicy {
            max_wcu: config.maintenance.late_lift_max_wcu,
            hold: (config.maintenance.interval * 2).max(Duration::from_secs(60)),
            on_demand: config.maintenance.late_lift == crate::config::LateLift::OnDemand,
        };
        let mut m = TableManager::new(dynamodb, policy)
            .with_coordinator(config.maintenance.coordinator_table.clone());
        if let Some(skew) = config.maintenance.max_clock_skew {
            m = m.with_max_clock_skew(skew);
        }
        m
    }

    /// Table calls (DescribeTable polling included) are admitted by the
    /// DynamoDB endpoint's shared governor.
    pub(crate) fn with_governor(mut self, gov: Governor) -> Self {
        self.gov = Some(gov);
        self
    }

    /// One table call, through the governor when there is one: at most
    /// [`CALL_ATTEMPTS`] attempts (the client makes one per call), a
    /// throttle, a 5xx or a timeout tried again after the governor's
    /// back-off and within its retry budget (a jittered back-off without
    /// one). Every call is idempotent or refused harmlessly when
    /// repeated (a table already being created, a capacity already set).
    async fn call<T, E, R, Fut>(
        &self,
        mut send: impl FnMut() -> Fut,
    ) -> Result<T, aws_sdk_dynamodb::error::SdkError<E, R>>
    where
        Fut: std::future::Future<Output = Result<T, aws_sdk_dynamodb::error::SdkError<E, R>>>,
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata,
        R: tidemark_aws_errors::HttpStatus,
    {
        use backon::BackoffBuilder;
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(5))
            .with_jitter()
            .without_max_times()
            .build();
        let mut attempts = 1;
        loop {
            match Governor::run_opt(self.gov.as_ref(), send()).await {
                // No connection at all (refused, DNS) is not tried again
                // here: the endpoint is not there, and the next round (or,
                // at start, the first write) tries anyway.
                Err(e)
                    if attempts < CALL_ATTEMPTS
                        && !matches!(e, aws_sdk_dynamodb::error::SdkError::DispatchFailure(_))
                        && tidemark_aws_errors::classify(&e).is_retryable() =>
                {
                    attempts += 1;
                    match &self.gov {
                        Some(gov) => gov.wait_retry().await,
                        None => {
                            let d = backoff.next().unwrap_or(Duration::from_secs(5));
                            tokio::time::sleep(d).await;
                        }
                    }
                }
                result => return result,
            }
        }
    }

    /// The policy.
    pub fn policy(&self) -> &TablePolicy {
        &self.policy
    }

    /// One round at `now`: plan, then apply unless `dry_run`. Lifts
    /// recorded are kept (no backlog reports are read: none is made).
    pub async fn round(
        &self,
        now: DateTime<Utc>,
        kind: RoundKind,
        dry_run: bool,
    ) -> Result<Vec<Applied>, TablesError> {
        self.round_guarded(now, kind, dry_run, &Unguarded, &BTreeMap::new())
            .await
    }

    /// [`round`](Self::round), asking `guard` before each mutating call; a
    /// refusal stops the round with [`TablesError::Refused`]. `backlogs`
    /// are the late backlogs the workers report, by table: a table below the
    /// active tier with one is lifted (see [`lift`](super::lift)). Sets the
    /// `tidemark_maintenance_next_table_active` gauge.
    pub async fn round_guarded(
        &self,
        now: DateTime<Utc>,
        kind: RoundKind,
        dry_run: bool,
        guard: &dyn ActionGuard,
        backlogs: &BTreeMap<String, Backlog>,
    ) -> Result<Vec<Applied>, TablesError> {
        let round = self.rounds.fetch_add(1, Ordering::Relaxed);
        // Boxed, as the calls below: callers hold a round on their stack
        // (a worker's start-up among them), and the SDK's futures are large.
        let mut existing =
            Box::pin(self.list_with(now, (kind == RoundKind::Rotate).then_some(round))).await?;
        for t in existing.iter().filter(|t| !is_ours(&self.policy, t)) {
            warn!(
                table = t.name,
                tag = PREFIX_TAG,
                prefix = self.policy.naming.prefix,
                "a table named like a period table lacks the prefix tag: not ours, left alone \
                 (if it is this stack's, tag it: aws dynamodb tag-resource --resource-arn <arn> \
                 --tags Key=tidemark:prefix,Value=<prefix>)"
            );
        }
        let lifts = if kind == RoundKind::Rotate {
            Box::pin(self.lifts()).await
        } else {
            Some(BTreeMap::new())
        };
        // Read only where a tier auto-scales: a stack without auto scaling
        // makes no Application Auto Scaling calls.
        let scaling = if kind == RoundKind::Rotate && self.policy.autoscales() {
            Box::pin(self.scaling()).await
        } else {
            None
        };
        for t in &mut existing {
            t.lift = lifts.as_ref().and_then(|l| l.get(&t.name).cloned());
            t.backlog = backlogs.get(&t.name).copied();
            t.scaling = scaling
                .as_ref()
                .map(|s| s.get(&t.name).copied().unwrap_or_default());
        }
        let mut actions = round_actions(&self.policy, &existing, now, kind);
        match &lifts {
            // Records of tables gone (expired, deleted) go too.
            Some(lifts) => {
                for name in lifts.keys() {
                    if !existing.iter().any(|t| &t.name == name) {
                        actions.push(Action::EndLift {
                            table: name.clone(),
                            state: LifecycleState::Expired,
                            from: Capacity { read: 0, write: 0 },
                            to: Capacity { read: 0, write: 0 },
                        });
                    }
                }
            }
            // Lifts unknown: nothing is lowered this round (it could revert
            // a lift).
            None => actions
                .retain(|a| !matches!(a, Action::Resize { from, to, .. } if to.write < from.write)),
        }
        let mut applied = Vec::with_capacity(actions.len());
        // Asked once per round, before the first action that needs it.
        let mut clock: Option<Option<String>> = None;
        for action in actions {
            let mut unreachable = false;
            let error = if dry_run {
                None
            } else {
                if action.trusts_the_clock() {
                    if clock.is_none() {
                        clock = Some(Box::pin(self.clock_refusal()).await);
                    }
                    if let Some(Some(why)) = &clock {
                        warn!(table = action.table(), action = action.kind(), reason = %why, "maintenance action skipped: this host's clock disagrees with DynamoDB's");
                        metrics::counter!(m::CLOCK_SKIPS, "action" => action.kind()).increment(1);
                        applied.push(Applied {
                            error: Some(format!("skipped: {why}")),
                            action,
                            unreachable: false,
                        });
                        continue;
                    }
                }
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

    /// The capacity lifts recorded in the coordinator table (none without
    /// one, or while it does not exist); `None` when they cannot be read.
    pub async fn lifts(&self) -> Option<BTreeMap<String, Lift>> {
        let Some(table) = &self.coordinator else {
            return Some(BTreeMap::new());
        };
        match lift::read(&self.client, table).await {
            Ok(l) => Some(l),
            Err(aws_sdk_dynamodb::Error::ResourceNotFoundException(_)) => Some(BTreeMap::new()),
            Err(e) => {
                warn!(table, error = %e, "reading the capacity lifts failed: nothing is lowered this round");
                None
            }
        }
    }

    /// Records `lift` for `table` in the coordinator table.
    async fn put_lift(&self, table: &str, lift: &Lift) -> Result<(), TablesError> {
        let Some(coordinator) = &self.coordinator else {
            return Ok(());
        };
        self.call(|| {
            self.client
                .put_item()
                .table_name(coordinator)
                .set_item(Some(lift::item(table, lift)))
                .send()
        })
        .await
        .map_err(|e| TablesError::call("PutItem", coordinator, e))?;
        Ok(())
    }

    /// Applies one action. Each kind's calls are a future of their own,
    /// boxed: one future of every kind would need a stack frame of about a
    /// megabyte in a debug build.
    pub(crate) fn apply<'a>(
        &'a self,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), TablesError>> {
        match action {
            Action::Create {
                table,
                capacity,
                warm_write_units,
                state,
            } => Box::pin(self.create_in(table, *state, *capacity, *warm_write_units)),
            Action::SetCeiling { table, to, .. } => Box::pin(async move {
                let req = self
                    .client
                    .update_table()
                    .table_name(table)
                    .on_demand_throughput(on_demand_throughput(*to));
                self.update(table, || req.clone().send()).await?;
                info!(
                    table,
                    max_read_units = to.read,
                    max_write_units = to.write,
                    "on-demand ceiling set"
                );
                Ok(())
            }),
            Action::SetScaling {
                table, side, to, ..
            } => Box::pin(self.set_scaling(table, *side, *to)),
            Action::RemoveScaling { table, side } => Box::pin(self.remove_scaling(table, *side)),
            Action::SetTableClass {
                table,
                arn,
                from,
                to,
            } => Box::pin(self.set_table_class(table, arn, *from, *to)),
            Action::Resize { table, to, .. } => Box::pin(async move {
                self.resize(table, *to).await?;
                info!(table, read = to.read, write = to.write, "table resized");
                Ok(())
            }),
            Action::SetWarmThroughput { table, to, .. } => Box::pin(async move {
                let req = self
                    .client
                    .update_table()
                    .table_name(table)
                    .warm_throughput(
                        WarmThroughput::builder()
                            .write_units_per_second(*to as i64)
                            .build(),
                    );
                self.update(table, || req.clone().send()).await?;
                info!(table, write_units = to, "warm throughput set");
                Ok(())
            }),
            Action::SetDeletionProtection { table, enabled } => Box::pin(async move {
                let req = self
                    .client
                    .update_table()
                    .table_name(table)
                    .deletion_protection_enabled(*enabled);
                self.update(table, || req.clone().send()).await?;
                info!(table, enabled, "deletion protection set");
                Ok(())
            }),
            Action::SetTtl { table, to, .. } => Box::pin(self.enable_ttl(table, to)),
            Action::SetPitr { table, enabled } => Box::pin(self.set_pitr(table, *enabled)),
            Action::TagLayout { table, arn } => {
                Box::pin(self.tag(table, arn, LAYOUT_TAG, &self.policy.layout))
            }
            Action::Export { table, arn } => Box::pin(self.export(table, arn)),
            Action::Delete { table } => Box::pin(self.delete(table)),
            Action::Lift {
                table,
                from,
                to,
                record,
                ..
            } => Box::pin(async move {
                // Recorded first: a lift whose UpdateTable fails is applied
                // again next round, never taken for drift and reverted.
                self.put_lift(table, record).await?;
                if from != to {
                    self.resize(table, *to).await?;
                }
                info!(
                    table,
                    write = to.write,
                    backlog_items = record.backlog_items,
                    "table lifted for a late backlog"
                );
                Ok(())
            }),
            Action::LiftOnDemand {
                table,
                from,
                max_write,
                fallback,
                record,
                ..
            } => Box::pin(self.lift_on_demand(table, *from, *max_write, *fallback, record)),
            Action::EndOnDemandLift { table, to, .. } => Box::pin(async move {
                // On demand to provisioned: allowed at any time.
                let req = self
                    .client
                    .update_table()
                    .table_name(table)
                    .billing_mode(BillingMode::Provisioned)
                    .provisioned_throughput(throughput(table, *to)?);
                self.update(table, || req.clone().send()).await?;
                self.delete_lift(table).await?;
                info!(
                    table,
                    write = to.write,
                    "late backlog gone: back to provisioned billing at the tier"
                );
                Ok(())
            }),
            Action::RenewLift { table, lift } => Box::pin(self.put_lift(table, lift)),
            Action::EndLift {
                table, from, to, ..
            } => Box::pin(async move {
                if from != to {
                    self.resize(table, *to).await?;
                }
                self.delete_lift(table).await?;
                info!(table, write = to.write, "late backlog gone: lift ended");
                Ok(())
            }),
            Action::TagExpired { table } => Box::pin(self.tag_expired(table)),
        }
    }

    /// Switches `table` to on-demand billing (at most `max_write` write
    /// request units a second) for its late backlog, recorded first. A
    /// refused switch is recorded as such and the table lifted to
    /// `fallback` (provisioned) instead: the switch is not asked again for
    /// [`lift::SWITCH_SPACING`].
    async fn lift_on_demand(
        &self,
        table: &str,
        from: Capacity,
        max_write: u64,
        fallback: Capacity,
        record: &Lift,
    ) -> Result<(), TablesError> {
        self.put_lift(table, record).await?;
        let req = self
            .client
            .update_table()
            .table_name(table)
            .billing_mode(BillingMode::PayPerRequest)
            .on_demand_throughput(
                OnDemandThroughput::builder()
                    .max_write_request_units(i64::try_from(max_write).unwrap_or(i64::MAX))
                    .build(),
            );
        match self.update(table, || req.clone().send()).await {
            Ok(()) => {
                info!(
                    table,
                    max_write,
                    backlog_items = record.backlog_items,
                    "table switched to on-demand for a late backlog"
                );
                Ok(())
            }
            Err(e) => {
                warn!(
                    table,
                    error = %e,
                    write = fallback.write,
                    "switching to on-demand was refused: lifted provisioned instead, \
                     and no switch is asked for this table for 6 hours"
                );
                let refused = Lift {
                    write: fallback.write,
                    on_demand: false,
                    on_demand_refused_ms: Some(chrono::Utc::now().timestamp_millis()),
                    ..record.clone()
                };
                self.put_lift(table, &refused).await?;
                if from != fallback {
                    self.resize(table, fallback).await?;
                }
                Ok(())
            }
        }
    }

    /// Moves `table` to class `to`. A refusal (DynamoDB's limit on class
    /// changes, or a table that cannot change now) is recorded in the
    /// table's [`CLASS_REFUSED_TAG`] tag: the change is not asked again for
    /// a day (see [`may_change_class`](super::drift::may_change_class)).
    async fn set_table_class(
        &self,
        table: &str,
        arn: &str,
        from: TableClass,
        to: TableClass,
    ) -> Result<(), TablesError> {
        let req = self
            .client
            .update_table()
            .table_name(table)
            .table_class(SdkTableClass::from(to.as_dynamodb()));
        match self.update(table, || req.clone().send()).await {
            Ok(()) => {
                info!(
                    table,
                    from = from.as_dynamodb(),
                    to = to.as_dynamodb(),
                    "table class changed"
                );
                Ok(())
            }
            Err(e) if e.is_unreachable() => Err(e),
            Err(e) => {
                warn!(
                    table,
                    to = to.as_dynamodb(),
                    error = %e,
                    "changing the table class was refused: not asked again for a day"
                );
                let now = Utc::now().timestamp_millis().to_string();
                self.tag(table, arn, CLASS_REFUSED_TAG, &now).await?;
                Err(e)
            }
        }
    }

    /// One UpdateTable of the provisioned capacity.
    async fn resize(&self, table: &str, to: Capacity) -> Result<(), TablesError> {
        let req = self
            .client
            .update_table()
            .table_name(table)
            .provisioned_throughput(throughput(table, to)?);
        self.update(table, || req.clone().send()).await
    }

    async fn set_pitr(&self, table: &str, enabled: bool) -> Result<(), TablesError> {
        let spec = PointInTimeRecoverySpecification::builder()
            .point_in_time_recovery_enabled(enabled)
            .build()
            .map_err(|e| TablesError::build("UpdateContinuousBackups", table, e))?;
        self.call(|| {
            self.client
                .update_continuous_backups()
                .table_name(table)
                .point_in_time_recovery_specification(spec.clone())
                .send()
        })
        .await
        .map_err(|e| TablesError::call("UpdateContinuousBackups", table, e))?;
        info!(table, enabled, "point-in-time recovery set");
        Ok(())
    }

    async fn delete(&self, table: &str) -> Result<(), TablesError> {
        match self
            .call(|| self.client.delete_table().table_name(table).send())
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

    async fn tag_expired(&self, table: &str) -> Result<(), TablesError> {
        let d = self
            .call(|| self.client.describe_table().table_name(table).send())
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

    /// Removes `table`'s lift record from the coordinator table.
    async fn delete_lift(&self, table: &str) -> Result<(), TablesError> {
        let Some(coordinator) = &self.coordinator else {
            return Ok(());
        };
        self.call(|| {
            self.client
                .delete_item()
                .table_name(coordinator)
                .key(
                    "leaseKey",
                    aws_sdk_dynamodb::types::AttributeValue::S(format!(
                        "{}{table}",
                        lift::KEY_PREFIX
                    )),
                )
                .send()
        })
        .await
        .map_err(|e| TablesError::call("DeleteItem", coordinator, e))?;
        Ok(())
    }

    /// One UpdateTable; a quota refusal is reported as such.
    async fn update<R, Fut>(
        &self,
        table: &str,
        send: impl FnMut() -> Fut,
    ) -> Result<(), TablesError>
    where
        Fut: std::future::Future<
                Output = Result<R, aws_sdk_dynamodb::error::SdkError<UpdateTableError>>,
            >,
    {
        match self.call(send).await {
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
        self.call(|| req.clone().send())
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
        // One token for every attempt: an attempt that timed out but
        // started the export is not started twice.
        let token = format!("tidemark-{:016x}", fastrand::u64(..));
        let out = self
            .call(|| {
                self.client
                    .export_table_to_point_in_time()
                    .client_token(&token)
                    .table_arn(arn)
                    .s3_bucket(&e.bucket)
                    .s3_prefix(e.prefix_of(table))
                    .set_s3_bucket_owner(e.bucket_owner.clone())
                    .export_format(format.clone())
                    .send()
            })
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
            .call(|| {
                self.client
                    .update_time_to_live()
                    .table_name(table)
                    .time_to_live_specification(spec.clone())
                    .send()
            })
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
    /// enables TTL when configured. Its on-demand ceiling and class are
    /// those of its state now.
    pub async fn create(
        &self,
        table: &str,
        capacity: Option<Capacity>,
        warm_write_units: Option<u64>,
    ) -> Result<(), TablesError> {
        let state = self
            .policy
            .naming
            .parse(table)
            .map_or(LifecycleState::Active, |p| {
                self.policy
                    .lifecycle
                    .state_at(&p, Utc::now().timestamp_millis())
            });
        self.create_in(table, state, capacity, warm_write_units)
            .await
    }

    /// [`create`](Self::create) a table in `state`: with the on-demand
    /// ceiling (when on demand) and the table class of its tier.
    pub async fn create_in(
        &self,
        table: &str,
        state: LifecycleState,
        capacity: Option<Capacity>,
        warm_write_units: Option<u64>,
    ) -> Result<(), TablesError> {
        let p = &self.policy;
        let want = p.desired(state);
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
        if capacity.is_none() && !want.ceiling.is_empty() {
            req = req.on_demand_throughput(on_demand_throughput(want.ceiling));
        }
        if let Some(class) = want.table_class {
            req = req.table_class(SdkTableClass::from(class.as_dynamodb()));
        }
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
        match self.call(|| req.clone().send()).await {
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
                .call(|| self.client.describe_table().table_name(table).send())
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

/// DynamoDB's form of a ceiling (-1 where there is none).
fn on_demand_throughput(c: Ceiling) -> OnDemandThroughput {
    let units = |u: Option<u64>| u.map_or(-1, |u| i64::try_from(u).unwrap_or(i64::MAX));
    OnDemandThroughput::builder()
        .max_read_request_units(units(c.read))
        .max_write_request_units(units(c.write))
        .build()
}

fn throughput(table: &str, c: Capacity) -> Result<ProvisionedThroughput, TablesError> {
    ProvisionedThroughput::builder()
        .read_capacity_units(c.read as i64)
        .write_capacity_units(c.write as i64)
        .build()
        .map_err(|e| TablesError::build("UpdateTable", table, e))
}

/// The manager's own retries, against a mocked DynamoDB.
#[cfg(test)]
mod retries {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::config::ExpiryAction;
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::create_table::CreateTableOutput;
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
    use aws_sdk_dynamodb::operation::update_time_to_live::UpdateTimeToLiveOutput;
    use aws_sdk_dynamodb::types::TableDescription;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use tidemark_schema::period::Billing;
    use tidemark_schema::period::CapacityTiers;

    /// Three 500s in a row on CreateTable: the SDK's three attempts used to
    /// give up on them (outside the governor's retry budget); the manager's
    /// client makes one attempt per call and the manager retries within
    /// its own bound (and the governor's budget, when it has one), so the
    /// fourth call creates the table.
    #[tokio::test(start_paused = true)]
    async fn a_failing_create_table_is_retried_by_the_manager_one_attempt_per_call() {
        let mut router = RouterConfig::with_prefix("iot");
        router.period = tidemark_schema::period::Period::Day;
        let policy = TablePolicy::new(
            &router,
            CapacityTiers::default(),
            Billing::OnDemand {
                warm_write_units: None,
            },
            ExpiryAction::Delete,
        );
        let spec = policy.key_spec();
        let create = mock!(Client::create_table)
            .sequence()
            .http_status(500, None)
            .times(3)
            .output(|| CreateTableOutput::builder().build())
            .build();
        let describe = mock!(Client::describe_table).then_output(move || {
            DescribeTableOutput::builder()
                .table(
                    TableDescription::builder()
                        .table_name("iot_2026-11-26")
                        .table_status(TableStatus::Active)
                        .set_key_schema(Some(spec.elements().unwrap()))
                        .set_attribute_definitions(Some(spec.definitions().unwrap()))
                        .build(),
                )
                .build()
        });
        let ttl = mock!(Client::update_time_to_live)
            .then_output(|| UpdateTimeToLiveOutput::builder().build());
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::MatchAny,
            [&create, &describe, &ttl]
        );
        let manager = TableManager::new(client, policy);
        let created = manager.create("iot_2026-11-26", None, None).await;
        assert!(created.is_ok(), "{created:?}");
        assert_eq!(create.num_calls(), 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::put_item::{PutItemInput, PutItemOutput};
    use aws_sdk_dynamodb::operation::update_table::UpdateTableOutput;
    use aws_sdk_dynamodb::types::error::LimitExceededException;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use tidemark_schema::period::{Billing, CapacityTiers};

    /// DynamoDB refuses the switch to on-demand (its limit of switches a
    /// day): the table is lifted provisioned instead, and the lift is
    /// recorded with the refusal, so later rounds do not ask again.
    #[tokio::test]
    async fn a_refused_switch_to_on_demand_lifts_provisioned_and_records_the_refusal() {
        let puts: Arc<Mutex<Vec<PutItemInput>>> = Arc::default();
        let seen = puts.clone();
        let put = mock!(Client::put_item)
            .match_requests(move |r| {
                seen.lock().unwrap().push(r.clone());
                true
            })
            .then_output(|| PutItemOutput::builder().build());
        let switch = mock!(Client::update_table)
            .match_requests(|r| r.billing_mode() == Some(&BillingMode::PayPerRequest))
            .then_error(|| {
                UpdateTableError::LimitExceededException(
                    LimitExceededException::builder()
                        .message("billing mode switched too often")
                        .build(),
                )
            });
        let resize = mock!(Client::update_table)
            .match_requests(|r| {
                r.billing_mode().is_none()
                    && r.provisioned_throughput()
                        .is_some_and(|p| p.write_capacity_units() == 100)
            })
            .then_output(|| UpdateTableOutput::builder().build());
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::MatchAny,
            [&put, &switch, &resize]
        );
        let router = RouterConfig::with_prefix("iot");
        let policy = TablePolicy::new(
            &router,
            CapacityTiers::default(),
            Billing::Provisioned,
            crate::config::ExpiryAction::Delete,
        );
        let m = TableManager::new(client, policy).with_coordinator("coord");
        let frozen = Capacity { read: 1, write: 1 };
        let fallback = Capacity {
            read: 1,
            write: 100,
        };
        let record = Lift {
            write: 0,
            on_demand: true,
            reason: lift::LATE_BACKLOG.into(),
            since_ms: 1,
            renewed_ms: 1,
            backlog_items: 2_000,
            ..Lift::default()
        };
        let action = Action::LiftOnDemand {
            table: "iot_2026-11-20".into(),
            state: LifecycleState::Frozen,
            from: frozen,
            max_write: 1000,
            fallback,
            backlog: Backlog {
                items: 2_000,
                wcu: 6_000,
            },
            record,
        };
        let before = Utc::now().timestamp_millis();
        m.apply(&action).await.unwrap();
        assert!(switch.num_calls() >= 1, "the switch was asked");
        assert_eq!(resize.num_calls(), 1, "lifted provisioned instead");
        let puts = puts.lock().unwrap();
        let last = lift::from_item(puts.last().unwrap().item().unwrap())
            .unwrap()
            .1;
        assert!(!last.on_demand, "{last:?}");
        assert_eq!(last.write, 100);
        assert!(
            last.on_demand_refused_ms.is_some_and(|t| t >= before),
            "the refusal is recorded: {last:?}"
        );
    }
}
