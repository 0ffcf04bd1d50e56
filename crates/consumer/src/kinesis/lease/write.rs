//! The one place lease-table writes are sent and retried: a conditional
//! write with a bounded retry and no blind resends.

use std::future::Future;
use std::time::Duration;

use tidemark_governor::{Governor, Outcome};
use tokio::time::Instant;

use super::timing::LeaseTiming;
use crate::error::{AwsError, ErrorClass};

/// Runs one conditional write with a bounded retry and no blind resends:
/// `attempt` sends it once; after an attempt that may have been applied
/// (timed out, connection lost, 5xx), a failed condition on a later attempt
/// is checked with `reread` (a consistent read, true when the item shows our
/// own write), as the KCL's `renewLease` does. Throttling is retried (the
/// write was not applied); any other error ends the operation. Returns the
/// first attempt's send time when applied.
///
/// This is the one place lease-table writes are sent and retried.
pub(super) async fn write_once<A, AF, R, RF>(
    timing: &LeaseTiming,
    gov: Option<&Governor>,
    op: &'static str,
    mut attempt: A,
    mut reread: R,
) -> Result<Option<Instant>, AwsError>
where
    A: FnMut() -> AF,
    AF: Future<Output = Result<(), AwsError>>,
    R: FnMut() -> RF,
    RF: Future<Output = Result<bool, AwsError>>,
{
    let sent = Instant::now();
    let write_until = sent + timing.writes;
    let hard_stop = write_until + timing.attempt;
    let mut ambiguous = false;
    let mut delay = Duration::from_millis(20);
    loop {
        let now = Instant::now();
        let limit = (now + timing.attempt).min(hard_stop);
        // The endpoint's governor admits the attempt (within the same
        // deadline: an open breaker cannot hold a lease write past it).
        // Lease writes pass its rate limit: starved behind a backlog of
        // bulk writes, they would lose the leases and cause re-reads.
        let permit = match gov {
            Some(g) => match tokio::time::timeout_at(limit, g.admit_priority()).await {
                Ok(p) => Some(p),
                Err(_) => return Err(timed_out(op, "admission (DynamoDB congested)")),
            },
            None => None,
        };
        let result = tokio::time::timeout_at(limit, attempt()).await;
        if let Some(p) = permit {
            p.finish(match &result {
                Err(_) => Outcome::Congested,
                Ok(Err(e)) => Outcome::of_class(e.class),
                Ok(Ok(())) => Outcome::Answered,
            });
        }
        let err = match result {
            Ok(Ok(())) => return Ok(Some(sent)),
            Ok(Err(e)) if e.class == ErrorClass::ConditionFailed => {
                if !ambiguous {
                    return Ok(None);
                }
                return match tokio::time::timeout_at(hard_stop, reread()).await {
                    Ok(Ok(true)) => {
                        tracing::info!(
                            op,
                            "condition failed after an unanswered attempt, but the lease shows our write: accepted"
                        );
                        Ok(Some(sent))
                    }
                    Ok(Ok(false)) => Ok(None),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(timed_out(op, "GetItem (re-read)")),
                };
            }
            Ok(Err(e)) => match e.class {
                ErrorClass::Throttled => e,
                ErrorClass::Retry => {
                    ambiguous = true;
                    e
                }
                _ => return Err(e),
            },
            Err(_) => {
                ambiguous = true;
                timed_out(op, "attempt")
            }
        };
        // Full jitter keeps workers that failed together from retrying together.
        let pause = delay.mul_f64(jitter());
        if Instant::now() + pause >= write_until {
            return Err(err);
        }
        tokio::time::sleep(pause).await;
        delay = (delay * 2).min(timing.attempt);
    }
}

fn timed_out(op: &'static str, what: &str) -> AwsError {
    AwsError {
        op,
        class: ErrorClass::Retry,
        message: format!("{what} timed out"),
    }
}

/// A factor in [0.5, 1.5) from the clock's low bits: enough to spread retries
/// without a random-number dependency.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    0.5 + f64::from(nanos % 1000) / 1000.0
}
