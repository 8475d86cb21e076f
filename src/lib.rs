//! imagekeeper: a node agent and library that manages the container images on a Kubernetes
//! node the way the kubelet's ImageManager and ImageGCManager do, with every image's history
//! and the pull backoff kept in a crash-safe redb database.
//!
//! The modules and which may use which: the layer table in ARCHITECTURE.md (the one layer
//! list; `layer_order`, a unit test, reads it and fails on any other `use crate::` edge).
//!
//! # Embedding
//!
//! With `default-features = false` the crate is the library alone: the model, the store, GC,
//! the pull logic, warm sets, the kubelet's records and the [`runtime::ImageRuntime`] trait,
//! without tonic, prometheus-client or a YAML parser. Features add the rest: `cri` (the CRI
//! client and the admin service), `metrics` (`telemetry`), `yaml` (YAML operator files),
//! `agent` (the long-running agent and `doctor`), `harness` (replay, workload, simulate,
//! inspect), `cli` (the binary; the default). Implement [`runtime::ImageRuntime`] for your
//! runtime, or use the in-memory [`runtime::ScriptedRuntime`] as here: open a store, build the
//! GC manager, detect what the runtime holds, then collect garbage.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use imagekeeper::gc::{GcConfig, GcPolicy, ImageGcManager};
//! use imagekeeper::model::{ContainerState, ImageId, RuntimeContainer, RuntimeImage, UnixNanos};
//! use imagekeeper::runtime::ScriptedRuntime;
//! use imagekeeper::store::Store;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let t0 = UnixNanos::from_secs(1_700_000_000);
//! let store = Arc::new(Store::open(&dir.path().join("images.redb"), t0)?);
//!
//! // A runtime with three images on a 1,000-byte image filesystem, 90 % used; a running
//! // container uses the third image.
//! let runtime = ScriptedRuntime::new();
//! let id = |n: u8| ImageId::new(format!("sha256:{n:064x}"));
//! {
//!     let mut state = runtime.state();
//!     state.images = [(1, 50), (2, 60), (3, 70)]
//!         .map(|(n, size)| RuntimeImage { id: id(n), size, ..RuntimeImage::default() })
//!         .to_vec()
//!         .into();
//!     state.containers = vec![RuntimeContainer {
//!         id: "c1".into(),
//!         pod_sandbox_id: "p1".into(),
//!         image: "registry.example/app:1".into(),
//!         image_id: id(3),
//!         state: ContainerState::Running,
//!         runtime_handler: String::new(),
//!     }];
//!     state.fs = Some((1_000, 100)); // (capacity, available)
//! }
//!
//! // The kubelet's defaults (high 85 %, low 80 %), with no minimum age.
//! let config = GcConfig {
//!     policy: GcPolicy { min_age: Duration::ZERO, ..GcPolicy::default() },
//!     ..GcConfig::default()
//! };
//! let manager = ImageGcManager::new(runtime.clone(), store, config)?;
//!
//! tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//!     let detected = manager.detect(t0).await?;
//!     assert_eq!(detected.added, 3);
//!
//!     // 90 % used is over the high threshold: free down to 80 %, i.e. 100 bytes, oldest
//!     // first; the image in use stays.
//!     let report = manager.garbage_collect(t0.saturating_add(Duration::from_secs(60))).await;
//!     assert!(report.error.is_none(), "{report:?}");
//!     let removed: Vec<ImageId> = report.removed.iter().map(|r| r.key.image_id.clone()).collect();
//!     assert_eq!(removed, [id(1), id(2)]);
//!     assert_eq!(report.freed, 110);
//!     assert_eq!(runtime.state().removed, [id(1).to_string(), id(2).to_string()]);
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })?;
//! # Ok(())
//! # }
//! ```
//!
//! Every module below is public because the `imagekeeper` binary (`src/cli`, a separate crate)
//! drives it; test doubles are compiled only with cfg(test) or the `testing` feature, the
//! simulator only with `simulation`.

// Every public item is documented, with any feature set: the lint below warns on a gap (so
// `cargo clippy --all-targets --all-features -- -D warnings` and `cargo clippy
// --no-default-features --lib -- -D warnings` fail on one), as does `RUSTDOCFLAGS='-D
// missing_docs' cargo doc --all-features --no-deps`. What the binary, the tests and the
// crate doctest do not use is `pub(crate)`, not documented public surface.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// The local admin service (gRPC on a unix socket) the agent serves and the CLI calls.
#[cfg(feature = "cri")]
pub mod admin;
// The long-running agent: the wiring and the GC/detect/pull/warm loops.
#[cfg(feature = "agent")]
pub mod agent;
// The injected clock ([`clock::Clock`]); only `SystemClock` reads the wall clock.
pub mod clock;

#[cfg(feature = "kube")]
pub mod cluster;
// The agent's configuration: the TOML file, the flags, the field list, each area's resolver
// and validation.
#[cfg(feature = "agent")]
pub mod config;
// The CRI runtime.v1 client implementing `runtime`'s traits (the only tonic user besides admin).
#[cfg(feature = "cri")]
pub mod cri;
// `imagekeeper doctor`: the kubelet's configuration checked against imagekeeper's.
#[cfg(feature = "agent")]
pub mod doctor;
// Where the image filesystem's bytes are: containerd's objects accounted by owner (`inspect
// disk`), pure.
pub mod disk;
// Formatting rules shared by every printer: Go durations, sizes, RFC 3339, relative times.
pub mod format;
// Image garbage collection as the kubelet's ImageGCManager does it, over the store's index.
pub mod gc;
// Offline inspection of a database file from a verified snapshot (`imagekeeper inspect`).
#[cfg(feature = "harness")]
pub mod inspect;
// What imagekeeper reads, read-only, of the kubelet's own state (image pull records).
pub mod kubelet;
// Test only: the book's reliability limits page states the code's numbers.
#[cfg(test)]
mod limits_page;
// Test only: no production file past 1,000 lines, no impl block past 500.
#[cfg(test)]
mod size_limits;
// Test only: every `use crate::` edge is one ARCHITECTURE.md's layer table allows.
#[cfg(test)]
mod layer_order;
// Giving the allocator's free memory back to the system between cycles (`malloc_trim`).
#[cfg(any(feature = "agent", feature = "kube"))]
pub(crate) mod memory;
// The values every layer shares (records, ids, runtime images, times).
pub mod model;
// The one reader of operator files (config, secrets, credentials, kubelet files): regular
// files only, never blocking, capped.
pub mod operator_file;
// Image pulls with the kubelet's backoff, credentials and throttling.
pub mod pull;
// Image references as the kubelet reads them (distribution/reference), name matching and
// the credentials-in-a-name rules: a leaf every layer that names images uses.
pub mod reference;
// What imagekeeper needs of a container runtime: the `ImageRuntime` and `AgentRuntime`
// traits, `CriError`, `RpcCode` (no tonic).
pub mod runtime;
// Replay of a trace through the real GC manager and store.
#[cfg(feature = "harness")]
pub mod replay;
// `imagekeeper simulate`: what each GC policy costs a workload in bytes pulled again.
#[cfg(feature = "harness")]
pub mod simulate;
// The deterministic simulator (feature `simulation`).
#[cfg(feature = "simulation")]
pub mod sim;
// The redb record database (the only module that imports redb).
pub mod store;
// The workload trace `simulate` reads and `inspect workload` writes.
#[cfg(feature = "harness")]
pub mod workload;
// What the agent tells the outside: metrics, the HTTP endpoint, health, Node Events.
#[cfg(feature = "metrics")]
pub mod telemetry;
// Warm sets: images kept present ahead of use, and restore after a wipe.
pub mod warm;
