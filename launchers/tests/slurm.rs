//! The sbatch launcher against a real SLURM: the single-node cluster of
//! `ci/slurm/start-local-slurm.sh` (SLURM 22.05, no accounting: finished
//! jobs come from `sacct -c` and `scontrol`).
//!
//! Every test first calls [`needs_slurm`]: without a working `sinfo` it
//! fails, saying so, so no test passes without running (`ci/test.sh`
//! leaves these tests out then). Every job a test submits is cancelled when the test
//! ends, passed or not ([`JobCleanup`], and the launcher's own drop). Jobs
//! are small shell programs standing in for daisy-worker; the tests share
//! the node's CPUs, so each uses few (held jobs use none).

use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::*;
use launchers::{ClusterOptions, JobEnd, JobId, LaunchError, Launcher, Paced, SbatchLauncher};

fn launcher() -> SbatchLauncher {
    SbatchLauncher::new()
        .expect("SLURM commands on PATH")
        .with_retry_delays(vec![Duration::from_millis(200); 3])
        .with_poll_interval(Duration::from_millis(200))
}

#[test]
fn an_array_of_three_runs_with_the_context_and_each_end_is_reported_once() {
    needs_slurm("an_array_of_three_runs...");
    let (run, mut cleanup, mut launcher) = (Run::new("three"), JobCleanup::scancel(), launcher());
    let script = "echo \"$SLURM_ARRAY_TASK_ID $DAISY_CONTEXT_TEST\" > out-$SLURM_ARRAY_TASK_ID.txt";
    let jobs = start(
        &mut launcher,
        &run.requests(3, script, ClusterOptions::default()),
        &mut cleanup,
    );
    let array = array_of(&jobs[0]);
    assert_eq!(
        jobs,
        (0..3)
            .map(|i| JobId(format!("{array}_{i}")))
            .collect::<Vec<_>>()
    );

    let ended = ends(&mut launcher, 3);
    let expected: Vec<_> = (0..3)
        .map(|i| (i, jobs[i as usize].clone(), JobEnd::Exited { code: 0 }))
        .collect();
    assert_eq!(ended, expected, "each worker ended once, with code 0");
    for i in 0..3 {
        assert_eq!(
            read(&run.path(&format!("out-{i}.txt"))),
            format!("{i} {SECRET}\n")
        );
    }
    let kept = read(&run.log_dir().join("worker-0-2.sbatch"));
    assert!(
        kept.contains("#SBATCH --job-name=daisy-three") && !kept.contains(SECRET),
        "{kept}"
    );
    let shown = Command::new("scontrol")
        .args(["-o", "show", "job", &array])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("JobName=daisy-three") && !shown.contains(SECRET),
        "{shown}"
    );
    assert!(run.log_dir().join(format!("worker-{array}_2.out")).exists());
    eprintln!("three workers: {:?}", launcher.calls());
}

#[test]
fn a_held_job_keeps_its_slot_until_cancelled_outside_daisy() {
    needs_slurm("a_held_job_keeps_its_slot...");
    let (run, mut cleanup, mut launcher) = (Run::new("held"), JobCleanup::scancel(), launcher());
    let requests = run.requests(1, "true", held());
    let job = start(&mut launcher, &requests, &mut cleanup).remove(0);
    for _ in 0..3 {
        assert!(launcher.poll_ended().is_empty(), "pending is not ended");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        squeue(&array_of(&job)),
        [(job.0.clone(), "PENDING".to_owned())]
    );

    let status = Command::new("scancel")
        .arg(array_of(&job))
        .status()
        .unwrap();
    assert!(status.success());
    let ended = ends(&mut launcher, 1);
    assert_eq!(
        ended,
        [(0, job, JobEnd::Cancelled)],
        "reported once, as cancelled"
    );
}

#[test]
fn a_held_element_cancelled_by_index_is_reported_once() {
    needs_slurm("a_held_element_cancelled_by_index...");
    let (run, mut cleanup, mut launcher) =
        (Run::new("held-index"), JobCleanup::scancel(), launcher());
    let job = start(
        &mut launcher,
        &run.requests(1, "true", held()),
        &mut cleanup,
    )
    .remove(0);
    assert!(launcher.poll_ended().is_empty());
    assert!(Command::new("scancel")
        .arg(&job.0)
        .status()
        .unwrap()
        .success());
    let ended = ends(&mut launcher, 1);
    // scontrol forgets which element the record was (it shows
    // ArrayTaskId=4294967294), but sacct (from slurmdbd, a moment later,
    // or from the jobcomp file) and scontrol's JobId both give the array
    // id, which is the raw id of an array's only element.
    assert_eq!(ended, [(0, job, JobEnd::Cancelled)]);
}

#[test]
fn an_element_of_a_held_array_cancelled_by_index_ends_as_unknown() {
    needs_slurm("an_element_of_a_held_array...");
    let (run, mut cleanup, mut launcher) =
        (Run::new("held-pair"), JobCleanup::scancel(), launcher());
    let jobs = start(
        &mut launcher,
        &run.requests(2, "true", held()),
        &mut cleanup,
    );
    assert!(Command::new("scancel")
        .arg(&jobs[1].0)
        .status()
        .unwrap()
        .success());
    let ended = ends(&mut launcher, 1);
    // SLURM keeps no trace of a pending element cancelled alone: neither
    // sacct (slurmdbd or the jobcomp file) nor scontrol know it.
    assert_eq!(ended.len(), 1, "{ended:?}");
    let (worker, job, JobEnd::Failed { reason }) = &ended[0] else {
        panic!("{ended:?}")
    };
    assert_eq!((*worker, job), (1, &jobs[1]));
    assert!(reason.contains("left the queue"), "{reason}");
    assert_eq!(
        squeue(&array_of(&jobs[0])),
        [(jobs[0].0.clone(), "PENDING".to_owned())]
    );
}

#[test]
fn cancel_all_empties_the_queue_of_running_jobs() {
    needs_slurm("cancel_all_empties_the_queue...");
    let (run, mut cleanup, mut launcher) =
        (Run::new("sleepers"), JobCleanup::scancel(), launcher());
    let jobs = start(
        &mut launcher,
        &run.requests(2, "sleep 60", ClusterOptions::default()),
        &mut cleanup,
    );
    let array = array_of(&jobs[0]);
    wait_for("both running", || {
        squeue(&array)
            .iter()
            .filter(|(_, state)| state == "RUNNING")
            .count()
            == 2
    });
    let started = Instant::now();
    launcher.cancel_all();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "scancel returns at once"
    );
    assert_eq!(launcher.calls().cancels, 1);
    wait_for("the queue to forget them", || squeue(&array).is_empty());
    let ended = ends(&mut launcher, 2);
    let expected: Vec<_> = jobs
        .into_iter()
        .enumerate()
        .map(|(i, job)| (i as u64, job, JobEnd::Cancelled))
        .collect();
    assert_eq!(ended, expected);
}

#[test]
fn an_invalid_partition_is_a_permanent_error_with_slurms_message() {
    needs_slurm("an_invalid_partition...");
    let (run, mut launcher) = (Run::new("nowhere"), launcher());
    let cluster = ClusterOptions {
        partition: Some("nope".into()),
        ..ClusterOptions::default()
    };
    let error = launcher
        .start(&run.requests(1, "true", cluster)[0])
        .unwrap_err();
    eprintln!("{error}");
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
    assert_eq!(launcher.calls().submissions, 1, "not retried");
}

#[test]
fn fifty_workers_cost_one_submission_and_a_poll_one_status_call() {
    needs_slurm("fifty_workers...");
    let (run, mut cleanup, mut launcher) = (Run::new("fifty"), JobCleanup::scancel(), launcher());
    let jobs = start(
        &mut launcher,
        &run.requests(50, "true", held()),
        &mut cleanup,
    );
    assert_eq!(jobs.len(), 50);
    // One array, or one per MaxArraySize workers where SLURM caps arrays.
    let arrays = 50usize.div_ceil(slurm_max_array_size()) as u64;
    assert_eq!(launcher.calls().submissions, arrays);
    assert!(launcher.poll_ended().is_empty());
    assert!(launcher.poll_ended().is_empty());
    let calls = launcher.calls();
    assert_eq!(calls.status(), 2);
    // The issue asks for this count in the test output: written to the
    // stdout stream itself, so libtest's capture does not hide it.
    let report = format!(
        "scheduler calls for a task with 50 workers: {} submission call, {} status call per poll \
         ({} in 2 polls; {calls:?})\n",
        calls.submissions,
        calls.status() / 2,
        calls.status(),
    );
    let _ = std::io::Write::write_all(&mut std::io::stdout(), report.as_bytes());
    launcher.cancel_all();
    assert_eq!(launcher.calls().cancels, 1);
    wait_for("the arrays to leave the queue", || {
        jobs.iter().all(|job| squeue(&array_of(job)).is_empty())
    });
}

/// Launcher options running `per_job` workers in each job.
fn per_job(per_job: u32) -> ClusterOptions {
    ClusterOptions {
        workers_per_job: Some(per_job),
        ..ClusterOptions::default()
    }
}

#[test]
fn five_workers_three_per_job_run_as_steps_of_two_jobs() {
    needs_slurm("five_workers_three_per_job...");
    let (run, mut cleanup, mut launcher) = (Run::new("steps"), JobCleanup::scancel(), launcher());
    let script = "echo \"$SLURM_JOB_ID $SLURM_STEP_ID\" > out-$DAISY_WORKER_ID.txt";
    let jobs = start(
        &mut launcher,
        &run.requests(5, script, per_job(3)),
        &mut cleanup,
    );
    assert_eq!(jobs[0], jobs[2], "workers 0-2 share a job");
    assert_eq!(jobs[3], jobs[4], "workers 3-4 share a smaller one");
    assert_ne!(jobs[0], jobs[3]);
    assert_eq!(launcher.calls().submissions, 2);

    let ended = ends(&mut launcher, 5);
    let workers: Vec<u64> = ended.iter().map(|(worker, _, _)| *worker).collect();
    assert_eq!(
        workers,
        [0, 1, 2, 3, 4],
        "each worker ended once: {ended:?}"
    );
    assert!(ended
        .iter()
        .all(|(_, _, end)| *end == JobEnd::Exited { code: 0 }));
    let lines: Vec<String> = (0..5)
        .map(|i| read(&run.path(&format!("out-{i}.txt"))))
        .collect();
    let job_and_step = |line: &str| {
        let (job, step) = line.trim().split_once(' ').unwrap();
        (
            job.to_owned(),
            step.parse::<u32>().expect("a numbered step"),
        )
    };
    let steps: Vec<(String, u32)> = lines.iter().map(|line| job_and_step(line)).collect();
    assert!(
        steps[..3].iter().all(|(job, _)| *job == steps[0].0),
        "{steps:?}"
    );
    let mut first_steps: Vec<u32> = steps[..3].iter().map(|(_, step)| *step).collect();
    first_steps.sort_unstable();
    assert_eq!(first_steps, [0, 1, 2], "one step per worker: {steps:?}");
    let kept = read(&run.log_dir().join("worker-0-2.sbatch"));
    assert!(kept.contains("#SBATCH --ntasks=3"), "{kept}");
    assert!(run.log_dir().join("worker-4.out").exists());
}

#[test]
fn a_worker_that_left_a_running_job_is_replaced_inside_it_and_one_cancelled_alone() {
    needs_slurm("a_worker_that_left_a_running_job...");
    let (run, mut cleanup, mut launcher) = (Run::new("room"), JobCleanup::scancel(), launcher());
    // Worker 0 dies at once; 1 runs until cancelled; 2 (its replacement)
    // says where it ran and stays a moment.
    let script = "echo \"$SLURM_JOB_ID\" > out-$DAISY_WORKER_ID.txt; \
        case $DAISY_WORKER_ID in 0) exit 3;; 1) sleep 300;; 2) sleep 2;; esac";
    let requests = run.requests(3, script, per_job(2));
    let jobs = start(&mut launcher, &requests[..2], &mut cleanup);
    wait_for("worker 0 to die", || run.path("out-0.txt").exists());
    assert!(launcher.poll_ended().is_empty(), "the job still runs");
    launcher.left(&[0]);

    let beside = start(&mut launcher, &requests[2..], &mut cleanup);
    assert_eq!(
        beside,
        jobs[..1],
        "worker 2 started in the job worker 0 left"
    );
    assert_eq!(launcher.calls().submissions, 1);
    wait_for("worker 2 to run", || run.path("out-2.txt").exists());
    assert_eq!(read(&run.path("out-2.txt")), read(&run.path("out-1.txt")));

    launcher.cancel(&[1]);
    let mut ended = ends(&mut launcher, 3);
    let (_, _, first) = ended.remove(0);
    // Worker 0 ends as its step did (sacct), not as its job did.
    let JobEnd::Failed { reason } = first else {
        panic!("worker 0 exited 3: {first:?}")
    };
    assert!(
        reason.starts_with("SLURM job step ") && reason.ends_with(" ended FAILED (exit code 3)"),
        "{reason}"
    );
    let expected = vec![
        (1, jobs[0].clone(), JobEnd::Cancelled),
        (2, jobs[0].clone(), JobEnd::Exited { code: 0 }),
    ];
    assert_eq!(
        ended, expected,
        "worker 1's step alone was cancelled, the job ran on"
    );
}

#[test]
fn a_submission_over_the_qos_limit_waits_and_is_submitted_once_a_job_leaves() {
    needs_two_jobs_qos("a_submission_over_the_qos_limit...");
    let (run, mut cleanup, mut launcher) = (Run::new("qos"), JobCleanup::scancel(), launcher());
    let (requests, results, submitted) =
        start_three_under_the_two_jobs_qos(&mut launcher, &run, &mut cleanup);
    assert_eq!(submitted.len(), 2, "two fit under the limit: {results:?}");
    match &results[2] {
        Err(LaunchError::Waiting { limit, message }) => {
            assert_eq!(limit, "QOSMaxSubmitJobPerUserLimit");
            assert!(
                message.contains("Job violates accounting/QOS policy"),
                "{message}"
            );
        }
        other => panic!("the third waits for the limit: {other:?}"),
    }
    assert!(launcher.poll_started().is_empty(), "nothing tried yet");
    a_place_frees_and_the_third_is_submitted(&mut launcher, &requests, &mut cleanup);
}

#[test]
fn a_waiting_worker_cancelled_is_reported_once_and_never_submitted() {
    needs_two_jobs_qos("a_waiting_worker_cancelled...");
    let (run, mut cleanup, mut launcher) =
        (Run::new("qos-cancel"), JobCleanup::scancel(), launcher());
    let (requests, results, _) =
        start_three_under_the_two_jobs_qos(&mut launcher, &run, &mut cleanup);
    let third = requests[2].worker_id;
    assert!(
        matches!(results[2], Err(LaunchError::Waiting { .. })),
        "{results:?}"
    );
    launcher.cancel(&[third, requests[0].worker_id]);
    let ended = launcher.poll_ended();
    let never = ended.iter().find(|(worker, ..)| *worker == third);
    assert_eq!(
        never.map(|(_, job, end)| (job.0.as_str(), end)),
        Some(("not submitted", &JobEnd::Cancelled)),
        "{ended:?}"
    );
    // Past the first pause, with room under the limit again: still
    // nothing is submitted for the cancelled worker.
    let submissions = launcher.calls().submissions;
    std::thread::sleep(launchers::SITE_LIMIT_FIRST_PAUSE + Duration::from_secs(1));
    assert!(launcher
        .poll_ended()
        .iter()
        .all(|(worker, ..)| *worker != third));
    assert!(launcher.poll_started().is_empty());
    assert_eq!(launcher.calls().submissions, submissions);
    launcher.cancel_all();
}
