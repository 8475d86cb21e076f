//! The cluster signals read from CronJobs and ReplicaSets on the real cluster
//! (`cluster::lab::signals::...`):
//! what the kubelet, crictl and the API server's Events show, never only imagekeeper.

use std::time::Duration;

use super::{config, runtime_image};
use crate::cluster::cluster_lab;
use crate::support;

/// The CronJob schedule of a run at the whole minute two (or three, late in a minute) minutes
/// from now, in UTC (the lab's controller manager runs in UTC), that minute's text, and the
/// name the CronJob controller gives that run's Job (`<cronjob>-<unix minutes>`, kubernetes
/// pkg/controller/cronjob/utils.go `getJobName`).
fn schedule_in_two_minutes(cronjob: &str) -> (String, String, String) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let ahead = if now % 60 > 45 { 3 } else { 2 };
    let minute = now / 60 + ahead;
    let (m, h) = (minute % 60, minute / 60 % 24);
    (
        format!("{m} {h} * * *"),
        format!("{h:02}:{m:02}"),
        format!("{cronjob}-{minute}"),
    )
}

/// Issue 55's CronJob case: a CronJob whose image is absent and whose job template names this
/// node, its next run two minutes away. With `clusterSignalsCronJobLead = "5m"` the run is
/// within the lead at once: the agent pulls the image ahead (a warm pull of origin `CronJob
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
    let (schedule, at, job) = schedule_in_two_minutes("signals-cron");
    let node = cluster.node_name();
    let cronjob = format!(
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: signals-cron, namespace: default}}\n\
         spec:\n  schedule: \"{schedule}\"\n  jobTemplate:\n    spec:\n      backoffLimit: 0\n\
         \x20     template:\n        spec:\n          nodeName: {node}\n\
         \x20         hostNetwork: true\n          restartPolicy: Never\n\
         \x20         terminationGracePeriodSeconds: 0\n\
         \x20         containers:\n          - {{name: main, image: {image}, \
         imagePullPolicy: IfNotPresent, command: [\"true\"]}}\n"
    );
    cluster.kubectl_apply(&cronjob);
    println!("the CronJob runs at {at} UTC ({schedule}), its Job {job}");
    let pulling = release
        .wait_for_log_line(
            &["Pulling a warm image", "CronJob default/signals-cron"],
            Duration::from_secs(60),
        )
        .await;
    println!("{pulling}");
    support::wait_for(
        &format!("{image} present and runtime-pinned before the run (crictl)"),
        Duration::from_secs(60),
        || async {
            let pinned = runtime_image(&cluster, &image) == Some(true);
            if !pinned {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            pinned.then_some(())
        },
    )
    .await;
    let jobs = cluster.kubectl(&["-n", "default", "get", "jobs", "-o", "name"]);
    assert!(
        !jobs.contains("signals-cron-"),
        "pulled ahead before the run: {jobs}"
    );
    let pulled = support::wait_for(
        "the CronJob run's Pulled event, of a pod of this run's Job (kubectl get events)",
        Duration::from_secs(240),
        || async {
            let events = cluster.kubectl(&[
                "-n",
                "default",
                "get",
                "events",
                "--field-selector",
                "reason=Pulled",
                "-o",
                "jsonpath={range .items[*]}{.involvedObject.name} {.message}{\"\\n\"}{end}",
            ]);
            let found = events
                .lines()
                .find(|line| line.starts_with(&format!("{job}-")) && line.contains(&image))
                .map(str::to_owned);
            if found.is_none() {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            found
        },
    )
    .await;
    println!("{pulled}");
    assert!(
        pulled.contains("already present on machine"),
        "the run's pod found the image pulled ahead: {pulled}"
    );
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "cronjob",
        "signals-cron",
        "--wait=false",
    ]);
    drop(release);
    let _ = cluster.crictl_output(&["rmi", &image]);
}

/// The sum of the sizes of every image crictl lists (what the byte budget counts).
fn sum_of_image_sizes(cluster: &crate::cluster::ClusterLab) -> u64 {
    let out = cluster.crictl(&["images", "-o", "json"]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("crictl JSON");
    json["images"]
        .as_array()
        .expect("images")
        .iter()
        .map(|i| {
            i["size"]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .or_else(|| i["size"].as_u64())
                .expect("size")
        })
        .sum()
}

/// Issue 55's rollback case: a Deployment updated from image A to image B; then image C run
/// once by a pod (after A's last use); then a pod running image D, whose pull puts the images
/// over the byte budget by exactly D's bytes: the GC pass must remove one of A and C (each
/// holds more than D). With the cluster signals the agent reads the ReplicaSets' revisions (A
/// is the Deployment's rollback set, ranked after an image no workload names); the pass
/// removes C, A stays (crictl), and `kubectl rollout undo`'s pod finds A "already present on
/// machine" (the kubelet's Pulled event). Every other unused image is removed first, and the
/// agent starts with no history, so nothing else is there for the pass to take.
///
/// What this does not show: a different outcome without the signals. Run with
/// clusterSignals.enabled=false, the pass here removed C too (the predictive order's own
/// estimates already rank C first on this history; measured, 85 s). The rollback set's rank
/// against the estimates is held by `gc::signals_tests::the_known_use_replaces_the_estimate_in_the_order`.
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn with_cluster_signals_a_rollout_undo_after_a_gc_pass_finds_the_previous_image_present() {
    let cluster = cluster_lab("cluster::lab::signals::rollout_undo").await;
    let (a, b, c, d) = (
        cluster.lab_image("data:5mb"),
        cluster.lab_image("busybox:1.35"),
        cluster.lab_image("data:1mb"),
        cluster.lab_image("user:uid"),
    );
    let (repository, tag) = cluster.image();
    let agent_image = format!("{repository}:{tag}");
    let sandbox = cluster.env("CLUSTER_LAB_SANDBOX_IMAGE");
    let _delete = Delete(&cluster);
    // Only what the test needs on the node: every other image that no container uses goes.
    let listed = cluster.crictl(&["images", "-o", "json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("crictl JSON");
    for image in listed["images"].as_array().expect("images") {
        let tags: Vec<String> = image["repoTags"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if tags
            .iter()
            .any(|t| [&agent_image, &sandbox, &a, &b, &c].contains(&t))
        {
            continue;
        }
        if let Some(id) = image["id"].as_str() {
            let _ = cluster.crictl_output(&["rmi", id]);
        }
    }
    for image in [&agent_image, &a, &b, &c, &d] {
        cluster.crictl(&["pull", image]);
    }
    let (a_size, c_size, d_size) = (
        runtime_size(&cluster, &a),
        runtime_size(&cluster, &c),
        runtime_size(&cluster, &d),
    );
    assert!(
        d_size < c_size && c_size < a_size,
        "sizes {d_size} {c_size} {a_size}"
    );
    let _ = cluster.crictl_output(&["rmi", &d]);
    let before = sum_of_image_sizes(&cluster);
    // An agent with no history of these images (the chart's database, on the machine at its
    // hostPath, is the earlier tests'): a pull and removal an earlier test made would read as
    // a re-pull, and the predictive order would rank by that.
    // The labels its runtime pins left go first, every instance's: a new database is a new
    // instance, and another instance's labels would stay as foreign ones (doctor's conflict).
    let out = crate::support::bin::run(&[
        "remove-runtime-pins",
        "--container-runtime-endpoint",
        &cluster.env("CLUSTER_LAB_CRI_ENDPOINT"),
        "--db",
        "/var/lib/imagekeeper/records.redb",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "remove-runtime-pins: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file("/var/lib/imagekeeper/records.redb");
    // The byte budget: the node as it is fits; with D pulled it holds D's bytes too many.
    let budget = format!(
        "imageGCPolicy = \"predictive\"\nimageGCHighBytes = {}\nimageGCLowBytes = {before}\n",
        before + d_size - 1
    );
    let sets = [
        "clusterSignals.enabled=true".to_owned(),
        "extraArgs={--gc-period=5s}".to_owned(),
    ];
    let release = cluster.install("imagekeeper", &config(100, 99, &budget), &sets);
    release
        .wait_for_log_line(&["Listed the ReplicaSets"], Duration::from_secs(60))
        .await;
    let rollout = || {
        cluster.kubectl(&[
            "-n",
            "default",
            "rollout",
            "status",
            "deployment/signals-undo",
            "--timeout=180s",
        ])
    };
    cluster.kubectl_apply(&undo_deployment(&a));
    rollout();
    cluster.kubectl_apply(&undo_deployment(&b));
    rollout();
    no_container_runs(&cluster, &a).await;
    // C runs once, after A's last use; then its pod goes.
    cluster.kubectl_apply(&pod("signals-undo-c", &c, "[sleep, \"5\"]"));
    cluster.kubectl(&[
        "-n",
        "default",
        "wait",
        "pod/signals-undo-c",
        "--for=jsonpath={.status.phase}=Succeeded",
        "--timeout=120s",
    ]);
    cluster.kubectl(&["-n", "default", "delete", "pod", "signals-undo-c"]);
    no_container_runs(&cluster, &c).await;
    // D's pull puts the images D's bytes over the budget.
    cluster.kubectl_apply(&pod("signals-undo-d", &d, "[sleep, \"3600\"]"));
    let start = std::time::Instant::now();
    while runtime_image(&cluster, &c).is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{c} not removed by the agent's GC within 120 s ({a} present: {}); images {}; the \
             agent's log:\n{}",
            runtime_image(&cluster, &a).is_some(),
            cluster.crictl(&["images"]),
            release.logs()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        runtime_image(&cluster, &a).is_some(),
        "{a}, the rollback set, stays after the pass"
    );
    cluster.kubectl(&[
        "-n",
        "default",
        "rollout",
        "undo",
        "deployment/signals-undo",
    ]);
    rollout();
    let pulled = support::wait_for(
        "the undo's pod's Pulled event for the previous image (kubectl get events)",
        Duration::from_secs(120),
        || async {
            let events = cluster.kubectl(&[
                "-n",
                "default",
                "get",
                "events",
                "--field-selector",
                "reason=Pulled",
                "-o",
                "jsonpath={range .items[*]}{.involvedObject.name} {.message}{\"\\n\"}{end}",
            ]);
            // The undo's pod is the newest pod of the Deployment running A.
            let pods = cluster.kubectl(&[
                "-n",
                "default",
                "get",
                "pods",
                "-l",
                "app=signals-undo",
                "--sort-by=.metadata.creationTimestamp",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image}{\"\\n\"}{end}",
            ]);
            let pod = pods
                .lines()
                .rfind(|l| l.ends_with(&format!(" {a}")))
                .and_then(|l| l.split_whitespace().next())
                .map(str::to_owned)?;
            let found = events
                .lines()
                .find(|line| line.starts_with(&format!("{pod} ")) && line.contains(&a))
                .map(str::to_owned);
            if found.is_none() {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            found
        },
    )
    .await;
    println!("{pulled}");
    assert!(
        pulled.contains("already present on machine"),
        "the undo found the previous image present: {pulled}"
    );
    drop(release);
}

/// Deletes the rollback test's Deployment and pods however the test ends.
struct Delete<'a>(&'a crate::cluster::ClusterLab);

impl Drop for Delete<'_> {
    fn drop(&mut self) {
        for what in [
            "deployment/signals-undo",
            "pod/signals-undo-c",
            "pod/signals-undo-d",
        ] {
            let _ = self.0.kubectl_output(&[
                "-n",
                "default",
                "delete",
                what,
                "--ignore-not-found",
                "--wait=false",
            ]);
        }
    }
}

/// The rollback test's Deployment running `image`.
fn undo_deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: signals-undo, namespace: default}}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: signals-undo}}}}\n\
         \x20 template:\n    metadata: {{labels: {{app: signals-undo}}}}\n    spec:\n\
         \x20     hostNetwork: true\n      terminationGracePeriodSeconds: 0\n\
         \x20     containers:\n      - {{name: main, image: {image}, \
         imagePullPolicy: IfNotPresent, command: [sleep, \"3600\"]}}\n"
    )
}

/// A pod of `image` running `command` once on the host network.
fn pod(name: &str, image: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
         spec:\n  hostNetwork: true\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n\
         \x20 containers:\n  - {{name: main, image: {image}, imagePullPolicy: IfNotPresent, \
         command: {command}}}\n"
    )
}

/// Waits until no container, running or exited, has `image` (crictl).
async fn no_container_runs(cluster: &crate::cluster::ClusterLab, image: &str) {
    support::wait_for(
        &format!("no container of {image}"),
        Duration::from_secs(120),
        || async {
            let left = cluster.crictl(&["ps", "-a", "-q", "--image", image]);
            let gone = left.trim().is_empty();
            if !gone {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            gone.then_some(())
        },
    )
    .await;
}

/// An image's size as the CRI lists it.
fn runtime_size(cluster: &crate::cluster::ClusterLab, image: &str) -> u64 {
    let out = cluster.crictl(&["inspecti", "-o", "json", image]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("crictl JSON");
    json["status"]["size"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| json["status"]["size"].as_u64())
        .expect("size")
}
