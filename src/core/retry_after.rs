//! `Retry-After` (RFC 9110 §10.2.3): `delay-seconds` or an `HTTP-date`.

use super::time::UnixMillis;

/// Parses a raw `Retry-After` value into a delay from `now`, in ms.
///
/// `delay-seconds` is one or more ASCII digits (no sign, no exponent); an
/// HTTP-date may be IMF-fixdate or one of the two obsolete forms RFC 9110
/// still requires recipients to accept. A date in the past is a delay of 0.
/// Anything else is `None`, and the caller reports it as ignored.
pub fn parse_retry_after(raw: &str, now: UnixMillis) -> Option<u64> {
    let value = raw.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // Saturate rather than fail: a huge delay is still a (bounded by deadline) answer.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(secs.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(value).ok().or_else(|| one_digit_day(value))?;
    Some(now.ms_until(UnixMillis::from_system_time(at)))
}

/// An RFC 1123 date with a one-digit day (`Tue, 1 Dec 2026 02:10:00 GMT`),
/// which RFC 1123 allows and Java's `RFC_1123_DATE_TIME` writes for days 1-9,
/// while IMF-fixdate (and `httpdate`) want two digits: read as `01`. Without
/// this, a Java dependency's Retry-After was ignored nine days a month.
fn one_digit_day(value: &str) -> Option<std::time::SystemTime> {
    let b = value.as_bytes();
    if b.len() != 28 || b[3] != b',' || b[4] != b' ' || !b[5].is_ascii_digit() || b[6] != b' ' {
        return None;
    }
    let mut fixed = [0u8; 29];
    fixed[..5].copy_from_slice(&b[..5]);
    fixed[5] = b'0';
    fixed[6..].copy_from_slice(&b[5..]);
    httpdate::parse_http_date(std::str::from_utf8(&fixed).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: UnixMillis = UnixMillis(1_786_190_400_000); // 2026-08-08T12:00:00Z

    #[test]
    fn delay_seconds() {
        assert_eq!(parse_retry_after("120", NOW), Some(120_000));
        assert_eq!(parse_retry_after(" 0 ", NOW), Some(0));
        assert_eq!(parse_retry_after("99999999999999999999999", NOW), Some(u64::MAX));
    }

    #[test]
    fn http_dates_against_now() {
        assert_eq!(parse_retry_after("Sat, 08 Aug 2026 12:01:30 GMT", NOW), Some(90_000));
        // obsolete RFC 850 and asctime forms
        assert_eq!(parse_retry_after("Saturday, 08-Aug-26 12:00:10 GMT", NOW), Some(10_000));
        assert_eq!(parse_retry_after("Sat Aug  8 12:00:05 2026", NOW), Some(5_000));
        // RFC 1123's one-digit day, as Java's RFC_1123_DATE_TIME writes it
        assert_eq!(parse_retry_after("Sat, 8 Aug 2026 12:01:30 GMT", NOW), Some(90_000));
        // a date in the past means "now"
        assert_eq!(parse_retry_after("Fri, 31 Dec 1999 23:59:59 GMT", NOW), Some(0));
    }

    #[test]
    fn garbage_is_none() {
        for raw in [
            "",
            "-1",
            "1e9",
            "1.5",
            "tomorrow",
            "+5",
            "5s",
            "Sat, 99 Aug 2026 12:00:00 GMT",
            "Sat, 8 Aug 2026 99:00:00 GMT",
            "Sat, x Aug 2026 12:00:00 GMT",
            "Sat, 8 Aug 2026 12:00:00 GMTX",
        ] {
            assert_eq!(parse_retry_after(raw, NOW), None, "{raw:?}");
        }
    }
}
