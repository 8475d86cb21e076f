//! The schema upgrades under power loss: the v1 and v2 fixtures on a simulated disk are
//! opened (which upgrades them one transaction per step, 1 → 2 → 3) with power cut at every
//! disk operation of the upgrade and a few crash images each; after recovery the disk holds
//! the file of one schema version, whole, never a mix, and every record, backoff entry and
//! meta value is intact (and the eviction order with it).

use std::collections::BTreeMap;
use std::path::Path;

use super::open::schema_on_disk;
use super::power_loss::PowerLossDisk;
use super::power_loss_harness::Model;
use super::{CommitMode, Store};
use crate::model::UnixNanos;

const V1_TABLES: [&str; 4] = ["backoff", "eviction", "images", "meta"];
const V2_TABLES: [&str; 6] = ["backoff", "eviction", "images", "journal", "meta", "names"];
const V3_TABLES: [&str; 6] = [
    "backoff",
    "eviction_prefix",
    "images",
    "journal",
    "meta",
    "names",
];

fn fixture(version: i64) -> Vec<u8> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("migrations/fixtures/v{version}.redb"));
    std::fs::read(path).expect("the fixture")
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

/// The keys in eviction order.
fn eviction_order(store: &Store) -> Vec<crate::model::RecordKey> {
    store
        .eviction_order()
        .expect("scan")
        .map(|r| r.expect("entry").key)
        .collect()
}

#[test]
fn a_crash_during_the_upgrade_from_v1_leaves_one_whole_schema_never_a_mix() {
    crash_during_upgrade(1, 4);
}

#[test]
fn a_crash_during_the_upgrade_from_v2_leaves_one_whole_schema_never_a_mix() {
    crash_during_upgrade(2, 2);
}

fn crash_during_upgrade(from: i64, records: usize) {
    // The fixture's content, read through an upgrade without a cut.
    let clean = PowerLossDisk::new(fixture(from), None);
    let before = clean.ops();
    let store = open(&clean).expect("upgrade");
    let want = Model::read(&store).expect("read");
    assert_eq!(want.records.len(), records);
    let want_order = eviction_order(&store);
    let mut by_times: Vec<_> = want.records.iter().collect();
    by_times.sort_by_key(|(k, r)| (r.last_used, r.first_detected, (*k).clone()));
    let sorted: Vec<_> = by_times.into_iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(want_order, sorted);
    assert_eq!(
        store.meta(super::meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(3)
    );
    drop(store);
    let upgrade_ops = clean.ops() - before;
    assert!(upgrade_ops > 0);

    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for cut in 0..=upgrade_ops {
        for seed in 0..4u64 {
            let disk = PowerLossDisk::new(fixture(from), Some(cut));
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
                Some(3) => assert_eq!(tables, V3_TABLES, "{case}"),
                _ => panic!("{case}"),
            }
            assert!(version >= Some(from), "{case}");
            *seen.entry(version.unwrap_or(0)).or_default() += 1;
            // Either way the content is whole, and an open (upgrading an older one) checks
            // clean and walks the same eviction order.
            let mut store = open(&after).unwrap_or_else(|e| panic!("{case}: reopen: {e}"));
            let found = Model::read(&store).expect("read");
            assert_eq!(content(&found), content(&want), "{case}");
            assert_eq!(eviction_order(&store), want_order, "{case}");
            assert!(store.check().expect("check").is_empty(), "{case}");
        }
    }
    // Every version from the fixture's to the current one occurs: the cuts land before,
    // between and after the upgrade's commits.
    let versions: Vec<i64> = seen.keys().copied().collect();
    assert_eq!(versions, (from..=3).collect::<Vec<_>>(), "{seen:?}");
}
