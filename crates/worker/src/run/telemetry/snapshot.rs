//! A typed snapshot of the metrics `status` reports and the EMF lines read
//! (lag per shard, items stored and throttled per table, dead letters by
//! reason, maintenance health, SQS receive age).
//!
//! [`TypedRecorder`] is the process's recorder: it hands every metric to
//! the Prometheus recorder behind `/metrics` and keeps its own copy of
//! these few, so they are read as the numbers they are, not rendered to
//! the exposition text and parsed back. Both see the same calls: the
//! snapshot holds what `/metrics` shows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};
use metrics_util::registry::{AtomicStorage, Registry};
use tidemark_consumer::metrics::{kinesis, sqs};
use tidemark_writer::metrics as writer;

use crate::metrics as m;

/// The counters a snapshot holds.
const COUNTERS: [&str; 12] = [
    kinesis::GET_RECORDS,
    kinesis::RECORDS_READ,
    kinesis::LEASE_RENEWALS,
    kinesis::CHECKPOINTS,
    sqs::MESSAGES_DELETED,
    writer::ITEMS_STORED,
    writer::UNPROCESSED,
    m::DEAD_LETTERS,
    m::DEAD_LETTER_FALLBACKS,
    m::QUOTA_ERRORS,
    sqs::MESSAGES_RECEIVED,
    writer::CONSUMED_WCU,
];

/// The gauges a snapshot holds.
const GAUGES: [&str; 10] = [
    kinesis::MILLIS_BEHIND,
    kinesis::CHECKPOINT_LAG_RECORDS,
    kinesis::CHECKPOINT_LAG_SECONDS,
    kinesis::LEASE_LISTING_FAILING,
    kinesis::LEASES_HELD,
    sqs::IN_FLIGHT,
    m::MAINTENANCE_HELD,
    m::MAINTENANCE_LAST_SUCCESS,
    m::NEXT_TABLE_ACTIVE,
    sqs::RECEIVE_AGE,
];

/// The metrics one look gives. Counters are totals since the process
/// started; gauges their last value (`None` before the first).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct MetricsSnapshot {
    /// GetRecords calls by shard (its id, or `stream/shard id` when the
    /// metric names its stream: shard ids repeat across streams).
    pub(crate) shard_reads: BTreeMap<String, u64>,
    /// MillisBehindLatest by shard, keyed as `shard_reads`.
    pub(crate) millis_behind: BTreeMap<String, f64>,
    /// Checkpoint lag by held shard (keyed as `shard_reads`): records
    /// read past the written checkpoint, and the age of the oldest, s.
    pub(crate) checkpoint_lag: BTreeMap<String, (f64, f64)>,
    /// Items stored, by table.
    pub(crate) items_stored: BTreeMap<String, u64>,
    /// Items DynamoDB returned unprocessed (throttled), by table.
    pub(crate) items_unprocessed: BTreeMap<String, u64>,
    /// Write units DynamoDB reported consumed, by table.
    pub(crate) consumed_wcu: BTreeMap<String, u64>,
    /// Dead letters, by reason.
    pub(crate) dead_letters: BTreeMap<String, u64>,
    /// Quota refusals of table maintenance, by operation.
    pub(crate) quota_errors: BTreeMap<String, u64>,
    /// Dead letters written to the local fallback file.
    pub(crate) dead_letter_fallbacks: u64,
    /// 1 while this worker holds the maintenance lease.
    pub(crate) maintenance_held: Option<f64>,
    /// Unix time (s) of the last fully successful maintenance round.
    pub(crate) maintenance_last_success: Option<f64>,
    /// 1 when the next period's table was ACTIVE at the last round.
    pub(crate) next_table_active: Option<f64>,
    /// SQS messages received, every format together.
    pub(crate) sqs_messages_received: u64,
    /// Age of the oldest message of the latest SQS receive, seconds.
    pub(crate) sqs_receive_age: Option<f64>,
    /// Every step of progress together (records read, items stored, dead
    /// letters, lease renewals and checkpoints, SQS messages received and
    /// deleted): a total that only grows while the worker moves.
    pub(crate) progress: u64,
    /// Kinesis leases held.
    pub(crate) leases_held: f64,
    /// SQS messages in flight.
    pub(crate) sqs_in_flight: f64,
    /// 1 while the last read of the lease table failed.
    pub(crate) lease_listing_failing: f64,
}

/// Counter totals at the last look, by metric and key (shard, table,
/// reason, operation): what turns totals into per-interval counts.
pub(crate) type Last = HashMap<(&'static str, String), u64>;

/// The increase of counter `metric`'s total for `key` since the last look
/// (recorded in `last`).
pub(crate) fn delta(last: &mut Last, metric: &'static str, key: &str, total: u64) -> f64 {
    let before = last.insert((metric, key.to_string()), total).unwrap_or(0);
    (total as f64 - before as f64).max(0.0)
}

impl MetricsSnapshot {
    /// MillisBehindLatest of each shard this worker read (GetRecords) since
    /// the last look: a shard whose lease moved away keeps its last gauge
    /// value, and is left out rather than reported stale.
    pub(crate) fn shard_lags(&self, last: &mut Last) -> BTreeMap<String, f64> {
        let mut active = Vec::new();
        for (shard, reads) in &self.shard_reads {
            if delta(last, kinesis::GET_RECORDS, shard, *reads) > 0.0 {
                active.push(shard);
            }
        }
        self.millis_behind
            .iter()
            .filter(|(shard, _)| active.contains(shard))
            .map(|(shard, ms)| (shard.clone(), *ms))
            .collect()
    }

    /// The checkpoint lag of each shard whose written checkpoint is behind
    /// what was read: (records, seconds). A shard this worker gave up, or
    /// one checkpointed up to its last record, is left out.
    pub(crate) fn checkpoint_lags(&self) -> BTreeMap<String, (u64, f64)> {
        self.checkpoint_lag
            .iter()
            .filter(|(_, (records, _))| *records > 0.0)
            .map(|(shard, (records, secs))| (shard.clone(), (*records as u64, *secs)))
            .collect()
    }
}

/// Where a [`TypedRecorder`] keeps its copy; cheap to clone.
#[derive(Clone)]
pub(crate) struct TypedMetrics {
    registry: Arc<Registry<Key, AtomicStorage>>,
}

impl std::fmt::Debug for TypedMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedMetrics").finish_non_exhaustive()
    }
}

impl TypedMetrics {
    /// The values now.
    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        let mut s = MetricsSnapshot::default();
        self.registry.visit_counters(|key, counter| {
            let total = counter.load(Ordering::Acquire);
            let by = |map: &mut BTreeMap<String, u64>, label: Option<String>| {
                if let Some(label) = label {
                    *map.entry(label).or_default() += total;
                }
            };
            if matches!(
                key.name(),
                kinesis::RECORDS_READ
                    | kinesis::LEASE_RENEWALS
                    | kinesis::CHECKPOINTS
                    | writer::ITEMS_STORED
                    | m::DEAD_LETTERS
                    | sqs::MESSAGES_RECEIVED
                    | sqs::MESSAGES_DELETED
            ) && label(key, "result").is_none_or(|r| r == "ok")
            {
                s.progress += total;
            }
            match key.name() {
                kinesis::GET_RECORDS => by(&mut s.shard_reads, shard_of(key)),
                writer::ITEMS_STORED => by(&mut s.items_stored, label(key, "table")),
                writer::UNPROCESSED => by(&mut s.items_unprocessed, label(key, "table")),
                writer::CONSUMED_WCU => by(&mut s.consumed_wcu, label(key, "table")),
                m::DEAD_LETTERS => by(&mut s.dead_letters, label(key, "reason")),
                m::QUOTA_ERRORS => by(
                    &mut s.quota_errors,
                    Some(label(key, "operation").unwrap_or_default()),
                ),
                sqs::MESSAGES_RECEIVED => s.sqs_messages_received += total,
                m::DEAD_LETTER_FALLBACKS => s.dead_letter_fallbacks += total,
                _ => {}
            }
        });
        self.registry.visit_gauges(|key, gauge| {
            let value = f64::from_bits(gauge.load(Ordering::Acquire));
            match key.name() {
                kinesis::MILLIS_BEHIND => {
                    if let Some(shard) = shard_of(key) {
                        s.millis_behind.insert(shard, value);
                    }
                }
                kinesis::CHECKPOINT_LAG_RECORDS => {
                    if let Some(shard) = shard_of(key) {
                        s.checkpoint_lag.entry(shard).or_default().0 = value;
                    }
                }
                kinesis::CHECKPOINT_LAG_SECONDS => {
                    if let Some(shard) = shard_of(key) {
                        s.checkpoint_lag.entry(shard).or_default().1 = value;
                    }
                }
                m::MAINTENANCE_HELD => s.maintenance_held = Some(value),
                m::MAINTENANCE_LAST_SUCCESS => s.maintenance_last_success = Some(value),
                m::NEXT_TABLE_ACTIVE => s.next_table_active = Some(value),
                sqs::RECEIVE_AGE => s.sqs_receive_age = Some(value),
                kinesis::LEASES_HELD => s.leases_held += value,
                sqs::IN_FLIGHT => s.sqs_in_flight += value,
                kinesis::LEASE_LISTING_FAILING => s.lease_listing_failing += value,
                _ => {}
            }
        });
        s
    }
}

/// The value of label `name` of `key`.
fn label(key: &Key, name: &str) -> Option<String> {
    key.labels()
        .find(|l| l.key() == name)
        .map(|l| l.value().to_string())
}

/// `shard`, or `stream/shard` when the metric names its stream.
fn shard_of(key: &Key) -> Option<String> {
    let shard = label(key, "shard")?;
    Some(match label(key, "stream") {
        Some(stream) => format!("{stream}/{shard}"),
        None => shard,
    })
}

/// A [`Recorder`] that hands every metric to `inner` and keeps its own copy
/// of the ones a [`MetricsSnapshot`] holds ([`TypedRecorder::metrics`]).
#[derive(Debug)]
pub(crate) struct TypedRecorder<R> {
    inner: R,
    kept: TypedMetrics,
}

impl<R> TypedRecorder<R> {
    /// Records into `inner`, keeping a typed copy.
    pub(crate) fn new(inner: R) -> Self {
        TypedRecorder {
            inner,
            kept: TypedMetrics {
                registry: Arc::new(Registry::atomic()),
            },
        }
    }

    /// The typed copy, to take snapshots of.
    pub(crate) fn metrics(&self) -> TypedMetrics {
        self.kept.clone()
    }

    /// The recorder this one hands metrics to.
    pub(crate) fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Recorder> Recorder for TypedRecorder<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let inner = self.inner.register_counter(key, metadata);
        if !COUNTERS.contains(&key.name()) {
            return inner;
        }
        let kept = self.kept.registry.get_or_create_counter(key, Arc::clone);
        Counter::from_arc(Arc::new(BothCounters { inner, kept }))
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        let inner = self.inner.register_gauge(key, metadata);
        if !GAUGES.contains(&key.name()) {
            return inner;
        }
        let kept = self.kept.registry.get_or_create_gauge(key, Arc::clone);
        Gauge::from_arc(Arc::new(BothGauges { inner, kept }))
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.inner.register_histogram(key, metadata)
    }
}

/// A counter both recorders count.
struct BothCounters {
    inner: Counter,
    kept: Arc<AtomicU64>,
}

impl CounterFn for BothCounters {
    fn increment(&self, value: u64) {
        self.inner.increment(value);
        CounterFn::increment(&*self.kept, value);
    }

    fn absolute(&self, value: u64) {
        self.inner.absolute(value);
        CounterFn::absolute(&*self.kept, value);
    }
}

/// A gauge both recorders set.
struct BothGauges {
    inner: Gauge,
    kept: Arc<AtomicU64>,
}

impl GaugeFn for BothGauges {
    fn increment(&self, value: f64) {
        self.inner.increment(value);
        GaugeFn::increment(&*self.kept, value);
    }

    fn decrement(&self, value: f64) {
        self.inner.decrement(value);
        GaugeFn::decrement(&*self.kept, value);
    }

    fn set(&self, value: f64) {
        self.inner.set(value);
        GaugeFn::set(&*self.kept, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    // What `status` and EMF read before the snapshot: the exposition text,
    // parsed back. Kept here to prove the snapshot reads the same values.
    /// One sample of the Prometheus text format: name, labels, value.
    #[derive(Debug, Clone, PartialEq)]
    struct Sample {
        /// Metric name.
        name: String,
        /// Labels.
        labels: BTreeMap<String, String>,
        /// Value.
        value: f64,
    }

    /// Parses the Prometheus text exposition the exporter renders (comments
    /// skipped; label values unescaped). Lines it cannot read are skipped.
    fn parse(text: &str) -> Vec<Sample> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(parse_line)
            .collect()
    }

    fn parse_line(line: &str) -> Option<Sample> {
        let (head, value) = line.trim_end().rsplit_once(' ')?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().ok()?,
        };
        let Some((name, rest)) = head.split_once('{') else {
            return Some(Sample {
                name: head.to_string(),
                labels: BTreeMap::new(),
                value,
            });
        };
        let mut labels = BTreeMap::new();
        let mut chars = rest.chars().peekable();
        loop {
            let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
            let key = key.trim_start_matches(',').trim().to_string();
            if key.is_empty() || key == "}" {
                break;
            }
            if chars.next() != Some('"') {
                return None;
            }
            let mut val = String::new();
            loop {
                match chars.next()? {
                    '\\' => match chars.next()? {
                        'n' => val.push('\n'),
                        c => val.push(c),
                    },
                    '"' => break,
                    c => val.push(c),
                }
            }
            labels.insert(key, val);
            if chars.peek() == Some(&'}') {
                break;
            }
        }
        Some(Sample {
            name: name.to_string(),
            labels,
            value,
        })
    }

    #[test]
    fn prometheus_text_is_parsed_with_escaped_labels() {
        let text =
            "# HELP x y\n# TYPE x counter\nx_total{table=\"a\\\"b\",reason=\"r\"} 3\nplain 1.5\n";
        assert_eq!(
            parse(text),
            [
                Sample {
                    name: "x_total".into(),
                    labels: [
                        ("reason".into(), "r".into()),
                        ("table".into(), "a\"b".into())
                    ]
                    .into(),
                    value: 3.0
                },
                Sample {
                    name: "plain".into(),
                    labels: BTreeMap::new(),
                    value: 1.5
                },
            ]
        );
    }

    /// The value the exposition text gives for `name` with exactly `labels`.
    fn text_value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        samples
            .iter()
            .find(|s| s.name == name && s.labels == labels)
            .map(|s| s.value)
    }

    #[test]
    fn the_snapshot_holds_what_the_prometheus_text_says() {
        let recorder = TypedRecorder::new(PrometheusBuilder::new().build_recorder());
        let typed = recorder.metrics();
        let shard = [("shard", "shardId-000000000001")];
        let streamed = [("shard", "shardId-000000000000"), ("stream", "or\"ders")];
        let table = [("table", "events_2026-11-24T10")];
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(kinesis::GET_RECORDS, &shard).increment(3);
            metrics::counter!(kinesis::GET_RECORDS, &streamed).increment(2);
            metrics::gauge!(kinesis::MILLIS_BEHIND, &shard).set(4_500.0);
            metrics::gauge!(kinesis::MILLIS_BEHIND, &streamed).set(0.125);
            metrics::gauge!(kinesis::CHECKPOINT_LAG_RECORDS, &shard).set(1_200.0);
            metrics::gauge!(kinesis::CHECKPOINT_LAG_SECONDS, &shard).set(95.5);
            metrics::gauge!(kinesis::CHECKPOINT_LAG_RECORDS, &streamed).set(0.0);
            metrics::gauge!(kinesis::CHECKPOINT_LAG_SECONDS, &streamed).set(0.0);
            metrics::counter!(writer::ITEMS_STORED, &table).increment(100);
            metrics::counter!(writer::UNPROCESSED, &table).increment(5);
            metrics::counter!(m::DEAD_LETTERS, "reason" => "unroutable").increment(2);
            metrics::counter!(m::QUOTA_ERRORS, "operation" => "CreateTable").increment(1);
            metrics::gauge!(m::MAINTENANCE_HELD).set(1.0);
            metrics::gauge!(m::MAINTENANCE_LAST_SUCCESS).set(1_763_981_400.5);
            metrics::gauge!(m::NEXT_TABLE_ACTIVE).increment(1.0);
            metrics::counter!(sqs::MESSAGES_RECEIVED, "format" => "single").increment(7);
            metrics::gauge!(sqs::RECEIVE_AGE).set(42.5);
            // Not in the snapshot: still on /metrics.
            metrics::counter!(m::RECORDS_READ).increment(9);
        });
        let text = recorder.into_inner().handle().render();
        let samples = parse(&text);
        let snap = typed.snapshot();
        let text_of = |name, labels: &[(&str, &str)]| text_value(&samples, name, labels);
        assert_eq!(text_of(m::RECORDS_READ, &[]), Some(9.0), "{text}");
        let stream_shard = "or\"ders/shardId-000000000000";
        assert_eq!(
            snap.shard_reads,
            [
                (stream_shard.to_string(), 2),
                ("shardId-000000000001".to_string(), 3)
            ]
            .into()
        );
        assert_eq!(
            text_of(kinesis::GET_RECORDS, &streamed),
            Some(snap.shard_reads[stream_shard] as f64)
        );
        assert_eq!(
            text_of(kinesis::MILLIS_BEHIND, &shard),
            snap.millis_behind.get("shardId-000000000001").copied()
        );
        assert_eq!(
            text_of(kinesis::MILLIS_BEHIND, &streamed),
            snap.millis_behind.get(stream_shard).copied()
        );
        assert_eq!(
            text_of(kinesis::CHECKPOINT_LAG_SECONDS, &shard),
            Some(snap.checkpoint_lag["shardId-000000000001"].1)
        );
        assert_eq!(
            snap.checkpoint_lags(),
            [("shardId-000000000001".to_string(), (1_200, 95.5))].into(),
            "a shard checkpointed up to its last record has no lag"
        );
        let t = "events_2026-11-24T10";
        assert_eq!(
            text_of(writer::ITEMS_STORED, &table),
            Some(snap.items_stored[t] as f64)
        );
        assert_eq!(
            text_of(writer::UNPROCESSED, &table),
            Some(snap.items_unprocessed[t] as f64)
        );
        assert_eq!(
            text_of(m::DEAD_LETTERS, &[("reason", "unroutable")]),
            Some(snap.dead_letters["unroutable"] as f64)
        );
        assert_eq!(
            text_of(m::QUOTA_ERRORS, &[("operation", "CreateTable")]),
            Some(snap.quota_errors["CreateTable"] as f64)
        );
        assert_eq!(text_of(m::MAINTENANCE_HELD, &[]), snap.maintenance_held);
        assert_eq!(
            text_of(m::MAINTENANCE_LAST_SUCCESS, &[]),
            snap.maintenance_last_success
        );
        assert_eq!(text_of(m::NEXT_TABLE_ACTIVE, &[]), snap.next_table_active);
        assert_eq!(
            text_of(sqs::MESSAGES_RECEIVED, &[("format", "single")]),
            Some(snap.sqs_messages_received as f64)
        );
        assert_eq!(text_of(sqs::RECEIVE_AGE, &[]), snap.sqs_receive_age);
        assert_eq!(snap.sqs_receive_age, Some(42.5));
    }
}
