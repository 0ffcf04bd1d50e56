//! Reading the event time: every `timestamp_format`, exactly (no float
//! rounding), within the accepted range.

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::error::EventError;
use super::mapping::{TimeParser, TimestampFormat};
use crate::raw::{Node, json_kind, string_text};
use crate::timefmt;

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
pub(super) fn parse_timestamp<'a>(
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
