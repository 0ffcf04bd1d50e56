//! `fleet-sim`: runs scenario files and prints their figures.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use tidemark_fleet_sim::{Protocol, Scenario, report, run_blocking};

/// Simulates a Tidemark fleet's lease coordination on simulated time.
#[derive(Debug, Parser)]
struct Args {
    /// Scenario files (tools/fleet-sim/scenarios/*.toml).
    #[arg(long = "scenario", required = true)]
    scenarios: Vec<PathBuf>,
    /// Divide shards, workers and table limits by this (CI size: 10).
    #[arg(long, default_value_t = 1)]
    scale_down: usize,
    /// Also write leases per worker per second as CSV (second,worker,leases).
    #[arg(long)]
    series: Option<PathBuf>,
    /// Run the lease code as it was before tuning instead.
    #[arg(long, conflicts_with_all = ["compare", "protocol"])]
    before: bool,
    /// Run before and after tuning (listing and leader), side by side.
    #[arg(long, conflicts_with = "protocol")]
    compare: bool,
    /// Run these protocols (default: listing), side by side.
    #[arg(long, value_enum)]
    protocol: Vec<Protocol>,
    /// Also write the figures as JSON lines.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut runs = Vec::new();
    for path in &args.scenarios {
        let sc = Scenario::load(path)?.scaled_down(args.scale_down);
        let protocols = if args.compare {
            vec![Protocol::Before, Protocol::Listing, Protocol::Leader]
        } else if args.before {
            vec![Protocol::Before]
        } else if args.protocol.is_empty() {
            vec![Protocol::Listing]
        } else {
            args.protocol.clone()
        };
        for protocol in protocols {
            let started = std::time::Instant::now();
            let f = run_blocking(sc.clone(), protocol).context("runtime")?;
            eprintln!(
                "{}: simulated in {:.1} s",
                f.name,
                started.elapsed().as_secs_f64()
            );
            runs.push(f);
        }
    }
    println!("{}", report::table(&runs));
    if let Some(p) = &args.series {
        let mut out = std::io::BufWriter::new(std::fs::File::create(p)?);
        writeln!(out, "scenario,second,worker,leases")?;
        for f in &runs {
            for (s, w, n) in &f.series {
                writeln!(out, "{},{s},{w},{n}", f.name)?;
            }
        }
    }
    if let Some(p) = &args.json {
        let mut out = std::fs::File::create(p)?;
        for f in &runs {
            writeln!(out, "{}", serde_json::to_string(f)?)?;
        }
    }
    Ok(())
}
