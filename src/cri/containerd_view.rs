//! [`ContainerdView`]: containerd as it is, read through its own API on the CRI socket
//! (namespaces, images, containers, tasks, snapshots with their usage, content, ingests,
//! leases, and the introspection service for the snapshotters loaded and where each store
//! keeps its files), into the model's plain [`ContainerdState`]. `inspect disk` accounts the
//! image filesystem from it.
//!
//! Invariants: read-only: only List, ListResources, ListStatuses, Usage and Plugins calls,
//! never a call that changes anything. Every namespace is read, and in each every snapshotter
//! the introspection service lists as loaded (plus any a container or a content label names).
//! Every call carries a deadline and, when namespaced, the `containerd-namespace` header, and
//! goes through the CRI client's `unary_call` (one retry on a broken connection, grpc-go error
//! text); a server stream is read to its end within the same deadline. What one snapshotter,
//! one Usage call or one lease's resources fail to answer is a warning in the state, not an
//! error: the rest is still accounted. The generated types never leave this file and
//! `containerd_convert.rs`.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use super::client::{MAX_MESSAGE_BYTES, lazy_unix_channel, socket_path, unary_call};
use super::containerd_convert as convert;
use super::containerd_images::proto::containerd::services::images::v1 as images_v1;
use super::containerd_proto::containerd::services::{
    containers::v1 as containers_v1, content::v1 as content_v1, introspection::v1 as intro_v1,
    leases::v1 as leases_v1, namespaces::v1 as namespaces_v1, snapshots::v1 as snapshots_v1,
    tasks::v1 as tasks_v1,
};
use super::statvfs;
use crate::model::{
    ContainerdState, FileUsage, FilesystemUsage, NamespaceState, StoreRoot, TaskState,
};
use crate::runtime::{CriError, RpcCode};

/// The plugin type of snapshotters (containerd's plugins.SnapshotPlugin).
const SNAPSHOTTER_PLUGIN: &str = "io.containerd.snapshotter.v1";
/// The plugin type of the content store.
const CONTENT_PLUGIN: &str = "io.containerd.content.v1";
/// The plugin type of the metadata store (`bolt`, exporting its `meta.db` path).
const METADATA_PLUGIN: &str = "io.containerd.metadata.v1";
/// How many Snapshots.Usage calls are in flight at once.
const USAGE_IN_FLIGHT: usize = 16;
/// The label prefix naming a snapshot a content blob references, `...snapshot.<snapshotter>`.
const SNAPSHOT_REF_LABEL: &str = "containerd.io/gc.ref.snapshot.";

/// A read-only reader of containerd's own API.
#[derive(Clone, Debug)]
pub struct ContainerdView {
    channel: Channel,
    address: String,
    call_timeout: Duration,
    /// Whether each snapshot's Usage is read (off: the references alone, `prune --orphans`'s
    /// re-check before each removal).
    usage: bool,
}

/// A request with the namespace header set.
pub(super) fn namespaced<T>(
    mut request: tonic::Request<T>,
    ns: &MetadataValue<Ascii>,
) -> tonic::Request<T> {
    request
        .metadata_mut()
        .insert("containerd-namespace", ns.clone());
    request
}

impl ContainerdView {
    /// A reader of the containerd socket at `address` (`unix://PATH` or an absolute path).
    /// Nothing is dialed yet. Must run inside a tokio runtime.
    pub fn connect(
        address: &str,
        connect_timeout: Duration,
        call_timeout: Duration,
    ) -> Result<ContainerdView, CriError> {
        let path = socket_path(address)?;
        Ok(ContainerdView {
            channel: lazy_unix_channel(path, connect_timeout),
            address: address.to_owned(),
            call_timeout,
            usage: true,
        })
    }

    /// The same reader without Snapshots.Usage calls: every object and reference, no snapshot
    /// sizes (a walk of each active snapshot's directory in containerd). `prune --orphans`
    /// re-reads so before each removal.
    pub fn without_usage(mut self) -> ContainerdView {
        self.usage = false;
        self
    }

    /// Everything: the stores, then each namespace.
    pub async fn read(&self) -> Result<ContainerdState, CriError> {
        let mut state = ContainerdState::default();
        let plugins = self.plugins(&mut state).await?;
        let mut snapshotters: BTreeSet<String> = plugins.clone();
        for name in self.namespaces().await? {
            let ns = self.namespace(&name, &mut state).await?;
            snapshotters.extend(snapshotters_named(&ns));
            state.namespaces.push(ns);
        }
        // Every namespace's snapshots of every snapshotter in use (one a later namespace
        // names is read in the earlier ones too).
        for i in 0..state.namespaces.len() {
            let name = state.namespaces[i].name.clone();
            let ns = self.ns_header(&name)?;
            for snapshotter in &snapshotters {
                match self.snapshots(&ns, snapshotter, &name, &mut state).await {
                    Ok(mut list) => state.namespaces[i].snapshots.append(&mut list),
                    Err(e) => state.warnings.push(format!(
                        "namespace {name}: the snapshots of snapshotter {snapshotter} could not \
                         be listed: {e}"
                    )),
                }
            }
        }
        // A snapshotter named by a container or a label but not listed by introspection: its
        // root is unknown (its bytes are counted on the image filesystem).
        for name in snapshotters.difference(&plugins) {
            state.snapshotters.push(StoreRoot {
                name: name.clone(),
                root: None,
                device: None,
            });
        }
        Ok(state)
    }

    fn ns_header(&self, name: &str) -> Result<MetadataValue<Ascii>, CriError> {
        name.parse().map_err(|_| CriError::InvalidEndpoint {
            endpoint: self.address.clone(),
            reason: format!("containerd namespace {name:?} is not a valid header value"),
        })
    }

    /// Introspection: the content store's root, the loaded snapshotters and their roots, the
    /// metadata database. Returns the snapshotters' names.
    async fn plugins(&self, state: &mut ContainerdState) -> Result<BTreeSet<String>, CriError> {
        let response = unary_call(
            "containerd.Introspection.Plugins",
            &self.address,
            Some(self.call_timeout),
            intro_v1::PluginsRequest::default(),
            |request| {
                let mut client =
                    intro_v1::introspection_client::IntrospectionClient::new(self.channel.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES);
                async move { client.plugins(request).await }
            },
        )
        .await;
        let plugins = match response {
            Ok(response) => response.plugins,
            Err(e) if e.code() == Some(RpcCode::Unimplemented) => {
                state.warnings.push(format!(
                    "the introspection service is not served ({e}): only the snapshotters \
                     containers and content labels name are read"
                ));
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        let mut names = BTreeSet::new();
        for plugin in plugins.into_iter().map(convert::plugin) {
            let store = |root: Option<String>| StoreRoot {
                device: root
                    .as_deref()
                    .and_then(|r| statvfs::device(Path::new(r)).ok()),
                name: plugin.id.clone(),
                root,
            };
            match plugin.kind.as_str() {
                CONTENT_PLUGIN if plugin.loaded => {
                    state.content_store = Some(store(plugin.root.clone()));
                }
                SNAPSHOTTER_PLUGIN if plugin.loaded => {
                    if let Some(root) = &plugin.root {
                        let db = Path::new(root).join("metadata.db");
                        state.metadata_files.extend(file_usage(&db));
                    }
                    names.insert(plugin.id.clone());
                    state.snapshotters.push(store(plugin.root.clone()));
                }
                METADATA_PLUGIN if plugin.loaded => {
                    if let Some(path) = &plugin.path {
                        state.metadata_files.extend(file_usage(Path::new(path)));
                    }
                }
                _ => {}
            }
        }
        Ok(names)
    }

    async fn namespaces(&self) -> Result<Vec<String>, CriError> {
        let response = unary_call(
            "containerd.Namespaces.List",
            &self.address,
            Some(self.call_timeout),
            namespaces_v1::ListNamespacesRequest::default(),
            |request| {
                let mut client =
                    namespaces_v1::namespaces_client::NamespacesClient::new(self.channel.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES);
                async move { client.list(request).await }
            },
        )
        .await?;
        Ok(response.namespaces.into_iter().map(|n| n.name).collect())
    }

    /// One namespace, every part but its snapshots.
    async fn namespace(
        &self,
        name: &str,
        state: &mut ContainerdState,
    ) -> Result<NamespaceState, CriError> {
        let ns = self.ns_header(name)?;
        let mut out = NamespaceState {
            name: name.to_owned(),
            images: self.images(&ns).await?,
            containers: self.containers(&ns).await?,
            content: self.content(&ns).await?,
            ingests: self.ingests(&ns).await?,
            ..NamespaceState::default()
        };
        let tasks: HashMap<String, TaskState> = self.tasks(&ns).await?.into_iter().collect();
        for c in &mut out.containers {
            if let Some(task) = tasks.get(&c.id) {
                c.task = *task;
            }
        }
        out.leases = self.leases(&ns, name, state).await?;
        Ok(out)
    }

    async fn images(
        &self,
        ns: &MetadataValue<Ascii>,
    ) -> Result<Vec<crate::model::ContainerdImage>, CriError> {
        let response = unary_call(
            "containerd.Images.List",
            &self.address,
            Some(self.call_timeout),
            images_v1::ListImagesRequest::default(),
            |request| {
                let mut client = images_v1::images_client::ImagesClient::new(self.channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES);
                let request = namespaced(request, ns);
                async move { client.list(request).await }
            },
        )
        .await?;
        Ok(response.images.into_iter().map(convert::image).collect())
    }

    async fn containers(
        &self,
        ns: &MetadataValue<Ascii>,
    ) -> Result<Vec<crate::model::ContainerdContainer>, CriError> {
        let response = unary_call(
            "containerd.Containers.List",
            &self.address,
            Some(self.call_timeout),
            containers_v1::ListContainersRequest::default(),
            |request| {
                let mut client =
                    containers_v1::containers_client::ContainersClient::new(self.channel.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES);
                let request = namespaced(request, ns);
                async move { client.list(request).await }
            },
        )
        .await?;
        Ok(response
            .containers
            .into_iter()
            .map(convert::container)
            .collect())
    }

    async fn tasks(&self, ns: &MetadataValue<Ascii>) -> Result<Vec<(String, TaskState)>, CriError> {
        let response = unary_call(
            "containerd.Tasks.List",
            &self.address,
            Some(self.call_timeout),
            tasks_v1::ListTasksRequest::default(),
            |request| {
                let mut client = tasks_v1::tasks_client::TasksClient::new(self.channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES);
                let request = namespaced(request, ns);
                async move { client.list(request).await }
            },
        )
        .await?;
        Ok(response.tasks.into_iter().map(convert::task).collect())
    }

    async fn content(
        &self,
        ns: &MetadataValue<Ascii>,
    ) -> Result<Vec<crate::model::ContainerdBlob>, CriError> {
        let method = "containerd.Content.List";
        let mut stream = unary_call(
            method,
            &self.address,
            Some(self.call_timeout),
            content_v1::ListContentRequest::default(),
            |request| {
                let mut client =
                    content_v1::content_client::ContentClient::new(self.channel.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES);
                let request = namespaced(request, ns);
                async move { client.list(request).await }
            },
        )
        .await?;
        let mut out = Vec::new();
        while let Some(message) = self.next(method, &mut stream).await? {
            out.extend(message.info.into_iter().map(convert::blob));
        }
        Ok(out)
    }

    async fn ingests(
        &self,
        ns: &MetadataValue<Ascii>,
    ) -> Result<Vec<crate::model::ContainerdIngest>, CriError> {
        let response = unary_call(
            "containerd.Content.ListStatuses",
            &self.address,
            Some(self.call_timeout),
            content_v1::ListStatusesRequest::default(),
            |request| {
                let mut client =
                    content_v1::content_client::ContentClient::new(self.channel.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES);
                let request = namespaced(request, ns);
                async move { client.list_statuses(request).await }
            },
        )
        .await?;
        Ok(response.statuses.into_iter().map(convert::ingest).collect())
    }

    async fn leases(
        &self,
        ns: &MetadataValue<Ascii>,
        name: &str,
        state: &mut ContainerdState,
    ) -> Result<Vec<crate::model::ContainerdLease>, CriError> {
        let client = leases_v1::leases_client::LeasesClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let response = unary_call(
            "containerd.Leases.List",
            &self.address,
            Some(self.call_timeout),
            leases_v1::ListRequest::default(),
            |request| {
                let mut client = client.clone();
                let request = namespaced(request, ns);
                async move { client.list(request).await }
            },
        )
        .await?;
        let mut out = Vec::new();
        for lease in response.leases {
            let mut lease = convert::lease(lease);
            let request = leases_v1::ListResourcesRequest {
                id: lease.id.clone(),
            };
            let resources = unary_call(
                "containerd.Leases.ListResources",
                &self.address,
                Some(self.call_timeout),
                request,
                |request| {
                    let mut client = client.clone();
                    let request = namespaced(request, ns);
                    async move { client.list_resources(request).await }
                },
            )
            .await;
            match resources {
                Ok(r) => {
                    lease.resources = r
                        .resources
                        .into_iter()
                        .map(convert::lease_resource)
                        .collect();
                }
                Err(e) => state.warnings.push(format!(
                    "namespace {name}: the resources of lease {} could not be listed: {e}",
                    lease.id
                )),
            }
            out.push(lease);
        }
        Ok(out)
    }

    /// One snapshotter's snapshots in a namespace, each with its Usage.
    async fn snapshots(
        &self,
        ns: &MetadataValue<Ascii>,
        snapshotter: &str,
        name: &str,
        state: &mut ContainerdState,
    ) -> Result<Vec<crate::model::ContainerdSnapshot>, CriError> {
        let method = "containerd.Snapshots.List";
        let client = snapshots_v1::snapshots_client::SnapshotsClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let request = snapshots_v1::ListSnapshotsRequest {
            snapshotter: snapshotter.to_owned(),
            filters: Vec::new(),
        };
        let mut stream = unary_call(
            method,
            &self.address,
            Some(self.call_timeout),
            request,
            |request| {
                let mut client = client.clone();
                let request = namespaced(request, ns);
                async move { client.list(request).await }
            },
        )
        .await?;
        let mut out = Vec::new();
        while let Some(message) = self.next(method, &mut stream).await? {
            out.extend(
                message
                    .info
                    .into_iter()
                    .map(|info| convert::snapshot(snapshotter, info)),
            );
        }
        if !self.usage {
            return Ok(out);
        }
        // Usage calls, USAGE_IN_FLIGHT at a time (an active snapshot's usage is a walk of its
        // directory in containerd: many at once would only queue there).
        let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(USAGE_IN_FLIGHT));
        let mut calls = tokio::task::JoinSet::new();
        for (index, snapshot) in out.iter().enumerate() {
            let Ok(permit) = limit.clone().acquire_owned().await else {
                break;
            };
            let request = snapshots_v1::UsageRequest {
                snapshotter: snapshotter.to_owned(),
                key: snapshot.name.clone(),
            };
            let (client, ns) = (client.clone(), ns.clone());
            let (address, deadline) = (self.address.clone(), self.call_timeout);
            calls.spawn(async move {
                let usage = unary_call(
                    "containerd.Snapshots.Usage",
                    &address,
                    Some(deadline),
                    request,
                    |request| {
                        let mut client = client.clone();
                        let request = namespaced(request, &ns);
                        async move { client.usage(request).await }
                    },
                )
                .await;
                drop(permit);
                (index, usage)
            });
        }
        while let Some(joined) = calls.join_next().await {
            let Ok((index, usage)) = joined else {
                continue;
            };
            match usage {
                Ok(usage) => out[index].usage = Some(convert::usage(usage)),
                Err(e) => state.warnings.push(format!(
                    "namespace {name}: the usage of snapshot {snapshotter}/{} could not be read: \
                     {e}",
                    out[index].name
                )),
            }
        }
        Ok(out)
    }

    /// The next message of a server stream, within the call deadline.
    async fn next<T>(
        &self,
        method: &'static str,
        stream: &mut tonic::Streaming<T>,
    ) -> Result<Option<T>, CriError> {
        match tokio::time::timeout(self.call_timeout, stream.message()).await {
            Ok(Ok(message)) => Ok(message),
            Ok(Err(status)) => Err(super::convert::error_from_status(
                method,
                &self.address,
                status,
            )),
            Err(_) => Err(CriError::Timeout {
                method,
                after: self.call_timeout,
            }),
        }
    }
}

/// The snapshotters a namespace's containers and content labels name.
fn snapshotters_named(ns: &NamespaceState) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = ns
        .containers
        .iter()
        .map(|c| c.snapshotter.clone())
        .filter(|s| !s.is_empty())
        .collect();
    for blob in &ns.content {
        for key in blob.labels.keys() {
            if let Some(rest) = key.strip_prefix(SNAPSHOT_REF_LABEL) {
                let sn = rest.split('/').next().unwrap_or(rest);
                if !sn.is_empty() {
                    out.insert(sn.to_owned());
                }
            }
        }
    }
    out
}

/// A file's bytes on disk (st_blocks × 512) and its device; `None` when it cannot be read.
fn file_usage(path: &Path) -> Option<FileUsage> {
    let meta = std::fs::metadata(path).ok()?;
    Some(FileUsage {
        path: path.display().to_string(),
        bytes: meta.blocks().saturating_mul(512),
        device: Some(meta.dev()),
    })
}

/// What the filesystem holding `path` has in use, from statvfs(3), and its device.
pub fn filesystem_usage(path: &Path) -> Result<FilesystemUsage, CriError> {
    let space = statvfs::fs_space(path).map_err(|source| CriError::Statvfs {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(FilesystemUsage {
        path: path.display().to_string(),
        capacity: space.capacity,
        used_bytes: space.capacity.saturating_sub(space.free),
        inodes: space.inodes,
        inodes_used: space.inodes.saturating_sub(space.inodes_free),
        block_size: space.block_size,
        device: statvfs::device(path).ok(),
    })
}
