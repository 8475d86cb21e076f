//! The power-loss harness (`imagekeeper::store::power_loss_harness`) driven by fuzz input: the
//! batches, the operation at which power is cut and the seed that picks which unsynced writes
//! survive all come from the input. Any broken promise panics with the harness's account.
#![no_main]

use arbitrary::{Result, Unstructured};
use imagekeeper::store::CommitMode;
use imagekeeper::store::power_loss_harness::{Op, Scenario, Step, run};
use libfuzzer_sys::fuzz_target;

fn time(u: &mut Unstructured<'_>) -> Result<i64> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => 0,
        1 | 2 => u.int_in_range(0..=2_000)?,
        _ => u.arbitrary()?,
    })
}

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match u.int_in_range(0..=20u8)? {
        0 => Op::Upsert {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
            first_detected: time(u)?,
            last_used: time(u)?,
            size: u.arbitrary()?,
            pinned: u.arbitrary()?,
        },
        1 => Op::MarkUsed {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
            now: time(u)?,
            size: u.arbitrary()?,
        },
        2 => Op::Remove {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
        },
        3 => Op::PutBackoff {
            key: u.arbitrary()?,
            backoff_secs: u.int_in_range(0..=600)?,
            last_update: time(u)?,
            message_len: u.int_in_range(0..=5_000)?,
        },
        4 => Op::RemoveBackoff {
            key: u.arbitrary()?,
        },
        5 => Op::SetMeta {
            name: u.arbitrary()?,
            value: time(u)?,
        },
        6 => Op::Sight {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
            now: time(u)?,
            in_use: u.arbitrary()?,
            size: u.arbitrary()?,
            pinned: u.arbitrary()?,
        },
        7 => Op::RemoveUnlisted {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
            seen_last_used: time(u)?,
        },
        8 => Op::RemoveUnlistedJournaled {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
            seen_last_used: time(u)?,
            at: time(u)?,
        },
        9 => Op::Evict {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
            at: time(u)?,
            rank: u.arbitrary()?,
        },
        10 => Op::SetNames {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
            names: u.arbitrary()?,
        },
        11 => Op::PutPin {
            key: u.arbitrary()?,
            created_at: time(u)?,
            until: time(u)?,
            reason_len: u.int_in_range(0..=1_100)?,
        },
        12 => Op::RemovePin {
            key: u.arbitrary()?,
        },
        13 => Op::PruneExpiredPins { now: time(u)? },
        14 => Op::ObserveUses {
            now: time(u)?,
            in_use: u.arbitrary()?,
        },
        15 => Op::OpenUse {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
            now: time(u)?,
        },
        16 => Op::RecordPull {
            image: u.arbitrary()?,
            handler: u.arbitrary()?,
            at: time(u)?,
            size: u.arbitrary()?,
            origin: u.arbitrary()?,
            name_len: u.int_in_range(0..=5_000)?,
        },
        17 => Op::ReplaceWarm {
            rows: u.arbitrary()?,
            state: u.arbitrary()?,
            since: time(u)?,
        },
        18 => Op::PutRuntimeLabel {
            name: u.arbitrary()?,
            written_at: time(u)?,
            value_len: u.int_in_range(0..=300)?,
        },
        19 => Op::RemoveRuntimeLabel {
            name: u.arbitrary()?,
        },
        _ => Op::Stamp { value: time(u)? },
    })
}

fn scenario(u: &mut Unstructured<'_>) -> Result<Scenario> {
    let cut_after = u.int_in_range(0..=400)?;
    let crash_seed = u.arbitrary()?;
    let mut steps = Vec::new();
    for _ in 0..u.int_in_range(1..=12u8)? {
        if u.ratio(1, 12)? {
            steps.push(Step::Reopen);
        } else if u.ratio(1, 12)? {
            steps.push(Step::Compact);
        } else {
            let mut ops = Vec::new();
            for _ in 0..u.int_in_range(1..=8u8)? {
                ops.push(op(u)?);
            }
            steps.push(Step::Batch(ops));
        }
    }
    Ok(Scenario {
        steps,
        cut_after,
        crash_seed,
        mode: CommitMode::Durable,
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = scenario(&mut Unstructured::new(data)) else {
        return;
    };
    if let Err(e) = run(&s) {
        panic!("power-loss promise broken: {e}\n{s:?}");
    }
});
