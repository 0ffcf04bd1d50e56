//! Message body to events: what SQS adds around a record is taken off
//! here, and the rest is split by the source's `record_format` with
//! `tidemark_schema::framing::frame`, as every source's records are (the
//! default, `json_or_array`: one event or a JSON array of events).
//!
//! Around the record:
//! - an SNS notification envelope (a subscription without raw message
//!   delivery): its `Message` is the record (envelopes do not nest);
//! - base64-encoded gzip, in a body or an SNS `Message`: decompressed first.
//!   SQS bodies are text, so binary gzip cannot travel in them, and base64
//!   text of a gzip stream always starts with `H4sI`, which no JSON text
//!   does.
//!
//! Pure; events keep the producer's exact bytes (elements and lines are
//! sliced, never re-serialized, so numbers keep their digits), and the same
//! body always gives the same events in the same order, so ids derived from
//! their positions are stable.

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use tidemark_schema::Reason;
use tidemark_schema::framing::{self, Shape};

pub use tidemark_schema::framing::RecordFormat;

/// Base64 text of a gzip stream starts with this: the magic bytes `1f 8b`
/// and the deflate method `08`.
pub const BASE64_GZIP_PREFIX: &[u8] = b"H4sI";

/// Base64 as producers write it: padded or not (both are common).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The shape a body was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A JSON object: one event.
    Single,
    /// A JSON array: one event per element, in order.
    Array,
    /// NDJSON (`record_format = "ndjson"`): one event per line, in order.
    Lines,
    /// An SNS notification whose `Message` holds events in one of the
    /// other shapes.
    Sns,
}

impl Format {
    fn of(shape: Shape) -> Self {
        match shape {
            Shape::Single => Format::Single,
            Shape::Array => Format::Array,
            Shape::Lines => Format::Lines,
        }
    }

    /// The metric label.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Format::Single => "single",
            Format::Array => "array",
            Format::Lines => "ndjson",
            Format::Sns => "sns",
        }
    }
}

/// A decoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// How the body was recognised.
    pub format: Format,
    /// The events' JSON texts, in body order (empty for `[]` or a blank
    /// NDJSON body).
    pub events: Vec<Bytes>,
    /// The body or its SNS `Message` was base64-encoded gzip.
    pub compressed: bool,
}

/// Only the fields that tell an SNS envelope apart; the rest is skipped (but
/// still checked to be JSON). Raw values, so an event that happens to have a
/// non-string `Type` field is not mistaken for a broken envelope.
#[derive(Default)]
struct Probe<'a> {
    kind: Option<&'a RawValue>,
    topic_arn: Option<&'a RawValue>,
    message: Option<&'a RawValue>,
}

/// By hand rather than derived: a derived struct refuses duplicate keys,
/// which would dead-letter an event such as `{"Message":1,"Message":2}` as "not
/// valid JSON". JSON allows them and the router keeps the last one, so the
/// probe keeps the last one too.
impl<'de> Deserialize<'de> for Probe<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Probe<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut probe = Probe::default();
                // Keys as owned strings: an escaped key cannot be borrowed.
                while let Some((key, value)) = map.next_entry::<String, &'de RawValue>()? {
                    match key.as_str() {
                        "Type" => probe.kind = Some(value),
                        "TopicArn" => probe.topic_arn = Some(value),
                        "Message" => probe.message = Some(value),
                        _ => {}
                    }
                }
                Ok(probe)
            }
        }
        d.deserialize_map(V)
    }
}

/// A body that is none of the accepted shapes: given back whole, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// The raw body, for the dead-letter entry.
    pub body: String,
    /// What is wrong with it.
    pub reason: String,
    /// Its dead-letter reason: `too_many_events` for a body of more events
    /// than a record may hold, `undecodable_message` otherwise.
    pub kind: Reason,
}

/// Why a body is undecodable: its dead-letter reason and the text.
type Why = (Reason, String);

fn undecodable(text: String) -> Why {
    (Reason::UndecodableMessage, text)
}

fn framing_failed(e: framing::FramingError) -> Why {
    match e {
        framing::FramingError::TooManyEvents => (Reason::TooManyEvents, e.to_string()),
        e => undecodable(e.to_string()),
    }
}

/// Decodes a message body laid out as `format`, or hands it back with the
/// reason it is none of the accepted shapes.
pub fn decode(body: String, format: RecordFormat) -> Result<Decoded, Undecodable> {
    let raw = Bytes::from(body);
    unwrap_and_frame(&raw, format).map_err(|(kind, reason)| Undecodable {
        // The body came in as a String: its bytes are UTF-8.
        body: String::from_utf8(Vec::from(raw)).unwrap_or_default(),
        reason,
        kind,
    })
}

/// Takes off the base64 gzip and the SNS envelope around a body, then
/// frames what is inside.
fn unwrap_and_frame(body: &Bytes, format: RecordFormat) -> Result<Decoded, Why> {
    let (data, compressed) = inflate(body).map_err(undecodable)?;
    // A body that parses as one object is probed for an envelope, and then
    // known to be one object: the framing does not parse it again.
    let mut one_object = false;
    if first_byte(&data) == Some(b'{')
        && let Ok(probe) = serde_json::from_slice::<Probe<'_>>(&data)
    {
        if let Some(message) = sns_message(&probe).map_err(undecodable)? {
            let inner = frame_message(&Bytes::from(message), format)
                .map_err(|(kind, e)| (kind, format!("SNS Message: {e}")))?;
            return Ok(Decoded {
                format: Format::Sns,
                events: inner.events,
                compressed: compressed || inner.compressed,
            });
        }
        one_object = true;
    }
    let framed = framing::frame(format, &data, one_object).map_err(framing_failed)?;
    Ok(Decoded {
        format: Format::of(framed.shape),
        events: framed.events,
        compressed,
    })
}

/// An SNS `Message`'s events (envelopes do not nest).
fn frame_message(message: &Bytes, format: RecordFormat) -> Result<Decoded, Why> {
    let (data, compressed) = inflate(message).map_err(undecodable)?;
    let framed = framing::frame(format, &data, false).map_err(framing_failed)?;
    Ok(Decoded {
        format: Format::of(framed.shape),
        events: framed.events,
        compressed,
    })
}

/// `data` decompressed when it is base64-encoded gzip, and whether it was.
fn inflate(data: &Bytes) -> Result<(Bytes, bool), String> {
    let lead = data.iter().take_while(|b| b.is_ascii_whitespace()).count();
    if !data[lead..].starts_with(BASE64_GZIP_PREFIX) {
        return Ok((data.clone(), false));
    }
    // MIME-style encoders wrap lines: whitespace is not part of the data.
    let text: Vec<u8> = data
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let gz = BASE64.decode(&text).map_err(|e| {
        format!("body starts like base64-encoded gzip (H4sI) but is not base64: {e}")
    })?;
    let out = framing::gunzip_if_needed(&Bytes::from(gz))
        .map_err(|e| format!("base64-encoded gzip body: {e}"))?;
    Ok((out, true))
}

fn first_byte(data: &[u8]) -> Option<u8> {
    data.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// The inner message when `probe` is an SNS notification envelope.
fn sns_message(probe: &Probe<'_>) -> Result<Option<String>, String> {
    let (Some(kind), Some(_), Some(message)) = (probe.kind, probe.topic_arn, probe.message) else {
        return Ok(None);
    };
    if kind.get() != "\"Notification\"" {
        return Ok(None);
    }
    serde_json::from_str::<String>(message.get())
        .map(Some)
        .map_err(|_| "SNS envelope whose Message is not a string".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The default format (`json_or_array`, what `json` meant before one
    /// name meant one thing on every source), which the tests before
    /// `record_format` were written for.
    fn decode(body: String) -> Result<Decoded, Undecodable> {
        super::decode(body, RecordFormat::JsonOrArray)
    }

    fn gzip64(text: &str) -> String {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(text.as_bytes()).unwrap();
        base64::engine::general_purpose::STANDARD.encode(enc.finish().unwrap())
    }

    /// SNS's own layout of an envelope delivered to SQS: pretty-printed.
    fn sns_pretty(message: &str) -> String {
        serde_json::to_string_pretty(&serde_json::json!({
            "Type": "Notification",
            "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
            "TopicArn": "arn:aws:sns:us-east-1:000000000000:events",
            "Message": message,
        }))
        .unwrap()
    }

    fn texts(d: &Decoded) -> Vec<&str> {
        d.events
            .iter()
            .map(|b| std::str::from_utf8(b).unwrap())
            .collect()
    }

    fn sns(message: &str) -> String {
        serde_json::json!({
            "Type": "Notification",
            "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
            "TopicArn": "arn:aws:sns:us-east-1:000000000000:events",
            "Message": message,
            "Timestamp": "2026-11-22T05:00:00.000Z",
        })
        .to_string()
    }

    /// A base64 gzip body inflating to more events than a record may hold
    /// (a decompression bomb, also inside an SNS envelope) is refused whole,
    /// as one dead letter, instead of one event per line or element.
    #[test]
    fn a_body_of_too_many_events_is_refused_whole() {
        let lines = "{}\n".repeat(100_001);
        let elems = format!("[{}{{}}]", "{},".repeat(100_000));
        for (format, text) in [
            (RecordFormat::Ndjson, &lines),
            (RecordFormat::JsonOrArray, &elems),
        ] {
            for body in [gzip64(text), sns(&gzip64(text))] {
                let u = super::decode(body, format).unwrap_err();
                assert!(u.reason.contains("100000 events"), "{}", u.reason);
                assert_eq!(u.kind, Reason::TooManyEvents);
            }
        }
    }

    #[test]
    fn single_event_is_passed_through_byte_for_byte() {
        let body = r#" {"id":"a","ts":"2026-11-22T05:00:00Z","v":1.10}"#;
        let d = decode(body.to_string()).unwrap();
        assert_eq!(d.format, Format::Single);
        assert_eq!(texts(&d), vec![body]);
    }

    #[test]
    fn array_elements_keep_their_digits_and_order() {
        let d = decode(r#"[{"v":1.10}, {"v":123456789012345678901234567890},{"v":"x"}]"#.into())
            .unwrap();
        assert_eq!(d.format, Format::Array);
        assert_eq!(
            texts(&d),
            vec![
                r#"{"v":1.10}"#,
                r#"{"v":123456789012345678901234567890}"#,
                r#"{"v":"x"}"#
            ]
        );
        let empty = decode("[]".into()).unwrap();
        assert!(empty.events.is_empty());
    }

    #[test]
    fn sns_envelope_around_single_and_array() {
        let d = decode(sns(r#"{"id":"a","v":2.50}"#)).unwrap();
        assert_eq!(d.format, Format::Sns);
        assert_eq!(texts(&d), vec![r#"{"id":"a","v":2.50}"#]);
        let d = decode(sns(r#"[{"id":"a"},{"id":"b"}]"#)).unwrap();
        assert_eq!(d.format, Format::Sns);
        assert_eq!(texts(&d), vec![r#"{"id":"a"}"#, r#"{"id":"b"}"#]);
    }

    #[test]
    fn event_that_looks_partly_like_an_envelope_is_an_event() {
        // A numeric Type, or a Notification without TopicArn, is user data.
        for body in [
            r#"{"Type":5,"TopicArn":"x","Message":"{}"}"#,
            r#"{"Type":"Notification","Message":"hello"}"#,
            r#"{"Type":"Alarm","TopicArn":"t","Message":"{}"}"#,
        ] {
            let d = decode(body.to_string()).unwrap();
            assert_eq!(d.format, Format::Single, "{body}");
            assert_eq!(texts(&d), vec![body]);
        }
    }

    #[test]
    fn undecodable_bodies_say_why() {
        for (body, needle) in [
            ("not json", "not valid JSON"),
            ("{\"a\":", "not valid JSON"),
            ("[1,", "not valid JSON"),
            ("42", "not an object"),
            ("\"text\"", "not an object"),
            ("", "not valid JSON"),
        ] {
            let e = decode(body.to_string()).unwrap_err();
            assert_eq!(e.body, body, "the raw body comes back whole");
            assert!(e.reason.contains(needle), "{body:?}: {}", e.reason);
        }
        let envelope = sns("plain text alert");
        let e = decode(envelope.clone()).unwrap_err();
        assert_eq!(e.body, envelope, "the whole envelope is dead-lettered");
        assert!(e.reason.starts_with("SNS Message:"), "{}", e.reason);
        let e = decode(sns(r#"{"broken":"#)).unwrap_err();
        assert!(e.reason.contains("not valid JSON"), "{}", e.reason);
        let e = decode(r#"{"Type":"Notification","TopicArn":"t","Message":{"id":1}}"#.to_string())
            .unwrap_err();
        assert!(e.reason.contains("not a string"), "{}", e.reason);
    }

    #[test]
    fn duplicate_keys_are_json_and_the_last_one_counts() {
        // Found by fuzzing: the derived probe refused duplicate keys, so
        // this valid event was dead-lettered as "not valid JSON".
        let body = r#"{"Type":"Notification","Message":"a","Message":"b","deviceId":"d"}"#;
        let d = decode(body.to_string()).unwrap();
        assert_eq!(d.format, Format::Single);
        assert_eq!(texts(&d), vec![body]);
        // The last Type / Message decide, as in the router.
        let body = r#"{"Type":"Alarm","TopicArn":"t","Message":"x","Type":"Notification","Message":"{\"id\":1}"}"#;
        let d = decode(body.to_string()).unwrap();
        assert_eq!(d.format, Format::Sns);
        assert_eq!(texts(&d), vec![r#"{"id":1}"#]);
        let body = r#"{"Type":"Notification","TopicArn":"t","Type":"Alarm","Message":"x"}"#;
        assert_eq!(decode(body.to_string()).unwrap().format, Format::Single);
        // Escaped keys are the same keys.
        let body = r#"{"\u0054ype":"Notification","TopicArn":"t","Message":"[]"}"#;
        let d = decode(body.to_string()).unwrap();
        assert_eq!(d.format, Format::Sns);
        assert!(d.events.is_empty());
    }

    #[test]
    fn ndjson_bodies_split_by_line() {
        let nd = RecordFormat::Ndjson;
        let d = super::decode("{\"a\":1}\r\n\n {\"a\":2}\n{\"a\":3}\n".into(), nd).unwrap();
        assert_eq!(d.format, Format::Lines);
        assert_eq!(texts(&d), [r#"{"a":1}"#, r#"{"a":2}"#, r#"{"a":3}"#]);
        // A bad line is still its own event: the router dead-letters it alone.
        let d = super::decode("{\"a\":1}\n{\"a\":\n[1]\n".into(), nd).unwrap();
        assert_eq!(texts(&d), [r#"{"a":1}"#, r#"{"a":"#, "[1]"]);
        // One pretty-printed object is one event, not one per line.
        let pretty = "{\n  \"a\": 1,\n  \"b\": [1, 2]\n}";
        let d = super::decode(pretty.into(), nd).unwrap();
        assert_eq!((d.format, texts(&d)), (Format::Single, vec![pretty]));
        // SNS's pretty-printed envelope around NDJSON.
        let d = super::decode(sns_pretty("{\"a\":1}\n{\"a\":2}"), nd).unwrap();
        assert_eq!(d.format, Format::Sns);
        assert_eq!(texts(&d), [r#"{"a":1}"#, r#"{"a":2}"#]);
        assert!(super::decode(" \n\n".into(), nd).unwrap().events.is_empty());
    }

    #[test]
    fn json_array_bodies_must_be_arrays() {
        let arr = RecordFormat::JsonArray;
        let d = super::decode(r#" [{"a":1}, {"b":[2]}] "#.into(), arr).unwrap();
        assert_eq!(
            (d.format, texts(&d)),
            (Format::Array, vec![r#"{"a":1}"#, r#"{"b":[2]}"#])
        );
        let d = super::decode(sns(r#"[{"a":1},{"a":2}]"#), arr).unwrap();
        assert_eq!(
            (d.format, texts(&d)),
            (Format::Sns, vec![r#"{"a":1}"#, r#"{"a":2}"#])
        );
        for body in [
            r#"{"a":1}"#.to_string(),
            "42".into(),
            sns(r#"{"a":1}"#),
            "[1,".into(),
        ] {
            let e = super::decode(body.clone(), arr).unwrap_err();
            assert_eq!(e.body, body, "dead-lettered whole");
            assert!(
                e.reason.contains("json_array") || e.reason.contains("not valid JSON"),
                "{body}: {}",
                e.reason
            );
        }
    }

    #[test]
    fn base64_gzip_bodies_are_decompressed_in_every_format() {
        let nd = "{\"a\":1}\n{\"a\":2}";
        let d = super::decode(gzip64(nd), RecordFormat::Ndjson).unwrap();
        assert!(d.compressed);
        assert_eq!(
            (d.format, texts(&d)),
            (Format::Lines, vec![r#"{"a":1}"#, r#"{"a":2}"#])
        );
        let d = super::decode(gzip64(r#"[{"a":1},{"a":2}]"#), RecordFormat::JsonArray).unwrap();
        assert_eq!(texts(&d), [r#"{"a":1}"#, r#"{"a":2}"#]);
        let d = decode(gzip64(r#"{"a":1.10}"#)).unwrap();
        assert_eq!(
            (d.format, texts(&d)),
            (Format::Single, vec![r#"{"a":1.10}"#])
        );
        // Inside an SNS envelope, and base64 wrapped at 76 columns without
        // padding, as MIME encoders and some SDKs write it.
        let long: Vec<String> = (0..40).map(|i| format!("{{\"n\":{i}}}")).collect();
        let wrapped: String = gzip64(&long.join("\n"))
            .trim_end_matches('=')
            .as_bytes()
            .chunks(76)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join("\r\n");
        let d = super::decode(sns(&wrapped), RecordFormat::Ndjson).unwrap();
        assert_eq!((d.format, d.compressed), (Format::Sns, true));
        assert_eq!(texts(&d), long);
        // A plain body is not marked compressed.
        assert!(!decode(r#"{"a":1}"#.into()).unwrap().compressed);
    }

    #[test]
    fn broken_base64_gzip_is_refused_whole_with_why() {
        let mut truncated = gzip64(r#"{"a":1}"#);
        truncated.truncate(16);
        for (body, needle) in [
            ("H4sI!!not base64".to_string(), "not base64"),
            (truncated, "gzip"),
            (
                format!("H4sI{}", &gzip64("x")[4..]).replace('A', "B"),
                "gzip",
            ),
        ] {
            let e = super::decode(body.clone(), RecordFormat::Ndjson).unwrap_err();
            assert_eq!(e.body, body);
            assert!(e.reason.contains(needle), "{body}: {}", e.reason);
        }
        // A bomb: past 64 MiB inflated, refused rather than held in memory.
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&vec![b' '; (framing::MAX_INFLATED_BYTES + 1) as usize])
            .unwrap();
        let bomb = base64::engine::general_purpose::STANDARD.encode(enc.finish().unwrap());
        let e = super::decode(bomb, RecordFormat::Ndjson).unwrap_err();
        assert!(e.reason.contains("more than"), "{}", e.reason);
    }

    proptest::proptest! {
        #[test]
        fn arrays_of_any_objects_split_exactly(values in proptest::collection::vec(
            (proptest::prelude::any::<i64>(), "[a-z\\[\\],{}\" ]{0,8}"), 0..20)
        ) {
            let events: Vec<String> = values
                .iter()
                .map(|(n, s)| serde_json::json!({"n": n, "s": s}).to_string())
                .collect();
            let body = format!("[{}]", events.join(" ,\n"));
            let d = decode(body).unwrap();
            proptest::prop_assert_eq!(texts(&d), events.iter().map(String::as_str).collect::<Vec<_>>());
        }

        /// Every format, plain, base64-gzipped or in an SNS envelope: the
        /// events come back exactly, in order, none lost or duplicated, and
        /// decoding the same body again gives the same events (the ids
        /// derived from their positions are stable across redeliveries).
        #[test]
        fn every_format_gives_back_exactly_the_events_put_in(
            values in proptest::collection::vec(
                (proptest::prelude::any::<i64>(), "[a-z\\[\\],{}\" \n]{0,8}"), 1..20),
            ndjson in proptest::prelude::any::<bool>(),
            gz in proptest::prelude::any::<bool>(),
            envelope in proptest::prelude::any::<bool>(),
        ) {
            let events: Vec<String> = values
                .iter()
                .map(|(n, s)| serde_json::json!({"n": n, "s": s}).to_string())
                .collect();
            let (format, text) = if ndjson {
                (RecordFormat::Ndjson, events.join("\n"))
            } else {
                (RecordFormat::JsonArray, format!("[{}]", events.join(" ,\n")))
            };
            let text = if gz { gzip64(&text) } else { text };
            let body = if envelope { sns_pretty(&text) } else { text };
            let d = super::decode(body.clone(), format).unwrap();
            proptest::prop_assert_eq!(texts(&d), events.iter().map(String::as_str).collect::<Vec<_>>());
            proptest::prop_assert_eq!(d, super::decode(body, format).unwrap());
        }
    }
}
