//! The cost of each sensible setup for a load shape, and the cheapest that
//! meets the load.
//!
//! Setups: the active table provisioned at a fixed capacity (the peak with
//! head-room), provisioned with auto scaling (target tracking at the
//! target utilisation, followed minute by minute over a day), or on demand
//! with a ceiling (`max_write_units`); each with its history (tables past
//! the grace) in the standard or the standard-infrequent-access class.
//! PITR and export at expiry are priced beside them and added to every
//! total when asked for. Reads are those of past periods (history tables),
//! eventually consistent, by query.

use super::spread::round3;
use super::*;

/// Minutes of low utilisation before target tracking scales in (its
/// scale-in alarm: 15 one-minute data points).
const SCALE_IN_MINUTES: u32 = 15;

/// Below the target by this much, target tracking scales in.
const SCALE_IN_MARGIN: f64 = 0.2;

/// Minutes of a day.
const DAY_MINUTES: u32 = 1440;

/// Days in a billing month (730 h).
const DAYS_PER_MONTH: f64 = HOURS_PER_MONTH / 24.0;

/// How the active table takes its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteSetup {
    /// Provisioned at the peak with head-room, all day.
    ProvisionedFixed,
    /// Provisioned, target tracking between the off-peak and the peak.
    ProvisionedAutoscaled,
    /// On demand, with a ceiling at the peak with head-room.
    OnDemand,
}

impl WriteSetup {
    /// The name the plan prints.
    pub const fn as_str(self) -> &'static str {
        match self {
            WriteSetup::ProvisionedFixed => "provisioned_fixed",
            WriteSetup::ProvisionedAutoscaled => "provisioned_autoscaled",
            WriteSetup::OnDemand => "on_demand",
        }
    }

    /// The billing mode it takes.
    pub const fn billing(self) -> BillingMode {
        match self {
            WriteSetup::OnDemand => BillingMode::OnDemand,
            _ => BillingMode::Provisioned,
        }
    }
}

/// The table class of the history tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryClass {
    /// DynamoDB Standard.
    Standard,
    /// DynamoDB Standard-Infrequent-Access: cheaper storage, dearer
    /// requests and capacity.
    StandardInfrequentAccess,
}

impl HistoryClass {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            HistoryClass::Standard => "standard",
            HistoryClass::StandardInfrequentAccess => "standard_infrequent_access",
        }
    }
}

/// The load over a day: the peak for `peak_hours_per_day`, the rest at
/// the base rate, averaging the stated average.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadShape {
    /// Events/s outside the peak.
    pub base_events_per_sec: f64,
    /// Events/s during the peak.
    pub peak_events_per_sec: f64,
    /// Hours a day at the peak.
    pub peak_hours_per_day: f64,
    /// True when the peak duration was not given (taken as 1 h a day).
    pub peak_hours_assumed: bool,
}

/// One setup, priced per month.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetupCost {
    /// How the active table takes its writes.
    pub setup: WriteSetup,
    /// The class of the history tables.
    pub history_class: HistoryClass,
    /// The billing mode.
    pub billing: BillingMode,
    /// Writes: capacity-hours (provisioned, with the prebuilt and cooling
    /// tables' overlap) or write request units (on demand), USD.
    pub writes_usd: f64,
    /// Reads and the capacity every other table holds (provisioned: the
    /// tiers' read and write units; on demand: read request units), USD.
    pub reads_and_history_usd: f64,
    /// Storage, the current period's data in standard and the rest in the
    /// history class, USD.
    pub storage_usd: f64,
    /// PITR and export at expiry when asked for, USD.
    pub extras_usd: f64,
    /// The sum, USD per month.
    pub total_usd: f64,
    /// Whether it takes the load without falling behind past the peak.
    pub meets_load: bool,
    /// Provisioned: the most write capacity it holds.
    pub max_write_capacity: Option<u64>,
    /// Auto scaling: the least write capacity (off-peak).
    pub min_write_capacity: Option<u64>,
    /// On demand: the ceiling (`max_write_units`).
    pub max_write_units: Option<u64>,
    /// Auto scaling: minutes from the peak's start until its writes are
    /// caught up (none when never within the day).
    pub catch_up_minutes: Option<u32>,
    /// Auto scaling: the most write units queued behind the capacity.
    pub backlog_write_units: Option<u64>,
    /// What it does, in a sentence.
    pub note: String,
}

/// The tables alive against the account's quota.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableCount {
    /// Tables alive at once per prefix (retention / period, the current
    /// and the prebuilt one).
    pub per_prefix: u64,
    /// Prefixes (pipelines) in the account and region.
    pub prefixes: u32,
    /// All of them.
    pub total: u64,
    /// The account's quota (`--table-quota`).
    pub quota: u32,
    /// The most DynamoDB allows, even on request.
    pub max_quota: u32,
}

/// The setup chosen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// How the active table takes its writes.
    pub setup: WriteSetup,
    /// The class of the history tables.
    pub history_class: HistoryClass,
    /// Its monthly total, USD.
    pub total_usd: f64,
    /// Why it, in a few sentences.
    pub reason: String,
}

/// Every setup priced, and the choice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pricing {
    /// The prices used.
    pub prices: Prices,
    /// The load over a day.
    pub shape: LoadShape,
    /// Items read a day (history, eventually consistent).
    pub reads_per_day: f64,
    /// Data kept, GB (the current period's included).
    pub stored_gb: f64,
    /// The current period's data, GB (kept in the standard class).
    pub current_gb: f64,
    /// PITR on every table, USD per month.
    pub pitr_usd: f64,
    /// Exporting each table at expiry, USD per month (S3 storage not
    /// included).
    pub export_usd: f64,
    /// Whether PITR is in the totals.
    pub pitr: bool,
    /// Whether export at expiry is in the totals.
    pub export_at_expiry: bool,
    /// Each setup, priced.
    pub setups: Vec<SetupCost>,
    /// The cheapest that meets the load.
    pub choice: Choice,
    /// The tables alive against the quota.
    pub tables: TableCount,
}

/// What auto scaling does over a day.
struct Autoscaled {
    /// Capacity-hours a day.
    wcu_hours: f64,
    peak_cap: u64,
    min_cap: u64,
    catch_up: Option<u32>,
    backlog: f64,
    /// Minutes for capacity to reach the peak.
    ramp: Option<u32>,
}

/// The load shape of `input`.
pub(super) fn shape(input: &SizingInput) -> LoadShape {
    let (a, p) = (input.avg_events_per_sec, input.peak_events_per_sec);
    let (h, assumed) = match input.peak_hours_per_day {
        Some(h) => (h, false),
        None => (1.0, true),
    };
    // A peak that cannot last that long at this average lasts as long as
    // the average allows (nothing off-peak).
    let h = if p > a { h.min(24.0 * a / p) } else { 24.0 };
    let base = if h >= 24.0 {
        p
    } else {
        ((24.0 * a - p * h) / (24.0 - h)).max(0.0)
    };
    LoadShape {
        base_events_per_sec: base,
        peak_events_per_sec: p,
        peak_hours_per_day: h,
        peak_hours_assumed: assumed && p > a,
    }
}

/// Target tracking over the second of two days (the first starts from the
/// off-peak capacity), minute by minute: the writer paces to the capacity,
/// so while it is behind the table runs at 100% and each scale-up
/// multiplies the capacity by at most 1 / target.
fn autoscale(
    base_wcu: f64,
    peak_wcu: f64,
    peak_minutes: u32,
    target: f64,
    lag_minutes: u32,
    layout_cap: u64,
) -> Autoscaled {
    let min_cap = ceil_u64(base_wcu / target).max(1);
    // Never below the capacity the key layout's partitions need.
    let max_cap = ceil_u64(peak_wcu / target).max(layout_cap).max(min_cap);
    let mut cap = min_cap as f64;
    let mut backlog = 0.0_f64; // write units queued
    let (mut high, mut low) = (0u32, 0u32);
    let mut pending: Option<(u32, f64)> = None;
    let mut out = Autoscaled {
        wcu_hours: 0.0,
        peak_cap: max_cap,
        min_cap,
        catch_up: None,
        backlog: 0.0,
        ramp: None,
    };
    let mut behind_since_peak = true;
    for m in 0..2 * DAY_MINUTES {
        let minute = m % DAY_MINUTES;
        let second_day = m >= DAY_MINUTES;
        if let Some((due, new)) = pending
            && m >= due
        {
            cap = new;
            pending = None;
        }
        let incoming = if minute < peak_minutes {
            peak_wcu
        } else {
            base_wcu
        };
        let served = cap.min(incoming + backlog / 60.0);
        backlog = (backlog + (incoming - served) * 60.0).max(0.0);
        let util = served / cap;
        if second_day {
            out.wcu_hours += cap / 60.0;
            out.backlog = out.backlog.max(backlog);
            if minute == 0 {
                behind_since_peak = true;
            }
            if behind_since_peak && backlog < 1e-6 && cap + 1e-9 >= incoming {
                if out.catch_up.is_none() {
                    out.catch_up = Some(minute);
                }
                behind_since_peak = false;
            }
            if out.ramp.is_none() && cap + 1e-9 >= peak_wcu && peak_wcu > base_wcu {
                out.ramp = Some(minute);
            }
        }
        if util > target {
            high += 1;
            low = 0;
        } else if util < target - SCALE_IN_MARGIN {
            low += 1;
            high = 0;
        } else {
            high = 0;
            low = 0;
        }
        // The scale-up alarm takes two data points; the change lands
        // `lag_minutes` after the load rose.
        if pending.is_none() && high >= 2 && cap < max_cap as f64 {
            let new = (served / target).ceil().min(max_cap as f64).max(cap);
            pending = Some((m + lag_minutes.saturating_sub(1).max(1), new));
            high = 0;
        }
        if pending.is_none() && low >= SCALE_IN_MINUTES && cap > min_cap as f64 {
            cap = (served / target).ceil().max(min_cap as f64);
            low = 0;
        }
    }
    if peak_wcu <= base_wcu {
        out.catch_up = Some(0);
    }
    out
}

impl Planner<'_> {
    /// Prices every setup for the recommended layout and picks the
    /// cheapest that meets the load.
    pub(super) fn pricing(&mut self, capacity: u64, period: Period, alive: u64) -> Pricing {
        let i = self.input;
        let pr = i.prices;
        let shape = shape(i);
        let w = self.load.wcu_per_item as f64;
        let base_wcu = shape.base_events_per_sec * w;
        let peak_wcu = self.load.peak_wcu as f64;
        let target = i.autoscale_target;
        let tiers = &i.tiers;
        self.lines.push(format!(
            "load shape = {} events/s for {:.2} h a day{}, {:.1} events/s the rest (average {})",
            rate(shape.peak_events_per_sec),
            shape.peak_hours_per_day,
            if shape.peak_hours_assumed {
                " (assumed: give --peak-hours-per-day)"
            } else {
                ""
            },
            shape.base_events_per_sec,
            rate(i.avg_events_per_sec)
        ));
        if shape.peak_hours_assumed {
            self.warnings.push(
                "the peak's duration is not given: taken as 1 hour a day (give --peak-hours-per-day); it decides between auto scaling and on demand".into(),
            );
        }
        // Storage: the current period's data stays standard, the rest is
        // history.
        let item_stored = i.avg_item_bytes as f64 + ITEM_STORAGE_OVERHEAD_BYTES;
        let retention_s = i.retention.as_secs_f64();
        let stored_gb = i.avg_events_per_sec * item_stored * retention_s / 1e9;
        let current_gb = (i.avg_events_per_sec * item_stored * average_hours(period) * 3600.0
            / 1e9)
            .min(stored_gb);
        let history_gb = stored_gb - current_gb;
        // Reads: eventually consistent queries, half a unit per 4 KB.
        let rru_per_day = i.reads_per_day * i.avg_item_bytes as f64 / 4096.0 * 0.5;
        let rru_month = rru_per_day * DAYS_PER_MONTH;
        let read_rcu = rru_per_day / 86_400.0;
        let history_tables = alive.saturating_sub(2);
        let overlap = 1.0 + OVERLAP_HOURS / average_hours(period);
        let pitr_usd = stored_gb * pr.pitr_gb_month;
        let export_usd =
            i.avg_events_per_sec * item_stored * HOURS_PER_MONTH * 3600.0 / 1e9 * pr.export_gb;
        let extras =
            if i.pitr { pitr_usd } else { 0.0 } + if i.export_at_expiry { export_usd } else { 0.0 };
        self.lines.push(format!(
            "stored = {stored_gb:.1} GB, of which the current {} {current_gb:.1} GB (standard) and history {history_gb:.1} GB; PITR {stored_gb:.1} GB x ${}/GB-month = ${pitr_usd:.2}{}; export at expiry {:.1} GB/month x ${}/GB = ${export_usd:.2}{}",
            period.as_str(),
            pr.pitr_gb_month,
            if i.pitr { " (included)" } else { " (not included: --pitr)" },
            export_usd / pr.export_gb.max(f64::MIN_POSITIVE),
            pr.export_gb,
            if i.export_at_expiry {
                " (included)"
            } else {
                " (not included: --export-at-expiry)"
            }
        ));
        let auto = autoscale(
            base_wcu,
            peak_wcu,
            (shape.peak_hours_per_day * 60.0).round() as u32,
            target,
            i.scale_up_minutes.max(1),
            capacity,
        );
        let peak_minutes = (shape.peak_hours_per_day * 60.0).round() as u32;
        let auto_meets = auto.catch_up.is_some_and(|m| m <= peak_minutes.max(1));
        self.lines.push(format!(
            "auto scaling at {:.0}% = {} to {} WCU, each step at most x{:.2} every {} min: {}; {} WCU-hours a day",
            target * 100.0,
            thousands(auto.min_cap),
            thousands(auto.peak_cap),
            1.0 / target,
            i.scale_up_minutes,
            match (auto.ramp, auto.catch_up) {
                _ if peak_wcu <= base_wcu => "no peak to follow".to_string(),
                (Some(r), Some(c)) => format!(
                    "reaches the peak after {r} min, caught up after {c} min (peak lasts {peak_minutes} min; up to {} write units queued)",
                    thousands(auto.backlog.round() as u64)
                ),
                (None, _) => format!(
                    "never reaches the peak within its {peak_minutes} min (up to {} write units queued)",
                    thousands(auto.backlog.round() as u64)
                ),
                (Some(r), None) => format!(
                    "reaches the peak after {r} min but is not caught up within the day (up to {} write units queued)",
                    thousands(auto.backlog.round() as u64)
                ),
            },
            thousands(auto.wcu_hours.round() as u64)
        ));
        let ceiling = capacity.max(self.load.peak_wcu);
        let mut setups = Vec::new();
        for class in [
            HistoryClass::Standard,
            HistoryClass::StandardInfrequentAccess,
        ] {
            let ia = class == HistoryClass::StandardInfrequentAccess;
            let (h_wcu_h, h_rcu_h, h_rru, h_gb) = if ia {
                (
                    pr.ia_provisioned_wcu_hour,
                    pr.ia_provisioned_rcu_hour,
                    pr.ia_on_demand_read_per_million,
                    pr.ia_storage_gb_month,
                )
            } else {
                (
                    pr.provisioned_wcu_hour,
                    pr.provisioned_rcu_hour,
                    pr.on_demand_read_per_million,
                    pr.storage_gb_month,
                )
            };
            let storage_usd = current_gb * pr.storage_gb_month + history_gb * h_gb;
            // Provisioned: the active tier's reads (and the prebuilt and
            // cooling tables'), one cold table, the frozen rest, and reads
            // beyond the cold tier's, auto scaled at the target.
            let (cold, frozen) = if history_tables == 0 {
                (0.0, 0.0)
            } else {
                (1.0, (history_tables - 1) as f64)
            };
            let extra_rcu = (read_rcu / target - tiers.cold.read as f64).max(0.0);
            let prov_history = HOURS_PER_MONTH
                * (tiers.active.read as f64 * overlap * pr.provisioned_rcu_hour
                    + (cold * tiers.cold.read as f64
                        + frozen * tiers.frozen.read as f64
                        + extra_rcu)
                        * h_rcu_h
                    + (cold * tiers.cold.write as f64 + frozen * tiers.frozen.write as f64)
                        * h_wcu_h);
            let od_history = rru_month / 1e6 * h_rru;
            let fixed_writes =
                capacity as f64 * overlap * HOURS_PER_MONTH * pr.provisioned_wcu_hour;
            let auto_writes = auto.wcu_hours * DAYS_PER_MONTH * overlap * pr.provisioned_wcu_hour;
            let od_writes = i.avg_events_per_sec * w * HOURS_PER_MONTH * 3600.0 / 1e6
                * pr.on_demand_write_per_million;
            let row = |setup, writes: f64, history: f64, meets, note: String| SetupCost {
                setup,
                history_class: class,
                billing: WriteSetup::billing(setup),
                writes_usd: round2(writes),
                reads_and_history_usd: round2(history),
                storage_usd: round2(storage_usd),
                extras_usd: round2(extras),
                total_usd: round2(writes + history + storage_usd + extras),
                meets_load: meets,
                max_write_capacity: None,
                min_write_capacity: None,
                max_write_units: None,
                catch_up_minutes: None,
                backlog_write_units: None,
                note,
            };
            let mut fixed = row(
                WriteSetup::ProvisionedFixed,
                fixed_writes,
                prov_history,
                true,
                format!(
                    "{} WCU all day, {:.0}% used on average",
                    thousands(capacity),
                    100.0 * i.avg_events_per_sec * w / capacity as f64
                ),
            );
            fixed.max_write_capacity = Some(capacity);
            let mut scaled = row(
                WriteSetup::ProvisionedAutoscaled,
                auto_writes,
                prov_history,
                auto_meets,
                if auto.min_cap == auto.peak_cap {
                    format!(
                        "{} WCU at {:.0}% utilisation, nothing to scale",
                        thousands(auto.min_cap),
                        target * 100.0
                    )
                } else if auto_meets {
                    format!(
                        "{} to {} WCU at {:.0}% utilisation",
                        thousands(auto.min_cap),
                        thousands(auto.peak_cap),
                        target * 100.0
                    )
                } else {
                    format!(
                        "falls behind: capacity grows at most x{:.2} every {} min and does not catch up within the {peak_minutes} min peak (up to {} write units queued)",
                        1.0 / target,
                        i.scale_up_minutes,
                        thousands(auto.backlog.round() as u64)
                    )
                },
            );
            scaled.max_write_capacity = Some(auto.peak_cap);
            scaled.min_write_capacity = Some(auto.min_cap);
            scaled.catch_up_minutes = auto.catch_up;
            scaled.backlog_write_units = Some(auto.backlog.round() as u64);
            let mut od = row(
                WriteSetup::OnDemand,
                od_writes,
                od_history,
                true,
                format!(
                    "pays per write, at most {} write units/s{}",
                    thousands(ceiling),
                    if self.load.peak_wcu > ON_DEMAND_INITIAL_WRITES {
                        format!(
                            "; each new table warmed to {} (a new table takes about 4,000 at first)",
                            thousands(ceiling)
                        )
                    } else {
                        String::new()
                    }
                ),
            );
            od.max_write_units = Some(ceiling);
            setups.extend([fixed, scaled, od]);
        }
        for s in &setups {
            self.lines.push(format!(
                "{} + {} history = writes ${:.2} + reads and other tables ${:.2} + storage ${:.2}{} = ${:.2}/month{}",
                s.setup.as_str(),
                s.history_class.as_str(),
                s.writes_usd,
                s.reads_and_history_usd,
                s.storage_usd,
                if extras > 0.0 {
                    format!(" + PITR/export ${:.2}", s.extras_usd)
                } else {
                    String::new()
                },
                s.total_usd,
                if s.meets_load { "" } else { " (does not meet the load)" }
            ));
        }
        let choice = self.choose(&setups, &shape, &auto, peak_minutes);
        let tables = self.table_count(alive);
        Pricing {
            prices: pr,
            shape,
            reads_per_day: i.reads_per_day,
            stored_gb: round3(stored_gb),
            current_gb: round3(current_gb),
            pitr_usd: round2(pitr_usd),
            export_usd: round2(export_usd),
            pitr: i.pitr,
            export_at_expiry: i.export_at_expiry,
            setups,
            choice,
            tables,
        }
    }

    /// The cheapest setup that meets the load (the simpler on a tie), and
    /// why: against the next cheapest write setup and the other class.
    fn choose(
        &self,
        setups: &[SetupCost],
        shape: &LoadShape,
        auto: &Autoscaled,
        peak_minutes: u32,
    ) -> Choice {
        // Fixed capacity always meets the load, so there is a winner.
        let best =
            setups
                .iter()
                .filter(|s| s.meets_load)
                .fold(None::<&SetupCost>, |b, s| match b {
                    Some(b) if b.total_usd <= s.total_usd => Some(b),
                    _ => Some(s),
                });
        let Some(best) = best else {
            return Choice {
                setup: WriteSetup::ProvisionedFixed,
                history_class: HistoryClass::Standard,
                total_usd: 0.0,
                reason: "no setup meets the load".into(),
            };
        };
        let same_class = |setup| {
            setups
                .iter()
                .find(|s| s.setup == setup && s.history_class == best.history_class)
        };
        let other = |setup: WriteSetup| same_class(setup).map(|s| s.total_usd).unwrap_or(0.0);
        let pr = &self.input.prices;
        let w = self.load.wcu_per_item as f64;
        let avg_wcu = self.input.avg_events_per_sec * w;
        // One WCU busy for an hour on demand, against a WCU-hour.
        let od_wcu_hour = 3600.0 / 1e6 * pr.on_demand_write_per_million;
        let break_even = pr.provisioned_wcu_hour / od_wcu_hour;
        let fixed_cap = same_class(WriteSetup::ProvisionedFixed)
            .and_then(|s| s.max_write_capacity)
            .unwrap_or(1);
        let used = avg_wcu / fixed_cap as f64;
        let auto_line = same_class(WriteSetup::ProvisionedAutoscaled);
        let auto_text = match auto_line {
            Some(a) if !a.meets_load => format!(
                "auto scaling cannot follow the peak: capacity grows at most x{:.2} per step ({} min each; a paced writer never shows more than 100% use), so from {} WCU it {} within the {peak_minutes} min peak",
                1.0 / self.input.autoscale_target,
                self.input.scale_up_minutes,
                thousands(auto.min_cap),
                match auto.ramp {
                    Some(r) => format!("needs {r} min to reach the peak and does not catch up"),
                    None => "does not reach the peak".into(),
                }
            ),
            Some(a) => format!("auto scaling costs ${:.2}", a.total_usd),
            None => String::new(),
        };
        let mut reason = match best.setup {
            WriteSetup::ProvisionedFixed => format!(
                "provisioned at {} WCU costs ${:.2}/month, on demand ${:.2}: the load uses {:.0}% of that capacity on average, above the break-even {:.0}% (a WCU-hour ${} against ${:.5} for an hour of on-demand writes); {}",
                thousands(fixed_cap),
                best.total_usd,
                other(WriteSetup::OnDemand),
                100.0 * used,
                100.0 * break_even,
                pr.provisioned_wcu_hour,
                od_wcu_hour,
                if auto_line.is_some_and(|a| a.meets_load) {
                    format!(
                        "auto scaling at {:.0}% holds more than the fixed head-room for this steady load (${:.2})",
                        100.0 * self.input.autoscale_target,
                        other(WriteSetup::ProvisionedAutoscaled)
                    )
                } else {
                    auto_text.clone()
                }
            ),
            WriteSetup::ProvisionedAutoscaled => format!(
                "auto scaling costs ${:.2}/month, fixed at the peak ${:.2}, on demand ${:.2}: the peak lasts {:.2} h a day and the capacity follows it (reached after {} min), falling to {} WCU off-peak where fixed capacity would sit idle; provisioned capacity busy at {:.0}% beats on demand above the break-even {:.0}%",
                best.total_usd,
                other(WriteSetup::ProvisionedFixed),
                other(WriteSetup::OnDemand),
                shape.peak_hours_per_day,
                auto.ramp.unwrap_or(0),
                thousands(auto.min_cap),
                100.0 * self.input.autoscale_target,
                100.0 * break_even
            ),
            WriteSetup::OnDemand => format!(
                "on demand costs ${:.2}/month, fixed at the peak ${:.2}: the load averages {:.0}% of the {} WCU held for its peak, below the break-even {:.0}%, so fixed capacity sits idle most of the day; {}",
                best.total_usd,
                other(WriteSetup::ProvisionedFixed),
                100.0 * used,
                thousands(fixed_cap),
                100.0 * break_even,
                if auto_line.is_some_and(|a| a.meets_load) {
                    format!(
                        "auto scaling costs ${:.2} with its floor and the other tables' capacity",
                        other(WriteSetup::ProvisionedAutoscaled)
                    )
                } else {
                    auto_text
                }
            ),
        };
        let flip = setups
            .iter()
            .find(|s| s.setup == best.setup && s.history_class != best.history_class);
        if let Some(f) = flip.filter(|f| (f.total_usd - best.total_usd).abs() < 0.005) {
            let _ = std::fmt::Write::write_fmt(
                &mut reason,
                format_args!(
                    ". History in {}: {} costs the same here (no history beyond the current period to store for less, nor reads to pay more for)",
                    best.history_class.as_str(),
                    f.history_class.as_str()
                ),
            );
        } else if let Some(f) = flip {
            let _ = std::fmt::Write::write_fmt(
                &mut reason,
                format_args!(
                    ". History in {}: ${:.2} against ${:.2} in {} ({})",
                    best.history_class.as_str(),
                    best.total_usd,
                    f.total_usd,
                    f.history_class.as_str(),
                    match best.history_class {
                        HistoryClass::StandardInfrequentAccess =>
                            "its storage saves more than its dearer reads and capacity cost",
                        HistoryClass::Standard =>
                            "reads or capacity on history cost more in infrequent access than its storage saves",
                    }
                ),
            );
        }
        Choice {
            setup: best.setup,
            history_class: best.history_class,
            total_usd: best.total_usd,
            reason,
        }
    }

    fn table_count(&mut self, per_prefix: u64) -> TableCount {
        let i = self.input;
        let total = per_prefix.saturating_mul(u64::from(i.prefixes));
        self.lines.push(format!(
            "tables = {} per prefix x {} prefixes = {} (quota {}, DynamoDB's most 10,000)",
            thousands(per_prefix),
            i.prefixes,
            thousands(total),
            thousands(u64::from(i.table_quota))
        ));
        if i.prefixes > 1 {
            if total > u64::from(MAX_TABLE_QUOTA) {
                self.warnings.push(format!(
                    "{} tables for {} prefixes exceed the 10,000 tables DynamoDB allows an account in a region, even on request: use fewer prefixes, a longer period or a shorter retention",
                    thousands(total),
                    i.prefixes
                ));
            } else if total > u64::from(i.table_quota) {
                self.warnings.push(format!(
                    "{} tables for {} prefixes exceed the account's quota of {}: ask AWS to raise it (10,000 at most)",
                    thousands(total),
                    i.prefixes,
                    thousands(u64::from(i.table_quota))
                ));
            }
        }
        TableCount {
            per_prefix,
            prefixes: i.prefixes,
            total,
            quota: i.table_quota,
            max_quota: MAX_TABLE_QUOTA,
        }
    }
}

/// A table's estimated monthly cost at `prices`: its provisioned capacity
/// all month (`None`: on demand, requests not included) and its storage,
/// at its class's prices.
pub fn table_monthly_usd(
    prices: &Prices,
    capacity: Option<(u64, u64)>,
    infrequent_access: bool,
    size_bytes: u64,
) -> f64 {
    let (rcu_h, wcu_h, gb_month) = if infrequent_access {
        (
            prices.ia_provisioned_rcu_hour,
            prices.ia_provisioned_wcu_hour,
            prices.ia_storage_gb_month,
        )
    } else {
        (
            prices.provisioned_rcu_hour,
            prices.provisioned_wcu_hour,
            prices.storage_gb_month,
        )
    };
    let capacity_usd = capacity.map_or(0.0, |(read, write)| {
        (read as f64 * rcu_h + write as f64 * wcu_h) * HOURS_PER_MONTH
    });
    round2(capacity_usd + size_bytes as f64 / 1e9 * gb_month)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A steady load needs no scaling; a long peak is reached; a short
    /// burst far above the floor is not.
    #[test]
    fn target_tracking_follows_long_peaks_only() {
        let steady = autoscale(600.0, 600.0, 1440, 0.7, 5, 750);
        assert_eq!(steady.min_cap, 858);
        assert!((steady.wcu_hours - 858.0 * 24.0).abs() < 1e-6);
        assert_eq!(steady.catch_up, Some(0));
        // Four hours at 1,000 from 200: x1.43 a step reaches it in a few
        // steps, and the backlog is gone well within the peak.
        let long = autoscale(200.0, 1000.0, 240, 0.7, 5, 1250);
        let c = long.catch_up.unwrap();
        assert!(c < 240, "{c}");
        assert!(long.ramp.unwrap() <= 30, "{:?}", long.ramp);
        assert_eq!(long.peak_cap, 1429);
        // Capacity is back at the floor off-peak: the day costs far less
        // than the peak capacity all day.
        assert!(long.wcu_hours < 1429.0 * 24.0 * 0.5, "{}", long.wcu_hours);
        // Fifteen minutes at 5,000 from 70: twelve steps needed.
        let burst = autoscale(48.0, 5000.0, 15, 0.7, 5, 6250);
        assert!(burst.catch_up.is_none_or(|c| c > 15));
        assert!(burst.backlog > 50_000.0, "{}", burst.backlog);
    }

    #[test]
    fn a_table_costs_its_capacity_and_storage() {
        let p = Prices::default();
        let active = table_monthly_usd(&p, Some((300, 1000)), false, 2_000_000_000);
        assert!((active - ((300.0 * 0.00013 + 1000.0 * 0.00065) * 730.0 + 0.5)).abs() < 0.01);
        let ia = table_monthly_usd(&p, Some((1, 1)), true, 10_000_000_000);
        assert!((ia - ((0.00016 + 0.00081) * 730.0 + 1.0)).abs() < 0.01);
        assert!((table_monthly_usd(&p, None, false, 4_000_000_000) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_shape_keeps_the_average() {
        let mut i = SizingInput::new(100.0, 5000.0, 180);
        i.peak_hours_per_day = Some(0.25);
        let s = shape(&i);
        let avg = (s.peak_events_per_sec * s.peak_hours_per_day
            + s.base_events_per_sec * (24.0 - s.peak_hours_per_day))
            / 24.0;
        assert!((avg - 100.0).abs() < 1e-9);
        // A peak too long for the average: as long as it allows.
        i.peak_hours_per_day = Some(12.0);
        let s = shape(&i);
        assert!((s.peak_hours_per_day - 0.48).abs() < 1e-9, "{s:?}");
        assert_eq!(s.base_events_per_sec, 0.0);
    }
}
