//! The metrics server: a small HTTP/1.1 responder for `GET /metrics` (the Prometheus
//! exposition), `/healthz` and `/readyz`, on the address the operator asks for (off by default),
//! and the probes' own listener ([`serve_probes`], `/healthz` and `/readyz` only).
//!
//! Invariants: a connection takes one of [`HttpLimits::max_connections`] slots only once it
//! has sent something, and one remote IP holds (or waits for) at most
//! [`HttpLimits::max_connections_per_ip`] of them (a further one from it is closed at once);
//! at most [`HttpLimits::max_pending`] connections are kept without a slot (silent, or waiting
//! for one), the oldest silent one closed for a new one past that. So a flood can exhaust
//! neither file descriptors nor memory, and idle connections, reconnecting or not, from any
//! number of addresses or from the probe's own, hold no slot against a probe: issue 41 found
//! 40 idle reconnecting connections from 127.0.0.1 pushing `/healthz` past the probes' 5 s
//! timeout when they held the slots to the head deadline. Each connection gets one request:
//! its head must arrive whole within [`HttpLimits::head_timeout`] of the accept (time waited
//! for a slot not counted; a deadline for the whole head, not per read, so a client trickling
//! one byte at a time is cut off too) and be at most [`MAX_HEAD_BYTES`]; the response must be
//! taken within [`HttpLimits::write_timeout`]; then the connection is closed. Only clients
//! that send requests and do not take their answers (at most the write timeout each) make a
//! request wait for a slot. Nothing here touches the store but through [`HttpEndpoints`].
//!
//! The probes get a listener of their own ([`serve_probes`], `run --healthz-address`, on by
//! default at 127.0.0.1:9898 as the kubelet's own healthz is on 127.0.0.1:10248 apart from its
//! other ports): on loopback no pod can reach it, and it answers `/healthz` and `/readyz` only
//! (`/metrics` is 404 there), with [`HttpLimits::probes`]. Each listener has its own slots, so
//! a flood of the metrics listener takes nothing from the probes'.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};
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
    /// Connections kept without a slot (silent, or waiting for a slot); past it the oldest
    /// silent one is closed for the new one.
    pub max_pending: usize,
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
            max_pending: 256,
        }
    }
}

impl HttpLimits {
    /// The probe listener's bounds ([`serve_probes`]): 16 connections, 4 of them per address
    /// (below the listener's slots: a local process flooding from one loopback address holds
    /// a quarter, and closes its own oldest idle connections past that), 1 s for the head
    /// and 10 s for the response, as the metrics listener's.
    pub fn probes() -> HttpLimits {
        HttpLimits {
            max_connections: 16,
            max_connections_per_ip: 4,
            max_pending: 64,
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
    let slots = Slots::new(limits);
    loop {
        let (conn, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and the like: give the system a moment instead of spinning.
                debug!(error = %e, "metrics server: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Bytes already there (a probe writes its request as it connects, usually before it
        // is accepted): not one to close first to make room.
        let (pending, closed) = slots.pending(has_bytes(&conn));
        let endpoints = endpoints.clone();
        let slots = slots.clone();
        tokio::spawn(async move {
            serve_connection(
                conn,
                peer.ip(),
                endpoints.as_ref(),
                &slots,
                paths,
                pending,
                closed,
            )
            .await;
        });
    }
}

/// The listener's bounds at work: the connections that have no slot yet (waiting for their
/// first bytes, or for a slot), the slots, and the slots held per remote IP.
#[derive(Clone)]
struct Slots {
    limits: HttpLimits,
    state: Arc<Mutex<SlotState>>,
    slots: Arc<Semaphore>,
}

#[derive(Default)]
struct SlotState {
    next: u64,
    /// Every connection without a slot, oldest first: whether it has sent bytes, and the
    /// sender that closes it.
    pending: BTreeMap<u64, (bool, oneshot::Sender<()>)>,
    /// Slots held (or waited for) per remote IP; an entry exists only while above 0.
    per_ip: HashMap<IpAddr, usize>,
}

/// A connection without a slot, counted until dropped.
struct Pending {
    slots: Slots,
    seq: u64,
}

impl Pending {
    /// Its first bytes arrived: it is closed to make room only after every silent one.
    fn sending(&self) {
        if let Some((sent, _)) = self.slots.lock().pending.get_mut(&self.seq) {
            *sent = true;
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.slots.lock().pending.remove(&self.seq);
    }
}

/// One of an address's share of slots, given back when dropped.
struct IpShare {
    slots: Slots,
    ip: IpAddr,
}

impl Drop for IpShare {
    fn drop(&mut self) {
        let mut state = self.slots.lock();
        if let Some(count) = state.per_ip.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.per_ip.remove(&self.ip);
            }
        }
    }
}

impl Slots {
    fn new(limits: HttpLimits) -> Slots {
        Slots {
            limits,
            state: Arc::default(),
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        // The state is consistent after every statement, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new connection without a slot, and the receiver that closes it to make room: at
    /// [`HttpLimits::max_pending`] the oldest silent one (else the oldest) is closed first.
    fn pending(&self, sending: bool) -> (Pending, oneshot::Receiver<()>) {
        let mut state = self.lock();
        if state.pending.len() >= self.limits.max_pending.max(1) {
            let victim = state
                .pending
                .iter()
                .find(|(_, (sent, _))| !sent)
                .or_else(|| state.pending.iter().next())
                .map(|(seq, _)| *seq);
            if let Some((_, close)) = victim.and_then(|seq| state.pending.remove(&seq)) {
                let _ = close.send(());
            }
        }
        let seq = state.next;
        state.next += 1;
        let (close, closed) = oneshot::channel();
        state.pending.insert(seq, (sending, close));
        (
            Pending {
                slots: self.clone(),
                seq,
            },
            closed,
        )
    }

    /// One of `ip`'s share of slots, or `None` when it holds (or waits for) its share.
    fn ip_share(&self, ip: IpAddr) -> Option<IpShare> {
        let mut state = self.lock();
        let count = state.per_ip.entry(ip).or_insert(0);
        if *count >= self.limits.max_connections_per_ip.max(1) {
            return None;
        }
        *count += 1;
        Some(IpShare {
            slots: self.clone(),
            ip,
        })
    }
}

async fn serve_connection(
    mut conn: TcpStream,
    ip: IpAddr,
    endpoints: &dyn HttpEndpoints,
    slots: &Slots,
    paths: Paths,
    pending: Pending,
    mut closed: oneshot::Receiver<()>,
) {
    let limits = slots.limits;
    // The head deadline runs from the accept, but for the time waited for a slot.
    let mut deadline = tokio::time::Instant::now() + limits.head_timeout;
    // Its first bytes, without a slot: a silent connection holds none.
    let mut first = [0u8; 1];
    tokio::select! {
        biased;
        Ok(()) = &mut closed => {
            debug!("metrics server: closed a silent connection to make room");
            return;
        }
        peeked = tokio::time::timeout_at(deadline, conn.peek(&mut first)) => {
            // Bytes, or the end (read below as a bad head); readiness alone is not enough
            // (it may come without bytes).
            if peeked.is_err() {
                debug!(timeout = ?limits.head_timeout, "metrics server: nothing sent in time; closed");
                return;
            }
        }
    }
    pending.sending();
    let Some(_share) = slots.ip_share(ip) else {
        debug!(%ip, "metrics server: too many connections from this address; closed");
        return;
    };
    let waited_from = tokio::time::Instant::now();
    let _slot = tokio::select! {
        biased;
        Ok(()) = &mut closed => {
            debug!("metrics server: closed a connection waiting for a slot, to make room");
            return;
        }
        slot = slots.slots.clone().acquire_owned() => match slot {
            Ok(slot) => slot,
            Err(_) => return,
        },
    };
    drop(pending);
    deadline += waited_from.elapsed();
    let head = tokio::time::timeout_at(deadline, read_head(&mut conn)).await;
    let head = match head {
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

/// Whether `conn` has bytes waiting to be read now (a peek, without waiting).
fn has_bytes(conn: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    // SAFETY: recv(2) into one byte of our own, on a descriptor `conn` owns; MSG_PEEK leaves
    // the byte in the socket, MSG_DONTWAIT never blocks.
    let n = unsafe {
        libc::recv(
            conn.as_raw_fd(),
            (&raw mut byte).cast::<libc::c_void>(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
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
