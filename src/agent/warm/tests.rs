//! Tests of the warm loop and restore against a scripted runtime with a registry, under
//! tokio's paused time: what fits is pulled, the rest reported once, GC keeps the warm set.

use super::*;
use crate::clock::ManualClock;
use crate::config::{AgentConfig, FileConfig, FlagValues};
use crate::model::{ImageFsStats, ImageId, PullCredentials, RuntimeContainer};
use crate::pull::image_matches;
use crate::replay::ScriptedRuntime;
use crate::runtime::NoEvents;
use crate::runtime::{CriError, RpcCode};
use crate::warm::{WarmEntrySpec, WarmSet, resolve_specs};
use std::sync::Mutex;
use std::time::Duration;

/// A scripted runtime with a registry: a pull adds the registry's image to the list and
/// takes its size from the available bytes; every pull and removal is counted.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    pub(crate) node: ScriptedRuntime,
    pub(crate) registry: Arc<Vec<RuntimeImage>>,
    pub(crate) pulls: Arc<Mutex<Vec<String>>>,
    /// Each pull's image and the username of the credentials it was given (empty: none).
    pub(crate) pulled_as: Arc<Mutex<Vec<(String, String)>>>,
    /// How many times the images were listed.
    pub(crate) lists: Arc<std::sync::atomic::AtomicUsize>,
}

impl crate::runtime::ImageRuntime for Registry {
    async fn list_images(&self) -> Result<Vec<RuntimeImage>, CriError> {
        self.lists
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.node.list_images().await
    }
    async fn image_status(
        &self,
        image: &str,
        handler: &str,
    ) -> Result<Option<RuntimeImage>, CriError> {
        Ok(self
            .node
            .state()
            .images
            .iter()
            .find(|i| i.runtime_handler == handler && image_matches(image, i))
            .cloned())
    }
    async fn pull_image(
        &self,
        image: &str,
        handler: &str,
        credentials: Option<&PullCredentials>,
    ) -> Result<String, CriError> {
        lock_ignoring_poison(&self.pulls).push(image.to_owned());
        lock_ignoring_poison(&self.pulled_as).push((
            image.to_owned(),
            credentials.map(|c| c.username.clone()).unwrap_or_default(),
        ));
        let Some(found) = self.registry.iter().find(|i| image_matches(image, i)) else {
            return Err(CriError::Rpc {
                method: "PullImage",
                code: RpcCode::NotFound,
                message: format!("{image:?}: not found"),
            });
        };
        let mut state = self.node.state();
        let mut found = found.clone();
        found.runtime_handler = handler.to_owned();
        if let Some((_, available)) = state.fs.as_mut() {
            *available = available.saturating_sub(found.size);
        }
        state.images.push(found.clone());
        Ok(found.id.0)
    }
    async fn remove_image(&self, image: &str, handler: &str) -> Result<(), CriError> {
        self.node.remove_image(image, handler).await
    }
    async fn image_fs_stats(&self) -> Result<ImageFsStats, CriError> {
        self.node.image_fs_stats().await
    }
    async fn list_containers(&self) -> Result<Vec<RuntimeContainer>, CriError> {
        self.node.list_containers().await
    }
}

impl AgentRuntime for Registry {
    type Events = NoEvents;
    async fn container_events(&self) -> Result<NoEvents, CriError> {
        self.node.container_events().await
    }
}

/// An image a registry serves: it has a repo digest, so `protectIrreplaceable` (on by
/// default) does not keep it.
pub(crate) fn registry_image(n: u8, name: &str, size: u64) -> RuntimeImage {
    let repo = name.split_once(':').map_or(name, |(repo, _)| repo);
    RuntimeImage {
        id: ImageId::new(format!("sha256:{n:064x}")),
        repo_tags: vec![format!("docker.io/library/{name}")],
        repo_digests: vec![format!("docker.io/library/{repo}@sha256:{n:064x}")],
        size,
        ..RuntimeImage::default()
    }
}

/// A registry serving a:1 and b:1 (100 bytes each), both on the node (1000 bytes, 800
/// free).
fn registry_of_a_and_b() -> Registry {
    let runtime = Registry {
        registry: Arc::new(vec![
            registry_image(1, "a:1", 100),
            registry_image(2, "b:1", 100),
        ]),
        ..Registry::default()
    };
    runtime.node.state().fs = Some((1000, 800));
    runtime.node.state().images =
        vec![registry_image(1, "a:1", 100), registry_image(2, "b:1", 100)].into();
    runtime
}

/// Both a and b used by a running container at a detect at `t0`; then the containers go
/// and a goes behind imagekeeper's back.
async fn use_both_then_lose_a(agent: &Agent<Registry>, runtime: &Registry, t0: UnixNanos) {
    runtime.node.state().containers = [1u8, 2]
        .map(|n| RuntimeContainer {
            id: format!("c{n}"),
            pod_sandbox_id: "pod".into(),
            image: String::new(),
            image_id: ImageId::new(format!("sha256:{n:064x}")),
            state: crate::model::ContainerState::Running,
            runtime_handler: String::new(),
        })
        .to_vec();
    agent.gc_manager().detect(t0).await.expect("detect");
    runtime.node.state().containers.clear();
    runtime
        .node
        .state()
        .images
        .retain(|i| i.repo_tags[0].ends_with("b:1"));
}

fn spec(image: &str, size: Option<&str>) -> WarmEntrySpec {
    WarmEntrySpec {
        image: image.into(),
        size: size.map(|s| crate::warm::SizeSpec::Text(s.into())),
        ..WarmEntrySpec::default()
    }
}

fn agent(
    dir: &std::path::Path,
    runtime: Registry,
    specs: &[WarmEntrySpec],
) -> Arc<Agent<Registry>> {
    Arc::new(unshared_agent(dir, runtime, specs, None))
}

fn agent_with_history(
    dir: &std::path::Path,
    runtime: Registry,
    specs: &[WarmEntrySpec],
    from_history: Option<FromHistory>,
) -> Arc<Agent<Registry>> {
    Arc::new(unshared_agent(dir, runtime, specs, from_history))
}

pub(crate) fn unshared_agent(
    dir: &std::path::Path,
    runtime: Registry,
    specs: &[WarmEntrySpec],
    from_history: Option<FromHistory>,
) -> Agent<Registry> {
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(1_800_000_000)));
    unshared_agent_with_clock(dir, runtime, specs, from_history, clock)
}

/// [`unshared_agent`] on `clock`.
pub(crate) fn unshared_agent_with_clock(
    dir: &std::path::Path,
    runtime: Registry,
    specs: &[WarmEntrySpec],
    from_history: Option<FromHistory>,
    clock: Arc<ManualClock>,
) -> Agent<Registry> {
    let flags = FlagValues {
        db: Some(dir.join("records.redb")),
        admin_socket: Some(dir.join("admin.sock")),
        minimum_image_ttl_duration: Some("0s".into()),
        image_gc_high_threshold: Some(90),
        image_gc_low_threshold: Some(80),
        ..FlagValues::default()
    };
    let mut config = AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("config");
    config.gc.warm = WarmSet::new(resolve_specs(specs, |i| format!("warm[{i}]")).expect("specs"))
        .with_from_history(from_history);
    config.warm.from_history = from_history;
    Agent::with_runtime(config, clock, runtime).expect("agent")
}

fn states(plan: &WarmPlan) -> Vec<(String, WarmState)> {
    plan.statuses
        .iter()
        .map(|s| (s.entry.image.clone(), s.state))
        .collect()
}

/// 1000 bytes, 300 used, low threshold 80 %: 500 bytes of headroom. The first entry
/// (300) is pulled in the first cycle; the second (500, by its hint) does not fit beside
/// it and is reported, never pulled; the third (size unknown, 100) is pulled in the next
/// cycle, alone. An image removed behind the agent's back comes back at the next cycle;
/// GC at full pressure keeps every warm image; over 10 more cycles nothing is pulled and
/// removed in a loop.
#[tokio::test(start_paused = true)]
async fn warm_cycles_pull_what_fits_report_the_rest_and_gc_keeps_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Registry {
        registry: Arc::new(vec![
            registry_image(1, "a:1", 300),
            registry_image(2, "b:1", 500),
            registry_image(3, "c:1", 100),
        ]),
        ..Registry::default()
    };
    runtime.node.state().fs = Some((1000, 700));
    let agent = agent(
        dir.path(),
        runtime.clone(),
        &[
            spec("a:1", Some("300")),
            spec("b:1", Some("500")),
            spec("c:1", None),
        ],
    );
    let first = agent.warm_cycle().await;
    assert_eq!(
        states(&first),
        [
            ("a:1".to_owned(), WarmState::Pulling),
            ("b:1".to_owned(), WarmState::DoesNotFit),
            ("c:1".to_owned(), WarmState::Queued),
        ]
    );
    let second = agent.warm_cycle().await;
    assert_eq!(
        states(&second),
        [
            ("a:1".to_owned(), WarmState::Present),
            ("b:1".to_owned(), WarmState::DoesNotFit),
            ("c:1".to_owned(), WarmState::Pulling),
        ]
    );
    // The warm set's state is in the database for `inspect` (schema 5), and each warm
    // pull is in the pull history with its origin.
    let rows: Vec<(String, StoredWarmState, String)> = agent
        .store
        .warm_rows()
        .expect("warm rows")
        .into_iter()
        .map(|r| (r.image, r.state, r.image_id))
        .collect();
    let id = |n: u8| format!("sha256:{n:064x}");
    assert_eq!(
        rows,
        [
            ("a:1".to_owned(), StoredWarmState::Present, id(1)),
            ("b:1".to_owned(), StoredWarmState::DoesNotFit, String::new()),
            ("c:1".to_owned(), StoredWarmState::Pulling, id(3)),
        ]
    );
    let pulls: Vec<(String, PullOrigin, String, u64)> = agent
        .store
        .pulls()
        .expect("pulls")
        .into_iter()
        .map(|(k, e)| (k.key.image_id.as_str().to_owned(), e.origin, e.name, e.size))
        .collect();
    assert_eq!(
        pulls,
        [
            (id(1), PullOrigin::Warm, "a:1".to_owned(), 300),
            (id(3), PullOrigin::Warm, "c:1".to_owned(), 100),
        ]
    );
    let metrics = agent.render_metrics();
    assert!(
        metrics.contains("imagekeeper_warm_images{state=\"does_not_fit\"} 1"),
        "{metrics}"
    );
    // The agent's dry run (`gc --dry-run`, `prune --dry-run` through the admin socket)
    // names the entry that does not fit.
    for dry in [
        crate::admin::AdminBackend::garbage_collect(&*agent, true).await,
        crate::admin::AdminBackend::delete_unused(&*agent, true).await,
    ] {
        let named: Vec<(&str, Option<u64>)> = dry
            .warm_does_not_fit
            .iter()
            .map(|w| (w.image.as_str(), w.size))
            .collect();
        assert_eq!(named, [("b:1", Some(500))], "{dry:?}");
        assert!(!dry.warm_does_not_fit[0].detail.is_empty());
    }
    assert!(
        metrics.contains("imagekeeper_warm_pulls_total{result=\"success\"} 2"),
        "{metrics}"
    );

    // Removed behind the agent's back (not by imagekeeper): back at the next cycle.
    {
        let mut state = runtime.node.state();
        state
            .images
            .retain(|i| i.id != ImageId::new(format!("sha256:{:064x}", 1)));
        if let Some((_, available)) = state.fs.as_mut() {
            *available += 300;
        }
    }
    assert_eq!(
        agent.warm_cycle().await.count(WarmState::Pulling),
        1,
        "the removed warm image is pulled again"
    );

    // Full pressure: 95 % used. GC and prune keep both warm images.
    runtime.node.state().fs = Some((1000, 50));
    let now = UnixNanos::from_secs(1_800_100_000);
    let report = agent.gc_manager().garbage_collect(now).await;
    assert!(report.removed.is_empty(), "{:?}", report.removed);
    let report = agent.gc_manager().delete_unused_images(now).await;
    assert!(report.removed.is_empty(), "{:?}", report.removed);

    let pulls_before = lock_ignoring_poison(&runtime.pulls).len();
    for _ in 0..10 {
        let plan = agent.warm_cycle().await;
        assert_eq!(plan.count(WarmState::Present), 2);
        assert_eq!(plan.count(WarmState::DoesNotFit), 1);
        agent.gc_manager().garbage_collect(now).await;
    }
    assert_eq!(lock_ignoring_poison(&runtime.pulls).len(), pulls_before);
    assert!(runtime.node.state().removed.is_empty());
    assert!(
        !lock_ignoring_poison(&runtime.pulls)
            .iter()
            .any(|p| p.contains("b:1")),
        "the entry that does not fit is never pulled"
    );
}

/// Issue 41: the warm cycle's judge (the history's sizes, the plan, the stored state) runs
/// on the blocking pool, never on the async worker: in this current-thread runtime the
/// test's own thread is the only worker, and no judging ran on it. A set of the cap's size
/// (MAX_WARM_ENTRIES) is judged whole.
#[tokio::test(start_paused = true)]
async fn the_warm_cycles_judge_runs_off_the_async_worker() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Registry {
        registry: Arc::new(vec![registry_image(1, "a:1", 300)]),
        ..Registry::default()
    };
    runtime.node.state().fs = Some((1000, 700));
    let mut specs = vec![spec("a:1", Some("300"))];
    specs.extend(
        (1..crate::warm::MAX_WARM_ENTRIES)
            .map(|i| spec(&format!("registry.example/warm-{i}:1"), Some("1Gi"))),
    );
    let agent = agent(dir.path(), runtime, &specs);
    let worker = std::thread::current().id();
    let plan = agent.warm_cycle().await;
    assert_eq!(plan.statuses.len(), crate::warm::MAX_WARM_ENTRIES);
    assert_eq!(plan.count(WarmState::Pulling), 1);
    assert_eq!(
        plan.count(WarmState::DoesNotFit),
        crate::warm::MAX_WARM_ENTRIES - 1
    );
    assert_eq!(
        agent.store.warm_rows().expect("rows").len(),
        crate::warm::MAX_WARM_ENTRIES
    );
    let judged = lock_ignoring_poison(&agent.warm_judged_on).clone();
    assert_eq!(judged.len(), 3, "the entries, the plan, the stored state");
    assert!(
        judged.iter().all(|thread| *thread != worker),
        "judged on the async worker: {judged:?}"
    );
}

/// A node with no warm set: the first cycle clears the rows an earlier configuration left
/// (off the async worker, as every store write of the loop), and the cycles after it have
/// nothing to read, judge or write: no work on the blocking pool, the table still empty.
#[tokio::test(start_paused = true)]
async fn without_a_warm_set_the_first_cycle_clears_the_table_and_later_ones_do_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = agent(dir.path(), Registry::default(), &[]);
    let mut stale = crate::store::Batch::new();
    stale.replace_warm(vec![WarmRow {
        image: "registry.example/left:1".into(),
        runtime_handler: String::new(),
        state: StoredWarmState::Present,
        since: UnixNanos::from_secs(1_700_000_000),
        image_id: "sha256:left".into(),
    }]);
    agent
        .store
        .apply(&stale)
        .expect("an earlier configuration's row");

    let plan = agent.warm_cycle().await;
    assert!(plan.statuses.is_empty());
    assert_eq!(
        agent.store.warm_rows().expect("rows"),
        Vec::<WarmRow>::new()
    );
    let after_first = lock_ignoring_poison(&agent.warm_judged_on).len();
    assert!(
        after_first > 0,
        "the first cycle wrote the empty table off the worker"
    );

    for _ in 0..3 {
        let plan = agent.warm_cycle().await;
        assert!(plan.statuses.is_empty());
    }
    assert_eq!(
        lock_ignoring_poison(&agent.warm_judged_on).len(),
        after_first,
        "a cycle with no warm set and the table cleared ran work off the worker"
    );
    assert_eq!(
        agent.store.warm_rows().expect("rows"),
        Vec::<WarmRow>::new()
    );
}

/// Node Events record what they are given.
#[derive(Debug, Default, Clone)]
struct RecordedEvents(Arc<Mutex<Vec<crate::telemetry::NodeEvent>>>);

impl crate::telemetry::EventSink for RecordedEvents {
    fn publish(&self, event: crate::telemetry::NodeEvent) {
        lock_ignoring_poison(&self.0).push(event);
    }
}

/// With `--events`, a warm entry that does not fit is one `WarmImageDoesNotFit` Warning on
/// the node (naming the image and what is missing), not one per cycle; once it has fit and
/// stops fitting again, it is said again.
#[tokio::test(start_paused = true)]
async fn a_warm_image_that_does_not_fit_is_one_node_event_until_it_fits_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Registry {
        registry: Arc::new(vec![registry_image(2, "b:1", 600)]),
        ..Registry::default()
    };
    // 1000 bytes, 300 used, low threshold 80 %: 500 bytes of headroom for 600.
    runtime.node.state().fs = Some((1000, 700));
    let events = RecordedEvents::default();
    let agent = Arc::new(
        unshared_agent(
            dir.path(),
            runtime.clone(),
            &[spec("b:1", Some("600"))],
            None,
        )
        .with_node_events(crate::telemetry::NodeEvents::new(Box::new(events.clone()))),
    );
    for _ in 0..3 {
        assert_eq!(agent.warm_cycle().await.count(WarmState::DoesNotFit), 1);
    }
    let said = lock_ignoring_poison(&events.0).clone();
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0].type_, crate::telemetry::NodeEventType::Warning);
    assert_eq!(said[0].reason, "WarmImageDoesNotFit");
    assert_eq!(
        said[0].note,
        format!(
            "Warm image b:1 is not pulled: needs {} and {} is free below the low threshold",
            crate::format::format_size(600),
            crate::format::format_size(500)
        )
    );

    // Room made: it fits and is pulled; nothing said.
    runtime.node.state().fs = Some((1000, 900));
    assert_eq!(agent.warm_cycle().await.count(WarmState::Pulling), 1);
    assert_eq!(lock_ignoring_poison(&events.0).len(), 1);

    // Removed behind the agent's back on a fuller disk: it does not fit again, said again.
    {
        let mut state = runtime.node.state();
        state.images.clear();
        state.fs = Some((1000, 700));
    }
    assert_eq!(agent.warm_cycle().await.count(WarmState::DoesNotFit), 1);
    let said = lock_ignoring_poison(&events.0).clone();
    assert_eq!(said.len(), 2, "{said:?}");
    assert_eq!(said[1].reason, "WarmImageDoesNotFit");
}

/// restore: the image removed externally and used within the window is listed by the dry
/// run and pulled back by the real one; one removed by imagekeeper's GC is not.
#[tokio::test(start_paused = true)]
async fn restore_pulls_back_an_external_removal_and_not_a_gc_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = registry_of_a_and_b();
    let agent = agent(dir.path(), runtime.clone(), &[]);
    let t0 = UnixNanos::from_secs(1_800_000_000);
    use_both_then_lose_a(&agent, &runtime, t0).await;
    // b is removed by imagekeeper (prune).
    agent
        .gc_manager()
        .detect(UnixNanos::from_secs(1_800_000_060))
        .await
        .expect("detect");
    let pruned = agent
        .gc_manager()
        .delete_unused_images(UnixNanos::from_secs(1_800_000_120))
        .await;
    assert_eq!(pruned.removed.len(), 1);
    let options = RestoreOptions {
        used_within: Duration::from_secs(24 * 3600),
        max_bytes: None,
        dry_run: true,
    };
    let dry = agent.restore(options).await.expect("restore");
    let listed: Vec<(&str, RestoreState)> = dry
        .items
        .iter()
        .map(|i| (i.image.as_str(), i.state))
        .collect();
    // The journal kept a's repo digest, so restore pulls that exact image back.
    let a_by_digest = format!("docker.io/library/a@sha256:{:064x}", 1);
    assert_eq!(listed, [(a_by_digest.as_str(), RestoreState::WouldRestore)]);
    assert!(
        lock_ignoring_poison(&runtime.pulls).is_empty(),
        "a dry run pulls nothing"
    );
    let done = agent
        .restore(RestoreOptions {
            dry_run: false,
            ..options
        })
        .await
        .expect("restore");
    assert_eq!(done.items[0].state, RestoreState::Restored);
    let restored: Vec<(PullOrigin, String)> = agent
        .store
        .pulls()
        .expect("pulls")
        .into_iter()
        .filter(|(_, e)| e.origin != PullOrigin::Detected)
        .map(|(_, e)| (e.origin, e.name))
        .collect();
    assert_eq!(restored, [(PullOrigin::Restore, a_by_digest.clone())]);
    assert_eq!(
        lock_ignoring_poison(&runtime.pulls).as_slice(),
        [a_by_digest.as_str()]
    );
}

/// `[warmFromHistory]`: an image removed behind imagekeeper's back is pulled back by the
/// warm cycle and, once back, kept as warm: GC under pressure removes the other unused
/// image, not it, until its last use plus `usedWithin` has passed.
#[tokio::test(start_paused = true)]
async fn an_image_pulled_back_from_history_is_kept_warm_for_the_window() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = registry_of_a_and_b();
    let window = FromHistory {
        used_within: Duration::from_secs(3600),
        max_bytes: None,
    };
    let agent = agent_with_history(dir.path(), runtime.clone(), &[], Some(window));
    let t0 = UnixNanos::from_secs(1_800_000_000);
    let at = |secs: i64| UnixNanos::from_secs(1_800_000_000 + secs);
    use_both_then_lose_a(&agent, &runtime, t0).await;
    // The next detect journals a's removal.
    agent.gc_manager().detect(at(60)).await.expect("detect");
    let plan = agent.warm_cycle().await;
    assert_eq!(plan.count(WarmState::Pulling), 1, "{plan:?}");
    agent.gc_manager().detect(at(120)).await.expect("detect");
    let a = ImageId::new(format!("sha256:{:064x}", 1));
    assert!(
        runtime.node.state().images.iter().any(|i| i.id == a),
        "a is back"
    );

    // Full pressure (95 %): GC takes b, not a, which is warm from history.
    runtime.node.state().fs = Some((1000, 50));
    let report = agent.gc_manager().garbage_collect(at(180)).await;
    let removed: Vec<&ImageId> = report.removed.iter().map(|r| &r.key.image_id).collect();
    assert_eq!(
        removed,
        [&ImageId::new(format!("sha256:{:064x}", 2))],
        "{report:?}"
    );
    let explained = agent.gc_manager().plan(at(240), false).await.expect("plan");
    let a_decision = explained
        .explanation
        .images
        .iter()
        .find(|i| i.key.image_id == a)
        .map(|i| i.decision);
    assert_eq!(a_decision, Some(crate::gc::Decision::KeepWarm));
    // Past its last use (t0) plus the window, a is an ordinary image again, and the
    // warm cycle does not pull it back after GC removes it.
    runtime.node.state().fs = Some((1000, 50));
    let report = agent.gc_manager().garbage_collect(at(3601)).await;
    let removed: Vec<&ImageId> = report.removed.iter().map(|r| &r.key.image_id).collect();
    assert_eq!(removed, [&a], "{report:?}");
}

/// `clusterSignals`: the template of a DaemonSet owning a pod bound to this node names an
/// absent image (a rollout's new revision): the warm cycle pulls it, as an entry of origin
/// `DaemonSet namespace/name`, with no warm set configured; GC then keeps it under pressure
/// while that pod is bound here. An image the configured set names is not entered twice, and
/// a DaemonSet with no pod here pulls nothing.
#[tokio::test(start_paused = true)]
async fn a_daemonsets_new_template_image_is_pulled_ahead_and_kept_while_its_pod_is_bound_here() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Registry {
        registry: Arc::new(vec![
            registry_image(1, "agent:1", 100),
            registry_image(2, "agent:2", 100),
            registry_image(3, "gpu:1", 100),
        ]),
        ..Registry::default()
    };
    runtime.node.state().fs = Some((1000, 900));
    runtime.node.state().images = vec![registry_image(1, "agent:1", 100)].into();
    let agent = agent(dir.path(), runtime.clone(), &[]);
    let pods = agent.gc_manager().bound_pods();
    pods.set_daemonset("kube-system/agent".into(), vec!["agent:1".into()]);
    pods.set_daemonset("kube-system/gpu".into(), vec!["gpu:1".into()]);
    pods.set_pod_owned(
        "kube-system/agent-x1".into(),
        vec!["agent:1".into()],
        Some("kube-system/agent".into()),
    );
    let plan = agent.warm_cycle().await;
    assert_eq!(
        states(&plan),
        [("agent:1".to_owned(), WarmState::Present)],
        "the running template: present; the DaemonSet with no pod here: nothing"
    );
    // The rollout.
    pods.set_daemonset("kube-system/agent".into(), vec!["agent:2".into()]);
    let plan = agent.warm_cycle().await;
    // The running pod's own image is an entry too (the bound pods' prefetch), present.
    assert_eq!(
        states(&plan),
        [
            ("agent:1".to_owned(), WarmState::Present),
            ("agent:2".to_owned(), WarmState::Pulling)
        ]
    );
    assert_eq!(plan.statuses[0].entry.origin, "Pod kube-system/agent-x1");
    assert_eq!(plan.statuses[1].entry.origin, "DaemonSet kube-system/agent");
    assert_eq!(
        lock_ignoring_poison(&runtime.pulls).as_slice(),
        ["agent:2"],
        "only the new template's image was pulled"
    );
    // Under pressure, GC keeps both: the pod runs agent:1, its next run needs agent:2.
    runtime.node.state().fs = Some((1000, 50));
    let now = UnixNanos::from_secs(1_800_100_000);
    let report = agent.gc_manager().garbage_collect(now).await;
    assert!(report.removed.is_empty(), "{:?}", report.removed);
    // The pod goes: agent:2 is no longer kept, and no cycle pulls it again.
    pods.remove_pod("kube-system/agent-x1");
    let report = agent.gc_manager().garbage_collect(now).await;
    assert_eq!(report.removed.len(), 2, "{:?}", report.removed);
    let plan = agent.warm_cycle().await;
    assert!(plan.statuses.is_empty(), "{plan:?}");
    assert_eq!(lock_ignoring_poison(&runtime.pulls).len(), 1);
}

/// Issue 55's prefetch: a pod bound to this node whose init container runs names a main image
/// that is absent (the kubelet pulls it only when it starts that container). While the
/// kubelet is pulling (a fresh pull intent under its root dir) the warm cycle adds no pod's
/// image and counts the yield; once it is not, the cycle pulls the main image as an entry of
/// origin `Pod namespace/name`. A pod naming an `imagePullSecret` gets nothing pulled ahead,
/// and the dry run says why, until the operator opts in to the agent reading pods' pull
/// Secrets: then its image is pulled ahead with its Secret.
#[tokio::test(start_paused = true)]
async fn a_bound_pods_absent_image_is_pulled_ahead_unless_it_needs_a_pull_secret_or_the_kubelet_is_pulling()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Registry {
        registry: Arc::new(vec![
            registry_image(1, "init:1", 100),
            registry_image(2, "main:1", 100),
            registry_image(3, "private:1", 100),
        ]),
        ..Registry::default()
    };
    runtime.node.state().fs = Some((1000, 900));
    runtime.node.state().images = vec![registry_image(1, "init:1", 100)].into();
    let kubelet_root = dir.path().join("kubelet");
    let pulling = kubelet_root.join("image_manager/pulling");
    std::fs::create_dir_all(&pulling).expect("mkdir");
    let now = UnixNanos::from_secs(1_800_000_000);
    let flags = FlagValues {
        db: Some(dir.path().join("records.redb")),
        admin_socket: Some(dir.path().join("admin.sock")),
        minimum_image_ttl_duration: Some("0s".into()),
        image_gc_high_threshold: Some(90),
        image_gc_low_threshold: Some(80),
        kubelet_root_dir: Some(kubelet_root.display().to_string()),
        ..FlagValues::default()
    };
    let config = AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("config");
    let agent = Arc::new(
        Agent::with_runtime(config, Arc::new(ManualClock::new(now)), runtime.clone())
            .expect("agent"),
    );
    let pods = agent.gc_manager().bound_pods();
    pods.set_pod("ns/web".into(), vec!["init:1".into(), "main:1".into()]);
    pods.set_pod("ns/private".into(), vec!["private:1".into()]);
    pods.set_pod_pull_secrets("ns/private", vec!["regcred".into()]);
    // The kubelet is pulling (the intent written at the clock's now, so not stale).
    let intent = pulling.join(crate::kubelet::record_file_name("other:1"));
    std::fs::write(
        &intent,
        r#"{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"other:1"}"#,
    )
    .expect("write the intent");
    std::fs::File::options()
        .write(true)
        .open(&intent)
        .and_then(|f| f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000)))
        .expect("set the intent's mtime");
    let plan = agent.warm_cycle().await;
    assert!(plan.statuses.is_empty(), "yielded to the kubelet: {plan:?}");
    assert!(lock_ignoring_poison(&runtime.pulls).is_empty());
    assert!(
        agent
            .render_metrics()
            .contains("imagekeeper_warm_prefetch_yields_total 1"),
        "the yield is counted"
    );
    // The kubelet's pull ended.
    std::fs::remove_file(&intent).expect("remove the intent");
    let plan = agent.warm_cycle().await;
    assert_eq!(
        states(&plan),
        [
            ("init:1".to_owned(), WarmState::Present),
            ("main:1".to_owned(), WarmState::Pulling),
        ],
        "the pod with a pull Secret: nothing"
    );
    assert_eq!(plan.statuses[1].entry.origin, "Pod ns/web");
    assert_eq!(lock_ignoring_poison(&runtime.pulls).as_slice(), ["main:1"]);
    // Asked, the dry run says why the Secret pod's image is not pulled ahead.
    let dry = crate::admin::AdminBackend::garbage_collect(&*agent, true).await;
    assert_eq!(dry.not_pulled_ahead.len(), 1, "{dry:?}");
    let left_out = &dry.not_pulled_ahead[0];
    assert_eq!(
        (left_out.image.as_str(), left_out.pod.as_str()),
        ("private:1", "ns/private")
    );
    assert!(
        left_out.reason.contains("regcred")
            && left_out
                .reason
                .contains("clusterSignalsPrefetchPullSecrets"),
        "{}",
        left_out.reason
    );
    // With the opt-in, it is pulled ahead with the pod's Secret, read in the pod's namespace.
    pods.set_pod_secret_source(Arc::new(PodSecrets));
    let plan = agent.warm_cycle().await;
    let private = plan
        .statuses
        .iter()
        .find(|s| s.entry.image == "private:1")
        .expect("the Secret pod's image is planned");
    assert_eq!(
        (private.state, private.entry.origin.as_str()),
        (WarmState::Pulling, "Pod ns/private")
    );
    assert_eq!(
        lock_ignoring_poison(&runtime.pulled_as).last(),
        Some(&("private:1".to_owned(), "pod-keeper".to_owned())),
        "pulled with the pod's Secret"
    );
    let dry = crate::admin::AdminBackend::garbage_collect(&*agent, true).await;
    assert!(dry.not_pulled_ahead.is_empty(), "{dry:?}");
}

/// The pull Secrets of the bound pods, in process: `ns/regcred` is a
/// `kubernetes.io/dockerconfigjson` Secret for docker.io (user `pod-keeper`); any other is not
/// found.
#[derive(Debug)]
struct PodSecrets;

impl crate::gc::PodPullSecretSource for PodSecrets {
    fn read_in(&self, namespace: &str, name: &str) -> crate::gc::PullSecretRead {
        // {"auths":{"https://index.docker.io/v1/":{"username":"pod-keeper","password":"s3cret-never-logged"}}}
        const DATA: &str = "eyJhdXRocyI6eyJodHRwczovL2luZGV4LmRvY2tlci5pby92MS8iOnsidXNlcm5hbWUiOiJwb2Qta2VlcGVyIiwicGFzc3dvcmQiOiJzM2NyZXQtbmV2ZXItbG9nZ2VkIn19fQ==";
        let found = (namespace == "ns" && name == "regcred").then(|| {
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "regcred", "namespace": "ns"},
                "type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": DATA},
            }))
            .expect("a manifest")
        });
        let what = format!("Secret {namespace}/{name} not found");
        Box::pin(async move { found.ok_or(what) })
    }
}

/// `clusterSignals` with a CronJob (its lead, 10 minutes by default): before the lead nothing
/// is pulled; from the lead the warm cycle pulls the absent image of a CronJob whose runs are
/// this node's (its template names the node), as an entry of origin `CronJob ns/name`, and GC
/// keeps it under pressure until the run; a CronJob that may run anywhere and never ran here
/// pulls nothing; once a pod of its Job is bound here, it is this node's too.
#[tokio::test(start_paused = true)]
async fn a_cronjobs_image_is_pulled_ahead_from_the_lead_and_kept_until_its_run() {
    use crate::clock::Clock;
    use crate::gc::{CronJobSignal, CronSchedule};
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Registry {
        registry: Arc::new(vec![
            registry_image(1, "etl:1", 100),
            registry_image(2, "report:1", 100),
        ]),
        ..Registry::default()
    };
    runtime.node.state().fs = Some((1000, 900));
    let flags = FlagValues {
        db: Some(dir.path().join("records.redb")),
        admin_socket: Some(dir.path().join("admin.sock")),
        minimum_image_ttl_duration: Some("0s".into()),
        image_gc_high_threshold: Some(90),
        image_gc_low_threshold: Some(80),
        ..FlagValues::default()
    };
    let file = FileConfig {
        cluster_signals: Some(true),
        ..FileConfig::default()
    };
    let config = AgentConfig::resolve(&file, None, &flags).expect("config");
    // 2027-01-15T08:00:00Z (a whole hour); the CronJobs run at 09:00.
    let eight = UnixNanos::from_secs(1_800_000_000);
    let clock = Arc::new(ManualClock::new(eight));
    let agent =
        Arc::new(Agent::with_runtime(config, clock.clone(), runtime.clone()).expect("agent"));
    let signals = agent.gc_manager().cluster_signals();
    let nine = eight.saturating_add(Duration::from_secs(3600));
    let hour = (nine.0 / 1_000_000_000 / 3600 % 24).to_string();
    let job = |image: &str, here: bool| CronJobSignal {
        schedule: CronSchedule::parse(&format!("0 {hour} * * *")).expect("schedule"),
        zone: crate::gc::CronZone::utc(),
        suspend: false,
        images: vec![image.into()],
        here,
    };
    signals.set_cronjob("batch/etl".into(), job("etl:1", true));
    signals.set_cronjob("batch/report".into(), job("report:1", false));
    let plan = agent.warm_cycle().await;
    assert!(plan.statuses.is_empty(), "before the lead: {plan:?}");
    assert_eq!(
        signals.next_lead_change(eight, |_, _| true),
        Some(nine.saturating_sub(Duration::from_secs(600)))
    );
    clock.set(nine.saturating_sub(Duration::from_secs(600)));
    let plan = agent.warm_cycle().await;
    assert_eq!(states(&plan), [("etl:1".to_owned(), WarmState::Pulling)]);
    assert_eq!(plan.statuses[0].entry.origin, "CronJob batch/etl");
    // Under pressure before the run, GC keeps it: needed by the CronJob's run.
    runtime.node.state().fs = Some((1000, 50));
    let report = agent.gc_manager().garbage_collect(clock.now()).await;
    assert!(report.removed.is_empty(), "{:?}", report.removed);
    // A pod of the report CronJob's Job bound here: its runs are this node's.
    let pods = agent.gc_manager().bound_pods();
    pods.set_pod_job(
        "batch/report-29012345-x7",
        Some("batch/report-29012345".into()),
    );
    runtime.node.state().fs = Some((1000, 900));
    let plan = agent.warm_cycle().await;
    let pulled: Vec<String> = lock_ignoring_poison(&runtime.pulls).clone();
    assert_eq!(pulled, ["etl:1", "report:1"], "{plan:?}");
    // Past the run, nothing keeps them.
    runtime.node.state().fs = Some((1000, 50));
    clock.set(nine.saturating_add(Duration::from_secs(1)));
    let report = agent.gc_manager().garbage_collect(clock.now()).await;
    assert_eq!(report.removed.len(), 2, "{:?}", report.removed);
}

/// Every entry present: the next cycle over the same entries and the same listing plans
/// and writes nothing (only the entries are read, off the worker) and answers the same plan.
/// An image removed behind the agent's back changes the listing: that cycle plans again and
/// pulls it back, as a cycle after a changed set of entries plans again.
#[tokio::test(start_paused = true)]
async fn a_settled_warm_set_is_planned_again_only_when_the_listing_or_the_entries_change() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = registry_of_a_and_b();
    let agent = agent(
        dir.path(),
        runtime.clone(),
        &[spec("a:1", None), spec("b:1", None)],
    );
    let judged = || lock_ignoring_poison(&agent.warm_judged_on).len();
    let present = vec![
        ("a:1".to_owned(), WarmState::Present),
        ("b:1".to_owned(), WarmState::Present),
    ];
    let first = agent.warm_cycle().await;
    assert_eq!(states(&first), present);
    assert_eq!(judged(), 3, "the entries, the plan, the stored state");
    let rows = agent.store.warm_rows().expect("rows");

    let second = agent.warm_cycle().await;
    assert_eq!(states(&second), present);
    assert_eq!(judged(), 4, "only the entries: no plan, no write");
    assert_eq!(agent.store.warm_rows().expect("rows"), rows);

    runtime
        .node
        .state()
        .images
        .retain(|i| i.repo_tags[0].ends_with("b:1"));
    let third = agent.warm_cycle().await;
    assert_eq!(
        states(&third),
        vec![
            ("a:1".to_owned(), WarmState::Pulling),
            ("b:1".to_owned(), WarmState::Present),
        ]
    );
    assert_eq!(judged(), 7);
    assert_eq!(
        lock_ignoring_poison(&runtime.pulls).len(),
        1,
        "a pulled back"
    );

    // After the pull the listing is new again: one cycle plans it, the next one does not.
    assert_eq!(states(&agent.warm_cycle().await), present);
    assert_eq!(judged(), 10);
    assert_eq!(states(&agent.warm_cycle().await), present);
    assert_eq!(judged(), 11);

    // A changed set of entries plans again, even over the same listing.
    lock_ignoring_poison(&agent.config).gc.warm =
        WarmSet::new(resolve_specs(&[spec("b:1", None)], |i| format!("warm[{i}]")).expect("specs"));
    assert_eq!(
        states(&agent.warm_cycle().await),
        vec![("b:1".to_owned(), WarmState::Present)]
    );
    assert_eq!(judged(), 14);
}

/// A warm set of the cluster's images alone (a bound pod's), every one present: the loop
/// waits for a change instead of listing the node every warmPeriod. A detect that sees the
/// image leave the node wakes it, and it pulls the image back; with a configured entry
/// beside it, the period holds again.
#[tokio::test(start_paused = true)]
async fn a_warm_set_settled_on_the_clusters_images_waits_for_a_change_not_the_period() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = registry_of_a_and_b();
    let lists = || runtime.lists.load(std::sync::atomic::Ordering::Relaxed);
    let agent = agent(dir.path(), runtime.clone(), &[]);
    agent
        .gc_manager()
        .bound_pods()
        .set_pod("ns/web".into(), vec!["a:1".into()]);
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(Arc::clone(&agent).warm_loop(stop));
    let period = agent.config().warm.period;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The first cycle, and the one the pod's change (told before the loop ran) wakes.
    assert_eq!(lists(), 2);
    assert_eq!(
        states(&agent.warm_status().expect("a plan")),
        vec![("a:1".to_owned(), WarmState::Present)]
    );
    use super::super::loops::{CycleOutcome, Loop};
    assert!(matches!(
        agent.run_cycle(Loop::Detect).await,
        CycleOutcome::Done
    ));
    let listed = lists();
    tokio::time::sleep(period * 10).await;
    assert_eq!(
        lists(),
        listed,
        "ten warm periods and a detect with nothing gone, settled: no warm listing"
    );

    // The image goes behind the agent's back; the detect sees it leave and wakes the loop.
    runtime
        .node
        .state()
        .images
        .retain(|i| i.repo_tags[0].ends_with("b:1"));
    assert!(matches!(
        agent.run_cycle(Loop::Detect).await,
        CycleOutcome::Done
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        lock_ignoring_poison(&runtime.pulls).as_slice(),
        ["a:1"],
        "pulled back at the detect's news"
    );

    // A configured entry: the period holds again (after the reload's own cycle).
    lock_ignoring_poison(&agent.config).gc.warm =
        WarmSet::new(resolve_specs(&[spec("b:1", None)], |i| format!("warm[{i}]")).expect("specs"));
    agent.warm_wanted.notify_one();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = lists();
    tokio::time::sleep(period * 3).await;
    assert_eq!(lists(), before + 3, "a cycle each period");
    stop_tx.send(true).expect("stop");
    task.await.expect("the loop ends");
}
