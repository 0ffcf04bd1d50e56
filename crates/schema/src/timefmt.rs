//! UTC timestamps as fixed-width text, and the range of timestamps accepted.
//!
//! Sort keys and bucket labels compare as strings, so every rendering here is
//! fixed width (4-digit year, zero padded) and therefore sorts like time.

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};

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
    pub(crate) fn from_ms(ms: i64) -> Option<Civil> {
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
pub(crate) fn push_iso_millis(buf: &mut String, ms: i64) {
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

/// The instant of a timestamp already in the canonical form
/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (what [`iso_millis`] writes), or `None` for
/// any other text, which then goes to the general RFC 3339 parser. Most
/// producers write this form; reading it directly skips the parser, and the
/// text itself can serve as the item's rendering.
pub(crate) fn parse_canonical(text: &str) -> Option<i64> {
    let b: &[u8; 24] = text.as_bytes().try_into().ok()?;
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        b[range].iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let seps = [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (23, b'Z'),
    ];
    if seps.iter().any(|&(i, c)| b[i] != c) {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second, milli) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    // chrono checks the date; leap seconds (:60) and anything unusual go to
    // the general parser.
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = i64::from(date.num_days_from_ce()) - DAYS_BEFORE_1970;
    let secs = days * 86_400 + i64::from(hour * 3_600 + minute * 60 + second);
    Some(secs * 1_000 + i64::from(milli))
}

/// Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
const DAYS_BEFORE_1970: i64 = 719_163;

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

    fn chrono_ms(text: &str) -> Option<i64> {
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    #[test]
    fn canonical_parse_takes_only_the_canonical_form() {
        for text in [
            "2024-02-29T23:59:59.999Z",
            "2000-02-29T12:00:00.000Z",
            "1969-12-31T23:59:59.999Z",
            "0000-03-01T00:00:00.000Z",
            "9999-12-31T23:59:59.999Z",
        ] {
            assert!(chrono_ms(text).is_some());
            assert_eq!(parse_canonical(text), chrono_ms(text), "{text}");
        }
        for other in [
            "2023-02-29T00:00:00.000Z", // not a leap year
            "1900-02-29T00:00:00.000Z", // nor is 1900
            "2026-11-22T05:00:60.000Z", // a leap second: the general parser's call
            "2026-13-01T00:00:00.000Z",
            "2026-11-31T00:00:00.000Z",
            "2026-11-22T24:00:00.000Z",
            "2026-11-22T05:00:00.00Z",
            "2026-11-22T05:00:00.0000Z",
            "2026-11-22T05:00:00.000+00:00",
            "2026-11-22 05:00:00.000Z",
            "2026-11-22t05:00:00.000Z",
            "2026-11-22T05:00:00.000z",
            "+026-11-22T05:00:00.000Z",
            "2026-11-22T05:0a:00.000Z",
        ] {
            assert_eq!(parse_canonical(other), None, "{other}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// Every rendering reads back to its instant, as chrono reads it.
        #[test]
        fn canonical_parse_inverts_iso_millis(ms in MIN_TIMESTAMP_MS..END_TIMESTAMP_MS) {
            let text = iso_millis(ms);
            proptest::prop_assert_eq!(parse_canonical(&text), Some(ms));
            proptest::prop_assert_eq!(chrono_ms(&text), Some(ms));
        }

        /// On canonical-shaped text with any digits, it agrees with chrono
        /// wherever it answers, and declines only dates chrono also refuses
        /// or leap seconds.
        #[test]
        fn canonical_parse_agrees_with_chrono(
            digits in proptest::collection::vec(0u8..10, 17),
        ) {
            let d = |i: usize| char::from(b'0' + digits[i]);
            let text: String = [
                d(0), d(1), d(2), d(3), '-', d(4), d(5), '-', d(6), d(7), 'T', d(8), d(9), ':',
                d(10), d(11), ':', d(12), d(13), '.', d(14), d(15), d(16), 'Z',
            ]
            .into_iter()
            .collect();
            match parse_canonical(&text) {
                Some(ms) => proptest::prop_assert_eq!(chrono_ms(&text), Some(ms)),
                None => proptest::prop_assert!(
                    chrono_ms(&text).is_none() || &text[17..19] == "60",
                    "{text} declined but chrono reads it"
                ),
            }
        }
    }
}
