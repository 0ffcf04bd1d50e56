//! Every metric the writer reports, all prefixed `tidemark_writer_`, and
//! [`describe`], which gives each its HELP text. Counters carry a `table`
//! label (dead letters also `reason`).

use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

/// Counter: items DynamoDB confirmed (one per distinct key written).
pub const ITEMS_STORED: &str = "tidemark_writer_items_stored_total";
/// Counter: BatchWriteItem calls made.
pub const CALLS: &str = "tidemark_writer_calls_total";
/// Counter: calls throttled (exception, or any UnprocessedItems).
pub const THROTTLES: &str = "tidemark_writer_throttled_calls_total";
/// Counter: items returned in UnprocessedItems.
pub const UNPROCESSED: &str = "tidemark_writer_unprocessed_items_total";
/// Counter: items queued again for another attempt (any cause).
pub const RETRIES: &str = "tidemark_writer_retried_items_total";
/// Counter: calls that failed transiently (5xx, timeout, connection).
pub const TRANSIENT_ERRORS: &str = "tidemark_writer_transient_errors_total";
/// Counter: WCU DynamoDB reported consumed (ReturnConsumedCapacity TOTAL).
pub const CONSUMED_WCU: &str = "tidemark_writer_consumed_wcu_total";
/// Gauge: the rate the controller plans, WCU/s.
pub const RATE: &str = "tidemark_writer_rate_wcu";
/// Gauge: partition keys paced on their own (hot keys), per table.
pub const PACED_KEYS: &str = "tidemark_writer_paced_keys";
/// Histogram: BatchWriteItem call latency, seconds.
pub const CALL_SECONDS: &str = "tidemark_writer_call_seconds";
/// Counter: submissions completed as Rejected, label `reason`.
pub const DEAD_LETTERS: &str = "tidemark_writer_dead_letters_total";
/// Gauge: a table's submissions accepted and not completed (its part of the
/// in-flight bound), per table.
pub const TABLE_ITEMS_IN_FLIGHT: &str = "tidemark_writer_table_items_in_flight";
/// Gauge: seconds since a table last accepted a write, while items wait for
/// it (0 when none wait), per table.
pub const SECONDS_SINCE_STORED: &str = "tidemark_writer_table_seconds_since_stored";
/// Counter: late items stored (tables past their late-arrival grace), per table.
pub const LATE_STORED: &str = "tidemark_writer_late_items_stored_total";
/// Gauge: table tasks running (an idle table's task ends).
pub const TABLES: &str = "tidemark_writer_tables";

/// Each metric's kind and HELP text.
const HELP: &[(&str, Kind, &str)] = &[
    (
        ITEMS_STORED,
        Kind::Counter,
        "Items DynamoDB confirmed (one per distinct key written).",
    ),
    (CALLS, Kind::Counter, "BatchWriteItem calls made."),
    (
        THROTTLES,
        Kind::Counter,
        "Calls throttled (exception, or any UnprocessedItems).",
    ),
    (
        UNPROCESSED,
        Kind::Counter,
        "Items returned in UnprocessedItems.",
    ),
    (
        RETRIES,
        Kind::Counter,
        "Items queued again for another attempt (any cause).",
    ),
    (
        TRANSIENT_ERRORS,
        Kind::Counter,
        "Calls that failed transiently (5xx, timeout, connection).",
    ),
    (
        CONSUMED_WCU,
        Kind::Counter,
        "WCU DynamoDB reported consumed (ReturnConsumedCapacity TOTAL).",
    ),
    (RATE, Kind::Gauge, "The rate the controller plans, WCU/s."),
    (
        PACED_KEYS,
        Kind::Gauge,
        "Partition keys throttled lately and paced on their own (hot keys).",
    ),
    (
        CALL_SECONDS,
        Kind::Histogram(Some(Unit::Seconds)),
        "BatchWriteItem call latency, seconds.",
    ),
    (
        DEAD_LETTERS,
        Kind::Counter,
        "Submissions completed as Rejected, label `reason`.",
    ),
    (
        TABLE_ITEMS_IN_FLIGHT,
        Kind::Gauge,
        "A table's submissions accepted and not completed (its share of the in-flight bound in use).",
    ),
    (
        SECONDS_SINCE_STORED,
        Kind::Gauge,
        "Seconds since the table last accepted a write, while items wait for it (0 when none wait).",
    ),
    (
        LATE_STORED,
        Kind::Counter,
        "Late items stored (their period past the late-arrival grace).",
    ),
    (
        TABLES,
        Kind::Gauge,
        "Table tasks running in the writer (an idle table's task ends).",
    ),
];

#[cfg(test)]
const MIN_NAMES: usize = 10;

/// What a metric is, for [`describe`].
#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram(Option<Unit>),
}

/// Describes every metric of this module to the installed recorder (call it
/// once after installing one), so that `/metrics` has a HELP line for each.
pub fn describe() {
    for &(name, kind, help) in HELP {
        match kind {
            Kind::Counter => describe_counter!(name, help),
            Kind::Gauge => describe_gauge!(name, help),
            Kind::Histogram(Some(unit)) => describe_histogram!(name, unit, help),
            Kind::Histogram(None) => describe_histogram!(name, help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{HELP, MIN_NAMES};

    /// Every `&str` constant of this file is a metric name, and each has a
    /// HELP entry (a name added without one fails here).
    #[test]
    fn every_name_is_described() {
        let src = include_str!("metrics.rs");
        let declared: Vec<&str> = src
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub const "))
            .filter_map(|l| l.split_once(": &str = \"").map(|(_, v)| v))
            .filter_map(|v| v.strip_suffix("\";"))
            .collect();
        assert!(declared.len() >= MIN_NAMES, "{declared:?}");
        let mut described: Vec<&str> = HELP.iter().map(|h| h.0).collect();
        assert!(HELP.iter().all(|h| !h.2.is_empty()));
        described.sort_unstable();
        let before = described.len();
        described.dedup();
        assert_eq!(before, described.len(), "a name is described twice");
        let mut declared = declared;
        declared.sort_unstable();
        assert_eq!(described, declared);
    }
}
