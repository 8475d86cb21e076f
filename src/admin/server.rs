//! The admin gRPC server on a unix socket, with a bound on its connections and an idle
//! timeout (see [`AdminLimits`]).

use std::future::Future;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;
use tonic::{Request, Response, Status};

use super::proto::admin_server::{Admin, AdminServer};
use super::proto::{
    ClusterSignalsRequest, ClusterSignalsResponse, ClusterWatch, DeleteUnusedRequest,
    EnsureImageRequest, EnsureImageResponse, GarbageCollectRequest, GcResponse, InspectDiskRequest,
    InspectDiskResponse, ListPinsRequest, ListPinsResponse, PinInfo, PinRequest,
    PruneOrphansRequest, PruneOrphansResponse, Removal as ProtoRemoval,
    RestoreItem as ProtoRestoreItem, RestoreRequest, RestoreResponse, RuntimeKeep,
    RuntimePinsRequest, RuntimePinsResponse, UnpinRequest, UnpinResponse,
};
use super::{
    AdminBackend, AdminError, EnsureImageError, EnsureRequest, GcOutcome, MAX_ANSWER_BYTES,
    REASON_METADATA_KEY,
};
use crate::gc::{PinView, check_pin_request};
use crate::model::{PinKey, UnixNanos};

struct Service<B> {
    backend: Arc<B>,
}

/// Cuts `list` at the end so its items take at most `budget` bytes on the wire; how many
/// were cut, and the bytes left of `budget`.
fn cut_to<T: prost::Message>(list: &mut Vec<T>, budget: usize) -> (u64, usize) {
    let mut used = 0usize;
    for (i, item) in list.iter().enumerate() {
        let len = item.encoded_len();
        // The field's tag (one byte for fields below 16) and the length prefix.
        let wire = 1 + prost::length_delimiter_len(len) + len;
        if used + wire > budget {
            let cut = list.len() - i;
            list.truncate(i);
            return (u64::try_from(cut).unwrap_or(u64::MAX), budget - used);
        }
        used += wire;
    }
    (0, budget - used)
}

/// The answer's lists cut at the end to keep it within [`MAX_ANSWER_BYTES`] (the client reads
/// that much and a little more): the fields other than the lists are counted first.
fn answer_budget(fixed: usize) -> usize {
    MAX_ANSWER_BYTES.saturating_sub(fixed)
}

/// The answer to a GC call: its lists cut to fit [`MAX_ANSWER_BYTES`], the counts cut in the
/// metadata ([`super::REMOVED_OMITTED_METADATA_KEY`], [`super::WARM_OMITTED_METADATA_KEY`]).
pub(super) fn gc_response(outcome: GcOutcome) -> Response<GcResponse> {
    let (removed_before, warm_before, prefetch_before) = (
        outcome.removed_omitted,
        outcome.warm_does_not_fit_omitted,
        outcome.not_pulled_ahead_omitted,
    );
    let mut response = gc_response_whole(outcome);
    let mut removed = std::mem::take(&mut response.removed);
    let mut warm = std::mem::take(&mut response.warm_does_not_fit);
    let mut prefetch = std::mem::take(&mut response.not_pulled_ahead);
    // The fields other than the lists, and the metadata's counts, first.
    let fixed = prost::Message::encoded_len(&response) + 192;
    let (removed_cut, left) = cut_to(&mut removed, answer_budget(fixed));
    let (warm_cut, left) = cut_to(&mut warm, left);
    let (prefetch_cut, _) = cut_to(&mut prefetch, left);
    response.removed = removed;
    response.warm_does_not_fit = warm;
    response.not_pulled_ahead = prefetch;
    let mut response = Response::new(response);
    set_count(
        &mut response,
        super::REMOVED_OMITTED_METADATA_KEY,
        removed_before + removed_cut,
    );
    set_count(
        &mut response,
        super::WARM_OMITTED_METADATA_KEY,
        warm_before + warm_cut,
    );
    set_count(
        &mut response,
        super::PREFETCH_OMITTED_METADATA_KEY,
        prefetch_before + prefetch_cut,
    );
    response
}

/// `count` under `key` in the answer's metadata, when above 0.
fn set_count<T>(response: &mut Response<T>, key: &'static str, count: u64) {
    if count > 0 {
        response
            .metadata_mut()
            .insert(key, tonic::metadata::MetadataValue::from(count));
    }
}

fn gc_response_whole(outcome: GcOutcome) -> GcResponse {
    GcResponse {
        removed: outcome
            .removed
            .into_iter()
            .map(|r| ProtoRemoval {
                image_id: r.key.image_id.0,
                runtime_handler: r.key.runtime_handler,
                size: r.size,
                reason: r.reason.as_str().to_owned(),
                evicted_before: r.evicted_before.unwrap_or_default(),
            })
            .collect(),
        freed: outcome.freed,
        error: outcome.error.unwrap_or_default(),
        dry_run: outcome.dry_run,
        warm_does_not_fit: outcome
            .warm_does_not_fit
            .into_iter()
            .map(|w| super::proto::WarmDoesNotFit {
                image: w.image,
                runtime_handler: w.runtime_handler,
                size: w.size,
                detail: w.detail,
            })
            .collect(),
        not_pulled_ahead: outcome
            .not_pulled_ahead
            .into_iter()
            .map(|n| super::proto::NotPulledAhead {
                image: n.image,
                pod: n.pod,
                reason: n.reason,
            })
            .collect(),
    }
}

/// A failed EnsureImage as a status: InvalidArgument for the caller's bad input, else
/// FailedPrecondition; the reason in the metadata, and also as the message's "<Reason>: "
/// prefix, as agents before the metadata sent it (a client of that time reads the prefix;
/// a newer client takes the metadata and strips the prefix).
fn ensure_status(e: &EnsureImageError) -> Status {
    let reason = e.reason();
    let code = if reason.is_invalid_input() {
        tonic::Code::InvalidArgument
    } else {
        tonic::Code::FailedPrecondition
    };
    let mut status = Status::new(code, format!("{}: {}", reason.as_str(), e.message()));
    status.metadata_mut().insert(
        REASON_METADATA_KEY,
        tonic::metadata::MetadataValue::from_static(reason.as_str()),
    );
    status
}

#[tonic::async_trait]
impl<B: AdminBackend> Admin for Service<B> {
    async fn ensure_image(
        &self,
        request: Request<EnsureImageRequest>,
    ) -> Result<Response<EnsureImageResponse>, Status> {
        let r = request.into_inner();
        let request = EnsureRequest {
            image: r.image,
            pull_policy: r.pull_policy,
            pod_uid: r.pod_uid,
            pod_namespace: r.pod_namespace,
            pod_name: r.pod_name,
            runtime_handler: r.runtime_handler,
            pull_secrets: r.pull_secrets,
        };
        match self.backend.ensure_image(request).await {
            Ok(image_ref) => Ok(Response::new(EnsureImageResponse { image_ref })),
            Err(e) => Err(ensure_status(&e)),
        }
    }

    async fn garbage_collect(
        &self,
        request: Request<GarbageCollectRequest>,
    ) -> Result<Response<GcResponse>, Status> {
        let outcome = self
            .backend
            .garbage_collect(request.into_inner().dry_run)
            .await;
        Ok(gc_response(outcome))
    }

    async fn delete_unused(
        &self,
        request: Request<DeleteUnusedRequest>,
    ) -> Result<Response<GcResponse>, Status> {
        let outcome = self
            .backend
            .delete_unused(request.into_inner().dry_run)
            .await;
        Ok(gc_response(outcome))
    }

    async fn restore(
        &self,
        request: Request<RestoreRequest>,
    ) -> Result<Response<RestoreResponse>, Status> {
        let r = request.into_inner();
        let options = crate::warm::RestoreOptions {
            used_within: Duration::from_nanos(r.used_within_nanos),
            max_bytes: r.max_bytes,
            dry_run: r.dry_run,
        };
        let outcome = self.backend.restore(options).await;
        let omitted = outcome.as_ref().map_or(0, |o| o.omitted);
        let reply = match outcome {
            Ok(outcome) => RestoreResponse {
                items: outcome
                    .items
                    .into_iter()
                    .map(|i| ProtoRestoreItem {
                        image_id: i.image_id,
                        runtime_handler: i.runtime_handler,
                        image: i.image,
                        size: i.size,
                        last_used: i.last_used.0,
                        removed_at: i.removed_at.0,
                        state: i.state.as_str().to_owned(),
                        detail: i.detail,
                    })
                    .collect(),
                dry_run: outcome.dry_run,
                error: String::new(),
            },
            Err(error) => RestoreResponse {
                items: Vec::new(),
                dry_run: r.dry_run,
                error,
            },
        };
        let mut reply = reply;
        let mut items = std::mem::take(&mut reply.items);
        let (cut, _) = cut_to(
            &mut items,
            answer_budget(prost::Message::encoded_len(&reply) + 128),
        );
        reply.items = items;
        let mut reply = Response::new(reply);
        set_count(&mut reply, super::OMITTED_METADATA_KEY, omitted + cut);
        Ok(reply)
    }

    async fn pin(&self, request: Request<PinRequest>) -> Result<Response<PinInfo>, Status> {
        let r = request.into_inner();
        let key = PinKey::new(r.image, r.runtime_handler);
        let until = UnixNanos(r.until_unix_nanos);
        // The CLI's own check ([`check_pin_request`]): the socket takes nothing it refuses,
        // and a name with credentials is refused shown redacted.
        check_pin_request(&key, until, &r.reason, self.backend.now())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let view = self
            .backend
            .pin(key, until, r.reason)
            .await
            .map_err(Status::internal)?;
        Ok(Response::new(pin_info(view)))
    }

    async fn unpin(
        &self,
        request: Request<UnpinRequest>,
    ) -> Result<Response<UnpinResponse>, Status> {
        let r = request.into_inner();
        let removed = self
            .backend
            .unpin(PinKey::new(r.image, r.runtime_handler))
            .await
            .map_err(Status::internal)?;
        Ok(Response::new(UnpinResponse { removed }))
    }

    async fn list_pins(
        &self,
        _request: Request<ListPinsRequest>,
    ) -> Result<Response<ListPinsResponse>, Status> {
        let pins = self.backend.pins().await.map_err(Status::internal)?;
        let mut pins: Vec<PinInfo> = pins.into_iter().map(pin_info).collect();
        let (omitted, _) = cut_to(&mut pins, answer_budget(0));
        let mut reply = Response::new(ListPinsResponse { pins });
        set_count(&mut reply, super::OMITTED_METADATA_KEY, omitted);
        Ok(reply)
    }

    async fn runtime_pins(
        &self,
        _request: Request<RuntimePinsRequest>,
    ) -> Result<Response<RuntimePinsResponse>, Status> {
        let report = self
            .backend
            .runtime_pins()
            .await
            .map_err(Status::internal)?;
        let mut keeps: Vec<RuntimeKeep> = report
            .keeps
            .into_iter()
            .map(|(key, keep)| RuntimeKeep {
                image_id: key.image_id.0,
                runtime_handler: key.runtime_handler,
                keep: keep.why.label_value().to_owned(),
                runtime_pinned: keep.carried,
                runtime_labelled: keep.labelled,
            })
            .collect();
        let db = report.db.to_string_lossy().into_owned();
        let (omitted, _) = cut_to(&mut keeps, answer_budget(report.note.len() + db.len() + 16));
        let mut reply = Response::new(RuntimePinsResponse {
            note: report.note,
            db,
            keeps,
        });
        set_count(&mut reply, super::OMITTED_METADATA_KEY, omitted);
        Ok(reply)
    }

    async fn prune_orphans(
        &self,
        request: Request<PruneOrphansRequest>,
    ) -> Result<Response<PruneOrphansResponse>, Status> {
        let r = request.into_inner();
        let (report_json, warnings) = self
            .backend
            .prune_orphans(
                Duration::from_secs(r.min_age_seconds),
                r.namespaces,
                r.dry_run,
            )
            .await
            .map_err(Status::internal)?;
        Ok(Response::new(PruneOrphansResponse {
            report_json,
            warnings,
        }))
    }

    async fn inspect_disk(
        &self,
        _request: Request<InspectDiskRequest>,
    ) -> Result<Response<InspectDiskResponse>, Status> {
        let report_json = self
            .backend
            .inspect_disk()
            .await
            .map_err(Status::internal)?;
        Ok(Response::new(InspectDiskResponse { report_json }))
    }

    async fn cluster_signals(
        &self,
        _request: Request<ClusterSignalsRequest>,
    ) -> Result<Response<ClusterSignalsResponse>, Status> {
        let Some(sample) = self.backend.cluster_signals() else {
            return Ok(Response::new(ClusterSignalsResponse::default()));
        };
        let watch = |w: crate::gc::WatchSample| ClusterWatch {
            synced: w.synced,
            failing: w.failing,
            errors: w.errors,
        };
        Ok(Response::new(ClusterSignalsResponse {
            started: true,
            pods: Some(ClusterWatch {
                synced: sample.synced,
                failing: sample.failing,
                errors: sample.errors,
            }),
            bound_pods: sample.pods,
            bound_pod_images: sample.images,
            pods_refused: sample.refused,
            daemonsets: sample.daemonsets.map(|d| watch(d.watch)),
            daemonset_images: sample.daemonsets.map_or(0, |d| d.images),
            daemonsets_held: sample.daemonsets.map_or(0, |d| d.held),
            daemonsets_refused: sample.daemonsets.map_or(0, |d| d.refused),
            cronjobs: sample.cronjobs.map(watch),
            replicasets: sample.replicasets.map(watch),
            keep_share_percent: sample.over_share.map_or(0, |o| u32::from(o.share_percent)),
            over_share_images: sample.over_share.map_or(0, |o| o.images),
            over_share_bytes: sample.over_share.map_or(0, |o| o.bytes),
        }))
    }
}

fn pin_info(view: PinView) -> PinInfo {
    PinInfo {
        image: view.key.image,
        runtime_handler: view.key.runtime_handler,
        created_at_unix_nanos: view.pin.created_at.0,
        until_unix_nanos: view.pin.until.0,
        reason: view.pin.reason,
        active: view.active,
        image_ids: view.image_ids.into_iter().map(|i| i.0).collect(),
        runtime_pinned: view.runtime_pinned,
        runtime_pin_note: view.runtime_pin_note,
        runtime_labelled: view.runtime_labelled,
    }
}

/// The bounds on the admin server's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminLimits {
    /// Connections served at once; a connection beyond this is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// A connection with no call in flight for this long (since it was accepted, or since
    /// its last call ended) is closed, whatever bytes it trickles: a client sending one byte
    /// every 20 s held a connection for ever, and 64 of them locked the CLI out (issue 41). A
    /// call in flight keeps its connection however long it runs (the server pings every
    /// third of this, and a live client answers).
    pub idle_timeout: Duration,
}

impl Default for AdminLimits {
    fn default() -> AdminLimits {
        AdminLimits {
            max_connections: 64,
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// Binds `socket` (mode 0600; its directory is created 0700 if missing) and serves until
/// `shutdown` resolves, with the default [`AdminLimits`]. The caller removes a stale socket
/// file first if it may (`remove_stale_socket`).
pub async fn serve<B: AdminBackend>(
    socket: &Path,
    backend: Arc<B>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>, AdminError> {
    serve_with_limits(socket, backend, shutdown, AdminLimits::default()).await
}

/// [`serve`] with explicit connection limits.
pub async fn serve_with_limits<B: AdminBackend>(
    socket: &Path,
    backend: Arc<B>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    limits: AdminLimits,
) -> Result<tokio::task::JoinHandle<()>, AdminError> {
    let bind_err = |source| AdminError::Bind {
        path: socket.to_owned(),
        source,
    };
    if let Some(dir) = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(bind_err)?;
    }
    let listener = UnixListener::bind(socket).map_err(bind_err)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
    let service = AdminServer::new(Service { backend });
    let (connections, incoming) = tokio::sync::mpsc::channel::<std::io::Result<Connection>>(1);
    let accept = tokio::spawn(accept_loop(listener, connections, limits));
    let handle = tokio::spawn(async move {
        // One service on the socket: no router needed (tonic's router feature is off).
        let ping = limits.idle_timeout / 3;
        let served = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(ping))
            .http2_keepalive_timeout(Some(ping))
            .layer(tower::layer::layer_fn(|inner| CallTracking { inner }))
            .serve_with_incoming_shutdown(service, ReceiverStream::new(incoming), shutdown)
            .await;
        accept.abort();
        if let Err(e) = served {
            tracing::error!(error = %e, "admin server stopped with an error");
        }
    });
    Ok(handle)
}

/// Accepts connections while fewer than `max_connections` are open; closes the others at once.
async fn accept_loop(
    listener: UnixListener,
    connections: tokio::sync::mpsc::Sender<std::io::Result<Connection>>,
    limits: AdminLimits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut refused_logged = false;
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => accepted,
            () = connections.closed() => return,
        };
        let stream = match stream {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, or a connection reset before it was accepted.
                tracing::warn!(error = %e, "admin socket: accept failed");
                tokio::task::yield_now().await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !refused_logged {
                tracing::warn!(
                    max = limits.max_connections,
                    "admin socket: too many connections; closing new ones until some end"
                );
                refused_logged = true;
            }
            drop(stream);
            continue;
        };
        refused_logged = false;
        let connection = Connection {
            stream,
            _slot: slot,
            idle_timeout: limits.idle_timeout,
            idle: Box::pin(tokio::time::sleep(limits.idle_timeout)),
            calls: Arc::new(Calls {
                in_flight: AtomicUsize::new(0),
                last_end: Mutex::new(tokio::time::Instant::now()),
            }),
        };
        if connections.send(Ok(connection)).await.is_err() {
            return;
        }
    }
}

/// The calls of one connection: how many are in flight, and when the last one ended (or the
/// connection was accepted).
#[derive(Debug)]
struct Calls {
    in_flight: AtomicUsize,
    last_end: Mutex<tokio::time::Instant>,
}

/// One call in flight on a connection, counted until dropped.
struct CallInFlight(Arc<Calls>);

impl CallInFlight {
    fn begin(calls: &Arc<Calls>) -> CallInFlight {
        calls.in_flight.fetch_add(1, Ordering::SeqCst);
        CallInFlight(calls.clone())
    }
}

impl Drop for CallInFlight {
    fn drop(&mut self) {
        *self
            .0
            .last_end
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = tokio::time::Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts each call on its connection's [`Calls`] (tonic hands the connection's
/// `connect_info` to every request's extensions).
#[derive(Clone)]
struct CallTracking<S> {
    inner: S,
}

impl<S, B> tower::Service<tonic::codegen::http::Request<B>> for CallTracking<S>
where
    S: tower::Service<tonic::codegen::http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
        let call = request
            .extensions()
            .get::<Arc<Calls>>()
            .map(CallInFlight::begin);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(call);
            answer
        })
    }
}

/// One accepted admin connection: holds a connection slot until dropped, and fails its reads
/// once it has had no call in flight for the idle timeout (bytes alone do not keep it).
struct Connection {
    stream: UnixStream,
    _slot: OwnedSemaphorePermit,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    calls: Arc<Calls>,
}

impl Connection {
    /// Whether the connection has been without a call for the idle timeout; else the timer
    /// is armed (and its waker registered) for the next look.
    fn idle_expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.idle.as_mut().poll(cx).is_pending() {
                return false;
            }
            let now = tokio::time::Instant::now();
            let next = if self.calls.in_flight.load(Ordering::SeqCst) > 0 {
                Some(now + self.idle_timeout)
            } else {
                let end = *self
                    .calls
                    .last_end
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    + self.idle_timeout;
                (end > now).then_some(end)
            };
            match next {
                Some(deadline) => self.idle.as_mut().reset(deadline),
                None => return true,
            }
        }
    }
}

impl Connected for Connection {
    type ConnectInfo = Arc<Calls>;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.calls.clone()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.idle_expired(cx) {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "admin connection without a call for too long",
            )));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::client::reason_and_message;
    use super::*;
    use crate::admin::AdminReason;
    use crate::pull::{PullError, PullReason};

    fn invalid_name() -> EnsureImageError {
        EnsureImageError::Pull(PullError::ErrInvalidImageName("bad name".into()))
    }

    /// An agent's failed EnsureImage keeps the "<Reason>: " prefix in the status message (a
    /// CLI from before the reason metadata matched on it, for the exit code and the output)
    /// beside the metadata; a current client reads the metadata, strips the prefix, and
    /// prints "<reason>: <message>" once.
    #[test]
    fn a_rejection_keeps_its_reason_prefix_for_old_clients_and_is_printed_once_by_new_ones() {
        let status = ensure_status(&invalid_name());
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "InvalidImageName: bad name");
        assert_eq!(
            status
                .metadata()
                .get(REASON_METADATA_KEY)
                .and_then(|v| v.to_str().ok()),
            Some("InvalidImageName")
        );
        let (reason, message) = reason_and_message(&status).expect("a reason");
        assert_eq!(reason, AdminReason::Pull(PullReason::InvalidImageName));
        assert_eq!(message, "bad name");
        let printed = AdminError::Rejected {
            method: "EnsureImage",
            reason,
            message: message.to_owned(),
        }
        .to_string();
        assert_eq!(printed, "InvalidImageName: bad name");
    }

    /// What a current client makes of the statuses of every agent version: an agent from
    /// before the metadata (the reason only as the message's prefix), one that sent the
    /// metadata and a bare message, the current one (both), and failures with no reason.
    #[test]
    fn a_client_takes_the_reason_from_the_metadata_or_else_a_known_message_prefix() {
        let with_metadata = |message: &str, reason: &'static str| {
            let mut status = Status::new(tonic::Code::FailedPrecondition, message);
            status.metadata_mut().insert(
                REASON_METADATA_KEY,
                tonic::metadata::MetadataValue::from_static(reason),
            );
            status
        };
        let invalid = Some((AdminReason::Pull(PullReason::InvalidImageName), "bad name"));
        type Case = (&'static str, Status, Option<(AdminReason, &'static str)>);
        let cases: Vec<Case> = vec![
            (
                "agent before the metadata",
                Status::new(tonic::Code::InvalidArgument, "InvalidImageName: bad name"),
                invalid,
            ),
            (
                "agent with the metadata and a bare message",
                with_metadata("bad name", "InvalidImageName"),
                invalid,
            ),
            (
                "current agent",
                with_metadata("InvalidImageName: bad name", "InvalidImageName"),
                invalid,
            ),
            (
                "a message that merely looks like another reason stays whole",
                with_metadata("ErrImagePull: x", "ImagePullBackOff"),
                Some((
                    AdminReason::Pull(PullReason::ImagePullBackOff),
                    "ErrImagePull: x",
                )),
            ),
            (
                "an unknown prefix is no reason",
                Status::new(
                    tonic::Code::ResourceExhausted,
                    "Error, decoded message length too large: found 5 bytes",
                ),
                None,
            ),
            (
                "a transport failure",
                Status::new(tonic::Code::Unavailable, "transport error"),
                None,
            ),
        ];
        for (name, status, want) in cases {
            assert_eq!(reason_and_message(&status), want, "{name}");
        }
    }
}
