//! The `[event]` table: which record fields are the event's identity and
//! time, and the mapping of the rest.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::mapping::{ClashPolicy, FieldType, TimestampFormat};

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
    /// `entity_field` (setting both is refused). Each part is a string or number and
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
    pub(crate) fn entity_label(&self) -> String {
        if self.entity_fields.is_empty() {
            self.entity_field.clone()
        } else {
            self.entity_fields.join("+")
        }
    }
}

pub(super) fn default_entity_field() -> String {
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
