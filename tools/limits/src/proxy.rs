//! The HTTP layer: routes each request by service, parses what the limits
//! need, asks the pure cores, and forwards (or answers) accordingly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde_json::{Map, Value, json};
use tidemark_schema::size::{MAX_BATCH_BYTES, MAX_BATCH_ITEMS, MAX_ITEM_BYTES, wcu_for_size};

use crate::aws_error::{self, DYNAMODB_CONTENT_TYPE, KINESIS_CONTENT_TYPE};
use crate::config::Config;
use crate::ddb_json::{self, JsonRef, Tree};
use crate::dynamo::{CapacityMode, DynamoLimiter, TableReport, TableSpec, Throttle};
use crate::fault::{Fault, Service};
use crate::kinesis::{self, KinesisLimiter, ShardRange, ShardRef, ShardStats};
use crate::sink::{Sink, SinkCounts};

/// Largest request body the proxy reads (DynamoDB's own limit is 16 MB;
/// anything bigger than this is answered without being read in full).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// How long a stream's shard map is trusted before it is listed again.
const SHARD_MAP_TTL: Duration = Duration::from_secs(30);

/// Errors of the proxy's own upstream calls.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream URL is not a valid URI.
    #[error("bad upstream URL '{0}'")]
    BadUpstream(String),
    /// The upstream did not answer.
    #[error("upstream request failed: {0}")]
    Upstream(String),
    /// The upstream answered something unparseable.
    #[error("unexpected upstream answer: {0}")]
    Answer(String),
}

/// A request whose connection should be closed with no response (fault
/// injection). Returning it from the service makes hyper drop the connection.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by fault injection")]
pub struct Dropped;

/// The response type of the proxy.
pub type ProxyResponse = Response<Full<Bytes>>;

/// Request-level DynamoDB counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DynamoCounters {
    /// Write requests answered 200 with every item written.
    pub requests_accepted: u64,
    /// BatchWriteItem requests answered 200 with some items unprocessed.
    pub requests_partial: u64,
    /// Write requests answered ProvisionedThroughputExceededException.
    pub requests_throttled: u64,
    /// Write requests answered ValidationException by the proxy.
    pub requests_rejected: u64,
    /// Items admitted (written, or recorded in sink mode).
    pub items_accepted: u64,
    /// Items refused (returned unprocessed, or in a throttled request).
    pub items_throttled: u64,
    /// Items returned in UnprocessedItems.
    pub items_unprocessed: u64,
    /// Write requests the upstream answered with an error after admission.
    pub upstream_errors: u64,
}

/// Request-level Kinesis counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KinesisCounters {
    /// GetRecords calls with an iterator the proxy never saw (not limited).
    pub get_records_untracked: u64,
    /// Records whose shard could not be found (forwarded unlimited).
    pub put_records_unmapped: u64,
}

/// Fault injection counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FaultCounters {
    /// 5xx answers injected.
    pub errors_injected: u64,
    /// Connections dropped.
    pub connections_dropped: u64,
    /// DynamoDB requests received (any operation), for request-rate figures.
    pub dynamodb_requests: u64,
    /// DynamoDB requests held back by a brownout.
    pub brownout_delayed: u64,
    /// DynamoDB requests on a denied table answered AccessDeniedException.
    pub access_denied: u64,
    /// SQS requests held while SQS hung.
    pub sqs_held: u64,
}

/// A DynamoDB brownout: until `until`, every DynamoDB request is held for
/// `delay` before it is forwarded (an overloaded backend that still does
/// the work of requests its clients gave up on).
#[derive(Debug, Clone, Copy)]
struct Brownout {
    until: Instant,
    delay: Duration,
}

#[derive(Debug)]
struct State {
    ddb: DynamoLimiter,
    kin: KinesisLimiter,
    sink: Sink,
    ddb_counters: DynamoCounters,
    kin_counters: KinesisCounters,
    fault_counters: FaultCounters,
    shard_maps: HashMap<String, Instant>,
    since: Instant,
    rng: fastrand::Rng,
    brownout: Option<Brownout>,
    /// Table whose every DynamoDB request is refused (AccessDenied).
    denied_table: Option<String>,
    /// Until when every SQS request is held.
    sqs_hang_until: Option<Instant>,
}

/// The stats document served at `GET /_limits/stats`.
#[derive(Debug, Clone, Serialize)]
pub struct StatsReport {
    /// Seconds since start or the last reset.
    pub since_reset_secs: f64,
    /// Whether DynamoDB writes are recorded instead of forwarded.
    pub sink_mode: bool,
    /// DynamoDB counters and per-table detail.
    pub dynamodb: DynamoReport,
    /// Kinesis counters and per-shard detail.
    pub kinesis: KinesisReport,
    /// Fault injection counters.
    pub faults: FaultCounters,
}

/// DynamoDB part of the stats.
#[derive(Debug, Clone, Serialize)]
pub struct DynamoReport {
    /// Request-level counters.
    #[serde(flatten)]
    pub counters: DynamoCounters,
    /// Per table: limits, consumed WCU, per-partition counters.
    pub tables: std::collections::BTreeMap<String, TableReport>,
    /// Per table, in sink mode: what was recorded.
    pub sink: std::collections::BTreeMap<String, SinkCounts>,
}

/// Kinesis part of the stats.
#[derive(Debug, Clone, Serialize)]
pub struct KinesisReport {
    /// Request-level counters.
    #[serde(flatten)]
    pub counters: KinesisCounters,
    /// Per `stream/shard` counters.
    pub shards: std::collections::BTreeMap<String, ShardStats>,
}

/// The proxy: configuration, upstream client and the shared limiter state.
#[derive(Debug)]
pub struct Proxy {
    cfg: Config,
    dynamodb: Uri,
    kinesis: Uri,
    sqs: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    state: Mutex<State>,
    /// Requests refused as signed outside `--clock-offset`'s window.
    clock_refused: std::sync::atomic::AtomicU64,
}

fn parse_upstream(s: &str) -> Result<Uri, ProxyError> {
    let uri: Uri = s
        .parse()
        .map_err(|_| ProxyError::BadUpstream(s.to_owned()))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        // The emulators speak plain HTTP; TLS upstreams are out of scope.
        return Err(ProxyError::BadUpstream(format!(
            "{s} (expected http://HOST:PORT)"
        )));
    }
    Ok(uri)
}

/// True when a DynamoDB JSON request body names `table` as its `TableName`.
fn names_table(body: &[u8], table: &str) -> bool {
    let needle = format!("\"TableName\":\"{table}\"");
    body.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn op_of(headers: &HeaderMap) -> Option<(&str, &str)> {
    let target = headers.get("x-amz-target")?.to_str().ok()?;
    target.split_once('.')
}

impl Proxy {
    /// Builds a proxy from a validated configuration.
    pub fn new(cfg: Config) -> Result<Self, ProxyError> {
        let dynamodb = parse_upstream(&cfg.dynamodb)?;
        let kinesis = parse_upstream(&cfg.kinesis)?;
        let sqs = parse_upstream(&cfg.sqs)?;
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build_http();
        let rng = cfg
            .faults
            .fault_seed
            .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        let state = State {
            ddb: DynamoLimiter::new(cfg.dynamo_limits()),
            kin: KinesisLimiter::new(cfg.kinesis_limits()),
            sink: Sink::default(),
            ddb_counters: DynamoCounters::default(),
            kin_counters: KinesisCounters::default(),
            fault_counters: FaultCounters::default(),
            shard_maps: HashMap::new(),
            since: Instant::now(),
            rng,
            brownout: None,
            denied_table: None,
            sqs_hang_until: None,
        };
        Ok(Self {
            cfg,
            dynamodb,
            kinesis,
            sqs,
            client,
            state: Mutex::new(state),
            clock_refused: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counters, not invariants,
        // half-updated: keep serving rather than poisoning every request.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves one request.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<ProxyResponse, Dropped> {
        let (parts, body) = req.into_parts();
        let body = match Limited::new(body, MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return Ok(aws_error::dynamodb_validation(
                    aws_error::DDB_REQUEST_TOO_LARGE,
                ));
            }
        };
        // --clock-offset: judged and stamped by the proxy's own clock.
        let Some(offset) = self.cfg.clock_offset else {
            return self.dispatch(parts, body).await;
        };
        let now = offset.apply(std::time::SystemTime::now());
        let mut resp = match crate::clock::refuse_skewed(&parts.headers, now) {
            Some(refused) => {
                self.clock_refused
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                refused
            }
            None => self.dispatch(parts, body).await?,
        };
        crate::clock::stamp(&mut resp, offset.apply(std::time::SystemTime::now()));
        Ok(resp)
    }

    /// Serves one request whose body was read.
    pub async fn dispatch(&self, parts: Parts, body: Bytes) -> Result<ProxyResponse, Dropped> {
        if parts.uri.path().starts_with("/_limits/") {
            return Ok(self.admin(&parts));
        }
        let service = match op_of(&parts.headers) {
            Some(("DynamoDB_20120810", _)) => Service::DynamoDb,
            Some(("Kinesis_20131202", _)) => Service::Kinesis,
            // SQS's JSON protocol names AmazonSQS; its query protocol has no
            // target and a form body; anything else also goes to SQS, the
            // only service whose older SDKs send plain form posts.
            _ => Service::Sqs,
        };
        let (delay, fault) = {
            let mut st = self.lock();
            let st = &mut *st;
            let mut delay = self.cfg.faults.delay(&mut st.rng);
            if service == Service::DynamoDb
                && let Some(t) = &st.denied_table
                && names_table(&body, t)
            {
                st.fault_counters.access_denied += 1;
                return Ok(aws_error::dynamodb_error(
                    StatusCode::BAD_REQUEST,
                    "AccessDeniedException",
                    &format!(
                        "User: arn:aws:sts::000000000000:assumed-role/task/test is not authorized to perform this operation on resource: table/{t} (denied by the limits proxy)"
                    ),
                ));
            }
            if service == Service::Sqs
                && let Some(until) = st.sqs_hang_until
            {
                let now = Instant::now();
                if now < until {
                    st.fault_counters.sqs_held += 1;
                    // Held until the hang ends, then forwarded (a client
                    // that gave up meanwhile never sees the answer).
                    delay += until - now;
                }
            }
            if service == Service::DynamoDb {
                st.fault_counters.dynamodb_requests += 1;
                if let Some(b) = st.brownout
                    && Instant::now() < b.until
                {
                    st.fault_counters.brownout_delayed += 1;
                    delay += b.delay;
                }
            }
            let fault = self.cfg.faults.draw(service, &mut st.rng);
            match fault {
                Fault::Error(_) => st.fault_counters.errors_injected += 1,
                Fault::Drop => st.fault_counters.connections_dropped += 1,
                Fault::None => {}
            }
            (delay, fault)
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match fault {
            Fault::Drop => return Err(Dropped),
            Fault::Error(code) => return Ok(injected_error(service, code, &parts.headers)),
            Fault::None => {}
        }
        let op = op_of(&parts.headers)
            .map(|(_, op)| op.to_owned())
            .unwrap_or_default();
        let resp = match service {
            Service::DynamoDb => self.dynamodb_op(&op, parts, body).await,
            Service::Kinesis => self.kinesis_op(&op, parts, body).await,
            Service::Sqs => self.passthrough(&self.sqs, &parts, body).await,
        };
        Ok(resp)
    }

    /// Starts a DynamoDB brownout: for `length`, every DynamoDB request is
    /// held `delay` (make it longer than the client's attempt timeout)
    /// before being forwarded. Also `POST /_limits/brownout?secs=S&delay_ms=D`.
    pub fn brownout(&self, length: Duration, delay: Duration) {
        self.lock().brownout = Some(Brownout {
            until: Instant::now() + length,
            delay,
        });
    }

    /// From now on, every DynamoDB request naming `table` (its
    /// `TableName`) is answered with an AccessDeniedException, as IAM
    /// answers once a role's permission on the table is revoked; `None`
    /// lifts it.
    pub fn deny_table(&self, table: Option<&str>) {
        self.lock().denied_table = table.map(str::to_owned);
    }

    /// For `length`, every SQS request is held until the hang ends, then
    /// forwarded (a queue that stops answering for a while).
    pub fn hang_sqs(&self, length: Duration) {
        self.lock().sqs_hang_until = Some(Instant::now() + length);
    }

    fn admin(&self, parts: &Parts) -> ProxyResponse {
        let path = parts.uri.path();
        match (&parts.method, path) {
            (&Method::GET, "/_limits/stats") => {
                let report = self.stats();
                let body = serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
                aws_error::json_response(StatusCode::OK, "application/json", body)
            }
            (&Method::POST, "/_limits/brownout") => {
                let q = parts.uri.query().unwrap_or_default();
                let get = |k: &str| {
                    q.split('&')
                        .filter_map(|kv| kv.split_once('='))
                        .find(|(n, _)| *n == k)
                        .and_then(|(_, v)| v.parse::<u64>().ok())
                };
                match (get("secs"), get("delay_ms")) {
                    (Some(secs), Some(ms)) => {
                        self.brownout(Duration::from_secs(secs), Duration::from_millis(ms));
                        aws_error::json_response(StatusCode::OK, "application/json", "{\"brownout\":true}".into())
                    }
                    _ => aws_error::json_response(
                        StatusCode::BAD_REQUEST,
                        "application/json",
                        "{\"error\":\"use POST /_limits/brownout?secs=S&delay_ms=D\"}".into(),
                    ),
                }
            }
            (&Method::POST, "/_limits/reset") => {
                self.reset();
                aws_error::json_response(StatusCode::OK, "application/json", "{\"reset\":true}".into())
            }
            (&Method::GET, p) if p.starts_with("/_limits/sink/") => {
                let table = &p["/_limits/sink/".len()..];
                let items = self.lock().sink.items(table);
                let body = json!({ "table": table, "count": items.len(), "items": items }).to_string();
                aws_error::json_response(StatusCode::OK, "application/json", body)
            }
            _ => aws_error::json_response(
                StatusCode::NOT_FOUND,
                "application/json",
                json!({"error": "unknown admin path; use GET /_limits/stats, POST /_limits/reset, GET /_limits/sink/TABLE"})
                    .to_string(),
            ),
        }
    }

    /// Requests refused as signed too far from the `--clock-offset` clock.
    pub fn clock_refused(&self) -> u64 {
        self.clock_refused
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The current counters.
    pub fn stats(&self) -> StatsReport {
        let now = Instant::now();
        let mut st = self.lock();
        let tables = st.ddb.report(now).into_iter().collect();
        StatsReport {
            since_reset_secs: now.duration_since(st.since).as_secs_f64(),
            sink_mode: self.cfg.sink,
            dynamodb: DynamoReport {
                counters: st.ddb_counters.clone(),
                tables,
                sink: st.sink.counts(),
            },
            kinesis: KinesisReport {
                counters: st.kin_counters.clone(),
                shards: st.kin.report(),
            },
            faults: st.fault_counters.clone(),
        }
    }

    /// Clears counters and the sink, and forgets tables (their buckets start
    /// afresh when next used). Shard iterator mappings are kept, so readers
    /// in progress stay limited.
    pub fn reset(&self) {
        let mut st = self.lock();
        st.ddb.clear();
        st.kin.reset_stats();
        st.sink.clear();
        st.ddb_counters = DynamoCounters::default();
        st.kin_counters = KinesisCounters::default();
        st.fault_counters = FaultCounters::default();
        st.since = Instant::now();
    }

    // ---- upstream ----

    async fn send(
        &self,
        base: &Uri,
        parts: &Parts,
        body: Bytes,
    ) -> Result<(http::response::Parts, Bytes), ProxyError> {
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let authority = base.authority().map(|a| a.as_str()).unwrap_or_default();
        let uri: Uri = format!("http://{authority}{pq}")
            .parse()
            .map_err(|_| ProxyError::BadUpstream(authority.to_owned()))?;
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = parts.method.clone();
        *req.uri_mut() = uri;
        for (k, v) in &parts.headers {
            if k != header::HOST
                && k != header::CONTENT_LENGTH
                && k != header::TRANSFER_ENCODING
                && k != header::CONNECTION
            {
                req.headers_mut().append(k, v.clone());
            }
        }
        if let Ok(h) = HeaderValue::from_str(authority) {
            req.headers_mut().insert(header::HOST, h);
        }
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| ProxyError::Upstream(e.to_string()))?;
        let (rp, rb) = resp.into_parts();
        let bytes = rb
            .collect()
            .await
            .map_err(|e| ProxyError::Upstream(e.to_string()))?
            .to_bytes();
        Ok((rp, bytes))
    }

    async fn passthrough(&self, base: &Uri, parts: &Parts, body: Bytes) -> ProxyResponse {
        match self.send(base, parts, body).await {
            Ok((rp, rb)) => rebuild(rp, rb, false),
            Err(e) => bad_gateway(&e),
        }
    }

    /// A bare JSON call of our own to an upstream (DescribeTable, ListShards),
    /// carrying the client's Authorization header so the emulator picks the
    /// same account and region.
    async fn own_call(
        &self,
        base: &Uri,
        target: &str,
        content_type: &str,
        auth: &HeaderMap,
        body: Value,
    ) -> Result<(StatusCode, Value), ProxyError> {
        let mut req = Request::new(());
        *req.method_mut() = Method::POST;
        *req.uri_mut() = Uri::from_static("/");
        let h = req.headers_mut();
        h.insert(
            "x-amz-target",
            HeaderValue::from_str(target).map_err(|e| ProxyError::Answer(e.to_string()))?,
        );
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(content_type).map_err(|e| ProxyError::Answer(e.to_string()))?,
        );
        h.extend(auth.clone());
        let (parts, ()) = req.into_parts();
        let (rp, rb) = self
            .send(base, &parts, Bytes::from(body.to_string()))
            .await?;
        let v: Value = serde_json::from_slice(&rb)
            .map_err(|e| ProxyError::Answer(format!("{target}: {e}")))?;
        Ok((rp.status, v))
    }

    // ---- DynamoDB ----

    async fn dynamodb_op(&self, op: &str, parts: Parts, body: Bytes) -> ProxyResponse {
        match op {
            "BatchWriteItem" => self.batch_write(parts, body).await,
            "PutItem" | "DeleteItem" | "UpdateItem" => self.single_write(op, parts, body).await,
            "CreateTable" | "UpdateTable" | "DescribeTable" | "DeleteTable" => {
                match self.send(&self.dynamodb, &parts, body.clone()).await {
                    Ok((rp, rb)) => {
                        if rp.status.is_success() {
                            self.learn_from_description(op, &body, &rb);
                        }
                        rebuild(rp, rb, false)
                    }
                    Err(e) => bad_gateway(&e),
                }
            }
            _ => self.passthrough(&self.dynamodb, &parts, body).await,
        }
    }

    fn learn_from_description(&self, op: &str, req: &[u8], resp: &[u8]) {
        let now = Instant::now();
        if op == "DeleteTable" {
            if let Some(name) = serde_json::from_slice::<Value>(req)
                .ok()
                .and_then(|v| v["TableName"].as_str().map(str::to_owned))
            {
                self.lock().ddb.forget(&name);
            }
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(resp) else {
            return;
        };
        let desc = if op == "DescribeTable" {
            &v["Table"]
        } else {
            &v["TableDescription"]
        };
        if let Some((name, spec)) = parse_description(desc) {
            self.lock().ddb.learn(&name, spec, now);
        }
    }

    /// The spec of `table`, asking the upstream with DescribeTable if the
    /// proxy has not seen it. `Ok(None)`: the table does not exist.
    async fn table_spec(
        &self,
        table: &str,
        auth: &HeaderMap,
    ) -> Result<Option<TableSpec>, ProxyError> {
        if let Some(s) = self.lock().ddb.spec(table) {
            return Ok(Some(s.clone()));
        }
        let (status, v) = self
            .own_call(
                &self.dynamodb,
                "DynamoDB_20120810.DescribeTable",
                DYNAMODB_CONTENT_TYPE,
                auth,
                json!({"TableName": table}),
            )
            .await?;
        if !status.is_success() {
            return Ok(None);
        }
        let Some((name, spec)) = parse_description(&v["Table"]) else {
            return Err(ProxyError::Answer(format!(
                "DescribeTable {table}: no key schema"
            )));
        };
        let mut st = self.lock();
        // Another request may have learned it meanwhile; keep its buckets.
        if st.ddb.spec(&name).is_none() {
            st.ddb.learn(&name, spec.clone(), Instant::now());
        }
        Ok(Some(spec))
    }

    async fn batch_write(&self, parts: Parts, body: Bytes) -> ProxyResponse {
        if body.len() > MAX_BATCH_BYTES {
            self.lock().ddb_counters.requests_rejected += 1;
            return aws_error::dynamodb_validation(aws_error::DDB_REQUEST_TOO_LARGE);
        }
        // Read borrowing from the body: every item is read for its key, size
        // and digest, and as serde_json's `Value` each attribute cost several
        // allocations (then the proxy, which shares the benchmark machine
        // with the client it measures, spent half its CPU building and
        // dropping them). Passthroughs send the original bytes.
        let Ok(doc) = JsonRef::parse(&body) else {
            return self.passthrough(&self.dynamodb, &parts, body.clone()).await;
        };
        let Some(request_items) = doc.get("RequestItems").and_then(Tree::members) else {
            return self.passthrough(&self.dynamodb, &parts, body.clone()).await;
        };
        let request_items: Vec<(&str, &JsonRef<'_>)> = request_items.collect();
        let total: usize = request_items
            .iter()
            .map(|(_, v)| v.as_array().map_or(0, <[_]>::len))
            .sum();
        if total > MAX_BATCH_ITEMS {
            self.lock().ddb_counters.requests_rejected += 1;
            return aws_error::dynamodb_validation(aws_error::DDB_TOO_MANY_ITEMS);
        }
        let auth = auth_headers(&parts.headers);

        // Plan every entry before admitting any: DynamoDB rejects the whole
        // call on any validation error, so nothing may be charged first.
        struct Entry<'a> {
            table: &'a str,
            /// Copied only if it goes back (unprocessed) or on (forwarded).
            request: &'a JsonRef<'a>,
            key: String,
            pk: Vec<u8>,
            wcu: u64,
            put: Option<ddb_json::ItemDigest>,
        }
        let mut plan = Vec::with_capacity(total);
        let mut specs = HashMap::new();
        for (table, reqs) in &request_items {
            let spec = match self.table_spec(table, &auth).await {
                Ok(Some(s)) => s,
                Ok(None) if self.cfg.sink => return aws_error::dynamodb_not_found(),
                // Unknown table or upstream trouble: the emulator gives the
                // real answer (ResourceNotFound...), and nothing is charged.
                _ => return self.passthrough(&self.dynamodb, &parts, body.clone()).await,
            };
            let mut seen: std::collections::HashSet<String, foldhash::fast::RandomState> =
                std::collections::HashSet::default();
            for r in reqs.as_array().into_iter().flatten() {
                let at = |a: &str, b: &str| r.get(a).and_then(|x| x.get(b));
                let (map, put) = if let Some(item) = at("PutRequest", "Item") {
                    (item, true)
                } else if let Some(key) = at("DeleteRequest", "Key") {
                    (key, false)
                } else {
                    return self.passthrough(&self.dynamodb, &parts, body.clone()).await;
                };
                if map.members().is_none() {
                    return self.passthrough(&self.dynamodb, &parts, body.clone()).await;
                }
                let Some(key) =
                    ddb_json::primary_key(map, &spec.hash_key, spec.range_key.as_deref())
                else {
                    if self.cfg.sink {
                        self.lock().ddb_counters.requests_rejected += 1;
                        return aws_error::dynamodb_validation(
                            "The provided key element does not match the schema",
                        );
                    }
                    return self.passthrough(&self.dynamodb, &parts, body.clone()).await;
                };
                if !seen.insert(key.clone()) {
                    self.lock().ddb_counters.requests_rejected += 1;
                    return aws_error::dynamodb_validation(aws_error::DDB_DUPLICATE_KEYS);
                }
                let pk = map
                    .get(&spec.hash_key)
                    .and_then(ddb_json::key_bytes)
                    .unwrap_or_default();
                let (wcu, digest) = if put {
                    let Ok(size) = ddb_json::wire_item_size(map) else {
                        return self.passthrough(&self.dynamodb, &parts, body.clone()).await;
                    };
                    if size > MAX_ITEM_BYTES {
                        self.lock().ddb_counters.requests_rejected += 1;
                        return aws_error::dynamodb_validation(aws_error::DDB_ITEM_TOO_LARGE);
                    }
                    // Digests are only kept in sink mode; skip the hashing otherwise.
                    (
                        wcu_for_size(size),
                        self.cfg.sink.then(|| ddb_json::item_digest(map)),
                    )
                } else {
                    // A delete costs the deleted item's size, which the proxy
                    // cannot see; 1 WCU is the minimum DynamoDB charges.
                    (1, None)
                };
                plan.push(Entry {
                    table,
                    request: r,
                    key,
                    pk,
                    wcu,
                    put: if put {
                        Some(digest.unwrap_or_default())
                    } else {
                        None
                    },
                });
            }
            specs.insert((*table).to_owned(), spec);
        }

        // Admit in request order.
        let now = Instant::now();
        let mut admitted: Vec<&Entry> = Vec::new();
        let mut unprocessed: Map<String, Value> = Map::new();
        let mut first_throttle: Option<(String, Throttle)> = None;
        let mut consumed: HashMap<String, u64> = HashMap::new();
        {
            let mut st = self.lock();
            let st = &mut *st;
            for e in &plan {
                match st.ddb.admit(e.table, &e.pk, e.wcu, now) {
                    Some(Ok(_)) | None => {
                        // None: the table was reset meanwhile; let it through.
                        match consumed.get_mut(e.table) {
                            Some(w) => *w += e.wcu,
                            None => {
                                consumed.insert(e.table.to_owned(), e.wcu);
                            }
                        }
                        admitted.push(e);
                    }
                    Some(Err(t)) => {
                        first_throttle.get_or_insert((e.table.to_owned(), t));
                        if let Some(a) = unprocessed
                            .entry(e.table.to_owned())
                            .or_insert_with(|| Value::Array(vec![]))
                            .as_array_mut()
                        {
                            a.push(e.request.to_value());
                        }
                    }
                }
            }
            let refused = (plan.len() - admitted.len()) as u64;
            st.ddb_counters.items_throttled += refused;
            if admitted.is_empty() && !plan.is_empty() {
                st.ddb_counters.requests_throttled += 1;
            } else {
                st.ddb_counters.items_accepted += admitted.len() as u64;
                st.ddb_counters.items_unprocessed += refused;
                if refused > 0 {
                    st.ddb_counters.requests_partial += 1;
                } else {
                    st.ddb_counters.requests_accepted += 1;
                }
                if self.cfg.sink {
                    for e in &admitted {
                        match &e.put {
                            Some(d) => st.sink.put(e.table, e.key.clone(), *d, false),
                            None => st.sink.delete(e.table, &e.key),
                        }
                    }
                }
            }
        }
        if admitted.is_empty() && !plan.is_empty() {
            let (table, t) = first_throttle.unwrap_or_default_throttle();
            let on_demand = specs
                .get(&table)
                .is_some_and(|s| s.mode == CapacityMode::OnDemand);
            return aws_error::dynamodb_throttle(&table, throttle_reason(t, on_demand), on_demand);
        }

        if self.cfg.sink {
            let mut out = json!({ "UnprocessedItems": unprocessed });
            if doc
                .get("ReturnConsumedCapacity")
                .and_then(Tree::as_str)
                .is_some_and(|s| s != "NONE")
            {
                let cc: Vec<Value> = consumed
                    .iter()
                    .map(|(t, w)| json!({"TableName": t, "CapacityUnits": *w as f64}))
                    .collect();
                out["ConsumedCapacity"] = Value::Array(cc);
            }
            return aws_error::json_response(
                StatusCode::OK,
                DYNAMODB_CONTENT_TYPE,
                out.to_string(),
            );
        }

        if unprocessed.is_empty() {
            // Everything fits: forward the client's bytes untouched.
            let resp = self.send(&self.dynamodb, &parts, body.clone()).await;
            return self.finish_write(resp, None);
        }
        let mut subset: Map<String, Value> = Map::new();
        for e in &admitted {
            if let Some(a) = subset
                .entry(e.table.to_owned())
                .or_insert_with(|| Value::Array(vec![]))
                .as_array_mut()
            {
                a.push(e.request.to_value());
            }
        }
        // The request's other members as they were, with the admitted subset
        // as its RequestItems (the items were converted once, above).
        let mut forward: Map<String, Value> = doc
            .members()
            .into_iter()
            .flatten()
            .filter(|(k, _)| *k != "RequestItems")
            .map(|(k, v)| (k.to_owned(), v.to_value()))
            .collect();
        forward.insert("RequestItems".to_owned(), Value::Object(subset));
        let resp = self
            .send(
                &self.dynamodb,
                &parts,
                Bytes::from(Value::Object(forward).to_string()),
            )
            .await;
        self.finish_write(resp, Some(unprocessed))
    }

    /// Returns the upstream's answer to an admitted write, merging the
    /// proxy's UnprocessedItems into it.
    fn finish_write(
        &self,
        resp: Result<(http::response::Parts, Bytes), ProxyError>,
        ours: Option<Map<String, Value>>,
    ) -> ProxyResponse {
        let (rp, rb) = match resp {
            Ok(r) => r,
            Err(e) => {
                self.lock().ddb_counters.upstream_errors += 1;
                return bad_gateway(&e);
            }
        };
        if !rp.status.is_success() {
            self.lock().ddb_counters.upstream_errors += 1;
            return rebuild(rp, rb, false);
        }
        let Some(ours) = ours else {
            return rebuild(rp, rb, false);
        };
        let Ok(mut v) = serde_json::from_slice::<Value>(&rb) else {
            return rebuild(rp, rb, false);
        };
        if !v.get("UnprocessedItems").is_some_and(Value::is_object) {
            v["UnprocessedItems"] = json!({});
        }
        if let Some(up) = v["UnprocessedItems"].as_object_mut() {
            for (table, reqs) in ours {
                let slot = up.entry(table).or_insert_with(|| Value::Array(vec![]));
                if let (Some(dst), Value::Array(src)) = (slot.as_array_mut(), reqs) {
                    dst.extend(src);
                }
            }
        }
        rebuild(rp, Bytes::from(v.to_string()), true)
    }

    async fn single_write(&self, op: &str, parts: Parts, body: Bytes) -> ProxyResponse {
        let Ok(doc) = serde_json::from_slice::<Value>(&body) else {
            return self.passthrough(&self.dynamodb, &parts, body).await;
        };
        let Some(table) = doc
            .get("TableName")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return self.passthrough(&self.dynamodb, &parts, body).await;
        };
        let auth = auth_headers(&parts.headers);
        let spec = match self.table_spec(&table, &auth).await {
            Ok(Some(s)) => s,
            Ok(None) if self.cfg.sink => return aws_error::dynamodb_not_found(),
            _ => return self.passthrough(&self.dynamodb, &parts, body).await,
        };
        let key_field = if op == "PutItem" { "Item" } else { "Key" };
        let Some(obj) = doc.get(key_field).filter(|v| v.is_object()) else {
            return self.passthrough(&self.dynamodb, &parts, body).await;
        };
        let Some(key) = ddb_json::primary_key(obj, &spec.hash_key, spec.range_key.as_deref())
        else {
            return self.passthrough(&self.dynamodb, &parts, body).await;
        };
        let pk = obj
            .get(&spec.hash_key)
            .and_then(ddb_json::key_bytes)
            .unwrap_or_default();
        let wcu = match op {
            "PutItem" => {
                let Ok(size) = ddb_json::wire_item_size(&doc["Item"]) else {
                    return self.passthrough(&self.dynamodb, &parts, body).await;
                };
                if size > MAX_ITEM_BYTES {
                    self.lock().ddb_counters.requests_rejected += 1;
                    return aws_error::dynamodb_validation(aws_error::DDB_ITEM_TOO_LARGE);
                }
                wcu_for_size(size)
            }
            "UpdateItem" => {
                // DynamoDB charges the larger of the item before and after;
                // the proxy sees only the key and the new values, a lower bound.
                let key_size = ddb_json::wire_item_size(&doc["Key"]).unwrap_or(0);
                let values = doc
                    .get("ExpressionAttributeValues")
                    .map(|v| ddb_json::wire_item_size(v).unwrap_or(0))
                    .unwrap_or(0);
                wcu_for_size(key_size + values)
            }
            _ => 1,
        };
        let now = Instant::now();
        let verdict = {
            let mut st = self.lock();
            let st = &mut *st;
            let v = st.ddb.admit(&table, &pk, wcu, now);
            match v {
                Some(Err(_)) => {
                    st.ddb_counters.requests_throttled += 1;
                    st.ddb_counters.items_throttled += 1;
                }
                _ => {
                    st.ddb_counters.requests_accepted += 1;
                    st.ddb_counters.items_accepted += 1;
                    if self.cfg.sink {
                        match op {
                            "PutItem" => {
                                st.sink
                                    .put(&table, key, ddb_json::item_digest(&doc["Item"]), false)
                            }
                            "UpdateItem" => {
                                let d = ddb_json::item_digest(&json!({
                                    "UpdateExpression": doc.get("UpdateExpression"),
                                    "ExpressionAttributeValues": doc.get("ExpressionAttributeValues"),
                                    "AttributeUpdates": doc.get("AttributeUpdates"),
                                }));
                                st.sink.put(&table, key, d, true);
                            }
                            _ => st.sink.delete(&table, &key),
                        }
                    }
                }
            }
            v
        };
        if let Some(Err(t)) = verdict {
            let on_demand = spec.mode == CapacityMode::OnDemand;
            return aws_error::dynamodb_throttle(&table, throttle_reason(t, on_demand), on_demand);
        }
        if self.cfg.sink {
            let mut out = json!({});
            if doc
                .get("ReturnConsumedCapacity")
                .and_then(Value::as_str)
                .is_some_and(|s| s != "NONE")
            {
                out["ConsumedCapacity"] = json!({"TableName": table, "CapacityUnits": wcu as f64});
            }
            return aws_error::json_response(
                StatusCode::OK,
                DYNAMODB_CONTENT_TYPE,
                out.to_string(),
            );
        }
        let resp = self.send(&self.dynamodb, &parts, body).await;
        self.finish_write(resp, None)
    }

    // ---- Kinesis ----

    async fn kinesis_op(&self, op: &str, parts: Parts, body: Bytes) -> ProxyResponse {
        match op {
            "GetShardIterator" => {
                let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                match self.send(&self.kinesis, &parts, body).await {
                    Ok((rp, rb)) => {
                        if rp.status.is_success()
                            && let (Some(stream), Some(shard), Ok(v)) = (
                                kinesis::stream_name(
                                    req["StreamName"].as_str(),
                                    req["StreamARN"].as_str(),
                                ),
                                req["ShardId"].as_str(),
                                serde_json::from_slice::<Value>(&rb),
                            )
                            && let Some(it) = v["ShardIterator"].as_str()
                        {
                            let s = ShardRef {
                                stream,
                                shard: shard.to_owned(),
                            };
                            self.lock().kin.learn_iterator(it, s, Instant::now());
                        }
                        rebuild(rp, rb, false)
                    }
                    Err(e) => bad_gateway(&e),
                }
            }
            "GetRecords" => self.get_records(parts, body).await,
            "PutRecord" | "PutRecords" => self.put_records(op, parts, body).await,
            "SplitShard" | "MergeShards" | "UpdateShardCount" | "DeleteStream" => {
                let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if let Some(stream) =
                    kinesis::stream_name(req["StreamName"].as_str(), req["StreamARN"].as_str())
                {
                    // The shard map changes: list the shards again on next write.
                    self.lock().shard_maps.remove(&stream);
                }
                self.passthrough(&self.kinesis, &parts, body).await
            }
            _ => self.passthrough(&self.kinesis, &parts, body).await,
        }
    }

    async fn get_records(&self, parts: Parts, body: Bytes) -> ProxyResponse {
        let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let shard = {
            let mut st = self.lock();
            let shard = req["ShardIterator"]
                .as_str()
                .and_then(|it| st.kin.shard_of_iterator(it).cloned());
            match shard {
                None => {
                    st.kin_counters.get_records_untracked += 1;
                    None
                }
                Some(s) => {
                    if !st.kin.admit_get_records(&s, Instant::now()) {
                        return aws_error::kinesis_throttle(&s.stream, &s.shard);
                    }
                    Some(s)
                }
            }
        };
        match self.send(&self.kinesis, &parts, body).await {
            Ok((rp, rb)) => {
                if let Some(s) = shard
                    && rp.status.is_success()
                    && let Ok(v) = serde_json::from_slice::<Value>(&rb)
                {
                    let bytes: u64 = v["Records"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| base64_decoded_len(r["Data"].as_str().unwrap_or("")))
                        .sum();
                    let now = Instant::now();
                    let mut st = self.lock();
                    st.kin.charge_read(&s, bytes, now);
                    if let Some(next) = v["NextShardIterator"].as_str() {
                        st.kin.learn_iterator(next, s, now);
                    }
                }
                rebuild(rp, rb, false)
            }
            Err(e) => bad_gateway(&e),
        }
    }

    /// Lists a stream's open shards upstream if the map is missing or stale.
    async fn ensure_shard_map(&self, stream: &str, auth: &HeaderMap) {
        let fresh = self
            .lock()
            .shard_maps
            .get(stream)
            .is_some_and(|t| t.elapsed() < SHARD_MAP_TTL);
        if fresh {
            return;
        }
        let mut ranges = Vec::new();
        let mut next: Option<String> = None;
        for _ in 0..100 {
            let body = match &next {
                Some(t) => json!({"NextToken": t}),
                None => json!({"StreamName": stream}),
            };
            let Ok((status, v)) = self
                .own_call(
                    &self.kinesis,
                    "Kinesis_20131202.ListShards",
                    KINESIS_CONTENT_TYPE,
                    auth,
                    body,
                )
                .await
            else {
                return;
            };
            if !status.is_success() {
                return;
            }
            for s in v["Shards"].as_array().into_iter().flatten() {
                // Closed shards (an ending sequence number) take no writes.
                if s.pointer("/SequenceNumberRange/EndingSequenceNumber")
                    .is_some_and(|e| !e.is_null())
                {
                    continue;
                }
                let parse = |p: &str| {
                    s.pointer(p)
                        .and_then(Value::as_str)
                        .and_then(|x| x.parse::<u128>().ok())
                };
                if let (Some(id), Some(start), Some(end)) = (
                    s["ShardId"].as_str(),
                    parse("/HashKeyRange/StartingHashKey"),
                    parse("/HashKeyRange/EndingHashKey"),
                ) {
                    ranges.push(ShardRange {
                        shard: id.to_owned(),
                        start,
                        end,
                    });
                }
            }
            next = v["NextToken"].as_str().map(str::to_owned);
            if next.is_none() {
                break;
            }
        }
        let mut st = self.lock();
        st.kin.set_ranges(stream, ranges);
        st.shard_maps.insert(stream.to_owned(), Instant::now());
    }

    async fn put_records(&self, op: &str, parts: Parts, body: Bytes) -> ProxyResponse {
        let Ok(mut doc) = serde_json::from_slice::<Value>(&body) else {
            return self.passthrough(&self.kinesis, &parts, body).await;
        };
        let Some(stream) =
            kinesis::stream_name(doc["StreamName"].as_str(), doc["StreamARN"].as_str())
        else {
            return self.passthrough(&self.kinesis, &parts, body).await;
        };
        let auth = auth_headers(&parts.headers);
        self.ensure_shard_map(&stream, &auth).await;
        let records: Vec<Value> = if op == "PutRecord" {
            vec![doc.clone()]
        } else {
            doc["Records"].as_array().cloned().unwrap_or_default()
        };
        // Per record: Ok(()) admitted, Err(shard) throttled on that shard.
        let now = Instant::now();
        let verdicts: Vec<Result<(), String>> = {
            let mut st = self.lock();
            let st = &mut *st;
            records
                .iter()
                .map(|r| {
                    let pk = r["PartitionKey"].as_str().unwrap_or("");
                    let hash = r["ExplicitHashKey"]
                        .as_str()
                        .and_then(|h| h.parse::<u128>().ok())
                        .unwrap_or_else(|| kinesis::hash_key_of(pk));
                    let Some(shard) = st.kin.shard_for_hash(&stream, hash).map(str::to_owned)
                    else {
                        st.kin_counters.put_records_unmapped += 1;
                        return Ok(());
                    };
                    let bytes =
                        base64_decoded_len(r["Data"].as_str().unwrap_or("")) + pk.len() as u64;
                    let s = ShardRef {
                        stream: stream.clone(),
                        shard: shard.clone(),
                    };
                    if st.kin.admit_put(&s, bytes, now) {
                        Ok(())
                    } else {
                        Err(shard)
                    }
                })
                .collect()
        };
        if verdicts.iter().all(Result::is_ok) {
            return self.passthrough(&self.kinesis, &parts, body).await;
        }
        if op == "PutRecord" {
            let shard = verdicts
                .into_iter()
                .find_map(Result::err)
                .unwrap_or_default();
            return aws_error::kinesis_throttle(&stream, &shard);
        }
        let admitted: Vec<Value> = records
            .iter()
            .zip(&verdicts)
            .filter(|(_, v)| v.is_ok())
            .map(|(r, _)| r.clone())
            .collect();
        let mut upstream_results: Vec<Value> = Vec::new();
        let mut failed = 0u64;
        let mut extra = Map::new();
        if !admitted.is_empty() {
            doc["Records"] = Value::Array(admitted);
            match self
                .send(&self.kinesis, &parts, Bytes::from(doc.to_string()))
                .await
            {
                Ok((rp, rb)) => {
                    if !rp.status.is_success() {
                        return rebuild(rp, rb, false);
                    }
                    let Ok(v) = serde_json::from_slice::<Value>(&rb) else {
                        return rebuild(rp, rb, false);
                    };
                    failed = v["FailedRecordCount"].as_u64().unwrap_or(0);
                    upstream_results = v["Records"].as_array().cloned().unwrap_or_default();
                    if let Some(m) = v.as_object() {
                        for (k, val) in m {
                            if k != "Records" && k != "FailedRecordCount" {
                                extra.insert(k.clone(), val.clone());
                            }
                        }
                    }
                }
                Err(e) => return bad_gateway(&e),
            }
        }
        let mut up = upstream_results.into_iter();
        let mut results = Vec::with_capacity(verdicts.len());
        for v in &verdicts {
            match v {
                Ok(()) => results.push(up.next().unwrap_or(Value::Null)),
                Err(shard) => {
                    failed += 1;
                    results.push(json!({
                        "ErrorCode": "ProvisionedThroughputExceededException",
                        "ErrorMessage": aws_error::kinesis_throttle_message(&stream, shard),
                    }));
                }
            }
        }
        extra.insert("FailedRecordCount".into(), json!(failed));
        extra.insert("Records".into(), Value::Array(results));
        aws_error::json_response(
            StatusCode::OK,
            KINESIS_CONTENT_TYPE,
            Value::Object(extra).to_string(),
        )
    }
}

trait ThrottleDefault {
    fn unwrap_or_default_throttle(self) -> (String, Throttle);
}

impl ThrottleDefault for Option<(String, Throttle)> {
    fn unwrap_or_default_throttle(self) -> (String, Throttle) {
        self.unwrap_or((String::new(), Throttle::Table))
    }
}

/// The client's credential headers, for the proxy's own upstream calls:
/// emulators pick account and region from them, and kinesis-local insists
/// on an Authorization header with a date (it does not check signatures).
fn auth_headers(h: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in [
        "authorization",
        "x-amz-date",
        "date",
        "x-amz-security-token",
    ] {
        if let Some(v) = h.get(name) {
            out.insert(http::HeaderName::from_static(name), v.clone());
        }
    }
    out
}

/// The ThrottlingReasons `reason` AWS uses for each limit.
fn throttle_reason(t: Throttle, on_demand: bool) -> &'static str {
    match (t, on_demand) {
        (Throttle::KeyRange, _) => "TableWriteKeyRangeThroughputExceeded",
        (Throttle::Table, false) => "TableWriteProvisionedThroughputExceeded",
        (Throttle::Table, true) => "TableWriteMaxOnDemandThroughputExceeded",
    }
}

/// Name and spec from a TableDescription.
pub fn parse_description(desc: &Value) -> Option<(String, TableSpec)> {
    let name = desc["TableName"].as_str()?.to_owned();
    let mut hash = None;
    let mut range = None;
    for k in desc["KeySchema"].as_array()? {
        match k["KeyType"].as_str() {
            Some("HASH") => hash = k["AttributeName"].as_str().map(str::to_owned),
            Some("RANGE") => range = k["AttributeName"].as_str().map(str::to_owned),
            _ => {}
        }
    }
    let wcu = desc
        .pointer("/ProvisionedThroughput/WriteCapacityUnits")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let rcu = desc
        .pointer("/ProvisionedThroughput/ReadCapacityUnits")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let on_demand = desc
        .pointer("/BillingModeSummary/BillingMode")
        .and_then(Value::as_str)
        == Some("PAY_PER_REQUEST")
        || wcu == 0;
    Some((
        name,
        TableSpec {
            mode: if on_demand {
                CapacityMode::OnDemand
            } else {
                CapacityMode::Provisioned
            },
            wcu,
            rcu,
            hash_key: hash?,
            range_key: range,
        },
    ))
}

/// Decoded length of base64 text without decoding it.
fn base64_decoded_len(s: &str) -> u64 {
    let pad = s.bytes().rev().take_while(|&b| b == b'=').count();
    ((s.len() / 4 * 3).saturating_sub(pad)) as u64
}

/// A response from upstream parts and a body; `rewritten` recomputes the
/// CRC32 header DynamoDB sends (botocore verifies it).
fn rebuild(rp: http::response::Parts, body: Bytes, rewritten: bool) -> ProxyResponse {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = rp.status;
    for (k, v) in &rp.headers {
        if k != header::CONTENT_LENGTH && k != header::TRANSFER_ENCODING && k != header::CONNECTION
        {
            r.headers_mut().append(k, v.clone());
        }
    }
    if rewritten && r.headers().contains_key("x-amz-crc32") {
        let crc = crc32fast::hash(&body);
        if let Ok(v) = HeaderValue::from_str(&crc.to_string()) {
            r.headers_mut().insert("x-amz-crc32", v);
        }
    }
    *r.body_mut() = Full::new(body);
    r
}

fn bad_gateway(e: &ProxyError) -> ProxyResponse {
    tracing::warn!(error = %e, "upstream call failed");
    aws_error::json_response(
        StatusCode::BAD_GATEWAY,
        "application/json",
        json!({"__type": "BadGateway", "message": format!("tidemark-limits: {e}")}).to_string(),
    )
}

fn injected_error(service: Service, code: u16, headers: &HeaderMap) -> ProxyResponse {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let unavailable = code == 503;
    match service {
        Service::DynamoDb => aws_error::dynamodb_error(
            status,
            if unavailable { "com.amazonaws.dynamodb.v20120810#ServiceUnavailable" } else { "com.amazonaws.dynamodb.v20120810#InternalServerError" },
            "Injected fault (tidemark-limits)",
        ),
        Service::Kinesis => aws_error::json_response(
            status,
            KINESIS_CONTENT_TYPE,
            json!({"__type": if unavailable { "ServiceUnavailable" } else { "InternalFailure" }, "message": "Injected fault (tidemark-limits)"}).to_string(),
        ),
        Service::Sqs => {
            let code_name = if unavailable { "ServiceUnavailable" } else { "InternalError" };
            if headers.contains_key("x-amz-target") {
                aws_error::json_response(
                    status,
                    DYNAMODB_CONTENT_TYPE,
                    json!({"__type": format!("com.amazonaws.sqs#{code_name}"), "message": "Injected fault (tidemark-limits)"}).to_string(),
                )
            } else {
                let xml = format!(
                    "<?xml version=\"1.0\"?><ErrorResponse><Error><Type>Receiver</Type><Code>{code_name}</Code><Message>Injected fault (tidemark-limits)</Message></Error><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>"
                );
                aws_error::json_response(status, "text/xml", xml)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_table_is_named_exactly() {
        let body = br#"{"TableName":"run-leases","Key":{"leaseKey":{"S":"s"}}}"#;
        assert!(names_table(body, "run-leases"));
        assert!(!names_table(body, "run-lease"));
        assert!(!names_table(body, "run"));
        assert!(!names_table(
            br#"{"TableName":"run-leases-2"}"#,
            "run-leases"
        ));
    }

    #[test]
    fn description_parsing_covers_both_billing_modes() {
        let d = json!({
            "TableName": "t",
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 1000}
        });
        let (n, s) = parse_description(&d).unwrap();
        assert_eq!(n, "t");
        assert_eq!(s.mode, CapacityMode::Provisioned);
        assert_eq!((s.wcu, s.rcu), (1000, 5));
        assert_eq!(s.range_key.as_deref(), Some("sk"));
        let d = json!({
            "TableName": "o",
            "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
            "BillingModeSummary": {"BillingMode": "PAY_PER_REQUEST"},
            "ProvisionedThroughput": {"ReadCapacityUnits": 0, "WriteCapacityUnits": 0}
        });
        let (_, s) = parse_description(&d).unwrap();
        assert_eq!(s.mode, CapacityMode::OnDemand);
        assert_eq!(s.range_key, None);
        assert!(parse_description(&json!({"TableName": "x"})).is_none());
    }

    #[test]
    fn base64_length_accounts_for_padding() {
        use base64::Engine as _;
        let e = base64::engine::general_purpose::STANDARD;
        for n in 0..10 {
            let data = vec![7u8; n];
            assert_eq!(base64_decoded_len(&e.encode(&data)), n as u64);
        }
    }
}
