//! `tidemark key`: the table and key one event is written to, as `run` would.

use std::collections::BTreeMap;

use anyhow::Result;
use chrono::{DateTime, Utc};
use tidemark_schema::Origin;
use tidemark_schema::route::{RouteCache, Router, RouterConfig};

use super::render::{self, Output};

/// Arguments of `key`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    /// The event, as the JSON the source would deliver.
    #[arg(long)]
    event: String,
    /// "Now" for period checks (RFC 3339); default: the current time.
    #[arg(long)]
    now: Option<DateTime<Utc>>,
}

/// Routes the event with only the config's `[event]` and `[schema]`: no
/// source, no dead letters, no AWS.
pub(crate) fn run(schema: &RouterConfig, args: &Args) -> Result<()> {
    let router = Router::new(schema.clone())?;
    // The same derived id `run` would give a record without an event id that
    // arrived at this position is not knowable here; a fixed CLI origin keeps
    // the output deterministic.
    let origin = Origin::Kinesis {
        stream: "cli".into(),
        shard_id: "shardId-000000000000".into(),
        sequence_number: "0".into(),
        sub_sequence_number: 0,
    };
    let now = args.now.unwrap_or_else(Utc::now);
    let routed = router
        .route(
            args.event.as_bytes(),
            &origin,
            0,
            now,
            &mut RouteCache::default(),
        )?
        .new;
    // `pk` and `sk` are the values of the configured key attributes,
    // whatever they are named.
    let out = BTreeMap::from([
        ("table", routed.table.to_string()),
        ("pk", routed.key.pk().to_owned()),
        ("sk", routed.key.sk().to_owned()),
    ]);
    let output = super::output(Output::Jsonl);
    let rows = out
        .iter()
        .map(|(k, v)| vec![(*k).to_string(), v.clone()])
        .collect();
    render::print_rows(&["FIELD", "VALUE"], rows, &[], output, &out)
}
