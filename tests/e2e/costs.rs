//! What each block cost (`resource_tracking`), through the real driver
//! and worker: a block command's and a worker command's peak memory, CPU
//! time and bytes written reach `status`, `status --json` and `report`;
//! a resumed run keeps the costs of the blocks done before; without a GPU
//! no GPU figure appears; without `resource_tracking` nothing is stored.

use crate::util::*;
use serde_json::Value;

/// Holds 50 MB, burns some CPU and writes a 1 MB file per block.
const HUNGRY: &str = "\
import sys
data = b'x' * 50_000_000
total = sum(i * i for i in range(200_000))
open('out-' + sys.argv[1], 'wb').write(b'y' * 1_000_000)
";

/// The same per block line of a worker command, answering each.
const HUNGRY_WORKER: &str = "\
import json, sys
for line in sys.stdin:
    block = json.loads(line)['block_id']
    data = b'x' * 50_000_000
    total = sum(i * i for i in range(200_000))
    open('out-%d' % block, 'wb').write(b'y' * 1_000_000)
    del data
    print(json.dumps({'block_id': block, 'ok': True}), flush=True)
";

const MB: f64 = 1e6;

/// A pipeline of one 4-block task running `code` (`block_command` or
/// `command` = its argv), with `top` lines before the task.
fn pipeline(top: &str, code: &str) -> String {
    format!(
        r#"name = "c"
{top}
[[task]]
id = "t"
total_roi = {{ offset = [0], shape = [4] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
max_workers = 2
{code}
"#
    )
}

fn block_command() -> String {
    r#"block_command = ["python3", "hungry.py", "{block_id}"]"#.to_string()
}

/// The task's `costs` in `status --json`, by measure name.
fn measures(dir: &TestDir) -> serde_json::Map<String, Value> {
    let status = run_ok(&mut dir.driver(&["status", "--json", "daisy_run/c"]));
    let status: Value = serde_json::from_str(&status).unwrap();
    let costs = &status["tasks"][0]["costs"];
    assert_eq!(costs["measured"], 4, "{costs}");
    let measures = costs["measures"].as_array().unwrap().iter();
    measures
        .map(|m| (m["measure"].as_str().unwrap().to_string(), m.clone()))
        .collect()
}

/// The figures every block of a [`HUNGRY`] task must show.
fn assert_hungry(dir: &TestDir) {
    let measures = measures(dir);
    let names: Vec<&String> = measures.keys().collect();
    assert_eq!(
        names,
        [
            "cpu_seconds",
            "io_read_bytes",
            "io_write_bytes",
            "peak_rss_bytes",
            "wall_seconds"
        ],
        "no GPU here: no GPU figures"
    );
    let least = |measure: &str| {
        let costs = stored_costs(&dir.join("daisy_run/c"), "t");
        assert_eq!(costs.len(), 4);
        (costs.values())
            .map(|c| match measure {
                "peak_rss_bytes" => c.peak_rss_bytes as f64,
                "io_write_bytes" => c.io_write_bytes as f64,
                _ => c.cpu_seconds as f64,
            })
            .fold(f64::INFINITY, f64::min)
    };
    assert!(least("peak_rss_bytes") >= 50.0 * MB, "{measures:?}");
    assert!(least("io_write_bytes") >= MB, "{measures:?}");
    assert!(least("cpu_seconds") > 0.0, "{measures:?}");
    assert!(measures["peak_rss_bytes"]["p95"].as_f64().unwrap() >= 50.0 * MB);
    let text = run_ok(&mut dir.driver(&["status", "daisy_run/c"]));
    assert!(
        text.contains("what blocks of task \"t\" cost (4 measured)"),
        "{text}"
    );
    assert!(
        text.contains("peak_rss_bytes") && text.contains("slowest blocks: "),
        "{text}"
    );
    assert!(!text.contains("gpu"), "{text}");
}

#[test]
fn a_block_commands_memory_cpu_and_bytes_written_reach_status() {
    for serial in [false, true] {
        let dir = TestDir::new();
        dir.write("hungry.py", HUNGRY);
        dir.write(
            "p.toml",
            &pipeline("resource_tracking = true", &block_command()),
        );
        let args: &[&str] = match serial {
            true => &["run", "--serial", "p.toml"],
            false => &["run", "p.toml"],
        };
        run_ok(&mut dir.driver(args));
        assert_hungry(&dir);
    }
}

#[test]
fn a_worker_commands_memory_cpu_and_bytes_written_per_block_reach_status() {
    let dir = TestDir::new();
    dir.write("hungry_worker.py", HUNGRY_WORKER);
    let code = r#"command = ["python3", "hungry_worker.py"]"#;
    dir.write(
        "p.toml",
        &pipeline("", &format!("{code}\nresource_tracking = true")),
    );
    run_ok(&mut dir.driver(&["run", "p.toml"]));
    assert_hungry(&dir);
}

#[test]
fn a_resumed_run_keeps_the_costs_of_the_blocks_done_before() {
    let dir = TestDir::new();
    dir.write("hungry.py", HUNGRY);
    // Blocks 2 and 3 fail while `broken` exists.
    let code = r#"block_command = ["sh", "-c", "(test {block_id} -lt 2 || test ! -e broken) && python3 hungry.py {block_id}"]
max_retries = 0"#;
    dir.write("p.toml", &pipeline("resource_tracking = true", code));
    dir.write("broken", "");
    run_fails(&mut dir.driver(&["run", "p.toml"]), 1);
    let first = stored_costs(&dir.join("daisy_run/c"), "t");
    assert_eq!(first.keys().copied().collect::<Vec<_>>(), [0, 1]);
    std::fs::remove_file(dir.join("broken")).unwrap();
    run_ok(&mut dir.driver(&["run", "p.toml"]));
    let second = stored_costs(&dir.join("daisy_run/c"), "t");
    assert_eq!(second.len(), 4);
    assert_eq!(second[&0], first[&0], "not run again, its cost kept");
    assert_eq!(second[&1], first[&1]);
    assert_hungry(&dir);
}

#[test]
fn costs_reach_the_report_as_distributions_and_a_picture_of_run_times() {
    let dir = TestDir::new();
    dir.write("hungry.py", HUNGRY);
    dir.write(
        "p.toml",
        &pipeline("resource_tracking = true", &block_command()),
    );
    run_ok(&mut dir.driver(&["run", "p.toml"]));
    run_ok(&mut dir.driver(&["report", "daisy_run/c", "--format", "json", "-o", "r.json"]));
    let report: Value = serde_json::from_str(&dir.read("r.json")).unwrap();
    let task = &report["tasks"][0];
    let distributions = task["cost_distributions"].as_array().unwrap();
    let rss = distributions
        .iter()
        .find(|d| d["measure"] == "peak_rss_bytes")
        .unwrap();
    let counted: u64 = rss["counts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(counted, 4);
    assert_eq!(task["costs"]["measured"], 4);
    run_ok(&mut dir.driver(&["report", "daisy_run/c"]));
    let html = dir.read("daisy_run/c/report.html");
    assert!(html.contains("What blocks cost"));
    assert!(
        html.contains("t, run time per block: 4 blocks"),
        "the picture"
    );
    assert!(
        html.contains("t: peak_rss_bytes"),
        "a histogram per measure"
    );
}

#[test]
fn without_resource_tracking_no_cost_is_stored_or_shown() {
    let dir = TestDir::new();
    dir.write("hungry.py", HUNGRY);
    dir.write("p.toml", &pipeline("", &block_command()));
    let plan = run_ok(&mut dir.driver(&["plan", "--json", "p.toml"]));
    assert!(plan.contains("\"resource_tracking\": false"), "{plan}");
    run_ok(&mut dir.driver(&["run", "p.toml"]));
    assert!(!dir.join("daisy_run/c/done/t/wall_seconds").exists());
    let status = run_ok(&mut dir.driver(&["status", "--json", "daisy_run/c"]));
    let status: Value = serde_json::from_str(&status).unwrap();
    assert!(status["tasks"][0].get("costs").is_none(), "{status}");
    let text = run_ok(&mut dir.driver(&["status", "daisy_run/c"]));
    assert!(!text.contains("cost"), "{text}");
}

/// A stand-in for `nvidia-smi` answering the two queries the worker makes
/// in their documented CSV format: one GPU at 60 %, and 2048 MiB held by
/// each process whose command line names `gpu-block`.
const FAKE_NVIDIA_SMI: &str = r#"#!/bin/sh
case "$1" in
--query-compute-apps=*)
    for pid in $(pgrep -f gpu-block); do echo "$pid, GPU-0f1e2d3c-fake, 2048"; done ;;
--query-gpu=*)
    echo "GPU-0f1e2d3c-fake, 60" ;;
*) exit 2 ;;
esac
"#;

#[test]
fn gpu_figures_come_from_nvidia_smi_where_it_finds_a_gpu() {
    let dir = TestDir::new();
    std::fs::create_dir(dir.join("bin")).unwrap();
    let fake = dir.write("bin/nvidia-smi", FAKE_NVIDIA_SMI);
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Each block lasts long enough for samples (one a second) to see it.
    let code = r#"block_command = ["sh", "-c", "sleep 2.5 # gpu-block"]"#;
    dir.write("p.toml", &pipeline("resource_tracking = true", code));
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    run_ok(dir.driver(&["run", "p.toml"]).env("PATH", path));
    let measures = measures(&dir);
    assert_eq!(measures["gpu_util_pct"]["median"], 60.0, "{measures:?}");
    assert_eq!(measures["gpu_mem_bytes"]["max"], 2048.0 * 1024.0 * 1024.0);
    let text = run_ok(&mut dir.driver(&["status", "daisy_run/c"]));
    assert!(
        text.contains("gpu_util_pct") && text.contains("60 %"),
        "{text}"
    );
}
