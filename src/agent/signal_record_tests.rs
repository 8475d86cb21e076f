//! The agent records the cluster signals' changes at its detects, on a manual clock: nothing
//! before a watch listed, each change once at the detect's time, nothing while nothing
//! changes, a pod gone as `bound` with no images, a CronJob gone as its stored line suspended,
//! and nothing again after a restart on the same database.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::super::Agent;
use crate::clock::{Clock, ManualClock};
use crate::config::{AgentConfig, FileConfig, FlagValues};
use crate::gc::{CronJobSignal, CronSchedule, CronZone};
use crate::model::{RecordedSignal, SignalEntry, UnixNanos};
use crate::runtime::ScriptedRuntime;

fn agent_on(dir: &Path, clock: &Arc<ManualClock>) -> Agent<ScriptedRuntime> {
    let flags = FlagValues {
        db: Some(dir.join("records.redb")),
        admin_socket: Some(dir.join("admin.sock")),
        ..FlagValues::default()
    };
    let config = AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("config");
    Agent::with_runtime(config, clock.clone(), ScriptedRuntime::new()).expect("agent")
}

fn bound(at: UnixNanos, pod: &str, images: &[&str]) -> SignalEntry {
    SignalEntry {
        at,
        signal: RecordedSignal::Bound {
            pod: pod.to_owned(),
            images: images.iter().map(|s| (*s).to_owned()).collect(),
        },
    }
}

#[tokio::test(start_paused = true)]
async fn each_change_is_recorded_once_at_its_detect_and_a_restart_records_nothing_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(1_800_000_000)));
    let agent = agent_on(dir.path(), &clock);
    let pods = agent.gc.bound_pods();
    pods.set_pod("ns/a".into(), vec!["reg/a:1".into()]);
    agent.carry_keeps_now().await;
    assert!(
        agent.store.signals().expect("signals").is_empty(),
        "the pods' watch has not listed yet"
    );
    pods.mark_synced();
    clock.advance(Duration::from_secs(60));
    let first = clock.now();
    agent.carry_keeps_now().await;
    clock.advance(Duration::from_secs(60));
    agent.carry_keeps_now().await;
    assert_eq!(
        agent.store.signals().expect("signals"),
        [bound(first, "ns/a", &["reg/a:1"])],
        "once, at the detect that saw it"
    );
    pods.remove_pod("ns/a");
    pods.set_pod("ns/b".into(), vec!["reg/b:1".into()]);
    clock.advance(Duration::from_secs(60));
    let second = clock.now();
    agent.carry_keeps_now().await;
    let want = vec![
        bound(first, "ns/a", &["reg/a:1"]),
        bound(second, "ns/b", &["reg/b:1"]),
        bound(second, "ns/a", &[]),
    ];
    assert_eq!(agent.store.signals().expect("signals"), want);
    drop(agent);

    // A restart: the watches list the same pod again; nothing is written.
    let agent = agent_on(dir.path(), &clock);
    let pods = agent.gc.bound_pods();
    pods.set_pod("ns/b".into(), vec!["reg/b:1".into()]);
    pods.mark_synced();
    clock.advance(Duration::from_secs(60));
    agent.carry_keeps_now().await;
    assert_eq!(agent.store.signals().expect("signals"), want);
}

fn nightly(at: UnixNanos, suspend: bool) -> SignalEntry {
    SignalEntry {
        at,
        signal: RecordedSignal::CronJob {
            name: "batch/nightly".to_owned(),
            schedule: "0 2 * * *".to_owned(),
            time_zone: None,
            suspend,
            images: vec!["reg/etl:1".to_owned()],
        },
    }
}

/// The record keeps digests, not lines: a CronJob removed while the agent was down is written
/// again suspended from the line the store's table holds.
#[tokio::test(start_paused = true)]
async fn a_cronjob_removed_across_a_restart_is_recorded_suspended_from_the_stored_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(1_800_000_000)));
    let agent = agent_on(dir.path(), &clock);
    let job = CronJobSignal {
        schedule: CronSchedule::parse("0 2 * * *").expect("schedule"),
        zone: CronZone::utc(),
        suspend: false,
        images: vec!["reg/etl:1".to_owned()],
        here: false,
    };
    agent
        .gc
        .cluster_signals()
        .replace_cronjobs(BTreeMap::from([("batch/nightly".to_owned(), job)]));
    clock.advance(Duration::from_secs(60));
    let first = clock.now();
    agent.carry_keeps_now().await;
    assert_eq!(
        agent.store.signals().expect("signals"),
        [nightly(first, false)]
    );
    drop(agent);

    let agent = agent_on(dir.path(), &clock);
    agent.gc.cluster_signals().replace_cronjobs(BTreeMap::new());
    clock.advance(Duration::from_secs(60));
    let second = clock.now();
    agent.carry_keeps_now().await;
    agent.carry_keeps_now().await;
    assert_eq!(
        agent.store.signals().expect("signals"),
        [nightly(first, false), nightly(second, true)],
        "written once, suspended"
    );
}
