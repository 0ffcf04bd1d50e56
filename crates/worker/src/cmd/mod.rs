//! One module per `tidemark` command, each owning its clap arguments; the
//! helpers several commands share; [`render`] formats every output.

pub(crate) mod healthcheck;
pub(crate) mod key;
pub(crate) mod plan;
pub(crate) mod produce;
pub(crate) mod query;
pub(crate) mod record;
pub(crate) mod render;
pub(crate) mod replay;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod tables;
pub(crate) mod verify;

use std::path::PathBuf;

use anyhow::{Result, bail};
use tidemark_worker::config::{Config, SourceConfig, process_env};

/// The `--config` option every config-reading command takes.
#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArg {
    /// Config file (TOML); every key can also be set as TIDEMARK__SECTION__KEY.
    #[arg(long, short, env = "TIDEMARK_CONFIG", global = true)]
    pub(crate) config: Option<PathBuf>,
}

impl ConfigArg {
    /// The config file with the environment's overrides, validated.
    pub(crate) fn load(&self) -> Result<Config> {
        Ok(Config::load(self.config.as_deref(), &process_env())?)
    }
}

/// The stream name of a name or ARN (`arn:aws:kinesis:r:a:stream/NAME`).
pub(crate) fn stream_name(stream: &str) -> String {
    stream
        .rsplit_once(":stream/")
        .map_or(stream, |(_, n)| n)
        .to_string()
}

/// The Kinesis source of a config, or an error naming the command's need.
pub(crate) fn kinesis_source(config: &Config) -> Result<&tidemark_consumer::KinesisConfig> {
    match &config.source {
        SourceConfig::Kinesis(k) => Ok(k),
        SourceConfig::Sqs(_) => {
            bail!("this command needs a Kinesis source (source.kind = \"kinesis\")")
        }
    }
}

/// A progress bar of `len` in `template`, hidden when `quiet`.
pub(crate) fn progress_bar(len: u64, template: &str, quiet: bool) -> indicatif::ProgressBar {
    let bar = if quiet {
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
    fn stream_name_of_name_or_arn() {
        assert_eq!(super::stream_name("events"), "events");
        assert_eq!(
            super::stream_name("arn:aws:kinesis:us-east-1:123:stream/events"),
            "events"
        );
    }
}
