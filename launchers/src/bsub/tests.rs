//! The launcher against fake bsub, bjobs and bkill (shell scripts in a
//! temporary directory, put on the launcher's PATH, as HyperQueue's tests
//! mock bsub): what each command is given, and what the launcher makes of
//! LSF's answers, down and refusing included. The real thing, through the
//! LSF stand-in on the local SLURM, is in `launchers/tests/lsf.rs`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::*;
use crate::ClusterOptions;
use crate::{JobId, Launcher, Paced};

/// Records its arguments, stdin, DAISY_CONTEXT and directory, then acts
/// out the next line of `bsub.plan`: `down`, `refuse`, `garbage`, or a
/// job id to announce.
const FAKE_BSUB: &str = r#"#!/bin/sh
d=$(dirname "$0")
printf '%s\n' "$*" >> "$d/bsub.args"
cat > "$d/bsub.stdin"
printf '%s\n' "${DAISY_CONTEXT-unset}" > "$d/bsub.env"
pwd > "$d/bsub.cwd"
step=$(head -n 1 "$d/bsub.plan")
tail -n +2 "$d/bsub.plan" > "$d/plan.tmp" && mv "$d/plan.tmp" "$d/bsub.plan"
case "$step" in
  down) echo "LSF is down. Please wait ..." >&2; exit 255;;
  refuse) echo "nosuch: No such queue. Job not submitted." >&2; exit 255;;
  garbage) echo "hello"; exit 0;;
  *) echo "Job <$step> is submitted to queue <normal>.";;
esac
"#;

/// Records its arguments and replays `<name>.out`, `<name>.err` and the
/// exit status in `<name>.status`.
const FAKE_REPLAY: &str = r#"#!/bin/sh
d=$(dirname "$0"); n=$(basename "$0")
printf '%s\n' "$*" >> "$d/$n.args"
cat "$d/$n.out" 2>/dev/null
cat "$d/$n.err" >&2 2>/dev/null
exit $(cat "$d/$n.status" 2>/dev/null || echo 0)
"#;

/// A directory of fake LSF commands and a launcher using them.
struct FakeLsf {
    dir: tempfile::TempDir,
}

impl FakeLsf {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("bsub", FAKE_BSUB),
            ("bjobs", FAKE_REPLAY),
            ("bkill", FAKE_REPLAY),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self { dir }
    }

    fn launcher(&self) -> BsubLauncher {
        BsubLauncher::with_path(Some(self.dir.path().into()))
            .unwrap()
            .with_retry_delays(vec![Duration::ZERO; 2])
            .with_command_timeout(Duration::from_secs(20))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).unwrap();
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// What bsub will do on its next calls, one step per line.
    fn plan(&self, steps: &[&str]) {
        self.write("bsub.plan", &format!("{}\n", steps.join("\n")));
    }

    /// What bjobs will answer on its next calls.
    fn bjobs(&self, stdout: &str, stderr: &str, status: u8) {
        self.write("bjobs.out", stdout);
        self.write("bjobs.err", stderr);
        self.write("bjobs.status", &status.to_string());
    }

    fn workers(&self, first: u64, count: u64) -> Vec<WorkerRequest> {
        (first..first + count).map(|id| self.request(id)).collect()
    }

    fn request(&self, worker_id: u64) -> WorkerRequest {
        WorkerRequest {
            task_id: "predict".into(),
            worker_id,
            program: "/opt/daisy/bin/daisy-worker".into(),
            args: Vec::new(),
            env: vec![("DAISY_CONTEXT".into(), "{\"token\":\"s3cr3t\"}".into())],
            working_dir: self.dir.path().to_path_buf(),
            log_dir: self.path("logs/predict"),
            requires: BTreeMap::new(),
            cluster: ClusterOptions::default(),
        }
    }
}

fn job_ids(results: Vec<Result<JobId, LaunchError>>) -> Vec<String> {
    results
        .into_iter()
        .map(|result| result.unwrap().0)
        .collect()
}

fn ends(ended: Vec<(u64, JobId, JobEnd)>) -> Vec<(u64, String, JobEnd)> {
    ended
        .into_iter()
        .map(|(worker, job, end)| (worker, job.0, end))
        .collect()
}

#[test]
fn three_workers_are_one_bsub_of_one_array_with_the_token_in_its_environment() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777"]);
    let mut launcher = lsf.launcher().with_cancel_on_drop(false);
    let ids = job_ids(launcher.start_many(&lsf.workers(4, 3)));
    assert_eq!(ids, ["777[1]", "777[2]", "777[3]"]);
    assert_eq!(launcher.calls().submissions, 1);
    assert_eq!(
        lsf.read("bsub.args"),
        "\n",
        "nothing on bsub's command line"
    );
    let script = lsf.read("bsub.stdin");
    assert!(
        script.contains("#BSUB -J \"daisy-predict[1-3]\"\n"),
        "{script}"
    );
    assert!(!script.contains("s3cr3t"), "{script}");
    assert_eq!(lsf.read("bsub.env"), "{\"token\":\"s3cr3t\"}\n");
    let cwd = lsf.dir.path().canonicalize().unwrap();
    assert_eq!(lsf.read("bsub.cwd").trim(), cwd.to_str().unwrap());
    let kept = std::fs::read_to_string(lsf.path("logs/predict/worker-4-6.bsub")).unwrap();
    assert_eq!(kept, script, "the script submitted is kept beside the logs");
}

#[test]
fn transient_failures_are_retried_and_counted() {
    let lsf = FakeLsf::new();
    lsf.plan(&["down", "down", "778"]);
    let mut launcher = lsf.launcher().with_cancel_on_drop(false);
    assert_eq!(
        job_ids(launcher.start_many(&lsf.workers(0, 2))),
        ["778[1]", "778[2]"]
    );
    assert_eq!(launcher.calls().submissions, 3);
}

#[test]
fn lsf_down_beyond_the_retries_is_a_transient_submit_error() {
    let lsf = FakeLsf::new();
    lsf.plan(&["down", "down", "down", "779"]);
    let mut launcher = lsf.launcher();
    let error = launcher.start(&lsf.request(0)).unwrap_err();
    assert!(
        matches!(&error, LaunchError::Submit { permanent: false, stderr } if stderr.contains("LSF is down")),
        "{error}"
    );
    assert_eq!(launcher.calls().submissions, 3, "a try and two retries");
}

#[test]
fn a_refusal_is_permanent_not_retried_and_fails_every_worker_of_the_group() {
    let lsf = FakeLsf::new();
    lsf.plan(&["refuse", "780"]);
    let mut launcher = lsf.launcher();
    let results = launcher.start_many(&lsf.workers(0, 3));
    assert_eq!(results.len(), 3);
    for result in results {
        let error = result.unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(
                error,
                LaunchError::Submit {
                    permanent: true,
                    ..
                }
            ),
            "{message}"
        );
        assert!(
            message.contains("nosuch: No such queue. Job not submitted."),
            "{message}"
        );
    }
    assert_eq!(launcher.calls().submissions, 1);
}

#[test]
fn a_success_without_a_job_id_is_unexpected_output() {
    let lsf = FakeLsf::new();
    lsf.plan(&["garbage"]);
    let error = lsf.launcher().start(&lsf.request(0)).unwrap_err();
    assert!(
        matches!(&error, LaunchError::UnexpectedOutput { output, .. } if output == "hello\n"),
        "{error}"
    );
}

#[test]
fn a_worker_id_still_tracked_is_refused() {
    let lsf = FakeLsf::new();
    lsf.plan(&["781", "782", "783"]);
    let mut launcher = lsf.launcher().with_cancel_on_drop(false);
    launcher.start(&lsf.request(1)).unwrap();
    let results = launcher.start_many(&lsf.workers(0, 3));
    assert_eq!(results[0].as_ref().unwrap().0, "782[1]");
    assert!(matches!(
        results[1],
        Err(LaunchError::WorkerIdInUse { worker_id: 1, .. })
    ));
    assert_eq!(
        results[2].as_ref().unwrap().0,
        "783[1]",
        "a group of its own after the gap"
    );
}

#[test]
fn one_bjobs_per_poll_reports_each_end_once() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777"]);
    let mut launcher = lsf.launcher().with_cancel_on_drop(false);
    launcher.start_many(&lsf.workers(10, 3));
    lsf.bjobs("777 1 DONE -\n777 2 EXIT 3\n777 3 RUN -\n", "", 0);
    let first = ends(launcher.poll_ended());
    let expected = vec![
        (10, "777[1]".to_owned(), JobEnd::Exited { code: 0 }),
        (11, "777[2]".to_owned(), JobEnd::Exited { code: 3 }),
    ];
    assert_eq!(first, expected);
    assert_eq!(
        lsf.read("bjobs.args"),
        "-a -noheader -o jobid jobindex stat exit_code 777\n"
    );
    lsf.bjobs("777 1 DONE -\n777 2 EXIT 3\n777 3 DONE -\n", "", 0);
    let second = ends(launcher.poll_ended());
    assert_eq!(
        second,
        vec![(12, "777[3]".to_owned(), JobEnd::Exited { code: 0 })]
    );
    assert!(launcher.poll_ended().is_empty());
    assert_eq!(
        launcher.calls().status,
        2,
        "no bjobs once nothing is tracked"
    );
}

#[test]
fn pending_and_held_workers_keep_their_slots() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777"]);
    let mut launcher = lsf.launcher().with_cancel_on_drop(false);
    launcher.start_many(&lsf.workers(0, 3));
    lsf.bjobs("777 1 PEND -\n777 2 PSUSP -\n777 3 USUSP -\n", "", 0);
    assert!(launcher.poll_ended().is_empty());
}

#[test]
fn lsf_down_during_a_poll_ends_nothing() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777"]);
    // No pause after a failed poll, so that every poll asks bjobs.
    let mut launcher = lsf
        .launcher()
        .with_cancel_on_drop(false)
        .with_poll_interval(Duration::ZERO);
    launcher.start_many(&lsf.workers(0, 2));
    lsf.bjobs("", "LSF is down. Please wait ...\n", 255);
    assert!(launcher.poll_ended().is_empty());
    lsf.bjobs("", "", 255);
    assert!(
        launcher.poll_ended().is_empty(),
        "a failure without a word ends nothing"
    );
    lsf.bjobs("777 1 DONE -\n777 2 DONE -\n", "", 0);
    assert_eq!(
        launcher.poll_ended().len(),
        2,
        "the workers were still tracked"
    );
}

#[test]
fn lsf_down_makes_the_next_polls_wait() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777"]);
    let mut launcher = lsf.launcher().with_cancel_on_drop(false);
    launcher.start_many(&lsf.workers(0, 2));
    lsf.bjobs("", "LSF is down. Please wait ...\n", 255);
    assert!(launcher.poll_ended().is_empty());
    assert!(launcher.poll_ended().is_empty(), "backing off: no bjobs");
    assert_eq!(launcher.calls().status, 1);
}

#[test]
fn jobs_lsf_forgot_end_as_unknown_failures() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777", "778"]);
    let mut launcher = lsf.launcher().with_cancel_on_drop(false);
    launcher.start_many(&lsf.workers(0, 2));
    launcher.start(&lsf.request(5)).unwrap();
    lsf.bjobs("778 1 RUN -\n", "Job <777> is not found\n", 0);
    let ended = ends(launcher.poll_ended());
    assert_eq!(ended.len(), 2, "{ended:?}");
    for (_, job, end) in ended {
        assert!(job.starts_with("777["), "{job}");
        assert!(
            matches!(&end, JobEnd::Failed { reason } if reason.contains("no longer knows")),
            "{end:?}"
        );
    }
    assert_eq!(
        lsf.read("bjobs.args"),
        "-a -noheader -o jobid jobindex stat exit_code 777 778\n"
    );
}

#[test]
fn cancel_is_one_bkill_with_index_lists_and_reports_cancelled_once() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777"]);
    let mut launcher = lsf.launcher().with_cancel_on_drop(false);
    launcher.start_many(&lsf.workers(0, 3));
    launcher.cancel(&[0, 2, 99]);
    assert_eq!(lsf.read("bkill.args"), "777[1,3]\n");
    lsf.bjobs("777 1 EXIT 130\n777 2 RUN -\n777 3 EXIT 130\n", "", 0);
    let ended = ends(launcher.poll_ended());
    let expected = vec![
        (0, "777[1]".to_owned(), JobEnd::Cancelled),
        (2, "777[3]".to_owned(), JobEnd::Cancelled),
    ];
    assert_eq!(ended, expected);
    assert_eq!(launcher.calls().cancels, 1);
}

#[test]
fn jobs_already_finished_need_no_second_bkill() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777"]);
    lsf.write("bkill.err", "Job <777[1]>: Job has already finished\n");
    lsf.write("bkill.status", "255");
    let mut launcher = lsf.launcher();
    launcher.start_many(&lsf.workers(0, 2));
    launcher.cancel_all();
    assert_eq!(lsf.read("bkill.args"), "777[1-2]\n");
    assert_eq!(launcher.calls().cancels, 1);
}

#[test]
fn bkill_is_retried_while_lsf_is_down() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777"]);
    lsf.write("bkill.err", "LSF is down. Please wait ...\n");
    lsf.write("bkill.status", "255");
    let mut launcher = lsf.launcher().with_cancel_on_drop(false);
    launcher.start(&lsf.request(0)).unwrap();
    launcher.cancel_all();
    assert_eq!(
        launcher.calls().cancels,
        3,
        "a try and two retries, then an error log"
    );
    assert_eq!(
        ends(launcher.poll_ended()),
        vec![(0, "777[1]".to_owned(), JobEnd::Cancelled)]
    );
}

#[test]
fn dropping_the_launcher_kills_its_jobs_unless_told_not_to() {
    let lsf = FakeLsf::new();
    lsf.plan(&["777", "778"]);
    let mut launcher = lsf.launcher();
    launcher.start(&lsf.request(0)).unwrap();
    drop(launcher);
    assert_eq!(lsf.read("bkill.args"), "777[1]\n");
    let mut leaving = lsf.launcher().with_cancel_on_drop(false);
    leaving.start(&lsf.request(0)).unwrap();
    drop(leaving);
    assert_eq!(lsf.read("bkill.args"), "777[1]\n", "no second bkill");
}
