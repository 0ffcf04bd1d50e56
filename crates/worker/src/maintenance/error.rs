//! The errors of table maintenance calls.

use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use tidemark_consumer::keyschema::KeySchemaMismatch;
use tracing::error;

use crate::metrics as m;

/// ` of table {table}`, or nothing for a call on no table (ListTables).
fn on_table(table: &str) -> String {
    if table.is_empty() {
        String::new()
    } else {
        format!(" of table {table}")
    }
}

/// Errors of table maintenance calls.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    /// A DynamoDB call failed.
    #[error("{operation}{}: {message}", on_table(table))]
    Call {
        /// The operation.
        operation: &'static str,
        /// The table ("" for ListTables).
        table: String,
        /// DynamoDB's error code, when it gave one.
        code: Option<String>,
        /// The error text.
        message: String,
        /// The call got no answer (connection refused, timeout): DynamoDB
        /// is unreachable (`tables` exits 69).
        unreachable: bool,
    },
    /// An Application Auto Scaling call failed (table auto scaling).
    #[error("{operation}{}: {message}", on_table(table))]
    Scaling {
        /// The operation.
        operation: &'static str,
        /// The table ("" for the reads of every table's).
        table: String,
        /// The error text.
        message: String,
    },
    /// An account quota refused the call (LimitExceededException on
    /// CreateTable or a capacity change): an operator must act.
    #[error(
        "{operation}{}: account quota reached ({message}); raise the DynamoDB \
         table or capacity quota, lower schema.tiers, or delete old tables",
        on_table(table)
    )]
    Quota {
        /// The operation.
        operation: &'static str,
        /// The table.
        table: String,
        /// The error text.
        message: String,
    },
    /// A table that takes writes and has items was written with another
    /// key layout than the config's.
    #[error(
        "table {table} was written with key layout {recorded}, but the config says {configured}: \
         its items would be written and read under other keys (queries would miss every item \
         written before). Set schema.key back to {recorded}, or migrate: keep the new \
         schema.key and add schema.migrate_from = {{ {recorded_toml} }} (dual writes, then \
         `tidemark migrate backfill` and `tidemark migrate cutover`); see 'Changing the shard \
         count' in docs/keys-and-tables.md"
    )]
    LayoutChanged {
        /// The table.
        table: String,
        /// Its `tidemark:layout` tag.
        recorded: String,
        /// The config's layout.
        configured: String,
        /// The recorded layout as a TOML inline table's body.
        recorded_toml: String,
    },
    /// A table of ours has another key schema than the config's.
    #[error(transparent)]
    KeySchema(#[from] KeySchemaMismatch),
    /// The table did not become ACTIVE in time.
    #[error("table {0} did not become ACTIVE within {1:?}")]
    NotActive(String, Duration),
    /// The round's guard refused an action (the maintenance lease is no
    /// longer ours): the round stopped before it.
    #[error("{action} {table} refused: {reason}")]
    Refused {
        /// The action's kind.
        action: &'static str,
        /// The table.
        table: String,
        /// Why.
        reason: String,
    },
}

impl TablesError {
    pub(super) fn call<E: ProvideErrorMetadata + std::error::Error + 'static>(
        operation: &'static str,
        table: &str,
        e: aws_sdk_dynamodb::error::SdkError<E>,
    ) -> Self {
        let code = e.code().map(str::to_string);
        let unreachable = matches!(
            e,
            aws_sdk_dynamodb::error::SdkError::DispatchFailure(_)
                | aws_sdk_dynamodb::error::SdkError::TimeoutError(_)
        );
        TablesError::Call {
            operation,
            table: table.to_string(),
            code,
            message: tidemark_aws_errors::describe(&e),
            unreachable,
        }
    }

    /// The call got no answer at all: DynamoDB is unreachable.
    pub(crate) fn is_unreachable(&self) -> bool {
        matches!(
            self,
            TablesError::Call {
                unreachable: true,
                ..
            }
        )
    }

    /// A quota refusal: logged as an error and counted, for the alarm.
    pub(super) fn quota<E: std::error::Error + 'static>(
        operation: &'static str,
        table: &str,
        e: aws_sdk_dynamodb::error::SdkError<E>,
    ) -> Self {
        let err = TablesError::Quota {
            operation,
            table: table.to_string(),
            message: tidemark_aws_errors::causes(&e),
        };
        metrics::counter!(m::QUOTA_ERRORS, "operation" => operation).increment(1);
        error!(table, operation, error = %err, "DynamoDB quota reached");
        err
    }

    pub(super) fn build(operation: &'static str, table: &str, e: impl std::fmt::Display) -> Self {
        TablesError::Call {
            operation,
            table: table.to_string(),
            code: None,
            message: e.to_string(),
            unreachable: false,
        }
    }

    pub(super) fn code(&self) -> Option<&str> {
        match self {
            TablesError::Call { code, .. } => code.as_deref(),
            _ => None,
        }
    }
}
