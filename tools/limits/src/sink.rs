//! Sink mode's record of accepted DynamoDB writes.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::ddb_json::{ItemDigest, hex};

/// Per-table record: the current key set with a digest of each item.
#[derive(Debug, Default)]
pub struct Sink {
    tables: HashMap<String, SinkTable>,
}

#[derive(Debug, Default)]
struct SinkTable {
    /// foldhash: this map takes every accepted item in sink mode, and
    /// SipHash was most of the sink's cost.
    items: HashMap<String, ItemDigest, foldhash::fast::RandomState>,
    counts: SinkCounts,
}

/// Counters of one table in sink mode.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct SinkCounts {
    /// Distinct keys held now.
    pub items: u64,
    /// Put requests recorded (overwrites included).
    pub puts: u64,
    /// Delete requests recorded.
    pub deletes: u64,
    /// Update requests recorded.
    pub updates: u64,
}

impl Sink {
    /// Records a put (or an update: `digest` then describes the update).
    pub fn put(&mut self, table: &str, key: String, digest: ItemDigest, update: bool) {
        self.with_table(table, |t| {
            t.items.insert(key, digest);
            if update {
                t.counts.updates += 1;
            } else {
                t.counts.puts += 1;
            }
            t.counts.items = t.items.len() as u64;
        });
    }

    /// Records a delete.
    pub fn delete(&mut self, table: &str, key: &str) {
        self.with_table(table, |t| {
            t.items.remove(key);
            t.counts.deletes += 1;
            t.counts.items = t.items.len() as u64;
        });
    }

    /// Runs `f` on the table's record, made on its first write (the name is
    /// copied only then, not per write).
    fn with_table<R>(&mut self, table: &str, f: impl FnOnce(&mut SinkTable) -> R) -> R {
        if let Some(t) = self.tables.get_mut(table) {
            return f(t);
        }
        f(self.tables.entry(table.to_owned()).or_default())
    }

    /// Counters per table.
    pub fn counts(&self) -> BTreeMap<String, SinkCounts> {
        self.tables
            .iter()
            .map(|(k, v)| (k.clone(), v.counts.clone()))
            .collect()
    }

    /// Keys and digests (hex) of one table, sorted by key.
    pub fn items(&self, table: &str) -> BTreeMap<String, String> {
        self.tables
            .get(table)
            .map(|t| t.items.iter().map(|(k, v)| (k.clone(), hex(v))).collect())
            .unwrap_or_default()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.tables.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_current_keys_and_counts_operations() {
        let mut s = Sink::default();
        let d = |b: u8| [b; 32];
        s.put("t", "a".into(), d(1), false);
        s.put("t", "a".into(), d(2), false);
        s.put("t", "b".into(), d(3), true);
        s.delete("t", "b");
        let c = &s.counts()["t"];
        assert_eq!((c.items, c.puts, c.updates, c.deletes), (1, 2, 1, 1));
        assert_eq!(s.items("t").get("a"), Some(&"02".repeat(32)));
        s.clear();
        assert!(s.counts().is_empty());
    }
}
