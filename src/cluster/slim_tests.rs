use super::*;
use crate::cluster::{
    controller_daemonset, controller_job, cronjob_signal, daemonset_images, pod_images,
    replicaset_revision,
};
use serde_json::{Value, json};

/// Metadata as an API server sends it: every field, the read ones among them.
fn metadata(owner: Value, annotations: Value) -> Value {
    json!({
        "name": "web-1", "namespace": "shop", "uid": "0b5e-11", "resourceVersion": "4711",
        "generation": 3, "creationTimestamp": "2026-11-01T00:00:00Z",
        "labels": {"app": "web", "pod-template-hash": "5d8f"},
        "annotations": annotations,
        "ownerReferences": owner,
        "finalizers": ["example.com/hold"],
        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
            "time": "2026-11-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}],
    })
}

/// A pod spec as a workload carries it: the read fields beside probes, env, resources,
/// tolerations and volumes of other kinds.
fn pod_spec() -> Value {
    json!({
        "nodeName": "node-a",
        "nodeSelector": {"kubernetes.io/hostname": "node-a", "disk": "ssd"},
        "initContainers": [{"name": "migrate", "image": "registry.example/migrate:2",
            "command": ["/bin/migrate"], "env": [{"name": "A", "value": "1"}]}],
        "containers": [
            {"name": "main", "image": "registry.example/web:1.4", "ports": [{"containerPort": 8080}],
             "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
             "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}},
            {"name": "no-image-yet"},
            {"name": "sidecar", "image": "registry.example/proxy:0.9", "imagePullPolicy": "IfNotPresent"}
        ],
        "ephemeralContainers": [{"name": "debugger", "image": "busybox:1.36", "targetContainerName": "main"}],
        "volumes": [
            {"name": "model", "image": {"reference": "registry.example/model:7", "pullPolicy": "IfNotPresent"}},
            {"name": "config", "configMap": {"name": "web-config"}},
            {"name": "scratch", "emptyDir": {}}
        ],
        "imagePullSecrets": [{"name": "regcred"}, {}],
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "restartPolicy": "Always",
    })
}

fn owner(api_version: &str, kind: &str, name: &str) -> Value {
    json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-the-controller", "uid": "1"},
        {"apiVersion": api_version, "kind": kind, "name": name, "uid": "2", "controller": true,
         "blockOwnerDeletion": true}
    ])
}

/// `json` decoded as the full type and as its slim one.
fn both<K: SlimKind + DeserializeOwned>(json: &Value) -> (K, K) {
    let full: K = serde_json::from_value(json.clone()).expect("the full type decodes it");
    let slim: Slim<K> = serde_json::from_value(json.clone()).expect("the slim type decodes it");
    (full, slim.0)
}

fn same_meta(full: &ObjectMeta, slim: &ObjectMeta) {
    assert_eq!(slim.name, full.name);
    assert_eq!(slim.namespace, full.namespace);
    assert_eq!(slim.resource_version, full.resource_version);
    assert!(full.labels.is_some() && full.managed_fields.is_some());
    assert!(
        slim.labels.is_none() && slim.managed_fields.is_none() && slim.uid.is_none(),
        "the fields not read are not built: {slim:?}"
    );
}

#[test]
fn a_slim_pod_gives_every_signal_the_full_pod_gives_and_builds_nothing_else() {
    for (api_version, kind) in [("apps/v1", "DaemonSet"), ("batch/v1", "Job")] {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": metadata(owner(api_version, kind, "web"), json!({"kubectl.kubernetes.io/restartedAt": "x"})),
            "spec": pod_spec(),
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null}],
                "containerStatuses": [{"name": "main", "image": "registry.example/web:1.4", "imageID": "sha256:1",
                    "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-11-01T00:00:00Z"}}}]},
        });
        let (full, slim): (Pod, Pod) = both(&pod);
        same_meta(&full.metadata, &slim.metadata);
        assert_eq!(pod_images(&slim), pod_images(&full));
        assert_eq!(pod_images(&slim).len(), 5, "{:?}", pod_images(&slim));
        assert_eq!(controller_daemonset(&slim), controller_daemonset(&full));
        assert_eq!(controller_job(&slim), controller_job(&full));
        let secrets = |p: &Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.image_pull_secrets.clone())
                .map(|rs| rs.into_iter().map(|r| r.name).collect::<Vec<_>>())
        };
        assert_eq!(secrets(&slim), secrets(&full));
        assert_eq!(
            secrets(&slim),
            Some(vec!["regcred".to_owned(), String::new()])
        );
        assert!(full.status.is_some() && slim.status.is_none());
        // `null` where a list or a map may be, as some clients write them.
        pod["spec"]["initContainers"] = Value::Null;
        pod["metadata"]["annotations"] = Value::Null;
        pod["metadata"]["ownerReferences"] = Value::Null;
        let (full, slim): (Pod, Pod) = both(&pod);
        assert_eq!(pod_images(&slim), pod_images(&full));
        assert_eq!(controller_job(&slim), None);
    }
    // A pod with no spec (a watch's DELETED tombstone may carry only metadata).
    let (full, slim): (Pod, Pod) = both(&json!({"metadata": {"name": "gone", "namespace": "ns"}}));
    assert_eq!(pod_images(&slim), pod_images(&full));
    assert_eq!(slim.metadata.name.as_deref(), Some("gone"));
}

#[test]
fn a_slim_cronjob_reads_the_same_schedule_zone_suspension_images_and_node() {
    let cases = [
        json!({"schedule": "0 2 * * *", "timeZone": "Europe/Berlin", "suspend": false,
               "startingDeadlineSeconds": 200, "concurrencyPolicy": "Forbid",
               "jobTemplate": {"metadata": {"labels": {"a": "b"}},
                   "spec": {"backoffLimit": 2, "template": {"spec": pod_spec()}}}}),
        json!({"schedule": "*/5 * * * *", "suspend": true,
               "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "j", "image": "job:1"}]}}}}}),
        json!({"schedule": "@hourly", "jobTemplate": {}}),
        json!({"schedule": "not a schedule", "jobTemplate": {"spec": {"template": {}}}}),
    ];
    for spec in cases {
        let cronjob = json!({"metadata": metadata(Value::Null, json!({})), "spec": spec,
            "status": {"lastScheduleTime": "2026-12-01T02:00:00Z", "active": []}});
        let (full, slim): (CronJob, CronJob) = both(&cronjob);
        same_meta(&full.metadata, &slim.metadata);
        for node in ["node-a", "node-b"] {
            assert_eq!(
                cronjob_signal(&slim, node),
                cronjob_signal(&full, node),
                "{spec}"
            );
        }
        assert!(slim.status.is_none());
    }
}

#[test]
fn a_slim_daemonset_and_replicaset_give_the_same_template_images_and_revision() {
    let daemonset = json!({
        "metadata": metadata(Value::Null, json!({"deprecated.daemonset.template.generation": "4"})),
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "updateStrategy": {"type": "RollingUpdate"},
                 "template": {"metadata": {"labels": {"app": "agent"}}, "spec": pod_spec()}},
        "status": {"numberReady": 46, "desiredNumberScheduled": 46},
    });
    let (full, slim): (DaemonSet, DaemonSet) = both(&daemonset);
    same_meta(&full.metadata, &slim.metadata);
    assert_eq!(daemonset_images(&slim), daemonset_images(&full));
    assert_eq!(daemonset_images(&slim).len(), 5);
    let annotations = json!({
        "deployment.kubernetes.io/desired-replicas": "2",
        REVISION_ANNOTATION: "12",
        "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"apps/v1\"}",
    });
    for (owner, annotations) in [
        (owner("apps/v1", "Deployment", "web"), annotations.clone()),
        (owner("apps/v1", "Deployment", "web"), json!({"other": "1"})),
        (owner("apps/v1", "StatefulSet", "db"), annotations.clone()),
        (Value::Null, annotations),
    ] {
        let replicaset = json!({
            "metadata": metadata(owner, annotations),
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec()}},
            "status": {"replicas": 0, "observedGeneration": 3},
        });
        let (full, slim): (ReplicaSet, ReplicaSet) = both(&replicaset);
        same_meta(&full.metadata, &slim.metadata);
        assert_eq!(replicaset_revision(&slim), replicaset_revision(&full));
        assert!(
            slim.metadata
                .annotations
                .iter()
                .flatten()
                .all(|(k, _)| k == REVISION_ANNOTATION),
            "only the revision is kept: {:?}",
            slim.metadata.annotations
        );
    }
    let (_, slim): (ReplicaSet, ReplicaSet) = both(&json!({
        "metadata": metadata(owner("apps/v1", "Deployment", "web"), json!({REVISION_ANNOTATION: "12"}))
    }));
    assert_eq!(
        replicaset_revision(&slim).map(|r| (r.deployment, r.revision)),
        Some(("shop/web".to_owned(), 12))
    );
}

#[test]
fn a_slim_object_is_listed_and_watched_under_the_full_types_resource() {
    use kube::{Resource, ResourceExt};
    assert_eq!(Slim::<Pod>::url_path(&(), None), Pod::url_path(&(), None));
    assert_eq!(
        Slim::<CronJob>::url_path(&(), Some("ns")),
        CronJob::url_path(&(), Some("ns"))
    );
    assert_eq!(Slim::<ReplicaSet>::kind(&()), "ReplicaSet");
    assert_eq!(Slim::<DaemonSet>::api_version(&()), "apps/v1");
    let mut slim = Slim(Pod::default());
    slim.meta_mut().resource_version = Some("9".into());
    assert_eq!(slim.resource_version().as_deref(), Some("9"));
    assert!(matches!(
        unslim(Event::Apply(slim)),
        Event::Apply(Pod { .. })
    ));
}
