//! What a state-changing request (POST, DELETE) must show before its
//! route runs: a JSON body (POST; a form or `text/plain` post is what a
//! cross-site page may send without a preflight), and, when it comes from
//! a browser page (it has an `Origin`), that page's origin must be this
//! server's own or one the operator listed with `--http-cors-origin`.
//!
//! The browser already refuses a cross-site JSON post or a DELETE whose
//! preflight retryd does not answer; this check refuses them on the server
//! too, so a lax CORS setting or an ambient credential the browser sends
//! unasked (an mTLS client certificate of an operator) cannot make a
//! foreign page change anything. `--http-cors-origin '*'` lets any page
//! post decisions (what it is for), but never release a hold: releasing
//! takes this server's own page or an origin listed by name.
//!
//! Requests without `Origin` (curl, client libraries, gRPC-Web proxies)
//! are not browsers' cross-site requests and pass.

use http::{HeaderMap, Method, Uri, header};
use tonic::Code;

use super::error::ApiError;

/// 415 unless the request says its body is `application/json`.
pub fn check_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers.get(header::CONTENT_TYPE);
    let is_json = given
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if is_json {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(given))
    }
}

/// 403 for a POST or DELETE from a browser page of another origin than
/// this server's (its `Host`, the `:authority` of HTTP/2, or a proxy's
/// `X-Forwarded-Host`) unless `cors_origins` lists it (`*` counts for POST
/// only). Other methods change nothing and pass.
pub fn check_origin(method: &Method, uri: &Uri, headers: &HeaderMap, cors_origins: &[String]) -> Result<(), ApiError> {
    if *method != Method::POST && *method != Method::DELETE {
        return Ok(());
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or_default();
    let listed = cors_origins
        .iter()
        .any(|o| o == origin || (o == "*" && *method == Method::POST));
    let own = authority_of(origin).is_some_and(|from| {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let forwarded = headers
            .get("x-forwarded-host")
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.split(',').next());
        let authority = uri.authority().map(|a| a.as_str());
        [host, forwarded, authority]
            .into_iter()
            .flatten()
            .any(|h| same_authority(&from, h.trim()))
    });
    if own || listed {
        return Ok(());
    }
    Err(ApiError::new(
        Code::PermissionDenied,
        format!(
            "origin: {origin:?} is neither this server's own origin nor one of --http-cors-origin{}; \
             a page of another site may not change anything here",
            if *method == Method::DELETE {
                " named (\"*\" does not let pages release holds)"
            } else {
                ""
            }
        ),
    ))
}

/// `host[:port]` of an origin (`scheme://host[:port]`), the default port
/// of its scheme written out; `None` for `null` and anything malformed.
fn authority_of(origin: &str) -> Option<String> {
    let (scheme, rest) = origin.split_once("://")?;
    if rest.is_empty() || rest.contains('/') {
        return None;
    }
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    Some(with_port(rest, default))
}

/// Whether an origin's authority (port written out) is `host` (as the
/// request names it, its port possibly left out: 80 or 443).
fn same_authority(from: &str, host: &str) -> bool {
    let port = from.rsplit_once(':').map(|(_, p)| p).unwrap_or_default();
    from.eq_ignore_ascii_case(&with_port(host, port))
}

/// `authority` with `port` added when it names none (IPv6 literals kept in brackets).
fn with_port(authority: &str, port: &str) -> String {
    let has_port = match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.contains(':'),
    };
    if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(method: Method, origin: Option<&str>, host: &str, cors: &[&str]) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, host.parse().unwrap());
        if let Some(o) = origin {
            headers.insert(header::ORIGIN, o.parse().unwrap());
        }
        let cors: Vec<String> = cors.iter().map(|s| (*s).to_owned()).collect();
        check_origin(&method, &Uri::from_static("/v1/holds/x"), &headers, &cors).is_ok()
    }

    #[test]
    fn own_origin_passes_and_foreign_is_refused() {
        let own = Some("http://127.0.0.1:8080");
        assert!(check(Method::DELETE, own, "127.0.0.1:8080", &[]));
        assert!(check(
            Method::POST,
            Some("HTTP://LocalHost:8080"),
            "localhost:8080",
            &[]
        ));
        assert!(check(
            Method::POST,
            Some("https://retryd.example"),
            "retryd.example",
            &[]
        ));
        assert!(check(Method::POST, Some("http://[::1]:9"), "[::1]:9", &[]));
        assert!(!check(Method::POST, Some("http://[::1]:9"), "[::1]:10", &[]));
        assert!(!check(
            Method::DELETE,
            Some("https://evil.example"),
            "127.0.0.1:8080",
            &[]
        ));
        assert!(!check(
            Method::POST,
            Some("http://127.0.0.1:8081"),
            "127.0.0.1:8080",
            &[]
        ));
        assert!(!check(
            Method::POST,
            Some("https://retryd.example"),
            "retryd.example:80",
            &[]
        ));
        assert!(!check(Method::POST, Some("null"), "127.0.0.1:8080", &[]));
        assert!(!check(
            Method::POST,
            Some("http://127.0.0.1:8080/x"),
            "127.0.0.1:8080",
            &[]
        ));
    }

    #[test]
    fn no_origin_and_reads_pass() {
        assert!(check(Method::DELETE, None, "127.0.0.1:8080", &[]));
        assert!(check(Method::GET, Some("https://evil.example"), "127.0.0.1:8080", &[]));
    }

    #[test]
    fn cors_origins_named_pass_and_star_only_for_posts() {
        let dash = Some("https://dash.example");
        assert!(check(Method::DELETE, dash, "retryd:50051", &["https://dash.example"]));
        assert!(check(Method::POST, dash, "retryd:50051", &["*"]));
        assert!(!check(Method::DELETE, dash, "retryd:50051", &["*"]));
        assert!(!check(Method::POST, dash, "retryd:50051", &["https://other.example"]));
    }

    #[test]
    fn a_proxy_forwarded_host_counts() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "10.0.0.7:50051".parse().unwrap());
        headers.insert(header::ORIGIN, "https://retryd.example".parse().unwrap());
        let uri = Uri::from_static("/v1/classify:explain");
        assert!(check_origin(&Method::POST, &uri, &headers, &[]).is_err());
        headers.insert("x-forwarded-host", "retryd.example".parse().unwrap());
        assert!(check_origin(&Method::POST, &uri, &headers, &[]).is_ok());
    }
}
