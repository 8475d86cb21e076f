use super::*;

/// Unix seconds of an RFC 3339 UTC time.
fn at(text: &str) -> i64 {
    text.parse::<Timestamp>()
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .as_second()
}

/// Each case: the zone, the schedule, the time after which, robfig's next run.
#[rustfmt::skip]
const ROBFIG_CASES: &[(&str, &str, &str, &str)] = &[
    ("America/New_York", "30 2 * * *", "2026-03-07T12:00:00Z", "2026-03-09T06:30:00Z"),
    ("America/New_York", "30 2 * * *", "2026-03-08T00:00:00Z", "2026-03-09T06:30:00Z"),
    ("America/New_York", "30 1 * * *", "2026-11-01T04:00:00Z", "2026-11-01T05:30:00Z"),
    ("America/New_York", "30 1 * * *", "2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"),
    ("America/New_York", "30 * * * *", "2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z"),
    ("America/New_York", "30 * * * *", "2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"),
    ("America/New_York", "30 * * * *", "2026-11-01T06:30:00Z", "2026-11-01T07:30:00Z"),
    ("America/New_York", "0 0 * * *", "2026-03-07T12:00:00Z", "2026-03-08T05:00:00Z"),
    ("America/New_York", "*/15 2 * * *", "2026-03-08T06:00:00Z", "2026-03-09T06:00:00Z"),
    ("America/New_York", "0 3 * * *", "2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z"),
    ("Europe/Berlin", "30 2 * * *", "2026-03-28T12:00:00Z", "2026-03-30T00:30:00Z"),
    ("Europe/Berlin", "30 2 * * *", "2026-10-24T12:00:00Z", "2026-10-25T00:30:00Z"),
    ("Europe/Berlin", "30 2 * * *", "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"),
    ("Europe/Berlin", "0 2 * * 0", "2026-10-20T00:00:00Z", "2026-10-25T00:00:00Z"),
    ("Europe/Berlin", "0 9 1 * *", "2026-12-01T00:00:00Z", "2026-12-01T08:00:00Z"),
    ("Asia/Kolkata", "0 2 * * *", "2026-12-01T00:00:00Z", "2026-12-01T20:30:00Z"),
    ("Asia/Kathmandu", "15 0 * * *", "2026-12-01T00:00:00Z", "2026-12-01T18:30:00Z"),
    ("Australia/Lord_Howe", "15 2 * * *", "2026-10-03T00:00:00Z", "2026-10-04T15:15:00Z"),
    ("Australia/Lord_Howe", "45 1 * * *", "2027-04-03T00:00:00Z", "2027-04-03T14:45:00Z"),
    ("America/Sao_Paulo", "0 0 * * *", "2026-11-01T00:00:00Z", "2026-11-01T03:00:00Z"),
    ("America/Santiago", "0 0 * * *", "2026-09-05T12:00:00Z", "2026-09-07T03:00:00Z"),
    ("Pacific/Apia", "0 12 * * *", "2026-12-01T00:00:00Z", "2026-12-01T23:00:00Z"),
    ("Europe/London", "@daily", "2026-03-28T23:30:00Z", "2026-03-29T00:00:00Z"),
    ("Europe/London", "@hourly", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z"),
    ("Europe/London", "@weekly", "2026-12-01T00:00:00Z", "2026-12-06T00:00:00Z"),
    ("Europe/London", "@monthly", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"),
    ("Europe/London", "0 1 29 2 *", "2026-12-01T00:00:00Z", "2028-02-29T01:00:00Z"),
    ("America/New_York", "0 2 8 3 *", "2026-01-01T00:00:00Z", "2027-03-08T07:00:00Z"),
    ("Asia/Tokyo", "0 9 * * 1-5", "2026-12-04T23:59:59Z", "2026-12-07T00:00:00Z"),
    ("America/Los_Angeles", "59 23 31 12 *", "2026-12-31T00:00:00Z", "2027-01-01T07:59:00Z"),
    // The hour's start built just after a transition (Go's second lookup decides it).
    ("America/New_York", "0 4 * * *", "2026-03-08T07:10:00Z", "2026-03-08T08:00:00Z"),
    ("America/New_York", "0 2 * * *", "2026-11-01T06:10:00Z", "2026-11-01T07:00:00Z"),
    ("America/Chicago", "10 3 * * *", "2026-03-08T08:20:00Z", "2026-03-09T08:10:00Z"),
    ("Europe/Berlin", "0 4 * * *", "2026-03-29T01:10:00Z", "2026-03-29T02:00:00Z"),
];

/// Next runs in a zone as the CronJob controller computes them: each expected time is what
/// robfig/cron v3.0.1's `ParseStandard("TZ=<zone> <schedule>").Next(after)` printed, run with
/// Go 1.26's time zone database. The cases cross the zones' transitions: a run in a
/// spring-forward gap is skipped that day, a fall-back repeats a run, a midnight a transition
/// skips (America/Santiago), a half-hour shift (Australia/Lord_Howe), zones off UTC by half and
/// three quarters of an hour, and leap days, month ends and year ends in a zone.
#[test]
fn the_next_run_in_a_time_zone_is_robfigs_across_transitions() {
    let cases = ROBFIG_CASES;
    let mut wrong = Vec::new();
    for &(zone, spec, after, want) in cases {
        let schedule = CronSchedule::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let zone = CronZone::named(zone).unwrap_or_else(|e| panic!("{e}"));
        let got = schedule.next_after_in(at(after), &zone);
        if got != Some(at(want)) {
            wrong.push(format!(
                "{} {spec:?} after {after}: {got:?}, robfig {}",
                zone.name(),
                at(want)
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// robfig's walk in the zone UTC gives the same runs as the day walk `next_after`, which the
/// CronJobs without a zone take: over seeded schedules of every field kind and times across
/// four years.
#[test]
fn robfigs_walk_in_utc_equals_the_utc_day_walk() {
    let specs = [
        "0 2 * * *",
        "*/15 * * * *",
        "5/20 1-3 * * *",
        "0 0 29 2 *",
        "30 23 31 * *",
        "0 12 * * 1-5",
        "15 6 1,15 * 0",
        "0 0 13 * 5",
        "@hourly",
        "@weekly",
        "@monthly",
        "@yearly",
        "59 23 31 12 *",
        "0 0 30 2 *",
    ];
    let mut rng = fastrand::Rng::with_seed(55);
    let start = at("2024-01-01T00:00:00Z");
    for spec in specs {
        let schedule = CronSchedule::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        for _ in 0..200 {
            let after = start + rng.i64(0..4 * 366 * 86_400);
            assert_eq!(
                schedule.next_after_in_zone(after, &TimeZone::UTC),
                schedule.next_after(after),
                "{spec:?} after {after}"
            );
        }
    }
}

#[test]
fn a_zone_is_named_by_the_iana_database_and_utc_takes_the_day_walk() {
    assert!(CronZone::named("UTC").is_ok_and(|z| z.is_utc()));
    assert!(CronZone::named("Etc/UTC").is_ok_and(|z| z.is_utc()));
    let berlin = CronZone::named("Europe/Berlin").unwrap_or_else(|e| panic!("{e}"));
    assert!(!berlin.is_utc());
    assert_eq!(berlin.name(), "Europe/Berlin");
    assert_eq!(CronZone::utc().name(), "UTC");
    for bad in ["Mars/Olympus", "", "../../etc/passwd", "Europe/Berlin "] {
        assert_eq!(
            CronZone::named(bad),
            Err(format!("unknown time zone {bad}")),
            "{bad:?}"
        );
    }
}

/// Times at the ends of jiff's range, and schedules no date satisfies, end the walk with no run
/// instead of a panic or an endless loop.
#[test]
fn no_time_and_no_schedule_panics_or_walks_forever() {
    let zone = CronZone::named("America/New_York").unwrap_or_else(|e| panic!("{e}"));
    let never = CronSchedule::parse("0 0 30 2 *").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(never.next_after_in(at("2026-01-01T00:00:00Z"), &zone), None);
    let hourly = CronSchedule::parse("@hourly").unwrap_or_else(|e| panic!("{e}"));
    for after in [i64::MIN, i64::MAX, -377_705_116_800, 253_402_300_799] {
        let _ = hourly.next_after_in(after, &zone);
    }
}
