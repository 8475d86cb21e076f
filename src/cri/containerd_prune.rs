//! [`ContainerdPruner`]: the only calls that change containerd's own state outside the runtime
//! pins: `prune --orphans`'s removals of leftovers, through containerd's API on its socket.
//! Snapshots.Remove of one snapshot (in its snapshotter and namespace), Content.Delete of one
//! blob in one namespace, and a throwaway lease deleted with `sync` so containerd's garbage
//! collection runs to its end before the command answers (containerd frees a removed
//! snapshot's directory and a deleted blob's file in that collection, not in the call).
//!
//! Invariants: it decides nothing: what to remove, and the re-check that it is still a
//! leftover, are the caller's (`disk::orphan_plan` over a fresh `ContainerdView` read). Every
//! call carries a deadline and the `containerd-namespace` header and goes through the CRI
//! client's `unary_call`. The generated types never leave this file.

use std::time::Duration;

use tonic::transport::Channel;

use super::client::{MAX_MESSAGE_BYTES, lazy_unix_channel, socket_path, unary_call};
use super::containerd_proto::containerd::services::{
    content::v1 as content_v1, leases::v1 as leases_v1, snapshots::v1 as snapshots_v1,
};
use super::containerd_view::namespaced;
use crate::format::format_rfc3339;
use crate::model::UnixNanos;
use crate::runtime::CriError;

/// The lease `collect_garbage` creates and deletes: an expiry a minute ahead, so one a crash
/// left behind ends by itself.
const SYNC_LEASE_PREFIX: &str = "imagekeeper-prune-sync-";

/// Removes leftovers through containerd's own API.
#[derive(Clone, Debug)]
pub struct ContainerdPruner {
    channel: Channel,
    address: String,
    call_timeout: Duration,
}

impl ContainerdPruner {
    /// A pruner of the containerd socket at `address` (`unix://PATH` or an absolute path).
    /// Nothing is dialed yet. Must run inside a tokio runtime.
    pub fn connect(
        address: &str,
        connect_timeout: Duration,
        call_timeout: Duration,
    ) -> Result<ContainerdPruner, CriError> {
        let path = socket_path(address)?;
        Ok(ContainerdPruner {
            channel: lazy_unix_channel(path, connect_timeout),
            address: address.to_owned(),
            call_timeout,
        })
    }

    fn ns_header(
        &self,
        name: &str,
    ) -> Result<tonic::metadata::MetadataValue<tonic::metadata::Ascii>, CriError> {
        name.parse().map_err(|_| CriError::InvalidEndpoint {
            endpoint: self.address.clone(),
            reason: format!("containerd namespace {name:?} is not a valid header value"),
        })
    }

    /// Snapshots.Remove of `key` in `snapshotter`, namespace `namespace`. containerd refuses a
    /// snapshot that has a child (FailedPrecondition).
    pub async fn remove_snapshot(
        &self,
        namespace: &str,
        snapshotter: &str,
        key: &str,
    ) -> Result<(), CriError> {
        let ns = self.ns_header(namespace)?;
        let request = snapshots_v1::RemoveSnapshotRequest {
            snapshotter: snapshotter.to_owned(),
            key: key.to_owned(),
        };
        unary_call(
            "containerd.Snapshots.Remove",
            &self.address,
            Some(self.call_timeout),
            request,
            |request| {
                let mut client =
                    snapshots_v1::snapshots_client::SnapshotsClient::new(self.channel.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES);
                let request = namespaced(request, &ns);
                async move { client.remove(request).await }
            },
        )
        .await
    }

    /// Content.Delete of `digest` in namespace `namespace`.
    pub async fn delete_blob(&self, namespace: &str, digest: &str) -> Result<(), CriError> {
        let ns = self.ns_header(namespace)?;
        let request = content_v1::DeleteContentRequest {
            digest: digest.to_owned(),
        };
        unary_call(
            "containerd.Content.Delete",
            &self.address,
            Some(self.call_timeout),
            request,
            |request| {
                let mut client =
                    content_v1::content_client::ContentClient::new(self.channel.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES);
                let request = namespaced(request, &ns);
                async move { client.delete(request).await }
            },
        )
        .await
    }

    /// Runs containerd's garbage collection to its end: a lease of its own created in
    /// `namespace` and deleted with `sync` (containerd's `ctr leases rm --sync`). `tag` makes
    /// the lease's id unique to the caller; `now` is the wall clock's time (the lease expires
    /// a minute after it, should the delete never come).
    pub async fn collect_garbage(
        &self,
        namespace: &str,
        tag: &str,
        now: UnixNanos,
    ) -> Result<(), CriError> {
        let ns = self.ns_header(namespace)?;
        let id = format!("{SYNC_LEASE_PREFIX}{tag}");
        let client = leases_v1::leases_client::LeasesClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let expire = format_rfc3339(now.saturating_add(Duration::from_secs(60)));
        let create = leases_v1::CreateRequest {
            id: id.clone(),
            labels: [("containerd.io/gc.expire".to_owned(), expire)]
                .into_iter()
                .collect(),
        };
        unary_call(
            "containerd.Leases.Create",
            &self.address,
            Some(self.call_timeout),
            create,
            |request| {
                let mut client = client.clone();
                let request = namespaced(request, &ns);
                async move { client.create(request).await }
            },
        )
        .await?;
        unary_call(
            "containerd.Leases.Delete",
            &self.address,
            Some(self.call_timeout),
            leases_v1::DeleteRequest { id, sync: true },
            |request| {
                let mut client = client.clone();
                let request = namespaced(request, &ns);
                async move { client.delete(request).await }
            },
        )
        .await
    }
}
