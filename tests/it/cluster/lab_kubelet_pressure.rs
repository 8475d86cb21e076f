//! Issue 55's init-container case under the real kubelet's own imagefs pressure, with cluster
//! signals on (`cluster::lab::kubelet_pressure`): the kubelet lab's control case
//! (`kubelet::lab::init_container::without_imagekeeper_...`) shows the kubelet alone removing
//! a pod's main image while the pod's init container runs (kubernetes issue 123631: the
//! kubelet counts an image in use only when a container of it exists, kubelet master
//! pkg/kubelet/images/image_gc_manager.go `detectImages`); here the same pod is bound through
//! the API server, imagekeeper's signals runtime-pin its main image, and the kubelet's
//! DeleteUnusedImages, which skips pinned images (`freeSpace`: `if image.pinned { continue }`),
//! removes the other unused image and spares the pod's. Read through the kubelet's log,
//! crictl and the pod's Events.

use std::path::PathBuf;
use std::time::Duration;

use super::{config, crictl_pull, init_container_pod, pod_phase, runtime_image};
use crate::cluster::{ClusterLab, cluster_lab};
use crate::support;

/// The kubelet under imagefs pressure while held: a drop-in (evict below 99 % free
/// `imagefs.available`, `imageMinimumGCAge` 1 s) and a kubelet restart; on drop the drop-in
/// is removed, the kubelet restarted, and the node waited for until its DiskPressure
/// condition and taint are gone (the later tests schedule pods), even when the test failed.
struct KubeletPressure<'a> {
    cluster: &'a ClusterLab,
    drop_in: PathBuf,
}

impl<'a> KubeletPressure<'a> {
    fn start(cluster: &'a ClusterLab) -> KubeletPressure<'a> {
        let drop_in = PathBuf::from(cluster.env("CLUSTER_LAB_KUBELET_CONFIG_DIR"))
            .join("70-imagefs-pressure.conf");
        std::fs::write(
            &drop_in,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{}",
                support::imagefs_pressure_fields()
            ),
        )
        .expect("write the kubelet's pressure drop-in");
        cluster.restart_kubelet();
        KubeletPressure { cluster, drop_in }
    }
}

impl Drop for KubeletPressure<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.drop_in);
        self.cluster.restart_kubelet();
        let node = format!("node/{}", self.cluster.node_name());
        // Polled (a cleanup, nothing asserted): the node lifecycle controller lifts the taint
        // once the new kubelet reports no pressure.
        for _ in 0..120 {
            let taints =
                self.cluster
                    .kubectl(&["get", &node, "-o", "jsonpath={.spec.taints[*].key}"]);
            if !taints.contains("disk-pressure") {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        eprintln!("the node's disk-pressure taint outlived the kubelet's pressure by 120 s");
    }
}

/// The image id crictl gives `image`.
fn image_id(cluster: &ClusterLab, image: &str) -> String {
    let out = cluster.crictl(&["inspecti", "-o", "json", image]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("crictl JSON");
    json["status"]["id"]
        .as_str()
        .expect("crictl inspecti gives the id")
        .to_owned()
}

/// A pod bound to the node (a critical one: the eviction manager never evicts it, as the
/// control case's static pod) whose init container runs until the test opens its gate, its
/// main image present and in no container; imagekeeper with signals on and its own GC off
/// (thresholds 100/99: only the kubelet removes images here). The agent runtime-pins the main
/// image once it has listed the pods bound to the node (within seconds, far less than an init
/// container's minute), then the kubelet restarts under imagefs pressure: its
/// DeleteUnusedImages removes the other unused image (its log's "Removing image to free
/// bytes") and not the pod's, and once the gate opens the main container starts with the
/// kubelet's "already present on machine".
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn with_cluster_signals_the_real_kubelets_imagefs_pressure_spares_a_bound_pods_main_image_while_its_init_container_runs()
 {
    let cluster = cluster_lab("cluster::lab::kubelet_pressure").await;
    let (main, unused) = (cluster.lab_image("data:5mb"), cluster.lab_image("data:1mb"));
    let init = cluster.lab_image("busybox:1.35");
    for image in [&main, &unused, &init] {
        crictl_pull(&cluster, image);
    }
    let unused_id = image_id(&cluster, &unused);
    let (pod, gate) = init_container_pod(&cluster, "pressure-init", &init, &main);
    let pod = pod.replacen(
        "  hostNetwork: true\n",
        "  hostNetwork: true\n  priorityClassName: system-node-critical\n",
        1,
    );
    cluster.kubectl_apply(&pod);
    let sets = ["clusterSignals.enabled=true".to_owned()];
    let release = cluster.install("imagekeeper", &config(100, 99, ""), &sets);
    let listed = release
        .wait_for_log_line(
            &["Listed the pods bound to this node"],
            Duration::from_secs(60),
        )
        .await;
    println!("{listed}");
    // The pin follows the listing at once (its detect), not at a later cycle: ten seconds.
    support::wait_for(
        &format!("{main} runtime-pinned (crictl inspecti)"),
        Duration::from_secs(10),
        || async {
            let pinned = runtime_image(&cluster, &main) == Some(true);
            if !pinned {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            pinned.then_some(())
        },
    )
    .await;
    let log = PathBuf::from(cluster.env("CLUSTER_LAB_KUBELET_LOG"));
    let from = std::fs::metadata(&log).map_or(0, |m| m.len());
    let pressure = KubeletPressure::start(&cluster);
    let removal = cluster
        .wait_for_kubelet_log_line(
            &["Removing image to free bytes", &unused_id],
            from,
            Duration::from_secs(120),
        )
        .await;
    println!("{removal}");
    assert_eq!(
        runtime_image(&cluster, &unused),
        None,
        "the kubelet's DeleteUnusedImages removed the unused image"
    );
    assert_eq!(
        runtime_image(&cluster, &main),
        Some(true),
        "{main}: spared by the kubelet, present and pinned as the CRI lists it"
    );
    assert_eq!(
        pod_phase(&cluster, "pressure-init"),
        "Pending",
        "the init container still runs"
    );
    drop(pressure);
    gate.open();
    cluster
        .wait_for_no_pull(
            "the pod's main container created (kubectl get events)",
            "pressure-init ",
            &main,
            Duration::from_secs(60),
        )
        .await;
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "pod",
        "pressure-init",
        "--wait=false",
    ]);
    drop(release);
    let _ = cluster.crictl_output(&["rmi", &main]);
}
