//! The queue as it was before slots and one key map (test oracle only):
//! the property test in `batch.rs` runs random operations on both and
//! compares every observable result.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::time::Instant;

use foldhash::fast::RandomState;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use smallvec::smallvec;
use tidemark_schema::{ItemKey, WireItem};

use super::{Entry, PER_ITEM_OVERHEAD, REQUEST_OVERHEAD};

/// Pending entries of one table, in send order.
///
/// Keys are indexed by their 64-bit hash, computed once per push, so no key
/// is copied or hashed again on the way. Two different keys with the same
/// hash (about 2^-64 per pair) only lose coalescing and wait for each other's
/// calls; they are never both in flight, so ordering stays safe.
#[derive(Debug)]
pub(crate) struct RefQueue<T> {
    entries: HashMap<u64, Entry<T>>,
    order: VecDeque<u64>,
    /// Key hash → id of the pending entry of that key.
    by_key: HashMap<u64, u64>,
    /// Key hashes of the entries in flight.
    in_flight: HashSet<u64>,
    hasher: RandomState,
    next_id: u64,
    max_items: usize,
    max_bytes: usize,
}

impl<T> RefQueue<T> {
    /// A queue whose batches hold at most `max_items` items and
    /// `max_bytes` of request body.
    pub(crate) fn with_limits(max_items: usize, max_bytes: usize) -> Self {
        RefQueue {
            entries: HashMap::new(),
            order: VecDeque::new(),
            by_key: HashMap::new(),
            in_flight: HashSet::new(),
            hasher: RandomState::default(),
            next_id: 0,
            max_items: max_items.max(1),
            max_bytes,
        }
    }

    /// Distinct keys pending (not in flight).
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Keys currently in flight (taken by [`take_batch`](Self::take_batch)
    /// and not yet released).
    pub(crate) fn in_flight_keys(&self) -> usize {
        self.in_flight.len()
    }

    /// Queues an item; if its key is already pending, the new item replaces
    /// the pending one and the token joins it.
    pub(crate) fn push(&mut self, key: ItemKey, item: WireItem, wcu: u64, token: T, now: Instant) {
        let key_hash = self.hasher.hash_one(&key);
        if let Some(id) = self.by_key.get(&key_hash)
            && let Some(e) = self.entries.get_mut(id)
            && e.key == key
        {
            e.wire_bytes = item.json().len();
            e.item = item;
            e.wcu = wcu;
            e.tokens.push(token);
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        let pk_hash = self.hasher.hash_one(key.pk());
        let entry = Entry {
            wire_bytes: item.json().len(),
            key,
            key_hash,
            pk_hash,
            item,
            wcu,
            tokens: smallvec![token],
            since: now,
        };
        // A colliding different key keeps the older mapping (see the type).
        self.by_key.entry(key_hash).or_insert(id);
        self.entries.insert(id, entry);
        self.order.push_back(id);
    }

    /// Puts entries that were in flight back at the front, in their order,
    /// and releases their keys. If a newer submission of the same key arrived
    /// meanwhile, the newer item wins and the old tokens join it.
    pub(crate) fn requeue_front(&mut self, batch: Vec<Entry<T>>) {
        for mut e in batch.into_iter().rev() {
            self.in_flight.remove(&e.key_hash);
            if let Some(id) = self.by_key.get(&e.key_hash)
                && let Some(newer) = self.entries.get_mut(id)
                && newer.key == e.key
            {
                e.tokens.append(&mut newer.tokens);
                newer.tokens = e.tokens;
                newer.since = newer.since.min(e.since);
                continue;
            }
            let id = self.next_id;
            self.next_id += 1;
            self.by_key.entry(e.key_hash).or_insert(id);
            self.entries.insert(id, e);
            self.order.push_front(id);
        }
    }

    /// Releases the keys of a finished call (stored or rejected).
    pub(crate) fn release<'a>(&mut self, entries: impl IntoIterator<Item = &'a Entry<T>>)
    where
        T: 'a,
    {
        for e in entries {
            self.in_flight.remove(&e.key_hash);
        }
    }

    /// Is a batch due: a full one can be made, the oldest entry has waited
    /// `linger`, or `force` (flush / shutdown) and anything is pending?
    pub(crate) fn due(&self, now: Instant, linger: std::time::Duration, force: bool) -> bool {
        if self.order.is_empty() {
            return false;
        }
        force
            || self.order.len() >= self.max_items
            || self.deadline(linger).is_some_and(|d| d <= now)
    }

    /// When the oldest pending entry's linger runs out.
    pub(crate) fn deadline(&self, linger: std::time::Duration) -> Option<Instant> {
        self.order
            .front()
            .and_then(|id| self.entries.get(id))
            .map(|e| e.since + linger)
    }

    /// Drops the key index of entry `id` (leaving a colliding key's alone).
    fn unindex(&mut self, e: &Entry<T>, id: u64) {
        if self.by_key.get(&e.key_hash) == Some(&id) {
            self.by_key.remove(&e.key_hash);
        }
    }

    /// Takes the next batch from the front: up to `max_items` entries whose
    /// keys are not in flight, within `max_bytes`. Their keys become in
    /// flight. Empty when every pending key is in flight.
    pub(crate) fn take_batch(&mut self) -> Vec<Entry<T>> {
        let mut batch = Vec::new();
        let mut deferred = Vec::new();
        let mut bytes = REQUEST_OVERHEAD;
        while batch.len() < self.max_items {
            let Some(id) = self.order.pop_front() else {
                break;
            };
            let Some(e) = self.entries.get(&id) else {
                continue;
            };
            if self.in_flight.contains(&e.key_hash) {
                deferred.push(id);
                continue;
            }
            let cost = e.wire_bytes + PER_ITEM_OVERHEAD;
            if !batch.is_empty() && bytes + cost > self.max_bytes {
                self.order.push_front(id);
                break;
            }
            let Some(e) = self.entries.remove(&id) else {
                continue;
            };
            bytes += cost;
            self.unindex(&e, id);
            self.in_flight.insert(e.key_hash);
            batch.push(e);
        }
        for id in deferred.into_iter().rev() {
            self.order.push_front(id);
        }
        batch
    }

    /// Removes everything pending (for a table that will not come back).
    pub(crate) fn drain(&mut self) -> Vec<Entry<T>> {
        let mut out = Vec::with_capacity(self.order.len());
        while let Some(id) = self.order.pop_front() {
            if let Some(e) = self.entries.remove(&id) {
                self.unindex(&e, id);
                out.push(e);
            }
        }
        out
    }
}
