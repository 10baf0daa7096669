//! The launcher's logic against stand-ins of the SLURM commands: shell
//! scripts on a private PATH that record their arguments and print
//! scripted answers (SLURM's real output, recorded). What SLURM itself
//! does is tested in `tests/slurm.rs`.

use super::*;
use crate::ClusterOptions;
use crate::{JobId, Launcher, Paced};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

const SECRET: &str = "tok-5ecr3t";

/// A stand-in command: appends its arguments to `<name>.calls`, saves
/// `DAISY_CONTEXT` to `<name>.env`, then answers call k from
/// `<name>.<k>.{out,err,rc}` if any exists, else from `<name>.{out,err,rc}`.
const FAKE: &str = r#"#!/bin/sh
d=$(dirname "$0"); n=$(basename "$0")
echo "$*" >> "$d/$n.calls"
[ -n "$DAISY_CONTEXT" ] && printf %s "$DAISY_CONTEXT" > "$d/$n.env"
k=$(wc -l < "$d/$n.calls" | tr -d ' ')
for f in "$d/$n.$k" "$d/$n"; do
  if [ -e "$f.out" ] || [ -e "$f.err" ] || [ -e "$f.rc" ]; then
    [ -e "$f.out" ] && cat "$f.out"
    [ -e "$f.err" ] && cat "$f.err" >&2
    exit "$(cat "$f.rc" 2>/dev/null || echo 0)"
  fi
done
"#;

struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for name in SLURM_COMMANDS {
            let path = dir.path().join(name);
            std::fs::write(&path, FAKE).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self { dir }
    }

    /// Scripts the answer of `command` (call `call`, 1-based, or every call).
    fn answer(&self, command: &str, call: Option<usize>, out: &str, err: &str, rc: i32) {
        let stem = match call {
            Some(k) => format!("{command}.{k}"),
            None => command.to_owned(),
        };
        let file = |ext: &str| self.dir.path().join(format!("{stem}.{ext}"));
        std::fs::write(file("out"), out).unwrap();
        std::fs::write(file("err"), err).unwrap();
        std::fs::write(file("rc"), rc.to_string()).unwrap();
    }

    fn calls(&self, command: &str) -> Vec<String> {
        let path = self.dir.path().join(format!("{command}.calls"));
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }

    fn launcher(&self) -> SbatchLauncher {
        SbatchLauncher::with_path(Some(self.dir.path().into()))
            .unwrap()
            .with_retry_delays(vec![Duration::ZERO; 3])
            .with_poll_interval(Duration::from_secs(60))
            .with_cancel_on_drop(false)
            .with_max_array_size(None)
    }

    fn requests(&self, first: u64, count: u64) -> Vec<WorkerRequest> {
        (first..first + count)
            .map(|worker_id| WorkerRequest {
                task_id: "predict".into(),
                worker_id,
                program: "/bin/daisy-worker".into(),
                args: vec![],
                env: vec![(
                    "DAISY_CONTEXT".into(),
                    format!("{{\"token\":\"{SECRET}\"}}"),
                )],
                working_dir: self.dir.path().into(),
                log_dir: self.dir.path().join("logs"),
                requires: Default::default(),
                cluster: ClusterOptions::default(),
            })
            .collect()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn ids(results: Vec<Result<JobId, LaunchError>>) -> Vec<String> {
    results.into_iter().map(|r| r.unwrap().0).collect()
}

/// A launcher that submitted workers 10..13 as array 77.
fn started(fake: &Fake) -> SbatchLauncher {
    fake.answer("sbatch", None, "77\n", "", 0);
    let mut launcher = fake.launcher();
    assert_eq!(
        ids(launcher.start_many(&fake.requests(10, 3))),
        ["77_0", "77_1", "77_2"]
    );
    launcher
}

#[test]
fn a_group_is_one_array_submitted_with_the_context_in_the_environment() {
    let fake = Fake::new();
    let launcher = started(&fake);
    let script = fake.path("logs/worker-10-12.sbatch");
    assert_eq!(
        fake.calls("sbatch"),
        [format!(
            "--parsable --export=ALL --array=0-2 {}",
            script.display()
        )]
    );
    assert!(std::fs::read_to_string(fake.path("sbatch.env"))
        .unwrap()
        .contains(SECRET));
    let script = std::fs::read_to_string(script).unwrap();
    assert!(script.contains("#SBATCH --job-name=daisy-predict") && !script.contains(SECRET));
    assert_eq!(launcher.calls().submissions, 1);
}

#[test]
fn the_array_cap_and_non_consecutive_ids() {
    let fake = Fake::new();
    fake.answer("sbatch", None, "5;other\n", "", 0);
    let mut launcher = fake.launcher();
    let mut requests = fake.requests(0, 2);
    requests.extend(fake.requests(7, 1));
    requests
        .iter_mut()
        .for_each(|r| r.cluster.max_array_parallel = Some(2));
    assert_eq!(ids(launcher.start_many(&requests)), ["5_0", "5_1", "5_0"]);
    let calls = fake.calls("sbatch");
    assert!(
        calls[0].contains("--array=0-1%2") && calls[1].contains("--array=0-0%2"),
        "{calls:?}"
    );
}

#[test]
fn transient_sbatch_failures_are_retried() {
    let fake = Fake::new();
    let busy =
        "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n";
    fake.answer("sbatch", Some(1), "", busy, 1);
    fake.answer("sbatch", Some(2), "", busy, 1);
    fake.answer("sbatch", None, "8\n", "", 0);
    let mut launcher = fake.launcher();
    assert_eq!(launcher.start(&fake.requests(0, 1)[0]).unwrap().0, "8_0");
    assert_eq!(launcher.calls().submissions, 3);
}

#[test]
fn retries_are_bounded() {
    let fake = Fake::new();
    let busy = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n";
    fake.answer("sbatch", None, "", busy, 1);
    let mut launcher = fake.launcher();
    let error = launcher.start(&fake.requests(0, 1)[0]).unwrap_err();
    assert!(
        matches!(&error, LaunchError::Submit { permanent: false, stderr } if stderr.contains("connect failure"))
    );
    assert_eq!(launcher.calls().submissions, 4);
}

#[test]
fn a_permanent_failure_fails_every_worker_of_the_group_without_retry() {
    let fake = Fake::new();
    let refused = "sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid partition name specified\n";
    fake.answer("sbatch", None, "", refused, 1);
    let mut launcher = fake.launcher();
    let results = launcher.start_many(&fake.requests(0, 3));
    assert_eq!(results.len(), 3);
    for result in results {
        let error = result.unwrap_err();
        assert!(
            matches!(
                &error,
                LaunchError::Submit {
                    permanent: true,
                    ..
                }
            ),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .contains("invalid partition specified: nope"),
            "{error}"
        );
    }
    assert_eq!(launcher.calls().submissions, 1);
    assert!(launcher.poll_ended().is_empty());
    assert_eq!(launcher.calls().squeue, 0, "nothing to ask about");
}

#[test]
fn output_that_is_no_job_id_is_an_error() {
    let fake = Fake::new();
    fake.answer("sbatch", None, "Submitted batch job 5\n", "", 0);
    let error = fake.launcher().start(&fake.requests(0, 1)[0]).unwrap_err();
    assert!(
        matches!(error, LaunchError::UnexpectedOutput { .. }),
        "{error}"
    );
}

#[test]
fn a_worker_id_in_use_is_refused_alone() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    let results = launcher.start_many(&fake.requests(12, 2));
    assert!(matches!(
        results[0],
        Err(LaunchError::WorkerIdInUse { worker_id: 12, .. })
    ));
    assert_eq!(results[1].as_ref().unwrap().0, "77_0");
}

#[test]
fn pending_and_running_jobs_are_not_reported_and_one_poll_is_one_squeue() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    fake.answer(
        "squeue",
        None,
        "77_0|78|RUNNING\n77_1|77|PENDING\n77_2|77|PENDING\n",
        "",
        0,
    );
    assert!(launcher.poll_ended().is_empty());
    assert!(launcher.poll_ended().is_empty());
    assert_eq!(
        fake.calls("squeue"),
        ["--noheader --array --jobs=77 --format=%i|%A|%T"; 2]
    );
    assert_eq!(launcher.calls().status(), 2);
}

#[test]
fn ended_jobs_are_looked_up_and_reported_once() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    fake.answer(
        "squeue",
        Some(1),
        "77_0|78|RUNNING\n77_1|79|RUNNING\n77_2|77|PENDING\n",
        "",
        0,
    );
    fake.answer("squeue", None, "77_2|77|PENDING\n", "", 0);
    launcher.poll_ended();
    fake.answer(
        "sacct",
        Some(1),
        "",
        "Slurm accounting storage is disabled\n",
        1,
    );
    fake.answer("sacct", None, "78|78|COMPLETED|0:0\n", "", 0);
    fake.answer("scontrol", None, "JobId=79 ArrayJobId=77 ArrayTaskId=1 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0\n", "", 0);
    let ended = launcher.poll_ended();
    assert_eq!(
        ended,
        [
            (10, JobId("77_0".into()), JobEnd::Exited { code: 0 }),
            (
                11,
                JobId("77_1".into()),
                JobEnd::Failed {
                    reason: "SLURM job state FAILED (exit code 3)".into()
                }
            ),
        ]
    );
    assert_eq!(
        fake.calls("sacct")[1],
        "-c -X --noheader --parsable2 --format=JobID,JobIDRaw,State,ExitCode --jobs=78,79"
    );
    assert_eq!(fake.calls("scontrol"), ["-o show job 77"]);
    assert!(
        launcher.poll_ended().is_empty(),
        "each end is reported once"
    );
}

#[test]
fn with_accounting_sacct_is_asked_by_array() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    fake.answer("squeue", None, "77_2|77|PENDING\n", "", 0);
    fake.answer(
        "sacct",
        None,
        "77_0|78|COMPLETED|0:0\n77_1|79|CANCELLED by 0|0:15\n",
        "",
        0,
    );
    let ended = launcher.poll_ended();
    assert_eq!(ended.len(), 2);
    assert_eq!(ended[1].2, JobEnd::Cancelled);
    assert_eq!(
        fake.calls("sacct"),
        ["-X --noheader --parsable2 --format=JobID,JobIDRaw,State,ExitCode --jobs=77"]
    );
    assert!(fake.calls("scontrol").is_empty(), "sacct knew everything");
}

#[test]
fn jobs_nobody_knows_anymore_end_as_failed_state_unknown() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    fake.answer(
        "squeue",
        None,
        "",
        "slurm_load_jobs error: Invalid job id specified\n",
        1,
    );
    fake.answer(
        "sacct",
        None,
        "",
        "Slurm accounting storage is disabled\n",
        1,
    );
    fake.answer(
        "scontrol",
        None,
        "",
        "slurm_load_jobs error: Invalid job id specified\n",
        1,
    );
    let ended = launcher.poll_ended();
    assert_eq!(ended.len(), 3);
    let JobEnd::Failed { reason } = &ended[0].2 else {
        panic!("{ended:?}")
    };
    assert!(reason.contains("77_0 left the queue"), "{reason}");
}

#[test]
fn scontrol_showing_a_job_active_keeps_it() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    fake.answer("squeue", None, "77_1|77|PENDING\n77_2|77|PENDING\n", "", 0);
    fake.answer(
        "sacct",
        None,
        "",
        "Slurm accounting storage is disabled\n",
        1,
    );
    fake.answer(
        "scontrol",
        None,
        "JobId=78 ArrayJobId=77 ArrayTaskId=0 JobState=COMPLETING ExitCode=0:0\n",
        "",
        0,
    );
    assert!(launcher.poll_ended().is_empty());
    fake.answer(
        "scontrol",
        None,
        "JobId=78 ArrayJobId=77 ArrayTaskId=0 JobState=COMPLETED ExitCode=0:0\n",
        "",
        0,
    );
    assert_eq!(launcher.poll_ended()[0].2, JobEnd::Exited { code: 0 });
}

#[test]
fn a_failing_squeue_declares_nothing_and_backs_off() {
    let fake = Fake::new();
    // Long enough that no pause of a loaded machine between two polls
    // passes for the back-off.
    let mut launcher = started(&fake).with_poll_interval(Duration::from_secs(2));
    let busy = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n";
    fake.answer("squeue", None, "", busy, 1);
    assert!(launcher.poll_ended().is_empty());
    assert!(launcher.poll_ended().is_empty());
    assert_eq!(launcher.calls().squeue, 1, "the second poll waits");
    std::thread::sleep(Duration::from_millis(2100));
    launcher.poll_ended();
    assert_eq!(launcher.calls().squeue, 2);
    launcher.poll_ended();
    assert_eq!(launcher.calls().squeue, 2, "now waits twice as long");
    assert!(fake.calls("sacct").is_empty() && fake.calls("scontrol").is_empty());
}

#[test]
fn cancel_is_one_scancel_and_reports_cancelled_once() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    launcher.cancel(&[11, 99]);
    launcher.cancel_all();
    assert_eq!(fake.calls("scancel"), ["77_1", "77"]);
    let ended = launcher.poll_ended();
    let workers: Vec<(u64, JobEnd)> = ended.into_iter().map(|(w, _, end)| (w, end)).collect();
    assert_eq!(
        workers,
        [
            (11, JobEnd::Cancelled),
            (10, JobEnd::Cancelled),
            (12, JobEnd::Cancelled)
        ]
    );
    assert!(launcher.poll_ended().is_empty());
    launcher.cancel_all();
    assert_eq!(launcher.calls().cancels, 2, "nothing left to cancel");
}

#[test]
fn dropping_the_launcher_cancels_its_jobs() {
    let fake = Fake::new();
    drop(started(&fake).with_cancel_on_drop(true));
    assert_eq!(fake.calls("scancel"), ["77"]);
}

#[test]
fn several_arrays_cancelled_at_once() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    fake.answer("sbatch", None, "80\n", "", 0);
    launcher.start_many(&fake.requests(13, 2));
    launcher.cancel(&[10, 13, 14]);
    assert_eq!(fake.calls("scancel"), ["77_0 80"]);
}

#[test]
fn the_only_element_of_an_array_is_found_in_the_jobcomp_file_by_the_array_id() {
    let fake = Fake::new();
    fake.answer("sbatch", None, "90\n", "", 0);
    let mut launcher = fake.launcher();
    launcher.start(&fake.requests(0, 1)[0]).unwrap();
    fake.answer("squeue", None, "", "", 0);
    fake.answer(
        "sacct",
        Some(1),
        "",
        "Slurm accounting storage is disabled\n",
        1,
    );
    fake.answer("sacct", None, "90|90|CANCELLED|0:0\n", "", 0);
    let ended = launcher.poll_ended();
    assert_eq!(ended, [(0, JobId("90_0".into()), JobEnd::Cancelled)]);
    assert!(fake.calls("sacct")[1].ends_with("--jobs=90"));
    assert!(fake.calls("scontrol").is_empty());
}

#[test]
fn the_only_element_cancelled_while_pending_is_found_by_scontrol_by_its_raw_id() {
    let fake = Fake::new();
    fake.answer("sbatch", None, "27\n", "", 0);
    let mut launcher = fake.launcher();
    launcher.start(&fake.requests(0, 1)[0]).unwrap();
    fake.answer("squeue", None, "", "", 0);
    fake.answer("sacct", None, "", "", 0);
    fake.answer(
        "scontrol",
        None,
        "JobId=27 ArrayJobId=27 ArrayTaskId=4294967294 JobState=CANCELLED ExitCode=0:0\n",
        "",
        0,
    );
    let ended = launcher.poll_ended();
    assert_eq!(ended, [(0, JobId("27_0".into()), JobEnd::Cancelled)]);
}

#[test]
fn with_accounting_a_job_sacct_does_not_know_yet_is_asked_about_again() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    fake.answer("squeue", None, "77_1|77|PENDING\n77_2|77|PENDING\n", "", 0);
    fake.answer("sacct", Some(1), "", "", 0);
    fake.answer(
        "scontrol",
        None,
        "",
        "slurm_load_jobs error: Invalid job id specified\n",
        1,
    );
    assert!(launcher.poll_ended().is_empty(), "slurmdbd may lag");
    fake.answer("sacct", None, "77_0|78|COMPLETED|0:0\n", "", 0);
    assert_eq!(
        launcher.poll_ended(),
        [(10, JobId("77_0".into()), JobEnd::Exited { code: 0 })]
    );
    assert!(launcher.poll_ended().is_empty(), "reported once");
}

#[test]
fn after_a_worker_left_uncleanly_jobs_are_polled_every_second_until_its_end_is_known() {
    let fake = Fake::new();
    let mut launcher = started(&fake);
    assert_eq!(launcher.poll_interval(), Duration::from_secs(60));
    launcher.left(&[99]);
    assert_eq!(
        launcher.poll_interval(),
        Duration::from_secs(60),
        "an untracked worker changes nothing"
    );
    launcher.left(&[11]);
    assert_eq!(launcher.poll_interval(), crate::POLL_AFTER_A_LOSS);
    fake.answer("squeue", None, "77_0|77|RUNNING\n77_2|77|RUNNING\n", "", 0);
    fake.answer("sacct", None, "77_1|79|FAILED|9:0\n", "", 0);
    let ended = launcher.poll_ended();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].0, 11);
    assert_eq!(
        launcher.poll_interval(),
        Duration::from_secs(60),
        "its end is known"
    );
}

/// A launcher that submitted workers 10..14 as array 77 of two jobs of
/// two, not polled yet.
fn two_per_job_submitted(fake: &Fake) -> SbatchLauncher {
    fake.answer("sbatch", None, "77\n", "", 0);
    let mut launcher = fake.launcher();
    let mut requests = fake.requests(10, 4);
    for request in &mut requests {
        request.cluster.workers_per_job = Some(2);
    }
    assert_eq!(
        ids(launcher.start_many(&requests)),
        ["77_0", "77_0", "77_1", "77_1"]
    );
    launcher
}

/// [`two_per_job_submitted`], both jobs seen running (raw ids 78 and 77).
fn two_per_job(fake: &Fake) -> SbatchLauncher {
    let mut launcher = two_per_job_submitted(fake);
    fake.answer("squeue", None, "77_0|78|RUNNING\n77_1|77|RUNNING\n", "", 0);
    assert!(launcher.poll_ended().is_empty());
    assert!(fake.calls("sacct").is_empty(), "nobody left");
    launcher
}

#[test]
fn a_worker_that_left_a_job_of_several_ends_with_its_job_step() {
    let fake = Fake::new();
    let mut launcher = two_per_job(&fake);
    launcher.left(&[11]);
    fake.answer(
        "sacct",
        Some(1),
        "78.batch|batch|RUNNING|0:0\n78.0|daisy-w10|RUNNING|0:0\n",
        "",
        0,
    );
    assert!(
        launcher.poll_ended().is_empty(),
        "sacct does not know the step's end yet"
    );
    fake.answer(
        "sacct",
        None,
        "78.batch|batch|RUNNING|0:0\n78.0|daisy-w10|RUNNING|0:0\n78.1|daisy-w11|CANCELLED|0:9\n",
        "",
        0,
    );
    let reason = "SLURM job step 78.1 ended CANCELLED (exit code 0, signal 9)".to_string();
    assert_eq!(
        launcher.poll_ended(),
        [(11, JobId("77_0".into()), JobEnd::Failed { reason })]
    );
    assert_eq!(
        fake.calls("sacct"),
        ["--noheader --parsable2 --format=JobIDRaw,JobName,State,ExitCode --jobs=78"; 2]
    );
    assert!(launcher.poll_ended().is_empty());
    assert_eq!(
        fake.calls("sacct").len(),
        2,
        "reported once, not asked again"
    );
}

#[test]
fn a_worker_that_left_a_job_of_several_that_ended_since_waits_for_its_steps_end() {
    let fake = Fake::new();
    let mut launcher = two_per_job(&fake);
    launcher.left(&[11]);
    fake.answer("squeue", None, "77_1|77|RUNNING\n", "", 0);
    fake.answer("sacct", Some(1), "78.batch|batch|COMPLETED|0:0\n", "", 0);
    fake.answer("sacct", Some(2), "77_0|78|COMPLETED|0:0\n", "", 0);
    assert_eq!(
        launcher.poll_ended(),
        [(10, JobId("77_0".into()), JobEnd::Exited { code: 0 })],
        "the job's end is its other worker's, not the one that left"
    );
    fake.answer(
        "sacct",
        Some(3),
        "78.1|daisy-w11|OUT_OF_MEMORY|0:125\n",
        "",
        0,
    );
    let reason = "SLURM job step 78.1 ended OUT_OF_MEMORY (exit code 0, signal 125)".to_string();
    assert_eq!(
        launcher.poll_ended(),
        [(11, JobId("77_0".into()), JobEnd::Failed { reason })]
    );
}

#[test]
fn the_step_of_a_job_no_poll_saw_running_is_asked_about_by_its_array_element() {
    let fake = Fake::new();
    let mut launcher = two_per_job_submitted(&fake);
    launcher.left(&[11]);
    fake.answer("squeue", None, "", "", 0);
    fake.answer("sacct", Some(1), "78.1|daisy-w11|FAILED|3:0\n", "", 0);
    fake.answer(
        "sacct",
        Some(2),
        "77_0|78|COMPLETED|0:0\n77_1|77|COMPLETED|0:0\n",
        "",
        0,
    );
    let ended: Vec<(u64, JobEnd)> = (launcher.poll_ended().into_iter())
        .map(|(worker, _, end)| (worker, end))
        .collect();
    let reason = "SLURM job step 78.1 ended FAILED (exit code 3)".to_string();
    let done = JobEnd::Exited { code: 0 };
    assert_eq!(
        ended,
        [
            (10, done.clone()),
            (12, done.clone()),
            (13, done),
            (11, JobEnd::Failed { reason })
        ]
    );
    assert!(fake.calls("sacct")[0].ends_with("--jobs=77_0"));
}

#[test]
fn without_accounting_a_worker_that_left_a_job_of_several_does_not_take_the_jobs_end() {
    let fake = Fake::new();
    let mut launcher = two_per_job(&fake);
    launcher.left(&[11]);
    fake.answer("squeue", None, "", "", 0);
    let disabled = "Slurm accounting storage is disabled\n";
    fake.answer("sacct", Some(1), "", disabled, 1);
    fake.answer("sacct", Some(2), "", disabled, 1);
    fake.answer(
        "sacct",
        None,
        "78|78|COMPLETED|0:0\n77|77|COMPLETED|0:0\n",
        "",
        0,
    );
    let first: Vec<u64> = (launcher.poll_ended().into_iter())
        .map(|(worker, _, _)| worker)
        .collect();
    assert_eq!(first, [10, 12, 13]);
    let reason = "its job step ended before its job 77_0, which exited with code 0; \
                  SLURM kept no record of how the step ended"
        .to_string();
    assert_eq!(
        launcher.poll_ended(),
        [(11, JobId("77_0".into()), JobEnd::Failed { reason })]
    );
    assert!(
        (fake.calls("sacct").iter())
            .all(|call| !call.contains("JobName") || call.ends_with("--jobs=78")),
        "no step is asked about once sacct said it has no accounting"
    );
    assert_eq!(fake.calls("sacct").len(), 4);
}

#[test]
fn a_job_that_runs_on_after_every_worker_in_it_ended_is_cancelled() {
    let fake = Fake::new();
    let mut launcher = two_per_job(&fake);
    launcher.left(&[10, 11]);
    fake.answer(
        "sacct",
        None,
        "78.0|daisy-w10|CANCELLED|0:9\n78.1|daisy-w11|CANCELLED|0:9\n",
        "",
        0,
    );
    let ended: Vec<u64> = (launcher.poll_ended().into_iter())
        .map(|(worker, _, _)| worker)
        .collect();
    assert_eq!(ended, [10, 11]);
    assert_eq!(
        fake.calls("scancel"),
        ["77_0"],
        "its node died: SLURM would requeue it, and nothing would cancel it later"
    );
}
