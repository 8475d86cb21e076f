//! The deterministic simulator proves it can fail: each known bug class, switched back on
//! (feature `sim-mutants`), is caught within a fixed set of seeds; the real code passes the
//! same seeds; and a seed replays exactly. Deterministic: the seeds are fixed and a run is a
//! function of its seed. Run with `cargo nextest run --features sim-mutants --test sim`
//! (`scripts/test` does).

use std::sync::Arc;
use std::time::Duration;

use imagekeeper::gc::{ByteBudget, GcConfig, GcOrder, GcPolicy, ImageGcManager};
use imagekeeper::model::{ImageId, RuntimeImage, UnixNanos};
use imagekeeper::replay::ScriptedRuntime;
use imagekeeper::sim::oracle::Oracle;
use imagekeeper::sim::{Mutant, SimOptions, SimOutcome, drawn_order, mutants, run_seed};
use imagekeeper::store::Store;

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

/// A seed a smoke run once failed on (`scripts/sim`'s 3000 steps) runs clean.
fn assert_seed_runs_clean(seed: u64) {
    let outcome = run_seed(SimOptions {
        seed,
        steps: 3000,
        mutant: None,
    })
    .expect("the simulation sets up");
    assert!(
        outcome.violation.is_none(),
        "seed {seed}: {:?}",
        outcome.violation.map(|v| v.message)
    );
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

/// The over-free mutant (one byte removal past the walk's amount) is caught by invariant 8.
/// The seeded workload keeps the image filesystem under pressure (its other data), so a byte
/// walk that meets its amount with an eligible image left is rare there (one cycle in the 40
/// seeds, with none left): the mutant is run on a scripted node instead, the real manager with
/// the mutant on and its report judged by the simulator's oracle, and the same node without
/// the mutant is judged clean.
#[tokio::test]
async fn a_byte_walk_that_frees_past_its_low_line_is_caught() {
    async fn judged(mutant: Option<Mutant>) -> Option<String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let t0 = UnixNanos::from_secs(10_000);
        let store = Arc::new(Store::open(&dir.path().join("db.redb"), t0).expect("open the store"));
        let runtime = ScriptedRuntime::new();
        runtime.state().images = [(1u8, 400u64), (2, 300), (3, 200), (4, 100)]
            .map(|(n, size)| RuntimeImage {
                id: ImageId::new(format!("sha256:{n:064x}")),
                size,
                ..RuntimeImage::default()
            })
            .to_vec()
            .into();
        runtime.state().fs = Some((100_000, 90_000));
        // Budget 800/500 over 1000 bytes of images: 500 to free, a and b (700) free it.
        let policy = GcPolicy {
            min_age: Duration::ZERO,
            bytes: Some(ByteBudget {
                high: 800,
                low: 500,
            }),
            ..GcPolicy::default()
        };
        let config = GcConfig {
            policy,
            ..GcConfig::default()
        };
        let manager = ImageGcManager::new(runtime, store, config).expect("manager");
        manager.detect(t0).await.expect("detect");
        mutants::set(mutant);
        let report = manager.garbage_collect(UnixNanos::from_secs(20_000)).await;
        mutants::set(None);
        Oracle::default().judge_cycle(1, &report, None, None, &policy, GcOrder::KubeletOrder)
    }
    let message = judged(Some(Mutant::OverFree))
        .await
        .expect("over-freeing is caught");
    assert!(message.starts_with("invariant 8:"), "{message}");
    assert_eq!(
        judged(None).await,
        None,
        "the real walk stops at its amount"
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

/// An operator's unpin while a GC cycle is in flight (the cycle read the pins before it, and
/// gave up short of low): not a quiet cycle, so the image the unpin freed is not counted an
/// eligible image the cycle left (invariant 4). The seed a CI smoke run found.
#[test]
fn an_unpin_during_a_gc_cycle_makes_the_cycle_not_quiet() {
    assert_seed_runs_clean(13052152494119028567);
}

/// A pin already over, written over a pin in force, fails with a power cut: the commit may
/// have landed, so the image may be unprotected and GC may remove it (invariant 1 must not
/// hold the agent to the pin in force). The seed a CI smoke run found.
#[test]
fn a_failed_pin_over_one_in_force_may_have_replaced_it() {
    assert_seed_runs_clean(3495867603909010208);
}

/// Issue 37's regression switched back on (HighThresholdPercent 100 turns the byte pass off
/// whatever MaxAge is) is caught by the replay traces that pin the rule, and only by those
/// with MaxAge set: with MaxAge 0 both rules agree. The real code gives every trace its
/// expected output (tests/it/replay.rs, every_trace_gives_its_expected_output).
#[tokio::test(flavor = "current_thread")]
async fn the_high_100_traces_catch_the_space_pass_turned_off_whatever_max_age() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/replay");
    let mut traces: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/replay")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("high_100_") && !name.ends_with(".expected.jsonl")
        })
        .collect();
    traces.sort();
    assert_eq!(traces.len(), 5, "{traces:?}");
    let mut caught = Vec::new();
    for trace in &traces {
        let text = std::fs::read_to_string(trace).expect("trace");
        let lines = imagekeeper::replay::parse_trace(&text).expect("a valid trace");
        let expected =
            std::fs::read_to_string(trace.with_extension("expected.jsonl")).expect("expected");
        let db = tempfile::tempdir().expect("temp dir");
        let mut out = Vec::new();
        mutants::set(Some(Mutant::SpacePassOffAtHigh100));
        let ran =
            imagekeeper::replay::run_trace(&lines, &db.path().join("replay.redb"), &mut out).await;
        mutants::set(None);
        if ran.is_err() || String::from_utf8_lossy(&out) != expected {
            caught.push(
                trace
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("")
                    .to_owned(),
            );
        }
    }
    assert_eq!(
        caught,
        [
            "high_100_with_max_age_and_a_budget_frees_the_larger_need",
            "high_100_with_max_age_frees_a_full_disk_only",
        ]
    );
}

/// Issue 39: the seeds (of 1..=3 * SEEDS) that run the predictive order keep every invariant
/// (the space walk's order is predictive's by design, every rule that keeps an image is
/// judged as under the kubelet's order), and the last-look mutant is caught on them too, so
/// the oracle does judge those runs.
#[test]
fn the_predictive_order_keeps_every_invariant() {
    let seeds: Vec<u64> = (1..=3 * SEEDS)
        .filter(|s| drawn_order(*s) == GcOrder::Predictive)
        .collect();
    assert!(seeds.len() >= 10, "{seeds:?}");
    for seed in &seeds {
        let outcome = run(*seed, None);
        assert!(
            outcome.violation.is_none(),
            "seed {seed}: {:?}",
            outcome.violation.map(|v| v.message)
        );
    }
    let caught = seeds
        .iter()
        .find_map(|seed| run(*seed, Some(Mutant::NoLastLook)).violation);
    assert!(
        caught.is_some_and(|v| v.message.starts_with("invariant 1:")),
        "no last look caught on a predictive seed"
    );
}
