//! Job time limits as the schedulers write them. SLURM's notation, which
//! `--time` takes and `squeue -o %L` prints: "minutes", "minutes:seconds",
//! "hours:minutes:seconds", "days-hours", "days-hours:minutes" and
//! "days-hours:minutes:seconds"; the driver reads a task's `time` with it
//! to tell its workers their walltime, and a worker in a SLURM job reads
//! what is left of it. LSF's `bjobs -o time_left`: "hours:minutes L".

use std::time::Duration;

/// The duration `text` gives in SLURM's notation; `None` for what is not
/// one, including SLURM's "UNLIMITED", "INFINITE", "NOT_SET" and "INVALID".
pub fn parse_slurm_time(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (days, rest) = match text.split_once('-') {
        Some((days, rest)) => (Some(number(days)?), rest),
        None => (None, text),
    };
    let parts: Vec<u64> = rest.split(':').map(number).collect::<Option<_>>()?;
    let seconds = match (days, parts.as_slice()) {
        (None, [minutes]) => minutes * 60,
        (None, [minutes, seconds]) => minutes * 60 + seconds,
        (Some(_), [hours]) => hours * 3600,
        (Some(_), [hours, minutes]) => hours * 3600 + minutes * 60,
        (_, [hours, minutes, seconds]) => hours * 3600 + minutes * 60 + seconds,
        _ => return None,
    };
    Some(Duration::from_secs(days.unwrap_or(0) * 86_400 + seconds))
}

/// The time left that LSF's `bjobs -o time_left` gives: "H:MM L" under a
/// run limit. `None` for "-" and for the other statuses, which are about
/// an estimated run time (`-We`), not a limit that ends the job.
pub fn parse_lsf_time_left(text: &str) -> Option<Duration> {
    let (clock, status) = text.trim().split_once(' ')?;
    if status.trim() != "L" {
        return None;
    }
    let (hours, minutes) = clock.split_once(':')?;
    let minutes = number(hours)? * 60 + number(minutes)?;
    Some(Duration::from_secs(minutes * 60))
}

fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> Option<u64> {
        parse_slurm_time(text).map(|d| d.as_secs())
    }

    #[test]
    fn every_form_sbatch_accepts_is_read() {
        assert_eq!(secs("90"), Some(90 * 60));
        assert_eq!(secs("5:30"), Some(330));
        assert_eq!(secs("1:02:03"), Some(3723));
        assert_eq!(secs("2-0"), Some(2 * 86_400));
        assert_eq!(secs("1-2:30"), Some(86_400 + 2 * 3600 + 30 * 60));
        assert_eq!(secs("1-00:00:10"), Some(86_410));
        assert_eq!(secs(" 0:45 \n"), Some(45));
    }

    #[test]
    fn lsf_time_left_counts_only_under_a_run_limit() {
        let secs = |text: &str| parse_lsf_time_left(text).map(|d| d.as_secs());
        assert_eq!(secs("0:58 L"), Some(58 * 60));
        assert_eq!(secs("12:05 L\n"), Some(12 * 3600 + 5 * 60));
        for text in ["-", "0:58 E", "0:00 X", "0:58", "a:b L", ""] {
            assert_eq!(secs(text), None, "{text}");
        }
    }

    #[test]
    fn what_is_not_a_limit_is_none() {
        for text in [
            "UNLIMITED",
            "INFINITE",
            "NOT_SET",
            "INVALID",
            "",
            "1:2:3:4",
            "-1",
            "a:b",
            "1-",
        ] {
            assert_eq!(secs(text), None, "{text}");
        }
    }
}
