//! A CronJob's schedule as the Kubernetes CronJob controller reads it, and its next run: the
//! controller parses `spec.schedule` with robfig/cron v3's `ParseStandard`
//! (kubernetes pkg/controller/cronjob/cronjob_controllerv2.go, `cron.ParseStandard(formatSchedule(...))`;
//! the parser and `Next` read from kubernetes vendor/github.com/robfig/cron/v3/parser.go and
//! spec.go), written here from those rules rather than taken from a crate: the rules are
//! small, a crate that reads them exactly as robfig does (the day-of-month/day-of-week rule
//! below, `N/step`, `?`, names, the five-year horizon) was not found among the lean ones, and
//! the cron crates differ from robfig on exactly those points.
//!
//! The rules kept (robfig's): five fields separated by white space (minute 0-59, hour 0-23,
//! day of month 1-31, month 1-12 or `jan`-`dec`, day of week 0-6 or `sun`-`sat`, names in any
//! case); each field a comma-separated list of `*`, `?` (as `*`), `N`, `N-M`, each with an
//! optional `/step` (`N/step` is `N-max/step`); or one of the descriptors `@yearly`,
//! `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`. When either the day of
//! month or the day of week is unrestricted (written with `*` or `?` and no step above 1), a
//! day must match both; when both are restricted, either (the classic cron rule). The next run
//! is the first whole minute strictly after the given time that matches, searched until the
//! end of the fifth year after it (robfig's horizon; none past it, as `Next` returns the zero
//! time).
//!
//! The walk here is UTC's; a CronJob's `timeZone` other than UTC takes robfig's own walk in
//! that zone (`cron_zone.rs`).
//!
//! Where this differs, on purpose (a trace is refused rather than read differently): a
//! `TZ=`/`CRON_TZ=` prefix is refused here, as the API server's validation refuses it; `@every` is refused (the API
//! accepts it, the simulator does not model it); an empty list item (`1,,2`) is refused where
//! robfig skips it.
//!
//! Invariants: a parsed schedule has at least one bit in each field within its bounds; the
//! search is bounded (at most about 2,200 days, 1,440 minutes in a matching day); no input
//! panics.

use super::GcError;

/// A parsed schedule: the bits of the minutes, hours, days of month, months and days of week
/// it runs at, and whether the day fields were unrestricted (robfig's star bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CronSchedule {
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    dom_star: bool,
    dow_star: bool,
}

/// A field's bounds and names.
struct Bounds {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAYS_OF_MONTH: Bounds = Bounds {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
/// Months by name, from 1.
const MONTHS: Bounds = Bounds {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// Days of week by name, from 0 (Sunday).
const DAYS_OF_WEEK: Bounds = Bounds {
    name: "day of week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// The most bytes of a schedule read (a schedule is a few dozen).
const MAX_SCHEDULE_BYTES: usize = 1024;

impl CronSchedule {
    /// Parses `spec` as the CronJob controller does (see the module's rules), or says why not
    /// ([`GcError::InvalidSchedule`]).
    pub fn parse(spec: &str) -> Result<CronSchedule, GcError> {
        CronSchedule::parse_reason(spec).map_err(|reason| GcError::InvalidSchedule {
            schedule: spec.chars().take(MAX_SCHEDULE_BYTES).collect(),
            reason,
        })
    }

    fn parse_reason(spec: &str) -> Result<CronSchedule, String> {
        if spec.is_empty() {
            return Err("empty spec string".to_owned());
        }
        if spec.len() > MAX_SCHEDULE_BYTES {
            return Err(format!("longer than {MAX_SCHEDULE_BYTES} bytes"));
        }
        if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
            // The API server's validation (pkg/apis/batch/validation, validateScheduleFormat).
            return Err(
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead".to_owned(),
            );
        }
        if spec.starts_with('@') {
            return descriptor(spec);
        }
        let fields: Vec<&str> = spec.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "expected exactly 5 fields, found {}: {fields:?}",
                fields.len()
            ));
        }
        let (minutes, _) = field(fields[0], &MINUTES)?;
        let (hours, _) = field(fields[1], &HOURS)?;
        let (days_of_month, dom_star) = field(fields[2], &DAYS_OF_MONTH)?;
        let (months, _) = field(fields[3], &MONTHS)?;
        let (days_of_week, dow_star) = field(fields[4], &DAYS_OF_WEEK)?;
        Ok(CronSchedule {
            minutes,
            hours,
            days_of_month,
            months,
            days_of_week,
            dom_star,
            dow_star,
        })
    }

    /// A five-field schedule that parses back to this one (`parse(spec()) == self`): each
    /// field `*` when it holds every value (and, for the day fields, was unrestricted), else
    /// its values as ascending ranges (`0-5,30`). A descriptor or a step comes back in this
    /// form (`@weekly` is `0 0 * * 0`, `*/15` is `0,15,30,45`): what the agent records of a
    /// CronJob whose own text it does not keep.
    pub fn spec(&self) -> String {
        let field = |set: u64, b: &Bounds, star: bool| -> String {
            if star || set == bits(b.min, b.max, 1) {
                return "*".to_owned();
            }
            let mut parts = Vec::new();
            let mut v = b.min;
            while v <= b.max {
                if set & (1 << v) == 0 {
                    v += 1;
                    continue;
                }
                let start = v;
                while v < b.max && set & (1 << (v + 1)) != 0 {
                    v += 1;
                }
                parts.push(if start == v {
                    start.to_string()
                } else {
                    format!("{start}-{v}")
                });
                v += 1;
            }
            parts.join(",")
        };
        // A day field is written `*` only when it was unrestricted: `1-31` restricts the days
        // (robfig's star bit) where `*` does not.
        let day = |set: u64, b: &Bounds, star: bool| -> String {
            if star {
                "*".to_owned()
            } else if set == bits(b.min, b.max, 1) {
                format!("{}-{}", b.min, b.max)
            } else {
                field(set, b, false)
            }
        };
        format!(
            "{} {} {} {} {}",
            field(self.minutes, &MINUTES, false),
            field(self.hours, &HOURS, false),
            day(self.days_of_month, &DAYS_OF_MONTH, self.dom_star),
            field(self.months, &MONTHS, false),
            day(self.days_of_week, &DAYS_OF_WEEK, self.dow_star),
        )
    }

    /// Whether the schedule runs in this month (1-12).
    pub(super) fn has_month(&self, month: u32) -> bool {
        month < 64 && self.months & (1 << month) != 0
    }

    /// Whether the schedule runs in this hour (0-23).
    pub(super) fn has_hour(&self, hour: i64) -> bool {
        (0..64).contains(&hour) && self.hours & (1 << hour) != 0
    }

    /// Whether the schedule runs at this minute of an hour (0-59).
    pub(super) fn has_minute(&self, minute: i64) -> bool {
        (0..64).contains(&minute) && self.minutes & (1 << minute) != 0
    }

    /// Whether the schedule runs on this day (robfig's `dayMatches`).
    pub(super) fn day_matches(&self, day_of_month: u32, day_of_week: u32) -> bool {
        let dom = self.days_of_month & (1 << day_of_month) != 0;
        let dow = self.days_of_week & (1 << day_of_week) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first run strictly after `after_s` (unix seconds, UTC), in unix seconds; `None` when
    /// there is none before the end of the fifth year after it.
    pub fn next_after(&self, after_s: i64) -> Option<i64> {
        // The first whole minute strictly after `after_s`.
        let first_minute = after_s.div_euclid(60).checked_add(1)?;
        let first_day = first_minute.div_euclid(1440);
        let (first_year, _, _) = civil_from_days(first_day);
        let mut day = first_day;
        loop {
            let (year, month, day_of_month) = civil_from_days(day);
            if year > first_year + 5 {
                return None;
            }
            let day_of_week = (day + 4).rem_euclid(7) as u32;
            if self.months & (1 << month) != 0 && self.day_matches(day_of_month, day_of_week) {
                let from = if day == first_day {
                    first_minute.rem_euclid(1440)
                } else {
                    0
                };
                if let Some(minute) = self.first_minute_of_day_from(from) {
                    return day.checked_mul(86_400)?.checked_add(minute * 60);
                }
            }
            day += 1;
        }
    }

    /// The first minute of a day, at or after minute `from` of it, that the schedule's hours and
    /// minutes give.
    fn first_minute_of_day_from(&self, from: i64) -> Option<i64> {
        (from..1440)
            .find(|m| self.hours & (1 << (m / 60)) != 0 && self.minutes & (1 << (m % 60)) != 0)
    }
}

/// The descriptors `ParseStandard` accepts (robfig's `parseDescriptor`), `@every` refused.
fn descriptor(spec: &str) -> Result<CronSchedule, String> {
    let all = |b: &Bounds| bits(b.min, b.max, 1);
    let mut s = CronSchedule {
        minutes: 1,
        hours: 1,
        days_of_month: all(&DAYS_OF_MONTH),
        months: all(&MONTHS),
        days_of_week: all(&DAYS_OF_WEEK),
        dom_star: true,
        dow_star: true,
    };
    match spec {
        "@yearly" | "@annually" => {
            s.days_of_month = 1 << 1;
            s.months = 1 << 1;
            s.dom_star = false;
        }
        "@monthly" => {
            s.days_of_month = 1 << 1;
            s.dom_star = false;
        }
        "@weekly" => {
            s.days_of_week = 1;
            s.dow_star = false;
        }
        "@daily" | "@midnight" => {}
        "@hourly" => s.hours = all(&HOURS),
        _ if spec.starts_with("@every ") => {
            return Err(format!(
                "{spec}: @every is not simulated (use a five-field schedule)"
            ));
        }
        _ => return Err(format!("unrecognized descriptor: {spec}")),
    }
    Ok(s)
}

/// The bits `start..=end` every `step`.
fn bits(start: u32, end: u32, step: u32) -> u64 {
    (start..=end)
        .step_by(step.max(1) as usize)
        .fold(0, |acc, i| acc | (1 << i))
}

/// One field: a comma-separated list of ranges, its bits and whether it is unrestricted.
fn field(text: &str, bounds: &Bounds) -> Result<(u64, bool), String> {
    let mut all = 0u64;
    let mut star = false;
    for expr in text.split(',') {
        if expr.is_empty() {
            return Err(format!(
                "{} field {text:?}: an empty list item",
                bounds.name
            ));
        }
        let (bits, expr_star) =
            range(expr, bounds).map_err(|e| format!("{} field {text:?}: {e}", bounds.name))?;
        all |= bits;
        star |= expr_star;
    }
    Ok((all, star))
}

/// One range (robfig's `getRange`): `*`/`?`, `N` or `N-M`, with an optional `/step`.
fn range(expr: &str, bounds: &Bounds) -> Result<(u64, bool), String> {
    let mut range_and_step = expr.split('/');
    let range_part = range_and_step.next().unwrap_or_default();
    let step_part = range_and_step.next();
    if range_and_step.next().is_some() {
        return Err(format!("too many slashes: {expr}"));
    }
    let low_high: Vec<&str> = range_part.split('-').collect();
    let (start, mut end, mut star) = if low_high[0] == "*" || low_high[0] == "?" {
        if low_high.len() > 1 {
            return Err(format!("too many hyphens: {expr}"));
        }
        (bounds.min, bounds.max, true)
    } else {
        let start = int_or_name(low_high[0], bounds)?;
        match low_high.len() {
            1 => (start, start, false),
            2 => (start, int_or_name(low_high[1], bounds)?, false),
            _ => return Err(format!("too many hyphens: {expr}")),
        }
    };
    let mut step = 1;
    if let Some(s) = step_part {
        step = int(s)?;
        if low_high.len() == 1 && !star {
            // "N/step" means "N-max/step".
            end = bounds.max;
        }
        if step > 1 {
            star = false;
        }
    }
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            bounds.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok((bits(start, end, step), star))
}

/// A number, or a name of `bounds` (any case).
fn int_or_name(text: &str, bounds: &Bounds) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(at) = bounds.names.iter().position(|n| *n == lower) {
        return Ok(at as u32 + if bounds.min == 1 { 1 } else { 0 });
    }
    int(text)
}

/// A non-negative decimal number (Go's `strconv.Atoi`: an optional sign, then digits).
fn int(text: &str) -> Result<u32, String> {
    let digits = text.strip_prefix('+').unwrap_or(text);
    if let Some(negative) = text.strip_prefix('-')
        && !negative.is_empty()
        && negative.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("negative number ({text}) not allowed"));
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("failed to parse int from {text}"));
    }
    // Above every bound: refused by the caller's bounds check, not an overflow.
    Ok(digits.parse::<u32>().unwrap_or(u32::MAX))
}

/// The civil date (year, month 1-12, day 1-31) of a day counted from 1970-01-01 (the
/// proleptic Gregorian calendar; Howard Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The day counted from 1970-01-01 of a civil date (the inverse of [`civil_from_days`],
/// Hinnant's `days_from_civil`).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[path = "cron_tests.rs"]
mod tests;
