//! Scenario tests of per-key pacing in simulated time (in the manner of
//! Vector's adaptive-concurrency tests): each `scenarios/*.toml` file
//! describes a table (capacity, partitions at 1,000 WCU/s, a key hashing to
//! one partition), sources of items (keys, rate, when), and what must hold
//! with per-key pacing on, and off (the table-wide control alone, as the
//! writer was before). The simulated writer mirrors `table.rs`: the table's
//! [`RateController`] paces calls of up to 25 items; a throttled call's items
//! go back to the front; items of a held key wait in their key's queue. The
//! simulated table charges each item to its partition's and the table's
//! bucket, and returns what does not fit as unprocessed, as DynamoDB does.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{Gate, ItemResult, KeyPacer, KeyParams, Scope};
use crate::rate::{Admit, CallFeedback, RateController, RateParams, WriteCapacity};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    description: String,
    secs: u64,
    /// Figures are taken from this second on.
    measure_from: u64,
    table_wcu: f64,
    partitions: u32,
    /// The controller knows the provisioned capacity (else it starts from
    /// its on-demand guess, 4,000 WCU/s).
    #[serde(default = "yes")]
    capacity_known: bool,
    source: Vec<Source>,
    expect: Expect,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Source {
    /// "hot" or "cold": figures are reported per class.
    class: String,
    /// Distinct partition keys; items go to them in turn.
    keys: u32,
    /// Items per second, all keys together.
    rate: f64,
    #[serde(default)]
    from: f64,
    #[serde(default = "forever")]
    until: f64,
    /// Rate after `until` (a key that cools down), items/s.
    #[serde(default)]
    rate_after: f64,
}

fn forever() -> f64 {
    f64::INFINITY
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    on: Bounds,
    off: Bounds,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Bounds {
    cold_min_pct: Option<f64>,
    cold_max_pct: Option<f64>,
    throttled_max_pct: Option<f64>,
    hot_min_wcu: Option<f64>,
    hot_max_wcu: Option<f64>,
    servable_min_pct: Option<f64>,
    table_min_pct: Option<f64>,
    tracked_max_at_end: Option<usize>,
    hot_lost_max: Option<u64>,
}

#[derive(Debug, Default)]
struct Figures {
    cold_pct: f64,
    hot_wcu: f64,
    hot_offered_wcu: f64,
    throttled_pct: f64,
    servable_pct: f64,
    table_pct: f64,
    tracked_at_end: usize,
    /// Hot items neither stored nor still queued (must be 0).
    hot_lost: u64,
}

/// SplitMix64: the simulated table's key hash.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct SimTable {
    rate: f64,
    tokens: f64,
    parts: Vec<f64>,
    last: Duration,
    n: u64,
}

impl SimTable {
    fn partition(n: u64, key: u64) -> usize {
        ((u128::from(mix(key)) * u128::from(n)) >> 64) as usize
    }

    fn refill(&mut self, t: Duration) {
        let dt = t.saturating_sub(self.last).as_secs_f64();
        self.last = self.last.max(t);
        // The table banks one second (a table run at its capacity has no
        // burst credit to speak of); partitions one second each.
        self.tokens = (self.tokens + self.rate * dt).min(self.rate);
        for p in &mut self.parts {
            *p = (*p + 1_000.0 * dt).min(1_000.0);
        }
    }

    fn admit(&mut self, key: u64, t: Duration) -> bool {
        self.refill(t);
        let p = Self::partition(self.n, key);
        if self.parts[p] >= 1.0 && self.tokens >= 1.0 {
            self.parts[p] -= 1.0;
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[derive(Clone, Copy)]
struct Item {
    key: u64,
    hot: bool,
}

struct Call {
    done: Duration,
    sent: Duration,
    items: Vec<Item>,
}

/// In which order held keys are released into a call.
#[derive(Debug, Clone, Copy)]
enum Release {
    /// As `batch.rs`: in turn, from the key held first; a key served goes
    /// to the back.
    Turn,
    /// A seeded pseudo-random order, fixed for the run (as a hash map's
    /// iteration with that seed would be).
    Seeded(u64),
    /// The hot class's keys before every other held key.
    HotFirst,
    /// The hot class's keys after every other held key.
    HotLast,
}

/// In which order the simulated table charges a call's items.
#[derive(Debug, Clone, Copy)]
enum Charge {
    /// The request's order.
    InOrder,
    /// The reverse: held keys' items, which end the request, go first.
    Reversed,
    /// A random order per call.
    Shuffled,
}

fn run(sc: &Scenario, key_pacing: bool) -> Figures {
    run_ordered(sc, key_pacing, Release::Turn, Charge::InOrder)
}

fn run_ordered(sc: &Scenario, key_pacing: bool, release: Release, charge: Charge) -> Figures {
    let t0 = Instant::now();
    let at = |d: Duration| t0 + d;
    let mut ctl = RateController::new(RateParams::default(), t0);
    if sc.capacity_known {
        ctl.on_capacity(WriteCapacity::Provisioned { wcu: sc.table_wcu }, t0);
    }
    let mut pacer = KeyPacer::new(KeyParams::default(), t0);
    let mut table = SimTable {
        rate: sc.table_wcu,
        tokens: sc.table_wcu,
        parts: vec![1_000.0; sc.partitions as usize],
        last: Duration::ZERO,
        n: u64::from(sc.partitions),
    };
    let mut rng = fastrand::Rng::with_seed(26);
    let tick = Duration::from_millis(1);
    let latency = Duration::from_millis(10);
    let end = Duration::from_secs(sc.secs);
    // Key ids: source i's key j is (i << 32) | j.
    let mut due = vec![0.0f64; sc.source.len()];
    let mut next_key = vec![0u32; sc.source.len()];
    let mut order: VecDeque<Item> = VecDeque::new();
    let mut parked: HashMap<u64, VecDeque<Item>> = HashMap::new();
    // The held keys in release order (`Release::Turn`).
    let mut turn: VecDeque<u64> = VecDeque::new();
    let mut calls: Vec<Call> = Vec::new();
    let mut hold_until = Duration::ZERO;
    let (mut backoff_exp, mut clean) = (0u32, 0u32);
    let (mut n_calls, mut n_throttled) = (0u64, 0u64);
    let (mut offered_hot, mut offered_cold, mut stored_hot, mut stored_cold) =
        (0u64, 0u64, 0u64, 0u64);
    let mut stored_total = 0u64;
    let (mut total_hot_offered, mut total_hot_stored) = (0u64, 0u64);
    let mut offered_per_part = vec![0u64; sc.partitions as usize];
    let measure = Duration::from_secs(sc.measure_from);
    let mut last_expire = Duration::ZERO;
    let mut t = Duration::ZERO;
    while t < end {
        let secs = t.as_secs_f64();
        let measuring = t >= measure;
        // Arrivals.
        for (i, s) in sc.source.iter().enumerate() {
            let rate = if secs < s.from {
                0.0
            } else if secs < s.until {
                s.rate
            } else {
                s.rate_after
            };
            due[i] += rate * tick.as_secs_f64();
            while due[i] >= 1.0 {
                due[i] -= 1.0;
                let key = ((i as u64) << 32) | u64::from(next_key[i]);
                next_key[i] = (next_key[i] + 1) % s.keys;
                let hot = s.class == "hot";
                order.push_back(Item { key, hot });
                if hot {
                    total_hot_offered += 1;
                }
                if measuring {
                    if hot {
                        offered_hot += 1;
                    } else {
                        offered_cold += 1;
                    }
                    offered_per_part[SimTable::partition(table.n, key)] += 1;
                }
            }
        }
        // Completions.
        let mut i = 0;
        while i < calls.len() {
            if calls[i].done > t {
                i += 1;
                continue;
            }
            let mut call = calls.swap_remove(i);
            match charge {
                Charge::InOrder => {}
                Charge::Reversed => call.items.reverse(),
                Charge::Shuffled => rng.shuffle(&mut call.items),
            }
            let judged = call.sent + latency / 2;
            let mut results = Vec::with_capacity(call.items.len());
            let mut again = Vec::new();
            for it in &call.items {
                let ok = table.admit(it.key, judged);
                results.push(ItemResult {
                    key: it.key,
                    wcu: 1.0,
                    stored: ok,
                });
                if ok {
                    total_hot_stored += u64::from(it.hot);
                    if measuring {
                        stored_total += 1;
                        if it.hot {
                            stored_hot += 1;
                        } else {
                            stored_cold += 1;
                        }
                    }
                } else {
                    again.push(*it);
                }
            }
            n_calls += u64::from(measuring);
            let throttled = !again.is_empty();
            n_throttled += u64::from(measuring && throttled);
            let table_throttled = if key_pacing {
                let saturated = ctl
                    .accepted_rate(at(t))
                    .is_some_and(|a| a >= 0.97 * sc.table_wcu);
                pacer.on_result(
                    at(call.sent),
                    &results,
                    Scope::Unknown,
                    saturated,
                    at(t),
                    rng.f64(),
                )
            } else {
                throttled
            };
            ctl.on_result(
                CallFeedback {
                    sent_at: at(call.sent),
                    consumed_wcu: (call.items.len() - again.len()) as f64,
                    throttled: table_throttled,
                    failed: false,
                },
                at(t),
            );
            for it in again.into_iter().rev() {
                order.push_front(it);
            }
            // The table's back-off, as table.rs's `retry`: only for a
            // throttle the table's (all of them without key pacing).
            if table_throttled {
                clean = 0;
                let cap = (0.05 * 2f64.powi(backoff_exp.min(10) as i32)).min(5.0);
                backoff_exp += 1;
                hold_until = hold_until.max(t + Duration::from_secs_f64(cap * rng.f64()));
            } else {
                clean += 1;
                if clean >= 8 {
                    backoff_exp = 0;
                }
            }
        }
        if t.saturating_sub(last_expire) >= Duration::from_secs(1) {
            pacer.expire(at(t));
            last_expire = t;
        }
        // Dispatch (unless the table is held).
        while t >= hold_until && !(order.is_empty() && parked.is_empty()) {
            let ready_parked = parked.keys().any(|k| pacer.ready_at(*k, at(t)).is_none());
            let oldest_waited =
                order.len() >= 25 || (!order.is_empty() && t.as_millis().is_multiple_of(50));
            if !(ready_parked || oldest_waited) {
                break;
            }
            if ctl.poll_send(at(t)) != Admit::Go {
                break;
            }
            let mut batch: Vec<Item> = Vec::new();
            // Held keys first, as `take_batch_gated`: each visited once, a
            // key visited and still held to the back of the turn.
            let is_hot = |k: &u64| sc.source[(k >> 32) as usize].class == "hot";
            match release {
                Release::Turn => {}
                Release::Seeded(seed) => turn.make_contiguous().sort_by_key(|k| mix(k ^ seed)),
                Release::HotFirst => turn.make_contiguous().sort_by_key(|k| !is_hot(k)),
                Release::HotLast => turn.make_contiguous().sort_by_key(is_hot),
            }
            for _ in 0..turn.len() {
                if batch.len() >= 25 {
                    break;
                }
                let Some(k) = turn.pop_front() else { break };
                let Some(q) = parked.get_mut(&k) else {
                    continue;
                };
                while batch.len() < 25 && !q.is_empty() && pacer.admit(k, 1.0, at(t)) == Gate::Go {
                    if let Some(it) = q.pop_front() {
                        batch.push(it);
                    }
                }
                if q.is_empty() {
                    parked.remove(&k);
                } else {
                    turn.push_back(k);
                }
            }
            let released = batch.len();
            while batch.len() < 25 {
                let Some(it) = order.pop_front() else { break };
                if !key_pacing {
                    batch.push(it);
                    continue;
                }
                if let Some(q) = parked.get_mut(&it.key) {
                    q.push_back(it);
                    continue;
                }
                match pacer.admit(it.key, 1.0, at(t)) {
                    Gate::Go => batch.push(it),
                    Gate::Held(_) => {
                        parked.entry(it.key).or_default().push_back(it);
                        turn.push_back(it.key);
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            // Released held items end the request, as `take_batch_gated`.
            batch.rotate_left(released);
            ctl.on_send(batch.len() as f64, at(t));
            calls.push(Call {
                done: t + latency,
                sent: t,
                items: batch,
            });
        }
        t += tick;
    }
    let window = (sc.secs - sc.measure_from) as f64;
    let servable: f64 = offered_per_part
        .iter()
        .map(|&o| (o as f64 / window).min(1_000.0))
        .sum::<f64>()
        .min(sc.table_wcu);
    let queued_hot = order.iter().filter(|i| i.hot).count() as u64
        + parked.values().flatten().filter(|i| i.hot).count() as u64
        + calls
            .iter()
            .flat_map(|c| &c.items)
            .filter(|i| i.hot)
            .count() as u64;
    Figures {
        cold_pct: 100.0 * stored_cold as f64 / (offered_cold.max(1) as f64),
        hot_wcu: stored_hot as f64 / window,
        throttled_pct: 100.0 * n_throttled as f64 / (n_calls.max(1) as f64),
        servable_pct: 100.0 * (stored_total as f64 / window) / servable.max(1.0),
        table_pct: 100.0 * (stored_total as f64 / window) / sc.table_wcu,
        tracked_at_end: pacer.tracked(),
        hot_lost: total_hot_offered - total_hot_stored - queued_hot,
        hot_offered_wcu: offered_hot as f64 / window,
    }
}

fn check(name: &str, mode: &str, f: &Figures, b: &Bounds) -> Vec<String> {
    let mut bad = Vec::new();
    let mut want = |ok: bool, what: String| {
        if !ok {
            bad.push(format!("{name} ({mode}): {what}"));
        }
    };
    if let Some(m) = b.cold_min_pct {
        want(
            f.cold_pct >= m,
            format!("cold goodput {:.1}% < {m}%", f.cold_pct),
        );
    }
    if let Some(m) = b.cold_max_pct {
        want(
            f.cold_pct <= m,
            format!("cold goodput {:.1}% > {m}%", f.cold_pct),
        );
    }
    if let Some(m) = b.throttled_max_pct {
        want(
            f.throttled_pct <= m,
            format!("throttled calls {:.2}% > {m}%", f.throttled_pct),
        );
    }
    if let Some(m) = b.hot_min_wcu {
        want(
            f.hot_wcu >= m,
            format!("hot key {:.0} WCU/s < {m}", f.hot_wcu),
        );
    }
    if let Some(m) = b.hot_max_wcu {
        want(
            f.hot_wcu <= m,
            format!("hot key {:.0} WCU/s > {m}", f.hot_wcu),
        );
    }
    if let Some(m) = b.servable_min_pct {
        want(
            f.servable_pct >= m,
            format!(
                "{:.1}% of what the partitions can serve < {m}%",
                f.servable_pct
            ),
        );
    }
    if let Some(m) = b.table_min_pct {
        want(
            f.table_pct >= m,
            format!("{:.1}% of the table < {m}%", f.table_pct),
        );
    }
    if let Some(m) = b.tracked_max_at_end {
        want(
            f.tracked_at_end <= m,
            format!("{} keys tracked at the end > {m}", f.tracked_at_end),
        );
    }
    if let Some(m) = b.hot_lost_max {
        want(f.hot_lost <= m, format!("{} hot items lost", f.hot_lost));
    }
    bad
}

const SCENARIOS: &[(&str, &str)] = &[
    ("one_hot_key", include_str!("scenarios/one_hot_key.toml")),
    (
        "hot_time_bucket",
        include_str!("scenarios/hot_time_bucket.toml"),
    ),
    (
        "key_cools_down",
        include_str!("scenarios/key_cools_down.toml"),
    ),
    (
        "table_overload",
        include_str!("scenarios/table_overload.toml"),
    ),
];

#[test]
fn scenarios_hold_with_key_pacing_on_and_show_the_table_wide_control_off() {
    let mut bad = Vec::new();
    for (name, text) in SCENARIOS {
        let sc: Scenario = match toml::from_str(text) {
            Ok(s) => s,
            Err(e) => {
                bad.push(format!("{name}: {e}"));
                continue;
            }
        };
        for (mode, on, bounds) in [("on", true, &sc.expect.on), ("off", false, &sc.expect.off)] {
            let f = run(&sc, on);
            println!(
                "{name} [{mode}] {}: cold {:.1}%, hot {:.0} of {:.0} WCU/s, throttled calls {:.2}%, \
                 {:.1}% of servable, {:.1}% of table, {} keys tracked, hot lost {}",
                sc.description,
                f.cold_pct,
                f.hot_wcu,
                f.hot_offered_wcu,
                f.throttled_pct,
                f.servable_pct,
                f.table_pct,
                f.tracked_at_end,
                f.hot_lost
            );
            bad.extend(check(name, mode, &f, bounds));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The outcome must not hinge on the order in which held keys are released
/// nor on the order in which the table charges a call's items. Released in
/// hash order (a per-process seed), `one_hot_key` once gave 0.7% throttled
/// calls in most runs and 22% in one: when the hot key's items reached its
/// partition first, its cold neighbours took the throttles and were cut, the
/// hot key never was and grew to a whole partition. Every scenario's bounds
/// with pacing on must hold under each release order and charging order.
#[test]
fn scenarios_hold_whatever_the_release_and_charging_order() {
    let extremes = [Release::Turn, Release::HotFirst, Release::HotLast];
    let charges = [Charge::InOrder, Charge::Reversed, Charge::Shuffled];
    let mut cases: Vec<Case> = Vec::new();
    for (name, text) in SCENARIOS {
        let sc: Scenario = match toml::from_str(text) {
            Ok(s) => s,
            Err(e) => panic!("{name}: {e}"),
        };
        let sc = std::sync::Arc::new(sc);
        // The scenario the bound is about gets eight seeded orders
        // too and every charging order; the others the extremes (each run
        // costs about 0.2 s in a debug build).
        let (releases, charges): (Vec<Release>, &[Charge]) = if *name == "one_hot_key" {
            let seeded = (1..=8).map(Release::Seeded);
            (extremes.into_iter().chain(seeded).collect(), &charges)
        } else {
            (extremes.to_vec(), &charges[..2])
        };
        for &r in &releases {
            for &c in charges {
                cases.push((name, sc.clone(), r, c));
            }
        }
    }
    // Two threads: the runs are independent and CI has two cores.
    let half = cases.len().div_ceil(2);
    let (a, b) = cases.split_at(half);
    let bad: Vec<String> = std::thread::scope(|s| {
        let ha = s.spawn(|| run_cases(a));
        let mut bad = run_cases(b);
        match ha.join() {
            Ok(more) => bad.extend(more),
            Err(_) => bad.push("a worker thread panicked".into()),
        }
        bad
    });
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

type Case = (&'static str, std::sync::Arc<Scenario>, Release, Charge);

fn run_cases(cases: &[Case]) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, sc, r, c) in cases {
        let f = run_ordered(sc, true, *r, *c);
        let mode = format!("on, {r:?}, {c:?}");
        println!(
            "{name} [{mode}]: cold {:.1}%, throttled calls {:.2}%, hot {:.0} WCU/s, {} tracked",
            f.cold_pct, f.throttled_pct, f.hot_wcu, f.tracked_at_end
        );
        bad.extend(check(name, &mode, &f, &sc.expect.on));
    }
    bad
}
