//! Table maintenance against DynamoDB (moto): one table walked through its
//! whole life with simulated `now`s, checking the capacity of every tier.
//! Needs the local stack: run with the `stack` feature (see docs/testing.md).

// Helpers outside #[test] fns: a panic there is a failed assertion too.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use chrono::{DateTime, Utc};
use tidemark_schema::period::{Billing, Capacity, CapacityTiers, LifecycleState, Period};
use tidemark_schema::route::RouterConfig;
use tidemark_tests::unique_name;
use tidemark_worker::config::ExpiryAction;
use tidemark_worker::maintenance::{Action, RoundKind, TableManager, TablePolicy};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

async fn state_of(
    m: &TableManager,
    table: &str,
    now: DateTime<Utc>,
) -> Option<(LifecycleState, Option<Capacity>)> {
    m.list(now)
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == table)
        .map(|t| (t.state, t.capacity))
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn rotate_walks_a_table_through_every_state() {
    let stack = tidemark_tests::stack().await;
    let prefix = unique_name("life").replace('-', "_");
    let mut router = RouterConfig::with_prefix(&prefix);
    router.period = Period::Day;
    router.retention = Duration::from_secs(3 * 86_400);
    router.ttl_attribute = Some("expires_at".into());
    let tiers = CapacityTiers {
        prebuild: Capacity {
            read: 20,
            write: 500,
        }
        .into(),
        active: Capacity {
            read: 300,
            write: 1000,
        }
        .into(),
        cooling: Capacity {
            read: 300,
            write: 1000,
        }
        .into(),
        cold: Capacity {
            read: 100,
            write: 1,
        }
        .into(),
        frozen: Capacity { read: 1, write: 1 }.into(),
    };
    let policy = TablePolicy::new(&router, tiers, Billing::Provisioned, ExpiryAction::Delete);
    let m = TableManager::new(stack.dynamodb(), policy);
    let table = format!("{prefix}_2026-11-23");

    // (now, expected state, expected capacity; None = table gone)
    let steps = [
        (
            "2026-11-22T23:50:00Z",
            Some((LifecycleState::Prebuild, tiers.prebuild)),
        ),
        (
            "2026-11-23T00:00:01Z",
            Some((LifecycleState::Active, tiers.active)),
        ),
        (
            "2026-11-24T00:05:00Z",
            Some((LifecycleState::Cooling, tiers.cooling)),
        ),
        (
            "2026-11-24T00:20:00Z",
            Some((LifecycleState::Cold, tiers.cold)),
        ),
        (
            "2026-11-25T00:20:00Z",
            Some((LifecycleState::Frozen, tiers.frozen)),
        ),
        // Expired, and kept for the expiry guard (10 minutes by default):
        // writes accepted until the guard before expiry land first.
        (
            "2026-11-27T00:00:01Z",
            Some((LifecycleState::Expired, tiers.frozen)),
        ),
        ("2026-11-27T00:10:01Z", None),
    ];
    for (now, expected) in steps {
        let now = at(now);
        let applied = m.round(now, RoundKind::Rotate, false).await.unwrap();
        assert!(applied.iter().all(|a| a.error.is_none()), "{applied:?}");
        let got = state_of(&m, &table, now).await;
        assert_eq!(
            got,
            expected.map(|(s, c)| (s, Some(c.capacity()))),
            "at {now}"
        );
        if expected.is_none() {
            assert!(
                applied.iter().any(|a| a.action
                    == Action::Delete {
                        table: table.clone()
                    }),
                "deleted by this round: {applied:?}"
            );
        }
    }

    // TTL was enabled on creation.
    let ddb = stack.dynamodb();
    let current = format!("{prefix}_2026-11-27");
    let ttl = ddb
        .describe_time_to_live()
        .table_name(&current)
        .send()
        .await
        .unwrap();
    let desc = ttl.time_to_live_description().unwrap();
    assert_eq!(desc.attribute_name(), Some("expires_at"));

    // A dry run plans without acting.
    let later = at("2026-12-31T00:00:00Z");
    let planned = m.round(later, RoundKind::Rotate, true).await.unwrap();
    assert!(!planned.is_empty());
    assert!(
        m.list(later)
            .await
            .unwrap()
            .iter()
            .all(|t| t.name != format!("{prefix}_2026-12-31"))
    );

    for t in m.list(later).await.unwrap() {
        ddb.delete_table().table_name(&t.name).send().await.ok();
    }
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn tables_of_others_are_never_touched() {
    let stack = tidemark_tests::stack().await;
    let prefix = unique_name("mine").replace('-', "_");
    let mut router = RouterConfig::with_prefix(&prefix);
    router.retention = Duration::from_secs(86_400);
    let policy = TablePolicy::new(
        &router,
        CapacityTiers::default(),
        Billing::Provisioned,
        ExpiryAction::Delete,
    );
    let m = TableManager::new(stack.dynamodb(), policy);
    // Same prefix, but not a period label: not ours.
    let foreign = format!("{prefix}_archive");
    m.create(&foreign, Some(Capacity { read: 5, write: 5 }), None)
        .await
        .unwrap();
    let applied = m
        .round(at("2030-01-01T00:00:00Z"), RoundKind::Rotate, false)
        .await
        .unwrap();
    assert!(
        applied.iter().all(|a| a.action.table() != foreign),
        "{applied:?}"
    );
    let d = stack
        .dynamodb()
        .describe_table()
        .table_name(&foreign)
        .send()
        .await
        .unwrap();
    let pt = d.table().unwrap().provisioned_throughput().unwrap();
    assert_eq!(
        (pt.read_capacity_units(), pt.write_capacity_units()),
        (Some(5), Some(5))
    );
    stack
        .dynamodb()
        .delete_table()
        .table_name(&foreign)
        .send()
        .await
        .ok();
    for t in m.list(at("2030-01-01T00:00:00Z")).await.unwrap() {
        stack
            .dynamodb()
            .delete_table()
            .table_name(&t.name)
            .send()
            .await
            .ok();
    }
}
