//! `imagekeeper simulate WORKLOAD [--policy P]... [-o json|table]`: what each GC policy costs
//! the workload in bytes pulled again (`imagekeeper::simulate`).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use imagekeeper::format::format_size;
use imagekeeper::operator_file::{self, Follow};
use imagekeeper::simulate::{Outcome, SimOptions, SimPolicy, SimProgress, simulate_reporting};
use imagekeeper::workload::{Workload, WorkloadError, read_workload};

use super::Failure;
use super::output::{Column, TableOptions, write_table};

#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// The workload: JSON lines (a `node` line, then `run`, `restart` and the signal lines
    /// `cronjob`, `bound`, `rollout` sorted by `at`), or `-` for stdin.
    workload: PathBuf,
    /// A policy to run: kubelet, imagekeeper, adaptive, predictive, signals, sieve, s3fifo,
    /// clairvoyant (repeatable; the output keeps the order given) [default: all eight].
    #[arg(long = "policy", value_enum, value_name = "POLICY")]
    policies: Vec<PolicyArg>,
    /// Output format: table (with each policy's re-pulled bytes as a ratio of clairvoyant's)
    /// or json (one object per policy and line).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = SimulateFormat::Table)]
    output: SimulateFormat,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyArg {
    Kubelet,
    Imagekeeper,
    Adaptive,
    Predictive,
    Signals,
    Sieve,
    S3fifo,
    Clairvoyant,
}

impl From<PolicyArg> for SimPolicy {
    fn from(p: PolicyArg) -> SimPolicy {
        match p {
            PolicyArg::Kubelet => SimPolicy::Kubelet,
            PolicyArg::Imagekeeper => SimPolicy::Imagekeeper,
            PolicyArg::Adaptive => SimPolicy::Adaptive,
            PolicyArg::Predictive => SimPolicy::Predictive,
            PolicyArg::Signals => SimPolicy::Signals,
            PolicyArg::Sieve => SimPolicy::Sieve,
            PolicyArg::S3fifo => SimPolicy::S3Fifo,
            PolicyArg::Clairvoyant => SimPolicy::Clairvoyant,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SimulateFormat {
    Table,
    Json,
}

pub fn run(args: SimulateArgs) -> Result<(), Failure> {
    let name = if args.workload.as_os_str() == "-" {
        "<stdin>".to_owned()
    } else {
        args.workload.display().to_string()
    };
    let workload = read(&args.workload).map_err(|e| match e {
        WorkloadError::Io(e) => {
            Failure::usage(anyhow::Error::new(e).context(format!("reading workload {name}")))
        }
        other => Failure::usage(anyhow::Error::new(other).context(format!("workload {name}"))),
    })?;
    let policies: Vec<SimPolicy> = if args.policies.is_empty() {
        SimPolicy::ALL.to_vec()
    } else {
        args.policies.iter().map(|p| SimPolicy::from(*p)).collect()
    };
    let progress = std::sync::Mutex::new(ProgressOnStderr::new());
    // A workload that declares nothing of the cluster: `signals` is `predictive`'s order with
    // no known use (`gc::signals`), so its outcome is `predictive`'s, renamed; it is run once.
    // (`simulate --policy signals` alone runs it; a test compares the two runs.)
    let shared = !workload.declares_signals()
        && policies.contains(&SimPolicy::Predictive)
        && policies.contains(&SimPolicy::Signals);
    let run: Vec<SimPolicy> = policies
        .iter()
        .copied()
        .filter(|p| !(shared && *p == SimPolicy::Signals))
        .collect();
    let mut outcomes = run_policies(&workload, &run, &progress)?;
    if shared {
        outcomes = share_predictive_with_signals(&policies, outcomes);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.output {
        SimulateFormat::Json => {
            for outcome in &outcomes {
                let line = serde_json::to_string(outcome).context("encoding the output")?;
                writeln!(out, "{line}").context("writing the output")?;
            }
        }
        SimulateFormat::Table => {
            write_outcomes(&mut out, &outcomes).context("writing the output")?
        }
    }
    Ok(())
}

/// Runs each of `policies` on a thread of its own, at most as many at once as the machine has
/// cores: the policies share nothing (each has its own scratch database and scripted runtime),
/// so the outcomes are those of running them one after another, returned in the order given
/// (issue 41: 20,000 runs of the five default policies one after another took 41 s). The
/// costliest start first ([`cost_rank`]), so the last to finish is not a long one started
/// late. The first failure, in the policies' order, is the command's.
fn run_policies(
    workload: &Workload,
    policies: &[SimPolicy],
    progress: &std::sync::Mutex<ProgressOnStderr>,
) -> Result<Vec<Outcome>, Failure> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, policies.len().max(1));
    let mut order: Vec<usize> = (0..policies.len()).collect();
    order.sort_by_key(|&i| cost_rank(policies[i]));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<anyhow::Result<Outcome>>>> =
        std::sync::Mutex::new(policies.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let taken = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((i, policy)) = order.get(taken).map(|&i| (i, &policies[i])) else {
                        break;
                    };
                    let result = run_policy(workload, *policy, (i, policies.len()), progress);
                    let failed = result.is_err();
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(result);
                    if failed {
                        // The later policies are not run: their outcomes would not be printed.
                        next.fetch_add(policies.len(), std::sync::atomic::Ordering::Relaxed);
                        break;
                    }
                }
            });
        }
    });
    let mut results = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // A failure stops the policies not yet taken, whatever their place: the first failure in
    // the policies' order is the answer.
    if let Some(failed) = results.iter().position(|r| matches!(r, Some(Err(_))))
        && let Some(Err(e)) = results.swap_remove(failed)
    {
        return Err(Failure::from(e));
    }
    let mut outcomes = Vec::with_capacity(policies.len());
    for (result, policy) in results.into_iter().zip(policies) {
        match result {
            Some(Ok(outcome)) => outcomes.push(outcome),
            Some(Err(e)) => return Err(Failure::from(e)),
            // Not run: only after a failure, returned above.
            None => {
                return Err(Failure::from(anyhow::anyhow!(
                    "simulating: policy {} was not run",
                    policy.as_str()
                )));
            }
        }
    }
    Ok(outcomes)
}

/// The order policies start in, costliest first (measured, issue 53: on 100,000 runs of 200
/// images `predictive` took 48 s, `adaptive` 29, `imagekeeper` 12, `kubelet` 11,
/// `clairvoyant` under one): with two cores, started in the given order the last one began
/// at 12 s and the run took 60 s.
fn cost_rank(policy: SimPolicy) -> u8 {
    match policy {
        SimPolicy::Predictive | SimPolicy::Signals => 0,
        SimPolicy::Adaptive => 1,
        SimPolicy::Imagekeeper => 2,
        SimPolicy::Kubelet => 3,
        _ => 4,
    }
}

/// The outcomes of `policies` from those of the policies run (every one but `signals`):
/// `signals` takes `predictive`'s, renamed, at its place.
fn share_predictive_with_signals(policies: &[SimPolicy], run: Vec<Outcome>) -> Vec<Outcome> {
    let predictive = run
        .iter()
        .find(|o| o.policy == SimPolicy::Predictive.as_str())
        .cloned();
    let mut run = run.into_iter();
    let mut outcomes = Vec::with_capacity(policies.len());
    for policy in policies {
        if *policy == SimPolicy::Signals {
            if let Some(p) = &predictive {
                let mut shared = p.clone();
                shared.policy = SimPolicy::Signals.as_str();
                outcomes.push(shared);
            }
        } else if let Some(outcome) = run.next() {
            outcomes.push(outcome);
        }
    }
    outcomes
}

/// One policy's simulation on the calling thread, `place` its place among the policies run.
fn run_policy(
    workload: &Workload,
    policy: SimPolicy,
    place: (usize, usize),
    progress: &std::sync::Mutex<ProgressOnStderr>,
) -> anyhow::Result<Outcome> {
    // One thread and no timers: nothing in a simulation sleeps or reads a clock; the
    // workload's times are passed to every call.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .context("starting the async runtime")?;
    // The simulated node's GC logs what a real one would (FreeDiskSpaceFailed at every failed
    // cycle): the simulation's answer is its output, so those lines are not printed.
    let mut outcomes =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            rt.block_on(simulate_reporting(
                workload,
                &[policy],
                SimOptions::default(),
                &mut |p| {
                    let mut p = *p;
                    (p.policy_index, p.policies) = place;
                    progress
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .report(&p);
                },
            ))
            .map_err(|e| anyhow::Error::new(e).context("simulating"))
        })?;
    match outcomes.pop() {
        Some((outcome, _)) => Ok(outcome),
        None => Err(anyhow::anyhow!(
            "simulating: policy {} gave no outcome",
            policy.as_str()
        )),
    }
}

/// Progress of a long simulation on stderr: a first line once it has run
/// [`ProgressOnStderr::FIRST`], then one every [`ProgressOnStderr::EVERY`] (a short one prints
/// nothing; stdout keeps only the answer).
struct ProgressOnStderr {
    started: Instant,
    next: Duration,
}

impl ProgressOnStderr {
    const FIRST: Duration = Duration::from_secs(1);
    const EVERY: Duration = Duration::from_secs(5);

    fn new() -> ProgressOnStderr {
        ProgressOnStderr {
            started: Instant::now(),
            next: Self::FIRST,
        }
    }

    fn report(&mut self, p: &SimProgress) {
        let elapsed = self.started.elapsed();
        if elapsed < self.next {
            return;
        }
        self.next = elapsed + Self::EVERY;
        let percent = if p.lines == 0 {
            100.0
        } else {
            p.lines_done as f64 * 100.0 / p.lines as f64
        };
        // A failed write to stderr is not the simulation's failure.
        let _ = writeln!(
            std::io::stderr().lock(),
            "simulate: policy {} ({} of {}): line {} of {} ({percent:.0}%), simulated day {:.1}, {} steps, {:.0}s elapsed",
            p.policy.as_str(),
            p.policy_index + 1,
            p.policies,
            p.lines_done,
            p.lines,
            p.at_s / 86_400.0,
            p.steps,
            elapsed.as_secs_f64(),
        );
    }
}

fn read(path: &std::path::Path) -> Result<Workload, WorkloadError> {
    if path.as_os_str() == "-" {
        return read_workload(std::io::stdin().lock());
    }
    // Every file an operator hands imagekeeper is opened through `operator_file` (a regular
    // file only); the workload reader caps each line and the whole.
    let file = operator_file::open_regular(path, Follow::Yes)
        .map_err(|e| WorkloadError::Io(std::io::Error::other(e.to_string())))?;
    read_workload(file)
}

/// `repulled_bytes` as a ratio of clairvoyant's (`-` without a clairvoyant run; `inf` when it
/// re-pulled nothing and this policy did).
fn ratio(outcome: &Outcome, reference: Option<&Outcome>) -> String {
    match reference {
        None => "-".to_owned(),
        Some(r) if r.repulled_bytes == 0 && outcome.repulled_bytes == 0 => "1.00".to_owned(),
        Some(r) if r.repulled_bytes == 0 => "inf".to_owned(),
        Some(r) => format!(
            "{:.2}",
            outcome.repulled_bytes as f64 / r.repulled_bytes as f64
        ),
    }
}

fn write_outcomes(out: &mut dyn Write, outcomes: &[Outcome]) -> std::io::Result<()> {
    let reference = outcomes.iter().find(|o| o.policy == "clairvoyant");
    let columns: Vec<Column<'_, Outcome>> = vec![
        Column::new("POLICY", |o: &Outcome| o.policy.to_owned()),
        Column::new("RUNS", |o: &Outcome| o.runs.to_string()),
        Column::new("FAILED", |o: &Outcome| o.failed_runs.to_string()),
        Column::new("PULLS", |o: &Outcome| o.pulls.to_string()),
        Column::new("PULLED", |o: &Outcome| format_size(o.pulled_bytes)),
        Column::new("REPULLS", |o: &Outcome| o.repulls.to_string()),
        Column::new("REPULLED", |o: &Outcome| format_size(o.repulled_bytes)),
        Column::new("VS CLAIRVOYANT", move |o: &Outcome| ratio(o, reference)),
        Column::new("EVICTIONS", |o: &Outcome| o.evictions.to_string()),
        Column::new("PEAK USED", |o: &Outcome| format_size(o.peak_used_bytes)),
        Column::new("PULL WAIT", |o: &Outcome| format!("{:.1}s", o.pull_wait_s)),
    ];
    write_table(out, &columns, outcomes, TableOptions::default())
}
