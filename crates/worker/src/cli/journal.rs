//! The journal of a command's AWS calls.
//!
//! [`Journal`]: every attempt of every AWS call a command makes goes
//! through an HTTP client around the SDK's default ([`Journal::watch`]),
//! which records its service, operation, endpoint and outcome: answered
//! (with the error code of an error answer), refused, not resolved, or
//! no answer in time. From it, [`Journal::given_up`] trips when AWS has
//! answered none of a command's calls for `--give-up-after` (a quarter of
//! it when every attempt was refused), so no command hangs on a black
//! hole; and `aws::explain` names the failed call.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;

/// One AWS call, as the journal names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// `DynamoDB`, `Kinesis`, `SQS`, ...
    pub(crate) service: String,
    /// `DescribeTable`, ... (empty when the request does not say).
    pub(crate) operation: String,
    /// `scheme://host:port`.
    pub(crate) endpoint: String,
}

impl Call {
    fn of(request: &HttpRequest) -> Call {
        let uri = request.uri();
        let endpoint = match uri.find("://") {
            Some(i) => {
                let rest = &uri[i + 3..];
                let host = rest.split(['/', '?']).next().unwrap_or(rest);
                format!("{}://{host}", &uri[..i])
            }
            None => uri.to_string(),
        };
        // JSON protocols name the call in `X-Amz-Target`:
        // `DynamoDB_20120810.DescribeTable`, `Kinesis_20131202.ListShards`,
        // `AmazonSQS.ReceiveMessage`.
        let (service, operation) = match request.headers().get("x-amz-target") {
            Some(t) => {
                let (svc, op) = t.split_once('.').unwrap_or((t, ""));
                let svc = svc.split('_').next().unwrap_or(svc);
                let svc = match svc {
                    "AmazonSQS" => "SQS",
                    other => other,
                };
                (svc.to_string(), op.to_string())
            }
            None => (service_of_host(&endpoint), String::new()),
        };
        Call {
            service,
            operation,
            endpoint,
        }
    }

    /// `DynamoDB DescribeTable`.
    pub(crate) fn name(&self) -> String {
        if self.operation.is_empty() {
            self.service.clone()
        } else {
            format!("{} {}", self.service, self.operation)
        }
    }
}

/// The service of an AWS host name (`dynamodb.us-east-1.amazonaws.com`).
fn service_of_host(endpoint: &str) -> String {
    let host = endpoint.split("://").nth(1).unwrap_or(endpoint);
    match host.split('.').next().unwrap_or_default() {
        "dynamodb" => "DynamoDB".into(),
        "kinesis" => "Kinesis".into(),
        "sqs" => "SQS".into(),
        "sts" => "STS".into(),
        _ => "AWS".into(),
    }
}

/// Why an attempt got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoAnswer {
    /// Nothing listens at the address.
    Refused,
    /// The host name does not resolve.
    NotResolved,
    /// No connection within the connect timeout.
    ConnectTimeout,
    /// Connected, but no answer within the attempt timeout.
    Timeout,
    /// Another transport error (reset, TLS, ...).
    Other(String),
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoAnswer::Refused => f.write_str("connection refused"),
            NoAnswer::NotResolved => f.write_str("host name not resolved"),
            NoAnswer::ConnectTimeout => f.write_str("no connection in time"),
            NoAnswer::Timeout => f.write_str("no answer in time"),
            NoAnswer::Other(m) => f.write_str(m),
        }
    }
}

/// An error answer: the service is reachable but said no.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ErrorAnswer {
    pub(crate) call: Call,
    pub(crate) status: u16,
    pub(crate) code: Option<String>,
    pub(crate) message: Option<String>,
}

#[derive(Debug)]
struct State {
    next_id: u64,
    /// When AWS last answered anything (an error answer too).
    last_answer: Option<Instant>,
    /// Attempts in flight: id, start and call.
    pending: BTreeMap<u64, (Instant, Call)>,
    /// Start of the first attempt since the last answer that got none.
    unanswered_since: Option<Instant>,
    /// Failed attempts since the last answer.
    failures: u32,
    /// Every failure since the last answer was a refused connection.
    refused_only: bool,
    /// The latest attempt without an answer, and why.
    last_failure: Option<(Call, NoAnswer)>,
    /// The first error answer since the last success, if any.
    last_error: Option<ErrorAnswer>,
    /// Whether the latest outcome was a success.
    last_ok: bool,
}

/// What the command's AWS calls did (see the module doc).
#[derive(Debug)]
pub(crate) struct Journal {
    state: Mutex<State>,
}

impl Journal {
    pub(crate) fn new() -> Arc<Journal> {
        Arc::new(Journal {
            state: Mutex::new(State {
                next_id: 0,
                last_answer: None,
                pending: BTreeMap::new(),
                unanswered_since: None,
                failures: 0,
                refused_only: true,
                last_failure: None,
                last_error: None,
                last_ok: false,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned journal still holds good records.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn begin(&self, call: &Call) -> (u64, Instant) {
        let mut s = self.lock();
        s.next_id += 1;
        let id = s.next_id;
        let now = Instant::now();
        s.pending.insert(id, (now, call.clone()));
        (id, now)
    }

    pub(crate) fn answered(&self, id: u64, error: Option<ErrorAnswer>) {
        let mut s = self.lock();
        s.pending.remove(&id);
        s.last_answer = Some(Instant::now());
        s.unanswered_since = None;
        s.failures = 0;
        s.refused_only = true;
        let after_success = s.last_ok;
        s.last_ok = error.is_none();
        match error {
            // The first of a run of error answers is the cause; later ones
            // (clean-up calls while stopping) follow from it.
            Some(e) if after_success || s.last_error.is_none() => s.last_error = Some(e),
            Some(_) => {}
            None => s.last_error = None,
        }
    }

    pub(crate) fn failed(&self, id: u64, started: Instant, call: Call, why: NoAnswer) {
        let mut s = self.lock();
        s.pending.remove(&id);
        s.failures += 1;
        s.refused_only &= why == NoAnswer::Refused;
        s.unanswered_since.get_or_insert(started);
        s.last_failure = Some((call, why));
        s.last_ok = false;
    }

    /// The SDK configuration with every call recorded here.
    pub(crate) fn watch(self: &Arc<Self>, sdk: &aws_config::SdkConfig) -> aws_config::SdkConfig {
        let inner = sdk.http_client().or_else(default_http_client);
        match inner {
            Some(inner) => sdk
                .to_builder()
                .http_client(Watched {
                    inner,
                    journal: self.clone(),
                })
                .build(),
            None => sdk.clone(),
        }
    }

    /// A message when AWS has answered nothing for `limit` while calls were
    /// made (a quarter of it when every attempt was refused); with `armed`
    /// false, never (`run` after its first answer). `at` names a call where
    /// it went (endpoint and its origin).
    pub(crate) fn given_up(&self, limit: Duration, at: &dyn Fn(&Call) -> String) -> Option<String> {
        let s = self.lock();
        let now = Instant::now();
        let oldest_pending = s.pending.values().min_by_key(|(t, _)| *t);
        let since = match (s.unanswered_since, oldest_pending.map(|(t, _)| *t)) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        let limit = if s.refused_only && s.failures > 0 && s.pending.is_empty() {
            limit / 4
        } else {
            limit
        };
        if now.duration_since(since) < limit {
            return None;
        }
        let (call, why) = match (&s.last_failure, oldest_pending) {
            (Some((c, w)), _) => (c.clone(), w.clone()),
            (None, Some((_, c))) => (c.clone(), NoAnswer::Timeout),
            (None, None) => (
                Call {
                    service: "AWS".into(),
                    operation: String::new(),
                    endpoint: String::new(),
                },
                NoAnswer::Timeout,
            ),
        };
        let attempts = s.failures + s.pending.len() as u32;
        Some(format!(
            "{}: no answer for {} ({attempts} attempt{}: {why})",
            at(&call),
            secs(now.duration_since(since)),
            if attempts == 1 { "" } else { "s" }
        ))
    }

    /// The latest failure, when nothing succeeded after it: an attempt
    /// without an answer, or an error answer.
    pub(crate) fn last_problem(&self) -> Option<Problem> {
        let s = self.lock();
        if s.last_ok {
            return None;
        }
        match (&s.last_error, &s.last_failure, s.failures) {
            (_, Some((call, why)), n) if n > 0 => Some(Problem::NoAnswer {
                call: call.clone(),
                why: why.clone(),
                attempts: n,
                for_: s.unanswered_since.map(|t| t.elapsed()),
            }),
            (Some(e), _, _) => Some(Problem::Refused(e.clone())),
            _ => None,
        }
    }
}

/// `12.5s`.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The SDK's own default HTTPS client (what a client gets when none is
/// configured), to wrap.
fn default_http_client() -> Option<SharedHttpClient> {
    use aws_smithy_runtime_api::client::runtime_components::RuntimeComponentsBuilder;
    use aws_smithy_runtime_api::client::runtime_plugin::RuntimePlugin;
    let plugin = aws_smithy_runtime::client::defaults::default_http_client_plugin_v2(
        aws_config::BehaviorVersion::latest(),
    )?;
    let components = plugin.runtime_components(&RuntimeComponentsBuilder::new("tidemark"));
    components.http_client()
}

/// The HTTP client that records each attempt in the journal.
#[derive(Debug, Clone)]
struct Watched {
    inner: SharedHttpClient,
    journal: Arc<Journal>,
}

impl HttpClient for Watched {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(WatchedConnector {
            inner: self.inner.http_connector(settings, components),
            journal: self.journal.clone(),
        })
    }

    fn connector_metadata(
        &self,
    ) -> Option<aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

#[derive(Debug)]
struct WatchedConnector {
    inner: SharedHttpConnector,
    journal: Arc<Journal>,
}

/// Records an attempt the SDK abandoned (its attempt timeout dropped it).
struct Abandoned {
    journal: Arc<Journal>,
    id: u64,
    started: Instant,
    call: Option<Call>,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.journal
                .failed(self.id, self.started, call, NoAnswer::Timeout);
        }
    }
}

/// Most bytes of an error answer read to find its code.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

impl HttpConnector for WatchedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let call = Call::of(&request);
        let (id, started) = self.journal.begin(&call);
        let journal = self.journal.clone();
        let future = self.inner.call(request);
        HttpConnectorFuture::new(async move {
            let mut guard = Abandoned {
                journal: journal.clone(),
                id,
                started,
                call: Some(call),
            };
            let result = future.await;
            let call = guard.call.take().unwrap_or_else(|| Call {
                service: "AWS".into(),
                operation: String::new(),
                endpoint: String::new(),
            });
            match result {
                Ok(response) if response.status().as_u16() >= 400 => {
                    let (response, code, message) = read_error(response).await;
                    journal.answered(
                        id,
                        Some(ErrorAnswer {
                            status: response.status().as_u16(),
                            call,
                            code,
                            message,
                        }),
                    );
                    Ok(response)
                }
                Ok(response) => {
                    journal.answered(id, None);
                    Ok(response)
                }
                Err(e) => {
                    journal.failed(id, started, call, no_answer(&e));
                    Err(e)
                }
            }
        })
    }
}

/// Why a connector error got no answer.
fn no_answer(e: &ConnectorError) -> NoAnswer {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut texts = Vec::new();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return NoAnswer::Refused;
        }
        texts.push(s.to_string());
        source = s.source();
    }
    let all = texts.join(": ");
    if all.contains("dns error") || all.contains("failed to lookup address") {
        NoAnswer::NotResolved
    } else if e.is_timeout() {
        NoAnswer::ConnectTimeout
    } else {
        // The innermost cause is the most specific.
        NoAnswer::Other(
            texts
                .last()
                .cloned()
                .unwrap_or_else(|| "transport error".into()),
        )
    }
}

/// The code and message of an error answer (JSON `__type` / `message`, or
/// XML `<Code>` / `<Message>`), with the response rebuilt from its bytes.
async fn read_error(response: HttpResponse) -> (HttpResponse, Option<String>, Option<String>) {
    use http_body_util::BodyExt as _;
    let status = response.status();
    let headers = response.headers().clone();
    let header_code = headers
        .get("x-amzn-errortype")
        .map(|t| t.split(':').next().unwrap_or(t).to_string());
    let body = response.into_body();
    let bytes = match http_body_util::Limited::new(body, ERROR_BODY_LIMIT)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(_) => bytes::Bytes::new(),
    };
    let (code, message) = parse_error(&bytes);
    let mut rebuilt = HttpResponse::new(status, SdkBody::from(bytes));
    *rebuilt.headers_mut() = headers;
    (rebuilt, code.or(header_code), message)
}

/// The error code and message of an error body.
pub(crate) fn parse_error(body: &[u8]) -> (Option<String>, Option<String>) {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let code = v
            .get("__type")
            .or_else(|| v.get("code"))
            .and_then(|c| c.as_str())
            // `com.amazonaws.dynamodb.v20120810#ResourceNotFoundException`
            .map(|c| c.rsplit('#').next().unwrap_or(c).to_string());
        let message = v
            .get("message")
            .or_else(|| v.get("Message"))
            .and_then(|m| m.as_str())
            .map(str::to_string);
        return (code, message);
    }
    let text = String::from_utf8_lossy(body);
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find("</")? + start;
        Some(text[start..end].to_string())
    };
    (tag("Code"), tag("Message"))
}

/// A failure the journal saw.
#[derive(Debug)]
pub(crate) enum Problem {
    /// No answer, `attempts` times.
    NoAnswer {
        call: Call,
        why: NoAnswer,
        attempts: u32,
        for_: Option<Duration>,
    },
    /// An error answer.
    Refused(ErrorAnswer),
}
