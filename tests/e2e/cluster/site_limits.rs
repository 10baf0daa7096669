//! Site limits on the real SLURM: a submission a limit refuses waits and
//! is submitted again later, never abandoning the task; arrays larger
//! than `MaxArraySize` are split; `plan --check` shows what SLURM says of
//! each task's job script. They need the local cluster's accounting set
//! up as `ci/slurm/start-local-slurm.sh` does with
//! `DAISY_SLURM_ACCOUNTING=1`: `AccountingStorageEnforce=limits`, the
//! account `daisy` with user root, and the QOS `daisy-two-jobs` with
//! `MaxSubmitJobsPerUser=2`; without them they fail, saying so.

use super::{cluster_driver, job_ids, needs_slurm, wait_until_gone};
use crate::util::*;
use std::process::Command;

/// The QOS whose limit the tests meet: two jobs per user, queued or running.
const TWO_JOBS_QOS: &str = "daisy-two-jobs";

/// Fails `test` unless the QOS `daisy-two-jobs` exists and limits are
/// enforced.
fn needs_two_jobs_qos(test: &str) {
    needs_slurm(test);
    let qos = Command::new("sacctmgr")
        .args([
            "-n",
            "-P",
            "show",
            "qos",
            TWO_JOBS_QOS,
            "format=name,maxsubmitjobsperuser",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let enforced = slurm_config("AccountingStorageEnforce").is_some_and(|v| v.contains("limits"));
    if qos != format!("{TWO_JOBS_QOS}|2") || !enforced {
        missing(
            test,
            &format!(
                "SLURM has no QOS {TWO_JOBS_QOS} with MaxSubmitJobsPerUser=2 (sacctmgr says \
                 {qos:?}) or does not enforce limits"
            ),
            "start SLURM with DAISY_SLURM_ACCOUNTING=1 bash ci/slurm/start-local-slurm.sh",
        );
    }
}

/// One value of `scontrol show config`.
fn slurm_config(field: &str) -> Option<String> {
    let output = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once('=')?;
            (name.trim() == field).then(|| value.trim().to_string())
        })
}

/// A pipeline of one task `id` of `blocks` blocks of one cpu each, with
/// `workers` workers at most, on sbatch with `launcher` lines added.
fn pipeline(id: &str, blocks: u32, workers: u32, launcher: &str) -> String {
    let extra = format!("max_workers = {workers}\nrequires = {{ cpu = 1 }}");
    let command = format!("sleep 0.5; echo {id} {{block_id}} >> ran.txt");
    format!(
        "name = \"{id}\"\n[resources]\ncpu = {workers}\n[launcher]\nkind = \"sbatch\"\n\
         time = \"00:10:00\"\n{launcher}\n{}",
        task(id, blocks, &command, &extra)
    )
}

#[test]
fn a_task_over_its_qos_submit_limit_waits_and_completes() {
    needs_two_jobs_qos("submit limit");
    let dir = TestDir::new();
    let launcher = format!("account = \"daisy\"\nqos = \"{TWO_JOBS_QOS}\"");
    dir.write("p.toml", &pipeline("limited", 24, 6, &launcher));
    let driver = ChildGuard::spawn(&mut cluster_driver(&dir, "p.toml"));
    let run_dir = dir.join("daisy_run/limited");
    let waiting = || {
        events(&run_dir)
            .into_iter()
            .filter(|e| e["event"] == "worker_submit_waiting")
            .collect::<Vec<_>>()
    };
    wait_until("a submission waits for the QOS limit", || {
        !waiting().is_empty()
    });
    let status = run(&mut dir.driver(&["status", "daisy_run/limited"]));
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    let ended = driver.wait_for_exit();
    assert!(ended.success(), "{ended:?}");
    let waits = waiting();
    assert!(
        waits
            .iter()
            .all(|e| e["limit"] == "QOSMaxSubmitJobPerUserLimit"),
        "SLURM's reason names the limit: {waits:?}"
    );
    assert!(
        status.contains("wait for a site limit (QOSMaxSubmitJobPerUserLimit)"),
        "status says that workers wait, while the run goes:\n{status}"
    );
    assert_each_block_done_once(&run_dir, "limited", 24);
    let failed: Vec<_> = events(&run_dir)
        .into_iter()
        .filter(|e| e["event"] == "worker_start_failed" || e["event"] == "task_abandoned")
        .collect();
    assert!(
        failed.iter().all(|e| e["event"] != "task_abandoned"),
        "the task is never abandoned for a limit: {failed:?}"
    );
    wait_until_gone(&job_ids(&run_dir));
}

#[test]
fn max_jobs_holds_a_tasks_jobs_back_and_the_run_completes() {
    needs_slurm("max_jobs");
    let dir = TestDir::new();
    dir.write("p.toml", &pipeline("capped", 16, 4, "max_jobs = 1"));
    let driver = ChildGuard::spawn(&mut cluster_driver(&dir, "p.toml"));
    let run_dir = dir.join("daisy_run/capped");
    wait_until("workers wait for max_jobs", || {
        events(&run_dir)
            .iter()
            .any(|e| e["event"] == "worker_submit_waiting" && e["limit"] == "max_jobs")
    });
    let status = run(&mut dir.driver(&["status", "daisy_run/capped"]));
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(driver.wait_for_exit().success());
    assert!(status.contains("wait for the task's max_jobs"), "{status}");
    assert_each_block_done_once(&run_dir, "capped", 16);
    wait_until_gone(&job_ids(&run_dir));
}

#[test]
fn an_array_larger_than_max_array_size_is_split_and_the_run_completes() {
    needs_slurm("MaxArraySize");
    let max_array_size: u32 = slurm_config("MaxArraySize")
        .and_then(|v| v.parse().ok())
        .expect("scontrol show config says MaxArraySize");
    if max_array_size > 14 {
        missing(
            "MaxArraySize",
            &format!("SLURM's MaxArraySize is {max_array_size}, more workers than a test starts"),
            "start SLURM with a small one: DAISY_SLURM_MAX_ARRAY_SIZE=8 bash ci/slurm/start-local-slurm.sh",
        );
    }
    let workers = max_array_size + 2;
    let dir = TestDir::new();
    dir.write("p.toml", &pipeline("split", workers * 2, workers, ""));
    run_ok(&mut cluster_driver(&dir, "p.toml"));
    let run_dir = dir.join("daisy_run/split");
    assert_each_block_done_once(&run_dir, "split", u64::from(workers) * 2);
    let jobs = job_ids(&run_dir);
    let arrays: std::collections::BTreeSet<&str> =
        jobs.iter().map(|j| j.split('_').next().unwrap()).collect();
    assert!(arrays.len() >= 2, "split into several arrays: {jobs:?}");
    let indices_fit = jobs
        .iter()
        .all(|j| j.split('_').nth(1).and_then(|i| i.parse::<u32>().ok()) < Some(max_array_size));
    assert!(indices_fit, "every index below MaxArraySize: {jobs:?}");
    wait_until_gone(&jobs);
}

#[test]
fn plan_check_shows_slurms_own_words_for_a_wrong_partition() {
    needs_slurm("plan --check");
    let dir = TestDir::new();
    dir.write(
        "p.toml",
        &pipeline("checked", 4, 2, "partition = \"nosuch\""),
    );
    let output = run_fails(&mut dir.driver(&["plan", "p.toml", "--check"]), 2);
    assert!(
        output.contains("invalid partition specified: nosuch"),
        "SLURM's words:\n{output}"
    );
    dir.write("ok.toml", &pipeline("checked-ok", 4, 2, ""));
    let output = run_ok(&mut dir.driver(&["plan", "ok.toml", "--check"]));
    assert!(output.contains("sbatch --test-only"), "{output}");
}
