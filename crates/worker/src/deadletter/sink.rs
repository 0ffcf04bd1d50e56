//! The [`DeadLetterSink`] trait every destination implements, and its
//! [`DeadLetterError`].

use futures::future::BoxFuture;

use super::entry::DeadLetter;

/// Errors writing dead letters.
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    /// The destination refused or could not be reached.
    #[error("dead-letter destination {destination}: {message}")]
    Destination {
        /// Which destination.
        destination: String,
        /// What went wrong.
        message: String,
    },
}

/// A durable destination for dead letters.
pub trait DeadLetterSink: Send + Sync + 'static {
    /// Writes every entry durably, or fails (the caller retries them all, or
    /// splits them; a repeat of an entry is harmless).
    fn write<'a>(&'a self, entries: &'a [DeadLetter])
    -> BoxFuture<'a, Result<(), DeadLetterError>>;
}
