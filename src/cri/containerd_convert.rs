//! Every conversion from the generated containerd API subsets `inspect disk` reads
//! (`containerd_proto`) to the model's plain types (`model::Containerd*`), in one file: the
//! calls (`containerd_view.rs`) hand each answer here and keep nothing generated.
//!
//! Invariants: names, digests, keys and labels are copied as containerd sent them; a negative
//! size or offset reads as 0; a missing timestamp is `UnixNanos(0)`; an enum value this reader
//! does not know is `Unknown`; a lease resource of an unknown type is kept as `Other`.

use super::containerd_images::proto::containerd::services::images::v1 as images_v1;
use super::containerd_proto::containerd::services::{
    containers::v1 as containers_v1, content::v1 as content_v1, introspection::v1 as intro_v1,
    leases::v1 as leases_v1, snapshots::v1 as snapshots_v1,
};
use super::containerd_proto::containerd::v1::types as task_types;
use crate::model::{
    ContainerdBlob, ContainerdContainer, ContainerdImage, ContainerdIngest, ContainerdLease,
    ContainerdSnapshot, LeaseResource, SnapshotKind, SnapshotUsage, TaskState, UnixNanos,
};

/// A protobuf timestamp as unix nanoseconds (saturating); none is 0.
pub(super) fn time(ts: Option<prost_types::Timestamp>) -> UnixNanos {
    let Some(ts) = ts else {
        return UnixNanos(0);
    };
    let nanos = i64::from(ts.nanos.clamp(0, 999_999_999));
    UnixNanos(
        ts.seconds
            .saturating_mul(1_000_000_000)
            .saturating_add(nanos),
    )
}

fn size(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

pub(super) fn image(image: images_v1::Image) -> ContainerdImage {
    let target = image.target.unwrap_or_default();
    ContainerdImage {
        name: image.name,
        target_digest: target.digest,
        target_media_type: target.media_type,
        labels: image.labels.into_iter().collect(),
    }
}

pub(super) fn container(container: containers_v1::Container) -> ContainerdContainer {
    ContainerdContainer {
        id: container.id,
        image: container.image,
        snapshotter: container.snapshotter,
        snapshot_key: container.snapshot_key,
        created_at: time(container.created_at),
        labels: container.labels.into_iter().collect(),
        task: TaskState::None,
    }
}

/// A task's status (containerd.v1.types.Status) as the container's [`TaskState`].
pub(super) fn task_state(status: i32) -> TaskState {
    match task_types::Status::try_from(status) {
        Ok(task_types::Status::Created) => TaskState::Created,
        Ok(
            task_types::Status::Running | task_types::Status::Paused | task_types::Status::Pausing,
        ) => TaskState::Running,
        Ok(task_types::Status::Stopped) => TaskState::Stopped,
        Ok(task_types::Status::Unknown) | Err(_) => TaskState::Unknown,
    }
}

/// A task's container id and state. Tasks.List leaves `container_id` empty and names the task
/// by `id`, which for a container's task is the container's id (containerd's
/// plugins/services/tasks/local.go, getProcessState, sets only `ID`).
pub(super) fn task(process: task_types::Process) -> (String, TaskState) {
    let id = match process.container_id.is_empty() {
        true => process.id,
        false => process.container_id,
    };
    (id, task_state(process.status))
}

pub(super) fn snapshot(snapshotter: &str, info: snapshots_v1::Info) -> ContainerdSnapshot {
    let kind = match snapshots_v1::Kind::try_from(info.kind) {
        Ok(snapshots_v1::Kind::View) => SnapshotKind::View,
        Ok(snapshots_v1::Kind::Active) => SnapshotKind::Active,
        Ok(snapshots_v1::Kind::Committed) => SnapshotKind::Committed,
        Ok(snapshots_v1::Kind::Unknown) | Err(_) => SnapshotKind::Unknown,
    };
    ContainerdSnapshot {
        snapshotter: snapshotter.to_owned(),
        name: info.name,
        parent: info.parent,
        kind,
        created_at: time(info.created_at),
        labels: info.labels.into_iter().collect(),
        usage: None,
    }
}

pub(super) fn usage(usage: snapshots_v1::UsageResponse) -> SnapshotUsage {
    SnapshotUsage {
        bytes: size(usage.size),
        inodes: size(usage.inodes),
    }
}

pub(super) fn blob(info: content_v1::Info) -> ContainerdBlob {
    ContainerdBlob {
        digest: info.digest,
        size: size(info.size),
        created_at: time(info.created_at),
        labels: info.labels.into_iter().collect(),
    }
}

pub(super) fn ingest(status: content_v1::Status) -> ContainerdIngest {
    ContainerdIngest {
        reference: status.r#ref,
        offset: size(status.offset),
        total: size(status.total),
        expected: status.expected,
        updated_at: time(status.updated_at),
    }
}

/// A lease (its resources are read by a second call and added by the caller).
pub(super) fn lease(lease: leases_v1::Lease) -> ContainerdLease {
    ContainerdLease {
        id: lease.id,
        created_at: time(lease.created_at),
        labels: lease.labels.into_iter().collect(),
        resources: Vec::new(),
    }
}

/// A lease's resource by its type: `content`, `images`, `ingests`, `snapshots/<snapshotter>`
/// (containerd's core/metadata/leases.go, parseLeaseResource).
pub(super) fn lease_resource(resource: leases_v1::Resource) -> LeaseResource {
    match resource.r#type.split_once('/') {
        None if resource.r#type == "content" => LeaseResource::Content(resource.id),
        None if resource.r#type == "images" => LeaseResource::Image(resource.id),
        None if resource.r#type == "ingests" => LeaseResource::Ingest(resource.id),
        Some(("snapshots", snapshotter)) if !snapshotter.contains('/') => {
            LeaseResource::Snapshot(snapshotter.to_owned(), resource.id)
        }
        _ => LeaseResource::Other(resource.r#type, resource.id),
    }
}

/// A plugin the introspection service lists: its type, id, exports and whether it loaded.
pub(super) struct PluginSeen {
    pub(super) kind: String,
    pub(super) id: String,
    pub(super) root: Option<String>,
    pub(super) path: Option<String>,
    pub(super) loaded: bool,
}

pub(super) fn plugin(plugin: intro_v1::Plugin) -> PluginSeen {
    let export = |key: &str| plugin.exports.get(key).filter(|v| !v.is_empty()).cloned();
    PluginSeen {
        root: export("root"),
        path: export("path"),
        loaded: plugin.init_err.is_none(),
        kind: plugin.r#type,
        id: plugin.id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_resources_are_read_by_their_type_as_containerd_writes_them() {
        let r = |t: &str, id: &str| {
            lease_resource(leases_v1::Resource {
                id: id.into(),
                r#type: t.into(),
            })
        };
        assert_eq!(
            r("content", "sha256:a"),
            LeaseResource::Content("sha256:a".into())
        );
        assert_eq!(r("images", "x:1"), LeaseResource::Image("x:1".into()));
        assert_eq!(r("ingests", "ref"), LeaseResource::Ingest("ref".into()));
        assert_eq!(
            r("snapshots/overlayfs", "k"),
            LeaseResource::Snapshot("overlayfs".into(), "k".into())
        );
        assert_eq!(
            r("snapshots/a/b", "k"),
            LeaseResource::Other("snapshots/a/b".into(), "k".into())
        );
        assert_eq!(
            r("streams", "s"),
            LeaseResource::Other("streams".into(), "s".into())
        );
    }

    #[test]
    fn times_sizes_and_states_read_without_panics_on_odd_values() {
        assert_eq!(time(None), UnixNanos(0));
        let ts = |seconds, nanos| Some(prost_types::Timestamp { seconds, nanos });
        assert_eq!(time(ts(2, 5)), UnixNanos(2_000_000_005));
        assert_eq!(time(ts(i64::MAX, 999)), UnixNanos(i64::MAX));
        assert_eq!(time(ts(1, -5)), UnixNanos(1_000_000_000));
        assert_eq!(size(-1), 0);
        assert_eq!(task_state(2), TaskState::Running);
        assert_eq!(task_state(4), TaskState::Running);
        assert_eq!(task_state(3), TaskState::Stopped);
        assert_eq!(task_state(1), TaskState::Created);
        assert_eq!(task_state(99), TaskState::Unknown);
        let listed = |container_id: &str, id: &str| {
            task(task_types::Process {
                container_id: container_id.into(),
                id: id.into(),
                pid: 1,
                status: 2,
            })
        };
        assert_eq!(listed("", "c1"), ("c1".to_owned(), TaskState::Running));
        assert_eq!(listed("c2", "exec"), ("c2".to_owned(), TaskState::Running));
    }
}
