//! The metrics server: a small HTTP/1.1 responder for `GET /metrics` (the Prometheus
//! exposition), `/healthz` and `/readyz`, on the address the operator asks for (off by default).
//!
//! Invariants: it holds at most [`HttpLimits::max_connections`] connections at once; past
//! that it accepts nothing more (new connections wait in the kernel's listen queue) until one
//! ends, so a flood cannot exhaust file descriptors or memory. Each connection gets one
//! request: its head must arrive whole within [`HttpLimits::head_timeout`] (a deadline for the
//! whole head, not per read, so a client trickling one byte at a time is cut off too) and be at
//! most [`MAX_HEAD_BYTES`]; the response must be taken within [`HttpLimits::write_timeout`];
//! then the connection is closed. A scrape behind a flood of idle connections therefore waits at
//! most one head timeout. Nothing here touches the store but through [`HttpEndpoints`].

use std::sync::Arc;
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
    /// Time for the whole request head to arrive.
    pub head_timeout: Duration,
    /// Time for the client to take the whole response.
    pub write_timeout: Duration,
}

impl Default for HttpLimits {
    /// 32 connections, 1 s for the head, 10 s for the response. A real client's request head
    /// arrives in milliseconds, so 1 s refuses nobody; it is what a probe or scrape behind a
    /// full set of idle connections waits for a slot, well inside the 5 s `timeoutSeconds` of
    /// the DaemonSet's probes (deploy/daemonset.yaml, checked by tests/it/deploy) and
    /// Prometheus' default 10 s scrape timeout.
    fn default() -> HttpLimits {
        HttpLimits {
            max_connections: 32,
            head_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves `endpoints` on `listener` until the task is dropped.
pub async fn serve_http(
    listener: TcpListener,
    endpoints: Arc<dyn HttpEndpoints>,
    limits: HttpLimits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        // A slot first: at the bound nothing more is accepted until a connection ends.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let conn = match listener.accept().await {
            Ok((conn, _)) => conn,
            Err(e) => {
                // EMFILE and the like: give the system a moment instead of spinning.
                debug!(error = %e, "metrics server: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            serve_connection(conn, endpoints.as_ref(), limits).await;
            drop(slot);
        });
    }
}

async fn serve_connection(mut conn: TcpStream, endpoints: &dyn HttpEndpoints, limits: HttpLimits) {
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
    let response = respond(&head, endpoints);
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

fn respond(head: &Head, endpoints: &dyn HttpEndpoints) -> Vec<u8> {
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
        "/metrics" | "/" => ("200 OK", CONTENT_TYPE, endpoints.metrics()),
        "/healthz" => match endpoints.healthz() {
            Ok(body) => ("200 OK", "text/plain; charset=utf-8", body),
            Err(body) => ("503 Service Unavailable", "text/plain; charset=utf-8", body),
        },
        "/readyz" => match endpoints.readyz() {
            Ok(body) => ("200 OK", "text/plain; charset=utf-8", body),
            Err(body) => ("503 Service Unavailable", "text/plain; charset=utf-8", body),
        },
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
