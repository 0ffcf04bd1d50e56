//! Shard-count migrations: each period table's recorded layouts and
//! migration state (its tags), the cutover, and the layouts a reader must
//! query per table.
//!
//! A table's tags say how it was written (see [`crate::maintenance`]):
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
use std::sync::Arc;

use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::{AttributeValue, Tag};
use serde::Serialize;
use tidemark_schema::route::RouterConfig;
use tidemark_schema::strategy::KeyStrategy;
use tidemark_schema::{Item, ItemKey, WireItem};
use tidemark_writer::{Completion, Submission, Transport, WriteOutcome, Writer, WriterConfig};

use super::tags::{LAYOUT_FROM_TAG, LAYOUT_TAG, MIGRATION_TAG, layout_of, parse_layout};

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
    /// The backfill's writer stopped, or refused a copy.
    #[error("backfill of {table}: {message}")]
    Write {
        /// The table.
        table: String,
        /// What failed.
        message: String,
    },
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
    pub(crate) fn from_tags(tags: &BTreeMap<String, String>) -> Self {
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
pub(crate) fn config_strategies(config: &RouterConfig) -> Vec<KeyStrategy> {
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
        Err(e) => return Err(call("DescribeTable", tidemark_aws_errors::describe(&e))),
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
            .map_err(|e| call("ListTagsOfResource", tidemark_aws_errors::describe(&e)))?;
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
pub(crate) async fn set_state(
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
            message: tidemark_aws_errors::describe(&e),
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

/// The coordinator-table item holding a table's backfill cursor.
pub(crate) fn cursor_key(table: &str) -> String {
    format!("tidemark-backfill#{table}")
}

/// How a backfill runs.
#[derive(Debug, Clone)]
pub struct BackfillOptions {
    /// Items per Scan page; the cursor is saved after each page's copies
    /// are confirmed.
    pub page_size: i32,
    /// Stop after this many pages in this run (the cursor is kept: a later
    /// run goes on from it); `None`: to the end.
    pub max_pages: Option<u64>,
    /// The writer's settings (its `capacity_share` paces the copy).
    pub writer: WriterConfig,
}

/// What a backfill did, cumulative over its runs (the cursor item keeps
/// the counts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BackfillProgress {
    /// The table.
    pub table: String,
    /// Items read.
    pub scanned: u64,
    /// Old-layout items copied to the new layout.
    pub copied: u64,
    /// Items already under the new layout (or whose keys coincide).
    pub already_new: u64,
    /// Items that are not events of either layout (left alone).
    pub foreign: u64,
    /// Pages read.
    pub pages: u64,
    /// This run went on from a saved cursor.
    pub resumed: bool,
    /// Every item read: the table is `backfilled`.
    pub done: bool,
}

/// Copies every old-layout item of `table` to the new layout, through a
/// writer of its own (the writer crate's batching, rate control and
/// per-key pacing, at `writer.capacity_share` of the table's capacity).
///
/// Idempotent: a copy is a put of the event's item under its new key, the
/// same item a dual write gives. Resumable: after each Scan page's copies
/// are confirmed, the page's end is saved in the coordinator table
/// (`coordinator`, item `cursor_key`); a crash repeats at most one page.
/// At the end the table is tagged `backfilled`. `progress` is called after
/// each page.
pub async fn backfill(
    client: &aws_sdk_dynamodb::Client,
    transport: Arc<dyn Transport>,
    config: &RouterConfig,
    coordinator: &str,
    table: &str,
    opts: &BackfillOptions,
    mut progress: impl FnMut(&BackfillProgress),
) -> Result<BackfillProgress, MigrateError> {
    let (arn, layout) = table_layout(client, table)
        .await?
        .ok_or_else(|| MigrateError::NoTable(table.to_string()))?;
    let mut done = BackfillProgress {
        table: table.to_string(),
        ..BackfillProgress::default()
    };
    let state = layout.state(config);
    match state {
        MigrationState::Dual => {}
        MigrationState::Backfilled | MigrationState::NewOnly => {
            done.done = true;
            return Ok(done);
        }
        MigrationState::OldOnly => {
            return Err(MigrateError::State {
                table: table.to_string(),
                state,
                hint: "start `tidemark run` with schema.migrate_from first (it makes the tables \
                       that take writes dual); a table whose period ended before the migration \
                       can stay old-only",
            });
        }
        MigrationState::Other => {
            return Err(MigrateError::State {
                table: table.to_string(),
                state,
                hint: "its recorded layout is neither schema.key nor schema.migrate_from",
            });
        }
    }
    let (Some(to), Some(from)) = (
        layout.layout.as_deref().and_then(parse_layout),
        layout.layout_from.as_deref().and_then(parse_layout),
    ) else {
        return Err(MigrateError::State {
            table: table.to_string(),
            state: MigrationState::Other,
            hint: "its layout tags cannot be read",
        });
    };
    let call = |operation: &'static str, message: String| MigrateError::Call {
        operation,
        table: table.to_string(),
        message,
    };
    let cursor_item = client
        .get_item()
        .table_name(coordinator)
        .key("leaseKey", AttributeValue::S(cursor_key(table)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| call("GetItem", tidemark_aws_errors::describe(&e)))?;
    let mut start = None;
    if let Some(c) = cursor_item.item() {
        let n = |k: &str| match c.get(k) {
            Some(AttributeValue::N(v)) => v.parse().unwrap_or(0),
            _ => 0,
        };
        done.scanned = n("scanned");
        done.copied = n("copied");
        done.already_new = n("alreadyNew");
        done.foreign = n("foreign");
        done.pages = n("pages");
        done.resumed = true;
        if let Some(AttributeValue::M(k)) = c.get("cursor") {
            start = Some(k.clone());
        }
        // Finished before, but stopped before the tag was set.
        done.done = matches!(c.get("done"), Some(AttributeValue::Bool(true)));
    }
    let (writer, task) = Writer::builder(client.clone(), transport, config.key_attributes.clone())
        .config(opts.writer.clone())
        .start();
    let shared: tidemark_schema::SharedStr = table.into();
    let mut pages_this_run = 0u64;
    let result = loop {
        if done.done {
            break Ok(());
        }
        if opts.max_pages.is_some_and(|m| pages_this_run >= m) {
            break Ok(());
        }
        let page = match client
            .scan()
            .table_name(table)
            .limit(opts.page_size)
            .set_exclusive_start_key(start.take())
            .send()
            .await
        {
            Ok(p) => p,
            Err(e) => break Err(call("Scan", tidemark_aws_errors::describe(&e))),
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut subs = Vec::new();
        for item in page.items() {
            done.scanned += 1;
            match copy_of(item, config, &from, &to) {
                Copy::New(key, copy) => {
                    let tx = tx.clone();
                    subs.push(Submission {
                        table: shared.clone(),
                        key,
                        item: WireItem::encode(&copy),
                        done: Completion::from_fn(move |o| {
                            let _ = tx.send(o);
                        }),
                    });
                }
                Copy::AlreadyNew => done.already_new += 1,
                Copy::Foreign => done.foreign += 1,
            }
        }
        drop(tx);
        let n = subs.len();
        if let Err(e) = writer.submit_all(subs).await {
            break Err(MigrateError::Write {
                table: table.to_string(),
                message: e.to_string(),
            });
        }
        writer.flush().await;
        // Every copy of the page confirmed before the cursor moves on.
        let mut refused = None;
        let mut confirmed = 0usize;
        while let Some(outcome) = rx.recv().await {
            match outcome {
                WriteOutcome::Stored => confirmed += 1,
                WriteOutcome::Rejected { message, .. } => refused = Some(message),
            }
        }
        if let Some(message) = refused
            .or_else(|| (confirmed != n).then(|| format!("{confirmed} of {n} copies confirmed")))
        {
            break Err(MigrateError::Write {
                table: table.to_string(),
                message,
            });
        }
        done.copied += n as u64;
        done.pages += 1;
        pages_this_run += 1;
        start = page.last_evaluated_key;
        done.done = start.is_none();
        if let Err(e) = save_cursor(client, coordinator, &done, start.as_ref()).await {
            break Err(e);
        }
        progress(&done);
    };
    writer.close();
    let stopped = task.await;
    result?;
    match stopped {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return Err(MigrateError::Write {
                table: table.to_string(),
                message: e.to_string(),
            });
        }
        Err(e) => {
            return Err(MigrateError::Write {
                table: table.to_string(),
                message: e.to_string(),
            });
        }
    }
    if done.done {
        set_state(client, table, &arn, "backfilled").await?;
    }
    Ok(done)
}

/// What the backfill does with one item.
enum Copy {
    /// Write this copy under this (new-layout) key.
    New(ItemKey, Item),
    /// The item is under its new key already.
    AlreadyNew,
    /// Not an event item of the old layout.
    Foreign,
}

/// The new-layout copy of an old-layout event item.
fn copy_of(item: &Item, config: &RouterConfig, from: &KeyStrategy, to: &KeyStrategy) -> Copy {
    let s = |name: &str| match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.as_str()),
        _ => None,
    };
    let attrs = &config.attributes;
    let keys = &config.key_attributes;
    let (Some(entity), Some(event_id), Some(pk), Some(sk)) = (
        s(&attrs.entity),
        s(&attrs.event_id),
        s(&keys.pk),
        s(&keys.sk),
    ) else {
        return Copy::Foreign;
    };
    let Some(ts) = (match item.get(&attrs.timestamp_ms) {
        Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
        _ => None,
    }) else {
        return Copy::Foreign;
    };
    let new = to.key(entity, ts, event_id);
    if (new.pk(), new.sk()) == (pk, sk) {
        return Copy::AlreadyNew;
    }
    let old = from.key(entity, ts, event_id);
    if (old.pk(), old.sk()) != (pk, sk) {
        return Copy::Foreign;
    }
    let mut copy = item.clone();
    copy.insert(keys.pk.clone(), AttributeValue::S(new.pk().to_string()));
    copy.insert(keys.sk.clone(), AttributeValue::S(new.sk().to_string()));
    Copy::New(new, copy)
}

/// Saves the cursor (the last key read and confirmed) and the counts.
async fn save_cursor(
    client: &aws_sdk_dynamodb::Client,
    coordinator: &str,
    p: &BackfillProgress,
    cursor: Option<&Item>,
) -> Result<(), MigrateError> {
    let n = |v: u64| AttributeValue::N(v.to_string());
    let mut req = client
        .put_item()
        .table_name(coordinator)
        .item("leaseKey", AttributeValue::S(cursor_key(&p.table)))
        .item("scanned", n(p.scanned))
        .item("copied", n(p.copied))
        .item("alreadyNew", n(p.already_new))
        .item("foreign", n(p.foreign))
        .item("pages", n(p.pages))
        .item("done", AttributeValue::Bool(p.done));
    if let Some(c) = cursor {
        req = req.item("cursor", AttributeValue::M(c.clone()));
    }
    req.send().await.map_err(|e| MigrateError::Call {
        operation: "PutItem",
        table: coordinator.to_string(),
        message: tidemark_aws_errors::describe(&e),
    })?;
    Ok(())
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

    /// The backfill copies exactly the old-layout event items, with only
    /// the key changed; new-layout items and others are left alone.
    #[test]
    fn copies_are_old_items_under_their_new_key() {
        let mut config = RouterConfig::with_prefix("t");
        config.key = tb(8);
        config.migrate_from = Some(tb(4));
        let router = tidemark_schema::Router::new(config.clone()).unwrap();
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-22T06:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let origin = tidemark_schema::Origin::Sqs {
            queue: "q".into(),
            message_id: "m".into(),
            index: 0,
        };
        let mut copied = 0;
        for i in 0..32 {
            let event = format!(
                r#"{{"deviceId":"d{i}","timestamp":"2026-11-22T05:00:00Z","eventId":"e{i}","t":{i}}}"#
            );
            let tidemark_schema::route::Routes { new, old } = router
                .route(event.as_bytes(), &origin, 0, now, &mut Default::default())
                .unwrap();
            let new_item = new.item.to_item().unwrap();
            assert!(matches!(
                copy_of(&new_item, &config, &tb(4), &tb(8)),
                Copy::AlreadyNew
            ));
            if let Some(old) = old {
                match copy_of(&old.item.to_item().unwrap(), &config, &tb(4), &tb(8)) {
                    Copy::New(key, copy) => {
                        assert_eq!(key, new.key);
                        assert_eq!(copy, new_item, "the dual write's own item");
                        copied += 1;
                    }
                    _ => panic!("d{i}: an old item is copied"),
                }
            }
        }
        assert!(copied > 0);
        let mut foreign = Item::new();
        foreign.insert("pk".into(), AttributeValue::S("x".into()));
        assert!(matches!(
            copy_of(&foreign, &config, &tb(4), &tb(8)),
            Copy::Foreign
        ));
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
