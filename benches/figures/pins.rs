//! Pins beside image names (issue 53): one detect of the real manager over a scripted runtime
//! listing 10,000 images (a tag and a repo digest each) with 10,000 pins in force (by tag, by
//! digest, by id, or naming nothing listed). Before the pins met the images through an index
//! this was a parse of both names per pin and image (10^8 pairs); the target is a detect
//! under a second. Asserts after every cycle that exactly the named images are kept as pins.

use std::path::Path;
use std::sync::Arc;

use imagekeeper::gc::{GcConfig, ImageGcManager, KeepReason};
use imagekeeper::model::{ImageId, ImagePin, PinKey, RuntimeImage, UnixNanos};
use imagekeeper::replay::ScriptedRuntime;
use imagekeeper::store::{Batch, Store};

use crate::report::{Figures, Stamp, median};
use crate::synth::secs;

/// Images and pins of the figure.
const N: usize = 10_000;

fn id(i: usize) -> String {
    format!("sha256:{i:064x}")
}

/// The pin `i`: by tag, by repo digest, by id, or naming nothing listed (every fourth).
fn pin_name(i: usize) -> String {
    match i % 4 {
        0 => format!("registry.example/team/app-{i}:1"),
        1 => format!("registry.example/team/app-{i}@{}", id(i)),
        2 => id(i),
        _ => format!("registry.example/team/absent-{i}:1"),
    }
}

/// `detect_pins_10k_x_10k_ms` (target: under 1,000 ms) and its wall time.
pub fn figures(work: &Path, quick: bool, figures: &mut Figures) {
    let path = work.join("pins.redb");
    let store = Arc::new(Store::open(&path, UnixNanos(secs(1))).expect("open store"));
    let mut batch = Batch::new();
    for i in 0..N {
        batch.put_pin(
            PinKey::new(pin_name(i), ""),
            ImagePin {
                created_at: UnixNanos(secs(1)),
                until: UnixNanos::NEVER,
                reason: String::new(),
            },
        );
    }
    store.apply(&batch).expect("10,000 pins");
    let runtime = ScriptedRuntime::new();
    runtime.state().images = (0..N)
        .map(|i| RuntimeImage {
            id: ImageId::new(id(i)),
            repo_tags: vec![format!("registry.example/team/app-{i}:1")],
            repo_digests: vec![format!("registry.example/team/app-{i}@{}", id(i))],
            size: 1,
            ..RuntimeImage::default()
        })
        .collect();
    runtime.state().fs = Some((1 << 40, 1 << 39));
    let manager = ImageGcManager::new(runtime, store, GcConfig::default()).expect("default config");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let rounds = if quick { 3 } else { 7 };
    let (mut cpu_ms, mut wall_ms) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let started = Stamp::now();
        rt.block_on(manager.detect(UnixNanos(secs(2 + round as i64))))
            .expect("detect");
        let (cpu, wall) = started.elapsed();
        cpu_ms.push(cpu / 1e6);
        wall_ms.push(wall / 1e6);
        let pinned = manager
            .last_keeps()
            .expect("a detect ran")
            .iter()
            .filter(|k| k.why == KeepReason::Pin)
            .count();
        assert_eq!(pinned, N / 4 * 3, "round {round}: the images the pins name");
    }
    println!(
        "pins: {rounds} detects of {N} pins beside {N} images, {} kept as pinned after each (asserted)",
        N / 4 * 3
    );
    drop(manager);
    let _ = std::fs::remove_file(&path);
    figures.target(
        "detect_pins_10k_x_10k_ms",
        median(&mut cpu_ms),
        "ms",
        "<=",
        1000.0,
    );
    figures.add("detect_pins_10k_x_10k_wall_ms", median(&mut wall_ms), "ms");
}
