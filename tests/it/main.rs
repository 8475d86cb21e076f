//! imagekeeper's one integration test binary, a module per area.
//!
//! Naming convention: tests that use the real containerd lab live in modules named `lab`
//! (`cri/lab.rs` -> `cri::lab::...`). `.config/nextest.toml` puts every test whose name
//! contains `lab::` in a group that runs one test at a time; every other test is fast and
//! self-contained. Each lab test is `#[ignore = "needs the <which> lab: ..."]`: a plain
//! `cargo nextest run` lists it as ignored with that reason; `scripts/test` starts the labs
//! and runs everything with `--run-ignored all`; a lab test run without its lab fails.

mod admin_limits;
mod agent;
mod book;
mod cluster;
mod corrupt;
mod corrupt_read_only;
mod crash;
mod cri;
mod deploy;
mod disk;
mod docs;
mod doctor;
mod events;
mod gc;
mod http;
mod inspect;
mod inspect_settings;
mod kubelet;
mod monitoring;
mod node_events;
mod pull;
mod replay;
mod runtime_pins;
mod secrets;
mod service;
mod simulate;
mod store;
mod support;
mod workload;
