//! The writer's error type, and the one place DynamoDB errors are classified.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;

/// Why the writer stopped or refused a submission.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// The writer no longer accepts submissions (closed, or ended).
    #[error("the writer is closed")]
    Closed,
    /// DynamoDB refused the writer's credentials or permissions, or another
    /// error that retrying cannot fix. Submissions in flight are not completed.
    #[error("fatal DynamoDB error on table {table}: {code}: {message}")]
    Fatal {
        /// The table whose call failed.
        table: String,
        /// The error code (e.g. `AccessDeniedException`).
        code: String,
        /// DynamoDB's message.
        message: String,
    },
    /// The configuration is invalid (the message names the key).
    #[error("invalid writer configuration: {0}")]
    Config(String),
    /// A writer task panicked.
    #[error("writer task failed: {0}")]
    TaskFailed(String),
}

/// What to do about a failed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// The table is over capacity: back off, cut the rate, retry.
    Throttled,
    /// 5xx, timeout, connection: back off and retry, without limit.
    Transient(String),
    /// DynamoDB rejected the request's content: bisect to find the items.
    Invalid(String),
    /// The table does not exist.
    TableMissing(String),
    /// Retrying cannot help (credentials, permissions, unknown 4xx).
    Fatal { code: String, message: String },
}

const THROTTLE_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "Throttling",
    "TooManyRequestsException",
];

const TRANSIENT_CODES: &[&str] = &[
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "RequestTimeout",
    "RequestTimeoutException",
    "TransactionConflictException",
    "ReplicatedWriteConflictException",
    "InvalidEndpointException",
    "PriorRequestNotComplete",
];

/// Errors about the content of items: DynamoDB refused them, and would again.
const INVALID_CODES: &[&str] = &[
    "ValidationException",
    "ItemCollectionSizeLimitExceededException",
    "SerializationException",
];

/// Classifies by error code and HTTP status. Unknown 4xx codes are fatal on
/// purpose: retrying them forever would hide a misconfiguration, and
/// dead-lettering them would drop good data.
pub(crate) fn classify_code(
    code: Option<&str>,
    message: Option<&str>,
    status: Option<u16>,
) -> ErrorClass {
    let message = message.unwrap_or_default().to_owned();
    match code {
        Some(c) if THROTTLE_CODES.contains(&c) => ErrorClass::Throttled,
        Some(c) if TRANSIENT_CODES.contains(&c) => ErrorClass::Transient(format!("{c}: {message}")),
        Some(c) if INVALID_CODES.contains(&c) => ErrorClass::Invalid(if message.is_empty() {
            c.to_owned()
        } else {
            message
        }),
        Some("ResourceNotFoundException") => ErrorClass::TableMissing(message),
        _ if status.is_some_and(|s| s >= 500) => {
            ErrorClass::Transient(format!("HTTP {}: {message}", status.unwrap_or_default()))
        }
        Some(c) => ErrorClass::Fatal {
            code: c.to_owned(),
            message,
        },
        None if status == Some(429) => ErrorClass::Throttled,
        None => ErrorClass::Fatal {
            code: format!("HTTP {}", status.map_or("?".into(), |s| s.to_string())),
            message,
        },
    }
}

fn classify_sdk<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    err: &SdkError<E, aws_smithy_runtime_api::http::Response>,
    modeled_code: impl Fn(&E) -> Option<&'static str>,
) -> ErrorClass {
    match err {
        SdkError::ServiceError(se) => {
            let e = se.err();
            let code = e.code().or_else(|| modeled_code(e));
            classify_code(code, e.message(), Some(se.raw().status().as_u16()))
        }
        // No response came back: the request may or may not have been applied;
        // puts are idempotent, so sending again is safe.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ErrorClass::Transient(format!(
                "{}",
                aws_smithy_types::error::display::DisplayErrorContext(err)
            ))
        }
        // The request could not even be built (credentials, region, ...).
        _ => ErrorClass::Fatal {
            code: "RequestConstruction".into(),
            message: format!(
                "{}",
                aws_smithy_types::error::display::DisplayErrorContext(err)
            ),
        },
    }
}

/// Classifies a BatchWriteItem answer that is not HTTP 200 from its status
/// and JSON body (`{"__type":"...#Code","message":"..."}`, as DynamoDB sends
/// errors; some services spell it `Message`).
pub(crate) fn classify_raw(status: u16, body: &[u8]) -> ErrorClass {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(rename = "__type")]
        kind: Option<String>,
        #[serde(alias = "Message")]
        message: Option<String>,
    }
    let parsed: Option<Body> = serde_json::from_slice(body).ok();
    let code = parsed
        .as_ref()
        .and_then(|b| b.kind.as_deref())
        .map(|t| t.rsplit('#').next().unwrap_or(t));
    let message = parsed.as_ref().and_then(|b| b.message.as_deref());
    let fallback;
    let message = match (code, message) {
        (None, None) => {
            fallback = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            Some(fallback.as_str())
        }
        _ => message,
    };
    classify_code(code, message, Some(status))
}

/// Classifies a DescribeTable failure.
pub(crate) fn classify_describe(
    err: &SdkError<DescribeTableError, aws_smithy_runtime_api::http::Response>,
) -> ErrorClass {
    classify_sdk(err, |e| match e {
        DescribeTableError::ResourceNotFoundException(_) => Some("ResourceNotFoundException"),
        DescribeTableError::InternalServerError(_) => Some("InternalServerError"),
        DescribeTableError::InvalidEndpointException(_) => Some("InvalidEndpointException"),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_actions() {
        let c = |code| classify_code(Some(code), Some("m"), Some(400));
        assert_eq!(
            c("ProvisionedThroughputExceededException"),
            ErrorClass::Throttled
        );
        assert_eq!(c("ThrottlingException"), ErrorClass::Throttled);
        assert_eq!(c("ValidationException"), ErrorClass::Invalid("m".into()));
        assert_eq!(
            c("ResourceNotFoundException"),
            ErrorClass::TableMissing("m".into())
        );
        assert!(
            matches!(c("AccessDeniedException"), ErrorClass::Fatal { code, .. } if code == "AccessDeniedException")
        );
        assert!(matches!(
            c("UnrecognizedClientException"),
            ErrorClass::Fatal { .. }
        ));
        assert!(matches!(
            classify_code(Some("Whatever"), None, Some(503)),
            ErrorClass::Transient(_)
        ));
        assert!(matches!(c("InternalServerError"), ErrorClass::Transient(_)));
        assert_eq!(classify_code(None, None, Some(429)), ErrorClass::Throttled);
    }

    #[test]
    fn raw_answers_classify_by_type_and_status() {
        let throttled = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow"}"#;
        assert_eq!(classify_raw(400, throttled), ErrorClass::Throttled);
        assert_eq!(
            classify_raw(
                400,
                br#"{"__type":"com.amazon.coral.validate#ValidationException","Message":"bad item"}"#
            ),
            ErrorClass::Invalid("bad item".into())
        );
        assert_eq!(
            classify_raw(
                400,
                br#"{"__type":"x#ResourceNotFoundException","message":"gone"}"#
            ),
            ErrorClass::TableMissing("gone".into())
        );
        assert!(matches!(
            classify_raw(400, br#"{"__type":"x#AccessDeniedException","message":"no"}"#),
            ErrorClass::Fatal { code, message } if code == "AccessDeniedException" && message == "no"
        ));
        // A proxy's HTML error page: the status decides, the text is kept.
        assert!(matches!(
            classify_raw(502, b"<html>bad gateway</html>"),
            ErrorClass::Transient(m) if m.contains("bad gateway")
        ));
        assert!(matches!(
            classify_raw(403, b"denied"),
            ErrorClass::Fatal { code, .. } if code == "HTTP 403"
        ));
    }
}
