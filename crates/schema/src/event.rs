//! Events: the entity id, timestamp, event id and payload of one JSON record.
//!
//! The record is parsed once, keeping every value as its raw JSON text
//! ([`serde_json::value::RawValue`]); only the configured fields are decoded.
//! Payload numbers therefore reach DynamoDB with exactly the digits the
//! producer wrote, which an `f64` round trip cannot promise past 17 digits.
//!
//! The entity may be one field or several joined ([`EventConfig::entity_fields`]);
//! field paths may cross arrays (`items[0].id`: read, never removed). After
//! the identity fields are taken out, `rename` moves values to top-level
//! names; include / exclude / types and the clash policy (see
//! [`crate::mapping`]) apply as the item is written.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use thiserror::Error;

use crate::mapping::{self, Coerced, Rules, TimeParser};
use crate::origin::Origin;
use crate::reason::Reason;
use crate::timefmt;

pub use crate::mapping::{ClashPolicy, FieldType, TimestampFormat};

/// Which record fields hold the event's identity and time.
///
/// A field name containing dots is a path into nested objects
/// (`meta.device.id`), unless the record has a top-level field with exactly
/// that name, which wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventConfig {
    /// Field holding the entity id (device, sensor, user): a non-empty string,
    /// or a number (kept as its text). Default `deviceId`.
    #[serde(default = "default_entity_field")]
    pub entity_field: String,
    /// Field holding the event time. Default `timestamp`.
    #[serde(default = "default_timestamp_field")]
    pub timestamp_field: String,
    /// Field holding a producer-assigned event id (string or number). When it
    /// is absent, null or empty in a record, or this option is unset or set to
    /// `""`, the id is derived from the record's source position instead.
    /// Default `eventId`.
    #[serde(default = "default_event_id_field")]
    pub event_id_field: Option<String>,
    /// How the timestamp is written: `auto`, `rfc3339`, `epoch_seconds`,
    /// `epoch_millis`, `epoch_micros`, `epoch_nanos`, or a chrono strftime
    /// pattern such as `"%Y-%m-%d %H:%M:%S"`. Default `auto`.
    #[serde(default)]
    pub timestamp_format: TimestampFormat,
    /// Time zone of zone-less times: an IANA name (`"Europe/Paris"`) or a
    /// fixed offset (`"+05:30"`). Used by a strftime `timestamp_format`
    /// without `%z`, and by `auto` for `"2025-11-22 05:00:00"`-style text.
    /// Refused with formats whose times carry their zone. Default: none
    /// (such times are UTC for a pattern, refused for `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Several fields whose values, joined by `entity_separator`, make the
    /// entity id, e.g. `["tenant", "device"]` gives `acme:d1`. Replaces
    /// `entity_field` (leave that unset). Each part is a string or number and
    /// is removed from the payload like `entity_field`. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entity_fields: Vec<String>,
    /// Joins the parts of `entity_fields`. Default `":"`. Must not be empty;
    /// with the `time_bucket` key strategy it must not contain `#`.
    #[serde(default = "default_entity_separator")]
    pub entity_separator: String,
    /// Payload fields to move to a top-level attribute of another name:
    /// `{ "user.name" = "user_name", "items[0].sku" = "first_sku" }`. The
    /// source is a field path; a path through an array index copies the
    /// value and leaves the array as it is. A renamed value replaces a field
    /// already named like its target. Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rename: BTreeMap<String, String>,
    /// When set, only these top-level payload fields are stored (names after
    /// `rename`), e.g. `["page", "user_name"]`. Default: every field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
    /// Top-level payload fields not stored (names after `rename`), e.g.
    /// `["debug"]`. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Type coercion of top-level payload fields (names after `rename`):
    /// `{ n = "number", code = "string", ok = "bool" }`. A string becomes a
    /// number with every digit kept; a value that cannot be coerced
    /// dead-letters its event (`invalid_field`). Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub types: BTreeMap<String, FieldType>,
    /// A payload field named like an attribute every item carries (`ts`,
    /// `ts_ms`, `entity_id`, `event_id`, the key attributes, the TTL):
    /// `prefix` stores it as `clash_prefix` + name; `refuse` dead-letters
    /// the event. Default `prefix`.
    #[serde(default)]
    pub on_clash: ClashPolicy,
    /// Prefix of clashing payload fields. Default `"payload_"`.
    #[serde(default = "default_clash_prefix")]
    pub clash_prefix: String,
}

fn default_entity_separator() -> String {
    ":".to_owned()
}

fn default_clash_prefix() -> String {
    "payload_".to_owned()
}

impl EventConfig {
    /// How errors name the entity: its field, or its fields joined by `+`.
    pub fn entity_label(&self) -> String {
        if self.entity_fields.is_empty() {
            self.entity_field.clone()
        } else {
            self.entity_fields.join("+")
        }
    }
}

fn default_entity_field() -> String {
    "deviceId".to_owned()
}

fn default_timestamp_field() -> String {
    "timestamp".to_owned()
}

#[allow(clippy::unnecessary_wraps)] // serde's default= needs the field's type
fn default_event_id_field() -> Option<String> {
    Some("eventId".to_owned())
}

impl Default for EventConfig {
    fn default() -> Self {
        EventConfig {
            entity_field: default_entity_field(),
            timestamp_field: default_timestamp_field(),
            event_id_field: default_event_id_field(),
            timestamp_format: TimestampFormat::Auto,
            timezone: None,
            entity_fields: Vec::new(),
            entity_separator: default_entity_separator(),
            rename: BTreeMap::new(),
            include: None,
            exclude: Vec::new(),
            types: BTreeMap::new(),
            on_clash: ClashPolicy::Prefix,
            clash_prefix: default_clash_prefix(),
        }
    }
}

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

/// Why a record is not a valid event. Every variant names the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EventError {
    /// The bytes are not UTF-8 JSON.
    #[error("record is not valid JSON: {0}")]
    InvalidJson(String),
    /// The record is JSON but not an object.
    #[error("record is a JSON {0}, expected an object")]
    NotAnObject(&'static str),
    /// A required field is absent (or a path crosses a non-object).
    #[error("field `{field}` is missing")]
    Missing {
        /// The configured field name or path.
        field: String,
    },
    /// A field has the wrong JSON type.
    #[error("field `{field}` is a JSON {found}, expected {expected}")]
    WrongType {
        /// The configured field name or path.
        field: String,
        /// What the field must be.
        expected: &'static str,
        /// What it is.
        found: &'static str,
    },
    /// The entity id is the empty string.
    #[error("field `{field}` (entity id) is empty")]
    EmptyEntityId {
        /// The configured field name or path.
        field: String,
    },
    /// A payload field cannot be coerced to its configured type.
    #[error("field `{field}` {problem} (`types` coerces it)")]
    Coercion {
        /// The field, by its name after renaming.
        field: String,
        /// What the value is and why it does not convert.
        problem: String,
    },
    /// The timestamp cannot be read, or is outside 1900-01-01..9999-01-01.
    #[error("field `{field}` has an unusable timestamp {value:?}: {why}")]
    BadTimestamp {
        /// The configured field name or path.
        field: String,
        /// The raw value, shortened to 64 bytes.
        value: String,
        /// What is wrong with it.
        why: String,
    },
}

impl EventError {
    /// The dead-letter reason for this error.
    pub fn reason(&self) -> Reason {
        match self {
            EventError::InvalidJson(_) | EventError::NotAnObject(_) => Reason::InvalidJson,
            EventError::Missing { .. } => Reason::MissingField,
            EventError::WrongType { .. }
            | EventError::EmptyEntityId { .. }
            | EventError::Coercion { .. } => Reason::InvalidField,
            EventError::BadTimestamp { .. } => Reason::BadTimestamp,
        }
    }
}

/// The configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid event config: `{field}` {problem}")]
pub struct EventConfigError {
    /// The offending config key.
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub problem: String,
}

/// One step of a field path with array indices.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A configured field: its full name and, if dotted, its path segments.
#[derive(Debug, Clone)]
pub(crate) struct FieldPath {
    pub(crate) name: String,
    parts: Vec<String>,
    /// The steps of a path with an array index (`items[0].id`). Such a path
    /// is read, not taken out: removing an element would renumber the rest.
    indexed: Option<Vec<Seg>>,
}

impl FieldPath {
    pub(crate) fn new(key: &'static str, name: &str) -> Result<FieldPath, EventConfigError> {
        let invalid = || EventConfigError {
            field: key,
            problem: format!(
                "is {name:?}: give a field name, a dotted path like `meta.id`, or a path with array indices like `items[0].id`"
            ),
        };
        let parts: Vec<String> = name.split('.').map(str::to_owned).collect();
        if name.is_empty() || (parts.len() > 1 && parts.iter().any(String::is_empty)) {
            return Err(invalid());
        }
        if !name.contains('[') {
            return Ok(FieldPath {
                name: name.to_owned(),
                parts,
                indexed: None,
            });
        }
        let mut segs = Vec::new();
        for part in &parts {
            let (key_part, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
            if key_part.is_empty() || key_part.contains(']') {
                return Err(invalid());
            }
            segs.push(Seg::Key(key_part.to_owned()));
            while !rest.is_empty() {
                let (index, after) = rest
                    .strip_prefix('[')
                    .and_then(|r| r.split_once(']'))
                    .ok_or_else(invalid)?;
                if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(invalid());
                }
                segs.push(Seg::Index(index.parse().map_err(|_| invalid())?));
                rest = after;
            }
        }
        Ok(FieldPath {
            name: name.to_owned(),
            parts,
            indexed: Some(segs),
        })
    }

    /// The top-level member a multi-step path goes through.
    fn first_step(&self) -> Option<&str> {
        match &self.indexed {
            Some(segs) => match segs.first() {
                Some(Seg::Key(k)) => Some(k),
                _ => None,
            },
            None if self.parts.len() > 1 => self.parts.first().map(String::as_str),
            None => None,
        }
    }
}

/// A JSON value kept as text, or an object opened up because a configured
/// field was taken out of it.
#[derive(Debug, Clone)]
pub(crate) enum Node<'a> {
    /// Untouched JSON text.
    Raw(&'a RawValue),
    /// An object, member by member, in record order.
    Object(Vec<(Name<'a>, Node<'a>)>),
}

/// A member name: borrowed from the record unless it had escapes (one
/// allocation less per payload field).
pub(crate) type Name<'a> = Cow<'a, str>;

/// A member name as read: borrowed where the text allows.
pub(crate) struct NameSeed<'a>(pub Name<'a>);

impl<'de> Deserialize<'de> for NameSeed<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NameSeed<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(NameSeed(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(NameSeed(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(NameSeed(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The JSON type of a raw value, from its first byte. JSON whitespace is
/// ASCII, so raw values are trimmed bytewise (`trim_ascii`), not by
/// `str::trim`'s Unicode scan: that cost ~1% of routing, once per member.
pub(crate) fn json_kind(raw: &RawValue) -> &'static str {
    match raw.get().trim_ascii_start().as_bytes().first() {
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

/// The kind of a top-level JSON document, for the not-an-object error.
fn document_kind(data: &[u8]) -> &'static str {
    match data.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

/// The record parse with the configured fields set aside as they are met,
/// so extraction need not search the members and shift them out after.
/// Names in the order entity, timestamp, event id; `None` is not set aside.
/// As with [`remove_member`], a repeated name's last value wins and the
/// earlier ones are dropped.
struct Split<'e>([Option<&'e str>; 3]);

/// What the parse set aside for one configured field.
#[derive(Clone, Copy)]
enum Slot<'a> {
    /// Set aside, and the record had it.
    Found(&'a RawValue),
    /// Set aside, and the record did not have it.
    Absent,
    /// Not set aside: look among the members.
    NotSplit,
}

type SplitObject<'a> = (Vec<(Name<'a>, Node<'a>)>, [Slot<'a>; 3]);

impl Split<'_> {
    /// The names to set aside. A name that begins another field's dotted
    /// path (`meta` when another field is `meta.id`) stays a member: that
    /// field's path may need to open it first, as it did before this parse.
    fn names(fields: [Option<&FieldPath>; 3], others: &[&FieldPath]) -> [Option<String>; 3] {
        fields.map(|f| {
            let f = f?;
            let prefix_of_other = fields
                .iter()
                .flatten()
                .chain(others)
                .any(|g| g.first_step() == Some(f.name.as_str()));
            (!prefix_of_other).then(|| f.name.clone())
        })
    }
}

impl<'de> DeserializeSeed<'de> for Split<'_> {
    type Value = SplitObject<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct V<'e>([Option<&'e str>; 3]);
        impl<'de> Visitor<'de> for V<'_> {
            type Value = SplitObject<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                let mut slots = self.0.map(|n| {
                    if n.is_some() {
                        Slot::Absent
                    } else {
                        Slot::NotSplit
                    }
                });
                while let Some(k) = map.next_key::<NameSeed<'de>>()? {
                    let v: &'de RawValue = map.next_value()?;
                    match self.0.iter().position(|n| *n == Some(k.0.as_ref())) {
                        Some(i) => slots[i] = Slot::Found(v),
                        None => members.push((k.0, Node::Raw(v))),
                    }
                }
                Ok((members, slots))
            }
        }
        d.deserialize_map(V(self.0))
    }
}

pub(crate) fn open_object(raw: &RawValue) -> Result<Vec<(Name<'_>, Node<'_>)>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let (members, _) = Split([None; 3]).deserialize(&mut de)?;
    de.end()?;
    Ok(members)
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
        let split = Split::names(
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
    pub fn extract_inner(
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

/// Removes and returns the value at `path`; `Ok(None)` when absent.
/// `slot` is what the parse set aside for the field: `Some` if the record
/// had it (then it is not among `members`).
fn take<'a>(
    members: &mut Vec<(Name<'a>, Node<'a>)>,
    slot: Slot<'a>,
    path: &FieldPath,
) -> Result<Option<Node<'a>>, EventError> {
    // A literal top-level key wins over the dotted interpretation.
    match slot {
        Slot::Found(raw) => return Ok(Some(Node::Raw(raw))),
        Slot::Absent => {}
        Slot::NotSplit => {
            if let Some(found) = remove_member(members, &path.name) {
                return Ok(Some(found));
            }
        }
    }
    if let Some(segs) = &path.indexed {
        return read_path(members, segs);
    }
    if path.parts.len() < 2 {
        return Ok(None);
    }
    take_path(members, &path.parts)
}

/// The value at a path with array indices, read without changing the
/// payload; `Ok(None)` when absent.
fn read_path<'a>(
    members: &[(Name<'a>, Node<'a>)],
    segs: &[Seg],
) -> Result<Option<Node<'a>>, EventError> {
    let find = |members: &[(Name<'a>, Node<'a>)], key: &str| {
        members
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let Some((Seg::Key(first), rest)) = segs.split_first() else {
        return Ok(None);
    };
    let Some(mut node) = find(members, first) else {
        return Ok(None);
    };
    let invalid = |e: serde_json::Error| EventError::InvalidJson(e.to_string());
    for seg in rest {
        let next = match (seg, &node) {
            (Seg::Key(k), Node::Object(inner)) => find(inner, k),
            (Seg::Key(k), Node::Raw(raw)) if json_kind(raw) == "object" => {
                let raw: &'a RawValue = raw;
                find(&open_object(raw).map_err(invalid)?, k)
            }
            (Seg::Index(i), Node::Raw(raw)) if json_kind(raw) == "array" => {
                let raw: &'a RawValue = raw;
                let elems: Vec<&'a RawValue> = serde_json::from_str(raw.get()).map_err(invalid)?;
                elems.get(*i).map(|e| Node::Raw(e))
            }
            _ => None,
        };
        match next {
            Some(n) => node = n,
            None => return Ok(None),
        }
    }
    Ok(Some(node))
}

fn take_path<'a>(
    members: &mut Vec<(Name<'a>, Node<'a>)>,
    parts: &[String],
) -> Result<Option<Node<'a>>, EventError> {
    let Some((first, rest)) = parts.split_first() else {
        return Ok(None);
    };
    if rest.is_empty() {
        return Ok(remove_member(members, first));
    }
    let Some(idx) = members.iter().rposition(|(k, _)| k == first) else {
        return Ok(None);
    };
    let node = &mut members[idx].1;
    if let Node::Raw(raw) = node {
        if json_kind(raw) != "object" {
            return Ok(None);
        }
        let opened = open_object(raw).map_err(|e| EventError::InvalidJson(e.to_string()))?;
        *node = Node::Object(opened);
    }
    match node {
        Node::Object(inner) => take_path(inner, rest),
        Node::Raw(_) => Ok(None),
    }
}

/// Removes a member; with duplicate keys the last one counts (as in
/// serde_json's own maps) and the earlier ones are dropped with it.
fn remove_member<'a>(members: &mut Vec<(Name<'a>, Node<'a>)>, name: &str) -> Option<Node<'a>> {
    let idx = members.iter().rposition(|(k, _)| k == name)?;
    let (_, node) = members.remove(idx);
    // Earlier copies are rare: look for them only before `idx`, so the
    // usual case is one pass over the members.
    if members[..idx].iter().any(|(k, _)| k == name) {
        members.retain(|(k, _)| k != name);
    }
    Some(node)
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

/// A JSON string's contents: borrowed from the record when it has no
/// escapes (the usual id or timestamp), decoded otherwise.
pub(crate) fn string_text(raw: &RawValue) -> Result<Cow<'_, str>, serde_json::Error> {
    let text = raw.get().trim_ascii();
    // The parser already checked the string, so quotes and no backslash mean
    // its contents are the text between them.
    match text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|inner| !inner.contains('\\'))
    {
        Some(inner) => Ok(Cow::Borrowed(inner)),
        None => serde_json::from_str::<String>(text).map(Cow::Owned),
    }
}

pub(crate) fn node_to_value(node: &Node<'_>) -> Result<Value, EventError> {
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

fn bad_ts(field: &str, value: &str, why: impl Into<String>) -> EventError {
    let mut v = value.to_owned();
    if v.len() > 64 {
        let mut cut = 64;
        while !v.is_char_boundary(cut) {
            cut -= 1;
        }
        v.truncate(cut);
    }
    EventError::BadTimestamp {
        field: field.to_owned(),
        value: v,
        why: why.into(),
    }
}

/// The timestamp in epoch milliseconds, and its text if that is already the
/// canonical rendering.
fn parse_timestamp<'a>(
    node: &Node<'a>,
    field: &str,
    time: &TimeParser,
) -> Result<(i64, Option<&'a str>), EventError> {
    let format = &time.format;
    let Node::Raw(raw) = node else {
        return Err(EventError::WrongType {
            field: field.to_owned(),
            expected: "a timestamp string or number",
            found: "object",
        });
    };
    let raw: &'a RawValue = raw;
    let kind = json_kind(raw);
    let (text, is_string) = match kind {
        "string" => (
            string_text(raw).map_err(|e| bad_ts(field, raw.get(), e.to_string()))?,
            true,
        ),
        "number" => (Cow::Borrowed(raw.get().trim_ascii()), false),
        found => {
            return Err(EventError::WrongType {
                field: field.to_owned(),
                expected: "a timestamp string or number",
                found,
            });
        }
    };
    let canonical = match &text {
        Cow::Borrowed(t)
            if is_string && matches!(format, TimestampFormat::Rfc3339 | TimestampFormat::Auto) =>
        {
            timefmt::parse_canonical(t).map(|ms| (ms, *t))
        }
        _ => None,
    };
    if let Some((ms, t)) = canonical {
        // Parsed to the same instant chrono would give (see the proptests
        // in timefmt); only the range check is left.
        if timefmt::in_range(ms) {
            return Ok((ms, Some(t)));
        }
    }
    let looks_numeric = text
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || b == b'-' || b == b'+')
        && !text.contains(':');
    let ms = match format {
        TimestampFormat::Rfc3339 => {
            if !is_string {
                return Err(EventError::WrongType {
                    field: field.to_owned(),
                    expected: "an RFC 3339 string",
                    found: "number",
                });
            }
            parse_rfc3339(&text).map_err(|why| bad_ts(field, &text, why))?
        }
        TimestampFormat::Auto if is_string && !looks_numeric => parse_rfc3339(&text)
            .or_else(|why| match time.parse_local_iso(&text) {
                Some(local) => local.map(i128::from),
                None => Err(why),
            })
            .map_err(|why| bad_ts(field, &text, why))?,
        TimestampFormat::Auto => {
            let whole = scaled_floor(&text, 0).map_err(|why| bad_ts(field, &text, why))?;
            // Seconds below 1e11, then millis, micros, nanos: see `Auto`.
            let exp = match whole.unsigned_abs() {
                0..100_000_000_000 => 3,
                100_000_000_000..100_000_000_000_000 => 0,
                100_000_000_000_000..100_000_000_000_000_000 => -3,
                _ => -6,
            };
            scaled_floor(&text, exp).map_err(|why| bad_ts(field, &text, why))?
        }
        TimestampFormat::EpochSeconds => {
            scaled_floor(&text, 3).map_err(|why| bad_ts(field, &text, why))?
        }
        TimestampFormat::EpochMillis => {
            scaled_floor(&text, 0).map_err(|why| bad_ts(field, &text, why))?
        }
        TimestampFormat::EpochMicros => {
            scaled_floor(&text, -3).map_err(|why| bad_ts(field, &text, why))?
        }
        TimestampFormat::EpochNanos => {
            scaled_floor(&text, -6).map_err(|why| bad_ts(field, &text, why))?
        }
        TimestampFormat::Pattern(p) => time
            .parse_pattern(&text, p)
            .map(i128::from)
            .map_err(|why| bad_ts(field, &text, why))?,
    };
    let ms = i64::try_from(ms).map_err(|_| bad_ts(field, &text, "out of range"))?;
    if !timefmt::in_range(ms) {
        return Err(bad_ts(
            field,
            &text,
            "outside the accepted range 1900-01-01 to 9999-01-01",
        ));
    }
    Ok((ms, None))
}

fn parse_rfc3339(text: &str) -> Result<i128, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| i128::from(t.timestamp_millis()))
        .map_err(|e| format!("not RFC 3339 with a UTC offset ({e})"))
}

/// `floor(value * 10^exp)` of a decimal number's text, computed exactly (no
/// float rounding, so `1700000000.123` seconds is exactly ...123 ms).
fn scaled_floor(text: &str, exp: i32) -> Result<i128, String> {
    let not_number = || "not a decimal number".to_owned();
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (
            &body[..i],
            body[i + 1..].parse::<i32>().map_err(|_| not_number())?,
        ),
        None => (body, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int_part.is_empty() && frac_part.is_empty())
        || !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return Err(not_number());
    }
    // value = digits * 10^(exponent - frac_len)
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    let frac_len = i32::try_from(frac_part.len()).map_err(|_| not_number())?;
    let mut e = exponent
        .checked_sub(frac_len)
        .and_then(|v| v.checked_add(exp))
        .ok_or("exponent out of range")?;
    if digits.is_empty() {
        return Ok(0);
    }
    // Only digits that survive the scaling matter; dropping the rest early
    // keeps the arithmetic inside i128 for any realistic precision.
    let keep = if e < 0 {
        let drop = usize::try_from(-i64::from(e)).unwrap_or(usize::MAX);
        if drop >= digits.len() {
            // |value| < 1 after scaling: floor is 0, or -1 for negatives.
            return Ok(if negative { -1 } else { 0 });
        }
        let cut = digits.len() - drop;
        let remainder_nonzero = digits[cut..].bytes().any(|b| b != b'0');
        e = 0;
        (&digits[..cut], remainder_nonzero)
    } else {
        (digits, false)
    };
    let (kept, remainder_nonzero) = keep;
    if kept.len() > 36 {
        return Err("out of range".to_owned());
    }
    let mut v: i128 = kept.parse().map_err(|_| not_number())?;
    for _ in 0..e {
        v = v.checked_mul(10).ok_or("out of range")?;
    }
    if negative {
        v = -v;
        if remainder_nonzero {
            v -= 1;
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn scaled_floor_is_exact() {
        assert_eq!(scaled_floor("0.001", 3).unwrap(), 1);
        assert_eq!(scaled_floor("0.0009", 3).unwrap(), 0);
        assert_eq!(scaled_floor("-0.0009", 3).unwrap(), -1);
        assert_eq!(
            scaled_floor("1700000000.123", 3).unwrap(),
            1_700_000_000_123
        );
        assert_eq!(scaled_floor("17E2", 0).unwrap(), 1_700);
        assert_eq!(scaled_floor("000", 0).unwrap(), 0);
        assert!(scaled_floor("1.2.3", 0).is_err());
        assert!(scaled_floor(".", 0).is_err());
    }
}
