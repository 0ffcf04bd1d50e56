//! Record formats: how many events one source record holds, and where.
//!
//! A record is one JSON event (`json`), newline-delimited events
//! (`ndjson`), or a JSON array of events (`json_array`); any of them may be
//! gzip-compressed, which is detected by the gzip magic bytes, not
//! configured. (SQS bodies are text: the SQS source decodes base64 gzip and
//! envelopes first, then splits with these functions; see
//! `tidemark_consumer::sqs::body`.) Splitting is deterministic: the same bytes always give the
//! same inner events at the same positions, so the event ids derived from
//! those positions are stable across replays.

use std::io::Read;

use bytes::Bytes;
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
    /// One JSON object per record (an SQS body may also be a JSON array of
    /// events, as before `record_format` existed).
    #[default]
    Json,
    /// Newline-delimited JSON: one event per non-blank line (`\r\n` too).
    Ndjson,
    /// A JSON array of events (Firehose-style batches).
    JsonArray,
}

/// The first two bytes of every gzip stream.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Largest decompressed record accepted: a guard against compression
/// bombs, well above Kinesis' 10 MiB record limit.
pub const MAX_INFLATED_BYTES: u64 = 64 * 1024 * 1024;

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
}

impl FramingError {
    /// The dead-letter reason.
    pub fn reason(&self) -> Reason {
        match self {
            FramingError::Gzip(_) | FramingError::TooLarge => Reason::UndecodableMessage,
            FramingError::NotArray(_) => Reason::InvalidJson,
        }
    }
}

/// The record's bytes, decompressed when they start with the gzip magic.
pub fn gunzip_if_needed(data: &Bytes) -> Result<Bytes, FramingError> {
    if !data.starts_with(&GZIP_MAGIC) {
        return Ok(data.clone());
    }
    let mut out = Vec::with_capacity(data.len() * 4);
    flate2::read::MultiGzDecoder::new(&data[..])
        .take(MAX_INFLATED_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| FramingError::Gzip(e.to_string()))?;
    if out.len() as u64 > MAX_INFLATED_BYTES {
        return Err(FramingError::TooLarge);
    }
    Ok(Bytes::from(out))
}

/// The inner events of a record, in order, each a slice of the
/// (decompressed) record. Inner event `i` of the result is the record's
/// event at position `i`, which its derived event id names.
pub fn split(format: RecordFormat, data: &Bytes) -> Result<Vec<Bytes>, FramingError> {
    let data = gunzip_if_needed(data)?;
    match format {
        RecordFormat::Json => Ok(vec![data]),
        RecordFormat::Ndjson => Ok(split_lines(&data)),
        RecordFormat::JsonArray => split_array(&data),
    }
}

/// Non-blank lines, without their line ends or surrounding blanks.
fn split_lines(data: &Bytes) -> Vec<Bytes> {
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
            out.push(data.slice(start + lead..end - trail));
        }
        start = end + 1;
    }
    out
}

fn memchr_iter(needle: u8, data: &[u8]) -> impl Iterator<Item = usize> + '_ {
    data.iter()
        .enumerate()
        .filter(move |(_, b)| **b == needle)
        .map(|(i, _)| i)
}

/// The elements of a JSON array, each as its own text (a slice, no copy).
fn split_array(data: &Bytes) -> Result<Vec<Bytes>, FramingError> {
    let text = std::str::from_utf8(data)
        .map_err(|e| FramingError::NotArray(format!("not UTF-8 text: {e}")))?;
    let elems: Vec<&RawValue> =
        serde_json::from_str(text).map_err(|e| FramingError::NotArray(e.to_string()))?;
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
