//! Deleting: fully acknowledged messages go in DeleteMessageBatch calls (10
//! per call, a few calls at a time); failed deletes are retried, but a call
//! refused for good (access denied, no such queue) stops the source.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::warn;

use crate::error::{AwsError, ErrorClass};
use crate::metrics::sqs as metric;
use crate::sqs::config::MAX_RECEIVE_BATCH;
use crate::sqs::queue::QueueRun;

/// Calls of DeleteMessageBatch in flight at once.
const DELETE_CONCURRENCY: usize = 4;
/// How often the deleter looks for deletes to retry.
const DELETE_RETRY_TICK: Duration = Duration::from_secs(1);
/// After the shutdown grace, how long the last deletes may take.
const FINAL_DELETE_TIME: Duration = Duration::from_secs(5);

/// Deletes fully acknowledged messages.
pub(crate) async fn deleter(queue: Arc<QueueRun>, mut done_rx: mpsc::UnboundedReceiver<u64>) {
    let mut pending: VecDeque<u64> = VecDeque::new();
    let mut calls = JoinSet::new();
    let mut retry = tokio::time::interval(DELETE_RETRY_TICK);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut final_deadline: Option<Instant> = None;
    loop {
        tokio::select! {
            Some(id) = done_rx.recv() => pending.push_back(id),
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
            _ = retry.tick() => {
                // Deletes that failed went back to Done: try them again.
                let known: HashSet<u64> = pending.iter().copied().collect();
                pending.extend(queue.in_flight.lock().done_ids().into_iter().filter(|id| !known.contains(id)));
            }
            _ = queue.finish.cancelled(), if final_deadline.is_none() => {
                final_deadline = Some(Instant::now() + FINAL_DELETE_TIME);
            }
        }
        while let Ok(id) = done_rx.try_recv() {
            pending.push_back(id);
        }
        while calls.len() < DELETE_CONCURRENCY && !pending.is_empty() {
            let mut batch = Vec::new();
            {
                let mut ledger = queue.in_flight.lock();
                while batch.len() < MAX_RECEIVE_BATCH {
                    let Some(id) = pending.pop_front() else { break };
                    if let Some(receipt) = ledger.take_for_delete(id) {
                        batch.push((id, receipt));
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            calls.spawn(delete_batch(Arc::clone(&queue), batch));
        }
        if let Some(deadline) = final_deadline {
            let idle = calls.is_empty() && queue.in_flight.lock().is_empty();
            if idle || Instant::now() >= deadline {
                calls.abort_all();
                return;
            }
        }
    }
}

async fn delete_batch(queue: Arc<QueueRun>, batch: Vec<(u64, String)>) {
    let entries: Vec<DeleteMessageBatchRequestEntry> = batch
        .iter()
        .filter_map(|(id, receipt)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(id.to_string())
                .receipt_handle(receipt)
                .build()
                .ok()
        })
        .collect();
    let out = queue
        .client
        .delete_message_batch()
        .queue_url(&queue.cfg.queue_url)
        .set_entries(Some(entries))
        .send()
        .await;
    match out {
        Ok(out) => {
            let mut deleted = 0u64;
            for s in out.successful() {
                if let Ok(id) = s.id().parse::<u64>() {
                    queue.in_flight.remove(id);
                    deleted += 1;
                }
            }
            metrics::counter!(metric::MESSAGES_DELETED).increment(deleted);
            let failed: HashMap<u64, (bool, String)> = out
                .failed()
                .iter()
                .filter_map(|f| {
                    let id = f.id().parse::<u64>().ok()?;
                    Some((id, (f.sender_fault(), f.code().to_string())))
                })
                .collect();
            for (id, (sender_fault, code)) in failed {
                metrics::counter!(metric::CALL_ERRORS, "op" => "delete").increment(1);
                if sender_fault {
                    // The receipt is no longer valid (the message came back
                    // or is gone): retrying cannot help; its writes are
                    // idempotent if it is delivered again.
                    warn!(code, "delete refused; message dropped from tracking");
                    queue.in_flight.remove(id);
                } else {
                    queue.in_flight.lock().delete_failed(id);
                }
            }
        }
        Err(err) => {
            metrics::counter!(metric::CALL_ERRORS, "op" => "delete").increment(1);
            let e = AwsError::new("DeleteMessageBatch", &err);
            {
                let mut ledger = queue.in_flight.lock();
                for (id, _) in &batch {
                    ledger.delete_failed(*id);
                }
            }
            // Refused for good (access denied, the queue deleted): stored
            // messages would come back and be stored again, for ever, while
            // the worker looked healthy. Stop, loudly.
            if matches!(e.class, ErrorClass::Fatal | ErrorClass::NotFound) {
                queue.fail(e.into());
            } else {
                warn!(error = %e, "delete failed; retrying");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use aws_sdk_sqs::Client;
    use aws_sdk_sqs::operation::change_message_visibility_batch::{
        ChangeMessageVisibilityBatchError, ChangeMessageVisibilityBatchOutput,
    };
    use aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchError;
    use aws_sdk_sqs::operation::receive_message::{ReceiveMessageError, ReceiveMessageOutput};
    use aws_sdk_sqs::types::Message;
    use aws_smithy_mocks::{
        MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock,
    };
    use aws_smithy_types::error::ErrorMetadata;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    use crate::error::ConsumerError;
    use crate::record::{Ack, Record};
    use crate::sqs::{SqsConfig, SqsSource};

    /// ReceiveMessage: one message, then a queue slow to answer (retried
    /// with back-off).
    fn one_message() -> Rule {
        mock!(Client::receive_message)
            .sequence()
            .output(|| {
                ReceiveMessageOutput::builder()
                    .messages(
                        Message::builder()
                            .message_id("m1")
                            .receipt_handle("r1")
                            .body("{}")
                            .build(),
                    )
                    .build()
            })
            .times(1)
            .error(|| {
                ReceiveMessageError::generic(
                    ErrorMetadata::builder().code("ServiceUnavailable").build(),
                )
            })
            .repeatedly()
            .build()
    }

    fn access_denied(op: &str) -> ErrorMetadata {
        ErrorMetadata::builder()
            .code("AccessDenied")
            .message(format!("not authorized to perform sqs:{op}"))
            .build()
    }

    /// An SQS client answering by `rules` (`mock_client!` without the
    /// SDK's test-util feature, which would build the SQS crate a second
    /// time for these tests).
    fn client(rules: &[&Rule]) -> Client {
        let mut mocks = MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny);
        for r in rules {
            mocks = mocks.with_rule(r);
        }
        Client::from_conf(
            aws_sdk_sqs::Config::builder()
                .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
                .region(aws_sdk_sqs::config::Region::new("eu-west-1"))
                .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                    "AKID", "secret", None, None, "test",
                ))
                .http_client(create_mock_http_client())
                .interceptor(mocks)
                .build(),
        )
    }

    /// Runs the source on `client` until it stops by itself (at most 15 s),
    /// handing the first batch's records to `take`.
    async fn run_until_stopped(
        config: SqsConfig,
        client: Client,
        take: impl FnOnce(Vec<Record>),
    ) -> Result<(), ConsumerError> {
        let (sink, mut pipeline) = mpsc::channel(4);
        let run = tokio::spawn(SqsSource::new(config, client).run(sink, CancellationToken::new()));
        take(pipeline.recv().await.expect("the message's record"));
        tokio::time::timeout(Duration::from_secs(15), run)
            .await
            .expect("the source stops within 15 s of a call refused for good")
            .unwrap()
    }

    fn config() -> SqsConfig {
        let mut config = SqsConfig::new("https://sqs.eu-west-1.amazonaws.com/1/q");
        config.shutdown_grace = Duration::from_secs(1);
        config
    }

    /// Ten messages in one receive, each a base64 gzip body of NDJSON
    /// inflating to 1 MiB, with the messages in flight bounded at 2 MiB:
    /// only the messages that fit (plus one) are inflated and handed on
    /// before their events are acknowledged; the rest follow once they are.
    #[tokio::test]
    async fn a_receive_batch_is_inflated_only_as_far_as_the_byte_bound() {
        use base64::Engine as _;
        use std::io::Write as _;
        let line = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(1013));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        for _ in 0..1024 {
            gz.write_all(line.as_bytes()).unwrap();
        }
        let body = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        let receive = mock!(Client::receive_message)
            .sequence()
            .output(move || {
                ReceiveMessageOutput::builder()
                    .set_messages(Some(
                        (0..10)
                            .map(|i| {
                                Message::builder()
                                    .message_id(format!("m{i}"))
                                    .receipt_handle(format!("r{i}"))
                                    .body(body.clone())
                                    .build()
                            })
                            .collect(),
                    ))
                    .build()
            })
            .times(1)
            .output(|| ReceiveMessageOutput::builder().build())
            .repeatedly()
            .build();
        let delete = mock!(Client::delete_message_batch).then_output(|| {
            aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchOutput::builder()
                .set_successful(Some(vec![]))
                .set_failed(Some(vec![]))
                .build()
                .unwrap()
        });
        let visibility = mock!(Client::change_message_visibility_batch).then_output(|| {
            ChangeMessageVisibilityBatchOutput::builder()
                .set_successful(Some(vec![]))
                .set_failed(Some(vec![]))
                .build()
                .unwrap()
        });
        let client = client(&[&receive, &delete, &visibility]);
        let mut config = config();
        config.record_format = tidemark_schema::framing::RecordFormat::Ndjson;
        config.max_in_flight_bytes = 2 * 1024 * 1024;
        config.wait_time = Duration::ZERO;
        let (sink, mut pipeline) = mpsc::channel(64);
        let shutdown = CancellationToken::new();
        let run = tokio::spawn(SqsSource::new(config, client).run(sink, shutdown.clone()));
        let mut held: Vec<Record> = Vec::new();
        while let Ok(Some(batch)) =
            tokio::time::timeout(Duration::from_millis(500), pipeline.recv()).await
        {
            held.extend(batch);
        }
        let bytes: usize = held.iter().map(|r| r.data.len()).sum();
        assert!(bytes > 0, "nothing delivered");
        assert!(
            bytes <= 3 * 1024 * 1024,
            "{bytes} inflated bytes handed on against a bound of 2 MiB"
        );
        // Acknowledged, the rest follows.
        let mut n = held.len();
        Ack::done_all(held.into_iter().map(|r| r.ack));
        while n < 10 * 1024 {
            let batch = tokio::time::timeout(Duration::from_secs(10), pipeline.recv())
                .await
                .expect("the rest within 10 s")
                .expect("source alive");
            n += batch.len();
            Ack::done_all(batch.into_iter().map(|r| r.ack));
        }
        assert_eq!(n, 10 * 1024);
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(15), run)
            .await
            .expect("stops")
            .unwrap()
            .unwrap();
    }

    /// DeleteMessage refused for good (AccessDenied): the message was
    /// stored, can never be deleted, and comes back after its visibility
    /// timeout to be stored again, for ever. The source stops with the
    /// error (the worker exits non-zero) instead of retrying while it looks
    /// healthy.
    #[tokio::test]
    async fn delete_refused_for_good_stops_the_source() {
        let receive = one_message();
        let delete = mock!(Client::delete_message_batch)
            .then_error(|| DeleteMessageBatchError::generic(access_denied("DeleteMessage")));
        let visibility = mock!(Client::change_message_visibility_batch).then_output(|| {
            ChangeMessageVisibilityBatchOutput::builder()
                .set_successful(Some(vec![]))
                .set_failed(Some(vec![]))
                .build()
                .unwrap()
        });
        let client = client(&[&receive, &delete, &visibility]);
        let ended = run_until_stopped(config(), client, |records| {
            Ack::done_all(records.into_iter().map(|r| r.ack));
        })
        .await;
        let err = ended.expect_err("stopped with the error");
        assert!(err.to_string().contains("AccessDenied"), "{err}");
        assert!(delete.num_calls() >= 1);
    }

    /// ChangeMessageVisibility refused for good while a message is being
    /// written: it would come back to another worker mid-write, again and
    /// again. The source stops with the error.
    #[tokio::test]
    async fn visibility_refused_for_good_stops_the_source() {
        let receive = one_message();
        let visibility = mock!(Client::change_message_visibility_batch).then_error(|| {
            ChangeMessageVisibilityBatchError::generic(access_denied("ChangeMessageVisibility"))
        });
        let client = client(&[&receive, &visibility]);
        let mut config = config();
        // The heartbeat falls due a second after the receive.
        config.visibility_timeout = Duration::from_secs(3);
        config.heartbeat_margin = Duration::from_secs(2);
        config.max_processing_time = Duration::from_secs(60);
        let mut held = Vec::new();
        // The records stay in flight (a slow write).
        let ended = run_until_stopped(config, client, |records| held = records).await;
        let err = ended.expect_err("stopped with the error");
        assert!(err.to_string().contains("AccessDenied"), "{err}");
        assert!(visibility.num_calls() >= 1);
        drop(held);
    }
}
