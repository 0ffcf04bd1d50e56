//! The Kinesis calls the source makes besides reading records: listing
//! shards, shard iterators, the stream's description, the fan-out stream
//! consumer's registration, and the shard-end probe. Each retries only
//! what a retry can fix, within a bound.

use std::time::Duration;

use aws_sdk_kinesis::types::{ConsumerStatus, Shard, ShardIteratorType};
use tidemark_schema::SharedStr;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::{AwsError, ConsumerError, ErrorClass};
use crate::kinesis::config::{InitialPosition, KinesisConfig};
use crate::kinesis::lease::item::Checkpoint;
use crate::kinesis::settings::{StreamSettings, stream_settings};

/// How long registration waits for the consumer to become ACTIVE (AWS
/// takes a few seconds; a consumer being deleted first has to go).
const REGISTER_DEADLINE: Duration = Duration::from_secs(120);

/// Attempts of DescribeStreamSummary per stream at start (20 calls/s per
/// account: a throttle or a blip is retried, a missing stream is not).
const DESCRIBE_ATTEMPTS: usize = 5;

/// The back-off of a failed call that may be retried.
pub(crate) fn retry_backoff() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Every shard of the configured stream (ListShards, all pages).
pub(crate) async fn list_shards(
    kinesis: &aws_sdk_kinesis::Client,
    config: &KinesisConfig,
) -> Result<Vec<Shard>, ConsumerError> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut req = kinesis.list_shards();
        req = match &token {
            // With a NextToken the stream must not be named again.
            Some(t) => req.next_token(t),
            None if config.stream_is_arn() => req.stream_arn(&config.stream),
            None => req.stream_name(&config.stream),
        };
        let page = req
            .send()
            .await
            .map_err(|e| AwsError::new("ListShards", &e))?;
        out.extend(page.shards().iter().cloned());
        match page.next_token() {
            Some(t) => token = Some(t.to_string()),
            None => return Ok(out),
        }
    }
}

/// A shard iterator of `shard`: after `after` when given (iterator
/// renewal), else from the lease checkpoint `cp`. Throttles and transient
/// failures are retried with back-off.
pub(crate) async fn shard_iterator(
    kinesis: &aws_sdk_kinesis::Client,
    config: &KinesisConfig,
    shard: &str,
    cp: &Checkpoint,
    after: Option<SharedStr>,
) -> Result<String, ConsumerError> {
    let mut retry = retry_backoff();
    loop {
        let mut req = kinesis.get_shard_iterator().shard_id(shard);
        req = if config.stream_is_arn() {
            req.stream_arn(&config.stream)
        } else {
            req.stream_name(&config.stream)
        };
        req = match (&after, cp) {
            (Some(seq), _) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(seq.as_str()),
            // AT, not AFTER: the checkpoint may sit inside a KPL aggregate
            // whose later sub-records are not done; those before are skipped.
            (None, Checkpoint::At(p)) => req
                .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                .starting_sequence_number(p.sequence.as_str()),
            (None, Checkpoint::Latest) => req.shard_iterator_type(ShardIteratorType::Latest),
            (None, Checkpoint::AtTimestamp) => match &config.initial_position {
                InitialPosition::AtTimestamp { timestamp } => req
                    .shard_iterator_type(ShardIteratorType::AtTimestamp)
                    .timestamp(aws_smithy_types::DateTime::from_millis(
                        timestamp.timestamp_millis(),
                    )),
                _ => {
                    warn!(
                        shard,
                        "lease says AT_TIMESTAMP but no timestamp is configured; reading from TRIM_HORIZON"
                    );
                    req.shard_iterator_type(ShardIteratorType::TrimHorizon)
                }
            },
            (None, _) => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
        };
        match req.send().await {
            Ok(out) => {
                if let Some(it) = out.shard_iterator() {
                    return Ok(it.to_string());
                }
                return Err(AwsError {
                    op: "GetShardIterator",
                    class: ErrorClass::Fatal,
                    message: "no iterator returned".into(),
                }
                .into());
            }
            Err(e) => {
                let err = AwsError::new("GetShardIterator", &e);
                if matches!(err.class, ErrorClass::Retry | ErrorClass::Throttled) {
                    let d = retry.next().unwrap_or(Duration::from_secs(10));
                    tokio::time::sleep(d).await;
                    continue;
                }
                return Err(err.into());
            }
        }
    }
}

/// Whether `shard` is closed with nothing after `continuation`: one
/// GetRecords after it. Kinesis marks a shard's end in the fan-out event
/// stream (no continuation number, the children), but kinesis-local 0.6.2
/// never does: its subscription of a closed shard goes on with empty
/// events. Returns the children when closed.
pub(crate) async fn probe_end(
    kinesis: &aws_sdk_kinesis::Client,
    config: &KinesisConfig,
    shard: &str,
    continuation: &str,
) -> Result<Option<Vec<String>>, AwsError> {
    let mut req = kinesis
        .get_shard_iterator()
        .shard_id(shard)
        .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
        .starting_sequence_number(continuation);
    req = if config.stream_is_arn() {
        req.stream_arn(&config.stream)
    } else {
        req.stream_name(&config.stream)
    };
    let it = req
        .send()
        .await
        .map_err(|e| AwsError::new("GetShardIterator", &e))?;
    let Some(it) = it.shard_iterator() else {
        return Ok(None);
    };
    let out = kinesis
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

/// The stream's ARN: the configured one, or DescribeStreamSummary's.
pub async fn stream_arn(
    kinesis: &aws_sdk_kinesis::Client,
    config: &KinesisConfig,
) -> Result<String, ConsumerError> {
    if config.stream_is_arn() {
        return Ok(config.stream.clone());
    }
    // A few bounded retries of throttles and transient failures: the
    // source's client makes one attempt per call.
    describe_stream(kinesis, &config.stream)
        .await
        .map(|(arn, _)| arn)
}

/// The stream's ARN and creation time (epoch seconds), with a few bounded
/// retries of throttles and transient failures.
pub(crate) async fn describe_stream(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<(String, u64), ConsumerError> {
    let mut delays = retry_backoff().take(DESCRIBE_ATTEMPTS - 1);
    loop {
        let mut req = kinesis.describe_stream_summary();
        req = if stream.starts_with("arn:") {
            req.stream_arn(stream)
        } else {
            req.stream_name(stream)
        };
        match req.send().await {
            Ok(out) => {
                let Some(s) = out.stream_description_summary() else {
                    return Err(AwsError {
                        op: "DescribeStreamSummary",
                        class: ErrorClass::Fatal,
                        message: format!("no summary returned for {stream}"),
                    }
                    .into());
                };
                let created = u64::try_from(s.stream_creation_timestamp().secs()).unwrap_or(0);
                return Ok((s.stream_arn().to_string(), created));
            }
            Err(e) => {
                let err = AwsError::new("DescribeStreamSummary", &e);
                match delays.next() {
                    Some(d) if matches!(err.class, ErrorClass::Retry | ErrorClass::Throttled) => {
                        tokio::time::sleep(d).await;
                    }
                    _ => return Err(err.into()),
                }
            }
        }
    }
}

fn consumer_limit(problem: String) -> ConsumerError {
    AwsError {
        op: "RegisterStreamConsumer",
        class: ErrorClass::Fatal,
        message: problem,
    }
    .into()
}

fn timed_out(op: &'static str, what: String) -> ConsumerError {
    AwsError {
        op,
        class: ErrorClass::Retry,
        message: what,
    }
    .into()
}

/// Registers the configured stream consumer (`read_mode = "fan_out"`), or
/// reuses it when it exists, and waits until it is ACTIVE; returns its ARN.
/// Several workers starting together race safely: a registration refused
/// because another one is under way (ResourceInUseException) waits for that
/// one. The consumer is never deregistered here: `tidemark consumer
/// deregister` is a deliberate operator action.
pub(crate) async fn register_consumer(
    kinesis: &aws_sdk_kinesis::Client,
    config: &KinesisConfig,
    settings: Option<&StreamSettings>,
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
                // A new consumer on a stream that has its most already:
                // say so now rather than retry a refused registration.
                if let Some(full) = settings.and_then(|s| s.check_room_for_a_consumer().err()) {
                    return Err(consumer_limit(full));
                }
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
                        // LimitExceeded is also a rate limit: only a full
                        // stream stops the start.
                        if e.as_service_error()
                            .is_some_and(|s| s.is_limit_exceeded_exception())
                            && let Ok(now) = stream_settings(kinesis, &stream).await
                            && let Err(full) = now.check_room_for_a_consumer()
                        {
                            return Err(consumer_limit(full));
                        }
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
