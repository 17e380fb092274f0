//! Who is calling, read the same way by both doors from the connection
//! info tonic's server puts in a request's extensions: the peer's address,
//! its client certificate's identities, and whether it is an operator.

use std::net::IpAddr;

use crate::service::{Error, ErrorKind};

/// How an operator's caller name starts (see [`Operators::caller_of`]).
pub use crate::fleet::OPERATOR_PREFIX;

/// Who counts as an operator (may release holds and see raw tenant names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Operators {
    /// A bearer token (`authorization: Bearer …`) from `--operator-token-file`.
    pub token: Option<String>,
    /// Client-certificate subjects (CN) or SANs accepted under mTLS (`--operator-identities`).
    pub identities: Vec<String>,
    /// Trust any caller on a loopback address (`--operator-allow-loopback`).
    pub allow_loopback: bool,
    /// Proxies whose `x-forwarded-for` names the caller (`--trusted-proxies`):
    /// who a caller is, for per-caller limits and the log.
    pub trusted_proxies: Vec<ipnet::IpNet>,
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
            .is_some_and(|v| bearer_token(v.as_bytes()).is_some())
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

impl Operators {
    /// Who is calling, for per-caller limits and the log: the client
    /// certificate's first identity under mTLS (`cert:<id>`); else, from a
    /// peer listed in `--trusted-proxies`, the address its `x-forwarded-for`
    /// names (the last one not itself a trusted proxy); else the peer's
    /// address. An IPv6 address counts as its /64: one host owns a /64.
    ///
    /// An operator's name is prefixed `op:`: the holds it places rank
    /// above everyone's at the hold cap (and its limits are its own).
    pub fn caller_of(&self, headers: &http::HeaderMap, extensions: &http::Extensions) -> String {
        let name = caller_of(headers, extensions, &self.trusted_proxies);
        if self.allows_parts(headers, extensions) {
            format!("{OPERATOR_PREFIX}{name}")
        } else {
            name
        }
    }
}

fn caller_of(headers: &http::HeaderMap, extensions: &http::Extensions, trusted: &[ipnet::IpNet]) -> String {
    if let Some(id) = peer_identities(extensions).into_iter().next() {
        return format!("cert:{id}");
    }
    let Some(peer) = remote_addr(extensions).map(|a| a.ip()) else {
        return "unknown".to_owned();
    };
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    let mut caller = peer;
    if is_trusted(&peer) {
        // Right to left: each hop appended the address it received from; the
        // first one not a trusted proxy is the caller (earlier entries are
        // the client's own claims).
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect::<Vec<_>>();
        for hop in forwarded.iter().rev() {
            let Ok(ip) = hop.parse::<IpAddr>() else { break };
            caller = ip;
            if !is_trusted(&ip) {
                break;
            }
        }
    }
    match caller {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => ipnet::Ipv6Net::new(v6, 64)
                .map(|n| n.trunc().to_string())
                .unwrap_or_else(|_| v6.to_string()),
        },
    }
}

#[cfg(test)]
mod caller_tests {
    use super::*;
    use tonic::transport::server::TcpConnectInfo;

    fn from(peer: &str) -> http::Extensions {
        let mut ext = http::Extensions::new();
        ext.insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(peer.parse().expect("addr")),
        });
        ext
    }

    fn xff(values: &[&str]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().expect("header"));
        }
        h
    }

    #[test]
    fn a_caller_is_its_address_unless_a_trusted_proxy_forwards_it() {
        let ops = Operators {
            trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
            ..Operators::default()
        };
        // An untrusted peer's x-forwarded-for is its own claim: ignored.
        assert_eq!(ops.caller_of(&xff(&["1.2.3.4"]), &from("192.0.2.7:5000")), "192.0.2.7");
        // A trusted proxy: the last hop it did not add itself.
        assert_eq!(
            ops.caller_of(&xff(&["6.6.6.6, 1.2.3.4"]), &from("10.1.1.1:5000")),
            "1.2.3.4"
        );
        // Two trusted proxies in a row, one header each.
        assert_eq!(
            ops.caller_of(&xff(&["6.6.6.6, 1.2.3.4", "10.2.2.2"]), &from("10.1.1.1:5000")),
            "1.2.3.4"
        );
        // Garbage stops the walk at the last good hop.
        assert_eq!(ops.caller_of(&xff(&["nonsense"]), &from("10.1.1.1:5000")), "10.1.1.1");
        // IPv6: one /64 is one caller; a v4-mapped address is its v4 self.
        let a = ops.caller_of(&xff(&[]), &from("[2001:db8:1:2:aaaa::1]:5000"));
        let b = ops.caller_of(&xff(&[]), &from("[2001:db8:1:2:bbbb::9]:5000"));
        assert_eq!((a.as_str(), b.as_str()), ("2001:db8:1:2::/64", "2001:db8:1:2::/64"));
        assert_eq!(ops.caller_of(&xff(&[]), &from("[::ffff:192.0.2.1]:1")), "192.0.2.1");
        // No proxies trusted: the peer, whatever the header says.
        assert_eq!(
            Operators::default().caller_of(&xff(&["1.2.3.4"]), &from("10.1.1.1:5000")),
            "10.1.1.1"
        );
    }

    #[test]
    fn an_operator_is_named_as_one_so_its_holds_rank_above_everyones() {
        let ops = Operators {
            token: Some("s3cret".to_owned()),
            ..Operators::default()
        };
        let mut h = http::HeaderMap::new();
        h.insert("authorization", "Bearer s3cret".parse().expect("header"));
        let name = ops.caller_of(&h, &from("192.0.2.7:5000"));
        assert_eq!(name, "op:192.0.2.7");
        assert_eq!(crate::fleet::standing_of(&name), crate::core::hold::Standing::Operator);
        // A wrong token is just its address.
        h.insert("authorization", "Bearer guess".parse().expect("header"));
        let name = ops.caller_of(&h, &from("192.0.2.7:5000"));
        assert_eq!(name, "192.0.2.7");
        assert_eq!(crate::fleet::standing_of(&name), crate::core::hold::Standing::Anonymous);
        // A caller cannot name itself an operator: names come from the connection.
        assert_eq!(
            crate::fleet::standing_of(&ops.caller_of(&xff(&["op:1.2.3.4"]), &from("10.1.1.1:5000"))),
            crate::core::hold::Standing::Anonymous
        );
    }
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
