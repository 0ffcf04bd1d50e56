//! The producer: paced PutRecords through the limits proxy, valid events
//! packed into KPL aggregates, poison records alone, refused entries and
//! failed calls sent again until accepted. Remembers what it put: each valid
//! event's bytes, each poison record, and the last position per shard.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use backon::BackoffBuilder;
use chrono::Utc;
use tidemark_consumer::kinesis::Position;
use tidemark_worker::tools::produce::ProduceSpec;

use crate::events::{self, Planned, PoisonKind};

/// Most records per PutRecords call (Kinesis: 500).
const MAX_RECORDS_PER_CALL: usize = 500;
/// Most bytes per PutRecords call (Kinesis: 5 MiB; kept under it).
const MAX_BYTES_PER_CALL: usize = 4 * 1024 * 1024;
/// Events per production round (one or a few PutRecords calls).
const ROUND: usize = 500;
/// How long one batch may keep failing before the run gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(300);

/// What to produce.
#[derive(Debug, Clone)]
pub(crate) struct ProducerSpec {
    /// The generator of valid events.
    pub(crate) events: ProduceSpec,
    /// Which records are poison.
    pub(crate) plan: Vec<Planned>,
    /// User records per KPL aggregate.
    pub(crate) aggregate: usize,
    /// Target duration of the whole production.
    pub(crate) duration: Duration,
    /// The schema's retention (for expired-period poison).
    pub(crate) retention: chrono::Duration,
    /// Late events (scenario `late`): every `every`-th valid event carries
    /// a time from an old period instead of now.
    pub(crate) late: Option<LateEvents>,
    /// Added to this host's clock for the events' time: the late scenario's
    /// worker runs on a faked clock, and its events follow that clock.
    pub(crate) clock_offset: chrono::Duration,
}

/// Which valid events are late, and their time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LateEvents {
    /// Valid event `n` is late when `n % every == 0`.
    pub(crate) every: u64,
    /// Their time: one instant, so they all land in one (frozen) table.
    pub(crate) at: chrono::DateTime<Utc>,
}

/// What was put.
#[derive(Debug, Default)]
pub(crate) struct Produced {
    /// The bytes of every valid event.
    pub(crate) valid: Vec<Vec<u8>>,
    /// Every poison record: index and kind.
    pub(crate) poison: Vec<(u64, PoisonKind)>,
    /// Indices into `valid` of the late events.
    pub(crate) late: Vec<usize>,
    /// Per shard, the last position put (sequence, last sub-sequence).
    pub(crate) last: HashMap<String, Position>,
    /// Kinesis records put (aggregates count once).
    pub(crate) records: u64,
    /// PutRecords entries refused and sent again.
    pub(crate) refused_entries: u64,
    /// PutRecords calls that failed (after the SDK's own retries) and were
    /// sent again.
    pub(crate) failed_calls: u64,
}

/// One Kinesis record to put.
struct Rec {
    key: String,
    data: Vec<u8>,
    /// Index of its last user record (0 for a plain record).
    last_sub: u64,
}

/// Puts everything in `spec.plan`, paced over `spec.duration`; `progress`
/// counts the planned records put so far.
pub(crate) async fn produce(
    client: aws_sdk_kinesis::Client,
    stream: String,
    spec: ProducerSpec,
    progress: Arc<AtomicU64>,
) -> Result<Produced> {
    let mut out = Produced::default();
    let total = spec.plan.len().max(1) as f64;
    let start = Instant::now();
    for (round, chunk) in spec.plan.chunks(ROUND).enumerate() {
        // Paced: round r starts at r/rounds of the target duration.
        let due = spec.duration.mul_f64((round * ROUND) as f64 / total);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let now = Utc::now() + spec.clock_offset;
        let mut recs = Vec::new();
        let mut users: Vec<(String, Vec<u8>)> = Vec::new();
        let flush = |users: &mut Vec<(String, Vec<u8>)>, recs: &mut Vec<Rec>| {
            if users.is_empty() {
                return;
            }
            // The KPL puts an aggregate under its first user record's key.
            let key = users[0].0.clone();
            recs.push(Rec {
                key,
                data: tidemark_consumer::kinesis::kpl_aggregate(users),
                last_sub: users.len() as u64 - 1,
            });
            users.clear();
        };
        for p in chunk {
            match *p {
                Planned::Valid(n) => {
                    let at = match spec.late {
                        Some(l) if n % l.every.max(1) == 0 => {
                            out.late.push(out.valid.len());
                            l.at
                        }
                        _ => now,
                    };
                    let e = spec.events.event(n, at);
                    let bytes = events::valid(&spec.events, n, at);
                    out.valid.push(bytes.clone());
                    users.push((e.device_id, bytes));
                    if users.len() >= spec.aggregate.max(1) {
                        flush(&mut users, &mut recs);
                    }
                }
                Planned::Poison(n, kind) => {
                    out.poison.push((n, kind));
                    recs.push(Rec {
                        key: format!("poison-{n}"),
                        data: events::poison(n, kind, now, spec.retention),
                        last_sub: 0,
                    });
                }
            }
        }
        flush(&mut users, &mut recs);
        out.records += recs.len() as u64;
        put_all(&client, &stream, recs, &mut out).await?;
        progress.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
    Ok(out)
}

/// Puts `recs` in calls within Kinesis's limits, sending refused entries and
/// failed calls again; records each accepted record's shard position.
async fn put_all(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    recs: Vec<Rec>,
    out: &mut Produced,
) -> Result<()> {
    let mut pending = recs;
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .without_max_times()
        .build();
    let started = Instant::now();
    while !pending.is_empty() {
        let mut refused = Vec::new();
        let mut rest = pending.into_iter().peekable();
        while rest.peek().is_some() {
            let mut call = Vec::new();
            let mut bytes = 0;
            while let Some(r) = rest.peek() {
                let size = r.data.len() + r.key.len();
                if call.len() == MAX_RECORDS_PER_CALL
                    || (!call.is_empty() && bytes + size > MAX_BYTES_PER_CALL)
                {
                    break;
                }
                bytes += size;
                if let Some(r) = rest.next() {
                    call.push(r);
                }
            }
            let entries = call
                .iter()
                .map(|r| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(&r.key)
                        .data(Blob::new(r.data.clone()))
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .context("PutRecords entry")?;
            match client
                .put_records()
                .stream_name(stream)
                .set_records(Some(entries))
                .send()
                .await
            {
                Ok(resp) => {
                    for (r, e) in call.into_iter().zip(resp.records()) {
                        match (e.shard_id(), e.sequence_number(), e.error_code()) {
                            (Some(shard), Some(seq), None) => {
                                let pos = Position::new(seq, r.last_sub);
                                let slot = out
                                    .last
                                    .entry(shard.to_string())
                                    .or_insert_with(|| pos.clone());
                                if pos > *slot {
                                    *slot = pos;
                                }
                            }
                            _ => {
                                out.refused_entries += 1;
                                refused.push(r);
                            }
                        }
                    }
                }
                Err(e) => {
                    out.failed_calls += 1;
                    tracing_note(&aws_sdk_kinesis::error::DisplayErrorContext(e).to_string());
                    refused.extend(call);
                }
            }
        }
        pending = refused;
        if !pending.is_empty() {
            if started.elapsed() > GIVE_UP_AFTER {
                bail!(
                    "{} records still not accepted by PutRecords after {GIVE_UP_AFTER:?}",
                    pending.len()
                );
            }
            tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(2))).await;
        }
    }
    Ok(())
}

/// Failed calls are expected (injected faults): shown only when asked for.
fn tracing_note(message: &str) {
    if std::env::var_os("CHAOS_VERBOSE").is_some() {
        eprintln!("chaos: PutRecords failed, sending again: {message}");
    }
}
