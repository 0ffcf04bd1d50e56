//! Capacity lifts: a recorded, reasoned override of a table's tier
//! capacity. While workers report a late backlog for a table scaled down
//! below the active tier, maintenance raises its write capacity to what the
//! backlog needs (within `maintenance.late_lift_max_wcu`), records the lift
//! in the coordinator table, and lowers the table to its tier again once
//! no backlog has been reported for the lift's hold time. Reconcile reads
//! the records, so it never reverts a lift it made.
//!
//! With `maintenance.late_lift = "on_demand"` the lift switches the table
//! to on-demand billing instead (its spend capped at `late_lift_max_wcu`
//! write units a second) and back to provisioned at its tier once the
//! backlog is gone. DynamoDB allows at most four switches to on-demand per
//! table in 24 hours: a table is switched at most once per
//! [`SWITCH_SPACING`] (by DynamoDB's own record of its last switch), and a
//! refused switch falls back to a provisioned lift, recorded, so it is not
//! asked again for [`SWITCH_SPACING`] (never retried in a loop).
//!
//! A table whose tier auto-scales its writes (`autoscale.write`) is never
//! lifted: its scaling policy raises it for the throttled backlog (up to
//! the range's max), and would scale a lift back down; a lift recorded
//! before the tier gained auto scaling is ended without a resize.
//!
//! One item per lifted table in the coordinator table (the maintenance
//! lease's), keyed `leaseKey = "tidemark-lift#{table}"`: `table`, `write`
//! (WCU while lifted; 0 on demand), `mode` (`provisioned`, `on_demand`),
//! `reason` (`late_backlog`), `since` and `renewed` (Unix ms),
//! `backlogItems` (the backlog last seen), `onDemandRefused` (Unix ms of a
//! refused switch). Only the holder of the maintenance lease writes them;
//! `tidemark status` lists them.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;

/// Key prefix of lift items in the coordinator table.
pub(crate) const KEY_PREFIX: &str = "tidemark-lift#";
/// Why a table is lifted (the only reason so far).
pub const LATE_BACKLOG: &str = "late_backlog";
/// A lift aims to write the backlog it was sized for within this time.
pub(crate) const DRAIN: Duration = Duration::from_secs(60);
/// At most one switch to on-demand per table in this time: DynamoDB allows
/// four in a rolling 24 hours.
pub const SWITCH_SPACING: Duration = Duration::from_secs(6 * 3600);

/// A late backlog workers reported for a table: items waiting in their
/// writers, and those items' WCU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Backlog {
    /// Late items waiting.
    pub items: u64,
    /// Their write cost, WCU.
    pub wcu: u64,
}

impl std::ops::Add for Backlog {
    type Output = Backlog;

    /// The sum of two workers' reports.
    fn add(self, other: Backlog) -> Backlog {
        Backlog {
            items: self.items + other.items,
            wcu: self.wcu + other.wcu,
        }
    }
}

/// A table's lift, as recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Lift {
    /// Write capacity while lifted, WCU (0 on demand).
    pub write: u64,
    /// Lifted by switching the table to on-demand billing.
    pub on_demand: bool,
    /// When a switch to on-demand was refused (the lift is provisioned
    /// instead), Unix ms.
    pub on_demand_refused_ms: Option<i64>,
    /// Why (`late_backlog`).
    pub reason: String,
    /// When the lift started, Unix ms.
    pub since_ms: i64,
    /// When a backlog was last seen for it, Unix ms.
    pub renewed_ms: i64,
    /// The backlog last seen, items.
    pub backlog_items: u64,
}

/// How lifts are sized and held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiftPolicy {
    /// Most write capacity a lift gives one table, WCU (on demand: its
    /// maximum write throughput); 0: no lifts.
    pub max_wcu: u64,
    /// A lift stays this long after the last backlog seen.
    pub hold: Duration,
    /// Lift by switching to on-demand billing where DynamoDB allows it.
    pub on_demand: bool,
}

impl Default for LiftPolicy {
    fn default() -> Self {
        LiftPolicy {
            max_wcu: 1000,
            hold: Duration::from_secs(120),
            on_demand: false,
        }
    }
}

/// True when a table may be switched to on-demand at `now_ms`: no switch
/// of it within [`SWITCH_SPACING`] (`last_switch_ms`, DynamoDB's record),
/// nor a refusal (`refused_ms`, ours).
pub(crate) fn may_switch(
    last_switch_ms: Option<i64>,
    refused_ms: Option<i64>,
    now_ms: i64,
) -> bool {
    let spacing = SWITCH_SPACING.as_millis() as i64;
    [last_switch_ms, refused_ms]
        .into_iter()
        .flatten()
        .all(|t| now_ms.saturating_sub(t) >= spacing)
}

impl LiftPolicy {
    /// The write capacity a backlog needs: its WCU written within
    /// [`DRAIN`], at least `floor` (the tier's), at most `max_wcu`.
    pub(crate) fn needed(&self, backlog: Backlog, floor: u64) -> u64 {
        let per_sec = backlog.wcu.div_ceil(DRAIN.as_secs().max(1));
        per_sec.max(floor).min(self.max_wcu.max(floor))
    }
}

/// The item of `table`'s lift.
pub(crate) fn item(table: &str, lift: &Lift) -> HashMap<String, AttributeValue> {
    let n = |v: i64| AttributeValue::N(v.to_string());
    let mut item = HashMap::from([
        (
            "leaseKey".to_string(),
            AttributeValue::S(format!("{KEY_PREFIX}{table}")),
        ),
        ("table".to_string(), AttributeValue::S(table.to_string())),
        ("write".to_string(), n(lift.write as i64)),
        ("reason".to_string(), AttributeValue::S(lift.reason.clone())),
        ("since".to_string(), n(lift.since_ms)),
        ("renewed".to_string(), n(lift.renewed_ms)),
        ("backlogItems".to_string(), n(lift.backlog_items as i64)),
    ]);
    item.insert(
        "mode".to_string(),
        AttributeValue::S(
            if lift.on_demand {
                "on_demand"
            } else {
                "provisioned"
            }
            .into(),
        ),
    );
    if let Some(t) = lift.on_demand_refused_ms {
        item.insert("onDemandRefused".to_string(), n(t));
    }
    item
}

/// A lift read back: (table, lift); `None` for items that are not lifts.
pub(crate) fn from_item(item: &HashMap<String, AttributeValue>) -> Option<(String, Lift)> {
    let table = item
        .get("leaseKey")?
        .as_s()
        .ok()?
        .strip_prefix(KEY_PREFIX)?
        .to_string();
    let num = |k: &str| {
        item.get(k)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<i64>().ok())
    };
    Some((
        table,
        Lift {
            write: u64::try_from(num("write")?).ok()?,
            on_demand: item
                .get("mode")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|m| m == "on_demand"),
            on_demand_refused_ms: num("onDemandRefused"),
            reason: item
                .get("reason")
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_else(|| LATE_BACKLOG.to_string()),
            since_ms: num("since")?,
            renewed_ms: num("renewed").unwrap_or(0),
            backlog_items: num("backlogItems")
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0),
        },
    ))
}

/// Every lift recorded in the coordinator `table`, by period table.
pub async fn read(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<BTreeMap<String, Lift>, aws_sdk_dynamodb::Error> {
    let mut out = BTreeMap::new();
    let mut pages = client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .filter_expression("begins_with(leaseKey, :p)")
        .expression_attribute_values(":p", AttributeValue::S(KEY_PREFIX.into()))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        for item in page?.items() {
            if let Some((t, l)) = from_item(item) {
                out.insert(t, l);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lift_round_trips_through_its_item() {
        let l = Lift {
            write: 350,
            on_demand: false,
            on_demand_refused_ms: Some(1_763_700_000_000),
            reason: LATE_BACKLOG.into(),
            since_ms: 1_763_787_600_123,
            renewed_ms: 1_763_787_660_000,
            backlog_items: 20_000,
        };
        assert_eq!(
            from_item(&item("events_2026-11-19", &l)),
            Some(("events_2026-11-19".to_string(), l))
        );
        let mut other = item(
            "x",
            &Lift {
                write: 1,
                ..l_default()
            },
        );
        other.insert(
            "leaseKey".into(),
            AttributeValue::S("tidemark-worker#w1".into()),
        );
        assert_eq!(from_item(&other), None, "a report is no lift");
    }

    fn l_default() -> Lift {
        Lift {
            on_demand: true,
            on_demand_refused_ms: None,
            write: 1,
            reason: LATE_BACKLOG.into(),
            since_ms: 0,
            renewed_ms: 0,
            backlog_items: 0,
        }
    }

    #[test]
    fn a_lift_drains_the_backlog_in_a_minute_within_the_budget() {
        let p = LiftPolicy::default();
        let b = |wcu| Backlog { items: wcu, wcu };
        assert_eq!(p.needed(b(6_000), 1), 100);
        assert_eq!(p.needed(b(10), 1), 1);
        assert_eq!(p.needed(b(10), 5), 5, "never below the tier");
        assert_eq!(p.needed(b(600_000), 1), 1000, "the budget caps it");
        let off = LiftPolicy { max_wcu: 0, ..p };
        assert_eq!(off.needed(b(6_000), 1), 1, "no lifts: the tier");
    }
}
