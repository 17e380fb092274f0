//! Connections: one Redis or a Redis Cluster behind one command connection,
//! and a subscription on one node (cluster pub/sub reaches every node).

use std::time::Duration;

use ::redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use ::redis::cluster::{ClusterClient, ClusterClientBuilder};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::RedisTls;
use super::sentinel::{Sentinels, parse_sentinel};
use super::tls::certificates;

/// Which topology to expect behind the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Topology {
    /// A single address is asked (`INFO cluster`) on connect; several
    /// comma-separated addresses are cluster seeds.
    #[default]
    Auto,
    /// One Redis (or a proxy in front of several).
    Standalone,
    /// A Redis Cluster; the addresses are seeds.
    Cluster,
}

/// A command connection, to one Redis or to a cluster.
#[derive(Clone)]
pub enum Conn {
    /// One Redis.
    Single(MultiplexedConnection),
    /// A Redis Cluster (commands routed by key).
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Where to connect: the clients built from the addresses at startup.
#[derive(Debug, Clone)]
pub struct Target {
    /// One client per address given (cluster seeds, or the one Redis).
    pub nodes: Vec<Client>,
    /// The topology asked for.
    pub topology: Topology,
    /// TLS material for a cluster's nodes.
    certs: Option<RedisTls>,
    /// Sentinels that name the master, for `redis+sentinel://`.
    sentinel: Option<Sentinels>,
}

/// How long connecting and each command may take.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Connecting (TCP, TLS, HELLO/AUTH).
    pub connect: Duration,
    /// One command's answer.
    pub response: Duration,
}

impl Target {
    /// Clients for the comma-separated `url` (validated now, nothing dialled).
    pub fn parse(url: &str, topology: Topology, tls: Option<&RedisTls>) -> Result<Target, String> {
        if url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://") {
            return Ok(Target {
                nodes: Vec::new(),
                topology: Topology::Standalone,
                certs: tls.cloned(),
                sentinel: Some(parse_sentinel(url, tls)?),
            });
        }
        let nodes = url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| {
                match tls {
                    Some(tls) if u.starts_with("rediss://") => Client::build_with_tls(u, certificates(tls)),
                    _ => Client::open(u),
                }
                .map_err(|e| format!("{}: {e}", redact(u)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if nodes.is_empty() {
            return Err("no Redis address".to_owned());
        }
        if nodes.len() > 1 && topology == Topology::Standalone {
            return Err("several Redis addresses given for a standalone Redis".to_owned());
        }
        let target = Target {
            nodes,
            topology,
            certs: tls.cloned(),
            sentinel: None,
        };
        if target.topology == Topology::Cluster || target.nodes.len() > 1 {
            target
                .cluster_client(Timeouts {
                    connect: Duration::from_secs(1),
                    response: Duration::from_secs(1),
                })
                .map_err(|e| e.to_string())?;
        }
        Ok(target)
    }

    fn cluster_client(&self, t: Timeouts) -> RedisResult<ClusterClient> {
        let mut builder = ClusterClientBuilder::new(self.nodes.iter().map(|c| c.get_connection_info().clone()))
            .connection_timeout(t.connect)
            .response_timeout(t.response)
            .retries(2)
            .min_retry_wait(10)
            .max_retry_wait(100);
        if let Some(tls) = &self.certs {
            builder = builder.certs(certificates(tls));
        }
        builder.build()
    }

    /// The addresses without credentials, for logs.
    pub fn describe(&self) -> String {
        if let Some(s) = &self.sentinel {
            return s.describe.clone();
        }
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|c| {
                let info = c.get_connection_info();
                let scheme = match info.addr() {
                    ::redis::ConnectionAddr::TcpTls { .. } => "rediss",
                    ::redis::ConnectionAddr::Unix(_) => "redis+unix",
                    _ => "redis",
                };
                format!("{scheme}://{}/{}", info.addr(), info.redis_settings().db())
            })
            .collect();
        addrs.join(",")
    }

    /// A command connection (to the cluster when asked for or found, to
    /// the master the sentinels name), and the nodes to subscribe on.
    pub async fn connect(&self, t: Timeouts) -> RedisResult<(Conn, Vec<Client>)> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(t.connect))
            .set_response_timeout(Some(t.response));
        if let Some(sentinel) = &self.sentinel {
            let master = sentinel.client.lock().await.async_get_client().await?;
            let conn = master.get_multiplexed_async_connection_with_config(&config).await?;
            return Ok((Conn::Single(conn), vec![master]));
        }
        let cluster = match self.topology {
            Topology::Cluster => true,
            Topology::Auto if self.nodes.len() > 1 => true,
            Topology::Standalone | Topology::Auto => false,
        };
        if cluster {
            let conn = self.cluster_client(t)?.get_async_connection().await?;
            return Ok((Conn::Cluster(conn), self.nodes.clone()));
        }
        let mut single = self
            .nodes
            .first()
            .ok_or_else(no_node)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        if self.topology == Topology::Auto {
            let info: String = ::redis::cmd("INFO").arg("cluster").query_async(&mut single).await?;
            if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
                let conn = self.cluster_client(t)?.get_async_connection().await?;
                return Ok((Conn::Cluster(conn), self.nodes.clone()));
            }
        }
        Ok((Conn::Single(single), self.nodes.clone()))
    }
}

/// A subscription to `channel` on the first of `nodes` that answers (in a
/// cluster, a PUBLISH on any node reaches every node).
pub async fn subscribe(nodes: &[Client], channel: &str) -> RedisResult<PubSub> {
    let mut last = no_node();
    for node in nodes {
        match node.get_async_pubsub().await {
            Ok(mut pubsub) => {
                pubsub.subscribe(channel).await?;
                return Ok(pubsub);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn no_node() -> ::redis::RedisError {
    ::redis::RedisError::from((::redis::ErrorKind::Client, "no Redis address"))
}

/// `url` with any password replaced, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}
