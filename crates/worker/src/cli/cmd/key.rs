//! `tidemark key`: where an event lands and what is stored, as `run` writes
//! it: the table, the key and the whole item (DynamoDB JSON), under both
//! layouts during a shard migration; for one event, a file or stdin (one
//! JSON document or NDJSON). An event without an event id takes its id
//! from its source position: `--position` gives it, never a made-up one.
//! With adaptive sharding on, the splits of each event's table are read
//! from DynamoDB first (the only AWS call), so the key shown is the one
//! `run` writes under the current splits.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use tidemark_schema::Origin;
use tidemark_schema::event::derived_event_id;
use tidemark_schema::route::{RouteCache, Routed, Router, RouterConfig};

use super::Usage;
use super::render::{self, Output};

/// Arguments of `key`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["event", "file"])))]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    /// The event, as the JSON the source would deliver.
    #[arg(long)]
    event: Option<String>,
    /// Events from a file (`-`: standard input): one JSON document, or one
    /// event per line (NDJSON).
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// The source position an event without an event id was read at, as its
    /// derived id: `SHARD:SEQUENCE[:SUB]` (Kinesis) or
    /// `sqs:MESSAGE_ID[:INDEX]`; `/N` after it for the Nth event of a
    /// multi-event record.
    #[arg(long, value_name = "POSITION")]
    position: Option<String>,
    /// "Now" for period checks (RFC 3339); default: the current time.
    #[arg(long)]
    now: Option<DateTime<Utc>>,
}

/// One copy of an event as `run` writes it.
#[derive(Debug, Serialize)]
struct Copy {
    table: String,
    pk: String,
    sk: String,
    /// `key` (the layout in force) or `migrate_from` (the old one, during
    /// a shard migration).
    layout: &'static str,
    event_id: String,
    /// `event` (the event's own id) or `position` (derived from
    /// `--position`).
    event_id_from: &'static str,
    /// With adaptive sharding on: partition keys the entity's events
    /// spread over at this event's time (1: not split).
    #[serde(skip_serializing_if = "Option::is_none")]
    fan_out: Option<u32>,
    /// The item, DynamoDB JSON, as stored.
    item: serde_json::Value,
}

/// `--position` as the origin `run` would have.
fn parse_position(p: &str) -> Result<(Origin, u32), Usage> {
    let bad = || {
        Usage(format!(
            "--position {p}: give SHARD:SEQUENCE[:SUB] (e.g. shardId-000000000001:4959...) or sqs:MESSAGE_ID[:INDEX], with /N for the Nth event of a record"
        ))
    };
    let (pos, inner) = match p.rsplit_once('/') {
        Some((pos, n)) => (pos, n.parse().map_err(|_| bad())?),
        None => (p, 0),
    };
    if let Some(rest) = pos.strip_prefix("sqs:") {
        let (id, index) = match rest.rsplit_once(':') {
            Some((id, i)) => (id, i.parse().map_err(|_| bad())?),
            None => (rest, 0),
        };
        if id.is_empty() {
            return Err(bad());
        }
        let origin = Origin::Sqs {
            queue: "cli".into(),
            message_id: id.to_string(),
            index,
        };
        return Ok((origin, inner));
    }
    let parts: Vec<&str> = pos.split(':').collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (shard, seq, sub) = match parts.as_slice() {
        [shard, seq] => (*shard, *seq, 0),
        [shard, seq, sub] if digits(sub) => (*shard, *seq, sub.parse().map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    if !shard.starts_with("shardId-") || !digits(seq) {
        return Err(bad());
    }
    let origin = Origin::Kinesis {
        stream: "cli".into(),
        shard_id: shard.into(),
        sequence_number: seq.into(),
        sub_sequence_number: sub,
    };
    Ok((origin, inner))
}

/// The events of `--event` or `--file`: one JSON document (it may span
/// lines), else one per non-empty line.
fn events(args: &Args) -> Result<Vec<Vec<u8>>> {
    let text = match (&args.event, &args.file) {
        (Some(e), _) => return Ok(vec![e.as_bytes().to_vec()]),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading events from standard input")?;
            s
        }
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        }
        (None, None) => return Err(Usage("give --event or --file".into()).into()),
    };
    if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok() {
        return Ok(vec![text.trim().as_bytes().to_vec()]);
    }
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.as_bytes().to_vec())
        .collect())
}

/// Routes each event with only the config's `[event]` and `[schema]`: no
/// source, no dead letters, no AWS.
pub(crate) fn run(schema: &RouterConfig, args: &Args) -> Result<()> {
    let router = Router::new(schema.clone())?;
    let position = args.position.as_deref().map(parse_position).transpose()?;
    // Stands in for a position only to see whether the event has an id.
    let probe = Origin::Kinesis {
        stream: "cli".into(),
        shard_id: "shardId-probe".into(),
        sequence_number: "0".into(),
        sub_sequence_number: 0,
    };
    let now = args.now.unwrap_or_else(Utc::now);
    let events = events(args)?;
    if router.keys_by_splits() {
        learn_splits(&router, &events, &probe, now)?;
    }
    let mut cache = RouteCache::default();
    let mut copies = Vec::new();
    for (n, data) in events.iter().enumerate() {
        let which = || {
            if n == 0 {
                String::new()
            } else {
                format!(" (event {})", n + 1)
            }
        };
        let own_id = router
            .extractor()
            .extract(data, &probe)
            .map(|e| e.event_id != derived_event_id(&probe, 0))
            .with_context(|| format!("the event{}", which()))?;
        let (origin, inner, from) = match (&position, own_id) {
            (_, true) => (probe.clone(), 0, "event"),
            (Some((origin, inner)), false) => (origin.clone(), *inner, "position"),
            (None, false) => {
                return Err(Usage(format!(
                    "the event{} has no event id ({}): `run` derives it from the record's source position; give --position (the SHARD:SEQUENCE or sqs:MESSAGE_ID it was read at)",
                    which(),
                    schema
                        .event
                        .event_id_field
                        .as_deref()
                        .map_or("no event_id_field is configured".into(), |f| format!("field `{f}`"))
                ))
                .into());
            }
        };
        let routes = router
            .route(data, &origin, inner, now, &mut cache)
            .with_context(|| format!("the event{}", which()))?;
        let attr = &schema.attributes.event_id;
        let fan_out = router.keys_by_splits().then(|| {
            router
                .splits()
                .get(&routes.new.table)
                .zip(router.extractor().extract(data, &origin).ok())
                .map_or(1, |(l, e)| {
                    l.splits.fan_out_at(&e.entity_id, e.timestamp_ms)
                })
        });
        copies.push(copy(&routes.new, attr, "key", from, fan_out)?);
        if let Some(old) = &routes.old {
            copies.push(copy(old, attr, "migrate_from", from, fan_out.map(|_| 1))?);
        }
    }
    let output = super::output(Output::Jsonl);
    let rows = copies
        .iter()
        .map(|c| {
            vec![
                c.table.clone(),
                c.pk.clone(),
                c.sk.clone(),
                c.layout.to_string(),
                format!("{} ({})", c.event_id, c.event_id_from),
            ]
            .into_iter()
            .chain(c.fan_out.map(|f| f.to_string()))
            .collect()
        })
        .collect();
    let headers: &[&str] = if router.keys_by_splits() {
        &["TABLE", "PK", "SK", "LAYOUT", "EVENT ID", "FAN-OUT"]
    } else {
        &["TABLE", "PK", "SK", "LAYOUT", "EVENT ID"]
    };
    render::print_rows(headers, rows, &[], output, &copies)
}

/// Adaptive sharding: reads the splits of the events' tables into the
/// router (as `run` learns them), as of `now`.
fn learn_splits(
    router: &Router,
    events: &[Vec<u8>],
    probe: &Origin,
    now: DateTime<Utc>,
) -> Result<()> {
    let tables: std::collections::BTreeSet<String> = events
        .iter()
        .filter_map(|d| router.extractor().extract(d, probe).ok())
        .map(|e| router.naming().table_for(e.timestamp_ms))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let sdk = super::sdk().await?;
        let client = aws_sdk_dynamodb::Client::new(&sdk);
        for table in tables {
            let splits =
                crate::run::splits::load(&client, &table, &router.config().key_attributes, None)
                    .await
                    .with_context(|| {
                        format!("reading the splits of {table} (schema.adaptive_sharding is on)")
                    })?;
            router
                .splits()
                .set(&table, splits.unwrap_or_default(), now.timestamp_millis());
        }
        Ok(())
    })
}

fn copy(
    r: &Routed,
    event_attr: &str,
    layout: &'static str,
    from: &'static str,
    fan_out: Option<u32>,
) -> Result<Copy> {
    let item: serde_json::Value =
        serde_json::from_slice(r.item.json()).context("the item's DynamoDB JSON")?;
    Ok(Copy {
        table: r.table.to_string(),
        pk: r.key.pk().to_owned(),
        sk: r.key.sk().to_owned(),
        layout,
        event_id: item[event_attr]["S"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        event_id_from: from,
        fan_out,
        item,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_parse_as_derived_ids() {
        let (o, inner) = parse_position("shardId-000000000001:4959:2/3").unwrap();
        assert_eq!(inner, 3);
        assert_eq!(derived_event_id(&o, inner), "shardId-000000000001:4959:2/3");
        let (o, _) = parse_position("shardId-000000000001:4959").unwrap();
        assert_eq!(o.derived_event_id(), "shardId-000000000001:4959:0");
        let (o, _) = parse_position("sqs:abc-def:4").unwrap();
        assert_eq!(o.derived_event_id(), "sqs:abc-def:4");
        for bad in [
            "",
            "nonsense",
            "shardId-1:x",
            "sqs:",
            "shard:1",
            "shardId-1:1:x",
        ] {
            assert!(parse_position(bad).is_err(), "{bad}");
        }
    }
}
