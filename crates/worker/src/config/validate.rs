//! The cross-field checks the types cannot express ([`Config::validate`]).

use std::time::Duration;

use tidemark_consumer::SourceConfig;
use tidemark_schema::period::Billing;
use tidemark_schema::route::Router;

use super::check::Problem;
use super::error::LoadError;
use super::sections::{Config, ExpiryAction};

impl Config {
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
    pub(super) fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        // The event fields' first problem (the router builds them first),
        // then every problem of the other router settings; each at its key,
        // so the error points at its line in the file.
        if let Err(e @ tidemark_schema::route::RouterConfigError::Event(_)) =
            Router::new(self.schema.clone())
        {
            out.push((e.key_path(), e.problem()));
        }
        for e in self.schema.problems() {
            out.push((e.key_path(), e.problem()));
        }
        for (key, message) in self.writer.problems() {
            out.push((format!("writer.{key}"), message));
        }
        // The same checks each source runs when it starts, so every command
        // (not only `run`, and before any AWS call) refuses a bad source
        // section, naming the key as it is written in the file.
        if let Err(e) = self.source.validate() {
            out.push((format!("source.{}", e.key), e.problem));
        }
        // Each stream's own mapping must make a router too.
        for (i, stream, event) in self.source.stream_events() {
            let mut schema = self.schema.clone();
            schema.event = event.clone();
            if let Err(e) = Router::new(schema) {
                out.push((
                    format!("source.streams.{i}.{}", e.key_path()),
                    format!("stream `{stream}`: {e}"),
                ));
            }
        }
        let grace = self.source.shutdown_grace();
        if self.shutdown_timeout <= grace {
            out.push((
                "shutdown_timeout".into(),
                format!(
                    "must be above source.shutdown_grace ({grace:?}) so the final \
                     checkpoints and releases have time; raise it or lower the grace"
                ),
            ));
        }
        // Tidemark's own items there would be read by the KCL as leases of
        // shards that do not exist: the way back to the KCL.
        if let SourceConfig::Kinesis(k) = &self.source
            && k.lease_table == self.maintenance.coordinator_table
        {
            out.push((
                "maintenance.coordinator_table".into(),
                format!(
                    "`{}` is also source.lease_table: Tidemark's maintenance lease, worker \
                     reports and leader lock would sit among the leases, where every KCL \
                     version reads them as leases of shards that do not exist; name another \
                     table (default \"tidemark-coordinator\")",
                    k.lease_table
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
        if self.telemetry.stall_timeout < Duration::from_secs(10) {
            out.push((
                "telemetry.stall_timeout".into(),
                "must be at least 10s (a lease renewal or a long poll takes seconds)".into(),
            ));
        }
        let interval = self.telemetry.report_interval;
        if interval < Duration::from_secs(1) || interval > Duration::from_secs(60) {
            out.push((
                "telemetry.report_interval".into(),
                "must be from 1s to 60s (a report older than 2 minutes counts as its worker gone)"
                    .into(),
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
}
