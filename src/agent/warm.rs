//! The warm loop and restore: the agent's side of `crate::warm`. Every warm period the agent
//! lists the runtime's images and the image filesystem, plans with [`crate::warm::plan`] and
//! pulls what the plan says through the image manager (credentials from the node and the
//! plugins, the persisted backoff and the QPS limit, as for any pull; at most
//! `warmParallelPulls` at once). `restore` ([`restore_images`]) pulls back the images the
//! journal says were removed externally, with the same disk rule. What the history holds
//! (`warm::HistorySizes`, `warm::history_warm_entries`, `warm::restore_candidates_in`) and
//! what restore does with each candidate (`warm::restore_step`) are `warm`'s; this file runs
//! the pulls and records their outcome. A cycle whose entries and listing are those of the
//! last cycle that found every entry present (and wrote it) would plan and write the same: it
//! does neither ([`WarmSettled`]; with cluster signals, the bound pods' images are warm entries,
//! and a node holds them all nearly always). When every entry is the cluster's (no `[[warm]]`,
//! no `[warmFromHistory]`) and present, the loop waits for a change, not the period: those
//! images are kept and runtime-pinned, so only a hand on the runtime removes one, and the
//! next detect that sees an image leave wakes the loop (as a reload, a change of the bound
//! pods, the CronJobs, their lead or the KeepSets do). The history's sizes are read only for
//! an entry the runtime does not list.
//!
//! Invariants: the loop runs on its own task, so a long pull never delays detect or GC; a
//! "does not fit" is logged once per entry until it fits again; a warm pull is never made
//! while the image filesystem's usage is unknown; the GC keeps every image of the warm set
//! (`GcConfig::warm`: `[[warm]]` and `warmSetDir`), so what the loop pulls for it is not
//! collected while it is warm. `[warmFromHistory]` entries are pulled back and, once back,
//! kept warm until their last use plus `usedWithin` (`WarmSet::from_history`: the GC reads
//! the same entries from its journal).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::gc::GcPolicy;
use crate::model::{PullOrigin, RuntimeImage, StoredWarmState, UnixNanos, WarmRow};
use crate::pull::{ImageManager, MatchIndex, PodRef, PullAuth, PullPolicy, PullRuntime};
use crate::runtime::ImageRuntime;
use crate::store::Store;
use crate::warm::{
    FromHistory, HistorySizes, PlanInput, RestoreItem, RestoreOptions, RestoreOutcome,
    RestoreState, RestoreStep, WarmEntry, WarmPlan, WarmState, history_warm_entries,
    inodes_at_or_above_low, plan, restore_candidates_in, restore_step,
};

use super::{Agent, AgentError, AgentRuntime, lock_ignoring_poison};

/// The pod name warm and restore pulls are logged under (they are for no pod).
pub const WARM_POD_NAME: &str = "imagekeeper-warm";

/// The origin of a bound pod's prefetch entry, before the pod's `namespace/name`.
pub const POD_ORIGIN_PREFIX: &str = "Pod ";

impl<R: AgentRuntime> Agent<R> {
    /// One warm cycle at the clock's now: plans (see `crate::warm`) and runs the pulls it
    /// plans, concurrently (the plan holds at most `warmParallelPulls`). Returns the plan,
    /// with a failed pull's entry `Failed`. A runtime or store that cannot be read ends the
    /// cycle with nothing pulled (logged).
    pub async fn warm_cycle(self: &Arc<Self>) -> WarmPlan {
        self.warm_waits_for_change.store(false, Ordering::Release);
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
        let cluster = self.cluster_warm_entries(config.gc.warm.entries(), now);
        // No warm set (the common node): once the table is written empty, a cycle has
        // nothing to read, judge or write, so it takes no thread of the blocking pool and no
        // transaction (every minute, at 2k images about 3 ms of CPU for nothing).
        if config.gc.warm.entries().is_empty()
            && cluster.is_empty()
            && config.warm.from_history.is_none()
            && self.warm_table_cleared.load(Ordering::Acquire)
        {
            let plan = WarmPlan::default();
            self.metrics.record_warm_plan(&plan);
            return Ok(plan);
        }
        let entries = {
            let agent = Arc::clone(self);
            let config = config.clone();
            self.off_the_workers(move || {
                let mut entries = config.gc.warm.entries().to_vec();
                entries.extend(cluster);
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
        let listing = WarmSettled::fingerprint(&images);
        // Every entry the cluster's: those images are kept and runtime-pinned, so neither
        // imagekeeper's GC nor the kubelet's removes one.
        // (And none ends at a time: no change would tell the loop it ended.)
        let cluster_only = config.gc.warm.entries().is_empty()
            && config.warm.from_history.is_none()
            && entries
                .iter()
                .all(|e| e.until.is_none() && e.lifetime.is_none());
        if let Some(plan) = self.settled_plan(&entries, listing, now) {
            self.metrics.record_warm_plan(&plan);
            self.warm_waits_for_change
                .store(cluster_only, Ordering::Release);
            return Ok(plan);
        }
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
        let (mut planned, images, entries) = {
            let agent = Arc::clone(self);
            self.off_the_workers(move || {
                let fs = stats.as_ref().map(|s| (s.capacity, s.available));
                let policy = &config.gc.policy;
                // Read once, and only for an entry the runtime does not list.
                let sizes = std::cell::OnceCell::new();
                let known_size = |e: &WarmEntry| {
                    sizes
                        .get_or_init(|| HistorySizes::read(&agent.store))
                        .as_ref()
                        .ok()
                        .and_then(|s: &HistorySizes| s.size_of(e))
                };
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
                    known_size: &known_size,
                });
                if let Some(Err(e)) = sizes.into_inner() {
                    return Err(e.into());
                }
                Ok((planned, images, entries))
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
        let any_pulled = !pulled.is_empty();
        // A KeepSet's image pulled, failed or not fitting changes the set's report.
        let keep_set_news = planned.statuses.iter().enumerate().any(|(i, s)| {
            s.entry.origin.starts_with(crate::gc::KEEPSET_REASON_PREFIX)
                && (pulled.contains_key(&i)
                    || matches!(s.state, WarmState::Failed | WarmState::DoesNotFit))
        });
        let agent = Arc::clone(self);
        let (planned, written) = self
            .off_the_workers(move || {
                let written = agent.persist_warm(&planned, &images, &pulled, now);
                Ok((planned, written))
            })
            .await?;
        let all_present = planned
            .statuses
            .iter()
            .all(|s| s.state == WarmState::Present);
        *lock_ignoring_poison(&self.warm_settled) =
            (written && all_present).then_some(WarmSettled { entries, listing });
        self.warm_waits_for_change
            .store(written && all_present && cluster_only, Ordering::Release);
        // A warm image just pulled is kept: its runtime pin is written now, not at the next
        // detect (the kubelet's DeleteUnusedImages may run first, under pressure every 10 s).
        if any_pulled {
            self.carry_keeps_now().await;
        }
        if keep_set_news {
            self.keep_sets_wanted.notify_one();
        }
        Ok(planned)
    }

    /// The last plan, when this cycle would plan and write just what it did: the same
    /// entries, each still active, over the same listing as the last cycle that found every
    /// entry present and wrote it.
    fn settled_plan(
        &self,
        entries: &[WarmEntry],
        listing: u64,
        now: UnixNanos,
    ) -> Option<WarmPlan> {
        let settled = lock_ignoring_poison(&self.warm_settled);
        let same = settled
            .as_ref()
            .is_some_and(|s| s.listing == listing && s.entries == entries);
        if !same || !entries.iter().all(|e| e.active(now)) {
            return None;
        }
        lock_ignoring_poison(&self.warm_last).clone()
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
    /// cycle returned. A failed write is logged (and returns false): the warm cycle itself
    /// does not depend on it.
    fn persist_warm(
        &self,
        plan: &WarmPlan,
        images: &[RuntimeImage],
        pulled: &BTreeMap<usize, String>,
        now: UnixNanos,
    ) -> bool {
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
        let empty = rows.is_empty();
        let mut batch = crate::store::Batch::new();
        batch.replace_warm(rows);
        let written = match self.store.apply(&batch) {
            Ok(_) => true,
            Err(e) => {
                warn!(error = %e, "Cannot record the warm set state in the database");
                false
            }
        };
        self.warm_table_cleared
            .store(empty && written, Ordering::Release);
        written
    }

    /// One warm pull through the image manager: IfNotPresent, for no pod, with the node's
    /// credentials.
    async fn warm_pull(&self, entry: &WarmEntry) -> Result<String, String> {
        // A KeepSet's warm entry pulls with the set's pull Secrets, a bound pod's with the
        // pod's (only offered with the opt-in: `BoundPods::prefetch_images`).
        let (keyring, notes) = match entry.origin.strip_prefix(POD_ORIGIN_PREFIX) {
            Some(pod) => self.pod_keyring(pod).await,
            None => {
                let secrets: BTreeSet<String> = entry
                    .origin
                    .strip_prefix(crate::gc::KEEPSET_REASON_PREFIX)
                    .map(|name| {
                        self.gc
                            .node_keep_sets()
                            .pull_secrets_of(name)
                            .into_iter()
                            .collect()
                    })
                    .unwrap_or_default();
                self.keep_set_keyring(&secrets).await
            }
        };
        self.pull_for_no_pod(
            WARM_POD_NAME,
            PullOrigin::Warm,
            &entry.image,
            &entry.runtime_handler,
            &keyring,
        )
        .await
        .map_err(|e| super::keep_sets::with_notes(e, &notes))
    }

    /// One pull for no pod (logged under `pod_name`, recorded as `origin`) through the image
    /// manager: IfNotPresent, with `keyring`'s pull Secrets then the node's credentials (the
    /// kubelet's keyring); the error as "reason: message".
    pub(super) async fn pull_for_no_pod(
        &self,
        pod_name: &str,
        origin: PullOrigin,
        image: &str,
        runtime_handler: &str,
        keyring: &[crate::pull::DockerConfig],
    ) -> Result<String, String> {
        let pod = PodRef {
            name: pod_name.to_owned(),
            origin,
            ..PodRef::default()
        };
        self.images
            .ensure_image_exists_with(
                &pod,
                image,
                PullPolicy::IfNotPresent,
                PullAuth::Keyring(keyring),
                runtime_handler,
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

    /// The last warm cycle's plan (what was pulled, what did not fit and why), or `None`
    /// before the first warm cycle.
    pub fn warm_status(&self) -> Option<WarmPlan> {
        lock_ignoring_poison(&self.warm_last).clone()
    }

    /// The warm loop: a cycle at start, then every `warmPeriod` (read again after each
    /// cycle, so a reload changes it; none while the set is settled on the cluster's images
    /// alone, see the module's doc) and at each change of the cluster's needs (a DaemonSet's
    /// new template, a KeepSet in mode warm: pulled ahead at once), at a detect that saw an
    /// image leave the node and at a reload, until `stop`.
    pub(super) async fn warm_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let pods = self.gc.bound_pods();
        let signals = self.gc.cluster_signals();
        let keep_sets = self.gc.node_keep_sets();
        loop {
            if *stop.borrow() {
                return;
            }
            self.warm_cycle().await;
            // Settled on the cluster's images alone: no period, only a change (of the bound
            // pods, the CronJobs and their lead, the KeepSets) or a detect that saw an image
            // leave the node (`warm_wanted`) plans again. Those images are runtime-pinned, so
            // only a hand on the runtime removes one, and the detect sees it (every
            // detectPeriod), not a listing of the node every warmPeriod.
            let mut wait = (!self.warm_waits_for_change.load(Ordering::Acquire))
                .then(|| self.config().warm.period);
            // A CronJob run entering the lead is pulled ahead then, not a period later.
            let now = self.clock.now();
            // (Only the CronJobs whose runs are this node's: the others are not pulled ahead.)
            if let Some(at) =
                signals.next_lead_change(now, |name, job| job.here || pods.ran_cronjob(name))
            {
                let lead = at.since(now);
                wait = Some(wait.map_or(lead, |w| w.min(lead)));
            }
            let timer = async move {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = timer => {}
                () = pods.changed_for_warm() => {}
                () = signals.changed_for_warm() => {}
                () = keep_sets.changed_for_warm() => {}
                () = self.warm_wanted.notified() => {}
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

/// The last warm cycle that found every entry present and wrote it: its entries and a
/// fingerprint of the runtime's listing. The plan is a function of the entries, the listing
/// and, for an entry not listed, the disk and the history: with every entry listed, the same
/// entries (each still active) over the same listing plan the same, and the rows written are
/// the same (their `since` kept, their image ids the listing's).
pub(super) struct WarmSettled {
    entries: Vec<WarmEntry>,
    listing: u64,
}

impl WarmSettled {
    /// A fingerprint of the listing: every field of every image, in the runtime's order.
    fn fingerprint(images: &[RuntimeImage]) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        images.hash(&mut hasher);
        hasher.finish()
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
    let window = FromHistory {
        used_within: options.used_within,
        max_bytes: options.max_bytes,
    };
    let candidates = restore_candidates_in(store, now, window)?;
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
        let (state, detail) = match restore_step(candidate, &planned, options.dry_run) {
            RestoreStep::Settled(state, detail) => (state, detail),
            RestoreStep::Pull(image) => {
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
        };
        items.push(RestoreItem {
            image_id: candidate.key.image_id.as_str().to_owned(),
            runtime_handler: candidate.key.runtime_handler.clone(),
            image: candidate.image.clone().unwrap_or_default(),
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

mod cluster_entries;

#[cfg(test)]
pub(super) mod tests;
