//! Who writes the fleet's counts: one agent at a time, elected through a coordination.k8s.io
//! `Lease` in the chart's namespace, as client-go's leader election does (the holder renews
//! the Lease; another takes it only once `renewTime + leaseDurationSeconds` has passed by its
//! own clock; the API server's optimistic concurrency on `resourceVersion` lets one of two
//! racing candidates win). [`lease_step`] is the whole rule, a pure function of the Lease as
//! read and `now`; the task that reads and writes the Lease is not built yet.
//!
//! Invariants: a candidate never takes a Lease another holds before it expired by the
//! candidate's clock; a holder renews well before expiry ([`RENEW_AFTER_FRACTION`] of the
//! duration). The task to come must also stop acting as the writer once its last successful
//! renewal is older than the duration, so two writers overlap at most by the clocks' skew (and
//! the counts they write are the same rule over the same objects).

use crate::model::UnixNanos;

/// A holder renews once this fraction of the Lease's duration has passed since its last
/// renewal (client-go's RenewDeadline is 2/3 of LeaseDuration by default; renewing at 1/3
/// leaves two tries before expiry).
pub const RENEW_AFTER_FRACTION: (i64, i64) = (1, 3);

/// The Lease as read: its holder, last renewal and duration (`None`: absent or unset fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `spec.renewTime`.
    pub renewed: Option<UnixNanos>,
    /// `spec.leaseDurationSeconds`.
    pub duration_seconds: Option<i64>,
}

/// What a candidate does with the Lease it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseStep {
    /// Write itself as holder (the Lease is absent, unheld or expired).
    Acquire,
    /// It holds the Lease and is due to renew it.
    Renew,
    /// It holds the Lease, renewed recently: act as the writer, nothing to write.
    Hold,
    /// Another holds an unexpired Lease: do not act as the writer.
    Follow,
}

/// The step of candidate `me` at `now`, given the Lease as read and the duration it would
/// write (`duration_seconds`, used when the Lease carries none).
pub fn lease_step(
    lease: Option<&LeaseView>,
    me: &str,
    now: UnixNanos,
    duration_seconds: i64,
) -> LeaseStep {
    let Some(lease) = lease else {
        return LeaseStep::Acquire;
    };
    let duration = lease.duration_seconds.unwrap_or(duration_seconds).max(1);
    let (Some(holder), Some(renewed)) = (lease.holder.as_deref(), lease.renewed) else {
        return LeaseStep::Acquire;
    };
    if holder.is_empty() {
        return LeaseStep::Acquire;
    }
    let since = now.0.saturating_sub(renewed.0);
    let duration_nanos = duration.saturating_mul(1_000_000_000);
    if holder == me {
        let (num, den) = RENEW_AFTER_FRACTION;
        if since >= duration_nanos / den * num {
            LeaseStep::Renew
        } else {
            LeaseStep::Hold
        }
    } else if since > duration_nanos {
        LeaseStep::Acquire
    } else {
        LeaseStep::Follow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(holder: Option<&str>, renewed_secs: Option<i64>, duration: Option<i64>) -> LeaseView {
        LeaseView {
            holder: holder.map(str::to_owned),
            renewed: renewed_secs.map(UnixNanos::from_secs),
            duration_seconds: duration,
        }
    }

    #[test]
    fn a_candidate_takes_only_an_absent_unheld_or_expired_lease_and_a_holder_renews_at_a_third() {
        let now = UnixNanos::from_secs(1_000);
        // (the Lease, who asks, the step)
        let cases = [
            (None, "node-a", LeaseStep::Acquire),
            (
                Some(view(None, None, Some(15))),
                "node-a",
                LeaseStep::Acquire,
            ),
            (
                Some(view(Some(""), Some(999), Some(15))),
                "node-a",
                LeaseStep::Acquire,
            ),
            (
                Some(view(Some("node-b"), None, Some(15))),
                "node-a",
                LeaseStep::Acquire,
            ),
            // Another's, renewed 15 s ago with a 15-s duration: not yet expired.
            (
                Some(view(Some("node-b"), Some(985), Some(15))),
                "node-a",
                LeaseStep::Follow,
            ),
            (
                Some(view(Some("node-b"), Some(984), Some(15))),
                "node-a",
                LeaseStep::Acquire,
            ),
            // A renewal "in the future" (the holder's clock ahead): followed.
            (
                Some(view(Some("node-b"), Some(1_010), Some(15))),
                "node-a",
                LeaseStep::Follow,
            ),
            // Its own: held until a third of the duration, then renewed, even past expiry.
            (
                Some(view(Some("node-a"), Some(996), Some(15))),
                "node-a",
                LeaseStep::Hold,
            ),
            (
                Some(view(Some("node-a"), Some(995), Some(15))),
                "node-a",
                LeaseStep::Renew,
            ),
            (
                Some(view(Some("node-a"), Some(900), Some(15))),
                "node-a",
                LeaseStep::Renew,
            ),
            // No duration on the Lease: the candidate's own (30 s) applies.
            (
                Some(view(Some("node-b"), Some(975), None)),
                "node-a",
                LeaseStep::Follow,
            ),
            (
                Some(view(Some("node-b"), Some(969), None)),
                "node-a",
                LeaseStep::Acquire,
            ),
        ];
        for (lease, me, step) in cases {
            assert_eq!(
                lease_step(lease.as_ref(), me, now, 30),
                step,
                "{lease:?} asked by {me}"
            );
        }
    }
}
