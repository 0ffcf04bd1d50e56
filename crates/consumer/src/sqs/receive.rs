//! Receiving: long-poll receivers (their number adapted by the scaler),
//! each taking in-flight permits first (back-pressure), decoding each body
//! ([`body`](crate::sqs::body)), admitting the messages to the ledger and
//! sending the records that may start to the sink; and the releaser, which
//! sends held-back FIFO messages when their turn comes.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use aws_smithy_types::timeout::TimeoutConfig;
use backon::{BackoffBuilder, ExponentialBuilder};
use bytes::Bytes;
use tidemark_schema::Origin;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::{AwsError, ErrorClass};
use crate::metrics::sqs as metric;
use crate::record::{Ack, AckTarget, Defect, Record};
use crate::sqs::body;
use crate::sqs::config::MAX_RECEIVE_BATCH;
use crate::sqs::ledger::{Admit, Entry, Phase};
use crate::sqs::queue::QueueRun;
use crate::sqs::scaler::Decision;
use crate::sqs::visibility::{release, release_raw};

/// Pause after an empty short poll (`wait_time` 0), so an idle queue is not
/// polled in a hot loop.
const EMPTY_SHORT_POLL_PAUSE: Duration = Duration::from_millis(100);
/// Time a long poll's answer may take beyond its `wait_time`.
const RECEIVE_MARGIN: Duration = Duration::from_secs(10);

/// The client's timeouts with an attempt limit that outlasts a long poll of
/// `wait`. The worker's 10 s attempt timeout is shorter than SQS's 20 s long
/// poll: every poll of a quiet queue would time out, and a message that
/// arrived during an abandoned poll would stay invisible, its receive count
/// raised, until its visibility ended.
fn receive_timeouts(base: Option<&TimeoutConfig>, wait: Duration) -> TimeoutConfig {
    let attempt = wait + RECEIVE_MARGIN;
    let mut builder = base.map_or_else(TimeoutConfig::builder, TimeoutConfig::to_builder);
    if base
        .and_then(TimeoutConfig::operation_attempt_timeout)
        .is_none_or(|t| t < attempt)
    {
        builder = builder.operation_attempt_timeout(attempt);
    }
    // The operation limit (all attempts) must leave room for one attempt too.
    if base
        .and_then(TimeoutConfig::operation_timeout)
        .is_some_and(|t| t < attempt)
    {
        builder = builder.operation_timeout(attempt);
    }
    builder.build()
}

fn receive_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(20))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Takes at least one and at most 10 in-flight permits; `None` on stop.
async fn acquire(queue: &QueueRun) -> Option<usize> {
    let permits = &queue.in_flight.permits;
    tokio::select! {
        p = permits.acquire() => p.ok()?.forget(),
        _ = queue.stop.cancelled() => return None,
    }
    let mut n = 1;
    while n < MAX_RECEIVE_BATCH {
        match permits.try_acquire() {
            Ok(p) => {
                p.forget();
                n += 1;
            }
            Err(_) => break,
        }
    }
    Some(n)
}

pub(crate) async fn receiver(queue: Arc<QueueRun>) {
    let mut backoff = receive_backoff();
    let wait = i32::try_from(queue.cfg.wait_time.as_secs()).unwrap_or(20);
    let timeouts = receive_timeouts(
        queue.client.config().timeout_config(),
        Duration::from_secs(u64::from(wait.unsigned_abs())),
    );
    loop {
        if queue.stop.is_cancelled() {
            return;
        }
        // No new messages while those in flight hold the byte bound.
        let far = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            _ = queue.in_flight.wait_room(queue.cfg.max_in_flight_bytes, far) => {}
            _ = queue.stop.cancelled() => return,
        }
        let Some(n) = acquire(&queue).await else {
            return;
        };
        let sent_at = Instant::now();
        // Not raced against `stop`: a dropped poll could take messages with
        // it until their visibility ends; a finished one is released at once.
        let out = queue
            .client
            .receive_message()
            .queue_url(&queue.cfg.queue_url)
            .max_number_of_messages(i32::try_from(n).unwrap_or(10))
            .wait_time_seconds(wait)
            .visibility_timeout(queue.visibility_secs())
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .customize()
            .config_override(
                aws_sdk_sqs::config::Builder::default().timeout_config(timeouts.clone()),
            )
            .send()
            .await;
        match out {
            Err(err) => {
                queue.in_flight.permits.add_permits(n);
                let e = AwsError::new("ReceiveMessage", &err);
                metrics::counter!(metric::CALL_ERRORS, "op" => "receive").increment(1);
                if matches!(e.class, ErrorClass::Fatal | ErrorClass::NotFound) {
                    queue.fail(e.into());
                    return;
                }
                let delay = backoff.next().unwrap_or(Duration::from_secs(20));
                warn!(error = %e, ?delay, "ReceiveMessage failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = queue.stop.cancelled() => return,
                }
            }
            Ok(out) => {
                backoff = receive_backoff();
                let mut messages = out.messages.unwrap_or_default();
                let extra = if messages.len() > n {
                    messages.split_off(n)
                } else {
                    Vec::new()
                };
                let got = messages.len();
                queue.in_flight.permits.add_permits(n - got);
                let decision = {
                    let mut s = queue.scaler.lock().unwrap_or_else(PoisonError::into_inner);
                    let d = s.observe(got, n);
                    metrics::gauge!(metric::RECEIVERS).set(s.active() as f64);
                    d
                };
                if !extra.is_empty() {
                    // More than asked for (never from SQS): no permits for
                    // them, so hand them straight back.
                    release_raw(&queue, &extra).await;
                }
                debug!(asked = n, got, took = ?sent_at.elapsed(), "received");
                dispatch(&queue, messages, sent_at).await;
                if got == 0 && wait == 0 {
                    tokio::select! {
                        _ = tokio::time::sleep(EMPTY_SHORT_POLL_PAUSE) => {}
                        _ = queue.stop.cancelled() => return,
                    }
                }
                match decision {
                    Decision::Grow => {
                        debug!("sqs batches come back full: adding a receiver");
                        let _ = queue.grow_tx.send(());
                    }
                    Decision::Shrink => {
                        debug!("sqs batches come back sparse: removing a receiver");
                        return;
                    }
                    Decision::Hold => {}
                }
            }
        }
    }
}

fn system_attr<'a>(m: &'a Message, name: &MessageSystemAttributeName) -> Option<&'a str> {
    m.attributes().and_then(|a| a.get(name)).map(String::as_str)
}

/// Admits received messages (one permit each, already taken) and sends the
/// records of those that may start to the sink.
async fn dispatch(queue: &Arc<QueueRun>, messages: Vec<Message>, sent_at: Instant) {
    if messages.is_empty() {
        return;
    }
    if queue.stop.is_cancelled() {
        let n = messages.len();
        release_raw(queue, &messages).await;
        queue.in_flight.permits.add_permits(n);
        return;
    }
    let now = Instant::now();
    let target: Arc<dyn AckTarget> = queue.in_flight.clone();
    let mut batch = Vec::new();
    let mut started = Vec::new();
    // How far behind the queue's head this receive is (status and EMF read it).
    let now_ms = chrono::Utc::now().timestamp_millis();
    if let Some(oldest) = messages
        .iter()
        .filter_map(|m| system_attr(m, &MessageSystemAttributeName::SentTimestamp))
        .filter_map(|v| v.parse::<i64>().ok())
        .min()
    {
        metrics::gauge!(metric::RECEIVE_AGE).set((now_ms - oldest).max(0) as f64 / 1000.0);
    }
    // Past this, a message still waiting for room would need a heartbeat,
    // which only messages in the ledger get: it is made visible again.
    let room_deadline = sent_at + queue.cfg.visibility_timeout - queue.cfg.heartbeat_margin;
    let mut messages = messages.into_iter();
    while let Some(m) = messages.next() {
        // Decoded only with room under the byte bound: a batch of
        // decompression bombs is inflated one message at a time.
        if queue.in_flight.lock().bytes() >= queue.cfg.max_in_flight_bytes as u64 {
            deliver(
                queue,
                std::mem::take(&mut batch),
                &std::mem::take(&mut started),
            )
            .await;
            let room = tokio::select! {
                r = queue.in_flight.wait_room(queue.cfg.max_in_flight_bytes, room_deadline) => r,
                _ = queue.stop.cancelled() => false,
            };
            if !room {
                let rest: Vec<Message> = std::iter::once(m).chain(messages).collect();
                debug!(
                    messages = rest.len(),
                    "no room under max_in_flight_bytes in time: made visible again"
                );
                release_raw(queue, &rest).await;
                queue.in_flight.permits.add_permits(rest.len());
                return;
            }
        }
        let (Some(receipt), Some(message_id)) = (m.receipt_handle.clone(), m.message_id.clone())
        else {
            warn!("message without id or receipt handle skipped");
            queue.in_flight.permits.add_permits(1);
            continue;
        };
        let receive_count = system_attr(&m, &MessageSystemAttributeName::ApproximateReceiveCount)
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let arrival_ms = system_attr(&m, &MessageSystemAttributeName::SentTimestamp)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let group = if queue.fifo {
            system_attr(&m, &MessageSystemAttributeName::MessageGroupId).map(str::to_string)
        } else {
            None
        };
        let parts: Vec<(Bytes, Option<Defect>)> =
            match body::decode(m.body.unwrap_or_default(), queue.cfg.record_format) {
                Ok(d) => {
                    metrics::counter!(metric::MESSAGES_RECEIVED, "format" => d.format.as_str())
                        .increment(1);
                    d.events.into_iter().map(|b| (b, None)).collect()
                }
                Err(u) => {
                    metrics::counter!(metric::MESSAGES_RECEIVED, "format" => "undecodable")
                        .increment(1);
                    warn!(message_id, reason = %u.reason, "undecodable sqs message");
                    let defect = Defect {
                        reason: u.kind,
                        message: u.reason,
                    };
                    vec![(Bytes::from(u.body), Some(defect))]
                }
            };
        let bytes = parts.iter().map(|(b, _)| b.len() as u64).sum();
        let mut ledger = queue.in_flight.lock();
        let id = ledger.reserve_id();
        let partition_key = group.clone().unwrap_or_else(|| message_id.clone());
        let records: Vec<Record> = parts
            .into_iter()
            .enumerate()
            .map(|(i, (data, defect))| Record {
                origin: Origin::Sqs {
                    queue: queue.name.clone(),
                    message_id: message_id.clone(),
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                },
                partition_key: partition_key.clone(),
                data,
                arrival_ms,
                ack: Ack::new(Arc::clone(&target), id),
                defect,
                inner: None,
            })
            .collect();
        let entry = Entry {
            message_id,
            receipt,
            group,
            unacked: 0,
            phase: Phase::Started,
            // Visibility started after the call was sent: a safe lower bound.
            visible_until: sent_at + queue.cfg.visibility_timeout,
            received_at: now,
            receive_count,
            bytes,
        };
        let admit = ledger.admit(id, entry, records);
        let len = ledger.len();
        drop(ledger);
        queue.in_flight.count.send_replace(len);
        metrics::gauge!(metric::IN_FLIGHT).set(len as f64);
        match admit {
            Admit::Start(records) => {
                batch.extend(records);
                started.push(id);
            }
            Admit::Wait => {}
            Admit::Done => {
                let _ = queue.in_flight.done_tx.send(id);
            }
        }
    }
    deliver(queue, batch, &started).await;
}

/// Sends started records to the sink; on stop (or a closed sink) they are
/// not started after all: released at once.
async fn deliver(queue: &QueueRun, batch: Vec<Record>, ids: &[u64]) {
    if batch.is_empty() {
        return;
    }
    let n = batch.len() as u64;
    let sent = tokio::select! {
        r = queue.sink.send(batch) => match r {
            Ok(()) => true,
            Err(_) => {
                // The pipeline is gone: nothing more can be acknowledged.
                info!("sqs sink closed: stopping");
                queue.stop.cancel();
                false
            }
        },
        _ = queue.stop.cancelled() => false,
    };
    if sent {
        metrics::counter!(metric::RECORDS_DELIVERED).increment(n);
        return;
    }
    let released = queue.in_flight.with_removal(|l| l.abandon(ids));
    release(queue, released, |_| 0, "shutdown").await;
}

/// Hands FIFO messages whose turn came to the sink.
pub(crate) async fn releaser(
    queue: Arc<QueueRun>,
    mut start_rx: mpsc::UnboundedReceiver<Vec<Record>>,
) {
    loop {
        let records = tokio::select! {
            r = start_rx.recv() => match r {
                Some(r) => r,
                None => return,
            },
            _ = queue.finish.cancelled() => return,
        };
        let ids: Vec<u64> = records
            .first()
            .map(|r| r.ack.serial())
            .into_iter()
            .collect();
        deliver(&queue, records, &ids).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_poll_outlasts_the_attempt_timeout_and_keeps_the_rest() {
        let wait = Duration::from_secs(20);
        // The worker's SDK settings: 3.1 s to connect, 10 s an attempt.
        let worker = TimeoutConfig::builder()
            .connect_timeout(Duration::from_millis(3100))
            .operation_attempt_timeout(Duration::from_secs(10))
            .build();
        let t = receive_timeouts(Some(&worker), wait);
        assert_eq!(t.operation_attempt_timeout(), Some(wait + RECEIVE_MARGIN));
        assert_eq!(t.connect_timeout(), Some(Duration::from_millis(3100)));
        assert_eq!(t.operation_timeout(), None);
        // A longer attempt limit stays; an operation limit shorter than one
        // poll grows to it.
        let roomy = TimeoutConfig::builder()
            .operation_attempt_timeout(Duration::from_secs(60))
            .operation_timeout(Duration::from_secs(15))
            .build();
        let t = receive_timeouts(Some(&roomy), wait);
        assert_eq!(t.operation_attempt_timeout(), Some(Duration::from_secs(60)));
        assert_eq!(t.operation_timeout(), Some(wait + RECEIVE_MARGIN));
        // No client timeouts at all: the poll still gets a bound.
        let t = receive_timeouts(None, Duration::ZERO);
        assert_eq!(t.operation_attempt_timeout(), Some(RECEIVE_MARGIN));
    }
}
