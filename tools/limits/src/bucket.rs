//! A token bucket driven by explicit `now`, so limits are testable in simulated time.

use std::time::Instant;

/// Tokens refill at `rate` per second up to `capacity`; a take succeeds only
/// when enough tokens are present. [`TokenBucket::charge`] may push the level
/// below zero (a debt), for costs only known after the fact (Kinesis reads).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A bucket holding `initial` tokens (clamped to `capacity`) at `now`.
    pub fn new(rate: f64, capacity: f64, initial: f64, now: Instant) -> Self {
        Self {
            rate,
            capacity,
            tokens: initial.min(capacity),
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        // Out-of-order `now` (two requests racing for the lock) must not
        // refill twice or go backwards: only move forward.
        if now > self.last {
            let dt = now.duration_since(self.last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
            self.last = now;
        }
    }

    /// Tokens available at `now` (may be negative after a [`charge`](Self::charge)).
    pub fn available(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens
    }

    /// Takes `n` tokens if at least `n` are there; returns whether it did.
    pub fn try_take(&mut self, n: f64, now: Instant) -> bool {
        self.refill(now);
        // A small epsilon absorbs float drift from many tiny refills, which
        // would otherwise throttle a request that exactly fits.
        if self.tokens + 1e-9 >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }

    /// Takes `n` tokens unconditionally, possibly leaving a debt.
    pub fn charge(&mut self, n: f64, now: Instant) {
        self.refill(now);
        self.tokens -= n;
    }

    /// Changes rate and capacity (a table's throughput was updated), keeping
    /// the tokens already earned up to the new capacity.
    pub fn reconfigure(&mut self, rate: f64, capacity: f64, now: Instant) {
        self.refill(now);
        self.rate = rate;
        self.capacity = capacity;
        self.tokens = self.tokens.min(capacity);
    }

    /// Refill rate in tokens per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Largest number of tokens the bucket holds.
    pub fn capacity(&self) -> f64 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn refills_at_rate_up_to_capacity() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 20.0, 0.0, t0);
        assert!(!b.try_take(1.0, t0));
        assert!(b.try_take(5.0, t0 + Duration::from_millis(500)));
        assert!(!b.try_take(0.5, t0 + Duration::from_millis(500)));
        // Ten idle seconds earn 100 tokens but the bucket holds only 20.
        let later = t0 + Duration::from_secs(10);
        assert!((b.available(later) - 20.0).abs() < 1e-9);
    }

    #[test]
    fn charge_leaves_debt_that_blocks_until_repaid() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(2.0, 2.0, 2.0, t0);
        b.charge(10.0, t0);
        assert!(b.available(t0) < 0.0);
        assert!(!b.try_take(0.1, t0 + Duration::from_secs(3)));
        assert!(b.try_take(0.1, t0 + Duration::from_millis(4100)));
    }

    #[test]
    fn time_going_backwards_is_ignored() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let mut b = TokenBucket::new(1.0, 1.0, 0.0, t1);
        assert!(!b.try_take(1.0, t0));
        assert!(b.try_take(1.0, t1 + Duration::from_secs(1)));
    }
}
