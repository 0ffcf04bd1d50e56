//! Batching and request building for 200-byte items: how many items per
//! second one core can coalesce into 25-item batches and turn into
//! BatchWriteItem request bodies (the CPU work the writer adds per item).

// criterion_main! generates an undocumented `main`.
#![allow(missing_docs)]
// Test code: a panic in a helper is a failed assertion (clippy.toml allows
// this in #[test] functions only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use aws_sdk_dynamodb::types::AttributeValue;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tidemark_schema::size::item_size;
use tidemark_schema::{Item, ItemKey, WireItem};
use tidemark_writer::bench::{TableQueue, request_body};

const ITEMS: usize = 10_000;

fn items() -> Vec<(ItemKey, WireItem)> {
    (0..ITEMS)
        .map(|i| {
            let key = ItemKey::new(
                &format!("device-{:04}#{}", i % 1000, i % 8),
                &format!(
                    "2025-11-22T05:{:02}:{:02}.{:06}Z",
                    i / 3600 % 60,
                    i / 60 % 60,
                    i
                ),
            );
            let mut it = Item::new();
            it.insert("pk".into(), AttributeValue::S(key.pk().to_owned()));
            it.insert("sk".into(), AttributeValue::S(key.sk().to_owned()));
            it.insert("temperature".into(), AttributeValue::N("21.5".into()));
            it.insert("humidity".into(), AttributeValue::N("0.43".into()));
            it.insert("ttl".into(), AttributeValue::N("1766380000".into()));
            let used = item_size(&it);
            it.insert(
                "payload".into(),
                AttributeValue::S("x".repeat(200 - used - 7)),
            );
            (key, WireItem::encode(&it))
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let data = items();
    assert_eq!(data[0].1.size(), 200);
    let mut g = c.benchmark_group("batching");
    g.throughput(Throughput::Elements(ITEMS as u64));
    g.bench_function("queue_batch_build_200B", |b| {
        b.iter_batched(
            || data.clone(),
            |data| {
                let now = Instant::now();
                let mut q: TableQueue<usize> = TableQueue::default();
                for (i, (k, it)) in data.into_iter().enumerate() {
                    let wcu = it.wcu();
                    q.push(k, it, wcu, i, now);
                }
                let mut requests = 0;
                loop {
                    let batch = q.take_batch();
                    if batch.is_empty() {
                        break;
                    }
                    let body = request_body("events_2025-11-22", &batch);
                    requests += batch.len();
                    q.release(&batch);
                    black_box(body);
                }
                assert_eq!(requests, ITEMS);
            },
            criterion::BatchSize::LargeInput,
        );
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
