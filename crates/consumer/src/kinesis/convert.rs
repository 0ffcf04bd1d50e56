//! Turning one raw Kinesis record into pipeline records: KPL de-aggregation,
//! skipping what the checkpoint already covers, registering positions with
//! the shard's watermark, and framing each user record by `record_format`
//! (one pipeline record per event, all acknowledged through the user
//! record's one position). Shared by the live reader and the fixture replay
//! so both produce the same records.

use std::sync::Arc;

use bytes::Bytes;
use tidemark_schema::framing::{self, GZIP_MAGIC, RecordFormat};
use tidemark_schema::{Origin, Reason, SharedStr};

use crate::kinesis::checkpoint::{AckTracker, OutOfOrder, Position};
use crate::kinesis::kpl;
use crate::record::{Ack, AckTarget, Defect, Record};

/// A record as Kinesis stores it (before de-aggregation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawRecord {
    /// Sequence number.
    pub(crate) sequence_number: SharedStr,
    /// Partition key.
    pub(crate) partition_key: String,
    /// Data (possibly a KPL aggregate).
    pub(crate) data: Bytes,
    /// ApproximateArrivalTimestamp, epoch ms.
    pub(crate) arrival_ms: i64,
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

/// Where a shard's records go: their stream and shard (shared by every
/// record of the shard), the shard's tracker, and how records hold events.
#[derive(Debug, Clone)]
pub(crate) struct ShardOut {
    pub(crate) stream: SharedStr,
    pub(crate) shard_id: SharedStr,
    pub(crate) tracker: Arc<AckTracker>,
    pub(crate) format: RecordFormat,
}

/// What [`push_kinesis_records`] read.
#[derive(Debug, Default)]
pub(crate) struct Pushed {
    /// Data bytes of the raw records.
    pub(crate) bytes: usize,
    /// User records registered (positions the checkpoint will cover).
    pub(crate) registered: usize,
    /// Corrupt aggregates among them.
    pub(crate) corrupt: usize,
    /// The last raw record's sequence number.
    pub(crate) last: Option<SharedStr>,
}

/// [`push_user_records`] for each record of a GetRecords answer or a
/// fan-out event.
pub(crate) fn push_kinesis_records(
    records: &[aws_sdk_kinesis::types::Record],
    to: &ShardOut,
    skip_upto: Option<&Position>,
    out: &mut Vec<Record>,
) -> Result<Pushed, OutOfOrder> {
    let mut pushed = Pushed::default();
    for r in records {
        pushed.bytes += r.data().as_ref().len();
        let raw = RawRecord::from(r);
        pushed.last = Some(raw.sequence_number.clone());
        let users = push_user_records(
            &to.stream,
            &to.shard_id,
            raw,
            skip_upto,
            &to.tracker,
            to.format,
            out,
        )?;
        pushed.registered += users.registered;
        pushed.corrupt += users.corrupt;
    }
    Ok(pushed)
}

/// What [`push_user_records`] registered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UserRecords {
    /// User records registered with the tracker.
    pub(crate) registered: usize,
    /// Corrupt aggregates (0 or 1).
    pub(crate) corrupt: usize,
}

/// Appends the events of the user records of `raw` to `out`, skipping
/// positions at or below `skip_upto` (already checkpointed). A corrupt
/// aggregate becomes one record with a [`Defect`] and the raw bytes, at
/// sub-sequence 0.
pub(crate) fn push_user_records(
    stream: &SharedStr,
    shard_id: &SharedStr,
    raw: RawRecord,
    skip_upto: Option<&Position>,
    tracker: &Arc<AckTracker>,
    format: RecordFormat,
    out: &mut Vec<Record>,
) -> Result<UserRecords, OutOfOrder> {
    let RawRecord {
        sequence_number,
        partition_key,
        data,
        arrival_ms,
    } = raw;
    let mut registered = 0;
    // The stream, shard and sequence strings are shared by every record and
    // position made here: clones are count increments, not copies.
    let mut emit = |sub: u64, pk: String, data: Bytes, defect: Option<Defect>| {
        let position = Position::new(sequence_number.clone(), sub);
        if skip_upto.is_some_and(|s| position <= *s) {
            return Ok(());
        }
        let serial = tracker.push(position)?;
        registered += 1;
        let record = Record {
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
            inner: None,
        };
        let start = out.len();
        push_events(format, record, out);
        // What the shard's byte bound counts: the events as inflated and
        // split (the raw bytes for one unsplit record).
        let bytes: usize = out[start..].iter().map(|r| r.data.len()).sum();
        tracker.add_bytes(serial, bytes as u64);
        Ok(())
    };
    let corrupt = match kpl::deaggregate(&data) {
        Ok(None) => {
            emit(0, partition_key, data, None)?;
            0
        }
        Ok(Some(users)) => {
            for u in users {
                emit(u.sub_sequence_number, u.partition_key, u.data, None)?;
            }
            0
        }
        Err(e) => {
            let defect = Defect {
                reason: Reason::CorruptAggregate,
                message: e.to_string(),
            };
            emit(0, partition_key, data, Some(defect))?;
            1
        }
    };
    Ok(UserRecords {
        registered,
        corrupt,
    })
}

/// Pushes the events of one user record laid out as `format` (split by
/// [`framing::frame`]), each acknowledged with a share of the record's
/// acknowledgement: the record counts as done once every one of them is,
/// and at once when it holds none. In a format of several events, each
/// names its position (`inner`); a record that cannot be split becomes
/// one record with a [`Defect`] and its whole bytes.
fn push_events(format: RecordFormat, record: Record, out: &mut Vec<Record>) {
    // The usual case, one plain event per record: no splitting.
    if record.defect.is_some()
        || (format == RecordFormat::Json && !record.data.starts_with(&GZIP_MAGIC))
    {
        out.push(record);
        return;
    }
    let framed = match framing::frame(format, &record.data, false) {
        Ok(framed) => framed,
        Err(e) => {
            out.push(Record {
                defect: Some(Defect {
                    reason: e.reason(),
                    message: e.to_string(),
                }),
                ..record
            });
            return;
        }
    };
    let single = format == RecordFormat::Json;
    let Record {
        origin,
        partition_key,
        arrival_ms,
        ack,
        ..
    } = record;
    let acks = ack.split(framed.events.len());
    for (i, (data, ack)) in framed.events.into_iter().zip(acks).enumerate() {
        out.push(Record {
            origin: origin.clone(),
            partition_key: partition_key.clone(),
            data,
            arrival_ms,
            ack,
            defect: None,
            inner: (!single).then(|| u32::try_from(i).unwrap_or(u32::MAX)),
        });
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
            RecordFormat::Json,
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
            RecordFormat::Json,
            &mut out,
        )
        .unwrap();
        assert_eq!(n.corrupt, 1);
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
            RecordFormat::Json,
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

    /// A decompression bomb (gzip NDJSON of more events than a record may
    /// hold) is one record with a `too_many_events` defect and the record's
    /// own (compressed) bytes, acknowledged through its one position: one
    /// dead letter, not one per line.
    #[test]
    fn a_record_of_too_many_events_is_one_defect() {
        use std::io::Write;
        let tracker = Arc::new(AckTracker::new());
        let mut out = Vec::new();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&b"{}\n".repeat(1_000_000)).unwrap();
        let bomb = gz.finish().unwrap();
        push_user_records(
            &"s".into(),
            &"sh".into(),
            raw("7", bomb.clone()),
            None,
            &tracker,
            RecordFormat::Ndjson,
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 1, "one record, not one per line");
        let defect = out[0].defect.as_ref().unwrap();
        assert_eq!(defect.reason, Reason::TooManyEvents, "{}", defect.message);
        assert_eq!(
            &out[0].data[..],
            &bomb[..],
            "the record as read, compressed"
        );
        out.pop().unwrap().ack.done();
        assert_eq!(tracker.checkpoint(), Some(Position::new("7", 0)));
    }

    /// NDJSON records, one gzip-compressed: one record per event, naming
    /// its position; the user record's one position is acknowledged once
    /// all its events are. A record that cannot be split is one record with
    /// a defect and its whole bytes.
    #[test]
    fn records_holding_several_events_are_split_and_acked_after_all() {
        use std::io::Write;
        let tracker = Arc::new(AckTracker::new());
        let mut out = Vec::new();
        let ev = |i: u32| format!(r#"{{"d":"d{i}"}}"#);
        let plain = format!("{}\n{{\"d\":\"bad\"}}\n{}\n", ev(0), ev(2));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(format!("{}\r\n{}", ev(3), ev(4)).as_bytes())
            .unwrap();
        for (seq, data) in [("1000", plain.into_bytes()), ("1001", gz.finish().unwrap())] {
            let users = push_user_records(
                &"s".into(),
                &"sh".into(),
                raw(seq, data),
                None,
                &tracker,
                RecordFormat::Ndjson,
                &mut out,
            )
            .unwrap();
            assert_eq!(users.registered, 1);
        }
        let texts: Vec<&str> = out
            .iter()
            .map(|r| std::str::from_utf8(&r.data).unwrap())
            .collect();
        assert_eq!(
            texts,
            [ev(0).as_str(), r#"{"d":"bad"}"#, &ev(2), &ev(3), &ev(4)]
        );
        let inner: Vec<Option<u32>> = out.iter().map(|r| r.inner).collect();
        assert_eq!(inner, [Some(0), Some(1), Some(2), Some(0), Some(1)]);
        assert_eq!(tracker.in_flight(), 2, "one position per Kinesis record");
        let last = out.pop().unwrap();
        Ack::done_all(out.drain(..).map(|r| r.ack));
        assert_eq!(tracker.checkpoint(), Some(Position::new("1000", 0)));
        last.ack.done();
        assert_eq!(tracker.checkpoint(), Some(Position::new("1001", 0)));
        // Not an array: one record, dead-lettered whole.
        push_user_records(
            &"s".into(),
            &"sh".into(),
            raw("1002", br#"{"d":1}"#.to_vec()),
            None,
            &tracker,
            RecordFormat::JsonArray,
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].defect.as_ref().unwrap().reason, Reason::InvalidJson);
        assert_eq!(&out[0].data[..], br#"{"d":1}"#);
        assert_eq!(out[0].inner, None);
    }
}
