//! [`ShardReader`]: one leased shard's reader state, and what every way of
//! reading it (polling, fan-out) and of ending it (shard end, shutdown
//! drain) does the same way: stop on a lost lease or shutdown, submit only
//! while the lease is live, fenced checkpoint and release writes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use tidemark_schema::SharedStr;

use crate::kinesis::checkpoint::AckTracker;
use crate::kinesis::convert::ShardOut;
use crate::kinesis::held::HeldLease;
use crate::kinesis::lease::item::Checkpoint;
use crate::kinesis::lease::timing::LeasePhase;
use crate::kinesis::run::{StreamRun, with};
use crate::kinesis::status::ShardState;
use crate::metrics::kinesis as metric;
use crate::record::Record;

/// Why a reader stops reading.
#[derive(Debug)]
pub(crate) enum Stop {
    /// Lease lost: no more writes.
    Lost,
    /// Shutdown: drain, checkpoint, release.
    Shutdown,
}

/// The reader of one leased shard.
#[derive(Debug)]
pub(crate) struct ShardReader {
    pub(crate) stream: Arc<StreamRun>,
    pub(crate) shard: String,
    pub(crate) lease: Arc<HeldLease>,
    /// Send times of successful renewals of `lease`.
    pub(crate) renewed: watch::Receiver<Instant>,
    /// The shard's acknowledgements (also the held lease's: the renewer
    /// checkpoints from them).
    pub(crate) tracker: Arc<AckTracker>,
    /// Positions (user records) handed to the sink so far: registered ones
    /// after them (a batch dropped at shutdown) can never be acknowledged,
    /// so a drain waits only for these.
    pub(crate) handed: u64,
}

impl ShardReader {
    /// The reader of `lease`, whose acknowledgements go to its tracker.
    pub(crate) fn new(stream: Arc<StreamRun>, lease: Arc<HeldLease>) -> Self {
        Self {
            stream,
            shard: lease.key.clone(),
            renewed: lease.renewed.subscribe(),
            tracker: lease.tracker.clone(),
            lease,
            handed: 0,
        }
    }

    /// Where this shard's records go (their stream and shard are shared by
    /// every record: see [`SharedStr`]).
    pub(crate) fn shard_out(&self) -> ShardOut {
        ShardOut {
            stream: SharedStr::from(self.stream.config.stream_name()),
            shard_id: SharedStr::from(self.shard.as_str()),
            tracker: self.tracker.clone(),
            format: self.stream.config.record_format,
        }
    }

    /// Why to stop now, if at all.
    pub(crate) fn stopped(&self) -> Option<Stop> {
        if self.lease.lost.is_cancelled() {
            Some(Stop::Lost)
        } else if self.stream.shutdown.is_cancelled() {
            Some(Stop::Shutdown)
        } else {
            None
        }
    }

    /// Awaits `fut` unless the lease is lost or shutdown starts first.
    pub(crate) async fn guard<T>(&self, fut: impl Future<Output = T>) -> Result<T, Stop> {
        tokio::select! {
            biased;
            _ = self.lease.lost.cancelled() => Err(Stop::Lost),
            _ = self.stream.shutdown.cancelled() => Err(Stop::Shutdown),
            v = fut => Ok(v),
        }
    }

    /// Whether the shard is under its bounds of records and bytes in
    /// flight.
    pub(crate) fn has_room(&self) -> bool {
        let cfg = &self.stream.config;
        self.tracker
            .has_room(cfg.max_unacked_per_shard, cfg.max_unacked_bytes_per_shard)
    }

    /// Waits until the shard is under its bounds of records and bytes in
    /// flight (the back-pressure of a slow pipeline), unless the lease is
    /// lost or shutdown starts first.
    pub(crate) async fn wait_room(&self) -> Result<(), Stop> {
        let cfg = &self.stream.config;
        let (max, max_bytes) = (cfg.max_unacked_per_shard, cfg.max_unacked_bytes_per_shard);
        self.guard(self.tracker.wait_for(|w| w.has_room(max, max_bytes)))
            .await
    }

    /// The lease's phase now.
    pub(crate) fn phase(&self) -> LeasePhase {
        self.stream
            .table
            .timing()
            .phase(*self.renewed.borrow(), Instant::now())
    }

    /// Returns the lease deadline once the lease is live; while it is past
    /// its deadline (paused), waits for a renewal. Past the failover time the
    /// lease is lost, whatever the balancing loop is doing.
    pub(crate) async fn wait_live(&mut self) -> Result<Instant, Stop> {
        let mut paused = false;
        loop {
            if let Some(stop) = self.stopped() {
                return Err(stop);
            }
            let sent = *self.renewed.borrow_and_update();
            match self.stream.table.timing().phase(sent, Instant::now()) {
                LeasePhase::Live { until } => {
                    if paused {
                        info!(shard = %self.shard, "lease renewed in time; reading resumes");
                        self.stream
                            .status
                            .update(&self.shard, |s| s.state = ShardState::Reading);
                    }
                    return Ok(until);
                }
                LeasePhase::Paused { lost_at } => {
                    if !paused {
                        paused = true;
                        warn!(shard = %self.shard, "lease deadline passed without a renewal; not submitting or checkpointing until one succeeds");
                        metrics::counter!(metric::LEASE_PAUSES).increment(1);
                        self.stream
                            .status
                            .update(&self.shard, |s| s.state = ShardState::Paused);
                    }
                    let lost = self.lease.lost.clone();
                    let shutdown = self.stream.shutdown.clone();
                    tokio::select! {
                        _ = lost.cancelled() => {}
                        _ = shutdown.cancelled() => {}
                        _ = self.renewed.changed() => {}
                        _ = tokio::time::sleep_until(lost_at) => {}
                    }
                }
                LeasePhase::Lost => {
                    warn!(shard = %self.shard, "lease not renewed within failover time; giving it up");
                    self.lease.fence(&self.stream.status);
                    return Err(Stop::Lost);
                }
            }
        }
    }

    /// Hands `batch` (the records of `positions` user records) to the sink,
    /// only while the lease is live: a send that would complete past the
    /// lease deadline waits for a renewal instead. Awaiting room in the
    /// sink is the pipeline's back-pressure.
    pub(crate) async fn submit(&mut self, batch: Vec<Record>, positions: u64) -> Result<(), Stop> {
        loop {
            let until = self.wait_live().await?;
            let sink = self.stream.sink.clone();
            let permit = tokio::select! {
                biased;
                _ = self.lease.lost.cancelled() => return Err(Stop::Lost),
                _ = self.stream.shutdown.cancelled() => return Err(Stop::Shutdown),
                p = sink.reserve() => match p {
                    Ok(p) => p,
                    // The pipeline is gone: nothing more can be acknowledged.
                    Err(_) => return Err(Stop::Shutdown),
                },
                _ = tokio::time::sleep_until(until) => continue,
            };
            if matches!(self.phase(), LeasePhase::Live { .. }) {
                self.handed += positions;
                permit.send(batch);
                return Ok(());
            }
        }
    }

    /// Writes what the tracker says is acknowledged, if it moved (the
    /// final checkpoint of a drain; periodic ones are the renewer's).
    pub(crate) async fn checkpoint_acknowledged(&mut self) {
        let in_flight = self.tracker.in_flight();
        self.stream
            .status
            .update(&self.shard, |s| s.in_flight = in_flight);
        let Some(pos) = self.tracker.checkpoint() else {
            return;
        };
        let cp = Checkpoint::At(pos);
        if cp == self.lease.written() {
            return;
        }
        self.write_checkpoint(cp, &[]).await;
    }

    /// A fenced checkpoint write, only while the lease is live; a failed
    /// condition means the lease is lost.
    pub(crate) async fn write_checkpoint(&mut self, cp: Checkpoint, children: &[String]) -> bool {
        let me = &self.stream.config.worker_id;
        let lease = self.lease.clone();
        let mut counter = lease.counter.lock().await;
        // Judged with the lock held: a renewal in flight may have moved it.
        if lease.is_gone() || !matches!(self.phase(), LeasePhase::Live { .. }) {
            return false;
        }
        let label = self.stream.shard_labels(&self.shard);
        let table = &self.stream.table;
        let written = lease
            .write(table, me, &mut counter, |c| {
                table.checkpoint(&self.shard, me, c, &cp, children)
            })
            .await;
        // A successful conditional write proves ownership like a renewal.
        match written {
            Ok(Some(_)) => {
                metrics::counter!(metric::CHECKPOINTS, with(label, "result", "ok")).increment(1);
                lease.set_written(cp, &self.stream.status);
                true
            }
            Ok(None) => {
                metrics::counter!(metric::CHECKPOINTS, with(label, "result", "lost")).increment(1);
                info!(shard = %self.shard, "checkpoint refused: lease lost");
                lease.fence(&self.stream.status);
                false
            }
            Err(e) => {
                metrics::counter!(metric::CHECKPOINTS, with(label, "result", "error")).increment(1);
                warn!(shard = %self.shard, error = %e, "checkpoint write failed; will retry");
                false
            }
        }
    }

    /// Releases the lease; false when the release call failed.
    pub(crate) async fn release(&mut self) -> bool {
        let me = &self.stream.config.worker_id;
        let lease = self.lease.clone();
        let mut counter = lease.counter.lock().await;
        if lease.is_gone() {
            return true;
        }
        lease.released.store(true, Ordering::Relaxed);
        let table = &self.stream.table;
        let shard = &self.shard;
        let released = match lease
            .write(table, me, &mut counter, |c| table.release(shard, me, c))
            .await
        {
            Ok(Some(_)) => {
                // Logged so lease hand-overs can be reconstructed from logs.
                info!(shard = %self.shard, "lease released");
                metrics::counter!(metric::LEASE_CHANGES, "kind" => "release").increment(1);
                true
            }
            // Refused: another worker took the lease (it finishes the
            // shard), so this drain is not incomplete.
            Ok(None) => {
                lease.fence(&self.stream.status);
                true
            }
            Err(e) => {
                warn!(shard = %self.shard, error = %e, "release failed; lease expires after failover time unless released again");
                // Still ours: renewed, and released again by a drain with
                // time left.
                lease.released.store(false, Ordering::Relaxed);
                false
            }
        };
        self.stream.status.update(&self.shard, |s| s.owned = false);
        released
    }
}

/// A reader of shard `s` whose lease (counter 1, just renewed, failover
/// 10 s) is in a table answered by `update` (UpdateItem), reading through
/// `kinesis` into `sink`.
#[cfg(test)]
pub(crate) fn test_reader(
    update: &aws_smithy_mocks::Rule,
    kinesis: aws_sdk_kinesis::Client,
    mut config: crate::kinesis::config::KinesisConfig,
    sink: tokio::sync::mpsc::Sender<Vec<Record>>,
) -> (ShardReader, Arc<HeldLease>) {
    use crate::kinesis::lease::table::LeaseTable;
    use crate::kinesis::lease::timing::{LeaseTiming, Written};
    use crate::kinesis::run::RunParts;
    use aws_smithy_mocks::{RuleMode, mock_client};
    let failover = std::time::Duration::from_secs(10);
    let ddb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [update]);
    config.failover_time = failover;
    let stream = Arc::new(StreamRun::new(RunParts {
        table: LeaseTable::with_timing(ddb, "t", LeaseTiming::new(failover)),
        config,
        kinesis,
        status: Default::default(),
        sink,
        shutdown: Default::default(),
        governors: None,
        consumer_arn: None,
        leader_store: None,
    }));
    let written = Written {
        counter: 1,
        sent: Instant::now(),
    };
    let lease = Arc::new(HeldLease::new(
        "s",
        written,
        Checkpoint::TrimHorizon,
        Arc::new(AckTracker::new()),
    ));
    (ShardReader::new(stream, lease.clone()), lease)
}

/// A Kinesis client that is never called (no endpoint behind it).
#[cfg(test)]
pub(crate) fn unused_kinesis() -> aws_sdk_kinesis::Client {
    aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::Config::builder()
            .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
            .region(aws_sdk_kinesis::config::Region::new("us-east-1"))
            .build(),
    )
}
