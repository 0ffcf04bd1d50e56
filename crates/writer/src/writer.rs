//! The public face of the writer: [`Writer::builder`], [`WriterBuilder`],
//! [`WriterHandle`], and the dispatcher task that routes submissions to one
//! task per table.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use tidemark_governor::{Governor, Params as GovernorParams};
use tidemark_schema::size::MAX_ITEM_BYTES;
use tidemark_schema::{ItemKey, KeyAttributes, Reason, SharedStr, WireItem};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use crate::ack::{Completion, Permits, Token, WriteOutcome};
use crate::config::WriterConfig;
use crate::error::WriterError;
use crate::missing::{MissingTableHandler, RejectMissing};
use crate::share::{HotKeys, LateTables, NoHotKeys, NoneLate, SharePermits, TableShares};
use crate::stats::{SharedStats, WriterStats};
use crate::table::{Pending, TableMsg, TableTask, TaskState, WriterResources};
use crate::transport::Transport;

/// One item to write, and who to tell when it is written.
pub struct Submission {
    /// Target table (shared: a batch's items mostly name one table).
    pub table: SharedStr,
    /// The item's primary key values (used to coalesce duplicates).
    pub key: ItemKey,
    /// The item, key attributes included, encoded once (see [`WireItem`]).
    pub item: WireItem,
    /// The acknowledgement.
    pub done: Completion,
}

impl fmt::Debug for Submission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Submission")
            .field("table", &self.table)
            .field("key", &self.key)
            .field("bytes", &self.item.json().len())
            .finish_non_exhaustive()
    }
}

enum Msg {
    /// Submissions with their permits taken: (table, item), in order.
    Submit(Vec<(SharedStr, Pending)>),
    Flush(oneshot::Sender<()>),
    Close,
}

/// The writer's entry point: [`Writer::builder`].
#[derive(Debug)]
pub struct Writer;

impl Writer {
    /// Builds a writer. Writes go through `transport` (in production an
    /// [`SdkTransport`](crate::SdkTransport)); `client` serves only
    /// DescribeTable, with the SDK's own retries switched off (the writer
    /// decides every retry). `key_attributes` are the tables' key attribute
    /// names: the writer reads them in the items DynamoDB returns
    /// unprocessed, to match each to its submission (a worker passes its
    /// schema's `key_attributes`).
    ///
    /// Defaults: [`WriterConfig::default`], writes to a missing table
    /// rejected ([`RejectMissing`]), and a DynamoDB [`Governor`] of the
    /// writer's own.
    pub fn builder(
        client: Client,
        transport: Arc<dyn Transport>,
        key_attributes: KeyAttributes,
    ) -> WriterBuilder {
        WriterBuilder {
            client,
            transport,
            key_attributes,
            config: WriterConfig::default(),
            missing: Arc::new(RejectMissing),
            late: Arc::new(NoneLate),
            hot: Arc::new(NoHotKeys),
            gov: None,
        }
    }
}

/// A writer being set up; [`WriterBuilder::start`] starts it.
pub struct WriterBuilder {
    client: Client,
    transport: Arc<dyn Transport>,
    key_attributes: KeyAttributes,
    config: WriterConfig,
    missing: Arc<dyn MissingTableHandler>,
    late: Arc<dyn LateTables>,
    hot: Arc<dyn HotKeys>,
    gov: Option<Governor>,
}

impl fmt::Debug for WriterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterBuilder")
            .field("key_attributes", &self.key_attributes)
            .field("config", &self.config)
            .field("gov", &self.gov)
            .finish_non_exhaustive()
    }
}

impl WriterBuilder {
    /// How the writer batches, paces and retries.
    pub fn config(mut self, config: WriterConfig) -> WriterBuilder {
        self.config = config;
        self
    }

    /// What happens to writes that find their table missing.
    pub fn missing_tables(mut self, handler: Arc<dyn MissingTableHandler>) -> WriterBuilder {
        self.missing = handler;
        self
    }

    /// Who hears of partition keys held back at their partition's limit
    /// (default: nobody).
    pub fn hot_keys(mut self, hot: Arc<dyn HotKeys>) -> WriterBuilder {
        self.hot = hot;
        self
    }

    /// Which tables take late data (default: none). Their submissions never
    /// wait for their table's share of the in-flight bound and wait at most
    /// `late_max_wait` in its queue: past either, they are completed as
    /// `Rejected(LateBacklog)`, so a table scaled down below the active tier
    /// can never stall the caller.
    pub fn late_tables(mut self, late: Arc<dyn LateTables>) -> WriterBuilder {
        self.late = late;
        self
    }

    /// The endpoint's shared [`Governor`]: every BatchWriteItem and
    /// DescribeTable call is admitted by it, and calls that timed out or
    /// failed with a 5xx are retried within its budget. A worker shares one
    /// with its other DynamoDB callers.
    pub fn governor(mut self, gov: Governor) -> WriterBuilder {
        self.gov = Some(gov);
        self
    }

    /// Starts the writer. The returned task ends `Ok(())` after
    /// [`WriterHandle::close`] (or when every handle is dropped) once
    /// everything submitted is completed, or `Err` on a fatal error (an
    /// unusable configuration included).
    pub fn start(self) -> (WriterHandle, JoinHandle<Result<(), WriterError>>) {
        let WriterBuilder {
            client,
            transport,
            key_attributes,
            config,
            missing,
            late,
            hot,
            gov,
        } = self;
        let gov = gov.unwrap_or_else(|| Governor::new("dynamodb", GovernorParams::default()));
        // The SDK would retry throttling and 5xx up to 3 times inside one
        // `send()`, on top of the writer's own unlimited retries: 3x the calls
        // during a throttling storm, hidden from the rate controller, with
        // back-off the writer cannot see. One attempt per `send()` leaves every
        // retry decision (back-off, rate cut, requeue) to the writer.
        let conf = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build();
        let client = Client::from_conf(conf);

        let stats = Arc::new(SharedStats::default());
        let items = Arc::new(Semaphore::new(config.max_in_flight_items.max(1)));
        let bytes = Arc::new(Semaphore::new(
            config.max_in_flight_bytes.min(Semaphore::MAX_PERMITS),
        ));
        let (tx, rx) = mpsc::unbounded_channel();
        let max_items = config.max_in_flight_items.max(1);
        let max_bytes = config
            .max_in_flight_bytes
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        let shares = Arc::new(TableShares::new(
            max_items,
            max_bytes,
            config.max_table_share.clamp(f64::MIN_POSITIVE, 1.0),
        ));
        let handle = WriterHandle {
            tx,
            items: items.clone(),
            bytes: bytes.clone(),
            max_items,
            shares: shares.clone(),
            late: Late(late.clone()),
            stats: stats.clone(),
        };
        let task = tokio::spawn(async move {
            if let Err(msg) = config
                .validate()
                .and_then(|()| check_key_attributes(&key_attributes))
            {
                items.close();
                bytes.close();
                shares.close();
                return Err(WriterError::Config(msg));
            }
            let d = Dispatcher {
                gov,
                client,
                transport,
                config: Arc::new(config),
                key_attributes: Arc::new(key_attributes),
                missing,
                late,
                hot,
                stats,
                items,
                bytes,
                shares,
            };
            d.run(rx).await
        });
        (handle, task)
    }
}

/// The key attribute names the writer reads unprocessed keys by.
fn check_key_attributes(key_attributes: &KeyAttributes) -> Result<(), String> {
    if key_attributes.pk.is_empty() {
        return Err("the writer's key attributes must name the partition key attribute".into());
    }
    Ok(())
}

/// Submits items and waits for flushes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct WriterHandle {
    tx: mpsc::UnboundedSender<Msg>,
    items: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    max_items: usize,
    /// Each table's share of the bound.
    shares: Arc<TableShares>,
    late: Late,
    stats: Arc<SharedStats>,
}

/// The caller's [`LateTables`] (its own `Debug`).
#[derive(Clone)]
struct Late(Arc<dyn LateTables>);

impl fmt::Debug for Late {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LateTables")
    }
}

impl fmt::Debug for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Msg::Submit(subs) => write!(f, "Submit({} items)", subs.len()),
            Msg::Flush(_) => f.write_str("Flush"),
            Msg::Close => f.write_str("Close"),
        }
    }
}

impl WriterHandle {
    /// Accepts one item. Waits while the in-flight item or byte bound is
    /// reached. An item over 400 KB is completed at once as
    /// `Rejected(ItemTooLarge)`. `Err` only when the writer is closed or has
    /// failed; the submission is then dropped and its completion never runs.
    pub async fn submit(&self, s: Submission) -> Result<(), WriterError> {
        self.submit_all(vec![s]).await
    }

    /// Accepts several items in order, as [`submit`](Self::submit) does one:
    /// the permits of a run of one table's items are taken at once and the
    /// run travels as one message (per-item hand-offs showed in profiles).
    /// Runs are cut so that none needs more than a table's share of the
    /// in-flight bounds. A late table's item (see
    /// [`WriterBuilder::late_tables`]) never waits for its table's share:
    /// past it, it is completed at once as `Rejected(LateBacklog)`. On
    /// `Err` (closed or failed writer) the items not yet accepted are
    /// dropped, their completions never run.
    pub async fn submit_all(&self, subs: Vec<Submission>) -> Result<(), WriterError> {
        if self.tx.is_closed() {
            return Err(WriterError::Closed);
        }
        let (share_items, share_bytes) = (self.shares.max_items, self.shares.max_bytes);
        let mut group: Vec<(Submission, u32)> = Vec::with_capacity(subs.len());
        let mut group_bytes = 0usize;
        for s in subs {
            let size = s.item.size();
            if size > MAX_ITEM_BYTES {
                crate::stats::dead_letter(&self.stats, Reason::ItemTooLarge, 1);
                s.done.finish(WriteOutcome::Rejected {
                    reason: Reason::ItemTooLarge,
                    message: format!(
                        "item is {size} bytes; DynamoDB stores at most {MAX_ITEM_BYTES}"
                    ),
                });
                continue;
            }
            // An item bigger than the whole byte budget would wait forever;
            // it takes the whole budget instead. `size` is at most 400 KB,
            // and a share holds at least one such item.
            let want = size.clamp(1, share_bytes);
            if let Some((first, _)) = group.first()
                && (first.table != s.table
                    || group.len() == share_items
                    || group_bytes + want > share_bytes)
            {
                self.accept(std::mem::take(&mut group), group_bytes).await?;
                group_bytes = 0;
            }
            group_bytes += want;
            group.push((s, want as u32));
        }
        if group.is_empty() {
            return Ok(());
        }
        self.accept(group, group_bytes).await
    }

    /// Takes the permits of a run of one table's items (its share first,
    /// then the writer's bound) and hands it on.
    async fn accept(&self, group: Vec<(Submission, u32)>, bytes: usize) -> Result<(), WriterError> {
        let closed = |_| WriterError::Closed;
        let Some((first, _)) = group.first() else {
            return Ok(());
        };
        let share = self.shares.get(first.table.as_str());
        let (group, bytes, mut shares) = if self.late.0.is_late(first.table.as_str()) {
            self.take_late_shares(group, &share)
        } else {
            let n = group.len() as u32;
            let held = crate::share::acquire(&share, n, bytes as u32)
                .await
                .map_err(closed)?;
            (group, bytes, Shares::Run(held))
        };
        if group.is_empty() {
            return Ok(());
        }
        let mut items = self
            .items
            .clone()
            .acquire_many_owned(group.len() as u32)
            .await
            .map_err(closed)?;
        let mut all_bytes = self
            .bytes
            .clone()
            .acquire_many_owned(bytes as u32)
            .await
            .map_err(closed)?;
        let mut accepted = Vec::with_capacity(group.len());
        for (s, want) in group {
            // Each submission carries its own part, released when it
            // completes; `split` cannot fail: the parts add up to the total.
            let (Some(item), Some(bytes), Some(share)) = (
                items.split(1),
                all_bytes.split(want as usize),
                shares.next(want),
            ) else {
                return Err(WriterError::Closed);
            };
            let pending = Pending {
                key: s.key,
                wcu: s.item.wcu(),
                item: s.item,
                token: Token {
                    done: s.done,
                    seq: 0,
                    permits: Permits {
                        items: item,
                        bytes,
                        share_items: share.items,
                        share_bytes: share.bytes,
                    },
                },
            };
            accepted.push((s.table, pending));
        }
        self.tx
            .send(Msg::Submit(accepted))
            .map_err(|_| WriterError::Closed)
    }

    /// A late table's run: each item takes its share permits if they are
    /// free now, and is refused as `LateBacklog` otherwise (waiting would
    /// stop the caller, and every other table with it).
    fn take_late_shares(
        &self,
        group: Vec<(Submission, u32)>,
        share: &crate::share::Share,
    ) -> (Vec<(Submission, u32)>, usize, Shares) {
        let mut kept = Vec::with_capacity(group.len());
        let mut held = Vec::with_capacity(group.len());
        let mut bytes = 0usize;
        for (s, want) in group {
            match crate::share::try_acquire_one(share, want) {
                Ok(p) => {
                    bytes += want as usize;
                    held.push(p);
                    kept.push((s, want));
                }
                Err(_) => {
                    crate::stats::dead_letter(&self.stats, Reason::LateBacklog, 1);
                    let message = format!(
                        "late event: table {} already holds {} items waiting for capacity, its share of the writer's in-flight bound (writer.max_table_share); replay it once the backlog is written",
                        s.table,
                        share.items_in_flight()
                    );
                    s.done.finish(WriteOutcome::Rejected {
                        reason: Reason::LateBacklog,
                        message,
                    });
                }
            }
        }
        (kept, bytes, Shares::Each(held.into_iter()))
    }

    /// Resolves when every submission accepted before this call is completed
    /// (partial batches are sent without waiting for `linger`). Returns at
    /// once if the writer has ended.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Stops accepting submissions; everything already accepted is written,
    /// then the writer task resolves `Ok(())`.
    pub fn close(self) {
        let _ = self.tx.send(Msg::Close);
    }

    /// Same as [`close`](Self::close).
    pub fn shutdown(self) {
        self.close();
    }

    /// The counters so far.
    pub fn stats(&self) -> WriterStats {
        self.stats.snapshot()
    }

    /// Items accepted and not yet stored or rejected (the in-flight bound's
    /// use, `max_in_flight_items` at most).
    pub fn items_in_flight(&self) -> usize {
        self.max_items
            .saturating_sub(self.items.available_permits())
    }

    /// The most items one table may hold (`max_table_share` of
    /// `max_in_flight_items`).
    pub fn table_share_items(&self) -> usize {
        self.shares.max_items
    }
}

/// The share permits of an accepted run: one permit for the whole run, or
/// one per item (a late table's items, each taken on its own).
enum Shares {
    Run(SharePermits),
    Each(std::vec::IntoIter<SharePermits>),
}

impl Shares {
    /// The next item's part (`bytes` of them).
    fn next(&mut self, bytes: u32) -> Option<SharePermits> {
        match self {
            Shares::Run(run) => Some(SharePermits {
                items: run.items.split(1)?,
                bytes: run.bytes.split(bytes as usize)?,
            }),
            Shares::Each(each) => each.next(),
        }
    }
}

struct Dispatcher {
    gov: Governor,
    client: Client,
    transport: Arc<dyn Transport>,
    config: Arc<WriterConfig>,
    key_attributes: Arc<KeyAttributes>,
    missing: Arc<dyn MissingTableHandler>,
    late: Arc<dyn LateTables>,
    hot: Arc<dyn HotKeys>,
    stats: Arc<SharedStats>,
    items: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    shares: Arc<TableShares>,
}

/// A running table task, as the dispatcher sees it.
struct TableEntry {
    tx: mpsc::UnboundedSender<TableMsg>,
    /// Messages sent to it.
    sent: u64,
    /// When the last one was sent.
    last_sent: tokio::time::Instant,
    /// What the task says of itself (messages received, idle).
    state: Arc<TaskState>,
}

type Tables = HashMap<String, TableEntry>;

impl Dispatcher {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Msg>) -> Result<(), WriterError> {
        let result = self.route(&mut rx).await;
        // Wake any submit waiting for room: nothing more will be accepted.
        self.items.close();
        self.bytes.close();
        self.shares.close();
        result
    }

    async fn route(&self, rx: &mut mpsc::UnboundedReceiver<Msg>) -> Result<(), WriterError> {
        let mut tables: Tables = HashMap::new();
        let mut tasks: JoinSet<Result<(), WriterError>> = JoinSet::new();
        let idle_timeout = self.config.idle_table_timeout;
        let mut retire_check =
            tokio::time::interval((idle_timeout / 4).max(std::time::Duration::from_millis(100)));
        retire_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = retire_check.tick() => self.retire_idle(&mut tables),
                msg = rx.recv() => match msg {
                    Some(Msg::Submit(subs)) => {
                        // Consecutive submissions of one table go on as one message.
                        let mut run: Vec<Pending> = Vec::with_capacity(subs.len());
                        let mut run_table: Option<SharedStr> = None;
                        for (table, pending) in subs {
                            if run_table.as_ref() != Some(&table) {
                                if let Some(t) = run_table.take() {
                                    self.forward(&mut tables, &mut tasks, t, std::mem::take(&mut run));
                                }
                                run_table = Some(table);
                            }
                            run.push(pending);
                        }
                        if let Some(t) = run_table {
                            self.forward(&mut tables, &mut tasks, t, run);
                        }
                    }
                    Some(Msg::Flush(reply)) => {
                        let waits: Vec<_> = tables
                            .values_mut()
                            .filter_map(|t| {
                                let (otx, orx) = oneshot::channel();
                                t.sent += 1;
                                t.tx.send(TableMsg::Flush(otx)).ok().map(|_| orx)
                            })
                            .collect();
                        tokio::spawn(async move {
                            for w in waits {
                                let _ = w.await;
                            }
                            let _ = reply.send(());
                        });
                    }
                    // Stop accepting; messages already queued are still routed.
                    Some(Msg::Close) => rx.close(),
                    None => break,
                },
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    check(done)?;
                }
            }
        }
        // Closing: each table task writes what it holds, then ends.
        drop(tables);
        while let Some(done) = tasks.join_next().await {
            check(done)?;
        }
        Ok(())
    }
}

impl Dispatcher {
    /// Hands items to their table's task, starting it on the table's first
    /// item.
    fn forward(
        &self,
        tables: &mut Tables,
        tasks: &mut JoinSet<Result<(), WriterError>>,
        table: SharedStr,
        items: Vec<Pending>,
    ) {
        let entry = match tables.get_mut(table.as_str()) {
            Some(entry) => entry,
            None => {
                let (tx, trx) = mpsc::unbounded_channel();
                let state = Arc::new(TaskState::default());
                let resources = WriterResources {
                    client: self.client.clone(),
                    transport: self.transport.clone(),
                    cfg: self.config.clone(),
                    key_attributes: self.key_attributes.clone(),
                    missing: self.missing.clone(),
                    late: self.late.clone(),
                    hot: self.hot.clone(),
                    stats: self.stats.clone(),
                    gov: self.gov.clone(),
                };
                let task = TableTask::new(table.to_string(), resources, trx, state.clone());
                tasks.spawn(task.run());
                self.stats.live_tables(tables.len() + 1);
                tables.entry(table.to_string()).or_insert(TableEntry {
                    tx,
                    sent: 0,
                    last_sent: tokio::time::Instant::now(),
                    state,
                })
            }
        };
        entry.sent += 1;
        entry.last_sent = tokio::time::Instant::now();
        // A table task only ends early with an error, which the join in
        // `route` reports; the tokens are then dropped unrun.
        let _ = entry.tx.send(TableMsg::Items(items));
    }

    /// Ends the tasks of tables with nothing to do for `idle_table_timeout`:
    /// a task that has received every message sent to it and is idle is
    /// sent nothing more (its channel closes), so it ends; the table's next
    /// item starts a new one. Nothing of the old task can still be in
    /// flight then, so a key is never in two tasks' calls at once.
    fn retire_idle(&self, tables: &mut Tables) {
        let timeout = self.config.idle_table_timeout;
        let now = tokio::time::Instant::now();
        let before = tables.len();
        tables.retain(|name, t| {
            let quiet = now.saturating_duration_since(t.last_sent) >= timeout;
            let done = t.state.received() == t.sent && t.state.idle_for(now) >= Some(timeout);
            if quiet && done {
                self.shares.retire(name);
                tracing::debug!(table = %name, "table idle: its writing task ends");
                return false;
            }
            true
        });
        if tables.len() != before {
            self.stats.live_tables(tables.len());
        }
    }
}

fn check(done: Result<Result<(), WriterError>, tokio::task::JoinError>) -> Result<(), WriterError> {
    match done {
        Ok(r) => r,
        Err(e) => Err(WriterError::TaskFailed(e.to_string())),
    }
}
