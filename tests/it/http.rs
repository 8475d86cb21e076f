//! The metrics server under a flood of connections and slow clients, on tokio's paused clock:
//! every wait below is virtual time the runtime advances only when all tasks are parked, so
//! the timings asserted are the server's timeouts, not the machine's speed.

use std::sync::Arc;
use std::time::Duration;

use imagekeeper::telemetry::{HttpEndpoints, HttpLimits, MAX_HEAD_BYTES, serve_http, serve_probes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

struct Canned;

impl HttpEndpoints for Canned {
    fn metrics(&self) -> String {
        "imagekeeper_image_records 3\n# EOF\n".to_owned()
    }
    fn healthz(&self) -> Result<String, String> {
        Ok("ok: alive\n".to_owned())
    }
    fn readyz(&self) -> Result<String, String> {
        Err("not ready: no image detect has completed yet\n".to_owned())
    }
}

/// A body far larger than a loopback connection's socket buffers: a client that reads none
/// of it blocks the server's write.
struct Huge;

const HUGE_BODY: usize = 64 << 20;

impl HttpEndpoints for Huge {
    fn metrics(&self) -> String {
        "#".repeat(HUGE_BODY)
    }
    fn healthz(&self) -> Result<String, String> {
        Ok("ok: alive\n".to_owned())
    }
    fn readyz(&self) -> Result<String, String> {
        Err("not ready: no image detect has completed yet\n".to_owned())
    }
}

const LIMITS: HttpLimits = HttpLimits {
    max_connections: 4,
    // These tests connect from 127.0.0.1 only: one address may hold every slot.
    max_connections_per_ip: 4,
    head_timeout: Duration::from_secs(5),
    write_timeout: Duration::from_secs(5),
    max_pending: 64,
};

async fn server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(serve_http(listener, Arc::new(Canned), LIMITS));
    address
}

async fn get(address: std::net::SocketAddr, path: &str) -> String {
    let mut conn = TcpStream::connect(address).await.expect("connect");
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: node\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = String::new();
    conn.read_to_string(&mut out).await.expect("read");
    out
}

/// A connection to `address` from the loopback address `from` (all of 127.0.0.0/8 is local
/// on Linux), so that tests can play several clients with their own IPs.
async fn connect_from(from: [u8; 4], address: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((std::net::Ipv4Addr::from(from), 0).into())?;
    socket.connect(address).await
}

/// Reads until the server closes the connection; returns what it sent.
async fn until_closed(conn: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = conn.read_to_end(&mut out).await;
    out
}

#[tokio::test(start_paused = true)]
async fn paths_answer_with_their_status_and_content_type() {
    let address = server().await;
    let metrics = get(address, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
    assert!(
        metrics.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{metrics}"
    );
    assert!(metrics.ends_with("\r\n\r\nimagekeeper_image_records 3\n# EOF\n"));
    assert!(
        get(address, "/healthz")
            .await
            .starts_with("HTTP/1.1 200 OK")
    );
    let readyz = get(address, "/readyz?verbose").await;
    assert!(
        readyz.starts_with("HTTP/1.1 503 Service Unavailable"),
        "{readyz}"
    );
    assert!(readyz.ends_with("not ready: no image detect has completed yet\n"));
    assert!(get(address, "/other").await.starts_with("HTTP/1.1 404"));
    let mut conn = TcpStream::connect(address).await.expect("connect");
    conn.write_all(b"POST /metrics HTTP/1.1\r\n\r\n")
        .await
        .expect("write");
    let reply = String::from_utf8(until_closed(&mut conn).await).expect("utf8");
    assert!(reply.starts_with("HTTP/1.1 405"), "{reply}");
}

/// Connections that send nothing hold no slot: with more idle clients than slots a scrape
/// answers at once (before issue 41 it waited in the listen queue for the head timeout), and
/// the idle clients are closed, without a reply, at their head deadline.
#[tokio::test(start_paused = true)]
async fn a_scrape_behind_more_idle_connections_than_slots_answers_at_once() {
    let address = server().await;
    let mut idle = Vec::new();
    for _ in 0..LIMITS.max_connections * 3 {
        idle.push(TcpStream::connect(address).await.expect("connect"));
    }
    let start = Instant::now();
    let scrape = get(address, "/metrics").await;
    assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "the scrape answers at once"
    );
    for conn in &mut idle {
        assert!(
            until_closed(conn).await.is_empty(),
            "an idle client is closed without a reply"
        );
    }
    assert_eq!(
        start.elapsed(),
        LIMITS.head_timeout,
        "at their head deadline"
    );
}

/// A client that trickles its request head one byte a second never completes it: the head
/// timeout is a deadline for the whole head, so the server cuts it off at 5 s, and a scrape
/// meanwhile answers.
#[tokio::test(start_paused = true)]
async fn a_client_trickling_its_request_is_cut_off_at_the_head_deadline() {
    let address = server().await;
    let mut slow = TcpStream::connect(address).await.expect("connect");
    let start = Instant::now();
    let request =
        b"GET /metrics HTTP/1.1\r\nHost: node\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut sent = 0;
    let mut buf = [0u8; 64];
    let cut_at = loop {
        tokio::select! {
            read = slow.read(&mut buf) => {
                assert!(matches!(read, Ok(0) | Err(_)), "no reply to a partial head: {read:?}");
                break start.elapsed();
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                assert!(sent < request.len() - 4, "the head was never meant to complete");
                // A write to a connection the server just closed may fail: that is the cut.
                if slow.write_all(&request[sent..sent + 1]).await.is_err() {
                    break start.elapsed();
                }
                sent += 1;
            }
        }
    };
    assert_eq!(cut_at, LIMITS.head_timeout, "cut off at the head deadline");
    assert!(get(address, "/metrics").await.starts_with("HTTP/1.1 200"));
}

#[tokio::test(start_paused = true)]
async fn an_oversized_request_head_is_refused_with_431() {
    let address = server().await;
    let mut conn = TcpStream::connect(address).await.expect("connect");
    let mut head = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    // Exactly the bound, with no end of head: the server reads every byte (so closing sends
    // no reset over its reply) and refuses.
    head.resize(MAX_HEAD_BYTES, b'a');
    conn.write_all(&head).await.expect("write");
    let reply = String::from_utf8_lossy(&until_closed(&mut conn).await).into_owned();
    assert!(reply.starts_with("HTTP/1.1 431"), "{reply}");
}

/// A client that sends its request and then reads nothing holds its slot only until the write
/// timeout: with one slot, the next request answers once the server gave up on the reader, whose
/// response was cut short.
#[tokio::test(start_paused = true)]
async fn a_client_that_never_reads_is_cut_off_at_the_write_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let limits = HttpLimits {
        max_connections: 1,
        ..LIMITS
    };
    tokio::spawn(serve_http(listener, Arc::new(Huge), limits));
    let mut reader = TcpStream::connect(address).await.expect("connect");
    reader
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n")
        .await
        .expect("write");
    let start = Instant::now();
    let healthz = get(address, "/healthz").await;
    let waited = start.elapsed();
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    assert!(
        waited >= LIMITS.write_timeout && waited < LIMITS.write_timeout + Duration::from_secs(1),
        "the next request waited {waited:?}, the write timeout is {:?}",
        LIMITS.write_timeout
    );
    let got = until_closed(&mut reader).await;
    assert!(
        got.len() < HUGE_BODY,
        "the reader got {} bytes of a {HUGE_BODY}-byte body",
        got.len()
    );
}

/// The smallest `timeoutSeconds` among the shipped DaemonSet's probes (each one sets it; the
/// deploy drift check refuses a probe without it).
fn manifest_probe_timeout() -> Duration {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/daemonset.yaml"
    ))
    .expect("the DaemonSet manifest");
    let timeouts: Vec<u64> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("timeoutSeconds:"))
        .map(|n| n.trim().parse().expect("timeoutSeconds is a number"))
        .collect();
    assert_eq!(
        timeouts.len(),
        3,
        "startup, liveness and readiness timeouts"
    );
    Duration::from_secs(*timeouts.iter().min().expect("three timeouts"))
}

/// The liveness probe's case with the agent's own limits: every slot held by clients (from as
/// many addresses as it takes, the per-address cap being full for each) that send nothing and
/// reconnect the moment they are closed. `/healthz`, queued behind them, still answers within
/// the manifest's probe timeout (with a 5 s head deadline it took 5 s, the probe timeout
/// itself, and the kubelet restarted the agent).
#[tokio::test(start_paused = true)]
async fn healthz_behind_a_reconnecting_idle_flood_answers_within_the_probe_timeout() {
    let limits = HttpLimits::default();
    let probe_timeout = manifest_probe_timeout();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(serve_http(listener, Arc::new(Canned), limits));
    let mut flood = tokio::task::JoinSet::new();
    for i in 0..limits.max_connections {
        // Connected before the probe, so each holds a slot; the probe comes from 127.0.0.1.
        let from = [
            127,
            0,
            0,
            2 + u8::try_from(i / limits.max_connections_per_ip).expect("a few addresses"),
        ];
        let mut conn = connect_from(from, address).await.expect("connect");
        flood.spawn(async move {
            loop {
                until_closed(&mut conn).await;
                match connect_from(from, address).await {
                    Ok(next) => conn = next,
                    Err(_) => return,
                }
            }
        });
    }
    let start = Instant::now();
    let healthz = get(address, "/healthz").await;
    let waited = start.elapsed();
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    assert!(
        waited < probe_timeout,
        "/healthz waited {waited:?}, the probes time out at {probe_timeout:?}"
    );
    assert_eq!(
        waited,
        Duration::ZERO,
        "an idle connection is closed for it"
    );
    flood.abort_all();
}

/// One client (one address, as a pod has) opens far more connections than there are slots,
/// each sending the start of a request head and no more: it holds its share of the slots, the
/// rest are closed at once without a reply instead of waiting ahead of others, and `/healthz`
/// from another address answers at once. Without the per-address cap the probe waited for the
/// 32 held and then 4 rounds of 32 queued ahead of it: 5 head deadlines of 1 s, the probes'
/// whole timeout. (Connections that send nothing take no slot at all: see below.)
#[tokio::test(start_paused = true)]
async fn one_address_holds_at_most_its_share_of_the_slots() {
    let limits = HttpLimits::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(serve_http(listener, Arc::new(Canned), limits));
    let mut flood = Vec::new();
    for _ in 0..limits.max_connections * 5 {
        let mut conn = connect_from([127, 0, 0, 2], address)
            .await
            .expect("connect");
        conn.write_all(b"GET /metr").await.expect("write");
        flood.push(conn);
    }
    let start = Instant::now();
    let healthz = get(address, "/healthz").await;
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    let waited = start.elapsed();
    assert_eq!(waited, Duration::ZERO, "/healthz waited {waited:?}");

    // Accepted in order: the first ones hold the address's share until the head deadline; the
    // rest were closed at once, with nothing sent.
    let (held, refused) = flood.split_at_mut(limits.max_connections_per_ip);
    for conn in refused {
        assert!(
            until_closed(conn).await.is_empty(),
            "closed without a reply"
        );
        assert_eq!(start.elapsed(), Duration::ZERO, "closed at once");
    }
    for conn in held {
        assert!(
            until_closed(conn).await.is_empty(),
            "closed without a reply"
        );
        assert_eq!(
            start.elapsed(),
            limits.head_timeout,
            "held until the head deadline"
        );
    }
    // Its share is given back as its connections end: the address is served again.
    let mut again = connect_from([127, 0, 0, 2], address)
        .await
        .expect("connect");
    again
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n")
        .await
        .expect("write");
    let reply = String::from_utf8(until_closed(&mut again).await).expect("utf8");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

/// Issue 41 (8): idle connections from 127.0.0.1 itself (any local process), reconnecting the
/// moment they are closed, 40 and 140 of them, against the probes' own listener with its
/// limits: `/healthz` and `/readyz` from 127.0.0.1 too (as the kubelet's probes come) answer at
/// once, each round. Before, the 8 slots were held to the head deadline: 40 pushed the probe
/// to the probes' 5 s timeout and 140 stopped it.
#[tokio::test(start_paused = true)]
async fn probes_from_the_flooding_address_itself_answer_at_once_behind_40_and_140_idle_reconnecting_connections()
 {
    for flood_size in [40, 140] {
        let (probes, address) = bind_as_run_does();
        tokio::spawn(serve_probes(probes, Arc::new(Canned), HttpLimits::probes()));
        let mut flood = tokio::task::JoinSet::new();
        for _ in 0..flood_size {
            let mut conn = connect_from([127, 0, 0, 1], address)
                .await
                .expect("connect");
            flood.spawn(async move {
                loop {
                    until_closed(&mut conn).await;
                    match connect_from([127, 0, 0, 1], address).await {
                        Ok(next) => conn = next,
                        Err(_) => return,
                    }
                }
            });
        }
        for round in 0..3u32 {
            // The flood churns (each new connection closes an idle one, which reconnects):
            // paused time stands still, and a probe left waiting would hang the test.
            let start = Instant::now();
            for path in ["/healthz", "/readyz"] {
                let reply = get(address, path).await;
                assert!(
                    reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.1 503"),
                    "{flood_size}, round {round}, {path}: {reply}"
                );
            }
            assert_eq!(
                start.elapsed(),
                Duration::ZERO,
                "{flood_size} connections, round {round}: the probes answer at once"
            );
        }
        flood.abort_all();
    }
}

/// Issue 41 (8), the shared listener (`--healthz-address ""`: the probes on the metrics
/// port): an idle reconnecting flood from 64 addresses (8 each, within the per-address cap)
/// no longer starves `/healthz` there either (2 of 5 probes answered before).
#[tokio::test(start_paused = true)]
async fn healthz_on_the_metrics_listener_answers_at_once_behind_a_flood_from_64_addresses() {
    let limits = HttpLimits::default();
    let (metrics, address) = bind_as_run_does();
    tokio::spawn(serve_http(metrics, Arc::new(Canned), limits));
    let mut flood = tokio::task::JoinSet::new();
    for n in 0..64u8 {
        let from = [127, 0, 1, n + 1];
        for _ in 0..limits.max_connections_per_ip {
            flood.spawn(async move {
                while let Ok(mut conn) = connect_from(from, address).await {
                    until_closed(&mut conn).await;
                }
            });
        }
    }
    for round in 0..5u32 {
        // As above: paused time stands still while the flood churns; a starved probe hangs.
        let start = Instant::now();
        let reply = get(address, "/healthz").await;
        assert!(reply.starts_with("HTTP/1.1 200"), "round {round}: {reply}");
        assert_eq!(start.elapsed(), Duration::ZERO, "round {round}");
    }
    flood.abort_all();
}

/// A listener as `imagekeeper run` binds it: std's bind (the kernel's listen queue of 128, as
/// the agent's), then handed to tokio.
fn bind_as_run_does() -> (TcpListener, std::net::SocketAddr) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let address = listener.local_addr().expect("address");
    (
        TcpListener::from_std(listener).expect("tokio listener"),
        address,
    )
}

/// Issue 31: idle clients from 64 addresses, 8 each (within the per-address cap), that
/// reconnect the moment they are closed hold every slot of the metrics listener and fill its
/// kernel listen queue behind them; a probe there waited over 30 s, and the probes time out at
/// 5 s. On the probes' own listener (`run --healthz-address`) `/healthz` and `/readyz` answer
/// at once however long the flood has run, and `/metrics` is not served there (no scraper
/// takes its slots).
#[tokio::test(start_paused = true)]
async fn probes_on_their_own_listener_answer_at_once_behind_a_flood_from_64_addresses() {
    let limits = HttpLimits::default();
    let (metrics, metrics_address) = bind_as_run_does();
    tokio::spawn(serve_http(metrics, Arc::new(Canned), limits));
    let (probes, probes_address) = bind_as_run_does();
    tokio::spawn(serve_probes(probes, Arc::new(Canned), HttpLimits::probes()));
    let mut flood = tokio::task::JoinSet::new();
    for address in 0..64u8 {
        // 127.0.1.x: the probes come from 127.0.0.1, as the kubelet's on loopback would.
        let from = [127, 0, 1, address + 1];
        for _ in 0..limits.max_connections_per_ip {
            flood.spawn(async move {
                while let Ok(mut conn) = connect_from(from, metrics_address).await {
                    until_closed(&mut conn).await;
                }
            });
        }
    }
    for round in 0..3u32 {
        // The flood's connections are closed to make room for each other as they come
        // (reconnecting at once): the runtime is never idle, so paused time stands still, and
        // a probe that waited for a slot would hang here rather than pass.
        let start = Instant::now();
        for path in ["/healthz", "/readyz"] {
            let reply = get(probes_address, path).await;
            assert!(
                reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.1 503"),
                "round {round}, {path}: {reply}"
            );
        }
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "round {round}: the probes answer at once"
        );
    }
    let reply = get(probes_address, "/healthz").await;
    assert!(reply.ends_with("\r\n\r\nok: alive\n"), "{reply}");
    let reply = get(probes_address, "/metrics").await;
    assert!(reply.starts_with("HTTP/1.1 404"), "{reply}");
    assert!(reply.contains("--metrics-address"), "{reply}");
    flood.abort_all();
}
