//! A table's pending items and how they become batches: pure, no I/O.
//!
//! - Submissions of a key already pending are coalesced into one entry: the
//!   later item wins and every token rides on it.
//! - A key that is in flight is never sent again until that call ends, so a
//!   newer value can never be overtaken by an older one still in flight.
//! - A batch holds at most 25 distinct keys and at most 16 MB of request body
//!   (counted on the items' JSON encoding, which is what DynamoDB receives).
//! - Items returned for retry go back to the front, ahead of newer work.

use std::collections::VecDeque;

// foldhash: several lookups per item on this path; SipHash showed in
// profiles. Its per-process random seed keeps keys from being chosen to
// collide.
use foldhash::fast::RandomState;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
// smallvec: nearly every entry carries one token; keeping it inline saves an
// allocation per item and a cache miss when the batch completes.
use smallvec::{SmallVec, smallvec};
use std::hash::BuildHasher;
use std::time::Instant;

use tidemark_schema::size::{MAX_BATCH_BYTES, MAX_BATCH_ITEMS};
use tidemark_schema::wire::write_str;
use tidemark_schema::{ItemKey, WireItem};

/// One distinct key waiting to be written, with every token it carries.
#[derive(Debug)]
pub struct Entry<T> {
    /// The item's primary key.
    pub key: ItemKey,
    /// The key's 64-bit hash: what the queue indexes (no key copies).
    pub key_hash: u64,
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
/// Keys are indexed by their 64-bit hash, computed once per push, so no key
/// is copied or hashed again on the way. Two different keys with the same
/// hash (about 2^-64 per pair) only lose coalescing and wait for each other's
/// calls; they are never both in flight, so ordering stays safe.
#[derive(Debug)]
pub struct TableQueue<T> {
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

impl<T> Default for TableQueue<T> {
    fn default() -> Self {
        Self::with_limits(MAX_BATCH_ITEMS, MAX_BATCH_BYTES)
    }
}

/// Bytes of request body outside the items (table name, JSON framing, and
/// ReturnConsumedCapacity), counted generously.
const REQUEST_OVERHEAD: usize = 1024;
/// Bytes of `{"PutRequest":{"Item":{...}}},` around each item.
const PER_ITEM_OVERHEAD: usize = 32;

impl<T> TableQueue<T> {
    /// A queue whose batches hold at most `max_items` items and
    /// `max_bytes` of request body.
    pub fn with_limits(max_items: usize, max_bytes: usize) -> Self {
        TableQueue {
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
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Nothing pending.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Keys currently in flight (taken by [`take_batch`](Self::take_batch)
    /// and not yet released).
    pub fn in_flight_keys(&self) -> usize {
        self.in_flight.len()
    }

    /// Queues an item; if its key is already pending, the new item replaces
    /// the pending one and the token joins it.
    pub fn push(&mut self, key: ItemKey, item: WireItem, wcu: u64, token: T, now: Instant) {
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
        let entry = Entry {
            wire_bytes: item.json().len(),
            key,
            key_hash,
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
    pub fn requeue_front(&mut self, batch: Vec<Entry<T>>) {
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
    pub fn release<'a>(&mut self, entries: impl IntoIterator<Item = &'a Entry<T>>)
    where
        T: 'a,
    {
        for e in entries {
            self.in_flight.remove(&e.key_hash);
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
    pub fn take_batch(&mut self) -> Vec<Entry<T>> {
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
    pub fn drain(&mut self) -> Vec<Entry<T>> {
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

/// The BatchWriteItem request body of a batch for `table`, asking for the
/// consumed capacity. The items' encoded bytes are copied in; the batch keeps
/// its items (shared bytes) for a retry, since a failed call returns nothing.
pub fn request_body<T>(table: &str, batch: &[Entry<T>]) -> Vec<u8> {
    let items: usize = batch.iter().map(|e| e.wire_bytes + PER_ITEM_OVERHEAD).sum();
    let mut out = Vec::with_capacity(REQUEST_OVERHEAD + table.len() + items);
    out.extend_from_slice(b"{\"RequestItems\":{");
    write_str(&mut out, table);
    out.extend_from_slice(b":[");
    for (i, e) in batch.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"PutRequest\":{\"Item\":");
        out.extend_from_slice(e.item.json());
        out.extend_from_slice(b"}}");
    }
    out.extend_from_slice(b"]},\"ReturnConsumedCapacity\":\"TOTAL\"}");
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use tidemark_schema::Item;

    fn key(i: usize) -> ItemKey {
        ItemKey {
            pk: format!("p{i}"),
            sk: "s".into(),
        }
    }

    fn item(i: usize, payload: &str) -> WireItem {
        let mut it = Item::new();
        it.insert("pk".into(), AttributeValue::S(format!("p{i}")));
        it.insert("sk".into(), AttributeValue::S("s".into()));
        it.insert("v".into(), AttributeValue::S(payload.into()));
        WireItem::encode(&it)
    }

    fn v(e: &Entry<impl Sized>) -> AttributeValue {
        e.item.to_item().unwrap()["v"].clone()
    }

    #[test]
    fn sixty_items_make_batches_of_25_25_10() {
        let now = Instant::now();
        let mut q = TableQueue::default();
        for i in 0..60 {
            q.push(key(i), item(i, "x"), 1, i, now);
        }
        let sizes: Vec<usize> = (0..3).map(|_| q.take_batch().len()).collect();
        assert_eq!(sizes, vec![25, 25, 10]);
        assert!(q.is_empty());
        assert_eq!(q.in_flight_keys(), 60);
    }

    #[test]
    fn same_key_coalesces_and_later_item_wins() {
        let now = Instant::now();
        let mut q = TableQueue::default();
        q.push(key(1), item(1, "old"), 1, "a", now);
        q.push(key(2), item(2, "other"), 1, "b", now);
        q.push(key(1), item(1, "new"), 1, "c", now);
        let b = q.take_batch();
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].tokens.as_slice(), ["a", "c"]);
        assert_eq!(v(&b[0]), AttributeValue::S("new".into()));
    }

    #[test]
    fn a_key_in_flight_is_held_back_until_released() {
        let now = Instant::now();
        let mut q = TableQueue::default();
        q.push(key(1), item(1, "v1"), 1, 1, now);
        let first = q.take_batch();
        q.push(key(1), item(1, "v2"), 1, 2, now);
        q.push(key(2), item(2, "x"), 1, 3, now);
        let second = q.take_batch();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].key, key(2));
        assert!(q.take_batch().is_empty(), "key 1 is in flight");
        q.release(&first);
        let third = q.take_batch();
        assert_eq!(v(&third[0]), AttributeValue::S("v2".into()));
    }

    #[test]
    fn requeued_items_go_first_and_newer_value_absorbs_them() {
        let now = Instant::now();
        let mut q = TableQueue::default();
        for i in 0..3 {
            q.push(key(i), item(i, "old"), 1, i, now);
        }
        let mut b = q.take_batch();
        q.push(key(9), item(9, "x"), 1, 9, now);
        q.push(key(1), item(1, "newer"), 1, 10, now);
        // Items 0 and 1 came back unprocessed.
        b.truncate(2);
        q.requeue_front(b);
        let next = q.take_batch();
        let keys: Vec<_> = next.iter().map(|e| e.key.pk.clone()).collect();
        assert_eq!(keys, vec!["p0", "p9", "p1"]);
        let one = &next[2];
        assert_eq!(v(one), AttributeValue::S("newer".into()));
        assert_eq!(one.tokens.as_slice(), [1, 10]);
    }

    #[test]
    fn request_never_passes_16_mb() {
        // 390 KB of control characters: about 2.4 MB each once JSON-escaped,
        // so only 7 fit under 16 MB even though each is a legal item.
        let now = Instant::now();
        let payload = "\u{1}".repeat(390 * 1024);
        let mut q = TableQueue::default();
        for i in 0..25 {
            q.push(key(i), item(i, &payload), 390, i, now);
        }
        let mut total = 0;
        while !q.is_empty() {
            let b = q.take_batch();
            let bytes: usize = REQUEST_OVERHEAD
                + b.iter()
                    .map(|e| e.wire_bytes + PER_ITEM_OVERHEAD)
                    .sum::<usize>();
            assert!(bytes <= MAX_BATCH_BYTES, "{bytes}");
            assert!(b.len() < 25);
            total += b.len();
        }
        assert_eq!(total, 25);
    }

    #[test]
    fn request_body_is_the_json_dynamodb_takes() {
        let now = Instant::now();
        let mut q = TableQueue::default();
        q.push(key(1), item(1, "a \"b\""), 1, 1, now);
        q.push(key(2), item(2, "c"), 1, 2, now);
        let b = q.take_batch();
        let body = request_body("t\"1", &b);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["ReturnConsumedCapacity"], "TOTAL");
        let reqs = v["RequestItems"]["t\"1"].as_array().unwrap();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0]["PutRequest"]["Item"]["v"]["S"], "a \"b\"");
        assert_eq!(reqs[1]["PutRequest"]["Item"]["pk"]["S"], "p2");
        let framing: usize = b.iter().map(|e| e.wire_bytes + PER_ITEM_OVERHEAD).sum();
        assert!(body.len() <= REQUEST_OVERHEAD + framing);
    }

    #[test]
    fn linger_decides_when_a_partial_batch_is_due() {
        let t0 = Instant::now();
        let linger = Duration::from_millis(50);
        let mut q = TableQueue::default();
        assert!(!q.due(t0, linger, true));
        q.push(key(1), item(1, "x"), 1, 1, t0);
        assert!(!q.due(t0 + Duration::from_millis(49), linger, false));
        assert!(q.due(t0 + Duration::from_millis(50), linger, false));
        assert!(q.due(t0, linger, true));
        assert_eq!(q.deadline(linger), Some(t0 + linger));
    }
}
