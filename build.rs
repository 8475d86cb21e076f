//! Generates the gRPC code with protox (pure Rust: no system protoc needed) and
//! tonic-prost-build: the CRI runtime.v1 client and server from `proto/runtime/v1/api.proto`
//! (used by `src/cri/` only) and the agent's admin service from
//! `proto/imagekeeper/v1/admin.proto` (used by `src/admin/` only).
//!
//! `AuthConfig` gets no derived `Debug`: it carries registry secrets, and `src/cri/convert.rs`
//! gives it a redacted one.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cri = "proto/runtime/v1/api.proto";
    let admin = "proto/imagekeeper/v1/admin.proto";
    println!("cargo:rerun-if-changed={cri}");
    println!("cargo:rerun-if-changed={admin}");
    let descriptors = protox::compile([cri, admin], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .skip_debug(["runtime.v1.AuthConfig"])
        .compile_fds(descriptors)?;
    Ok(())
}
