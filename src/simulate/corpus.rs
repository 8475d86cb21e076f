//! Seeded workload families for `scripts/quality` (issue 26's corpus): a CI node, an AI node
//! and a web node, each with or without agent restarts every few hours; and issue 39's
//! families, where history matters differently: periodic big images, bursty CI with a long
//! tail of one-offs, a drifting mix, a node restarted often. Pure: the same family, seed and
//! length give the same workload, byte for byte (a splitmix64 generator of its own, seeded
//! with the seed and the family, no dependency, no clock).

use std::time::Duration;

use crate::gc::GcPolicy;
use crate::workload::{Workload, WorkloadLine, WorkloadNode, WorkloadOp};

const GB: u64 = 1_000_000_000;
const MB: u64 = 1_000_000;
const HOUR: f64 = 3600.0;
const DAY: f64 = 86_400.0;

/// A workload family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Family {
    /// A hot set of build images, and bursts of one-off large images (a scan) that flush
    /// recency.
    Ci,
    /// A few 10-30 GB images used in daily cycles beside many small sidecars, and new model
    /// versions now and then.
    Ai,
    /// Zipf popularity over a few hundred images, with rolling version upgrades.
    Web,
    /// Issue 39: big images each used at its own hour every day beside a few small services
    /// (a cyclic pattern: the least recently used big image is the one needed next).
    Periodic,
    /// Issue 39: bursty CI (pipelines in working hours, few at night) over a hot set of tools,
    /// with a long tail of one-off images (each pull request's own build).
    BurstyCi,
    /// Issue 39: a mix that drifts: each day a new window of images is hot, yesterday's go
    /// cold (a few come back now and then).
    Drift,
    /// Issue 39: a node restarted often (every 20 to 60 minutes) under a mixed workload: a
    /// Zipf set, two nightly jobs, one-off images.
    Restarted,
}

impl Family {
    /// The families `scripts/quality` runs: issue 26's three, then issue 39's four.
    pub const ALL: [Family; 7] = [
        Family::Ci,
        Family::Ai,
        Family::Web,
        Family::Periodic,
        Family::BurstyCi,
        Family::Drift,
        Family::Restarted,
    ];

    /// The family's name (`quality --family NAME`, the report's rows, `--write`'s file names).
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Ci => "ci",
            Family::Ai => "ai",
            Family::Web => "web",
            Family::Periodic => "periodic",
            Family::BurstyCi => "bursty-ci",
            Family::Drift => "drift",
            Family::Restarted => "restarted",
        }
    }

    /// Whether `scripts/quality` also runs the family with agent restarts every 2 to 5 hours
    /// (`+restarts`): issue 26's families; `restarted` restarts on its own.
    pub fn with_restart_variant(self) -> bool {
        matches!(self, Family::Ci | Family::Ai | Family::Web)
    }
}

/// splitmix64: small, seeded, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// An exponential gap with this mean (Poisson arrivals).
    fn gap(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// Zipf(s) over n ranks: the cumulative weights, to draw from.
fn zipf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|k| {
            acc += 1.0 / (k as f64).powf(s);
            acc
        })
        .collect();
    for c in &mut cdf {
        *c /= acc;
    }
    cdf
}

fn draw(cdf: &[f64], rng: &mut Rng) -> usize {
    let u = rng.unit();
    cdf.partition_point(|c| *c < u).min(cdf.len() - 1)
}

/// Rounds to milliseconds, so the written workload reads back the same.
fn ms(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}

/// The workload of `family` over `days`, seeded; with `restarts`, the agent restarts every
/// 2 to 5 hours.
pub fn generate(family: Family, seed: u64, days: f64, restarts: bool) -> Workload {
    let mut rng = Rng(seed ^ (family as u64).wrapping_mul(0x1000_0000_01B3));
    let end = days * DAY;
    let mut events: Vec<(f64, WorkloadOp)> = Vec::new();
    let run = |image: String, size: u64, for_s: f64| WorkloadOp::Run {
        image,
        size,
        for_s: ms(for_s),
    };
    let node = match family {
        Family::Ci => {
            // 30 build images of 0.5-3 GB, a job every 90 s on average drawn by Zipf(0.9);
            // every 4-8 hours a scan pulls 12-24 one-off images of 2-6 GB within 30 minutes.
            let hot: Vec<u64> = (0..30)
                .map(|_| (rng.range(0.5, 3.0) * GB as f64) as u64)
                .collect();
            let cdf = zipf(hot.len(), 0.9);
            let mut t = 0.0;
            while t < end {
                t += rng.gap(90.0);
                let i = draw(&cdf, &mut rng);
                events.push((
                    t,
                    run(format!("ci/build-{i}:1"), hot[i], rng.range(300.0, 900.0)),
                ));
            }
            let (mut t, mut scan) = (rng.range(2.0, 6.0) * HOUR, 0);
            while t < end {
                for k in 0..(12 + rng.below(13)) {
                    let at = t + rng.range(0.0, 1800.0);
                    let size = (rng.range(2.0, 6.0) * GB as f64) as u64;
                    events.push((
                        at,
                        run(
                            format!("scan/target-{scan}-{k}:1"),
                            size,
                            rng.range(60.0, 300.0),
                        ),
                    ));
                }
                scan += 1;
                t += rng.range(4.0, 8.0) * HOUR;
            }
            node(100 * GB, 20 * GB, 100 * MB)
        }
        Family::Ai => {
            // 6 models of 10-30 GB, each run once a day at its own hour for 1-4 hours, a new
            // version of one every 3 days; 150 sidecars of 50-500 MB, one every 60 s by
            // Zipf(1.0), and an evaluation image of 8-15 GB used once every 12 hours.
            let models: Vec<(u64, f64)> = (0..6)
                .map(|_| {
                    (
                        (rng.range(10.0, 30.0) * GB as f64) as u64,
                        rng.range(0.0, 20.0) * HOUR,
                    )
                })
                .collect();
            let mut version = [1u32; 6];
            let mut day = 0.0;
            while day < end {
                if (day / DAY) as u64 % 3 == 2 {
                    let m = rng.below(models.len());
                    version[m] += 1;
                }
                for (m, (size, hour)) in models.iter().enumerate() {
                    let at = day + hour + rng.range(0.0, HOUR);
                    if at < end {
                        events.push((
                            at,
                            run(
                                format!("ai/model-{m}:{}", version[m]),
                                *size,
                                rng.range(1.0, 4.0) * HOUR,
                            ),
                        ));
                    }
                }
                day += DAY;
            }
            let sidecars: Vec<u64> = (0..150)
                .map(|_| (rng.range(50.0, 500.0) * MB as f64) as u64)
                .collect();
            let cdf = zipf(sidecars.len(), 1.0);
            let mut t = 0.0;
            while t < end {
                t += rng.gap(60.0);
                let i = draw(&cdf, &mut rng);
                events.push((
                    t,
                    run(
                        format!("ai/sidecar-{i}:1"),
                        sidecars[i],
                        rng.range(120.0, 1800.0),
                    ),
                ));
            }
            let (mut t, mut k) = (rng.range(0.0, 12.0) * HOUR, 0);
            while t < end {
                events.push((
                    t,
                    run(
                        format!("ai/eval-{k}:1"),
                        (rng.range(8.0, 15.0) * GB as f64) as u64,
                        rng.range(600.0, 3600.0),
                    ),
                ));
                k += 1;
                t += 12.0 * HOUR;
            }
            node(150 * GB, 20 * GB, 200 * MB)
        }
        Family::Web => {
            // 300 services of 0.2-2 GB by Zipf(1.0), a pod every 30 s for 10-60 minutes; every
            // hour 5 services roll to a new version (the old one is never used again).
            let sizes: Vec<u64> = (0..300)
                .map(|_| (rng.range(0.2, 2.0) * GB as f64) as u64)
                .collect();
            let mut version = vec![1u32; sizes.len()];
            let cdf = zipf(sizes.len(), 1.0);
            let (mut t, mut next_roll) = (0.0, HOUR);
            while t < end {
                t += rng.gap(30.0);
                while next_roll <= t {
                    for _ in 0..5 {
                        let i = draw(&cdf, &mut rng);
                        version[i] += 1;
                    }
                    next_roll += HOUR;
                }
                let i = draw(&cdf, &mut rng);
                events.push((
                    t,
                    run(
                        format!("web/svc-{i}:{}", version[i]),
                        sizes[i],
                        rng.range(600.0, 3600.0),
                    ),
                ));
            }
            node(120 * GB, 20 * GB, 100 * MB)
        }
        Family::Periodic => {
            // 8 images of 8-20 GB, image i used every day from 03:00 * i (+ up to 30 minutes)
            // for 1-2 hours; 20 services of 100-300 MB, one every 2 minutes by Zipf(1.0),
            // 5-20 minutes each. 100 GB (20 GB other use): about 5 of the 8 fit.
            let big: Vec<u64> = (0..8)
                .map(|_| (rng.range(8.0, 20.0) * GB as f64) as u64)
                .collect();
            let mut day = 0.0;
            while day < end {
                for (i, size) in big.iter().enumerate() {
                    let at = day + 3.0 * HOUR * i as f64 + rng.range(0.0, 0.5 * HOUR);
                    events.push((
                        at,
                        run(
                            format!("nightly/job-{i}:1"),
                            *size,
                            rng.range(1.0, 2.0) * HOUR,
                        ),
                    ));
                }
                day += DAY;
            }
            small_services(&mut rng, &mut events, end, "svc", 20, 120.0);
            node(100 * GB, 20 * GB, 200 * MB)
        }
        Family::BurstyCi => {
            // 30 tools of 0.5-2.5 GB; a pipeline every 4 minutes on average from 08:00 to
            // 18:00 (the workload starts at 08:00), every 40 minutes at night, each running 1-3
            // tools by Zipf(1.0) for 2-10 minutes; 40 % of pipelines also build their own
            // one-off image of 1-4 GB. 60 GB (10 GB other use): the tools alone nearly fill it.
            let tools: Vec<u64> = (0..30)
                .map(|_| (rng.range(0.5, 2.5) * GB as f64) as u64)
                .collect();
            let cdf = zipf(tools.len(), 1.0);
            let (mut t, mut pr) = (0.0, 0u64);
            while t < end {
                // The workload starts at 08:00.
                let hour = ((t + 8.0 * HOUR) % DAY) / HOUR;
                t += rng.gap(if (8.0..18.0).contains(&hour) {
                    240.0
                } else {
                    2400.0
                });
                for k in 0..1 + rng.below(3) {
                    let i = draw(&cdf, &mut rng);
                    events.push((
                        t + 5.0 * k as f64,
                        run(format!("ci/tool-{i}:1"), tools[i], rng.range(120.0, 600.0)),
                    ));
                }
                if rng.unit() < 0.4 {
                    events.push((
                        t + 20.0,
                        run(
                            format!("ci/pr-{pr}:1"),
                            (rng.range(1.0, 4.0) * GB as f64) as u64,
                            rng.range(120.0, 600.0),
                        ),
                    ));
                    pr += 1;
                }
            }
            node(60 * GB, 10 * GB, 100 * MB)
        }
        Family::Drift => {
            // 240 images of 0.5-3 GB; on day d the hot window is images 20 d .. 20 d + 30,
            // one run every 60 s by Zipf(0.8) within it; 10 % of runs go to any image seen
            // before (an old one coming back). 60 GB (10 GB other use).
            let sizes: Vec<u64> = (0..240)
                .map(|_| (rng.range(0.5, 3.0) * GB as f64) as u64)
                .collect();
            let cdf = zipf(30, 0.8);
            let mut t = 0.0;
            while t < end {
                t += rng.gap(60.0);
                let day = (t / DAY) as usize;
                let first = (20 * day) % (sizes.len() - 30);
                let i = if rng.unit() < 0.1 && first > 0 {
                    rng.below(first)
                } else {
                    first + draw(&cdf, &mut rng)
                };
                events.push((
                    t,
                    run(
                        format!("drift/app-{i}:1"),
                        sizes[i],
                        rng.range(300.0, 1800.0),
                    ),
                ));
            }
            node(60 * GB, 10 * GB, 100 * MB)
        }
        Family::Restarted => {
            // 60 services of 0.3-2 GB by Zipf(1.0), one every 90 s for 5-30 minutes; two
            // nightly jobs of 10 GB at 01:00 and 04:00; a one-off image of 1-3 GB every
            // 20 minutes; the agent restarts every 20 to 60 minutes.
            let sizes: Vec<u64> = (0..60)
                .map(|_| (rng.range(0.3, 2.0) * GB as f64) as u64)
                .collect();
            let cdf = zipf(sizes.len(), 1.0);
            let mut t = 0.0;
            while t < end {
                t += rng.gap(90.0);
                let i = draw(&cdf, &mut rng);
                events.push((
                    t,
                    run(
                        format!("mixed/svc-{i}:1"),
                        sizes[i],
                        rng.range(300.0, 1800.0),
                    ),
                ));
            }
            let mut day = 0.0;
            while day < end {
                for (j, hour) in [1.0, 4.0].iter().enumerate() {
                    events.push((
                        day + hour * HOUR + rng.range(0.0, 600.0),
                        run(format!("mixed/nightly-{j}:1"), 10 * GB, HOUR),
                    ));
                }
                day += DAY;
            }
            let (mut t, mut k) = (0.0, 0u64);
            while t < end {
                t += rng.range(600.0, 1800.0);
                events.push((
                    t,
                    run(
                        format!("mixed/once-{k}:1"),
                        (rng.range(1.0, 3.0) * GB as f64) as u64,
                        rng.range(60.0, 600.0),
                    ),
                ));
                k += 1;
            }
            let mut t = rng.range(1200.0, 3600.0);
            while t < end {
                events.push((t, WorkloadOp::Restart));
                t += rng.range(1200.0, 3600.0);
            }
            node(70 * GB, 10 * GB, 100 * MB)
        }
    };
    if restarts {
        let mut t = rng.range(2.0, 5.0) * HOUR;
        while t < end {
            events.push((t, WorkloadOp::Restart));
            t += rng.range(2.0, 5.0) * HOUR;
        }
    }
    let mut events: Vec<(f64, WorkloadOp)> = events
        .into_iter()
        .filter(|(t, _)| *t < end)
        .map(|(t, op)| (ms(t), op))
        .collect();
    // Stable: at one instant the order of generation stays.
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    Workload {
        node,
        ops: events
            .into_iter()
            .map(|(at, op)| WorkloadLine { line: 0, at, op })
            .collect(),
    }
}

/// `n` small services of 100-300 MB, one run every `mean_gap` seconds on average by
/// Zipf(1.0), 5-20 minutes each.
fn small_services(
    rng: &mut Rng,
    events: &mut Vec<(f64, WorkloadOp)>,
    end: f64,
    prefix: &str,
    n: usize,
    mean_gap: f64,
) {
    let sizes: Vec<u64> = (0..n)
        .map(|_| (rng.range(100.0, 300.0) * MB as f64) as u64)
        .collect();
    let cdf = zipf(n, 1.0);
    let mut t = 0.0;
    while t < end {
        t += rng.gap(mean_gap);
        let i = draw(&cdf, rng);
        events.push((
            t,
            WorkloadOp::Run {
                image: format!("{prefix}/small-{i}:1"),
                size: sizes[i],
                for_s: ms(rng.range(300.0, 1200.0)),
            },
        ));
    }
}

fn node(capacity: u64, other_used: u64, pull_bytes_per_s: u64) -> WorkloadNode {
    WorkloadNode {
        at: 0.0,
        capacity,
        other_used,
        pull_bytes_per_s,
        policy: GcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
            inodes: None,
            bytes: None,
        },
        gc_period_s: 300.0,
        start_unix_s: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::{SimPolicy, simulate};
    use crate::workload::parse_workload;

    /// A smoke-sized corpus: every family is the same for the same seed, writes a workload
    /// that parses back to itself, and runs under every policy with the same first pulls.
    #[tokio::test]
    async fn each_family_is_seeded_parses_back_and_runs() {
        for family in Family::ALL {
            let workload = generate(family, 7, 0.04, true);
            assert_eq!(workload, generate(family, 7, 0.04, true), "{family:?}");
            assert!(
                workload.ops.len() > 10,
                "{family:?}: {}",
                workload.ops.len()
            );
            let text = workload.to_string();
            let again = parse_workload(&text).expect("a generated workload parses");
            assert_eq!(again.to_string(), text, "{family:?}");
            let outcomes = simulate(&workload, &SimPolicy::ALL).await.expect("runs");
            assert_eq!(outcomes.len(), SimPolicy::ALL.len());
            for o in &outcomes {
                assert_eq!(o.first_pulls, outcomes[0].first_pulls, "{family:?} {o:?}");
                assert_eq!(o.repulls, o.pulls - o.first_pulls, "{family:?} {o:?}");
            }
        }
    }

    /// Issue 39: on the periodic family (2.5 days: the rhythm shows from the second day) the
    /// predictive order re-pulls less than the kubelet's, whose least recently used big
    /// image is the one needed next; and the same workload gives the same outcome twice.
    #[tokio::test]
    async fn predictive_learns_the_periodic_family_and_runs_the_same_twice() {
        let workload = generate(Family::Periodic, 1, 2.5, false);
        let policies = [SimPolicy::Kubelet, SimPolicy::Predictive];
        let first = simulate(&workload, &policies).await.expect("runs");
        let again = simulate(&workload, &policies).await.expect("runs");
        assert_eq!(first, again);
        assert!(
            first[1].repulled_bytes < first[0].repulled_bytes,
            "{first:?}"
        );
    }
}
