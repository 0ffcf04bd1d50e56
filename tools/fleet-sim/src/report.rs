//! The figures as a text table.

use comfy_table::Table;

use crate::run::Figures;

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "never".to_string(), |s| format!("{s:.0} s"))
}

/// How one row is rendered from a run's figures.
type Row = Box<dyn Fn(&Figures) -> String>;

/// One row per figure, one column per run.
pub fn table(runs: &[Figures]) -> String {
    let mut t = Table::new();
    let mut header = vec!["figure".to_string()];
    header.extend(
        runs.iter()
            .map(|f| format!("{} ({} shards, {} workers)", f.name, f.shards, f.workers)),
    );
    t.set_header(header);
    let rows: Vec<(&str, Row)> = vec![
        (
            "time until every shard is owned",
            Box::new(|f| secs(f.all_owned_s)),
        ),
        (
            "time until balanced (max-min <= 1)",
            Box::new(|f| secs(f.balanced_s)),
        ),
        (
            "lease moves per shard, max",
            Box::new(|f| f.max_moves.to_string()),
        ),
        (
            "lease moves per shard, mean",
            Box::new(|f| format!("{:.2}", f.mean_moves)),
        ),
        (
            "shards unowned > 1 failover time",
            Box::new(|f| f.unowned_past_failover.to_string()),
        ),
        (
            "lease-table RCU/s steady",
            Box::new(|f| format!("{:.1}", f.rcu_steady)),
        ),
        (
            "lease-table RCU/s peak",
            Box::new(|f| format!("{:.1}", f.rcu_peak)),
        ),
        (
            "lease-table WCU/s steady",
            Box::new(|f| format!("{:.1}", f.wcu_steady)),
        ),
        (
            "lease-table WCU/s peak",
            Box::new(|f| format!("{:.1}", f.wcu_peak)),
        ),
        (
            "RCU/s per 10 shards (target <= 1)",
            Box::new(|f| format!("{:.2}", f.rcu_per_10_shards)),
        ),
        (
            "WCU per shard per renewal interval (target <= 1)",
            Box::new(|f| format!("{:.2}", f.wcu_per_shard_renewal)),
        ),
        (
            "Scan pages/s steady",
            Box::new(|f| format!("{:.1}", f.scans_steady)),
        ),
        (
            "of which owner-index Query RCU/s steady",
            Box::new(|f| format!("{:.1}", f.index_rcu_steady)),
        ),
        (
            "of which owner-index WCU/s steady",
            Box::new(|f| format!("{:.1}", f.index_wcu_steady)),
        ),
        (
            "owner-index Queries/s steady",
            Box::new(|f| format!("{:.1}", f.queries_steady)),
        ),
        (
            "coordinator-table RCU/s / WCU/s steady (lock, heartbeats)",
            Box::new(|f| format!("{:.1} / {:.1}", f.coord_rcu_steady, f.coord_wcu_steady)),
        ),
        ("throttled calls", Box::new(|f| f.throttled.to_string())),
        (
            "duplicate reading, shard-seconds",
            Box::new(|f| f.dup_hold_shard_s.to_string()),
        ),
        (
            "duplicate hand-ons (A, B, A within failover)",
            Box::new(|f| f.dup_submits.to_string()),
        ),
        (
            "interleaved checkpoints (must be 0)",
            Box::new(|f| f.dup_checkpoints.to_string()),
        ),
        (
            "lease item size, bytes",
            Box::new(|f| f.item_bytes.to_string()),
        ),
    ];
    for (name, f) in rows {
        let mut row = vec![name.to_string()];
        row.extend(runs.iter().map(&f));
        t.add_row(row);
    }
    t.to_string()
}
