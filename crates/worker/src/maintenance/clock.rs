//! DynamoDB's clock, as its answers tell it: an interceptor on the
//! maintenance client reads the `Date` header of every answer, and
//! [`ServerClock`] keeps the latest offset between it and this host's
//! clock. Maintenance checks it before the actions that trust this host's
//! clock (a resize to a lower tier, an export, a delete) and before it
//! creates a missing table, so a host whose clock runs ahead or behind
//! never scales down the current table, deletes a live one, or re-creates
//! an expired one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::primitives::{DateTime as SmithyDateTime, DateTimeFormat};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextRef;
use chrono::{DateTime, Utc};

/// An offset measured from one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offset {
    /// DynamoDB's clock minus this host's, milliseconds (positive: this
    /// host is behind).
    pub(crate) skew_ms: i64,
    /// When it was measured (this host's clock).
    pub(crate) at: DateTime<Utc>,
}

/// The latest offset between DynamoDB's clock and this host's.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerClock {
    latest: Arc<Mutex<Option<Offset>>>,
}

/// The `Date` header has a one-second resolution, and an answer travels
/// for a while: offsets this small are noise.
const RESOLUTION_MS: i64 = 2_000;

impl ServerClock {
    /// Records an answer's `Date`, received at `local`.
    pub(crate) fn observe(&self, server: DateTime<Utc>, local: DateTime<Utc>) {
        let skew_ms = (server - local).num_milliseconds();
        let mut l = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        *l = Some(Offset { skew_ms, at: local });
    }

    /// The latest offset, if any answer carried a `Date` in the last
    /// `within`.
    pub(crate) fn offset(&self, within: Duration) -> Option<Offset> {
        let l = *self.latest.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = chrono::Duration::from_std(within).unwrap_or(chrono::Duration::MAX);
        l.filter(|o| Utc::now() - o.at <= fresh)
    }

    /// DynamoDB's time now, from the latest offset (this host's time when
    /// none is known).
    pub(crate) fn server_now(&self, within: Duration) -> DateTime<Utc> {
        let now = Utc::now();
        match self.offset(within) {
            Some(o) => now + chrono::Duration::milliseconds(o.skew_ms),
            None => now,
        }
    }

    /// The interceptor that feeds this clock.
    pub(crate) fn interceptor(&self) -> DateRecorder {
        DateRecorder(self.clone())
    }
}

/// Why an action that trusts this host's clock is skipped, if it is.
pub(crate) fn skew_refusal(offset: Option<Offset>, bound: Duration) -> Option<String> {
    let bound_ms = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
    match offset {
        None => Some("no answer from DynamoDB carried its clock (Date) lately".into()),
        Some(o) if o.skew_ms.abs() > bound_ms.max(RESOLUTION_MS) => Some(format!(
            "this host's clock is {:.1} s {} DynamoDB's (allowed: {:.0} s, maintenance.max_clock_skew)",
            o.skew_ms.abs() as f64 / 1000.0,
            if o.skew_ms > 0 { "behind" } else { "ahead of" },
            bound.as_secs_f64()
        )),
        Some(_) => None,
    }
}

/// Reads the `Date` header of every answer into a [`ServerClock`].
#[derive(Debug, Clone)]
pub(crate) struct DateRecorder(ServerClock);

impl Intercept for DateRecorder {
    fn name(&self) -> &'static str {
        "tidemark-date-recorder"
    }

    fn read_before_deserialization(
        &self,
        ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let local = Utc::now();
        if let Some(date) = ctx.response().headers().get("date")
            && let Ok(t) = SmithyDateTime::from_str(date, DateTimeFormat::HttpDate)
            && let Some(server) = DateTime::<Utc>::from_timestamp(t.secs(), t.subsec_nanos())
        {
            self.0.observe(server, local);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skew_past_the_bound_refuses_and_an_unknown_clock_too() {
        let c = ServerClock::default();
        let bound = Duration::from_secs(225);
        assert!(skew_refusal(c.offset(Duration::from_secs(60)), bound).is_some());
        let now = Utc::now();
        c.observe(now + chrono::Duration::seconds(1), now);
        assert_eq!(skew_refusal(c.offset(Duration::from_secs(60)), bound), None);
        c.observe(now - chrono::Duration::minutes(20), now);
        let why = skew_refusal(c.offset(Duration::from_secs(60)), bound).unwrap();
        assert!(why.contains("1200.0 s ahead of DynamoDB's"), "{why}");
        let server = c.server_now(Duration::from_secs(60));
        assert!(
            (server - (Utc::now() - chrono::Duration::minutes(20)))
                .num_seconds()
                .abs()
                <= 1
        );
    }
}
