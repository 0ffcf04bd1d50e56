//! Writer configuration: typed, documented, rejecting unknown keys.
//!
//! Durations are written as strings with a unit (`linger = "50ms"`,
//! `capacity_refresh = "1m"`), as everywhere else in Tidemark's config.

use std::time::Duration;

use serde::Deserialize;

/// How the writer batches, paces and retries. Every field has a default, so an
/// empty table (`[writer]`) is a valid configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WriterConfig {
    /// Longest time a submission waits for its batch to fill before the batch
    /// is sent anyway. Default `50ms`: long enough to fill 25-item
    /// batches at a few hundred items/s, short next to DynamoDB's latency budget.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub linger: Duration,
    /// Most submissions accepted but not yet completed, across all tables;
    /// `submit` waits beyond it. Default 20,000 (five seconds at 4,000 items/s).
    pub max_in_flight_items: usize,
    /// Most item bytes (DynamoDB sizing) accepted but not yet completed;
    /// `submit` waits beyond it. Default 64 MiB.
    pub max_in_flight_bytes: usize,
    /// Starting write rate, in WCU/s, for an on-demand table that declares no
    /// warm throughput. Default 4,000: what a new on-demand table serves.
    pub on_demand_initial_wcu: f64,
    /// Lowest rate the controller may plan, in WCU/s. Default 5.
    pub min_rate_wcu: f64,
    /// Share of each table's capacity this writer may plan (0 < share <= 1):
    /// the rate never goes above this fraction of the provisioned WCU, or of
    /// an on-demand table's maximum and starting rate. Default 1.
    /// `tidemark migrate backfill` sets its own (`--capacity-share`), so the
    /// copy leaves the rest to live traffic.
    pub capacity_share: f64,
    /// Most BatchWriteItem calls in flight to one table; the adaptive limit
    /// moves between 1 and this. Default 16.
    pub max_concurrency_per_table: usize,
    /// First retry delay before jitter. Default `50ms` (AWS's
    /// guidance for DynamoDB back-off starts at tens of milliseconds).
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub backoff_base: Duration,
    /// Longest retry delay before jitter. Default `5s`.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub backoff_cap: Duration,
    /// How often each table's provisioned capacity is re-read with
    /// DescribeTable. Default `1m`.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub capacity_refresh: Duration,
    /// Deadline of one BatchWriteItem or DescribeTable call;
    /// a call past it counts as a transient error and is retried. Default `10s`.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub call_timeout: Duration,
    /// Pace hot partition keys on their own: items of a key DynamoDB
    /// throttles (UnprocessedItems, or a key-range throttling reason) are held
    /// back with that key's own rate and back-off, while every other key
    /// flows at the table's rate. `false`: every throttle slows the whole
    /// table, as a per-table controller does. Default `true`.
    pub key_pacing: bool,
    /// Highest rate one throttled partition key is paced at, in WCU/s.
    /// Default 1,000: what one DynamoDB partition serves.
    pub max_key_wcu: f64,
    /// Most partition keys per table with a pacing state (each about 100
    /// bytes); states expire after 10 s without a throttle. Default 10,000.
    pub max_paced_keys: usize,
}

const fn default_linger() -> Duration {
    Duration::from_millis(50)
}
const fn default_max_in_flight_items() -> usize {
    20_000
}
const fn default_max_in_flight_bytes() -> usize {
    64 * 1024 * 1024
}
const fn default_on_demand_initial_wcu() -> f64 {
    4_000.0
}
const fn default_min_rate_wcu() -> f64 {
    5.0
}
const fn default_max_concurrency_per_table() -> usize {
    16
}
const fn default_backoff_base() -> Duration {
    Duration::from_millis(50)
}
const fn default_backoff_cap() -> Duration {
    Duration::from_secs(5)
}
const fn default_capacity_refresh() -> Duration {
    Duration::from_secs(60)
}
const fn default_call_timeout() -> Duration {
    Duration::from_secs(10)
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            linger: default_linger(),
            max_in_flight_items: default_max_in_flight_items(),
            max_in_flight_bytes: default_max_in_flight_bytes(),
            on_demand_initial_wcu: default_on_demand_initial_wcu(),
            min_rate_wcu: default_min_rate_wcu(),
            capacity_share: 1.0,
            max_concurrency_per_table: default_max_concurrency_per_table(),
            backoff_base: default_backoff_base(),
            backoff_cap: default_backoff_cap(),
            capacity_refresh: default_capacity_refresh(),
            call_timeout: default_call_timeout(),
            key_pacing: true,
            max_key_wcu: 1_000.0,
            max_paced_keys: 10_000,
        }
    }
}

impl WriterConfig {
    /// Checks the values that would make the writer stall or spin, naming the
    /// key and the fix.
    pub fn validate(&self) -> Result<(), String> {
        match self.problems().into_iter().next() {
            Some((key, problem)) => Err(format!("writer.{key} {problem}")),
            None => Ok(()),
        }
    }

    /// Every problem, as (the key under `writer`, what is wrong), so a
    /// config check names each key.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.max_in_flight_items == 0 {
            out.push(("max_in_flight_items", "must be at least 1".into()));
        }
        if self.max_in_flight_bytes < tidemark_schema::size::MAX_ITEM_BYTES {
            out.push((
                "max_in_flight_bytes",
                format!(
                    "must be at least {} (one maximal item)",
                    tidemark_schema::size::MAX_ITEM_BYTES
                ),
            ));
        }
        if !(self.capacity_share > 0.0 && self.capacity_share <= 1.0) {
            out.push(("capacity_share", "must be > 0 and <= 1".into()));
        }
        if self.max_concurrency_per_table == 0 {
            out.push(("max_concurrency_per_table", "must be at least 1".into()));
        }
        if !(self.min_rate_wcu > 0.0 && self.on_demand_initial_wcu >= self.min_rate_wcu) {
            out.push((
                "min_rate_wcu",
                "must be > 0 and <= writer.on_demand_initial_wcu".into(),
            ));
        }
        if self.backoff_base.is_zero() || self.backoff_cap < self.backoff_base {
            out.push((
                "backoff_base",
                "must be > 0 and <= writer.backoff_cap".into(),
            ));
        }
        if self.call_timeout.is_zero() {
            out.push(("call_timeout", "must be > 0".into()));
        }
        if self.capacity_refresh.is_zero() {
            out.push(("capacity_refresh", "must be > 0".into()));
        }
        if !(self.max_key_wcu.is_finite() && self.max_key_wcu >= 1.0) {
            out.push(("max_key_wcu", "must be at least 1 (WCU/s)".into()));
        }
        if self.max_paced_keys == 0 {
            out.push(("max_paced_keys", "must be at least 1".into()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_takes_defaults_and_durations_take_units() {
        let c: WriterConfig = toml::from_str("").unwrap();
        assert_eq!(c, WriterConfig::default());
        let c: WriterConfig = toml::from_str("linger = \"7ms\"\nbackoff_cap = \"900ms\"").unwrap();
        assert_eq!(c.linger, Duration::from_millis(7));
        assert_eq!(c.backoff_cap, Duration::from_millis(900));
        assert_eq!(c.max_in_flight_items, 20_000);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn unknown_keys_are_rejected_by_name() {
        let err = toml::from_str::<WriterConfig>("lingr = \"7ms\"").unwrap_err();
        assert!(err.to_string().contains("lingr"), "{err}");
    }

    #[test]
    fn validate_names_the_bad_key() {
        let c = WriterConfig {
            max_in_flight_bytes: 10,
            ..WriterConfig::default()
        };
        assert!(c.validate().unwrap_err().contains("max_in_flight_bytes"));
    }

    #[test]
    fn every_problem_is_named_by_its_key() {
        let c = WriterConfig {
            max_in_flight_items: 0,
            capacity_share: 2.0,
            call_timeout: Duration::ZERO,
            ..WriterConfig::default()
        };
        let keys: Vec<&str> = c.problems().iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            ["max_in_flight_items", "capacity_share", "call_timeout"]
        );
        assert!(WriterConfig::default().problems().is_empty());
    }
}
