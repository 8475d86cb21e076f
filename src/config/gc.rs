//! The GC settings' resolvers: the thresholds and ages (validated as the kubelet does),
//! imagekeeper's inode and byte pairs, the pinned patterns, the kubelet's root directory and
//! intent age, the space walk's order and the eviction journal's retention.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::gc::{ByteBudget, GcOrder, GcPolicy, InodeThresholds};
use crate::kubelet::DEFAULT_KUBELET_ROOT_DIR;
use crate::model::JournalRetention;

use super::origin::{Origin, duration, invalid, pick};
use super::validate::{PolicyOrigins, validate_policy};
use super::{ConfigError, FileConfig, FlagValues, MIN_INTENT_MAX_AGE, Quantity};

/// The GC thresholds and ages, validated as the kubelet does.
pub(super) fn resolve_gc_policy(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<GcPolicy, ConfigError> {
    let mut policy = GcPolicy::default();
    let mut origins = PolicyOrigins::default();

    if let Some((v, from)) = pick(
        &flags.image_gc_high_threshold,
        "--image-gc-high-threshold",
        &file.image_gc_high_threshold_percent,
        o.field("imageGCHighThresholdPercent"),
    ) {
        policy.high_threshold_percent = v;
        origins.high = from;
    }
    if let Some((v, from)) = pick(
        &flags.image_gc_low_threshold,
        "--image-gc-low-threshold",
        &file.image_gc_low_threshold_percent,
        o.field("imageGCLowThresholdPercent"),
    ) {
        policy.low_threshold_percent = v;
        origins.low = from;
    }
    if let Some((v, from)) = pick(
        &flags.minimum_image_ttl_duration,
        "--minimum-image-ttl-duration",
        &file.image_minimum_gc_age,
        o.field("imageMinimumGCAge"),
    ) {
        policy.min_age = duration(&v, &from)?;
        origins.min_age = from;
    }
    if let Some((v, from)) = pick(
        &flags.image_maximum_gc_age,
        "--image-maximum-gc-age",
        &file.image_maximum_gc_age,
        o.field("imageMaximumGCAge"),
    ) {
        policy.max_age = duration(&v, &from)?;
        origins.max_age = from;
    }
    validate_policy(&policy, &origins)?;
    policy.inodes = resolve_pair(
        [
            (
                &flags.image_gc_high_inodes_threshold,
                "--image-gc-high-inodes-threshold",
                &file.image_gc_high_inodes_threshold_percent,
                "imageGCHighInodesThresholdPercent",
            ),
            (
                &flags.image_gc_low_inodes_threshold,
                "--image-gc-low-inodes-threshold",
                &file.image_gc_low_inodes_threshold_percent,
                "imageGCLowInodesThresholdPercent",
            ),
        ],
        o,
        |v: i64, _| Ok(v),
        |high, low| GcPolicy {
            inodes: Some(InodeThresholds { high, low }),
            ..GcPolicy::default()
        },
        |(high, low)| InodeThresholds { high, low },
    )?;
    let file_bytes = |q: &Option<Quantity>| q.clone();
    let flag_bytes = |f: &Option<String>| f.clone().map(Quantity::Text);
    policy.bytes = resolve_pair(
        [
            (
                &flag_bytes(&flags.image_gc_high_bytes),
                "--image-gc-high-bytes",
                &file_bytes(&file.image_gc_high_bytes),
                "imageGCHighBytes",
            ),
            (
                &flag_bytes(&flags.image_gc_low_bytes),
                "--image-gc-low-bytes",
                &file_bytes(&file.image_gc_low_bytes),
                "imageGCLowBytes",
            ),
        ],
        o,
        |q: Quantity, from: &str| q.bytes().map_err(|e| invalid(from.to_owned(), e)),
        |high, low| GcPolicy {
            bytes: Some(ByteBudget { high, low }),
            ..GcPolicy::default()
        },
        |(high, low)| ByteBudget { high, low },
    )?;
    Ok(policy)
}

/// One of imagekeeper's threshold pairs (inodes, bytes): off when neither is given, refused
/// when one is given without the other (naming the missing one by its config key: the flag,
/// if any, is deprecated), each value converted by `value` (naming its flag or field as it
/// was given), the pair validated alone by the policy's rules (`policy` builds a policy
/// holding just it) with the error naming both origins.
/// Each side: the flag's value, the flag, the file's value, the config key.
pub(super) type PairSource<'a, T> = (&'a Option<T>, &'a str, &'a Option<T>, &'static str);

pub(super) fn resolve_pair<T: Clone, V: Copy, P>(
    [high, low]: [PairSource<'_, T>; 2],
    o: &Origin<'_>,
    value: impl Fn(T, &str) -> Result<V, ConfigError>,
    policy: impl Fn(V, V) -> GcPolicy,
    make: impl Fn((V, V)) -> P,
) -> Result<Option<P>, ConfigError> {
    let high_name = high.3;
    let low_name = low.3;
    let high = pick(high.0, high.1, high.2, o.field(high.3));
    let low = pick(low.0, low.1, low.2, o.field(low.3));
    let ((h, high_from), (l, low_from)) = match (high, low) {
        (None, None) => return Ok(None),
        (Some(h), Some(l)) => (h, l),
        (Some((_, from)), None) => {
            return Err(invalid(
                from,
                format!("set without {low_name} (give both, or neither to leave the rule off)"),
            ));
        }
        (None, Some((_, from))) => {
            return Err(invalid(
                from,
                format!("set without {high_name} (give both, or neither to leave the rule off)"),
            ));
        }
    };
    let h = value(h, &high_from)?;
    let l = value(l, &low_from)?;
    if let Err(e) = policy(h, l).validate() {
        let message = e.to_string();
        let origin = if message.contains("invalid High") {
            high_from
        } else if message.contains("invalid Low") {
            low_from
        } else {
            format!("{low_from} and {high_from}")
        };
        return Err(invalid(origin, message));
    }
    Ok(Some(make((h, l))))
}

/// The pinned image patterns: the flags', else the file's.
pub(super) fn resolve_pins(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Vec<String>, ConfigError> {
    let mut pins = flags.pinned_images.clone();
    if pins.is_empty() {
        pins = file.pinned_images.clone().unwrap_or_default();
    }
    for pin in &pins {
        let origin = || {
            if flags.pinned_images.is_empty() {
                o.field("pinnedImages")
            } else {
                "--pinned-image".to_owned()
            }
        };
        // A pattern with `user:password@` is refused shown redacted.
        crate::pull::refuse_credentials(pin).map_err(|e| invalid(origin(), e.to_string()))?;
        if pin.is_empty() || pin.starts_with('*') {
            let origin = origin();
            return Err(invalid(
                origin,
                format!("pattern {pin:?} must name an image (a trailing * matches any suffix)"),
            ));
        }
    }
    Ok(pins)
}

/// The kubelet's root directory (absolute), or none when set empty.
pub(super) fn resolve_kubelet_root_dir(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<PathBuf>, ConfigError> {
    let kubelet_root_dir = match pick(
        &flags.kubelet_root_dir,
        "--kubelet-root-dir",
        &file.kubelet_root_dir,
        o.field("kubeletRootDir"),
    ) {
        None => Some(PathBuf::from(DEFAULT_KUBELET_ROOT_DIR)),
        Some((v, _)) if v.is_empty() => None,
        Some((v, from)) if !Path::new(&v).is_absolute() => {
            return Err(invalid(from, format!("{v:?} is not an absolute path")));
        }
        Some((v, _)) => Some(PathBuf::from(v)),
    };
    Ok(kubelet_root_dir)
}

/// The kubelet pull intents' max age when a flag or field sets it (at least
/// [`MIN_INTENT_MAX_AGE`]); `None` takes the default.
pub(super) fn resolve_intent_max_age(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<Duration>, ConfigError> {
    let Some((v, from)) = pick(
        &flags.kubelet_intent_max_age,
        "--kubelet-intent-max-age",
        &file.kubelet_intent_max_age,
        o.field("kubeletIntentMaxAge"),
    ) else {
        return Ok(None);
    };
    let d = duration(&v, &from)?;
    if d < MIN_INTENT_MAX_AGE {
        return Err(invalid(from, format!("must be at least 1m0s (got {v:?})")));
    }
    Ok(Some(d))
}

/// The space walk's order: `kubelet-order` (the default), `adaptive` or `predictive`.
pub(super) fn resolve_gc_order(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<GcOrder, ConfigError> {
    match pick(
        &flags.image_gc_policy,
        "--image-gc-policy",
        &file.image_gc_policy,
        o.field("imageGCPolicy"),
    ) {
        None => Ok(GcOrder::KubeletOrder),
        Some((v, _)) if v == "kubelet-order" => Ok(GcOrder::KubeletOrder),
        Some((v, _)) if v == "adaptive" => Ok(GcOrder::Adaptive),
        Some((v, _)) if v == "predictive" => Ok(GcOrder::Predictive),
        Some((v, from)) => Err(invalid(
            from,
            format!("{v:?} is none of kubelet-order, adaptive, predictive"),
        )),
    }
}

/// The eviction journal's retention when a flag or field sets it.
pub(super) fn resolve_journal_retention(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<JournalRetention>, ConfigError> {
    // None unless a flag or a file field sets it: the store then keeps the retention
    // the file records (a `gc` or `prune` without flags must not prune an agent's
    // longer journal to the defaults). One of the two set takes the default for the other.
    let mut journal_retention: Option<JournalRetention> = None;
    if let Some((v, from)) = pick(
        &flags.journal_max_age,
        "--journal-max-age",
        &file.journal_max_age,
        o.field("journalMaxAge"),
    ) {
        let d = duration(&v, &from)?;
        if d < Duration::from_secs(1) {
            return Err(invalid(from, format!("must be at least 1s (got {v:?})")));
        }
        journal_retention
            .get_or_insert_with(JournalRetention::default)
            .max_age = d;
    }
    if let Some((v, from)) = pick(
        &flags.journal_max_entries,
        "--journal-max-entries",
        &file.journal_max_entries,
        o.field("journalMaxEntries"),
    ) {
        journal_retention
            .get_or_insert_with(JournalRetention::default)
            .max_entries = u32::try_from(v).ok().filter(|n| *n >= 1).ok_or_else(|| {
            invalid(
                from,
                format!("must be between 1 and {} (got {v})", u32::MAX),
            )
        })?;
    }
    Ok(journal_retention)
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
