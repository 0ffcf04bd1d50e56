//! Command-line flags; every flag also reads an environment variable.

use std::collections::HashMap;
use std::net::SocketAddr;

use clap::Parser;

use crate::dynamo::DynamoLimits;
use crate::fault::FaultConfig;
use crate::kinesis::KinesisLimits;

/// tidemark-limits: a proxy in front of local AWS emulators that enforces
/// DynamoDB's and Kinesis's throughput limits.
#[derive(Debug, Clone, Parser)]
#[command(name = "tidemark-limits", version, about)]
pub struct Config {
    /// Address to listen on (keep it on 127.0.0.1).
    #[arg(long, env = "TIDEMARK_LIMITS_LISTEN", default_value = "127.0.0.1:4580")]
    pub listen: SocketAddr,

    /// Upstream DynamoDB endpoint (the emulator).
    #[arg(
        long,
        env = "TIDEMARK_LIMITS_UPSTREAM_DYNAMODB",
        default_value = "http://127.0.0.1:4566"
    )]
    pub dynamodb: String,

    /// Upstream Kinesis endpoint.
    #[arg(
        long,
        env = "TIDEMARK_LIMITS_UPSTREAM_KINESIS",
        default_value = "http://127.0.0.1:4568"
    )]
    pub kinesis: String,

    /// Upstream SQS endpoint.
    #[arg(
        long,
        env = "TIDEMARK_LIMITS_UPSTREAM_SQS",
        default_value = "http://127.0.0.1:4566"
    )]
    pub sqs: String,

    /// Record accepted DynamoDB writes instead of forwarding them.
    #[arg(long, env = "TIDEMARK_LIMITS_SINK")]
    pub sink: bool,

    /// WCU/s one DynamoDB partition serves.
    #[arg(long, env = "TIDEMARK_LIMITS_PARTITION_WCU", default_value_t = 1000.0)]
    pub partition_wcu: f64,

    /// Seconds of unused provisioned capacity a table banks as burst credit.
    #[arg(long, env = "TIDEMARK_LIMITS_BURST_SECS", default_value_t = 300.0)]
    pub burst_secs: f64,

    /// Seconds of capacity a table holds when the proxy first sees it.
    #[arg(
        long,
        env = "TIDEMARK_LIMITS_INITIAL_CREDIT_SECS",
        default_value_t = 1.0
    )]
    pub initial_credit_secs: f64,

    /// Write limit of on-demand tables, WCU/s.
    #[arg(long, env = "TIDEMARK_LIMITS_ON_DEMAND_WCU", default_value_t = 4000.0)]
    pub on_demand_wcu: f64,

    /// Partition count of a table, TABLE=N (repeat, or comma-separate in the env variable).
    #[arg(long = "partitions", env = "TIDEMARK_LIMITS_PARTITIONS", value_delimiter = ',', value_parser = parse_partition_override)]
    pub partitions: Vec<(String, u32)>,

    /// Split a DynamoDB partition that keeps throttling this many seconds
    /// (adaptive capacity's split for heat); 0: never.
    #[arg(long, env = "TIDEMARK_LIMITS_SPLIT_HOT_AFTER", default_value_t = 0.0)]
    pub split_hot_after: f64,

    /// Most partition splits per table.
    #[arg(long, env = "TIDEMARK_LIMITS_MAX_SPLITS", default_value_t = 8)]
    pub max_splits: u32,

    /// GetRecords calls per shard per second.
    #[arg(long, env = "TIDEMARK_LIMITS_KINESIS_READ_CALLS", default_value_t = 5)]
    pub kinesis_read_calls: usize,

    /// Bytes read per shard per second.
    #[arg(long, env = "TIDEMARK_LIMITS_KINESIS_READ_BYTES", default_value_t = 2 * 1024 * 1024)]
    pub kinesis_read_bytes: u64,

    /// Records written per shard per second.
    #[arg(
        long,
        env = "TIDEMARK_LIMITS_KINESIS_WRITE_RECORDS",
        default_value_t = 1000
    )]
    pub kinesis_write_records: u64,

    /// Bytes (data plus partition key) written per shard per second.
    #[arg(long, env = "TIDEMARK_LIMITS_KINESIS_WRITE_BYTES", default_value_t = 1024 * 1024)]
    pub kinesis_write_bytes: u64,

    /// Run the proxy's clock this far from the machine's (`10m`, `-90s`):
    /// requests signed more than 5 minutes off it are refused as DynamoDB
    /// refuses them, and every answer carries its `Date`.
    #[arg(long, env = "TIDEMARK_LIMITS_CLOCK_OFFSET", allow_hyphen_values = true, value_parser = crate::clock::parse_offset)]
    pub clock_offset: Option<crate::clock::Offset>,

    /// Fault injection (all off by default).
    #[command(flatten)]
    pub faults: FaultConfig,
}

fn parse_partition_override(s: &str) -> Result<(String, u32), String> {
    let (name, n) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}': expected TABLE=N, e.g. events=4"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': partition count must be a positive integer"))?;
    if n == 0 || name.trim().is_empty() {
        return Err(format!("'{s}': expected TABLE=N with N >= 1"));
    }
    Ok((name.trim().to_owned(), n))
}

impl Config {
    /// Config with defaults and the given upstreams, for tests and embedding.
    pub fn with_upstreams(dynamodb: &str, kinesis: &str, sqs: &str) -> Self {
        let mut c = Self::parse_from(["tidemark-limits"]);
        c.dynamodb = dynamodb.to_owned();
        c.kinesis = kinesis.to_owned();
        c.sqs = sqs.to_owned();
        c
    }

    /// Checks values clap cannot, naming the flag to fix.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("--partition-wcu", self.partition_wcu),
            ("--on-demand-wcu", self.on_demand_wcu),
            ("--kinesis-read-bytes", self.kinesis_read_bytes as f64),
            ("--kinesis-write-records", self.kinesis_write_records as f64),
            ("--kinesis-write-bytes", self.kinesis_write_bytes as f64),
        ];
        for (flag, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{flag} must be a positive number, got {v}"));
            }
        }
        if !(self.split_hot_after.is_finite() && self.split_hot_after >= 0.0) {
            return Err("--split-hot-after must be >= 0 seconds".into());
        }
        if !(self.burst_secs >= 0.0 && self.initial_credit_secs >= 0.0) {
            return Err("--burst-secs and --initial-credit-secs must be >= 0".into());
        }
        self.faults.validate()
    }

    /// The DynamoDB limits these flags describe.
    pub fn dynamo_limits(&self) -> DynamoLimits {
        DynamoLimits {
            partition_wcu: self.partition_wcu,
            burst_secs: self.burst_secs,
            initial_credit_secs: self.initial_credit_secs,
            on_demand_wcu: self.on_demand_wcu,
            partition_overrides: self.partitions.iter().cloned().collect::<HashMap<_, _>>(),
            split_hot_after: (self.split_hot_after > 0.0)
                .then(|| std::time::Duration::from_secs_f64(self.split_hot_after)),
            max_splits: self.max_splits,
        }
    }

    /// The Kinesis limits these flags describe.
    pub fn kinesis_limits(&self) -> KinesisLimits {
        KinesisLimits {
            read_calls_per_sec: self.kinesis_read_calls,
            read_bytes_per_sec: self.kinesis_read_bytes as f64,
            write_records_per_sec: self.kinesis_write_records as f64,
            write_bytes_per_sec: self.kinesis_write_bytes as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_partition_overrides_and_rejects_bad_ones() {
        let c = Config::parse_from(["x", "--partitions", "a=3", "--partitions", "b=1"]);
        assert_eq!(c.partitions, vec![("a".into(), 3), ("b".into(), 1)]);
        assert!(Config::try_parse_from(["x", "--partitions", "a"]).is_err());
        assert!(Config::try_parse_from(["x", "--partitions", "a=0"]).is_err());
    }

    #[test]
    fn validate_names_the_flag() {
        let mut c = Config::with_upstreams(
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
            "http://127.0.0.1:3",
        );
        assert!(c.validate().is_ok());
        c.partition_wcu = 0.0;
        assert!(c.validate().unwrap_err().contains("--partition-wcu"));
    }
}
