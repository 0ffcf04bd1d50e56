//! A table's pending items and how they become batches: pure, no I/O.
//!
//! - Submissions of a key already pending are coalesced into one entry: the
//!   later item wins and every token rides on it.
//! - A key that is in flight is never sent again until that call ends, so a
//!   newer value can never be overtaken by an older one still in flight.
//! - A batch holds at most 25 distinct keys and at most 16 MB of request body
//!   (counted on the items' JSON encoding, which is what DynamoDB receives).
//! - Items returned for retry go back to the front, ahead of newer work.
//! - With a gate ([`TableQueue::take_batch_gated`], per-key pacing), entries
//!   of a partition key the gate holds back wait in that key's own queue, in
//!   their order, while every other key's entries go on. Once let through
//!   again, held keys have first claim on a batch's room, taken in turn
//!   (round robin from the key held first, never in hash order), and their
//!   items end the request: a key range's throttle falls on the items that
//!   reach it last, and those should be the paced keys', not their
//!   neighbours'.

use std::collections::VecDeque;

// foldhash: several lookups per item on this path; SipHash showed in
// profiles. Its per-process random seed keeps keys from being chosen to
// collide.
use foldhash::fast::RandomState;
use foldhash::{HashMap, HashMapExt};
// smallvec: nearly every entry carries one token; keeping it inline saves an
// allocation per item and a cache miss when the batch completes.
use smallvec::{SmallVec, smallvec};
use std::hash::BuildHasher;
use std::time::Instant;

use tidemark_schema::size::{MAX_BATCH_BYTES, MAX_BATCH_ITEMS};
use tidemark_schema::{ItemKey, WireItem};

/// One distinct key waiting to be written, with every token it carries.
#[derive(Debug)]
pub struct Entry<T> {
    /// The item's primary key.
    pub key: ItemKey,
    /// The key's 64-bit hash: what the queue indexes (no key copies).
    pub key_hash: u64,
    /// The partition key's 64-bit hash: what per-key pacing tracks.
    pub pk_hash: u64,
    /// The item to put (the latest submitted for this key).
    pub item: WireItem,
    /// Bytes of this item in the request body.
    pub wire_bytes: usize,
    /// Estimated WCU of one write of this item.
    pub wcu: u64,
    /// Everything to acknowledge when this item is stored.
    pub tokens: SmallVec<[T; 1]>,
    /// When the oldest token was queued (drives `linger`).
    pub since: Instant,
}

/// Pending entries of one table, in send order.
///
/// Entries live in reusable slots (no hashing to find one; a freed slot is
/// reused while still in cache). One map, by the key's 64-bit hash computed
/// once per push, says whether a key has a pending entry and whether it is in
/// flight: one lookup per item on push, take and release, and no key copies.
/// Two different keys with the same hash (about 2^-64 per pair) only lose
/// coalescing and wait for each other's calls; they are never both in flight,
/// so ordering stays safe.
#[derive(Debug)]
pub struct TableQueue<T> {
    slots: Slots<T>,
    /// Slots of the pending entries, in send order.
    order: VecDeque<usize>,
    keys: HashMap<u64, KeyState>,
    in_flight: usize,
    /// Slots of entries whose partition key a gate held back, per
    /// partition-key hash, in send order.
    parked: HashMap<u64, VecDeque<usize>>,
    /// The held partition keys in turn order: the key held first leads, a
    /// key served goes to the back (the release order must not depend on a
    /// hasher's seed; see the module documentation).
    parked_turn: VecDeque<u64>,
    parked_len: usize,
    hasher: RandomState,
    max_items: usize,
    max_bytes: usize,
}

/// What the queue knows of one key hash.
#[derive(Debug, Default, Clone, Copy)]
struct KeyState {
    /// Slot of the pending entry of this key, if any.
    pending: Option<usize>,
    /// An entry of this key is in a call.
    in_flight: bool,
}

/// Entries in reusable slots: a freed slot is taken again first.
#[derive(Debug)]
struct Slots<T> {
    slots: Vec<Option<Entry<T>>>,
    free: Vec<usize>,
}

impl<T> Slots<T> {
    fn get(&self, slot: usize) -> Option<&Entry<T>> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, slot: usize) -> Option<&mut Entry<T>> {
        self.slots.get_mut(slot).and_then(Option::as_mut)
    }

    /// Puts `e` in a free slot and returns the slot.
    fn store(&mut self, e: Entry<T>) -> usize {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(e);
                slot
            }
            None => {
                self.slots.push(Some(e));
                self.slots.len() - 1
            }
        }
    }

    /// Empties `slot`.
    fn take(&mut self, slot: usize) -> Option<Entry<T>> {
        let e = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        Some(e)
    }
}

impl<T> Default for TableQueue<T> {
    fn default() -> Self {
        Self::with_limits(MAX_BATCH_ITEMS, MAX_BATCH_BYTES)
    }
}

/// Bytes of request body outside the items (table name, JSON framing, and
/// ReturnConsumedCapacity), counted generously.
pub(crate) const REQUEST_OVERHEAD: usize = 1024;
/// Bytes of `{"PutRequest":{"Item":{...}}},` around each item.
pub(crate) const PER_ITEM_OVERHEAD: usize = 32;

impl<T> TableQueue<T> {
    /// A queue whose batches hold at most `max_items` items and
    /// `max_bytes` of request body.
    pub(crate) fn with_limits(max_items: usize, max_bytes: usize) -> Self {
        TableQueue {
            slots: Slots {
                slots: Vec::new(),
                free: Vec::new(),
            },
            order: VecDeque::new(),
            keys: HashMap::new(),
            in_flight: 0,
            parked: HashMap::new(),
            parked_turn: VecDeque::new(),
            parked_len: 0,
            hasher: RandomState::default(),
            max_items: max_items.max(1),
            max_bytes,
        }
    }

    /// Distinct keys pending (not in flight), held back ones included.
    pub fn len(&self) -> usize {
        self.order.len() + self.parked_len
    }

    /// Nothing pending.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty() && self.parked_len == 0
    }

    /// Partition-key hashes with entries held back by a gate, in turn order.
    pub(crate) fn parked_keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.parked_turn.iter().copied()
    }

    /// The keys of up to `most` entries of partition-key hash `pk` held
    /// back by a gate, oldest first: the oldest half and the newest half
    /// when there are more (a backlog from before a split would otherwise
    /// hide how the key's items are keyed now).
    pub(crate) fn parked_keys_of(&self, pk: u64, most: usize) -> Vec<ItemKey> {
        self.parked.get(&pk).map_or_else(Vec::new, |slots| {
            let n = slots.len();
            let (head, tail) = if n <= most {
                (n, 0)
            } else {
                (most / 2, most - most / 2)
            };
            slots
                .iter()
                .take(head)
                .chain(slots.iter().skip(n - tail))
                .filter_map(|&s| self.slots.slots.get(s)?.as_ref().map(|e| e.key.clone()))
                .collect()
        })
    }

    /// Entries held back by a gate.
    pub(crate) fn parked_len(&self) -> usize {
        self.parked_len
    }

    /// Keys currently in flight (taken by [`take_batch`](Self::take_batch)
    /// and not yet released).
    #[cfg(test)]
    pub(crate) fn in_flight_keys(&self) -> usize {
        self.in_flight
    }

    /// Queues an item; if its key is already pending, the new item replaces
    /// the pending one and the token joins it.
    pub fn push(&mut self, key: ItemKey, item: WireItem, wcu: u64, token: T, now: Instant) {
        let key_hash = self.hasher.hash_one(&key);
        let st = self.keys.entry(key_hash).or_default();
        if let Some(slot) = st.pending
            && let Some(e) = self.slots.get_mut(slot)
            && e.key == key
        {
            e.wire_bytes = item.json().len();
            e.item = item;
            e.wcu = wcu;
            e.tokens.push(token);
            return;
        }
        let pk_hash = self.hasher.hash_one(key.pk());
        let slot = self.slots.store(Entry {
            wire_bytes: item.json().len(),
            key,
            key_hash,
            pk_hash,
            item,
            wcu,
            tokens: smallvec![token],
            since: now,
        });
        // A colliding different key keeps the older mapping (see the type).
        if st.pending.is_none() {
            st.pending = Some(slot);
        }
        self.order.push_back(slot);
    }

    /// Puts entries that were in flight back at the front, in their order,
    /// and releases their keys. If a newer submission of the same key arrived
    /// meanwhile, the newer item wins and the old tokens join it.
    pub(crate) fn requeue_front(&mut self, batch: Vec<Entry<T>>) {
        for mut e in batch.into_iter().rev() {
            let st = self.keys.entry(e.key_hash).or_default();
            if st.in_flight {
                st.in_flight = false;
                self.in_flight -= 1;
            }
            if let Some(slot) = st.pending
                && let Some(newer) = self.slots.get_mut(slot)
                && newer.key == e.key
            {
                e.tokens.append(&mut newer.tokens);
                newer.tokens = e.tokens;
                newer.since = newer.since.min(e.since);
                continue;
            }
            let slot = self.slots.store(e);
            if st.pending.is_none() {
                st.pending = Some(slot);
            }
            self.order.push_front(slot);
        }
    }

    /// Releases the keys of a finished call (stored or rejected).
    pub fn release<'a>(&mut self, entries: impl IntoIterator<Item = &'a Entry<T>>)
    where
        T: 'a,
    {
        for e in entries {
            let Some(st) = self.keys.get_mut(&e.key_hash) else {
                continue;
            };
            if st.in_flight {
                st.in_flight = false;
                self.in_flight -= 1;
            }
            if st.pending.is_none() {
                self.keys.remove(&e.key_hash);
            }
        }
    }

    /// Is a batch due: a full one can be made, the oldest entry has waited
    /// `linger`, or `force` (flush / shutdown) and anything is pending?
    pub fn due(&self, now: Instant, linger: std::time::Duration, force: bool) -> bool {
        if self.order.is_empty() {
            return false;
        }
        force
            || self.order.len() >= self.max_items
            || self.deadline(linger).is_some_and(|d| d <= now)
    }

    /// When the oldest pending entry's linger runs out.
    pub fn deadline(&self, linger: std::time::Duration) -> Option<Instant> {
        self.order
            .front()
            .and_then(|slot| self.slots.get(*slot))
            .map(|e| e.since + linger)
    }

    /// Takes the next batch from the front: up to `max_items` entries whose
    /// keys are not in flight, within `max_bytes`. Their keys become in
    /// flight. Empty when every pending key is in flight.
    pub fn take_batch(&mut self) -> Vec<Entry<T>> {
        let mut batch = Vec::new();
        let mut deferred = Vec::new();
        let mut bytes = REQUEST_OVERHEAD;
        while batch.len() < self.max_items {
            let Some(slot) = self.order.pop_front() else {
                break;
            };
            let Some(e) = self.slots.get(slot) else {
                continue;
            };
            let (key_hash, cost) = (e.key_hash, e.wire_bytes + PER_ITEM_OVERHEAD);
            let st = self.keys.entry(key_hash).or_default();
            if st.in_flight {
                deferred.push(slot);
                continue;
            }
            if !batch.is_empty() && bytes + cost > self.max_bytes {
                self.order.push_front(slot);
                break;
            }
            st.in_flight = true;
            if st.pending == Some(slot) {
                st.pending = None;
            }
            self.in_flight += 1;
            bytes += cost;
            if let Some(e) = self.slots.take(slot) {
                batch.push(e);
            }
        }
        for slot in deferred.into_iter().rev() {
            self.order.push_front(slot);
        }
        batch
    }

    /// [`take_batch`](Self::take_batch) with a gate on partition keys:
    /// `gate(pk_hash, wcu)` says whether an entry may go now (and charges it
    /// if so). Held keys' entries are taken first, key by key in turn, while
    /// their gate allows, and are placed at the end of the batch; an entry
    /// the gate refuses, and every later entry of its partition key, waits
    /// in that key's queue.
    pub(crate) fn take_batch_gated(
        &mut self,
        mut gate: impl FnMut(u64, u64) -> bool,
    ) -> Vec<Entry<T>> {
        let mut batch = Vec::new();
        let mut bytes = REQUEST_OVERHEAD;
        // Each held key once, in turn; a key visited and still held goes to
        // the back, so a key that filled this batch lets the others lead
        // the next one.
        for _ in 0..self.parked_turn.len() {
            if batch.len() >= self.max_items {
                break;
            }
            let Some(pk) = self.parked_turn.pop_front() else {
                break;
            };
            self.drain_parked(pk, &mut gate, &mut batch, &mut bytes);
            if self.parked.contains_key(&pk) {
                self.parked_turn.push_back(pk);
            }
        }
        let released = batch.len();
        let mut deferred = Vec::new();
        while batch.len() < self.max_items {
            let Some(slot) = self.order.pop_front() else {
                break;
            };
            let Some(e) = self.slots.get(slot) else {
                continue;
            };
            let (key_hash, pk_hash, wcu) = (e.key_hash, e.pk_hash, e.wcu);
            let cost = e.wire_bytes + PER_ITEM_OVERHEAD;
            if let Some(q) = self.parked.get_mut(&pk_hash) {
                q.push_back(slot);
                self.parked_len += 1;
                continue;
            }
            if self.keys.get(&key_hash).is_some_and(|st| st.in_flight) {
                deferred.push(slot);
                continue;
            }
            if !batch.is_empty() && bytes + cost > self.max_bytes {
                self.order.push_front(slot);
                break;
            }
            if !gate(pk_hash, wcu) {
                self.parked.entry(pk_hash).or_default().push_back(slot);
                self.parked_turn.push_back(pk_hash);
                self.parked_len += 1;
                continue;
            }
            bytes += cost;
            self.take_slot(slot, key_hash, &mut batch);
        }
        for slot in deferred.into_iter().rev() {
            self.order.push_front(slot);
        }
        // Released held items last (see the module documentation).
        batch.rotate_left(released);
        batch
    }

    /// Moves a held key's entries into `batch` while the gate allows.
    fn drain_parked(
        &mut self,
        pk: u64,
        gate: &mut impl FnMut(u64, u64) -> bool,
        batch: &mut Vec<Entry<T>>,
        bytes: &mut usize,
    ) {
        while batch.len() < self.max_items {
            let Some(&slot) = self.parked.get(&pk).and_then(VecDeque::front) else {
                self.parked.remove(&pk);
                return;
            };
            let Some(e) = self.slots.get(slot) else {
                self.pop_parked(pk);
                continue;
            };
            let (key_hash, wcu) = (e.key_hash, e.wcu);
            let cost = e.wire_bytes + PER_ITEM_OVERHEAD;
            // A key in flight, a full request or a closed gate: this key
            // waits (its order is kept) and the next one is tried.
            if self.keys.get(&key_hash).is_some_and(|st| st.in_flight)
                || (!batch.is_empty() && *bytes + cost > self.max_bytes)
                || !gate(pk, wcu)
            {
                return;
            }
            self.pop_parked(pk);
            *bytes += cost;
            self.take_slot(slot, key_hash, batch);
        }
    }

    fn pop_parked(&mut self, pk: u64) {
        if let Some(q) = self.parked.get_mut(&pk) {
            if q.pop_front().is_some() {
                self.parked_len -= 1;
            }
            if q.is_empty() {
                self.parked.remove(&pk);
            }
        }
    }

    /// Takes a pending slot into a batch: its key becomes in flight.
    fn take_slot(&mut self, slot: usize, key_hash: u64, batch: &mut Vec<Entry<T>>) {
        let st = self.keys.entry(key_hash).or_default();
        st.in_flight = true;
        if st.pending == Some(slot) {
            st.pending = None;
        }
        self.in_flight += 1;
        if let Some(e) = self.slots.take(slot) {
            batch.push(e);
        }
    }

    /// WCU of every pending entry (held ones included).
    pub(crate) fn pending_wcu(&self) -> u64 {
        self.slots
            .slots
            .iter()
            .flatten()
            .map(|e| e.wcu)
            .sum::<u64>()
    }

    /// Removes the pending entries (held ones included) for which `pred`
    /// holds, keeping the others in their order. Entries in flight are not
    /// pending and are never taken.
    pub(crate) fn take_where(&mut self, pred: impl Fn(&Entry<T>) -> bool) -> Vec<Entry<T>> {
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.order.len());
        let order = std::mem::take(&mut self.order);
        for slot in order {
            if self.slots.get(slot).is_some_and(&pred) {
                self.forget(slot, &mut out);
            } else {
                keep.push_back(slot);
            }
        }
        self.order = keep;
        let turn: Vec<u64> = self.parked_turn.iter().copied().collect();
        for pk in turn {
            let Some(q) = self.parked.remove(&pk) else {
                continue;
            };
            let mut left = VecDeque::with_capacity(q.len());
            for slot in q {
                if self.slots.get(slot).is_some_and(&pred) {
                    self.parked_len -= 1;
                    self.forget(slot, &mut out);
                } else {
                    left.push_back(slot);
                }
            }
            if left.is_empty() {
                self.parked_turn.retain(|p| *p != pk);
            } else {
                self.parked.insert(pk, left);
            }
        }
        out
    }

    /// Takes a pending slot out of the queue for good (its key is no longer
    /// pending, and forgotten unless in flight).
    fn forget(&mut self, slot: usize, out: &mut Vec<Entry<T>>) {
        let Some(e) = self.slots.take(slot) else {
            return;
        };
        if let Some(st) = self.keys.get_mut(&e.key_hash)
            && st.pending == Some(slot)
        {
            st.pending = None;
            if !st.in_flight {
                self.keys.remove(&e.key_hash);
            }
        }
        out.push(e);
    }

    /// Removes everything pending (for a table that will not come back).
    pub fn drain(&mut self) -> Vec<Entry<T>> {
        let mut out = Vec::with_capacity(self.len());
        let mut parked = Vec::with_capacity(self.parked_len);
        for pk in self.parked_turn.drain(..) {
            parked.extend(self.parked.remove(&pk).into_iter().flatten());
        }
        self.parked.clear();
        self.parked_len = 0;
        for slot in parked.into_iter().rev() {
            self.order.push_front(slot);
        }
        while let Some(slot) = self.order.pop_front() {
            let Some(e) = self.slots.take(slot) else {
                continue;
            };
            if let Some(st) = self.keys.get_mut(&e.key_hash)
                && st.pending == Some(slot)
            {
                st.pending = None;
                if !st.in_flight {
                    self.keys.remove(&e.key_hash);
                }
            }
            out.push(e);
        }
        out
    }
}

#[cfg(test)]
mod reference;

#[cfg(test)]
mod tests;
