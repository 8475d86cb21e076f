//! The API server's probe (`imagekeeper::cluster::probe_api_server`) beside the pod watch,
//! against a loopback stub of the API server that can stop answering (issue 55: "API server
//! down for minutes"). A hung API server sends nothing on a watch's open connection, so the
//! watch alone learns of it only at the client's read timeout (kube-rs's 295 s). The probe
//! marks the watch failing within its bound, the last set holds, and when the API server
//! answers again the watch lists anew at once and catches up on what changed. In tokio's paused
//! time: the bounds are the probe's, not the machine's speed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use imagekeeper::cluster::{
    ProbeTiming, api_reach, capped_client, probe_api_server, watch_bound_pods,
};
use imagekeeper::gc::BoundPods;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::time::Instant;

/// What the stub serves: whether it answers, and the image its one pod names.
#[derive(Clone, Default)]
struct Stub {
    hung: Arc<AtomicBool>,
    image: Arc<Mutex<String>>,
}

impl Stub {
    /// Serves on loopback: `/livez`, the pods' list (one pod on node-a naming `image`) and
    /// their watch (an open stream that sends nothing). While `hung`, a request is read and
    /// never answered, as a stopped API server does.
    async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        let stub = self.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let stub = stub.clone();
                tokio::spawn(async move { stub.answer(BufReader::new(conn)).await });
            }
        });
        address
    }

    async fn answer(&self, mut conn: BufReader<tokio::net::TcpStream>) {
        while let Some(path) = read_request_path(&mut conn).await {
            if self.hung.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            let text = if path.starts_with("/livez") {
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
                    .to_owned()
            } else if path.starts_with("/api/v1/pods") && path.contains("watch=true") {
                // The watch: open, and nothing on it.
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
                let _ = conn.get_mut().write_all(head.as_bytes()).await;
                std::future::pending::<()>().await;
                unreachable!("the watch's stream stays open")
            } else if path.starts_with("/api/v1/pods") {
                let image = self.image.lock().expect("image").clone();
                let body = format!(
                    r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"7"}},"items":[{{"metadata":{{"name":"web","namespace":"ns","uid":"u1","resourceVersion":"7"}},"spec":{{"nodeName":"node-a","containers":[{{"name":"c","image":"{image}"}}]}}}}]}}"#
                );
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_owned()
            };
            if conn.get_mut().write_all(text.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// Reads one request from `conn`: its path; `None` at EOF.
async fn read_request_path(conn: &mut BufReader<tokio::net::TcpStream>) -> Option<String> {
    let (request_line, _) = crate::node_events::read_request(conn).await?;
    request_line.split_whitespace().nth(1).map(str::to_owned)
}

/// How long (in the test's time) until `done` holds, polled every 100 ms; panics past `limit`.
async fn time_until(what: &str, limit: Duration, done: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

/// The pods' watch beside the probe, on `address`, with kube-rs's default read timeout.
/// (Without the probe, `ApiReach::unprobed()`, the test fails: the watch is not failing
/// within 290 s.)
fn watch_with_probe(address: &str) -> BoundPods {
    let mut config = kube::Config::new(format!("http://{address}").parse().expect("uri"));
    // What `kube::Config::infer` (the agent's) sets; `Config::new` sets none.
    config.read_timeout = Some(Duration::from_secs(295));
    let client = capped_client(config, imagekeeper::cluster::MAX_ANSWER_BYTES).expect("client");
    let pods = BoundPods::default();
    let (tx, reach) = api_reach();
    tokio::spawn(probe_api_server(client.clone(), tx, ProbeTiming::default()));
    tokio::spawn(watch_bound_pods(
        client,
        "node-a".into(),
        pods.clone(),
        reach,
    ));
    pods
}

#[tokio::test(start_paused = true)]
async fn a_hung_api_server_fails_the_watch_within_the_probes_bound_and_its_return_is_listed_at_once()
 {
    let stub = Stub::default();
    *stub.image.lock().expect("image") = "registry.test/first:1".to_owned();
    let address = stub.serve().await;
    let pods = watch_with_probe(&address);
    let images = |pods: &BoundPods| pods.images().keys().cloned().collect::<Vec<String>>();
    time_until("the first list", Duration::from_secs(30), || {
        images(&pods) == ["registry.test/first:1"]
    })
    .await;

    // The API server stops answering: the watch's connection is open and silent.
    stub.hung.store(true, Ordering::SeqCst);
    let noticed = time_until("the watch failing", Duration::from_secs(290), || {
        pods.sample().is_some_and(|s| s.failing)
    })
    .await;
    let bound = ProbeTiming::default();
    let bound = bound.period * bound.failures_to_away + bound.timeout;
    assert!(
        noticed <= bound,
        "noticed after {noticed:?}; the probe's bound is {bound:?}"
    );
    assert_eq!(
        images(&pods),
        ["registry.test/first:1"],
        "the last set holds"
    );

    // Minutes later it answers again, and its pod names another image.
    tokio::time::sleep(Duration::from_secs(180)).await;
    assert!(pods.sample().is_some_and(|s| s.failing), "still away");
    *stub.image.lock().expect("image") = "registry.test/second:1".to_owned();
    stub.hung.store(false, Ordering::SeqCst);
    let caught_up = time_until("the relist", Duration::from_secs(290), || {
        images(&pods) == ["registry.test/second:1"]
    })
    .await;
    let period = ProbeTiming::default().period;
    assert!(
        caught_up <= period + Duration::from_secs(2),
        "caught up after {caught_up:?}; the probe asks every {period:?}"
    );
    assert!(pods.sample().is_some_and(|s| !s.failing), "answering again");
}
