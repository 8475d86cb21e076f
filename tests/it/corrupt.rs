//! Corrupt database files: bytes flipped, sectors zeroed and the file truncated at seeded random
//! offsets of a real database. `Store::open` must refuse the file, or give a store whose reads
//! fail loudly, whose `check()` reports the damage, or whose records are each exactly as
//! written (some may be gone); never a silently wrong record, never a panic.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::Duration;

use imagekeeper::model::{BackoffEntry, ImageRecord, RecordKey, UnixNanos};
use imagekeeper::store::{Batch, Store};

/// SplitMix64: seeded, so a failure names the case that reproduces it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
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
        let mut rng = Rng(seed);
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
