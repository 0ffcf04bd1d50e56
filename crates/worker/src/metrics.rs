//! The worker crate's metric names, in one place, each with its help text.
//!
//! [`describe`] registers the help texts with the installed recorder, so
//! `/metrics` carries a `# HELP` line for each; the telemetry server calls it
//! (through `telemetry::describe_all`) when it installs the recorder.

/// Records received from the sources, before routing.
pub(crate) const RECORDS_READ: &str = "tidemark_records_read_total";
/// Records dead-lettered, by reason.
pub(crate) const DEAD_LETTERS: &str = "tidemark_dead_letters_total";
/// Failed writes to the dead-letter destination (transient ones retried
/// until it answers; refusals split, then sent to the fallback file).
pub(crate) const DEAD_LETTER_WRITE_ERRORS: &str = "tidemark_dead_letter_write_errors_total";
/// Dead letters written to the local fallback file.
pub(crate) const DEAD_LETTER_FALLBACKS: &str = "tidemark_dead_letter_fallbacks_total";
/// Bytes of dead letters queued or being written (bounded).
pub(crate) const DEAD_LETTER_QUEUE_BYTES: &str = "tidemark_dead_letter_queue_bytes";

/// Maintenance actions applied, by action and outcome (`ok`, `error`):
/// each one is drift a round repaired.
pub(crate) const MAINTENANCE_ACTIONS: &str = "tidemark_maintenance_actions_total";
/// DynamoDB quota refusals (LimitExceededException) of table maintenance,
/// by operation: an operator must act.
pub(crate) const QUOTA_ERRORS: &str = "tidemark_maintenance_quota_errors_total";
/// 1 while this worker holds the maintenance lease.
pub(crate) const MAINTENANCE_HELD: &str = "tidemark_maintenance_lease_held";
/// Unix time of this worker's last maintenance round that listed the
/// tables and whose every action succeeded.
pub(crate) const MAINTENANCE_LAST_SUCCESS: &str =
    "tidemark_maintenance_last_success_timestamp_seconds";
/// 1 when the next period's table was ACTIVE at the last round.
pub(crate) const NEXT_TABLE_ACTIVE: &str = "tidemark_maintenance_next_table_active";
/// Maintenance actions skipped because this host's clock disagrees with
/// DynamoDB's, by action.
pub(crate) const CLOCK_SKIPS: &str = "tidemark_maintenance_clock_skips_total";
/// Oversized events' payloads written to S3 (`schema.oversize = "s3"`),
/// by outcome (`stored`, `failed`: dead-lettered as `payload_store_failed`).
pub(crate) const OVERSIZE_PAYLOADS: &str = "tidemark_oversize_payloads_total";
/// Bytes of oversized events' payloads written to S3.
pub(crate) const OVERSIZE_PAYLOAD_BYTES: &str = "tidemark_oversize_payload_bytes_total";
/// Splits this worker recorded (adaptive write sharding).
pub(crate) const SPLITS_MADE: &str = "tidemark_splits_made_total";
/// Entities split in the tables that take writes now.
pub(crate) const SPLIT_ENTITIES: &str = "tidemark_split_entities";
/// Partition keys of a split entity, by table and entity.
pub(crate) const SPLIT_FAN_OUT: &str = "tidemark_split_fan_out";

/// Every metric of this crate, for tests that check each is described.
#[cfg(test)]
pub(crate) const ALL: [&str; 16] = [
    RECORDS_READ,
    DEAD_LETTERS,
    DEAD_LETTER_WRITE_ERRORS,
    DEAD_LETTER_FALLBACKS,
    DEAD_LETTER_QUEUE_BYTES,
    MAINTENANCE_ACTIONS,
    QUOTA_ERRORS,
    MAINTENANCE_HELD,
    MAINTENANCE_LAST_SUCCESS,
    NEXT_TABLE_ACTIVE,
    CLOCK_SKIPS,
    SPLITS_MADE,
    SPLIT_ENTITIES,
    SPLIT_FAN_OUT,
    OVERSIZE_PAYLOADS,
    OVERSIZE_PAYLOAD_BYTES,
];

/// Describes every metric of this crate to the current recorder.
pub(crate) fn describe() {
    metrics::describe_counter!(
        OVERSIZE_PAYLOADS,
        metrics::Unit::Count,
        "Oversized events' payloads written to S3 before their pointer item (schema.oversize = \"s3\"), by outcome: stored, or failed (dead-lettered as payload_store_failed)."
    );
    metrics::describe_counter!(
        OVERSIZE_PAYLOAD_BYTES,
        metrics::Unit::Bytes,
        "Bytes of oversized events' payloads written to S3."
    );
    metrics::describe_counter!(
        SPLITS_MADE,
        metrics::Unit::Count,
        "Splits this worker recorded: an entity held back at its partition's limit got more partition keys (adaptive write sharding)."
    );
    metrics::describe_gauge!(
        SPLIT_ENTITIES,
        metrics::Unit::Count,
        "Entities split in the tables that take writes now."
    );
    metrics::describe_gauge!(
        SPLIT_FAN_OUT,
        metrics::Unit::Count,
        "Partition keys of a split entity, by table and entity."
    );
    metrics::describe_counter!(
        RECORDS_READ,
        metrics::Unit::Count,
        "Records received from the source (Kinesis or SQS), before routing."
    );
    metrics::describe_counter!(
        DEAD_LETTERS,
        metrics::Unit::Count,
        "Records sent to the dead-letter destination, by reason."
    );
    metrics::describe_counter!(
        DEAD_LETTER_WRITE_ERRORS,
        metrics::Unit::Count,
        "Failed writes to the dead-letter destination; transient ones are retried until it answers, refusals split and sent to the fallback file."
    );
    metrics::describe_gauge!(
        DEAD_LETTER_QUEUE_BYTES,
        metrics::Unit::Bytes,
        "Bytes of dead letters queued or being written; at its bound the pipeline waits."
    );
    metrics::describe_counter!(
        DEAD_LETTER_FALLBACKS,
        metrics::Unit::Count,
        "Dead letters the destination refused for good, written to the local fallback file instead."
    );
    metrics::describe_counter!(
        MAINTENANCE_ACTIONS,
        metrics::Unit::Count,
        "Maintenance actions applied (drift repaired), by action and outcome."
    );
    metrics::describe_counter!(
        QUOTA_ERRORS,
        metrics::Unit::Count,
        "DynamoDB quota refusals (LimitExceededException) of table maintenance, by operation."
    );
    metrics::describe_gauge!(
        MAINTENANCE_HELD,
        "1 while this worker holds the maintenance lease."
    );
    metrics::describe_gauge!(
        MAINTENANCE_LAST_SUCCESS,
        metrics::Unit::Seconds,
        "Unix time of this worker's last fully successful maintenance round."
    );
    metrics::describe_counter!(
        CLOCK_SKIPS,
        metrics::Unit::Count,
        "Maintenance actions (lowering a tier, export, delete) skipped because this host's clock disagrees with DynamoDB's, by action."
    );
    metrics::describe_gauge!(
        NEXT_TABLE_ACTIVE,
        "1 when the next period's table was ACTIVE at the last maintenance round."
    );
}
