use super::*;
use k8s_openapi::api::batch::v1::{CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::super::test_specs::pod_spec;
use kube::api::ObjectMeta;

use crate::model::UnixNanos;

/// 2024-01-01T00:00:00Z.
const JAN_1: i64 = 1_704_067_200;
const S: i64 = 1_000_000_000;

fn cronjob(name: &str, schedule: &str, images: &[&str]) -> CronJob {
    CronJob {
        metadata: ObjectMeta {
            namespace: Some("batch".into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: CronJobSpec {
            schedule: schedule.into(),
            job_template: JobTemplateSpec {
                spec: Some(JobSpec {
                    template: PodTemplateSpec {
                        spec: Some(pod_spec(images)),
                        ..PodTemplateSpec::default()
                    },
                    ..JobSpec::default()
                }),
                ..JobTemplateSpec::default()
            },
            ..CronJobSpec::default()
        },
        ..CronJob::default()
    }
}

fn with_spec(mut cj: CronJob, f: impl FnOnce(&mut CronJobSpec)) -> CronJob {
    f(&mut cj.spec);
    cj
}

fn template(spec: &mut CronJobSpec) -> &mut PodSpec {
    spec.job_template
        .spec
        .as_mut()
        .and_then(|j| j.template.spec.as_mut())
        .expect("a pod template")
}

#[test]
fn a_cronjob_is_read_as_its_schedule_suspension_images_and_whether_it_names_this_node() {
    let read =
        cronjob_signal(&cronjob("etl", "0 2 * * *", &["reg/etl:1"]), "node-a").expect("readable");
    assert_eq!(read.images, ["reg/etl:1"]);
    assert!(!read.suspend && !read.here);
    assert_eq!(
        read.schedule.next_after(JAN_1),
        Some(JAN_1 + 7200),
        "02:00 UTC"
    );
    let suspended = with_spec(cronjob("etl", "@hourly", &["a:1"]), |s| {
        s.suspend = Some(true)
    });
    assert!(
        cronjob_signal(&suspended, "node-a")
            .expect("readable")
            .suspend
    );
    let by_name = with_spec(cronjob("etl", "@hourly", &["a:1"]), |s| {
        template(s).node_name = Some("node-a".into())
    });
    assert!(cronjob_signal(&by_name, "node-a").expect("readable").here);
    assert!(!cronjob_signal(&by_name, "node-b").expect("readable").here);
    let by_selector = with_spec(cronjob("etl", "@hourly", &["a:1"]), |s| {
        template(s).node_selector = Some([(HOSTNAME_LABEL.to_owned(), "node-a".to_owned())].into());
    });
    assert!(
        cronjob_signal(&by_selector, "node-a")
            .expect("readable")
            .here
    );
    for zone in ["UTC", "Etc/UTC"] {
        let utc = with_spec(cronjob("etl", "@hourly", &["a:1"]), |s| {
            s.time_zone = Some(zone.into())
        });
        assert!(cronjob_signal(&utc, "node-a").is_ok(), "{zone}");
    }
}

#[test]
fn a_cronjob_in_an_unknown_time_zone_or_with_a_bad_schedule_is_refused_with_the_reason() {
    let cases = [
        (
            with_spec(cronjob("a", "0 2 * * *", &["a:1"]), |s| {
                s.time_zone = Some("Mars/Olympus".into())
            }),
            "its timeZone: unknown time zone Mars/Olympus",
        ),
        (
            cronjob("b", "0 25 * * *", &["a:1"]),
            "its schedule \"0 25 * * *\"",
        ),
        (
            cronjob("c", "@every 5m", &["a:1"]),
            "its schedule \"@every 5m\"",
        ),
        (CronJob::default(), "its schedule \"\""),
    ];
    for (cj, want) in cases {
        let why = cronjob_signal(&cj, "n").expect_err("refused");
        assert!(why.contains(want), "{why}");
    }
}

/// The watch writes each CronJob's next run as a known use; a refused one is counted once
/// however often it is applied and holds nothing; a relist replaces the set once complete.
#[test]
fn the_watch_writes_next_runs_counts_a_refusal_once_and_relists_whole() {
    let signals = ClusterSignals::default();
    let mut watch = CronJobWatch::new(signals.clone(), "node-a".into());
    watch.apply(Event::Apply(cronjob("etl", "0 2 * * *", &["reg/etl:1"])));
    let known = signals.known_uses(UnixNanos(JAN_1 * S));
    assert_eq!(
        known.get("reg/etl:1"),
        Some(crate::gc::KnownUse::At(UnixNanos((JAN_1 + 7200) * S)))
    );
    // 02:00 in Berlin is 01:00 UTC in January (CET, UTC+1).
    let berlin = with_spec(cronjob("etl", "0 2 * * *", &["reg/etl:1"]), |s| {
        s.time_zone = Some("Europe/Berlin".into())
    });
    watch.apply(Event::Apply(berlin));
    assert_eq!(
        signals.known_uses(UnixNanos(JAN_1 * S)).get("reg/etl:1"),
        Some(crate::gc::KnownUse::At(UnixNanos((JAN_1 + 3600) * S))),
        "read in its time zone"
    );
    let unknown = with_spec(cronjob("etl", "0 2 * * *", &["reg/etl:1"]), |s| {
        s.time_zone = Some("Mars/Olympus".into())
    });
    watch.apply(Event::Apply(unknown.clone()));
    watch.apply(Event::Apply(unknown));
    assert_eq!(signals.refused(), 1, "counted once");
    assert!(
        signals.known_uses(UnixNanos(JAN_1 * S)).is_empty(),
        "a CronJob changed to an unknown time zone holds nothing"
    );
    watch.apply(Event::Apply(cronjob("etl", "0 2 * * *", &["reg/etl:1"])));
    watch.apply(Event::Init);
    watch.apply(Event::InitApply(cronjob(
        "report",
        "0 3 * * *",
        &["reg/report:1"],
    )));
    assert!(
        signals
            .known_uses(UnixNanos(JAN_1 * S))
            .get("reg/etl:1")
            .is_some(),
        "held until the relist completes"
    );
    watch.apply(Event::InitDone);
    let known = signals.known_uses(UnixNanos(JAN_1 * S));
    assert_eq!(known.get("reg/etl:1"), None);
    assert!(known.get("reg/report:1").is_some());
    watch.apply(Event::Delete(cronjob("report", "0 3 * * *", &[])));
    assert!(signals.known_uses(UnixNanos(JAN_1 * S)).is_empty());
}
