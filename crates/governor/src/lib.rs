//! Back-pressure per AWS endpoint: one [`Governor`] per endpoint (DynamoDB,
//! Kinesis), shared by every caller of that endpoint, so that a slow or
//! failing backend sees *less* traffic from Tidemark, not more.
//!
//! Modules:
//! - [`law`]: the pure control law ([`Law`]), driven by `now` and outcomes,
//!   tested in simulated time.
//! - [`metrics`]: metric names and their help texts.
//!
//! The law has three parts:
//! - **Circuit breaker.** `trip_after` congestion outcomes in a row (a
//!   timeout, a 5xx or a connection error; throttling is paced per resource
//!   by the callers and does not count) open the breaker. While it is open,
//!   new calls *wait* (nothing is dropped or queued in the endpoint): the
//!   writer holds its batches, readers hold their GetRecords. When the open
//!   period ends, one probe call goes; if it is answered the breaker closes,
//!   otherwise it opens again for twice as long (1 s, 2 s, 4 s, 5 s). A
//!   probe that hangs longer than the open period does not hold the next
//!   one. A timeout of a call or probe sent before the breaker last closed
//!   (it hung through the recovery) neither trips nor reopens it: the
//!   answers since are newer evidence.
//! - **Congestion rate.** A congestion outcome cuts the endpoint's request
//!   rate to half of what was being sent in the last second (once per round
//!   of calls: outcomes of calls sent before the last cut do not cut again),
//!   down to `min_rate`. Each answered call raises the limit by one request/s
//!   (so it doubles per second while everything is answered) until it is far
//!   above the real demand and is lifted. Timeouts thus cut the rate, not
//!   only the concurrency.
//!   Calls that keep the caller's own state (lease renewals, checkpoints,
//!   acquisitions: [`Governor::admit_priority`]) wait for an open breaker
//!   but not for the rate limit; they spend its tokens all the same.
//! - **Retry budget and back-off.** A retry of a failed call is allowed while
//!   the retries in the last `window` stay under `retry_floor_per_sec x
//!   window + retry_ratio x successes` (10 per 10 s plus 10% of successes by
//!   default); otherwise the caller waits and asks again. The retry delay's
//!   cap grows one step (x2) per congestion outcome and comes down one step
//!   per `successes_per_step` answered calls: one success does not reset it.
//!
//! How a caller uses it (the pattern every call site follows):
//!
//! ```no_run
//! # async fn f(gov: tidemark_governor::Governor) {
//! use tidemark_governor::Outcome;
//! let permit = gov.admit().await; // waits while the breaker is open
//! let outcome = Outcome::Answered; // or Congested on a timeout / 5xx
//! permit.finish(outcome);
//! // before sending a failed call again:
//! gov.wait_retry().await; // within budget, after a jittered back-off
//! # }
//! ```
//!
//! Guarantees: the governor never drops or fails a call; it only delays new
//! calls and retries. Every delay is finite (the open period and the back-off
//! are capped), so a caller's own deadline still decides when to give up.

pub mod law;
pub mod metrics;

use std::sync::{Arc, Mutex, PoisonError};

use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use std::time::Duration;

pub use law::{Admit, Law, Outcome, Params, State};
use tokio::time::Instant;

/// A cheap-to-clone handle on one endpoint's governor.
#[derive(Clone, Debug)]
pub struct Governor {
    endpoint: Arc<str>,
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    law: Law,
    /// The gauges last set (state, rate limit, back-off level): they are set
    /// again only when they change, not on every call.
    shown: Option<[f64; 3]>,
}

impl Governor {
    /// A governor for `endpoint` (a metric label: `dynamodb`, `kinesis`).
    pub fn new(endpoint: &str, params: Params) -> Self {
        Governor {
            endpoint: endpoint.into(),
            inner: Arc::new(Mutex::new(Inner {
                law: Law::new(params, Instant::now().into_std()),
                shown: None,
            })),
        }
    }

    /// The endpoint this governor paces.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Runs `f` on the law, then updates the gauges if they changed.
    fn with<T>(&self, f: impl FnOnce(&mut Law) -> T) -> T {
        // The law holds no invariant a panicking caller could break half-way.
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let out = f(&mut inner.law);
        let l = &inner.law;
        let state = match l.state() {
            State::Closed => 0.0,
            State::HalfOpen { .. } => 1.0,
            State::Open { .. } => 2.0,
        };
        let gauges = [
            state,
            l.rate_limit().unwrap_or(0.0),
            f64::from(l.backoff_level()),
        ];
        if inner.shown != Some(gauges) {
            inner.shown = Some(gauges);
            let ep = self.endpoint.to_string();
            ::metrics::gauge!(metrics::STATE, "endpoint" => ep.clone()).set(gauges[0]);
            ::metrics::gauge!(metrics::RATE_LIMIT, "endpoint" => ep.clone()).set(gauges[1]);
            ::metrics::gauge!(metrics::BACKOFF_LEVEL, "endpoint" => ep).set(gauges[2]);
        }
        out
    }

    /// Admits a call now or says how long to wait (for callers that run
    /// their own event loop, like the writer's table task).
    pub fn poll_admit(&self) -> Result<Permit, Duration> {
        self.poll(false)
    }

    fn poll(&self, priority: bool) -> Result<Permit, Duration> {
        let now = Instant::now();
        let admit = self.with(|l| {
            if priority {
                l.poll_admit_priority(now.into_std())
            } else {
                l.poll_admit(now.into_std())
            }
        });
        match admit {
            Admit::Go { probe } => Ok(Permit {
                gov: self.clone(),
                probe,
                sent_at: now,
                done: false,
            }),
            Admit::Wait(d) => Err(d),
        }
    }

    /// Waits until a call may start.
    pub async fn admit(&self) -> Permit {
        loop {
            match self.poll_admit() {
                Ok(p) => return p,
                Err(d) => tokio::time::sleep(d).await,
            }
        }
    }

    /// Waits until a call that keeps the caller's own state (lease writes)
    /// may start: only an open breaker holds it, never the rate limit, so
    /// bulk writes draining a backlog cannot starve lease renewals and cost
    /// the worker its leases (see [`Law::poll_admit_priority`]).
    pub async fn admit_priority(&self) -> Permit {
        loop {
            match self.poll(true) {
                Ok(p) => return p,
                Err(d) => tokio::time::sleep(d).await,
            }
        }
    }

    /// May a failed call be retried now? Counts it if so; otherwise how long
    /// until the budget allows one.
    pub fn try_retry(&self) -> Result<(), Duration> {
        let now = Instant::now().into_std();
        let r = self.with(|l| l.try_retry(now));
        if r.is_err() {
            ::metrics::counter!(metrics::RETRIES_DENIED, "endpoint" => self.endpoint.to_string())
                .increment(1);
        }
        r
    }

    /// The jittered delay before a retry (full jitter under the current cap).
    pub fn retry_delay(&self) -> Duration {
        self.with(|l| l.backoff_cap()).mul_f64(fastrand::f64())
    }

    /// Waits out a jittered back-off, then until the retry budget allows a
    /// retry, and counts it.
    pub async fn wait_retry(&self) {
        tokio::time::sleep(self.retry_delay()).await;
        while let Err(d) = self.try_retry() {
            tokio::time::sleep(d).await;
        }
    }

    /// Runs one SDK call admitted by this governor and reports its outcome
    /// (classified by `tidemark-aws-errors`). The call's own timeouts and
    /// retries are the caller's; the governor only delays its start.
    pub async fn run<T, E, R>(
        &self,
        call: impl std::future::Future<Output = Result<T, SdkError<E, R>>>,
    ) -> Result<T, SdkError<E, R>>
    where
        E: ProvideErrorMetadata,
        R: tidemark_aws_errors::HttpStatus,
    {
        let permit = self.admit().await;
        let result = call.await;
        permit.finish(match &result {
            Ok(_) => Outcome::Answered,
            Err(e) => Outcome::of_class(tidemark_aws_errors::classify(e)),
        });
        result
    }

    /// [`Governor::run`] through `gov` when there is one, else `call` as is
    /// (for callers whose governor is optional).
    pub async fn run_opt<T, E, R>(
        gov: Option<&Governor>,
        call: impl std::future::Future<Output = Result<T, SdkError<E, R>>>,
    ) -> Result<T, SdkError<E, R>>
    where
        E: ProvideErrorMetadata,
        R: tidemark_aws_errors::HttpStatus,
    {
        match gov {
            Some(g) => g.run(call).await,
            None => call.await,
        }
    }

    /// Waits while the breaker is open, without taking an admission: for
    /// work that feeds this endpoint without calling it (readers hold their
    /// GetRecords while DynamoDB, where the records would go, is down).
    pub async fn wait_closed(&self) {
        loop {
            let wait = match self.state() {
                State::Open { until } => until.saturating_duration_since(Instant::now().into_std()),
                State::Closed | State::HalfOpen { .. } => return,
            };
            tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
        }
    }

    /// Was a call admitted at `sent_at` sent before the breaker last closed
    /// (it hung through a recovery)? Its failure says nothing about the
    /// endpoint now: resend it without waiting out a back-off.
    pub fn sent_before_close(&self, sent_at: Instant) -> bool {
        self.with(|l| l.sent_before_close(sent_at.into_std()))
    }

    /// Has the breaker closed after `t` (an answered probe: the endpoint
    /// recovered since)? Callers holding work after a timeout at `t` stop
    /// waiting out their back-off.
    pub fn closed_since(&self, t: Instant) -> bool {
        self.with(|l| l.closed_at() > t.into_std())
    }

    /// The breaker's state now.
    pub fn state(&self) -> State {
        self.with(|l| l.state())
    }

    fn finish(&self, outcome: Outcome, probe: bool, sent_at: Instant) {
        let now = Instant::now().into_std();
        let tripped = self.with(|l| {
            let before = l.trips();
            l.on_outcome(outcome, probe, sent_at.into_std(), now);
            l.trips() > before
        });
        if tripped {
            ::metrics::counter!(metrics::TRIPS, "endpoint" => self.endpoint.to_string())
                .increment(1);
            tracing::warn!(endpoint = %self.endpoint, "AWS endpoint congested (timeouts or 5xx in a row): circuit breaker open, new calls wait");
        }
    }
}

/// Permission for one call. Report how it ended with [`Permit::finish`];
/// dropping it unfinished (the caller gave up) only frees the probe slot.
#[derive(Debug)]
pub struct Permit {
    gov: Governor,
    probe: bool,
    sent_at: Instant,
    done: bool,
}

impl Permit {
    /// When the call was admitted.
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }

    /// Reports the call's outcome.
    pub fn finish(mut self, outcome: Outcome) {
        self.done = true;
        self.gov.finish(outcome, self.probe, self.sent_at);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.done {
            let probe = self.probe;
            self.gov.with(|l| l.on_abandoned(probe));
        }
    }
}

#[cfg(test)]
mod tests;
