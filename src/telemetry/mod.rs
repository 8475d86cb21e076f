//! Telemetry: what the agent tells the outside about itself. It owns the Prometheus exposition
//! ([`AgentMetrics`], the [`METRICS`] list the encoder and the generated reference read), the
//! small HTTP/1.1 server that serves it with `/healthz` and `/readyz` ([`serve_http`],
//! [`serve_probes`]), the liveness and readiness state the loops report to (`Health`), and the
//! Kubernetes Events on the Node object ([`NodeEvents`], with the kube-rs sink behind feature
//! `kube`).
//!
//! Invariants: nothing here runs a cycle or writes the store; a scrape, a probe or an Event
//! only reads what the layers below keep (counters, the store's health) or what the agent
//! reports. It sits above `gc`, `pull`, `warm` and `store` and below `agent`, which wires it.
//! The submodules are private: what other layers may use is the list of re-exports below.

// What only the agent calls (the recorders, `Health`, the Node Events of each cause) is
// crate-private: a `metrics` build without feature `agent` has no caller for it.
#![cfg_attr(not(feature = "agent"), allow(dead_code, unused_imports))]

mod health;
mod http;
mod metrics;
mod node_events;

pub(crate) use health::Health;
pub use http::{HttpEndpoints, HttpLimits, MAX_HEAD_BYTES, serve_http, serve_probes};
pub(crate) use metrics::RuntimePinsSample;
pub use metrics::{AgentMetrics, DiskSample, METRICS, MetricFamily, MetricKind};
#[cfg(feature = "kube")]
pub use node_events::{EventLimits, KubeEventSink};
pub use node_events::{EventSink, NodeEvent, NodeEventType, NodeEvents};
