//! `tidemark status`: per shard owner, checkpoint and lag; per table period,
//! state and capacity.

use anyhow::Result;
use chrono::Utc;
use tidemark_consumer::lease::{Checkpoint, LeaseTable};
use tidemark_worker::config::{Config, SourceConfig};
use tidemark_worker::worker::table_manager;

use super::render::{self, ShardRow};
use super::stream_name;

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(config: &Config, args: &Args) -> Result<()> {
    let sdk = super::sdk().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let mut shards = Vec::new();
    if let SourceConfig::Kinesis(k) = &config.source {
        let kinesis = aws_sdk_kinesis::Client::new(&sdk);
        let stream = stream_name(&k.stream);
        let leases = if table_exists(&dynamodb, &k.lease_table).await? {
            LeaseTable::new(dynamodb.clone(), k.lease_table.clone())
                .list()
                .await?
        } else {
            // No worker has run yet: no lease table, no shard to report.
            eprintln!(
                "lease table {} does not exist yet (no worker has run)",
                k.lease_table
            );
            Vec::new()
        };
        for l in leases {
            let (checkpoint, lag) = match &l.checkpoint {
                Checkpoint::At(p) => (
                    format!("{}.{}", p.sequence, p.sub_sequence),
                    lag_after(&kinesis, &stream, &l.key, p.sequence.as_str()).await,
                ),
                other => (format!("{other:?}").to_uppercase(), None),
            };
            shards.push(ShardRow {
                shard: l.key,
                owner: l.owner,
                checkpoint,
                parents: l.parents,
                millis_behind_latest: lag,
            });
        }
    }
    let tables = table_manager(config, dynamodb).list(Utc::now()).await?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "shards": shards, "tables": tables })
        );
        return Ok(());
    }
    if !shards.is_empty() {
        println!("{}", render::status_shards(&shards));
        println!();
    }
    println!("{}", render::status_tables(&tables)?);
    Ok(())
}

/// Whether `table` exists: the SDK's typed not-found error means no.
async fn table_exists(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Result<bool> {
    match dynamodb.describe_table().table_name(table).send().await {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(anyhow::Error::from(e).context(format!("describing table {table}"))),
    }
}

/// MillisBehindLatest just after `sequence` (one GetRecords of one record).
async fn lag_after(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    shard: &str,
    sequence: &str,
) -> Option<i64> {
    let it = kinesis
        .get_shard_iterator()
        .stream_name(stream)
        .shard_id(shard)
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::AfterSequenceNumber)
        .starting_sequence_number(sequence)
        .send()
        .await
        .ok()?
        .shard_iterator?;
    kinesis
        .get_records()
        .shard_iterator(it)
        .limit(1)
        .send()
        .await
        .ok()?
        .millis_behind_latest
}
