//! The Helm chart (`deploy/helm/imagekeeper`) rendered by the real `helm` (scripts/tools
//! installs it): its default render is `deploy/daemonset.yaml` byte for byte (so the manifest
//! the lab runs and the chart cannot drift apart), `helm lint --strict` passes for every
//! runtime preset with every optional object on, and each render's objects pass the checks
//! below (there is no API server here, and kubectl's client-side dry run needs one to map
//! kinds, so the objects are checked field by field: kinds, names, the recommended labels, the
//! selector, mounts against volumes, the runtime socket and image filesystem mounted where the
//! arguments say, the config file parsed as the agent parses it, the warm set's ConfigMap
//! mounted where the config's `warmSetDir` says, no flag the agent deprecates in the args, the
//! PrometheusRule equal to the rules file, the dashboard equal to its JSON). Every object of a
//! Kubernetes kind is also checked against its schema: decoded into its k8s-openapi type (the
//! API's own Go types, generated) and encoded back, a field the type does not know (misspelt,
//! misplaced) or of the wrong shape is named; the Prometheus Operator's kinds have no such types
//! here and get the field checks alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_yaml_ng::Value;

use imagekeeper::config::{CONFIG_FIELDS, FileConfig, FlagStatus};

use super::MANIFEST;
use crate::support;

const CHART: &str = "deploy/helm/imagekeeper";
const PRESETS: [&str; 4] = ["containerd", "k3s", "rke2", "crio"];
/// Every optional object of the chart switched on.
const ALL_OBJECTS: &str = "podMonitor.enabled=true,serviceMonitor.enabled=true,\
                           prometheusRule.enabled=true,grafanaDashboard.enabled=true,\
                           events.enabled=true,events.kubeletConfig=/var/lib/kubelet/config.yaml,\
                           clusterSignals.enabled=true,clusterSignals.prefetchPullSecrets=true,\
                           warmSet.configMap=node-warm-set,keepSets.pullSecrets=true";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `helm ARGS` in the repository; its stdout, or a panic with its stderr.
fn helm(helm: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", helm.display()));
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("helm prints UTF-8"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn render(helm_path: &Path, set: &[&str]) -> Result<String, String> {
    let mut args = vec![
        "template",
        "imagekeeper",
        CHART,
        "--namespace",
        "kube-system",
        "--include-crds",
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    helm(helm_path, &args)
}

#[test]
fn the_charts_default_render_is_deploy_daemonset_yaml() {
    let Some(helm_path) = support::tool(
        "deploy::chart::the_charts_default_render_is_deploy_daemonset_yaml",
        "helm",
        "IMAGEKEEPER_HELM",
    ) else {
        return;
    };
    let rendered = render(&helm_path, &[]).unwrap_or_else(|e| panic!("helm template: {e}"));
    let manifest = std::fs::read_to_string(repo(MANIFEST)).expect("the manifest");
    assert!(
        rendered == manifest,
        "{MANIFEST} is not the chart's default render: run `scripts/chart render` (first \
         differing line: {:?})",
        rendered.lines().zip(manifest.lines()).find(|(a, b)| a != b)
    );
    // By default the agent reads no Secret: the pods' pull Secrets are an opt-in
    // (clusterSignals.prefetchPullSecrets), the KeepSets' too (keepSets.pullSecrets).
    assert!(
        !rendered.contains("secrets") && !rendered.contains("PrefetchPullSecrets"),
        "the default render grants or sets a Secret read"
    );
}

#[test]
fn helm_lint_is_clean_for_every_runtime_preset() {
    let Some(helm_path) = support::tool(
        "deploy::chart::helm_lint_is_clean_for_every_runtime_preset",
        "helm",
        "IMAGEKEEPER_HELM",
    ) else {
        return;
    };
    for preset in PRESETS {
        let runtime = format!("runtime={preset}");
        let out = helm(
            &helm_path,
            &[
                "lint",
                "--strict",
                CHART,
                "--set",
                &runtime,
                "--set",
                ALL_OBJECTS,
            ],
        )
        .unwrap_or_else(|e| panic!("helm lint --strict ({preset}): {e}"));
        assert!(out.contains("0 chart(s) failed"), "{preset}: {out}");
    }
}

#[test]
fn an_unknown_runtime_preset_is_refused_naming_the_presets() {
    let Some(helm_path) = support::tool(
        "deploy::chart::an_unknown_runtime_preset_is_refused_naming_the_presets",
        "helm",
        "IMAGEKEEPER_HELM",
    ) else {
        return;
    };
    let error = render(&helm_path, &["runtime=docker"]).expect_err("docker is no preset");
    assert!(
        error.contains("runtime \"docker\" is not one of the presets: containerd, crio, k3s, rke2"),
        "{error}"
    );
}

/// With `warmSet.configMap` the chart writes `warmSetDir` at the top of the config file; a
/// `config` that sets it too is refused by helm, naming it (the agent would refuse the
/// duplicate TOML key only when the pod starts). A comment naming it is no setting.
#[test]
fn a_config_that_sets_warm_set_dir_beside_the_warm_set_config_map_is_refused() {
    let Some(helm_path) = support::tool(
        "deploy::chart::a_config_that_sets_warm_set_dir_beside_the_warm_set_config_map_is_refused",
        "helm",
        "IMAGEKEEPER_HELM",
    ) else {
        return;
    };
    let cases = [
        ("warmSetDir = \"/x\"", true),
        (
            "imageGCHighThresholdPercent = 80\n  \"warmSetDir\" = \"/x\"",
            true,
        ),
        (
            "# warmSetDir comes from the chart\nimageGCHighThresholdPercent = 80",
            false,
        ),
    ];
    for (config, refused) in cases {
        let config = format!("config={config}");
        let args = [
            "template",
            "imagekeeper",
            CHART,
            "--namespace",
            "kube-system",
            "--set",
            "warmSet.configMap=node-warm-set",
            "--set-string",
            &config,
        ];
        match (helm(&helm_path, &args), refused) {
            (Err(error), true) => assert!(
                error.contains(
                    "config sets warmSetDir, which the chart sets to the mount of warmSet.configMap"
                ),
                "{config}: {error}"
            ),
            (Ok(text), false) => assert!(
                text.contains("    warmSetDir = \"/etc/imagekeeper-warm-set\"\n"),
                "{config}: {text}"
            ),
            (got, _) => panic!("{config}: refused {refused} expected, got {got:?}"),
        }
    }
}

/// `image.repository`, `image.tag` and `image.digest`: the tag defaults to the chart's
/// appVersion, and a digest wins over the tag; `image.pullPolicy` is left out unless set.
#[test]
fn the_image_is_the_repository_with_the_tag_or_the_digest() {
    let Some(helm_path) = support::tool(
        "deploy::chart::the_image_is_the_repository_with_the_tag_or_the_digest",
        "helm",
        "IMAGEKEEPER_HELM",
    ) else {
        return;
    };
    let digest = format!("sha256:{}", "a".repeat(64));
    let app_version = std::fs::read_to_string(repo(&format!("{CHART}/Chart.yaml")))
        .expect("Chart.yaml")
        .lines()
        .find_map(|l| l.strip_prefix("appVersion: "))
        .expect("appVersion")
        .trim_matches('"')
        .to_owned();
    let cases = [
        (
            vec!["image.repository=reg.example/ik".to_owned()],
            format!("reg.example/ik:{app_version}"),
            None,
        ),
        (
            vec![
                "image.repository=reg.example/ik,image.tag=1.2.3,image.pullPolicy=Always"
                    .to_owned(),
            ],
            "reg.example/ik:1.2.3".to_owned(),
            Some("Always"),
        ),
        (
            vec![format!(
                "image.repository=reg.example/ik,image.tag=1.2.3,image.digest={digest}"
            )],
            format!("reg.example/ik@{digest}"),
            None,
        ),
    ];
    for (set, want, policy) in cases {
        let set: Vec<&str> = set.iter().map(String::as_str).collect();
        let text =
            render(&helm_path, &set).unwrap_or_else(|e| panic!("helm template {set:?}: {e}"));
        let daemon_set = serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).expect("YAML"))
            .find(|v| v["kind"].as_str() == Some("DaemonSet"))
            .expect("a DaemonSet");
        let container = &daemon_set["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"].as_str(), Some(want.as_str()), "{set:?}");
        assert_eq!(container["imagePullPolicy"].as_str(), policy, "{set:?}");
    }
}

/// The runtime preset's paths, as values.yaml gives them.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preset {
    socket: String,
    socket_dir: String,
    root: String,
    volume_prefix: String,
    sandbox_image: String,
}

fn presets() -> BTreeMap<String, Preset> {
    #[derive(Deserialize)]
    struct Values {
        runtimes: BTreeMap<String, Preset>,
    }
    let text = std::fs::read_to_string(repo(&format!("{CHART}/values.yaml"))).expect("values");
    let values: Values = serde_yaml_ng::from_str(&text).expect("values.yaml parses");
    values.runtimes
}

#[test]
fn every_runtime_preset_renders_objects_that_check_out() {
    let Some(helm_path) = support::tool(
        "deploy::chart::every_runtime_preset_renders_objects_that_check_out",
        "helm",
        "IMAGEKEEPER_HELM",
    ) else {
        return;
    };
    let presets = presets();
    assert_eq!(
        presets.keys().map(String::as_str).collect::<Vec<_>>(),
        ["containerd", "crio", "k3s", "rke2"]
    );
    for (name, preset) in &presets {
        let runtime = format!("runtime={name}");
        let text = render(&helm_path, &[&runtime, ALL_OBJECTS])
            .unwrap_or_else(|e| panic!("helm template ({name}): {e}"));
        let kinds = check_objects(&text, preset).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            kinds,
            [
                "ClusterRole",
                "ClusterRole",
                "ClusterRole",
                "ClusterRole",
                "ClusterRoleBinding",
                "ClusterRoleBinding",
                "ClusterRoleBinding",
                "ClusterRoleBinding",
                "ConfigMap",
                "ConfigMap",
                "CustomResourceDefinition",
                "CustomResourceDefinition",
                "DaemonSet",
                "PodMonitor",
                "PrometheusRule",
                "Role",
                "Role",
                "RoleBinding",
                "RoleBinding",
                "Service",
                "ServiceAccount",
                "ServiceMonitor"
            ],
            "{name}"
        );
    }
}

/// Each drift the checks must catch, made in a render: the check names it.
#[test]
fn the_object_checks_refuse_a_broken_render() {
    let Some(helm_path) = support::tool(
        "deploy::chart::the_object_checks_refuse_a_broken_render",
        "helm",
        "IMAGEKEEPER_HELM",
    ) else {
        return;
    };
    let presets = presets();
    let containerd = &presets["containerd"];
    let text = render(&helm_path, &[ALL_OBJECTS]).expect("render");
    let cases = [
        (
            "    app.kubernetes.io/managed-by: Helm\n",
            "",
            "lacks the label app.kubernetes.io/managed-by",
        ),
        (
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
            "--container-runtime-endpoint=unix:///run/other.sock",
            "--container-runtime-endpoint",
        ),
        (
            "            - name: tmp\n              mountPath: /tmp\n",
            "            - name: scratch\n              mountPath: /tmp\n",
            "mounts volume \"scratch\", which is not defined",
        ),
        ("kind: PodMonitor", "kind: PodMonitr", "unexpected kind"),
        (
            "\"uid\": \"imagekeeper-overview\"",
            "\"uid\": \"other\"",
            "dashboard",
        ),
        (
            "alert: ImagekeeperStoreUnhealthy",
            "alert: Other",
            "PrometheusRule",
        ),
        (
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
            "--pod-infra-container-image=pause",
            "--pod-infra-container-image",
        ),
        (
            "      serviceAccountName: imagekeeper\n",
            "",
            "--events or clusterSignals and serviceAccountName",
        ),
        (
            "            - name: kubelet-config\n              mountPath: /var/lib/kubelet/config.yaml\n",
            "            - name: kubelet-config\n              mountPath: /etc/kubelet.yaml\n",
            "--kubelet-config=/var/lib/kubelet/config.yaml is not mounted",
        ),
        ("\"patch\"", "\"patch\", \"delete\"", "grants more or less"),
        (
            "\"watch\"",
            "\"watch\", \"get\"",
            "the cluster signals ClusterRole grants more or less",
        ),
        (
            "            - name: warm-set\n              mountPath: /etc/imagekeeper-warm-set\n",
            "            - name: warm-set\n              mountPath: /etc/warm\n",
            "the config's warmSetDir /etc/imagekeeper-warm-set is not a ConfigMap volume's mount",
        ),
        (
            "    warmSetDir = \"/etc/imagekeeper-warm-set\"\n",
            "",
            "a ConfigMap is mounted at /etc/imagekeeper-warm-set, which neither",
        ),
        (
            "    warmSetDir = \"/etc/imagekeeper-warm-set\"\n",
            "    warmSetDirectory = \"/etc/imagekeeper-warm-set\"\n",
            "unknown field `warmSetDirectory`",
        ),
        (
            "            - --log-format=json\n",
            "            - --log-format=json\n            - --warm-set-dir=/etc/imagekeeper-warm-set\n",
            "--warm-set-dir is deprecated: the config file's warmSetDir replaces it",
        ),
        (
            "            - --log-format=json\n",
            "            - --log-format=json\n            - --pinned-image\n            - pause\n",
            "--pinned-image is deprecated: the config file's pinnedImages replaces it",
        ),
        (
            "readOnlyRootFilesystem: true",
            "readOnlyRootFileSystem: true",
            "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem",
        ),
        ("clusterIP: None", "clusterIp: None", "spec.clusterIp"),
        (
            "      hostNetwork: true\n",
            "      hostNetwork: \"yes\"\n",
            "DaemonSet imagekeeper: does not decode as apps/v1 DaemonSet",
        ),
        (
            "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n",
            "roleRef:\n  apiGroups: rbac.authorization.k8s.io\n",
            "ClusterRoleBinding imagekeeper-events:",
        ),
    ];
    for (from, to, want) in cases {
        assert!(text.contains(from), "the render has {from:?}");
        let broken = text.replacen(from, to, 1);
        let error = check_objects(&broken, containerd).expect_err(from);
        assert!(error.contains(want), "{from:?}: {error}");
    }
}

/// The checks of one render; the kinds found, sorted.
fn check_objects(text: &str, preset: &Preset) -> Result<Vec<String>, String> {
    let documents = serde_yaml_ng::Deserializer::from_str(text)
        .map(|document| Value::deserialize(document).map_err(|e| format!("YAML: {e}")))
        .collect::<Result<Vec<Value>, String>>()?;
    // The agent's config file, as the agent reads it (unknown keys refused): the DaemonSet's
    // checks need its warmSetDir.
    let mut config = None;
    for value in &documents {
        if value["kind"].as_str() == Some("ConfigMap")
            && let Some(toml_text) = value["data"]["imagekeeper.toml"].as_str()
        {
            let file: FileConfig =
                toml::from_str(toml_text).map_err(|e| format!("imagekeeper.toml: {e}"))?;
            config = Some(file);
        }
    }
    let mut kinds = Vec::new();
    for value in documents {
        if value.is_null() {
            continue;
        }
        let kind = str_at(&value, &["kind"])?;
        let api = str_at(&value, &["apiVersion"])?;
        let name = str_at(&value, &["metadata", "name"])?;
        let cluster_scoped = matches!(
            kind,
            "ClusterRole" | "ClusterRoleBinding" | "CustomResourceDefinition"
        );
        match (api, kind) {
            ("v1", "ConfigMap" | "Service" | "ServiceAccount")
            | ("apps/v1", "DaemonSet")
            | (
                "rbac.authorization.k8s.io/v1",
                "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding",
            )
            | ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            | ("monitoring.coreos.com/v1", "PodMonitor" | "ServiceMonitor" | "PrometheusRule") => {}
            _ => return Err(format!("unexpected kind {api} {kind} ({name})")),
        }
        if !is_dns_subdomain(name) {
            return Err(format!("{kind} name {name:?} is not a DNS subdomain"));
        }
        let namespace = value["metadata"]["namespace"].as_str();
        if namespace != (!cluster_scoped).then_some("kube-system") {
            return Err(format!("{kind} {name}: namespace {namespace:?}"));
        }
        // The chart's crds/ are not templates (Helm installs them as they are): no labels.
        let labelled = kind != "CustomResourceDefinition";
        for label in [
            "helm.sh/chart",
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/version",
            "app.kubernetes.io/managed-by",
        ] {
            if labelled && value["metadata"]["labels"][label].as_str().is_none() {
                return Err(format!("{kind} {name} lacks the label {label}"));
            }
        }
        check_schema(kind, name, &value)?;
        match kind {
            "DaemonSet" => check_daemon_set(&value, preset, config.as_ref())?,
            "ClusterRole" => {
                let rules = serde_yaml_ng::to_string(&value["rules"]).map_err(|e| e.to_string())?;
                let (what, want) = if name.ends_with("-keep-sets") {
                    (
                        "keep sets",
                        "- apiGroups:\n  - imagekeeper.io\n  resources:\n  - keepsets\n  verbs:\n  - get\n  - list\n  - watch\n\
                         - apiGroups:\n  - ''\n  resources:\n  - nodes\n  verbs:\n  - get\n  - list\n  - watch\n\
                         - apiGroups:\n  - imagekeeper.io\n  resources:\n  - keepsetreports\n  verbs:\n  - get\n  - list\n  - create\n  - patch\n\
                         - apiGroups:\n  - imagekeeper.io\n  resources:\n  - keepsets/status\n  verbs:\n  - patch\n\
                         - apiGroups:\n  - apps\n  resources:\n  - deployments\n  - statefulsets\n  - daemonsets\n  - replicasets\n  verbs:\n  - get\n\
                         - apiGroups:\n  - batch\n  resources:\n  - jobs\n  - cronjobs\n  verbs:\n  - get\n\
                         - apiGroups:\n  - events.k8s.io\n  resources:\n  - events\n  verbs:\n  - create\n  - patch\n",
                    )
                } else if name.ends_with("-cluster-signals-secrets") {
                    (
                        "cluster signals' pull Secrets",
                        "- apiGroups:\n  - ''\n  resources:\n  - secrets\n  verbs:\n  - get\n",
                    )
                } else if name.ends_with("-cluster-signals") {
                    (
                        "cluster signals",
                        "- apiGroups:\n  - ''\n  resources:\n  - pods\n  verbs:\n  - list\n  - watch\n\
                         - apiGroups:\n  - apps\n  resources:\n  - daemonsets\n  - replicasets\n  verbs:\n  - list\n  - watch\n\
                         - apiGroups:\n  - batch\n  resources:\n  - cronjobs\n  verbs:\n  - list\n  - watch\n",
                    )
                } else {
                    (
                        "events",
                        "- apiGroups:\n  - events.k8s.io\n  resources:\n  - events\n  verbs:\n  - create\n  - patch\n",
                    )
                };
                if rules != want {
                    return Err(format!(
                        "the {what} ClusterRole grants more or less: {rules}"
                    ));
                }
            }
            "Role" if name.ends_with("-keep-set-secrets") => {
                let rules = serde_yaml_ng::to_string(&value["rules"]).map_err(|e| e.to_string())?;
                let want = "- apiGroups:\n  - ''\n  resources:\n  - secrets\n  verbs:\n  - get\n";
                if rules != want {
                    return Err(format!(
                        "the KeepSets' pull Secrets Role grants more or less: {rules}"
                    ));
                }
            }
            "Role" => {
                let rules = serde_yaml_ng::to_string(&value["rules"]).map_err(|e| e.to_string())?;
                let want = "- apiGroups:\n  - coordination.k8s.io\n  resources:\n  - leases\n  verbs:\n  - create\n\
                            - apiGroups:\n  - coordination.k8s.io\n  resources:\n  - leases\n  resourceNames:\n  - imagekeeper-keepset-counts\n  verbs:\n  - get\n  - update\n";
                if rules != want {
                    return Err(format!(
                        "the KeepSet counts' Role grants more or less: {rules}"
                    ));
                }
            }
            "ClusterRoleBinding" | "RoleBinding"
                if value["subjects"][0]["kind"].as_str() != Some("ServiceAccount")
                    || value["subjects"][0]["namespace"].as_str() != Some("kube-system") =>
            {
                return Err("the ClusterRoleBinding's subject".into());
            }
            "PrometheusRule" => {
                let rules: Value = serde_yaml_ng::from_str(
                    &std::fs::read_to_string(repo("deploy/monitoring/imagekeeper-rules.yaml"))
                        .map_err(|e| e.to_string())?,
                )
                .map_err(|e| e.to_string())?;
                if value["spec"]["groups"] != rules["groups"] {
                    return Err("the PrometheusRule's groups differ from the rules file".into());
                }
            }
            "ConfigMap" if name.ends_with("-dashboard") => {
                let json = str_at(&value, &["data", "imagekeeper.json"])?;
                let got: serde_json::Value =
                    serde_json::from_str(json).map_err(|e| format!("dashboard JSON: {e}"))?;
                let want: serde_json::Value = serde_json::from_str(
                    &std::fs::read_to_string(repo("deploy/monitoring/dashboard.json"))
                        .map_err(|e| e.to_string())?,
                )
                .map_err(|e| e.to_string())?;
                if got != want {
                    return Err("the dashboard ConfigMap differs from dashboard.json".into());
                }
                if value["metadata"]["labels"]["grafana_dashboard"].as_str() != Some("1") {
                    return Err("the dashboard ConfigMap lacks grafana_dashboard: \"1\"".into());
                }
            }
            "ConfigMap" => {
                // Parsed as the agent's config above.
                str_at(&value, &["data", "imagekeeper.toml"])?;
            }
            _ => {}
        }
        kinds.push(kind.to_owned());
    }
    kinds.sort();
    Ok(kinds)
}

/// The DaemonSet against the preset's paths and the agent's config file (`config`, the
/// ConfigMap's `imagekeeper.toml`).
fn check_daemon_set(
    ds: &Value,
    preset: &Preset,
    config: Option<&FileConfig>,
) -> Result<(), String> {
    let selector = ds["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .ok_or("no selector")?;
    for (key, want) in selector {
        if &ds["spec"]["template"]["metadata"]["labels"][key] != want {
            return Err(format!(
                "the pod template lacks the selector's label {key:?}"
            ));
        }
    }
    let pod = &ds["spec"]["template"]["spec"];
    let volumes: BTreeMap<&str, &Value> = pod["volumes"]
        .as_sequence()
        .ok_or("no volumes")?
        .iter()
        .map(|v| Ok((str_at(v, &["name"])?, v)))
        .collect::<Result<_, String>>()?;
    let containers = pod["containers"].as_sequence().ok_or("no containers")?;
    let [container] = containers.as_slice() else {
        return Err("one container expected".into());
    };
    let mut mounted_at = BTreeMap::new();
    for mount in container["volumeMounts"].as_sequence().ok_or("no mounts")? {
        let volume = str_at(mount, &["name"])?;
        let Some(source) = volumes.get(volume) else {
            return Err(format!("mounts volume {volume:?}, which is not defined"));
        };
        if let Some(host) = source["hostPath"]["path"].as_str() {
            let kind = str_at(source, &["hostPath", "type"])?;
            if !["Directory", "DirectoryOrCreate", "File"].contains(&kind) {
                return Err(format!("volume {volume}: hostPath type {kind}"));
            }
            mounted_at.insert(
                host.to_owned(),
                (
                    str_at(mount, &["mountPath"])?.to_owned(),
                    mount["readOnly"].as_bool().unwrap_or(false),
                ),
            );
        }
    }
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .ok_or("no args")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let want_endpoint = format!("--container-runtime-endpoint=unix://{}", preset.socket);
    if !args.contains(&want_endpoint.as_str()) {
        return Err(format!("no {want_endpoint} in {args:?}"));
    }
    let needs_account = args.contains(&"--events") || args.contains(&"--set=clusterSignals=true");
    if needs_account != pod["serviceAccountName"].as_str().is_some() {
        return Err("--events or clusterSignals and serviceAccountName go together".into());
    }
    if let Some(file) = args
        .iter()
        .find_map(|a| a.strip_prefix("--kubelet-config="))
        && mounted_at.get(file) != Some(&(file.to_owned(), true))
    {
        return Err(format!(
            "--kubelet-config={file} is not mounted read-only at its path"
        ));
    }
    // What the chart runs prints no deprecation warning: no flag the settings table deprecates
    // (the config file key, or `--set`, replaces it).
    for arg in &args {
        let flag = arg.split_once('=').map_or(*arg, |(flag, _)| flag);
        if let Some(field) = CONFIG_FIELDS
            .iter()
            .find(|f| f.flag_name == Some(flag) && f.flag_status == Some(FlagStatus::Deprecated))
        {
            return Err(format!(
                "{flag} is deprecated: the config file's {} replaces it",
                field.key
            ));
        }
    }
    // ConfigMap volumes: each mounted where the --config file's directory or the config's
    // warmSetDir says.
    let config_map_mounts: Vec<&str> = container["volumeMounts"]
        .as_sequence()
        .ok_or("no mounts")?
        .iter()
        .filter(|m| {
            m["name"]
                .as_str()
                .and_then(|v| volumes.get(v))
                .is_some_and(|v| v["configMap"]["name"].as_str().is_some())
        })
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    let config_file = args
        .iter()
        .find_map(|a| a.strip_prefix("--config="))
        .ok_or("no --config=")?;
    let config_dir = Path::new(config_file)
        .parent()
        .and_then(Path::to_str)
        .ok_or("--config names no directory")?;
    let warm_set_dir = config
        .and_then(|c| c.warm_set_dir.as_deref())
        .map(|d| d.to_str().ok_or("warmSetDir is not UTF-8"))
        .transpose()?;
    if !config_map_mounts.contains(&config_dir) {
        return Err(format!(
            "--config={config_file}: {config_dir} is not a ConfigMap volume's mount"
        ));
    }
    if let Some(dir) = warm_set_dir
        && !config_map_mounts.contains(&dir)
    {
        return Err(format!(
            "the config's warmSetDir {dir} is not a ConfigMap volume's mount"
        ));
    }
    if let Some(stray) = config_map_mounts
        .iter()
        .find(|at| **at != config_dir && Some(**at) != warm_set_dir)
    {
        return Err(format!(
            "a ConfigMap is mounted at {stray}, which neither --config nor the config's \
             warmSetDir names"
        ));
    }
    let want_sandbox = format!("--pod-infra-container-image={}", preset.sandbox_image);
    if !args.contains(&want_sandbox.as_str()) {
        return Err(format!("no {want_sandbox} in {args:?}"));
    }
    if !Path::new(&preset.socket).starts_with(&preset.socket_dir) {
        return Err(format!(
            "the socket {} is not in {}",
            preset.socket, preset.socket_dir
        ));
    }
    for (host, what) in [
        (&preset.socket_dir, "socket directory"),
        (&preset.root, "root"),
    ] {
        match mounted_at.get(host.as_str()) {
            Some((at, true)) if at == host => {}
            other => {
                return Err(format!(
                    "the runtime's {what} {host} must be mounted read-only at its own path: {other:?}"
                ));
            }
        }
    }
    if !volumes.contains_key(format!("{}-run", preset.volume_prefix).as_str()) {
        return Err(format!("no volume {}-run", preset.volume_prefix));
    }
    let port_names: Vec<&str> = container["ports"]
        .as_sequence()
        .ok_or("no ports")?
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let port = &container[probe]["httpGet"]["port"];
        if let Some(name) = port.as_str()
            && !port_names.contains(&name)
        {
            return Err(format!(
                "{probe} names port {name}, which the container lacks"
            ));
        }
    }
    Ok(())
}

/// An object of a Kubernetes kind against its schema: decoded into its k8s-openapi type and
/// encoded back, the first field that does not come back (unknown to the type: misspelt or
/// misplaced) is named by its path; a field of the wrong shape fails the decoding.
fn check_schema(kind: &str, name: &str, value: &Value) -> Result<(), String> {
    use k8s_openapi::api::{apps::v1 as apps, core::v1 as core, rbac::v1 as rbac};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    fn round_trip<T>(json: &serde_json::Value) -> Result<serde_json::Value, String>
    where
        T: serde::de::DeserializeOwned + serde::Serialize,
    {
        let typed: T = serde_json::from_value(json.clone()).map_err(|e| e.to_string())?;
        serde_json::to_value(&typed).map_err(|e| e.to_string())
    }
    let json = serde_json::to_value(value).map_err(|e| format!("{kind} {name}: {e}"))?;
    let back = match kind {
        "ConfigMap" => round_trip::<core::ConfigMap>(&json),
        "Service" => round_trip::<core::Service>(&json),
        "ServiceAccount" => round_trip::<core::ServiceAccount>(&json),
        "DaemonSet" => round_trip::<apps::DaemonSet>(&json),
        "ClusterRole" => round_trip::<rbac::ClusterRole>(&json),
        "ClusterRoleBinding" => round_trip::<rbac::ClusterRoleBinding>(&json),
        "Role" => round_trip::<rbac::Role>(&json),
        "RoleBinding" => round_trip::<rbac::RoleBinding>(&json),
        "CustomResourceDefinition" => round_trip::<apiextensions::CustomResourceDefinition>(&json),
        // The Prometheus Operator's kinds: no types here.
        _ => return Ok(()),
    }
    .map_err(|e| {
        format!(
            "{kind} {name}: does not decode as {} {kind}: {e}",
            str_at(value, &["apiVersion"]).unwrap_or("?")
        )
    })?;
    match first_lost(&json, &back, "") {
        None => Ok(()),
        Some(path) => Err(format!(
            "{kind} {name}: {path} is not a field of the {kind} schema (or not of its shape)"
        )),
    }
}

/// The path of the first field of `given` that `back` lacks or holds differently.
fn first_lost(given: &serde_json::Value, back: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value as J;
    match (given, back) {
        (J::Object(g), J::Object(b)) => g.iter().find_map(|(key, value)| {
            let at = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match b.get(key) {
                Some(kept) => first_lost(value, kept, &at),
                None => Some(at),
            }
        }),
        (J::Array(g), J::Array(b)) if g.len() == b.len() => g
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (g, b))| first_lost(g, b, &format!("{path}[{i}]"))),
        (g, b) => (g != b).then(|| path.to_owned()),
    }
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Result<&'a str, String> {
    let mut at = value;
    for key in path {
        at = &at[*key];
    }
    at.as_str()
        .ok_or_else(|| format!("no string at {}", path.join(".")))
}

/// RFC 1123 subdomain, as Kubernetes names most objects.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[test]
fn the_uninstall_notes_and_the_systemd_page_name_remove_runtime_pins() {
    // Runtime pins outlive the agent: whoever uninstalls must be told how to remove them.
    for (file, section) in [
        (
            "deploy/helm/imagekeeper/templates/NOTES.txt",
            "Uninstalling",
        ),
        (
            "docs/src/operators/install.md",
            "## Running as a systemd service",
        ),
    ] {
        let text = std::fs::read_to_string(repo(file)).expect(file);
        let at = text
            .find(section)
            .unwrap_or_else(|| panic!("{file} has no {section:?}"));
        let rest = &text[at..];
        // Up to the next section of the page.
        let end = rest[section.len()..]
            .find("\n## ")
            .map_or(rest.len(), |e| e + section.len());
        assert!(
            rest[..end].contains("imagekeeper remove-runtime-pins"),
            "{file}: the {section:?} section must name `imagekeeper remove-runtime-pins`"
        );
    }
}

/// The paths of `value`'s fields that `schema` (an OpenAPI v3 schema as a CRD writes it) does
/// not declare: server-side apply refuses such a body whole ("field not declared in schema").
fn undeclared(value: &serde_json::Value, schema: &Value, path: &str) -> Vec<String> {
    match value {
        serde_json::Value::Object(fields) => fields
            .iter()
            .flat_map(|(key, field)| {
                let at = format!("{path}.{key}");
                match schema["properties"].get(key.as_str()) {
                    Some(declared) => undeclared(field, declared, &at),
                    None => vec![at],
                }
            })
            .collect(),
        serde_json::Value::Array(items) => items
            .iter()
            .flat_map(|item| undeclared(item, &schema["items"], &format!("{path}[]")))
            .collect(),
        _ => Vec::new(),
    }
}

/// The `status` schema of the CRD file `name` under the chart's `crds/`.
fn crd_status_schema(name: &str) -> Value {
    let text = std::fs::read_to_string(repo(&format!("{CHART}/crds/{name}"))).expect("the CRD");
    let crd: Value = serde_yaml_ng::from_str(&text).expect("the CRD parses");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"].clone()
}

/// What the agents write by server-side apply, a node's KeepSetReport (every field of a set's
/// entry, a failure included) and the count's writer's KeepSet status (workloads' images and
/// unresolved ones included), declares only fields the chart's CRDs declare: the API server
/// refuses an apply naming any other, and the node's report would never be written.
#[test]
fn every_status_field_the_agents_apply_is_declared_in_the_charts_crds() {
    use imagekeeper::gc::{KeepSetMode, KeepSetReport};
    let reports = BTreeMap::from([(
        "gpu-rollout".to_owned(),
        KeepSetReport {
            generation: 2,
            images: 2,
            present: 1,
            pinned: 1,
            failed: 1,
            bytes: 100,
            failures: vec![("x:1".to_owned(), "not found".to_owned())],
            expired: false,
            mode: KeepSetMode::Warm,
        },
    )]);
    let report = imagekeeper::cluster::report_body("node-1", &reports);
    let missing = undeclared(
        &report["status"],
        &crd_status_schema("keepsetreports.yaml"),
        "status",
    );
    assert!(missing.is_empty(), "KeepSetReport: {missing:?}");
    let status = serde_json::to_value(imagekeeper::cluster::status_of(
        imagekeeper::cluster::FleetCount {
            matching: 2,
            ready: 1,
        },
        vec!["a:1".to_owned()],
        vec!["Deployment x/y: not found".to_owned()],
    ))
    .expect("a status serializes");
    let missing = undeclared(&status, &crd_status_schema("keepsets.yaml"), "status");
    assert!(missing.is_empty(), "KeepSet: {missing:?}");
}
