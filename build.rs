//! Generates the gRPC code for `proto/retryd/v1/retryd.proto` without a
//! system `protoc`: `protox` parses the proto files into a descriptor set in
//! pure Rust, and `tonic-prost-build` generates messages, client and server
//! from it. The encoded descriptor set is also written to
//! `$OUT_DIR/retryd_descriptor.bin` for the gRPC reflection service.

use std::error::Error;
use std::path::PathBuf;

use prost::Message as _;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=build.rs");

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(["retryd/v1/retryd.proto"], ["proto"])?;
    std::fs::write(out_dir.join("retryd_descriptor.bin"), fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // google.rpc.Status is the prost message tonic-types ships, so the
        // richer-error helpers work on BatchResult.error directly.
        .extern_path(".google.rpc", "::tonic_types")
        // tonic-prost's codec answers undecodable requests INTERNAL; ours
        // answers INVALID_ARGUMENT (src/grpc/codec.rs).
        .codec_path("crate::grpc::codec::Codec")
        .compile_fds(fds)?;
    Ok(())
}
