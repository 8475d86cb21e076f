//! imagekeeper: a node agent and library that manages the container images on a Kubernetes
//! node the way the kubelet's ImageManager and ImageGCManager do, with every image's history
//! and the pull backoff kept in a crash-safe redb database.
//!
//! Layers (see ARCHITECTURE.md): `model` (values), `clock` (time), `store` (the only module
//! that imports redb), `cri` (the only module that imports tonic), `gc` and `pull` (logic that
//! takes `now` as an argument), `agent` (wiring and loops), `doctor` (the kubelet's config
//! against imagekeeper's), `cli` (parse and print).

pub mod admin;
pub mod agent;
pub mod clock;
pub mod cri;
pub mod doctor;
pub mod format;
pub mod gc;
pub mod inspect;
pub mod kubelet;
pub mod model;
pub mod pull;
pub mod replay;
#[cfg(feature = "simulation")]
pub mod sim;
pub mod store;
