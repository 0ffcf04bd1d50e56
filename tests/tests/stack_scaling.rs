//! Table auto scaling per tier against Application Auto Scaling (moto
//! implements it): a table entering a tier with `autoscale` gets its
//! scalable target and Tidemark's target-tracking policy, the change of
//! tier updates them, a tier without auto scaling and expiry remove them.
//!
//! Needs the local stack: run with the `stack` feature (see docs/testing.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use aws_sdk_applicationautoscaling::types::{ScalableDimension, ServiceNamespace};
use chrono::{DateTime, Utc};
use tidemark_schema::period::{Billing, CapacityTiers, Period};
use tidemark_schema::route::RouterConfig;
use tidemark_tests::unique_name;
use tidemark_worker::config::ExpiryAction;
use tidemark_worker::maintenance::{RoundKind, SCALING_POLICY_NAME, TableManager, TablePolicy};

/// The write side's (min, max) and Tidemark's policy target, as
/// Application Auto Scaling reports them.
async fn write_scaling(
    aas: &aws_sdk_applicationautoscaling::Client,
    table: &str,
) -> Option<(i32, i32, Option<f64>)> {
    let id = format!("table/{table}");
    let targets = aas
        .describe_scalable_targets()
        .service_namespace(ServiceNamespace::Dynamodb)
        .resource_ids(&id)
        .scalable_dimension(ScalableDimension::DynamoDbTableWriteCapacityUnits)
        .send()
        .await
        .unwrap();
    let t = targets.scalable_targets().first()?;
    let policies = aas
        .describe_scaling_policies()
        .service_namespace(ServiceNamespace::Dynamodb)
        .resource_id(&id)
        .scalable_dimension(ScalableDimension::DynamoDbTableWriteCapacityUnits)
        .send()
        .await
        .unwrap();
    let target = policies
        .scaling_policies()
        .iter()
        .find(|p| p.policy_name() == SCALING_POLICY_NAME)
        .and_then(|p| p.target_tracking_scaling_policy_configuration())
        .map(|c| c.target_value());
    Some((t.min_capacity(), t.max_capacity(), target))
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn a_tables_auto_scaling_follows_its_tier_and_goes_at_expiry() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let aas = stack.autoscaling();
    let prefix = unique_name("scale").replace('-', "_");
    let mut router = RouterConfig::with_prefix(&prefix);
    router.period = Period::Hour;
    router.retention = Duration::from_secs(3 * 3600);
    let tiers: CapacityTiers = serde_json::from_value(serde_json::json!({
        "prebuild": { "read": 5, "write": 10 },
        "active": { "read": 5, "write": 10,
            "autoscale": { "write": { "min": 5, "max": 50, "target_utilization": 70 } } },
        "cooling": { "read": 5, "write": 10,
            "autoscale": { "write": { "min": 2, "max": 20, "target_utilization": 50 } } },
        "frozen": { "read": 1, "write": 1,
            "autoscale": { "write": { "min": 1, "max": 5 } } },
    }))
    .unwrap();
    let policy = TablePolicy::new(&router, tiers, Billing::Provisioned, ExpiryAction::Delete);
    let m = TableManager::new(ddb.clone(), policy).with_autoscaling(aas.clone());
    let now: DateTime<Utc> = Utc::now();
    let period = Period::Hour.containing(now.timestamp_millis());
    let table = m.policy().naming.name_of(&period);
    let next = m.policy().naming.name_of(&period.next());
    let at = |ms: i64| DateTime::<Utc>::from_timestamp_millis(ms).unwrap();

    // Active: created, then its write target and policy registered.
    for _ in 0..2 {
        let applied = m.round(now, RoundKind::Rotate, false).await.unwrap();
        assert!(applied.iter().all(|a| a.error.is_none()), "{applied:?}");
    }
    assert_eq!(
        write_scaling(&aas, &table).await,
        Some((5, 50, Some(70.0))),
        "the active tier's"
    );

    // Cooling (five minutes past the period's end): updated.
    let cooling = at(period.end_ms() + 5 * 60_000);
    let applied = m.round(cooling, RoundKind::Rotate, false).await.unwrap();
    assert!(applied.iter().all(|a| a.error.is_none()), "{applied:?}");
    assert_eq!(
        write_scaling(&aas, &table).await,
        Some((2, 20, Some(50.0))),
        "the cooling tier's: {applied:?}"
    );

    // Cold (no auto scaling in the tier): removed, and the table at the
    // tier's fixed capacity.
    let cold = at(period.end_ms() + 30 * 60_000);
    let applied = m.round(cold, RoundKind::Rotate, false).await.unwrap();
    assert!(applied.iter().all(|a| a.error.is_none()), "{applied:?}");
    assert_eq!(write_scaling(&aas, &table).await, None, "{applied:?}");

    // Frozen, then expired: registered again, then removed before the
    // table goes.
    let frozen = at(period.end_ms() + 2 * 3_600_000);
    m.round(frozen, RoundKind::Rotate, false).await.unwrap();
    assert_eq!(write_scaling(&aas, &table).await, Some((1, 5, Some(70.0))));
    let expired = at(period.end_ms() + 4 * 3_600_000);
    let applied = m.round(expired, RoundKind::Rotate, false).await.unwrap();
    assert!(
        applied.iter().any(|a| a.action.kind() == "remove_scaling"
            && a.action.table() == table
            && a.error.is_none()),
        "{applied:?}"
    );
    assert_eq!(write_scaling(&aas, &table).await, None);

    for t in [&table, &next] {
        for side in [
            ScalableDimension::DynamoDbTableWriteCapacityUnits,
            ScalableDimension::DynamoDbTableReadCapacityUnits,
        ] {
            let _ = aas
                .deregister_scalable_target()
                .service_namespace(ServiceNamespace::Dynamodb)
                .resource_id(format!("table/{t}"))
                .scalable_dimension(side)
                .send()
                .await;
        }
        let _ = ddb.delete_table().table_name(t).send().await;
    }
}
