//! The configuration reference (`docs/configuration.md`) and the JSON Schema
//! for editors (`docs/tidemark.schema.json`) are generated from the config
//! types (their doc comments, defaults and serde attributes, through
//! `schemars`). This test regenerates both in memory and fails when the
//! committed files differ, so the reference cannot drift from the code.
//!
//! Regenerate with `TIDEMARK_BLESS=1 cargo test -p tidemark-worker --test config_reference`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The JSON Schema of `tidemark.toml` (the loader's own).
fn json_schema() -> Value {
    tidemark_worker::config::json_schema()
}

/// Follows `$ref` and a lone `allOf: [$ref]` to the definition.
fn resolve<'a>(schema: &'a Value, defs: &'a Value) -> &'a Value {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return resolve(&defs[name], defs);
    }
    if let Some([one]) = schema["allOf"].as_array().map(Vec::as_slice) {
        return resolve(one, defs);
    }
    // An optional definition (`Option<T>`): T's.
    if let Some([one, null]) = schema["anyOf"].as_array().map(Vec::as_slice)
        && null["type"] == "null"
    {
        return resolve(one, defs);
    }
    schema
}

/// A JSON value written as TOML.
fn toml_value(v: &Value) -> String {
    match v {
        Value::Null => "(unset)".into(),
        Value::String(s) => format!("{s:?}"),
        Value::Object(m) => {
            let parts: Vec<String> = m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{k} = {}", toml_value(v)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(toml_value).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

/// A doc comment as one table cell: one line, no rustdoc link brackets.
fn one_line(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("[`", "`")
        .replace("`]", "`")
        .replace('|', "\\|")
}

fn is_duration(default: &Value) -> bool {
    // humantime renders defaults as `50ms`, `1m`, `30days`.
    default.as_str().is_some_and(|s| {
        let unit = s.trim_start_matches(|c: char| c.is_ascii_digit());
        unit.len() < s.len() && !unit.is_empty() && unit.chars().all(|c| c.is_ascii_alphabetic())
    })
}

/// Variants of a tagged enum: (tag name, value, variant schema).
fn variants(schema: &Value) -> Option<Vec<(String, String, &Value)>> {
    let one_of = schema["oneOf"].as_array()?;
    one_of
        .iter()
        .map(|v| {
            let props = v["properties"].as_object()?;
            let (tag, value) = props
                .iter()
                .find_map(|(k, p)| Some((k.clone(), p["const"].as_str()?.to_string())))?;
            Some((tag, value, v))
        })
        .collect()
}

/// Values of a plain string enum, with their descriptions.
fn enum_values(schema: &Value) -> Option<Vec<(String, String)>> {
    if let Some(e) = schema["enum"].as_array() {
        return Some(
            e.iter()
                .map(|v| (v.as_str().unwrap_or_default().to_string(), String::new()))
                .collect(),
        );
    }
    schema["oneOf"]
        .as_array()?
        .iter()
        .map(|v| {
            let value = v["const"]
                .as_str()
                .or_else(|| v["enum"].as_array()?.first()?.as_str())?;
            Some((
                value.to_string(),
                one_line(v["description"].as_str().unwrap_or_default()),
            ))
        })
        .collect()
}

/// True when a property is shown as its own section rather than a row.
fn is_section(schema: &Value) -> bool {
    if let Some(props) = schema["properties"].as_object() {
        // Small tables of numbers (a capacity) read better inline.
        return !props.values().all(|p| p["type"] == "integer");
    }
    variants(schema).is_some_and(|vs| {
        vs.iter()
            .any(|(_, _, v)| v["properties"].as_object().map_or(0, Map::len) > 2)
    })
}

struct Examples(Vec<toml::Table>);

impl Examples {
    /// The value of `path` in the first committed example config that has it.
    fn get(&self, path: &[&str]) -> Option<String> {
        self.0.iter().find_map(|t| {
            let mut v = t.get(path[0])?;
            for k in &path[1..] {
                v = v.get(*k)?;
            }
            Some(v.to_string())
        })
    }
}

struct Doc<'a> {
    defs: &'a Value,
    examples: Examples,
    out: String,
}

impl Doc<'_> {
    fn type_of(&self, s: &Value, default: &Value) -> String {
        if let Some(values) = enum_values(s) {
            return format!(
                "one of {}",
                values
                    .iter()
                    .map(|(v, _)| format!("`{v:?}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if let Some(vs) = variants(s) {
            return vs
                .iter()
                .map(|(tag, value, v)| {
                    let mut parts = vec![format!("{tag} = {value:?}")];
                    for (k, _) in v["properties"].as_object().unwrap() {
                        if k != tag {
                            parts.push(format!("{k} = …"));
                        }
                    }
                    format!("`{{ {} }}`", parts.join(", "))
                })
                .collect::<Vec<_>>()
                .join(" or ");
        }
        if let Some(props) = s["properties"].as_object() {
            let keys: Vec<&str> = props.keys().map(String::as_str).collect();
            return format!("table `{{ {} }}` of integers", keys.join(", "));
        }
        let ty = match &s["type"] {
            Value::Array(a) => a
                .iter()
                .filter(|t| *t != "null")
                .map(|t| t.as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" | "),
            t => t.as_str().unwrap_or("any").to_string(),
        };
        let ty = match (ty.as_str(), s["format"].as_str()) {
            ("string", _) if is_duration(default) => {
                "duration (`\"250ms\"`, `\"10s\"`, `\"30d\"`)".into()
            }
            ("string", Some("date-time")) => "RFC 3339 time".into(),
            ("integer", f) => match (s["minimum"].as_u64(), s["maximum"].as_u64()) {
                (Some(lo), Some(hi)) => format!("integer {lo} to {hi}"),
                (Some(lo), None) => format!("integer ≥ {lo}"),
                _ if f.is_some_and(|f| f.starts_with('u')) => "integer ≥ 0".into(),
                _ => ty,
            },
            _ => ty,
        };
        if s["type"]
            .as_array()
            .is_some_and(|a| a.iter().any(|t| t == "null"))
        {
            format!("{ty} (optional)")
        } else {
            ty
        }
    }

    fn section(&mut self, path: &[&str], schema: &Value, depth: usize) {
        let s = resolve(schema, self.defs);
        let heading = "#".repeat(depth.min(4));
        if let Some(vs) = variants(s) {
            // The key's own description (e.g. what `migrate_from` is for),
            // then the shared type's.
            let desc = [&schema["description"], &s["description"]]
                .iter()
                .filter_map(|d| d.as_str())
                .map(one_line)
                .collect::<Vec<_>>()
                .join(" ");
            let _ = writeln!(self.out, "{heading} `[{}]`\n\n{desc}\n", path.join("."));
            for (tag, value, v) in vs {
                let _ = writeln!(
                    self.out,
                    "{}# `[{}]` with `{tag} = {value:?}`\n\n{}\n",
                    heading,
                    path.join("."),
                    one_line(v["description"].as_str().unwrap_or_default())
                );
                // Examples only from a file using this variant.
                let matches = self.examples.get(&[path, &[tag.as_str()]].concat())
                    == Some(format!("{value:?}"));
                self.table(path, v, depth + 1, Some(&tag), matches);
            }
            return;
        }
        let desc = one_line(
            schema["description"]
                .as_str()
                .or_else(|| s["description"].as_str())
                .unwrap_or_default(),
        );
        let _ = writeln!(self.out, "{heading} `[{}]`\n\n{desc}\n", path.join("."));
        self.table(path, s, depth, None, true);
    }

    fn table(&mut self, path: &[&str], s: &Value, depth: usize, tag: Option<&str>, examples: bool) {
        let required: Vec<&str> = s["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let Some(props) = s["properties"].as_object() else {
            return;
        };
        let mut rows = String::new();
        let mut sections = Vec::new();
        for (key, prop) in props {
            if Some(key.as_str()) == tag {
                continue;
            }
            let r = resolve(prop, self.defs);
            if is_section(r) {
                sections.push((key.clone(), prop.clone()));
                continue;
            }
            let default = prop.get("default").unwrap_or(&Value::Null);
            let default_text = if required.contains(&key.as_str()) {
                "required".to_string()
            } else if prop.get("default").is_none() || default.is_null() {
                "unset".to_string()
            } else {
                format!("`{}`", toml_value(default))
            };
            let full: Vec<&str> = path.iter().copied().chain([key.as_str()]).collect();
            let example = examples
                .then(|| self.examples.get(&full))
                .flatten()
                .or_else(|| (!default.is_null()).then(|| toml_value(default)));
            let example = example.map_or("—".into(), |e| format!("`{key} = {e}`"));
            let mut desc = one_line(
                prop["description"]
                    .as_str()
                    .or_else(|| r["description"].as_str())
                    .unwrap_or_default(),
            );
            if let Some(values) = enum_values(r) {
                for (v, d) in values.iter().filter(|(_, d)| !d.is_empty()) {
                    let _ = write!(desc, "<br>`{v:?}`: {d}");
                }
            } else if let Some(vs) = variants(r) {
                for (_, value, v) in vs {
                    let d = one_line(v["description"].as_str().unwrap_or_default());
                    let _ = write!(desc, "<br>`{value:?}`: {d}");
                }
            }
            let _ = writeln!(
                rows,
                "| `{key}` | {} | {default_text} | {desc} | {example} |",
                self.type_of(r, default)
            );
        }
        if !rows.is_empty() {
            let _ = writeln!(
                self.out,
                "| Key | Type | Default | Description | Example |\n| --- | --- | --- | --- | --- |\n{rows}"
            );
        }
        for (key, prop) in sections {
            let full: Vec<&str> = path.iter().copied().chain([key.as_str()]).collect();
            self.section(&full, &prop, depth + 1);
        }
    }
}

fn markdown(schema: &Value) -> String {
    let root = root();
    let examples = Examples(
        [
            "localstack/tidemark.toml",
            "deploy/tidemark.toml",
            // The [event] mapping keys, from the documented clickstream mapping.
            "tests/fixtures/clickstream/mapping.toml",
            "tests/fixtures/clickstream/examples.toml",
        ]
        .iter()
        .map(|f| {
            std::fs::read_to_string(root.join(f))
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect(),
    );
    let mut doc = Doc {
        defs: &schema["definitions"],
        examples,
        out: String::new(),
    };
    doc.out.push_str(
        "<!-- Generated from the config types by crates/worker/tests/config_reference.rs: do not edit.\n     \
         Regenerate: TIDEMARK_BLESS=1 cargo test -p tidemark-worker --test config_reference -->\n\n\
         # Configuration reference\n\n\
         Tidemark reads one TOML file (`tidemark --config tidemark.toml`, or `TIDEMARK_CONFIG`).\n\
         Every key can also be set by environment as `TIDEMARK__SECTION__KEY`\n\
         (for example `TIDEMARK__SOURCE__STREAM=events`, `TIDEMARK__SCHEMA__KEY__SHARDS=10`);\n\
         values parse as TOML and fall back to a plain string. Unknown keys are rejected,\n\
         and every error names the key as a dotted path.\n\n\
         Durations are strings with a unit: `\"250ms\"`, `\"10s\"`, `\"15m\"`, `\"30d\"`.\n\
         Examples come from the commented example files\n\
         [`localstack/tidemark.toml`](../localstack/tidemark.toml) and\n\
         [`deploy/tidemark.toml`](../deploy/tidemark.toml), else they show the default.\n\n\
         Editor completion: [`tidemark.schema.json`](tidemark.schema.json) is the JSON Schema of\n\
         this file, generated from the same types. With Taplo (the Even Better TOML extension\n\
         of VS Code), put this first line in `tidemark.toml`:\n\n\
         ```toml\n#:schema ./docs/tidemark.schema.json\n```\n\n\
         (a path relative to the TOML file), or map it in `.taplo.toml`:\n\n\
         ```toml\n[[rule]]\ninclude = [\"**/tidemark.toml\"]\n[rule.schema]\npath = \"./docs/tidemark.schema.json\"\n```\n\n",
    );
    let top = schema["properties"].as_object().unwrap();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // Plain keys (shutdown_timeout) are written before the first section;
    // everything else is a section of its own.
    let defs = &schema["definitions"];
    let (sections, plain): (Vec<_>, Vec<_>) = top
        .iter()
        .partition(|(_, prop)| is_section(resolve(prop, defs)));
    doc.out
        .push_str("| Section | Required | What it sets |\n| --- | --- | --- |\n");
    for (key, prop) in &sections {
        let _ = writeln!(
            doc.out,
            "| [`[{key}]`](#{key}) | {} | {} |",
            if required.contains(&key.as_str()) {
                "yes"
            } else {
                "no"
            },
            one_line(prop["description"].as_str().unwrap_or_default())
        );
    }
    doc.out.push('\n');
    if !plain.is_empty() {
        doc.out
            .push_str("## Top-level keys\n\nWritten before the first section.\n\n");
        let mut only_plain = schema.clone();
        only_plain["properties"] = Value::Object(
            plain
                .iter()
                .map(|(k, v)| ((*k).clone(), (*v).clone()))
                .collect(),
        );
        doc.table(&[], &only_plain, 2, None, true);
    }
    for (key, prop) in sections {
        doc.section(&[key.as_str()], prop, 2);
    }
    // One trailing newline, no blank-line runs.
    let mut out = doc.out.trim_end().to_string();
    while out.contains("\n\n\n") {
        out = out.replace("\n\n\n", "\n\n");
    }
    out + "\n"
}

#[test]
fn committed_config_reference_matches_the_code() {
    let schema = json_schema();
    let generated = [
        (
            "docs/tidemark.schema.json",
            serde_json::to_string_pretty(&schema).unwrap() + "\n",
        ),
        ("docs/configuration.md", markdown(&schema)),
    ];
    let bless = std::env::var_os("TIDEMARK_BLESS").is_some();
    let mut stale = Vec::new();
    for (file, text) in &generated {
        let path = root().join(file);
        if bless {
            std::fs::write(&path, text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(*file);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from what the config types generate (a doc comment, default or key \
         changed). Regenerate and commit them:\n  \
         TIDEMARK_BLESS=1 cargo test -p tidemark-worker --test config_reference"
    );
}

#[test]
fn the_schema_accepts_what_the_loader_accepts() {
    // Every key of the example files is known to the schema (the schema is
    // not looser or stricter in names than the loader).
    let schema = json_schema();
    let defs = &schema["definitions"];
    fn check(path: &str, v: &toml::Value, s: &Value, defs: &Value) {
        let s = resolve(s, defs);
        let Some(t) = v.as_table() else { return };
        let options: Vec<&Value> = match variants(s) {
            Some(vs) => vs.into_iter().map(|(_, _, v)| v).collect(),
            None => vec![s],
        };
        let known = |k: &str| options.iter().find_map(|o| o["properties"].get(k));
        for (k, v) in t {
            let sub = known(k).unwrap_or_else(|| panic!("`{path}{k}` is not in the schema"));
            check(&format!("{path}{k}."), v, sub, defs);
        }
    }
    for f in ["localstack/tidemark.toml", "deploy/tidemark.toml"] {
        let text = std::fs::read_to_string(root().join(f)).unwrap();
        let v: toml::Value = text.parse().unwrap();
        check("", &v, &schema, defs);
    }
}

/// Editors must refuse what the loader refuses: every `shards` is 1 to
/// 10,000 in the schema, as `KeyStrategy::validate` says.
#[test]
fn shard_counts_are_bounded_in_the_schema() {
    let schema = json_schema();
    let defs = &schema["definitions"];
    let strategy = resolve(&defs["KeyStrategy"], defs);
    let mut seen = 0;
    for v in strategy["oneOf"].as_array().unwrap() {
        if let Some(shards) = v["properties"].get("shards") {
            assert_eq!(shards["minimum"], 1, "{v}");
            assert_eq!(shards["maximum"], 10_000, "{v}");
            seen += 1;
        }
    }
    assert_eq!(seen, 3);
}
