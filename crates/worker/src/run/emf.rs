//! CloudWatch Embedded Metric Format (EMF) lines on standard output, so the
//! worker's own metrics reach CloudWatch from an ECS task with the `awslogs`
//! log driver alone (no agent, no scraper, no PutMetricData permission).
//!
//! Every `telemetry.emf_interval` (60 s by default) [`Emf::documents`] turns
//! a snapshot of the worker's metrics (`telemetry::MetricsSnapshot`) into
//! EMF documents, one JSON object per line, namespace
//! `telemetry.emf_namespace`, each metric with the dimension `TablePrefix`
//! (the stack's table prefix):
//!
//! | metric | unit | dimension sets | from |
//! |---|---|---|---|
//! | `LagSeconds` | Seconds | [TablePrefix], [TablePrefix, Shard] | `millis_behind_latest` of each shard read since the last flush (`Shard` is `stream/shardId` with `source.streams`) |
//! | `CheckpointLagSeconds`, `CheckpointLagRecords` | Seconds, Count | [TablePrefix], [TablePrefix, Shard] | each held shard's checkpoint lag (age of the oldest record read that the written checkpoint does not cover, and how many there are); a 0 with [TablePrefix] alone while every held shard is checkpointed up to its last record |
//! | `ItemsStored`, `ItemsThrottled` | Count | [TablePrefix], [TablePrefix, Table] | writer counters, per interval (throttled = items DynamoDB returned unprocessed) |
//! | `DeadLetters` | Count | [TablePrefix], [TablePrefix, Reason] | dead letters per interval (0 when none) |
//! | `DeadLetterFallbacks` | Count | [TablePrefix] | dead letters written to the local fallback file, per interval (0 when none) |
//! | `WriterItemsInFlight` | Count | [TablePrefix] | the writer's in-flight items |
//! | `MaintenanceQuotaErrors` | Count | [TablePrefix] | quota refusals of table maintenance, per interval |
//! | `SecondsSinceMaintenance`, `NextTableReady`, `SecondsToNextPeriod` | Seconds, None, Seconds | [TablePrefix] | only from the worker holding the maintenance lease |
//! | `EstimatedCostUSD` | None | [TablePrefix], [TablePrefix, Table] | estimated spend in the interval ([`CostModel`]): on-demand write units this worker consumed × the price; from the maintenance holder, each live table's provisioned capacity × the interval × the price (frozen tables in [TablePrefix] only) |
//!
//! Counters become per-interval counts (the difference since the last
//! flush); gauges are sent as they are. A shard whose lease moved away stops
//! being reported (no stale lag), and so does a worker that lost the
//! maintenance lease.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use tidemark_schema::period::{
    Billing, CapacityTiers, Lifecycle, LifecycleState, Period, TableNaming,
};
use tidemark_schema::sizing::Prices;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::telemetry::{Last, MetricsSnapshot, TypedMetrics, delta};
use crate::metrics as m;
use tidemark_writer::metrics as writer;

/// Turns the worker's metrics into EMF documents, remembering counters
/// between flushes.
pub(crate) struct Emf {
    namespace: String,
    prefix: String,
    period: Period,
    metrics: TypedMetrics,
    in_flight: Box<dyn Fn() -> usize + Send + Sync>,
    started: DateTime<Utc>,
    /// Counter values at the last flush, by name and labels.
    last: Last,
    /// What the tables cost, for `EstimatedCostUSD`.
    cost: Option<CostModel>,
    /// The end of the last interval priced.
    cost_since: DateTime<Utc>,
}

/// How `EstimatedCostUSD` prices the tables: the config's billing, tiers
/// and lifecycle at the planner's list prices. An estimate of what the
/// config asks for: capacity lifts and changes made behind the worker's
/// back are not seen, and storage is not included (`tidemark tables list`
/// prices it).
#[derive(Debug, Clone)]
pub(crate) struct CostModel {
    pub(crate) prices: Prices,
    pub(crate) billing: Billing,
    pub(crate) tiers: CapacityTiers,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) naming: TableNaming,
}

impl CostModel {
    /// The provisioned capacity's spend over `hours` of each live table at
    /// `now_ms`, by table (frozen ones under `None`).
    fn capacity_usd(&self, now_ms: i64, hours: f64) -> BTreeMap<Option<String>, f64> {
        let mut out = BTreeMap::new();
        let p = &self.prices;
        let mut t = self.naming.period.containing(now_ms).next();
        loop {
            let state = self.lifecycle.state_at(&t, now_ms);
            if state == LifecycleState::Expired {
                return out;
            }
            if let Some(c) = self.billing.capacity(&self.tiers, state) {
                let usd = (c.read as f64 * p.provisioned_rcu_hour
                    + c.write as f64 * p.provisioned_wcu_hour)
                    * hours;
                let key = (state != LifecycleState::Frozen).then(|| self.naming.name_of(&t));
                *out.entry(key).or_default() += usd;
            }
            t = t.prev();
        }
    }
}

impl std::fmt::Debug for Emf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emf")
            .field("namespace", &self.namespace)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Emf {
    /// An emitter in `namespace` for the tables `{prefix}_*` of `period`,
    /// reading the worker's `metrics` and the writer's in-flight count.
    pub(crate) fn new(
        namespace: String,
        prefix: String,
        period: Period,
        metrics: TypedMetrics,
        in_flight: impl Fn() -> usize + Send + Sync + 'static,
    ) -> Self {
        Emf {
            namespace,
            prefix,
            period,
            metrics,
            in_flight: Box::new(in_flight),
            started: Utc::now(),
            last: Last::new(),
            cost: None,
            cost_since: Utc::now(),
        }
    }

    /// Reports `EstimatedCostUSD` by `model`, intervals counted from
    /// `since`.
    pub(crate) fn with_cost(mut self, model: CostModel, since: DateTime<Utc>) -> Self {
        self.cost = Some(model);
        self.cost_since = since;
        self
    }

    /// The interval's estimated spend by table (`None`: the frozen tables,
    /// reported for the prefix only).
    fn cost_usd(
        &mut self,
        snap: &MetricsSnapshot,
        now: DateTime<Utc>,
    ) -> BTreeMap<Option<String>, f64> {
        let Some(model) = self.cost.clone() else {
            return BTreeMap::new();
        };
        let hours = ((now - self.cost_since).num_milliseconds().max(0)) as f64 / 3_600_000.0;
        self.cost_since = now;
        // Capacity from one worker only, so the prefix's sum counts it once.
        let mut usd = if snap.maintenance_held == Some(1.0) {
            model.capacity_usd(now.timestamp_millis(), hours)
        } else {
            BTreeMap::new()
        };
        for (table, total) in &snap.consumed_wcu {
            let units = delta(&mut self.last, writer::CONSUMED_WCU, table, *total);
            if matches!(model.billing, Billing::OnDemand { .. }) {
                *usd.entry(Some(table.clone())).or_default() +=
                    units / 1e6 * model.prices.on_demand_write_per_million;
            }
        }
        usd
    }

    /// One EMF document: `metrics` (name, unit, value) with the dimension
    /// `TablePrefix` and, when given, one more.
    fn doc(
        &self,
        now: DateTime<Utc>,
        extra: Option<(&str, &str)>,
        metrics: &[(&str, &str, f64)],
    ) -> Value {
        let mut dims = vec![json!(["TablePrefix"])];
        if let Some((k, _)) = extra {
            dims.push(json!(["TablePrefix", k]));
        }
        let defs: Vec<Value> = metrics
            .iter()
            .map(|(name, unit, _)| json!({"Name": name, "Unit": unit}))
            .collect();
        let mut root = Map::new();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": now.timestamp_millis(),
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    "Dimensions": dims,
                    "Metrics": defs,
                }],
            }),
        );
        root.insert("TablePrefix".into(), json!(self.prefix));
        if let Some((k, v)) = extra {
            root.insert(k.into(), json!(v));
        }
        for (name, _, value) in metrics {
            root.insert((*name).into(), json!(value));
        }
        Value::Object(root)
    }

    /// The documents of one flush at `now`.
    pub(crate) fn documents(&mut self, now: DateTime<Utc>) -> Vec<Value> {
        let snap = self.metrics.snapshot();
        let mut docs = Vec::new();

        // Lag of the shards this worker read since the last flush.
        for (shard, ms) in snap.shard_lags(&mut self.last) {
            docs.push(self.doc(
                now,
                Some(("Shard", &shard)),
                &[("LagSeconds", "Seconds", ms / 1000.0)],
            ));
        }

        // Checkpoint lag of the shards this worker holds, read or not (a
        // reader waiting on back-pressure makes no GetRecords call); a zero
        // while none lags, so the alarm sees data.
        let checkpoint_lags = snap.checkpoint_lags();
        if checkpoint_lags.is_empty() && snap.leases_held > 0.0 {
            docs.push(self.doc(now, None, &[("CheckpointLagSeconds", "Seconds", 0.0)]));
        }
        for (shard, (records, secs)) in checkpoint_lags {
            docs.push(self.doc(
                now,
                Some(("Shard", &shard)),
                &[
                    ("CheckpointLagSeconds", "Seconds", secs),
                    ("CheckpointLagRecords", "Count", records as f64),
                ],
            ));
        }

        // Items stored and throttled per table.
        let mut tables: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for (table, total) in &snap.items_stored {
            let d = delta(&mut self.last, writer::ITEMS_STORED, table, *total);
            tables.entry(table.clone()).or_default().0 += d;
        }
        for (table, total) in &snap.items_unprocessed {
            let d = delta(&mut self.last, writer::UNPROCESSED, table, *total);
            tables.entry(table.clone()).or_default().1 += d;
        }
        for (table, (stored, throttled)) in &tables {
            docs.push(self.doc(
                now,
                Some(("Table", table)),
                &[
                    ("ItemsStored", "Count", *stored),
                    ("ItemsThrottled", "Count", *throttled),
                ],
            ));
        }

        // Estimated spend per table, and the frozen tables' together.
        for (table, usd) in self.cost_usd(&snap, now) {
            let metric = [("EstimatedCostUSD", "None", usd)];
            docs.push(match &table {
                Some(t) => self.doc(now, Some(("Table", t)), &metric),
                None => self.doc(now, None, &metric),
            });
        }

        // Dead letters by reason; a zero when there were none, so the alarm
        // sees data.
        let mut reasons: BTreeMap<String, f64> = BTreeMap::new();
        for (reason, total) in &snap.dead_letters {
            let d = delta(&mut self.last, m::DEAD_LETTERS, reason, *total);
            *reasons.entry(reason.clone()).or_default() += d;
        }
        if reasons.values().all(|v| *v == 0.0) {
            docs.push(self.doc(now, None, &[("DeadLetters", "Count", 0.0)]));
        } else {
            for (reason, n) in reasons.iter().filter(|(_, n)| **n > 0.0) {
                docs.push(self.doc(
                    now,
                    Some(("Reason", reason)),
                    &[("DeadLetters", "Count", *n)],
                ));
            }
        }

        // The worker itself.
        let quota: f64 = snap
            .quota_errors
            .iter()
            .map(|(operation, total)| delta(&mut self.last, m::QUOTA_ERRORS, operation, *total))
            .sum();
        let fallbacks = delta(
            &mut self.last,
            m::DEAD_LETTER_FALLBACKS,
            "",
            snap.dead_letter_fallbacks,
        );
        let mut worker = vec![
            ("DeadLetterFallbacks", "Count", fallbacks),
            ("WriterItemsInFlight", "Count", (self.in_flight)() as f64),
            ("MaintenanceQuotaErrors", "Count", quota),
        ];
        if snap.maintenance_held == Some(1.0) {
            let last = snap
                .maintenance_last_success
                .unwrap_or(self.started.timestamp_millis() as f64 / 1000.0);
            let now_s = now.timestamp_millis() as f64 / 1000.0;
            let next_start = self
                .period
                .containing(now.timestamp_millis())
                .next()
                .start_ms;
            worker.push((
                "SecondsSinceMaintenance",
                "Seconds",
                (now_s - last).max(0.0),
            ));
            worker.push((
                "NextTableReady",
                "None",
                snap.next_table_active.unwrap_or(0.0),
            ));
            worker.push((
                "SecondsToNextPeriod",
                "Seconds",
                ((next_start - now.timestamp_millis()) as f64 / 1000.0).max(0.0),
            ));
        }
        docs.push(self.doc(now, None, &worker));
        docs
    }
}

/// Writes `emf`'s documents to `out` every `interval` until `shutdown`, and
/// once more then (the last interval's counts are not lost).
pub(crate) async fn run(
    mut emf: Emf,
    interval: Duration,
    mut out: impl Write + Send,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    loop {
        let stop = tokio::select! {
            () = shutdown.cancelled() => true,
            _ = tick.tick() => false,
        };
        // One line per document, one write per line: the log driver makes
        // each line a log event of its own.
        for doc in emf.documents(Utc::now()) {
            let line = format!("{doc}\n");
            if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
                warn!(error = %e, "writing EMF metrics failed");
            }
        }
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
