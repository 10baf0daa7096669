//! `plan --check`: asks the scheduler whether it would take each task's
//! first submission, without submitting it, so a wrong partition, account
//! or QOS shows before the run (in SLURM's own words) rather than at its
//! first submission. sbatch (and slurmrestd, whose v0.0.38 job submit
//! endpoint has no test mode) use `sbatch --test-only` when sbatch is on
//! PATH; LSF has no test-only submission, which the check says.

use super::scripts::Submission;
use super::Plan;
use crate::pipeline::LauncherKind;
use serde::Serialize;
use std::io::Write as _;

/// What the scheduler said of one task's first submission.
#[derive(Debug, Serialize)]
pub struct SubmissionCheck {
    pub task: String,
    /// How it was checked ("sbatch --test-only"), or that it was not.
    pub how: String,
    /// `None` when it could not be checked.
    pub accepted: Option<bool>,
    /// The scheduler's own words.
    pub says: String,
}

impl Plan {
    /// Checks each first submission of a cluster launcher; each refusal is
    /// a problem too, so `plan --check` exits 2 as for any other.
    pub fn check_submissions(&mut self) {
        let checks: Vec<SubmissionCheck> = (self.submissions.iter())
            .filter(|s| s.launcher != LauncherKind::Local)
            .map(check)
            .collect();
        for check in &checks {
            if check.accepted == Some(false) {
                let says = check.says.replace('\n', "; ");
                let problem = format!(
                    "task {:?}: {} refuses its job: {says}",
                    check.task, check.how
                );
                self.problems.push(problem);
            }
        }
        self.checks = checks;
    }
}

fn check(submission: &Submission) -> SubmissionCheck {
    let task = submission.task.clone();
    let not_checked = |how: &str, says: &str| SubmissionCheck {
        task: task.clone(),
        how: how.to_owned(),
        accepted: None,
        says: says.to_owned(),
    };
    match submission.launcher {
        LauncherKind::Bsub => {
            return not_checked("not checked", "LSF has no test-only submission (bsub)")
        }
        LauncherKind::Slurmrestd if which::which("sbatch").is_err() => {
            return not_checked(
                "not checked",
                "slurmrestd v0.0.38 has no test-only submission and sbatch is not on PATH",
            )
        }
        _ => {}
    }
    let Some(text) = &submission.script else {
        return not_checked("not checked", "no job script");
    };
    let script = match written(text) {
        Ok(script) => script,
        Err(error) => {
            return not_checked(
                "not checked",
                &format!("cannot write the job script to a temporary file: {error}"),
            )
        }
    };
    let workers = (submission.last_worker - submission.first_worker + 1) as usize;
    let working_dir = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let answer = launchers::sbatch_test_only(
        std::env::var_os("PATH"),
        script.path(),
        workers,
        submission.max_array_parallel,
        &working_dir,
    );
    SubmissionCheck {
        task,
        how: "sbatch --test-only".to_owned(),
        accepted: Some(answer.accepted),
        says: answer.says,
    }
}

/// The script in a temporary file (plan writes nothing to the run
/// directory), removed when dropped.
fn written(text: &str) -> std::io::Result<tempfile::NamedTempFile> {
    let mut file = tempfile::Builder::new()
        .prefix("daisy-plan-check-")
        .suffix(".sbatch")
        .tempfile()?;
    file.write_all(text.as_bytes())?;
    file.flush()?;
    Ok(file)
}
