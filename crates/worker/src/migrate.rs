//! Shard-count migrations: each period table's recorded layouts and
//! migration state (its tags), the cutover, and the layouts a reader must
//! query per table.
//!
//! A table's tags say how it was written (see [`crate::tables`]):
//! - `tidemark:layout` alone: one layout (`old-only` while it is the
//!   config's `schema.migrate_from`, `new-only` when it is `schema.key`);
//! - with `tidemark:layout-from` and `tidemark:migration = dual`: both
//!   layouts are written and must be read (set by `run` at start on every
//!   table that takes writes, and on tables created during the migration);
//! - `tidemark:migration = backfilled`: every old-layout item also exists
//!   under the new layout (set by `migrate backfill` when done);
//! - `tidemark:migration = new-only`: cut over (`migrate cutover`): only
//!   the new layout is read, old-layout items may be removed.
//!
//! Readers take each table's layouts from its tags, so a table whose period
//! ended before the migration began is simply read in its old layout.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::Tag;
use serde::Serialize;
use tidemark_schema::route::RouterConfig;
use tidemark_schema::strategy::KeyStrategy;

use crate::tables::{LAYOUT_FROM_TAG, LAYOUT_TAG, MIGRATION_TAG, layout_of, parse_layout};

/// Errors of migration commands.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// A DynamoDB call failed.
    #[error("{operation} {table}: {message}")]
    Call {
        /// The operation.
        operation: &'static str,
        /// The table.
        table: String,
        /// The error text.
        message: String,
    },
    /// The table does not exist.
    #[error("table {0} does not exist")]
    NoTable(String),
    /// The table is not in a state the step applies to.
    #[error("table {table} is {state}: {hint}")]
    State {
        /// The table.
        table: String,
        /// Its state.
        state: MigrationState,
        /// What to do instead.
        hint: &'static str,
    },
}

/// Where a table is in a shard migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationState {
    /// Written with the old layout only (`schema.migrate_from`).
    OldOnly,
    /// Both layouts written and read; old items not all copied yet.
    Dual,
    /// Both layouts written and read; every old item copied.
    Backfilled,
    /// Read with the new layout only.
    NewOnly,
    /// Another layout than the config's (or none recorded).
    Other,
}

impl std::fmt::Display for MigrationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MigrationState::OldOnly => "old-only",
            MigrationState::Dual => "dual",
            MigrationState::Backfilled => "backfilled",
            MigrationState::NewOnly => "new-only",
            MigrationState::Other => "other",
        })
    }
}

/// A table's layout tags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableLayout {
    /// `tidemark:layout`.
    pub layout: Option<String>,
    /// `tidemark:layout-from`.
    pub layout_from: Option<String>,
    /// `tidemark:migration`.
    pub migration: Option<String>,
}

impl TableLayout {
    /// From a table's tags.
    pub fn from_tags(tags: &BTreeMap<String, String>) -> Self {
        TableLayout {
            layout: tags.get(LAYOUT_TAG).cloned(),
            layout_from: tags.get(LAYOUT_FROM_TAG).cloned(),
            migration: tags.get(MIGRATION_TAG).cloned(),
        }
    }

    /// The layouts holding this table's items, new first; `None` when no
    /// (readable) layout is recorded.
    pub fn read_strategies(&self) -> Option<Vec<KeyStrategy>> {
        let mut out = vec![parse_layout(self.layout.as_deref()?)?];
        if self.migration.as_deref() != Some("new-only")
            && let Some(from) = self.layout_from.as_deref()
        {
            out.push(parse_layout(from)?);
        }
        Some(out)
    }

    /// The table's state against the config's layouts.
    pub fn state(&self, config: &RouterConfig) -> MigrationState {
        let new = layout_of(&config.key);
        let old = config.migrate_from.as_ref().map(layout_of);
        match (self.layout.as_deref(), self.migration.as_deref()) {
            (Some(l), Some("dual")) if l == new => MigrationState::Dual,
            (Some(l), Some("backfilled")) if l == new => MigrationState::Backfilled,
            (Some(l), Some("new-only")) if l == new => MigrationState::NewOnly,
            (Some(l), None) if l == new => MigrationState::NewOnly,
            (Some(l), None) if Some(l) == old.as_deref() => MigrationState::OldOnly,
            _ => MigrationState::Other,
        }
    }
}

/// The layouts a reader uses when a table records none: the config's
/// (`schema.key`, then `schema.migrate_from`).
pub fn config_strategies(config: &RouterConfig) -> Vec<KeyStrategy> {
    let mut out = vec![config.key.clone()];
    out.extend(config.migrate_from.clone());
    out
}

/// A table's ARN and layout tags; `None` when the table does not exist.
pub async fn table_layout(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Option<(String, TableLayout)>, MigrateError> {
    let call = |operation, e: String| MigrateError::Call {
        operation,
        table: table.to_string(),
        message: e,
    };
    let arn = match client.describe_table().table_name(table).send().await {
        Ok(d) => d
            .table()
            .and_then(|t| t.table_arn())
            .unwrap_or_default()
            .to_string(),
        Err(e)
            if e.as_service_error()
                .is_some_and(DescribeTableError::is_resource_not_found_exception) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(call("DescribeTable", DisplayErrorContext(e).to_string())),
    };
    let mut tags = BTreeMap::new();
    let mut next = None;
    loop {
        let out = client
            .list_tags_of_resource()
            .resource_arn(&arn)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| call("ListTagsOfResource", DisplayErrorContext(e).to_string()))?;
        for t in out.tags() {
            tags.insert(t.key().to_string(), t.value().to_string());
        }
        match out.next_token {
            Some(t) => next = Some(t),
            None => break,
        }
    }
    Ok(Some((arn, TableLayout::from_tags(&tags))))
}

/// Sets a table's migration state tag.
pub async fn set_state(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    arn: &str,
    state: &str,
) -> Result<(), MigrateError> {
    let tag = Tag::builder()
        .key(MIGRATION_TAG)
        .value(state)
        .build()
        .map_err(|e| MigrateError::Call {
            operation: "TagResource",
            table: table.to_string(),
            message: e.to_string(),
        })?;
    client
        .tag_resource()
        .resource_arn(arn)
        .tags(tag)
        .send()
        .await
        .map_err(|e| MigrateError::Call {
            operation: "TagResource",
            table: table.to_string(),
            message: DisplayErrorContext(e).to_string(),
        })?;
    Ok(())
}

/// Records that `table` is new-only: from now on readers query only its
/// new layout, and its old-layout items may be removed. Refused unless the
/// table is backfilled (an old item not yet copied would vanish from
/// reads); a table already new-only is left as it is.
pub async fn cutover(
    client: &aws_sdk_dynamodb::Client,
    config: &RouterConfig,
    table: &str,
) -> Result<MigrationState, MigrateError> {
    let (arn, layout) = table_layout(client, table)
        .await?
        .ok_or_else(|| MigrateError::NoTable(table.to_string()))?;
    match layout.state(config) {
        MigrationState::Backfilled => {
            set_state(client, table, &arn, "new-only").await?;
            Ok(MigrationState::NewOnly)
        }
        MigrationState::NewOnly => Ok(MigrationState::NewOnly),
        state @ (MigrationState::Dual | MigrationState::OldOnly) => Err(MigrateError::State {
            table: table.to_string(),
            state,
            hint: "run `tidemark migrate backfill` for it first (a table that ended before the \
                   migration can stay old-only: it is read in its own layout)",
        }),
        state @ MigrationState::Other => Err(MigrateError::State {
            table: table.to_string(),
            state,
            hint: "its recorded layout is neither schema.key nor schema.migrate_from",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_schema::strategy::Bucket;

    fn tb(shards: u32) -> KeyStrategy {
        KeyStrategy::TimeBucket {
            shards,
            bucket: Bucket::Hour,
        }
    }

    fn layout(layout: &str, from: Option<&str>, migration: Option<&str>) -> TableLayout {
        TableLayout {
            layout: Some(layout.to_string()),
            layout_from: from.map(str::to_string),
            migration: migration.map(str::to_string),
        }
    }

    /// Each state the tags can record, as status reports it and readers
    /// read it: both layouts until the cutover, then the new one only; a
    /// table of before the migration is read in its own (old) layout.
    #[test]
    fn states_and_read_layouts_follow_the_tags() {
        let mut config = RouterConfig::with_prefix("t");
        config.key = tb(8);
        config.migrate_from = Some(tb(4));
        let (old, new) = (layout_of(&tb(4)), layout_of(&tb(8)));
        let cases = [
            (
                layout(&old, None, None),
                MigrationState::OldOnly,
                vec![tb(4)],
            ),
            (
                layout(&new, Some(&old), Some("dual")),
                MigrationState::Dual,
                vec![tb(8), tb(4)],
            ),
            (
                layout(&new, Some(&old), Some("backfilled")),
                MigrationState::Backfilled,
                vec![tb(8), tb(4)],
            ),
            (
                layout(&new, Some(&old), Some("new-only")),
                MigrationState::NewOnly,
                vec![tb(8)],
            ),
            (
                layout(&new, None, None),
                MigrationState::NewOnly,
                vec![tb(8)],
            ),
            (
                layout(&layout_of(&tb(2)), None, None),
                MigrationState::Other,
                vec![tb(2)],
            ),
        ];
        for (tags, state, read) in cases {
            assert_eq!(tags.state(&config), state, "{tags:?}");
            assert_eq!(tags.read_strategies(), Some(read), "{tags:?}");
        }
        assert_eq!(TableLayout::default().read_strategies(), None);
        assert_eq!(config_strategies(&config), vec![tb(8), tb(4)]);
        assert_eq!(MigrationState::Backfilled.to_string(), "backfilled");
    }
}
