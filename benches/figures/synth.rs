//! Synthetic nodes: what the runtime lists and what the store holds, from one fixed seed
//! (`fastrand::Rng::with_seed`, the repository's one seeded generator). 10 % of the images in
//! use, 5 % pinned, ids `sha256:` + 64 hex, sizes 5 MB..5 GB, first detected 1 h..90 days ago.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use fastrand::Rng;
use imagekeeper::gc::images_in_use;
use imagekeeper::model::{
    ContainerState, ImageId, ImageNames, ImageRecord, RecordKey, RuntimeContainer, RuntimeImage,
    UnixNanos,
};
use imagekeeper::store::{Batch, Store, StoredRecord};

/// The synthetic nodes' "now": 2026-01-01T00:00:00Z.
pub const NOW_SECS: i64 = 1_767_225_600;
pub const SEED: u64 = 0x1a6e_4ee9_e200_0008;

pub fn secs(s: i64) -> i64 {
    s * 1_000_000_000
}

/// 64 hex digits.
pub fn hex64(rng: &mut Rng) -> String {
    format!(
        "{:016x}{:016x}{:016x}{:016x}",
        rng.u64(..),
        rng.u64(..),
        rng.u64(..),
        rng.u64(..)
    )
}

/// A size between 5 MB and 5 GB, bell-shaped in log space (the mean of three uniforms): most
/// images are a few hundred MB.
fn image_size(rng: &mut Rng) -> u64 {
    let (lo, hi) = (5e6f64.ln(), 5e9f64.ln());
    let u = (rng.f64() + rng.f64() + rng.f64()) / 3.0;
    (lo + u * (hi - lo)).exp() as u64
}

/// A node: what the runtime lists and what the store holds.
pub struct Node {
    pub now: UnixNanos,
    pub images: Vec<RuntimeImage>,
    pub containers: Vec<RuntimeContainer>,
    pub in_use: BTreeSet<RecordKey>,
    /// The same keys in a hash set: kubelet's imagesInUse is a Go map.
    pub in_use_hash: HashSet<RecordKey>,
    /// The records, ordered by key (as `Store::records` returns them).
    pub records: Vec<StoredRecord>,
}

/// One synthetic image: 10 % in use, 5 % pinned, 30 % of the rest never used.
pub fn synth_image(rng: &mut Rng, i: usize, now: i64) -> (RuntimeImage, ImageRecord, bool) {
    let id = format!("sha256:{}", hex64(rng));
    let size = image_size(rng);
    let roll = rng.u64(0..100);
    let in_use = roll < 10;
    let pinned = (10..15).contains(&roll);
    let first_detected = now - rng.i64(secs(3600)..secs(90 * 86_400));
    let last_used = if in_use {
        now - rng.i64(0..secs(300))
    } else if rng.u64(0..10) < 3 {
        0
    } else {
        rng.i64(first_detected..now - secs(600))
    };
    let image = RuntimeImage {
        id: ImageId::new(id),
        repo_tags: vec![format!(
            "registry.example.com/team-{}/app-{i}:v1.{}.{}",
            i % 40,
            rng.u64(0..30),
            rng.u64(0..10)
        )],
        repo_digests: Vec::new(),
        size,
        pinned,
        runtime_handler: String::new(),
    };
    let record = ImageRecord {
        first_detected: UnixNanos(first_detected),
        last_used: UnixNanos(last_used),
        size,
        pinned,
    };
    (image, record, in_use)
}

fn container_for(rng: &mut Rng, image: &RuntimeImage) -> RuntimeContainer {
    RuntimeContainer {
        id: hex64(rng),
        pod_sandbox_id: hex64(rng),
        image: image.repo_tags[0].clone(),
        image_id: image.id.clone(),
        state: ContainerState::Running,
        runtime_handler: String::new(),
    }
}

/// Only what the runtime lists for `synth_node(n, seed)`: the same images and containers.
pub fn synth_lists(n: usize, seed: u64) -> (Vec<RuntimeImage>, Vec<RuntimeContainer>) {
    let mut rng = Rng::with_seed(seed ^ n as u64);
    let mut images = Vec::with_capacity(n);
    let mut containers = Vec::new();
    for i in 0..n {
        let (image, _, in_use) = synth_image(&mut rng, i, secs(NOW_SECS));
        if in_use {
            containers.push(container_for(&mut rng, &image));
        }
        images.push(image);
    }
    (images, containers)
}

pub fn synth_node(n: usize, seed: u64) -> Node {
    let mut rng = Rng::with_seed(seed ^ n as u64);
    let now = secs(NOW_SECS);
    let mut images = Vec::with_capacity(n);
    let mut containers = Vec::new();
    let mut records = Vec::with_capacity(n);
    for i in 0..n {
        let (image, record, in_use) = synth_image(&mut rng, i, now);
        if in_use {
            containers.push(container_for(&mut rng, &image));
        }
        records.push(StoredRecord {
            key: image.record_key(),
            record,
        });
        images.push(image);
    }
    records.sort_by(|a, b| a.key.cmp(&b.key));
    let in_use = images_in_use(&images, &containers, &[], None);
    Node {
        now: UnixNanos(now),
        images,
        containers,
        in_use_hash: in_use.iter().cloned().collect(),
        in_use,
        records,
    }
}

/// Synthetic names of image `i`: one repo tag and one repo digest, as long as a registry's.
pub fn synth_names(i: usize, rng: &mut Rng) -> ImageNames {
    let repo = format!("registry.example.com/team-{}/app-{i:06}", i % 37);
    ImageNames {
        repo_tags: vec![format!("{repo}:v{}.{}.{}", i % 9, i % 17, i % 5)],
        repo_digests: vec![format!("{repo}@sha256:{}", hex64(rng))],
    }
}

/// A store at `path` holding `records`, written 1000 records per commit.
pub fn build_store(path: &Path, records: &[StoredRecord], now: UnixNanos) -> Store {
    let store = Store::open(path, now).expect("open a new store");
    for chunk in records.chunks(1000) {
        let mut batch = Batch::new();
        for r in chunk {
            batch.upsert(r.key.clone(), r.record);
        }
        store.apply(&batch).expect("write records");
    }
    assert_eq!(store.len().expect("count"), records.len() as u64);
    store
}
