//! The bsub launcher against the LSF stand-in (`tests/lsf-standin`: bsub,
//! bjobs, bkill and bresume speaking LSF's documented formats), which runs
//! the jobs for real on the local SLURM, so PEND, RUN, DONE and EXIT are
//! real states.
//!
//! The launcher finds the stand-in through the PATH value it is built with
//! (the process environment is never changed). Every test first calls
//! [`needs_lsf_standin`]: without SLURM and Python it fails, saying so
//! (`ci/test.sh` leaves these tests out then). Every job a test submits is killed when the test ends,
//! passed or not ([`JobCleanup`], and the launcher's own drop). Jobs are small
//! shell programs standing in for daisy-worker.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::*;
use launchers::{BsubLauncher, ClusterOptions, JobEnd, JobId, LaunchError, Launcher, Paced};

/// Where the stand-in's commands are.
fn standin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/lsf-standin")
}

/// Fails `test` unless the stand-in can run: SLURM answers and Python 3
/// is there.
fn needs_lsf_standin(test: &str) {
    let works = |program: &str, arg: &str| {
        Command::new(program)
            .arg(arg)
            .output()
            .is_ok_and(|output| output.status.success())
    };
    if !(works("sinfo", "-h") && works("python3", "--version")) {
        let why = "the LSF stand-in needs SLURM (`sinfo -h` fails) and python3";
        let how = "start SLURM with `bash ci/slurm/start-local-slurm.sh` (as root), \
                   then `source /tmp/daisy-slurm/env.sh` if /etc/slurm/slurm.conf is not linked";
        missing(test, why, how);
    }
}

/// A run whose task name is unique to this test process (the stand-in's
/// job names are how the tests find their SLURM jobs).
fn lsf_run(task: &str) -> Run {
    Run::new(&format!("lsf-{task}-{}", std::process::id()))
}

/// The SLURM job name the stand-in gives the array.
fn job_name(run: &Run) -> String {
    format!("daisy-{}", run.task)
}

/// Kills what a test submitted, through the stand-in's bkill.
fn bkill() -> JobCleanup {
    JobCleanup::bkill(standin().join("bkill"))
}

fn launcher() -> BsubLauncher {
    BsubLauncher::with_path(Some(standin().into()))
        .expect("the LSF stand-in's commands")
        .with_retry_delays(vec![Duration::from_millis(200); 3])
        .with_poll_interval(Duration::from_millis(200))
}

/// `(index, STAT, EXIT_CODE)` of every element of `job`, from the
/// stand-in's bjobs in the format the launcher uses.
fn bjobs(job: &str) -> Vec<(u32, String, String)> {
    let output = Command::new(standin().join("bjobs"))
        .args([
            "-a",
            "-noheader",
            "-o",
            "jobid jobindex stat exit_code",
            job,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [_, index, stat, code] => Some((index.parse().ok()?, stat.into(), code.into())),
                _ => None,
            },
        )
        .collect()
}

/// The state of element `index` of `job`, if bjobs lists it.
fn stat(job: &str, index: u32) -> Option<String> {
    bjobs(job)
        .into_iter()
        .find(|(i, _, _)| *i == index)
        .map(|(_, stat, _)| stat)
}

/// SLURM job ids with this job name still in squeue.
fn squeue_by_name(name: &str) -> Vec<String> {
    let output = Command::new("squeue")
        .args(["--noheader", "--array", "--name", name, "--format=%i %T"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The distinct states element `index` of `job` goes through until it is
/// DONE or EXIT (checked every 100 ms, for at most [`WAIT`]).
fn watch(job: &str, index: u32, mut on_state: impl FnMut(&str)) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    let mut seen: Vec<String> = Vec::new();
    while Instant::now() < deadline {
        if let Some(stat) = stat(job, index) {
            if seen.last() != Some(&stat) {
                on_state(&stat);
                seen.push(stat.clone());
            }
            if stat == "DONE" || stat == "EXIT" {
                return seen;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("element {index} of job {job} did not finish; states seen: {seen:?}");
}

#[test]
fn an_array_of_three_completes_each_worker_once_with_its_index() {
    needs_lsf_standin("an_array_of_three_completes...");
    let (run, mut cleanup, mut launcher) = (lsf_run("three"), bkill(), launcher());
    let script = "echo \"index=$LSB_JOBINDEX job=$LSB_JOBID slurm=${SLURM_ARRAY_TASK_ID:-none}\"";
    let jobs = start(
        &mut launcher,
        &run.requests(3, script, ClusterOptions::default()),
        &mut cleanup,
    );
    let array = array_of(&jobs[0]);
    let expected_ids: Vec<JobId> = (1..=3).map(|i| JobId(format!("{array}[{i}]"))).collect();
    assert_eq!(jobs, expected_ids);

    let ended = ends(&mut launcher, 3);
    let expected: Vec<_> = (0..3)
        .map(|i| (i, jobs[i as usize].clone(), JobEnd::Exited { code: 0 }))
        .collect();
    assert_eq!(ended, expected, "each worker ended once, with code 0");
    for i in 1..=3 {
        let out = read(&run.log_dir().join(format!("worker-{array}_{i}.out")));
        assert_eq!(
            out,
            format!("index={i} job={array} slurm=none\n"),
            "LSF's %J_%I and job environment"
        );
    }
    let states: Vec<_> = bjobs(&array)
        .into_iter()
        .map(|(i, stat, _)| (i, stat))
        .collect();
    assert_eq!(
        states,
        [(1, "DONE".into()), (2, "DONE".into()), (3, "DONE".into())]
    );
    let calls = launcher.calls();
    assert_eq!(calls.submissions, 1);
    eprintln!("three workers: {calls:?}");
}

#[test]
fn a_worker_exiting_3_ends_as_exited_3_and_lsf_says_exit() {
    needs_lsf_standin("a_worker_exiting_3...");
    let (run, mut cleanup, mut launcher) = (lsf_run("exit3"), bkill(), launcher());
    let jobs = start(
        &mut launcher,
        &run.requests(1, "exit 3", ClusterOptions::default()),
        &mut cleanup,
    );
    let ended = ends(&mut launcher, 1);
    assert_eq!(ended, [(0, jobs[0].clone(), JobEnd::Exited { code: 3 })]);
    assert_eq!(bjobs(&array_of(&jobs[0])), [(1, "EXIT".into(), "3".into())]);
}

#[test]
fn a_capped_array_shows_pend_run_done_and_keeps_its_slots_meanwhile() {
    needs_lsf_standin("a_capped_array_shows_pend_run_done...");
    let (run, mut cleanup, mut launcher) = (lsf_run("capped"), bkill(), launcher());
    let cluster = ClusterOptions {
        max_array_parallel: Some(1),
        ..ClusterOptions::default()
    };
    let jobs = start(
        &mut launcher,
        &run.requests(2, "sleep 2", cluster),
        &mut cleanup,
    );
    let array = array_of(&jobs[0]);
    let (mut polled_while_alive, mut ended) = (0, Vec::new());
    let seen = watch(&array, 2, |state| {
        if state == "PEND" || state == "RUN" {
            let early = launcher.poll_ended();
            // Element 2 may end between the look and the poll (a loaded
            // machine); then LSF must say so too.
            let ended_meanwhile = stat(&array, 2).as_deref() == Some("DONE");
            assert!(
                ended_meanwhile || early.iter().all(|(worker, _, _)| *worker != 1),
                "{state}: {early:?}"
            );
            ended.extend(early);
            polled_while_alive += 1;
        }
    });
    assert_eq!(
        seen,
        ["PEND", "RUN", "DONE"],
        "element 2 waits for element 1 (%1)"
    );
    assert_eq!(polled_while_alive, 2);
    ended.extend(ends(&mut launcher, 2 - ended.len()));
    ended.sort_by_key(|(worker, _, _)| *worker);
    let expected: Vec<_> = (0..2)
        .map(|i| (i, jobs[i as usize].clone(), JobEnd::Exited { code: 0 }))
        .collect();
    assert_eq!(ended, expected, "each worker ended once");
}

#[test]
fn a_held_job_is_psusp_until_resumed_then_runs_and_is_done() {
    needs_lsf_standin("a_held_job_is_psusp...");
    let (run, mut cleanup, mut launcher) = (lsf_run("held"), bkill(), launcher());
    let cluster = ClusterOptions {
        directives: vec!["-H".into()],
        ..ClusterOptions::default()
    };
    let job = start(
        &mut launcher,
        &run.requests(1, "sleep 1", cluster),
        &mut cleanup,
    )
    .remove(0);
    let array = array_of(&job);
    for _ in 0..3 {
        assert!(
            launcher.poll_ended().is_empty(),
            "a held job keeps its slot"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(stat(&array, 1).as_deref(), Some("PSUSP"));
    let resumed = Command::new(standin().join("bresume"))
        .arg(&array)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&resumed.stdout),
        format!("Job <{array}> is being resumed\n")
    );
    // A poll of a loaded machine can miss the second the job runs: the
    // states seen keep LSF's order, and its exit status says it ran.
    let seen = watch(&array, 1, |_| {});
    let order = ["PSUSP", "PEND", "RUN", "DONE"];
    let rank = |state: &String| order.iter().position(|o| o == state).unwrap_or(usize::MAX);
    let ranks: Vec<_> = seen.iter().map(rank).collect();
    assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("DONE"), "{seen:?}");
    assert_eq!(
        ends(&mut launcher, 1),
        [(0, job, JobEnd::Exited { code: 0 })]
    );
}

#[test]
fn cancel_all_is_one_bkill_and_leaves_no_job_in_squeue() {
    needs_lsf_standin("cancel_all_is_one_bkill...");
    let (run, mut cleanup, mut launcher) = (lsf_run("sleepers"), bkill(), launcher());
    let cluster = ClusterOptions {
        max_array_parallel: Some(2),
        ..ClusterOptions::default()
    };
    let jobs = start(
        &mut launcher,
        &run.requests(3, "sleep 300", cluster),
        &mut cleanup,
    );
    let array = array_of(&jobs[0]);
    wait_for("two running, one pending", || {
        let stats: Vec<String> = bjobs(&array).into_iter().map(|(_, stat, _)| stat).collect();
        stats == ["RUN", "RUN", "PEND"]
    });
    assert!(!squeue_by_name(&job_name(&run)).is_empty());
    launcher.cancel_all();
    assert_eq!(launcher.calls().cancels, 1);
    wait_for("squeue to list none of them", || {
        squeue_by_name(&job_name(&run)).is_empty()
    });
    let ended = ends(&mut launcher, 3);
    let expected: Vec<_> = (0..3)
        .map(|i| (i, jobs[i as usize].clone(), JobEnd::Cancelled))
        .collect();
    assert_eq!(ended, expected);
    let stats: Vec<String> = bjobs(&array).into_iter().map(|(_, stat, _)| stat).collect();
    assert_eq!(
        stats,
        ["EXIT", "EXIT", "EXIT"],
        "LSF shows killed jobs as EXIT"
    );
}

#[test]
fn a_bad_queue_is_a_permanent_submit_error_with_lsfs_message() {
    needs_lsf_standin("a_bad_queue...");
    let (run, mut launcher) = (lsf_run("nowhere"), launcher());
    let cluster = ClusterOptions {
        partition: Some("nosuchqueue".into()),
        ..ClusterOptions::default()
    };
    let results = launcher.start_many(&run.requests(2, "true", cluster));
    for result in results {
        let error = result.unwrap_err();
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
        let message = error.to_string();
        assert!(
            message.contains("nosuchqueue: No such queue. Job not submitted."),
            "{message}"
        );
    }
    assert_eq!(launcher.calls().submissions, 1, "not retried");
}

#[test]
fn the_token_reaches_the_job_but_no_script_job_name_or_command_line() {
    needs_lsf_standin("the_token_reaches_the_job...");
    let (run, mut cleanup, mut launcher) = (lsf_run("secret"), bkill(), launcher());
    let script = "printf '%s' \"$DAISY_CONTEXT_TEST\" > secret-$LSB_JOBINDEX.txt; sleep 1";
    let jobs = start(
        &mut launcher,
        &run.requests(2, script, ClusterOptions::default()),
        &mut cleanup,
    );
    let array = array_of(&jobs[0]);
    let slurm_ids = squeue_by_name(&job_name(&run));
    let shown = Command::new("scontrol")
        .args(["-o", "show", "job"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(&format!("JobName={}", job_name(&run))),
        "{shown}"
    );
    assert!(!shown.contains(SECRET), "scontrol shows the token: {shown}");
    assert_eq!(ends(&mut launcher, 2).len(), 2, "{slurm_ids:?}");
    for i in 1..=2 {
        assert_eq!(
            read(&run.path(&format!("secret-{i}.txt"))),
            SECRET,
            "element {i}"
        );
    }
    let kept = read(&run.log_dir().join("worker-0-1.bsub"));
    assert!(
        kept.contains(&format!("#BSUB -J \"daisy-{}[1-2]\"", run.task)),
        "{kept}"
    );
    assert!(!kept.contains(SECRET), "{kept}");
    for file in ["job-script", "slurm-wrapper.sh", "job.json"] {
        let text = read(&standin_state_dir().join("jobs").join(&array).join(file));
        assert!(!text.contains(SECRET), "{file}: {text}");
    }
}

/// The stand-in's state directory (its job scripts and sbatch calls).
fn standin_state_dir() -> PathBuf {
    std::env::var_os("LSF_STANDIN_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from("/tmp/lsf-standin"), PathBuf::from)
}

#[test]
fn fifty_workers_cost_one_submission_and_a_poll_one_status_call() {
    needs_lsf_standin("fifty_workers...");
    let (run, mut cleanup, mut launcher) = (lsf_run("fifty"), bkill(), launcher());
    let cluster = ClusterOptions {
        directives: vec!["-H".into()],
        ..ClusterOptions::default()
    };
    // The stand-in makes an LSF array (indices from 1) one SLURM array
    // of the same indices, which must stay below SLURM's MaxArraySize
    // (real LSF takes 1000 elements by default).
    let workers = 50.min(slurm_max_array_size() - 1);
    let jobs = start(
        &mut launcher,
        &run.requests(workers as u64, "true", cluster),
        &mut cleanup,
    );
    assert_eq!(jobs.len(), workers);
    let last = format!("{}[{workers}]", array_of(&jobs[0]));
    assert_eq!(jobs[workers - 1].0, last);
    for _ in 0..3 {
        assert!(
            launcher.poll_ended().is_empty(),
            "held workers keep their slots"
        );
    }
    let calls = launcher.calls();
    assert_eq!((calls.submissions, calls.status), (1, 3));
    println!(
        "LSF calls for a task with {workers} workers: {} submission call, {} status calls in 3 polls ({calls:?})",
        calls.submissions, calls.status
    );
    launcher.cancel_all();
    assert_eq!(launcher.calls().cancels, 1);
    wait_for("the array to leave squeue", || {
        squeue_by_name(&job_name(&run)).is_empty()
    });
}

#[test]
fn arrays_over_max_job_array_size_are_split_and_every_worker_runs_once() {
    needs_lsf_standin("arrays_over_max_job_array_size...");
    let (run, mut cleanup, mut launcher) = (lsf_run("bigarray"), bkill(), launcher());
    let mut requests = run.requests(5, "echo $LSB_JOBINDEX", ClusterOptions::default());
    for request in &mut requests {
        // The stand-in's lsb.params: indices above 2 are refused.
        let limit = ("LSF_STANDIN_MAX_JOB_ARRAY_SIZE".into(), "2".into());
        request.env.push(limit);
    }
    let jobs = start(&mut launcher, &requests, &mut cleanup);
    assert_eq!(jobs.len(), 5, "no worker fails for the limit: {jobs:?}");
    assert_eq!(
        launcher.calls().submissions,
        3,
        "bparams told the limit: arrays of 2, 2 and 1, none refused"
    );
    let mut arrays: Vec<String> = jobs.iter().map(array_of).collect();
    arrays.dedup();
    for array in &arrays {
        let indices: Vec<u32> = bjobs(array).into_iter().map(|(i, _, _)| i).collect();
        assert!(
            !indices.is_empty() && indices.iter().all(|i| *i <= 2),
            "array {array} has elements {indices:?}"
        );
    }
    let ended = ends(&mut launcher, 5);
    let ended: Vec<_> = ended.into_iter().map(|(w, _, end)| (w, end)).collect();
    let expected: Vec<_> = (0..5).map(|w| (w, JobEnd::Exited { code: 0 })).collect();
    assert_eq!(ended, expected, "each worker ran and ended once");
    println!(
        "5 workers under MAX_JOB_ARRAY_SIZE=2: arrays {arrays:?}, {:?}",
        launcher.calls()
    );
}

#[test]
fn four_workers_two_per_job_are_started_by_blaunch_in_two_jobs() {
    needs_lsf_standin("four_workers_two_per_job...");
    let (run, mut cleanup, mut launcher) = (lsf_run("blaunch"), bkill(), launcher());
    let options = ClusterOptions {
        workers_per_job: Some(2),
        ..ClusterOptions::default()
    };
    let script = "echo \"$LSB_JOBID $LSB_JOBINDEX\" > out-$DAISY_WORKER_ID.txt";
    let jobs = start(
        &mut launcher,
        &run.requests(4, script, options),
        &mut cleanup,
    );
    assert_eq!((&jobs[0], &jobs[2]), (&jobs[1], &jobs[3]), "{jobs:?}");
    assert_ne!(jobs[0], jobs[2]);
    let ended = ends(&mut launcher, 4);
    let workers: Vec<u64> = ended.iter().map(|(worker, _, _)| *worker).collect();
    assert_eq!(workers, [0, 1, 2, 3], "each worker ended once: {ended:?}");
    assert!(
        ended
            .iter()
            .all(|(_, _, end)| *end == JobEnd::Exited { code: 0 }),
        "{ended:?}"
    );
    let element = |i: u32| read(&run.path(&format!("out-{i}.txt")));
    assert_eq!(element(0), element(1), "workers 0 and 1 in one job");
    assert!(element(0).trim_end().ends_with(" 1") && element(2).trim_end().ends_with(" 2"));
    let kept = read(&run.log_dir().join("worker-0-3.bsub"));
    assert!(
        kept.contains("#BSUB -n 2") && kept.contains("blaunch -z"),
        "{kept}"
    );
}
