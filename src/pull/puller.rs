//! The image pullers of kubelet's puller.go: a serial puller (one pull at a time from a
//! bounded queue of 10; callers wait while the queue is full) and a parallel puller (at most
//! `max_parallel_image_pulls` pulls at once through a semaphore; unlimited when unset). Both
//! apply the registry throttle at the moment the pull would reach the runtime, then ask the
//! runtime for the pulled image's status (best effort, for its id and size).
//!
//! Invariants: a pull's duration is measured with the injected clock from the moment it leaves
//! the queue or semaphore; credentials go to the runtime and nowhere else.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::clock::Clock;
use crate::model::{PullCredentials, PullSpec, RuntimeImage};
use crate::pull::throttle::TokenBucket;
use crate::runtime::{CriError, ImageRuntime, RpcCode};

/// Kubelet's `maxImagePullRequests`: the serial puller's queue length.
pub const MAX_IMAGE_PULL_REQUESTS: usize = 10;

/// Kubelet's throttle error text.
pub const PULL_QPS_EXCEEDED: &str = "pull QPS exceeded";

/// A runtime failure as the image manager sees it: the error's message (for a gRPC status of
/// code Unknown, only its description, as kubelet's remote image service strips the code).
///
/// The CRI error it came from, when there is one, is kept as its source (shared, so the error
/// stays `Clone`); equality compares the messages only.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct RuntimeError {
    message: String,
    #[source]
    source: Option<Arc<CriError>>,
}

impl RuntimeError {
    /// A failure with no underlying error (the throttle, a stopped puller, a test double).
    pub fn new(message: impl Into<String>) -> RuntimeError {
        RuntimeError {
            message: message.into(),
            source: None,
        }
    }

    /// The message the kubelet sees.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl PartialEq for RuntimeError {
    fn eq(&self, other: &RuntimeError) -> bool {
        self.message == other.message
    }
}

impl Eq for RuntimeError {}

/// What the pull path needs of the container runtime.
pub trait PullRuntime: Send + Sync + 'static {
    /// The image if present (`Ok(None)` when absent).
    fn image_status(
        &self,
        image: &str,
        runtime_handler: &str,
    ) -> impl Future<Output = Result<Option<RuntimeImage>, RuntimeError>> + Send;

    /// Pulls the image (with the pod's context: annotations, sandbox config); returns its
    /// image ref.
    fn pull_image(
        &self,
        spec: &PullSpec,
        credentials: Option<&PullCredentials>,
    ) -> impl Future<Output = Result<String, RuntimeError>> + Send;
}

/// Every CRI runtime is a pull runtime.
impl<T: ImageRuntime + 'static> PullRuntime for T {
    async fn image_status(
        &self,
        image: &str,
        runtime_handler: &str,
    ) -> Result<Option<RuntimeImage>, RuntimeError> {
        ImageRuntime::image_status(self, image, runtime_handler)
            .await
            .map_err(runtime_error)
    }

    async fn pull_image(
        &self,
        spec: &PullSpec,
        credentials: Option<&PullCredentials>,
    ) -> Result<String, RuntimeError> {
        ImageRuntime::pull_image_for(self, spec, credentials)
            .await
            .map_err(runtime_error)
    }
}

/// As kubelet's remote image service: a status of code Unknown keeps only its description,
/// so that `RegistryUnavailable: ...` from the runtime reaches `evalCRIPullErr` as a prefix.
pub fn runtime_error(e: CriError) -> RuntimeError {
    let message = match &e {
        CriError::Rpc {
            code: RpcCode::Unknown,
            message,
            ..
        } => message.clone(),
        other => other.to_string(),
    };
    RuntimeError {
        message,
        source: Some(Arc::new(e)),
    }
}

/// One pull to do.
#[derive(Clone, Debug)]
pub(crate) struct PullRequest {
    pub spec: PullSpec,
    /// Tried in turn until one pull succeeds; none is an anonymous pull.
    pub credentials: Vec<PullCredentials>,
}

/// A successful pull.
#[derive(Clone, Debug)]
pub(crate) struct PullOutcome {
    pub image_ref: String,
    /// The pulled image's status, when the runtime gave it.
    pub status: Option<RuntimeImage>,
    /// From leaving the queue to the end of the size lookup.
    pub pull_duration: Duration,
}

pub(crate) struct Shared<R> {
    runtime: Arc<R>,
    throttle: Option<Mutex<TokenBucket>>,
    clock: Arc<dyn Clock>,
}

impl<R: PullRuntime> Shared<R> {
    async fn pull(&self, req: &PullRequest) -> Result<PullOutcome, RuntimeError> {
        let start = self.clock.now();
        if let Some(t) = &self.throttle {
            let accepted = t
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_accept(start);
            if !accepted {
                return Err(RuntimeError::new(PULL_QPS_EXCEEDED));
            }
        }
        let image_ref = self.pull_with_each_credential(req).await?;
        // Best effort, as kubelet's GetImageSize(imageRef): an error only loses the size (and
        // the runtime handler the image is listed under). Asked by the ref the pull returned,
        // not by the name: a tag moved by another pull meanwhile must not make this pull mark
        // and protect another image than the one it returns.
        let status = self
            .runtime
            .image_status(&image_ref, &req.spec.runtime_handler)
            .await
            .ok()
            .flatten();
        Ok(PullOutcome {
            image_ref,
            status,
            pull_duration: self.clock.now().since(start),
        })
    }
}

impl<R: PullRuntime> Shared<R> {
    /// kuberuntime_image.go's PullImage: with no credentials one anonymous pull; otherwise
    /// each credential in turn until one succeeds, and the failures aggregated (no anonymous
    /// try after them).
    async fn pull_with_each_credential(&self, req: &PullRequest) -> Result<String, RuntimeError> {
        if req.credentials.is_empty() {
            return self.runtime.pull_image(&req.spec, None).await;
        }
        let mut errors = Vec::new();
        let mut last_source = None;
        for credentials in &req.credentials {
            match self.runtime.pull_image(&req.spec, Some(credentials)).await {
                Ok(image_ref) => return Ok(image_ref),
                Err(e) => {
                    errors.push(e.message);
                    last_source = e.source;
                }
            }
        }
        // The messages aggregated as the kubelet does; the last attempt's cause kept.
        Err(RuntimeError {
            message: crate::format::aggregate(&errors),
            source: last_source,
        })
    }
}

type Reply = oneshot::Sender<Result<PullOutcome, RuntimeError>>;

/// The serial or the parallel puller.
pub(crate) enum Puller<R> {
    Parallel {
        shared: Arc<Shared<R>>,
        limit: Option<Arc<Semaphore>>,
    },
    Serial {
        queue: mpsc::Sender<(PullRequest, Reply)>,
    },
}

impl<R: PullRuntime> Puller<R> {
    /// `throttle` is `(qps, burst)`, `None` for no throttle. The serial puller spawns its
    /// worker on the current tokio runtime; it stops when the puller is dropped.
    pub fn new(
        runtime: Arc<R>,
        clock: Arc<dyn Clock>,
        throttle: Option<(f64, u32)>,
        serialize: bool,
        max_parallel: Option<usize>,
    ) -> Puller<R> {
        let shared = Arc::new(Shared {
            runtime,
            throttle: throttle.map(|(qps, burst)| Mutex::new(TokenBucket::new(qps, burst))),
            clock,
        });
        if serialize {
            let (queue, mut rx) = mpsc::channel::<(PullRequest, Reply)>(MAX_IMAGE_PULL_REQUESTS);
            tokio::spawn(async move {
                while let Some((req, reply)) = rx.recv().await {
                    let result = shared.pull(&req).await;
                    // The caller may have gone away; the pull is done either way.
                    let _ = reply.send(result);
                }
            });
            Puller::Serial { queue }
        } else {
            Puller::Parallel {
                shared,
                limit: max_parallel.map(|n| Arc::new(Semaphore::new(n))),
            }
        }
    }

    pub async fn pull(&self, req: PullRequest) -> Result<PullOutcome, RuntimeError> {
        match self {
            Puller::Parallel { shared, limit } => {
                let _permit = match limit {
                    Some(sem) => Some(
                        sem.clone()
                            .acquire_owned()
                            .await
                            .map_err(|_| RuntimeError::new("image puller stopped"))?,
                    ),
                    None => None,
                };
                shared.pull(&req).await
            }
            Puller::Serial { queue } => {
                let (tx, rx) = oneshot::channel();
                queue
                    .send((req, tx))
                    .await
                    .map_err(|_| RuntimeError::new("image puller stopped"))?;
                rx.await
                    .map_err(|_| RuntimeError::new("image puller stopped"))?
            }
        }
    }
}
