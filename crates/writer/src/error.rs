//! The writer's error type, and what the writer does about each class of
//! DynamoDB error (the classes come from `tidemark-aws-errors`).

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use tidemark_aws_errors::{ErrorClass, classify};

use crate::keyrate::Scope;

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

/// What the table loop does about a failed call: the shared
/// [`ErrorClass`] with the text the loop logs or reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Over capacity: the table's, or one key range's (DynamoDB's
    /// `ThrottlingReasons` say which, when the answer carries them).
    Throttled(Scope),
    /// 5xx, timeout, connection: back off and retry, without limit.
    Transient(String),
    /// DynamoDB rejected the request's content: bisect to find the items.
    Invalid(String),
    /// The table does not exist.
    TableMissing(String),
    /// Retrying cannot help (credentials, permissions, unknown 4xx).
    Fatal { code: String, message: String },
}

impl Failure {
    /// What the endpoint's governor learns from a call that failed so.
    pub(crate) fn outcome(&self) -> tidemark_governor::Outcome {
        use tidemark_governor::Outcome;
        match self {
            Failure::Throttled(_) => Outcome::Throttled,
            Failure::Transient(_) => Outcome::Congested,
            Failure::Invalid(_) | Failure::TableMissing(_) | Failure::Fatal { .. } => {
                Outcome::Answered
            }
        }
    }

    /// The writer's action for a classified error. Unknown 4xx codes are
    /// fatal on purpose: retrying them forever would hide a
    /// misconfiguration, and dead-lettering them would drop good data.
    fn from_class(
        class: ErrorClass,
        code: Option<&str>,
        message: Option<&str>,
        status: Option<u16>,
    ) -> Self {
        let message = message.unwrap_or_default().to_owned();
        let status_text = || format!("HTTP {}", status.map_or("?".into(), |s| s.to_string()));
        match class {
            ErrorClass::Throttled => Self::Throttled(Scope::Unknown),
            ErrorClass::Retry => Self::Transient(format!(
                "{}: {message}",
                code.map_or_else(status_text, str::to_owned)
            )),
            ErrorClass::Invalid => Self::Invalid(match code {
                Some(c) if message.is_empty() => c.to_owned(),
                _ => message,
            }),
            ErrorClass::NotFound => Self::TableMissing(message),
            // BatchWriteItem and DescribeTable have no condition and no
            // iterator: such an answer is as unexpected as an unknown code.
            ErrorClass::ConditionFailed | ErrorClass::ExpiredIterator | ErrorClass::Fatal => {
                Self::Fatal {
                    code: code.map_or_else(status_text, str::to_owned),
                    message,
                }
            }
        }
    }
}

/// Classifies a BatchWriteItem answer that is not HTTP 200 from its status
/// and JSON body (see [`tidemark_aws_errors::classify_http`]).
pub(crate) fn classify_raw(status: u16, body: &[u8]) -> Failure {
    let e = tidemark_aws_errors::classify_http(status, body);
    match Failure::from_class(
        e.class,
        e.code.as_deref(),
        e.message.as_deref(),
        Some(status),
    ) {
        Failure::Throttled(_) => Failure::Throttled(throttle_scope(body)),
        other => other,
    }
}

/// What a throttling error's `ThrottlingReasons` say (the SDK's
/// `types::ThrottlingReason`, on `ProvisionedThroughputExceededException`,
/// `ThrottlingException` and `RequestLimitExceeded`): read from the raw body,
/// which the writer's transport returns unparsed.
fn throttle_scope(body: &[u8]) -> Scope {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(rename = "ThrottlingReasons", default)]
        reasons: Vec<Reason>,
    }
    #[derive(serde::Deserialize)]
    struct Reason {
        reason: Option<String>,
    }
    match serde_json::from_slice::<Body>(body) {
        Ok(b) => Scope::of_reasons(b.reasons.iter().filter_map(|r| r.reason.as_deref())),
        Err(_) => Scope::Unknown,
    }
}

/// Classifies a DescribeTable failure.
pub(crate) fn classify_describe(
    err: &SdkError<DescribeTableError, aws_smithy_runtime_api::http::Response>,
) -> Failure {
    match err {
        SdkError::ServiceError(se) => {
            let e = se.err();
            if e.is_resource_not_found_exception() {
                return Failure::TableMissing(e.message().unwrap_or_default().to_owned());
            }
            let status = se.raw().status().as_u16();
            Failure::from_class(classify(err), e.code(), e.message(), Some(status))
        }
        // No response came back: DescribeTable only reads, so asking again is safe.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            Failure::Transient(tidemark_aws_errors::describe(err))
        }
        // The request could not even be built (credentials, region, ...).
        _ => Failure::Fatal {
            code: "RequestConstruction".into(),
            message: tidemark_aws_errors::describe(err),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_actions() {
        let c = |code| {
            Failure::from_class(
                tidemark_aws_errors::classify_code(Some(code), Some(400)),
                Some(code),
                Some("m"),
                Some(400),
            )
        };
        let throttled = Failure::Throttled(Scope::Unknown);
        assert_eq!(c("ProvisionedThroughputExceededException"), throttled);
        assert_eq!(c("ThrottlingException"), throttled);
        assert_eq!(c("ValidationException"), Failure::Invalid("m".into()));
        assert_eq!(
            c("ResourceNotFoundException"),
            Failure::TableMissing("m".into())
        );
        assert!(
            matches!(c("AccessDeniedException"), Failure::Fatal { code, .. } if code == "AccessDeniedException")
        );
        assert!(matches!(
            c("UnrecognizedClientException"),
            Failure::Fatal { .. }
        ));
        assert!(matches!(
            classify_raw(503, br#"{"__type":"Whatever"}"#),
            Failure::Transient(_)
        ));
        // The two lists disagreed; the shared one throttles these.
        assert_eq!(c("LimitExceededException"), throttled);
        assert_eq!(c("KMSThrottlingException"), throttled);
        assert!(matches!(c("InternalServerError"), Failure::Transient(_)));
        assert_eq!(classify_raw(429, b""), throttled);
    }

    #[test]
    fn raw_answers_classify_by_type_and_status() {
        let throttled = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow"}"#;
        assert_eq!(
            classify_raw(400, throttled),
            Failure::Throttled(Scope::Unknown)
        );
        // DynamoDB's throttling reasons, as the limits proxy sends them.
        let key_range = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow","ThrottlingReasons":[{"reason":"TableWriteKeyRangeThroughputExceeded","resource":"arn:aws:dynamodb:us-east-1:000000000000:table/t"}]}"#;
        assert_eq!(
            classify_raw(400, key_range),
            Failure::Throttled(Scope::KeyRange)
        );
        let table = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow","ThrottlingReasons":[{"reason":"TableWriteProvisionedThroughputExceeded"}]}"#;
        assert_eq!(classify_raw(400, table), Failure::Throttled(Scope::Table));
        assert_eq!(
            classify_raw(
                400,
                br#"{"__type":"com.amazon.coral.validate#ValidationException","Message":"bad item"}"#
            ),
            Failure::Invalid("bad item".into())
        );
        assert_eq!(
            classify_raw(
                400,
                br#"{"__type":"x#ResourceNotFoundException","message":"gone"}"#
            ),
            Failure::TableMissing("gone".into())
        );
        assert!(matches!(
            classify_raw(400, br#"{"__type":"x#AccessDeniedException","message":"no"}"#),
            Failure::Fatal { code, message } if code == "AccessDeniedException" && message == "no"
        ));
        // A proxy's HTML error page: the status decides, the text is kept.
        assert!(matches!(
            classify_raw(502, b"<html>bad gateway</html>"),
            Failure::Transient(m) if m.contains("bad gateway")
        ));
        assert!(matches!(
            classify_raw(403, b"denied"),
            Failure::Fatal { code, .. } if code == "HTTP 403"
        ));
    }

    /// A skewed clock or an expired session token: retried (the SDK signs
    /// the next attempt with its corrected clock / fresh credentials),
    /// never fatal, never dead-lettered.
    #[test]
    fn stale_signatures_are_transient() {
        let skew = br#"{"__type":"com.amazon.coral.service#InvalidSignatureException","message":"Signature expired: 20261123T220000Z is now earlier than 20261123T220500Z (20261123T221000Z - 5 min.)"}"#;
        assert!(matches!(classify_raw(400, skew), Failure::Transient(_)));
        let token = br#"{"__type":"com.amazon.coral.service#ExpiredTokenException","message":"The security token included in the request is expired"}"#;
        assert!(matches!(classify_raw(400, token), Failure::Transient(_)));
        let wrong = br#"{"__type":"com.amazon.coral.service#InvalidSignatureException","message":"The request signature we calculated does not match"}"#;
        assert!(matches!(classify_raw(400, wrong), Failure::Fatal { .. }));
    }
}
