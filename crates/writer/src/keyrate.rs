//! Per-key pacing: the pure control law for hot partition keys. No I/O,
//! driven by `now` and call results, like [`crate::rate`].
//!
//! DynamoDB serves at most 1,000 WCU/s per partition, and a partition key
//! lives on one partition. When one key is hot, its throttles must not slow
//! the whole table: the table's own controller (token bucket, AIMD, adaptive
//! concurrency) keeps pacing every other key at the table's rate, and only
//! the items of throttled keys are held back here.
//!
//! - **Which keys**: a key gets a state the first time one of its items is
//!   throttled (returned in UnprocessedItems, or in a call refused with
//!   `ProvisionedThroughputExceededException`). Keys without a state cost one
//!   hash lookup and pass freely.
//! - **Per key**: a token bucket at the key's own rate, AIMD on that rate
//!   (start at half of `max_key_wcu`, ×`decrease_factor` or down to what the
//!   key was accepted at on a throttle, `+increase × max_key_wcu` per second
//!   while the key's bucket is what holds it back, never above
//!   `max_key_wcu`: one partition's limit), and an exponential back-off with
//!   jitter after each throttle. Feedback from calls sent before the last cut
//!   is ignored (one overshoot costs one cut).
//! - **Key range or table**: DynamoDB's `ThrottlingReasons` decide when the
//!   answer carries them (`…KeyRangeThroughputExceeded` is a key range;
//!   `…ProvisionedThroughputExceeded`, `…AccountLimitExceeded`,
//!   `…MaxOnDemandThroughputExceeded` are the table). UnprocessedItems carry
//!   no reason: the throttle is taken as the table's when the table is
//!   saturated (accepting ≥ 97% of its capacity, as the table's
//!   controller measures it), when more than
//!   `table_share` of the items of keys *without* a state were throttled over
//!   the last `share_window` (a full table throttles every key; a hot
//!   partition only its own), or when the key table is full. A table-level
//!   throttle is also charged to the keys, so a misjudged one still paces
//!   them.
//! - **Neighbours**: a key range's throttle falls on whichever items reach it
//!   once its capacity is spent, not on the key that spent it. When a light
//!   key (one its own budget was not holding back) is throttled, the keys of
//!   the same call that were pushing at their budget are cut as well (no
//!   back-off for them): otherwise, if the hot key's items happened to be
//!   charged first, only its neighbours were cut and it grew to a whole
//!   partition (`scenarios`: 9% throttled calls instead of 0.1%).
//! - **Bounded**: at most `max_keys` states; a state expires after
//!   `idle_expiry` without a throttle and without holding its key back; when
//!   full, the key throttled longest ago is evicted.

// foldhash: one lookup per item sent on this path, as in `batch`.
use foldhash::{HashMap, HashMapExt};
use std::time::{Duration, Instant};

/// Tuning of the per-key law; the defaults are what the scenario tests run.
#[derive(Debug, Clone)]
pub(crate) struct KeyParams {
    /// Highest rate of one key, WCU/s (one partition: 1,000).
    pub max_key_wcu: f64,
    /// Lowest rate of one key, WCU/s.
    pub min_key_wcu: f64,
    /// A new state's rate, as a fraction of `max_key_wcu`.
    pub initial_fraction: f64,
    /// Multiplicative decrease on a throttle.
    pub decrease_factor: f64,
    /// Additive increase per second, as a fraction of `max_key_wcu`.
    pub increase: f64,
    /// Depth of a key's bucket, as seconds of its rate.
    pub burst: Duration,
    /// First back-off after a throttle (before jitter).
    pub backoff_base: Duration,
    /// Longest back-off (before jitter).
    pub backoff_cap: Duration,
    /// A state idle this long (no throttle, key not held) is forgotten.
    pub idle_expiry: Duration,
    /// Most keys with a state.
    pub max_keys: usize,
    /// Share of untracked keys' WCU throttled beyond which an unexplained
    /// throttle is the table's.
    pub table_share: f64,
    /// Time constant of that share and of each key's accepted rate.
    pub share_window: Duration,
}

impl Default for KeyParams {
    fn default() -> Self {
        KeyParams {
            max_key_wcu: 1_000.0,
            min_key_wcu: 1.0,
            initial_fraction: 0.5,
            decrease_factor: 0.7,
            increase: 0.05,
            burst: Duration::from_millis(100),
            backoff_base: Duration::from_millis(20),
            backoff_cap: Duration::from_secs(1),
            idle_expiry: Duration::from_secs(10),
            max_keys: 10_000,
            table_share: 0.05,
            share_window: Duration::from_secs(1),
        }
    }
}

/// What a throttle said about its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `ThrottlingReasons` named a key range (a hot partition).
    KeyRange,
    /// `ThrottlingReasons` named the table's (or an index's) capacity.
    Table,
    /// No reason given (UnprocessedItems, or an older answer).
    Unknown,
}

impl Scope {
    /// The scope of DynamoDB's `ThrottlingReasons[].reason` values
    /// (`ResourceType + OperationType + LimitType`, e.g.
    /// `TableWriteKeyRangeThroughputExceeded`): key range only if every
    /// reason is one.
    pub(crate) fn of_reasons<'a>(reasons: impl IntoIterator<Item = &'a str>) -> Scope {
        let mut scope = Scope::Unknown;
        for r in reasons {
            if r.ends_with("KeyRangeThroughputExceeded") {
                if scope == Scope::Unknown {
                    scope = Scope::KeyRange;
                }
            } else if r.ends_with("ThroughputExceeded") || r.ends_with("LimitExceeded") {
                scope = Scope::Table;
            }
        }
        scope
    }
}

/// May an item of a key go now?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Yes (its cost was charged to the key).
    Go,
    /// Not before this instant.
    Held(Instant),
}

/// One item of a finished call, as the law needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ItemResult {
    /// The partition key's hash.
    pub key: u64,
    /// Its estimated WCU.
    pub wcu: f64,
    /// Stored (false: throttled).
    pub stored: bool,
}

#[derive(Debug, Clone)]
struct KeyState {
    rate: f64,
    tokens: f64,
    last_refill: Instant,
    hold_until: Instant,
    backoff_exp: u32,
    last_throttle: Instant,
    last_cut: Instant,
    last_held: Option<Instant>,
    /// Since when the key has been held back without a pause of over a
    /// second.
    held_since: Option<Instant>,
    last_increase: Instant,
    /// Accepted WCU/s, exponentially weighted.
    accepted: f64,
    accepted_at: Instant,
    created: Instant,
}

/// Per-key states of one table. See the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct KeyPacer {
    p: KeyParams,
    keys: HashMap<u64, KeyState>,
    untracked_sent: f64,
    untracked_throttled: f64,
    share_at: Instant,
}

fn decay(dt: Duration, tau: Duration) -> f64 {
    (-dt.as_secs_f64() / tau.as_secs_f64().max(1e-3)).exp()
}

impl KeyState {
    fn refill(&mut self, now: Instant, burst: Duration) {
        let dt = now
            .saturating_duration_since(self.last_refill)
            .as_secs_f64();
        self.last_refill = now;
        let depth = (self.rate * burst.as_secs_f64()).max(1.0);
        self.tokens = (self.tokens + self.rate * dt).min(depth);
    }

    /// Held back at `now`: `held_since` starts anew after a pause of over
    /// a second.
    fn held(&mut self, now: Instant) {
        let paused = self
            .last_held
            .is_none_or(|h| now.saturating_duration_since(h) > Duration::from_secs(1));
        if paused {
            self.held_since = Some(now);
        }
        self.last_held = Some(now);
    }

    fn accepted_now(&self, now: Instant, tau: Duration) -> f64 {
        self.accepted * decay(now.saturating_duration_since(self.accepted_at), tau)
    }

    /// Multiplicative decrease, and no higher than the rate the key was
    /// accepted at once it has a window's history.
    fn cut(&mut self, p: &KeyParams, now: Instant) {
        let mut next = self.rate * p.decrease_factor;
        if now.saturating_duration_since(self.created) >= p.share_window {
            next = next.min(self.accepted_now(now, p.share_window));
        }
        self.rate = next.max(p.min_key_wcu);
        self.last_cut = now;
        self.last_increase = now;
    }

    fn accept(&mut self, wcu: f64, now: Instant, tau: Duration) {
        self.accepted = self.accepted_now(now, tau) + wcu / tau.as_secs_f64().max(1e-3);
        self.accepted_at = now;
    }
}

impl KeyPacer {
    pub(crate) fn new(p: KeyParams, now: Instant) -> Self {
        KeyPacer {
            p,
            keys: HashMap::new(),
            untracked_sent: 0.0,
            untracked_throttled: 0.0,
            share_at: now,
        }
    }

    /// Keys with a state.
    pub(crate) fn tracked(&self) -> usize {
        self.keys.len()
    }

    /// Is `key` paced (has a state)?
    #[cfg(test)]
    pub(crate) fn is_paced(&self, key: u64) -> bool {
        self.keys.contains_key(&key)
    }

    /// The planned rate of a tracked key, WCU/s.
    #[cfg(test)]
    pub(crate) fn key_rate(&self, key: u64) -> Option<f64> {
        self.keys.get(&key).map(|k| k.rate)
    }

    /// Keys held back by their own budget without a pause (of over a
    /// second) and accepted at half of `max_key_wcu` or more (a partition
    /// serves a key at up to its limit; the accepted rate is an average
    /// that lags behind): (key, held for, accepted WCU/s). Keys held back
    /// at a lower rate (a table-wide throttle charged to them) are not
    /// named: more keys would not help them.
    pub(crate) fn held_at_limit(&self, now: Instant) -> Vec<(u64, Duration, f64)> {
        let tau = self.p.share_window;
        let floor = 0.5 * self.p.max_key_wcu;
        self.keys
            .iter()
            .filter(|(k, _)| self.bound(**k, now))
            .filter_map(|(k, s)| {
                let accepted = s.accepted_now(now, tau);
                let since = s.held_since?;
                (accepted >= floor).then(|| (*k, now.saturating_duration_since(since), accepted))
            })
            .collect()
    }

    /// May an item of `key` costing `wcu` go at `now`? On [`Gate::Go`] its
    /// cost is charged (the bucket may go below zero, as the table's does).
    pub(crate) fn admit(&mut self, key: u64, wcu: f64, now: Instant) -> Gate {
        let Some(k) = self.keys.get_mut(&key) else {
            return Gate::Go;
        };
        if now < k.hold_until {
            k.held(now);
            return Gate::Held(k.hold_until);
        }
        k.refill(now, self.p.burst);
        if k.tokens < 0.0 {
            k.held(now);
            // At least 1 ms: timers are that coarse.
            let wait = Duration::from_secs_f64(-k.tokens / k.rate).max(Duration::from_millis(1));
            return Gate::Held(now + wait);
        }
        k.tokens -= wcu;
        Gate::Go
    }

    /// When `key` may go again (`None`: now, or it has no state). Charges nothing.
    pub(crate) fn ready_at(&mut self, key: u64, now: Instant) -> Option<Instant> {
        let k = self.keys.get_mut(&key)?;
        if now < k.hold_until {
            return Some(k.hold_until);
        }
        k.refill(now, self.p.burst);
        (k.tokens < 0.0).then(|| {
            now + Duration::from_secs_f64(-k.tokens / k.rate).max(Duration::from_millis(1))
        })
    }

    /// A call sent at `sent_at` ended at `now` with these items. `scope`:
    /// what the answer said about a throttle; `table_saturated`: the table
    /// accepted nearly all of its capacity lately; `jitter` in
    /// [0, 1) scales each back-off (full jitter). Returns whether the table's
    /// own controller must treat the call as throttled.
    pub(crate) fn on_result(
        &mut self,
        sent_at: Instant,
        items: &[ItemResult],
        scope: Scope,
        table_saturated: bool,
        now: Instant,
        jitter: f64,
    ) -> bool {
        let d = decay(
            now.saturating_duration_since(self.share_at),
            self.p.share_window,
        );
        self.share_at = now;
        self.untracked_sent *= d;
        self.untracked_throttled *= d;
        let mut any_throttled = false;
        for it in items {
            if !self.keys.contains_key(&it.key) {
                self.untracked_sent += it.wcu;
                if !it.stored {
                    self.untracked_throttled += it.wcu;
                }
            }
            any_throttled |= !it.stored;
        }
        if !any_throttled {
            for it in items {
                self.stored(it.key, it.wcu, now);
            }
            return false;
        }
        let share = self.untracked_throttled / self.untracked_sent.max(1e-9);
        let table = match scope {
            Scope::Table => true,
            Scope::KeyRange => false,
            Scope::Unknown => {
                table_saturated || share > self.p.table_share || self.keys.len() >= self.p.max_keys
            }
        };
        // A key range's throttle falls on whichever items reach it once its
        // capacity is spent, not on the key that spent it. A throttled key
        // its own budget was not holding back (a light neighbour) is a
        // victim: the keys that were pushing at their budget in the same call
        // are the likely cause and are cut too, so the outcome does not hinge
        // on the order in which the server charges a request's items.
        let victims = scope != Scope::Table
            && items
                .iter()
                .any(|it| !it.stored && !self.bound(it.key, now));
        // Each throttled key is cut once per call, however many of its items
        // came back.
        let mut cut: Vec<u64> = Vec::new();
        for it in items {
            if it.stored {
                if victims && self.bound(it.key, now) {
                    if !cut.contains(&it.key) {
                        cut.push(it.key);
                        self.cut(it.key, sent_at, now);
                    }
                    if let Some(k) = self.keys.get_mut(&it.key) {
                        k.accept(it.wcu, now, self.p.share_window);
                    }
                } else {
                    self.stored(it.key, it.wcu, now);
                }
            } else if scope != Scope::Table && !cut.contains(&it.key) {
                cut.push(it.key);
                self.throttled(it.key, sent_at, now, jitter);
            }
        }
        table
    }

    /// Is `key` held back by its own budget lately (pushing at its rate)?
    fn bound(&self, key: u64, now: Instant) -> bool {
        self.keys.get(&key).is_some_and(|k| {
            k.last_held
                .is_some_and(|h| now.saturating_duration_since(h) <= Duration::from_secs(1))
        })
    }

    /// Cuts a bound key's rate as a throttle would, without a back-off: its
    /// items were stored, a neighbour's were throttled.
    fn cut(&mut self, key: u64, sent_at: Instant, now: Instant) {
        let p = &self.p;
        let Some(k) = self.keys.get_mut(&key) else {
            return;
        };
        if sent_at >= k.last_cut {
            k.cut(p, now);
        }
    }

    fn stored(&mut self, key: u64, wcu: f64, now: Instant) {
        let Some(k) = self.keys.get_mut(&key) else {
            return;
        };
        k.accept(wcu, now, self.p.share_window);
        k.backoff_exp = 0;
        let dt = now
            .saturating_duration_since(k.last_increase)
            .min(Duration::from_secs(1))
            .as_secs_f64();
        k.last_increase = now;
        // Grow only while the key's own bucket holds it back: a rate the key
        // does not use proves nothing about its partition.
        let bound = k
            .last_held
            .is_some_and(|h| now.saturating_duration_since(h) <= Duration::from_secs(1));
        if bound {
            k.rate = (k.rate + self.p.increase * self.p.max_key_wcu * dt).min(self.p.max_key_wcu);
        }
    }

    fn throttled(&mut self, key: u64, sent_at: Instant, now: Instant, jitter: f64) {
        let new = !self.keys.contains_key(&key);
        if new {
            if self.keys.len() >= self.p.max_keys {
                self.evict_one();
            }
            let rate = (self.p.max_key_wcu * self.p.initial_fraction).max(self.p.min_key_wcu);
            self.keys.insert(
                key,
                KeyState {
                    rate,
                    tokens: 0.0,
                    last_refill: now,
                    hold_until: now,
                    backoff_exp: 0,
                    last_throttle: now,
                    last_cut: now,
                    last_held: None,
                    held_since: None,
                    last_increase: now,
                    accepted: 0.0,
                    accepted_at: now,
                    created: now,
                },
            );
        }
        let p = &self.p;
        let Some(k) = self.keys.get_mut(&key) else {
            return;
        };
        k.last_throttle = now;
        // Feedback from calls sent before the last cut is stale: the rate
        // already fell and the key already waits; one overshoot, one penalty.
        if !new && sent_at < k.last_cut {
            return;
        }
        if !new {
            k.cut(p, now);
        }
        let base = p.backoff_base.as_secs_f64() * 2f64.powi(k.backoff_exp.min(16) as i32);
        let backoff = Duration::from_secs_f64(base.min(p.backoff_cap.as_secs_f64()));
        k.backoff_exp = k.backoff_exp.saturating_add(1);
        k.hold_until = k
            .hold_until
            .max(now + backoff.mul_f64(jitter.clamp(0.0, 1.0)));
        k.refill(now, p.burst);
        k.tokens = k.tokens.min(0.0);
    }

    fn evict_one(&mut self) {
        if let Some(oldest) = self
            .keys
            .iter()
            .min_by_key(|(_, k)| k.last_throttle)
            .map(|(key, _)| *key)
        {
            self.keys.remove(&oldest);
        }
    }

    /// Forgets the states idle for `idle_expiry`: no throttle and the key not
    /// held back. Call about once a second.
    pub(crate) fn expire(&mut self, now: Instant) {
        let idle = self.p.idle_expiry;
        self.keys.retain(|_, k| {
            let quiet = |t: Instant| now.saturating_duration_since(t) >= idle;
            !(quiet(k.last_throttle) && k.last_held.is_none_or(quiet))
        });
    }
}

#[cfg(test)]
mod scenarios;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_name_the_scope() {
        assert_eq!(
            Scope::of_reasons(["TableWriteKeyRangeThroughputExceeded"]),
            Scope::KeyRange
        );
        assert_eq!(
            Scope::of_reasons(["TableWriteProvisionedThroughputExceeded"]),
            Scope::Table
        );
        assert_eq!(
            Scope::of_reasons(["IndexWriteAccountLimitExceeded"]),
            Scope::Table
        );
        assert_eq!(
            Scope::of_reasons([
                "TableWriteKeyRangeThroughputExceeded",
                "TableWriteMaxOnDemandThroughputExceeded"
            ]),
            Scope::Table
        );
        assert_eq!(Scope::of_reasons([]), Scope::Unknown);
        assert_eq!(Scope::of_reasons(["Whatever"]), Scope::Unknown);
    }

    fn throttle(p: &mut KeyPacer, key: u64, at: Instant) -> bool {
        p.on_result(
            at,
            &[ItemResult {
                key,
                wcu: 1.0,
                stored: false,
            }],
            Scope::KeyRange,
            false,
            at,
            1.0,
        )
    }

    /// A key that wants more than its partition serves is named as held at
    /// the limit once its rate has grown there, with how long it has been
    /// held without a pause; a key held at a low rate (a table-wide
    /// throttle charged to it) or that stops pushing is not.
    #[test]
    fn a_key_pushing_at_its_partitions_limit_is_named_with_its_hold() {
        let t0 = Instant::now();
        let mut p = KeyPacer::new(KeyParams::default(), t0);
        throttle(&mut p, 7, t0);
        throttle(&mut p, 9, t0);
        let mut t = t0 + Duration::from_millis(50);
        let end = t0 + Duration::from_secs(30);
        let mut first_named = None;
        let mut next9 = t;
        // Key 7 offers 2,000 WCU/s (an item every 0.5 ms), every item stored.
        while t < end {
            match p.admit(7, 1.0, t) {
                Gate::Go => {
                    p.on_result(
                        t,
                        &[ItemResult {
                            key: 7,
                            wcu: 1.0,
                            stored: true,
                        }],
                        Scope::Unknown,
                        false,
                        t,
                        1.0,
                    );
                    t += Duration::from_micros(500);
                }
                Gate::Held(u) => t = u,
            }
            // Key 9 is held too but offers 1 item a second.
            if t >= next9 && p.admit(9, 1.0, t) == Gate::Go {
                p.on_result(
                    t,
                    &[ItemResult {
                        key: 9,
                        wcu: 1.0,
                        stored: true,
                    }],
                    Scope::Unknown,
                    false,
                    t,
                    1.0,
                );
                next9 = t + Duration::from_secs(1);
            }
            let named = p.held_at_limit(t);
            assert!(named.iter().all(|(k, _, _)| *k == 7), "{named:?}");
            if first_named.is_none() && !named.is_empty() {
                first_named = Some(t);
            }
        }
        let first = first_named.expect("the hot key is named");
        assert!(first.saturating_duration_since(t0) < Duration::from_secs(20));
        let named = p.held_at_limit(t);
        let (_, held_for, accepted) = named[0];
        assert!(
            held_for >= end.saturating_duration_since(first),
            "{held_for:?}"
        );
        assert!(accepted >= 800.0, "{accepted}");
        // Two seconds without pushing: no longer held.
        assert!(p.held_at_limit(t + Duration::from_secs(2)).is_empty());
    }

    #[test]
    fn untracked_keys_pass_and_a_throttled_key_is_held_then_paced() {
        let t0 = Instant::now();
        let mut p = KeyPacer::new(KeyParams::default(), t0);
        assert_eq!(p.admit(7, 25.0, t0), Gate::Go);
        assert!(
            !throttle(&mut p, 7, t0),
            "a key-range throttle is not the table's"
        );
        assert!(p.is_paced(7));
        assert!(!p.is_paced(8));
        assert_eq!(p.admit(8, 25.0, t0), Gate::Go);
        // Held for the back-off (20 ms at full jitter), then paced at 500 WCU/s.
        assert!(matches!(p.admit(7, 1.0, t0), Gate::Held(_)));
        let later = t0 + Duration::from_millis(21);
        let mut sent = 0.0;
        let mut t = later;
        let end = later + Duration::from_secs(2);
        while t < end {
            match p.admit(7, 1.0, t) {
                Gate::Go => sent += 1.0,
                Gate::Held(u) => t = u,
            }
        }
        let per_sec = sent / 2.0;
        assert!((480.0..=560.0).contains(&per_sec), "{per_sec} WCU/s");
    }

    #[test]
    fn stale_feedback_cuts_once_and_the_back_off_grows() {
        let t0 = Instant::now();
        let mut p = KeyPacer::new(KeyParams::default(), t0);
        throttle(&mut p, 1, t0);
        let r0 = p.key_rate(1).unwrap_or_default();
        let t1 = t0 + Duration::from_millis(10);
        // Sent before t1's cut: one cut for the three.
        throttle(&mut p, 1, t1);
        let r1 = p.key_rate(1).unwrap_or_default();
        assert!(r1 < r0);
        p.on_result(
            t0,
            &[ItemResult {
                key: 1,
                wcu: 1.0,
                stored: false,
            }],
            Scope::KeyRange,
            false,
            t1 + Duration::from_millis(1),
            1.0,
        );
        assert_eq!(p.key_rate(1), Some(r1));
        // Three throttles in a row: the third hold is 80 ms.
        let t2 = t1 + Duration::from_millis(2);
        throttle(&mut p, 1, t2);
        assert_eq!(
            p.ready_at(1, t2),
            Some(t2 + Duration::from_millis(80)),
            "base 20 ms doubled twice"
        );
    }

    #[test]
    fn a_bound_key_is_cut_when_its_neighbours_take_the_throttle() {
        // The hot key's items reached the partition first and were stored;
        // a light neighbour's came back. The hot key, pushing at its budget,
        // is the likely cause and is cut; the neighbour is tracked.
        let t0 = Instant::now();
        let mut p = KeyPacer::new(KeyParams::default(), t0);
        throttle(&mut p, 1, t0);
        let t1 = t0 + Duration::from_millis(50);
        assert_eq!(
            p.admit(1, 1_000.0, t1),
            Gate::Go,
            "its bucket goes into debt"
        );
        assert!(matches!(p.admit(1, 1.0, t1), Gate::Held(_)));
        let r0 = p.key_rate(1).unwrap_or_default();
        // With 62 other keys' items stored: not a throttle of the table.
        let items: Vec<ItemResult> = (1..=64)
            .map(|key| ItemResult {
                key,
                wcu: 1.0,
                stored: key != 2,
            })
            .collect();
        let t2 = t1 + Duration::from_millis(10);
        assert!(!p.on_result(t1, &items, Scope::Unknown, false, t2, 0.5));
        let r1 = p.key_rate(1).unwrap_or_default();
        assert!(r1 < r0, "{r1} < {r0}");
        assert!(p.is_paced(2));
        // A key not held back by its budget is not a suspect.
        let mut q = KeyPacer::new(KeyParams::default(), t0);
        throttle(&mut q, 1, t0);
        let r0 = q.key_rate(1).unwrap_or_default();
        q.on_result(t1, &items, Scope::Unknown, false, t2, 0.5);
        assert_eq!(q.key_rate(1), Some(r0));
    }

    #[test]
    fn states_are_bounded_and_expire() {
        let t0 = Instant::now();
        let params = KeyParams {
            max_keys: 3,
            ..KeyParams::default()
        };
        let mut p = KeyPacer::new(params, t0);
        for k in 0..5u64 {
            throttle(&mut p, k, t0 + Duration::from_millis(k));
        }
        assert_eq!(p.tracked(), 3);
        assert!(!p.is_paced(0) && !p.is_paced(1), "the oldest were evicted");
        // Key 4 keeps being held back; 2 and 3 go quiet.
        let mut t = t0;
        while t < t0 + Duration::from_secs(12) {
            let _ = p.admit(4, 10_000.0, t);
            t += Duration::from_millis(100);
        }
        p.expire(t);
        assert!(p.is_paced(4) && p.tracked() == 1, "{}", p.tracked());
    }

    #[test]
    fn unexplained_throttles_spread_over_untracked_keys_are_the_tables() {
        let t0 = Instant::now();
        let mut p = KeyPacer::new(KeyParams::default(), t0);
        // 25 different keys, 10 of them throttled, no reason given.
        let items: Vec<ItemResult> = (0..25)
            .map(|k| ItemResult {
                key: k,
                wcu: 1.0,
                stored: k >= 10,
            })
            .collect();
        assert!(p.on_result(t0, &items, Scope::Unknown, false, t0, 0.5));
        // Saturated table: the table's, whatever the spread.
        let mut q = KeyPacer::new(KeyParams::default(), t0);
        let one = [ItemResult {
            key: 1,
            wcu: 1.0,
            stored: false,
        }];
        assert!(q.on_result(t0, &one, Scope::Unknown, true, t0, 0.5));
        // A reason naming the table: the table's, and no key is charged.
        let mut r = KeyPacer::new(KeyParams::default(), t0);
        assert!(r.on_result(t0, &one, Scope::Table, false, t0, 0.5));
        assert_eq!(r.tracked(), 0);
    }
}
