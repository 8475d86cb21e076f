//! Where the image filesystem's bytes are: the accounting behind `imagekeeper inspect disk`,
//! pure (plain data in, a report out; `now` is an argument). It takes containerd as it is
//! ([`ContainerdState`], read by `cri::ContainerdView`) and what statvfs says the filesystem
//! has in use ([`FilesystemUsage`]), and splits the usage by owner: CRI images (the `k8s.io`
//! namespace, one row per target digest with its names), the CRI's containers (running first)
//! by their writable layers, other namespaces' images and containers, leases (in force, then
//! expired), and what none of them holds: orphaned snapshots (with their age and parent chain),
//! unreferenced blobs, ingests, each saying whether a `containerd.io/gc.root` label keeps it; then containerd's own databases,
//! and the rest, `unexplained` (usage minus the sum, signed: negative when the stores count
//! more than statvfs, e.g. a snapshot's hard links into another).
//!
//! **Each byte once.** What takes room is an object: a content blob (one file per digest for
//! every namespace, sized as its length rounded up to the filesystem's block), a snapshot
//! (its own bytes only: containerd's Usage of an overlayfs snapshot is its upper directory,
//! counted from st_blocks as du counts them, not its parents', so a layer shared by ten
//! images is one snapshot and one object) and an ingest. Owners reach objects along
//! containerd's own reference graph (`graph.rs`: image → target blob → the blobs and the
//! snapshot its labels name → parent snapshots; container → its writable snapshot; lease →
//! its resources), in the order above, and the first owner to reach an object counts it in
//! its `bytes`; an object no owner reaches gets its own row. So the rows' `bytes` sum to the
//! accounted total, each object counted once: `referenced_bytes` is everything an owner
//! reaches (what removing it alone could never free more than) and `shared_bytes` the part of
//! that another owner reaches too. An object in a store on another filesystem (its root's
//! device differs) is in `other_filesystem_bytes` and not in the sum.
//!
//! Invariants: every object is in exactly one row's `bytes` or `other_filesystem_bytes`;
//! `accounted_bytes` is the sum of the rows' `bytes`; `unexplained_bytes = used_bytes −
//! accounted_bytes` exactly (i128 then saturated to i64). Nothing here panics on any state:
//! dangling references are dropped, parent loops end.
//!
//! `orphans.rs` plans `prune --orphans` from a report, `prune.rs` holds what it did and the
//! re-check before each removal; the removals themselves are `cri::ContainerdPruner`'s.

mod graph;
mod orphans;
mod owners;
mod prune;

use serde::{Deserialize, Serialize};

pub use orphans::{OrphanKept, OrphanPlan, OrphanRemoval, orphan_plan};
pub use prune::{PruneReport, PruneResult, PruneRow, still_planned};

use crate::model::{ContainerdState, FilesystemUsage, UnixNanos};

/// What a row is.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum RowKind {
    /// An image of the CRI's namespace (`k8s.io`): its names, its target digest.
    #[default]
    CriImage,
    /// A container of the CRI's namespace: its writable layer (and layers only it holds).
    CriContainer,
    /// An image of another namespace.
    Image,
    /// A container of another namespace.
    Container,
    /// A lease and what it holds that nothing above holds.
    Lease,
    /// A snapshot no container, image or lease holds (`gc_root` says whether a
    /// `containerd.io/gc.root` label keeps it from containerd's garbage collection).
    OrphanSnapshot,
    /// A content blob no image, container, snapshot or lease references (`gc_root` likewise).
    UnreferencedBlob,
    /// A write to the content store in progress or abandoned.
    Ingest,
    /// containerd's own databases (`meta.db`, each snapshotter's `metadata.db`).
    ContainerdMetadata,
}

impl RowKind {
    /// The kind as JSON and the table print it.
    pub fn as_str(self) -> &'static str {
        match self {
            RowKind::CriImage => "criImage",
            RowKind::CriContainer => "criContainer",
            RowKind::Image => "image",
            RowKind::Container => "container",
            RowKind::Lease => "lease",
            RowKind::OrphanSnapshot => "orphanSnapshot",
            RowKind::UnreferencedBlob => "unreferencedBlob",
            RowKind::Ingest => "ingest",
            RowKind::ContainerdMetadata => "containerdMetadata",
        }
    }
}

/// One owner's row.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskRow {
    /// What it is.
    pub kind: RowKind,
    /// Its containerd namespace (a blob's: every namespace listing it, comma-separated).
    pub namespace: String,
    /// An image's first name, a container's or lease's id, a snapshot's key, a blob's digest,
    /// an ingest's ref, a database's path.
    pub name: String,
    /// An image's names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// An image's target digest, an ingest's expected digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Bytes counted here (each object in one row only).
    pub bytes: u64,
    /// Inodes counted here.
    pub inodes: u64,
    /// Everything it holds, shared objects included.
    pub referenced_bytes: u64,
    /// The part of `referenced_bytes` another owner holds too.
    pub shared_bytes: u64,
    /// Bytes it holds in stores on another filesystem (not in the sum).
    pub other_filesystem_bytes: u64,
    /// Snapshots counted here.
    pub snapshots: u64,
    /// Blobs counted here.
    pub blobs: u64,
    /// A container's task (`running`, `stopped`, `created`, `no task`, `unknown`); a lease's
    /// `active` or `expired`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// A container's image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A container's or snapshot's snapshotter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshotter: Option<String>,
    /// An orphaned snapshot's kind (`active`, `committed`, `view`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_kind: Option<String>,
    /// An orphaned snapshot's parents, nearest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_chain: Option<Vec<String>>,
    /// A blob's size in bytes (its `bytes` is rounded to blocks), an ingest's expected total.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// When it was created (RFC 3339; an ingest's last write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Seconds since then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_seconds: Option<u64>,
    /// A lease's `containerd.io/gc.expire`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Whether a lease is flat (`containerd.io/gc.flat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flat: Option<bool>,
    /// Whether an orphaned snapshot, unreferenced blob or ingest is kept by a
    /// `containerd.io/gc.root` label (its own, or an object's that references it): containerd's
    /// garbage collection leaves it; without one, its next collection removes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gc_root: Option<bool>,
}

/// The rows of one kind, summed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindTotal {
    /// The kind.
    pub kind: RowKind,
    /// How many rows.
    pub rows: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their inodes.
    pub inodes: u64,
}

/// The filesystem accounted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilesystemSummary {
    /// Where it was read (the image filesystem's mountpoint).
    pub path: String,
    /// Its size.
    pub capacity_bytes: u64,
    /// What it has in use (statvfs, reserved blocks not counted).
    pub used_bytes: u64,
    /// Its inodes.
    pub inodes: u64,
    /// Its inodes in use.
    pub inodes_used: u64,
    /// Its block size.
    pub block_size: u64,
}

/// `inspect disk`'s answer (its `-o json` document).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskReport {
    /// The filesystem.
    pub filesystem: FilesystemSummary,
    /// Every row: owners in claim order, then what nothing holds, then containerd's databases.
    pub rows: Vec<DiskRow>,
    /// Each kind's sum, in the kinds' order.
    pub totals: Vec<KindTotal>,
    /// The rows' bytes.
    pub accounted_bytes: u64,
    /// The rows' inodes.
    pub accounted_inodes: u64,
    /// `used_bytes − accounted_bytes` (negative when the stores count more than statvfs).
    pub unexplained_bytes: i64,
    /// `inodes_used − accounted_inodes`.
    pub unexplained_inodes: i64,
    /// `unexplained_bytes` as a percentage of `used_bytes` (0 when nothing is used).
    pub unexplained_percent: f64,
    /// Bytes of stores on other filesystems (not in the sum).
    pub other_filesystem_bytes: u64,
    /// What could not be read: the accounting is short by it.
    pub warnings: Vec<String>,
}

/// Every JSON field of [`DiskReport`], each with what it says: the generated reference prints
/// this list (`inspect disk --help`), and a test compares it with what the report serializes.
pub const JSON_FIELDS: &[(&str, &str)] = &[
    (
        "filesystem.path",
        "where the filesystem was read: the image filesystem's mountpoint (CRI ImageFsInfo)",
    ),
    ("filesystem.capacityBytes", "its size (statvfs)"),
    (
        "filesystem.usedBytes",
        "what it has in use by anything, reserved blocks not counted: (f_blocks - f_bfree) x f_frsize",
    ),
    ("filesystem.inodes", "its inodes (f_files)"),
    (
        "filesystem.inodesUsed",
        "its inodes in use (f_files - f_ffree)",
    ),
    (
        "filesystem.blockSize",
        "f_frsize: a blob's bytes are its size rounded up to it",
    ),
    (
        "rows[].kind",
        "criImage, criContainer, image, container, lease, gcRoot, orphanSnapshot, unreferencedBlob, ingest, containerdMetadata",
    ),
    (
        "rows[].namespace",
        "the containerd namespace (an unreferenced blob's: each namespace listing it, comma-separated)",
    ),
    (
        "rows[].name",
        "an image's first name, a container's or lease's id, a snapshot's key, a blob's digest, an ingest's ref, a database's path",
    ),
    (
        "rows[].names",
        "an image's names (every name with that target)",
    ),
    (
        "rows[].digest",
        "an image's target digest; an ingest's expected digest",
    ),
    (
        "rows[].bytes",
        "bytes counted in this row: each blob, snapshot and ingest is counted in one row only (the first owner to reach it)",
    ),
    ("rows[].inodes", "inodes counted in this row"),
    (
        "rows[].referencedBytes",
        "everything the owner holds, shared objects included",
    ),
    (
        "rows[].sharedBytes",
        "the part of referencedBytes another owner holds too",
    ),
    (
        "rows[].otherFilesystemBytes",
        "bytes it holds in stores on another filesystem (not summed)",
    ),
    ("rows[].snapshots", "snapshots counted in this row"),
    ("rows[].blobs", "content blobs counted in this row"),
    (
        "rows[].state",
        "a container's task: running, stopped, created, no task, unknown; a lease's: active or expired",
    ),
    ("rows[].image", "a container's image"),
    (
        "rows[].snapshotter",
        "a container's or an orphaned snapshot's snapshotter",
    ),
    (
        "rows[].snapshotKind",
        "an orphaned snapshot's kind: active, committed, view",
    ),
    (
        "rows[].parentChain",
        "an orphaned snapshot's parents, nearest first",
    ),
    (
        "rows[].sizeBytes",
        "a blob's size (bytes is it rounded up to blocks); an ingest's expected total",
    ),
    (
        "rows[].createdAt",
        "when it was created (RFC 3339; an ingest's last write)",
    ),
    ("rows[].ageSeconds", "seconds since createdAt"),
    ("rows[].expiresAt", "a lease's containerd.io/gc.expire"),
    (
        "rows[].flat",
        "whether a lease is flat (containerd.io/gc.flat: it holds only the resources it names)",
    ),
    (
        "rows[].gcRoot",
        "whether an orphaned snapshot, unreferenced blob or ingest is kept by a containerd.io/gc.root label (its own or a referrer's); false: containerd's next garbage collection removes it",
    ),
    ("totals[].kind", "a row kind"),
    ("totals[].rows", "its rows"),
    ("totals[].bytes", "their bytes"),
    ("totals[].inodes", "their inodes"),
    ("accountedBytes", "the rows' bytes"),
    ("accountedInodes", "the rows' inodes"),
    (
        "unexplainedBytes",
        "filesystem.usedBytes - accountedBytes (negative when the stores count more than statvfs)",
    ),
    (
        "unexplainedInodes",
        "filesystem.inodesUsed - accountedInodes",
    ),
    (
        "unexplainedPercent",
        "unexplainedBytes as a percentage of filesystem.usedBytes",
    ),
    (
        "otherFilesystemBytes",
        "bytes in stores on other filesystems (not summed)",
    ),
    (
        "warnings",
        "what could not be read (a snapshotter, a snapshot's usage, a lease's resources): the accounting is short by it",
    ),
];

fn signed(a: u64, b: u64) -> i64 {
    let d = i128::from(a) - i128::from(b);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

/// containerd's own databases on the filesystem, one row each.
fn metadata_rows(state: &ContainerdState, fs: &FilesystemUsage) -> Vec<DiskRow> {
    state
        .metadata_files
        .iter()
        .map(|f| {
            let on = graph::on(fs, f.device);
            DiskRow {
                kind: RowKind::ContainerdMetadata,
                name: f.path.clone(),
                bytes: if on { f.bytes } else { 0 },
                inodes: u64::from(on),
                referenced_bytes: f.bytes,
                other_filesystem_bytes: if on { 0 } else { f.bytes },
                ..DiskRow::default()
            }
        })
        .collect()
}

/// The accounting of `fs` by owner, from `state`, as of `now`; `cri_namespace` is the CRI's
/// (`k8s.io`).
pub fn account(
    state: &ContainerdState,
    fs: &FilesystemUsage,
    cri_namespace: &str,
    now: UnixNanos,
) -> DiskReport {
    let graph = graph::Graph::build(state, fs);
    let list = owners::owners(state, &graph, cri_namespace, now);
    let (mut rows, claimed) = owners::attribute(&graph, list);
    rows.extend(owners::residual_rows(state, &graph, &claimed, now));
    rows.extend(metadata_rows(state, fs));
    let mut totals: Vec<KindTotal> = Vec::new();
    for r in &rows {
        match totals.iter_mut().find(|t| t.kind == r.kind) {
            Some(t) => {
                t.rows += 1;
                t.bytes = t.bytes.saturating_add(r.bytes);
                t.inodes = t.inodes.saturating_add(r.inodes);
            }
            None => totals.push(KindTotal {
                kind: r.kind,
                rows: 1,
                bytes: r.bytes,
                inodes: r.inodes,
            }),
        }
    }
    totals.sort_by_key(|t| t.kind);
    let accounted_bytes = rows.iter().fold(0u64, |a, r| a.saturating_add(r.bytes));
    let accounted_inodes = rows.iter().fold(0u64, |a, r| a.saturating_add(r.inodes));
    let other_filesystem_bytes = rows
        .iter()
        .fold(0u64, |a, r| a.saturating_add(r.other_filesystem_bytes));
    let unexplained_bytes = signed(fs.used_bytes, accounted_bytes);
    // A percentage for people: the f64 conversion's rounding is immaterial at this scale.
    #[allow(clippy::cast_precision_loss)]
    let unexplained_percent = match fs.used_bytes {
        0 => 0.0,
        used => unexplained_bytes as f64 * 100.0 / used as f64,
    };
    DiskReport {
        filesystem: FilesystemSummary {
            path: fs.path.clone(),
            capacity_bytes: fs.capacity,
            used_bytes: fs.used_bytes,
            inodes: fs.inodes,
            inodes_used: fs.inodes_used,
            block_size: fs.block_size,
        },
        rows,
        totals,
        accounted_bytes,
        accounted_inodes,
        unexplained_bytes,
        unexplained_inodes: signed(fs.inodes_used, accounted_inodes),
        unexplained_percent,
        other_filesystem_bytes,
        warnings: state.warnings.clone(),
    }
}

#[cfg(test)]
mod tests;
