//! UTC timestamps as fixed-width text, and the range of timestamps accepted.
//!
//! Sort keys and bucket labels compare as strings, so every rendering here is
//! fixed width (4-digit year, zero padded) and therefore sorts like time.

use chrono::{DateTime, Datelike, Timelike, Utc};

/// Earliest accepted event time: 1900-01-01T00:00:00.000Z.
pub const MIN_TIMESTAMP_MS: i64 = -2_208_988_800_000;

/// First instant no longer accepted: 9999-01-01T00:00:00.000Z. Keeping a year
/// of margin before 10000 means the next period of any accepted event still
/// has a 4-digit year, so every label keeps its fixed width.
pub const END_TIMESTAMP_MS: i64 = 253_370_764_800_000;

/// True when `ms` lies in the accepted range.
pub const fn in_range(ms: i64) -> bool {
    ms >= MIN_TIMESTAMP_MS && ms < END_TIMESTAMP_MS
}

/// Calendar fields of a UTC instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Civil {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub milli: u32,
}

impl Civil {
    /// `None` only outside chrono's range (far beyond [`END_TIMESTAMP_MS`]).
    pub fn from_ms(ms: i64) -> Option<Civil> {
        let t = DateTime::<Utc>::from_timestamp_millis(ms)?;
        Some(Civil {
            year: t.year(),
            month: t.month(),
            day: t.day(),
            hour: t.hour(),
            minute: t.minute(),
            second: t.second(),
            milli: t.timestamp_subsec_millis(),
        })
    }
}

pub(crate) fn push_num(buf: &mut String, n: u32, width: usize) {
    // Hand-rolled rather than write!: this runs several times per event.
    let mut digits = [b'0'; 10];
    let mut v = n;
    let mut i = digits.len();
    while v > 0 && i > 0 {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    // The zero padding is already in `digits` (up to its 10 places); one
    // push_str instead of a push per digit.
    for _ in digits.len()..width {
        buf.push('0');
    }
    let start = i.min(digits.len().saturating_sub(width));
    buf.push_str(std::str::from_utf8(&digits[start..]).unwrap_or_default());
}

pub(crate) fn push_year(buf: &mut String, year: i32) {
    // Accepted timestamps have years 1899..=9999 (after period arithmetic), so
    // a negative year cannot occur; clamp rather than panic if it ever did.
    push_num(buf, u32::try_from(year).unwrap_or(0), 4);
}

pub(crate) fn push_date(buf: &mut String, c: &Civil) {
    push_year(buf, c.year);
    buf.push('-');
    push_num(buf, c.month, 2);
    buf.push('-');
    push_num(buf, c.day, 2);
}

/// Appends `YYYY-MM-DDTHH:MM:SS.mmmZ` (always UTC, always milliseconds).
pub fn push_iso_millis(buf: &mut String, ms: i64) {
    let Some(c) = Civil::from_ms(ms) else {
        // Unreachable for validated timestamps; render something that sorts
        // before every real timestamp rather than panicking.
        buf.push_str("0000-00-00T00:00:00.000Z");
        return;
    };
    push_date(buf, &c);
    buf.push('T');
    push_num(buf, c.hour, 2);
    buf.push(':');
    push_num(buf, c.minute, 2);
    buf.push(':');
    push_num(buf, c.second, 2);
    buf.push('.');
    push_num(buf, c.milli, 3);
    buf.push('Z');
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for an epoch-millisecond instant.
pub fn iso_millis(ms: i64) -> String {
    let mut s = String::with_capacity(24);
    push_iso_millis(&mut s, ms);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_num_pads_to_width() {
        for (n, width, want) in [
            (0, 1, "0"),
            (0, 2, "00"),
            (7, 2, "07"),
            (42, 2, "42"),
            (123, 2, "123"),
            (5, 4, "0005"),
            (u32::MAX, 1, "4294967295"),
            (u32::MAX, 12, "004294967295"),
            (9, 12, "000000000009"),
        ] {
            let mut s = String::from("x");
            push_num(&mut s, n, width);
            assert_eq!(s, format!("x{want}"), "{n} width {width}");
        }
    }

    #[test]
    fn iso_is_fixed_width_and_matches_chrono() {
        for ms in [
            MIN_TIMESTAMP_MS,
            -1,
            0,
            1_763_790_000_123,
            END_TIMESTAMP_MS - 1,
        ] {
            let ours = iso_millis(ms);
            let chrono = DateTime::<Utc>::from_timestamp_millis(ms)
                .unwrap()
                .format("%Y-%m-%dT%H:%M:%S%.3fZ")
                .to_string();
            assert_eq!(ours, chrono);
            assert_eq!(ours.len(), 24);
        }
        assert_eq!(iso_millis(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn range_bounds_are_the_documented_instants() {
        assert_eq!(iso_millis(MIN_TIMESTAMP_MS), "1900-01-01T00:00:00.000Z");
        assert_eq!(iso_millis(END_TIMESTAMP_MS), "9999-01-01T00:00:00.000Z");
        assert!(in_range(MIN_TIMESTAMP_MS) && !in_range(MIN_TIMESTAMP_MS - 1));
        assert!(in_range(END_TIMESTAMP_MS - 1) && !in_range(END_TIMESTAMP_MS));
    }
}
