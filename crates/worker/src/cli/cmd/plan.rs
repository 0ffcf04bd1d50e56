//! `tidemark plan`: one recommendation per decision (key strategy, write
//! shards, period, billing), with reasons, trade-offs and the arithmetic;
//! a config's layout judged beside it.

use std::fmt::Write as _;

use anyhow::{Context, Result};
use tidemark_schema::route::{Router, RouterConfig};
use tidemark_schema::sizing::{
    BillingMode, CurrentLayout, Prices, SetupCost, SizingError, SizingInput, SizingPlan,
    WriteSetup, item_bytes_of_sample, recommend, thousands,
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
    /// Hours a day the stream runs at its peak (the rest at the rate that
    /// keeps the average); decides between auto scaling and on demand.
    /// Default: 1 when the peak is above the average.
    #[arg(long)]
    peak_hours_per_day: Option<f64>,
    /// Items read a day (queries of past periods, eventually consistent).
    #[arg(long, default_value_t = 0.0)]
    reads_per_day: f64,
    /// Minutes from the load rising until auto scaling's new capacity is in
    /// force, per step.
    #[arg(long, default_value_t = 5)]
    scale_up_minutes: u32,
    /// Auto scaling's target utilisation.
    #[arg(long, default_value_t = 0.7)]
    autoscale_target: f64,
    /// Add continuous backups (PITR) of every table to every setup's cost.
    #[arg(long)]
    pitr: bool,
    /// Add an export to S3 of every table at expiry to every setup's cost.
    #[arg(long)]
    export_at_expiry: bool,
    /// Table prefixes (pipelines) sharing the account's table quota.
    #[arg(long, default_value_t = 1)]
    prefixes: u32,
    #[command(flatten)]
    prices: PriceArgs,
    /// Former spelling of the global `--output json`.
    #[arg(long, hide = true)]
    json: bool,
}

/// Prices to use instead of the us-east-1 list prices (`plan`, `tables
/// list`).
#[derive(Debug, clap::Args)]
pub(crate) struct PriceArgs {
    /// A price file (TOML, `name = USD` per line; see `docs/cli.md`): prices
    /// for another region or a later price list. Unset prices keep the
    /// us-east-1 list prices.
    #[arg(long, value_name = "FILE", global = true)]
    prices: Option<std::path::PathBuf>,
    /// One price, `NAME=USD` (the price file's names); after --prices.
    #[arg(long = "price", value_name = "NAME=USD", global = true)]
    price: Vec<String>,
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
        "peak_hours_per_day" => "--peak-hours-per-day",
        "reads_per_day" => "--reads-per-day",
        "autoscale_target" => "--autoscale-target",
        "scale_up_minutes" => "--scale-up-minutes",
        "prefixes" => "--prefixes",
        "prices" => "--prices/--price",
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
    input.peak_hours_per_day = args.peak_hours_per_day;
    input.reads_per_day = args.reads_per_day;
    input.scale_up_minutes = args.scale_up_minutes;
    input.autoscale_target = args.autoscale_target;
    input.pitr = args.pitr;
    input.export_at_expiry = args.export_at_expiry;
    input.prefixes = args.prefixes;
    input.prices = args.prices.prices()?;
    if let Some((source, (schema, extras))) = &routing {
        input.retention = schema.retention;
        // Provisioned setups price the config's tiers. Hook: a tier's auto
        // scaling, on-demand ceiling and table class are priced from the
        // plan's own choice, not read from the config.
        input.tiers = extras.tiers;
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

impl PriceArgs {
    /// The prices: the list prices, then the price file, then each `--price`.
    pub(crate) fn prices(&self) -> Result<Prices> {
        let args = self;
        let mut prices = match &args.prices {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the price file {}", path.display()))?;
                toml::from_str::<Prices>(&text).map_err(|e| {
                    super::Usage(format!(
                        "--prices {}: {}",
                        path.display(),
                        e.message().trim_end()
                    ))
                })?
            }
            None => Prices::default(),
        };
        for p in &args.price {
            let parsed = p
                .split_once('=')
                .and_then(|(k, v)| v.trim().parse::<f64>().ok().map(|v| (k.trim(), v)));
            let Some((name, value)) = parsed else {
                return Err(super::Usage(format!("--price {p}: expected NAME=USD")).into());
            };
            if !prices.set(name, value) {
                let names: Vec<&str> = prices.named().iter().map(|(n, _)| *n).collect();
                return Err(super::Usage(format!(
                    "--price {name}: no such price (one of {})",
                    names.join(", ")
                ))
                .into());
            }
        }
        Ok(prices)
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
            if let Some(x) = chosen_setup(p)
                && x.setup == WriteSetup::ProvisionedAutoscaled
            {
                let _ = writeln!(
                    s,
                    "  # the active tier auto scaled between {} and {} WCU at {:.0}% (tier auto scaling); the tiers above are its maximum",
                    x.min_write_capacity.unwrap_or(1),
                    x.max_write_capacity.unwrap_or(1),
                    100.0 * input.autoscale_target
                );
            }
        }
        BillingMode::OnDemand => {
            let _ = writeln!(
                s,
                "  billing = {{ mode = \"on_demand\", warm_write_units = {} }}",
                r.active_write_capacity.max(p.load.peak_wcu)
            );
            if let Some(n) = chosen_setup(p).and_then(|x| x.max_write_units) {
                let _ = writeln!(
                    s,
                    "  # ceiling on the tables' writes: {n} write units/s (an on-demand tier's max_write_units)"
                );
            }
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
    cost_text(&mut s, p, input);
    let _ = writeln!(s, "\nHow:");
    for line in &p.arithmetic {
        let _ = writeln!(s, "  {line}");
    }
    s
}

/// The setup the plan chose, as priced.
fn chosen_setup(p: &SizingPlan) -> Option<&SetupCost> {
    let c = &p.pricing.choice;
    p.pricing
        .setups
        .iter()
        .find(|x| x.setup == c.setup && x.history_class == c.history_class)
}

/// The setups priced, the cheapest that meets the load and why, the
/// extras, the prices used and the table count.
fn cost_text(s: &mut String, p: &SizingPlan, input: &SizingInput) {
    let c = &p.pricing;
    let _ = writeln!(
        s,
        "\nMonthly cost ({:.1} GB stored, {} items read a day; USD):",
        c.stored_gb,
        num(c.reads_per_day)
    );
    let rows = c
        .setups
        .iter()
        .map(|x| {
            vec![
                x.setup.as_str().to_string(),
                x.history_class.as_str().to_string(),
                format!("{:.2}", x.writes_usd),
                format!("{:.2}", x.reads_and_history_usd),
                format!("{:.2}", x.storage_usd),
                format!("{:.2}", x.total_usd),
                if x.meets_load { "yes" } else { "no" }.to_string(),
                x.note.clone(),
            ]
        })
        .collect();
    let table = render::table(
        Some(&[
            "SETUP",
            "HISTORY",
            "WRITES",
            "READS+TABLES",
            "STORAGE",
            "TOTAL",
            "MEETS",
            "NOTE",
        ]),
        rows,
        &[2, 3, 4, 5],
    );
    for line in table.lines() {
        let _ = writeln!(s, "  {line}");
    }
    let _ = writeln!(
        s,
        "  PITR ${:.2}/month{}; export at expiry ${:.2}/month{} (S3 storage not included)",
        c.pitr_usd,
        if c.pitr {
            " (in the totals)"
        } else {
            " (add with --pitr)"
        },
        c.export_usd,
        if c.export_at_expiry {
            " (in the totals)"
        } else {
            " (add with --export-at-expiry)"
        }
    );
    let ch = &c.choice;
    let _ = writeln!(
        s,
        "\nCheapest that meets the load: {} with {} history, ${:.2}/month",
        ch.setup.as_str(),
        ch.history_class.as_str(),
        ch.total_usd
    );
    let _ = writeln!(s, "  why: {}", ch.reason);
    if ch.setup == WriteSetup::ProvisionedAutoscaled
        && let Some(x) = chosen_setup(p)
    {
        let _ = writeln!(
            s,
            "  auto scaling for the active tier: min {} WCU, max {} WCU, target {:.2}",
            thousands(x.min_write_capacity.unwrap_or(1)),
            thousands(x.max_write_capacity.unwrap_or(1)),
            input.autoscale_target
        );
    }
    let t = &c.tables;
    let _ = writeln!(
        s,
        "Tables: {} per prefix x {} = {} of the account's {} (DynamoDB allows 10,000 at most)",
        thousands(t.per_prefix),
        t.prefixes,
        thousands(t.total),
        thousands(u64::from(t.quota))
    );
    let prices: Vec<String> = c
        .prices
        .named()
        .iter()
        .map(|(n, v)| format!("{n} = {v}"))
        .collect();
    let _ = writeln!(
        s,
        "Prices (USD; us-east-1 list prices since 2024-11-01 unless overridden): {}",
        prices.join(", ")
    );
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
