//! Visibility: the heartbeat that extends the visibility of messages in
//! flight before it runs out (and gives up those never acknowledged within
//! `max_processing_time`), and the releases that make messages visible
//! again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, Message};
use aws_smithy_types::timeout::TimeoutConfig;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::error::{AwsError, ErrorClass};
use crate::metrics::sqs as metric;
use crate::sqs::config::MAX_RECEIVE_BATCH;
use crate::sqs::ledger::{Phase, Released};
use crate::sqs::queue::QueueRun;

/// Per-call settings of a heartbeat's ChangeMessageVisibilityBatch: one
/// attempt, at most `margin / 2` in all. The SDK's retries (3 attempts of
/// up to 10 s each) would outlast the margin, so the extension would come
/// after the visibility ended; the next tick (every `margin / 3`) is the
/// retry instead, and it still comes before the visibility ends.
fn heartbeat_call(base: Option<&TimeoutConfig>, margin: Duration) -> aws_sdk_sqs::config::Builder {
    let bound = margin / 2;
    let timeouts = base
        .map_or_else(TimeoutConfig::builder, TimeoutConfig::to_builder)
        .operation_timeout(bound)
        .operation_attempt_timeout(bound)
        .build();
    aws_sdk_sqs::config::Builder::default()
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
        .timeout_config(timeouts)
}

/// Outcome of [`change_visibility`]: indexes into the request's items.
#[derive(Debug, Default)]
struct VisibilityOutcome {
    ok: HashSet<usize>,
    /// Refused entries with SQS's error code.
    refused: Vec<(usize, String)>,
    /// A call refused for good (access denied, no such queue), if any.
    refused_for_good: Option<AwsError>,
}

/// Sets the visibility of `items` (receipt, seconds), 10 per call, the calls
/// concurrently, each with the client's settings changed by `call`.
async fn change_visibility(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    items: &[(String, i32)],
    call: Option<&aws_sdk_sqs::config::Builder>,
) -> VisibilityOutcome {
    let calls = items
        .chunks(MAX_RECEIVE_BATCH)
        .enumerate()
        .map(|(c, chunk)| {
            let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, (receipt, secs))| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id((c * MAX_RECEIVE_BATCH + i).to_string())
                        .receipt_handle(receipt)
                        .visibility_timeout(*secs)
                        .build()
                        .ok()
                })
                .collect();
            async move {
                let mut request = client
                    .change_message_visibility_batch()
                    .queue_url(queue_url)
                    .set_entries(Some(entries))
                    .customize();
                if let Some(call) = call {
                    request = request.config_override(call.clone());
                }
                let out = request.send().await;
                let mut outcome = VisibilityOutcome::default();
                match out {
                    Ok(out) => {
                        outcome.ok = out
                            .successful()
                            .iter()
                            .filter_map(|s| s.id().parse::<usize>().ok())
                            .collect();
                        outcome.refused = out
                            .failed()
                            .iter()
                            .filter_map(|f| {
                                Some((f.id().parse::<usize>().ok()?, f.code().to_string()))
                            })
                            .collect();
                    }
                    Err(err) => {
                        metrics::counter!(metric::CALL_ERRORS, "op" => "change_visibility")
                            .increment(1);
                        let e = AwsError::new("ChangeMessageVisibilityBatch", &err);
                        warn!(error = %e, "visibility change failed");
                        if matches!(e.class, ErrorClass::Fatal | ErrorClass::NotFound) {
                            outcome.refused_for_good = Some(e);
                        }
                    }
                }
                outcome
            }
        });
    let mut all = VisibilityOutcome::default();
    for o in futures::future::join_all(calls).await {
        all.ok.extend(o.ok);
        all.refused.extend(o.refused);
        all.refused_for_good = all.refused_for_good.or(o.refused_for_good);
    }
    all
}

/// Makes messages that left the ledger visible again after `visibility(m)`
/// seconds. Best effort: a failure only means they come back when their
/// current visibility ends.
pub(crate) async fn release(
    queue: &QueueRun,
    released: Vec<Released>,
    visibility: impl Fn(&Released) -> i32,
    reason: &'static str,
) {
    if released.is_empty() {
        return;
    }
    let items: Vec<(String, i32)> = released
        .iter()
        .map(|r| (r.receipt.clone(), visibility(r)))
        .collect();
    let out = change_visibility(&queue.client, &queue.cfg.queue_url, &items, None).await;
    metrics::counter!(metric::MESSAGES_RELEASED, "reason" => reason).increment(out.ok.len() as u64);
    debug!(count = released.len(), released = out.ok.len(), refused = ?out.refused, reason, "messages made visible");
}

/// Releases messages that were never admitted.
pub(crate) async fn release_raw(queue: &QueueRun, messages: &[Message]) {
    let items: Vec<(String, i32)> = messages
        .iter()
        .filter_map(|m| m.receipt_handle.clone())
        .map(|r| (r, 0))
        .collect();
    let out = change_visibility(&queue.client, &queue.cfg.queue_url, &items, None).await;
    metrics::counter!(metric::MESSAGES_RELEASED, "reason" => "shutdown")
        .increment(out.ok.len() as u64);
}

/// Extends visibility before it runs out; gives up stale messages.
pub(crate) async fn heartbeat(queue: Arc<QueueRun>) {
    let margin = queue.cfg.heartbeat_margin;
    let tick = (margin / 3).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let call = heartbeat_call(queue.client.config().timeout_config(), margin);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Releases of stale messages run beside the heartbeat: through the
    // retrying client a slow SQS takes them up to 3 attempts of 10 s, and
    // the other messages' extensions must not wait that long. Bounded by
    // the messages in flight (a released message left the ledger); those
    // still running at the end are dropped (their messages come back when
    // their visibility ends, as for any failed release).
    let mut releases = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = queue.finish.cancelled() => return,
        }
        while releases.try_join_next().is_some() {}
        let now = Instant::now();
        let stale = queue
            .in_flight
            .with_removal(|l| l.stale(now, queue.cfg.max_processing_time));
        if !stale.is_empty() {
            warn!(
                count = stale.len(),
                "messages unacknowledged for max_processing_time: given up"
            );
            let queue = Arc::clone(&queue);
            releases.spawn(async move {
                release(
                    &queue,
                    stale,
                    |r| queue.retry_visibility(r.receive_count),
                    "stale",
                )
                .await;
            });
        }
        let due = queue.in_flight.lock().due_for_heartbeat(now, margin);
        if due.is_empty() {
            continue;
        }
        let sent_at = Instant::now();
        let items: Vec<(String, i32)> = due
            .iter()
            .map(|(_, receipt)| (receipt.clone(), queue.visibility_secs()))
            .collect();
        let mut out =
            change_visibility(&queue.client, &queue.cfg.queue_url, &items, Some(&call)).await;
        debug!(due = due.len(), extended = out.ok.len(), took = ?sent_at.elapsed(), "heartbeat");
        // Visibility refused for good: every message in flight would come
        // back to another worker mid-write. Stop, loudly.
        if let Some(e) = out.refused_for_good.take() {
            queue.fail(e.into());
        }
        metrics::counter!(metric::VISIBILITY_EXTENDED).increment(out.ok.len() as u64);
        let until = sent_at + queue.cfg.visibility_timeout;
        let mut ledger = queue.in_flight.lock();
        for i in out.ok {
            if let Some((id, _)) = due.get(i) {
                ledger.extended(*id, until);
            }
        }
        for (i, code) in out.refused {
            let Some((id, _)) = due.get(i) else { continue };
            // A message deleted meanwhile is no news; one still waiting for
            // its writes may be delivered again (its writes are idempotent).
            let live = ledger
                .get(*id)
                .is_some_and(|e| !matches!(e.phase, Phase::Deleting | Phase::Done));
            if live {
                metrics::counter!(metric::CALL_ERRORS, "op" => "change_visibility").increment(1);
                warn!(
                    code,
                    message_id = ledger.get(*id).map(|e| e.message_id.as_str()),
                    "visibility extension refused"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A heartbeat to an SQS that accepts connections and never answers:
    /// one attempt (no SDK retry), given up within half the margin, though
    /// the client itself would try 3 times for 10 s each.
    #[tokio::test]
    async fn a_hung_heartbeat_is_one_attempt_bounded_below_the_margin() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&connections);
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                held.push(conn);
            }
        });
        let worker_timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_millis(3100))
            .operation_attempt_timeout(Duration::from_secs(10))
            .build();
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .endpoint_url(&url)
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::standard().with_max_attempts(3))
            .timeout_config(worker_timeouts.clone())
            .build();
        let client = aws_sdk_sqs::Client::from_conf(conf);
        let margin = Duration::from_secs(2);
        let call = heartbeat_call(Some(&worker_timeouts), margin);
        let items: Vec<(String, i32)> = (0..3).map(|i| (format!("r{i}"), 30)).collect();
        let started = std::time::Instant::now();
        let out = change_visibility(
            &client,
            &format!("{url}/000000000000/q"),
            &items,
            Some(&call),
        )
        .await;
        let took = started.elapsed();
        assert!(out.ok.is_empty() && out.refused.is_empty(), "{out:?}");
        assert!(
            took < margin,
            "the heartbeat took {took:?}, margin {margin:?}"
        );
        assert!(
            took >= margin / 2 - Duration::from_millis(100),
            "gave up early: {took:?}"
        );
        assert_eq!(
            connections.load(Ordering::SeqCst),
            1,
            "one attempt, no SDK retry"
        );
        server.abort();
    }

    /// A server speaking just enough of SQS's JSON protocol: a
    /// ChangeMessageVisibilityBatch naming a receipt that starts with
    /// `stale-` is never answered (a slow SQS for that call), any other is
    /// answered at once with every entry done; the times of those are
    /// recorded.
    async fn slow_for_stale(
        answered: Arc<std::sync::Mutex<Vec<Instant>>>,
    ) -> (String, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let answered = Arc::clone(&answered);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        // One request at a time: headers, then the body.
                        let mut chunk = [0u8; 4096];
                        let n = match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_string();
                        let Some(head_end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let len = text[..head_end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() < head_end + 4 + len {
                            continue;
                        }
                        let body = String::from_utf8_lossy(&buf[head_end + 4..head_end + 4 + len])
                            .to_string();
                        buf.drain(..head_end + 4 + len);
                        if body.contains("stale-") {
                            // Held for ever: the connection stays open.
                            std::future::pending::<()>().await;
                        }
                        answered.lock().unwrap().push(Instant::now());
                        let reply = r#"{"Successful":[{"Id":"0"}],"Failed":[]}"#;
                        let response = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{reply}",
                            reply.len()
                        );
                        if conn.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, server)
    }

    /// A slow SQS answering the release of a stale message late (here:
    /// never) must not hold back the visibility extension of the other
    /// messages: released through the retrying client inline, the stale
    /// message's release took the heartbeat for 3 attempts of 10 s while
    /// another message's visibility ran out.
    #[tokio::test]
    async fn a_slow_release_of_stale_messages_does_not_delay_extensions() {
        use crate::sqs::config::SqsConfig;
        use crate::sqs::ledger::Ledger;
        use crate::sqs::ledger::tests::{entry, records};
        use crate::sqs::queue::InFlight;
        use crate::sqs::scaler::Scaler;
        use std::sync::Mutex;
        use tokio::sync::{Semaphore, mpsc, watch};
        use tokio_util::sync::CancellationToken;

        let answered = Arc::new(Mutex::new(Vec::new()));
        let (url, server) = slow_for_stale(Arc::clone(&answered)).await;
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .endpoint_url(&url)
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::standard().with_max_attempts(3))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_millis(3100))
                    .operation_attempt_timeout(Duration::from_secs(10))
                    .build(),
            )
            .build();
        let mut cfg = SqsConfig::new(format!("{url}/000000000000/q"));
        cfg.heartbeat_margin = Duration::from_secs(2);
        cfg.max_processing_time = Duration::from_secs(60);
        let (done_tx, _done) = mpsc::unbounded_channel();
        let (start_tx, _start) = mpsc::unbounded_channel();
        let (grow_tx, _grow) = mpsc::unbounded_channel();
        let (sink, _pipeline) = mpsc::channel(1);
        let in_flight = Arc::new(InFlight {
            ledger: Mutex::new(Ledger::default()),
            done_tx,
            start_tx,
            permits: Arc::new(Semaphore::new(10)),
            count: watch::Sender::new(0),
            freed: Default::default(),
        });
        let started = Instant::now();
        let extend_by = started + Duration::from_millis(1500);
        {
            let mut ledger = in_flight.lock();
            // Received long ago and never acknowledged: given up, released.
            let id = ledger.reserve_id();
            let mut stale = entry("stale-1", None, started);
            stale.receipt = "stale-1".into();
            stale.received_at = started - Duration::from_secs(120);
            stale.visible_until = started + Duration::from_secs(60);
            let _ = ledger.admit(id, stale, records(id, "stale-1", 1));
            // In flight, its visibility ending in 1.5 s: due now.
            let id = ledger.reserve_id();
            let mut due = entry("due-1", None, started);
            due.receipt = "due-1".into();
            due.visible_until = extend_by;
            let _ = ledger.admit(id, due, records(id, "due-1", 1));
        }
        let queue = Arc::new(QueueRun {
            name: "q".into(),
            fifo: false,
            scaler: Mutex::new(Scaler::new(1)),
            cfg,
            client: aws_sdk_sqs::Client::from_conf(conf),
            in_flight,
            sink,
            stop: CancellationToken::new(),
            finish: CancellationToken::new(),
            error: Mutex::new(None),
            grow_tx,
        });
        let beat = tokio::spawn(heartbeat(Arc::clone(&queue)));
        let deadline = started + Duration::from_secs(5);
        while answered.lock().unwrap().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let first = answered.lock().unwrap().first().copied();
        assert!(
            first.is_some_and(|t| t < extend_by),
            "the extension came {:?} after the start, its visibility ended after {:?}",
            first.map(|t| t - started),
            extend_by - started
        );
        queue.finish.cancel();
        tokio::time::timeout(Duration::from_secs(5), beat)
            .await
            .expect("the heartbeat stops at once")
            .unwrap();
        server.abort();
    }
}
