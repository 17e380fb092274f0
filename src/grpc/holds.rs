//! The fleet-memory RPCs — Admit, ReportOutcomes, ListHolds, ReleaseHold,
//! WatchHolds — over [`Fleet`], and who may call the operator ones.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Status};

use super::convert::hold_to_proto;
use super::pb;
use crate::core::hold::Hold;
use crate::core::{Policy, UnixMillis, limits};
use crate::fleet::{Fleet, HoldEventKind, matches};

/// Most counts one ReportOutcomes may carry.
pub const MAX_OUTCOME_COUNTS: usize = 1_000;
/// Largest count of one kind per entry of one report (a bigger one is cut to it).
pub const MAX_COUNT_PER_REPORT: u64 = 1_000_000;
/// Longest hold id or probe token.
pub const MAX_ID: usize = 128;
/// Default and largest ListHolds page.
const PAGE_DEFAULT: usize = 100;
const PAGE_MAX: usize = 1_000;

/// The stream type of WatchHolds.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchHoldsResponse, Status>> + Send + 'static>>;

/// Who counts as an operator (may release holds and see raw tenant names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Operators {
    /// A bearer token (`authorization: Bearer …`) from `--operator-token-file`.
    pub token: Option<String>,
    /// Client-certificate subjects (CN) or SANs accepted under mTLS (`--operator-identities`).
    pub identities: Vec<String>,
    /// Trust any caller on a loopback address (`--operator-allow-loopback`).
    pub allow_loopback: bool,
}

impl Operators {
    /// Whether the caller of `req` is an operator.
    pub fn allows<T>(&self, req: &Request<T>) -> bool {
        self.allows_parts(req.metadata().as_ref(), req.extensions())
    }

    /// Whether the caller whose request has these headers and connection
    /// extensions (as tonic's server sets them, for gRPC and HTTP alike) is
    /// an operator: the one rule of the gRPC and HTTP doors.
    pub fn allows_parts(&self, headers: &http::HeaderMap, extensions: &http::Extensions) -> bool {
        if let Some(token) = &self.token {
            let given = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
                return true;
            }
        }
        if self.allow_loopback && remote_addr(extensions).is_some_and(|a| a.ip().is_loopback()) {
            return true;
        }
        !self.identities.is_empty()
            && peer_identities(extensions)
                .iter()
                .any(|id| self.identities.iter().any(|allowed| allowed == id))
    }
}

/// PERMISSION_DENIED for a non-operator asking to release a hold.
pub fn release_denied() -> Status {
    Status::permission_denied(
        "ReleaseHold is for operators: a bearer token (--operator-token-file) or a client certificate in --operator-identities",
    )
}

/// The peer's address, from the connection info tonic's server puts in a
/// request's extensions (plain TCP or TLS).
pub fn remote_addr(extensions: &http::Extensions) -> Option<std::net::SocketAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The subject CNs and SANs (DNS, URI, e-mail, IP) of the client's certificate.
fn peer_identities(extensions: &http::Extensions) -> Vec<String> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Some(certs) = extensions
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .and_then(TlsConnectInfo::peer_certs)
    else {
        return Vec::new();
    };
    let Some(leaf) = certs.first() else {
        return Vec::new();
    };
    let Ok((_, cert)) = X509Certificate::from_der(leaf.as_ref()) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(s) | GeneralName::URI(s) | GeneralName::RFC822Name(s) => ids.push((*s).to_owned()),
                GeneralName::IPAddress(b) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*b) {
                        ids.push(IpAddr::from(v4).to_string());
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                        ids.push(IpAddr::from(v6).to_string());
                    }
                }
                _ => {}
            }
        }
    }
    ids
}

/// Who placed a hold, for per-caller rates and the log: the client
/// certificate's first identity under mTLS, else the peer's IP address.
pub fn caller_of<T>(req: &Request<T>) -> String {
    caller_of_parts(req.extensions())
}

/// Who is calling, as far as placing a hold cares: a name given, or the
/// connection's, worked out only when a hold is placed (formatting the
/// peer's address on every decision cost more than the rest of the fleet
/// lookup).
#[derive(Debug, Clone, Copy)]
pub enum Caller<'a> {
    /// This name.
    Named(&'a str),
    /// The caller of the connection these request extensions came from (see [`caller_of_parts`]).
    Connection(&'a http::Extensions),
}

impl<'a> Caller<'a> {
    /// The caller's name, as [`caller_of`] gives it.
    pub fn name(self) -> std::borrow::Cow<'a, str> {
        match self {
            Caller::Named(name) => std::borrow::Cow::Borrowed(name),
            Caller::Connection(extensions) => std::borrow::Cow::Owned(caller_of_parts(extensions)),
        }
    }
}

impl<'a> From<&'a str> for Caller<'a> {
    fn from(name: &'a str) -> Self {
        Caller::Named(name)
    }
}

impl<'a> From<&'a String> for Caller<'a> {
    fn from(name: &'a String) -> Self {
        Caller::Named(name)
    }
}

/// [`caller_of`] from a request's connection extensions (gRPC or HTTP).
pub fn caller_of_parts(extensions: &http::Extensions) -> String {
    if let Some(id) = peer_identities(extensions).into_iter().next() {
        return format!("cert:{id}");
    }
    remote_addr(extensions).map_or_else(|| "unknown".to_owned(), |a| a.ip().to_string())
}

/// INVALID_ARGUMENT naming `field`.
pub(super) fn invalid(field: &str, description: impl Into<String>) -> Status {
    let description = description.into();
    let message = format!("{field}: {description}");
    <Status as tonic_types::StatusExt>::with_error_details(
        tonic::Code::InvalidArgument,
        message,
        tonic_types::ErrorDetails::with_bad_request_violation(field, description),
    )
}

pub(super) fn check_len(field: &str, value: &str, max: usize) -> Result<(), Status> {
    if value.len() > max {
        return Err(invalid(field, format!("is {} bytes; the limit is {max}", value.len())));
    }
    Ok(())
}

/// The catalog a request names (empty: the default), or INVALID_ARGUMENT.
fn resolve_catalog<'p>(policy: &'p Policy, name: &str, field: &str) -> Result<&'p str, Status> {
    check_len(field, name, limits::MAX_CATALOG)?;
    if name.is_empty() {
        return Ok(&policy.default_catalog().name);
    }
    match policy.catalog(name) {
        Some(c) => Ok(&c.name),
        None => Err(invalid(
            field,
            format!("unknown catalog {name:?}; catalogs: {}", policy.catalog_names()),
        )),
    }
}

fn check_scope_fields(dependency: &str, tenant: &str, method: &str, prefix: &str) -> Result<(), Status> {
    check_len(&format!("{prefix}dependency"), dependency, limits::MAX_DEPENDENCY)?;
    check_len(&format!("{prefix}tenant"), tenant, limits::MAX_TENANT)?;
    check_len(&format!("{prefix}method"), method, limits::MAX_METHOD)
}

/// A hold for the wire, with the tenant as this caller may see it.
pub fn visible(fleet: &Fleet, h: &Hold, operator: bool) -> pb::Hold {
    let tenant = h.key.tenant();
    if operator {
        hold_to_proto(h, tenant)
    } else {
        hold_to_proto(h, &fleet.hash_tenant(tenant))
    }
}

/// The body of Admit.
pub async fn admit(fleet: &Fleet, policy: &Policy, req: &pb::AdmitRequest) -> Result<pb::AdmitResponse, Status> {
    let catalog = resolve_catalog(policy, &req.catalog, "catalog")?;
    check_scope_fields(&req.dependency, &req.tenant, &req.method, "")?;
    let now = UnixMillis::now();
    let out = fleet
        .admit(catalog, &req.dependency, &req.tenant, &req.method, now)
        .await;
    if out.admitted && req.attempt <= 1 {
        // A first attempt about to be made: the budget's deposit (a retry never adds to it).
        super::budgets::deposit(policy, fleet, catalog, &req.dependency, &req.tenant, 1, now);
    }
    Ok(pb::AdmitResponse {
        admitted: out.admitted,
        // The caller named its own tenant: it sees it in clear.
        hold: out.hold.as_ref().map(|h| hold_to_proto(h, h.key.tenant())),
        retry_at: out.retry_at.map(super::convert::timestamp_from_millis),
        probe_token: out.probe_token.unwrap_or_default(),
    })
}

/// The body of ReportOutcomes. Counts are validated and capped; their
/// first attempts are deposits of the fleet retry budgets.
pub fn report_outcomes(
    fleet: &Fleet,
    policy: &Policy,
    req: &pb::ReportOutcomesRequest,
) -> Result<pb::ReportOutcomesResponse, Status> {
    if req.counts.len() > MAX_OUTCOME_COUNTS {
        return Err(invalid(
            "counts",
            format!("{} entries; the limit is {MAX_OUTCOME_COUNTS}", req.counts.len()),
        ));
    }
    for (i, c) in req.counts.iter().enumerate() {
        resolve_catalog(policy, &c.catalog, &format!("counts[{i}].catalog"))?;
        check_scope_fields(&c.dependency, &c.tenant, &c.method, &format!("counts[{i}]."))?;
    }
    check_len("probe_token", &req.probe_token, MAX_ID)?;
    let requests: u64 = req.counts.iter().map(|c| c.requests.min(MAX_COUNT_PER_REPORT)).sum();
    metrics::counter!(OUTCOME_REQUESTS_TOTAL).increment(requests);
    // First attempts of callers that do not use Admit: the budgets' deposits
    // (a caller using Admit must not report them again).
    let now = UnixMillis::now();
    for c in &req.counts {
        let catalog = resolve_catalog(policy, &c.catalog, "counts")?;
        let n = c.requests.min(MAX_COUNT_PER_REPORT);
        super::budgets::deposit(policy, fleet, catalog, &c.dependency, &c.tenant, n, now);
    }
    let hold = if req.probe_token.is_empty() {
        None
    } else {
        let now = UnixMillis::now();
        let h = fleet
            .report_probe(&req.probe_token, req.probe_succeeded, now)
            .ok_or_else(|| Status::not_found("probe_token: no open circuit in force has this probe"))?;
        Some(hold_to_proto(&h, h.key.tenant()))
    };
    Ok(pb::ReportOutcomesResponse { hold })
}

/// Counter of first attempts reported through ReportOutcomes.
pub const OUTCOME_REQUESTS_TOTAL: &str = "retryd_outcome_requests_total";

/// The body of ListHolds.
pub fn list_holds(fleet: &Fleet, req: &pb::ListHoldsRequest, operator: bool) -> Result<pb::ListHoldsResponse, Status> {
    check_len("catalog", &req.catalog, limits::MAX_CATALOG)?;
    check_scope_fields(&req.dependency, &req.tenant, "", "")?;
    if req.page_size < 0 {
        return Err(invalid("page_size", "must not be negative"));
    }
    let size = match req.page_size {
        0 => PAGE_DEFAULT,
        n => usize::try_from(n).unwrap_or(PAGE_MAX).min(PAGE_MAX),
    };
    let offset = match req.page_token.as_str() {
        "" => 0,
        t => t
            .parse::<usize>()
            .map_err(|_| invalid("page_token", "is not a token this server gave"))?,
    };
    let all = fleet.list(&req.catalog, &req.dependency, &req.tenant, UnixMillis::now());
    let page: Vec<pb::Hold> = all
        .iter()
        .skip(offset)
        .take(size)
        .map(|h| visible(fleet, h, operator))
        .collect();
    let next = offset + page.len();
    Ok(pb::ListHoldsResponse {
        holds: page,
        next_page_token: if next < all.len() {
            next.to_string()
        } else {
            String::new()
        },
    })
}

/// The body of ReleaseHold (the caller is an operator).
pub fn release_hold(fleet: &Fleet, req: &pb::ReleaseHoldRequest) -> Result<pb::ReleaseHoldResponse, Status> {
    check_len("id", &req.id, MAX_ID)?;
    if req.id.is_empty() {
        return Err(invalid("id", "is required"));
    }
    let h = fleet
        .release(&req.id, UnixMillis::now())
        .ok_or_else(|| Status::not_found(format!("no hold {:?} is in force", req.id)))?;
    tracing::info!(hold = %h.id, kind = h.kind.as_str(), dependency = %h.key.dependency, "hold released by an operator");
    Ok(pb::ReleaseHoldResponse {
        hold: Some(hold_to_proto(&h, h.key.tenant())),
    })
}

/// The body of WatchHolds: the holds in force as PLACED, then every change,
/// until the server drains (UNAVAILABLE) or the client goes away.
pub fn watch_holds(
    fleet: Arc<Fleet>,
    req: pb::WatchHoldsRequest,
    operator: bool,
    mut draining: tokio::sync::watch::Receiver<bool>,
) -> Result<WatchStream, Status> {
    check_len("catalog", &req.catalog, limits::MAX_CATALOG)?;
    check_scope_fields(&req.dependency, &req.tenant, "", "")?;
    // Subscribe before the snapshot: a change in between is seen twice, never missed.
    let mut events = fleet.mirror().subscribe();
    let initial = fleet.list(&req.catalog, &req.dependency, &req.tenant, UnixMillis::now());
    let stream = async_stream_of(move |tx| async move {
        for h in &initial {
            let ev = event(pb::HoldEventKind::Placed, visible(&fleet, h, operator));
            if tx.send(Ok(ev)).await.is_err() {
                return;
            }
        }
        loop {
            let drained = *draining.borrow_and_update();
            if drained {
                let _ = tx
                    .send(Err(Status::unavailable(
                        "server is shutting down; watch again elsewhere",
                    )))
                    .await;
                return;
            }
            tokio::select! {
                changed = draining.changed() => {
                    if changed.is_err() {
                        // The server is gone without a drain signal: end quietly.
                        return;
                    }
                }
                received = events.recv() => match received {
                    Ok(e) => {
                        if !matches(&e.hold, &req.catalog, &req.dependency, &req.tenant) {
                            continue;
                        }
                        let kind = match e.kind {
                            HoldEventKind::Placed => pb::HoldEventKind::Placed,
                            HoldEventKind::Extended => pb::HoldEventKind::Extended,
                            HoldEventKind::Lifted => pb::HoldEventKind::Lifted,
                        };
                        if tx.send(Ok(event(kind, visible(&fleet, &e.hold, operator)))).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        // Too slow a reader: say so and end, rather than silently skip events.
                        let _ = tx.send(Err(Status::resource_exhausted(format!(
                            "watch fell {missed} events behind; watch again"
                        )))).await;
                        return;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    });
    Ok(stream)
}

fn event(kind: pb::HoldEventKind, hold: pb::Hold) -> pb::WatchHoldsResponse {
    pb::WatchHoldsResponse {
        kind: kind as i32,
        hold: Some(hold),
    }
}

/// A stream fed by a task through a small channel (backpressure: a slow
/// watcher slows only its own task, and lags out of the broadcast).
fn async_stream_of<F, Fut>(body: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<pb::WatchHoldsResponse, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(body(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
