//! The declarative event mapping beyond the identity fields: time formats
//! and zones, which payload fields are kept and under what name, type
//! coercion, and what happens to payload fields named like Tidemark's own
//! attributes. Everything here is compiled once, when the
//! [`crate::Extractor`] is built, and every setting that cannot work is
//! refused then, naming its key.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::error::EventConfigError;
use crate::raw::{Node, json_kind, string_text};

/// How the timestamp field is written. In TOML a string: one of the names
/// below, or a strftime pattern (anything containing `%`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TimestampFormat {
    /// `auto`: RFC 3339 strings; numbers (or numeric strings) are epoch
    /// seconds below 1e11, milliseconds below 1e14, microseconds below 1e17,
    /// nanoseconds above. Each boundary is the year 5138 in the coarser unit
    /// and 1973 in the finer one, so the guess is only wrong for fine-grained
    /// timestamps before 1973. With `timezone` set, zone-less
    /// `YYYY-MM-DD HH:MM:SS[.fff]` (or with `T`) is read in that zone.
    #[default]
    Auto,
    /// `rfc3339`: RFC 3339 / ISO 8601 with an offset (`Z` or `+hh:mm`).
    Rfc3339,
    /// `epoch_seconds`: seconds since the Unix epoch, integer or decimal.
    EpochSeconds,
    /// `epoch_millis`: milliseconds since the Unix epoch.
    EpochMillis,
    /// `epoch_micros`: microseconds since the Unix epoch.
    EpochMicros,
    /// `epoch_nanos`: nanoseconds since the Unix epoch.
    EpochNanos,
    /// A chrono strftime pattern, e.g. `%Y-%m-%d %H:%M:%S`. Without an
    /// offset item (`%z`, `%:z`) the time is read in `timezone` (UTC when
    /// unset).
    Pattern(String),
}

impl TimestampFormat {
    /// The configuration spelling.
    pub fn as_str(&self) -> &str {
        match self {
            TimestampFormat::Auto => "auto",
            TimestampFormat::Rfc3339 => "rfc3339",
            TimestampFormat::EpochSeconds => "epoch_seconds",
            TimestampFormat::EpochMillis => "epoch_millis",
            TimestampFormat::EpochMicros => "epoch_micros",
            TimestampFormat::EpochNanos => "epoch_nanos",
            TimestampFormat::Pattern(p) => p,
        }
    }
}

impl FromStr for TimestampFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "auto" => TimestampFormat::Auto,
            "rfc3339" => TimestampFormat::Rfc3339,
            "epoch_seconds" => TimestampFormat::EpochSeconds,
            "epoch_millis" => TimestampFormat::EpochMillis,
            "epoch_micros" => TimestampFormat::EpochMicros,
            "epoch_nanos" => TimestampFormat::EpochNanos,
            p if p.contains('%') => TimestampFormat::Pattern(p.to_owned()),
            other => {
                return Err(format!(
                    "unknown timestamp format {other:?}: use auto, rfc3339, epoch_seconds, \
                     epoch_millis, epoch_micros, epoch_nanos or a strftime pattern such as \
                     \"%Y-%m-%d %H:%M:%S\""
                ));
            }
        })
    }
}

impl Serialize for TimestampFormat {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TimestampFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for TimestampFormat {
    fn schema_name() -> Cow<'static, str> {
        "TimestampFormat".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "`auto`, `rfc3339`, `epoch_seconds`, `epoch_millis`, `epoch_micros`, `epoch_nanos`, or a strftime pattern (any text with `%`), e.g. `%Y-%m-%d %H:%M:%S`.",
            "anyOf": [
                {"enum": ["auto", "rfc3339", "epoch_seconds", "epoch_millis", "epoch_micros", "epoch_nanos"]},
                {"pattern": "%"}
            ],
            "examples": ["auto", "epoch_micros", "%Y-%m-%d %H:%M:%S"]
        })
    }
}

/// The type a payload field is coerced to (`[event] types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    /// A number: numbers stay as written; strings holding a JSON number
    /// (`"12"`, `"-1.5e3"`) become that number with every digit kept.
    Number,
    /// A string: numbers and booleans become their JSON text.
    String,
    /// A boolean: `true`/`false`, the strings `"true"`/`"false"` (any case),
    /// and the numbers or strings `1`/`0`.
    Bool,
}

/// What happens to a payload field named like one of the attributes every
/// item carries (key attributes, entity, event id, timestamps, TTL).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ClashPolicy {
    /// Store the field as `clash_prefix` + its name (repeated until the
    /// name is free).
    #[default]
    Prefix,
    /// Dead-letter the event (`invalid_field`).
    Refuse,
}

/// A time zone for zone-less times: an IANA name or a fixed offset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Zone {
    Fixed(FixedOffset),
    Named(chrono_tz::Tz),
}

impl Zone {
    pub(crate) fn parse(text: &str) -> Result<Zone, String> {
        if matches!(text, "UTC" | "Z" | "utc") {
            return Ok(Zone::Fixed(utc_offset()));
        }
        if text.starts_with(['+', '-']) {
            return parse_offset(text)
                .map(Zone::Fixed)
                .ok_or_else(|| format!("is {text:?}: write a fixed offset as +hh:mm or -hhmm"));
        }
        chrono_tz::Tz::from_str(text).map(Zone::Named).map_err(|_| {
            format!("is {text:?}: give an IANA zone name such as \"Europe/Paris\", or an offset such as \"+01:00\"")
        })
    }

    /// The instant of a local time; the earlier one when the clock is set
    /// back (a time that happens twice), an error in a gap.
    pub(crate) fn resolve(&self, naive: NaiveDateTime) -> Result<i64, String> {
        let found = match self {
            Zone::Fixed(o) => o
                .from_local_datetime(&naive)
                .earliest()
                .map(|t| t.timestamp_millis()),
            Zone::Named(tz) => tz
                .from_local_datetime(&naive)
                .earliest()
                .map(|t| t.timestamp_millis()),
        };
        found.ok_or_else(|| format!("does not exist in time zone {self} (a daylight-saving gap)"))
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Zone::Fixed(o) => write!(f, "{o}"),
            Zone::Named(tz) => f.write_str(tz.name()),
        }
    }
}

fn utc_offset() -> FixedOffset {
    chrono::Offset::fix(&Utc)
}

fn parse_offset(text: &str) -> Option<FixedOffset> {
    let (sign, rest) = text.split_at(1);
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let h: i32 = digits[..2].parse().ok()?;
    let m: i32 = digits[2..].parse().ok()?;
    if h > 23 || m > 59 {
        return None;
    }
    let secs = (h * 3600 + m * 60) * if sign == "-" { -1 } else { 1 };
    FixedOffset::east_opt(secs)
}

/// The timestamp format and zone, checked and ready.
#[derive(Debug, Clone)]
pub(crate) struct TimeParser {
    pub(crate) format: TimestampFormat,
    pub(crate) zone: Option<Zone>,
    /// The pattern reads an offset itself (`%z` and kin).
    pattern_has_offset: bool,
}

/// The zone-less ISO shapes `auto` reads when a zone is configured.
const LOCAL_ISO: [&str; 2] = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"];

impl TimeParser {
    pub(crate) fn new(
        format: TimestampFormat,
        timezone: Option<&str>,
    ) -> Result<TimeParser, EventConfigError> {
        let zone = timezone
            .map(|t| {
                Zone::parse(t).map_err(|problem| EventConfigError {
                    field: "timezone",
                    problem,
                })
            })
            .transpose()?;
        let mut pattern_has_offset = false;
        match &format {
            TimestampFormat::Pattern(p) => {
                check_pattern(p)?;
                pattern_has_offset = ["%z", "%:z", "%::z", "%:::z", "%#z", "%+"]
                    .iter()
                    .any(|item| p.contains(item));
                if pattern_has_offset && zone.is_some() {
                    return Err(EventConfigError {
                        field: "timezone",
                        problem: format!(
                            "is set but the timestamp_format {p:?} reads an offset itself: remove one of them"
                        ),
                    });
                }
            }
            TimestampFormat::Auto => {}
            other if zone.is_some() => {
                return Err(EventConfigError {
                    field: "timezone",
                    problem: format!(
                        "has no effect with timestamp_format {:?} (its times carry their zone): \
                         use it with auto or a strftime pattern",
                        other.as_str()
                    ),
                });
            }
            _ => {}
        }
        Ok(TimeParser {
            format,
            zone,
            pattern_has_offset,
        })
    }

    /// A pattern-formatted time, in epoch milliseconds.
    pub(crate) fn parse_pattern(&self, text: &str, pattern: &str) -> Result<i64, String> {
        if self.pattern_has_offset {
            return DateTime::parse_from_str(text, pattern)
                .map(|t| t.timestamp_millis())
                .map_err(|e| format!("does not match the pattern {pattern:?} ({e})"));
        }
        let naive = NaiveDateTime::parse_from_str(text, pattern)
            .or_else(|e| {
                NaiveDate::parse_from_str(text, pattern)
                    .map(|d| d.and_time(NaiveTime::MIN))
                    .map_err(|_| e)
            })
            .map_err(|e| format!("does not match the pattern {pattern:?} ({e})"))?;
        self.zone_or_utc().resolve(naive)
    }

    /// A zone-less ISO time when `auto` has a zone; `None` without one or
    /// when the text is not such a time.
    pub(crate) fn parse_local_iso(&self, text: &str) -> Option<Result<i64, String>> {
        let zone = self.zone?;
        LOCAL_ISO
            .iter()
            .find_map(|p| NaiveDateTime::parse_from_str(text, p).ok())
            .map(|naive| zone.resolve(naive))
    }

    fn zone_or_utc(&self) -> Zone {
        self.zone.unwrap_or(Zone::Fixed(utc_offset()))
    }
}

/// Writes event times in a configured format: what `tidemark produce
/// --template` puts in generated events, so they read back through the
/// same `timestamp_format` and `timezone`.
#[derive(Debug, Clone)]
pub struct TimeWriter {
    format: TimestampFormat,
    zone: Option<Zone>,
}

impl TimeWriter {
    /// A writer of `format` (a [`TimestampFormat`] spelling) in `timezone`
    /// (for `auto`/`rfc3339`, the offset written; for a pattern, the zone of
    /// its local time). Errors say what is wrong.
    pub fn new(format: &str, timezone: Option<&str>) -> Result<TimeWriter, String> {
        let format: TimestampFormat = format.parse()?;
        if let TimestampFormat::Pattern(p) = &format {
            check_pattern(p).map_err(|e| e.problem)?;
        }
        let zone = timezone
            .map(|t| Zone::parse(t).map_err(|p| format!("time zone {p}")))
            .transpose()?;
        Ok(TimeWriter { format, zone })
    }

    /// The time `ms` (epoch milliseconds): a string, or a number for the
    /// epoch formats.
    pub fn write(&self, ms: i64) -> serde_json::Value {
        use serde_json::Value;
        let utc = DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default();
        let local = |f: &dyn Fn(DateTime<FixedOffset>) -> String| match self.zone {
            None => f(utc.fixed_offset()),
            Some(Zone::Fixed(o)) => f(utc.with_timezone(&o)),
            Some(Zone::Named(tz)) => f(utc.with_timezone(&tz).fixed_offset()),
        };
        match &self.format {
            TimestampFormat::Auto | TimestampFormat::Rfc3339 => match self.zone {
                None => Value::String(crate::timefmt::iso_millis(ms)),
                Some(_) => Value::String(local(&|t| {
                    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                })),
            },
            TimestampFormat::EpochSeconds => {
                if ms % 1000 == 0 {
                    Value::from(ms / 1000)
                } else {
                    serde_json::Number::from_f64(ms as f64 / 1000.0)
                        .map_or(Value::Null, Value::Number)
                }
            }
            TimestampFormat::EpochMillis => Value::from(ms),
            TimestampFormat::EpochMicros => Value::from(ms.saturating_mul(1_000)),
            TimestampFormat::EpochNanos => Value::from(ms.saturating_mul(1_000_000)),
            TimestampFormat::Pattern(p) => Value::String(local(&|t| t.format(p).to_string())),
        }
    }
}

/// A pattern must be valid strftime and able to read back what it writes.
fn check_pattern(p: &str) -> Result<(), EventConfigError> {
    use chrono::format::{Item, StrftimeItems};
    let bad = |problem: String| EventConfigError {
        field: "timestamp_format",
        problem,
    };
    if StrftimeItems::new(p).any(|i| matches!(i, Item::Error)) {
        return Err(bad(format!("is {p:?}, not a valid strftime pattern")));
    }
    if p.contains("%Z") {
        return Err(bad(format!(
            "is {p:?}: zone names (%Z) cannot be read; use %z for offsets or set `timezone`"
        )));
    }
    // Write a known instant with the pattern and read it back: a pattern
    // without a date (or otherwise unreadable) fails here, not per event.
    let sample = DateTime::<Utc>::from_timestamp(1_763_787_600, 123_456_789)
        .unwrap_or_default()
        .fixed_offset();
    let text = sample.format(p).to_string();
    let parser = TimeParser {
        format: TimestampFormat::Pattern(p.to_owned()),
        zone: None,
        pattern_has_offset: ["%z", "%:z", "%::z", "%:::z", "%#z", "%+"]
            .iter()
            .any(|item| p.contains(item)),
    };
    parser.parse_pattern(&text, p).map_err(|why| {
        bad(format!(
            "is {p:?}, which cannot read back its own output {text:?} ({why}); a pattern needs at least a full date"
        ))
    })?;
    Ok(())
}

/// What the mapping does with one payload field (by its final name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    /// Kept in the item.
    pub(crate) keep: bool,
    /// Coerced to this type.
    pub(crate) ty: Option<FieldType>,
}

/// Include, exclude and types, compiled into one lookup per payload field.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    by_name: HashMap<Box<str>, Rule, foldhash::fast::FixedState>,
    /// For names not listed: kept unless `include` is set.
    default: Rule,
}

impl Rules {
    /// `None` when nothing is filtered or coerced (the fast path).
    pub(crate) fn new(
        include: Option<&[String]>,
        exclude: &[String],
        types: &std::collections::BTreeMap<String, FieldType>,
        renamed_to: &[&str],
    ) -> Result<Option<Rules>, EventConfigError> {
        if include.is_none() && exclude.is_empty() && types.is_empty() {
            return Ok(None);
        }
        let err = |field, problem| Err(EventConfigError { field, problem });
        let mut by_name: HashMap<Box<str>, Rule, _> = HashMap::default();
        let default = Rule {
            keep: include.is_none(),
            ty: None,
        };
        for name in include.unwrap_or_default() {
            if name.is_empty() {
                return err("include", "lists an empty name".into());
            }
            by_name.insert(
                name.as_str().into(),
                Rule {
                    keep: true,
                    ty: None,
                },
            );
        }
        for name in exclude {
            if name.is_empty() {
                return err("exclude", "lists an empty name".into());
            }
            if include.is_some_and(|i| i.contains(name)) {
                return err(
                    "exclude",
                    format!("lists {name:?}, which `include` also lists: keep it in one of them"),
                );
            }
            by_name.insert(
                name.as_str().into(),
                Rule {
                    keep: false,
                    ty: None,
                },
            );
        }
        for target in renamed_to {
            let kept = by_name.get(*target).map_or(default.keep, |r| r.keep);
            if !kept {
                return err(
                    "rename",
                    format!(
                        "renames a field to {target:?}, which `include`/`exclude` then drop: \
                         list {target:?} in `include` (names there are the renamed ones)"
                    ),
                );
            }
        }
        for (name, ty) in types {
            let rule = by_name.entry(name.as_str().into()).or_insert(default);
            if !rule.keep {
                return err(
                    "types",
                    format!(
                        "coerces {name:?}, which `include`/`exclude` drop: the type would never apply"
                    ),
                );
            }
            rule.ty = Some(*ty);
        }
        Ok(Some(Rules { by_name, default }))
    }

    pub(crate) fn get(&self, name: &str) -> Rule {
        self.by_name.get(name).copied().unwrap_or(self.default)
    }
}

/// A coerced value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Coerced<'a> {
    /// The value as it was (already of the type).
    Same,
    /// A number, as its exact JSON text.
    Number(Cow<'a, str>),
    /// A string.
    Str(Cow<'a, str>),
    /// A boolean.
    Bool(bool),
}

/// Coerces `node` to `ty`, or says why it cannot be.
pub(crate) fn coerce<'a>(node: &Node<'a>, ty: FieldType) -> Result<Coerced<'a>, String> {
    let Node::Raw(raw) = node else {
        return Err(format!(
            "is an object, which cannot become a {}",
            ty_name(ty)
        ));
    };
    let raw: &'a RawValue = raw;
    let text = raw.get().trim_ascii();
    let kind = json_kind(raw);
    match (ty, kind) {
        (FieldType::Number, "number")
        | (FieldType::String, "string")
        | (FieldType::Bool, "boolean") => Ok(Coerced::Same),
        (FieldType::Number, "string") => {
            let s = unquote(raw)?;
            let t = s.trim();
            if is_json_number(t) {
                Ok(Coerced::Number(match s {
                    Cow::Borrowed(b) => Cow::Borrowed(b.trim()),
                    Cow::Owned(o) => Cow::Owned(o.trim().to_owned()),
                }))
            } else {
                Err(format!("is {}, not a number", shorten(text)))
            }
        }
        (FieldType::String, "number" | "boolean") => Ok(Coerced::Str(Cow::Borrowed(text))),
        (FieldType::Bool, "number") => match text {
            "1" => Ok(Coerced::Bool(true)),
            "0" => Ok(Coerced::Bool(false)),
            _ => Err(format!("is {text}, not 0 or 1")),
        },
        (FieldType::Bool, "string") => {
            let s = unquote(raw)?;
            match s.to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(Coerced::Bool(true)),
                "false" | "0" => Ok(Coerced::Bool(false)),
                _ => Err(format!("is {}, not a boolean", shorten(text))),
            }
        }
        (ty, kind) => Err(format!(
            "is a JSON {kind}, which cannot become a {}",
            ty_name(ty)
        )),
    }
}

fn ty_name(ty: FieldType) -> &'static str {
    match ty {
        FieldType::Number => "number",
        FieldType::String => "string",
        FieldType::Bool => "boolean",
    }
}

fn shorten(text: &str) -> &str {
    let mut cut = text.len().min(64);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

fn unquote(raw: &RawValue) -> Result<Cow<'_, str>, String> {
    string_text(raw).map_err(|e| e.to_string())
}

/// JSON's number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
pub(crate) fn is_json_number(t: &str) -> bool {
    let b = t.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.first() == Some(&b'-') {
        i += 1;
    }
    let int_start = i;
    let n = digits(&mut i);
    if n == 0 || (n > 1 && b[int_start] == b'0') {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_by_name_or_as_patterns() {
        for name in [
            "auto",
            "rfc3339",
            "epoch_seconds",
            "epoch_millis",
            "epoch_micros",
            "epoch_nanos",
        ] {
            let f: TimestampFormat = name.parse().unwrap();
            assert_eq!(f.as_str(), name);
        }
        assert_eq!(
            "%Y-%m-%d".parse::<TimestampFormat>().unwrap(),
            TimestampFormat::Pattern("%Y-%m-%d".into())
        );
        assert!("epoch_minutes".parse::<TimestampFormat>().is_err());
    }

    #[test]
    fn zones_by_name_and_offset() {
        assert_eq!(
            Zone::parse("Europe/Paris").unwrap().to_string(),
            "Europe/Paris"
        );
        assert_eq!(Zone::parse("+05:30").unwrap().to_string(), "+05:30");
        assert_eq!(Zone::parse("-0800").unwrap().to_string(), "-08:00");
        assert!(Zone::parse("Mars/Olympus").is_err());
        assert!(Zone::parse("+25:00").is_err());
        let paris = Zone::parse("Europe/Paris").unwrap();
        let at = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap();
        // Winter: UTC+1.
        assert_eq!(
            paris.resolve(at("2025-11-22 05:00:00")).unwrap(),
            1_763_784_000_000
        );
        // 2025-03-30 02:30 does not exist in Paris; 2025-10-26 02:30 happens twice.
        assert!(paris.resolve(at("2025-03-30 02:30:00")).is_err());
        assert_eq!(
            paris.resolve(at("2025-10-26 02:30:00")).unwrap(),
            DateTime::parse_from_rfc3339("2025-10-26T02:30:00+02:00")
                .unwrap()
                .timestamp_millis()
        );
    }

    #[test]
    fn patterns_are_checked_at_start() {
        let p = |s: &str, tz: Option<&str>| TimeParser::new(TimestampFormat::Pattern(s.into()), tz);
        assert!(p("%Y-%m-%d %H:%M:%S", Some("Europe/Paris")).is_ok());
        assert!(p("%Y-%m-%d", None).is_ok());
        assert!(p("%d/%m/%Y %H:%M:%S%.f %z", None).is_ok());
        for (bad, key) in [
            (p("%H:%M", None), "timestamp_format"),
            (p("%Y-%m-%d %Q", None), "timestamp_format"),
            (p("%Y-%m-%d %H:%M:%S %Z", None), "timestamp_format"),
            (p("%Y-%m-%dT%H:%M:%S%z", Some("UTC")), "timezone"),
            (
                TimeParser::new(TimestampFormat::EpochMillis, Some("UTC")),
                "timezone",
            ),
            (
                TimeParser::new(TimestampFormat::Auto, Some("Nowhere/Else")),
                "timezone",
            ),
        ] {
            assert_eq!(bad.unwrap_err().field, key);
        }
    }

    /// What the writer writes, the parser reads back to the same instant.
    #[test]
    fn written_times_read_back() {
        let ms = 1_763_787_600_123;
        for (format, zone) in [
            ("auto", None),
            ("rfc3339", Some("Europe/Paris")),
            ("epoch_millis", None),
            ("epoch_micros", None),
            ("epoch_nanos", None),
            ("%Y-%m-%d %H:%M:%S%.3f", Some("America/New_York")),
            ("%d/%m/%Y %H:%M:%S%.3f %z", None),
        ] {
            let w = TimeWriter::new(format, zone).unwrap();
            let value = w.write(ms);
            let text = match &value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let f: TimestampFormat = format.parse().unwrap();
            let zone = zone.filter(|_| matches!(f, TimestampFormat::Pattern(_)));
            let parser = TimeParser::new(f.clone(), zone).unwrap();
            let back = match &f {
                TimestampFormat::Pattern(p) => parser.parse_pattern(&text, p).unwrap(),
                TimestampFormat::EpochMicros => text.parse::<i64>().unwrap() / 1_000,
                TimestampFormat::EpochNanos => text.parse::<i64>().unwrap() / 1_000_000,
                TimestampFormat::EpochMillis => text.parse().unwrap(),
                _ => DateTime::parse_from_rfc3339(&text)
                    .unwrap()
                    .timestamp_millis(),
            };
            assert_eq!(back, ms, "{format} {value}");
        }
        assert!(TimeWriter::new("%H", None).is_err());
        assert!(TimeWriter::new("auto", Some("Nowhere")).is_err());
    }

    #[test]
    fn json_number_grammar() {
        for ok in [
            "0",
            "-0",
            "12",
            "1.5",
            "-1.5e3",
            "1E+2",
            "123456789012345678901234567890",
        ] {
            assert!(is_json_number(ok), "{ok}");
        }
        for bad in ["", "-", "01", "1.", ".5", "1e", "+1", "0x10", "1 2", "NaN"] {
            assert!(!is_json_number(bad), "{bad}");
        }
    }
}
