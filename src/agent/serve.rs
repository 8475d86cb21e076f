//! Serving: [`Agent::serve`] binds the admin socket and the metrics/health endpoint, runs the
//! loops ([`Agent::run`]) until shutdown, then takes down what it set up; [`Listeners`] is
//! what it serves beside the loops.
//!
//! Invariants: the admin socket is bound only after the store is open, and at the end only the
//! socket this agent bound is removed (by device and inode); a setup failure stops the admin
//! server and removes its socket; on shutdown the cycle in flight gets the grace period, the
//! admin calls in flight [`ADMIN_STOP_GRACE`].

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::admin::AdminError;

use super::*;

impl<R: AgentRuntime> Agent<R> {
    /// The whole agent: binds the admin socket (a stale one of an earlier run removed
    /// first), serves the metrics/health endpoint on `listeners.metrics` if given, runs the
    /// loops until `shutdown` resolves ([`Agent::run`], with `grace` for the cycle in flight),
    /// then stops the admin server (waiting up to 5 s for calls in flight) and
    /// the HTTP endpoint, and removes the admin socket it bound, and only that one (by device
    /// and inode: another agent may have bound the path meanwhile).
    pub async fn serve(
        self: Arc<Self>,
        listeners: Listeners,
        shutdown: impl Future<Output = ()>,
        grace: Duration,
    ) -> Result<(), AgentError> {
        let socket = self.config().admin_socket;
        let step = |step: &'static str| {
            move |source: Box<dyn std::error::Error + Send + Sync + 'static>| AgentError::Serve {
                step,
                source,
            }
        };
        // The store is ours now. A socket left at the path is removed only if it is still a
        // socket nobody answers on (checked again: another process may have bound it since).
        crate::admin::remove_stale_socket(&socket)
            .map_err(|e| step("removing a stale admin socket")(e.into()))?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let admin = crate::admin::serve_with_limits(
            &socket,
            self.clone(),
            wait_stop(stop_rx),
            listeners.admin_limits,
        )
        .await
        .map_err(|e| step("starting the admin socket")(e.into()))?;
        // From here on a setup failure stops the admin server and removes the socket it bound.
        let bound = match socket_identity(&socket) {
            Ok(bound) => bound,
            Err(source) => {
                // The path is no socket of ours any more (gone, or replaced by something that
                // is not a socket): nothing there is ours to remove.
                admin.abort();
                return Err(step("the admin socket just bound")(
                    AdminError::Bind {
                        path: socket.clone(),
                        source,
                    }
                    .into(),
                ));
            }
        };
        let abandon = |admin: tokio::task::JoinHandle<()>, error: AgentError| {
            admin.abort();
            if socket_identity(&socket).ok() == Some(bound) {
                let _ = std::fs::remove_file(&socket);
            }
            error
        };
        let http = match listeners.metrics {
            Some(listener) => {
                let address = match listener.local_addr() {
                    Ok(address) => address,
                    Err(e) => {
                        return Err(abandon(
                            admin,
                            step("the metrics endpoint's address")(e.into()),
                        ));
                    }
                };
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(e) => {
                        return Err(abandon(
                            admin,
                            step("serving the metrics endpoint")(e.into()),
                        ));
                    }
                };
                let endpoints: Arc<dyn HttpEndpoints> = self.clone();
                info!(%address, "Serving metrics");
                Some(tokio::spawn(serve_http(
                    listener,
                    endpoints,
                    listeners.http_limits,
                )))
            }
            None => None,
        };
        if let Some(bound) = listeners.bound {
            let _ = bound.send(());
        }
        self.clone().run(shutdown, grace).await;
        let _ = stop_tx.send(true);
        if tokio::time::timeout(ADMIN_STOP_GRACE, admin).await.is_err() {
            warn!(grace = ?ADMIN_STOP_GRACE, "Admin calls in flight did not end in time; leaving them");
        }
        if let Some(http) = http {
            http.abort();
        }
        // Our socket, unless something else was put there meanwhile (another agent that
        // found ours stale while we were shutting down and bound its own).
        if socket_identity(&socket).ok() == Some(bound) {
            let _ = std::fs::remove_file(&socket);
        }
        Ok(())
    }

    /// Runs the loops until `shutdown` resolves. The cycle in flight then gets `grace` to
    /// finish.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>, grace: Duration) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let events = {
            let agent = self.clone();
            let stop = stop_rx.clone();
            let mode = self.config().container_events;
            tokio::spawn(async move {
                events::watch_container_events(
                    &agent.events_client,
                    &agent.gc,
                    agent.clock.as_ref(),
                    mode,
                    stop,
                    |_| {},
                )
                .await
            })
        };
        // The warm loop on a task of its own: a long warm pull never delays detect or GC.
        let warm = {
            let agent = self.clone();
            let stop = stop_rx.clone();
            tokio::spawn(async move { agent.warm_loop(stop).await })
        };
        // The disk accounting on a task of its own too (it reads containerd's every namespace).
        let disk = {
            let agent = self.clone();
            let stop = stop_rx.clone();
            tokio::spawn(async move { agent.disk_loop(stop).await })
        };
        // The KeepSets' loop (idle until the cluster's watch lists the sets).
        let keep_sets = {
            let agent = self.clone();
            let stop = stop_rx.clone();
            tokio::spawn(async move { agent.keep_sets_loop(stop).await })
        };
        let loops = {
            let agent = self.clone();
            tokio::spawn(async move { agent.run_loops(stop_rx).await })
        };
        shutdown.await;
        info!("Shutting down: letting the cycle in flight finish");
        let _ = stop_tx.send(true);
        match tokio::time::timeout(grace, loops).await {
            Ok(_) => info!("Loops stopped"),
            Err(_) => warn!(
                ?grace,
                "A cycle did not finish within the grace period; abandoned it (every store write is atomic)"
            ),
        }
        // The watcher returns on stop; a mark in flight is one atomic write.
        events.abort();
        // A warm pull in flight is dropped: the runtime finishes or drops it, and the next
        // start's cycle sees what landed.
        warm.abort();
        disk.abort();
        keep_sets.abort();
    }
}

/// How long the admin server may finish calls in flight at shutdown.
pub(crate) const ADMIN_STOP_GRACE: Duration = Duration::from_secs(5);

/// What [`Agent::serve`] serves beside its loops.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Listeners {
    /// The metrics/health HTTP endpoint, bound beforehand (non-blocking) so a bad address
    /// fails before anything is created; `None`: no endpoint.
    pub metrics: Option<std::net::TcpListener>,
    /// The metrics endpoint's bounds (connections, timeouts).
    pub http_limits: HttpLimits,
    /// The admin socket's bounds (connections at once, idle timeout).
    pub admin_limits: crate::admin::AdminLimits,
    /// Told once the admin socket is bound and the metrics endpoint set up, before the loops
    /// start (`imagekeeper run` logs "agent started" and talks to the service manager from
    /// then on); dropped unsent when the setup fails.
    pub bound: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Listeners {
    /// The default limits, and the metrics endpoint on `metrics` if given.
    pub fn new(metrics: Option<std::net::TcpListener>) -> Listeners {
        Listeners {
            metrics,
            ..Listeners::default()
        }
    }
}

/// A socket file's device and inode, if it is a socket.
fn socket_identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.file_type().is_socket() {
        return Err(std::io::Error::other("not a socket"));
    }
    Ok((meta.dev(), meta.ino()))
}

async fn wait_stop(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

impl<R: AgentRuntime> HttpEndpoints for Agent<R> {
    fn metrics(&self) -> String {
        self.render_metrics()
    }

    fn healthz(&self) -> Result<String, String> {
        self.liveness()
    }

    fn readyz(&self) -> Result<String, String> {
        self.readiness()
    }
}
