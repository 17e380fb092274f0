//! One attempt's admission (from the holds mirror, else `Admit`), its
//! success, and its failure as retryd's `Failure`: shared by
//! [`crate::Client::call_with`] and the tower adapter.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use rand::Rng;
use tokio::time::Instant;

use crate::mirror::Admission;
use crate::{Decision, Error, Event, Failure, Inner, Strategy, Verdict, pb, rejection};

impl Inner {
    /// Waits until the attempt may go (a hold refuses until its end or the
    /// deadline: [`Error::Held`]); the probe token when retryd admitted it
    /// as a probe. retryd unreachable does not stop the call (fail open).
    pub(crate) async fn admit<E>(
        &self,
        method: &str,
        op: i32,
        attempt: u32,
        deadline: Option<Instant>,
    ) -> Result<String, Error<E>> {
        let past = |wait: Duration| deadline.is_some_and(|d| Instant::now() + wait > d);
        loop {
            if past(Duration::ZERO) {
                return Err(Error::DeadlineExceeded { source: None });
            }
            let admission = match &self.mirror {
                Some(m) => m.decide(&self.catalog, &self.dependency, &self.tenant, method),
                None => Admission::Ask,
            };
            let (hold, retry_at, local) = match admission {
                Admission::Local => {
                    self.counters.local_admissions.fetch_add(1, Ordering::Relaxed);
                    if attempt == 1 {
                        self.count(method, 0); // the deposit Admit would have made
                    }
                    return Ok(String::new());
                }
                Admission::Refuse { hold, retry_at } => {
                    self.counters.local_refusals.fetch_add(1, Ordering::Relaxed);
                    (Some(hold), retry_at, true)
                }
                Admission::Ask => {
                    if self.skip_busy().is_some() {
                        // retryd advised waiting: fail open, as when it is away
                        if attempt == 1 {
                            self.count(method, 0);
                        }
                        return Ok(String::new());
                    }
                    self.counters.admit_rpcs.fetch_add(1, Ordering::Relaxed);
                    let req = pb::AdmitRequest {
                        catalog: self.catalog.clone(),
                        dependency: self.dependency.clone(),
                        tenant: self.tenant.clone(),
                        method: method.to_string(),
                        operation: op,
                        attempt,
                    };
                    let mut stub = self.stub.clone();
                    match tokio::time::timeout(self.rpc_timeout(deadline), stub.admit(req)).await {
                        Ok(Ok(r)) => {
                            let r = r.into_inner();
                            if r.admitted {
                                return Ok(r.probe_token);
                            }
                            if let Some(m) = &self.mirror {
                                m.learn(r.hold.as_ref());
                            }
                            let retry_at = r
                                .retry_at
                                .and_then(|t| SystemTime::try_from(t).ok())
                                .unwrap_or_else(|| SystemTime::now() + Duration::from_secs(1));
                            (r.hold.map(Box::new), retry_at, false)
                        }
                        Ok(Err(s)) if rejection::<E>(&s, None).is_some() => {
                            return Err(rejection(&s, None).expect("checked above"));
                        }
                        other => {
                            let detail = match other {
                                Ok(Err(s)) => {
                                    self.busy.note(&s);
                                    format!("Admit failed: {}", s.message())
                                }
                                _ => "Admit timed out".to_string(),
                            };
                            self.event(Event {
                                detail,
                                ..Event::new("fallback", attempt)
                            });
                            if attempt == 1 {
                                self.count(method, 0); // retryd made no deposit
                            }
                            return Ok(String::new());
                        }
                    }
                }
            };
            let wait = retry_at.duration_since(SystemTime::now()).unwrap_or_default() + Duration::from_millis(10);
            self.event(Event {
                wait,
                local,
                ..Event::new("admit_refused", attempt)
            });
            if past(wait) {
                return Err(Error::Held { hold });
            }
            self.event(Event {
                wait,
                local,
                detail: "hold".into(),
                ..Event::new("wait", attempt)
            });
            (self.sleeper)(wait).await;
        }
    }

    /// Counts a success; a probe's success is reported with its token at once.
    pub(crate) async fn succeeded(&self, method: &str, probe: String, attempt: u32) {
        self.count(method, 1);
        if !probe.is_empty() {
            self.counters.report_rpcs.fetch_add(1, Ordering::Relaxed);
            let mut stub = self.stub.clone();
            let req = pb::ReportOutcomesRequest {
                probe_token: probe,
                probe_succeeded: true,
                ..Default::default()
            };
            if let Ok(Err(s)) = tokio::time::timeout(self.timeout, stub.report_outcomes(req)).await {
                self.busy.note(&s);
            }
        }
        self.event(Event::new("success", attempt));
    }

    /// retryd's `Failure` for a mapper's (idempotency key left empty).
    pub(crate) fn failure(
        &self,
        fl: Failure,
        method: &str,
        op: i32,
        attempt: u32,
        probe: String,
        deadline: Option<SystemTime>,
    ) -> pb::Failure {
        pb::Failure {
            catalog: if fl.catalog.is_empty() {
                self.catalog.clone()
            } else {
                fl.catalog
            },
            code: fl.code,
            operation: op,
            method: method.to_string(),
            attempt,
            retry_after: fl.retry_after,
            retry_after_ms: fl.retry_after_ms,
            deadline: deadline.map(prost_types::Timestamp::from),
            request_id: fl.request_id,
            tenant: self.tenant.clone(),
            dependency: self.dependency.clone(),
            quota_resets_at: fl.quota_resets_at.map(prost_types::Timestamp::from),
            probe_token: probe,
            upstream: fl.no_retry.then(|| pb::RetryContract {
                retryable: false,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The conservative fallback's wait before `attempt + 1`: full jitter
    /// under a capped exponential.
    pub(crate) fn fallback_wait(&self, attempt: u32) -> Duration {
        let top = self
            .fallback
            .base
            .saturating_mul(1 << (attempt.max(1) - 1).min(20))
            .min(self.fallback.cap);
        Duration::from_nanos(rand::rng().random_range(0..=top.as_nanos() as u64))
    }
}

/// The client's own decision when retryd is unavailable and the fallback
/// does not retry (rule `client_fallback/read` or `…/write`).
pub(crate) fn fallback_decision(why: &str, read: bool) -> Decision {
    let kind = if read { "read" } else { "write" };
    Decision {
        verdict: Verdict::DoNotRetry,
        strategy: Strategy::None,
        reason: format!("retryd unavailable ({why}); the conservative fallback does not retry this {kind}"),
        rule: format!("client_fallback/{kind}"),
        required_transition: String::new(),
        terminal_state: String::new(),
        after_ms: 0,
        max_after_ms: 0,
        hold: None,
        raw: None,
    }
}
