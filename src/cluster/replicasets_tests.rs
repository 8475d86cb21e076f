use super::*;
use k8s_openapi::api::apps::v1::ReplicaSetSpec;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

use super::super::test_specs::pod_spec;
use crate::gc::KnownUse;
use crate::model::UnixNanos;

fn replicaset(
    name: &str,
    deployment: Option<&str>,
    revision: Option<&str>,
    images: &[&str],
) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            namespace: Some("web".into()),
            name: Some(name.into()),
            annotations: revision.map(|r| [(REVISION_ANNOTATION.to_owned(), r.to_owned())].into()),
            owner_references: deployment.map(|d| {
                vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: d.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        },
        spec: ReplicaSetSpec {
            template: Some(PodTemplateSpec {
                spec: Some(pod_spec(images)),
                ..PodTemplateSpec::default()
            }),
            ..ReplicaSetSpec::default()
        },
        ..ReplicaSet::default()
    }
}

#[test]
fn a_replicaset_is_read_as_its_deployment_revision_and_images_or_not_at_all() {
    let read = replicaset_revision(&replicaset("api-5d", Some("api"), Some("3"), &["api:3"]));
    assert_eq!(
        read,
        Some(ReplicaSetRevision {
            deployment: "web/api".into(),
            revision: 3,
            images: vec!["api:3".into()],
        })
    );
    assert_eq!(
        replicaset_revision(&replicaset("bare", None, Some("1"), &["a:1"])),
        None
    );
    assert_eq!(
        replicaset_revision(&replicaset("norev", Some("api"), None, &["a:1"])),
        None
    );
    assert_eq!(
        replicaset_revision(&replicaset("bad", Some("api"), Some("x"), &["a:1"])),
        None
    );
}

#[test]
fn the_newest_revision_is_current_the_one_before_the_rollback_set_older_ones_superseded() {
    // (revisions' images, current, previous, superseded)
    type Case = (
        Vec<(u64, &'static [&'static str])>,
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
    );
    let cases: [Case; 4] = [
        (vec![], &[], &[], &[]),
        (vec![(1, &["api:1"])], &["api:1"], &[], &[]),
        (
            vec![
                (2, &["api:2"]),
                (4, &["api:4"]),
                (3, &["api:3"]),
                (1, &["api:1"]),
            ],
            &["api:4"],
            &["api:3"],
            &["api:1", "api:2"],
        ),
        // An undo: revision 5 is revision 3's template again; an image kept by a newer
        // revision is never superseded.
        (
            vec![
                (5, &["api:3", "side:1"]),
                (4, &["api:4", "side:1"]),
                (2, &["api:2", "side:1"]),
            ],
            &["api:3", "side:1"],
            &["api:4", "side:1"],
            &["api:2"],
        ),
    ];
    for (sets, current, previous, superseded) in cases {
        let sets = sets
            .into_iter()
            .map(|(r, i)| (r, i.iter().map(|s| (*s).to_owned()).collect()))
            .collect();
        let revisions = revisions_of(sets);
        assert_eq!(revisions.current, current);
        assert_eq!(revisions.previous, previous);
        assert_eq!(revisions.superseded, superseded, "newest last");
    }
}

/// A rollout seen through the watch: each new ReplicaSet moves the revisions, a deletion
/// (revisionHistoryLimit) forgets one, and the known uses follow; a relist replaces them.
#[test]
fn the_watch_turns_a_rollout_and_its_undo_into_rollback_and_superseded_known_uses() {
    let signals = ClusterSignals::default();
    let mut watch = ReplicaSetWatch::new(signals.clone());
    let known = |image: &str| signals.known_uses(UnixNanos(0)).get(image);
    watch.apply(Event::Apply(replicaset(
        "api-1",
        Some("api"),
        Some("1"),
        &["api:1"],
    )));
    assert_eq!(known("api:1"), Some(KnownUse::Current));
    watch.apply(Event::Apply(replicaset(
        "api-2",
        Some("api"),
        Some("2"),
        &["api:2"],
    )));
    assert_eq!(known("api:2"), Some(KnownUse::Current));
    assert_eq!(known("api:1"), Some(KnownUse::Rollback));
    watch.apply(Event::Apply(replicaset(
        "api-3",
        Some("api"),
        Some("3"),
        &["api:3"],
    )));
    assert_eq!(known("api:1"), Some(KnownUse::Superseded));
    assert_eq!(known("api:2"), Some(KnownUse::Rollback));
    // `kubectl rollout undo`: the Deployment controller gives api-2 revision 4.
    watch.apply(Event::Apply(replicaset(
        "api-2",
        Some("api"),
        Some("4"),
        &["api:2"],
    )));
    assert_eq!(known("api:2"), Some(KnownUse::Current));
    assert_eq!(known("api:3"), Some(KnownUse::Rollback));
    watch.apply(Event::Delete(replicaset(
        "api-1",
        Some("api"),
        Some("1"),
        &["api:1"],
    )));
    assert_eq!(known("api:1"), None, "forgotten with its ReplicaSet");
    // A ReplicaSet no Deployment controls says nothing.
    watch.apply(Event::Apply(replicaset(
        "solo",
        None,
        Some("1"),
        &["solo:1"],
    )));
    assert_eq!(known("solo:1"), None);
    watch.apply(Event::Init);
    watch.apply(Event::InitApply(replicaset(
        "db-1",
        Some("db"),
        Some("1"),
        &["db:1"],
    )));
    assert_eq!(
        known("api:2"),
        Some(KnownUse::Current),
        "held until complete"
    );
    watch.apply(Event::InitDone);
    assert_eq!(known("api:2"), None);
    assert_eq!(known("db:1"), Some(KnownUse::Current));
    let sample = signals.sample(UnixNanos(0));
    assert_eq!(sample, None, "no watch started: no sample");
}

/// At most MAX_REPLICASETS are held (here 4 revisions of each of MAX_WORKLOADS Deployments,
/// the signals' own cap): one more is refused and counted, while a held one is still updated
/// (its new revision replaces the old: not a new ReplicaSet), and a delete makes room again.
#[test]
fn replicasets_past_the_cap_are_refused_and_counted_and_a_held_one_still_updates() {
    let signals = ClusterSignals::default();
    let mut watch = ReplicaSetWatch::new(signals.clone());
    let health = signals.replicasets_watch_health();
    for i in 0..MAX_REPLICASETS {
        watch.apply(Event::Apply(replicaset(
            &format!("rs-{i}"),
            Some(&format!("d-{}", i / 4)),
            Some(&(1 + i % 4).to_string()),
            &[&format!("img-{i}")],
        )));
    }
    assert_eq!(health.refused(), 0);
    let known = |image: &str| signals.known_uses(UnixNanos(0)).get(image);
    watch.apply(Event::Apply(replicaset(
        "one-too-many",
        Some("extra"),
        Some("1"),
        &["extra:1"],
    )));
    assert_eq!(health.refused(), 1, "refused and counted");
    assert_eq!(known("extra:1"), None);
    // A held ReplicaSet's update (an undo's new revision) is held.
    assert_eq!(known("img-0"), Some(KnownUse::Superseded));
    watch.apply(Event::Apply(replicaset(
        "rs-0",
        Some("d-0"),
        Some("5"),
        &["img-0"],
    )));
    assert_eq!(health.refused(), 1);
    assert_eq!(known("img-0"), Some(KnownUse::Current));
    assert_eq!(known("img-3"), Some(KnownUse::Rollback));
    watch.apply(Event::Delete(replicaset(
        "rs-4",
        Some("d-1"),
        Some("1"),
        &["img-4"],
    )));
    // A ReplicaSet of a Deployment already held (the signals' workload cap is full too).
    watch.apply(Event::Apply(replicaset(
        "rs-new",
        Some("d-1"),
        Some("5"),
        &["new:5"],
    )));
    assert_eq!(health.refused(), 1, "room again after a delete");
    assert_eq!(known("new:5"), Some(KnownUse::Current));
}
