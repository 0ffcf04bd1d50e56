//! Maintenance trusts DynamoDB's clock, not only its host's: against a
//! DynamoDB whose clock is hours off (the limits proxy's `--clock-offset`),
//! a round neither scales down the table DynamoDB calls current nor
//! deletes one it calls live, and the missing-table handler does not bring
//! back a table DynamoDB's clock calls expired.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use chrono::Utc;
use tidemark_schema::period::{Billing, CapacityTiers, Period};
use tidemark_schema::route::RouterConfig;
use tidemark_tests::{TableCapacity, create_table, start_limits_proxy, unique_name};
use tidemark_worker::config::ExpiryAction;
use tidemark_worker::maintenance::{
    Action, CreateMissingTables, RoundKind, TableManager, TablePolicy,
};
use tidemark_writer::{MissingTableAction, MissingTableHandler};

/// Hourly tables kept `retention_h` hours, under a fresh prefix.
fn policy(prefix: &str, retention_h: u64) -> TablePolicy {
    let mut router = RouterConfig::with_prefix(prefix);
    router.period = Period::Hour;
    router.retention = Duration::from_secs(retention_h * 3600);
    TablePolicy::new(
        &router,
        CapacityTiers::default(),
        Billing::Provisioned,
        ExpiryAction::Delete,
    )
}

async fn write_capacity(client: &aws_sdk_dynamodb::Client, table: &str) -> Option<i64> {
    let d = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .ok()?;
    d.table()?.provisioned_throughput()?.write_capacity_units()
}

/// Tags `table` `tidemark:prefix` = `prefix`, as the worker's CreateTable does.
async fn tag_ours(client: &aws_sdk_dynamodb::Client, table: &str, prefix: &str) {
    let arn = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .table()
        .and_then(|t| t.table_arn())
        .unwrap()
        .to_string();
    client
        .tag_resource()
        .resource_arn(arn)
        .tags(
            aws_sdk_dynamodb::types::Tag::builder()
                .key("tidemark:prefix")
                .value(prefix)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn a_host_clock_ahead_of_dynamodbs_neither_scales_down_nor_deletes() {
    let stack = tidemark_tests::stack().await;
    // DynamoDB's clock three hours behind this host's.
    let proxy = start_limits_proxy(&stack, |c| {
        c.clock_offset = Some(tidemark_limits::clock::Offset(-3 * 3600));
    })
    .await;
    let prefix = unique_name("clockahead").replace('-', "_");
    let p = policy(&prefix, 4);
    let now = Utc::now();
    let server_now = now - chrono::Duration::hours(3);
    let ms = |t: chrono::DateTime<Utc>| t.timestamp_millis();
    // The table DynamoDB calls current: frozen by this host's clock.
    let current = p.naming.table_for(ms(server_now));
    // A table DynamoDB calls live (it ended at most five hours ago, and is
    // kept four): expired, past the guard, by this host's clock.
    let live = p.naming.table_for(ms(now - chrono::Duration::hours(5)));
    let direct = stack.dynamodb();
    for t in [&current, &live] {
        create_table(
            &direct,
            t,
            true,
            TableCapacity::Provisioned {
                read: 300,
                write: 1000,
            },
        )
        .await;
        // Ours, as a worker creates them: maintenance leaves alone a table
        // without this stack's prefix tag.
        tag_ours(&direct, t, &prefix).await;
    }
    let m = TableManager::new(stack.dynamodb_at(&proxy.url), p);
    let applied = m.round(now, RoundKind::Rotate, false).await.unwrap();
    let about = |t: &str| -> Vec<String> {
        applied
            .iter()
            .filter(|a| a.action.table() == t)
            .map(|a| format!("{} {:?}", a.action.kind(), a.error))
            .collect()
    };
    assert!(
        applied.iter().any(
            |a| matches!(&a.action, Action::Resize { table, .. } if *table == current)
                && a.error.as_deref().is_some_and(|e| e.contains("skipped"))
        ),
        "{:?}",
        about(&current)
    );
    assert_eq!(
        write_capacity(&direct, &current).await,
        Some(1000),
        "the table DynamoDB calls current was scaled down: {:?}",
        about(&current)
    );
    assert!(
        write_capacity(&direct, &live).await.is_some(),
        "a table DynamoDB calls live was deleted: {:?}",
        about(&live)
    );
    for t in [&current, &live] {
        let _ = direct.delete_table().table_name(t).send().await;
    }
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn a_host_clock_behind_dynamodbs_does_not_recreate_an_expired_table() {
    let stack = tidemark_tests::stack().await;
    // DynamoDB's clock three hours ahead of this host's.
    let proxy = start_limits_proxy(&stack, |c| {
        c.clock_offset = Some(tidemark_limits::clock::Offset(3 * 3600));
    })
    .await;
    let prefix = unique_name("clockbehind").replace('-', "_");
    let p = policy(&prefix, 2);
    // Live by this host's clock (ended at most 90 minutes ago, kept two
    // hours), expired by DynamoDB's.
    let gone = p
        .naming
        .table_for((Utc::now() - chrono::Duration::minutes(90)).timestamp_millis());
    let m = TableManager::new(stack.dynamodb_at(&proxy.url), p);
    let handler = CreateMissingTables::new(m);
    let answer = handler.on_missing(&gone).await;
    assert!(
        matches!(&answer, MissingTableAction::Reject(msg) if msg.contains("past retention")),
        "{answer:?}"
    );
    assert_eq!(
        write_capacity(&stack.dynamodb(), &gone).await,
        None,
        "an expired table was created again"
    );
}
