//! Drains on a real SLURM (and the LSF stand-in on it): a job's time limit
//! (from the task's `time`, from the template only, from LSF's run limit),
//! `scancel --signal=TERM`, a requeue. These need SLURM (`ci/test.sh`
//! leaves them out without one).

use super::{assert_drained_cleanly, count};
use crate::cluster::{cluster_driver, job_ids, lsf_standin_env, needs_slurm, wait_until_gone};
use crate::util::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Blocks that take `seconds` each, appending their id to ran.txt, run by
/// two cluster workers (of one cpu each, out of `cpus`) that `launcher`
/// (the `[launcher]` table's lines) starts.
fn cluster_pipeline(name: &str, blocks: u32, seconds: u32, launcher: &str, cpus: u32) -> String {
    let command = format!("sleep {seconds}; echo {{block_id}} >> ran.txt");
    let extra = "max_workers = 2\nrequires = { cpu = 1 }";
    format!(
        "name = \"{name}\"\n[resources]\ncpu = {cpus}\n[launcher]\n{launcher}\n{}",
        task(name, blocks, &command, extra)
    )
}

/// Runs 40 blocks of 3 s with `launcher`, whose jobs have a time limit
/// of about a minute left when their workers start (in `env`): each
/// worker stops taking blocks ~15 s before its end, after about 15
/// blocks, and must be replaced for the run to finish. Returns the run
/// directory.
fn assert_workers_drain_before_their_time_limit(
    name: &str,
    launcher: &str,
    env: &[(String, String)],
    dir: &TestDir,
) -> std::path::PathBuf {
    dir.write("p.toml", &cluster_pipeline(name, 40, 3, launcher, 2));
    let mut driver = cluster_driver(dir, "p.toml");
    let status = driver
        .envs(env.iter().map(|(k, v)| (k, v)))
        .status()
        .unwrap();
    let run_dir = dir.join("daisy_run").join(name);
    assert!(status.success(), "{status:?}");
    assert_drained_cleanly(&run_dir, name, 40);
    let events = events(&run_dir);
    let drained: Vec<_> = events
        .iter()
        .filter(|e| e["event"] == "worker_draining")
        .collect();
    assert!(!drained.is_empty(), "a worker drained for its walltime");
    assert!(
        drained
            .iter()
            .all(|e| e["why"].as_str().unwrap().contains("walltime")),
        "{drained:?}"
    );
    assert!(
        count(&events, "worker_submitted") > 2,
        "drained workers were replaced"
    );
    assert_eq!(
        dir.read("ran.txt").lines().count(),
        40,
        "no block ran twice"
    );
    run_dir
}

#[test]
fn a_worker_job_near_its_time_limit_drains_and_is_replaced() {
    needs_slurm("time limit");
    // The driver tells its workers the task's `time` (DAISY_WALLTIME).
    let launcher = "kind = \"sbatch\"\ntime = \"1\"";
    let dir = TestDir::new();
    let run_dir = assert_workers_drain_before_their_time_limit("walltime", launcher, &[], &dir);
    wait_until_gone(&job_ids(&run_dir));
}

#[test]
fn a_slurm_worker_learns_its_time_limit_from_squeue_and_drains_before_it() {
    needs_slurm("SLURM time limit from squeue");
    // No `time`: the template's own --time, which each worker reads from
    // `squeue -o %L`. The first two workers are one job array, and
    // `squeue --jobs <id>` of the element whose job id is the array's
    // lists every element of the array.
    let launcher = "kind = \"sbatch\"\ndirectives = [\"--time=1\"]";
    let dir = TestDir::new();
    let run_dir = assert_workers_drain_before_their_time_limit("squeue", launcher, &[], &dir);
    wait_until_gone(&job_ids(&run_dir));
    // The run may end before SLURM enforces the limit on a worker that
    // missed it: each worker's log says whether it knew.
    let logs: Vec<_> = std::fs::read_dir(run_dir.join("logs/squeue"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.ends_with(".err") && !name.ends_with("-user.err")
        })
        .collect();
    assert!(logs.len() > 2, "{logs:?}");
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("the job ends in"),
            "{}:\n{text}",
            log.display()
        );
    }
}

#[test]
fn an_lsf_worker_learns_its_run_limit_from_bjobs_and_drains_before_it() {
    needs_slurm("LSF run limit");
    // No `time`: the template's own -W, which the worker reads from
    // `bjobs -o time_left` ("0:01 L").
    let launcher = "kind = \"bsub\"\ndirectives = [\"-W 1\"]";
    let dir = TestDir::new();
    let env = lsf_standin_env(&dir);
    assert_workers_drain_before_their_time_limit("runlimit", launcher, &env, &dir);
    wait_until("bjobs shows none of the run's jobs unfinished", || {
        let mut bjobs = Command::new("bjobs");
        bjobs.envs(env.iter().map(|(k, v)| (k, v)));
        run_ok(&mut bjobs).trim().is_empty()
    });
}

#[test]
fn scancel_signal_term_of_a_running_worker_job_drains_it() {
    needs_slurm("scancel --signal=TERM");
    let dir = TestDir::new();
    dir.write(
        "p.toml",
        &cluster_pipeline("scterm", 16, 1, "kind = \"sbatch\"", 2),
    );
    let driver = ChildGuard::spawn(&mut cluster_driver(&dir, "p.toml"));
    let run_dir = dir.join("daisy_run/scterm");
    wait_until("a block is done", || {
        !event_blocks(&events(&run_dir), "block_done", "scterm").is_empty()
    });
    let job = job_of_a_worker_that_ran_a_block(&run_dir);
    // A worker runs as the job's batch step: `--full` signals it (plain
    // --signal only reaches job steps started with srun).
    run_ok(Command::new("scancel").args(["--signal=TERM", "--full", &job]));
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}");
    assert_drained_cleanly(&run_dir, "scterm", 16);
    let events = events(&run_dir);
    let drained = events
        .iter()
        .find(|e| e["event"] == "worker_draining")
        .expect("the signalled worker drained");
    assert_eq!(drained["why"], "received SIGTERM");
    assert!(count(&events, "worker_submitted") > 2, "it was replaced");
    wait_until_gone(&job_ids(&run_dir));
}

/// The job of a worker that has reported a block: one that drains is no
/// worker that left without doing anything.
fn job_of_a_worker_that_ran_a_block(run_dir: &Path) -> String {
    let events = events(run_dir);
    let worker = events
        .iter()
        .find(|e| e["event"] == "block_done")
        .expect("a block is done")["worker_id"]
        .clone();
    let submitted = events
        .iter()
        .find(|e| e["event"] == "worker_submitted" && e["worker_id"] == worker)
        .expect("the worker was submitted");
    submitted["job"].as_str().unwrap().to_string()
}

/// SLURM holds a requeued job back for two minutes, then looks at pending
/// jobs about once a minute: too slow for a test. Until `back` says the
/// job is back, this lets a pending `job` start now and nudges the
/// scheduler with a no-op job, once a second.
fn bring_back_requeued(job: &str, mut back: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !back() {
        let state = run_ok(Command::new("squeue").args(["-h", "-o", "%T %r", "-j", job]));
        assert!(
            Instant::now() < deadline,
            "job {job} did not come back after its requeue (squeue: {state:?})"
        );
        if state.starts_with("PENDING") {
            let start_now = format!("jobid={job}");
            let _ = Command::new("scontrol")
                .args(["update", &start_now, "starttime=now"])
                .output();
            let _ = Command::new("sbatch")
                .args(["-J", "daisy-nudge", "-o", "/dev/null", "--wrap", "true"])
                .output();
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn a_requeued_worker_job_comes_back_as_the_same_worker() {
    needs_slurm("requeue");
    let dir = TestDir::new();
    // Blocks from 10 on wait for `go`, written once the requeued job is
    // back, so the run cannot end before. A spare cpu in the budget: the
    // requeued job comes back while its replacement runs.
    let command = "[ {block_id} -lt 10 ] || while [ ! -e go ]; do sleep 0.1; done; sleep 1; echo {block_id} >> ran.txt";
    let extra = "max_workers = 2\nrequires = { cpu = 1 }";
    let pipeline = format!(
        "name = \"requeue\"\n[resources]\ncpu = 3\n[launcher]\nkind = \"sbatch\"\n{}",
        task("requeue", 20, command, extra)
    );
    dir.write("p.toml", &pipeline);
    let driver = ChildGuard::spawn(&mut cluster_driver(&dir, "p.toml"));
    let run_dir = dir.join("daisy_run/requeue");
    wait_until("a block is done", || {
        !event_blocks(&events(&run_dir), "block_done", "requeue").is_empty()
    });
    let job = job_of_a_worker_that_ran_a_block(&run_dir);
    run_ok(Command::new("scontrol").args(["requeue", &job]));
    let requeued =
        |e: &serde_json::Value| e["event"] == "worker_connected" && e["requeued"] == true;
    bring_back_requeued(&job, || events(&run_dir).iter().any(requeued));
    dir.write("go", "");
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}");
    assert_drained_cleanly(&run_dir, "requeue", 20);
    let events = events(&run_dir);
    assert!(
        count(&events, "worker_draining") >= 1,
        "the requeue's SIGTERM drained the worker"
    );
    let back = events.iter().position(requeued).unwrap();
    let before = events[..back]
        .iter()
        .any(|e| e["event"] == "worker_connected" && e["worker_id"] == events[back]["worker_id"]);
    assert!(before, "as the same worker: {}", events[back]);
    assert_eq!(
        dir.read("ran.txt").lines().count(),
        20,
        "no block ran twice"
    );
    wait_until_gone(&job_ids(&run_dir));
}
