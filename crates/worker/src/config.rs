//! The worker's configuration: one TOML file, every value also settable by
//! environment as `TIDEMARK__SECTION__KEY` (e.g. `TIDEMARK__SOURCE__STREAM`,
//! `TIDEMARK__SCHEMA__KEY__SHARDS`), validated at start.
//!
//! Every key is either used or rejected: the JSON Schema generated from the
//! types ([`json_schema`]) names every key, including those of each variant
//! of a tagged table (`schema.key`, `source`, `schema.billing`). One load
//! reports every problem at once ([`LoadError::Invalid`]), each with its
//! dotted key, value, source (file and line, or the variable) and fix.
//!
//! Submodules: `schema` (the generated JSON Schema), `check` (origins of
//! values, unknown keys, messages without Rust type names, near-miss
//! variables, the effective config).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidemark_consumer::config::KinesisConfig;
use tidemark_consumer::sqs::SqsConfig;
use tidemark_schema::event::EventConfig;
use tidemark_schema::period::{Billing, CapacityTiers};
use tidemark_schema::route::{Router, RouterConfig};
use tidemark_writer::WriterConfig;

use crate::deadletter::DeadLetterConfig;

mod check;
mod schema;

pub(crate) use check::Effective;
use check::ValueOrigins;
pub use check::{Problem, ValueOrigin};
pub use schema::json_schema;

/// Prefix of environment overrides; `__` separates the path segments.
pub const ENV_PREFIX: &str = "TIDEMARK__";

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
pub(crate) const fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(30)
}

/// The source section: `kind = "kinesis"` or `kind = "sqs"` plus its keys.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SourceConfig {
    /// A Kinesis data stream, read with leases in a KCL-format table.
    Kinesis(KinesisConfig),
    /// An SQS queue (standard or FIFO).
    Sqs(SqsConfig),
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
            max_clock_skew: None,
        }
    }
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
        }
    }
}

/// A configuration that cannot be used; the message names the key and the fix.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax {
        /// The path.
        path: String,
        /// The parser's message (with line and column).
        message: String,
    },
    /// An environment override cannot be applied.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong.
        message: String,
    },
    /// A key is unknown, missing, or has a bad value.
    #[error("config key `{key}`: {message}")]
    Key {
        /// Dotted path of the key, e.g. `source.failover_time`.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Every problem found, each with its key, value, source and fix.
    #[error("{}", list_problems(.0))]
    Invalid(Vec<Problem>),
}

/// One problem per line, after a count when there are several.
fn list_problems(problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => {
            let mut s = format!("{} problems in the config:", many.len());
            for p in many {
                s.push_str("\n  - ");
                s.push_str(&p.to_string());
            }
            s
        }
    }
}

/// A config file merged with its environment overrides, before typing: the
/// tree, where each key came from, and the problems found so far.
#[derive(Debug)]
struct Merged {
    root: toml::Table,
    origins: ValueOrigins,
    problems: Vec<Problem>,
}

impl Merged {
    /// Parses `text`, applies the `TIDEMARK__*` overrides of `env`, fills
    /// derived defaults, and takes out (as problems) the keys no type uses.
    fn new(text: &str, path: &str, env: &BTreeMap<String, String>) -> Result<Merged, LoadError> {
        let mut root: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| LoadError::Syntax {
                    path: path.to_string(),
                    message: e.to_string(),
                })?;
        let mut origins = ValueOrigins::of_file(text, path);
        let mut problems = Vec::new();
        // Names are case insensitive (`tidemark__source__stream` works);
        // when two spellings of one name are set, the upper-case one wins
        // (applied last).
        let mut vars: Vec<(&String, &String)> = env.iter().collect();
        vars.sort_by_key(|(var, _)| var.starts_with(ENV_PREFIX));
        for (var, value) in vars {
            if let Some(rest) = strip_env_prefix(var) {
                let origin = ValueOrigin::Env { var: var.clone() };
                match apply_env(&mut root, var, rest, value) {
                    Ok(key) => origins.set(&key, origin),
                    Err(LoadError::Env { message, .. }) => problems.push(Problem {
                        key: rest
                            .split("__")
                            .map(str::to_ascii_lowercase)
                            .collect::<Vec<_>>()
                            .join("."),
                        value: Some(value.clone()),
                        origin: Some(origin),
                        message,
                    }),
                    Err(e) => return Err(e),
                }
            }
        }
        if fill_worker_id(&mut root, env) {
            origins.set(
                "source.worker_id",
                ValueOrigin::Derived {
                    what: "ECS task id or host name".into(),
                },
            );
        }
        for mut p in check::unknown_keys(&mut root, &json_schema()) {
            p.origin = origins.of(&p.key).cloned();
            problems.push(p);
        }
        Ok(Merged {
            root,
            origins,
            problems,
        })
    }

    /// A problem at `key` with its value and origin.
    fn problem(&self, key: String, message: String) -> Problem {
        Problem {
            value: check::value_at(&self.root, &key),
            origin: self.origins.of(&key).cloned(),
            key,
            message,
        }
    }

    /// The typed config, or every problem: a value serde refuses is noted
    /// and taken out, and the rest is typed again, so one run reports the
    /// bad values of every section, not only the first.
    fn into_config(mut self) -> Result<Config, LoadError> {
        let mut removed: Vec<String> = Vec::new();
        let mut typed = None;
        // Bounded: each round removes a key (or stops).
        for _ in 0..64 {
            match Config::typed(&self.root) {
                Ok(c) => {
                    typed = Some(c);
                    break;
                }
                Err(LoadError::Key { key, message }) => {
                    // A required value we took out: already reported.
                    if !removed.contains(&key) {
                        let p = self.problem(key.clone(), message);
                        self.problems.push(p);
                    }
                    let mut k = key.as_str();
                    // Take the value out, or (missing) its section, to go on.
                    loop {
                        if check::remove_at(&mut self.root, k) {
                            removed.push(k.to_string());
                            break;
                        }
                        match k.rfind('.') {
                            Some(i) => k = &k[..i],
                            None => return Err(LoadError::Invalid(self.problems)),
                        }
                    }
                    removed.push(key);
                }
                Err(e) => return Err(e),
            }
        }
        // The cross-field checks run on what typed (the values taken out
        // read as their defaults), so they report alongside the rest.
        if let Some(config) = &typed {
            for (key, message) in config.problems() {
                if !removed
                    .iter()
                    .any(|r| key == *r || key.starts_with(&format!("{r}.")))
                {
                    let p = self.problem(key, message);
                    self.problems.push(p);
                }
            }
        }
        match typed {
            Some(config) if self.problems.is_empty() => Ok(config),
            _ => Err(LoadError::Invalid(self.problems)),
        }
    }
}

impl Config {
    /// Loads `path` (if given), applies `TIDEMARK__*` overrides from `env`,
    /// and validates. `env` is passed in so tests need not touch the process
    /// environment.
    pub fn load(path: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Config, LoadError> {
        let (text, shown) = read(path)?;
        Config::from_toml(&text, &shown, env)
    }

    /// Parses TOML text with environment overrides; see [`Config::load`].
    pub fn from_toml(
        text: &str,
        path: &str,
        env: &BTreeMap<String, String>,
    ) -> Result<Config, LoadError> {
        Merged::new(text, path, env)?.into_config()
    }

    /// Every key of the effective config with its value and where it came
    /// from (file and line, environment variable, or default); fails as
    /// [`Config::load`] does.
    pub(crate) fn effective(
        path: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Vec<Effective>, LoadError> {
        let (text, shown) = read(path)?;
        Config::from_toml(&text, &shown, env)?;
        let merged = Merged::new(&text, &shown, env)?;
        Ok(check::effective(
            &merged.root,
            &merged.origins,
            &json_schema(),
        ))
    }

    /// The event and router settings alone, for the commands that only
    /// route (`key`, `plan`): the other sections may be absent, and are
    /// checked only for unknown keys.
    pub(crate) fn load_router(
        path: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<RouterConfig, LoadError> {
        #[derive(Deserialize)]
        struct Routing {
            #[serde(default)]
            event: EventConfig,
            schema: RouterConfig,
        }
        let (text, shown) = read(path)?;
        let mut merged = Merged::new(&text, &shown, env)?;
        if !merged.problems.is_empty() {
            return Err(LoadError::Invalid(merged.problems));
        }
        let mut routing = toml::Table::new();
        for section in ["event", "schema"] {
            if let Some(v) = merged.root.remove(section) {
                routing.insert(section.into(), v);
            }
        }
        if let Some(toml::Value::Table(schema)) = routing.get_mut("schema") {
            schema.remove("tiers");
            schema.remove("billing");
        }
        merged.root = routing;
        let r: Routing =
            strict(toml::Value::Table(merged.root.clone()), "").map_err(|e| match e {
                LoadError::Key { key, message } => {
                    LoadError::Invalid(vec![merged.problem(key, message)])
                }
                e => e,
            })?;
        let mut schema = r.schema;
        schema.event = r.event;
        Router::new(schema.clone())
            .map_err(|e| LoadError::Invalid(vec![merged.problem(e.key_path(), e.to_string())]))?;
        Ok(schema)
    }

    /// The typed config of a merged tree (serde's first error only).
    fn typed(root: &toml::Table) -> Result<Config, LoadError> {
        let mut root = root.clone();
        // Tiers and billing live in [schema] for users, but are maintenance
        // settings, not the router's: lift them out before the router's
        // strict (deny_unknown_fields) parse sees them.
        let mut extras = toml::Table::new();
        if let Some(toml::Value::Table(schema)) = root.get_mut("schema") {
            for key in ["tiers", "billing"] {
                if let Some(v) = schema.remove(key) {
                    extras.insert(key.to_string(), v);
                }
            }
        }
        let extras: SchemaExtras = strict(toml::Value::Table(extras), "schema.")?;
        let mut config: Config = strict(toml::Value::Table(root), "")?;
        config.tiers = extras.tiers;
        config.billing = extras.billing;
        config.schema.event = config.event.clone();
        Ok(config)
    }

    /// Cross-field checks the types cannot express. [`Config::from_toml`]
    /// runs them; public so a config changed after loading (or a fuzzer) can
    /// run them again.
    pub fn validate(&self) -> Result<(), LoadError> {
        let problems: Vec<Problem> = self
            .problems()
            .into_iter()
            .map(|(key, message)| Problem {
                key,
                value: None,
                origin: None,
                message,
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(LoadError::Invalid(problems))
        }
    }

    /// Every cross-field problem, as (dotted key, what is wrong and the fix).
    fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Err(e) = Router::new(self.schema.clone()) {
            // The key itself, so the error points at its line in the file.
            out.push((e.key_path(), e.to_string()));
        }
        if let Err(message) = self.writer.validate() {
            out.push(("writer".into(), message));
        }
        // The same checks each source runs when it starts, so every command
        // (not only `run`, and before any AWS call) refuses a bad source
        // section, naming the key as it is written in the file.
        match &self.source {
            SourceConfig::Kinesis(kinesis) => {
                if let Err(e) = kinesis.validate() {
                    out.push((format!("source.{}", e.key), e.problem));
                }
                // Each stream's own mapping must make a router too.
                for (stream, schema) in self.stream_schemas() {
                    if let Err(e) = Router::new(schema) {
                        let i = kinesis
                            .streams
                            .iter()
                            .position(|s| s.stream_name() == stream)
                            .unwrap_or_default();
                        out.push((
                            format!("source.streams.{i}.{}", e.key_path()),
                            format!("stream `{stream}`: {e}"),
                        ));
                    }
                }
            }
            SourceConfig::Sqs(sqs) => {
                if let Err(e) = sqs.validate() {
                    out.push((format!("source.{}", e.key), e.to_string()));
                }
            }
        }
        let grace = match &self.source {
            SourceConfig::Kinesis(k) => k.shutdown_grace,
            SourceConfig::Sqs(s) => s.shutdown_grace,
        };
        if self.shutdown_timeout <= grace {
            out.push((
                "shutdown_timeout".into(),
                format!(
                    "must be above source.shutdown_grace ({grace:?}) so the final \
                     checkpoints and releases have time; raise it or lower the grace"
                ),
            ));
        }
        if self.maintenance.interval < Duration::from_secs(1) {
            out.push(("maintenance.interval".into(), "must be at least 1s".into()));
        }
        out.extend(self.expiry_guard_problem());
        if self.maintenance.on_expiry == ExpiryAction::Export
            && self.maintenance.export.bucket.trim().is_empty()
        {
            out.push((
                "maintenance.export.bucket".into(),
                "on_expiry = \"export\" needs the S3 bucket to export to: set \
                 maintenance.export.bucket (and optionally prefix)"
                    .into(),
            ));
        }
        if self.telemetry.emf && self.telemetry.emf_interval < Duration::from_secs(1) {
            out.push((
                "telemetry.emf_interval".into(),
                "must be at least 1s".into(),
            ));
        }
        if self.telemetry.emf && self.telemetry.emf_namespace.trim().is_empty() {
            out.push((
                "telemetry.emf_namespace".into(),
                "must not be empty (CloudWatch needs a namespace): e.g. \"Tidemark\"".into(),
            ));
        }
        if matches!(self.billing, Billing::Provisioned) {
            let t = &self.tiers;
            for (name, c) in [
                ("prebuild", t.prebuild),
                ("active", t.active),
                ("cooling", t.cooling),
                ("cold", t.cold),
                ("frozen", t.frozen),
            ] {
                for (unit, v) in [("read", c.read), ("write", c.write)] {
                    if v == 0 {
                        out.push((
                            format!("schema.tiers.{name}.{unit}"),
                            "DynamoDB needs at least 1 capacity unit: use 1 or more".into(),
                        ));
                    }
                }
            }
        }
        if let Err(m) = check_listen(&self.telemetry.listen) {
            out.push(("telemetry.listen".into(), m));
        }
        if let Err(m) = check_log_level(&self.telemetry.log_level) {
            out.push(("telemetry.log_level".into(), m));
        }
        out
    }
}

impl Config {
    /// `schema.expiry_guard` must cover what may happen between the last
    /// write accepted for a table and its export or deletion: two
    /// maintenance rounds, and a late write's wait in the writer.
    fn expiry_guard_problem(&self) -> Option<(String, String)> {
        let guard = self.schema.expiry_guard;
        let rounds = self.maintenance.interval * 2;
        let late = self.writer.late_max_wait + self.writer.call_timeout;
        if guard < rounds {
            return Some((
                "schema.expiry_guard".into(),
                format!(
                    "is {guard:?}, less than two maintenance intervals ({rounds:?}): raise it or lower maintenance.interval"
                ),
            ));
        }
        if guard * 2 < late {
            return Some((
                "schema.expiry_guard".into(),
                format!(
                    "is {guard:?}: twice it must cover writer.late_max_wait plus writer.call_timeout ({late:?}), the longest a write accepted before the guard can take; raise it or lower writer.late_max_wait"
                ),
            ));
        }
        None
    }

    /// Multi-stream mode: the router settings of each stream with its own
    /// event mapping (`source.streams[].event`), by stream name; the other
    /// streams use [`Config::schema`].
    pub fn stream_schemas(&self) -> Vec<(String, RouterConfig)> {
        let SourceConfig::Kinesis(k) = &self.source else {
            return Vec::new();
        };
        k.streams
            .iter()
            .filter_map(|s| {
                let event = s.event.clone()?;
                let mut schema = self.schema.clone();
                schema.event = event;
                Some((s.stream_name().to_string(), schema))
            })
            .collect()
    }
}

/// The file's text and its name as shown in messages.
fn read(path: Option<&Path>) -> Result<(String, String), LoadError> {
    let text = match path {
        Some(p) => std::fs::read_to_string(p).map_err(|source| LoadError::Read {
            path: p.display().to_string(),
            source,
        })?,
        None => String::new(),
    };
    let shown = path.map_or_else(|| "(no file)".to_string(), |p| p.display().to_string());
    Ok((text, shown))
}

/// `HOST:PORT` with a port number, as the health server binds it.
fn check_listen(listen: &str) -> Result<(), String> {
    match listen.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err("not an address: use HOST:PORT, e.g. \"0.0.0.0:9102\"".into()),
    }
}

/// Levels a log filter may name.
const LOG_LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// A tracing filter of levels: `info`, or `warn,tidemark_writer=debug`. A
/// bare word that is no level would be read as a module name and silence
/// everything else, so it is refused.
pub(crate) fn check_log_level(filter: &str) -> Result<(), String> {
    let level_ok = |l: &str| LOG_LEVELS.contains(&l.trim().to_ascii_lowercase().as_str());
    for directive in filter.split(',') {
        let ok = match directive.rsplit_once('=') {
            Some((target, level)) => !target.trim().is_empty() && level_ok(level),
            None => level_ok(directive),
        };
        if !ok {
            return Err(format!(
                "`{}` is not a log level: use one of {} (or TARGET=LEVEL, comma-separated)",
                directive.trim(),
                LOG_LEVELS.join(", ")
            ));
        }
    }
    Ok(())
}

/// Tiers and billing, read from `[schema]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaExtras {
    #[serde(default)]
    tiers: CapacityTiers,
    #[serde(default)]
    billing: Billing,
}

/// Deserializes `value`, turning errors into [`LoadError::Key`] with the
/// dotted path of the key (under `prefix`).
fn strict<T: serde::de::DeserializeOwned>(
    value: toml::Value,
    prefix: &str,
) -> Result<T, LoadError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let message = e.inner().to_string();
        let mut key = e.path().to_string();
        // Internally tagged sections (source) report the section, not the
        // field: name the field too.
        if let Some(field) = backticked_after(&message, "unknown field ")
            .or_else(|| backticked_after(&message, "missing field "))
            && !key.ends_with(field)
        {
            key = if key == "." {
                field.to_string()
            } else {
                format!("{key}.{field}")
            };
        }
        let key = match (key.as_str(), prefix) {
            (".", "") => "(top level)".to_string(),
            (".", p) => p.trim_end_matches('.').to_string(),
            (k, p) => format!("{p}{k}"),
        };
        LoadError::Key {
            key,
            message: check::humanize(&message),
        }
    })
}

/// The first `` `name` `` after `marker` in `message`.
fn backticked_after<'a>(message: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &message[message.find(marker)? + marker.len()..];
    rest.strip_prefix('`')?.split('`').next()
}

/// `var` without its `TIDEMARK__` prefix, matched in any case.
pub(crate) fn strip_env_prefix(var: &str) -> Option<&str> {
    let n = ENV_PREFIX.len();
    (var.len() > n && var.is_char_boundary(n) && var[..n].eq_ignore_ascii_case(ENV_PREFIX))
        .then(|| &var[n..])
}

/// Sets the value at the path `rest` (`SECTION__KEY[__SUBKEY]`, case
/// insensitive) in `root`. Values parse as TOML (`10`, `true`, `"x"`,
/// `[1, 2]`) and fall back to a plain string (`30s`, `events`). Returns the
/// dotted key set.
fn apply_env(
    root: &mut toml::Table,
    var: &str,
    rest: &str,
    value: &str,
) -> Result<String, LoadError> {
    let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    if path.iter().any(String::is_empty) {
        return Err(LoadError::Env {
            var: var.to_string(),
            message: "empty path segment; use TIDEMARK__SECTION__KEY".into(),
        });
    }
    let parsed = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let mut table = root;
    for (i, segment) in path.iter().enumerate() {
        if i + 1 == path.len() {
            table.insert(segment.clone(), parsed);
            return Ok(path.join("."));
        }
        let entry = table
            .entry(segment.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            _ => {
                return Err(LoadError::Env {
                    var: var.to_string(),
                    message: format!("`{}` is a value, not a section", path[..=i].join(".")),
                });
            }
        };
    }
    Ok(path.join("."))
}

/// `source.worker_id` defaults to the ECS task id, else the host name; true
/// when it was filled in.
fn fill_worker_id(root: &mut toml::Table, env: &BTreeMap<String, String>) -> bool {
    let Some(toml::Value::Table(source)) = root.get_mut("source") else {
        return false;
    };
    if source.get("kind").and_then(toml::Value::as_str) != Some("kinesis")
        || source.contains_key("worker_id")
    {
        return false;
    }
    source.insert(
        "worker_id".into(),
        toml::Value::String(default_worker_id(env)),
    );
    true
}

/// The ECS task id (from the task ARN in the metadata URI), else the host
/// name, else a random-enough fallback from the pid and start time.
pub(crate) fn default_worker_id(env: &BTreeMap<String, String>) -> String {
    // ECS_CONTAINER_METADATA_URI_V4 ends in `/v4/<task id>-<container id>`;
    // the task id is unique per task, which is what a lease owner needs.
    if let Some(uri) = env.get("ECS_CONTAINER_METADATA_URI_V4")
        && let Some(last) = uri.rsplit('/').next()
        && let Some(task) = last.split('-').next()
        && !task.is_empty()
    {
        return format!("ecs-{task}");
    }
    if let Some(h) = env.get("HOSTNAME").filter(|h| !h.is_empty()) {
        return h.clone();
    }
    if let Ok(h) = std::fs::read_to_string("/etc/hostname")
        && !h.trim().is_empty()
    {
        return h.trim().to_string();
    }
    format!("worker-{}", std::process::id())
}

/// The process environment's `TIDEMARK*` variables (overrides, and near
/// misses for [`env_warnings`]) and the few others the defaults read.
pub(crate) fn process_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            k.to_ascii_uppercase().starts_with("TIDEMARK_")
                || k == "ECS_CONTAINER_METADATA_URI_V4"
                || k == "HOSTNAME"
        })
        .collect()
}

/// Variables of `env` that look meant as overrides but are ignored (one
/// underscore after `TIDEMARK`, or lower case), each with the name to use.
pub(crate) fn env_warnings(env: &BTreeMap<String, String>) -> Vec<String> {
    let schema = json_schema();
    let sections: Vec<&str> = schema["properties"]
        .as_object()
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    check::env_warnings(env, &sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[source]
kind = "kinesis"
stream = "events"
lease_table = "tidemark-leases"

[schema]
table_prefix = "events"

[dead_letters]
kind = "file"
path = "dead-letters.jsonl"
"#;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn err(text: &str, e: &[(&str, &str)]) -> String {
        Config::from_toml(text, "t.toml", &env(e))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn minimal_config_gets_defaults_and_a_worker_id() {
        let c = Config::from_toml(MINIMAL, "t.toml", &env(&[("HOSTNAME", "host-a")])).unwrap();
        let SourceConfig::Kinesis(k) = &c.source else {
            panic!("kinesis expected")
        };
        assert_eq!(k.worker_id, "host-a");
        assert_eq!(c.telemetry.listen, "0.0.0.0:9102");
        assert!(c.maintenance.enabled);
    }

    #[test]
    fn several_streams_with_their_own_mappings() {
        let text = MINIMAL.replace(
            "stream = \"events\"\n",
            "\n[[source.streams]]\nstream = \"orders\"\n\n\
             [[source.streams]]\nstream = \"clicks\"\nevent = { entity_field = \"user\" }\n",
        );
        // The [[source.streams]] tables must follow the [source] keys.
        let text = text
            .replace("lease_table = \"tidemark-leases\"\n", "")
            .replace(
                "kind = \"kinesis\"\n",
                "kind = \"kinesis\"\nlease_table = \"tidemark-leases\"\n",
            );
        let c = Config::from_toml(&text, "t.toml", &env(&[("HOSTNAME", "h")])).unwrap();
        let SourceConfig::Kinesis(k) = &c.source else {
            panic!("kinesis expected")
        };
        assert_eq!(k.streams.len(), 2);
        let schemas = c.stream_schemas();
        assert_eq!(schemas.len(), 1, "only clicks has its own mapping");
        assert_eq!(schemas[0].0, "clicks");
        assert_eq!(schemas[0].1.event.entity_field, "user");
        // A bad mapping of one stream is named with its place.
        let bad = text.replace("entity_field = \"user\"", "entity_field = \"\"");
        let m = err(&bad, &[("HOSTNAME", "h")]);
        assert!(m.contains("source.streams.1.event"), "{m}");
        assert!(m.contains("stream `clicks`"), "{m}");
        // Both modes at once are refused.
        let both = text.replace(
            "kind = \"kinesis\"\n",
            "kind = \"kinesis\"\nstream = \"events\"\n",
        );
        let m = err(&both, &[("HOSTNAME", "h")]);
        assert!(
            m.contains("source.streams") && m.contains("not both"),
            "{m}"
        );
    }

    #[test]
    fn ecs_task_id_wins_over_host_name() {
        let e = env(&[
            ("HOSTNAME", "ip-10-0-0-1"),
            (
                "ECS_CONTAINER_METADATA_URI_V4",
                "http://169.254.170.2/v4/a1b2c3d4e5-1234567890",
            ),
        ]);
        assert_eq!(default_worker_id(&e), "ecs-a1b2c3d4e5");
    }

    #[test]
    fn environment_overrides_nested_keys_with_typed_values() {
        let e = env(&[
            ("TIDEMARK__SOURCE__STREAM", "other"),
            ("TIDEMARK__SCHEMA__PERIOD", "hour"),
            ("TIDEMARK__SCHEMA__KEY__STRATEGY", "time_bucket"),
            ("TIDEMARK__SCHEMA__KEY__SHARDS", "10"),
            ("TIDEMARK__SCHEMA__KEY__BUCKET", "hour"),
            ("TIDEMARK__MAINTENANCE__ENABLED", "false"),
        ]);
        let c = Config::from_toml(MINIMAL, "t.toml", &e).unwrap();
        let SourceConfig::Kinesis(k) = &c.source else {
            panic!()
        };
        assert_eq!(k.stream, "other");
        assert!(!c.maintenance.enabled);
        assert_eq!(serde_json::to_value(c.schema.period).unwrap(), "hour");
        assert_eq!(serde_json::to_value(&c.schema.key).unwrap()["shards"], 10);
    }

    #[test]
    fn unknown_key_is_named_with_its_path() {
        let text = MINIMAL.replace("lease_table", "lease_tabel");
        let m = err(&text, &[]);
        assert!(m.contains("config key `source.lease_tabel`"), "{m}");
        assert!(m.contains("did you mean `lease_table`?"), "{m}");
        let m = err(
            &format!("{MINIMAL}\n[telemetry]\nlisten_addr = \"x\"\n"),
            &[],
        );
        assert!(m.contains("telemetry.listen_addr"), "{m}");
        assert!(m.contains("remove it or check its spelling"), "{m}");
    }

    #[test]
    fn missing_and_bad_values_name_the_key() {
        let m = err(&MINIMAL.replace("table_prefix = \"events\"", ""), &[]);
        assert!(m.contains("schema") && m.contains("table_prefix"), "{m}");
        let m = err(MINIMAL, &[("TIDEMARK__SCHEMA__PERIOD", "fortnight")]);
        assert!(m.contains("config key `schema.period`"), "{m}");
        let m = err(MINIMAL, &[("TIDEMARK__MAINTENANCE__INTERVAL", "soon")]);
        assert!(m.contains("config key `maintenance.interval`"), "{m}");
        let m = err(MINIMAL, &[("TIDEMARK__SOURCE__STREAM__X", "1")]);
        assert!(
            m.contains("TIDEMARK__SOURCE__STREAM__X") && m.contains("source.stream"),
            "{m}"
        );
    }

    #[test]
    fn kinesis_source_is_checked_at_load() {
        // Found by fuzzing: these loaded, and only the Kinesis source's own
        // start-up check refused them, under the key `kinesis.*`.
        for (text, key) in [
            (
                MINIMAL.replace("stream = \"events\"", "stream = \"\""),
                "source.stream",
            ),
            (
                MINIMAL.replace("lease_table = ", "failover_time = \"1ms\"\nlease_table = "),
                "source.failover_time",
            ),
            (
                MINIMAL.replace("lease_table = ", "max_leases = 0\nlease_table = "),
                "source.max_leases",
            ),
        ] {
            let m = err(&text, &[]);
            assert!(m.contains(&format!("config key `{key}`")), "{m}");
        }
    }

    #[test]
    fn tiers_and_billing_are_read_from_schema() {
        let text = MINIMAL.replace(
            "table_prefix = \"events\"",
            "table_prefix = \"events\"\ntiers = { cold = { read = 50, write = 2 } }\nbilling = { mode = \"provisioned\" }",
        );
        let c = Config::from_toml(&text, "t.toml", &env(&[])).unwrap();
        assert_eq!(c.tiers.cold.read, 50);
        assert_eq!(c.tiers.active, CapacityTiers::default().active);
        let m = err(&text.replace("read = 50", "reed = 50"), &[]);
        assert!(m.contains("config key `schema.tiers.cold"), "{m}");
        let m = err(MINIMAL, &[("TIDEMARK__SCHEMA__BILLING__MODE", "free")]);
        assert!(m.contains("config key `schema.billing"), "{m}");
    }

    #[test]
    fn the_commented_examples_are_valid() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for file in ["localstack/tidemark.toml", "deploy/tidemark.toml"] {
            let path = root.join(file);
            let c = Config::load(Some(&path), &env(&[("HOSTNAME", "h")]))
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(!c.schema.table_prefix.is_empty(), "{file}");
        }
    }

    /// The problems of a config that must not load.
    fn problems(text: &str, e: &[(&str, &str)]) -> Vec<Problem> {
        match Config::from_toml(text, "t.toml", &env(e)) {
            Err(LoadError::Invalid(p)) => p,
            other => panic!("expected problems, got {other:?}"),
        }
    }

    /// The one problem at `key`.
    fn problem_at(text: &str, e: &[(&str, &str)], key: &str) -> Problem {
        let all = problems(text, e);
        all.iter()
            .find(|p| p.key == key)
            .cloned()
            .unwrap_or_else(|| panic!("no problem at `{key}` in {all:#?}"))
    }

    #[test]
    fn schema_event_is_refused_not_overwritten() {
        let text = MINIMAL.replace(
            "table_prefix = \"events\"",
            "table_prefix = \"events\"\n[schema.event]\nentity_field = \"user.id\"",
        );
        let p = problem_at(&text, &[], "schema.event");
        assert!(p.message.contains("top-level [event]"), "{p}");
        assert!(
            matches!(p.origin, Some(ValueOrigin::File { line: 9, .. })),
            "{p}"
        );
    }

    /// Every kind of `[event]` mapping error, whether serde or the router
    /// finds it, is refused at load naming the key and its line in the file.
    #[test]
    fn mapping_errors_point_at_their_key_and_line() {
        let first = MINIMAL.lines().count() + 2;
        for (event, key) in [
            ("timezone = \"Europe/Atlantis\"", "event.timezone"),
            ("timestamp_format = \"%H:%M\"", "event.timestamp_format"),
            ("timestamp_format = \"epoch_ms\"", "event.timestamp_format"),
            ("on_clash = \"drop\"", "event.on_clash"),
            ("types = { n = \"integer\" }", "event.types.n"),
            ("rename = { a = \"\" }", "event.rename"),
            (
                "entity_fields = [\"a\", \"b\"]\nentity_separator = \"\"",
                "event.entity_separator",
            ),
            ("timestamp_field = \"deviceId\"", "event.timestamp_field"),
            ("include = [\"a\"]\nexclude = [\"a\"]", "event.exclude"),
        ] {
            let text = format!("{MINIMAL}\n\n[event]\n{event}\n");
            let p = problem_at(&text, &[], key);
            assert!(
                matches!(p.origin, Some(ValueOrigin::File { line, .. }) if line >= first),
                "{event}: {p}"
            );
        }
    }

    #[test]
    fn shards_with_the_entity_strategy_is_refused() {
        let text = MINIMAL.replace(
            "table_prefix = \"events\"",
            "table_prefix = \"events\"\nkey = { strategy = \"entity\", shards = 10, bucket = \"hour\" }",
        );
        let all = problems(&text, &[]);
        let mut keys: Vec<&str> = all.iter().map(|p| p.key.as_str()).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["schema.key.bucket", "schema.key.shards"], "{all:#?}");
        for p in &all {
            assert!(p.message.contains("strategy = \"entity\""), "{p}");
        }
        // The same by environment, named by its variable.
        let p = problem_at(
            &MINIMAL.replace(
                "table_prefix = \"events\"",
                "table_prefix = \"events\"\nkey.strategy = \"entity\"",
            ),
            &[("TIDEMARK__SCHEMA__KEY__SHARDS", "10")],
            "schema.key.shards",
        );
        assert!(
            p.to_string().contains("TIDEMARK__SCHEMA__KEY__SHARDS"),
            "{p}"
        );
    }

    #[test]
    fn writer_key_attributes_are_refused() {
        for key in ["pk_attribute", "sk_attribute"] {
            let text = format!("{MINIMAL}\n[writer]\n{key} = \"id\"\n");
            let p = problem_at(&text, &[], &format!("writer.{key}"));
            assert!(p.message.contains("schema.key_attributes"), "{p}");
        }
    }

    #[test]
    fn unknown_keys_of_every_nested_section_are_refused() {
        // One misspelt key per nested table: each is named with its path.
        for (section, line) in [
            ("source", "lease_tabel = \"x\""),
            (
                "source.initial_position",
                "type = \"latest\"\ntimestamp = \"2026-01-01T00:00:00Z\"",
            ),
            ("event", "entity = \"id\""),
            (
                "schema.key",
                "strategy = \"time_bucket\"\nshards = 2\nbucket = \"hour\"\nbuckets = 1",
            ),
            ("schema.key_attributes", "partition = \"p\""),
            ("schema.attributes", "entity_attr = \"e\""),
            ("schema.tiers", "hot = { read = 1, write = 1 }"),
            ("schema.tiers.cold", "read = 1\nwrite = 1\nreads = 1"),
            (
                "schema.billing",
                "mode = \"provisioned\"\nwarm_write_units = 5",
            ),
            ("writer", "lingr = \"1s\""),
            ("dead_letters", "pth = \"x\""),
            ("maintenance", "enable = true"),
            ("telemetry", "listen_addr = \"x\""),
        ] {
            let header = format!("[{section}]\n");
            let text = if MINIMAL.contains(&header) {
                MINIMAL.replace(&header, &format!("{header}{line}\n"))
            } else {
                format!("{MINIMAL}\n{header}{line}\n")
            };
            let all = problems(&text, &[]);
            assert_eq!(all.len(), 1, "{section}: {all:#?}");
            assert!(
                all[0].key.starts_with(&format!("{section}.")),
                "{section}: {}",
                all[0]
            );
            assert!(
                matches!(all[0].origin, Some(ValueOrigin::File { .. })),
                "{section}: {}",
                all[0]
            );
        }
    }

    #[test]
    fn every_problem_is_reported_at_once_without_rust_names() {
        let text = format!(
            "{MINIMAL}\n[writer]\nmax_in_flight_items = \"abc\"\n[maintenance]\ninterval = \"soon\"\n[telemetry]\nlog_level = 5\n"
        );
        let all = problems(&text, &[("TIDEMARK__SOURCE__STREEM", "x")]);
        let keys: Vec<&str> = all.iter().map(|p| p.key.as_str()).collect();
        for k in [
            "source.streem",
            "writer.max_in_flight_items",
            "maintenance.interval",
            "telemetry.log_level",
        ] {
            assert!(keys.contains(&k), "{k} missing from {all:#?}");
        }
        let shown = LoadError::Invalid(all).to_string();
        for rust in ["usize", "u64", "struct", "enum ", "variant"] {
            assert!(!shown.contains(rust), "{rust} in {shown}");
        }
        assert!(
            shown.contains("environment variable TIDEMARK__SOURCE__STREEM"),
            "{shown}"
        );
        assert!(shown.contains("t.toml:"), "{shown}");
    }

    #[test]
    fn impossible_values_are_refused() {
        let p = problem_at(
            &MINIMAL.replace(
                "table_prefix = \"events\"",
                "table_prefix = \"events\"\ntiers.active = { read = 5, write = 0 }",
            ),
            &[],
            "schema.tiers.active.write",
        );
        assert!(p.to_string().contains("t.toml:9"), "{p}");
        for (e, key) in [
            (
                ("TIDEMARK__TELEMETRY__LISTEN", "localhost:abc"),
                "telemetry.listen",
            ),
            (
                ("TIDEMARK__TELEMETRY__LOG_LEVEL", "verbose"),
                "telemetry.log_level",
            ),
        ] {
            let p = problem_at(MINIMAL, &[e], key);
            assert!(p.to_string().contains(e.0), "{p}");
        }
        // Levels with targets are fine.
        let c = Config::from_toml(
            MINIMAL,
            "t.toml",
            &env(&[(
                "TIDEMARK__TELEMETRY__LOG_LEVEL",
                "warn,tidemark_writer=debug",
            )]),
        );
        assert!(c.is_ok(), "{c:?}");
    }

    #[test]
    fn effective_config_names_each_source() {
        let dir = std::env::temp_dir().join(format!("tidemark-eff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.toml");
        std::fs::write(&path, MINIMAL).unwrap();
        let all = Config::effective(
            Some(&path),
            &env(&[("TIDEMARK__SCHEMA__PERIOD", "hour"), ("HOSTNAME", "h")]),
        )
        .unwrap();
        let get = |k: &str| {
            all.iter()
                .find(|e| e.key == k)
                .unwrap_or_else(|| panic!("{k} not in {all:#?}"))
        };
        assert!(matches!(
            get("source.stream").origin,
            ValueOrigin::File { line: 4, .. }
        ));
        assert_eq!(get("schema.period").value, "\"hour\"");
        assert!(matches!(
            get("schema.period").origin,
            ValueOrigin::Env { .. }
        ));
        assert_eq!(get("writer.linger").origin, ValueOrigin::Default);
        assert_eq!(get("schema.tiers.cold.write").value, "1");
        assert!(matches!(
            get("source.worker_id").origin,
            ValueOrigin::Derived { .. }
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_router_loads_without_source_or_dead_letters() {
        let dir = std::env::temp_dir().join(format!("tidemark-router-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.toml");
        std::fs::write(
            &path,
            "[event]\nentity_field = \"id\"\n[schema]\ntable_prefix = \"x\"\n",
        )
        .unwrap();
        let r = Config::load_router(Some(&path), &env(&[])).unwrap();
        assert_eq!(r.event.entity_field, "id");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shutdown_timeout_defaults_to_30s_and_must_exceed_the_grace() {
        let c = Config::from_toml(MINIMAL, "t.toml", &env(&[])).unwrap();
        assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
        let c = Config::from_toml(
            &format!("shutdown_timeout = \"8s\"\n{MINIMAL}"),
            "t.toml",
            &env(&[]),
        )
        .unwrap_err()
        .to_string();
        assert!(c.contains("config key `shutdown_timeout`"), "{c}");
        assert!(c.contains("shutdown_grace (20s)"), "{c}");
        let c = Config::from_toml(
            MINIMAL,
            "t.toml",
            &env(&[
                ("TIDEMARK__SHUTDOWN_TIMEOUT", "8s"),
                ("TIDEMARK__SOURCE__SHUTDOWN_GRACE", "3s"),
            ]),
        )
        .unwrap();
        assert_eq!(c.shutdown_timeout, Duration::from_secs(8));
    }

    #[test]
    fn the_expiry_guard_must_cover_two_rounds_and_a_late_write() {
        let c = Config::from_toml(MINIMAL, "t.toml", &env(&[])).unwrap();
        assert_eq!(c.schema.expiry_guard, Duration::from_secs(600));
        for (vars, want) in [
            (
                [("TIDEMARK__MAINTENANCE__INTERVAL", "6m")],
                "two maintenance intervals",
            ),
            (
                [("TIDEMARK__WRITER__LATE_MAX_WAIT", "1h")],
                "writer.late_max_wait",
            ),
        ] {
            let e = Config::from_toml(MINIMAL, "t.toml", &env(&vars))
                .unwrap_err()
                .to_string();
            assert!(e.contains("schema.expiry_guard"), "{e}");
            assert!(e.contains(want), "{e}");
        }
        let e = Config::from_toml(
            MINIMAL,
            "t.toml",
            &env(&[
                ("TIDEMARK__SCHEMA__RETENTION", "9m"),
                ("TIDEMARK__SCHEMA__LATE_ARRIVAL_GRACE", "1m"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("expiry_guard"), "{e}");
    }

    #[test]
    fn syntax_errors_name_the_file() {
        let m = err("[source\nkind=", &[]);
        assert!(m.contains("t.toml is not valid TOML"), "{m}");
    }
}
