//! Where each run's part of a worker's log starts. Worker ids start at 1
//! in every run, and logs are appended to, so `logs/<task>/worker-2-user.err`
//! holds what worker 2 of every run wrote (issue 38: 7 lines from 4 runs,
//! nothing between them). Before a worker is started, the driver appends
//! a header line naming the run and the time to the files it will write,
//! and `status` points at the line where the last run's part starts.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How every header line starts, so that it is found again.
const HEADER: &str = "==== daisy run started ";

/// Appends the header of this run's part to `logs/<name>` for each of
/// `names` (files missing are created). A log that cannot be written to
/// is left to the worker, which reports that itself.
pub fn start_parts(logs: &Path, names: &[String], run: &RunHeader<'_>) {
    let _ = std::fs::create_dir_all(logs);
    let line = run.line();
    for name in names {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(name));
        if let Ok(mut file) = file {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// What a header says: the run (pipeline name and start time) and the
/// worker.
pub struct RunHeader<'a> {
    pub pipeline: &'a str,
    pub started: SystemTime,
    pub task: &'a str,
    pub worker_id: u64,
}

impl RunHeader<'_> {
    fn line(&self) -> String {
        format!(
            "{HEADER}{} (pipeline {:?}): worker {} of task {:?} ====\n",
            humantime::format_rfc3339_micros(self.started),
            self.pipeline,
            self.worker_id,
            self.task
        )
    }
}

/// The line (from 1) of `log` where the part of the run started at
/// `started` (unix seconds, its `run_started` event's time) begins: its
/// first header written then or later (the driver writes headers after
/// that event, with microseconds, so runs a moment apart are told apart);
/// `None` if the file has none (a log of an older version, or of a
/// worker started by hand).
pub fn part_of_run(log: &Path, started: f64) -> Option<usize> {
    let text = std::fs::read_to_string(log).ok()?;
    // A microsecond less: the header's time is rounded down to one.
    let run_start = UNIX_EPOCH + Duration::from_secs_f64((started - 1e-6).max(0.0));
    text.lines()
        .position(|line| {
            (line.strip_prefix(HEADER))
                .and_then(|rest| rest.split(' ').next())
                .and_then(|time| humantime::parse_rfc3339(time).ok())
                .is_some_and(|time| time >= run_start)
        })
        .map(|index| index + 1)
}

/// Whether `log` holds anything besides the headers of runs' parts: what
/// a worker or its code wrote (read up to the first such line).
pub fn has_output(log: &Path) -> bool {
    use std::io::BufRead;
    let Ok(file) = std::fs::File::open(log) else {
        return false;
    };
    let mut lines = std::io::BufReader::new(file).split(b'\n');
    lines.any(|line| line.is_ok_and(|line| !line.starts_with(HEADER.as_bytes())))
}

/// `text` (the end of a log) without the headers in it: what a worker or
/// its code wrote.
pub fn without_headers(text: &str) -> String {
    let lines = text.lines().filter(|line| !line.starts_with(HEADER));
    lines.collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_line(worker_id: u64) -> String {
        let header = RunHeader {
            pipeline: "p",
            started: UNIX_EPOCH,
            task: "t",
            worker_id,
        };
        header.line()
    }

    #[test]
    fn each_run_finds_its_own_part_of_a_shared_log() {
        let dir = tempfile::tempdir().unwrap();
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let names = ["worker-2-user.err".to_string()];
        let log = dir.path().join(&names[0]);
        for (started, output) in [(1_000, "first\n"), (2_000, "second\n")] {
            let header = RunHeader {
                pipeline: "p",
                started: at(started),
                task: "t",
                worker_id: 2,
            };
            start_parts(dir.path(), &names, &header);
            let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            file.write_all(output.as_bytes()).unwrap();
        }
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            text.lines().next().unwrap(),
            "==== daisy run started 1970-01-01T00:16:40.000000Z (pipeline \"p\"): worker 2 of task \"t\" ===="
        );
        assert_eq!(part_of_run(&log, 999.5), Some(1));
        assert_eq!(part_of_run(&log, 1_000.0), Some(1));
        assert_eq!(part_of_run(&log, 1_999.9), Some(3));
        assert_eq!(part_of_run(&log, 2_000.1), None);
        assert!(has_output(&log));
        let headers_only = dir.path().join("worker-3-user.err");
        std::fs::write(&headers_only, header_line(3)).unwrap();
        assert!(!has_output(&headers_only));
        let tail = format!("{}boom\n", header_line(3));
        assert_eq!(without_headers(&tail), "boom");
        assert_eq!(without_headers(&header_line(3)), "");
    }
}
