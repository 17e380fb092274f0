//! Generates the client stubs of `retryd.v1` from `proto/` with protox, so
//! no system `protoc` is needed. In the repository `proto/` is a symbolic
//! link to the repository's `proto/` (the one source of truth the server
//! generates from too); `cargo package` copies the files it points at, so
//! the published crate carries its own copy and builds on its own.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["retryd/v1/retryd.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .extern_path(".google.rpc", "::tonic_types")
        .compile_fds(fds)?;
    Ok(())
}
