//! Who owns what: the owners in the order they claim objects (CRI images, the CRI's running
//! then other containers, other namespaces' images and containers, leases in force then
//! expired ones), each owner's row, and the rows of what no owner reaches (orphaned snapshots,
//! unreferenced blobs, ingests), each saying whether a `containerd.io/gc.root` label keeps it.
//!
//! Invariant: every object is counted in exactly one row's `bytes`: the first owner that
//! reaches it, or its own residual row when none does. `referenced_bytes` counts everything an
//! owner reaches, and `shared_bytes` the part of it another owner reaches too.

use std::collections::{BTreeMap, HashMap};

use super::graph::{Graph, NodeType, ObjectKind};
use super::{DiskRow, RowKind};
use crate::format::{format_rfc3339, parse_rfc3339};
use crate::model::{
    ContainerdBlob, ContainerdState, LeaseResource, SnapshotKind, TaskState, UnixNanos,
};

/// The label that ends a lease (RFC 3339), as containerd's GC reads it.
pub(super) const LEASE_EXPIRE_LABEL: &str = "containerd.io/gc.expire";
/// The label that makes a lease hold only the named resources.
pub(super) const LEASE_FLAT_LABEL: &str = "containerd.io/gc.flat";

/// An owner: its row (described, not yet sized), the nodes it holds and how it walks them.
pub(super) struct Owner {
    pub(super) row: DiskRow,
    pub(super) roots: Vec<usize>,
    pub(super) flat: bool,
}

fn time(t: UnixNanos) -> Option<String> {
    (t.0 != 0).then(|| format_rfc3339(t))
}

fn age(now: UnixNanos, t: UnixNanos) -> Option<u64> {
    (t.0 != 0).then(|| now.since(t).as_secs())
}

fn row(kind: RowKind, namespace: &str, name: String) -> DiskRow {
    DiskRow {
        kind,
        namespace: namespace.to_owned(),
        name,
        ..DiskRow::default()
    }
}

/// Every image owner (one per namespace and target digest, with its names), CRI namespace or
/// not as `cri` says.
fn image_owners(state: &ContainerdState, graph: &Graph, cri: &str, want_cri: bool) -> Vec<Owner> {
    let mut out = Vec::new();
    for (n, ns) in state.namespaces.iter().enumerate() {
        if (ns.name == cri) != want_cri {
            continue;
        }
        let mut by_target: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for image in &ns.images {
            by_target
                .entry(&image.target_digest)
                .or_default()
                .push(&image.name);
        }
        let mut owners: Vec<Owner> = by_target
            .into_iter()
            .map(|(digest, mut names)| {
                names.sort_unstable();
                let kind = match want_cri {
                    true => RowKind::CriImage,
                    false => RowKind::Image,
                };
                let mut r = row(kind, &ns.name, names[0].to_owned());
                r.names = names.iter().map(|s| (*s).to_owned()).collect();
                r.digest = Some(digest.to_owned());
                let roots = names
                    .iter()
                    .filter_map(|name| graph.node(NodeType::Image, n, name))
                    .collect();
                Owner {
                    row: r,
                    roots,
                    flat: false,
                }
            })
            .collect();
        owners.sort_by(|a, b| a.row.name.cmp(&b.row.name));
        out.extend(owners);
    }
    out
}

fn task_state(task: TaskState) -> &'static str {
    match task {
        TaskState::None => "no task",
        TaskState::Created => "created",
        TaskState::Running => "running",
        TaskState::Stopped => "stopped",
        TaskState::Unknown => "unknown",
    }
}

/// Every container owner of the CRI namespace or the others, running ones first.
fn container_owners(
    state: &ContainerdState,
    graph: &Graph,
    cri: &str,
    want_cri: bool,
    now: UnixNanos,
) -> Vec<Owner> {
    let mut out = Vec::new();
    for running in [true, false] {
        for (n, ns) in state.namespaces.iter().enumerate() {
            if (ns.name == cri) != want_cri {
                continue;
            }
            let mut list: Vec<_> = ns
                .containers
                .iter()
                .filter(|c| c.task.is_running() == running)
                .collect();
            list.sort_by(|a, b| a.id.cmp(&b.id));
            for c in list {
                let kind = match want_cri {
                    true => RowKind::CriContainer,
                    false => RowKind::Container,
                };
                let mut r = row(kind, &ns.name, c.id.clone());
                r.image = Some(c.image.clone()).filter(|i| !i.is_empty());
                r.state = Some(task_state(c.task).to_owned());
                r.snapshotter = Some(c.snapshotter.clone()).filter(|s| !s.is_empty());
                r.created_at = time(c.created_at);
                r.age_seconds = age(now, c.created_at);
                out.push(Owner {
                    row: r,
                    roots: graph
                        .node(NodeType::Container, n, &c.id)
                        .into_iter()
                        .collect(),
                    flat: false,
                });
            }
        }
    }
    out
}

/// Every lease owner, those in force first, then the expired ones.
fn lease_owners(state: &ContainerdState, graph: &Graph, now: UnixNanos) -> Vec<Owner> {
    let mut live = Vec::new();
    let mut expired = Vec::new();
    for (n, ns) in state.namespaces.iter().enumerate() {
        for lease in &ns.leases {
            let expires = lease
                .labels
                .get(LEASE_EXPIRE_LABEL)
                .and_then(|v| parse_rfc3339(v));
            // containerd's scanRoots: a lease whose expiry has passed is no root.
            let is_expired = expires.is_some_and(|e| now > e);
            let mut r = row(RowKind::Lease, &ns.name, lease.id.clone());
            r.state = Some(if is_expired { "expired" } else { "active" }.to_owned());
            r.expires_at = expires.map(format_rfc3339);
            r.created_at = time(lease.created_at);
            r.age_seconds = age(now, lease.created_at);
            let flat = lease.labels.contains_key(LEASE_FLAT_LABEL);
            r.flat = Some(flat);
            let roots = lease
                .resources
                .iter()
                .filter_map(|res| match res {
                    LeaseResource::Content(d) => graph.node(NodeType::Content, n, d),
                    LeaseResource::Snapshot(sn, k) => {
                        graph.node(NodeType::Snapshot, n, &format!("{sn}/{k}"))
                    }
                    LeaseResource::Ingest(i) => graph.node(NodeType::Ingest, n, i),
                    LeaseResource::Image(i) => graph.node(NodeType::Image, n, i),
                    LeaseResource::Other(..) => None,
                })
                .collect();
            let owner = Owner {
                row: r,
                roots,
                flat,
            };
            match is_expired {
                true => expired.push(owner),
                false => live.push(owner),
            }
        }
    }
    live.extend(expired);
    live
}

/// Every owner, in the order they claim objects.
pub(super) fn owners(
    state: &ContainerdState,
    graph: &Graph,
    cri: &str,
    now: UnixNanos,
) -> Vec<Owner> {
    let mut out = image_owners(state, graph, cri, true);
    out.extend(container_owners(state, graph, cri, true, now));
    out.extend(image_owners(state, graph, cri, false));
    out.extend(container_owners(state, graph, cri, false, now));
    out.extend(lease_owners(state, graph, now));
    out
}

/// Adds `object`'s bytes to a row's counts.
fn count(r: &mut DiskRow, graph: &Graph, object: usize) {
    let o = &graph.objects[object];
    if !o.on_filesystem {
        r.other_filesystem_bytes = r.other_filesystem_bytes.saturating_add(o.bytes);
        return;
    }
    r.bytes = r.bytes.saturating_add(o.bytes);
    r.inodes = r.inodes.saturating_add(o.inodes);
    match o.kind {
        ObjectKind::Blob(_) => r.blobs += 1,
        ObjectKind::Snapshot { .. } => r.snapshots += 1,
        ObjectKind::Ingest { .. } => {}
    }
}

/// Each owner's row, sized: the objects it claims first (`bytes`), all it reaches
/// (`referenced_bytes`) and the part others reach too (`shared_bytes`). Returns the rows and
/// which objects some owner claimed.
pub(super) fn attribute(graph: &Graph, owners: Vec<Owner>) -> (Vec<DiskRow>, Vec<bool>) {
    let reached: Vec<Vec<usize>> = owners
        .iter()
        .map(|o| graph.reach(&o.roots, o.flat))
        .collect();
    let mut holders = vec![0u32; graph.objects.len()];
    for list in &reached {
        for &o in list {
            holders[o] = holders[o].saturating_add(1);
        }
    }
    let mut claimed = vec![false; graph.objects.len()];
    let mut rows = Vec::with_capacity(owners.len());
    for (owner, list) in owners.into_iter().zip(reached) {
        let mut r = owner.row;
        for o in list {
            let bytes = graph.objects[o].bytes;
            r.referenced_bytes = r.referenced_bytes.saturating_add(bytes);
            if holders[o] > 1 {
                r.shared_bytes = r.shared_bytes.saturating_add(bytes);
            }
            if !claimed[o] {
                claimed[o] = true;
                count(&mut r, graph, o);
            }
        }
        rows.push(r);
    }
    (rows, claimed)
}

/// The snapshot's parent chain, nearest first (stopping at a loop or a missing parent), each
/// parent found through the graph's index.
fn parent_chain(state: &ContainerdState, graph: &Graph, ns: usize, index: usize) -> Vec<String> {
    let snapshots = &state.namespaces[ns].snapshots;
    let mut chain = Vec::new();
    let mut at = &snapshots[index];
    while !at.parent.is_empty() && chain.len() < snapshots.len() {
        chain.push(at.parent.clone());
        let key = format!("{}/{}", at.snapshotter, at.parent);
        let parent = graph
            .node(NodeType::Snapshot, ns, &key)
            .and_then(|node| graph.object(node))
            .map(|o| &graph.objects[o].kind);
        match parent {
            Some(ObjectKind::Snapshot { index, .. }) => at = &snapshots[*index],
            _ => break,
        }
    }
    chain
}

/// Each unreferenced digest's listings: (namespace, blob) for every namespace listing it.
type Holders<'a> = HashMap<&'a str, Vec<(&'a str, &'a ContainerdBlob)>>;

fn snapshot_kind(kind: SnapshotKind) -> &'static str {
    match kind {
        SnapshotKind::Unknown => "unknown",
        SnapshotKind::View => "view",
        SnapshotKind::Active => "active",
        SnapshotKind::Committed => "committed",
    }
}

/// The row of an object no owner reaches (`rooted`: a `containerd.io/gc.root` keeps it).
fn residual_row(
    state: &ContainerdState,
    graph: &Graph,
    holders: &Holders<'_>,
    (object, rooted): (usize, bool),
    now: UnixNanos,
) -> DiskRow {
    let mut r = match &graph.objects[object].kind {
        ObjectKind::Snapshot { ns, index } => {
            let s = &state.namespaces[*ns].snapshots[*index];
            let mut r = row(
                RowKind::OrphanSnapshot,
                &state.namespaces[*ns].name,
                s.name.clone(),
            );
            r.snapshotter = Some(s.snapshotter.clone());
            r.snapshot_kind = Some(snapshot_kind(s.kind).to_owned());
            r.created_at = time(s.created_at);
            r.age_seconds = age(now, s.created_at);
            r.parent_chain = Some(parent_chain(state, graph, *ns, *index));
            r
        }
        ObjectKind::Blob(digest) => {
            let holders = holders.get(digest.as_str()).map_or(&[][..], Vec::as_slice);
            let namespaces: Vec<&str> = holders.iter().map(|(ns, _)| *ns).collect();
            let mut r = row(
                RowKind::UnreferencedBlob,
                &namespaces.join(","),
                digest.clone(),
            );
            let created = holders.iter().map(|(_, b)| b.created_at).min();
            let created = created.unwrap_or_default();
            r.created_at = time(created);
            r.age_seconds = age(now, created);
            r.size_bytes = holders.first().map(|(_, b)| b.size);
            r
        }
        ObjectKind::Ingest { ns, index } => {
            let i = &state.namespaces[*ns].ingests[*index];
            let mut r = row(
                RowKind::Ingest,
                &state.namespaces[*ns].name,
                i.reference.clone(),
            );
            r.digest = Some(i.expected.clone()).filter(|d| !d.is_empty());
            r.size_bytes = Some(i.total);
            r.created_at = time(i.updated_at);
            r.age_seconds = age(now, i.updated_at);
            r
        }
    };
    count(&mut r, graph, object);
    r.referenced_bytes = graph.objects[object].bytes;
    r.gc_root = Some(rooted);
    r
}

/// The rows of the objects no owner claimed, largest first.
pub(super) fn residual_rows(
    state: &ContainerdState,
    graph: &Graph,
    claimed: &[bool],
    now: UnixNanos,
) -> Vec<DiskRow> {
    let roots: Vec<usize> = graph.roots.iter().map(|&(_, node)| node).collect();
    let mut rooted = vec![false; graph.objects.len()];
    for o in graph.reach(&roots, false) {
        rooted[o] = true;
    }
    let mut holders: Holders<'_> = HashMap::new();
    for (o, object) in graph.objects.iter().enumerate() {
        if let (false, ObjectKind::Blob(digest)) = (claimed[o], &object.kind) {
            holders.insert(digest, Vec::new());
        }
    }
    for ns in &state.namespaces {
        for blob in &ns.content {
            if let Some(list) = holders.get_mut(blob.digest.as_str()) {
                list.push((&ns.name, blob));
            }
        }
    }
    let mut rows: Vec<DiskRow> = (0..graph.objects.len())
        .filter(|&o| !claimed[o])
        .map(|o| residual_row(state, graph, &holders, (o, rooted[o]), now))
        .collect();
    rows.sort_by(|a, b| {
        (a.kind, std::cmp::Reverse(a.bytes), &a.namespace, &a.name).cmp(&(
            b.kind,
            std::cmp::Reverse(b.bytes),
            &b.namespace,
            &b.name,
        ))
    });
    rows
}
