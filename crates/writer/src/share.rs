//! Each table's share of the in-flight bound ([`TableShares`]), and which
//! tables take late data ([`LateTables`], the caller's policy). Depends on
//! no other module of the crate.
//!
//! A submission takes permits from its table's share before the writer's
//! global bound, so one table can hold at most `max_table_share` of the
//! items and bytes in flight and a slow table never takes the bound from
//! the others. A late table's submission never waits for its share: past
//! it, it is refused at once (the caller dead-letters it), because waiting
//! would stop the caller's pipeline, and with it every other table.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Says which tables take late data: events whose period is past its
/// late-arrival grace, written to a table scaled down below the active
/// tier. Their submissions never wait for their table's share, and wait at
/// most `late_max_wait` in its queue; both limits dead-letter them with
/// the reason `late_backlog` instead.
pub trait LateTables: Send + Sync + 'static {
    /// True when writes to `table` are late now. Asked on each submission
    /// and about once a second by the table's task: keep it cheap.
    fn is_late(&self, table: &str) -> bool;
}

/// Hears of partition keys held back at their partition's limit (per-key
/// pacing; see `keyrate`): adaptive write sharding's evidence. Told about
/// once a second per table while a key stays held.
pub trait HotKeys: Send + Sync + 'static {
    /// A partition key of `table` has been held back by its own budget for
    /// `held_for`, accepted at `accepted_wcu` WCU/s, close to one
    /// partition's limit; `waiting` are keys of its items waiting (oldest
    /// first, up to 64: the 32 oldest and the 32 newest when more wait):
    /// under `time_bucket` one partition key holds several entities, and the
    /// one with most items waiting is the hot one.
    fn held(
        &self,
        table: &str,
        waiting: &[tidemark_schema::ItemKey],
        held_for: std::time::Duration,
        accepted_wcu: f64,
    );
}

/// Nobody listens (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHotKeys;

impl HotKeys for NoHotKeys {
    fn held(&self, _: &str, _: &[tidemark_schema::ItemKey], _: std::time::Duration, _: f64) {}
}

/// No table is late (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoneLate;

impl LateTables for NoneLate {
    fn is_late(&self, _table: &str) -> bool {
        false
    }
}

/// One table's share: items and bytes.
#[derive(Debug)]
pub(crate) struct Share {
    pub(crate) items: Arc<Semaphore>,
    pub(crate) bytes: Arc<Semaphore>,
    max_items: usize,
    max_bytes: usize,
}

impl Share {
    /// Items of this table accepted and not yet completed.
    pub(crate) fn items_in_flight(&self) -> usize {
        self.max_items
            .saturating_sub(self.items.available_permits())
    }

    /// True when no permit of this share is held.
    fn unused(&self) -> bool {
        self.items.available_permits() == self.max_items
            && self.bytes.available_permits() == self.max_bytes
    }
}

/// The shares of every table written lately, created on a table's first
/// submission and dropped when its task retires unused.
#[derive(Debug)]
pub(crate) struct TableShares {
    shares: Mutex<HashMap<String, Arc<Share>>>,
    /// Items one table may hold.
    pub(crate) max_items: usize,
    /// Bytes one table may hold (at least one maximal item).
    pub(crate) max_bytes: usize,
}

impl TableShares {
    /// Shares of `share` of `items` and `bytes` each.
    pub(crate) fn new(items: usize, bytes: usize, share: f64) -> Self {
        let part = |n: usize| ((n as f64 * share).ceil() as usize).clamp(1, n.max(1));
        TableShares {
            shares: Mutex::new(HashMap::new()),
            max_items: part(items),
            max_bytes: part(bytes).max(tidemark_schema::size::MAX_ITEM_BYTES.min(bytes)),
        }
    }

    /// `table`'s share, created on first use.
    pub(crate) fn get(&self, table: &str) -> Arc<Share> {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = shares.get(table) {
            return s.clone();
        }
        let s = Arc::new(Share {
            items: Arc::new(Semaphore::new(self.max_items)),
            bytes: Arc::new(Semaphore::new(self.max_bytes)),
            max_items: self.max_items,
            max_bytes: self.max_bytes,
        });
        shares.insert(table.to_owned(), s.clone());
        s
    }

    /// Forgets `table`'s share if nothing holds it (its task retired).
    pub(crate) fn retire(&self, table: &str) {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        if shares.get(table).is_some_and(|s| s.unused()) {
            shares.remove(table);
        }
    }

    /// Wakes every submission waiting for a share: the writer has ended.
    pub(crate) fn close(&self) {
        let shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        for s in shares.values() {
            s.items.close();
            s.bytes.close();
        }
    }
}

/// A table's share permits for a group of submissions.
#[derive(Debug)]
pub(crate) struct SharePermits {
    pub(crate) items: OwnedSemaphorePermit,
    pub(crate) bytes: OwnedSemaphorePermit,
}

/// Takes `items` and `bytes` of `share`, waiting for them.
pub(crate) async fn acquire(
    share: &Share,
    items: u32,
    bytes: u32,
) -> Result<SharePermits, tokio::sync::AcquireError> {
    let items = share.items.clone().acquire_many_owned(items).await?;
    let bytes = share.bytes.clone().acquire_many_owned(bytes).await?;
    Ok(SharePermits { items, bytes })
}

/// Takes one item and `bytes` of `share` if free now.
pub(crate) fn try_acquire_one(share: &Share, bytes: u32) -> Result<SharePermits, TryAcquireError> {
    let items = share.items.clone().try_acquire_owned()?;
    let bytes = share.bytes.clone().try_acquire_many_owned(bytes)?;
    Ok(SharePermits { items, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_a_part_of_the_bound_and_holds_one_maximal_item() {
        let s = TableShares::new(20_000, 64 << 20, 0.5);
        assert_eq!((s.max_items, s.max_bytes), (10_000, 32 << 20));
        let s = TableShares::new(10, 1 << 20, 0.01);
        assert_eq!(s.max_items, 1);
        assert_eq!(s.max_bytes, tidemark_schema::size::MAX_ITEM_BYTES);
        let s = TableShares::new(10, 1 << 20, 1.0);
        assert_eq!((s.max_items, s.max_bytes), (10, 1 << 20));
    }

    #[tokio::test]
    async fn a_retired_share_is_forgotten_only_when_unused() {
        let s = TableShares::new(10, 1 << 20, 0.5);
        let a = s.get("a");
        let held = try_acquire_one(&a, 100).unwrap();
        assert_eq!(a.items_in_flight(), 1);
        s.retire("a");
        assert!(Arc::ptr_eq(&a, &s.get("a")), "held: kept");
        drop(held);
        s.retire("a");
        assert!(!Arc::ptr_eq(&a, &s.get("a")), "unused: forgotten");
        let b = s.get("b");
        let _all = acquire(&b, 5, 100).await.unwrap();
        assert!(try_acquire_one(&b, 1).is_err(), "at its share");
    }
}
