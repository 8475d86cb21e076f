//! `sim`: the deterministic simulator's runner (feature `simulation`; `scripts/sim` builds and
//! runs it). Runs random seeds for a time budget, or replays one seed exactly, and prints each
//! violation with its seed, step and trace. The last line is always
//! `sim: N seeds, M steps, V violations`. Exit status: 0 no violation, 1 a violation (or a run
//! that could not be set up), 2 bad flags.
//!
//! ```text
//! sim [SECONDS] [--seed S] [--steps N] [--mutant NAME]
//! ```

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use imagekeeper::sim::{Mutant, SimOptions, run_seed};

/// Steps per seed unless `--steps` says otherwise.
const DEFAULT_STEPS: u64 = 3000;

struct Flags {
    seconds: u64,
    seed: Option<u64>,
    steps: u64,
    mutant: Option<Mutant>,
}

/// Writes one line to stdout; false once the reader has gone (`| head`), which ends the run
/// quietly with the status so far.
fn say(line: &str) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("sim: {problem}");
    eprintln!("usage: sim [SECONDS] [--seed S] [--steps N] [--mutant NAME]");
    let names: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
    eprintln!(
        "mutants (a build with the sim-mutants feature): {}",
        names.join(", ")
    );
    ExitCode::from(2)
}

fn parse(args: &[String]) -> Result<Flags, String> {
    let mut flags = Flags {
        seconds: 60,
        seed: None,
        steps: DEFAULT_STEPS,
        mutant: None,
    };
    let number = |name: &str, v: Option<&String>| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("{name} needs a value"))?;
        v.parse::<u64>()
            .map_err(|_| format!("{name}: {v:?} is not a non-negative integer"))
    };
    let mut it = args.iter();
    let mut positional = false;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seed" => flags.seed = Some(number("--seed", it.next())?),
            "--steps" => {
                flags.steps = number("--steps", it.next())?;
                if flags.steps == 0 {
                    return Err("--steps must be at least 1".to_owned());
                }
            }
            "--mutant" => {
                let name = it.next().ok_or("--mutant needs a value")?;
                flags.mutant =
                    Some(Mutant::parse(name).ok_or_else(|| format!("no mutant named {name:?}"))?);
            }
            other if !positional && !other.starts_with('-') => {
                flags.seconds = number("SECONDS", Some(arg))?;
                if flags.seconds == 0 {
                    return Err("SECONDS must be at least 1".to_owned());
                }
                positional = true;
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok(flags)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flags = match parse(&args) {
        Ok(f) => f,
        Err(problem) => return usage(&problem),
    };
    let started = Instant::now();
    let budget = Duration::from_secs(flags.seconds);
    // Random seeds: the standard library's per-process random keys, no clock.
    let mut seed_source = fastrand::Rng::with_seed(RandomState::new().hash_one(0x5eed_u64));
    let (mut seeds, mut steps, mut violations, mut failed) = (0u64, 0u64, 0u64, false);
    let (mut crashes, mut removals, mut over, mut acks) = (0u64, 0u64, 0u64, 0u64);
    let mut quiet = 0u64;
    let mut open = true;
    if let Some(m) = flags.mutant {
        open &= say(&format!("sim: mutant {} on", m.name()));
    }
    loop {
        let seed = match flags.seed {
            Some(s) => s,
            None => seed_source.u64(..),
        };
        let options = SimOptions {
            seed,
            steps: flags.steps,
            mutant: flags.mutant,
        };
        match run_seed(options) {
            Ok(outcome) => {
                seeds += 1;
                steps += outcome.steps;
                crashes += outcome.crashes;
                removals += outcome.removals;
                over += outcome.over_threshold;
                acks += outcome.acknowledged;
                quiet += outcome.quiet_cycles;
                if let Some(v) = outcome.violation {
                    violations += 1;
                    open &= say(&format!(
                        "seed {seed}: violation at step {} ({:.2}s into the run): {}",
                        v.step,
                        started.elapsed().as_secs_f64(),
                        v.message
                    ));
                    for line in &v.trace {
                        open &= say(&format!("  {line}"));
                    }
                    open &= say(&format!(
                        "  replay: scripts/sim --seed {seed} --steps {}{}",
                        flags.steps,
                        flags
                            .mutant
                            .map(|m| format!(" --mutant {}", m.name()))
                            .unwrap_or_default()
                    ));
                }
            }
            Err(e) => {
                failed = true;
                open &= say(&format!("seed {seed}: could not run: {e}"));
                seeds += 1;
            }
        }
        if !open || flags.seed.is_some() || started.elapsed() >= budget {
            break;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let rate = if secs > 0.0 { steps as f64 / secs } else { 0.0 };
    say(&format!("sim: {secs:.1}s, {rate:.0} steps/s"));
    say(&format!(
        "sim: exercised {crashes} power cuts, {removals} RemoveImage calls, {over} GCs over the high threshold, {quiet} quiet cycles judged for what they left, {acks} acknowledged uses"
    ));
    say(&format!(
        "sim: {seeds} seeds, {steps} steps, {violations} violations"
    ));
    if violations > 0 || failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
