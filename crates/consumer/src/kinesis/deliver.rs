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
use crate::record::Record;

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
///
/// The shard's bounds (`max_unacked_per_shard` user records,
/// `max_unacked_bytes_per_shard` inflated bytes) are checked before each
/// Kinesis record is de-aggregated and inflated: past them, what was made
/// so far is handed on and the rest of the answer waits, still compressed,
/// for acknowledgements to make room. A shard thus holds at most its bounds
/// plus one record's worth, however many user records or inflated bytes
/// one answer carries.
pub(crate) async fn deliver(
    reader: &mut ShardReader,
    to: &ShardOut,
    records: &[aws_sdk_kinesis::types::Record],
    skip: Option<&Position>,
    behind: Option<i64>,
) -> Result<Result<Delivered, Stop>, ConsumerError> {
    let labels = reader.stream.shard_labels(&reader.shard);
    if let Some(ms) = behind {
        metrics::gauge!(metric::MILLIS_BEHIND, labels.clone()).set(ms as f64);
    }
    reader
        .stream
        .status
        .update(&reader.shard, |s| s.millis_behind_latest = behind);
    let mut delivered = Delivered {
        bytes: 0,
        last: None,
    };
    let mut batch = Vec::new();
    let mut positions = 0;
    for (i, r) in records.iter().enumerate() {
        if i > 0 && !reader.has_room() {
            let full = std::mem::take(&mut batch);
            if let Err(stop) = hand_on(reader, full, std::mem::take(&mut positions)).await {
                return Ok(Err(stop));
            }
            if let Err(stop) = reader.wait_room().await {
                return Ok(Err(stop));
            }
        }
        let pushed = push_kinesis_records(std::slice::from_ref(r), to, skip, &mut batch)?;
        if pushed.corrupt > 0 {
            metrics::counter!(metric::CORRUPT_AGGREGATES, labels.clone())
                .increment(pushed.corrupt as u64);
        }
        positions += pushed.registered as u64;
        delivered.bytes += pushed.bytes;
        delivered.last = pushed.last;
    }
    if let Err(stop) = hand_on(reader, batch, positions).await {
        return Ok(Err(stop));
    }
    Ok(Ok(delivered))
}

/// Counts `batch` (the records of `positions` user records) as read and
/// hands it to the sink, if not empty.
async fn hand_on(reader: &mut ShardReader, batch: Vec<Record>, positions: u64) -> Result<(), Stop> {
    let labels = reader.stream.shard_labels(&reader.shard);
    metrics::counter!(metric::RECORDS_READ, labels).increment(positions);
    let in_flight = reader.tracker.in_flight();
    reader.stream.status.update(&reader.shard, |s| {
        s.records_read += positions;
        s.in_flight = in_flight;
    });
    if batch.is_empty() {
        return Ok(());
    }
    reader.submit(batch, positions).await
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::*;
    use crate::kinesis::config::KinesisConfig;
    use crate::kinesis::kpl;
    use crate::kinesis::shard::{test_reader, unused_kinesis};

    /// Kinesis records with sequence numbers 1..=n and data `data(i)`.
    fn records(n: usize, data: impl Fn(usize) -> Vec<u8>) -> Vec<aws_sdk_kinesis::types::Record> {
        (1..=n)
            .map(|i| {
                aws_sdk_kinesis::types::Record::builder()
                    .sequence_number(i.to_string())
                    .partition_key("pk")
                    .data(aws_smithy_types::Blob::new(data(i)))
                    .build()
                    .unwrap()
            })
            .collect()
    }

    /// Delivers `records` through a reader configured by `config` in a
    /// task of its own; returns what reached the sink once the reader has
    /// nothing more to do without acknowledgements (simulated time: the
    /// wait ends once every task is idle), and the task.
    async fn deliver_unacked(
        config: KinesisConfig,
        records: Vec<aws_sdk_kinesis::types::Record>,
    ) -> (
        Vec<Record>,
        mpsc::Receiver<Vec<Record>>,
        tokio::task::JoinHandle<bool>,
    ) {
        let update =
            aws_smithy_mocks::mock!(aws_sdk_dynamodb::Client::update_item).then_output(|| {
                aws_sdk_dynamodb::operation::update_item::UpdateItemOutput::builder().build()
            });
        let (sink, mut rx) = mpsc::channel(1024);
        let (mut reader, _lease) = test_reader(&update, unused_kinesis(), config, sink);
        let out = reader.shard_out();
        let task = tokio::spawn(async move {
            matches!(
                deliver(&mut reader, &out, &records, None, None).await,
                Ok(Ok(_))
            )
        });
        let mut held = Vec::new();
        while let Ok(Some(batch)) =
            tokio::time::timeout(Duration::from_millis(200), rx.recv()).await
        {
            held.extend(batch);
        }
        (held, rx, task)
    }

    /// Acknowledges `held`, then receives (acknowledging) until `total`
    /// records came; the delivery then ends.
    async fn ack_until(held: Vec<Record>, rx: &mut mpsc::Receiver<Vec<Record>>, total: usize) {
        let mut n = held.len();
        for r in held {
            r.ack.done();
        }
        while n < total {
            let batch = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .expect("the rest within 5 s")
                .expect("reader alive");
            n += batch.len();
            for r in batch {
                r.ack.done();
            }
        }
        assert_eq!(n, total);
    }

    /// One GetRecords answer of 10 KPL aggregates of 20 user records each,
    /// on a shard bounded at 20 unacknowledged records: at most the bound
    /// plus one aggregate is handed on before acknowledgements come, not
    /// the 200 the ten Kinesis records hold.
    #[tokio::test(start_paused = true)]
    async fn kpl_aggregates_count_as_their_user_records_against_the_shard_bound() {
        let mut config = KinesisConfig::new("s", "t", "me");
        config.max_unacked_per_shard = 20;
        let answer = records(10, |i| {
            let users: Vec<(String, String)> = (0..20)
                .map(|j| (format!("k{j}"), format!("{{\"n\":{}}}", i * 100 + j)))
                .collect();
            kpl::aggregate(&users)
        });
        let (held, mut rx, task) = deliver_unacked(config, answer).await;
        assert!(
            held.len() <= 20 + 20,
            "{} user records handed on against a bound of 20",
            held.len()
        );
        assert!(!task.is_finished(), "delivery must wait for room");
        ack_until(held, &mut rx, 200).await;
        assert!(task.await.unwrap());
    }

    /// Ten gzip NDJSON records inflating to 1 MiB each, on a shard bounded
    /// at 2 MiB: only the records that fit (plus one) are inflated and
    /// handed on before acknowledgements make room.
    #[tokio::test(start_paused = true)]
    async fn inflated_bytes_count_against_the_shard_byte_bound() {
        let mut config = KinesisConfig::new("s", "t", "me");
        config.record_format = tidemark_schema::framing::RecordFormat::Ndjson;
        config.max_unacked_bytes_per_shard = 2 * 1024 * 1024;
        let line = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(1013));
        assert_eq!(line.len(), 1024);
        let answer = records(10, |_| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            for _ in 0..1024 {
                gz.write_all(line.as_bytes()).unwrap();
            }
            gz.finish().unwrap()
        });
        let (held, mut rx, task) = deliver_unacked(config, answer).await;
        let bytes: usize = held.iter().map(|r| r.data.len()).sum();
        assert!(
            bytes <= 3 * 1024 * 1024,
            "{bytes} inflated bytes handed on against a bound of 2 MiB"
        );
        assert!(!task.is_finished(), "delivery must wait for room");
        ack_until(held, &mut rx, 10 * 1024).await;
        assert!(task.await.unwrap());
    }
}
