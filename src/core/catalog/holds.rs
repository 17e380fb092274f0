//! The hold part of a catalog: which rules place a fleet hold, of which kind
//! and scope, for how long; when a quota resets; and the one cap that bounds
//! every delay and every hold (`max_delay_ms`).

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Deserialize;

use crate::core::hold::{HoldKind, HoldScope};
use crate::core::time::UnixMillis;

/// The default cap on every delay and hold: 25 h, enough for FrontSpin's 24 h
/// step and a daily reset.
pub const DEFAULT_MAX_DELAY_MS: u64 = 25 * 3_600_000;

/// The default probe interval of an open circuit.
pub const DEFAULT_PROBE_EVERY_MS: u64 = 30_000;

/// The default probe window of a quota stop or quarantine that reaches its
/// end: the one probe's outcome must be reported within it, or the hold
/// lifts for everyone.
pub const DEFAULT_PROBE_TIMEOUT_MS: u64 = 30_000;

/// `hold = { scope = "...", kind = "...", hold_ms = ..., probe_every_ms = ... }` on a rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldSource {
    /// `tenant`, `dependency` or `method`.
    pub scope: String,
    /// `pause`, `quota_stop`, `quarantine` or `circuit_open`.
    pub kind: String,
    /// Length when the failure carries no Retry-After (and, for quota stops, no reset).
    #[serde(default)]
    pub hold_ms: Option<u64>,
    /// Open circuits: one probe per this many milliseconds.
    #[serde(default)]
    pub probe_every_ms: Option<u64>,
    /// Quota stops and quarantines: at their end, admit one probe before
    /// lifting (default true; false: the hold ends for everyone at once).
    #[serde(default)]
    pub probe_on_end: Option<bool>,
    /// Quota stops and quarantines: how long the probe phase waits for the
    /// probe's outcome (default 30 s).
    #[serde(default)]
    pub probe_timeout_ms: Option<u64>,
}

/// `[quota]`: when an exhausted allowance comes back.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSource {
    /// Daily reset at this local time, `HH:MM`.
    #[serde(default)]
    pub resets_at: Option<String>,
    /// The IANA time zone of `resets_at` (default `UTC`).
    #[serde(default)]
    pub time_zone: Option<String>,
    /// A rolling allowance: it comes back this many milliseconds after the stop.
    #[serde(default)]
    pub period_ms: Option<u64>,
}

/// A compiled hold rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRule {
    /// What it covers.
    pub scope: HoldScope,
    /// Why.
    pub kind: HoldKind,
    /// Length without a Retry-After.
    pub hold_ms: Option<u64>,
    /// Open circuits: the probe interval.
    pub probe_every_ms: u64,
    /// Quota stops and quarantines: the probe phase after the end (0: none).
    pub probe_window_ms: u64,
}

/// When an exhausted allowance resets.
#[derive(Debug, Clone, PartialEq)]
pub enum QuotaReset {
    /// Every day at `minute` (minutes after local midnight) in `zone`.
    Daily {
        /// Minutes after midnight.
        minute: u16,
        /// The zone the time is read in.
        zone: TimeZone,
        /// The zone's name, for people.
        zone_name: Box<str>,
    },
    /// `period_ms` after the stop.
    Rolling {
        /// The period.
        period_ms: u64,
    },
}

impl QuotaReset {
    /// The first reset strictly after `now`.
    pub fn next_after(&self, now: UnixMillis) -> UnixMillis {
        match self {
            QuotaReset::Rolling { period_ms } => now.plus_ms(*period_ms),
            QuotaReset::Daily { minute, zone, .. } => next_daily(now, *minute, zone),
        }
    }

    /// The catalog's words, e.g. `daily at 00:00 UTC` or `rolling 86400000 ms`.
    pub fn describe(&self) -> String {
        match self {
            QuotaReset::Daily { minute, zone_name, .. } => {
                format!("daily at {:02}:{:02} {zone_name}", minute / 60, minute % 60)
            }
            QuotaReset::Rolling { period_ms } => format!("rolling {period_ms} ms"),
        }
    }
}

fn next_daily(now: UnixMillis, minute: u16, zone: &TimeZone) -> UnixMillis {
    let Ok(ts) = Timestamp::from_millisecond(now.0) else {
        return now.plus_ms(86_400_000);
    };
    let local = ts.to_zoned(zone.clone());
    let (h, m) = ((minute / 60) as i8, (minute % 60) as i8);
    // Today's reset, else tomorrow's (a DST gap moves it to the next valid instant).
    for days in 0..=2 {
        let Ok(day) = local.date().checked_add(jiff::Span::new().days(days)) else {
            break;
        };
        let Ok(at) = day.at(h, m, 0, 0).to_zoned(zone.clone()) else {
            continue;
        };
        let at_ms = at.timestamp().as_millisecond();
        if at_ms > now.0 {
            return UnixMillis(at_ms);
        }
    }
    now.plus_ms(86_400_000)
}

/// Parses a hold rule, returning `(key suffix, message)` problems.
pub fn compile_hold(s: &HoldSource) -> Result<HoldRule, Vec<(&'static str, String)>> {
    let mut errors = Vec::new();
    let scope = match s.scope.as_str() {
        "tenant" => Some(HoldScope::Tenant),
        "dependency" => Some(HoldScope::Dependency),
        "method" => Some(HoldScope::Method),
        other => {
            errors.push((
                "scope",
                format!("unknown hold scope {other:?}; known: tenant, dependency, method"),
            ));
            None
        }
    };
    let kind = HoldKind::ALL.into_iter().find(|k| k.as_str() == s.kind);
    if kind.is_none() {
        errors.push((
            "kind",
            format!(
                "unknown hold kind {:?}; known: pause, quota_stop, quarantine, circuit_open",
                s.kind
            ),
        ));
    }
    if s.hold_ms == Some(0) {
        errors.push(("hold_ms", "must be positive".to_owned()));
    }
    if s.probe_every_ms == Some(0) {
        errors.push(("probe_every_ms", "must be positive".to_owned()));
    }
    if s.probe_every_ms.is_some() && kind != Some(HoldKind::CircuitOpen) {
        errors.push(("probe_every_ms", "only an open circuit has probes".to_owned()));
    }
    let phased = matches!(kind, Some(HoldKind::QuotaStop | HoldKind::Quarantine));
    if s.probe_timeout_ms == Some(0) {
        errors.push(("probe_timeout_ms", "must be positive".to_owned()));
    }
    for (set, key) in [
        (s.probe_on_end.is_some(), "probe_on_end"),
        (s.probe_timeout_ms.is_some(), "probe_timeout_ms"),
    ] {
        if set && !phased {
            errors.push((
                key,
                "only a quota_stop or a quarantine ends with a probe phase".to_owned(),
            ));
        }
    }
    let probe_window_ms = if phased && s.probe_on_end.unwrap_or(true) {
        s.probe_timeout_ms.unwrap_or(DEFAULT_PROBE_TIMEOUT_MS)
    } else {
        0
    };
    match (scope, kind) {
        (Some(scope), Some(kind)) if errors.is_empty() => Ok(HoldRule {
            scope,
            kind,
            hold_ms: s.hold_ms,
            probe_every_ms: s.probe_every_ms.unwrap_or(DEFAULT_PROBE_EVERY_MS),
            probe_window_ms,
        }),
        _ => Err(errors),
    }
}

/// Parses `[quota]`, returning `(key suffix, message)` problems.
pub fn compile_quota(s: &QuotaSource) -> Result<QuotaReset, Vec<(&'static str, String)>> {
    match (&s.resets_at, s.period_ms) {
        (Some(_), Some(_)) => Err(vec![("period_ms", "give resets_at or period_ms, not both".to_owned())]),
        (None, None) => Err(vec![("resets_at", "give resets_at (HH:MM) or period_ms".to_owned())]),
        (None, Some(0)) => Err(vec![("period_ms", "must be positive".to_owned())]),
        (None, Some(period_ms)) => {
            if s.time_zone.is_some() {
                return Err(vec![("time_zone", "only a daily resets_at has a time zone".to_owned())]);
            }
            Ok(QuotaReset::Rolling { period_ms })
        }
        (Some(at), None) => {
            let mut errors = Vec::new();
            let minute = parse_hh_mm(at);
            if minute.is_none() {
                errors.push(("resets_at", format!("{at:?} is not a time of day HH:MM")));
            }
            let zone_name = s.time_zone.clone().unwrap_or_else(|| "UTC".to_owned());
            let zone = TimeZone::get(&zone_name).ok();
            if zone.is_none() {
                errors.push(("time_zone", format!("unknown time zone {zone_name:?}")));
            }
            match (minute, zone) {
                (Some(minute), Some(zone)) => Ok(QuotaReset::Daily {
                    minute,
                    zone,
                    zone_name: zone_name.into(),
                }),
                _ => Err(errors),
            }
        }
    }
}

fn parse_hh_mm(s: &str) -> Option<u16> {
    let (h, m) = s.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m) = (h.parse::<u16>().ok()?, m.parse::<u16>().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> UnixMillis {
        UnixMillis::parse_rfc3339(s).unwrap()
    }

    fn daily(time: &str, zone: &str) -> QuotaReset {
        compile_quota(&QuotaSource {
            resets_at: Some(time.to_owned()),
            time_zone: Some(zone.to_owned()),
            period_ms: None,
        })
        .unwrap()
    }

    #[test]
    fn daily_reset_is_the_next_local_time_across_midnight() {
        let utc = daily("00:00", "UTC");
        assert_eq!(utc.next_after(at("2026-11-30T23:59:00Z")), at("2026-12-01T00:00:00Z"));
        // Exactly at the reset: the next one is tomorrow's.
        assert_eq!(utc.next_after(at("2026-12-01T00:00:00Z")), at("2026-12-02T00:00:00Z"));
        let moscow = daily("00:00", "Europe/Moscow");
        // 22:30 UTC is 01:30 in Moscow: the next local midnight is 21:00 UTC next day.
        assert_eq!(
            moscow.next_after(at("2026-11-30T22:30:00Z")),
            at("2026-12-01T21:00:00Z")
        );
        assert_eq!(
            moscow.next_after(at("2026-11-30T20:00:00Z")),
            at("2026-11-30T21:00:00Z")
        );
    }

    #[test]
    fn daily_reset_follows_daylight_saving_time() {
        let ny = daily("03:00", "America/New_York");
        // Before the spring change (EST, -5), then after it (EDT, -4).
        assert_eq!(ny.next_after(at("2026-03-07T09:00:00Z")), at("2026-03-08T07:00:00Z"));
        assert_eq!(ny.next_after(at("2026-03-08T08:00:00Z")), at("2026-03-09T07:00:00Z"));
        // 02:30 does not exist on 2026-03-08 in New York: the reset moves forward, it is not skipped.
        let gap = daily("02:30", "America/New_York");
        let next = gap.next_after(at("2026-03-08T05:00:00Z"));
        assert!(
            next > at("2026-03-08T05:00:00Z") && next <= at("2026-03-08T08:00:00Z"),
            "{next:?}"
        );
    }

    #[test]
    fn rolling_reset_and_bad_input() {
        let rolling = compile_quota(&QuotaSource {
            resets_at: None,
            time_zone: None,
            period_ms: Some(3_600_000),
        })
        .unwrap();
        assert_eq!(rolling.next_after(UnixMillis(0)), UnixMillis(3_600_000));
        assert!(
            compile_quota(&QuotaSource {
                resets_at: Some("24:00".into()),
                time_zone: Some("Mars/Olympus".into()),
                period_ms: None,
            })
            .is_err_and(|e| e.len() == 2)
        );
    }

    #[test]
    fn hold_rules_are_validated() {
        let ok = compile_hold(&HoldSource {
            scope: "dependency".into(),
            kind: "circuit_open".into(),
            hold_ms: None,
            probe_every_ms: Some(5_000),
            probe_on_end: None,
            probe_timeout_ms: None,
        })
        .unwrap();
        assert_eq!(
            (ok.scope, ok.kind, ok.probe_every_ms),
            (HoldScope::Dependency, HoldKind::CircuitOpen, 5_000)
        );
        let bad = compile_hold(&HoldSource {
            scope: "planet".into(),
            kind: "pause".into(),
            hold_ms: Some(0),
            probe_every_ms: Some(1),
            probe_on_end: None,
            probe_timeout_ms: None,
        })
        .unwrap_err();
        let keys: Vec<_> = bad.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["scope", "hold_ms", "probe_every_ms"]);
        let source = |kind: &str, on_end: Option<bool>, timeout: Option<u64>| HoldSource {
            scope: "tenant".into(),
            kind: kind.into(),
            hold_ms: None,
            probe_every_ms: None,
            probe_on_end: on_end,
            probe_timeout_ms: timeout,
        };
        // A quota stop or quarantine ends with a 30 s probe phase unless turned off.
        assert_eq!(
            compile_hold(&source("quota_stop", None, None)).unwrap().probe_window_ms,
            30_000
        );
        assert_eq!(
            compile_hold(&source("quarantine", None, Some(5_000)))
                .unwrap()
                .probe_window_ms,
            5_000
        );
        assert_eq!(
            compile_hold(&source("quota_stop", Some(false), None))
                .unwrap()
                .probe_window_ms,
            0
        );
        // A pause keeps ending for everyone; a zero window is no window.
        let keys = |r: Result<HoldRule, Vec<(&'static str, String)>>| -> Vec<&str> {
            r.unwrap_err().iter().map(|(k, _)| *k).collect()
        };
        assert_eq!(keys(compile_hold(&source("pause", Some(true), None))), ["probe_on_end"]);
        assert_eq!(
            keys(compile_hold(&source("quarantine", None, Some(0)))),
            ["probe_timeout_ms"]
        );
        assert_eq!(compile_hold(&source("pause", None, None)).unwrap().probe_window_ms, 0);
    }
}
