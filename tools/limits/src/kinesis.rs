//! Kinesis per-shard limits: the pure core. No I/O; every call takes `now`.
//!
//! - GetRecords: at most `read_calls_per_sec` calls in any one-second window
//!   per shard, and a byte budget refilled at `read_bytes_per_sec`; bytes are
//!   charged after the response is known, so one large read leaves a debt
//!   that throttles the following calls (as AWS does after a 10 MiB read).
//! - PutRecord(s): per shard, a record bucket and a byte bucket (data plus
//!   partition key), each holding one second of its rate.
//! - Shard iterators are mapped to shards by watching GetShardIterator and
//!   each GetRecords' NextShardIterator; records to shards by the MD5 hash
//!   key of their partition key and the open shards' hash key ranges.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use serde::Serialize;

use crate::bucket::TokenBucket;

/// A shard, by stream name and shard id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardRef {
    /// Stream name (ARNs are reduced to the name).
    pub stream: String,
    /// Shard id, e.g. `shardId-000000000000`.
    pub shard: String,
}

/// Per-shard limits.
#[derive(Debug, Clone)]
pub struct KinesisLimits {
    /// GetRecords calls per shard per second (AWS: 5).
    pub read_calls_per_sec: usize,
    /// Bytes read per shard per second (AWS: 2 MiB).
    pub read_bytes_per_sec: f64,
    /// Records written per shard per second (AWS: 1,000).
    pub write_records_per_sec: f64,
    /// Bytes written per shard per second (AWS: 1 MiB).
    pub write_bytes_per_sec: f64,
}

impl Default for KinesisLimits {
    fn default() -> Self {
        Self {
            read_calls_per_sec: 5,
            read_bytes_per_sec: 2.0 * 1024.0 * 1024.0,
            write_records_per_sec: 1000.0,
            write_bytes_per_sec: 1024.0 * 1024.0,
        }
    }
}

/// Counters of one shard.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ShardStats {
    /// GetRecords calls admitted.
    pub get_records_calls: u64,
    /// GetRecords calls throttled.
    pub get_records_throttled: u64,
    /// Record bytes returned by admitted GetRecords calls.
    pub bytes_read: u64,
    /// Records admitted by PutRecord(s).
    pub put_records: u64,
    /// Records throttled by PutRecord(s).
    pub put_records_throttled: u64,
    /// Bytes (data plus partition key) admitted by PutRecord(s).
    pub bytes_written: u64,
}

#[derive(Debug)]
struct ShardState {
    recent_reads: VecDeque<Instant>,
    read_bytes: TokenBucket,
    write_records: TokenBucket,
    write_bytes: TokenBucket,
    stats: ShardStats,
}

/// One open shard's hash key range, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRange {
    /// Shard id.
    pub shard: String,
    /// First hash key.
    pub start: u128,
    /// Last hash key.
    pub end: u128,
}

/// How long an iterator stays valid in AWS; older mappings are dropped.
const ITERATOR_TTL: Duration = Duration::from_secs(300);

/// Per-shard read/write limiter.
#[derive(Debug)]
pub struct KinesisLimiter {
    limits: KinesisLimits,
    shards: HashMap<ShardRef, ShardState>,
    iterators: HashMap<String, (ShardRef, Instant)>,
    ranges: HashMap<String, Vec<ShardRange>>,
    last_prune: Option<Instant>,
}

impl KinesisLimiter {
    /// A limiter with no shards known.
    pub fn new(limits: KinesisLimits) -> Self {
        Self {
            limits,
            shards: HashMap::new(),
            iterators: HashMap::new(),
            ranges: HashMap::new(),
            last_prune: None,
        }
    }

    fn shard(&mut self, s: &ShardRef, now: Instant) -> &mut ShardState {
        let l = &self.limits;
        self.shards.entry(s.clone()).or_insert_with(|| ShardState {
            recent_reads: VecDeque::new(),
            read_bytes: TokenBucket::new(
                l.read_bytes_per_sec,
                l.read_bytes_per_sec,
                l.read_bytes_per_sec,
                now,
            ),
            write_records: TokenBucket::new(
                l.write_records_per_sec,
                l.write_records_per_sec,
                l.write_records_per_sec,
                now,
            ),
            write_bytes: TokenBucket::new(
                l.write_bytes_per_sec,
                l.write_bytes_per_sec,
                l.write_bytes_per_sec,
                now,
            ),
            stats: ShardStats::default(),
        })
    }

    /// Remembers that `iterator` reads `shard`.
    pub fn learn_iterator(&mut self, iterator: &str, shard: ShardRef, now: Instant) {
        self.iterators.insert(iterator.to_owned(), (shard, now));
        let due = self
            .last_prune
            .is_none_or(|t| now.saturating_duration_since(t) > Duration::from_secs(10));
        if due {
            self.iterators
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < ITERATOR_TTL);
            self.last_prune = Some(now);
        }
    }

    /// The shard an iterator reads, if it was seen.
    pub fn shard_of_iterator(&self, iterator: &str) -> Option<&ShardRef> {
        self.iterators.get(iterator).map(|(s, _)| s)
    }

    /// Decides a GetRecords call on `shard`: `true` admits it.
    pub fn admit_get_records(&mut self, shard: &ShardRef, now: Instant) -> bool {
        let max = self.limits.read_calls_per_sec;
        let st = self.shard(shard, now);
        while st
            .recent_reads
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= Duration::from_secs(1))
        {
            st.recent_reads.pop_front();
        }
        let ok = st.recent_reads.len() < max && st.read_bytes.available(now) > 0.0;
        if ok {
            st.recent_reads.push_back(now);
            st.stats.get_records_calls += 1;
        } else {
            st.stats.get_records_throttled += 1;
        }
        ok
    }

    /// Charges the bytes an admitted GetRecords call returned.
    pub fn charge_read(&mut self, shard: &ShardRef, bytes: u64, now: Instant) {
        let st = self.shard(shard, now);
        st.read_bytes.charge(bytes as f64, now);
        st.stats.bytes_read += bytes;
    }

    /// Sets a stream's open shards (from ListShards).
    pub fn set_ranges(&mut self, stream: &str, ranges: Vec<ShardRange>) {
        self.ranges.insert(stream.to_owned(), ranges);
    }

    /// Whether the stream's shard ranges are known.
    pub fn has_ranges(&self, stream: &str) -> bool {
        self.ranges.contains_key(stream)
    }

    /// The open shard whose range holds `hash_key`.
    pub fn shard_for_hash(&self, stream: &str, hash_key: u128) -> Option<&str> {
        self.ranges
            .get(stream)?
            .iter()
            .find(|r| r.start <= hash_key && hash_key <= r.end)
            .map(|r| r.shard.as_str())
    }

    /// Decides one record of `bytes` (data plus partition key) written to
    /// `shard`: `true` admits it.
    pub fn admit_put(&mut self, shard: &ShardRef, bytes: u64, now: Instant) -> bool {
        let st = self.shard(shard, now);
        let ok = st.write_records.available(now) + 1e-9 >= 1.0
            && st.write_bytes.available(now) + 1e-9 >= bytes as f64;
        if ok {
            st.write_records.charge(1.0, now);
            st.write_bytes.charge(bytes as f64, now);
            st.stats.put_records += 1;
            st.stats.bytes_written += bytes;
        } else {
            st.stats.put_records_throttled += 1;
        }
        ok
    }

    /// Zeroes every shard's counters.
    pub fn reset_stats(&mut self) {
        self.shards
            .values_mut()
            .for_each(|s| s.stats = ShardStats::default());
    }

    /// Counters per shard, keyed `stream/shard`.
    pub fn report(&self) -> std::collections::BTreeMap<String, ShardStats> {
        self.shards
            .iter()
            .map(|(k, v)| (format!("{}/{}", k.stream, k.shard), v.stats.clone()))
            .collect()
    }
}

/// The 128-bit hash key Kinesis derives from a partition key: MD5, big-endian.
pub fn hash_key_of(partition_key: &str) -> u128 {
    let d = Md5::digest(partition_key.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&d);
    u128::from_be_bytes(b)
}

/// A stream name from a StreamName or a StreamARN (`arn:...:stream/NAME`).
pub fn stream_name(name: Option<&str>, arn: Option<&str>) -> Option<String> {
    name.map(str::to_owned)
        .or_else(|| arn.and_then(|a| a.rsplit_once("stream/").map(|(_, n)| n.to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard() -> ShardRef {
        ShardRef {
            stream: "s".into(),
            shard: "shardId-000000000000".into(),
        }
    }

    #[test]
    fn sixth_get_records_in_one_second_is_throttled() {
        let t0 = Instant::now();
        let mut k = KinesisLimiter::new(KinesisLimits::default());
        let s = shard();
        for i in 0..5 {
            assert!(
                k.admit_get_records(&s, t0 + Duration::from_millis(i * 100)),
                "call {i}"
            );
        }
        assert!(!k.admit_get_records(&s, t0 + Duration::from_millis(999)));
        // One second after the first call, one slot frees up.
        assert!(k.admit_get_records(&s, t0 + Duration::from_millis(1000)));
        assert!(!k.admit_get_records(&s, t0 + Duration::from_millis(1050)));
        // Another shard has its own window.
        let other = ShardRef {
            stream: "s".into(),
            shard: "shardId-000000000001".into(),
        };
        assert!(k.admit_get_records(&other, t0 + Duration::from_millis(1050)));
        let r = k.report();
        assert_eq!(r["s/shardId-000000000000"].get_records_calls, 6);
        assert_eq!(r["s/shardId-000000000000"].get_records_throttled, 2);
    }

    #[test]
    fn a_10_mib_read_blocks_the_shard_for_seconds() {
        let t0 = Instant::now();
        let mut k = KinesisLimiter::new(KinesisLimits::default());
        let s = shard();
        assert!(k.admit_get_records(&s, t0));
        k.charge_read(&s, 10 * 1024 * 1024, t0);
        assert!(!k.admit_get_records(&s, t0 + Duration::from_secs(2)));
        assert!(!k.admit_get_records(&s, t0 + Duration::from_millis(3900)));
        assert!(k.admit_get_records(&s, t0 + Duration::from_millis(4100)));
    }

    #[test]
    fn puts_are_capped_at_1000_records_and_1_mib_per_second() {
        let t0 = Instant::now();
        let mut k = KinesisLimiter::new(KinesisLimits::default());
        let s = shard();
        // 3,000 small records/s for 10 s: about 1,000/s get in.
        let admitted = (0..30_000u64)
            .filter(|i| k.admit_put(&s, 100, t0 + Duration::from_micros(i * 333)))
            .count();
        assert!((10_000..=11_100).contains(&admitted), "{admitted}");
        // 100 KiB records: 10 per second by bytes.
        let t1 = t0 + Duration::from_secs(20);
        let admitted = (0..200u64)
            .filter(|i| k.admit_put(&s, 100 * 1024, t1 + Duration::from_millis(i * 50)))
            .count();
        assert!((100..=113).contains(&admitted), "{admitted}");
    }

    #[test]
    fn iterators_and_hash_keys_map_to_shards() {
        let t0 = Instant::now();
        let mut k = KinesisLimiter::new(KinesisLimits::default());
        k.learn_iterator("it-1", shard(), t0);
        assert_eq!(k.shard_of_iterator("it-1"), Some(&shard()));
        assert_eq!(k.shard_of_iterator("it-2"), None);
        // Expired mappings are dropped on a later prune.
        k.learn_iterator("it-2", shard(), t0 + Duration::from_secs(400));
        assert_eq!(k.shard_of_iterator("it-1"), None);

        let half = u128::MAX / 2;
        k.set_ranges(
            "s",
            vec![
                ShardRange {
                    shard: "a".into(),
                    start: 0,
                    end: half,
                },
                ShardRange {
                    shard: "b".into(),
                    start: half + 1,
                    end: u128::MAX,
                },
            ],
        );
        assert_eq!(k.shard_for_hash("s", 5), Some("a"));
        assert_eq!(k.shard_for_hash("s", u128::MAX), Some("b"));
        assert_eq!(k.shard_for_hash("other", 5), None);
        // MD5("a") = 0cc175b9c0f1b6a831c399e269772661.
        assert_eq!(hash_key_of("a"), 0x0cc175b9c0f1b6a831c399e269772661);
        assert_eq!(
            stream_name(
                None,
                Some("arn:aws:kinesis:us-east-1:000000000000:stream/events")
            ),
            Some("events".into())
        );
    }
}
