//! The pure control law of one endpoint's governor: no I/O, no clock of its
//! own; every method takes `now`. See the crate documentation for the law.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Tuning of the law. The defaults are what the tests simulate.
#[derive(Debug, Clone)]
pub struct Params {
    /// Retries allowed per success in the window (0.1: one retry per ten
    /// successes).
    pub retry_ratio: f64,
    /// Retries allowed per second of the window whatever the successes, so a
    /// quiet endpoint can still retry (the floor).
    pub retry_floor_per_sec: f64,
    /// The window over which successes and retries are counted.
    pub window: Duration,
    /// Consecutive congestion outcomes (timeouts, 5xx, connection errors)
    /// with no success between them that open the breaker.
    pub trip_after: u32,
    /// First open period of the breaker; doubled on each failed probe.
    pub open_base: Duration,
    /// Longest open period.
    pub open_max: Duration,
    /// Smallest retry back-off (the cap of the first jittered delay).
    pub backoff_base: Duration,
    /// Largest retry back-off.
    pub backoff_max: Duration,
    /// Successes needed to lower the back-off level by one step: one success
    /// never resets it.
    pub successes_per_step: u32,
    /// Multiplicative cut of the request rate on congestion.
    pub rate_cut: f64,
    /// Floor of the request rate while limited, requests/s.
    pub min_rate: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            retry_ratio: 0.1,
            retry_floor_per_sec: 1.0,
            window: Duration::from_secs(10),
            trip_after: 5,
            open_base: Duration::from_secs(1),
            open_max: Duration::from_secs(5),
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(20),
            successes_per_step: 8,
            rate_cut: 0.5,
            min_rate: 1.0,
        }
    }
}

/// How a call through the governor ended, as the law needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The endpoint answered in time (success, or an error that is the
    /// caller's business: a 4xx, a failed condition, a missing table).
    Answered,
    /// The endpoint answered with throttling. Neither success nor congestion
    /// for the breaker (throttling is paced per resource by the caller); it
    /// does not earn retry budget.
    Throttled,
    /// A timeout, a 5xx or a connection error: the endpoint is congested.
    Congested,
}

impl Outcome {
    /// The outcome of a call that failed with an error of `class`.
    pub fn of_class(class: tidemark_aws_errors::ErrorClass) -> Self {
        use tidemark_aws_errors::ErrorClass;
        match class {
            ErrorClass::Retry => Outcome::Congested,
            ErrorClass::Throttled => Outcome::Throttled,
            _ => Outcome::Answered,
        }
    }
}

/// The breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Calls flow (subject to the rate limit, if any).
    Closed,
    /// New calls wait until the given instant.
    Open {
        /// End of the open period.
        until: Instant,
    },
    /// One probe call may go; the rest wait for its outcome.
    HalfOpen {
        /// A probe is in flight.
        probing: bool,
    },
}

/// May a call start now?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Yes. `probe` marks the half-open breaker's single probe; report its
    /// outcome (or its abandonment) with the same flag.
    Go {
        /// This call is the breaker's probe.
        probe: bool,
    },
    /// Not before this long has passed.
    Wait(Duration),
}

/// One endpoint's governor state. See the crate documentation.
#[derive(Debug, Clone)]
pub struct Law {
    p: Params,
    state: State,
    /// Congestion outcomes since the last answered call.
    consecutive: u32,
    /// The next open period (doubles on each failed probe).
    open_for: Duration,
    /// When the last probe was admitted: a probe that hangs longer than the
    /// open period does not keep the breaker from probing again.
    probe_sent: Instant,
    /// When the breaker last closed: congestion outcomes of calls sent
    /// before it (hung through a recovery, timed out after it) are old news
    /// and neither trip nor reopen it.
    closed_at: Instant,
    /// Back-off level: the retry delay is capped at base * 2^level.
    level: u32,
    /// Answered calls since the level last changed.
    successes_toward_step: u32,
    /// Per-second buckets of (successes, retries) over the window.
    buckets: VecDeque<(Instant, u32, u32)>,
    /// Request rate limit (requests/s) while congested; None: unlimited.
    limit: Option<f64>,
    tokens: f64,
    last_refill: Instant,
    /// Calls sent before this instant do not cut the rate again.
    cut_epoch: Instant,
    /// Send times of the last second's calls, to know the rate to cut from.
    sent: VecDeque<Instant>,
    /// The request rate when congestion first limited it: where a closing
    /// breaker restarts from (half of it), so recovery takes seconds.
    before_limit: f64,
    trips: u64,
    denied: u64,
}

impl Law {
    /// A governor in the closed state at `now`.
    pub fn new(p: Params, now: Instant) -> Self {
        let open_for = p.open_base;
        Law {
            p,
            state: State::Closed,
            consecutive: 0,
            open_for,
            probe_sent: now,
            closed_at: now,
            level: 0,
            successes_toward_step: 0,
            buckets: VecDeque::new(),
            limit: None,
            tokens: 0.0,
            last_refill: now,
            cut_epoch: now,
            sent: VecDeque::new(),
            before_limit: 0.0,
            trips: 0,
            denied: 0,
        }
    }

    /// The breaker's state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The request rate limit in force, requests/s (None: unlimited).
    pub fn rate_limit(&self) -> Option<f64> {
        self.limit
    }

    /// The back-off level (the retry delay is capped at base * 2^level).
    pub fn backoff_level(&self) -> u32 {
        self.level
    }

    /// Was a call admitted at `sent_at` sent before the breaker last closed?
    /// Its congestion outcome is then old news (see [`Law::on_outcome`]),
    /// and a caller should resend it without a back-off.
    pub fn sent_before_close(&self, sent_at: Instant) -> bool {
        sent_at < self.closed_at
    }

    /// When the breaker last closed (its creation, if it never opened).
    pub fn closed_at(&self) -> Instant {
        self.closed_at
    }

    /// How many times the breaker opened.
    pub fn trips(&self) -> u64 {
        self.trips
    }

    /// How many retries the budget refused.
    pub fn retries_denied(&self) -> u64 {
        self.denied
    }

    /// May a new call start at `now`? On `Go` the call is counted as sent.
    pub fn poll_admit(&mut self, now: Instant) -> Admit {
        self.admit(now, false)
    }

    /// [`Law::poll_admit`] for a call that keeps the caller's own state
    /// (a lease renewal, a checkpoint): it waits for an open breaker like any
    /// call, but not for the rate limit. It still spends a token (the debt
    /// delays the next ordinary calls), so the limit holds over time while
    /// such calls stay a small share of the traffic.
    pub fn poll_admit_priority(&mut self, now: Instant) -> Admit {
        self.admit(now, true)
    }

    fn admit(&mut self, now: Instant, priority: bool) -> Admit {
        match self.state {
            State::Open { until } if now < until => return Admit::Wait(until - now),
            State::Open { .. } => self.state = State::HalfOpen { probing: false },
            State::HalfOpen { probing: true } => {
                // The probe's outcome decides; but a probe that hangs past
                // the open period (sent just before a recovery, answered only
                // after its timeout) must not delay the next one.
                let hung_since = self.probe_sent + self.open_for;
                if now < hung_since {
                    return Admit::Wait((hung_since - now).min(Duration::from_millis(100)));
                }
            }
            State::HalfOpen { probing: false } | State::Closed => {}
        }
        if let Some(limit) = self.limit {
            self.refill(limit, now);
            if priority {
                // At most a second's worth of debt.
                self.tokens = (self.tokens - 1.0).max(-limit);
            } else if self.tokens < 1.0 {
                let wait = (1.0 - self.tokens) / limit;
                return Admit::Wait(Duration::from_secs_f64(wait.max(0.001)));
            } else {
                self.tokens -= 1.0;
            }
        }
        self.sent.push_back(now);
        while self
            .sent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > Duration::from_secs(1))
        {
            self.sent.pop_front();
        }
        if let State::HalfOpen { .. } = self.state {
            self.state = State::HalfOpen { probing: true };
            self.probe_sent = now;
            return Admit::Go { probe: true };
        }
        Admit::Go { probe: false }
    }

    /// A call admitted at `sent_at` ended with `outcome` at `now`.
    pub fn on_outcome(&mut self, outcome: Outcome, probe: bool, sent_at: Instant, now: Instant) {
        match outcome {
            Outcome::Answered => {
                self.consecutive = 0;
                self.bucket(now).1 += 1;
                self.successes_toward_step += 1;
                if self.successes_toward_step >= self.p.successes_per_step {
                    self.successes_toward_step = 0;
                    self.level = self.level.saturating_sub(1);
                    if self.level == 0 {
                        self.open_for = self.p.open_base;
                    }
                }
                if let Some(limit) = self.limit {
                    // Additive per answer: the limit doubles per second while
                    // every call is answered, so recovery takes seconds.
                    let grown = limit + 1.0;
                    // Far above what is sent: the limit no longer limits.
                    if grown > 4.0 * (self.sent.len() as f64).max(self.p.min_rate) {
                        self.limit = None;
                    } else {
                        self.limit = Some(grown);
                    }
                }
                if probe || matches!(self.state, State::HalfOpen { .. }) {
                    if self.state != State::Closed {
                        self.closed_at = now;
                    }
                    self.state = State::Closed;
                    // The backend answers again: restart from half the rate
                    // it served before the trouble, not from the floor.
                    let restart = self.before_limit * self.p.rate_cut;
                    self.limit = self.limit.map(|l| l.max(restart));
                }
            }
            Outcome::Throttled => {
                if probe {
                    // The endpoint answers: close.
                    if self.state != State::Closed {
                        self.closed_at = now;
                    }
                    self.state = State::Closed;
                    self.consecutive = 0;
                }
            }
            Outcome::Congested => {
                if sent_at < self.closed_at {
                    // Sent before the breaker last closed (a call or probe
                    // that hung through the recovery): the answers since
                    // are newer evidence. Reopening on it would stall a
                    // recovered endpoint for a whole open period.
                    return;
                }
                self.consecutive = self.consecutive.saturating_add(1);
                self.level = (self.level + 1).min(self.max_level());
                self.successes_toward_step = 0;
                if sent_at >= self.cut_epoch {
                    // One cut per round of calls: feedback from calls sent
                    // before the last cut is old news.
                    let sent_rate = (self.sent.len() as f64).max(self.p.min_rate);
                    if self.limit.is_none() {
                        self.before_limit = sent_rate;
                    }
                    let base = self.limit.map_or(sent_rate, |l| l.min(sent_rate));
                    self.limit = Some((base * self.p.rate_cut).max(self.p.min_rate));
                    self.tokens = self.tokens.min(1.0);
                    self.cut_epoch = now;
                }
                if probe {
                    self.open_for = (self.open_for * 2).min(self.p.open_max);
                    self.open(now);
                } else if matches!(self.state, State::Closed)
                    && self.consecutive >= self.p.trip_after
                {
                    self.open(now);
                }
            }
        }
    }

    /// A probe was dropped without an outcome (its caller gave up): another
    /// call may probe.
    pub fn on_abandoned(&mut self, probe: bool) {
        if probe && self.state == (State::HalfOpen { probing: true }) {
            self.state = State::HalfOpen { probing: false };
        }
    }

    /// May a failed call be retried at `now`? Counts the retry when it may;
    /// otherwise says how long until the budget allows one.
    pub fn try_retry(&mut self, now: Instant) -> Result<(), Duration> {
        self.expire(now);
        let (successes, retries) = self
            .buckets
            .iter()
            .fold((0u32, 0u32), |(s, r), b| (s + b.1, r + b.2));
        let allowed = self.p.retry_floor_per_sec * self.p.window.as_secs_f64()
            + self.p.retry_ratio * f64::from(successes);
        if f64::from(retries) + 1.0 <= allowed {
            self.bucket(now).2 += 1;
            return Ok(());
        }
        self.denied += 1;
        // The oldest bucket leaving the window frees budget.
        let wait = self.buckets.front().map_or(Duration::from_secs(1), |b| {
            (b.0 + self.p.window).saturating_duration_since(now)
        });
        Err(wait.max(Duration::from_millis(100)))
    }

    /// The cap of the next retry's jittered delay: base * 2^level, capped.
    /// One success does not lower it; `successes_per_step` do, by one step.
    pub fn backoff_cap(&self) -> Duration {
        let factor = 2u32.saturating_pow(self.level);
        self.p
            .backoff_base
            .saturating_mul(factor)
            .min(self.p.backoff_max)
    }

    fn max_level(&self) -> u32 {
        let ratio = self.p.backoff_max.as_secs_f64() / self.p.backoff_base.as_secs_f64().max(1e-6);
        ratio.log2().ceil().max(0.0) as u32
    }

    fn open(&mut self, now: Instant) {
        self.trips += 1;
        self.state = State::Open {
            until: now + self.open_for,
        };
    }

    fn refill(&mut self, limit: f64, now: Instant) {
        let dt = now
            .saturating_duration_since(self.last_refill)
            .as_secs_f64();
        self.last_refill = now;
        // A fifth of a second of burst, at least one call.
        let depth = (limit * 0.2).max(1.0);
        self.tokens = (self.tokens + dt * limit).min(depth);
    }

    fn expire(&mut self, now: Instant) {
        while self
            .buckets
            .front()
            .is_some_and(|b| now.saturating_duration_since(b.0) >= self.p.window)
        {
            self.buckets.pop_front();
        }
    }

    fn bucket(&mut self, now: Instant) -> &mut (Instant, u32, u32) {
        self.expire(now);
        let fresh = self
            .buckets
            .back()
            .is_none_or(|b| now.saturating_duration_since(b.0) >= Duration::from_secs(1));
        if fresh {
            self.buckets.push_back((now, 0, 0));
        }
        // Just pushed or checked present.
        let len = self.buckets.len();
        &mut self.buckets[len - 1]
    }
}
