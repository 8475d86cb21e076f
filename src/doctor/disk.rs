//! The doctor's disk checks: where the images are (the image filesystem) and the kubelet's
//! disk thresholds against imagekeeper's, namely the eviction signals on bytes and on inodes
//! (whose reclaim runs the eviction manager's DeleteUnusedImages), the kubelet's image GC
//! thresholds and its imageMaximumGCAge. Invariants as the module's: one finding per
//! threshold or setting compared, a threshold the doctor cannot place on a known capacity is
//! `not_checked` with the reason, never guessed.

use super::kubelet_config::{
    SIGNAL_IMAGEFS_AVAILABLE, SIGNAL_IMAGEFS_INODES_FREE, SIGNAL_NODEFS_AVAILABLE,
    SIGNAL_NODEFS_INODES_FREE,
};
use super::{DoctorInput, Finding, RuntimeView, Threshold};

fn percent(p: f64) -> String {
    format!("{}%", (p * 100.0).round() / 100.0)
}

/// Eviction thresholds on the disk signals whose reclaim runs the eviction manager's
/// DeleteUnusedImages (pkg/kubelet/eviction/helpers.go, buildSignalToNodeReclaimFuncs: imagefs
/// signals always; nodefs signals when the images share the node's filesystem). The signal
/// fires when available < threshold (OpLessThan), i.e. at used > 100 - threshold percent; a
/// soft threshold after its grace period.
pub(super) fn check_eviction(input: &DoctorInput<'_>) -> Vec<Finding> {
    let high = input.imagekeeper.gc.policy.high_threshold_percent;
    let capacity = match input.runtime {
        RuntimeView::Reached {
            image_fs: Ok(fs), ..
        } if fs.capacity > 0 => Ok(fs.capacity),
        RuntimeView::Reached {
            image_fs: Ok(_), ..
        } => Err("the runtime reported an image filesystem of capacity 0".to_owned()),
        RuntimeView::Reached {
            image_fs: Err(e), ..
        } => Err(format!("the image filesystem's capacity is unknown ({e})")),
        RuntimeView::Unreachable(e) => Err(format!(
            "the image filesystem's capacity is unknown: the runtime did not answer ({e})"
        )),
    };
    let mut findings = Vec::new();
    for (field, map) in [
        ("evictionHard", &input.kubelet.eviction_hard),
        ("evictionSoft", &input.kubelet.eviction_soft),
    ] {
        for signal in [SIGNAL_IMAGEFS_AVAILABLE, SIGNAL_NODEFS_AVAILABLE] {
            let kind = if field == "evictionHard" {
                "hard"
            } else {
                "soft"
            };
            let fs = if signal == SIGNAL_IMAGEFS_AVAILABLE {
                "imagefs"
            } else {
                "nodefs"
            };
            let name = format!("eviction-{kind}-{fs}");
            if signal == SIGNAL_NODEFS_AVAILABLE
                && input.images_on_nodefs == Some(false)
                && map.contains_key(signal)
            {
                // buildSignalToNodeReclaimFuncs: with a separate imagefs, a nodefs signal
                // reclaims containers and logs, not images.
                findings.push(Finding::ok(
                    &name,
                    format!(
                        "the images are not on the node's filesystem (a dedicated image \
                         filesystem): the kubelet's {field} {signal} does not make the eviction \
                         manager remove images"
                    ),
                ));
                continue;
            }
            let Some(threshold) = map.get(signal) else {
                if field == "evictionHard" {
                    findings.push(Finding::ok(
                        &name,
                        format!(
                            "{field} sets no {signal} threshold: the eviction manager does not \
                             remove images for it"
                        ),
                    ));
                }
                continue;
            };
            // The usage percent at which the signal fires.
            let (line, shown) = match threshold {
                Threshold::Percent(p) => (100.0 - p, percent(*p)),
                Threshold::Bytes { bytes, text } => {
                    // A quantity is judged against the image filesystem's size; nodefs is
                    // another filesystem whose size the doctor does not know.
                    match (&capacity, signal == SIGNAL_IMAGEFS_AVAILABLE) {
                        (Ok(cap), true) => {
                            let p = (bytes / *cap as f64 * 100.0).min(100.0);
                            (
                                100.0 - p,
                                format!(
                                    "{text} ({} of the image filesystem's {} bytes)",
                                    percent(p),
                                    cap
                                ),
                            )
                        }
                        (Err(why), true) => {
                            findings.push(Finding::not_checked(
                                &name,
                                format!(
                                    "{field} {signal} is a quantity ({text}), which can be \
                                     compared with --image-gc-high-threshold only as a share of \
                                     the filesystem's capacity, and {why}"
                                ),
                            ));
                            continue;
                        }
                        (_, false) => {
                            findings.push(Finding::not_checked(
                                &name,
                                format!(
                                    "{field} {signal} is a quantity ({text}), which can be \
                                     compared with --image-gc-high-threshold only as a share of \
                                     the node filesystem's capacity, which the doctor does not \
                                     read"
                                ),
                            ));
                            continue;
                        }
                    }
                }
            };
            let shared = if signal == SIGNAL_NODEFS_AVAILABLE {
                " (when the images are on the node's root filesystem, with no separate imagefs)"
            } else {
                ""
            };
            let after = if kind == "soft" {
                " once its grace period has passed"
            } else {
                ""
            };
            if high as f64 >= line {
                // Five points of margin under the line (GC runs every period, usage climbs
                // in between), and ten between the thresholds: 80 / 70 under 85.
                let suggest_high = line.ceil() as i64 - 5;
                let suggest_low = (suggest_high - 10).max(0);
                // An absurd threshold (100% free evicts at 0% used) leaves no GC threshold
                // below it to suggest: the kubelet's setting is what to fix (issue 53).
                let fix = if suggest_high < 1 {
                    format!(
                        "lower the kubelet's {field} {signal} to a share that leaves room for \
                         image GC below its line (the kubelet's default, 15%, evicts at 85% \
                         used): at {shown} it evicts at {} used, below any \
                         --image-gc-high-threshold imagekeeper could set",
                        percent(line)
                    )
                } else {
                    format!(
                        "set imagekeeper's --image-gc-high-threshold (imageGCHighThresholdPercent) \
                         below {}, for example --image-gc-high-threshold {suggest_high} \
                         --image-gc-low-threshold {suggest_low}, or lower the kubelet's {field} \
                         {signal} so that it evicts above {high}% used",
                        percent(line)
                    )
                };
                findings.push(Finding::conflict(
                    &name,
                    format!(
                        "the kubelet's {field} {signal} {shown} evicts at {} used, at or below \
                         imagekeeper's --image-gc-high-threshold {high}%{shared}: the eviction \
                         manager's DeleteUnusedImages{after} removes every unused image, in its \
                         own order without imagekeeper's history, before imagekeeper's GC acts",
                        percent(line)
                    ),
                    fix,
                ));
            } else {
                findings.push(Finding::ok(
                    &name,
                    format!(
                        "the kubelet's {field} {signal} {shown} evicts at {} used, above \
                         imagekeeper's --image-gc-high-threshold {high}%{shared}",
                        percent(line)
                    ),
                ));
            }
        }
    }
    findings
}

/// The kubelet's space GC (image_gc_manager.go: runs at usage >= imageGCHighThresholdPercent)
/// against imagekeeper's. A kubelet high threshold of 100 turns its image GC off only with
/// imageMaximumGCAge 0 (pkg/kubelet/kubelet.go, StartGarbageCollection); with MaxAge set its
/// space pass still runs, on a 100 % full image filesystem.
pub(super) fn check_image_gc_thresholds(input: &DoctorInput<'_>) -> Finding {
    let name = "image-gc-thresholds";
    let k_high = input.kubelet.image_gc_high_threshold_percent;
    let k_low = input.kubelet.image_gc_low_threshold_percent;
    let high = input.imagekeeper.gc.policy.high_threshold_percent;
    let low = input.imagekeeper.gc.policy.low_threshold_percent;
    if k_high == 100 && input.kubelet.image_maximum_gc_age.is_zero() {
        return Finding::ok(
            name,
            "the kubelet's imageGCHighThresholdPercent is 100 and its imageMaximumGCAge 0: its \
             image GC never runs (it is then no safety net if imagekeeper stops)"
                .to_owned(),
        );
    }
    if k_high <= high {
        return Finding::conflict(
            name,
            format!(
                "the kubelet's image GC thresholds {k_high}/{k_low} are at or below \
                 imagekeeper's {high}/{low}: the kubelet's image GC starts first and removes \
                 images in its own order, without imagekeeper's history"
            ),
            format!(
                "set imagekeeper's --image-gc-high-threshold below {k_high} (and \
                 --image-gc-low-threshold below that), or raise the kubelet's \
                 imageGCHighThresholdPercent above {high} while keeping it below the eviction line"
            ),
        );
    }
    Finding::ok(
        name,
        format!(
            "the kubelet's image GC thresholds {k_high}/{k_low} are above imagekeeper's \
             {high}/{low}: imagekeeper frees space first"
        ),
    )
}

/// The kubelet's MaxAge pass (image_gc_manager.go, freeOldImages) removes images unused for
/// imageMaximumGCAge by the kubelet's own in-memory record of use.
pub(super) fn check_maximum_age(input: &DoctorInput<'_>) -> Finding {
    use crate::format::go_duration;
    let name = "image-maximum-gc-age";
    let kubelet = input.kubelet.image_maximum_gc_age;
    let ours = input.imagekeeper.gc.policy.max_age;
    if kubelet.is_zero() {
        return Finding::ok(
            name,
            "the kubelet's imageMaximumGCAge is 0: the kubelet removes no image for its age"
                .to_owned(),
        );
    }
    if ours.is_zero() || kubelet <= ours {
        let ours_shown = if ours.is_zero() {
            "off (0)".to_owned()
        } else {
            go_duration(ours)
        };
        return Finding::conflict(
            name,
            format!(
                "the kubelet's imageMaximumGCAge {} is set while imagekeeper's \
                 --image-maximum-gc-age is {ours_shown}: the kubelet removes images it has not \
                 seen used for {} (its record of use starts again at each kubelet restart) before \
                 imagekeeper would",
                go_duration(kubelet),
                go_duration(kubelet)
            ),
            format!(
                "set the kubelet's imageMaximumGCAge to 0 and imagekeeper's \
                 --image-maximum-gc-age (imageMaximumGCAge) to {}",
                go_duration(kubelet)
            ),
        );
    }
    Finding::ok(
        name,
        format!(
            "imagekeeper's --image-maximum-gc-age {} is shorter than the kubelet's \
             imageMaximumGCAge {}",
            go_duration(ours),
            go_duration(kubelet)
        ),
    )
}

/// Where the images are: a dedicated image filesystem (not the node's), a split one
/// (KEP-4191: ImageFsInfo reports the containers' writable layers on another filesystem), or
/// the node's own; GC acts on the image filesystem only.
pub(super) fn check_image_filesystem(input: &DoctorInput<'_>) -> Finding {
    let name = "image-filesystem";
    let RuntimeView::Reached {
        image_fs: Ok(fs), ..
    } = input.runtime
    else {
        return Finding::not_checked(
            name,
            "the runtime did not report its image filesystem".to_owned(),
        );
    };
    let split = if fs.container_filesystems.is_empty() {
        "the containers' writable layers share it".to_owned()
    } else {
        format!(
            "split (KEP-4191): the containers' writable layers are on {}, which imagekeeper's GC \
             never acts on",
            fs.container_filesystems.join(", ")
        )
    };
    let others = if fs.other_image_filesystems.is_empty() {
        String::new()
    } else {
        format!(
            "; further image filesystems reported ({}): imagekeeper's GC applies its \
             thresholds to each, by a measured pass (CRI does not say which filesystem an \
             image is on)",
            fs.other_image_filesystems.join(", ")
        )
    };
    let place = match input.images_on_nodefs {
        Some(true) => "on the node's filesystem (nodefs)",
        Some(false) => "dedicated (not the node's filesystem: the kubelet calls it imagefs)",
        None => "on a filesystem the doctor could not compare with the node's",
    };
    Finding::ok(
        name,
        format!(
            "the image filesystem {} is {place}; {split}{others}",
            fs.mountpoint
        ),
    )
}

/// The inode signals (pkg/kubelet/eviction/helpers.go, buildSignalToNodeReclaimFuncs: an
/// inodesFree signal reclaims like its filesystem's available signal, DeleteUnusedImages
/// included; defaults 5% each, pkg/kubelet/eviction/defaults_linux.go). A percentage is
/// compared with imagekeeper's imageGCHighInodesThresholdPercent when one is set, as the byte
/// signals are with --image-gc-high-threshold; a nodefs signal only when the images are on
/// nodefs.
pub(super) fn check_inodes(input: &DoctorInput<'_>) -> Vec<Finding> {
    let mut findings = Vec::new();
    let ours = input.imagekeeper.gc.policy.inodes;
    for (field, map) in [
        ("evictionHard", &input.kubelet.eviction_hard),
        ("evictionSoft", &input.kubelet.eviction_soft),
    ] {
        let kind = if field == "evictionHard" {
            "hard"
        } else {
            "soft"
        };
        for (signal, fs) in [
            (SIGNAL_IMAGEFS_INODES_FREE, "imagefs"),
            (SIGNAL_NODEFS_INODES_FREE, "nodefs"),
        ] {
            let name = format!("eviction-{kind}-{fs}-inodes");
            let threshold = match map.get(signal) {
                None if field == "evictionHard" => {
                    findings.push(Finding::ok(
                        &name,
                        format!(
                            "{field} sets no {signal} threshold (with evictionHard set and \
                             mergeDefaultEvictionSettings false the kubelet's default 5% is \
                             off): the eviction manager does not remove images for inodes"
                        ),
                    ));
                    continue;
                }
                None => continue,
                Some(t) => t,
            };
            if fs == "nodefs" && input.images_on_nodefs == Some(false) {
                findings.push(Finding::ok(
                    &name,
                    format!(
                        "the images are not on the node's filesystem: the kubelet's {field} \
                         {signal} does not make the eviction manager remove images"
                    ),
                ));
                continue;
            }
            let (line, shown) = match threshold {
                Threshold::Percent(p) => (Some(100.0 - p), percent(*p)),
                Threshold::Bytes { text, .. } => (None, format!("{text} inodes")),
            };
            let fires = format!(
                "the kubelet's {field} {signal} {shown}: when fewer inodes than that are free on \
                 the {fs}, the eviction manager's DeleteUnusedImages removes every unused image, \
                 in its own order"
            );
            findings.push(match (ours, line) {
                (None, _) => Finding::not_checked(
                    &name,
                    format!(
                        "{fires}; imagekeeper's inode thresholds are off \
                         (imageGCHighInodesThresholdPercent), so a filesystem that runs out of \
                         inodes before bytes reaches this line first"
                    ),
                ),
                (Some(_), None) => Finding::not_checked(
                    &name,
                    format!(
                        "{fires}; a count of inodes is compared with \
                         imageGCHighInodesThresholdPercent only as a share of the filesystem's \
                         inodes, which the doctor does not compare"
                    ),
                ),
                (Some(t), Some(line)) if t.high as f64 >= line => {
                    let suggest_high = (line.ceil() as i64 - 5).max(1);
                    let suggest_low = (suggest_high - 10).max(0);
                    Finding::conflict(
                        &name,
                        format!(
                            "{fires}, at {} of inodes used, at or below imagekeeper's \
                             imageGCHighInodesThresholdPercent {}%: it acts before imagekeeper's GC",
                            percent(line),
                            t.high
                        ),
                        format!(
                            "set imageGCHighInodesThresholdPercent below {} in the config \
                             file, for example imageGCHighInodesThresholdPercent = {suggest_high} \
                             and imageGCLowInodesThresholdPercent = {suggest_low} (or --set \
                             imageGCHighInodesThresholdPercent={suggest_high} --set \
                             imageGCLowInodesThresholdPercent={suggest_low})",
                            percent(line)
                        ),
                    )
                }
                (Some(t), Some(line)) => Finding::ok(
                    &name,
                    format!(
                        "{fires}, at {} of inodes used, above imagekeeper's \
                         imageGCHighInodesThresholdPercent {}%",
                        percent(line),
                        t.high
                    ),
                ),
            });
        }
    }
    findings
}
