//! The exit statuses of the command line and the error types that carry
//! them. Apart from `cmd` and `aws` so neither has to import the other.

/// The exit codes, as `--help` shows them.
pub(crate) const EXIT_CODES: &str = "Exit status:\n  \
0   success (a closed output pipe ends a command quietly, with 0)\n  \
1   the command's own failure: `verify` events missing or different, `replay` records\n      \
dead-lettered, `tables rotate` actions failed, a stream or table not found, ...\n  \
2   usage error (unknown option, missing or impossible argument)\n  \
69  AWS unavailable: connection refused, DNS, no answer for --give-up-after,\n      \
throttled past it, or --timeout reached\n  \
77  permission denied (AccessDenied)\n  \
78  local configuration: the config (`tidemark config check` lists every problem), no\n      \
region, no credentials, an unknown profile, credentials AWS does not accept";

/// Exit status for a usage error (clap's).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status for a configuration error (EX_CONFIG of sysexits.h).
pub(crate) const EXIT_CONFIG: u8 = 78;
/// Exit status when the backend, not the data, is the problem
/// (EX_UNAVAILABLE), so a caller can tell "try later" from "missing".
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;

/// The command line asks for something impossible (exit 2, as clap's own
/// usage errors).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Usage(pub(crate) String);

/// The command's own documented failure (exit 1): records dead-lettered,
/// events missing, maintenance actions failed. Not an AWS failure, whatever
/// the calls before it did.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Failed(pub(crate) String);

/// A command's own exit status, with its message (`config check
/// --environment`: the worst check).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Exit {
    pub(crate) code: u8,
    pub(crate) message: String,
}

/// An AWS service gave no answer to any call of a command, or the command
/// ran past `--timeout` (exit 69).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unavailable(pub(crate) String);
