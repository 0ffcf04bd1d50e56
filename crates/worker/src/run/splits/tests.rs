//! The decision loop in simulated time: the real hot-key hook, decision
//! task and refresh task against an in-memory split store with DynamoDB's
//! conditional-write semantics, under a simulated wall clock. The writer is
//! played by a feeder that reports a held partition key about once a second
//! (as `tidemark_writer`'s table task does), with the items waiting keyed by
//! what the worker knows of the splits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Mutex;

use tidemark_schema::strategy::{Bucket, KeyStrategy};
use tidemark_schema::{ItemKey, RouterConfig, shard_of};
use tidemark_writer::HotKeys;
use tokio::task::JoinHandle;

use super::*;

const HOT: &str = "sensor-alpha-001";
/// 2026-11-22T10:00:00Z: a fixed simulated wall clock, far from a period's
/// end.
const BASE_MS: i64 = 1_795_341_600_000;
const THRESHOLD: Duration = Duration::from_secs(10);
const LEARN: Duration = Duration::from_secs(20);

/// One conditional PutItem the fake saw.
#[derive(Debug, Clone)]
struct Put {
    split: Split,
    written: bool,
}

#[derive(Debug, Default)]
struct State {
    /// (table, sort key) -> record: the item key of a split record.
    records: BTreeMap<(String, String), Split>,
    puts: Vec<Put>,
}

/// The split records of every table, shared by the workers of a test.
#[derive(Debug, Clone, Default)]
struct Fake(Arc<Mutex<State>>);

impl Fake {
    fn puts(&self) -> Vec<Put> {
        self.0.lock().unwrap().puts.clone()
    }

    fn records(&self) -> Vec<Split> {
        self.0.lock().unwrap().records.values().cloned().collect()
    }
}

impl SplitStore for Fake {
    async fn load(
        &self,
        table: &str,
        _attrs: &KeyAttributes,
        entity: Option<&str>,
    ) -> Result<Option<TableSplits>, SplitCallError> {
        // A call takes a turn, as a network call would.
        tokio::task::yield_now().await;
        let st = self.0.lock().unwrap();
        Ok(Some(TableSplits::from_splits(
            st.records
                .iter()
                .filter(|((t, _), s)| t == table && entity.is_none_or(|e| s.entity == e))
                .map(|(_, s)| s.clone()),
        )))
    }

    async fn record(
        &self,
        table: &str,
        _attrs: &KeyAttributes,
        split: &Split,
    ) -> Result<bool, SplitCallError> {
        tokio::task::yield_now().await;
        let mut st = self.0.lock().unwrap();
        let key = (table.to_owned(), split.sort_key());
        let written = !st.records.contains_key(&key);
        if written {
            st.records.insert(key, split.clone());
        }
        st.puts.push(Put {
            split: split.clone(),
            written,
        });
        Ok(written)
    }
}

/// A simulated wall clock: `BASE_MS` plus `skew_ms` plus the simulated time
/// since it was made.
fn sim_clock(skew_ms: i64) -> Now {
    let t0 = tokio::time::Instant::now();
    Arc::new(move || BASE_MS + skew_ms + t0.elapsed().as_millis() as i64)
}

fn config() -> RouterConfig {
    let mut c = RouterConfig::with_prefix("t");
    c.key = KeyStrategy::TimeBucket {
        shards: 10,
        bucket: Bucket::Hour,
    };
    c.adaptive_sharding.enabled = true;
    c.adaptive_sharding.max_fan_out = 8;
    c.adaptive_sharding.hold_threshold = THRESHOLD;
    c.adaptive_sharding.refresh_interval = Duration::from_secs(5);
    c.adaptive_sharding.learn_delay = LEARN;
    c
}

/// One worker's split machinery: router (with its registry), the writer's
/// hook, and its refresh and decision tasks.
struct Worker {
    router: Arc<Router>,
    hook: Option<SplitRequests>,
    now: Now,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Worker {
    async fn start(store: &Fake, name: &str, skew_ms: i64) -> Worker {
        let router = Arc::new(Router::new(config()).unwrap());
        let now = sim_clock(skew_ms);
        first_refresh(store, &now, &router).await;
        let (hook, rx) = requests(&router);
        let stop = CancellationToken::new();
        let tasks = vec![
            tokio::spawn(refresh_task(
                store.clone(),
                now.clone(),
                router.clone(),
                stop.clone(),
            )),
            tokio::spawn(decide_task(
                store.clone(),
                now.clone(),
                router.clone(),
                name.to_owned(),
                rx,
            )),
        ];
        Worker {
            router,
            hook: Some(hook),
            now,
            stop,
            tasks,
        }
    }

    /// The table an event at this worker's now goes to.
    fn table(&self) -> String {
        let c = self.router.config();
        let naming = tidemark_schema::period::TableNaming {
            prefix: c.table_prefix.clone(),
            period: c.period,
        };
        naming.name_of(&naming.period.containing((self.now)()))
    }

    /// The key of `entity`'s event `id` at `ts_ms`, as the router keys it
    /// with what this worker knows (the router holds an event its splits
    /// are not known for: `None`).
    fn key(&self, entity: &str, ts_ms: i64, id: &str) -> Option<ItemKey> {
        let table = self.table();
        let splits = self.router.splits();
        let fan_out = splits
            .fan_out(splits.get(&table).as_ref(), &table, entity, ts_ms)
            .ok()?;
        let base = self.router.config().key.key(entity, ts_ms, id);
        Some(tidemark_schema::split::split_key(base, id, fan_out))
    }

    /// The items waiting on `entity`'s base partition key, as the writer
    /// names them: `n` events of `entity` from `age` ago, plus `cold`
    /// events of each entity in `others`, keyed as this worker keys them;
    /// only those on the base key (sub-key 0), oldest first.
    fn waiting(&self, entity: &str, n: u32, age: Duration, others: &[&str]) -> Vec<ItemKey> {
        let ts = (self.now)() - age.as_millis() as i64;
        let base = self.router.config().key.key(entity, ts, "x");
        let mut out = Vec::new();
        for (e, count) in std::iter::once((entity, n)).chain(others.iter().map(|o| (*o, 3))) {
            for i in 0..count {
                let id = format!("{e}-{ts}-{i}");
                if let Some(k) = self.key(e, ts, &id)
                    && k.pk() == base.pk()
                {
                    out.push(k);
                }
            }
        }
        out.truncate(64);
        out
    }

    /// The writer's report: the base key of `entity` held for `held_for`.
    fn held(&self, waiting: &[ItemKey], held_for: Duration) {
        let hook = self.hook.as_ref().expect("running");
        hook.held(&self.table(), waiting, held_for, 1000.0);
    }

    async fn stop(mut self) {
        self.hook = None;
        self.stop.cancel();
        for t in self.tasks.drain(..) {
            t.await.unwrap();
        }
    }
}

/// Data safety of a split, checked at every step: no worker keys an event
/// at or after a recorded split's start by a smaller fan-out (it knows the
/// split, or it holds the event until it does).
fn assert_no_write_before_learned(workers: &[&Worker], store: &Fake) {
    for w in workers {
        let table = w.table();
        let learned = w.router.splits().get(&table);
        for s in store.records() {
            if let Ok(f) = w
                .router
                .splits()
                .fan_out(learned.as_ref(), &table, &s.entity, s.from_ms)
            {
                assert_eq!(
                    f,
                    s.fan_out,
                    "an event at the start of {} would be keyed by fan-out {f}",
                    s.describe()
                );
            }
        }
    }
}

/// An entity of the same time_bucket shard as `HOT` (sharing its partition
/// key), to stand for a cold neighbour.
fn cold_neighbour() -> String {
    let hot = shard_of(HOT, 10);
    (0..)
        .map(|i| format!("sensor-{i}"))
        .find(|e| shard_of(e, 10) == hot)
        .unwrap()
}

/// A second of simulated time, then the feeder's report.
async fn tick() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_key_held_for_the_threshold_gets_its_entity_split_recorded_before_any_write_uses_it() {
    let store = Fake::default();
    let w = Worker::start(&store, "worker-a", 0).await;
    let cold = cold_neighbour();
    let table = w.table();
    let started = (w.now)();
    // Held back for 1 s, 2 s, ... 9 s: nothing recorded.
    for s in 1..10 {
        tick().await;
        w.held(
            &w.waiting(HOT, 40, Duration::from_secs(1), &[&cold]),
            Duration::from_secs(s),
        );
        assert_no_write_before_learned(&[&w], &store);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        store.puts().is_empty(),
        "split before the threshold: {:?}",
        store.puts()
    );
    // 10 s: the hot entity (most items waiting), not its cold neighbour.
    tick().await;
    let decided_at = (w.now)();
    w.held(
        &w.waiting(HOT, 40, Duration::from_secs(1), &[&cold]),
        THRESHOLD,
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let puts = store.puts();
    assert_eq!(puts.len(), 1, "{puts:?}");
    let s = &puts[0].split;
    assert!(puts[0].written);
    assert_eq!((s.entity.as_str(), s.fan_out), (HOT, 2));
    assert_eq!(s.worker, "worker-a");
    assert!(s.evidence.contains("held back 10.0s"), "{}", s.evidence);
    // It applies from `learn_delay` after it was recorded: every worker
    // re-reads the splits by then.
    assert!(
        s.from_ms >= decided_at + LEARN.as_millis() as i64,
        "{} starts before {decided_at} + learn_delay",
        s.describe()
    );
    assert!(s.made_at_ms >= started + THRESHOLD.as_millis() as i64 - 1000);
    // Learned at once (the decision asks for the table), and keys by it
    // from its start on, not before.
    let learned = w.router.splits().get(&table).unwrap();
    assert_eq!(learned.splits.max_fan_out(HOT), 2);
    assert_eq!(learned.splits.fan_out_at(HOT, s.from_ms - 1), 1);
    assert_eq!(learned.splits.fan_out_at(HOT, s.from_ms), 2);
    assert_eq!(learned.splits.max_fan_out(&cold), 1);
    assert_no_write_before_learned(&[&w], &store);
    // Keys of events past the start: two partition keys.
    let from = s.from_ms;
    tokio::time::sleep(Duration::from_secs(25)).await;
    let pks: std::collections::BTreeSet<String> = (0..100)
        .map(|i| {
            w.key(HOT, from + 1, &format!("e{i}"))
                .unwrap()
                .pk()
                .to_owned()
        })
        .collect();
    assert_eq!(pks.len(), 2, "{pks:?}");
    w.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_key_held_less_than_the_threshold_or_a_cold_key_gets_no_split() {
    let store = Fake::default();
    let w = Worker::start(&store, "worker-a", 0).await;
    let cold = cold_neighbour();
    // Held 9 s at a time, with a pause between (the writer's hold starts
    // anew), for two minutes: never split.
    for s in 0..120u64 {
        tick().await;
        let held = s % 11;
        if held < 10 {
            w.held(
                &w.waiting(HOT, 40, Duration::from_secs(1), &[&cold]),
                Duration::from_secs(held),
            );
        }
    }
    // A cold key never held back is never named; one held back for long,
    // but at a rate far below a partition, is not named by the writer
    // either (see `held_at_limit`): here, the hook hears nothing of it.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(store.puts().is_empty(), "{:?}", store.puts());
    assert!(w.router.splits().get(&w.table()).unwrap().splits.is_empty());
    w.stop().await;
}

#[tokio::test(start_paused = true)]
async fn fan_out_steps_2_4_8_while_the_entity_is_held_and_stops_at_max_fan_out() {
    let store = Fake::default();
    let w = Worker::start(&store, "worker-a", 0).await;
    // The writer holds the entity's base key without a pause for four
    // minutes: its items wait 2 s, each keyed by the splits known when it
    // was routed.
    for s in 1..=240u64 {
        tick().await;
        w.held(
            &w.waiting(HOT, 64, Duration::from_secs(2), &[]),
            Duration::from_secs(s),
        );
        assert_no_write_before_learned(&[&w], &store);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let puts = store.puts();
    let written: Vec<&Split> = puts
        .iter()
        .filter(|p| p.written)
        .map(|p| &p.split)
        .collect();
    assert_eq!(
        written.iter().map(|s| s.fan_out).collect::<Vec<_>>(),
        [2, 4, 8],
        "{written:?}"
    );
    // Each step needs the entity held for `hold_threshold` with its items
    // keyed by the fan-out before: a key held since before the last split
    // is no evidence that the split did not help.
    for pair in written.windows(2) {
        let (before, after) = (pair[0], pair[1]);
        assert!(
            after.made_at_ms >= before.from_ms + THRESHOLD.as_millis() as i64,
            "{} decided {} ms after {} started; the entity was not held for {THRESHOLD:?} at fan-out {}",
            after.describe(),
            after.made_at_ms - before.from_ms,
            before.describe(),
            before.fan_out
        );
        assert!(after.from_ms > before.from_ms);
        // The log line's evidence is the hold at the fan-out before, not
        // the key's whole hold since the burst began.
        let evidence = format!("at fan-out {} and", before.fan_out);
        assert!(after.evidence.contains(&evidence), "{}", after.evidence);
        let held: f64 = after.evidence["key ".len()..]
            .split(" held back ")
            .nth(1)
            .and_then(|t| t.split('s').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no hold in {}", after.evidence));
        let since_before = (after.made_at_ms - before.made_at_ms) as f64 / 1000.0;
        assert!(
            held < since_before,
            "{} (held {held}s, {since_before}s after the split before)",
            after.evidence
        );
    }
    // Never past max_fan_out, however long it stays held.
    assert!(puts.iter().all(|p| p.split.fan_out <= 8), "{puts:?}");
    let learned = w.router.splits().get(&w.table()).unwrap();
    assert_eq!(learned.splits.max_fan_out(HOT), 8);
    w.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_worker_racing_for_the_same_split_loses_the_conditional_write_and_adopts_the_winners_record()
 {
    let store = Fake::default();
    // Worker B's clock is 700 ms ahead: its own copy of the split would
    // start 700 ms later than the winner's.
    let a = Worker::start(&store, "worker-a", 0).await;
    let b = Worker::start(&store, "worker-b", 700).await;
    for s in 1..=12u64 {
        tick().await;
        // Both hold the entity's key (each writes part of its events).
        for w in [&a, &b] {
            w.held(
                &w.waiting(HOT, 40, Duration::from_secs(1), &[]),
                Duration::from_secs(s),
            );
        }
        assert_no_write_before_learned(&[&a, &b], &store);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let puts = store.puts();
    let of_2: Vec<&Put> = puts.iter().filter(|p| p.split.fan_out == 2).collect();
    assert!(
        of_2.iter().any(|p| p.split.worker == "worker-a")
            && of_2.iter().any(|p| p.split.worker == "worker-b"),
        "both workers decide the split: {puts:?}"
    );
    let won: Vec<&Split> = of_2
        .iter()
        .filter(|p| p.written)
        .map(|p| &p.split)
        .collect();
    assert_eq!(won.len(), 1, "one record: {puts:?}");
    let winner = won[0].clone();
    // Both key by the winner's record, the loser's own copy forgotten.
    for w in [&a, &b] {
        let learned = w.router.splits().get(&w.table()).unwrap();
        assert_eq!(learned.splits.of(HOT), std::slice::from_ref(&winner));
    }
    assert_no_write_before_learned(&[&a, &b], &store);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_split_entity_whose_base_key_never_drains_its_backlog_from_before_the_split_steps_again()
{
    let store = Fake::default();
    let w = Worker::start(&store, "worker-a", 0).await;
    let start = (w.now)();
    // The base key is held without a pause: at fan-out 2 it still takes
    // more than a partition serves (half the hot entity plus its cold
    // neighbours), so the backlog from before the split never drains. The
    // writer names the 32 oldest items waiting on it (from the first
    // seconds) and the 32 newest (2 s old, keyed by what is known now).
    for s in 1..=120u64 {
        tick().await;
        let oldest = w.waiting(
            HOT,
            64,
            Duration::from_millis(((w.now)() - start - 1000).max(0) as u64),
            &[],
        );
        let newest = w.waiting(HOT, 64, Duration::from_secs(2), &[]);
        let mut waiting: Vec<ItemKey> = oldest.into_iter().take(32).collect();
        waiting.extend(newest.into_iter().take(32));
        w.held(&waiting, Duration::from_secs(s));
        assert_no_write_before_learned(&[&w], &store);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let written: Vec<Split> = store
        .puts()
        .into_iter()
        .filter(|p| p.written)
        .map(|p| p.split)
        .collect();
    let fan_outs: Vec<u32> = written.iter().map(|s| s.fan_out).collect();
    assert!(
        fan_outs.starts_with(&[2, 4]),
        "the entity's items at fan-out 2 were held for minutes and it was not split again: {written:?}"
    );
    // Still not before it was held for `hold_threshold` at fan-out 2.
    assert!(written[1].made_at_ms >= written[0].from_ms + THRESHOLD.as_millis() as i64);
    w.stop().await;
}
