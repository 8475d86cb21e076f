//! Issue 55's CronJob under pressure on the real cluster (`cluster::lab::cronjob_pressure`):
//! a CronJob's image, the least recently used on the node when the GC must free everything it
//! may, survives and its runs find it present. Read through crictl and the kubelet's Events.

use std::time::Duration;

use super::{config, crictl_pull, images_with_imagekeeper_labels, runtime_image};
use crate::cluster::cluster_lab;
use crate::support;

/// A CronJob running every minute on this node, its image pulled first (so the least recently
/// used: another image is pulled after it) and no Job kept after it succeeds
/// (`successfulJobsHistoryLimit: 0`, so between runs no pod bound here names the image: only
/// the CronJob does). The agent's GC at 1/0 every 5 s removes every image nothing keeps, the
/// pressure under which the kubelet's order takes the least recently used first: the other
/// image goes, the CronJob's stays, runtime-pinned (so the kubelet's own GC and
/// DeleteUnusedImages skip it too, `kubelet::lab::an_image_labelled_pinned_...`), and the next
/// run starts with the kubelet's "already present on machine".
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn with_cluster_signals_a_cronjobs_least_recently_used_image_survives_the_gc_and_its_next_runs_find_it_present()
 {
    let cluster = cluster_lab("cluster::lab::cronjob_pressure").await;
    let (image, newer) = (cluster.lab_image("data:5mb"), cluster.lab_image("data:1mb"));
    // The CronJob's image first, then the other: the CronJob's is the least recently used.
    crictl_pull(&cluster, &image);
    crictl_pull(&cluster, &newer);
    let node = cluster.node_name();
    let cronjob = format!(
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: signals-lru, namespace: default}}\n\
         spec:\n  schedule: \"* * * * *\"\n  successfulJobsHistoryLimit: 0\n  failedJobsHistoryLimit: 1\n\
         \x20 jobTemplate:\n    spec:\n      backoffLimit: 0\n\
         \x20     template:\n        spec:\n          nodeName: {node}\n\
         \x20         hostNetwork: true\n          restartPolicy: Never\n\
         \x20         terminationGracePeriodSeconds: 0\n\
         \x20         containers:\n          - {{name: main, image: {image}, \
         imagePullPolicy: IfNotPresent, command: [\"true\"]}}\n"
    );
    cluster.kubectl_apply(&cronjob);
    let sets = [
        "clusterSignals.enabled=true".to_owned(),
        "extraArgs={--gc-period=5s}".to_owned(),
    ];
    let release = cluster.install("imagekeeper", &config(1, 0, ""), &sets);
    release
        .wait_for_log_line(&["Listed the CronJobs"], Duration::from_secs(60))
        .await;
    // The GC at 1/0 removes every image nothing keeps: the newer one goes, the least recently
    // used stays.
    support::wait_for(
        &format!("{newer} removed by the agent's GC"),
        Duration::from_secs(60),
        || async {
            let gone = runtime_image(&cluster, &newer).is_none();
            if !gone {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            gone.then_some(())
        },
    )
    .await;
    assert_eq!(
        runtime_image(&cluster, &image),
        Some(true),
        "{image}: present and pinned as the CRI lists it"
    );
    println!("labelled: {:?}", images_with_imagekeeper_labels(&cluster));
    // The next run after the pressure: its Job is `signals-lru-<unix minutes>` (kubernetes
    // pkg/controller/cronjob/utils.go getJobName), its pod's name starts with it. (The runs
    // before it found the image present too: crictl pulled it before the CronJob was made.)
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let job = format!("signals-lru-{}", now / 60 + 1);
    cluster
        .wait_for_no_pull(
            &format!("the run {job}'s Pulled event (kubectl get events)"),
            &format!("{job}-"),
            &image,
            Duration::from_secs(150),
        )
        .await;
    println!(
        "{image} after {job}: {:?}; pods: {}",
        runtime_image(&cluster, &image),
        cluster.kubectl(&["-n", "default", "get", "pods", "-o", "name"])
    );
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "cronjob",
        "signals-lru",
        "--cascade=foreground",
    ]);
    drop(release);
    cluster.remove_stopped_pod_sandboxes();
    let _ = cluster.crictl_output(&["rmi", &image]);
}
