//! `tidemark dead-letters`: read the dead-letter destination (`list`,
//! `stats`, `show`) from any of its kinds: a JSON-lines file, an SQS queue,
//! a DynamoDB table, or gzip JSON-lines objects in S3; and `replay` it
//! through the current config (`replay.rs`).
//!
//! Reading never removes an entry. On SQS, reading receives every message
//! (invisible to other readers meanwhile, for at most
//! `SQS_VISIBILITY_SECS`) and never deletes one; once all are read, they
//! are made visible again.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tidemark_schema::{Origin, Reason};

mod replay;

use super::query::{Since, parse_since};
use super::render::{self, Output};
use crate::deadletter::{DeadLetter, DeadLetterConfig};

/// Seconds an SQS message received by `list`, `stats` or `show` stays
/// invisible to other readers: long enough for one listing to page through
/// the queue without seeing a message twice; the listing makes them visible
/// again when it is done, and this bounds the wait when it cannot (killed).
const SQS_VISIBILITY_SECS: i32 = 30;

/// Arguments of `dead-letters`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    pub(crate) config: super::ConfigArg,
    #[command(flatten)]
    pub(crate) aws: super::AwsArgs,
    #[command(flatten)]
    from: From,
}

/// Where to read: the config's `[dead_letters]` unless one of these names
/// a destination.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Destination (default: the config's [dead_letters])")]
pub(crate) struct From {
    /// A JSON-lines dead-letter file.
    #[arg(long, global = true, value_name = "PATH")]
    from_file: Option<PathBuf>,
    /// An SQS dead-letter queue (URL).
    #[arg(long, global = true, value_name = "URL")]
    from_queue_url: Option<String>,
    /// A DynamoDB dead-letter table.
    #[arg(long, global = true, value_name = "TABLE")]
    from_table: Option<String>,
    /// An S3 bucket of dead-letter objects (with --from-prefix).
    #[arg(long, global = true, value_name = "BUCKET")]
    from_bucket: Option<String>,
    /// The key prefix of the objects in --from-bucket.
    #[arg(
        long,
        global = true,
        value_name = "PREFIX",
        default_value = "dead-letters"
    )]
    from_prefix: String,
}

#[derive(Debug, Clone, clap::Subcommand)]
enum Action {
    /// One line per entry: id, time, reason, source position, size, error.
    List(Filter),
    /// Counts by reason, by source stream or queue, and by hour.
    Stats(Filter),
    /// One entry whole, its payload decoded (JSON, else text, else base64).
    Show {
        /// The entry's id (as `list` prints it; a unique prefix is enough).
        id: String,
    },
    /// Re-route the entries through the current config and store them;
    /// each is removed from the destination once its event is stored, one
    /// that fails again stays with its new reason. Exit 1 when some stay.
    Replay {
        #[command(flatten)]
        filter: Filter,
        /// Say what would be stored where, and what would fail again and
        /// why; write and remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Which entries: every filter given must match.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct Filter {
    /// Only entries of this reason (repeatable), e.g. missing_field.
    #[arg(long, value_parser = parse_reason)]
    reason: Vec<Reason>,
    /// Only entries dead-lettered since this long ago (`15m`, `2d`) or this
    /// time (RFC 3339).
    #[arg(long, value_parser = parse_since, value_name = "AGO|TIME")]
    since: Option<Since>,
    /// Only entries dead-lettered before this long ago or this time.
    #[arg(long, value_parser = parse_since, value_name = "AGO|TIME")]
    until: Option<Since>,
    /// Only entries from this Kinesis stream (name or ARN; repeatable).
    #[arg(long)]
    stream: Vec<String>,
    /// Only entries from this SQS queue (URL or name; repeatable).
    #[arg(long)]
    queue: Vec<String>,
}

fn parse_reason(s: &str) -> Result<Reason, String> {
    Reason::ALL
        .iter()
        .copied()
        .find(|r| r.as_str() == s)
        .ok_or_else(|| {
            let names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
            format!("`{s}` is not a reason; one of: {}", names.join(", "))
        })
}

/// One entry as read, with where it is kept.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    /// Stable id: the same entry has the same id on every read.
    pub(crate) id: String,
    pub(crate) entry: DeadLetter,
    /// Where it is kept: `file:line`, the SQS message id, the DynamoDB key,
    /// or `s3://bucket/key#line`.
    pub(crate) location: String,
    /// SQS: the receipt handle that deletes or releases the message.
    pub(crate) handle: Option<String>,
}

/// The id of an entry: a hash of its source position, time and reason
/// (16 hex digits), the same whichever destination holds it.
pub(crate) fn entry_id(e: &DeadLetter) -> String {
    let mut h = Sha256::new();
    h.update(e.position().as_bytes());
    h.update(b"\n");
    h.update(e.time.as_bytes());
    h.update(b"\n");
    h.update(e.reason.as_str().as_bytes());
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn stored(entry: DeadLetter, location: String) -> Stored {
    Stored {
        id: entry_id(&entry),
        entry,
        location,
        handle: None,
    }
}

/// The stream or queue name an entry came from.
fn source_name(o: &Origin) -> String {
    match o {
        Origin::Kinesis { stream, .. } => super::stream_name(stream),
        Origin::Sqs { queue, .. } => queue_name(queue).to_string(),
    }
}

fn queue_name(q: &str) -> &str {
    q.trim_end_matches('/').rsplit('/').next().unwrap_or(q)
}

impl Filter {
    /// Whether `e` passes, as of `now`.
    fn matches(&self, e: &DeadLetter, now: DateTime<Utc>) -> bool {
        if !self.reason.is_empty() && !self.reason.contains(&e.reason) {
            return false;
        }
        let at = |s: Since| match s {
            Since::At(t) => t,
            Since::Ago(d) => now - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX),
        };
        if self.since.is_some() || self.until.is_some() {
            let Ok(t) = DateTime::parse_from_rfc3339(&e.time) else {
                return false;
            };
            let t = t.with_timezone(&Utc);
            if self.since.is_some_and(|s| t < at(s)) || self.until.is_some_and(|u| t >= at(u)) {
                return false;
            }
        }
        if self.stream.is_empty() && self.queue.is_empty() {
            return true;
        }
        match &e.source {
            Origin::Kinesis { stream, .. } => self
                .stream
                .iter()
                .any(|s| super::stream_name(s) == super::stream_name(stream)),
            Origin::Sqs { queue, .. } => self
                .queue
                .iter()
                .any(|q| queue_name(q) == queue_name(queue)),
        }
    }
}

/// A dead-letter destination to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Destination {
    File(PathBuf),
    Sqs(String),
    Dynamodb(String),
    S3 { bucket: String, prefix: String },
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::File(p) => write!(f, "file {}", p.display()),
            Destination::Sqs(q) => write!(f, "queue {q}"),
            Destination::Dynamodb(t) => write!(f, "table {t}"),
            Destination::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}/"),
        }
    }
}

impl From {
    /// The destination the flags name, if any (at most one).
    fn destination(&self) -> Result<Option<Destination>> {
        let mut named = Vec::new();
        if let Some(p) = &self.from_file {
            named.push(Destination::File(p.clone()));
        }
        if let Some(q) = &self.from_queue_url {
            named.push(Destination::Sqs(q.clone()));
        }
        if let Some(t) = &self.from_table {
            named.push(Destination::Dynamodb(t.clone()));
        }
        if let Some(b) = &self.from_bucket {
            named.push(Destination::S3 {
                bucket: b.clone(),
                prefix: self.from_prefix.trim_matches('/').to_string(),
            });
        }
        if named.len() > 1 {
            return Err(super::Usage(
                "name one destination: --from-file, --from-queue-url, --from-table or --from-bucket"
                    .into(),
            )
            .into());
        }
        Ok(named.pop())
    }
}

impl Destination {
    /// The configured destination.
    pub(crate) fn of(c: &DeadLetterConfig) -> Self {
        match c {
            DeadLetterConfig::File { path } => Destination::File(path.clone()),
            DeadLetterConfig::Sqs { queue_url, .. } => Destination::Sqs(queue_url.clone()),
            DeadLetterConfig::Dynamodb { table, .. } => Destination::Dynamodb(table.clone()),
            DeadLetterConfig::S3 { bucket, prefix, .. } => Destination::S3 {
                bucket: bucket.clone(),
                prefix: prefix.clone(),
            },
        }
    }
}

/// Every entry of `dest` (S3: those not yet moved under `replayed/`).
pub(crate) async fn read_all(dest: &Destination) -> Result<Vec<Stored>> {
    match dest {
        Destination::File(path) => read_file(path),
        Destination::Dynamodb(table) => {
            let client = aws_sdk_dynamodb::Client::new(&super::sdk().await?);
            read_table(&client, table).await
        }
        Destination::Sqs(url) => {
            let client = aws_sdk_sqs::Client::new(&super::sdk().await?);
            let entries = read_queue(&client, url, SQS_VISIBILITY_SECS).await?;
            release(&client, url, &entries).await;
            Ok(entries)
        }
        Destination::S3 { bucket, prefix } => {
            let client = crate::sdk::s3_client(&super::sdk().await?);
            read_bucket(&client, bucket, prefix).await
        }
    }
}

fn parse_entry(text: &str, location: &str) -> Result<DeadLetter> {
    serde_json::from_str(text).with_context(|| format!("{location}: not a dead-letter entry"))
}

pub(crate) fn read_file(path: &std::path::Path) -> Result<Vec<Stored>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        // No file yet: nothing was dead-lettered.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let location = format!("{}:{}", path.display(), n + 1);
        out.push(stored(parse_entry(line, &location)?, location));
    }
    Ok(out)
}

async fn read_table(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<Vec<Stored>> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| tidemark_consumer::error::AwsError::new("Scan", &e))?;
        for item in page.items() {
            let key = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
            let location = format!(
                "{table} pk={} sk={}",
                key("pk").unwrap_or_default(),
                key("sk").unwrap_or_default()
            );
            let Some(AttributeValue::S(text)) = item.get("entry") else {
                bail!("{location}: no `entry` attribute");
            };
            out.push(stored(parse_entry(text, &location)?, location));
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => break,
        }
    }
    Ok(out)
}

/// Every message of the queue, each received once and left invisible for
/// `visibility` seconds (the caller releases or deletes them).
pub(crate) async fn read_queue(
    client: &aws_sdk_sqs::Client,
    url: &str,
    visibility: i32,
) -> Result<Vec<Stored>> {
    let mut out: Vec<Stored> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    loop {
        let page = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(visibility)
            .wait_time_seconds(1)
            .send()
            .await
            .map_err(|e| tidemark_consumer::error::AwsError::new("ReceiveMessage", &e))?;
        let messages = page.messages();
        let mut new = 0;
        for m in messages {
            let id = m.message_id().unwrap_or_default().to_string();
            let handle = m.receipt_handle().map(str::to_string);
            // Received again (its visibility ran out): the newest handle
            // is the one that works.
            if let Some(&i) = seen.get(&id) {
                let s: &mut Stored = &mut out[i];
                s.handle = handle;
                continue;
            }
            new += 1;
            let location = format!("{url} message {id}");
            let mut s = stored(
                parse_entry(m.body().unwrap_or_default(), &location)?,
                location,
            );
            s.handle = handle;
            seen.insert(id, out.len());
            out.push(s);
        }
        // Empty, or only messages seen before (their visibility ran out):
        // every message was read.
        if new == 0 {
            break;
        }
    }
    Ok(out)
}

/// Makes the messages read visible again at once, so the next reader (the
/// next `list`, a `replay`) sees them without waiting for the timeout. Best
/// effort: a message not released is visible again after
/// [`SQS_VISIBILITY_SECS`] anyway.
pub(crate) async fn release(client: &aws_sdk_sqs::Client, url: &str, entries: &[Stored]) {
    use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry as Entry;
    let handles: Vec<&str> = entries.iter().filter_map(|s| s.handle.as_deref()).collect();
    for chunk in handles.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                Entry::builder()
                    .id(i.to_string())
                    .receipt_handle(*h)
                    .visibility_timeout(0)
                    .build()
                    .ok()
            })
            .collect();
        let r = client
            .change_message_visibility_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await;
        if let Err(e) = r {
            tracing::warn!(
                "could not make dead-letter messages visible again (they will be in {SQS_VISIBILITY_SECS} s): {}",
                tidemark_consumer::error::AwsError::new("ChangeMessageVisibilityBatch", &e)
            );
        }
    }
}

async fn read_bucket(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
) -> Result<Vec<Stored>> {
    let mut out = Vec::new();
    let replayed = format!("{prefix}/replayed/");
    let mut pages = client
        .list_objects_v2()
        .bucket(bucket)
        .prefix(format!("{prefix}/"))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page =
            page.map_err(|e| tidemark_consumer::error::AwsError::new("ListObjectsV2", &e))?;
        for o in page.contents() {
            let Some(key) = o.key() else { continue };
            if key.starts_with(&replayed) || !key.ends_with(".jsonl.gz") {
                continue;
            }
            for (line, e) in read_object(client, bucket, key).await? {
                out.push(stored(e, format!("s3://{bucket}/{key}#{line}")));
            }
        }
    }
    Ok(out)
}

/// The entries of one gzip JSON-lines object, with their line numbers.
pub(crate) async fn read_object(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
) -> Result<Vec<(usize, DeadLetter)>> {
    let object = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| tidemark_consumer::error::AwsError::new("GetObject", &e))?;
    let bytes = object
        .body
        .collect()
        .await
        .with_context(|| format!("reading s3://{bucket}/{key}"))?
        .into_bytes();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut text)
        .with_context(|| format!("s3://{bucket}/{key}: not gzip JSON lines"))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let location = format!("s3://{bucket}/{key}#{}", n + 1);
        out.push((n + 1, parse_entry(line, &location)?));
    }
    Ok(out)
}

/// `s3://bucket/key` split.
fn s3_location(url: &str) -> Option<(&str, &str)> {
    url.strip_prefix("s3://")?.split_once('/')
}

/// A line of `list`.
#[derive(Debug, Serialize)]
struct Row<'a> {
    id: &'a str,
    time: &'a str,
    reason: Reason,
    source: String,
    position: String,
    payload_bytes: usize,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    payload_truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_s3: Option<&'a str>,
    error: &'a str,
    location: &'a str,
}

fn row(s: &Stored) -> Row<'_> {
    Row {
        id: &s.id,
        time: &s.entry.time,
        reason: s.entry.reason,
        source: source_name(&s.entry.source),
        position: s.entry.position(),
        payload_bytes: s.entry.payload_bytes,
        payload_truncated: s.entry.payload_truncated,
        payload_s3: s.entry.payload_s3.as_deref(),
        error: &s.entry.error,
        location: &s.location,
    }
}

/// Counts of `stats`.
#[derive(Debug, Default, Serialize, PartialEq)]
pub(crate) struct Stats {
    pub(crate) total: usize,
    pub(crate) first: Option<String>,
    pub(crate) last: Option<String>,
    pub(crate) by_reason: BTreeMap<String, usize>,
    pub(crate) by_source: BTreeMap<String, usize>,
    /// By UTC hour the entry was dead-lettered (`yyyy-mm-ddThh`).
    pub(crate) by_hour: BTreeMap<String, usize>,
}

pub(crate) fn stats(entries: &[Stored]) -> Stats {
    let mut s = Stats::default();
    for e in entries.iter().map(|s| &s.entry) {
        s.total += 1;
        *s.by_reason.entry(e.reason.as_str().into()).or_default() += 1;
        *s.by_source.entry(source_name(&e.source)).or_default() += 1;
        *s.by_hour
            .entry(e.time.get(..13).unwrap_or(&e.time).to_string())
            .or_default() += 1;
        // RFC 3339 UTC with milliseconds: text order is time order.
        if s.first.as_ref().is_none_or(|f| e.time < *f) {
            s.first = Some(e.time.clone());
        }
        if s.last.as_ref().is_none_or(|l| e.time > *l) {
            s.last = Some(e.time.clone());
        }
    }
    s
}

/// The payload for people: the JSON it holds, else its text, else base64.
fn decoded(bytes: &[u8]) -> (&'static str, serde_json::Value) {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) {
        return ("json", v);
    }
    match std::str::from_utf8(bytes) {
        Ok(t) => ("text", serde_json::Value::String(t.into())),
        Err(_) => (
            "base64",
            serde_json::Value::String(base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                bytes,
            )),
        ),
    }
}

/// The entry `id` names (a unique prefix of its id).
fn find<'a>(entries: &'a [Stored], id: &str, dest: &Destination) -> Result<&'a Stored> {
    let hits: Vec<&Stored> = entries.iter().filter(|s| s.id.starts_with(id)).collect();
    match hits.as_slice() {
        [one] => Ok(one),
        [] => Err(super::Failed(format!("no dead-letter entry {id} in {dest}")).into()),
        many => Err(super::Usage(format!(
            "{id} names {} entries ({}); give more of the id",
            many.len(),
            many.iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into()),
    }
}

/// The destination to read (the flags', else the config's) and, for
/// `replay`, the config it routes and writes with.
pub(crate) fn destination(args: &Args) -> Result<(Destination, Option<crate::config::Config>)> {
    let named = args.from.destination()?;
    let replaying = matches!(args.action, Action::Replay { .. });
    let config = if replaying || named.is_none() {
        Some(args.config.load()?)
    } else {
        None
    };
    let dest = match (named, &config) {
        (Some(d), _) => d,
        (None, Some(c)) => Destination::of(&c.dead_letters),
        (None, None) => bail!("no dead-letter destination: give --config or a --from-* flag"),
    };
    Ok((dest, config.filter(|_| replaying)))
}

/// Whether the command calls AWS (a file destination does not).
pub(crate) fn needs_aws(dest: &Destination) -> bool {
    !matches!(dest, Destination::File(_))
}

pub(crate) async fn run(
    dest: &Destination,
    config: Option<&crate::config::Config>,
    args: &Args,
) -> Result<()> {
    if let (Action::Replay { filter, dry_run }, Some(config)) = (&args.action, config) {
        return replay::run(config, dest, filter, *dry_run).await;
    }
    let entries = read_all(dest).await?;
    let now = Utc::now();
    match &args.action {
        Action::List(f) => {
            let mut kept: Vec<&Stored> = entries
                .iter()
                .filter(|s| f.matches(&s.entry, now))
                .collect();
            kept.sort_by(|a, b| a.entry.time.cmp(&b.entry.time).then(a.id.cmp(&b.id)));
            let rows: Vec<Row<'_>> = kept.iter().map(|s| row(s)).collect();
            let cells = rows
                .iter()
                .map(|r| {
                    vec![
                        r.id.to_string(),
                        r.time.to_string(),
                        r.reason.to_string(),
                        r.position.clone(),
                        r.payload_bytes.to_string(),
                        one_line(r.error, 80),
                    ]
                })
                .collect();
            render::print_rows(
                &["ID", "TIME", "REASON", "SOURCE", "BYTES", "ERROR"],
                cells,
                &[4],
                super::output(Output::Table),
                &rows,
            )
        }
        Action::Stats(f) => {
            let kept: Vec<Stored> = entries
                .into_iter()
                .filter(|s| f.matches(&s.entry, now))
                .collect();
            let s = stats(&kept);
            let mut cells = vec![vec!["total".into(), String::new(), s.total.to_string()]];
            for (by, map) in [
                ("reason", &s.by_reason),
                ("source", &s.by_source),
                ("hour", &s.by_hour),
            ] {
                for (k, n) in map {
                    cells.push(vec![by.into(), k.clone(), n.to_string()]);
                }
            }
            render::print_rows(
                &["BY", "VALUE", "ENTRIES"],
                cells,
                &[2],
                super::output(Output::Table),
                &s,
            )
        }
        Action::Show { id } => {
            let s = find(&entries, id, dest)?;
            let payload = full_payload(&s.entry).await?;
            let (encoding, value) = decoded(&payload);
            let mut v = serde_json::to_value(&s.entry)?;
            if let Some(o) = v.as_object_mut() {
                o.remove("payload_base64");
                o.insert("id".into(), s.id.clone().into());
                o.insert("location".into(), s.location.clone().into());
                o.insert("payload_encoding".into(), encoding.into());
                o.insert("payload".into(), value);
            }
            render::print_json(&v, Output::Json)
        }
        Action::Replay { .. } => bail!("replay needs the config (--config)"),
    }
}

/// The whole payload of an entry: from the S3 object its `payload_s3`
/// names when the queue could not hold it.
async fn full_payload(e: &DeadLetter) -> Result<Vec<u8>> {
    let Some(url) = &e.payload_s3 else {
        return Ok(e.payload()?);
    };
    let Some((bucket, key)) = s3_location(url) else {
        bail!("payload_s3 {url:?} is not an s3:// location");
    };
    let client = crate::sdk::s3_client(&super::sdk().await?);
    let position = e.position();
    for (_, whole) in read_object(&client, bucket, key).await? {
        if whole.position() == position && whole.reason == e.reason {
            return Ok(whole.payload()?);
        }
    }
    bail!("{url} holds no entry of {position}")
}

fn one_line(text: &str, max: usize) -> String {
    let flat = text.replace(['\n', '\r'], " ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max - 3).collect();
    format!("{cut}...")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct D {
        #[command(flatten)]
        args: Args,
    }

    fn entry(stream: &str, seq: u32, reason: Reason, time: &str, payload: &[u8]) -> DeadLetter {
        let source = Origin::Kinesis {
            stream: stream.into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: seq.to_string().into(),
            sub_sequence_number: 0,
        };
        let t = DateTime::parse_from_rfc3339(time)
            .unwrap()
            .with_timezone(&Utc);
        DeadLetter::new(source, reason, "why".into(), payload, t)
    }

    fn file(entries: &[DeadLetter]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tidemark-dlcmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.jsonl", entries.len()));
        let text: String = entries
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn filter(argv: &[&str]) -> Filter {
        let mut all = vec!["d", "list"];
        all.extend(argv);
        match D::try_parse_from(all).unwrap().args.action {
            Action::List(f) => f,
            a => panic!("{a:?}"),
        }
    }

    #[test]
    fn a_file_reads_back_with_stable_ids_and_locations() {
        let a = entry(
            "events",
            1,
            Reason::MissingField,
            "2026-11-26T10:00:00.000Z",
            b"{\"x\":1}",
        );
        let b = entry(
            "events",
            2,
            Reason::InvalidJson,
            "2026-11-26T11:30:00.000Z",
            b"{bad",
        );
        let path = file(&[a.clone(), b.clone()]);
        let read = read_file(&path).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].entry, a);
        assert_eq!(read[1].location, format!("{}:2", path.display()));
        assert_eq!(read[0].id, read_file(&path).unwrap()[0].id, "stable");
        assert_ne!(read[0].id, read[1].id);
        assert_eq!(read[0].id.len(), 16);
        // No file: nothing dead-lettered, not an error.
        assert!(
            read_file(&path.with_extension("absent"))
                .unwrap()
                .is_empty()
        );
        // A line that is not an entry is an error naming it.
        let bad = path.with_extension("bad");
        std::fs::write(&bad, "{\"nope\":1}\n").unwrap();
        let e = read_file(&bad).unwrap_err().to_string();
        assert!(e.contains(":1"), "{e}");
    }

    #[test]
    fn filters_select_by_reason_time_and_source() {
        let now = DateTime::parse_from_rfc3339("2026-11-26T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let a = entry(
            "events",
            1,
            Reason::MissingField,
            "2026-11-26T10:00:00.000Z",
            b"1",
        );
        let b = entry(
            "other",
            2,
            Reason::InvalidJson,
            "2026-11-26T11:30:00.000Z",
            b"2",
        );
        let pick = |f: &Filter| {
            [&a, &b]
                .iter()
                .filter(|e| f.matches(e, now))
                .map(|e| e.reason)
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(&filter(&[])).len(), 2);
        assert_eq!(
            pick(&filter(&["--reason", "missing_field"])),
            [Reason::MissingField]
        );
        assert_eq!(pick(&filter(&["--since", "1h"])), [Reason::InvalidJson]);
        assert_eq!(
            pick(&filter(&["--until", "2026-11-26T11:00:00Z"])),
            [Reason::MissingField]
        );
        assert_eq!(
            pick(&filter(&[
                "--stream",
                "arn:aws:kinesis:us-east-1:1:stream/other"
            ])),
            [Reason::InvalidJson]
        );
        assert!(pick(&filter(&["--queue", "q"])).is_empty());
        assert!(D::try_parse_from(["d", "list", "--reason", "nope"]).is_err());
    }

    #[test]
    fn stats_count_by_reason_source_and_hour() {
        let es = [
            entry(
                "events",
                1,
                Reason::MissingField,
                "2026-11-26T10:00:00.000Z",
                b"1",
            ),
            entry(
                "events",
                2,
                Reason::MissingField,
                "2026-11-26T10:59:00.000Z",
                b"1",
            ),
            entry(
                "other",
                3,
                Reason::InvalidJson,
                "2026-11-26T11:30:00.000Z",
                b"2",
            ),
        ];
        let read = read_file(&file(&es)).unwrap();
        let s = stats(&read);
        assert_eq!(s.total, 3);
        assert_eq!(s.by_reason["missing_field"], 2);
        assert_eq!(s.by_source["other"], 1);
        assert_eq!(s.by_hour["2026-11-26T10"], 2);
        assert_eq!(s.first.as_deref(), Some("2026-11-26T10:00:00.000Z"));
        assert_eq!(s.last.as_deref(), Some("2026-11-26T11:30:00.000Z"));
    }

    #[test]
    fn show_finds_by_prefix_and_decodes_payloads() {
        let es = [
            entry(
                "events",
                1,
                Reason::MissingField,
                "2026-11-26T10:00:00.000Z",
                b"1",
            ),
            entry(
                "events",
                2,
                Reason::MissingField,
                "2026-11-26T10:00:00.000Z",
                b"1",
            ),
        ];
        let read = read_file(&file(&es)).unwrap();
        let dest = Destination::File("x".into());
        let id = &read[1].id;
        assert_eq!(find(&read, &id[..10], &dest).unwrap().entry, es[1]);
        assert!(find(&read, "", &dest).is_err(), "ambiguous");
        assert!(find(&read, "zz", &dest).is_err());
        assert_eq!(decoded(b"{\"a\":1}"), ("json", serde_json::json!({"a": 1})));
        assert_eq!(decoded(b"{bad").0, "text");
        assert_eq!(decoded(&[0xff, 0xfe]).0, "base64");
    }

    #[test]
    fn one_destination_flag_at_most() {
        let d = D::try_parse_from(["d", "list", "--from-file", "/x", "--from-table", "t"]).unwrap();
        assert!(d.args.from.destination().is_err());
        let d = D::try_parse_from(["d", "stats", "--from-bucket", "b", "--from-prefix", "/p/"])
            .unwrap();
        assert_eq!(
            d.args.from.destination().unwrap(),
            Some(Destination::S3 {
                bucket: "b".into(),
                prefix: "p".into()
            })
        );
    }
}
