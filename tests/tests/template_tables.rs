//! The tables `deploy/cloudformation/tidemark.yaml` creates have the key
//! schema the worker writes: a lease or coordinator table keyed on another
//! attribute makes every conditional write fail with a ValidationException,
//! so the deployed stack would never hold its maintenance lease. No network.

// Helpers outside #[test] fns panic on purpose: this whole file is a test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

/// The lines of the resource `name` in the template, after its header.
fn resource<'a>(template: &'a str, name: &str) -> Vec<&'a str> {
    let header = format!("  {name}:");
    let body: Vec<&str> = template
        .lines()
        .skip_while(|l| *l != header)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with("   "))
        .collect();
    assert!(
        !body.is_empty(),
        "resource {name} not found in the template"
    );
    body
}

/// The hash-key attribute of the resource `name` in the template, read with a
/// line scanner (CloudFormation's `!Sub`/`!If` tags defeat a plain YAML parser).
fn hash_key(template: &str, name: &str) -> String {
    let body = resource(template, name);
    let at = body
        .iter()
        .position(|l| l.trim() == "KeySchema:")
        .unwrap_or_else(|| panic!("{name} has no KeySchema"));
    let line = body[at + 1];
    assert!(
        line.contains("KeyType: HASH"),
        "{name}: first key is not the HASH key: {line}"
    );
    let start = line.find("AttributeName:").expect("AttributeName") + "AttributeName:".len();
    line[start..]
        .split(',')
        .next()
        .expect("name")
        .trim()
        .to_owned()
}

#[test]
fn lease_and_coordinator_tables_are_keyed_on_lease_key() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let template =
        std::fs::read_to_string(root.join("deploy/cloudformation/tidemark.yaml")).unwrap();
    // Both tables hold KCL-format leases: `crates/consumer/src/kinesis/lease/item.rs`
    // keys every item on `leaseKey`, and `crates/worker/src/maintenance/lease.rs` keeps
    // its lease through that module's `LeaseTable`.
    for (table, source, marker) in [
        (
            "LeaseTable",
            "crates/consumer/src/kinesis/lease/item.rs",
            "\"leaseKey\"",
        ),
        (
            "CoordinatorTable",
            "crates/worker/src/maintenance/lease.rs",
            "LeaseTable::with_timing",
        ),
    ] {
        let code = std::fs::read_to_string(root.join(source)).unwrap();
        assert!(
            code.contains(marker),
            "{source} no longer has {marker}: update this test"
        );
        assert_eq!(
            hash_key(&template, table),
            "leaseKey",
            "{table} in the template"
        );
    }
}

/// The `Default` of the template parameter `name` (one-line or block form).
fn parameter_default(template: &str, name: &str) -> String {
    let header = format!("  {name}:");
    let mut lines = template
        .lines()
        .skip_while(|l| !l.starts_with(&header))
        .peekable();
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("parameter {name} not found"));
    let value_after = |l: &str| -> Option<String> {
        let at = l.find("Default:")? + "Default:".len();
        Some(
            l[at..]
                .split([',', '}'])
                .next()
                .unwrap_or_default()
                .trim()
                .trim_matches('"')
                .to_owned(),
        )
    };
    if let Some(v) = value_after(first) {
        return v;
    }
    lines
        .take_while(|l| l.starts_with("    "))
        .find_map(value_after)
        .unwrap_or_else(|| panic!("parameter {name} has no Default"))
}

/// The template's cost defaults are what `tidemark plan` recommends for the
/// documented worked example (docs/keys-and-tables.md: 600 events/s of
/// 180 bytes with peaks of 900/s): provisioned billing with table auto
/// scaling of the current table's writes, history tables in
/// standard-infrequent-access.
#[test]
fn cost_defaults_follow_the_planners_choice_for_the_documented_load() {
    use tidemark_schema::sizing::{HistoryClass, SizingInput, WriteSetup, recommend};
    let plan = recommend(&SizingInput::new(600.0, 900.0, 180)).unwrap();
    let choice = &plan.pricing.choice;
    assert_eq!(
        choice.setup,
        WriteSetup::ProvisionedAutoscaled,
        "{choice:?}"
    );
    assert_eq!(
        choice.history_class,
        HistoryClass::StandardInfrequentAccess,
        "{choice:?}"
    );
    let path = tidemark_tests::repo_root().join("deploy/cloudformation/tidemark.yaml");
    let t = std::fs::read_to_string(path).unwrap();
    assert_eq!(parameter_default(&t, "BillingMode"), "provisioned");
    assert_ne!(parameter_default(&t, "ActiveWriteScalingMin"), "0");
    assert_eq!(
        parameter_default(&t, "HistoryTableClass"),
        "standard_infrequent_access"
    );
}

/// The dead-letter queue takes SQS's largest message (1 MiB), so an entry
/// keeps its whole payload up to that size: a queue made before SQS raised
/// its default to 1 MiB keeps 256 KiB until the template sets it.
#[test]
fn the_dead_letter_queue_takes_sqss_largest_message() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let template =
        std::fs::read_to_string(root.join("deploy/cloudformation/tidemark.yaml")).unwrap();
    let body = resource(&template, "DeadLetterQueue");
    assert!(
        body.iter()
            .any(|l| l.trim() == "MaximumMessageSize: 1048576"),
        "DeadLetterQueue does not set MaximumMessageSize: 1048576"
    );
}
