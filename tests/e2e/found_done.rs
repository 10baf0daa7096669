//! Blocks user code finds done already: a worker command answers
//! `"skipped": true` (as daisy_rs's check functions do) and the block
//! counts as skipped, not run, in the run's counters, its summary and
//! `status --json`, in distributed and serial runs alike, and it is
//! marked done like any finished block.

use crate::util::*;

/// Answers every block, calling the even ones done already.
const CHECKING_WORKER: &str = r#"import json, sys
for line in sys.stdin:
    i = json.loads(line)["block_id"]
    print(json.dumps({"block_id": i, "ok": True, "skipped": i % 2 == 0}), flush=True)
"#;

const PIPELINE: &str = r#"name = "checked"
[[task]]
id = "checked"
total_roi = { offset = [0], shape = [6] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
read_write_conflict = false
max_workers = 2
command = ["python3", "worker.py"]
"#;

#[test]
fn blocks_user_code_finds_done_count_as_skipped_and_are_marked_done() {
    for serial in [false, true] {
        let dir = TestDir::new();
        dir.write("worker.py", CHECKING_WORKER);
        dir.write("p.toml", PIPELINE);
        let args: &[&str] = match serial {
            true => &["run", "--serial", "p.toml"],
            false => &["run", "p.toml"],
        };
        let out = run_ok(&mut dir.driver(args));
        let run_dir = dir.join("daisy_run/checked");
        let counters = task_done_counters(&run_dir, "checked");
        let counted = |name: &str| counters[name].as_u64();
        assert_eq!(
            (counted("completed"), counted("skipped")),
            (Some(6), Some(3)),
            "serial {serial}: {counters}\n{out}"
        );
        assert_eq!(marked_done(&run_dir, "checked").0.len(), 6);
        let status = run_ok(&mut dir.driver(&["status", "--json", "daisy_run/checked"]));
        let status: serde_json::Value = serde_json::from_str(&status).unwrap();
        let ended = &status["last_run"]["tasks_ended"]["checked"];
        assert_eq!(ended["skipped"], 3, "{status}");
    }
}
