//! A thin [`tower::retry::Policy`] adapter: retryd decides, tower retries.
//!
//! `Policy::retry` is synchronous, and retryd's verdict comes from an RPC,
//! so the work is split in two: [`Classified`] wraps the dependency's
//! service (admission from the holds mirror or `Admit`, the call, `Classify`
//! of a failure) and returns the verdict in its error
//! ([`AdapterError::Retry`] with the wait, or [`AdapterError::Stop`]);
//! [`RetrydPolicy`] retries exactly what retryd said to retry, after its
//! wait, up to its own attempt limit. Requests travel as [`Attempt`]s so
//! retryd sees the attempt number (schedules and limits count it).
//!
//! Reads and writes whose idempotency key the dependency enforces only:
//! tower has no read-back, so a write of unknown outcome is refused when
//! the service is built ([`UnknownOutcomeWrite`]), never retried blindly.
//!
//! ```no_run
//! # async fn f(client: retryd_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use retryd_client::tower_retry::{Attempt, RetrydPolicy};
//! use retryd_client::{DependencyError, IntoFailure, Operation};
//! use tower::ServiceExt;
//! let get = tower::service_fn(|id: u32| async move { Ok::<_, DependencyError>(id) });
//! let svc = client.classified(get, Operation::Read, "crm.deal.get", None, |e: &DependencyError| e.to_failure())?;
//! let deal = tower::retry::Retry::new(RetrydPolicy::new(5), svc).oneshot(Attempt::new(7)).await?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rand::Rng;

use crate::admit::fallback_decision;
use crate::{Client, Decision, Error, Event, Failure, NotAnswered, Operation, Verdict, pb, rejection};

/// A request and the attempt it is (1 for the first send).
#[derive(Clone, Debug)]
pub struct Attempt<R> {
    /// The dependency's request.
    pub request: R,
    number: u32,
}

impl<R> Attempt<R> {
    /// A first attempt of `request`.
    pub fn new(request: R) -> Self {
        Attempt { request, number: 1 }
    }
    /// The attempt number (1-based).
    pub fn number(&self) -> u32 {
        self.number
    }
}

/// The error of a [`Classified`] service.
#[derive(Debug)]
pub enum AdapterError<E> {
    /// retryd says retry after `wait` ([`RetrydPolicy`] does, within its
    /// attempt limit; past it, this is the call's error).
    Retry {
        /// The wait retryd's window (or the fallback) drew.
        wait: Duration,
        /// retryd's decision (the client's own when retryd was unreachable).
        decision: Box<Decision>,
        /// The dependency's error.
        source: E,
    },
    /// Stop: held past the deadline, a verdict that says stop, a rejection,
    /// or an error no mapper understands.
    Stop(Error<E>),
}

impl<E: fmt::Display> fmt::Display for AdapterError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdapterError::Retry { wait, decision, source } => {
                write!(
                    f,
                    "retryd: {} after {wait:?} ({}): {source}",
                    decision.verdict, decision.reason
                )
            }
            AdapterError::Stop(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for AdapterError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AdapterError::Retry { source, .. } => Some(source),
            AdapterError::Stop(e) => e.source(),
        }
    }
}

/// A write without an idempotency key the dependency enforces: its outcome
/// is unknown after a failure, tower cannot read it back, so the adapter
/// will not retry it (use [`Client::call`] with a read-back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownOutcomeWrite;

impl fmt::Display for UnknownOutcomeWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "retryd tower adapter: a write of unknown outcome cannot be retried blindly and tower has no \
             read-back: give an idempotency key the dependency enforces, or use Client::call with a read-back",
        )
    }
}

impl std::error::Error for UnknownOutcomeWrite {}

struct Spec {
    op: i32,
    method: String,
    key: String,
}

/// The dependency's service under retryd's admission and classification
/// (build it with [`Client::classified`]).
pub struct Classified<S, M> {
    client: Client,
    inner: S,
    spec: Arc<Spec>,
    mapper: Arc<M>,
}

impl<S: Clone, M> Clone for Classified<S, M> {
    fn clone(&self) -> Self {
        Classified {
            client: self.client.clone(),
            inner: self.inner.clone(),
            spec: self.spec.clone(),
            mapper: self.mapper.clone(),
        }
    }
}

impl Client {
    /// Wraps `inner` for [`tower::retry::Retry`] with [`RetrydPolicy`]: a
    /// read, or a write with `idempotency_key` (the dependency must enforce
    /// it); any other write is refused ([`UnknownOutcomeWrite`]). `mapper`
    /// turns the service's error into a [`Failure`] (`None`: not a
    /// dependency failure, returned as is).
    pub fn classified<S, M>(
        &self,
        inner: S,
        operation: Operation,
        method: impl Into<String>,
        idempotency_key: Option<&str>,
        mapper: M,
    ) -> Result<Classified<S, M>, UnknownOutcomeWrite> {
        let key = idempotency_key.unwrap_or_default();
        if operation != Operation::Read && key.is_empty() {
            return Err(UnknownOutcomeWrite);
        }
        Ok(Classified {
            client: self.clone(),
            inner,
            spec: Arc::new(Spec {
                op: operation.pb(),
                method: method.into(),
                key: key.to_string(),
            }),
            mapper: Arc::new(mapper),
        })
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, R, M> tower::Service<Attempt<R>> for Classified<S, M>
where
    S: tower::Service<R> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Send + 'static,
    R: Send + 'static,
    M: Fn(&S::Error) -> Option<Failure> + Send + Sync + 'static,
{
    type Response = S::Response;
    type Error = AdapterError<S::Error>;
    type Future = BoxFuture<Result<S::Response, AdapterError<S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| AdapterError::Stop(Error::Dependency(e)))
    }

    fn call(&mut self, req: Attempt<R>) -> Self::Future {
        // The ready service goes with this call; a clone stays (tower's idiom).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (client, spec, mapper) = (self.client.clone(), self.spec.clone(), self.mapper.clone());
        Box::pin(async move {
            let i = &*client.inner;
            let attempt = req.number;
            let probe = i
                .admit(&spec.method, spec.op, attempt, None)
                .await
                .map_err(AdapterError::Stop)?;
            let err = match inner.call(req.request).await {
                Ok(v) => {
                    i.succeeded(&spec.method, probe, attempt).await;
                    return Ok(v);
                }
                Err(e) => e,
            };
            let Some(fl) = mapper(&err) else {
                i.count(&spec.method, 2);
                return Err(AdapterError::Stop(Error::Dependency(err)));
            };
            let mut failure = i.failure(fl, &spec.method, spec.op, attempt, probe, None);
            failure.idempotency_key = spec.key.clone();
            failure.idempotency_key_enforced = !spec.key.is_empty();
            let req = pb::ClassifyRequest {
                failure: Some(failure),
                locale: i.locale.clone(),
            };
            let why = match i.classify(req, None).await {
                Ok(d) => {
                    if let Some(m) = &i.mirror {
                        m.learn(d.hold.as_ref());
                    }
                    let d = Decision::from(d);
                    i.event(Event {
                        decision: Some(d.clone()),
                        ..Event::new("decision", attempt)
                    });
                    if d.verdict != Verdict::RetryWithLimit {
                        return Err(AdapterError::Stop(Error::Refused {
                            decision: Box::new(d),
                            source: err,
                        }));
                    }
                    let ms = rand::rng().random_range(d.after_ms..=d.max_after_ms.max(d.after_ms));
                    return Err(AdapterError::Retry {
                        wait: Duration::from_millis(ms),
                        decision: Box::new(d),
                        source: err,
                    });
                }
                Err(NotAnswered::Status(s)) if rejection::<S::Error>(&s, None).is_some() => {
                    return Err(AdapterError::Stop(rejection(&s, Some(err)).expect("checked above")));
                }
                Err(other) => other,
            };
            // retryd unreachable or busy: the conservative fallback (every call here may be resent).
            let read = spec.op == pb::OperationKind::Read as i32;
            if !matches!(why, NotAnswered::Busy(_)) {
                // a busy period is said once (`retryd_busy`), not per call
                i.event(Event {
                    detail: format!("Classify failed: {}", why.why()),
                    ..Event::new("fallback", attempt)
                });
            }
            let why = why.why();
            let decision = Box::new(fallback_decision(&why, read));
            if attempt >= i.fallback.max_attempts {
                return Err(AdapterError::Stop(Error::Unavailable { decision, source: err }));
            }
            Err(AdapterError::Retry {
                wait: i.fallback_wait(attempt),
                decision,
                source: err,
            })
        })
    }
}

/// Retries what retryd said to retry ([`AdapterError::Retry`]), after its
/// wait, at most `max_attempts` attempts in all.
#[derive(Clone, Copy, Debug)]
pub struct RetrydPolicy {
    max_attempts: u32,
}

impl RetrydPolicy {
    /// At most `max_attempts` attempts, the first included (retryd's own
    /// limits usually stop earlier).
    pub fn new(max_attempts: u32) -> Self {
        RetrydPolicy {
            max_attempts: max_attempts.max(1),
        }
    }
}

impl<R: Clone, Res, E> tower::retry::Policy<Attempt<R>, Res, AdapterError<E>> for RetrydPolicy {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, req: &mut Attempt<R>, result: &mut Result<Res, AdapterError<E>>) -> Option<Self::Future> {
        match result {
            Err(AdapterError::Retry { wait, .. }) if req.number < self.max_attempts => {
                req.number += 1;
                Some(tokio::time::sleep(*wait))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Attempt<R>) -> Option<Attempt<R>> {
        Some(req.clone())
    }
}
