//! The verifier's reads: every produced event read back by key and compared,
//! the period tables' item counts checked for extras, the dead letters matched to the poison records, and every
//! shard's checkpoint compared with the end of the shard.

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result};
use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use tidemark_consumer::kinesis::Position;
use tidemark_consumer::lease::{Checkpoint, LeaseTable};
use tidemark_schema::{Item, Origin, Reason, RouteCache, Router};
use tidemark_worker::deadletter::DeadLetter;

use crate::events::{PoisonKind, find_marker};

/// Every item of a table (consistent scan, all pages).
pub(crate) async fn scan(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let out = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
            })
            .with_context(|| format!("scanning {table}"))?;
        items.extend(out.items().iter().cloned());
        match out.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return Ok(items),
        }
    }
}

/// A table's item count as DescribeTable gives it (exact and live on the
/// local stack; real DynamoDB refreshes it about every six hours).
pub(crate) async fn item_count(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<u64> {
    let out = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string()))
        .with_context(|| format!("DescribeTable {table}"))?;
    let n = out.table().and_then(|t| t.item_count()).unwrap_or(0);
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Every table name (all pages).
pub(crate) async fn tables(client: &aws_sdk_dynamodb::Client) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let mut start: Option<String> = None;
    loop {
        let out = client
            .list_tables()
            .set_exclusive_start_table_name(start.take())
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
            })
            .context("ListTables")?;
        names.extend(out.table_names().iter().cloned());
        match out.last_evaluated_table_name {
            Some(n) => start = Some(n),
            None => return Ok(names),
        }
    }
}

/// Stored items against produced events.
#[derive(Debug, Default, Clone)]
pub(crate) struct ItemReport {
    /// Valid events produced.
    pub(crate) expected: u64,
    /// Items found with exactly the expected content.
    pub(crate) found: u64,
    /// Expected items not found.
    pub(crate) lost: u64,
    /// Items under an expected key with other content.
    pub(crate) mismatched: u64,
    /// Items under keys no event should have (none may exist).
    pub(crate) extra: u64,
    /// Event ids stored under more than one key, beyond the first.
    pub(crate) duplicates: u64,
    /// Period tables scanned.
    pub(crate) tables: Vec<String>,
    /// Up to 10 examples of problems.
    pub(crate) examples: Vec<String>,
}

fn s_attr(item: &Item, name: &str) -> String {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

/// Scans every period table of the run and compares with `valid`.
pub(crate) async fn items(
    client: &aws_sdk_dynamodb::Client,
    router: &Router,
    valid: &[Vec<u8>],
) -> Result<ItemReport> {
    let ka = router.config().key_attributes.clone();
    let event_attr = router.config().attributes.event_id.clone();
    let origin = Origin::Kinesis {
        stream: "chaos".into(),
        shard_id: "chaos".into(),
        sequence_number: "0".into(),
        sub_sequence_number: 0,
    };
    let mut report = ItemReport::default();
    let mut expected: HashMap<(String, String, String), Item> = HashMap::new();
    for raw in valid {
        report.expected += 1;
        // Placement depends only on the event: route it at its own time.
        let ev = router
            .extractor()
            .extract(raw, &origin)
            .map_err(|e| anyhow::anyhow!("a produced valid event does not parse: {e}"))?;
        let at = chrono::DateTime::from_timestamp_millis(ev.timestamp_ms)
            .context("event time out of range")?;
        let r = router
            .route(raw, &origin, 0, at, &mut RouteCache::default())
            .map_err(|e| anyhow::anyhow!("a produced valid event does not route: {e}"))?
            .new;
        let item = r
            .item
            .to_item()
            .map_err(|e| anyhow::anyhow!("a routed item does not decode: {e}"))?;
        if expected
            .insert(
                (
                    r.table.to_string(),
                    r.key.pk().to_owned(),
                    r.key.sk().to_owned(),
                ),
                item,
            )
            .is_some()
        {
            anyhow::bail!("two produced events share a key: the generator is broken");
        }
    }
    let mut names: Vec<String> = tables(client)
        .await?
        .into_iter()
        .filter(|n| router.naming().parse(n).is_some())
        .collect();
    names.sort();
    // Point reads of every expected key (BatchGetItem, 100 a call, 8 calls
    // at a time): moto answers those from a dict, while each Scan or Query
    // page walks the whole table. Anything beyond the expected keys shows
    // as a difference with the table's item count.
    let mut by_table: HashMap<&str, Vec<(String, String)>> = HashMap::new();
    for (t, pk, sk) in expected.keys() {
        by_table
            .entry(t.as_str())
            .or_default()
            .push((pk.clone(), sk.clone()));
    }
    let mut jobs = Vec::new();
    for (t, keys) in &by_table {
        for chunk in keys.chunks(100) {
            jobs.push((*t, chunk));
        }
    }
    let (pk_name, sk_name) = (ka.pk.as_str(), ka.sk.as_str());
    let results: Vec<_> = futures::stream::iter(jobs)
        .map(|(t, chunk)| async move {
            let got =
                tidemark_worker::tools::verify::fetch(client, t, chunk, pk_name, sk_name).await;
            (t, chunk, got)
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut found_in: HashMap<&str, u64> = HashMap::new();
    for (t, chunk, got) in results {
        let got = got.map_err(|e| anyhow::anyhow!("reading {t}: {e}"))?;
        for key in chunk {
            let full = (t.to_string(), key.0.clone(), key.1.clone());
            match (got.get(key), expected.get(&full)) {
                (Some(item), Some(want)) if item == want => report.found += 1,
                (Some(_), _) => {
                    report.mismatched += 1;
                    note(
                        &mut report.examples,
                        format!("mismatch {t} {}|{}", key.0, key.1),
                    );
                }
                (None, _) => {
                    report.lost += 1;
                    note(
                        &mut report.examples,
                        format!("lost {t} {}|{}", key.0, key.1),
                    );
                }
            }
            if got.contains_key(key) {
                *found_in.entry(t).or_default() += 1;
            }
        }
    }
    for table in &names {
        let count = item_count(client, table).await?;
        let found = found_in.get(table.as_str()).copied().unwrap_or(0);
        if count <= found {
            continue;
        }
        // Only on failure: find the extra items (slow on moto) and whether
        // they copy an event stored elsewhere.
        report.extra += count - found;
        let ids: std::collections::HashSet<String> =
            expected.values().map(|i| s_attr(i, &event_attr)).collect();
        for item in scan(client, table).await? {
            let key = (table.clone(), s_attr(&item, &ka.pk), s_attr(&item, &ka.sk));
            if !expected.contains_key(&key) {
                let id = s_attr(&item, &event_attr);
                if ids.contains(&id) {
                    report.duplicates += 1;
                }
                note(
                    &mut report.examples,
                    format!("extra {} {}|{} (event {id})", key.0, key.1, key.2),
                );
            }
        }
    }
    report.tables = names;
    Ok(report)
}

/// The verifier's self test: deletes the stored item of the first valid
/// event and stores a copy of the second under another key.
pub(crate) async fn sabotage(
    client: &aws_sdk_dynamodb::Client,
    router: &Router,
    valid: &[Vec<u8>],
) -> Result<String> {
    let raw = valid.first().context("no valid event to delete")?;
    let origin = Origin::Kinesis {
        stream: "chaos".into(),
        shard_id: "chaos".into(),
        sequence_number: "0".into(),
        sub_sequence_number: 0,
    };
    let r = router
        .route(
            raw,
            &origin,
            0,
            chrono::Utc::now(),
            &mut RouteCache::default(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .new;
    let ka = &router.config().key_attributes;
    client
        .delete_item()
        .table_name(&r.table)
        .key(&ka.pk, AttributeValue::S(r.key.pk().to_owned()))
        .key(&ka.sk, AttributeValue::S(r.key.sk().to_owned()))
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
        })?;
    // And a copy of another event under a key of its own: an extra item
    // that duplicates an event.
    let copy = valid.get(1).context("no second valid event to copy")?;
    let c = router
        .route(
            copy,
            &origin,
            0,
            chrono::Utc::now(),
            &mut RouteCache::default(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .new;
    let mut item = c.item.to_item().map_err(|e| anyhow::anyhow!("{e}"))?;
    item.insert(
        ka.sk.clone(),
        AttributeValue::S(format!("{}#copy", c.key.sk())),
    );
    client
        .put_item()
        .table_name(&c.table)
        .set_item(Some(item))
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
        })?;
    Ok(format!(
        "{} {}|{} and copied {}",
        r.table,
        r.key.pk(),
        r.key.sk(),
        c.key.sk()
    ))
}

fn note(examples: &mut Vec<String>, e: String) {
    if examples.len() < 10 {
        examples.push(e);
    }
}

/// Dead letters against the poison records produced.
#[derive(Debug, Default, Clone)]
pub(crate) struct DeadLetterReport {
    /// Entries in the dead-letter table, by reason.
    pub(crate) by_reason: BTreeMap<String, u64>,
    /// Entries in total (a poison record read twice is dead-lettered twice).
    pub(crate) entries: u64,
    /// Poison records with at least one entry, all with the right reason.
    pub(crate) matched: u64,
    /// Poison records with no entry.
    pub(crate) missing: u64,
    /// Poison records with an entry of another reason.
    pub(crate) wrong_reason: u64,
    /// Entries that are not one of our poison records.
    pub(crate) unexpected: u64,
    /// Up to 10 examples of problems.
    pub(crate) examples: Vec<String>,
}

/// Scans the dead-letter table and matches its entries to `poison`.
pub(crate) async fn dead_letters(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    poison: &[(u64, PoisonKind)],
) -> Result<DeadLetterReport> {
    let mut report = DeadLetterReport::default();
    let mut reasons: HashMap<u64, Vec<Reason>> = HashMap::new();
    for item in scan(client, table).await? {
        report.entries += 1;
        let entry: DeadLetter = match item.get("entry").map(AttributeValue::as_s) {
            Some(Ok(json)) => serde_json::from_str(json).context("a dead-letter entry")?,
            _ => anyhow::bail!("a dead-letter item has no `entry`"),
        };
        *report
            .by_reason
            .entry(entry.reason.as_str().to_string())
            .or_default() += 1;
        match entry.payload().ok().as_deref().and_then(find_marker) {
            Some(n) => reasons.entry(n).or_default().push(entry.reason),
            None => {
                report.unexpected += 1;
                note(
                    &mut report.examples,
                    format!(
                        "unexpected {} at {}: {}",
                        entry.reason, entry.source, entry.error
                    ),
                );
            }
        }
    }
    for (n, kind) in poison {
        match reasons.get(n) {
            None => {
                report.missing += 1;
                note(
                    &mut report.examples,
                    format!("poison {n} ({kind:?}) not dead-lettered"),
                );
            }
            Some(rs) if rs.iter().all(|r| *r == kind.reason()) => report.matched += 1,
            Some(rs) => {
                report.wrong_reason += 1;
                note(
                    &mut report.examples,
                    format!(
                        "poison {n} ({kind:?}) dead-lettered as {rs:?}, expected {}",
                        kind.reason()
                    ),
                );
            }
        }
    }
    Ok(report)
}

/// One shard's end state.
#[derive(Debug, Clone)]
pub(crate) struct ShardEnd {
    /// Shard id.
    pub(crate) shard: String,
    /// Closed by a split or merge.
    pub(crate) closed: bool,
    /// Its lease's checkpoint, as shown.
    pub(crate) checkpoint: String,
    /// Whether that is the shard's end.
    pub(crate) at_end: bool,
}

/// Each shard of the stream with its lease's checkpoint: a closed shard
/// must be at SHARD_END, an open one at the last position put to it (or
/// still at TRIM_HORIZON if nothing was put to it).
pub(crate) async fn checkpoints(
    kinesis: &aws_sdk_kinesis::Client,
    leases: &LeaseTable,
    stream: &str,
    last: &HashMap<String, Position>,
) -> Result<Vec<ShardEnd>> {
    let mut shards = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut req = kinesis.list_shards();
        req = match &token {
            Some(t) => req.next_token(t),
            None => req.stream_name(stream),
        };
        let page = req
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(aws_sdk_kinesis::error::DisplayErrorContext(e).to_string())
            })
            .context("ListShards")?;
        shards.extend(page.shards().iter().cloned());
        match page.next_token() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    let leases = leases.list().await.context("listing leases")?;
    let mut out = Vec::new();
    for s in shards {
        let id = s.shard_id().to_string();
        let closed = s
            .sequence_number_range()
            .is_some_and(|r| r.ending_sequence_number().is_some());
        let cp = leases
            .iter()
            .find(|l| l.key == id)
            .map(|l| l.checkpoint.clone());
        let at_end = match (&cp, closed, last.get(&id)) {
            (Some(Checkpoint::ShardEnd), true, _) => true,
            // Our last known position is a lower bound of the shard's end
            // (a put answered with an error may still have been stored).
            (Some(Checkpoint::At(p)), false, Some(want)) => p >= want,
            (Some(Checkpoint::TrimHorizon), false, None) => true,
            _ => false,
        };
        let shown = match &cp {
            None => "no lease".to_string(),
            Some(Checkpoint::At(p)) => format!("{}.{}", p.sequence, p.sub_sequence),
            Some(other) => format!("{other:?}"),
        };
        out.push(ShardEnd {
            shard: id,
            closed,
            checkpoint: shown,
            at_end,
        });
    }
    Ok(out)
}
