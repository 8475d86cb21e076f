//! How far a byte walk goes: it removes eligible images in its order until the bytes it freed
//! reach its goal's amount, and it always removes its first eligible image, even when the
//! amount is 0 or negative, as the kubelet's freeSpace does
//! (pkg/kubelet/images/image_gc_manager.go: it checks the amount after each deletion).
//!
//! Invariant: only removals that happened count (the live walk counts confirmed removals;
//! explain assumes every removal succeeds).

/// The progress of one byte walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteWalk {
    amount: Option<i64>,
    freed: i64,
    done: bool,
    /// Removals to make past the amount (the fault hooks' OverFree; 0 otherwise).
    extra: u32,
}

impl ByteWalk {
    /// A walk freeing `amount` bytes; with `None` it frees no bytes (an inode-only walk).
    pub fn new(amount: Option<i64>) -> ByteWalk {
        ByteWalk {
            amount,
            freed: 0,
            done: amount.is_none(),
            extra: 0,
        }
    }

    /// The same walk making `extra` removals past its amount (fault injection only).
    pub fn with_extra_removals(mut self, extra: u32) -> ByteWalk {
        self.extra = extra;
        self
    }

    /// Counts one removal of `size` bytes; returns whether the walk has freed enough.
    pub fn removed(&mut self, size: u64) -> bool {
        self.freed = self
            .freed
            .saturating_add(i64::try_from(size).unwrap_or(i64::MAX));
        if let Some(amount) = self.amount
            && self.freed >= amount
            && !self.done
        {
            if self.extra > 0 {
                self.extra -= 1;
            } else {
                self.done = true;
            }
        }
        self.done
    }

    /// Whether the walk has freed enough (true from the start when it frees no bytes).
    pub fn done(&self) -> bool {
        self.done
    }

    /// The bytes freed so far.
    pub fn freed(&self) -> i64 {
        self.freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (amount, sizes offered) → how many removals until done.
    #[test]
    fn the_walk_stops_at_the_first_removal_reaching_its_amount_and_always_takes_one() {
        let cases: [(Option<i64>, &[u64], usize); 5] = [
            (Some(250), &[100, 100, 100, 100], 3),
            (Some(200), &[100, 100, 100], 2),
            // An amount of 0 or less still removes the first eligible image.
            (Some(0), &[100, 100], 1),
            (Some(-50), &[100, 100], 1),
            // No byte goal: done before any removal.
            (None, &[100], 0),
        ];
        for (amount, sizes, want) in cases {
            let mut walk = ByteWalk::new(amount);
            let mut taken = 0;
            for size in sizes {
                if walk.done() {
                    break;
                }
                taken += 1;
                walk.removed(*size);
            }
            assert_eq!(taken, want, "amount {amount:?}");
        }
        let mut over = ByteWalk::new(Some(100)).with_extra_removals(1);
        assert!(!over.removed(100), "one removal past the amount");
        assert!(over.removed(100));
    }
}
