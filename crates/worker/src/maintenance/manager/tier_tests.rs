//! A tier's cost settings (on-demand ceilings, table class) against a
//! mocked DynamoDB. moto stores neither `OnDemandThroughput` nor
//! `TableClass` (its CreateTable and UpdateTable drop them), so these tests
//! check the requests the worker sends, with `aws-smithy-mocks`, and feed
//! the table's answers back as DynamoDB gives them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::create_table::{CreateTableInput, CreateTableOutput};
use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
use aws_sdk_dynamodb::operation::describe_time_to_live::DescribeTimeToLiveOutput;
use aws_sdk_dynamodb::operation::list_tables::ListTablesOutput;
use aws_sdk_dynamodb::operation::list_tags_of_resource::ListTagsOfResourceOutput;
use aws_sdk_dynamodb::operation::tag_resource::TagResourceOutput;
use aws_sdk_dynamodb::operation::update_table::{
    UpdateTableError, UpdateTableInput, UpdateTableOutput,
};
use aws_sdk_dynamodb::types::error::LimitExceededException;
use aws_sdk_dynamodb::types::{
    BillingMode, BillingModeSummary, OnDemandThroughput, ProvisionedThroughputDescription,
    TableClass, TableClassSummary, TableDescription, TableStatus, Tag,
};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use chrono::{DateTime, Utc};
use tidemark_schema::period::{Billing, CapacityTiers, Period};
use tidemark_schema::route::RouterConfig;

use super::TableManager;
use crate::config::ExpiryAction;
use crate::maintenance::drift::{RoundKind, TablePolicy};
use crate::maintenance::tags::{LAYOUT_TAG, PREFIX_TAG};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

fn policy(tiers: &str, billing: Billing) -> TablePolicy {
    let mut router = RouterConfig::with_prefix("iot");
    router.period = Period::Day;
    router.ttl_attribute = None;
    let tiers: CapacityTiers = toml::from_str(tiers).unwrap();
    TablePolicy::new(&router, tiers, billing, ExpiryAction::Delete)
}

/// What the fake DynamoDB was asked to change.
#[derive(Default)]
struct Seen {
    creates: Vec<CreateTableInput>,
    updates: Vec<UpdateTableInput>,
    tags: BTreeMap<String, String>,
}

/// One existing table as DescribeTable reports it (or none), answering
/// every call a round makes; UpdateTable calls that change the table class
/// are refused when `refuse_class` is set.
fn fake(
    policy: &TablePolicy,
    table: Option<TableDescription>,
    refuse_class: bool,
) -> (Client, Arc<Mutex<Seen>>) {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    seen.lock().unwrap().tags = BTreeMap::from([
        (PREFIX_TAG.to_string(), policy.naming.prefix.clone()),
        (LAYOUT_TAG.to_string(), policy.layout.clone()),
    ]);
    let spec = policy.key_spec();
    let names: Vec<String> = table
        .iter()
        .filter_map(|t| t.table_name().map(str::to_string))
        .collect();
    let list = mock!(Client::list_tables)
        .sequence()
        .output(move || {
            ListTablesOutput::builder()
                .set_table_names(Some(names.clone()))
                .build()
        })
        .repeatedly()
        .build();
    let described = table.clone();
    let describe = mock!(Client::describe_table)
        .sequence()
        .output(move || {
            let t = described.clone().unwrap_or_else(|| {
                TableDescription::builder()
                    .table_status(TableStatus::Active)
                    .set_key_schema(Some(spec.elements().unwrap()))
                    .set_attribute_definitions(Some(spec.definitions().unwrap()))
                    .build()
            });
            DescribeTableOutput::builder().table(t).build()
        })
        .repeatedly()
        .build();
    let s = seen.clone();
    let tags = mock!(Client::list_tags_of_resource)
        .sequence()
        .output(move || {
            let tags = s.lock().unwrap().tags.clone();
            ListTagsOfResourceOutput::builder()
                .set_tags(Some(
                    tags.into_iter()
                        .map(|(k, v)| Tag::builder().key(k).value(v).build().unwrap())
                        .collect(),
                ))
                .build()
        })
        .repeatedly()
        .build();
    let s = seen.clone();
    let tag = mock!(Client::tag_resource)
        .match_requests(move |r| {
            let mut s = s.lock().unwrap();
            for t in r.tags() {
                s.tags.insert(t.key().to_string(), t.value().to_string());
            }
            true
        })
        .sequence()
        .output(|| TagResourceOutput::builder().build())
        .repeatedly()
        .build();
    let ttl = mock!(Client::describe_time_to_live)
        .sequence()
        .output(|| DescribeTimeToLiveOutput::builder().build())
        .repeatedly()
        .build();
    let s = seen.clone();
    let create = mock!(Client::create_table)
        .match_requests(move |r| {
            s.lock().unwrap().creates.push(r.clone());
            true
        })
        .sequence()
        .output(|| CreateTableOutput::builder().build())
        .repeatedly()
        .build();
    let s = seen.clone();
    let refused = mock!(Client::update_table)
        .match_requests(move |r| {
            s.lock().unwrap().updates.push(r.clone());
            refuse_class && r.table_class().is_some()
        })
        .sequence()
        .error(|| {
            UpdateTableError::LimitExceededException(
                LimitExceededException::builder()
                    .message("table class updated too often")
                    .build(),
            )
        })
        .repeatedly()
        .build();
    let update = mock!(Client::update_table)
        .sequence()
        .output(|| UpdateTableOutput::builder().build())
        .repeatedly()
        .build();
    let client = mock_client!(
        aws_sdk_dynamodb,
        RuleMode::MatchAny,
        [
            &list, &describe, &tags, &tag, &ttl, &create, &refused, &update
        ]
    );
    (client, seen)
}

fn described(
    policy: &TablePolicy,
    name: &str,
) -> aws_sdk_dynamodb::types::builders::TableDescriptionBuilder {
    let spec = policy.key_spec();
    TableDescription::builder()
        .table_name(name)
        .table_arn(format!(
            "arn:aws:dynamodb:us-east-1:123456789012:table/{name}"
        ))
        .table_status(TableStatus::Active)
        .set_key_schema(Some(spec.elements().unwrap()))
        .set_attribute_definitions(Some(spec.definitions().unwrap()))
}

const ON_DEMAND_TIERS: &str = "
prebuild = { read = 300, write = 1000, max_read_units = 500, max_write_units = 4000 }
active = { read = 300, write = 1000, max_read_units = 500, max_write_units = 4000 }
";

/// An on-demand tier's ceiling goes into CreateTable's `OnDemandThroughput`
/// (the active and the prebuilt table both).
#[tokio::test]
async fn an_on_demand_tiers_ceiling_is_in_the_create_table_request() {
    let p = policy(
        ON_DEMAND_TIERS,
        Billing::OnDemand {
            warm_write_units: None,
        },
    );
    let (client, seen) = fake(&p, None, false);
    let m = TableManager::new(client, p);
    let applied = m
        .round(at("2026-11-22T23:50:00Z"), RoundKind::Ensure, false)
        .await
        .unwrap();
    assert!(applied.iter().all(|a| a.error.is_none()), "{applied:?}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.creates.len(), 2, "the active and the prebuilt table");
    for c in &seen.creates {
        assert_eq!(c.billing_mode(), Some(&BillingMode::PayPerRequest));
        let od = c.on_demand_throughput().expect("a ceiling in CreateTable");
        assert_eq!(od.max_write_request_units(), Some(4000), "{c:?}");
        assert_eq!(od.max_read_request_units(), Some(500), "{c:?}");
    }
}

/// Someone raised the ceiling of the active table behind the worker's
/// back: the next round sets it back to the tier's.
#[tokio::test]
async fn reconcile_restores_an_on_demand_ceiling_changed_behind_its_back() {
    let p = policy(
        ON_DEMAND_TIERS,
        Billing::OnDemand {
            warm_write_units: None,
        },
    );
    let table = described(&p, "iot_2026-11-22")
        .billing_mode_summary(
            BillingModeSummary::builder()
                .billing_mode(BillingMode::PayPerRequest)
                .build(),
        )
        .on_demand_throughput(
            OnDemandThroughput::builder()
                .max_write_request_units(40_000)
                .max_read_request_units(500)
                .build(),
        )
        .build();
    let (client, seen) = fake(&p, Some(table), false);
    let m = TableManager::new(client, p);
    let applied = m
        .round(at("2026-11-22T10:00:00Z"), RoundKind::Rotate, false)
        .await
        .unwrap();
    assert!(applied.iter().all(|a| a.error.is_none()), "{applied:?}");
    let seen = seen.lock().unwrap();
    let set: Vec<_> = seen
        .updates
        .iter()
        .filter_map(|u| u.on_demand_throughput())
        .collect();
    assert_eq!(set.len(), 1, "{:?}", seen.updates);
    assert_eq!(set[0].max_write_request_units(), Some(4000));
    assert_eq!(set[0].max_read_request_units(), Some(500));
}

/// A frozen table is moved to the infrequent-access class once; DynamoDB
/// refuses (its limit on class changes): the refusal is recorded and the
/// following rounds do not ask again.
#[tokio::test]
async fn a_refused_class_change_is_requested_once_and_not_repeated() {
    let p = policy(
        "frozen = { read = 1, write = 1, table_class = \"standard_infrequent_access\" }",
        Billing::Provisioned,
    );
    let table = described(&p, "iot_2026-11-10")
        .provisioned_throughput(
            ProvisionedThroughputDescription::builder()
                .read_capacity_units(1)
                .write_capacity_units(1)
                .build(),
        )
        .table_class_summary(
            TableClassSummary::builder()
                .table_class(TableClass::Standard)
                .build(),
        )
        .build();
    let (client, seen) = fake(&p, Some(table), true);
    let m = TableManager::new(client, p);
    for minute in 0..4 {
        let now = at("2026-11-22T10:00:00Z") + chrono::Duration::minutes(minute);
        m.round(now, RoundKind::Rotate, false).await.unwrap();
    }
    let seen = seen.lock().unwrap();
    let asked: Vec<_> = seen
        .updates
        .iter()
        .filter(|u| u.table_name() == Some("iot_2026-11-10"))
        .filter_map(|u| u.table_class())
        .collect();
    assert_eq!(
        asked,
        [&TableClass::StandardInfrequentAccess],
        "asked once, then not again after the refusal: {:?}",
        seen.updates
    );
}

/// A frozen table moves into the infrequent-access class, and a cold one
/// already there (its tier says standard) moves back out.
#[tokio::test]
async fn tables_move_into_and_out_of_the_infrequent_access_class() {
    let p = policy(
        "cold = { read = 100, write = 1, table_class = \"standard\" }\n\
         frozen = { read = 1, write = 1, table_class = \"standard_infrequent_access\" }",
        Billing::Provisioned,
    );
    for (name, from, to, capacity) in [
        (
            "iot_2026-11-10",
            TableClass::Standard,
            TableClass::StandardInfrequentAccess,
            1,
        ),
        (
            "iot_2026-11-21",
            TableClass::StandardInfrequentAccess,
            TableClass::Standard,
            100,
        ),
    ] {
        let table = described(&p, name)
            .provisioned_throughput(
                ProvisionedThroughputDescription::builder()
                    .read_capacity_units(capacity)
                    .write_capacity_units(1)
                    .build(),
            )
            .table_class_summary(TableClassSummary::builder().table_class(from).build())
            .build();
        let (client, seen) = fake(&p, Some(table), false);
        let m = TableManager::new(client, p.clone());
        m.round(at("2026-11-22T10:00:00Z"), RoundKind::Rotate, false)
            .await
            .unwrap();
        let seen = seen.lock().unwrap();
        let asked: Vec<_> = seen
            .updates
            .iter()
            .filter_map(|u| u.table_class())
            .collect();
        assert_eq!(asked, [&to], "{name}: {:?}", seen.updates);
    }
}
