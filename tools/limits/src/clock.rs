//! A proxy clock set off from the machine's (`--clock-offset`), to test
//! clients against a service whose clock disagrees with theirs.
//!
//! With an offset, a request whose SigV4 time (`X-Amz-Date`) is more than
//! [`TOLERANCE`] away from the proxy's clock is answered as DynamoDB answers
//! it (HTTP 400, `InvalidSignatureException`, "Signature expired: ..." or
//! "Signature not yet current: ..."), and every answer carries the proxy's
//! time in its `Date` header, from which an SDK corrects its signing clock.
//! AWS's own window is 15 minutes; 5 minutes lets a 10-minute offset trip it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use crate::aws_error;

/// How far a request's signing time may be from the proxy's clock.
pub const TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// A signed clock offset, in seconds (positive: the proxy is ahead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset(pub i64);

impl Offset {
    /// The proxy's time when the machine's is `t`.
    pub fn apply(self, t: SystemTime) -> SystemTime {
        let d = Duration::from_secs(self.0.unsigned_abs());
        if self.0 >= 0 { t + d } else { t - d }
    }
}

/// Parses `10m`, `-10m`, `90s`, `1h` (a bare number is seconds).
pub fn parse_offset(s: &str) -> Result<Offset, String> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: i64 = num
        .parse()
        .map_err(|_| format!("'{s}': expected an offset like 10m, -90s or 1h"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("'{s}': unit must be s, m or h")),
    };
    let secs = n
        .checked_mul(mult)
        .ok_or_else(|| format!("'{s}': too large"))?;
    Ok(Offset(if neg { -secs } else { secs }))
}

/// The answer to a request signed too far from the proxy's clock `now`
/// (`None` when it is within [`TOLERANCE`] or carries no `X-Amz-Date`).
pub fn refuse_skewed(
    headers: &HeaderMap,
    now: SystemTime,
) -> Option<Response<http_body_util::Full<bytes::Bytes>>> {
    let signed = headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_amz_date)?;
    let message = if signed + TOLERANCE < now {
        format!(
            "Signature expired: {} is now earlier than {} ({} - {} min.)",
            amz_date(signed),
            amz_date(now - TOLERANCE),
            amz_date(now),
            TOLERANCE.as_secs() / 60
        )
    } else if signed > now + TOLERANCE {
        format!(
            "Signature not yet current: {} is still later than {} ({} + {} min.)",
            amz_date(signed),
            amz_date(now + TOLERANCE),
            amz_date(now),
            TOLERANCE.as_secs() / 60
        )
    } else {
        return None;
    };
    Some(aws_error::dynamodb_error(
        StatusCode::BAD_REQUEST,
        "com.amazon.coral.service#InvalidSignatureException",
        &message,
    ))
}

/// Sets the answer's `Date` to the proxy's clock `now`.
pub fn stamp<B>(resp: &mut Response<B>, now: SystemTime) {
    if let Ok(v) = HeaderValue::from_str(&http_date(now)) {
        resp.headers_mut().insert(header::DATE, v);
    }
}

/// Seconds since the epoch to (year, month, day, hour, minute, second), UTC.
fn civil(t: SystemTime) -> (i64, u32, u32, u64, u64, u64) {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since the epoch of a civil date (Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `20261123T221000Z`, SigV4's time format.
pub fn amz_date(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

/// Reads SigV4's `20261123T221000Z`.
pub fn parse_amz_date(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<u32>().ok();
    let (y, mo, d) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (h, mi, sec) = (n(9..11)?, n(11..13)?, n(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(i64::from(y), mo, d);
    let secs = u64::try_from(days).ok()? * 86_400 + u64::from(h * 3600 + mi * 60 + sec);
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// `Mon, 23 Nov 2026 22:10:00 GMT` (RFC 9110 IMF-fixdate), for `Date`.
pub fn http_date(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, mo, d, h, mi, s) = civil(t);
    let days = t.duration_since(UNIX_EPOCH).map_or(0, |x| x.as_secs()) / 86_400;
    format!(
        "{}, {d:02} {} {y:04} {h:02}:{mi:02}:{s:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(mo - 1) as usize]
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn offsets_parse_with_sign_and_unit() {
        assert_eq!(parse_offset("10m"), Ok(Offset(600)));
        assert_eq!(parse_offset("-10m"), Ok(Offset(-600)));
        assert_eq!(parse_offset("90s"), Ok(Offset(90)));
        assert_eq!(parse_offset("90"), Ok(Offset(90)));
        assert_eq!(parse_offset("+1h"), Ok(Offset(3600)));
        assert!(parse_offset("10x").is_err());
        assert!(parse_offset("m").is_err());
    }

    #[test]
    fn dates_format_and_parse() {
        // 2026-11-23T22:10:00Z, a Monday.
        let t = UNIX_EPOCH + Duration::from_secs(1_795_471_800);
        assert_eq!(amz_date(t), "20261123T221000Z");
        assert_eq!(http_date(t), "Mon, 23 Nov 2026 22:10:00 GMT");
        assert_eq!(parse_amz_date("20261123T221000Z"), Some(t));
        assert_eq!(
            parse_amz_date("20240229T000000Z").map(amz_date).as_deref(),
            Some("20240229T000000Z")
        );
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert!(parse_amz_date("2026-11-23T22:10").is_none());
    }

    #[test]
    fn requests_signed_outside_the_window_are_refused_as_dynamodb_does() {
        let now = UNIX_EPOCH + Duration::from_secs(1_795_471_800);
        let signed = |t: SystemTime| {
            let mut h = HeaderMap::new();
            h.insert("x-amz-date", HeaderValue::from_str(&amz_date(t)).unwrap());
            h
        };
        let ten = Duration::from_secs(600);
        let r = refuse_skewed(&signed(now - ten), now).unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let body = format!("{:?}", r.body());
        assert!(body.contains("InvalidSignatureException"), "{body}");
        assert!(body.contains("Signature expired: 20261123T220000Z is now earlier than 20261123T220500Z (20261123T221000Z - 5 min.)"), "{body}");
        let r = refuse_skewed(&signed(now + ten), now).unwrap();
        assert!(format!("{:?}", r.body()).contains("Signature not yet current"));
        assert!(refuse_skewed(&signed(now - Duration::from_secs(200)), now).is_none());
        assert!(refuse_skewed(&HeaderMap::new(), now).is_none());
    }
}
