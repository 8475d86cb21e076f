use super::*;

/// Unix seconds of a UTC civil time (the inverse of `civil_from_days`, Hinnant's
/// `days_from_civil`).
fn utc(year: i64, month: u32, day: u32, hour: i64, minute: i64) -> i64 {
    days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60
}

fn next(spec: &str, after: i64) -> Option<i64> {
    CronSchedule::parse(spec)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .next_after(after)
}

#[test]
fn civil_dates_round_trip_over_four_centuries() {
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(utc(2024, 1, 1, 0, 0), 1_704_067_200);
    assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    for days in (-146_097..146_097).step_by(7) {
        let (y, m, d) = civil_from_days(days);
        assert_eq!(utc(y, m, d, 0, 0), days * 86_400, "{y}-{m}-{d}");
    }
}

/// Next runs as robfig/cron v3's `SpecSchedule.Next` gives them (the cases worked by hand from
/// its rules; 2024-01-01 is a Monday).
#[test]
fn the_next_run_follows_the_cronjob_controllers_rules() {
    let cases: &[(&str, i64, Option<i64>)] = &[
        // Strictly after: a run due at this very second is the next day's.
        (
            "0 2 * * *",
            utc(2024, 1, 1, 1, 59) + 30,
            Some(utc(2024, 1, 1, 2, 0)),
        ),
        (
            "0 2 * * *",
            utc(2024, 1, 1, 2, 0),
            Some(utc(2024, 1, 2, 2, 0)),
        ),
        (
            "0 2 * * *",
            utc(2024, 12, 31, 3, 0),
            Some(utc(2025, 1, 1, 2, 0)),
        ),
        (
            "*/15 * * * *",
            utc(2024, 1, 1, 10, 7),
            Some(utc(2024, 1, 1, 10, 15)),
        ),
        (
            "5/20 * * * *",
            utc(2024, 1, 1, 10, 46),
            Some(utc(2024, 1, 1, 11, 5)),
        ),
        (
            "* * * * *",
            utc(2024, 1, 1, 10, 7) + 59,
            Some(utc(2024, 1, 1, 10, 8)),
        ),
        (
            "? ? ? ? ?",
            utc(2024, 1, 1, 10, 7),
            Some(utc(2024, 1, 1, 10, 8)),
        ),
    ];
    check(cases);
}

/// The day rules (robfig's `dayMatches`: both restricted, either; one unrestricted, both),
/// names, leap days and the horizon.
#[test]
fn the_next_run_follows_the_controllers_day_rules() {
    let cases: &[(&str, i64, Option<i64>)] = &[
        // Day of month and day of week both restricted: either (1st of the month or Monday).
        (
            "0 0 1 * 1",
            utc(2024, 1, 2, 0, 0),
            Some(utc(2024, 1, 8, 0, 0)),
        ),
        (
            "0 0 1 * 3",
            utc(2024, 1, 27, 0, 0),
            Some(utc(2024, 1, 31, 0, 0)),
        ),
        // One unrestricted: both (every Monday).
        (
            "0 0 * * 1",
            utc(2024, 1, 2, 0, 0),
            Some(utc(2024, 1, 8, 0, 0)),
        ),
        (
            "0 0 ? * mon",
            utc(2024, 1, 2, 0, 0),
            Some(utc(2024, 1, 8, 0, 0)),
        ),
        // A step above 1 makes `*` restricted: odd days or Mondays.
        (
            "0 0 */2 * 1",
            utc(2024, 1, 1, 0, 0),
            Some(utc(2024, 1, 3, 0, 0)),
        ),
        (
            "0 0 */2 * 1",
            utc(2024, 1, 31, 0, 0),
            Some(utc(2024, 2, 1, 0, 0)),
        ),
        // `*/1` stays unrestricted: every Monday only.
        (
            "0 0 */1 * 1",
            utc(2024, 1, 1, 0, 0),
            Some(utc(2024, 1, 8, 0, 0)),
        ),
        (
            "30 12 * jan-mar mon-fri",
            utc(2024, 3, 29, 13, 0),
            Some(utc(2025, 1, 1, 12, 30)),
        ),
        (
            "0 0 29 2 *",
            utc(2023, 3, 1, 0, 0),
            Some(utc(2024, 2, 29, 0, 0)),
        ),
        (
            "0 0 29 2 *",
            utc(2024, 3, 1, 0, 0),
            Some(utc(2028, 2, 29, 0, 0)),
        ),
        // Never within robfig's horizon: none.
        ("0 0 30 2 *", utc(2024, 1, 1, 0, 0), None),
        ("0 0 31 4 *", utc(2024, 1, 1, 0, 0), None),
    ];
    check(cases);
}

/// The descriptors `ParseStandard` reads, and ranges with steps and names.
#[test]
fn the_next_run_of_descriptors_and_stepped_ranges() {
    let cases: &[(&str, i64, Option<i64>)] = &[
        (
            "@hourly",
            utc(2024, 1, 1, 10, 0),
            Some(utc(2024, 1, 1, 11, 0)),
        ),
        (
            "@daily",
            utc(2024, 1, 1, 10, 0),
            Some(utc(2024, 1, 2, 0, 0)),
        ),
        (
            "@midnight",
            utc(2024, 1, 1, 0, 0),
            Some(utc(2024, 1, 2, 0, 0)),
        ),
        (
            "@weekly",
            utc(2024, 1, 1, 10, 0),
            Some(utc(2024, 1, 7, 0, 0)),
        ),
        (
            "@monthly",
            utc(2024, 1, 1, 10, 0),
            Some(utc(2024, 2, 1, 0, 0)),
        ),
        (
            "@yearly",
            utc(2024, 1, 1, 0, 0),
            Some(utc(2025, 1, 1, 0, 0)),
        ),
        (
            "@annually",
            utc(2023, 6, 1, 0, 0),
            Some(utc(2024, 1, 1, 0, 0)),
        ),
        (
            "0 9-17/4 * * *",
            utc(2024, 1, 1, 14, 0),
            Some(utc(2024, 1, 1, 17, 0)),
        ),
        (
            "15,45 6 * * SUN",
            utc(2024, 1, 7, 6, 20),
            Some(utc(2024, 1, 7, 6, 45)),
        ),
        (
            "0 0 1 1 *",
            utc(1969, 6, 1, 0, 0),
            Some(utc(1970, 1, 1, 0, 0)),
        ),
    ];
    check(cases);
}

fn check(cases: &[(&str, i64, Option<i64>)]) {
    for (spec, after, want) in cases {
        assert_eq!(next(spec, *after), *want, "{spec} after {after}");
    }
}

/// Bad schedules are refused with the parser's reason, never a panic.
#[test]
fn malformed_schedules_are_refused_with_a_reason() {
    let cases: &[(&str, &str)] = &[
        ("", "empty spec string"),
        ("* * * *", "expected exactly 5 fields, found 4"),
        ("* * * * * *", "expected exactly 5 fields, found 6"),
        (
            "60 * * * *",
            "minute field \"60\": end of range (60) above maximum (59)",
        ),
        (
            "* 24 * * *",
            "hour field \"24\": end of range (24) above maximum (23)",
        ),
        (
            "* * 0 * *",
            "day of month field \"0\": beginning of range (0) below minimum (1)",
        ),
        ("* * 32 * *", "above maximum (31)"),
        (
            "* * * 13 *",
            "month field \"13\": end of range (13) above maximum (12)",
        ),
        (
            "* * * * 7",
            "day of week field \"7\": end of range (7) above maximum (6)",
        ),
        (
            "* * * * 5-2",
            "beginning of range (5) beyond end of range (2)",
        ),
        ("*/0 * * * *", "step of range should be a positive number"),
        ("*/-1 * * * *", "negative number (-1) not allowed"),
        ("1/2/3 * * * *", "too many slashes"),
        ("1-2-3 * * * *", "too many hyphens"),
        ("*-5 * * * *", "too many hyphens"),
        ("a * * * *", "failed to parse int from a"),
        ("1,,2 * * * *", "an empty list item"),
        ("- * * * *", "failed to parse int from "),
        ("* * * foo *", "failed to parse int from foo"),
        ("* * * * monday", "failed to parse int from monday"),
        ("@reboot", "unrecognized descriptor: @reboot"),
        ("@daily ", "unrecognized descriptor"),
        ("@every 1h", "@every is not simulated"),
        ("TZ=UTC 0 2 * * *", "cannot use TZ or CRON_TZ in schedule"),
        (
            "CRON_TZ=Europe/Paris 0 2 * * *",
            "cannot use TZ or CRON_TZ in schedule",
        ),
        ("99999999999 * * * *", "above maximum (59)"),
    ];
    for (spec, want) in cases {
        let err = CronSchedule::parse(spec).expect_err(spec).to_string();
        assert!(err.starts_with("invalid schedule "), "{err}");
        assert!(err.contains(want), "{spec:?}: {err:?} lacks {want:?}");
    }
}

/// Random strings of cron's characters: parsing never panics, and every schedule it accepts
/// gives as next run exactly what a minute-by-minute scan of the next eight days finds (or,
/// when the scan finds none, a run past them).
#[test]
fn random_fields_never_panic_and_accepted_schedules_agree_with_a_minute_scan() {
    let state = std::cell::Cell::new(0x1234_5678_9abc_def0u64);
    let rand = |n: u64| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x % n
    };
    let atoms = [
        "*", "?", "0", "1", "2", "5", "7", "12", "23", "31", "59", "60", "-", ",", "/", "mon",
        "JAN", "x", "", "*/2", "1-5", "10-3", "3/7",
    ];
    // Each field's bounds: mostly valid items, now and then garbage.
    let ranges: [(u64, u64); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)];
    let mut accepted = 0;
    for _ in 0..3000 {
        let fields = if rand(6) == 0 { 4 + rand(3) } else { 5 };
        let spec: Vec<String> = (0..fields as usize)
            .map(|f| {
                let (lo, hi) = ranges[f.min(4)];
                let num = || lo + rand(hi - lo + 2);
                (0..1 + rand(3))
                    .map(|_| match rand(9) {
                        0 => "*".to_owned(),
                        1 => "?".to_owned(),
                        2 => num().to_string(),
                        3 => format!("{}-{}", num(), num()),
                        4 => format!("*/{}", rand(8)),
                        5 => format!("{}/{}", num(), 1 + rand(7)),
                        6 => format!("{}-{}/{}", num(), num(), 1 + rand(7)),
                        _ => atoms[rand(atoms.len() as u64) as usize].to_owned(),
                    })
                    .collect::<Vec<String>>()
                    .join(",")
            })
            .collect();
        let spec = spec.join(" ");
        let Ok(schedule) = CronSchedule::parse(&spec) else {
            continue;
        };
        accepted += 1;
        let after = utc(2024, 2, 27, 0, 0) + rand(86_400 * 3) as i64;
        let got = schedule.next_after(after);
        let scan = (after / 60 + 1..after / 60 + 1 + 8 * 1440)
            .map(|m| m * 60)
            .find(|&t| matches_at(&schedule, t));
        match scan {
            Some(t) => assert_eq!(got, Some(t), "{spec:?} after {after}"),
            None => assert!(got.is_none_or(|t| t > after + 8 * 86_400), "{spec:?}"),
        }
    }
    assert!(accepted > 100, "schedules accepted: {accepted}");
}

/// Whether a whole minute `t` is one the schedule runs at (the scan's oracle).
fn matches_at(s: &CronSchedule, t: i64) -> bool {
    let day = t.div_euclid(86_400);
    let (_, month, dom) = civil_from_days(day);
    let minute_of_day = t.rem_euclid(86_400) / 60;
    s.months & (1 << month) != 0
        && s.day_matches(dom, (day + 4).rem_euclid(7) as u32)
        && s.hours & (1 << (minute_of_day / 60)) != 0
        && s.minutes & (1 << (minute_of_day % 60)) != 0
}

/// A schedule's [`CronSchedule::spec`] parses back to the same schedule, whatever form it
/// was written in (descriptors, steps, names, ranges, a restricted full range of days).
#[test]
fn a_schedule_written_back_as_its_spec_parses_to_the_same_schedule() {
    let cases = [
        ("0 2 * * *", "0 2 * * *"),
        ("*/15 * * * *", "0,15,30,45 * * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@yearly", "0 0 1 1 *"),
        ("@hourly", "0 * * * *"),
        ("0 9-17 * * mon-fri", "0 9-17 * * 1-5"),
        ("5 4 1-31 jan,mar *", "5 4 1-31 1,3 *"),
        ("30 6 ? * 0-6", "30 6 * * 0-6"),
        (
            "0 0 */2 * *",
            "0 0 1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31 * *",
        ),
    ];
    for (spec, want) in cases {
        let schedule = CronSchedule::parse(spec).expect(spec);
        assert_eq!(schedule.spec(), want, "{spec}");
        assert_eq!(
            CronSchedule::parse(&schedule.spec()).ok(),
            Some(schedule),
            "{spec}"
        );
    }
    let fields = ["*", "1", "1-3", "*/7", "2,5-6", "?"];
    for m in fields {
        for dom in fields {
            for dow in fields {
                let spec = format!("{m} {m} {dom} * {dow}");
                let Ok(schedule) = CronSchedule::parse(&spec) else {
                    continue;
                };
                assert_eq!(
                    CronSchedule::parse(&schedule.spec()).ok(),
                    Some(schedule),
                    "{spec}"
                );
            }
        }
    }
}
