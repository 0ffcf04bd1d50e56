//! Issue 22's maintenance guarantees against DynamoDB (moto):
//! - a round *reconciles*: TTL, capacity, PITR and the prefix tag changed
//!   behind the worker's back are set again by the next round;
//! - every table the worker adopts is checked against the key schema it
//!   needs, and a mismatch is a start-up error naming the table, the schema
//!   found and the schema expected (the deployed template once keyed the
//!   coordinator table `pk` instead of `leaseKey`).
//!
//! Needs the local stack: run with the `stack` feature (see docs/testing.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use aws_sdk_dynamodb::types::{
    PointInTimeRecoverySpecification, PointInTimeRecoveryStatus, ProvisionedThroughput,
    TimeToLiveSpecification, TimeToLiveStatus,
};
use chrono::Utc;
use tidemark_schema::period::{Billing, Capacity, CapacityTiers, Period};
use tidemark_schema::route::RouterConfig;
use tidemark_tests::unique_name;
use tidemark_tests::worker::{config, kinesis_source, sdk, test_toml};
use tidemark_worker::config::ExpiryAction;
use tidemark_worker::maintenance::{
    Action, PREFIX_TAG, RoundKind, TableManager, TablePolicy, TablesError,
};
use tidemark_worker::{Worker, WorkerError};

async fn ttl_of(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Option<String> {
    let out = ddb
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .unwrap();
    let d = out.time_to_live_description()?;
    matches!(
        d.time_to_live_status(),
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
    )
    .then(|| d.attribute_name().unwrap_or_default().to_string())
}

async fn pitr_of(ddb: &aws_sdk_dynamodb::Client, table: &str) -> bool {
    let out = ddb
        .describe_continuous_backups()
        .table_name(table)
        .send()
        .await
        .unwrap();
    out.continuous_backups_description()
        .and_then(|c| c.point_in_time_recovery_description())
        .and_then(|p| p.point_in_time_recovery_status())
        == Some(&PointInTimeRecoveryStatus::Enabled)
}

async fn prefix_tag_of(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Option<String> {
    let arn = ddb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .table()
        .unwrap()
        .table_arn()
        .unwrap()
        .to_string();
    let tags = ddb
        .list_tags_of_resource()
        .resource_arn(arn)
        .send()
        .await
        .unwrap();
    tags.tags()
        .iter()
        .find(|t| t.key() == PREFIX_TAG)
        .map(|t| t.value().to_string())
}

async fn capacity_of(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Capacity {
    let d = ddb.describe_table().table_name(table).send().await.unwrap();
    let t = d.table().unwrap().provisioned_throughput().unwrap();
    Capacity {
        read: t.read_capacity_units().unwrap() as u64,
        write: t.write_capacity_units().unwrap() as u64,
    }
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn a_round_restores_ttl_capacity_pitr_and_leaves_a_table_without_our_tag_alone() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let prefix = unique_name("drift").replace('-', "_");
    let mut router = RouterConfig::with_prefix(&prefix);
    router.period = Period::Day;
    router.ttl_attribute = Some("expires_at".into());
    let tiers = CapacityTiers::default();
    let mut policy = TablePolicy::new(&router, tiers, Billing::Provisioned, ExpiryAction::Delete);
    policy.pitr = true;
    let m = TableManager::new(ddb.clone(), policy);
    let now = Utc::now();
    let table = m
        .policy()
        .naming
        .name_of(&Period::Day.containing(now.timestamp_millis()));

    // First round creates the table (tagged, TTL on); the second turns PITR
    // on; then nothing is left to do.
    let first = m.round(now, RoundKind::Rotate, false).await.unwrap();
    assert!(first.iter().all(|a| a.error.is_none()), "{first:?}");
    let second = m.round(now, RoundKind::Rotate, false).await.unwrap();
    assert!(
        second.iter().any(|a| a.action
            == Action::SetPitr {
                table: table.clone(),
                enabled: true
            }),
        "{second:?}"
    );
    let third = m.round(now, RoundKind::Rotate, false).await.unwrap();
    assert!(
        third.iter().all(|a| a.action.table() != table),
        "a table in its desired state needs nothing: {third:?}"
    );
    assert_eq!(ttl_of(&ddb, &table).await.as_deref(), Some("expires_at"));
    assert!(pitr_of(&ddb, &table).await);
    assert_eq!(prefix_tag_of(&ddb, &table).await, Some(prefix.clone()));
    assert_eq!(capacity_of(&ddb, &table).await, tiers.active);

    // Behind the worker's back: TTL off, capacity cut, PITR off.
    ddb.update_time_to_live()
        .table_name(&table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(false)
                .attribute_name("expires_at")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    ddb.update_table()
        .table_name(&table)
        .provisioned_throughput(
            ProvisionedThroughput::builder()
                .read_capacity_units(5)
                .write_capacity_units(5)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    ddb.update_continuous_backups()
        .table_name(&table)
        .point_in_time_recovery_specification(
            PointInTimeRecoverySpecification::builder()
                .point_in_time_recovery_enabled(false)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let arn = m
        .list(now)
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == table)
        .unwrap()
        .arn;
    assert_eq!(ttl_of(&ddb, &table).await, None);

    let repaired = m.round(now, RoundKind::Rotate, false).await.unwrap();
    assert!(repaired.iter().all(|a| a.error.is_none()), "{repaired:?}");
    let kinds: Vec<&str> = repaired
        .iter()
        .filter(|a| a.action.table() == table)
        .map(|a| a.action.kind())
        .collect();
    assert_eq!(kinds, ["resize", "set_ttl", "set_pitr"], "{repaired:?}");
    assert_eq!(ttl_of(&ddb, &table).await.as_deref(), Some("expires_at"));
    assert!(pitr_of(&ddb, &table).await);
    assert_eq!(prefix_tag_of(&ddb, &table).await, Some(prefix.clone()));
    assert_eq!(capacity_of(&ddb, &table).await, tiers.active);

    // Without the prefix tag the table is not ours: left alone, not
    // adopted, however far it drifts.
    ddb.untag_resource()
        .resource_arn(&arn)
        .tag_keys(PREFIX_TAG)
        .send()
        .await
        .unwrap();
    ddb.update_time_to_live()
        .table_name(&table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(false)
                .attribute_name("expires_at")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let foreign = m.round(now, RoundKind::Rotate, false).await.unwrap();
    assert!(
        foreign.iter().all(|a| a.action.table() != table),
        "a table without our tag was changed: {foreign:?}"
    );
    assert_eq!(prefix_tag_of(&ddb, &table).await, None);
    assert_eq!(ttl_of(&ddb, &table).await, None);

    for t in m.list(now).await.unwrap() {
        ddb.delete_table().table_name(&t.name).send().await.ok();
    }
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn a_period_table_with_other_keys_is_refused_naming_found_and_expected() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let prefix = unique_name("keys").replace('-', "_");
    let mut router = RouterConfig::with_prefix(&prefix);
    router.period = Period::Day;
    let policy = TablePolicy::new(
        &router,
        CapacityTiers::default(),
        Billing::Provisioned,
        ExpiryAction::Delete,
    );
    let m = TableManager::new(ddb.clone(), policy);
    let now = Utc::now();
    let table = m
        .policy()
        .naming
        .name_of(&Period::Day.containing(now.timestamp_millis()));
    tidemark_tests::create_hash_only(&ddb, &table, "id").await;
    let err = m.round(now, RoundKind::Rotate, false).await.unwrap_err();
    assert!(matches!(err, TablesError::KeySchema(_)), "{err}");
    let text = err.to_string();
    assert!(text.contains(&table), "{text}");
    assert!(
        text.contains("hash key id (S), no sort key"),
        "found: {text}"
    );
    assert!(
        text.contains("hash key pk (S), sort key sk (S)"),
        "expected: {text}"
    );
    ddb.delete_table().table_name(&table).send().await.ok();
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn the_worker_refuses_to_start_on_a_coordinator_or_lease_table_keyed_pk() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let name = unique_name("keys-start");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let sdk = sdk(&stack);
    tidemark_tests::create_stream(&stack.kinesis(), &name, 1).await;
    let config = config(
        &dir,
        &test_toml(&kinesis_source(&name), &name, &dead, "127.0.0.1:0"),
    );

    // The coordinator table as the template once made it.
    let coordinator = format!("{name}-coordinator");
    tidemark_tests::create_hash_only(&ddb, &coordinator, "pk").await;
    let err = Box::pin(Worker::build(&config, &sdk)).await.unwrap_err();
    assert!(matches!(err, WorkerError::MaintenanceLease(_)), "{err}");
    let text = err.to_string();
    assert!(text.contains(&coordinator), "{text}");
    assert!(text.contains("hash key pk (S), no sort key"), "{text}");
    assert!(
        text.contains("hash key leaseKey (S), no sort key"),
        "{text}"
    );
    ddb.delete_table()
        .table_name(&coordinator)
        .send()
        .await
        .unwrap();

    // The lease table: the Kinesis source refuses it when it starts.
    let leases = format!("{name}-leases");
    tidemark_tests::create_hash_only(&ddb, &leases, "pk").await;
    let worker = Box::pin(Worker::build(&config, &sdk)).await.unwrap();
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        worker.run(std::future::pending()),
    )
    .await
    .expect("a lease table with other keys stops the worker at once")
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&leases), "{text}");
    assert!(
        text.contains("hash key leaseKey (S), no sort key"),
        "{text}"
    );
    for t in [leases, coordinator] {
        ddb.delete_table().table_name(&t).send().await.ok();
    }
}

/// One unsigned S3 request to moto (which routes on the credential scope
/// and does not check signatures): status and body.
async fn s3(stack: &tidemark_tests::LocalStack, method: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // moto serves S3 on the same port as DynamoDB (the emulator's, not the
    // limits proxy's: it only knows DynamoDB's API).
    let host = stack
        .dynamodb_direct_url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let mut conn = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\
         X-Amz-Date: 20260101T000000Z\r\nX-Amz-Content-Sha256: UNSIGNED-PAYLOAD\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
         SignedHeaders=host, Signature=0\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn export_mode_turns_pitr_on_exports_to_s3_and_deletes_only_after_completion() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let prefix = unique_name("exp").replace('-', "_");
    let bucket = unique_name("tidemark-archive");
    let (status, body) = s3(&stack, "PUT", &format!("/{bucket}")).await;
    assert_eq!(status, 200, "{body}");
    let mut router = RouterConfig::with_prefix(&prefix);
    router.period = Period::Day;
    router.retention = std::time::Duration::from_secs(3 * 86_400);
    let mut policy = TablePolicy::new(
        &router,
        CapacityTiers::default(),
        Billing::Provisioned,
        ExpiryAction::Export,
    );
    policy.export.bucket = bucket.clone();
    policy.export.prefix = Some("archive/".into());
    let m = TableManager::new(ddb.clone(), policy);
    // A table ten days old: past its three-day retention.
    let now = Utc::now();
    let old = Period::Day.containing(now.timestamp_millis() - 10 * 86_400_000);
    let table = m.policy().naming.name_of(&old);
    m.create(&table, Some(Capacity { read: 1, write: 1 }), None)
        .await
        .unwrap();

    let mut kinds = Vec::new();
    for _ in 0..4 {
        let applied = m.round(now, RoundKind::Rotate, false).await.unwrap();
        assert!(applied.iter().all(|a| a.error.is_none()), "{applied:?}");
        kinds.extend(
            applied
                .iter()
                .filter(|a| a.action.table() == table)
                .map(|a| a.action.kind()),
        );
    }
    assert_eq!(
        kinds,
        ["set_pitr", "export", "delete"],
        "in this order, once each"
    );
    assert!(
        m.list(now).await.unwrap().iter().all(|t| t.name != table),
        "deleted once exported"
    );
    let (status, listing) = s3(
        &stack,
        "GET",
        &format!("/{bucket}?list-type=2&prefix=archive/{table}/"),
    )
    .await;
    assert_eq!(status, 200, "{listing}");
    assert!(
        listing.contains("AWSDynamoDB"),
        "the export's files are in S3: {listing}"
    );
    for t in m.list(now).await.unwrap() {
        ddb.delete_table().table_name(&t.name).send().await.ok();
    }
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test]
async fn a_changed_shard_count_on_a_table_with_items_is_refused_at_start() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let name = unique_name("layout");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let sdk = sdk(&stack);
    let queue = tidemark_tests::create_queue(&stack.sqs(), &name, false).await;
    let source = format!("[source]\nkind = \"sqs\"\nqueue_url = \"{queue}\"\n");
    let four = test_toml(&source, &name, &dead, "127.0.0.1:0");
    assert!(four.contains("shards = 4"));
    let eight = four.replace("shards = 4", "shards = 8");

    // Built at 4 shards: the current table is created and records its layout.
    drop(
        Box::pin(Worker::build(&config(&dir, &four), &sdk))
            .await
            .unwrap(),
    );
    let table = format!(
        "{name}_{}",
        Period::Day
            .containing(Utc::now().timestamp_millis())
            .label()
    );
    // Empty, it simply takes the new layout.
    drop(
        Box::pin(Worker::build(&config(&dir, &eight), &sdk))
            .await
            .unwrap(),
    );
    // Back to 4 (empty again: allowed), then an item is written.
    drop(
        Box::pin(Worker::build(&config(&dir, &four), &sdk))
            .await
            .unwrap(),
    );
    ddb.put_item()
        .table_name(&table)
        .item("pk", AttributeValue::S("0#2026-11-24T10".into()))
        .item("sk", AttributeValue::S("d1#1".into()))
        .send()
        .await
        .unwrap();
    let err = Box::pin(Worker::build(&config(&dir, &eight), &sdk))
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorkerError::Tables(TablesError::LayoutChanged { .. })),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&table), "{text}");
    assert!(
        text.contains("bucket=hour/shards=4/strategy=time_bucket"),
        "{text}"
    );
    assert!(
        text.contains("bucket=hour/shards=8/strategy=time_bucket"),
        "{text}"
    );
    assert!(
        text.contains("Changing the shard count"),
        "says where the procedure is: {text}"
    );
    // The unchanged config still starts.
    drop(
        Box::pin(Worker::build(&config(&dir, &four), &sdk))
            .await
            .unwrap(),
    );
    for t in [table, format!("{name}-coordinator")] {
        ddb.delete_table().table_name(&t).send().await.ok();
    }
}

/// Confirms every action (a round run by hand).
struct Confirm;

impl tidemark_worker::maintenance::ActionGuard for Confirm {
    fn confirm<'a>(
        &'a self,
        _action: &'a Action,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// `maintenance.late_lift = "on_demand"`, through the limits proxy: a late
/// backlog on a frozen 1 WCU table switches it to on-demand (its write
/// throughput capped at the lift budget), the lift recorded in the
/// coordinator table, which `status` lists; once no backlog is reported
/// for the hold time, the table goes back to provisioned at its tier and
/// the record goes.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn an_on_demand_lift_switches_a_frozen_table_and_back() {
    use aws_sdk_dynamodb::types::BillingMode;
    use std::collections::BTreeMap;
    use tidemark_worker::maintenance::lift::{self, Backlog};
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let prefix = unique_name("odlift").replace('-', "_");
    let mut router = RouterConfig::with_prefix(&prefix);
    router.period = Period::Day;
    router.retention = std::time::Duration::from_secs(3 * 86_400);
    let tiers = CapacityTiers::default();
    let mut policy = TablePolicy::new(&router, tiers, Billing::Provisioned, ExpiryAction::Delete);
    policy.late_lift.on_demand = true;
    policy.late_lift.hold = std::time::Duration::from_secs(60);
    let coordinator = format!("{prefix}-coordinator");
    tidemark_tests::create_hash_only(&ddb, &coordinator, "leaseKey").await;
    let m = TableManager::new(ddb.clone(), policy).with_coordinator(coordinator.clone());
    let now = Utc::now();
    // Two days old: frozen at 1 WCU, as maintenance leaves it.
    let old = now - chrono::Duration::days(2);
    let table = m
        .policy()
        .naming
        .name_of(&Period::Day.containing(old.timestamp_millis()));
    tidemark_tests::create_table(
        &ddb,
        &table,
        true,
        tidemark_tests::TableCapacity::Provisioned {
            read: i64::try_from(tiers.frozen.read).unwrap(),
            write: i64::try_from(tiers.frozen.write).unwrap(),
        },
    )
    .await;
    let arn = ddb
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap()
        .table()
        .and_then(|t| t.table_arn())
        .unwrap()
        .to_string();
    ddb.tag_resource()
        .resource_arn(arn)
        .tags(
            aws_sdk_dynamodb::types::Tag::builder()
                .key(PREFIX_TAG)
                .value(&prefix)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let billing = |ddb: aws_sdk_dynamodb::Client, table: String| async move {
        let d = ddb
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .unwrap();
        let t = d.table().unwrap();
        (
            t.billing_mode_summary()
                .and_then(|b| b.billing_mode())
                .cloned()
                .unwrap_or(BillingMode::Provisioned),
            t.provisioned_throughput()
                .and_then(|p| p.write_capacity_units()),
        )
    };
    let backlog: BTreeMap<String, Backlog> = [(
        table.clone(),
        Backlog {
            items: 2_000,
            wcu: 6_000,
        },
    )]
    .into();
    let applied = m
        .round_guarded(now, RoundKind::Rotate, false, &Confirm, &backlog)
        .await
        .unwrap();
    let ours: Vec<&tidemark_worker::maintenance::Applied> = applied
        .iter()
        .filter(|a| a.action.table() == table)
        .collect();
    assert!(
        matches!(&ours[..], [a] if matches!(a.action, Action::LiftOnDemand { max_write: 1000, .. }) && a.error.is_none()),
        "{ours:?}"
    );
    let (mode, _) = billing(ddb.clone(), table.clone()).await;
    assert_eq!(mode, BillingMode::PayPerRequest, "switched to on-demand");
    let lifts = lift::read(&ddb, &coordinator).await.unwrap();
    assert!(lifts[&table].on_demand, "{lifts:?}");
    // The backlog is gone: held for the hold time, then back to the tier.
    let none = BTreeMap::new();
    let held = m
        .round_guarded(now, RoundKind::Rotate, false, &Confirm, &none)
        .await
        .unwrap();
    assert!(
        !held.iter().any(|a| a.action.table() == table),
        "held: {held:?}"
    );
    let later = now + chrono::Duration::seconds(90);
    let ended = m
        .round_guarded(later, RoundKind::Rotate, false, &Confirm, &none)
        .await
        .unwrap();
    assert!(
        ended.iter().any(|a| a.action.table() == table
            && matches!(a.action, Action::EndOnDemandLift { .. })
            && a.error.is_none()),
        "{ended:?}"
    );
    let (mode, write) = billing(ddb.clone(), table.clone()).await;
    assert_eq!(mode, BillingMode::Provisioned, "back to provisioned");
    assert_eq!(write, Some(i64::try_from(tiers.frozen.write).unwrap()));
    assert!(lift::read(&ddb, &coordinator).await.unwrap().is_empty());
    let _ = ddb.delete_table().table_name(&table).send().await;
}

/// One unsigned S3 GET to moto, the body as bytes (an export's data file
/// is gzip); `None` unless 200.
async fn s3_bytes(stack: &tidemark_tests::LocalStack, path: &str) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = stack
        .dynamodb_direct_url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let mut conn = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\
         X-Amz-Date: 20260101T000000Z\r\nX-Amz-Content-Sha256: UNSIGNED-PAYLOAD\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
         SignedHeaders=host, Signature=0\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&answer[..split]).to_string();
    let body = answer[split + 4..].to_vec();
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "a chunked answer: {head}"
    );
    Some(body)
}

/// The guard band's promise, against moto's export: events are accepted
/// until the expiry guard before their table expires (one second later
/// they are refused, `expired_period`), and maintenance exports the table
/// no sooner than the guard after the expiry. Every item written (acknowledged)
/// before the refusal is in the export, and nothing else is. (moto exports
/// the table as it is when asked, ignoring the point in time; the test
/// checks the ordering: every acknowledged write lands before the export is
/// asked, which is when a real export's point in time is taken.)
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn every_item_acknowledged_before_the_guard_is_in_the_export() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use std::collections::BTreeSet;
    use std::io::Read as _;
    use tidemark_schema::route::RouteCache;
    use tidemark_schema::{Origin, Router};
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let prefix = unique_name("guard").replace('-', "_");
    let bucket = unique_name("tidemark-guard");
    let (status, body) = s3(&stack, "PUT", &format!("/{bucket}")).await;
    assert_eq!(status, 200, "{body}");
    let mut router = RouterConfig::with_prefix(&prefix);
    router.period = Period::Day;
    router.retention = std::time::Duration::from_secs(3 * 86_400);
    let guard = chrono::Duration::from_std(router.expiry_guard).unwrap();
    let mut policy = TablePolicy::new(
        &router,
        CapacityTiers::default(),
        Billing::Provisioned,
        ExpiryAction::Export,
    );
    policy.export.bucket = bucket.clone();
    policy.export.prefix = Some("archive/".into());
    let m = TableManager::new(ddb.clone(), policy);
    // A day five days ago: expired (retention three days) more than the
    // guard ago by now.
    let now = Utc::now();
    let day = Period::Day.containing(now.timestamp_millis() - 5 * 86_400_000);
    let table = m.policy().naming.name_of(&day);
    m.create(
        &table,
        Some(Capacity {
            read: 5,
            write: 100,
        }),
        None,
    )
    .await
    .unwrap();
    let expiry = chrono::DateTime::from_timestamp_millis(day.end_ms()).unwrap()
        + chrono::Duration::from_std(router.retention).unwrap();
    assert!(expiry + guard <= now, "the table is past its guard");
    let events: Vec<String> = (0..60)
        .map(|i| {
            let ts = chrono::DateTime::from_timestamp_millis(day.start_ms + i * 60_000).unwrap();
            format!(
                r#"{{"deviceId":"d{}","timestamp":"{}","eventId":"e{i}"}}"#,
                i % 7,
                ts.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            )
        })
        .collect();
    let r = Router::new(router.clone()).unwrap();
    let origin = Origin::Sqs {
        queue: "q".into(),
        message_id: "m".into(),
        index: 0,
    };
    let route = |e: &String, at: chrono::DateTime<Utc>| {
        r.route(e.as_bytes(), &origin, 0, at, &mut RouteCache::default())
    };
    // The first 50 arrive a second before the guard: accepted and written.
    let accepted_at = expiry - guard - chrono::Duration::seconds(1);
    let mut written = BTreeSet::new();
    let mut items = Vec::new();
    for e in &events[..50] {
        let routed = route(e, accepted_at)
            .expect("accepted before the guard")
            .new;
        assert_eq!(routed.table.as_str(), table);
        let (pk, sk) = (routed.key.pk().to_owned(), routed.key.sk().to_owned());
        written.insert((pk.clone(), sk.clone()));
        items.push(
            [
                ("pk".to_string(), AttributeValue::S(pk)),
                ("sk".to_string(), AttributeValue::S(sk)),
            ]
            .into(),
        );
    }
    tidemark_tests::put_items(&ddb, &table, items).await;
    // The last 10 a second after the guard began: refused, never written.
    let refused_at = expiry - guard + chrono::Duration::seconds(1);
    for e in &events[50..] {
        let err = route(e, refused_at).unwrap_err();
        assert_eq!(
            err.reason(),
            tidemark_schema::Reason::ExpiredPeriod,
            "{err}"
        );
    }
    // Not exported while inside the guard after expiry; then exported.
    let inside = m
        .round(
            expiry + guard - chrono::Duration::seconds(1),
            RoundKind::Rotate,
            true,
        )
        .await
        .unwrap();
    assert!(
        !inside
            .iter()
            .any(|a| a.action.table() == table && a.action.kind() == "export"),
        "{inside:?}"
    );
    let mut kinds = Vec::new();
    for _ in 0..4 {
        let applied = m.round(now, RoundKind::Rotate, false).await.unwrap();
        assert!(applied.iter().all(|a| a.error.is_none()), "{applied:?}");
        kinds.extend(
            applied
                .iter()
                .filter(|a| a.action.table() == table)
                .map(|a| a.action.kind()),
        );
    }
    assert_eq!(kinds, ["set_pitr", "export", "delete"]);
    let (status, listing) = s3(
        &stack,
        "GET",
        &format!("/{bucket}?list-type=2&prefix=archive/{table}/"),
    )
    .await;
    assert_eq!(status, 200, "{listing}");
    let keys: Vec<&str> = listing
        .split("<Key>")
        .skip(1)
        .filter_map(|s| s.split("</Key>").next())
        .filter(|k| k.contains("/data/") && k.ends_with(".gz"))
        .collect();
    assert!(!keys.is_empty(), "no data file in the export: {listing}");
    let mut exported = BTreeSet::new();
    for key in keys {
        let gz = s3_bytes(&stack, &format!("/{bucket}/{key}")).await.unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let s = |k: &str| v["Item"][k]["S"].as_str().unwrap().to_string();
            exported.insert((s("pk"), s("sk")));
        }
    }
    assert_eq!(exported.len(), 50, "every acknowledged item, once");
    assert_eq!(exported, written);
}
