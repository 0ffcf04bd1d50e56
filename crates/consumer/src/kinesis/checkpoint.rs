//! The checkpoint watermark: which position a shard may be checkpointed at.
//!
//! Records of a shard are registered in stream order; each gets a serial.
//! Acknowledgements arrive in any order. The checkpoint is the position of the
//! last record before the oldest one still unacknowledged, so it never passes
//! a record that is not stored or dead-lettered. [`Watermark`] is the pure law;
//! [`AckTracker`] wraps it for sharing with [`Ack`](crate::Ack) handles and
//! lets the reader wait for room (backpressure) or for the shard to drain.
//! Both also measure the [`CheckpointLag`]: records read that the last
//! *written* checkpoint does not cover, and how long ago the oldest of them
//! was read (a checkpoint that stands still shows as a growing lag even
//! while the reader is at the stream's tip).

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidemark_schema::SharedStr;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::record::AckTarget;

/// A Kinesis sequence number (up to 56 decimal digits, more than `u128`
/// holds), ordered numerically.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SequenceNumber(pub SharedStr);

impl SequenceNumber {
    /// The digits without leading zeros, for numeric comparison.
    fn digits(&self) -> &str {
        let t = self.0.trim_start_matches('0');
        if t.is_empty() { "0" } else { t }
    }

    /// The sequence number as Kinesis spells it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SequenceNumber {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.digits(), other.digits());
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A user record's position in a shard: (sequence, sub-sequence), the KCL's
/// "extended sequence number".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Position {
    /// Sequence number of the Kinesis record.
    pub sequence: SequenceNumber,
    /// Index within a KPL aggregate; 0 for plain records.
    pub sub_sequence: u64,
}

impl Position {
    /// A position from its parts.
    pub fn new(sequence: impl Into<SharedStr>, sub_sequence: u64) -> Self {
        Self {
            sequence: SequenceNumber(sequence.into()),
            sub_sequence,
        }
    }
}

/// A position registered out of order (a reader bug, reported not hidden).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("position {new:?} registered after {last:?}: positions must increase")]
pub struct OutOfOrder {
    /// The last registered position.
    pub last: Position,
    /// The rejected one.
    pub new: Position,
}

/// The pure watermark tracker of one shard.
#[derive(Debug, Default, Clone)]
pub(crate) struct Watermark {
    /// Serial of `entries[0]`.
    front_serial: u64,
    /// In-flight positions in registration order, with their acked flag
    /// and the bytes their records hold.
    entries: VecDeque<(Position, bool, u64)>,
    /// Sum of the entries' bytes.
    bytes: u64,
    /// Last registered position (even if already acknowledged and popped).
    last: Option<Position>,
    /// Highest position below which everything is acknowledged.
    checkpoint: Option<Position>,
    /// Where the checkpoint moved to, with how many records it covered
    /// then; kept until a written checkpoint passes them, so a written
    /// position tells how many records it covers.
    marks: VecDeque<(Position, u64)>,
    /// Records the last written checkpoint covers.
    written: u64,
    /// When records were read: (serial, instant) samples at most one per
    /// [`READ_SAMPLE_EVERY`], from the one before the oldest record the
    /// written checkpoint does not cover.
    reads: VecDeque<(u64, Instant)>,
}

/// Most checkpoint marks kept: past it, the latest replaces the last (a
/// written position between marks then counts from the mark below it:
/// the lag is overstated, never hidden).
const MAX_MARKS: usize = 1024;
/// Most read samples kept: past it, every other one is dropped (coarser,
/// still never later than the truth).
const MAX_READS: usize = 4096;
/// The resolution of the checkpoint lag's age.
const READ_SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// How far a shard's written checkpoint is behind what was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckpointLag {
    /// Records read that the written checkpoint does not cover.
    pub records: u64,
    /// How long ago the oldest of them was read (zero when none).
    pub age: Duration,
}

impl Watermark {
    /// An empty tracker.
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Registers the next record (positions must strictly increase) and
    /// returns its serial.
    pub(crate) fn push(&mut self, position: Position) -> Result<u64, OutOfOrder> {
        if let Some(last) = &self.last
            && position <= *last
        {
            return Err(OutOfOrder {
                last: last.clone(),
                new: position,
            });
        }
        let serial = self.front_serial + self.entries.len() as u64;
        self.last = Some(position.clone());
        self.entries.push_back((position, false, 0));
        Ok(serial)
    }

    /// Marks `serial` acknowledged. Returns true when this moved the
    /// checkpoint. Unknown or repeated serials are ignored.
    pub(crate) fn ack(&mut self, serial: u64) -> bool {
        let Some(idx) = serial.checked_sub(self.front_serial) else {
            return false;
        };
        let Some(entry) = usize::try_from(idx)
            .ok()
            .and_then(|i| self.entries.get_mut(i))
        else {
            return false;
        };
        entry.1 = true;
        let mut moved = false;
        while self.entries.front().is_some_and(|e| e.1) {
            if let Some((pos, _, bytes)) = self.entries.pop_front() {
                self.bytes -= bytes;
                self.checkpoint = Some(pos);
                self.front_serial += 1;
                moved = true;
            }
        }
        if moved && let Some(pos) = &self.checkpoint {
            if self.marks.len() >= MAX_MARKS {
                self.marks.pop_back();
            }
            self.marks.push_back((pos.clone(), self.front_serial));
        }
        moved
    }

    /// Adds `bytes` (what the records of `serial` hold in memory) to the
    /// in-flight bytes until the checkpoint covers it; a serial already
    /// covered is ignored.
    pub(crate) fn add_bytes(&mut self, serial: u64, bytes: u64) {
        let entry = serial
            .checked_sub(self.front_serial)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.entries.get_mut(i));
        if let Some(entry) = entry {
            entry.2 += bytes;
            self.bytes += bytes;
        }
    }

    /// Bytes held by the records not yet covered by the checkpoint.
    #[cfg(test)]
    pub(crate) fn in_flight_bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether a shard bounded at `max` records and `max_bytes` bytes in
    /// flight may read more.
    pub(crate) fn has_room(&self, max: usize, max_bytes: usize) -> bool {
        self.in_flight() < max && self.bytes < max_bytes as u64
    }

    /// Records registered since the tracker started.
    fn registered(&self) -> u64 {
        self.front_serial + self.entries.len() as u64
    }

    /// Notes that record `serial` was read `at`.
    fn note_read(&mut self, serial: u64, at: Instant) {
        if self
            .reads
            .back()
            .is_some_and(|(_, last)| at.saturating_duration_since(*last) < READ_SAMPLE_EVERY)
        {
            return;
        }
        if self.reads.len() >= MAX_READS {
            let mut i = 0;
            // Keeps the front (the oldest uncovered read) and every other.
            self.reads.retain(|_| {
                i += 1;
                i % 2 == 1
            });
        }
        self.reads.push_back((serial, at));
    }

    /// A checkpoint was written at `upto` (`None`: the shard's end, which
    /// covers every record read).
    pub(crate) fn written(&mut self, upto: Option<&Position>) {
        let covered = match upto {
            None => self.registered(),
            Some(p) => {
                let mut covered = self.written;
                while self.marks.front().is_some_and(|(m, _)| m <= p) {
                    if let Some((_, n)) = self.marks.pop_front() {
                        covered = covered.max(n);
                    }
                }
                covered
            }
        };
        self.written = covered;
        // The sample at or before the first uncovered record stays.
        while self.reads.get(1).is_some_and(|(s, _)| *s <= covered) {
            self.reads.pop_front();
        }
    }

    /// The checkpoint lag at `now`.
    pub(crate) fn lag(&self, now: Instant) -> CheckpointLag {
        let records = self.registered().saturating_sub(self.written);
        let age = match self.reads.front() {
            Some((_, at)) if records > 0 => now.saturating_duration_since(*at),
            _ => Duration::ZERO,
        };
        CheckpointLag { records, age }
    }

    /// The position a checkpoint may be written at, if any record is done.
    pub(crate) fn checkpoint(&self) -> Option<&Position> {
        self.checkpoint.as_ref()
    }

    /// Records registered and not yet covered by the checkpoint.
    pub(crate) fn in_flight(&self) -> usize {
        self.entries.len()
    }

    /// How many records, counted from the first registered, are
    /// acknowledged without a gap (every serial below it is done).
    pub(crate) fn acked_prefix(&self) -> u64 {
        self.front_serial
    }
}

/// The shard's watermark, shared between a reader and the `Ack`s it
/// handed out.
#[derive(Debug, Default)]
pub struct AckTracker {
    inner: Mutex<Watermark>,
    changed: Notify,
}

impl AckTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Watermark> {
        // A panic while holding this lock leaves a consistent watermark (every
        // method finishes its update before it can panic), so poisoning is moot.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the next record (positions must strictly increase) and
    /// returns its serial.
    pub fn push(&self, position: Position) -> Result<u64, OutOfOrder> {
        let mut w = self.lock();
        let serial = w.push(position)?;
        w.note_read(serial, Instant::now());
        Ok(serial)
    }

    /// Records that a checkpoint was written at `upto` (`None`: the
    /// shard's end).
    pub(crate) fn written(&self, upto: Option<&Position>) {
        self.lock().written(upto);
    }

    /// How far the written checkpoint is behind what was read, now.
    pub fn checkpoint_lag(&self) -> CheckpointLag {
        self.lock().lag(Instant::now())
    }

    /// The current checkpoint position.
    pub fn checkpoint(&self) -> Option<Position> {
        self.lock().checkpoint().cloned()
    }

    /// Records in flight.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight()
    }

    /// See [`Watermark::add_bytes`].
    pub(crate) fn add_bytes(&self, serial: u64, bytes: u64) {
        self.lock().add_bytes(serial, bytes);
    }

    /// See [`Watermark::has_room`].
    pub(crate) fn has_room(&self, max: usize, max_bytes: usize) -> bool {
        self.lock().has_room(max, max_bytes)
    }

    /// Waits until every registered record is acknowledged.
    pub async fn drained(&self) {
        self.wait_for(|w| w.in_flight() == 0).await;
    }

    /// Waits until `pred` holds for the watermark.
    pub(crate) async fn wait_for(&self, pred: impl Fn(&Watermark) -> bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registering before the check means an ack in between still wakes us.
            notified.as_mut().enable();
            if pred(&self.lock()) {
                return;
            }
            notified.await;
        }
    }
}

impl AckTarget for AckTracker {
    fn ack(&self, serial: u64) {
        self.ack_many(&[serial]);
    }

    fn ack_many(&self, serials: &[u64]) {
        let moved = {
            let mut w = self.lock();
            serials.iter().fold(false, |moved, s| w.ack(*s) | moved)
        };
        if moved {
            self.changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pos(seq: u64, sub: u64) -> Position {
        Position::new(seq.to_string(), sub)
    }

    #[test]
    fn sequence_numbers_compare_numerically() {
        let a = SequenceNumber::from("9");
        let b = SequenceNumber::from("10");
        assert!(a < b, "9 < 10 although \"9\" > \"10\" as strings");
        let long_a =
            SequenceNumber::from("49590338271490256608559692538361571095921575989136588898");
        let long_b =
            SequenceNumber::from("49590338271490256608559692540925702759324208523137515618");
        assert!(long_a < long_b);
        assert_eq!(
            SequenceNumber::from("007").cmp(&SequenceNumber::from("7")),
            Ordering::Equal
        );
        assert!(Position::new("10", 0) > Position::new("9", 5));
        assert!(Position::new("10", 1) > Position::new("10", 0));
    }

    #[test]
    fn checkpoint_stops_before_the_oldest_unacked() {
        let mut w = Watermark::new();
        let s: Vec<u64> = (1..=4).map(|i| w.push(pos(i, 0)).unwrap()).collect();
        assert_eq!(w.checkpoint(), None);
        assert!(
            !w.ack(s[1]),
            "ack of the second record cannot move past the first"
        );
        assert_eq!(w.checkpoint(), None);
        assert!(w.ack(s[0]));
        assert_eq!(w.checkpoint(), Some(&pos(2, 0)));
        assert_eq!(w.in_flight(), 2);
        assert!(!w.ack(s[0]), "a repeated ack changes nothing");
        assert!(w.ack(s[2]));
        assert_eq!(w.checkpoint(), Some(&pos(3, 0)));
        assert!(!w.ack(99), "unknown serial ignored");
        assert_eq!(w.in_flight(), 1);
        // Three records acknowledged without a gap; the fourth (say, a batch
        // never handed on at shutdown) is all that is in flight.
        assert_eq!(w.acked_prefix(), 3);
    }

    #[test]
    fn the_checkpoint_lag_counts_from_the_written_checkpoint_not_the_acknowledged_one() {
        let t0 = Instant::now();
        let mut w = Watermark::new();
        let read = |w: &mut Watermark, seq: u64, secs: u64| {
            let serial = w.push(pos(seq, 0)).unwrap();
            w.note_read(serial, t0 + Duration::from_secs(secs));
            serial
        };
        let s: Vec<u64> = (1..=5).map(|i| read(&mut w, i, i)).collect();
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(w.lag(at(10)).records, 5);
        assert_eq!(w.lag(at(10)).age, Duration::from_secs(9), "read at 1 s");
        // Acknowledged is not checkpointed: the lag stands.
        w.ack(s[0]);
        w.ack(s[1]);
        w.ack(s[2]);
        assert_eq!(w.lag(at(10)).records, 5);
        // A checkpoint written at the second record (the renewer read the
        // watermark before the third was acknowledged).
        w.written(Some(&pos(2, 0)));
        let lag = w.lag(at(10));
        assert_eq!(lag.records, 3);
        assert_eq!(lag.age, Duration::from_secs(7), "the third was read at 3 s");
        w.written(Some(&pos(3, 0)));
        assert_eq!(w.lag(at(10)).records, 2);
        // A stale write changes nothing.
        w.written(Some(&pos(1, 0)));
        assert_eq!(w.lag(at(10)).records, 2);
        w.written(None);
        assert_eq!(
            w.lag(at(20)),
            CheckpointLag::default(),
            "shard end covers all"
        );
    }

    #[test]
    fn out_of_order_push_is_rejected() {
        let mut w = Watermark::new();
        w.push(pos(5, 1)).unwrap();
        assert!(w.push(pos(5, 1)).is_err());
        assert!(w.push(pos(5, 0)).is_err());
        assert!(w.push(pos(5, 2)).is_ok());
    }

    #[test]
    fn dropped_ack_holds_the_checkpoint() {
        let tracker = std::sync::Arc::new(AckTracker::new());
        let target: std::sync::Arc<dyn AckTarget> = tracker.clone();
        let a = crate::Ack::new(target.clone(), tracker.push(pos(1, 0)).unwrap());
        let b = crate::Ack::new(target, tracker.push(pos(2, 0)).unwrap());
        drop(a);
        b.done();
        assert_eq!(tracker.checkpoint(), None);
        assert_eq!(tracker.in_flight(), 2);
    }

    #[test]
    fn bytes_count_until_the_checkpoint_covers_them() {
        let mut w = Watermark::new();
        let a = w.push(pos(1, 0)).unwrap();
        let b = w.push(pos(2, 0)).unwrap();
        w.add_bytes(a, 600);
        w.add_bytes(b, 500);
        assert_eq!(w.in_flight_bytes(), 1100);
        assert!(w.has_room(3, 1101));
        assert!(!w.has_room(3, 1100));
        assert!(!w.has_room(2, 2000));
        // Acknowledged behind an unacknowledged one: still held.
        w.ack(b);
        assert_eq!(w.in_flight_bytes(), 1100);
        w.ack(a);
        assert_eq!(w.in_flight_bytes(), 0);
        // A serial already covered adds nothing.
        w.add_bytes(a, 10);
        assert_eq!(w.in_flight_bytes(), 0);
    }

    #[tokio::test]
    async fn wait_for_wakes_on_ack() {
        let tracker = std::sync::Arc::new(AckTracker::new());
        let serial = tracker.push(pos(1, 0)).unwrap();
        let t2 = tracker.clone();
        let waiter = tokio::spawn(async move { t2.wait_for(|w| w.in_flight() == 0).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        tracker.ack(serial);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("waiter woke")
            .unwrap();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u64),
        Ack(prop::sample::Index),
        Unknown(u64),
    }

    proptest! {
        /// Acks in any order: the checkpoint is always exactly the last
        /// position of the longest fully-acked prefix, never past a gap.
        #[test]
        fn never_passes_an_unacked_record(
            n in 1usize..200,
            order in proptest::collection::vec(any::<prop::sample::Index>(), 0..200),
            subs in proptest::collection::vec(0u64..3, 200),
        ) {
            let mut w = Watermark::new();
            let mut positions = Vec::new();
            let mut seq = 100u64;
            for sub in subs.iter().take(n) {
                seq += 1 + sub;
                let p = Position::new(seq.to_string(), *sub);
                positions.push(p.clone());
                w.push(p).unwrap();
            }
            let mut acked = vec![false; n];
            for idx in order {
                let i = idx.index(n);
                w.ack(i as u64);
                acked[i] = true;
                let prefix = acked.iter().take_while(|a| **a).count();
                let expected = prefix.checked_sub(1).map(|j| &positions[j]);
                prop_assert_eq!(w.checkpoint(), expected);
                prop_assert_eq!(w.in_flight(), n - prefix);
                if let Some(cp) = w.checkpoint() {
                    for (j, p) in positions.iter().enumerate() {
                        if !acked[j] { prop_assert!(p > cp); }
                    }
                }
            }
        }

        /// Checkpoints written at any watermark seen so far (late ones
        /// included), many more moves than marks kept: the lag in records
        /// is never below the truth, and exact while the marks suffice.
        #[test]
        fn the_checkpoint_lag_is_never_understated(
            n in 1usize..3000,
            writes in proptest::collection::vec(any::<prop::sample::Index>(), 1..50),
        ) {
            let mut w = Watermark::new();
            let mut seen = Vec::new();
            for i in 0..n {
                let s = w.push(pos(i as u64 + 1, 0)).unwrap();
                w.ack(s);
                seen.push(w.checkpoint().cloned());
            }
            let mut truth = 0u64;
            for acked in writes {
                // Written at a watermark seen when `acked` records were done.
                let k = acked.index(n);
                if let Some(p) = seen[k].clone() {
                    w.written(Some(&p));
                    truth = truth.max(k as u64 + 1);
                }
                let lag = w.lag(Instant::now()).records;
                prop_assert!(lag >= n as u64 - truth, "lag {lag} below {}", n as u64 - truth);
                if n < MAX_MARKS {
                    prop_assert_eq!(lag, n as u64 - truth);
                }
            }
        }

        /// Records keep arriving while others are acknowledged (as a live
        /// shard does), acks repeat and name unknown serials: the checkpoint
        /// only moves forward, never reaches an unacknowledged record, and
        /// covers everything once all is acknowledged.
        #[test]
        fn interleaved_pushes_and_acks_never_pass_a_gap(
            ops in proptest::collection::vec(
                prop_oneof![
                    2 => (0u64..3).prop_map(Op::Push),
                    3 => any::<prop::sample::Index>().prop_map(Op::Ack),
                    1 => (1000u64..2000).prop_map(Op::Unknown),
                ],
                0..400,
            ),
        ) {
            let mut w = Watermark::new();
            let mut positions: Vec<(Position, u64, bool)> = Vec::new();
            let mut seq = 500u64;
            let mut last: Option<Position> = None;
            for op in ops {
                match op {
                    Op::Push(sub) => {
                        seq += 1 + sub;
                        let p = Position::new(seq.to_string(), sub);
                        let serial = w.push(p.clone()).unwrap();
                        positions.push((p, serial, false));
                    }
                    Op::Ack(idx) if !positions.is_empty() => {
                        let i = idx.index(positions.len());
                        w.ack(positions[i].1);
                        positions[i].2 = true;
                    }
                    Op::Ack(_) => {}
                    Op::Unknown(serial) => { w.ack(serial); }
                }
                let cp = w.checkpoint().cloned();
                if let Some(cp) = &cp {
                    for (p, _, acked) in &positions {
                        if !acked { prop_assert!(p > cp, "checkpoint {cp:?} passed unacked {p:?}"); }
                    }
                }
                prop_assert!(cp >= last, "checkpoint went back from {last:?} to {cp:?}");
                last = cp;
            }
            for (_, serial, _) in &positions { w.ack(*serial); }
            prop_assert_eq!(w.checkpoint(), positions.last().map(|(p, _, _)| p));
            prop_assert_eq!(w.in_flight(), 0);
        }
    }

    /// Counts the calls an ack target gets.
    #[derive(Default)]
    struct Calls(Mutex<Vec<Vec<u64>>>);

    impl AckTarget for Calls {
        fn ack(&self, serial: u64) {
            self.ack_many(&[serial]);
        }
        fn ack_many(&self, serials: &[u64]) {
            self.0.lock().unwrap().push(serials.to_vec());
        }
    }

    #[test]
    fn done_all_reports_each_run_of_one_target_in_one_call() {
        use crate::record::Ack;
        use std::sync::Arc;
        let (a, b) = (Arc::new(Calls::default()), Arc::new(Calls::default()));
        let ack = |t: &Arc<Calls>, s| Ack::new(t.clone(), s);
        Ack::done_all(vec![ack(&a, 1), ack(&a, 2), ack(&b, 7), ack(&a, 3)]);
        assert_eq!(*a.0.lock().unwrap(), vec![vec![1, 2], vec![3]]);
        assert_eq!(*b.0.lock().unwrap(), vec![vec![7]]);
    }

    #[tokio::test]
    async fn ack_many_moves_the_checkpoint_and_wakes_a_waiter() {
        use std::sync::Arc;
        let t = Arc::new(AckTracker::new());
        let s: Vec<u64> = (1..=3).map(|i| t.push(pos(i, 0)).unwrap()).collect();
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move { t.wait_for(|w| w.in_flight() == 0).await })
        };
        t.ack_many(&[s[2], s[0]]);
        assert_eq!(t.checkpoint(), Some(pos(1, 0)), "stops before serial 1");
        assert!(!waiter.is_finished());
        t.ack_many(&[s[1]]);
        assert_eq!(t.checkpoint(), Some(pos(3, 0)));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the waiter is woken")
            .unwrap();
    }
}
