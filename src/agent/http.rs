//! The metrics server: a small HTTP/1.1 responder for `GET /metrics` (the Prometheus
//! exposition), `/healthz` and `/readyz`, on the address the operator asks for (off by default).
//!
//! Invariants: it holds at most [`HttpLimits::max_connections`] connections at once; past
//! that it accepts nothing more (new connections wait in the kernel's listen queue) until one
//! ends, so a flood cannot exhaust file descriptors or memory. Each connection gets one
//! request: its head must arrive whole within [`HttpLimits::head_timeout`] (a deadline for the
//! whole head, not per read, so a client trickling one byte at a time is cut off too) and be at
//! most [`MAX_HEAD_BYTES`]; the response must be taken within [`HttpLimits::write_timeout`];
//! then the connection is closed. A scrape behind a flood of idle connections therefore waits
//! one head timeout per round of [`HttpLimits::max_connections`] connections queued ahead of it.
//! One remote IP holds at most [`HttpLimits::max_connections_per_ip`] of the slots: a further
//! connection from it is accepted and closed at once, without a reply, so one client (a pod has
//! one IP) can neither hold every slot nor park a queue of connections ahead of a probe. Nothing
//! here touches the store but through [`HttpEndpoints`].
//!
//! Many addresses together still can: idle clients from enough pods (8 each) fill the slots
//! and the kernel's listen queue behind them, and a probe on that listener then waits for
//! tens of seconds. So the probes get a listener of their own ([`serve_probes`], `run
//! --healthz-address`, as the kubelet's own healthz is on 127.0.0.1:10248 apart from its other
//! ports): on loopback no pod can reach it, and it answers `/healthz` and `/readyz` only
//! (`/metrics` is 404 there), with [`HttpLimits::probes`]. Each listener has its own slots, so
//! a flood of the metrics listener takes nothing from the probes'.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::debug;

use super::metrics::CONTENT_TYPE;

/// The largest request head read (request line and headers).
pub const MAX_HEAD_BYTES: usize = 8192;

/// What the server answers, by path.
pub trait HttpEndpoints: Send + Sync + 'static {
    /// The exposition text of `GET /metrics`.
    fn metrics(&self) -> String;
    /// `GET /healthz`: Ok(body) is 200, Err(body) is 503.
    fn healthz(&self) -> Result<String, String>;
    /// `GET /readyz`: Ok(body) is 200, Err(body) is 503.
    fn readyz(&self) -> Result<String, String>;
}

/// The server's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections held at once.
    pub max_connections: usize,
    /// Connections held at once from one remote IP address (at most `max_connections`).
    pub max_connections_per_ip: usize,
    /// Time for the whole request head to arrive.
    pub head_timeout: Duration,
    /// Time for the client to take the whole response.
    pub write_timeout: Duration,
}

impl Default for HttpLimits {
    /// 32 connections, 8 of them per remote IP, 1 s for the head, 10 s for the response. A real
    /// client's request head arrives in milliseconds, so 1 s refuses nobody; it is what a probe
    /// or scrape behind a full set of idle connections waits for a slot, well inside the 5 s
    /// `timeoutSeconds` of the DaemonSet's probes (deploy/daemonset.yaml, checked by
    /// tests/it/deploy) and Prometheus' default 10 s scrape timeout. A single client needs 2
    /// connections at most (a probe or scrape and the next one); 8 leaves room for a few
    /// scrapers behind one address, and 4 addresses are needed to hold all 32 slots.
    fn default() -> HttpLimits {
        HttpLimits {
            max_connections: 32,
            max_connections_per_ip: 8,
            head_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(10),
        }
    }
}

impl HttpLimits {
    /// The probe listener's bounds ([`serve_probes`]): 8 connections, all 8 allowed from one
    /// address (its clients are the kubelet and other processes of the node, all from
    /// 127.0.0.1 on loopback), 1 s for the head and 10 s for the response, as the metrics
    /// listener's.
    pub fn probes() -> HttpLimits {
        HttpLimits {
            max_connections: 8,
            max_connections_per_ip: 8,
            ..HttpLimits::default()
        }
    }
}

/// Which paths a listener answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Paths {
    /// `/metrics` (and `/`), `/healthz`, `/readyz`.
    All,
    /// `/healthz` and `/readyz` only.
    Probes,
}

/// Serves `endpoints` on `listener` until the task is dropped.
pub async fn serve_http(
    listener: TcpListener,
    endpoints: Arc<dyn HttpEndpoints>,
    limits: HttpLimits,
) {
    serve(listener, endpoints, limits, Paths::All).await;
}

/// Serves `/healthz` and `/readyz` alone on `listener` (every other path is 404) until the task
/// is dropped: the probes' own listener, with its own connection slots (see the module's doc).
pub async fn serve_probes(
    listener: TcpListener,
    endpoints: Arc<dyn HttpEndpoints>,
    limits: HttpLimits,
) {
    serve(listener, endpoints, limits, Paths::Probes).await;
}

async fn serve(
    listener: TcpListener,
    endpoints: Arc<dyn HttpEndpoints>,
    limits: HttpLimits,
    paths: Paths,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let per_ip = PerIp::default();
    loop {
        // A slot first: at the bound nothing more is accepted until a connection ends.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (conn, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and the like: give the system a moment instead of spinning.
                debug!(error = %e, "metrics server: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(held) = per_ip.enter(peer.ip(), limits.max_connections_per_ip.max(1)) else {
            debug!(%peer, "metrics server: too many connections from this address; closed");
            // Dropping `conn` closes it; the slot is free again for the next in the queue.
            continue;
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            serve_connection(conn, endpoints.as_ref(), limits, paths).await;
            drop(held);
            drop(slot);
        });
    }
}

/// Connections held per remote IP address; an entry exists only while its count is above 0.
#[derive(Clone, Default)]
struct PerIp(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One held connection from `ip`, counted until dropped.
struct PerIpHeld {
    counts: PerIp,
    ip: IpAddr,
}

impl PerIp {
    /// Counts one more connection from `ip`, or None when it already holds `cap`.
    fn enter(&self, ip: IpAddr, cap: usize) -> Option<PerIpHeld> {
        // The map is consistent after every statement, so a poisoned lock is still usable.
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(ip).or_insert(0);
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(PerIpHeld {
            counts: self.clone(),
            ip,
        })
    }
}

impl Drop for PerIpHeld {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

async fn serve_connection(
    mut conn: TcpStream,
    endpoints: &dyn HttpEndpoints,
    limits: HttpLimits,
    paths: Paths,
) {
    let head = match tokio::time::timeout(limits.head_timeout, read_head(&mut conn)).await {
        Ok(Ok(head)) => head,
        Ok(Err(e)) => {
            debug!(error = %e, "metrics server: bad request head");
            return;
        }
        Err(_) => {
            debug!(timeout = ?limits.head_timeout, "metrics server: request head too slow; closed");
            return;
        }
    };
    let response = respond(&head, endpoints, paths);
    let write = async {
        conn.write_all(&response).await?;
        conn.shutdown().await
    };
    if tokio::time::timeout(limits.write_timeout, write)
        .await
        .is_err()
    {
        debug!(timeout = ?limits.write_timeout, "metrics server: response not taken in time; closed");
    }
}

/// A request head: what it was, or why it is refused.
enum Head {
    Complete(Vec<u8>),
    TooLarge,
}

async fn read_head(conn: &mut TcpStream) -> std::io::Result<Head> {
    let mut buf = vec![0u8; MAX_HEAD_BYTES];
    let mut len = 0;
    loop {
        if len == buf.len() {
            return Ok(Head::TooLarge);
        }
        let n = conn.read(&mut buf[len..]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        len += n;
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            buf.truncate(len);
            return Ok(Head::Complete(buf));
        }
    }
}

fn respond(head: &Head, endpoints: &dyn HttpEndpoints, paths: Paths) -> Vec<u8> {
    let head = match head {
        Head::Complete(bytes) => String::from_utf8_lossy(bytes),
        Head::TooLarge => {
            return response(
                "431 Request Header Fields Too Large",
                "text/plain; charset=utf-8",
                "request head too large\n",
                false,
            );
        }
    };
    let mut words = head.lines().next().unwrap_or("").split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return response(
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET and HEAD\n",
            false,
        );
    }
    let (status, content_type, body) = match path {
        "/metrics" | "/" if paths == Paths::All => ("200 OK", CONTENT_TYPE, endpoints.metrics()),
        "/healthz" => match endpoints.healthz() {
            Ok(body) => ("200 OK", "text/plain; charset=utf-8", body),
            Err(body) => ("503 Service Unavailable", "text/plain; charset=utf-8", body),
        },
        "/readyz" => match endpoints.readyz() {
            Ok(body) => ("200 OK", "text/plain; charset=utf-8", body),
            Err(body) => ("503 Service Unavailable", "text/plain; charset=utf-8", body),
        },
        _ if paths == Paths::Probes => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: this listener serves the probes: try GET /healthz or /readyz (metrics are on --metrics-address)\n".to_owned(),
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: try GET /metrics, /healthz or /readyz\n".to_owned(),
        ),
    };
    response(status, content_type, &body, head_only)
}

fn response(status: &str, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}
