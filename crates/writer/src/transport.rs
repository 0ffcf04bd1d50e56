//! How a BatchWriteItem body reaches DynamoDB: [`Transport`], and the
//! production [`HttpTransport`].
//!
//! The writer builds each request body itself from pre-encoded items
//! ([`WireItem`](tidemark_schema::WireItem)), so a call is one signed POST.
//! Going through the SDK's operation instead cost about 8 CPU-µs per item in
//! `bench/pipeline-cpu` (building, cloning and serializing attribute maps,
//! plus the orchestrator), more than the whole per-record budget.
//! [`HttpTransport`] keeps what matters from the SDK: the same hyper/rustls
//! connector (connection pool, connect timeout), SigV4 from `aws-sigv4`, and
//! the credentials, region and endpoint of the SDK configuration
//! (`AWS_ENDPOINT_URL_DYNAMODB` included). Retries stay with the writer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_async::rt::sleep::{SharedAsyncSleep, TokioSleep};
use aws_smithy_http_client::Connector;
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_types::body::SdkBody;
use aws_types::SdkConfig;
use aws_types::service_config::ServiceConfigKey;
use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use thiserror::Error;

use crate::sigv4::{CONTENT_TYPE, FastSigner, TARGET};

pub(crate) mod body;
pub(crate) use body::request_body;

/// What DynamoDB answered, before interpretation: the writer reads the
/// status and JSON body (UnprocessedItems, or `__type` and message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawResponse {
    /// HTTP status.
    pub status: u16,
    /// Response body.
    pub body: Bytes,
}

/// A call that got no answer from DynamoDB.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TransportError {
    /// Connecting, sending or reading failed, or credentials could not be
    /// had right now: retried like a 5xx.
    #[error("{0}")]
    Unavailable(String),
    /// The request cannot be built or signed (bad endpoint, bad header):
    /// retrying cannot help.
    #[error("{0}")]
    Invalid(String),
}

/// Sends one BatchWriteItem request body (JSON) and returns the answer.
pub trait Transport: Send + Sync + 'static {
    /// One attempt; the writer bounds it with its call timeout.
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>>;
}

/// Where and as whom [`HttpTransport`] sends.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Endpoint URL, e.g. `https://dynamodb.eu-west-1.amazonaws.com` or a
    /// local emulator's `http://127.0.0.1:4566`.
    pub endpoint: String,
    /// Region to sign for.
    pub region: String,
    /// Credentials (refreshed before they expire).
    pub credentials: SharedCredentialsProvider,
    /// Longest wait to connect.
    pub connect_timeout: Duration,
}

/// A configuration [`HttpTransport::from_sdk`] cannot use.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("cannot send to DynamoDB: {0}")]
pub struct SettingsError(pub String);

/// Refresh credentials this long before they expire.
const REFRESH_AHEAD: Duration = Duration::from_secs(300);

/// BatchWriteItem over HTTP(S), signed with SigV4.
#[derive(Debug, Clone)]
pub struct HttpTransport {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    connector: SharedHttpConnector,
    uri: String,
    /// `uri` parsed once: cloning it is cheaper than parsing per call.
    parsed: http::Uri,
    region: String,
    provider: SharedCredentialsProvider,
    /// Credentials and when to fetch them again (None: they never expire).
    cached: Mutex<Option<(Credentials, Option<SystemTime>)>>,
    /// The fast signer, for endpoints whose path is `/` (all of DynamoDB's);
    /// `aws-sigv4` signs the rest.
    fast: Option<FastSigner>,
}

impl HttpTransport {
    /// A transport with these settings.
    pub fn new(settings: HttpSettings) -> Result<HttpTransport, SettingsError> {
        let uri = settings.endpoint.trim_end_matches('/').to_owned() + "/";
        let parsed: http::Uri = uri
            .parse()
            .map_err(|e| SettingsError(format!("endpoint {:?}: {e}", settings.endpoint)))?;
        if parsed.host().is_none() || !matches!(parsed.scheme_str(), Some("http" | "https")) {
            return Err(SettingsError(format!(
                "endpoint {:?} is not an http(s) URL with a host",
                settings.endpoint
            )));
        }
        let connector = Connector::builder()
            .connector_settings(
                HttpConnectorSettings::builder()
                    .connect_timeout(settings.connect_timeout)
                    .build(),
            )
            .sleep_impl(SharedAsyncSleep::new(TokioSleep::new()))
            .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
            .build();
        let fast = FastSigner::applies(&parsed, &settings.region);
        Ok(HttpTransport {
            inner: Arc::new(Inner {
                connector: SharedHttpConnector::new(connector),
                uri,
                parsed,
                region: settings.region,
                provider: settings.credentials,
                cached: Mutex::new(None),
                fast,
            }),
        })
    }

    /// The transport the SDK's DynamoDB client would use for this
    /// configuration: its region and credentials, and its endpoint (one set
    /// in code on the loader, else `AWS_ENDPOINT_URL_DYNAMODB`, else
    /// `endpoint_url` in the profile, else `AWS_ENDPOINT_URL`, else the
    /// regional endpoint).
    pub fn from_sdk(sdk: &SdkConfig) -> Result<HttpTransport, SettingsError> {
        let region = sdk
            .region()
            .map(|r| r.as_ref().to_owned())
            .ok_or_else(|| SettingsError("no region configured (set AWS_REGION)".into()))?;
        let credentials = sdk
            .credentials_provider()
            .ok_or_else(|| SettingsError("no credentials provider configured".into()))?;
        // The SDK's own order: an endpoint set in code wins; else the
        // service's env / profile setting; else the general one.
        let from_code = sdk
            .get_origin("endpoint_url")
            .is_client_config()
            .then(|| sdk.endpoint_url().map(str::to_owned))
            .flatten();
        let endpoint = from_code
            .or_else(|| {
                sdk.service_config().and_then(|c| {
                    ServiceConfigKey::builder()
                        .service_id("DynamoDB")
                        .env("AWS_ENDPOINT_URL")
                        .profile("endpoint_url")
                        .build()
                        .ok()
                        .and_then(|key| c.load_config(key))
                })
            })
            .or_else(|| sdk.endpoint_url().map(str::to_owned))
            .unwrap_or_else(|| {
                regional_endpoint(
                    &region,
                    sdk.use_fips().unwrap_or(false),
                    sdk.use_dual_stack().unwrap_or(false),
                )
            });
        let connect_timeout = sdk
            .timeout_config()
            .and_then(|t| t.connect_timeout())
            .unwrap_or(Duration::from_millis(3100));
        HttpTransport::new(HttpSettings {
            endpoint,
            region,
            credentials,
            connect_timeout,
        })
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &str {
        &self.inner.uri
    }
}

/// When credentials expiring at `expiry`, fetched at `now`, are fetched
/// again: `REFRESH_AHEAD` before they expire, or, for credentials that
/// arrive with less time left than that, shortly before they expire (never
/// once per call).
fn refresh_time(expiry: SystemTime, now: SystemTime) -> SystemTime {
    let early = expiry.checked_sub(REFRESH_AHEAD).unwrap_or(now);
    if early > now {
        return early;
    }
    let late = expiry.checked_sub(Duration::from_secs(10)).unwrap_or(now);
    late.max(now + Duration::from_secs(1)).min(expiry)
}

/// DynamoDB's public endpoint for a region.
pub fn regional_endpoint(region: &str, fips: bool, dual_stack: bool) -> String {
    let service = if fips { "dynamodb-fips" } else { "dynamodb" };
    let suffix = match (dual_stack, region.starts_with("cn-")) {
        (true, true) => "api.amazonwebservices.com.cn",
        (true, false) => "api.aws",
        (false, true) => "amazonaws.com.cn",
        (false, false) => "amazonaws.com",
    };
    format!("https://{service}.{region}.{suffix}")
}

impl Inner {
    /// Cached credentials, fetched again when they are about to expire.
    async fn credentials(&self) -> Result<Credentials, TransportError> {
        let now = SystemTime::now();
        if let Ok(g) = self.cached.lock()
            && let Some((c, refresh_at)) = g.as_ref()
            && refresh_at.is_none_or(|t| now < t)
        {
            return Ok(c.clone());
        }
        let c = self
            .provider
            .provide_credentials()
            .await
            .map_err(|e| TransportError::Unavailable(format!("credentials: {e}")))?;
        let refresh_at = c.expiry().map(|e| refresh_time(e, now));
        if let Ok(mut g) = self.cached.lock() {
            *g = Some((c.clone(), refresh_at));
        }
        Ok(c)
    }

    fn request(
        &self,
        creds: Credentials,
        body: Bytes,
    ) -> Result<aws_smithy_runtime_api::http::Request, TransportError> {
        self.request_at(creds, body, SystemTime::now())
    }

    /// The signed request as of `now`.
    fn request_at(
        &self,
        creds: Credentials,
        body: Bytes,
        now: SystemTime,
    ) -> Result<aws_smithy_runtime_api::http::Request, TransportError> {
        let Some(fast) = &self.fast else {
            return self.request_sigv4(creds, body, now);
        };
        let signed = fast.sign(&creds, &body, now);
        let mut req = self.unsigned(body);
        let headers = req.headers_mut();
        let mut add = |name: &'static str, value: String| {
            let value = http::HeaderValue::try_from(value).map_err(|e| invalid(&e))?;
            headers.insert(name, value);
            Ok::<_, TransportError>(())
        };
        add("x-amz-date", signed.amz_date)?;
        add("authorization", signed.authorization)?;
        if let Some(token) = signed.token {
            add("x-amz-security-token", token)?;
        }
        aws_smithy_runtime_api::http::Request::try_from(req).map_err(|e| invalid(&e))
    }

    /// The request signed by `aws-sigv4` (any endpoint path).
    fn request_sigv4(
        &self,
        creds: Credentials,
        body: Bytes,
        now: SystemTime,
    ) -> Result<aws_smithy_runtime_api::http::Request, TransportError> {
        let identity = creds.into();
        let params: aws_sigv4::http_request::SigningParams<'_> = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("dynamodb")
            .time(now)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| invalid(&e))?
            .into();
        let headers = [("content-type", CONTENT_TYPE), ("x-amz-target", TARGET)];
        let signable = SignableRequest::new(
            "POST",
            self.uri.as_str(),
            headers.iter().copied(),
            SignableBody::Bytes(&body),
        )
        .map_err(|e| invalid(&e))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| invalid(&e))?
            .into_parts();
        let mut req = self.unsigned(body);
        instructions.apply_to_request_http1x(&mut req);
        aws_smithy_runtime_api::http::Request::try_from(req).map_err(|e| invalid(&e))
    }

    /// The POST with its body and the headers both signers sign.
    fn unsigned(&self, body: Bytes) -> http::Request<SdkBody> {
        // Static names and values: no per-call parsing or copying.
        let len = body.len();
        let mut req = http::Request::new(SdkBody::from(body));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = self.parsed.clone();
        let headers = req.headers_mut();
        headers.insert(http::header::CONTENT_LENGTH, len.into());
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(CONTENT_TYPE),
        );
        headers.insert("x-amz-target", http::HeaderValue::from_static(TARGET));
        req
    }
}

/// A request that cannot be built or signed.
fn invalid(e: &dyn std::fmt::Display) -> TransportError {
    TransportError::Invalid(e.to_string())
}

impl Transport for HttpTransport {
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let creds = inner.credentials().await?;
            let req = inner.request(creds, body)?;
            let resp = inner
                .connector
                .call(req)
                .await
                .map_err(|e| TransportError::Unavailable(connector_error(&e)))?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| TransportError::Unavailable(format!("reading the response: {e}")))?
                .to_bytes();
            Ok(RawResponse { status, body })
        })
    }
}

fn connector_error(e: &aws_smithy_runtime_api::client::result::ConnectorError) -> String {
    aws_smithy_types::error::display::DisplayErrorContext(e).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn regional_endpoints() {
        assert_eq!(
            regional_endpoint("eu-west-1", false, false),
            "https://dynamodb.eu-west-1.amazonaws.com"
        );
        assert_eq!(
            regional_endpoint("us-east-1", true, false),
            "https://dynamodb-fips.us-east-1.amazonaws.com"
        );
        assert_eq!(
            regional_endpoint("cn-north-1", false, false),
            "https://dynamodb.cn-north-1.amazonaws.com.cn"
        );
        assert_eq!(
            regional_endpoint("eu-west-1", false, true),
            "https://dynamodb.eu-west-1.api.aws"
        );
    }

    fn settings(endpoint: &str) -> HttpSettings {
        HttpSettings {
            endpoint: endpoint.into(),
            region: "us-east-1".into(),
            credentials: SharedCredentialsProvider::new(Credentials::new(
                "AKIDEXAMPLE",
                "secret",
                Some("token".into()),
                None,
                "test",
            )),
            connect_timeout: Duration::from_secs(1),
        }
    }

    /// Stands in for env / profile settings.
    #[derive(Debug)]
    struct Settings(Option<&'static str>);

    impl aws_types::service_config::LoadServiceConfig for Settings {
        fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
            (key.service_id() == "DynamoDB")
                .then(|| self.0.map(str::to_owned))
                .flatten()
        }
    }

    fn sdk(settings: Option<&'static str>, general: Option<&str>) -> SdkConfig {
        let mut b = SdkConfig::builder()
            .region(aws_types::region::Region::new("eu-west-1"))
            .credentials_provider(settings_creds())
            .service_config(Settings(settings));
        if let Some(url) = general {
            b = b.endpoint_url(url);
        }
        b.build()
    }

    fn settings_creds() -> SharedCredentialsProvider {
        SharedCredentialsProvider::new(Credentials::new("a", "b", None, None, "test"))
    }

    #[test]
    fn endpoint_follows_the_sdks_order() {
        let t = |c: &SdkConfig| HttpTransport::from_sdk(c).unwrap().endpoint().to_owned();
        assert_eq!(
            t(&sdk(None, None)),
            "https://dynamodb.eu-west-1.amazonaws.com/"
        );
        assert_eq!(t(&sdk(None, Some("http://general:1"))), "http://general:1/");
        assert_eq!(
            t(&sdk(Some("http://ddb-env:2"), Some("http://general:1"))),
            "http://ddb-env:2/"
        );
    }

    /// An endpoint given in code on the loader wins over the environment,
    /// as it does for the SDK's own client (the limits benches point the
    /// writer at their proxy this way while AWS_ENDPOINT_URL_DYNAMODB names
    /// the emulator).
    #[tokio::test]
    async fn an_endpoint_set_in_code_wins() {
        let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url("http://from-code:3")
            .region(aws_types::region::Region::new("us-east-1"))
            .credentials_provider(Credentials::new("a", "b", None, None, "test"))
            .load()
            .await;
        assert!(conf.get_origin("endpoint_url").is_client_config());
        let with_env = conf
            .to_builder()
            .service_config(Settings(Some("http://ddb-env:2")))
            .build();
        assert_eq!(
            HttpTransport::from_sdk(&with_env).unwrap().endpoint(),
            "http://from-code:3/"
        );
    }

    #[test]
    fn credentials_are_fetched_again_before_they_expire_not_per_call() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Duration::from_secs(3600);
        assert_eq!(refresh_time(now + hour, now), now + hour - REFRESH_AHEAD);
        // Two minutes left: kept until 10 s before the end.
        let two = Duration::from_secs(120);
        assert_eq!(
            refresh_time(now + two, now),
            now + two - Duration::from_secs(10)
        );
        // Already (nearly) expired: at least a second, never past expiry.
        assert_eq!(
            refresh_time(now + Duration::from_secs(5), now),
            now + Duration::from_secs(1)
        );
        assert_eq!(refresh_time(now, now), now);
    }

    #[derive(Debug)]
    struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>, Duration);

    impl ProvideCredentials for Counting {
        fn provide_credentials<'a>(
            &'a self,
        ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let expiry = SystemTime::now() + self.1;
            aws_credential_types::provider::future::ProvideCredentials::ready(Ok(Credentials::new(
                "a",
                "b",
                None,
                Some(expiry),
                "counting",
            )))
        }
    }

    #[tokio::test]
    async fn short_lived_credentials_are_cached_too() {
        for (lifetime, fetches) in [
            (Duration::from_secs(3600), 1),
            (Duration::from_secs(120), 1),
        ] {
            let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut s = settings("http://127.0.0.1:1");
            s.credentials = SharedCredentialsProvider::new(Counting(calls.clone(), lifetime));
            let t = HttpTransport::new(s).unwrap();
            for _ in 0..5 {
                t.inner.credentials().await.unwrap();
            }
            assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), fetches);
        }
    }

    #[test]
    fn bad_endpoints_are_refused_at_construction() {
        assert!(HttpTransport::new(settings("not a url")).is_err());
        assert!(HttpTransport::new(settings("ftp://x")).is_err());
        assert_eq!(
            HttpTransport::new(settings("http://127.0.0.1:1/"))
                .unwrap()
                .endpoint(),
            "http://127.0.0.1:1/"
        );
    }

    /// One request on a loopback listener: the call carries the target,
    /// a SigV4 authorization for `dynamodb` in the region, the session
    /// token, and the body unchanged; the answer comes back as sent.
    #[tokio::test]
    async fn a_call_is_one_signed_post_and_returns_the_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let n = conn.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf);
                if let Some(end) = text.find("\r\n\r\n")
                    && buf.len() >= end + 4 + 11
                {
                    break;
                }
            }
            let answer = r#"{"__type":"x#ThrottlingException","message":"m"}"#;
            conn.write_all(
                format!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-length: {}\r\n\r\n{answer}",
                    answer.len()
                )
                .as_bytes(),
            )
            .await
            .unwrap();
            String::from_utf8(buf).unwrap()
        });
        let t = HttpTransport::new(settings(&url)).unwrap();
        let resp = t
            .batch_write_item(Bytes::from_static(b"{\"hello\":1}"))
            .await
            .unwrap();
        assert_eq!(resp.status, 400);
        assert_eq!(
            &resp.body[..],
            br#"{"__type":"x#ThrottlingException","message":"m"}"#
        );
        let req = server.await.unwrap().to_lowercase();
        assert!(req.starts_with("post / http/1.1"), "{req}");
        assert!(req.contains("x-amz-target: dynamodb_20120810.batchwriteitem"));
        assert!(req.contains("x-amz-security-token: token"));
        assert!(req.contains("authorization: aws4-hmac-sha256 credential=akidexample/"));
        assert!(req.contains("/us-east-1/dynamodb/aws4_request"));
        assert!(req.ends_with("{\"hello\":1}"));
    }

    #[tokio::test]
    async fn nothing_listening_is_unavailable_not_invalid() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let t = HttpTransport::new(settings(&url)).unwrap();
        let err = t
            .batch_write_item(Bytes::from_static(b"{}"))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Unavailable(_)), "{err:?}");
    }

    fn header_list(r: &aws_smithy_runtime_api::http::Request) -> Vec<(String, String)> {
        let mut h: Vec<(String, String)> = r
            .headers()
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
            .collect();
        h.sort();
        h
    }

    /// The fast signer's headers equal `aws-sigv4`'s, byte for byte, over
    /// endpoints (default and explicit ports, http and https), credentials
    /// with and without a session token, a change of credentials and a
    /// change of day (both must drop the cached signing key).
    #[test]
    fn fast_signatures_match_aws_sigv4() {
        let body =
            Bytes::from_static(br#"{"RequestItems":{"t":[]},"ReturnConsumedCapacity":"TOTAL"}"#);
        let day1 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_350_485);
        let day2 = day1 + Duration::from_secs(86_400);
        let creds = [
            Credentials::new("AKIDEXAMPLE", "secret", Some("tok/en+=".into()), None, "t"),
            Credentials::new("AKIDOTHER", "other-secret", None, None, "t"),
        ];
        let endpoints = [
            "http://127.0.0.1:4591",
            "http://localhost:80/",
            "https://dynamodb.eu-west-1.amazonaws.com",
            "https://dynamodb.eu-west-1.amazonaws.com:443/",
            "https://example.internal:8443",
        ];
        for ep in endpoints {
            let t = HttpTransport::new(settings(ep)).unwrap();
            assert!(t.inner.fast.is_some(), "{ep}: fast path applies");
            for now in [day1, day2, day1] {
                for c in &creds {
                    let fast = t.inner.request_at(c.clone(), body.clone(), now).unwrap();
                    let slow = t.inner.request_sigv4(c.clone(), body.clone(), now).unwrap();
                    assert_eq!(header_list(&fast), header_list(&slow), "{ep} {now:?}");
                    assert_eq!(fast.uri(), slow.uri());
                    assert_eq!(fast.body().bytes(), Some(&body[..]));
                }
            }
        }
        // A path other than "/" goes to aws-sigv4.
        let t = HttpTransport::new(settings("http://127.0.0.1:4591/prefix")).unwrap();
        assert!(t.inner.fast.is_none());
    }
}
