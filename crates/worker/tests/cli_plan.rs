//! `tidemark plan` through the binary: one recommendation per decision
//! (strategy, shards, period, billing), whose lines agree, with the hot
//! key's problem named, the period sized from the table's partitions, the
//! table count checked against the account quota, and a config compared
//! with the recommendation.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

fn tidemark(args: &[&str]) -> Output {
    Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOSTNAME", "test-host")
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The case a newcomer tried: 5,000 events/s average, 6,000 peak, 180-byte
/// items, one key at 2,000/s.
const WHY: [&str; 9] = [
    "plan",
    "--events-per-sec",
    "5000",
    "--peak-events-per-sec",
    "6000",
    "--item-bytes",
    "180",
    "--peak-key-events-per-sec",
    "2000",
];

fn plan_json(extra: &[&str]) -> Value {
    let mut args = WHY.to_vec();
    args.extend(extra);
    args.extend(["-o", "json"]);
    let o = tidemark(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    serde_json::from_str(&text(&o.stdout)).unwrap()
}

/// Every whole number in `s` (thousands separators allowed).
fn numbers(s: &str) -> Vec<u64> {
    s.split(|c: char| !(c.is_ascii_digit() || c == ','))
        .filter_map(|n| n.replace(',', "").parse().ok())
        .collect()
}

#[test]
fn the_why_case_gets_one_shard_count_one_period_and_one_strategy_that_agree() {
    let p = plan_json(&[]);
    let rec = &p["recommendation"];
    // The busiest entity needs 2,000 WCU: only a suffix strategy spreads
    // one entity over several partition keys.
    let strategy = rec["key"]["strategy"].as_str().unwrap();
    assert!(
        strategy == "calculated_suffix" || strategy == "random_suffix",
        "{p:#}"
    );
    let shards = rec["key"]["shards"].as_u64().unwrap();
    assert!(shards >= 4, "{p:#}");
    // One decision each, in this order, each with its reason and trade-off.
    let decisions: Vec<&str> = p["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        decisions,
        ["strategy", "shards", "period", "billing"],
        "{p:#}"
    );
    for d in p["decisions"].as_array().unwrap() {
        assert!(!d["reason"].as_str().unwrap().is_empty(), "{d}");
        assert!(!d["trade_off"].as_str().unwrap().is_empty(), "{d}");
    }
    // The shard decision says what a read costs with that count.
    let e = &p["evaluation"];
    assert_eq!(e["queries_per_read"].as_u64(), Some(shards), "{p:#}");
    let shard_decision = &p["decisions"][1];
    assert_eq!(shard_decision["value"].as_str(), Some(&*shards.to_string()));
    assert!(
        shard_decision["trade_off"]
            .as_str()
            .unwrap()
            .contains(&format!("{shards} queries")),
        "{shard_decision}"
    );
    // The hot key's problem is named: one partition key takes 1,000 WCU,
    // and the strategies that keep an entity on one partition cannot.
    let all = p.to_string();
    for word in ["time_bucket", "entity", "one partition"] {
        assert!(all.contains(word), "{word} not in {p:#}");
    }
    // The recommended layout keeps the expected hottest partition under
    // 1,000 WCU on the partitions the recommended capacity makes.
    let partitions = rec["table_partitions"].as_u64().unwrap();
    let capacity = rec["active_write_capacity"].as_u64().unwrap();
    assert!(
        capacity >= 6000 && partitions == capacity.div_ceil(1000),
        "{p:#}"
    );
    let hottest = e["hottest_partition_wcu"].as_f64().unwrap();
    assert!(hottest <= 1000.0, "{p:#}");
    let usable = e["usable_fraction"].as_f64().unwrap();
    let mean = 6000.0 / partitions as f64;
    assert!((usable - mean / hottest).abs() < 0.01, "{p:#}");
    // The period is sized from the table's partitions (the hottest one's
    // share of the data), not as if the table were one partition.
    let fill = e["partition_fill_hours"].as_f64().unwrap();
    let one_partition = 1e10 / (5000.0 * 180.0) / 3600.0;
    assert!(fill > 2.0 * one_partition, "{fill} h: {p:#}");
    let hours = match rec["period"].as_str().unwrap() {
        "hour" => 1,
        "six_hours" => 6,
        "twelve_hours" => 12,
        "day" => 24,
        other => panic!("{other}"),
    };
    assert!(f64::from(hours) <= fill, "{p:#}");
    assert_ne!(rec["period"], "hour", "{p:#}");
    // The table count over the retention is checked against the quota.
    let alive = e["tables_alive"].as_u64().unwrap();
    assert_eq!(alive, 30 * 24 / hours as u64 + 2, "{p:#}");
    assert_eq!(p["table_quota"].as_u64(), Some(2500), "{p:#}");
}

#[test]
fn the_why_case_text_names_one_shard_count_and_its_read_cost() {
    let o = tidemark(&WHY);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let p = plan_json(&[]);
    let shards = p["recommendation"]["key"]["shards"].as_u64().unwrap();
    // Every line that counts write shards counts the recommended ones.
    for line in out.lines() {
        let l = line.to_ascii_lowercase();
        if l.contains("kinesis") || !l.contains("shard") {
            continue;
        }
        let counted: Vec<u64> = numbers(&l)
            .into_iter()
            .filter(|n| {
                l.contains(&format!("{n} shard")) || l.contains(&format!("{n} write shard"))
            })
            .collect();
        assert!(
            counted.iter().all(|n| *n == shards),
            "a line counts {counted:?} shards, the plan {shards}: {line}\n{out}"
        );
    }
    assert!(out.contains(&format!("{shards} queries")), "{out}");
    assert!(out.contains("2,500"), "table quota: {out}");
}

/// With `--config` the plan uses the config's retention (unless the flag
/// says otherwise) and reports where the config differs.
#[test]
fn a_config_is_compared_with_the_recommendation() {
    let dir = std::env::temp_dir().join(format!("tidemark-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.toml");
    std::fs::write(
        &file,
        "[schema]\ntable_prefix = \"x\"\nperiod = \"day\"\nretention = \"7d\"\n\
         key = { strategy = \"time_bucket\", shards = 10, bucket = \"hour\" }\n\
         tiers = { active = { read = 300, write = 1000 } }\n",
    )
    .unwrap();
    let p = plan_json(&["--config", file.to_str().unwrap()]);
    let period_hours = match p["recommendation"]["period"].as_str().unwrap() {
        "six_hours" => 6,
        "twelve_hours" => 12,
        "day" => 24,
        other => panic!("{other}"),
    };
    assert_eq!(
        p["evaluation"]["tables_alive"].as_u64(),
        Some(7 * 24 / period_hours + 2),
        "the config's 7d retention: {p:#}"
    );
    let c = &p["config"];
    assert_eq!(c["key"]["strategy"], "time_bucket", "{p:#}");
    let differences: Vec<&str> = c["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["decision"].as_str().unwrap())
        .collect();
    for d in ["strategy", "shards", "capacity"] {
        assert!(
            differences.contains(&d),
            "{d} not in {differences:?}: {p:#}"
        );
    }
    // The config's layout is judged by the same arithmetic: its busiest
    // key takes more than one partition key can.
    assert!(
        c["evaluation"]["hottest_key_wcu"].as_f64().unwrap() > 1000.0,
        "{p:#}"
    );
    let with_flag = plan_json(&["--config", file.to_str().unwrap(), "--retention-days", "30"]);
    assert!(
        with_flag["evaluation"]["tables_alive"].as_u64() > p["evaluation"]["tables_alive"].as_u64()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Input the planner cannot use is a usage error (exit 2), naming the flag.
#[test]
fn bad_plan_input_is_a_usage_error() {
    for (args, flag) in [
        (
            &[
                "--events-per-sec",
                "100",
                "--peak-events-per-sec",
                "50",
                "--item-bytes",
                "100",
            ][..],
            "--peak-events-per-sec",
        ),
        (
            &["--events-per-sec", "0", "--item-bytes", "100"],
            "--events-per-sec",
        ),
        (
            &["--events-per-sec", "100", "--item-bytes", "500000"],
            "--item-bytes",
        ),
    ] {
        let mut all = vec!["plan"];
        all.extend(args);
        let o = tidemark(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(flag),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

/// `plan -o json` for `args` (no preset load).
fn plan_of(args: &[&str]) -> Value {
    let mut all = vec!["plan"];
    all.extend(args);
    all.extend(["-o", "json"]);
    let o = tidemark(&all);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
    serde_json::from_str(&text(&o.stdout)).unwrap()
}

/// The setup the plan chose, as `(setup, history_class)`.
fn chosen(p: &Value) -> (String, String) {
    let c = &p["pricing"]["choice"];
    (
        c["setup"].as_str().unwrap_or_default().to_string(),
        c["history_class"].as_str().unwrap_or_default().to_string(),
    )
}

/// Every setup is priced, the choice is the cheapest that meets the load,
/// and its total is what the setup's own line says.
fn check_choice(p: &Value) {
    let setups = p["pricing"]["setups"].as_array().unwrap();
    let kinds: std::collections::BTreeSet<&str> = setups
        .iter()
        .map(|s| s["setup"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["on_demand", "provisioned_autoscaled", "provisioned_fixed"],
        "{p:#}"
    );
    let (setup, class) = chosen(p);
    let total = p["pricing"]["choice"]["total_usd"].as_f64().unwrap();
    let line = setups
        .iter()
        .find(|s| s["setup"] == *setup && s["history_class"] == *class)
        .unwrap();
    assert_eq!(line["total_usd"].as_f64(), Some(total), "{p:#}");
    assert_eq!(line["meets_load"], true, "{p:#}");
    for s in setups.iter().filter(|s| s["meets_load"] == true) {
        assert!(s["total_usd"].as_f64().unwrap() >= total - 1e-9, "{p:#}");
    }
}

/// The seeds' 600 events/s of 180 bytes, steady all day: capacity held for
/// it is busy, so provisioned at a fixed capacity is cheapest, and the plan
/// says so with the break-even utilisation. (Fails before the planner
/// priced setups: no `pricing` in the plan.)
#[test]
fn a_steady_load_is_cheapest_provisioned() {
    let p = plan_of(&["--events-per-sec", "600", "--item-bytes", "180"]);
    check_choice(&p);
    assert_eq!(chosen(&p).0, "provisioned_fixed", "{p:#}");
    assert_eq!(p["recommendation"]["billing"], "provisioned", "{p:#}");
    let reason = p["pricing"]["choice"]["reason"].as_str().unwrap();
    assert!(reason.contains("break-even"), "{reason}");
    let billing = p["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["decision"] == "billing")
        .unwrap();
    assert_eq!(billing["reason"].as_str(), Some(reason), "{p:#}");
    // Prices used are part of the answer.
    assert_eq!(
        p["pricing"]["prices"]["on_demand_write_per_million"].as_f64(),
        Some(0.625)
    );
}

/// The same average in a 15-minute daily burst to 5,000/s: fixed capacity
/// sits idle most of the day, auto scaling cannot reach the burst before
/// it ends, so on demand wins, and the reason names both. (Fails before
/// the planner took a peak duration: `--peak-hours-per-day` unknown.)
#[test]
fn a_spiky_load_is_cheapest_on_demand() {
    let p = plan_of(&[
        "--events-per-sec",
        "100",
        "--peak-events-per-sec",
        "5000",
        "--peak-hours-per-day",
        "0.25",
        "--item-bytes",
        "180",
    ]);
    check_choice(&p);
    assert_eq!(chosen(&p).0, "on_demand", "{p:#}");
    assert_eq!(p["recommendation"]["billing"], "on_demand", "{p:#}");
    let reason = p["pricing"]["choice"]["reason"].as_str().unwrap();
    assert!(reason.contains("idle"), "{reason}");
    assert!(reason.contains("auto scaling"), "{reason}");
    let setups = p["pricing"]["setups"].as_array().unwrap();
    let auto = setups
        .iter()
        .find(|s| s["setup"] == "provisioned_autoscaled")
        .unwrap();
    assert_eq!(auto["meets_load"], false, "{auto:#}");
    // The on-demand ceiling covers the peak.
    let od = setups.iter().find(|s| s["setup"] == "on_demand").unwrap();
    assert!(od["max_write_units"].as_u64().unwrap() >= 5000, "{od:#}");
    // The text names the one recommendation and its figures.
    let o = tidemark(&[
        "plan",
        "--events-per-sec",
        "100",
        "--peak-events-per-sec",
        "5000",
        "--peak-hours-per-day",
        "0.25",
        "--item-bytes",
        "180",
    ]);
    let out = text(&o.stdout);
    assert_eq!(
        out.matches("Cheapest that meets the load:").count(),
        1,
        "{out}"
    );
    assert!(out.contains("on_demand"), "{out}");
}

/// Prices come from a file and flags (flags last), and they move the
/// choice; an unknown price name is a usage error.
#[test]
fn prices_from_a_file_and_flags_move_the_choice() {
    let d = std::env::temp_dir().join(format!("tidemark-plan-prices-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join("prices.toml");
    // On-demand writes at a tenth of the list price: the steady load too
    // is cheaper on demand.
    std::fs::write(&f, "on_demand_write_per_million = 0.0625\n").unwrap();
    let file = f.to_str().unwrap();
    let p = plan_of(&[
        "--events-per-sec",
        "600",
        "--item-bytes",
        "180",
        "--prices",
        file,
    ]);
    assert_eq!(chosen(&p).0, "on_demand", "{p:#}");
    assert_eq!(
        p["pricing"]["prices"]["on_demand_write_per_million"].as_f64(),
        Some(0.0625)
    );
    let p = plan_of(&[
        "--events-per-sec",
        "600",
        "--item-bytes",
        "180",
        "--prices",
        file,
        "--price",
        "on_demand_write_per_million=0.625",
    ]);
    assert_eq!(chosen(&p).0, "provisioned_fixed", "{p:#}");
    let o = tidemark(&[
        "plan",
        "--events-per-sec",
        "600",
        "--item-bytes",
        "180",
        "--price",
        "no_such_price=1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("no_such_price"),
        "{}",
        text(&o.stderr)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// The tables alive are counted per prefix and for all prefixes against
/// the quota, and the 10,000 DynamoDB allows at most.
#[test]
fn the_table_count_covers_every_prefix() {
    let p = plan_of(&[
        "--events-per-sec",
        "600",
        "--item-bytes",
        "180",
        "--prefixes",
        "400",
        "--retention-days",
        "30",
    ]);
    let t = &p["pricing"]["tables"];
    let per = t["per_prefix"].as_u64().unwrap();
    assert_eq!(per, p["evaluation"]["tables_alive"].as_u64().unwrap());
    assert_eq!(t["total"].as_u64(), Some(per * 400), "{t:#}");
    assert_eq!(t["max_quota"].as_u64(), Some(10_000), "{t:#}");
    let w = p["warnings"].to_string();
    assert!(w.contains("10,000"), "{w}");
}

/// The seeds' hot sensor (2,000 writes/s) under `time_bucket`: write
/// shards cannot help one entity, so `plan --config` says that the entity
/// stays on one partition unless adaptive sharding is on, and what that
/// costs reads; with it on, no such warning.
#[test]
fn a_hot_key_under_time_bucket_is_warned_unless_adaptive_sharding_is_on() {
    let dir = std::env::temp_dir().join(format!("tidemark-plan-hot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = |name: &str, extra: &str| {
        let file = dir.join(name);
        std::fs::write(
            &file,
            format!(
                "[schema]\ntable_prefix = \"x\"\n\
                 key = {{ strategy = \"time_bucket\", shards = 10, bucket = \"hour\" }}\n{extra}"
            ),
        )
        .unwrap();
        file
    };
    let warnings = |p: &Value| serde_json::to_string(&p["warnings"]).unwrap();
    let off = config("off.toml", "");
    let p = plan_json(&["--config", off.to_str().unwrap()]);
    let w = warnings(&p);
    assert!(
        w.contains("one partition") && w.contains("adaptive_sharding"),
        "{w}"
    );
    assert!(w.contains("read"), "the read cost is named: {w}");
    let on = config("on.toml", "adaptive_sharding = { enabled = true }\n");
    let w = warnings(&plan_json(&["--config", on.to_str().unwrap()]));
    assert!(!w.contains("adaptive_sharding"), "{w}");
    std::fs::remove_dir_all(&dir).unwrap();
}
