//! The registry pull throttle: kubelet's `registryPullQPS` / `registryBurst` token bucket
//! (client-go `NewTokenBucketRateLimiter`, golang.org/x/time/rate), checked with `TryAccept`,
//! never waiting.
//!
//! Invariants: the bucket starts full (`burst` tokens), refills at `qps` tokens a second up to
//! `burst`, and takes time as an argument; a clock that goes back refills nothing. Burst 0
//! never accepts. QPS 0 means no throttle at all (kubelet does not wrap the puller).

use crate::model::UnixNanos;

/// A token bucket with time passed in.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<UnixNanos>,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: u32) -> TokenBucket {
        TokenBucket {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: None,
        }
    }

    /// Takes one token at `now` if there is one.
    pub fn try_accept(&mut self, now: UnixNanos) -> bool {
        if let Some(last) = self.last {
            let elapsed = now.since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        }
        if self.last.is_none_or(|l| now > l) {
            self.last = Some(now);
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_is_available_at_once_then_refills_at_qps() {
        let mut b = TokenBucket::new(5.0, 10);
        let t0 = UnixNanos::from_secs(1000);
        assert_eq!((0..10).filter(|_| b.try_accept(t0)).count(), 10);
        assert!(!b.try_accept(t0));
        // 5 QPS: one token every 200 ms.
        assert!(!b.try_accept(UnixNanos(t0.0 + 199_000_000)));
        assert!(b.try_accept(UnixNanos(t0.0 + 200_000_000)));
        assert!(!b.try_accept(UnixNanos(t0.0 + 200_000_000)));
        // A long pause refills only up to burst.
        let later = UnixNanos::from_secs(2000);
        assert_eq!((0..20).filter(|_| b.try_accept(later)).count(), 10);
    }

    #[test]
    fn burst_zero_never_accepts() {
        let mut b = TokenBucket::new(2000.0, 0);
        assert!(!b.try_accept(UnixNanos::from_secs(1)));
        assert!(!b.try_accept(UnixNanos::from_secs(100)));
    }

    #[test]
    fn clock_going_back_refills_nothing() {
        let mut b = TokenBucket::new(1.0, 1);
        assert!(b.try_accept(UnixNanos::from_secs(100)));
        assert!(!b.try_accept(UnixNanos::from_secs(50)));
        assert!(!b.try_accept(UnixNanos::from_secs(100)));
        assert!(b.try_accept(UnixNanos::from_secs(101)));
    }
}
