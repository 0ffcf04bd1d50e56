//! Every command's text output, formatted in one place: aligned tables
//! (comfy-table, no borders), CSV (the `csv` crate) and JSON lines; and
//! written in one place ([`write_out`], [`outln!`]): a closed pipe
//! (`tidemark ... | head -1`) becomes [`ClosedPipe`], which ends the
//! command quietly instead of a panic.

use std::collections::BTreeSet;
use std::io::Write;

use crate::maintenance::TableInfo;
use crate::run::report::CheckpointLag;
use anyhow::Result;
use comfy_table::{CellAlignment, Table};
use tidemark_schema::period::TableClass;
use tidemark_schema::route::RouterConfig;

/// The reader of standard output went away (`| head`).
#[derive(Debug, thiserror::Error)]
#[error("the output pipe was closed")]
pub(crate) struct ClosedPipe;

fn pipe_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        ClosedPipe.into()
    } else {
        anyhow::Error::from(e).context("writing the output")
    }
}

/// True when `e` is (or was caused by) a closed output pipe.
pub(crate) fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.is::<ClosedPipe>()
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|i| i.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<csv::Error>().is_some_and(|c| {
                matches!(c.kind(), csv::ErrorKind::Io(i) if i.kind() == std::io::ErrorKind::BrokenPipe)
            })
    })
}

/// Writes `bytes` to standard output.
pub(crate) fn write_out(bytes: &[u8]) -> Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(bytes)
        .and_then(|()| o.flush())
        .map_err(pipe_error)
}

/// `println!` to standard output through [`write_out`]: `outln!(...)?`.
macro_rules! outln {
    () => {
        $crate::cli::cmd::render::write_out(b"\n")
    };
    ($($t:tt)*) => {
        $crate::cli::cmd::render::write_out(format!("{}\n", format_args!($($t)*)).as_bytes())
    };
}
pub(crate) use outln;

/// The output format of every command that prints data (`--output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// Aligned columns for people.
    Table,
    /// One JSON document, indented.
    Json,
    /// One JSON object per line (a list: one line per element).
    Jsonl,
    /// Comma-separated values with a header.
    Csv,
}

/// Rounds every float to at most 6 decimals, so JSON shows `393.564`,
/// not `393.56399999999996`.
pub(crate) fn tidy(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(x) = n.as_f64() {
                let r = (x * 1e6).round() / 1e6;
                if let Some(m) = serde_json::Number::from_f64(r) {
                    *n = m;
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(tidy),
        serde_json::Value::Object(o) => o.values_mut().for_each(tidy),
        _ => {}
    }
}

/// `value` as JSON (indented) or JSON lines (a list one element per line),
/// floats tidied; `table` and `csv` print JSON lines too (the caller gives
/// rows for those where it has them).
pub(crate) fn json_text(value: &impl serde::Serialize, output: Output) -> Result<String> {
    let mut v = serde_json::to_value(value)?;
    tidy(&mut v);
    Ok(match (output, &v) {
        (Output::Json, _) => serde_json::to_string_pretty(&v)?,
        (_, serde_json::Value::Array(items)) => items
            .iter()
            .map(serde_json::Value::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        _ => v.to_string(),
    })
}

/// Prints [`json_text`].
pub(crate) fn print_json(value: &impl serde::Serialize, output: Output) -> Result<()> {
    let text = json_text(value, output)?;
    if !text.is_empty() {
        outln!("{text}")?;
    }
    Ok(())
}

/// Prints text as it is (it ends with its own newline).
pub(crate) fn print_text(text: &str) -> Result<()> {
    write_out(text.as_bytes())
}

/// Prints `rows` under `header` as a table or CSV, or `objects` as JSON.
pub(crate) fn print_rows(
    header: &[&str],
    rows: Vec<Vec<String>>,
    right: &[usize],
    output: Output,
    objects: &impl serde::Serialize,
) -> Result<()> {
    match output {
        Output::Table => outln!("{}", table(Some(header), rows, right))?,
        Output::Csv => {
            let mut w = csv::Writer::from_writer(std::io::stdout().lock());
            w.write_record(header)?;
            for r in rows {
                w.write_record(&r)?;
            }
            w.flush()?;
        }
        Output::Json | Output::Jsonl => print_json(objects, output)?,
    }
    Ok(())
}

/// An aligned table without borders: columns two spaces apart, the columns
/// in `right` right-aligned, no trailing blanks.
pub(crate) fn table(header: Option<&[&str]>, rows: Vec<Vec<String>>, right: &[usize]) -> String {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::NOTHING);
    if let Some(h) = header {
        t.set_header(h.to_vec());
    }
    t.add_rows(rows);
    let last = t.column_count().saturating_sub(1);
    for (i, c) in t.column_iter_mut().enumerate() {
        // No left margin; two blanks between columns.
        c.set_padding((0, if i == last { 0 } else { 2 }));
        if right.contains(&i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t.trim_fmt()
}

/// The RCU and WCU cells of a table ("-", "on-demand" without capacity).
fn capacity_cells(t: &TableInfo) -> (String, String) {
    t.capacity
        .map_or(("-".to_string(), "on-demand".to_string()), |c| {
            (c.read.to_string(), c.write.to_string())
        })
}

/// The lifecycle state as its config spelling (`active`, `prebuild`, ...).
fn state_cell(t: &TableInfo) -> Result<String> {
    Ok(serde_json::to_value(t.state)?
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// `tables list`: TABLE PERIOD STATE STATUS RCU WCU BILLING CLASS CEILING
/// GB USD/MONTH (on demand: storage only, marked `+requests`).
pub(crate) fn tables_list_rows(
    tables: &[super::tables::Listed],
) -> Result<([&'static str; 11], Vec<Vec<String>>)> {
    let mut rows = Vec::with_capacity(tables.len());
    for l in tables {
        let t = l.table;
        let (r, w) = capacity_cells(t);
        rows.push(vec![
            t.name.clone(),
            t.period.clone(),
            state_cell(t)?,
            t.status.clone(),
            r,
            w,
            l.billing.to_string(),
            match t.table_class {
                TableClass::StandardInfrequentAccess => "standard_ia".to_string(),
                TableClass::Standard => "standard".to_string(),
            },
            t.ceiling
                .write
                .map_or_else(|| "-".to_string(), |n| n.to_string()),
            format!("{:.2}", t.size_bytes as f64 / 1e9),
            if l.monthly_usd_includes_requests {
                format!("{:.2}", l.monthly_usd)
            } else {
                format!("{:.2}+requests", l.monthly_usd)
            },
        ]);
    }
    Ok((
        [
            "TABLE",
            "PERIOD",
            "STATE",
            "STATUS",
            "RCU",
            "WCU",
            "BILLING",
            "CLASS",
            "CEILING",
            "GB",
            "USD/MONTH",
        ],
        rows,
    ))
}

/// `status`' table section: TABLE PERIOD STATE RCU WCU.
pub(crate) fn status_tables(tables: &[TableInfo]) -> Result<String> {
    let mut rows = Vec::with_capacity(tables.len());
    for t in tables {
        let (r, w) = capacity_cells(t);
        rows.push(vec![t.name.clone(), t.period.clone(), state_cell(t)?, r, w]);
    }
    Ok(table(
        Some(&["TABLE", "PERIOD", "STATE", "RCU", "WCU"]),
        rows,
        &[3, 4],
    ))
}

/// One shard of `status`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct ShardRow {
    pub(crate) shard: String,
    /// The worker holding the lease (during a KCL hand-off, the one handing
    /// it over: it still renews and checkpoints it).
    pub(crate) owner: Option<String>,
    /// A KCL graceful hand-off under way: the next owner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) handoff_to: Option<String>,
    pub(crate) checkpoint: String,
    pub(crate) parents: Vec<String>,
    /// MillisBehindLatest: as the owning worker last reported it, or
    /// measured after the checkpoint with `--probe-lag`.
    pub(crate) lag_ms: Option<i64>,
    /// Why the lag is not known (no report from the owner, a failed probe).
    pub(crate) lag_error: Option<String>,
    /// How far the checkpoint is behind what the owner read, as the owner
    /// last reported it (`None`: no report from the owner).
    pub(crate) checkpoint_lag: Option<CheckpointLag>,
}

/// A checkpoint lag as shown: `0`, or its age and records, `3m 20s (1200)`,
/// `2h 5m (1.3M)`.
pub(crate) fn checkpoint_lag(l: &CheckpointLag) -> String {
    let n = l.records as f64;
    let records = match l.records {
        0 => return "0".into(),
        1..10_000 => l.records.to_string(),
        10_000..1_000_000 => format!("{:.1}k", n / 1e3),
        _ => format!("{:.1}M", n / 1e6),
    };
    format!("{} ({records})", lag(l.ms))
}

/// A capacity lift as `status` shows it.
#[derive(Debug, serde::Serialize)]
pub(crate) struct LiftRow {
    pub(crate) table: String,
    /// Write capacity while lifted, WCU (0 on demand).
    pub(crate) write: u64,
    /// Lifted by a switch to on-demand billing.
    pub(crate) on_demand: bool,
    /// Why (`late_backlog`).
    pub(crate) reason: String,
    /// When the lift started, Unix ms.
    pub(crate) since_ms: i64,
    /// When a backlog was last seen for it, Unix ms.
    pub(crate) renewed_ms: i64,
    /// The backlog last seen, items.
    pub(crate) backlog_items: u64,
}

/// `status`' lift section at `now_ms`: TABLE WCU SINCE WHY.
pub(crate) fn status_lifts(lifts: &[LiftRow], now_ms: i64) -> String {
    let rows = lifts
        .iter()
        .map(|l| {
            vec![
                l.table.clone(),
                if l.on_demand {
                    "on demand".into()
                } else {
                    l.write.to_string()
                },
                format!("{} ago", lag(now_ms - l.since_ms)),
                format!(
                    "{}: {} items waiting {} ago",
                    l.reason,
                    l.backlog_items,
                    lag(now_ms - l.renewed_ms)
                ),
            ]
        })
        .collect();
    table(Some(&["TABLE", "WCU", "SINCE", "WHY"]), rows, &[1, 2])
}

/// The queue line of `status` for an SQS source.
#[derive(Debug, serde::Serialize)]
pub(crate) struct QueueRow {
    pub(crate) queue: String,
    /// ApproximateNumberOfMessages.
    pub(crate) visible: Option<u64>,
    /// ApproximateNumberOfMessagesNotVisible.
    pub(crate) in_flight: Option<u64>,
    /// ApproximateNumberOfMessagesDelayed.
    pub(crate) delayed: Option<u64>,
    /// Age of the oldest message the workers last received (from their
    /// reports), ms.
    pub(crate) oldest_age_ms: Option<i64>,
    /// Why that age is not known.
    pub(crate) oldest_age_error: Option<String>,
}

/// A lag as a short duration: `850ms`, `12s`, `3m 20s`, `2h 5m`.
pub(crate) fn lag(ms: i64) -> String {
    let ms = u64::try_from(ms).unwrap_or(0);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, s % 3600 / 60),
    }
}

/// A checkpoint as shown: sentinels whole; a sequence number shortened to
/// its last 12 digits (where consecutive records differ) unless `wide`.
fn checkpoint_cell(c: &str, wide: bool) -> String {
    let n = c.chars().count();
    if wide || n <= 16 || !c.starts_with(|ch: char| ch.is_ascii_digit()) {
        c.to_string()
    } else {
        format!("…{}", c.chars().skip(n - 14).collect::<String>())
    }
}

/// `status`' shard section: SHARD OWNER LAG CKPT LAG CHECKPOINT, each
/// column as wide as its longest cell.
pub(crate) fn status_shards(shards: &[ShardRow], wide: bool) -> String {
    let rows = shards
        .iter()
        .map(|r| {
            vec![
                r.shard.clone(),
                match (&r.owner, &r.handoff_to) {
                    (Some(o), Some(to)) => format!("{o} (hand-off to {to})"),
                    (Some(o), None) => o.clone(),
                    (None, _) => "(none)".into(),
                },
                match (&r.lag_ms, &r.lag_error) {
                    (Some(ms), _) => lag(*ms),
                    (None, Some(e)) => e.chars().take(40).collect::<String>(),
                    (None, None) => "n/a".into(),
                },
                r.checkpoint_lag
                    .as_ref()
                    .map_or("n/a".into(), checkpoint_lag),
                checkpoint_cell(&r.checkpoint, wide),
            ]
        })
        .collect();
    table(
        Some(&["SHARD", "OWNER", "LAG", "CKPT LAG", "CHECKPOINT"]),
        rows,
        &[2, 3],
    )
}

/// `status`' queue section: QUEUE VISIBLE IN-FLIGHT DELAYED.
pub(crate) fn status_queue(q: &QueueRow) -> String {
    let n = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
    let age = match (&q.oldest_age_ms, &q.oldest_age_error) {
        (Some(ms), _) => lag(*ms),
        (None, Some(e)) => e.chars().take(40).collect(),
        (None, None) => "n/a".into(),
    };
    table(
        Some(&["QUEUE", "VISIBLE", "IN-FLIGHT", "DELAYED", "OLDEST AGE"]),
        vec![vec![
            q.queue.clone(),
            n(q.visible),
            n(q.in_flight),
            n(q.delayed),
            age,
        ]],
        &[1, 2, 3, 4],
    )
}

/// The columns of `query` rows: time, entity and event id first, then the
/// rest in name order.
fn query_columns(rows: &[serde_json::Value], schema: &RouterConfig) -> Vec<String> {
    let first = [
        schema.attributes.timestamp.clone(),
        schema.attributes.entity.clone(),
        schema.attributes.event_id.clone(),
    ];
    let mut rest = BTreeSet::new();
    for r in rows {
        if let Some(o) = r.as_object() {
            rest.extend(o.keys().filter(|k| !first.contains(k)).cloned());
        }
    }
    first.into_iter().chain(rest).collect()
}

/// A cell of a `query` row: strings bare, absent and null empty, other
/// values as JSON.
fn query_cell(r: &serde_json::Value, c: &str) -> String {
    match r.get(c) {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

/// One `query` row: the item's attributes and, for an oversized event's
/// pointer item, the event's payload fetched from S3, as `tidemark_payload`:
/// in JSON output the event's own text, byte for byte (not re-encoded); in
/// CSV and table output a string.
#[derive(Debug, serde::Serialize)]
pub(crate) struct QueryRow {
    #[serde(flatten)]
    item: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    tidemark_payload: Option<Box<serde_json::value::RawValue>>,
}

impl QueryRow {
    /// A row of `item` (tidied), with `payload` when it is a pointer item's.
    pub(crate) fn new(mut item: serde_json::Value, payload: Option<bytes::Bytes>) -> Result<Self> {
        tidy(&mut item);
        let tidemark_payload = payload
            .map(|p| {
                String::from_utf8(p.to_vec())
                    .map_err(anyhow::Error::from)
                    .and_then(|text| Ok(serde_json::value::RawValue::from_string(text)?))
            })
            .transpose()
            .map_err(|e| anyhow::anyhow!("an oversized event's payload is not JSON text: {e}"))?;
        Ok(QueryRow {
            item,
            tidemark_payload,
        })
    }

    /// The item with the payload as a string attribute (CSV and table).
    fn flat(&self) -> serde_json::Value {
        let mut v = self.item.clone();
        if let (Some(p), Some(o)) = (&self.tidemark_payload, v.as_object_mut()) {
            o.insert(
                "tidemark_payload".into(),
                serde_json::Value::String(p.get().to_owned()),
            );
        }
        v
    }
}

/// Writes `query` rows to `out` in `format`.
pub(crate) fn query_rows(
    out: &mut impl Write,
    rows: &[QueryRow],
    format: Output,
    schema: &RouterConfig,
) -> Result<()> {
    // Serialized as they are: a payload's text must not go through a
    // `Value` (that would re-encode it).
    match format {
        Output::Json => {
            writeln!(out, "{}", serde_json::to_string_pretty(rows)?)?;
            return Ok(());
        }
        Output::Jsonl => {
            for r in rows {
                writeln!(out, "{}", serde_json::to_string(r)?)?;
            }
            return Ok(());
        }
        Output::Csv | Output::Table => {}
    }
    let rows: Vec<serde_json::Value> = rows.iter().map(QueryRow::flat).collect();
    let rows = &rows;
    let columns = query_columns(rows, schema);
    let cells = rows
        .iter()
        .map(|r| columns.iter().map(|c| query_cell(r, c)).collect::<Vec<_>>());
    match format {
        Output::Csv => {
            let mut w = csv::Writer::from_writer(out);
            w.write_record(&columns)?;
            for row in cells {
                w.write_record(&row)?;
            }
            w.flush()?;
        }
        Output::Table => {
            let header: Vec<&str> = columns.iter().map(String::as_str).collect();
            writeln!(out, "{}", table(Some(&header), cells.collect(), &[]))?;
        }
        Output::Jsonl | Output::Json => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_aligned_without_borders_or_trailing_blanks() {
        let out = table(
            Some(&["NAME", "N"]),
            vec![
                vec!["a".into(), "1".into()],
                vec!["longer".into(), "100".into()],
            ],
            &[1],
        );
        assert_eq!(out, "NAME      N\na         1\nlonger  100");
    }

    fn rows() -> Vec<QueryRow> {
        [
            serde_json::json!({"ts": "2026-11-22T05:00:00Z", "entity_id": "d1", "event_id": "e1", "t": 21.5, "note": "a,\"b\""}),
            serde_json::json!({"ts": "2026-11-22T05:00:01Z", "entity_id": "d1", "event_id": "e2", "t": 22}),
        ]
        .into_iter()
        .map(|v| QueryRow::new(v, None).unwrap())
        .collect()
    }

    fn render(format: Output) -> String {
        let mut out = Vec::new();
        let schema = RouterConfig::with_prefix("x");
        query_rows(&mut out, &rows(), format, &schema).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// An oversized event's payload is printed as the event's own text,
    /// byte for byte (spacing, digits, key order), in JSON and JSON lines.
    #[test]
    fn query_payloads_are_printed_byte_for_byte() {
        let event = r#"{ "deviceId":"d1",  "n": 1.000, "z":0, "a": [ ] }"#;
        let row = QueryRow::new(
            serde_json::json!({"ts": "t", "tidemark_payload_bytes": event.len()}),
            Some(bytes::Bytes::from(event)),
        )
        .unwrap();
        let schema = RouterConfig::with_prefix("x");
        for format in [Output::Jsonl, Output::Json, Output::Csv] {
            let mut out = Vec::new();
            query_rows(&mut out, std::slice::from_ref(&row), format, &schema).unwrap();
            let text = String::from_utf8(out).unwrap();
            let want = match format {
                Output::Csv => event.replace('"', "\"\""),
                _ => event.to_owned(),
            };
            assert!(text.contains(&want), "{format:?}: {text}");
        }
        let mut out = Vec::new();
        query_rows(&mut out, &[row], Output::Jsonl, &schema).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "{{\"ts\":\"t\",\"tidemark_payload_bytes\":{},\"tidemark_payload\":{event}}}\n",
                event.len()
            )
        );
        assert!(
            QueryRow::new(serde_json::json!({}), Some(bytes::Bytes::from("not json"))).is_err()
        );
    }

    #[test]
    fn query_csv_puts_key_columns_first_and_quotes_as_before() {
        assert_eq!(
            render(Output::Csv),
            "ts,entity_id,event_id,note,t\n\
             2026-11-22T05:00:00Z,d1,e1,\"a,\"\"b\"\"\",21.5\n\
             2026-11-22T05:00:01Z,d1,e2,,22\n"
        );
    }

    #[test]
    fn status_columns_fit_long_owners_and_shorten_checkpoints() {
        let owner = "0123456789abcdef0123456789abcdef-123"; // an ECS task id
        let seq = "49656964593812345678901234567890123456789012345678901234";
        let rows: Vec<ShardRow> = (0..200)
            .map(|i| ShardRow {
                shard: format!("shardId-{i:012}"),
                owner: (i % 7 != 0).then(|| format!("{}{}", &owner[..35], i % 10)),
                checkpoint: if i % 5 == 0 {
                    "TRIM_HORIZON".into()
                } else {
                    format!("{seq}.0")
                },
                parents: Vec::new(),
                handoff_to: None,
                lag_ms: Some(i * 1000),
                lag_error: None,
                checkpoint_lag: (i % 3 != 0).then_some(CheckpointLag {
                    records: i as u64 * 100,
                    ms: i * 2000,
                }),
            })
            .collect();
        let out = status_shards(&rows, false);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 201);
        // The owner column starts at the same place on every line.
        let owner_at = lines[0].find("OWNER").unwrap();
        for l in &lines[1..] {
            assert_eq!(l.chars().nth(owner_at - 1), Some(' '), "{l}");
            assert!(
                l[owner_at..].starts_with(&owner[..35]) || l[owner_at..].starts_with("(none)"),
                "{l}"
            );
            assert!(l.chars().count() < 100, "{l}");
        }
        assert!(out.contains("…"), "checkpoints shortened");
        assert!(
            status_shards(&rows, true).contains(seq),
            "--wide keeps them"
        );
        assert!(
            lines[2].contains(" 2s (100) ") && lines[4].contains(" n/a "),
            "checkpoint lags: {}\n{}",
            lines[2],
            lines[4]
        );
        let zero = CheckpointLag { records: 0, ms: 0 };
        assert_eq!(checkpoint_lag(&zero), "0");
        let big = CheckpointLag {
            records: 1_250_000,
            ms: 7_500_000,
        };
        assert_eq!(checkpoint_lag(&big), "2h 5m (1.2M)");
        assert_eq!(lag(200_000), "3m 20s");
        assert_eq!(lag(850), "850ms");
    }

    #[test]
    fn status_lifts_say_which_table_how_much_since_when_and_why() {
        let lift = LiftRow {
            table: "events_2026-11-19".into(),
            write: 350,
            on_demand: false,
            reason: "late_backlog".into(),
            since_ms: 1_000_000,
            renewed_ms: 1_540_000,
            backlog_items: 20_000,
        };
        let out = status_lifts(&[lift], 1_600_000);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("TABLE"), "{out}");
        assert!(
            lines[1].starts_with("events_2026-11-19")
                && lines[1].contains(" 350 ")
                && lines[1].contains("10m 0s ago")
                && lines[1].ends_with("late_backlog: 20000 items waiting 1m 0s ago"),
            "{out}"
        );
    }

    #[test]
    fn json_numbers_have_no_float_noise() {
        let v = serde_json::json!({"cost": 393.563_999_999_999_96, "n": 3});
        assert_eq!(
            json_text(&v, Output::Jsonl).unwrap(),
            r#"{"cost":393.564,"n":3}"#
        );
    }

    #[test]
    fn query_table_and_jsonl_keep_every_value() {
        let t = render(Output::Table);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("ts "), "{t}");
        assert!(
            lines[1].contains("a,\"b\"") && lines[1].ends_with("21.5"),
            "{t}"
        );
        let j = render(Output::Jsonl);
        assert_eq!(j.lines().count(), 2);
        assert!(j.contains("\"event_id\":\"e2\""), "{j}");
    }
}
