//! tidemark-consumer: reads Kinesis (and recorded fixtures) into
//! acknowledgeable [`Record`]s.
//!
//! Modules:
//! - [`record`]: [`Record`], its [`Ack`] handle (and [`Ack::done_all`], one
//!   report per run of acks to the same tracker) and [`Defect`].
//! - [`checkpoint`]: the pure watermark ([`checkpoint::Watermark`]) and its
//!   shared wrapper; sequence-number ordering.
//! - [`lease`]: the KCL 2.x-format lease table (fenced conditional writes
//!   without blind retries, [`lease::write_once`]), the pure lease-deadline
//!   law ([`lease::LeaseTiming`]) and the pure balancing law.
//! - [`lease_store`]: [`lease_store::LeaseStore`], one attempt of each
//!   lease-table call (DynamoDB, or an in-memory table in the fleet
//!   simulator), and the reference semantics of a conditional lease write.
//! - [`coord_store`]: [`coord_store::CoordStore`], the leader lock and worker
//!   heartbeats of `lease_assignment = "leader"` (in the coordinator table,
//!   [`coord_store::DynamoCoord`], or in memory in the fleet simulator).
//! - [`lease_key`]: KCL multi-stream lease keys
//!   (`account:stream:creationEpoch:shardId`), the refusal of a table in the
//!   other key format, and [`lease_key::ScopedStore`], one stream's view of
//!   a multi-stream table.
//! - [`pacer`]: the pure per-shard GetRecords pacing law.
//! - [`kpl`]: KPL aggregate de-aggregation (MD5-checked).
//! - [`convert`]: raw Kinesis record to user records (shared by live and replay).
//! - [`kinesis`]: [`KinesisSource`], the lease coordinator and shard readers;
//!   [`kinesis::fanout`]: enhanced fan-out (consumer registration,
//!   SubscribeToShard readers, `read_mode = "fan_out"`); `kinesis::assign`:
//!   leader-mode assignment (election, heartbeats, the assignment law);
//!   [`kinesis::cleanup`]: deletion of finished (and garbage) leases, as the
//!   KCL's `LeaseCleanupManager`; [`kinesis::streams`]: several streams per
//!   worker (`streams`), one lease coordinator per stream over one table.
//! - [`fixture`]: the JSON-lines fixture format, recorder and replay source.
//! - [`sqs`]: [`sqs::SqsSource`], long-poll receivers, visibility heartbeats,
//!   delete after acknowledgement, FIFO group order (see its module docs).
//! - [`metrics`]: every metric name, and [`metrics::describe`] for HELP lines.
//! - [`error`]: [`ConsumerError`], [`error::AwsError`]; AWS errors are
//!   classified by `tidemark-aws-errors` (re-exported as [`error::ErrorClass`]).
//! - [`keyschema`]: the key schema a table must have before it is adopted
//!   ([`keyschema::KeySpec::check`]: a mismatch names table, found, expected).
//! - [`config`] (with [`config::LeaseTuning`], the lease-table behaviour at
//!   scale, measured by `tools/fleet-sim`), [`status`].
//!
//! Guarantees:
//! - At-least-once: a checkpoint never passes a record that is not
//!   acknowledged (stored or dead-lettered); a dropped [`Ack`] holds it back.
//!   Records after the checkpoint are delivered again after a crash or a
//!   lease move, so the sink must be idempotent (Tidemark's item keys are).
//! - Per-shard order: records of a shard are delivered in (sequence,
//!   sub-sequence) order, and a child shard only after all its parents reached
//!   `SHARD_END`, so per-partition-key order survives resharding.
//! - Fencing: every lease write is conditional on `leaseCounter`; a worker
//!   that lost a lease stops reading the shard and cannot checkpoint it, and
//!   a reader whose lease was not renewed in time stops submitting before
//!   another worker may take the shard.
//! - Pacing: at most 5 GetRecords calls/s and 2 MiB/s per shard.
//! - Honest stops: a Kinesis shutdown whose final checkpoint or lease release
//!   failed returns [`ConsumerError::DrainIncomplete`] rather than `Ok`.

pub mod checkpoint;
pub mod config;
pub mod convert;
pub mod coord_store;
pub mod error;
pub mod fixture;
pub mod keyschema;
pub mod kinesis;
pub mod kpl;
pub mod lease;
pub mod lease_key;
pub mod lease_store;
pub mod metrics;
pub mod pacer;
pub mod record;
pub mod sqs;
pub mod status;

pub use config::{InitialPosition, KinesisConfig, ReadMode};
pub use error::ConsumerError;
pub use kinesis::KinesisSource;
pub use record::{Ack, AckTarget, Defect, Record};
pub use status::{ShardStatus, StatusHandle};
