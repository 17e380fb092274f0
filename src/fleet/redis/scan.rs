//! Reading every stored hold back: SCAN on the one Redis, or on every
//! master of a cluster, with the reads pipelined to the node scanned.

use ::redis::aio::ConnectionLike;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::SingleNodeRoutingInfo;
use ::redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::conn::Conn;
use super::keys;
use crate::core::hold::Hold;

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
