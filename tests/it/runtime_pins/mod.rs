//! Runtime pins (`runtimePins`): the agent labels what imagekeeper keeps
//! `io.cri-containerd.pinned=pinned` in containerd, and the tests read the result back through
//! CRI ListImages themselves (`lab`: on the lab's containerd release, 1.6, 1.7 or 2.1; each
//! test's name and assertions say what each release must do; `scripted`: the in-process fake
//! runtime's containerd Images service, whose CRI can be told not to carry the labels;
//! `record`: the agent's record of the names it labelled, against forged and stripped labels).

mod lab;
mod record;
mod scripted;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use imagekeeper::agent::Agent;
use imagekeeper::config::{AgentConfig, FileConfig, FlagValues};
use imagekeeper::cri::FakeRuntime;
use imagekeeper::model::UnixNanos;

/// The flags of an agent on `fake` with database `db` and its admin socket in `dir`, GC at
/// 100/99 % (it removes nothing a test does not ask for).
fn agent_flags(fake: &FakeRuntime, dir: &Path, db: PathBuf) -> FlagValues {
    FlagValues {
        db: Some(db),
        container_runtime_endpoint: Some(fake.endpoint()),
        admin_socket: Some(dir.join("admin.sock")),
        image_gc_high_threshold: Some(100),
        image_gc_low_threshold: Some(99),
        ..FlagValues::default()
    }
}

/// Starts an agent with `flags` at the tests' fixed time (a manual clock).
async fn start_agent(flags: FlagValues) -> Agent {
    let config = AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("config");
    let clock = Arc::new(imagekeeper::clock::ManualClock::new(UnixNanos::from_secs(
        1_800_000_000,
    )));
    Agent::start(config, clock).await.expect("agent starts")
}

/// The instance id `agent` stored at its start.
fn instance_of(agent: &Agent) -> String {
    imagekeeper::agent::stored_instance_id(agent.store())
        .expect("meta")
        .expect("an instance id once started")
}
