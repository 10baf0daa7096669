//! Resources as slots on one machine, with real local workers: each is
//! told the budget ids it holds (`CUDA_VISIBLE_DEVICES` for GPUs), gives
//! them back when it dies, gets thread counts from its `cpu` share unless
//! the user set them, and is pinned to its cores when asked.

use crate::util::*;
use daisy_driver::run::resource_env::THREAD_VARIABLES;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn pipeline(resources: &str, tasks: &[String]) -> String {
    format!(
        "name = \"slots\"\n[resources]\n{resources}\n{}",
        tasks.concat()
    )
}

fn run_dir(dir: &TestDir) -> std::path::PathBuf {
    dir.join("daisy_run/slots")
}

/// Per worker, the ids of `key` its `worker_submitted` event names.
fn ids_of_workers(events: &[Value], key: &str) -> BTreeMap<u64, Vec<String>> {
    events
        .iter()
        .filter(|e| e["event"] == "worker_submitted")
        .map(|e| {
            let ids = e["resources"][key].as_array().cloned().unwrap_or_default();
            let ids = ids.iter().map(|id| id.as_str().unwrap().to_string());
            (e["worker_id"].as_u64().unwrap(), ids.collect())
        })
        .collect()
}

/// Per block, the worker that ran it.
fn worker_of_blocks(events: &[Value]) -> BTreeMap<u64, u64> {
    events
        .iter()
        .filter(|e| e["event"] == "block_done")
        .map(|e| {
            (
                e["block_id"].as_u64().unwrap(),
                e["worker_id"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The ids `key` of the workers alive at each moment, from the events:
/// a worker holds its ids from its submission to its end.
fn held_at_once(events: &[Value], key: &str) -> Vec<Vec<String>> {
    let ids = ids_of_workers(events, key);
    let mut live: BTreeSet<u64> = BTreeSet::new();
    let mut moments = Vec::new();
    for event in events {
        let worker = event["worker_id"].as_u64();
        match (event["event"].as_str(), worker) {
            (Some("worker_submitted"), Some(worker)) => live.insert(worker),
            (Some("worker_gone" | "worker_start_failed"), Some(worker)) => live.remove(&worker),
            _ => continue,
        };
        moments.push(live.iter().flat_map(|w| ids[w].clone()).collect());
    }
    moments
}

#[test]
fn four_local_workers_each_see_their_own_gpu() {
    let dir = TestDir::new();
    std::fs::create_dir(dir.join("seen")).unwrap();
    let task = task(
        "predict",
        16,
        "echo $CUDA_VISIBLE_DEVICES > seen/{block_id}; sleep 0.3",
        "max_workers = 4\nrequires = { gpu = 1 }",
    );
    dir.write("slots.toml", &pipeline("gpu = 4", &[task]));
    run_ok(&mut dir.driver(&["run", "slots.toml"]));
    let events = events(&run_dir(&dir));
    let gpus = ids_of_workers(&events, "gpu");
    assert!(gpus.len() >= 4, "{gpus:?}");
    for (block, worker) in worker_of_blocks(&events) {
        let seen = dir.read(&format!("seen/{block}"));
        assert_eq!(seen.trim(), gpus[&worker].join(","), "block {block}");
    }
    let all: BTreeSet<&String> = gpus.values().flatten().collect();
    assert_eq!(
        all,
        ["0", "1", "2", "3"]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .iter()
            .collect()
    );
    for moment in held_at_once(&events, "gpu") {
        let distinct: BTreeSet<&String> = moment.iter().collect();
        assert_eq!(distinct.len(), moment.len(), "a GPU held twice: {moment:?}");
    }
}

#[test]
fn a_worker_that_dies_gives_its_gpu_back_to_the_next() {
    let dir = TestDir::new();
    // The first try of block 0 kills its worker; the next worker must be
    // told the same (only) GPU.
    let task = task(
        "predict",
        3,
        "echo $CUDA_VISIBLE_DEVICES >> seen; test {block_id} -ne 0 || test -e died || (touch died; kill -9 $PPID)",
        "max_workers = 1\nmax_retries = 2\nrequires = { gpu = 1 }",
    );
    dir.write("slots.toml", &pipeline("gpu = [\"3\"]", &[task]));
    run_ok(&mut dir.driver(&["run", "slots.toml"]));
    let events = events(&run_dir(&dir));
    let gpus = ids_of_workers(&events, "gpu");
    assert!(gpus.len() >= 2, "a second worker was started: {gpus:?}");
    assert!(gpus.values().all(|ids| ids == &["3"]), "{gpus:?}");
    let seen = dir.read("seen");
    assert!(seen.lines().all(|line| line == "3"), "{seen}");
    assert_completed_without_failures(&run_dir(&dir), "predict", 3);
}

#[test]
fn a_cpu_share_sets_the_thread_counts_unless_the_user_set_them() {
    let dir = TestDir::new();
    let show = "echo $OMP_NUM_THREADS $MKL_NUM_THREADS $OPENBLAS_NUM_THREADS $NUMBA_NUM_THREADS > {task_id}-{block_id}";
    let shared = task("shared", 1, show, "requires = { cpu = 2 }");
    let own = task(
        "own",
        1,
        show,
        "requires = { cpu = 2 }\nenv = { MKL_NUM_THREADS = \"7\" }",
    );
    dir.write("slots.toml", &pipeline("cpu = 4", &[shared, own]));
    run_ok(
        dir.driver(&["run", "slots.toml"])
            .env("OPENBLAS_NUM_THREADS", "3")
            .env_remove("OMP_NUM_THREADS")
            .env_remove("MKL_NUM_THREADS")
            .env_remove("NUMBA_NUM_THREADS"),
    );
    assert_eq!(
        dir.read("shared-0").trim(),
        "2 2 3 2",
        "the driver's OPENBLAS wins"
    );
    assert_eq!(dir.read("own-0").trim(), "2 7 3 2", "the task's MKL wins");
}

#[test]
fn a_pinned_worker_runs_on_its_own_cores() {
    let dir = TestDir::new();
    let task = task(
        "pinned",
        4,
        "grep Cpus_allowed_list /proc/self/status | cut -f2 > seen-{block_id}; sleep 0.2",
        "max_workers = 2\nrequires = { cpu = 1 }\npin = true",
    );
    dir.write("slots.toml", &pipeline("cpu = 1", &[task]));
    run_ok(&mut dir.driver(&["run", "slots.toml"]));
    let events = events(&run_dir(&dir));
    let cpus = ids_of_workers(&events, "cpu");
    for (block, worker) in worker_of_blocks(&events) {
        let seen = dir.read(&format!("seen-{block}"));
        assert_eq!(seen.trim(), cpus[&worker].join(","), "block {block}");
    }
}

#[test]
fn plan_shows_what_each_first_worker_is_told() {
    let dir = TestDir::new();
    let task = task(
        "predict",
        4,
        "true",
        "max_workers = 2\nrequires = { gpu = 1, cpu = 2 }",
    );
    dir.write("slots.toml", &pipeline("gpu = [0, 2]\ncpu = 4", &[task]));
    let text = run_ok(&mut dir.driver(&["plan", "slots.toml", "--scripts"]));
    for (gpu, cpus) in [("0", "0,1"), ("2", "2,3")] {
        let told = format!(
            "DAISY_RESOURCE_CPU={cpus} DAISY_RESOURCE_GPU={gpu} CUDA_VISIBLE_DEVICES={gpu} "
        );
        assert!(text.contains(&told), "{told} in:\n{text}");
    }
    assert!(text.contains("OMP_NUM_THREADS=2 "), "{text}");
}

#[test]
fn cluster_jobs_get_the_thread_counts_of_their_cpu_share_but_no_ids() {
    crate::cluster::needs_slurm("cluster thread counts");
    let dir = TestDir::new();
    let task = task(
        "threads",
        2,
        "echo \\\"$OMP_NUM_THREADS|$OPENBLAS_NUM_THREADS|$DAISY_RESOURCES\\\" > seen-{block_id}",
        "requires = { cpu = 2 }\n[task.launcher]\nkind = \"sbatch\"\ntime = \"00:05:00\"",
    );
    dir.write("slots.toml", &pipeline("cpu = 2", &[task]));
    let mut driver = crate::cluster::cluster_driver(&dir, "slots.toml");
    for name in THREAD_VARIABLES {
        driver.env_remove(name);
    }
    run_ok(&mut driver);
    for block in 0..2 {
        assert_eq!(dir.read(&format!("seen-{block}")).trim(), "2|2|");
    }
    crate::cluster::wait_until_gone(&crate::cluster::job_ids(&run_dir(&dir)));
}
