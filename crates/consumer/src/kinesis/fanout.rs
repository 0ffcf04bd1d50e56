//! Enhanced fan-out (`read_mode = "fan_out"`): the stream consumer's
//! registration ([`register`]) and a shard reader that
//! subscribes with SubscribeToShard instead of polling GetRecords.
//!
//! Guarantees (besides those of the parent module, which still hold: the
//! lease deadline, acks, checkpoints, parents first, SHARD_END):
//! - no gap across renewals: a new subscription starts after the last
//!   sequence number delivered (or at the lease checkpoint for the first
//!   one); records at or before what was delivered are never delivered
//!   twice by one reader;
//! - back-pressure: the next event is taken from the subscription only when
//!   the shard has room under `max_unacked_per_shard` and the sink accepted
//!   the previous batch, so the server is held by HTTP flow control;
//! - bounded retries: a shard whose subscription fails
//!   [`SUBSCRIBE_BUDGET`] times in a row is released (another worker, or
//!   this one later, takes it again);
//! - the consumer is registered (or reused) at start and never deregistered
//!   here: `tidemark consumer deregister` is a deliberate operator action.

use std::time::Duration;

use aws_sdk_kinesis::types::{
    ConsumerStatus, ShardIteratorType, StartingPosition, SubscribeToShardEventStream,
};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{Reader, Stop, retry_backoff};
use crate::checkpoint::Position;
use crate::config::{InitialPosition, KinesisConfig};
use crate::convert::push_kinesis_records;
use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::lease::{Checkpoint, Lease};
use crate::metrics::kinesis as metric;
use crate::status::ShardState;
use tidemark_schema::SharedStr;

/// Consecutive failed subscriptions of one shard before its lease is
/// released (with the 100 ms..10 s back-off, about a minute and a half).
pub const SUBSCRIBE_BUDGET: u32 = 15;

/// How long registration waits for the consumer to become ACTIVE (AWS
/// takes a few seconds; a consumer being deleted first has to go).
const REGISTER_DEADLINE: Duration = Duration::from_secs(120);

/// The stream's ARN: the configured one, or DescribeStreamSummary's.
pub async fn stream_arn(
    kinesis: &aws_sdk_kinesis::Client,
    config: &KinesisConfig,
) -> Result<String, ConsumerError> {
    if config.stream_is_arn() {
        return Ok(config.stream.clone());
    }
    let out = kinesis
        .describe_stream_summary()
        .stream_name(&config.stream)
        .send()
        .await
        .map_err(|e| AwsError::new("DescribeStreamSummary", &e))?;
    Ok(out
        .stream_description_summary()
        .map(|s| s.stream_arn().to_string())
        .unwrap_or_default())
}

fn timed_out(op: &'static str, what: String) -> ConsumerError {
    AwsError {
        op,
        class: ErrorClass::Retry,
        message: what,
    }
    .into()
}

/// Registers the configured stream consumer, or reuses it when it exists,
/// and waits until it is ACTIVE; returns its ARN. Several workers starting
/// together race safely: a registration refused because another one is
/// under way (ResourceInUseException) waits for that one.
pub async fn register(
    kinesis: &aws_sdk_kinesis::Client,
    config: &KinesisConfig,
) -> Result<String, ConsumerError> {
    let stream = stream_arn(kinesis, config).await?;
    let name = config.consumer_name();
    let deadline = Instant::now() + REGISTER_DEADLINE;
    let mut registered = false;
    loop {
        let described = kinesis
            .describe_stream_consumer()
            .stream_arn(&stream)
            .consumer_name(name)
            .send()
            .await;
        match described {
            Ok(out) => {
                if let Some(c) = out.consumer_description() {
                    match c.consumer_status() {
                        ConsumerStatus::Active => {
                            info!(consumer = %c.consumer_arn(), reused = !registered, "stream consumer active");
                            return Ok(c.consumer_arn().to_string());
                        }
                        status => {
                            debug!(consumer = %name, ?status, "waiting for the stream consumer")
                        }
                    }
                }
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                match kinesis
                    .register_stream_consumer()
                    .stream_arn(&stream)
                    .consumer_name(name)
                    .send()
                    .await
                {
                    Ok(_) => {
                        info!(consumer = %name, stream = %stream, "stream consumer registered");
                        registered = true;
                    }
                    // Another worker registers it, or the old one is still
                    // being deleted: wait for that to finish.
                    Err(e)
                        if e.as_service_error()
                            .is_some_and(|s| s.is_resource_in_use_exception()) => {}
                    Err(e) => {
                        let err = AwsError::new("RegisterStreamConsumer", &e);
                        if !err.class.is_retryable() {
                            return Err(err.into());
                        }
                        warn!(error = %err, "registering the stream consumer failed; retrying");
                    }
                }
            }
            Err(e) => {
                let err = AwsError::new("DescribeStreamConsumer", &e);
                if !err.class.is_retryable() {
                    return Err(err.into());
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(timed_out(
                "RegisterStreamConsumer",
                format!("stream consumer {name} not ACTIVE after {REGISTER_DEADLINE:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Where a subscription starts: after the last delivered sequence number,
/// else at the lease checkpoint (AT, not AFTER: the checkpoint may sit
/// inside a KPL aggregate whose later sub-records are not done).
fn starting_position(
    cp: &Checkpoint,
    after: Option<&SharedStr>,
    initial: &InitialPosition,
) -> Result<StartingPosition, ConsumerError> {
    let b = StartingPosition::builder();
    let b = match (after, cp) {
        (Some(seq), _) => b
            .r#type(ShardIteratorType::AfterSequenceNumber)
            .sequence_number(seq.as_str()),
        (None, Checkpoint::At(p)) => b
            .r#type(ShardIteratorType::AtSequenceNumber)
            .sequence_number(p.sequence.as_str()),
        (None, Checkpoint::Latest) => b.r#type(ShardIteratorType::Latest),
        (None, Checkpoint::AtTimestamp) => match initial {
            InitialPosition::AtTimestamp { timestamp } => {
                b.r#type(ShardIteratorType::AtTimestamp).timestamp(
                    aws_smithy_types::DateTime::from_millis(timestamp.timestamp_millis()),
                )
            }
            _ => b.r#type(ShardIteratorType::TrimHorizon),
        },
        (None, _) => b.r#type(ShardIteratorType::TrimHorizon),
    };
    // Fails only without a type, which every arm sets.
    b.build().map_err(|e| {
        AwsError {
            op: "SubscribeToShard",
            class: ErrorClass::Fatal,
            message: e.to_string(),
        }
        .into()
    })
}

/// ResourceInUseException: the shard's previous subscription (ours before a
/// renewal, or the previous lease owner's) is still active for a moment.
/// The event stream's exception may arrive without its code, hence the
/// message test too.
fn is_in_use(err: &AwsError) -> bool {
    err.message.contains("ResourceInUse") || err.message.contains("active subscription")
}

/// How one subscription ended.
enum Ended {
    /// Renewal time, or the server ended it: subscribe again.
    Renew,
    /// The subscription failed (counted against [`SUBSCRIBE_BUDGET`]).
    Failed(AwsError),
    /// The shard ended; its children.
    ShardEnd(Vec<String>),
    /// Lease lost or shutdown.
    Stop(Stop),
}

impl Reader {
    /// The fan-out counterpart of [`Reader::read`]'s GetRecords loop, called
    /// once the parents are done.
    pub(super) async fn read_fan_out(
        &mut self,
        lease: &Lease,
        consumer_arn: &str,
    ) -> Result<Stop, ConsumerError> {
        let shard_label = super::streams::shard_labels(&self.ctx.table, &self.shard);
        // The last record delivered: renewals start after it.
        let mut after: Option<SharedStr> = None;
        let mut failures = 0u32;
        let mut retry = retry_backoff();
        let mut subscriptions = 0u64;
        let mut last_probe = Instant::now();
        loop {
            if let Some(stop) = self.stopped() {
                return Ok(stop);
            }
            if let Err(stop) = self.wait_live().await {
                return Ok(stop);
            }
            let pos = starting_position(
                &lease.checkpoint,
                after.as_ref(),
                &self.ctx.config.initial_position,
            )?;
            let ended = self
                .subscription(lease, consumer_arn, pos, &mut after, &mut last_probe)
                .await?;
            subscriptions += 1;
            match ended {
                Ended::Renew => {
                    failures = 0;
                    retry = retry_backoff();
                    metrics::counter!(metric::SUBSCRIPTION_RENEWALS, shard_label.clone())
                        .increment(1);
                    debug!(shard = %self.shard, subscriptions, "subscription renewed");
                }
                Ended::Failed(err) => {
                    let in_use = is_in_use(&err);
                    let reason = if in_use {
                        "in_use"
                    } else {
                        match err.class {
                            ErrorClass::Throttled => "throttled",
                            _ => "error",
                        }
                    };
                    metrics::counter!(
                        metric::SUBSCRIPTION_FAILURES,
                        super::streams::with(shard_label.clone(), "reason", reason)
                    )
                    .increment(1);
                    if err.class == ErrorClass::Fatal && !in_use {
                        return Err(err.into());
                    }
                    failures += 1;
                    if failures >= SUBSCRIBE_BUDGET {
                        warn!(shard = %self.shard, error = %err, failures, "subscriptions keep failing; releasing the lease");
                        return Err(err.into());
                    }
                    let d = retry.next().unwrap_or(Duration::from_secs(10));
                    // In use: the previous owner's subscription has not
                    // ended yet (it ends when that reader stops).
                    info!(shard = %self.shard, error = %err, delay = ?d, reason, "subscription failed; subscribing again");
                    if let Err(stop) = self.guard(tokio::time::sleep(d)).await {
                        return Ok(stop);
                    }
                }
                Ended::ShardEnd(children) => return self.finish_shard(children).await,
                Ended::Stop(stop) => return Ok(stop),
            }
        }
    }

    /// One subscription, read until renewal time, its end, a failure, the
    /// shard's end, or a stop.
    async fn subscription(
        &mut self,
        lease: &Lease,
        consumer_arn: &str,
        pos: StartingPosition,
        after: &mut Option<SharedStr>,
        last_probe: &mut Instant,
    ) -> Result<Ended, ConsumerError> {
        let cfg = self.ctx.config.clone();
        let stream = SharedStr::from(cfg.stream_name());
        let shard_id = SharedStr::from(self.shard.as_str());
        let shard_label = super::streams::shard_labels(&self.ctx.table, &self.shard);
        let renew_at = Instant::now() + cfg.subscription_renewal;
        let send = self
            .ctx
            .kinesis
            .subscribe_to_shard()
            .consumer_arn(consumer_arn)
            .shard_id(&self.shard)
            .starting_position(pos)
            .send();
        let mut out = match self.guard(send).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Ok(Ended::Failed(AwsError::new("SubscribeToShard", &e))),
            Err(stop) => return Ok(Ended::Stop(stop)),
        };
        self.ctx
            .status
            .update(&self.shard, |s| s.state = ShardState::Reading);
        loop {
            if let Some(stop) = self.stopped() {
                return Ok(Ended::Stop(stop));
            }
            self.maybe_checkpoint(false).await;
            // Back-pressure: take the next event only with room for it.
            let max = cfg.max_unacked_per_shard;
            if let Err(stop) = self
                .guard(self.tracker.wait_for(|w| w.in_flight() < max))
                .await
            {
                return Ok(Ended::Stop(stop));
            }
            if let Some(g) = &self.ctx.govs
                && let Err(stop) = self.guard(g.dynamodb.wait_closed()).await
            {
                return Ok(Ended::Stop(stop));
            }
            // Wake for periodic checkpoints while the shard is idle.
            let tick = Instant::now() + cfg.checkpoint_interval;
            let next = tokio::select! {
                biased;
                _ = self.lease.lost.cancelled() => return Ok(Ended::Stop(Stop::Lost)),
                _ = self.ctx.shutdown.cancelled() => return Ok(Ended::Stop(Stop::Shutdown)),
                _ = tokio::time::sleep_until(renew_at) => return Ok(Ended::Renew),
                _ = tokio::time::sleep_until(tick) => continue,
                r = out.event_stream.recv() => r,
            };
            let event = match next {
                Ok(Some(SubscribeToShardEventStream::SubscribeToShardEvent(e))) => e,
                Ok(Some(other)) => {
                    debug!(shard = %self.shard, ?other, "unknown subscription event ignored");
                    continue;
                }
                // The server ended it (its 5 minutes are over).
                Ok(None) => return Ok(Ended::Renew),
                Err(e) => {
                    let (class, message) = match &e {
                        aws_sdk_kinesis::error::SdkError::ServiceError(s) => {
                            use aws_sdk_kinesis::error::ProvideErrorMetadata;
                            let code = s.err().code();
                            (
                                tidemark_aws_errors::classify_code(code, None),
                                format!(
                                    "{}: {}",
                                    code.unwrap_or("unknown"),
                                    s.err().message().unwrap_or("")
                                ),
                            )
                        }
                        other => (ErrorClass::Retry, tidemark_aws_errors::describe(other)),
                    };
                    return Ok(Ended::Failed(AwsError {
                        op: "SubscribeToShard",
                        class,
                        message,
                    }));
                }
            };
            let skip = match (after.as_ref(), &lease.checkpoint) {
                // Everything of a delivered sequence number was delivered
                // (aggregates are delivered whole).
                (Some(seq), _) => Some(Position::new(seq.clone(), u64::MAX)),
                (None, Checkpoint::At(p)) => Some(p.clone()),
                _ => None,
            };
            let mut batch = Vec::with_capacity(event.records().len());
            let pushed = push_kinesis_records(
                event.records(),
                &stream,
                &shard_id,
                skip.as_ref(),
                &self.tracker,
                &mut batch,
            )?;
            let corrupt = pushed.corrupt;
            if pushed.last.is_some() {
                *after = pushed.last;
            }
            if corrupt > 0 {
                metrics::counter!(metric::CORRUPT_AGGREGATES, shard_label.clone())
                    .increment(corrupt as u64);
            }
            let behind = event.millis_behind_latest();
            metrics::gauge!(metric::MILLIS_BEHIND, shard_label.clone()).set(behind as f64);
            let n = batch.len() as u64;
            metrics::counter!(metric::RECORDS_READ, shard_label.clone()).increment(n);
            let in_flight = self.tracker.in_flight();
            self.ctx.status.update(&self.shard, |s| {
                s.millis_behind_latest = Some(behind);
                s.records_read += n;
                s.in_flight = in_flight;
            });
            if !batch.is_empty()
                && let Err(stop) = self.submit(batch).await
            {
                return Ok(Ended::Stop(stop));
            }
            // A null continuation number marks the shard's end; the event
            // carries the children.
            let continuation = event.continuation_sequence_number();
            if continuation.is_empty() {
                let children = event
                    .child_shards()
                    .iter()
                    .map(|c| c.shard_id().to_string())
                    .collect();
                return Ok(Ended::ShardEnd(children));
            }
            // Caught up on a quiet shard: check now and then whether it is
            // closed (see `probe_end`).
            if event.records().is_empty() && last_probe.elapsed() >= cfg.shard_sync_interval {
                *last_probe = Instant::now();
                match self.probe_end(continuation).await {
                    Ok(Some(children)) => return Ok(Ended::ShardEnd(children)),
                    Ok(None) => {}
                    Err(e) => debug!(shard = %self.shard, error = %e, "shard-end probe failed"),
                }
            }
        }
    }

    /// Whether the shard is closed with nothing after `continuation`: one
    /// GetRecords after it. Kinesis marks a shard's end in the event stream
    /// (no continuation number, the children), but kinesis-local 0.6.2 never
    /// does: its subscription of a closed shard goes on with empty events.
    /// Checked at most once per `shard_sync_interval` while a shard is idle,
    /// so it costs nothing on a busy shard and two calls a minute on a quiet
    /// one.
    async fn probe_end(&self, continuation: &str) -> Result<Option<Vec<String>>, AwsError> {
        let mut req = self
            .ctx
            .kinesis
            .get_shard_iterator()
            .shard_id(&self.shard)
            .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
            .starting_sequence_number(continuation);
        req = if self.ctx.config.stream_is_arn() {
            req.stream_arn(&self.ctx.config.stream)
        } else {
            req.stream_name(&self.ctx.config.stream)
        };
        let it = req
            .send()
            .await
            .map_err(|e| AwsError::new("GetShardIterator", &e))?;
        let Some(it) = it.shard_iterator() else {
            return Ok(None);
        };
        let out = self
            .ctx
            .kinesis
            .get_records()
            .shard_iterator(it)
            .limit(1)
            .send()
            .await
            .map_err(|e| AwsError::new("GetRecords", &e))?;
        if out.records().is_empty() && out.next_shard_iterator().is_none() {
            return Ok(Some(
                out.child_shards()
                    .iter()
                    .map(|c| c.shard_id().to_string())
                    .collect(),
            ));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    use tokio::net::TcpListener;

    /// The shard the event-stream server holds: sequence numbers 1 to 4.
    const RECORDS: u64 = 4;

    /// One SubscribeToShardEvent frame with records `seqs` and continuation
    /// `continuation`.
    fn event(seqs: &[u64], continuation: u64) -> Vec<u8> {
        let records: Vec<serde_json::Value> = seqs
            .iter()
            .map(|n| {
                serde_json::json!({
                    "SequenceNumber": n.to_string(),
                    "ApproximateArrivalTimestamp": 1_700_000_000.0,
                    "Data": aws_smithy_types::base64::encode(format!("{{\"n\":{n}}}")),
                    "PartitionKey": "pk",
                })
            })
            .collect();
        let payload = serde_json::json!({
            "Records": records,
            "ContinuationSequenceNumber": continuation.to_string(),
            "MillisBehindLatest": 0,
        });
        let message = Message::new(payload.to_string().into_bytes())
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String("event".into()),
            ))
            .add_header(Header::new(
                ":event-type",
                HeaderValue::String("SubscribeToShardEvent".into()),
            ))
            .add_header(Header::new(
                ":content-type",
                HeaderValue::String("application/json".into()),
            ));
        let mut frame = Vec::new();
        aws_smithy_eventstream::frame::write_message_to(&message, &mut frame).unwrap();
        frame
    }

    /// Answers one SubscribeToShard request as Kinesis does at a
    /// subscription's 5-minute end, but at once: one event with the next
    /// two records after the starting position, then the body ends cleanly
    /// (no error). Each request's starting position is logged.
    async fn answer(
        req: hyper::Request<hyper::body::Incoming>,
        starts: Arc<Mutex<Vec<String>>>,
    ) -> Result<hyper::Response<http_body_util::Full<hyper::body::Bytes>>, std::convert::Infallible>
    {
        use http_body_util::BodyExt;
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let start = &body["StartingPosition"];
        let kind = start["Type"].as_str().unwrap_or_default().to_string();
        let after: u64 = match start["SequenceNumber"].as_str() {
            Some(s) if kind == "AFTER_SEQUENCE_NUMBER" => s.parse().unwrap(),
            _ => 0,
        };
        starts.lock().unwrap().push(match kind.as_str() {
            "AFTER_SEQUENCE_NUMBER" => format!("{kind} {after}"),
            _ => kind,
        });
        let seqs: Vec<u64> = (after + 1..=RECORDS).take(2).collect();
        let frames = event(&seqs, seqs.last().copied().unwrap_or(after));
        Ok(hyper::Response::builder()
            .header("content-type", "application/vnd.amazon.eventstream")
            .body(http_body_util::Full::new(frames.into()))
            .unwrap())
    }

    /// Kinesis ends every subscription after 5 minutes; kinesis-local 0.6.2
    /// does too, but only after 5 real minutes (not configurable), too long
    /// for the stack tests, whose renewals are Tidemark's own timer. Here a
    /// local event-stream server ends each subscription cleanly after one
    /// event (the SDK's receiver then yields `Ok(None)`), with renewals
    /// set far off: the reader subscribes again after the last record
    /// delivered, with no gap and no duplicate.
    #[tokio::test]
    async fn a_subscription_the_server_ends_resumes_after_the_last_record() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let starts = Arc::new(Mutex::new(Vec::new()));
        let log = starts.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let log = log.clone();
                let service = hyper::service::service_fn(move |req| answer(req, log.clone()));
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), service),
                );
            }
        });
        let kinesis = aws_sdk_kinesis::Client::from_conf(
            aws_sdk_kinesis::Config::builder()
                .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
                .region(aws_sdk_kinesis::config::Region::new("us-east-1"))
                .endpoint_url(format!("http://127.0.0.1:{port}"))
                .credentials_provider(aws_sdk_kinesis::config::Credentials::new(
                    "test", "test", None, None, "test",
                ))
                .build(),
        );
        let mut config = KinesisConfig::new("s", "t", "me");
        config.read_mode = crate::config::ReadMode::FanOut;
        // Any renewal in this test is the server's.
        config.subscription_renewal = Duration::from_secs(120);
        let update =
            aws_smithy_mocks::mock!(aws_sdk_dynamodb::Client::update_item).then_output(|| {
                aws_sdk_dynamodb::operation::update_item::UpdateItemOutput::builder().build()
            });
        let (sink, mut rx) = tokio::sync::mpsc::channel(8);
        let (mut reader, _lease) =
            crate::kinesis::tests::test_reader(&update, kinesis, config, sink);
        let shutdown = reader.ctx.shutdown.clone();
        let lease = Lease::new("s", Checkpoint::TrimHorizon, vec![]);
        let task = tokio::spawn(async move {
            reader
                .read_fan_out(
                    &lease,
                    "arn:aws:kinesis:us-east-1:000000000000:stream/s/consumer/c:1",
                )
                .await
        });
        let mut seqs = Vec::new();
        while seqs.len() < RECORDS as usize {
            let batch = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .expect("records within 20 s")
                .expect("reader alive");
            for r in batch {
                let tidemark_schema::Origin::Kinesis {
                    sequence_number, ..
                } = &r.origin
                else {
                    panic!("kinesis origin")
                };
                seqs.push(sequence_number.to_string());
                r.ack.done();
            }
        }
        // The next subscriptions start after record 4 and bring nothing.
        let more = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await;
        assert!(more.is_err(), "a record came twice: {more:?}");
        shutdown.cancel();
        let stop = task.await.unwrap().unwrap();
        assert!(matches!(stop, Stop::Shutdown));
        assert_eq!(seqs, ["1", "2", "3", "4"]);
        let starts = starts.lock().unwrap().clone();
        assert!(starts.len() >= 3, "{starts:?}");
        assert_eq!(
            starts[..3],
            [
                "TRIM_HORIZON",
                "AFTER_SEQUENCE_NUMBER 2",
                "AFTER_SEQUENCE_NUMBER 4"
            ]
        );
    }

    #[test]
    fn renewal_starts_after_the_last_delivered_record() {
        let cp = Checkpoint::At(Position::new("100", 3));
        let initial = InitialPosition::TrimHorizon;
        let p = starting_position(&cp, None, &initial).unwrap();
        assert_eq!(p.r#type(), &ShardIteratorType::AtSequenceNumber);
        assert_eq!(p.sequence_number(), Some("100"));
        let last = SharedStr::from("250");
        let p = starting_position(&cp, Some(&last), &initial).unwrap();
        assert_eq!(p.r#type(), &ShardIteratorType::AfterSequenceNumber);
        assert_eq!(p.sequence_number(), Some("250"));
        let p = starting_position(&Checkpoint::TrimHorizon, None, &initial).unwrap();
        assert_eq!(p.r#type(), &ShardIteratorType::TrimHorizon);
    }
}
