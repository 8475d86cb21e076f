//! Whether the API server answers, asked on its own (`GET /livez` every [`ProbeTiming::period`]),
//! so that the watches learn it was away without waiting for their connection's read timeout.
//! A watch whose API server stops answering (hung, or a network that drops its packets rather
//! than refusing them) sees nothing at all until its watch request's own end, 290 s on (the
//! client has no read timeout unless the configuration sets one, `client.rs`): its metric and
//! `doctor` said "watching" for five minutes, and its set stayed stale until it ended. With the
//! probe, after [`ProbeTiming::failures_to_away`] unanswered probes every watch is marked
//! failing (the last sets hold), and when the API server answers again every watch lists anew
//! at once ([`ApiReach::changed`]: catching up on what changed while it was away).
//!
//! Invariants: the probe only reads `/livez`, which every client may read (the API server's
//! `system:public-info-viewer`), so it needs no RBAC of its own, and any answer, a refusal
//! too, counts as the API server answering; one probe is in flight at a
//! time, each bounded by [`ProbeTiming::timeout`]; it logs once when the API server goes away
//! and once when it is back.

use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tracing::{info, warn};

/// What the watches read of the probe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// The API server has not answered the last probes: the watches' sets are the last seen.
    pub away: bool,
    /// How many times it came back after being away: each is a relist of every watch.
    pub returns: u64,
}

/// The watches' view of the probe (cheap to clone). Without a probe ([`ApiReach::unprobed`])
/// it never changes, and a watch learns of an absent API server from its own errors alone.
#[derive(Clone, Debug)]
pub struct ApiReach {
    rx: watch::Receiver<Reach>,
}

impl ApiReach {
    /// A view with no probe behind it.
    pub fn unprobed() -> ApiReach {
        let (_, rx) = watch::channel(Reach::default());
        ApiReach { rx }
    }

    /// The state now.
    pub fn now(&self) -> Reach {
        *self.rx.borrow()
    }

    /// Waits for the next change and returns it; never returns when no probe runs (or it
    /// ended).
    pub async fn changed(&mut self) -> Reach {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        *self.rx.borrow_and_update()
    }
}

/// How often and how patiently the probe asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeTiming {
    /// Between two probes.
    pub period: Duration,
    /// The most one probe waits for its answer.
    pub timeout: Duration,
    /// Unanswered probes in a row before the API server is taken to be away.
    pub failures_to_away: u32,
}

impl Default for ProbeTiming {
    /// Every 10 s, 5 s each, away after 2: the watches know within 25 s (the kubelet's node
    /// lease renews every 10 s, so a shorter period would ask more than the node does).
    fn default() -> ProbeTiming {
        ProbeTiming {
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            failures_to_away: 2,
        }
    }
}

/// The probe's decision from one answer (or its absence): the state to publish, if it
/// changed. Pure, so the rule is tested apart from the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeState {
    reach: Reach,
    failures: u32,
}

impl ProbeState {
    /// Takes one probe's outcome; returns the new state when the watches must learn it.
    pub fn step(&mut self, answered: bool, timing: &ProbeTiming) -> Option<Reach> {
        if answered {
            self.failures = 0;
            if self.reach.away {
                self.reach = Reach {
                    away: false,
                    returns: self.reach.returns + 1,
                };
                return Some(self.reach);
            }
            return None;
        }
        self.failures = self.failures.saturating_add(1);
        if !self.reach.away && self.failures >= timing.failures_to_away.max(1) {
            self.reach.away = true;
            return Some(self.reach);
        }
        None
    }
}

/// A probe and the watches' view of it: run [`probe_api_server`] with the first, give the
/// watches clones of the second.
pub fn api_reach() -> (watch::Sender<Reach>, ApiReach) {
    let (tx, rx) = watch::channel(Reach::default());
    (tx, ApiReach { rx })
}

/// Asks `client`'s API server `GET /livez` every `timing.period` until the task is dropped,
/// publishing on `tx` when it goes away and when it is back.
pub async fn probe_api_server(client: Client, tx: watch::Sender<Reach>, timing: ProbeTiming) {
    let mut state = ProbeState::default();
    let mut ticks = tokio::time::interval(timing.period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let answered = livez(&client, timing.timeout).await;
        if let Some(reach) = state.step(answered.is_ok(), &timing) {
            if reach.away {
                warn!(
                    error = answered.err().unwrap_or_default(),
                    "The API server does not answer: the cluster signals keep their last sets"
                );
            } else {
                info!("The API server answers again: the cluster signals list anew");
            }
            tx.send_replace(reach);
        }
    }
}

/// One `GET /livez` within `timeout`: why no answer came, if none did. Any answer of the API
/// server counts, a refusal too (a cluster that keeps `/livez` from this account still
/// answers: its watches' own errors say what they meet).
async fn livez(client: &Client, timeout: Duration) -> Result<(), String> {
    let request = ::http::Request::get("/livez")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(timeout, client.request_text(request)).await {
        Ok(Ok(_)) | Ok(Err(kube::Error::Api(_))) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer to GET /livez within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_server_is_away_after_the_failures_in_a_row_and_back_at_the_first_answer() {
        let timing = ProbeTiming::default();
        let away = |returns| {
            Some(Reach {
                away: true,
                returns,
            })
        };
        let back = |returns| {
            Some(Reach {
                away: false,
                returns,
            })
        };
        // (the probes' outcomes, what each publishes)
        let cases: &[(&[bool], &[Option<Reach>])] = &[
            (&[true, true], &[None, None]),
            // One unanswered probe is not enough; the second in a row is.
            (&[false, true, false], &[None, None, None]),
            (&[false, false, false], &[None, away(0), None]),
            // Back at the first answer, once; away again counts anew.
            (
                &[false, false, true, true, false, false],
                &[None, away(0), back(1), None, None, away(1)],
            ),
            (
                &[false, false, true, false, false, true],
                &[None, away(0), back(1), None, away(1), back(2)],
            ),
        ];
        for (outcomes, want) in cases {
            let mut state = ProbeState::default();
            let got: Vec<_> = outcomes.iter().map(|&a| state.step(a, &timing)).collect();
            assert_eq!(&got, want, "{outcomes:?}");
        }
    }
}
