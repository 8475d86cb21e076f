//! The DaemonSet's pod run by the real kubelet v1.37.2 on containerd 2.3
//! (`kubelet::lab::daemonset::...`): `deploy/daemonset.yaml`'s pod template as a static pod,
//! with the image `scripts/image` built, pushed to the kubelet lab's registry
//! (`IMAGEKEEPER_KUBELET_IMAGE`, exported by `scripts/test`).
//!
//! What the test changes in the template, and why; everything else is as shipped:
//! - the image: the pushed build instead of the placeholder (same repository name);
//! - the `config` volume: a static pod cannot mount a ConfigMap, so it is a hostPath directory
//!   holding the manifest's own ConfigMap data, unchanged;
//! - no `serviceAccountName`: the kubelet refuses a static pod that names any API object,
//!   a ServiceAccount as a ConfigMap ("static pods may not reference serviceaccounts",
//!   `tryDecodeSinglePod` in kubelet's `pkg/kubelet/config/common.go`, the
//!   PreventStaticPodAPIReferences gate), and a static pod has no token to use anyway: the
//!   agent's cluster signals, on in the chart, find no credentials, say so once and run on
//!   the node's own knowledge;
//! - every hostPath's `path`: the lab's directories instead of the node's (`/run/containerd` is
//!   the lab containerd's socket directory, `/var/lib/kubelet/image_manager` the lab kubelet's,
//!   `/var/lib/imagekeeper` and `/run/imagekeeper` directories of the test);
//! - the runtime root's mount path: the lab containerd's root is mounted at its own path, as the
//!   manifest mounts `/var/lib/containerd` at that same path on a node (the agent statvfs()es
//!   the mountpoint ImageFsInfo reports, a host path).
//!
//! The rest is the kubelet's: the probes are its prober's, `NODE_NAME` and `HOST_IP` its
//! downward API (the node name and the node IP of the lab's network namespace), `$(HOST_IP)`
//! in the args its expansion, the volumes its mounts, the stop its grace period.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::super::{KubeletLab, kubelet_lab};
use super::{POD_START, image_id, reference};
use crate::deploy::{MANIFEST, RUNTIME_ROOT, manifest_text};
use crate::support;

/// The static pod's name; the kubelet names the pod `<name>-<node name>`.
const POD: &str = "imagekeeper";

/// The image `scripts/image` built, pushed to the kubelet lab's registry
/// (IMAGEKEEPER_KUBELET_IMAGE); the test fails without it.
fn pushed_image(test: &str) -> String {
    support::lab_var(
        test,
        "IMAGEKEEPER_KUBELET_IMAGE",
        "push the image scripts/image built to the kubelet lab's registry (as scripts/test \
         does) and export IMAGEKEEPER_KUBELET_IMAGE=<its reference>",
    )
}

/// The node paths of the manifest's hostPath volumes, in the lab.
struct LabNode {
    host_paths: Vec<(&'static str, PathBuf)>,
    config_dir: PathBuf,
}

/// `deploy/daemonset.yaml`'s pod template as a static Pod (see the module's list of changes),
/// and the ConfigMap's data written into `node.config_dir`.
fn static_pod_manifest(image: &str, node: &LabNode) -> String {
    let mut template = None;
    let mut config_data = None;
    for document in serde_yaml_ng::Deserializer::from_str(&manifest_text()) {
        let value: serde_yaml_ng::Value =
            serde::Deserialize::deserialize(document).expect("the manifest is YAML");
        match value["kind"].as_str() {
            Some("DaemonSet") => template = Some(value["spec"]["template"].clone()),
            Some("ConfigMap") => config_data = Some(value["data"].clone()),
            _ => {}
        }
    }
    let mut template = template.unwrap_or_else(|| panic!("{MANIFEST} has a DaemonSet"));
    let data = config_data.unwrap_or_else(|| panic!("{MANIFEST} has a ConfigMap"));
    for (name, content) in data.as_mapping().expect("ConfigMap data") {
        std::fs::write(
            node.config_dir.join(name.as_str().expect("a file name")),
            content.as_str().expect("file content"),
        )
        .expect("write the config file");
    }
    let spec = &mut template["spec"];
    // A static pod may name no ServiceAccount (see the module's list).
    spec.as_mapping_mut()
        .expect("a pod spec")
        .remove("serviceAccountName");
    let mut runtime_root = None;
    for volume in spec["volumes"]
        .as_sequence_mut()
        .expect("volumes")
        .iter_mut()
    {
        let name = volume["name"].as_str().expect("a volume name").to_owned();
        if volume.get("configMap").is_some() {
            let mapping = volume.as_mapping_mut().expect("a volume");
            mapping.remove("configMap");
            mapping.insert(
                "hostPath".into(),
                serde_yaml_ng::to_value(serde_json::json!({
                    "path": node.config_dir.display().to_string(),
                    "type": "Directory"
                }))
                .expect("a value"),
            );
            continue;
        }
        let Some(path) = volume["hostPath"]["path"].as_str().map(str::to_owned) else {
            continue;
        };
        let lab_path = node
            .host_paths
            .iter()
            .find(|(node_path, _)| *node_path == path)
            .unwrap_or_else(|| panic!("the test maps hostPath {path} (volume {name})"))
            .1
            .clone();
        if path == RUNTIME_ROOT {
            runtime_root = Some((name.clone(), lab_path.clone()));
        }
        volume["hostPath"]["path"] = lab_path.display().to_string().into();
    }
    let (root_volume, root_path) = runtime_root.expect("a hostPath of the runtime's root");
    let container = &mut spec["containers"][0];
    assert!(
        container["image"]
            .as_str()
            .is_some_and(|i| i.contains("/imagekeeper:"))
            && image.contains("/imagekeeper:"),
        "the manifest names a placeholder of the pushed image's repository"
    );
    container["image"] = image.into();
    for mount in container["volumeMounts"]
        .as_sequence_mut()
        .expect("volumeMounts")
        .iter_mut()
    {
        if mount["name"].as_str() == Some(root_volume.as_str()) {
            assert_eq!(mount["mountPath"].as_str(), Some(RUNTIME_ROOT));
            mount["mountPath"] = root_path.display().to_string().into();
        }
    }
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": POD,
            "namespace": "kube-system",
            "labels": serde_json::to_value(&template["metadata"]["labels"]).expect("labels"),
        },
        "spec": serde_json::to_value(&template["spec"]).expect("spec"),
    });
    serde_yaml_ng::to_string(&pod).expect("YAML")
}

/// The pod's entry in the kubelet's own `/pods` (its port, inside the namespace).
fn kubelet_pod(kl: &KubeletLab) -> Option<serde_json::Value> {
    let body = kl.curl_in_namespace(&format!("https://{}/pods", kl.env("KUBELET_LAB_PORT")));
    let pods: serde_json::Value = serde_json::from_str(&body).ok()?;
    let name = format!("{POD}-{}", kl.env("KUBELET_LAB_NODE_NAME"));
    pods["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == name.as_str())
        .cloned()
}

fn condition(pod: &serde_json::Value, kind: &str) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

/// `crictl exec CONTAINER /usr/local/bin/imagekeeper ARGS` (the image has no shell), run
/// inside the lab's namespace: containerd's streaming server listens on its loopback.
fn exec(kl: &KubeletLab, container: &str, args: &[&str]) -> String {
    let crictl = kl.env("KUBELET_LAB_CRICTL");
    let endpoint = kl.env("KUBELET_LAB_ENDPOINT");
    let mut all = vec![
        "exec",
        crictl.as_str(),
        "--runtime-endpoint",
        endpoint.as_str(),
        "exec",
        container,
        "/usr/local/bin/imagekeeper",
    ];
    all.extend(args);
    kl.script(&all)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the kubelet lab and the image: scripts/kubelet-lab up, IMAGEKEEPER_KUBELET_LAB_ENV, IMAGEKEEPER_KUBELET_IMAGE (scripts/test runs it)"]
async fn the_daemonset_pod_run_by_the_real_kubelet_passes_its_probes_gets_the_kubelets_mounts_and_downward_api_and_manages_the_labs_images_on_containerd_2_3()
 {
    const TEST: &str = "kubelet::lab::daemonset";
    let mut kl = kubelet_lab(TEST).await;
    let image = pushed_image(TEST);
    let started = std::time::Instant::now();
    // An image of the lab the agent must come to manage.
    let lab_image = reference(&kl, "data:1mb");
    kl.crictl(&["pull", &lab_image]);

    let dir = tempfile::Builder::new()
        .prefix("daemonset-")
        .tempdir_in(&kl.lab.dir)
        .expect("a temp dir in the lab");
    let containerd_dir = kl.lab.dir.join("containerd");
    let node = LabNode {
        host_paths: vec![
            (
                "/var/lib/imagekeeper",
                dir.path().join("var-lib-imagekeeper"),
            ),
            ("/run/imagekeeper", dir.path().join("run-imagekeeper")),
            ("/run/containerd", containerd_dir.clone()),
            (RUNTIME_ROOT, containerd_dir.join("root")),
            (
                "/var/lib/kubelet/image_manager",
                kl.root_dir().join("image_manager"),
            ),
        ],
        config_dir: dir.path().join("config"),
    };
    std::fs::create_dir_all(&node.config_dir).expect("mkdir config");
    assert!(
        kl.lab
            .imagefs_mountpoint
            .starts_with(&containerd_dir.join("root").display().to_string()),
        "ImageFsInfo's mountpoint {} lies under the runtime root's mount",
        kl.lab.imagefs_mountpoint
    );
    let manifest = static_pod_manifest(&image, &node);
    let path = PathBuf::from(kl.env("KUBELET_LAB_STATIC_POD_DIR")).join(format!("{POD}.yaml"));
    write_static_pod(&mut kl, &path, &manifest);

    // Ready in the kubelet's own view: its prober passed the startup and readiness probes.
    let node_name = kl.env("KUBELET_LAB_NODE_NAME");
    let pod = support::wait_for(
        "the kubelet's /pods to show the pod Ready",
        Duration::from_secs(180),
        || async { kubelet_pod(&kl).filter(|p| condition(p, "Ready").as_deref() == Some("True")) },
    )
    .await;
    println!(
        "Ready in the kubelet's /pods {:.1} s after the manifest was written",
        started.elapsed().as_secs_f64()
    );
    let status = &pod["status"]["containerStatuses"][0];
    assert_eq!(status["ready"], true, "{status}");
    assert_eq!(status["started"], true, "{status}");
    assert_eq!(status["restartCount"], 0, "{status}");
    assert_eq!(pod["spec"]["nodeName"], node_name.as_str(), "{pod}");
    // (The standalone kubelet's /pods leaves status.hostIP empty; HOST_IP is checked in the
    // container below.)
    let host_ip = kl.env("KUBELET_LAB_NODE_IP");
    let full_name = format!("kube-system/{POD}-{node_name}");
    for probe in ["Startup", "Readiness", "Liveness"] {
        // Liveness every 30 s: its first success may come that late.
        let (line, _) = kl
            .wait_for_log_line(
                &[
                    "\"Probe succeeded\"",
                    &format!("probeType=\"{probe}\""),
                    &format!("pod=\"{full_name}\""),
                ],
                0,
                Duration::from_secs(90),
            )
            .await;
        println!("{line}");
    }

    // The kubelet's container: its downward API values and its mounts (crictl inspect).
    let container = kl.running_container(POD, POD_START).await;
    let inspect: serde_json::Value =
        serde_json::from_str(&kl.crictl(&["inspect", "-o", "json", &container])).expect("JSON");
    let envs = inspect["info"]["config"]["envs"]
        .as_array()
        .expect("envs")
        .clone();
    let env = |key: &str| {
        envs.iter()
            .find(|e| e["key"] == key)
            .and_then(|e| e["value"].as_str())
            .map(str::to_owned)
    };
    assert_eq!(env("NODE_NAME").as_deref(), Some(node_name.as_str()));
    assert_eq!(env("HOST_IP").as_deref(), Some(host_ip.as_str()));
    let args: Vec<String> = inspect["info"]["config"]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("an arg").to_owned())
        .collect();
    assert!(
        args.contains(&format!("--metrics-address={host_ip}:9899")),
        "the kubelet expanded $(HOST_IP): {args:?}"
    );
    let mounts = inspect["status"]["mounts"].as_array().expect("mounts");
    for (node_path, lab_path) in &node.host_paths {
        let container_path = if *node_path == RUNTIME_ROOT {
            lab_path.display().to_string()
        } else {
            (*node_path).to_owned()
        };
        let mount = mounts
            .iter()
            .find(|m| m["containerPath"] == container_path.as_str())
            .unwrap_or_else(|| panic!("a mount at {container_path}: {mounts:?}"));
        assert_eq!(
            mount["hostPath"],
            lab_path.display().to_string().as_str(),
            "{mount}"
        );
    }
    for read_only in [
        "/run/containerd",
        "/var/lib/kubelet/image_manager",
        "/etc/imagekeeper",
    ] {
        let mount = mounts
            .iter()
            .find(|m| m["containerPath"] == read_only)
            .unwrap_or_else(|| panic!("a mount at {read_only}"));
        assert_eq!(mount["readonly"], true, "{mount}");
    }
    // The agent's start line names the node (NODE_NAME) and its metrics listen on HOST_IP.
    let logs = kl.crictl(&["logs", &container]);
    let stderr_logs =
        String::from_utf8_lossy(&kl.crictl_output(&["logs", &container]).stderr).into_owned();
    assert!(
        format!("{logs}{stderr_logs}").contains(&format!("\"node\":\"{node_name}\"")),
        "the start line names the node: {logs}{stderr_logs}"
    );
    let metrics = kl.curl_in_namespace(&format!("http://{host_ip}:9899/metrics"));
    assert!(metrics.contains("imagekeeper_image_records"), "{metrics}");

    // The agent manages the lab's images: its records hold the lab image pulled before it
    // started and its own image.
    let own_id = {
        let json: serde_json::Value =
            serde_json::from_str(&kl.crictl(&["inspecti", "-o", "json", &image])).expect("JSON");
        json["status"]["id"].as_str().expect("id").to_owned()
    };
    let lab_id = image_id(&kl, "data:1mb");
    let names = support::wait_for(
        "the agent's records to list the lab's images",
        Duration::from_secs(60),
        || async {
            let names = exec(
                &kl,
                &container,
                &[
                    "inspect",
                    "--db",
                    "/var/lib/imagekeeper/records.redb",
                    "list",
                    "-o",
                    "name",
                ],
            );
            (names.contains(&lab_id) && names.contains(&own_id)).then_some(names)
        },
    )
    .await;
    println!("the agent's records:\n{names}");

    // The kubelet stops it (the manifest gone): SIGTERM within the pod's grace, exit 0.
    std::fs::remove_file(&path).expect("remove the manifest");
    let label = format!("io.kubernetes.pod.name={POD}-{node_name}");
    let exit = support::wait_for(
        "the kubelet to stop the agent's container (crictl)",
        Duration::from_secs(90),
        || async {
            let out = kl.crictl(&["ps", "-a", "-q", "--state", "exited", "--label", &label]);
            let id = out.lines().next()?.to_owned();
            let json: serde_json::Value =
                serde_json::from_str(&kl.crictl(&["inspect", "-o", "json", &id])).ok()?;
            json["status"]["exitCode"].as_i64()
        },
    )
    .await;
    assert_eq!(exit, 0, "the agent exits 0 on the kubelet's SIGTERM");
    kl.pod_gone(POD, POD_START).await;
    kl.crictl(&["rmi", &image]);
    println!(
        "daemonset test: {:.0} s in all",
        started.elapsed().as_secs_f64()
    );
}

/// Writes the static pod manifest (hidden, then renamed: the kubelet reads whole files) and
/// registers it with the lab for removal.
fn write_static_pod(kl: &mut KubeletLab, path: &Path, manifest: &str) {
    let tmp = path.with_file_name(format!(".{POD}.yaml.tmp"));
    std::fs::write(&tmp, manifest).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
    kl.own_static_pod(path.to_owned());
}
