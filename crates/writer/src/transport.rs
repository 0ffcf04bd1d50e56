//! How a BatchWriteItem body reaches DynamoDB: [`Transport`], and the
//! production [`SdkTransport`].
//!
//! The writer builds each request body itself from pre-encoded items
//! ([`WireItem`](tidemark_schema::WireItem)): building SDK `AttributeValue`
//! maps and serializing them again cost about 8 CPU-µs per item in
//! `bench/pipeline-cpu`. Everything else about the call is the AWS SDK's own:
//! [`SdkTransport`] sends an `aws_sdk_dynamodb` BatchWriteItem whose
//! serialized (empty) input is replaced by the pre-encoded body in an
//! client-level interceptor at `modify_before_signing` (the call's body
//! reaches it through a task-local set around the call: a per-call
//! `customize().interceptor(..)` rebuilt the client's configuration on every
//! call and cost about 2 CPU-µs per record), so the SDK still resolves the
//! endpoint (its ruleset: FIPS, dual-stack, every partition, account-ID
//! endpoints), loads credentials through its identity cache (one load per
//! refresh, shared with the worker's other clients), signs with SigV4
//! corrected for clock skew (learned from each answer's `Date` header),
//! sends on its HTTP client (connection pool, `HTTPS_PROXY` / `NO_PROXY`),
//! bounds the attempt with the configured timeouts and parses errors.
//! SDK retries are off: the writer's loop decides about every retry.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::StalledStreamProtectionConfig;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeDeserializationInterceptorContextMut,
    BeforeTransmitInterceptorContextMut,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use aws_types::SdkConfig;
use bytes::Bytes;
use futures::future::BoxFuture;
use thiserror::Error;

pub(crate) mod body;
pub(crate) use body::request_body;

/// Longest answer read. A BatchWriteItem answer at most echoes the request's
/// items back as unprocessed (16 MB); anything longer is not DynamoDB's.
pub(crate) const MAX_RESPONSE_BYTES: usize = 20 * 1024 * 1024;

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
    /// The request cannot be built (bad configuration): retrying cannot help.
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

/// A configuration [`SdkTransport::new`] cannot use.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("cannot send to DynamoDB: {0}")]
pub struct SettingsError(pub String);

/// BatchWriteItem through an `aws_sdk_dynamodb` client built from the
/// worker's SDK configuration, with SDK retries off.
#[derive(Debug, Clone)]
pub struct SdkTransport {
    client: Client,
}

impl SdkTransport {
    /// The transport for `sdk`: the DynamoDB client the SDK builds from it
    /// (endpoint, credentials and identity cache, HTTP client, timeouts),
    /// with one attempt per call.
    pub fn new(sdk: &SdkConfig) -> Result<SdkTransport, SettingsError> {
        if sdk.region().is_none() {
            return Err(SettingsError(
                "no region configured (set AWS_REGION)".into(),
            ));
        }
        if sdk.credentials_provider().is_none() {
            return Err(SettingsError("no credentials provider configured".into()));
        }
        Ok(SdkTransport::from_conf(
            aws_sdk_dynamodb::config::Builder::from(sdk),
        ))
    }

    /// The transport for a DynamoDB client configuration (e.g. one pointed
    /// at a test proxy with `endpoint_url`), with one attempt per call.
    pub fn from_conf(conf: aws_sdk_dynamodb::config::Builder) -> SdkTransport {
        // Stalled-stream protection wraps every request and answer body in a
        // throughput monitor with its own timer; the writer already bounds
        // each call with `call_timeout` (and the attempt timeout), and the
        // bodies are in memory, so it only cost CPU per call here.
        let conf = conf
            .retry_config(RetryConfig::disabled())
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .interceptor(PreEncodedBody)
            .build();
        SdkTransport {
            client: Client::from_conf(conf),
        }
    }

    /// The client writes go through (for readiness probes: same endpoint,
    /// credentials, HTTP client and clock-skew state as every write).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// One cheap call (ListTables, limit 1) on the writer's own client: `Ok`
    /// when DynamoDB answered it.
    pub async fn probe(&self) -> Result<(), TransportError> {
        match self.client.list_tables().limit(1).send().await {
            Ok(_) => Ok(()),
            Err(e) => Err(TransportError::Unavailable(tidemark_aws_errors::describe(
                &e,
            ))),
        }
    }
}

tokio::task_local! {
    /// The call [`PreEncodedBody`] is working for: set around one
    /// BatchWriteItem's future (its interceptors run inside its polls).
    static CALL: Arc<Call>;
}

/// One call's pre-encoded body, and its answer's bytes once read.
struct Call {
    body: Bytes,
    answer: Mutex<Option<Bytes>>,
}

impl Transport for SdkTransport {
    fn batch_write_item(
        &self,
        body: Bytes,
    ) -> BoxFuture<'static, Result<RawResponse, TransportError>> {
        let call = Arc::new(Call {
            body,
            answer: Mutex::new(None),
        });
        let send = CALL.scope(call.clone(), self.client.batch_write_item().send());
        Box::pin(async move {
            match send.await {
                Ok(_) => {
                    let body = call
                        .answer
                        .lock()
                        .map_err(|_| TransportError::Unavailable("answer lost".into()))?
                        .take()
                        .ok_or_else(|| {
                            TransportError::Unavailable("answer body not captured".into())
                        })?;
                    Ok(RawResponse { status: 200, body })
                }
                Err(e) => answer_of(e),
            }
        })
    }
}

/// A failed call as the table loop reads it: DynamoDB's error answer as it
/// came, or why none came.
fn answer_of<E: std::error::Error + Send + Sync + 'static>(
    e: SdkError<E, aws_smithy_runtime_api::http::Response>,
) -> Result<RawResponse, TransportError> {
    match e {
        SdkError::ServiceError(se) => {
            let raw = se.raw();
            Ok(RawResponse {
                status: raw.status().as_u16(),
                body: Bytes::copy_from_slice(raw.body().bytes().unwrap_or_default()),
            })
        }
        // The request could not be built: configuration, not the network.
        SdkError::ConstructionFailure(_) => {
            Err(TransportError::Invalid(tidemark_aws_errors::causes(&e)))
        }
        // Timeouts, connection failures (credentials and endpoint trouble
        // arrive here too: retried, and /readyz reports them), unreadable
        // answers.
        _ => Err(TransportError::Unavailable(tidemark_aws_errors::causes(&e))),
    }
}

/// The writer client's interceptor: for a BatchWriteItem sent by
/// [`SdkTransport`] (a [`CALL`] is set), puts the pre-encoded body in place of
/// the SDK's serialized input before signing, bounds the answer's size, and
/// keeps the answer's bytes for the writer's own reader. Other calls on the
/// client (the readiness probe) pass untouched.
#[derive(Debug)]
struct PreEncodedBody;

impl Intercept for PreEncodedBody {
    fn name(&self) -> &'static str {
        "PreEncodedBody"
    }

    fn modify_before_signing(
        &self,
        ctx: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Ok(body) = CALL.try_with(|c| c.body.clone()) else {
            return Ok(());
        };
        let req = ctx.request_mut();
        // Signing hashes the body that is there now, so the hash is of ours.
        req.headers_mut()
            .insert("content-length", body.len().to_string());
        *req.body_mut() = SdkBody::from(body);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let body = ctx.response_mut().take_body();
        *ctx.response_mut().body_mut() =
            SdkBody::from_body_1_x(http_body_util::Limited::new(body, MAX_RESPONSE_BYTES));
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        ctx: &AfterDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // Success answers are small (consumed capacity, rare unprocessed
        // items); the copy costs less than reading the SDK's typed output.
        if ctx.response().status().is_success()
            && let Some(bytes) = ctx.response().body().bytes()
        {
            let _ = CALL.try_with(|c| {
                if let Ok(mut slot) = c.answer.lock() {
                    *slot = Some(Bytes::copy_from_slice(bytes));
                }
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
