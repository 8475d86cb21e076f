//! Node Events through kube-rs's recorder (`agent::KubeEventSink`, feature `kube`) against an
//! in-process stub of the API server: every request is decoded into the k8s-openapi
//! `events.k8s.io/v1` Event and its verb and path checked; the stub answers as the API server
//! does (the object back). The stub stays for what the cluster lab cannot show at will: the
//! exact verbs and paths of each request, an API server that refuses everything, answers that
//! never end or are too long. The same Events through a real API server v1.37.2:
//! `cluster::lab` (tests/it/cluster/lab.rs).

use std::time::Duration;

use imagekeeper::telemetry::{EventLimits, EventSink, KubeEventSink, NodeEvent, NodeEventType};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// One request the stub received.
#[derive(Debug)]
struct Request {
    method: String,
    path: String,
    content_type: String,
    event: K8sEvent,
}

/// Serves HTTP/1.1 on loopback (keep-alive, Content-Length bodies), answering each request
/// with its own body (201 for POST, 200 otherwise) and sending it, decoded, on `requests`.
async fn stub_api_server() -> (String, mpsc::UnboundedReceiver<Request>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut conn = BufReader::new(conn);
                loop {
                    let mut request_line = String::new();
                    if conn.read_line(&mut request_line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let mut parts = request_line.split_whitespace();
                    let method = parts.next().unwrap_or("").to_owned();
                    let path = parts.next().unwrap_or("").to_owned();
                    let mut length = 0usize;
                    let mut content_type = String::new();
                    loop {
                        let mut line = String::new();
                        conn.read_line(&mut line).await.expect("header");
                        let line = line.trim_end();
                        if line.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':') {
                            match name.to_ascii_lowercase().as_str() {
                                "content-length" => length = value.trim().parse().expect("length"),
                                "content-type" => content_type = value.trim().to_owned(),
                                _ => {}
                            }
                        }
                    }
                    let mut body = vec![0u8; length];
                    conn.read_exact(&mut body).await.expect("body");
                    let event: K8sEvent = serde_json::from_slice(&body).unwrap_or_else(|e| {
                        panic!("{method} {path}: not an events.k8s.io/v1 Event: {e}")
                    });
                    let status = if method == "POST" {
                        "201 Created"
                    } else {
                        "200 OK"
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    conn.get_mut()
                        .write_all(head.as_bytes())
                        .await
                        .expect("write");
                    conn.get_mut().write_all(&body).await.expect("write");
                    let _ = tx.send(Request {
                        method,
                        path,
                        content_type,
                        event,
                    });
                }
            });
        }
    });
    (address, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Request>) -> Request {
    // The deadline only guards against a hang: each request is announced on the channel.
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a request within 30 s")
        .expect("the stub runs")
}

fn event(type_: NodeEventType, reason: &'static str, note: &str) -> NodeEvent {
    NodeEvent {
        type_,
        reason,
        action: "GarbageCollect",
        note: note.to_owned(),
    }
}

#[tokio::test]
async fn node_events_are_created_on_the_node_and_a_repeat_becomes_one_series() {
    let (address, mut requests) = stub_api_server().await;
    let config = kube::Config::new(format!("http://{address}").parse().expect("uri"));
    let sink = KubeEventSink::with_config(config, "node-a").expect("sink");

    sink.publish(event(
        NodeEventType::Normal,
        "ImageGarbageCollected",
        "Removed 2 images, freed 3072 bytes (3KiB): aaaaaaaaaaaa (2KiB), bbbbbbbbbbbb (1KiB)",
    ));
    let created = next(&mut requests).await;
    assert_eq!(created.method, "POST");
    assert_eq!(
        created.path.split('?').next(),
        Some("/apis/events.k8s.io/v1/namespaces/default/events")
    );
    let e = &created.event;
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.reason.as_deref(), Some("ImageGarbageCollected"));
    assert_eq!(e.action.as_deref(), Some("GarbageCollect"));
    assert_eq!(
        e.note.as_deref(),
        Some("Removed 2 images, freed 3072 bytes (3KiB): aaaaaaaaaaaa (2KiB), bbbbbbbbbbbb (1KiB)")
    );
    assert_eq!(e.reporting_controller.as_deref(), Some("imagekeeper"));
    assert_eq!(e.reporting_instance.as_deref(), Some("node-a"));
    let regarding = e.regarding.as_ref().expect("regarding");
    assert_eq!(
        (
            regarding.kind.as_deref(),
            regarding.name.as_deref(),
            regarding.uid.as_deref(),
            regarding.api_version.as_deref()
        ),
        (Some("Node"), Some("node-a"), Some("node-a"), Some("v1"))
    );
    assert!(e.series.is_none());

    // A failure that flaps: the same Event twice is one series (a PATCH of the first one's
    // count), not two objects.
    let failure =
        "Insufficient free disk space on the node's image filesystem (93% of 100GiB used).";
    sink.publish(event(
        NodeEventType::Warning,
        "FreeDiskSpaceFailed",
        failure,
    ));
    let first = next(&mut requests).await;
    assert_eq!(first.method, "POST");
    assert_eq!(first.event.type_.as_deref(), Some("Warning"));
    assert_eq!(first.event.reason.as_deref(), Some("FreeDiskSpaceFailed"));
    let name = first.event.metadata.name.clone().expect("a name");
    sink.publish(event(
        NodeEventType::Warning,
        "FreeDiskSpaceFailed",
        failure,
    ));
    let again = next(&mut requests).await;
    assert_eq!(again.method, "PATCH");
    assert_eq!(
        again.path.split('?').next(),
        Some(format!("/apis/events.k8s.io/v1/namespaces/default/events/{name}").as_str())
    );
    assert_eq!(again.content_type, "application/merge-patch+json");
    assert_eq!(again.event.series.as_ref().map(|s| s.count), Some(2));
    sink.publish(event(
        NodeEventType::Warning,
        "FreeDiskSpaceFailed",
        failure,
    ));
    let third = next(&mut requests).await;
    assert_eq!(
        (
            third.method.as_str(),
            third.event.series.as_ref().map(|s| s.count)
        ),
        ("PATCH", Some(3))
    );

    // The same reason with other numbers is a new Event with its own note, not a fourth
    // count of the first one's series under that first, stale note (what one kube-rs recorder
    // did on the lab cluster: its series key leaves the note out).
    let changed =
        "Insufficient free disk space on the node's image filesystem (95% of 100GiB used).";
    sink.publish(event(
        NodeEventType::Warning,
        "FreeDiskSpaceFailed",
        changed,
    ));
    let new = next(&mut requests).await;
    assert_eq!(
        (
            new.method.as_str(),
            new.event.note.as_deref(),
            new.event.series.is_none()
        ),
        ("POST", Some(changed), true)
    );
    // And the first message again still counts on in its own series.
    sink.publish(event(
        NodeEventType::Warning,
        "FreeDiskSpaceFailed",
        failure,
    ));
    let fourth = next(&mut requests).await;
    assert_eq!(
        (
            fourth.method.as_str(),
            fourth.event.series.as_ref().map(|s| s.count)
        ),
        ("PATCH", Some(4))
    );
}

#[tokio::test]
async fn an_api_server_that_refuses_loses_the_event_and_the_next_one_still_goes() {
    // A server that answers 403 to everything: the sink logs and goes on.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden","reason":"Forbidden","code":403}"#;
                let _ = conn
                    .write_all(
                        format!(
                            "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
                let _ = tx.send(text.lines().next().unwrap_or("").to_owned());
            });
        }
    });
    let config = kube::Config::new(format!("http://{address}").parse().expect("uri"));
    let sink = KubeEventSink::with_config(config, "node-a").expect("sink");
    sink.publish(event(NodeEventType::Warning, "ImageGCFailed", "one"));
    sink.publish(event(NodeEventType::Warning, "ImageGCFailed", "two"));
    for _ in 0..2 {
        let line = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("a request within 30 s")
            .expect("served");
        assert!(
            line.starts_with("POST /apis/events.k8s.io/v1/namespaces/default/events"),
            "{line}"
        );
    }
}

#[test]
fn events_without_a_node_name_exit_2_before_anything_is_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let out = crate::support::bin::output(
        crate::support::bin::imagekeeper()
            .args(["run", "--events", "--db"])
            .arg(&db)
            .arg("--admin-socket")
            .arg(dir.path().join("admin.sock"))
            .env_remove("NODE_NAME"),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--events: NODE_NAME is not set"),
        "{stderr}"
    );
    assert!(!db.exists(), "nothing created");
}

#[test]
fn a_bad_kubelet_config_for_the_doctor_events_exits_2_before_anything_is_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let kubelet = dir.path().join("kubelet-config.yaml");
    std::fs::write(&kubelet, "imageGCHighThresholdPercent: [\n").expect("write");
    let out = crate::support::bin::output(
        crate::support::bin::imagekeeper()
            .args(["run", "--events", "--db"])
            .arg(&db)
            .arg("--admin-socket")
            .arg(dir.path().join("admin.sock"))
            .arg("--kubelet-config")
            .arg(&kubelet)
            .env("NODE_NAME", "node-a"),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--kubelet-config"), "{stderr}");
    assert!(stderr.contains("kubelet-config.yaml"), "{stderr}");
    assert!(!db.exists(), "nothing created");
    // Without --events the flag is refused by the parser.
    let out =
        crate::support::bin::run(&["run", "--kubelet-config", kubelet.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// `run --events` with NODE_NAME but no in-cluster credentials (no KUBERNETES_SERVICE_HOST, no
/// service account token: not in a pod) logs "Node Events are off" once, with why, and runs
/// without them: ready, a pull through the admin socket and a GC cycle served, SIGTERM ends it
/// with 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_without_in_cluster_credentials_log_once_and_the_agent_runs_without_them() {
    use crate::support::agent::{AgentFixture, image, next_notify};
    use std::io::BufRead;

    let AgentFixture {
        fake, dir, socket, ..
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1500)
        .start()
        .await;
    fake.add_pullable(
        "registry.example/b:1",
        image("sha256:bbb", "registry.example/b:1", 500),
    );
    let notify_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("bind notify");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args([
            "run",
            "--events",
            "--container-runtime-endpoint",
            &fake.endpoint(),
        ])
        .arg("--db")
        .arg(dir.path().join("records.redb"))
        .arg("--admin-socket")
        .arg(&socket)
        // No space pass (the fake's image filesystem is the host's temp dir); a GC cycle
        // every second still runs and ends (the cycles Events would report).
        .args(["--image-gc-high-threshold", "100", "--gc-period", "1s"])
        .env("NODE_NAME", "node-a")
        .env("NOTIFY_SOCKET", &notify_path)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("IMAGEKEEPER_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn agent");
    let stderr = child.stderr.take().expect("piped");
    let log = std::thread::spawn(move || {
        std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let agent = crate::support::agent::AgentChild { child };
    let first = tokio::task::block_in_place(|| next_notify(&notify));
    assert!(first.starts_with("READY=1"), "{first}");
    let out = crate::support::bin::output(
        crate::support::bin::imagekeeper()
            .args(["pull", "registry.example/b:1", "--admin-socket"])
            .arg(&socket),
    );
    assert!(out.status.success(), "pull: {out:?}");
    // A GC cycle through the agent (its dry run answers from the running agent).
    let out = crate::support::bin::output(
        crate::support::bin::imagekeeper()
            .args(["gc", "--dry-run", "--admin-socket"])
            .arg(&socket),
    );
    assert!(out.status.success(), "gc --dry-run: {out:?}");
    agent.signal(libc::SIGTERM);
    let mut agent = agent;
    let status = tokio::task::block_in_place(|| agent.wait_within(Duration::from_secs(30)));
    assert_eq!(status.code(), Some(0));
    let log = log.join().expect("the stderr reader");
    let off: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("Node Events are off"))
        .collect();
    assert_eq!(off.len(), 1, "{log:#?}");
    assert!(
        off[0].contains("no in-cluster Kubernetes credentials") && off[0].contains("node-a"),
        "{}",
        off[0]
    );
    assert!(
        !log.iter()
            .any(|l| l.contains("Cannot publish a Node Event")),
        "{log:#?}"
    );
}

/// How the stub answers the first Event write (later ones are answered as the API server
/// does, the Event back with Content-Length).
#[derive(Clone, Copy, Debug)]
pub(crate) enum FirstAnswer {
    /// `201` and an endless chunked body of 64 KiB chunks: until the client closes the
    /// connection, or [`ENDLESS_GIVE_UP_BYTES`] (then the client read it all: the bug).
    Endless,
    /// `201` headers, then nothing, the connection held open.
    Silent,
    /// Not a byte back: the request read, the connection held open.
    Nothing,
    /// A status line and a header that never ends (no line break), 64 KiB at a time.
    EndlessHead,
    /// `201` headers, then a chunked body one byte every 100 ms, for ever.
    Drip,
    /// Bytes that are not HTTP, then the connection closed.
    NotHttp,
    /// `201` with a Content-Length body that is not JSON.
    NotJson,
    /// `403` with a Status object whose message is 900 KiB (under the body cap).
    HugeStatus,
}

/// Where the endless stub stops if the client never closes: far past any cap.
const ENDLESS_GIVE_UP_BYTES: u64 = 256 << 20;

/// What the stub saw of the first answer: the body bytes it got written before the client
/// closed (or it gave up), and whether the client closed.
pub(crate) type FirstOutcome = (u64, bool);

/// Reads one request (head and Content-Length body) from `conn`; `None` at EOF.
pub(crate) async fn read_request(
    conn: &mut BufReader<tokio::net::TcpStream>,
) -> Option<(String, Vec<u8>)> {
    let mut request_line = String::new();
    if conn.read_line(&mut request_line).await.unwrap_or(0) == 0 {
        return None;
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).await.ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body).await.ok()?;
    Some((request_line, body))
}

/// Writes `first` on `conn` and says what came of it: the bytes written before the client
/// closed the connection (or the stub gave up), and whether the client closed it.
async fn answer_first(first: FirstAnswer, conn: &mut tokio::net::TcpStream) -> FirstOutcome {
    const CHUNKED_201: &str = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    // Writes `piece` until the client closes (true) or `give_up` bytes went (false).
    async fn repeat(
        conn: &mut tokio::net::TcpStream,
        piece: &[u8],
        give_up: u64,
        pause: Option<Duration>,
    ) -> FirstOutcome {
        let mut sent = 0u64;
        loop {
            if sent >= give_up {
                return (sent, false);
            }
            if conn.write_all(piece).await.is_err() || conn.flush().await.is_err() {
                return (sent, true);
            }
            sent += piece.len() as u64;
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
        }
    }
    // Writes `text` once; the client may have closed before it is all written.
    async fn once(conn: &mut tokio::net::TcpStream, text: String) -> FirstOutcome {
        let closed = conn.write_all(text.as_bytes()).await.is_err();
        (text.len() as u64, closed)
    }
    match first {
        FirstAnswer::Endless => {
            if conn.write_all(CHUNKED_201.as_bytes()).await.is_err() {
                return (0, true);
            }
            let chunk = format!("10000\r\n{}\r\n", " ".repeat(1 << 16));
            repeat(conn, chunk.as_bytes(), ENDLESS_GIVE_UP_BYTES, None).await
        }
        FirstAnswer::Silent | FirstAnswer::Nothing => {
            if matches!(first, FirstAnswer::Silent)
                && conn.write_all(CHUNKED_201.as_bytes()).await.is_err()
            {
                return (0, true);
            }
            // Held open (nothing more is sent) until the client closes it.
            let mut rest = Vec::new();
            let _ = conn.read_to_end(&mut rest).await;
            (0, true)
        }
        FirstAnswer::EndlessHead => {
            if conn
                .write_all(b"HTTP/1.1 201 Created\r\nX-Padding: ")
                .await
                .is_err()
            {
                return (0, true);
            }
            repeat(conn, &[b'a'; 1 << 16], ENDLESS_GIVE_UP_BYTES, None).await
        }
        FirstAnswer::Drip => {
            if conn.write_all(CHUNKED_201.as_bytes()).await.is_err() {
                return (0, true);
            }
            // Ten minutes of drip at most; the client's deadline ends it long before.
            repeat(
                conn,
                b"1\r\n \r\n",
                6 * 6000,
                Some(Duration::from_millis(100)),
            )
            .await
        }
        FirstAnswer::NotHttp => {
            once(
                conn,
                "\u{1}\u{2}SSH-2.0-not-an-api-server\r\n\r\n".repeat(64),
            )
            .await
        }
        FirstAnswer::NotJson => {
            let body = "<html><body>502 Bad Gateway</body></html>";
            let text = format!(
                "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            once(conn, text).await
        }
        FirstAnswer::HugeStatus => {
            let body = format!(
                r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"{}","reason":"Forbidden","code":403}}"#,
                "x".repeat(900 << 10)
            );
            let text = format!(
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            once(conn, text).await
        }
    }
}

/// A loopback stub API server whose first answer is `first`; it reports the first answer's
/// outcome on the oneshot and each later request line on the channel.
pub(crate) async fn misbehaving_api_server(
    first: FirstAnswer,
) -> (
    String,
    tokio::sync::oneshot::Receiver<FirstOutcome>,
    mpsc::UnboundedReceiver<String>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut first_tx = Some(first_tx);
        while let Ok((conn, _)) = listener.accept().await {
            let mut conn = BufReader::new(conn);
            if let Some(report) = first_tx.take() {
                tokio::spawn(async move {
                    if read_request(&mut conn).await.is_none() {
                        return;
                    }
                    let _ = report.send(answer_first(first, conn.get_mut()).await);
                });
                continue;
            }
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some((line, body)) = read_request(&mut conn).await {
                    let head = format!(
                        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.get_mut().write_all(head.as_bytes()).await;
                    let _ = conn.get_mut().write_all(&body).await;
                    let _ = tx.send(line.trim_end().to_owned());
                }
            });
        }
    });
    (address, first_rx, rx)
}

/// Issues 41 (2) and 53 (7): the API server client against a listener that misbehaves, one
/// case each, and what bounds the first publish: the body cap (an endless `201` body: without
/// it the agent took all 256 MiB the stub sent, and more), hyper's header cap, the deadline
/// (set to 1 s here; without it the queue's one task waited for ever), or the answer's own
/// end with an error. Then the next Event still goes. Memory: an endless answer, body or head,
/// is cut before 64 MiB; log: a 900 KiB error message is logged cut to 1 KiB.
#[tokio::test]
async fn an_api_server_that_answers_slowly_endlessly_or_with_garbage_costs_one_event_each() {
    let (log, _log) = crate::support::CapturedLog::install();
    // (the first answer, the deadline, whether the client must close an endless answer)
    let cases = [
        (
            FirstAnswer::Endless,
            EventLimits::default().response_deadline,
            true,
        ),
        (
            FirstAnswer::EndlessHead,
            EventLimits::default().response_deadline,
            true,
        ),
        (FirstAnswer::Silent, Duration::from_secs(1), false),
        (FirstAnswer::Nothing, Duration::from_secs(1), false),
        (FirstAnswer::Drip, Duration::from_secs(1), false),
        (FirstAnswer::NotHttp, Duration::from_secs(1), false),
        (FirstAnswer::NotJson, Duration::from_secs(1), false),
        (FirstAnswer::HugeStatus, Duration::from_secs(1), false),
    ];
    for (first_answer, deadline, endless) in cases {
        let (address, first, mut requests) = misbehaving_api_server(first_answer).await;
        let config = kube::Config::new(format!("http://{address}").parse().expect("uri"));
        let limits = EventLimits {
            response_deadline: deadline,
            ..EventLimits::default()
        };
        let sink = KubeEventSink::with_limits(config, "node-a", limits).expect("sink");
        sink.publish(event(NodeEventType::Warning, "ImageGCFailed", "one"));
        let (sent, closed) = tokio::time::timeout(Duration::from_secs(60), first)
            .await
            .unwrap_or_else(|_| panic!("{first_answer:?}: the first answer ends within 60 s"))
            .expect("reported");
        if endless {
            assert!(
                closed,
                "{first_answer:?}: the agent read {sent} bytes of an endless answer without closing it"
            );
            assert!(
                sent < 64 << 20,
                "{first_answer:?}: {sent} bytes were taken before the connection closed"
            );
        }
        sink.publish(event(NodeEventType::Warning, "ImageGCFailed", "two"));
        let line = tokio::time::timeout(Duration::from_secs(30), requests.recv())
            .await
            .unwrap_or_else(|_| panic!("{first_answer:?}: the next Event within 30 s"))
            .expect("served");
        assert!(line.starts_with("POST /apis/events.k8s.io/v1/"), "{line}");
    }
    let lines = log.take();
    let warnings: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("Cannot publish a Node Event"))
        .collect();
    assert_eq!(
        warnings.len(),
        cases.len(),
        "one warning per lost Event: {lines:#?}"
    );
    let longest = warnings.iter().map(|l| l.len()).max().unwrap_or(0);
    assert!(
        longest < 4096,
        "a warning of {longest} bytes: an API server's error text is cut"
    );
}
