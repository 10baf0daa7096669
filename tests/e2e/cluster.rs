//! Runs on a real SLURM (started by `.ci/run` from `ci/slurm/`), with
//! workers submitted as sbatch job arrays, through the LSF stand-in that
//! forwards to the same SLURM, and with the driver itself as a batch job.
//! Without a SLURM these tests fail, saying so (`ci/test.sh` leaves them
//! out then); the slurmrestd one (`cluster::slurmrestd`) also needs
//! slurmrestd.

use crate::util::*;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// Fails `test` unless a SLURM answers.
pub(crate) fn needs_slurm(test: &str) {
    let up = Command::new("sinfo")
        .arg("-h")
        .output()
        .is_ok_and(|o| o.status.success());
    if !up {
        missing(
            test,
            "no SLURM: `sinfo -h` is missing or fails",
            "start one with `bash ci/slurm/start-local-slurm.sh` (as root)",
        );
    }
}

/// A task `<prefix>-<id>` of 12 blocks of one cpu each, its `extra`
/// fields (upstream, launcher); each block appends `<task> <id>` to ran.txt.
fn cluster_task(prefix: &str, id: &str, extra: &str) -> String {
    format!(
        r#"
[[task]]
id = "{prefix}-{id}"
{extra}
total_roi = {{ offset = [0], shape = [12] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
max_workers = 3
requires = {{ cpu = 1 }}
block_command = ["sh", "-c", "sleep 0.1; echo {prefix}-{id} {{block_id}} >> ran.txt"]
"#
    )
}

/// Two chained tasks whose workers are cluster jobs of `kind`. Task ids
/// are unique per test so that concurrent tests can tell their jobs apart.
fn cluster_pipeline(kind: &str, prefix: &str, directives: &str) -> String {
    format!(
        "name = \"{prefix}\"\n[resources]\ncpu = 6\n[launcher]\nkind = \"{kind}\"\ntime = \"00:10:00\"\ndirectives = [{directives}]\n{}{}",
        cluster_task(prefix, "a", ""),
        cluster_task(prefix, "b", &format!("upstream = [\"{prefix}-a\"]"))
    )
}

pub(crate) fn job_ids(run_dir: &std::path::Path) -> Vec<String> {
    events(run_dir)
        .iter()
        .filter(|e| e["event"] == "worker_submitted")
        .filter_map(|e| e["job"].as_str().map(String::from))
        .collect()
}

/// The run's jobs still known to squeue (array elements by `<job>_<i>`).
pub(crate) fn jobs_in_queue(jobs: &[String]) -> Vec<String> {
    let arrays: BTreeSet<&str> = jobs
        .iter()
        .map(|j| j.split(['_', '[']).next().unwrap())
        .collect();
    let list = arrays.into_iter().collect::<Vec<_>>().join(",");
    let output = Command::new("squeue")
        .args(["-h", "-r", "-o", "%i", "-j", &list])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// Waits until squeue lists none of `jobs`: the driver cancels what is
/// left when it exits, and SLURM takes a moment to let cancelled jobs go.
pub(crate) fn wait_until_gone(jobs: &[String]) {
    wait_until("squeue shows none of the run's jobs", || {
        jobs_in_queue(jobs).is_empty()
    });
}

/// The environment that puts the LSF stand-in's bsub, bjobs and bkill
/// first on PATH, with its state in `dir`.
pub(crate) fn lsf_standin_env(dir: &TestDir) -> [(String, String); 2] {
    let standin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lsf-standin");
    let path = format!(
        "{}:{}",
        standin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let state = dir.join("lsf-state").display().to_string();
    [
        ("PATH".to_string(), path),
        ("LSF_STANDIN_DIR".to_string(), state),
    ]
}

pub(crate) fn cluster_driver(dir: &TestDir, pipeline: &str) -> Command {
    let mut driver = dir.driver(&["run", pipeline]);
    driver.env("DAISY_POLL_INTERVAL", "1s");
    driver
}

fn ran(dir: &TestDir) -> BTreeSet<String> {
    dir.read("ran.txt").lines().map(String::from).collect()
}

#[test]
fn a_chained_pipeline_of_sbatch_job_arrays_completes_and_leaves_no_job() {
    needs_slurm("sbatch chain");
    let dir = TestDir::new();
    dir.write("p.toml", &cluster_pipeline("sbatch", "sb", ""));
    run_ok(&mut cluster_driver(&dir, "p.toml"));
    assert_eq!(ran(&dir).len(), 24);
    let jobs = job_ids(&dir.join("daisy_run/sb"));
    assert!(
        jobs.iter().all(|j| j.contains('_')),
        "workers are array elements: {jobs:?}"
    );
    wait_until_gone(&jobs);
    let scripts: Vec<PathBuf> = std::fs::read_dir(dir.join("daisy_run/sb/logs/sb-a"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sbatch"))
        .collect();
    assert!(!scripts.is_empty(), "the submitted script is kept");
    let token = std::fs::read_to_string(dir.join("daisy_run/sb/context.json")).unwrap();
    let token = daisy_core::context::WorkerContext::from_json(&token)
        .unwrap()
        .token;
    for script in scripts {
        assert!(
            !std::fs::read_to_string(script).unwrap().contains(&token),
            "no token in scripts"
        );
    }
}

#[test]
fn pending_jobs_keep_their_slots_and_a_pending_job_cancelled_is_replaced() {
    needs_slurm("pending jobs");
    let dir = TestDir::new();
    dir.write("p.toml", &cluster_pipeline("sbatch", "held", "\"--hold\""));
    let driver = ChildGuard::spawn(&mut cluster_driver(&dir, "p.toml"));
    let run_dir = dir.join("daisy_run/held");
    wait_until("3 held workers were submitted", || {
        job_ids(&run_dir).len() >= 3
    });
    std::thread::sleep(std::time::Duration::from_secs(3));
    let jobs = job_ids(&run_dir);
    assert_eq!(jobs.len(), 3, "pending jobs are not resubmitted: {jobs:?}");
    let victim = jobs[0].clone();
    run_ok(Command::new("scancel").arg(&victim));
    wait_until("the cancelled pending job is replaced", || {
        job_ids(&run_dir).len() >= 4
    });
    let failed = events(&run_dir)
        .iter()
        .filter(|e| e["event"] == "worker_start_failed")
        .count();
    assert_eq!(failed, 1, "the cancelled job counts as a failed start");
    let status = release_until_exit(driver, &run_dir);
    assert!(status.success(), "{status:?}");
    assert_eq!(ran(&dir).len(), 24);
    wait_until_gone(&job_ids(&run_dir));
}

#[test]
fn stopping_the_driver_cancels_every_job_it_submitted() {
    needs_slurm("driver stop");
    let dir = TestDir::new();
    dir.write("p.toml", &cluster_pipeline("sbatch", "stop", "\"--hold\""));
    let driver = ChildGuard::spawn(&mut cluster_driver(&dir, "p.toml"));
    let run_dir = dir.join("daisy_run/stop");
    wait_until("workers were submitted", || job_ids(&run_dir).len() >= 3);
    let pid = nix::unistd::Pid::from_raw(driver.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    assert_eq!(driver.wait_for_exit().code(), Some(130));
    let jobs = job_ids(&run_dir);
    wait_until("squeue shows none of the run's jobs", || {
        jobs_in_queue(&jobs).is_empty()
    });
}

#[test]
fn the_same_pipeline_runs_through_the_lsf_stand_in() {
    needs_slurm("bsub chain");
    let dir = TestDir::new();
    dir.write("p.toml", &cluster_pipeline("bsub", "lsf", ""));
    let mut driver = cluster_driver(&dir, "p.toml");
    driver.envs(lsf_standin_env(&dir));
    run_ok(&mut driver);
    assert_eq!(ran(&dir).len(), 24);
    let jobs = job_ids(&dir.join("daisy_run/lsf"));
    assert!(
        jobs.iter().all(|j| j.contains('[')),
        "LSF array elements: {jobs:?}"
    );
}

#[test]
fn the_driver_itself_runs_as_a_batch_job() {
    needs_slurm("driver.sbatch");
    let dir = TestDir::new();
    dir.write("p.toml", &cluster_pipeline("sbatch", "drv", ""));
    let template =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../slurm-templates/driver.sbatch");
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_daisy-driver"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let submitted = run_ok(
        Command::new("sbatch")
            .args(["--parsable", "--export=ALL,PIPELINE=p.toml"])
            .arg(&template)
            .current_dir(dir.path())
            .env("PATH", path)
            .env("DAISY_WORKER_BIN", worker_program())
            .env("DAISY_POLL_INTERVAL", "1s"),
    );
    let job = submitted.trim().split(';').next().unwrap().to_string();
    let _cancel = JobGuard(job.clone());
    wait_until("the driver job finished", || {
        jobs_in_queue(std::slice::from_ref(&job)).is_empty()
    });
    assert_eq!(
        ran(&dir).len(),
        24,
        "driver output:\n{}",
        dir.read(&format!("daisy-driver-{job}.out"))
    );
    let events = events(&dir.join("daisy_run/drv"));
    assert_eq!(events.last().unwrap()["completed"], true);
}

/// Releases every held job of the run, new ones too, until the driver
/// exits (at most two minutes).
fn release_until_exit(
    mut driver: ChildGuard,
    run_dir: &std::path::Path,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        for job in job_ids(run_dir) {
            let _ = Command::new("scontrol").args(["release", &job]).output();
        }
        if let Some(status) = driver.0.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run did not finish"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// Cancels a job when the test ends, however it ends.
struct JobGuard(String);

impl Drop for JobGuard {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).output();
    }
}

#[test]
fn a_worker_job_killed_while_running_loses_no_block() {
    needs_slurm("killed worker job");
    let dir = TestDir::new();
    let pipeline = cluster_pipeline("sbatch", "kill", "").replace("sleep 0.1", "sleep 1");
    dir.write("p.toml", &pipeline);
    let driver = ChildGuard::spawn(&mut cluster_driver(&dir, "p.toml"));
    let run_dir = dir.join("daisy_run/kill");
    let connected = || {
        events(&run_dir)
            .iter()
            .find(|e| e["event"] == "worker_connected")
            .and_then(|e| e["pid"].as_i64())
    };
    wait_until("a worker job runs", || connected().is_some());
    // As if its node died: the worker process dies mid-block, without a word.
    let pid = nix::unistd::Pid::from_raw(connected().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}");
    assert_eq!(ran(&dir).len(), 24, "every block ran");
    let events = events(&run_dir);
    let done = events.iter().filter(|e| e["event"] == "block_done").count();
    assert_eq!(done, 24, "each counted once");
    let lost = events
        .iter()
        .any(|e| e["event"] == "worker_gone" && e["clean"] == false);
    assert!(lost, "the killed worker was seen lost");
    wait_until_gone(&job_ids(&run_dir));
}

#[test]
fn a_block_that_kills_its_worker_fails_with_how_slurm_saw_the_job_end() {
    needs_slurm("a block that kills its worker job");
    for error in errors_of_a_block_that_kills_its_worker("blame", "", 3) {
        assert!(
            error.contains("died while running this block: failed: SLURM job state FAILED")
                && error.contains("signal 9"),
            "the job's end, not the connection's: {error}"
        );
    }
}

#[test]
fn a_block_that_kills_a_worker_of_a_shared_job_fails_with_how_its_step_ended() {
    needs_slurm("a block that kills a worker of a job of two");
    // Four workers a task: two full jobs, so no worker has a job of its own.
    let errors = errors_of_a_block_that_kills_its_worker("blame2", "workers_per_job = 2", 4);
    // The first worker is a step of the job script; its replacement may be
    // a step started by srun in the same job, whose exit status says 137.
    assert!(
        errors[0].contains("died while running this block: failed: SLURM job step ")
            && errors[0].contains("ended CANCELLED (exit code 0, signal 9)"),
        "the step's end, not the connection's or the job's: {}",
        errors[0]
    );
    for error in &errors[1..] {
        assert!(
            error.contains("signal 9") || error.contains("exited with code 137"),
            "{error}"
        );
    }
}

/// Runs a pipeline of two chained sbatch tasks of `workers` workers each
/// (`launcher` lines added) whose block 3 of the first kills its worker,
/// with one retry, at the
/// default poll interval (30 s): after a worker's death the launcher
/// polls every second for a while, so the end comes in while the driver
/// waits for it. Returns the errors block 3 failed with, in order.
fn errors_of_a_block_that_kills_its_worker(
    prefix: &str,
    launcher: &str,
    workers: u32,
) -> Vec<String> {
    let dir = TestDir::new();
    let kill = "[ {block_id} != 3 ] || kill -9 $PPID";
    let pipeline = cluster_pipeline("sbatch", prefix, "")
        .replace("sleep 0.1;", &format!("sleep 0.1; {kill};"))
        .replace(
            "max_workers = 3",
            &format!("max_workers = {workers}\nmax_retries = 1"),
        )
        .replace("[launcher]\n", &format!("[launcher]\n{launcher}\n"));
    dir.write("p.toml", &pipeline);
    let status = dir.driver(&["run", "p.toml"]).status().unwrap();
    assert_eq!(status.code(), Some(1), "a block failed for good");
    let run_dir = dir.join(&format!("daisy_run/{prefix}"));
    let first_task = format!("{prefix}-a");
    let errors: Vec<String> = (events(&run_dir).iter())
        .filter(|e| e["event"] == "block_failed" && e["task"] == first_task.as_str())
        .filter_map(|e| e["error"].as_str().map(String::from))
        .collect();
    assert_eq!(errors.len(), 2, "tried, then retried once: {errors:?}");
    wait_until_gone(&job_ids(&run_dir));
    errors
}

/// Through slurmrestd, which `ci/test.sh` checks for apart from SLURM.
mod site_limits;

mod slurmrestd {
    use super::*;

    #[test]
    fn a_pipeline_runs_through_slurmrestd() {
        let env = slurmrestd_env("slurmrestd chain");
        let dir = TestDir::new();
        dir.write("p.toml", &cluster_pipeline("slurmrestd", "rest", ""));
        let mut driver = cluster_driver(&dir, "p.toml");
        driver.envs(env);
        run_ok(&mut driver);
        assert_eq!(ran(&dir).len(), 24);
        wait_until_gone(&job_ids(&dir.join("daisy_run/rest")));
    }

    #[test]
    fn a_new_driver_cancels_the_slurmrestd_jobs_a_killed_driver_left_queued() {
        let env = slurmrestd_env("earlier slurmrestd jobs");
        let dir = TestDir::new();
        assert_earlier_jobs_cancelled(&dir, "slurmrestd", "\"--hold\"", &env);
    }

    /// `SLURM_JWT` and `SLURMRESTD_URL` for a driver; fails `test` when
    /// SLURM or slurmrestd is not there.
    fn slurmrestd_env(test: &str) -> Vec<(String, String)> {
        needs_slurm(test);
        let url =
            std::env::var("SLURMRESTD_URL").unwrap_or_else(|_| "http://127.0.0.1:6820".into());
        let address = url.trim_start_matches("http://").to_string();
        if std::net::TcpStream::connect(&address).is_err() {
            missing(
                test,
                &format!("no slurmrestd at {url}"),
                "start one with `DAISY_SLURM_RESTD=1 bash ci/slurm/start-local-slurm.sh`, or set SLURMRESTD_URL",
            );
        }
        let token = run_ok(Command::new("scontrol").args(["token", "lifespan=600"]));
        let jwt = token.trim().trim_start_matches("SLURM_JWT=").to_string();
        vec![
            ("SLURM_JWT".to_string(), jwt),
            ("SLURMRESTD_URL".to_string(), url),
        ]
    }
}

#[test]
fn a_new_driver_cancels_the_jobs_a_killed_driver_left_queued() {
    needs_slurm("earlier jobs");
    let dir = TestDir::new();
    assert_earlier_jobs_cancelled(&dir, "sbatch", "\"--hold\"", &[]);
}

#[test]
fn a_new_driver_cancels_the_lsf_jobs_a_killed_driver_left_queued() {
    needs_slurm("earlier lsf jobs");
    let dir = TestDir::new();
    let env = lsf_standin_env(&dir);
    assert_earlier_jobs_cancelled(&dir, "bsub", "\"-H\"", &env);
}

/// A driver whose held `kind` jobs are queued is killed with SIGKILL; the
/// next driver on the run directory cancels them and says so.
fn assert_earlier_jobs_cancelled(dir: &TestDir, kind: &str, hold: &str, env: &[(String, String)]) {
    let prefix = format!("left{kind}");
    dir.write("p.toml", &cluster_pipeline(kind, &prefix, hold));
    let run_dir = dir.join(&format!("daisy_run/{prefix}"));
    let driver = || {
        let mut driver = cluster_driver(dir, "p.toml");
        driver.envs(env.iter().cloned());
        driver
    };
    let killed = ChildGuard::spawn(&mut driver());
    wait_until("held workers were submitted", || {
        job_ids(&run_dir).len() >= 3
    });
    drop(killed); // SIGKILL: the driver cancels nothing
    let left = job_ids(&run_dir);
    let log = dir.join("second.log");
    let second = ChildGuard::spawn_logged(&mut driver(), &log);
    // Said on stderr, then recorded, right after the cancel.
    wait_until("the cancellation is recorded", || {
        events(&run_dir)
            .iter()
            .any(|e| e["event"] == "earlier_jobs_cancelled")
    });
    let said = std::fs::read_to_string(&log).unwrap();
    let cancelled = format!("cancelled {} {kind} jobs", left.len());
    assert!(said.contains(&cancelled), "{said}");
    let event = events(&run_dir)
        .into_iter()
        .find(|e| e["event"] == "earlier_jobs_cancelled")
        .unwrap();
    let mut recorded: Vec<String> = serde_json::from_value(event["jobs"].clone()).unwrap();
    recorded.sort();
    let mut expected = left.clone();
    expected.sort();
    assert_eq!(recorded, expected);
    if kind != "bsub" {
        wait_until_gone(&left);
    }
    let pid = nix::unistd::Pid::from_raw(second.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    second.wait_for_exit();
}

/// Three chained tasks of 12 blocks, each on its own launcher kind.
fn mixed_pipeline() -> String {
    format!(
        "name = \"mx\"\n[resources]\ncpu = 6\n[launcher]\ntime = \"00:10:00\"\n{}{}{}",
        cluster_task("mx", "here", "launcher = { kind = \"local\" }"),
        cluster_task(
            "mx",
            "slurm",
            "upstream = [\"mx-here\"]\nlauncher = { kind = \"sbatch\" }"
        ),
        cluster_task(
            "mx",
            "lsf",
            "upstream = [\"mx-slurm\"]\nlauncher = { kind = \"bsub\" }"
        ),
    )
}

#[test]
fn tasks_on_local_sbatch_and_bsub_launchers_chain_in_one_run_and_leave_no_job() {
    needs_slurm("mixed launchers");
    let dir = TestDir::new();
    dir.write("p.toml", &mixed_pipeline());
    let plan = run_ok(dir.driver(&["plan", "p.toml"]).envs(lsf_standin_env(&dir)));
    for kind in ["local", "sbatch", "bsub"] {
        assert!(plan.contains(&format!("  launcher     {kind}\n")), "{plan}");
    }
    let mut driver = cluster_driver(&dir, "p.toml");
    driver.envs(lsf_standin_env(&dir));
    run_ok(&mut driver);
    let lines = dir.read("ran.txt");
    let ran: BTreeSet<&str> = lines.lines().collect();
    assert_eq!(
        (ran.len(), lines.lines().count()),
        (36, 36),
        "each block once"
    );
    let run_dir = dir.join("daisy_run/mx");
    let jobs_of = |task: &str| -> Vec<String> {
        (events(&run_dir).iter())
            .filter(|e| e["event"] == "worker_submitted" && e["task"] == task)
            .filter_map(|e| e["job"].as_str().map(String::from))
            .collect()
    };
    let (here, slurm, lsf) = (jobs_of("mx-here"), jobs_of("mx-slurm"), jobs_of("mx-lsf"));
    assert!(
        here.iter().all(|j| j.parse::<u32>().is_ok()),
        "local pids: {here:?}"
    );
    assert!(
        !slurm.is_empty() && slurm.iter().all(|j| j.contains('_')),
        "{slurm:?}"
    );
    assert!(
        !lsf.is_empty() && lsf.iter().all(|j| j.contains('[')),
        "{lsf:?}"
    );
    wait_until_gone(&[slurm, lsf].concat());
}

/// Several workers per job (`workers_per_job`), each a job step.
mod workers_per_job {
    use super::*;

    /// One task of `blocks` blocks of `seconds` each, `max_workers`
    /// workers, `per_job` per sbatch job.
    pub(crate) fn stepped_pipeline(
        name: &str,
        blocks: u32,
        seconds: f64,
        max_workers: u32,
        per_job: u32,
    ) -> String {
        format!(
            r#"name = "{name}"
[resources]
cpu = 16
[launcher]
kind = "sbatch"
time = "00:10:00"
workers_per_job = {per_job}
[[task]]
id = "{name}"
total_roi = {{ offset = [0], shape = [{blocks}] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
max_workers = {max_workers}
requires = {{ cpu = 1 }}
block_command = ["sh", "-c", "sleep {seconds}; echo {{block_id}} $(hostname) >> ran.txt"]
"#
        )
    }

    /// Each block's id, as many times as it ran.
    pub(crate) fn blocks_ran(dir: &TestDir) -> Vec<String> {
        let mut blocks: Vec<String> = (dir.read("ran.txt").lines())
            .filter_map(|line| line.split_whitespace().next().map(String::from))
            .collect();
        blocks.sort_by_key(|block| block.parse::<u64>().unwrap_or(u64::MAX));
        blocks
    }

    #[test]
    fn four_workers_two_per_job_run_as_steps_and_one_killed_is_replaced_inside_its_job() {
        needs_slurm("workers_per_job");
        let dir = TestDir::new();
        dir.write("p.toml", &stepped_pipeline("steps", 60, 1.0, 4, 2));
        let driver = ChildGuard::spawn(&mut cluster_driver(&dir, "p.toml"));
        let run_dir = dir.join("daisy_run/steps");
        let connected = |events: &[serde_json::Value]| -> Vec<serde_json::Value> {
            (events.iter())
                .filter(|e| e["event"] == "worker_connected")
                .cloned()
                .collect()
        };
        wait_until("four workers connect", || {
            connected(&events(&run_dir)).len() == 4
        });
        let first = connected(&events(&run_dir)).remove(0);
        let pid = nix::unistd::Pid::from_raw(first["pid"].as_i64().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        let status = driver.wait_for_exit();
        assert!(status.success(), "{status:?}");

        let expected: Vec<String> = (0..60).map(|b| b.to_string()).collect();
        assert_eq!(blocks_ran(&dir), expected, "every block ran once");
        let events = events(&run_dir);
        let submitted: Vec<(u64, String)> = (events.iter())
            .filter(|e| e["event"] == "worker_submitted")
            .map(|e| {
                (
                    e["worker_id"].as_u64().unwrap(),
                    e["job"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let jobs: BTreeSet<&str> = submitted.iter().map(|(_, job)| job.as_str()).collect();
        assert_eq!(
            jobs.len(),
            2,
            "4 workers in 2 jobs, the replacement in one of them: {submitted:?}"
        );
        assert!(
            submitted.len() >= 5,
            "the killed worker was replaced: {submitted:?}"
        );
        let steps: Vec<&str> = (events.iter())
            .filter(|e| e["event"] == "worker_connected")
            .map(|e| e["job"].as_str().unwrap())
            .collect();
        assert!(
            steps.iter().all(|job| job
                .split_once('.')
                .is_some_and(|(_, step)| step.parse::<u32>().is_ok())),
            "every worker says its job step: {steps:?}"
        );
        let status = run_ok(
            dir.driver(&["status", "daisy_run/steps"])
                .env("NO_COLOR", "1"),
        );
        let element_step = format!("{}.", submitted[0].1);
        assert!(
            status.contains(&element_step),
            "status lists job steps:\n{status}"
        );
        wait_until_gone(&job_ids(&run_dir));
    }

    /// On the multi-node test cluster (`DAISY_SLURM_NODES=3`): workers of
    /// one run on several nodes, and a node that dies under them.
    mod multinode {
        use super::*;

        /// The cluster's node names; fails the test unless it has three or
        /// more.
        fn needs_three_nodes(test: &str) -> Vec<String> {
            needs_slurm(test);
            let listing = Command::new("sinfo")
                .args(["-h", "-N", "-o", "%N"])
                .output()
                .unwrap();
            let nodes: BTreeSet<String> = String::from_utf8_lossy(&listing.stdout)
                .split_whitespace()
                .map(String::from)
                .collect();
            if nodes.len() < 3 {
                missing(
                    test,
                    &format!("SLURM has {} node(s), not 3", nodes.len()),
                    "start it with DAISY_SLURM_NODES=3 bash ci/slurm/start-local-slurm.sh",
                );
            }
            nodes.into_iter().collect()
        }

        /// Brings a killed node back when the test ends, passed or not.
        struct Revive(String);

        impl Drop for Revive {
            fn drop(&mut self) {
                let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../ci/slurm/kill-node.sh");
                let _ = Command::new("bash")
                    .args([script, "--revive", &self.0])
                    .status();
            }
        }

        #[test]
        fn six_workers_two_per_job_run_on_three_nodes_and_a_dead_node_loses_nothing() {
            needs_three_nodes("multinode");
            let dir = TestDir::new();
            // 8 cpus a worker, 16 a node: each job of two takes a node.
            let pipeline = stepped_pipeline("nodes", 90, 1.0, 6, 2)
                .replace("cpu = 16", "cpu = 48")
                .replace("requires = { cpu = 1 }", "requires = { cpu = 8 }");
            dir.write("p.toml", &pipeline);
            let driver = ChildGuard::spawn(&mut cluster_driver(&dir, "p.toml"));
            let run_dir = dir.join("daisy_run/nodes");
            let connected = || -> Vec<serde_json::Value> {
                (events(&run_dir).into_iter())
                    .filter(|e| e["event"] == "worker_connected")
                    .collect()
            };
            wait_until("six workers connect", || connected().len() == 6);
            let hosts: Vec<String> = connected()
                .iter()
                .map(|e| e["host"].as_str().unwrap().to_owned())
                .collect();
            let per_host = |host: &str| hosts.iter().filter(|h| *h == host).count();
            let distinct: BTreeSet<&String> = hosts.iter().collect();
            assert_eq!(distinct.len(), 3, "three nodes: {hosts:?}");
            assert!(
                distinct.iter().all(|host| per_host(host) == 2),
                "two a node: {hosts:?}"
            );
            // A running run's status exits 3 (incomplete); its words matter.
            let status = dir
                .driver(&["status", "daisy_run/nodes"])
                .env("NO_COLOR", "1")
                .output();
            let status = String::from_utf8_lossy(&status.unwrap().stdout).into_owned();
            assert!(
                distinct.iter().all(|host| status.contains(host.as_str())),
                "{status}"
            );

            let dead = hosts[0].clone();
            let _revive = Revive(dead.clone());
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../ci/slurm/kill-node.sh");
            let killed = Command::new("bash").args([script, &dead]).status().unwrap();
            assert!(killed.success());
            let status = driver.wait_for_exit();
            assert!(status.success(), "{status:?}");

            let events = events(&run_dir);
            let done: Vec<u64> = (events.iter())
                .filter(|e| e["event"] == "block_done")
                .map(|e| e["block_id"].as_u64().unwrap())
                .collect();
            let unique: BTreeSet<u64> = done.iter().copied().collect();
            assert_eq!(
                (done.len(), unique.len()),
                (90, 90),
                "every block done once"
            );
            let ran: BTreeSet<String> = blocks_ran(&dir).into_iter().collect();
            assert_eq!(ran.len(), 90, "every block ran");
            let lost_on_dead = (events.iter())
                .filter(|e| e["event"] == "worker_gone" && e["clean"] == false)
                .count();
            assert!(lost_on_dead >= 2, "the dead node's two workers were lost");
            let jobs: BTreeSet<&str> = (events.iter())
                .filter(|e| e["event"] == "worker_submitted")
                .filter_map(|e| e["job"].as_str())
                .collect();
            eprintln!("jobs: {jobs:?}, dead node {dead}, {lost_on_dead} workers lost");
            wait_until_gone(&job_ids(&run_dir));
        }
    }
}
