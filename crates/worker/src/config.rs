//! The worker's configuration: one TOML file, every value also settable by
//! environment as `TIDEMARK__SECTION__KEY` (e.g. `TIDEMARK__SOURCE__STREAM`,
//! `TIDEMARK__SCHEMA__KEY__SHARDS`), validated at start.
//!
//! Unknown keys are rejected, and every error names the key (as a dotted
//! path) and says how to fix it.

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
pub const fn default_shutdown_timeout() -> Duration {
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
    /// Keep it, tagged `tidemark:expired=true`, for an export to S3.
    Tag,
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
    /// Delete or only tag tables past retention. Default `delete`.
    pub on_expiry: ExpiryAction,
    /// Table holding the maintenance lease (created on demand, on-demand
    /// billing). Default `tidemark-coordinator`.
    pub coordinator_table: String,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            enabled: true,
            interval: Duration::from_secs(60),
            on_expiry: ExpiryAction::Delete,
            coordinator_table: "tidemark-coordinator".into(),
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
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            listen: "0.0.0.0:9102".into(),
            log_format: LogFormat::Auto,
            log_level: "info".into(),
        }
    }
}

/// A configuration that cannot be used; the message names the key and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
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
}

impl Config {
    /// Loads `path` (if given), applies `TIDEMARK__*` overrides from `env`,
    /// and validates. `env` is passed in so tests need not touch the process
    /// environment.
    pub fn load(
        path: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Config, ConfigError> {
        let text = match path {
            Some(p) => std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.display().to_string(),
                source,
            })?,
            None => String::new(),
        };
        let shown = path.map_or_else(|| "(none)".to_string(), |p| p.display().to_string());
        Config::from_toml(&text, &shown, env)
    }

    /// Parses TOML text with environment overrides; see [`Config::load`].
    pub fn from_toml(
        text: &str,
        path: &str,
        env: &BTreeMap<String, String>,
    ) -> Result<Config, ConfigError> {
        let mut root: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    path: path.to_string(),
                    message: e.to_string(),
                })?;
        for (var, value) in env {
            if let Some(rest) = var.strip_prefix(ENV_PREFIX) {
                apply_env(&mut root, var, rest, value)?;
            }
        }
        fill_worker_id(&mut root, env);
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
        // The writer matches UnprocessedItems by the key attributes: they are
        // the schema's, never configured twice.
        config.writer.pk_attribute = config.schema.key_attributes.pk.clone();
        config.writer.sk_attribute = config.schema.key_attributes.sk.clone();
        config.validate()?;
        Ok(config)
    }

    /// Cross-field checks the types cannot express. [`Config::from_toml`]
    /// runs them; public so a config changed after loading (or a fuzzer) can
    /// run them again.
    pub fn validate(&self) -> Result<(), ConfigError> {
        Router::new(self.schema.clone()).map_err(|e| ConfigError::Key {
            key: "schema".into(),
            message: e.to_string(),
        })?;
        self.writer.validate().map_err(|message| ConfigError::Key {
            key: "writer".into(),
            message,
        })?;
        // The same checks each source runs when it starts, so every command
        // (not only `run`, and before any AWS call) refuses a bad source
        // section, naming the key as it is written in the file.
        match &self.source {
            SourceConfig::Kinesis(kinesis) => {
                kinesis.validate().map_err(|e| ConfigError::Key {
                    key: format!("source.{}", e.key),
                    message: e.problem,
                })?;
            }
            SourceConfig::Sqs(sqs) => {
                sqs.validate().map_err(|e| ConfigError::Key {
                    key: format!("source.{}", e.key),
                    message: e.to_string(),
                })?;
            }
        }
        let grace = match &self.source {
            SourceConfig::Kinesis(k) => k.shutdown_grace,
            SourceConfig::Sqs(s) => s.shutdown_grace,
        };
        if self.shutdown_timeout <= grace {
            return Err(ConfigError::Key {
                key: "shutdown_timeout".into(),
                message: format!(
                    "must be above source.shutdown_grace ({grace:?}) so the final \
                     checkpoints and releases have time; raise it or lower the grace"
                ),
            });
        }
        if self.maintenance.interval < Duration::from_secs(1) {
            return Err(ConfigError::Key {
                key: "maintenance.interval".into(),
                message: "must be at least 1s".into(),
            });
        }
        Ok(())
    }
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

/// Deserializes `value`, turning errors into [`ConfigError::Key`] with the
/// dotted path of the key (under `prefix`).
fn strict<T: serde::de::DeserializeOwned>(
    value: toml::Value,
    prefix: &str,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let message = e.inner().to_string();
        let mut key = e.path().to_string();
        // Internally tagged sections (source) report the section, not the
        // field: name the field too.
        if let Some(field) = backticked_after(&message, "unknown field ")
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
        ConfigError::Key {
            key,
            message: hint(&message),
        }
    })
}

/// The first `` `name` `` after `marker` in `message`.
fn backticked_after<'a>(message: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &message[message.find(marker)? + marker.len()..];
    rest.strip_prefix('`')?.split('`').next()
}

/// Adds how to fix the common serde messages.
fn hint(message: &str) -> String {
    let message = message.trim_end();
    if message.contains("unknown field") {
        format!("{message}; remove it or check its spelling")
    } else if message.contains("missing field") {
        format!("{message}; add it (see localstack/tidemark.toml for a commented example)")
    } else if message.contains("unknown variant")
        || message.contains("invalid value")
        || message.contains("invalid type")
    {
        format!("{message}; fix the value")
    } else {
        message.to_string()
    }
}

/// Sets the value at the path `rest` (`SECTION__KEY[__SUBKEY]`, case
/// insensitive) in `root`. Values parse as TOML (`10`, `true`, `"x"`,
/// `[1, 2]`) and fall back to a plain string (`30s`, `events`).
fn apply_env(
    root: &mut toml::Table,
    var: &str,
    rest: &str,
    value: &str,
) -> Result<(), ConfigError> {
    let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    if path.iter().any(String::is_empty) {
        return Err(ConfigError::Env {
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
            return Ok(());
        }
        let entry = table
            .entry(segment.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            _ => {
                return Err(ConfigError::Env {
                    var: var.to_string(),
                    message: format!("`{}` is a value, not a section", path[..=i].join(".")),
                });
            }
        };
    }
    Ok(())
}

/// `source.worker_id` defaults to the ECS task id, else the host name.
fn fill_worker_id(root: &mut toml::Table, env: &BTreeMap<String, String>) {
    let Some(toml::Value::Table(source)) = root.get_mut("source") else {
        return;
    };
    if source.get("kind").and_then(toml::Value::as_str) != Some("kinesis")
        || source.contains_key("worker_id")
    {
        return;
    }
    source.insert(
        "worker_id".into(),
        toml::Value::String(default_worker_id(env)),
    );
}

/// The ECS task id (from the task ARN in the metadata URI), else the host
/// name, else a random-enough fallback from the pid and start time.
pub fn default_worker_id(env: &BTreeMap<String, String>) -> String {
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

/// The process environment's `TIDEMARK__*` variables (and the few others the
/// defaults read).
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            k.starts_with(ENV_PREFIX) || k == "ECS_CONTAINER_METADATA_URI_V4" || k == "HOSTNAME"
        })
        .collect()
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
        assert!(m.contains("remove it or check its spelling"), "{m}");
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
    fn syntax_errors_name_the_file() {
        let m = err("[source\nkind=", &[]);
        assert!(m.contains("t.toml is not valid TOML"), "{m}");
    }
}
