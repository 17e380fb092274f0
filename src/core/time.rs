//! Instants as milliseconds since the Unix epoch: the core never reads a
//! clock, so `now` is always passed in as one of these.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Milliseconds since 1970-01-01T00:00:00Z (negative before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixMillis(pub i64);

impl UnixMillis {
    /// The current wall-clock time; only the adapters call this.
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }

    /// Converts a `SystemTime`, saturating far outside the `i64` range.
    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => UnixMillis(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => UnixMillis(-i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
        }
    }

    /// Builds from protobuf `Timestamp` parts, saturating on overflow.
    pub fn from_seconds_nanos(seconds: i64, nanos: i32) -> Self {
        UnixMillis(
            seconds
                .saturating_mul(1000)
                .saturating_add(i64::from(nanos.clamp(0, 999_999_999) / 1_000_000)),
        )
    }

    /// Splits into protobuf `Timestamp` parts.
    pub fn to_seconds_nanos(self) -> (i64, i32) {
        let secs = self.0.div_euclid(1000);
        let millis = self.0.rem_euclid(1000) as i32;
        (secs, millis * 1_000_000)
    }

    /// `self + ms`, saturating.
    pub fn plus_ms(self, ms: u64) -> Self {
        UnixMillis(self.0.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)))
    }

    /// Milliseconds from `self` until `later`, 0 if `later` is not after it.
    pub fn ms_until(self, later: UnixMillis) -> u64 {
        u64::try_from(later.0.saturating_sub(self.0)).unwrap_or(0)
    }

    /// The earliest instant a `google.protobuf.Timestamp` can carry.
    pub const TIMESTAMP_MIN: UnixMillis = UnixMillis(-62_135_596_800_000); // 0001-01-01T00:00:00Z
    /// The latest instant a `google.protobuf.Timestamp` can carry.
    pub const TIMESTAMP_MAX: UnixMillis = UnixMillis(253_402_300_799_999); // 9999-12-31T23:59:59.999Z

    /// Clamped to what a `google.protobuf.Timestamp` can carry (0001-01-01
    /// to 9999-12-31), so protojson tools can always print it.
    pub fn clamp_to_timestamp_range(self) -> Self {
        UnixMillis(self.0.clamp(Self::TIMESTAMP_MIN.0, Self::TIMESTAMP_MAX.0))
    }

    /// Parses RFC 3339 (`2026-08-08T12:05:00Z`, offsets allowed).
    pub fn parse_rfc3339(s: &str) -> Option<Self> {
        let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
        let ms = t.unix_timestamp_nanos() / 1_000_000;
        i64::try_from(ms).ok().map(UnixMillis)
    }

    /// Formats as RFC 3339 in UTC; out-of-range instants print as the raw
    /// millisecond count so output never fails.
    pub fn to_rfc3339(self) -> String {
        let nanos = i128::from(self.0) * 1_000_000;
        OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .ok()
            .and_then(|t| t.format(&Rfc3339).ok())
            .unwrap_or_else(|| format!("@{}ms", self.0))
    }

    /// As a `SystemTime`.
    pub fn to_system_time(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_millis(self.0.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_millis(self.0.unsigned_abs())
        }
    }
}

impl Serialize for UnixMillis {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip_with_offset() {
        let t = UnixMillis::parse_rfc3339("2026-08-08T15:05:00+03:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-08-08T12:05:00Z");
        assert_eq!(UnixMillis::parse_rfc3339("tomorrow"), None);
    }

    #[test]
    fn seconds_nanos_round_trip_negative() {
        let t = UnixMillis(-1500);
        let (s, n) = t.to_seconds_nanos();
        assert_eq!((s, n), (-2, 500_000_000));
        assert_eq!(UnixMillis::from_seconds_nanos(s, n), t);
    }

    #[test]
    fn saturating_arithmetic() {
        assert_eq!(UnixMillis(i64::MAX).plus_ms(u64::MAX), UnixMillis(i64::MAX));
        assert_eq!(UnixMillis(10).ms_until(UnixMillis(5)), 0);
        assert_eq!(UnixMillis(5).ms_until(UnixMillis(10)), 5);
    }
}
