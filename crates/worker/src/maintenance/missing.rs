//! Creation of a missing period table when the writer finds one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::future::BoxFuture;
use tidemark_aws_errors::is_access_denied;
use tidemark_schema::period::LifecycleState;
use tidemark_writer::{MissingTableAction, MissingTableHandler};
use tracing::{error, warn};

use super::error::TablesError;
use super::manager::TableManager;

/// Creates a missing period table when the writer finds one (an event for a
/// table that does not exist yet must not be lost); refuses tables that are
/// not ours or are expired. A table a quota keeps from being created is
/// retried for `quota_retry_for`, then refused (its records dead-lettered
/// with the reason) so shards move on.
#[derive(Debug, Clone)]
pub struct CreateMissingTables {
    manager: TableManager,
    quota_retry_for: Duration,
    /// When each table first failed for a quota.
    quota_since: Arc<std::sync::Mutex<HashMap<String, Instant>>>,
}

impl CreateMissingTables {
    /// A handler creating tables with `manager`'s policy.
    pub fn new(manager: TableManager) -> Self {
        CreateMissingTables {
            manager,
            quota_retry_for: Duration::from_secs(600),
            quota_since: Arc::default(),
        }
    }

    /// How long a quota refusal is retried before the table's records are
    /// dead-lettered.
    pub(crate) fn with_quota_retry_for(mut self, d: Duration) -> Self {
        self.quota_retry_for = d;
        self
    }
}

impl MissingTableHandler for CreateMissingTables {
    fn on_missing(&self, table: &str) -> BoxFuture<'static, MissingTableAction> {
        let this = self.clone();
        let table = table.to_string();
        Box::pin(async move {
            let manager = &this.manager;
            let Some(period) = manager.policy().naming.parse(&table) else {
                return MissingTableAction::Reject(format!(
                    "table {table} does not exist and is not a Tidemark period table"
                ));
            };
            let (state, capacity, warm) = manager
                .policy()
                .creation(&period, Utc::now().timestamp_millis());
            if matches!(state, LifecycleState::Expired) {
                return MissingTableAction::Reject(format!("table {table} is past retention"));
            }
            let result = manager.create(&table, capacity, warm).await;
            let mut since = this
                .quota_since
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match result {
                Ok(()) => {
                    since.remove(&table);
                    MissingTableAction::Retry
                }
                Err(e) if is_access_denied(e.code()) => {
                    MissingTableAction::Reject(format!("cannot create table {table}: {e}"))
                }
                Err(e @ TablesError::KeySchema(_)) => MissingTableAction::Reject(e.to_string()),
                Err(e @ TablesError::Quota { .. }) => {
                    let first = *since.entry(table.clone()).or_insert_with(Instant::now);
                    if first.elapsed() >= this.quota_retry_for {
                        error!(table, error = %e, after = ?this.quota_retry_for, "giving up creating the table: its records are dead-lettered");
                        MissingTableAction::Reject(format!(
                            "table {table} could not be created for {:?}: {e}",
                            this.quota_retry_for
                        ))
                    } else {
                        MissingTableAction::Retry
                    }
                }
                Err(e) => {
                    // Transient: the writer asks again on its next attempt.
                    warn!(table, error = %e, "creating missing table failed; will retry");
                    MissingTableAction::Retry
                }
            }
        })
    }
}
