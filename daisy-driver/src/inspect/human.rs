//! Numbers for people, as status, report and the dashboard show them:
//! durations and byte counts, in one place so the three read alike.

/// A duration for people: `850 ms`, `12.5 s`, `3 min 20 s`, `2 h 5 min`.
/// Rounded to the unit shown first, so that no part reads 60; negative
/// (two events' clocks a hair apart) reads `0 ms`.
pub fn human_seconds(seconds: f64) -> String {
    let s = if seconds > 0.0 { seconds } else { 0.0 };
    match s {
        s if s < 0.9995 => format!("{:.0} ms", s * 1000.0),
        s if s < 59.95 => format!("{s:.1} s"),
        s if s < 3599.5 => {
            let s = s.round() as u64;
            format!("{} min {} s", s / 60, s % 60)
        }
        s => {
            let minutes = (s / 60.0).round() as u64;
            format!("{} h {} min", minutes / 60, minutes % 60)
        }
    }
}

/// `52.4 MB` (powers of 1000, as `ls -h --si` and most job reports).
pub fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    let mut value = bytes;
    let mut unit = 0;
    while value.abs() >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    match unit {
        0 => format!("{value:.0} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human_seconds(0.25), "250 ms");
        // Issue 11, item 13: a hover text read `queued -0 ms`.
        assert_eq!(human_seconds(-0.0001), "0 ms");
        assert_eq!(human_seconds(-0.0), "0 ms");
        assert_eq!(human_seconds(0.9999), "1.0 s");
        assert_eq!(human_seconds(59.97), "1 min 0 s");
        assert_eq!(human_seconds(239.7), "4 min 0 s");
        assert_eq!(human_seconds(7199.0), "2 h 0 min");
        assert_eq!(human_seconds(3700.0), "1 h 2 min");
        assert_eq!(human_seconds(200.0), "3 min 20 s");
        assert_eq!(human_seconds(7500.0), "2 h 5 min");
    }

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(human_bytes(512.0), "512 B");
        assert_eq!(human_bytes(52_400_000.0), "52.4 MB");
    }
}
