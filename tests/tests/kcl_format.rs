//! The KCL format checker of `tidemark_tests::kcl` (what the KCL 2.x to
//! 3.5.1 serializers accept), which the stack tests run on every table
//! Tidemark ran on: it accepts every fixture as the KCL wrote it and
//! finds each kind of item the KCL would refuse or misread.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_tests::kcl::{Fixture, Item, kcl_format_problems};

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: &str) -> AttributeValue {
    AttributeValue::N(v.into())
}

#[test]
fn every_fixture_table_is_in_the_kcl_format() {
    let names = Fixture::names();
    assert!(names.len() >= 9);
    for name in names {
        let f = Fixture::get(&name);
        for role in f.roles() {
            let items = f.items_offline(&role);
            assert_eq!(
                kcl_format_problems(&role, &items),
                Vec::<String>::new(),
                "{name} {role}"
            );
        }
    }
}

/// Each change to a KCL 3.5 table that a KCL would refuse or misread.
#[test]
fn what_the_kcl_would_refuse_or_misread_is_found() {
    let base = Fixture::get("kcl3x_single_table").items_offline("lease");
    let edit = |key: &str, f: &dyn Fn(&mut Item)| -> Vec<Item> {
        let mut items = base.clone();
        for i in &mut items {
            if i["leaseKey"].as_s().unwrap() == key {
                f(i);
            }
        }
        items
    };
    let shard = "shardId-000000000001";
    let cases: Vec<(&str, Vec<Item>, &str)> = vec![
        (
            "a counter of the wrong type",
            edit(shard, &|i| {
                i.insert("leaseCounter".into(), s("7"));
            }),
            "leaseCounter is S",
        ),
        (
            "an attribute the KCL never writes",
            edit(shard, &|i| {
                i.insert("tidemarkOwner".into(), s("w"));
            }),
            "tidemarkOwner",
        ),
        (
            "a prepared checkpoint behind the checkpoint",
            edit(shard, &|i| {
                i.insert("pendingCheckpoint".into(), s("1"));
            }),
            "prepared checkpoint",
        ),
        (
            "a hand-off without a next owner",
            edit(shard, &|i| {
                i.remove("leaseOwner");
                i.insert("checkpointOwner".into(), s("w"));
            }),
            "checkpointOwner without a leaseOwner",
        ),
        (
            "a checkpoint the KCL does not know",
            edit(shard, &|i| {
                i.insert("checkpoint".into(), s("SOMEWHERE"));
            }),
            "checkpoint",
        ),
        (
            "a KCL item written over",
            edit("Leader", &|i| {
                i.insert("leaseCounter".into(), n("1"));
            }),
            "leaseCounter",
        ),
        (
            "an unknown entity type",
            edit("Migration3.0", &|i| {
                i.insert("entityType".into(), s("MIGRATION"));
            }),
            "not one the KCL knows",
        ),
    ];
    for (what, items, needle) in cases {
        let problems = kcl_format_problems("lease", &items);
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "{what}: {problems:?}"
        );
    }
    // Tidemark's own coordinator items in a lease table: its lock is read
    // as the lease of a shard that does not exist, and a heartbeat has no
    // leaseCounter, which stops every KCL 2.x listing.
    let mut items = base.clone();
    items.push(
        [
            ("leaseKey".to_string(), s("kinesis-leader#app")),
            ("leaseOwner".to_string(), s("tidemark-1")),
            ("leaseCounter".to_string(), n("3")),
        ]
        .into(),
    );
    items.push([("leaseKey".to_string(), s("heartbeat#tidemark-1"))].into());
    let problems = kcl_format_problems("lease", &items);
    assert!(
        problems.iter().any(|p| p.contains("kinesis-leader#app")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("heartbeat#tidemark-1") && p.contains("leaseCounter")),
        "{problems:?}"
    );
}
