//! Per-shard GetRecords pacing: the pure law deciding when the next call may
//! start.
//!
//! Kinesis allows 5 GetRecords calls/s and 2 MiB/s per shard, shared by every
//! consumer of the shard. The worker paces itself so that it never asks for
//! more: call starts are at least 200 ms apart, and after a call that returned
//! `b` bytes the next starts no earlier than `b / 2 MiB/s` after it. A caught-up
//! shard (no records, MillisBehindLatest 0) is polled every `idle_poll`. A
//! ProvisionedThroughputExceeded answer (another consumer shares the shard)
//! backs off exponentially with jitter (backon), reset by the next success.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::time::Instant;

/// At most 5 calls/s per shard.
pub(super) const MIN_CALL_SPACING: Duration = Duration::from_millis(200);
/// 2 MiB/s per shard.
pub(super) const BYTES_PER_SECOND: f64 = 2.0 * 1024.0 * 1024.0;

/// Pacing state of one shard.
#[derive(Debug)]
pub(super) struct Pacer {
    idle_poll: Duration,
    next_allowed: Option<Instant>,
    throttle: Option<ExponentialBackoff>,
}

fn throttle_backoff() -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times()
        .build()
}

impl Pacer {
    /// A pacer polling a caught-up shard every `idle_poll`.
    pub(super) fn new(idle_poll: Duration) -> Self {
        Self {
            idle_poll,
            next_allowed: None,
            throttle: None,
        }
    }

    /// The earliest start of the next call (`None`: now).
    #[cfg(test)]
    pub(super) fn ready_at(&self) -> Option<Instant> {
        self.next_allowed
    }

    /// Waits until the next call may start.
    pub(super) async fn ready(&self) {
        if let Some(t) = self.next_allowed {
            tokio::time::sleep_until(t).await;
        }
    }

    /// A call that started at `started` returned `bytes` in `records`
    /// records, `caught_up` when MillisBehindLatest was 0.
    pub(super) fn on_success(
        &mut self,
        started: Instant,
        bytes: usize,
        records: usize,
        caught_up: bool,
    ) {
        self.throttle = None;
        let mut next = started + MIN_CALL_SPACING;
        next = next.max(started + Duration::from_secs_f64(bytes as f64 / BYTES_PER_SECOND));
        if records == 0 && caught_up {
            next = next.max(started + self.idle_poll);
        }
        self.next_allowed = Some(next);
    }

    /// The call starting at `started` was throttled; returns the delay chosen.
    pub(super) fn on_throttled(&mut self, started: Instant) -> Duration {
        let delay = self
            .throttle
            .get_or_insert_with(throttle_backoff)
            .next()
            .unwrap_or(Duration::from_secs(10));
        self.next_allowed = Some(started + delay.max(MIN_CALL_SPACING));
        delay
    }

    /// Any other failed call: keep the call spacing.
    pub(super) fn on_error(&mut self, started: Instant) {
        self.next_allowed = Some(started + MIN_CALL_SPACING);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a pacer against a simulated shard with a backlog and checks the
    /// limits over every one-second window.
    #[tokio::test(start_paused = true)]
    async fn never_exceeds_five_calls_or_two_mib_per_second() {
        let mut p = Pacer::new(Duration::from_millis(250));
        let start = Instant::now();
        let mut calls: Vec<(Instant, usize)> = Vec::new();
        // Responses of 1 MiB, then small ones, then caught up.
        for i in 0..60 {
            p.ready().await;
            let now = Instant::now();
            let bytes = if i < 20 {
                1024 * 1024
            } else if i < 40 {
                1000
            } else {
                0
            };
            calls.push((now, bytes));
            p.on_success(now, bytes, usize::from(bytes > 0), bytes == 0);
        }
        for (i, (t, _)) in calls.iter().enumerate() {
            let window: Vec<_> = calls[i..]
                .iter()
                .take_while(|(u, _)| u.duration_since(*t) < Duration::from_secs(1))
                .collect();
            assert!(
                window.len() <= 5,
                "{} calls in 1 s from {:?}",
                window.len(),
                *t - start
            );
            // Bytes read in the window, not counting the last call's (its
            // size is unknown until it returns), stay within 2 MiB.
            let bytes: usize = window.iter().rev().skip(1).map(|(_, b)| b).sum();
            assert!(bytes as f64 <= BYTES_PER_SECOND, "{bytes} bytes in 1 s");
        }
        // 1 MiB calls are paced at 2/s, not 5/s.
        let gap = calls[1].0 - calls[0].0;
        assert_eq!(gap, Duration::from_millis(500));
        // Small records: 200 ms spacing; caught up: idle poll.
        assert_eq!(calls[31].0 - calls[30].0, MIN_CALL_SPACING);
        assert_eq!(calls[51].0 - calls[50].0, Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn throttling_backs_off_and_success_resets() {
        let mut p = Pacer::new(Duration::from_millis(250));
        let now = Instant::now();
        let d1 = p.on_throttled(now);
        let d2 = p.on_throttled(now);
        let d3 = p.on_throttled(now);
        assert!(d1 >= Duration::from_millis(500));
        // Jitter may shrink one step, but the trend over three doublings grows.
        assert!(d3 > d1, "{d1:?} {d2:?} {d3:?}");
        assert!(p.ready_at().unwrap() >= now + d3.max(MIN_CALL_SPACING));
        p.on_success(now, 10, 1, false);
        assert_eq!(p.ready_at(), Some(now + MIN_CALL_SPACING));
        let again = p.on_throttled(now);
        assert!(
            again < Duration::from_secs(2),
            "reset after success: {again:?}"
        );
    }
}
