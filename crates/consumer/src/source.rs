//! The seam between a source and the worker: the [`Source`] trait.
//!
//! A source reads records from somewhere (a Kinesis stream, an SQS queue, a
//! recorded fixture) and hands them to the pipeline in batches through a
//! bounded channel; the pipeline acknowledges each [`Record`] through its
//! [`Ack`](crate::Ack) once it is stored or dead-lettered, and the source
//! saves its progress (a checkpoint, a delete) only over acknowledged
//! records. The worker builds its source with
//! [`build`](crate::build) from the `[source]` section and runs whatever
//! comes back; it never names a source type.
//!
//! To add a source (the model is quickwit's `Source` and vector's
//! `SourceConfig::build`):
//! 1. a folder beside `kinesis/`, `sqs/` and `fixture/` with its config
//!    (typed, documented field by field, unknown keys refused, a
//!    `validate` naming the key) and a type implementing [`Source`];
//! 2. a variant of [`SourceConfig`](crate::SourceConfig) and its arm in
//!    each of its methods and in [`build`](crate::build) (`registry.rs`);
//! 3. frame its records with `tidemark_schema::framing::frame` by the
//!    configured `record_format`, one [`Record`] per event;
//! 4. its metric names in `metrics.rs`, and the regenerated configuration
//!    reference (`docs/configuration.md`).
//!
//! What every source guarantees, and the trait's contract:
//! - at least once: progress is saved only over acknowledged records; a
//!   dropped [`Ack`](crate::Ack) holds it back, so the sink must be
//!   idempotent (Tidemark's item keys are);
//! - back-pressure: awaiting room in the channel is how the pipeline slows
//!   the source; it never buffers without bound;
//! - an honest stop: on `shutdown` it stops reading, gives in-flight
//!   records its `shutdown_grace` to be acknowledged (none once the sink is
//!   closed: the pipeline is gone and nothing more will be acknowledged),
//!   saves what was, and returns `Ok` only when that all succeeded;
//! - an honest start: it sets [`SourceContext::running`](crate::SourceContext)
//!   once its own start (tables checked, stream or queue described) is
//!   done, and a stop during that start ends it at once.

use std::fmt;

use futures::future::BoxFuture;
use tidemark_governor::Governor;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::ConsumerError;
use crate::record::Record;

/// A source of records.
pub trait Source: Send + fmt::Debug {
    /// What it reads, for logs: `kinesis`, `sqs`, `fixture`.
    fn kind(&self) -> &'static str;

    /// Reads until `shutdown` is cancelled (or the source ends by itself: a
    /// replay at its end, an error no retry can fix), sending records to
    /// `sink` in batches, then drains as the module docs say. An error when
    /// it could not start, stopped on an error, or could not save all the
    /// acknowledged progress at the end.
    fn run(
        self: Box<Self>,
        sink: mpsc::Sender<Vec<Record>>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), ConsumerError>>;
}

/// The endpoint governors a source shares with the rest of the worker.
#[derive(Debug, Clone)]
pub struct Governors {
    /// The DynamoDB endpoint's governor (lease writes; the writer).
    pub dynamodb: Governor,
    /// The Kinesis endpoint's governor (GetRecords).
    pub kinesis: Governor,
}
