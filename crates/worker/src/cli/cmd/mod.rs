//! One module per `tidemark` command, each owning its clap arguments; the
//! helpers several commands share; [`render`] formats every output.

pub(crate) mod config;
pub(crate) mod consumer;
pub(crate) mod healthcheck;
pub(crate) mod key;
pub(crate) mod migrate;
pub(crate) mod plan;
pub(crate) mod produce;
pub(crate) mod query;
pub(crate) mod record;
pub(crate) mod render;
pub(crate) mod replay;
pub(crate) mod run;
pub(crate) mod source;
pub(crate) mod status;
pub(crate) mod tables;
pub(crate) mod verify;

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::config::{Config, LoadError, env_warnings, process_env};
use crate::sdk::AwsOverrides;
use crate::tools::verify::VerifyError;
use anyhow::{Result, bail};
use aws_smithy_runtime_api::client::result::ConnectorError;
use tidemark_schema::route::RouterConfig;

use render::Output;

/// The exit codes, as `--help` shows them.
pub(crate) const EXIT_CODES: &str = "Exit status:\n  \
0   success\n  \
1   failure; for `verify`: some events missing or different\n  \
2   usage error (unknown option, missing argument)\n  \
69  AWS unavailable (no connection or no answer; `verify`: none in --give-up-after)\n  \
78  bad configuration (`tidemark config check` lists every problem)";

/// Exit status for a configuration error (EX_CONFIG of sysexits.h).
pub(crate) const EXIT_CONFIG: u8 = 78;
/// Exit status when the backend, not the data, is the problem
/// (EX_UNAVAILABLE), so a caller can tell "try later" from "missing".
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;

/// The exit status of a failed command (see [`EXIT_CODES`]).
pub(crate) fn exit_code(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<LoadError>().is_some() {
        return EXIT_CONFIG;
    }
    if let Some(VerifyError::Unavailable { .. }) = e.downcast_ref::<VerifyError>() {
        return EXIT_UNAVAILABLE;
    }
    if e.downcast_ref::<Unavailable>().is_some()
        || e.chain().any(|c| {
            c.downcast_ref::<crate::maintenance::TablesError>()
                .is_some_and(crate::maintenance::TablesError::is_unreachable)
        })
    {
        return EXIT_UNAVAILABLE;
    }
    // A call that got no answer at all (no connection, DNS, a connect or
    // read timeout): the SDK's DispatchFailure carries the connector's
    // error. The service is unreachable, whatever the command.
    if e.chain().any(|c| c.is::<ConnectorError>()) {
        return EXIT_UNAVAILABLE;
    }
    1
}

/// An AWS service gave no answer to any call of a command (exit 69).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unavailable(pub(crate) String);

/// Options every command takes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Global {
    /// Output format of the data a command prints (default: table; `query`
    /// and `key`: jsonl).
    #[arg(long, short, value_enum, global = true)]
    pub(crate) output: Option<Output>,
    /// More log output on stderr: -v info, -vv debug, -vvv trace (default: warnings).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Log filter: trace, debug, info, warn, error, or TARGET=LEVEL pairs;
    /// wins over -v and the config; RUST_LOG wins over it.
    #[arg(long, global = true, value_parser = parse_log_level)]
    log_level: Option<String>,
    /// AWS profile (shared config and credentials files); default: AWS_PROFILE.
    #[arg(long, global = true)]
    profile: Option<String>,
    /// AWS region; default: AWS_REGION, then the profile's.
    #[arg(long, global = true)]
    region: Option<String>,
    /// One endpoint for every AWS service (a local emulator); default: AWS_ENDPOINT_URL.
    #[arg(long, global = true)]
    endpoint_url: Option<String>,
}

/// `--log-level`, checked as the config's `telemetry.log_level` is.
fn parse_log_level(s: &str) -> Result<String, String> {
    crate::config::check_log_level(s).map(|()| s.to_string())
}

impl Global {
    /// The log filter the command line asks for, if any.
    pub(crate) fn log_filter(&self) -> Option<String> {
        self.log_level.clone().or(match self.verbose {
            0 => None,
            1 => Some("info".into()),
            2 => Some("debug".into()),
            _ => Some("trace".into()),
        })
    }
}

/// The global options, set once by `main` before any command runs.
static GLOBAL: OnceLock<Global> = OnceLock::new();

/// Records the global options for [`output`] and [`sdk`].
pub(crate) fn set_global(global: &Global) {
    let _ = GLOBAL.set(global.clone());
}

/// `--output`, else `default`.
pub(crate) fn output(default: Output) -> Output {
    GLOBAL.get().and_then(|g| g.output).unwrap_or(default)
}

/// The AWS SDK configuration with `--profile`, `--region`, `--endpoint-url`.
pub(crate) async fn sdk() -> aws_config::SdkConfig {
    let overrides = GLOBAL
        .get()
        .map_or_else(AwsOverrides::default, |g| AwsOverrides {
            profile: g.profile.clone(),
            region: g.region.clone(),
            endpoint_url: g.endpoint_url.clone(),
        });
    crate::sdk::load_with(&overrides).await
}

/// The `--config` option every config-reading command takes.
#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArg {
    /// Config file (TOML); every key can also be set as TIDEMARK__SECTION__KEY.
    #[arg(long, short, env = "TIDEMARK_CONFIG", global = true)]
    pub(crate) config: Option<PathBuf>,
}

impl ConfigArg {
    /// The config file with the environment's overrides, validated; warns
    /// (stderr) about variables that look meant as overrides but are not.
    pub(crate) fn load(&self) -> Result<Config> {
        let env = process_env();
        warn_env(&env);
        Ok(Config::load(self.config.as_deref(), &env)?)
    }

    /// Only `[event]` and `[schema]`, for the commands that only route.
    pub(crate) fn load_router(&self) -> Result<RouterConfig> {
        let env = process_env();
        warn_env(&env);
        Ok(Config::load_router(self.config.as_deref(), &env)?)
    }
}

/// Prints [`env_warnings`] to stderr.
fn warn_env(env: &std::collections::BTreeMap<String, String>) {
    for w in env_warnings(env) {
        eprintln!("warning: {w}");
    }
}

/// The stream name of a name or ARN (`arn:aws:kinesis:r:a:stream/NAME`).
pub(crate) fn stream_name(stream: &str) -> String {
    stream
        .rsplit_once(":stream/")
        .map_or(stream, |(_, n)| n)
        .to_string()
}

/// The one stream a command works on, as a single-stream config:
/// `source.stream`, or with `source.streams` the entry `--stream` names.
pub(crate) fn one_stream(
    k: &tidemark_consumer::KinesisConfig,
    wanted: Option<&str>,
) -> Result<tidemark_consumer::KinesisConfig> {
    let names = || {
        k.streams
            .iter()
            .map(|s| s.stream_name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let stream = match wanted {
        None if !k.is_multi_stream() => return Ok(k.clone()),
        None => bail!(
            "the config reads several streams (source.streams): name one with --stream ({})",
            names()
        ),
        Some(w) if !k.is_multi_stream() && (w == k.stream || w == k.stream_name()) => {
            return Ok(k.clone());
        }
        Some(w) => match k
            .streams
            .iter()
            .find(|s| s.stream == w || s.stream_name() == w)
        {
            Some(s) => s.stream.clone(),
            None => bail!("--stream {w} is not a stream of the config ({})", {
                if k.is_multi_stream() {
                    names()
                } else {
                    k.stream.clone()
                }
            }),
        },
    };
    let mut one = k.clone();
    one.stream = stream;
    one.streams = Vec::new();
    Ok(one)
}

/// A progress bar of `len` in `template`, hidden when `quiet` or when
/// stdout or stderr is not a terminal (a pipe, a log file, CI).
pub(crate) fn progress_bar(len: u64, template: &str, quiet: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let bar = if quiet || !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(len)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_stream_picks_the_named_entry_of_several() {
        let mut k = tidemark_consumer::KinesisConfig::new("", "t", "w");
        k.streams = [
            "orders",
            "arn:aws:kinesis:us-east-1:123456789012:stream/clicks",
        ]
        .iter()
        .map(|s| tidemark_consumer::kinesis::StreamEntry {
            stream: s.to_string(),
            account_id: None,
            creation_epoch: None,
            event: None,
        })
        .collect();
        let e = super::one_stream(&k, None).unwrap_err().to_string();
        assert!(
            e.contains("--stream") && e.contains("orders, clicks"),
            "{e}"
        );
        let one = super::one_stream(&k, Some("clicks")).unwrap();
        assert!(one.stream.ends_with("stream/clicks") && one.streams.is_empty());
        assert!(super::one_stream(&k, Some("nope")).is_err());
        let single = tidemark_consumer::KinesisConfig::new("events", "t", "w");
        assert_eq!(super::one_stream(&single, None).unwrap().stream, "events");
        assert!(super::one_stream(&single, Some("other")).is_err());
    }

    #[test]
    fn stream_name_of_name_or_arn() {
        assert_eq!(super::stream_name("events"), "events");
        assert_eq!(
            super::stream_name("arn:aws:kinesis:us-east-1:123:stream/events"),
            "events"
        );
    }
}
