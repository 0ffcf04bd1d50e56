//! [`LoadError`]: why a configuration cannot be used.

use super::check::Problem;

/// A configuration that cannot be used; the message names the key and the fix.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax {
        /// The path.
        path: String,
        /// The parser's message (with line and column).
        message: String,
    },
    /// An environment override cannot be applied.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong.
        message: String,
    },
    /// A key is unknown, missing, or has a bad value.
    #[error("config key `{key}`: {message}")]
    Key {
        /// Dotted path of the key, e.g. `source.failover_time`.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Every problem found, each with its key, value, source and fix.
    #[error("{}", list_problems(.0))]
    Invalid(Vec<Problem>),
}

/// One problem per line, after a count when there are several.
fn list_problems(problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => {
            let mut s = format!("{} problems in the config:", many.len());
            for p in many {
                s.push_str("\n  - ");
                s.push_str(&p.to_string());
            }
            s
        }
    }
}
