//! [`CriClient`]: the tonic client of a CRI runtime over a unix socket, and [`CriConfig`].
//!
//! Invariants: the connection is lazy and re-dialed after a failure, so a runtime restart costs
//! at most the calls made while it is down; no call outlives its deadline (the deadline is sent
//! as `grpc-timeout` and also enforced locally, and dialing has its own timeout); request bodies
//! are never logged, so pull credentials never reach a log.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::GrpcMethod;
use tonic::codegen::http;
use tonic::transport::{Channel, Endpoint, Uri};

use super::container_status::ContainerStatusReport;
use super::containers_decode::ListedContainersResponse;
use super::convert;
use super::list_decode::ListImagesCodec;
use super::proto;
use super::proto::image_service_client::ImageServiceClient;
use super::proto::runtime_service_client::RuntimeServiceClient;
use super::statvfs;
use crate::model::{
    ContainerEvent, ContainerUsage, ImageFsStats, ImageList, PullCredentials, PullSpec,
    RuntimeContainer, RuntimeImage,
};
use crate::runtime::ImageRuntime;
use crate::runtime::{CriError, RuntimeVersion};

#[cfg(any(test, feature = "testing"))]
mod pods;
#[cfg(any(test, feature = "testing"))]
pub use super::pod_specs::{
    ContainerSecurity, ContainerSpec, ExecResult, MountSpec, PodSandboxSummary, SandboxSpec,
};

/// containerd's default socket, as the kubelet's default `--container-runtime-endpoint`.
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
/// Largest message the client accepts, as the kubelet (16 MiB).
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Where the runtime is and how long to wait for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriConfig {
    /// `unix:///path/to.sock` (or a bare absolute path).
    pub runtime_endpoint: String,
    /// The image service's endpoint when it differs (kubelet's `--image-service-endpoint`);
    /// `None` means the runtime endpoint.
    pub image_endpoint: Option<String>,
    /// Longest time to dial the socket.
    pub connect_timeout: Duration,
    /// Deadline of every call but PullImage (the kubelet uses 2 minutes).
    pub call_timeout: Duration,
    /// Deadline of PullImage; `None` (the default) is none: as the kubelet's remote image
    /// service, a pull is only cancelled (on shutdown), never timed out, so a 100 GB image is
    /// not failed at an arbitrary deadline.
    pub pull_timeout: Option<Duration>,
}

impl Default for CriConfig {
    fn default() -> CriConfig {
        CriConfig {
            runtime_endpoint: DEFAULT_RUNTIME_ENDPOINT.to_string(),
            image_endpoint: None,
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(120),
            pull_timeout: None,
        }
    }
}

/// A CRI GetContainerEvents stream. It has no deadline: it lives until the runtime ends it,
/// the connection breaks, or it is dropped.
pub struct ContainerEventStream {
    inner: tonic::Streaming<proto::ContainerEventResponse>,
    endpoint: String,
}

impl std::fmt::Debug for ContainerEventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerEventStream")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl ContainerEventStream {
    /// The next event; `None` when the runtime ended the stream, an error when it broke.
    pub async fn next(&mut self) -> Option<Result<ContainerEvent, CriError>> {
        match self.inner.message().await {
            Ok(Some(event)) => Some(Ok(convert::container_event_from_proto(event))),
            Ok(None) => None,
            Err(status) => Some(Err(convert::error_from_status(
                "GetContainerEvents",
                &self.endpoint,
                status,
            ))),
        }
    }
}

/// A CRI client over unix sockets. Cheap to clone; clones share the connections.
#[derive(Clone, Debug)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    /// The image service's channel, for ListImages' own decode (`list_decode`).
    image_channel: Channel,
    /// The runtime service's channel, for ListContainers' own decode (`containers_decode`).
    runtime_channel: Channel,
    runtime_endpoint: String,
    image_endpoint: String,
    call_timeout: Duration,
    pull_timeout: Option<Duration>,
}

/// The socket path of a `unix://` endpoint (or of a bare absolute path).
pub fn socket_path(endpoint: &str) -> Result<PathBuf, CriError> {
    let invalid = |reason: &str| CriError::InvalidEndpoint {
        endpoint: endpoint.to_string(),
        reason: reason.to_string(),
    };
    let path = match endpoint.strip_prefix("unix://") {
        Some(path) => path,
        None if endpoint.contains("://") => {
            return Err(invalid("only unix:// endpoints are supported"));
        }
        None => endpoint,
    };
    if !path.starts_with('/') {
        return Err(invalid("the socket path must be absolute"));
    }
    Ok(PathBuf::from(path))
}

/// A lazy channel that dials `path` on first use and again after the connection breaks.
pub(super) fn lazy_unix_channel(path: PathBuf, connect_timeout: Duration) -> Channel {
    // The URI is required by tonic but unused: the connector below ignores it.
    let endpoint = Endpoint::from_static("http://cri.invalid").connect_timeout(connect_timeout);
    endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move {
            let stream = tokio::time::timeout(connect_timeout, UnixStream::connect(&path))
                .await
                .map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("dial {} timed out", path.display()),
                    )
                })?
                .map_err(|err| {
                    std::io::Error::new(err.kind(), format!("dial unix {}: {err}", path.display()))
                })?;
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    }))
}

impl CriClient {
    /// A client for `config`. Nothing is dialed yet: the first call connects, so this succeeds
    /// while the runtime is down (only a malformed endpoint fails). Must run inside a tokio
    /// runtime.
    pub async fn connect(config: CriConfig) -> Result<CriClient, CriError> {
        let runtime_path = socket_path(&config.runtime_endpoint)?;
        let image_endpoint = config
            .image_endpoint
            .clone()
            .filter(|endpoint| !endpoint.is_empty())
            .unwrap_or_else(|| config.runtime_endpoint.clone());
        let image_path = socket_path(&image_endpoint)?;
        let runtime_channel = lazy_unix_channel(runtime_path.clone(), config.connect_timeout);
        let image_channel = if image_path == runtime_path {
            runtime_channel.clone()
        } else {
            lazy_unix_channel(image_path, config.connect_timeout)
        };
        Ok(CriClient {
            runtime: RuntimeServiceClient::new(runtime_channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            images: ImageServiceClient::new(image_channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            image_channel,
            runtime_channel,
            runtime_endpoint: config.runtime_endpoint,
            image_endpoint,
            call_timeout: config.call_timeout,
            pull_timeout: config.pull_timeout,
        })
    }

    /// The runtime service's endpoint, as configured.
    pub fn runtime_endpoint(&self) -> &str {
        &self.runtime_endpoint
    }

    /// The image service's endpoint: the runtime's unless configured apart.
    pub fn image_endpoint(&self) -> &str {
        &self.image_endpoint
    }

    /// The runtime's name and version.
    pub async fn version(&self) -> Result<RuntimeVersion, CriError> {
        let request = proto::VersionRequest {
            version: "v1".to_string(),
        };
        let response = self
            .runtime_rpc(
                "Version",
                Some(self.call_timeout),
                request,
                |mut client, r| async move { client.version(r).await },
            )
            .await?;
        Ok(convert::version_from_proto(response))
    }
}

impl CriClient {
    /// The status of one container; a container the runtime does not know is an error
    /// (containerd: NotFound).
    pub async fn container_status(
        &self,
        container_id: &str,
    ) -> Result<ContainerStatusReport, CriError> {
        let request = proto::ContainerStatusRequest {
            container_id: container_id.to_string(),
            verbose: false,
        };
        let response = self
            .runtime_rpc(
                "ContainerStatus",
                Some(self.call_timeout),
                request,
                |mut client, r| async move { client.container_status(r).await },
            )
            .await?;
        let status = response.status.ok_or_else(|| CriError::Rpc {
            method: "ContainerStatus",
            code: super::RpcCode::Unknown,
            message: format!("runtime returned no status for container {container_id}"),
        })?;
        Ok(convert::container_status_from_proto(status))
    }

    /// Opens the runtime's GetContainerEvents stream. A runtime without evented PLEG
    /// (containerd 1.6) answers Unimplemented here. Neither the call nor the stream has a
    /// deadline (dialing has its own): containerd 1.7 and 2.1 send the stream's headers with
    /// its first event, so on a quiet node the call is answered only when a container event
    /// comes, however long that takes (a deadline would end every quiet subscription, and
    /// containerd 1.7's handler, left reading its one event channel, would take the next
    /// event from the new one). A runtime that goes away breaks the connection instead.
    pub async fn container_events(&self) -> Result<ContainerEventStream, CriError> {
        let mut client = self.runtime.clone();
        let endpoint = self.runtime_endpoint.clone();
        let opened = client
            .get_container_events(proto::GetEventsRequest {})
            .await
            .map_err(|status| {
                convert::error_from_status("GetContainerEvents", &endpoint, status)
            })?;
        Ok(ContainerEventStream {
            inner: opened.into_inner(),
            endpoint,
        })
    }
}

impl CriClient {
    /// One unary call of the runtime service through [`unary_call`].
    async fn runtime_rpc<Req, Resp, F, Fut>(
        &self,
        method: &'static str,
        deadline: Option<Duration>,
        request: Req,
        call: F,
    ) -> Result<Resp, CriError>
    where
        Req: Clone,
        F: Fn(RuntimeServiceClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        unary_call(method, &self.runtime_endpoint, deadline, request, |r| {
            call(self.runtime.clone(), r)
        })
        .await
    }

    /// One unary call of the image service through [`unary_call`].
    async fn image_rpc<Req, Resp, F, Fut>(
        &self,
        method: &'static str,
        deadline: Option<Duration>,
        request: Req,
        call: F,
    ) -> Result<Resp, CriError>
    where
        Req: Clone,
        F: Fn(ImageServiceClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        unary_call(method, &self.image_endpoint, deadline, request, |r| {
            call(self.images.clone(), r)
        })
        .await
    }
}

/// Every unary CRI call goes through here: the one place for the deadline, the retry on a
/// broken connection, the error mapping and the call's trace lines.
///
/// A `Some` deadline is sent as `grpc-timeout` and enforced here too, so a runtime that never
/// answers (or a stuck connection) cannot hold the caller past it. `None` waits for the
/// runtime's answer for as long as it takes (PullImage, as the kubelet); the caller cancels by
/// dropping the future.
///
/// A call that fails because the connection broke (the runtime restarted since the last call)
/// is sent once more on a fresh connection, within the same deadline, as grpc-go's transparent
/// retry does; CRI calls are idempotent or keyed by name, so a repeat is harmless.
/// One unary call over `channel` with a codec of our own (`list_decode`, `containers_decode`),
/// made as the generated client makes it: the same message size limits, readiness error and
/// method extension.
async fn own_codec_unary<C>(
    channel: Channel,
    (service, method): (&'static str, &'static str),
    path: &'static str,
    mut request: tonic::Request<C::Encode>,
    codec: C,
) -> Result<tonic::Response<C::Decode>, tonic::Status>
where
    C: tonic::codec::Codec,
    C::Encode: Sync,
    C::Decode: Sync,
{
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
    request
        .extensions_mut()
        .insert(GrpcMethod::new(service, method));
    grpc.unary(request, http::uri::PathAndQuery::from_static(path), codec)
        .await
}

pub(super) async fn unary_call<Req, Resp, F, Fut>(
    method: &'static str,
    endpoint: &str,
    deadline: Option<Duration>,
    request: Req,
    mut call: F,
) -> Result<Resp, CriError>
where
    Req: Clone,
    F: FnMut(tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
{
    tracing::trace!(method, endpoint, "CRI call");
    let start = tokio::time::Instant::now();
    let attempts = async {
        let mut retried = false;
        loop {
            let mut attempt = tonic::Request::new(request.clone());
            if let Some(deadline) = deadline {
                attempt.set_timeout(deadline.saturating_sub(start.elapsed()));
            }
            match call(attempt).await {
                Err(status) if !retried && convert::is_broken_connection(&status) => {
                    tracing::debug!(
                        method,
                        endpoint,
                        "CRI connection broke; retrying on a new one"
                    );
                    retried = true;
                }
                outcome => return outcome,
            }
        }
    };
    let Some(deadline) = deadline else {
        return attempts
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| {
                let err = convert::error_from_status(method, endpoint, status);
                tracing::debug!(method, endpoint, error = %err, "CRI call failed");
                err
            });
    };
    match tokio::time::timeout(deadline, attempts).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        // The far end enforced the grpc-timeout first (a tonic server answers Cancelled, a Go
        // one DeadlineExceeded): either way, our deadline passed.
        Ok(Err(status))
            if start.elapsed() >= deadline
                && matches!(
                    status.code(),
                    tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
                ) =>
        {
            tracing::debug!(method, endpoint, ?deadline, "CRI call timed out");
            Err(CriError::Timeout {
                method,
                after: deadline,
            })
        }
        Ok(Err(status)) => {
            let err = convert::error_from_status(method, endpoint, status);
            tracing::debug!(method, endpoint, error = %err, "CRI call failed");
            Err(err)
        }
        Err(_) => {
            tracing::debug!(method, endpoint, ?deadline, "CRI call timed out");
            Err(CriError::Timeout {
                method,
                after: deadline,
            })
        }
    }
}

impl ImageRuntime for CriClient {
    /// ListImages, each image copied out of the list [`ImageRuntime::list_image_list`] keeps.
    async fn list_images(&self) -> Result<Vec<RuntimeImage>, CriError> {
        self.list_image_list().await.map(ImageList::into_images)
    }

    /// ListImages decoded by `list_decode`: the list keeps the response's bytes, taken from
    /// tonic's buffer without a copy, and reads each image's strings out of them (the same
    /// images as the generated decode, without its intermediate `proto::Image`s).
    async fn list_image_list(&self) -> Result<ImageList, CriError> {
        let request = proto::ListImagesRequest { filter: None };
        unary_call(
            "ListImages",
            &self.image_endpoint,
            Some(self.call_timeout),
            request,
            |r| {
                own_codec_unary(
                    self.image_channel.clone(),
                    ("runtime.v1.ImageService", "ListImages"),
                    "/runtime.v1.ImageService/ListImages",
                    r,
                    ListImagesCodec,
                )
            },
        )
        .await
    }

    async fn image_status(
        &self,
        image: &str,
        runtime_handler: &str,
    ) -> Result<Option<RuntimeImage>, CriError> {
        let request = proto::ImageStatusRequest {
            image: Some(convert::image_spec(image, runtime_handler)),
            verbose: false,
        };
        let response = self
            .image_rpc(
                "ImageStatus",
                Some(self.call_timeout),
                request,
                |mut client, r| async move { client.image_status(r).await },
            )
            .await?;
        match response.image {
            // The kubelet's remote image service refuses an image it cannot key or size
            // (remote_image.go, ImageStatus).
            Some(found) if found.id.is_empty() || found.size == 0 => Err(CriError::InvalidReply {
                method: "ImageStatus",
                message: format!(
                    "Id or size of image {} is not set",
                    crate::format::go_quote(image)
                ),
            }),
            found => Ok(found.map(convert::image_from_proto)),
        }
    }

    async fn pull_image(
        &self,
        image: &str,
        runtime_handler: &str,
        credentials: Option<&PullCredentials>,
    ) -> Result<String, CriError> {
        self.pull_image_for(&PullSpec::new(image, runtime_handler), credentials)
            .await
    }

    async fn pull_image_for(
        &self,
        spec: &PullSpec,
        credentials: Option<&PullCredentials>,
    ) -> Result<String, CriError> {
        let request = convert::pull_request(spec, credentials);
        tracing::debug!(
            image = spec.image,
            runtime_handler = spec.runtime_handler,
            with_credentials = credentials.is_some(),
            "pulling image"
        );
        let response = self
            .image_rpc(
                "PullImage",
                self.pull_timeout,
                request,
                |mut client, r| async move { client.pull_image(r).await },
            )
            .await?;
        if response.image_ref.is_empty() {
            // remote_image.go, PullImage: an empty ref is a failed pull.
            return Err(CriError::InvalidReply {
                method: "PullImage",
                message: format!(
                    "imageRef of image {} is not set",
                    crate::format::go_quote(&spec.image)
                ),
            });
        }
        Ok(response.image_ref)
    }

    async fn remove_image(&self, image: &str, runtime_handler: &str) -> Result<(), CriError> {
        let request = proto::RemoveImageRequest {
            image: Some(convert::image_spec(image, runtime_handler)),
        };
        self.image_rpc(
            "RemoveImage",
            Some(self.call_timeout),
            request,
            |mut client, r| async move { client.remove_image(r).await },
        )
        .await?;
        Ok(())
    }

    async fn image_fs_stats(&self) -> Result<ImageFsStats, CriError> {
        let response = self
            .image_rpc(
                "ImageFsInfo",
                Some(self.call_timeout),
                proto::ImageFsInfoRequest {},
                |mut client, r| async move { client.image_fs_info(r).await },
            )
            .await?;
        let mut stats = convert::image_fs_from_proto(response)?;
        let path = PathBuf::from(&stats.mountpoint);
        stats.device = statvfs::device(&path).ok();
        let space =
            statvfs::fs_space(&path).map_err(|source| CriError::Statvfs { path, source })?;
        stats.capacity = space.capacity;
        stats.available = space.available;
        stats.inodes = space.inodes;
        stats.inodes_free = space.inodes_free;
        // A further image filesystem this process cannot read (another mount namespace) is
        // left at capacity 0: GC does not judge it. Its device tells GC when it is the same
        // filesystem as the first or an earlier one (judged once, on the first reading).
        for other in &mut stats.other_image_fs {
            let path = Path::new(&other.mountpoint);
            if let Ok(space) = statvfs::fs_space(path) {
                other.capacity = space.capacity;
                other.available = space.available;
                other.inodes = space.inodes;
                other.inodes_free = space.inodes_free;
                other.device = statvfs::device(path).ok();
            }
        }
        Ok(stats)
    }

    async fn sandbox_image(&self) -> Result<Option<String>, CriError> {
        let response = self
            .runtime_rpc(
                "Status",
                Some(self.call_timeout),
                proto::StatusRequest { verbose: true },
                |mut client, r| async move { client.status(r).await },
            )
            .await?;
        Ok(super::sandbox_image_of_status_info(
            response.info.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ))
    }

    /// ListContainers decoded straight into the model's containers (`containers_decode`: the
    /// same containers as the generated decode and conversion, without the generated
    /// `proto::Container`s).
    async fn list_containers(&self) -> Result<Vec<RuntimeContainer>, CriError> {
        let request = proto::ListContainersRequest { filter: None };
        let response = unary_call(
            "ListContainers",
            &self.runtime_endpoint,
            Some(self.call_timeout),
            request,
            |r| {
                own_codec_unary(
                    self.runtime_channel.clone(),
                    ("runtime.v1.RuntimeService", "ListContainers"),
                    "/runtime.v1.RuntimeService/ListContainers",
                    r,
                    tonic_prost::ProstCodec::<
                        proto::ListContainersRequest,
                        ListedContainersResponse,
                    >::default(),
                )
            },
        )
        .await?;
        Ok(response.containers)
    }

    async fn container_usage(&self, container_id: &str) -> Result<ContainerUsage, CriError> {
        let report = self.container_status(container_id).await?;
        Ok(convert::container_usage_from_report(&report))
    }
}

#[cfg(test)]
mod tests;
