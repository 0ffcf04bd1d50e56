//! One module per `tidemark` command, each owning its clap arguments; the
//! helpers several commands share; [`render`] formats every output.

pub(crate) mod config;
pub(crate) mod consumer;
pub(crate) mod dead_letters;
pub(crate) mod healthcheck;
pub(crate) mod key;
pub(crate) mod man;
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

use std::sync::Arc;

use crate::config::{Config, env_warnings, process_env};
use crate::sdk::AwsOverrides;
use anyhow::{Result, bail};
use tidemark_schema::route::RouterConfig;

use super::aws::{Origins, check_setup};
pub(crate) use super::exit::{EXIT_CODES, EXIT_UNAVAILABLE, Exit, Failed, Unavailable, Usage};
use super::journal::Journal;

use render::Output;

/// The log format of every command (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormatArg {
    /// `run`: the config's `telemetry.log_format`; other commands: text.
    Auto,
    /// Human-readable (colour only on a terminal, and never with NO_COLOR).
    Text,
    /// One JSON object per line.
    Json,
}

/// Options every command takes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Global {
    /// Output format of the data a command prints (default: table; `query`
    /// and `key`: jsonl).
    #[arg(long, short, value_enum, global = true)]
    pub(crate) output: Option<Output>,
    /// More log output on stderr: -v info, -vv debug, -vvv trace (default:
    /// warnings); -v also prints an error's whole cause chain.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,
    /// Log filter: trace, debug, info, warn, error, or TARGET=LEVEL pairs;
    /// wins over -v and the config; RUST_LOG wins over it.
    #[arg(long, global = true, value_parser = parse_log_level)]
    log_level: Option<String>,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "auto")]
    pub(crate) log_format: LogFormatArg,
}

/// Options of every command that calls AWS (not of those that do not).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "AWS")]
pub(crate) struct AwsArgs {
    /// No progress bars or spinners (they show only on a terminal anyway).
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
    /// AWS profile (shared config and credentials files); default: AWS_PROFILE.
    #[arg(long, global = true)]
    profile: Option<String>,
    /// AWS region; default: AWS_REGION, then the profile's.
    #[arg(long, global = true)]
    region: Option<String>,
    /// One endpoint for every AWS service (a local emulator); default:
    /// AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>.
    #[arg(long, global = true)]
    endpoint_url: Option<String>,
    /// Longest the whole command may take (e.g. 30s, 5m); exit 69 past it.
    /// Default: no limit (see --give-up-after).
    #[arg(long, global = true, value_parser = humantime_serde::re::humantime::parse_duration)]
    pub(crate) timeout: Option<std::time::Duration>,
    /// Longest wait to connect to an AWS endpoint.
    #[arg(long, global = true, default_value = "3100ms",
          value_parser = humantime_serde::re::humantime::parse_duration)]
    connect_timeout: std::time::Duration,
    /// Exit 69 when AWS has answered none of the command's calls for this
    /// long (a quarter of it when every connection is refused). `run`: only
    /// until AWS first answers.
    #[arg(long, global = true, default_value = "20s",
          value_parser = humantime_serde::re::humantime::parse_duration)]
    pub(crate) give_up_after: std::time::Duration,
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

/// The AWS options of the command running, set once before it runs.
static AWS: OnceLock<AwsArgs> = OnceLock::new();

/// Every AWS call of this process, and where its settings came from.
static JOURNAL: OnceLock<Arc<Journal>> = OnceLock::new();
static ORIGINS: OnceLock<Origins> = OnceLock::new();

/// Records the global options for [`output`] and [`sdk`].
pub(crate) fn set_global(global: &Global) {
    let _ = GLOBAL.set(global.clone());
}

/// `--output`, else `default`.
pub(crate) fn output(default: Output) -> Output {
    GLOBAL.get().and_then(|g| g.output).unwrap_or(default)
}

/// Records the AWS options of the command about to run.
pub(crate) fn set_aws(aws: &AwsArgs) {
    let _ = AWS.set(aws.clone());
}

/// `--quiet`.
pub(crate) fn quiet() -> bool {
    AWS.get().is_some_and(|a| a.quiet)
}

/// `--give-up-after`.
pub(crate) fn give_up_after() -> std::time::Duration {
    AWS.get()
        .map_or(std::time::Duration::from_secs(20), |a| a.give_up_after)
}

/// Set once `run` has started (the worker built, its tables checked).
static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `run` has started: its start-up lines stop.
pub(crate) fn set_started() {
    STARTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `run` has started.
pub(crate) fn started() -> bool {
    STARTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The journal of this process's AWS calls.
pub(crate) fn journal() -> &'static Arc<Journal> {
    JOURNAL.get_or_init(Journal::new)
}

/// Where the AWS settings came from, once [`sdk`] has run.
pub(crate) fn origins() -> Option<&'static Origins> {
    ORIGINS.get()
}

/// The AWS SDK configuration with `--profile`, `--region`,
/// `--endpoint-url` and `--connect-timeout`, checked (an unknown profile,
/// no region or no credentials fail here, exit 78), every call recorded in
/// the [`journal`].
pub(crate) async fn sdk() -> Result<aws_config::SdkConfig> {
    let overrides = AWS
        .get()
        .map_or_else(AwsOverrides::default, |a| AwsOverrides {
            profile: a.profile.clone(),
            region: a.region.clone(),
            endpoint_url: a.endpoint_url.clone(),
            connect_timeout: Some(a.connect_timeout),
        });
    let sdk = crate::sdk::load_with(&overrides).await;
    let origins = check_setup(
        &sdk,
        overrides.profile.as_deref(),
        overrides.region.as_deref(),
        overrides.endpoint_url.as_deref(),
    )
    .await?;
    let _ = ORIGINS.set(origins);
    Ok(journal().watch(&sdk))
}

/// `run`'s arguments: the config and the AWS options.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    #[command(flatten)]
    pub(crate) aws: AwsArgs,
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

    /// `[event]` and `[schema]` with its tiers and billing, for `plan`.
    pub(crate) fn load_routing(&self) -> Result<(RouterConfig, crate::config::SchemaExtras)> {
        let env = process_env();
        warn_env(&env);
        Ok(Config::load_routing(self.config.as_deref(), &env)?)
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

/// A progress bar of `len` in `template`, hidden with `--quiet` or when
/// stdout or stderr is not a terminal (a pipe, a log file, CI).
pub(crate) fn progress_bar(len: u64, template: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let bar = if quiet() || !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
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
