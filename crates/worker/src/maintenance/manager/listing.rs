//! Listing the period tables and reading what they look like (state,
//! capacity, TTL, point-in-time recovery, tags, exports, key layouts): the
//! read half of [`TableManager`], apart from the round that acts on it.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::{
    BillingMode, ExportStatus as SdkExportStatus, PointInTimeRecoveryStatus,
    TableClass as SdkTableClass, TableStatus, TimeToLiveStatus,
};
use chrono::{DateTime, Utc};
use tidemark_aws_errors::{ErrorClass, classify};
use tidemark_schema::period::{Capacity, Ceiling, LifecycleState, TableClass};
use tracing::{info, warn};

use crate::config::ExpiryAction;
use crate::maintenance::drift::{Details, ExportState, TableInfo};
use crate::maintenance::error::TablesError;
use crate::maintenance::migrate::TableLayout;
use crate::maintenance::tags::{
    EXPIRED_TAG, EXPORT_TAG, LAYOUT_FROM_TAG, LAYOUT_TAG, MIGRATION_TAG, layout_toml,
};

use super::{FROZEN_CHECKS_PER_ROUND, TableManager, TableRef, read_or_warn};

impl TableManager {
    /// Every table's name (ListTables, page by page, each page one
    /// [`call`](Self::call) with its retries).
    async fn table_names(&self) -> Result<Vec<String>, TablesError> {
        let mut names = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let page = self
                .call(|| {
                    self.client
                        .list_tables()
                        .set_exclusive_start_table_name(start.clone())
                        .send()
                })
                .await
                .map_err(|e| TablesError::call("ListTables", "", e))?;
            names.extend(page.table_names().iter().cloned());
            match page.last_evaluated_table_name() {
                Some(last) => start = Some(last.to_string()),
                None => return Ok(names),
            }
        }
    }

    /// Our tables, oldest period first, with their state at `now`. A table
    /// of ours with another key schema is an error naming it.
    pub async fn list(&self, now: DateTime<Utc>) -> Result<Vec<TableInfo>, TablesError> {
        self.list_with(now, None).await
    }

    /// [`list`](Self::list); with `round`, the details (TTL, PITR, tags,
    /// export) of tables younger than frozen, of expired ones, and of a
    /// rotating few frozen ones are read too.
    pub(super) async fn list_with(
        &self,
        now: DateTime<Utc>,
        round: Option<usize>,
    ) -> Result<Vec<TableInfo>, TablesError> {
        let now_ms = now.timestamp_millis();
        let names = self.table_names().await?;
        let spec = self.policy.key_spec();
        let mut out = Vec::new();
        for name in names {
            let Some(period) = self.policy.naming.parse(&name) else {
                continue;
            };
            let d = match self
                .call(|| self.client.describe_table().table_name(&name).send())
                .await
            {
                Ok(d) => d,
                // Deleted between the listing and now.
                Err(e)
                    if e.as_service_error()
                        .is_some_and(DescribeTableError::is_resource_not_found_exception) =>
                {
                    continue;
                }
                Err(e) => return Err(TablesError::call("DescribeTable", &name, e)),
            };
            let Some(table) = d.table() else { continue };
            spec.check(&name, "period table", table)?;
            let on_demand = table
                .billing_mode_summary()
                .and_then(|b| b.billing_mode())
                .is_some_and(|m| *m == BillingMode::PayPerRequest);
            let capacity = if on_demand {
                None
            } else {
                table.provisioned_throughput().map(|t| Capacity {
                    read: t.read_capacity_units().unwrap_or(0).max(0) as u64,
                    write: t.write_capacity_units().unwrap_or(0).max(0) as u64,
                })
            };
            let state = self.policy.lifecycle.state_at(&period, now_ms);
            out.push(TableInfo {
                name: name.clone(),
                period: period.label(),
                state,
                status: table
                    .table_status()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                capacity,
                on_demand_since_ms: table
                    .billing_mode_summary()
                    .and_then(|b| b.last_update_to_pay_per_request_date_time())
                    .and_then(|t| t.to_millis().ok()),
                tagged_expired: false,
                warm_write_units: table
                    .warm_throughput()
                    .and_then(|w| w.write_units_per_second())
                    .map(|w| w.max(0) as u64),
                ceiling: table
                    .on_demand_throughput()
                    .map_or_else(Ceiling::default, |o| {
                        // -1 (or absent): no ceiling.
                        let units = |u: Option<i64>| u.filter(|u| *u > 0).map(|u| u as u64);
                        Ceiling {
                            read: units(o.max_read_request_units()),
                            write: units(o.max_write_request_units()),
                        }
                    }),
                table_class: match table.table_class_summary().and_then(|c| c.table_class()) {
                    Some(SdkTableClass::StandardInfrequentAccess) => {
                        TableClass::StandardInfrequentAccess
                    }
                    _ => TableClass::Standard,
                },
                class_changed_ms: table
                    .table_class_summary()
                    .and_then(|c| c.last_update_date_time())
                    .and_then(|t| t.to_millis().ok()),
                scaling: None,
                deletion_protection: table.deletion_protection_enabled().unwrap_or(false),
                details: Details::default(),
                lift: None,
                backlog: None,
                size_bytes: table.table_size_bytes().unwrap_or(0).max(0) as u64,
                arn: table.table_arn().unwrap_or_default().to_string(),
                start_ms: period.start_ms,
            });
        }
        out.sort_by_key(|t| t.start_ms);
        // Frozen tables get their details read a few per round, in turn.
        let frozen: Vec<usize> = (0..out.len())
            .filter(|&i| out[i].state == LifecycleState::Frozen)
            .collect();
        let checked_frozen: Vec<usize> = match round {
            Some(r) if !frozen.is_empty() => (0..FROZEN_CHECKS_PER_ROUND.min(frozen.len()))
                .map(|k| frozen[(r * FROZEN_CHECKS_PER_ROUND + k) % frozen.len()])
                .collect(),
            _ => Vec::new(),
        };
        for (i, t) in out.iter_mut().enumerate() {
            // Expired tables: tags always (tagged? exported?), as before.
            let deep = t.state == LifecycleState::Expired
                || (round.is_some() && t.state != LifecycleState::Frozen)
                || checked_frozen.contains(&i);
            if deep && t.status == TableStatus::Active.as_str() {
                let details = self.details(t).await;
                t.tagged_expired = details
                    .tags
                    .as_ref()
                    .is_some_and(|tags| tags.contains_key(EXPIRED_TAG));
                if let (Some((layouts, config)), Some(tags)) = (&self.table_layouts, &details.tags)
                    && t.state != LifecycleState::Expired
                {
                    layouts.set(
                        &t.name,
                        TableLayout::from_tags(tags).write_strategies(config),
                    );
                }
                t.details = details;
            }
        }
        Ok(out)
    }

    /// The settings of `t` read with calls of their own. A failed read
    /// leaves its field `None` (not reconciled this round).
    pub(super) async fn details(&self, t: &TableInfo) -> Details {
        let expired = t.state == LifecycleState::Expired;
        let exporting = expired && self.policy.on_expiry == ExpiryAction::Export;
        let mut d = Details::default();
        let tags = self
            .call(|| {
                self.client
                    .list_tags_of_resource()
                    .resource_arn(&t.arn)
                    .send()
            })
            .await;
        d.tags = read_or_warn(&t.name, "tags", tags).map(|out| {
            out.tags()
                .iter()
                .map(|t| (t.key().to_string(), t.value().to_string()))
                .collect()
        });
        if !expired && self.policy.ttl_attribute.is_some() {
            let ttl = self
                .call(|| {
                    self.client
                        .describe_time_to_live()
                        .table_name(&t.name)
                        .send()
                })
                .await;
            d.ttl = read_or_warn(&t.name, "TTL", ttl).map(|out| {
                let desc = out.time_to_live_description();
                let on = desc.and_then(|d| d.time_to_live_status()).is_some_and(|s| {
                    matches!(s, TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
                });
                on.then(|| desc.and_then(|d| d.attribute_name()).map(str::to_string))
                    .flatten()
            });
        }
        if (!expired && self.policy.pitr) || exporting {
            let backups = self
                .call(|| {
                    self.client
                        .describe_continuous_backups()
                        .table_name(&t.name)
                        .send()
                })
                .await;
            d.pitr = read_or_warn(&t.name, "PITR", backups).map(|out| {
                out.continuous_backups_description()
                    .and_then(|c| c.point_in_time_recovery_description())
                    .and_then(|p| p.point_in_time_recovery_status())
                    == Some(&PointInTimeRecoveryStatus::Enabled)
            });
        }
        if exporting && let Some(arn) = d.tags.as_ref().and_then(|t| t.get(EXPORT_TAG)) {
            d.export = Some(self.export_state(arn).await);
        }
        d
    }

    pub(super) async fn export_state(&self, arn: &str) -> ExportState {
        match self
            .call(|| self.client.describe_export().export_arn(arn).send())
            .await
        {
            Ok(out) => match out.export_description().and_then(|e| e.export_status()) {
                Some(SdkExportStatus::Completed) => ExportState::Completed,
                Some(SdkExportStatus::InProgress) => ExportState::InProgress,
                other => ExportState::Failed(
                    out.export_description()
                        .and_then(|e| e.failure_message())
                        .map_or_else(|| format!("status {other:?}"), str::to_string),
                ),
            },
            Err(e) => match classify(&e) {
                // Unknown to DynamoDB: started again.
                ErrorClass::NotFound | ErrorClass::Invalid => {
                    ExportState::Failed(tidemark_aws_errors::describe(&e))
                }
                // Cannot tell: wait (never delete on a guess).
                _ => ExportState::InProgress,
            },
        }
    }

    /// Refuses a silent key-layout change, and returns the layouts every
    /// table that is not expired records (the router keys each table's
    /// events with them: a table from before a shard-count migration stays
    /// in its old layout). A table that takes writes at `now` (prebuild,
    /// active, cooling) and records another layout than the config's is an
    /// error when it has items; an empty one is tagged with the config's
    /// layout instead; one in the layout `schema.migrate_from` names
    /// becomes dual-written. Older tables keep what they record. Run at
    /// start, before any write.
    pub(crate) async fn check_layouts(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, TableLayout>, TablesError> {
        let now_ms = now.timestamp_millis();
        let names = self.table_names().await?;
        let mut out = BTreeMap::new();
        for name in names {
            let Some(p) = self.policy.naming.parse(&name) else {
                continue;
            };
            let state = self.policy.lifecycle.state_at(&p, now_ms);
            if state == LifecycleState::Expired {
                continue;
            }
            let takes_writes = matches!(
                state,
                LifecycleState::Prebuild | LifecycleState::Active | LifecycleState::Cooling
            );
            if let Some(layout) = Box::pin(self.check_layout(name.clone(), takes_writes)).await? {
                out.insert(name, layout);
            }
        }
        Ok(out)
    }

    /// [`check_layouts`](Self::check_layouts) for one table; `None` when it
    /// no longer exists.
    pub(super) async fn check_layout(
        &self,
        name: String,
        takes_writes: bool,
    ) -> Result<Option<TableLayout>, TablesError> {
        let arn = match self
            .call(|| self.client.describe_table().table_name(&name).send())
            .await
        {
            Ok(d) => match d.table() {
                Some(t) => {
                    self.policy.key_spec().check(&name, "period table", t)?;
                    t.table_arn().unwrap_or_default().to_string()
                }
                None => return Ok(None),
            },
            Err(e)
                if e.as_service_error()
                    .is_some_and(DescribeTableError::is_resource_not_found_exception) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(TablesError::call("DescribeTable", &name, e)),
        };
        let t = TableRef { name, arn };
        let tags = self
            .call(|| {
                self.client
                    .list_tags_of_resource()
                    .resource_arn(&t.arn)
                    .send()
            })
            .await
            .map_err(|e| TablesError::call("ListTagsOfResource", &t.name, e))?;
        // In order: DynamoDB replaces a tag set again, but moto lists both
        // values, the newer last.
        let tags: BTreeMap<String, String> = tags
            .tags()
            .iter()
            .map(|tag| (tag.key().to_string(), tag.value().to_string()))
            .collect();
        let layout = TableLayout::from_tags(&tags);
        let Some(recorded) = layout.layout.clone() else {
            // Recorded as the config's at the next round.
            return Ok(Some(layout));
        };
        if recorded == self.policy.layout || !takes_writes {
            return Ok(Some(layout));
        }
        // The migration's start on this table: from now on both layouts
        // are written and read. One TagResource sets all three, so no
        // reader sees the new layout without the old one.
        if let Some(from) = &self.policy.layout_from
            && *from == recorded
        {
            info!(
                table = t.name,
                from = recorded,
                to = self.policy.layout,
                "shard migration: table now dual-written"
            );
            self.tag_many(
                &t.name,
                &t.arn,
                &[
                    (LAYOUT_TAG, &self.policy.layout),
                    (LAYOUT_FROM_TAG, from),
                    (MIGRATION_TAG, "dual"),
                ],
            )
            .await?;
            return Ok(Some(TableLayout {
                layout: Some(self.policy.layout.clone()),
                layout_from: Some(from.clone()),
                migration: Some("dual".into()),
            }));
        }
        let items = self
            .call(|| {
                self.client
                    .scan()
                    .table_name(&t.name)
                    .limit(1)
                    .select(aws_sdk_dynamodb::types::Select::Count)
                    .send()
            })
            .await
            .map_err(|e| TablesError::call("Scan", &t.name, e))?;
        if items.count() == 0 && items.last_evaluated_key().is_none() {
            warn!(
                table = t.name,
                from = recorded,
                to = self.policy.layout,
                "empty table: its recorded key layout follows the config"
            );
            self.tag(&t.name, &t.arn, LAYOUT_TAG, &self.policy.layout)
                .await?;
            return Ok(Some(TableLayout {
                layout: Some(self.policy.layout.clone()),
                ..layout
            }));
        }
        Err(TablesError::LayoutChanged {
            table: t.name,
            recorded_toml: layout_toml(&recorded),
            recorded,
            configured: self.policy.layout.clone(),
        })
    }
}
