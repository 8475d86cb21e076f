//! Issue 55's control case beside the real kubelet, with no imagekeeper at all
//! (`kubelet::lab::init_container::...`): the kubelet alone removes a pod's main image while
//! the pod's init container runs (kubernetes issue 123631), so the main container pulls it
//! again. The kubelet's image manager counts an image in use only when a container of it
//! exists (kubelet master pkg/kubelet/images/image_gc_manager.go, `detectImages`: the images
//! of the runtime's containers), and a main container is created only after the init
//! containers end. The cluster lab's
//! `cluster::lab::with_cluster_signals_a_bound_pods_image_survives_gc_while_its_init_container_runs`
//! is the same pod with imagekeeper's cluster signals on: the image stays. Read through the
//! kubelet's log and crictl.

use std::time::Duration;

use super::super::{KubeletLab, kubelet_lab};
use super::{POD_START, image_id, reference, remove_all_images_but_the_sandbox};
use crate::support;

/// The ids of the pod's containers named `name` (crictl), in `state` (any state when empty).
fn containers(kl: &KubeletLab, name: &str, state: &str) -> String {
    let pod_label = format!(
        "io.kubernetes.pod.name=init-gated-{}",
        kl.env("KUBELET_LAB_NODE_NAME")
    );
    let mut args = vec!["ps", "-q", "--name", name, "--label", &pod_label];
    if state.is_empty() {
        args.push("-a");
    } else {
        args.extend(["--state", state]);
    }
    kl.crictl(&args)
}

/// A static pod (critical: the eviction manager never evicts it) whose init container waits
/// for a gate file the test creates, its main image present and in no container. Under
/// `imagefs.available` pressure (a drop-in: evict below 99 % free, `imageMinimumGCAge` 1 s)
/// the eviction manager's DeleteUnusedImages removes the main image (the init container's
/// stays: its container runs); once the pressure is gone and the gate open, the main
/// container runs, the image pulled back (crictl lists it again).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV (scripts/test runs it)"]
async fn without_imagekeeper_the_real_kubelet_removes_a_pods_main_image_while_its_init_container_runs()
 {
    let mut kl = kubelet_lab("kubelet::lab::init_container").await;
    remove_all_images_but_the_sandbox(&kl);
    let (init, main) = (reference(&kl, "busybox:1.35"), reference(&kl, "data:5mb"));
    kl.crictl(&["pull", &init]);
    kl.crictl(&["pull", &main]);
    let (init_id, main_id) = (image_id(&kl, "busybox:1.35"), image_id(&kl, "data:5mb"));
    let gate = kl.lab.dir.join("gates").join("init-gated");
    std::fs::create_dir_all(&gate).expect("the gate's dir");
    let _ = std::fs::remove_file(gate.join("open"));
    let manifest = support::init_gated_pod_manifest("init-gated", &gate, &init, &main);
    kl.add_static_pod_manifest("init-gated", &manifest);
    support::wait_for(
        "the pod's init container running (crictl ps)",
        POD_START,
        || async {
            let running = !containers(&kl, "wait", "running").trim().is_empty();
            if !running {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            running.then_some(())
        },
    )
    .await;
    assert!(
        containers(&kl, "main", "").trim().is_empty(),
        "no main container before the init container ends"
    );
    // The pressure: the eviction manager (every 10 s) calls DeleteUnusedImages.
    let drop_in = kl.write_imagefs_pressure_drop_in();
    kl.restart();
    let (removal, _) = kl
        .wait_for_log_line(
            &["Removing image to free bytes", &main_id],
            0,
            Duration::from_secs(120),
        )
        .await;
    println!("{removal}");
    let listed = kl.crictl_image_ids();
    assert!(
        !listed.contains(&main_id),
        "the kubelet removed the main image while the init container runs: {listed:?}"
    );
    assert!(
        listed.contains(&init_id),
        "the running init container's image stays: {listed:?}"
    );
    assert!(
        !containers(&kl, "wait", "running").trim().is_empty(),
        "the init container still runs (a static pod is not evicted)"
    );
    // The pressure gone and the gate open: the main container needs the image again.
    kl.remove_drop_in(&drop_in);
    kl.restart();
    std::fs::write(gate.join("open"), b"").expect("open the gate");
    support::wait_for(
        "the main image pulled back and the main container created (crictl)",
        POD_START,
        || async {
            let back = kl.crictl_image_ids().contains(&main_id)
                && !containers(&kl, "main", "").trim().is_empty();
            if !back {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            back.then_some(())
        },
    )
    .await;
}
