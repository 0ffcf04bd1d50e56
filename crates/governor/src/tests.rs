//! The law in simulated time: scenarios with a clock that is only a number.

use std::time::{Duration, Instant};

use crate::law::{Admit, Law, Outcome, Params, State};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Closed-loop clients calling an endpoint that is healthy except during
/// `[brown_from, brown_to)`, when every call sent hangs until the client's
/// timeout. Returns the send times.
struct Sim {
    clients: usize,
    latency: Duration,
    timeout: Duration,
    brown_from: Duration,
    brown_to: Duration,
    end: Duration,
}

impl Sim {
    fn run(&self, params: Params) -> Vec<Duration> {
        self.run_traced(params).0
    }

    /// The send times, and when the breaker opened (each trip).
    fn run_traced(&self, params: Params) -> (Vec<Duration>, Vec<Duration>) {
        let t0 = Instant::now();
        let mut opened = Vec::new();
        let mut law = Law::new(params, t0);
        let mut rng = fastrand::Rng::with_seed(7);
        // (when the client acts next, client id)
        let mut next: Vec<Duration> = vec![Duration::ZERO; self.clients];
        // In flight: (ends at, sent at, congested, probe)
        let mut flight: Vec<Option<(Duration, Duration, bool, bool)>> = vec![None; self.clients];
        let mut sends = Vec::new();
        loop {
            let (c, at) = next
                .iter()
                .enumerate()
                .map(|(i, t)| (i, flight[i].map_or(*t, |f| f.0)))
                .min_by_key(|(_, t)| *t)
                .unwrap();
            if at >= self.end {
                return (sends, opened);
            }
            let now = t0 + at;
            if let Some((_, sent, congested, probe)) = flight[c].take() {
                let outcome = if congested {
                    Outcome::Congested
                } else {
                    Outcome::Answered
                };
                let trips = law.trips();
                law.on_outcome(outcome, probe, t0 + sent, now);
                if law.trips() > trips {
                    opened.push(at);
                }
                next[c] = if congested {
                    // A failed call is retried within budget after back-off.
                    let wait = match law.try_retry(now) {
                        Ok(()) => law.backoff_cap().mul_f64(rng.f64()),
                        Err(d) => d,
                    };
                    at + wait
                } else {
                    at
                };
                continue;
            }
            match law.poll_admit(now) {
                Admit::Go { probe } => {
                    sends.push(at);
                    let brown = at >= self.brown_from && at < self.brown_to;
                    let ends = at + if brown { self.timeout } else { self.latency };
                    flight[c] = Some((ends, at, brown, probe));
                }
                Admit::Wait(d) => next[c] = at + d,
            }
        }
    }
}

impl Sim {
    /// 16 clients, 20 ms calls, 2 s timeouts; a brownout from 30 s to 90 s.
    fn brownout(end: Duration) -> Self {
        Sim {
            clients: 16,
            latency: ms(20),
            timeout: Duration::from_secs(2),
            brown_from: Duration::from_secs(30),
            brown_to: Duration::from_secs(90),
            end,
        }
    }
}

fn rate(sends: &[Duration], from: Duration, to: Duration) -> f64 {
    let n = sends.iter().filter(|t| **t >= from && **t < to).count();
    n as f64 / (to - from).as_secs_f64()
}

#[test]
fn a_brownout_sends_less_than_healthy_and_recovers() {
    let sim = Sim::brownout(Duration::from_secs(150));
    let sends = sim.run(Params::default());
    let healthy = rate(&sends, Duration::from_secs(10), Duration::from_secs(30));
    let brownout = rate(&sends, sim.brown_from, sim.brown_to);
    let back_s = (0..60)
        .map(|s| sim.brown_to + Duration::from_secs(s))
        .find(|t| rate(&sends, *t, *t + Duration::from_secs(1)) >= 0.9 * healthy)
        .map(|t| (t - sim.brown_to).as_secs());
    eprintln!(
        "healthy {healthy:.0}/s, brownout {brownout:.2}/s, amplification {:.4}x, back in {back_s:?} s",
        brownout / healthy
    );
    assert!(healthy > 700.0, "healthy rate {healthy}");
    // Far below the healthy rate: the breaker holds new calls.
    assert!(
        brownout / healthy < 0.05,
        "amplification {:.3} ({brownout}/s vs {healthy}/s)",
        brownout / healthy
    );
    // Back to 90% of the healthy rate within 10 s of recovery (at most one
    // open period of 5 s, then the restart at half rate).
    assert!(
        back_s.is_some_and(|s| s <= 10),
        "recovered after {back_s:?} s"
    );
}

#[test]
fn without_a_breaker_the_same_brownout_keeps_every_client_busy() {
    // The baseline the figure above is compared with: a law that never
    // trips and never cuts sends a retry per client per timeout.
    let sim = Sim::brownout(Duration::from_secs(100));
    let never = Params {
        trip_after: u32::MAX,
        rate_cut: 1.0,
        min_rate: 1e9,
        retry_floor_per_sec: 1e9,
        backoff_max: ms(1),
        backoff_base: ms(1),
        ..Params::default()
    };
    let base = rate(&sim.run(never), sim.brown_from, sim.brown_to);
    let governed = rate(&sim.run(Params::default()), sim.brown_from, sim.brown_to);
    eprintln!("brownout: baseline {base:.2}/s, governed {governed:.2}/s");
    assert!(base >= 7.0, "baseline {base}/s");
    assert!(governed * 4.0 < base, "governed {governed}/s vs {base}/s");
}

#[test]
fn the_retry_budget_is_a_tenth_of_successes_plus_a_floor() {
    let t0 = Instant::now();
    let mut law = Law::new(Params::default(), t0);
    for i in 0..100 {
        law.on_outcome(Outcome::Answered, false, t0, t0 + ms(i));
    }
    let now = t0 + ms(500);
    // floor 1/s x 10 s + 10% of 100.
    for i in 0..20 {
        assert_eq!(law.try_retry(now), Ok(()), "retry {i}");
    }
    let wait = law.try_retry(now).unwrap_err();
    assert!(wait > Duration::ZERO && wait <= Duration::from_secs(10));
    assert_eq!(law.retries_denied(), 1);
    // Once the window passed, retries are allowed again.
    assert_eq!(law.try_retry(now + Duration::from_secs(11)), Ok(()));
}

#[test]
fn one_success_does_not_reset_the_back_off() {
    let t0 = Instant::now();
    let p = Params::default();
    let per_step = p.successes_per_step;
    let mut law = Law::new(p, t0);
    for i in 0..4 {
        law.on_outcome(Outcome::Congested, false, t0, t0 + ms(i));
    }
    let high = law.backoff_cap();
    assert_eq!(law.backoff_level(), 4);
    law.on_outcome(Outcome::Answered, false, t0, t0 + ms(10));
    assert_eq!(law.backoff_cap(), high, "one success keeps the back-off");
    for i in 1..per_step {
        law.on_outcome(Outcome::Answered, false, t0, t0 + ms(10 + u64::from(i)));
    }
    assert_eq!(
        law.backoff_level(),
        3,
        "a run of successes lowers it one step"
    );
    assert!(law.backoff_cap() < high);
}

#[test]
fn timeouts_cut_the_rate_not_only_concurrency() {
    let t0 = Instant::now();
    let mut law = Law::new(Params::default(), t0);
    // 100 calls in the last second, then one times out.
    for i in 0..100 {
        assert_eq!(law.poll_admit(t0 + ms(i * 10)), Admit::Go { probe: false });
    }
    let now = t0 + ms(1000);
    law.on_outcome(Outcome::Congested, false, t0 + ms(500), now);
    let limit = law.rate_limit().unwrap();
    assert!((limit - 50.0).abs() <= 1.0, "limit {limit}");
    // Admissions are now paced: about `limit` per second, not 100.
    let mut admitted = 0;
    for i in 0..1000 {
        if let Admit::Go { .. } = law.poll_admit(now + ms(i)) {
            admitted += 1;
        }
    }
    assert!((45..=62).contains(&admitted), "admitted {admitted} in 1 s");
    // A second timeout of a call sent before the cut does not cut again.
    law.on_outcome(Outcome::Congested, false, t0 + ms(600), now + ms(1000));
    assert_eq!(law.rate_limit(), Some(limit));
}

#[test]
fn the_limit_grows_back_and_is_lifted_while_calls_are_answered() {
    let t0 = Instant::now();
    let mut law = Law::new(Params::default(), t0);
    assert!(matches!(law.poll_admit(t0), Admit::Go { .. }));
    law.on_outcome(Outcome::Congested, false, t0, t0 + ms(1));
    assert_eq!(law.rate_limit(), Some(1.0));
    let mut t = t0 + ms(1);
    for _ in 0..20_000 {
        t += ms(1);
        if let Admit::Go { .. } = law.poll_admit(t) {
            law.on_outcome(Outcome::Answered, false, t, t);
        }
        if law.rate_limit().is_none() {
            break;
        }
    }
    assert_eq!(law.rate_limit(), None, "still limited after {:?}", t - t0);
    assert!(
        t - t0 < Duration::from_secs(15),
        "lifted after {:?}",
        t - t0
    );
}

#[test]
fn the_breaker_opens_probes_once_and_doubles_on_failed_probes() {
    let t0 = Instant::now();
    let p = Params {
        rate_cut: 1.0,
        min_rate: 1e9,
        ..Params::default()
    };
    let trip = p.trip_after;
    let base = p.open_base;
    let mut law = Law::new(p, t0);
    for i in 0..u64::from(trip) {
        law.on_outcome(Outcome::Congested, false, t0, t0 + ms(i));
    }
    let opened = t0 + ms(u64::from(trip) - 1);
    assert_eq!(
        law.state(),
        State::Open {
            until: opened + base
        }
    );
    assert_eq!(law.trips(), 1);
    assert!(matches!(law.poll_admit(opened), Admit::Wait(d) if d == base));
    // After the open period: one probe, everyone else waits.
    let t = opened + base;
    assert_eq!(law.poll_admit(t), Admit::Go { probe: true });
    assert!(matches!(law.poll_admit(t), Admit::Wait(_)));
    // A probe that hangs past the open period does not hold the next one.
    assert_eq!(law.poll_admit(t + base), Admit::Go { probe: true });
    // A dropped probe frees the slot.
    law.on_abandoned(true);
    assert_eq!(law.poll_admit(t), Admit::Go { probe: true });
    // A failed probe opens again for twice as long.
    law.on_outcome(Outcome::Congested, true, t, t + ms(5));
    assert_eq!(
        law.state(),
        State::Open {
            until: t + ms(5) + base * 2
        }
    );
    // A probe answered closes it.
    let t = t + ms(5) + base * 2;
    assert_eq!(law.poll_admit(t), Admit::Go { probe: true });
    law.on_outcome(Outcome::Answered, true, t, t + ms(20));
    assert_eq!(law.state(), State::Closed);
    assert!(matches!(
        law.poll_admit(t + ms(21)),
        Admit::Go { probe: false }
    ));
}

#[test]
fn throttling_alone_never_opens_the_breaker() {
    let t0 = Instant::now();
    let mut law = Law::new(Params::default(), t0);
    for i in 0..1000 {
        law.on_outcome(Outcome::Throttled, false, t0, t0 + ms(i));
    }
    assert_eq!(law.state(), State::Closed);
    assert_eq!(law.rate_limit(), None);
}

#[test]
fn an_answer_between_failures_keeps_the_breaker_closed() {
    let t0 = Instant::now();
    let p = Params::default();
    let trip = u64::from(p.trip_after);
    let mut law = Law::new(p, t0);
    for round in 0..10 {
        for i in 0..trip - 1 {
            law.on_outcome(Outcome::Congested, false, t0, t0 + ms(round * 100 + i));
        }
        law.on_outcome(Outcome::Answered, false, t0, t0 + ms(round * 100 + 50));
    }
    assert_eq!(law.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_async_handle_waits_while_open_and_a_probe_closes() {
    let gov = crate::Governor::new("test", Params::default());
    for _ in 0..5 {
        gov.admit().await.finish(Outcome::Congested);
    }
    assert!(matches!(gov.state(), State::Open { .. }));
    let start = tokio::time::Instant::now();
    let probe = gov.admit().await;
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(900), "waited {waited:?}");
    probe.finish(Outcome::Answered);
    assert_eq!(gov.state(), State::Closed);
}

/// A probe sent just before a recovery hangs until its timeout; the next
/// probe (after the open period) is answered and closes the breaker. The
/// first probe's late timeout must not reopen it, nor may timeouts of other
/// calls sent before the close trip it: either would stall the recovered
/// endpoint for another open period (a brownout's recovery took 32 s
/// instead of about 20 that way).
#[test]
fn a_timeout_from_before_the_recovery_does_not_reopen_the_breaker() {
    let t0 = Instant::now();
    let p = Params::default();
    let trip = u64::from(p.trip_after);
    let mut law = Law::new(p, t0);
    for i in 0..trip {
        law.on_outcome(Outcome::Congested, false, t0, t0 + ms(i));
    }
    let State::Open { until } = law.state() else {
        panic!("not open: {:?}", law.state());
    };
    // Probe A hangs; after the open period probe B goes and is answered.
    assert_eq!(law.poll_admit(until), Admit::Go { probe: true });
    let b_at = until + Params::default().open_base;
    assert_eq!(law.poll_admit(b_at), Admit::Go { probe: true });
    law.on_outcome(Outcome::Answered, true, b_at, b_at + ms(20));
    assert_eq!(law.state(), State::Closed);
    let trips = law.trips();
    // A times out 10 s after it was sent, and so do five calls sent before
    // the close: all old news.
    let late = until + Duration::from_secs(10);
    law.on_outcome(Outcome::Congested, true, until, late);
    for i in 0..trip {
        law.on_outcome(Outcome::Congested, false, b_at, late + ms(i));
    }
    assert_eq!(law.state(), State::Closed);
    assert_eq!(law.trips(), trips);
    assert!(matches!(
        law.poll_admit(late + ms(10)),
        Admit::Go { probe: false }
    ));
    // Five timeouts of calls sent after the close still trip it.
    let after = b_at + ms(30);
    for i in 0..trip {
        law.on_outcome(Outcome::Congested, false, after, late + ms(100 + i));
    }
    assert!(matches!(law.state(), State::Open { .. }));
}

/// Clients whose calls time out after 10 s (the SDK attempt timeout, longer
/// than the breaker's longest open period): after the recovery the breaker
/// closes within one open period and never opens again, wherever the
/// recovery falls in the probing cycle.
#[test]
fn with_long_timeouts_the_breaker_closes_once_after_a_brownout() {
    let open_max = Params::default().open_max;
    for tenth in (0..50).step_by(2) {
        let brown_to = Duration::from_secs(90) + ms(100 * tenth);
        let sim = Sim {
            timeout: Duration::from_secs(10),
            brown_to,
            ..Sim::brownout(Duration::from_secs(150))
        };
        let (sends, opened) = sim.run_traced(Params::default());
        let healthy = rate(&sends, Duration::from_secs(10), Duration::from_secs(30));
        let back_s = (0..60)
            .map(|s| brown_to + Duration::from_secs(s))
            .find(|t| rate(&sends, *t, *t + Duration::from_secs(1)) >= 0.9 * healthy)
            .map(|t| (t - brown_to).as_secs());
        // Calls sent up to the recovery time out until 10 s after it; none
        // of them may reopen a breaker that an answered probe closed.
        let late: Vec<_> = opened.iter().filter(|t| **t > brown_to).collect();
        assert!(
            late.iter().all(|t| **t <= brown_to + open_max),
            "recovery at {brown_to:?}: reopened at {late:?}"
        );
        assert!(
            back_s.is_some_and(|s| s <= open_max.as_secs() + 5),
            "recovery at {brown_to:?}: back after {back_s:?} s"
        );
    }
}

/// Lease writes pass the rate limit (they wait for an open breaker only)
/// and spend its tokens, so ordinary calls wait longer after them.
#[test]
fn priority_calls_pass_the_rate_limit_but_not_an_open_breaker() {
    let t0 = Instant::now();
    let mut law = Law::new(Params::default(), t0);
    // Ten calls in the last second, then a timeout: limit 5/s.
    for i in 0..10 {
        assert!(matches!(law.poll_admit(t0 + ms(i)), Admit::Go { .. }));
    }
    law.on_outcome(Outcome::Congested, false, t0, t0 + ms(20));
    assert_eq!(law.rate_limit(), Some(5.0));
    let t = t0 + ms(21);
    // The bucket is empty: an ordinary call waits, a priority call goes.
    assert!(matches!(law.poll_admit(t), Admit::Wait(_)));
    for _ in 0..3 {
        assert_eq!(law.poll_admit_priority(t), Admit::Go { probe: false });
    }
    // Their debt delays the next ordinary call by about 3/5 s more.
    match law.poll_admit(t) {
        Admit::Wait(d) => assert!(d >= ms(700), "waits only {d:?}"),
        other => panic!("{other:?}"),
    }
    // An open breaker holds priority calls too.
    for i in 0..5 {
        law.on_outcome(Outcome::Congested, false, t, t + ms(100 + i));
    }
    assert!(matches!(
        law.poll_admit_priority(t + ms(110)),
        Admit::Wait(_)
    ));
}
