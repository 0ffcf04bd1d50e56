//! tidemark-aws-errors: the one place AWS errors are classified, shared by
//! the consumer (Kinesis, SQS, lease table), the writer (DynamoDB, through
//! the SDK and through its own raw HTTP transport) and the worker.
//!
//! Modules (all in this file, the crate is small):
//! - [`ErrorClass`]: what the caller should do about a failed call.
//! - [`THROTTLING_CODES`], [`TRANSIENT_CODES`], [`INVALID_CODES`],
//!   [`NOT_FOUND_CODES`]: the code lists, one per class.
//! - [`ACCESS_DENIED_CODES`], [`is_access_denied`]: which fatal codes are
//!   missing permissions.
//! - [`STALE_SIGNATURE_CODES`], [`is_stale_signature`]: a request signed at
//!   a skewed time or with expired credentials ("refresh, then retry").
//! - [`classify_code`]: code and HTTP status to class (the rules);
//!   [`classify_error`]: the same, reading the message where the code alone
//!   is ambiguous (`InvalidSignatureException` for a skewed clock).
//! - [`classify`]: any `SdkError<E, R>` whose `E: ProvideErrorMetadata`.
//! - [`classify_http`]: a raw HTTP error answer (status and JSON body with
//!   `__type`), as the writer's own transport receives it.
//! - [`HttpStatus`]: how [`classify`] reads the status of a raw response.
//! - [`describe`]: a failed call in one line, for messages and logs (no
//!   `Debug` dump).
//!
//! Guarantees:
//! - One list of throttling codes for every service: the AWS SDK's own list
//!   (`aws-runtime` `THROTTLING_ERRORS`) plus the KMS and SQS codes Kinesis
//!   and SQS send.
//! - A stale signature (clock skew, expired session token) is
//!   [`ErrorClass::Retry`], never fatal: the SDK's signer corrects its clock
//!   from the answer's `Date` header and its identity cache loads fresh
//!   credentials, so the next attempt, after the caller's back-off, can pass.
//! - Unknown 4xx codes are [`ErrorClass::Fatal`] on purpose: retrying them
//!   forever would hide a misconfiguration. Unknown 5xx codes, calls that got
//!   no answer (timeout, connection) and answers without a code and without a
//!   status are [`ErrorClass::Retry`].
//! - Callers holding a typed operation error should prefer its typed methods
//!   (`is_resource_not_found_exception()`, ...) for a single, known case, and
//!   use this crate to decide between retry, back-off and giving up.

use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// What to do about a failed AWS call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Transient (network, timeout, 5xx, conflict): retry after a short delay.
    Retry,
    /// Throttled: back off exponentially (and slow down).
    Throttled,
    /// A Kinesis shard iterator older than 5 minutes: get a new one.
    ExpiredIterator,
    /// A conditional write lost: not a failure of the call, the answer is "no".
    ConditionFailed,
    /// The stream, shard, table or queue does not exist.
    NotFound,
    /// The service rejected the request's content and would again
    /// (validation, item collection too large).
    Invalid,
    /// Anything else (credentials, permissions, unknown 4xx): do not retry.
    Fatal,
}

impl ErrorClass {
    /// True for the classes a retry can fix ([`ErrorClass::Retry`],
    /// [`ErrorClass::Throttled`]).
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Retry | Self::Throttled)
    }
}

/// Codes that mean "too many requests": back off. The SDK's list
/// (`aws_runtime::retries::classifiers::THROTTLING_ERRORS`), plus KMS
/// throttling (Kinesis and SQS with server-side encryption) and SQS's own.
pub const THROTTLING_CODES: &[&str] = &[
    // The AWS SDK's list.
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    // KMS behind Kinesis / SQS encryption.
    "KMSThrottlingException",
    "KmsThrottled",
    "KmsThrottlingException",
    // SQS (query protocol spellings).
    "AWS.SimpleQueueService.RequestThrottled",
    "OverLimit",
];

/// Codes of server-side trouble or conflicts that pass: retry.
pub const TRANSIENT_CODES: &[&str] = &[
    "InternalFailure",
    "InternalServerError",
    "InternalServerErrorException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "RequestTimeout",
    "RequestTimeoutException",
    "ResourceInUseException",
    "TransactionConflictException",
    "ReplicatedWriteConflictException",
    "InvalidEndpointException",
];

/// Codes about the request's content: the service refused it and would again.
pub const INVALID_CODES: &[&str] = &[
    "ValidationException",
    "ItemCollectionSizeLimitExceededException",
    "SerializationException",
];

/// Codes meaning the resource (stream, table, queue) does not exist.
pub const NOT_FOUND_CODES: &[&str] = &[
    "ResourceNotFoundException",
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
    "AWS.SimpleQueueService.QueueDoesNotExist",
];

/// Codes meaning the caller's identity may not make the call. They are
/// [`ErrorClass::Fatal`]; [`is_access_denied`] tells them from other fatal
/// codes for callers that give up on one item rather than stop.
pub const ACCESS_DENIED_CODES: &[&str] = &["AccessDeniedException", "AccessDenied"];

/// True when `code` says the caller lacks permission for the call.
pub fn is_access_denied(code: Option<&str>) -> bool {
    code.is_some_and(|c| ACCESS_DENIED_CODES.contains(&c))
}

/// Codes of a request signed at a time the service does not accept, or with
/// session credentials that have expired. Both pass once the client signs
/// again with a corrected clock or refreshed credentials: [`ErrorClass::Retry`].
pub const STALE_SIGNATURE_CODES: &[&str] = &[
    // S3-style and EC2-style skew codes (DynamoDB uses
    // InvalidSignatureException with a "Signature expired" message).
    "RequestTimeTooSkewed",
    "RequestExpired",
    "RequestInTheFuture",
    // Expired session tokens (DynamoDB, STS, query services).
    "ExpiredTokenException",
    "ExpiredToken",
    "TokenRefreshRequired",
];

/// The messages DynamoDB (and other JSON services) send with
/// `InvalidSignatureException` when the signing time is outside the
/// service's window ("Signature expired: 20261123T221000Z is now earlier
/// than ...", "Signature not yet current: ..."). A wrong secret key gives
/// the same code with another message, and stays fatal.
const SKEWED_SIGNATURE_MESSAGES: &[&str] = &["Signature expired", "Signature not yet current"];

/// True when `code` (and `message`) say the request was signed at a skewed
/// time or with expired credentials.
pub fn is_stale_signature(code: Option<&str>, message: Option<&str>) -> bool {
    match code {
        Some(c) if STALE_SIGNATURE_CODES.contains(&c) => true,
        Some("InvalidSignatureException") => message.is_some_and(|m| {
            SKEWED_SIGNATURE_MESSAGES
                .iter()
                .any(|prefix| m.trim_start().starts_with(prefix))
        }),
        _ => false,
    }
}

/// Classifies by error code, message and HTTP status: a stale signature
/// ([`is_stale_signature`]) is [`ErrorClass::Retry`], anything else as
/// [`classify_code`] says.
pub fn classify_error(
    code: Option<&str>,
    message: Option<&str>,
    status: Option<u16>,
) -> ErrorClass {
    if is_stale_signature(code, message) {
        return ErrorClass::Retry;
    }
    classify_code(code, status)
}

/// Classifies by error code and HTTP status (`None` when unknown).
pub fn classify_code(code: Option<&str>, status: Option<u16>) -> ErrorClass {
    match code {
        Some(c) if THROTTLING_CODES.contains(&c) => ErrorClass::Throttled,
        Some(c) if TRANSIENT_CODES.contains(&c) => ErrorClass::Retry,
        Some(c) if INVALID_CODES.contains(&c) => ErrorClass::Invalid,
        Some(c) if NOT_FOUND_CODES.contains(&c) => ErrorClass::NotFound,
        Some(c) if STALE_SIGNATURE_CODES.contains(&c) => ErrorClass::Retry,
        Some("ExpiredIteratorException") => ErrorClass::ExpiredIterator,
        Some("ConditionalCheckFailedException") => ErrorClass::ConditionFailed,
        _ if status.is_some_and(|s| s >= 500) => ErrorClass::Retry,
        Some(_) => ErrorClass::Fatal,
        None => match status {
            Some(429) => ErrorClass::Throttled,
            // An answer with an error status but no code (a proxy's page).
            Some(_) => ErrorClass::Fatal,
            // No code and no status: nothing says it is permanent.
            None => ErrorClass::Retry,
        },
    }
}

/// The HTTP status of an SDK error's raw response, when it has one.
pub trait HttpStatus {
    /// The status code, or `None` if this response type carries none.
    fn http_status(&self) -> Option<u16>;
}

impl HttpStatus for aws_smithy_runtime_api::http::Response {
    fn http_status(&self) -> Option<u16> {
        Some(self.status().as_u16())
    }
}

/// Unit responses (test doubles built with `SdkError::service_error(e, ())`).
impl HttpStatus for () {
    fn http_status(&self) -> Option<u16> {
        None
    }
}

/// Classifies any AWS SDK error: calls that got no usable answer (timeout,
/// connection failure, unreadable response) are [`ErrorClass::Retry`];
/// service errors by code and status; a request that could not be built
/// (credentials, region) is [`ErrorClass::Fatal`].
pub fn classify<E: ProvideErrorMetadata, R: HttpStatus>(err: &SdkError<E, R>) -> ErrorClass {
    match err {
        // No answer: the request may or may not have been applied; every
        // Tidemark write is idempotent or conditional, so sending again is safe.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ErrorClass::Retry
        }
        SdkError::ServiceError(e) => {
            classify_error(e.err().code(), e.err().message(), e.raw().http_status())
        }
        _ => ErrorClass::Fatal,
    }
}

/// A failed call in one line, without the `Debug` dump the SDK's
/// `DisplayErrorContext` appends: the service's code and message for an
/// error answer (`ResourceNotFoundException: Requested resource not
/// found`), and for a call without one, each cause's own words
/// (`dispatch failure: io error: ... tcp connect error: Connection refused
/// (os error 111)`).
pub fn describe<E, R>(err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    if let SdkError::ServiceError(e) = err {
        let e = e.err();
        return match (e.code(), e.message()) {
            (Some(c), Some(m)) => format!("{c}: {m}"),
            (Some(c), None) => c.to_string(),
            (None, Some(m)) => m.to_string(),
            (None, None) => causes(e),
        };
    }
    causes(err)
}

/// `err` and its sources' own messages, joined by `: ` (what [`describe`]
/// gives a call without an answer; for errors of no known service).
pub fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(err);
    while let Some(e) = next {
        let text = e.to_string();
        // A wrapper whose message repeats its source's adds nothing.
        if !text.is_empty() && parts.last() != Some(&text) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

/// The code of an SDK error, if the service answered with one.
pub fn error_code<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<&str> {
    match err {
        SdkError::ServiceError(e) => e.err().code(),
        _ => None,
    }
}

/// A raw HTTP error answer, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// Its class.
    pub class: ErrorClass,
    /// The error code (the part of `__type` after `#`), if the body had one.
    pub code: Option<String>,
    /// The service's message; the body's first 200 bytes when it was not an
    /// AWS JSON error (a proxy's HTML page, say).
    pub message: Option<String>,
}

/// Classifies a non-2xx answer from its status and JSON body
/// (`{"__type":"...#Code","message":"..."}`, as DynamoDB sends errors; some
/// services spell it `Message`).
pub fn classify_http(status: u16, body: &[u8]) -> HttpError {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(rename = "__type")]
        kind: Option<String>,
        #[serde(alias = "Message")]
        message: Option<String>,
    }
    let parsed: Option<Body> = serde_json::from_slice(body).ok();
    let (code, message) = match parsed {
        Some(b) => (
            b.kind
                .map(|t| t.rsplit('#').next().unwrap_or(&t).to_owned()),
            b.message,
        ),
        None => (None, None),
    };
    let message = match (&code, message) {
        (None, None) => Some(String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()),
        (_, m) => m,
    };
    HttpError {
        class: classify_error(code.as_deref(), message.as_deref(), Some(status)),
        code,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
    use aws_smithy_types::error::ErrorMetadata;

    /// Every code of every list, with the class it must get at HTTP 400.
    #[test]
    fn every_code_maps_to_its_class() {
        let mut cases: Vec<(&str, ErrorClass)> = Vec::new();
        cases.extend(THROTTLING_CODES.iter().map(|c| (*c, ErrorClass::Throttled)));
        cases.extend(TRANSIENT_CODES.iter().map(|c| (*c, ErrorClass::Retry)));
        cases.extend(INVALID_CODES.iter().map(|c| (*c, ErrorClass::Invalid)));
        cases.extend(NOT_FOUND_CODES.iter().map(|c| (*c, ErrorClass::NotFound)));
        cases.extend([
            ("ExpiredIteratorException", ErrorClass::ExpiredIterator),
            (
                "ConditionalCheckFailedException",
                ErrorClass::ConditionFailed,
            ),
            ("AccessDeniedException", ErrorClass::Fatal),
            ("UnrecognizedClientException", ErrorClass::Fatal),
            ("AccessDenied", ErrorClass::Fatal),
            ("Whatever", ErrorClass::Fatal),
        ]);
        assert!(cases.len() > 35, "{}", cases.len());
        for (code, want) in cases {
            assert_eq!(classify_code(Some(code), Some(400)), want, "{code} at 400");
            assert_eq!(
                classify_code(Some(code), None),
                want,
                "{code} without status"
            );
        }
    }

    /// No `Debug` dump: a service error is its code and message, a call
    /// without an answer its causes' own words.
    #[test]
    fn describe_has_no_debug_dump() {
        use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
        use aws_smithy_runtime_api::client::result::ConnectorError;
        let refused =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let e: SdkError<DescribeTableError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io(Box::new(refused)));
        let text = describe(&e);
        assert!(text.contains("Connection refused"), "{text}");
        assert!(
            !text.contains("DispatchFailure") && !text.contains("ConnectorError {"),
            "{text}"
        );
        let e: SdkError<DescribeTableError, HttpResponse> = SdkError::service_error(
            DescribeTableError::generic(
                ErrorMetadata::builder()
                    .code("ResourceNotFoundException")
                    .message("Requested resource not found")
                    .build(),
            ),
            HttpResponse::new(
                400.try_into().unwrap(),
                aws_smithy_types::body::SdkBody::empty(),
            ),
        );
        assert_eq!(
            describe(&e),
            "ResourceNotFoundException: Requested resource not found"
        );
    }

    #[test]
    fn access_denied_is_fatal_and_recognised() {
        for code in ACCESS_DENIED_CODES {
            assert!(is_access_denied(Some(code)), "{code}");
            assert_eq!(classify_code(Some(code), Some(400)), ErrorClass::Fatal);
        }
        assert!(!is_access_denied(Some("UnrecognizedClientException")));
        assert!(!is_access_denied(None));
    }

    #[test]
    fn no_list_holds_a_code_twice() {
        let all: Vec<&str> = [
            THROTTLING_CODES,
            TRANSIENT_CODES,
            INVALID_CODES,
            NOT_FOUND_CODES,
            STALE_SIGNATURE_CODES,
        ]
        .concat();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len());
    }

    #[test]
    fn status_decides_when_the_code_does_not() {
        let cases: &[(Option<&str>, Option<u16>, ErrorClass)] = &[
            (Some("Whatever"), Some(503), ErrorClass::Retry),
            (Some("Whatever"), Some(500), ErrorClass::Retry),
            (Some("Whatever"), Some(403), ErrorClass::Fatal),
            (None, Some(429), ErrorClass::Throttled),
            (None, Some(502), ErrorClass::Retry),
            (None, Some(403), ErrorClass::Fatal),
            (None, None, ErrorClass::Retry),
            // A known code wins over the status.
            (Some("ValidationException"), Some(500), ErrorClass::Invalid),
            (
                Some("ThrottlingException"),
                Some(500),
                ErrorClass::Throttled,
            ),
        ];
        for (code, status, want) in cases {
            assert_eq!(classify_code(*code, *status), *want, "{code:?} {status:?}");
        }
    }

    fn service_error(code: &str) -> SdkError<DescribeTableError, ()> {
        let meta = ErrorMetadata::builder().code(code).message("m").build();
        SdkError::service_error(DescribeTableError::generic(meta), ())
    }

    #[test]
    fn sdk_errors_classify_by_kind_and_code() {
        assert_eq!(
            classify(&service_error("ResourceNotFoundException")),
            ErrorClass::NotFound
        );
        assert_eq!(
            classify(&service_error("ThrottlingException")),
            ErrorClass::Throttled
        );
        assert_eq!(
            classify(&service_error("AccessDeniedException")),
            ErrorClass::Fatal
        );
        assert_eq!(error_code(&service_error("X")), Some("X"));
        let timeout: SdkError<DescribeTableError, ()> = SdkError::timeout_error("slow");
        assert_eq!(classify(&timeout), ErrorClass::Retry);
        assert_eq!(error_code(&timeout), None);
        let construction: SdkError<DescribeTableError, ()> =
            SdkError::construction_failure("no region");
        assert_eq!(classify(&construction), ErrorClass::Fatal);
    }

    #[test]
    fn sdk_errors_use_the_raw_status() {
        let raw = aws_smithy_runtime_api::http::Response::new(
            aws_smithy_runtime_api::http::StatusCode::try_from(503).unwrap(),
            aws_smithy_types::body::SdkBody::empty(),
        );
        let meta = ErrorMetadata::builder().code("Unheard").build();
        let err = SdkError::service_error(DescribeTableError::generic(meta), raw);
        assert_eq!(classify(&err), ErrorClass::Retry);
    }

    #[test]
    fn raw_answers_classify_by_type_and_status() {
        /// Status, body, then the class, code and message expected.
        type Case<'a> = (u16, &'a [u8], ErrorClass, Option<&'a str>, Option<&'a str>);
        let cases: &[Case<'_>] = &[
            (
                400,
                br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow"}"#,
                ErrorClass::Throttled,
                Some("ProvisionedThroughputExceededException"),
                Some("slow"),
            ),
            (
                400,
                br#"{"__type":"com.amazon.coral.validate#ValidationException","Message":"bad item"}"#,
                ErrorClass::Invalid,
                Some("ValidationException"),
                Some("bad item"),
            ),
            (
                400,
                br#"{"__type":"x#ResourceNotFoundException","message":"gone"}"#,
                ErrorClass::NotFound,
                Some("ResourceNotFoundException"),
                Some("gone"),
            ),
            (
                400,
                br#"{"__type":"AccessDeniedException","message":"no"}"#,
                ErrorClass::Fatal,
                Some("AccessDeniedException"),
                Some("no"),
            ),
            // A proxy's HTML error page: the status decides, the text is kept.
            (
                502,
                b"<html>bad gateway</html>",
                ErrorClass::Retry,
                None,
                Some("<html>bad gateway</html>"),
            ),
            (403, b"denied", ErrorClass::Fatal, None, Some("denied")),
            (429, b"", ErrorClass::Throttled, None, Some("")),
        ];
        for (status, body, class, code, message) in cases {
            let got = classify_http(*status, body);
            assert_eq!(
                got.class,
                *class,
                "{status} {}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(got.code.as_deref(), *code);
            assert_eq!(got.message.as_deref(), *message);
        }
    }

    #[test]
    fn only_retry_and_throttled_are_retryable() {
        use ErrorClass::*;
        for (class, want) in [
            (Retry, true),
            (Throttled, true),
            (ExpiredIterator, false),
            (ConditionFailed, false),
            (NotFound, false),
            (Invalid, false),
            (Fatal, false),
        ] {
            assert_eq!(class.is_retryable(), want, "{class:?}");
        }
    }

    /// Skew and expired credentials are "retry", whatever the service's
    /// spelling; a bad signature for another reason stays fatal.
    #[test]
    fn stale_signatures_are_retried_not_fatal() {
        let expired = br#"{"__type":"com.amazon.coral.service#InvalidSignatureException","message":"Signature expired: 20261123T221000Z is now earlier than 20261123T222500Z (20261123T224000Z - 15 min.)"}"#;
        assert_eq!(classify_http(400, expired).class, ErrorClass::Retry);
        let future = br#"{"__type":"com.amazon.coral.service#InvalidSignatureException","message":"Signature not yet current: 20261123T230000Z is still later than 20261123T225500Z (20261123T224000Z + 15 min.)"}"#;
        assert_eq!(classify_http(400, future).class, ErrorClass::Retry);
        let wrong_key = br#"{"__type":"com.amazon.coral.service#InvalidSignatureException","message":"The request signature we calculated does not match the signature you provided."}"#;
        assert_eq!(classify_http(400, wrong_key).class, ErrorClass::Fatal);
        let token = br#"{"__type":"com.amazon.coral.service#ExpiredTokenException","message":"The security token included in the request is expired"}"#;
        assert_eq!(classify_http(400, token).class, ErrorClass::Retry);
        for code in STALE_SIGNATURE_CODES {
            assert!(is_stale_signature(Some(code), None), "{code}");
            assert_eq!(classify_code(Some(code), Some(403)), ErrorClass::Retry);
        }
        assert!(!is_stale_signature(Some("InvalidSignatureException"), None));
        assert!(!is_stale_signature(None, Some("Signature expired")));
        // Through an SDK error, the message is read too.
        let meta = ErrorMetadata::builder()
            .code("InvalidSignatureException")
            .message("Signature expired: 20261123T221000Z is now earlier than 20261123T222500Z")
            .build();
        let err: SdkError<DescribeTableError, ()> =
            SdkError::service_error(DescribeTableError::generic(meta), ());
        assert_eq!(classify(&err), ErrorClass::Retry);
    }
}
