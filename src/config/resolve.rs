//! [`AgentConfig::resolve`]: defaults, then the file, then `--set`, then the flags, each area resolved by
//! its own module (gc, pull, runtime, warm, process), then validation. The helpers the areas
//! share (`Origin`, `pick`) live below them all, in `origin.rs`. Invariant: every error
//! names the flag or field the bad value came from.

use std::path::{Path, PathBuf};

use crate::gc::{GcConfig, PinPatterns};

use super::gc::{
    resolve_gc_order, resolve_gc_policy, resolve_intent_max_age, resolve_journal_retention,
    resolve_kubelet_root_dir, resolve_pins,
};
use super::origin::{Origin, invalid, pick};
use super::process::{period, resolve_metrics_address};
use super::pull::{resolve_credential_providers, resolve_pull};
use super::runtime::{
    resolve_container_events, resolve_cri, resolve_cronjob_lead, resolve_disk_accounting_period,
    resolve_disk_prune_orphans, resolve_keep_share, resolve_runtime_pins,
};
use super::validate::check_admin_socket;
use super::warm::resolve_warm;
use super::{
    AgentConfig, ConfigError, DEFAULT_ADMIN_SOCKET, DEFAULT_DB, DEFAULT_DETECT_PERIOD,
    DEFAULT_GC_PERIOD, DEFAULT_IMAGE_CACHE_PERIOD, FileConfig, FlagValues,
};

impl AgentConfig {
    /// The configuration when no file and no flag sets anything: the defaults
    /// [`CONFIG_FIELDS`](super::CONFIG_FIELDS) shows.
    pub fn defaults() -> Result<AgentConfig, ConfigError> {
        AgentConfig::resolve(&FileConfig::default(), None, &FlagValues::default())
    }
}

impl AgentConfig {
    /// Defaults, then the file, then `--set` (`flags.set`), then the flags; then validation. Each
    /// part is resolved by its own area module, which names the flag or field a bad value came
    /// from.
    pub fn resolve(
        file: &FileConfig,
        file_path: Option<&Path>,
        flags: &FlagValues,
    ) -> Result<AgentConfig, ConfigError> {
        // `--set` is the file's keys given on the command line: over the file, under a flag.
        let mut with_set;
        let file = if flags.set == FileConfig::default() {
            file
        } else {
            with_set = file.clone();
            with_set.overlay(&flags.set);
            &with_set
        };
        let o = Origin {
            file: file_path,
            set: flags.set.keys_given(),
        };
        let policy = resolve_gc_policy(file, flags, &o)?;
        let pull = resolve_pull(file, flags, &o)?;
        let pins = resolve_pins(file, flags, &o)?;
        let cri = resolve_cri(file, flags, &o)?;
        let sandbox_image = pick(
            &flags.pod_infra_container_image,
            "--pod-infra-container-image",
            &file.pod_infra_container_image,
            o.field("podInfraContainerImage"),
        )
        .map(|(v, _)| v)
        .filter(|v| !v.is_empty());
        if let Some(sandbox) = &sandbox_image {
            let origin = if flags.pod_infra_container_image.is_some() {
                "--pod-infra-container-image".to_owned()
            } else {
                o.field("podInfraContainerImage")
            };
            crate::pull::refuse_credentials(sandbox).map_err(|e| invalid(origin, e.to_string()))?;
        }
        let protect_irreplaceable = pick(
            &flags.protect_irreplaceable,
            "--protect-irreplaceable",
            &file.protect_irreplaceable,
            o.field("protectIrreplaceable"),
        )
        .is_none_or(|(v, _)| v);

        let kubelet_root_dir = resolve_kubelet_root_dir(file, flags, &o)?;
        let kubelet_intent_max_age = resolve_intent_max_age(file, flags, &o)?;
        let container_events = resolve_container_events(file, flags, &o)?;
        let runtime_pins = resolve_runtime_pins(file, flags, &o)?;
        let containerd_address = match pick(
            &flags.containerd_address,
            "--containerd-address",
            &file.containerd_address,
            o.field("containerdAddress"),
        ) {
            Some((v, from)) if !v.is_empty() => {
                crate::cri::socket_path(&v).map_err(|e| invalid(from, e.to_string()))?;
                v
            }
            _ => cri.runtime_endpoint.clone(),
        };
        let order = resolve_gc_order(file, flags, &o)?;
        let journal_retention = resolve_journal_retention(file, flags, &o)?;
        let metrics_address = resolve_metrics_address(flags)?;
        let credential_providers = resolve_credential_providers(file, flags, &o)?;
        let (warm_set, warm) = resolve_warm(file, flags, &o)?;
        let db = flags
            .db
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DB));
        let admin_socket = flags
            .admin_socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ADMIN_SOCKET));
        check_admin_socket(&admin_socket, &db, &cri)?;
        let disk_accounting_period = resolve_disk_accounting_period(file, &o)?;

        Ok(AgentConfig {
            db,
            cri,
            gc: GcConfig {
                policy,
                order,
                sandbox_image,
                protect_irreplaceable,
                pins: PinPatterns::new(pins),
                kubelet_root_dir,
                kubelet_intent_max_age,
                journal_retention,
                warm: warm_set,
            },
            pull,
            admin_socket,
            metrics_address,
            detect_period: period(
                &flags.detect_period,
                "--detect-period",
                DEFAULT_DETECT_PERIOD,
            )?,
            gc_period: period(&flags.gc_period, "--gc-period", DEFAULT_GC_PERIOD)?,
            image_cache_period: period(
                &flags.image_cache_period,
                "--image-cache-period",
                DEFAULT_IMAGE_CACHE_PERIOD,
            )?,
            credential_providers,
            container_events,
            runtime_pins,
            cluster_signals: file.cluster_signals.unwrap_or(false),
            keep_sets: file.keep_sets.unwrap_or(false),
            containerd_address,
            disk_accounting_period,
            disk_prune_orphans: resolve_disk_prune_orphans(file, &o, disk_accounting_period)?,
            cluster_signals_cronjob_lead: resolve_cronjob_lead(file, &o)?,
            cluster_signals_keep_share: resolve_keep_share(file, &o)?,
            cluster_signals_prefetch_pull_secrets: file
                .cluster_signals_prefetch_pull_secrets
                .unwrap_or(false),
            warm,
        })
    }

    /// Where keyring pulls find credentials besides the pull secrets: the node's docker
    /// config on the kubelet's search path, and the plugins (whose config is validated and
    /// whose binaries must exist).
    pub fn credential_sources(
        &self,
    ) -> Result<crate::pull::CredentialSources, crate::pull::credentials::ProviderConfigError> {
        let plugins = match &self.credential_providers {
            None => None,
            Some(p) => Some(crate::pull::credentials::PluginProviders::load(
                &p.config, &p.bin_dir,
            )?),
        };
        Ok(crate::pull::CredentialSources {
            node: Some(
                crate::pull::credentials::NodeCredentials::kubelet_search_path(
                    self.gc.kubelet_root_dir.as_deref(),
                ),
            ),
            plugins,
        })
    }
}
