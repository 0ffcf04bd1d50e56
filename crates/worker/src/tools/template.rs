//! Event templates for `tidemark produce --template FILE`: synthetic events
//! in the user's own shape.
//!
//! A template is one JSON value (usually an object), the event as the
//! producer writes it. Any string in it may hold placeholders,
//! `{{name|arg|arg}}`:
//!
//! | placeholder | value |
//! | --- | --- |
//! | `{{seq}}` | the event's number in the run, 0, 1, 2, ... |
//! | `{{entity}}` | an entity number, 0 to `--devices` - 1 (entity 0 is hot with `--hot-factor`) |
//! | `{{id}}` | a unique event id, `evt-<seed>-<seq>` |
//! | `{{int\|MIN\|MAX}}` | an integer from MIN to MAX |
//! | `{{float\|MIN\|MAX}}` | a number from MIN to MAX, two decimals |
//! | `{{pick\|A\|B\|...}}` | one of the words |
//! | `{{time}}`, `{{time\|FORMAT}}`, `{{time\|FORMAT\|ZONE}}` | the send time in a `timestamp_format` (default `rfc3339`), in a zone (IANA name or offset) |
//!
//! A string that is exactly one placeholder becomes its value, so
//! `"{{int|1|9}}"` is a number; with other text around it the result is a
//! string (`"user-{{entity}}"`). `{{str:NAME|...}}` makes any placeholder a
//! string on its own (`"{{str:int|1|9}}"` gives `"7"`). Values are
//! deterministic for a `--seed`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use thiserror::Error;
use tidemark_schema::mapping::TimeWriter;

use crate::tools::produce::{ProduceSpec, Produced};

/// A template that cannot be used; the message names the placeholder.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("template: {0}")]
pub(crate) struct TemplateError(String);

/// A parsed template, ready to render events.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    root: Node,
}

#[derive(Debug, Clone)]
enum Node {
    Lit(Value),
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
    /// A string of text and placeholders.
    Text(Vec<Piece>),
    /// A string that is one placeholder: its value as it is, or as text.
    One {
        value: Gen,
        text: bool,
    },
}

#[derive(Debug, Clone)]
enum Piece {
    Lit(String),
    Gen(Gen),
}

#[derive(Debug, Clone)]
enum Gen {
    Seq,
    Entity,
    Id,
    Int(i64, i64),
    Float(f64, f64),
    Pick(Vec<String>),
    Time(TimeWriter),
}

/// What one event's placeholders draw from.
struct EventInputs<'a> {
    spec: &'a ProduceSpec,
    n: u64,
    entity: u64,
    at_ms: i64,
    rng: fastrand::Rng,
}

impl Template {
    /// Parses a template file's text.
    pub(crate) fn parse(text: &str) -> Result<Template, TemplateError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| TemplateError(format!("not a JSON value: {e}")))?;
        Ok(Template {
            root: compile(value)?,
        })
    }

    /// Event `n` of the run, sent at `at`: its partition key (the entity,
    /// `entity-<n>`), id and JSON.
    pub(crate) fn render(&self, spec: &ProduceSpec, n: u64, at: DateTime<Utc>) -> Produced {
        let mut rng = spec.rng(n);
        let entity = spec.pick_device(&mut rng);
        let mut ctx = EventInputs {
            spec,
            n,
            entity,
            at_ms: at.timestamp_millis(),
            rng,
        };
        let value = render(&self.root, &mut ctx);
        Produced {
            key: format!("entity-{entity}"),
            id: event_id(spec, n),
            body: serde_json::to_vec(&value).unwrap_or_default(),
        }
    }
}

fn event_id(spec: &ProduceSpec, n: u64) -> String {
    format!("evt-{:08x}-{n:010}", spec.seed as u32)
}

fn compile(value: Value) -> Result<Node, TemplateError> {
    Ok(match value {
        Value::String(s) => compile_text(&s)?,
        Value::Array(items) => {
            Node::Array(items.into_iter().map(compile).collect::<Result<_, _>>()?)
        }
        Value::Object(members) => Node::Object(
            members
                .into_iter()
                .map(|(k, v)| Ok((k, compile(v)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
        other => Node::Lit(other),
    })
}

fn compile_text(s: &str) -> Result<Node, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find("{{") {
        let close = rest[open..]
            .find("}}")
            .map(|c| open + c)
            .ok_or_else(|| TemplateError(format!("{s:?} opens a placeholder it does not close")))?;
        if open > 0 {
            pieces.push(Piece::Lit(rest[..open].to_owned()));
        }
        pieces.push(Piece::Gen(placeholder(&rest[open + 2..close])?));
        rest = &rest[close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Lit(rest.to_owned()));
    }
    // A string that is exactly one placeholder gives the value itself.
    let whole = s.trim();
    if let [Piece::Gen(_)] = pieces.as_slice()
        && whole.starts_with("{{")
        && whole.ends_with("}}")
        && whole.len() == s.len()
    {
        let inner = &whole[2..whole.len() - 2];
        let text = inner.trim_start().starts_with("str:");
        if let Some(Piece::Gen(value)) = pieces.pop() {
            return Ok(Node::One { value, text });
        }
    }
    Ok(if pieces.iter().all(|p| matches!(p, Piece::Lit(_))) {
        Node::Lit(Value::String(s.to_owned()))
    } else {
        Node::Text(pieces)
    })
}

fn placeholder(inner: &str) -> Result<Gen, TemplateError> {
    let inner = inner.trim();
    let inner = inner.strip_prefix("str:").unwrap_or(inner);
    let args: Vec<&str> = inner.split('|').map(str::trim).collect();
    let bad = |why: &str| TemplateError(format!("{{{{{inner}}}}}: {why}"));
    let num = |i: usize| -> Result<f64, TemplateError> {
        args.get(i)
            .and_then(|a| a.parse::<f64>().ok())
            .ok_or_else(|| bad("give MIN and MAX numbers, e.g. {{int|1|100}}"))
    };
    let gen_ = match args.first().copied().unwrap_or_default() {
        "seq" => Gen::Seq,
        "entity" => Gen::Entity,
        "id" => Gen::Id,
        "int" => {
            let (lo, hi) = (num(1)?, num(2)?);
            if lo > hi || lo.fract() != 0.0 || hi.fract() != 0.0 {
                return Err(bad("MIN and MAX are integers, MIN <= MAX"));
            }
            Gen::Int(lo as i64, hi as i64)
        }
        "float" => {
            let (lo, hi) = (num(1)?, num(2)?);
            if lo > hi {
                return Err(bad("MIN <= MAX"));
            }
            Gen::Float(lo, hi)
        }
        "pick" if args.len() > 1 => Gen::Pick(args[1..].iter().map(|a| (*a).to_owned()).collect()),
        "pick" => return Err(bad("give the words to pick from, e.g. {{pick|a|b}}")),
        "time" => Gen::Time(
            TimeWriter::new(
                args.get(1).copied().unwrap_or("rfc3339"),
                args.get(2).copied(),
            )
            .map_err(|e| bad(&e))?,
        ),
        other => {
            return Err(bad(&format!(
                "unknown placeholder {other:?}: use seq, entity, id, int, float, pick or time"
            )));
        }
    };
    Ok(gen_)
}

fn render(node: &Node, ctx: &mut EventInputs<'_>) -> Value {
    match node {
        Node::Lit(v) => v.clone(),
        Node::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), render(v, ctx)))
                .collect(),
        ),
        Node::Array(items) => Value::Array(items.iter().map(|v| render(v, ctx)).collect()),
        Node::One { value, text } => {
            let v = generate(value, ctx);
            match (text, v) {
                (true, Value::String(s)) | (false, Value::String(s)) => Value::String(s),
                (true, other) => Value::String(other.to_string()),
                (false, other) => other,
            }
        }
        Node::Text(pieces) => {
            let mut out = String::new();
            for p in pieces {
                match p {
                    Piece::Lit(s) => out.push_str(s),
                    Piece::Gen(g) => match generate(g, ctx) {
                        Value::String(s) => out.push_str(&s),
                        other => out.push_str(&other.to_string()),
                    },
                }
            }
            Value::String(out)
        }
    }
}

fn generate(g: &Gen, ctx: &mut EventInputs<'_>) -> Value {
    match g {
        Gen::Seq => Value::from(ctx.n),
        Gen::Entity => Value::from(ctx.entity),
        Gen::Id => Value::String(event_id(ctx.spec, ctx.n)),
        Gen::Int(lo, hi) => Value::from(ctx.rng.i64(*lo..=*hi)),
        Gen::Float(lo, hi) => {
            let x = lo + ctx.rng.f64() * (hi - lo);
            serde_json::Number::from_f64((x * 100.0).round() / 100.0)
                .map_or(Value::Null, Value::Number)
        }
        Gen::Pick(words) => Value::String(
            words
                .get(ctx.rng.usize(0..words.len().max(1)))
                .cloned()
                .unwrap_or_default(),
        ),
        Gen::Time(w) => w.write(ctx.at_ms),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn spec() -> ProduceSpec {
        ProduceSpec {
            devices: 5,
            count: 10,
            hot_factor: 1,
            seed: 7,
        }
    }

    #[test]
    fn renders_values_in_the_templates_shape() {
        let t = Template::parse(
            r#"{"tenant":"{{pick|acme|globex}}","user":{"id":"u-{{entity}}","n":"{{entity}}"},
                "time":"{{time|%Y-%m-%d %H:%M:%S|Europe/Paris}}","us":"{{time|epoch_micros}}",
                "qty":"{{int|1|3}}","qty_text":"{{str:int|1|3}}","price":"{{float|1|2}}",
                "seq":"{{seq}}","eid":"{{id}}","fixed":[1,"plain",null]}"#,
        )
        .unwrap();
        let at = DateTime::parse_from_rfc3339("2025-11-22T04:00:00Z")
            .unwrap()
            .to_utc();
        let p = t.render(&spec(), 3, at);
        let v: Value = serde_json::from_slice(&p.body).unwrap();
        assert!(["acme", "globex"].contains(&v["tenant"].as_str().unwrap()));
        let entity = v["user"]["n"].as_u64().unwrap();
        assert!(entity < 5);
        assert_eq!(v["user"]["id"], format!("u-{entity}"));
        assert_eq!(p.key, format!("entity-{entity}"));
        assert_eq!(v["time"], "2025-11-22 05:00:00");
        assert_eq!(v["us"], 1_763_784_000_000_000i64);
        assert!((1..=3).contains(&v["qty"].as_i64().unwrap()));
        assert!(v["qty_text"].is_string());
        assert!(v["price"].is_f64());
        assert_eq!(v["seq"], 3);
        assert_eq!(v["eid"], p.id);
        assert_eq!(v["fixed"], serde_json::json!([1, "plain", null]));
        // Deterministic for the seed.
        assert_eq!(t.render(&spec(), 3, at), p);
        assert_ne!(t.render(&spec(), 4, at).id, p.id);
    }

    #[test]
    fn bad_placeholders_are_named() {
        for (text, needle) in [
            (r#"{"a":"{{nope}}"}"#, "nope"),
            (r#"{"a":"{{int|9|1}}"}"#, "int|9|1"),
            (r#"{"a":"{{int|x|1}}"}"#, "MIN and MAX"),
            (r#"{"a":"{{time|%H}}"}"#, "time|%H"),
            (r#"{"a":"{{pick}}"}"#, "pick"),
            (r#"{"a":"{{seq"}"#, "does not close"),
            ("not json", "not a JSON value"),
        ] {
            let e = Template::parse(text).unwrap_err();
            assert!(e.to_string().contains(needle), "{e} lacks {needle}");
        }
    }
}
