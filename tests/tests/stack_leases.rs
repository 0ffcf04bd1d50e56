//! Lease timing against a slow lease table: a worker whose lease table stops
//! answering stops handing records on before another worker may take its
//! shard, and the other worker then takes it. The lease table of the first
//! worker sits behind a TCP relay that the test can freeze (requests and
//! responses held, as in a brownout or on a half-open connection); Kinesis
//! stays reachable, so only the lease deadline can stop the reader. Needs the
//! local stack (see docs/testing.md).

// Test helpers panic on failure like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_consumer::kinesis::{ShardState, StatusHandle};
use tidemark_consumer::{Ack, KinesisConfig, KinesisSource, Record};
use tidemark_tests::{LocalStack, put_records, stack, unique_name, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A TCP relay to `target` that holds requests and responses while frozen
/// (or only the responses: the server acts, the client hears nothing).
struct FreezingRelay {
    url: String,
    requests: watch::Sender<bool>,
    responses: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl FreezingRelay {
    async fn start(target: &str) -> FreezingRelay {
        let target = target
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = watch::Sender::new(false);
        let responses = watch::Sender::new(false);
        let (up, down) = (requests.subscribe(), responses.subscribe());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, up.clone()));
                tokio::spawn(pump(sr, cw, down.clone()));
            }
        });
        FreezingRelay {
            url,
            requests,
            responses,
            task,
        }
    }

    /// Holds (or lets through) traffic both ways.
    fn freeze(&self, on: bool) {
        self.requests.send_replace(on);
        self.responses.send_replace(on);
    }

    /// Holds (or lets through) the responses only.
    fn freeze_responses(&self, on: bool) {
        self.responses.send_replace(on);
    }
}

impl Drop for FreezingRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, holding each chunk while the relay is frozen.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.wait_for(|f| !*f).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn config(stream: &str, leases: &str, worker: &str) -> KinesisConfig {
    let mut c = KinesisConfig::new(stream, leases, worker);
    c.failover_time = Duration::from_secs(4);
    c.checkpoint_interval = Duration::from_millis(500);
    c.shard_sync_interval = Duration::from_secs(2);
    c.idle_poll = Duration::from_millis(100);
    c.shutdown_grace = Duration::from_secs(2);
    c
}

/// A running source whose sink acknowledges every record at once and notes
/// when each batch arrived.
struct Consumer {
    status: StatusHandle,
    batches: Arc<Mutex<Vec<Instant>>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

fn consume(
    stack: &LocalStack,
    config: KinesisConfig,
    dynamodb: aws_sdk_dynamodb::Client,
) -> Consumer {
    let source = KinesisSource::new(config, stack.kinesis(), dynamodb);
    let status = source.status_handle();
    let (tx, mut rx) = mpsc::channel::<Vec<Record>>(4);
    let stop = CancellationToken::new();
    let batches = Arc::new(Mutex::new(Vec::new()));
    let seen = batches.clone();
    let run = tokio::spawn(source.run(tx, stop.clone()));
    let task = tokio::spawn(async move {
        while let Some(batch) = rx.recv().await {
            seen.lock().unwrap().push(Instant::now());
            Ack::done_all(batch.into_iter().map(|r| r.ack));
        }
        let _ = run.await;
    });
    Consumer {
        status,
        batches,
        stop,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_reader_stops_before_another_worker_may_take_its_shard() {
    let stack = stack().await;
    let stream = unique_name("lease-slow");
    tidemark_tests::create_stream(&stack.kinesis(), &stream, 1).await;
    let leases = format!("{stream}-leases");
    // Records keep arriving throughout, so a reader that kept going would
    // keep delivering.
    let producing = CancellationToken::new();
    let producer = {
        let k = stack.kinesis();
        let stream = stream.clone();
        let stop = producing.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                let rec = (format!("pk-{n}"), format!("{{\"n\":{n}}}").into_bytes());
                put_records(&k, &stream, &[rec]).await;
                n += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let relay = FreezingRelay::start(&stack.dynamodb_url).await;
    let cfg_a = config(&stream, &leases, "worker-a");
    let failover = cfg_a.failover_time;
    let a = consume(&stack, cfg_a, stack.dynamodb_at(&relay.url));
    wait_until("a reads the shard", Duration::from_secs(30), || async {
        (a.batches.lock().unwrap().len() >= 3).then_some(())
    })
    .await;
    let b = consume(
        &stack,
        config(&stream, &leases, "worker-b"),
        stack.dynamodb(),
    );
    // B joins and stays idle while A renews.
    tokio::time::sleep(failover).await;
    assert!(b.status.owned_shards().is_empty(), "b took a live lease");
    assert!(b.batches.lock().unwrap().is_empty());

    // A's lease table stops answering.
    relay.freeze(true);
    let frozen_at = Instant::now();
    // Watch B's ownership closely: the moment it takes the shard.
    let b_took = {
        let deadline = frozen_at + failover * 5;
        loop {
            if !b.status.owned_shards().is_empty() {
                break Instant::now();
            }
            assert!(Instant::now() < deadline, "b never took the shard");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let a_last = *a.batches.lock().unwrap().last().unwrap();
    let a_after_freeze = a
        .batches
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t > frozen_at)
        .count();
    eprintln!(
        "a delivered {a_after_freeze} batches after the freeze, the last {:?} after it; b took the shard {:?} after it",
        a_last.saturating_duration_since(frozen_at),
        b_took.duration_since(frozen_at)
    );
    // A's last successful renewal was sent before the freeze, so its lease
    // deadline is at most freeze + failover - margin (failover / 5).
    let deadline = frozen_at + failover - failover / 5;
    assert!(
        a_last <= deadline + Duration::from_millis(100),
        "a delivered {:?} after the freeze, past its lease deadline",
        a_last.duration_since(frozen_at)
    );
    assert!(a_last < b_took, "a still delivered after b took the shard");
    // A knows: paused or lost, not reading.
    let state = a.status.snapshot().values().next().map(|s| s.state);
    assert!(
        matches!(state, Some(ShardState::Paused | ShardState::Lost)),
        "a's reader is {state:?}"
    );
    // And B reads the shard from there on.
    wait_until("b delivers", Duration::from_secs(20), || async {
        (!b.batches.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    assert!(
        *b.batches.lock().unwrap().first().unwrap() > a_last,
        "both read at once"
    );

    producing.cancel();
    producer.await.unwrap();
    relay.freeze(false);
    for c in [a, b] {
        c.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), c.task)
            .await
            .expect("the consumer stops")
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_renewal_whose_answer_was_lost_keeps_the_lease() {
    use tidemark_consumer::lease::{Checkpoint, Lease, LeaseTable, LeaseTiming};
    let stack = stack().await;
    let name = unique_name("lease-lost-answer");
    let relay = FreezingRelay::start(&stack.dynamodb_url).await;
    let timing = LeaseTiming::new(Duration::from_secs(4));
    let direct = LeaseTable::with_timing(stack.dynamodb(), &name, timing);
    direct
        .create_if_absent(Duration::from_secs(30))
        .await
        .unwrap();
    let lease = Lease::new("shardId-000000000000", Checkpoint::TrimHorizon, vec![]);
    assert!(direct.create_lease(&lease).await.unwrap());
    let held = direct.acquire(&lease, "w").await.unwrap().expect("taken");
    let relayed = LeaseTable::with_timing(stack.dynamodb_at(&relay.url), &name, timing);
    // Warm the relayed client's connection pool, so the renewal below is
    // one request on an open connection.
    relayed.get(&lease.key).await.unwrap();

    // The server applies the first attempt, but its answer is held past the
    // attempt timeout; the answers flow again before the write's deadline.
    relay.freeze_responses(true);
    let renewal = tokio::spawn(async move { relayed.renew(&lease.key, "w", held.counter).await });
    tokio::time::sleep(timing.attempt + (timing.writes - timing.attempt) / 2).await;
    relay.freeze_responses(false);
    let renewed = renewal
        .await
        .unwrap()
        .expect("answered within the deadline");
    let renewed = renewed.expect("our own applied write is recognised, not a lost lease");
    assert_eq!(renewed.counter, held.counter + 1);
    let item = direct.get("shardId-000000000000").await.unwrap().unwrap();
    assert_eq!(
        (item.owner.as_deref(), item.counter),
        (Some("w"), held.counter + 1),
        "applied exactly once"
    );
}
