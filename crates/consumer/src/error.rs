//! The consumer's errors; AWS errors are classified by `tidemark-aws-errors`.

use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};

/// How the crate treats a failed AWS call: the workspace's one classifier.
pub use tidemark_aws_errors::ErrorClass;
use tidemark_aws_errors::{HttpStatus, classify};

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
    pub fn new<E, R>(op: &'static str, err: &SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: HttpStatus + std::fmt::Debug + 'static,
    {
        let class = match classify(err) {
            // The consumer sends no user content: a rejected request is a
            // bug or a misconfiguration, so it stops like any other.
            ErrorClass::Invalid => ErrorClass::Fatal,
            class => class,
        };
        let message = match err {
            SdkError::ServiceError(e) => format!(
                "{}: {}",
                e.err().code().unwrap_or("unknown"),
                e.err().message().unwrap_or("")
            ),
            other => tidemark_aws_errors::describe(other),
        };
        Self { op, class, message }
    }
}

/// A source configuration that cannot work, naming the key (under
/// `source`) and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("source.{key}: {problem}")]
pub struct SourceConfigError {
    /// The offending key, e.g. `max_records_per_call`.
    pub key: &'static str,
    /// What is wrong and how to fix it.
    pub problem: String,
}

/// Errors of a source.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// Invalid configuration.
    #[error(transparent)]
    Config(#[from] SourceConfigError),
    /// An AWS call failed in a way that stops the consumer.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// A table exists with another key schema than the one needed.
    #[error(transparent)]
    KeySchema(#[from] crate::keyschema::KeySchemaMismatch),
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
    OutOfOrder(#[from] crate::kinesis::checkpoint::OutOfOrder),
    /// A task of the source panicked (a bug).
    #[error("{source_kind} source task failed: {message}")]
    Task {
        /// Which source.
        source_kind: &'static str,
        /// The join error.
        message: String,
    },
    /// The shutdown drain left shards unfinished: their final checkpoint or
    /// lease release failed, or their reader was aborted. Nothing is lost
    /// (only acknowledged records are ever checkpointed); the next owner
    /// reads them from the last checkpoint, once the lease expires.
    #[error("shutdown incomplete: final checkpoint or lease release failed for shards {shards:?}")]
    DrainIncomplete {
        /// The shards left unfinished.
        shards: Vec<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kinesis::operation::get_records::GetRecordsError;
    use aws_smithy_types::error::ErrorMetadata;

    #[test]
    fn aws_errors_take_the_shared_class_invalid_is_fatal() {
        let err = |code: &str| {
            let meta = ErrorMetadata::builder().code(code).message("m").build();
            SdkError::<GetRecordsError, ()>::service_error(GetRecordsError::generic(meta), ())
        };
        for (code, want) in [
            (
                "ProvisionedThroughputExceededException",
                ErrorClass::Throttled,
            ),
            ("KMSThrottlingException", ErrorClass::Throttled),
            ("LimitExceededException", ErrorClass::Throttled),
            ("ExpiredIteratorException", ErrorClass::ExpiredIterator),
            (
                "ConditionalCheckFailedException",
                ErrorClass::ConditionFailed,
            ),
            ("ResourceNotFoundException", ErrorClass::NotFound),
            ("ValidationException", ErrorClass::Fatal),
            ("InternalFailure", ErrorClass::Retry),
        ] {
            let e = AwsError::new("GetRecords", &err(code));
            assert_eq!(e.class, want, "{code}");
            assert_eq!(e.message, format!("{code}: m"));
        }
    }
}
