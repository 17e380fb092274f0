//! `retryd health`: a built-in gRPC health probe with grpc_health_probe's
//! exit codes, for container health checks.

use std::process::ExitCode;
use std::time::Duration;

use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::config::{HealthArgs, parse_duration};
use super::tls;

/// The service is SERVING.
pub const EXIT_SERVING: u8 = 0;
/// Bad arguments (address, timeout).
pub const EXIT_BAD_ARGUMENTS: u8 = 1;
/// The server could not be reached.
pub const EXIT_CONNECTION_FAILURE: u8 = 2;
/// The health call failed (e.g. timed out, or the service is unknown).
pub const EXIT_RPC_FAILURE: u8 = 3;
/// The server answered, and the status is not SERVING.
pub const EXIT_NOT_SERVING: u8 = 4;

/// Runs `retryd health` and returns its exit code.
pub fn health_main(args: HealthArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_CONNECTION_FAILURE);
        }
    };
    ExitCode::from(runtime.block_on(probe(&args)))
}

/// Probes once and returns the exit code.
pub async fn probe(args: &HealthArgs) -> u8 {
    let timeout = match parse_duration(&args.timeout) {
        Ok(t) if !t.is_zero() => t,
        Ok(_) => {
            eprintln!("error: --timeout must be more than zero");
            return EXIT_BAD_ARGUMENTS;
        }
        Err(e) => {
            eprintln!("error: --timeout {e}");
            return EXIT_BAD_ARGUMENTS;
        }
    };
    let endpoint = match endpoint(&args.addr, timeout, args.use_tls()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: --addr {:?}: {e}", args.addr);
            return EXIT_BAD_ARGUMENTS;
        }
    };
    let endpoint = if args.use_tls() {
        let config = match tls::client_config(
            args.tls_ca.as_deref(),
            args.tls_cert.as_deref(),
            args.tls_key.as_deref(),
            args.tls_server_name.as_deref(),
        ) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_BAD_ARGUMENTS;
            }
        };
        match endpoint.tls_config(config) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("error: TLS settings: {e}");
                return EXIT_BAD_ARGUMENTS;
            }
        }
    } else {
        endpoint
    };
    let channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(e)) => {
            eprintln!("error: failed to connect to {}: {}", args.addr, error_chain(&e));
            return EXIT_CONNECTION_FAILURE;
        }
        Err(_) => {
            eprintln!("error: timed out connecting to {} after {timeout:?}", args.addr);
            return EXIT_CONNECTION_FAILURE;
        }
    };
    let request = HealthCheckRequest {
        service: args.service.clone(),
    };
    let response = match tokio::time::timeout(timeout, HealthClient::new(channel).check(request)).await {
        Ok(Ok(response)) => response.into_inner(),
        Ok(Err(status)) => {
            eprintln!("error: health rpc failed: {:?}: {}", status.code(), status.message());
            return EXIT_RPC_FAILURE;
        }
        Err(_) => {
            eprintln!("error: health rpc timed out after {timeout:?}");
            return EXIT_RPC_FAILURE;
        }
    };
    match ServingStatus::try_from(response.status) {
        Ok(ServingStatus::Serving) => {
            println!("status: SERVING");
            EXIT_SERVING
        }
        Ok(other) => {
            println!("service unhealthy (responded with {:?})", other.as_str_name());
            EXIT_NOT_SERVING
        }
        Err(_) => {
            println!("service unhealthy (responded with status {})", response.status);
            EXIT_NOT_SERVING
        }
    }
}

/// An error and its sources (a TLS handshake failure is a few levels down).
/// A level whose text its wrapper already ends with ("tcp connect error:
/// tcp connect error: …") is said once.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut previous = out.clone();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if text != previous && !previous.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        previous = text;
        source = s.source();
    }
    out
}

/// `host:port` or a URL; a bare address is taken as `http://`, or as
/// `https://` with TLS (and `http://` is upgraded with TLS).
pub(crate) fn endpoint(addr: &str, timeout: Duration, tls: bool) -> Result<Endpoint, String> {
    let scheme = if tls { "https" } else { "http" };
    let uri = match addr.split_once("://") {
        Some(("http", rest)) => format!("{scheme}://{rest}"),
        Some(_) => addr.to_owned(),
        None => format!("{scheme}://{addr}"),
    };
    Endpoint::from_shared(uri)
        .map(|e| e.connect_timeout(timeout).timeout(timeout))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(addr: &str, timeout: &str) -> HealthArgs {
        HealthArgs {
            addr: addr.to_owned(),
            service: String::new(),
            timeout: timeout.to_owned(),
            tls: false,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            tls_server_name: None,
        }
    }

    #[tokio::test]
    async fn bad_arguments_exit_1() {
        assert_eq!(probe(&args("http://127.0.0.1:1", "soon")).await, EXIT_BAD_ARGUMENTS);
        assert_eq!(probe(&args("http://127.0.0.1:1", "0s")).await, EXIT_BAD_ARGUMENTS);
        assert_eq!(probe(&args("http://exa mple:1", "1s")).await, EXIT_BAD_ARGUMENTS);
    }

    #[tokio::test]
    async fn nothing_listening_exits_2() {
        // Bind then drop a listener to get a port that refuses connections.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        assert_eq!(probe(&args(&addr.to_string(), "2s")).await, EXIT_CONNECTION_FAILURE);
    }
}
