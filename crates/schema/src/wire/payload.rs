//! A record's payload values, from their JSON text to DynamoDB JSON in one
//! pass: strings and numbers are copied as written where they can be (numbers
//! keep every digit), sizes are summed by DynamoDB's rules on the way, and
//! what DynamoDB would refuse (too deep, a number out of range, an empty
//! name) is refused here, naming the value's path, so that one bad event is
//! dead-lettered instead of failing a whole batch.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde_json::value::RawValue;

use super::encode::write_str;
use crate::raw::{self, Name, Node};
use crate::size;

/// A payload value DynamoDB cannot store: its path in the record (`a.b[2]`)
/// and what is wrong. The router reports it as
/// [`PayloadError::BadAttribute`](crate::route::PayloadError::BadAttribute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PayloadError {
    /// Path of the value in the record.
    pub(crate) field: String,
    /// What is wrong.
    pub(crate) problem: String,
}

/// Appends the value of top-level payload field `name` and returns its size.
pub(crate) fn write_field(
    out: &mut Vec<u8>,
    node: &Node<'_>,
    name: &str,
) -> Result<usize, PayloadError> {
    write_node(out, node, &Path::Top(name), 1)
}

/// Appends `{"N":"<text>"}` for a number's JSON text, refused (naming
/// `field`) when DynamoDB cannot store it; returns its size.
pub(crate) fn write_number(
    out: &mut Vec<u8>,
    text: &str,
    field: &str,
) -> Result<usize, PayloadError> {
    number(out, text, &Path::Top(field))
}

fn number(out: &mut Vec<u8>, text: &str, path: &Path<'_>) -> Result<usize, PayloadError> {
    let significant = check_number(text).map_err(|p| bad(path, p))?;
    out.extend_from_slice(b"{\"N\":\"");
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\"}");
    Ok(size::size_of_significant(significant))
}

/// Where a payload value sits in the record (`a.b[2]`); rendered only for an
/// error message, so a route that succeeds formats no paths.
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    Top(&'a str),
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Top(name) => f.write_str(name),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// Repeated names among an object's members. Small objects (nearly all) are
/// scanned in place, without allocating; large ones are indexed once, as the
/// scans would be quadratic in the member count.
pub(crate) struct Dups<'m> {
    members: &'m [(Name<'m>, Node<'m>)],
    /// First and last position of each name, for large objects.
    index: Option<HashMap<&'m str, (usize, usize)>>,
}

/// Up to this many members an object's names are scanned, not indexed.
pub(crate) const DUPS_SCAN_MAX: usize = 32;

impl<'m> Dups<'m> {
    pub(crate) fn new(members: &'m [(Name<'m>, Node<'m>)]) -> Dups<'m> {
        let index = (members.len() > DUPS_SCAN_MAX).then(|| {
            let mut index = HashMap::with_capacity(members.len());
            for (i, (k, _)) in members.iter().enumerate() {
                index.entry(k.as_ref()).or_insert((i, i)).1 = i;
            }
            index
        });
        Dups { members, index }
    }

    /// Whether member `i`'s name occurs before it.
    pub(crate) fn earlier(&self, i: usize) -> bool {
        let Some((name, _)) = self.members.get(i) else {
            return false;
        };
        match &self.index {
            None => self.members.iter().take(i).any(|(k, _)| k == name),
            Some(index) => index
                .get(name.as_ref())
                .is_some_and(|&(first, _)| first < i),
        }
    }

    /// Whether member `i`'s name occurs after it.
    fn later(&self, i: usize) -> bool {
        let Some((name, _)) = self.members.get(i) else {
            return false;
        };
        match &self.index {
            None => self.members.iter().skip(i + 1).any(|(k, _)| k == name),
            Some(index) => index.get(name.as_ref()).is_some_and(|&(_, last)| last > i),
        }
    }
}

/// A comma before a member, unless it opens its object.
pub(crate) fn separate(out: &mut Vec<u8>) {
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
}

/// Appends `"name":`, after a comma unless it opens its object.
pub(crate) fn put_name(out: &mut Vec<u8>, name: &Name<'_>) {
    separate(out);
    match name {
        // Borrowed means the record spelled it without escapes, and the
        // parser refuses raw `"` and control characters: it needs none.
        Cow::Borrowed(plain) => {
            out.push(b'"');
            out.extend_from_slice(plain.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(name) => write_str(out, name),
    }
    out.push(b':');
}

fn bad(field: impl fmt::Display, problem: impl Into<String>) -> PayloadError {
    PayloadError {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// A map or list at `level` is refused when its elements would lie below
/// DynamoDB's deepest level.
pub(crate) fn check_nesting(path: &Path<'_>, level: usize) -> Result<(), PayloadError> {
    if level >= size::MAX_NESTING_LEVELS {
        return Err(bad(
            path,
            format!(
                "nests maps and lists deeper than DynamoDB's {} levels",
                size::MAX_NESTING_LEVELS
            ),
        ));
    }
    Ok(())
}

/// Appends one payload value and returns its size. `level` is the value's
/// nesting level (1 for a top-level attribute). The raw parse does not limit
/// nesting, so the level check also bounds the recursion: a record of deeply
/// nested brackets must be dead-lettered, not overflow the stack.
fn write_node(
    out: &mut Vec<u8>,
    node: &Node<'_>,
    path: &Path<'_>,
    level: usize,
) -> Result<usize, PayloadError> {
    match node {
        Node::Object(members) => write_object(out, members, path, level),
        Node::Raw(raw) => write_raw(out, raw, path, level),
    }
}

fn write_object(
    out: &mut Vec<u8>,
    members: &[(Name<'_>, Node<'_>)],
    path: &Path<'_>,
    level: usize,
) -> Result<usize, PayloadError> {
    check_nesting(path, level)?;
    out.extend_from_slice(b"{\"M\":{");
    let dups = Dups::new(members);
    let mut size = 3;
    for (i, (k, v)) in members.iter().enumerate() {
        let child = Path::Key(path, k);
        if k.is_empty() {
            return Err(bad(child, "has an empty name, which DynamoDB rejects"));
        }
        let mark = out.len();
        put_name(out, k);
        let value_size = write_node(out, v, &child, level + 1)?;
        // Duplicate keys: the last wins, as in serde_json. An earlier one is
        // still checked (its error dead-letters the record) but not kept.
        if dups.later(i) {
            out.truncate(mark);
        } else {
            size += 1 + k.len() + value_size;
        }
    }
    out.extend_from_slice(b"}}");
    Ok(size)
}

fn write_raw(
    out: &mut Vec<u8>,
    raw: &RawValue,
    path: &Path<'_>,
    level: usize,
) -> Result<usize, PayloadError> {
    let text = raw.get().trim_ascii();
    let parse_err = |e: serde_json::Error| bad(path, format!("cannot be read: {e}"));
    match raw::json_kind(raw) {
        "object" => {
            check_nesting(path, level)?;
            let members = raw::open_object(raw).map_err(parse_err)?;
            write_object(out, &members, path, level)
        }
        "array" => {
            check_nesting(path, level)?;
            let elems: Vec<&RawValue> = serde_json::from_str(text).map_err(parse_err)?;
            out.extend_from_slice(b"{\"L\":[");
            let mut size = 3;
            for (i, e) in elems.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                size += 1 + write_raw(out, e, &Path::Index(path, i), level + 1)?;
            }
            out.extend_from_slice(b"]}");
            Ok(size)
        }
        "string" => {
            out.extend_from_slice(b"{\"S\":");
            let len = if text.contains('\\') {
                let s: String = serde_json::from_str(text).map_err(parse_err)?;
                write_str(out, &s);
                s.len()
            } else {
                // Without escapes the JSON text is the string in quotes (the
                // parse has already refused raw control characters).
                out.extend_from_slice(text.as_bytes());
                text.len().saturating_sub(2)
            };
            out.push(b'}');
            Ok(len)
        }
        "boolean" => {
            out.extend_from_slice(if text == "true" {
                b"{\"BOOL\":true}"
            } else {
                b"{\"BOOL\":false}"
            });
            Ok(1)
        }
        "null" => {
            out.extend_from_slice(b"{\"NULL\":true}");
            Ok(1)
        }
        _ => number(out, text, path),
    }
}

/// DynamoDB numbers: at most 38 significant digits, magnitude between 1e-130
/// and 9.99...e125 (or zero). Checked here so such an event is dead-lettered
/// with a reason instead of failing its whole batch. Returns the count of
/// significant digits, which also gives the number's size.
pub(crate) fn check_number(text: &str) -> Result<usize, String> {
    check_number_with(text, digit_counts)
}

/// Leading zeros and significant digits of the digits of `int_part` then
/// `frac_part`, counted in place (no String joining them: this runs for
/// every number of every record).
fn digit_counts(int_part: &str, frac_part: &str) -> (usize, usize) {
    let digits = || int_part.bytes().chain(frac_part.bytes());
    let total = int_part.len() + frac_part.len();
    let lead = digits().take_while(|&b| b == b'0').count();
    if lead == total {
        return (lead, 0);
    }
    let trail = digits().rev().take_while(|&b| b == b'0').count();
    (lead, total - lead - trail)
}

/// [`check_number`] with the digit counting given.
pub(crate) fn check_number_with(
    text: &str,
    counts: impl Fn(&str, &str) -> (usize, usize),
) -> Result<usize, String> {
    let body = text.trim_start_matches('-');
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (
            &body[..i],
            body[i + 1..]
                .parse::<i64>()
                .map_err(|_| format!("number {text} has an unusable exponent"))?,
        ),
        None => (body, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let (lead, significant) = counts(int_part, frac_part);
    if significant == 0 {
        return Ok(0);
    }
    if significant > 38 {
        return Err(format!(
            "number {text} has more than the 38 significant digits DynamoDB keeps"
        ));
    }
    // Decimal exponent of the leading significant digit.
    let int_len = i64::try_from(int_part.len()).unwrap_or(i64::MAX);
    let lead = i64::try_from(lead).unwrap_or(i64::MAX);
    let magnitude = exp
        .saturating_add(int_len)
        .saturating_sub(lead)
        .saturating_sub(1);
    if !(-130..=125).contains(&magnitude) {
        return Err(format!(
            "number {text} is outside DynamoDB's range 1e-130 to 9.99e125"
        ));
    }
    Ok(significant)
}
