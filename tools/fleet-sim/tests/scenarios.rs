//! Every scenario file at a tenth of its size (100 shards, 10 workers), on
//! simulated time, with assertions on its figures. Full-size figures are in
//! docs/scale-out.md (`cargo run -p tidemark-fleet-sim --release`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use tidemark_fleet_sim::{Figures, Protocol, Scenario, run_blocking};

fn run(file: &str) -> Figures {
    run_as(file, Protocol::Listing)
}

fn run_as(file: &str, protocol: Protocol) -> Figures {
    run_edited(file, protocol, |_| {})
}

fn run_edited(file: &str, protocol: Protocol, edit: impl FnOnce(&mut Scenario)) -> Figures {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(file);
    let mut sc = Scenario::load(&path).unwrap().scaled_down(10);
    // Fewer GetRecords calls keep a debug build fast; lease traffic is the
    // same apart from checkpoints coming every 10 s.
    sc.idle_poll = Duration::from_secs(10);
    // A tenth of the fleet settles within seconds: events at 60 s (after a
    // 30 s steady window), and a minute after the last one.
    let shift = sc.first_event().saturating_sub(Duration::from_secs(60));
    for e in &mut sc.events {
        e.at -= shift;
    }
    sc.steady = Duration::from_secs(30);
    sc.duration = sc.last_event_end().max(Duration::from_secs(60)) + Duration::from_secs(60);
    edit(&mut sc);
    let f = run_blocking(sc, protocol).unwrap();
    eprintln!(
        "{}",
        tidemark_fleet_sim::report::table(std::slice::from_ref(&f))
    );
    f
}

/// What every scenario must show.
fn common(f: &Figures, failover: f64) {
    assert_eq!(f.dup_checkpoints, 0, "two workers checkpointed one shard");
    let owned = f.all_owned_s.expect("every shard owned in the end");
    assert!(owned <= 2.0 * failover, "owned after {owned} s");
    let balanced = f.balanced_s.expect("balanced in the end");
    assert!(balanced <= 3.0 * failover, "balanced after {balanced} s");
    assert!(
        f.wcu_per_shard_renewal <= 1.0,
        "{} WCU per shard per renewal interval",
        f.wcu_per_shard_renewal
    );
}

#[test]
fn cold_start() {
    let f = run("cold-start.toml");
    common(&f, 10.0);
    assert_eq!(f.unowned_past_failover, 0);
    // 10 workers over 100 shards: one Scan of 100 items is about 7 read
    // units; settled workers list every failover time, eventually
    // consistent.
    assert!(f.rcu_per_10_shards <= 1.0, "{}", f.rcu_per_10_shards);
}

#[test]
fn join() {
    let f = run("join.toml");
    common(&f, 10.0);
    assert!(f.balanced_s.unwrap() <= 30.0);
    assert_eq!(f.unowned_past_failover, 0);
    assert!(f.max_moves <= 1, "a lease moved {} times", f.max_moves);
}

#[test]
fn crash() {
    let f = run("crash.toml");
    common(&f, 10.0);
    assert!(f.balanced_s.unwrap() <= 20.0, "{:?}", f.balanced_s);
}

#[test]
fn rolling_deploy() {
    let f = run("rolling-deploy.toml");
    common(&f, 10.0);
    assert!(f.max_moves <= 2, "a lease moved {} times", f.max_moves);
    assert_eq!(f.unowned_past_failover, 0);
}

#[test]
fn split() {
    let f = run("split.toml");
    common(&f, 10.0);
    assert_eq!(f.unowned_past_failover, 0);
}

#[test]
fn throttled_table() {
    let f = run("throttled.toml");
    assert_eq!(f.dup_checkpoints, 0);
    assert!(f.throttled > 0, "the limits were never reached");
    assert!(f.all_owned_s.is_some() && f.balanced_s.is_some());
}

/// Leader mode (`lease_assignment = "leader"`): the same targets, and
/// lease-table reads within 1 RCU/s per 10 shards in every steady state.
fn leader(file: &str) -> Figures {
    let f = run_as(file, Protocol::Leader);
    common(&f, 10.0);
    assert!(f.rcu_per_10_shards <= 1.0, "{}", f.rcu_per_10_shards);
    assert!(f.queries_steady > 0.0, "followers query the owner index");
    f
}

#[test]
fn leader_cold_start() {
    let f = leader("cold-start.toml");
    assert_eq!(f.unowned_past_failover, 0);
    assert!(f.max_moves <= 1, "a lease moved {} times", f.max_moves);
}

#[test]
fn leader_join() {
    let f = leader("join.toml");
    assert!(f.balanced_s.unwrap() <= 30.0);
    assert_eq!(f.unowned_past_failover, 0);
    assert!(f.max_moves <= 1, "a lease moved {} times", f.max_moves);
}

#[test]
fn leader_crash() {
    // The crash kills the first workers, the leader among them.
    let f = leader("crash.toml");
    assert!(f.balanced_s.unwrap() <= 20.0, "{:?}", f.balanced_s);
}

#[test]
fn leader_rolling_deploy() {
    let f = leader("rolling-deploy.toml");
    assert!(f.max_moves <= 2, "a lease moved {} times", f.max_moves);
    assert_eq!(f.unowned_past_failover, 0);
}

#[test]
fn leader_split() {
    let f = leader("split.toml");
    assert_eq!(f.unowned_past_failover, 0);
}

#[test]
fn leader_throttled_table() {
    let f = run_as("throttled.toml", Protocol::Leader);
    assert_eq!(f.dup_checkpoints, 0);
    assert!(f.all_owned_s.is_some() && f.balanced_s.is_some());
}

#[test]
fn leader_isolated_workers_stop_reading_before_their_leases_move() {
    // The crash scenario, but the first worker (the leader) and the next
    // keep running with their coordinator-table writes failing: their
    // heartbeats go stale, so the leader hands their leases out without
    // waiting for the counters; they must have stopped reading first.
    let f = run_edited("crash.toml", Protocol::Leader, |sc| {
        for e in &mut sc.events {
            e.kind = tidemark_fleet_sim::scenario::EventKind::Isolate;
            e.count = 2;
        }
    });
    assert_eq!(f.dup_checkpoints, 0);
    assert_eq!(f.dup_hold_shard_s, 0, "a shard read by two workers");
    assert_eq!(
        f.dup_submits, 0,
        "records of one shard handed on by two workers"
    );
    assert_eq!(f.isolated_holding, 0, "isolated workers still hold leases");
}
