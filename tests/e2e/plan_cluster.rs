//! `plan` shows the job scripts a run submits, byte for byte: plan a
//! pipeline, run it on the real SLURM (and through the LSF stand-in), and
//! compare the scripts the run kept beside its logs with what plan
//! printed. Fails without a SLURM (`ci/test.sh` leaves it out then).

use crate::cluster::{cluster_driver, lsf_standin_env, needs_slurm};
use crate::util::*;
use std::process::Command;

/// Two tasks whose first submissions are deterministic: "a" has 2 blocks
/// and gets workers 1-2 at start; every block of "b" reads both blocks of
/// "a", so all of them become ready at once when "a" is done, and "b" gets
/// workers 3-4 in one submission (the budget has room for both tasks, so
/// no worker waits for another to leave).
fn pipeline(kind: &str, prefix: &str) -> String {
    format!(
        r#"name = "{prefix}"
[resources]
cpu = 4
[launcher]
kind = "{kind}"
time = "00:10:00"
setup = ["echo starting a worker of {prefix}"]

[[task]]
id = "{prefix}-a"
total_roi = {{ offset = [0], shape = [2] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
max_workers = 2
requires = {{ cpu = 1 }}
block_command = ["sh", "-c", "echo {prefix}-a {{block_id}} >> ran.txt"]

[[task]]
id = "{prefix}-b"
upstream = ["{prefix}-a"]
total_roi = {{ offset = [-2], shape = [6] }}
read_roi = {{ offset = [0], shape = [4] }}
write_roi = {{ offset = [2], shape = [1] }}
read_write_conflict = false
max_workers = 2
requires = {{ cpu = 1 }}
block_command = ["sh", "-c", "echo {prefix}-b {{block_id}} >> ran.txt"]
"#
    )
}

/// Plans the pipeline (JSON and text with --scripts), runs it, and checks
/// that every script plan showed is the file the run kept, byte for byte.
fn plan_then_run(dir: &TestDir, prefix: &str, environment: &[(String, String)]) {
    let with_env = |mut command: Command| {
        command.envs(environment.iter().map(|(k, v)| (k, v)));
        command
    };
    let json = run_ok(&mut with_env(dir.driver(&["plan", "p.toml", "--json"])));
    let plan: serde_json::Value = serde_json::from_str(&json).unwrap();
    let text = run_ok(&mut with_env(dir.driver(&["plan", "p.toml", "--scripts"])));
    let submissions = plan["submissions"].as_array().unwrap();
    let workers: Vec<(u64, u64)> = submissions
        .iter()
        .map(|s| {
            (
                s["first_worker"].as_u64().unwrap(),
                s["last_worker"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(workers, [(1, 2), (3, 4)], "{json}");
    for submission in submissions {
        let script = submission["script"].as_str().unwrap();
        assert!(
            text.contains(script),
            "--scripts prints the script:\n{text}"
        );
    }

    run_ok(&mut with_env(cluster_driver(dir, "p.toml")));
    assert_eq!(dir.read("ran.txt").lines().count(), 5);
    wait_until("squeue lists no job of the run", || {
        jobs_named(&format!("daisy-{prefix}-")).is_empty()
    });
    for submission in submissions {
        let path = dir.join(submission["script_path"].as_str().unwrap());
        let kept = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("the run kept no {}: {e}", path.display()));
        assert_eq!(
            kept,
            submission["script"].as_str().unwrap(),
            "{} differs from what plan printed",
            path.display()
        );
    }
}

#[test]
fn plan_prints_the_sbatch_scripts_a_run_submits_byte_for_byte() {
    needs_slurm("plan sbatch scripts");
    let dir = TestDir::new();
    dir.write("p.toml", &pipeline("sbatch", "plansb"));
    plan_then_run(&dir, "plansb", &[]);
}

#[test]
fn plan_prints_the_bsub_scripts_a_run_submits_byte_for_byte() {
    needs_slurm("plan bsub scripts");
    let dir = TestDir::new();
    dir.write("p.toml", &pipeline("bsub", "planlsf"));
    plan_then_run(&dir, "planlsf", &lsf_standin_env(&dir));
}

/// The jobs in SLURM's queue (those of the LSF stand-in too) whose name
/// starts with `prefix`.
fn jobs_named(prefix: &str) -> Vec<String> {
    let output = run_ok(Command::new("squeue").args(["-h", "-o", "%j"]));
    output
        .lines()
        .filter(|name| name.starts_with(prefix))
        .map(String::from)
        .collect()
}
