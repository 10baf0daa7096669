//! The slurmrestd launcher against a real slurmrestd: the single-node
//! cluster of `ci/slurm/start-local-slurm.sh` started with
//! `DAISY_SLURM_RESTD=1` (slurmrestd 22.05, OpenAPI v0.0.38, JWT auth on
//! 127.0.0.1:6820, or where `SLURMRESTD_URL` says).
//!
//! Every test first calls [`needs_slurmrestd`]: when slurmrestd does not
//! answer it fails, saying so, so no test passes without running
//! (`ci/test.sh` leaves these tests out then). Tokens come from `scontrol token lifespan=600`.
//! Every job a test submits is cancelled when the test ends, passed or
//! not ([`JobCleanup`], and the launcher's own drop). Jobs are small shell
//! programs standing in for daisy-worker.

use std::collections::BTreeMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::*;
use launchers::{
    ClusterOptions, JobEnd, JobId, LaunchError, Launcher, Paced, SlurmrestdLauncher,
    DEFAULT_SLURMRESTD_URL,
};

fn restd_url() -> String {
    std::env::var("SLURMRESTD_URL").unwrap_or_else(|_| DEFAULT_SLURMRESTD_URL.to_owned())
}

/// Fails `test` unless slurmrestd accepts connections.
fn needs_slurmrestd(test: &str) {
    let url = restd_url();
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let answers = address
        .to_socket_addrs()
        .ok()
        .and_then(|mut addresses| addresses.next())
        .is_some_and(|address| {
            TcpStream::connect_timeout(&address, Duration::from_secs(2)).is_ok()
        });
    if !answers {
        let why = format!("no slurmrestd at {url}");
        let how =
            "start one with `DAISY_SLURM_RESTD=1 bash ci/slurm/start-local-slurm.sh` (as root; \
                   it adds slurmrestd to a running cluster), or set SLURMRESTD_URL";
        missing(test, &why, how);
    }
}

/// A fresh JWT for the current user, as `scontrol token` prints it.
fn token(lifespan: u32) -> String {
    let output = Command::new("scontrol")
        .args(["token", &format!("lifespan={lifespan}")])
        .output()
        .expect("scontrol");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let token = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("SLURM_JWT="));
    let stderr = String::from_utf8_lossy(&output.stderr);
    token
        .unwrap_or_else(|| panic!("scontrol token printed {stdout:?} {stderr:?}"))
        .to_owned()
}

fn user() -> String {
    let output = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn launcher_with(token: &str) -> SlurmrestdLauncher {
    SlurmrestdLauncher::new(&restd_url(), &user(), token)
        .expect("a slurmrestd launcher")
        .with_retry_delays(vec![Duration::from_millis(200); 3])
        .with_poll_interval(Duration::from_millis(200))
}

fn launcher() -> SlurmrestdLauncher {
    launcher_with(&token(600))
}

fn scontrol_show(job: &str) -> String {
    let output = Command::new("scontrol")
        .args(["-o", "show", "job", job])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn assert_permanent(error: &LaunchError) {
    assert!(
        matches!(
            error,
            LaunchError::Submit {
                permanent: true,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn an_array_of_three_runs_with_the_context_and_each_end_is_reported_once() {
    needs_slurmrestd("an_array_of_three_runs...");
    let (run, mut cleanup, mut launcher) = (Run::new("three"), JobCleanup::scancel(), launcher());
    let script = "echo \"$SLURM_ARRAY_TASK_ID $DAISY_CONTEXT_TEST\" > out-$SLURM_ARRAY_TASK_ID.txt";
    let requests = run.requests(3, script, ClusterOptions::default());
    let jobs = start(&mut launcher, &requests, &mut cleanup);
    let array = array_of(&jobs[0]);
    let expected: Vec<JobId> = (0..3).map(|i| JobId(format!("{array}_{i}"))).collect();
    assert_eq!(jobs, expected);

    let ended = ends(&mut launcher, 3);
    let expected: Vec<_> = (0..3)
        .map(|i| (i, jobs[i as usize].clone(), JobEnd::Exited { code: 0 }))
        .collect();
    assert_eq!(ended, expected, "each worker ended once, with code 0");
    for i in 0..3 {
        let written = read(&run.path(&format!("out-{i}.txt")));
        assert_eq!(written, format!("{i} {SECRET}\n"));
    }
    let kept = read(&run.log_dir().join("worker-0-2.sbatch"));
    assert!(!kept.contains(SECRET), "{kept}");
    let shown = scontrol_show(&array);
    assert!(shown.contains("JobName=daisy-three"), "{shown}");
    assert!(run.log_dir().join(format!("worker-{array}_2.out")).exists());
    let calls = launcher.calls();
    assert_eq!(calls.submissions, 1);
    eprintln!("three workers over slurmrestd: {calls:?}");
}

#[test]
fn a_held_job_keeps_its_slot_gets_its_resources_and_is_reported_cancelled_once() {
    needs_slurmrestd("a_held_job_keeps_its_slot...");
    let (run, mut cleanup, mut launcher) = (Run::new("held"), JobCleanup::scancel(), launcher());
    let mut requests = run.requests(2, "true", held());
    for request in &mut requests {
        request.requires = BTreeMap::from([("cpu".into(), 2), ("mem".into(), 64)]);
        request.cluster.time = Some("0:05:00".into());
    }
    let jobs = start(&mut launcher, &requests, &mut cleanup);
    for _ in 0..3 {
        assert!(launcher.poll_ended().is_empty(), "pending is not ended");
        std::thread::sleep(Duration::from_millis(300));
    }
    let array = array_of(&jobs[0]);
    let shown = scontrol_show(&array);
    for wanted in [
        "JobState=PENDING",
        "Reason=JobHeldUser",
        "NumCPUs=2",
        "TimeLimit=00:05:00",
        "MinMemoryNode=64M",
    ] {
        assert!(shown.contains(wanted), "{wanted}: {shown}");
    }

    launcher.cancel(&[0]);
    let status = Command::new("scancel").arg(&jobs[1].0).status().unwrap();
    assert!(status.success(), "the other one cancelled outside daisy");
    let ended = ends(&mut launcher, 2);
    assert_eq!(ended.len(), 2, "{ended:?}");
    assert_eq!(
        ended[0],
        (0, jobs[0].clone(), JobEnd::Cancelled),
        "reported once"
    );
    // A pending element cancelled by its index leaves slurmctld's listing
    // at once: nobody can tell how it ended.
    let (worker, job, JobEnd::Failed { reason }) = &ended[1] else {
        panic!("{ended:?}")
    };
    assert_eq!((*worker, job), (1, &jobs[1]));
    assert!(reason.contains("unknown to slurmctld"), "{reason}");
    assert!(squeue(&array).is_empty());
}

#[test]
fn a_held_array_cancelled_outside_daisy_is_reported_cancelled() {
    needs_slurmrestd("a_held_array_cancelled_outside_daisy...");
    let (run, mut cleanup, mut launcher) =
        (Run::new("held-out"), JobCleanup::scancel(), launcher());
    let jobs = start(
        &mut launcher,
        &run.requests(2, "true", held()),
        &mut cleanup,
    );
    assert!(launcher.poll_ended().is_empty());
    let status = Command::new("scancel")
        .arg(array_of(&jobs[0]))
        .status()
        .unwrap();
    assert!(status.success());
    let ended = ends(&mut launcher, 2);
    let expected: Vec<_> = (0..2)
        .map(|i| (i, jobs[i as usize].clone(), JobEnd::Cancelled))
        .collect();
    assert_eq!(ended, expected);
}

#[test]
fn cancel_all_empties_the_queue_of_running_jobs() {
    needs_slurmrestd("cancel_all_empties_the_queue...");
    let (run, mut cleanup, mut launcher) =
        (Run::new("sleepers"), JobCleanup::scancel(), launcher());
    let requests = run.requests(2, "sleep 60", ClusterOptions::default());
    let jobs = start(&mut launcher, &requests, &mut cleanup);
    let array = array_of(&jobs[0]);
    wait_for("both running", || {
        let running = squeue(&array)
            .into_iter()
            .filter(|(_, state)| state == "RUNNING");
        running.count() == 2
    });
    let started = Instant::now();
    launcher.cancel_all();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "one quick DELETE"
    );
    assert_eq!(launcher.calls().cancels, 1);
    wait_for("the queue to forget them", || squeue(&array).is_empty());
    let ended = ends(&mut launcher, 2);
    let expected: Vec<_> = (0..2)
        .map(|i| (i, jobs[i as usize].clone(), JobEnd::Cancelled))
        .collect();
    assert_eq!(ended, expected);
}

#[test]
fn an_invalid_partition_is_a_permanent_error_with_slurmrestds_message() {
    needs_slurmrestd("an_invalid_partition...");
    let (run, mut launcher) = (Run::new("nowhere"), launcher());
    let cluster = ClusterOptions {
        partition: Some("nope".into()),
        ..ClusterOptions::default()
    };
    let error = launcher
        .start(&run.requests(1, "true", cluster)[0])
        .unwrap_err();
    eprintln!("{error}");
    assert_permanent(&error);
    let message = error.to_string();
    assert!(
        message.contains("Invalid partition name specified"),
        "{message}"
    );
    assert_eq!(launcher.calls().submissions, 1, "not retried");
}

#[test]
fn a_wrong_token_is_a_clear_auth_error() {
    needs_slurmrestd("a_wrong_token...");
    let mut wrong = token(600);
    let last = if wrong.ends_with('A') { "B" } else { "A" };
    wrong.replace_range(wrong.len() - 1.., last);
    let (run, mut launcher) = (Run::new("wrong-token"), launcher_with(&wrong));
    let error = launcher
        .start(&run.requests(1, "true", held())[0])
        .unwrap_err();
    eprintln!("{error}");
    assert_permanent(&error);
    let message = error.to_string();
    assert!(
        message.contains("refuses a token") && message.contains("scontrol token"),
        "{message}"
    );
    assert!(!message.contains(&wrong), "{message}");
    assert_eq!(launcher.calls().submissions, 1, "not retried");
}

#[test]
fn an_expired_token_says_so() {
    needs_slurmrestd("an_expired_token...");
    let expiring = token(1);
    std::thread::sleep(Duration::from_millis(2100));
    let (run, mut launcher) = (Run::new("expired"), launcher_with(&expiring));
    let error = launcher
        .start(&run.requests(1, "true", held())[0])
        .unwrap_err();
    eprintln!("{error}");
    assert_permanent(&error);
    assert!(error.to_string().contains("SLURM_JWT expired"), "{error}");
}

#[test]
fn fifty_workers_cost_one_submission_and_a_poll_one_request() {
    needs_slurmrestd("fifty_workers...");
    let (run, mut cleanup, mut launcher) = (Run::new("fifty"), JobCleanup::scancel(), launcher());
    let jobs = start(
        &mut launcher,
        &run.requests(50, "true", held()),
        &mut cleanup,
    );
    assert_eq!(jobs.len(), 50);
    assert!(launcher.poll_ended().is_empty());
    assert!(launcher.poll_ended().is_empty());
    let calls = launcher.calls();
    // One array, or one per MaxArraySize workers where SLURM caps arrays
    // (read through scontrol, which is on PATH here).
    let arrays = 50usize.div_ceil(slurm_max_array_size()) as u64;
    assert_eq!((calls.submissions, calls.polls), (arrays, 2));
    let report = format!(
        "slurmrestd requests for a task with 50 workers: {} submission, {} listing per poll \
         ({calls:?})\n",
        calls.submissions,
        calls.polls / 2,
    );
    let _ = std::io::Write::write_all(&mut std::io::stdout(), report.as_bytes());
    launcher.cancel_all();
    assert_eq!(
        launcher.calls().cancels,
        arrays,
        "one DELETE for each whole array"
    );
    wait_for("the queue to forget them", || {
        jobs.iter().all(|job| squeue(&array_of(job)).is_empty())
    });
}

#[test]
fn a_new_launcher_cancels_the_jobs_an_earlier_one_left_queued() {
    needs_slurmrestd("a_new_launcher_cancels_the_jobs_an_earlier_one_left...");
    let (run, mut cleanup) = (Run::new("earlier"), JobCleanup::scancel());
    let mut earlier = launcher().with_cancel_on_drop(false);
    let jobs = start(&mut earlier, &run.requests(3, "true", held()), &mut cleanup);
    drop(earlier);
    let array = array_of(&jobs[0]);
    let status = Command::new("scancel").arg(&jobs[2].0).status().unwrap();
    assert!(status.success(), "one of them gone before the new launcher");

    let mut later = launcher();
    let mut cancelled = later.cancel_earlier_jobs(&jobs);
    cancelled.sort();
    assert_eq!(cancelled, jobs[..2], "the ones still queued, only");
    assert_eq!(later.calls().polls, 1, "one listing for all");
    wait_for("the queue to forget them", || squeue(&array).is_empty());
    let unknown = [JobId("not-a-job".into())];
    assert!(later.cancel_earlier_jobs(&unknown).is_empty());
}

#[test]
fn a_submission_over_the_qos_limit_waits_and_is_submitted_once_a_job_leaves() {
    needs_slurmrestd("slurmrestd qos limit");
    needs_two_jobs_qos("slurmrestd qos limit");
    let (run, mut cleanup, mut launcher) = (Run::new("qos"), JobCleanup::scancel(), launcher());
    let (requests, results, submitted) =
        start_three_under_the_two_jobs_qos(&mut launcher, &run, &mut cleanup);
    assert_eq!(submitted.len(), 2, "two fit under the limit: {results:?}");
    match &results[2] {
        // slurmrestd gives no reason, only error 2050 and its words.
        Err(LaunchError::Waiting { message, .. }) => {
            assert!(
                message.contains("Job violates accounting/QOS policy"),
                "{message}"
            );
        }
        other => panic!("the third waits for the limit: {other:?}"),
    }
    a_place_frees_and_the_third_is_submitted(&mut launcher, &requests, &mut cleanup);
}
