//! The admin client the CLI uses to drive a running agent.
//!
//! Every connection is watched for the agent's first byte: the agent closes a connection
//! beyond its connection limit the moment it accepts it, so a call that fails on the transport
//! before the agent ever spoke is [`AdminError::Busy`], not a bare "transport error".

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Endpoint, Uri};

use super::proto::admin_client::AdminClient as Generated;
use super::proto::{
    ClusterSignalsRequest, DeleteUnusedRequest, EnsureImageRequest, GarbageCollectRequest,
    GcResponse, InspectDiskRequest, ListPinsRequest, PinInfo, PinRequest, PruneOrphansRequest,
    RestoreRequest, RuntimePinsRequest, UnpinRequest,
};
use super::{AdminError, AdminReason, EnsureRequest, GcOutcome, REASON_METADATA_KEY};
use crate::gc::PinView;
use crate::gc::{Removal, RemovalReason};
use crate::model::RecordKey;
use crate::model::{ImageId, ImagePin, PinKey, UnixNanos};

/// A connection to a running agent's admin socket.
#[derive(Clone, Debug)]
pub struct AdminClient {
    inner: Generated<tonic::transport::Channel>,
    timeout: Duration,
    path: PathBuf,
    /// Whether the agent ever sent a byte on any of this client's connections.
    heard: Arc<AtomicBool>,
}

/// A connection to the agent that notes when the agent first sends something.
struct Watched {
    stream: UnixStream,
    heard: Arc<AtomicBool>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.store(true, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Watched {
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

/// How long one admin call may take by default (a GC cycle with many removals can be slow:
/// containerd removes about one image a second).
pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(600);

impl AdminClient {
    /// Connects to the agent at `socket`, with the default call deadline. Fails (quickly)
    /// when no agent listens there.
    pub async fn connect(socket: &Path) -> Result<AdminClient, AdminError> {
        AdminClient::connect_with_timeout(socket, DEFAULT_CALL_TIMEOUT).await
    }

    /// Connects with a deadline of `timeout` on every call; a call that passes it fails with
    /// [`AdminError::Timeout`] (the agent goes on with the work).
    pub async fn connect_with_timeout(
        socket: &Path,
        timeout: Duration,
    ) -> Result<AdminClient, AdminError> {
        let path: PathBuf = socket.to_owned();
        let dial = path.clone();
        let heard = Arc::new(AtomicBool::new(false));
        let connected = Arc::new(AtomicBool::new(false));
        let (watch, dialed) = (heard.clone(), connected.clone());
        let channel = Endpoint::from_static("http://admin.invalid")
            .connect_timeout(Duration::from_secs(2))
            .timeout(timeout)
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let dial = dial.clone();
                let heard = watch.clone();
                let connected = dialed.clone();
                async move {
                    let stream = UnixStream::connect(dial).await?;
                    connected.store(true, Ordering::Relaxed);
                    Ok::<_, std::io::Error>(TokioIo::new(Watched { stream, heard }))
                }
            }))
            .await
            .map_err(|e| {
                // Connected, then closed before the agent said anything: it is at its limit.
                if connected.load(Ordering::Relaxed) && !heard.load(Ordering::Relaxed) {
                    AdminError::Busy { path: path.clone() }
                } else {
                    connect_error(path.clone(), e)
                }
            })?;
        Ok(AdminClient {
            // The agent's largest answer ([`super::MAX_ANSWER_BYTES`]) and its counts.
            inner: Generated::new(channel)
                .max_decoding_message_size(super::MAX_ANSWER_BYTES + super::ANSWER_SLACK_BYTES),
            timeout,
            path,
            heard,
        })
    }

    fn call_err(&self, method: &'static str) -> impl Fn(tonic::Status) -> AdminError + use<> {
        let after = self.timeout;
        let path = self.path.clone();
        let heard = self.heard.clone();
        move |status| {
            // tonic reports its channel deadline as Cancelled "Timeout expired".
            if matches!(
                status.code(),
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
            ) && status.message().contains("Timeout expired")
            {
                AdminError::Timeout { method, after }
            } else if !heard.load(Ordering::Relaxed) {
                // Not a byte from the agent on any connection: no answer of its own (that
                // needs its HTTP/2 settings and headers), so the transport failed (a reset,
                // "operation was canceled", ...) on a connection it closed at once: busy.
                AdminError::Busy { path: path.clone() }
            } else if let Some((reason, message)) = reason_and_message(&status) {
                AdminError::Rejected {
                    method,
                    reason,
                    message: message.to_owned(),
                }
            } else {
                AdminError::Call {
                    method,
                    message: status.message().to_owned(),
                }
            }
        }
    }

    /// EnsureImage: the agent ensures the image is present as the kubelet would (pull
    /// policy, backoff, credentials) and answers its image ref.
    pub async fn ensure_image(&mut self, request: EnsureRequest) -> Result<String, AdminError> {
        let reply = self
            .inner
            .ensure_image(EnsureImageRequest {
                image: request.image,
                pull_policy: request.pull_policy,
                pod_uid: request.pod_uid,
                pod_namespace: request.pod_namespace,
                pod_name: request.pod_name,
                runtime_handler: request.runtime_handler,
                pull_secrets: request.pull_secrets,
            })
            .await
            .map_err(self.call_err("EnsureImage"))?;
        Ok(reply.into_inner().image_ref)
    }

    /// One GC cycle in the agent now (dry: what it would remove).
    pub async fn garbage_collect(&mut self, dry_run: bool) -> Result<GcOutcome, AdminError> {
        let reply = self
            .inner
            .garbage_collect(GarbageCollectRequest { dry_run })
            .await
            .map_err(self.call_err("GarbageCollect"))?;
        Ok(outcome(reply))
    }

    /// Writes (or replaces) a pin through the agent.
    pub async fn pin(
        &mut self,
        key: PinKey,
        until: UnixNanos,
        reason: String,
    ) -> Result<PinView, AdminError> {
        let reply = self
            .inner
            .pin(PinRequest {
                image: key.image,
                runtime_handler: key.runtime_handler,
                until_unix_nanos: until.0,
                reason,
            })
            .await
            .map_err(self.call_err("Pin"))?;
        Ok(pin_view(reply.into_inner()))
    }

    /// Deletes a pin through the agent; whether there was one.
    pub async fn unpin(&mut self, key: PinKey) -> Result<bool, AdminError> {
        let reply = self
            .inner
            .unpin(UnpinRequest {
                image: key.image,
                runtime_handler: key.runtime_handler,
            })
            .await
            .map_err(self.call_err("Unpin"))?;
        Ok(reply.into_inner().removed)
    }

    /// Every pin the agent keeps.
    pub async fn pins(&mut self) -> Result<Vec<PinView>, AdminError> {
        Ok(self.pins_and_omitted().await?.0)
    }

    /// The pins the agent keeps, and how many it left out at the end of the list to keep its
    /// answer within [`super::MAX_ANSWER_BYTES`].
    pub async fn pins_and_omitted(&mut self) -> Result<(Vec<PinView>, u64), AdminError> {
        let reply = self
            .inner
            .list_pins(ListPinsRequest {})
            .await
            .map_err(self.call_err("ListPins"))?;
        let omitted = count(&reply, super::OMITTED_METADATA_KEY);
        Ok((
            reply.into_inner().pins.into_iter().map(pin_view).collect(),
            omitted,
        ))
    }

    /// The cluster signals' watches as the agent sees them now; `None` when it runs none.
    pub async fn cluster_signals(
        &mut self,
    ) -> Result<Option<crate::gc::BoundPodsSample>, AdminError> {
        let r = self
            .inner
            .cluster_signals(ClusterSignalsRequest {})
            .await
            .map_err(self.call_err("ClusterSignals"))?
            .into_inner();
        let watch = |w: super::proto::ClusterWatch| crate::gc::WatchSample {
            synced: w.synced,
            failing: w.failing,
            errors: w.errors,
        };
        let pods = watch(r.pods.unwrap_or_default());
        Ok(r.started.then(|| crate::gc::BoundPodsSample {
            pods: r.bound_pods,
            images: r.bound_pod_images,
            synced: pods.synced,
            failing: pods.failing,
            errors: pods.errors,
            refused: r.pods_refused,
            daemonsets: r.daemonsets.map(|w| crate::gc::DaemonSetsSample {
                held: r.daemonsets_held,
                refused: r.daemonsets_refused,
                images: r.daemonset_images,
                watch: watch(w),
            }),
            cronjobs: r.cronjobs.map(watch),
            replicasets: r.replicasets.map(watch),
            over_share: (r.over_share_images > 0).then(|| crate::gc::OverShareSample {
                share_percent: u8::try_from(r.keep_share_percent).unwrap_or(u8::MAX),
                images: r.over_share_images,
                bytes: r.over_share_bytes,
            }),
        }))
    }

    /// The runtime pins as the agent's last reconcile found them, and how many kept images it
    /// left out at the end to keep its answer within [`super::MAX_ANSWER_BYTES`].
    pub async fn runtime_pins(&mut self) -> Result<(super::RuntimePinsReport, u64), AdminError> {
        let reply = self
            .inner
            .runtime_pins(RuntimePinsRequest {})
            .await
            .map_err(self.call_err("RuntimePins"))?;
        let omitted = count(&reply, super::OMITTED_METADATA_KEY);
        let r = reply.into_inner();
        let keeps = r
            .keeps
            .into_iter()
            .filter_map(|k| {
                // A reason this client does not know is left out (a newer agent's).
                let why = crate::gc::KeepReason::from_label_value(&k.keep)?;
                let key = RecordKey {
                    image_id: ImageId(k.image_id),
                    runtime_handler: k.runtime_handler,
                };
                Some((
                    key,
                    crate::gc::runtime_pins::CarriedKeep {
                        why,
                        carried: k.runtime_pinned,
                        labelled: k.runtime_labelled,
                    },
                ))
            })
            .collect();
        Ok((
            super::RuntimePinsReport {
                note: r.note,
                db: PathBuf::from(r.db),
                keeps,
            },
            omitted,
        ))
    }

    /// `prune --orphans` in the agent: its report as JSON (`disk::PruneReport`) and the read's
    /// warnings.
    pub async fn prune_orphans(
        &mut self,
        min_age: std::time::Duration,
        namespaces: &[String],
        dry_run: bool,
    ) -> Result<(String, Vec<String>), AdminError> {
        let reply = self
            .inner
            .prune_orphans(PruneOrphansRequest {
                min_age_seconds: min_age.as_secs(),
                namespaces: namespaces.to_vec(),
                dry_run,
            })
            .await
            .map_err(self.call_err("PruneOrphans"))?;
        let r = reply.into_inner();
        Ok((r.report_json, r.warnings))
    }

    /// `inspect disk` in the agent: an accounting now, as JSON (`disk::DiskReport`).
    pub async fn inspect_disk(&mut self) -> Result<String, AdminError> {
        let reply = self
            .inner
            .inspect_disk(InspectDiskRequest {})
            .await
            .map_err(self.call_err("InspectDisk"))?;
        Ok(reply.into_inner().report_json)
    }

    /// Removes every unused image in the agent (dry: what it would remove).
    pub async fn delete_unused(&mut self, dry_run: bool) -> Result<GcOutcome, AdminError> {
        let reply = self
            .inner
            .delete_unused(DeleteUnusedRequest { dry_run })
            .await
            .map_err(self.call_err("DeleteUnused"))?;
        Ok(outcome(reply))
    }

    /// `imagekeeper restore` through the agent: its outcome, or the agent's error as
    /// [`AdminError::Call`].
    pub async fn restore(
        &mut self,
        options: crate::warm::RestoreOptions,
    ) -> Result<crate::warm::RestoreOutcome, AdminError> {
        use crate::warm::{RestoreItem, RestoreOutcome, RestoreState};
        let reply = self
            .inner
            .restore(RestoreRequest {
                used_within_nanos: u64::try_from(options.used_within.as_nanos())
                    .unwrap_or(u64::MAX),
                max_bytes: options.max_bytes,
                dry_run: options.dry_run,
            })
            .await
            .map_err(self.call_err("Restore"))?;
        let omitted = count(&reply, super::OMITTED_METADATA_KEY);
        let reply = reply.into_inner();
        if !reply.error.is_empty() {
            return Err(AdminError::Call {
                method: "Restore",
                message: reply.error,
            });
        }
        Ok(RestoreOutcome {
            items: reply
                .items
                .into_iter()
                .map(|i| RestoreItem {
                    image_id: i.image_id,
                    runtime_handler: i.runtime_handler,
                    image: i.image,
                    size: i.size,
                    last_used: crate::model::UnixNanos(i.last_used),
                    removed_at: crate::model::UnixNanos(i.removed_at),
                    state: RestoreState::parse(&i.state).unwrap_or(RestoreState::Skipped),
                    detail: i.detail,
                })
                .collect(),
            dry_run: reply.dry_run,
            omitted,
        })
    }
}

/// A failed connect, keeping the kind of the socket's own error: permission denied (the
/// socket is root-only) is [`AdminError::PermissionDenied`].
/// A failed call's reason and its message without the reason. The reason comes from the
/// [`REASON_METADATA_KEY`] metadata, or, from an agent older than the metadata, from a known
/// "<Reason>: " prefix of the message; an agent sends the prefix too (for older clients), and
/// it is stripped here so the CLI prints "<reason>: <message>" once.
pub(super) fn reason_and_message(status: &tonic::Status) -> Option<(AdminReason, &str)> {
    let message = status.message();
    let prefixed = message
        .split_once(": ")
        .and_then(|(name, rest)| AdminReason::parse(name).map(|reason| (reason, rest)));
    match status
        .metadata()
        .get(REASON_METADATA_KEY)
        .and_then(|v| v.to_str().ok())
        .and_then(AdminReason::parse)
    {
        Some(reason) => match prefixed {
            Some((same, rest)) if same == reason => Some((reason, rest)),
            _ => Some((reason, message)),
        },
        None => prefixed,
    }
}

fn connect_error(path: PathBuf, e: tonic::transport::Error) -> AdminError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::PermissionDenied {
                return AdminError::PermissionDenied { path };
            }
            return AdminError::Connect {
                path,
                source: std::io::Error::new(io.kind(), io.to_string()),
            };
        }
        cause = c.source();
    }
    AdminError::Connect {
        path,
        source: std::io::Error::other(e),
    }
}

/// The count under `key` in an answer's metadata (0 when absent: nothing was cut).
fn count<T>(reply: &tonic::Response<T>, key: &str) -> u64 {
    reply
        .metadata()
        .get(key)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(super) fn outcome(reply: tonic::Response<GcResponse>) -> GcOutcome {
    let removed_omitted = count(&reply, super::REMOVED_OMITTED_METADATA_KEY);
    let warm_does_not_fit_omitted = count(&reply, super::WARM_OMITTED_METADATA_KEY);
    let not_pulled_ahead_omitted = count(&reply, super::PREFETCH_OMITTED_METADATA_KEY);
    let reply = reply.into_inner();
    GcOutcome {
        removed: reply
            .removed
            .into_iter()
            .map(|r| Removal {
                key: RecordKey::new(r.image_id, r.runtime_handler),
                size: r.size,
                reason: RemovalReason::parse(&r.reason).unwrap_or(RemovalReason::Space),
                evicted_before: Some(r.evicted_before).filter(|e| !e.is_empty()),
            })
            .collect(),
        freed: reply.freed,
        error: Some(reply.error).filter(|e| !e.is_empty()),
        dry_run: reply.dry_run,
        warm_does_not_fit: reply
            .warm_does_not_fit
            .into_iter()
            .map(|w| super::WarmDoesNotFit {
                image: w.image,
                runtime_handler: w.runtime_handler,
                size: w.size,
                detail: w.detail,
            })
            .collect(),
        removed_omitted,
        warm_does_not_fit_omitted,
        not_pulled_ahead: reply
            .not_pulled_ahead
            .into_iter()
            .map(|n| crate::gc::NotPulledAhead {
                image: n.image,
                pod: n.pod,
                reason: n.reason,
            })
            .collect(),
        not_pulled_ahead_omitted,
    }
}

fn pin_view(info: PinInfo) -> PinView {
    PinView {
        key: PinKey::new(info.image, info.runtime_handler),
        pin: ImagePin {
            created_at: UnixNanos(info.created_at_unix_nanos),
            until: UnixNanos(info.until_unix_nanos),
            reason: info.reason,
        },
        active: info.active,
        image_ids: info.image_ids.into_iter().map(ImageId).collect(),
        runtime_pinned: info.runtime_pinned,
        runtime_labelled: info.runtime_labelled,
        runtime_pin_note: match (info.runtime_pinned, info.runtime_pin_note) {
            // An agent from before runtime pins sends neither.
            (None, note) if note.is_empty() => {
                "unknown: the running agent did not say (it predates runtime pins)".to_owned()
            }
            (_, note) => note,
        },
    }
}
