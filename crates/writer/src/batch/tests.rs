use std::time::Duration;

use super::*;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::Item;

fn key(i: usize) -> ItemKey {
    ItemKey::new(&format!("p{i}"), "s")
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
    let keys: Vec<_> = next.iter().map(|e| e.key.pk().to_owned()).collect();
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
fn a_gate_holds_back_one_partition_key_and_lets_the_others_pass() {
    let now = Instant::now();
    let mut q: TableQueue<u32> = TableQueue::default();
    // Ten items of partition key "hot" interleaved with ten cold keys.
    for i in 0..10u32 {
        q.push(
            ItemKey::new("hot", &format!("s{i}")),
            item(0, "x"),
            1,
            i,
            now,
        );
        q.push(
            ItemKey::new(&format!("c{i}"), "s"),
            item(0, "x"),
            1,
            100 + i,
            now,
        );
    }
    let hot = q.hasher.hash_one("hot");
    let b = q.take_batch_gated(|pk, _| pk != hot);
    let tokens: Vec<u32> = b.iter().map(|e| e.tokens[0]).collect();
    assert_eq!(
        tokens,
        (100..110).collect::<Vec<_>>(),
        "only cold keys went"
    );
    assert_eq!(q.parked_len(), 10);
    assert_eq!(q.len(), 10);
    assert!(!q.is_empty());
    q.release(&b);
    // A new hot item joins its key's queue behind the held ones.
    q.push(ItemKey::new("hot", "s10"), item(0, "x"), 1, 10, now);
    q.push(ItemKey::new("c", "s"), item(0, "x"), 1, 200, now);
    // The gate lets three hot items through: they go first, in order.
    let mut budget = 3;
    let b = q.take_batch_gated(|pk, _| {
        if pk != hot {
            return true;
        }
        budget -= 1;
        budget >= 0
    });
    let tokens: Vec<u32> = b.iter().map(|e| e.tokens[0]).collect();
    assert_eq!(tokens, vec![200, 0, 1, 2], "held items end the request");
    q.release(&b);
    // Open: the rest of the hot key in its order; drain empties all.
    let b = q.take_batch_gated(|_, _| true);
    let tokens: Vec<u32> = b.iter().map(|e| e.tokens[0]).collect();
    assert_eq!(tokens, (3..=10).collect::<Vec<_>>());
    assert!(q.is_empty() && q.parked_len() == 0);
    q.push(ItemKey::new("hot", "z"), item(0, "x"), 1, 11, now);
    assert!(q.take_batch_gated(|_, _| false).is_empty());
    assert_eq!(q.drain().len(), 1);
    assert!(q.is_empty());
}

#[test]
fn held_keys_are_released_in_turn_from_the_first_held() {
    let now = Instant::now();
    let mut q: TableQueue<u32> = TableQueue::with_limits(4, MAX_BATCH_BYTES);
    // Five items each of partition keys "a" then "b", both held.
    for (n, pk) in ["a", "b"].into_iter().enumerate() {
        for i in 0..5u32 {
            let tok = 10 * n as u32 + i;
            q.push(
                ItemKey::new(pk, &format!("s{i}")),
                item(0, "x"),
                1,
                tok,
                now,
            );
        }
    }
    while !q.take_batch_gated(|_, _| false).is_empty() {}
    let (a, b) = (q.hasher.hash_one("a"), q.hasher.hash_one("b"));
    assert_eq!(q.parked_keys().collect::<Vec<_>>(), vec![a, b]);
    let mut seen = Vec::new();
    while !q.is_empty() {
        let batch = q.take_batch_gated(|_, _| true);
        seen.push(batch.iter().map(|e| e.tokens[0]).collect::<Vec<_>>());
        q.release(&batch);
    }
    // "a" fills the first batch and goes to the back: "b" leads the next.
    assert_eq!(
        seen,
        vec![vec![0, 1, 2, 3], vec![10, 11, 12, 13], vec![4, 14]]
    );
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

#[derive(Debug, Clone)]
enum Op {
    Push(usize, usize),
    Take,
    Release(usize),
    Requeue(usize),
    Drain,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0..8usize, 0..3usize).prop_map(|(k, p)| Op::Push(k, p)),
        3 => Just(Op::Take),
        2 => (0..4usize).prop_map(Op::Release),
        1 => (0..4usize).prop_map(Op::Requeue),
        1 => Just(Op::Drain),
    ]
}

type Seen = Vec<(ItemKey, Vec<u8>, Vec<u32>, Instant)>;

fn seen(batch: &[Entry<u32>]) -> Seen {
    batch
        .iter()
        .map(|e| {
            (
                e.key.clone(),
                e.item.json().to_vec(),
                e.tokens.to_vec(),
                e.since,
            )
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
    /// The slot queue behaves exactly as the previous map-based queue
    /// (kept as `reference`) under any sequence of pushes (few keys, so
    /// coalescing and in-flight holds happen), takes, releases,
    /// requeues and drains: same batches, tokens, order, counts and
    /// deadlines.
    #[test]
    fn behaves_as_the_reference_queue(ops in proptest::collection::vec(op(), 1..120)) {
        let payloads = ["", &"x".repeat(60), &"y".repeat(300)];
        let limit = 1024 + 3 * 120;
        let mut q: TableQueue<u32> = TableQueue::with_limits(4, limit);
        let mut r: reference::RefQueue<u32> = reference::RefQueue::with_limits(4, limit);
        let (mut out_q, mut out_r) = (Vec::<Vec<Entry<u32>>>::new(), Vec::<Vec<Entry<u32>>>::new());
        let base = Instant::now();
        for (n, op) in ops.into_iter().enumerate() {
            let now = base + Duration::from_millis(n as u64);
            match op {
                Op::Push(k, p) => {
                    let it = item(k, payloads[p]);
                    q.push(key(k), it.clone(), 1, n as u32, now);
                    r.push(key(k), it, 1, n as u32, now);
                }
                Op::Take => {
                    let (a, b) = (q.take_batch(), r.take_batch());
                    proptest::prop_assert_eq!(seen(&a), seen(&b));
                    if !a.is_empty() {
                        out_q.push(a);
                        out_r.push(b);
                    }
                }
                Op::Release(i) | Op::Requeue(i) if !out_q.is_empty() => {
                    let i = i % out_q.len();
                    let (a, b) = (out_q.remove(i), out_r.remove(i));
                    if matches!(op, Op::Release(_)) {
                        q.release(&a);
                        r.release(&b);
                    } else {
                        q.requeue_front(a);
                        r.requeue_front(b);
                    }
                }
                Op::Release(_) | Op::Requeue(_) => {}
                Op::Drain => {
                    proptest::prop_assert_eq!(seen(&q.drain()), seen(&r.drain()));
                }
            }
            proptest::prop_assert_eq!(q.len(), r.len());
            proptest::prop_assert_eq!(q.in_flight_keys(), r.in_flight_keys());
            let linger = Duration::from_millis(5);
            proptest::prop_assert_eq!(q.deadline(linger), r.deadline(linger));
            proptest::prop_assert_eq!(q.due(now, linger, false), r.due(now, linger, false));
        }
    }
}

#[test]
fn entries_taken_by_age_leave_keys_in_flight_untouched() {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(10);
    let mut q = TableQueue::default();
    q.push(key(1), item(1, "v1"), 1, 1, t0);
    let in_flight = q.take_batch();
    q.push(key(1), item(1, "v2"), 2, 2, t0);
    q.push(key(2), item(2, "x"), 3, 3, t0);
    q.push(key(3), item(3, "y"), 4, 4, later);
    // A held key's entries are taken by age too (key 1 waits unheld: it
    // is in flight).
    q.take_batch_gated(|_, _| false);
    assert_eq!(q.parked_len(), 2);
    assert_eq!(q.pending_wcu(), 9);
    let old = q.take_where(|e| e.since <= t0);
    let mut tokens: Vec<i32> = old.iter().flat_map(|e| e.tokens.clone()).collect();
    tokens.sort_unstable();
    assert_eq!(tokens, vec![2, 3]);
    assert_eq!((q.len(), q.parked_len(), q.pending_wcu()), (1, 1, 4));
    // Key 1 is still in flight: nothing of it goes out until released.
    q.push(key(1), item(1, "v3"), 1, 5, later);
    assert!(
        q.take_batch_gated(|_, _| true)
            .iter()
            .all(|e| e.key != key(1))
    );
    q.release(&in_flight);
    let b = q.take_batch_gated(|_, _| true);
    assert_eq!(b.iter().filter(|e| e.key == key(1)).count(), 1);
}

/// Adaptive sharding's evidence: a held key's oldest items tell what its
/// backlog is, its newest how it is keyed now (after a split, a backlog
/// from before it can hide the items keyed by the split).
#[test]
fn a_held_keys_waiting_items_name_its_oldest_and_its_newest() {
    let now = Instant::now();
    let mut q: TableQueue<u32> = TableQueue::with_limits(4, MAX_BATCH_BYTES);
    for i in 0..100u32 {
        q.push(
            ItemKey::new("hot", &format!("s{i:03}")),
            item(0, "x"),
            1,
            i,
            now,
        );
    }
    while !q.take_batch_gated(|_, _| false).is_empty() {}
    let hot = q.hasher.hash_one("hot");
    let sks: Vec<String> = q
        .parked_keys_of(hot, 8)
        .iter()
        .map(|k| k.sk().to_owned())
        .collect();
    assert_eq!(
        sks,
        [
            "s000", "s001", "s002", "s003", "s096", "s097", "s098", "s099"
        ]
    );
    // Fewer than asked: each once, in order.
    assert_eq!(q.parked_keys_of(hot, 200).len(), 100);
}
