//! Assembly: binds the listeners, wires health, reflection, metrics and the
//! decision service into one tonic server, and runs it until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic_health::ServingStatus;

use super::accept;
use super::admission::{AdmissionConfig, AdmissionLayer};
use super::config::{MetricsListen, ServeArgs};
use super::conns::{ConnLimits, Registry};
use super::drain::{ABANDONED_TOTAL, InFlight};
use super::message_limit::MessageLimitLayer;
use super::metrics::{self, GrpcMetricsLayer};
use super::panic::CatchPanicLayer;
use super::serve::{self, Serving};
use super::tls::{ServerTls, TlsError};
use super::wire::WireLayer;
use crate::doors::answer::Stalls;
use crate::doors::ledger::{Ledger, Limits};
use crate::doors::overload::SHED_TOTAL;
use crate::doors::peers::Operators;
use crate::fleet::Fleet;
use crate::grpc::{RetryDecisionApi, SERVICE_NAME};
use crate::http::{HttpConfig, HttpDoor};
use crate::service::watch::WatchLimits;
use crate::service::{PolicyHandle, Service, ServiceConfig};

/// What the server needs beyond the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// gRPC address; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Prometheus endpoint address, or off.
    pub metrics_listen: MetricsListen,
    /// Most failures per ClassifyBatch.
    pub max_batch: usize,
    /// Largest request message in bytes.
    pub max_message_bytes: usize,
    /// Time health answers NOT_SERVING while calls are still accepted, after
    /// the shutdown signal and before the drain.
    pub shutdown_delay: Duration,
    /// Time in-flight calls get to finish once the drain begins.
    pub shutdown_grace: Duration,
    /// Most calls in flight over all connections (health not counted); 0: no limit.
    pub max_concurrent_calls: usize,
    /// Most calls in flight on one connection; 0: no limit of its own.
    pub max_calls_per_connection: usize,
    /// Most bytes of requests and answers held, all connections; 0: no limit.
    pub max_buffered_bytes: usize,
    /// Most bytes of requests and answers held for one connection; 0: no limit.
    pub max_buffered_bytes_per_connection: usize,
    /// HTTP/2 streams one connection may have open at once.
    pub max_streams_per_connection: u32,
    /// Time a call's request has to arrive whole.
    pub first_message_timeout: Duration,
    /// Time an answer may go unread before it is dropped.
    pub stall_timeout: Duration,
    /// WatchHolds streams per caller (`--max-watch-streams-per-caller`).
    pub max_watch_streams_per_caller: usize,
    /// WatchHolds streams in all (`--max-watch-streams`).
    pub max_watch_streams: usize,
    /// Time a connection has to send its preface or request line.
    pub handshake_timeout: Duration,
    /// Time a connection may have no open stream; zero: no limit.
    pub idle_connection_timeout: Duration,
    /// Most connections in all; 0: no limit.
    pub max_connections: u32,
    /// Most connections from one IP address; 0: no limit.
    pub max_connections_per_caller: u32,
    /// TLS (and mutual TLS) settings; `None`: plaintext.
    pub tls: Option<ServerTls>,
    /// The HTTP/JSON door on the same port; `None`: gRPC only (`--http false`).
    pub http: Option<HttpConfig>,
    /// The operator console (`--ui`): on the door, or on `ui_listen`.
    pub ui: bool,
    /// The console's own address (`--ui-listen`), instead of the door's port.
    pub ui_listen: Option<SocketAddr>,
}

/// Server HTTP/2 PING interval on an idle connection, and how long the
/// client has to answer: detects dead peers whose connections would
/// otherwise hold their streams' memory forever.
pub const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// See [`HTTP2_KEEPALIVE_INTERVAL`].
pub const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// TCP keepalive on accepted sockets (dead peers behind silent networks).
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

impl ServerConfig {
    /// The server part of `retryd serve`'s flags.
    pub fn from_args(args: &ServeArgs) -> Self {
        ServerConfig {
            listen: args.listen,
            metrics_listen: args.metrics_listen,
            max_batch: usize::try_from(args.max_batch).unwrap_or(usize::MAX),
            max_message_bytes: usize::try_from(args.max_message_bytes).unwrap_or(usize::MAX),
            shutdown_delay: args.shutdown_delay,
            shutdown_grace: args.shutdown_grace,
            max_concurrent_calls: usize::try_from(args.max_concurrent_calls).unwrap_or(usize::MAX),
            max_calls_per_connection: usize::try_from(args.calls_per_connection()).unwrap_or(usize::MAX),
            max_buffered_bytes: usize::try_from(args.max_buffered_bytes).unwrap_or(usize::MAX),
            max_buffered_bytes_per_connection: usize::try_from(args.buffered_bytes_per_connection())
                .unwrap_or(usize::MAX),
            max_streams_per_connection: args.max_streams_per_connection,
            first_message_timeout: args.first_message_timeout,
            stall_timeout: args.stall_timeout,
            max_watch_streams_per_caller: args.fleet.max_watch_streams_per_caller as usize,
            max_watch_streams: args.fleet.max_watch_streams as usize,
            handshake_timeout: args.handshake_timeout,
            idle_connection_timeout: args.idle_connection_timeout,
            max_connections: args.max_connections,
            max_connections_per_caller: args.max_connections_per_caller,
            tls: None,
            http: args.http.then(|| HttpConfig {
                max_message_bytes: usize::try_from(args.max_message_bytes).unwrap_or(usize::MAX),
                first_message_timeout: args.first_message_timeout,
                cors_origins: args.http_cors_origin.clone(),
            }),
            ui: args.ui,
            ui_listen: args.ui_listen,
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener: `grpc`, `metrics` or `ui`.
        what: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The reflection service could not read the descriptor sets.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// A TLS file is unusable.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// A flag's value is unusable.
    #[error("{0}")]
    Config(String),
    /// `--state-required`, and the state store could not be reached at start.
    #[error("{0}")]
    StateUnreachable(String),
    /// The shutdown grace ran out with this many unary calls in flight.
    #[error("shutdown abandoned {0} call(s) still in flight at the end of the grace period")]
    Abandoned(usize),
}

impl ServerError {
    /// Whether the error is the configuration's (exit 2) rather than the
    /// environment's (exit 1).
    pub fn is_config(&self) -> bool {
        matches!(self, ServerError::Tls(_) | ServerError::Config(_))
    }
}

/// A server whose listeners are bound; [`BoundServer::serve`] runs it.
#[derive(Debug)]
pub struct BoundServer {
    tls: Option<serve::Tls>,
    grpc: TcpListener,
    grpc_addr: SocketAddr,
    metrics: Option<(TcpListener, SocketAddr)>,
    console: Option<(TcpListener, SocketAddr)>,
    policy: PolicyHandle,
    config: ServerConfig,
    fleet: Option<(Arc<Fleet>, Operators)>,
    observer: Option<Arc<dyn crate::service::observe::DecisionObserver>>,
}

impl BoundServer {
    /// Shows every decision to `observer` (shadow policy, decision log).
    pub fn with_observer(mut self, observer: Arc<dyn crate::service::observe::DecisionObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Serves with fleet memory (holds, Admit and the hold RPCs).
    pub fn with_fleet(mut self, fleet: Arc<Fleet>, operators: Operators) -> Self {
        self.fleet = Some((fleet, operators));
        self
    }

    /// Binds the gRPC listener and, unless off, the metrics listener.
    /// The TLS files are read (and checked) first.
    pub async fn bind(config: ServerConfig, policy: PolicyHandle) -> Result<Self, ServerError> {
        let tls = config
            .tls
            .as_ref()
            .map(ServerTls::acceptor)
            .transpose()?
            .map(serve::Tls);
        let grpc = bind_listener(config.listen).map_err(|source| ServerError::Bind {
            what: "grpc",
            addr: config.listen,
            source,
        })?;
        let grpc_addr = grpc.local_addr().map_err(|source| ServerError::Bind {
            what: "grpc",
            addr: config.listen,
            source,
        })?;
        let metrics = match config.metrics_listen {
            MetricsListen::Off => None,
            MetricsListen::Addr(addr) => {
                let bind_err = |source| ServerError::Bind {
                    what: "metrics",
                    addr,
                    source,
                };
                let listener = metrics::bind(addr).await.map_err(bind_err)?;
                let local = listener.local_addr().map_err(bind_err)?;
                Some((listener, local))
            }
        };
        let console = match (config.ui, config.ui_listen) {
            (false, Some(_)) => {
                return Err(ServerError::Config(
                    "--ui-listen serves the console, which --ui false turns off: drop one of them".to_owned(),
                ));
            }
            (true, Some(addr)) => {
                let bind_err = |source| ServerError::Bind {
                    what: "ui",
                    addr,
                    source,
                };
                let listener = bind_listener(addr).map_err(bind_err)?;
                let local = listener.local_addr().map_err(bind_err)?;
                Some((listener, local))
            }
            (_, None) => None,
        };
        Ok(BoundServer {
            tls,
            grpc,
            grpc_addr,
            metrics,
            console,
            policy,
            config,
            fleet: None,
            observer: None,
        })
    }

    /// The bound gRPC address (the real port when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The console's own bound address (`--ui-listen`), if any.
    pub fn console_addr(&self) -> Option<SocketAddr> {
        self.console.as_ref().map(|(_, a)| *a)
    }

    /// The bound metrics address, if the endpoint is on.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|(_, a)| *a)
    }

    /// Serves until `shutdown` completes, then: reports NOT_SERVING at once,
    /// keeps accepting and answering for the shutdown delay, then ends
    /// health and WatchHolds streams, stops accepting, and waits up to the
    /// grace period for in-flight calls. Returns `Ok` after a graceful stop
    /// (also when only streams were left at the end of the grace), and
    /// [`ServerError::Abandoned`] when unary calls were still in flight at
    /// the end of the grace (they are counted in
    /// `retryd_shutdown_abandoned_calls_total`).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let BoundServer {
            tls,
            grpc,
            grpc_addr,
            metrics,
            console,
            policy,
            config,
            fleet,
            observer,
        } = self;
        let prometheus = metrics::install();
        let _metrics_upkeep = AbortOnDrop(tokio::spawn(metrics::upkeep(prometheus.clone())));
        let _metrics_task = metrics.map(|(listener, addr)| {
            tracing::info!("metrics on http://{addr}/metrics");
            AbortOnDrop(tokio::spawn(metrics::serve_endpoint(listener, prometheus)))
        });

        let (mut reporter, health) = tonic_health::server::health_reporter();
        reporter.set_service_status("", ServingStatus::Serving).await;
        reporter.set_service_status(SERVICE_NAME, ServingStatus::Serving).await;
        // The HTTP door's /healthz and /readyz read the same statuses.
        let door_health = reporter.clone();

        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::grpc::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::grpc::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()?;
        // Turns true when the drain begins: WatchHolds streams end with UNAVAILABLE.
        let (draining_watch, draining_seen) = tokio::sync::watch::channel(false);
        // One service, both doors onto it.
        let mut service = Service::new(
            policy,
            ServiceConfig {
                max_batch: config.max_batch,
                watch: WatchLimits {
                    per_caller: config.max_watch_streams_per_caller,
                    total: config.max_watch_streams,
                    stall_timeout: config.stall_timeout,
                },
            },
        );
        let mut operators = Arc::new(Operators::default());
        // The console's listener stops when the drain begins.
        let mut console_drain = draining_seen.clone();
        if let Some((fleet, ops)) = fleet {
            service = service.with_fleet(fleet, draining_seen);
            operators = Arc::new(ops);
        }
        if let Some(observer) = observer {
            service = service.with_observer(observer);
        }
        let api = RetryDecisionApi::from_service(service.clone(), Arc::clone(&operators));
        let api = crate::grpc::server(api, config.max_message_bytes);

        let (draining_tx, draining_rx) = tokio::sync::oneshot::channel::<()>();
        let signal = async move {
            shutdown.await;
            // NOT_SERVING at once (Check answers it, Watch streams see it),
            // while the listener keeps accepting and answering: load
            // balancers and Kubernetes endpoints stop sending new calls
            // before the listener closes.
            tracing::info!(
                delay = ?config.shutdown_delay,
                grace = ?config.shutdown_grace,
                "shutting down: NOT_SERVING; still answering for the shutdown delay, then draining"
            );
            reporter.set_service_status("", ServingStatus::NotServing).await;
            reporter
                .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
                .await;
            if !config.shutdown_delay.is_zero() {
                tokio::time::sleep(config.shutdown_delay).await;
                tracing::info!("shutdown delay over: no longer accepting; draining in-flight calls");
            }
            // Clearing ends every Watch stream (after it has seen NOT_SERVING),
            // so watchers do not hold the drain open.
            reporter.clear_service_status("").await;
            reporter.clear_service_status(SERVICE_NAME).await;
            draining_watch.send_replace(true);
            let _ = draining_tx.send(());
        };

        ::metrics::counter!(SHED_TOTAL).increment(0);
        let unary_in_flight = InFlight::default();
        ::metrics::counter!(crate::doors::answer::STALLED_TOTAL).increment(0);
        let ledger = Ledger::new(Limits {
            calls: config.max_concurrent_calls,
            calls_per_connection: config.max_calls_per_connection,
            bytes: config.max_buffered_bytes,
            bytes_per_connection: config.max_buffered_bytes_per_connection,
        });
        let stalls = Stalls::new();
        // The door takes its tickets from the same ledger as gRPC calls, and
        // its answers are watched for stalls like theirs. The console's own
        // listener needs it even when the gRPC port serves no HTTP.
        let door_config = config.http.clone().or_else(|| {
            console.is_some().then(|| HttpConfig {
                max_message_bytes: config.max_message_bytes,
                first_message_timeout: config.first_message_timeout,
                cors_origins: Vec::new(),
            })
        });
        let door = door_config.map(|http| {
            HttpDoor::new(
                service,
                operators,
                door_health,
                http,
                Arc::clone(&ledger),
                stalls.clone(),
            )
        });
        let _stall_sweeper = AbortOnDrop(tokio::spawn(stalls.clone().sweep(config.stall_timeout)));
        let _ledger_gauges = AbortOnDrop(tokio::spawn(publish_ledger(Arc::clone(&ledger))));
        let admission_config = AdmissionConfig {
            first_message_timeout: config.first_message_timeout,
            max_message_bytes: config.max_message_bytes,
            max_batch: config.max_batch,
        };
        // The gRPC port's decision calls are served where they are admitted;
        // the console's listener passes every call on to its own routes (it serves none of them).
        let admission = |direct| AdmissionLayer::new(Arc::clone(&ledger), stalls.clone(), admission_config, direct);
        let direct = api.direct();
        match &config.tls {
            Some(ServerTls { client_ca: Some(_), .. }) => {
                tracing::info!("listening on {grpc_addr} (TLS, client certificates required)")
            }
            Some(_) => tracing::info!("listening on {grpc_addr} (TLS)"),
            None => tracing::info!("listening on {grpc_addr}"),
        }
        if config.http.is_some() {
            tracing::info!("HTTP/JSON on the same port: /v1/*, /healthz, /readyz (OpenAPI at /v1/openapi.json)");
        }
        // retryd's own accept loop: handshake deadline, per-caller limit,
        // shedding near the descriptor limit, a spare descriptor (conns).
        let limits = ConnLimits::new(
            (config.handshake_timeout, config.idle_connection_timeout),
            (config.max_connections, config.max_connections_per_caller),
            nofile_limit(),
            accept::descriptors_in_use(),
            config.tls.is_some(),
        );
        tracing::info!(
            handshake_timeout = ?limits.handshake_timeout,
            idle_timeout = ?limits.idle_timeout,
            max_total = limits.max_total,
            max_per_caller = limits.max_per_caller,
            shed_at = limits.shed_at,
            "connections: un-handshaken ones are shed beyond shed_at open connections"
        );
        let registry = Registry::new(limits);
        let _closures_report = AbortOnDrop(tokio::spawn(Arc::clone(&registry).report_every_10s()));
        let incoming = accept::incoming(grpc, Arc::clone(&registry), TCP_KEEPALIVE);
        let mut routes = tonic::service::Routes::builder();
        routes
            .add_service(health)
            .add_service(api)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha);
        let mut router = routes.routes().into_axum_router();
        if let Some(door) = door.as_ref().filter(|_| config.http.is_some()) {
            // Routed by path: the door's paths (crate::http::is_http_path) here, gRPC's to tonic.
            router = router
                .route_service("/v1/{*rest}", door.clone())
                .route_service("/healthz", door.clone())
                .route_service("/readyz", door.clone());
            let ui_here = config.ui && console.is_none();
            router = crate::http::ui::route(router, ui_here);
            if ui_here {
                tracing::info!("operator console at /ui/ on the same port");
            }
        }
        let layers = |direct| {
            tower::ServiceBuilder::new()
                .layer(GrpcMetricsLayer::new(unary_in_flight.clone()))
                .layer(WireLayer)
                .layer(admission(direct))
                .layer(MessageLimitLayer::new(config.max_message_bytes))
                .layer(CatchPanicLayer)
        };
        let keepalive = (HTTP2_KEEPALIVE_INTERVAL, HTTP2_KEEPALIVE_TIMEOUT);
        // The console's own listener: the same connection rules, layers and
        // TLS as the gRPC port, its pages and the routes it uses only.
        let _console_task = console.zip(door).map(|((listener, addr), door)| {
            let scheme = if tls.is_some() { "https" } else { "http" };
            tracing::info!("operator console on {scheme}://{addr}/ui/ (its own listener)");
            let serving = Serving {
                builder: serve::builder(config.max_streams_per_connection, true, keepalive),
                stack: layers(None).service(tonic::service::Routes::from(crate::http::ui::own_router(&door)).prepare()),
                tls: tls.clone(),
                registry: Arc::clone(&registry),
            };
            let incoming = accept::incoming(listener, Arc::clone(&registry), TCP_KEEPALIVE);
            AbortOnDrop(tokio::spawn(serve::serve(incoming, serving, async move {
                let _ = console_drain.wait_for(|draining| *draining).await;
            })))
        });
        let serving = Serving {
            // The HTTP/JSON door takes HTTP/1.1 too (gRPC stays HTTP/2).
            builder: serve::builder(config.max_streams_per_connection, config.http.is_some(), keepalive),
            stack: layers(Some(direct)).service(tonic::service::Routes::from(router).prepare()),
            tls,
            registry,
        };
        let server = serve::serve(incoming, serving, signal);
        tokio::pin!(server);

        tokio::select! {
            () = &mut server => return finished(),
            Ok(()) = draining_rx => {}
        }
        match tokio::time::timeout(config.shutdown_grace, server).await {
            Ok(()) => finished(),
            Err(_) => {
                let abandoned = unary_in_flight.count();
                ::metrics::counter!(ABANDONED_TOTAL).increment(u64::try_from(abandoned).unwrap_or(u64::MAX));
                tracing::warn!(grace = ?config.shutdown_grace, abandoned, "grace period over; abandoning calls still in flight");
                if abandoned > 0 {
                    Err(ServerError::Abandoned(abandoned))
                } else {
                    Ok(())
                }
            }
        }
    }
}

fn finished() -> Result<(), ServerError> {
    tracing::info!("stopped");
    Ok(())
}

/// Binds and serves until `shutdown` completes (see [`BoundServer::serve`]).
pub async fn run(
    config: ServerConfig,
    policy: PolicyHandle,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    BoundServer::bind(config, policy).await?.serve(shutdown).await
}

/// The gRPC listener, with a backlog of 4 096 (the kernel caps it at
/// `net.core.somaxconn`): under a burst of connects the kernel keeps them
/// queued instead of dropping their handshakes, which clients would
/// retransmit seconds later (tokio's default backlog is 1 024).
fn bind_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// The soft `RLIMIT_NOFILE` now (raised at start, see [`accept::raise_nofile`]).
fn nofile_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 20)
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sets the ledger's gauges every 250 ms (its peak is kept by the ledger
/// itself, so a sample missed between two publications is not lost).
async fn publish_ledger(ledger: Arc<Ledger>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        ledger.publish();
    }
}
