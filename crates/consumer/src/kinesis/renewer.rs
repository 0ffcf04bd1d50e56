//! The renewer: renews every held lease on its own clock (a slow Scan or
//! ListShards in the balancing loop never delays it) and writes each
//! shard's periodic checkpoint from the shard's acknowledgements, whatever
//! its reader is doing (waiting on the pipeline's back-pressure included).

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::kinesis::held::HeldLease;
use crate::kinesis::lease::timing::LeasePhase;
use crate::kinesis::run::{StreamRun, with};
use crate::metrics::kinesis as metric;

/// Most lease renewals in flight at once.
const MAX_CONCURRENT_RENEWALS: usize = 16;

/// Renews every held lease once per `failover_time / 3`, concurrently (at
/// most [`MAX_CONCURRENT_RENEWALS`] at once), each bounded by the lease
/// table's operation deadline (below the renewal period), until `stop`.
pub(crate) async fn run(stream: Arc<StreamRun>, stop: CancellationToken) {
    // Folded checkpoints: look twice per renewal interval, write a lease
    // once its last write is a renewal interval old. Unfolded: checkpoints
    // are written apart from renewals, checked at least every
    // `checkpoint_interval`.
    let every = if stream.config.lease_tuning.fold_checkpoints {
        stream.config.failover_time / 6
    } else {
        (stream.config.failover_time / 3).min(stream.config.checkpoint_interval)
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shown = HashSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let leases = stream.held.leases();
        futures::stream::iter(leases.iter().cloned())
            .for_each_concurrent(MAX_CONCURRENT_RENEWALS, |l| renew_one(&stream, l))
            .await;
        let now: HashSet<String> = leases
            .iter()
            .filter(|l| !l.is_gone())
            .map(|l| {
                show_lag(&stream, l);
                l.key.clone()
            })
            .collect();
        for gone in shown.difference(&now) {
            clear_lag(&stream, gone);
        }
        shown = now;
    }
    for gone in &shown {
        clear_lag(&stream, gone);
    }
}

/// Shows a held shard's checkpoint lag in its status and gauges.
fn show_lag(stream: &StreamRun, lease: &HeldLease) {
    let lag = lease.tracker.checkpoint_lag();
    stream.status.update(&lease.key, |s| {
        s.checkpoint_lag_records = lag.records;
        s.checkpoint_lag_ms = lag.age.as_millis() as u64;
    });
    let labels = stream.shard_labels(&lease.key);
    metrics::gauge!(metric::CHECKPOINT_LAG_RECORDS, labels.clone()).set(lag.records as f64);
    metrics::gauge!(metric::CHECKPOINT_LAG_SECONDS, labels).set(lag.age.as_secs_f64());
}

/// A shard no longer held: this worker's gauges no longer claim a lag.
fn clear_lag(stream: &StreamRun, key: &str) {
    let labels = stream.shard_labels(key);
    metrics::gauge!(metric::CHECKPOINT_LAG_RECORDS, labels.clone()).set(0.0);
    metrics::gauge!(metric::CHECKPOINT_LAG_SECONDS, labels).set(0.0);
}

/// One renewal, or a checkpoint write in its place; marks the lease lost
/// when refused or past the failover time.
async fn renew_one(stream: &StreamRun, lease: Arc<HeldLease>) {
    let me = &stream.config.worker_id;
    let timing = stream.table.timing();
    let mut counter = lease.counter.lock().await;
    if lease.is_gone() {
        return;
    }
    let in_flight = lease.tracker.in_flight();
    stream
        .status
        .update(&lease.key, |s| s.in_flight = in_flight);
    let fold = stream.config.lease_tuning.fold_checkpoints;
    let since = *lease.renewed.borrow();
    let now = Instant::now();
    // A checkpoint is written only while the lease is live, as the
    // reader's own checkpoints are; it renews the lease as well.
    let live = matches!(timing.phase(since, now), LeasePhase::Live { .. });
    let due = if live {
        lease.due_checkpoint(stream.config.checkpoint_interval, now)
    } else {
        None
    };
    let min_age = if fold {
        stream.config.failover_time / 3
    } else {
        stream.config.failover_time / 6
    };
    // Folded: one write per renewal interval, a checkpoint taking the
    // renewal's place. Unfolded: a due checkpoint goes at once.
    if now.saturating_duration_since(since) < min_age && (fold || due.is_none()) {
        return;
    }
    let table = &stream.table;
    let renewed = match &due {
        Some(cp) => {
            lease
                .write(table, me, &mut counter, |c| {
                    table.checkpoint(&lease.key, me, c, cp, &[])
                })
                .await
        }
        None => {
            lease
                .write(table, me, &mut counter, |c| table.renew(&lease.key, me, c))
                .await
        }
    };
    match renewed {
        Ok(Some(_)) => {
            if due.is_none() {
                metrics::counter!(metric::LEASE_RENEWALS).increment(1);
            }
            if let Some(cp) = due {
                let labels = with(stream.shard_labels(&lease.key), "result", "ok");
                metrics::counter!(metric::CHECKPOINTS, labels).increment(1);
                lease.set_written(cp, &stream.status);
            }
        }
        Ok(None) => {
            info!(shard = %lease.key, "lease lost");
            lease.fence(&stream.status);
        }
        // A failed checkpoint is tried again from the tracker next time.
        Err(e) => warn!(shard = %lease.key, error = %e, "renew failed"),
    }
    // Self-fencing: others may take a lease we failed to renew in time.
    if !lease.is_gone() && timing.phase(*lease.renewed.borrow(), Instant::now()) == LeasePhase::Lost
    {
        warn!(shard = %lease.key, "lease not renewed within failover time; giving it up");
        lease.fence(&stream.status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
    use aws_smithy_mocks::mock;
    use tokio::sync::mpsc;
    use tokio_util::task::AbortOnDropHandle;

    use crate::kinesis::checkpoint::Position;
    use crate::kinesis::config::KinesisConfig;
    use crate::kinesis::held::Held;
    use crate::kinesis::lease::item::Checkpoint;
    use crate::kinesis::shard::{ShardReader, test_reader, unused_kinesis};
    use crate::record::{Ack, Record};

    /// The pipeline is slow (DynamoDB throttles): the reader waits on
    /// the sink's back-pressure with a batch in hand, while the records
    /// of its first batch were acknowledged long ago. Their checkpoint
    /// must not wait for the reader: the renewer writes it within two
    /// renewal intervals, or a lease move reads them again.
    #[tokio::test(start_paused = true)]
    async fn acknowledged_records_are_checkpointed_while_the_reader_waits_on_back_pressure() {
        let update = mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
        let mut config = KinesisConfig::new("s", "t", "me");
        config.checkpoint_interval = Duration::from_secs(1);
        // Room for one batch: the second one waits.
        let (sink, mut pipeline) = mpsc::channel(1);
        let (mut reader, lease) = test_reader(&update, unused_kinesis(), config, sink);
        let task = AbortOnDropHandle::new(tokio::spawn(std::future::pending()));
        reader.stream.held.insert(
            "s".into(),
            Held {
                lease: lease.clone(),
                task,
            },
        );
        let batch = |reader: &ShardReader, seqs: &[&str]| -> (Vec<Record>, u64) {
            let records: Vec<Record> = seqs
                .iter()
                .map(|s| {
                    let serial = reader.tracker.push(Position::new(*s, 0)).unwrap();
                    Record {
                        origin: tidemark_schema::Origin::Kinesis {
                            stream: "s".into(),
                            shard_id: "s".into(),
                            sequence_number: (*s).into(),
                            sub_sequence_number: 0,
                        },
                        partition_key: "k".into(),
                        data: bytes::Bytes::from_static(b"{}"),
                        arrival_ms: 0,
                        ack: Ack::new(reader.tracker.clone(), serial),
                        defect: None,
                        inner: None,
                    }
                })
                .collect();
            let n = records.len() as u64;
            (records, n)
        };
        let renewer_stop = CancellationToken::new();
        let renewer = tokio::spawn(run(reader.stream.clone(), renewer_stop.clone()));
        // The first batch is taken and stored; the second fills the
        // channel; the third waits on back-pressure.
        let (first, n) = batch(&reader, &["1", "2"]);
        reader.submit(first, n).await.ok().unwrap();
        let taken = pipeline.recv().await.unwrap();
        Ack::done_all(taken.into_iter().map(|r| r.ack));
        let acked = Instant::now();
        let (second, n) = batch(&reader, &["3"]);
        reader.submit(second, n).await.ok().unwrap();
        let (third, n) = batch(&reader, &["4"]);
        let blocked = tokio::spawn(async move {
            let r = reader.submit(third, n).await;
            (reader, r.is_ok())
        });
        let renewal = Duration::from_secs(10) / 3;
        let want = Checkpoint::At(Position::new("2", 0));
        while lease.written() != want {
            assert!(
                acked.elapsed() <= 2 * renewal,
                "no checkpoint within two renewal intervals of the acknowledgement: {:?}",
                lease.written()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!blocked.is_finished(), "the reader still waits on the sink");
        assert!(!lease.is_gone(), "the lease is still held");
        renewer_stop.cancel();
        renewer.await.unwrap();
        blocked.abort();
    }

    /// DynamoDB never acknowledges a shard's writes: its checkpoint stays
    /// where it was while the records read wait. MillisBehindLatest says 0
    /// (the reader is at the tip); the checkpoint lag must say how many
    /// records and how long the checkpoint has been standing still, and
    /// grow while it does; once the records are stored and checkpointed,
    /// it is 0 again.
    #[tokio::test(start_paused = true)]
    async fn a_frozen_checkpoint_shows_a_growing_checkpoint_lag() {
        let update = mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
        let mut config = KinesisConfig::new("s", "t", "me");
        config.checkpoint_interval = Duration::from_secs(1);
        let (sink, _pipeline) = mpsc::channel(8);
        let (reader, lease) = test_reader(&update, unused_kinesis(), config, sink);
        let task = AbortOnDropHandle::new(tokio::spawn(std::future::pending()));
        reader.stream.held.insert(
            "s".into(),
            Held {
                lease: lease.clone(),
                task,
            },
        );
        let serials: Vec<u64> = ["1", "2", "3"]
            .iter()
            .map(|s| reader.tracker.push(Position::new(*s, 0)).unwrap())
            .collect();
        let stop = CancellationToken::new();
        let renewer = tokio::spawn(run(reader.stream.clone(), stop.clone()));
        let lag = || {
            let s = reader.stream.status.snapshot()["s"].clone();
            (s.checkpoint_lag_records, s.checkpoint_lag_ms)
        };
        tokio::time::sleep(Duration::from_secs(10)).await;
        let early = lag();
        tokio::time::sleep(Duration::from_secs(20)).await;
        let late = lag();
        assert_eq!(
            early.0, 3,
            "three records read, none checkpointed: {early:?}"
        );
        assert!(
            (8_000..=10_000).contains(&early.1),
            "read 10 s ago, checkpoint lag {early:?}"
        );
        assert_eq!(late.0, 3, "{late:?}");
        assert!(
            late.1 >= early.1 + 18_000,
            "the lag grows while the checkpoint stands still: {early:?} then {late:?}"
        );
        // Stored at last: checkpointed within a few renewals, lag 0.
        crate::record::AckTarget::ack_many(&*reader.tracker, &serials);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(lease.written(), Checkpoint::At(Position::new("3", 0)));
        assert_eq!(lag(), (0, 0), "everything read is checkpointed");
        stop.cancel();
        renewer.await.unwrap();
    }
}
