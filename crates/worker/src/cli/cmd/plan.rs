//! `tidemark plan`: table, write-shard, Kinesis-shard and cost sizing.

use anyhow::{Context, Result, bail};
use tidemark_schema::route::{Router, RouterConfig};
use tidemark_schema::sizing::{Prices, SizingInput, item_bytes_of_sample, recommend};

use super::render::{self, Output};

/// Arguments of `plan`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Average events per second (whole stream).
    #[arg(long)]
    events_per_sec: f64,
    /// Peak events per second (whole stream); default: the average.
    #[arg(long)]
    peak_events_per_sec: Option<f64>,
    /// Peak events per second of the busiest single entity; default: the whole peak.
    #[arg(long)]
    peak_key_events_per_sec: Option<f64>,
    /// Average item size in DynamoDB, bytes.
    #[arg(
        long,
        conflicts_with = "sample_event",
        required_unless_present = "sample_event"
    )]
    item_bytes: Option<u64>,
    /// A sample event (JSON) to size instead of --item-bytes, with the
    /// event fields and key attributes of --config (default ones without).
    #[arg(long)]
    sample_event: Option<String>,
    #[command(flatten)]
    config: super::ConfigArg,
    /// Retention in days.
    #[arg(long, default_value_t = 30)]
    retention_days: u64,
    /// Head-room multiplier for the recommended write shards.
    #[arg(long, default_value_t = 2.0)]
    safety_factor: f64,
    /// Partitions the table will have; default: one per 1,000 WCU of the peak.
    #[arg(long)]
    table_partitions: Option<u32>,
    /// Highest expected load of the hottest partition over the mean.
    #[arg(long, default_value_t = 1.25)]
    max_partition_skew: f64,
    /// Former spelling of the global `--output json`.
    #[arg(long, hide = true)]
    json: bool,
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let item_bytes = match (&args.item_bytes, &args.sample_event) {
        (Some(b), _) => *b,
        (None, Some(sample)) => {
            let schema = match &args.config.config {
                Some(_) => args.config.load_router()?,
                None => RouterConfig::with_prefix("plan"),
            };
            let router = Router::new(schema).context("the config's router")?;
            item_bytes_of_sample(&router, sample.as_bytes()).context("sizing --sample-event")?
        }
        (None, None) => bail!("give --item-bytes or --sample-event"),
    };
    let input = SizingInput {
        avg_events_per_sec: args.events_per_sec,
        peak_events_per_sec: args.peak_events_per_sec.unwrap_or(args.events_per_sec),
        peak_key_events_per_sec: args.peak_key_events_per_sec,
        avg_item_bytes: item_bytes,
        avg_record_bytes: None,
        retention: std::time::Duration::from_secs(args.retention_days * 86_400),
        safety_factor: args.safety_factor,
        prices: Prices::default(),
        table_partitions: args.table_partitions,
        max_partition_skew: args.max_partition_skew,
    };
    let p = recommend(&input)?;
    let output = super::output(if args.json {
        Output::Json
    } else {
        Output::Table
    });
    if matches!(output, Output::Json | Output::Jsonl) {
        return render::print_json(&p, output);
    }
    let period = serde_json::to_value(p.recommended_period)?;
    let pct = |f: f64| format!("{:.0}%", 100.0 * f);
    let rows: [(&str, String); 12] = [
        ("WCU per item", p.wcu_per_item.to_string()),
        ("peak WCU", p.peak_wcu.to_string()),
        ("minimum write shards", p.min_write_shards.to_string()),
        (
            "recommended write shards",
            p.recommended_write_shards.to_string(),
        ),
        ("table partitions", p.table_partitions.to_string()),
        (
            "usable capacity with recommended shards",
            pct(p.recommended_usable_fraction),
        ),
        (
            "write shards for even partitions",
            match (p.even_write_shards, p.even_usable_fraction) {
                (Some(n), Some(f)) => format!("{n} ({} usable)", pct(f)),
                _ => format!("none up to {}", tidemark_schema::sizing::MAX_EVEN_SHARDS),
            },
        ),
        (
            "hours to fill a 10 GB partition",
            format!("{:.1}", p.partition_fill_hours),
        ),
        (
            "recommended period",
            period.as_str().unwrap_or_default().to_string(),
        ),
        ("Kinesis shards", p.kinesis_shards.to_string()),
        (
            "monthly cost, on-demand (USD)",
            format!("{:.2}", p.monthly_cost_on_demand_usd),
        ),
        (
            "monthly cost, provisioned (USD)",
            format!("{:.2}", p.monthly_cost_provisioned_usd),
        ),
    ];
    if output == Output::Csv {
        let rows = rows
            .iter()
            .map(|(k, v)| vec![(*k).to_string(), v.clone()])
            .collect();
        return render::print_rows(&["QUANTITY", "VALUE"], rows, &[], output, &p);
    }
    println!("{}", render::key_values(&rows));
    println!("\nHow:");
    for line in &p.arithmetic {
        println!("  {line}");
    }
    Ok(())
}
