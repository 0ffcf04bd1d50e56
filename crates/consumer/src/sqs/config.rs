//! SQS source configuration: typed, documented field by field, unknown keys
//! rejected. Defaults follow SQS's own limits and Lambda's SQS event source
//! where they have one.

use std::time::Duration;

use serde::Deserialize;
use tidemark_schema::framing::RecordFormat;

use crate::error::SourceConfigError;

/// ReceiveMessage returns at most this many messages per call (SQS limit).
pub(super) const MAX_RECEIVE_BATCH: usize = 10;
/// Longest long-poll wait SQS allows.
pub(super) const MAX_WAIT_TIME: Duration = Duration::from_secs(20);
/// Longest visibility timeout SQS allows (12 h).
pub(super) const MAX_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(12 * 3600);
/// Most in-flight messages a standard queue allows per consumer fleet.
pub(super) const MAX_IN_FLIGHT_STANDARD: usize = 120_000;

/// Configuration of [`SqsSource`](crate::sqs::SqsSource).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsConfig {
    /// Queue URL, e.g. `https://sqs.eu-west-1.amazonaws.com/123456789012/events`.
    /// A URL ending in `.fifo` is read as a FIFO queue (per-group order).
    pub queue_url: String,
    /// How events are laid out in one message body: `json_or_array` (one
    /// event, or a JSON array of events), `ndjson` (one event per line) or
    /// `json_array` (a JSON array of events; anything else is refused); the
    /// same names mean the same on every source (docs/event-mapping.md).
    /// `json` is refused here: it used to mean `json_or_array` on an SQS
    /// source. A body, or an SNS envelope's `Message`, that is
    /// base64-encoded gzip (it starts with `H4sI`) is decompressed first,
    /// whatever the format. Each inner event is routed, stored or
    /// dead-lettered on its own; the message is deleted once all of them
    /// are. Default `json_or_array`.
    #[serde(default = "default_record_format")]
    pub record_format: RecordFormat,
    /// Most concurrent long-poll receivers. Their number adapts between 1 and
    /// this to how full the batches come back.
    #[serde(default = "default_max_receivers")]
    pub max_receivers: usize,
    /// Long-poll wait of each ReceiveMessage (whole seconds, at most 20 s).
    #[schemars(with = "String")]
    #[serde(default = "default_wait_time", with = "humantime_serde")]
    pub wait_time: Duration,
    /// Visibility timeout asked for on receive and on every extension (whole
    /// seconds, 1 s to 12 h). Shorter means faster redelivery after a crash,
    /// at the cost of more heartbeat calls.
    #[schemars(with = "String")]
    #[serde(default = "default_visibility_timeout", with = "humantime_serde")]
    pub visibility_timeout: Duration,
    /// A message in flight gets its visibility extended once less than this
    /// is left of it. Must be below `visibility_timeout`.
    #[schemars(with = "String")]
    #[serde(default = "default_heartbeat_margin", with = "humantime_serde")]
    pub heartbeat_margin: Duration,
    /// Most messages received and not yet deleted or released: receiving
    /// pauses at this bound (backpressure from the writer).
    #[serde(default = "default_max_in_flight_messages")]
    pub max_in_flight_messages: usize,
    /// Most bytes the messages in flight hold once decoded (base64, gzip,
    /// SNS envelope) and split into events, until all their events are
    /// acknowledged. A received message is decoded only while the messages
    /// in flight hold less; the rest of its receive batch waits, still
    /// encoded, and is made visible again if room does not come before its
    /// visibility would need a heartbeat. Memory thus stays within it plus
    /// one message (at most 64 MiB decoded). Default 64 MiB; at least 1 MiB.
    #[serde(default = "default_max_in_flight_bytes")]
    pub max_in_flight_bytes: usize,
    /// A message not fully acknowledged after this long is given up: its
    /// visibility is set to the retry back-off so it comes back later (its
    /// acknowledgement was dropped somewhere). Heartbeats keep slower but live
    /// writes invisible up to this bound.
    #[schemars(with = "String")]
    #[serde(default = "default_max_processing_time", with = "humantime_serde")]
    pub max_processing_time: Duration,
    /// Back-off of a given-up message, before its second receive (doubles per
    /// receive, with jitter).
    #[schemars(with = "String")]
    #[serde(default = "default_retry_backoff_min", with = "humantime_serde")]
    pub retry_backoff_min: Duration,
    /// Back-off cap of a given-up message.
    #[schemars(with = "String")]
    #[serde(default = "default_retry_backoff_max", with = "humantime_serde")]
    pub retry_backoff_max: Duration,
    /// At shutdown, how long to wait for in-flight messages to be stored and
    /// deleted; those still unfinished are then made visible again at once.
    #[schemars(with = "String")]
    #[serde(default = "default_shutdown_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

/// One event or a JSON array of events: what SQS bodies held before
/// `record_format` existed.
pub(super) const fn default_record_format() -> RecordFormat {
    RecordFormat::JsonOrArray
}
/// Enough to drain a busy queue at 10 messages per call; more rarely helps
/// against a writer bound by DynamoDB.
pub(super) const fn default_max_receivers() -> usize {
    8
}
/// SQS's longest long poll: fewest empty receives.
pub(super) const fn default_wait_time() -> Duration {
    MAX_WAIT_TIME
}
/// SQS's default queue visibility timeout.
pub(super) const fn default_visibility_timeout() -> Duration {
    Duration::from_secs(30)
}
/// A third of the default visibility: two heartbeat ticks of slack.
pub(super) const fn default_heartbeat_margin() -> Duration {
    Duration::from_secs(10)
}
/// 100 receive batches: ample work for the writer, bounded memory.
pub(super) const fn default_max_in_flight_messages() -> usize {
    1_000
}
/// The writer's own default in-flight bytes.
pub(super) const fn default_max_in_flight_bytes() -> usize {
    64 * 1024 * 1024
}
/// A write slower than this is not slow but lost.
pub(super) const fn default_max_processing_time() -> Duration {
    Duration::from_secs(3600)
}
/// First retry of a given-up message.
pub(super) const fn default_retry_backoff_min() -> Duration {
    Duration::from_secs(10)
}
/// Lambda's SQS event source caps its back-off at 15 minutes too.
pub(super) const fn default_retry_backoff_max() -> Duration {
    Duration::from_secs(15 * 60)
}
/// Fits in ECS's default 30 s stop timeout with room for the final deletes.
pub(super) const fn default_shutdown_grace() -> Duration {
    Duration::from_secs(20)
}

impl SqsConfig {
    /// A configuration with every default.
    pub fn new(queue_url: impl Into<String>) -> Self {
        Self {
            queue_url: queue_url.into(),
            record_format: default_record_format(),
            max_receivers: default_max_receivers(),
            wait_time: default_wait_time(),
            visibility_timeout: default_visibility_timeout(),
            heartbeat_margin: default_heartbeat_margin(),
            max_in_flight_messages: default_max_in_flight_messages(),
            max_in_flight_bytes: default_max_in_flight_bytes(),
            max_processing_time: default_max_processing_time(),
            retry_backoff_min: default_retry_backoff_min(),
            retry_backoff_max: default_retry_backoff_max(),
            shutdown_grace: default_shutdown_grace(),
        }
    }

    /// True for a FIFO queue (its URL ends in `.fifo`).
    pub(crate) fn is_fifo(&self) -> bool {
        self.queue_url.ends_with(".fifo")
    }

    /// The queue name: the last path segment of the URL.
    pub(crate) fn queue_name(&self) -> &str {
        self.queue_url
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(&self.queue_url)
    }

    /// Checks values the types cannot.
    pub(crate) fn validate(&self) -> Result<(), SourceConfigError> {
        let err = |key, problem: String| Err(SourceConfigError { key, problem });
        if self.record_format == RecordFormat::Json {
            // Never reinterpreted silently: `json` meant `json_or_array`
            // here before it meant one event per record on every source.
            return err(
                "record_format",
                "\"json\" on an SQS source used to mean one event or a JSON array of \
                 events; that is now \"json_or_array\" (the default), and \"json\" \
                 (one event per message) is not accepted on SQS yet: write \
                 \"json_or_array\", or remove the key"
                    .into(),
            );
        }
        if !(self.queue_url.starts_with("http://") || self.queue_url.starts_with("https://")) {
            return err(
                "queue_url",
                format!(
                    "{:?} is not a queue URL: use the QueueUrl of GetQueueUrl",
                    self.queue_url
                ),
            );
        }
        if self.max_receivers == 0 {
            return err("max_receivers", "0 would never receive; use 8".into());
        }
        if self.wait_time > MAX_WAIT_TIME || self.wait_time.subsec_nanos() != 0 {
            return err("wait_time", "must be whole seconds from 0s to 20s".into());
        }
        let vt = self.visibility_timeout;
        if vt < Duration::from_secs(1) || vt > MAX_VISIBILITY_TIMEOUT || vt.subsec_nanos() != 0 {
            return err(
                "visibility_timeout",
                "must be whole seconds from 1s to 12h".into(),
            );
        }
        if self.heartbeat_margin.is_zero() || self.heartbeat_margin >= vt {
            return err(
                "heartbeat_margin",
                format!("must be above 0 and below visibility_timeout ({vt:?}); use a third of it"),
            );
        }
        if self.max_in_flight_messages == 0 || self.max_in_flight_messages > MAX_IN_FLIGHT_STANDARD
        {
            return err(
                "max_in_flight_messages",
                format!("must be 1 to {MAX_IN_FLIGHT_STANDARD} (SQS's in-flight limit); use 1000"),
            );
        }
        if self.max_in_flight_bytes < 1024 * 1024 {
            return err(
                "max_in_flight_bytes",
                "below 1 MiB (one message); use 67108864".into(),
            );
        }
        if self.max_processing_time < vt {
            return err(
                "max_processing_time",
                "below visibility_timeout: heartbeats would never run; use 1h".into(),
            );
        }
        if self.retry_backoff_min.is_zero()
            || self.retry_backoff_min > self.retry_backoff_max
            || self.retry_backoff_max > MAX_VISIBILITY_TIMEOUT
        {
            return err(
                "retry_backoff_min",
                "need 0 < retry_backoff_min <= retry_backoff_max <= 12h".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:4566/000000000000/events";

    #[test]
    fn toml_with_only_the_url_gets_every_default() {
        let c: SqsConfig = toml::from_str(&format!("queue_url = {URL:?}")).unwrap();
        assert_eq!(c, SqsConfig::new(URL));
        assert!(c.validate().is_ok());
        assert_eq!(c.queue_name(), "events");
        assert!(!c.is_fifo());
    }

    #[test]
    fn durations_parse_and_unknown_keys_are_rejected() {
        let c: SqsConfig = toml::from_str(&format!(
            "queue_url = {URL:?}\nvisibility_timeout = \"5s\"\nheartbeat_margin = \"2s\"\nwait_time = \"1s\""
        ))
        .unwrap();
        assert_eq!(c.visibility_timeout, Duration::from_secs(5));
        assert_eq!(c.heartbeat_margin, Duration::from_secs(2));
        assert_eq!(c.wait_time, Duration::from_secs(1));
        let bad = toml::from_str::<SqsConfig>(&format!("queue_url = {URL:?}\nvisibilty = \"5s\""));
        assert!(bad.unwrap_err().to_string().contains("visibilty"));
    }

    type Change = Box<dyn Fn(&mut SqsConfig)>;

    #[test]
    fn validation_names_the_key() {
        let cases: Vec<(&str, Change)> = vec![
            ("queue_url", Box::new(|c| c.queue_url = "events".into())),
            ("max_receivers", Box::new(|c| c.max_receivers = 0)),
            (
                "wait_time",
                Box::new(|c| c.wait_time = Duration::from_secs(21)),
            ),
            (
                "wait_time",
                Box::new(|c| c.wait_time = Duration::from_millis(1500)),
            ),
            (
                "visibility_timeout",
                Box::new(|c| c.visibility_timeout = Duration::ZERO),
            ),
            (
                "heartbeat_margin",
                Box::new(|c| c.heartbeat_margin = Duration::from_secs(30)),
            ),
            (
                "max_in_flight_messages",
                Box::new(|c| c.max_in_flight_messages = 0),
            ),
            (
                "max_processing_time",
                Box::new(|c| c.max_processing_time = Duration::from_secs(5)),
            ),
            (
                "retry_backoff_min",
                Box::new(|c| c.retry_backoff_min = Duration::from_secs(3600)),
            ),
        ];
        for (key, change) in cases {
            let mut c = SqsConfig::new(URL);
            change(&mut c);
            assert_eq!(c.validate().unwrap_err().key, key);
        }
    }

    /// `json` meant one event or an array on SQS; it now means one event on
    /// every source, so the old spelling is refused, naming the new one,
    /// and never silently read the new way.
    #[test]
    fn the_old_sqs_json_is_refused_naming_json_or_array() {
        let c: SqsConfig =
            toml::from_str(&format!("queue_url = {URL:?}\nrecord_format = \"json\"")).unwrap();
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "record_format");
        assert!(e.problem.contains("\"json_or_array\""), "{e}");
        let c: SqsConfig = toml::from_str(&format!(
            "queue_url = {URL:?}\nrecord_format = \"json_or_array\""
        ))
        .unwrap();
        assert_eq!(c.record_format, RecordFormat::JsonOrArray);
        assert_eq!(c, SqsConfig::new(URL), "the default");
        c.validate().unwrap();
    }

    #[test]
    fn fifo_is_detected_from_the_url() {
        let c = SqsConfig::new("http://127.0.0.1:4566/000000000000/orders.fifo");
        assert!(c.is_fifo());
        assert_eq!(c.queue_name(), "orders.fifo");
    }
}
