//! Generates the gRPC code for `proto/retryd/v1/retryd.proto` without a
//! system `protoc`: `protox` parses the proto files into a descriptor set in
//! pure Rust, and `tonic-prost-build` generates messages, client and server
//! from it. Imports resolve in `proto/` (which holds googleapis'
//! `google/rpc/status.proto`) and `third_party/proto/`. The encoded descriptor set, with
//! `google/rpc/error_details.proto` added so clients can decode error
//! details, is written to `$OUT_DIR/retryd_descriptor.bin` for the gRPC
//! reflection service.
//!
//! Also sets `RETRYD_REVISION` (for `retryd_build_info`): the
//! `RETRYD_REVISION` environment variable if set (e.g. a Docker build
//! argument), else `git rev-parse --short=12 HEAD`, else `unknown`.

use std::error::Error;
use std::path::PathBuf;
use std::process::Command;

use prost::Message as _;

const INCLUDES: [&str; 2] = ["proto", "third_party/proto"];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=third_party/proto");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-env=RETRYD_REVISION={}", revision());

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let served = protox::compile(["retryd/v1/retryd.proto", "google/rpc/error_details.proto"], INCLUDES)?;
    std::fs::write(out_dir.join("retryd_descriptor.bin"), served.encode_to_vec())?;

    let fds = protox::compile(["retryd/v1/retryd.proto"], INCLUDES)?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // google.rpc.Status is the prost message tonic-types ships, so the
        // richer-error helpers work on BatchResult.error directly.
        .extern_path(".google.rpc", "::tonic_types")
        // tonic-prost's codec answers undecodable requests INTERNAL; ours
        // answers INVALID_ARGUMENT (src/grpc/codec.rs).
        .codec_path("crate::grpc::wire::codec::Codec")
        // A Failure is ~400 bytes and a Decision ~670 inline: boxed, the
        // request and the answer tonic's futures move about (some 40 times
        // a call) are a pointer each, not a memcpy of the message.
        .boxed(".retryd.v1.ClassifyRequest.failure")
        .boxed(".retryd.v1.ClassifyResponse.decision")
        .boxed(".retryd.v1.BatchResult.outcome.decision")
        // A Hold is ~300 bytes inline: boxed, an Admit answer without one
        // (the common case) is ~70 bytes to move through tonic's futures.
        .boxed(".retryd.v1.AdmitResponse.hold")
        .compile_fds(fds)?;
    Ok(())
}

/// The revision built; see the module docs.
fn revision() -> String {
    println!("cargo:rerun-if-env-changed=RETRYD_REVISION");
    if let Ok(r) = std::env::var("RETRYD_REVISION") {
        if !r.is_empty() {
            return r;
        }
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    // Rebuild when HEAD moves (a commit or a checkout).
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
}
