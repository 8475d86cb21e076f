//! Generates the gRPC code with protox (pure Rust: no system protoc needed) and
//! tonic-prost-build: the CRI runtime.v1 client and server from `proto/runtime/v1/api.proto`
//! (used by `src/cri/` only) and the agent's admin service from
//! `proto/imagekeeper/v1/admin.proto` (used by `src/admin/` only), and the client of
//! containerd's own Images service from `proto/containerd/services/images/v1/images.proto`
//! (used by `src/cri/` only: the runtime pins' labels), and of the containerd services `inspect
//! disk` reads and `prune --orphans` calls (namespaces, containers, tasks, snapshots, content,
//! leases, introspection: the subsets under `proto/containerd/services/`, used by
//! `src/cri/containerd_view.rs` and `src/cri/containerd_prune.rs` only).
//!
//! `AuthConfig` and `EnsureImageRequest` get no derived `Debug`: they carry registry secrets,
//! and `src/cri/convert.rs` and `src/admin/mod.rs` give them redacted ones.
//!
//! It also sets `IMAGEKEEPER_REVISION` (the `revision` label of `imagekeeper_build_info`): the
//! variable of that name when the build has it (an image build without `.git`), else the
//! short commit of the checkout from `git rev-parse`, else "unknown".

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rustc-env=IMAGEKEEPER_REVISION={}", revision());
    // The generated code is used only by `cri` and `admin` (feature `cri`): the lean library
    // (`--no-default-features`) builds no gRPC code and needs none of tonic's crates.
    if std::env::var_os("CARGO_FEATURE_CRI").is_none() {
        return Ok(());
    }
    let cri = "proto/runtime/v1/api.proto";
    let admin = "proto/imagekeeper/v1/admin.proto";
    let containerd_images = "proto/containerd/services/images/v1/images.proto";
    println!("cargo:rerun-if-changed={cri}");
    println!("cargo:rerun-if-changed={admin}");
    println!("cargo:rerun-if-changed={containerd_images}");
    println!("cargo:rerun-if-changed=proto/containerd/types/descriptor.proto");
    // The services `inspect disk` reads (each file imports only well-known types, the task
    // types and google.rpc.Status, all under proto/).
    let containerd_view = [
        "proto/containerd/services/namespaces/v1/namespace.proto",
        "proto/containerd/services/containers/v1/containers.proto",
        "proto/containerd/services/tasks/v1/tasks.proto",
        "proto/containerd/services/snapshots/v1/snapshots.proto",
        "proto/containerd/services/content/v1/content.proto",
        "proto/containerd/services/leases/v1/leases.proto",
        "proto/containerd/services/introspection/v1/introspection.proto",
    ];
    for file in containerd_view.iter().chain(&[
        "proto/containerd/types/task/task.proto",
        "proto/google/rpc/status.proto",
    ]) {
        println!("cargo:rerun-if-changed={file}");
    }
    let mut files = vec![cri, admin, containerd_images];
    files.extend(containerd_view);
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .skip_debug(["runtime.v1.AuthConfig", "imagekeeper.v1.EnsureImageRequest"])
        .compile_fds(descriptors)?;
    Ok(())
}

/// The revision to report: `IMAGEKEEPER_REVISION`, else git's short HEAD, else "unknown".
fn revision() -> String {
    println!("cargo:rerun-if-env-changed=IMAGEKEEPER_REVISION");
    if let Ok(given) = std::env::var("IMAGEKEEPER_REVISION")
        && !given.trim().is_empty()
    {
        return given.trim().to_owned();
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git").args(args).output().ok()?;
        if !out.status.success() {
            return None;
        }
        let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
        (!text.is_empty()).then_some(text)
    };
    // Rebuild when HEAD moves: HEAD itself (a branch switch) and the branch's ref (a commit).
    for file in [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r])),
    ]
    .into_iter()
    .flatten()
    {
        if std::path::Path::new(&file).exists() {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"])
        .filter(|r| r.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_owned())
}
