//! Enhanced fan-out (`read_mode = "fan_out"`): a shard reader that
//! subscribes with SubscribeToShard instead of polling GetRecords (the
//! stream consumer is registered at start, `api::register_consumer`).
//!
//! Guarantees (besides those of the polling reader, which still hold: the
//! lease deadline, acks, checkpoints, parents first, SHARD_END):
//! - no gap across renewals: a new subscription starts after the
//!   continuation sequence number of the last event delivered (empty
//!   events too, so a lease still at `LATEST` does not skip what arrived
//!   between two subscriptions), or at the lease checkpoint for the first
//!   one; records at or before what was delivered are never delivered
//!   twice by one reader; an event already received when the renewal falls
//!   due is delivered before subscribing again;
//! - back-pressure: the next event is taken from the subscription only when
//!   the shard has room under `max_unacked_per_shard` (and its byte bound;
//!   a large event is handed on as far as room allows) and the sink accepted
//!   the previous batch, so the server is held by HTTP flow control;
//! - bounded retries: a shard whose subscription fails
//!   [`SUBSCRIBE_BUDGET`] times in a row is released (another worker, or
//!   this one later, takes it again);
//! - the consumer is registered (or reused) at start and never deregistered
//!   here: `tidemark consumer deregister` is a deliberate operator action.

use std::time::Duration;

use aws_sdk_kinesis::types::{ShardIteratorType, StartingPosition, SubscribeToShardEventStream};
use futures::FutureExt;
use tidemark_schema::SharedStr;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::kinesis::api::{probe_end, retry_backoff};
use crate::kinesis::checkpoint::Position;
use crate::kinesis::config::InitialPosition;
use crate::kinesis::convert::ShardOut;
use crate::kinesis::deliver::deliver;
use crate::kinesis::drain::finish_shard;
use crate::kinesis::lease::item::{Checkpoint, Lease};
use crate::kinesis::run::with;
use crate::kinesis::shard::{ShardReader, Stop};
use crate::kinesis::status::ShardState;
use crate::metrics::kinesis as metric;

/// Consecutive failed subscriptions of one shard before its lease is
/// released (with the 100 ms..10 s back-off, about a minute and a half).
const SUBSCRIBE_BUDGET: u32 = 15;

/// Where a subscription starts: after `after`, the continuation sequence
/// number of the last event delivered (as the KCL does), else at the lease
/// checkpoint (AT, not AFTER: the checkpoint may sit inside a KPL aggregate
/// whose later sub-records are not done).
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

/// The fan-out counterpart of the polling loop, called once the parents
/// are done: subscriptions one after the other, each renewed before
/// Kinesis ends it.
pub(crate) async fn read(
    reader: &mut ShardReader,
    lease: &Lease,
    consumer_arn: &str,
) -> Result<Stop, ConsumerError> {
    let shard_label = reader.stream.shard_labels(&reader.shard);
    let out = reader.shard_out();
    // Where the reader stands: the last record delivered (never delivered
    // twice) and the continuation number renewals start after.
    let mut after = Resume::default();
    let mut failures = 0u32;
    let mut retry = retry_backoff();
    let mut subscriptions = 0u64;
    let mut last_probe = Instant::now();
    loop {
        if let Some(stop) = reader.stopped() {
            return Ok(stop);
        }
        if let Err(stop) = reader.wait_live().await {
            return Ok(stop);
        }
        let pos = starting_position(
            &lease.checkpoint,
            after.continuation.as_ref(),
            &reader.stream.config.initial_position,
        )?;
        let place = Place {
            lease,
            consumer_arn,
            out: &out,
        };
        let ended = subscription(reader, place, pos, &mut after, &mut last_probe).await?;
        subscriptions += 1;
        match ended {
            Ended::Renew => {
                failures = 0;
                retry = retry_backoff();
                metrics::counter!(metric::SUBSCRIPTION_RENEWALS, shard_label.clone()).increment(1);
                debug!(shard = %reader.shard, subscriptions, "subscription renewed");
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
                    with(shard_label.clone(), "reason", reason)
                )
                .increment(1);
                if err.class == ErrorClass::Fatal && !in_use {
                    return Err(err.into());
                }
                failures += 1;
                if failures >= SUBSCRIBE_BUDGET {
                    warn!(shard = %reader.shard, error = %err, failures, "subscriptions keep failing; releasing the lease");
                    return Err(err.into());
                }
                let d = retry.next().unwrap_or(Duration::from_secs(10));
                // In use: the previous owner's subscription has not
                // ended yet (it ends when that reader stops).
                info!(shard = %reader.shard, error = %err, delay = ?d, reason, "subscription failed; subscribing again");
                if let Err(stop) = reader.guard(tokio::time::sleep(d)).await {
                    return Ok(stop);
                }
            }
            Ended::ShardEnd(children) => return finish_shard(reader, children).await,
            Ended::Stop(stop) => return Ok(stop),
        }
    }
}

/// How far a shard's subscriptions have delivered.
#[derive(Debug, Default)]
struct Resume {
    /// The last record delivered: records at or before it are skipped.
    delivered: Option<SharedStr>,
    /// The continuation sequence number of the last event delivered (or the
    /// last record delivered, if later): the next subscription starts after
    /// it.
    continuation: Option<SharedStr>,
}

/// What a subscription reads, and for whom.
#[derive(Clone, Copy)]
struct Place<'a> {
    lease: &'a Lease,
    consumer_arn: &'a str,
    out: &'a ShardOut,
}

/// One subscription, read until renewal time, its end, a failure, the
/// shard's end, or a stop.
async fn subscription(
    reader: &mut ShardReader,
    place: Place<'_>,
    pos: StartingPosition,
    after: &mut Resume,
    last_probe: &mut Instant,
) -> Result<Ended, ConsumerError> {
    let cfg = reader.stream.config.clone();
    let renew_at = Instant::now() + cfg.subscription_renewal;
    let send = reader
        .stream
        .kinesis
        .subscribe_to_shard()
        .consumer_arn(place.consumer_arn)
        .shard_id(&reader.shard)
        .starting_position(pos)
        .send();
    let mut answer = match reader.guard(send).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return Ok(Ended::Failed(AwsError::new("SubscribeToShard", &e))),
        Err(stop) => return Ok(Ended::Stop(stop)),
    };
    reader
        .stream
        .status
        .update(&reader.shard, |s| s.state = ShardState::Reading);
    // Once the renewal is due, only events already received are taken.
    let mut renewing = false;
    loop {
        if let Some(stop) = reader.stopped() {
            return Ok(Ended::Stop(stop));
        }
        // Back-pressure: take the next event only with room for it.
        if let Err(stop) = reader.wait_room().await {
            return Ok(Ended::Stop(stop));
        }
        if let Some(g) = &reader.stream.governors
            && let Err(stop) = reader.guard(g.dynamodb.wait_closed()).await
        {
            return Ok(Ended::Stop(stop));
        }
        let next = if renewing || Instant::now() >= renew_at {
            // Renewal due: deliver the event the subscription already
            // holds, if any (one: on a busy shard there always is one),
            // then subscribe again after it.
            if renewing {
                return Ok(Ended::Renew);
            }
            renewing = true;
            match answer.event_stream.recv().now_or_never() {
                Some(r) => r,
                None => return Ok(Ended::Renew),
            }
        } else {
            tokio::select! {
                biased;
                _ = reader.lease.lost.cancelled() => return Ok(Ended::Stop(Stop::Lost)),
                _ = reader.stream.shutdown.cancelled() => return Ok(Ended::Stop(Stop::Shutdown)),
                r = answer.event_stream.recv() => r,
                // The receiver keeps a partly read event in its buffer, so
                // the check above still finds it complete, if it is.
                _ = tokio::time::sleep_until(renew_at) => continue,
            }
        };
        let event = match next {
            Ok(Some(SubscribeToShardEventStream::SubscribeToShardEvent(e))) => e,
            Ok(Some(other)) => {
                debug!(shard = %reader.shard, ?other, "unknown subscription event ignored");
                continue;
            }
            // The server ended it (its 5 minutes are over).
            Ok(None) => return Ok(Ended::Renew),
            Err(e) => return Ok(Ended::Failed(stream_error(&e))),
        };
        let skip = match (after.delivered.as_ref(), &place.lease.checkpoint) {
            // Everything of a delivered sequence number was delivered
            // (aggregates are delivered whole).
            (Some(seq), _) => Some(Position::new(seq.clone(), u64::MAX)),
            (None, Checkpoint::At(p)) => Some(p.clone()),
            _ => None,
        };
        let behind = Some(event.millis_behind_latest());
        let delivered =
            match deliver(reader, place.out, event.records(), skip.as_ref(), behind).await? {
                Ok(d) => d,
                Err(stop) => return Ok(Ended::Stop(stop)),
            };
        if delivered.last.is_some() {
            after.delivered = delivered.last;
            after.continuation = after.delivered.clone();
        }
        // A null continuation number marks the shard's end; the event
        // carries the children.
        let continuation = event.continuation_sequence_number();
        if !continuation.is_empty() && after.continuation.as_deref() != Some(continuation) {
            // Never behind the last record delivered (compared as numbers:
            // sequence numbers are decimal strings of varying length).
            let ahead = after
                .continuation
                .as_ref()
                .is_none_or(|c| seq_cmp(continuation, c).is_gt());
            if ahead {
                after.continuation = Some(SharedStr::from(continuation));
            }
        }
        if continuation.is_empty() {
            let children = event
                .child_shards()
                .iter()
                .map(|c| c.shard_id().to_string())
                .collect();
            return Ok(Ended::ShardEnd(children));
        }
        // Caught up on a quiet shard: check now and then whether it is
        // closed (kinesis-local never marks a shard's end in the event
        // stream). At most once per `shard_sync_interval` while a shard is
        // idle: nothing on a busy shard, two calls a minute on a quiet one.
        if event.records().is_empty() && last_probe.elapsed() >= cfg.shard_sync_interval {
            *last_probe = Instant::now();
            match probe_end(&reader.stream.kinesis, &cfg, &reader.shard, continuation).await {
                Ok(Some(children)) => return Ok(Ended::ShardEnd(children)),
                Ok(None) => {}
                Err(e) => debug!(shard = %reader.shard, error = %e, "shard-end probe failed"),
            }
        }
    }
}

/// Orders two sequence numbers (decimal strings without leading zeros).
fn seq_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// A failed subscription's event stream error, classified.
fn stream_error<R>(
    e: &aws_sdk_kinesis::error::SdkError<
        aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError,
        R,
    >,
) -> AwsError
where
    R: std::fmt::Debug + 'static,
{
    let (class, message) = match e {
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
    AwsError {
        op: "SubscribeToShard",
        class,
        message,
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

    /// A subscription's starting position as the server saw it: its type,
    /// and the sequence number for AFTER_SEQUENCE_NUMBER.
    type Start = (String, Option<u64>);

    /// How the test server answers the `n`th subscription (from 0), from
    /// where it starts: the event-stream frames of its whole body.
    type Script = dyn Fn(usize, &Start) -> Vec<u8> + Send + Sync;

    /// Answers each SubscribeToShard request with the frames `script`
    /// gives, then ends the body cleanly (as Kinesis does at a
    /// subscription's 5-minute end). Each request's starting position is
    /// logged as `TYPE` or `TYPE n`.
    async fn answer(
        req: hyper::Request<hyper::body::Incoming>,
        starts: Arc<Mutex<Vec<String>>>,
        script: Arc<Script>,
    ) -> Result<hyper::Response<http_body_util::Full<hyper::body::Bytes>>, std::convert::Infallible>
    {
        use http_body_util::BodyExt;
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let start = &body["StartingPosition"];
        let kind = start["Type"].as_str().unwrap_or_default().to_string();
        let seq: Option<u64> = start["SequenceNumber"].as_str().map(|s| s.parse().unwrap());
        let n = {
            let mut starts = starts.lock().unwrap();
            starts.push(match seq {
                Some(seq) => format!("{kind} {seq}"),
                None => kind.clone(),
            });
            starts.len() - 1
        };
        let frames = script(n, &(kind, seq));
        Ok(hyper::Response::builder()
            .header("content-type", "application/vnd.amazon.eventstream")
            .body(http_body_util::Full::new(frames.into()))
            .unwrap())
    }

    /// A local SubscribeToShard server answering by `script`, a Kinesis
    /// client pointed at it, and the log of starting positions.
    async fn server(script: Arc<Script>) -> (aws_sdk_kinesis::Client, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let starts = Arc::new(Mutex::new(Vec::new()));
        let log = starts.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let log = log.clone();
                let script = script.clone();
                let service =
                    hyper::service::service_fn(move |req| answer(req, log.clone(), script.clone()));
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
        (kinesis, starts)
    }

    /// A fan-out reader of a lease at `checkpoint` through `kinesis`,
    /// running until shutdown; its records come out of the receiver.
    fn spawn_reader(
        kinesis: aws_sdk_kinesis::Client,
        config: crate::kinesis::config::KinesisConfig,
        checkpoint: Checkpoint,
    ) -> (
        tokio::sync::mpsc::Receiver<Vec<crate::record::Record>>,
        tokio_util::sync::CancellationToken,
        tokio::task::JoinHandle<Result<Stop, ConsumerError>>,
    ) {
        let mut config = config;
        config.read_mode = crate::kinesis::config::ReadMode::FanOut;
        let update =
            aws_smithy_mocks::mock!(aws_sdk_dynamodb::Client::update_item).then_output(|| {
                aws_sdk_dynamodb::operation::update_item::UpdateItemOutput::builder().build()
            });
        let (sink, rx) = tokio::sync::mpsc::channel(8);
        let (mut reader, _lease) =
            crate::kinesis::shard::test_reader(&update, kinesis, config, sink);
        let shutdown = reader.stream.shutdown.clone();
        let lease = Lease::new("s", checkpoint, vec![]);
        let task = tokio::spawn(async move {
            read(
                &mut reader,
                &lease,
                "arn:aws:kinesis:us-east-1:000000000000:stream/s/consumer/c:1",
            )
            .await
        });
        (rx, shutdown, task)
    }

    /// The sequence number of a delivered record.
    fn seq_of(r: &crate::record::Record) -> String {
        let tidemark_schema::Origin::Kinesis {
            sequence_number, ..
        } = &r.origin
        else {
            panic!("kinesis origin")
        };
        sequence_number.to_string()
    }

    /// Receives records until `n` came, acknowledging each.
    async fn take(
        rx: &mut tokio::sync::mpsc::Receiver<Vec<crate::record::Record>>,
        n: usize,
    ) -> Vec<String> {
        let mut seqs = Vec::new();
        while seqs.len() < n {
            let batch = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .expect("records within 20 s")
                .expect("reader alive");
            for r in batch {
                seqs.push(seq_of(&r));
                r.ack.done();
            }
        }
        seqs
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
        // One event with the next two records after the starting position.
        let script: Arc<Script> = Arc::new(|_, (kind, seq): &Start| {
            let after = if kind == "AFTER_SEQUENCE_NUMBER" {
                seq.unwrap_or(0)
            } else {
                0
            };
            let seqs: Vec<u64> = (after + 1..=RECORDS).take(2).collect();
            event(&seqs, seqs.last().copied().unwrap_or(after))
        });
        let (kinesis, starts) = server(script).await;
        let mut config = crate::kinesis::config::KinesisConfig::new("s", "t", "me");
        // Any renewal in this test is the server's.
        config.subscription_renewal = Duration::from_secs(120);
        let (mut rx, shutdown, task) = spawn_reader(kinesis, config, Checkpoint::TrimHorizon);
        let seqs = take(&mut rx, RECORDS as usize).await;
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

    /// A lease still at `LATEST` on a quiet shard: the first subscription
    /// brings only an empty event (continuation 10) and ends; record 11
    /// arrives before the next subscription. Subscribing at `LATEST` again
    /// would miss it for ever; the reader continues after the continuation
    /// sequence number instead.
    #[tokio::test]
    async fn a_latest_lease_resubscribes_after_the_continuation_number() {
        let script: Arc<Script> = Arc::new(|n, (kind, seq): &Start| match kind.as_str() {
            // The tip: record 11 arrived in the gap (after the first
            // subscription), so LATEST starts after it.
            "LATEST" if n == 0 => event(&[], 10),
            "LATEST" => event(&[], 11),
            "AFTER_SEQUENCE_NUMBER" => {
                let after = seq.unwrap_or(0);
                let seqs: Vec<u64> = (after + 1..=11).collect();
                event(&seqs, 11.max(after))
            }
            _ => event(&[], 11),
        });
        let (kinesis, starts) = server(script).await;
        let mut config = crate::kinesis::config::KinesisConfig::new("s", "t", "me");
        config.subscription_renewal = Duration::from_secs(120);
        let (mut rx, shutdown, task) = spawn_reader(kinesis, config, Checkpoint::Latest);
        // Wait (with a deadline) for the second subscription.
        let deadline = Instant::now() + Duration::from_secs(20);
        while starts.lock().unwrap().len() < 2 {
            assert!(Instant::now() < deadline, "no second subscription");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        shutdown.cancel();
        let _ = task.await;
        let starts = starts.lock().unwrap().clone();
        assert_eq!(starts[..2], ["LATEST", "AFTER_SEQUENCE_NUMBER 10"]);
        let batch = got
            .expect("record 11 delivered (it arrived between two subscriptions)")
            .expect("reader alive");
        assert_eq!(batch.iter().map(seq_of).collect::<Vec<_>>(), ["11"]);
    }

    /// An event the subscription already holds when its renewal falls due
    /// is delivered, not dropped: here the server sends records 1 and 2 in
    /// two events at once, and the reader (room for one unacknowledged
    /// record) can take the second only after the renewal time. The next
    /// subscription therefore starts after record 2, not after record 1.
    #[tokio::test]
    async fn an_event_in_hand_at_renewal_time_is_delivered() {
        let script: Arc<Script> = Arc::new(|_, (kind, seq): &Start| {
            let after = if kind == "AFTER_SEQUENCE_NUMBER" {
                seq.unwrap_or(0)
            } else {
                0
            };
            let mut frames = Vec::new();
            for s in after + 1..=2 {
                frames.extend(event(&[s], s));
            }
            if frames.is_empty() {
                frames = event(&[], after);
            }
            frames
        });
        let (kinesis, starts) = server(script).await;
        let mut config = crate::kinesis::config::KinesisConfig::new("s", "t", "me");
        config.subscription_renewal = Duration::from_millis(200);
        config.max_unacked_per_shard = 1;
        let (mut rx, shutdown, task) = spawn_reader(kinesis, config, Checkpoint::TrimHorizon);
        let first = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("record 1 within 20 s")
            .expect("reader alive");
        assert_eq!(first.iter().map(seq_of).collect::<Vec<_>>(), ["1"]);
        // Hold record 1 unacknowledged past the renewal time: the reader
        // waits for room with event 2 in hand.
        tokio::time::sleep(Duration::from_millis(400)).await;
        for r in first {
            r.ack.done();
        }
        let second = take(&mut rx, 1).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while starts.lock().unwrap().len() < 2 {
            assert!(Instant::now() < deadline, "no second subscription");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        let _ = task.await;
        assert_eq!(second, ["2"]);
        let starts = starts.lock().unwrap().clone();
        assert!(starts.len() >= 2, "{starts:?}");
        assert_eq!(starts[..2], ["TRIM_HORIZON", "AFTER_SEQUENCE_NUMBER 2"]);
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
