//! `tidemark consumer`: the enhanced fan-out stream consumer of the
//! configured source. Workers register it themselves (`read_mode =
//! "fan_out"`) and never remove it; deregistering is this command's job.

use crate::config::Config;
use anyhow::{Result, bail};
use tidemark_consumer::KinesisConfig;
use tidemark_consumer::error::AwsError;

use super::render::outln;
use super::source::kinesis_source;

/// Arguments of `consumer`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
}

#[derive(Debug, Clone, Copy, clap::Subcommand)]
enum Action {
    /// Deregister the stream consumer (`source.consumer_name`, default the
    /// lease table's name). Running fan-out workers lose their
    /// subscriptions, and it stops the consumer-shard-hour charge.
    Deregister {
        /// Confirm: running fan-out workers stop receiving records.
        #[arg(long)]
        yes: bool,
    },
}

pub(crate) async fn run(config: &Config, args: &Args) -> Result<()> {
    let all = kinesis_source(config)?;
    // With `source.streams`, each stream has its consumer (of one name).
    let streams: Vec<KinesisConfig> = if all.is_multi_stream() {
        all.streams
            .iter()
            .map(|s| super::one_stream(all, Some(&s.stream)))
            .collect::<Result<_>>()?
    } else {
        vec![all.clone()]
    };
    for k in &streams {
        deregister_one(k, args).await?;
    }
    Ok(())
}

async fn deregister_one(k: &KinesisConfig, args: &Args) -> Result<()> {
    let Action::Deregister { yes } = args.action;
    if !yes {
        bail!(
            "deregistering stream consumer {} of {} ends every running worker's subscriptions; add --yes to confirm",
            k.consumer_name(),
            k.stream
        );
    }
    let sdk = super::sdk().await?;
    let kinesis = aws_sdk_kinesis::Client::new(&sdk);
    if deregister(&kinesis, k).await? {
        outln!(
            "stream consumer {} of {} deregistered",
            k.consumer_name(),
            k.stream
        )?;
    } else {
        outln!(
            "stream consumer {} of {} was not registered",
            k.consumer_name(),
            k.stream
        )?;
    }
    Ok(())
}

/// Deregisters the configured stream consumer (every subscription of it
/// ends); false when it was not registered.
pub(crate) async fn deregister(
    kinesis: &aws_sdk_kinesis::Client,
    config: &KinesisConfig,
) -> Result<bool> {
    let stream = tidemark_consumer::kinesis::stream_arn(kinesis, config).await?;
    match kinesis
        .deregister_stream_consumer()
        .stream_arn(&stream)
        .consumer_name(config.consumer_name())
        .send()
        .await
    {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(false)
        }
        Err(e) if tidemark_aws_errors::error_code(&e) == Some("ResourceInUseException") => {
            Err(super::Failed(format!(
                "stream consumer {} is not ACTIVE (being registered or deregistered); try again shortly",
                config.consumer_name()
            ))
            .into())
        }
        Err(e) => Err(AwsError::new("DeregisterStreamConsumer", &e).into()),
    }
}
