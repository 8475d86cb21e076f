//! The pull settings' resolvers: serialization, parallelism and the registry's token bucket
//! (the kubelet's defaulting and validation), and the credential provider plugins (both or
//! neither).

use crate::pull::PullConfig;

use super::origin::{Origin, invalid, pick};
use super::{ConfigError, CredentialProviders, FileConfig, FlagValues};

/// The pull settings, validated as the kubelet does.
pub(super) fn resolve_pull(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<PullConfig, ConfigError> {
    let mut pull = PullConfig::default();
    let mut pull_origin = String::from("pull settings");
    // SetDefaults_KubeletConfiguration (pkg/kubelet/apis/config/v1beta1/defaults.go): a file
    // that leaves serializeImagePulls unset defaults it to false when its
    // maxParallelImagePulls is 2 or more, true otherwise. Flags are applied over the defaulted
    // file, so `--max-parallel-image-pulls 5` alone is still refused, as by the kubelet.
    let file_serialize = file
        .serialize_image_pulls
        .or(match file.max_parallel_image_pulls {
            Some(n) if n >= 2 => Some(false),
            _ => None,
        });
    let file_serialize_field = if file.serialize_image_pulls.is_some() {
        o.field("serializeImagePulls")
    } else {
        o.field("maxParallelImagePulls")
    };
    if let Some((v, from)) = pick(
        &flags.serialize_image_pulls,
        "--serialize-image-pulls",
        &file_serialize,
        file_serialize_field,
    ) {
        pull.serialize_image_pulls = v;
        pull_origin = from;
    }
    if let Some((v, from)) = pick(
        &flags.max_parallel_image_pulls,
        "--max-parallel-image-pulls",
        &file.max_parallel_image_pulls,
        o.field("maxParallelImagePulls"),
    ) {
        pull.max_parallel_image_pulls = Some(v);
        pull_origin = from;
    }
    if let Some((v, from)) = pick(
        &flags.registry_qps,
        "--registry-qps",
        &file.registry_pull_qps,
        o.field("registryPullQPS"),
    ) {
        if !v.is_finite() {
            return Err(invalid(
                from,
                format!("registryPullQPS {v} must be a finite number"),
            ));
        }
        if v < 0.0 {
            return Err(invalid(
                from,
                format!("registryPullQPS {v} must not be a negative number"),
            ));
        }
        pull.registry_pull_qps = v;
    }
    if let Some((v, from)) = pick(
        &flags.registry_burst,
        "--registry-burst",
        &file.registry_burst,
        o.field("registryBurst"),
    ) {
        pull.registry_burst = u32::try_from(v).map_err(|_| {
            let problem = if v < 0 {
                "must not be a negative number".to_owned()
            } else {
                format!("is too large (at most {})", u32::MAX)
            };
            invalid(from, format!("registryBurst {v} {problem}"))
        })?;
    }
    pull.validate().map_err(|source| ConfigError::Pull {
        origin: pull_origin,
        source,
    })?;
    Ok(pull)
}

/// The credential provider plugins' config and binaries, both or neither.
pub(super) fn resolve_credential_providers(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<CredentialProviders>, ConfigError> {
    let provider_config = pick(
        &flags.image_credential_provider_config,
        "--image-credential-provider-config",
        &file.image_credential_provider_config,
        o.field("imageCredentialProviderConfig"),
    );
    let provider_bin_dir = pick(
        &flags.image_credential_provider_bin_dir,
        "--image-credential-provider-bin-dir",
        &file.image_credential_provider_bin_dir,
        o.field("imageCredentialProviderBinDir"),
    );
    let credential_providers = match (provider_config, provider_bin_dir) {
        (None, None) => None,
        (Some((config, _)), Some((bin_dir, _))) => Some(CredentialProviders { config, bin_dir }),
        (Some((_, from)), None) => {
            return Err(invalid(
                from,
                "needs --image-credential-provider-bin-dir (imageCredentialProviderBinDir) too",
            ));
        }
        (None, Some((_, from))) => {
            return Err(invalid(
                from,
                "needs --image-credential-provider-config (imageCredentialProviderConfig) too",
            ));
        }
    };
    Ok(credential_providers)
}

#[cfg(test)]
#[path = "pull_tests.rs"]
mod tests;
