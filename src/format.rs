//! The one home of the formatting rules shared by the library and the CLI: Go's
//! `time.Duration` string and its parser, Go's `%q` quoting (the kubelet's messages quote image
//! names with it; both `cri` and `pull` print them), the kubelet's 1024-based size, RFC 3339 UTC
//! times and relative times ("3m ago"), and Kubernetes quantities (`500Gi`: the doctor's eviction
//! thresholds and the byte budget flags), and apimachinery's aggregate of several errors (`[a,
//! b]`: the GC's deletion errors and the pull's failed credentials both print it).
//!
//! RFC 3339 is jiff's (`jiff::Timestamp`'s `Display`: UTC, the fraction only when there is one,
//! without trailing zeros). The Go durations and the size are hand-written because they must
//! match Go's `time.Duration.String()`/`time.ParseDuration` and the kubelet's messages byte for
//! byte (the kubelet and its config files speak Go; no Rust crate prints or parses Go's format).
//! The relative time is imagekeeper's own CLI format (a public contract of `inspect`).
//! Invariant: nothing here panics on any input (every `UnixNanos` formats, every string parses
//! or is refused with Go's wording).

use std::time::Duration;

use crate::model::UnixNanos;

/// A duration that Go's `time.ParseDuration` would refuse too; the message is Go's
/// (`time: invalid duration "abc"`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("time: {reason}")]
pub struct InvalidDuration {
    /// The refused text.
    pub input: String,
    /// Go's wording, without its `time: ` prefix.
    pub reason: String,
}

/// Go's `%q` for a string: double quotes, with `"` and `\` and control characters escaped.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A duration as Go's `time.Duration.String()` prints it (hand-written: Go's format, byte for
/// byte): `2m0s`, `1h30m0s`, `1.5s`, `0s`.
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos, 1_000_000));
    }
    let total_secs = nanos / 1_000_000_000;
    let frac = nanos % 1_000_000_000;
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let secs = total_secs % 60;
    let secs_str = trim_fraction(
        u128::from(secs as u64) * 1_000_000_000 + frac,
        1_000_000_000,
    );
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h{minutes}m"));
    } else if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&secs_str);
    out.push('s');
    out
}

/// `value / unit` with the fraction printed without trailing zeros.
fn trim_fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A size in bytes, 1024-based with one decimal, as the kubelet's messages print it
/// (hand-written: byte for byte): `512 B`, `1.5 KiB`, `100.0 GiB`. Like the kubelet's
/// `formatSize` (kubelet master `pkg/kubelet/images/image_gc_manager.go`, the
/// FreeDiskSpaceFailed message's capacity) it stops at TiB: a pebibyte is `1024.0 TiB`.
pub fn format_size(size: u64) -> String {
    const UNIT: u64 = 1024;
    /// The largest unit's index in `KMGT`: TiB.
    const LARGEST: usize = 3;
    if size < UNIT {
        return format!("{size} B");
    }
    let mut div = UNIT;
    let mut exp = 0usize;
    let mut n = size / UNIT;
    while n >= UNIT && exp < LARGEST {
        div *= UNIT;
        exp += 1;
        n /= UNIT;
    }
    let prefix = ['K', 'M', 'G', 'T'][exp];
    format!("{:.1} {prefix}iB", size as f64 / div as f64)
}

/// Formats several errors as the `Error()` of apimachinery's `utilerrors.NewAggregate`
/// (util/errors/errors.go): identical messages once, in first-seen order; one distinct message
/// alone, several as `[a, b]`.
pub fn aggregate(errors: &[String]) -> String {
    let mut distinct: Vec<&str> = Vec::new();
    for e in errors {
        if !distinct.contains(&e.as_str()) {
            distinct.push(e);
        }
    }
    match distinct.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// For serde's `skip_serializing_if`: a count of zero is left out of a JSON answer.
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Parses a duration in Go's `time.ParseDuration` syntax (`300ms`, `2m`, `1h30m`, `1.5h`,
/// `0`), refusing negative durations. Errors carry Go's wording (hand-written: Go's syntax,
/// byte for byte).
pub fn parse_go_duration(input: &str) -> Result<Duration, InvalidDuration> {
    let invalid = |reason: String| InvalidDuration {
        input: input.to_owned(),
        reason,
    };
    let quoted = format!("{input:?}");
    let mut rest = input;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if let Some(r) = rest.strip_prefix('-') {
        if !r.is_empty() && r.bytes().all(|c| c == b'0') {
            return Ok(Duration::ZERO);
        }
        return Err(invalid(format!("negative duration {quoted}")));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid(format!("invalid duration {quoted}")));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after_int) = rest.split_at(int_len);
        let (frac_part, after_num) = match after_int.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(n)
            }
            None => ("", after_int),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid(format!("invalid duration {quoted}")));
        }
        let unit_len = after_num
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(after_num.len(), |(i, _)| i);
        let (unit, after_unit) = after_num.split_at(unit_len);
        if unit.is_empty() {
            return Err(invalid(format!("missing unit in duration {quoted}")));
        }
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(invalid(format!(
                    "unknown unit {unit:?} in duration {quoted}"
                )));
            }
        };
        let overflow = || invalid(format!("invalid duration {quoted}"));
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| overflow())?
        };
        let mut value = whole.checked_mul(unit_nanos).ok_or_else(overflow)?;
        let mut scale = unit_nanos;
        for digit in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            value += u128::from(digit - b'0') * scale;
        }
        total = total.checked_add(value).ok_or_else(overflow)?;
        if total > i64::MAX as u128 {
            return Err(overflow());
        }
        rest = after_unit;
    }
    let nanos = u64::try_from(total).map_err(|_| invalid(format!("invalid duration {quoted}")))?;
    Ok(Duration::from_nanos(nanos))
}

/// A Go duration as [`go_duration`] writes it (`90m` is `1h30m0s`), refused as
/// [`parse_go_duration`] refuses it: a flag checked when it is parsed, its value then read as
/// text (the settings table's older `inspect` flags, `--min-age` and `--max-age`).
pub fn canonical_go_duration(input: &str) -> Result<String, InvalidDuration> {
    parse_go_duration(input).map(go_duration)
}

/// A time as RFC 3339 in UTC, with nanoseconds only when there are any, without trailing
/// zeros: `2026-01-02T03:04:05Z`, `2026-01-02T03:04:05.5Z`.
pub fn format_rfc3339(t: UnixNanos) -> String {
    // Every i64 of nanoseconds (1677..2262) is inside jiff's range (years -9999..9999).
    jiff::Timestamp::from_nanosecond(i128::from(t.0))
        .expect("an i64 of unix nanoseconds is inside jiff's timestamp range")
        .to_string()
}

/// How long before `now` a time was, coarsely, as people read it: `just now`, `42s ago`,
/// `3m ago`, `5h ago`, `12d ago`; `in 3m` for a time after `now`; `never` for
/// [`UnixNanos::NEVER`] (imagekeeper's own format, a public contract of `inspect`).
pub fn format_ago(now: UnixNanos, t: UnixNanos) -> String {
    if t == UnixNanos::NEVER {
        return "never".to_owned();
    }
    let (d, future) = if t > now {
        (t.since(now), true)
    } else {
        (now.since(t), false)
    };
    let secs = d.as_secs();
    let coarse = if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m", secs / 60)
    } else if secs < 86_400 {
        format!("{}h", secs / 3600)
    } else {
        format!("{}d", secs / 86_400)
    };
    if secs == 0 {
        "just now".to_owned()
    } else if future {
        format!("in {coarse}")
    } else {
        format!("{coarse} ago")
    }
}

// RFC 3339 parsing is hand-written, not jiff's parser: the replay trace format and the
// kubelet's pull records accept exactly `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` within
// i64 nanoseconds since 1970, and a trace's error names which of the two rules a time broke.

/// Why a time does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimeError {
    /// Not `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, or not a calendar date.
    Syntax,
    /// A valid date before 1970 or after 2262-04-11 (i64 nanoseconds).
    OutOfRange,
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
pub fn parse_rfc3339(s: &str) -> Option<UnixNanos> {
    parse_rfc3339_checked(s).ok()
}

/// The times a persisted stamp holds (i64 nanoseconds since 1970), as an operator reads them.
pub const TIME_RANGE: &str = "1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z";

/// [`parse_rfc3339`], saying why not: the form for a syntax error, the range for a valid time
/// outside it (`9999-12-31T23:59:59Z` is RFC 3339; it is past what the database holds).
pub fn parse_rfc3339_or_why(s: &str) -> Result<UnixNanos, String> {
    match parse_rfc3339_checked(s) {
        Ok(t) => Ok(t),
        Err(TimeError::OutOfRange) => Err(format!(
            "{s:?} is outside the times imagekeeper stores ({TIME_RANGE})"
        )),
        Err(TimeError::Syntax) => Err(format!(
            "{s:?} is not an RFC 3339 time (YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM))"
        )),
    }
}

pub(crate) fn parse_rfc3339_checked(s: &str) -> Result<UnixNanos, TimeError> {
    parse_rfc3339_parts(s).ok_or(TimeError::Syntax)?
}

/// `None` for a syntax error; `Some(Err(OutOfRange))` for a date out of range.
fn parse_rfc3339_parts(s: &str) -> Option<Result<UnixNanos, TimeError>> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = s.get(from..to)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos: i64 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        nanos = frac[..digits].parse::<i64>().ok()? * 10i64.pow((9 - digits) as u32);
        rest = &frac[digits..];
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        // Bytes, not string slices: a multi-byte character in the offset must be a syntax
        // error, not a slice off a char boundary (found by the replay fuzz target).
        _ if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && rest.as_bytes()[3] == b':' =>
        {
            let two_digits = |part: Option<&str>| -> Option<i64> {
                let part = part?;
                if part.bytes().all(|c| c.is_ascii_digit()) {
                    part.parse().ok()
                } else {
                    None
                }
            };
            let h = two_digits(rest.get(1..3))?;
            let m = two_digits(rest.get(4..6))?;
            if h > 23 || m > 59 {
                return None;
            }
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    if secs < 0 {
        return Some(Err(TimeError::OutOfRange));
    }
    Some(
        secs.checked_mul(1_000_000_000)
            .and_then(|n| n.checked_add(nanos))
            .map(UnixNanos)
            .ok_or(TimeError::OutOfRange),
    )
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A Kubernetes resource quantity (k8s.io/apimachinery resource.Quantity): a signed decimal
/// number and an optional suffix, binary (Ki..Ei), decimal (n, u, m, k, M..E) or an exponent
/// (e3, E-2). Returns its value.
pub fn parse_quantity(text: &str) -> Result<f64, String> {
    let bad = || format!("{text:?} is not a quantity (for example 10Gi or 500M)");
    let number_end = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(text.len(), |(i, _)| i);
    let (number, suffix) = text.split_at(number_end);
    if !number.chars().any(|c| c.is_ascii_digit()) || number.matches('.').count() > 1 {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    if !value.is_finite() {
        return Err(bad());
    }
    let multiplier = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exponent => {
            let digits = exponent
                .strip_prefix('e')
                .or_else(|| exponent.strip_prefix('E'))
                .ok_or_else(bad)?;
            let power: i32 = digits.parse().map_err(|_| bad())?;
            if !(-30..=30).contains(&power) {
                return Err(bad());
            }
            10f64.powi(power)
        }
    };
    Ok(value * multiplier)
}

/// A size in bytes written as a Kubernetes quantity (`500Gi`, `1.5T`, `2000000000`): a
/// whole number of bytes (a fraction rounds up, as `Quantity.Value()` does), not negative,
/// at most `u64::MAX`.
pub fn parse_byte_quantity(text: &str) -> Result<u64, String> {
    let value = parse_quantity(text)?;
    if value < 0.0 {
        return Err(format!(
            "{text:?} is negative; a size in bytes is 0 or more"
        ));
    }
    let bytes = value.ceil();
    // u64::MAX as f64 rounds up to 2^64, which does not fit.
    if bytes >= u64::MAX as f64 {
        return Err(format!("{text:?} is more bytes than fit in 64 bits"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_does() {
        let ms = Duration::from_millis;
        let secs = Duration::from_secs;
        let cases: Vec<(&str, Duration)> = vec![
            ("0", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("2m", secs(120)),
            ("+2m", secs(120)),
            ("1h30m", secs(5400)),
            ("1h30m15s", secs(5415)),
            ("1.5h", secs(5400)),
            (".5s", ms(500)),
            ("1.s", secs(1)),
            ("300ms", ms(300)),
            ("7ns", Duration::from_nanos(7)),
            ("3us", Duration::from_micros(3)),
            ("3\u{b5}s", Duration::from_micros(3)),
            ("3\u{3bc}s", Duration::from_micros(3)),
            ("1m0.25s", ms(60_250)),
            ("2562047h", secs(2_562_047 * 3600)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_go_duration(input).ok(), Some(want), "{input}");
        }
    }

    #[test]
    fn bad_go_durations_are_refused_with_gos_wording() {
        let cases = [
            ("", "invalid duration \"\""),
            ("abc", "invalid duration \"abc\""),
            ("2", "missing unit in duration \"2\""),
            ("2x", "unknown unit \"x\" in duration \"2x\""),
            ("2m3", "missing unit in duration \"2m3\""),
            (".", "invalid duration \".\""),
            ("-2m", "negative duration \"-2m\""),
            ("1h 2m", "unknown unit \"h \" in duration \"1h 2m\""),
            ("9999999999h", "invalid duration \"9999999999h\""),
        ];
        for (input, want) in cases {
            let err = parse_go_duration(input).err().map(|e| e.to_string());
            assert_eq!(
                err.as_deref(),
                Some(format!("time: {want}").as_str()),
                "{input}"
            );
        }
    }

    #[test]
    fn parsed_durations_print_back_as_go_prints_them() {
        for s in ["2m0s", "1h30m0s", "1.5s", "250ms", "25h0m1s", "0s"] {
            let d = parse_go_duration(s).expect("parses");
            assert_eq!(go_duration(d), s);
        }
    }

    /// `inspect`'s older `--min-age` and `--max-age` take a duration this way: refused as
    /// [`parse_go_duration`] refuses it, else read as the text Go prints for it.
    #[test]
    fn a_canonical_go_duration_is_the_text_go_prints_and_refuses_as_go_does() {
        for (input, want) in [("90m", "1h30m0s"), ("8h30m", "8h30m0s"), ("0", "0s")] {
            assert_eq!(canonical_go_duration(input).as_deref(), Ok(want), "{input}");
        }
        for input in ["2x", "5", "-1h", ""] {
            assert_eq!(
                canonical_go_duration(input).map_err(|e| e.to_string()),
                Err(parse_go_duration(input).expect_err(input).to_string()),
                "{input}"
            );
        }
    }

    #[test]
    fn rfc3339_is_utc_with_optional_fraction() {
        let cases = [
            (UnixNanos(0), "1970-01-01T00:00:00Z"),
            (UnixNanos::from_secs(1_767_323_045), "2026-01-02T03:04:05Z"),
            (UnixNanos(1_500_000_000), "1970-01-01T00:00:01.5Z"),
            (UnixNanos::from_secs(951_782_400), "2000-02-29T00:00:00Z"),
            (UnixNanos(-1_000_000_000), "1969-12-31T23:59:59Z"),
            (UnixNanos(1_000_000_001), "1970-01-01T00:00:01.000000001Z"),
            (UnixNanos(1_120_000_000), "1970-01-01T00:00:01.12Z"),
            (UnixNanos(i64::MAX), "2262-04-11T23:47:16.854775807Z"),
            (UnixNanos(i64::MIN), "1677-09-21T00:12:43.145224192Z"),
        ];
        for (t, want) in cases {
            assert_eq!(format_rfc3339(t), want);
            if t.0 >= 0 {
                assert_eq!(parse_rfc3339(want), Some(t));
            }
        }
    }

    #[test]
    fn relative_times_are_coarse() {
        let now = UnixNanos::from_secs(1_000_000);
        let ago = |s: i64| UnixNanos::from_secs(1_000_000 - s);
        let cases = [
            (UnixNanos::NEVER, "never"),
            (now, "just now"),
            (ago(42), "42s ago"),
            (ago(180), "3m ago"),
            (ago(5 * 3600 + 59), "5h ago"),
            (ago(12 * 86_400), "12d ago"),
            (UnixNanos::from_secs(1_000_180), "in 3m"),
        ];
        for (t, want) in cases {
            assert_eq!(format_ago(now, t), want, "{t:?}");
        }
    }

    #[test]
    fn go_duration_matches_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_secs(5400), "1h30m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(3), "3µs"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(3600 * 25 + 1), "25h0m1s"),
            (Duration::from_nanos(1_200), "1.2µs"),
            (Duration::from_micros(1_500), "1.5ms"),
            (Duration::from_millis(1_661), "1.661s"),
            (Duration::from_millis(90_500), "1m30.5s"),
            (Duration::from_secs(3723), "1h2m3s"),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn sizes_are_1024_based_with_one_decimal_up_to_tib() {
        let cases = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (1536, "1.5 KiB"),
            (100 * 1024 * 1024 * 1024, "100.0 GiB"),
            ((1 << 40) - 1, "1024.0 GiB"),
            (1 << 40, "1.0 TiB"),
            // The kubelet's formatSize stops at TiB (image_gc_manager.go).
            (1 << 50, "1024.0 TiB"),
            (3 << 50, "3072.0 TiB"),
            (u64::MAX, "16777216.0 TiB"),
        ];
        for (size, want) in cases {
            assert_eq!(format_size(size), want);
        }
    }

    #[test]
    fn byte_quantities_are_whole_bytes_as_kubernetes_writes_them() {
        let good = [
            ("500Gi", 500 * 1024u64.pow(3)),
            ("1Ki", 1024),
            ("2000000000", 2_000_000_000),
            ("1.5k", 1500),
            ("0.5", 1),
            ("1e3", 1000),
            ("0", 0),
        ];
        for (text, want) in good {
            assert_eq!(parse_byte_quantity(text), Ok(want), "{text}");
        }
        let bad = [
            ("-1Gi", "\"-1Gi\" is negative; a size in bytes is 0 or more"),
            ("20Ei", "\"20Ei\" is more bytes than fit in 64 bits"),
            (
                "5 GB",
                "\"5 GB\" is not a quantity (for example 10Gi or 500M)",
            ),
            ("Gi", "\"Gi\" is not a quantity (for example 10Gi or 500M)"),
        ];
        for (text, want) in bad {
            assert_eq!(parse_byte_quantity(text), Err(want.to_owned()), "{text}");
        }
    }

    #[test]
    fn aggregate_reports_identical_errors_once_as_apimachinery_does() {
        let s = |v: &[&str]| v.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        assert_eq!(aggregate(&s(&["a"])), "a");
        assert_eq!(aggregate(&s(&["a", "a", "a"])), "a");
        assert_eq!(aggregate(&s(&["a", "b", "a"])), "[a, b]");
        assert_eq!(aggregate(&s(&["b", "a"])), "[b, a]");
    }
}
