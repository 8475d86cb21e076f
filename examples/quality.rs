//! `scripts/quality`: GC quality on the seeded corpus (`imagekeeper::simulate::corpus`). For each
//! workload family (issue 26's with and without agent restarts, issue 39's as they are), runs
//! every policy through `imagekeeper::simulate` and prints its `repulled_bytes` and the ratio to
//! `clairvoyant`'s (and the same for the families of tests/simulate with signal lines, issue
//! 55), then the targets of issues 26, 39 and 55 with verdicts as `scripts/bench`
//! prints them: `(target OP BOUND: ok|MISSED)`.
//!
//! Usage: quality [--days D] [--seed S] [--write DIR] [--family NAME]...
//! `--family` runs only the named families (repeatable; `ci+restarts` names a variant).
//! (default: 7 days, seed 1)
//! `--write DIR` also writes each workload to DIR/<family>.jsonl, for `imagekeeper simulate`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use imagekeeper::simulate::corpus::{Family, generate};
use imagekeeper::simulate::{Outcome, SimPolicy, simulate};

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

/// The families of tests/simulate with signal lines that the report adds (issue 55).
const SIGNAL_FAMILIES: [&str; 2] = ["signals-nightly-cronjobs", "signals-rollout-undo"];

/// One family's report: per policy its re-pulled bytes and their ratio to clairvoyant's.
fn print_family(name: &str, outcomes: &[Outcome]) {
    let reference = outcomes
        .iter()
        .find(|o| o.policy == "clairvoyant")
        .map_or(0, |o| o.repulled_bytes);
    let first = outcomes.first().map_or(0, |o| o.first_pulled_bytes);
    println!(
        "{name}: {} runs, {} first pulled",
        outcomes.first().map_or(0, |o| o.runs),
        gb(first)
    );
    for o in outcomes {
        let ratio = if reference == 0 {
            "-".to_owned()
        } else {
            format!("{:.2}", o.repulled_bytes as f64 / reference as f64)
        };
        println!(
            "  {:<12} repulled {:>9}  x clairvoyant {:>5}  repulls {:>5}  failed {:>3}  evictions {:>5}  pull wait {:.0} s",
            o.policy,
            gb(o.repulled_bytes),
            ratio,
            o.repulls,
            o.failed_runs,
            o.evictions,
            o.pull_wait_s
        );
    }
}

fn main() -> ExitCode {
    let mut days = 7.0;
    let mut seed = 1u64;
    let mut write: Option<std::path::PathBuf> = None;
    let mut only: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        match (arg.as_str(), value) {
            ("--days", Some(v)) if v.parse::<f64>().is_ok_and(|d| d > 0.0) => {
                days = v.parse().unwrap_or(days)
            }
            ("--seed", Some(v)) if v.parse::<u64>().is_ok() => seed = v.parse().unwrap_or(seed),
            ("--write", Some(v)) => write = Some(v.into()),
            ("--family", Some(v)) => only.push(v),
            _ => {
                eprintln!("usage: quality [--days D] [--seed S] [--write DIR] [--family NAME]...");
                return ExitCode::from(2);
            }
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("quality: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let mut results: BTreeMap<String, Vec<Outcome>> = BTreeMap::new();
    let mut names = Vec::new();
    for family in Family::ALL {
        let variants: &[bool] = if family.with_restart_variant() {
            &[false, true]
        } else {
            &[false]
        };
        for &restarts in variants {
            let name = format!(
                "{}{}",
                family.as_str(),
                if restarts { "+restarts" } else { "" }
            );
            if !only.is_empty() && !only.contains(&name) {
                continue;
            }
            let workload = generate(family, seed, days, restarts);
            if let Some(dir) = &write {
                let path = dir.join(format!("{name}.jsonl"));
                if let Err(e) = std::fs::write(&path, workload.to_string()) {
                    eprintln!("quality: writing {}: {e}", path.display());
                    return ExitCode::from(1);
                }
            }
            let outcomes = match rt.block_on(simulate(&workload, &SimPolicy::ALL)) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("quality: {name}: {e}");
                    return ExitCode::from(1);
                }
            };
            print_family(&name, &outcomes);
            names.push(name.clone());
            results.insert(name, outcomes);
        }
    }
    // Issue 55: the families of tests/simulate with signal lines (what the cluster knew), for
    // the signals policy beside the others.
    for name in SIGNAL_FAMILIES {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/simulate")
            .join(format!("{name}.jsonl"));
        let workload = match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| imagekeeper::workload::parse_workload(&t).map_err(|e| e.to_string()))
        {
            Ok(w) => w,
            Err(e) => {
                eprintln!("quality: {}: {e}", path.display());
                return ExitCode::from(1);
            }
        };
        let outcomes = match rt.block_on(simulate(&workload, &SimPolicy::ALL)) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("quality: {name}: {e}");
                return ExitCode::from(1);
            }
        };
        print_family(name, &outcomes);
        names.push(name.to_string());
        results.insert(name.to_string(), outcomes);
    }
    println!();
    println!("targets:");
    let mut missed = 0;
    let mut verdict = |figure: String, value: String, op: &str, bound: String, met: bool| {
        if !met {
            missed += 1;
        }
        println!(
            "{figure}: {value}  (target {op} {bound}: {})",
            if met { "ok" } else { "MISSED" }
        );
    };
    let mut adaptive_wins = 0;
    let mut predictive_wins = 0;
    for name in &names {
        let get = |p: &str| {
            results[name]
                .iter()
                .find(|o| o.policy == p)
                .map_or(0, |o| o.repulled_bytes)
        };
        let (k, i, a, c) = (
            get("kubelet"),
            get("imagekeeper"),
            get("adaptive"),
            get("clairvoyant"),
        );
        verdict(
            format!("{name} imagekeeper repulled"),
            gb(i),
            "<=",
            format!("kubelet {}", gb(k)),
            i <= k,
        );
        verdict(
            format!("{name} adaptive repulled"),
            gb(a),
            "<=",
            format!("imagekeeper {}", gb(i)),
            a <= i,
        );
        verdict(
            format!("{name} clairvoyant repulled"),
            gb(c),
            "<=",
            format!("every other policy {}", gb(k.min(i).min(a))),
            c <= k.min(i).min(a),
        );
        if (a as f64) <= 0.8 * k as f64 {
            adaptive_wins += 1;
        }
        // Issue 39: predictive within 2 % of (or below) both the kubelet's order and
        // adaptive on every workload; near clairvoyant on the periodic and drifting ones.
        let p = get("predictive");
        verdict(
            format!("{name} predictive repulled"),
            gb(p),
            "<=",
            format!("1.02 x kubelet {}", gb(k)),
            p as f64 <= 1.02 * k as f64,
        );
        verdict(
            format!("{name} predictive repulled"),
            gb(p),
            "<=",
            format!("1.02 x adaptive {}", gb(a)),
            p as f64 <= 1.02 * a as f64,
        );
        let near = match name.as_str() {
            "periodic" => Some(1.3),
            "drift" => Some(1.5),
            _ => None,
        };
        if let Some(bound) = near {
            verdict(
                format!("{name} predictive repulled"),
                gb(p),
                "<=",
                format!("{bound} x clairvoyant {}", gb(c)),
                p as f64 <= bound * c as f64,
            );
        }
        if (p as f64) <= 0.7 * k as f64 {
            predictive_wins += 1;
        }
        // Issue 55: the signal-reading policy no worse than predictive anywhere, and within
        // 1.2 x clairvoyant on the families with signal lines.
        let s = get("signals");
        verdict(
            format!("{name} signals repulled"),
            gb(s),
            "<=",
            format!("predictive {}", gb(p)),
            s <= p,
        );
        if SIGNAL_FAMILIES.contains(&name.as_str()) {
            verdict(
                format!("{name} signals repulled"),
                gb(s),
                "<=",
                format!("1.2 x clairvoyant {}", gb(c)),
                s as f64 <= 1.2 * c as f64,
            );
        }
    }
    verdict(
        "workloads where predictive repulled <= 0.7 x kubelet".to_owned(),
        predictive_wins.to_string(),
        ">=",
        "3".to_owned(),
        predictive_wins >= 3,
    );
    verdict(
        "workloads where adaptive repulled <= 0.8 x kubelet".to_owned(),
        adaptive_wins.to_string(),
        ">=",
        "2".to_owned(),
        adaptive_wins >= 2,
    );
    println!("missed: {missed}");
    ExitCode::SUCCESS
}
