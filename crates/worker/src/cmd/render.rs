//! Every command's text output, formatted in one place: aligned tables
//! (comfy-table, no borders), CSV (the `csv` crate) and JSON lines.

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::Result;
use comfy_table::{CellAlignment, Table};
use tidemark_schema::route::RouterConfig;
use tidemark_worker::tables::TableInfo;

/// The row format of `query`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    /// One JSON object per line.
    Jsonl,
    /// Comma-separated values with a header.
    Csv,
    /// Aligned columns.
    Table,
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

/// `tables list`: TABLE PERIOD STATE STATUS RCU WCU.
pub(crate) fn tables_list(tables: &[TableInfo]) -> Result<String> {
    let mut rows = Vec::with_capacity(tables.len());
    for t in tables {
        let (r, w) = capacity_cells(t);
        rows.push(vec![
            t.name.clone(),
            t.period.clone(),
            state_cell(t)?,
            t.status.clone(),
            r,
            w,
        ]);
    }
    Ok(table(
        Some(&["TABLE", "PERIOD", "STATE", "STATUS", "RCU", "WCU"]),
        rows,
        &[4, 5],
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
    pub(crate) owner: Option<String>,
    pub(crate) checkpoint: String,
    pub(crate) parents: Vec<String>,
    pub(crate) millis_behind_latest: Option<i64>,
}

/// `status`' shard section: SHARD OWNER LAG (ms) CHECKPOINT.
pub(crate) fn status_shards(shards: &[ShardRow]) -> String {
    let rows = shards
        .iter()
        .map(|r| {
            vec![
                r.shard.clone(),
                r.owner.clone().unwrap_or_else(|| "-".into()),
                r.millis_behind_latest.map_or("-".into(), |m| m.to_string()),
                r.checkpoint.clone(),
            ]
        })
        .collect();
    table(
        Some(&["SHARD", "OWNER", "LAG (ms)", "CHECKPOINT"]),
        rows,
        &[2],
    )
}

/// `plan`: name and value, the values right-aligned.
pub(crate) fn key_values(rows: &[(&str, String)]) -> String {
    let rows = rows
        .iter()
        .map(|(k, v)| vec![(*k).to_string(), v.clone()])
        .collect();
    table(None, rows, &[1])
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

/// Writes `query` rows to `out` in `format`.
pub(crate) fn query_rows(
    out: &mut impl Write,
    rows: &[serde_json::Value],
    format: OutputFormat,
    schema: &RouterConfig,
) -> Result<()> {
    if let OutputFormat::Jsonl = format {
        for r in rows {
            writeln!(out, "{r}")?;
        }
        return Ok(());
    }
    let columns = query_columns(rows, schema);
    let cells = rows
        .iter()
        .map(|r| columns.iter().map(|c| query_cell(r, c)).collect::<Vec<_>>());
    match format {
        OutputFormat::Csv => {
            let mut w = csv::Writer::from_writer(out);
            w.write_record(&columns)?;
            for row in cells {
                w.write_record(&row)?;
            }
            w.flush()?;
        }
        OutputFormat::Table => {
            let header: Vec<&str> = columns.iter().map(String::as_str).collect();
            writeln!(out, "{}", table(Some(&header), cells.collect(), &[]))?;
        }
        OutputFormat::Jsonl => {}
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

    fn rows() -> Vec<serde_json::Value> {
        vec![
            serde_json::json!({"ts": "2026-11-22T05:00:00Z", "entity_id": "d1", "event_id": "e1", "t": 21.5, "note": "a,\"b\""}),
            serde_json::json!({"ts": "2026-11-22T05:00:01Z", "entity_id": "d1", "event_id": "e2", "t": 22}),
        ]
    }

    fn render(format: OutputFormat) -> String {
        let mut out = Vec::new();
        let schema = RouterConfig::with_prefix("x");
        query_rows(&mut out, &rows(), format, &schema).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn query_csv_puts_key_columns_first_and_quotes_as_before() {
        assert_eq!(
            render(OutputFormat::Csv),
            "ts,entity_id,event_id,note,t\n\
             2026-11-22T05:00:00Z,d1,e1,\"a,\"\"b\"\"\",21.5\n\
             2026-11-22T05:00:01Z,d1,e2,,22\n"
        );
    }

    #[test]
    fn query_table_and_jsonl_keep_every_value() {
        let t = render(OutputFormat::Table);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("ts "), "{t}");
        assert!(
            lines[1].contains("a,\"b\"") && lines[1].ends_with("21.5"),
            "{t}"
        );
        let j = render(OutputFormat::Jsonl);
        assert_eq!(j.lines().count(), 2);
        assert!(j.contains("\"event_id\":\"e2\""), "{j}");
    }
}
