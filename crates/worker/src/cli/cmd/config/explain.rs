//! `tidemark config explain KEY`: the reference of one key or section,
//! read from the JSON Schema generated from the config types (the same one
//! `docs/configuration.md` is generated from), so it works offline and never
//! drifts from the code.

use std::fmt::Write as _;

use anyhow::Result;
use serde_json::Value;

use crate::cli::cmd::Usage;

/// Follows `$ref` and a lone `allOf: [$ref]` to the definition.
fn resolve<'a>(schema: &'a Value, defs: &'a Value) -> &'a Value {
    if let Some(r) = schema["$ref"].as_str() {
        return resolve(&defs[r.rsplit('/').next().unwrap_or_default()], defs);
    }
    match schema["allOf"].as_array().map(Vec::as_slice) {
        Some([one]) => resolve(one, defs),
        _ => schema,
    }
}

/// The variants of a tagged table: (tag, value, schema).
fn variants(schema: &Value) -> Vec<(String, String, &Value)> {
    let Some(all) = schema["oneOf"].as_array() else {
        return Vec::new();
    };
    all.iter()
        .filter_map(|v| {
            let (tag, value) = v["properties"]
                .as_object()?
                .iter()
                .find_map(|(k, p)| Some((k.clone(), p["const"].as_str()?.to_string())))?;
            Some((tag, value, v))
        })
        .collect()
}

/// The values of an enum of strings: (value, description).
fn enum_values(schema: &Value) -> Vec<(String, String)> {
    let Some(all) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) else {
        return schema["enum"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|v| Some((v.as_str()?.to_string(), String::new())))
                    .collect()
            })
            .unwrap_or_default();
    };
    all.iter()
        .filter(|v| v["type"] == "string")
        .filter_map(|v| {
            Some((
                v["const"].as_str()?.to_string(),
                v["description"].as_str().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

/// The keys of a table: its own, or every variant's.
fn keys(schema: &Value) -> Vec<(String, &Value)> {
    let own = schema["properties"].as_object().into_iter();
    let of_variants = variants(schema)
        .into_iter()
        .filter_map(|(_, _, v)| v["properties"].as_object());
    let mut out: Vec<(String, &Value)> = Vec::new();
    for props in own.chain(of_variants) {
        for (k, v) in props {
            if !out.iter().any(|(o, _)| o == k) {
                out.push((k.clone(), v));
            }
        }
    }
    out
}

/// Every dotted key of the schema, for suggestions.
fn all_keys(schema: &Value, defs: &Value, prefix: &str, out: &mut Vec<String>) {
    for (k, sub) in keys(resolve(schema, defs)) {
        let path = format!("{prefix}{k}");
        out.push(path.clone());
        if prefix.matches('.').count() < 4 {
            all_keys(sub, defs, &format!("{path}."), out);
        }
    }
}

/// The type of a key in TOML words.
fn type_words(schema: &Value, defs: &Value) -> String {
    let s = resolve(schema, defs);
    if !variants(s).is_empty() {
        return "table".into();
    }
    let values = enum_values(s);
    if !values.is_empty() {
        let v: Vec<String> = values.iter().map(|(v, _)| format!("\"{v}\"")).collect();
        return format!("one of {}", v.join(", "));
    }
    let t = match &s["type"] {
        Value::Array(a) => a
            .iter()
            .find(|t| *t != "null")
            .and_then(Value::as_str)
            .unwrap_or("value"),
        t => t.as_str().unwrap_or("value"),
    };
    match t {
        "integer" => match (s["minimum"].as_u64(), s["maximum"].as_u64()) {
            (Some(lo), Some(hi)) => format!("whole number, {lo} to {hi}"),
            _ => "whole number".into(),
        },
        "number" => "number".into(),
        "boolean" => "true or false".into(),
        "array" => "list".into(),
        "object" if s["properties"].is_null() => "table of free keys".into(),
        "object" => "table".into(),
        "string" if is_duration(schema) => "duration (\"250ms\", \"10s\", \"30d\")".into(),
        "string" => "string".into(),
        other => other.into(),
    }
}

fn is_duration(schema: &Value) -> bool {
    schema["default"].as_str().is_some_and(|d| {
        humantime_serde::re::humantime::parse_duration(d).is_ok()
            && d.chars().any(char::is_alphabetic)
    })
}

/// A JSON default as TOML.
fn toml_text(v: &Value) -> String {
    toml::Value::try_from(v).map_or_else(|_| v.to_string(), |t| t.to_string())
}

/// The reference text of `key` (a dotted key or section).
pub(crate) fn explain(key: &str) -> Result<String> {
    let schema = crate::config::json_schema();
    let defs = &schema["definitions"];
    let mut node = &schema;
    let mut parent_variants: Vec<(String, String)> = Vec::new();
    for part in key.split('.') {
        let body = resolve(node, defs);
        let found = keys(body).into_iter().find(|(k, _)| k == part);
        match found {
            Some((_, sub)) => {
                // Which variants of a tagged table take this key.
                parent_variants = variants(body)
                    .into_iter()
                    .filter(|(_, _, v)| v["properties"].get(part).is_some())
                    .map(|(tag, value, _)| (tag, value))
                    .collect();
                node = sub;
            }
            None => {
                let mut known = Vec::new();
                all_keys(&schema, defs, "", &mut known);
                let mut near: Vec<&String> = known
                    .iter()
                    .filter(|k| {
                        strsim::levenshtein(k, key) <= 3 || k.ends_with(&format!(".{part}"))
                    })
                    .collect();
                near.sort_by_key(|k| strsim::levenshtein(k, key));
                near.truncate(5);
                let hint = if near.is_empty() {
                    "see docs/configuration.md for every key".to_string()
                } else {
                    format!(
                        "did you mean {}?",
                        near.iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                return Err(Usage(format!("`{key}` is not a config key: {hint}")).into());
            }
        }
    }
    Ok(render(key, node, defs, &parent_variants))
}

fn render(key: &str, node: &Value, defs: &Value, taken_by: &[(String, String)]) -> String {
    let body = resolve(node, defs);
    let mut s = String::new();
    let _ = writeln!(s, "{key}: {}", type_words(node, defs));
    let description = node["description"]
        .as_str()
        .or(body["description"].as_str())
        .unwrap_or_default();
    if !description.is_empty() {
        let _ = writeln!(s, "\n{}", description.replace('\n', " "));
    }
    if let [_, ..] = taken_by {
        let list: Vec<String> = taken_by
            .iter()
            .map(|(tag, value)| format!("{tag} = \"{value}\""))
            .collect();
        let _ = writeln!(s, "\nOnly with {}.", list.join(" or "));
    }
    if let Some(d) = node.get("default").or(body.get("default")) {
        let _ = writeln!(s, "\nDefault: {}", toml_text(d));
    }
    let values = enum_values(body);
    if !values.is_empty() {
        let _ = writeln!(s, "\nValues:");
        for (v, d) in values {
            let _ = writeln!(s, "  \"{v}\"  {}", d.replace('\n', " "));
        }
    }
    for (tag, value, variant) in variants(body) {
        let _ = writeln!(
            s,
            "\n{tag} = \"{value}\": {}",
            variant["description"]
                .as_str()
                .unwrap_or_default()
                .replace('\n', " ")
        );
        for (k, sub) in keys(variant) {
            if k != tag {
                let _ = writeln!(s, "  {k}: {}", line_of(sub, defs));
            }
        }
    }
    if variants(body).is_empty() && body["properties"].is_object() {
        let _ = writeln!(s, "\nKeys:");
        for (k, sub) in keys(body) {
            let _ = writeln!(s, "  {k}: {}", line_of(sub, defs));
        }
    }
    let var = format!("TIDEMARK__{}", key.to_ascii_uppercase().replace('.', "__"));
    let section = key.split('.').next().unwrap_or(key);
    let _ = writeln!(
        s,
        "\nSet by environment as {var}. Reference: docs/configuration.md#{section}"
    );
    s
}

/// One line about a key: type, and its description's first sentence.
fn line_of(node: &Value, defs: &Value) -> String {
    let d = node["description"]
        .as_str()
        .or(resolve(node, defs)["description"].as_str())
        .unwrap_or_default()
        .replace('\n', " ");
    let first = d.split(". ").next().unwrap_or(&d).trim_end_matches('.');
    format!("{} ({})", first, type_words(node, defs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_table_lists_its_variants() {
        let t = explain("schema.key").unwrap();
        for v in [
            "strategy = \"time_bucket\"",
            "strategy = \"entity\"",
            "shards",
        ] {
            assert!(t.contains(v), "{v}: {t}");
        }
        assert!(t.contains("TIDEMARK__SCHEMA__KEY"), "{t}");
    }

    #[test]
    fn a_key_gives_type_default_and_the_variants_taking_it() {
        let t = explain("writer.linger").unwrap();
        assert!(t.starts_with("writer.linger: duration"), "{t}");
        assert!(t.contains("Default: \"50ms\""), "{t}");
        let t = explain("schema.key.shards").unwrap();
        assert!(t.contains("Only with strategy = \"random_suffix\""), "{t}");
        let t = explain("schema.period").unwrap();
        assert!(t.contains("\"twelve_hours\""), "{t}");
    }

    #[test]
    fn an_unknown_key_names_the_near_ones() {
        let e = explain("writer.lingr").unwrap_err().to_string();
        assert!(e.contains("`writer.linger`"), "{e}");
    }
}
