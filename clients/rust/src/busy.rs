//! When retryd is busy: a retryd with no room answers any RPC
//! `RESOURCE_EXHAUSTED` with retry advice (`google.rpc.RetryInfo` and
//! `grpc-retry-pushback-ms`). Until the advice passes the client sends it no
//! `Classify` and no `Admit` (the calls take the path they take when retryd
//! is away), keeps its outcome reports, and reconnects its mirror no
//! earlier: a shed server is not hammered by its own callers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{Event, Hook, pushback};

/// The cap on retryd's advice: a hostile or broken server cannot silence
/// the client for longer.
pub const MAX_BUSY: Duration = Duration::from_secs(30);

/// retryd's advice on a shed answer: `RetryInfo`'s `retry_delay` when
/// present and valid, else `grpc-retry-pushback-ms` read by gRFC A6 (one
/// value of digits, or the same value repeated); `None`: no advice (a
/// negative, unparsable or conflicting pushback is none). Capped at
/// [`MAX_BUSY`].
pub(crate) fn shed_advice(status: &tonic::Status) -> Option<Duration> {
    if let Some(d) = retry_delay(status) {
        return Some(d.min(MAX_BUSY));
    }
    let values = status.metadata().get_all("grpc-retry-pushback-ms");
    let texts: Option<Vec<&str>> = values.iter().map(|v| v.to_str().ok()).collect();
    match pushback(texts?) {
        (Some(ms), false) => Some(Duration::from_millis(ms).min(MAX_BUSY)),
        _ => None,
    }
}

/// A valid `RetryInfo.retry_delay` in the status's details (decoded here:
/// tonic-types turns a negative delay into zero, which is not "invalid").
fn retry_delay(status: &tonic::Status) -> Option<Duration> {
    use prost::Message as _;
    let st = tonic_types::pb::Status::decode(status.details()).ok()?;
    st.details
        .iter()
        .filter(|any| any.type_url == tonic_types::RetryInfo::TYPE_URL)
        .filter_map(|any| tonic_types::pb::RetryInfo::decode(&any.value[..]).ok()?.retry_delay)
        .find_map(|d| {
            let secs = u64::try_from(d.seconds).ok()?;
            let nanos = u32::try_from(d.nanos).ok().filter(|n| *n < 1_000_000_000)?;
            Some(Duration::new(secs, nanos))
        })
}

/// The client's busy state, shared by its calls and its mirror.
pub(crate) struct Busy {
    epoch: Instant,
    /// Nanoseconds since `epoch` until which retryd advised waiting (0: never).
    until_ns: AtomicU64,
    /// Shed answers with advice ([`crate::MirrorStats::shed_answers`]).
    pub(crate) answers: AtomicU64,
    /// RPCs not sent while the advice ran ([`crate::MirrorStats::busy_skips`]).
    pub(crate) skips: AtomicU64,
    hook: Option<Hook>,
}

impl Busy {
    pub(crate) fn new(hook: Option<Hook>) -> Self {
        Busy {
            epoch: Instant::now(),
            until_ns: AtomicU64::new(0),
            answers: AtomicU64::new(0),
            skips: AtomicU64::new(0),
            hook,
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Reads a failed RPC's status: `RESOURCE_EXHAUSTED` or `UNAVAILABLE`
    /// with advice is a shed answer; advice > 0 makes the client busy until
    /// it passes (the later instant wins). A new busy period is said once
    /// (event `retryd_busy`), not per call.
    pub(crate) fn note(&self, status: &tonic::Status) {
        if !matches!(status.code(), tonic::Code::ResourceExhausted | tonic::Code::Unavailable) {
            return;
        }
        let Some(d) = shed_advice(status) else { return };
        self.answers.fetch_add(1, Ordering::Relaxed);
        if d.is_zero() {
            return; // a draining server's 0: go elsewhere at once, nothing to wait for
        }
        let now = self.now_ns();
        let want = now.saturating_add(d.as_nanos() as u64);
        let old = self.until_ns.fetch_max(want, Ordering::AcqRel);
        if old <= now {
            if let Some(h) = &self.hook {
                h(&Event {
                    wait: d,
                    detail: format!(
                        "retryd answered {:?} with advice {d:?}: no Classify or Admit until it passes",
                        status.code()
                    ),
                    ..Event::new("retryd_busy", 0)
                });
            }
        }
    }

    /// How long retryd's advice still runs (zero: not busy).
    pub(crate) fn remaining(&self) -> Duration {
        Duration::from_nanos(self.until_ns.load(Ordering::Acquire).saturating_sub(self.now_ns()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tonic_types::StatusExt as _;

    use super::*;

    fn pushed(code: tonic::Code, values: &[&str]) -> tonic::Status {
        let mut s = tonic::Status::new(code, "full");
        for v in values {
            s.metadata_mut().append("grpc-retry-pushback-ms", v.parse().unwrap());
        }
        s
    }

    #[test]
    fn advice_by_retry_info_then_pushback_by_grfc_a6() {
        let ms = Duration::from_millis;
        let ri = |d: Duration, pb: &[&str]| {
            let mut s = tonic::Status::with_error_details(
                tonic::Code::ResourceExhausted,
                "full",
                tonic_types::ErrorDetails::with_retry_info(Some(d)),
            );
            for v in pb {
                s.metadata_mut().append("grpc-retry-pushback-ms", v.parse().unwrap());
            }
            s
        };
        let re = tonic::Code::ResourceExhausted;
        assert_eq!(shed_advice(&ri(ms(700), &["100"])), Some(ms(700)));
        assert_eq!(shed_advice(&ri(Duration::from_secs(3600), &[])), Some(MAX_BUSY));
        // A negative (invalid) RetryInfo is no advice: the pushback is read.
        let negative = tonic_types::pb::Status {
            code: re as i32,
            message: "full".into(),
            details: vec![prost_types::Any {
                type_url: tonic_types::RetryInfo::TYPE_URL.into(),
                value: prost::Message::encode_to_vec(&tonic_types::pb::RetryInfo {
                    retry_delay: Some(prost_types::Duration { seconds: -1, nanos: 0 }),
                }),
            }],
        };
        let mut s = tonic::Status::with_details(re, "full", prost::Message::encode_to_vec(&negative).into());
        assert_eq!(shed_advice(&s), None);
        s.metadata_mut()
            .append("grpc-retry-pushback-ms", "250".parse().unwrap());
        assert_eq!(shed_advice(&s), Some(ms(250)));
        assert_eq!(shed_advice(&pushed(re, &["500"])), Some(ms(500)));
        assert_eq!(shed_advice(&pushed(re, &["500", "500"])), Some(ms(500)));
        assert_eq!(shed_advice(&pushed(re, &["0"])), Some(Duration::ZERO));
        assert_eq!(shed_advice(&pushed(re, &["86400000"])), Some(MAX_BUSY));
        for bad in [&["-1"][..], &["xxx"], &["100", "200"], &["99999999999999999999"], &[]] {
            assert_eq!(shed_advice(&pushed(re, bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn a_shed_answer_makes_the_client_busy_once_per_period_and_the_later_end_wins() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let e2 = events.clone();
        let b = Busy::new(Some(Arc::new(move |e: &Event| e2.lock().unwrap().push(e.kind))));
        b.note(&pushed(tonic::Code::Unavailable, &["0"])); // draining: counted, not busy
        assert_eq!((b.remaining(), b.answers.load(Ordering::Relaxed)), (Duration::ZERO, 1));
        b.note(&pushed(tonic::Code::Internal, &["500"])); // not a shed answer
        b.note(&pushed(tonic::Code::ResourceExhausted, &["xxx"])); // no advice
        assert_eq!((b.remaining(), b.answers.load(Ordering::Relaxed)), (Duration::ZERO, 1));
        b.note(&pushed(tonic::Code::ResourceExhausted, &["2000"]));
        b.note(&pushed(tonic::Code::ResourceExhausted, &["100"])); // earlier: the later end stays
        let r = b.remaining();
        assert!(r > Duration::from_millis(1900) && r <= Duration::from_secs(2), "{r:?}");
        assert_eq!(b.answers.load(Ordering::Relaxed), 3);
        assert_eq!(*events.lock().unwrap(), vec!["retryd_busy"]);
    }
}
