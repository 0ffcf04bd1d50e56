use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;

/// A simulated DynamoDB table: one partition capped at 1,000 WCU/s (one
/// second of bucket), and the table's 300 s burst bucket refilled at the
/// provisioned rate. Items of 1 WCU, 25 per call.
struct SimTable {
    provisioned: f64,
    partition_cap: f64,
    partition_tokens: f64,
    burst_tokens: f64,
    last: Duration,
}

impl SimTable {
    fn new(provisioned: f64, burst_full: bool) -> Self {
        SimTable {
            provisioned,
            partition_cap: 1_000.0,
            partition_tokens: 1_000.0,
            burst_tokens: if burst_full { provisioned * 300.0 } else { 0.0 },
            last: Duration::ZERO,
        }
    }

    /// Writes up to `items` 1-WCU items at time `t`; returns how many stored.
    fn write(&mut self, t: Duration, items: u32) -> u32 {
        let dt = (t - self.last).as_secs_f64();
        self.last = t;
        self.partition_tokens =
            (self.partition_tokens + self.partition_cap * dt).min(self.partition_cap);
        self.burst_tokens =
            (self.burst_tokens + self.provisioned * dt).min(self.provisioned * 300.0);
        let mut stored = 0;
        while stored < items && self.partition_tokens >= 1.0 && self.burst_tokens >= 1.0 {
            self.partition_tokens -= 1.0;
            self.burst_tokens -= 1.0;
            stored += 1;
        }
        stored
    }
}

struct SimResult {
    /// Stored WCU per whole second of simulated time.
    per_second: Vec<f64>,
    calls: u64,
    throttled_calls: u64,
    final_rate: f64,
}

/// Unlimited demand, 10 ms latency, `secs` of simulated time.
fn simulate(
    ctl: &mut RateController,
    table: &mut SimTable,
    secs: u64,
    mut on_tick: impl FnMut(Duration, &mut RateController, &mut SimTable, Instant),
) -> SimResult {
    let t0 = Instant::now();
    let latency = Duration::from_millis(10);
    let end = Duration::from_secs(secs);
    let mut t = Duration::ZERO;
    let mut completions: BinaryHeap<Reverse<(Duration, Duration)>> = BinaryHeap::new();
    let mut per_second = vec![0.0; secs as usize];
    let (mut calls, mut throttled_calls) = (0, 0);
    let mut pending_retry = 0u32; // unprocessed items, re-sent first
    let mut last_tick = 0;
    while t < end {
        if t.as_secs() != last_tick {
            last_tick = t.as_secs();
            on_tick(t, ctl, table, t0 + t);
        }
        // Start every call the controller admits now.
        let mut wait = Duration::from_millis(1);
        loop {
            match ctl.poll_send(t0 + t) {
                Admit::Go => {
                    let items = 25;
                    pending_retry = pending_retry.saturating_sub(items);
                    ctl.on_send(f64::from(items), t0 + t);
                    completions.push(Reverse((t + latency, t)));
                    calls += 1;
                }
                Admit::Wait(d) => {
                    wait = d.max(Duration::from_micros(100));
                    break;
                }
                Admit::AtConcurrencyLimit => break,
            }
        }
        let next_done = completions.peek().map(|Reverse((d, _))| *d);
        let next = match next_done {
            Some(d) if d <= t + wait => d,
            _ => t + wait,
        };
        t = next;
        while let Some(Reverse((done, sent))) = completions.peek().copied() {
            if done > t {
                break;
            }
            completions.pop();
            // The table judges the call when it arrives (half-way).
            let stored = table.write(sent + latency / 2, 25);
            let s = (sent + latency / 2).as_secs() as usize;
            if s < per_second.len() {
                per_second[s] += f64::from(stored);
            }
            let throttled = stored < 25;
            if throttled {
                throttled_calls += 1;
                pending_retry += 25 - stored;
            }
            ctl.on_result(
                CallFeedback {
                    sent_at: t0 + sent,
                    consumed_wcu: f64::from(stored),
                    throttled,
                    failed: false,
                },
                t0 + done,
            );
        }
    }
    SimResult {
        per_second,
        calls,
        throttled_calls,
        final_rate: ctl.rate(),
    }
}

fn window_means(per_second: &[f64], from: usize, window: usize) -> Vec<f64> {
    per_second[from..]
        .chunks(window)
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect()
}

#[test]
fn provisioned_1000_wcu_table_runs_within_5_percent_of_capacity() {
    let now = Instant::now();
    let mut ctl = RateController::new(RateParams::default(), now);
    ctl.on_capacity(WriteCapacity::Provisioned { wcu: 1_000.0 }, now);
    // Full burst bucket: the cap must keep us from living on credit.
    let mut table = SimTable::new(1_000.0, true);
    let r = simulate(&mut ctl, &mut table, 600, |_, _, _, _| {});
    for (i, m) in window_means(&r.per_second, 10, 10).iter().enumerate() {
        assert!(
            (950.0..=1_050.0).contains(m),
            "window {i}: {m} WCU/s is not within 5% of 1,000"
        );
    }
    let share = r.throttled_calls as f64 / r.calls as f64;
    assert!(share <= 0.01, "throttled share {share}");
}

#[test]
fn unknown_capacity_converges_from_an_on_demand_guess_and_stays() {
    // The controller believes 4,000 WCU/s (on-demand default); the table
    // really serves 1,000, with an empty burst bucket.
    let now = Instant::now();
    let mut ctl = RateController::new(RateParams::default(), now);
    let mut table = SimTable::new(1_000.0, false);
    let r = simulate(&mut ctl, &mut table, 600, |_, _, _, _| {});
    let means = window_means(&r.per_second, 30, 10);
    let share = r.throttled_calls as f64 / r.calls as f64;
    println!("10 s means after 30 s: {means:?}; throttled share {share}");
    for (i, m) in means.iter().enumerate() {
        assert!(
            (950.0..=1_050.0).contains(m),
            "window {i} after 30 s: {m} WCU/s is not within 5% of 1,000"
        );
    }
    let share = r.throttled_calls as f64 / r.calls as f64;
    assert!(share <= 0.05, "throttled share {share} over 5%");
    assert!(
        (900.0..=1_100.0).contains(&r.final_rate),
        "rate {}",
        r.final_rate
    );
}

#[test]
fn a_capacity_increase_is_followed() {
    let now = Instant::now();
    let mut ctl = RateController::new(RateParams::default(), now);
    ctl.on_capacity(WriteCapacity::Provisioned { wcu: 500.0 }, now);
    let mut table = SimTable::new(500.0, false);
    table.partition_cap = 2_000.0;
    // At 60 s the table is raised to 1,500 WCU and DescribeTable says so.
    let r = simulate(&mut ctl, &mut table, 120, |t, c, tab, at| {
        if t >= Duration::from_secs(60) {
            tab.provisioned = 1_500.0;
            c.on_capacity(WriteCapacity::Provisioned { wcu: 1_500.0 }, at);
        }
    });
    let first = window_means(&r.per_second[..60], 5, 10);
    assert!(
        first.iter().all(|m| (475.0..=525.0).contains(m)),
        "{first:?}"
    );
    let second = window_means(&r.per_second, 70, 10);
    assert!(
        second.iter().all(|m| (1_425.0..=1_575.0).contains(m)),
        "{second:?}"
    );
    assert!(ctl.rate() >= 1_425.0, "rate {}", ctl.rate());
}

#[test]
fn one_overshoot_costs_one_cut() {
    let t0 = Instant::now();
    let mut ctl = RateController::new(RateParams::default(), t0);
    ctl.on_capacity(WriteCapacity::Provisioned { wcu: 1_000.0 }, t0);
    for _ in 0..3 {
        ctl.on_send(25.0, t0);
    }
    let fb = CallFeedback {
        sent_at: t0,
        consumed_wcu: 0.0,
        throttled: true,
        failed: false,
    };
    let t1 = t0 + Duration::from_millis(20);
    ctl.on_result(fb, t1);
    let after_first = ctl.rate();
    ctl.on_result(fb, t1 + Duration::from_millis(1));
    ctl.on_result(fb, t1 + Duration::from_millis(2));
    assert!(after_first < 1_000.0);
    assert_eq!(ctl.rate(), after_first, "stale feedback cut the rate again");
    // A call sent after the cut that is throttled cuts again.
    let t2 = t1 + Duration::from_millis(50);
    ctl.on_send(25.0, t2);
    ctl.on_result(
        CallFeedback { sent_at: t2, ..fb },
        t2 + Duration::from_millis(10),
    );
    assert!(ctl.rate() < after_first);
}

/// WCU/s sent over 10 s by a sender whose calls of 25 WCU complete at
/// once (so only the pacer binds).
fn paced_rate(mut ctl: RateController, t0: Instant) -> f64 {
    let mut t = t0;
    let mut sent = 0.0;
    let end = t0 + Duration::from_secs(10);
    while t < end {
        match ctl.poll_send(t) {
            Admit::Go => {
                ctl.on_send(25.0, t);
                sent += 25.0;
                ctl.on_result(
                    CallFeedback {
                        sent_at: t,
                        consumed_wcu: 25.0,
                        throttled: false,
                        failed: false,
                    },
                    t,
                );
            }
            Admit::Wait(d) => t += d,
            Admit::AtConcurrencyLimit => unreachable!("calls complete at once"),
        }
    }
    sent / 10.0
}

#[test]
fn pacing_holds_the_average_at_the_rate() {
    let t0 = Instant::now();
    let mut ctl = RateController::new(RateParams::default(), t0);
    ctl.on_capacity(WriteCapacity::Provisioned { wcu: 200.0 }, t0);
    let per_sec = paced_rate(ctl, t0);
    assert!(
        (190.0..=215.0).contains(&per_sec),
        "{per_sec} WCU/s paced at 200"
    );
}

/// A writer given a quarter of the capacity (a backfill beside live
/// traffic) plans a quarter, and never grows past it.
#[test]
fn a_capacity_share_caps_the_planned_rate() {
    let t0 = Instant::now();
    let p = RateParams {
        capacity_share: 0.25,
        ..RateParams::default()
    };
    let mut ctl = RateController::new(p.clone(), t0);
    assert_eq!(ctl.rate(), 1_000.0, "a quarter of the on-demand start");
    ctl.on_capacity(WriteCapacity::Provisioned { wcu: 200.0 }, t0);
    assert_eq!(ctl.rate(), 50.0);
    let per_sec = paced_rate(ctl, t0);
    assert!((45.0..=56.0).contains(&per_sec), "{per_sec} WCU/s");
    let mut od = RateController::new(p, t0);
    od.on_capacity(
        WriteCapacity::OnDemand {
            max_wcu: Some(400.0),
            warm_wcu: None,
        },
        t0,
    );
    assert_eq!(od.rate(), 100.0, "a quarter of the maximum");
}
