//! How a key layout spreads a stream's writes over a table's partitions:
//! the expected load of the hottest partition key and of the hottest
//! partition, for each key strategy.
//!
//! DynamoDB puts each partition key on the partition owning its hash, so
//! keys fall on partitions like balls in bins and the table is full when
//! its hottest partition is. The load is the busiest entity (`hot` WCU)
//! plus the rest of the stream, either `others` entities of equal load or,
//! when their number is not known, many small ones (spread evenly over
//! whatever keys the strategy gives them). Expected values are the mean
//! over [`SAMPLES`] placements: `time_bucket` keys (`{shard}#{hour}`) are
//! placed with the limits proxy's hash over consecutive hours (every
//! bucket lays the keys out anew, as on a real table); entity and suffix
//! keys, whose names are not known here, with a fixed uniform generator.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::strategy::KeyStrategy;

/// Placements each expectation averages over.
pub const SAMPLES: u32 = 64;

/// Most keys of other entities placed one by one per sample; beyond, they
/// are many small keys and spread evenly (the error is a few percent at a
/// few hundred partitions).
const EXPLICIT_KEYS: u64 = 20_000;

/// The writes of one moment at the peak, in WCU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Traffic {
    /// The busiest entity.
    pub hot: f64,
    /// Every other entity together.
    pub rest: f64,
    /// How many other entities share `rest` equally; `None`: many.
    pub others: Option<u64>,
}

/// Expected loads of a layout at the peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    /// The busiest partition key, WCU.
    pub hottest_key: f64,
    /// The busiest partition, WCU.
    pub hottest_partition: f64,
}

/// The partition (of `partitions`, equal hash ranges) a string partition
/// key lands on, as the limits proxy (`tools/limits`) places it: the first
/// 8 bytes of SHA-256 over the typed key (`S:` and the value), big-endian,
/// scaled to the partition count.
pub fn partition_of(pk: &str, partitions: u32) -> u32 {
    let mut h = Sha256::new();
    h.update(b"S:");
    h.update(pk.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    scale(u64::from_be_bytes(b), partitions)
}

/// `x` (uniform over u64) scaled to `0..n`.
fn scale(x: u64, n: u32) -> u32 {
    u32::try_from((u128::from(x) * u128::from(n)) >> 64).unwrap_or(0)
}

/// SplitMix64's finaliser: a fixed uniform placement of (sample, key, part)
/// that never changes with a dependency.
fn mix(sample: u32, key: u64, part: u64) -> u64 {
    let mut z = (u64::from(sample) << 40 ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(part.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The expected loads of `key` carrying `t` on `partitions` partitions.
pub(crate) fn spread(key: &KeyStrategy, t: &Traffic, partitions: u32) -> Spread {
    let p = partitions.max(1);
    let mut loads = vec![0.0f64; p as usize];
    let (mut key_sum, mut part_sum) = (0.0, 0.0);
    let mut hours = HourKeys::new();
    // The other entities one by one, or evenly spread (`None`).
    let each = |keys_per_entity: u64| {
        t.others
            .filter(|&m| m > 0 && m.saturating_mul(keys_per_entity) <= EXPLICIT_KEYS)
            .map(|m| (m, t.rest / m as f64))
    };
    for j in 0..SAMPLES {
        loads.fill(0.0);
        let hottest_key = match *key {
            KeyStrategy::Entity => {
                loads[scale(mix(j, 0, 0), p) as usize] += t.hot;
                match each(1) {
                    Some((m, r)) => {
                        for i in 1..=m {
                            loads[scale(mix(j, i, 0), p) as usize] += r;
                        }
                        t.hot.max(r)
                    }
                    None => {
                        even(&mut loads, t.rest);
                        t.hot
                    }
                }
            }
            KeyStrategy::RandomSuffix { shards } | KeyStrategy::CalculatedSuffix { shards } => {
                let n = shards.max(1);
                let per = f64::from(n);
                for k in 0..u64::from(n) {
                    loads[scale(mix(j, 0, k + 1), p) as usize] += t.hot / per;
                }
                match each(u64::from(n)) {
                    Some((m, r)) => {
                        for i in 1..=m {
                            for k in 0..u64::from(n) {
                                loads[scale(mix(j, i, k + 1), p) as usize] += r / per;
                            }
                        }
                        t.hot.max(r) / per
                    }
                    None => {
                        even(&mut loads, t.rest);
                        t.hot / per
                    }
                }
            }
            KeyStrategy::TimeBucket { shards, .. } => {
                let n = shards.max(1);
                // Entities fall on shards by hash; the shards' keys of this
                // hour fall on partitions.
                let mut shard_loads = vec![0.0f64; n as usize];
                shard_loads[scale(mix(j, 0, 0), n) as usize] += t.hot;
                match each(1) {
                    Some((m, r)) => {
                        for i in 1..=m {
                            shard_loads[scale(mix(j, i, 0), n) as usize] += r;
                        }
                    }
                    None => even(&mut shard_loads, t.rest),
                }
                for (s, load) in shard_loads.iter().enumerate() {
                    loads[hours.partition(j, s as u32, p) as usize] += load;
                }
                shard_loads.iter().copied().fold(0.0, f64::max)
            }
        };
        key_sum += hottest_key;
        part_sum += loads.iter().copied().fold(0.0, f64::max);
    }
    let n = f64::from(SAMPLES);
    Spread {
        hottest_key: key_sum / n,
        hottest_partition: part_sum / n,
    }
}

fn even(loads: &mut [f64], total: f64) {
    let each = total / loads.len().max(1) as f64;
    loads.iter_mut().for_each(|l| *l += each);
}

/// The partitions of `time_bucket` keys (`{shard}#{hour}`) of [`SAMPLES`]
/// consecutive hours, each key hashed once.
struct HourKeys {
    hours: Vec<String>,
    partitions: u32,
    /// Per hour, the partition of each shard's key placed so far.
    placed: Vec<Vec<u32>>,
}

impl HourKeys {
    fn new() -> Self {
        let base = DateTime::<Utc>::from_timestamp(1_767_225_600, 0).unwrap_or_default();
        let hours: Vec<String> = (0..SAMPLES)
            .map(|h| {
                (base + chrono::Duration::hours(i64::from(h)))
                    .format("%Y-%m-%dT%H")
                    .to_string()
            })
            .collect();
        HourKeys {
            placed: vec![Vec::new(); hours.len()],
            hours,
            partitions: 0,
        }
    }

    fn partition(&mut self, hour: u32, shard: u32, partitions: u32) -> u32 {
        if partitions != self.partitions {
            self.placed.iter_mut().for_each(Vec::clear);
            self.partitions = partitions;
        }
        let (label, placed) = (&self.hours[hour as usize], &mut self.placed[hour as usize]);
        for s in placed.len() as u32..=shard {
            placed.push(partition_of(&format!("{s}#{label}"), partitions));
        }
        placed[shard as usize]
    }
}

/// Expected hottest partition over the mean when `shards` equally loaded
/// `time_bucket` keys share `partitions` partitions (the whole stream from
/// many entities): 1.0 is perfectly even.
pub fn partition_skew(shards: u32, partitions: u32) -> f64 {
    let t = Traffic {
        hot: 0.0,
        rest: 1.0,
        others: None,
    };
    let key = KeyStrategy::TimeBucket {
        shards,
        bucket: crate::strategy::Bucket::Hour,
    };
    let s = spread(&key, &t, partitions);
    round3(s.hottest_partition * f64::from(partitions.max(1)))
}

/// Three decimals: the sampling is not finer, and a plan prints tidy numbers.
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Fewest `time_bucket` shards from `from` up (to `most`) whose
/// [`partition_skew`] on `partitions` is within `bound`: doubling, then
/// bisection (the skew falls with more keys, up to the sampling noise).
pub fn even_shards(from: u32, partitions: u32, bound: f64, most: u32) -> Option<u32> {
    let ok = |n: u32| partition_skew(n, partitions) <= bound;
    let mut lo = from.max(1);
    if ok(lo) {
        return Some(lo);
    }
    let mut hi = lo;
    loop {
        if hi >= most {
            return None;
        }
        hi = hi.saturating_mul(2).min(most);
        if ok(hi) {
            break;
        }
        lo = hi;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Bucket;

    /// The hot-partition benchmark's layout: 10 write shards on a
    /// 10-partition table landed on 7 partitions, the hottest with 22% of
    /// the items; the expected skew of that layout is as bad.
    #[test]
    fn ten_shards_on_ten_partitions_fill_them_unevenly() {
        let hour = "2026-11-22T06";
        let mut counts = [0u32; 10];
        for s in 0..10 {
            counts[partition_of(&format!("{s}#{hour}"), 10) as usize] += 1;
        }
        assert_eq!(counts.iter().filter(|&&c| c > 0).count(), 7, "{counts:?}");
        let skew = partition_skew(10, 10);
        assert!((2.2..3.5).contains(&skew), "{skew}");
        let n = even_shards(8, 10, 1.25, 4096).unwrap();
        assert!(n > 100 && n < 1000, "{n}");
        assert!(partition_skew(n, 10) <= 1.25);
        assert!(partition_skew(n - 1, 10) > 1.25, "not the fewest");
    }

    /// Many small entities spread evenly under `entity` keys; one hot
    /// entity sits on one partition whatever the strategy, but a suffix
    /// spreads it.
    #[test]
    fn a_hot_entity_lands_on_one_partition_unless_suffixed() {
        let t = Traffic {
            hot: 2000.0,
            rest: 4000.0,
            others: None,
        };
        let entity = spread(&KeyStrategy::Entity, &t, 8);
        assert!(
            (entity.hottest_partition - 2500.0).abs() < 1e-6,
            "{entity:?}"
        );
        assert_eq!(entity.hottest_key, 2000.0);
        let tb = spread(
            &KeyStrategy::TimeBucket {
                shards: 100,
                bucket: Bucket::Hour,
            },
            &t,
            8,
        );
        assert!(tb.hottest_key >= 2000.0, "{tb:?}");
        assert!(tb.hottest_partition >= 2000.0, "{tb:?}");
        let many = spread(&KeyStrategy::CalculatedSuffix { shards: 64 }, &t, 8);
        assert!((many.hottest_key - 31.25).abs() < 1e-9, "{many:?}");
        // 64 keys of 31.25 on 8 partitions: about 12 on the busiest.
        assert!(
            many.hottest_partition > 750.0 && many.hottest_partition < 1000.0,
            "{many:?}"
        );
        let few = spread(&KeyStrategy::CalculatedSuffix { shards: 4 }, &t, 8);
        assert!(few.hottest_partition > many.hottest_partition, "{few:?}");
    }

    /// A few known entities spread worse than many.
    #[test]
    fn few_entities_spread_worse_than_many() {
        let t = |others| Traffic {
            hot: 100.0,
            rest: 5900.0,
            others,
        };
        let few = spread(&KeyStrategy::Entity, &t(Some(59)), 8);
        let many = spread(&KeyStrategy::Entity, &t(None), 8);
        assert!(
            few.hottest_partition > 1.2 * many.hottest_partition,
            "{few:?} {many:?}"
        );
        let lots = spread(&KeyStrategy::Entity, &t(Some(10_000)), 8);
        assert!(
            lots.hottest_partition < 1.1 * many.hottest_partition,
            "{lots:?}"
        );
    }

    /// The placement is fixed: the same question, the same answer.
    #[test]
    fn spreads_are_deterministic() {
        let t = Traffic {
            hot: 10.0,
            rest: 990.0,
            others: Some(30),
        };
        for key in [
            KeyStrategy::Entity,
            KeyStrategy::CalculatedSuffix { shards: 7 },
            KeyStrategy::TimeBucket {
                shards: 9,
                bucket: Bucket::Hour,
            },
        ] {
            assert_eq!(spread(&key, &t, 5), spread(&key, &t, 5), "{key:?}");
        }
    }
}
