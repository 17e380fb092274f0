//! Assembly: binds the listeners, wires health, reflection, metrics and the
//! decision service into one tonic server, and runs it until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

use super::config::{MetricsListen, ServeArgs};
use super::message_limit::MessageLimitLayer;
use super::metrics::{self, GrpcMetricsLayer};
use super::panic::CatchPanicLayer;
use crate::grpc::pb::retry_decision_service_server::RetryDecisionServiceServer;
use crate::grpc::{PolicyHandle, RetryDecisionApi, SERVICE_NAME, ServiceConfig};

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
    /// Time in-flight calls get to finish after shutdown starts.
    pub shutdown_grace: Duration,
}

impl ServerConfig {
    /// The server part of `retryd serve`'s flags.
    pub fn from_args(args: &ServeArgs) -> Self {
        ServerConfig {
            listen: args.listen,
            metrics_listen: args.metrics_listen,
            max_batch: usize::try_from(args.max_batch).unwrap_or(usize::MAX),
            max_message_bytes: usize::try_from(args.max_message_bytes).unwrap_or(usize::MAX),
            shutdown_grace: args.shutdown_grace,
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener: `grpc` or `metrics`.
        what: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The reflection service could not read the descriptor sets.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The gRPC transport failed.
    #[error("grpc server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// A server whose listeners are bound; [`BoundServer::serve`] runs it.
#[derive(Debug)]
pub struct BoundServer {
    grpc: TcpListener,
    grpc_addr: SocketAddr,
    metrics: Option<(TcpListener, SocketAddr)>,
    policy: PolicyHandle,
    config: ServerConfig,
}

impl BoundServer {
    /// Binds the gRPC listener and, unless off, the metrics listener.
    pub async fn bind(config: ServerConfig, policy: PolicyHandle) -> Result<Self, ServerError> {
        let grpc = TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServerError::Bind {
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
        Ok(BoundServer {
            grpc,
            grpc_addr,
            metrics,
            policy,
            config,
        })
    }

    /// The bound gRPC address (the real port when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The bound metrics address, if the endpoint is on.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|(_, a)| *a)
    }

    /// Serves until `shutdown` completes, then: reports NOT_SERVING (ending
    /// health watches), stops accepting, and waits up to the grace period for
    /// in-flight calls. Returns `Ok` after a graceful stop, also when the
    /// grace period ran out (that is logged).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let BoundServer {
            grpc,
            grpc_addr,
            metrics,
            policy,
            config,
        } = self;
        let prometheus = metrics::install();
        let _metrics_task = metrics.map(|(listener, addr)| {
            tracing::info!("metrics on http://{addr}/metrics");
            AbortOnDrop(tokio::spawn(metrics::serve_endpoint(listener, prometheus)))
        });

        let (mut reporter, health) = tonic_health::server::health_reporter();
        reporter.set_service_status("", ServingStatus::Serving).await;
        reporter.set_service_status(SERVICE_NAME, ServingStatus::Serving).await;

        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::grpc::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::grpc::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()?;
        let api = RetryDecisionServiceServer::new(RetryDecisionApi::new(
            policy,
            ServiceConfig {
                max_batch: config.max_batch,
            },
        ))
        .max_decoding_message_size(config.max_message_bytes);

        let (draining_tx, draining_rx) = tokio::sync::oneshot::channel::<()>();
        let signal = async move {
            shutdown.await;
            tracing::info!(grace = ?config.shutdown_grace, "shutting down: NOT_SERVING, draining in-flight calls");
            reporter.set_service_status("", ServingStatus::NotServing).await;
            reporter
                .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
                .await;
            // Clearing ends every Watch stream (after it has seen NOT_SERVING),
            // so watchers do not hold the drain open.
            reporter.clear_service_status("").await;
            reporter.clear_service_status(SERVICE_NAME).await;
            let _ = draining_tx.send(());
        };

        tracing::info!("listening on {grpc_addr}");
        let incoming = TcpIncoming::from(grpc).with_nodelay(Some(true));
        let server = tonic::transport::Server::builder()
            .layer(GrpcMetricsLayer)
            .layer(MessageLimitLayer::new(config.max_message_bytes))
            .layer(CatchPanicLayer)
            .add_service(health)
            .add_service(api)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .serve_with_incoming_shutdown(incoming, signal);
        tokio::pin!(server);

        tokio::select! {
            result = &mut server => return finished(result),
            Ok(()) = draining_rx => {}
        }
        match tokio::time::timeout(config.shutdown_grace, server).await {
            Ok(result) => finished(result),
            Err(_) => {
                tracing::warn!(grace = ?config.shutdown_grace, "grace period over; abandoning calls still in flight");
                Ok(())
            }
        }
    }
}

fn finished(result: Result<(), tonic::transport::Error>) -> Result<(), ServerError> {
    result?;
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

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
