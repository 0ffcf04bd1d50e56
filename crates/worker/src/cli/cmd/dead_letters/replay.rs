//! `tidemark dead-letters replay`: entries back through the current
//! config's router and writer (the data path `run` uses), each removed from
//! its destination only once its event is stored; one that fails again
//! stays, with its new reason.
//!
//! The data path dead-letters into a file of this command's own, never into
//! the destination being replayed: which entries failed again (and why) is
//! read back from it, so the destination gets at most one entry per record.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use chrono::Utc;
use serde::Serialize;
use tidemark_consumer::{Ack, AckTarget, Record};
use tidemark_schema::route::{RouteCache, Router};
use tokio::sync::mpsc;

use super::super::render::{self, Output, outln};
use super::{Destination, Filter, Stored, read_all, read_file, read_queue, release};

/// Seconds the messages a replay reads stay invisible: its whole run, so
/// no other reader takes them meanwhile; each is deleted or released at
/// the end.
const SQS_REPLAY_VISIBILITY_SECS: i32 = 900;

async fn sqs() -> Result<aws_sdk_sqs::Client> {
    Ok(aws_sdk_sqs::Client::new(&super::super::sdk().await?))
}
use crate::config::Config;
use crate::deadletter::{DeadLetter, DeadLetterConfig};
use crate::run::DataPath;

/// Acknowledgements nobody waits for: the data path's report and its
/// dead-letter file say what became of each record.
struct Ignore;

impl AckTarget for Ignore {
    fn ack(&self, _serial: u64) {}
}

/// What `--dry-run` says of one entry.
#[derive(Debug, Serialize)]
struct Planned {
    id: String,
    position: String,
    was: String,
    /// `store` or `fail`.
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pk: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sk: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// What `replay` did.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) selected: usize,
    pub(crate) stored: usize,
    pub(crate) failed_again: usize,
    /// Entries whose payload is not whole (truncated, no S3 copy): left as
    /// they are, since replaying a part would store a wrong event.
    pub(crate) not_replayable: usize,
}

/// An entry's whole payload, or why it cannot be replayed.
async fn payload(e: &DeadLetter) -> Result<Vec<u8>, String> {
    if e.payload_truncated && e.payload_s3.is_none() {
        return Err("payload truncated (only its first bytes were kept)".into());
    }
    super::full_payload(e)
        .await
        .map_err(|err| format!("{err:#}"))
}

/// `--dry-run`: routes every entry as `run` would now, writes nothing.
async fn plan(config: &Config, entries: &[Stored]) -> Result<Vec<Planned>> {
    let router = Router::new(config.schema.clone())?;
    let mut cache = RouteCache::default();
    let now = Utc::now();
    let mut out = Vec::new();
    for s in entries {
        let e = &s.entry;
        let mut p = Planned {
            id: s.id.clone(),
            position: e.position(),
            was: e.reason.to_string(),
            outcome: "fail",
            table: None,
            pk: None,
            sk: None,
            reason: None,
            error: None,
        };
        match payload(e).await {
            Err(why) => {
                p.reason = Some("not_replayable".into());
                p.error = Some(why);
            }
            Ok(data) => {
                match router.route(&data, &e.source, e.inner.unwrap_or(0), now, &mut cache) {
                    Ok(r) => {
                        p.outcome = "store";
                        p.table = Some(r.new.table.to_string());
                        p.pk = Some(r.new.key.pk().to_owned());
                        p.sk = Some(r.new.key.sk().to_owned());
                    }
                    Err(err) => {
                        p.reason = Some(err.reason().to_string());
                        p.error = Some(err.to_string());
                    }
                }
            }
        }
        out.push(p);
    }
    Ok(out)
}

pub(crate) async fn run(
    config: &Config,
    dest: &Destination,
    filter: &Filter,
    dry_run: bool,
) -> Result<()> {
    let now = Utc::now();
    let (entries, others): (Vec<Stored>, Vec<Stored>) = match dest {
        // Kept invisible until each is deleted or released below.
        Destination::Sqs(url) => {
            let client = sqs().await?;
            read_queue(&client, url, SQS_REPLAY_VISIBILITY_SECS).await?
        }
        _ => read_all(dest).await?,
    }
    .into_iter()
    .partition(|s| filter.matches(&s.entry, now));
    if let Destination::Sqs(url) = dest {
        release(&sqs().await?, url, &others).await;
        if dry_run {
            release(&sqs().await?, url, &entries).await;
        }
    }
    if dry_run {
        let planned = plan(config, &entries).await?;
        let store = planned.iter().filter(|p| p.outcome == "store").count();
        let output = super::super::output(Output::Table);
        let rows = planned
            .iter()
            .map(|p| {
                let to = match (&p.table, &p.pk, &p.sk) {
                    (Some(t), Some(pk), Some(sk)) => format!("{t} {pk} {sk}"),
                    _ => format!(
                        "{}: {}",
                        p.reason.as_deref().unwrap_or_default(),
                        p.error.as_deref().unwrap_or_default()
                    ),
                };
                vec![p.id.clone(), p.was.clone(), p.outcome.into(), to]
            })
            .collect();
        render::print_rows(
            &["ID", "WAS", "WOULD", "WHERE / WHY"],
            rows,
            &[],
            output,
            &planned,
        )?;
        if output == Output::Table {
            outln!(
                "dry run: {} entries, {store} would be stored, {} would stay (nothing written)",
                planned.len(),
                planned.len() - store
            )?;
        }
        return Ok(());
    }
    let summary = replay(config, dest, entries).await?;
    outln!(
        "replayed {} entries from {dest}: {} stored and removed, {} failed again (kept with their new reason), {} not replayable (kept)",
        summary.selected,
        summary.stored,
        summary.failed_again,
        summary.not_replayable
    )?;
    if summary.failed_again + summary.not_replayable > 0 {
        return Err(super::super::Failed(format!(
            "{} of {} entries were not stored (see `tidemark dead-letters list`)",
            summary.failed_again + summary.not_replayable,
            summary.selected
        ))
        .into());
    }
    Ok(())
}

/// Stores what it can, then rewrites the destination: stored entries
/// removed, failed ones replaced by their new entry.
pub(crate) async fn replay(
    config: &Config,
    dest: &Destination,
    entries: Vec<Stored>,
) -> Result<Summary> {
    let mut summary = Summary {
        selected: entries.len(),
        ..Summary::default()
    };
    let scratch = std::env::temp_dir().join(format!(
        "tidemark-replay-{}-{}.jsonl",
        std::process::id(),
        Utc::now().timestamp_millis()
    ));
    let mut cfg = config.clone();
    cfg.dead_letters = DeadLetterConfig::File {
        path: scratch.clone(),
    };
    let sdk = super::super::sdk().await?;
    let data = DataPath::start(&cfg, &sdk).await?;
    let (tx, rx) = mpsc::channel(16);
    let pipe = tokio::spawn(data.run(rx));
    let bar = super::super::progress_bar(entries.len() as u64, "{bar:40} {pos}/{len} entries");
    let target: Arc<dyn AckTarget> = Arc::new(Ignore);
    let mut sent = Vec::new();
    let mut skipped = Vec::new();
    for (n, s) in entries.into_iter().enumerate() {
        let data = match payload(&s.entry).await {
            Ok(d) => d,
            Err(why) => {
                tracing::warn!(id = %s.id, "not replayed: {why}");
                summary.not_replayable += 1;
                skipped.push(s);
                continue;
            }
        };
        let record = Record {
            origin: s.entry.source.clone(),
            partition_key: String::new(),
            data: data.into(),
            arrival_ms: Utc::now().timestamp_millis(),
            ack: Ack::new(target.clone(), n as u64),
            defect: None,
            inner: s.entry.inner,
        };
        if tx.send(vec![record]).await.is_err() {
            break;
        }
        bar.inc(1);
        sent.push(s);
    }
    drop(tx);
    let report = pipe.await.context("pipeline task")??;
    bar.finish_and_clear();
    // Which failed again, by source position, with their new entry.
    let again: HashMap<String, DeadLetter> = read_file(&scratch)?
        .into_iter()
        .map(|s| (s.entry.position(), s.entry))
        .collect();
    let _ = std::fs::remove_file(&scratch);
    if let Destination::Sqs(url) = dest {
        release(&sqs().await?, url, &skipped).await;
    }
    if report.records as usize != sent.len() {
        bail!(
            "the data path handled {} of {} entries; nothing was removed",
            report.records,
            sent.len()
        );
    }
    let mut outcome = Vec::new();
    for s in sent {
        let new = again.get(&s.entry.position()).cloned();
        match &new {
            Some(_) => summary.failed_again += 1,
            None => summary.stored += 1,
        }
        outcome.push((s, new));
    }
    settle(dest, &outcome).await?;
    Ok(summary)
}

/// Removes the stored entries from `dest` and replaces each failed one by
/// its new entry.
async fn settle(dest: &Destination, outcome: &[(Stored, Option<DeadLetter>)]) -> Result<()> {
    match dest {
        Destination::File(path) => settle_file(path, outcome),
        Destination::Dynamodb(table) => {
            let client = aws_sdk_dynamodb::Client::new(&super::super::sdk().await?);
            let sink = crate::deadletter::DynamoDbSink::new(client.clone(), table.clone());
            for (s, new) in outcome {
                if let Some(new) = new {
                    // The new entry first: the old one goes only once it is written.
                    use crate::deadletter::DeadLetterSink as _;
                    sink.write(std::slice::from_ref(new)).await?;
                    if new.position() == s.entry.position() && new.time == s.entry.time {
                        continue;
                    }
                }
                client
                    .delete_item()
                    .table_name(table)
                    .key(
                        "pk",
                        aws_sdk_dynamodb::types::AttributeValue::S(s.entry.position()),
                    )
                    .key(
                        "sk",
                        aws_sdk_dynamodb::types::AttributeValue::S(s.entry.time.clone()),
                    )
                    .send()
                    .await
                    .map_err(|e| tidemark_consumer::error::AwsError::new("DeleteItem", &e))?;
            }
            Ok(())
        }
        Destination::Sqs(url) => {
            let client = sqs().await?;
            let sink = crate::deadletter::SqsSink::for_queue(client.clone(), url.clone()).await?;
            let mut unchanged = Vec::new();
            for (s, new) in outcome {
                if let Some(new) = new {
                    // Same reason: the message stays as it is (on a FIFO
                    // queue a resend of it could be deduplicated away).
                    if new.reason == s.entry.reason {
                        unchanged.push(s.clone());
                        continue;
                    }
                    // The new entry first: the old message goes only once it is sent.
                    use crate::deadletter::DeadLetterSink as _;
                    sink.write(std::slice::from_ref(new)).await?;
                }
                let Some(handle) = &s.handle else { continue };
                client
                    .delete_message()
                    .queue_url(url)
                    .receipt_handle(handle)
                    .send()
                    .await
                    .map_err(|e| tidemark_consumer::error::AwsError::new("DeleteMessage", &e))?;
            }
            release(&client, url, &unchanged).await;
            Ok(())
        }
        Destination::S3 { bucket, prefix } => settle_bucket(bucket, prefix, outcome).await,
    }
}

/// Each object holding a replayed entry: what it still holds (entries not
/// selected or not replayable, failed ones as their new entry) goes into a
/// new object first; then the object is moved under `<prefix>/replayed/`
/// (copied, then deleted).
async fn settle_bucket(
    bucket: &str,
    prefix: &str,
    outcome: &[(Stored, Option<DeadLetter>)],
) -> Result<()> {
    let client: aws_sdk_s3::Client = crate::sdk::s3_client(&super::super::sdk().await?);
    let by_location: HashMap<&str, &Option<DeadLetter>> = outcome
        .iter()
        .map(|(s, new)| (s.location.as_str(), new))
        .collect();
    let mut keys: Vec<&str> = outcome
        .iter()
        .filter_map(|(s, _)| s.location.strip_prefix(&format!("s3://{bucket}/")))
        .filter_map(|k| k.rsplit_once('#').map(|(k, _)| k))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let writer = crate::deadletter::ObjectWriter::new(
        client.clone(),
        bucket.to_string(),
        prefix.to_string(),
        None,
        "replay",
    );
    for key in keys {
        let mut rest = String::new();
        for (line, e) in super::read_object(&client, bucket, key).await? {
            match by_location.get(format!("s3://{bucket}/{key}#{line}").as_str()) {
                Some(None) => {}
                Some(Some(new)) => rest.push_str(&(serde_json::to_string(new)? + "\n")),
                None => rest.push_str(&(serde_json::to_string(&e)? + "\n")),
            }
        }
        if !rest.is_empty() {
            writer.put(rest.into_bytes()).await?;
        }
        let moved = match key.strip_prefix(&format!("{prefix}/")) {
            Some(tail) => format!("{prefix}/replayed/{tail}"),
            None => format!("{prefix}/replayed/{key}"),
        };
        client
            .copy_object()
            .bucket(bucket)
            .copy_source(format!("{bucket}/{key}"))
            .key(&moved)
            .send()
            .await
            .map_err(|e| tidemark_consumer::error::AwsError::new("CopyObject", &e))?;
        client
            .delete_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| tidemark_consumer::error::AwsError::new("DeleteObject", &e))?;
    }
    Ok(())
}

/// Rewrites the file without the stored entries, failed ones replaced by
/// their new entry; lines appended meanwhile (a worker still writing to
/// it) are kept.
fn settle_file(path: &std::path::Path, outcome: &[(Stored, Option<DeadLetter>)]) -> Result<()> {
    let by_location: HashMap<&str, &Option<DeadLetter>> = outcome
        .iter()
        .map(|(s, new)| (s.location.as_str(), new))
        .collect();
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = String::with_capacity(text.len());
    for (n, line) in text.lines().enumerate() {
        let location = format!("{}:{}", path.display(), n + 1);
        match by_location.get(location.as_str()) {
            None => {
                out.push_str(line);
                out.push('\n');
            }
            Some(None) => {}
            Some(Some(new)) => {
                out.push_str(&serde_json::to_string(new)?);
                out.push('\n');
            }
        }
    }
    let tmp = path.with_extension("replay-tmp");
    std::fs::write(&tmp, out).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}
