//! Read-only commands on a damaged database (issue 41 item 5): `pins -o json`, `gc --dry-run`
//! and `prune --dry-run` without an agent, run as processes on copies of a pinned database
//! with one byte flipped, must print exactly what they print for the undamaged file or refuse
//! it with `inspect`'s message (exit 1 or 2, naming the file); never a panic, a signal, or a
//! different answer with exit 0. The suite runs a seeded sample of flips; `scripts/flip-sweep`
//! runs the full sweep (`IMAGEKEEPER_FLIP_SWEEP=1`: 10,000 pins, or
//! `IMAGEKEEPER_FLIP_SWEEP_PINS`, 1,000 flips: one bit at each of the offsets 0-255, then 744
//! offsets spread evenly over the file).

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use crate::support::agent::AgentFixture;
use imagekeeper::model::{
    ImageId, ImageNames, ImagePin, ImageRecord, PinKey, RecordKey, RuntimeImage, UnixNanos,
};
use imagekeeper::store::{Batch, Store};

/// How many images have records (and are listed by the runtime); the pins name these first.
const IMAGES: u64 = 40;

fn name(i: u64) -> String {
    format!("registry.example/app-{i}:1")
}

fn runtime_image(i: u64) -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new(format!("sha256:{i:064x}")),
        repo_tags: vec![name(i)],
        // With a repo digest: an image imported without one is kept by default.
        repo_digests: vec![format!("registry.example/app-{i}@sha256:{i:064x}")],
        size: 1_000 + i,
        ..RuntimeImage::default()
    }
}

/// A database with `pins` pins (in force for ever, until 2200, or expired in 1970, in turn;
/// a reason each) and [`IMAGES`] records named like the first pins, all long unused.
fn build(path: &Path, pins: u64) {
    let store = Store::open(path, UnixNanos::from_secs(1_000)).expect("open a new store");
    let mut batch = Batch::new();
    for i in 0..IMAGES {
        let key = RecordKey::new(format!("sha256:{i:064x}"), "");
        batch.upsert(
            key.clone(),
            ImageRecord {
                first_detected: UnixNanos::from_secs(1_000),
                last_used: UnixNanos::from_secs(2_000),
                size: 1_000 + i,
                pinned: false,
            },
        );
        batch.set_names(
            key,
            ImageNames {
                repo_tags: vec![name(i)],
                repo_digests: Vec::new(),
            },
        );
    }
    store.apply(&batch).expect("records");
    for chunk in 0..pins.div_ceil(1_000) {
        let mut batch = Batch::new();
        for i in chunk * 1_000..((chunk + 1) * 1_000).min(pins) {
            let until = match i % 3 {
                0 => UnixNanos::NEVER,
                1 => UnixNanos::from_secs(7_258_118_400),
                _ => UnixNanos::from_secs(3_600),
            };
            batch.put_pin(
                PinKey::new(name(i), ""),
                ImagePin {
                    created_at: UnixNanos::from_secs(1_000 + i as i64),
                    until,
                    reason: format!("rollout {i}"),
                },
            );
        }
        store.apply(&batch).expect("pins");
    }
}

/// The outcome of one run.
struct Run {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

/// The commands under test, each with the arguments after the command name.
const COMMANDS: [(&str, &[&str]); 3] = [
    ("pins", &["pins", "--output", "json"]),
    (
        "gc --dry-run",
        &[
            "gc",
            "--dry-run",
            "--output",
            "json",
            "--image-gc-high-threshold=100",
        ],
    ),
    (
        "prune --dry-run",
        &[
            "prune",
            "--dry-run",
            "--output",
            "json",
            "--minimum-image-ttl-duration=0s",
        ],
    ),
];

fn run(args: &[&str], db: &Path, socket: &Path, endpoint: &str) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_imagekeeper"));
    command
        .args(args)
        .arg(format!("--db={}", db.display()))
        .arg(format!("--admin-socket={}", socket.display()));
    if args[0] != "pins" {
        command.arg(format!("--container-runtime-endpoint={endpoint}"));
    }
    let out = command.output().expect("run imagekeeper");
    Run {
        code: out.status.code(),
        signal: out.status.signal(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The flips: `(offset, mask)`. The sweep flips one bit at each offset 0-255 (the header
/// and its two commit slots) and at 744 offsets spread evenly over the rest; the sample flips
/// a seeded byte that holds something three times in four (the file is mostly preallocated
/// zeros) with a seeded mask.
fn flips(bytes: &[u8], sweep: bool) -> Vec<(usize, u8)> {
    if sweep {
        let mut out: Vec<(usize, u8)> = (0..256).map(|i| (i, 1u8 << (i % 8))).collect();
        let rest = 744;
        let step = (bytes.len() - 256) / rest;
        out.extend((0..rest).map(|k| (256 + k * step + k % step.max(1), 1u8 << (k % 8))));
        return out;
    }
    let nonzero: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != 0).collect();
    let mut rng = fastrand::Rng::with_seed(0x41_F11B);
    (0..24)
        .map(|_| {
            let i = if rng.usize(..4) < 3 {
                nonzero[rng.usize(..nonzero.len())]
            } else {
                rng.usize(..bytes.len())
            };
            (i, rng.u8(1..=255))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_commands_on_a_damaged_database_print_the_undamaged_answer_or_refuse() {
    let sweep = std::env::var_os("IMAGEKEEPER_FLIP_SWEEP").is_some_and(|v| v == "1");
    // The sweep's database: 10,000 pins, or IMAGEKEEPER_FLIP_SWEEP_PINS.
    let pins: u64 = match std::env::var("IMAGEKEEPER_FLIP_SWEEP_PINS") {
        Ok(n) if sweep => n
            .parse()
            .expect("IMAGEKEEPER_FLIP_SWEEP_PINS: a number of pins"),
        _ if sweep => 10_000,
        _ => 1_000,
    };
    let AgentFixture {
        fake, dir, socket, ..
    } = AgentFixture::builder()
        .images((0..IMAGES).map(runtime_image))
        .image_fs_used(50_000)
        .socket("no-agent.sock")
        .start()
        .await;
    let endpoint = fake.endpoint();
    let good = dir.path().join("good.redb");
    build(&good, pins);
    let pristine = std::fs::read(&good).expect("read the database");
    let victim = dir.path().join("victim.redb");
    let victim_shown = victim.to_str().expect("utf8 path").to_owned();

    std::fs::write(&victim, &pristine).expect("write the undamaged copy");
    let undamaged: Vec<Run> = COMMANDS
        .iter()
        .map(|(_, args)| run(args, &victim, &socket, &endpoint))
        .collect();
    for ((name, _), r) in COMMANDS.iter().zip(&undamaged) {
        assert_eq!(
            r.code,
            Some(0),
            "{name} on the undamaged file: {}",
            r.stderr
        );
    }
    // The answers are worth comparing: active and expired pins, a plan that removes some.
    assert!(
        undamaged[0].stdout.contains("\"active\": true")
            && undamaged[0].stdout.contains("\"active\": false"),
        "{}",
        &undamaged[0].stdout[..undamaged[0].stdout.len().min(2000)]
    );
    assert!(
        undamaged[2].stdout.contains("sha256:"),
        "{}\n{}",
        undamaged[2].stdout,
        undamaged[2].stderr
    );

    let cases = flips(&pristine, sweep);
    let mut failures = Vec::new();
    let (mut same, mut refused) = (0usize, 0usize);
    for &(at, mask) in &cases {
        let mut bytes = pristine.clone();
        bytes[at] ^= mask;
        for ((name, args), want) in COMMANDS.iter().zip(&undamaged) {
            std::fs::write(&victim, &bytes).expect("write the damaged copy");
            let r = run(args, &victim, &socket, &endpoint);
            let case = format!("{name}, byte {at} flipped with {mask:#04x}");
            if r.signal.is_some() || r.stderr.contains("panicked") {
                failures.push(format!("{case}: crashed ({:?}): {}", r.signal, r.stderr));
                continue;
            }
            match r.code {
                Some(0) if r.stdout == want.stdout => same += 1,
                Some(0) => failures.push(format!(
                    "{case}: exit 0 with an answer that differs from the undamaged file's"
                )),
                Some(1 | 2) if r.stderr.contains(&victim_shown) => refused += 1,
                code => failures.push(format!(
                    "{case}: exit {code:?} without naming the file: {}",
                    r.stderr
                )),
            }
            if std::fs::read(&victim).expect("read the damaged copy") != bytes {
                failures.push(format!("{case}: the file's bytes changed"));
            }
        }
    }
    eprintln!(
        "{} flips x {} commands ({} pins): {same} answered as undamaged, {refused} refused, {} \
         failed",
        cases.len(),
        COMMANDS.len(),
        pins,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        cases.len() * COMMANDS.len(),
        failures.join("\n")
    );
    assert!(
        refused > 0,
        "no damaged copy was refused: the flips prove little"
    );
}
