//! The schema 1 → 2 upgrade under power loss: the v1 fixture on a simulated disk is opened
//! (which upgrades it in one transaction) with power cut at every disk operation of the
//! upgrade and a few crash images each; after recovery the disk holds either the v1 file or
//! the v2 file, whole, never a mix, and every record, backoff entry and meta value is intact.

use std::collections::BTreeMap;
use std::path::Path;

use super::open::schema_on_disk;
use super::power_loss::PowerLossDisk;
use super::power_loss_harness::Model;
use super::{CommitMode, Store};
use crate::model::UnixNanos;

const V1_TABLES: [&str; 4] = ["backoff", "eviction", "images", "meta"];
const V2_TABLES: [&str; 6] = ["backoff", "eviction", "images", "journal", "meta", "names"];

fn fixture() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v1.redb");
    std::fs::read(path).expect("the v1 fixture")
}

fn open(disk: &PowerLossDisk) -> Result<Store, super::StoreError> {
    Store::open_with_backend(
        disk.backend(),
        Path::new("<power-loss disk>"),
        UnixNanos(1),
        CommitMode::Durable,
    )
}

/// The model without the schema version, which the upgrade changes.
fn content(model: &Model) -> Model {
    let mut m = model.clone();
    m.meta.remove(super::meta_keys::SCHEMA_VERSION);
    m
}

#[test]
fn a_crash_during_the_upgrade_leaves_the_v1_file_or_the_v2_file_never_a_mix() {
    // The fixture's content, read through an upgrade without a cut.
    let clean = PowerLossDisk::new(fixture(), None);
    let before = clean.ops();
    let store = open(&clean).expect("upgrade");
    let want = Model::read(&store).expect("read");
    assert_eq!(want.records.len(), 4);
    assert_eq!(
        store.meta(super::meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(2)
    );
    drop(store);
    let upgrade_ops = clean.ops() - before;
    assert!(upgrade_ops > 0);

    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for cut in 0..=upgrade_ops {
        for seed in 0..4u64 {
            let disk = PowerLossDisk::new(fixture(), Some(cut));
            let outcome = open(&disk);
            disk.cut_now();
            drop(outcome);
            let after = PowerLossDisk::new(disk.crash_image(seed * 7919 + cut), None);
            let (version, tables) = schema_on_disk(&after)
                .unwrap_or_else(|e| panic!("cut {cut} seed {seed}: recovery failed: {e}"));
            let case = format!("cut {cut} seed {seed}: version {version:?}, tables {tables:?}");
            match version {
                Some(1) => assert_eq!(tables, V1_TABLES, "{case}"),
                Some(2) => assert_eq!(tables, V2_TABLES, "{case}"),
                _ => panic!("{case}"),
            }
            *seen.entry(version.unwrap_or(0)).or_default() += 1;
            // Either way the content is whole, and an open (upgrading a v1) checks clean.
            let mut store = open(&after).unwrap_or_else(|e| panic!("{case}: reopen: {e}"));
            let found = Model::read(&store).expect("read");
            assert_eq!(content(&found), content(&want), "{case}");
            assert!(store.check().expect("check").is_empty(), "{case}");
        }
    }
    // Both outcomes occur: the cut lands before and after the upgrade's commit.
    assert!(seen.contains_key(&1) && seen.contains_key(&2), "{seen:?}");
}
