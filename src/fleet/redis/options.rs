//! What a Redis store can be told.

use std::fmt;
use std::time::Duration;

use super::conn::Topology;

/// How the Redis store behaves.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Standalone, cluster, or found out on connect.
    pub topology: Topology,
    /// Prefix of every key and of the channel (`[A-Za-z0-9._-]`, ≤ 32 bytes):
    /// fleets with different namespaces can share one Redis.
    pub namespace: String,
    /// Holds queued for writing at most, per lane (dependency-wide holds,
    /// tenant holds); a hold's newer state replaces its queued one, and
    /// beyond the capacity writes are dropped (counted) until the next
    /// anti-entropy pass writes them.
    pub queue_capacity: usize,
    /// How often each replica compares its holds with the store's, both
    /// ways (about 1 s of SCAN at 100 000 holds; jittered ±10 %).
    pub anti_entropy_every: Duration,
    /// Connecting, TLS and handshake included.
    pub connect_timeout: Duration,
    /// One write, one SCAN step, one ping.
    pub command_timeout: Duration,
    /// Taking a probe slot (on the Admit path): past it, this replica decides alone.
    pub probe_timeout: Duration,
    /// A lease of retry-budget room asked by a replica whose lease ran low
    /// near exhaustion: past it nothing is granted, and the scope's retries
    /// stay deferred until a lease is granted or the fallback applies.
    pub lease_timeout: Duration,
    /// First wait before reconnecting; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Longest wait between reconnects.
    pub backoff_max: Duration,
    /// At most one warning per this interval while Redis fails.
    pub warn_every: Duration,
    /// A connected store pings this often, to notice a silent Redis.
    pub ping_every: Duration,
    /// For `rediss://`: a private CA and a client certificate (else the
    /// system roots, and no client certificate).
    pub tls: Option<RedisTls>,
}

/// TLS material for `rediss://` (PEM).
#[derive(Clone, Default)]
pub struct RedisTls {
    /// The CA that signed Redis's certificate, instead of the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate and its key, for Redis with `tls-auth-clients yes`.
    pub client_cert_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca", &self.ca_pem.is_some())
            .field("client_cert", &self.client_cert_pem.is_some())
            .finish()
    }
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            topology: Topology::Auto,
            namespace: "retryd".to_owned(),
            queue_capacity: 10_000,
            anti_entropy_every: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(1),
            command_timeout: Duration::from_millis(500),
            probe_timeout: Duration::from_millis(50),
            lease_timeout: Duration::from_millis(200),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            warn_every: Duration::from_secs(10),
            ping_every: Duration::from_secs(1),
            tls: None,
        }
    }
}
