//! What each of a cycle's rules needs at the cycle's reading, which one the byte walk frees
//! for, and how the cycle ends once the walk is done. The percentage rule is the kubelet's
//! GarbageCollect (pkg/kubelet/images/image_gc_manager.go: it checks capacity before its
//! percentage, its only rule); the byte budget and the inode rule are imagekeeper's (issue 28).
//!
//! Invariants: a disabled policy needs nothing; capacity 0 fails the percentage rule alone,
//! with the kubelet's InvalidDiskCapacity, while the budget and inode rules still run, and the
//! cycle then ends with that error; one walk frees the larger byte need under that rule's name
//! (the percentage rule's on a tie); a byte shortfall is reported before an inode shortfall,
//! and both before the capacity error.

use crate::model::{FsUsage, ImageFsStats, RemovalReason};

use crate::gc::space::{BudgetNeed, FsSpace, InodeNeed, SpaceNeed};
use crate::gc::{GcError, GcPolicy};

/// The byte-percentage rule at the cycle's reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpaceRule {
    /// Image GC is off (HighThresholdPercent 100 and MaxAge 0, no other rule set).
    Disabled,
    /// HighThresholdPercent 100 and MaxAge 0 with an inode threshold or a byte budget set:
    /// this rule is off, the others run ([`GcPolicy::space_pass_off`]).
    Off,
    /// The filesystem was not read (explain without capacity and available).
    NotRead,
    /// Capacity 0: the kubelet's InvalidDiskCapacity.
    InvalidCapacity,
    /// The rule's need (`amount_to_free` is `None` below the high threshold).
    Need(SpaceNeed),
}

/// The rule a byte walk frees for, with its need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteRule {
    /// The percentage rule.
    Space(SpaceNeed),
    /// The byte budget.
    Budget(BudgetNeed),
}

/// What one byte walk frees: the amount and the rule it frees for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteGoal {
    /// Bytes to free; may be 0 or negative (the walk still removes its first eligible image).
    pub amount: i64,
    /// The rule whose need this is.
    pub rule: ByteRule,
}

impl ByteGoal {
    /// The reason the walk's byte removals carry.
    pub fn reason(&self) -> RemovalReason {
        match self.rule {
            ByteRule::Space(_) => RemovalReason::Space,
            ByteRule::Budget(_) => RemovalReason::Budget,
        }
    }

    /// The filesystem (or budget) the removals' journal entries record.
    pub fn fs_usage(&self) -> FsUsage {
        match self.rule {
            ByteRule::Space(need) => need.fs_usage(),
            ByteRule::Budget(need) => need.fs_usage(),
        }
    }

    /// The rule's failure when the walk freed less than the amount.
    pub fn shortfall(&self, freed: i64) -> Option<GcError> {
        if freed >= self.amount {
            return None;
        }
        Some(match self.rule {
            ByteRule::Budget(b) => GcError::InsufficientBudget {
                total: b.total,
                high: b.high,
                low: b.low,
                freed,
            },
            ByteRule::Space(need) => GcError::InsufficientSpace {
                usage_percent: need.usage_percent,
                capacity: need.capacity,
                freed,
            },
        })
    }
}

/// What the percentage, budget and inode rules need after the MaxAge pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CycleNeeds {
    /// The percentage rule.
    pub space: SpaceRule,
    /// The byte budget, when one is set.
    pub budget: Option<BudgetNeed>,
    /// The inode rule at the reading, when set and the filesystem counts inodes (whether it
    /// runs or not).
    pub inodes: Option<InodeNeed>,
}

impl CycleNeeds {
    /// The needs under `policy`: `fs` is the image filesystem's bytes after the MaxAge pass
    /// (`None`: not read), `images_total` the listed images' bytes less what MaxAge freed,
    /// `image_fs` the reading the inode rule judges.
    pub fn plan(
        policy: &GcPolicy,
        fs: Option<FsSpace>,
        images_total: u64,
        image_fs: Option<&ImageFsStats>,
    ) -> CycleNeeds {
        if policy.disabled() {
            return CycleNeeds {
                space: SpaceRule::Disabled,
                budget: None,
                inodes: None,
            };
        }
        let space = if policy.space_pass_off() {
            SpaceRule::Off
        } else {
            match fs.map(|fs| SpaceNeed::compute(fs.capacity, fs.available, policy)) {
                None => SpaceRule::NotRead,
                Some(Ok(need)) => SpaceRule::Need(need),
                Some(Err(_)) => SpaceRule::InvalidCapacity,
            }
        };
        CycleNeeds {
            space,
            budget: BudgetNeed::compute(images_total, policy.bytes),
            inodes: image_fs.and_then(|fs| InodeNeed::compute(fs, policy.inodes)),
        }
    }

    /// The inode rule when it runs (usage at or above its high threshold).
    pub fn inode_goal(&self) -> Option<InodeNeed> {
        self.inodes.filter(|n| n.runs)
    }

    /// The percentage rule's need when it runs.
    pub fn space_need(&self) -> Option<SpaceNeed> {
        match self.space {
            SpaceRule::Need(need) if need.amount_to_free.is_some() => Some(need),
            _ => None,
        }
    }

    /// What the byte walk frees: the larger of the percentage rule's and the budget's
    /// amounts, under that rule (the percentage rule's on a tie); `None` when neither runs.
    pub fn byte_goal(&self) -> Option<ByteGoal> {
        let space = self.space_need().and_then(|need| {
            need.amount_to_free.map(|amount| ByteGoal {
                amount,
                rule: ByteRule::Space(need),
            })
        });
        let budget = self.budget.and_then(|need| {
            need.amount_to_free.map(|amount| ByteGoal {
                amount,
                rule: ByteRule::Budget(need),
            })
        });
        match (space, budget) {
            (Some(s), Some(b)) if b.amount > s.amount => Some(b),
            (Some(s), _) => Some(s),
            (None, b) => b,
        }
    }

    /// How the cycle ends once its walk freed `freed` bytes and read the inodes last at
    /// `inodes_after`: the byte rule's shortfall, else the inode rule's (its use still above
    /// the low inode threshold), else the capacity error, else success.
    pub fn result(&self, freed: i64, inodes_after: Option<InodeNeed>) -> Result<(), GcError> {
        if let Some(err) = self.byte_goal().and_then(|goal| goal.shortfall(freed)) {
            return Err(err);
        }
        if let (Some(before), Some(after)) = (self.inode_goal(), inodes_after)
            && !after.met()
        {
            return Err(GcError::InsufficientInodes {
                usage_percent: after.usage_percent,
                inodes: after.inodes,
                freed: before.used().saturating_sub(after.used()),
            });
        }
        match self.space {
            SpaceRule::InvalidCapacity => Err(GcError::InvalidCapacity),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::ByteBudget;

    fn policy(high: i64, low: i64, bytes: Option<(u64, u64)>) -> GcPolicy {
        GcPolicy {
            high_threshold_percent: high,
            low_threshold_percent: low,
            bytes: bytes.map(|(high, low)| ByteBudget { high, low }),
            ..GcPolicy::default()
        }
    }

    /// (policy, capacity and available, images' total) → the goal's amount and reason, and
    /// the cycle's end when the walk frees nothing.
    #[test]
    fn the_byte_walk_frees_the_larger_need_under_its_rule_and_capacity_0_fails_last() {
        type Case = (
            GcPolicy,
            Option<(u64, u64)>,
            u64,
            Option<(i64, RemovalReason)>,
            &'static str,
        );
        let cases: [Case; 6] = [
            // 90 % used: down to 80 % is 100 bytes.
            (
                policy(85, 80, None),
                Some((1000, 100)),
                0,
                Some((100, RemovalReason::Space)),
                "InsufficientSpace",
            ),
            (policy(85, 80, None), Some((1000, 500)), 0, None, "ok"),
            // The budget's need (600) is larger than the space need (100).
            (
                policy(85, 80, Some((500, 400))),
                Some((1000, 100)),
                1000,
                Some((600, RemovalReason::Budget)),
                "InsufficientBudget",
            ),
            // A tie goes to the percentage rule: the budget (450, down to 400) needs 100 of
            // 500 bytes, as the percentage rule does.
            (
                policy(85, 80, Some((450, 400))),
                Some((1000, 100)),
                500,
                Some((100, RemovalReason::Space)),
                "InsufficientSpace",
            ),
            // Capacity 0 fails the percentage rule alone: the budget still walks, and its
            // shortfall is reported first.
            (
                policy(85, 80, Some((500, 400))),
                Some((0, 0)),
                1000,
                Some((600, RemovalReason::Budget)),
                "InsufficientBudget",
            ),
            (
                policy(85, 80, None),
                Some((0, 0)),
                1000,
                None,
                "InvalidCapacity",
            ),
        ];
        for (policy, fs, total, want_goal, want_end) in cases {
            let fs = fs.map(|(capacity, available)| FsSpace {
                capacity,
                available,
            });
            let needs = CycleNeeds::plan(&policy, fs, total, None);
            let goal = needs.byte_goal().map(|g| (g.amount, g.reason()));
            assert_eq!(goal, want_goal, "{policy:?} {fs:?} {total}");
            let end = match needs.result(0, None) {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("{e:?}"),
            };
            assert!(
                end.starts_with(want_end),
                "{end} for {policy:?} {fs:?} {total}"
            );
            // Freeing the amount ends well, but for capacity 0, whose error comes last.
            if let Some(goal) = needs.byte_goal() {
                let end = needs.result(goal.amount, None);
                match fs {
                    Some(FsSpace { capacity: 0, .. }) => {
                        assert!(matches!(end, Err(GcError::InvalidCapacity)), "{end:?}")
                    }
                    _ => assert!(end.is_ok(), "{end:?}"),
                }
            }
        }
    }
}
