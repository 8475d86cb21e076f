//! Generates the gRPC code with protox (pure Rust: no system protoc needed) and
//! tonic-prost-build: the CRI runtime.v1 client and server from `proto/runtime/v1/api.proto`
//! (used by `src/cri/` only) and the agent's admin service from
//! `proto/imagekeeper/v1/admin.proto` (used by `src/admin/` only).
//!
//! `AuthConfig` and `EnsureImageRequest` get no derived `Debug`: they carry registry secrets,
//! and `src/cri/convert.rs` and `src/admin/mod.rs` give them redacted ones.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cri = "proto/runtime/v1/api.proto";
    let admin = "proto/imagekeeper/v1/admin.proto";
    println!("cargo:rerun-if-changed={cri}");
    println!("cargo:rerun-if-changed={admin}");
    let descriptors = protox::compile([cri, admin], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .skip_debug(["runtime.v1.AuthConfig", "imagekeeper.v1.EnsureImageRequest"])
        .compile_fds(descriptors)?;
    Ok(())
}
