//! The keep-set loop: the agent's side of the fleet's KeepSets (`keepSets`; the handle is
//! `crate::gc::KeepSets`, which the cluster's watch fills). Once the watch has listed the sets,
//! and at each change of them, at the end of a set's lifetime, when a warm cycle pulled a warm
//! set's image (or found it failed or not fitting), and every [`RETRY_PERIOD`] while an image
//! failed, a cycle: writes the pins the sets ask for
//! ([`crate::gc::keep_set_pin_changes`], one store transaction) and carries them to the
//! runtime at once; pulls each image of a set in mode pin in force that the runtime does not list
//! (IfNotPresent, the node's credentials, through the image manager's backoff and QPS, at most
//! `warmParallelPulls` at once) and carries the keeps again; then writes this node's report of
//! each set (present, runtime-pinned, failed with the pull's reason, bytes) for the cluster
//! module to publish. A set in mode warm pins and pulls nothing here: the warm loop pulls its
//! images within the disk budget (`warm.rs`), and its report's failures are the warm rows'
//! (does not fit, pull failed).
//!
//! Invariants: nothing is written before the watch's first list (a restart with the API server
//! away keeps the pins already written, each until its set's lifetime); an image name a pin
//! cannot hold (credentials, not a reference) is reported failed, never written or logged
//! whole; a failure is logged once per set and image until it clears.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::gc::{
    KeepSet, KeepSetMode, KeepSetReport, MAX_REPORTED_FAILURES, check_pin_image,
    keep_set_pin_changes,
};
use crate::model::{PinKey, PullOrigin, RuntimeImage, StoredWarmState, UnixNanos};
use crate::pull::{DockerConfig, MatchIndex, parse_pull_secret, redact_image_name};
use crate::store::Batch;
use crate::warm::WarmSet;

use super::{Agent, AgentError, AgentRuntime};

/// How often a cycle runs again while an image of a set failed (the pull's own backoff
/// decides whether it is tried).
pub const RETRY_PERIOD: Duration = Duration::from_secs(60);
/// How often a cycle runs with nothing to wait for (the report follows the runtime's list).
pub const REFRESH_PERIOD: Duration = Duration::from_secs(300);
/// The pod name KeepSet pulls are logged under (they are for no pod).
pub const KEEPSET_POD_NAME: &str = "imagekeeper-keepset";

/// What the loop remembers between cycles: each failing (set, image) and why, and the warm
/// sets' entries last carried to the runtime.
#[derive(Debug, Default)]
pub struct KeepSetLoopState {
    failures: BTreeMap<(String, String), String>,
    warm: Option<Arc<WarmSet>>,
    secret_notes: BTreeSet<String>,
}

impl<R: AgentRuntime> Agent<R> {
    /// The keep-set loop (see the module), until `stop`.
    pub(super) async fn keep_sets_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let handle = self.gc.node_keep_sets();
        tokio::select! {
            () = handle.synced() => {}
            _ = stop.changed() => return,
        }
        let mut state = KeepSetLoopState::default();
        loop {
            if *stop.borrow() {
                return;
            }
            let wait = match self.keep_sets_cycle(&mut state).await {
                Ok(wait) => wait,
                Err(e) => {
                    warn!(error = %e, "KeepSet cycle failed; trying again");
                    RETRY_PERIOD
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                () = handle.changed() => {}
                () = self.keep_sets_wanted.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// One keep-set cycle at the clock's now (see the module); returns how long until the
    /// next one is due with no change of the sets.
    pub async fn keep_sets_cycle(
        self: &Arc<Self>,
        state: &mut KeepSetLoopState,
    ) -> Result<Duration, AgentError> {
        let now = self.clock.now();
        let sets = self.gc.node_keep_sets().sets();
        // Names a pin cannot hold are failures, not pins.
        let mut refused: BTreeMap<(String, String), String> = BTreeMap::new();
        let usable: Vec<KeepSet> = sets
            .iter()
            .map(|set| {
                let mut set = set.clone();
                set.images.retain(
                    |image| match check_pin_image(&PinKey::new(image.clone(), "")) {
                        Ok(()) => true,
                        Err(e) => {
                            refused.insert((set.name.clone(), image.clone()), e.to_string());
                            false
                        }
                    },
                );
                set
            })
            .collect();
        let store = self.store.clone();
        let written = {
            let usable = usable.clone();
            tokio::task::spawn_blocking(move || -> Result<bool, AgentError> {
                let changes = keep_set_pin_changes(&usable, &store.pins()?, now);
                if changes.is_empty() {
                    return Ok(false);
                }
                let mut batch = Batch::new();
                for (key, pin) in changes.put {
                    batch.put_pin(key, pin);
                }
                for key in changes.remove {
                    batch.remove_pin(key);
                }
                store.apply(&batch)?;
                Ok(true)
            })
            .await
            .map_err(|e| AgentError::Serve {
                step: "the KeepSet cycle's pins on the blocking pool",
                source: Box::new(e),
            })??
        };
        // A warm set's keep (or its end) reaches the runtime's pins now, as a pin's does.
        let warm = self.gc.node_keep_sets().warm_set();
        let warm_changed = state.warm.as_ref() != Some(&warm);
        state.warm = Some(warm);
        if written {
            info!(sets = usable.len(), "Wrote the pins of the KeepSets");
        }
        if written || warm_changed {
            self.carry_keeps_now().await;
        }
        // Pull what the runtime does not list.
        let listed = self
            .gc
            .runtime()
            .list_images()
            .await
            .map_err(AgentError::Runtime)?;
        let absent = absent_images(&usable, &listed, now);
        // Each image's pull Secrets: those of every set in mode pin in force naming it.
        let mut secrets_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for set in usable.iter().filter(|s| {
            s.mode == KeepSetMode::Pin && s.active_at(now) && !s.pull_secrets.is_empty()
        }) {
            for image in &set.images {
                secrets_of
                    .entry(image.clone())
                    .or_default()
                    .extend(set.pull_secrets.iter().cloned());
            }
        }
        let mut secret_notes: BTreeSet<String> = BTreeSet::new();
        let mut pulled_any = false;
        let mut pull_failures: BTreeMap<String, String> = BTreeMap::new();
        let parallel = self.config().warm.parallel_pulls.max(1);
        for chunk in absent.chunks(parallel) {
            let mut pulls = tokio::task::JoinSet::new();
            for image in chunk {
                let agent = Arc::clone(self);
                let image = image.clone();
                let secrets = secrets_of.get(&image).cloned().unwrap_or_default();
                pulls.spawn(async move {
                    let (result, notes) = agent.keep_set_pull(&image, &secrets).await;
                    (image, result, notes)
                });
            }
            while let Some(joined) = pulls.join_next().await {
                let Ok((image, result, notes)) = joined else {
                    continue;
                };
                secret_notes.extend(notes);
                match result {
                    Ok(image_ref) => {
                        info!(
                            image = image.as_str(),
                            image_ref, "Pulled a KeepSet's image"
                        );
                        pulled_any = true;
                    }
                    Err(message) => {
                        pull_failures.insert(image, message);
                    }
                }
            }
        }
        if pulled_any {
            self.carry_keeps_now().await;
        }
        let listed = if pulled_any || written {
            self.gc
                .runtime()
                .list_images()
                .await
                .map_err(AgentError::Runtime)?
        } else {
            listed
        };
        // Failures: the refused names and the failed pulls, each set's own; a warm set's
        // images are the warm loop's, which says in its rows what did not fit or failed.
        let warm_failures = if usable.iter().any(|s| s.mode == KeepSetMode::Warm) {
            let store = self.store.clone();
            tokio::task::spawn_blocking(move || store.warm_rows())
                .await
                .map_err(|e| AgentError::Serve {
                    step: "the KeepSet cycle's warm rows on the blocking pool",
                    source: Box::new(e),
                })??
                .into_iter()
                .filter(|row| row.runtime_handler.is_empty())
                .filter_map(|row| warm_failure(row.state).map(|why| (row.image, why.to_owned())))
                .collect()
        } else {
            BTreeMap::new()
        };
        let mut failures = refused;
        for set in usable.iter().filter(|s| s.active_at(now)) {
            let failed = match set.mode {
                KeepSetMode::Pin => &pull_failures,
                KeepSetMode::Warm => &warm_failures,
            };
            for image in &set.images {
                if let Some(message) = failed.get(image) {
                    failures.insert((set.name.clone(), image.clone()), message.clone());
                }
            }
        }
        for ((set, image), message) in &failures {
            if state.failures.get(&(set.clone(), image.clone())) != Some(message) {
                warn!(
                    keep_set = set.as_str(),
                    image = redact_image_name(image).as_str(),
                    error = message.as_str(),
                    "A KeepSet's image is not held"
                );
            }
        }
        state.failures = failures;
        for note in &secret_notes {
            if !state.secret_notes.contains(note) {
                warn!(
                    note = note.as_str(),
                    "A KeepSet's pull Secret is not used: the pull goes on without it"
                );
            }
        }
        state.secret_notes = secret_notes;
        let reports = reports(&sets, &listed, &state.failures, now);
        self.gc.node_keep_sets().set_reports(reports);
        Ok(next_wait(&sets, !state.failures.is_empty(), now))
    }

    /// One pull of a KeepSet's image ([`Agent::pull_for_no_pod`], origin `pull`) with the
    /// pull Secrets `secrets` of the sets naming it; the notes of the Secrets not read.
    async fn keep_set_pull(
        &self,
        image: &str,
        secrets: &BTreeSet<String>,
    ) -> (Result<String, String>, Vec<String>) {
        let (keyring, notes) = self.keep_set_keyring(secrets).await;
        let pulled = self
            .pull_for_no_pod(KEEPSET_POD_NAME, PullOrigin::Pull, image, "", &keyring)
            .await
            .map_err(|e| with_notes(e, &notes));
        (pulled, notes)
    }

    /// The keyring of a KeepSet's pull: the pull Secrets `names`, read now in the agent's own
    /// namespace and parsed as the kubelet reads a pull Secret; one that cannot be read or
    /// parsed is left out (the pull goes on, as the kubelet's does) and said in the notes,
    /// which name the Secret and why, never its content.
    pub(super) async fn keep_set_keyring(
        &self,
        names: &BTreeSet<String>,
    ) -> (Vec<DockerConfig>, Vec<String>) {
        if names.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let Some(source) = self.gc.node_keep_sets().secret_source() else {
            return (
                Vec::new(),
                vec!["pull Secrets are read only with an API server (keepSets)".to_owned()],
            );
        };
        keyring_of(names, |name| source.read(name)).await
    }

    /// The keyring of the pull Secrets the bound pod `pod` (`namespace/name`) names, read in
    /// its namespace when the operator opted in (`clusterSignalsPrefetchPullSecrets`), and
    /// the notes of those not read. The prefetch offers such a pod's images only then.
    pub(super) async fn pod_keyring(&self, pod: &str) -> (Vec<DockerConfig>, Vec<String>) {
        let pods = self.gc.bound_pods();
        let names: BTreeSet<String> = pods.pod_pull_secrets(pod).into_iter().collect();
        if names.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let Some(source) = pods.pod_secret_source() else {
            return (
                Vec::new(),
                vec![format!(
                    "pods' pull Secrets are read only with {}",
                    crate::gc::PREFETCH_PULL_SECRETS_SETTING
                )],
            );
        };
        let namespace = pod.split_once('/').map_or("", |(ns, _)| ns);
        keyring_of(&names, |name| source.read_in(namespace, name)).await
    }
}

/// The keyring of the pull Secrets `names`, each read through `read` and parsed as any pull
/// Secret, and a note for each one that could not be read or parsed (never its content).
async fn keyring_of(
    names: &BTreeSet<String>,
    read: impl Fn(&str) -> crate::gc::PullSecretRead,
) -> (Vec<DockerConfig>, Vec<String>) {
    let mut keyring = Vec::new();
    let mut notes = Vec::new();
    for name in names {
        match read(name).await {
            Ok(bytes) => match parse_pull_secret(&format!("pull Secret {name}"), &bytes) {
                Ok(config) => keyring.push(config),
                Err(e) => notes.push(e.to_string()),
            },
            Err(why) => notes.push(why),
        }
    }
    (keyring, notes)
}

/// A failed pull's message with the notes of the pull Secrets not read.
pub(super) fn with_notes(message: String, notes: &[String]) -> String {
    if notes.is_empty() {
        message
    } else {
        format!("{message} ({})", notes.join("; "))
    }
}

/// Why a warm set's image is not held, by its warm row's state (`None`: present, pulling,
/// queued or expired, no failure).
fn warm_failure(state: StoredWarmState) -> Option<&'static str> {
    match state {
        StoredWarmState::DoesNotFit => {
            Some("it does not fit the disk budget (warm: pulled only within it)")
        }
        StoredWarmState::Failed => Some("its last warm pull failed"),
        StoredWarmState::Present
        | StoredWarmState::Pulling
        | StoredWarmState::Queued
        | StoredWarmState::Expired => None,
    }
}

/// The images of the sets in mode pin in force at `now` the runtime does not list (each once,
/// in name order); a warm set's images are the warm loop's to pull, within the disk budget.
fn absent_images(sets: &[KeepSet], listed: &[RuntimeImage], now: UnixNanos) -> Vec<String> {
    let index = MatchIndex::of_images(listed);
    let wanted: BTreeSet<&String> = sets
        .iter()
        .filter(|s| s.mode == KeepSetMode::Pin && s.active_at(now))
        .flat_map(|s| s.images.iter())
        .collect();
    wanted
        .into_iter()
        .filter(|image| index.named_by(image, "").is_empty())
        .cloned()
        .collect()
}

/// This node's report of each set: its images present, runtime-pinned and failed, by the
/// runtime's `listed` images.
fn reports(
    sets: &[KeepSet],
    listed: &[RuntimeImage],
    failures: &BTreeMap<(String, String), String>,
    now: UnixNanos,
) -> BTreeMap<String, KeepSetReport> {
    let index = MatchIndex::of_images(listed);
    let mut out = BTreeMap::new();
    for set in sets {
        let mut report = KeepSetReport {
            generation: set.generation,
            images: set.images.len() as u64,
            expired: !set.active_at(now),
            mode: set.mode,
            ..KeepSetReport::default()
        };
        if !report.expired {
            let mut counted: BTreeSet<usize> = BTreeSet::new();
            for image in &set.images {
                let named = index.named_by(image, "");
                if named.is_empty() {
                    continue;
                }
                report.present += 1;
                if named.iter().any(|&at| listed[at].pinned) {
                    report.pinned += 1;
                }
                for at in named {
                    if counted.insert(at) {
                        report.bytes += listed[at].size;
                    }
                }
            }
            for ((name, image), message) in failures.range((set.name.clone(), String::new())..) {
                if *name != set.name {
                    break;
                }
                report.failed += 1;
                if report.failures.len() < MAX_REPORTED_FAILURES {
                    report
                        .failures
                        .push((redact_image_name(image), message.clone()));
                }
            }
        }
        out.insert(set.name.clone(), report);
    }
    out
}

/// How long until the next cycle with no change: the next end of a set's lifetime, or
/// [`RETRY_PERIOD`] while something failed, at most [`REFRESH_PERIOD`].
fn next_wait(sets: &[KeepSet], failing: bool, now: UnixNanos) -> Duration {
    let mut wait = if failing {
        RETRY_PERIOD
    } else {
        REFRESH_PERIOD
    };
    for set in sets
        .iter()
        .filter(|s| s.active_at(now) && s.until != UnixNanos::NEVER)
    {
        // Just past the end: a set holds while `now < until`.
        wait = wait.min(set.until.since(now) + Duration::from_millis(10));
    }
    wait
}

#[cfg(test)]
#[path = "keep_sets_tests.rs"]
mod tests;
