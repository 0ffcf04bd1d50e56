//! Period tables: one table per UTC period, their names, and how they age.
//!
//! A table is named `{prefix}_{label}`; labels are fixed width and parse back
//! to exactly one period, so a name that is not ours is recognised as such and
//! left alone. A table's [`LifecycleState`] is a pure function of its period,
//! `now` and a [`Lifecycle`] config, so the table maintainer can be tested
//! with any clock.

use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, Utc, Weekday};
use serde::{Deserialize, Serialize};

use crate::timefmt::{self, Civil};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
const WEEK_MS: i64 = 7 * DAY_MS;
/// 1970-01-01 was a Thursday; the first ISO week start after it is 4 days on.
const FIRST_MONDAY_MS: i64 = 4 * DAY_MS;

/// How much time one table covers (UTC).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    /// One hour.
    Hour,
    /// Six hours starting at 00, 06, 12, 18.
    SixHours,
    /// Twelve hours starting at 00 and 12.
    TwelveHours,
    /// One day.
    #[default]
    Day,
    /// One ISO week, Monday to Sunday.
    Week,
    /// One calendar month.
    Month,
    /// One calendar quarter.
    Quarter,
}

impl Period {
    /// Every period, shortest first.
    pub const ALL: [Period; 7] = [
        Period::Hour,
        Period::SixHours,
        Period::TwelveHours,
        Period::Day,
        Period::Week,
        Period::Month,
        Period::Quarter,
    ];

    /// The longest span one period can have, in hours (31-day month, 92-day
    /// quarter): what sizing must plan for.
    pub(crate) const fn max_hours(self) -> u64 {
        match self {
            Period::Hour => 1,
            Period::SixHours => 6,
            Period::TwelveHours => 12,
            Period::Day => 24,
            Period::Week => 168,
            Period::Month => 31 * 24,
            Period::Quarter => 92 * 24,
        }
    }

    /// The snake_case name, as in config.
    pub const fn as_str(self) -> &'static str {
        match self {
            Period::Hour => "hour",
            Period::SixHours => "six_hours",
            Period::TwelveHours => "twelve_hours",
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Quarter => "quarter",
        }
    }

    const fn fixed_len_ms(self) -> Option<i64> {
        match self {
            Period::Hour => Some(HOUR_MS),
            Period::SixHours => Some(6 * HOUR_MS),
            Period::TwelveHours => Some(12 * HOUR_MS),
            Period::Day => Some(DAY_MS),
            Period::Week | Period::Month | Period::Quarter => None,
        }
    }

    /// The period that holds `ts_ms`.
    pub fn containing(self, ts_ms: i64) -> PeriodRef {
        let start_ms = match self {
            Period::Hour | Period::SixHours | Period::TwelveHours | Period::Day => {
                let len = self.fixed_len_ms().unwrap_or(HOUR_MS);
                ts_ms.div_euclid(len) * len
            }
            Period::Week => {
                (ts_ms - FIRST_MONDAY_MS).div_euclid(WEEK_MS) * WEEK_MS + FIRST_MONDAY_MS
            }
            Period::Month | Period::Quarter => {
                let (y, m) = Civil::from_ms(ts_ms).map_or((1970, 1), |c| (c.year, c.month));
                let m = if self == Period::Quarter {
                    (m - 1) / 3 * 3 + 1
                } else {
                    m
                };
                month_start_ms(y, m)
            }
        };
        PeriodRef {
            period: self,
            start_ms,
        }
    }
}

fn month_start_ms(year: i32, month: u32) -> i64 {
    NaiveDate::from_ymd_opt(year, month, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map_or(0, |t| t.and_utc().timestamp_millis())
}

fn add_months(year: i32, month: u32, add: i32) -> (i32, u32) {
    let idx = year * 12 + i32::try_from(month).unwrap_or(1) - 1 + add;
    (
        idx.div_euclid(12),
        u32::try_from(idx.rem_euclid(12)).unwrap_or(0) + 1,
    )
}

/// One concrete period: a kind and its first instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PeriodRef {
    /// The kind of period.
    pub period: Period,
    /// First instant, epoch milliseconds (UTC).
    pub start_ms: i64,
}

impl PeriodRef {
    /// First instant after the period.
    pub fn end_ms(&self) -> i64 {
        match self.period.fixed_len_ms() {
            Some(len) => self.start_ms + len,
            None if self.period == Period::Week => self.start_ms + WEEK_MS,
            None => {
                let c = Civil::from_ms(self.start_ms);
                let (y, m) = c.map_or((1970, 1), |c| (c.year, c.month));
                let step = if self.period == Period::Quarter { 3 } else { 1 };
                let (y, m) = add_months(y, m, step);
                month_start_ms(y, m)
            }
        }
    }

    /// True when `ts_ms` falls in this period.
    pub fn contains(&self, ts_ms: i64) -> bool {
        ts_ms >= self.start_ms && ts_ms < self.end_ms()
    }

    /// The following period.
    pub fn next(&self) -> PeriodRef {
        self.period.containing(self.end_ms())
    }

    /// The preceding period.
    pub fn prev(&self) -> PeriodRef {
        self.period.containing(self.start_ms - 1)
    }

    /// The label used in table names: `2026-11-22T05`, `2026-11-22`,
    /// `2026-W47`, `2026-11`, `2026-Q4`.
    pub fn label(&self) -> String {
        let mut s = String::with_capacity(13);
        self.push_label(&mut s);
        s
    }

    fn push_label(&self, s: &mut String) {
        let Some(c) = Civil::from_ms(self.start_ms) else {
            return;
        };
        match self.period {
            Period::Hour | Period::SixHours | Period::TwelveHours => {
                timefmt::push_date(s, &c);
                s.push('T');
                timefmt::push_num(s, c.hour, 2);
            }
            Period::Day => timefmt::push_date(s, &c),
            Period::Week => {
                let w = NaiveDate::from_ymd_opt(c.year, c.month, c.day).map(|d| d.iso_week());
                let (y, wk) = w.map_or((c.year, 1), |w| (w.year(), w.week()));
                timefmt::push_year(s, y);
                s.push_str("-W");
                timefmt::push_num(s, wk, 2);
            }
            Period::Month => {
                timefmt::push_year(s, c.year);
                s.push('-');
                timefmt::push_num(s, c.month, 2);
            }
            Period::Quarter => {
                timefmt::push_year(s, c.year);
                s.push_str("-Q");
                timefmt::push_num(s, (c.month - 1) / 3 + 1, 1);
            }
        }
    }

    /// Parses a label of `period` back; `None` unless it is exactly the label
    /// of some period (canonical form, aligned start).
    pub(crate) fn parse_label(period: Period, label: &str) -> Option<PeriodRef> {
        let num = |s: &str| -> Option<u32> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let b = label.as_bytes();
        let start_ms = match period {
            Period::Hour | Period::SixHours | Period::TwelveHours => {
                if b.len() != 13 || b[10] != b'T' {
                    return None;
                }
                let d = parse_date(&label[..10])?;
                let h = num(&label[11..])?;
                d.and_hms_opt(h, 0, 0)?.and_utc().timestamp_millis()
            }
            Period::Day => parse_date(label)?
                .and_hms_opt(0, 0, 0)?
                .and_utc()
                .timestamp_millis(),
            Period::Week => {
                if b.len() != 8 || &label[4..6] != "-W" {
                    return None;
                }
                let y = i32::try_from(num(&label[..4])?).ok()?;
                let w = num(&label[6..])?;
                NaiveDate::from_isoywd_opt(y, w, Weekday::Mon)?
                    .and_hms_opt(0, 0, 0)?
                    .and_utc()
                    .timestamp_millis()
            }
            Period::Month => {
                if b.len() != 7 || b[4] != b'-' {
                    return None;
                }
                let y = i32::try_from(num(&label[..4])?).ok()?;
                let m = num(&label[5..])?;
                NaiveDate::from_ymd_opt(y, m, 1)?;
                month_start_ms(y, m)
            }
            Period::Quarter => {
                if b.len() != 7 || &label[4..6] != "-Q" {
                    return None;
                }
                let y = i32::try_from(num(&label[..4])?).ok()?;
                let q = num(&label[6..])?;
                if !(1..=4).contains(&q) {
                    return None;
                }
                month_start_ms(y, (q - 1) * 3 + 1)
            }
        };
        let p = period.containing(start_ms);
        // Round trip: rejects unaligned hours (T05 for six_hours) and any
        // non-canonical spelling.
        (p.start_ms == start_ms && p.label() == label).then_some(p)
    }

    /// The period's first instant as a UTC date-time.
    pub fn start(&self) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp_millis(self.start_ms).unwrap_or_default()
    }
}

fn parse_date(s: &str) -> Option<NaiveDate> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let part = |r: std::ops::Range<usize>| -> Option<u32> {
        let t = &s[r];
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    NaiveDate::from_ymd_opt(i32::try_from(part(0..4)?).ok()?, part(5..7)?, part(8..10)?)
}

/// How tables are named: `{prefix}_{label}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableNaming {
    /// Table name prefix; `[A-Za-z0-9_.-]`, 1 to 200 characters.
    pub prefix: String,
    /// Period each table covers.
    pub period: Period,
}

impl TableNaming {
    /// True when `prefix` gives valid DynamoDB table names for every label
    /// (names are 3 to 255 characters of `[A-Za-z0-9_.-]`).
    pub(crate) fn prefix_is_valid(prefix: &str) -> bool {
        !prefix.is_empty()
            && prefix.len() <= 200
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    }

    /// The table holding events at `ts_ms`.
    pub fn table_for(&self, ts_ms: i64) -> String {
        self.name_of(&self.period.containing(ts_ms))
    }

    /// The table name of a period.
    pub fn name_of(&self, p: &PeriodRef) -> String {
        let mut s = String::with_capacity(self.prefix.len() + 14);
        s.push_str(&self.prefix);
        s.push('_');
        p.push_label(&mut s);
        s
    }

    /// The period of one of our tables; `None` for any other name, which the
    /// maintainer must then leave untouched.
    pub fn parse(&self, name: &str) -> Option<PeriodRef> {
        let label = name.strip_prefix(self.prefix.as_str())?.strip_prefix('_')?;
        PeriodRef::parse_label(self.period, label)
    }
}

/// Where a table is in its life, at some `now`. Exactly one state applies to
/// each table at each instant; over time a table only moves forward through
/// this list (possibly skipping states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleState {
    /// A future period not yet within `prebuild_ahead`: nothing to do yet.
    Future,
    /// A future period within `prebuild_ahead` of its start: create it now.
    Prebuild,
    /// The current period: takes the writes.
    Active,
    /// A period that ended less than `late_arrival_grace` ago (the
    /// previous one, or several when the grace is longer than a period):
    /// keeps its write capacity so late events still land.
    Cooling,
    /// The most recent period past its grace: writes dialled down, reads
    /// kept (the previous period's table once the grace is over; with a
    /// grace of a period or more, the table just past it).
    Cold,
    /// Older periods: minimal capacity.
    Frozen,
    /// Ended more than `retention` ago: delete or archive.
    Expired,
}

/// Timing of the table lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lifecycle {
    /// Create the next table this long before its period starts. Default 15
    /// minutes (seed 002 creates at 23:45).
    #[serde(with = "humantime_serde", default = "default_prebuild_ahead")]
    pub prebuild_ahead: Duration,
    /// Keep the previous table's write capacity this long after the boundary.
    /// Default 15 minutes (seed 002 resizes at 00:15).
    #[serde(with = "humantime_serde", default = "default_grace")]
    pub late_arrival_grace: Duration,
    /// A table expires once its period ended this long ago. Default 30 days
    /// (seed 004's TTL).
    #[serde(with = "humantime_serde", default = "default_retention")]
    pub retention: Duration,
    /// Writes to a table are refused this long before it expires, and it
    /// is exported or deleted no sooner than this long after: every write
    /// accepted lands before the export. Default 10 minutes.
    #[serde(with = "humantime_serde", default = "default_expiry_guard")]
    pub expiry_guard: Duration,
}

pub(crate) const fn default_prebuild_ahead() -> Duration {
    Duration::from_secs(15 * 60)
}

pub(crate) const fn default_grace() -> Duration {
    Duration::from_secs(15 * 60)
}

pub(crate) const fn default_retention() -> Duration {
    Duration::from_secs(30 * 86_400)
}

pub(crate) const fn default_expiry_guard() -> Duration {
    Duration::from_secs(600)
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            prebuild_ahead: default_prebuild_ahead(),
            late_arrival_grace: default_grace(),
            retention: default_retention(),
            expiry_guard: default_expiry_guard(),
        }
    }
}

pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Lifecycle {
    /// The state of `table` at `now`.
    pub fn state(&self, table: &PeriodRef, now: DateTime<Utc>) -> LifecycleState {
        self.state_at(table, now.timestamp_millis())
    }

    /// As [`Lifecycle::state`], with `now` in epoch milliseconds.
    pub fn state_at(&self, table: &PeriodRef, now_ms: i64) -> LifecycleState {
        let end = table.end_ms();
        if now_ms < table.start_ms {
            return if table
                .start_ms
                .saturating_sub(duration_ms(self.prebuild_ahead))
                <= now_ms
            {
                LifecycleState::Prebuild
            } else {
                LifecycleState::Future
            };
        }
        if now_ms < end {
            return LifecycleState::Active;
        }
        // Past periods: expiry wins over the other past states, so a short
        // retention never leaves an expired table holding write capacity.
        if end.saturating_add(duration_ms(self.retention)) <= now_ms {
            return LifecycleState::Expired;
        }
        let grace = duration_ms(self.late_arrival_grace);
        if now_ms < end.saturating_add(grace) {
            return LifecycleState::Cooling;
        }
        // Cold: the previous period after the grace; with a grace of a
        // period or more (no previous table is ever past it), the table
        // just past its grace, until the next one is past its own.
        let next = table.next();
        let cold = table.period.containing(now_ms).prev() == *table
            || (grace >= next.end_ms() - next.start_ms
                && now_ms < next.end_ms().saturating_add(grace));
        if cold {
            LifecycleState::Cold
        } else {
            LifecycleState::Frozen
        }
    }

    /// True when writes to `table` are late at `now_ms`: its period is past
    /// the grace (cold or frozen, scaled down below the active tier).
    pub fn takes_late_data(&self, table: &PeriodRef, now_ms: i64) -> bool {
        matches!(
            self.state_at(table, now_ms),
            LifecycleState::Cold | LifecycleState::Frozen
        )
    }

    /// True when writes to `table` are refused at `now_ms`: it expires
    /// within the expiry guard (or has expired).
    pub fn refuses_writes(&self, table: &PeriodRef, now_ms: i64) -> bool {
        let expiry = table.end_ms().saturating_add(duration_ms(self.retention));
        expiry.saturating_sub(duration_ms(self.expiry_guard)) <= now_ms
    }

    /// True when `table` expired at least the expiry guard ago at `now_ms`:
    /// it may be exported or deleted (every accepted write has landed).
    pub fn past_expiry_guard(&self, table: &PeriodRef, now_ms: i64) -> bool {
        let expiry = table.end_ms().saturating_add(duration_ms(self.retention));
        expiry.saturating_add(duration_ms(self.expiry_guard)) <= now_ms
    }
}

/// Provisioned capacity of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// Read capacity units.
    pub read: u64,
    /// Write capacity units.
    pub write: u64,
}

/// The class of a table: what its storage and its requests cost.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TableClass {
    /// DynamoDB Standard: the cheapest requests.
    #[default]
    Standard,
    /// DynamoDB Standard-Infrequent-Access: storage about 60% cheaper per
    /// GB, requests about 25% dearer; for history that is rarely read.
    StandardInfrequentAccess,
}

impl TableClass {
    /// DynamoDB's name of the class (`STANDARD`, `STANDARD_INFREQUENT_ACCESS`).
    pub const fn as_dynamodb(self) -> &'static str {
        match self {
            TableClass::Standard => "STANDARD",
            TableClass::StandardInfrequentAccess => "STANDARD_INFREQUENT_ACCESS",
        }
    }
}

/// The most request units a second an on-demand table may use
/// (DynamoDB's `OnDemandThroughput`): a ceiling on its spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Ceiling {
    /// Most read request units a second; `None`: not set by the tier.
    pub read: Option<u64>,
    /// Most write request units a second; `None`: not set by the tier.
    pub write: Option<u64>,
}

impl Ceiling {
    /// True when the tier sets neither.
    pub fn is_empty(&self) -> bool {
        self.read.is_none() && self.write.is_none()
    }
}

/// Auto scaling of one side (reads or writes) of a provisioned table:
/// Application Auto Scaling keeps its utilisation near the target between
/// `min` and `max` capacity units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScaleRange {
    /// Fewest capacity units.
    pub min: u64,
    /// Most capacity units.
    pub max: u64,
    /// Consumed capacity to aim for, in percent of the provisioned
    /// capacity (20 to 90). Default 70.
    #[serde(default = "default_target_utilization")]
    pub target_utilization: u8,
}

const fn default_target_utilization() -> u8 {
    70
}

/// Table auto scaling of a tier: reads, writes or both.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct Autoscale {
    /// Read capacity scaling; unset: reads stay at the tier's `read`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<ScaleRange>,
    /// Write capacity scaling; unset: writes stay at the tier's `write`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<ScaleRange>,
}

/// One lifecycle state's table settings: provisioned capacity, the
/// on-demand ceiling, and the table class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// Read capacity units (provisioned billing).
    pub read: u64,
    /// Write capacity units (provisioned billing).
    pub write: u64,
    /// On-demand billing: most read request units a second a table in
    /// this state may use (DynamoDB's `OnDemandThroughput`), set at
    /// creation and restored by every round. Unset: no ceiling is set,
    /// and one set by hand is left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_read_units: Option<u64>,
    /// On-demand billing: most write request units a second, as
    /// `max_read_units`. Writes above it are throttled
    /// (`MaxOnDemandThroughputExceeded`) and paced per table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_write_units: Option<u64>,
    /// The table class of tables in this state: `"standard"` or
    /// `"standard_infrequent_access"`. Set at creation; a table entering
    /// the state is moved to it (DynamoDB allows two class changes per
    /// table in 30 days: Tidemark changes a table's class at most once in
    /// 15 days, and a refused change is not asked again for a day). Unset:
    /// tables are created standard and their class is left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_class: Option<TableClass>,
    /// Provisioned billing: table auto scaling, e.g. `autoscale.write =
    /// { min = 500, max = 4000, target_utilization = 70 }`. A table
    /// entering the state gets an Application Auto Scaling target and
    /// target-tracking policy per side set here (its `read` / `write` is
    /// then only the capacity it is created with), updated when it
    /// changes state, removed when it enters a state without one or
    /// expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<Autoscale>,
}

impl Tier {
    /// The tier's provisioned capacity.
    pub const fn capacity(&self) -> Capacity {
        Capacity {
            read: self.read,
            write: self.write,
        }
    }

    /// The tier's on-demand ceiling.
    pub const fn ceiling(&self) -> Ceiling {
        Ceiling {
            read: self.max_read_units,
            write: self.max_write_units,
        }
    }

    const fn of(read: u64, write: u64) -> Tier {
        Tier {
            read,
            write,
            max_read_units: None,
            max_write_units: None,
            table_class: None,
            autoscale: None,
        }
    }
}

impl From<Capacity> for Tier {
    fn from(c: Capacity) -> Tier {
        Tier::of(c.read, c.write)
    }
}

impl PartialEq<Capacity> for Tier {
    fn eq(&self, other: &Capacity) -> bool {
        self.capacity() == *other
    }
}

impl PartialEq<Tier> for Capacity {
    fn eq(&self, other: &Tier) -> bool {
        *self == other.capacity()
    }
}

/// Table settings per lifecycle state: provisioned capacity as
/// `{ read, write }` units, and optionally an on-demand ceiling
/// (`max_read_units`, `max_write_units`) and a `table_class`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacityTiers {
    /// Prebuilt next table: created at the active capacity, so it takes the full load at the boundary.
    #[serde(default = "tier_active")]
    pub prebuild: Tier,
    /// Current table: 1,000 WCU / 300 RCU.
    #[serde(default = "tier_active")]
    pub active: Tier,
    /// Previous table during the grace: keeps the active capacity.
    #[serde(default = "tier_active")]
    pub cooling: Tier,
    /// Previous table after the grace: 1 WCU / 100 RCU.
    #[serde(default = "tier_cold")]
    pub cold: Tier,
    /// Older tables: 1 WCU / 1 RCU.
    #[serde(default = "tier_frozen")]
    pub frozen: Tier,
}

const fn tier_active() -> Tier {
    Tier::of(300, 1000)
}

const fn tier_cold() -> Tier {
    Tier::of(100, 1)
}

const fn tier_frozen() -> Tier {
    Tier::of(1, 1)
}

impl Default for CapacityTiers {
    fn default() -> Self {
        CapacityTiers {
            prebuild: tier_active(),
            active: tier_active(),
            cooling: tier_active(),
            cold: tier_cold(),
            frozen: tier_frozen(),
        }
    }
}

impl CapacityTiers {
    /// The capacity a table in `state` should have; `None` for states that
    /// have no table to size (future, expired).
    pub(crate) fn for_state(&self, state: LifecycleState) -> Option<Capacity> {
        self.tier(state).map(Tier::capacity)
    }

    /// Every tier with its config name, youngest first.
    pub fn named(&self) -> [(&'static str, &Tier); 5] {
        [
            ("prebuild", &self.prebuild),
            ("active", &self.active),
            ("cooling", &self.cooling),
            ("cold", &self.cold),
            ("frozen", &self.frozen),
        ]
    }

    /// The tier of a table in `state`; `None` for states that have no
    /// table (future, expired).
    pub fn tier(&self, state: LifecycleState) -> Option<&Tier> {
        match state {
            LifecycleState::Future | LifecycleState::Expired => None,
            LifecycleState::Prebuild => Some(&self.prebuild),
            LifecycleState::Active => Some(&self.active),
            LifecycleState::Cooling => Some(&self.cooling),
            LifecycleState::Cold => Some(&self.cold),
            LifecycleState::Frozen => Some(&self.frozen),
        }
    }
}

/// How tables are billed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Billing {
    /// Provisioned capacity, resized per [`CapacityTiers`].
    #[default]
    Provisioned,
    /// Pay per request: no capacity changes.
    OnDemand {
        /// Warm throughput (write units/s) to request for a prebuilt table, so
        /// it can take the full load at the boundary (a new on-demand table
        /// starts at about 4,000 writes/s).
        #[serde(default)]
        warm_write_units: Option<u64>,
    },
}

impl Billing {
    /// Warm write throughput to request for a table in `state`.
    pub fn warm_write_units(&self, state: LifecycleState) -> Option<u64> {
        match (self, state) {
            (Billing::OnDemand { warm_write_units }, LifecycleState::Prebuild) => *warm_write_units,
            _ => None,
        }
    }

    /// The on-demand ceiling of a table in `state`: its tier's, when on
    /// demand (empty when provisioned).
    pub fn ceiling(&self, tiers: &CapacityTiers, state: LifecycleState) -> Ceiling {
        match self {
            Billing::Provisioned => Ceiling::default(),
            Billing::OnDemand { .. } => tiers.tier(state).map(Tier::ceiling).unwrap_or_default(),
        }
    }

    /// Capacity to provision for a table in `state` (none when on demand).
    pub fn capacity(&self, tiers: &CapacityTiers, state: LifecycleState) -> Option<Capacity> {
        match self {
            Billing::Provisioned => tiers.for_state(state),
            Billing::OnDemand { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn labels_match_the_issue_examples() {
        let t = ms("2026-11-22T05:17:00Z");
        let n = |period| {
            TableNaming {
                prefix: "tm".into(),
                period,
            }
            .table_for(t)
        };
        assert_eq!(n(Period::Hour), "tm_2026-11-22T05");
        assert_eq!(n(Period::SixHours), "tm_2026-11-22T00");
        assert_eq!(n(Period::TwelveHours), "tm_2026-11-22T00");
        assert_eq!(n(Period::Day), "tm_2026-11-22");
        assert_eq!(n(Period::Week), "tm_2026-W47");
        assert_eq!(n(Period::Month), "tm_2026-11");
        assert_eq!(n(Period::Quarter), "tm_2026-Q4");
        // ISO week-year differs from the calendar year at the edges.
        let w = TableNaming {
            prefix: "tm".into(),
            period: Period::Week,
        };
        assert_eq!(w.table_for(ms("2027-01-01T00:00:00Z")), "tm_2026-W53");
        assert_eq!(w.table_for(ms("2024-12-30T00:00:00Z")), "tm_2025-W01");
    }

    #[test]
    fn foreign_and_non_canonical_names_are_not_ours() {
        let six = TableNaming {
            prefix: "tm".into(),
            period: Period::SixHours,
        };
        assert!(six.parse("tm_2026-11-22T06").is_some());
        for name in [
            "tm_2026-11-22T05", // not aligned to 6 h
            "tm_2026-11-22",
            "tmx_2026-11-22T06",
            "tm_eu_2026-11-22T06",
            "tm_2026-11-22T06 ",
            "tm_2026-11-22t06",
            "tm_2026-11-22T24",
            "other",
        ] {
            assert_eq!(six.parse(name), None, "{name}");
        }
        let q = TableNaming {
            prefix: "tm".into(),
            period: Period::Quarter,
        };
        assert_eq!(q.parse("tm_2026-Q5"), None);
        let w = TableNaming {
            prefix: "tm".into(),
            period: Period::Week,
        };
        assert_eq!(w.parse("tm_2026-W54"), None);
        assert_eq!(w.parse("tm_2025-W53"), None); // 2025 has 52 ISO weeks
        assert!(w.parse("tm_2026-W53").is_some());
    }

    #[test]
    fn seed_002_daily_lifecycle_and_tiers() {
        let lc = Lifecycle::default();
        let tiers = CapacityTiers::default();
        let day = |d: &str| Period::Day.containing(ms(d));
        let now = ms("2018-10-25T00:05:00Z");
        let today = day("2018-10-25T00:00:00Z");
        let state = |p: &PeriodRef, at: i64| lc.state_at(p, at);
        assert_eq!(state(&today, now), LifecycleState::Active);
        assert_eq!(state(&today.prev(), now), LifecycleState::Cooling);
        assert_eq!(
            state(&today.prev(), ms("2018-10-25T00:15:00Z")),
            LifecycleState::Cold
        );
        assert_eq!(state(&today.prev().prev(), now), LifecycleState::Frozen);
        assert_eq!(state(&today.next(), now), LifecycleState::Future);
        assert_eq!(
            state(&today.next(), ms("2018-10-25T23:45:00Z")),
            LifecycleState::Prebuild
        );
        assert_eq!(
            state(&today.next(), ms("2018-10-25T23:44:59.999Z")),
            LifecycleState::Future
        );
        // Ended 30 days ago exactly: expired.
        assert_eq!(
            state(&day("2018-09-24T00:00:00Z"), now),
            LifecycleState::Expired
        );
        assert_eq!(
            state(&day("2018-09-25T00:00:00Z"), now),
            LifecycleState::Frozen
        );
        assert_eq!(
            tiers.for_state(LifecycleState::Active),
            Some(Capacity {
                read: 300,
                write: 1000
            })
        );
        assert_eq!(
            tiers.for_state(LifecycleState::Cold),
            Some(Capacity {
                read: 100,
                write: 1
            })
        );
        assert_eq!(
            tiers.for_state(LifecycleState::Frozen),
            Some(Capacity { read: 1, write: 1 })
        );
        let od = Billing::OnDemand {
            warm_write_units: Some(12_000),
        };
        assert_eq!(od.capacity(&tiers, LifecycleState::Active), None);
        assert_eq!(od.warm_write_units(LifecycleState::Prebuild), Some(12_000));
        assert_eq!(od.warm_write_units(LifecycleState::Active), None);
    }

    /// A grace longer than a period keeps every table still inside it
    /// Cooling (at the active tier), not only the previous one; the table
    /// just past it is Cold.
    #[test]
    fn a_grace_longer_than_a_period_keeps_every_table_inside_it_cooling() {
        let lc = Lifecycle {
            late_arrival_grace: Duration::from_secs(3 * 3600),
            ..Lifecycle::default()
        };
        let now = ms("2026-11-22T10:30:00Z");
        let hour = |s: &str| Period::Hour.containing(ms(s));
        for (table, want) in [
            ("2026-11-22T10:00:00Z", LifecycleState::Active),
            ("2026-11-22T09:00:00Z", LifecycleState::Cooling),
            ("2026-11-22T08:00:00Z", LifecycleState::Cooling),
            ("2026-11-22T07:00:00Z", LifecycleState::Cooling),
            // Ended 07:00, + 3 h = 10:00 <= now: past its grace, the most
            // recent such table.
            ("2026-11-22T06:00:00Z", LifecycleState::Cold),
            ("2026-11-22T05:00:00Z", LifecycleState::Frozen),
        ] {
            assert_eq!(lc.state_at(&hour(table), now), want, "{table}");
        }
    }

    #[test]
    fn config_serde() {
        let lc: Lifecycle =
            toml::from_str("prebuild_ahead = \"1h\"\nretention = \"90days\"").unwrap();
        assert_eq!(lc.prebuild_ahead, Duration::from_secs(3600));
        assert_eq!(lc.retention, Duration::from_secs(90 * 86_400));
        assert_eq!(lc.late_arrival_grace, default_grace());
        assert!(toml::from_str::<Lifecycle>("retension = \"1d\"").is_err());
        let b: Billing = toml::from_str("mode = \"on_demand\"\nwarm_write_units = 8000").unwrap();
        assert_eq!(
            b,
            Billing::OnDemand {
                warm_write_units: Some(8000)
            }
        );
        let b: Billing = toml::from_str("mode = \"provisioned\"").unwrap();
        assert_eq!(b, Billing::Provisioned);
        let t: CapacityTiers = toml::from_str("cold = { read = 50, write = 5 }").unwrap();
        assert_eq!(t.cold, Capacity { read: 50, write: 5 });
        assert_eq!(t.active, tier_active());
        let t: CapacityTiers = toml::from_str(
            "active = { read = 5, write = 6, max_write_units = 4000 }\n\
             frozen = { read = 1, write = 1, table_class = \"standard_infrequent_access\" }",
        )
        .unwrap();
        assert_eq!(
            t.active.ceiling(),
            Ceiling {
                read: None,
                write: Some(4000)
            }
        );
        assert_eq!(
            t.frozen.table_class,
            Some(TableClass::StandardInfrequentAccess)
        );
        assert_eq!(t.cold.table_class, None);
        assert!(
            toml::from_str::<CapacityTiers>("cold = { read = 1, write = 1, class = \"standard\" }")
                .is_err()
        );
    }

    fn any_period() -> impl Strategy<Value = Period> {
        proptest::sample::select(Period::ALL.to_vec())
    }

    fn any_ts() -> impl Strategy<Value = i64> {
        timefmt::MIN_TIMESTAMP_MS..timefmt::END_TIMESTAMP_MS
    }

    proptest! {
        #[test]
        fn names_round_trip(p in any_period(), ts in any_ts()) {
            let naming = TableNaming { prefix: "tide.mark-1".into(), period: p };
            let name = naming.table_for(ts);
            let parsed = naming.parse(&name).unwrap();
            prop_assert_eq!(parsed, p.containing(ts));
            prop_assert_eq!(naming.name_of(&parsed), name);
            // Another period's parser never claims this name, unless the two
            // periods share a label format and this start is aligned for both.
            for other in Period::ALL {
                if let Some(o) = (TableNaming { prefix: naming.prefix.clone(), period: other }).parse(&naming.table_for(ts)) {
                    prop_assert_eq!(o.start_ms, parsed.start_ms);
                }
            }
        }

        #[test]
        fn every_timestamp_is_in_exactly_one_period(p in any_period(), ts in any_ts()) {
            let cur = p.containing(ts);
            prop_assert!(cur.contains(ts));
            prop_assert!(!cur.prev().contains(ts));
            prop_assert!(!cur.next().contains(ts));
            // Periods tile time: contiguous, and each one's start maps to itself.
            prop_assert_eq!(cur.prev().end_ms(), cur.start_ms);
            prop_assert_eq!(cur.next().start_ms, cur.end_ms());
            prop_assert_eq!(p.containing(cur.start_ms), cur);
            prop_assert_eq!(p.containing(cur.end_ms() - 1), cur);
            prop_assert!(cur.end_ms() - cur.start_ms <= i64::try_from(p.max_hours()).unwrap() * HOUR_MS);
        }

        #[test]
        fn lifecycle_states_never_overlap_and_only_move_forward(
            p in any_period(),
            ts in any_ts(),
            prebuild_min in 0u64..3000,
            grace_min in 0u64..3000,
            retention_h in 1u64..5000,
            steps in proptest::collection::vec(0i64..(40 * DAY_MS), 1..40),
        ) {
            let lc = Lifecycle {
                prebuild_ahead: Duration::from_secs(prebuild_min * 60),
                late_arrival_grace: Duration::from_secs(grace_min * 60),
                retention: Duration::from_secs(retention_h * 3600),
                expiry_guard: default_expiry_guard(),
            };
            let table = p.containing(ts);
            // Walk a clock forward from well before the table's period.
            let mut now = table.start_ms - 3 * DAY_MS * 100;
            let mut last = lc.state_at(&table, now);
            for step in steps {
                now += step;
                let s = lc.state_at(&table, now);
                prop_assert!(s >= last, "{:?} after {:?}", s, last);
                last = s;
                // Exactly one table is active at any instant: the one holding now.
                let cur = p.containing(now);
                prop_assert_eq!(lc.state_at(&cur, now), LifecycleState::Active);
                prop_assert_ne!(lc.state_at(&cur.prev(), now), LifecycleState::Active);
                prop_assert_ne!(lc.state_at(&cur.next(), now), LifecycleState::Active);
                // Each state against an independent description of it.
                use LifecycleState::*;
                let before = now < table.start_ms;
                let after = now >= table.end_ms();
                prop_assert_eq!(matches!(s, Future | Prebuild), before);
                prop_assert_eq!(s == Active, table.contains(now));
                prop_assert_eq!(matches!(s, Cooling | Cold | Frozen | Expired), after);
                prop_assert_eq!(s == Expired, after && now - table.end_ms() >= duration_ms(lc.retention));
                let grace = duration_ms(lc.late_arrival_grace);
                prop_assert_eq!(
                    s == Cooling,
                    after && s != Expired && now < table.end_ms() + grace
                );
                if s == Cold {
                    let next = table.next();
                    prop_assert!(
                        cur.prev() == table
                            || (grace >= next.end_ms() - next.start_ms && now < next.end_ms() + grace)
                    );
                }
            }
        }
    }
}
