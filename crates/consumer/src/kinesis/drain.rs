//! How a shard's reading ends: at the shard's end (wait for every
//! acknowledgement, checkpoint `SHARD_END` with the children, release) and
//! at shutdown (wait, bounded, for what was handed on, write the final
//! checkpoint, release), each write retried within its bound.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::ConsumerError;
use crate::kinesis::api::retry_backoff;
use crate::kinesis::lease::item::{Checkpoint, SHARD_END};
use crate::kinesis::shard::{ShardReader, Stop};
use crate::kinesis::status::ShardState;

/// Failed SHARD_END writes (each a full lease-write operation) before the
/// lease is released instead.
const SHARD_END_ATTEMPTS: u32 = 5;

/// At the shard's end: wait for every acknowledgement, checkpoint
/// SHARD_END (with the children), release, and trigger shard discovery.
pub(crate) async fn finish_shard(
    reader: &mut ShardReader,
    children: Vec<String>,
) -> Result<Stop, ConsumerError> {
    reader
        .stream
        .status
        .update(&reader.shard, |s| s.state = ShardState::Draining);
    // Meanwhile the renewer checkpoints what is acknowledged.
    if let Err(stop) = reader
        .guard(reader.tracker.wait_for(|w| w.in_flight() == 0))
        .await
    {
        return Ok(stop);
    }
    // The SHARD_END write is what lets the children start: a failed one
    // is tried again (a refused one means the lease is lost) before the
    // lease is released for another reader to finish the shard.
    let mut retry = retry_backoff();
    let mut attempts = 0;
    let written = loop {
        if let Err(stop) = reader.wait_live().await {
            return Ok(stop);
        }
        if reader
            .write_checkpoint(Checkpoint::ShardEnd, &children)
            .await
        {
            break true;
        }
        attempts += 1;
        if reader.lease.is_gone() || attempts >= SHARD_END_ATTEMPTS {
            break false;
        }
        let d = retry.next().unwrap_or(Duration::from_secs(10));
        if let Err(stop) = reader.guard(tokio::time::sleep(d)).await {
            return Ok(stop);
        }
    };
    if !written && !reader.lease.is_gone() {
        warn!(shard = %reader.shard, attempts, "SHARD_END checkpoint failed; releasing the lease");
        reader.release().await;
    }
    if written {
        info!(shard = %reader.shard, ?children, "shard ended");
        reader.stream.status.update(&reader.shard, |s| {
            s.state = ShardState::Ended;
            s.checkpoint = Some(SHARD_END.to_string());
        });
        // Discovery first: the balancing loop may drop this task once the
        // lease is released.
        reader.stream.sync_now.notify_one();
        reader.release().await;
    }
    Ok(Stop::Lost)
}

/// Shutdown path: wait (bounded, and not at all once the pipeline is gone)
/// for acknowledgements, checkpoint, release.
pub(crate) async fn drain_and_release(reader: &mut ShardReader) {
    let deadline = reader.stream.drain_deadline();
    let lost = reader.lease.lost.clone();
    let handed = reader.handed;
    let sink = reader.stream.sink.clone();
    tokio::select! {
        _ = reader.tracker.wait_for(|w| w.acked_prefix() >= handed) => {}
        _ = tokio::time::sleep_until(deadline) => {
            warn!(shard = %reader.shard, in_flight = reader.tracker.in_flight(), "shutdown grace over; checkpointing what is done");
        }
        // A fatal stop: the pipeline is gone, so what is missing will
        // never be acknowledged; the worker gives the source seconds, not
        // the grace.
        () = sink.closed() => {
            warn!(shard = %reader.shard, in_flight = reader.tracker.in_flight(), "pipeline gone; checkpointing what was acknowledged");
        }
        _ = lost.cancelled() => return,
    }
    reader.checkpoint_acknowledged().await;
    let checkpointed = |r: &ShardReader| {
        r.tracker
            .checkpoint()
            .is_none_or(|p| Checkpoint::At(p) == r.lease.written())
    };
    // A final checkpoint skipped at the lease deadline (a renewal late
    // on a loaded machine) or whose write failed is tried again until
    // the drain deadline: the renewer still runs during the drain, so a
    // paused lease comes back.
    let mut retry = retry_backoff();
    while !checkpointed(reader) && !reader.lease.is_gone() {
        let next = Instant::now() + retry.next().unwrap_or(Duration::from_secs(1));
        if next >= deadline {
            break;
        }
        tokio::select! {
            _ = lost.cancelled() => return,
            _ = reader.renewed.changed() => {}
            _ = tokio::time::sleep_until(next) => {}
        }
        reader.checkpoint_acknowledged().await;
    }
    let checkpointed = checkpointed(reader);
    let mut released = reader.release().await;
    // Likewise a failed release, while the renewer keeps the lease.
    while !released && !reader.lease.is_gone() {
        let next = Instant::now() + retry.next().unwrap_or(Duration::from_secs(1));
        if next >= deadline {
            break;
        }
        tokio::select! {
            _ = lost.cancelled() => return,
            _ = tokio::time::sleep_until(next) => {}
        }
        released = reader.release().await;
    }
    // A lost lease is the new owner's to finish; anything else left
    // undone means records are read again: the stop was not clean.
    let finished = checkpointed && released;
    if !finished && !reader.lease.lost.is_cancelled() {
        reader.stream.unfinished(&reader.shard);
    }
    reader.stream.status.update(&reader.shard, |s| {
        s.owned = false;
        s.state = ShardState::Released;
    });
}

/// The shutdown drain and shard-end bookkeeping of one reader, against a
/// mocked lease table.
#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
    use aws_smithy_mocks::{Rule, mock};
    use tokio::sync::mpsc;

    use crate::kinesis::checkpoint::Position;
    use crate::kinesis::config::KinesisConfig;
    use crate::kinesis::held::HeldLease;
    use crate::kinesis::shard::{test_reader, unused_kinesis};
    use crate::record::AckTarget;

    fn reader(update: &Rule) -> (ShardReader, Arc<HeldLease>) {
        // Never called: the drain reads nothing.
        let (sink, _) = mpsc::channel(1);
        test_reader(
            update,
            unused_kinesis(),
            KinesisConfig::new("s", "t", "me"),
            sink,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_checkpoint_at_the_lease_deadline_waits_for_the_renewal() {
        let update = mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
        let (mut reader, lease) = reader(&update);
        let serial = reader.tracker.push(Position::new("5", 0)).unwrap();
        reader.tracker.ack(serial);
        reader.handed = 1;
        reader.stream.shutdown.cancel();
        // The last renewal 9 s ago: past the lease deadline (8 s), not
        // lost (10 s). The renewer's next one lands 500 ms later.
        tokio::time::advance(Duration::from_secs(9)).await;
        let renewer = lease.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            renewer.renewed.send_replace(Instant::now());
        });
        drain_and_release(&mut reader).await;
        assert_eq!(lease.written(), Checkpoint::At(Position::new("5", 0)));
        assert!(
            reader.stream.take_unfinished().is_empty(),
            "the stop counted as incomplete"
        );
        // The final checkpoint, then the release.
        assert_eq!(update.num_calls(), 2);
    }

    /// A fatal stop: the pipeline is gone (its receiver dropped), so the
    /// acknowledgements still missing can never come. The reader does not
    /// wait out `shutdown_grace` (20 s, while the worker gives the source
    /// 5 s): it checkpoints what was acknowledged and releases at once.
    #[tokio::test(start_paused = true)]
    async fn with_the_pipeline_gone_the_drain_checkpoints_the_acknowledged_at_once() {
        let update = mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
        let (mut reader, lease) = reader(&update);
        assert!(reader.stream.sink.is_closed(), "the pipeline is gone");
        let done = reader.tracker.push(Position::new("5", 0)).unwrap();
        let _never = reader.tracker.push(Position::new("6", 0)).unwrap();
        reader.tracker.ack(done);
        reader.handed = 2;
        reader.stream.shutdown.cancel();
        let started = Instant::now();
        drain_and_release(&mut reader).await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "waited {:?} for acknowledgements that cannot come",
            started.elapsed()
        );
        assert_eq!(lease.written(), Checkpoint::At(Position::new("5", 0)));
        assert!(lease.released.load(Ordering::Relaxed));
        // The final checkpoint, then the release.
        assert_eq!(update.num_calls(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_final_release_is_tried_again_within_the_grace() {
        // The final checkpoint goes through; the release meets 12 server
        // errors in a row (more than one operation's retry budget).
        let update = mock!(Client::update_item)
            .sequence()
            .output(|| UpdateItemOutput::builder().build())
            .http_status(500, None)
            .times(12)
            .output(|| UpdateItemOutput::builder().build())
            .build();
        let (mut reader, lease) = reader(&update);
        let serial = reader.tracker.push(Position::new("5", 0)).unwrap();
        reader.tracker.ack(serial);
        reader.handed = 1;
        reader.stream.shutdown.cancel();
        drain_and_release(&mut reader).await;
        assert!(
            reader.stream.take_unfinished().is_empty(),
            "the stop counted as incomplete"
        );
        assert!(lease.released.load(Ordering::Relaxed));
        assert_eq!(update.num_calls(), 14);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_shard_end_checkpoint_is_tried_again() {
        // 12 server errors in a row: more than one operation's retries.
        let update = mock!(Client::update_item)
            .sequence()
            .http_status(500, None)
            .times(12)
            .output(|| UpdateItemOutput::builder().build())
            .times(2)
            .build();
        let (mut reader, lease) = reader(&update);
        let stop = finish_shard(&mut reader, vec!["c".into()]).await.unwrap();
        assert!(matches!(stop, Stop::Lost), "the reader's work is done");
        assert_eq!(lease.written(), Checkpoint::ShardEnd);
        assert!(lease.released.load(Ordering::Relaxed));
        // The SHARD_END write went through on a later operation, then
        // the release.
        assert_eq!(update.num_calls(), 14);
    }
}
