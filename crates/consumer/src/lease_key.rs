//! KCL multi-stream lease keys, and the lease-table view of one stream.
//!
//! In multi-stream mode the KCL (2.3+, and 3.x) keys every lease
//! `account:stream:creationEpoch:shardId` (`MultiStreamLease.getLeaseKey`:
//! the serialized `StreamIdentifier` plus `:` plus the shard id) and writes
//! two more attributes, `streamName` (the serialized stream identifier, so
//! named "for legacy reasons") and `shardId`
//! (`DynamoDBMultiStreamLeaseSerializer`). Parent shard ids stay bare shard
//! ids. In single-stream mode the key is the bare shard id.
//!
//! [`ScopedStore`] shows the lease code one stream's leases under their
//! shard ids: the lease protocol (fencing, balancing, resharding) runs per
//! stream unchanged, and only the keys on the wire carry the stream.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::error::{AwsError, ConsumerError};
use crate::lease::{Lease, LeaseTable};
use crate::lease_store::{LeaseDelete, LeaseStore, LeaseWrite, ScanPage};

/// A stream as the KCL names it in multi-stream lease keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamIdentifier {
    /// The owning AWS account id (digits).
    pub account: String,
    /// The stream name.
    pub name: String,
    /// The stream's creation time in seconds since the epoch (> 0):
    /// a stream deleted and created again under the same name gets new keys.
    pub creation_epoch: u64,
}

impl StreamIdentifier {
    /// Checks the parts as the KCL's `STREAM_IDENTIFIER_PATTERN`
    /// (`[0-9]+:[^:]+:[0-9]+`, epoch above 0) does.
    pub fn new(
        account: impl Into<String>,
        name: impl Into<String>,
        creation_epoch: u64,
    ) -> Result<Self, String> {
        let (account, name) = (account.into(), name.into());
        if account.is_empty() || !account.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("account id `{account}` is not all digits"));
        }
        if name.is_empty() || name.contains(':') {
            return Err(format!("stream name `{name}` is empty or contains ':'"));
        }
        if creation_epoch == 0 {
            return Err("creation epoch must be above 0".into());
        }
        Ok(Self {
            account,
            name,
            creation_epoch,
        })
    }

    /// Parses `account:stream:creationEpoch`.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split(':');
        let (account, name, epoch) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !epoch.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Self::new(account, name, epoch.parse().ok()?).ok()
    }

    /// The lease key of `shard_id` of this stream.
    pub fn lease_key(&self, shard_id: &str) -> String {
        format!("{self}:{shard_id}")
    }
}

/// `account:stream:creationEpoch`, as `StreamIdentifier.serialize()`.
impl fmt::Display for StreamIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.account, self.name, self.creation_epoch)
    }
}

/// Splits a multi-stream lease key into its stream and shard id; `None` for
/// a single-stream key (a bare shard id) or anything else.
pub fn parse_lease_key(key: &str) -> Option<(StreamIdentifier, &str)> {
    let mut cut = key.match_indices(':').map(|(i, _)| i);
    let (_, _, third) = (cut.next()?, cut.next()?, cut.next()?);
    let shard = &key[third + 1..];
    if shard.is_empty() || shard.contains(':') {
        return None;
    }
    Some((StreamIdentifier::parse(&key[..third])?, shard))
}

/// The two lease-key formats a table can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormat {
    /// Bare shard ids (`source.stream`; the KCL's single-stream mode).
    SingleStream,
    /// `account:stream:creationEpoch:shardId` (`source.streams`).
    MultiStream,
}

impl KeyFormat {
    /// The format of one lease key.
    pub fn of(key: &str) -> Self {
        if parse_lease_key(key).is_some() {
            Self::MultiStream
        } else {
            Self::SingleStream
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::SingleStream => "single-stream keys (bare shard ids, `source.stream`)",
            Self::MultiStream => {
                "KCL multi-stream keys (`account:stream:creationEpoch:shardId`, `source.streams`)"
            }
        }
    }
}

/// Refuses a lease table holding a key of the other format than `expected`:
/// one table serves one mode, and keys are never migrated implicitly.
pub async fn refuse_other_format(
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

/// The leases of one stream in a multi-stream table, under their shard ids.
/// Writes go out with the full key; leases of other streams are not seen.
#[derive(Debug)]
pub struct ScopedStore {
    inner: Arc<dyn LeaseStore>,
    stream: StreamIdentifier,
    prefix: String,
}

impl ScopedStore {
    /// A view of `stream`'s leases in `inner`.
    pub fn new(inner: Arc<dyn LeaseStore>, stream: StreamIdentifier) -> Self {
        let prefix = format!("{stream}:");
        Self {
            inner,
            stream,
            prefix,
        }
    }

    /// The stream this view shows.
    pub fn stream(&self) -> &StreamIdentifier {
        &self.stream
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

impl LeaseTable {
    /// The view of `stream`'s leases in this table ([`ScopedStore`]).
    pub fn scoped(&self, stream: &StreamIdentifier) -> LeaseTable {
        let mut t = self.clone();
        t.store = Arc::new(ScopedStore::new(self.store.clone(), stream.clone()));
        t.scope = Some(stream.clone());
        t
    }

    /// The stream this table handle is scoped to (`None`: the whole table).
    pub fn scope(&self) -> Option<&StreamIdentifier> {
        self.scope.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Checkpoint;
    use crate::lease_store::ScanPage;
    use std::sync::Mutex;

    #[test]
    fn keys_round_trip() {
        let id = StreamIdentifier::new("123456789012", "orders", 1_603_840_000).unwrap();
        assert_eq!(id.to_string(), "123456789012:orders:1603840000");
        let key = id.lease_key("shardId-000000000007");
        assert_eq!(key, "123456789012:orders:1603840000:shardId-000000000007");
        let (back, shard) = parse_lease_key(&key).unwrap();
        assert_eq!((back, shard), (id.clone(), "shardId-000000000007"));
        assert_eq!(StreamIdentifier::parse(&id.to_string()), Some(id));
    }

    #[test]
    fn names_with_dashes_dots_and_underscores_and_long_epochs() {
        // Stream names may hold `-`, `.`, `_`; account ids keep leading zeros.
        let key = "000000000000:click-stream.v2_eu:1764000000:shardId-000000000012";
        let (id, shard) = parse_lease_key(key).unwrap();
        assert_eq!(id.account, "000000000000");
        assert_eq!(id.name, "click-stream.v2_eu");
        assert_eq!(id.creation_epoch, 1_764_000_000);
        assert_eq!(shard, "shardId-000000000012");
        assert_eq!(id.lease_key(shard), key);
        let far = StreamIdentifier::new("1", "s", u64::MAX).unwrap();
        assert_eq!(parse_lease_key(&far.lease_key("x")).unwrap().0, far);
    }

    #[test]
    fn single_stream_and_malformed_keys_are_not_multi_stream() {
        for key in [
            "shardId-000000000001",
            "",
            "orders:shardId-1",
            "acct:orders:1:shardId-1",           // account not digits
            "123:orders:0:shardId-1",            // epoch 0
            "123:orders:-5:shardId-1",           // epoch negative
            "123:orders:1:",                     // no shard id
            "123::1:shardId-1",                  // no stream name
            "123:orders:1:shardId-1:extra",      // too many parts
            "123:orders:99999999999999999999:s", // epoch past u64
        ] {
            assert_eq!(parse_lease_key(key), None, "{key}");
            assert_eq!(KeyFormat::of(key), KeyFormat::SingleStream, "{key}");
        }
        assert_eq!(
            KeyFormat::of("1:s:1:shardId-000000000000"),
            KeyFormat::MultiStream
        );
        assert!(StreamIdentifier::new("12a", "s", 1).is_err());
        assert!(StreamIdentifier::new("12", "a:b", 1).is_err());
        assert!(StreamIdentifier::parse("12:s").is_none());
    }

    /// An in-memory table with DynamoDB's conditional semantics
    /// ([`LeaseWrite::apply`]).
    #[derive(Debug, Default)]
    struct Mem(Mutex<std::collections::BTreeMap<String, Lease>>);

    impl LeaseStore for Mem {
        fn name(&self) -> &str {
            "mem"
        }
        fn ensure_table(&self, _: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
            Box::pin(async { Ok(()) })
        }
        fn scan_page(
            &self,
            _: bool,
            _: Option<String>,
        ) -> BoxFuture<'_, Result<ScanPage, ConsumerError>> {
            let leases = self.0.lock().unwrap().values().cloned().collect();
            Box::pin(async move { Ok(ScanPage { leases, next: None }) })
        }
        fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Lease>, AwsError>> {
            let l = self.0.lock().unwrap().get(key).cloned();
            Box::pin(async move { Ok(l) })
        }
        fn write<'a>(&'a self, w: &'a LeaseWrite) -> BoxFuture<'a, Result<(), AwsError>> {
            let mut m = self.0.lock().unwrap();
            let r = w.apply(m.get(w.key())).map(|l| {
                m.insert(l.key.clone(), l);
            });
            Box::pin(async move { r })
        }
        fn owned_by<'a>(
            &'a self,
            owner: &'a str,
        ) -> BoxFuture<'a, Result<Vec<String>, ConsumerError>> {
            let keys = (self.0.lock().unwrap().values())
                .filter(|l| l.owner.as_deref() == Some(owner))
                .map(|l| l.key.clone())
                .collect();
            Box::pin(async move { Ok(keys) })
        }
        fn ensure_owner_index(&self, _: Duration) -> BoxFuture<'_, Result<(), ConsumerError>> {
            Box::pin(async { Ok(()) })
        }
        fn delete<'a>(&'a self, d: &'a LeaseDelete) -> BoxFuture<'a, Result<(), AwsError>> {
            let mut m = self.0.lock().unwrap();
            let r = d.apply(m.get(&d.key)).map(|()| {
                m.remove(&d.key);
            });
            Box::pin(async move { r })
        }
    }

    #[tokio::test]
    async fn a_scoped_store_queries_owners_and_deletes_only_its_own_stream() {
        let mem = Arc::new(Mem::default());
        let a = StreamIdentifier::new("111111111111", "a", 10).unwrap();
        let b = StreamIdentifier::new("111111111111", "b", 20).unwrap();
        for id in [&a, &b] {
            let mut l = Lease::new(id.lease_key("shardId-1"), Checkpoint::TrimHorizon, vec![]);
            l.owner = Some("w1".into());
            mem.0.lock().unwrap().insert(l.key.clone(), l);
        }
        let sa = ScopedStore::new(mem.clone(), a.clone());
        assert_eq!(
            sa.owned_by("w1").await.unwrap(),
            vec!["shardId-1".to_string()]
        );
        assert!(sa.owned_by("w2").await.unwrap().is_empty());
        let seen = sa.get("shardId-1").await.unwrap().unwrap();
        let d = LeaseDelete {
            key: "shardId-1".into(),
            counter: seen.counter,
            checkpoint: seen.checkpoint.clone(),
        };
        sa.delete(&d).await.unwrap();
        let keys: Vec<String> = mem.0.lock().unwrap().keys().cloned().collect();
        assert_eq!(keys, vec![b.lease_key("shardId-1")], "b's lease stays");
    }

    #[tokio::test]
    async fn a_scoped_table_sees_its_stream_under_shard_ids_and_writes_full_keys() {
        let mem = Arc::new(Mem::default());
        let table = LeaseTable::with_store(mem.clone(), Default::default());
        let a = StreamIdentifier::new("111111111111", "a", 10).unwrap();
        let b = StreamIdentifier::new("111111111111", "b", 20).unwrap();
        let (ta, tb) = (table.scoped(&a), table.scoped(&b));
        let lease = Lease::new("shardId-000000000000", Checkpoint::TrimHorizon, vec![]);
        assert!(ta.create_lease(&lease).await.unwrap());
        assert!(
            tb.create_lease(&lease).await.unwrap(),
            "same shard id, other stream"
        );
        let keys: Vec<String> = mem.0.lock().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "111111111111:a:10:shardId-000000000000",
                "111111111111:b:20:shardId-000000000000"
            ]
        );
        // Each view lists only its own stream, under the shard id.
        let listed = ta.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].key, "shardId-000000000000");
        // A fenced write through the view lands on the stream's item only.
        let w = ta.acquire(&listed[0], "me").await.unwrap();
        assert_eq!(w.map(|w| w.counter), Some(1));
        let got = ta.get("shardId-000000000000").await.unwrap().unwrap();
        assert_eq!(got.owner.as_deref(), Some("me"));
        let other = tb.get("shardId-000000000000").await.unwrap().unwrap();
        assert_eq!(other.owner, None);
        // The whole table is in multi-stream format; a single-stream worker
        // is refused, naming a key.
        refuse_other_format(&table, KeyFormat::MultiStream)
            .await
            .unwrap();
        let e = refuse_other_format(&table, KeyFormat::SingleStream)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("111111111111:a:10:shardId-000000000000"), "{e}");
        assert!(e.contains("source.stream"), "{e}");
    }

    #[tokio::test]
    async fn mixing_is_refused_both_ways() {
        let mem = Arc::new(Mem::default());
        let table = LeaseTable::with_store(mem.clone(), Default::default());
        // An empty table suits both modes.
        refuse_other_format(&table, KeyFormat::SingleStream)
            .await
            .unwrap();
        refuse_other_format(&table, KeyFormat::MultiStream)
            .await
            .unwrap();
        let lease = Lease::new("shardId-000000000001", Checkpoint::TrimHorizon, vec![]);
        assert!(table.create_lease(&lease).await.unwrap());
        refuse_other_format(&table, KeyFormat::SingleStream)
            .await
            .unwrap();
        let e = refuse_other_format(&table, KeyFormat::MultiStream)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ConsumerError::LeaseTable { table, .. } if table == "mem"),
            "{e}"
        );
        assert!(e.to_string().contains("`shardId-000000000001`"), "{e}");
    }

    #[test]
    fn items_carry_the_kcl_multi_stream_attributes() {
        let id = StreamIdentifier::new("123456789012", "orders", 5).unwrap();
        let lease = Lease::new(
            id.lease_key("shardId-000000000002"),
            Checkpoint::TrimHorizon,
            vec!["shardId-000000000000".into()],
        );
        let item = lease.to_item();
        assert_eq!(item["streamName"].as_s().unwrap(), "123456789012:orders:5");
        assert_eq!(item["shardId"].as_s().unwrap(), "shardId-000000000002");
        assert_eq!(
            item["parentShardId"].as_ss().unwrap(),
            &["shardId-000000000000".to_string()],
            "parents stay bare shard ids, as the KCL writes them"
        );
        let single = Lease::new("shardId-000000000002", Checkpoint::TrimHorizon, vec![]);
        assert!(!single.to_item().contains_key("streamName"));
    }
}
