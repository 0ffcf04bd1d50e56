//! The public face of the writer: [`Writer::start`], [`WriterHandle`], and the
//! dispatcher task that routes submissions to one task per table.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use futures::future::BoxFuture;
use tidemark_schema::size::MAX_ITEM_BYTES;
use tidemark_schema::{ItemKey, Reason, WireItem};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use crate::config::WriterConfig;
use crate::error::WriterError;
use crate::stats::{SharedStats, WriterStats};
use crate::table::{TableMsg, TableTask};
use crate::transport::Transport;

/// Called exactly once per accepted submission, after DynamoDB confirmed the
/// write or the item was rejected for good.
pub type Completion = Box<dyn FnOnce(WriteOutcome) + Send + 'static>;

/// How one submission ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// DynamoDB confirmed the item (or a later submission of the same key
    /// that superseded it) is stored.
    Stored,
    /// The item can never be stored; the caller dead-letters it.
    Rejected {
        /// `ItemTooLarge`, `DynamodbRejected` or `TableMissing`.
        reason: Reason,
        /// Details, e.g. DynamoDB's ValidationException message.
        message: String,
    },
}

/// One item to write, and who to tell when it is written.
pub struct Submission {
    /// Target table.
    pub table: String,
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

/// What the writer should do about writes to a table that does not exist.
pub trait MissingTableHandler: Send + Sync + 'static {
    /// Called when a write finds `table` missing. Writes to that table wait
    /// for the answer; at most one call per table is outstanding.
    fn on_missing(&self, table: &str) -> BoxFuture<'static, MissingTableAction>;
}

/// The answer of a [`MissingTableHandler`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissingTableAction {
    /// The table exists now (e.g. it was created): write again.
    Retry,
    /// Give up: the pending items are rejected with `TableMissing` and this
    /// message.
    Reject(String),
}

/// A handler that rejects every write to a missing table.
#[derive(Debug, Clone, Copy, Default)]
pub struct RejectMissing;

impl MissingTableHandler for RejectMissing {
    fn on_missing(&self, table: &str) -> BoxFuture<'static, MissingTableAction> {
        let msg = format!("table {table} does not exist");
        Box::pin(async move { MissingTableAction::Reject(msg) })
    }
}

/// Memory held by one accepted submission, released when it completes.
#[derive(Debug)]
pub(crate) struct Permits {
    items: OwnedSemaphorePermit,
    bytes: OwnedSemaphorePermit,
}

impl Permits {
    /// Takes over `other`'s permits, so that one drop releases both (they
    /// come from the same writer's semaphores).
    pub(crate) fn merge(&mut self, other: Permits) {
        self.items.merge(other.items);
        self.bytes.merge(other.bytes);
    }
}

/// A submission's acknowledgement, carried through batching.
pub(crate) struct Token {
    pub(crate) done: Completion,
    pub(crate) seq: u64,
    pub(crate) permits: Permits,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

enum Msg {
    Submit {
        table: String,
        key: ItemKey,
        item: WireItem,
        wcu: u64,
        done: Completion,
        permits: Permits,
    },
    Flush(oneshot::Sender<()>),
    Close,
}

/// Namespace for [`Writer::start`].
#[derive(Debug)]
pub struct Writer;

impl Writer {
    /// Starts the writer. Writes go through `transport` (in production an
    /// [`HttpTransport`](crate::HttpTransport)); `client` serves only
    /// DescribeTable, with its own retries switched off (see below). The
    /// returned task ends `Ok(())` after [`WriterHandle::close`] (or when
    /// every handle is dropped) once everything submitted is completed, or
    /// `Err` on a fatal error.
    pub fn start(
        client: Client,
        transport: Arc<dyn Transport>,
        config: WriterConfig,
        missing: Arc<dyn MissingTableHandler>,
    ) -> (WriterHandle, JoinHandle<Result<(), WriterError>>) {
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
        let handle = WriterHandle {
            tx,
            items: items.clone(),
            bytes: bytes.clone(),
            max_bytes: config.max_in_flight_bytes,
            stats: stats.clone(),
        };
        let task = tokio::spawn(async move {
            if let Err(msg) = config.validate() {
                items.close();
                bytes.close();
                return Err(WriterError::Config(msg));
            }
            let d = Dispatcher {
                client,
                transport,
                config: Arc::new(config),
                missing,
                stats,
                items,
                bytes,
            };
            d.run(rx).await
        });
        (handle, task)
    }
}

/// Submits items and waits for flushes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct WriterHandle {
    tx: mpsc::UnboundedSender<Msg>,
    items: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    max_bytes: usize,
    stats: Arc<SharedStats>,
}

impl fmt::Debug for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Msg::Submit { table, key, .. } => write!(f, "Submit({table}, {key})"),
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
        if self.tx.is_closed() {
            return Err(WriterError::Closed);
        }
        let size = s.item.size();
        if size > MAX_ITEM_BYTES {
            crate::stats::dead_letter(&self.stats, Reason::ItemTooLarge, 1);
            (s.done)(WriteOutcome::Rejected {
                reason: Reason::ItemTooLarge,
                message: format!("item is {size} bytes; DynamoDB stores at most {MAX_ITEM_BYTES}"),
            });
            return Ok(());
        }
        let item_permit = self
            .items
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| WriterError::Closed)?;
        // An item bigger than the whole byte budget would wait forever; it
        // takes the whole budget instead. `size` is at most 400 KB here.
        let want = size.clamp(1, self.max_bytes) as u32;
        let byte_permit = self
            .bytes
            .clone()
            .acquire_many_owned(want)
            .await
            .map_err(|_| WriterError::Closed)?;
        self.tx
            .send(Msg::Submit {
                table: s.table,
                key: s.key,
                wcu: s.item.wcu(),
                item: s.item,
                done: s.done,
                permits: Permits {
                    items: item_permit,
                    bytes: byte_permit,
                },
            })
            .map_err(|_| WriterError::Closed)
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
}

struct Dispatcher {
    client: Client,
    transport: Arc<dyn Transport>,
    config: Arc<WriterConfig>,
    missing: Arc<dyn MissingTableHandler>,
    stats: Arc<SharedStats>,
    items: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
}

impl Dispatcher {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Msg>) -> Result<(), WriterError> {
        let result = self.route(&mut rx).await;
        // Wake any submit waiting for room: nothing more will be accepted.
        self.items.close();
        self.bytes.close();
        result
    }

    async fn route(&self, rx: &mut mpsc::UnboundedReceiver<Msg>) -> Result<(), WriterError> {
        let mut tables: HashMap<String, mpsc::UnboundedSender<TableMsg>> = HashMap::new();
        let mut tasks: JoinSet<Result<(), WriterError>> = JoinSet::new();
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(Msg::Submit { table, key, item, wcu, done, permits }) => {
                        let tx = tables.entry(table.clone()).or_insert_with(|| {
                            let (tx, trx) = mpsc::unbounded_channel();
                            let task = TableTask::new(
                                table.clone(),
                                self.client.clone(),
                                self.transport.clone(),
                                self.config.clone(),
                                self.missing.clone(),
                                self.stats.clone(),
                                trx,
                            );
                            tasks.spawn(task.run());
                            tx
                        });
                        let token = Token { done, seq: 0, permits };
                        // A table task only ends early with an error, which the
                        // join below reports; the token is then dropped unrun.
                        let _ = tx.send(TableMsg::Item { key, item, wcu, token });
                    }
                    Some(Msg::Flush(reply)) => {
                        let waits: Vec<_> = tables
                            .values()
                            .filter_map(|tx| {
                                let (otx, orx) = oneshot::channel();
                                tx.send(TableMsg::Flush(otx)).ok().map(|_| orx)
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

fn check(done: Result<Result<(), WriterError>, tokio::task::JoinError>) -> Result<(), WriterError> {
    match done {
        Ok(r) => r,
        Err(e) => Err(WriterError::TaskFailed(e.to_string())),
    }
}
