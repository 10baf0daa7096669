//! The driver's port under abuse: what a peer can make the driver hold in
//! memory or write to its logs is bounded, before the token is checked
//! and after, and the driver goes on serving real workers.

use crate::protocol::{connect, hello, receive, refusal, rejection, send};
use crate::util::*;
use daisy_core::context::WorkerContext;
use daisy_core::protocol::frame::encode;
use daisy_core::protocol::{BlockResult, FromDriver, Role, ToDriver};
use nix::sys::resource::{setrlimit, Resource};
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const BLOCKS: u64 = 20;

/// A task only hand-started workers serve, so the driver waits for the
/// test's worker whatever happens before.
const PIPELINE: &str = r#"name = "p"
[[task]]
id = "t"
total_roi = { offset = [0], shape = [20] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
max_workers = 0
block_command = ["true"]
"#;

/// A generous bound on the driver's peak resident memory: it needs about
/// 20 MB, and each of the floods below took it to hundreds before.
const MAX_PEAK_RSS_KIB: u64 = 100 * 1024;

/// The virtual-memory limit the driver runs under, as on many login
/// nodes: about twice what it reserves at rest (threads, allocator
/// arenas), so 45 frames of 16 MiB reserved up front would not fit.
const ADDRESS_SPACE_KIB: u64 = 768 * 1024;

/// The driver serving [`PIPELINE`] under [`ADDRESS_SPACE_KIB`], its
/// stderr in `driver.log`, with RUST_LOG unset (the default verbosity).
fn start_driver(dir: &TestDir) -> (ChildGuard, WorkerContext) {
    start_driver_with(dir, dir.driver(&["run", "p.toml"]))
}

fn start_driver_with(dir: &TestDir, mut command: Command) -> (ChildGuard, WorkerContext) {
    dir.write("p.toml", PIPELINE);
    command.env_remove("RUST_LOG");
    let limit = ADDRESS_SPACE_KIB * 1024;
    let limit_address_space =
        move || setrlimit(Resource::RLIMIT_AS, limit, limit).map_err(std::io::Error::from);
    // SAFETY: setrlimit is a plain system call, safe between fork and exec.
    unsafe { command.pre_exec(limit_address_space) };
    let driver = ChildGuard::spawn_logged(&mut command, &dir.join("driver.log"));
    let context_file = dir.join("daisy_run/p/context.json");
    wait_until("the driver listens", || context_file.exists());
    let context = WorkerContext::from_json(&dir.read("daisy_run/p/context.json")).unwrap();
    (driver, context)
}

/// The peak resident memory of process `pid`, from /proc.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("a VmHWM line");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Checks the driver is small and alive, then lets a real worker run the
/// whole task (see [`assert_serving`]).
fn assert_small_and_serving(dir: &TestDir, driver: ChildGuard) {
    let peak = peak_rss_kib(driver.0.id());
    assert!(
        peak < MAX_PEAK_RSS_KIB,
        "the driver's peak resident memory is {peak} KiB\n{}",
        dir.read("driver.log")
    );
    assert_serving(dir, driver);
}

/// Lets a real worker run the whole task: the driver must exit 0 with
/// every block done once.
fn assert_serving(dir: &TestDir, driver: ChildGuard) {
    let context_file = dir.join("daisy_run/p/context.json");
    let args = [
        "--context-file",
        context_file.to_str().unwrap(),
        "--task",
        "t",
    ];
    let worker = ChildGuard::spawn_logged(&mut dir.worker(&args), &dir.join("worker.log"));
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}\n{}", dir.read("driver.log"));
    assert!(
        worker.wait_for_exit().success(),
        "{}",
        dir.read("worker.log")
    );
    assert_each_block_done_once(&dir.join("daisy_run/p"), "t", BLOCKS);
}

/// One MiB of a frame's payload, written as often as needed.
static PAYLOAD: [u8; 1 << 20] = [0x80; 1 << 20];

/// `count` connections that each declare a frame of 16 MiB and send
/// `mib` MiB of it (as far as the driver reads), all at once; they stay
/// open until the returned sockets are dropped.
fn declare_huge_frames(context: &WorkerContext, count: usize, mib: usize) -> Vec<TcpStream> {
    std::thread::scope(|scope| {
        let senders: Vec<_> = (0..count)
            .map(|_| {
                scope.spawn(|| {
                    let mut stream = connect(context);
                    let _ = stream.write_all(&(16u32 << 20).to_be_bytes());
                    for _ in 0..mib {
                        if stream.write_all(&PAYLOAD).is_err() {
                            break; // refused and closed: as it should be
                        }
                    }
                    stream
                })
            })
            .collect();
        senders.into_iter().map(|s| s.join().unwrap()).collect()
    })
}

#[test]
fn floods_before_the_hello_leave_the_driver_small_and_serving() {
    let dir = TestDir::new();
    let (driver, context) = start_driver(&dir);

    let lengths_only = declare_huge_frames(&context, 100, 0);
    let half_sent = declare_huge_frames(&context, 60, 8);
    for _ in 0..60 {
        let mut stream = connect(&context);
        send(&mut stream, &hello("not-the-token", "t"));
        assert!(rejection(&mut stream).contains("wrong token"));
    }
    drop((lengths_only, half_sent));

    // Connections that say nothing hold their place until the hello
    // timeout; past the cap, the next one is turned away at once.
    let silent: Vec<TcpStream> = (0..300).map(|_| connect(&context)).collect();
    let mut late = connect(&context);
    send(&mut late, &hello(&context.token, "t"));
    let reason = rejection(&mut late);
    assert!(reason.starts_with("too many connections"), "{reason}");
    drop(silent);
    wait_until("the silent connections' places are free", || {
        let mut probe = connect(&context);
        send(&mut probe, &hello("not-the-token", "t"));
        rejection(&mut probe).contains("wrong token")
    });

    assert_small_and_serving(&dir, driver);
    assert_event_log_small(&dir.join("daisy_run/p"));
}

#[test]
fn a_worker_turned_away_because_too_many_have_not_said_hello_tries_again() {
    let dir = TestDir::new();
    let (driver, context) = start_driver(&dir);
    // More connections that say nothing than the driver lets wait.
    let silent: Vec<TcpStream> = (0..300).map(|_| connect(&context)).collect();
    let mut probe = connect(&context);
    send(&mut probe, &hello(&context.token, "t"));
    assert!(rejection(&mut probe).starts_with("too many connections"));

    let context_file = dir.join("daisy_run/p/context.json");
    let args = [
        "--context-file",
        context_file.to_str().unwrap(),
        "--task",
        "t",
    ];
    let worker = ChildGuard::spawn_logged(&mut dir.worker(&args), &dir.join("worker.log"));
    wait_until("the worker is turned away", || {
        dir.read("worker.log").contains("the driver is busy")
    });
    drop(silent);

    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}\n{}", dir.read("driver.log"));
    let log = dir.read("worker.log");
    assert!(worker.wait_for_exit().success(), "{log}");
    assert!(
        log.contains("too many connections have not said hello yet"),
        "{log}"
    );
    assert_each_block_done_once(&dir.join("daisy_run/p"), "t", BLOCKS);
}

/// Sends `GetSnapshot`s without reading an answer until the driver closes
/// the connection; how many it took.
fn ask_for_snapshots_without_reading(stream: &mut TcpStream) -> usize {
    let request = encode(&ToDriver::GetSnapshot).unwrap();
    let batch: Vec<u8> = request.repeat(1000);
    stream
        .set_write_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    // Unbounded, 10 million snapshots would take the driver to gigabytes.
    for batches in 0..10_000 {
        if stream.write_all(&batch).is_err() {
            return batches * 1000;
        }
    }
    panic!("the driver kept reading requests whose answers were never read");
}

#[test]
fn an_observer_that_never_reads_is_disconnected_and_the_driver_stays_small() {
    let dir = TestDir::new();
    let (driver, context) = start_driver(&dir);
    let mut observer = connect(&context);
    let ToDriver::Hello(mut observer_hello) = hello(&context.token, "t") else {
        unreachable!()
    };
    observer_hello.role = Role::Observer;
    send(&mut observer, &ToDriver::Hello(observer_hello));
    assert!(matches!(receive(&mut observer), FromDriver::Welcome(_)));
    let asked = ask_for_snapshots_without_reading(&mut observer);
    assert!(asked > 0);
    let log = dir.read("driver.log");
    assert_small_and_serving(&dir, driver);
    assert!(log.contains("does not read"), "{log}");
}

/// A hello as another implementation may send it: optional fields nil.
fn hello_with_nils(token: &str) -> Vec<u8> {
    let value = serde_json::json!({
        "type": "hello", "protocol": 1, "token": token, "role": "worker",
        "task_id": "t", "worker_id": null, "job_id": null, "host": null, "pid": null
    });
    let payload = rmp_serde::to_vec_named(&value).unwrap();
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend(payload);
    frame
}

fn succeeded(block_id: u64) -> BlockResult {
    BlockResult {
        block_id,
        ok: true,
        skipped: false,
        error: None,
        seconds: None,
        cost: None,
    }
}

fn failed(block_id: u64, error: String) -> BlockResult {
    BlockResult {
        block_id,
        ok: false,
        skipped: false,
        error: Some(error),
        seconds: None,
        cost: None,
    }
}

#[test]
fn what_a_worker_sends_is_logged_in_bounded_size() {
    let dir = TestDir::new();
    // Handling a frame this large takes a debug build seconds, during
    // which the driver hears nothing: allow for it.
    let mut command = dir.driver(&["run", "p.toml"]);
    command.env("DAISY_HEARTBEAT_INTERVAL", "10s");
    let (driver, context) = start_driver_with(&dir, command);
    // About 11 and 6 MB of blocks this worker does not hold, encoded
    // before it connects: it must not fall silent for longer than the
    // driver waits for a sign of life.
    let results = (1000..600_000).map(succeeded).collect();
    let release = encode(&ToDriver::ReleaseBlocks { results }).unwrap();
    let block_ids = (1000..1_000_000).collect();
    let reason = "x".repeat(1 << 20);
    let give_back = encode(&ToDriver::ReturnBlocks { block_ids, reason }).unwrap();

    let mut worker = connect(&context);
    worker.write_all(&hello_with_nils(&context.token)).unwrap();
    assert!(matches!(receive(&mut worker), FromDriver::Welcome(_)));
    worker.write_all(&release).unwrap();
    assert_eq!(
        refusal(&mut worker),
        "blocks 1000, 1001, 1002, 1003, 1004 and 598995 more are not held by this worker \
         (released twice, or never handed out)"
    );
    worker.write_all(&give_back).unwrap();
    assert!(refusal(&mut worker).contains("and 998995 more are not held"));

    // A real failure with a megabyte of error text is recorded, cut.
    send(&mut worker, &ToDriver::AcquireBlocks { max: 1 });
    let FromDriver::Blocks { blocks } = receive(&mut worker) else {
        panic!("expected blocks");
    };
    let error = "y".repeat(1 << 20);
    let results = vec![failed(blocks[0].block_id, error)];
    send(&mut worker, &ToDriver::ReleaseBlocks { results });
    drop(worker);

    // Frames of up to 16 MiB are allowed after the welcome (and decoding
    // one costs more): no bound on memory here, only on the log.
    assert_serving(&dir, driver);
    let run_dir = dir.join("daisy_run/p");
    assert_event_log_small(&run_dir);
    let events = events(&run_dir);
    let failure = events
        .iter()
        .find(|e| e["event"] == "block_failed")
        .expect("the failure is recorded");
    let recorded = failure["error"].as_str().unwrap();
    assert!(recorded.starts_with("yyyy"), "{recorded:.20}");
    assert!(
        recorded.ends_with("more bytes cut)"),
        "{}",
        &recorded[8000..]
    );
}

fn assert_event_log_small(run_dir: &Path) {
    let size = std::fs::metadata(run_dir.join("events.jsonl"))
        .unwrap()
        .len();
    assert!(size < 100_000, "events.jsonl has {size} bytes");
}

#[test]
fn a_refused_connection_is_a_warning_on_the_drivers_stderr_by_default() {
    let dir = TestDir::new();
    let (driver, context) = start_driver(&dir);
    let mut stream = connect(&context);
    send(&mut stream, &hello("not-the-token", "t"));
    assert!(rejection(&mut stream).contains("wrong token"));
    wait_until("the refusal is logged", || {
        dir.read("driver.log").contains("refused a connection")
    });
    let log = dir.read("driver.log");
    let line = log
        .lines()
        .find(|l| l.contains("refused a connection"))
        .unwrap();
    assert!(
        line.contains("WARN") && line.contains("wrong token"),
        "{line}"
    );
    drop(driver);
}
