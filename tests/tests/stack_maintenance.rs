//! The fenced maintenance lease (`tidemark_worker::maintenance`) against the
//! local DynamoDB: two workers, exactly one maintains; a dead holder is
//! replaced within the documented time (failover + interval after its last
//! renewal); a stale holder's actions are refused, and its round creates no
//! table. Needs the local stack (see docs/testing.md).

// Test helpers panic on failure like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use futures::future::BoxFuture;
use tidemark_tests::{LocalStack, stack, unique_name, wait_until};
use tidemark_worker::maintenance::{MaintenanceLease, RoundKind, TablesError, maintain};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Long enough that the emulator's latency on a busy 2-core machine stays
/// far below the lease's attempt timeout (interval × 3 / 8).
const INTERVAL: Duration = Duration::from_secs(1);

fn lease(stack: &LocalStack, table: &str, owner: &str) -> MaintenanceLease {
    MaintenanceLease::new(stack.dynamodb(), table.into(), owner.into(), INTERVAL)
}

/// A round that records when it ran, after confirming the lease as a real
/// round does before each mutating call.
fn counting(
    rounds: Arc<Mutex<Vec<Instant>>>,
) -> impl for<'a> FnMut(&'a MaintenanceLease) -> BoxFuture<'a, ()> {
    move |lease| {
        let rounds = rounds.clone();
        Box::pin(async move {
            if lease.confirm().await.is_ok() {
                rounds.lock().unwrap().push(Instant::now());
            }
        })
    }
}

struct Maintainer {
    rounds: Arc<Mutex<Vec<Instant>>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

fn start(stack: &LocalStack, table: &str, owner: &str) -> Maintainer {
    let rounds = Arc::new(Mutex::new(Vec::new()));
    let stop = CancellationToken::new();
    let task = tokio::spawn(maintain(
        lease(stack, table, owner),
        stop.clone(),
        counting(rounds.clone()),
    ));
    Maintainer { rounds, stop, task }
}

impl Maintainer {
    fn count(&self) -> usize {
        self.rounds.lock().unwrap().len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn two_workers_exactly_one_maintains_and_a_dead_holder_is_replaced_in_time() {
    let stack = stack().await;
    let table = unique_name("coord");
    let a = start(&stack, &table, "worker-a");
    let b = start(&stack, &table, "worker-b");
    wait_until(
        "a maintenance round ran",
        Duration::from_secs(20),
        || async { (a.count() + b.count() > 0).then_some(()) },
    )
    .await;
    // Several intervals with both alive: one of them maintains, the other
    // never does.
    tokio::time::sleep(INTERVAL * 5).await;
    let (na, nb) = (a.count(), b.count());
    assert!(
        (na >= 3 && nb == 0) || (nb >= 3 && na == 0),
        "rounds: a {na}, b {nb}"
    );
    let (holder, other) = if na > 0 { (a, b) } else { (b, a) };
    // The holder dies without releasing (a crash).
    holder.task.abort();
    let died = Instant::now();
    let last_round = *holder.rounds.lock().unwrap().last().unwrap();
    let took = wait_until(
        "the other worker took over",
        Duration::from_secs(30),
        || async { other.rounds.lock().unwrap().first().copied() },
    )
    .await;
    let failover = INTERVAL * 3;
    // Documented bound: failover + interval after the last renewal (the dead
    // holder renewed at most an interval before it died), plus a round.
    let bound = failover + INTERVAL * 2;
    eprintln!(
        "takeover {:?} after the holder died, {:?} after its last round",
        took.duration_since(died),
        took.duration_since(last_round)
    );
    assert!(
        took.duration_since(died) <= bound,
        "took over {:?} after the holder died (bound {bound:?})",
        took.duration_since(died)
    );
    // Never before the holder's lease could have expired (less the time
    // between the confirmation's send and the round's timestamp).
    assert!(
        took.duration_since(last_round) >= failover - INTERVAL / 5,
        "took over {:?} after the holder's last confirmed round",
        took.duration_since(last_round)
    );
    other.stop.cancel();
    other.task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_released_lease_is_taken_at_the_next_poll() {
    let stack = stack().await;
    let table = unique_name("coord");
    let a = start(&stack, &table, "worker-a");
    wait_until("a maintains", Duration::from_secs(20), || async {
        (a.count() > 0).then_some(())
    })
    .await;
    let b = start(&stack, &table, "worker-b");
    tokio::time::sleep(INTERVAL * 2).await;
    assert_eq!(b.count(), 0, "b waits while a holds the lease");
    a.stop.cancel();
    a.task.await.unwrap();
    let released = Instant::now();
    let took = wait_until("b took over", Duration::from_secs(20), || async {
        b.rounds.lock().unwrap().first().copied()
    })
    .await;
    eprintln!(
        "taken {:?} after the release",
        took.duration_since(released)
    );
    assert!(
        took.duration_since(released) <= INTERVAL * 2,
        "took {:?} after the release",
        took.duration_since(released)
    );
    b.stop.cancel();
    b.task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_stale_holders_actions_are_refused() {
    let stack = stack().await;
    let table = unique_name("coord");
    let a = lease(&stack, &table, "worker-a");
    let b = lease(&stack, &table, "worker-b");
    a.ensure_table().await.unwrap();
    assert!(a.tick().await.unwrap(), "a takes the free lease");
    assert!(!b.tick().await.unwrap(), "b sees it held");
    // A stalls (a long GC pause, a frozen task) and renews nothing; b takes
    // the lease once its counter stayed put for the failover time.
    let stalled = Instant::now();
    wait_until(
        "b takes the expired lease",
        Duration::from_secs(20),
        || async { b.tick().await.unwrap().then_some(()) },
    )
    .await;
    assert!(stalled.elapsed() >= a.failover(), "taken before expiry");
    // A wakes up believing it holds the lease: every action is refused.
    assert!(a.is_held().await);
    let refused = a.confirm().await.unwrap_err();
    assert!(
        refused.to_string().contains("taken by another worker"),
        "{refused}"
    );
    assert!(!a.is_held().await);
    // And a whole maintenance round of the stale holder changes nothing:
    // the tables it would create are not created.
    let a = lease(&stack, &table, "worker-a");
    assert!(!a.tick().await.unwrap());
    let prefix = unique_name("stale");
    let dir = std::env::temp_dir().join(&prefix);
    let toml = tidemark_tests::worker::test_toml(
        &tidemark_tests::worker::kinesis_source(&prefix),
        &prefix,
        &dir.join("dead.jsonl"),
        "127.0.0.1:0",
    );
    let config = tidemark_tests::worker::config(&dir, &toml);
    let manager =
        tidemark_worker::maintenance::TableManager::from_config(&config, stack.dynamodb());
    match manager
        .round_guarded(
            Utc::now(),
            RoundKind::Rotate,
            false,
            &a,
            &Default::default(),
        )
        .await
    {
        Err(TablesError::Refused { action, .. }) => assert_eq!(action, "create"),
        other => panic!("expected a refused round, got {other:?}"),
    }
    let tables = stack.dynamodb().list_tables().send().await.unwrap();
    assert!(
        !tables.table_names().iter().any(|t| t.starts_with(&prefix)),
        "a stale holder created a table"
    );
    // The current holder is unaffected.
    b.confirm().await.unwrap();
}
