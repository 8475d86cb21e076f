//! Reloading the configuration while the agent runs (`imagekeeper run` calls
//! [`Agent::reload`] on SIGHUP; tests call the same function).
//!
//! A reload reads the `--config` file again and resolves it with the flags the agent was
//! started with ([`ConfigSource`]: only the flags given on the command line, so a flag still
//! wins over the file, as at start), with every check of a start, on the blocking pool (the
//! file is read through [`crate::operator_file`]: a FIFO, a device or a huge file is refused at
//! once, and no async worker waits on the read). An invalid file (unreadable, not a regular
//! file, too large or deep, not TOML, an unknown field, a bad value) changes nothing: the agent
//! keeps running with what it had, logs one error naming the field (or the file), and counts
//! the failure. So does a file that sets nothing (empty, or comments only: an editor truncating
//! it in place) unless it holds the line `# imagekeeper: empty`. A valid one
//! swaps the GC settings — thresholds, MinAge, MaxAge, pinned images, the sandbox image and
//! the kubelet's root directory — in one step between cycles
//! ([`crate::gc::ImageGcManager::reconfigure`]: a cycle runs wholly with the old or wholly
//! with the new settings). Settings the running agent cannot swap (runtime endpoints, pull
//! settings, the credential providers — their paths and the contents of their config file —
//! and the node credentials' search path that a changed `kubeletRootDir` moves; the database,
//! sockets and periods are flags only) keep their running value and are named in a warning:
//! they take effect at the next start. Every setting of the table ([`CONFIG_FIELDS`]) whose
//! value differs is named in the report, where its `reload` column puts it.
//!
//! Invariants: reloads run one at a time; the running configuration ([`Agent::config`]) is
//! replaced only after the manager accepted the new one; every reload is counted once, as a
//! success or a failure (`imagekeeper_config_reloads_total{result}`).

use std::path::PathBuf;

use tracing::{error, info, warn};

use super::config::{AgentConfig, ConfigError, FileConfig, FlagValues};
use super::{Agent, AgentRuntime, lock_ignoring_poison};
use crate::config::{CONFIG_FIELDS, OnReload};

/// Where the agent's configuration came from: the `--config` file (if any) and the flags given
/// on the command line (`None` or empty: not given).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigSource {
    /// The `--config` file; `None`: defaults under the flags.
    pub file: Option<PathBuf>,
    /// The flags given, which win over the file's settings.
    pub flags: FlagValues,
}

impl ConfigSource {
    /// Reads the file (if any) and resolves it under the flags, as at start.
    pub fn resolve(&self) -> Result<AgentConfig, ConfigError> {
        let file = match &self.file {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        AgentConfig::resolve(&file, self.file.as_deref(), &self.flags)
    }

    /// [`ConfigSource::resolve`] for a reload: a file that sets nothing is refused unless it
    /// says so ([`FileConfig::load_for_reload`]). Blocking I/O: [`Agent::reload`] runs it on
    /// the blocking pool.
    pub(crate) fn resolve_for_reload(&self) -> Result<AgentConfig, ConfigError> {
        let file = match &self.file {
            Some(path) => FileConfig::load_for_reload(path)?,
            None => FileConfig::default(),
        };
        AgentConfig::resolve(&file, self.file.as_deref(), &self.flags)
    }
}

/// The settings whose change changes what the agent keeps (`ReloadReport::changed` names):
/// a reload that changes one carries the keeps to the runtime at once.
const KEEP_SETTINGS: [&str; 3] = [WARM_SET, "podInfraContainerImage", "protectIrreplaceable"];

/// The warm set's name in a reload's report.
const WARM_SET: &str = "warm (the warm set: [[warm]], warmSetDir)";

/// What a successful reload did: the settings it changed and those that differ but wait for a
/// restart, by their KubeletConfiguration field names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadReport {
    /// The settings the reload swapped in.
    pub changed: Vec<&'static str>,
    /// The settings that differ from the running ones but apply only after a restart.
    pub needs_restart: Vec<&'static str>,
}

/// The field names whose values differ between `old` and `new`: (swapped now, need a restart).
fn differences(old: &AgentConfig, new: &AgentConfig) -> ReloadReport {
    let (a, b) = (&old.gc, &new.gc);
    let swapped = [
        (
            a.policy.high_threshold_percent != b.policy.high_threshold_percent,
            "imageGCHighThresholdPercent",
        ),
        (
            a.policy.low_threshold_percent != b.policy.low_threshold_percent,
            "imageGCLowThresholdPercent",
        ),
        (
            a.policy.inodes != b.policy.inodes,
            "imageGCHighInodesThresholdPercent/imageGCLowInodesThresholdPercent",
        ),
        (
            a.policy.bytes != b.policy.bytes,
            "imageGCHighBytes/imageGCLowBytes",
        ),
        (a.policy.min_age != b.policy.min_age, "imageMinimumGCAge"),
        (a.policy.max_age != b.policy.max_age, "imageMaximumGCAge"),
        (a.pins != b.pins, "pinnedImages"),
        (a.sandbox_image != b.sandbox_image, "podInfraContainerImage"),
        (
            a.protect_irreplaceable != b.protect_irreplaceable,
            "protectIrreplaceable",
        ),
        (a.kubelet_root_dir != b.kubelet_root_dir, "kubeletRootDir"),
        (
            a.kubelet_intent_max_age != b.kubelet_intent_max_age,
            "kubeletIntentMaxAge",
        ),
        // Set on the store by `reconfigure` (only when given: none keeps the store's).
        (
            a.journal_retention != b.journal_retention,
            "journalMaxAge/journalMaxEntries",
        ),
        // The warm set is the GC's (it keeps what the set names); the warm loop reads its
        // settings at each cycle.
        (a.warm != b.warm, WARM_SET),
        (old.warm.period != new.warm.period, "warmPeriod"),
        (
            old.warm.parallel_pulls != new.warm.parallel_pulls,
            "warmParallelPulls",
        ),
        (
            old.warm.from_history != new.warm.from_history,
            "warmFromHistory",
        ),
    ];
    let (p, q) = (&old.pull, &new.pull);
    let restart = [
        (
            old.cri.runtime_endpoint != new.cri.runtime_endpoint,
            "containerRuntimeEndpoint",
        ),
        (
            old.cri.image_endpoint != new.cri.image_endpoint,
            "imageServiceEndpoint",
        ),
        (
            p.serialize_image_pulls != q.serialize_image_pulls,
            "serializeImagePulls",
        ),
        (
            p.max_parallel_image_pulls != q.max_parallel_image_pulls,
            "maxParallelImagePulls",
        ),
        (
            p.registry_pull_qps != q.registry_pull_qps,
            "registryPullQPS",
        ),
        (p.registry_burst != q.registry_burst, "registryBurst"),
        (
            old.container_events != new.container_events,
            "containerEvents",
        ),
        (
            old.credential_providers != new.credential_providers,
            "imageCredentialProviderConfig",
        ),
        // The GC reads the kubelet's pull records from the new directory at once, but the
        // node credentials' search path (the kubelet root dir first) was built at start.
        (
            a.kubelet_root_dir != b.kubelet_root_dir,
            "kubeletRootDir (the node credentials' search path)",
        ),
    ];
    let names = |list: &[(bool, &'static str)]| {
        list.iter()
            .filter(|(differs, _)| *differs)
            .map(|(_, name)| *name)
            .collect()
    };
    let mut report = ReloadReport {
        changed: names(&swapped),
        needs_restart: names(&restart),
    };
    // Every other setting of the table whose value differs, reported as the table says a
    // reload treats it: a setting the lists above miss is named, never `changed=nothing`.
    for field in CONFIG_FIELDS {
        if (field.default)(old) == (field.default)(new)
            || names_setting(&report.changed, field.key)
            || names_setting(&report.needs_restart, field.key)
        {
            continue;
        }
        match field.on_reload {
            OnReload::Applied => report.changed.push(field.key),
            OnReload::NeedsRestart => report.needs_restart.push(field.key),
        }
    }
    report
}

/// Whether one of `names` (a report's entries: `imageGCHighBytes/imageGCLowBytes`, `warm (the
/// warm set: [[warm]], warmSetDir)`) names the setting `key`, as a whole word.
fn names_setting(names: &[&str], key: &str) -> bool {
    names.iter().any(|name| {
        name.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| word == key)
    })
}

impl ReloadReport {
    /// What a reload from `old` to `new` reports: the settings it swaps in and those that
    /// wait for a restart, as [`Agent::reload`] computes them (every setting of
    /// [`CONFIG_FIELDS`] whose value differs is named in one of the two).
    pub fn between(old: &AgentConfig, new: &AgentConfig) -> ReloadReport {
        differences(old, new)
    }
}

impl<R: AgentRuntime> Agent<R> {
    /// Sets where the configuration came from, so [`Agent::reload`] can read it again. Without
    /// it a reload keeps the running configuration and changes nothing.
    pub fn with_config_source(mut self, source: ConfigSource) -> Agent<R> {
        self.source = Some(source);
        self
    }

    /// Reads the configuration again and swaps what can be swapped between cycles (see the
    /// module's doc). On an invalid file the running configuration is kept, one error naming
    /// the field is logged, and the error is returned. Counted in
    /// `imagekeeper_config_reloads_total{result="success"|"failure"}`. Waits for the cycle in flight.
    pub async fn reload(&self) -> Result<ReloadReport, ConfigError> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let result = self.reload_locked().await;
        self.metrics.record_reload(result.is_ok());
        match &result {
            Ok(report) => {
                if !report.needs_restart.is_empty() {
                    warn!(
                        fields = %report.needs_restart.join(", "),
                        "Reloaded configuration: these settings changed but take effect only at the next start; the running values are kept"
                    );
                }
                info!(
                    changed = %if report.changed.is_empty() {
                        "nothing".to_owned()
                    } else {
                        report.changed.join(", ")
                    },
                    "Reloaded configuration"
                );
            }
            Err(e) => error!(
                error = %e.one_line(),
                "Reloading the configuration failed; the running configuration is kept"
            ),
        }
        result
    }

    async fn reload_locked(&self) -> Result<ReloadReport, ConfigError> {
        let Some(source) = &self.source else {
            return Ok(ReloadReport::default());
        };
        // Off the async workers: reading the file (and what resolving it checks on disk) is
        // blocking I/O, and a worker blocked here would stop the loops, the probes and the
        // shutdown with it.
        let new = {
            let source = source.clone();
            tokio::task::spawn_blocking(move || source.resolve_for_reload())
                .await
                .map_err(|e| ConfigError::Invalid {
                    origin: "reloading the configuration".to_owned(),
                    message: format!("the read did not complete: {e}"),
                })??
        };
        let old = self.config();
        let mut new = new;
        // A `for` counts from the first read of its entry, not from each reload.
        new.gc.warm = std::mem::take(&mut new.gc.warm).stamped(self.clock.now(), &old.gc.warm);
        let mut report = differences(&old, &new);
        // The same provider config path with other contents: the plugins loaded at start
        // keep running (they are not reloaded), so say so rather than report nothing.
        if let Some(providers) = &new.credential_providers
            && old.credential_providers == new.credential_providers
            && crate::pull::credentials::plugin::config_snapshot_async(providers.config.clone())
                .await
                != self.provider_config_at_start
        {
            report.needs_restart.push("imageCredentialProviderConfig");
        }
        if !report.changed.is_empty() {
            self.gc
                .reconfigure(new.gc.clone())
                .await
                .map_err(|e| ConfigError::Invalid {
                    origin: "GC policy".to_owned(),
                    message: e.to_string(),
                })?;
            {
                let mut running = lock_ignoring_poison(&self.config);
                running.gc = new.gc;
                running.warm = new.warm;
            }
            // A warm loop settled on the cluster's images waits for a change: this is one.
            self.warm_wanted.notify_one();
            // A change of what is kept (the warm set, the sandbox image, the irreplaceable
            // rule) reaches the runtime's pins now, not at the next detect.
            if report.changed.iter().any(|c| KEEP_SETTINGS.contains(c)) {
                self.carry_keeps_now().await;
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reload that changes only the journal's retention swaps it in (the store's retention
    /// is set by `reconfigure`), rather than reporting nothing.
    #[test]
    fn a_changed_journal_retention_is_swapped_in_by_a_reload() {
        let old = AgentConfig::resolve(&FileConfig::default(), None, &FlagValues::default())
            .expect("valid");
        let flags = FlagValues {
            journal_max_entries: Some(50_000),
            ..FlagValues::default()
        };
        let new = AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("valid");
        let report = differences(&old, &new);
        assert_eq!(report.changed, ["journalMaxAge/journalMaxEntries"]);
        assert!(report.needs_restart.is_empty());
        assert!(differences(&old, &old).changed.is_empty());
    }

    /// A reload that changes only the inode thresholds or only the byte budget swaps them in
    /// (CONFIG_FIELDS says they apply on reload), rather than reporting nothing and keeping
    /// the old rule.
    #[test]
    fn changed_inode_thresholds_or_byte_budget_alone_are_swapped_in_by_a_reload() {
        let old = AgentConfig::resolve(&FileConfig::default(), None, &FlagValues::default())
            .expect("valid");
        let inodes = FlagValues {
            image_gc_high_inodes_threshold: Some(90),
            image_gc_low_inodes_threshold: Some(80),
            ..FlagValues::default()
        };
        let new = AgentConfig::resolve(&FileConfig::default(), None, &inodes).expect("valid");
        assert_eq!(
            differences(&old, &new).changed,
            ["imageGCHighInodesThresholdPercent/imageGCLowInodesThresholdPercent"]
        );
        let budget = FlagValues {
            image_gc_high_bytes: Some("100Gi".into()),
            image_gc_low_bytes: Some("80Gi".into()),
            ..FlagValues::default()
        };
        let new = AgentConfig::resolve(&FileConfig::default(), None, &budget).expect("valid");
        assert_eq!(
            differences(&old, &new).changed,
            ["imageGCHighBytes/imageGCLowBytes"]
        );
    }
}
