//! The runtime settings' resolvers: the CRI endpoints, whether the container events are
//! watched and whether the runtime pins' labels are written (which runtimes can carry those
//! pins is `crate::runtime::runtime_carries_pins`).

use std::time::Duration;

use crate::cri::{CriConfig, DEFAULT_RUNTIME_ENDPOINT};

use super::origin::{Origin, invalid, pick};
use super::validate::check_endpoint;
use super::{ConfigError, ContainerEvents, FileConfig, FlagValues, RuntimePins};

/// The runtime and image service endpoints.
pub(super) fn resolve_cri(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<CriConfig, ConfigError> {
    let runtime_endpoint = pick(
        &flags.container_runtime_endpoint,
        "--container-runtime-endpoint",
        &file.container_runtime_endpoint,
        o.field("containerRuntimeEndpoint"),
    );
    let image_endpoint = pick(
        &flags.image_service_endpoint,
        "--image-service-endpoint",
        &file.image_service_endpoint,
        o.field("imageServiceEndpoint"),
    );
    let mut cri = CriConfig::default();
    if let Some((endpoint, from)) = runtime_endpoint {
        check_endpoint(&endpoint, &from)?;
        cri.runtime_endpoint = endpoint;
    }
    if let Some((endpoint, from)) = image_endpoint {
        check_endpoint(&endpoint, &from)?;
        cri.image_endpoint = Some(endpoint);
    }
    if cri.runtime_endpoint.is_empty() {
        cri.runtime_endpoint = DEFAULT_RUNTIME_ENDPOINT.to_owned();
    }
    Ok(cri)
}

/// Whether the container events watcher runs: `auto` (the default) or `off`.
pub(super) fn resolve_container_events(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<ContainerEvents, ConfigError> {
    match pick(
        &flags.container_events,
        "--container-events",
        &file.container_events,
        o.field("containerEvents"),
    ) {
        None => Ok(ContainerEvents::Auto),
        Some((v, _)) if v == "auto" => Ok(ContainerEvents::Auto),
        Some((v, _)) if v == "off" => Ok(ContainerEvents::Off),
        Some((v, from)) => Err(invalid(from, format!("{v:?} is neither auto nor off"))),
    }
}

/// Whether the runtime pins run: `auto` (the default) or `off`.
pub(super) fn resolve_runtime_pins(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<RuntimePins, ConfigError> {
    match pick(
        &flags.runtime_pins,
        "--runtime-pins",
        &file.runtime_pins,
        o.field("runtimePins"),
    ) {
        None => Ok(RuntimePins::Auto),
        Some((v, _)) if v == "auto" => Ok(RuntimePins::Auto),
        Some((v, _)) if v == "off" => Ok(RuntimePins::Off),
        Some((v, from)) => Err(invalid(from, format!("{v:?} is neither auto nor off"))),
    }
}

/// The disk accounting's period when unset: often enough for a dashboard, rare enough that
/// reading containerd's every namespace (tens of milliseconds on a lab node) costs nothing.
pub(super) const DEFAULT_DISK_ACCOUNTING_PERIOD: Duration = Duration::from_secs(600);

/// `diskAccountingPeriod`: a Go duration, `0s` for off, else at least a minute.
pub(super) fn resolve_disk_accounting_period(
    file: &FileConfig,
    o: &Origin<'_>,
) -> Result<Option<Duration>, ConfigError> {
    let Some(value) = &file.disk_accounting_period else {
        return Ok(Some(DEFAULT_DISK_ACCOUNTING_PERIOD));
    };
    let from = o.field("diskAccountingPeriod");
    let period = super::origin::duration(value, &from)?;
    if period.is_zero() {
        return Ok(None);
    }
    if period < Duration::from_secs(60) {
        return Err(invalid(
            from,
            format!("must be 0s (off) or at least 1m (got {value:?})"),
        ));
    }
    Ok(Some(period))
}

/// `diskPruneOrphans`: `off` (the default) or the minimum age, a Go duration, of the orphaned
/// snapshots and unreferenced blobs the agent removes after each disk accounting; refused
/// with the accounting off (`accounting`, the resolved `diskAccountingPeriod`: nothing would
/// run it).
pub(super) fn resolve_disk_prune_orphans(
    file: &FileConfig,
    o: &Origin<'_>,
    accounting: Option<Duration>,
) -> Result<Option<Duration>, ConfigError> {
    let Some(value) = &file.disk_prune_orphans else {
        return Ok(None);
    };
    let from = o.field("diskPruneOrphans");
    if value == "off" {
        return Ok(None);
    }
    let min_age = super::origin::duration(value, &from)?;
    if accounting.is_none() {
        return Err(invalid(
            from,
            format!(
                "{value:?} needs the disk accounting, which diskAccountingPeriod = \"0s\" turns off"
            ),
        ));
    }
    Ok(Some(min_age))
}

/// The CronJob lead when unset: a pull of a large image fits in it, and a keep that long
/// before a run holds little disk for little time.
pub(super) const DEFAULT_CRONJOB_LEAD: Duration = Duration::from_secs(600);

/// `clusterSignalsKeepShare`: a percentage from 1 to 100.
pub(super) fn resolve_keep_share(file: &FileConfig, o: &Origin<'_>) -> Result<u8, ConfigError> {
    let Some(value) = file.cluster_signals_keep_share else {
        return Ok(crate::gc::DEFAULT_KEEP_SHARE_PERCENT);
    };
    u8::try_from(value)
        .ok()
        .filter(|p| (1..=100).contains(p))
        .ok_or_else(|| {
            invalid(
                o.field("clusterSignalsKeepShare"),
                format!("must be a percentage between 1 and 100 (got {value})"),
            )
        })
}

/// `clusterSignalsCronJobLead`: a Go duration, `0s` for off, at most 24h.
pub(super) fn resolve_cronjob_lead(
    file: &FileConfig,
    o: &Origin<'_>,
) -> Result<Duration, ConfigError> {
    let Some(value) = &file.cluster_signals_cronjob_lead else {
        return Ok(DEFAULT_CRONJOB_LEAD);
    };
    let from = o.field("clusterSignalsCronJobLead");
    let lead = super::origin::duration(value, &from)?;
    if lead > crate::gc::MAX_CRONJOB_LEAD {
        return Err(invalid(
            from,
            format!("must be at most 24h (got {value:?})"),
        ));
    }
    Ok(lead)
}
