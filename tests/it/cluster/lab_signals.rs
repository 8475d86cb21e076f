//! The cluster signals read from CronJobs on the real cluster (`cluster::lab::signals::...`):
//! what the kubelet, crictl and the API server's Events show, never only imagekeeper.

use std::time::Duration;

use super::{
    config, crictl_pull, init_container_pod, pod_phase, runtime_image, wait_for_runtime_image,
};
use crate::cluster::{ClusterLab, NAMESPACE, Release, cluster_lab};
use crate::support;

/// The CronJob's time zone: Asia/Kathmandu is UTC+05:45 all year, so a schedule read in any
/// other zone (UTC, or a whole-hour offset) names another minute.
const TIME_ZONE: &str = "Asia/Kathmandu";
/// Its offset from UTC, in minutes.
const TIME_ZONE_OFFSET_MINUTES: u64 = 5 * 60 + 45;

/// The CronJob schedule of a run at the next whole minute at least 35 s from now, written in
/// [`TIME_ZONE`]'s local time, that minute's text (UTC), and the name the CronJob controller
/// gives that run's Job (`<cronjob>-<unix minutes>`, kubernetes
/// pkg/controller/cronjob/utils.go `getJobName`).
fn schedule_at_the_next_minute(cronjob: &str) -> (String, String, String) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    // At least 35 s ahead: the agent's watch, its pull of 5 MiB from the lab's registry and
    // the runtime pin take a few seconds.
    let ahead = if now % 60 < 25 { 1 } else { 2 };
    let minute = now / 60 + ahead;
    let local = minute + TIME_ZONE_OFFSET_MINUTES;
    let (local_m, local_h) = (local % 60, local / 60 % 24);
    let (m, h) = (minute % 60, minute / 60 % 24);
    (
        format!("{local_m} {local_h} * * *"),
        format!("{h:02}:{m:02}"),
        format!("{cronjob}-{minute}"),
    )
}

/// Issue 55's CronJob case: a CronJob whose image is absent and whose job template names this
/// node, its next run under two minutes away, its schedule written in `timeZone` Asia/Kathmandu
/// (UTC+05:45: read in UTC it would be 5 h 45 min away, outside the lead, and nothing would
/// be pulled ahead). With `clusterSignalsCronJobLead = "5m"` the run is within the lead at once: the agent pulls the image ahead (a warm pull of origin `CronJob
/// default/signals-cron`), crictl lists it runtime-pinned before the run, and the run's pod,
/// created by the CronJob controller at the scheduled minute, finds it "already present on
/// machine" (the kubelet's Pulled event).
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn with_cluster_signals_a_cronjobs_absent_image_is_pulled_ahead_and_pinned_and_its_run_finds_it_present()
 {
    let cluster = cluster_lab("cluster::lab::signals::cronjob_prefetch").await;
    let image = cluster.lab_image("data:5mb");
    let _ = cluster.crictl_output(&["rmi", &image]);
    assert_eq!(
        runtime_image(&cluster, &image),
        None,
        "{image} absent at the start"
    );
    let sets = ["clusterSignals.enabled=true".to_owned()];
    let release = cluster.install(
        "imagekeeper",
        &config(
            85,
            80,
            "warmPeriod = \"1h\"\nclusterSignalsCronJobLead = \"5m\"\n",
        ),
        &sets,
    );
    release
        .wait_for_log_line(&["Listed the CronJobs"], Duration::from_secs(60))
        .await;
    let (schedule, at, job) = schedule_at_the_next_minute("signals-cron");
    let node = cluster.node_name();
    let cronjob = format!(
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: signals-cron, namespace: default}}\n\
         spec:\n  schedule: \"{schedule}\"\n  timeZone: {TIME_ZONE}\n  jobTemplate:\n    spec:\n      backoffLimit: 0\n\
         \x20     template:\n        spec:\n          nodeName: {node}\n\
         \x20         hostNetwork: true\n          restartPolicy: Never\n\
         \x20         terminationGracePeriodSeconds: 0\n\
         \x20         containers:\n          - {{name: main, image: {image}, \
         imagePullPolicy: IfNotPresent, command: [\"true\"]}}\n"
    );
    cluster.kubectl_apply(&cronjob);
    println!("the CronJob runs at {at} UTC ({schedule} in {TIME_ZONE}), its Job {job}");
    let pulling = release
        .wait_for_log_line(
            &["Pulling a warm image", "CronJob default/signals-cron"],
            Duration::from_secs(60),
        )
        .await;
    println!("{pulling}");
    wait_for_runtime_image(
        &cluster,
        &image,
        Some(true),
        &format!("{image} present and runtime-pinned before the run (crictl)"),
        Duration::from_secs(60),
    )
    .await;
    let jobs = cluster.kubectl(&["-n", "default", "get", "jobs", "-o", "name"]);
    assert!(
        !jobs.contains("signals-cron-"),
        "pulled ahead before the run: {jobs}"
    );
    cluster
        .wait_for_no_pull(
            "the CronJob run's Pulled event, of a pod of this run's Job (kubectl get events)",
            &format!("{job}-"),
            &image,
            Duration::from_secs(240),
        )
        .await;
    // Gone before the next test: the run's pod names the image (a pod bound to the node keeps
    // it, and its exited container uses it) until the Job and its pod are deleted.
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "cronjob",
        "signals-cron",
        "--cascade=foreground",
    ]);
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "job",
        &job,
        "--ignore-not-found",
        "--cascade=foreground",
    ]);
    cluster
        .wait_for_no_pods(&format!("job-name={job}"), Duration::from_secs(120))
        .await;
    drop(release);
    // The run's exited container, in the runtime until the kubelet's next container GC, would
    // keep the image in use for the next test.
    cluster.remove_stopped_pod_sandboxes();
    let _ = cluster.crictl_output(&["rmi", &image]);
}

/// The sum of the sizes of the images the lab's containerd lists (CRI ListImages, as the
/// agent's byte budget counts them).
fn listed_bytes(cluster: &ClusterLab) -> u64 {
    let listed: serde_json::Value =
        serde_json::from_str(&cluster.crictl(&["images", "-o", "json"])).expect("crictl JSON");
    listed["images"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| super::crictl_size(&i["size"]))
        .sum()
}

/// Deletes the Deployment `signals-web` (if any) and waits until its pods are gone.
async fn remove_web(cluster: &ClusterLab) {
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "deployment",
        "signals-web",
        "--ignore-not-found",
        "--cascade=foreground",
    ]);
    cluster
        .wait_for_no_pods("app=signals-web", Duration::from_secs(120))
        .await;
}

/// The running pods of the Deployment `signals-web` and their images, `name image` a line.
fn web_pods(cluster: &ClusterLab) -> Vec<String> {
    cluster
        .kubectl(&[
            "-n",
            "default",
            "get",
            "pods",
            "-l",
            "app=signals-web",
            "-o",
            "jsonpath={range .items[?(@.status.phase==\"Running\")]}{.metadata.name} {.spec.containers[0].image}{\"\\n\"}{end}",
        ])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Issue 55's rollback case: a Deployment updated from `data:1mb` to `data:5mb` keeps its
/// previous revision (its ReplicaSet at 0 replicas) as the rollback set. The agent, predictive,
/// its byte budget's low line at what the node held (a node it has no history of), sees another
/// image pulled and must free that much:
/// its GC pass takes images with no known next use and keeps the rollback set's (ranked as a
/// week away). `kubectl rollout undo` then starts the previous revision's pod with the
/// kubelet's "already present on machine".
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn with_cluster_signals_a_rollout_undo_after_a_gc_pass_finds_the_previous_image_present() {
    let cluster = cluster_lab("cluster::lab::signals::rollout_undo").await;
    let (v1, v2, filler) = (
        cluster.lab_image("data:1mb"),
        cluster.lab_image("data:5mb"),
        cluster.lab_image("data:20mb"),
    );
    remove_web(&cluster).await;
    // The filler's size, then the filler gone: it comes again once the agent runs.
    crictl_pull(&cluster, &filler);
    let filler_bytes = super::crictl_image_size(&cluster, &filler);
    cluster.crictl(&["rmi", &filler]);
    for image in [&v1, &v2] {
        crictl_pull(&cluster, image);
    }
    // A node the agent has no history of: the earlier tests' uses, pulls and removals of the
    // lab's few images would otherwise give them estimates of their own.
    let _ = std::fs::remove_file("/var/lib/imagekeeper/records.redb");
    let node = cluster.node_name();
    let deployment = |image: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: signals-web, namespace: default}}\n\
             spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: signals-web}}}}\n\
             \x20 template:\n    metadata: {{labels: {{app: signals-web}}}}\n    spec:\n\
             \x20     nodeName: {node}\n      hostNetwork: true\n      terminationGracePeriodSeconds: 0\n\
             \x20     containers:\n      - {{name: main, image: \"{image}\", imagePullPolicy: IfNotPresent, \
             command: [sleep, \"3600\"]}}\n"
        )
    };
    let rolled_out = |image: String| {
        let cluster = &cluster;
        async move {
            support::wait_for(
                &format!("signals-web's one running pod on {image} (kubectl get pods)"),
                Duration::from_secs(120),
                || async {
                    let pods = web_pods(cluster);
                    let done = pods.len() == 1 && pods[0].ends_with(&format!(" {image}"));
                    if !done {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    done.then(|| pods[0].split(' ').next().unwrap_or_default().to_owned())
                },
            )
            .await
        }
    };
    cluster.kubectl_apply(&deployment(&v1));
    let first = rolled_out(v1.clone()).await;
    cluster.kubectl_apply(&deployment(&v2));
    rolled_out(v2.clone()).await;
    let budget = listed_bytes(&cluster);
    let sets = [
        "clusterSignals.enabled=true".to_owned(),
        "extraArgs={--gc-period=5s}".to_owned(),
    ];
    let release = cluster.install(
        "imagekeeper",
        &config(
            100,
            99,
            &format!(
                "imageGCPolicy = \"predictive\"\nimageGCHighBytes = {}\nimageGCLowBytes = {budget}\n",
                budget + filler_bytes / 2
            ),
        ),
        &sets,
    );
    let listed = release
        .wait_for_log_line(&["Listed the ReplicaSets"], Duration::from_secs(60))
        .await;
    println!("{listed}");
    // Another image comes: the images now hold more than the budget's high line, and GC frees
    // down to its low line, what the node held before (the filler's size).
    crictl_pull(&cluster, &filler);
    support::wait_for(
        &format!("the agent's GC back within its byte budget of {budget} (crictl images)"),
        Duration::from_secs(90),
        || async {
            let within = listed_bytes(&cluster) <= budget;
            if !within {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            within.then_some(())
        },
    )
    .await;
    let logs = release.logs();
    for line in logs
        .lines()
        .filter(|l| l.contains("emov") || l.contains("garbage"))
    {
        println!("{line}");
    }
    assert!(
        runtime_image(&cluster, &v1).is_some(),
        "{v1}, the rollback set's image, survived the GC pass"
    );
    cluster.kubectl(&["-n", "default", "rollout", "undo", "deployment/signals-web"]);
    let undone = rolled_out(v1.clone()).await;
    assert_ne!(undone, first, "a new pod of the previous revision");
    cluster
        .wait_for_no_pull(
            "the undone revision's Pulled event (kubectl get events)",
            &format!("{undone} "),
            &v1,
            Duration::from_secs(60),
        )
        .await;
    remove_web(&cluster).await;
    drop(release);
    cluster.remove_stopped_pod_sandboxes();
}

/// The lab's kube-apiserver stopped (SIGSTOP: a hung API server, its connections open and
/// silent) until dropped, then continued.
struct StoppedApiServer {
    pid: String,
}

impl StoppedApiServer {
    fn stop(cluster: &ClusterLab) -> StoppedApiServer {
        // `scripts/cluster-lab` records each process's pid beside its logs' directory.
        let logs = std::path::PathBuf::from(cluster.env("CLUSTER_LAB_LOG_DIR"));
        let pid_file = logs.parent().expect("the lab's dir").join("apiserver.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
            .trim()
            .to_owned();
        signal(&pid, "-STOP");
        StoppedApiServer { pid }
    }
}

impl Drop for StoppedApiServer {
    fn drop(&mut self) {
        signal(&self.pid, "-CONT");
    }
}

fn signal(pid: &str, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

/// The agent's `imagekeeper_cluster_watch_failing{resource="pods"}`, read from its metrics
/// endpoint on the node's address (no API server in the way).
fn pods_watch_failing(cluster: &ClusterLab) -> Option<String> {
    let url = format!("http://{}:9899/metrics", cluster.env("CLUSTER_LAB_NODE_IP"));
    let out = cluster.run_in_namespace("curl", &["-sS", "-m", "10", &url]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("imagekeeper_cluster_watch_failing{resource=\"pods\"}"))
        .and_then(|l| l.split_whitespace().last().map(str::to_owned))
}

/// Waits until the metric reads `want`; how long it took.
async fn wait_for_pods_watch_failing(
    cluster: &ClusterLab,
    want: &str,
    deadline: Duration,
) -> Duration {
    let started = std::time::Instant::now();
    support::wait_for(
        &format!("imagekeeper_cluster_watch_failing{{resource=\"pods\"}} {want} (curl /metrics)"),
        deadline,
        || async {
            let now = pods_watch_failing(cluster);
            if now.as_deref() != Some(want) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            (now.as_deref() == Some(want)).then_some(())
        },
    )
    .await;
    started.elapsed()
}

/// Issue 55's "API server down for minutes": a pod bound to the node whose init container
/// runs, its main image present and in no container (kept and runtime-pinned by the signals
/// alone). The API server is stopped (SIGSTOP: hung, its connections open and silent) for two
/// minutes. Within a minute the agent says so (`imagekeeper_cluster_watch_failing` 1 on its
/// metrics endpoint; before the API server's probe, only at the client's 295-s read timeout),
/// its GC goes on with the node's own knowledge (an image crictl pulls meanwhile is removed
/// at 1/0), and the last set holds (the pod's image stays pinned). When the API server
/// continues, the metric goes back to 0, and the pod's deletion reaches the node: its image
/// is no longer pinned. The agent's log has the probe's two lines.
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn with_the_api_server_hung_for_minutes_the_agent_says_so_keeps_its_last_set_and_catches_up()
{
    let cluster = cluster_lab("cluster::lab::signals::api_server_hung").await;
    let (kept, loose) = (cluster.lab_image("data:5mb"), cluster.lab_image("data:1mb"));
    let init = cluster.lab_image("busybox:1.35");
    for image in [&kept, &init] {
        crictl_pull(&cluster, image);
    }
    // The gate stays shut: the init container runs until the pod is deleted.
    let (pod, _gate) = init_container_pod(&cluster, "signals-hung", &init, &kept);
    cluster.kubectl_apply(&pod);
    let sets = [
        "clusterSignals.enabled=true".to_owned(),
        "extraArgs={--gc-period=5s}".to_owned(),
    ];
    let release = cluster.install("imagekeeper", &config(1, 0, ""), &sets);
    release
        .wait_for_log_line(
            &["Listed the pods bound to this node"],
            Duration::from_secs(60),
        )
        .await;
    wait_for_runtime_image(
        &cluster,
        &kept,
        Some(true),
        &format!("{kept} kept and runtime-pinned for the bound pod (crictl)"),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(pods_watch_failing(&cluster).as_deref(), Some("0"));

    let stopped = StoppedApiServer::stop(&cluster);
    let down = std::time::Instant::now();
    let noticed = wait_for_pods_watch_failing(&cluster, "1", Duration::from_secs(60)).await;
    println!("the agent said the API server is away after {noticed:?}");
    // The node's own knowledge: the GC removes an image pulled meanwhile.
    crictl_pull(&cluster, &loose);
    wait_for_runtime_image(
        &cluster,
        &loose,
        None,
        &format!("{loose} removed by the agent's GC with the API server away (crictl)"),
        Duration::from_secs(60),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(120).saturating_sub(down.elapsed())).await;
    assert_eq!(
        runtime_image(&cluster, &kept),
        Some(true),
        "{kept}: still kept and pinned after two minutes without the API server"
    );
    drop(stopped);

    let back = wait_for_pods_watch_failing(&cluster, "0", Duration::from_secs(60)).await;
    println!("the agent said the API server answers again after {back:?}");
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "pod",
        "signals-hung",
        "--grace-period=0",
        "--wait=false",
    ]);
    support::wait_for(
        &format!("{kept} no longer pinned once its pod is deleted (crictl)"),
        Duration::from_secs(60),
        || async {
            let pinned = runtime_image(&cluster, &kept) == Some(true);
            if pinned {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            (!pinned).then_some(())
        },
    )
    .await;
    let logs = release.logs();
    for line in [
        "The API server does not answer",
        "The API server answers again",
    ] {
        assert!(logs.contains(line), "the agent's log has \"{line}\"");
    }
    drop(release);
    // The node is Ready again before the next test (its lease went stale while the API
    // server was stopped).
    cluster.kubectl(&[
        "wait",
        "--for=condition=Ready",
        &format!("node/{}", cluster.node_name()),
        "--timeout=120s",
    ]);
    let _ = cluster.crictl_output(&["rmi", &kept]);
}

/// Issue 55's prefetch of a bound pod's images: a pod bound to the node whose init container
/// runs until the test lets it end names a main image that is absent. The kubelet would pull
/// it only when the init container ends; the agent pulls it ahead (a warm pull of origin `Pod
/// default/signals-prefetch`), crictl lists it present while the pod is still initializing,
/// and the main container starts with the kubelet's "already present on machine".
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn with_cluster_signals_a_bound_pods_absent_main_image_is_pulled_ahead_while_its_init_container_runs()
 {
    let cluster = cluster_lab("cluster::lab::signals::bound_pod_prefetch").await;
    let (main, init) = (
        cluster.lab_image("data:5mb"),
        cluster.lab_image("busybox:1.35"),
    );
    crictl_pull(&cluster, &init);
    let _ = cluster.crictl_output(&["rmi", &main]);
    assert_eq!(
        runtime_image(&cluster, &main),
        None,
        "{main} absent at the start"
    );
    let release = cluster.install(
        "imagekeeper",
        &config(85, 80, "warmPeriod = \"1h\"\n"),
        &["clusterSignals.enabled=true".to_owned()],
    );
    release
        .wait_for_log_line(
            &["Listed the pods bound to this node"],
            Duration::from_secs(60),
        )
        .await;
    let (pod, gate) = init_container_pod(&cluster, "signals-prefetch", &init, &main);
    cluster.kubectl_apply(&pod);
    let pulling = release
        .wait_for_log_line(
            &["Pulling a warm image", "Pod default/signals-prefetch"],
            Duration::from_secs(30),
        )
        .await;
    println!("{pulling}");
    wait_for_runtime_image(
        &cluster,
        &main,
        Some(true),
        &format!("{main} present (and pinned for the pod) while the init container runs (crictl)"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        pod_phase(&cluster, "signals-prefetch"),
        "Pending",
        "the init container still runs"
    );
    gate.open();
    cluster
        .wait_for_no_pull(
            "the pod's main container created (kubectl get events)",
            "signals-prefetch ",
            &main,
            Duration::from_secs(60),
        )
        .await;
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "pod",
        "signals-prefetch",
        "--wait=false",
    ]);
    cronjobs_refused_in_one_log_line(&cluster, &release).await;
    drop(release);
    let _ = cluster.crictl_output(&["rmi", &main]);
}

/// Issue 55's "RBAC denied: one clear log line", for the cluster signals: the agent restarts
/// with its role no longer granting the CronJobs. Its log says the CronJobs' watch is refused
/// ("forbidden") once, however often the watcher retries, and the other watches run (the
/// bound pods are listed).
async fn cronjobs_refused_in_one_log_line(cluster: &ClusterLab, release: &Release<'_>) {
    let role = format!("{}-cluster-signals", release.fullname());
    let cronjobs_rule =
        r#"{"apiGroups":["batch"],"resources":["cronjobs"],"verbs":["list","watch"]}"#;
    cluster.kubectl(&[
        "patch",
        "clusterrole",
        &role,
        "--type=json",
        "-p",
        &format!(
            r#"[{{"op":"test","path":"/rules/2","value":{cronjobs_rule}}},{{"op":"remove","path":"/rules/2"}}]"#
        ),
    ]);
    cluster.kubectl(&[
        "-n",
        NAMESPACE,
        "rollout",
        "restart",
        &format!("ds/{}", release.fullname()),
    ]);
    release.wait_ready(Duration::from_secs(120));
    let refused = release
        .wait_for_log_line(
            &["The watch of the CronJobs failed", "forbidden"],
            Duration::from_secs(60),
        )
        .await;
    println!("{refused}");
    release
        .wait_for_log_line(
            &["Listed the pods bound to this node"],
            Duration::from_secs(60),
        )
        .await;
    // The watcher retries with backoff (kube-rs's default: from 0.8 s); after three refusals
    // (its errors counter, curl /metrics), the log line is still said once.
    let url = format!("http://{}:9899/metrics", cluster.env("CLUSTER_LAB_NODE_IP"));
    let errors = support::wait_for(
        "imagekeeper_cluster_watch_errors_total{resource=\"cronjobs\"} >= 3 (curl /metrics)",
        Duration::from_secs(60),
        || async {
            let out = cluster.run_in_namespace("curl", &["-sS", "-m", "10", &url]);
            let errors = String::from_utf8_lossy(&out.stdout)
                .lines()
                .find(|l| {
                    l.starts_with("imagekeeper_cluster_watch_errors_total{resource=\"cronjobs\"}")
                })
                .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                .filter(|n| *n >= 3.0);
            if errors.is_none() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            errors
        },
    )
    .await;
    println!("cronjobs watch errors: {errors}");
    let logs = release.logs();
    let refusals = Release::lines_with(&logs, &["The watch of the CronJobs failed"]);
    assert_eq!(refusals.len(), 1, "one clear line: {refusals:?}");
}
