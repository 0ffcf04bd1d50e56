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
        let t0 = Instant::now();
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
                return sends;
            }
            let now = t0 + at;
            if let Some((_, sent, congested, probe)) = flight[c].take() {
                let outcome = if congested {
                    Outcome::Congested
                } else {
                    Outcome::Answered
                };
                law.on_outcome(outcome, probe, t0 + sent, now);
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
