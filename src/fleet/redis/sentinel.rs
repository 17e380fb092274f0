//! `redis+sentinel://`: the master's address, asked of the sentinels on
//! every (re)connect, so a failover is a reconnect and a resync.

use std::fmt;
use std::sync::Arc;

use ::redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use ::redis::{Client, ConnectionAddr};

use super::RedisTls;
use super::tls::certificates;

/// The sentinels of one master, asked for its address on every connect.
#[derive(Clone)]
pub(super) struct Sentinels {
    pub(super) client: Arc<tokio::sync::Mutex<SentinelClient>>,
    pub(super) describe: String,
}

impl fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe)
    }
}

/// Parses `redis+sentinel://[user:pass@]host[:port][,host[:port]…]/service[/db]`
/// (`rediss+sentinel://`: TLS to the master): the credentials and db are
/// the master's; sentinels listen on 26379 unless told.
pub(super) fn parse_sentinel(url: &str, tls: Option<&RedisTls>) -> Result<Sentinels, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_addresses_parse_with_default_ports_credentials_and_db() {
        let s = parse_sentinel("redis+sentinel://u:p%40ss@s1,s2:26380,[::1]:26381/mymaster/3", None).unwrap();
        assert_eq!(s.describe, "redis+sentinel://s1:26379,s2:26380,::1:26381/mymaster/3");
        assert!(!format!("{s:?}").contains("p%40ss"), "credentials stay out of logs");
        let tls = parse_sentinel("rediss+sentinel://s1/m", Some(&RedisTls::default())).unwrap();
        assert_eq!(tls.describe, "rediss+sentinel://s1:26379/m/0");
        for bad in [
            "redis+sentinel://s1",
            "redis+sentinel://s1/",
            "redis+sentinel:///m",
            "redis+sentinel://s1:notaport/m",
            "redis+sentinel://s1/m/x",
            "redis+sentinel://[::1/m",
            "redis://s1/m",
        ] {
            assert!(parse_sentinel(bad, None).is_err(), "{bad} accepted");
        }
    }
}
