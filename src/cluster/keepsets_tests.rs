use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, Time};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

#[test]
fn a_selector_selects_as_the_api_servers_label_selectors_do() {
    let node = labels(&[("gpu", "a100"), ("zone", "z1")]);
    let by_labels = |pairs: &[(&str, &str)]| LabelSelector {
        match_labels: Some(labels(pairs)),
        match_expressions: None,
    };
    let by_expr = |r: LabelSelectorRequirement| LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![r]),
    };
    let cases: Vec<(&str, LabelSelector, bool)> = vec![
        ("empty selects every node", LabelSelector::default(), true),
        ("a label it has", by_labels(&[("gpu", "a100")]), true),
        (
            "a label's other value",
            by_labels(&[("gpu", "h100")]),
            false,
        ),
        (
            "every pair must hold",
            by_labels(&[("gpu", "a100"), ("x", "y")]),
            false,
        ),
        (
            "In",
            by_expr(requirement("gpu", "In", &["h100", "a100"])),
            true,
        ),
        ("In, absent", by_expr(requirement("x", "In", &["a"])), false),
        (
            "NotIn",
            by_expr(requirement("gpu", "NotIn", &["a100"])),
            false,
        ),
        (
            "NotIn, absent",
            by_expr(requirement("x", "NotIn", &["a"])),
            true,
        ),
        ("Exists", by_expr(requirement("zone", "Exists", &[])), true),
        (
            "DoesNotExist",
            by_expr(requirement("zone", "DoesNotExist", &[])),
            false,
        ),
        (
            "unknown operator",
            by_expr(requirement("zone", "Gt", &["1"])),
            false,
        ),
    ];
    for (what, selector, want) in cases {
        assert_eq!(selects(&selector, &node), want, "{what}");
    }
}

fn object(name: &str, spec: serde_json::Value) -> KeepSetObject {
    let mut object: KeepSetObject = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "generation": 2 },
        "spec": spec,
    }))
    .expect("a KeepSet object");
    object.metadata.creation_timestamp =
        Some(Time("2026-11-30T10:00:00Z".parse().expect("a timestamp")));
    object
}

#[test]
fn a_sets_lifetime_is_its_until_or_its_creation_plus_its_duration_or_none() {
    let created = crate::format::parse_rfc3339("2026-11-30T10:00:00Z").expect("a time");
    let cases = [
        (serde_json::json!({"images": ["x:1"]}), Ok(UnixNanos::NEVER)),
        (
            serde_json::json!({"images": ["x:1"], "until": "2026-12-01T00:00:00Z"}),
            Ok(crate::format::parse_rfc3339("2026-12-01T00:00:00Z").expect("a time")),
        ),
        (
            serde_json::json!({"images": ["x:1"], "duration": "1h30m"}),
            Ok(UnixNanos(created.0 + 5_400_000_000_000)),
        ),
        (
            serde_json::json!({"images": ["x:1"], "duration": "1h", "until": "2026-12-01T00:00:00Z"}),
            Err("both until and duration"),
        ),
        (
            serde_json::json!({"duration": "soon"}),
            Err("spec.duration"),
        ),
        (serde_json::json!({"until": "tomorrow"}), Err("spec.until")),
        (serde_json::json!({"mode": "cold"}), Err("pin and warm are")),
    ];
    let modes = [
        (serde_json::json!({}), KeepSetMode::Pin),
        (serde_json::json!({"mode": "pin"}), KeepSetMode::Pin),
        (serde_json::json!({"mode": "warm"}), KeepSetMode::Warm),
    ];
    for (spec, mode) in modes {
        let set = keep_set_of(&object("s", spec.clone())).expect("a mode read");
        assert_eq!(set.mode, mode, "{spec}");
    }
    for (spec, want) in cases {
        let got = keep_set_of(&object("s", spec.clone()));
        match (want, got) {
            (Ok(until), Ok(set)) => {
                assert_eq!(set.until, until, "{spec}");
                assert_eq!(set.generation, 2);
            }
            (Err(part), Err(why)) => assert!(why.contains(part), "{spec}: {why}"),
            (want, got) => panic!("{spec}: want {want:?}, got {got:?}"),
        }
    }
}

/// A set naming workloads keeps its own images, then the workloads' images its status says
/// (as the Lease's holder resolved them), each once; without a status, only its own.
#[test]
fn a_sets_images_are_its_own_then_its_workloads_as_its_status_gives_them() {
    let spec = serde_json::json!({
        "images": ["own:1", "shared:1"],
        "workloads": [{"kind": "Deployment", "namespace": "web", "name": "front"}],
    });
    let mut set = object("s", spec);
    assert_eq!(
        keep_set_of(&set).expect("read").images,
        ["own:1", "shared:1"]
    );
    set.status = serde_json::from_value(serde_json::json!({
        "matching": 1, "ready": 0, "nodes": "0/1",
        "workloadImages": ["front:2", "shared:1", "sidecar:7"],
    }))
    .expect("a status");
    assert_eq!(
        keep_set_of(&set).expect("read").images,
        ["own:1", "shared:1", "front:2", "sidecar:7"]
    );
    let reference = &set.spec.workloads[0];
    assert_eq!(reference.to_string(), "Deployment web/front");
}

#[test]
fn sets_reach_the_handle_only_once_listed_and_the_nodes_labels_read_and_follow_the_labels() {
    let handle = NodeKeepSets::default();
    let mut watch = KeepSetWatch::new(handle.clone());
    let gpu = object(
        "gpu",
        serde_json::json!({"images": ["model:2"], "nodeSelector": {"matchLabels": {"gpu": "yes"}}}),
    );
    let all = object(
        "all",
        serde_json::json!({"images": ["base:1"], "nodeSelector": {}}),
    );
    let bad = object(
        "bad",
        serde_json::json!({"images": ["x:1"], "nodeSelector": {}, "mode": "cold"}),
    );
    watch.apply_set(Event::Init);
    watch.apply_set(Event::InitApply(gpu.clone()));
    watch.apply_set(Event::InitApply(all));
    watch.apply_set(Event::InitApply(bad));
    watch.apply_set(Event::InitDone);
    assert!(!handle.is_synced(), "no labels yet: nothing is written");
    let mut node = Node::default();
    node.metadata.labels = Some(labels(&[("gpu", "yes")]));
    watch.apply_node(Event::InitApply(node.clone()));
    assert!(handle.is_synced());
    let names = |h: &NodeKeepSets| h.sets().into_iter().map(|s| s.name).collect::<Vec<_>>();
    assert_eq!(names(&handle), ["all", "gpu"]);
    node.metadata.labels = Some(labels(&[("gpu", "no")]));
    watch.apply_node(Event::Apply(node));
    assert_eq!(names(&handle), ["all"]);
    watch.apply_set(Event::Delete(gpu));
    assert_eq!(names(&handle), ["all"]);
}
