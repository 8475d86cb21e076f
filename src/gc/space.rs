//! The space arithmetic of GarbageCollect's space pass, in one place: from the image
//! filesystem's capacity and available bytes and the policy, the usage percent, whether the
//! pass runs, the bytes it must free and the usage it aims for. The manager, `explain` (and
//! so the dry run) and the bench all call [`SpaceNeed::compute`]; nothing else computes them.
//!
//! The rules are the kubelet's GarbageCollect (pkg/kubelet/images/image_gc_manager.go):
//! available above capacity counts as capacity, capacity 0 is an error, usage is
//! `100 - available*100/capacity` in integer arithmetic (rounding usage up), and at or above
//! HighThresholdPercent the pass frees `capacity*(100-LowThresholdPercent)/100 - available`.
//! Multiplications saturate instead of overflowing (Go's int64 would wrap past 92 PB).
//!
//! Beside it, imagekeeper's own rules (issue 28): [`InodeNeed`], the same arithmetic on the
//! filesystem's inodes (statvfs `f_files`/`f_ffree`), and [`BudgetNeed`], the images' total
//! size against a byte budget; [`FsNeed`], the thresholds on a further image filesystem
//! ImageFsInfo reports (the manager's measured pass stops once it is met).

use crate::model::{FsUsage, ImageFsStats};

use super::policy::{ByteBudget, InodeThresholds};
use super::{GcError, GcPolicy};

/// The image filesystem as the operator says it is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FsSpace {
    /// Capacity in bytes.
    pub capacity: u64,
    /// Available bytes.
    pub available: u64,
}

/// What the space pass needs, at one reading of the image filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceNeed {
    /// The filesystem's size in bytes (never 0).
    pub capacity: u64,
    /// The bytes available, at most `capacity` (the kubelet clamps a reading above it, after
    /// logging "Availability is larger than capacity", which the manager does).
    pub available: u64,
    /// `100 - available*100/capacity`.
    pub usage_percent: i64,
    /// The bytes to free to come down to LowThresholdPercent, when usage is at or above
    /// HighThresholdPercent; `None` below it (the space pass does not run). May be 0 or
    /// negative (high and low both at the current usage): the walk still removes its first
    /// eligible image, as the kubelet's does.
    pub amount_to_free: Option<i64>,
}

impl SpaceNeed {
    /// The space pass's arithmetic for `capacity` and `available` bytes under `policy`.
    /// Fails only with [`GcError::InvalidCapacity`], when `capacity` is 0.
    pub fn compute(capacity: u64, available: u64, policy: &GcPolicy) -> Result<SpaceNeed, GcError> {
        if capacity == 0 {
            return Err(GcError::InvalidCapacity);
        }
        let available = available.min(capacity);
        let (capacity_i, available_i) = (to_i64(capacity), to_i64(available));
        let usage_percent = 100 - available_i.saturating_mul(100) / capacity_i;
        let amount_to_free = (usage_percent >= policy.high_threshold_percent).then(|| {
            capacity_i.saturating_mul(100 - policy.low_threshold_percent) / 100 - available_i
        });
        Ok(SpaceNeed {
            capacity,
            available,
            usage_percent,
            amount_to_free,
        })
    }

    /// The bytes used now.
    pub fn used(&self) -> u64 {
        self.capacity - self.available
    }

    /// The bytes used the pass aims for: what is used now less the amount to free (the low
    /// threshold's usage); the usage now when the pass does not run.
    pub fn target_used(&self) -> u64 {
        let amount = self.amount_to_free.unwrap_or(0);
        self.capacity
            .saturating_sub(to_u64(amount.saturating_add(to_i64(self.available))))
    }

    /// The filesystem as a space removal's journal entry records it.
    pub fn fs_usage(&self) -> FsUsage {
        FsUsage {
            capacity: self.capacity,
            used_before: self.used(),
            target_used: self.target_used(),
        }
    }
}

/// What the inode rule needs, at one reading of the image filesystem: the byte rule's
/// arithmetic on inodes (statvfs `f_files` and `f_ffree`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct InodeNeed {
    /// The filesystem's inodes (never 0).
    pub inodes: u64,
    /// Free inodes, at most `inodes`.
    pub inodes_free: u64,
    /// `100 - inodes_free*100/inodes`.
    pub usage_percent: i64,
    /// The inodes in use the pass aims for: at most this many in use is at or below the low
    /// threshold (`inodes - inodes*(100-low)/100`).
    pub target_used: u64,
    /// Whether usage is at or above the high threshold (the pass runs).
    pub runs: bool,
}

impl InodeNeed {
    /// The inode rule at this reading; `None` when the rule is off or the filesystem counts
    /// no inodes (`f_files` 0, as some filesystems report).
    pub fn compute(stats: &ImageFsStats, thresholds: Option<InodeThresholds>) -> Option<InodeNeed> {
        let InodeThresholds { high, low } = thresholds?;
        if stats.inodes == 0 {
            return None;
        }
        let inodes = stats.inodes;
        let inodes_free = stats.inodes_free.min(inodes);
        let usage_percent = 100 - to_i64(inodes_free).saturating_mul(100) / to_i64(inodes);
        let target_free = to_i64(inodes).saturating_mul(100 - low) / 100;
        Some(InodeNeed {
            inodes,
            inodes_free,
            usage_percent,
            target_used: inodes.saturating_sub(to_u64(target_free)),
            runs: usage_percent >= high,
        })
    }

    /// Inodes in use now.
    pub fn used(&self) -> u64 {
        self.inodes - self.inodes_free
    }

    /// Whether inode use is at or below the low threshold.
    pub fn met(&self) -> bool {
        self.used() <= self.target_used
    }

    /// The filesystem as an inode removal's journal entry records it (in inodes).
    pub fn fs_usage(&self) -> FsUsage {
        FsUsage {
            capacity: self.inodes,
            used_before: self.used(),
            target_used: self.target_used,
        }
    }
}

/// What the byte budget needs: the images' total size against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BudgetNeed {
    /// The images' total size (the sum of the sizes the runtime lists).
    pub total: u64,
    /// The budget's high line in bytes.
    pub high: u64,
    /// The budget's low line in bytes.
    pub low: u64,
    /// `total - low` when `total` is above `high`; `None` within the budget.
    pub amount_to_free: Option<i64>,
}

impl BudgetNeed {
    /// The budget's need for images of `total` bytes; `None` when no budget is set.
    pub fn compute(total: u64, budget: Option<ByteBudget>) -> Option<BudgetNeed> {
        let ByteBudget { high, low } = budget?;
        Some(BudgetNeed {
            total,
            high,
            low,
            amount_to_free: (total > high).then(|| to_i64(total - low)),
        })
    }

    /// The budget as a budget removal's journal entry records it: capacity is the high
    /// budget, used the images' total, target the low budget.
    pub fn fs_usage(&self) -> FsUsage {
        FsUsage {
            capacity: self.high,
            used_before: self.total,
            target_used: self.low,
        }
    }
}

/// One further image filesystem's need (issue 28: ImageFsInfo may report several; the
/// thresholds apply to each). CRI does not say which filesystem an image is on, so a further
/// filesystem over a high line gets a measured pass: the walk reads ImageFsInfo again after
/// each removal and stops once this need is [`FsNeed::met`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FsNeed {
    /// The filesystem's mountpoint.
    pub mountpoint: String,
    /// The byte-percentage rule at this reading (`None` when HighThresholdPercent 100 with
    /// MaxAge 0 turns it off: [`GcPolicy::space_pass_off`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_percent: Option<i64>,
    /// Bytes used at or above HighThresholdPercent.
    pub bytes_over_high: bool,
    /// Bytes used at or below LowThresholdPercent (or the rule is off).
    pub bytes_at_or_below_low: bool,
    /// The inode rule at this reading, when set and the filesystem counts inodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<InodeNeed>,
    /// The mountpoint of the first or an earlier image filesystem on the same device, when
    /// this one is on one (containerd may report one entry per snapshotter, all on one disk):
    /// no pass runs on it, as removals judged by its reading would never lower it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_filesystem_as: Option<String>,
}

impl FsNeed {
    /// The need of `fs` under `policy`; `None` when its capacity is 0 (not read: not judged).
    pub fn compute(fs: &ImageFsStats, policy: &GcPolicy) -> Option<FsNeed> {
        if fs.capacity == 0 {
            return None;
        }
        let (usage_percent, bytes_over_high, bytes_at_or_below_low) = if policy.space_pass_off() {
            (None, false, true)
        } else {
            let need = SpaceNeed::compute(fs.capacity, fs.available, policy).ok()?;
            let capacity = to_i64(need.capacity);
            let low_amount = capacity.saturating_mul(100 - policy.low_threshold_percent) / 100
                - to_i64(need.available);
            (
                Some(need.usage_percent),
                need.amount_to_free.is_some(),
                low_amount <= 0,
            )
        };
        Some(FsNeed {
            mountpoint: fs.mountpoint.clone(),
            usage_percent,
            bytes_over_high,
            bytes_at_or_below_low,
            inodes: InodeNeed::compute(fs, policy.inodes),
            same_filesystem_as: None,
        })
    }

    /// The needs of `stats`' further image filesystems, by their index in
    /// `stats.other_image_fs` (those with capacity 0 left out). One whose device is the first
    /// filesystem's or an earlier further one's is marked [`FsNeed::same_filesystem_as`].
    pub fn others(stats: &ImageFsStats, policy: &GcPolicy) -> Vec<(usize, FsNeed)> {
        let mut seen: Vec<(u64, &str)> = stats
            .device
            .map(|d| (d, stats.mountpoint.as_str()))
            .into_iter()
            .collect();
        let mut needs = Vec::new();
        for (index, fs) in stats.other_image_fs.iter().enumerate() {
            let same = fs.device.and_then(|device| {
                seen.iter()
                    .find(|(d, _)| *d == device)
                    .map(|(_, mountpoint)| (*mountpoint).to_owned())
            });
            if let (Some(device), None) = (fs.device, &same) {
                seen.push((device, fs.mountpoint.as_str()));
            }
            if let Some(mut need) = FsNeed::compute(fs, policy) {
                need.same_filesystem_as = same;
                needs.push((index, need));
            }
        }
        needs
    }

    /// Whether a pass runs on it: bytes or inodes at or above a high line, on a filesystem
    /// not already judged under another mountpoint.
    pub fn runs(&self) -> bool {
        self.same_filesystem_as.is_none()
            && (self.bytes_over_high || self.inodes.is_some_and(|n| n.runs))
    }

    /// Whether it is at or below every low line (the measured pass stops).
    pub fn met(&self) -> bool {
        self.bytes_at_or_below_low && self.inodes.is_none_or(|n| n.met())
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(high: i64, low: i64) -> GcPolicy {
        GcPolicy {
            high_threshold_percent: high,
            low_threshold_percent: low,
            ..GcPolicy::default()
        }
    }

    /// Data-driven: (capacity, available, high, low) -> (available after clamping, usage %,
    /// amount to free, target used).
    #[test]
    fn usage_amount_to_free_and_target_follow_the_kubelets_integer_arithmetic() {
        type Want = (u64, i64, Option<i64>, u64);
        let cases: [(u64, u64, i64, i64, Want); 11] = [
            // 90 % used, high 85: free down to 80 % = 200 - 100 = 100 bytes.
            (1000, 100, 85, 80, (100, 90, Some(100), 800)),
            // Exactly at the high threshold: the pass runs.
            (1000, 150, 85, 80, (150, 85, Some(50), 800)),
            // One byte below it in usage terms: 84.9 % rounds up to 85 (100 - 151*100/1000
            // = 100 - 15): still runs.
            (1000, 151, 85, 80, (151, 85, Some(49), 800)),
            // 84 %: below, no pass; the target is the usage now.
            (1000, 160, 85, 80, (160, 84, None, 840)),
            // Integer division rounds the target down: 999*20/100 = 199.
            (999, 0, 85, 80, (0, 100, Some(199), 800)),
            // Available above capacity counts as capacity: 0 % used.
            (1000, 5000, 85, 80, (1000, 0, None, 0)),
            // ... and with high 0 the pass runs, with nothing to free.
            (1000, 5000, 0, 0, (1000, 0, Some(0), 0)),
            // Usage below the low threshold but at high: a negative amount.
            (1000, 1000, 0, 50, (1000, 0, Some(-500), 500)),
            (1000, 900, 5, 0, (900, 10, Some(100), 0)),
            // Low 100: aim at a full disk: nothing (or less than nothing) to free.
            (1000, 0, 100, 100, (0, 100, Some(0), 1000)),
            // Bytes beyond i64 saturate rather than wrap.
            (
                u64::MAX,
                0,
                85,
                80,
                (
                    0,
                    100,
                    Some(i64::MAX / 100),
                    u64::MAX - (i64::MAX / 100) as u64,
                ),
            ),
        ];
        for (capacity, available, high, low, want) in cases {
            let need = SpaceNeed::compute(capacity, available, &policy(high, low))
                .expect("capacity is not 0");
            let got = (
                need.available,
                need.usage_percent,
                need.amount_to_free,
                need.target_used(),
            );
            assert_eq!(
                got, want,
                "capacity {capacity}, available {available}, {high}/{low}"
            );
            assert_eq!(need.capacity, capacity);
            assert_eq!(
                need.fs_usage(),
                FsUsage {
                    capacity,
                    used_before: capacity - want.0,
                    target_used: want.3,
                }
            );
        }
    }

    /// (inodes, free, high, low) -> (usage %, target used, runs, met).
    #[test]
    fn the_inode_rule_is_the_byte_rules_arithmetic_on_inodes() {
        type Want = Option<(i64, u64, bool, bool)>;
        let cases: [(u64, u64, i64, i64, Want); 6] = [
            // 90 % used, high 85: aim at 80 % = 800 in use.
            (1000, 100, 85, 80, Some((90, 800, true, false))),
            (1000, 150, 85, 80, Some((85, 800, true, false))),
            (1000, 160, 85, 80, Some((84, 800, false, false))),
            // At the target exactly: met.
            (1000, 200, 85, 80, Some((80, 800, false, true))),
            // Free above the count is clamped.
            (1000, 5000, 85, 80, Some((0, 800, false, true))),
            // A filesystem without inode counts: the rule cannot apply.
            (0, 0, 85, 80, None),
        ];
        for (inodes, free, high, low, want) in cases {
            let stats = ImageFsStats::new("/x", 0, 1, 1).with_inodes(inodes, free);
            let got = InodeNeed::compute(&stats, Some(InodeThresholds { high, low }))
                .map(|n| (n.usage_percent, n.target_used, n.runs, n.met()));
            assert_eq!(got, want, "{inodes} inodes, {free} free, {high}/{low}");
        }
        let stats = ImageFsStats::new("/x", 0, 1, 1).with_inodes(1000, 0);
        assert_eq!(InodeNeed::compute(&stats, None), None, "off");
    }

    #[test]
    fn the_budget_frees_down_to_low_only_above_high() {
        let budget = Some(ByteBudget {
            high: 500,
            low: 300,
        });
        let need = |total| BudgetNeed::compute(total, budget).and_then(|n| n.amount_to_free);
        assert_eq!(need(500), None, "at high: within the budget");
        assert_eq!(need(501), Some(201));
        assert_eq!(need(10_000), Some(9_700));
        assert_eq!(BudgetNeed::compute(10_000, None), None, "off");
    }

    #[test]
    fn capacity_zero_is_the_kubelets_invalid_capacity_error() {
        for available in [0, 1, u64::MAX] {
            let got = SpaceNeed::compute(0, available, &GcPolicy::default());
            assert!(
                matches!(got, Err(GcError::InvalidCapacity)),
                "available {available}: {got:?}"
            );
        }
    }
}
