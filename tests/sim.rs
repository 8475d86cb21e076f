//! The deterministic simulator proves it can fail: each known bug class, switched back on
//! (feature `sim-mutants`), is caught within a fixed set of seeds; the real code passes the
//! same seeds; and a seed replays exactly. Deterministic: the seeds are fixed and a run is a
//! function of its seed. Run with `cargo nextest run --features sim-mutants --test sim`
//! (`scripts/test` does).

use imagekeeper::sim::{Mutant, SimOptions, SimOutcome, run_seed};

/// Seeds each check runs (the smoke budget of a mutant: it must fall in far fewer).
const SEEDS: u64 = 40;
const STEPS: u64 = 2_000;

fn run(seed: u64, mutant: Option<Mutant>) -> SimOutcome {
    run_seed(SimOptions {
        seed,
        steps: STEPS,
        mutant,
    })
    .expect("the simulation sets up")
}

/// The first seed (of 1..=SEEDS) on which the mutant breaks an invariant, with the message.
fn first_caught(mutant: Mutant) -> Option<(u64, String)> {
    (1..=SEEDS).find_map(|seed| run(seed, Some(mutant)).violation.map(|v| (seed, v.message)))
}

#[test]
fn a_detect_writing_blind_upserts_from_its_stale_snapshot_is_caught() {
    let (seed, message) =
        first_caught(Mutant::BlindDetect).expect("blind detect caught within the seeds");
    assert!(
        message.starts_with("invariant 2:"),
        "seed {seed}: {message}"
    );
}

#[test]
fn a_walk_without_the_last_look_before_removing_is_caught() {
    let (seed, message) =
        first_caught(Mutant::NoLastLook).expect("no last look caught within the seeds");
    assert!(
        message.starts_with("invariant 1:"),
        "seed {seed}: {message}"
    );
}

#[test]
fn commits_with_durability_none_are_caught() {
    let (seed, message) =
        first_caught(Mutant::NonDurable).expect("non-durable commits caught within the seeds");
    assert!(
        message.starts_with("invariant 2:") || message.starts_with("invariant 3:"),
        "seed {seed}: {message}"
    );
}

#[test]
fn a_gc_that_ignores_the_warm_set_is_caught() {
    let (seed, message) =
        first_caught(Mutant::NoWarmKeep).expect("no warm keep caught within the seeds");
    assert!(
        message.starts_with("invariant 1:") && message.contains("warm set"),
        "seed {seed}: {message}"
    );
}

#[test]
fn a_gc_that_ignores_pins_and_irreplaceable_images_is_caught() {
    let (seed, message) = first_caught(Mutant::NoProtections)
        .expect("ignoring pins and irreplaceable images caught within the seeds");
    assert!(
        message.contains("invariant 1")
            && (message.contains("pin") || message.contains("irreplaceable")),
        "seed {seed}: {message}"
    );
}

#[test]
fn the_real_code_breaks_no_invariant_on_the_same_seeds() {
    let (mut inode_removals, mut budget_removals) = (0, 0);
    for seed in 1..=SEEDS {
        let outcome = run(seed, None);
        assert_eq!(outcome.steps, STEPS, "seed {seed} ran every step");
        inode_removals += outcome.inode_removals;
        budget_removals += outcome.budget_removals;
        if let Some(v) = outcome.violation {
            panic!(
                "seed {seed}, step {}: {}\n{}",
                v.step,
                v.message,
                v.trace.join("\n")
            );
        }
    }
    // The inode rule and the byte budget ran (so invariant 6 was judged), not only the
    // kubelet's byte rule.
    assert!(
        inode_removals > 0 && budget_removals > 0,
        "inode removals {inode_removals}, budget removals {budget_removals}"
    );
}

#[test]
fn a_failing_seed_replays_exactly() {
    let (seed, _) = first_caught(Mutant::NoLastLook).expect("a failing seed");
    let first = run(seed, Some(Mutant::NoLastLook))
        .violation
        .expect("fails");
    let again = run(seed, Some(Mutant::NoLastLook))
        .violation
        .expect("fails again");
    assert_eq!(
        (first.step, &first.message, &first.trace),
        (again.step, &again.message, &again.trace)
    );
}
