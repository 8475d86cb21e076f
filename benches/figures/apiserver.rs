//! A stand-in Kubernetes API server for the cluster signals figure (issue 55): plain HTTP on
//! loopback, one thread per connection, holding a synthetic cluster of
//! [`PODS`] pods ([`BOUND_PODS`] of them bound to [`NODE`]), [`CRONJOBS`] CronJobs,
//! [`REPLICASETS`] ReplicaSets and [`DAEMONSETS`] DaemonSets, each object shaped as the API
//! server sends it (metadata with labels, annotations and owner references; a spec with its
//! containers, resources and env; a status).
//!
//! It answers what the agent's watches ask: `GET /livez`; a list of each kind (in pages of the
//! request's `limit`, with a `continue` token, as the API server pages them), the pods
//! filtered by `fieldSelector=spec.nodeName=<node>` as the API server filters them; and a
//! watch of each (chunked, one JSON event per line) that sends the cluster's churn (below), a
//! `BOOKMARK` every [`BOOKMARK_EVERY`] and ends at its `timeoutSeconds`, as the API server's do.
//! Anything else is a 404 `Status`.
//!
//! The churn, a steady cluster's: every [`CHURN_EVERY`] one CronJob's status changes (its
//! `lastScheduleTime`: 1,000 CronJobs running about hourly), and every fourth tick one bound
//! pod's status and one ReplicaSet's status change. Each change takes the next
//! resourceVersion.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The node the measured agent runs as (`NODE_NAME`).
pub const NODE: &str = "bench-node";
/// Pods in the cluster, and how many of them are bound to [`NODE`].
pub const PODS: usize = 5_000;
pub const BOUND_PODS: usize = 110;
pub const CRONJOBS: usize = 1_000;
pub const REPLICASETS: usize = 2_000;
pub const DAEMONSETS: usize = 10;
/// The other nodes the rest of the pods are bound to.
const OTHER_NODES: usize = 45;
/// How often a watch sends a bookmark (the API server's is about a minute).
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// The churn's tick.
const CHURN_EVERY: Duration = Duration::from_secs(4);

/// The four kinds the agent watches.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    Pod,
    DaemonSet,
    CronJob,
    ReplicaSet,
}

impl Kind {
    fn of_path(path: &str) -> Option<Kind> {
        match path {
            "/api/v1/pods" => Some(Kind::Pod),
            "/apis/apps/v1/daemonsets" => Some(Kind::DaemonSet),
            "/apis/batch/v1/cronjobs" => Some(Kind::CronJob),
            "/apis/apps/v1/replicasets" => Some(Kind::ReplicaSet),
            _ => None,
        }
    }

    fn list_kind(self) -> (&'static str, &'static str) {
        match self {
            Kind::Pod => ("v1", "PodList"),
            Kind::DaemonSet => ("apps/v1", "DaemonSetList"),
            Kind::CronJob => ("batch/v1", "CronJobList"),
            Kind::ReplicaSet => ("apps/v1", "ReplicaSetList"),
        }
    }

    fn kind(self) -> (&'static str, &'static str) {
        match self {
            Kind::Pod => ("v1", "Pod"),
            Kind::DaemonSet => ("apps/v1", "DaemonSet"),
            Kind::CronJob => ("batch/v1", "CronJob"),
            Kind::ReplicaSet => ("apps/v1", "ReplicaSet"),
        }
    }
}

/// An open watch: its kind, its node filter and where its events go.
type Watcher = (Kind, Option<String>, Sender<String>);

/// The cluster's objects and the open watches.
struct Cluster {
    objects: Mutex<HashMap<Kind, Vec<Value>>>,
    resource_version: AtomicU64,
    watchers: Mutex<Vec<Watcher>>,
    requests: Mutex<HashMap<String, u64>>,
}

/// The running server; dropping it stops the churn and the accept loop (open watches end at
/// their timeout or when their client goes).
pub struct StubApiServer {
    pub port: u16,
    cluster: Arc<Cluster>,
    stop: Arc<AtomicBool>,
}

impl StubApiServer {
    /// The stand-in for the node holding `node_images` (the fake runtime's first repo tags):
    /// what the pods bound to [`NODE`] run, the DaemonSets' templates and the templates of
    /// the CronJobs whose runs are this node's name images among them, as on a node where
    /// those pods run and those jobs ran.
    pub fn start(node_images: &[String]) -> StubApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the stub API server");
        let port = listener.local_addr().expect("its address").port();
        let cluster = Arc::new(Cluster {
            objects: Mutex::new(synth_cluster(node_images)),
            resource_version: AtomicU64::new(1_000),
            watchers: Mutex::new(Vec::new()),
            requests: Mutex::new(HashMap::new()),
        });
        let stop = Arc::new(AtomicBool::new(false));
        thread::spawn({
            let cluster = cluster.clone();
            let stop = stop.clone();
            move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let cluster = cluster.clone();
                    thread::spawn(move || serve(stream, &cluster));
                }
            }
        });
        thread::spawn({
            let cluster = cluster.clone();
            let stop = stop.clone();
            move || churn(&cluster, &stop)
        });
        StubApiServer {
            port,
            cluster,
            stop,
        }
    }

    /// A kubeconfig naming this server (plain HTTP, no credentials).
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster:\n    server: http://127.0.0.1:{}\ncontexts:\n- name: stub\n  context:\n    cluster: stub\n    user: stub\ncurrent-context: stub\nusers:\n- name: stub\n  user: {{}}\n",
            self.port
        )
    }

    /// How many requests of each kind (`list pods`, `watch cronjobs`, `livez`, ...) came.
    pub fn requests(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .cluster
            .requests
            .lock()
            .expect("requests lock")
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        out.sort();
        out
    }
}

impl Drop for StubApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One request's line and query.
struct Request {
    path: String,
    query: HashMap<String, String>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let target = line.split_whitespace().nth(1)?.to_owned();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        if header == "\r\n" || header == "\n" {
            break;
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let query = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), percent_decode(v)))
        .collect();
    Some(Request {
        path: path.to_owned(),
        query,
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
        } else {
            out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Serves one connection's requests until it closes (a watch closes it at its end).
fn serve(stream: TcpStream, cluster: &Cluster) {
    let Ok(write) = stream.try_clone() else {
        return;
    };
    let mut write = write;
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        let watch = request
            .query
            .get("watch")
            .is_some_and(|v| v == "true" || v == "1");
        let kind = Kind::of_path(&request.path);
        let name = match (kind, watch) {
            (Some(k), true) => format!("watch {k:?}"),
            (Some(k), false) => format!("list {k:?}"),
            (None, _) => request.path.trim_start_matches('/').to_owned(),
        };
        *cluster
            .requests
            .lock()
            .expect("requests lock")
            .entry(name)
            .or_default() += 1;
        let node = request
            .query
            .get("fieldSelector")
            .and_then(|f| f.strip_prefix("spec.nodeName="))
            .map(str::to_owned);
        let ok = match (request.path.as_str(), kind) {
            ("/livez", _) => respond(&mut write, 200, "text/plain", b"ok"),
            (_, Some(kind)) if watch => {
                let timeout = request
                    .query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(290);
                watch_stream(&mut write, cluster, kind, node, Duration::from_secs(timeout));
                return;
            }
            (_, Some(kind)) => {
                let page = Page::of(&request.query);
                let body = list_body(cluster, kind, node.as_deref(), page);
                respond(&mut write, 200, "application/json", &body)
            }
            _ => respond(
                &mut write,
                404,
                "application/json",
                br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
            ),
        };
        if !ok {
            return;
        }
    }
}

fn respond(write: &mut TcpStream, code: u16, content_type: &str, body: &[u8]) -> bool {
    let head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        if code == 200 { "OK" } else { "Not Found" },
        body.len()
    );
    write.write_all(head.as_bytes()).is_ok() && write.write_all(body).is_ok()
}

fn bound_to(object: &Value, node: Option<&str>) -> bool {
    node.is_none_or(|node| object["spec"]["nodeName"].as_str() == Some(node))
}

/// A list's page as the API server serves it: `limit` objects from the `continue` token's
/// offset (kube-rs's watcher asks 500 at a time), with the token of the next page.
#[derive(Clone, Copy)]
struct Page {
    offset: usize,
    limit: Option<usize>,
}

impl Page {
    fn of(query: &HashMap<String, String>) -> Page {
        Page {
            offset: query
                .get("continue")
                .and_then(|c| c.parse().ok())
                .unwrap_or(0),
            limit: query
                .get("limit")
                .and_then(|l| l.parse().ok())
                .filter(|l| *l > 0),
        }
    }
}

fn list_body(cluster: &Cluster, kind: Kind, node: Option<&str>, page: Page) -> Vec<u8> {
    let objects = cluster.objects.lock().expect("objects lock");
    let matching: Vec<&Value> = objects[&kind]
        .iter()
        .filter(|o| bound_to(o, node))
        .collect();
    let end = page
        .limit
        .map_or(matching.len(), |l| (page.offset + l).min(matching.len()));
    let items = &matching[page.offset.min(end)..end];
    let mut metadata = json!({
        "resourceVersion": cluster.resource_version.load(Ordering::SeqCst).to_string(),
    });
    if end < matching.len() {
        metadata["continue"] = json!(end.to_string());
    }
    let (api_version, list_kind) = kind.list_kind();
    let list = json!({
        "apiVersion": api_version,
        "kind": list_kind,
        "metadata": metadata,
        "items": items,
    });
    serde_json::to_vec(&list).expect("a list serializes")
}

/// A watch: the churn's events of `kind` (on `node`'s pods only, when filtered), a bookmark
/// every [`BOOKMARK_EVERY`], until `timeout`.
fn watch_stream(
    write: &mut TcpStream,
    cluster: &Cluster,
    kind: Kind,
    node: Option<String>,
    timeout: Duration,
) {
    let (tx, rx): (Sender<String>, Receiver<String>) = channel();
    cluster
        .watchers
        .lock()
        .expect("watchers lock")
        .push((kind, node, tx));
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    if write.write_all(head.as_bytes()).is_err() {
        return;
    }
    let end = Instant::now() + timeout;
    let mut next_bookmark = Instant::now() + BOOKMARK_EVERY;
    loop {
        let now = Instant::now();
        if now >= end {
            let _ = write.write_all(b"0\r\n\r\n");
            return;
        }
        let line = match rx.recv_timeout(next_bookmark.min(end) - now) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) if Instant::now() >= next_bookmark => {
                next_bookmark += BOOKMARK_EVERY;
                let (api_version, kind) = kind.kind();
                let rv = cluster.resource_version.load(Ordering::SeqCst).to_string();
                json!({"type": "BOOKMARK", "object": {"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": rv}}}).to_string()
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let chunk = format!("{:x}\r\n{line}\n\r\n", line.len() + 1);
        if write.write_all(chunk.as_bytes()).is_err() {
            return;
        }
    }
}

/// Changes one object of `kind` (index `i` of its list): a new resourceVersion and the status
/// field a steady cluster changes, sent to every open watch of that kind it matches.
fn modify(cluster: &Cluster, kind: Kind, i: usize, now: &str) {
    let rv = cluster.resource_version.fetch_add(1, Ordering::SeqCst) + 1;
    let object = {
        let mut objects = cluster.objects.lock().expect("objects lock");
        let list = objects.get_mut(&kind).expect("every kind is held");
        let index = match kind {
            // Only the bound pods change: those are what the agent's filtered watch sees.
            Kind::Pod => (i % BOUND_PODS) * (PODS / BOUND_PODS),
            _ => i % list.len(),
        };
        let object = &mut list[index];
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        match kind {
            Kind::CronJob => object["status"]["lastScheduleTime"] = json!(now),
            Kind::Pod => object["status"]["conditions"][0]["lastProbeTime"] = json!(now),
            Kind::ReplicaSet => object["status"]["observedGeneration"] = json!(rv),
            Kind::DaemonSet => object["status"]["observedGeneration"] = json!(rv),
        }
        object.clone()
    };
    let line = json!({"type": "MODIFIED", "object": object}).to_string();
    let mut watchers = cluster.watchers.lock().expect("watchers lock");
    watchers.retain(|(k, node, tx)| {
        *k != kind || !bound_to(&object, node.as_deref()) || tx.send(line.clone()).is_ok()
    });
}

fn churn(cluster: &Cluster, stop: &AtomicBool) {
    let mut tick = 0usize;
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(CHURN_EVERY);
        tick += 1;
        let now = format!("2026-12-01T{:02}:{:02}:00Z", (tick / 60) % 24, tick % 60);
        modify(cluster, Kind::CronJob, tick * 7, &now);
        if tick.is_multiple_of(4) {
            modify(cluster, Kind::Pod, tick / 4, &now);
            modify(cluster, Kind::ReplicaSet, tick * 13, &now);
        }
    }
}

/// An image of another node (a name the fake runtime does not list).
fn image(i: usize) -> String {
    format!(
        "registry.example.com/team-{}/app-{i:06}:v{}.{}.{}",
        i % 37,
        i % 9,
        i % 17,
        i % 5
    )
}

fn container(name: &str, image: &str) -> Value {
    json!({
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    })
}

fn metadata(name: &str, namespace: &str, owner: Option<(&str, &str, &str)>, extra: Value) -> Value {
    let mut meta = json!({
        "name": name,
        "namespace": namespace,
        "uid": format!("00000000-0000-4000-8000-{:012x}", fxhash(name, namespace)),
        "resourceVersion": "1000",
        "generation": 1,
        "creationTimestamp": "2026-11-01T00:00:00Z",
        "labels": {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "bench"},
        "annotations": extra,
    });
    if let Some((api_version, kind, owner)) = owner {
        meta["ownerReferences"] = json!([{
            "apiVersion": api_version, "kind": kind, "name": owner,
            "uid": format!("00000000-0000-4000-8000-{:012x}", fxhash(owner, namespace)),
            "controller": true, "blockOwnerDeletion": true,
        }]);
    }
    meta
}

fn fxhash(a: &str, b: &str) -> u64 {
    a.bytes()
        .chain(b.bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
            (h ^ c as u64).wrapping_mul(0x100_0000_01b3)
        })
        & 0xffff_ffff_ffff
}

fn pod_spec(node: Option<&str>, containers: Vec<Value>) -> Value {
    let mut spec = json!({
        "containers": containers,
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
    });
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    spec
}

/// The synthetic cluster (deterministic): the pods (one in [`PODS`] / [`BOUND_PODS`] bound to
/// [`NODE`], each of those naming two of the node's images: its own main one and one of 20
/// sidecars), the DaemonSets (one pod on every node; each template names one of the node's
/// images), the CronJobs (every tenth naming [`NODE`] in its template, and one of the node's
/// images: its runs were this node's), the ReplicaSets (two per Deployment: the current one
/// and a previous revision scaled to 0).
fn synth_cluster(node_images: &[String]) -> HashMap<Kind, Vec<Value>> {
    assert!(
        node_images.len() >= BOUND_PODS + 20 + DAEMONSETS + CRONJOBS / 10,
        "the node holds too few images for the stand-in's names"
    );
    // Counted from the end of the node's list: the bound pods' main images are its first.
    let from_end = |k: usize| node_images[node_images.len() - 1 - k].clone();
    let mut pods = Vec::with_capacity(PODS);
    let stride = PODS / BOUND_PODS;
    for i in 0..PODS {
        let namespace = format!("ns-{:02}", i % 50);
        let (node, img) = if i % stride == 0 && i / stride < BOUND_PODS {
            (NODE.to_owned(), node_images[i / stride].clone())
        } else {
            (format!("node-{:02}", i % OTHER_NODES), image(i))
        };
        let (owner_kind, owner) = if i % 10 == 0 {
            ("DaemonSet", format!("ds-{}", i % DAEMONSETS))
        } else {
            ("ReplicaSet", format!("rs-{:04}", (i / 2) % REPLICASETS))
        };
        pods.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": metadata(&format!("pod-{i:05}"), &namespace, Some(("apps/v1", owner_kind, &owner)), json!({})),
            "spec": pod_spec(Some(&node), vec![container("main", &img), container("sidecar", &from_end(i % 20))]),
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-01T00:00:00Z"}],
                "containerStatuses": [{"name": "main", "image": img, "imageID": "", "ready": true, "restartCount": 0, "started": true, "state": {"running": {"startedAt": "2026-11-01T00:00:00Z"}}}],
            },
        }));
    }
    let daemonsets = (0..DAEMONSETS)
        .map(|i| {
            json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": metadata(&format!("ds-{i}"), "kube-system", None, json!({"deprecated.daemonset.template.generation": "1"})),
                "spec": {
                    "selector": {"matchLabels": {"app": format!("ds-{i}")}},
                    "template": {"metadata": {"labels": {"app": format!("ds-{i}")}}, "spec": pod_spec(None, vec![container("agent", &from_end(20 + i))])},
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                },
                "status": {"currentNumberScheduled": 46, "desiredNumberScheduled": 46, "numberReady": 46, "observedGeneration": 1},
            })
        })
        .collect();
    let cronjobs = (0..CRONJOBS)
        .map(|i| {
            let job_image = if i % 10 == 0 {
                from_end(20 + DAEMONSETS + i / 10)
            } else {
                image(6_000 + i)
            };
            let mut spec = pod_spec(None, vec![container("job", &job_image)]);
            spec["restartPolicy"] = json!("OnFailure");
            if i % 10 == 0 {
                spec["nodeSelector"] = json!({"kubernetes.io/hostname": NODE});
            }
            json!({
                "apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": metadata(&format!("cron-{i:04}"), &format!("ns-{:02}", i % 50), None, json!({})),
                "spec": {
                    "schedule": format!("{} {} * * *", i % 60, (i / 60) % 24),
                    "timeZone": if i % 3 == 0 { json!("Europe/Berlin") } else { Value::Null },
                    "concurrencyPolicy": "Forbid",
                    "successfulJobsHistoryLimit": 3,
                    "jobTemplate": {"spec": {"backoffLimit": 2, "template": {"spec": spec}}},
                },
                "status": {"lastScheduleTime": "2026-11-30T00:00:00Z"},
            })
        })
        .collect();
    let replicasets = (0..REPLICASETS)
        .map(|i| {
            let deployment = format!("deploy-{:04}", i / 2);
            let revision = 1 + i % 2;
            json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": metadata(&format!("rs-{i:04}"), &format!("ns-{:02}", (i / 2) % 50), Some(("apps/v1", "Deployment", &deployment)), json!({
                    "deployment.kubernetes.io/revision": revision.to_string(),
                    "deployment.kubernetes.io/desired-replicas": "2",
                    "deployment.kubernetes.io/max-replicas": "3",
                })),
                "spec": {
                    "replicas": if revision == 2 { 2 } else { 0 },
                    "selector": {"matchLabels": {"app": deployment}},
                    "template": {"metadata": {"labels": {"app": deployment}}, "spec": pod_spec(None, vec![container("main", &image(i))])},
                },
                "status": {"replicas": if revision == 2 { 2 } else { 0 }, "observedGeneration": 1},
            })
        })
        .collect();
    HashMap::from([
        (Kind::Pod, pods),
        (Kind::DaemonSet, daemonsets),
        (Kind::CronJob, cronjobs),
        (Kind::ReplicaSet, replicasets),
    ])
}
