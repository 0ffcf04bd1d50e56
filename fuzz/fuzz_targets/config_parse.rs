//! The worker's config loader on arbitrary TOML text plus environment
//! overrides.
//!
//! Input format (so the example configs are seeds as they are): TOML text,
//! optionally followed by a line `#ENV` and then `NAME=VALUE` lines, the
//! environment. A name without the `TIDEMARK__` prefix gets it, except
//! `HOSTNAME` and `ECS_CONTAINER_METADATA_URI_V4`.
//!
//! Invariants:
//! - `Config::from_toml` never panics and is deterministic;
//! - an error is a TOML syntax error with the file name, an environment error
//!   naming one of the given `TIDEMARK__` variables, or a key error naming a
//!   non-empty key; never a read error;
//! - an Ok config validates again, and so do its parts: router, writer, and
//!   the source (with the same checks the source runs when it starts); the
//!   event fields and key attributes are the same everywhere they are copied.
#![no_main]

use std::collections::BTreeMap;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tidemark_schema::route::Router;
use tidemark_worker::config::{Config, ENV_PREFIX, LoadError};

const PATH: &str = "fuzz.toml";

fn split(text: &str) -> (&str, BTreeMap<String, String>) {
    let (toml, env_text) = match text.split_once("\n#ENV\n") {
        Some((t, e)) => (t, e),
        None => (text, ""),
    };
    let mut env = BTreeMap::new();
    // A fixed host name: the worker id default must not depend on the machine.
    env.insert("HOSTNAME".to_string(), "fuzz-host".to_string());
    for line in env_text.lines() {
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        let name = if name.starts_with(ENV_PREFIX)
            || name == "HOSTNAME"
            || name == "ECS_CONTAINER_METADATA_URI_V4"
        {
            name.to_string()
        } else {
            format!("{ENV_PREFIX}{name}")
        };
        env.insert(name, value.to_string());
    }
    (toml, env)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (toml, env) = split(text);
    let first = Config::from_toml(toml, PATH, &env);
    let second = Config::from_toml(toml, PATH, &env);
    assert_eq!(
        format!("{first:?}"),
        format!("{second:?}"),
        "loading is not deterministic"
    );
    match first {
        Ok(c) => {
            c.validate()
                .unwrap_or_else(|e| panic!("a loaded config fails validation: {e}"));
            Router::new(c.schema.clone())
                .unwrap_or_else(|e| panic!("a loaded config's router fails: {e}"));
            assert_eq!(c.schema.event, c.event);
            c.writer
                .validate()
                .unwrap_or_else(|e| panic!("a loaded writer config fails: {e}"));
            assert!(c.maintenance.interval >= Duration::from_secs(1));
            // The checks each source runs when it starts.
            c.source
                .validate()
                .unwrap_or_else(|e| panic!("a loaded source config fails at start: {e}"));
        }
        Err(LoadError::Read { .. }) => panic!("nothing was read from a file"),
        Err(LoadError::Syntax { path, message }) => {
            assert_eq!(path, PATH);
            assert!(!message.is_empty());
        }
        Err(LoadError::Env { var, message }) => {
            assert!(
                var.starts_with(ENV_PREFIX) && env.contains_key(&var),
                "{var}"
            );
            assert!(!message.is_empty());
        }
        Err(LoadError::Key { key, message }) => {
            assert!(
                !key.is_empty() && key != ".",
                "error without a key: {message}"
            );
            assert!(!message.is_empty(), "key {key} without a message");
        }
        Err(LoadError::Invalid(problems)) => {
            assert!(!problems.is_empty(), "an invalid config without a problem");
            for p in problems {
                assert!(
                    !p.key.is_empty() && p.key != ".",
                    "a problem without a key: {}",
                    p.message
                );
                assert!(!p.message.is_empty(), "key {} without a message", p.key);
            }
        }
    }
});
