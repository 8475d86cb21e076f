//! The chart on the real cluster (`cluster::lab::...`, one at a time: `.config/nextest.toml`'s
//! `cluster-lab` group): `helm install` with the image `scripts/image` built, the DaemonSet's pod
//! Ready under the kubelet's own prober, the NOTES' `kubectl exec` commands, `helm uninstall`;
//! the agent's Node Events read back through the API server; the operator's loop (`helm
//! upgrade` of the config and the warm set reaching the running agent); the static
//! `deploy/daemonset.yaml` applied with `kubectl apply`; the cluster signals (a bound pod's
//! image kept and runtime-pinned while its init container runs).
//!
//! What the cluster cannot show here, and stays with the tests that stand in for it: a node on
//! cgroup v2 or another runtime (the lab's containerd 2.3 on this machine's cgroup v1); a pod
//! network (every lab pod uses the host network, `../shared/README.md`); more than one node.

use std::time::{Duration, Instant};

use super::{ClusterLab, NAMESPACE, Release, cluster_lab};
use crate::support;

#[path = "lab_cronjob_pressure.rs"]
mod cronjob_pressure;
#[path = "lab_keep_sets.rs"]
mod keep_sets;
#[path = "lab_kubelet_pressure.rs"]
mod kubelet_pressure;
#[path = "lab_signals.rs"]
mod signals;

/// The chart's default config, with GC left to the test's thresholds.
fn config(high: u32, low: u32, extra: &str) -> String {
    format!(
        "imageGCHighThresholdPercent = {high}\nimageGCLowThresholdPercent = {low}\n\
         imageMinimumGCAge = \"0s\"\nimageMaximumGCAge = \"0s\"\n{extra}"
    )
}

/// Every process on the machine whose command line runs the image's binary.
fn agent_processes() -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.starts_with("/usr/local/bin/imagekeeper ") {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

/// The containerd images (namespace k8s.io) carrying one of imagekeeper's labels.
fn images_with_imagekeeper_labels(cluster: &ClusterLab) -> Vec<String> {
    let out = cluster.run_in_namespace(
        &cluster.env("CLUSTER_LAB_CTR"),
        &[
            "--address",
            &cluster.env("CLUSTER_LAB_CONTAINERD_ADDRESS"),
            "-n",
            "k8s.io",
            "images",
            "ls",
        ],
    );
    assert!(out.status.success(), "ctr images ls: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.contains("io.imagekeeper."))
        .map(str::to_owned)
        .collect()
}

/// The pod's sandboxes and containers as the runtime lists them (any state).
fn runtime_objects_of(cluster: &ClusterLab, namespace: &str, release: &str) -> String {
    let label = format!("io.kubernetes.pod.namespace={namespace}");
    let pods = cluster.crictl(&["pods", "--label", &label, "-o", "json"]);
    let pods: serde_json::Value = serde_json::from_str(&pods).expect("crictl JSON");
    let mut found = String::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        if pod["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with(release))
        {
            found.push_str(&format!(
                "sandbox {} {}\n",
                pod["metadata"]["name"], pod["state"]
            ));
        }
    }
    let containers = cluster.crictl(&["ps", "-a", "--name", "^imagekeeper$", "-q"]);
    for id in containers.lines() {
        found.push_str(&format!("container {id}\n"));
    }
    found
}

#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn helm_install_runs_the_agent_ready_under_the_kubelets_probes_its_notes_commands_work_and_uninstall_leaves_the_node_as_it_was()
 {
    let cluster = cluster_lab("cluster::lab::install").await;
    assert!(
        agent_processes().is_empty(),
        "an agent runs already: {:?}",
        agent_processes()
    );
    // An earlier test's agent may have left its runtime labels (an uninstall keeps them, as
    // on a node): this test starts from a node without any, as its own end leaves it.
    let endpoint = cluster.env("CLUSTER_LAB_CRI_ENDPOINT");
    let out = support::bin::run(&[
        "remove-runtime-pins",
        "--container-runtime-endpoint",
        &endpoint,
    ]);
    assert!(
        out.status.success(),
        "remove-runtime-pins at the start: {out:?}"
    );
    let labelled_before = images_with_imagekeeper_labels(&cluster);

    // With the kubelet's config mounted (events.kubeletConfig), the NOTES print the doctor's
    // command; without it they say how to get it (a default install's doctor command failed
    // in the pod: "cannot read the kubelet config: /var/lib/kubelet/config.yaml", exit 2).
    let kubelet_config = cluster.env("CLUSTER_LAB_KUBELET_CONFIG");
    let release = cluster.install(
        "imagekeeper",
        &config(80, 70, ""),
        &[
            "events.enabled=true".to_owned(),
            format!("events.kubeletConfig={kubelet_config}"),
        ],
    );
    println!(
        "helm install to the pod Ready: {:?}",
        release.installed_at.elapsed()
    );

    // Ready under the kubelet's own prober: the condition the kubelet sets from the
    // readinessProbe, the startup probe passed, no restart.
    let pod = release.pod();
    let status = &pod["status"];
    let ready = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Ready")
        .expect("a Ready condition");
    assert_eq!(ready["status"], "True", "{pod:#}");
    let container = &status["containerStatuses"][0];
    assert_eq!(container["ready"], true, "{container:#}");
    assert_eq!(container["started"], true, "{container:#}");
    assert_eq!(container["restartCount"], 0, "{container:#}");
    assert_eq!(pod["spec"]["nodeName"], cluster.node_name().as_str());
    // The node's address is the namespace's, and the agent's metrics listen there.
    let node_ip = cluster.env("CLUSTER_LAB_NODE_IP");
    assert_eq!(status["hostIP"], node_ip.as_str(), "{pod:#}");
    let metrics = cluster.curl(&format!("http://{node_ip}:9899/metrics"));
    assert!(metrics.contains("imagekeeper_build_info"), "{metrics}");

    // The NOTES' commands, as printed, run against the release and print what the docs say.
    let notes = release.install_output.clone();
    let commands: Vec<&str> = notes
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("kubectl "))
        .collect();
    assert_eq!(commands.len(), 2, "the NOTES name two commands: {notes}");
    let mut printed = Vec::new();
    for command in &commands {
        let args: Vec<&str> = command.split_whitespace().skip(1).collect();
        let out = cluster.kubectl_output(&args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        println!(
            "$ {command}\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        printed.push((command.to_owned(), out.status.code(), stdout));
    }
    // doctor (docs/src/operators/beside-the-kubelet.md): the kubelet config it read, one line
    // per check, the count; the lab kubelet has the kubelet's defaults, above 80/70.
    let (command, code, out) = &printed[0];
    assert!(command.contains("imagekeeper doctor"), "{command}");
    assert!(
        out.contains(&format!("kubelet config: {kubelet_config}")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok") && l.contains("image-gc-thresholds")),
        "{out}"
    );
    assert!(out.contains(" 0 conflict(s)"), "{out}");
    assert_eq!(*code, Some(0), "{out}");
    // gc --dry-run (docs/src/operators/commands.md): the plan, changing nothing.
    let (command, code, out) = &printed[1];
    assert!(command.contains("gc --dry-run"), "{command}");
    assert_eq!(*code, Some(0), "{out}");
    assert!(out.starts_with("IMAGE ID"), "{out}");
    assert!(out.contains("would remove 0 image(s)"), "{out}");

    // The agent logged its start with the node's name from the downward API.
    release
        .wait_for_log_line(
            &["imagekeeper agent started", &cluster.node_name()],
            Duration::from_secs(10),
        )
        .await;

    // A pin made through the agent in the pod: the runtime carries it (containerd 2.3), so the
    // labels the uninstall notes are about exist before the uninstall.
    let (repository, tag) = cluster.image();
    let pinned = format!("{repository}:{tag}");
    release.imagekeeper_ok(&["pin", &pinned, "--reason", "cluster lab"]);
    // A cycle through the agent returns after its label writes.
    release.imagekeeper_ok(&["gc"]);
    let labelled_by_the_agent = images_with_imagekeeper_labels(&cluster);
    assert!(
        labelled_by_the_agent.len() > labelled_before.len()
            && labelled_by_the_agent.iter().any(|l| l.contains(&pinned)),
        "the pin through the agent is carried by the runtime: {labelled_by_the_agent:#?}"
    );

    // helm uninstall: no pod, no container or sandbox of it, no process; the runtime's labels
    // stay (a restarting agent must not drop them) until the NOTES' command removes them.
    let name = release.name.clone();
    drop(release);
    let pods = cluster.kubectl(&["-n", NAMESPACE, "get", "pods", "-o", "name"]);
    assert!(!pods.contains(&name), "{pods}");
    // The kubelet removes a deleted pod's containers and sandbox at its container GC (every
    // minute).
    support::wait_for(
        "the runtime to hold no sandbox or container of the uninstalled pod (crictl)",
        Duration::from_secs(150),
        || async {
            let left = runtime_objects_of(&cluster, NAMESPACE, &name);
            if !left.is_empty() {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            left.is_empty().then_some(())
        },
    )
    .await;
    assert!(agent_processes().is_empty(), "{:?}", agent_processes());
    assert_eq!(
        images_with_imagekeeper_labels(&cluster),
        labelled_by_the_agent,
        "helm uninstall changes no runtime label"
    );
    // The NOTES' uninstall command, as printed, with this build's binary: the node is as it was.
    let remove = notes
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("imagekeeper remove-runtime-pins"))
        .unwrap_or_else(|| panic!("the NOTES name remove-runtime-pins: {notes}"));
    let args: Vec<&str> = remove.split_whitespace().skip(1).collect();
    let out = support::bin::run(&args);
    assert!(
        out.status.success(),
        "$ {remove}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        images_with_imagekeeper_labels(&cluster),
        labelled_before,
        "after the NOTES' remove-runtime-pins, no image carries a label of imagekeeper's"
    );
}

/// The Events of imagekeeper's on the node with this reason, as (note, series count).
fn events_with_reason(cluster: &ClusterLab, reason: &str) -> Vec<(String, String, u64)> {
    cluster
        .imagekeeper_node_events()
        .iter()
        .filter(|e| e["reason"] == reason)
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_owned(),
                e["note"].as_str().unwrap_or("").to_owned(),
                e["series"]["count"].as_u64().unwrap_or(1),
            )
        })
        .collect()
}

/// Waits (at most 90 s) for an Event of imagekeeper's on the node with this reason whose note
/// has `note_part`; its (note, series count), or `None` at the deadline.
async fn try_wait_for_event(
    cluster: &ClusterLab,
    reason: &str,
    note_part: &str,
) -> Option<(String, u64)> {
    // Polled: the API server's Event list is the observable (once a second).
    support::try_wait_for(Duration::from_secs(90), || async {
        let found = events_with_reason(cluster, reason)
            .into_iter()
            .find(|(_, note, _)| note.contains(note_part))
            .map(|(type_, note, count)| {
                assert_eq!(
                    type_,
                    if reason == "ImageGarbageCollected" {
                        "Normal"
                    } else {
                        "Warning"
                    }
                );
                (note, count)
            });
        if found.is_none() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        found
    })
    .await
}

async fn wait_for_event(cluster: &ClusterLab, reason: &str, note_part: &str) -> (String, u64) {
    try_wait_for_event(cluster, reason, note_part)
        .await
        .unwrap_or_else(|| {
            panic!(
                "timed out after 90s waiting for a {reason} Event whose note has {note_part:?} \
                 (kubectl get events)"
            )
        })
}

/// Removes every image of the node but the agent's and the sandbox's (crictl), and first the
/// stopped pods' sandboxes, whose exited containers would keep an image in use.
fn only_the_agent_and_sandbox_images(cluster: &ClusterLab) {
    cluster.remove_stopped_pod_sandboxes();
    let (repository, tag) = cluster.image();
    let keep = [
        format!("{repository}:{tag}"),
        cluster.env("CLUSTER_LAB_SANDBOX_IMAGE"),
    ];
    let listed: serde_json::Value =
        serde_json::from_str(&cluster.crictl(&["images", "-o", "json"])).expect("crictl JSON");
    for image in listed["images"].as_array().into_iter().flatten() {
        let tags: Vec<&str> = image["repoTags"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str())
            .collect();
        if tags.iter().any(|t| keep.iter().any(|k| k == t)) {
            continue;
        }
        let id = image["id"].as_str().expect("an image id");
        println!("removing {tags:?} ({id}), left by an earlier test");
        cluster.crictl(&["rmi", id]);
    }
}

fn crictl_pull(cluster: &ClusterLab, image: &str) {
    cluster.crictl(&["pull", image]);
}

fn crictl_image_size(cluster: &ClusterLab, image: &str) -> u64 {
    let out = cluster.crictl(&["inspecti", "-o", "json", image]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("crictl JSON");
    crictl_size(&json["status"]["size"])
}

/// An image's size as crictl's JSON gives it (a string of digits, or a number).
fn crictl_size(size: &serde_json::Value) -> u64 {
    size.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| size.as_u64())
        .expect("an image size")
}

#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn the_agents_node_events_reach_the_api_server_with_the_documented_reason_note_and_series_and_a_narrower_role_is_refused()
 {
    let cluster = cluster_lab("cluster::lab::events").await;
    cluster.delete_imagekeeper_node_events();
    // A warm set whose one entry cannot fit (its declared size is far above the lab's 512 MiB
    // image filesystem). A name no test pulls: the node's history (the chart's database
    // outlives a release) knows the size of an image that was here, and the plan takes that
    // size over the declared one.
    let warm_image = cluster.lab_image("warm:never-pulled");
    let warm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: imagekeeper-warm-events, namespace: {NAMESPACE}}}\n\
         data:\n  big.yaml: |\n    warm:\n      - image: {warm_image}\n        size: 100Gi\n"
    );
    cluster.kubectl_apply(&warm);
    let kubelet_config = cluster.env("CLUSTER_LAB_KUBELET_CONFIG");
    let common = [
        "events.enabled=true".to_owned(),
        format!("events.kubeletConfig={kubelet_config}"),
        "warmSet.configMap=imagekeeper-warm-events".to_owned(),
        // The KeepSets' role grants Events too (a KeepSet's failures): off, so that narrowing
        // the events role below is what the API server judges.
        "keepSets.enabled=false".to_owned(),
    ];

    // 1. At start, with imagekeeper's thresholds above the kubelet's (its defaults, 85/80):
    //    the doctor's conflict, and the warm image that does not fit.
    let release = cluster.install("imagekeeper", &config(90, 85, ""), &common);
    let (conflict, count) =
        wait_for_event(&cluster, "KubeletConfigConflict", "image-gc-thresholds").await;
    println!("KubeletConfigConflict: {conflict} (count {count})");
    assert!(
        conflict.starts_with("image-gc-thresholds: the kubelet's image GC thresholds 85/80 are at or below imagekeeper's 90/85")
            && conflict.contains(" Fix: set imagekeeper's --image-gc-high-threshold below 85"),
        "{conflict}"
    );
    let (warm_note, count) = wait_for_event(&cluster, "WarmImageDoesNotFit", &warm_image).await;
    println!("WarmImageDoesNotFit: {warm_note} (count {count})");
    assert!(
        warm_note.starts_with(&format!(
            "Warm image {warm_image} is not pulled: needs 100.0 GiB"
        )),
        "{warm_note}"
    );

    // 2. A GC cycle that removes images, then GC failing to free enough: two unused images,
    //    thresholds 1/0 (nothing can take the image filesystem to 0 %), a GC every 5 s. A new
    //    pod template (the extra arguments) makes the DaemonSet start the agent afresh.
    let unused = [cluster.lab_image("data:5mb"), cluster.lab_image("data:1mb")];
    // Exactly these two unused: whatever an earlier test left on the node goes first (else
    // the cycle removes it too, and its Event says so).
    only_the_agent_and_sandbox_images(&cluster);
    for image in &unused {
        crictl_pull(&cluster, image);
    }
    let sizes: u64 = unused.iter().map(|i| crictl_image_size(&cluster, i)).sum();
    let mut sets = common.to_vec();
    sets.push("extraArgs={--gc-period=5s}".to_owned());
    release.upgrade(Some(&config(1, 0, "")), &sets);
    release.wait_ready(Duration::from_secs(120));
    let removed_both =
        try_wait_for_event(&cluster, "ImageGarbageCollected", "Removed 2 images").await;
    let Some((removed, count)) = removed_both else {
        // What kept an image: the agent's own account of each, its log, the node's Events.
        let explain = release.imagekeeper(&["inspect", "explain"]);
        println!(
            "inspect explain:\n{}{}",
            String::from_utf8_lossy(&explain.stdout),
            String::from_utf8_lossy(&explain.stderr)
        );
        let pins = release.imagekeeper(&["pins"]);
        println!("pins:\n{}", String::from_utf8_lossy(&pins.stdout));
        println!("crictl images:\n{}", cluster.crictl(&["images"]));
        println!("agent log:\n{}", release.logs());
        panic!(
            "no ImageGarbageCollected Event removing both {unused:?}: {:#?}",
            events_with_reason(&cluster, "ImageGarbageCollected")
        );
    };
    println!("ImageGarbageCollected: {removed} (count {count})");
    assert!(
        removed.starts_with(&format!("Removed 2 images, freed {sizes} bytes")),
        "{removed} (crictl sizes {sizes})"
    );
    let (failed, _) = wait_for_event(
        &cluster,
        "FreeDiskSpaceFailed",
        &format!("(freed {sizes} bytes)"),
    )
    .await;
    assert!(
        failed.starts_with("Insufficient free disk space on the node's image filesystem ("),
        "{failed}"
    );
    // The next cycles free nothing: one new Event with that message (not a count on the first
    // one's note), published at every failed cycle as the kubelet's image GC manager does
    // (image_gc_manager.go GarbageCollect), so one series whose count grows.
    wait_for_event(&cluster, "FreeDiskSpaceFailed", "(freed 0 bytes)").await;
    tokio::time::sleep(Duration::from_secs(12)).await; // two more GC periods of 5 s
    let failures = events_with_reason(&cluster, "FreeDiskSpaceFailed");
    println!("FreeDiskSpaceFailed: {failures:#?}");
    let with_freed = failures
        .iter()
        .filter(|(_, note, _)| note.contains(&format!("(freed {sizes} bytes)")))
        .count();
    let with_none: Vec<_> = failures
        .iter()
        .filter(|(_, note, _)| note.contains("(freed 0 bytes)"))
        .collect();
    assert_eq!(with_freed, 1, "{failures:#?}");
    assert_eq!(with_none.len(), 1, "{failures:#?}");
    assert!(
        with_none[0].2 >= 2,
        "one series counted at every failed cycle: {failures:#?}"
    );
    // From the second failed cycle in a row, kubelet.go StartGarbageCollection's ImageGCFailed
    // with the same text.
    let repeated = events_with_reason(&cluster, "ImageGCFailed");
    assert!(
        repeated.iter().any(|(_, note, _)| note == &with_none[0].1),
        "ImageGCFailed with FreeDiskSpaceFailed's text: {repeated:#?}"
    );
    let describe = cluster.kubectl(&["describe", "node", &cluster.node_name()]);
    let events_section = describe
        .split("\nEvents:")
        .nth(1)
        .expect("kubectl describe node has an Events section");
    println!("kubectl describe node ... Events:{events_section}");
    assert!(
        events_section.contains("ImageGarbageCollected"),
        "{events_section}"
    );

    // 3. RBAC: with the chart's role narrowed to patch alone (no create), the next Event is
    //    refused by the API server; the agent logs it once and goes on.
    let role = format!("{}-events", release.fullname());
    cluster.kubectl(&[
        "patch",
        "clusterrole",
        &role,
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/rules/0/verbs","value":["patch"]}]"#,
    ]);
    let pulled = cluster.lab_image("data:20mb");
    crictl_pull(&cluster, &pulled);
    let refused = release
        .wait_for_log_line(
            &["Cannot publish a Node Event", "ImageGarbageCollected"],
            Duration::from_secs(60),
        )
        .await;
    println!("{refused}");
    assert!(refused.contains("forbidden"), "{refused}");
    tokio::time::sleep(Duration::from_secs(12)).await; // two more GC periods
    let logs = release.logs();
    let refusals = Release::lines_with(
        &logs,
        &["Cannot publish a Node Event", "ImageGarbageCollected"],
    );
    assert_eq!(refusals.len(), 1, "logged once: {logs}");
    assert_eq!(
        events_with_reason(&cluster, "ImageGarbageCollected").len(),
        1,
        "the refused Event is not in the API"
    );
    drop(release);
    cluster.kubectl(&[
        "-n",
        NAMESPACE,
        "delete",
        "configmap",
        "imagekeeper-warm-events",
    ]);
}

/// The agent's metric `name` (a gauge without labels), read on the node's address.
fn gauge(cluster: &ClusterLab, name: &str) -> f64 {
    let metrics = cluster.curl(&format!(
        "http://{}:9899/metrics",
        cluster.env("CLUSTER_LAB_NODE_IP")
    ));
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn helm_upgrade_of_the_config_and_the_warm_set_reaches_the_running_agent_without_a_restart_and_a_bad_config_is_refused()
 {
    let cluster = cluster_lab("cluster::lab::operator").await;
    let warm_map = |images: &[String]| {
        let entries: String = images
            .iter()
            .map(|i| format!("      - image: {i}\n"))
            .collect();
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: imagekeeper-warm-loop, namespace: {NAMESPACE}}}\n\
             data:\n  set.yaml: |\n    warm:\n{entries}"
        )
    };
    let first = cluster.lab_image("user:uid");
    let second = cluster.lab_image("user:name");
    for image in [&first, &second] {
        let _ = cluster.crictl_output(&["rmi", image]);
    }
    cluster.kubectl_apply(&warm_map(std::slice::from_ref(&first)));
    let release = cluster.install(
        "imagekeeper",
        &config(80, 70, ""),
        &["warmSet.configMap=imagekeeper-warm-loop".to_owned()],
    );
    let pod_uid = release.pod()["metadata"]["uid"].clone();
    assert_eq!(
        gauge(&cluster, "imagekeeper_image_gc_high_threshold_percent"),
        80.0
    );
    // The warm set's image is pulled by the agent.
    cluster
        .wait_for_image(&first, Duration::from_secs(60))
        .await;

    // helm upgrade of the config, and the operator's edit of the warm set, at once.
    let changed = Instant::now();
    release.upgrade(Some(&config(75, 65, "")), &[]);
    cluster.kubectl_apply(&warm_map(&[first.clone(), second.clone()]));
    let reloaded = release
        .wait_for_log_line(
            &["Reloaded configuration", "imageGCHighThresholdPercent"],
            Duration::from_secs(150),
        )
        .await;
    let config_took = changed.elapsed();
    println!("config change reached the agent after {config_took:?}: {reloaded}");
    assert_eq!(
        gauge(&cluster, "imagekeeper_image_gc_high_threshold_percent"),
        75.0
    );
    assert_eq!(
        gauge(&cluster, "imagekeeper_image_gc_low_threshold_percent"),
        65.0
    );
    cluster
        .wait_for_image(&second, Duration::from_secs(150))
        .await;
    println!(
        "warm set change pulled {second} after {:?}",
        changed.elapsed()
    );
    // Without a restart: the same pod, its container never restarted.
    let pod = release.pod();
    assert_eq!(pod["metadata"]["uid"], pod_uid);
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);

    // A bad config (low above high) is refused, its message in the log, the settings kept.
    let bad = Instant::now();
    release.upgrade(Some(&config(60, 70, "")), &[]);
    let refused = release
        .wait_for_log_line(
            &["Reloading the configuration failed; the running configuration is kept"],
            Duration::from_secs(150),
        )
        .await;
    println!("bad config refused after {:?}: {refused}", bad.elapsed());
    assert!(
        refused.contains("invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 70 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 60"),
        "{refused}"
    );
    assert_eq!(
        gauge(&cluster, "imagekeeper_image_gc_high_threshold_percent"),
        75.0
    );
    assert_eq!(
        gauge(&cluster, "imagekeeper_image_gc_low_threshold_percent"),
        65.0
    );
    let pod = release.pod();
    assert_eq!(pod["metadata"]["uid"], pod_uid);
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    drop(release);
    cluster.kubectl(&[
        "-n",
        NAMESPACE,
        "delete",
        "configmap",
        "imagekeeper-warm-loop",
    ]);
    for image in [&first, &second] {
        let _ = cluster.crictl_output(&["rmi", image]);
    }
}

#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn the_static_daemonset_yaml_applied_with_kubectl_runs_ready_the_same_way() {
    let cluster = cluster_lab("cluster::lab::static").await;
    // The manifest as shipped, with the node's paths and the image set as an operator would
    // (the runtime socket's directory and root, the kubelet's root, the sandbox image).
    let manifest = crate::deploy::manifest_text();
    let socket_dir = cluster.env("CLUSTER_LAB_CONTAINERD_SOCKET_DIR");
    let root = cluster.env("CLUSTER_LAB_CONTAINERD_ROOT");
    let kubelet_root = cluster.env("CLUSTER_LAB_KUBELET_ROOT_DIR");
    let (repository, tag) = cluster.image();
    let edits = [
        (
            "image: registry.example/imagekeeper:0.1.0".to_owned(),
            format!("image: {repository}:{tag}\n          imagePullPolicy: IfNotPresent"),
        ),
        (
            "unix:///run/containerd/containerd.sock".to_owned(),
            format!("unix://{socket_dir}/containerd.sock"),
        ),
        ("/run/containerd".to_owned(), socket_dir.clone()),
        ("/var/lib/containerd".to_owned(), root.clone()),
        ("/var/lib/kubelet".to_owned(), kubelet_root.clone()),
        (
            "registry.k8s.io/pause:3.10".to_owned(),
            cluster.env("CLUSTER_LAB_SANDBOX_IMAGE"),
        ),
    ];
    let mut text = manifest.clone();
    for (from, to) in &edits {
        assert!(
            text.contains(from.as_str()),
            "{} has no {from}",
            crate::deploy::MANIFEST
        );
        text = text.replace(from.as_str(), to);
    }
    cluster.kubectl_apply(&text);
    let out = cluster.kubectl_output(&[
        "-n",
        NAMESPACE,
        "rollout",
        "status",
        "ds/imagekeeper",
        "--timeout=180s",
    ]);
    let pods = cluster.kubectl_json(&[
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=imagekeeper",
    ]);
    let deleted = cluster.kubectl_delete(&text);
    assert!(out.status.success(), "{out:?}\n{pods:#}");
    let pod = &pods["items"][0];
    assert_eq!(
        pod["status"]["containerStatuses"][0]["ready"], true,
        "{pod:#}"
    );
    assert_eq!(
        pod["status"]["containerStatuses"][0]["restartCount"], 0,
        "{pod:#}"
    );
    assert!(
        deleted.contains("daemonset.apps \"imagekeeper\" deleted"),
        "{deleted}"
    );
}

/// Waits until crictl says `want` of `image` (`Some(pinned)`, or `None`: not listed), polling
/// every second; `what` names the wait in its failure.
async fn wait_for_runtime_image(
    cluster: &ClusterLab,
    image: &str,
    want: Option<bool>,
    what: &str,
    deadline: Duration,
) {
    support::wait_for(what, deadline, || async {
        let done = runtime_image(cluster, image) == want;
        if !done {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        done.then_some(())
    })
    .await;
}

/// Whether the runtime lists `image` (crictl), and whether the CRI says it is pinned.
fn runtime_image(cluster: &ClusterLab, image: &str) -> Option<bool> {
    let out = cluster.crictl_output(&["inspecti", "-o", "json", image]);
    if !out.status.success() {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("crictl JSON");
    Some(json["status"]["pinned"].as_bool().unwrap_or(false))
}

/// The gate of an [`init_container_pod`]'s init container: a directory of the lab's, mounted
/// into the container (hostPath); the init container runs until the test opens it.
struct InitGate {
    dir: std::path::PathBuf,
}

impl InitGate {
    /// Lets the init container end (within its 1-s poll).
    fn open(&self) {
        std::fs::write(self.dir.join("open"), b"").expect("open the init container's gate");
    }
}

/// A pod `name` in `default`, on the host network, whose init container (`init`) runs until
/// the test opens its gate, before its main container (`main`) runs `true`: the main image is
/// named by a pod bound to the node and used by no container while the init container runs,
/// for as long as the test needs, not for a time that a loaded machine may outlast.
fn init_container_pod(
    cluster: &ClusterLab,
    name: &str,
    init: &str,
    main: &str,
) -> (String, InitGate) {
    let lab_dir = std::path::PathBuf::from(cluster.env("CLUSTER_LAB_LOG_DIR"));
    let dir = lab_dir
        .parent()
        .expect("the lab's log dir is in the lab's dir")
        .join("gates")
        .join(name);
    std::fs::create_dir_all(&dir).expect("the gate's dir");
    let _ = std::fs::remove_file(dir.join("open"));
    let manifest = crate::support::init_gated_pod_manifest(name, &dir, init, main);
    (manifest, InitGate { dir })
}

/// The phase of pod `name` in `default` (kubectl).
fn pod_phase(cluster: &ClusterLab, name: &str) -> String {
    cluster
        .kubectl(&[
            "-n",
            "default",
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.status.phase}",
        ])
        .trim()
        .to_owned()
}

/// Issue 55: a pod bound to the node whose init container runs until the test lets it end, its main image
/// present and in no container yet. With `clusterSignals.enabled` and GC at 1/0 every 5 s, the
/// agent removes an unused image and keeps the pod's (runtime-pinned, as the CRI lists it),
/// and the pod's main container then starts with the kubelet's "already present on machine".
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn with_cluster_signals_a_bound_pods_image_survives_gc_while_its_init_container_runs() {
    let cluster = cluster_lab("cluster::lab::cluster_signals").await;
    let (main, unused) = (cluster.lab_image("data:5mb"), cluster.lab_image("data:1mb"));
    let init = cluster.lab_image("busybox:1.35");
    for image in [&main, &unused, &init] {
        crictl_pull(&cluster, image);
    }
    let (pod, gate) = init_container_pod(&cluster, "signals-init", &init, &main);
    cluster.kubectl_apply(&pod);
    let sets = [
        "clusterSignals.enabled=true".to_owned(),
        "extraArgs={--gc-period=5s}".to_owned(),
    ];
    let release = cluster.install("imagekeeper", &config(1, 0, ""), &sets);
    let listed = release
        .wait_for_log_line(
            &["Listed the pods bound to this node"],
            Duration::from_secs(60),
        )
        .await;
    println!("{listed}");
    // The GC at 1/0 removes every unused image: the unused one goes, the pod's stays pinned.
    support::wait_for(
        &format!("{unused} removed by the agent's GC"),
        Duration::from_secs(60),
        || async {
            let gone = runtime_image(&cluster, &unused).is_none();
            if !gone {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            gone.then_some(())
        },
    )
    .await;
    assert_eq!(
        pod_phase(&cluster, "signals-init"),
        "Pending",
        "the init container still runs"
    );
    assert_eq!(
        runtime_image(&cluster, &main),
        Some(true),
        "{main}: present and pinned as the CRI lists it"
    );
    // The init container ends; the main container starts with no pull.
    gate.open();
    cluster
        .wait_for_no_pull(
            "the pod's main container created (kubectl get events)",
            "signals-init ",
            &main,
            Duration::from_secs(60),
        )
        .await;
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "pod",
        "signals-init",
        "--wait=false",
    ]);
    drop(release);
    let _ = cluster.crictl_output(&["rmi", &main]);
}

/// A DaemonSet rollout with `updateStrategy: OnDelete`: once its template names a new image,
/// the agent pulls it onto the node (the change wakes the warm loop; `warmPeriod` is an hour,
/// so no period did it) while the old pod still runs, and the replacement pod the DaemonSet
/// creates when the old one is deleted starts with the kubelet's "already present on machine".
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn with_cluster_signals_a_daemonsets_new_template_is_pulled_ahead_and_its_next_pod_finds_it_present()
 {
    let cluster = cluster_lab("cluster::lab::cluster_signals_daemonset").await;
    let (old, new) = (
        cluster.lab_image("busybox:1.35"),
        cluster.lab_image("data:1mb"),
    );
    crictl_pull(&cluster, &old);
    let _ = cluster.crictl_output(&["rmi", &new]);
    assert_eq!(
        runtime_image(&cluster, &new),
        None,
        "{new} absent at the start"
    );
    let daemonset = format!(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: signals-ds, namespace: default}}\n\
         spec:\n  selector: {{matchLabels: {{app: signals-ds}}}}\n\
         \x20 updateStrategy: {{type: OnDelete}}\n\
         \x20 template:\n    metadata: {{labels: {{app: signals-ds}}}}\n    spec:\n\
         \x20     hostNetwork: true\n      terminationGracePeriodSeconds: 0\n\
         \x20     containers:\n      - {{name: main, image: {old}, imagePullPolicy: IfNotPresent, \
         command: [sleep, \"3600\"]}}\n"
    );
    cluster.kubectl_apply(&daemonset);
    let selector = ["-n", "default", "-l", "app=signals-ds"];
    let old_pod = support::wait_for(
        "the DaemonSet's pod running (kubectl get pods)",
        Duration::from_secs(120),
        || async {
            let pod = cluster.kubectl(&[
                selector[0],
                selector[1],
                "get",
                "pods",
                selector[2],
                selector[3],
                "-o",
                "jsonpath={range .items[?(@.status.phase==\"Running\")]}{.metadata.name}{end}",
            ]);
            let pod = pod.trim().to_owned();
            if pod.is_empty() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            (!pod.is_empty()).then_some(pod)
        },
    )
    .await;
    let sets = ["clusterSignals.enabled=true".to_owned()];
    let release = cluster.install(
        "imagekeeper",
        &config(85, 80, "warmPeriod = \"1h\"\n"),
        &sets,
    );
    release
        .wait_for_log_line(&["Listed the DaemonSets"], Duration::from_secs(60))
        .await;
    release
        .wait_for_log_line(
            &["Listed the pods bound to this node"],
            Duration::from_secs(60),
        )
        .await;
    cluster.kubectl(&[
        "-n",
        "default",
        "set",
        "image",
        "daemonset/signals-ds",
        &format!("main={new}"),
    ]);
    let pulling = release
        .wait_for_log_line(
            &["Pulling a warm image", "DaemonSet default/signals-ds"],
            Duration::from_secs(60),
        )
        .await;
    println!("{pulling}");
    support::wait_for(
        &format!("{new} present on the node (crictl)"),
        Duration::from_secs(60),
        || async {
            let present = runtime_image(&cluster, &new).is_some();
            if !present {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            present.then_some(())
        },
    )
    .await;
    let running = cluster.kubectl(&[
        "-n",
        "default",
        "get",
        "pod",
        &old_pod,
        "-o",
        "jsonpath={.status.phase} {.spec.containers[0].image}",
    ]);
    assert_eq!(
        running.trim(),
        format!("Running {old}"),
        "OnDelete: the old pod still runs the old image while the new one is pulled"
    );
    cluster.kubectl(&["-n", "default", "delete", "pod", &old_pod, "--wait=false"]);
    cluster
        .wait_for_no_pull(
            "the replacement pod's Pulled event (kubectl get events)",
            "signals-ds-",
            &new,
            Duration::from_secs(120),
        )
        .await;
    cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "daemonset",
        "signals-ds",
        "--wait=false",
    ]);
    drop(release);
    let _ = cluster.crictl_output(&["rmi", &new]);
}
