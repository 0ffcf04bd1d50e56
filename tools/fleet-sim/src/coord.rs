//! The in-memory coordinator table of leader mode: the leader lock and the
//! worker heartbeats behind the consumer's `CoordStore` trait, with the same
//! conditions as `DynamoCoord`, its wall clock following simulated time, and
//! capacity metered by the lease table's rules (items of about 100 bytes:
//! a GetItem costs 0.5 RCU eventually consistent, a heartbeat Scan the
//! sum of its items rounded up to 4 KB, every write 1 WCU).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use tidemark_consumer::ConsumerError;
use tidemark_consumer::error::{AwsError, ErrorClass};
use tidemark_consumer::sim::{Heartbeat, LeaderLock, LeaderStore};
use tokio::time::Instant;

/// Bytes of a heartbeat item (key, worker id, timestamp).
const HEARTBEAT_BYTES: usize = 100;

/// What the coordinator table did in one simulated second.
#[derive(Debug, Clone, Copy, Default)]
pub struct CoordSecond {
    /// Read units.
    pub rcu: f64,
    /// Write units.
    pub wcu: f64,
}

#[derive(Debug, Default)]
struct State {
    /// Workers whose writes fail (cut off from the table).
    cut: BTreeSet<String>,
    lock: Option<LeaderLock>,
    beats: BTreeMap<String, u64>,
    seconds: Vec<CoordSecond>,
}

/// The coordinator table, shared by every simulated worker.
#[derive(Debug)]
pub struct MemCoord {
    start: Instant,
    latency: Duration,
    /// Wall clock at `start` (epoch ms), so stamps look real.
    epoch_ms: u64,
    state: Mutex<State>,
}

impl MemCoord {
    /// An empty coordinator table; calls take `latency`.
    pub fn new(latency: Duration) -> Self {
        Self {
            start: Instant::now(),
            latency,
            epoch_ms: 1_800_000_000_000,
            state: Mutex::new(State::default()),
        }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Per-second capacity, from the start.
    pub fn seconds(&self) -> Vec<CoordSecond> {
        self.lock_state().seconds.clone()
    }

    /// From now on `worker`'s heartbeat and lock writes fail (as if its
    /// connection to the table were gone); its reads still work.
    pub fn cut_off(&self, worker: &str) {
        self.lock_state().cut.insert(worker.to_string());
    }

    /// The workers cut off.
    pub fn cut(&self) -> BTreeSet<String> {
        self.lock_state().cut.clone()
    }

    /// The current leader, if any.
    pub fn leader(&self) -> Option<String> {
        self.lock_state().lock.as_ref().map(|l| l.owner.clone())
    }

    fn charge(&self, st: &mut State, rcu: f64, wcu: f64) {
        let sec = Instant::now().duration_since(self.start).as_secs() as usize;
        if st.seconds.len() <= sec {
            st.seconds.resize(sec + 1, CoordSecond::default());
        }
        st.seconds[sec].rcu += rcu;
        st.seconds[sec].wcu += wcu;
    }

    async fn delay(&self) {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
    }
}

impl LeaderStore for MemCoord {
    fn ensure(&self, _timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
        Box::pin(async { Ok(()) })
    }

    fn now_ms(&self) -> u64 {
        self.epoch_ms + Instant::now().duration_since(self.start).as_millis() as u64
    }

    fn heartbeat<'a>(&'a self, worker: &'a str, at_ms: u64) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(async move {
            self.delay().await;
            let mut st = self.lock_state();
            if st.cut.contains(worker) {
                return Err(unreachable("PutItem(heartbeat)"));
            }
            self.charge(&mut st, 0.0, 1.0);
            st.beats.insert(worker.to_string(), at_ms);
            Ok(())
        })
    }

    fn remove_heartbeat<'a>(&'a self, worker: &'a str) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(async move {
            self.delay().await;
            let mut st = self.lock_state();
            self.charge(&mut st, 0.0, 1.0);
            st.beats.remove(worker);
            Ok(())
        })
    }

    fn heartbeats(&self) -> BoxFuture<'_, Result<Vec<Heartbeat>, AwsError>> {
        Box::pin(async move {
            self.delay().await;
            let mut st = self.lock_state();
            let bytes = (st.beats.len() * HEARTBEAT_BYTES).max(1);
            self.charge(&mut st, bytes.div_ceil(4096) as f64 / 2.0, 0.0);
            Ok(st
                .beats
                .iter()
                .map(|(w, t)| Heartbeat {
                    worker: w.clone(),
                    at_ms: *t,
                })
                .collect())
        })
    }

    fn lock(&self) -> BoxFuture<'_, Result<Option<LeaderLock>, AwsError>> {
        Box::pin(async move {
            self.delay().await;
            let mut st = self.lock_state();
            self.charge(&mut st, 0.5, 0.0);
            Ok(st.lock.clone())
        })
    }

    fn write_lock<'a>(
        &'a self,
        me: &'a str,
        seen: Option<u64>,
        at_ms: u64,
    ) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(async move {
            self.delay().await;
            let mut st = self.lock_state();
            if st.cut.contains(me) {
                return Err(unreachable("PutItem(leader lock)"));
            }
            self.charge(&mut st, 0.0, 1.0);
            if st.lock.as_ref().map(|l| l.counter) != seen {
                return Err(refused("PutItem(leader lock)"));
            }
            st.lock = Some(LeaderLock {
                owner: me.to_string(),
                counter: seen.map_or(1, |c| c + 1),
                at_ms,
            });
            Ok(())
        })
    }

    fn release_lock<'a>(
        &'a self,
        me: &'a str,
        counter: u64,
    ) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(async move {
            self.delay().await;
            let mut st = self.lock_state();
            self.charge(&mut st, 0.0, 1.0);
            match &st.lock {
                Some(l) if l.owner == me && l.counter == counter => {
                    st.lock = None;
                    Ok(())
                }
                _ => Err(refused("DeleteItem(leader lock)")),
            }
        })
    }
}

fn unreachable(op: &'static str) -> AwsError {
    AwsError {
        op,
        class: ErrorClass::Retry,
        message: "connection lost (simulated)".into(),
    }
}

fn refused(op: &'static str) -> AwsError {
    AwsError {
        op,
        class: ErrorClass::ConditionFailed,
        message: "The conditional request failed".into(),
    }
}
