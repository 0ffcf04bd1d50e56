//! Adaptive write sharding, the I/O side: reading a table's split records
//! (strongly consistent), recording a new split (a conditional PutItem, so
//! two workers deciding the same step write one record), and the refresh
//! task that keeps every router's [`SplitRegistry`] current. The rules
//! (keying, when a worker knows enough) are `tidemark_schema::split`'s.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use tidemark_schema::Router;
use tidemark_schema::split::{SPLITS_PK, Split, TableSplits};
use tidemark_schema::strategy::KeyAttributes;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// A split read or write that failed, with the AWS error described.
#[derive(Debug, thiserror::Error)]
#[error("{operation} on the split records of {table}: {message}")]
pub(crate) struct SplitCallError {
    operation: &'static str,
    table: String,
    message: String,
}

/// The split records of `table`, all of them or those of one entity
/// (`None` for a table that does not exist: it has no splits).
pub(crate) async fn load(
    client: &Client,
    table: &str,
    attrs: &KeyAttributes,
    entity: Option<&str>,
) -> Result<Option<TableSplits>, SplitCallError> {
    let mut splits = TableSplits::default();
    let mut start = None;
    loop {
        let mut q = client
            .query()
            .table_name(table)
            .consistent_read(true)
            .expression_attribute_names("#pk", &attrs.pk)
            .expression_attribute_values(":pk", AttributeValue::S(SPLITS_PK.into()))
            .set_exclusive_start_key(start);
        q = match entity {
            Some(e) => q
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#sk", &attrs.sk)
                .expression_attribute_values(":prefix", AttributeValue::S(format!("{e}#"))),
            None => q.key_condition_expression("#pk = :pk"),
        };
        let out = match q.send().await {
            Ok(out) => out,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                return Ok(None);
            }
            Err(e) => {
                return Err(SplitCallError {
                    operation: "Query",
                    table: table.to_owned(),
                    message: tidemark_aws_errors::describe(&e),
                });
            }
        };
        for item in out.items() {
            match Split::from_item(item, attrs) {
                Ok(s) if entity.is_none_or(|e| s.entity == e) => splits.add(s),
                Ok(_) => {}
                Err(e) => warn!(table, error = %e, "a split record cannot be read; skipped"),
            }
        }
        start = out.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(Some(splits));
        }
    }
}

/// Records `split` in `table` unless a record of the same entity and
/// fan-out exists: true when this call wrote it.
pub(crate) async fn record(
    client: &Client,
    table: &str,
    attrs: &KeyAttributes,
    split: &Split,
) -> Result<bool, SplitCallError> {
    let put = client
        .put_item()
        .table_name(table)
        .set_item(Some(split.to_item(attrs)))
        .condition_expression("attribute_not_exists(#pk)")
        .expression_attribute_names("#pk", &attrs.pk)
        .send()
        .await;
    match put {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(SplitCallError {
            operation: "PutItem",
            table: table.to_owned(),
            message: tidemark_aws_errors::describe(&e),
        }),
    }
}

/// Where the split records are kept: the period tables, through DynamoDB
/// (the [`Client`]); a fake in tests, so the decision and refresh tasks run
/// in simulated time.
pub(crate) trait SplitStore: Send + Sync + 'static {
    /// See [`load`].
    fn load(
        &self,
        table: &str,
        attrs: &KeyAttributes,
        entity: Option<&str>,
    ) -> impl Future<Output = Result<Option<TableSplits>, SplitCallError>> + Send;
    /// See [`record`]: a conditional write, true when this call wrote it.
    fn record(
        &self,
        table: &str,
        attrs: &KeyAttributes,
        split: &Split,
    ) -> impl Future<Output = Result<bool, SplitCallError>> + Send;
}

impl SplitStore for Client {
    async fn load(
        &self,
        table: &str,
        attrs: &KeyAttributes,
        entity: Option<&str>,
    ) -> Result<Option<TableSplits>, SplitCallError> {
        load(self, table, attrs, entity).await
    }
    async fn record(
        &self,
        table: &str,
        attrs: &KeyAttributes,
        split: &Split,
    ) -> Result<bool, SplitCallError> {
        record(self, table, attrs, split).await
    }
}

/// The wall clock the split tasks read (epoch ms): when a split is made and
/// from when it applies, when a read of the splits started.
pub(crate) type Now = Arc<dyn Fn() -> i64 + Send + Sync>;

/// [`Now`] from the system clock.
pub(crate) fn system_now() -> Now {
    Arc::new(|| Utc::now().timestamp_millis())
}

/// The tables whose splits a worker keeps current at `now_ms`: those an
/// event accepted now can target and that still take writes (from the
/// late-arrival grace back to the future skew ahead).
fn live_tables(router: &Router, now_ms: i64) -> BTreeSet<String> {
    live_tables_of(router.config(), now_ms)
}

/// [`live_tables`] of a config (also what `status` lists splits of).
pub(crate) fn live_tables_of(c: &tidemark_schema::RouterConfig, now_ms: i64) -> BTreeSet<String> {
    let back = i64::try_from(c.late_arrival_grace.as_millis()).unwrap_or(i64::MAX);
    let ahead = i64::try_from(c.max_future_skew.as_millis()).unwrap_or(i64::MAX);
    let naming = &tidemark_schema::period::TableNaming {
        prefix: c.table_prefix.clone(),
        period: c.period,
    };
    let mut p = naming.period.containing(now_ms.saturating_sub(back));
    let last = naming.period.containing(now_ms.saturating_add(ahead));
    let mut out = BTreeSet::new();
    while p.start_ms <= last.start_ms {
        out.insert(naming.name_of(&p));
        p = p.next();
    }
    out
}

/// Reads the splits of `tables` into the router's registry; the tables
/// that failed are returned.
async fn refresh<S: SplitStore>(
    store: &S,
    now: &Now,
    router: &Router,
    tables: &BTreeSet<String>,
) -> Vec<String> {
    let attrs = &router.config().key_attributes;
    let mut failed = Vec::new();
    for table in tables {
        // The time is taken before the read: a split recorded during the
        // read starts after this time plus `learn_delay` whether or not
        // the read saw it.
        let started = now();
        match store.load(table, attrs, None).await {
            Ok(splits) => {
                let splits = splits.unwrap_or_default();
                if let Some(known) = router.splits().get(table) {
                    for (entity, list) in splits.entities() {
                        let before = known.splits.max_fan_out(entity);
                        if let Some(new) = list.iter().find(|s| s.fan_out > before) {
                            info!(table, split = %new.describe(), "learned a split");
                        }
                    }
                }
                router.splits().set(table, splits, started);
                publish_metrics(router, started);
            }
            Err(e) => {
                warn!(error = %e, "reading the splits failed; events past what is known wait");
                failed.push(table.clone());
            }
        }
    }
    failed
}

/// Before the first event: the live tables' splits (best effort; events
/// wait for the refresh task otherwise).
pub(crate) async fn first_refresh<S: SplitStore>(store: &S, now: &Now, router: &Router) {
    let tables = live_tables(router, now());
    refresh(store, now, router, &tables).await;
}

/// Every `refresh_interval`, the splits of the live tables, and at once
/// those of tables a router asked for; until `stop`.
pub(crate) async fn refresh_task<S: SplitStore>(
    store: S,
    now: Now,
    router: Arc<Router>,
    stop: CancellationToken,
) {
    let every = router.config().adaptive_sharding.refresh_interval;
    // Asked-for tables are read within this (an event waits on them).
    let wanted_every = Duration::from_millis(100).min(every);
    let mut next_full = tokio::time::Instant::now() + every;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wanted_every) => {}
        }
        let mut tables = router.splits().take_wanted();
        let at = tokio::time::Instant::now();
        if at >= next_full {
            next_full = at + every;
            let live = live_tables(&router, now());
            // Tables no longer live keep what was read last: late events
            // are older than it vouches for.
            tables.extend(live);
        }
        if !tables.is_empty() {
            for t in refresh(&store, &now, &router, &tables).await {
                // Asked for again next time.
                router.splits().want(&t);
            }
        }
    }
}

/// Adaptive write sharding for a writer: reads the live tables' splits
/// (best effort: events wait for the refresh otherwise), then gives the hook
/// to hand the writer (`WriterBuilder::hot_keys`) and the task that keeps
/// `router`'s learned splits current and turns keys held at their
/// partition's limit into recorded splits (stopped when dropped). `client`
/// reads and records the split records; `worker` names this worker in them.
/// `run` and `replay` wire it in; the benchmark driver uses it with a writer
/// of its own.
pub async fn adaptive_sharding(
    client: Client,
    router: Arc<Router>,
    worker: String,
) -> (
    Arc<dyn tidemark_writer::HotKeys>,
    tokio_util::task::AbortOnDropHandle<()>,
) {
    let now = system_now();
    first_refresh(&client, &now, &router).await;
    let (requests, rx) = requests(&router);
    let refresh = refresh_task(
        client.clone(),
        now.clone(),
        router.clone(),
        CancellationToken::new(),
    );
    let decide = decide_task(client, now, router, worker, rx);
    let task = tokio::spawn(async move {
        tokio::join!(refresh, decide);
    });
    (
        Arc::new(requests),
        tokio_util::task::AbortOnDropHandle::new(task),
    )
}

/// A key the writer saw held back at its partition's limit.
#[derive(Debug)]
pub(crate) struct Held {
    table: String,
    /// Keys of its items waiting, oldest first.
    waiting: Vec<tidemark_schema::ItemKey>,
    held_for: Duration,
    accepted_wcu: f64,
}

/// The writer's [`HotKeys`](tidemark_writer::HotKeys): keys held at least
/// `hold_threshold` go to the decision task (dropped when it is busy: the
/// writer tells again within a second while the key stays held).
pub(crate) struct SplitRequests {
    tx: tokio::sync::mpsc::Sender<Held>,
    threshold: Duration,
}

impl tidemark_writer::HotKeys for SplitRequests {
    fn held(
        &self,
        table: &str,
        waiting: &[tidemark_schema::ItemKey],
        held_for: Duration,
        accepted_wcu: f64,
    ) {
        if held_for >= self.threshold {
            let _ = self.tx.try_send(Held {
                table: table.to_owned(),
                waiting: waiting.to_vec(),
                held_for,
                accepted_wcu,
            });
        }
    }
}

/// The hot-key hook for the writer and the task that decides and records
/// splits from what it hears (see [`decide_task`]).
pub(crate) fn requests(router: &Router) -> (SplitRequests, tokio::sync::mpsc::Receiver<Held>) {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let threshold = router.config().adaptive_sharding.hold_threshold;
    (SplitRequests { tx, threshold }, rx)
}

/// Turns held keys into recorded splits: traces the key to its entity and
/// event time, asks the decision law (`tidemark_schema::split::decide`)
/// with the splits this worker knows (a split entity counts as held only
/// since its items at the current fan-out were heard held: see
/// [`SplitHolds`]), and records the next fan-out with a
/// conditional write, starting `learn_delay` from now. A split another
/// worker recorded first is learned at the next refresh.
pub(crate) async fn decide_task<S: SplitStore>(
    store: S,
    clock: Now,
    router: Arc<Router>,
    worker: String,
    mut rx: tokio::sync::mpsc::Receiver<Held>,
) {
    let config = router.config().clone();
    let adaptive = &config.adaptive_sharding;
    let learn_ms = i64::try_from(adaptive.learn_delay.as_millis()).unwrap_or(i64::MAX);
    let mut holds = SplitHolds::default();
    while let Some(h) = rx.recv().await {
        let Some((entity, item_ts, pk)) = hottest(&config.key, &h.waiting) else {
            continue;
        };
        let Some(known) = router.splits().get(&h.table) else {
            continue;
        };
        let now = clock();
        let current = known.splits.fan_out_at(&entity, item_ts);
        let held_for = holds.held_at(&h.table, &entity, current, now, h.held_for);
        let Some(fan_out) =
            tidemark_schema::split::decide(adaptive, &known.splits, &entity, item_ts, held_for)
        else {
            continue;
        };
        let split = Split {
            entity: entity.clone(),
            from_ms: now.saturating_add(learn_ms),
            fan_out,
            made_at_ms: now,
            worker: worker.clone(),
            // The hold that counted: at the fan-out the entity has now.
            evidence: format!(
                "key {} held back {:.1}s at fan-out {} and {:.0} WCU/s",
                pk,
                held_for.as_secs_f64(),
                current,
                h.accepted_wcu
            ),
        };
        match store.record(&h.table, &config.key_attributes, &split).await {
            Ok(written) => {
                if written {
                    metrics::counter!(crate::metrics::SPLITS_MADE).increment(1);
                    info!(
                        table = %h.table,
                        entity = %split.entity,
                        fan_out = split.fan_out,
                        from = %tidemark_schema::timefmt::iso_millis(split.from_ms),
                        evidence = %split.evidence,
                        "split an entity held back at its partition's limit"
                    );
                }
                // Ours or another worker's (whose `from` differs from ours:
                // only the record is keyed by), learned by reading it back
                // now; until then the same step is asked again and its
                // conditional write changes nothing.
                router.splits().want(&h.table);
            }
            Err(e) => {
                warn!(error = %e, entity = %entity, "recording a split failed; asked again while the key stays held")
            }
        }
    }
}

/// How long each split entity has been held back with its items keyed by
/// its current fan-out, as the decision task heard it. The writer's
/// `held_for` is that of a partition key, and a split entity's base key
/// carries on past the split: held since before it, it would step again as
/// soon as its backlog from before the split drained, before the split
/// could show whether it helped.
#[derive(Debug, Default)]
struct SplitHolds {
    /// (table, entity) -> (fan-out, first heard held at it, last heard), ms.
    seen: std::collections::HashMap<(String, String), (u32, i64, i64)>,
}

impl SplitHolds {
    /// How long `entity` counts as held at `fan_out` at `now_ms`, the
    /// writer saying `held_for`: all of it when not split (fan-out 1), else
    /// no longer than since this task first heard it held with an item
    /// waiting at that fan-out.
    fn held_at(
        &mut self,
        table: &str,
        entity: &str,
        fan_out: u32,
        now_ms: i64,
        held_for: Duration,
    ) -> Duration {
        // Entities not heard of for 10 minutes are no longer held.
        self.seen
            .retain(|_, (_, _, last)| now_ms - *last <= 600_000);
        if fan_out <= 1 {
            return held_for;
        }
        let e = self
            .seen
            .entry((table.to_owned(), entity.to_owned()))
            .or_insert((fan_out, now_ms, now_ms));
        if e.0 != fan_out {
            *e = (fan_out, now_ms, now_ms);
        }
        e.2 = now_ms;
        let since = u64::try_from(now_ms.saturating_sub(e.1)).unwrap_or(0);
        held_for.min(Duration::from_millis(since))
    }
}

/// The entity with most items waiting among `waiting` (ties: the one
/// waiting longest), the event time of its newest waiting item (the
/// fan-out the entity is keyed by now: after a split, items from before it
/// may still wait ahead of it), and the partition key.
fn hottest(
    strategy: &tidemark_schema::strategy::KeyStrategy,
    waiting: &[tidemark_schema::ItemKey],
) -> Option<(String, i64, String)> {
    let mut counts: Vec<(String, usize, i64)> = Vec::new();
    for key in waiting {
        let Some((entity, ts)) = tidemark_schema::split::entity_and_time_of(strategy, key) else {
            continue;
        };
        match counts.iter_mut().find(|(e, _, _)| *e == entity) {
            Some(c) => {
                c.1 += 1;
                c.2 = c.2.max(ts);
            }
            None => counts.push((entity, 1, ts)),
        }
    }
    // `max_by_key` keeps the last of equals: reversed, the first seen wins.
    let (entity, _, ts) = counts.into_iter().rev().max_by_key(|c| c.1)?;
    Some((entity, ts, waiting.first()?.pk().to_owned()))
}

/// The split metrics of what `router` knows at `now_ms`: entities split
/// in the live tables, and each one's fan-out.
pub(crate) fn publish_metrics(router: &Router, now_ms: i64) {
    let live = live_tables(router, now_ms);
    let mut entities = 0u64;
    for (table, learned) in router.splits().snapshot() {
        if !live.contains(&table) {
            continue;
        }
        for (entity, _) in learned.splits.entities() {
            entities += 1;
            metrics::gauge!(crate::metrics::SPLIT_FAN_OUT, "table" => table.clone(), "entity" => entity.to_owned())
                .set(f64::from(learned.splits.max_fan_out(entity)));
        }
    }
    metrics::gauge!(crate::metrics::SPLIT_ENTITIES).set(entities as f64);
}

#[cfg(test)]
mod tests;
