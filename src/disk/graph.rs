//! containerd's reference graph, as its garbage collector walks it (core/metadata/gc.go,
//! `references` and `sendLabelRefs`), over the objects that hold bytes on disk.
//!
//! Nodes are per namespace, as containerd's: an image (by name), a content blob (by digest), a
//! snapshot (`snapshotter/key`), a container (by id), an ingest (by ref). Edges: an image to
//! its target blob; a snapshot to its parent; a container to its read-write snapshot; an ingest
//! to the blob it expects (the structural edges, which a flat lease follows too); and every
//! label `containerd.io/gc.ref.content[./name]`, `...gc.ref.snapshot.<snapshotter>[/name]`,
//! `...gc.ref.image[./name]` (a label edge), and the back references
//! `containerd.io/gc.bref.{content,image,container}[./name]` and
//! `...gc.bref.snapshot.<snapshotter>[/name]`, an edge from the object the label names to the
//! labelled one. `containerd.io/gc.root` on a blob or a snapshot makes it a root. Conditional
//! references (`gc.cond.*`) are not followed. An edge to an object that does not exist is
//! dropped, as containerd drops a dead edge.
//!
//! Objects are what takes room: a blob is one object for every namespace that lists it (the
//! content store keeps one file per digest), a snapshot and an ingest one each.

use std::collections::{HashMap, HashSet};

use crate::model::{ContainerdState, FilesystemUsage};

/// The kind of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum NodeType {
    Image,
    Content,
    Snapshot,
    Container,
    Ingest,
}

/// An edge's kind: structural edges are followed by a flat lease, label edges are not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edge {
    Structural,
    Label,
}

/// What an object is: a blob by digest, or a namespace's snapshot or ingest by index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ObjectKind {
    Blob(String),
    Snapshot { ns: usize, index: usize },
    Ingest { ns: usize, index: usize },
}

/// One thing on disk and its size.
#[derive(Clone, Debug)]
pub(super) struct Object {
    pub(super) kind: ObjectKind,
    pub(super) bytes: u64,
    pub(super) inodes: u64,
    /// Whether it lives on the filesystem accounted (its store's device is that filesystem's,
    /// or unknown).
    pub(super) on_filesystem: bool,
}

type Key = (NodeType, usize, String);

/// The graph: nodes, their edges, the object each holds, and the `gc.root` nodes.
#[derive(Debug, Default)]
pub(super) struct Graph {
    index: HashMap<Key, usize>,
    edges: Vec<Vec<(usize, Edge)>>,
    node_type: Vec<NodeType>,
    object_of: Vec<Option<usize>>,
    pub(super) objects: Vec<Object>,
    /// Nodes labelled `containerd.io/gc.root` (namespace, node), in build order.
    pub(super) roots: Vec<(usize, usize)>,
}

/// What one label says.
#[derive(Debug, PartialEq, Eq)]
enum LabelRef {
    To(NodeType, String),
    From(NodeType, String),
    Root,
}

/// `key` is `prefix` exactly or `prefix` then `.` or `/` and a name (containerd's rule for
/// the content, image and back-reference labels).
fn named(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('/'))
}

/// `key` is `prefix<snapshotter>[/name]`: the snapshotter.
fn snapshotter_of<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = key.strip_prefix(prefix)?;
    let snapshotter = rest.split('/').next().unwrap_or(rest);
    (!snapshotter.is_empty()).then_some(snapshotter)
}

/// What a label references, if anything.
fn label_ref(key: &str, value: &str) -> Option<LabelRef> {
    const P: &str = "containerd.io/gc.";
    let rest = key.strip_prefix(P)?;
    if rest == "root" {
        return Some(LabelRef::Root);
    }
    let snap = |sn: &str| (NodeType::Snapshot, format!("{sn}/{value}"));
    if let Some(sn) = snapshotter_of(key, "containerd.io/gc.ref.snapshot.") {
        let (t, k) = snap(sn);
        return Some(LabelRef::To(t, k));
    }
    if let Some(sn) = snapshotter_of(key, "containerd.io/gc.bref.snapshot.") {
        let (t, k) = snap(sn);
        return Some(LabelRef::From(t, k));
    }
    let value = value.to_owned();
    let table = [
        ("containerd.io/gc.ref.content", NodeType::Content, true),
        ("containerd.io/gc.ref.image", NodeType::Image, true),
        ("containerd.io/gc.bref.content", NodeType::Content, false),
        ("containerd.io/gc.bref.image", NodeType::Image, false),
        (
            "containerd.io/gc.bref.container",
            NodeType::Container,
            false,
        ),
    ];
    table
        .into_iter()
        .find(|(prefix, _, _)| named(key, prefix))
        .map(|(_, t, to)| match to {
            true => LabelRef::To(t, value),
            false => LabelRef::From(t, value),
        })
}

/// `n` rounded up to a multiple of `block` (a file's allocation; `block` 0 leaves it).
fn blocks(n: u64, block: u64) -> u64 {
    match block {
        0 => n,
        b => n.div_ceil(b).saturating_mul(b),
    }
}

/// Whether a store on `device` is on the filesystem `fs` (unknown counts as on it).
pub(super) fn on(fs: &FilesystemUsage, device: Option<u64>) -> bool {
    match (fs.device, device) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

impl Graph {
    /// The graph of `state`'s objects, sized for the filesystem `fs`.
    pub(super) fn build(state: &ContainerdState, fs: &FilesystemUsage) -> Graph {
        let mut g = Graph::default();
        let content_on = on(fs, state.content_store.as_ref().and_then(|s| s.device));
        let snap_on = |name: &str| {
            let device = state.snapshotters.iter().find(|s| s.name == name);
            on(fs, device.and_then(|s| s.device))
        };
        let mut blob_objects: HashMap<&str, usize> = HashMap::new();
        for (n, ns) in state.namespaces.iter().enumerate() {
            for blob in &ns.content {
                let object = *blob_objects.entry(&blob.digest).or_insert_with(|| {
                    g.objects.push(Object {
                        kind: ObjectKind::Blob(blob.digest.clone()),
                        bytes: blocks(blob.size, fs.block_size),
                        inodes: 1,
                        on_filesystem: content_on,
                    });
                    g.objects.len() - 1
                });
                g.add_node((NodeType::Content, n, blob.digest.clone()), Some(object));
            }
            for (index, s) in ns.snapshots.iter().enumerate() {
                let usage = s.usage.unwrap_or_default();
                let object = g.add_object(ObjectKind::Snapshot { ns: n, index }, usage.bytes);
                g.objects[object].inodes = usage.inodes;
                g.objects[object].on_filesystem = snap_on(&s.snapshotter);
                let key = format!("{}/{}", s.snapshotter, s.name);
                g.add_node((NodeType::Snapshot, n, key), Some(object));
            }
            for (index, i) in ns.ingests.iter().enumerate() {
                let object = g.add_object(
                    ObjectKind::Ingest { ns: n, index },
                    blocks(i.offset, fs.block_size),
                );
                g.objects[object].on_filesystem = content_on;
                g.add_node((NodeType::Ingest, n, i.reference.clone()), Some(object));
            }
            for image in &ns.images {
                g.add_node((NodeType::Image, n, image.name.clone()), None);
            }
            for c in &ns.containers {
                g.add_node((NodeType::Container, n, c.id.clone()), None);
            }
        }
        for (n, ns) in state.namespaces.iter().enumerate() {
            g.add_edges(n, ns);
        }
        g
    }

    fn add_object(&mut self, kind: ObjectKind, bytes: u64) -> usize {
        self.objects.push(Object {
            kind,
            bytes,
            inodes: 1,
            on_filesystem: true,
        });
        self.objects.len() - 1
    }

    fn add_node(&mut self, key: Key, object: Option<usize>) {
        let ty = key.0;
        if self.index.contains_key(&key) {
            return;
        }
        self.index.insert(key, self.edges.len());
        self.edges.push(Vec::new());
        self.node_type.push(ty);
        self.object_of.push(object);
    }

    /// The node of `ty` named `key` in namespace `ns`.
    pub(super) fn node(&self, ty: NodeType, ns: usize, key: &str) -> Option<usize> {
        // One String per lookup: the graph is built once and looked up a few times per object.
        self.index.get(&(ty, ns, key.to_owned())).copied()
    }

    /// The object node `node` holds, if any.
    pub(super) fn object(&self, node: usize) -> Option<usize> {
        self.object_of.get(node).copied().flatten()
    }

    fn edge(&mut self, from: Option<usize>, to: Option<usize>, kind: Edge) {
        if let (Some(from), Some(to)) = (from, to) {
            self.edges[from].push((to, kind));
        }
    }

    /// The label edges, back references and root mark of node `at`'s labels.
    fn label_edges<'a>(
        &mut self,
        ns: usize,
        at: Option<usize>,
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) {
        for (key, value) in labels {
            match label_ref(key, value) {
                Some(LabelRef::To(t, k)) => {
                    let to = self.node(t, ns, &k);
                    self.edge(at, to, Edge::Label);
                }
                Some(LabelRef::From(t, k)) => {
                    let from = self.node(t, ns, &k);
                    self.edge(from, at, Edge::Label);
                }
                Some(LabelRef::Root) => {
                    let rootable = at.is_some_and(|a| {
                        matches!(self.node_type[a], NodeType::Content | NodeType::Snapshot)
                    });
                    if let (true, Some(a)) = (rootable, at) {
                        self.roots.push((ns, a));
                    }
                }
                None => {}
            }
        }
    }

    fn add_edges(&mut self, n: usize, ns: &crate::model::NamespaceState) {
        for blob in &ns.content {
            let at = self.node(NodeType::Content, n, &blob.digest);
            self.label_edges(n, at, &blob.labels);
        }
        for s in &ns.snapshots {
            let at = self.node(
                NodeType::Snapshot,
                n,
                &format!("{}/{}", s.snapshotter, s.name),
            );
            if !s.parent.is_empty() {
                let parent = format!("{}/{}", s.snapshotter, s.parent);
                let to = self.node(NodeType::Snapshot, n, &parent);
                self.edge(at, to, Edge::Structural);
            }
            self.label_edges(n, at, &s.labels);
        }
        for image in &ns.images {
            let at = self.node(NodeType::Image, n, &image.name);
            let to = self.node(NodeType::Content, n, &image.target_digest);
            self.edge(at, to, Edge::Structural);
            self.label_edges(n, at, &image.labels);
        }
        for c in &ns.containers {
            let at = self.node(NodeType::Container, n, &c.id);
            if !c.snapshotter.is_empty() && !c.snapshot_key.is_empty() {
                let key = format!("{}/{}", c.snapshotter, c.snapshot_key);
                let to = self.node(NodeType::Snapshot, n, &key);
                self.edge(at, to, Edge::Structural);
            }
            self.label_edges(n, at, &c.labels);
        }
        for i in &ns.ingests {
            let at = self.node(NodeType::Ingest, n, &i.reference);
            let to = self.node(NodeType::Content, n, &i.expected);
            self.edge(at, to, Edge::Structural);
        }
    }

    /// The objects reachable from `roots`, each once, in the order first reached. A `flat`
    /// walk (a lease labelled `containerd.io/gc.flat`) follows structural edges only: a
    /// snapshot's parents and an image's target, not what labels reference.
    pub(super) fn reach(&self, roots: &[usize], flat: bool) -> Vec<usize> {
        let mut seen: HashSet<usize> = HashSet::new();
        let mut stack: Vec<usize> = roots.to_vec();
        let mut out = Vec::new();
        while let Some(node) = stack.pop() {
            if !seen.insert(node) {
                continue;
            }
            if let Some(object) = self.object_of[node] {
                out.push(object);
            }
            for &(to, kind) in &self.edges[node] {
                if !flat || kind == Edge::Structural {
                    stack.push(to);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_read_as_containerd_reads_them() {
        let to = |t, k: &str| Some(LabelRef::To(t, k.to_owned()));
        let from = |t, k: &str| Some(LabelRef::From(t, k.to_owned()));
        assert_eq!(
            label_ref("containerd.io/gc.ref.content.l.0", "d"),
            to(NodeType::Content, "d")
        );
        assert_eq!(
            label_ref("containerd.io/gc.ref.content", "d"),
            to(NodeType::Content, "d")
        );
        assert_eq!(
            label_ref("containerd.io/gc.ref.content/m", "d"),
            to(NodeType::Content, "d")
        );
        assert_eq!(label_ref("containerd.io/gc.ref.contentx", "d"), None);
        assert_eq!(
            label_ref("containerd.io/gc.ref.snapshot.overlayfs", "k"),
            to(NodeType::Snapshot, "overlayfs/k")
        );
        assert_eq!(
            label_ref("containerd.io/gc.ref.snapshot.overlayfs/x", "k"),
            to(NodeType::Snapshot, "overlayfs/k")
        );
        assert_eq!(label_ref("containerd.io/gc.ref.snapshot.", "k"), None);
        assert_eq!(
            label_ref("containerd.io/gc.ref.image", "x:1"),
            to(NodeType::Image, "x:1")
        );
        assert_eq!(
            label_ref("containerd.io/gc.bref.container.a", "c1"),
            from(NodeType::Container, "c1")
        );
        assert_eq!(
            label_ref("containerd.io/gc.bref.snapshot.native", "k"),
            from(NodeType::Snapshot, "native/k")
        );
        assert_eq!(
            label_ref("containerd.io/gc.root", "x"),
            Some(LabelRef::Root)
        );
        assert_eq!(label_ref("containerd.io/gc.expire", "x"), None);
        assert_eq!(label_ref("containerd.io/uncompressed", "x"), None);
        assert_eq!(blocks(1, 4096), 4096);
        assert_eq!(blocks(0, 4096), 0);
        assert_eq!(blocks(4097, 4096), 8192);
        assert_eq!(blocks(5, 0), 5);
    }
}
