//! Tidemark's DynamoDB writer: turns a stream of (table, item) submissions
//! into paced BatchWriteItem calls and tells the caller, per submission,
//! exactly when its item is stored or why it was rejected.
//!
//! Modules (all private but [`transport`] and [`metrics`]; their public
//! types are re-exported here):
//! - `writer`: [`Writer::builder`] and [`WriterBuilder`] (the key attribute
//!   names are an argument; config, missing-table handler and governor are
//!   optional), [`WriterHandle`] (submit, flush, close, stats),
//!   [`Submission`]; a dispatcher routes to one task per table.
//! - `config`: [`WriterConfig`], every knob with its default.
//! - `ack`: acknowledgements ([`Complete`], [`Completion`],
//!   [`WriteOutcome`]) and what a submission carries through batching
//!   (token, memory permits).
//! - `missing`: writes to a missing table ([`MissingTableHandler`],
//!   [`RejectMissing`]) and the bookkeeping of batches waiting for its answer.
//! - `share`: each table's share of the in-flight bound, and which tables
//!   take late data ([`LateTables`], the caller's policy; [`NoneLate`]),
//!   and who hears of keys held back at their partition's limit
//!   ([`HotKeys`]: adaptive write sharding's evidence).
//! - `table`: one table's loop: batching, pacing, sending; its files
//!   `results` (what a call's answer does: completions, requeues, back-off,
//!   bisection, missing tables) and `describe` (the table's capacity).
//! - `batch`: the pure per-table queue (entries in reusable slots, one map
//!   by key hash): coalescing, 25 items / 16 MB batches.
//! - `rate`: the pure rate control law (token-bucket pacing, AIMD, adaptive
//!   concurrency), tested by deterministic simulation.
//! - `keyrate`: the pure per-key pacing law for hot partition keys (a key
//!   DynamoDB throttles gets its own rate and back-off; the others flow at
//!   the table's rate), tested by simulated scenarios on and off.
//! - `error`: [`WriterError`], and the writer's action per class of DynamoDB
//!   error (classes from `tidemark-aws-errors`).
//! - [`transport`]: [`Transport`] and [`SdkTransport`]: one pre-encoded
//!   BatchWriteItem body sent through the AWS SDK's own DynamoDB client
//!   (endpoint rules, identity cache, SigV4 with clock-skew correction, HTTP
//!   client with proxy settings, timeouts), SDK retries off;
//!   `transport::body` builds that body from a batch.
//! - `response`: reads a successful answer (consumed capacity, keys of
//!   unprocessed items, read by the key attribute names the writer was
//!   built with).
//! - `stats`: [`WriterStats`], the counters the worker prints.
//! - [`metrics`]: every metric name, and [`metrics::describe`] for HELP lines.
//!
//! Dependencies run one way, and no two modules import each other: `writer`
//! → `table` (and its files) → {`batch`, `rate`, `keyrate`, `transport`
//! (→ `batch`), `response`, `error` (→ `keyrate`), `stats` (→ `metrics`),
//! `ack`, `missing`, `share`, `config`}; `ack`, `missing`, `share` and
//! `config` import no module of the crate.
//!
//! Guarantees:
//! - **Acknowledge after store**: a completion says `Stored` only after a
//!   BatchWriteItem response confirmed the item (it was sent and not returned
//!   in UnprocessedItems).
//! - **Exactly once**: each accepted submission's completion is reported
//!   exactly once (submissions of one call that share a [`Complete`] target
//!   in one report), unless the writer ends with a fatal error, in which case the
//!   submissions still in flight are never completed (their sources must not
//!   advance).
//! - **Nothing dropped on transient trouble**: throttling, 5xx, timeouts,
//!   connection errors, a skewed signing clock and expired session
//!   credentials (the SDK corrects or refreshes them) are retried without
//!   limit with capped exponential back-off and full jitter. Only permanent problems reject an item:
//!   `ItemTooLarge`, `DynamodbRejected` (isolated by bisection), `TableMissing`,
//!   and late data past its budget: `LateBacklog`.
//! - **Bounded memory**: `submit` waits while `max_in_flight_items` or
//!   `max_in_flight_bytes` are reached, or its table holds its share of them
//!   (`max_table_share`).
//! - **Late data never waits**: an item of a table the caller's
//!   [`LateTables`] calls late is completed at once as
//!   `Rejected(LateBacklog)` when its table's share is taken, and when it
//!   has waited `late_max_wait` in the table's queue; so a table scaled down
//!   below the active tier cannot stall the caller.
//! - **Idle tables cost nothing**: a table's task ends after
//!   `idle_table_timeout` with nothing to do (DescribeTable is not polled
//!   for a table with nothing to write), and starts again on its next item.
//! - **Last write wins per key**: duplicates pending together are coalesced
//!   (every token acknowledged with the survivor), and a key is never in two
//!   calls at once, so an older value can never land after a newer one.
//! - **Tables are independent**: each has its own queue, pacer, back-off
//!   and share of the in-flight bound.
//! - **Hot keys are paced on their own** (`key_pacing`, on by default): items
//!   of a partition key DynamoDB throttles wait in that key's queue, at most
//!   `max_key_wcu`, while other keys keep the table's rate; the guarantees
//!   above hold for them unchanged (they are acknowledged only after store,
//!   retried without limit, and a key is still never in two calls at once).

mod ack;
mod batch;
mod config;
mod error;
mod keyrate;
pub mod metrics;
mod missing;
mod rate;
mod response;
mod share;
mod stats;
mod table;
pub mod transport;
mod writer;

/// For the crate's criterion benches only (`benches/batching.rs`): the
/// private queue and body builder they measure. Not a stable API.
#[doc(hidden)]
pub mod bench {
    pub use crate::batch::{Entry, TableQueue};
    pub use crate::transport::body::request_body;
}

pub use ack::{Complete, Completion, WriteOutcome};
pub use config::WriterConfig;
pub use error::WriterError;
pub use missing::{MissingTableAction, MissingTableHandler, RejectMissing};
pub use share::{HotKeys, LateTables, NoHotKeys, NoneLate};
pub use stats::{TableLoad, WriterStats};
pub use transport::{RawResponse, SdkTransport, Transport, TransportError};
pub use writer::{Submission, Writer, WriterBuilder, WriterHandle};
