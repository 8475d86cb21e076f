use super::*;

const S: i64 = SEC;

fn at(s: i64) -> UnixNanos {
    UnixNanos(s * S)
}

fn cron(spec: &str, suspend: bool, images: &[&str]) -> CronJobSignal {
    CronJobSignal {
        schedule: CronSchedule::parse(spec).expect("a schedule"),
        suspend,
        images: images.iter().map(|i| (*i).to_owned()).collect(),
    }
}

fn names(images: &[&str]) -> Vec<String> {
    images.iter().map(|i| (*i).to_owned()).collect()
}

/// 2024-01-01T00:00:00Z.
const JAN_1: i64 = 1_704_067_200;

#[test]
fn a_cronjobs_images_are_known_at_its_next_run_unless_it_is_suspended() {
    let signals = ClusterSignals::default();
    signals.set_cronjob(
        "batch/nightly".into(),
        cron("0 2 * * *", false, &["reg/etl:1"]),
    );
    signals.set_cronjob(
        "batch/paused".into(),
        cron("0 3 * * *", true, &["reg/old:1"]),
    );
    let known = signals.known_uses(at(JAN_1 + 3600));
    assert_eq!(known.get("reg/etl:1"), Some(KnownUse::At(at(JAN_1 + 7200))));
    assert_eq!(known.get("reg/old:1"), None, "suspended: no run");
    // A run due at this very second is still to come; one a second past is tomorrow's.
    let known = signals.known_uses(at(JAN_1 + 7200));
    assert_eq!(known.get("reg/etl:1"), Some(KnownUse::At(at(JAN_1 + 7200))));
    let known = signals.known_uses(at(JAN_1 + 7201));
    assert_eq!(
        known.get("reg/etl:1"),
        Some(KnownUse::At(at(JAN_1 + 86_400 + 7200)))
    );
    // Two CronJobs naming one image: the earlier run.
    signals.set_cronjob(
        "batch/hourly".into(),
        cron("@hourly", false, &["reg/etl:1"]),
    );
    let known = signals.known_uses(at(JAN_1 + 7201));
    assert_eq!(
        known.get("reg/etl:1"),
        Some(KnownUse::At(at(JAN_1 + 3 * 3600)))
    );
    signals.remove_cronjob("batch/hourly");
    signals.set_cronjob(
        "batch/nightly".into(),
        cron("0 2 * * *", true, &["reg/etl:1"]),
    );
    assert!(
        signals.known_uses(at(JAN_1)).is_empty(),
        "suspended later: nothing known"
    );
}

#[test]
fn a_rollout_makes_the_previous_revision_the_rollback_set_and_older_ones_superseded() {
    let signals = ClusterSignals::default();
    signals.set_rollout("shop/web".into(), names(&["web:2"]), names(&["web:1"]));
    let known = signals.known_uses(at(JAN_1));
    assert_eq!(known.get("web:1"), Some(KnownUse::Rollback));
    assert_eq!(
        known.get("web:2"),
        None,
        "the current revision: its estimate stands"
    );
    signals.set_rollout("shop/web".into(), names(&["web:3"]), names(&["web:2"]));
    let known = signals.known_uses(at(JAN_1));
    assert_eq!(known.get("web:2"), Some(KnownUse::Rollback));
    assert_eq!(known.get("web:1"), Some(KnownUse::Superseded));
    // `kubectl rollout undo`: web:2 again, web:3 its previous.
    signals.set_rollout("shop/web".into(), names(&["web:2"]), names(&["web:3"]));
    let known = signals.known_uses(at(JAN_1));
    assert_eq!(known.get("web:3"), Some(KnownUse::Rollback));
    assert_eq!(known.get("web:2"), None);
    assert_eq!(known.get("web:1"), Some(KnownUse::Superseded));
    // An image another workload runs now is never superseded by this one's history.
    signals.set_rollout("shop/admin".into(), names(&["web:1"]), vec![]);
    assert_eq!(signals.known_uses(at(JAN_1)).get("web:1"), None);
    // A CronJob's run is nearer than a rollback.
    signals.set_cronjob("shop/warm".into(), cron("@daily", false, &["web:3"]));
    assert_eq!(
        signals.known_uses(at(JAN_1 + 1)).get("web:3"),
        Some(KnownUse::At(at(JAN_1 + 86_400)))
    );
}

#[test]
fn the_nearest_known_use_wins() {
    use KnownUse::*;
    let cases = [
        (Superseded, Rollback, Rollback),
        (Rollback, At(at(5)), At(at(5))),
        (At(at(9)), At(at(5)), At(at(5))),
        (At(at(5)), Now, Now),
        (Superseded, Superseded, Superseded),
        (Now, Superseded, Now),
    ];
    for (a, b, want) in cases {
        assert_eq!(a.nearer(b), want);
        assert_eq!(b.nearer(a), want);
        let mut known = KnownUses::default();
        known.insert("x".into(), a);
        known.insert("x".into(), b);
        assert_eq!(known.get("x"), Some(want));
    }
}

/// The rule's order, on places alone (smaller: removed first): superseded first; images with
/// no known use by their estimates; the rollback set after every one of them; a CronJob's
/// image by its run's time among the estimates (after a rollback image at the same place);
/// needed now last.
#[test]
fn the_known_use_replaces_the_estimate_in_the_order() {
    let now = at(JAN_1);
    let hour = 3600;
    // (name, estimate in seconds (None: not expected), known use)
    let images: Vec<(&str, Option<i64>, Option<KnownUse>)> = vec![
        ("needed", Some(30 * 86_400), Some(KnownUse::Now)),
        ("rollback", None, Some(KnownUse::Rollback)),
        ("superseded-revision", Some(60), Some(KnownUse::Superseded)),
        (
            "cron-in-5m",
            Some(7 * 86_400),
            Some(KnownUse::At(at(JAN_1 + 300))),
        ),
        (
            "cron-in-3d",
            Some(60),
            Some(KnownUse::At(at(JAN_1 + 3 * 86_400))),
        ),
        ("estimated-1h", Some(hour), None),
        ("estimated-2d", Some(2 * 86_400), None),
        ("one-off", None, None),
    ];
    let buckets: Vec<Option<u32>> = images
        .iter()
        .map(|(_, e, _)| e.map(|s| crate::gc::predictive::bucket(s as u64)))
        .collect();
    let floor = rollback_floor(buckets.iter().zip(&images).map(|(b, i)| (*b, i.2)));
    let mut order: Vec<(u32, &str)> = images
        .iter()
        .zip(&buckets)
        .map(|((name, _, known), bucket)| (place(*bucket, *known, floor, now), *name))
        .collect();
    order.sort();
    let names: Vec<&str> = order.iter().map(|(_, n)| *n).collect();
    assert_eq!(
        names,
        [
            "one-off",
            "superseded-revision",
            "cron-in-3d",
            "estimated-2d",
            "estimated-1h",
            "rollback",
            "cron-in-5m",
            "needed",
        ],
        "{order:?}"
    );
    // With no known use the places keep the estimates' order (a larger bucket first).
    let mut plain: Vec<(u32, &str)> = images
        .iter()
        .zip(&buckets)
        .map(|((name, _, _), bucket)| (place(*bucket, None, 0, now), *name))
        .collect();
    plain.sort();
    let mut by_bucket: Vec<(std::cmp::Reverse<u32>, &str)> = images
        .iter()
        .zip(&buckets)
        .map(|((name, _, _), bucket)| (std::cmp::Reverse(bucket.unwrap_or(u32::MAX)), *name))
        .collect();
    by_bucket.sort();
    assert_eq!(
        plain.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        by_bucket.iter().map(|(_, n)| *n).collect::<Vec<_>>()
    );
}

/// Whatever is declared, the set holds at most the caps: more CronJobs or workloads are
/// refused and counted, each one's images and a workload's superseded images are bounded.
#[test]
fn the_declarations_are_bounded_and_what_is_refused_is_counted() {
    let signals = ClusterSignals::default();
    for i in 0..MAX_CRONJOBS + 3 {
        signals.set_cronjob(format!("ns/cj{i:05}"), cron("@daily", false, &["a:1"]));
    }
    assert_eq!(signals.refused(), 3);
    let many: Vec<String> = (0..MAX_SIGNAL_IMAGES + 10)
        .map(|i| format!("i:{i:04}"))
        .collect();
    signals.set_cronjob(
        "ns/cj00000".into(),
        CronJobSignal {
            images: many.clone(),
            ..cron("@daily", false, &[])
        },
    );
    let known = signals.known_uses(at(JAN_1));
    assert_eq!(
        known.iter().filter(|(n, _)| n.starts_with("i:")).count(),
        MAX_SIGNAL_IMAGES
    );
    for i in 0..MAX_SUPERSEDED + 5 {
        signals.set_rollout(
            "ns/web".into(),
            vec![format!("web:{}", i + 2)],
            vec![format!("web:{}", i + 1)],
        );
    }
    let known = signals.known_uses(at(JAN_1));
    let superseded = known
        .iter()
        .filter(|(_, k)| *k == KnownUse::Superseded)
        .count();
    assert_eq!(superseded, MAX_SUPERSEDED);
    // The newest are kept.
    assert_eq!(
        known.get(&format!("web:{}", MAX_SUPERSEDED + 4)),
        Some(KnownUse::Superseded)
    );
    assert_eq!(known.get("web:0"), None);
}
