//! KPL aggregated records: detection, MD5 check, and splitting into user
//! records.
//!
//! Format (the KPL's `AggregatedRecord`): magic bytes `F3 89 9A C2`, a
//! protobuf message, then the 16-byte MD5 of that message. The protobuf is
//! read by hand (four message types, three wire types), which keeps a code
//! generator out of the build. User record `i` of an aggregate gets
//! sub-sequence number `i`, as in the KCL.

use bytes::Bytes;
use md5::{Digest, Md5};

/// The four bytes that open every KPL aggregate.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
const DIGEST_LEN: usize = 16;

/// One user record taken out of an aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// Partition key the producer gave this user record.
    pub partition_key: String,
    /// Explicit hash key, when the producer set one.
    pub explicit_hash_key: Option<String>,
    /// Payload.
    pub data: Bytes,
    /// Index within the aggregate.
    pub sub_sequence_number: u64,
}

/// Why an aggregate (a record opening with the magic bytes) is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KplError {
    /// Shorter than magic + digest.
    #[error("aggregate too short ({0} bytes)")]
    TooShort(usize),
    /// The trailing MD5 does not match the protobuf body.
    #[error("aggregate MD5 mismatch")]
    Md5Mismatch,
    /// The protobuf body is malformed.
    #[error("aggregate protobuf malformed: {0}")]
    Protobuf(&'static str),
    /// A user record points outside the partition/hash key tables.
    #[error("user record {record} has key index {index} outside a table of {len}")]
    BadKeyIndex {
        /// Sub-record index.
        record: usize,
        /// The index it holds.
        index: u64,
        /// The table length.
        len: usize,
    },
}

/// Splits a KPL aggregate into its user records. `Ok(None)`: not an aggregate
/// (no magic bytes), use the record as it is.
pub fn deaggregate(data: &[u8]) -> Result<Option<Vec<UserRecord>>, KplError> {
    if !data.starts_with(&MAGIC) {
        return Ok(None);
    }
    if data.len() < MAGIC.len() + DIGEST_LEN {
        return Err(KplError::TooShort(data.len()));
    }
    let (body, digest) = data[MAGIC.len()..].split_at(data.len() - MAGIC.len() - DIGEST_LEN);
    if Md5::digest(body).as_slice() != digest {
        return Err(KplError::Md5Mismatch);
    }
    let mut pks = Vec::new();
    let mut ehks = Vec::new();
    let mut raw = Vec::new();
    let mut r = Reader(body);
    while let Some((field, value)) = r.field()? {
        match (field, value) {
            (1, Value::Bytes(b)) => pks.push(utf8(b)?),
            (2, Value::Bytes(b)) => ehks.push(utf8(b)?),
            (3, Value::Bytes(b)) => raw.push(b),
            (1..=3, _) => return Err(KplError::Protobuf("wrong wire type")),
            _ => {}
        }
    }
    let mut out = Vec::with_capacity(raw.len());
    for (i, msg) in raw.into_iter().enumerate() {
        let (mut pk_index, mut ehk_index, mut payload) = (None, None, None);
        let mut r = Reader(msg);
        while let Some((field, value)) = r.field()? {
            match (field, value) {
                (1, Value::Varint(v)) => pk_index = Some(v),
                (2, Value::Varint(v)) => ehk_index = Some(v),
                (3, Value::Bytes(b)) => payload = Some(b),
                (1..=3, _) => return Err(KplError::Protobuf("wrong wire type")),
                _ => {} // tags (4) and unknown fields are not used
            }
        }
        let pk_index = pk_index.ok_or(KplError::Protobuf("record without partition_key_index"))?;
        let lookup = |table: &[String], index: u64| {
            usize::try_from(index)
                .ok()
                .and_then(|i| table.get(i))
                .cloned()
                .ok_or(KplError::BadKeyIndex {
                    record: i,
                    index,
                    len: table.len(),
                })
        };
        out.push(UserRecord {
            partition_key: lookup(&pks, pk_index)?,
            explicit_hash_key: ehk_index.map(|e| lookup(&ehks, e)).transpose()?,
            data: Bytes::copy_from_slice(payload.ok_or(KplError::Protobuf("record without data"))?),
            sub_sequence_number: i as u64,
        });
    }
    Ok(Some(out))
}

/// Builds an aggregate from `(partition key, data)` pairs: the inverse of
/// `deaggregate`, for tests and fixture tooling.
pub fn aggregate<K: AsRef<str>, D: AsRef<[u8]>>(records: &[(K, D)]) -> Vec<u8> {
    let mut keys: Vec<&str> = Vec::new();
    let mut body = Vec::new();
    let mut recs = Vec::new();
    for (k, d) in records {
        let idx = keys
            .iter()
            .position(|x| *x == k.as_ref())
            .unwrap_or_else(|| {
                keys.push(k.as_ref());
                keys.len() - 1
            });
        let mut rec = Vec::new();
        put_varint(&mut rec, 1 << 3);
        put_varint(&mut rec, idx as u64);
        put_bytes(&mut rec, 3, d.as_ref());
        recs.push(rec);
    }
    for k in keys {
        put_bytes(&mut body, 1, k.as_bytes());
    }
    for rec in recs {
        put_bytes(&mut body, 3, &rec);
    }
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&body);
    out.extend_from_slice(&Md5::digest(&body));
    out
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn utf8(b: &[u8]) -> Result<String, KplError> {
    String::from_utf8(b.to_vec()).map_err(|_| KplError::Protobuf("key is not UTF-8"))
}

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// A minimal protobuf field reader over a byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, KplError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self
                .0
                .split_first()
                .ok_or(KplError::Protobuf("truncated varint"))?;
            self.0 = rest;
            v |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(KplError::Protobuf("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], KplError> {
        if self.0.len() < n {
            return Err(KplError::Protobuf("truncated field"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn field(&mut self) -> Result<Option<(u64, Value<'a>)>, KplError> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?)
                    .map_err(|_| KplError::Protobuf("length overflow"))?;
                Value::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Value::Fixed
            }
            _ => return Err(KplError::Protobuf("unsupported wire type")),
        };
        Ok(Some((key >> 3, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Produced by aws-kinesis-agg 1.2.3 (Python): user records
    /// ("pk1", "hello") and ("pk2", "world", explicit hash key "12345").
    const PYTHON_AGG: &[u8] = b"\xf3\x89\x9a\xc2\n\x03pk1\n\x03pk2\x12\x0512345\x1a\t\x08\x00\x1a\x05hello\x1a\x0b\x08\x01\x10\x00\x1a\x05world-KP|\xde\xec\xd4\xc2\xe1r3ES\xfb\xb4 ";

    #[test]
    fn reads_the_reference_implementations_output() {
        let recs = deaggregate(PYTHON_AGG).unwrap().unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].partition_key, "pk1");
        assert_eq!(recs[0].explicit_hash_key, None);
        assert_eq!(&recs[0].data[..], b"hello");
        assert_eq!(recs[0].sub_sequence_number, 0);
        assert_eq!(recs[1].partition_key, "pk2");
        assert_eq!(recs[1].explicit_hash_key.as_deref(), Some("12345"));
        assert_eq!(&recs[1].data[..], b"world");
        assert_eq!(recs[1].sub_sequence_number, 1);
    }

    #[test]
    fn plain_records_are_not_aggregates() {
        assert_eq!(deaggregate(b"{\"a\":1}"), Ok(None));
        assert_eq!(deaggregate(b""), Ok(None));
        assert_eq!(deaggregate(&MAGIC[..3]), Ok(None));
    }

    #[test]
    fn corruption_is_detected() {
        let mut bad = PYTHON_AGG.to_vec();
        bad[12] ^= 1;
        assert_eq!(deaggregate(&bad), Err(KplError::Md5Mismatch));
        assert_eq!(deaggregate(&PYTHON_AGG[..10]), Err(KplError::TooShort(10)));
        // A valid digest over a malformed body: truncated field.
        let body = [0x0Au8, 0x05, b'a'];
        let mut agg = MAGIC.to_vec();
        agg.extend_from_slice(&body);
        agg.extend_from_slice(&Md5::digest(body));
        assert!(matches!(deaggregate(&agg), Err(KplError::Protobuf(_))));
    }

    #[test]
    fn bad_key_index_is_an_error() {
        let mut rec = Vec::new();
        put_varint(&mut rec, 1 << 3);
        put_varint(&mut rec, 3);
        put_bytes(&mut rec, 3, b"x");
        let mut body = Vec::new();
        put_bytes(&mut body, 1, b"only");
        put_bytes(&mut body, 3, &rec);
        let mut agg = MAGIC.to_vec();
        agg.extend_from_slice(&body);
        agg.extend_from_slice(&Md5::digest(&body));
        assert_eq!(
            deaggregate(&agg),
            Err(KplError::BadKeyIndex {
                record: 0,
                index: 3,
                len: 1
            })
        );
    }

    #[test]
    fn aggregate_round_trips() {
        let input: Vec<(String, Vec<u8>)> = (0..300)
            .map(|i| (format!("k{}", i % 7), format!("payload-{i}").into_bytes()))
            .collect();
        let recs = deaggregate(&aggregate(&input)).unwrap().unwrap();
        assert_eq!(recs.len(), 300);
        for (i, (r, (k, d))) in recs.iter().zip(&input).enumerate() {
            assert_eq!(&r.partition_key, k);
            assert_eq!(&r.data[..], &d[..]);
            assert_eq!(r.sub_sequence_number, i as u64);
        }
    }
}
