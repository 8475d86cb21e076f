//! The accounting on hand-built containerd states: sharing counted once, the owners' order,
//! orphans and their parent chains, unreferenced blobs, leases (in force, expired, flat),
//! roots, back references, stores on another filesystem, and the unexplained row.

use std::collections::BTreeMap;

use super::*;
use crate::model::{
    ContainerdBlob, ContainerdContainer, ContainerdImage, ContainerdIngest, ContainerdLease,
    ContainerdSnapshot, FileUsage, LeaseResource, NamespaceState, SnapshotKind, SnapshotUsage,
    StoreRoot, TaskState,
};

const BLOCK: u64 = 4096;
const NOW: UnixNanos = UnixNanos(1_800_000_000_000_000_000);
const HOUR: i64 = 3_600_000_000_000;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn blob(digest: &str, size: u64, refs: &[(&str, &str)]) -> ContainerdBlob {
    ContainerdBlob {
        digest: digest.into(),
        size,
        created_at: UnixNanos(NOW.0 - HOUR),
        labels: labels(refs),
    }
}

fn snap(name: &str, parent: &str, bytes: u64, kind: SnapshotKind) -> ContainerdSnapshot {
    ContainerdSnapshot {
        snapshotter: "overlayfs".into(),
        name: name.into(),
        parent: parent.into(),
        kind,
        created_at: UnixNanos(NOW.0 - 2 * HOUR),
        labels: BTreeMap::new(),
        usage: Some(SnapshotUsage { bytes, inodes: 3 }),
    }
}

fn layer(name: &str, parent: &str, bytes: u64) -> ContainerdSnapshot {
    snap(name, parent, bytes, SnapshotKind::Committed)
}

fn image(name: &str, target: &str) -> ContainerdImage {
    ContainerdImage {
        name: name.into(),
        target_digest: target.into(),
        ..ContainerdImage::default()
    }
}

fn container(id: &str, key: &str, task: TaskState) -> ContainerdContainer {
    ContainerdContainer {
        id: id.into(),
        image: "app:1".into(),
        snapshotter: "overlayfs".into(),
        snapshot_key: key.into(),
        created_at: UnixNanos(NOW.0 - HOUR),
        labels: BTreeMap::new(),
        task,
    }
}

/// An image's manifest `m` naming a config `c` (which names the top snapshot `top`) and
/// layers `layers`.
fn image_blobs(m: &str, c: &str, top: &str, layers: &[(&str, u64)]) -> Vec<ContainerdBlob> {
    let mut refs = vec![(
        "containerd.io/gc.ref.content.config".to_owned(),
        c.to_owned(),
    )];
    for (i, (l, _)) in layers.iter().enumerate() {
        refs.push((
            format!("containerd.io/gc.ref.content.l.{i}"),
            (*l).to_owned(),
        ));
    }
    let refs: Vec<(&str, &str)> = refs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut out = vec![
        blob(m, 500, &refs),
        blob(c, 600, &[("containerd.io/gc.ref.snapshot.overlayfs", top)]),
    ];
    out.extend(layers.iter().map(|(l, size)| blob(l, *size, &[])));
    out
}

fn fs(used: u64) -> FilesystemUsage {
    FilesystemUsage {
        path: "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs".into(),
        capacity: 1 << 40,
        used_bytes: used,
        inodes: 1 << 20,
        inodes_used: 100,
        block_size: BLOCK,
        device: Some(7),
    }
}

fn ns(name: &str) -> NamespaceState {
    NamespaceState {
        name: name.into(),
        ..NamespaceState::default()
    }
}

/// Two CRI images sharing a base layer (blob `lbase`, snapshot `base`), app:1 also with a
/// running and a stopped container.
fn two_images() -> ContainerdState {
    let mut k8s = ns("k8s.io");
    k8s.content = image_blobs("m1", "c1", "top1", &[("lbase", 10_000), ("l1", 20_000)]);
    k8s.content.extend(image_blobs(
        "m2",
        "c2",
        "top2",
        &[("lbase", 10_000), ("l2", 30_000)],
    ));
    k8s.content.dedup_by(|a, b| a.digest == b.digest);
    k8s.snapshots = vec![
        layer("base", "", 100_000),
        layer("top1", "base", 200_000),
        layer("top2", "base", 300_000),
        snap("run", "top1", 7_000, SnapshotKind::Active),
        snap("exited", "top1", 9_000, SnapshotKind::Active),
    ];
    k8s.images = vec![
        image("app:1", "m1"),
        image("app@sha256:m1", "m1"),
        image("db:1", "m2"),
    ];
    k8s.containers = vec![
        container("c-run", "run", TaskState::Running),
        container("c-exited", "exited", TaskState::Stopped),
    ];
    ContainerdState {
        namespaces: vec![k8s],
        ..ContainerdState::default()
    }
}

fn find<'a>(report: &'a DiskReport, kind: RowKind, name: &str) -> &'a DiskRow {
    report
        .rows
        .iter()
        .find(|r| r.kind == kind && r.name == name)
        .unwrap_or_else(|| panic!("no {kind:?} row {name}: {:#?}", report.rows))
}

fn blk(n: u64) -> u64 {
    n.div_ceil(BLOCK) * BLOCK
}

#[test]
fn a_layer_shared_by_two_images_is_counted_once_in_the_first_and_shared_by_both() {
    let report = account(&two_images(), &fs(0), "k8s.io", NOW);
    let app = find(&report, RowKind::CriImage, "app:1");
    let db = find(&report, RowKind::CriImage, "db:1");
    assert_eq!(
        app.names,
        ["app:1", "app@sha256:m1"],
        "one row per target digest"
    );
    assert_eq!(app.digest.as_deref(), Some("m1"));
    let base = blk(10_000) + 100_000;
    let app_own = blk(500) + blk(600) + blk(20_000) + 200_000;
    let db_own = blk(500) + blk(600) + blk(30_000) + 300_000;
    assert_eq!(
        app.bytes,
        app_own + base,
        "app:1 comes first and counts the base"
    );
    assert_eq!(db.bytes, db_own, "db:1 does not count the base again");
    assert_eq!(app.referenced_bytes, app_own + base);
    assert_eq!(db.referenced_bytes, db_own + base);
    assert_eq!(
        app.shared_bytes,
        base + 200_000,
        "the base, and top1, which its containers are on"
    );
    assert_eq!(db.shared_bytes, base);
    assert_eq!((app.snapshots, app.blobs), (2, 4));
    let sum: u64 = report.rows.iter().map(|r| r.bytes).sum();
    assert_eq!(sum, report.accounted_bytes);
    assert_eq!(
        report.accounted_bytes,
        app_own + base + db_own + 7_000 + 9_000,
        "every object once"
    );
}

#[test]
fn a_containers_writable_layer_is_its_own_and_running_ones_come_first() {
    let report = account(&two_images(), &fs(0), "k8s.io", NOW);
    let kinds: Vec<(RowKind, &str)> = report
        .rows
        .iter()
        .map(|r| (r.kind, r.name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (RowKind::CriImage, "app:1"),
            (RowKind::CriImage, "db:1"),
            (RowKind::CriContainer, "c-run"),
            (RowKind::CriContainer, "c-exited"),
        ]
    );
    let run = find(&report, RowKind::CriContainer, "c-run");
    assert_eq!((run.bytes, run.snapshots), (7_000, 1));
    assert_eq!(run.state.as_deref(), Some("running"));
    assert_eq!(
        run.shared_bytes,
        200_000 + 100_000,
        "its image's layers, shared"
    );
    assert_eq!(run.referenced_bytes, 7_000 + 300_000);
    let exited = find(&report, RowKind::CriContainer, "c-exited");
    assert_eq!(
        (exited.bytes, exited.state.as_deref()),
        (9_000, Some("stopped"))
    );
}

#[test]
fn a_container_whose_image_is_gone_holds_the_layers_itself() {
    let mut state = two_images();
    state.namespaces[0]
        .images
        .retain(|i| i.target_digest != "m1");
    let report = account(&state, &fs(0), "k8s.io", NOW);
    let run = find(&report, RowKind::CriContainer, "c-run");
    assert_eq!(
        run.bytes,
        7_000 + 200_000,
        "the running container claims top1"
    );
    let db = find(&report, RowKind::CriImage, "db:1");
    assert!(db.bytes >= 100_000, "db:1 claims the base it shares");
    // app:1's blobs are no longer referenced by anything.
    let unreferenced: Vec<&str> = report
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::UnreferencedBlob)
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(unreferenced, ["l1", "c1", "m1"], "largest first");
}

#[test]
fn an_orphaned_snapshot_has_its_age_and_parent_chain_and_only_its_own_bytes() {
    let mut state = two_images();
    let mut orphan = snap("gone-container", "top2", 55_000, SnapshotKind::Active);
    orphan.created_at = UnixNanos(NOW.0 - 3 * HOUR);
    state.namespaces[0].snapshots.push(orphan);
    state.namespaces[0]
        .snapshots
        .push(layer("dangling", "missing-parent", 1_000));
    let report = account(&state, &fs(0), "k8s.io", NOW);
    let row = find(&report, RowKind::OrphanSnapshot, "gone-container");
    assert_eq!(row.bytes, 55_000);
    assert_eq!(row.inodes, 3);
    assert_eq!(row.snapshot_kind.as_deref(), Some("active"));
    assert_eq!(row.age_seconds, Some(3 * 3600));
    assert_eq!(
        row.parent_chain.as_deref(),
        Some(&["top2".to_owned(), "base".to_owned()][..])
    );
    let dangling = find(&report, RowKind::OrphanSnapshot, "dangling");
    assert_eq!(
        dangling.parent_chain.as_deref(),
        Some(&["missing-parent".to_owned()][..]),
        "a missing parent ends the chain"
    );
    let db = find(&report, RowKind::CriImage, "db:1");
    assert_eq!(
        db.shared_bytes,
        100_000 + blk(10_000),
        "the orphan owns nothing of db:1"
    );
}

#[test]
fn a_parent_loop_ends() {
    let mut state = ContainerdState {
        namespaces: vec![ns("default")],
        ..ContainerdState::default()
    };
    state.namespaces[0].snapshots = vec![layer("a", "b", 1), layer("b", "a", 2)];
    let report = account(&state, &fs(10), "k8s.io", NOW);
    assert_eq!(report.accounted_bytes, 3);
    let a = find(&report, RowKind::OrphanSnapshot, "a");
    assert_eq!(a.parent_chain.as_ref().map(Vec::len), Some(2));
}

#[test]
fn an_unreferenced_blob_is_one_row_for_every_namespace_listing_it_rounded_to_blocks() {
    let mut state = two_images();
    state.namespaces[0].content.push(blob("loose", 5_000, &[]));
    let mut other = ns("default");
    other.content.push(blob("loose", 5_000, &[]));
    state.namespaces.push(other);
    let report = account(&state, &fs(0), "k8s.io", NOW);
    let rows: Vec<&DiskRow> = report
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::UnreferencedBlob)
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].namespace, "k8s.io,default");
    assert_eq!((rows[0].bytes, rows[0].size_bytes), (8192, Some(5_000)));
    assert_eq!(rows[0].age_seconds, Some(3600));
}

#[test]
fn another_namespaces_image_sharing_a_blob_counts_only_what_the_cri_does_not_hold() {
    let mut state = two_images();
    let mut moby = ns("moby");
    moby.content = image_blobs("m9", "c9", "top9", &[("lbase", 10_000), ("l9", 40_000)]);
    moby.snapshots = vec![layer("base9", "", 100_000), layer("top9", "base9", 400_000)];
    moby.images = vec![image("tool:1", "m9")];
    moby.containers = vec![container("t", "rw-t", TaskState::None)];
    moby.snapshots
        .push(snap("rw-t", "top9", 3_000, SnapshotKind::Active));
    state.namespaces.push(moby);
    let report = account(&state, &fs(0), "k8s.io", NOW);
    let tool = find(&report, RowKind::Image, "tool:1");
    assert_eq!(tool.namespace, "moby");
    // Blob lbase is one file for both namespaces: the CRI's image counted it; the snapshots
    // are the namespace's own.
    assert_eq!(
        tool.bytes,
        blk(500) + blk(600) + blk(40_000) + 100_000 + 400_000
    );
    assert_eq!(
        tool.shared_bytes,
        blk(10_000) + 100_000 + 400_000,
        "the blob, and the layers its container is on"
    );
    let t = find(&report, RowKind::Container, "t");
    assert_eq!((t.bytes, t.state.as_deref()), (3_000, Some("no task")));
}

fn lease(
    id: &str,
    expire: Option<&str>,
    flat: bool,
    resources: Vec<LeaseResource>,
) -> ContainerdLease {
    let mut l = labels(&[]);
    if let Some(e) = expire {
        l.insert("containerd.io/gc.expire".into(), e.into());
    }
    if flat {
        l.insert("containerd.io/gc.flat".into(), String::new());
    }
    ContainerdLease {
        id: id.into(),
        created_at: UnixNanos(NOW.0 - HOUR),
        labels: l,
        resources,
    }
}

#[test]
fn leases_hold_what_nothing_else_holds_expired_ones_last_and_flat_ones_only_what_they_name() {
    let mut state = ContainerdState {
        namespaces: vec![ns("default")],
        ..ContainerdState::default()
    };
    let d = &mut state.namespaces[0];
    d.content = image_blobs("m", "c", "top", &[("l", 50_000)]);
    d.content.push(blob("x", 100, &[]));
    d.snapshots = vec![layer("top", "", 70_000), layer("pulled", "", 9_000)];
    d.ingests = vec![ContainerdIngest {
        reference: "default/1/ingest".into(),
        offset: 4_097,
        total: 10_000,
        expected: "y".into(),
        updated_at: UnixNanos(NOW.0 - HOUR),
    }];
    d.leases = vec![
        // Expired: comes after the one in force, and claims what it alone holds.
        lease(
            "old",
            Some("2020-01-01T00:00:00Z"),
            false,
            vec![LeaseResource::Snapshot("overlayfs".into(), "pulled".into())],
        ),
        lease(
            "flat",
            Some("2099-01-01T00:00:00Z"),
            true,
            vec![
                LeaseResource::Content("m".into()),
                LeaseResource::Other("streams".into(), "s".into()),
            ],
        ),
        lease(
            "pull",
            None,
            false,
            vec![
                LeaseResource::Content("m".into()),
                LeaseResource::Ingest("default/1/ingest".into()),
            ],
        ),
    ];
    let report = account(&state, &fs(0), "k8s.io", NOW);
    let names: Vec<(&str, Option<&str>)> = report
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::Lease)
        .map(|r| (r.name.as_str(), r.state.as_deref()))
        .collect();
    assert_eq!(
        names,
        [
            ("flat", Some("active")),
            ("pull", Some("active")),
            ("old", Some("expired"))
        ]
    );
    let flat = find(&report, RowKind::Lease, "flat");
    assert_eq!(
        flat.bytes,
        blk(500),
        "a flat lease holds the manifest, not what it names"
    );
    assert_eq!(flat.flat, Some(true));
    assert_eq!(flat.expires_at.as_deref(), Some("2099-01-01T00:00:00Z"));
    let pull = find(&report, RowKind::Lease, "pull");
    assert_eq!(
        pull.bytes,
        blk(600) + blk(50_000) + 70_000 + 8192,
        "the rest of the image and the ingest"
    );
    assert_eq!(pull.shared_bytes, blk(500));
    let old = find(&report, RowKind::Lease, "old");
    assert_eq!(
        (old.bytes, old.expires_at.as_deref()),
        (9_000, Some("2020-01-01T00:00:00Z"))
    );
    let x = find(&report, RowKind::UnreferencedBlob, "x");
    assert_eq!(x.bytes, BLOCK);
}

#[test]
fn back_references_hold_and_residual_objects_say_whether_a_gc_root_label_keeps_them() {
    let mut state = ContainerdState {
        namespaces: vec![ns("buildkit")],
        ..ContainerdState::default()
    };
    let b = &mut state.namespaces[0];
    b.content = vec![
        blob("rooted", 10, &[("containerd.io/gc.root", "x")]),
        // Back reference: the image `img` holds `child`.
        blob("child", 20, &[("containerd.io/gc.bref.image", "img")]),
        blob("target", 30, &[]),
    ];
    let mut cache = layer("cache", "", 5_000);
    cache.labels = labels(&[("containerd.io/gc.root", "")]);
    b.snapshots = vec![cache];
    b.images = vec![image("img", "target")];
    b.ingests = vec![ContainerdIngest {
        reference: "abandoned".into(),
        offset: 1,
        ..ContainerdIngest::default()
    }];
    let report = account(&state, &fs(0), "k8s.io", NOW);
    let img = find(&report, RowKind::Image, "img");
    assert_eq!(
        (img.bytes, img.blobs),
        (2 * BLOCK, 2),
        "target and its back-referenced child"
    );
    let rooted = find(&report, RowKind::UnreferencedBlob, "rooted");
    assert_eq!((rooted.bytes, rooted.gc_root), (BLOCK, Some(true)));
    let cache = find(&report, RowKind::OrphanSnapshot, "cache");
    assert_eq!((cache.bytes, cache.gc_root), (5_000, Some(true)));
    let ingest = find(&report, RowKind::Ingest, "abandoned");
    assert_eq!((ingest.bytes, ingest.gc_root), (BLOCK, Some(false)));
}

#[test]
fn the_unexplained_row_is_usage_minus_the_sum_and_may_be_negative() {
    let mut state = two_images();
    state.metadata_files = vec![
        FileUsage {
            path: "/var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db".into(),
            bytes: 65_536,
            device: Some(7),
        },
        FileUsage {
            path: "/elsewhere/metadata.db".into(),
            bytes: 1_000,
            device: Some(8),
        },
    ];
    let accounted = account(&state, &fs(0), "k8s.io", NOW).accounted_bytes;
    for (used, unexplained) in [
        (accounted + 1_000_000, 1_000_000i64),
        (accounted, 0),
        (accounted - 4096, -4096),
    ] {
        let report = account(&state, &fs(used), "k8s.io", NOW);
        assert_eq!(report.unexplained_bytes, unexplained, "used {used}");
        let pct = unexplained as f64 * 100.0 / used as f64;
        assert!((report.unexplained_percent - pct).abs() < 1e-9);
    }
    let report = account(&state, &fs(accounted), "k8s.io", NOW);
    let meta = find(
        &report,
        RowKind::ContainerdMetadata,
        "/elsewhere/metadata.db",
    );
    assert_eq!((meta.bytes, meta.other_filesystem_bytes), (0, 1_000));
    assert_eq!(report.other_filesystem_bytes, 1_000);
    let total = report
        .totals
        .iter()
        .find(|t| t.kind == RowKind::ContainerdMetadata);
    assert_eq!(total.map(|t| (t.rows, t.bytes)), Some((2, 65_536)));
    assert_eq!(
        account(&ContainerdState::default(), &fs(0), "k8s.io", NOW).unexplained_percent,
        0.0
    );
}

#[test]
fn a_store_on_another_filesystem_is_listed_but_not_summed() {
    let mut state = two_images();
    state.content_store = Some(StoreRoot {
        name: "content".into(),
        root: Some("/mnt/content".into()),
        device: Some(99),
    });
    state.snapshotters = vec![StoreRoot {
        name: "overlayfs".into(),
        root: None,
        device: Some(7),
    }];
    let report = account(&state, &fs(0), "k8s.io", NOW);
    let app = find(&report, RowKind::CriImage, "app:1");
    assert_eq!(app.bytes, 300_000, "only its snapshots");
    assert_eq!(
        app.other_filesystem_bytes,
        blk(500) + blk(600) + blk(10_000) + blk(20_000)
    );
    assert_eq!(app.blobs, 0);
}

/// Every key a JSON value has, as `a.b` and `a[].b` paths.
fn keys(value: &serde_json::Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let path = match prefix {
                    "" => k.clone(),
                    p => format!("{p}.{k}"),
                };
                out.insert(path.clone());
                keys(v, &path, out);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                if item.is_object() {
                    keys(item, &format!("{prefix}[]"), out);
                }
            }
        }
        _ => {}
    }
}

#[test]
fn the_json_fields_documented_are_exactly_those_the_report_has() {
    let mut state = two_images();
    state.namespaces[0]
        .snapshots
        .push(snap("o", "top1", 1, SnapshotKind::Active));
    state.namespaces[0].content.push(blob("loose", 1, &[]));
    state.namespaces[0].ingests.push(ContainerdIngest {
        reference: "r".into(),
        expected: "e".into(),
        updated_at: NOW,
        ..ContainerdIngest::default()
    });
    state.namespaces[0]
        .leases
        .push(lease("l", Some("2099-01-01T00:00:00Z"), true, Vec::new()));
    state.warnings.push("w".into());
    let report = account(&state, &fs(1), "k8s.io", NOW);
    let value = serde_json::to_value(&report).expect("the report serializes");
    let mut seen = std::collections::BTreeSet::new();
    keys(&value, "", &mut seen);
    // A parent of nested fields is documented by its children.
    seen.retain(|k| !matches!(k.as_str(), "filesystem" | "rows" | "totals"));
    let documented: std::collections::BTreeSet<String> =
        JSON_FIELDS.iter().map(|(k, _)| (*k).to_owned()).collect();
    assert_eq!(
        seen, documented,
        "JSON_FIELDS and the report's fields differ"
    );
    let kinds: Vec<&str> = report.rows.iter().map(|r| r.kind.as_str()).collect();
    for kind in kinds {
        assert_eq!(
            serde_json::to_value(
                report
                    .rows
                    .iter()
                    .find(|r| r.kind.as_str() == kind)
                    .map(|r| r.kind)
            )
            .expect("a kind serializes"),
            serde_json::json!(kind)
        );
    }
}

#[test]
fn prune_orphans_plans_old_leftovers_of_named_namespaces_children_first_and_nothing_held() {
    let mut state = two_images();
    let k8s = &mut state.namespaces[0];
    let old = |name: &str, parent: &str, hours: i64| {
        let mut s = snap(name, parent, 1_000, SnapshotKind::Active);
        s.created_at = UnixNanos(NOW.0 - hours * HOUR);
        s
    };
    k8s.snapshots.push(old("leaf", "mid", 5));
    k8s.snapshots.push(old("mid", "top1", 5));
    k8s.snapshots.push(old("young", "top1", 0));
    // An old orphan whose child is young: the child stays, so the parent does too.
    k8s.snapshots.push(old("old-parent", "top1", 5));
    k8s.snapshots.push(old("young-child", "old-parent", 0));
    k8s.content.push(blob("k8s-only", 100, &[]));
    k8s.content.push(blob("shared", 100, &[]));
    let mut other = ns("default");
    other.content.push(blob("shared", 100, &[]));
    state.namespaces.push(other);
    let report = account(&state, &fs(0), "k8s.io", NOW);

    let plan = orphan_plan(&report, 3600, &["k8s.io"]);
    let removals: Vec<(&str, RowKind)> = plan
        .removals
        .iter()
        .map(|r| (r.name.as_str(), r.kind))
        .collect();
    assert_eq!(
        removals,
        [
            ("leaf", RowKind::OrphanSnapshot),
            ("mid", RowKind::OrphanSnapshot),
            ("k8s-only", RowKind::UnreferencedBlob),
        ],
        "a child before its parent; nothing an image or a container holds"
    );
    assert_eq!(plan.bytes, 1_000 + 1_000 + BLOCK);
    let kept: Vec<(&str, &str)> = plan
        .kept
        .iter()
        .map(|k| (k.name.as_str(), k.reason.as_str()))
        .collect();
    assert!(
        kept.iter()
            .any(|(n, r)| *n == "young" && r.starts_with("younger than the minimum age")),
        "{kept:?}"
    );
    assert!(
        kept.iter()
            .any(|(n, r)| *n == "shared" && r.contains("namespace default, which was not named")),
        "{kept:?}"
    );
    assert!(
        kept.iter()
            .any(|(n, r)| *n == "old-parent" && r.starts_with("its child young-child stays")),
        "{kept:?}"
    );
    let both = orphan_plan(&report, 3600, &["k8s.io", "default"]);
    assert!(both.removals.iter().any(|r| r.name == "shared"));
    assert!(
        orphan_plan(&report, 0, &["k8s.io"])
            .removals
            .iter()
            .all(|r| matches!(r.kind, RowKind::OrphanSnapshot | RowKind::UnreferencedBlob)),
    );
}
