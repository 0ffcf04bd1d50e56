//! The one place the command line tells source kinds apart.
//!
//! The running worker never does: it runs whatever
//! `tidemark_consumer::build` makes of the `[source]` section. Some
//! commands work with the source's own resources (the stream, the queue,
//! the lease table), and those differ by kind:
//! - a command for one kind asks for it here ([`kinesis_source`]: `record`,
//!   `replay`, `verify --stream`, `consumer`), and says so when the config
//!   has another;
//! - a command that works with either implements [`PerKind`] (what
//!   `status` shows of the source, where `produce` sends) and runs it with
//!   [`per_kind`].
//!
//! Adding a source kind: a new arm in each function below, and a new
//! method of [`PerKind`], which the compiler then asks of every command
//! that needs one.

use anyhow::{Result, bail};
use tidemark_consumer::{KinesisConfig, SqsConfig};

use crate::config::{Config, SourceConfig};

/// What a command does with a source of each kind.
pub(crate) trait PerKind<'c> {
    /// What the command gets out of it.
    type Output;
    /// For a Kinesis source.
    fn kinesis(self, config: &'c KinesisConfig) -> Self::Output;
    /// For an SQS source.
    fn sqs(self, config: &'c SqsConfig) -> Self::Output;
}

/// Runs `command` for the configured source's kind.
pub(crate) fn per_kind<'c, C: PerKind<'c>>(source: &'c SourceConfig, command: C) -> C::Output {
    match source {
        SourceConfig::Kinesis(k) => command.kinesis(k),
        SourceConfig::Sqs(q) => command.sqs(q),
    }
}

/// The Kinesis source of a config, or an error naming the command's need.
pub(crate) fn kinesis_source(config: &Config) -> Result<&KinesisConfig> {
    match &config.source {
        SourceConfig::Kinesis(k) => Ok(k),
        SourceConfig::Sqs(_) => {
            bail!("this command needs a Kinesis source (source.kind = \"kinesis\")")
        }
    }
}
