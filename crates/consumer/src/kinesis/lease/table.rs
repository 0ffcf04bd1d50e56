//! The lease table: fenced conditional writes of lease items through a
//! [`LeaseStore`], each with the bounded retry of [`write_once`].

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use tidemark_governor::Governor;

use super::item::{Checkpoint, Lease};
use super::key::{KeyFormat, StreamIdentifier};
use super::scoped::ScopedStore;
use super::store::{DynamoStore, LeaseDelete, LeaseStore, LeaseWrite};
use super::timing::{Fenced, LeaseTiming, Written};
use super::write::write_once;
use crate::error::{AwsError, ConsumerError};

/// The lease table. Every write that touches an owned lease is conditional on
/// `leaseCounter` (and owner), so a worker that lost a lease cannot write it.
///
/// The calls go to a [`LeaseStore`]: DynamoDB (whose
/// conditional writes and re-reads use a client with SDK retries off and the
/// attempt timeout of [`LeaseTiming`]), or an in-memory table in the fleet
/// simulator. Retries are bounded the same way whatever the store.
#[derive(Debug, Clone)]
pub struct LeaseTable {
    pub(crate) store: Arc<dyn LeaseStore>,
    table: String,
    timing: LeaseTiming,
    gov: Option<Governor>,
    /// What the table is for, in key-schema errors.
    role: &'static str,
    /// Multi-stream mode: the one stream this handle shows
    /// ([`LeaseTable::scoped`]).
    pub(crate) scope: Option<StreamIdentifier>,
}

impl LeaseTable {
    /// A handle on table `table`, with the timing of the default failover
    /// time.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self::with_timing(client, table, LeaseTiming::default())
    }

    /// A handle on table `table` whose writes follow `timing`.
    pub fn with_timing(client: Client, table: impl Into<String>, timing: LeaseTiming) -> Self {
        let store = DynamoStore::new(client, table, timing.attempt);
        Self::with_store(Arc::new(store), timing)
    }

    /// A handle on the table behind `store` whose writes follow `timing`.
    pub fn with_store(store: Arc<dyn LeaseStore>, timing: LeaseTiming) -> Self {
        Self {
            table: store.name().to_string(),
            store,
            timing,
            gov: None,
            role: "lease table",
            scope: None,
        }
    }

    /// Names what the table is for in errors (default `lease table`).
    pub fn with_role(mut self, role: &'static str) -> Self {
        self.role = role;
        self
    }

    /// Lease writes are admitted by, and report to, the DynamoDB endpoint's
    /// shared governor.
    pub(crate) fn with_governor(mut self, gov: Governor) -> Self {
        self.gov = Some(gov);
        self
    }

    /// The timing of this table's writes.
    pub fn timing(&self) -> &LeaseTiming {
        &self.timing
    }

    /// The table name.
    pub fn name(&self) -> &str {
        &self.table
    }

    /// Creates the table (on-demand billing) unless it exists, then waits
    /// until it is ACTIVE. An existing table with another key schema is
    /// refused ([`ConsumerError::KeySchema`], naming found and expected).
    pub async fn create_if_absent(&self, timeout: Duration) -> Result<(), ConsumerError> {
        match self.store.ensure_table(timeout).await {
            // The store knows the table; this handle knows what it is for.
            Err(ConsumerError::KeySchema(mut m)) => {
                m.role = self.role;
                Err(ConsumerError::KeySchema(m))
            }
            other => other,
        }
    }

    /// Every lease (strongly consistent scan).
    pub async fn list(&self) -> Result<Vec<Lease>, ConsumerError> {
        self.list_with(true).await
    }

    /// Every lease; `consistent` false reads eventually consistently (half
    /// the read capacity; may miss writes of the last second or so).
    pub(crate) async fn list_with(&self, consistent: bool) -> Result<Vec<Lease>, ConsumerError> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self.store.scan_page(consistent, start).await?;
            out.extend(page.leases);
            start = page.next;
            if start.is_none() {
                return Ok(out);
            }
        }
    }

    /// The keys of the leases `owner` holds, from the owner index (one
    /// eventually consistent Query; see [`LeaseStore::owned_by`]).
    pub(crate) async fn owned_by(&self, owner: &str) -> Result<Vec<String>, ConsumerError> {
        self.store.owned_by(owner).await
    }

    /// Makes sure the owner index exists (adding it when absent).
    pub(crate) async fn ensure_owner_index(&self, timeout: Duration) -> Result<(), ConsumerError> {
        self.store.ensure_owner_index(timeout).await
    }

    /// The lease `key` (consistent read); `None` when there is none. One
    /// attempt: it is the re-read after an unanswered write.
    pub async fn get(&self, key: &str) -> Result<Option<Lease>, AwsError> {
        self.store.get(key).await
    }

    /// Sends a conditional write with [`write_once`]; after an unanswered
    /// attempt, a failed condition is checked against the item: `ours` says
    /// whether it shows this write applied.
    async fn send_fenced(
        &self,
        write: LeaseWrite,
        counter_after: u64,
        ours: impl Fn(&Lease) -> bool,
    ) -> Fenced {
        let key = write.key().to_string();
        let sent = write_once(
            &self.timing,
            self.gov.as_ref(),
            write.op(),
            || self.store.write(&write),
            || async {
                Ok(self
                    .get(&key)
                    .await?
                    .is_some_and(|l| l.counter == counter_after && ours(&l)))
            },
        )
        .await?;
        Ok(sent.map(|sent| Written {
            counter: counter_after,
            sent,
        }))
    }

    /// Creates `lease` unless one with its key exists. Returns true if created.
    pub async fn create_lease(&self, lease: &Lease) -> Result<bool, AwsError> {
        // Whoever created it, the lease exists: a re-read only decides
        // whether to log "created".
        let r = self
            .send_fenced(LeaseWrite::Create(lease.clone()), lease.counter, |_| false)
            .await?;
        Ok(r.is_some())
    }

    /// Takes a free, expired or someone else's lease whose counter is still
    /// `observed.counter` (the same write serves take and steal).
    pub async fn acquire(&self, observed: &Lease, me: &str) -> Fenced {
        let write = LeaseWrite::Acquire {
            key: observed.key.clone(),
            counter: observed.counter,
            me: me.to_string(),
            switches: u64::from(observed.owner.as_deref() != Some(me)),
        };
        self.send_fenced(write, observed.counter + 1, |l| {
            l.owner.as_deref() == Some(me)
        })
        .await
    }

    /// Renews a held lease (bumps the counter).
    pub async fn renew(&self, key: &str, me: &str, counter: u64) -> Fenced {
        let write = LeaseWrite::Renew {
            key: key.to_string(),
            me: me.to_string(),
            counter,
        };
        self.send_fenced(write, counter + 1, |l| l.owner.as_deref() == Some(me))
            .await
    }

    /// Releases a held lease: owner cleared, so others take it at once.
    pub async fn release(&self, key: &str, me: &str, counter: u64) -> Fenced {
        let write = LeaseWrite::Release {
            key: key.to_string(),
            me: me.to_string(),
            counter,
        };
        self.send_fenced(write, counter + 1, |l| l.owner.is_none())
            .await
    }

    /// Writes a checkpoint of a held lease (and the child shard ids at shard
    /// end).
    pub(crate) async fn checkpoint(
        &self,
        key: &str,
        me: &str,
        counter: u64,
        checkpoint: &Checkpoint,
        children: &[String],
    ) -> Fenced {
        let write = LeaseWrite::Checkpoint {
            key: key.to_string(),
            me: me.to_string(),
            counter,
            checkpoint: checkpoint.clone(),
            children: children.to_vec(),
        };
        self.send_fenced(write, counter + 1, |l| {
            l.owner.as_deref() == Some(me) && &l.checkpoint == checkpoint
        })
        .await
    }
}

impl LeaseTable {
    /// Deletes the lease `observed` unless it changed since it was seen
    /// (counter and checkpoint), with the bounded retry of [`write_once`]:
    /// after an unanswered attempt, a lease found gone counts as deleted.
    /// True when deleted, false when it moved on (or was already gone).
    pub(crate) async fn delete(&self, observed: &Lease) -> Result<bool, AwsError> {
        let delete = LeaseDelete {
            key: observed.key.clone(),
            counter: observed.counter,
            checkpoint: observed.checkpoint.clone(),
        };
        let sent = write_once(
            &self.timing,
            self.gov.as_ref(),
            "DeleteItem",
            || self.store.delete(&delete),
            || async { Ok(self.get(&delete.key).await?.is_none()) },
        )
        .await?;
        Ok(sent.is_some())
    }
}

impl LeaseTable {
    /// The view of `stream`'s leases in this table ([`ScopedStore`]).
    pub(crate) fn scoped(&self, stream: &StreamIdentifier) -> LeaseTable {
        let mut t = self.clone();
        t.store = Arc::new(ScopedStore::new(self.store.clone(), stream.clone()));
        t.scope = Some(stream.clone());
        t
    }

    /// The stream this table handle is scoped to (`None`: the whole table).
    pub(crate) fn scope(&self) -> Option<&StreamIdentifier> {
        self.scope.as_ref()
    }
}

/// Refuses a lease table holding a key of the other format than `expected`:
/// one table serves one mode, and keys are never migrated implicitly.
pub(crate) async fn refuse_other_format(
    table: &LeaseTable,
    expected: KeyFormat,
) -> Result<(), ConsumerError> {
    let leases = table.list().await?;
    match leases.iter().find(|l| KeyFormat::of(&l.key) != expected) {
        None => Ok(()),
        Some(l) => Err(ConsumerError::LeaseTable {
            table: table.name().to_string(),
            problem: format!(
                "holds lease `{}` with {}, but this worker is configured for {}; \
                 a lease table serves one mode: use another lease_table (a new \
                 table starts at the initial position) or switch the config back",
                l.key,
                KeyFormat::of(&l.key).describe(),
                expected.describe()
            ),
        }),
    }
}
