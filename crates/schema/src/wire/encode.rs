//! SDK attribute values to DynamoDB JSON, and the string and container
//! writers every encoder here uses.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

/// Appends `s` as a JSON string (quotes and escapes included), with
/// serde_json's escaping.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    // serde_json escapes exactly `"`, `\\` and control characters; a string
    // with none of them (nearly every key and value) is copied whole. The
    // check has no early exit so that it vectorizes.
    let plain = !s.bytes().fold(false, |esc, b| {
        esc | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if plain {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// Appends `{"name":<value>,...}`.
pub(crate) fn write_map(out: &mut Vec<u8>, m: &HashMap<String, AttributeValue>) {
    write_members(out, m.iter().map(|(k, v)| (k.as_str(), v)), write_value);
}

/// Appends a JSON object of `members`, each value written by `each`.
pub fn write_members<'k, V>(
    out: &mut Vec<u8>,
    members: impl IntoIterator<Item = (&'k str, V)>,
    mut each: impl FnMut(&mut Vec<u8>, V),
) {
    out.push(b'{');
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, k);
        out.push(b':');
        each(out, v);
    }
    out.push(b'}');
}

fn write_list<T>(out: &mut Vec<u8>, tag: &str, xs: &[T], each: impl FnMut(&mut Vec<u8>, &T)) {
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(b"\":");
    write_elements(out, xs, each);
    out.push(b'}');
}

/// Appends a JSON array of `xs`, each written by `each`.
pub fn write_elements<T>(out: &mut Vec<u8>, xs: &[T], mut each: impl FnMut(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, x) in xs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        each(out, x);
    }
    out.push(b']');
}

/// Appends `{"<tag>":"<s>"}`, e.g. `{"S":"text"}`.
pub(crate) fn write_tagged_str(out: &mut Vec<u8>, tag: &str, s: &str) {
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(b"\":");
    write_str(out, s);
    out.push(b'}');
}

fn blob(out: &mut Vec<u8>, b: &Blob) {
    write_str(out, &BASE64.encode(b.as_ref()));
}

/// Appends one attribute value in DynamoDB JSON.
pub(crate) fn write_value(out: &mut Vec<u8>, v: &AttributeValue) {
    match v {
        AttributeValue::S(s) => write_tagged_str(out, "S", s),
        AttributeValue::N(n) => write_tagged_str(out, "N", n),
        AttributeValue::B(b) => {
            out.extend_from_slice(b"{\"B\":");
            blob(out, b);
            out.push(b'}');
        }
        AttributeValue::Bool(b) => {
            out.extend_from_slice(if *b {
                b"{\"BOOL\":true}"
            } else {
                b"{\"BOOL\":false}"
            });
        }
        AttributeValue::Null(_) => out.extend_from_slice(b"{\"NULL\":true}"),
        AttributeValue::Ss(v) => write_list(out, "SS", v, |o, s| write_str(o, s)),
        AttributeValue::Ns(v) => write_list(out, "NS", v, |o, s| write_str(o, s)),
        AttributeValue::Bs(v) => write_list(out, "BS", v, blob),
        AttributeValue::L(v) => write_list(out, "L", v, write_value),
        AttributeValue::M(m) => {
            out.extend_from_slice(b"{\"M\":");
            write_map(out, m);
            out.push(b'}');
        }
        // A variant added by a future SDK: NULL keeps the JSON valid; the
        // router never produces one.
        _ => out.extend_from_slice(b"{\"NULL\":true}"),
    }
}
