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

fn side_of(d: Option<&ScalableDimension>) -> Option<Side> {
    match d? {
        ScalableDimension::DynamoDbTableReadCapacityUnits => Some(Side::Read),
        ScalableDimension::DynamoDbTableWriteCapacityUnits => Some(Side::Write),
        _ => None,
    }
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
        let mut next: Option<String> = None;
        loop {
            let page = client
                .describe_scalable_targets()
                .service_namespace(ServiceNamespace::Dynamodb)
                .set_next_token(next.take())
                .send()
                .await;
            let page = match page {
                Ok(p) => p,
                Err(e) => {
                    warn!(error = %failed("DescribeScalableTargets", "", &e), "reading table auto scaling failed: left alone this round");
                    return None;
                }
            };
            for t in page.scalable_targets() {
                let (Some(table), Some(side)) = (
                    t.resource_id().strip_prefix("table/"),
                    side_of(Some(t.scalable_dimension())),
                ) else {
                    continue;
                };
                let r = Registered {
                    range: ScaleRange {
                        min: t.min_capacity().max(0) as u64,
                        max: t.max_capacity().max(0) as u64,
                        target_utilization: 0,
                    },
                    ours: false,
                };
                let s = out.entry(table.to_string()).or_default();
                match side {
                    Side::Read => s.read = Some(r),
                    Side::Write => s.write = Some(r),
                }
            }
            match page.next_token() {
                Some(t) => next = Some(t.to_string()),
                None => break,
            }
        }
        loop {
            let page = client
                .describe_scaling_policies()
                .service_namespace(ServiceNamespace::Dynamodb)
                .set_next_token(next.take())
                .send()
                .await;
            let page = match page {
                Ok(p) => p,
                Err(e) => {
                    warn!(error = %failed("DescribeScalingPolicies", "", &e), "reading table auto scaling failed: left alone this round");
                    return None;
                }
            };
            for p in page.scaling_policies() {
                let (Some(table), Some(side)) = (
                    p.resource_id().strip_prefix("table/"),
                    side_of(Some(p.scalable_dimension())),
                ) else {
                    continue;
                };
                if p.policy_name() != POLICY_NAME {
                    continue;
                }
                let target = p
                    .target_tracking_scaling_policy_configuration()
                    .map_or(0.0, |c| c.target_value());
                let reg = out.get_mut(table).and_then(|s| match side {
                    Side::Read => s.read.as_mut(),
                    Side::Write => s.write.as_mut(),
                });
                if let Some(r) = reg {
                    r.ours = true;
                    r.range.target_utilization = target.round().clamp(0.0, 100.0) as u8;
                }
            }
            match page.next_token() {
                Some(t) => next = Some(t.to_string()),
                None => break,
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
        let spec = PredefinedMetricSpecification::builder()
            .predefined_metric_type(metric)
            .build()
            .map_err(|e| TablesError::Scaling {
                operation: "PutScalingPolicy",
                table: table.to_string(),
                message: e.to_string(),
            })?;
        let config = TargetTrackingScalingPolicyConfiguration::builder()
            .predefined_metric_specification(spec)
            .target_value(f64::from(to.target_utilization))
            .build()
            .map_err(|e| TablesError::Scaling {
                operation: "PutScalingPolicy",
                table: table.to_string(),
                message: e.to_string(),
            })?;
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
