//! The lease deadline law: timing of lease-table writes and of a holder's
//! lease, all derived from the failover time (pure).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::AwsError;

/// Timing of the lease-table writes and of a holder's lease deadline, all
/// derived from the failover time so that one setting keeps them consistent.
///
/// - `attempt`: one attempt of a conditional write (`failover / 8`, at most
///   10 s). The SDK does not retry these writes: a timed-out attempt may have
///   been applied, and a blind resend would fail its condition.
/// - `writes`: no new write attempt starts later than this after the first
///   (`failover / 5`). With the re-read that may follow, one operation ends
///   within `writes + attempt`, below `failover / 3`, the renewal period.
/// - `margin`: a holder stops submitting records and checkpointing at
///   `send time of its last successful renew + failover - margin`
///   (`failover / 5`), and treats the lease as lost at `+ failover`, the
///   earliest moment another worker may take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// The failover time: a lease whose counter stays put this long is free.
    pub failover: Duration,
    /// Longest wait for one attempt of a lease-table call.
    pub attempt: Duration,
    /// No new write attempt starts later than this after the first.
    pub writes: Duration,
    /// How long before the failover time a holder stops acting.
    pub margin: Duration,
}

/// Where a holder stands with its lease, judged on its own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeasePhase {
    /// Held: records may be submitted and checkpoints written until `until`.
    Live {
        /// The lease deadline.
        until: Instant,
    },
    /// Past the deadline: submit nothing, checkpoint nothing; a renewal sent
    /// before `lost_at` brings the lease back to live.
    Paused {
        /// When the lease counts as lost.
        lost_at: Instant,
    },
    /// Another worker may hold it now: stop for good.
    Lost,
}

impl LeaseTiming {
    /// The timing for `failover`.
    pub fn new(failover: Duration) -> Self {
        Self {
            failover,
            attempt: (failover / 8).min(Duration::from_secs(10)),
            writes: failover / 5,
            margin: failover / 5,
        }
    }

    /// The longest one lease-table operation (writes plus re-read) takes.
    pub(crate) fn op_bound(&self) -> Duration {
        self.writes + self.attempt
    }

    /// The phase at `now` of a lease whose last successful renew (or other
    /// fenced write) was sent at `renewed`. Another worker takes a lease only
    /// after seeing its counter unchanged for `failover` on its own clock,
    /// and it cannot see the new counter before the write was sent, so
    /// `renewed + failover` is the earliest instant the lease can move.
    pub fn phase(&self, renewed: Instant, now: Instant) -> LeasePhase {
        let lost_at = renewed + self.failover;
        let until = lost_at - self.margin;
        if now < until {
            LeasePhase::Live { until }
        } else if now < lost_at {
            LeasePhase::Paused { lost_at }
        } else {
            LeasePhase::Lost
        }
    }
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self::new(crate::kinesis::config::default_failover_time())
    }
}

/// A fenced write that was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The lease counter after the write.
    pub counter: u64,
    /// When the operation's first attempt was sent: the lease is safe until
    /// `sent + failover` (see [`LeaseTiming::phase`]).
    pub sent: Instant,
}

/// Result of a fenced write: `Ok(Some(_))` when applied, `Ok(None)` when the
/// condition failed (someone else moved the lease), `Err` when it is unknown
/// (every attempt failed or timed out within the operation's deadline).
pub(crate) type Fenced = Result<Option<Written>, AwsError>;
