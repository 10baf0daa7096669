//! What the cluster launcher tests (SLURM, the LSF stand-in, slurmrestd)
//! share: failing clearly without a cluster, cancelling every job a test submits,
//! requests for small shell "workers", and waiting for job ends.
//!
//! Each test binary uses part of this module.
#![allow(dead_code)]

use launchers::{ClusterOptions, JobEnd, JobId, LaunchError, Launcher, WorkerRequest};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Stands in for the run token: it must reach the jobs' environment and
/// appear in no script, job name or command line.
pub const SECRET: &str = "daisy-test-token-9f2c41";

/// The longest a test waits for the scheduler to start or end jobs.
pub const WAIT: Duration = Duration::from_secs(90);

/// Fails `test` for want of what it needs, saying how to get it. A test
/// never passes without running: `ci/test.sh` leaves out (and counts as
/// skipped) the tests whose requirements are missing.
pub fn missing(test: &str, why: &str, how: &str) -> ! {
    panic!(
        "{test}: cannot run: {why}; {how}. (ci/test.sh runs only the tests whose \
         requirements are met and reports the others as skipped)"
    );
}

/// Fails `test` unless a SLURM cluster answers.
pub fn needs_slurm(test: &str) {
    let answers = Command::new("sinfo")
        .arg("-h")
        .output()
        .is_ok_and(|output| output.status.success());
    if !answers {
        missing(
            test,
            "no SLURM: `sinfo -h` is missing or fails",
            "start one with `bash ci/slurm/start-local-slurm.sh` (as root), \
             then `source /tmp/daisy-slurm/env.sh` if /etc/slurm/slurm.conf is not linked",
        );
    }
}

/// Cancels the arrays of every job it was given when dropped, so a failing
/// test leaves nothing in the queue.
pub struct JobCleanup {
    /// `scancel`, or the stand-in's `bkill`.
    command: PathBuf,
    arrays: Vec<String>,
}

impl JobCleanup {
    pub fn scancel() -> Self {
        Self {
            command: "scancel".into(),
            arrays: Vec::new(),
        }
    }

    pub fn bkill(command: PathBuf) -> Self {
        Self {
            command,
            arrays: Vec::new(),
        }
    }

    pub fn add(&mut self, job: &JobId) {
        let array = array_of(job);
        if !self.arrays.contains(&array) {
            self.arrays.push(array);
        }
    }
}

impl Drop for JobCleanup {
    fn drop(&mut self) {
        if !self.arrays.is_empty() {
            let _ = Command::new(&self.command).args(&self.arrays).status();
        }
    }
}

/// `77` for `77_3` (SLURM) or `77[3]` (LSF).
pub fn array_of(job: &JobId) -> String {
    job.0.split(['_', '[']).next().unwrap().to_owned()
}

/// A temporary run directory and requests for `/bin/sh -c <script>`
/// workers of one task.
pub struct Run {
    pub dir: tempfile::TempDir,
    pub task: String,
}

impl Run {
    pub fn new(task: &str) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            task: task.to_owned(),
        }
    }

    pub fn requests(
        &self,
        count: u64,
        script: &str,
        cluster: ClusterOptions,
    ) -> Vec<WorkerRequest> {
        let context = format!("{{\"token\":\"{SECRET}\"}}");
        (0..count)
            .map(|worker_id| WorkerRequest {
                task_id: self.task.clone(),
                worker_id,
                program: "/bin/sh".into(),
                args: vec!["-c".into(), script.into()],
                env: vec![
                    ("DAISY_CONTEXT".into(), context.clone()),
                    ("DAISY_CONTEXT_TEST".into(), SECRET.into()),
                ],
                working_dir: self.dir.path().into(),
                log_dir: self.log_dir(),
                requires: BTreeMap::from([("cpu".into(), 1)]),
                cluster: cluster.clone(),
            })
            .collect()
    }

    pub fn log_dir(&self) -> PathBuf {
        self.dir.path().join("logs").join(&self.task)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Launcher options that submit jobs held (pending until released).
pub fn held() -> ClusterOptions {
    ClusterOptions {
        directives: vec!["--hold".into()],
        ..ClusterOptions::default()
    }
}

/// Submits and registers every array for cleanup; panics on any error.
pub fn start(
    launcher: &mut impl Launcher,
    requests: &[WorkerRequest],
    cleanup: &mut JobCleanup,
) -> Vec<JobId> {
    let jobs: Vec<JobId> = launcher
        .start_many(requests)
        .into_iter()
        .map(|result| result.expect("submitted"))
        .collect();
    jobs.iter().for_each(|job| cleanup.add(job));
    jobs
}

/// Polls until `count` ends were reported (or [`WAIT`] passed), then twice
/// more to check that nothing is reported twice.
pub fn ends(launcher: &mut impl Launcher, count: usize) -> Vec<(u64, JobId, JobEnd)> {
    let deadline = Instant::now() + WAIT;
    let mut ended = Vec::new();
    while ended.len() < count && Instant::now() < deadline {
        ended.extend(launcher.poll_ended());
        std::thread::sleep(launcher.poll_interval());
    }
    for _ in 0..2 {
        std::thread::sleep(launcher.poll_interval());
        ended.extend(launcher.poll_ended());
    }
    ended.sort_by_key(|(worker, _, _)| *worker);
    ended
}

/// `(element, state)` for every element of `array` squeue still lists.
pub fn squeue(array: &str) -> Vec<(String, String)> {
    let output = Command::new("squeue")
        .args(["--noheader", "--array", "--jobs", array, "--format=%i %T"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(id, state)| (id.to_owned(), state.to_owned()))
        .collect()
}

pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// SLURM's `MaxArraySize` (`scontrol show config`; 1001 when it does not
/// say): the cluster launchers split arrays to fit it, so a task's
/// workers cost one submission per this many.
#[allow(dead_code)] // not every test binary uses it
pub fn slurm_max_array_size() -> usize {
    let output = Command::new("scontrol").args(["show", "config"]).output();
    let text = output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    text.unwrap_or_default()
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once('=')?;
            (name.trim() == "MaxArraySize").then(|| value.trim().parse().ok())?
        })
        .unwrap_or(1001)
}

/// Needs the QOS `daisy-two-jobs` (MaxSubmitJobsPerUser=2, account
/// `daisy`) that `ci/slurm/start-local-slurm.sh` creates with accounting.
#[allow(dead_code)] // not every test binary uses it
pub fn needs_two_jobs_qos(test: &str) {
    needs_slurm(test);
    let qos = Command::new("sacctmgr")
        .args([
            "-n",
            "-P",
            "show",
            "qos",
            "daisy-two-jobs",
            "format=maxsubmitjobsperuser",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if qos != "2" {
        missing(
            test,
            "SLURM has no QOS daisy-two-jobs with MaxSubmitJobsPerUser=2",
            "start SLURM with DAISY_SLURM_ACCOUNTING=1 bash ci/slurm/start-local-slurm.sh",
        );
    }
}

/// Asks `launcher` for 3 held workers under the QOS `daisy-two-jobs`
/// (account `daisy`): the requests, each result, and the jobs it
/// submitted (registered for cleanup).
#[allow(dead_code)] // not every test binary uses it
pub fn start_three_under_the_two_jobs_qos(
    launcher: &mut impl Launcher,
    run: &Run,
    cleanup: &mut JobCleanup,
) -> (
    Vec<WorkerRequest>,
    Vec<Result<JobId, LaunchError>>,
    Vec<JobId>,
) {
    let cluster = ClusterOptions {
        account: Some("daisy".into()),
        qos: Some("daisy-two-jobs".into()),
        ..held()
    };
    let requests = run.requests(3, "true", cluster);
    let results = launcher.start_many(&requests);
    let submitted: Vec<JobId> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().cloned())
        .collect();
    submitted.iter().for_each(|job| cleanup.add(job));
    (requests, results, submitted)
}

/// Cancels the first of `requests` and waits until the third, which
/// waited for the QOS limit, is submitted; cancels everything after.
#[allow(dead_code)] // not every test binary uses it
pub fn a_place_frees_and_the_third_is_submitted(
    launcher: &mut impl Launcher,
    requests: &[WorkerRequest],
    cleanup: &mut JobCleanup,
) {
    launcher.cancel(&[requests[0].worker_id]);
    let third = requests[2].worker_id;
    let mut started = Vec::new();
    wait_for("the waiting worker to be submitted", || {
        launcher.poll_ended();
        started.extend(launcher.poll_started());
        started
            .iter()
            .any(|(worker, result)| *worker == third && result.is_ok())
    });
    for (_, result) in &started {
        if let Ok(job) = result {
            cleanup.add(job);
        }
    }
    launcher.cancel_all();
}
