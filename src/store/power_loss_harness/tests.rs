//! The power-loss harness under proptest, and the proof that it can fail.

use proptest::prelude::*;
use proptest::strategy::ValueTree;

use super::*;

fn op() -> impl Strategy<Value = Op> {
    let time = prop_oneof![Just(0i64), 0i64..2_000, any::<i64>()];
    prop_oneof![
        4 => (any::<u8>(), any::<u8>(), time.clone(), time.clone(), any::<u64>(), any::<bool>())
            .prop_map(|(image, handler, first_detected, last_used, size, pinned)| Op::Upsert {
                image, handler, first_detected, last_used, size, pinned,
            }),
        3 => (any::<u8>(), any::<u8>(), time.clone(), proptest::option::of(any::<u64>()))
            .prop_map(|(image, handler, now, size)| Op::MarkUsed { image, handler, now, size }),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(image, handler)| Op::Remove { image, handler }),
        3 => (any::<u8>(), any::<u8>(), time.clone(), any::<bool>(), any::<u64>(), any::<bool>())
            .prop_map(|(image, handler, now, in_use, size, pinned)| Op::Sight {
                image, handler, now, in_use, size, pinned,
            }),
        2 => (any::<u8>(), any::<u8>(), time.clone())
            .prop_map(|(image, handler, seen_last_used)| Op::RemoveUnlisted {
                image, handler, seen_last_used,
            }),
        2 => (any::<u8>(), any::<u8>(), time.clone(), time.clone())
            .prop_map(|(image, handler, seen_last_used, at)| Op::RemoveUnlistedJournaled {
                image, handler, seen_last_used, at,
            }),
        2 => (any::<u8>(), any::<u8>(), time.clone(), any::<u32>())
            .prop_map(|(image, handler, at, rank)| Op::Evict { image, handler, at, rank }),
        2 => (any::<u8>(), any::<u8>(), any::<u8>())
            .prop_map(|(image, handler, names)| Op::SetNames { image, handler, names }),
        1 => (any::<u8>(), 0u32..600, time.clone(), prop_oneof![0u16..64, 0u16..5000])
            .prop_map(|(key, backoff_secs, last_update, message_len)| Op::PutBackoff {
                key, backoff_secs, last_update, message_len,
            }),
        1 => any::<u8>().prop_map(|key| Op::RemoveBackoff { key }),
        1 => (any::<u8>(), time.clone()).prop_map(|(name, value)| Op::SetMeta { name, value }),
        1 => time.clone().prop_map(|value| Op::Stamp { value }),
        1 => (any::<u8>(), time.clone(), time.clone(), prop_oneof![0u16..64, 0u16..1100])
            .prop_map(|(key, created_at, until, reason_len)| Op::PutPin {
                key, created_at, until, reason_len,
            }),
        1 => any::<u8>().prop_map(|key| Op::RemovePin { key }),
        1 => time.clone().prop_map(|now| Op::PruneExpiredPins { now }),
        2 => (time.clone(), any::<u8>()).prop_map(|(now, in_use)| Op::ObserveUses { now, in_use }),
        1 => (any::<u8>(), any::<u8>(), time.clone())
            .prop_map(|(image, handler, now)| Op::OpenUse { image, handler, now }),
        1 => (any::<u8>(), any::<u8>(), time.clone(), any::<u64>(), any::<u8>(), prop_oneof![0u16..64, 0u16..5000])
            .prop_map(|(image, handler, at, size, origin, name_len)| Op::RecordPull {
                image, handler, at, size, origin, name_len,
            }),
        1 => (any::<u8>(), any::<u8>(), time.clone())
            .prop_map(|(rows, state, since)| Op::ReplaceWarm { rows, state, since }),
        1 => (any::<u8>(), time, 0u16..300)
            .prop_map(|(name, written_at, value_len)| Op::PutRuntimeLabel { name, written_at, value_len }),
        1 => any::<u8>().prop_map(|name| Op::RemoveRuntimeLabel { name }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => proptest::collection::vec(op(), 1..8).prop_map(Step::Batch),
        1 => Just(Step::Reopen),
        1 => Just(Step::Compact),
    ]
}

/// A scenario and where, as a share of its disk operations, power is cut (past 1.0: after the
/// last step).
fn scenario(mode: CommitMode) -> impl Strategy<Value = (Scenario, f64)> {
    (
        proptest::collection::vec(step(), 1..10),
        any::<u64>(),
        0.0f64..1.05,
    )
        .prop_map(move |(steps, crash_seed, share)| {
            (
                Scenario {
                    steps,
                    cut_after: 0,
                    crash_seed,
                    mode,
                },
                share,
            )
        })
}

fn with_cut(mut s: Scenario, share: f64) -> Scenario {
    let total = count_disk_ops(&s).expect("the scenario runs without a power cut");
    s.cut_after = (total as f64 * share) as u64;
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn a_power_cut_keeps_the_acknowledged_or_the_in_flight_commit(
        (s, share) in scenario(CommitMode::Durable)
    ) {
        let s = with_cut(s, share);
        if let Err(e) = run(&s) {
            prop_assert!(false, "{e}\n{s:?}");
        }
    }
}

/// The cases above must actually reach the interesting places: cuts inside commits that
/// recover to the in-flight state as well as to the acknowledged one.
#[test]
fn cuts_land_inside_commits_both_ways() {
    let steps: Vec<Step> = (0..6)
        .map(|i| {
            Step::Batch(vec![
                Op::Upsert {
                    image: i,
                    handler: 0,
                    first_detected: 1,
                    last_used: i64::from(i),
                    size: 10,
                    pinned: false,
                },
                Op::Stamp {
                    value: i64::from(i),
                },
            ])
        })
        .collect();
    let base = Scenario {
        steps,
        cut_after: 0,
        crash_seed: 0,
        mode: CommitMode::Durable,
    };
    let total = count_disk_ops(&base).expect("runs");
    let mut in_flight_whole = 0;
    let mut in_flight_lost = 0;
    for cut_after in 0..=total {
        for crash_seed in 0..4 {
            let s = Scenario {
                cut_after,
                crash_seed,
                ..base.clone()
            };
            let outcome = run(&s).unwrap_or_else(|e| panic!("{e}\n{s:?}"));
            match (outcome.in_flight, outcome.recovered) {
                (true, Recovered::InFlight) => in_flight_whole += 1,
                (true, Recovered::Acknowledged) => in_flight_lost += 1,
                _ => {}
            }
        }
    }
    assert!(in_flight_whole > 0, "no cut recovered a commit in flight");
    assert!(in_flight_lost > 0, "no cut lost a commit in flight");
}

/// The harness catches a store that acknowledges commits it has not made durable.
#[test]
fn the_harness_catches_non_durable_commits() {
    let s = Scenario {
        steps: vec![
            Step::Batch(vec![Op::MarkUsed {
                image: 1,
                handler: 0,
                now: 5,
                size: Some(3),
            }]),
            Step::Batch(vec![Op::SetMeta { name: 2, value: 7 }]),
        ],
        cut_after: u64::MAX,
        crash_seed: 1,
        mode: CommitMode::NonDurableForTests,
    };
    match run(&s) {
        Err(HarnessFailure::WrongState { .. }) => {}
        other => panic!("a lost acknowledged commit went unnoticed: {other:?}"),
    }
    // And across random scenarios without clean reopens or compactions (a clean close or a
    // compaction's durable commit makes non-durable commits durable): every one that commits
    // something loses it and is caught.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = scenario(CommitMode::NonDurableForTests);
    let (mut caught, mut with_commits) = (0, 0);
    for _ in 0..40 {
        let (s, share) = strategy
            .new_tree(&mut runner)
            .expect("a scenario")
            .current();
        let mut s = s;
        s.steps
            .retain(|step| !matches!(step, Step::Reopen | Step::Compact));
        let s = with_cut(s, share.max(1.0));
        match run(&s) {
            Err(HarnessFailure::WrongState { .. }) => {
                caught += 1;
                with_commits += 1;
            }
            Ok(outcome) => with_commits += usize::from(outcome.acknowledged > 0),
            Err(e) => panic!("unexpected failure kind: {e}"),
        }
    }
    assert!(with_commits > 20, "too few scenarios committed anything");
    assert_eq!(
        caught, with_commits,
        "a non-durable commit was lost unnoticed"
    );
}

/// A file churned well above its live size: 8 rounds of 32 large backoff entries and 8
/// records, then every backoff entry removed.
fn churn_steps() -> Vec<Step> {
    let mut steps: Vec<Step> = (0..8u8)
        .map(|round| {
            Step::Batch(
                (0..32u8)
                    .map(|i| Op::PutBackoff {
                        key: round * 32 + i,
                        backoff_secs: 10,
                        last_update: 1,
                        message_len: 3000,
                    })
                    .chain((0..8u8).map(|i| Op::Upsert {
                        image: round * 8 + i,
                        handler: i % 3,
                        first_detected: 1,
                        last_used: i64::from(i),
                        size: 10,
                        pinned: false,
                    }))
                    .collect(),
            )
        })
        .collect();
    for round in 0..8u8 {
        steps.push(Step::Batch(
            (0..32u8)
                .map(|i| Op::RemoveBackoff {
                    key: round * 32 + i,
                })
                .collect(),
        ));
    }
    steps
}

/// Without a cut, the compaction that ends `scenario`'s batches shrinks the file.
fn assert_the_compaction_shrinks_the_file(scenario: &Scenario) {
    let disk = PowerLossDisk::new(Vec::new(), None);
    let store = super::open(&disk, CommitMode::Durable).expect("open");
    for step in &scenario.steps {
        if let Step::Batch(ops) = step {
            store.apply(&super::to_batch(ops)).expect("apply");
        }
    }
    let before = store.file_bytes().expect("size");
    match store.compact().expect("compact") {
        super::super::CompactOutcome::Compacted {
            file_bytes_after, ..
        } => assert!(file_bytes_after < before, "{file_bytes_after} >= {before}"),
        other => panic!("{other:?}"),
    }
}

/// Compaction under power loss: a file churned well above its live size (many records
/// written, most removed) is compacted with power cut at every disk operation of the
/// compaction and several crash images each; the recovered store holds exactly the
/// acknowledged records, checks clean, and takes a new commit. The same run without a cut
/// shrinks the file, so the cuts land inside a compaction that does work.
#[test]
fn a_power_cut_at_every_write_of_a_compaction_keeps_exactly_the_committed_records() {
    let mut steps = churn_steps();
    let before_compaction = Scenario {
        steps: steps.clone(),
        cut_after: u64::MAX,
        crash_seed: 0,
        mode: CommitMode::Durable,
    };
    let churn_ops = count_disk_ops(&before_compaction).expect("runs");
    steps.push(Step::Compact);
    let base = Scenario {
        steps,
        ..before_compaction
    };
    let total = count_disk_ops(&base).expect("runs");
    assert!(total > churn_ops, "the compaction wrote nothing");

    assert_the_compaction_shrinks_the_file(&base);

    let mut cuts_inside = 0;
    for cut_after in churn_ops..=total {
        for crash_seed in 0..3 {
            let s = Scenario {
                cut_after,
                crash_seed: crash_seed * 7919 + cut_after,
                ..base.clone()
            };
            let outcome = run(&s).unwrap_or_else(|e| panic!("{e}\n{s:?}"));
            assert_eq!(
                outcome.recovered,
                Recovered::Acknowledged,
                "cut {cut_after}"
            );
            cuts_inside += usize::from(outcome.cut_during_run);
        }
    }
    assert!(cuts_inside > 0);
}
