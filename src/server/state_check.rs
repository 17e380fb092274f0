//! `--state` checked at start: a configuration that cannot work (a URL
//! that does not parse, a database index Redis refuses, credentials it
//! refuses) stops the server with exit 2, with or without
//! `--state-required`; a store that is merely unreachable at start is a
//! warning (the fleet keeps deciding from its mirror and keeps trying) unless
//! `--state-required` asks for a fail-fast start (exit 1, the cause named).
//! The store itself (src/fleet/) never fails a call; this is the one place
//! that asks Redis a question before the server listens.

use std::time::Duration;

/// What the check found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProblem {
    /// The configuration is wrong: fix the flag (exit 2).
    Config(String),
    /// The store could not be reached now (exit 1 with `--state-required`).
    Unreachable(String),
}

/// How long the check waits for Redis to answer.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// Checks `--state` `url` by connecting once (selecting its database) and
/// sending PING. `memory` needs no check. Cluster seeds and Sentinel URLs are
/// parsed by the store; here only their reachability is judged, by the
/// store's own connection (see [`wait_connected`]).
pub async fn check(url: &str, timeout: Duration) -> Result<(), StateProblem> {
    let url = url.trim();
    if url == "memory" || !single_redis_url(url) {
        return Ok(());
    }
    let shown = redacted(url);
    let client = redis::Client::open(url).map_err(|e| StateProblem::Config(format!("{shown}: {e}")))?;
    let mut conn = match tokio::time::timeout(timeout, client.get_multiplexed_async_connection()).await {
        Err(_) => {
            return Err(StateProblem::Unreachable(format!(
                "{shown}: no answer within {} s",
                timeout.as_secs()
            )));
        }
        Ok(Err(e)) => return Err(classify(&shown, &e)),
        Ok(Ok(c)) => c,
    };
    match tokio::time::timeout(timeout, redis::cmd("PING").query_async::<String>(&mut conn)).await {
        Err(_) => Err(StateProblem::Unreachable(format!(
            "{shown}: PING had no answer within {} s",
            timeout.as_secs()
        ))),
        Ok(Err(e)) => Err(classify(&shown, &e)),
        Ok(Ok(_)) => Ok(()),
    }
}

/// Waits until `connected()` says the store is connected, for at most
/// `timeout` (for the topologies [`check`] does not dial itself).
pub async fn wait_connected(connected: impl Fn() -> bool, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if connected() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    connected()
}

/// A plain `redis://` or `rediss://` URL of one server (not cluster seeds,
/// not Sentinel), which the check dials itself.
fn single_redis_url(url: &str) -> bool {
    (url.starts_with("redis://") || url.starts_with("rediss://")) && !url.contains(',')
}

/// Errors of Redis that no retry will fix are the configuration's.
fn classify(shown: &str, e: &redis::RedisError) -> StateProblem {
    let text = e.to_string();
    let config = e.kind() == redis::ErrorKind::AuthenticationFailed
        || text.contains("DB index")
        || text.contains("invalid DB")
        || text.contains("WRONGPASS")
        || text.contains("NOAUTH")
        || e.kind() == redis::ErrorKind::InvalidClientConfig;
    if config {
        StateProblem::Config(format!("{shown}: {text}"))
    } else {
        StateProblem::Unreachable(format!("{shown}: {text}"))
    }
}

/// The URL without its password, for messages.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(redacted("redis://u:secret@h:6379/0"), "redis://u:***@h:6379/0");
        assert_eq!(redacted("redis://:secret@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(redacted("redis://h:6379/0"), "redis://h:6379/0");
    }

    #[tokio::test]
    async fn a_url_that_does_not_parse_is_a_configuration_error() {
        let got = check("redis://h:notaport/0", Duration::from_secs(1)).await;
        assert!(matches!(got, Err(StateProblem::Config(_))), "{got:?}");
        assert_eq!(check("memory", Duration::from_secs(1)).await, Ok(()));
    }

    #[tokio::test]
    async fn nothing_listening_is_unreachable() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let got = check(&format!("redis://127.0.0.1:{port}/0"), Duration::from_secs(2)).await;
        assert!(matches!(got, Err(StateProblem::Unreachable(_))), "{got:?}");
    }
}
