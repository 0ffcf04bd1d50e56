//! The one delivery path of a shard's records, shared by polling and
//! fan-out: register them with the shard's tracker (KPL de-aggregated,
//! framed by `record_format`, past the checkpoint), count them, show them
//! in the status, and hand them to the sink.

use tidemark_schema::SharedStr;

use crate::error::ConsumerError;
use crate::kinesis::checkpoint::Position;
use crate::kinesis::convert::{ShardOut, push_kinesis_records};
use crate::kinesis::shard::{ShardReader, Stop};
use crate::metrics::kinesis as metric;

/// What one delivery read.
#[derive(Debug)]
pub(crate) struct Delivered {
    /// Data bytes of the raw records (for pacing).
    pub(crate) bytes: usize,
    /// The last raw record's sequence number.
    pub(crate) last: Option<SharedStr>,
}

/// Delivers the records of one GetRecords answer or fan-out event:
/// positions at or below `skip` are already checkpointed; `behind` is its
/// MillisBehindLatest. `Ok(Err(stop))` when the lease was lost or shutdown
/// began while waiting for the sink.
pub(crate) async fn deliver(
    reader: &mut ShardReader,
    to: &ShardOut,
    records: &[aws_sdk_kinesis::types::Record],
    skip: Option<&Position>,
    behind: Option<i64>,
) -> Result<Result<Delivered, Stop>, ConsumerError> {
    let labels = reader.stream.shard_labels(&reader.shard);
    let mut batch = Vec::with_capacity(records.len());
    let pushed = push_kinesis_records(records, to, skip, &mut batch)?;
    if pushed.corrupt > 0 {
        metrics::counter!(metric::CORRUPT_AGGREGATES, labels.clone())
            .increment(pushed.corrupt as u64);
    }
    if let Some(ms) = behind {
        metrics::gauge!(metric::MILLIS_BEHIND, labels.clone()).set(ms as f64);
    }
    let n = pushed.registered as u64;
    metrics::counter!(metric::RECORDS_READ, labels).increment(n);
    let in_flight = reader.tracker.in_flight();
    reader.stream.status.update(&reader.shard, |s| {
        s.millis_behind_latest = behind;
        s.records_read += n;
        s.in_flight = in_flight;
    });
    if !batch.is_empty()
        && let Err(stop) = reader.submit(batch, n).await
    {
        return Ok(Err(stop));
    }
    Ok(Ok(Delivered {
        bytes: pushed.bytes,
        last: pushed.last,
    }))
}
