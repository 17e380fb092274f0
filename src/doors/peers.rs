//! Who is calling, read the same way by both doors from the connection
//! info tonic's server puts in a request's extensions: the peer's address,
//! its client certificate's identities, and whether it is an operator.

use std::net::IpAddr;

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
    /// Whether the caller whose request has these headers and connection
    /// extensions (as tonic's server sets them, for gRPC and HTTP alike) is
    /// an operator: the one rule of the gRPC and HTTP doors.
    pub fn allows_parts(&self, headers: &http::HeaderMap, extensions: &http::Extensions) -> bool {
        if let Some(token) = &self.token {
            // Every Authorization field is tried (a proxy may add its own).
            if headers
                .get_all(http::header::AUTHORIZATION)
                .iter()
                .filter_map(|v| bearer_token(v.as_bytes()))
                .any(|given| constant_time_eq(given, token.as_bytes()))
            {
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

/// The token of an `Authorization: Bearer <token>` field value, read as
/// RFC 9110 says (§11.4, §11.6.2, §5.5): the field's surrounding whitespace
/// ignored, the scheme matched case-insensitively, then one or more
/// spaces. The same bytes over HTTP/1.1 (where hyper already trims) and
/// gRPC's HTTP/2 metadata (where nothing does).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii_start();
    (!token.is_empty()).then_some(token)
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

/// Whether `given` equals `secret`, in a time that depends only on the
/// secret's length: every byte of the secret is compared whatever `given`
/// holds, so neither a matching prefix nor `given`'s length shows in it.
fn constant_time_eq(given: &[u8], secret: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != secret.len());
    for (i, s) in secret.iter().enumerate() {
        diff |= std::hint::black_box(given.get(i).copied().unwrap_or(!s)) ^ s;
    }
    diff == 0
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

/// Who is calling, for per-caller rates and the log: the client
/// certificate's first identity under mTLS, else the peer's IP address
/// (from a request's connection extensions, gRPC or HTTP alike).
pub fn caller_of_parts(extensions: &http::Extensions) -> String {
    if let Some(id) = peer_identities(extensions).into_iter().next() {
        return format!("cert:{id}");
    }
    remote_addr(extensions).map_or_else(|| "unknown".to_owned(), |a| a.ip().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive_with_spaces_and_whitespace_trimmed() {
        for v in [
            "Bearer tok",
            "bearer tok",
            "BEARER  tok",
            " Bearer tok \t",
            "bEaReR \t tok\t",
        ] {
            assert_eq!(bearer_token(v.as_bytes()), Some(&b"tok"[..]), "{v:?}");
        }
        for v in [
            "Bearertok",
            "Bearer",
            "Bearer   ",
            "Basic tok",
            "Bearer\u{b}tok",
            "Bearer\ttok",
            "Bear tok",
            "",
        ] {
            assert_eq!(bearer_token(v.as_bytes()), None, "{v:?}");
        }
    }

    #[test]
    fn the_token_compares_whole() {
        assert!(constant_time_eq(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!constant_time_eq(b"0123456789abcdeF", b"0123456789abcdef"));
        assert!(!constant_time_eq(b"0123456789abcde", b"0123456789abcdef"));
        assert!(!constant_time_eq(b"0123456789abcdef0", b"0123456789abcdef"));
        assert!(!constant_time_eq(b"", b"0123456789abcdef"));
    }
}
