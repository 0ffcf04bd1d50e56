//! Every metric the governor reports, all prefixed `tidemark_governor_`,
//! each with an `endpoint` label, and [`describe`], which gives their HELP
//! texts.

use ::metrics::{describe_counter, describe_gauge};

/// Gauge: the breaker's state (0 closed, 1 half-open, 2 open).
pub const STATE: &str = "tidemark_governor_state";
/// Gauge: the congestion rate limit in requests/s (0: unlimited).
pub const RATE_LIMIT: &str = "tidemark_governor_rate_limit";
/// Gauge: the retry back-off level (the delay cap is base x 2^level).
pub const BACKOFF_LEVEL: &str = "tidemark_governor_backoff_level";
/// Counter: times the breaker opened.
pub const TRIPS: &str = "tidemark_governor_trips_total";
/// Counter: retries the budget refused (the caller waited).
pub const RETRIES_DENIED: &str = "tidemark_governor_retries_denied_total";

/// Registers the HELP text of every metric above.
pub fn describe() {
    describe_gauge!(
        STATE,
        "Circuit breaker state per AWS endpoint: 0 closed, 1 half-open, 2 open (new calls wait)."
    );
    describe_gauge!(
        RATE_LIMIT,
        "Request rate limit per AWS endpoint after congestion, requests/s (0: unlimited)."
    );
    describe_gauge!(
        BACKOFF_LEVEL,
        "Retry back-off level per AWS endpoint (delay cap = base x 2^level)."
    );
    describe_counter!(TRIPS, "Times the circuit breaker opened, per AWS endpoint.");
    describe_counter!(
        RETRIES_DENIED,
        "Retries the retry budget refused (the caller waited), per AWS endpoint."
    );
}
