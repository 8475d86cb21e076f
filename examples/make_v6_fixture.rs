//! Writes `migrations/fixtures/v6.redb`: a schema-6 database (the `runtime_labels` table) with
//! the v5 fixture's content, upgraded by the schema-6 build, plus one runtime label row and the
//! meta entry `runtime_labels_adopted` (an agent ran on it and adopted its labels). The store
//! tests read it so that every later schema version must still open it (schema 7 adds the
//! `signals` table, empty after the upgrade).
//!
//! Run with the schema-6 build: `cargo run --example make_v6_fixture -- migrations/fixtures/v6.redb`

use std::path::PathBuf;

use imagekeeper::model::{RuntimeLabel, UnixNanos};
use imagekeeper::store::{Batch, Store, meta_keys};

fn main() -> anyhow::Result<()> {
    let path: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("migrations/fixtures/v6.redb"));
    if path.exists() {
        anyhow::bail!("{} exists; remove it first", path.display());
    }
    let v5 = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v5.redb");
    std::fs::copy(&v5, &path)?;
    let store = Store::open(&path, UnixNanos::from_secs(1_700_004_000))?;
    anyhow::ensure!(
        store.meta(meta_keys::SCHEMA_VERSION)? == Some(6),
        "run this with the schema-6 build"
    );
    let mut batch = Batch::new();
    batch.put_runtime_label(
        "registry.k8s.io/pause:3.10".to_owned(),
        RuntimeLabel {
            written_at: UnixNanos::from_secs(1_700_004_100),
            value: "pin".to_owned(),
        },
    );
    batch.set_meta(
        meta_keys::RUNTIME_LABELS_ADOPTED,
        UnixNanos::from_secs(1_700_004_100).0,
    );
    store.apply(&batch)?;
    drop(store);
    // The upgrade's backup of the v5 copy is not part of the fixture.
    let mut backup = path.clone().into_os_string();
    backup.push(".bak-v5");
    std::fs::remove_file(backup)?;
    println!("wrote {}", path.display());
    Ok(())
}
