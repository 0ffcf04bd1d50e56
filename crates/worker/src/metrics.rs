//! The worker crate's metric names, in one place, each with its help text.
//!
//! [`describe`] registers the help texts with the installed recorder, so
//! `/metrics` carries a `# HELP` line for each; the telemetry server calls it
//! (through `telemetry::describe_all`) when it installs the recorder.

/// Records received from the sources, before routing.
pub const RECORDS_READ: &str = "tidemark_records_read_total";
/// Records dead-lettered, by reason.
pub const DEAD_LETTERS: &str = "tidemark_dead_letters_total";
/// Failed writes to the dead-letter destination (retried, split, then sent
/// to the fallback file).
pub const DEAD_LETTER_WRITE_ERRORS: &str = "tidemark_dead_letter_write_errors_total";
/// Dead letters written to the local fallback file.
pub const DEAD_LETTER_FALLBACKS: &str = "tidemark_dead_letter_fallbacks_total";

/// Every metric of this crate, for tests that check each is described.
pub const ALL: [&str; 4] = [
    RECORDS_READ,
    DEAD_LETTERS,
    DEAD_LETTER_WRITE_ERRORS,
    DEAD_LETTER_FALLBACKS,
];

/// Describes every metric of this crate to the current recorder.
pub fn describe() {
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
        "Failed writes to the dead-letter destination; retried a few times, split, then sent to the fallback file."
    );
    metrics::describe_counter!(
        DEAD_LETTER_FALLBACKS,
        metrics::Unit::Count,
        "Dead letters the destination refused for good, written to the local fallback file instead."
    );
}
