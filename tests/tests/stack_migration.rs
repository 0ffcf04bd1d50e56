//! Issue 24, a write-shard count changed without downtime, end to end on
//! the local stack (SQS source, in-process workers, moto DynamoDB):
//!
//! 1. events written at 4 shards (today's table, and yesterday's: a period
//!    ended before the migration and past its late-arrival grace; the day
//!    before in the first minutes of a day);
//! 2. a start at 8 shards without migration config is refused, naming
//!    `schema.migrate_from`; with it, the worker makes today's table dual
//!    and writes both layouts while events keep flowing;
//! 3. the backfill runs one page, the worker is killed and restarted while
//!    events flow, and the backfill goes on from its cursor to the end;
//! 4. cutover; the worker runs at 8 shards alone; old-layout items are
//!    removed (the cleanup the cutover allows); late events for yesterday's
//!    table, sent after the cutover, are written in that table's layout.
//!
//! At every stage the read path of `tidemark query` returns, for every
//! entity, exactly the events sent, each once; yesterday's table stays
//! old-only and is read in its own layout throughout.
//!
//! Needs the local stack: run with the `stack` feature (see docs/testing.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use tidemark_schema::period::{LifecycleState, Period};
use tidemark_schema::query::TimeRange;
use tidemark_schema::strategy::{Bucket, KeyStrategy, shard_of};
use tidemark_tests::worker::{Running, config, sdk, test_toml};
use tidemark_tests::{send_messages, unique_name, wait_until};
use tidemark_worker::config::Config;
use tidemark_worker::maintenance::migrate::{self, BackfillOptions, MigrationState};
use tidemark_worker::{Worker, WorkerError};

const ENTITIES: usize = 8;

fn tb(shards: u32) -> KeyStrategy {
    KeyStrategy::TimeBucket {
        shards,
        bucket: Bucket::Hour,
    }
}

/// Events sent so far, per entity.
#[derive(Default)]
struct Sent {
    by_entity: BTreeMap<String, BTreeSet<String>>,
    /// Each entity's newest event (the latest stamp: `recent` plus its
    /// number).
    newest: BTreeMap<String, String>,
    next: usize,
    /// The newest stamp sent so far.
    newest_at: DateTime<Utc>,
    /// The last batch's events, as sent.
    last: Vec<Vec<u8>>,
}

impl Sent {
    /// Sends `n` events spread over the entities, stamped `at` plus a few
    /// milliseconds each.
    async fn send(&mut self, sqs: &aws_sdk_sqs::Client, queue: &str, n: usize, at: DateTime<Utc>) {
        let mut bodies = Vec::new();
        for _ in 0..n {
            let i = self.next;
            self.next += 1;
            let entity = format!("dev-{}", i % ENTITIES);
            let id = format!("ev-{i}");
            let ts = (at + chrono::Duration::milliseconds(i as i64)).to_rfc3339();
            bodies.push((
                None,
                format!(r#"{{"deviceId":"{entity}","timestamp":"{ts}","eventId":"{id}","n":{i}}}"#),
            ));
            // A batch stamped before an earlier one (late events) holds no
            // entity's newest event.
            if at >= self.newest_at {
                self.newest.insert(entity.clone(), id.clone());
            }
            self.by_entity.entry(entity).or_default().insert(id);
        }
        self.newest_at = self.newest_at.max(at);
        self.last = bodies.iter().map(|(_, b)| b.as_bytes().to_vec()).collect();
        send_messages(sqs, queue, &bodies).await;
    }

    fn total(&self) -> u64 {
        self.by_entity.values().map(|s| s.len() as u64).sum()
    }
}

/// `query`'s read for every entity returns exactly its events, each once.
async fn assert_reads(
    stage: &str,
    ddb: &aws_sdk_dynamodb::Client,
    config: &Config,
    sent: &Sent,
    range: TimeRange,
) {
    for (entity, want) in &sent.by_entity {
        let items = tidemark_worker::tools::query::range(ddb, &config.schema, entity, range)
            .await
            .unwrap();
        let ids: Vec<String> = items
            .iter()
            .map(|i| i["event_id"].as_s().unwrap().clone())
            .collect();
        let unique: BTreeSet<String> = ids.iter().cloned().collect();
        assert_eq!(ids.len(), unique.len(), "{stage}: {entity} read once each");
        assert_eq!(&unique, want, "{stage}: {entity}'s events");
        let latest = tidemark_worker::tools::query::latest(ddb, &config.schema, entity, range)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            latest["event_id"].as_s().unwrap(),
            &sent.newest[entity],
            "{stage}: {entity}'s latest"
        );
    }
}

/// Waits until `run` stored `n` items.
async fn stored(run: &Running, n: u64, what: &str) {
    wait_until(what, Duration::from_secs(60), || async {
        (run.stored() >= n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn shards_grow_from_4_to_8_with_dual_writes_backfill_and_cutover_losing_nothing() {
    let stack = tidemark_tests::stack().await;
    let name = unique_name("migrate");
    let dir = std::env::temp_dir().join(&name);
    let dead = dir.join("dead.jsonl");
    let sqs = stack.sqs();
    let ddb = stack.dynamodb();
    let sdk = sdk(&stack);
    let queue = tidemark_tests::create_queue(&sqs, &name, false).await;
    let source = format!(
        "[source]\nkind = \"sqs\"\nqueue_url = \"{queue}\"\nwait_time = \"1s\"\nvisibility_timeout = \"5s\"\nheartbeat_margin = \"2s\"\n"
    );
    let four = test_toml(&source, &name, &dead, "127.0.0.1:0");
    let key4 = r#"key = { strategy = "time_bucket", shards = 4, bucket = "hour" }"#;
    assert!(four.contains(key4));
    let eight = four.replace("shards = 4", "shards = 8");
    let migrating = eight.replace(
        "shards = 8, bucket = \"hour\" }",
        "shards = 8, bucket = \"hour\" }\nmigrate_from = { strategy = \"time_bucket\", shards = 4, bucket = \"hour\" }",
    );
    let (c4, c8, cm) = (
        config(&dir.join("4"), &four),
        config(&dir.join("8"), &eight),
        config(&dir.join("m"), &migrating),
    );
    assert_eq!(cm.schema.migrate_from, Some(tb(4)));
    // Entities on both sides: a shard that stays (one item per event
    // during the migration) and one that moves (two).
    let moves = (0..ENTITIES)
        .filter(|i| {
            let e = format!("dev-{i}");
            shard_of(&e, 4) != shard_of(&e, 8)
        })
        .count();
    assert!(0 < moves && moves < ENTITIES, "{moves} of {ENTITIES} move");

    let now = Utc::now();
    let today = Period::Day.containing(now.timestamp_millis());
    // The ended period's table must be past its late-arrival grace for the
    // whole test: a table still cooling takes writes, so the migration
    // rightly makes it dual too. In the first part of a day (the grace plus
    // a margin for this test's run) the day before yesterday stands in.
    let lifecycle = cm.schema.lifecycle();
    let grace = chrono::Duration::from_std(lifecycle.late_arrival_grace).unwrap();
    let cooling_until = today.start_ms + (grace + chrono::Duration::minutes(10)).num_milliseconds();
    let yesterday = if now.timestamp_millis() < cooling_until {
        today.prev().prev()
    } else {
        today.prev()
    };
    let state = lifecycle.state_at(&yesterday, now.timestamp_millis());
    assert!(
        matches!(state, LifecycleState::Cold | LifecycleState::Frozen),
        "the old table takes no writes during the test: {state:?}"
    );
    let table = format!("{name}_{}", today.label());
    let old_table = format!("{name}_{}", yesterday.label());
    let range = TimeRange {
        start_ms: yesterday.start_ms,
        end_ms: now.timestamp_millis() + 3_600_000,
    };
    let mut sent = Sent::default();
    // Stamps: yesterday noon, and a minute ago (so the events stay in
    // today's table whatever the time of day, bar the first minute).
    let past = DateTime::from_timestamp_millis(yesterday.start_ms + 43_200_000).unwrap();
    let recent = now - chrono::Duration::seconds(60);
    let recent = if recent.timestamp_millis() < today.start_ms {
        now
    } else {
        recent
    };

    // 1. Four shards.
    let run = Running::start(&c4, &sdk).await;
    sent.send(&sqs, &queue, 40, past).await;
    sent.send(&sqs, &queue, 80, recent).await;
    stored(&run, sent.total(), "stage 1 stored").await;
    run.stop().await;
    assert_reads("before", &ddb, &c4, &sent, range).await;

    // 2. Eight shards without migration config: refused, saying how.
    let err = Box::pin(Worker::build(&c8, &sdk)).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            WorkerError::Tables(tidemark_worker::maintenance::TablesError::LayoutChanged { .. })
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"schema.migrate_from = { bucket = "hour", shards = 4, strategy = "time_bucket" }"#
        ),
        "{text}"
    );
    // With it: dual writes while events flow.
    let before = sent.total();
    let run = Running::start(&cm, &sdk).await;
    let layout = |t: &str| {
        let ddb = ddb.clone();
        let t = t.to_string();
        async move { migrate::table_layout(&ddb, &t).await.unwrap().unwrap().1 }
    };
    assert_eq!(layout(&table).await.state(&cm.schema), MigrationState::Dual);
    assert_eq!(
        layout(&old_table).await.state(&cm.schema),
        MigrationState::OldOnly,
        "a table of an ended period stays in its layout"
    );
    sent.send(&sqs, &queue, 80, recent).await;
    let dual_events = sent.total() - before;
    // An event whose shard moves is two items.
    wait_until("stage 2 stored", Duration::from_secs(60), || async {
        (run.stored() > dual_events).then_some(())
    })
    .await;
    wait_until("the queue is drained", Duration::from_secs(60), || async {
        (tidemark_tests::worker::queue_depth(&sqs, &queue).await == 0).then_some(())
    })
    .await;
    let report = run.stop().await;
    assert!(
        dual_events < report.stored && report.stored < 2 * dual_events,
        "{} items for {dual_events} events: both layouts, once where they coincide",
        report.stored
    );
    assert_reads("during dual writes", &ddb, &cm, &sent, range).await;

    // 3. Backfill one page, then a worker killed and restarted under load,
    // then the rest of the backfill from its cursor.
    let transport = Arc::new(tidemark_writer::SdkTransport::new(&sdk).unwrap());
    let mut writer = cm.writer.clone();
    writer.capacity_share = 0.25;
    let opts = BackfillOptions {
        page_size: 50,
        max_pages: Some(1),
        writer,
    };
    let first = backfill(&ddb, &transport, &cm, &table, &opts, |_| {})
        .await
        .unwrap();
    assert!(
        !first.done && first.pages == 1 && first.scanned == 50,
        "{first:?}"
    );
    assert_reads("mid-backfill", &ddb, &cm, &sent, range).await;
    let run = Running::start(&cm, &sdk).await;
    sent.send(&sqs, &queue, 40, recent).await;
    stored(&run, 1, "the restarted worker writes").await;
    run.kill().await;
    let run = Running::start(&cm, &sdk).await;
    sent.send(&sqs, &queue, 40, recent).await;
    let opts = BackfillOptions {
        max_pages: None,
        ..opts
    };
    let mut pages = Vec::new();
    let rest = backfill(&ddb, &transport, &cm, &table, &opts, |p| {
        pages.push(p.pages)
    })
    .await
    .unwrap();
    assert!(rest.done && rest.resumed, "{rest:?}");
    assert!(rest.copied > first.copied, "{rest:?}");
    assert_eq!(pages.first(), Some(&2), "went on from the saved page");
    wait_until("the queue is drained", Duration::from_secs(60), || async {
        (tidemark_tests::worker::queue_depth(&sqs, &queue).await == 0).then_some(())
    })
    .await;
    run.stop().await;
    assert_eq!(
        layout(&table).await.state(&cm.schema),
        MigrationState::Backfilled
    );
    assert_reads("after the backfill", &ddb, &cm, &sent, range).await;
    // Yesterday's table cannot be backfilled (nor needs it).
    assert!(
        backfill(&ddb, &transport, &cm, &old_table, &opts, |_| {})
            .await
            .is_err()
    );

    // 4. Cutover, then 8 shards alone; the old layout's items removed.
    assert_eq!(
        migrate::cutover(&ddb, &cm.schema, &table).await.unwrap(),
        MigrationState::NewOnly
    );
    let run = Running::start(&c8, &sdk).await;
    let before = sent.total();
    sent.send(&sqs, &queue, 40, recent).await;
    // Late events after the cutover, for yesterday's table (still in its
    // 4-shard layout, with no migration config left to say so).
    sent.send(&sqs, &queue, 24, past + chrono::Duration::hours(1))
        .await;
    let late = sent.last.clone();
    stored(&run, sent.total() - before, "stage 4 stored").await;
    run.stop().await;
    let removed = remove_old_layout(&ddb, &table).await;
    assert!(removed > 0);
    assert_reads("after the cutover", &ddb, &c8, &sent, range).await;
    // `verify` keys them as `run` wrote them. (On a task of its own: a
    // test thread's stack is small for the SDK's futures in a debug build.)
    let router = tidemark_schema::Router::new(c8.schema.clone()).unwrap();
    let report = {
        let ddb = ddb.clone();
        tokio::spawn(async move {
            tidemark_worker::tools::verify::verify(
                &ddb,
                &router,
                &late,
                &tidemark_worker::tools::verify::VerifyOptions::default(),
            )
            .await
        })
        .await
        .unwrap()
        .unwrap()
    };
    assert!(
        report.complete(),
        "late events after the cutover: {report:?}"
    );
    assert_eq!(
        layout(&old_table).await.read_strategies(),
        Some(vec![tb(4)]),
        "yesterday is still read at 4 shards"
    );

    for t in [table, old_table, format!("{name}-coordinator")] {
        ddb.delete_table().table_name(&t).send().await.ok();
    }
    sqs.delete_queue().queue_url(&queue).send().await.ok();
}

/// `tidemark migrate backfill` of `table` under config `cm`.
async fn backfill(
    ddb: &aws_sdk_dynamodb::Client,
    transport: &Arc<tidemark_writer::SdkTransport>,
    cm: &Config,
    table: &str,
    opts: &BackfillOptions,
    progress: impl FnMut(&migrate::BackfillProgress),
) -> Result<migrate::BackfillProgress, migrate::MigrateError> {
    let coordinator = &cm.maintenance.coordinator_table;
    migrate::backfill(
        ddb,
        transport.clone(),
        &cm.schema,
        coordinator,
        table,
        opts,
        progress,
    )
    .await
}

/// Deletes the items under their 4-shard key where it differs from the
/// 8-shard one; returns how many.
async fn remove_old_layout(ddb: &aws_sdk_dynamodb::Client, table: &str) -> usize {
    let mut removed = 0;
    for item in tidemark_tests::scan_items(ddb, table).await {
        let s = |k: &str| item[k].as_s().unwrap().clone();
        let ts: i64 = item["ts_ms"].as_n().unwrap().parse().unwrap();
        let old = tb(4).key(&s("entity_id"), ts, &s("event_id"));
        let new = tb(8).key(&s("entity_id"), ts, &s("event_id"));
        if old != new && old.pk() == s("pk") && old.sk() == s("sk") {
            ddb.delete_item()
                .table_name(table)
                .key("pk", AttributeValue::S(s("pk")))
                .key("sk", AttributeValue::S(s("sk")))
                .send()
                .await
                .unwrap();
            removed += 1;
        }
    }
    removed
}
