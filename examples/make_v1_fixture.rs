//! Writes `migrations/fixtures/v1.redb`: a schema-1 database with known records, read by the
//! store tests so that every later schema version must still open it.
//!
//! Run: `cargo run --example make_v1_fixture -- migrations/fixtures/v1.redb`

use std::path::PathBuf;
use std::time::Duration;

use imagekeeper::model::{BackoffEntry, ImageRecord, RecordKey, UnixNanos};
use imagekeeper::store::{Batch, Store, meta_keys};

fn main() -> anyhow::Result<()> {
    let path: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("migrations/fixtures/v1.redb"));
    if path.exists() {
        anyhow::bail!("{} exists; remove it first", path.display());
    }
    let store = Store::open(&path, UnixNanos::from_secs(1_700_000_000))?;
    let mut batch = Batch::new();
    for (id, handler, first, last, size, pinned) in fixture_records() {
        batch.upsert(
            RecordKey::new(id, handler),
            ImageRecord {
                first_detected: UnixNanos::from_secs(first),
                last_used: UnixNanos::from_secs(last),
                size,
                pinned,
            },
        );
    }
    batch.put_backoff(
        "pod-uid-1_registry.example/app:broken".to_owned(),
        BackoffEntry {
            backoff: Duration::from_secs(40),
            last_update: UnixNanos::from_secs(1_700_000_500),
            last_error: "ErrImagePull: rpc error: code = NotFound desc = not found".to_owned(),
        },
    );
    batch.set_meta(
        meta_keys::LAST_DETECT,
        UnixNanos::from_secs(1_700_000_600).0,
    );
    store.apply(&batch)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// (id, handler, first detected s, last used s, size, pinned) — the same table the store
/// tests expect.
fn fixture_records() -> Vec<(&'static str, &'static str, i64, i64, u64, bool)> {
    vec![
        (
            "sha256:0410e513415e62ba17f2362099aa7f44c71c379344c08ff9a565f145be9dfa26",
            "",
            1_700_000_000,
            1_700_000_600,
            1_088_964,
            true,
        ),
        (
            "sha256:ee91f6568d15085a44bda25832255be39b27b6c31a5650b0e52e39fe2d0baa60",
            "",
            1_700_000_000,
            0,
            1_088_852,
            false,
        ),
        (
            "sha256:51d22a12d89b69d6e2d33af188455f089a1f71f72ccb71ec8042a6873b5fe61c",
            "",
            1_700_000_100,
            1_700_000_200,
            22_063_620,
            false,
        ),
        (
            "sha256:51d22a12d89b69d6e2d33af188455f089a1f71f72ccb71ec8042a6873b5fe61c",
            "gpu",
            1_700_000_300,
            1_700_000_300,
            22_063_620,
            false,
        ),
    ]
}
