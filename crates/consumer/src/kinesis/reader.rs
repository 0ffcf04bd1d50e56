//! One task per leased shard: wait for the parents, read (GetRecords,
//! paced, here; or fan-out, `fanout`), and end the shard or drain it.

use std::sync::Arc;
use std::time::Duration;

use tidemark_governor::Outcome;
use tidemark_schema::SharedStr;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, debug, error, warn};

use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::kinesis::api::{retry_backoff, shard_iterator};
use crate::kinesis::checkpoint::AckTracker;
use crate::kinesis::deliver::deliver;
use crate::kinesis::drain::{drain_and_release, finish_shard};
use crate::kinesis::fanout;
use crate::kinesis::held::{Held, HeldLease};
use crate::kinesis::lease::item::{Checkpoint, Lease};
use crate::kinesis::lease::timing::Written;
use crate::kinesis::pacer::Pacer;
use crate::kinesis::run::StreamRun;
use crate::kinesis::shard::{ShardReader, Stop};
use crate::kinesis::status::ShardState;
use crate::metrics::kinesis as metric;

/// Starts reading `lease`, just written in this worker's name (its counter
/// is `written`'s), and holds it.
pub(crate) fn spawn(stream: &Arc<StreamRun>, mut lease: Lease, written: Written) {
    lease.counter = written.counter;
    let held = Arc::new(HeldLease::new(
        &lease.key,
        written,
        lease.checkpoint.clone(),
        Arc::new(AckTracker::new()),
    ));
    stream.status.update(&lease.key, |s| {
        *s = Default::default();
        s.owned = true;
    });
    let reader = ShardReader::new(stream.clone(), held.clone());
    let key = lease.key.clone();
    let task = AbortOnDropHandle::new(tokio::spawn(run(reader, lease).in_current_span()));
    stream.held.insert(key, Held { lease: held, task });
}

/// Reads the shard until it ends, the lease is lost or shutdown; then
/// drains and releases it as the stop requires.
async fn run(mut reader: ShardReader, lease: Lease) {
    let stop = read(&mut reader, &lease).await;
    match stop {
        Ok(Stop::Lost) => {}
        Ok(Stop::Shutdown) => drain_and_release(&mut reader).await,
        Err(
            e @ ConsumerError::Aws(AwsError {
                class: ErrorClass::Fatal,
                ..
            }),
        ) => {
            // Access denied (a KMS-encrypted stream without kms:Decrypt,
            // a missing kinesis:GetRecords): every shard would fail the
            // same way. Stop the whole source, loudly.
            error!(shard = %reader.shard, error = %e, "reading the shard is refused; stopping");
            reader.stream.fail(e);
            drain_and_release(&mut reader).await;
        }
        Err(e) => {
            warn!(shard = %reader.shard, error = %e, "reader failed; releasing lease");
            drain_and_release(&mut reader).await;
        }
    }
}

/// Waits for the parents (per-key order across a reshard depends on it),
/// then reads.
async fn read(reader: &mut ShardReader, lease: &Lease) -> Result<Stop, ConsumerError> {
    let mut rx = reader.stream.snapshot.subscribe();
    loop {
        let ready = {
            let snap = rx.borrow_and_update();
            lease.parents.iter().all(|p| {
                snap.iter()
                    .find(|l| &l.key == p)
                    .is_none_or(Lease::is_finished)
            })
        };
        if ready {
            break;
        }
        match reader.guard(rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Ok(Stop::Shutdown),
            Err(stop) => return Ok(stop),
        }
    }
    reader
        .stream
        .status
        .update(&reader.shard, |s| s.state = ShardState::Reading);
    match reader.stream.consumer_arn.clone() {
        Some(arn) => fanout::read(reader, lease, &arn).await,
        None => poll(reader, lease).await,
    }
}

/// The GetRecords loop: paced, holding at `max_unacked_per_shard`
/// unacknowledged user records or `max_unacked_bytes_per_shard` of their
/// bytes, and while DynamoDB's breaker is open.
async fn poll(reader: &mut ShardReader, lease: &Lease) -> Result<Stop, ConsumerError> {
    let cfg = reader.stream.config.clone();
    let out = reader.shard_out();
    let skip = match &lease.checkpoint {
        Checkpoint::At(p) => Some(p.clone()),
        _ => None,
    };
    let mut last_read: Option<SharedStr> = None;
    let first = shard_iterator(
        &reader.stream.kinesis,
        &cfg,
        &reader.shard,
        &lease.checkpoint,
        None,
    );
    let mut iterator = match reader.guard(first).await {
        Ok(it) => it?,
        Err(stop) => return Ok(stop),
    };
    let mut pacer = Pacer::new(cfg.idle_poll);
    let mut retry = retry_backoff();
    let shard_label = reader.stream.shard_labels(&reader.shard);
    loop {
        if let Some(stop) = reader.stopped() {
            return Ok(stop);
        }
        if let Err(stop) = reader.wait_room().await {
            return Ok(stop);
        }
        if let Err(stop) = reader.guard(pacer.ready()).await {
            return Ok(stop);
        }
        // Past the lease deadline, reading waits for a renewal.
        if let Err(stop) = reader.wait_live().await {
            return Ok(stop);
        }
        // The room in user records is an upper bound on the Kinesis records
        // worth asking for; the bound itself is held by `deliver`, which
        // hands an answer on only as far as acknowledgements make room.
        let room = cfg
            .max_unacked_per_shard
            .saturating_sub(reader.tracker.in_flight())
            .max(1);
        let limit = i32::try_from(room)
            .unwrap_or(i32::MAX)
            .min(cfg.max_records_per_call);
        let permit = match &reader.stream.governors {
            Some(g) => {
                let admitted = async {
                    g.dynamodb.wait_closed().await;
                    g.kinesis.admit().await
                };
                match reader.guard(admitted).await {
                    Ok(p) => Some(p),
                    Err(stop) => return Ok(stop),
                }
            }
            None => None,
        };
        let started = Instant::now();
        metrics::counter!(metric::GET_RECORDS, shard_label.clone()).increment(1);
        // Named so the IAM policy test attributes the call to Kinesis.
        let kinesis: &aws_sdk_kinesis::Client = &reader.stream.kinesis;
        let res = kinesis
            .get_records()
            .shard_iterator(&iterator)
            .limit(limit)
            .send()
            .await;
        if let Some(p) = permit {
            p.finish(match &res {
                Ok(_) => Outcome::Answered,
                Err(e) => Outcome::of_class(tidemark_aws_errors::classify(e)),
            });
        }
        let answer = match res {
            Ok(answer) => answer,
            Err(e) => {
                let err = AwsError::new("GetRecords", &e);
                match err.class {
                    ErrorClass::Throttled => {
                        metrics::counter!(metric::THROTTLED, shard_label.clone()).increment(1);
                        let d = pacer.on_throttled(started);
                        debug!(shard = %reader.shard, delay = ?d, "GetRecords throttled");
                    }
                    ErrorClass::ExpiredIterator => {
                        // Renew from the last position read, or from the
                        // checkpoint we started at.
                        let renewed = shard_iterator(
                            &reader.stream.kinesis,
                            &cfg,
                            &reader.shard,
                            &lease.checkpoint,
                            last_read.clone(),
                        );
                        iterator = match reader.guard(renewed).await {
                            Ok(it) => it?,
                            Err(stop) => return Ok(stop),
                        };
                        pacer.on_error(started);
                    }
                    ErrorClass::Fatal => return Err(err.into()),
                    _ => {
                        let d = retry.next().unwrap_or(Duration::from_secs(10));
                        warn!(shard = %reader.shard, error = %err, delay = ?d, "GetRecords failed; retrying");
                        pacer.on_error(started + d);
                    }
                }
                continue;
            }
        };
        retry = retry_backoff();
        let behind = answer.millis_behind_latest();
        let records = answer.records();
        let delivered = match deliver(reader, &out, records, skip.as_ref(), behind).await? {
            Ok(d) => d,
            Err(stop) => return Ok(stop),
        };
        if delivered.last.is_some() {
            last_read = delivered.last;
        }
        pacer.on_success(started, delivered.bytes, records.len(), behind == Some(0));
        match answer.next_shard_iterator() {
            Some(next) => iterator = next.to_string(),
            None => {
                let children: Vec<String> = answer
                    .child_shards()
                    .iter()
                    .map(|c| c.shard_id().to_string())
                    .collect();
                return finish_shard(reader, children).await;
            }
        }
    }
}
