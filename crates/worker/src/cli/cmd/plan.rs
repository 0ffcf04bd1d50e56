//! `tidemark plan`: one recommendation per decision (key strategy, write
//! shards, period, billing), with reasons, trade-offs and the arithmetic;
//! a config's layout judged beside it.

use std::fmt::Write as _;

use anyhow::{Context, Result};
use tidemark_schema::route::{Router, RouterConfig};
use tidemark_schema::sizing::{
    BillingMode, CurrentLayout, SizingError, SizingInput, SizingPlan, item_bytes_of_sample,
    recommend, thousands,
};
use tidemark_schema::strategy::KeyStrategy;

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
    /// Peak events per second of the busiest single entity; default: the
    /// whole peak (the stream taken as one key).
    #[arg(long)]
    peak_key_events_per_sec: Option<f64>,
    /// Entities writing at once; default: many, each small beside the busiest.
    #[arg(long)]
    entities: Option<u64>,
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
    /// Retention in days; default: the config's `schema.retention`, else 30.
    #[arg(long)]
    retention_days: Option<u64>,
    /// Head-room of one partition key: at the peak a key runs at most
    /// 1/this of its 1,000 WCU.
    #[arg(long, default_value_t = 2.0)]
    safety_factor: f64,
    /// Partitions the table has (an existing table); default: those of the
    /// recommended capacity.
    #[arg(long)]
    table_partitions: Option<u32>,
    /// Capacity head-room: the table is provisioned at the peak times this,
    /// so its hottest partition may run that much over the mean.
    #[arg(long, default_value_t = 1.25)]
    max_partition_skew: f64,
    /// Most queries one read of one entity may take per table.
    #[arg(long, default_value_t = 32)]
    max_queries_per_read: u32,
    /// Tables the account may have in the region (DynamoDB's default
    /// quota; 10,000 at most on request).
    #[arg(long, default_value_t = 2500)]
    table_quota: u32,
    /// Former spelling of the global `--output json`.
    #[arg(long, hide = true)]
    json: bool,
}

/// The flag of a planner input field, for usage errors.
fn flag_of(field: &str) -> &'static str {
    match field {
        "avg_events_per_sec" => "--events-per-sec",
        "peak_events_per_sec" => "--peak-events-per-sec",
        "peak_key_events_per_sec" => "--peak-key-events-per-sec",
        "avg_item_bytes" => "--item-bytes",
        "retention" => "--retention-days",
        "safety_factor" => "--safety-factor",
        "max_partition_skew" => "--max-partition-skew",
        "table_partitions" => "--table-partitions",
        "max_queries_per_read" => "--max-queries-per-read",
        "table_quota" => "--table-quota",
        "entities" => "--entities",
        _ => "plan",
    }
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let routing = match &args.config.config {
        Some(path) => Some((path.display().to_string(), args.config.load_routing()?)),
        None => None,
    };
    let item_bytes = match (&args.item_bytes, &args.sample_event) {
        (Some(b), _) => *b,
        (None, Some(sample)) => {
            let schema = match &routing {
                Some((_, (schema, _))) => schema.clone(),
                None => RouterConfig::with_prefix("plan"),
            };
            let router = Router::new(schema).context("the config's router")?;
            item_bytes_of_sample(&router, sample.as_bytes()).context("sizing --sample-event")?
        }
        (None, None) => {
            return Err(super::Usage("give --item-bytes or --sample-event".into()).into());
        }
    };
    let mut input = SizingInput::new(
        args.events_per_sec,
        args.peak_events_per_sec.unwrap_or(args.events_per_sec),
        item_bytes,
    );
    input.peak_key_events_per_sec = args.peak_key_events_per_sec;
    input.entities = args.entities;
    input.safety_factor = args.safety_factor;
    input.table_partitions = args.table_partitions;
    input.max_partition_skew = args.max_partition_skew;
    input.max_queries_per_read = args.max_queries_per_read;
    input.table_quota = args.table_quota;
    if let Some((source, (schema, extras))) = &routing {
        input.retention = schema.retention;
        input.current = Some(CurrentLayout {
            source: source.clone(),
            key: schema.key.clone(),
            period: schema.period,
            billing: extras.billing,
            active_write_capacity: extras.tiers.active.write,
            adaptive_sharding: schema.adaptive_sharding.clone(),
        });
        if input.peak_key_events_per_sec.is_none() {
            input.peak_key_events_per_sec = schema.peak_key_events_per_sec;
        }
    }
    if let Some(days) = args.retention_days {
        input.retention = std::time::Duration::from_secs(days.saturating_mul(86_400));
    }
    let plan = recommend(&input).map_err(|e| match e {
        SizingError::Invalid { field, problem } => {
            anyhow::Error::from(super::Usage(format!("{}: {problem}", flag_of(field))))
        }
    })?;
    let output = super::output(if args.json {
        Output::Json
    } else {
        Output::Table
    });
    match output {
        Output::Json | Output::Jsonl => render::print_json(&plan, output),
        Output::Csv => {
            let rows = plan
                .decisions
                .iter()
                .map(|d| {
                    vec![
                        d.decision.to_string(),
                        d.value.clone(),
                        d.reason.clone(),
                        d.trade_off.clone(),
                    ]
                })
                .collect();
            render::print_rows(
                &["DECISION", "VALUE", "REASON", "TRADE_OFF"],
                rows,
                &[],
                output,
                &plan,
            )
        }
        Output::Table => render::print_text(&text(&plan, &input)),
    }
}

/// The plan for people: the decisions with their reasons and trade-offs,
/// the config lines, the config's differences, warnings, Kinesis, cost and
/// the arithmetic.
fn text(p: &SizingPlan, input: &SizingInput) -> String {
    let mut s = String::new();
    let retention = tidemark_schema::sizing::days(input.retention);
    let _ = writeln!(
        s,
        "Plan for {} events/s (peak {}), busiest entity {}/s{}, {} B items, {retention} retention",
        num(input.avg_events_per_sec),
        num(input.peak_events_per_sec),
        num(input
            .peak_key_events_per_sec
            .unwrap_or(input.peak_events_per_sec)),
        if p.load.hot_key_assumed {
            " (assumed: the whole peak)"
        } else {
            ""
        },
        thousands(input.avg_item_bytes),
    );
    for d in &p.decisions {
        let _ = writeln!(s, "\n{:<9} {}", d.decision, d.value);
        let _ = writeln!(s, "{:<9} why: {}", "", d.reason);
        let _ = writeln!(s, "{:<9} trade-off: {}", "", d.trade_off);
    }
    let r = &p.recommendation;
    let _ = writeln!(s, "\nIn the config:\n  [schema]");
    let _ = writeln!(s, "  period = \"{}\"", r.period.as_str());
    let _ = writeln!(s, "  key = {}", key_toml(&r.key));
    match r.billing {
        BillingMode::Provisioned => {
            let tier = format!("{{ read = 300, write = {} }}", r.active_write_capacity);
            let _ = writeln!(
                s,
                "  tiers = {{ prebuild = {tier}, active = {tier}, cooling = {tier} }}"
            );
            let _ = writeln!(s, "  billing = {{ mode = \"provisioned\" }}");
        }
        BillingMode::OnDemand => {
            let _ = writeln!(
                s,
                "  billing = {{ mode = \"on_demand\", warm_write_units = {} }}",
                r.active_write_capacity.max(p.load.peak_wcu)
            );
        }
    }
    if let Some(c) = &p.config {
        if c.differences.is_empty() {
            let _ = writeln!(s, "\n{} agrees with the plan.", c.source);
        } else {
            let _ = writeln!(s, "\n{} differs:", c.source);
            for d in &c.differences {
                let _ = writeln!(
                    s,
                    "  {}: {} (plan: {}): {}",
                    d.decision, d.config, d.recommended, d.consequence
                );
            }
        }
    }
    if !p.warnings.is_empty() {
        let _ = writeln!(s, "\nWarnings:");
        for w in &p.warnings {
            let _ = writeln!(s, "  - {w}");
        }
    }
    let k = &p.kinesis;
    let _ = writeln!(
        s,
        "\nKinesis shards: {} ({} for the records/s, {} for the bytes/s)",
        k.shards, k.shards_by_records, k.shards_by_bytes
    );
    let c = &p.cost;
    let _ = writeln!(
        s,
        "Monthly cost, writes and storage at list prices: provisioned ${:.2}, on demand ${:.2} ({:.1} GB stored)",
        c.provisioned_usd, c.on_demand_usd, c.stored_gb
    );
    let _ = writeln!(s, "\nHow:");
    for line in &p.arithmetic {
        let _ = writeln!(s, "  {line}");
    }
    s
}

/// A rate as given, with separators for whole numbers.
fn num(x: f64) -> String {
    if x.fract() == 0.0 && (0.0..1e15).contains(&x) {
        thousands(x as u64)
    } else {
        x.to_string()
    }
}

/// `schema.key` as an inline TOML table.
fn key_toml(k: &KeyStrategy) -> String {
    match k {
        KeyStrategy::Entity => "{ strategy = \"entity\" }".into(),
        KeyStrategy::RandomSuffix { shards } => {
            format!("{{ strategy = \"random_suffix\", shards = {shards} }}")
        }
        KeyStrategy::CalculatedSuffix { shards } => {
            format!("{{ strategy = \"calculated_suffix\", shards = {shards} }}")
        }
        KeyStrategy::TimeBucket { shards, bucket } => format!(
            "{{ strategy = \"time_bucket\", shards = {shards}, bucket = \"{}\" }}",
            serde_json::to_value(bucket)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        ),
    }
}
