//! Issue 11, item 11: a task whose program does not exist (`pyhton3`,
//! `./segg.sh`) used to be found only when each block ran, spending every
//! retry of every block. Locally, `plan` and `run` refuse it up front; on a
//! cluster `plan` warns, and each worker reports it once, as unable to
//! serve, so the driver starts no more workers for the task.

use crate::cluster::{cluster_driver, needs_slurm, wait_until_gone};
use crate::util::*;
use std::os::unix::fs::PermissionsExt;

fn pipeline(kind: &str, prefix: &str, program: &str) -> String {
    format!(
        r#"name = "{prefix}"
[resources]
cpu = 4
[launcher]
kind = "{kind}"
time = "00:10:00"

[[task]]
id = "{prefix}-seg"
total_roi = {{ offset = [0], shape = [6] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
max_workers = 2
requires = {{ cpu = 1 }}
block_command = ["{program}", "{{block_id}}"]

[[task]]
id = "{prefix}-predict"
total_roi = {{ offset = [0], shape = [6] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
requires = {{ cpu = 1 }}
command = ["pyhton3", "predict.py"]
"#
    )
}

#[test]
fn a_local_run_refuses_programs_that_do_not_resolve_before_anything_starts() {
    let dir = TestDir::new();
    dir.write("p.toml", &pipeline("local", "loc", "./segg.sh"));
    let seg = format!(
        "task \"loc-seg\": block_command = [\"./segg.sh\", \"{{block_id}}\"]: program \
         \"./segg.sh\" does not exist (looked for {}/segg.sh)",
        dir.path().display()
    );
    let predict = "task \"loc-predict\": command = [\"pyhton3\", \"predict.py\"]: program \
                   \"pyhton3\" is not found on PATH";
    // Issue 38: plan and run agree on the exit status.
    let plan = run_fails(&mut dir.driver(&["plan", "p.toml"]), 2);
    let run = run_fails(&mut dir.driver(&["run", "p.toml", "--run-dir", "run"]), 2);
    let serial = run_fails(&mut dir.driver(&["run", "p.toml", "--serial"]), 2);
    for out in [plan, run, serial] {
        assert!(out.contains(&seg), "missing {seg:?} in:\n{out}");
        assert!(out.contains(predict), "missing {predict:?} in:\n{out}");
    }
    assert!(!dir.join("run").exists(), "nothing started");
    assert!(!dir.join("daisy_run").exists(), "nothing started");

    // The same for the program local workers run.
    dir.write(
        "p.toml",
        &pipeline("local", "loc", "true").replace("pyhton3", "sh"),
    );
    let worker = ["--worker-bin", "/nonexistent/daisy-worker"];
    let plan = run_fails(dir.driver(&["plan", "p.toml"]).args(worker), 2);
    let run = run_fails(dir.driver(&["run", "p.toml"]).args(worker), 2);
    let expected = "the worker program (--worker-bin, DAISY_WORKER_BIN) \
                    \"/nonexistent/daisy-worker\": program \"/nonexistent/daisy-worker\" \
                    does not exist";
    for out in [plan, run] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(!dir.join("daisy_run").exists(), "nothing started");

    // A relative path resolves against the directory workers run in.
    let script = dir.write("seg.sh", "#!/bin/sh\necho \"$1\" >> ran.txt\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fixed = pipeline("local", "loc", "./seg.sh").replace("pyhton3", "sh");
    dir.write("p.toml", &fixed);
    dir.write("predict.py", "");
    run_ok(&mut dir.driver(&["plan", "p.toml"]));
}

#[test]
fn cluster_workers_that_cannot_start_the_program_report_it_once() {
    needs_slurm("cluster workers that cannot start the program");
    let dir = TestDir::new();
    let only_seg = pipeline("sbatch", "noprog", "./segg.sh");
    let only_seg = &only_seg[..only_seg.rfind("[[task]]").unwrap()];
    dir.write("p.toml", only_seg);
    let plan = run_ok(&mut dir.driver(&["plan", "p.toml"]));
    assert!(
        plan.contains("warning: task \"noprog-seg\": block_command = [\"./segg.sh\", \"{block_id}\"]: program \"./segg.sh\" does not exist")
            && plan.contains("(it may exist only on the compute nodes)"),
        "{plan}"
    );
    let out = run_fails(&mut cluster_driver(&dir, "p.toml"), 1);
    let run_dir = dir.join("daisy_run/noprog");
    wait_until_gone(&crate::cluster::job_ids(&run_dir));
    let events = events(&run_dir);
    let named = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    assert_eq!(named("block_failed"), 0, "no block was tried:\n{out}");
    assert_eq!(
        named("worker_submitted"),
        2,
        "no worker was started again:\n{out}"
    );
    let abandoned = events
        .iter()
        .find(|e| e["event"] == "task_abandoned")
        .unwrap();
    let why = abandoned["why"].as_str().unwrap();
    assert!(
        why.starts_with("a worker could not serve it: its code cannot run: program \"./segg.sh\" does not exist"),
        "{why}"
    );
    let status = run(&mut dir.driver(&["status", "daisy_run/noprog"]));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains(why), "status shows why:\n{status}");
}
