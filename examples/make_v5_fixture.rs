//! Writes `migrations/fixtures/v5.redb`: a schema-5 database (the `uses`, `pulls` and `warm`
//! tables) with the v4 fixture's content (records, names, a journal holding two imagekeeper
//! removals (one pulled again) and one external removal, one pull backoff entry, two pins) plus
//! one use interval, one pull and the agent's `instance_id` (an agent ran on it and labelled
//! containerd's images as that instance). The store tests read it so that every later schema
//! version must still open it (schema 6 adds the `runtime_labels` table, empty after the upgrade,
//! which the agent's first reconcile fills once from this instance's labels).
//!
//! Run: `cargo run --example make_v5_fixture -- migrations/fixtures/v5.redb`

use std::path::PathBuf;

use imagekeeper::model::{
    BackoffEntry, EvictionNote, FsUsage, ImageNames, ImagePin, ImageRecord, PinKey, PullEntry,
    PullKey, PullOrigin, RecordKey, RemovalReason, UnixNanos,
};
use imagekeeper::store::{Batch, Store, meta_keys};

const PAUSE: &str = "sha256:0410e513415e62ba17f2362099aa7f44c71c379344c08ff9a565f145be9dfa26";
const BUSYBOX: &str = "sha256:51d22a12d89b69d6e2d33af188455f089a1f71f72ccb71ec8042a6873b5fe61c";
const ALPINE: &str = "sha256:ee91f6568d15085a44bda25832255be39b27b6c31a5650b0e52e39fe2d0baa60";
const OTHER: &str = "sha256:c0ffee0000000000000000000000000000000000000000000000000000000000";

fn secs(s: i64) -> UnixNanos {
    UnixNanos::from_secs(s)
}

fn names(tag: &str, repo: &str) -> ImageNames {
    ImageNames {
        repo_tags: vec![tag.to_owned()],
        repo_digests: vec![format!("{repo}@sha256:{}", "ab".repeat(32))],
    }
}

fn main() -> anyhow::Result<()> {
    let path: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("migrations/fixtures/v5.redb"));
    if path.exists() {
        anyhow::bail!("{} exists; remove it first", path.display());
    }
    let store = Store::open(&path, secs(1_700_000_000))?;
    let record = |first, last, size, pinned| ImageRecord {
        first_detected: secs(first),
        last_used: secs(last),
        size,
        pinned,
    };
    let mut batch = Batch::new();
    let images = [
        (
            PAUSE,
            record(1_700_000_000, 1_700_000_600, 1_088_964, true),
            names("registry.k8s.io/pause:3.10", "registry.k8s.io/pause"),
        ),
        (
            BUSYBOX,
            record(1_700_000_100, 1_700_000_200, 22_063_620, false),
            names(
                "docker.io/library/busybox:1.35",
                "docker.io/library/busybox",
            ),
        ),
        (
            ALPINE,
            record(1_700_000_000, 0, 1_088_852, false),
            names("docker.io/library/alpine:3.19", "docker.io/library/alpine"),
        ),
        (
            OTHER,
            record(1_700_000_000, 1_700_000_050, 5_000, false),
            names("registry.example/other:1", "registry.example/other"),
        ),
    ];
    for (id, record, names) in &images {
        batch.upsert(RecordKey::new(*id, ""), *record);
        batch.set_names(RecordKey::new(*id, ""), names.clone());
    }
    store.apply(&batch)?;
    // GC removes busybox (rank 1) and alpine (rank 2) for space.
    let fs = Some(FsUsage {
        capacity: 100_000_000,
        used_before: 90_000_000,
        target_used: 80_000_000,
    });
    let mut gc = Batch::new();
    for (id, rank) in [(BUSYBOX, 1), (ALPINE, 2)] {
        gc.evict(
            RecordKey::new(id, ""),
            EvictionNote {
                removed_at: secs(1_700_001_000),
                reason: RemovalReason::Space,
                rank,
                fs,
            },
        );
    }
    store.apply(&gc)?;
    // Someone else removes the other image; a detect notices.
    let mut detect = Batch::new();
    detect.remove_unlisted_journaled(
        RecordKey::new(OTHER, ""),
        secs(1_700_000_050),
        secs(1_700_002_000),
    );
    store.apply(&detect)?;
    // busybox is pulled again.
    let mut pull = Batch::new();
    pull.mark_used(
        RecordKey::new(BUSYBOX, ""),
        secs(1_700_003_000),
        Some(22_063_620),
    );
    store.apply(&pull)?;
    let mut backoff = Batch::new();
    backoff.put_backoff(
        "pod-1_registry.example/missing:1".to_owned(),
        BackoffEntry {
            backoff: std::time::Duration::from_secs(20),
            last_update: secs(1_700_003_100),
            last_error: "ErrImagePull: not found".to_owned(),
        },
    );
    store.apply(&backoff)?;
    let mut pins = Batch::new();
    pins.put_pin(
        PinKey::new("registry.k8s.io/pause:3.10", ""),
        ImagePin {
            created_at: secs(1_700_003_200),
            until: UnixNanos::NEVER,
            reason: "the sandbox image".to_owned(),
        },
    );
    pins.put_pin(
        PinKey::new("docker.io/library/busybox:1.35", "runsc"),
        ImagePin {
            created_at: secs(1_700_003_300),
            until: secs(1_700_090_000),
            reason: String::new(),
        },
    );
    store.apply(&pins)?;
    let mut history = Batch::new();
    history.observe_uses(secs(1_700_003_400), vec![RecordKey::new(PAUSE, "")]);
    history.record_pull(
        PullKey {
            at: secs(1_700_003_000),
            key: RecordKey::new(BUSYBOX, ""),
        },
        PullEntry {
            size: 22_063_620,
            origin: PullOrigin::Pull,
            took: std::time::Duration::from_secs(3),
            name: "docker.io/library/busybox:1.35".to_owned(),
        },
    );
    store.apply(&history)?;
    let mut meta = Batch::new();
    meta.set_meta(meta_keys::LAST_DETECT, secs(1_700_002_000).0);
    // The agent's instance (`agent::INSTANCE_ID_META`), as `io.imagekeeper.instance` carries
    // it: 00000000c0ffee05.
    meta.set_meta("instance_id", 0xc0ffee05);
    store.apply(&meta)?;
    println!("wrote {}", path.display());
    Ok(())
}
