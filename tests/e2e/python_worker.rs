//! The protocol spec is enough to write a worker in another language:
//! `examples/python-worker/daisy_worker.py`, written from docs/protocol.md
//! in plain Python, serves a real run, is turned away with a wrong token,
//! and encodes and decodes frames byte for byte as the driver does.

use crate::util::*;
use daisy_core::context::WorkerContext;
use daisy_core::protocol::frame::encode;
use daisy_core::protocol::messages::{InFlightBlock, RunSnapshot, TaskSnapshot, WorkerCounts};
use daisy_core::protocol::{
    BlockResult, CodeKind, FromDriver, Hello, Role, TaskCode, ToDriver, Welcome, WireBlock, WireRoi,
};
use daisy_core::TaskCounters;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const PIPELINE: &str = r#"name = "py"
[[task]]
id = "count"
total_roi = { offset = [0], shape = [20] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
max_workers = 0
block_command = ["sh", "-c", "echo {block_id} >> ran.txt"]
"#;

fn python_worker() -> PathBuf {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/python-worker/daisy_worker.py");
    assert!(path.exists(), "{} is missing", path.display());
    path
}

/// `python3 daisy_worker.py ARGS` in `dir`, its output going to `log`.
fn python(dir: &TestDir, args: &[&str], log: &str) -> Command {
    let log = File::create(dir.join(log)).unwrap();
    let mut command = Command::new("python3");
    command
        .arg(python_worker())
        .args(args)
        .current_dir(dir.path())
        .env_remove("DAISY_CONTEXT")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    command
}

/// Starts the driver on `PIPELINE` (output in driver.log) and waits until
/// it has written its context; returns it and the context file's path.
fn start_driver(dir: &TestDir) -> (ChildGuard, PathBuf) {
    dir.write("p.toml", PIPELINE);
    let mut driver = dir.driver(&["run", "p.toml"]);
    let log = File::create(dir.join("driver.log")).unwrap();
    driver
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    let driver = ChildGuard(driver.spawn().expect("starting daisy-driver"));
    let context = dir.join("daisy_run/py/context.json");
    wait_until("the driver wrote its context", || {
        std::fs::read_to_string(&context).is_ok_and(|text| text.ends_with('}'))
    });
    (driver, context)
}

fn logs(dir: &TestDir) -> String {
    format!(
        "--- driver.log\n{}\n--- worker.log\n{}",
        dir.read("driver.log"),
        dir.read("worker.log")
    )
}

#[test]
fn a_worker_written_in_python_from_the_spec_serves_a_run() {
    let dir = TestDir::new();
    let (driver, context) = start_driver(&dir);
    let context = context.to_str().unwrap().to_string();
    let args = ["--context-file", &context, "--task", "count"];
    let worker = ChildGuard(python(&dir, &args, "worker.log").spawn().unwrap());

    let status = driver.wait_for_exit();
    assert!(status.success(), "the driver: {status:?}\n{}", logs(&dir));
    let status = worker.wait_for_exit();
    assert!(status.success(), "the worker: {status:?}\n{}", logs(&dir));

    let mut runs: HashMap<u64, usize> = HashMap::new();
    for line in dir.read("ran.txt").lines() {
        *runs.entry(line.trim().parse().unwrap()).or_default() += 1;
    }
    assert_eq!(runs.len(), 20, "every block ran: {runs:?}\n{}", logs(&dir));
    assert!(runs.values().all(|&n| n == 1), "exactly once: {runs:?}");

    let events = events(&dir.join("daisy_run/py"));
    let connected: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "worker_connected")
        .collect();
    assert_eq!(connected.len(), 1, "{events:?}");
    assert_eq!(connected[0]["task"], "count");
    assert_eq!(connected[0]["by_hand"], true);
    let mut done = event_blocks(&events, "block_done", "count");
    done.sort_unstable();
    assert_eq!(
        done,
        (0..20).collect::<Vec<u64>>(),
        "20 blocks counted once"
    );
    let gone: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "worker_gone")
        .collect();
    assert_eq!(gone.len(), 1, "{events:?}");
    assert_eq!(gone[0]["clean"], true, "the worker left cleanly: {gone:?}");
}

#[test]
fn a_python_worker_with_a_wrong_token_is_rejected_and_exits_3() {
    let dir = TestDir::new();
    let (_driver, context) = start_driver(&dir);
    let context = WorkerContext::from_json(&std::fs::read_to_string(&context).unwrap()).unwrap();
    let forged = WorkerContext {
        token: "0".repeat(64),
        ..context
    };
    dir.write("forged.json", &forged.to_json());

    let args = ["--context-file", "forged.json", "--task", "count"];
    let status = python(&dir, &args, "worker.log").status().unwrap();
    let output = dir.read("worker.log");
    assert_eq!(status.code(), Some(3), "{output}");
    assert!(
        output.contains("rejected by the driver: wrong token"),
        "{output}"
    );

    let run_dir = dir.join("daisy_run/py");
    wait_until("the refusal is recorded", || {
        events(&run_dir).iter().any(|e| {
            e["event"] == "connection_refused"
                && e["reason"].as_str().unwrap_or("").contains("wrong token")
        })
    });
    assert!(
        !events(&run_dir)
            .iter()
            .any(|e| e["event"] == "worker_connected"),
        "nobody joined"
    );
}

/// Every message of the protocol, as the driver's encoder writes it, and
/// the same message as JSON with its keys in wire order.
fn messages() -> Vec<(Vec<u8>, &'static str)> {
    let roi = |offset: &[i64], shape: &[i64]| WireRoi {
        offset: offset.to_vec(),
        shape: shape.to_vec(),
    };
    let hello = ToDriver::Hello(Hello {
        protocol: 1,
        token: "s3cret".into(),
        role: Role::Worker,
        task_id: Some("count".into()),
        worker_id: Some(70_000),
        job_id: None,
        host: "node7".into(),
        pid: 4242,
    });
    let release = ToDriver::ReleaseBlocks {
        results: vec![
            BlockResult {
                block_id: 300,
                ok: false,
                skipped: false,
                error: Some("no luck".into()),
                seconds: None,
                cost: None,
            },
            BlockResult {
                block_id: 1 << 40,
                ok: true,
                skipped: false,
                error: None,
                seconds: None,
                cost: None,
            },
        ],
    };
    let welcome = FromDriver::Welcome(Welcome {
        worker_id: 3,
        heartbeat_interval_s: 8.0,
        heartbeat_misses: 2,
        longest_block_s: None,
        code: Some(TaskCode {
            kind: CodeKind::BlockCommand,
            argv: vec!["sh".into(), "-c".into(), "echo {block_id} ✓".into()],
            env: BTreeMap::from([("OMP_NUM_THREADS".into(), "4".into())]),
            timeout_s: Some(1.5),
            batch_size: 1,
            prefetch: 0,
            function: None,
            resource_tracking: false,
        }),
    });
    let blocks = FromDriver::Blocks {
        blocks: vec![WireBlock {
            task_id: "count".into(),
            block_id: 17,
            read_roi: roi(&[-40_000, -2, 300], &[96, 96, 96]),
            write_roi: roi(&[-39_984, 14, 316], &[64, 64, 64]),
        }],
    };
    let snapshot = FromDriver::Snapshot(RunSnapshot {
        pipeline: "py".into(),
        tasks: vec![TaskSnapshot {
            task_id: "count".into(),
            counters: TaskCounters {
                total: 20,
                ready: 5,
                processing: 1,
                completed: 14,
                skipped: 2,
                failed: 0,
                orphaned: 0,
                left: 0,
            },
            workers_connected: 1,
            workers: WorkerCounts {
                submitted: 0,
                connected: 1,
                idle: 0,
                lost: 2,
                failed_starts: 0,
            },
            in_flight: vec![InFlightBlock {
                block_id: 9,
                worker_id: 4,
                seconds: 2.5,
            }],
            blocks_per_s: 3.5,
            eta_s: Some(2.0),
        }],
        seconds: 12.5,
    });
    vec![
        (
            frame(&hello),
            r#"{"type": "hello", "protocol": 1, "token": "s3cret", "role": "worker", "task_id": "count", "worker_id": 70000, "job_id": null, "host": "node7", "pid": 4242}"#,
        ),
        (
            frame(&ToDriver::AcquireBlocks { max: 1 }),
            r#"{"type": "acquire_blocks", "max": 1}"#,
        ),
        (
            frame(&release),
            r#"{"type": "release_blocks", "results": [{"block_id": 300, "ok": false, "error": "no luck"}, {"block_id": 1099511627776, "ok": true}]}"#,
        ),
        (frame(&ToDriver::Heartbeat), r#"{"type": "heartbeat"}"#),
        (
            frame(&ToDriver::Draining {
                reason: "received SIGTERM".into(),
                out_of_time: false,
                by_choice: false,
            }),
            r#"{"type": "draining", "reason": "received SIGTERM"}"#,
        ),
        (frame(&ToDriver::GetSnapshot), r#"{"type": "get_snapshot"}"#),
        (
            frame(&welcome),
            r#"{"type": "welcome", "worker_id": 3, "heartbeat_interval_s": 8.0, "heartbeat_misses": 2, "code": {"kind": "block_command", "argv": ["sh", "-c", "echo {block_id} ✓"], "env": {"OMP_NUM_THREADS": "4"}, "timeout_s": 1.5, "batch_size": 1, "prefetch": 0}}"#,
        ),
        (
            frame(&FromDriver::Rejected {
                reason: "wrong token".into(),
                retry_later: false,
            }),
            r#"{"type": "rejected", "reason": "wrong token"}"#,
        ),
        (
            frame(&FromDriver::Rejected {
                reason: "busy".into(),
                retry_later: true,
            }),
            r#"{"type": "rejected", "reason": "busy", "retry_later": true}"#,
        ),
        (
            frame(&blocks),
            r#"{"type": "blocks", "blocks": [{"task_id": "count", "block_id": 17, "read_roi": {"offset": [-40000, -2, 300], "shape": [96, 96, 96]}, "write_roi": {"offset": [-39984, 14, 316], "shape": [64, 64, 64]}}]}"#,
        ),
        (
            frame(&FromDriver::Shutdown {
                reason: "the task is done".into(),
            }),
            r#"{"type": "shutdown", "reason": "the task is done"}"#,
        ),
        (
            frame(&FromDriver::Error {
                reason: "block 9 is not held".into(),
            }),
            r#"{"type": "error", "reason": "block 9 is not held"}"#,
        ),
        (
            frame(&snapshot),
            r#"{"type": "snapshot", "pipeline": "py", "tasks": [{"task_id": "count", "counters": {"total": 20, "ready": 5, "processing": 1, "completed": 14, "skipped": 2, "failed": 0, "orphaned": 0, "left": 0}, "workers_connected": 1, "workers": {"submitted": 0, "connected": 1, "idle": 0, "lost": 2, "failed_starts": 0}, "in_flight": [{"block_id": 9, "worker_id": 4, "seconds": 2.5}], "blocks_per_s": 3.5, "eta_s": 2.0}], "seconds": 12.5}"#,
        ),
    ]
}

fn frame(message: &impl serde::Serialize) -> Vec<u8> {
    encode(message).unwrap()
}

const ROUND_TRIP: &str = r#"
import json, struct, sys
sys.path.insert(0, sys.argv[1])
import daisy_worker
for line in sys.stdin:
    rust_hex, message = line.rstrip("\n").split("\t")
    payload = daisy_worker.pack(json.loads(message))
    print((struct.pack(">I", len(payload)) + payload).hex())
    print(json.dumps(daisy_worker.unpack(bytes.fromhex(rust_hex)[4:]), ensure_ascii=False))
"#;

#[test]
fn the_python_messagepack_matches_the_drivers_byte_for_byte() {
    let messages = messages();
    let hex = |bytes: &[u8]| -> String { bytes.iter().map(|b| format!("{b:02x}")).collect() };
    let input: String = messages
        .iter()
        .map(|(bytes, json)| format!("{}\t{json}\n", hex(bytes)))
        .collect();
    let directory = python_worker().parent().unwrap().to_path_buf();
    let mut child = Command::new("python3")
        .args(["-c", ROUND_TRIP])
        .arg(&directory)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2 * messages.len(), "{stdout}");
    for ((bytes, json), answer) in messages.iter().zip(lines.chunks(2)) {
        assert_eq!(
            answer[0],
            hex(bytes),
            "Python encodes {json} as the driver does"
        );
        let decoded: serde_json::Value = serde_json::from_str(answer[1]).unwrap();
        let expected: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(decoded, expected, "Python decodes the driver's {json}");
    }
}
