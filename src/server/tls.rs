//! TLS through tonic's rustls (ring provider): the server side of
//! `retryd serve --tls-cert/--tls-key[/--tls-client-ca]` and the client side
//! of `retryd health --tls ...`.
//!
//! Certificates and keys are read once at start-up; a file that cannot be
//! read or parsed is a configuration error (exit 2). The file contents are
//! never logged, only their paths.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// How long a client gets to finish the TLS handshake before the connection
/// is dropped (handshakes run concurrently, so a slow one blocks no other).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Server TLS settings: PEM file paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key of the leaf.
    pub key: PathBuf,
    /// Mutual TLS: CA certificate(s) a client certificate must chain to.
    pub client_ca: Option<PathBuf>,
}

/// A TLS file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("{flag} {path}: {source}")]
    Read {
        /// The flag that named the file.
        flag: &'static str,
        /// The path given.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file holds no PEM block of the expected kind.
    #[error("{flag} {path}: no PEM {what} in the file")]
    NoPem {
        /// The flag that named the file.
        flag: &'static str,
        /// The path given.
        path: PathBuf,
        /// `CERTIFICATE` or `PRIVATE KEY`.
        what: &'static str,
    },
    /// A flag needs another one.
    #[error("{0}")]
    Usage(String),
    /// The file's certificates or key were rejected.
    #[error("{flag} {path}: {reason}")]
    Invalid {
        /// The flag(s) that named the file.
        flag: &'static str,
        /// The path given.
        path: PathBuf,
        /// What rustls or the PEM parser said.
        reason: String,
    },
}

/// Reads a PEM file and checks that it holds at least one block whose label
/// ends with `what` (`CERTIFICATE`, `PRIVATE KEY`); rustls parses it later.
fn read_pem(flag: &'static str, path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    // Read as a policy file is: a FIFO or a device is refused, not waited on.
    let pem = crate::load::read_regular(path, crate::load::MAX_TLS_FILE_BYTES, "a TLS file is at most 1 MiB").map_err(
        |e| TlsError::Read {
            flag,
            path: path.to_owned(),
            source: match e {
                crate::load::LoadError::Io { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            },
        },
    )?;
    let text = String::from_utf8_lossy(&pem);
    let found = text.lines().any(|l| {
        l.trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.strip_suffix("-----"))
            .is_some_and(|label| label.ends_with(what))
    });
    if !found {
        return Err(TlsError::NoPem {
            flag,
            path: path.to_owned(),
            what,
        });
    }
    Ok(pem)
}

impl ServerTls {
    /// The TLS part of `retryd serve`'s flags (`None`: plaintext).
    pub fn from_flags(
        cert: Option<&Path>,
        key: Option<&Path>,
        client_ca: Option<&Path>,
    ) -> Result<Option<Self>, TlsError> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(ServerTls {
                cert: cert.to_owned(),
                key: key.to_owned(),
                client_ca: client_ca.map(Path::to_owned),
            })),
            (None, None) if client_ca.is_none() => Ok(None),
            (None, None) => Err(TlsError::Usage("--tls-client-ca needs --tls-cert and --tls-key".into())),
            _ => Err(TlsError::Usage("--tls-cert and --tls-key go together".into())),
        }
    }

    /// Reads the files into the rustls acceptor retryd's connections use
    /// (client certificates required when `client_ca` is set): the
    /// configuration tonic's Server built from the same files (ring, TLS
    /// 1.2 and 1.3, ALPN `h2`).
    pub fn acceptor(&self) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use tokio_rustls::rustls::{RootCertStore, ServerConfig, server::WebPkiClientVerifier};
        let invalid = |flag: &'static str, path: &Path, e: &dyn std::fmt::Display| TlsError::Invalid {
            flag,
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let certs = |flag, path: &Path, pem: &[u8]| {
            CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(flag, path, &e))
        };
        let cert = certs(
            "--tls-cert",
            &self.cert,
            &read_pem("--tls-cert", &self.cert, "CERTIFICATE")?,
        )?;
        let key = PrivateKeyDer::from_pem_slice(&read_pem("--tls-key", &self.key, "PRIVATE KEY")?)
            .map_err(|e| invalid("--tls-key", &self.key, &e))?;
        let builder = ServerConfig::builder();
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                roots.add_parsable_certificates(certs(
                    "--tls-client-ca",
                    ca,
                    &read_pem("--tls-client-ca", ca, "CERTIFICATE")?,
                )?);
                let verifier = WebPkiClientVerifier::builder(roots.into())
                    .build()
                    .map_err(|e| invalid("--tls-client-ca", ca, &e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(cert, key)
            .map_err(|e| invalid("--tls-cert/--tls-key", &self.cert, &e))?;
        config.alpn_protocols.push(b"h2".to_vec());
        Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
    }
}

/// The client TLS configuration of `retryd health`: trust `ca` (else the
/// system roots), present `cert`/`key` if given, verify `server_name` (else
/// the address's host).
pub fn client_config(
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
    server_name: Option<&str>,
) -> Result<ClientTlsConfig, TlsError> {
    let mut config = ClientTlsConfig::new().timeout(HANDSHAKE_TIMEOUT);
    config = match ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read_pem("--tls-ca", ca, "CERTIFICATE")?)),
        None => config.with_native_roots(),
    };
    match (cert, key) {
        (Some(cert), Some(key)) => {
            let cert = read_pem("--tls-cert", cert, "CERTIFICATE")?;
            let key = read_pem("--tls-key", key, "PRIVATE KEY")?;
            config = config.identity(Identity::from_pem(cert, key));
        }
        (None, None) => {}
        _ => return Err(TlsError::Usage("--tls-cert and --tls-key go together".into())),
    }
    if let Some(name) = server_name {
        config = config.domain_name(name);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_go_together() {
        let p = Path::new("x.pem");
        assert!(matches!(ServerTls::from_flags(None, None, None), Ok(None)));
        assert!(matches!(ServerTls::from_flags(Some(p), Some(p), Some(p)), Ok(Some(_))));
        assert!(matches!(
            ServerTls::from_flags(Some(p), None, None),
            Err(TlsError::Usage(_))
        ));
        assert!(matches!(
            ServerTls::from_flags(None, None, Some(p)),
            Err(TlsError::Usage(_))
        ));
        assert!(client_config(None, Some(p), None, None).is_err());
    }

    #[test]
    fn unreadable_or_not_pem() {
        let missing = ServerTls {
            cert: PathBuf::from("/nonexistent/cert.pem"),
            key: PathBuf::from("/nonexistent/key.pem"),
            client_ca: None,
        };
        let e = missing.acceptor().map(|_| ()).unwrap_err().to_string();
        assert!(e.starts_with("--tls-cert /nonexistent/cert.pem:"), "{e}");

        let dir = std::env::temp_dir().join(format!("retryd-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = read_pem("--tls-cert", &junk, "CERTIFICATE")
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("no PEM CERTIFICATE in the file"), "{e}");
        std::fs::write(
            &junk,
            "-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----\n",
        )
        .unwrap();
        assert!(read_pem("--tls-key", &junk, "PRIVATE KEY").is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
