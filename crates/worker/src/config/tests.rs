//! Tests of the configuration: loading, overrides, every problem at once.

use std::collections::BTreeMap;
use std::time::Duration;

use tidemark_schema::period::CapacityTiers;

use super::*;

const MINIMAL: &str = r#"
[source]
kind = "kinesis"
stream = "events"
lease_table = "tidemark-leases"

[schema]
table_prefix = "events"

[dead_letters]
kind = "file"
path = "dead-letters.jsonl"
"#;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn err(text: &str, e: &[(&str, &str)]) -> String {
    Config::from_toml(text, "t.toml", &env(e))
        .unwrap_err()
        .to_string()
}

#[test]
fn minimal_config_gets_defaults_and_a_worker_id() {
    let c = Config::from_toml(MINIMAL, "t.toml", &env(&[("HOSTNAME", "host-a")])).unwrap();
    let SourceConfig::Kinesis(k) = &c.source else {
        panic!("kinesis expected")
    };
    assert_eq!(k.worker_id, "host-a");
    assert_eq!(c.telemetry.listen, "0.0.0.0:9102");
    assert!(c.maintenance.enabled);
}

#[test]
fn several_streams_with_their_own_mappings() {
    let text = MINIMAL.replace(
        "stream = \"events\"\n",
        "\n[[source.streams]]\nstream = \"orders\"\n\n\
             [[source.streams]]\nstream = \"clicks\"\nevent = { entity_field = \"user\" }\n",
    );
    // The [[source.streams]] tables must follow the [source] keys.
    let text = text
        .replace("lease_table = \"tidemark-leases\"\n", "")
        .replace(
            "kind = \"kinesis\"\n",
            "kind = \"kinesis\"\nlease_table = \"tidemark-leases\"\n",
        );
    let c = Config::from_toml(&text, "t.toml", &env(&[("HOSTNAME", "h")])).unwrap();
    let SourceConfig::Kinesis(k) = &c.source else {
        panic!("kinesis expected")
    };
    assert_eq!(k.streams.len(), 2);
    let schemas = c.stream_schemas();
    assert_eq!(schemas.len(), 1, "only clicks has its own mapping");
    assert_eq!(schemas[0].0, "clicks");
    assert_eq!(schemas[0].1.event.entity_field, "user");
    // A bad mapping of one stream is named with its place.
    let bad = text.replace("entity_field = \"user\"", "entity_field = \"\"");
    let m = err(&bad, &[("HOSTNAME", "h")]);
    assert!(m.contains("source.streams.1.event"), "{m}");
    assert!(m.contains("stream `clicks`"), "{m}");
    // Both modes at once are refused.
    let both = text.replace(
        "kind = \"kinesis\"\n",
        "kind = \"kinesis\"\nstream = \"events\"\n",
    );
    let m = err(&both, &[("HOSTNAME", "h")]);
    assert!(
        m.contains("source.streams") && m.contains("not both"),
        "{m}"
    );
}

#[test]
fn ecs_task_id_wins_over_host_name() {
    let e = env(&[
        ("HOSTNAME", "ip-10-0-0-1"),
        (
            "ECS_CONTAINER_METADATA_URI_V4",
            "http://169.254.170.2/v4/a1b2c3d4e5-1234567890",
        ),
    ]);
    assert_eq!(default_worker_id(&e), "ecs-a1b2c3d4e5");
}

#[test]
fn environment_overrides_nested_keys_with_typed_values() {
    let e = env(&[
        ("TIDEMARK__SOURCE__STREAM", "other"),
        ("TIDEMARK__SCHEMA__PERIOD", "hour"),
        ("TIDEMARK__SCHEMA__KEY__STRATEGY", "time_bucket"),
        ("TIDEMARK__SCHEMA__KEY__SHARDS", "10"),
        ("TIDEMARK__SCHEMA__KEY__BUCKET", "hour"),
        ("TIDEMARK__MAINTENANCE__ENABLED", "false"),
    ]);
    let c = Config::from_toml(MINIMAL, "t.toml", &e).unwrap();
    let SourceConfig::Kinesis(k) = &c.source else {
        panic!()
    };
    assert_eq!(k.stream, "other");
    assert!(!c.maintenance.enabled);
    assert_eq!(serde_json::to_value(c.schema.period).unwrap(), "hour");
    assert_eq!(serde_json::to_value(&c.schema.key).unwrap()["shards"], 10);
}

#[test]
fn unknown_key_is_named_with_its_path() {
    let text = MINIMAL.replace("lease_table", "lease_tabel");
    let m = err(&text, &[]);
    assert!(m.contains("config key `source.lease_tabel`"), "{m}");
    assert!(m.contains("did you mean `lease_table`?"), "{m}");
    let m = err(
        &format!("{MINIMAL}\n[telemetry]\nlisten_addr = \"x\"\n"),
        &[],
    );
    assert!(m.contains("telemetry.listen_addr"), "{m}");
    assert!(m.contains("remove it or check its spelling"), "{m}");
}

#[test]
fn missing_and_bad_values_name_the_key() {
    let m = err(&MINIMAL.replace("table_prefix = \"events\"", ""), &[]);
    assert!(m.contains("schema") && m.contains("table_prefix"), "{m}");
    let m = err(MINIMAL, &[("TIDEMARK__SCHEMA__PERIOD", "fortnight")]);
    assert!(m.contains("config key `schema.period`"), "{m}");
    let m = err(MINIMAL, &[("TIDEMARK__MAINTENANCE__INTERVAL", "soon")]);
    assert!(m.contains("config key `maintenance.interval`"), "{m}");
    let m = err(MINIMAL, &[("TIDEMARK__SOURCE__STREAM__X", "1")]);
    assert!(
        m.contains("TIDEMARK__SOURCE__STREAM__X") && m.contains("source.stream"),
        "{m}"
    );
}

#[test]
fn kinesis_source_is_checked_at_load() {
    // Found by fuzzing: these loaded, and only the Kinesis source's own
    // start-up check refused them, under the key `kinesis.*`.
    for (text, key) in [
        (
            MINIMAL.replace("stream = \"events\"", "stream = \"\""),
            "source.stream",
        ),
        (
            MINIMAL.replace("lease_table = ", "failover_time = \"1ms\"\nlease_table = "),
            "source.failover_time",
        ),
        (
            MINIMAL.replace("lease_table = ", "max_leases = 0\nlease_table = "),
            "source.max_leases",
        ),
    ] {
        let m = err(&text, &[]);
        assert!(m.contains(&format!("config key `{key}`")), "{m}");
    }
}

/// `record_format = "json"` meant one event or an array on SQS; it means
/// one event on every source now, so the old SQS spelling is refused at
/// load, naming the new one, never read the new way silently.
#[test]
fn the_old_sqs_json_record_format_is_refused_at_load_naming_the_new_one() {
    let sqs = MINIMAL.replace(
        "kind = \"kinesis\"\nstream = \"events\"\nlease_table = \"tidemark-leases\"\n",
        "kind = \"sqs\"\nqueue_url = \"http://127.0.0.1:4566/000000000000/q\"\n",
    );
    assert!(sqs.contains("kind = \"sqs\""), "{sqs}");
    let c = Config::from_toml(&sqs, "t.toml", &env(&[])).unwrap();
    let SourceConfig::Sqs(s) = &c.source else {
        panic!("sqs source")
    };
    assert_eq!(
        s.record_format,
        tidemark_schema::framing::RecordFormat::JsonOrArray
    );
    let old = sqs.replace("queue_url =", "record_format = \"json\"\nqueue_url =");
    let m = err(&old, &[]);
    assert!(m.contains("config key `source.record_format`"), "{m}");
    assert!(m.contains("\"json_or_array\""), "{m}");
    // On Kinesis `json` keeps its meaning: one event per record.
    let kinesis = MINIMAL.replace("lease_table = ", "record_format = \"json\"\nlease_table = ");
    Config::from_toml(&kinesis, "t.toml", &env(&[])).unwrap();
}

#[test]
fn tiers_and_billing_are_read_from_schema() {
    let text = MINIMAL.replace(
            "table_prefix = \"events\"",
            "table_prefix = \"events\"\ntiers = { cold = { read = 50, write = 2 } }\nbilling = { mode = \"provisioned\" }",
        );
    let c = Config::from_toml(&text, "t.toml", &env(&[])).unwrap();
    assert_eq!(c.tiers.cold.read, 50);
    assert_eq!(c.tiers.active, CapacityTiers::default().active);
    let m = err(&text.replace("read = 50", "reed = 50"), &[]);
    assert!(m.contains("config key `schema.tiers.cold"), "{m}");
    let m = err(MINIMAL, &[("TIDEMARK__SCHEMA__BILLING__MODE", "free")]);
    assert!(m.contains("config key `schema.billing"), "{m}");
}

#[test]
fn the_commented_examples_are_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for file in ["localstack/tidemark.toml", "deploy/tidemark.toml"] {
        let path = root.join(file);
        let c = Config::load(Some(&path), &env(&[("HOSTNAME", "h")]))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(!c.schema.table_prefix.is_empty(), "{file}");
    }
}

/// The problems of a config that must not load.
fn problems(text: &str, e: &[(&str, &str)]) -> Vec<Problem> {
    match Config::from_toml(text, "t.toml", &env(e)) {
        Err(LoadError::Invalid(p)) => p,
        other => panic!("expected problems, got {other:?}"),
    }
}

/// The one problem at `key`.
fn problem_at(text: &str, e: &[(&str, &str)], key: &str) -> Problem {
    let all = problems(text, e);
    all.iter()
        .find(|p| p.key == key)
        .cloned()
        .unwrap_or_else(|| panic!("no problem at `{key}` in {all:#?}"))
}

/// Tidemark's maintenance lease, worker reports and leader-mode lock in
/// the lease table would be read by every KCL version as leases of shards
/// that do not exist (and the reports, without a leaseCounter, stop a KCL
/// 2.x worker's listing): the way back to the KCL.
#[test]
fn the_coordinator_table_cannot_be_the_lease_table() {
    let text = format!("{MINIMAL}\n[maintenance]\ncoordinator_table = \"tidemark-leases\"\n");
    let p = problem_at(&text, &[], "maintenance.coordinator_table");
    assert!(p.message.contains("source.lease_table"), "{p}");
    assert!(p.message.contains("KCL"), "{p}");
}

#[test]
fn schema_event_is_refused_not_overwritten() {
    let text = MINIMAL.replace(
        "table_prefix = \"events\"",
        "table_prefix = \"events\"\n[schema.event]\nentity_field = \"user.id\"",
    );
    let p = problem_at(&text, &[], "schema.event");
    assert!(p.message.contains("top-level [event]"), "{p}");
    assert!(
        matches!(p.origin, Some(ValueOrigin::File { line: 9, .. })),
        "{p}"
    );
}

/// Every kind of `[event]` mapping error, whether serde or the router
/// finds it, is refused at load naming the key and its line in the file.
#[test]
fn mapping_errors_point_at_their_key_and_line() {
    let first = MINIMAL.lines().count() + 2;
    for (event, key) in [
        ("timezone = \"Europe/Atlantis\"", "event.timezone"),
        ("timestamp_format = \"%H:%M\"", "event.timestamp_format"),
        ("timestamp_format = \"epoch_ms\"", "event.timestamp_format"),
        ("on_clash = \"drop\"", "event.on_clash"),
        ("types = { n = \"integer\" }", "event.types.n"),
        ("rename = { a = \"\" }", "event.rename"),
        (
            "entity_fields = [\"a\", \"b\"]\nentity_separator = \"\"",
            "event.entity_separator",
        ),
        ("timestamp_field = \"deviceId\"", "event.timestamp_field"),
        ("include = [\"a\"]\nexclude = [\"a\"]", "event.exclude"),
    ] {
        let text = format!("{MINIMAL}\n\n[event]\n{event}\n");
        let p = problem_at(&text, &[], key);
        assert!(
            matches!(p.origin, Some(ValueOrigin::File { line, .. }) if line >= first),
            "{event}: {p}"
        );
    }
}

#[test]
fn shards_with_the_entity_strategy_is_refused() {
    let text = MINIMAL.replace(
            "table_prefix = \"events\"",
            "table_prefix = \"events\"\nkey = { strategy = \"entity\", shards = 10, bucket = \"hour\" }",
        );
    let all = problems(&text, &[]);
    let mut keys: Vec<&str> = all.iter().map(|p| p.key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["schema.key.bucket", "schema.key.shards"], "{all:#?}");
    for p in &all {
        assert!(p.message.contains("strategy = \"entity\""), "{p}");
    }
    // The same by environment, named by its variable.
    let p = problem_at(
        &MINIMAL.replace(
            "table_prefix = \"events\"",
            "table_prefix = \"events\"\nkey.strategy = \"entity\"",
        ),
        &[("TIDEMARK__SCHEMA__KEY__SHARDS", "10")],
        "schema.key.shards",
    );
    assert!(
        p.to_string().contains("TIDEMARK__SCHEMA__KEY__SHARDS"),
        "{p}"
    );
}

#[test]
fn writer_key_attributes_are_refused() {
    for key in ["pk_attribute", "sk_attribute"] {
        let text = format!("{MINIMAL}\n[writer]\n{key} = \"id\"\n");
        let p = problem_at(&text, &[], &format!("writer.{key}"));
        assert!(p.message.contains("schema.key_attributes"), "{p}");
    }
}

#[test]
fn unknown_keys_of_every_nested_section_are_refused() {
    // One misspelt key per nested table: each is named with its path.
    for (section, line) in [
        ("source", "lease_tabel = \"x\""),
        (
            "source.initial_position",
            "type = \"latest\"\ntimestamp = \"2026-01-01T00:00:00Z\"",
        ),
        ("event", "entity = \"id\""),
        (
            "schema.key",
            "strategy = \"time_bucket\"\nshards = 2\nbucket = \"hour\"\nbuckets = 1",
        ),
        ("schema.key_attributes", "partition = \"p\""),
        ("schema.attributes", "entity_attr = \"e\""),
        ("schema.tiers", "hot = { read = 1, write = 1 }"),
        ("schema.tiers.cold", "read = 1\nwrite = 1\nreads = 1"),
        (
            "schema.billing",
            "mode = \"provisioned\"\nwarm_write_units = 5",
        ),
        ("writer", "lingr = \"1s\""),
        ("dead_letters", "pth = \"x\""),
        ("maintenance", "enable = true"),
        ("telemetry", "listen_addr = \"x\""),
    ] {
        let header = format!("[{section}]\n");
        let text = if MINIMAL.contains(&header) {
            MINIMAL.replace(&header, &format!("{header}{line}\n"))
        } else {
            format!("{MINIMAL}\n{header}{line}\n")
        };
        let all = problems(&text, &[]);
        assert_eq!(all.len(), 1, "{section}: {all:#?}");
        assert!(
            all[0].key.starts_with(&format!("{section}.")),
            "{section}: {}",
            all[0]
        );
        assert!(
            matches!(all[0].origin, Some(ValueOrigin::File { .. })),
            "{section}: {}",
            all[0]
        );
    }
}

#[test]
fn every_problem_is_reported_at_once_without_rust_names() {
    let text = format!(
        "{MINIMAL}\n[writer]\nmax_in_flight_items = \"abc\"\n[maintenance]\ninterval = \"soon\"\n[telemetry]\nlog_level = 5\n"
    );
    let all = problems(&text, &[("TIDEMARK__SOURCE__STREEM", "x")]);
    let keys: Vec<&str> = all.iter().map(|p| p.key.as_str()).collect();
    for k in [
        "source.streem",
        "writer.max_in_flight_items",
        "maintenance.interval",
        "telemetry.log_level",
    ] {
        assert!(keys.contains(&k), "{k} missing from {all:#?}");
    }
    let shown = LoadError::Invalid(all).to_string();
    for rust in ["usize", "u64", "struct", "enum ", "variant"] {
        assert!(!shown.contains(rust), "{rust} in {shown}");
    }
    assert!(
        shown.contains("environment variable TIDEMARK__SOURCE__STREEM"),
        "{shown}"
    );
    assert!(shown.contains("t.toml:"), "{shown}");
}

#[test]
fn impossible_values_are_refused() {
    let p = problem_at(
        &MINIMAL.replace(
            "table_prefix = \"events\"",
            "table_prefix = \"events\"\ntiers.active = { read = 5, write = 0 }",
        ),
        &[],
        "schema.tiers.active.write",
    );
    assert!(p.to_string().contains("t.toml:9"), "{p}");
    for (e, key) in [
        (
            ("TIDEMARK__TELEMETRY__LISTEN", "localhost:abc"),
            "telemetry.listen",
        ),
        (
            ("TIDEMARK__TELEMETRY__LOG_LEVEL", "verbose"),
            "telemetry.log_level",
        ),
        (
            ("TIDEMARK__TELEMETRY__REPORT_INTERVAL", "90s"),
            "telemetry.report_interval",
        ),
    ] {
        let p = problem_at(MINIMAL, &[e], key);
        assert!(p.to_string().contains(e.0), "{p}");
    }
    // Levels with targets are fine.
    let c = Config::from_toml(
        MINIMAL,
        "t.toml",
        &env(&[(
            "TIDEMARK__TELEMETRY__LOG_LEVEL",
            "warn,tidemark_writer=debug",
        )]),
    );
    assert!(c.is_ok(), "{c:?}");
}

#[test]
fn effective_config_names_each_source() {
    let dir = std::env::temp_dir().join(format!("tidemark-eff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.toml");
    std::fs::write(&path, MINIMAL).unwrap();
    let all = Config::effective(
        Some(&path),
        &env(&[("TIDEMARK__SCHEMA__PERIOD", "hour"), ("HOSTNAME", "h")]),
    )
    .unwrap();
    let get = |k: &str| {
        all.iter()
            .find(|e| e.key == k)
            .unwrap_or_else(|| panic!("{k} not in {all:#?}"))
    };
    assert!(matches!(
        get("source.stream").origin,
        ValueOrigin::File { line: 4, .. }
    ));
    assert_eq!(get("schema.period").value, "\"hour\"");
    assert!(matches!(
        get("schema.period").origin,
        ValueOrigin::Env { .. }
    ));
    assert_eq!(get("writer.linger").origin, ValueOrigin::Default);
    assert_eq!(get("schema.tiers.cold.write").value, "1");
    assert!(matches!(
        get("source.worker_id").origin,
        ValueOrigin::Derived { .. }
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_router_loads_without_source_or_dead_letters() {
    let dir = std::env::temp_dir().join(format!("tidemark-router-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.toml");
    std::fs::write(
        &path,
        "[event]\nentity_field = \"id\"\n[schema]\ntable_prefix = \"x\"\n",
    )
    .unwrap();
    let r = Config::load_router(Some(&path), &env(&[])).unwrap();
    assert_eq!(r.event.entity_field, "id");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shutdown_timeout_defaults_to_30s_and_must_exceed_the_grace() {
    let c = Config::from_toml(MINIMAL, "t.toml", &env(&[])).unwrap();
    assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
    let c = Config::from_toml(
        &format!("shutdown_timeout = \"8s\"\n{MINIMAL}"),
        "t.toml",
        &env(&[]),
    )
    .unwrap_err()
    .to_string();
    assert!(c.contains("config key `shutdown_timeout`"), "{c}");
    assert!(c.contains("shutdown_grace (20s)"), "{c}");
    let c = Config::from_toml(
        MINIMAL,
        "t.toml",
        &env(&[
            ("TIDEMARK__SHUTDOWN_TIMEOUT", "8s"),
            ("TIDEMARK__SOURCE__SHUTDOWN_GRACE", "3s"),
        ]),
    )
    .unwrap();
    assert_eq!(c.shutdown_timeout, Duration::from_secs(8));
}

#[test]
fn syntax_errors_name_the_file() {
    let m = err("[source\nkind=", &[]);
    assert!(m.contains("t.toml is not valid TOML"), "{m}");
}

#[test]
fn the_expiry_guard_must_cover_two_rounds_and_a_late_write() {
    let c = Config::from_toml(MINIMAL, "t.toml", &env(&[])).unwrap();
    assert_eq!(c.schema.expiry_guard, Duration::from_secs(600));
    for (vars, want) in [
        (
            [("TIDEMARK__MAINTENANCE__INTERVAL", "6m")],
            "two maintenance intervals",
        ),
        (
            [("TIDEMARK__WRITER__LATE_MAX_WAIT", "1h")],
            "writer.late_max_wait",
        ),
    ] {
        let e = Config::from_toml(MINIMAL, "t.toml", &env(&vars))
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema.expiry_guard"), "{e}");
        assert!(e.contains(want), "{e}");
    }
    let e = Config::from_toml(
        MINIMAL,
        "t.toml",
        &env(&[
            ("TIDEMARK__SCHEMA__RETENTION", "9m"),
            ("TIDEMARK__SCHEMA__LATE_ARRIVAL_GRACE", "1m"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("expiry_guard"), "{e}");
}
