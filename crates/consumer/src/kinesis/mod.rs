//! The live Kinesis source ([`KinesisSource`]): a balancing loop that
//! discovers shards and takes (or is assigned) leases, a renewer that
//! renews them and writes their checkpoints, and one reader task per
//! leased shard.
//!
//! Files, by role:
//! - `source`: [`KinesisSource`], its start-up (table, format, leader store,
//!   fan-out registration) and its [`Source`](crate::Source) impl;
//!   `streams`: several streams per worker, one single-stream run each;
//! - `run`: `StreamRun`, what every task of one stream shares; `held`: the
//!   held leases' fencing state and the one map of them;
//! - `balancing`: the loop, over `listing` (every worker lists the table,
//!   KCL 2.x) or `assign` (leader mode, KCL v3); `discovery`: shard sync
//!   and lease creation; `cleanup`: finished and garbage leases;
//! - `renewer`: renewals and periodic checkpoints;
//! - `reader`: one task per shard (parents first, GetRecords polling);
//!   `fanout`: SubscribeToShard reading; `deliver`: the one delivery path
//!   both share; `shard`: the reader's state and fenced writes; `drain`:
//!   shard end and shutdown;
//! - `api`: the other Kinesis calls (shards, iterators, description,
//!   consumer registration); `convert`: raw records to pipeline records
//!   (KPL, framing, positions); `kpl`, `pacer`, `checkpoint` (the
//!   watermark), `status`, `config`; `settings`: the stream's settings
//!   (record size, capacity mode, record distribution, fan-out consumers
//!   and their limit by the account's On-demand mode);
//! - [`lease`]: the KCL-format lease table and its laws.
//!
//! Guarantees:
//! - a shard is read by at most one reader of this worker, only while the
//!   worker holds its lease; a lost lease (refused write, or no successful
//!   renewal for `failover_time`) stops the reader before its next call;
//! - each reader has a lease deadline (send time of the last successful
//!   renewal + `failover_time` - margin, [`LeaseTiming::phase`]): past it,
//!   it submits nothing and checkpoints nothing until a renewal succeeds,
//!   whatever the balancing loop is doing, so it stops before another
//!   worker may take the shard;
//! - records are delivered in shard order; a child shard is read only after
//!   every parent lease is at `SHARD_END` (or deleted by `cleanup`, which
//!   deletes only finished leases whose children all started);
//! - checkpoints only move over acknowledged records, whatever the reader
//!   is doing (the renewer writes them from the shard's acknowledgements),
//!   and every checkpoint write is conditional on the lease counter (a
//!   stolen lease cannot be checkpointed by its old owner);
//! - a shard holds at most `max_unacked_per_shard` unacknowledged user
//!   records (after KPL de-aggregation) and `max_unacked_bytes_per_shard`
//!   of their inflated bytes, plus one Kinesis record: `deliver` opens each
//!   record of an answer only while there is room.
//!
//! [`LeaseTiming::phase`]: lease::LeaseTiming::phase

mod api;
mod assign;
mod balancing;
pub(crate) mod checkpoint;
mod cleanup;
pub(crate) mod config;
pub(crate) mod convert;
mod deliver;
mod discovery;
mod drain;
mod fanout;
mod held;
// `pub` items for the `testing` module (tests and fuzz targets).
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub(crate) mod kpl;
pub mod lease;
mod listing;
mod pacer;
mod reader;
mod renewer;
mod run;
pub mod settings;
mod shard;
mod source;
pub(crate) mod status;
mod streams;

pub use api::stream_arn;
pub use checkpoint::{AckTracker, CheckpointLag, OutOfOrder, Position, SequenceNumber};
pub use config::{InitialPosition, KinesisConfig, LeaseAssignment, ReadMode, StreamEntry};
/// KPL aggregation, as `tidemark produce --aggregate` writes records.
pub use kpl::aggregate as kpl_aggregate;
pub use settings::{AccountMode, MaxRecordSize, StreamSettings, WarmThroughput, stream_settings};
pub use source::KinesisSource;
pub use status::{ShardState, ShardStatus, StatusHandle};
