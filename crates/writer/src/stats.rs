//! Counters the worker prints (the metric names are in `crate::metrics`).
//!
//! Every counter is both kept here (for [`WriterStats`]) and sent to the
//! `metrics` facade with a `table` label (dead letters with `reason`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
use tidemark_schema::Reason;

/// A snapshot of the writer's counters since it started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriterStats {
    /// Submissions acknowledged as stored (coalesced duplicates count each).
    pub stored: u64,
    /// BatchWriteItem calls made.
    pub calls: u64,
    /// Calls throttled (exception, or any UnprocessedItems).
    pub throttled_calls: u64,
    /// Items returned in UnprocessedItems.
    pub unprocessed: u64,
    /// Items queued again for another attempt (throttling, errors).
    pub retries: u64,
    /// Calls that failed transiently (5xx, timeouts, connection errors).
    pub transient_errors: u64,
    /// Submissions completed as Rejected.
    pub dead_lettered: u64,
    /// WCU DynamoDB reported consumed.
    pub consumed_wcu: f64,
    /// Planned rate per table, WCU/s.
    pub rate_wcu: BTreeMap<String, f64>,
    /// Late items stored (items of tables the caller's `LateTables` calls late).
    pub late_stored: u64,
    /// Table tasks running now (idle ones retire).
    pub live_tables: usize,
    /// Each running table's load, as of its last look (about every second).
    pub tables: BTreeMap<String, TableLoad>,
}

/// One table's load in the writer.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct TableLoad {
    /// Submissions accepted and not completed (its part of the in-flight
    /// bound; at most `max_table_share` of it).
    pub items: u64,
    /// WCU of the items waiting in its queue.
    pub wcu: u64,
    /// Whether the table takes late data.
    pub late: bool,
    /// Seconds since the table last accepted a write, while items wait
    /// (0 when none wait).
    pub seconds_since_stored: f64,
}

/// Counters shared by the handle and the table tasks.
#[derive(Debug, Default)]
pub(crate) struct SharedStats {
    stored: AtomicU64,
    calls: AtomicU64,
    throttled_calls: AtomicU64,
    unprocessed: AtomicU64,
    retries: AtomicU64,
    transient_errors: AtomicU64,
    dead_lettered: AtomicU64,
    consumed_milli_wcu: AtomicU64,
    rates: Mutex<BTreeMap<String, f64>>,
    late_stored: AtomicU64,
    live_tables: AtomicU64,
    loads: Mutex<BTreeMap<String, TableLoad>>,
}

impl SharedStats {
    pub(crate) fn snapshot(&self) -> WriterStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WriterStats {
            stored: l(&self.stored),
            calls: l(&self.calls),
            throttled_calls: l(&self.throttled_calls),
            unprocessed: l(&self.unprocessed),
            retries: l(&self.retries),
            transient_errors: l(&self.transient_errors),
            dead_lettered: l(&self.dead_lettered),
            consumed_wcu: l(&self.consumed_milli_wcu) as f64 / 1000.0,
            rate_wcu: self.rates.lock().map(|r| r.clone()).unwrap_or_default(),
            late_stored: l(&self.late_stored),
            live_tables: l(&self.live_tables) as usize,
            tables: self.loads.lock().map(|r| r.clone()).unwrap_or_default(),
        }
    }

    /// Table tasks running now.
    pub(crate) fn live_tables(&self, n: usize) {
        self.live_tables.store(n as u64, Ordering::Relaxed);
        gauge!(crate::metrics::TABLES).set(n as f64);
    }
}

/// One table's view: shared counters plus labelled metric handles.
#[derive(Debug)]
pub(crate) struct TableStats {
    table: String,
    shared: std::sync::Arc<SharedStats>,
    stored: Counter,
    calls: Counter,
    throttles: Counter,
    unprocessed: Counter,
    retries: Counter,
    transient: Counter,
    consumed: Counter,
    rate: Gauge,
    latency: Histogram,
    paced_keys: Gauge,
    in_flight: Gauge,
    since_stored: Gauge,
    late_stored: Counter,
}

impl TableStats {
    pub(crate) fn new(table: &str, shared: std::sync::Arc<SharedStats>) -> Self {
        let t = table.to_owned();
        TableStats {
            stored: counter!(crate::metrics::ITEMS_STORED, "table" => t.clone()),
            calls: counter!(crate::metrics::CALLS, "table" => t.clone()),
            throttles: counter!(crate::metrics::THROTTLES, "table" => t.clone()),
            unprocessed: counter!(crate::metrics::UNPROCESSED, "table" => t.clone()),
            retries: counter!(crate::metrics::RETRIES, "table" => t.clone()),
            transient: counter!(crate::metrics::TRANSIENT_ERRORS, "table" => t.clone()),
            consumed: counter!(crate::metrics::CONSUMED_WCU, "table" => t.clone()),
            rate: gauge!(crate::metrics::RATE, "table" => t.clone()),
            paced_keys: gauge!(crate::metrics::PACED_KEYS, "table" => t.clone()),
            latency: histogram!(crate::metrics::CALL_SECONDS, "table" => t.clone()),
            in_flight: gauge!(crate::metrics::TABLE_ITEMS_IN_FLIGHT, "table" => t.clone()),
            since_stored: gauge!(crate::metrics::SECONDS_SINCE_STORED, "table" => t.clone()),
            late_stored: counter!(crate::metrics::LATE_STORED, "table" => t.clone()),
            table: t,
            shared,
        }
    }

    pub(crate) fn call(&self, seconds: f64) {
        self.calls.increment(1);
        self.latency.record(seconds);
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stored(&self, items: u64, tokens: u64) {
        self.stored.increment(items);
        self.shared.stored.fetch_add(tokens, Ordering::Relaxed);
    }

    pub(crate) fn throttled(&self, unprocessed: u64) {
        self.throttles.increment(1);
        self.unprocessed.increment(unprocessed);
        self.shared.throttled_calls.fetch_add(1, Ordering::Relaxed);
        self.shared
            .unprocessed
            .fetch_add(unprocessed, Ordering::Relaxed);
    }

    pub(crate) fn retried(&self, items: u64) {
        self.retries.increment(items);
        self.shared.retries.fetch_add(items, Ordering::Relaxed);
    }

    pub(crate) fn transient(&self) {
        self.transient.increment(1);
        self.shared.transient_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn consumed(&self, wcu: f64) {
        self.consumed.increment(wcu.round() as u64);
        self.shared
            .consumed_milli_wcu
            .fetch_add((wcu * 1000.0).round() as u64, Ordering::Relaxed);
    }

    pub(crate) fn rate(&self, wcu: f64) {
        self.rate.set(wcu);
        if let Ok(mut r) = self.shared.rates.lock() {
            r.insert(self.table.clone(), wcu);
        }
    }

    /// The table's load, as of now.
    pub(crate) fn load(&self, load: TableLoad) {
        self.in_flight.set(load.items as f64);
        self.since_stored.set(load.seconds_since_stored);
        if let Ok(mut l) = self.shared.loads.lock() {
            l.insert(self.table.clone(), load);
        }
    }

    /// The table's task ended: it holds nothing.
    pub(crate) fn unload(&self) {
        self.in_flight.set(0.0);
        self.since_stored.set(0.0);
        if let Ok(mut l) = self.shared.loads.lock() {
            l.remove(&self.table);
        }
    }

    /// Late items stored.
    pub(crate) fn late_stored(&self, tokens: u64) {
        self.late_stored.increment(tokens);
        self.shared.late_stored.fetch_add(tokens, Ordering::Relaxed);
    }

    pub(crate) fn paced_keys(&self, keys: usize) {
        self.paced_keys.set(keys as f64);
    }

    pub(crate) fn dead_letter(&self, reason: Reason, tokens: u64) {
        dead_letter(&self.shared, reason, tokens);
    }
}

/// Counts `tokens` submissions rejected for `reason`.
pub(crate) fn dead_letter(shared: &SharedStats, reason: Reason, tokens: u64) {
    counter!(crate::metrics::DEAD_LETTERS, "reason" => reason.as_str()).increment(tokens);
    shared.dead_lettered.fetch_add(tokens, Ordering::Relaxed);
}
