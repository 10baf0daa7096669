//! Done markers shared with daisy 2.0.0 as released on PyPI (issue 11,
//! item 4): blocks daisy 2.0.0 marked done are skipped by our driver, and
//! blocks our driver marked done are skipped by daisy 2.0.0, for the same
//! pipeline geometry on both sides; each side's failure counts are read
//! by the other.
//!
//! These tests need a Python with daisy 2.0.0 from PyPI, named by the
//! environment variable `DAISY2_PYTHON` (the interpreter's path). Without
//! it they fail, saying how to set it: a test that cannot check anything
//! must not pass.

use crate::util::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

const PYTHON_ENV: &str = "DAISY2_PYTHON";

/// The geometry both sides use: 12 blocks of a shrink-fit task whose
/// write regions sit inside their read regions, off the origin, so the
/// block grid (5 x 4 cells) is not the blocks' own 4 x 3.
const GEOMETRY: &str = r#"total_roi = { offset = [-5, 0], shape = [50, 40] }
read_roi = { offset = [0, 0], shape = [20, 20] }
write_roi = { offset = [5, 5], shape = [10, 10] }
fit = "shrink"
read_write_conflict = false"#;

/// Every block id of [`GEOMETRY`].
const ALL_BLOCKS: [u64; 12] = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 18];

/// The same task for daisy 2.0.0. Arguments: tracking directory, the file
/// each block appends its id to, the block ids to fail (comma separated).
/// Prints the blocks its store records as failed before it runs.
const DAISY_SCRIPT: &str = r#"
import os, sys
import daisy

tracking, log, fail = sys.argv[1], sys.argv[2], sys.argv[3]
fail = {int(i) for i in fail.split(",") if i}

def process(block):
    block_id = block.block_id[1]
    with open(log, "a") as f:
        f.write(f"{block_id}\n")
    if block_id in fail:
        raise RuntimeError(f"block {block_id} fails on purpose")

task = daisy.Task(
    "work",
    total_roi=daisy.Roi((-5, 0), (50, 40)),
    read_roi=daisy.Roi((0, 0), (20, 20)),
    write_roi=daisy.Roi((5, 5), (10, 10)),
    process_function=process,
    read_write_conflict=False,
    fit="shrink",
    max_retries=0,
    max_workers=1,
    tracking_path=tracking,
    resource_tracking=os.environ.get("TRACK_RESOURCES") == "1",
)
failed = sorted(b.block_id[1] for b in task.failed_blocks())
print("FAILED_BEFORE", ",".join(map(str, failed)), flush=True)
daisy.run_blockwise([task])
"#;

/// The Python with daisy 2.0.0, or a failure saying how to get one.
fn daisy2_python() -> PathBuf {
    let Some(python) = std::env::var_os(PYTHON_ENV) else {
        panic!(
            "{PYTHON_ENV} is not set. These tests check our done markers against \
             daisy 2.0.0 from PyPI and need a Python interpreter that has it:\n  \
             python3 -m venv /tmp/venv-daisy2\n  \
             /tmp/venv-daisy2/bin/pip install daisy==2.0.0 numpy zarr\n  \
             {PYTHON_ENV}=/tmp/venv-daisy2/bin/python cargo nextest run --test e2e daisy2_compat::"
        );
    };
    let python = PathBuf::from(python);
    let mut command = Command::new(&python);
    command.args([
        "-c",
        "import importlib.metadata as m; print(m.version('daisy'))",
    ]);
    let output = run(&mut command);
    let version = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && version.trim() == "2.0.0",
        "{PYTHON_ENV}={} has no daisy 2.0.0 (pip install daisy==2.0.0)\n{}",
        python.display(),
        describe(&command, &output)
    );
    python
}

/// Our pipeline: the same task, its block command appending the block id
/// to `ours.txt` and failing for `fail`, with `max_retries` retries.
fn pipeline(fail: &[u64], max_retries: u32) -> String {
    let fail: Vec<String> = fail.iter().map(u64::to_string).collect();
    let fail = match fail.is_empty() {
        true => String::new(),
        false => format!("case {{block_id}} in {}) exit 1;; esac", fail.join("|")),
    };
    format!(
        r#"name = "compat"
[[task]]
id = "work"
{GEOMETRY}
max_retries = {max_retries}
block_command = ["sh", "-c", "echo {{block_id}} >> ours.txt; {fail}"]
"#
    )
}

/// Runs the task with daisy 2.0.0 on our run directory's marker, failing
/// `fail`: what its store recorded as failed before, and the block ids it
/// ran (a line per attempt).
fn run_daisy(dir: &TestDir, python: &PathBuf, fail: &[u64]) -> (Vec<u64>, Vec<u64>) {
    run_daisy_tracking(dir, python, fail, false)
}

/// [`run_daisy`], with daisy's `resource_tracking` as `track` says.
fn run_daisy_tracking(
    dir: &TestDir,
    python: &PathBuf,
    fail: &[u64],
    track: bool,
) -> (Vec<u64>, Vec<u64>) {
    dir.write("daisy_task.py", DAISY_SCRIPT);
    let fail: Vec<String> = fail.iter().map(u64::to_string).collect();
    let tracking = dir.join("daisy_run/compat/done/work");
    let log = dir.join("daisy.txt");
    let _ = std::fs::remove_file(&log);
    let mut command = Command::new(python);
    command
        .arg("daisy_task.py")
        .arg(&tracking)
        .arg(&log)
        .arg(fail.join(","))
        .env("TRACK_RESOURCES", if track { "1" } else { "0" })
        .current_dir(dir.path());
    let output = run(&mut command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failed_before = stdout
        .lines()
        .find_map(|l| l.strip_prefix("FAILED_BEFORE"))
        .unwrap_or_else(|| panic!("daisy 2.0.0 did not start\n{}", describe(&command, &output)));
    (
        ids(failed_before.replace(',', "\n").as_str()),
        ids(&dir.read("daisy.txt")),
    )
}

fn ids(text: &str) -> Vec<u64> {
    text.split_whitespace()
        .map(|id| id.parse().unwrap())
        .collect()
}

fn set(ids: &[u64]) -> BTreeSet<u64> {
    ids.iter().copied().collect()
}

/// `status --json` of the run: task "work"'s done count.
fn status_done(dir: &TestDir) -> Value {
    let json = run_ok(&mut dir.driver(&["status", "--json", "daisy_run/compat"]));
    let status: Value = serde_json::from_str(&json).unwrap();
    status["tasks"][0]["done"].clone()
}

#[test]
fn blocks_daisy_2_0_0_marked_done_are_skipped_by_our_driver() {
    let python = daisy2_python();
    let dir = TestDir::new();
    let (failed_before, daisy_ran) = run_daisy(&dir, &python, &[3, 7]);
    assert!(failed_before.is_empty());
    assert_eq!(set(&daisy_ran), set(&ALL_BLOCKS), "daisy ran every block");
    dir.write("compat.toml", &pipeline(&[], 2));
    let plan = run_ok(&mut dir.driver(&["plan", "--json", "compat.toml"]));
    let plan: Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(plan["tasks"][0]["done_blocks"], 10, "{plan:#}");
    run_ok(&mut dir.driver(&["run", "compat.toml"]));
    assert_eq!(
        ids(&dir.read("ours.txt")),
        [3, 7],
        "we ran only what daisy did not"
    );
    assert_eq!(status_done(&dir), 12);
    let (failed_before, daisy_ran) = run_daisy(&dir, &python, &[]);
    assert!(
        failed_before.is_empty(),
        "done blocks are not listed as failed"
    );
    assert!(
        daisy_ran.is_empty(),
        "daisy finds nothing left: {daisy_ran:?}"
    );
}

#[test]
fn blocks_our_driver_marked_done_are_skipped_by_daisy_2_0_0() {
    let python = daisy2_python();
    let dir = TestDir::new();
    dir.write("compat.toml", &pipeline(&[3, 7], 1));
    let output = run(&mut dir.driver(&["run", "compat.toml"]));
    assert!(!output.status.success(), "blocks 3 and 7 fail for good");
    let ours = ids(&dir.read("ours.txt"));
    assert_eq!(
        ours.len(),
        10 + 2 * 2,
        "two attempts of 3 and of 7: {ours:?}"
    );
    assert_eq!(set(&ours), set(&ALL_BLOCKS));
    let counts = failure_counts(&dir.join("daisy_run/compat"), "work");
    assert_eq!(counts, [(3, 2), (7, 2)].into(), "each attempt counted");
    let (failed_before, daisy_ran) = run_daisy(&dir, &python, &[]);
    assert_eq!(failed_before, [3, 7], "daisy reads our failure counts");
    assert_eq!(
        set(&daisy_ran),
        set(&[3, 7]),
        "daisy ran only what we did not"
    );
    assert_eq!(daisy_ran.len(), 2);
    assert_eq!(status_done(&dir), 12, "status shows what daisy did");
    let _ = std::fs::remove_file(dir.join("ours.txt"));
    run_ok(&mut dir.driver(&["run", "compat.toml"]));
    assert_eq!(dir.read("ours.txt"), "", "nothing is left for us either");
}

#[test]
fn costs_daisy_2_0_0_stored_and_ours_share_its_arrays() {
    let python = daisy2_python();
    let dir = TestDir::new();
    run_daisy_tracking(&dir, &python, &[3, 7], true);
    let tracking = format!("{}\nresource_tracking = true", pipeline(&[], 2));
    dir.write("compat.toml", &tracking);
    run_ok(&mut dir.driver(&["run", "compat.toml"]));
    assert_eq!(ids(&dir.read("ours.txt")), [3, 7]);
    let costs = stored_costs(&dir.join("daisy_run/compat"), "work");
    assert_eq!(
        costs.keys().copied().collect::<BTreeSet<u64>>(),
        set(&ALL_BLOCKS),
        "daisy's 10 blocks and our 2 in the same arrays"
    );
    assert!(costs
        .values()
        .all(|c| c.wall_seconds > 0.0 && c.peak_rss_bytes > 0));
    let json = run_ok(&mut dir.driver(&["status", "--json", "daisy_run/compat"]));
    let status: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(status["tasks"][0]["costs"]["measured"], 12, "{status:#}");
}
