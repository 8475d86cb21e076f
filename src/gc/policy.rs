//! The image GC policy and its validation, with the kubelet's messages: the kubelet's byte
//! thresholds and ages, and imagekeeper's own rules beside them (issue 28), each off unless
//! set: inode thresholds ([`InodeThresholds`], percent of the image filesystem's inodes used)
//! and a byte budget ([`ByteBudget`], the images' total size). Invariant: a policy that
//! [`GcPolicy::validate`] accepts has every set pair with low strictly below high.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::GcError;

/// kubelet's ImageGCPolicy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcPolicy {
    /// Disk usage percent at or above which space GC runs.
    pub high_threshold_percent: i64,
    /// Disk usage percent that space GC frees down to.
    pub low_threshold_percent: i64,
    /// Images younger than this (since first detected) are not collected for space.
    pub min_age: Duration,
    /// Images unused for longer than this are collected; zero disables.
    pub max_age: Duration,
    /// Inode thresholds on the image filesystem; `None` = off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<InodeThresholds>,
    /// A budget for the images' total size; `None` = off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<ByteBudget>,
}

/// `imageGCHighInodesThresholdPercent` / `imageGCLowInodesThresholdPercent`: at or above `high`
/// percent of the image filesystem's inodes used, GC removes images until at most `low`
/// percent are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeThresholds {
    /// Percent of inodes used at or above which GC runs.
    pub high: i64,
    /// Percent of inodes used that GC frees down to.
    pub low: i64,
}

/// `imageGCHighBytes` / `imageGCLowBytes`: when the images' total size is above
/// `high` bytes, GC frees it down to `low`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByteBudget {
    /// Total image bytes above which GC runs.
    pub high: u64,
    /// Total image bytes that GC frees down to.
    pub low: u64,
}

impl Default for GcPolicy {
    fn default() -> GcPolicy {
        GcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
            inodes: None,
            bytes: None,
        }
    }
}

/// A Go `time.Duration` as a KubeletConfiguration may hold it: a magnitude and a sign (an
/// imagekeeper policy's ages are never negative; the kubelet's file's may be).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignedAge {
    /// Below zero.
    pub negative: bool,
    /// The magnitude.
    pub magnitude: Duration,
}

impl SignedAge {
    /// `age`, not negative.
    pub fn positive(age: Duration) -> SignedAge {
        SignedAge {
            negative: false,
            magnitude: age,
        }
    }

    /// Go's `%v` of the duration (`-1m0s`).
    fn go(self) -> String {
        let sign = if self.negative && !self.magnitude.is_zero() {
            "-"
        } else {
            ""
        };
        format!("{sign}{}", crate::format::go_duration(self.magnitude))
    }

    fn below_zero(self) -> bool {
        self.negative && !self.magnitude.is_zero()
    }

    fn above_zero(self) -> bool {
        !self.negative && !self.magnitude.is_zero()
    }
}

/// The image GC rules of kubelet master's `ValidateKubeletConfiguration`
/// (`pkg/kubelet/apis/config/validation/validation.go`), in its order and with its texts, every
/// broken rule (the caller aggregates them as it does, `utilerrors.NewAggregate`): thresholds
/// between 0 and 100, low below high, `imageMinimumGCAge` and `imageMaximumGCAge` not negative,
/// a MaxAge above MinAge. The kubelet refuses such a configuration before its image GC manager
/// exists, so `NewImageGCManager`'s own checks never speak.
pub fn kubelet_validation_errors(
    high: i64,
    low: i64,
    min_age: SignedAge,
    max_age: SignedAge,
) -> Vec<String> {
    let mut errors = Vec::new();
    if !(0..=100).contains(&high) {
        errors.push(format!(
            "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) {high} must be between 0 and 100, inclusive"
        ));
    }
    if !(0..=100).contains(&low) {
        errors.push(format!(
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be between 0 and 100, inclusive"
        ));
    }
    if low >= high {
        errors.push(format!(
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"
        ));
    }
    if min_age.below_zero() {
        errors.push(format!(
            "invalid configuration: imageMinimumGCAge {} must not be negative",
            min_age.go()
        ));
    }
    if max_age.below_zero() {
        errors.push(format!(
            "invalid configuration: imageMaximumGCAge {} must not be negative",
            max_age.go()
        ));
    }
    let max_at_most_min = !min_age.below_zero() && max_age.magnitude <= min_age.magnitude;
    if max_age.above_zero() && max_at_most_min {
        errors.push(format!(
            "invalid configuration: imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
            max_age.go(),
            min_age.go()
        ));
    }
    errors
}

impl GcPolicy {
    /// Checks the policy as the kubelet does, with its messages: the kubelet's own rules
    /// ([`kubelet_validation_errors`], aggregated), then imagekeeper's own (inodes, bytes).
    pub fn validate(&self) -> Result<(), GcError> {
        let invalid = |message: String| Err(GcError::InvalidPolicy { message });
        let kubelet = kubelet_validation_errors(
            self.high_threshold_percent,
            self.low_threshold_percent,
            SignedAge::positive(self.min_age),
            SignedAge::positive(self.max_age),
        );
        if !kubelet.is_empty() {
            return invalid(crate::format::aggregate(&kubelet));
        }
        if let Some(InodeThresholds { high, low }) = self.inodes {
            // The byte thresholds' rules and message style, with the inode names.
            if !(0..=100).contains(&high) {
                return invalid(format!(
                    "invalid HighInodesThresholdPercent {high}, must be in range [0-100]"
                ));
            }
            if !(0..=100).contains(&low) {
                return invalid(format!(
                    "invalid LowInodesThresholdPercent {low}, must be in range [0-100]"
                ));
            }
            if low > high {
                return invalid(format!(
                    "LowInodesThresholdPercent {low} can not be higher than HighInodesThresholdPercent {high}"
                ));
            }
            if low == high {
                return invalid(format!(
                    "invalid configuration: imageGCLowInodesThresholdPercent {low} must be less than imageGCHighInodesThresholdPercent {high}"
                ));
            }
        }
        if let Some(ByteBudget { high, low }) = self.bytes {
            if high == 0 {
                return invalid("invalid HighBytes 0, must be positive".to_owned());
            }
            if low > high {
                return invalid(format!(
                    "LowBytes {low} can not be higher than HighBytes {high}"
                ));
            }
            if low == high {
                return invalid(format!(
                    "invalid configuration: imageGCLowBytes {low} must be less than imageGCHighBytes {high}"
                ));
            }
        }
        Ok(())
    }

    /// High = 100 with MaxAge off (and neither an inode threshold nor a byte budget set):
    /// the kubelet's way of turning image GC off.
    pub fn disabled(&self) -> bool {
        self.space_pass_off() && self.inodes.is_none() && self.bytes.is_none()
    }

    /// Whether the kubelet's byte-percentage pass is off: only where the kubelet turns its
    /// image GC off, HighThresholdPercent 100 **and** MaxAge 0 (kubelet master
    /// pkg/kubelet/kubelet.go, StartGarbageCollection: it returns before starting the image
    /// GC loop only then). With MaxAge set the kubelet runs GarbageCollect whole, and its
    /// space pass frees at `usagePercent >= HighThresholdPercent`
    /// (pkg/kubelet/images/image_gc_manager.go), i.e. on a 100 % full image filesystem; so
    /// does imagekeeper. The inode and budget rules run whatever this says (see
    /// [`GcPolicy::disabled`]; docs/src/operators/filesystems.md, "HighThresholdPercent 100").
    pub fn space_pass_off(&self) -> bool {
        self.high_threshold_percent == 100
            && (self.max_age.is_zero()
                || super::fault_hooks::fault_hooks().space_pass_off_at_high_100())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (high, low, min age, max age, the kubelet's message or none)
    type Case = (i64, i64, Duration, Duration, Option<&'static str>);

    /// The thresholds' cases: out of range, and low not under high.
    fn threshold_cases() -> Vec<Case> {
        let secs = Duration::from_secs;
        vec![
            (100, 0, secs(0), secs(0), None),
            (
                101,
                80,
                secs(0),
                secs(0),
                Some(
                    "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive",
                ),
            ),
            (
                -1,
                0,
                secs(0),
                secs(0),
                Some(
                    "[invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) -1 must be between 0 and 100, inclusive, invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 0 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) -1]",
                ),
            ),
            (
                90,
                101,
                secs(0),
                secs(0),
                Some(
                    "[invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 101 must be between 0 and 100, inclusive, invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 101 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 90]",
                ),
            ),
            (
                90,
                -5,
                secs(0),
                secs(0),
                Some(
                    "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) -5 must be between 0 and 100, inclusive",
                ),
            ),
            (
                80,
                85,
                secs(0),
                secs(0),
                Some(
                    "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 85 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80",
                ),
            ),
        ]
    }

    /// Equal thresholds, and the ages: max age (when set) over min age.
    fn equal_threshold_and_age_cases() -> Vec<Case> {
        let secs = Duration::from_secs;
        vec![
            (85, 80, secs(120), secs(0), None),
            (
                85,
                80,
                secs(120),
                secs(60),
                Some(
                    "invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
                ),
            ),
            (
                85,
                80,
                secs(120),
                secs(120),
                Some(
                    "invalid configuration: imageMaximumGCAge 2m0s must be greater than imageMinimumGCAge 2m0s",
                ),
            ),
            (85, 80, secs(120), secs(121), None),
            (
                80,
                80,
                secs(0),
                secs(0),
                Some(
                    "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 80 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80",
                ),
            ),
            (
                100,
                100,
                secs(0),
                secs(0),
                Some(
                    "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 100 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 100",
                ),
            ),
        ]
    }

    #[test]
    fn validation_uses_kubelets_messages() {
        for (high, low, min_age, max_age, want) in threshold_cases()
            .into_iter()
            .chain(equal_threshold_and_age_cases())
        {
            let policy = GcPolicy {
                high_threshold_percent: high,
                low_threshold_percent: low,
                min_age,
                max_age,
                ..GcPolicy::default()
            };
            let got = policy.validate().err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), want, "{policy:?}");
        }
    }

    /// Every case of the kubelet's TestValidateImageGCPolicy (kubelet master
    /// pkg/kubelet/images/image_gc_manager_test.go), with its expected error: the policy
    /// not named in a case is the zero value there (MinAge and MaxAge 0).
    #[test]
    fn kubelet_test_validate_image_gc_policy() {
        let cases: [(&str, i64, i64, Option<&str>); 6] = [
            (
                "Test for LowThresholdPercent < HighThresholdPercent",
                2,
                1,
                None,
            ),
            (
                "Test for HighThresholdPercent < 0,",
                -1,
                0,
                Some(
                    "[invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) -1 must be between 0 and 100, inclusive, invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 0 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) -1]",
                ),
            ),
            (
                "Test for HighThresholdPercent > 100",
                101,
                0,
                Some(
                    "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive",
                ),
            ),
            (
                "Test for LowThresholdPercent < 0",
                0,
                -1,
                Some(
                    "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) -1 must be between 0 and 100, inclusive",
                ),
            ),
            (
                "Test for LowThresholdPercent > 100",
                0,
                101,
                Some(
                    "[invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 101 must be between 0 and 100, inclusive, invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 101 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 0]",
                ),
            ),
            (
                "Test for LowThresholdPercent > HighThresholdPercent",
                1,
                2,
                Some(
                    "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 2 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 1",
                ),
            ),
        ];
        for (name, high, low, want) in cases {
            let policy = GcPolicy {
                high_threshold_percent: high,
                low_threshold_percent: low,
                min_age: Duration::ZERO,
                max_age: Duration::ZERO,
                inodes: None,
                bytes: None,
            };
            let got = policy.validate().err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), want, "{name}");
        }
    }

    /// The inode thresholds and the byte budget are refused as the byte thresholds are, with
    /// their own names.
    #[test]
    fn inode_thresholds_and_byte_budgets_are_validated_like_the_byte_thresholds() {
        let inodes = |high, low| GcPolicy {
            inodes: Some(InodeThresholds { high, low }),
            ..GcPolicy::default()
        };
        let bytes = |high, low| GcPolicy {
            bytes: Some(ByteBudget { high, low }),
            ..GcPolicy::default()
        };
        let cases: Vec<(GcPolicy, Option<&str>)> = vec![
            (inodes(90, 70), None),
            (inodes(100, 0), None),
            (
                inodes(101, 70),
                Some("invalid HighInodesThresholdPercent 101, must be in range [0-100]"),
            ),
            (
                inodes(90, -1),
                Some("invalid LowInodesThresholdPercent -1, must be in range [0-100]"),
            ),
            (
                inodes(70, 90),
                Some(
                    "LowInodesThresholdPercent 90 can not be higher than HighInodesThresholdPercent 70",
                ),
            ),
            (
                inodes(80, 80),
                Some(
                    "invalid configuration: imageGCLowInodesThresholdPercent 80 must be less than imageGCHighInodesThresholdPercent 80",
                ),
            ),
            (bytes(500, 400), None),
            (bytes(500, 0), None),
            (bytes(0, 0), Some("invalid HighBytes 0, must be positive")),
            (
                bytes(400, 500),
                Some("LowBytes 500 can not be higher than HighBytes 400"),
            ),
            (
                bytes(500, 500),
                Some(
                    "invalid configuration: imageGCLowBytes 500 must be less than imageGCHighBytes 500",
                ),
            ),
        ];
        for (policy, want) in cases {
            let got = policy.validate().err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), want, "{policy:?}");
        }
    }

    #[test]
    fn an_inode_threshold_or_a_budget_keeps_gc_on_at_high_100() {
        let off = GcPolicy {
            high_threshold_percent: 100,
            low_threshold_percent: 80,
            ..GcPolicy::default()
        };
        assert!(off.disabled());
        let inodes = GcPolicy {
            inodes: Some(InodeThresholds { high: 90, low: 80 }),
            ..off
        };
        assert!(!inodes.disabled() && inodes.space_pass_off());
        let bytes = GcPolicy {
            bytes: Some(ByteBudget { high: 9, low: 8 }),
            ..off
        };
        assert!(!bytes.disabled() && bytes.space_pass_off());
    }

    /// The kubelet stubs image GC out only at high 100 with MaxAge 0; with MaxAge set its
    /// GarbageCollect runs whole, byte pass included (pkg/kubelet/kubelet.go,
    /// StartGarbageCollection).
    #[test]
    fn high_100_turns_the_space_pass_off_only_with_max_age_0() {
        let high_100 = GcPolicy {
            high_threshold_percent: 100,
            low_threshold_percent: 80,
            ..GcPolicy::default()
        };
        assert!(high_100.space_pass_off());
        let with_max_age = GcPolicy {
            max_age: Duration::from_secs(7 * 24 * 3600),
            ..high_100
        };
        assert!(!with_max_age.space_pass_off() && !with_max_age.disabled());
        let with_budget_and_max_age = GcPolicy {
            bytes: Some(ByteBudget { high: 9, low: 8 }),
            ..with_max_age
        };
        assert!(!with_budget_and_max_age.space_pass_off());
        assert!(!GcPolicy::default().space_pass_off());
    }

    #[test]
    fn high_100_without_max_age_disables_gc() {
        let policy = GcPolicy {
            high_threshold_percent: 100,
            low_threshold_percent: 80,
            ..GcPolicy::default()
        };
        assert!(policy.disabled());
        assert!(
            !GcPolicy {
                max_age: Duration::from_secs(600),
                ..policy
            }
            .disabled()
        );
        assert!(!GcPolicy::default().disabled());
    }
}
