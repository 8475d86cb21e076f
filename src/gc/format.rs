//! Formatting shared by GC messages: Go's `time.Duration` string and the kubelet's
//! 1024-based size.

use std::time::Duration;

/// A duration as Go's `time.Duration.String()` prints it: `2m0s`, `1h30m0s`, `1.5s`, `0s`.
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

/// A size in bytes, 1024-based with one decimal: `512 B`, `1.5 KiB`, `100.0 GiB`.
pub fn format_size(size: u64) -> String {
    const UNIT: u64 = 1024;
    if size < UNIT {
        return format!("{size} B");
    }
    let mut div = UNIT;
    let mut exp = 0usize;
    let mut n = size / UNIT;
    while n >= UNIT && exp < 5 {
        div *= UNIT;
        exp += 1;
        n /= UNIT;
    }
    let prefix = ['K', 'M', 'G', 'T', 'P', 'E'][exp];
    format!("{:.1} {prefix}iB", size as f64 / div as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn sizes_are_1024_based_with_one_decimal() {
        let cases = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (1536, "1.5 KiB"),
            (100 * 1024 * 1024 * 1024, "100.0 GiB"),
            (u64::MAX, "16.0 EiB"),
        ];
        for (size, want) in cases {
            assert_eq!(format_size(size), want);
        }
    }
}
