//! The per-table rate control law: pure, no I/O, driven by `now` and events.
//!
//! Three mechanisms work together:
//! - **Pacing**: a token bucket filled at `rate` WCU/s. A call may start when
//!   the balance is not negative; its estimated WCU are then taken (the balance
//!   may go below zero, so a 25-item batch never starves behind a small bucket).
//!   This is what keeps a table at its capacity without bursts: AIMD on
//!   concurrency alone would still fire calls in bursts.
//! - **AIMD on the rate**: while calls succeed cleanly *and* the pacer is what
//!   limits us, the rate grows additively (fast far below the last throttle
//!   level, slowly in a band around it). Throttling (an exception or any
//!   UnprocessedItems) cuts it multiplicatively, or straight to the throughput
//!   the table actually accepted over the last window when that is lower (this
//!   is how an over-estimated start, e.g. an on-demand guess, converges in one
//!   step). Feedback from calls sent before the last cut is ignored, so one
//!   overshoot costs one cut, not one per call in flight.
//! - **Adaptive concurrency**: a limit on calls in flight, +1 per round trip
//!   while saturated, x0.75 on throttles and errors.
//!
//! For provisioned tables the rate is never planned above the provisioned WCU
//! (burst credit would otherwise make the first minutes look better than the
//! steady state and then throttle); on-demand tables are capped only by their
//! declared maximum, if any.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What DescribeTable said about a table's write capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum WriteCapacity {
    /// Provisioned mode: the smallest write capacity of the table and its
    /// global secondary indexes, in WCU/s.
    Provisioned {
        /// Provisioned WCU/s.
        wcu: f64,
    },
    /// On-demand mode.
    OnDemand {
        /// `OnDemandThroughput.MaxWriteRequestUnits`, if the table sets one.
        max_wcu: Option<f64>,
        /// `WarmThroughput.WriteUnitsPerSecond`, if DynamoDB reports it.
        warm_wcu: Option<f64>,
    },
}

/// Tuning of the control law. The defaults are what the simulations in this
/// module's tests are run with.
#[derive(Debug, Clone)]
pub(crate) struct RateParams {
    /// Starting rate of an on-demand table without warm throughput (WCU/s).
    pub on_demand_initial: f64,
    /// Floor of the rate (WCU/s).
    pub min_rate: f64,
    /// Fraction of the table's capacity (and of the on-demand starting
    /// rate) this controller may plan: the rest is left to other writers.
    pub capacity_share: f64,
    /// Ceiling of the concurrency limit.
    pub max_concurrency: usize,
    /// Multiplicative decrease on throttling.
    pub decrease_factor: f64,
    /// Additive increase far from the last throttle level, as a fraction of
    /// the reference capacity per second.
    pub fast_increase: f64,
    /// Additive increase near the last throttle level (probing), same unit.
    pub slow_increase: f64,
    /// The probing band starts at this fraction of the last throttle level.
    pub probe_band: f64,
    /// Token bucket depth, as seconds of the current rate.
    pub burst: Duration,
    /// Window over which the accepted throughput is measured.
    pub accept_window: Duration,
}

impl Default for RateParams {
    fn default() -> Self {
        RateParams {
            on_demand_initial: 4_000.0,
            min_rate: 5.0,
            capacity_share: 1.0,
            max_concurrency: 16,
            decrease_factor: 0.9,
            fast_increase: 0.10,
            slow_increase: 0.01,
            probe_band: 0.97,
            burst: Duration::from_millis(100),
            accept_window: Duration::from_secs(1),
        }
    }
}

/// May a call start now?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Yes: call [`RateController::on_send`] with its WCU.
    Go,
    /// The pacer's balance is negative; retry after this long.
    Wait(Duration),
    /// Too many calls in flight; retry when one completes.
    AtConcurrencyLimit,
}

/// How one BatchWriteItem call ended, as the controller needs to know it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CallFeedback {
    /// When the call was sent (from [`RateController::on_send`]'s caller).
    pub sent_at: Instant,
    /// WCU the table consumed (ConsumedCapacity, or the stored items' estimate).
    pub consumed_wcu: f64,
    /// The call was throttled: ProvisionedThroughputExceeded (or another
    /// throttling error), or it returned any UnprocessedItems.
    pub throttled: bool,
    /// The call failed for another transient reason (5xx, timeout, connection).
    pub failed: bool,
}

/// The control state of one table. See the module documentation for the law.
#[derive(Debug, Clone)]
pub(crate) struct RateController {
    p: RateParams,
    capacity: Option<WriteCapacity>,
    cap: Option<f64>,
    rate: f64,
    ceiling: Option<f64>,
    tokens: f64,
    last_refill: Instant,
    last_increase: Instant,
    last_decrease: Option<Instant>,
    last_paced: Option<Instant>,
    limit: f64,
    in_flight: usize,
    accepted: VecDeque<(Instant, f64)>,
    accepted_sum: f64,
    started: Instant,
}

impl RateController {
    /// A controller for a table whose capacity is not known yet: it plans the
    /// on-demand initial rate until [`on_capacity`](Self::on_capacity).
    pub(crate) fn new(p: RateParams, now: Instant) -> Self {
        let rate = (p.on_demand_initial * p.capacity_share).max(p.min_rate);
        let limit = 4.0_f64.min(p.max_concurrency as f64).max(1.0);
        RateController {
            capacity: None,
            cap: None,
            rate,
            ceiling: None,
            tokens: 0.0,
            last_refill: now,
            last_increase: now,
            last_decrease: None,
            last_paced: None,
            limit,
            in_flight: 0,
            accepted: VecDeque::new(),
            accepted_sum: 0.0,
            started: now,
            p,
        }
    }

    /// The planned rate, WCU/s.
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// The current limit on calls in flight.
    pub(crate) fn concurrency_limit(&self) -> usize {
        self.limit.floor().max(1.0) as usize
    }

    /// New capacity information (first DescribeTable, or a later change).
    /// A provisioned table starts at (or is re-targeted to) its provisioned
    /// WCU; a change of capacity forgets the old throttle level.
    pub(crate) fn on_capacity(&mut self, capacity: WriteCapacity, now: Instant) {
        self.refill(now);
        if self.capacity == Some(capacity) {
            return;
        }
        self.capacity = Some(capacity);
        self.ceiling = None;
        let share = self.p.capacity_share;
        match capacity {
            WriteCapacity::Provisioned { wcu } => {
                self.cap = Some((wcu * share).max(self.p.min_rate));
                self.rate = wcu * share;
            }
            WriteCapacity::OnDemand { max_wcu, warm_wcu } => {
                self.cap = max_wcu.map(|m| m * share);
                self.rate = warm_wcu.unwrap_or(self.p.on_demand_initial) * share;
            }
        }
        self.clamp();
    }

    /// May a call start now?
    pub(crate) fn poll_send(&mut self, now: Instant) -> Admit {
        self.refill(now);
        if self.in_flight >= self.concurrency_limit() {
            return Admit::AtConcurrencyLimit;
        }
        if self.tokens < 0.0 {
            self.last_paced = Some(now);
            // At least 1 ms: timers are that coarse, and a zero wait would
            // spin without letting the clock move.
            let wait = Duration::from_secs_f64(-self.tokens / self.rate);
            return Admit::Wait(wait.max(Duration::from_millis(1)));
        }
        Admit::Go
    }

    /// A call carrying `wcu` estimated units was sent at `now`.
    pub(crate) fn on_send(&mut self, wcu: f64, now: Instant) {
        self.refill(now);
        self.tokens -= wcu;
        self.in_flight += 1;
    }

    /// A call ended.
    pub(crate) fn on_result(&mut self, fb: CallFeedback, now: Instant) {
        self.refill(now);
        let saturated = self.in_flight >= self.concurrency_limit();
        self.in_flight = self.in_flight.saturating_sub(1);
        self.record_accepted(fb.consumed_wcu, now);
        if fb.throttled {
            self.decrease(fb.sent_at, now);
        } else if fb.failed {
            self.limit = (self.limit * 0.75).max(1.0);
        } else {
            self.increase(saturated, now);
        }
    }

    /// Throughput the table accepted over the last window (WCU/s), once a
    /// full window has passed since the controller started.
    pub(crate) fn accepted_rate(&self, now: Instant) -> Option<f64> {
        let w = self.p.accept_window;
        (now.duration_since(self.started) >= w).then(|| self.accepted_sum / w.as_secs_f64())
    }

    /// Has the table accepted at least `fraction` of its known capacity
    /// over the last window? (`false` while the capacity is unknown.)
    pub(crate) fn saturated(&self, now: Instant, fraction: f64) -> bool {
        match (self.cap, self.accepted_rate(now)) {
            (Some(cap), Some(accepted)) => accepted >= fraction * cap,
            _ => false,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now
            .saturating_duration_since(self.last_refill)
            .as_secs_f64();
        self.last_refill = now;
        let depth = (self.rate * self.p.burst.as_secs_f64()).max(1.0);
        self.tokens = (self.tokens + self.rate * dt).min(depth);
    }

    fn record_accepted(&mut self, wcu: f64, now: Instant) {
        if wcu > 0.0 {
            self.accepted.push_back((now, wcu));
            self.accepted_sum += wcu;
        }
        while let Some(&(t, w)) = self.accepted.front() {
            if now.duration_since(t) <= self.p.accept_window {
                break;
            }
            self.accepted.pop_front();
            self.accepted_sum -= w;
        }
    }

    fn increase(&mut self, saturated: bool, now: Instant) {
        let dt = now
            .saturating_duration_since(self.last_increase)
            .min(Duration::from_secs(1))
            .as_secs_f64();
        self.last_increase = now;
        // Only grow while the pacer is what holds us back: a rate nobody uses
        // proves nothing about the table (TCP's congestion-window validation).
        let pacer_bound = self
            .last_paced
            .is_some_and(|t| now.saturating_duration_since(t) <= Duration::from_secs(1));
        if pacer_bound {
            let reference = self.cap.or(self.ceiling).unwrap_or(self.rate);
            let probing = self
                .ceiling
                .is_some_and(|c| self.rate >= self.p.probe_band * c && self.rate <= 1.1 * c);
            let speed = if probing {
                self.p.slow_increase
            } else {
                self.p.fast_increase
            };
            self.rate += speed * reference * dt;
            self.clamp();
        }
        if saturated {
            self.limit = (self.limit + 1.0 / self.limit).min(self.p.max_concurrency as f64);
        }
    }

    fn decrease(&mut self, sent_at: Instant, now: Instant) {
        self.limit = (self.limit * 0.75).max(1.0);
        if self.last_decrease.is_some_and(|d| sent_at < d) {
            return;
        }
        let before = self.rate;
        let mut next = before * self.p.decrease_factor;
        let mut level = before;
        if let Some(accepted) = self.accepted_rate(now) {
            next = next.min(accepted);
            level = level.min(accepted.max(next));
        }
        self.ceiling = Some(level);
        self.rate = next;
        self.clamp();
        // Stop any saved-up burst: the table just said it is full.
        self.tokens = self.tokens.min(0.0);
        self.last_decrease = Some(now);
        self.last_increase = now;
    }

    fn clamp(&mut self) {
        if let Some(cap) = self.cap {
            self.rate = self.rate.min(cap);
        }
        self.rate = self.rate.max(self.p.min_rate);
    }
}

#[cfg(test)]
mod tests;
