//! The maintenance lease: at most one worker runs table maintenance at a
//! time. A single item in a small coordinator table (on-demand, created when
//! absent), taken and renewed with conditional writes on an expiry time, in
//! the spirit of KCL's separate CoordinatorState table (the shard lease table
//! stays in the pure KCL format).

use std::time::Duration;

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TableStatus,
};
use chrono::{DateTime, Utc};

/// The lease item's key.
pub const MAINTENANCE_KEY: &str = "tidemark-maintenance";

/// Errors of the coordinator table.
#[derive(Debug, thiserror::Error)]
#[error("coordinator table {table}: {operation}: {message}")]
pub struct CoordinatorError {
    table: String,
    operation: &'static str,
    message: String,
}

/// The maintenance lease of one worker.
#[derive(Debug, Clone)]
pub struct MaintenanceLease {
    client: aws_sdk_dynamodb::Client,
    table: String,
    owner: String,
    ttl: Duration,
}

impl MaintenanceLease {
    /// A lease held as `owner` in `table`, valid `ttl` after each renewal.
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        table: String,
        owner: String,
        ttl: Duration,
    ) -> Self {
        MaintenanceLease {
            client,
            table,
            owner,
            ttl,
        }
    }

    fn err(&self, operation: &'static str, message: String) -> CoordinatorError {
        CoordinatorError {
            table: self.table.clone(),
            operation,
            message,
        }
    }

    /// Creates the coordinator table when absent and waits until it is usable.
    pub async fn ensure_table(&self) -> Result<(), CoordinatorError> {
        let key = KeySchemaElement::builder()
            .attribute_name("leaseKey")
            .key_type(KeyType::Hash)
            .build()
            .map_err(|e| self.err("CreateTable", e.to_string()))?;
        let attr = AttributeDefinition::builder()
            .attribute_name("leaseKey")
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| self.err("CreateTable", e.to_string()))?;
        let created = self
            .client
            .create_table()
            .table_name(&self.table)
            .key_schema(key)
            .attribute_definitions(attr)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        // ResourceInUse: another worker is creating it; wait for ACTIVE below.
        if let Err(e) = created
            && !e
                .as_service_error()
                .is_some_and(CreateTableError::is_resource_in_use_exception)
        {
            return Err(self.err("CreateTable", DisplayErrorContext(e).to_string()));
        }
        for _ in 0..600 {
            let d = self
                .client
                .describe_table()
                .table_name(&self.table)
                .send()
                .await
                .map_err(|e| self.err("DescribeTable", DisplayErrorContext(e).to_string()))?;
            if d.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(self.err(
            "DescribeTable",
            "did not become ACTIVE within 5 minutes".into(),
        ))
    }

    /// Takes or renews the lease at `now`: succeeds when it is free, expired,
    /// or already ours. `Ok(false)` when another worker holds it.
    pub async fn try_acquire(&self, now: DateTime<Utc>) -> Result<bool, CoordinatorError> {
        let now_ms = now.timestamp_millis();
        let expires = now_ms + i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX / 2);
        let out = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("leaseKey", AttributeValue::S(MAINTENANCE_KEY.into()))
            .item("leaseOwner", AttributeValue::S(self.owner.clone()))
            .item("expiresAtMs", AttributeValue::N(expires.to_string()))
            .condition_expression(
                "attribute_not_exists(leaseKey) OR leaseOwner = :me OR expiresAtMs < :now",
            )
            .expression_attribute_values(":me", AttributeValue::S(self.owner.clone()))
            .expression_attribute_values(":now", AttributeValue::N(now_ms.to_string()))
            .send()
            .await;
        match out {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(PutItemError::is_conditional_check_failed_exception) =>
            {
                Ok(false)
            }
            Err(e) => Err(self.err("PutItem", DisplayErrorContext(e).to_string())),
        }
    }

    /// Gives the lease up (at shutdown), if it is ours.
    pub async fn release(&self) -> Result<(), CoordinatorError> {
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("leaseKey", AttributeValue::S(MAINTENANCE_KEY.into()))
            .condition_expression("leaseOwner = :me")
            .expression_attribute_values(":me", AttributeValue::S(self.owner.clone()))
            .send()
            .await;
        match out {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(DeleteItemError::is_conditional_check_failed_exception) =>
            {
                Ok(())
            }
            Err(e) => Err(self.err("DeleteItem", DisplayErrorContext(e).to_string())),
        }
    }
}
