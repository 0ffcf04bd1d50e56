//! `fleet-sim`: runs scenario files and prints their figures.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use tidemark_consumer::config::LeaseTuning;
use tidemark_fleet_sim::{Scenario, report, run_blocking};

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
    #[arg(long, conflicts_with = "compare")]
    before: bool,
    /// Run before and after tuning, side by side.
    #[arg(long)]
    compare: bool,
    /// Also write the figures as JSON lines.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut runs = Vec::new();
    for path in &args.scenarios {
        let sc = Scenario::load(path)?.scaled_down(args.scale_down);
        let tunings = if args.compare {
            vec![LeaseTuning::before(), LeaseTuning::tuned()]
        } else if args.before {
            vec![LeaseTuning::before()]
        } else {
            vec![LeaseTuning::tuned()]
        };
        for tuning in tunings {
            let started = std::time::Instant::now();
            let f = run_blocking(sc.clone(), tuning).context("runtime")?;
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
