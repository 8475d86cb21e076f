//! [`FakeRuntime`]: an in-process CRI runtime for tests. A tonic server on a unix socket in its
//! own temp dir serves the ImageService and RuntimeService subset from a state the test sets
//! (images, pullable references, containers, the image filesystem, failures and hangs), and
//! records the pulls it was asked for. containerd's Images service (List, Get, Update of the
//! labels) answers on the same socket (`fake/containerd_images.rs`), for the runtime pins.
//!
//! Invariants: it answers like containerd 1.6 where imagekeeper depends on it (an unknown image
//! in ImageStatus is OK with no image; RemoveImage of an unknown image is OK; removing by one
//! tag removes the whole image; a pull of an unknown reference is NotFound). Its answers are
//! built with the `convert` module's `*_to_proto` functions, so a test through [`crate::cri::CriClient`]
//! round-trips every conversion. It runs pods and containers not at all: those calls answer
//! Unimplemented; ContainerStatus answers for the containers the test set (with the image
//! volumes it set), and GetContainerEvents streams what the test pushes until the test ends
//! the streams (or answers Unimplemented, as containerd 1.6, when the test says `fail`). The server stops when the `FakeRuntime` is dropped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tonic::codegen::http;
use tonic::codegen::tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};
use tower::ServiceExt;

mod containerd_images;

use super::client::CriConfig;
use super::containerd_images::proto::containerd::services::images::v1::images_server::ImagesServer;
use super::convert;
use super::proto;
use super::proto::image_service_server::{ImageService, ImageServiceServer};
use super::proto::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use crate::model::{
    ContainerEvent, ImageFsStats, PullCredentials, PullSpec, RuntimeContainer, RuntimeImage,
};
use crate::runtime::{RpcCode, RuntimeVersion};

/// A failure the fake answers a method with.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
struct FakeFailure {
    code: RpcCode,
    message: String,
}

/// One PullImage request as the fake received it (credentials included, for tests to check
/// that they passed through unchanged).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakePull {
    /// The ImageSpec's image reference.
    pub image: String,
    /// The ImageSpec's runtime handler.
    pub runtime_handler: String,
    /// The AuthConfig the request carried, if any.
    pub credentials: Option<PullCredentials>,
    /// The ImageSpec's annotations and the sandbox config the request carried.
    pub spec: PullSpec,
}

#[derive(Debug, Default)]
struct FakeState {
    images: Vec<RuntimeImage>,
    /// Reference -> the image a pull of it yields.
    pullable: HashMap<String, RuntimeImage>,
    containers: Vec<RuntimeContainer>,
    image_fs: Option<ImageFsStats>,
    version: RuntimeVersion,
    failures: HashMap<String, FakeFailure>,
    hangs: HashSet<String>,
    /// The calls hanging now (see [`FakeState::hangs`]), by method: a call the client gave up
    /// on (its deadline, a dropped request) is no longer counted.
    hanging: HashMap<String, u64>,
    /// Methods that answer only after this long.
    delays: HashMap<String, Duration>,
    pulls: Vec<FakePull>,
    /// Answer PullImage with an empty image ref (a misbehaving runtime).
    empty_image_ref: bool,
    /// How many times each method was called.
    calls: HashMap<String, u64>,
    /// Container id -> the images its ContainerStatus reports as image volumes.
    image_volumes: HashMap<String, Vec<String>>,
    /// The open GetContainerEvents streams.
    event_streams: Vec<EventSender>,
    /// Answer GetContainerEvents (its headers) only with the stream's first event, as
    /// containerd 1.7 and 2.1 do; off, the stream opens at once.
    event_headers_with_first_event: bool,
    /// How many events were pushed, and a wake-up for the streams waiting on the first.
    events_pushed: u64,
    event_pushed: Arc<tokio::sync::Notify>,
    /// The verbose Status `info` map (containerd puts its CRI config under `config`).
    status_info: HashMap<String, String>,
    /// containerd's labels of each image name (its Images service, `containerd_images`).
    image_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// ListImages lists an image pinned when one of its names carries the pinned label, as
    /// containerd 1.7.10 and later do; off, only the image's own `pinned` (1.7.3 to 1.7.9
    /// with a label added to an image already present: containerd issue 9328).
    pin_labels_listed: bool,
}

type EventSender =
    tokio::sync::mpsc::UnboundedSender<Result<proto::ContainerEventResponse, Status>>;

impl FakeState {
    /// Fails, hangs or delays if the test asked for it; otherwise lets the call go on.
    fn injected(&self, method: &str) -> Injected {
        if self.hangs.contains(method) {
            return Injected::Hang;
        }
        if let Some(delay) = self.delays.get(method) {
            return Injected::Delay(*delay);
        }
        match self.failures.get(method) {
            Some(failure) => Injected::Fail(Status::new(
                convert::rpc_code_to_tonic(failure.code),
                failure.message.clone(),
            )),
            None => Injected::Nothing,
        }
    }

    fn find_image(&self, reference: &str) -> Option<&RuntimeImage> {
        self.images
            .iter()
            .find(|image| image_is_named(image, reference))
    }
}

enum Injected {
    Nothing,
    Fail(Status),
    Hang,
    Delay(Duration),
}

fn image_is_named(image: &RuntimeImage, reference: &str) -> bool {
    image.id.as_str() == reference
        || image.repo_tags.iter().any(|tag| tag == reference)
        || image.repo_digests.iter().any(|digest| digest == reference)
}

#[derive(Clone)]
struct FakeService {
    state: Arc<Mutex<FakeState>>,
}

impl FakeService {
    fn lock(&self) -> MutexGuard<'_, FakeState> {
        lock_state(&self.state)
    }

    /// Applies the injected failure or hang of `method`.
    async fn enter(&self, method: &str) -> Result<(), Status> {
        enter_state(&self.state, method).await
    }
}

/// A hanging call, counted in [`FakeState::hanging`] while its future lives.
struct HangingCall {
    state: Arc<Mutex<FakeState>>,
    method: String,
}

impl Drop for HangingCall {
    fn drop(&mut self) {
        if let Some(n) = lock_state(&self.state).hanging.get_mut(&self.method) {
            *n = n.saturating_sub(1);
        }
    }
}

/// Counts a call of `method` and applies its injected failure, hang or delay (the CRI's
/// methods and the containerd Images service's alike).
async fn enter_state(state: &Arc<Mutex<FakeState>>, method: &str) -> Result<(), Status> {
    {
        let injected = {
            let mut locked = lock_state(state);
            *locked.calls.entry(method.to_string()).or_default() += 1;
            let injected = locked.injected(method);
            if matches!(injected, Injected::Hang) {
                *locked.hanging.entry(method.to_owned()).or_default() += 1;
            }
            injected
        };
        match injected {
            Injected::Nothing => Ok(()),
            Injected::Fail(status) => Err(status),
            Injected::Hang => {
                let _counted = HangingCall {
                    state: state.clone(),
                    method: method.to_owned(),
                };
                std::future::pending().await
            }
            Injected::Delay(delay) => {
                tokio::time::sleep(delay).await;
                Ok(())
            }
        }
    }
}

/// The state stays usable after a test thread panicked while holding the lock.
fn lock_state(state: &Mutex<FakeState>) -> MutexGuard<'_, FakeState> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn spec_image(spec: Option<proto::ImageSpec>) -> (String, String) {
    let spec = spec.unwrap_or_default();
    (spec.image, spec.runtime_handler)
}

#[tonic::async_trait]
impl ImageService for FakeService {
    async fn list_images(
        &self,
        _request: Request<proto::ListImagesRequest>,
    ) -> Result<Response<proto::ListImagesResponse>, Status> {
        self.enter("ListImages").await?;
        let state = self.lock();
        let images = state
            .images
            .iter()
            .map(|image| {
                let mut image = image.clone();
                image.pinned |= state.pin_labels_listed
                    && containerd_images::labelled_pinned(&image, &state.image_labels);
                convert::image_to_proto(&image)
            })
            .collect();
        Ok(Response::new(proto::ListImagesResponse { images }))
    }

    async fn image_status(
        &self,
        request: Request<proto::ImageStatusRequest>,
    ) -> Result<Response<proto::ImageStatusResponse>, Status> {
        self.enter("ImageStatus").await?;
        let (image, _handler) = spec_image(request.into_inner().image);
        let found = self.lock().find_image(&image).map(convert::image_to_proto);
        Ok(Response::new(proto::ImageStatusResponse { image: found }))
    }

    async fn pull_image(
        &self,
        request: Request<proto::PullImageRequest>,
    ) -> Result<Response<proto::PullImageResponse>, Status> {
        self.enter("PullImage").await?;
        let request = request.into_inner();
        let spec = convert::pull_spec_from_request(&request);
        let (image, runtime_handler) = spec_image(request.image);
        let mut state = self.lock();
        state.pulls.push(FakePull {
            image: image.clone(),
            runtime_handler,
            credentials: request.auth.map(convert::credentials_from_auth_config),
            spec,
        });
        if state.empty_image_ref {
            return Ok(Response::new(proto::PullImageResponse {
                image_ref: String::new(),
            }));
        }
        if let Some(present) = state.find_image(&image) {
            let image_ref = present.id.as_str().to_string();
            return Ok(Response::new(proto::PullImageResponse { image_ref }));
        }
        let Some(pulled) = state.pullable.get(&image).cloned() else {
            return Err(Status::not_found(format!(
                "failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": {image}: not found"
            )));
        };
        let image_ref = pulled.id.as_str().to_string();
        match state.images.iter_mut().find(|known| known.id == pulled.id) {
            Some(known) => {
                for tag in pulled.repo_tags {
                    if !known.repo_tags.contains(&tag) {
                        known.repo_tags.push(tag);
                    }
                }
            }
            None => state.images.push(pulled),
        }
        Ok(Response::new(proto::PullImageResponse { image_ref }))
    }

    async fn remove_image(
        &self,
        request: Request<proto::RemoveImageRequest>,
    ) -> Result<Response<proto::RemoveImageResponse>, Status> {
        self.enter("RemoveImage").await?;
        let (image, _handler) = spec_image(request.into_inner().image);
        self.lock()
            .images
            .retain(|known| !image_is_named(known, &image));
        Ok(Response::new(proto::RemoveImageResponse {}))
    }

    async fn image_fs_info(
        &self,
        _request: Request<proto::ImageFsInfoRequest>,
    ) -> Result<Response<proto::ImageFsInfoResponse>, Status> {
        self.enter("ImageFsInfo").await?;
        let fs = self.lock().image_fs.clone();
        let response = match fs {
            Some(fs) => convert::image_fs_to_proto(&fs, 1),
            None => proto::ImageFsInfoResponse::default(),
        };
        Ok(Response::new(response))
    }
}

fn no_pods(method: &str) -> Status {
    Status::unimplemented(format!("the fake runtime does not implement {method}"))
}

#[tonic::async_trait]
impl RuntimeService for FakeService {
    async fn status(
        &self,
        request: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        self.enter("Status").await?;
        let info = if request.get_ref().verbose {
            self.lock().status_info.clone()
        } else {
            HashMap::new()
        };
        Ok(Response::new(proto::StatusResponse { info }))
    }

    async fn version(
        &self,
        _request: Request<proto::VersionRequest>,
    ) -> Result<Response<proto::VersionResponse>, Status> {
        self.enter("Version").await?;
        let version = convert::version_to_proto(&self.lock().version);
        Ok(Response::new(version))
    }

    async fn run_pod_sandbox(
        &self,
        _request: Request<proto::RunPodSandboxRequest>,
    ) -> Result<Response<proto::RunPodSandboxResponse>, Status> {
        Err(no_pods("RunPodSandbox"))
    }

    async fn stop_pod_sandbox(
        &self,
        _request: Request<proto::StopPodSandboxRequest>,
    ) -> Result<Response<proto::StopPodSandboxResponse>, Status> {
        Err(no_pods("StopPodSandbox"))
    }

    async fn remove_pod_sandbox(
        &self,
        _request: Request<proto::RemovePodSandboxRequest>,
    ) -> Result<Response<proto::RemovePodSandboxResponse>, Status> {
        Err(no_pods("RemovePodSandbox"))
    }

    async fn list_pod_sandbox(
        &self,
        _request: Request<proto::ListPodSandboxRequest>,
    ) -> Result<Response<proto::ListPodSandboxResponse>, Status> {
        self.enter("ListPodSandbox").await?;
        Ok(Response::new(proto::ListPodSandboxResponse {
            items: Vec::new(),
        }))
    }

    async fn create_container(
        &self,
        _request: Request<proto::CreateContainerRequest>,
    ) -> Result<Response<proto::CreateContainerResponse>, Status> {
        Err(no_pods("CreateContainer"))
    }

    async fn start_container(
        &self,
        _request: Request<proto::StartContainerRequest>,
    ) -> Result<Response<proto::StartContainerResponse>, Status> {
        Err(no_pods("StartContainer"))
    }

    async fn stop_container(
        &self,
        _request: Request<proto::StopContainerRequest>,
    ) -> Result<Response<proto::StopContainerResponse>, Status> {
        Err(no_pods("StopContainer"))
    }

    async fn remove_container(
        &self,
        _request: Request<proto::RemoveContainerRequest>,
    ) -> Result<Response<proto::RemoveContainerResponse>, Status> {
        Err(no_pods("RemoveContainer"))
    }

    async fn list_containers(
        &self,
        _request: Request<proto::ListContainersRequest>,
    ) -> Result<Response<proto::ListContainersResponse>, Status> {
        self.enter("ListContainers").await?;
        let containers = self
            .lock()
            .containers
            .iter()
            .map(convert::container_to_proto)
            .collect();
        Ok(Response::new(proto::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        request: Request<proto::ContainerStatusRequest>,
    ) -> Result<Response<proto::ContainerStatusResponse>, Status> {
        self.enter("ContainerStatus").await?;
        let id = request.into_inner().container_id;
        let state = self.lock();
        match state.containers.iter().find(|c| c.id == id) {
            Some(container) => {
                let volumes = state.image_volumes.get(&id).cloned().unwrap_or_default();
                Ok(Response::new(proto::ContainerStatusResponse {
                    status: Some(convert::container_status_to_proto(container, &volumes)),
                }))
            }
            None => Err(Status::not_found(format!(
                "an error occurred when try to find container \"{id}\": not found"
            ))),
        }
    }

    async fn exec_sync(
        &self,
        _request: Request<proto::ExecSyncRequest>,
    ) -> Result<Response<proto::ExecSyncResponse>, Status> {
        self.enter("ExecSync").await?;
        Err(Status::unimplemented("the fake runtime runs no processes"))
    }

    type GetContainerEventsStream = tonic::codegen::tokio_stream::wrappers::UnboundedReceiverStream<
        Result<proto::ContainerEventResponse, Status>,
    >;

    async fn get_container_events(
        &self,
        _request: Request<proto::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        self.enter("GetContainerEvents").await?;
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let (wait_for_event, pushed_before, pushed) = {
            let mut state = self.lock();
            state.event_streams.push(sender);
            (
                state.event_headers_with_first_event,
                state.events_pushed,
                state.event_pushed.clone(),
            )
        };
        // containerd sends the headers with the first event: the call answers only then.
        if wait_for_event {
            loop {
                let next = pushed.notified();
                if self.lock().events_pushed > pushed_before {
                    break;
                }
                next.await;
            }
        }
        Ok(Response::new(
            tonic::codegen::tokio_stream::wrappers::UnboundedReceiverStream::new(receiver),
        ))
    }
}

/// An in-process CRI runtime on a unix socket; see the module docs.
pub struct FakeRuntime {
    dir: tempfile::TempDir,
    socket: PathBuf,
    state: Arc<Mutex<FakeState>>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl std::fmt::Debug for FakeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeRuntime")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl FakeRuntime {
    /// Starts serving on `<temp dir>/cri.sock`. Must run inside a tokio runtime.
    pub async fn start() -> std::io::Result<FakeRuntime> {
        let dir = tempfile::Builder::new().prefix("ik-fake-cri").tempdir()?;
        let socket = dir.path().join("cri.sock");
        let listener = UnixListener::bind(&socket)?;
        let state = Arc::new(Mutex::new(FakeState {
            version: RuntimeVersion {
                version: "0.1.0".into(),
                runtime_name: "fake".into(),
                runtime_version: "0.0.1".into(),
                runtime_api_version: "v1".into(),
            },
            ..FakeState::default()
        }));
        let service = FakeService {
            state: state.clone(),
        };
        let containerd = ImagesServer::new(containerd_images::FakeImages {
            state: state.clone(),
        });
        let images = ImageServiceServer::new(service.clone());
        let runtime = RuntimeServiceServer::new(service);
        // tonic's router is not compiled in (no `router` feature): route by gRPC service name.
        let router = tower::service_fn(move |request: http::Request<tonic::body::Body>| {
            let images = images.clone();
            let runtime = runtime.clone();
            let containerd = containerd.clone();
            async move {
                let path = request.uri().path();
                if path.starts_with("/containerd.services.images.v1.Images/") {
                    containerd.oneshot(request).await
                } else if path.starts_with("/runtime.v1.ImageService/") {
                    images.oneshot(request).await
                } else {
                    runtime.oneshot(request).await
                }
            }
        });
        let (shutdown, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(router, UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(err) = served {
                tracing::warn!(error = %err, "fake CRI server stopped with an error");
            }
        });
        Ok(FakeRuntime {
            dir,
            socket,
            state,
            shutdown: Some(shutdown),
        })
    }

    /// `unix://<socket>`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The fake's unix socket.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// The fake's temp dir (a real directory: a usable image filesystem mountpoint).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A client config for this fake with short deadlines.
    pub fn client_config(&self) -> CriConfig {
        CriConfig {
            runtime_endpoint: self.endpoint(),
            image_endpoint: None,
            connect_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(5),
            pull_timeout: None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        lock_state(&self.state)
    }

    /// ListImages answers `images` from now on.
    pub fn set_images(&self, images: Vec<RuntimeImage>) {
        self.lock().images = images;
    }

    /// The images the fake holds now (pulls add, RemoveImage removes).
    pub fn images(&self) -> Vec<RuntimeImage> {
        self.lock().images.clone()
    }

    /// The encoded size of the ListImagesResponse the fake answers now: the bytes a client
    /// receives (before gRPC's 5-byte frame header), the floor of what decoding it holds.
    pub fn list_images_response_bytes(&self) -> usize {
        use prost::Message;
        let images = self
            .lock()
            .images
            .iter()
            .map(convert::image_to_proto)
            .collect();
        proto::ListImagesResponse { images }.encoded_len()
    }

    /// A pull of `reference` yields `image` (its tags are added to an image already present).
    pub fn add_pullable(&self, reference: impl Into<String>, image: RuntimeImage) {
        self.lock().pullable.insert(reference.into(), image);
    }

    /// ListContainers answers `containers` from now on.
    pub fn set_containers(&self, containers: Vec<RuntimeContainer>) {
        self.lock().containers = containers;
    }

    /// ImageFsInfo reports `mountpoint` and `used_bytes`; without this it reports no filesystem.
    pub fn set_image_fs(&self, mountpoint: impl Into<String>, used_bytes: u64) {
        self.lock().image_fs = Some(ImageFsStats::new(mountpoint, used_bytes, 0, 0));
    }

    /// ImageFsInfo reports `stats` as it is (its mountpoint, bytes and inodes images use, and
    /// its other image and container filesystems; capacity and inodes come from statvfs).
    pub fn set_image_fs_stats(&self, stats: ImageFsStats) {
        self.lock().image_fs = Some(stats);
    }

    /// Version answers `version` from now on.
    pub fn set_version(&self, version: RuntimeVersion) {
        self.lock().version = version;
    }

    /// The verbose Status answers `info` with `config` = this JSON (containerd's CRI config,
    /// e.g. `{"sandboxImage":"registry.k8s.io/pause:3.6"}`).
    pub fn set_status_config(&self, config_json: impl Into<String>) {
        self.lock()
            .status_info
            .insert("config".to_owned(), config_json.into());
    }

    /// `method` (a CRI method name such as "PullImage") answers with this error until cleared.
    pub fn fail(&self, method: &str, code: RpcCode, message: impl Into<String>) {
        let failure = FakeFailure {
            code,
            message: message.into(),
        };
        self.lock().failures.insert(method.to_string(), failure);
    }

    /// How many times `method` (e.g. "RemoveImage") was called.
    pub fn calls(&self, method: &str) -> u64 {
        self.lock().calls.get(method).copied().unwrap_or(0)
    }

    /// How many calls of `method` hang now (the client has not given up on them).
    pub fn hanging(&self, method: &str) -> u64 {
        self.lock().hanging.get(method).copied().unwrap_or(0)
    }

    /// `method` never answers: each call from now on until cleared hangs for good (until
    /// the client gives up on it). containerd's Images service's methods are named
    /// `Images.List`, `Images.Get`, `Images.Update`.
    pub fn hang(&self, method: &str) {
        self.lock().hangs.insert(method.to_string());
    }

    /// Removes the failure and hang of `method`.
    pub fn clear(&self, method: &str) {
        let mut state = self.lock();
        state.failures.remove(method);
        state.hangs.remove(method);
        state.delays.remove(method);
    }

    /// Makes `method` answer only after `delay` (a slow runtime).
    pub fn delay(&self, method: &str, delay: Duration) {
        self.lock().delays.insert(method.to_string(), delay);
    }

    /// Makes PullImage answer with an empty image ref (`on`) or normally.
    pub fn answer_empty_image_ref(&self, on: bool) {
        self.lock().empty_image_ref = on;
    }

    /// Every PullImage request received so far.
    pub fn pulls(&self) -> Vec<FakePull> {
        self.lock().pulls.clone()
    }

    /// ContainerStatus of `container_id` reports these images as its image volumes.
    pub fn set_image_volumes(&self, container_id: impl Into<String>, images: Vec<String>) {
        self.lock()
            .image_volumes
            .insert(container_id.into(), images);
    }

    /// Sends `event` on every open GetContainerEvents stream; returns how many received it.
    pub fn push_event(&self, event: &ContainerEvent) -> usize {
        let message = convert::container_event_to_proto(event);
        let mut state = self.lock();
        state
            .event_streams
            .retain(|stream| stream.send(Ok(message.clone())).is_ok());
        state.events_pushed += 1;
        state.event_pushed.notify_waiters();
        state.event_streams.len()
    }

    /// GetContainerEvents answers (sends its headers) only with the stream's first event, as
    /// containerd 1.7 and 2.1 do: until then the call is open and the stream receives.
    pub fn send_event_headers_with_first_event(&self) {
        self.lock().event_headers_with_first_event = true;
    }

    /// Ends every open GetContainerEvents stream with `code` (a runtime restarting: Unavailable),
    /// or cleanly with `None`.
    pub fn end_event_streams(&self, code: Option<RpcCode>) {
        let streams = std::mem::take(&mut self.lock().event_streams);
        if let Some(code) = code {
            for stream in streams {
                let status = Status::new(convert::rpc_code_to_tonic(code), "event stream ended");
                let _ = stream.send(Err(status));
            }
        }
    }

    /// How many GetContainerEvents streams are open.
    pub fn open_event_streams(&self) -> usize {
        let mut state = self.lock();
        state.event_streams.retain(|stream| !stream.is_closed());
        state.event_streams.len()
    }
}

impl FakeRuntime {
    /// containerd's labels of image name `name` (its Images service) from now on.
    pub fn set_image_labels(&self, name: impl Into<String>, labels: BTreeMap<String, String>) {
        self.lock().image_labels.insert(name.into(), labels);
    }

    /// containerd's labels of image name `name` now (none when it has none).
    pub fn image_labels(&self, name: &str) -> BTreeMap<String, String> {
        self.lock()
            .image_labels
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// With `on`, ListImages lists an image pinned when one of its names carries
    /// `io.cri-containerd.pinned=pinned`, as containerd 1.7.10 and later do; off (the
    /// default), only as the test set it, as containerd 1.7.3 to 1.7.9 do for a label added
    /// to an image already present (containerd issue 9328).
    pub fn list_pin_labels_as_pinned(&self, on: bool) {
        self.lock().pin_labels_listed = on;
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}
