//! What an item of a lease table is (pure): a lease, one of the KCL's own
//! items (KCL 3.x keeps its leader lock, worker metrics, migration states
//! and stream items in the lease table from 3.5 on), or something Tidemark
//! does not know.
//!
//! The KCL's rule (3.5.1 `DynamoDBLeaseSerializer.fromDynamoRecord`): an
//! item is a lease when its `entityType` is absent or `LEASE`; every other
//! value is skipped. Tidemark's rule is stricter where the KCL relies on an
//! assumption:
//!
//! | item | class |
//! |---|---|
//! | `entityType` `LEASE`, or absent with a numeric `leaseCounter` and a key other than `Leader`, `Migration3.0`, `TableMigration3.5` | lease (a wrong type of a lease attribute: unreadable) |
//! | `entityType` `STREAM`, `LEADER`, `CLIENT_VERSION_MIGRATION`, `TABLE_MIGRATION` or `WORKER_METRIC_STATS` | KCL item |
//! | no `entityType` and key `Leader`, `Migration3.0` or `TableMigration3.5` | KCL item (the KCL types these keys by name) |
//! | anything else (another `entityType`, or neither `entityType` nor a numeric `leaseCounter`) | unknown |
//!
//! Keys alone prove nothing (a worker-metrics item is keyed by the KCL
//! application's worker id, which may look like anything); every lease
//! write of every KCL version and of Tidemark puts `leaseCounter`, and no
//! other item has one. Only leases are ever taken, assigned, balanced,
//! counted, written or deleted; the others are left exactly as they are.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::Lease;

/// The KCL's entity types other than `LEASE` (`leases/EntityType.java`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KclEntity {
    /// A stream's identity (`coordinator/streamInfo/StreamInfo.java`).
    Stream,
    /// The KCL 3.x leader lock (written by the DynamoDB lock client).
    Leader,
    /// The KCL 2.x to 3.x migration state, `Migration3.0`.
    ClientVersionMigration,
    /// The KCL 3.5 single-table migration state, `TableMigration3.5`.
    TableMigration,
    /// One KCL worker's metrics, keyed by its worker id.
    WorkerMetricStats,
}

impl KclEntity {
    /// Every entity type.
    pub const ALL: [KclEntity; 5] = [
        Self::Stream,
        Self::Leader,
        Self::ClientVersionMigration,
        Self::TableMigration,
        Self::WorkerMetricStats,
    ];

    /// The `entityType` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stream => "STREAM",
            Self::Leader => "LEADER",
            Self::ClientVersionMigration => "CLIENT_VERSION_MIGRATION",
            Self::TableMigration => "TABLE_MIGRATION",
            Self::WorkerMetricStats => "WORKER_METRIC_STATS",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// The entity the KCL infers from a key without `entityType`
    /// (`CoordinatorStateDAODelegate.resolveEntityType`).
    pub(crate) fn of_legacy_key(key: &str) -> Option<Self> {
        match key {
            LEADER_KEY => Some(Self::Leader),
            MIGRATION_KEY => Some(Self::ClientVersionMigration),
            TABLE_MIGRATION_KEY => Some(Self::TableMigration),
            _ => None,
        }
    }
}

impl fmt::Display for KclEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Key of the KCL 3.x leader lock.
pub(crate) const LEADER_KEY: &str = "Leader";
/// Key of the KCL client-version migration state.
pub(crate) const MIGRATION_KEY: &str = "Migration3.0";
/// Key of the KCL 3.5 table-migration state.
pub(crate) const TABLE_MIGRATION_KEY: &str = "TableMigration3.5";

/// What an item that is not a lease is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtherKind {
    /// One of the KCL's own items.
    Kcl(KclEntity),
    /// An item Tidemark does not know (written by a newer KCL or another
    /// tool): the reason.
    Unknown(String),
    /// A lease that does not parse (an attribute of the wrong type): what
    /// is wrong.
    Unreadable(String),
}

impl OtherKind {
    /// A short name: the KCL entity type, `unknown` or `unreadable lease`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Kcl(e) => e.as_str(),
            Self::Unknown(_) => "unknown",
            Self::Unreadable(_) => "unreadable lease",
        }
    }
}

/// An item of the lease table that is not a lease: never taken, assigned,
/// balanced, counted, written or deleted.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherItem {
    /// Its `leaseKey`.
    pub key: String,
    /// What it is.
    pub kind: OtherKind,
    /// The item as read (start-up judges the KCL's state from it).
    pub item: HashMap<String, AttributeValue>,
}

/// One item, classified.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Classified {
    /// A lease, and the first KCL 3.x attribute it carries, if any
    /// (`throughputKBps`, `checkpointOwner`, `entityType`).
    Lease(Lease, Option<&'static str>),
    /// Anything else.
    Other(OtherItem),
}

/// Attributes only KCL 3.x writes on a lease.
const KCL3_LEASE_ATTRIBUTES: [&str; 3] = ["throughputKBps", "checkpointOwner", "entityType"];

/// Classifies one item of a lease table (see the module docs).
pub(crate) fn classify(item: &HashMap<String, AttributeValue>) -> Classified {
    let key = match item.get("leaseKey") {
        Some(AttributeValue::S(k)) => k.clone(),
        other => {
            return Classified::Other(OtherItem {
                key: format!("{other:?}"),
                kind: OtherKind::Unknown("no string leaseKey".into()),
                item: item.clone(),
            });
        }
    };
    let other = |kind| {
        Classified::Other(OtherItem {
            key: key.clone(),
            kind,
            item: item.clone(),
        })
    };
    match item.get("entityType") {
        Some(AttributeValue::S(e)) if e == "LEASE" => {}
        Some(AttributeValue::S(e)) => {
            return other(match KclEntity::parse(e) {
                Some(entity) => OtherKind::Kcl(entity),
                None => OtherKind::Unknown(format!("entityType `{e}`")),
            });
        }
        Some(v) => return other(OtherKind::Unknown(format!("entityType {v:?}"))),
        None => {
            if let Some(entity) = KclEntity::of_legacy_key(&key) {
                return other(OtherKind::Kcl(entity));
            }
            if !matches!(item.get("leaseCounter"), Some(AttributeValue::N(_))) {
                return other(OtherKind::Unknown(
                    "neither an entityType nor a numeric leaseCounter".into(),
                ));
            }
        }
    }
    match Lease::from_item(item) {
        Ok(lease) => {
            let sign = KCL3_LEASE_ATTRIBUTES
                .into_iter()
                .find(|a| item.contains_key(*a));
            Classified::Lease(lease, sign)
        }
        Err(problem) => other(OtherKind::Unreadable(problem)),
    }
}

/// Every item of a lease table, classified (one consistent Scan).
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// The leases.
    pub leases: Vec<Lease>,
    /// Every other item.
    pub others: Vec<OtherItem>,
    /// The first KCL 3.x attribute seen on a lease, if any.
    pub kcl3_sign: Option<String>,
}

impl Census {
    /// The KCL items by entity type.
    pub fn kcl_items(&self) -> BTreeMap<KclEntity, usize> {
        let mut out = BTreeMap::new();
        for o in &self.others {
            if let OtherKind::Kcl(e) = o.kind {
                *out.entry(e).or_insert(0) += 1;
            }
        }
        out
    }
}

/// One KCL 3.0-3.4 side table as found at start.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Side<T> {
    /// Not looked for (set to `none`, or a store without side tables).
    #[default]
    NotConfigured,
    /// No such table.
    Absent,
    /// The task role may not read it: the permission missing.
    Denied(String),
    /// A table of that name that is not the KCL's: why.
    NotKcl(String),
    /// Found, with what it holds.
    Found(T),
}

impl<T> Side<T> {
    /// The permission missing, when denied.
    pub(crate) fn denied(&self) -> Option<&str> {
        match self {
            Self::Denied(p) => Some(p),
            _ => None,
        }
    }

    /// Why a table of that name is not the KCL's, if so.
    pub(crate) fn not_kcl(&self) -> Option<&str> {
        match self {
            Self::NotKcl(why) => Some(why),
            _ => None,
        }
    }
}

/// What `<app>-CoordinatorState` holds of the KCL's migration states.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CoordinatorItems {
    /// `Migration3.0`.
    pub migration: Option<HashMap<String, AttributeValue>>,
    /// `TableMigration3.5`.
    pub table_migration: Option<HashMap<String, AttributeValue>>,
}

/// The KCL 3.0-3.4 side tables of a lease table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SideTables {
    /// `<app>-CoordinatorState` (hash key `key`).
    pub coordinator: Side<CoordinatorItems>,
    /// `<app>-WorkerMetricStats` (hash key `wid`): its items.
    pub metrics: Side<Vec<HashMap<String, AttributeValue>>>,
}

/// The side tables' names, `None` when not looked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SideTableNames {
    /// The coordinator-state table.
    pub coordinator: Option<String>,
    /// The worker-metrics table.
    pub metrics: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinesis::lease::fixtures;
    use crate::kinesis::lease::item::Checkpoint;

    /// Every line of every fixture is what `states.json` says it is.
    #[test]
    fn every_fixture_item_is_classified_as_the_kcl_reads_it() {
        for f in fixtures::all() {
            for (role, t) in &f.tables {
                if role != "lease" {
                    continue;
                }
                for item in &t.items {
                    let key = item["leaseKey"].as_s().unwrap();
                    match classify(item) {
                        Classified::Lease(l, sign) => {
                            assert!(t.leases.contains(&l.key), "{}: {key}", f.name);
                            // KCL 2.x leases carry no 3.x attribute.
                            if f.name == "kcl2x" {
                                assert_eq!(sign, None, "{key}");
                            }
                        }
                        Classified::Other(o) => {
                            let want = t.not_leases.get(key);
                            assert_eq!(
                                Some(o.kind.label()),
                                want.map(String::as_str),
                                "{}: {key}",
                                f.name
                            );
                        }
                    }
                }
            }
        }
    }

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.into())
    }

    #[test]
    fn keys_prove_nothing_attributes_do() {
        // The legacy keys without entityType are the KCL's, even with a
        // leaseCounter.
        for key in [LEADER_KEY, MIGRATION_KEY, TABLE_MIGRATION_KEY] {
            let c = classify(&item(&[("leaseKey", s(key)), ("leaseCounter", n("1"))]));
            assert!(
                matches!(
                    c,
                    Classified::Other(OtherItem {
                        kind: OtherKind::Kcl(_),
                        ..
                    })
                ),
                "{key}: {c:?}"
            );
        }
        // A shard-like key without a leaseCounter is not a lease.
        let c = classify(&item(&[("leaseKey", s("shardId-000000000001"))]));
        assert!(matches!(
            c,
            Classified::Other(OtherItem {
                kind: OtherKind::Unknown(_),
                ..
            })
        ));
        // An unknown entity type, whatever its key.
        let c = classify(&item(&[
            ("leaseKey", s("shardId-000000000001")),
            ("leaseCounter", n("3")),
            ("entityType", s("LEASE_V2")),
        ]));
        assert!(
            matches!(&c, Classified::Other(OtherItem { kind: OtherKind::Unknown(why), .. }) if why.contains("LEASE_V2")),
            "{c:?}"
        );
        // A lease whose checkpoint is a number is unreadable, not a lease.
        let c = classify(&item(&[
            ("leaseKey", s("shardId-000000000001")),
            ("leaseCounter", n("3")),
            ("checkpoint", n("5")),
        ]));
        assert!(
            matches!(&c, Classified::Other(OtherItem { kind: OtherKind::Unreadable(p), .. }) if p.contains("checkpoint")),
            "{c:?}"
        );
        // entityType LEASE without a counter cannot be read by any KCL.
        let c = classify(&item(&[
            ("leaseKey", s("shardId-000000000001")),
            ("entityType", s("LEASE")),
        ]));
        assert!(
            matches!(&c, Classified::Other(OtherItem { kind: OtherKind::Unreadable(p), .. }) if p.contains("leaseCounter")),
            "{c:?}"
        );
        // Tidemark's own leases.
        let mine = Lease::new("shardId-000000000001", Checkpoint::TrimHorizon, vec![]);
        assert_eq!(classify(&mine.to_item()), Classified::Lease(mine, None));
    }
}
