//! Environment overrides (`TIDEMARK__SECTION__KEY`) and the default
//! worker id.

use std::collections::BTreeMap;

/// Prefix of environment overrides; `__` separates the path segments.
pub const ENV_PREFIX: &str = "TIDEMARK__";

/// `var` without its `TIDEMARK__` prefix, matched in any case.
pub(crate) fn strip_env_prefix(var: &str) -> Option<&str> {
    let n = ENV_PREFIX.len();
    (var.len() > n && var.is_char_boundary(n) && var[..n].eq_ignore_ascii_case(ENV_PREFIX))
        .then(|| &var[n..])
}

/// Sets the value at the path `rest` (`SECTION__KEY[__SUBKEY]`, case
/// insensitive) in `root`. Values parse as TOML (`10`, `true`, `"x"`,
/// `[1, 2]`) and fall back to a plain string (`30s`, `events`). Returns the
/// dotted key set, or what is wrong with the variable's name.
pub(super) fn apply_env(root: &mut toml::Table, rest: &str, value: &str) -> Result<String, String> {
    let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    if path.iter().any(String::is_empty) {
        return Err("empty path segment; use TIDEMARK__SECTION__KEY".into());
    }
    let parsed = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let mut table = root;
    for (i, segment) in path.iter().enumerate() {
        if i + 1 == path.len() {
            table.insert(segment.clone(), parsed);
            return Ok(path.join("."));
        }
        let entry = table
            .entry(segment.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            _ => {
                return Err(format!(
                    "`{}` is a value, not a section",
                    path[..=i].join(".")
                ));
            }
        };
    }
    Ok(path.join("."))
}

/// `source.worker_id` defaults to the ECS task id, else the host name; true
/// when it was filled in.
pub(super) fn fill_worker_id(root: &mut toml::Table, env: &BTreeMap<String, String>) -> bool {
    let Some(toml::Value::Table(source)) = root.get_mut("source") else {
        return false;
    };
    if source.get("kind").and_then(toml::Value::as_str) != Some("kinesis")
        || source.contains_key("worker_id")
    {
        return false;
    }
    source.insert(
        "worker_id".into(),
        toml::Value::String(default_worker_id(env)),
    );
    true
}

/// The ECS task id (from the task ARN in the metadata URI), else the host
/// name, else a random-enough fallback from the pid and start time.
pub(crate) fn default_worker_id(env: &BTreeMap<String, String>) -> String {
    // ECS_CONTAINER_METADATA_URI_V4 ends in `/v4/<task id>-<container id>`;
    // the task id is unique per task, which is what a lease owner needs.
    if let Some(uri) = env.get("ECS_CONTAINER_METADATA_URI_V4")
        && let Some(last) = uri.rsplit('/').next()
        && let Some(task) = last.split('-').next()
        && !task.is_empty()
    {
        return format!("ecs-{task}");
    }
    if let Some(h) = env.get("HOSTNAME").filter(|h| !h.is_empty()) {
        return h.clone();
    }
    if let Ok(h) = std::fs::read_to_string("/etc/hostname")
        && !h.trim().is_empty()
    {
        return h.trim().to_string();
    }
    format!("worker-{}", std::process::id())
}

/// The process environment's `TIDEMARK*` variables (overrides, and near
/// misses for [`env_warnings`]) and the few others the defaults read.
pub(crate) fn process_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            k.to_ascii_uppercase().starts_with("TIDEMARK_")
                || k == "ECS_CONTAINER_METADATA_URI_V4"
                || k == "HOSTNAME"
        })
        .collect()
}
