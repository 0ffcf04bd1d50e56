//! The [`DeadLetterSink`] trait every destination implements, and its
//! [`DeadLetterError`].

use futures::future::BoxFuture;

use super::entry::DeadLetter;

/// Errors writing dead letters (Clone: one failed object fails every
/// batch it held).
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeadLetterError {
    /// The destination refused or could not be reached.
    #[error("dead-letter destination {destination}: {message}")]
    Destination {
        /// Which destination.
        destination: String,
        /// What went wrong.
        message: String,
        /// True when the destination refused for good (access denied, a
        /// missing queue or table, a refused entry): trying again cannot
        /// help. False for what passes (throttling, a timeout, a 5xx, no
        /// connection): tried again until it answers.
        permanent: bool,
    },
}

impl DeadLetterError {
    /// True when trying again cannot help.
    pub fn is_permanent(&self) -> bool {
        match self {
            DeadLetterError::Destination { permanent, .. } => *permanent,
        }
    }

    /// A failure of a call to `destination`, permanent unless its class is
    /// one a retry fixes.
    pub(crate) fn of_class(
        destination: String,
        message: String,
        class: tidemark_aws_errors::ErrorClass,
    ) -> Self {
        DeadLetterError::Destination {
            destination,
            message,
            permanent: !class.is_retryable(),
        }
    }
}

/// A durable destination for dead letters. New destinations (an S3 bucket,
/// say) implement this and a [`DeadLetterConfig`] variant; the queue,
/// retries, concurrency and fallback are shared.
pub trait DeadLetterSink: Send + Sync + 'static {
    /// Writes every entry durably, or fails, saying whether for good
    /// ([`DeadLetterError::is_permanent`]): a transient failure is tried
    /// again as it is, a refusal split to find the refused entries (a
    /// repeat of an entry is harmless).
    fn write<'a>(&'a self, entries: &'a [DeadLetter])
    -> BoxFuture<'a, Result<(), DeadLetterError>>;
}
