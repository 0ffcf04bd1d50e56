//! Record formats: how many events one source record holds, and where. The
//! one place every source's records are split (the Kinesis reader, its
//! fixture replay and the SQS source call [`frame`]), so a format name means
//! the same on every source.
//!
//! - `json`: the record is one event (the router judges it);
//! - `json_or_array`: a JSON object is one event, a JSON array one event per
//!   element; anything else (a scalar, invalid JSON) is refused whole;
//! - `ndjson`: one event per non-blank line; a record that as a whole is one
//!   JSON object (a pretty-printed event) is that one event;
//! - `json_array`: a JSON array of events; anything else is refused whole.
//!
//! Any of them may be gzip-compressed, which is detected by the gzip magic
//! bytes, not configured. (SQS bodies are text: the SQS source decodes base64
//! gzip and SNS envelopes first, then frames the result here.) Splitting is
//! deterministic and copies nothing: events are slices of the record, so
//! numbers keep their digits, and the same bytes always give the same events
//! at the same positions, so the event ids derived from those positions are
//! stable across replays.

use std::io::Read;

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use thiserror::Error;

use crate::reason::Reason;

/// How events are laid out in one source record.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RecordFormat {
    /// One JSON event per record.
    #[default]
    Json,
    /// A JSON object (one event) or a JSON array of events; anything else
    /// is refused whole.
    JsonOrArray,
    /// Newline-delimited JSON: one event per non-blank line (`\r\n` too); a
    /// record that as a whole is one JSON object (a pretty-printed event) is
    /// that one event.
    Ndjson,
    /// A JSON array of events (Firehose-style batches); anything else is
    /// refused whole.
    JsonArray,
}

impl RecordFormat {
    /// The name in the configuration.
    pub const fn as_str(self) -> &'static str {
        match self {
            RecordFormat::Json => "json",
            RecordFormat::JsonOrArray => "json_or_array",
            RecordFormat::Ndjson => "ndjson",
            RecordFormat::JsonArray => "json_array",
        }
    }
}

/// The first two bytes of every gzip stream.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Largest decompressed record accepted: a guard against compression
/// bombs, well above Kinesis' 10 MiB record limit.
pub const MAX_INFLATED_BYTES: u64 = 64 * 1024 * 1024;

/// Most events one record may hold. Each event costs a few hundred bytes
/// while in flight (its record, acknowledgement and, if bad, dead letter),
/// so a gzip record of 60 KB inflating to 20 million one-line events would
/// take gigabytes; past this bound the record is refused whole, as one
/// dead letter (`too_many_events`). A 10 MiB Kinesis record of 100-byte
/// events holds about 100,000.
pub const MAX_EVENTS_PER_RECORD: usize = 100_000;

/// Why a record cannot be split; its dead letter carries the whole record.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FramingError {
    /// Starts like gzip but does not decompress.
    #[error("record starts with the gzip magic bytes but does not decompress: {0}")]
    Gzip(String),
    /// Decompresses to more than [`MAX_INFLATED_BYTES`].
    #[error("record decompresses to more than {MAX_INFLATED_BYTES} bytes")]
    TooLarge,
    /// `json_array` record that is not a JSON array.
    #[error("record is not a JSON array of events (record_format = \"json_array\"): {0}")]
    NotArray(String),
    /// `json_or_array` record that is neither a JSON object nor an array.
    #[error("record is {0}")]
    NotObjectOrArray(String),
    /// Holds more than [`MAX_EVENTS_PER_RECORD`] events.
    #[error("record holds more than {MAX_EVENTS_PER_RECORD} events (a decompression bomb?)")]
    TooManyEvents,
}

impl FramingError {
    /// The dead-letter reason.
    pub fn reason(&self) -> Reason {
        match self {
            FramingError::Gzip(_) | FramingError::TooLarge => Reason::UndecodableMessage,
            FramingError::NotArray(_) | FramingError::NotObjectOrArray(_) => Reason::InvalidJson,
            FramingError::TooManyEvents => Reason::TooManyEvents,
        }
    }
}

/// How a record was split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One event: the whole record.
    Single,
    /// One event per element of a JSON array, in order.
    Array,
    /// One event per non-blank line, in order.
    Lines,
}

/// A record's events, in order, each a slice of the (decompressed) record:
/// event `i` is the record's event at position `i`, which its derived event
/// id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed {
    /// How the record was split.
    pub shape: Shape,
    /// The events (empty for `[]` or a blank NDJSON record).
    pub events: Vec<Bytes>,
}

/// The record's bytes, decompressed when they start with the gzip magic.
pub fn gunzip_if_needed(data: &Bytes) -> Result<Bytes, FramingError> {
    gunzip_counting(data, None)
}

/// Inflated bytes read at a time.
const INFLATE_CHUNK: usize = 64 * 1024;

/// [`gunzip_if_needed`]; with `lines`, counting non-blank lines as it
/// inflates and refusing the record ([`FramingError::TooManyEvents`]) as
/// soon as they pass [`MAX_EVENTS_PER_RECORD`]: an NDJSON bomb (a few KB of
/// gzip holding millions of short lines) then costs what it takes to count
/// past the bound, not its whole inflated size.
fn gunzip_counting(data: &Bytes, mut lines: Option<LineCount>) -> Result<Bytes, FramingError> {
    if !data.starts_with(&GZIP_MAGIC) {
        return Ok(data.clone());
    }
    let mut decoder = flate2::read::MultiGzDecoder::new(&data[..]).take(MAX_INFLATED_BYTES + 1);
    let mut out = Vec::with_capacity(inflated_size_hint(data));
    let mut chunk = vec![0u8; INFLATE_CHUNK];
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FramingError::Gzip(e.to_string())),
        };
        if let Some(count) = &mut lines
            && count.feed(&chunk[..n]) > MAX_EVENTS_PER_RECORD
        {
            return Err(FramingError::TooManyEvents);
        }
        out.extend_from_slice(&chunk[..n]);
    }
    if out.len() as u64 > MAX_INFLATED_BYTES {
        return Err(FramingError::TooLarge);
    }
    Ok(Bytes::from(out))
}

/// The capacity to inflate `data` (gzip) into: its trailer's size of the
/// last member (exact for the usual single-member record), at least
/// `data.len() * 4` and at most the inflate cap. Growing the buffer by doubling
/// instead would copy it each time, and an allocator without `mremap` holds
/// the old and the new buffer at once: twice the record's inflated size at
/// the last step. A wrong size (several members, or a lie) only changes
/// the capacity reserved; the bytes read are what counts.
fn inflated_size_hint(data: &[u8]) -> usize {
    let trailer = data
        .len()
        .checked_sub(4)
        .and_then(|i| data.get(i..))
        .and_then(|t| <[u8; 4]>::try_from(t).ok())
        .map_or(0, |t| u32::from_le_bytes(t) as usize);
    let cap = usize::try_from(MAX_INFLATED_BYTES).unwrap_or(usize::MAX);
    trailer.max(data.len() * 4).min(cap)
}

/// Non-blank lines seen so far in text fed in pieces (as `split_lines`
/// counts them).
#[derive(Debug, Default)]
struct LineCount {
    /// Lines ended that held more than blanks.
    lines: usize,
    /// The current line holds more than blanks.
    open: bool,
}

impl LineCount {
    /// Counts `bytes`; returns the non-blank lines so far, the current one
    /// included.
    fn feed(&mut self, bytes: &[u8]) -> usize {
        for &b in bytes {
            if b == b'\n' {
                self.lines += usize::from(self.open);
                self.open = false;
            } else if !b.is_ascii_whitespace() {
                self.open = true;
            }
        }
        self.lines + usize::from(self.open)
    }
}

/// Splits a record laid out as `format` into its events (see the module
/// docs). `one_object`: the caller already parsed `data` (decompressed) as
/// one JSON object (the SQS source does, looking for an SNS envelope), so it
/// is not parsed again.
pub fn frame(format: RecordFormat, data: &Bytes, one_object: bool) -> Result<Framed, FramingError> {
    let count = (format == RecordFormat::Ndjson && !one_object).then(LineCount::default);
    let data = gunzip_counting(data, count)?;
    let framed = |shape, events| Framed { shape, events };
    match format {
        RecordFormat::Json => Ok(framed(Shape::Single, vec![data])),
        RecordFormat::JsonOrArray => match first_byte(&data) {
            Some(b'{') if one_object || is_one_value(&data) => {
                Ok(framed(Shape::Single, vec![data]))
            }
            Some(b'[') => split_array(&data)
                .map(|events| framed(Shape::Array, events))
                .map_err(|e| match e {
                    ArrayError::TooMany => FramingError::TooManyEvents,
                    ArrayError::Invalid(e) => {
                        FramingError::NotObjectOrArray(format!("not valid JSON: {e}"))
                    }
                }),
            _ => Err(FramingError::NotObjectOrArray(describe(&data))),
        },
        RecordFormat::Ndjson => {
            if one_object {
                return Ok(framed(Shape::Single, vec![data]));
            }
            let lines = split_lines(&data).ok_or(FramingError::TooManyEvents)?;
            // Several lines may be one pretty-printed object; one line is
            // one event either way.
            if lines.len() > 1 && first_byte(&data) == Some(b'{') && is_one_value(&data) {
                return Ok(framed(Shape::Single, vec![data]));
            }
            Ok(framed(Shape::Lines, lines))
        }
        RecordFormat::JsonArray => match first_byte(&data) {
            Some(b'[') => split_array(&data)
                .map(|events| framed(Shape::Array, events))
                .map_err(|e| match e {
                    ArrayError::TooMany => FramingError::TooManyEvents,
                    ArrayError::Invalid(e) => FramingError::NotArray(e),
                }),
            Some(b'{') if one_object || is_one_value(&data) => {
                Err(FramingError::NotArray("a JSON object".into()))
            }
            _ => Err(FramingError::NotArray(describe(&data))),
        },
    }
}

/// The events of a record laid out as `format` (see [`frame`]).
pub fn split(format: RecordFormat, data: &Bytes) -> Result<Vec<Bytes>, FramingError> {
    frame(format, data, false).map(|f| f.events)
}

fn first_byte(data: &[u8]) -> Option<u8> {
    data.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// True when `data` is exactly one JSON value.
fn is_one_value(data: &[u8]) -> bool {
    serde_json::from_slice::<IgnoredAny>(data).is_ok()
}

/// What a record that is neither an object nor an array is.
fn describe(data: &[u8]) -> String {
    match serde_json::from_slice::<IgnoredAny>(data) {
        Ok(_) => "JSON but not an object or an array".to_string(),
        Err(e) => format!("not valid JSON: {e}"),
    }
}

/// Non-blank lines, without their line ends or surrounding blanks; `None`
/// past [`MAX_EVENTS_PER_RECORD`] of them (counting stops there).
fn split_lines(data: &Bytes) -> Option<Vec<Bytes>> {
    let mut out = Vec::new();
    let mut start = 0;
    for end in memchr_iter(b'\n', data).chain(std::iter::once(data.len())) {
        let line = &data[start..end];
        let lead = line.iter().take_while(|b| b.is_ascii_whitespace()).count();
        let trail = line[lead..]
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
        if lead + trail < line.len() {
            if out.len() == MAX_EVENTS_PER_RECORD {
                return None;
            }
            out.push(data.slice(start + lead..end - trail));
        }
        start = end + 1;
    }
    Some(out)
}

fn memchr_iter(needle: u8, data: &[u8]) -> impl Iterator<Item = usize> + '_ {
    data.iter()
        .enumerate()
        .filter(move |(_, b)| **b == needle)
        .map(|(i, _)| i)
}

/// Why a JSON array cannot be split.
enum ArrayError {
    /// More than [`MAX_EVENTS_PER_RECORD`] elements.
    TooMany,
    /// Not valid JSON (or not an array), with the parser's message.
    Invalid(String),
}

/// The elements of a JSON array, each as its own text (a slice, no copy),
/// at most [`MAX_EVENTS_PER_RECORD`] of them (parsing stops past that).
fn split_array(data: &Bytes) -> Result<Vec<Bytes>, ArrayError> {
    let text = std::str::from_utf8(data)
        .map_err(|e| ArrayError::Invalid(format!("not UTF-8 text: {e}")))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let too_many = std::cell::Cell::new(false);
    // Stopping early may also read as a parse error: the flag decides.
    let parsed = serde::Deserializer::deserialize_seq(&mut de, Elements(&too_many))
        .and_then(|elems| de.end().map(|()| elems));
    if too_many.get() {
        return Err(ArrayError::TooMany);
    }
    let elems = parsed.map_err(|e| ArrayError::Invalid(e.to_string()))?;
    let base = text.as_ptr() as usize;
    Ok(elems
        .iter()
        .map(|e| {
            // Each element's text lies inside `text`: its offset is the
            // distance between the two pointers.
            let start = e.get().as_ptr() as usize - base;
            data.slice(start..start + e.get().len())
        })
        .collect())
}

/// Collects an array's elements as raw text; past
/// [`MAX_EVENTS_PER_RECORD`] it sets its flag and stops (the rest is not
/// read).
struct Elements<'f>(&'f std::cell::Cell<bool>);

impl<'de> serde::de::Visitor<'de> for Elements<'_> {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(e) = seq.next_element::<&'de RawValue>()? {
            if out.len() == MAX_EVENTS_PER_RECORD {
                self.0.set(true);
                return Ok(Vec::new());
            }
            out.push(e);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn the_inflate_buffer_is_sized_from_the_gzip_trailer_within_the_cap() {
        let data = vec![b'a'; 1_000_000];
        let gz = gzip(&data);
        assert_eq!(inflated_size_hint(&gz), 1_000_000);
        // A lying trailer reserves at most the cap; a short one at least 4x.
        let mut liar = gz.clone();
        let n = liar.len();
        liar[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(inflated_size_hint(&liar), MAX_INFLATED_BYTES as usize);
        liar[n - 4..].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(inflated_size_hint(&liar), n * 4);
        assert_eq!(inflated_size_hint(&[0x1f]), 4);
    }

    fn texts(v: &[Bytes]) -> Vec<&str> {
        v.iter().map(|b| std::str::from_utf8(b).unwrap()).collect()
    }

    #[test]
    fn formats_split_and_gzip_is_detected() {
        let nd = Bytes::from_static(b"{\"a\":1}\r\n\n  {\"a\":2} \n{\"a\":3}");
        assert_eq!(
            texts(&split(RecordFormat::Ndjson, &nd).unwrap()),
            [r#"{"a":1}"#, r#"{"a":2}"#, r#"{"a":3}"#]
        );
        let arr = Bytes::from_static(b" [ {\"a\":1} , {\"b\":[1,2]} ] ");
        assert_eq!(
            texts(&split(RecordFormat::JsonArray, &arr).unwrap()),
            [r#"{"a":1}"#, r#"{"b":[1,2]}"#]
        );
        let gz = Bytes::from(gzip(&nd));
        assert_eq!(
            split(RecordFormat::Ndjson, &gz).unwrap(),
            split(RecordFormat::Ndjson, &nd).unwrap()
        );
        let one = Bytes::from(gzip(br#"{"x":1}"#));
        assert_eq!(
            texts(&split(RecordFormat::Json, &one).unwrap()),
            [r#"{"x":1}"#]
        );
    }

    #[test]
    fn broken_records_are_refused_whole() {
        let mut bad_gz = gzip(b"{\"a\":1}");
        bad_gz.truncate(12);
        let err = split(RecordFormat::Json, &Bytes::from(bad_gz)).unwrap_err();
        assert_eq!(err.reason(), Reason::UndecodableMessage);
        let err = split(RecordFormat::JsonArray, &Bytes::from_static(b"{\"a\":1}")).unwrap_err();
        assert_eq!(err.reason(), Reason::InvalidJson);
        // A bomb: 100 MiB of zeros compresses to ~100 KiB.
        let zeros = vec![0u8; (MAX_INFLATED_BYTES + 1) as usize];
        let bomb = Bytes::from(gzip(&zeros));
        assert_eq!(gunzip_if_needed(&bomb).unwrap_err(), FramingError::TooLarge);
    }

    #[test]
    fn one_name_one_meaning_on_every_source() {
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        // json: the record is one event, whatever it holds.
        let f = frame(RecordFormat::Json, &b("[1,2]"), false).unwrap();
        assert_eq!((f.shape, texts(&f.events)), (Shape::Single, vec!["[1,2]"]));
        // json_or_array: an object, or an array's elements; nothing else.
        let f = frame(RecordFormat::JsonOrArray, &b(r#" {"a":1}"#), false).unwrap();
        assert_eq!(f.shape, Shape::Single);
        let f = frame(RecordFormat::JsonOrArray, &b(r#"[{"a":1},{"a":2}]"#), false).unwrap();
        assert_eq!(
            (f.shape, texts(&f.events)),
            (Shape::Array, vec![r#"{"a":1}"#, r#"{"a":2}"#])
        );
        for bad in ["42", "{\"a\":", "[1,", "", "{\"a\":1}\n{\"a\":2}"] {
            let e = frame(RecordFormat::JsonOrArray, &b(bad), false).unwrap_err();
            assert_eq!(e.reason(), Reason::InvalidJson, "{bad:?}");
        }
        // ndjson: a pretty-printed object is one event; lines otherwise.
        let pretty = "{\n  \"a\": 1\n}";
        let f = frame(RecordFormat::Ndjson, &b(pretty), false).unwrap();
        assert_eq!((f.shape, texts(&f.events)), (Shape::Single, vec![pretty]));
        let f = frame(RecordFormat::Ndjson, &b("{\"a\":\n1}\n{\"b\":2}"), false).unwrap();
        assert_eq!(f.shape, Shape::Lines);
        assert_eq!(texts(&f.events), ["{\"a\":", "1}", "{\"b\":2}"]);
        // Known to be one object: not parsed again.
        let f = frame(RecordFormat::Ndjson, &b(r#"{"a":1}"#), true).unwrap();
        assert_eq!(f.shape, Shape::Single);
    }

    /// A record holding more events than a record may (a decompression
    /// bomb: 60 KB of gzip inflating to millions of `{}` lines) is refused
    /// whole with `too_many_events`, without a slice per event; one at the
    /// bound is split as usual.
    #[test]
    fn a_record_of_too_many_events_is_refused_whole() {
        let at_bound = 100_000;
        let lines = |n: usize| Bytes::from(gzip(&b"{}\n".repeat(n)));
        let elems = |n: usize| {
            let mut a = b"[{}".to_vec();
            a.extend(b",{}".repeat(n - 1));
            a.push(b']');
            Bytes::from(gzip(&a))
        };
        assert_eq!(
            split(RecordFormat::Ndjson, &lines(at_bound)).unwrap().len(),
            at_bound
        );
        assert_eq!(
            split(RecordFormat::JsonArray, &elems(at_bound))
                .unwrap()
                .len(),
            at_bound
        );
        for (format, data) in [
            (RecordFormat::Ndjson, lines(at_bound + 1)),
            (RecordFormat::JsonArray, elems(at_bound + 1)),
            (RecordFormat::JsonOrArray, elems(at_bound + 1)),
        ] {
            let err = frame(format, &data, false).unwrap_err();
            assert_eq!(err.reason(), Reason::TooManyEvents, "{format:?}: {err}");
            assert!(err.to_string().contains("100000 events"), "{err}");
        }
    }

    fn event() -> impl Strategy<Value = String> {
        // Objects with strings holding newlines (escaped), brackets and
        // commas: what a naive splitter would cut in the wrong place.
        proptest::collection::vec(
            ("[a-z]{1,4}", "[ -~]{0,12}", -1_000_000i64..1_000_000),
            0..4,
        )
        .prop_map(|members| {
            let body: Vec<String> = members
                .iter()
                .map(|(k, v, n)| {
                    format!(
                        "{}:{{\"s\":{},\"n\":{n},\"l\":[{n},\"a\\nb\"]}}",
                        serde_json::to_string(k).unwrap(),
                        serde_json::to_string(v).unwrap()
                    )
                })
                .collect();
            format!("{{{}}}", body.join(","))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// NDJSON and array splitting give back exactly the events put in,
        /// in order: none lost, none duplicated, compressed or not.
        #[test]
        fn splitting_never_loses_or_duplicates(
            events in proptest::collection::vec(event(), 0..12),
            crlf in any::<bool>(),
            blank_lines in any::<bool>(),
            gz in any::<bool>(),
        ) {
            let end = if crlf { "\r\n" } else { "\n" };
            let sep = if blank_lines { format!("{end}{end}  ") } else { end.to_owned() };
            let nd = events.join(&sep);
            let arr = format!("[ {} ]", events.join(" ,\n"));
            for (format, text) in [(RecordFormat::Ndjson, nd), (RecordFormat::JsonArray, arr)] {
                let data = if gz { gzip(text.as_bytes()) } else { text.into_bytes() };
                let inner = split(format, &Bytes::from(data)).unwrap();
                prop_assert_eq!(texts(&inner), events.iter().map(String::as_str).collect::<Vec<_>>());
            }
        }
    }
}
