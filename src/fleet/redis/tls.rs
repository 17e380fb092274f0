//! The `redis` crate's TLS material from ours (`rediss://`, for nodes and
//! Sentinels alike).

use ::redis::{ClientTlsConfig, TlsCertificates};

use super::RedisTls;

/// The crate's TLS material from ours.
pub(super) fn certificates(tls: &RedisTls) -> TlsCertificates {
    TlsCertificates {
        client_tls: tls.client_cert_pem.as_ref().map(|(cert, key)| ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        }),
        root_cert: tls.ca_pem.clone(),
    }
}
