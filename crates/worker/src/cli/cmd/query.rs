//! `tidemark query`: an entity's events, by range or the latest one.

use crate::tools::{payloads, query};
use anyhow::Result;
use chrono::{DateTime, Utc};
use tidemark_schema::query::TimeRange;
use tidemark_schema::route::RouterConfig;

use super::render::{self, Output};

/// Arguments of `query`: the entity, and one form of range.
#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("range")
        .required(true)
        .args(["latest", "from", "since", "last"])
))]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
    /// Entity id (e.g. the device id).
    #[arg(long)]
    entity: String,
    /// Range start (RFC 3339, inclusive); with --to.
    #[arg(long, requires = "to")]
    from: Option<DateTime<Utc>>,
    /// Range end (RFC 3339, inclusive).
    #[arg(long, requires = "from")]
    to: Option<DateTime<Utc>>,
    /// From this long ago (`90s`, `15m`, `1h`, `2d`) or this time (RFC
    /// 3339) until now.
    #[arg(long, value_parser = parse_since, value_name = "AGO|TIME")]
    since: Option<Since>,
    /// The last DURATION until now (`15m`, `1h`): the same as --since DURATION.
    #[arg(long, value_parser = humantime_serde::re::humantime::parse_duration, value_name = "DURATION")]
    last: Option<std::time::Duration>,
    /// Only the newest event (searched newest table first, within retention).
    #[arg(long)]
    latest: bool,
    /// Show oversized events (`schema.oversize = "s3"`) as their pointer
    /// items, without fetching their payloads from S3.
    #[arg(long)]
    no_payloads: bool,
    /// Former name of the global --output (default here: jsonl).
    #[arg(long, value_enum, hide = true)]
    format: Option<Output>,
}

/// `--since`: a duration ago, or a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Since {
    Ago(std::time::Duration),
    At(DateTime<Utc>),
}

pub(crate) fn parse_since(s: &str) -> Result<Since, String> {
    if let Ok(d) = humantime_serde::re::humantime::parse_duration(s) {
        return Ok(Since::Ago(d));
    }
    DateTime::parse_from_rfc3339(s)
        .map(|t| Since::At(t.with_timezone(&Utc)))
        .map_err(|_| format!("`{s}` is neither a duration (15m, 1h) nor an RFC 3339 time"))
}

impl Args {
    /// The range asked for, as of `now`; `None` for --latest.
    fn range(&self, now: DateTime<Utc>) -> Result<Option<TimeRange>> {
        let ago = |d: std::time::Duration| {
            chrono::Duration::from_std(d)
                .map(|d| now - d)
                .map_err(|_| super::Usage(format!("{d:?} is too long ago")))
        };
        let (from, to) = match (self.from, self.to, self.since, self.last) {
            (Some(from), Some(to), _, _) => (from, to),
            (_, _, Some(Since::Ago(d)), _) | (_, _, _, Some(d)) => (ago(d)?, now),
            (_, _, Some(Since::At(t)), _) => (t, now),
            _ => return Ok(None),
        };
        if from > to {
            return Err(
                super::Usage(format!("the range starts ({from}) after it ends ({to})")).into(),
            );
        }
        Ok(Some(TimeRange {
            start_ms: from.timestamp_millis(),
            end_ms: to.timestamp_millis(),
        }))
    }
}

/// Reads with only the config's `[event]` and `[schema]`.
pub(crate) async fn run(schema: &RouterConfig, args: &Args) -> Result<()> {
    let sdk = super::sdk().await?;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let now = Utc::now();
    let items = match args.range(now)? {
        Some(range) => query::range(&client, schema, &args.entity, range).await?,
        None => {
            let retention =
                chrono::Duration::from_std(schema.retention).unwrap_or(chrono::Duration::days(30));
            let range = TimeRange {
                start_ms: (now - retention).timestamp_millis(),
                end_ms: (now
                    + chrono::Duration::from_std(schema.max_future_skew).unwrap_or_default())
                .timestamp_millis(),
            };
            query::latest(&client, schema, &args.entity, range)
                .await?
                .into_iter()
                .collect()
        }
    };
    // An oversized event's payload, byte for byte as the event was read,
    // checked against its pointer's size and SHA-256.
    let payloads = if args.no_payloads {
        vec![None; items.len()]
    } else {
        payloads::fetch_all(&crate::sdk::s3_client(&sdk), &items).await?
    };
    let rows = items
        .iter()
        .zip(payloads)
        .map(|(item, payload)| render::QueryRow::new(query::to_json(item), payload))
        .collect::<Result<Vec<_>>>()?;
    render::query_rows(
        &mut std::io::stdout().lock(),
        &rows,
        super::output(args.format.unwrap_or(Output::Jsonl)),
        schema,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Q {
        #[command(flatten)]
        args: Args,
    }

    fn range(argv: &[&str]) -> Option<TimeRange> {
        let mut all = vec!["q", "--entity", "d"];
        all.extend(argv);
        let now = DateTime::parse_from_rfc3339("2026-11-22T06:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        Q::try_parse_from(all).unwrap().args.range(now).unwrap()
    }

    #[test]
    fn relative_ranges_end_now() {
        let six = 1_795_327_200_000;
        let r = range(&["--since", "1h"]).unwrap();
        assert_eq!((r.start_ms, r.end_ms), (six - 3_600_000, six));
        let r = range(&["--last", "15m"]).unwrap();
        assert_eq!((r.start_ms, r.end_ms), (six - 900_000, six));
        let r = range(&["--since", "2026-11-22T05:30:00Z"]).unwrap();
        assert_eq!((r.start_ms, r.end_ms), (six - 1_800_000, six));
        assert!(range(&["--latest"]).is_none());
        let r = range(&[
            "--from",
            "2026-11-22T05:00:00Z",
            "--to",
            "2026-11-22T05:10:00Z",
        ])
        .unwrap();
        assert_eq!(r.end_ms - r.start_ms, 600_000);
    }

    #[test]
    fn one_form_of_range_is_required() {
        let e = Q::try_parse_from(["q", "--entity", "d"])
            .unwrap_err()
            .to_string();
        for form in ["--latest", "--from", "--since", "--last"] {
            assert!(e.contains(form), "{form}: {e}");
        }
        assert!(Q::try_parse_from(["q", "--entity", "d", "--latest", "--last", "1h"]).is_err());
        assert!(Q::try_parse_from(["q", "--entity", "d", "--since", "soon"]).is_err());
    }
}
