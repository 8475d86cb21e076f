//! The admin gRPC server on a unix socket.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use tokio::net::UnixListener;
use tonic::codegen::tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use super::proto::admin_server::{Admin, AdminServer};
use super::proto::{
    DeleteUnusedRequest, EnsureImageRequest, EnsureImageResponse, ExplainRequest, ExplainResponse,
    GarbageCollectRequest, GcResponse, ListRecordsRequest, ListRecordsResponse, Record,
    Removal as ProtoRemoval,
};
use super::{AdminBackend, AdminError, EnsureRequest, GcOutcome};

struct Service<B> {
    backend: Arc<B>,
}

fn gc_response(outcome: GcOutcome) -> GcResponse {
    GcResponse {
        removed: outcome
            .removed
            .into_iter()
            .map(|r| ProtoRemoval {
                image_id: r.key.image_id.0,
                runtime_handler: r.key.runtime_handler,
                size: r.size,
                reason: r.reason.as_str().to_owned(),
            })
            .collect(),
        freed: outcome.freed,
        error: outcome.error.unwrap_or_default(),
        dry_run: outcome.dry_run,
    }
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
        };
        match self.backend.ensure_image(request).await {
            Ok(image_ref) => Ok(Response::new(EnsureImageResponse { image_ref })),
            Err(message) => Err(Status::failed_precondition(message)),
        }
    }

    async fn list_records(
        &self,
        _request: Request<ListRecordsRequest>,
    ) -> Result<Response<ListRecordsResponse>, Status> {
        let records = self
            .backend
            .list_records()
            .await
            .map_err(Status::internal)?;
        Ok(Response::new(ListRecordsResponse {
            records: records
                .into_iter()
                .map(|r| Record {
                    image_id: r.key.image_id.0,
                    runtime_handler: r.key.runtime_handler,
                    first_detected: r.record.first_detected.0,
                    last_used: r.record.last_used.0,
                    size: r.record.size,
                    pinned: r.record.pinned,
                })
                .collect(),
        }))
    }

    async fn explain(
        &self,
        _request: Request<ExplainRequest>,
    ) -> Result<Response<ExplainResponse>, Status> {
        let json = self.backend.explain().await.map_err(Status::internal)?;
        Ok(Response::new(ExplainResponse { json }))
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
}

/// Binds `socket` (mode 0600; its directory is created 0700 if missing) and serves until
/// `shutdown` resolves. The caller removes a stale socket file first if it may.
pub async fn serve<B: AdminBackend>(
    socket: &Path,
    backend: Arc<B>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
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
    let handle = tokio::spawn(async move {
        // One service on the socket: no router needed (tonic's router feature is off).
        let served = tonic::transport::Server::builder()
            .serve_with_incoming_shutdown(service, UnixListenerStream::new(listener), shutdown)
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "admin server stopped with an error");
        }
    });
    Ok(handle)
}
