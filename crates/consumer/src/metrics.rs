//! Every metric the consumer reports, all prefixed `tidemark_consumer_`
//! (through the `metrics` facade; install any recorder), and [`describe`],
//! which gives each its HELP text.

use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

/// The Kinesis source's metrics.
pub mod kinesis {
    /// Counter, label `shard`: user records delivered.
    pub const RECORDS_READ: &str = "tidemark_consumer_records_read_total";
    /// Gauge, label `shard`: MillisBehindLatest of the last GetRecords call
    /// (polling) or subscription event (fan-out).
    pub const MILLIS_BEHIND: &str = "tidemark_consumer_millis_behind_latest";
    /// Gauge, label `shard`: records read that the last written
    /// checkpoint does not cover (a restart or lease move reads them again).
    pub const CHECKPOINT_LAG_RECORDS: &str = "tidemark_consumer_checkpoint_lag_records";
    /// Gauge, label `shard`, seconds: how long ago the oldest record the
    /// last written checkpoint does not cover was read (0 when none).
    pub const CHECKPOINT_LAG_SECONDS: &str = "tidemark_consumer_checkpoint_lag_seconds";
    /// Gauge: leases held by this worker.
    pub const LEASES_HELD: &str = "tidemark_consumer_leases_held";
    /// Counter: lease renewals that succeeded (a checkpoint renews too, and
    /// counts under `CHECKPOINTS`).
    pub const LEASE_RENEWALS: &str = "tidemark_consumer_lease_renewals_total";
    /// Gauge: 1 while the last read of the lease table (listing, or the
    /// owner index in leader mode) failed, 0 once one succeeds.
    pub const LEASE_LISTING_FAILING: &str = "tidemark_consumer_lease_listing_failing";
    /// Counter, label `shard`: GetRecords calls.
    pub const GET_RECORDS: &str = "tidemark_consumer_get_records_calls_total";
    /// Counter, label `shard`: GetRecords calls throttled.
    pub(crate) const THROTTLED: &str = "tidemark_consumer_get_records_throttled_total";
    /// Counter, labels `shard`, `result` (`ok`, `lost`, `error`): checkpoint writes.
    pub const CHECKPOINTS: &str = "tidemark_consumer_checkpoint_writes_total";
    /// Counter, label `kind` (`take`, `steal`, `lost`, `release`,
    /// `deleted_finished`, `deleted_garbage`): lease changes.
    pub(crate) const LEASE_CHANGES: &str = "tidemark_consumer_lease_changes_total";
    /// Counter: a reader passed its lease deadline without a renewal and
    /// paused (nothing submitted, nothing checkpointed) until one came.
    pub(crate) const LEASE_PAUSES: &str = "tidemark_consumer_lease_pauses_total";
    /// Counter, label `shard`: fan-out subscriptions renewed (renewal time
    /// reached, or the server ended one).
    pub(crate) const SUBSCRIPTION_RENEWALS: &str = "tidemark_consumer_subscription_renewals_total";
    /// Counter, labels `shard`, `reason` (`in_use`, `throttled`, `error`):
    /// fan-out subscriptions that failed to start or broke off.
    pub(crate) const SUBSCRIPTION_FAILURES: &str = "tidemark_consumer_subscription_failures_total";
    /// Counter, label `shard`: KPL aggregates that failed their MD5 or decoding.
    pub(crate) const CORRUPT_AGGREGATES: &str = "tidemark_consumer_corrupt_aggregates_total";
    /// Gauge, labels `table`, `kind` (`kcl`, `unknown`, `unreadable_lease`):
    /// items of the lease table that are not leases, at the last listing
    /// (never taken, balanced, written or deleted).
    pub(crate) const OTHER_ITEMS: &str = "tidemark_consumer_lease_table_other_items";
}

/// The SQS source's metrics.
pub mod sqs {
    /// Counter, label `format` (`single`, `array`, `ndjson`, `sns`, `undecodable`):
    /// messages received.
    pub const MESSAGES_RECEIVED: &str = "tidemark_consumer_sqs_messages_received_total";
    /// Counter: records (events) handed to the pipeline.
    pub(crate) const RECORDS_DELIVERED: &str = "tidemark_consumer_sqs_records_delivered_total";
    /// Counter: messages deleted after full acknowledgement.
    pub const MESSAGES_DELETED: &str = "tidemark_consumer_sqs_messages_deleted_total";
    /// Counter, label `reason` (`shutdown`, `stale`): messages made visible
    /// again without being deleted.
    pub(crate) const MESSAGES_RELEASED: &str = "tidemark_consumer_sqs_messages_released_total";
    /// Counter: visibility extensions that succeeded.
    pub(crate) const VISIBILITY_EXTENDED: &str =
        "tidemark_consumer_sqs_visibility_extensions_total";
    /// Counter, label `op` (`receive`, `delete`, `change_visibility`):
    /// failed calls or batch entries.
    pub(crate) const CALL_ERRORS: &str = "tidemark_consumer_sqs_call_errors_total";
    /// Gauge: receivers running.
    pub const RECEIVERS: &str = "tidemark_consumer_sqs_receivers";
    /// Gauge: messages received and not yet deleted or released.
    pub const IN_FLIGHT: &str = "tidemark_consumer_sqs_in_flight_messages";
    /// Gauge, seconds: age (receive time minus SentTimestamp) of the oldest
    /// message of the latest receive: how far behind the queue's head the
    /// workers read.
    pub const RECEIVE_AGE: &str = "tidemark_consumer_sqs_receive_age_seconds";
}

/// Each metric's kind and HELP text.
const HELP: &[(&str, Kind, &str)] = &[
    (
        kinesis::RECORDS_READ,
        Kind::Counter,
        "User records delivered (label `shard`).",
    ),
    (
        kinesis::MILLIS_BEHIND,
        Kind::Gauge,
        "MillisBehindLatest of the last GetRecords or fan-out event (label `shard`).",
    ),
    (
        kinesis::CHECKPOINT_LAG_RECORDS,
        Kind::Gauge,
        "Records read that the last written checkpoint does not cover (label `shard`).",
    ),
    (
        kinesis::CHECKPOINT_LAG_SECONDS,
        Kind::Gauge,
        "Seconds since the oldest record the last written checkpoint does not cover was read (label `shard`).",
    ),
    (
        kinesis::LEASES_HELD,
        Kind::Gauge,
        "Leases held by this worker.",
    ),
    (
        kinesis::LEASE_RENEWALS,
        Kind::Counter,
        "Lease renewals that succeeded (checkpoints renew too and count as checkpoint writes).",
    ),
    (
        kinesis::LEASE_LISTING_FAILING,
        Kind::Gauge,
        "1 while the last read of the lease table failed, 0 once one succeeds.",
    ),
    (
        kinesis::GET_RECORDS,
        Kind::Counter,
        "GetRecords calls (label `shard`).",
    ),
    (
        kinesis::THROTTLED,
        Kind::Counter,
        "GetRecords calls throttled (label `shard`).",
    ),
    (
        kinesis::CHECKPOINTS,
        Kind::Counter,
        "Checkpoint writes (labels `shard`, `result` (`ok`, `lost`, `error`)).",
    ),
    (
        kinesis::LEASE_CHANGES,
        Kind::Counter,
        "Lease changes (label `kind` (`take`, `steal`, `lost`, `release`, `deleted_finished`, `deleted_garbage`)).",
    ),
    (
        kinesis::LEASE_PAUSES,
        Kind::Counter,
        "Readers paused at their lease deadline, waiting for a renewal.",
    ),
    (
        kinesis::SUBSCRIPTION_RENEWALS,
        Kind::Counter,
        "Fan-out subscriptions renewed (label `shard`).",
    ),
    (
        kinesis::SUBSCRIPTION_FAILURES,
        Kind::Counter,
        "Fan-out subscriptions that failed to start or broke off (labels `shard`, `reason`).",
    ),
    (
        kinesis::CORRUPT_AGGREGATES,
        Kind::Counter,
        "KPL aggregates that failed their MD5 or decoding (label `shard`).",
    ),
    (
        kinesis::OTHER_ITEMS,
        Kind::Gauge,
        "Items of the lease table that are not leases, at the last listing (labels `table`, `kind` (`kcl`, `unknown`, `unreadable_lease`)); never taken, balanced, written or deleted.",
    ),
    (
        sqs::MESSAGES_RECEIVED,
        Kind::Counter,
        "Messages received (label `format` (`single`, `array`, `ndjson`, `sns`, `undecodable`)).",
    ),
    (
        sqs::RECORDS_DELIVERED,
        Kind::Counter,
        "Records (events) handed to the pipeline.",
    ),
    (
        sqs::MESSAGES_DELETED,
        Kind::Counter,
        "Messages deleted after full acknowledgement.",
    ),
    (
        sqs::MESSAGES_RELEASED,
        Kind::Counter,
        "Messages made visible again without being deleted (label `reason` (`shutdown`, `stale`)).",
    ),
    (
        sqs::VISIBILITY_EXTENDED,
        Kind::Counter,
        "Visibility extensions that succeeded.",
    ),
    (
        sqs::CALL_ERRORS,
        Kind::Counter,
        "Failed calls or batch entries (label `op` (`receive`, `delete`, `change_visibility`)).",
    ),
    (sqs::RECEIVERS, Kind::Gauge, "Receivers running."),
    (
        sqs::IN_FLIGHT,
        Kind::Gauge,
        "Messages received and not yet deleted or released.",
    ),
    (
        sqs::RECEIVE_AGE,
        Kind::Gauge,
        "Age in seconds (receive time minus SentTimestamp) of the oldest message of the latest receive.",
    ),
];

#[cfg(test)]
const MIN_NAMES: usize = 16;

/// What a metric is, for [`describe`].
#[derive(Debug, Clone, Copy)]
// The consumer reports no histogram yet; the variant keeps `describe` whole.
#[allow(dead_code)]
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
        // A declaration rustfmt breaks after `=` is joined back first.
        let src = include_str!("metrics.rs").replace("=\n", "= ");
        let declared: Vec<&str> = src
            .lines()
            .map(str::trim)
            .filter_map(|l| {
                l.strip_prefix("pub const ")
                    .or_else(|| l.strip_prefix("pub(crate) const "))
            })
            .filter_map(|l| l.split_once(": &str = ").map(|(_, v)| v.trim_start()))
            .filter_map(|v| v.strip_prefix('"')?.strip_suffix("\";"))
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
