//! [`Config`] and its sections, typed and documented field by field: the
//! JSON Schema, the configuration reference and the checks are generated
//! from these types.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidemark_consumer::SourceConfig;
use tidemark_schema::event::EventConfig;
use tidemark_schema::period::{Billing, CapacityTiers};
use tidemark_schema::route::RouterConfig;
use tidemark_writer::WriterConfig;

use crate::deadletter::DeadLetterConfig;

/// The whole configuration.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Longest a stop may take, from SIGTERM (or a fatal error) to exit.
    /// Past it `run` abandons in-flight work (nothing unstored is
    /// acknowledged or checkpointed; the next owner reads it again) and exits
    /// non-zero. Keep it below the orchestrator's stop timeout (the ECS
    /// template's `StopTimeout` is 45s) and above the source's
    /// `shutdown_grace`. Default 30s.
    #[schemars(with = "String")]
    #[serde(default = "default_shutdown_timeout", with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// Where records come from.
    pub source: SourceConfig,
    /// Which record fields are entity id, timestamp and event id.
    #[serde(default)]
    pub event: EventConfig,
    /// Keys, tables, periods, retention (the router's settings).
    pub schema: RouterConfig,
    /// `schema.tiers`: provisioned capacity per lifecycle state.
    #[serde(skip)]
    pub tiers: CapacityTiers,
    /// `schema.billing`: `{ mode = "provisioned" }` (default) or
    /// `{ mode = "on_demand", warm_write_units = N }`.
    #[serde(skip)]
    pub billing: Billing,
    /// Batching, rate control, in-flight bounds.
    #[serde(default)]
    pub writer: WriterConfig,
    /// Where records that cannot be stored go.
    pub dead_letters: DeadLetterConfig,
    /// Table maintenance (prebuild, scale down, expire).
    #[serde(default)]
    pub maintenance: MaintenanceConfig,
    /// Metrics, health and logs.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
}

/// 15 s of slack under the ECS template's `StopTimeout` of 45 s (after
/// which ECS sends SIGKILL), and 10 s over the sources' default
/// `shutdown_grace` of 20 s for the final checkpoints and releases.
const fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(30)
}

/// What happens to tables past retention.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExpiryAction {
    /// Delete the table.
    #[default]
    Delete,
    /// Keep it, tagged `tidemark:expired=true`, for an export to S3 of
    /// your own.
    Tag,
    /// Export it to S3 (`maintenance.export`) with
    /// ExportTableToPointInTime, then delete it once the export completed.
    /// Point-in-time recovery is turned on first when it is off (the export
    /// needs it).
    Export,
}

/// S3 destination of `on_expiry = "export"`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// S3 bucket the expired tables are exported to. Required with
    /// `on_expiry = "export"`. Example: `"acme-tidemark-archive"`.
    pub bucket: String,
    /// Key prefix in the bucket; each table's export lands under
    /// `{prefix}{table}/`. Default `tidemark/`.
    pub prefix: Option<String>,
    /// Account owning the bucket, when it is not the table's account.
    pub bucket_owner: Option<String>,
    /// `dynamodb_json` (default) or `ion`.
    pub format: ExportFormat,
}

impl ExportConfig {
    /// The key prefix of `table`'s export.
    pub(crate) fn prefix_of(&self, table: &str) -> String {
        format!("{}{table}/", self.prefix.as_deref().unwrap_or("tidemark/"))
    }
}

/// File format of table exports.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExportFormat {
    /// DynamoDB JSON (one item per line, gzipped).
    #[default]
    DynamodbJson,
    /// Amazon Ion.
    Ion,
}

/// Table maintenance settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MaintenanceConfig {
    /// Run maintenance rounds in `run` (only the worker holding the
    /// maintenance lease does). Default true.
    pub enabled: bool,
    /// Time between rounds. Default 60s.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// What happens to tables past retention: `delete`, `tag` (kept,
    /// tagged `tidemark:expired`) or `export` (to S3, then deleted). Default
    /// `delete`.
    pub on_expiry: ExpiryAction,
    /// S3 destination for `on_expiry = "export"`, e.g.
    /// `export = { bucket = "acme-archive", prefix = "tidemark/" }`.
    pub export: ExportConfig,
    /// Point-in-time recovery on period tables younger than cold (prebuild,
    /// active, cooling); turned off again when a table turns cold. Default
    /// false (PITR is then left as it is).
    pub pitr: bool,
    /// Deletion protection on period tables younger than cold; removed when
    /// a table turns cold, so expiry can delete it. Default false (left as
    /// it is: a table protected by hand is then never deleted, and the
    /// round reports it).
    pub deletion_protection: bool,
    /// How long a table that cannot be created for a quota
    /// (LimitExceededException: too many tables, or the account's
    /// provisioned capacity) is retried before the records waiting for it are
    /// dead-lettered with the reason, so shards move on. Every quota error
    /// is logged as an error and counted. Default 10m.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub quota_retry_for: Duration,
    /// Table holding the maintenance lease (created on demand, on-demand
    /// billing). Default `tidemark-coordinator`.
    pub coordinator_table: String,
    /// Most write capacity (WCU) a capacity lift gives one table below the
    /// active tier while workers report a late backlog for it: the table is
    /// raised to write the backlog within a minute, within this budget, and
    /// lowered to its tier again once the backlog is gone. The lift is
    /// recorded in the coordinator table, so no round reverts it. 0: no
    /// lifts. Default 1000.
    pub late_lift_max_wcu: u64,
    /// How a capacity lift serves a late backlog: `provisioned` raises the
    /// table's write capacity (within `late_lift_max_wcu`); `on_demand`
    /// switches the table to on-demand billing, its write throughput capped
    /// at `late_lift_max_wcu` units a second, and back to provisioned at its
    /// tier once the backlog is gone. DynamoDB allows four switches to
    /// on-demand per table in 24 hours: a table is switched at most once in
    /// 6 hours, and a refused switch is lifted provisioned instead (not
    /// asked again for 6 hours). Default `provisioned`.
    pub late_lift: LateLift,
    /// Largest difference between this host's clock and DynamoDB's (read
    /// from the `Date` of its answers) at which maintenance resizes a table
    /// to a lower tier, exports or deletes one; beyond it those actions are
    /// skipped, logged and counted (`tidemark_maintenance_clock_skips_total`).
    /// Default: a quarter of `schema.late_arrival_grace`.
    #[schemars(with = "Option<String>")]
    #[serde(with = "humantime_serde::option")]
    pub max_clock_skew: Option<Duration>,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            enabled: true,
            interval: Duration::from_secs(60),
            on_expiry: ExpiryAction::Delete,
            export: ExportConfig::default(),
            pitr: false,
            deletion_protection: false,
            quota_retry_for: Duration::from_secs(600),
            coordinator_table: "tidemark-coordinator".into(),
            late_lift_max_wcu: 1000,
            late_lift: LateLift::Provisioned,
            max_clock_skew: None,
        }
    }
}

/// How a capacity lift serves a late backlog (`maintenance.late_lift`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LateLift {
    /// Raise the table's provisioned write capacity.
    #[default]
    Provisioned,
    /// Switch the table to on-demand billing while the backlog lasts.
    OnDemand,
}

/// Log output format.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable on a terminal, JSON otherwise.
    #[default]
    Auto,
    /// Human-readable.
    Text,
    /// One JSON object per line (CloudWatch Logs friendly).
    Json,
}

/// Metrics, health and log settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Address of the HTTP server for `/metrics`, `/healthz`, `/readyz`.
    /// Default `0.0.0.0:9102`.
    pub listen: String,
    /// Log format. Default `auto`.
    pub log_format: LogFormat,
    /// Log filter (tracing `EnvFilter` syntax). Default `info`; `RUST_LOG`
    /// overrides it.
    pub log_level: String,
    /// Write CloudWatch Embedded Metric Format lines to standard output
    /// every `emf_interval` (lag per shard, items stored and throttled per
    /// table, dead letters by reason, writer items in flight, maintenance
    /// health): with the ECS `awslogs` driver CloudWatch turns them into
    /// metrics, with no agent. Default false; the CloudFormation template
    /// turns it on.
    pub emf: bool,
    /// CloudWatch namespace of the EMF metrics. Default `Tidemark`.
    pub emf_namespace: String,
    /// Time between EMF flushes. Default 60s.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub emf_interval: Duration,
    /// `/healthz` answers 503 (`stalled: ...`) once the worker has made no
    /// progress for this long while it holds work: nothing read, stored,
    /// dead-lettered or renewed while it holds leases, SQS messages, items
    /// in the writer or shards behind their tip, or while its lease table
    /// does not answer. An idle worker is never
    /// stalled. Above the longest AWS trouble you want to ride out in
    /// place (a brownout holds every write), so the orchestrator replaces
    /// only a worker that stopped moving. Default 5m, at least 10s.
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub stall_timeout: Duration,
    /// Time between the worker's reports to the coordinator table (lag per
    /// shard, checkpoint lag, SQS queue age, late backlogs): what
    /// `tidemark status` shows and what late-data capacity lifts are sized
    /// from. One small PutItem per worker per interval. Default 30s, from
    /// 1s to 60s (a report older than 2 minutes counts as its worker gone).
    #[schemars(with = "String")]
    #[serde(with = "humantime_serde")]
    pub report_interval: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            listen: "0.0.0.0:9102".into(),
            log_format: LogFormat::Auto,
            log_level: "info".into(),
            emf: false,
            emf_namespace: "Tidemark".into(),
            emf_interval: Duration::from_secs(60),
            stall_timeout: Duration::from_secs(300),
            report_interval: crate::REPORT_INTERVAL,
        }
    }
}

impl Config {
    /// Multi-stream mode: the router settings of each stream with its own
    /// event mapping (`source.streams[].event`), by stream name; the other
    /// streams use [`Config::schema`].
    pub fn stream_schemas(&self) -> Vec<(String, RouterConfig)> {
        self.source
            .stream_events()
            .into_iter()
            .map(|(_, stream, event)| {
                let mut schema = self.schema.clone();
                schema.event = event.clone();
                (stream.to_string(), schema)
            })
            .collect()
    }
}
