//! Connections: one Redis or a Redis Cluster behind one command connection,
//! and a subscription on one node (cluster pub/sub reaches every node).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use ::redis::cluster::{ClusterClient, ClusterClientBuilder};
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::SingleNodeRoutingInfo;
use ::redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use ::redis::{AsyncConnectionConfig, Client, Cmd, ConnectionAddr, Pipeline, RedisFuture, RedisResult, Value};

use ::redis::{ClientTlsConfig, TlsCertificates};

use super::{RedisTls, keys};
use crate::core::hold::Hold;

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

/// The sentinels of one master, asked for its address on every connect.
#[derive(Clone)]
struct Sentinels {
    client: Arc<tokio::sync::Mutex<SentinelClient>>,
    describe: String,
}

impl fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe)
    }
}

/// Parses `redis+sentinel://[user:pass@]host[:port][,host[:port]…]/service[/db]`
/// (`rediss+sentinel://`: TLS to the master): the credentials and db are
/// the master's; sentinels listen on 26379 unless told.
fn parse_sentinel(url: &str, tls: Option<&RedisTls>) -> Result<Sentinels, String> {
    let (secure, rest) = if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("redis+sentinel://") {
        (false, rest)
    } else {
        return Err("not a redis+sentinel:// address".to_owned());
    };
    let (auth, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, path) = rest
        .split_once('/')
        .ok_or("redis+sentinel://…/<service name> is missing the service name")?;
    let mut path = path.split('/');
    let service = path
        .next()
        .filter(|s| !s.is_empty())
        .ok_or("redis+sentinel://: empty service name")?;
    let db = match path.next().filter(|d| !d.is_empty()) {
        Some(d) => d
            .parse::<i64>()
            .map_err(|_| format!("redis+sentinel://: db {d:?} is not a number"))?,
        None => 0,
    };
    let mut addrs = Vec::new();
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        // host, host:port, [v6], [v6]:port
        let (h, port) = match host.strip_prefix('[') {
            Some(v6) => match v6.split_once(']') {
                Some((h, "")) => (h, None),
                Some((h, p)) => (h, Some(p.strip_prefix(':').unwrap_or(p))),
                None => return Err(format!("sentinel {host:?}: unclosed [")),
            },
            None => match host.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (host, None),
            },
        };
        let port = match port {
            Some(p) => p.parse::<u16>().map_err(|_| format!("sentinel {host:?}: bad port"))?,
            None => 26379,
        };
        addrs.push(ConnectionAddr::Tcp(h.to_owned(), port));
    }
    if addrs.is_empty() {
        return Err("redis+sentinel:// names no sentinel".to_owned());
    }
    let mut builder = SentinelClientBuilder::new(addrs.clone(), service, SentinelServerType::Master)
        .map_err(|e| e.to_string())?
        .set_client_to_redis_db(db);
    if let Some(auth) = auth {
        // The credentials, URL-decoded as the crate decodes them.
        let probe = Client::open(format!("redis://{auth}@localhost/")).map_err(|e| format!("credentials: {e}"))?;
        let settings = probe.get_connection_info().redis_settings();
        if let Some(user) = settings.username() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(pass) = settings.password() {
            builder = builder.set_client_to_redis_password(pass);
        }
    }
    if secure {
        builder = builder.set_client_to_redis_tls_mode(::redis::TlsMode::Secure);
        if let Some(tls) = tls {
            builder = builder.set_client_to_redis_certificates(certificates(tls));
        }
    }
    let client = builder.build().map_err(|e| e.to_string())?;
    let hosts: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    Ok(Sentinels {
        client: Arc::new(tokio::sync::Mutex::new(client)),
        describe: format!(
            "{}://{}/{service}/{db}",
            if secure { "rediss+sentinel" } else { "redis+sentinel" },
            hosts.join(",")
        ),
    })
}

fn certificates(tls: &RedisTls) -> TlsCertificates {
    TlsCertificates {
        client_tls: tls.client_cert_pem.as_ref().map(|(cert, key)| ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        }),
        root_cert: tls.ca_pem.clone(),
    }
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

/// A stored hold's `id`, `s` and `j` fields, as HMGET answers them.
type StoredFields = (Option<String>, Option<String>, Option<Vec<u8>>);

/// Keys per SCAN step, and per pipeline of reads.
const SCAN_COUNT: usize = 500;

/// Every hold stored under `ns` (on every master of a cluster).
pub async fn scan_holds(conn: &mut Conn, ns: &str) -> RedisResult<Vec<Hold>> {
    let pattern = keys::hold_pattern(ns);
    let mut holds = Vec::new();
    match conn {
        Conn::Single(c) => scan_node(c, &pattern, &mut holds).await?,
        Conn::Cluster(c) => {
            for (host, port) in masters(c).await? {
                let mut route = RoutedConn {
                    conn: c.clone(),
                    route: SingleNodeRoutingInfo::ByAddress { host, port },
                };
                scan_node(&mut route, &pattern, &mut holds).await?;
            }
        }
    }
    Ok(holds)
}

/// The masters of a cluster, from `CLUSTER NODES`.
async fn masters(c: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let nodes: String = ::redis::cmd("CLUSTER").arg("NODES").query_async(c).await?;
    let mut out = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        if !flags.split(',').any(|f| f == "master") || flags.split(',').any(|f| f == "fail" || f == "noaddr") {
            continue;
        }
        // ip:port@cport[,hostname]
        let hostport = addr.split(['@', ',']).next().unwrap_or_default();
        if let Some((host, port)) = hostport.rsplit_once(':') {
            if let Ok(port) = port.parse::<u16>() {
                out.push((host.to_owned(), port));
            }
        }
    }
    Ok(out)
}

/// A cluster connection whose commands all go to one node (for SCAN).
struct RoutedConn {
    conn: ClusterConnection,
    route: SingleNodeRoutingInfo,
}

impl ConnectionLike for RoutedConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let route = ::redis::cluster_routing::RoutingInfo::SingleNode(self.route.clone());
        Box::pin(self.conn.route_command(cmd.clone(), route))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(
            self.conn
                .route_pipeline(pipeline.clone(), offset, count, self.route.clone()),
        )
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// SCANs one node and reads the holds it has (a pipeline to that node per
/// step; a slot moving meanwhile fails the resync, which is retried).
async fn scan_node<C: ConnectionLike + Send>(node: &mut C, pattern: &str, holds: &mut Vec<Hold>) -> RedisResult<()> {
    let mut cursor: u64 = 0;
    loop {
        let (next, found): (u64, Vec<String>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(node)
            .await?;
        let found: Vec<String> = found.into_iter().filter(|k| keys::kind_of_key(k).is_some()).collect();
        if !found.is_empty() {
            let mut pipe = ::redis::pipe();
            for k in &found {
                pipe.cmd("HMGET").arg(k).arg("id").arg("s").arg("j");
            }
            let values: Vec<StoredFields> = pipe.query_async(node).await?;
            for (id, since, json) in values {
                if let (Some(id), Some(since), Some(json)) = (id, since, json) {
                    if let Some(h) = keys::decode_hold(&id, &since, &json) {
                        holds.push(h);
                    }
                }
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}
