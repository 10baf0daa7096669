//! Reading bsub's and bkill's replies, and telling LSF's passing troubles
//! from its refusals. Pure, tested on samples in LSF's documented formats.
//!
//! bsub answers `Job <12345> is submitted to queue <normal>.` (or `... to
//! default queue <normal>.` when no -q was given), possibly among other
//! lines (esub messages). A refusal is `<what>: <reason>. Job not
//! submitted.` on stderr with exit status 255, for instance
//! `nosuch: No such queue. Job not submitted.`.

/// What a successful bsub said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Submitted {
    /// The job (array) id; element i is `<job>[i]`.
    pub job: u64,
    pub queue: String,
}

/// The `Job <id> is submitted to [default ]queue <q>.` line, wherever it
/// is in bsub's stdout.
pub(crate) fn parse_submitted(stdout: &str) -> Option<Submitted> {
    stdout.lines().find_map(submitted_line)
}

fn submitted_line(line: &str) -> Option<Submitted> {
    let rest = line.trim().strip_prefix("Job <")?;
    let (job, rest) = rest.split_once('>')?;
    let rest = rest.strip_prefix(" is submitted to ")?;
    let rest = rest.strip_prefix("default ").unwrap_or(rest);
    let queue = rest.strip_prefix("queue <")?.strip_suffix(">.")?;
    Some(Submitted {
        job: job.parse().ok()?,
        queue: queue.to_owned(),
    })
}

/// Messages of an LSF that cannot answer right now (mbatchd restarting or
/// overloaded, the master host failing over): worth retrying.
const TRANSIENT: &[&str] = &[
    "LSF is down",
    "Cannot connect to LSF",
    "not responding ... still trying",
    "batch system daemon not responding",
    "Timeout in contacting mbatchd",
    "Communication time out",
    "mbatchd is down",
];

/// Refusals that look like connection trouble but are not: this host is
/// not part of the cluster, and will not become part by retrying.
const PERMANENT: &[&str] = &["Request from non-LSF host rejected"];

/// Whether an LSF command's error output means "try again later" rather
/// than "no" (a bad queue, a project the user may not use).
pub(crate) fn is_transient(stderr: &str) -> bool {
    let any = |markers: &[&str]| markers.iter().any(|m| stderr.contains(m));
    !any(PERMANENT) && any(TRANSIENT)
}

/// bkill's stderr lines that say more than "already gone": a job that has
/// already finished, or that LSF no longer knows, needs no killing.
pub(crate) fn bkill_problems(stderr: &str) -> Vec<&str> {
    const GONE: &[&str] = &["Job has already finished", "No matching job found"];
    stderr
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !GONE.iter().any(|gone| line.ends_with(gone)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submission_lines_with_and_without_default_queue_are_read() {
        let named = parse_submitted("Job <12345> is submitted to queue <normal>.\n");
        let expected = Submitted {
            job: 12345,
            queue: "normal".into(),
        };
        assert_eq!(named, Some(expected));
        let default = parse_submitted("Job <1815> is submitted to default queue <normal>.");
        assert_eq!(default.map(|s| s.job), Some(1815));
    }

    #[test]
    fn the_submission_line_is_found_among_other_output() {
        let stdout = "esub: checking project\nJob <42> is submitted to queue <gpu>.\n";
        assert_eq!(parse_submitted(stdout).map(|s| s.queue), Some("gpu".into()));
    }

    #[test]
    fn other_output_is_no_submission() {
        for stdout in [
            "",
            "Job <abc> is submitted to queue <q>.",
            "Job <1> is pending",
        ] {
            assert_eq!(parse_submitted(stdout), None, "{stdout:?}");
        }
    }

    #[test]
    fn daemon_trouble_is_transient() {
        for stderr in [
            "LSF is down. Please wait ...",
            "Cannot connect to LSF. Please wait ...",
            "batch system daemon not responding ... still trying",
            "LSF daemon (LIM) not responding ... still trying",
        ] {
            assert!(is_transient(stderr), "{stderr}");
        }
    }

    #[test]
    fn refusals_are_permanent() {
        for stderr in [
            "nosuch: No such queue. Job not submitted.",
            "short: User cannot use the queue. Job not submitted.",
            "Request from non-LSF host rejected. Job not submitted.",
            "myproj: Bad project name. Job not submitted.",
            "",
        ] {
            assert!(!is_transient(stderr), "{stderr}");
        }
    }

    #[test]
    fn jobs_already_gone_are_no_bkill_problem() {
        let stderr = "Job <12345[2]>: Job has already finished\n\
                      Job <99>: No matching job found\n\
                      LSF is down. Please wait ...\n";
        assert_eq!(bkill_problems(stderr), vec!["LSF is down. Please wait ..."]);
    }
}
