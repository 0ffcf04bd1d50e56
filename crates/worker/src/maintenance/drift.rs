//! The pure half of table maintenance: the desired state of a period
//! table in each lifecycle state, the drift of each existing table from
//! it, and the actions that repair it ([`round_actions`]). No I/O: the
//! [`TableManager`](super::TableManager) reads the tables and applies the
//! actions.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::TableStatus;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tidemark_consumer::keyschema::{KeyAttr, KeySpec};
use tidemark_schema::period::{
    Autoscale, Billing, Capacity, CapacityTiers, Ceiling, Lifecycle, LifecycleState, PeriodRef,
    ScaleRange, TableClass, TableNaming,
};
use tidemark_schema::route::RouterConfig;

use super::lift::{Backlog, LATE_BACKLOG, Lift, LiftPolicy};
use super::tags::{CLASS_REFUSED_TAG, LAYOUT_TAG, PREFIX_TAG, layout_of};
use crate::config::{ExpiryAction, ExportConfig};

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
    /// When the table was last switched to on-demand billing, Unix ms
    /// (DynamoDB's `LastUpdateToPayPerRequestDateTime`).
    #[serde(skip)]
    pub on_demand_since_ms: Option<i64>,
    /// Already tagged as expired (kept for archiving).
    pub tagged_expired: bool,
    /// Warm write throughput DynamoDB reports, units/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_write_units: Option<u64>,
    /// The on-demand ceiling DynamoDB reports (`OnDemandThroughput`;
    /// unset or -1: none).
    #[serde(skip_serializing_if = "Ceiling::is_empty")]
    pub ceiling: Ceiling,
    /// The table class DynamoDB reports (standard when it reports none).
    pub table_class: TableClass,
    /// When the table class was last changed, Unix ms.
    #[serde(skip)]
    pub class_changed_ms: Option<i64>,
    /// Its auto scaling as Application Auto Scaling reports it; `None`
    /// when not read this round (left alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaling: Option<Scaling>,
    /// Deletion protection on.
    pub deletion_protection: bool,
    /// Settings read with extra calls.
    #[serde(skip_serializing_if = "is_default")]
    pub details: Details,
    /// The table's capacity lift, as recorded in the coordinator table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lift: Option<Lift>,
    /// The late backlog workers report for it (items waiting in writers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backlog: Option<Backlog>,
    /// Size DynamoDB reports (refreshed about every six hours), bytes.
    pub size_bytes: u64,
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

/// Which side of a table's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Read capacity units.
    Read,
    /// Write capacity units.
    Write,
}

impl Side {
    /// Both sides.
    pub const BOTH: [Side; 2] = [Side::Read, Side::Write];

    /// The side's range in a tier's auto scaling.
    pub fn of(self, a: &Autoscale) -> Option<ScaleRange> {
        match self {
            Side::Read => a.read,
            Side::Write => a.write,
        }
    }
}

/// One side's scalable target as registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Registered {
    /// Its range, with our policy's target (0 when our policy is missing).
    pub range: ScaleRange,
    /// Tidemark's target-tracking policy is on it (else it is someone
    /// else's, and never removed).
    pub ours: bool,
}

/// A table's scalable targets, per side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Scaling {
    /// Read capacity's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<Registered>,
    /// Write capacity's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write: Option<Registered>,
}

impl Scaling {
    /// The side's registration.
    pub fn side(&self, side: Side) -> Option<Registered> {
        match side {
            Side::Read => self.read,
            Side::Write => self.write,
        }
    }
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
    /// Set an on-demand table's ceiling (`OnDemandThroughput`) back to its
    /// tier's.
    SetCeiling {
        /// Table name.
        table: String,
        /// The ceiling DynamoDB reports.
        from: Ceiling,
        /// The tier's; a side the tier leaves unset keeps `from`'s.
        to: Ceiling,
    },
    /// Register (or update) one side's scalable target and Tidemark's
    /// target-tracking policy on it.
    SetScaling {
        /// Table name.
        table: String,
        /// Reads or writes.
        side: Side,
        /// As registered now, if at all.
        from: Option<ScaleRange>,
        /// The tier's.
        to: ScaleRange,
    },
    /// Deregister one side's scalable target (its policies go with it).
    RemoveScaling {
        /// Table name.
        table: String,
        /// Reads or writes.
        side: Side,
    },
    /// Move a table to its tier's table class.
    SetTableClass {
        /// Table name.
        table: String,
        /// Table ARN (a refusal is recorded in a tag).
        #[serde(skip)]
        arn: String,
        /// Current class.
        from: TableClass,
        /// The tier's.
        to: TableClass,
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
    /// Raise a table below the active tier to what its late backlog needs,
    /// and record the lift (reconcile keeps it while it holds).
    Lift {
        /// Table name.
        table: String,
        /// Its state (cold or frozen).
        state: LifecycleState,
        /// Current capacity.
        from: Capacity,
        /// Lifted capacity.
        to: Capacity,
        /// The backlog it is sized for.
        backlog: Backlog,
        /// The lift's record.
        #[serde(skip)]
        record: Lift,
    },
    /// Switch a table below the active tier to on-demand billing (its
    /// write throughput capped at `max_write`) for its late backlog, and
    /// record the lift; if DynamoDB refuses the switch, lift it to
    /// `fallback` (provisioned) instead and record the refusal.
    LiftOnDemand {
        /// Table name.
        table: String,
        /// Its state (cold or frozen).
        state: LifecycleState,
        /// Current capacity.
        from: Capacity,
        /// Most write request units a second while on demand.
        max_write: u64,
        /// The provisioned lift should the switch be refused.
        fallback: Capacity,
        /// The backlog it is for.
        backlog: Backlog,
        /// The lift's record.
        #[serde(skip)]
        record: Lift,
    },
    /// An on-demand lift's backlog is gone: the table back to provisioned
    /// billing at its tier, the record goes.
    EndOnDemandLift {
        /// Table name.
        table: String,
        /// Its state.
        state: LifecycleState,
        /// Tier capacity.
        to: Capacity,
    },
    /// A lifted table still has a backlog: the lift's record is renewed.
    RenewLift {
        /// Table name.
        table: String,
        /// The lift, renewed.
        #[serde(skip)]
        lift: Lift,
    },
    /// No backlog for the lift's hold time: the record goes, and the table
    /// back to its tier.
    EndLift {
        /// Table name.
        table: String,
        /// Its state.
        state: LifecycleState,
        /// Current capacity.
        from: Capacity,
        /// Tier capacity.
        to: Capacity,
    },
}

impl Action {
    /// The action's kind, as in its serialized form.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Create { .. } => "create",
            Action::Resize { .. } => "resize",
            Action::SetWarmThroughput { .. } => "set_warm_throughput",
            Action::SetCeiling { .. } => "set_ceiling",
            Action::SetTableClass { .. } => "set_table_class",
            Action::SetScaling { .. } => "set_scaling",
            Action::RemoveScaling { .. } => "remove_scaling",
            Action::SetTtl { .. } => "set_ttl",
            Action::SetPitr { .. } => "set_pitr",
            Action::SetDeletionProtection { .. } => "set_deletion_protection",
            Action::TagLayout { .. } => "tag_layout",
            Action::Export { .. } => "export",
            Action::Delete { .. } => "delete",
            Action::TagExpired { .. } => "tag_expired",
            Action::Lift { .. } => "lift",
            Action::LiftOnDemand { .. } => "lift_on_demand",
            Action::EndOnDemandLift { .. } => "end_on_demand_lift",
            Action::RenewLift { .. } => "renew_lift",
            Action::EndLift { .. } => "end_lift",
        }
    }

    /// True for actions that destroy data or capacity on the strength of
    /// this host's clock (a resize to a lower tier, an export, a delete):
    /// they run only while this clock agrees with DynamoDB's.
    pub fn trusts_the_clock(&self) -> bool {
        match self {
            Action::Resize { from, to, .. } | Action::EndLift { from, to, .. } => {
                to.write < from.write || to.read < from.read
            }
            // Scaling that may lower capacity: a range lowered, or gone.
            Action::SetScaling {
                from: Some(from),
                to,
                ..
            } => to.max < from.max || to.min < from.min,
            Action::Export { .. }
            | Action::Delete { .. }
            | Action::TagExpired { .. }
            | Action::RemoveScaling { .. }
            | Action::EndOnDemandLift { .. } => true,
            _ => false,
        }
    }

    /// The table the action is about.
    pub fn table(&self) -> &str {
        match self {
            Action::Create { table, .. }
            | Action::Resize { table, .. }
            | Action::SetWarmThroughput { table, .. }
            | Action::SetCeiling { table, .. }
            | Action::SetTableClass { table, .. }
            | Action::SetScaling { table, .. }
            | Action::RemoveScaling { table, .. }
            | Action::SetTtl { table, .. }
            | Action::SetPitr { table, .. }
            | Action::SetDeletionProtection { table, .. }
            | Action::TagLayout { table, .. }
            | Action::Export { table, .. }
            | Action::Delete { table }
            | Action::TagExpired { table }
            | Action::Lift { table, .. }
            | Action::LiftOnDemand { table, .. }
            | Action::EndOnDemandLift { table, .. }
            | Action::RenewLift { table, .. }
            | Action::EndLift { table, .. } => table,
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
    /// Capacity lifts for late backlogs.
    pub late_lift: LiftPolicy,
}

/// What a table in some state should look like; `None` where the policy
/// leaves a setting alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Desired {
    pub(super) capacity: Option<Capacity>,
    pub(super) warm_write_units: Option<u64>,
    pub(super) ceiling: Ceiling,
    pub(super) table_class: Option<TableClass>,
    /// Auto scaling (provisioned billing only).
    pub(super) autoscale: Autoscale,
    pub(super) pitr: Option<bool>,
    pub(super) deletion_protection: Option<bool>,
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
            late_lift: LiftPolicy::default(),
        }
    }

    /// True when some tier auto-scales (provisioned billing).
    pub(crate) fn autoscales(&self) -> bool {
        matches!(self.billing, Billing::Provisioned)
            && self
                .tiers
                .named()
                .iter()
                .any(|(_, t)| t.autoscale.is_some())
    }

    /// The key schema every period table must have.
    pub(crate) fn key_spec(&self) -> KeySpec {
        KeySpec::hash_range(KeyAttr::string(&self.pk), KeyAttr::string(&self.sk))
    }

    /// The state and creation settings of a period's table at `now`. A
    /// period already cold or frozen is a backfill: its table is created
    /// on demand (no capacity to size, nothing held at the active tier).
    pub(super) fn creation(
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

    pub(super) fn desired(&self, state: LifecycleState) -> Desired {
        let young = matches!(
            state,
            LifecycleState::Prebuild | LifecycleState::Active | LifecycleState::Cooling
        );
        Desired {
            capacity: self.billing.capacity(&self.tiers, state),
            warm_write_units: self.billing.warm_write_units(state),
            ceiling: self.billing.ceiling(&self.tiers, state),
            table_class: self.tiers.tier(state).and_then(|t| t.table_class),
            autoscale: match self.billing {
                Billing::Provisioned => self
                    .tiers
                    .tier(state)
                    .and_then(|t| t.autoscale)
                    .unwrap_or_default(),
                Billing::OnDemand { .. } => Autoscale::default(),
            },
            pitr: self.pitr.then_some(young),
            deletion_protection: self.deletion_protection.then_some(young),
        }
    }
}

/// A table for a period already past its grace: created for a backfill.
fn is_backfill(state: LifecycleState) -> bool {
    matches!(state, LifecycleState::Cold | LifecycleState::Frozen)
}

/// The actions of one round: a pure function of the tables that exist and
/// `now`.
pub(crate) fn round_actions(
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
        // A table that does not carry our prefix tag is not ours, whatever
        // its name: never adopted (tagging it would make it ours to resize
        // and delete), never changed.
        if !is_ours(policy, t) {
            continue;
        }
        match t.state {
            // Exported or deleted only once the expiry guard has passed:
            // every write accepted (until the guard before expiry) has
            // landed by then.
            LifecycleState::Expired => {
                if policy
                    .naming
                    .parse(&t.name)
                    .is_some_and(|p| policy.lifecycle.past_expiry_guard(&p, now_ms))
                {
                    expire(policy, t, &mut actions);
                }
            }
            state => {
                if !lift(policy, t, state, now_ms, &mut actions) {
                    reconcile(policy, t, state, now_ms, &mut actions);
                }
            }
        }
    }
    actions
}

/// The capacity side of a table's late backlog: a lift sized for the
/// backlog, its renewal, or its end once no backlog was seen for the hold
/// time. Returns true when the table's capacity is a lift's business this
/// round (reconcile then leaves the capacity alone: it never reverts a
/// lift). Only provisioned tables below the active tier are lifted.
fn lift(
    policy: &TablePolicy,
    t: &TableInfo,
    state: LifecycleState,
    now_ms: i64,
    out: &mut Vec<Action>,
) -> bool {
    let want = policy.desired(state);
    let Some(tier) = want.capacity else {
        return false;
    };
    let table = || t.name.clone();
    // Writes the tier auto-scales are the scaling policy's to raise (up to
    // its max): a lift would fight it. A lift recorded before goes.
    if want.autoscale.write.is_some() {
        if let (Some(_), Some(cap)) = (&t.lift, t.capacity) {
            out.push(Action::EndLift {
                table: table(),
                state,
                from: cap,
                to: cap,
            });
            return true;
        }
        return false;
    }
    let late = matches!(state, LifecycleState::Cold | LifecycleState::Frozen);
    let backlog = t.backlog.filter(|b| late && b.items > 0);
    let held_ms = i64::try_from(policy.late_lift.hold.as_millis()).unwrap_or(i64::MAX);
    let Some(from) = t.capacity else {
        // On demand for a lift: kept while the backlog lasts and for the
        // hold time, then back to provisioned at the tier.
        if let Some(l) = t.lift.as_ref().filter(|l| l.on_demand) {
            if let Some(b) = backlog {
                out.push(Action::RenewLift {
                    table: table(),
                    lift: Lift {
                        renewed_ms: now_ms,
                        backlog_items: b.items,
                        ..l.clone()
                    },
                });
            } else if !(late && now_ms < l.renewed_ms.saturating_add(held_ms)) {
                out.push(Action::EndOnDemandLift {
                    table: table(),
                    state,
                    to: tier,
                });
            }
            return true;
        }
        // On demand (a backfill's table): nothing to lift; a record left
        // from before goes.
        if t.lift.is_some() {
            out.push(Action::EndLift {
                table: t.name.clone(),
                state,
                from: tier,
                to: tier,
            });
        }
        return false;
    };
    if let Some(b) = backlog
        && policy.late_lift.max_wcu > tier.write
    {
        let needed = policy.late_lift.needed(b, tier.write);
        let write = needed.max(t.lift.as_ref().map_or(0, |l| l.write));
        if write > tier.write && from.write < write {
            let to = Capacity {
                read: tier.read.max(from.read),
                write,
            };
            let refused_ms = t.lift.as_ref().and_then(|l| l.on_demand_refused_ms);
            let record = Lift {
                write,
                on_demand: false,
                on_demand_refused_ms: refused_ms,
                reason: LATE_BACKLOG.into(),
                since_ms: t.lift.as_ref().map_or(now_ms, |l| l.since_ms),
                renewed_ms: now_ms,
                backlog_items: b.items,
            };
            // On demand where the config asks for it and DynamoDB allows
            // another switch; a provisioned lift otherwise.
            if policy.late_lift.on_demand
                && super::lift::may_switch(t.on_demand_since_ms, refused_ms, now_ms)
            {
                out.push(Action::LiftOnDemand {
                    table: table(),
                    state,
                    from,
                    max_write: policy.late_lift.max_wcu,
                    fallback: to,
                    backlog: b,
                    record: Lift {
                        write: 0,
                        on_demand: true,
                        ..record
                    },
                });
                return true;
            }
            out.push(Action::Lift {
                table: table(),
                state,
                from,
                to,
                backlog: b,
                record,
            });
            return true;
        }
        if let Some(l) = &t.lift {
            out.push(Action::RenewLift {
                table: table(),
                lift: Lift {
                    renewed_ms: now_ms,
                    backlog_items: b.items,
                    ..l.clone()
                },
            });
            return true;
        }
        // Enough capacity already, and no lift of ours: nothing to hold.
        return false;
    }
    let Some(l) = &t.lift else {
        return false;
    };
    if late && now_ms < l.renewed_ms.saturating_add(held_ms) {
        // Held: restored if someone lowered it meanwhile.
        if from.write < l.write {
            out.push(Action::Lift {
                table: table(),
                state,
                from,
                to: Capacity {
                    read: tier.read.max(from.read),
                    write: l.write,
                },
                backlog: Backlog {
                    items: l.backlog_items,
                    wcu: 0,
                },
                record: l.clone(),
            });
        }
        return true;
    }
    out.push(Action::EndLift {
        table: table(),
        state,
        from,
        to: tier,
    });
    true
}

/// False for a table whose tags were read and do not carry this stack's
/// `tidemark:prefix` tag (another application's `<prefix>_*` table, or
/// one tagged with another prefix). A table whose tags were not read this
/// round counts as ours: IAM refuses changes to it unless it is.
pub(crate) fn is_ours(policy: &TablePolicy, t: &TableInfo) -> bool {
    t.details
        .tags
        .as_ref()
        .is_none_or(|tags| tags.get(PREFIX_TAG) == Some(&policy.naming.prefix))
}

/// The actions that bring a live table to its desired state.
fn reconcile(
    policy: &TablePolicy,
    t: &TableInfo,
    state: LifecycleState,
    now_ms: i64,
    out: &mut Vec<Action>,
) {
    let want = policy.desired(state);
    let table = || t.name.clone();
    // Scaling first: a side leaving auto scaling is deregistered before
    // the resize to its tier below, so the policy cannot undo it.
    if let Some(scaling) = &t.scaling
        && t.capacity.is_some()
    {
        for side in Side::BOTH {
            match (side.of(&want.autoscale), scaling.side(side)) {
                (Some(to), from) if from.map(|f| f.range) != Some(to) => {
                    out.push(Action::SetScaling {
                        table: table(),
                        side,
                        from: from.map(|f| f.range),
                        to,
                    });
                }
                (None, Some(r)) if r.ours => out.push(Action::RemoveScaling {
                    table: table(),
                    side,
                }),
                _ => {}
            }
        }
    }
    // An auto-scaled side keeps the capacity the policy gave it, within
    // the tier's range.
    let to = want.capacity.map(|c| {
        let clamp = |side: Side, tier: u64, now: Option<u64>| {
            side.of(&want.autoscale)
                .map_or(tier, |r| now.unwrap_or(tier).clamp(r.min, r.max.max(r.min)))
        };
        Capacity {
            read: clamp(Side::Read, c.read, t.capacity.map(|c| c.read)),
            write: clamp(Side::Write, c.write, t.capacity.map(|c| c.write)),
        }
    });
    // One UpdateTable per table per round: the table is UPDATING after one,
    // and DynamoDB refuses the next until it is ACTIVE again.
    if let (Some(from), Some(to)) = (t.capacity, to)
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
    } else if t.capacity.is_none()
        && ((want.ceiling.read.is_some() && want.ceiling.read != t.ceiling.read)
            || (want.ceiling.write.is_some() && want.ceiling.write != t.ceiling.write))
    {
        out.push(Action::SetCeiling {
            table: table(),
            from: t.ceiling,
            to: Ceiling {
                read: want.ceiling.read.or(t.ceiling.read),
                write: want.ceiling.write.or(t.ceiling.write),
            },
        });
    } else if let Some(to) = want.table_class
        && to != t.table_class
        && may_change_class(t, now_ms)
    {
        out.push(Action::SetTableClass {
            table: table(),
            arn: t.arn.clone(),
            from: t.table_class,
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

/// DynamoDB allows two table class changes per table in a trailing 30
/// days; changes at least this far apart never exceed it.
pub(crate) const CLASS_CHANGE_SPACING_MS: i64 = 15 * 86_400_000;
/// A refused class change is not asked again for this long.
pub(crate) const CLASS_RETRY_AFTER_MS: i64 = 86_400_000;

/// True when `t`'s class may be changed at `now_ms`: its tags were read
/// this round (a refusal is recorded there), none was refused within
/// [`CLASS_RETRY_AFTER_MS`], and its class last changed at least
/// [`CLASS_CHANGE_SPACING_MS`] ago.
pub(crate) fn may_change_class(t: &TableInfo, now_ms: i64) -> bool {
    let Some(tags) = &t.details.tags else {
        return false;
    };
    let refused = tags
        .get(CLASS_REFUSED_TAG)
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|at| now_ms < at.saturating_add(CLASS_RETRY_AFTER_MS));
    let recent = t
        .class_changed_ms
        .is_some_and(|at| now_ms < at.saturating_add(CLASS_CHANGE_SPACING_MS));
    !refused && !recent
}

/// What happens to a table past retention.
fn expire(policy: &TablePolicy, t: &TableInfo, out: &mut Vec<Action>) {
    let table = || t.name.clone();
    // Its scalable targets go first: they would outlive the table.
    if let Some(scaling) = &t.scaling {
        let ours: Vec<Side> = Side::BOTH
            .into_iter()
            .filter(|s| scaling.side(*s).is_some_and(|r| r.ours))
            .collect();
        if !ours.is_empty() {
            for side in ours {
                out.push(Action::RemoveScaling {
                    table: table(),
                    side,
                });
            }
            return;
        }
    }
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

#[cfg(test)]
mod tests;
