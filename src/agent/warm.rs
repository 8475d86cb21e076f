//! The warm loop and restore: the agent's side of `crate::warm`. Every warm period the agent
//! lists the runtime's images and the image filesystem, plans with [`crate::warm::plan`] and
//! pulls what the plan says through the image manager (credentials from the node and the
//! plugins, the persisted backoff and the QPS limit, as for any pull; at most
//! `warmParallelPulls` at once). `restore` ([`restore_images`]) pulls back the images the
//! journal says were removed externally, with the same disk rule.
//!
//! Invariants: the loop runs on its own task, so a long pull never delays detect or GC; a
//! "does not fit" is logged once per entry until it fits again; a warm pull is never made
//! while the image filesystem's usage is unknown; the GC keeps every image of the warm set
//! (`GcConfig::warm`: `[[warm]]` and `--warm-set-dir`), so what the loop pulls for it is not
//! collected while it is warm. `[warmFromHistory]` entries are pulled back and, once back,
//! kept warm until their last use plus `usedWithin` (`WarmSet::from_history`: the GC reads
//! the same entries from its journal).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::cri::ImageRuntime;
use crate::gc::GcPolicy;
use crate::model::{PullOrigin, RecordKey, RuntimeImage, StoredWarmState, UnixNanos, WarmRow};
use crate::pull::{ImageManager, MatchIndex, PodRef, PullAuth, PullPolicy, PullRuntime};
use crate::store::Store;
use crate::warm::{
    FromHistory, PlanInput, RestoreItem, RestoreOptions, RestoreOutcome, RestoreState, WarmEntry,
    WarmPlan, WarmState, history_entries, inodes_at_or_above_low, plan, restore_candidates,
};

use super::{Agent, AgentError, AgentRuntime, lock_ignoring_poison};

/// The pod name warm and restore pulls are logged under (they are for no pod).
pub const WARM_POD_NAME: &str = "imagekeeper-warm";

/// The sizes this node's history knows: each stored record's and each journaled removal's,
/// by the names stored for its key.
struct HistorySizes {
    known: Vec<(RuntimeImage, u64)>,
    /// `known`'s images by their names, so an entry's size is one lookup of its name.
    index: MatchIndex,
}

impl HistorySizes {
    fn read(store: &Store) -> Result<HistorySizes, AgentError> {
        let mut sizes: BTreeMap<RecordKey, u64> = BTreeMap::new();
        // The journal first (oldest first), then the records: a present record's size wins.
        for (jk, entry) in store.journal()? {
            sizes.insert(jk.key, entry.size);
        }
        for record in store.records()? {
            sizes.insert(record.key, record.record.size);
        }
        let known: Vec<(RuntimeImage, u64)> = store
            .all_names()?
            .into_iter()
            .filter_map(|(key, names)| {
                let size = *sizes.get(&key)?;
                Some((
                    RuntimeImage {
                        id: key.image_id,
                        repo_tags: names.repo_tags,
                        repo_digests: names.repo_digests,
                        runtime_handler: key.runtime_handler,
                        ..RuntimeImage::default()
                    },
                    size,
                ))
            })
            .collect();
        let index = MatchIndex::of_images(known.iter().map(|(image, _)| image));
        Ok(HistorySizes { known, index })
    }

    fn size_of(&self, entry: &WarmEntry) -> Option<u64> {
        self.index
            .named_by(&entry.image, &entry.runtime_handler)
            .into_iter()
            .filter_map(|at| self.known.get(at))
            .map(|(_, size)| *size)
            .max()
    }
}

/// The warm entries `[warmFromHistory]` adds at `now` (those back too: the plan finds them
/// present, and the GC keeps them, `WarmSet::from_history`).
fn history_warm_entries(
    store: &Store,
    window: FromHistory,
    now: UnixNanos,
) -> Result<Vec<WarmEntry>, AgentError> {
    let journal = store.journal()?;
    let stored_names = store.names_of_keys(journal.iter().map(|(k, _)| &k.key))?;
    let names = |key: &RecordKey| stored_names.get(key).cloned();
    Ok(history_entries(&journal, &names, now, window))
}

impl<R: AgentRuntime> Agent<R> {
    /// One warm cycle at the clock's now: plans (see `crate::warm`) and runs the pulls it
    /// plans, concurrently (the plan holds at most `warmParallelPulls`). Returns the plan,
    /// with a failed pull's entry `Failed`. A runtime or store that cannot be read ends the
    /// cycle with nothing pulled (logged).
    pub async fn warm_cycle(self: &Arc<Self>) -> WarmPlan {
        match self.warm_cycle_inner().await {
            Ok(plan) => plan,
            Err(e) => {
                warn!(error = %e, "Warm cycle failed");
                WarmPlan::default()
            }
        }
    }

    async fn warm_cycle_inner(self: &Arc<Self>) -> Result<WarmPlan, AgentError> {
        let now = self.clock.now();
        let config = self.config();
        let entries = {
            let agent = Arc::clone(self);
            let config = config.clone();
            self.off_the_workers(move || {
                let mut entries = config.gc.warm.entries().to_vec();
                if let Some(window) = config.warm.from_history {
                    entries.extend(history_warm_entries(&agent.store, window, now)?);
                }
                Ok(entries)
            })
            .await?
        };
        if entries.is_empty() {
            let plan = WarmPlan::default();
            self.metrics.record_warm_plan(&plan);
            let agent = Arc::clone(self);
            return self
                .off_the_workers(move || {
                    agent.persist_warm(&plan, &[], &BTreeMap::new(), now);
                    Ok(plan)
                })
                .await;
        }
        let runtime = self.gc.runtime();
        let images = runtime.list_images().await.map_err(AgentError::Runtime)?;
        let stats = match runtime.image_fs_stats().await {
            Ok(stats) => Some(stats),
            Err(e) => {
                warn!(error = %e, "Warm cycle: cannot read the image filesystem; no warm pull this cycle");
                None
            }
        };
        // The judge (the history's sizes and the plan) reads the store and looks up every
        // entry's name: work that grows with the set, so it runs off the async workers, where
        // a set of MAX_WARM_ENTRIES cannot hold up the probes, detect or the shutdown.
        let (mut planned, images) = {
            let agent = Arc::clone(self);
            self.off_the_workers(move || {
                let fs = stats.as_ref().map(|s| (s.capacity, s.available));
                let policy = &config.gc.policy;
                let sizes = HistorySizes::read(&agent.store)?;
                let planned = plan(&PlanInput {
                    entries: &entries,
                    now,
                    images: &images,
                    fs,
                    low_threshold_percent: policy.low_threshold_percent,
                    bytes_low: policy.bytes.map(|b| b.low),
                    inodes_at_or_above_low: stats
                        .as_ref()
                        .is_some_and(|s| inodes_at_or_above_low(policy.inodes.map(|t| t.low), s)),
                    max_pulls: config.warm.parallel_pulls,
                    known_size: &|e| sizes.size_of(e),
                });
                Ok((planned, images))
            })
            .await?
        };
        let mut pulls = tokio::task::JoinSet::new();
        for (index, status) in planned.statuses.iter().enumerate() {
            if status.state != WarmState::Pulling {
                continue;
            }
            info!(
                image = status.entry.image.as_str(),
                runtime_handler = status.entry.runtime_handler.as_str(),
                size = status.size,
                origin = status.entry.origin.as_str(),
                "Pulling a warm image"
            );
            let agent = Arc::clone(self);
            let entry = status.entry.clone();
            pulls.spawn(async move { (index, agent.warm_pull(&entry).await) });
        }
        let mut pulled: BTreeMap<usize, String> = BTreeMap::new();
        while let Some(joined) = pulls.join_next().await {
            let Ok((index, result)) = joined else {
                continue;
            };
            let status = &mut planned.statuses[index];
            match result {
                Ok(image_ref) => {
                    pulled.insert(index, image_ref.clone());
                    info!(
                        image = status.entry.image.as_str(),
                        image_ref = image_ref.as_str(),
                        "Pulled a warm image"
                    );
                    self.metrics.record_warm_pull(true);
                }
                Err(message) => {
                    warn!(
                        image = status.entry.image.as_str(),
                        error = message.as_str(),
                        "Failed to pull a warm image"
                    );
                    self.metrics.record_warm_pull(false);
                    status.state = WarmState::Failed;
                    status.detail = message;
                }
            }
        }
        self.report_does_not_fit(&planned);
        self.metrics.record_warm_plan(&planned);
        *lock_ignoring_poison(&self.warm_last) = Some(planned.clone());
        let agent = Arc::clone(self);
        self.off_the_workers(move || {
            agent.persist_warm(&planned, &images, &pulled, now);
            Ok(planned)
        })
        .await
    }

    /// Runs `work` on tokio's blocking pool, never on an async worker, and waits for it.
    async fn off_the_workers<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce() -> Result<T, AgentError> + Send + 'static,
    ) -> Result<T, AgentError> {
        #[cfg(test)]
        let agent = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            #[cfg(test)]
            lock_ignoring_poison(&agent.warm_judged_on).push(std::thread::current().id());
            work()
        })
        .await
        .map_err(|e| AgentError::Serve {
            step: "the warm cycle's work on the blocking pool",
            source: Box::new(e),
        })?
    }

    /// Writes the warm set's state for `inspect` (schema 5's `warm` table, replaced whole in
    /// one transaction): each entry's state, since when (kept from the stored row while the
    /// state stays), and the image the runtime listed for it, or the image a pull of this
    /// cycle returned. A failed write is logged: the warm cycle itself does not depend on it.
    fn persist_warm(
        &self,
        plan: &WarmPlan,
        images: &[RuntimeImage],
        pulled: &BTreeMap<usize, String>,
        now: UnixNanos,
    ) {
        let before = match self.store.warm_rows() {
            Ok(rows) => rows,
            Err(e) => {
                warn!(error = %e, "Cannot read the stored warm set state");
                Vec::new()
            }
        };
        // Each stored row's `since` by (image, handler, state), the first row of each as a
        // search from the front finds it; the listed images by their names: one pass each,
        // no search per entry (issue 41: that was quadratic in the set's size).
        let mut since_of: HashMap<(&str, &str, StoredWarmState), UnixNanos> = HashMap::new();
        for r in &before {
            since_of
                .entry((r.image.as_str(), r.runtime_handler.as_str(), r.state))
                .or_insert(r.since);
        }
        let listed = MatchIndex::of_images(images);
        let rows: Vec<WarmRow> = plan
            .statuses
            .iter()
            .enumerate()
            .map(|(i, status)| {
                let entry = &status.entry;
                let state = stored_warm_state(status.state);
                let since = since_of
                    .get(&(entry.image.as_str(), entry.runtime_handler.as_str(), state))
                    .copied()
                    .unwrap_or(now);
                let image_id = match pulled.get(&i) {
                    Some(image_ref) => image_ref.clone(),
                    // The last listed image it names.
                    None => listed
                        .named_by(&entry.image, &entry.runtime_handler)
                        .last()
                        .and_then(|&at| images.get(at))
                        .map(|image| image.id.as_str().to_owned())
                        .unwrap_or_default(),
                };
                WarmRow {
                    image: entry.image.clone(),
                    runtime_handler: entry.runtime_handler.clone(),
                    state,
                    since,
                    image_id,
                }
            })
            .collect();
        let mut batch = crate::store::Batch::new();
        batch.replace_warm(rows);
        if let Err(e) = self.store.apply(&batch) {
            warn!(error = %e, "Cannot record the warm set state in the database");
        }
    }

    /// One warm pull through the image manager: IfNotPresent, for no pod, with the node's
    /// credentials.
    async fn warm_pull(&self, entry: &WarmEntry) -> Result<String, String> {
        let pod = PodRef {
            name: WARM_POD_NAME.to_owned(),
            origin: PullOrigin::Warm,
            ..PodRef::default()
        };
        self.images
            .ensure_image_exists_with(
                &pod,
                &entry.image,
                PullPolicy::IfNotPresent,
                PullAuth::Keyring(&[]),
                &entry.runtime_handler,
            )
            .await
            .map_err(|e| format!("{}: {}", e.reason(), e.message()))
    }

    /// Logs each entry that does not fit once, until it fits (or leaves the set) again, and
    /// says it as a Node Event (`--events`) at the same time.
    fn report_does_not_fit(&self, plan: &WarmPlan) {
        let mut logged = lock_ignoring_poison(&self.warm_logged);
        let now: BTreeSet<(String, String)> = plan
            .statuses
            .iter()
            .filter(|s| s.state == WarmState::DoesNotFit)
            .map(|s| (s.entry.image.clone(), s.entry.runtime_handler.clone()))
            .collect();
        for status in plan
            .statuses
            .iter()
            .filter(|s| s.state == WarmState::DoesNotFit)
        {
            let key = (
                status.entry.image.clone(),
                status.entry.runtime_handler.clone(),
            );
            if !logged.contains(&key) {
                warn!(
                    image = status.entry.image.as_str(),
                    runtime_handler = status.entry.runtime_handler.as_str(),
                    origin = status.entry.origin.as_str(),
                    detail = status.detail.as_str(),
                    "A warm image does not fit: it is not pulled while pulling it would take the image filesystem above the GC's low threshold"
                );
                self.node_events.warm_does_not_fit(
                    &status.entry.image,
                    &status.entry.runtime_handler,
                    &status.detail,
                );
            }
        }
        *logged = now;
    }

    /// The last warm cycle's plan, if one ran.
    /// A dry run's outcome with the warm entries that do not fit, as the last warm cycle
    /// judged them (issue 25: "does not fit" is shown by `explain`).
    pub(super) fn with_warm_does_not_fit(
        &self,
        mut outcome: crate::admin::GcOutcome,
    ) -> crate::admin::GcOutcome {
        if let Some(plan) = self.warm_status() {
            outcome.warm_does_not_fit = crate::admin::WarmDoesNotFit::of_plan(&plan);
        }
        outcome
    }

    pub fn warm_status(&self) -> Option<WarmPlan> {
        lock_ignoring_poison(&self.warm_last).clone()
    }

    /// The warm loop: a cycle at start, then every `warmPeriod` (read again after each
    /// cycle, so a reload changes it), until `stop`.
    pub(super) async fn warm_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                return;
            }
            self.warm_cycle().await;
            let period = self.config().warm.period;
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// `restore` through the running agent: [`restore_images`] with its image manager.
    pub async fn restore(&self, options: RestoreOptions) -> Result<RestoreOutcome, AgentError> {
        let policy = self.config().gc.policy;
        let outcome = restore_images(
            self.gc.runtime(),
            &self.images,
            &self.store,
            &policy,
            self.clock.now(),
            options,
        )
        .await?;
        for item in &outcome.items {
            match item.state {
                RestoreState::Restored => self.metrics.record_warm_pull(true),
                RestoreState::Failed => self.metrics.record_warm_pull(false),
                _ => {}
            }
        }
        Ok(outcome)
    }
}

/// The stored form of a warm entry's state.
fn stored_warm_state(state: WarmState) -> StoredWarmState {
    match state {
        WarmState::Present => StoredWarmState::Present,
        WarmState::Pulling => StoredWarmState::Pulling,
        WarmState::Queued => StoredWarmState::Queued,
        WarmState::DoesNotFit => StoredWarmState::DoesNotFit,
        WarmState::Failed => StoredWarmState::Failed,
        WarmState::Expired => StoredWarmState::Expired,
    }
}

/// Pulls back, most recently used first, the images the journal says were removed externally
/// and used within `options.used_within` of `now`, within `options.max_bytes` and under the
/// GC's low lines (`policy`: the low threshold, the byte budget's low line, the low inode
/// threshold) with the same rule as a warm cycle (their journal sizes are known). One pull at a time; a dry run pulls nothing.
pub async fn restore_images<R: ImageRuntime, P: PullRuntime>(
    runtime: &R,
    images: &ImageManager<P, Store>,
    store: &Store,
    policy: &GcPolicy,
    now: UnixNanos,
    options: RestoreOptions,
) -> Result<RestoreOutcome, AgentError> {
    let journal = store.journal()?;
    let stored_names = store.names_of_keys(journal.iter().map(|(k, _)| &k.key))?;
    let names = |key: &RecordKey| stored_names.get(key).cloned();
    let window = FromHistory {
        used_within: options.used_within,
        max_bytes: options.max_bytes,
    };
    let candidates = restore_candidates(&journal, &names, now, window);
    let entries: Vec<WarmEntry> = candidates.iter().filter_map(|c| c.entry()).collect();
    let listed = runtime.list_images().await.map_err(AgentError::Runtime)?;
    let fs = runtime
        .image_fs_stats()
        .await
        .map_err(AgentError::Runtime)?;
    let planned = plan(&PlanInput {
        entries: &entries,
        now,
        images: &listed,
        fs: Some((fs.capacity, fs.available)),
        low_threshold_percent: policy.low_threshold_percent,
        bytes_low: policy.bytes.map(|b| b.low),
        inodes_at_or_above_low: inodes_at_or_above_low(policy.inodes.map(|t| t.low), &fs),
        max_pulls: usize::MAX,
        known_size: &|_| None,
    });
    let mut items = Vec::with_capacity(candidates.len());
    for candidate in &candidates {
        let image = candidate.image.clone().unwrap_or_default();
        let status = planned.statuses.iter().find(|s| {
            s.entry.image == image && s.entry.runtime_handler == candidate.key.runtime_handler
        });
        let (state, detail) = match (&candidate.skipped, status) {
            (Some(why), _) => (RestoreState::Skipped, why.clone()),
            (None, None) => (
                RestoreState::Skipped,
                "another removal of the same name comes first".to_owned(),
            ),
            (None, Some(status)) => match status.state {
                WarmState::Present => (RestoreState::Present, String::new()),
                WarmState::DoesNotFit => (RestoreState::DoesNotFit, status.detail.clone()),
                WarmState::Pulling if options.dry_run => {
                    (RestoreState::WouldRestore, String::new())
                }
                WarmState::Pulling => {
                    let pod = PodRef {
                        name: WARM_POD_NAME.to_owned(),
                        origin: PullOrigin::Restore,
                        ..PodRef::default()
                    };
                    match images
                        .ensure_image_exists_with(
                            &pod,
                            &image,
                            PullPolicy::IfNotPresent,
                            PullAuth::Keyring(&[]),
                            &candidate.key.runtime_handler,
                        )
                        .await
                    {
                        Ok(image_ref) => {
                            info!(
                                image = image.as_str(),
                                image_ref = image_ref.as_str(),
                                "Restored an image removed externally"
                            );
                            (RestoreState::Restored, String::new())
                        }
                        Err(e) => (
                            RestoreState::Failed,
                            format!("{}: {}", e.reason(), e.message()),
                        ),
                    }
                }
                _ => (RestoreState::Skipped, status.detail.clone()),
            },
        };
        items.push(RestoreItem {
            image_id: candidate.key.image_id.as_str().to_owned(),
            runtime_handler: candidate.key.runtime_handler.clone(),
            image,
            size: candidate.size,
            last_used: candidate.last_used,
            removed_at: candidate.removed_at,
            state,
            detail,
        });
    }
    Ok(RestoreOutcome {
        items,
        dry_run: options.dry_run,
        omitted: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{AgentConfig, FileConfig, FlagValues, NoEvents};
    use crate::clock::ManualClock;
    use crate::cri::{CriError, RpcCode};
    use crate::model::{ImageFsStats, ImageId, PullCredentials, RuntimeContainer};
    use crate::pull::image_matches;
    use crate::replay::ScriptedRuntime;
    use crate::warm::{WarmEntrySpec, WarmSet, resolve_specs};
    use std::sync::Mutex;
    use std::time::Duration;

    /// A scripted runtime with a registry: a pull adds the registry's image to the list and
    /// takes its size from the available bytes; every pull and removal is counted.
    #[derive(Clone, Default)]
    struct Registry {
        node: ScriptedRuntime,
        registry: Arc<Vec<RuntimeImage>>,
        pulls: Arc<Mutex<Vec<String>>>,
    }

    impl crate::cri::ImageRuntime for Registry {
        async fn list_images(&self) -> Result<Vec<RuntimeImage>, CriError> {
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
            _credentials: Option<&PullCredentials>,
        ) -> Result<String, CriError> {
            lock_ignoring_poison(&self.pulls).push(image.to_owned());
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

    /// An image a registry serves: it has a repo digest, so `--protect-irreplaceable` (on by
    /// default) does not keep it.
    fn registry_image(n: u8, name: &str, size: u64) -> RuntimeImage {
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

    fn unshared_agent(
        dir: &std::path::Path,
        runtime: Registry,
        specs: &[WarmEntrySpec],
        from_history: Option<FromHistory>,
    ) -> Agent<Registry> {
        let flags = FlagValues {
            db: Some(dir.join("records.redb")),
            admin_socket: Some(dir.join("admin.sock")),
            minimum_image_ttl_duration: Some("0s".into()),
            image_gc_high_threshold: Some(90),
            image_gc_low_threshold: Some(80),
            ..FlagValues::default()
        };
        let mut config =
            AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("config");
        config.gc.warm =
            WarmSet::new(resolve_specs(specs, |i| format!("warm[{i}]")).expect("specs"))
                .with_from_history(from_history);
        config.warm.from_history = from_history;
        let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(1_800_000_000)));
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

    /// Node Events record what they are given.
    #[derive(Debug, Default, Clone)]
    struct RecordedEvents(Arc<Mutex<Vec<crate::agent::NodeEvent>>>);

    impl crate::agent::EventSink for RecordedEvents {
        fn publish(&self, event: crate::agent::NodeEvent) {
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
            .with_node_events(crate::agent::NodeEvents::new(Box::new(events.clone()))),
        );
        for _ in 0..3 {
            assert_eq!(agent.warm_cycle().await.count(WarmState::DoesNotFit), 1);
        }
        let said = lock_ignoring_poison(&events.0).clone();
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(said[0].type_, crate::agent::NodeEventType::Warning);
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
}
