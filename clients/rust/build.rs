//! Generates the client stubs of `retryd.v1` from the repository's
//! `proto/` (the server generates its own from the same file) with protox,
//! so no system `protoc` is needed.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=../../proto");
    let fds = protox::compile(["retryd/v1/retryd.proto"], ["../../proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .extern_path(".google.rpc", "::tonic_types")
        .compile_fds(fds)?;
    Ok(())
}
