//! The image GC policy and its validation, with the kubelet's messages.

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
}

impl Default for GcPolicy {
    fn default() -> GcPolicy {
        GcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
        }
    }
}

impl GcPolicy {
    /// Checks the policy as the kubelet does, with its messages.
    pub fn validate(&self) -> Result<(), GcError> {
        let invalid = |message: String| Err(GcError::InvalidPolicy { message });
        if !(0..=100).contains(&self.high_threshold_percent) {
            return invalid(format!(
                "invalid HighThresholdPercent {}, must be in range [0-100]",
                self.high_threshold_percent
            ));
        }
        if !(0..=100).contains(&self.low_threshold_percent) {
            return invalid(format!(
                "invalid LowThresholdPercent {}, must be in range [0-100]",
                self.low_threshold_percent
            ));
        }
        if self.low_threshold_percent > self.high_threshold_percent {
            // NewImageGCManager's check (image_gc_manager.go).
            return invalid(format!(
                "LowThresholdPercent {} can not be higher than HighThresholdPercent {}",
                self.low_threshold_percent, self.high_threshold_percent
            ));
        }
        if self.low_threshold_percent == self.high_threshold_percent {
            // The constructor lets equal thresholds through, but every kubelet refuses them
            // first in ValidateKubeletConfiguration (pkg/kubelet/apis/config/validation),
            // with this message: the space pass would free nothing and run every cycle.
            return invalid(format!(
                "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {}",
                self.low_threshold_percent, self.high_threshold_percent
            ));
        }
        if !self.max_age.is_zero() && self.max_age <= self.min_age {
            return invalid(format!(
                "invalid configuration: imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
                crate::format::go_duration(self.max_age),
                crate::format::go_duration(self.min_age)
            ));
        }
        Ok(())
    }

    /// High = 100 with MaxAge off: the kubelet's way of turning image GC off.
    pub fn disabled(&self) -> bool {
        self.high_threshold_percent == 100 && self.max_age.is_zero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_uses_kubelets_messages() {
        let secs = Duration::from_secs;
        let cases: Vec<(i64, i64, Duration, Duration, Option<&str>)> = vec![
            (85, 80, secs(120), secs(0), None),
            (100, 0, secs(0), secs(0), None),
            (
                101,
                80,
                secs(0),
                secs(0),
                Some("invalid HighThresholdPercent 101, must be in range [0-100]"),
            ),
            (
                -1,
                0,
                secs(0),
                secs(0),
                Some("invalid HighThresholdPercent -1, must be in range [0-100]"),
            ),
            (
                90,
                101,
                secs(0),
                secs(0),
                Some("invalid LowThresholdPercent 101, must be in range [0-100]"),
            ),
            (
                90,
                -5,
                secs(0),
                secs(0),
                Some("invalid LowThresholdPercent -5, must be in range [0-100]"),
            ),
            (
                80,
                85,
                secs(0),
                secs(0),
                Some("LowThresholdPercent 85 can not be higher than HighThresholdPercent 80"),
            ),
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
        ];
        for (high, low, min_age, max_age, want) in cases {
            let policy = GcPolicy {
                high_threshold_percent: high,
                low_threshold_percent: low,
                min_age,
                max_age,
            };
            let got = policy.validate().err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), want, "{policy:?}");
        }
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
