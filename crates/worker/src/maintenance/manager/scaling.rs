//! Table auto scaling through Application Auto Scaling: reading each
//! table's scalable targets and Tidemark's target-tracking policies, and
//! registering, updating and deregistering them (the I/O of the
//! `SetScaling` and `RemoveScaling` actions).

use std::collections::BTreeMap;

use aws_sdk_applicationautoscaling::error::ProvideErrorMetadata;
use aws_sdk_applicationautoscaling::types::{
    MetricType, PolicyType, PredefinedMetricSpecification, ScalableDimension, ServiceNamespace,
    TargetTrackingScalingPolicyConfiguration,
};
use tidemark_schema::period::ScaleRange;
use tracing::{info, warn};

use super::TableManager;
use crate::maintenance::drift::{Registered, Scaling, Side};
use crate::maintenance::error::TablesError;

/// The name of Tidemark's target-tracking policy on each scalable target
/// (names are per target: one name serves every table and side).
pub const POLICY_NAME: &str = "tidemark-target-tracking";

fn dimension(side: Side) -> ScalableDimension {
    match side {
        Side::Read => ScalableDimension::DynamoDbTableReadCapacityUnits,
        Side::Write => ScalableDimension::DynamoDbTableWriteCapacityUnits,
    }
}

fn side_of(d: &ScalableDimension) -> Option<Side> {
    match d {
        ScalableDimension::DynamoDbTableReadCapacityUnits => Some(Side::Read),
        ScalableDimension::DynamoDbTableWriteCapacityUnits => Some(Side::Write),
        _ => None,
    }
}

/// The table and side of a scalable resource (`table/<name>` and its
/// dimension); `None` for anything else (a GSI, another service's).
fn table_side<'a>(resource_id: &'a str, d: &ScalableDimension) -> Option<(&'a str, Side)> {
    Some((resource_id.strip_prefix("table/")?, side_of(d)?))
}

/// Every item of a paginated read, or `None` (warned: scaling is left
/// alone this round) when a page failed.
fn all<T, E: ProvideErrorMetadata + std::fmt::Debug>(
    operation: &'static str,
    items: Vec<Result<T, aws_sdk_applicationautoscaling::error::SdkError<E>>>,
) -> Option<Vec<T>> {
    items
        .into_iter()
        .collect::<Result<Vec<T>, _>>()
        .map_err(|e| {
            warn!(error = %failed(operation, "", &e), "reading table auto scaling failed: left alone this round");
        })
        .ok()
}

/// Every item of a paginated Application Auto Scaling read that is a
/// table's side, as (table, side, item), or `None` as [`all`] says (a
/// macro: the SDK's fluent builders share no trait to be generic over).
macro_rules! table_items {
    ($request:expr, $operation:literal) => {
        all(
            $operation,
            $request
                .service_namespace(ServiceNamespace::Dynamodb)
                .into_paginator()
                .items()
                .send()
                .collect()
                .await,
        )
        .map(|items| {
            items
                .into_iter()
                .filter_map(|i| {
                    let (table, side) = table_side(i.resource_id(), i.scalable_dimension())?;
                    Some((table.to_string(), side, i))
                })
                .collect::<Vec<_>>()
        })
    };
}

fn resource_id(table: &str) -> String {
    format!("table/{table}")
}

fn failed<E: ProvideErrorMetadata + std::fmt::Debug>(
    operation: &'static str,
    table: &str,
    e: &aws_sdk_applicationautoscaling::error::SdkError<E>,
) -> TablesError {
    TablesError::Scaling {
        operation,
        table: table.to_string(),
        message: e
            .message()
            .or(e.code())
            .map_or_else(|| format!("{e:?}"), str::to_string),
    }
}

impl TableManager {
    /// The scalable targets of DynamoDB tables in this account and region,
    /// by table name, with Tidemark's policy target where it has one;
    /// `None` when there is no Application Auto Scaling client or the read
    /// failed (warned: scaling is left alone this round).
    pub(super) async fn scaling(&self) -> Option<BTreeMap<String, Scaling>> {
        let client = self.autoscaling.as_ref()?;
        let mut out: BTreeMap<String, Scaling> = BTreeMap::new();
        let targets = table_items!(
            client.describe_scalable_targets(),
            "DescribeScalableTargets"
        )?;
        let policies = table_items!(
            client.describe_scaling_policies(),
            "DescribeScalingPolicies"
        )?;
        for (table, side, t) in targets {
            let r = Registered {
                range: ScaleRange {
                    min: t.min_capacity().max(0) as u64,
                    max: t.max_capacity().max(0) as u64,
                    target_utilization: 0,
                },
                ours: false,
            };
            let s = out.entry(table).or_default();
            match side {
                Side::Read => s.read = Some(r),
                Side::Write => s.write = Some(r),
            }
        }
        for (table, side, p) in policies {
            if p.policy_name() != POLICY_NAME {
                continue;
            }
            let target = p
                .target_tracking_scaling_policy_configuration()
                .map_or(0.0, |c| c.target_value());
            let reg = out.get_mut(&table).and_then(|s| match side {
                Side::Read => s.read.as_mut(),
                Side::Write => s.write.as_mut(),
            });
            if let Some(r) = reg {
                r.ours = true;
                r.range.target_utilization = target.round().clamp(0.0, 100.0) as u8;
            }
        }
        Some(out)
    }

    /// Registers `table`'s `side` as a scalable target over `to`'s range
    /// and puts Tidemark's target-tracking policy on it (both calls
    /// overwrite what was there: repeating them is harmless).
    pub(super) async fn set_scaling(
        &self,
        table: &str,
        side: Side,
        to: ScaleRange,
    ) -> Result<(), TablesError> {
        let Some(client) = &self.autoscaling else {
            return Err(TablesError::Scaling {
                operation: "RegisterScalableTarget",
                table: table.to_string(),
                message: "no Application Auto Scaling client".into(),
            });
        };
        let cap = |u: u64| i32::try_from(u).unwrap_or(i32::MAX);
        client
            .register_scalable_target()
            .service_namespace(ServiceNamespace::Dynamodb)
            .resource_id(resource_id(table))
            .scalable_dimension(dimension(side))
            .min_capacity(cap(to.min))
            .max_capacity(cap(to.max.max(to.min)))
            .send()
            .await
            .map_err(|e| failed("RegisterScalableTarget", table, &e))?;
        let metric = match side {
            Side::Read => MetricType::DynamoDbReadCapacityUtilization,
            Side::Write => MetricType::DynamoDbWriteCapacityUtilization,
        };
        // A policy the SDK refuses to build (a required field unset).
        let invalid = |e: aws_sdk_applicationautoscaling::error::BuildError| TablesError::Scaling {
            operation: "PutScalingPolicy",
            table: table.to_string(),
            message: e.to_string(),
        };
        let spec = PredefinedMetricSpecification::builder()
            .predefined_metric_type(metric)
            .build()
            .map_err(invalid)?;
        let config = TargetTrackingScalingPolicyConfiguration::builder()
            .predefined_metric_specification(spec)
            .target_value(f64::from(to.target_utilization))
            .build()
            .map_err(invalid)?;
        client
            .put_scaling_policy()
            .policy_name(POLICY_NAME)
            .service_namespace(ServiceNamespace::Dynamodb)
            .resource_id(resource_id(table))
            .scalable_dimension(dimension(side))
            .policy_type(PolicyType::TargetTrackingScaling)
            .target_tracking_scaling_policy_configuration(config)
            .send()
            .await
            .map_err(|e| failed("PutScalingPolicy", table, &e))?;
        info!(
            table,
            side = ?side,
            min = to.min,
            max = to.max,
            target_utilization = to.target_utilization,
            "table auto scaling set"
        );
        Ok(())
    }

    /// Deregisters `table`'s `side` (its policies go with it); one already
    /// gone counts as done.
    pub(super) async fn remove_scaling(&self, table: &str, side: Side) -> Result<(), TablesError> {
        let Some(client) = &self.autoscaling else {
            return Ok(());
        };
        match client
            .deregister_scalable_target()
            .service_namespace(ServiceNamespace::Dynamodb)
            .resource_id(resource_id(table))
            .scalable_dimension(dimension(side))
            .send()
            .await
        {
            Ok(_) => {}
            Err(e) if e.code() == Some("ObjectNotFoundException") => {}
            Err(e) => return Err(failed("DeregisterScalableTarget", table, &e)),
        }
        info!(table, side = ?side, "table auto scaling removed");
        Ok(())
    }
}
