//! Who is calling, read the same way by both doors from the connection
//! info tonic's server puts in a request's extensions: the peer's address,
//! its client certificate's identities, and whether it is an operator.

use std::net::IpAddr;

use crate::service::{Error, ErrorKind};

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
            let given = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
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

/// Why a caller is not an operator, as the word that opens the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server was started without any way to be an operator.
    NoOperatorsConfigured,
    /// A bearer token was given, and it is not the operator token.
    WrongToken,
    /// Neither a bearer token nor an operator's client certificate.
    NoCredentials,
}

crate::words!(Refusal {
    NoOperatorsConfigured => "no_operators_configured",
    WrongToken => "wrong_token",
    NoCredentials => "no_credentials",
});

impl Operators {
    /// Why the caller with these headers is not an operator (asked only
    /// after [`Operators::allows_parts`] said no).
    pub fn refusal(&self, headers: &http::HeaderMap) -> Refusal {
        if self.token.is_none() && self.identities.is_empty() && !self.allow_loopback {
            Refusal::NoOperatorsConfigured
        } else if headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("Bearer "))
        {
            Refusal::WrongToken
        } else {
            Refusal::NoCredentials
        }
    }

    /// `e` with the reason a caller was refused operator rights appended,
    /// when it is that refusal, so a client can say which of the three
    /// cases it met (`…: no_credentials: …`); any other error unchanged.
    pub fn explain(&self, headers: &http::HeaderMap, mut e: Error) -> Error {
        if e.kind == ErrorKind::PermissionDenied {
            let why = match self.refusal(headers) {
                Refusal::NoOperatorsConfigured => {
                    "this server has no operators (started without --operator-token-file, --operator-identities or --operator-allow-loopback)"
                }
                Refusal::WrongToken => "the bearer token given is not this server's operator token",
                Refusal::NoCredentials => "the call carried no bearer token and no operator's client certificate",
            };
            e.message = format!("{}; {}: {why}", e.message, self.refusal(headers).as_str());
        }
        e
    }
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
