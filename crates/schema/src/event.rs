//! Events: the entity id, timestamp, event id and payload of one JSON record.
//!
//! The record is parsed once (`crate::raw`), keeping every value as its raw
//! JSON text; only the configured fields are decoded. Payload numbers
//! therefore reach DynamoDB with exactly the digits the producer wrote.
//!
//! The entity may be one field or several joined ([`EventConfig::entity_fields`]);
//! field paths may cross arrays (`items[0].id`: read, never removed). After
//! the identity fields are taken out, `rename` moves values to top-level
//! names; include / exclude / types and the clash policy (see [`mapping`])
//! apply as the item is written.
//!
//! Files: `config` (the `[event]` table), `error`, [`mapping`] (time
//! formats and zones, include / exclude / types, clash policy, compiled
//! once), `path` (field paths, and taking their values out of a record),
//! `timestamp` (reading the event time). Dependencies run one way: this file
//! → {`config` → `mapping`, `path`, `timestamp` → `mapping`} → `error`.

use std::borrow::Cow;

use serde::de::DeserializeSeed;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::origin::Origin;
use crate::raw::{Name, Node, Slot, Split, document_kind, json_kind, string_text};

mod config;
mod error;
pub mod mapping;
mod path;
mod timestamp;

pub use config::EventConfig;
pub use error::{EventConfigError, EventError};
pub use mapping::{ClashPolicy, FieldType, TimeWriter, TimestampFormat};

use config::default_entity_field;
use mapping::{Coerced, Rules, TimeParser};
use path::{FieldPath, remove_member, split_names, take};
use timestamp::parse_timestamp;

/// One event, normalized.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The entity the event belongs to.
    pub entity_id: String,
    /// Event time, UTC, milliseconds since the Unix epoch (sub-milliseconds
    /// truncated toward the past).
    pub timestamp_ms: i64,
    /// The producer's event id, or one derived from the source position.
    pub event_id: String,
    /// Every field except the three above. Numbers beyond `f64` precision lose
    /// digits here; [`crate::route::Router`] keeps them exact.
    pub payload: serde_json::Map<String, Value>,
}

/// An event whose payload is still raw JSON text: what the router builds
/// items from.
#[derive(Debug)]
pub(crate) struct RawEvent<'a> {
    pub entity_id: Cow<'a, str>,
    pub timestamp_ms: i64,
    /// The record's own timestamp text when it already is the canonical
    /// rendering (`timefmt::iso_millis` of `timestamp_ms`).
    pub iso: Option<&'a str>,
    pub event_id: Cow<'a, str>,
    pub payload: Vec<(Name<'a>, Node<'a>)>,
}

/// Extracts events from records according to an [`EventConfig`].
#[derive(Debug, Clone)]
pub struct Extractor {
    entity: FieldPath,
    /// A composite entity's parts (empty for a single entity field).
    entity_parts: Vec<FieldPath>,
    separator: String,
    timestamp: FieldPath,
    event_id: Option<FieldPath>,
    time: TimeParser,
    renames: Vec<(FieldPath, String)>,
    rules: Option<Rules>,
    on_clash: ClashPolicy,
    clash_prefix: String,
    /// Names of the fields above (in that order) that the record parse sets
    /// aside as it meets them; see [`Split`].
    split: [Option<String>; 3],
}

impl Extractor {
    /// Checks the configuration once, so extraction cannot fail on it.
    pub fn new(config: EventConfig) -> Result<Extractor, EventConfigError> {
        let err = |field: &'static str, problem: String| Err(EventConfigError { field, problem });
        let entity = FieldPath::new("entity_field", &config.entity_field)?;
        let entity_parts = config
            .entity_fields
            .iter()
            .map(|f| FieldPath::new("entity_fields", f))
            .collect::<Result<Vec<_>, _>>()?;
        if !entity_parts.is_empty() && config.entity_field != default_entity_field() {
            return err(
                "entity_fields",
                "is set together with `entity_field`: keep one of them".into(),
            );
        }
        if config.entity_separator.is_empty() {
            return err(
                "entity_separator",
                "is empty: the parts of a composite entity need a separator such as \":\"".into(),
            );
        }
        let timestamp = FieldPath::new("timestamp_field", &config.timestamp_field)?;
        let event_id = match config.event_id_field.as_deref() {
            None | Some("") => None,
            Some(name) => Some(FieldPath::new("event_id_field", name)?),
        };
        // Each identity field with the key that names it: a clash names the
        // later key, the one to change.
        let mut roles: Vec<(&String, &'static str)> = Vec::new();
        if entity_parts.is_empty() {
            roles.push((&entity.name, "entity_field"));
        } else {
            roles.extend(entity_parts.iter().map(|p| (&p.name, "entity_fields")));
        }
        roles.push((&timestamp.name, "timestamp_field"));
        roles.extend(event_id.as_ref().map(|p| (&p.name, "event_id_field")));
        for (i, (a, key)) in roles.iter().enumerate().skip(1) {
            if let Some((_, first)) = roles[..i].iter().find(|(b, _)| b == a) {
                let problem = if first == key {
                    format!("lists field {a:?} twice: give each part its own field")
                } else {
                    format!(
                        "uses field {a:?}, which `{first}` uses too: give each role its own field"
                    )
                };
                return err(key, problem);
            }
        }
        let names: Vec<&String> = roles.iter().map(|(n, _)| *n).collect();
        let time = TimeParser::new(config.timestamp_format.clone(), config.timezone.as_deref())?;
        let mut renames = Vec::with_capacity(config.rename.len());
        let mut targets: Vec<&str> = Vec::with_capacity(config.rename.len());
        for (from, to) in &config.rename {
            let path = FieldPath::new("rename", from)?;
            if names.contains(&&path.name) {
                return err(
                    "rename",
                    format!(
                        "renames {from:?}, which is an identity field (entity, timestamp or event id) and not in the payload"
                    ),
                );
            }
            if to.is_empty() {
                return err("rename", format!("renames {from:?} to an empty name"));
            }
            if targets.contains(&to.as_str()) {
                return err(
                    "rename",
                    format!("renames two fields to {to:?}: give each its own name"),
                );
            }
            targets.push(to);
            renames.push((path, to.clone()));
        }
        let rules = Rules::new(
            config.include.as_deref(),
            &config.exclude,
            &config.types,
            &targets,
        )?;
        if config.on_clash == ClashPolicy::Prefix && config.clash_prefix.is_empty() {
            return err(
                "clash_prefix",
                "is empty: give a prefix such as \"payload_\", or set on_clash = \"refuse\"".into(),
            );
        }
        let others: Vec<&FieldPath> = entity_parts
            .iter()
            .chain(renames.iter().map(|(p, _)| p))
            .collect();
        let single_entity = entity_parts.is_empty().then_some(&entity);
        let split = split_names(
            [single_entity, Some(&timestamp), event_id.as_ref()],
            &others,
        );
        Ok(Extractor {
            entity,
            entity_parts,
            separator: config.entity_separator,
            timestamp,
            event_id,
            time,
            renames,
            rules,
            on_clash: config.on_clash,
            clash_prefix: config.clash_prefix,
            split,
        })
    }

    /// What the mapping does with a payload field (by its final name);
    /// `None` when every field is kept as it is.
    pub(crate) fn rules(&self) -> Option<&Rules> {
        self.rules.as_ref()
    }

    /// The clash policy and prefix.
    pub(crate) fn clash(&self) -> (ClashPolicy, &str) {
        (self.on_clash, &self.clash_prefix)
    }

    /// Extracts the event of one record; `origin` supplies the event id when
    /// the record has none. The payload is mapped (renamed, filtered and
    /// coerced) as the item's will be; coerced numbers beyond `f64`
    /// precision lose digits here, as [`Event::payload`] says.
    pub fn extract(&self, data: &[u8], origin: &Origin) -> Result<Event, EventError> {
        self.extract_inner(data, origin, 0)
    }

    /// [`Extractor::extract`] for inner event `inner` of a record holding
    /// several (NDJSON, JSON array): a derived event id names the position.
    pub(crate) fn extract_inner(
        &self,
        data: &[u8],
        origin: &Origin,
        inner: u32,
    ) -> Result<Event, EventError> {
        let raw = self.extract_raw(data, origin, inner)?;
        let mut payload = serde_json::Map::with_capacity(raw.payload.len());
        for (k, node) in raw.payload {
            let rule = self.rules.as_ref().map(|r| r.get(&k));
            if rule.is_some_and(|r| !r.keep) {
                continue;
            }
            let value = match rule.and_then(|r| r.ty) {
                None => node_to_value(&node)?,
                Some(ty) => match mapping::coerce(&node, ty) {
                    Ok(Coerced::Same) => node_to_value(&node)?,
                    Ok(Coerced::Number(n)) => serde_json::from_str(&n)
                        .map_err(|e| EventError::InvalidJson(e.to_string()))?,
                    Ok(Coerced::Str(t)) => Value::String(t.into_owned()),
                    Ok(Coerced::Bool(b)) => Value::Bool(b),
                    Err(problem) => {
                        return Err(EventError::Coercion {
                            field: k.into_owned(),
                            problem,
                        });
                    }
                },
            };
            payload.insert(k.into_owned(), value);
        }
        Ok(Event {
            entity_id: raw.entity_id.into_owned(),
            timestamp_ms: raw.timestamp_ms,
            event_id: raw.event_id.into_owned(),
            payload,
        })
    }

    pub(crate) fn extract_raw<'a>(
        &self,
        data: &'a [u8],
        origin: &Origin,
        inner: u32,
    ) -> Result<RawEvent<'a>, EventError> {
        // One UTF-8 check for the whole record: parsing from `str` then
        // skips the per-value check each raw member would cost from bytes.
        let text = std::str::from_utf8(data)
            .map_err(|e| EventError::InvalidJson(format!("not UTF-8 text: {e}")))?;
        let split = Split(self.split.each_ref().map(Option::as_deref));
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = split
            .deserialize(&mut de)
            .and_then(|v| de.end().map(|()| v));
        let (mut members, [entity_slot, ts_slot, id_slot]) = match parsed {
            Ok(v) => v,
            Err(e) if e.classify() == serde_json::error::Category::Data => {
                return Err(EventError::NotAnObject(document_kind(data)));
            }
            Err(e) => return Err(EventError::InvalidJson(e.to_string())),
        };

        let entity_id = if self.entity_parts.is_empty() {
            self.entity_part(&mut members, entity_slot, &self.entity)?
        } else {
            let mut joined = String::new();
            for (i, part) in self.entity_parts.iter().enumerate() {
                if i > 0 {
                    joined.push_str(&self.separator);
                }
                joined.push_str(&self.entity_part(&mut members, Slot::NotSplit, part)?);
            }
            Cow::Owned(joined)
        };

        let ts_raw =
            take(&mut members, ts_slot, &self.timestamp)?.ok_or_else(|| EventError::Missing {
                field: self.timestamp.name.clone(),
            })?;
        let (timestamp_ms, iso) = parse_timestamp(&ts_raw, &self.timestamp.name, &self.time)?;

        let mut event_id = None;
        if let Some(path) = &self.event_id
            && let Some(node) = take(&mut members, id_slot, path)?
        {
            // null and "" count as absent: the id is derived instead.
            let is_null = matches!(&node, Node::Raw(r) if json_kind(r) == "null");
            if !is_null {
                let id = scalar_text(&node, &path.name, "a string or a number")?;
                if !id.is_empty() {
                    event_id = Some(id);
                }
            }
        }
        let event_id = event_id.unwrap_or_else(|| Cow::Owned(derived_event_id(origin, inner)));

        for (path, target) in &self.renames {
            if let Some(node) = take(&mut members, Slot::NotSplit, path)? {
                remove_member(&mut members, target);
                members.push((Cow::Owned(target.clone()), node));
            }
        }

        Ok(RawEvent {
            entity_id,
            timestamp_ms,
            iso,
            event_id,
            payload: members,
        })
    }
}

impl Extractor {
    /// One entity field's text, taken out of the payload.
    fn entity_part<'a>(
        &self,
        members: &mut Vec<(Name<'a>, Node<'a>)>,
        slot: Slot<'a>,
        path: &FieldPath,
    ) -> Result<Cow<'a, str>, EventError> {
        let raw = take(members, slot, path)?.ok_or_else(|| EventError::Missing {
            field: path.name.clone(),
        })?;
        let text = scalar_text(&raw, &path.name, "a string or a number")?;
        if text.is_empty() {
            return Err(EventError::EmptyEntityId {
                field: path.name.clone(),
            });
        }
        Ok(text)
    }
}

/// The event id of inner event `inner` of the record at `origin` when it
/// carries none. The first (or only) event keeps the record's id, so a
/// record of one event gets the same id whatever its record format.
pub fn derived_event_id(origin: &Origin, inner: u32) -> String {
    let mut id = origin.derived_event_id();
    if inner > 0 {
        id.push('/');
        id.push_str(itoa::Buffer::new().format(inner));
    }
    id
}

fn node_kind(node: &Node<'_>) -> &'static str {
    match node {
        Node::Raw(r) => json_kind(r),
        Node::Object(_) => "object",
    }
}

/// A string's contents, or a number's text.
fn scalar_text<'a>(
    node: &Node<'a>,
    field: &str,
    expected: &'static str,
) -> Result<Cow<'a, str>, EventError> {
    let wrong = || EventError::WrongType {
        field: field.to_owned(),
        expected,
        found: node_kind(node),
    };
    let Node::Raw(raw) = node else {
        return Err(wrong());
    };
    let raw: &'a RawValue = raw;
    match json_kind(raw) {
        "string" => string_text(raw).map_err(|_| wrong()),
        "number" => Ok(Cow::Borrowed(raw.get().trim_ascii())),
        _ => Err(wrong()),
    }
}

fn node_to_value(node: &Node<'_>) -> Result<Value, EventError> {
    match node {
        Node::Raw(raw) => {
            serde_json::from_str(raw.get()).map_err(|e| EventError::InvalidJson(e.to_string()))
        }
        Node::Object(members) => {
            let mut map = serde_json::Map::with_capacity(members.len());
            for (k, v) in members {
                map.insert(k.to_string(), node_to_value(v)?);
            }
            Ok(Value::Object(map))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reason::Reason;
    use crate::timefmt;

    fn origin() -> Origin {
        Origin::Kinesis {
            stream: "s".into(),
            shard_id: "shardId-000000000007".into(),
            sequence_number: "4959".into(),
            sub_sequence_number: 2,
        }
    }

    fn ex(cfg: EventConfig) -> Extractor {
        Extractor::new(cfg).unwrap()
    }

    #[test]
    fn extracts_fields_and_keeps_the_rest_as_payload() {
        let e = ex(EventConfig::default())
            .extract(
                br#"{"deviceId":"d1","timestamp":"2026-11-22T06:30:00.123456+01:00","eventId":"e9","t":21.5,"nested":{"a":[1,true,null]}}"#,
                &origin(),
            )
            .unwrap();
        assert_eq!(e.entity_id, "d1");
        assert_eq!(
            timefmt::iso_millis(e.timestamp_ms),
            "2026-11-22T05:30:00.123Z"
        );
        assert_eq!(e.event_id, "e9");
        assert_eq!(e.payload.len(), 2);
        assert_eq!(e.payload["t"], serde_json::json!(21.5));
        assert_eq!(e.payload["nested"]["a"][1], serde_json::json!(true));
    }

    #[test]
    fn missing_event_id_is_derived_from_origin() {
        let e = ex(EventConfig::default())
            .extract(br#"{"deviceId":"d","timestamp":0}"#, &origin())
            .unwrap();
        assert_eq!(e.event_id, origin().derived_event_id());
        let e2 = ex(EventConfig::default())
            .extract(
                br#"{"deviceId":"d","timestamp":0,"eventId":null}"#,
                &origin(),
            )
            .unwrap();
        assert_eq!(e2.event_id, e.event_id);
        let disabled = EventConfig {
            event_id_field: Some(String::new()),
            ..EventConfig::default()
        };
        let e3 = ex(disabled)
            .extract(
                br#"{"deviceId":"d","timestamp":0,"eventId":"x"}"#,
                &origin(),
            )
            .unwrap();
        assert_eq!(e3.event_id, e.event_id);
        // With the field disabled, eventId stays in the payload.
        assert_eq!(e3.payload["eventId"], serde_json::json!("x"));
    }

    #[test]
    fn dotted_paths_reach_into_objects_and_remove_only_the_leaf() {
        let cfg = EventConfig {
            entity_field: "meta.device.id".into(),
            timestamp_field: "meta.ts".into(),
            ..EventConfig::default()
        };
        let e = ex(cfg)
            .extract(
                br#"{"meta":{"device":{"id":42,"kind":"x"},"ts":1763790000},"v":1}"#,
                &origin(),
            )
            .unwrap();
        assert_eq!(e.entity_id, "42");
        assert_eq!(e.timestamp_ms, 1_763_790_000_000);
        assert_eq!(
            e.payload["meta"],
            serde_json::json!({"device":{"kind":"x"}})
        );
    }

    #[test]
    fn fields_set_aside_by_the_parse_keep_member_semantics() {
        // A repeated field: the last value counts, no copy stays in the payload.
        let e = ex(EventConfig::default())
            .extract(
                br#"{"deviceId":"first","x":1,"deviceId":"last","timestamp":0,"timestamp":5}"#,
                &origin(),
            )
            .unwrap();
        assert_eq!((e.entity_id.as_str(), e.timestamp_ms), ("last", 5_000));
        assert_eq!(e.payload.keys().collect::<Vec<_>>(), ["x"]);

        // `meta` begins the entity's path, so it stays a member for the
        // entity to be taken out of first; the timestamp then meets the
        // opened object, not a missing field.
        let cfg = EventConfig {
            entity_field: "meta.id".into(),
            timestamp_field: "meta".into(),
            ..EventConfig::default()
        };
        let err = ex(cfg)
            .extract(br#"{"meta":{"id":"d1","t":0}}"#, &origin())
            .unwrap_err();
        assert!(
            matches!(&err, EventError::WrongType { field, .. } if field == "meta"),
            "{err:?}"
        );
    }

    #[test]
    fn literal_dotted_key_wins_over_path() {
        let cfg = EventConfig {
            entity_field: "a.b".into(),
            ..EventConfig::default()
        };
        let e = ex(cfg)
            .extract(
                br#"{"a.b":"lit","a":{"b":"nested"},"timestamp":0}"#,
                &origin(),
            )
            .unwrap();
        assert_eq!(e.entity_id, "lit");
    }

    #[test]
    fn errors_name_the_field_and_map_to_reasons() {
        let x = ex(EventConfig::default());
        let cases: [(&[u8], Reason, &str); 9] = [
            (b"{not json", Reason::InvalidJson, "not valid JSON"),
            (b"[1,2]", Reason::InvalidJson, "array"),
            (br#"{"timestamp":0}"#, Reason::MissingField, "`deviceId`"),
            (br#"{"deviceId":"d"}"#, Reason::MissingField, "`timestamp`"),
            (
                br#"{"deviceId":true,"timestamp":0}"#,
                Reason::InvalidField,
                "boolean",
            ),
            (
                br#"{"deviceId":"","timestamp":0}"#,
                Reason::InvalidField,
                "empty",
            ),
            (
                br#"{"deviceId":"d","timestamp":"yesterday"}"#,
                Reason::BadTimestamp,
                "RFC 3339",
            ),
            (
                br#"{"deviceId":"d","timestamp":"2026-11-22T05:00:00"}"#,
                Reason::BadTimestamp,
                "`timestamp`",
            ),
            (
                br#"{"deviceId":"d","timestamp":1e300}"#,
                Reason::BadTimestamp,
                "range",
            ),
        ];
        for (data, reason, needle) in cases {
            let err = x.extract(data, &origin()).unwrap_err();
            assert_eq!(err.reason(), reason, "{err}");
            assert!(err.to_string().contains(needle), "{err} lacks {needle}");
        }
        let err = x
            .extract(br#"{"deviceId":"d","timestamp":[1]}"#, &origin())
            .unwrap_err();
        assert_eq!(err.reason(), Reason::InvalidField);
    }

    #[test]
    fn timestamp_formats() {
        let at = |fmt: TimestampFormat, v: &str| {
            let cfg = EventConfig {
                timestamp_format: fmt,
                ..EventConfig::default()
            };
            let data = format!(r#"{{"deviceId":"d","timestamp":{v}}}"#);
            ex(cfg)
                .extract(data.as_bytes(), &origin())
                .map(|e| e.timestamp_ms)
        };
        use TimestampFormat::*;
        assert_eq!(at(Auto, "1763790000").unwrap(), 1_763_790_000_000);
        assert_eq!(at(Auto, "1763790000123").unwrap(), 1_763_790_000_123);
        assert_eq!(at(Auto, "1763790000.1239").unwrap(), 1_763_790_000_123);
        assert_eq!(at(Auto, r#""1763790000""#).unwrap(), 1_763_790_000_000);
        assert_eq!(at(Auto, "1.76379e9").unwrap(), 1_763_790_000_000);
        assert_eq!(at(Auto, "-1.5").unwrap(), -1_500);
        assert_eq!(at(EpochSeconds, "-0.0005").unwrap(), -1);
        assert_eq!(at(EpochSeconds, "12").unwrap(), 12_000);
        assert_eq!(at(EpochMillis, "12").unwrap(), 12);
        assert_eq!(at(EpochMillis, "12.9").unwrap(), 12);
        assert_eq!(at(Rfc3339, r#""1970-01-01T00:00:00.0009Z""#).unwrap(), 0);
        assert_eq!(
            at(Rfc3339, "12").unwrap_err().reason(),
            Reason::InvalidField
        );
        assert_eq!(
            at(EpochMillis, r#""12x""#).unwrap_err().reason(),
            Reason::BadTimestamp
        );
        assert_eq!(
            at(Auto, r#""1899-12-31T23:59:59.999Z""#)
                .unwrap_err()
                .reason(),
            Reason::BadTimestamp
        );
    }

    #[test]
    fn config_rejects_bad_names_and_unknown_keys() {
        let bad = EventConfig {
            entity_field: "a..b".into(),
            ..EventConfig::default()
        };
        assert_eq!(Extractor::new(bad).unwrap_err().field, "entity_field");
        let dup = EventConfig {
            timestamp_field: "deviceId".into(),
            ..EventConfig::default()
        };
        let e = Extractor::new(dup).unwrap_err();
        assert_eq!(e.field, "timestamp_field");
        assert!(e.to_string().contains("`entity_field` uses too"), "{e}");
        let parsed: Result<EventConfig, _> = toml::from_str("entity_feld = \"x\"");
        assert!(parsed.is_err());
        let parsed: EventConfig =
            toml::from_str("entity_field = \"sensor\"\ntimestamp_format = \"epoch_millis\"")
                .unwrap();
        assert_eq!(parsed.entity_field, "sensor");
        assert_eq!(parsed.event_id_field.as_deref(), Some("eventId"));
        assert_eq!(parsed.timestamp_format, TimestampFormat::EpochMillis);
    }
}
