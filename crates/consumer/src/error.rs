//! Errors, and the one place AWS errors are classified.

use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};

use crate::config::ConfigError;

/// How the rest of the crate treats a failed AWS call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Transient (network, timeout, 5xx): retry after a short delay.
    Retry,
    /// Throttled: back off exponentially.
    Throttled,
    /// A shard iterator older than 5 minutes: get a new one.
    ExpiredIterator,
    /// A conditional write lost (lease taken or counter moved): not an error
    /// of the call, the answer is "no".
    ConditionFailed,
    /// The stream, shard or table does not exist.
    NotFound,
    /// Anything else (validation, access denied): do not retry.
    Fatal,
}

/// Classifies any AWS SDK error by its error code and HTTP status.
pub fn classify<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> ErrorClass {
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ErrorClass::Retry
        }
        SdkError::ServiceError(e) => classify_code(e.err().code()),
        _ => ErrorClass::Fatal,
    }
}

/// Classifies an AWS error code (`None`: no code, treated as transient).
pub fn classify_code(code: Option<&str>) -> ErrorClass {
    match code {
        Some(
            "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "Throttling"
            | "LimitExceededException"
            | "KMSThrottlingException"
            | "RequestLimitExceeded"
            | "TooManyRequestsException",
        ) => ErrorClass::Throttled,
        Some("ExpiredIteratorException") => ErrorClass::ExpiredIterator,
        Some("ConditionalCheckFailedException") => ErrorClass::ConditionFailed,
        Some("ResourceNotFoundException") => ErrorClass::NotFound,
        Some(
            "InternalFailure"
            | "InternalServerError"
            | "InternalServerErrorException"
            | "ServiceUnavailable"
            | "ServiceUnavailableException"
            | "ResourceInUseException"
            | "TransactionConflictException",
        )
        | None => ErrorClass::Retry,
        Some(_) => ErrorClass::Fatal,
    }
}

/// A failed AWS call, classified.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op} failed ({class:?}): {message}")]
pub struct AwsError {
    /// The operation, e.g. `GetRecords`.
    pub op: &'static str,
    /// Its classification.
    pub class: ErrorClass,
    /// The error's text, with code when the service gave one.
    pub message: String,
}

impl AwsError {
    /// Wraps an SDK error of operation `op`.
    pub fn new<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
        op: &'static str,
        err: &SdkError<E, R>,
    ) -> Self {
        let class = classify(err);
        let message = match err {
            SdkError::ServiceError(e) => format!(
                "{}: {}",
                e.err().code().unwrap_or("unknown"),
                e.err().message().unwrap_or("")
            ),
            other => format!(
                "{}",
                aws_smithy_types::error::display::DisplayErrorContext(other)
            ),
        };
        Self { op, class, message }
    }
}

/// Errors of the consumer.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// Invalid configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An AWS call failed in a way that stops the consumer.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The lease table exists but is not in the KCL format.
    #[error("lease table {table}: {problem}")]
    LeaseTable {
        /// Table name.
        table: String,
        /// What is wrong.
        problem: String,
    },
    /// A fixture file could not be read or written.
    #[error("fixture {path}: {problem}")]
    Fixture {
        /// File path.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// A reader registered positions out of order (a bug).
    #[error(transparent)]
    OutOfOrder(#[from] crate::checkpoint::OutOfOrder),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_classes() {
        assert_eq!(
            classify_code(Some("ProvisionedThroughputExceededException")),
            ErrorClass::Throttled
        );
        assert_eq!(
            classify_code(Some("ExpiredIteratorException")),
            ErrorClass::ExpiredIterator
        );
        assert_eq!(
            classify_code(Some("ConditionalCheckFailedException")),
            ErrorClass::ConditionFailed
        );
        assert_eq!(
            classify_code(Some("ValidationException")),
            ErrorClass::Fatal
        );
        assert_eq!(classify_code(None), ErrorClass::Retry);
    }
}
