//! The fleet's KeepSets on the real cluster (`cluster::lab::keep_sets::...`): the chart's CRDs
//! installed by `helm install`, a KeepSet applied with `kubectl`, and what crictl, the API
//! server and the node's KeepSetReport show, never only imagekeeper.

use std::time::Duration;

use super::{config, runtime_image, wait_for_runtime_image};
use crate::cluster::{ClusterLab, NAMESPACE, Release, cluster_lab};
use crate::support;

/// `kubectl get keepsetreport NODE -o json`'s status, or null while there is none.
fn report(cluster: &ClusterLab) -> serde_json::Value {
    let node = cluster.node_name();
    let out = cluster.kubectl_output(&["get", "keepsetreport", &node, "-o", "json"]);
    if !out.status.success() {
        return serde_json::Value::Null;
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("kubectl JSON");
    json["status"].clone()
}

/// The report's entry for the set `name`, or null.
fn report_of(status: &serde_json::Value, name: &str) -> serde_json::Value {
    status["keepSets"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// Waits until the node's report satisfies `done`, polling every second.
async fn wait_for_report(
    cluster: &ClusterLab,
    what: &str,
    deadline: Duration,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    support::wait_for(what, deadline, || async {
        let status = report(cluster);
        if done(&status) {
            return Some(status);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        None
    })
    .await
}

/// Waits until `kubectl get keepset NAME` shows READY `want` (its status' `ready/matching`, the
/// fleet's count the Lease's holder writes), polling every second.
async fn wait_for_fleet_count(cluster: &ClusterLab, name: &str, want: &str, deadline: Duration) {
    support::wait_for(
        &format!("kubectl get keepset {name}: READY {want}"),
        deadline,
        || async {
            let out =
                cluster.kubectl_output(&["get", "keepset", name, "-o", "jsonpath={.status.nodes}"]);
            if out.status.success() && out.stdout == want.as_bytes() {
                return Some(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            None
        },
    )
    .await;
}

/// Issue 56's cluster-lab cases: a KeepSet selecting the lab node (by its hostname label) with
/// an absent image and a lifetime of 75 s, and a second set naming an image the registry does
/// not have. The API server refuses a set giving both `until` and `duration` (the CRD's CEL
/// rule) before any node sees it. The first set's image is pulled and crictl lists it
/// `pinned: true`, the node's KeepSetReport says it ready (1 of 1 image present and pinned);
/// the second is reported failed with the registry's reason and a Warning Event regarding it;
/// when the first set's lifetime ends the runtime's pin goes (crictl `pinned: false`) and the
/// report says it expired. RBAC denied: a set without a lifetime pins the image, and the agent
/// restarts with its role no longer granting the KeepSets; one log line says the watch is
/// refused and the node is unharmed (the pin holds through a GC cycle, crictl still lists it
/// pinned); with the rule back, deleting the set removes its pin.
#[tokio::test]
#[ignore = "needs the cluster lab: scripts/cluster-lab up, IMAGEKEEPER_CLUSTER_LAB_ENV (scripts/test runs it)"]
async fn a_keep_set_selecting_the_node_pulls_and_runtime_pins_its_images_until_its_lifetime_ends() {
    let cluster = cluster_lab("cluster::lab::keep_sets::pin_until_lifetime").await;
    let image = cluster.lab_image("data:5mb");
    let missing = cluster.lab_image("data:no-such-tag");
    let _ = cluster.crictl_output(&["rmi", &image]);
    for set in [
        "lab-rollout",
        "lab-missing",
        "lab-both",
        "lab-held",
        "lab-warm",
        "lab-ref",
        "lab-secret",
    ] {
        let _ = cluster.kubectl_output(&["delete", "keepset", set, "--ignore-not-found"]);
    }
    let _ = cluster.kubectl_output(&[
        "-n",
        "default",
        "delete",
        "deployment",
        "lab-ref",
        "--ignore-not-found",
    ]);
    assert_eq!(
        runtime_image(&cluster, &image),
        None,
        "{image} absent at the start"
    );
    let release = cluster.install(
        "imagekeeper",
        &config(85, 80, "warmPeriod = \"1h\"\n"),
        &[
            "keepSets.enabled=true".to_owned(),
            "keepSets.pullSecrets=true".to_owned(),
        ],
    );
    release
        .wait_for_log_line(&["Listed the KeepSets"], Duration::from_secs(60))
        .await;
    let node = cluster.node_name();

    // Refused by the API server: the CRD's CEL rule.
    let both = format!(
        "apiVersion: imagekeeper.io/v1alpha1\nkind: KeepSet\nmetadata: {{name: lab-both}}\n\
         spec:\n  images: [\"{image}\"]\n  nodeSelector: {{}}\n  duration: 1h\n\
         \x20 until: \"2030-01-01T00:00:00Z\"\n"
    );
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("both.yaml");
    std::fs::write(&path, both).expect("write the manifest");
    let out = cluster.kubectl_output(&["apply", "-f", path.to_str().expect("a UTF-8 path")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a set with until and duration is refused"
    );
    assert!(
        stderr.contains("give until or duration, not both"),
        "the API server names the rule: {stderr}"
    );

    let sets = format!(
        "apiVersion: imagekeeper.io/v1alpha1\nkind: KeepSet\nmetadata: {{name: lab-rollout}}\n\
         spec:\n  images: [\"{image}\"]\n\
         \x20 nodeSelector: {{matchLabels: {{kubernetes.io/hostname: {node}}}}}\n\
         \x20 duration: 75s\n  reason: cluster lab rollout\n\
         ---\n\
         apiVersion: imagekeeper.io/v1alpha1\nkind: KeepSet\nmetadata: {{name: lab-missing}}\n\
         spec:\n  images: [\"{missing}\"]\n  nodeSelector: {{}}\n"
    );
    cluster.kubectl_apply(&sets);
    wait_for_runtime_image(
        &cluster,
        &image,
        Some(true),
        &format!("{image} pulled and runtime-pinned by the KeepSet (crictl)"),
        Duration::from_secs(60),
    )
    .await;
    let status = wait_for_report(
        &cluster,
        "the node's KeepSetReport: lab-rollout ready, lab-missing failed",
        Duration::from_secs(60),
        |s| {
            report_of(s, "lab-rollout")["ready"] == true
                && report_of(s, "lab-missing")["failed"] == 1
        },
    )
    .await;
    println!("{status:#}");
    let rollout = report_of(&status, "lab-rollout");
    assert_eq!(
        (&rollout["images"], &rollout["present"], &rollout["pinned"]),
        (&1.into(), &1.into(), &1.into()),
        "{rollout}"
    );
    assert!(
        rollout["bytes"].as_u64().unwrap_or(0) > 5_000_000,
        "{rollout}"
    );
    assert_eq!(status["node"], node.as_str());
    assert_eq!(status["ready"], 1, "{status}");
    assert_eq!(status["failing"], 1, "{status}");
    let failure = &report_of(&status, "lab-missing")["failures"][0];
    assert_eq!(failure["image"], missing.as_str(), "{failure}");
    let message = failure["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not found"),
        "the registry's reason: {message}"
    );
    // The failure is a Warning Event regarding the set.
    let event = support::wait_for(
        "a KeepSetImageFailed Event regarding lab-missing (kubectl get events)",
        Duration::from_secs(30),
        || async {
            let events = cluster.kubectl_json(&[
                "get",
                "events.events.k8s.io",
                "-A",
                "--field-selector",
                "regarding.kind=KeepSet,regarding.name=lab-missing,reason=KeepSetImageFailed",
                "-o",
                "json",
            ]);
            let found = events["items"]
                .as_array()
                .and_then(|items| items.first().cloned());
            if found.is_none() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            found
        },
    )
    .await;
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains(&node) && note.contains(&missing) && note.contains("not found"),
        "the Event names the node, the image and the reason: {note}"
    );
    assert_eq!(event["type"], "Warning", "{event}");
    // `kubectl get` prints the report's columns.
    let listed = cluster.kubectl(&["get", "keepsetreports", &node]);
    println!("{listed}");
    assert!(
        listed.contains("READY") && listed.contains("FAILING"),
        "{listed}"
    );
    // The fleet's count on the sets themselves: the agent holding the Lease (the only agent
    // here) writes ready/matching into each set's status, READY in `kubectl get keepsets`.
    wait_for_fleet_count(&cluster, "lab-rollout", "1/1", Duration::from_secs(60)).await;
    wait_for_fleet_count(&cluster, "lab-missing", "0/1", Duration::from_secs(30)).await;
    let listed = cluster.kubectl(&["get", "keepsets"]);
    println!("{listed}");
    let rollout_row = listed
        .lines()
        .find(|line| line.starts_with("lab-rollout "))
        .unwrap_or_default();
    assert!(
        listed.starts_with("NAME") && listed.contains("READY") && rollout_row.contains(" 1/1 "),
        "kubectl get keepsets shows the count: {listed}"
    );
    let holder = cluster.kubectl(&[
        "-n",
        NAMESPACE,
        "get",
        "lease",
        "imagekeeper-keepset-counts",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert_eq!(
        holder.trim(),
        node,
        "the Lease's holder is the lab node's agent"
    );

    // On the node, the set's pin is an ordinary pin whose reason names the set.
    let pins = release.imagekeeper_ok(&["pins"]);
    println!("{pins}");
    assert!(
        pins.contains("KeepSet/lab-rollout: cluster lab rollout"),
        "imagekeeper pins names the set: {pins}"
    );

    // Mode warm: the set's absent image is pulled ahead by the warm loop (woken by the set;
    // the lab's warmPeriod is 1h), since the disk is below the low line, and kept: the
    // runtime lists it pinned through the agent's keeps, the report says the set ready and
    // READY reads 1/1. Deleting the set ends the keep: the runtime's pin goes.
    let warm_image = cluster.lab_image("data:1mb");
    let _ = cluster.crictl_output(&["rmi", &warm_image]);
    cluster.kubectl_apply(&format!(
        "apiVersion: imagekeeper.io/v1alpha1\nkind: KeepSet\nmetadata: {{name: lab-warm}}\n\
         spec:\n  images: [\"{warm_image}\"]\n  nodeSelector: {{}}\n  mode: warm\n"
    ));
    wait_for_runtime_image(
        &cluster,
        &warm_image,
        Some(true),
        &format!("{warm_image} pulled ahead and kept by the warm KeepSet (crictl)"),
        Duration::from_secs(60),
    )
    .await;
    let status = wait_for_report(
        &cluster,
        "the node's KeepSetReport: lab-warm ready",
        Duration::from_secs(60),
        |s| report_of(s, "lab-warm")["ready"] == true,
    )
    .await;
    assert_eq!(report_of(&status, "lab-warm")["mode"], "warm", "{status}");
    wait_for_fleet_count(&cluster, "lab-warm", "1/1", Duration::from_secs(30)).await;
    let pins = release.imagekeeper_ok(&["pins"]);
    assert!(
        !pins.contains("KeepSet/lab-warm"),
        "a warm set writes no pin of its own: {pins}"
    );
    cluster.kubectl(&["delete", "keepset", "lab-warm"]);
    wait_for_runtime_image(
        &cluster,
        &warm_image,
        Some(false),
        &format!("{warm_image}'s runtime pin gone with the warm KeepSet (crictl)"),
        Duration::from_secs(60),
    )
    .await;

    // Images by a workload's reference: a Deployment scaled to 0 (no pod of it pulls), named
    // by a set. The agent holding the Lease reads its template into the set's status, and the
    // node pulls and pins the image; when the template moves to another image, the pin
    // follows it.
    let first = cluster.lab_image("data:20mb");
    let _ = cluster.crictl_output(&["rmi", &first]);
    let deployment = |image: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: lab-ref, namespace: default}}\n\
             spec:\n  replicas: 0\n  selector: {{matchLabels: {{app: lab-ref}}}}\n\
             \x20 template:\n    metadata: {{labels: {{app: lab-ref}}}}\n\
             \x20   spec:\n      containers: [{{name: app, image: \"{image}\"}}]\n"
        )
    };
    cluster.kubectl_apply(&deployment(&first));
    cluster.kubectl_apply(
        "apiVersion: imagekeeper.io/v1alpha1\nkind: KeepSet\nmetadata: {name: lab-ref}\n\
         spec:\n  workloads: [{kind: Deployment, namespace: default, name: lab-ref}]\n\
         \x20 nodeSelector: {}\n",
    );
    wait_for_runtime_image(
        &cluster,
        &first,
        Some(true),
        &format!("{first}, the Deployment's image, pulled and pinned by the KeepSet (crictl)"),
        Duration::from_secs(90),
    )
    .await;
    let resolved = cluster.kubectl(&[
        "get",
        "keepset",
        "lab-ref",
        "-o",
        "jsonpath={.status.workloadImages}",
    ]);
    assert!(resolved.contains(&first), "the set's status: {resolved}");
    let moved = cluster.lab_image("data:1mb");
    cluster.kubectl_apply(&deployment(&moved));
    wait_for_runtime_image(
        &cluster,
        &moved,
        Some(true),
        &format!("{moved}, the Deployment's new image, pinned by the KeepSet (crictl)"),
        Duration::from_secs(90),
    )
    .await;
    wait_for_runtime_image(
        &cluster,
        &first,
        Some(false),
        &format!("{first}'s pin gone once the template left it (crictl)"),
        Duration::from_secs(60),
    )
    .await;
    wait_for_fleet_count(&cluster, "lab-ref", "1/1", Duration::from_secs(60)).await;
    cluster.kubectl(&["delete", "keepset", "lab-ref"]);
    cluster.kubectl(&["-n", "default", "delete", "deployment", "lab-ref"]);
    wait_for_runtime_image(
        &cluster,
        &moved,
        Some(false),
        &format!("{moved}'s pin gone with the set (crictl)"),
        Duration::from_secs(60),
    )
    .await;

    // Pull Secrets by reference, in the chart's namespace (the chart's keepSets.pullSecrets
    // Role): a set names one Secret that exists (a dockerconfigjson for the lab registry,
    // which asks for none, so the pull succeeds with it) and one that does not. The image is
    // pulled and pinned; the missing Secret is one warning naming it, the present one is
    // read (no warning names it), and no log line carries the Secret's password.
    let private = cluster.lab_image("data:20mb");
    let _ = cluster.crictl_output(&["rmi", &private]);
    let registry = private.split('/').next().unwrap_or_default().to_owned();
    let config = serde_json::json!({"auths": {registry: {
        "username": "keeper", "password": "lab-s3cret-never-logged"}}});
    let dir_secret = tempfile::tempdir().expect("a temp dir");
    let config_path = dir_secret.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).expect("write the docker config");
    let _ = cluster.kubectl_output(&[
        "-n",
        NAMESPACE,
        "delete",
        "secret",
        "lab-pull",
        "--ignore-not-found",
    ]);
    cluster.kubectl(&[
        "-n",
        NAMESPACE,
        "create",
        "secret",
        "generic",
        "lab-pull",
        "--type=kubernetes.io/dockerconfigjson",
        &format!(
            "--from-file=.dockerconfigjson={}",
            config_path.to_str().expect("a UTF-8 path")
        ),
    ]);
    cluster.kubectl_apply(&format!(
        "apiVersion: imagekeeper.io/v1alpha1\nkind: KeepSet\nmetadata: {{name: lab-secret}}\n\
         spec:\n  images: [\"{private}\"]\n  nodeSelector: {{}}\n\
         \x20 pullSecrets: [{{name: lab-pull}}, {{name: lab-absent}}]\n"
    ));
    wait_for_runtime_image(
        &cluster,
        &private,
        Some(true),
        &format!("{private} pulled with the set's pull Secrets and pinned (crictl)"),
        Duration::from_secs(60),
    )
    .await;
    let said = release
        .wait_for_log_line(
            &["pull Secret is not used", "lab-absent not found"],
            Duration::from_secs(30),
        )
        .await;
    println!("{said}");
    let logs = release.logs();
    assert!(
        Release::lines_with(&logs, &["pull Secret is not used", "lab-pull"]).is_empty(),
        "the present Secret was read and used"
    );
    assert!(
        !logs.contains("lab-s3cret-never-logged"),
        "no log line carries the Secret's password"
    );
    cluster.kubectl(&["delete", "keepset", "lab-secret"]);
    cluster.kubectl(&["-n", NAMESPACE, "delete", "secret", "lab-pull"]);

    // lab-rollout's lifetime (75 s) ended while the steps above ran, as a node's KeepSet's
    // lifetime ends while it works: the runtime's pin goes, the report says expired.
    wait_for_runtime_image(
        &cluster,
        &image,
        Some(false),
        &format!("{image}'s runtime pin gone when lab-rollout's lifetime ended (crictl)"),
        Duration::from_secs(120),
    )
    .await;
    wait_for_report(
        &cluster,
        "the node's KeepSetReport: lab-rollout expired",
        Duration::from_secs(30),
        |s| report_of(s, "lab-rollout")["expired"] == true,
    )
    .await;
    wait_for_fleet_count(&cluster, "lab-rollout", "0/1", Duration::from_secs(30)).await;

    for set in ["lab-rollout", "lab-missing"] {
        cluster.kubectl(&["delete", "keepset", set]);
    }
    wait_for_report(
        &cluster,
        "the node's KeepSetReport without the deleted sets",
        Duration::from_secs(30),
        |s| s["sets"] == 0,
    )
    .await;

    // RBAC denied. A set without a lifetime pins the image again; then the agent restarts with
    // its role no longer granting the KeepSets. One clear log line says the watch is refused,
    // and the node is unharmed: the set's pin, in the node's database, holds through a GC
    // cycle and the runtime still lists the image pinned.
    let held = format!(
        "apiVersion: imagekeeper.io/v1alpha1\nkind: KeepSet\nmetadata: {{name: lab-held}}\n\
         spec:\n  images: [\"{image}\"]\n  nodeSelector: {{}}\n  reason: held through RBAC\n"
    );
    cluster.kubectl_apply(&held);
    wait_for_runtime_image(
        &cluster,
        &image,
        Some(true),
        &format!("{image} pulled and runtime-pinned by lab-held (crictl)"),
        Duration::from_secs(60),
    )
    .await;
    let role = format!("{}-keep-sets", release.fullname());
    let keep_sets_rule = r#"{"apiGroups":["imagekeeper.io"],"resources":["keepsets"],"verbs":["get","list","watch"]}"#;
    cluster.kubectl(&[
        "patch",
        "clusterrole",
        &role,
        "--type=json",
        "-p",
        &format!(
            r#"[{{"op":"test","path":"/rules/0","value":{keep_sets_rule}}},{{"op":"remove","path":"/rules/0"}}]"#
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
            &["The watch of the KeepSets failed", "forbidden"],
            Duration::from_secs(60),
        )
        .await;
    println!("{refused}");
    // A cycle through the agent returns after its label writes.
    release.imagekeeper_ok(&["gc"]);
    assert_eq!(
        runtime_image(&cluster, &image),
        Some(true),
        "{image} still runtime-pinned with the KeepSets' watch refused"
    );
    let pins = release.imagekeeper_ok(&["pins"]);
    assert!(
        pins.contains("KeepSet/lab-held: held through RBAC"),
        "the set's pin holds: {pins}"
    );
    let logs = release.logs();
    let refusals = Release::lines_with(&logs, &["The watch of the KeepSets failed"]);
    assert_eq!(
        refusals.len(),
        1,
        "logged once while the watch retries: {logs}"
    );

    // The role back: the watch lists again, and deleting the set removes its pin.
    cluster.kubectl(&[
        "patch",
        "clusterrole",
        &role,
        "--type=json",
        "-p",
        &format!(r#"[{{"op":"add","path":"/rules/0","value":{keep_sets_rule}}}]"#),
    ]);
    release
        .wait_for_log_line(&["Watching the KeepSets again"], Duration::from_secs(90))
        .await;
    cluster.kubectl(&["delete", "keepset", "lab-held"]);
    wait_for_runtime_image(
        &cluster,
        &image,
        Some(false),
        &format!("{image}'s runtime pin gone when lab-held was deleted (crictl)"),
        Duration::from_secs(60),
    )
    .await;
    drop(release);
    let _ = cluster.crictl_output(&["rmi", &image]);
}
