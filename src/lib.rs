//! imagekeeper: a node agent and library that manages the container images on a Kubernetes
//! node the way the kubelet's ImageManager and ImageGCManager do, with every image's history
//! and the pull backoff kept in a crash-safe redb database.
//!
//! Layers (see ARCHITECTURE.md): `model` (values), `clock` (time), `store` (the only module
//! that imports redb), `cri` (with `admin`, the only modules that import tonic), `gc` and `pull` (logic that
//! takes `now` as an argument), `agent` (wiring and loops), `doctor` (the kubelet's config
//! against imagekeeper's), `cli` (parse and print).
//!
//! Every module below is public because the `imagekeeper` binary (`src/cli`, a separate crate)
//! drives it; test doubles are compiled only with cfg(test) or the `testing` feature, the
//! simulator only with `simulation`.

// The local admin service (gRPC on a unix socket) the agent serves and the CLI calls.
#[cfg(feature = "cri")]
pub mod admin;
// The long-running agent: configuration, the GC/detect/pull loops, metrics and health.
#[cfg(feature = "agent")]
pub mod agent;
// The injected clock ([`clock::Clock`]); only `SystemClock` reads the wall clock.
pub mod clock;
// The CRI runtime.v1 client implementing `runtime`'s traits (the only tonic user besides admin).
#[cfg(feature = "cri")]
pub mod cri;
// `imagekeeper doctor`: the kubelet's configuration checked against imagekeeper's.
#[cfg(feature = "agent")]
pub mod doctor;
// Formatting rules shared by every printer: Go durations, sizes, RFC 3339, relative times.
pub mod format;
// Image garbage collection as the kubelet's ImageGCManager does it, over the store's index.
pub mod gc;
// Offline inspection of a database file from a verified snapshot (`imagekeeper inspect`).
pub mod inspect;
// What imagekeeper reads, read-only, of the kubelet's own state (image pull records).
pub mod kubelet;
// Test only: the book's reliability limits page states the code's numbers.
#[cfg(test)]
mod limits_page;
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
