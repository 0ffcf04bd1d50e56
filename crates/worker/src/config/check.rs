//! Diagnostics of a config: where each value came from, every problem at
//! once (key, value, source, fix), near-miss environment variables, and the
//! effective config with the source of each value.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use super::env::ENV_PREFIX;
use super::schema::{body, resolve};

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum ValueOrigin {
    /// A line of the config file.
    File {
        /// The file as given.
        path: String,
        /// 1-based line number.
        line: usize,
    },
    /// A `TIDEMARK__…` environment variable.
    Env {
        /// The variable.
        var: String,
    },
    /// The built-in default.
    Default,
    /// Derived at load time (e.g. `source.worker_id` from the host name).
    Derived {
        /// From what.
        what: String,
    },
}

impl fmt::Display for ValueOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueOrigin::File { path, line } => write!(f, "{path}:{line}"),
            ValueOrigin::Env { var } => write!(f, "environment variable {var}"),
            ValueOrigin::Default => f.write_str("default"),
            ValueOrigin::Derived { what } => write!(f, "default ({what})"),
        }
    }
}

/// The origin of every key set by the file or the environment, by dotted path.
#[derive(Debug, Clone, Default)]
pub(crate) struct ValueOrigins(BTreeMap<String, ValueOrigin>);

impl ValueOrigins {
    /// The file's keys with their lines (nothing when the text does not parse:
    /// the caller reports the syntax error).
    pub(crate) fn of_file(text: &str, path: &str) -> ValueOrigins {
        let mut out = ValueOrigins::default();
        if let Ok(doc) = toml_edit::ImDocument::parse(text) {
            out.walk(doc.as_table(), "", text, path);
        }
        out
    }

    fn walk(&mut self, table: &dyn toml_edit::TableLike, prefix: &str, text: &str, path: &str) {
        for (k, _) in table.iter() {
            let Some((key, item)) = table.get_key_value(k) else {
                continue;
            };
            let dotted = format!("{prefix}{k}");
            let span = key
                .span()
                .or_else(|| item.span())
                .or_else(|| item.as_table().and_then(toml_edit::Table::span));
            if let Some(span) = span {
                let line = text
                    .get(..span.start)
                    .map_or(0, |t| t.matches('\n').count())
                    + 1;
                self.0.insert(
                    dotted.clone(),
                    ValueOrigin::File {
                        path: path.to_string(),
                        line,
                    },
                );
            }
            if let Some(sub) = item.as_table_like() {
                self.walk(sub, &format!("{dotted}."), text, path);
            }
        }
    }

    /// `key` and everything under it now comes from `origin`.
    pub(crate) fn set(&mut self, key: &str, origin: ValueOrigin) {
        let under = format!("{key}.");
        self.0.retain(|k, _| !k.starts_with(&under));
        self.0.insert(key.to_string(), origin);
    }

    /// The origin of `key`, or of the nearest section above it that has one.
    pub(crate) fn of(&self, key: &str) -> Option<&ValueOrigin> {
        let mut k = key;
        loop {
            if let Some(o) = self.0.get(k) {
                return Some(o);
            }
            k = &k[..k.rfind('.')?];
        }
    }
}

/// One thing wrong with a config: the key, its value, where it came from,
/// what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Dotted path of the key, e.g. `source.failover_time`.
    pub key: String,
    /// The value as written (TOML), when there is one.
    pub value: Option<String>,
    /// Where the value (or its section) came from.
    pub origin: Option<ValueOrigin>,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config key `{}`", self.key)?;
        if let Some(v) = &self.value {
            write!(f, " = {v}")?;
        }
        if let Some(o) = &self.origin {
            write!(f, " ({o})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The value at dotted `key` in `root`, as short TOML.
pub(crate) fn value_at(root: &toml::Table, key: &str) -> Option<String> {
    let mut parts = key.split('.');
    let mut v = root.get(parts.next()?)?;
    for p in parts {
        v = v.as_table()?.get(p)?;
    }
    let s = match v {
        toml::Value::Table(_) => return None,
        other => other.to_string(),
    };
    Some(if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s
    })
}

/// The value a serde error message complains about.
#[derive(Debug, PartialEq)]
enum Offending<'a> {
    Str(&'a str),
    /// The text of a number or boolean.
    Scalar(&'a str),
}

fn offending(message: &str) -> Option<Offending<'_>> {
    let after = |marker: &str| {
        let rest = &message[message.find(marker)? + marker.len()..];
        Some(rest)
    };
    if let Some(rest) = after("string \"") {
        return rest.split('"').next().map(Offending::Str);
    }
    if let Some(rest) = after("unknown variant `") {
        return rest.split('`').next().map(Offending::Str);
    }
    for marker in ["integer `", "floating point `", "boolean `"] {
        if let Some(rest) = after(marker) {
            return rest.split('`').next().map(Offending::Scalar);
        }
    }
    None
}

/// The dotted path, under `key` of `root`, of the value a serde `message`
/// complains about (`invalid type: string "six"`, `unknown variant
/// `oldest``). Serde names only the table of an internally tagged section
/// (`schema.key`, `source`, `source.initial_position`); this names the
/// field, so the problem gets that field's own line or variable.
pub(crate) fn locate(root: &toml::Value, key: &str, message: &str) -> Option<String> {
    let wanted = offending(message)?;
    let mut node = root;
    if key != "." {
        for part in key.split('.') {
            node = node.as_table()?.get(part)?;
        }
    }
    fn find(v: &toml::Value, path: &str, wanted: &Offending<'_>) -> Option<String> {
        match v {
            toml::Value::Table(t) => t.iter().find_map(|(k, sub)| {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                find(sub, &p, wanted)
            }),
            toml::Value::String(s) => {
                (*wanted == Offending::Str(s.as_str())).then(|| path.to_string())
            }
            toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                (*wanted == Offending::Scalar(v.to_string().as_str())).then(|| path.to_string())
            }
            _ => None,
        }
    }
    let base = if key == "." { "" } else { key };
    find(node, base, &wanted).filter(|p| p != base)
}

/// Settings that contradict each other in the file and variables as
/// written (before defaults hide which were set): one problem each, at the
/// key that would be ignored or is wrong.
pub(crate) fn contradictions(root: &toml::Table) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut events: Vec<(String, &toml::Table)> = Vec::new();
    if let Some(toml::Value::Table(e)) = root.get("event") {
        events.push(("event".into(), e));
    }
    if let Some(toml::Value::Table(src)) = root.get("source")
        && let Some(toml::Value::Array(streams)) = src.get("streams")
    {
        for (i, s) in streams.iter().enumerate() {
            if let Some(toml::Value::Table(e)) = s.get("event") {
                events.push((format!("source.streams.{i}.event"), e));
            }
        }
    }
    for (path, e) in events {
        if e.contains_key("entity_field")
            && e.get("entity_fields")
                .and_then(toml::Value::as_array)
                .is_some_and(|a| !a.is_empty())
        {
            out.push(Problem {
                key: format!("{path}.entity_fields"),
                value: value_at_table(e, "entity_fields"),
                origin: None,
                message:
                    "is set with `entity_field`: `entity_fields` would win and `entity_field` be \
                          ignored; keep one of them"
                        .into(),
            });
        }
    }
    out
}

fn value_at_table(t: &toml::Table, key: &str) -> Option<String> {
    t.get(key).map(toml::Value::to_string)
}

/// Removes the value at dotted `key` from `root`; true when there was one.
pub(crate) fn remove_at(root: &mut toml::Table, key: &str) -> bool {
    let Some((parents, last)) = key.rsplit_once('.').map_or(Some(("", key)), Some) else {
        return false;
    };
    let mut t = root;
    if !parents.is_empty() {
        for p in parents.split('.') {
            match t.get_mut(p) {
                Some(toml::Value::Table(sub)) => t = sub,
                _ => return false,
            }
        }
    }
    t.remove(last).is_some()
}

/// Removes every key of `root` the schema does not know, and returns one
/// [`Problem`] (without origin) per key, with the valid keys and the likely
/// spelling.
pub(crate) fn unknown_keys(root: &mut toml::Table, schema: &Value) -> Vec<Problem> {
    let mut out = Vec::new();
    walk_unknown(root, schema, &schema["definitions"], "", &mut out);
    out
}

fn walk_unknown(
    table: &mut toml::Table,
    schema: &Value,
    defs: &Value,
    prefix: &str,
    out: &mut Vec<Problem>,
) {
    let schema = resolve(schema, defs);
    // A tag that is missing or unknown: serde names it with the values.
    let Ok(s) = body(schema, table) else { return };
    let Some(props) = s["properties"].as_object() else {
        return;
    };
    let closed = s["additionalProperties"] == Value::Bool(false) || prefix.is_empty();
    let keys: Vec<String> = table.keys().cloned().collect();
    for k in keys {
        let path = format!("{prefix}{k}");
        match props.get(&k) {
            Some(sub) => {
                if let Some(toml::Value::Table(t)) = table.get_mut(&k) {
                    walk_unknown(t, sub, defs, &format!("{path}."), out);
                }
            }
            None if closed => {
                let value = table.get(&k).and_then(|v| match v {
                    toml::Value::Table(_) => None,
                    v => Some(v.to_string()),
                });
                table.remove(&k);
                let message = unknown_message(&path, &k, props.keys(), schema, s);
                out.push(Problem {
                    key: path,
                    value,
                    origin: None,
                    message,
                });
            }
            None => {}
        }
    }
}

/// Why `key` is not a key at `path`, and what to write instead.
fn unknown_message<'a>(
    path: &str,
    key: &str,
    valid: impl Iterator<Item = &'a String>,
    schema: &Value,
    variant: &Value,
) -> String {
    match path {
        "schema.event" => {
            return "the event fields are set in the top-level [event] section, not under \
                    [schema]: move the table to [event]"
                .into();
        }
        "writer.pk_attribute" | "writer.sk_attribute" => {
            return "the key attribute names are set once, as schema.key_attributes.pk and \
                    schema.key_attributes.sk: set them there and remove this key"
                .into();
        }
        _ => {}
    }
    let valid: Vec<&String> = valid.collect();
    // A key of another variant of a tagged table (`shards` with
    // `strategy = "entity"`): say which variants take it.
    if let Some((tag, variants)) = super::schema::tagged(schema) {
        let chosen = variant["properties"][&tag]["const"]
            .as_str()
            .unwrap_or_default();
        let takers: Vec<String> = variants
            .iter()
            .filter(|(_, v)| v["properties"].get(key).is_some())
            .map(|(name, _)| format!("\"{name}\""))
            .collect();
        if !takers.is_empty() {
            return format!(
                "`{key}` is not used with {tag} = \"{chosen}\" (only with {tag} = {}): \
                 remove it or change {tag}",
                takers.join(" or ")
            );
        }
    }
    let mut m = String::from("unknown key");
    if let Some(near) = valid
        .iter()
        .filter(|v| edit_distance(v, key) <= 2.max(key.len() / 4))
        .min_by_key(|v| edit_distance(v, key))
    {
        m.push_str(&format!("; did you mean `{near}`?"));
    } else {
        m.push_str("; remove it or check its spelling");
    }
    if !valid.is_empty() {
        let list: Vec<&str> = valid.iter().map(|s| s.as_str()).collect();
        m.push_str(&format!(" (valid here: {})", list.join(", ")));
    }
    m
}

/// Levenshtein distance (keys are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A serde message without Rust type names, with the fix.
pub(crate) fn humanize(message: &str) -> String {
    // toml appends "\nin `key`": the problem names the key already.
    let message = message.split("\nin `").next().unwrap_or(message).trim_end();
    let mut m = message.to_string();
    // serde's "expected <what the type visitor says>": say it in TOML terms.
    for (rust, plain) in [
        ("usize", "a whole number"),
        ("u64", "a whole number"),
        ("u32", "a whole number"),
        ("u16", "a whole number"),
        ("u8", "a whole number"),
        ("i64", "a whole number"),
        ("i32", "a whole number"),
        ("f64", "a number"),
        ("f32", "a number"),
        ("a boolean", "true or false"),
        ("a borrowed string", "a string"),
    ] {
        m = m.replace(&format!("expected {rust}"), &format!("expected {plain}"));
    }
    if let Some(i) = m
        .find("expected struct ")
        .or_else(|| m.find("expected internally tagged enum "))
    {
        m.truncate(i);
        m.push_str("expected a table");
    }
    for (from, to) in [
        ("invalid type: string", "a string"),
        ("invalid type: integer", "a number"),
        ("invalid type: floating point", "a number"),
        ("invalid type: boolean", "a boolean"),
        ("invalid type: map", "a table"),
        ("invalid type: sequence", "a list"),
        ("invalid value: string", "the string"),
        ("invalid value: integer", "the number"),
    ] {
        if let Some(rest) = m.strip_prefix(from) {
            m = format!("{to}{rest}");
        }
    }
    // An enum value: the message lists the valid ones.
    m = m.replace("unknown variant", "unknown value");
    if m.contains("missing field") {
        format!("{m}; add it (see localstack/tidemark.toml for a commented example)")
    } else if m.contains("unknown field") {
        format!("{m}; remove it or check its spelling")
    } else {
        format!("{m}; fix the value")
    }
}

/// Environment variables that look meant for Tidemark but are ignored:
/// one underscore after `TIDEMARK` (any case of `TIDEMARK__` is honoured).
/// One warning each,
/// with the name to use.
pub(crate) fn env_warnings(env: &BTreeMap<String, String>, sections: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for var in env.keys() {
        let upper = var.to_ascii_uppercase();
        // Any case of `TIDEMARK__` is an override (names are case insensitive).
        if upper.starts_with(ENV_PREFIX) {
            continue;
        }
        let Some(rest) = upper.strip_prefix("TIDEMARK_") else {
            continue;
        };
        let Some(section) = sections
            .iter()
            .find(|s| rest.starts_with(&s.to_ascii_uppercase()))
        else {
            continue;
        };
        let key = rest[section.len()..].trim_start_matches('_');
        if key.is_empty() {
            continue;
        }
        out.push(format!(
            "environment variable {var} is ignored: overrides take two underscores between \
             parts; use {ENV_PREFIX}{}__{key}",
            section.to_ascii_uppercase()
        ));
    }
    out
}

/// One key of the effective config.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Effective {
    /// Dotted path.
    pub key: String,
    /// The value (TOML).
    pub value: String,
    /// Where it came from.
    pub origin: ValueOrigin,
}

/// Every leaf key of the effective config: the merged file and environment,
/// then the schema's defaults for the keys not set.
pub(crate) fn effective(
    root: &toml::Table,
    origins: &ValueOrigins,
    schema: &Value,
) -> Vec<Effective> {
    let mut out = Vec::new();
    walk_effective(
        Some(root),
        schema,
        &schema["definitions"],
        "",
        origins,
        &mut out,
    );
    out
}

fn walk_effective(
    table: Option<&toml::Table>,
    schema: &Value,
    defs: &Value,
    prefix: &str,
    origins: &ValueOrigins,
    out: &mut Vec<Effective>,
) {
    let schema = resolve(schema, defs);
    let empty = toml::Table::new();
    let t = table.unwrap_or(&empty);
    let s = match body(schema, t) {
        Ok(s) => s,
        Err(_) => return,
    };
    let Some(props) = s["properties"].as_object() else {
        return;
    };
    for (k, sub) in props {
        let path = format!("{prefix}{k}");
        let sub_resolved = resolve(sub, defs);
        match t.get(k) {
            Some(toml::Value::Table(inner)) if !is_open_map(sub_resolved) => {
                walk_effective(Some(inner), sub, defs, &format!("{path}."), origins, out);
            }
            Some(v) => out.push(Effective {
                key: path.clone(),
                value: v.to_string(),
                origin: origins.of(&path).cloned().unwrap_or(ValueOrigin::Default),
            }),
            None => {
                let default = sub.get("default").or_else(|| sub_resolved.get("default"));
                match default {
                    Some(Value::Object(map)) if !is_open_map(sub_resolved) => {
                        let d: Option<toml::Table> =
                            toml::Table::try_from(Value::Object(map.clone())).ok();
                        let mut sub_out = Vec::new();
                        walk_effective(
                            d.as_ref(),
                            sub,
                            defs,
                            &format!("{path}."),
                            &ValueOrigins::default(),
                            &mut sub_out,
                        );
                        out.extend(sub_out.into_iter().map(|mut e| {
                            e.origin = ValueOrigin::Default;
                            e
                        }));
                    }
                    // A section left out: its fields' own defaults.
                    None if sub_resolved["properties"].is_object() => {
                        walk_effective(None, sub, defs, &format!("{path}."), origins, out);
                    }
                    Some(Value::Null) | None => {}
                    Some(d) => {
                        if let Ok(v) = toml::Value::try_from(d.clone()) {
                            out.push(Effective {
                                key: path,
                                value: v.to_string(),
                                origin: ValueOrigin::Default,
                            });
                        }
                    }
                }
            }
        }
    }
}

/// A table whose keys are free (a map), shown as one value.
fn is_open_map(schema: &Value) -> bool {
    schema["additionalProperties"].is_object() && schema["properties"].is_null()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_keys_in_headers_dotted_and_inline_tables() {
        let text = "[source]\nkind = \"kinesis\"\n\n[schema]\nkey = { strategy = \"entity\", shards = 10 }\ntiers.active.write = 0\n";
        let o = ValueOrigins::of_file(text, "t.toml");
        let line = |k: &str| match o.of(k) {
            Some(ValueOrigin::File { line, .. }) => *line,
            other => panic!("{k}: {other:?}"),
        };
        assert_eq!(line("source.kind"), 2);
        assert_eq!(line("schema.key.shards"), 5);
        assert_eq!(line("schema.tiers.active.write"), 6);
        assert_eq!(
            line("schema.period"),
            4,
            "an unset key falls back to its section"
        );
    }

    #[test]
    fn near_miss_variables_are_named_with_the_fix() {
        let env: BTreeMap<String, String> = [
            ("TIDEMARK_SCHEMA__TABLE_PREFIX", "x"),
            ("tidemark__source__stream", "x"),
            ("TIDEMARK_CONFIG", "x"),
            ("TIDEMARK_MOTO_PORT", "1"),
            ("TIDEMARK__SOURCE__STREAM", "x"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let w = env_warnings(&env, &["source", "schema"]);
        // Lower case is honoured (names are case insensitive): no warning.
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w.iter()
                .any(|m| m.contains("use TIDEMARK__SCHEMA__TABLE_PREFIX")),
            "{w:?}"
        );
    }

    #[test]
    fn messages_speak_toml_not_rust() {
        let m = humanize("invalid type: string \"abc\", expected usize");
        assert_eq!(
            m,
            "a string \"abc\", expected a whole number; fix the value"
        );
        let m = humanize("invalid type: integer `5`, expected struct WriterConfig");
        assert!(!m.contains("WriterConfig"), "{m}");
    }

    #[test]
    fn a_complaint_is_located_at_its_field() {
        let root: toml::Value = toml::from_str(
            "[schema]\nkey = { strategy = \"time_bucket\", shards = \"six\", bucket = \"hour\" }\n[source]\ninitial_position = { type = \"oldest\" }\nmax_leases = -1\n",
        )
        .unwrap();
        let at = |key, message| locate(&root, key, message);
        assert_eq!(
            at("schema.key", "invalid type: string \"six\", expected u32").as_deref(),
            Some("schema.key.shards")
        );
        assert_eq!(
            at(
                "source",
                "unknown variant `oldest`, expected one of `trim_horizon`"
            )
            .as_deref(),
            Some("source.initial_position.type")
        );
        assert_eq!(
            at("source", "invalid value: integer `-1`, expected u32").as_deref(),
            Some("source.max_leases")
        );
        assert_eq!(at("source", "missing field `stream`"), None);
    }

    #[test]
    fn entity_field_with_entity_fields_is_a_contradiction_unless_empty() {
        let keys = |text: &str| -> Vec<String> {
            contradictions(&toml::from_str(text).unwrap())
                .into_iter()
                .map(|p| p.key)
                .collect()
        };
        assert_eq!(
            keys("[event]\nentity_field = \"a\"\nentity_fields = [\"b\"]\n"),
            ["event.entity_fields"]
        );
        assert_eq!(
            keys(
                "[[source.streams]]\nstream = \"s\"\nevent = { entity_field = \"a\", entity_fields = [\"b\"] }\n"
            ),
            ["source.streams.0.event.entity_fields"]
        );
        // An empty list sets nothing: `entity_field` is used.
        assert!(keys("[event]\nentity_field = \"a\"\nentity_fields = []\n").is_empty());
        assert!(keys("[event]\nentity_fields = [\"b\"]\n").is_empty());
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("lease_tabel", "lease_table"), 2);
        assert_eq!(edit_distance("stream", "stream"), 0);
    }
}
