//! Certificates generated at run time with rcgen (nothing committed): a CA,
//! a server certificate for `localhost` and `127.0.0.1`, a client
//! certificate from the same CA, and a client certificate from another CA.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::TempDir;

/// PEM files in a temporary directory.
pub struct Pki {
    dir: TempDir,
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("self-sign the CA");
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(names: &[&str], usage: ExtendedKeyUsagePurpose, issuer: &Issuer<'static, KeyPair>) -> (String, String) {
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.extended_key_usages.push(usage);
    let key = KeyPair::generate().expect("leaf key");
    let cert = params.signed_by(&key, issuer).expect("sign the leaf");
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    /// Generates every file.
    pub fn new(name: &str) -> Pki {
        let dir = TempDir::new(name);
        let (ca_pem, issuer) = ca("retryd test CA");
        let (other_ca_pem, other_issuer) = ca("another CA");
        let (server, server_key) = leaf(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            &issuer,
        );
        let (client, client_key) = leaf(&["client.test"], ExtendedKeyUsagePurpose::ClientAuth, &issuer);
        let (stranger, stranger_key) = leaf(&["stranger.test"], ExtendedKeyUsagePurpose::ClientAuth, &other_issuer);
        for (file, pem) in [
            ("ca.pem", &ca_pem),
            ("other-ca.pem", &other_ca_pem),
            ("server.pem", &server),
            ("server-key.pem", &server_key),
            ("client.pem", &client),
            ("client-key.pem", &client_key),
            ("stranger.pem", &stranger),
            ("stranger-key.pem", &stranger_key),
        ] {
            std::fs::write(dir.join(file), pem).expect("write a PEM file");
        }
        Pki { dir }
    }

    /// The path of one of the files, as a flag value.
    pub fn path(&self, file: &str) -> String {
        self.file(file).to_str().expect("utf-8 path").to_owned()
    }

    /// The path of one of the files.
    pub fn file(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The contents of one of the files.
    pub fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.file(file)).expect("read a PEM file")
    }

    /// `retryd serve` flags: TLS with the server certificate; with
    /// `mutual`, client certificates from the CA required.
    pub fn serve_flags(&self, mutual: bool) -> Vec<String> {
        let mut flags = vec![
            "--tls-cert".to_owned(),
            self.path("server.pem"),
            "--tls-key".to_owned(),
            self.path("server-key.pem"),
        ];
        if mutual {
            flags.extend(["--tls-client-ca".to_owned(), self.path("ca.pem")]);
        }
        flags
    }

    /// A client TLS configuration trusting the CA (server name `localhost`),
    /// presenting `identity` (`"client"`, `"stranger"`) if given.
    pub fn client_tls(&self, identity: Option<&str>) -> ClientTlsConfig {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(self.read("ca.pem")))
            .domain_name("localhost");
        if let Some(who) = identity {
            tls = tls.identity(Identity::from_pem(
                self.read(&format!("{who}.pem")),
                self.read(&format!("{who}-key.pem")),
            ));
        }
        tls
    }

    /// Connects to `https://addr` with [`Pki::client_tls`].
    pub async fn connect(&self, addr: std::net::SocketAddr, identity: Option<&str>) -> Result<Channel, String> {
        Endpoint::from_shared(format!("https://{addr}"))
            .expect("endpoint")
            .tls_config(self.client_tls(identity))
            .expect("client TLS config")
            .connect_timeout(std::time::Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| chain(&e))
    }
}

/// An error with its sources.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
