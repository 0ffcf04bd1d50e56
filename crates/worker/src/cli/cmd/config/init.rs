//! `tidemark config init`: a commented starter config from a few flags,
//! asked for on a terminal when missing. What it writes loads as it is
//! (`tidemark config check` passes), and names the next steps.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::cli::cmd::Usage;
use crate::cli::cmd::render::write_out;

/// The source kinds `init` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SourceKind {
    Kinesis,
    Sqs,
}

/// The key strategies, by their config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
enum Strategy {
    Entity,
    TimeBucket,
    CalculatedSuffix,
    RandomSuffix,
}

/// Arguments of `config init`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Args {
    /// Where records come from.
    #[arg(long, value_enum, default_value = "kinesis")]
    source: SourceKind,
    /// The Kinesis stream (name or ARN).
    #[arg(long)]
    stream: Option<String>,
    /// The SQS queue's URL.
    #[arg(long)]
    queue_url: Option<String>,
    /// Prefix of the period tables (`{prefix}_2026-11-22`).
    #[arg(long)]
    prefix: Option<String>,
    /// One table per hour, six_hours, twelve_hours, day, week, month or
    /// quarter (`tidemark plan` recommends one).
    #[arg(long, default_value = "day")]
    period: String,
    /// The key strategy (`tidemark plan` recommends one).
    #[arg(long, value_enum, default_value = "entity")]
    strategy: Strategy,
    /// Write shards of a sharded strategy (1 to 10,000).
    #[arg(long)]
    shards: Option<u32>,
    /// How long data is kept (e.g. 30d).
    #[arg(long, default_value = "30d")]
    retention: String,
    /// Write the config here instead of to standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Overwrite --out if it exists.
    #[arg(long)]
    force: bool,
}

/// Asks on the terminal for a missing answer; without a terminal, a usage
/// error naming the flag.
fn ask(value: &Option<String>, flag: &str, question: &str) -> Result<String> {
    if let Some(v) = value.as_ref().filter(|v| !v.trim().is_empty()) {
        return Ok(v.trim().to_string());
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(Usage(format!("give {flag} ({question})")).into());
    }
    let mut err = std::io::stderr();
    write!(err, "{question}: ")?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let line = line.trim().to_string();
    if line.is_empty() {
        return Err(Usage(format!("give {flag} ({question})")).into());
    }
    Ok(line)
}

/// A TOML string literal.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let (source, prefix) = match args.source {
        SourceKind::Kinesis => {
            let stream = ask(&args.stream, "--stream", "Kinesis stream (name or ARN)")?;
            let prefix = ask(&args.prefix, "--prefix", "table prefix")?;
            (kinesis_section(&stream, &prefix), prefix)
        }
        SourceKind::Sqs => {
            let url = ask(&args.queue_url, "--queue-url", "SQS queue URL")?;
            let prefix = ask(&args.prefix, "--prefix", "table prefix")?;
            (sqs_section(&url), prefix)
        }
    };
    let text = config_text(args, &source, &prefix)?;
    // What is written must load: a flag value the loader refuses is a
    // usage error now, not a surprise at `run`.
    let env = std::collections::BTreeMap::from([("HOSTNAME".to_string(), "init".to_string())]);
    if let Err(e) = crate::config::Config::from_toml(&text, "(config init)", &env) {
        return Err(Usage(format!("these flags make a config that does not load: {e}")).into());
    }
    match &args.out {
        None => write_out(text.as_bytes()),
        Some(path) => {
            if path.exists() && !args.force {
                return Err(Usage(format!(
                    "{} exists: choose another --out or add --force",
                    path.display()
                ))
                .into());
            }
            std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "wrote {}; next: tidemark config check {0}, then tidemark run --config {0}",
                path.display()
            );
            Ok(())
        }
    }
}

fn kinesis_section(stream: &str, prefix: &str) -> String {
    format!(
        "[source]\n\
         kind = \"kinesis\"\n\
         stream = {}                       # name or ARN; TIDEMARK__SOURCE__STREAM overrides it\n\
         lease_table = {}        # KCL 2.x format, created when absent\n\
         initial_position = {{ type = \"trim_horizon\" }}  # or \"latest\", or {{ type = \"at_timestamp\", timestamp = \"...\" }}\n\
         # failover_time = \"10s\"           # a lease not renewed this long is free\n\
         # read_mode = \"fan_out\"           # enhanced fan-out instead of polling (docs/read-modes.md)\n",
        quoted(stream),
        quoted(&format!("{prefix}-leases"))
    )
}

fn sqs_section(url: &str) -> String {
    format!(
        "[source]\n\
         kind = \"sqs\"\n\
         queue_url = {}\n\
         # record_format = \"json\"        # or \"ndjson\", \"json_array\" (docs/architecture.md#sqs-source)\n\
         # max_receivers = 10\n",
        quoted(url)
    )
}

fn config_text(args: &Args, source: &str, prefix: &str) -> Result<String> {
    let key = match args.strategy {
        Strategy::Entity => "{ strategy = \"entity\" }".to_string(),
        Strategy::TimeBucket => format!(
            "{{ strategy = \"time_bucket\", shards = {}, bucket = \"hour\" }}",
            args.shards.unwrap_or(8)
        ),
        Strategy::CalculatedSuffix => format!(
            "{{ strategy = \"calculated_suffix\", shards = {} }}",
            args.shards.unwrap_or(8)
        ),
        Strategy::RandomSuffix => format!(
            "{{ strategy = \"random_suffix\", shards = {} }}",
            args.shards.unwrap_or(8)
        ),
    };
    if args.strategy == Strategy::Entity && args.shards.is_some() {
        return Err(Usage(
            "--shards is for the sharded strategies: add --strategy time_bucket, calculated_suffix or random_suffix"
                .into(),
        )
        .into());
    }
    Ok(format!(
        "# Tidemark configuration, written by `tidemark config init`.\n\
         # Every key: docs/configuration.md (or `tidemark config explain KEY`);\n\
         # each can also be set as TIDEMARK__SECTION__KEY. Check it with\n\
         # `tidemark config check FILE`; size it with `tidemark plan`.\n\
         \n\
         {source}\n\
         [event]\n\
         # Which fields of your events hold the entity, the time and the id\n\
         # (dotted paths allowed, e.g. \"device.id\").\n\
         entity_field = \"deviceId\"\n\
         timestamp_field = \"timestamp\"           # RFC 3339, epoch seconds or millis\n\
         event_id_field = \"eventId\"              # absent ids come from the source position\n\
         \n\
         [schema]\n\
         table_prefix = {}\n\
         period = {}\n\
         retention = {}                   # tables are deleted this long after their period\n\
         # One partition key takes 1,000 WCU: `entity` and `time_bucket` keep one\n\
         # entity on one partition; the suffix strategies spread it (`tidemark plan`).\n\
         key = {key}\n\
         # Capacity of the current table; `tidemark plan` sizes it.\n\
         # tiers = {{ active = {{ read = 300, write = 1000 }} }}\n\
         # billing = {{ mode = \"on_demand\", warm_write_units = 4000 }}\n\
         \n\
         [dead_letters]\n\
         # Records that cannot be stored, with their reason; on AWS prefer\n\
         # kind = \"sqs\" (queue_url) or kind = \"dynamodb\" (table).\n\
         kind = \"file\"\n\
         path = \"dead-letters.jsonl\"\n\
         \n\
         [telemetry]\n\
         listen = \"0.0.0.0:9102\"                  # /metrics, /healthz, /readyz\n",
        quoted(prefix),
        quoted(&args.period),
        quoted(&args.retention),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct I {
        #[command(flatten)]
        args: Args,
    }

    fn text(argv: &[&str]) -> String {
        let mut all = vec!["i"];
        all.extend(argv);
        let a = I::try_parse_from(all).unwrap().args;
        config_text(&a, &kinesis_section("events", "events"), "events").unwrap()
    }

    #[test]
    fn every_strategy_loads() {
        let env = std::collections::BTreeMap::from([("HOSTNAME".to_string(), "h".to_string())]);
        for s in [
            "entity",
            "time_bucket",
            "calculated_suffix",
            "random_suffix",
        ] {
            let t = text(&["--strategy", s]);
            crate::config::Config::from_toml(&t, "t", &env)
                .unwrap_or_else(|e| panic!("{s}: {e}\n{t}"));
        }
        let t = text(&[
            "--period",
            "hour",
            "--strategy",
            "time_bucket",
            "--shards",
            "12",
        ]);
        assert!(
            t.contains("shards = 12") && t.contains("period = \"hour\""),
            "{t}"
        );
    }

    #[test]
    fn values_are_quoted_as_toml() {
        for v in ["a\"b", "it's", "c:\\x", "日本"] {
            let t: toml::Table = toml::from_str(&format!("k = {}", quoted(v))).unwrap();
            assert_eq!(t["k"].as_str(), Some(v), "{v}");
        }
    }
}
