//! The receiver-count control law: pure, no I/O.
//!
//! After every round (as many receives as there are receivers), the mean
//! fill of the batches decides: mostly full (>= 80 %) adds a receiver, three
//! mostly empty (< 20 %) rounds in a row remove one (slower down than up, so
//! a burst's gaps do not make the count flap), anything between holds. A
//! round in which a
//! receiver asked for fewer than 10 messages (the in-flight bound held it
//! back) never adds one: the writer, not the queue, is the limit then.

use super::config::MAX_RECEIVE_BATCH;

/// What a receiver should do after reporting a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Keep receiving.
    Hold,
    /// Start one more receiver (the count is already raised).
    Grow,
    /// This receiver stops (the count is already lowered).
    Shrink,
}

/// Adapts the number of receivers between 1 and `max`.
#[derive(Debug, Clone)]
pub(super) struct Scaler {
    max: usize,
    active: usize,
    round_receives: usize,
    round_messages: usize,
    round_limited: bool,
    /// Consecutive sparse rounds.
    sparse_rounds: u32,
}

/// Sparse rounds in a row before a receiver is removed.
const SHRINK_AFTER: u32 = 3;

impl Scaler {
    /// Starts with one receiver.
    pub(super) fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            active: 1,
            round_receives: 0,
            round_messages: 0,
            round_limited: false,
            sparse_rounds: 0,
        }
    }

    /// Receivers that should be running.
    pub(super) fn active(&self) -> usize {
        self.active
    }

    /// Reports one receive that asked for `requested` and got `received`.
    pub(super) fn observe(&mut self, received: usize, requested: usize) -> Decision {
        self.round_receives += 1;
        self.round_messages += received;
        self.round_limited |= requested < MAX_RECEIVE_BATCH;
        if self.round_receives < self.active {
            return Decision::Hold;
        }
        let capacity = self.round_receives * MAX_RECEIVE_BATCH;
        let limited = self.round_limited;
        let messages = self.round_messages;
        self.round_receives = 0;
        self.round_messages = 0;
        self.round_limited = false;
        // Integer form of fill >= 0.8 and fill < 0.2.
        let sparse = messages * 5 < capacity;
        self.sparse_rounds = if sparse { self.sparse_rounds + 1 } else { 0 };
        if messages * 5 >= capacity * 4 && !limited && self.active < self.max {
            self.active += 1;
            Decision::Grow
        } else if self.sparse_rounds >= SHRINK_AFTER && self.active > 1 {
            self.active -= 1;
            self.sparse_rounds = 0;
            Decision::Shrink
        } else {
            Decision::Hold
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays receives of `got` messages (asked: `asked`) through a scaler and
    /// returns the receiver count after each.
    fn play(max: usize, receives: &[(usize, usize)]) -> Vec<usize> {
        let mut s = Scaler::new(max);
        receives
            .iter()
            .map(|&(got, asked)| {
                s.observe(got, asked);
                s.active()
            })
            .collect()
    }

    /// Name, max receivers, receives (got, asked), receiver count after each.
    type Scenario = (&'static str, usize, Vec<(usize, usize)>, Vec<usize>);

    #[test]
    fn scenarios() {
        let full = (10, 10);
        let empty = (0, 10);
        let half = (5, 10);
        let limited_full = (3, 3);
        let cases: Vec<Scenario> = vec![
            // Each round lasts `active` receives.
            (
                "full batches grow one per round",
                4,
                vec![full; 6],
                vec![2, 2, 3, 3, 3, 4],
            ),
            ("growth stops at max", 2, vec![full; 5], vec![2, 2, 2, 2, 2]),
            (
                "empty batches never go below one",
                4,
                vec![empty; 3],
                vec![1, 1, 1],
            ),
            (
                "half full holds",
                4,
                vec![full, half, half, half, half],
                vec![2, 2, 2, 2, 2],
            ),
            (
                // Rounds of 3 receives: three sparse rounds (9 receives) shrink.
                "three empty rounds shrink again",
                4,
                [vec![full; 3], vec![empty; 9], vec![empty; 4]].concat(),
                [vec![2, 2, 3], vec![3; 8], vec![2], vec![2; 4]].concat(),
            ),
            (
                "a full round in between resets the shrink count",
                2,
                [vec![full; 1], vec![empty; 4], vec![full; 2], vec![empty; 4]].concat(),
                [vec![2], vec![2; 4], vec![2; 2], vec![2; 4]].concat(),
            ),
            (
                "backpressure never grows",
                4,
                vec![limited_full, limited_full, limited_full],
                vec![1, 1, 1],
            ),
            (
                "one limited receive blocks the round's growth",
                4,
                vec![full, full, (9, 9)],
                vec![2, 2, 2],
            ),
        ];
        for (name, max, receives, want) in cases {
            assert_eq!(play(max, &receives), want, "{name}");
        }
    }

    #[test]
    fn decisions_match_count_changes() {
        let mut s = Scaler::new(3);
        assert_eq!(s.observe(10, 10), Decision::Grow);
        assert_eq!(s.observe(10, 10), Decision::Hold);
        assert_eq!(s.observe(10, 10), Decision::Grow);
        for _ in 0..8 {
            assert_eq!(s.observe(0, 10), Decision::Hold);
        }
        assert_eq!(s.observe(0, 10), Decision::Shrink);
        assert_eq!(s.active(), 2);
    }
}
