//! Turning one raw Kinesis record into pipeline records: KPL de-aggregation,
//! skipping what the checkpoint already covers, registering positions with
//! the shard's watermark. Shared by the live reader and the fixture replay so
//! both produce the same records.

use std::sync::Arc;

use bytes::Bytes;
use tidemark_schema::{Origin, Reason, SharedStr};

use crate::checkpoint::{AckTracker, OutOfOrder, Position};
use crate::kpl;
use crate::record::{Ack, AckTarget, Defect, Record};

/// A record as Kinesis stores it (before de-aggregation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// Sequence number.
    pub sequence_number: SharedStr,
    /// Partition key.
    pub partition_key: String,
    /// Data (possibly a KPL aggregate).
    pub data: Bytes,
    /// ApproximateArrivalTimestamp, epoch ms.
    pub arrival_ms: i64,
}

impl From<&aws_sdk_kinesis::types::Record> for RawRecord {
    /// A record of GetRecords or of a fan-out event.
    fn from(r: &aws_sdk_kinesis::types::Record) -> Self {
        Self {
            sequence_number: r.sequence_number().into(),
            partition_key: r.partition_key().unwrap_or_default().to_string(),
            data: Bytes::copy_from_slice(r.data().as_ref()),
            arrival_ms: r
                .approximate_arrival_timestamp()
                .and_then(|t| t.to_millis().ok())
                .unwrap_or(0),
        }
    }
}

/// What [`push_kinesis_records`] read.
#[derive(Debug, Default)]
pub struct Pushed {
    /// Data bytes of the raw records.
    pub bytes: usize,
    /// Corrupt aggregates among them.
    pub corrupt: usize,
    /// The last raw record's sequence number.
    pub last: Option<SharedStr>,
}

/// [`push_user_records`] for each record of a GetRecords answer or a
/// fan-out event.
pub fn push_kinesis_records(
    records: &[aws_sdk_kinesis::types::Record],
    stream: &SharedStr,
    shard_id: &SharedStr,
    skip_upto: Option<&Position>,
    tracker: &Arc<AckTracker>,
    out: &mut Vec<Record>,
) -> Result<Pushed, OutOfOrder> {
    let mut pushed = Pushed::default();
    for r in records {
        pushed.bytes += r.data().as_ref().len();
        let raw = RawRecord::from(r);
        pushed.last = Some(raw.sequence_number.clone());
        pushed.corrupt += push_user_records(stream, shard_id, raw, skip_upto, tracker, out)?;
    }
    Ok(pushed)
}

/// Appends the user records of `raw` to `out`, skipping positions at or
/// below `skip_upto` (already checkpointed). A corrupt aggregate becomes one
/// record with a [`Defect`] and the raw bytes, at sub-sequence 0. Returns the
/// number of corrupt aggregates.
pub fn push_user_records(
    stream: &SharedStr,
    shard_id: &SharedStr,
    raw: RawRecord,
    skip_upto: Option<&Position>,
    tracker: &Arc<AckTracker>,
    out: &mut Vec<Record>,
) -> Result<usize, OutOfOrder> {
    let RawRecord {
        sequence_number,
        partition_key,
        data,
        arrival_ms,
    } = raw;
    // The stream, shard and sequence strings are shared by every record and
    // position made here: clones are count increments, not copies.
    let mut emit = |sub: u64, pk: String, data: Bytes, defect: Option<Defect>| {
        let position = Position::new(sequence_number.clone(), sub);
        if skip_upto.is_some_and(|s| position <= *s) {
            return Ok(());
        }
        let serial = tracker.push(position)?;
        out.push(Record {
            origin: Origin::Kinesis {
                stream: stream.clone(),
                shard_id: shard_id.clone(),
                sequence_number: sequence_number.clone(),
                sub_sequence_number: sub,
            },
            partition_key: pk,
            data,
            arrival_ms,
            // One count increment per record (the ack's), no spare clone.
            ack: Ack::new(Arc::clone(tracker) as Arc<dyn AckTarget>, serial),
            defect,
        });
        Ok(())
    };
    match kpl::deaggregate(&data) {
        Ok(None) => {
            emit(0, partition_key, data, None)?;
            Ok(0)
        }
        Ok(Some(users)) => {
            for u in users {
                emit(u.sub_sequence_number, u.partition_key, u.data, None)?;
            }
            Ok(0)
        }
        Err(e) => {
            let defect = Defect {
                reason: Reason::CorruptAggregate,
                message: e.to_string(),
            };
            emit(0, partition_key, data, Some(defect))?;
            Ok(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(seq: &str, data: Vec<u8>) -> RawRecord {
        RawRecord {
            sequence_number: seq.into(),
            partition_key: "outer".into(),
            data: Bytes::from(data),
            arrival_ms: 7,
        }
    }

    #[test]
    fn aggregates_split_skip_and_defects() {
        let tracker = Arc::new(AckTracker::new());
        let mut out = Vec::new();
        let agg = kpl::aggregate(&[("a", b"1"), ("b", b"2"), ("c", b"3")]);
        // Resuming from (100, 1): sub-records 0 and 1 are done.
        let skip = Position::new("100", 1);
        push_user_records(
            &"s".into(),
            &"sh".into(),
            raw("100", agg.clone()),
            Some(&skip),
            &tracker,
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].partition_key, "c");
        assert!(matches!(
            &out[0].origin,
            Origin::Kinesis {
                sub_sequence_number: 2,
                ..
            }
        ));
        let mut bad = agg;
        let last = bad.len() - 1;
        bad[last] ^= 0xFF;
        let n = push_user_records(
            &"s".into(),
            &"sh".into(),
            raw("101", bad.clone()),
            None,
            &tracker,
            &mut out,
        )
        .unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            out[1].defect.as_ref().unwrap().reason,
            Reason::CorruptAggregate
        );
        assert_eq!(
            &out[1].data[..],
            &bad[..],
            "raw bytes kept for the dead letter"
        );
        push_user_records(
            &"s".into(),
            &"sh".into(),
            raw("102", b"{}".to_vec()),
            None,
            &tracker,
            &mut out,
        )
        .unwrap();
        assert_eq!(out[2].partition_key, "outer");
        assert_eq!(tracker.in_flight(), 3);
        for r in out.drain(..) {
            r.ack.done();
        }
        assert_eq!(tracker.checkpoint(), Some(Position::new("102", 0)));
    }
}
