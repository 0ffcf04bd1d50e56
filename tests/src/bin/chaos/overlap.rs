//! Lease overlap from the workers' JSON logs: each incarnation's holding
//! intervals per shard, from "lease acquired" to the first of "lease lost",
//! "lease released", "shard ended", self-fencing, an aborted reader, or the
//! process's end (the orchestrator's kill time). Two incarnations holding
//! one shard at once is allowed for at most one failover time (a stolen
//! lease's old owner learns of it at its next renewal).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

/// Log messages that end a holding interval.
const ENDS: [&str; 6] = [
    "lease lost",
    "lease released",
    "shard ended",
    "checkpoint refused: lease lost",
    "lease not renewed within failover time; giving it up",
    "reader did not finish in time; aborting it",
];

/// One incarnation holding one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Interval {
    /// Worker id.
    pub(crate) worker: String,
    /// Shard id.
    pub(crate) shard: String,
    /// From.
    pub(crate) start: DateTime<Utc>,
    /// To.
    pub(crate) end: DateTime<Utc>,
}

/// The intervals one incarnation's log shows; intervals still open at the
/// end of the log end at `ended` (the process's end).
pub(crate) fn intervals(worker: &str, log: &str, ended: DateTime<Utc>) -> Vec<Interval> {
    let mut open: HashMap<String, DateTime<Utc>> = HashMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let fields = &v["fields"];
        let (Some(msg), Some(shard), Some(ts)) = (
            fields["message"].as_str(),
            fields["shard"].as_str(),
            v["timestamp"].as_str(),
        ) else {
            continue;
        };
        let Ok(ts) = DateTime::parse_from_rfc3339(ts) else {
            continue;
        };
        let ts = ts.with_timezone(&Utc);
        if msg == "lease acquired" {
            open.entry(shard.to_string()).or_insert(ts);
        } else if ENDS.contains(&msg)
            && let Some(start) = open.remove(shard)
        {
            out.push(Interval {
                worker: worker.to_string(),
                shard: shard.to_string(),
                start,
                end: ts,
            });
        }
    }
    for (shard, start) in open {
        out.push(Interval {
            worker: worker.to_string(),
            shard,
            start,
            end: ended.max(start),
        });
    }
    out
}

/// The largest overlap of two different workers on one shard, with the two
/// intervals, and how many hand-overs (consecutive holders) each shard saw.
#[derive(Debug, Clone, Default)]
pub(crate) struct OverlapReport {
    /// Largest overlap in milliseconds.
    pub(crate) max_ms: i64,
    /// The pair that overlapped most.
    pub(crate) worst: Option<(Interval, Interval)>,
    /// Holding intervals seen.
    pub(crate) intervals: usize,
    /// Overlaps longer than the limit.
    pub(crate) over_limit: Vec<(Interval, Interval, i64)>,
}

/// Compares every pair of intervals of different workers on each shard.
pub(crate) fn overlaps(all: &[Interval], limit_ms: i64) -> OverlapReport {
    let mut by_shard: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
    for i in all {
        by_shard.entry(&i.shard).or_default().push(i);
    }
    let mut report = OverlapReport {
        intervals: all.len(),
        ..OverlapReport::default()
    };
    for list in by_shard.values() {
        for (a_i, a) in list.iter().enumerate() {
            for b in &list[a_i + 1..] {
                if a.worker == b.worker {
                    continue;
                }
                let ms = (a.end.min(b.end) - a.start.max(b.start)).num_milliseconds();
                if ms <= 0 {
                    continue;
                }
                if ms > report.max_ms {
                    report.max_ms = ms;
                    report.worst = Some(((*a).clone(), (*b).clone()));
                }
                if ms > limit_ms {
                    report.over_limit.push(((*a).clone(), (*b).clone(), ms));
                }
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn line(ts: &str, msg: &str, shard: &str) -> String {
        serde_json::json!({
            "timestamp": ts, "level": "INFO",
            "fields": {"message": msg, "shard": shard},
            "target": "tidemark_consumer::kinesis"
        })
        .to_string()
    }

    #[test]
    fn intervals_end_at_release_loss_or_process_end() {
        let log = [
            line("2026-11-22T08:00:00.000Z", "lease acquired", "s0"),
            line("2026-11-22T08:00:01.000Z", "lease acquired", "s1"),
            "not json".to_string(),
            line("2026-11-22T08:00:05.000Z", "lease lost", "s0"),
            line("2026-11-22T08:00:06.000Z", "lease acquired", "s0"),
            line("2026-11-22T08:00:07.000Z", "shard ended", "s0"),
        ]
        .join("\n");
        let mut iv = intervals("a", &log, t("2026-11-22T08:00:09Z"));
        iv.sort_by_key(|i| (i.shard.clone(), i.start));
        let spans: Vec<_> = iv
            .iter()
            .map(|i| (i.shard.as_str(), (i.end - i.start).num_seconds()))
            .collect();
        assert_eq!(spans, [("s0", 5), ("s0", 1), ("s1", 8)]);
    }

    #[test]
    fn overlap_of_different_workers_only() {
        let iv = |w: &str, a: &str, b: &str| Interval {
            worker: w.into(),
            shard: "s".into(),
            start: t(a),
            end: t(b),
        };
        let all = vec![
            iv("a", "2026-11-22T08:00:00Z", "2026-11-22T08:00:10Z"),
            // Killed at :10 but its successor took over at :08 (a steal).
            iv("b", "2026-11-22T08:00:08Z", "2026-11-22T08:00:30Z"),
            // The same worker twice never counts.
            iv("b", "2026-11-22T08:00:09Z", "2026-11-22T08:00:12Z"),
            iv("c", "2026-11-22T08:00:30Z", "2026-11-22T08:00:40Z"),
        ];
        let r = overlaps(&all, 900);
        assert_eq!(r.max_ms, 2_000);
        assert_eq!(r.over_limit.len(), 2, "a with both b's; b and c only touch");
        assert!(overlaps(&all, 2_000).over_limit.is_empty());
    }
}
