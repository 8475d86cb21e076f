//! The runtime settings' resolvers: the CRI endpoints, whether the container events are
//! watched and whether the runtime pins' labels are written; and which runtimes can carry
//! those pins ([`runtime_carries_pins`], what `runtimePins = "auto"` turns on by).

use crate::cri::{CriConfig, DEFAULT_RUNTIME_ENDPOINT, RuntimeVersion};

use super::resolve::{Origin, invalid, pick};
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

/// The first containerd release whose CRI lists a labelled image as pinned.
pub const FIRST_PINNING_CONTAINERD: (u64, u64, u64) = (1, 7, 3);

/// Whether a runtime (CRI Version's name and version) lists labelled images as pinned:
/// containerd 1.7.3 and later. `Err` says why not.
pub fn runtime_carries_pins(version: &RuntimeVersion) -> Result<(), String> {
    let name = version.runtime_name.as_str();
    if name != "containerd" {
        return Err(format!(
            "the runtime is {name:?}, not containerd (CRI-O's pinned_images is not built)"
        ));
    }
    let text = version.runtime_version.trim_start_matches('v');
    let mut parts = text
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse::<u64>().ok());
    let parsed = (
        parts.next().flatten(),
        parts.next().flatten(),
        parts.next().flatten(),
    );
    match parsed {
        (Some(major), Some(minor), Some(patch))
            if (major, minor, patch) >= FIRST_PINNING_CONTAINERD =>
        {
            Ok(())
        }
        (Some(_), Some(_), Some(_)) => Err(format!(
            "containerd {} does not list labelled images as pinned (1.7.3 and later do)",
            version.runtime_version
        )),
        _ => Err(format!(
            "containerd's version {:?} is not major.minor.patch",
            version.runtime_version
        )),
    }
}
