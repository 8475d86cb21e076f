use super::*;
use crate::gc::predictive::known_place;

const S: i64 = SEC;

fn at(s: i64) -> UnixNanos {
    UnixNanos(s * S)
}

fn cron(spec: &str, suspend: bool, images: &[&str]) -> CronJobSignal {
    CronJobSignal {
        schedule: CronSchedule::parse(spec).expect("a schedule"),
        zone: crate::gc::CronZone::utc(),
        suspend,
        images: images.iter().map(|i| (*i).to_owned()).collect(),
        here: false,
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
    assert_eq!(known.get("web:2"), Some(KnownUse::Current));
    signals.set_rollout("shop/web".into(), names(&["web:3"]), names(&["web:2"]));
    let known = signals.known_uses(at(JAN_1));
    assert_eq!(known.get("web:2"), Some(KnownUse::Rollback));
    assert_eq!(known.get("web:1"), Some(KnownUse::Superseded));
    // `kubectl rollout undo`: web:2 again, web:3 its previous.
    signals.set_rollout("shop/web".into(), names(&["web:2"]), names(&["web:3"]));
    let known = signals.known_uses(at(JAN_1));
    assert_eq!(known.get("web:3"), Some(KnownUse::Rollback));
    assert_eq!(known.get("web:2"), Some(KnownUse::Current));
    assert_eq!(known.get("web:1"), Some(KnownUse::Superseded));
    // An image another workload runs now is never superseded by this one's history.
    signals.set_rollout("shop/admin".into(), names(&["web:1"]), vec![]);
    assert_eq!(
        signals.known_uses(at(JAN_1)).get("web:1"),
        Some(KnownUse::Current)
    );
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
        (Rollback, Current, Current),
        (Current, At(at(5)), At(at(5))),
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

/// The rule's order, on places alone (smaller: removed first): superseded first, with the
/// images not expected again; images with no known use by their estimates; the rollback set
/// as if used in a week (after the images expected no sooner, before those expected sooner);
/// a CronJob's image by its run's time among the estimates; needed now last.
#[test]
fn the_known_use_replaces_the_estimate_in_the_order() {
    let now = at(JAN_1);
    let hour = 3600;
    let week = 7 * 86_400;
    // (name, estimate in seconds (None: not expected), known use)
    let images: Vec<(&str, Option<i64>, Option<KnownUse>)> = vec![
        ("needed", Some(30 * 86_400), Some(KnownUse::Now)),
        ("rollback", None, Some(KnownUse::Rollback)),
        ("superseded-revision", Some(60), Some(KnownUse::Superseded)),
        (
            "cron-in-5m",
            Some(week),
            Some(KnownUse::At(at(JAN_1 + 300))),
        ),
        (
            "cron-in-3d",
            Some(60),
            Some(KnownUse::At(at(JAN_1 + 3 * 86_400))),
        ),
        ("estimated-1h", Some(hour), None),
        ("estimated-2d", Some(2 * 86_400), None),
        ("one-off-prior", Some(week), None),
        ("idle-30d", Some(30 * 86_400), None),
        ("not-expected", None, None),
        ("current-one-off", Some(week), Some(KnownUse::Current)),
        ("current-superseded-tag", None, Some(KnownUse::Current)),
        ("current-hot", Some(60), Some(KnownUse::Current)),
    ];
    let place_of = |(name, estimate, known): &(&'static str, Option<i64>, Option<KnownUse>)| {
        let bucket = estimate.map(|s| crate::gc::predictive::bucket(s as u64));
        (known_place(bucket, *known, now), *name)
    };
    let mut order: Vec<(u32, &str)> = images.iter().map(place_of).collect();
    order.sort();
    let names: Vec<&str> = order.iter().map(|(_, n)| *n).collect();
    assert_eq!(
        names,
        [
            "not-expected",
            "superseded-revision",
            "idle-30d",
            "one-off-prior",
            "rollback",
            "current-one-off",
            "current-superseded-tag",
            "cron-in-3d",
            "estimated-2d",
            "estimated-1h",
            "cron-in-5m",
            "current-hot",
            "needed",
        ],
        "{order:?}"
    );
    // With no known use the places keep the estimates' order (a larger bucket first).
    let buckets = |i: &(&'static str, Option<i64>, Option<KnownUse>)| {
        i.1.map(|s| crate::gc::predictive::bucket(s as u64))
    };
    let mut plain: Vec<(u32, &str)> = images
        .iter()
        .map(|i| (known_place(buckets(i), None, now), i.0))
        .collect();
    plain.sort();
    let mut by_bucket: Vec<(std::cmp::Reverse<u32>, &str)> = images
        .iter()
        .map(|i| (std::cmp::Reverse(buckets(i).unwrap_or(u32::MAX)), i.0))
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

/// The lead: a CronJob's images are due from `lead` before its next run until the run, the
/// nearest run (this node's first) naming an image wins, and the timer's next instant is when
/// a run enters the lead or a due run passes. A zero lead keeps nothing.
#[test]
fn a_cronjobs_images_are_due_from_the_lead_before_its_run_until_the_run() {
    let signals = ClusterSignals::default();
    signals.set_cronjob(
        "batch/nightly".into(),
        cron("0 2 * * *", false, &["etl:1", "base:1"]),
    );
    signals.set_cronjob(
        "batch/here".into(),
        CronJobSignal {
            here: true,
            ..cron("30 2 * * *", false, &["base:1"])
        },
    );
    let two = JAN_1 + 7200;
    assert!(
        signals.due_within_lead(at(two - 60)).is_empty(),
        "no lead: nothing due"
    );
    assert_eq!(signals.next_lead_change(at(two - 60), |_, _| true), None);
    signals.set_lead(std::time::Duration::from_secs(600));
    assert!(signals.due_within_lead(at(two - 601)).is_empty());
    assert_eq!(
        signals.next_lead_change(at(two - 601), |_, _| true),
        Some(at(two - 600))
    );
    let due = signals.due_within_lead(at(two - 600));
    assert_eq!(due.keys().collect::<Vec<_>>(), ["base:1", "etl:1"]);
    assert_eq!(due["etl:1"].cronjob, "batch/nightly");
    assert_eq!(
        due["etl:1"].source(),
        "CronJob batch/nightly runs at 2024-01-01T02:00:00Z"
    );
    assert_eq!(
        due["base:1"].cronjob, "batch/nightly",
        "the other run is not due yet"
    );
    // Both due: this node's run wins for the shared image.
    let due = signals.due_within_lead(at(two + 1200));
    assert_eq!(due["base:1"].cronjob, "batch/here");
    assert!(due["base:1"].here);
    // Within the lead, the next change is the run passing; at the run, still due.
    assert_eq!(
        signals.next_lead_change(at(two - 300), |_, _| true),
        Some(UnixNanos(at(two).0 + 1))
    );
    assert!(signals.due_within_lead(at(two)).contains_key("etl:1"));
    assert!(
        !signals.due_within_lead(at(two + 1)).contains_key("etl:1"),
        "ran: tomorrow"
    );
    signals.set_cronjob("batch/nightly".into(), cron("0 2 * * *", true, &["etl:1"]));
    assert!(
        !signals.due_within_lead(at(two - 60)).contains_key("etl:1"),
        "suspended"
    );
    signals.set_lead(MAX_CRONJOB_LEAD * 2);
    assert_eq!(signals.lead(), MAX_CRONJOB_LEAD, "capped");
}

/// The agent's timers read only the CronJobs whose keep can change something on the node:
/// the filter leaves the others out, and the detect records which CronJobs name a listed
/// image (told once per change of that set).
#[tokio::test(start_paused = true)]
async fn the_lead_timer_reads_only_the_cronjobs_the_node_holds_an_image_of() {
    use crate::gc::detect::ListedImages;
    use crate::model::{ImageId, RuntimeImage};
    let signals = ClusterSignals::default();
    signals.set_lead(std::time::Duration::from_secs(600));
    signals.set_cronjob("batch/early".into(), cron("0 1 * * *", false, &["early:1"]));
    signals.set_cronjob("batch/late".into(), cron("0 2 * * *", false, &["late:1"]));
    let now = at(JAN_1);
    assert_eq!(
        signals.next_lead_change(now, |_, _| true),
        Some(at(JAN_1 + 3600 - 600))
    );
    assert_eq!(signals.next_lead_change(now, |_, _| false), None);
    let listed = |tags: &[&str]| {
        ListedImages::new(
            tags.iter()
                .enumerate()
                .map(|(i, tag)| RuntimeImage {
                    id: ImageId::new(format!("sha256:{i}")),
                    repo_tags: vec![format!("docker.io/library/{tag}")],
                    size: 1,
                    ..RuntimeImage::default()
                })
                .collect::<Vec<_>>(),
        )
    };
    signals.note_listed(&listed(&["late:1", "other:1"]));
    assert!(signals.cronjob_present("batch/late"));
    assert!(!signals.cronjob_present("batch/early"));
    tokio::time::timeout(std::time::Duration::from_secs(1), signals.present_changed())
        .await
        .expect("the set changed: told");
    assert_eq!(
        signals.next_lead_change(now, |name, _| signals.cronjob_present(name)),
        Some(at(JAN_1 + 7200 - 600)),
        "the early CronJob's image is not here: its run does not wake the detect"
    );
    signals.note_listed(&listed(&["late:1"]));
    assert!(
        tokio::time::timeout(std::time::Duration::from_secs(1), signals.present_changed())
            .await
            .is_err(),
        "the same set: not told"
    );
    signals.set_lead(std::time::Duration::ZERO);
    signals.note_listed(&listed(&["late:1"]));
    assert!(!signals.cronjob_present("batch/late"), "no lead: none read");
}
