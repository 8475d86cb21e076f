//! The warm settings' resolver: the warm set (the file's `[[warm]]` tables, then the warm set
//! directory's files), the warm loop's period and parallelism, and `[warmFromHistory]`.
//! Invariant: a warm set holds at most [`MAX_WARM_ENTRIES`] entries.

use crate::warm::{
    DEFAULT_USED_WITHIN, DEFAULT_WARM_PERIOD, FromHistory, MAX_WARM_ENTRIES, SizeSpec, WarmConfig,
    WarmSet, parse_size, read_warm_dir, resolve_specs,
};

use super::origin::{Origin, duration, invalid, pick};
use super::process::period;
use super::{ConfigError, FileConfig, FlagValues};

/// The warm set (the file's `[[warm]]` entries, then the directory's files in name order)
/// and the warm loop's settings. The directory is read here (blocking I/O: a reload resolves
/// on the blocking pool); `for` lifetimes are stamped by the agent ([`WarmSet::stamped`]).
pub(super) fn resolve_warm(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<(WarmSet, WarmConfig), ConfigError> {
    let dir = pick(
        &flags.warm_set_dir,
        "--warm-set-dir",
        &file.warm_set_dir,
        o.field("warmSetDir"),
    );
    // A bad entry names itself; a bad warm set file or directory is named under the flag or
    // field that gave the directory (it is not the config file).
    let dir_origin = dir
        .as_ref()
        .map_or_else(|| o.field("warmSetDir"), |(_, from)| from.clone());
    let warm_error = |e: crate::warm::WarmError| match e {
        crate::warm::WarmError::Invalid { origin, message } => invalid(origin, message),
        other => invalid(dir_origin.clone(), other.to_string()),
    };
    let mut entries = match &file.warm {
        None => Vec::new(),
        Some(specs) => {
            resolve_specs(specs, |i| o.field(&format!("warm[{i}]"))).map_err(warm_error)?
        }
    };
    let from_file = entries.len();
    if let Some((dir, _)) = &dir {
        entries.extend(read_warm_dir(dir).map_err(warm_error)?);
    }
    if entries.len() > MAX_WARM_ENTRIES {
        let origin = if dir.is_some() {
            dir_origin.clone()
        } else {
            o.field("warm")
        };
        return Err(invalid(
            origin,
            format!(
                "the warm set has {} entries ({from_file} [[warm]] tables, {} in the warm set \
                 directory), more than the {MAX_WARM_ENTRIES} a warm set may hold",
                entries.len(),
                entries.len() - from_file
            ),
        ));
    }
    let period = match pick(
        &flags.warm_period,
        "--warm-period",
        &file.warm_period,
        o.field("warmPeriod"),
    ) {
        None => DEFAULT_WARM_PERIOD,
        Some((v, from)) => period(&Some(v), &from, DEFAULT_WARM_PERIOD)?,
    };
    let parallel_pulls = match file.warm_parallel_pulls {
        None => 1,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| {
                invalid(
                    o.field("warmParallelPulls"),
                    format!("must be between 1 and 64 (got {n})"),
                )
            })?,
    };
    let from_history = match &file.warm_from_history {
        None => None,
        Some(spec) => {
            let used_within = match &spec.used_within {
                None => DEFAULT_USED_WITHIN,
                Some(v) => duration(v, &o.field("warmFromHistory.usedWithin"))?,
            };
            let max_bytes = match &spec.max_bytes {
                None => None,
                Some(SizeSpec::Bytes(b)) => Some(*b),
                Some(SizeSpec::Text(t)) => Some(
                    parse_size(t).map_err(|m| invalid(o.field("warmFromHistory.maxBytes"), m))?,
                ),
            };
            Some(FromHistory {
                used_within,
                max_bytes,
            })
        }
    };
    Ok((
        WarmSet::new(entries).with_from_history(from_history),
        WarmConfig {
            dir: dir.map(|(d, _)| d),
            period,
            parallel_pulls,
            from_history,
        },
    ))
}

#[cfg(test)]
#[path = "warm_tests.rs"]
mod tests;
