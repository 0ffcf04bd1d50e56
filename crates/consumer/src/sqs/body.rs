//! Message body to events: one event, a JSON array of events, or an SNS
//! notification envelope around either. Pure; events keep the producer's
//! exact bytes (array elements are sliced, never re-serialized, so numbers
//! keep their digits).

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The shape a body was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A JSON object: one event.
    Single,
    /// A JSON array: one event per element, in order.
    Array,
    /// An SNS notification whose `Message` holds a single event or an array.
    Sns,
}

impl Format {
    /// The metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Format::Single => "single",
            Format::Array => "array",
            Format::Sns => "sns",
        }
    }
}

/// A decoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// How the body was recognised.
    pub format: Format,
    /// The events' JSON texts, in body order (empty for `[]`).
    pub events: Vec<Bytes>,
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
}

/// Decodes a message body, or hands it back with the reason it is none of
/// the accepted shapes.
pub fn decode(body: String) -> Result<Decoded, Undecodable> {
    match decode_ref(&body) {
        Ok(Some(decoded)) => Ok(decoded),
        // A plain event: the body itself, without a copy.
        Ok(None) => Ok(Decoded {
            format: Format::Single,
            events: vec![Bytes::from(body)],
        }),
        Err(reason) => Err(Undecodable { body, reason }),
    }
}

/// `Ok(None)` means "a single event: the body as it is".
fn decode_ref(body: &str) -> Result<Option<Decoded>, String> {
    match first_byte(body) {
        Some(b'[') => split_array(body).map(|events| {
            Some(Decoded {
                format: Format::Array,
                events,
            })
        }),
        Some(b'{') => {
            let probe: Probe<'_> =
                serde_json::from_str(body).map_err(|e| format!("body is not valid JSON: {e}"))?;
            match sns_message(&probe)? {
                Some(inner) => decode_inner(inner).map(|events| {
                    Some(Decoded {
                        format: Format::Sns,
                        events,
                    })
                }),
                None => Ok(None),
            }
        }
        _ => Err(not_an_event(body)),
    }
}

fn first_byte(text: &str) -> Option<u8> {
    text.bytes().find(|b| !b.is_ascii_whitespace())
}

fn not_an_event(text: &str) -> String {
    match serde_json::from_str::<&RawValue>(text) {
        Ok(_) => "body is JSON but not an object, an array or an SNS envelope".to_string(),
        Err(e) => format!("body is not valid JSON: {e}"),
    }
}

fn split_array(text: &str) -> Result<Vec<Bytes>, String> {
    let items: Vec<&RawValue> =
        serde_json::from_str(text).map_err(|e| format!("body is not valid JSON: {e}"))?;
    Ok(items
        .into_iter()
        .map(|v| Bytes::copy_from_slice(v.get().as_bytes()))
        .collect())
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

/// An SNS `Message`: a single event or an array (envelopes do not nest).
fn decode_inner(inner: String) -> Result<Vec<Bytes>, String> {
    let sns = |e: String| format!("SNS Message: {e}");
    match first_byte(&inner) {
        Some(b'[') => split_array(&inner).map_err(sns),
        Some(b'{') => {
            serde_json::from_str::<&RawValue>(&inner)
                .map_err(|e| sns(format!("body is not valid JSON: {e}")))?;
            Ok(vec![Bytes::from(inner)])
        }
        _ => Err(sns(not_an_event(&inner))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
