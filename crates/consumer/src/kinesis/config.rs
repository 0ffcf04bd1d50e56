//! Kinesis consumer configuration: typed, documented field by field,
//! unknown keys rejected. Defaults follow the KCL 2.x where it has one.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::SourceConfigError;
use crate::kinesis::lease::kcl::SideTableNames;

/// Where a shard with no checkpoint starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "type", deny_unknown_fields)]
pub enum InitialPosition {
    /// The oldest record still in the stream (the safe default: nothing lost).
    #[default]
    TrimHorizon,
    /// Only records written after the worker starts.
    Latest,
    /// Records written at or after `timestamp` (RFC 3339).
    AtTimestamp {
        /// Start time, e.g. `2026-11-22T05:00:00Z`.
        timestamp: chrono::DateTime<chrono::Utc>,
    },
}

/// How shards are read.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ReadMode {
    /// GetRecords calls, paced per shard (shares each shard's 2 MiB/s and
    /// 5 reads/s with every other polling consumer of the stream).
    #[default]
    Polling,
    /// Enhanced fan-out: a registered stream consumer and one SubscribeToShard
    /// subscription per leased shard (its own 2 MiB/s per shard, records
    /// pushed within about 70 ms; billed per consumer-shard hour and per GB).
    FanOut,
}

/// Who decides which worker holds which lease (docs/scale-out.md).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LeaseAssignment {
    /// Every worker lists the lease table and takes or steals its share
    /// itself (the KCL 2.x protocol). Best up to a few dozen workers.
    #[default]
    Listing,
    /// One elected worker lists the table and assigns leases by fenced
    /// writes; the others renew what they hold and find new leases with a
    /// Query on the `leaseOwner` index of the lease table (the KCL v3
    /// design). The leader lock and per-worker heartbeats live in the
    /// coordinator table. Reads stay flat as workers are added.
    Leader,
}

/// Configuration of [`KinesisSource`](crate::kinesis::KinesisSource).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KinesisConfig {
    /// Stream name, or its ARN (`arn:aws:kinesis:...:stream/NAME`). Leases
    /// are keyed by bare shard id (the KCL's single-stream format). Set
    /// either this or `streams`.
    #[serde(default)]
    pub stream: String,
    /// Several streams read by one worker from one lease table, with the
    /// KCL multi-stream lease keys (`account:stream:creationEpoch:shardId`),
    /// e.g. `[{ stream = "orders" }, { stream = "clicks", event = { ... } }]`.
    /// Each entry: `stream` (name or ARN), optional `account_id` and
    /// `creation_epoch` (as in the lease keys; default: from the ARN and
    /// DescribeStreamSummary), optional `event` (this stream's mapping, the
    /// keys of `[event]`; default: the shared one). Set either this or
    /// `stream`; a lease table keeps the format it was started with. See
    /// docs/read-modes.md#several-streams.
    #[serde(default)]
    pub streams: Vec<StreamEntry>,
    /// DynamoDB lease table (the KCL's format); created on demand when
    /// absent. A KCL application's table (KCL 2.x to 3.5) can be reused to
    /// resume from its checkpoints; the KCL's own items in it are left as
    /// they are (docs/operations.md#move-from-a-kcl-application).
    pub lease_table: String,
    /// This worker's unique id (e.g. the ECS task id). Two live workers must
    /// never share one.
    pub worker_id: String,
    /// Where shards without a checkpoint start.
    #[serde(default)]
    pub initial_position: InitialPosition,
    /// How events are laid out in one record: `json` (one event),
    /// `json_or_array` (one event, or a JSON array of events), `ndjson` (one
    /// event per line) or `json_array` (a JSON array of events); the same
    /// names mean the same on every source (docs/event-mapping.md).
    /// Gzip-compressed records are detected by their magic bytes whatever
    /// the format. Each inner event is routed, stored or dead-lettered on
    /// its own; the record is checkpointed once all of them are. Default
    /// `json`.
    #[serde(default)]
    pub record_format: tidemark_schema::framing::RecordFormat,
    /// A lease not renewed for this long is free for others (KCL default 10 s).
    /// Leases are renewed every third of it.
    #[schemars(with = "String")]
    #[serde(default = "default_failover_time", with = "humantime_serde")]
    pub failover_time: Duration,
    /// How often ListShards runs besides start and shard ends (KCL default 60 s),
    /// and how often finished leases are looked for and deleted.
    #[schemars(with = "String")]
    #[serde(default = "default_shard_sync_interval", with = "humantime_serde")]
    pub shard_sync_interval: Duration,
    /// Shortest time between two checkpoint writes of a shard (5 s).
    #[schemars(with = "String")]
    #[serde(default = "default_checkpoint_interval", with = "humantime_serde")]
    pub checkpoint_interval: Duration,
    /// Reading pauses while a shard has this many unacknowledged records,
    /// counted in user records (a KPL aggregate counts as the records it
    /// holds), checked before each record read is handed on.
    #[serde(default = "default_max_unacked_per_shard")]
    pub max_unacked_per_shard: usize,
    /// Reading pauses while a shard's unacknowledged records hold this many
    /// bytes once decompressed and split (gzip, KPL aggregation); records
    /// read past it are inflated only once acknowledgements make room, so
    /// a shard's memory stays within it plus one record (at most 64 MiB
    /// inflated). Default 16 MiB; at least 1 MiB.
    #[serde(default = "default_max_unacked_bytes_per_shard")]
    pub max_unacked_bytes_per_shard: usize,
    /// Wait between GetRecords calls of a caught-up shard (250 ms).
    #[schemars(with = "String")]
    #[serde(default = "default_idle_poll", with = "humantime_serde")]
    pub idle_poll: Duration,
    /// Most leases this worker holds; none means no limit.
    #[serde(default)]
    pub max_leases: Option<usize>,
    /// GetRecords `Limit` (Kinesis allows up to 10,000).
    #[serde(default = "default_max_records_per_call")]
    pub max_records_per_call: i32,
    /// At shutdown, how long to wait for in-flight acknowledgements before the
    /// final checkpoint (records after it are read again by the next owner).
    #[schemars(with = "String")]
    #[serde(default = "default_shutdown_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// `polling` (GetRecords) or `fan_out` (enhanced fan-out,
    /// SubscribeToShard): see docs/read-modes.md for when to choose which
    /// and what fan-out costs.
    #[serde(default)]
    pub read_mode: ReadMode,
    /// `fan_out`: the stream consumer to register or reuse; default: the
    /// lease table's name (as the KCL uses its application name). Workers
    /// of one application share it; `tidemark consumer deregister` removes
    /// it (never done implicitly).
    #[serde(default)]
    pub consumer_name: Option<String>,
    /// `fan_out`: a subscription is renewed after this long, before Kinesis
    /// ends it at 5 minutes, after the continuation sequence number of the
    /// last event delivered.
    #[schemars(with = "String")]
    #[serde(default = "default_subscription_renewal", with = "humantime_serde")]
    pub subscription_renewal: Duration,
    /// `listing` (default: every worker lists the lease table) or `leader`
    /// (one elected worker assigns leases; the others query the table's
    /// `leaseOwner` index). Turn `leader` on for fleets of more than about
    /// 20 workers: see docs/scale-out.md. Every worker of one application
    /// must use the same mode.
    #[serde(default)]
    pub lease_assignment: LeaseAssignment,
    /// `leader` mode: the most the wall clocks of two workers may differ. A
    /// worker whose heartbeat is older than `failover_time` + this on the
    /// leader's clock counts as dead and its leases are reassigned at once;
    /// this is safe because every worker stops reading once its own last
    /// successful heartbeat is older than `failover_time` minus a fifth.
    /// Also allowed for when judging, at start, whether a KCL worker still
    /// reports its metrics.
    #[schemars(with = "String")]
    #[serde(default = "default_max_clock_skew", with = "humantime_serde")]
    pub max_clock_skew: Duration,
    /// Moving from a KCL 3.0-3.4 application: its coordinator-state table,
    /// where the KCL keeps its migration state. Read (DescribeTable,
    /// GetItem), never written, at start, to refuse a table whose KCL
    /// migration is not finished (docs/operations.md#move-from-a-kcl-application).
    /// Default `<lease_table>-CoordinatorState`, the KCL's own default
    /// name; `"none"` when the application has none.
    #[serde(default)]
    pub kcl_coordinator_state_table: Option<String>,
    /// Moving from a KCL 3.0-3.4 application: its worker-metrics table.
    /// Read (DescribeTable, Scan), never written, at start, to refuse while
    /// a KCL worker still reports. Default `<lease_table>-WorkerMetricStats`;
    /// `"none"` when the application has none.
    #[serde(default)]
    pub kcl_worker_metric_stats_table: Option<String>,
    /// Lease-coordination switches. Not a configuration key: always
    /// [`LeaseTuning::default`] (tuned) when read from a file; the fleet simulator
    /// sets [`LeaseTuning::before`] to measure the earlier behaviour.
    #[serde(skip)]
    #[schemars(skip)]
    pub lease_tuning: LeaseTuning,
}

/// One stream of `streams`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamEntry {
    /// Stream name, or its ARN.
    pub stream: String,
    /// Owning account id of the lease keys; default: from the stream's ARN
    /// (DescribeStreamSummary). Set it to resume a KCL application's table.
    #[serde(default)]
    pub account_id: Option<String>,
    /// Creation time of the stream in seconds since the epoch, as in the
    /// lease keys; default: from DescribeStreamSummary.
    #[serde(default)]
    pub creation_epoch: Option<u64>,
    /// This stream's event mapping (the keys of `[event]`); default: the
    /// shared `[event]` section.
    #[serde(default)]
    pub event: Option<tidemark_schema::event::EventConfig>,
}

impl StreamEntry {
    /// The stream name (the last part of an ARN).
    pub fn stream_name(&self) -> &str {
        name_of(&self.stream)
    }
}

/// The stream name of a name or an ARN.
fn name_of(stream: &str) -> &str {
    match stream.strip_prefix("arn:") {
        Some(rest) => rest.rsplit('/').next().unwrap_or(rest),
        None => stream,
    }
}

/// How the lease coordinator reads and writes the lease table at scale (see
/// docs/scale-out.md for the measured effect of each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTuning {
    /// List leases with eventually consistent Scans (half the read units);
    /// conditional writes on `leaseCounter` stay the safety net, and a stale
    /// view can only delay an expiry, never hasten it.
    pub eventual_listing: bool,
    /// After a pass that found nothing to do (no free or expired lease, no
    /// take or steal, this worker at its target), the next pass comes after
    /// one failover time, jittered, instead of a third of it.
    pub settled_passes: bool,
    /// Periodic shard discovery runs on one worker (the lowest live owner id,
    /// as the KCL's deterministic shard-sync leader) and reuses the pass's
    /// listing instead of a Scan of its own; a shard end still triggers it
    /// on the worker that saw it.
    pub leader_shard_sync: bool,
    /// Periodic checkpoints (the renewer's, from the shard's
    /// acknowledgements) ride on renewals: a checkpoint write takes a bare
    /// renewal's place, and a lease is written at most once per renewal
    /// interval. Off, a checkpoint is written apart as soon as
    /// `checkpoint_interval` passed. Final and shard-end checkpoints are
    /// the reader's, written at once either way.
    pub fold_checkpoints: bool,
    /// A worker two or more below the target takes one lease from each of
    /// some workers at the target (never past target - 1), as the KCL does;
    /// without it a join can leave newcomers empty (see
    /// `lease::balance::takes_and_steals`).
    pub steal_at_target: bool,
    /// A steal is carried out only when two passes in a row planned one, so
    /// leases released meanwhile (a rolling deploy's old worker shutting
    /// down) are taken instead of live ones; and a worker one short of its
    /// target leaves a just-freed lease for half a failover time to workers
    /// further below (the newcomer, whom others cannot count yet).
    pub patient_steals: bool,
    /// A pass takes at most as many never-taken leases (counter 0: a cold
    /// start, new children) as the worker holds (at least one), and the
    /// next pass follows half a renewal interval later: holdings at most
    /// double per pass, so the first workers of a cold start, which see few
    /// others, do not take leases they must give up again. Released and
    /// expired leases are not capped.
    pub ramped_takes: bool,
}

impl LeaseTuning {
    /// The behaviour before tuning: consistent Scans by every worker every
    /// third of the failover time, shard sync on every worker with its own
    /// Scan, checkpoints written apart from renewals.
    pub const fn before() -> Self {
        Self {
            eventual_listing: false,
            settled_passes: false,
            leader_shard_sync: false,
            fold_checkpoints: false,
            steal_at_target: false,
            patient_steals: false,
            ramped_takes: false,
        }
    }
}

impl LeaseTuning {
    /// Every tuning on: what `tools/fleet-sim` measures at fleet scale.
    pub const fn tuned() -> Self {
        Self {
            eventual_listing: true,
            settled_passes: true,
            leader_shard_sync: true,
            fold_checkpoints: true,
            steal_at_target: true,
            patient_steals: true,
            ramped_takes: false,
        }
    }
}

/// The tuned protocol (docs/scale-out.md has its figures and the stack
/// runs that cleared it).
impl Default for LeaseTuning {
    fn default() -> Self {
        Self::tuned()
    }
}

/// NTP-synchronised hosts (ECS, EC2) stay well within this.
pub(crate) const fn default_max_clock_skew() -> Duration {
    Duration::from_secs(2)
}
/// A minute before Kinesis' own 5-minute end.
pub(crate) const fn default_subscription_renewal() -> Duration {
    Duration::from_secs(240)
}
/// KCL 2.x `failoverTimeMillis`.
pub(crate) const fn default_failover_time() -> Duration {
    Duration::from_secs(10)
}
/// KCL 2.x `shardSyncIntervalMillis`.
pub(crate) const fn default_shard_sync_interval() -> Duration {
    Duration::from_secs(60)
}
/// Bounds lease-table writes to 0.2/s per shard.
pub(crate) const fn default_checkpoint_interval() -> Duration {
    Duration::from_secs(5)
}
/// About 10 s of a shard's 1,000 records/s write limit.
pub(crate) const fn default_max_unacked_per_shard() -> usize {
    10_000
}
/// About 16 s of a shard's 1 MB/s write limit.
pub(crate) const fn default_max_unacked_bytes_per_shard() -> usize {
    16 * 1024 * 1024
}
/// Four polls a second stays under the 5 calls/s per shard read limit.
pub(crate) const fn default_idle_poll() -> Duration {
    Duration::from_millis(250)
}
/// The GetRecords maximum.
pub(crate) const fn default_max_records_per_call() -> i32 {
    10_000
}
/// Fits in ECS's default 30 s stop timeout with room for the final writes.
pub(crate) const fn default_shutdown_grace() -> Duration {
    Duration::from_secs(20)
}

impl KinesisConfig {
    /// A configuration with every default.
    pub fn new(
        stream: impl Into<String>,
        lease_table: impl Into<String>,
        worker_id: impl Into<String>,
    ) -> Self {
        Self {
            stream: stream.into(),
            streams: Vec::new(),
            lease_table: lease_table.into(),
            worker_id: worker_id.into(),
            initial_position: InitialPosition::TrimHorizon,
            record_format: tidemark_schema::framing::RecordFormat::Json,
            failover_time: default_failover_time(),
            shard_sync_interval: default_shard_sync_interval(),
            checkpoint_interval: default_checkpoint_interval(),
            max_unacked_per_shard: default_max_unacked_per_shard(),
            max_unacked_bytes_per_shard: default_max_unacked_bytes_per_shard(),
            idle_poll: default_idle_poll(),
            max_leases: None,
            max_records_per_call: default_max_records_per_call(),
            shutdown_grace: default_shutdown_grace(),
            read_mode: ReadMode::Polling,
            consumer_name: None,
            subscription_renewal: default_subscription_renewal(),
            lease_assignment: LeaseAssignment::Listing,
            max_clock_skew: default_max_clock_skew(),
            kcl_coordinator_state_table: None,
            kcl_worker_metric_stats_table: None,
            lease_tuning: LeaseTuning::default(),
        }
    }

    /// The KCL 3.0-3.4 side tables to look for at start (`None`: not
    /// looked for, set to `"none"`).
    pub fn kcl_side_table_names(&self) -> SideTableNames {
        let name = |set: &Option<String>, suffix: &str| match set.as_deref() {
            Some("none") => None,
            Some(n) => Some(n.to_string()),
            None => Some(format!("{}-{suffix}", self.lease_table)),
        };
        SideTableNames {
            coordinator: name(&self.kcl_coordinator_state_table, "CoordinatorState"),
            metrics: name(&self.kcl_worker_metric_stats_table, "WorkerMetricStats"),
        }
    }

    /// Checks values the types cannot.
    pub(crate) fn validate(&self) -> Result<(), SourceConfigError> {
        let err = |key, problem: &str| {
            Err(SourceConfigError {
                key,
                problem: problem.to_string(),
            })
        };
        if self.stream.is_empty() && self.streams.is_empty() {
            return err(
                "stream",
                "empty: set the stream name or ARN (or `streams` for several)",
            );
        }
        if !self.stream.is_empty() && !self.streams.is_empty() {
            return err(
                "streams",
                "set either `stream` (one stream, leases keyed by shard id) or \
                 `streams` (several, KCL multi-stream lease keys), not both",
            );
        }
        let mut seen = std::collections::HashSet::new();
        for s in &self.streams {
            if s.stream.is_empty() {
                return err("streams", "an entry has an empty `stream`: name it");
            }
            if !seen.insert(s.stream_name()) {
                return err(
                    "streams",
                    &format!("stream `{}` is listed twice", s.stream_name()),
                );
            }
            if s.stream_name().contains(':') {
                return err(
                    "streams",
                    &format!("stream name `{}` contains ':'", s.stream_name()),
                );
            }
            if let Some(a) = &s.account_id
                && (a.is_empty() || !a.bytes().all(|b| b.is_ascii_digit()))
            {
                return err(
                    "streams",
                    &format!("account_id `{a}` of `{}` is not all digits", s.stream),
                );
            }
            if s.creation_epoch == Some(0) {
                return err(
                    "streams",
                    &format!("creation_epoch of `{}` must be above 0", s.stream),
                );
            }
        }
        if self.lease_table.is_empty() {
            return err("lease_table", "empty: name a DynamoDB table");
        }
        if self.worker_id.is_empty() {
            return err("worker_id", "empty: give each worker a unique id");
        }
        if self.failover_time < Duration::from_millis(300) {
            return err("failover_time", "below 300ms: leases would flap; use 10s");
        }
        if self.max_unacked_per_shard == 0 {
            return err("max_unacked_per_shard", "0 would never read; use 10000");
        }
        if self.max_unacked_bytes_per_shard < 1024 * 1024 {
            return err(
                "max_unacked_bytes_per_shard",
                "below 1 MiB (one record); use 16777216",
            );
        }
        if !(1..=10_000).contains(&self.max_records_per_call) {
            return err(
                "max_records_per_call",
                "must be 1..=10000 (the GetRecords limit)",
            );
        }
        if self.subscription_renewal < Duration::from_secs(1)
            || self.subscription_renewal >= Duration::from_secs(300)
        {
            return err(
                "subscription_renewal",
                "must be 1s..5m (Kinesis ends a subscription at 5 minutes); use 4m",
            );
        }
        if self.consumer_name.as_deref() == Some("") {
            return err(
                "consumer_name",
                "empty: remove it to use the lease table's name",
            );
        }
        if self.max_leases == Some(0) {
            return err("max_leases", "0 would never read; remove it for no limit");
        }
        if self.max_leases.is_some() && self.lease_assignment == LeaseAssignment::Leader {
            return err(
                "max_leases",
                "not supported with lease_assignment = \"leader\" (the leader spreads leases evenly over live workers); remove it or use \"listing\"",
            );
        }
        Ok(())
    }

    /// The stream name (the last part of an ARN).
    pub fn stream_name(&self) -> &str {
        name_of(&self.stream)
    }

    /// True in multi-stream mode (`streams` set).
    pub fn is_multi_stream(&self) -> bool {
        !self.streams.is_empty()
    }

    /// The `fan_out` stream consumer's name.
    pub fn consumer_name(&self) -> &str {
        self.consumer_name.as_deref().unwrap_or(&self.lease_table)
    }

    /// True when `stream` is an ARN.
    pub(crate) fn stream_is_arn(&self) -> bool {
        self.stream.starts_with("arn:")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides_from_toml() {
        let c: KinesisConfig = toml::from_str(
            r#"
            stream = "arn:aws:kinesis:us-east-1:000000000000:stream/events"
            lease_table = "leases"
            worker_id = "w1"
            failover_time = "3s"
            initial_position = { type = "at_timestamp", timestamp = "2026-11-22T05:00:00Z" }
            "#,
        )
        .unwrap();
        assert_eq!(c.failover_time, Duration::from_secs(3));
        assert_eq!(c.checkpoint_interval, Duration::from_secs(5));
        assert_eq!(c.max_unacked_per_shard, 10_000);
        assert_eq!(c.stream_name(), "events");
        assert!(c.stream_is_arn());
        assert!(matches!(
            c.initial_position,
            InitialPosition::AtTimestamp { .. }
        ));
        c.validate().unwrap();
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected() {
        let e = toml::from_str::<KinesisConfig>(
            "stream='s'\nlease_table='t'\nworker_id='w'\nfailover='1s'",
        )
        .unwrap_err();
        assert!(e.to_string().contains("failover"), "{e}");
        let mut c = KinesisConfig::new("s", "t", "w");
        c.max_records_per_call = 20_000;
        assert_eq!(c.validate().unwrap_err().key, "max_records_per_call");
        c = KinesisConfig::new("s", "t", "");
        assert_eq!(c.validate().unwrap_err().key, "worker_id");
        c = KinesisConfig::new("s", "t", "w");
        c.max_leases = Some(4);
        c.lease_assignment = LeaseAssignment::Leader;
        assert_eq!(c.validate().unwrap_err().key, "max_leases");
        let c: KinesisConfig = toml::from_str(
            "stream='s'\nlease_table='t'\nworker_id='w'\nlease_assignment='leader'\nmax_clock_skew='1s'",
        )
        .unwrap();
        assert_eq!(c.lease_assignment, LeaseAssignment::Leader);
        assert_eq!(c.max_clock_skew, Duration::from_secs(1));
    }

    #[test]
    fn streams_parse_and_mixing_or_bad_entries_are_refused() {
        let c: KinesisConfig = toml::from_str(
            r#"
            lease_table = "leases"
            worker_id = "w1"
            streams = [
                { stream = "orders" },
                { stream = "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks", account_id = "123456789012", creation_epoch = 1700000000, event = { entity_field = "user" } },
            ]
            "#,
        )
        .unwrap();
        c.validate().unwrap();
        assert!(c.is_multi_stream());
        assert_eq!(c.streams[1].stream_name(), "clicks");
        assert_eq!(c.streams[1].event.as_ref().unwrap().entity_field, "user");
        assert!(c.streams[0].event.is_none());
        // Mixing the two modes.
        let mut mixed = c.clone();
        mixed.stream = "orders".into();
        let e = mixed.validate().unwrap_err();
        assert_eq!(e.key, "streams");
        assert!(e.problem.contains("not both"), "{e}");
        // Neither.
        let mut none = c.clone();
        none.streams.clear();
        assert_eq!(none.validate().unwrap_err().key, "stream");
        // Twice the same stream, a bad account id, a zero epoch.
        let mut twice = c.clone();
        twice.streams[1].stream = "orders".into();
        assert!(twice.validate().unwrap_err().problem.contains("twice"));
        let mut acct = c.clone();
        acct.streams[1].account_id = Some("12a".into());
        assert!(acct.validate().unwrap_err().problem.contains("digits"));
        let mut epoch = c;
        epoch.streams[0].creation_epoch = Some(0);
        assert!(epoch.validate().unwrap_err().problem.contains("above 0"));
    }
}
