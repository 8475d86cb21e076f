//! [`ContainerdImages`]: the client of containerd's own Images service
//! (`containerd.services.images.v1.Images`, not CRI), which the runtime pins use to put
//! `io.cri-containerd.pinned=pinned` on the images imagekeeper keeps. containerd 1.7.10 and
//! later list an image carrying that label in namespace `k8s.io` as `pinned: true` in CRI
//! ListImages, and the kubelet's image GC and eviction manager skip pinned images.
//!
//! Invariants: every call carries the namespace in the `containerd-namespace` header, goes
//! through the CRI client's `unary_call` (deadline, one retry on a broken connection, grpc-go
//! error text), and an Update names only `labels.<key>` paths in its update mask, so it can
//! change nothing but those labels (an empty value removes the label, as containerd's
//! metadata store does). The generated code and its conversions stay in this file.

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use super::client::{lazy_unix_channel, socket_path, unary_call};
use crate::runtime::{CriError, LabelledImage};

/// The code generated from `proto/containerd/services/images/v1/images.proto` and
/// `proto/containerd/types/descriptor.proto` (nested as their packages, as the generated code
/// refers to `containerd.types` through `super`); the fake runtime's Images service
/// (`cri::fake`) serves them too.
#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
pub(super) mod proto {
    pub mod containerd {
        pub mod types {
            tonic::include_proto!("containerd.types");
        }
        pub mod services {
            pub mod images {
                pub mod v1 {
                    tonic::include_proto!("containerd.services.images.v1");
                }
            }
        }
    }
}

use images_v1::images_client::ImagesClient;
use proto::containerd::services::images::v1 as images_v1;
use proto::containerd::types::Descriptor;

/// The namespace containerd's CRI plugin keeps the kubelet's images in.
pub const CONTAINERD_CRI_NAMESPACE: &str = "k8s.io";

/// A client of containerd's Images service in one namespace.
#[derive(Clone, Debug)]
pub struct ContainerdImages {
    client: ImagesClient<Channel>,
    address: String,
    namespace: MetadataValue<tonic::metadata::Ascii>,
    call_timeout: Duration,
}

impl ContainerdImages {
    /// A client of the containerd socket at `address` (`unix://PATH` or an absolute path),
    /// in `namespace`. Nothing is dialed yet. Must run inside a tokio runtime.
    pub fn connect(
        address: &str,
        namespace: &str,
        connect_timeout: Duration,
        call_timeout: Duration,
    ) -> Result<ContainerdImages, CriError> {
        let path = socket_path(address)?;
        let namespace = namespace.parse().map_err(|_| CriError::InvalidEndpoint {
            endpoint: address.to_owned(),
            reason: format!("containerd namespace {namespace:?} is not a valid header value"),
        })?;
        Ok(ContainerdImages {
            client: ImagesClient::new(lazy_unix_channel(path, connect_timeout)),
            address: address.to_owned(),
            namespace,
            call_timeout,
        })
    }

    /// The containerd address given to [`ContainerdImages::connect`].
    pub fn address(&self) -> &str {
        &self.address
    }

    /// A clone of the client and `request` with the namespace in its `containerd-namespace`
    /// header: what every call sends (List, Get and Update alike).
    fn namespaced<T>(
        &self,
        mut request: tonic::Request<T>,
    ) -> (ImagesClient<Channel>, tonic::Request<T>) {
        request
            .metadata_mut()
            .insert("containerd-namespace", self.namespace.clone());
        (self.client.clone(), request)
    }

    /// Every image name in the namespace (Images.List with no filter).
    pub async fn list(&self) -> Result<Vec<LabelledImage>, CriError> {
        let response = unary_call(
            "containerd.Images.List",
            &self.address,
            Some(self.call_timeout),
            images_v1::ListImagesRequest::default(),
            |request| {
                let (mut client, request) = self.namespaced(request);
                async move { client.list(request).await }
            },
        )
        .await?;
        Ok(response.images.into_iter().map(image_from_proto).collect())
    }

    /// Images.Get of one name; `None` when containerd has no image of that name.
    pub async fn get(&self, name: &str) -> Result<Option<LabelledImage>, CriError> {
        let request = images_v1::GetImageRequest {
            name: name.to_owned(),
        };
        match unary_call(
            "containerd.Images.Get",
            &self.address,
            Some(self.call_timeout),
            request,
            |request| {
                let (mut client, request) = self.namespaced(request);
                async move { client.get(request).await }
            },
        )
        .await
        {
            Ok(response) => Ok(response.image.map(image_from_proto)),
            Err(e) if e.code() == Some(super::RpcCode::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets each `(key, value)` label on `image` (an empty value removes the label) with one
    /// Images.Update whose mask names only `labels.<key>` of those keys.
    // The agent's runtime pins alone (a `cri` build without it has no caller).
    #[cfg_attr(not(feature = "agent"), allow(dead_code))]
    pub(crate) async fn update_labels(
        &self,
        image: &LabelledImage,
        labels: &[(&str, &str)],
    ) -> Result<(), CriError> {
        let request = images_v1::UpdateImageRequest {
            image: Some(images_v1::Image {
                name: image.name.clone(),
                labels: labels
                    .iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                target: Some(Descriptor {
                    media_type: image.target_media_type.clone(),
                    digest: image.target_digest.clone(),
                    size: image.target_size,
                    annotations: Default::default(),
                }),
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: labels.iter().map(|(k, _)| format!("labels.{k}")).collect(),
            }),
        };
        unary_call(
            "containerd.Images.Update",
            &self.address,
            Some(self.call_timeout),
            request,
            |request| {
                let (mut client, request) = self.namespaced(request);
                async move { client.update(request).await }
            },
        )
        .await
        .map(|_| ())
    }
}

fn image_from_proto(image: images_v1::Image) -> LabelledImage {
    let target = image.target.unwrap_or_default();
    LabelledImage {
        name: image.name,
        labels: image.labels.into_iter().collect(),
        target_media_type: target.media_type,
        target_digest: target.digest,
        target_size: target.size,
    }
}
