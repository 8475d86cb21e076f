//! Generates the CRI runtime.v1 client and server code from `proto/runtime/v1/api.proto` with
//! protox (pure Rust: no system protoc needed) and tonic-prost-build.
//!
//! `AuthConfig` gets no derived `Debug`: it carries registry secrets, and `src/cri/convert.rs`
//! gives it a redacted one.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/runtime/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .skip_debug(["runtime.v1.AuthConfig"])
        .compile_fds(descriptors)?;
    Ok(())
}
