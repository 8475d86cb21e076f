//! The cluster's knowledge of what runs next, read from the API server (feature `kube`,
//! `clusterSignals`). Today: the pods bound to this node (`pods.rs`), whose images are needed now
//! whether or not their containers exist yet; the GC keeps them ([`crate::gc::BoundPods`]).
//!
//! Invariants: only reads (list and watch), through kube-rs's watcher with a field selector
//! on `spec.nodeName`, so the API server sends this node's pods only; each pod is held as its
//! image names, never as the object; a relist replaces the set at once when it is complete,
//! not before; with the API server away the last set holds.

mod client;
mod pods;

pub use client::{MAX_ANSWER_BYTES, capped_client};
pub use pods::{PodWatch, pod_images, watch_bound_pods};
