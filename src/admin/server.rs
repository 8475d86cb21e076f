//! The admin gRPC server on a unix socket, with a bound on its connections and an idle
//! timeout (see [`AdminLimits`]).

use std::future::Future;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
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
    DeleteUnusedRequest, EnsureImageRequest, EnsureImageResponse, GarbageCollectRequest,
    GcResponse, ListPinsRequest, ListPinsResponse, PinInfo, PinRequest, Removal as ProtoRemoval,
    RestoreItem as ProtoRestoreItem, RestoreRequest, RestoreResponse, UnpinRequest, UnpinResponse,
};
use super::{
    AdminBackend, AdminError, EnsureImageError, EnsureRequest, GcOutcome, REASON_METADATA_KEY,
};
use crate::gc::PinView;
use crate::model::{PinKey, UnixNanos};

struct Service<B> {
    backend: Arc<B>,
}

pub(super) fn gc_response(outcome: GcOutcome) -> GcResponse {
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
        Ok(Response::new(gc_response(outcome)))
    }

    async fn delete_unused(
        &self,
        request: Request<DeleteUnusedRequest>,
    ) -> Result<Response<GcResponse>, Status> {
        let outcome = self
            .backend
            .delete_unused(request.into_inner().dry_run)
            .await;
        Ok(Response::new(gc_response(outcome)))
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
        let reply = match self.backend.restore(options).await {
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
        Ok(Response::new(reply))
    }

    async fn pin(&self, request: Request<PinRequest>) -> Result<Response<PinInfo>, Status> {
        let r = request.into_inner();
        if r.image.is_empty() {
            return Err(Status::invalid_argument("the image name is empty"));
        }
        let view = self
            .backend
            .pin(
                PinKey::new(r.image, r.runtime_handler),
                UnixNanos(r.until_unix_nanos),
                r.reason,
            )
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
        Ok(Response::new(ListPinsResponse {
            pins: pins.into_iter().map(pin_info).collect(),
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
    }
}

/// The bounds on the admin server's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminLimits {
    /// Connections served at once; a connection beyond this is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// A connection that sends nothing for this long is closed. The server pings every
    /// third of it, and a live HTTP/2 client answers, so an idle-but-alive client (waiting
    /// for a long GC) is kept.
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
/// file first if it may ([`super::remove_stale_socket`]).
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
        };
        if connections.send(Ok(connection)).await.is_err() {
            return;
        }
    }
}

/// One accepted admin connection: holds a connection slot until dropped, and fails its reads
/// once nothing has been read for the idle timeout.
struct Connection {
    stream: UnixStream,
    _slot: OwnedSemaphorePermit,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
}

impl Connected for Connection {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let deadline = tokio::time::Instant::now() + self.idle_timeout;
                    self.idle.as_mut().reset(deadline);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.idle.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "admin connection idle for too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
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
