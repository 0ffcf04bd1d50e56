//! Counters the worker prints, and the metric names the writer reports.
//!
//! Every counter is both kept here (for [`WriterStats`]) and sent to the
//! `metrics` facade with a `table` label (dead letters with `reason`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
use tidemark_schema::Reason;

/// Metric names, all prefixed `tidemark_writer_`.
pub mod names {
    /// Counter: items DynamoDB confirmed (one per distinct key written).
    pub const ITEMS_STORED: &str = "tidemark_writer_items_stored_total";
    /// Counter: BatchWriteItem calls made.
    pub const CALLS: &str = "tidemark_writer_calls_total";
    /// Counter: calls throttled (exception, or any UnprocessedItems).
    pub const THROTTLES: &str = "tidemark_writer_throttled_calls_total";
    /// Counter: items returned in UnprocessedItems.
    pub const UNPROCESSED: &str = "tidemark_writer_unprocessed_items_total";
    /// Counter: items queued again for another attempt (any cause).
    pub const RETRIES: &str = "tidemark_writer_retried_items_total";
    /// Counter: calls that failed transiently (5xx, timeout, connection).
    pub const TRANSIENT_ERRORS: &str = "tidemark_writer_transient_errors_total";
    /// Counter: WCU DynamoDB reported consumed (ReturnConsumedCapacity TOTAL).
    pub const CONSUMED_WCU: &str = "tidemark_writer_consumed_wcu_total";
    /// Gauge: the rate the controller plans, WCU/s.
    pub const RATE: &str = "tidemark_writer_rate_wcu";
    /// Histogram: BatchWriteItem call latency, seconds.
    pub const CALL_SECONDS: &str = "tidemark_writer_call_seconds";
    /// Counter: submissions completed as Rejected, label `reason`.
    pub const DEAD_LETTERS: &str = "tidemark_writer_dead_letters_total";
}

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
        }
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
}

impl TableStats {
    pub(crate) fn new(table: &str, shared: std::sync::Arc<SharedStats>) -> Self {
        let t = table.to_owned();
        TableStats {
            stored: counter!(names::ITEMS_STORED, "table" => t.clone()),
            calls: counter!(names::CALLS, "table" => t.clone()),
            throttles: counter!(names::THROTTLES, "table" => t.clone()),
            unprocessed: counter!(names::UNPROCESSED, "table" => t.clone()),
            retries: counter!(names::RETRIES, "table" => t.clone()),
            transient: counter!(names::TRANSIENT_ERRORS, "table" => t.clone()),
            consumed: counter!(names::CONSUMED_WCU, "table" => t.clone()),
            rate: gauge!(names::RATE, "table" => t.clone()),
            latency: histogram!(names::CALL_SECONDS, "table" => t.clone()),
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

    pub(crate) fn dead_letter(&self, reason: Reason, tokens: u64) {
        dead_letter(&self.shared, reason, tokens);
    }
}

/// Counts `tokens` submissions rejected for `reason`.
pub(crate) fn dead_letter(shared: &SharedStats, reason: Reason, tokens: u64) {
    counter!(names::DEAD_LETTERS, "reason" => reason.as_str()).increment(tokens);
    shared.dead_lettered.fetch_add(tokens, Ordering::Relaxed);
}
