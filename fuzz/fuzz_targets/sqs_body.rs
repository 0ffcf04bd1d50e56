//! SQS message bodies (single event, array, SNS envelope) from arbitrary
//! UTF-8 text, read with the default `record_format = "json_or_array"`.
//!
//! Invariants:
//! - `decode` never panics and is deterministic;
//! - every decoded event is one valid JSON value, byte for byte the text the
//!   producer wrote: the whole body (single), each array element (array), the
//!   envelope's `Message` or its elements (SNS);
//! - the format matches the body: a JSON array is always decoded, and so is
//!   any JSON object that is not an SNS notification (duplicate keys
//!   included: the last one counts, as everywhere else);
//! - an undecodable body comes back whole, with a reason.
//!
//! A body starting with `H4sI` is base64-encoded gzip: only determinism and
//! the whole body on refusal are checked there (the shapes are checked on
//! the decompressed text by the unit tests).
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;
use tidemark_consumer::testing::sqs_body::{self as body, Format, RecordFormat};

fn first_byte(text: &str) -> Option<u8> {
    text.bytes().find(|b| !b.is_ascii_whitespace())
}

/// The elements of a JSON array, as text.
fn elements(text: &str) -> Option<Vec<&str>> {
    if first_byte(text) != Some(b'[') {
        return None;
    }
    let items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
    Some(items.into_iter().map(RawValue::get).collect())
}

/// The members of a JSON object (last duplicate wins), as text.
fn members(text: &str) -> Option<HashMap<String, &RawValue>> {
    if first_byte(text) != Some(b'{') {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// The `Message` of an SNS notification envelope.
fn sns_message(m: &HashMap<String, &RawValue>) -> Option<String> {
    if m.get("Type").map(|t| t.get()) != Some("\"Notification\"") || !m.contains_key("TopicArn") {
        return None;
    }
    let message = m.get("Message")?;
    // A non-string Message in an envelope is undecodable: still an envelope.
    Some(serde_json::from_str::<String>(message.get()).unwrap_or_default())
}

fuzz_target!(|data: &[u8]| {
    // SQS bodies are Unicode text.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let first = body::decode(text.to_owned(), RecordFormat::JsonOrArray);
    assert_eq!(
        first,
        body::decode(text.to_owned(), RecordFormat::JsonOrArray),
        "decode is not deterministic"
    );
    if text.trim_start().as_bytes().starts_with(body::BASE64_GZIP_PREFIX) {
        if let Err(u) = first {
            assert_eq!(u.body, text, "the body comes back whole");
        }
        return;
    }

    let array = elements(text);
    let object = members(text);
    let envelope = object.as_ref().and_then(sns_message);

    match first {
        Ok(d) => {
            for e in &d.events {
                let e = std::str::from_utf8(e).expect("events are UTF-8");
                assert!(
                    serde_json::from_str::<&RawValue>(e).is_ok(),
                    "not JSON: {e:?}"
                );
            }
            let texts: Vec<&str> = d
                .events
                .iter()
                .map(|e| std::str::from_utf8(e).unwrap_or_default())
                .collect();
            match d.format {
                Format::Single => {
                    assert!(object.is_some() && envelope.is_none(), "{text:?}");
                    assert_eq!(texts, vec![text]);
                }
                Format::Array => assert_eq!(Some(texts), array),
                Format::Lines => panic!("NDJSON is never read in the json_or_array format"),
                Format::Sns => {
                    let message = envelope.expect("SNS format needs an envelope");
                    match elements(&message) {
                        Some(els) => assert_eq!(texts, els),
                        None => {
                            assert!(members(&message).is_some(), "{message:?}");
                            assert_eq!(texts, vec![message.as_str()]);
                        }
                    }
                }
            }
        }
        Err(u) => {
            assert_eq!(u.body, text, "the body comes back whole");
            assert!(!u.reason.is_empty());
            assert!(array.is_none(), "a JSON array was refused: {}", u.reason);
            assert!(
                object.is_none() || envelope.is_some(),
                "a JSON object that is no SNS envelope was refused: {}",
                u.reason
            );
        }
    }
});
