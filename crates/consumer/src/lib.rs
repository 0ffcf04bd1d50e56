//! tidemark-consumer: the sources. Each reads records from somewhere (a
//! Kinesis stream, an SQS queue, a recorded fixture) into acknowledgeable
//! [`Record`]s, one per event, behind one [`Source`] trait.
//!
//! Modules:
//! - [`source`]: the [`Source`] trait (what a source does, its contract, and
//!   how to add one), [`Governors`]; `registry`: the `[source]` section
//!   ([`SourceConfig`]) and [`build`], which turns it into a source.
//! - [`record`]: [`Record`], its [`Ack`] handle (and [`Ack::done_all`], one
//!   report per run of acks to the same tracker) and [`Defect`].
//! - [`kinesis`]: [`KinesisSource`] (KCL-format leases, 2.x to 3.5, the
//!   KCL's own items in the table left as they are; listing or
//!   leader-mode balancing, shard readers by polling or fan-out, renewals
//!   and checkpoints, resharding, several streams; the stream's settings);
//!   its lease table is [`lease`] (also the worker's maintenance lease).
//! - [`sqs`]: [`SqsSource`] (long-poll receivers, visibility heartbeats,
//!   delete after acknowledgement, FIFO group order).
//! - [`fixture`]: the JSON-lines fixture format, its recorder and the
//!   replay source.
//! - [`sim`]: what the fleet simulator (`tools/fleet-sim`) plugs into the
//!   Kinesis source: the lease-table and leader-store traits.
//! - [`metrics`]: every metric name, and [`metrics::describe`] for HELP
//!   lines.
//! - [`error`]: [`ConsumerError`], [`AwsError`], [`SourceConfigError`]; AWS
//!   errors are classified by `tidemark-aws-errors` (re-exported as
//!   [`error::ErrorClass`]).
//! - `testing` (feature `testing`, for the tests crate and the fuzz
//!   targets): the KPL de-aggregation and the SQS body decoding.
//! - [`keyschema`]: the key schema a table must have before it is adopted
//!   ([`keyschema::KeySpec::check`]: a mismatch names table, found,
//!   expected); shared with the worker's own tables.
//!
//! Every source frames its records the same way: `record_format` (`json`,
//! `json_or_array`, `ndjson`, `json_array`, gzip detected) is split by
//! `tidemark_schema::framing::frame`, one [`Record`] per event.
//!
//! Guarantees:
//! - At-least-once: progress (a Kinesis checkpoint, an SQS delete) never
//!   passes a record that is not acknowledged (stored or dead-lettered); a
//!   dropped [`Ack`] holds it back. Records after it are delivered again
//!   after a crash or a lease move, so the sink must be idempotent
//!   (Tidemark's item keys are).
//! - Per-shard order (Kinesis): records of a shard are delivered in
//!   (sequence, sub-sequence) order, and a child shard only after all its
//!   parents reached `SHARD_END`, so per-partition-key order survives
//!   resharding. Per-group order (SQS FIFO): a message's records reach the
//!   sink only after every earlier message of its group is acknowledged.
//! - KCL tables (Kinesis): only leases are taken, balanced, written or
//!   deleted; a KCL application's other items and side tables are never
//!   written, and a table the KCL is still migrating or using is refused at
//!   start.
//! - Fencing (Kinesis): every lease write is conditional on `leaseCounter`;
//!   a worker that lost a lease stops reading the shard and cannot
//!   checkpoint it, and a reader whose lease was not renewed in time stops
//!   submitting before another worker may take the shard. Acknowledged
//!   progress is checkpointed by the renewer, also while the reader waits on
//!   the pipeline's back-pressure. The renewer also shows each held shard's
//!   checkpoint lag (records and age of what the written checkpoint does
//!   not cover) in its status and the `checkpoint_lag_*` gauges.
//! - Pacing (Kinesis polling): at most 5 GetRecords calls/s and 2 MiB/s per
//!   shard.
//! - Honest stops: a Kinesis shutdown whose final checkpoint or lease
//!   release failed returns [`ConsumerError::DrainIncomplete`] rather than
//!   `Ok`.

pub mod error;
pub mod fixture;
pub mod keyschema;
pub mod kinesis;
pub mod metrics;
pub mod record;
mod registry;
pub mod sim;
pub mod source;
pub mod sqs;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::{AwsError, ConsumerError, SourceConfigError};
pub use kinesis::lease;
pub use kinesis::{KinesisConfig, KinesisSource};
pub use record::{Ack, AckTarget, Defect, Record};
pub use registry::{SourceConfig, SourceContext, build};
pub use source::{Governors, Source};
pub use sqs::{SqsConfig, SqsSource};
