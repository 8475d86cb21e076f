//! Corrupt database files: bytes flipped, sectors zeroed and the file truncated at seeded random
//! offsets of a real database. `Store::open` must refuse the file, or give a store whose reads
//! fail loudly, whose `check()` reports the damage, or whose records are each exactly as
//! written (some may be gone); never a silently wrong record, never a panic. Every
//! `imagekeeper inspect` subcommand, run as a process on such copies, must print exactly what
//! it prints for the undamaged file or refuse (exit 1 or 2, naming the file); never wrong
//! output with exit 0, never a panic or a signal.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use imagekeeper::model::{BackoffEntry, ImageRecord, RecordKey, UnixNanos};
use imagekeeper::store::{Batch, Store};

/// The shared seeded generator (fastrand), so a failure names the case that reproduces it.
struct Rng(fastrand::Rng);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0.usize(..n.max(1))
    }
}

type Written = (
    BTreeMap<RecordKey, ImageRecord>,
    BTreeMap<String, BackoffEntry>,
);

/// A database with a few hundred records over several redb pages, and what was written.
fn build(path: &Path) -> Written {
    let store = Store::open(path, UnixNanos::from_secs(1)).expect("open a new store");
    let mut records = BTreeMap::new();
    let mut backoff = BTreeMap::new();
    for chunk in 0..6 {
        let mut batch = Batch::new();
        for i in 0..50u64 {
            let n = chunk * 50 + i;
            let key = RecordKey::new(format!("sha256:{n:064x}"), ["", "runc"][n as usize % 2]);
            let record = ImageRecord {
                first_detected: UnixNanos::from_secs(n as i64),
                last_used: UnixNanos::from_secs((n * 7 % 300) as i64),
                size: n * 1_000_003,
                pinned: n % 11 == 0,
            };
            batch.upsert(key.clone(), record);
            records.insert(key, record);
        }
        let entry = BackoffEntry {
            backoff: Duration::from_secs(chunk * 10),
            last_update: UnixNanos::from_secs(chunk as i64),
            last_error: format!("pull failed {chunk}: {}", "e".repeat(300)),
        };
        batch.put_backoff(format!("pod-{chunk}_app:1"), entry.clone());
        backoff.insert(format!("pod-{chunk}_app:1"), entry);
        store.apply(&batch).expect("apply");
    }
    (records, backoff)
}

#[derive(Debug, Default)]
struct Tally {
    refused: usize,
    /// Of `refused`: redb panicked and the open path turned it into `Corrupt`.
    refused_after_redb_panic: usize,
    read_failed: usize,
    check_reported: usize,
    intact: usize,
    partial: usize,
}

/// Damages `bytes` in one of several ways chosen by `rng`; returns what it did.
fn damage(bytes: &mut Vec<u8>, rng: &mut Rng) -> String {
    // Half the time aim at bytes that hold something: the file is mostly preallocated zeros.
    let nonzero: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b != 0)
        .map(|(i, _)| i)
        .collect();
    let pick = |rng: &mut Rng, len: usize| {
        if rng.next().is_multiple_of(2) && !nonzero.is_empty() {
            nonzero[rng.below(nonzero.len())].min(len.saturating_sub(1))
        } else {
            rng.below(len)
        }
    };
    match rng.next() % 4 {
        0 => {
            let flips = 1 + rng.below(8);
            let mut at = Vec::new();
            for _ in 0..flips {
                let i = pick(rng, bytes.len());
                bytes[i] ^= 1 + rng.below(255) as u8;
                at.push(i);
            }
            format!("flipped bytes at {at:?}")
        }
        1 => {
            let i = pick(rng, bytes.len());
            let bit = rng.below(8);
            bytes[i] ^= 1 << bit;
            format!("flipped bit {bit} at {i}")
        }
        2 => {
            let start = pick(rng, bytes.len()) / 512 * 512;
            let end = (start + 512).min(bytes.len());
            bytes[start..end].fill(0);
            format!("zeroed the sector at {start}")
        }
        _ => {
            let len = pick(rng, bytes.len());
            bytes.truncate(len);
            format!("truncated to {len} bytes")
        }
    }
}

fn probe(path: &Path, written: &Written, tally: &mut Tally) -> Result<(), String> {
    let mut store = match Store::open(path, UnixNanos::from_secs(2)) {
        Ok(store) => store,
        Err(e) => {
            tally.refused += 1;
            if e.to_string().contains("redb panicked") {
                tally.refused_after_redb_panic += 1;
            }
            return Ok(());
        }
    };
    let read = store.records().and_then(|r| {
        let backoff = store.backoff_entries()?;
        let _ = store.eviction_order()?.collect::<Result<Vec<_>, _>>()?;
        Ok((r, backoff))
    });
    let check = store.check();
    let reported = !matches!(&check, Ok(v) if v.is_empty());
    let (records, backoff) = match read {
        Ok(found) => found,
        Err(_) => {
            tally.read_failed += 1;
            return Ok(());
        }
    };
    let wrong_record = records
        .iter()
        .find(|r| written.0.get(&r.key) != Some(&r.record));
    let wrong_backoff = backoff
        .iter()
        .find(|(k, v)| written.1.get(k.as_str()) != Some(v));
    if reported {
        tally.check_reported += 1;
        return Ok(());
    }
    if let Some(r) = wrong_record {
        return Err(format!(
            "check() passed but record {} reads back as {:?}",
            r.key, r.record
        ));
    }
    if let Some((k, v)) = wrong_backoff {
        return Err(format!(
            "check() passed but backoff {k} reads back as {v:?}"
        ));
    }
    if records.len() == written.0.len() && backoff.len() == written.1.len() {
        tally.intact += 1;
    } else {
        tally.partial += 1;
    }
    Ok(())
}

#[test]
fn corrupt_files_are_refused_or_read_back_true_never_a_panic() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.redb");
    let written = build(&good);
    let pristine = std::fs::read(&good).expect("read the database");
    let victim = dir.path().join("victim.redb");
    let mut tally = Tally::default();
    let cases = 300;
    for case in 0..cases {
        let seed = 0x5EED_0000 + case;
        let mut rng = Rng::new(seed);
        let mut bytes = pristine.clone();
        let what = damage(&mut bytes, &mut rng);
        std::fs::write(&victim, &bytes).expect("write the damaged copy");
        let outcome = catch_unwind(AssertUnwindSafe(|| probe(&victim, &written, &mut tally)));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(wrong)) => panic!("seed {seed:#x} ({what}): {wrong}"),
            Err(_) => panic!("seed {seed:#x} ({what}): opening or reading panicked"),
        }
    }
    eprintln!("{cases} damaged copies: {tally:?}");
    // The cases must reach every branch that matters, or the test proves little.
    assert!(tally.refused > 0, "{tally:?}");
    assert!(tally.intact + tally.partial > 0, "{tally:?}");
}

/// Flips one byte, at a byte that holds something three times in four (the file is mostly
/// preallocated zeros), the damage a bad sector or a stray write leaves.
fn flip_one_byte(bytes: &mut [u8], rng: &mut Rng) -> String {
    let nonzero: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b != 0)
        .map(|(i, _)| i)
        .collect();
    let i = if rng.below(4) < 3 && !nonzero.is_empty() {
        nonzero[rng.below(nonzero.len())]
    } else {
        rng.below(bytes.len())
    };
    let mask = 1 + rng.below(255) as u8;
    bytes[i] ^= mask;
    format!("flipped byte {i} with {mask:#04x}")
}

/// The outcome of one `imagekeeper inspect` run.
struct InspectRun {
    /// `None` when a signal ended it.
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

fn inspect_run(db: &Path, args: &[&str]) -> InspectRun {
    let out = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args(["inspect", "--now", "2000000000", "--db"])
        .arg(db)
        .args(args)
        .output()
        .expect("run imagekeeper inspect");
    InspectRun {
        code: out.status.code(),
        signal: out.status.signal(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Per subcommand: damaged copies whose output equalled the undamaged output, and refusals.
#[derive(Debug, Default)]
struct InspectTally {
    same: usize,
    refused: usize,
}

#[test]
fn inspect_on_damaged_files_prints_the_undamaged_output_or_refuses_for_every_subcommand() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.redb");
    build(&good);
    let pristine = std::fs::read(&good).expect("read the database");
    let victim = dir.path().join("victim.redb");
    let shown_id = format!("sha256:{:064x}", 150);
    let commands: Vec<(&str, Vec<&str>)> = vec![
        ("list", vec!["list", "--output", "json"]),
        ("show", vec!["show", &shown_id, "--output", "json"]),
        ("backoff", vec!["backoff", "--output", "json"]),
        ("stats", vec!["stats", "--output", "json"]),
        ("explain", vec!["explain", "--output", "json"]),
        ("check", vec!["check", "--output", "json"]),
        ("export", vec!["export"]),
    ];
    // Seeded damaged copies per subcommand: seven subcommands, a few hundred runs in all.
    let cases_per_command: u64 = 40;
    let mut failures = Vec::new();
    let mut tallies = Vec::new();
    for (index, (name, args)) in commands.iter().enumerate() {
        std::fs::write(&victim, &pristine).expect("write the undamaged copy");
        let undamaged = inspect_run(&victim, args);
        assert_eq!(
            undamaged.code,
            Some(0),
            "{name} on the undamaged file: {}",
            undamaged.stderr
        );
        let mut tally = InspectTally::default();
        for case in 0..cases_per_command {
            let seed = 0x1_5EED_0000 + (index as u64) * 1000 + case;
            let mut rng = Rng::new(seed);
            let mut bytes = pristine.clone();
            let what = if rng.below(4) < 3 {
                flip_one_byte(&mut bytes, &mut rng)
            } else {
                damage(&mut bytes, &mut rng)
            };
            std::fs::write(&victim, &bytes).expect("write the damaged copy");
            let r = inspect_run(&victim, args);
            let case_name = format!("{name}, seed {seed:#x} ({what})");
            if r.signal.is_some() || r.stderr.contains("panicked") {
                failures.push(format!(
                    "{case_name}: crashed ({:?}): {}",
                    r.signal, r.stderr
                ));
                continue;
            }
            match r.code {
                Some(0) if r.stdout == undamaged.stdout => tally.same += 1,
                Some(0) => failures.push(format!(
                    "{case_name}: exit 0 with output that differs from the undamaged file's"
                )),
                Some(1 | 2) if r.stderr.contains(victim.to_str().expect("utf8 path")) => {
                    tally.refused += 1;
                }
                code => failures.push(format!(
                    "{case_name}: exit {code:?} without naming the file: {}",
                    r.stderr
                )),
            }
            if std::fs::read(&victim).expect("read the damaged copy") != bytes {
                failures.push(format!("{case_name}: the file's bytes changed"));
            }
        }
        tallies.push((*name, tally));
    }
    eprintln!(
        "inspect on {} damaged copies per subcommand: {tallies:?}",
        cases_per_command
    );
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        cases_per_command * commands.len() as u64,
        failures.join("\n")
    );
    for (name, tally) in &tallies {
        assert!(tally.refused > 0, "{name}: no damaged copy was refused");
    }
}
