//! Tests of `emf.rs`.

use super::super::telemetry::TypedRecorder;
use super::*;
use tidemark_consumer::metrics::kinesis as consumer;

#[test]
fn multi_stream_lags_are_keyed_by_stream_and_shard() {
    let recorder = TypedRecorder::new(metrics::NoopRecorder);
    metrics::with_local_recorder(&recorder, || {
        for (stream, shard, reads, behind) in [
            (Some("orders"), "shardId-000000000000", 3, 500.0),
            (Some("clicks"), "shardId-000000000000", 2, 900.0),
            (None, "shardId-000000000001", 1, 100.0),
        ] {
            let mut labels = vec![("shard", shard.to_string())];
            labels.extend(stream.map(|s| ("stream", s.to_string())));
            metrics::counter!(consumer::GET_RECORDS, &labels).increment(reads);
            metrics::gauge!(consumer::MILLIS_BEHIND, &labels).set(behind);
        }
    });
    let lags = recorder
        .metrics()
        .snapshot()
        .shard_lags(&mut Last::default());
    assert_eq!(
        lags,
        [
            ("clicks/shardId-000000000000".to_string(), 900.0),
            ("orders/shardId-000000000000".to_string(), 500.0),
            ("shardId-000000000001".to_string(), 100.0),
        ]
        .into()
    );
}
use metrics_exporter_prometheus::PrometheusBuilder;

/// The units the EMF specification allows (CloudWatch's StandardUnit).
const UNITS: &[&str] = &[
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// Checks one log line against the EMF specification's required
/// fields: a JSON object whose `_aws` member has an integer `Timestamp`
/// (ms) and a non-empty `CloudWatchMetrics` array of directives, each
/// with a `Namespace` (1-1024 chars), `Dimensions` (an array of dimension
/// sets, at most 30 names each, every name a root member whose value is
/// a string) and `Metrics` (at most 100, each with a `Name` that is a
/// root member holding a number or an array of at most 100 numbers, and
/// a valid `Unit` when given).
fn check_emf(line: &str) -> Result<(), String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let root = v.as_object().ok_or("not an object")?;
    let aws = root
        .get("_aws")
        .and_then(Value::as_object)
        .ok_or("no _aws")?;
    aws.get("Timestamp")
        .and_then(Value::as_i64)
        .filter(|t| *t > 0)
        .ok_or("_aws.Timestamp must be a positive integer (ms)")?;
    let directives = aws
        .get("CloudWatchMetrics")
        .and_then(Value::as_array)
        .filter(|d| !d.is_empty())
        .ok_or("_aws.CloudWatchMetrics must be a non-empty array")?;
    for d in directives {
        let ns = d
            .get("Namespace")
            .and_then(Value::as_str)
            .ok_or("no Namespace")?;
        if ns.is_empty() || ns.len() > 1024 {
            return Err("Namespace must be 1-1024 characters".into());
        }
        let sets = d
            .get("Dimensions")
            .and_then(Value::as_array)
            .ok_or("Dimensions must be an array")?;
        for set in sets {
            let set = set.as_array().ok_or("a dimension set must be an array")?;
            if set.len() > 30 {
                return Err("more than 30 dimensions in a set".into());
            }
            for name in set {
                let name = name.as_str().ok_or("a dimension name must be a string")?;
                root.get(name)
                    .and_then(Value::as_str)
                    .ok_or(format!("dimension {name} has no string value at the root"))?;
            }
        }
        let metrics = d
            .get("Metrics")
            .and_then(Value::as_array)
            .ok_or("Metrics must be an array")?;
        if metrics.len() > 100 {
            return Err("more than 100 metrics".into());
        }
        for metric in metrics {
            let name = metric
                .get("Name")
                .and_then(Value::as_str)
                .ok_or("metric without Name")?;
            if name.is_empty() || name.len() > 1024 {
                return Err(format!("metric name {name:?} must be 1-1024 characters"));
            }
            if let Some(unit) = metric.get("Unit") {
                let unit = unit.as_str().ok_or("Unit must be a string")?;
                if !UNITS.contains(&unit) {
                    return Err(format!("unit {unit} is not a CloudWatch unit"));
                }
            }
            match root.get(name) {
                Some(Value::Number(_)) => {}
                Some(Value::Array(a)) if a.len() <= 100 && a.iter().all(Value::is_number) => {}
                _ => return Err(format!("metric {name} has no numeric value at the root")),
            }
        }
    }
    Ok(())
}

#[test]
fn the_validator_refuses_what_the_specification_refuses() {
    let good = r#"{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["A"]],"Metrics":[{"Name":"M","Unit":"Count"}]}]},"A":"x","M":1}"#;
    assert_eq!(check_emf(good), Ok(()));
    for bad in [
        good.replace(r#""Timestamp":1,"#, ""),
        good.replace(r#","M":1"#, ""),
        good.replace(r#""A":"x","#, ""),
        good.replace("Count", "Widgets"),
        good.replace(r#""Namespace":"N","#, ""),
        good.replace(r#""M":1"#, r#""M":"1""#),
    ] {
        assert!(check_emf(&bad).is_err(), "{bad}");
    }
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// The value of `metric` in the documents whose extra dimension `key`
/// is `value` (or that have only TablePrefix when `key` is None).
fn value_of(docs: &[Value], metric: &str, dim: Option<(&str, &str)>) -> Option<f64> {
    docs.iter()
        .filter(|d| match dim {
            Some((k, v)) => d.get(k).and_then(Value::as_str) == Some(v),
            None => true,
        })
        .find_map(|d| d.get(metric).and_then(Value::as_f64))
}

#[test]
fn every_line_is_valid_emf_with_per_interval_counts() {
    let recorder = TypedRecorder::new(PrometheusBuilder::new().build_recorder());
    let mut emf = Emf::new(
        "Tidemark".into(),
        "events".into(),
        Period::Hour,
        recorder.metrics(),
        || 7,
    );
    let record = |stored: u64, throttled: u64, shard_reads: u64| {
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(writer::ITEMS_STORED, "table" => "events_2026-11-24T10")
                .increment(stored);
            metrics::counter!(writer::UNPROCESSED, "table" => "events_2026-11-24T10")
                .increment(throttled);
            metrics::counter!(consumer::GET_RECORDS, "shard" => "shardId-000000000001")
                .increment(shard_reads);
            metrics::gauge!(consumer::MILLIS_BEHIND, "shard" => "shardId-000000000001")
                .set(4_500.0);
            metrics::gauge!(consumer::MILLIS_BEHIND, "shard" => "shardId-000000000009")
                .set(99_000.0);
            metrics::counter!(m::DEAD_LETTERS, "reason" => "unroutable").increment(2);
            metrics::gauge!(m::MAINTENANCE_HELD).set(1.0);
            metrics::gauge!(m::MAINTENANCE_LAST_SUCCESS)
                .set(at("2026-11-24T10:50:00Z").timestamp() as f64);
            metrics::gauge!(m::NEXT_TABLE_ACTIVE).set(1.0);
        });
    };
    record(100, 5, 3);
    let first = emf.documents(at("2026-11-24T10:56:00Z"));
    record(40, 0, 0);
    let second = emf.documents(at("2026-11-24T10:57:00Z"));
    for doc in first.iter().chain(&second) {
        let line = doc.to_string();
        assert!(!line.contains('\n'));
        check_emf(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    let table = Some(("Table", "events_2026-11-24T10"));
    assert_eq!(value_of(&first, "ItemsStored", table), Some(100.0));
    assert_eq!(value_of(&first, "ItemsThrottled", table), Some(5.0));
    assert_eq!(
        value_of(&second, "ItemsStored", table),
        Some(40.0),
        "per interval, not cumulative"
    );
    assert_eq!(value_of(&second, "ItemsThrottled", table), Some(0.0));
    assert_eq!(
        value_of(
            &first,
            "LagSeconds",
            Some(("Shard", "shardId-000000000001"))
        ),
        Some(4.5)
    );
    assert_eq!(
        value_of(
            &first,
            "LagSeconds",
            Some(("Shard", "shardId-000000000009"))
        ),
        None,
        "a shard not read since the last flush (lease moved) is not reported"
    );
    assert_eq!(
        value_of(&second, "LagSeconds", None),
        None,
        "no reads in the second interval"
    );
    assert_eq!(
        value_of(&first, "DeadLetters", Some(("Reason", "unroutable"))),
        Some(2.0)
    );
    assert_eq!(value_of(&first, "WriterItemsInFlight", None), Some(7.0));
    assert_eq!(
        value_of(&first, "SecondsSinceMaintenance", None),
        Some(360.0)
    );
    assert_eq!(value_of(&first, "NextTableReady", None), Some(1.0));
    assert_eq!(value_of(&first, "SecondsToNextPeriod", None), Some(240.0));
    metrics::with_local_recorder(&recorder, || {
        metrics::gauge!(m::MAINTENANCE_HELD).set(0.0);
    });
    let third = emf.documents(at("2026-11-24T10:58:00Z"));
    assert_eq!(
        value_of(&third, "DeadLetters", None),
        Some(0.0),
        "a zero, so alarms see data"
    );
    assert_eq!(
        value_of(&third, "SecondsSinceMaintenance", None),
        None,
        "only the lease holder reports maintenance health"
    );
}

#[tokio::test(start_paused = true)]
async fn run_writes_one_line_per_document_each_interval_and_at_shutdown() {
    let recorder = TypedRecorder::new(PrometheusBuilder::new().build_recorder());
    let emf = Emf::new(
        "Tidemark".into(),
        "events".into(),
        Period::Day,
        recorder.metrics(),
        || 0,
    );
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    struct SharedBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for SharedBuf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(
        emf,
        Duration::from_secs(60),
        SharedBuf(out.clone()),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(150)).await;
    stop.cancel();
    task.await.unwrap();
    let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
    // Two flushes (60 s, 120 s) and the final one; two documents each
    // (dead letters zero, the worker's own) with nothing recorded.
    assert_eq!(text.lines().count(), 6, "{text}");
    for line in text.lines() {
        check_emf(line).unwrap();
    }
}

/// Dead letters written to the local fallback file reach CloudWatch as
/// `DeadLetterFallbacks`, per interval, with a zero when there were none
/// (the alarm sees data).
#[test]
fn fallback_file_entries_reach_cloudwatch() {
    let recorder = TypedRecorder::new(PrometheusBuilder::new().build_recorder());
    let mut emf = Emf::new(
        "Tidemark".into(),
        "events".into(),
        Period::Hour,
        recorder.metrics(),
        || 0,
    );
    metrics::with_local_recorder(&recorder, || {
        metrics::counter!(m::DEAD_LETTER_FALLBACKS).increment(3);
    });
    let first = emf.documents(at("2026-11-24T10:56:00Z"));
    let second = emf.documents(at("2026-11-24T10:57:00Z"));
    for doc in first.iter().chain(&second) {
        check_emf(&doc.to_string()).unwrap();
    }
    assert_eq!(value_of(&first, "DeadLetterFallbacks", None), Some(3.0));
    assert_eq!(value_of(&second, "DeadLetterFallbacks", None), Some(0.0));
}

/// A shard whose checkpoint stands still (its reader waits on the
/// pipeline and makes no GetRecords call, so `LagSeconds` says nothing)
/// reaches CloudWatch as `CheckpointLagSeconds` per shard and for the
/// alarm; once checkpointed, a zero while leases are held.
#[test]
fn a_frozen_checkpoint_reaches_cloudwatch_as_checkpoint_lag() {
    let recorder = TypedRecorder::new(PrometheusBuilder::new().build_recorder());
    let mut emf = Emf::new(
        "Tidemark".into(),
        "events".into(),
        Period::Hour,
        recorder.metrics(),
        || 0,
    );
    let set = |records: f64, secs: f64| {
        metrics::with_local_recorder(&recorder, || {
            metrics::gauge!(consumer::LEASES_HELD).set(1.0);
            metrics::gauge!(consumer::CHECKPOINT_LAG_RECORDS, "shard" => "shardId-000000000001")
                .set(records);
            metrics::gauge!(consumer::CHECKPOINT_LAG_SECONDS, "shard" => "shardId-000000000001")
                .set(secs);
        });
    };
    set(3_000.0, 420.5);
    let first = emf.documents(at("2026-11-24T10:56:00Z"));
    set(0.0, 0.0);
    let second = emf.documents(at("2026-11-24T10:57:00Z"));
    for doc in first.iter().chain(&second) {
        check_emf(&doc.to_string()).unwrap();
    }
    let shard = Some(("Shard", "shardId-000000000001"));
    assert_eq!(value_of(&first, "CheckpointLagSeconds", shard), Some(420.5));
    assert_eq!(
        value_of(&first, "CheckpointLagRecords", shard),
        Some(3_000.0)
    );
    assert_eq!(value_of(&first, "LagSeconds", None), None, "never read");
    assert_eq!(value_of(&second, "CheckpointLagSeconds", shard), None);
    assert_eq!(
        value_of(&second, "CheckpointLagSeconds", None),
        Some(0.0),
        "a zero, so the alarm sees data"
    );
}

/// `EstimatedCostUSD`: the maintenance holder prices each live table's
/// tier capacity over the interval (the frozen ones together, for the
/// prefix only); on demand, every worker prices the write units it
/// consumed, per interval.
#[test]
fn estimated_cost_prices_capacity_once_and_on_demand_writes() {
    use tidemark_schema::period::{Billing, CapacityTiers, Lifecycle, TableNaming};
    let model = |billing| CostModel {
        prices: Prices::default(),
        billing,
        tiers: CapacityTiers::default(),
        lifecycle: Lifecycle::default(),
        naming: TableNaming {
            prefix: "events".into(),
            period: Period::Hour,
        },
    };
    let emf_with = |metrics: TypedMetrics, billing| {
        Emf::new(
            "Tidemark".into(),
            "events".into(),
            Period::Hour,
            metrics,
            || 0,
        )
        .with_cost(model(billing), at("2026-11-24T10:29:00Z"))
    };
    let cost = |docs: &[Value], table: Option<&str>| -> Option<f64> {
        docs.iter()
            .filter(|d| d.get("Table").and_then(Value::as_str) == table)
            .find_map(|d| d.get("EstimatedCostUSD").and_then(Value::as_f64))
    };
    // Provisioned, the lease holder: a minute of each table's tier.
    let holder = TypedRecorder::new(PrometheusBuilder::new().build_recorder());
    metrics::with_local_recorder(&holder, || {
        metrics::gauge!(m::MAINTENANCE_HELD).set(1.0);
    });
    let mut emf = emf_with(holder.metrics(), Billing::Provisioned);
    let docs = emf.documents(at("2026-11-24T10:30:00Z"));
    for doc in &docs {
        check_emf(&doc.to_string()).unwrap();
    }
    let active = cost(&docs, Some("events_2026-11-24T10")).unwrap();
    assert!((active - (300.0 * 0.00013 + 1000.0 * 0.00065) / 60.0).abs() < 1e-9);
    let cold = cost(&docs, Some("events_2026-11-24T09")).unwrap();
    assert!((cold - (100.0 * 0.00013 + 0.00065) / 60.0).abs() < 1e-9);
    // 30 days of hourly tables, the cold one and the active one aside,
    // at 1 RCU and 1 WCU each: for the prefix only.
    let frozen = cost(&docs, None).unwrap();
    let n = (frozen / ((0.00013 + 0.00065) / 60.0)).round();
    assert!((700.0..=720.0).contains(&n), "{n}");
    assert_eq!(cost(&docs, Some("events_2026-11-24T08")), None);
    // The next table is not built yet at :30: nothing for it.
    assert_eq!(cost(&docs, Some("events_2026-11-24T11")), None);

    // Another worker: the holder already priced the capacity.
    let other = TypedRecorder::new(PrometheusBuilder::new().build_recorder());
    let mut emf = emf_with(other.metrics(), Billing::Provisioned);
    let docs = emf.documents(at("2026-11-24T10:30:00Z"));
    assert!(
        cost(&docs, Some("events_2026-11-24T10")).is_none(),
        "{docs:?}"
    );

    // On demand: the write units consumed in each interval.
    let od = TypedRecorder::new(PrometheusBuilder::new().build_recorder());
    let mut emf = emf_with(
        od.metrics(),
        Billing::OnDemand {
            warm_write_units: None,
        },
    );
    let consume = |n| {
        metrics::with_local_recorder(&od, || {
            metrics::counter!(writer::CONSUMED_WCU, "table" => "events_2026-11-24T10").increment(n);
        });
    };
    consume(2_000_000);
    let first = emf.documents(at("2026-11-24T10:30:00Z"));
    consume(400_000);
    let second = emf.documents(at("2026-11-24T10:31:00Z"));
    let t = Some("events_2026-11-24T10");
    assert!((cost(&first, t).unwrap() - 1.25).abs() < 1e-9, "{first:?}");
    assert!(
        (cost(&second, t).unwrap() - 0.25).abs() < 1e-9,
        "{second:?}"
    );
}
