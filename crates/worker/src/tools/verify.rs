//! Proof that events are stored: for each event of a manifest (one JSON
//! event per line, as `produce --manifest` writes), compute where `run`
//! writes it and read that item back with BatchGetItem, comparing content.
//!
//! Verification must not knock over the backend it checks (issue 29): the
//! manifest gives every key, so reads are point reads (BatchGetItem, 100 keys
//! a call), never Query pages that cost the emulator seconds each. Calls run
//! with SDK retries off, under an adaptive limit (`Aimd`): it starts at
//! [`VerifyOptions::initial_concurrency`], grows by one per window of fast
//! successes, halves on a timeout, throttle or unprocessed keys, and each
//! such signal pauses new calls for a full-jitter back-off. When no call has
//! succeeded for [`VerifyOptions::unavailable_after`], verification stops
//! with [`VerifyError::Unavailable`], distinct from a report of missing or
//! differing items.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use backon::BackoffBuilder;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::Serialize;
use tidemark_aws_errors::ErrorClass;
use tidemark_schema::route::{RouteCache, Router};

use crate::tools::payloads;
use tidemark_schema::{Item, Origin};
use tokio::time::Instant;

/// Outcome of a verification.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct VerifyReport {
    /// Events in the manifest.
    pub events: u64,
    /// Stored with exactly the expected content.
    pub found: u64,
    /// Not stored.
    pub missing: u64,
    /// Stored under the right key but with other content.
    pub mismatched: u64,
    /// Manifest lines that do not route (would be dead-lettered).
    pub unroutable: u64,
    /// Of `found`, oversized events stored as pointer items
    /// (`schema.oversize = "s3"`) whose payload object in S3 matched the
    /// item's size and SHA-256; a missing object counts as `missing`, an
    /// altered one as `mismatched`.
    pub payloads: u64,
    /// Up to 10 examples of missing or mismatched keys.
    pub examples: Vec<String>,
}

impl VerifyReport {
    /// Whether every event of the manifest is stored as produced.
    pub fn complete(&self) -> bool {
        self.found == self.events
    }
}

/// Errors verifying. Missing or differing items are not errors: they are
/// counted in the [`VerifyReport`].
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The backend answered nothing useful (timeouts, throttles, refused
    /// connections, 5xx) for the whole [`VerifyOptions::unavailable_after`]
    /// window: whether the items are stored is unknown.
    #[error(
        "DynamoDB at {endpoint} unavailable: no successful read for {}s ({failures} calls failed; last error: {last})",
        waited.as_secs()
    )]
    Unavailable {
        /// The endpoint verified against ([`VerifyOptions::endpoint`]).
        endpoint: String,
        /// How long no call succeeded.
        waited: Duration,
        /// Calls that failed in that time.
        failures: u64,
        /// The last failure.
        last: String,
    },
    /// An error retrying cannot fix (access denied, a malformed request).
    #[error("verify: {0}")]
    Failed(String),
}

/// How verification reads: limits, timeouts and the endpoint's name.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The endpoint's name in errors (a URL, or the region's endpoint).
    pub endpoint: String,
    /// Calls in flight at the start.
    pub initial_concurrency: usize,
    /// Most calls in flight, however fast the backend answers.
    pub max_concurrency: usize,
    /// Longest wait for one call (made once: SDK retries are off).
    pub attempt_timeout: Duration,
    /// Give up with [`VerifyError::Unavailable`] after this long without a
    /// successful call.
    pub unavailable_after: Duration,
    /// Advanced by each key read (stored or not); `tidemark verify` shows it.
    pub progress: Option<indicatif::ProgressBar>,
    /// Reads the payloads of pointer items (`schema.oversize = "s3"`);
    /// without it, a manifest holding an oversized event fails to verify.
    pub s3: Option<aws_sdk_s3::Client>,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            endpoint: "the default DynamoDB endpoint".into(),
            initial_concurrency: 2,
            max_concurrency: 8,
            // Generous for the local emulator, which serves one request at
            // a time: a call may wait behind the worker's own.
            attempt_timeout: Duration::from_secs(30),
            unavailable_after: Duration::from_secs(120),
            progress: None,
            s3: None,
        }
    }
}

impl VerifyOptions {
    /// The defaults, with the endpoint named as the SDK resolves it:
    /// `AWS_ENDPOINT_URL_DYNAMODB`, then `AWS_ENDPOINT_URL`, else the region's.
    pub(crate) fn for_sdk(sdk: &aws_config::SdkConfig) -> VerifyOptions {
        let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB")
            .ok()
            .or_else(|| sdk.endpoint_url().map(str::to_owned))
            .unwrap_or_else(|| {
                let region = sdk.region().map(ToString::to_string).unwrap_or_default();
                format!("the DynamoDB endpoint of region {region:?}")
            });
        VerifyOptions {
            endpoint,
            s3: Some(crate::sdk::s3_client(sdk)),
            ..VerifyOptions::default()
        }
    }
}

/// A table's (partition key, sort key) of one item.
type Key = (String, String);

/// Verifies `events` (raw JSON each) against DynamoDB.
pub async fn verify(
    client: &aws_sdk_dynamodb::Client,
    router: &Router,
    events: &[Vec<u8>],
    options: &VerifyOptions,
) -> Result<VerifyReport, VerifyError> {
    let attrs = router.config().key_attributes.clone();
    let origin = Origin::Kinesis {
        stream: "verify".into(),
        shard_id: "verify".into(),
        sequence_number: "0".into(),
        sub_sequence_number: 0,
    };
    // One attempt per call: a timed-out attempt the SDK resent would leave
    // the backend working on the abandoned one as well.
    let conf = client
        .config()
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .timeout_config(crate::sdk::timeouts_with(
            options.attempt_timeout,
            client
                .config()
                .timeout_config()
                .and_then(|t| t.connect_timeout())
                .unwrap_or(crate::sdk::CONNECT_TIMEOUT),
        ))
        .build();
    let once = aws_sdk_dynamodb::Client::from_conf(conf);
    let mut report = VerifyReport::default();
    // Keyed as `run` keys them: each table in the layouts it records (a
    // table from before a shard-count migration keeps its old one).
    let tables: std::collections::BTreeSet<String> = events
        .iter()
        .map(|raw| {
            let at = event_time(router, raw, &origin).timestamp_millis();
            router.naming().table_for(at)
        })
        .collect();
    let layouts = std::sync::Arc::new(tidemark_schema::TableLayouts::for_config(router.config()));
    // Boxed: callers hold `verify` on their own stack. One attempt each,
    // within one attempt's time in all: an unreachable endpoint is reported
    // by the reads below, within `unavailable_after`.
    // Adaptive sharding: each table's splits, as `run` learned them (a
    // table whose splits cannot be read is verified as unsplit: its split
    // entities' events show as missing rather than passing unchecked).
    if router.keys_by_splits() {
        let now_ms = chrono::Utc::now().timestamp_millis();
        for table in &tables {
            let read = tokio::time::timeout(
                options.attempt_timeout,
                Box::pin(crate::run::splits::load(
                    &once,
                    table,
                    &router.config().key_attributes,
                    None,
                )),
            )
            .await;
            let splits = match read {
                Ok(Ok(s)) => s.unwrap_or_default(),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "verifying as if unsplit");
                    Default::default()
                }
                Err(_) => {
                    tracing::warn!(
                        table,
                        "reading the splits timed out: verifying as if unsplit"
                    );
                    Default::default()
                }
            };
            router.splits().set(table, splits, now_ms);
        }
    }
    let recorded = tokio::time::timeout(
        options.attempt_timeout,
        Box::pin(crate::tools::query::layouts(&once, router.config(), tables)),
    )
    .await
    .unwrap_or_else(|_| {
        tracing::warn!("reading the tables' key layouts timed out: verifying with the config's");
        Default::default()
    });
    for (table, strategies) in recorded {
        layouts.set(&table, strategies);
    }
    let router = &router.clone().with_table_layouts(layouts);
    // table -> expected items by (pk, sk)
    let mut expected: HashMap<String, HashMap<Key, Item>> = HashMap::new();
    let mut cache = RouteCache::default();
    for raw in events {
        report.events += 1;
        // Route at the event's own time: placement depends only on the event,
        // and neither the future-skew nor the expiry check should apply here.
        let now = event_time(router, raw, &origin);
        // Stored items come back as attribute maps: compare against the
        // routed item decoded the same way.
        match router
            .route(raw, &origin, 0, now, &mut cache)
            .map(|r| (r.new.item.to_item(), r.new))
        {
            Ok((Ok(item), r)) => {
                expected
                    .entry(r.table.to_string())
                    .or_default()
                    .insert((r.key.pk().to_owned(), r.key.sk().to_owned()), item);
            }
            Ok((Err(_), _)) | Err(_) => report.unroutable += 1,
        }
    }
    let mut jobs = Vec::new();
    for (table, items) in &expected {
        // Sorted, so one call's keys sit together in the table.
        let mut keys: Vec<Key> = items.keys().cloned().collect();
        keys.sort_unstable();
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            jobs.push(Job {
                table: table.clone(),
                keys: chunk.to_vec(),
            });
        }
    }
    let (pk, sk) = (attrs.pk.as_str(), attrs.sk.as_str());
    let stored = drive(jobs, options, |job| batch_get(&once, job, pk, sk)).await?;
    let none = HashMap::new();
    let mut tables: Vec<_> = expected.iter().collect();
    tables.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (table, items) in tables {
        let got = stored.get(table).unwrap_or(&none);
        let mut keys: Vec<_> = items.iter().collect();
        keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, want) in keys {
            match got.get(key) {
                Some(item) if item == want => match payloads::pointer_of(want) {
                    None => report.found += 1,
                    Some(p) => check_payload(options, &p, &mut report).await?,
                },
                Some(_) => {
                    report.mismatched += 1;
                    note(&mut report, format!("mismatch {table} {}|{}", key.0, key.1));
                }
                None => {
                    report.missing += 1;
                    note(&mut report, format!("missing {table} {}|{}", key.0, key.1));
                }
            }
        }
    }
    Ok(report)
}

/// Counts a pointer item found as expected by its payload: found when the
/// object matches its size and SHA-256, else missing or mismatched.
async fn check_payload(
    options: &VerifyOptions,
    p: &payloads::Pointer,
    report: &mut VerifyReport,
) -> Result<(), VerifyError> {
    let Some(s3) = &options.s3 else {
        return Err(VerifyError::Failed(format!(
            "{} is an oversized event's payload and no S3 client was given to check it",
            p.url
        )));
    };
    match tokio::time::timeout(options.attempt_timeout, payloads::fetch(s3, p)).await {
        Ok(Ok(_)) => {
            report.found += 1;
            report.payloads += 1;
        }
        Ok(Err(e @ payloads::PayloadError::Missing { .. })) => {
            report.missing += 1;
            note(report, format!("payload {e}"));
        }
        Ok(Err(e @ payloads::PayloadError::Altered { .. })) => {
            report.mismatched += 1;
            note(report, format!("payload {e}"));
        }
        Ok(Err(e @ payloads::PayloadError::Call { .. })) => {
            return Err(VerifyError::Failed(e.to_string()));
        }
        Err(_) => {
            return Err(VerifyError::Failed(format!(
                "{}: no answer from S3 within {:?}",
                p.url, options.attempt_timeout
            )));
        }
    }
    Ok(())
}

/// Keys per BatchGetItem call (DynamoDB's limit).
const BATCH_GET_KEYS: usize = 100;

/// One BatchGetItem's worth of keys in one table.
#[derive(Debug, Clone)]
struct Job {
    table: String,
    keys: Vec<Key>,
}

/// What one call returned.
#[derive(Debug, Default)]
struct Read {
    /// Items found, by key.
    items: HashMap<Key, Item>,
    /// Keys DynamoDB did not read this time (throttled or over its limit).
    unprocessed: Vec<Key>,
}

/// Why one call failed.
#[derive(Debug)]
enum CallError {
    /// Timeouts, throttles, refused connections, 5xx: back off, try again.
    Congestion(String),
    /// The table does not exist: none of its items is stored.
    MissingTable,
    /// Retrying will not help.
    Fatal(String),
}

/// Runs `jobs` through `read` under the adaptive limit and back-off; returns
/// the items found, by table. Generic over `read` so the control loop is
/// tested in simulated time against a scripted backend.
async fn drive<F, Fut>(
    jobs: Vec<Job>,
    options: &VerifyOptions,
    read: F,
) -> Result<HashMap<String, HashMap<Key, Item>>, VerifyError>
where
    F: Fn(Job) -> Fut,
    Fut: Future<Output = Result<Read, CallError>>,
{
    let mut queue: VecDeque<Job> = jobs.into();
    let mut in_flight = FuturesUnordered::new();
    let mut law = Aimd::new(
        options.initial_concurrency,
        options.max_concurrency,
        // A success this fast shows spare capacity; a slower one holds the
        // limit where it is.
        options.attempt_timeout / 10,
    );
    let mut stored: HashMap<String, HashMap<Key, Item>> = HashMap::new();
    let mut last_success = Instant::now();
    let mut resume_at = Instant::now();
    let mut failures = 0u64;
    // Named even when every call is still out at the deadline.
    let mut last_error = String::from("no call finished");
    // Start time and window of the calls in flight, by call number.
    let mut starts: HashMap<u64, (Instant, u64)> = HashMap::new();
    let mut next_call = 0u64;
    loop {
        if Instant::now() >= resume_at {
            while in_flight.len() < law.limit() {
                let Some(job) = queue.pop_front() else { break };
                let window = law.window();
                let call = read(job.clone());
                let id = next_call;
                next_call += 1;
                starts.insert(id, (Instant::now(), window));
                in_flight.push(async move { (id, job, window, call.await) });
            }
        }
        if in_flight.is_empty() && queue.is_empty() {
            return Ok(stored);
        }
        let give_up_at = last_success + options.unavailable_after;
        let done = tokio::select! {
            Some(done) = in_flight.next() => done,
            () = tokio::time::sleep_until(resume_at), if Instant::now() < resume_at => continue,
            () = tokio::time::sleep_until(give_up_at) => {
                // In-flight calls are dropped: nobody waits for them.
                return Err(VerifyError::Unavailable {
                    endpoint: options.endpoint.clone(),
                    waited: options.unavailable_after,
                    failures,
                    last: last_error,
                });
            }
        };
        let (id, job, window, result) = done;
        let now = Instant::now();
        let took = starts.remove(&id).map_or(Duration::ZERO, |(s, _)| now - s);
        // A call out far longer than the others take is likely to time out,
        // and on a backend that serves one request at a time it holds up
        // the rest: cut now rather than when its timeout fires.
        let stalled = starts
            .values()
            .filter(|(s, _)| now - *s > law.fast)
            .map(|(_, w)| *w)
            .max();
        if let Some(w) = stalled {
            law.on_congestion(w);
        }
        let stalled = stalled.is_some();
        match result {
            Ok(read) => {
                last_success = Instant::now();
                law.on_success(took, stalled);
                if let Some(bar) = &options.progress {
                    bar.inc(job.keys.len().saturating_sub(read.unprocessed.len()) as u64);
                }
                stored
                    .entry(job.table.clone())
                    .or_default()
                    .extend(read.items);
                if !read.unprocessed.is_empty() {
                    // DynamoDB read only part: it is at its limit.
                    law.on_congestion(window);
                    resume_at = resume_at.max(Instant::now() + full_jitter(law.backoff()));
                    queue.push_back(Job {
                        table: job.table,
                        keys: read.unprocessed,
                    });
                }
            }
            Err(CallError::MissingTable) => {
                last_success = Instant::now();
                law.on_success(took, stalled);
                if let Some(bar) = &options.progress {
                    bar.inc(job.keys.len() as u64);
                }
            }
            Err(CallError::Congestion(e)) => {
                failures += 1;
                last_error = e;
                law.on_congestion(window);
                resume_at = resume_at.max(Instant::now() + full_jitter(law.backoff()));
                queue.push_front(job);
            }
            Err(CallError::Fatal(e)) => return Err(VerifyError::Failed(e)),
        }
    }
}

/// The concurrency law: additive increase, multiplicative decrease.
///
/// - A fast success adds `1 / limit`, so the limit grows by about one per
///   window of fast calls, up to the cap; not while some call is slow.
/// - A congestion signal halves the limit (never below 1) and lengthens the
///   back-off; signals from calls launched before the last cut count once,
///   so eight calls timing out together halve the limit once, not eight times.
/// - A call still out after the fast threshold, while others finish, is a
///   congestion signal too (its window's one cut), before its timeout fires.
/// - After a cut the limit regrows to one below the level that was cut, and
///   probes that level again only after [`PROBE_AFTER`] successes.
/// - Each success shortens the back-off by one step: one lucky call does not
///   reset it while the backend is still struggling.
#[derive(Debug, Clone)]
pub(crate) struct Aimd {
    limit: f64,
    max: f64,
    fast: Duration,
    /// Back-off steps: the delay cap is `BACKOFF_BASE * 2^(steps - 1)`.
    steps: u32,
    /// Bumped at every cut; a call carries the window it started in.
    window: u64,
    /// The limit when congestion last cut it.
    ceiling: Option<f64>,
    /// Successes since the last cut.
    since_cut: u32,
}

/// Successes after a cut before the limit may again reach the level that
/// caused it: probing that level costs timeouts, so it is done rarely.
const PROBE_AFTER: u32 = 100;

/// First back-off step.
const BACKOFF_BASE: Duration = Duration::from_millis(200);
/// Longest back-off.
const BACKOFF_MAX: Duration = Duration::from_secs(10);

impl Aimd {
    pub(crate) fn new(initial: usize, max: usize, fast: Duration) -> Aimd {
        let max = max.max(1) as f64;
        Aimd {
            limit: (initial.max(1) as f64).min(max),
            max,
            fast,
            steps: 0,
            window: 0,
            ceiling: None,
            since_cut: 0,
        }
    }

    /// Calls allowed in flight.
    pub(crate) fn limit(&self) -> usize {
        self.limit.floor() as usize
    }

    /// The window a call launched now belongs to.
    pub(crate) fn window(&self) -> u64 {
        self.window
    }

    /// A call succeeded after `took`; `stalled` when another call is still
    /// out after longer than the fast threshold (a timeout may be coming, so
    /// this is no time to add load).
    pub(crate) fn on_success(&mut self, took: Duration, stalled: bool) {
        self.since_cut = self.since_cut.saturating_add(1);
        let cap = match self.ceiling {
            Some(c) if self.since_cut < PROBE_AFTER => (c - 1.0).max(1.0).min(self.max),
            _ => self.max,
        };
        if took <= self.fast && !stalled && self.limit < cap {
            self.limit = (self.limit + 1.0 / self.limit).min(cap);
        }
        self.steps = self.steps.saturating_sub(1);
    }

    /// A call launched in `window` timed out or was throttled.
    pub(crate) fn on_congestion(&mut self, window: u64) {
        if window == self.window {
            self.ceiling = Some(self.limit.floor());
            self.since_cut = 0;
            self.limit = (self.limit / 2.0).max(1.0);
            self.steps = (self.steps + 1).min(16);
            self.window += 1;
        }
    }

    /// The current back-off's upper bound (zero when none is due).
    pub(crate) fn backoff(&self) -> Duration {
        match self.steps {
            0 => Duration::ZERO,
            n => BACKOFF_BASE
                .saturating_mul(1 << (n - 1).min(10))
                .min(BACKOFF_MAX),
        }
    }
}

/// A delay drawn uniformly from `[0, cap]` ("full jitter"): clients backing
/// off together spread out instead of returning together.
fn full_jitter(cap: Duration) -> Duration {
    cap.mul_f64(fastrand::f64())
}

/// One BatchGetItem call (consistent) of `job`'s keys.
async fn batch_get(
    client: &aws_sdk_dynamodb::Client,
    job: Job,
    pk: &str,
    sk: &str,
) -> Result<Read, CallError> {
    let ka = KeysAndAttributes::builder()
        .set_keys(Some(key_maps(&job.keys, pk, sk)))
        .consistent_read(true)
        .build()
        .map_err(|e| CallError::Fatal(e.to_string()))?;
    let out = client
        .batch_get_item()
        .request_items(&job.table, ka)
        .send()
        .await
        .map_err(|e| classify(&e))?;
    let items = out
        .responses()
        .and_then(|r| r.get(&job.table))
        .into_iter()
        .flatten()
        .map(|item| (key_of(item, pk, sk), item.clone()))
        .collect();
    let unprocessed = out
        .unprocessed_keys()
        .and_then(|u| u.get(&job.table))
        .map(|k| k.keys().iter().map(|m| key_of(m, pk, sk)).collect())
        .unwrap_or_default();
    Ok(Read { items, unprocessed })
}

/// Sorts a failed call into back off, missing table, or give up, by the
/// shared classifier (one list of throttling codes for the whole worker).
fn classify(e: &SdkError<BatchGetItemError>) -> CallError {
    let text = tidemark_aws_errors::describe(e);
    if e.as_service_error()
        .is_some_and(BatchGetItemError::is_resource_not_found_exception)
    {
        return CallError::MissingTable;
    }
    match tidemark_aws_errors::classify(e) {
        ErrorClass::Retry | ErrorClass::Throttled => CallError::Congestion(text),
        _ => CallError::Fatal(text),
    }
}

/// The key attribute maps of `keys`.
fn key_maps(keys: &[Key], pk: &str, sk: &str) -> Vec<HashMap<String, AttributeValue>> {
    keys.iter()
        .map(|(p, s)| {
            HashMap::from([
                (pk.to_string(), AttributeValue::S(p.clone())),
                (sk.to_string(), AttributeValue::S(s.clone())),
            ])
        })
        .collect()
}

/// The (pk, sk) of a stored item or key map.
fn key_of(item: &HashMap<String, AttributeValue>, pk: &str, sk: &str) -> Key {
    let get = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default()
    };
    (get(pk), get(sk))
}

/// Reads the items of `keys` in `table` (BatchGetItem, unprocessed keys
/// retried, the client's own retries as configured); a missing table holds
/// nothing. For callers that pace themselves (the chaos checker).
pub async fn fetch(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &[(String, String)],
    pk: &str,
    sk: &str,
) -> Result<HashMap<(String, String), Item>, VerifyError> {
    let mut request = key_maps(keys, pk, sk);
    let mut stored = HashMap::new();
    // Unprocessed keys are read again after a back-off with jitter.
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_secs(1))
        .with_jitter()
        .without_max_times()
        .build();
    while !request.is_empty() {
        let ka = KeysAndAttributes::builder()
            .set_keys(Some(request))
            .consistent_read(true)
            .build()
            .map_err(|e| VerifyError::Failed(e.to_string()))?;
        let out = match client
            .batch_get_item()
            .request_items(table, ka)
            .send()
            .await
        {
            Ok(o) => o,
            Err(e) if is_missing_table(&e) => break,
            Err(e) => {
                return Err(VerifyError::Failed(tidemark_aws_errors::describe(&e)));
            }
        };
        for item in out
            .responses()
            .and_then(|r| r.get(table))
            .into_iter()
            .flatten()
        {
            stored.insert(key_of(item, pk, sk), item.clone());
        }
        request = out
            .unprocessed_keys()
            .and_then(|u| u.get(table))
            .map(|k| k.keys().to_vec())
            .unwrap_or_default();
        if !request.is_empty() {
            tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(1))).await;
        }
    }
    Ok(stored)
}

fn note(report: &mut VerifyReport, example: String) {
    if report.examples.len() < 10 {
        report.examples.push(example);
    }
}

/// Generic over the operation (BatchGetItem and Query both call it).
fn is_missing_table<E: ProvideErrorMetadata, R: tidemark_aws_errors::HttpStatus>(
    e: &aws_sdk_dynamodb::error::SdkError<E, R>,
) -> bool {
    tidemark_aws_errors::classify(e) == tidemark_aws_errors::ErrorClass::NotFound
}

fn event_time(router: &Router, raw: &[u8], origin: &Origin) -> DateTime<Utc> {
    router
        .extractor()
        .extract(raw, origin)
        .ok()
        .and_then(|e| DateTime::from_timestamp_millis(e.timestamp_ms))
        .unwrap_or_else(Utc::now)
}

#[cfg(test)]
mod tests;
