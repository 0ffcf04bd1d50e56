//! Health that follows progress: [`StallWatch`], the rule by which
//! `/healthz` turns 503 when the worker has made no progress for
//! `telemetry.stall_timeout` while it holds work, and [`watch`], the task
//! that applies it to the process's metrics once a second.
//!
//! Progress is any of: a record read, an item stored, a dead letter
//! written, a lease renewed or checkpointed, an SQS message received or
//! deleted. Work held is any of: items in the writer, leases held, SQS
//! messages in flight, a shard known to be behind its stream's tip, a
//! lease table that does not answer (the stream's work is unknown). An idle
//! worker (nothing held, nothing behind) is never stalled, however long it
//! waits: only a worker that should be moving and is not is reported, so
//! the orchestrator replaces it instead of seeing it healthy for ever.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Readiness, TypedMetrics};

/// The work a worker holds at one look; empty when idle.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Work {
    /// Items submitted to the writer and not yet stored or dead-lettered.
    pub(crate) writer_items: usize,
    /// Kinesis leases held.
    pub(crate) leases: u64,
    /// SQS messages received and not yet deleted or released.
    pub(crate) sqs_messages: u64,
    /// A shard read last was behind its stream's tip.
    pub(crate) behind: bool,
    /// The lease table does not answer: whatever the stream holds, this
    /// worker cannot know what to read.
    pub(crate) lease_table_failing: bool,
}

impl Work {
    fn is_idle(&self) -> bool {
        *self == Work::default()
    }

    /// In words, for `/healthz` and the log.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.writer_items > 0 {
            parts.push(format!("{} items in the writer", self.writer_items));
        }
        if self.leases > 0 {
            parts.push(format!("{} leases held", self.leases));
        }
        if self.sqs_messages > 0 {
            parts.push(format!("{} SQS messages in flight", self.sqs_messages));
        }
        if self.behind {
            parts.push("shards behind their tip".to_string());
        }
        if self.lease_table_failing {
            parts.push("the lease table not answering".to_string());
        }
        parts.join(", ")
    }
}

/// The stall rule over successive looks.
#[derive(Debug)]
pub(crate) struct StallWatch {
    limit: Duration,
    /// The progress total at the last look.
    last: Option<u64>,
    /// Since when the worker has held work without progress.
    since: Instant,
}

impl StallWatch {
    /// A watch reporting a stall once no progress was made for `limit`.
    pub(crate) fn new(limit: Duration, now: Instant) -> Self {
        StallWatch {
            limit,
            last: None,
            since: now,
        }
    }

    /// One look at `now`: `progress` is a total that grows with every step
    /// of progress, `work` what the worker holds. The cause when stalled,
    /// `None` when healthy.
    pub(crate) fn observe(&mut self, now: Instant, progress: u64, work: Work) -> Option<String> {
        let moved = self.last.is_some_and(|last| progress != last);
        self.last = Some(progress);
        // Progress, or nothing to make progress on: the clock restarts.
        if moved || work.is_idle() {
            self.since = now;
            return None;
        }
        let still = now.saturating_duration_since(self.since);
        (still >= self.limit).then(|| {
            format!(
                "no progress for {}s while holding work ({}): nothing read, stored, \
                 dead-lettered or renewed",
                still.as_secs(),
                work.describe()
            )
        })
    }
}

/// Applies the stall rule to the process's metrics every second until
/// `stop`, setting and clearing [`Readiness`]'s stall.
pub(crate) async fn watch(
    metrics: TypedMetrics,
    writer_items: impl Fn() -> usize,
    ready: Arc<Readiness>,
    limit: Duration,
    stop: CancellationToken,
) {
    let mut rule = StallWatch::new(limit, Instant::now());
    let mut tick = tokio::time::interval(Duration::from_secs(1).min(limit));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let s = metrics.snapshot();
        let work = Work {
            writer_items: writer_items(),
            leases: s.leases_held.max(0.0) as u64,
            sqs_messages: s.sqs_in_flight.max(0.0) as u64,
            behind: s.millis_behind.values().any(|ms| *ms > 0.0),
            lease_table_failing: s.lease_listing_failing > 0.0,
        };
        let stalled = rule.observe(Instant::now(), s.progress, work);
        match (&stalled, ready.stalled()) {
            (Some(cause), None) => warn!(%cause, "no progress: /healthz answers 503"),
            (None, Some(_)) => info!("progress again: /healthz answers 200"),
            _ => {}
        }
        ready.set_stalled(stalled);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(300);

    fn holding() -> Work {
        Work {
            leases: 2,
            ..Work::default()
        }
    }

    /// No progress for the limit while holding work is a stall, named with
    /// what is held; progress clears it at once.
    #[test]
    fn no_progress_while_holding_work_is_a_stall_until_progress() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(LIMIT, t0);
        assert_eq!(w.observe(t0, 10, holding()), None);
        assert_eq!(
            w.observe(t0 + LIMIT - Duration::from_secs(1), 10, holding()),
            None
        );
        let cause = w
            .observe(t0 + LIMIT, 10, holding())
            .expect("stalled after the limit");
        assert!(cause.contains("no progress for 300s"), "{cause}");
        assert!(cause.contains("2 leases held"), "{cause}");
        // Progress: healthy again, and the clock restarts.
        assert_eq!(
            w.observe(t0 + LIMIT + Duration::from_secs(1), 11, holding()),
            None
        );
        assert_eq!(w.observe(t0 + LIMIT * 2, 11, holding()), None);
        assert!(
            w.observe(t0 + LIMIT * 2 + Duration::from_secs(1), 11, holding())
                .is_some()
        );
    }

    /// Steady progress is never a stall, however long.
    #[test]
    fn steady_progress_is_never_a_stall() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(LIMIT, t0);
        for i in 0..100u32 {
            let now = t0 + Duration::from_secs(60) * i;
            assert_eq!(w.observe(now, u64::from(i), holding()), None);
        }
    }

    /// An idle worker (nothing held, nothing behind) is never stalled, and
    /// work arriving starts the clock anew.
    #[test]
    fn an_idle_worker_is_never_stalled() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(LIMIT, t0);
        assert_eq!(w.observe(t0, 0, Work::default()), None);
        assert_eq!(w.observe(t0 + LIMIT * 10, 0, Work::default()), None);
        let work = Work {
            sqs_messages: 3,
            ..Work::default()
        };
        assert_eq!(w.observe(t0 + LIMIT * 10, 0, work), None);
        assert_eq!(
            w.observe(t0 + LIMIT * 11 - Duration::from_secs(1), 0, work),
            None
        );
        let cause = w.observe(t0 + LIMIT * 11, 0, work).expect("stalled");
        assert!(cause.contains("3 SQS messages in flight"), "{cause}");
    }
}

#[cfg(test)]
mod watch_tests {
    use super::*;
    use crate::run::telemetry::TypedRecorder;
    use tidemark_consumer::metrics::kinesis;

    /// The task over real metrics: leases held and no renewal for the limit
    /// turns the worker stalled; a renewal makes it healthy again.
    #[tokio::test(start_paused = true)]
    async fn watch_reports_a_stall_and_its_end() {
        let recorder = TypedRecorder::new(
            metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
        );
        let typed = recorder.metrics();
        let (held, renewals) = metrics::with_local_recorder(&recorder, || {
            (
                metrics::gauge!(kinesis::LEASES_HELD),
                metrics::counter!(kinesis::LEASE_RENEWALS),
            )
        });
        held.set(2.0);
        let ready = Arc::new(Readiness::default());
        let stop = CancellationToken::new();
        let limit = Duration::from_secs(10);
        let task = tokio::spawn(watch(typed, || 0, ready.clone(), limit, stop.clone()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(ready.stalled(), None);
        tokio::time::sleep(Duration::from_secs(7)).await;
        let cause = ready
            .stalled()
            .expect("stalled after 12 s without progress");
        assert!(cause.contains("2 leases held"), "{cause}");
        renewals.increment(1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(ready.stalled(), None);
        // Nothing held, but the lease table does not answer (it hangs: no
        // refusal stops the source): a stall too.
        held.set(0.0);
        let failing = metrics::with_local_recorder(&recorder, || {
            metrics::gauge!(kinesis::LEASE_LISTING_FAILING)
        });
        failing.set(1.0);
        tokio::time::sleep(Duration::from_secs(12)).await;
        let cause = ready
            .stalled()
            .expect("stalled while the lease table fails");
        assert!(cause.contains("the lease table not answering"), "{cause}");
        failing.set(0.0);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(ready.stalled(), None);
        // Idle (nothing held): never stalled.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(ready.stalled(), None);
        stop.cancel();
        task.await.unwrap();
    }
}
