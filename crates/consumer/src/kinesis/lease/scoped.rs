//! The lease-table view of one stream of a multi-stream table.
//!
//! [`ScopedStore`] shows the lease code one stream's leases under their
//! shard ids: the lease protocol (fencing, balancing, resharding) runs per
//! stream unchanged, and only the keys on the wire carry the stream.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::item::Lease;
use super::key::StreamIdentifier;
use super::store::{LeaseDelete, LeaseStore, LeaseWrite, ScanPage};
use crate::error::{AwsError, ConsumerError};

/// The leases of one stream in a multi-stream table, under their shard ids.
/// Writes go out with the full key; leases of other streams are not seen.
#[derive(Debug)]
pub(super) struct ScopedStore {
    inner: Arc<dyn LeaseStore>,
    stream: StreamIdentifier,
    prefix: String,
}

impl ScopedStore {
    /// A view of `stream`'s leases in `inner`.
    pub(super) fn new(inner: Arc<dyn LeaseStore>, stream: StreamIdentifier) -> Self {
        let prefix = format!("{stream}:");
        Self {
            inner,
            stream,
            prefix,
        }
    }

    /// `lease` under its shard id, if it belongs to this stream.
    fn narrow(&self, mut lease: Lease) -> Option<Lease> {
        let shard = lease.key.strip_prefix(&self.prefix)?;
        if shard.is_empty() || shard.contains(':') {
            return None;
        }
        lease.key = shard.to_string();
        Some(lease)
    }

    fn widen(&self, write: &LeaseWrite) -> LeaseWrite {
        let mut w = write.clone();
        match &mut w {
            LeaseWrite::Create(l) => l.key = self.stream.lease_key(&l.key),
            LeaseWrite::Acquire { key, .. }
            | LeaseWrite::Renew { key, .. }
            | LeaseWrite::Release { key, .. }
            | LeaseWrite::Checkpoint { key, .. } => *key = self.stream.lease_key(key),
        }
        w
    }
}

impl LeaseStore for ScopedStore {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn ensure_table(&self, timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
        self.inner.ensure_table(timeout)
    }

    fn scan_page(
        &self,
        consistent: bool,
        start: Option<String>,
    ) -> BoxFuture<'_, Result<ScanPage, ConsumerError>> {
        Box::pin(async move {
            let page = self.inner.scan_page(consistent, start).await?;
            Ok(ScanPage {
                leases: page
                    .leases
                    .into_iter()
                    .filter_map(|l| self.narrow(l))
                    .collect(),
                next: page.next,
            })
        })
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Lease>, AwsError>> {
        Box::pin(async move {
            let full = self.stream.lease_key(key);
            Ok(self.inner.get(&full).await?.and_then(|l| self.narrow(l)))
        })
    }

    fn write<'a>(&'a self, write: &'a LeaseWrite) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(async move { self.inner.write(&self.widen(write)).await })
    }

    fn owned_by<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<Vec<String>, ConsumerError>> {
        Box::pin(async move {
            let keys = self.inner.owned_by(owner).await?;
            Ok(keys
                .into_iter()
                .filter_map(|k| {
                    let shard = k.strip_prefix(&self.prefix)?;
                    (!shard.is_empty() && !shard.contains(':')).then(|| shard.to_string())
                })
                .collect())
        })
    }

    fn ensure_owner_index(&self, timeout: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
        self.inner.ensure_owner_index(timeout)
    }

    fn delete<'a>(&'a self, delete: &'a LeaseDelete) -> BoxFuture<'a, Result<(), AwsError>> {
        Box::pin(async move {
            let mut d = delete.clone();
            d.key = self.stream.lease_key(&d.key);
            self.inner.delete(&d).await
        })
    }
}
