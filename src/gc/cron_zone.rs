//! A CronJob's `spec.timeZone` and its next run in that zone, as the CronJob controller computes
//! it: the controller parses `TZ=<timeZone> <schedule>` (kubernetes
//! pkg/controller/cronjob/utils.go, `formatSchedule`), so robfig/cron v3's `SpecSchedule.Next`
//! (kubernetes vendor/github.com/robfig/cron/v3/spec.go) walks the zone's local fields: it
//! converts the time into the zone, then moves month, day, hour, minute and second forward
//! field by field, building each start of a field with Go's `time.Date` in that zone and adding
//! whole hours and minutes in absolute time. Written here from those rules, so that the zone's
//! transitions give the controller's answers, not a calendar's: a local time a spring-forward
//! skips has no run that day, a local time a fall-back repeats can run twice (an hourly field
//! sees both), and a midnight a transition skips is corrected as robfig corrects it.
//!
//! Go's `time.Date` (src/time/time.go) normalizes out-of-range fields and reads a local time
//! with two lookups: the zone's offset at the local time read as UTC, then, unless the instant
//! so found lies in that same zone period, the offset at that instant. `go_date` keeps both
//! steps; the offsets come from the IANA time zone database jiff embeds (`tzdb-bundle-always`,
//! so that the agent's image needs no zoneinfo).
//!
//! Invariants: UTC (`CronZone::utc`, and a `timeZone` of `UTC` or `Etc/UTC`) takes
//! `CronSchedule::next_after`, the same answers (a test compares both walks); the walk is
//! bounded (robfig's five-year horizon, and at most [`MAX_STEPS`] field steps); no input
//! panics: a time outside jiff's range (years -9999..9999) has no next run.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::cron::{CronSchedule, civil_from_days, days_from_civil};

/// At most this many field steps in one walk (robfig's loops are bounded by its five-year
/// horizon; this bounds them whatever a zone's transitions do).
const MAX_STEPS: u32 = 1_000_000;

/// The time zone a CronJob's schedule is read in: none is UTC (the controller manager's local
/// time, UTC in the control plane's images), or an IANA zone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CronZone(Option<TimeZone>);

impl CronZone {
    /// UTC.
    pub fn utc() -> CronZone {
        CronZone(None)
    }

    /// The zone of a `spec.timeZone`: `UTC` and `Etc/UTC` are UTC; any other name must be in
    /// the IANA database (the API server refuses a CronJob whose zone Go cannot load).
    pub fn named(name: &str) -> Result<CronZone, String> {
        if matches!(name, "UTC" | "Etc/UTC") {
            return Ok(CronZone::utc());
        }
        TimeZone::get(name)
            .map(|tz| CronZone(Some(tz)))
            .map_err(|_| format!("unknown time zone {name}"))
    }

    /// The zone's IANA name, or `UTC`.
    pub fn name(&self) -> &str {
        self.0
            .as_ref()
            .and_then(TimeZone::iana_name)
            .unwrap_or("UTC")
    }

    /// Whether this is UTC.
    pub fn is_utc(&self) -> bool {
        self.0.is_none()
    }
}

/// A local time's fields in a zone, as Go's accessors give them.
#[derive(Clone, Copy, Debug)]
struct Local {
    year: i64,
    month: u32,
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    weekday: u32,
}

/// The zone's offset from UTC at unix second `at`, in seconds.
fn offset_at(tz: &TimeZone, at: i64) -> Option<i64> {
    let instant = Timestamp::from_second(at).ok()?;
    Some(i64::from(tz.to_offset(instant).seconds()))
}

/// The local fields of unix second `at` in `tz`.
fn local(tz: &TimeZone, at: i64) -> Option<Local> {
    let wall = at.checked_add(offset_at(tz, at)?)?;
    let days = wall.div_euclid(86_400);
    let of_day = wall.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    Some(Local {
        year,
        month,
        day,
        hour: of_day / 3600,
        minute: of_day % 3600 / 60,
        second: of_day % 60,
        weekday: (days + 4).rem_euclid(7) as u32,
    })
}

/// Go's `time.Date(year, month, day, hour, minute, second, 0, tz)` in unix seconds: fields out
/// of range carry over (month 13 is next January, day 0 the last of the month before), then the
/// local time is read with Go's two lookups (see the module's text).
fn go_date(
    tz: &TimeZone,
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
) -> Option<i64> {
    let months_from_january = month.checked_sub(1)?;
    let year = year.checked_add(months_from_january.div_euclid(12))?;
    let month = months_from_january.rem_euclid(12) as u32 + 1;
    let days = days_from_civil(year, month, 1).checked_add(day.checked_sub(1)?)?;
    let wall = days
        .checked_mul(86_400)?
        .checked_add(hour.checked_mul(3600)?)?
        .checked_add(minute.checked_mul(60)?)?
        .checked_add(second)?;
    let guess = offset_at(tz, wall)?;
    let offset = offset_at(tz, wall.checked_sub(guess)?)?;
    wall.checked_sub(offset)
}

impl CronSchedule {
    /// The first run strictly after `after_s` (unix seconds) with the schedule read in `zone`,
    /// in unix seconds; `None` past robfig's five-year horizon (or [`MAX_STEPS`]).
    pub fn next_after_in(&self, after_s: i64, zone: &CronZone) -> Option<i64> {
        match &zone.0 {
            None => self.next_after(after_s),
            Some(tz) => self.next_after_in_zone(after_s, tz),
        }
    }

    /// robfig's `Next` in `tz`, step for step (its `added` flag, its wraps, its midnight
    /// correction); the seconds field of a standard schedule is 0 alone.
    pub(super) fn next_after_in_zone(&self, after_s: i64, tz: &TimeZone) -> Option<i64> {
        let mut walk = Walk {
            schedule: self,
            tz,
            t: after_s.checked_add(1)?,
            added: false,
            steps: 0,
        };
        let year_limit = local(tz, walk.t)?.year + 5;
        let fields: [FieldStep<'_>; 5] = [
            Walk::month,
            Walk::day,
            Walk::hour,
            Walk::minute,
            Walk::second,
        ];
        'wrap: loop {
            walk.step()?;
            let mut l = local(tz, walk.t)?;
            if l.year > year_limit {
                return None;
            }
            for field in fields {
                match field(&mut walk, l)? {
                    Field::Matches(now) => l = now,
                    Field::Wrapped => continue 'wrap,
                }
            }
            return Some(walk.t);
        }
    }
}

/// How one field's loop ended: the time matches it (its local fields), or a carry wrapped
/// into the field above (robfig's `goto WRAP`).
enum Field {
    Matches(Local),
    Wrapped,
}

/// One field's loop.
type FieldStep<'a> = fn(&mut Walk<'a>, Local) -> Option<Field>;

/// robfig's walk in progress: the time `t` (unix seconds), whether a field was moved
/// (`added`), and the steps taken.
struct Walk<'a> {
    schedule: &'a CronSchedule,
    tz: &'a TimeZone,
    t: i64,
    added: bool,
    steps: u32,
}

impl Walk<'_> {
    /// Counts a step; `None` past [`MAX_STEPS`].
    fn step(&mut self) -> Option<()> {
        self.steps += 1;
        (self.steps <= MAX_STEPS).then_some(())
    }

    /// Moves to `t` and reads its local fields.
    fn to(&mut self, t: i64) -> Option<Local> {
        self.t = t;
        local(self.tz, t)
    }

    /// The month loop: a month that does not match starts the next at its first midnight.
    fn month(&mut self, mut l: Local) -> Option<Field> {
        while !self.schedule.has_month(l.month) {
            self.step()?;
            if !self.added {
                self.added = true;
                l = self.to(go_date(self.tz, l.year, i64::from(l.month), 1, 0, 0, 0)?)?;
            }
            let (day, month) = (i64::from(l.day), i64::from(l.month) + 1);
            l = self.to(go_date(
                self.tz, l.year, month, day, l.hour, l.minute, l.second,
            )?)?;
            if l.month == 1 {
                return Some(Field::Wrapped);
            }
        }
        Some(Field::Matches(l))
    }

    /// The day loop: a day that does not match moves to the next, and a midnight the zone
    /// skips or repeats is moved back to midnight (robfig's correction).
    fn day(&mut self, mut l: Local) -> Option<Field> {
        while !self.schedule.day_matches(l.day, l.weekday) {
            self.step()?;
            let (month, day) = (i64::from(l.month), i64::from(l.day));
            if !self.added {
                self.added = true;
                l = self.to(go_date(self.tz, l.year, month, day, 0, 0, 0)?)?;
            }
            let (month, day) = (i64::from(l.month), i64::from(l.day) + 1);
            l = self.to(go_date(
                self.tz, l.year, month, day, l.hour, l.minute, l.second,
            )?)?;
            if l.hour != 0 {
                let t = if l.hour > 12 {
                    self.t.checked_add((24 - l.hour) * 3600)?
                } else {
                    self.t.checked_sub(l.hour * 3600)?
                };
                l = self.to(t)?;
            }
            if l.day == 1 {
                return Some(Field::Wrapped);
            }
        }
        Some(Field::Matches(l))
    }

    /// The hour loop: whole hours in absolute time from the hour's start.
    fn hour(&mut self, mut l: Local) -> Option<Field> {
        while !self.schedule.has_hour(l.hour) {
            self.step()?;
            if !self.added {
                self.added = true;
                let (month, day) = (i64::from(l.month), i64::from(l.day));
                self.t = go_date(self.tz, l.year, month, day, l.hour, 0, 0)?;
            }
            l = self.to(self.t.checked_add(3600)?)?;
            if l.hour == 0 {
                return Some(Field::Wrapped);
            }
        }
        Some(Field::Matches(l))
    }

    /// The minute loop: whole minutes in absolute time from the minute's start.
    fn minute(&mut self, mut l: Local) -> Option<Field> {
        while !self.schedule.has_minute(l.minute) {
            self.step()?;
            if !self.added {
                self.added = true;
                self.t -= self.t.rem_euclid(60);
            }
            l = self.to(self.t.checked_add(60)?)?;
            if l.minute == 0 {
                return Some(Field::Wrapped);
            }
        }
        Some(Field::Matches(l))
    }

    /// The second loop: a standard schedule runs at second 0 alone.
    fn second(&mut self, mut l: Local) -> Option<Field> {
        while l.second != 0 {
            self.step()?;
            self.added = true;
            l = self.to(self.t.checked_add(1)?)?;
            if l.second == 0 {
                return Some(Field::Wrapped);
            }
        }
        Some(Field::Matches(l))
    }
}

#[cfg(test)]
#[path = "cron_zone_tests.rs"]
mod tests;
