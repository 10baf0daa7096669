//! Chaos on one machine (issue 5): workers killed at random during a long
//! run, a worker cut off from its driver by a silent network partition,
//! and the driver itself killed mid-run. Whatever happens, every block
//! must end done exactly once, the counters must add up, and no process
//! of the run may be left behind.

use crate::proxy::Proxy;
use crate::util::*;
use daisy_core::context::WorkerContext;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// xorshift64*: enough randomness to pick victims, reproducible from the
/// printed seed.
struct Rng(u64);

impl Rng {
    /// Seeded from `DAISY_CHAOS_SEED` if set (to replay a failure), else
    /// from the clock; prints the seed either way.
    fn from_env_or_clock() -> Self {
        let seed = std::env::var("DAISY_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("chaos seed: {seed} (replay with DAISY_CHAOS_SEED={seed})");
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `range`.
    fn between(&mut self, range: std::ops::Range<u64>) -> u64 {
        range.start + self.next() % (range.end - range.start)
    }
}

/// The `daisy-worker` processes running in `dir`.
fn workers_in(dir: &Path) -> Vec<i32> {
    processes_in(dir)
        .into_iter()
        .filter(|(_, cmdline)| {
            cmdline
                .split_whitespace()
                .next()
                .is_some_and(|program| program.ends_with("daisy-worker"))
        })
        .map(|(pid, _)| pid)
        .collect()
}

/// A thread that SIGKILLs a random worker of the run in `dir` every 0.3
/// to 1 s, `kills` times or until told to stop; it returns the victims.
struct Killer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<i32>>,
}

impl Killer {
    fn start(dir: PathBuf, kills: usize, mut rng: Rng) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let mut victims = Vec::new();
            while victims.len() < kills && !stopped.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(rng.between(300..1000)));
                let workers = workers_in(&dir);
                if workers.is_empty() {
                    continue;
                }
                let victim = workers[rng.between(0..workers.len() as u64) as usize];
                if kill(Pid::from_raw(victim), Signal::SIGKILL).is_ok() {
                    victims.push(victim);
                }
            }
            victims
        });
        Self { stop, thread }
    }

    /// Stops killing; the workers killed.
    fn stop(self) -> Vec<i32> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("the killer thread")
    }
}

#[test]
fn chaos_workers_killed_at_random_lose_no_block_and_count_none_twice() {
    const BLOCKS: u64 = 20_000;
    const KILLS: usize = 15;
    let dir = TestDir::new();
    // Batches of 8: each kill loses up to 8 blocks in flight, which must
    // come back to the queue uncounted (and run again: ran.txt says so).
    let extra = "max_workers = 4\nbatch_size = 8\nmax_worker_restarts = 1000";
    let command = "echo {block_id} >> ran.txt";
    let pipeline = format!(
        "name = \"chaos\"\n{}",
        task("t", BLOCKS as u32, command, extra)
    );
    dir.write("chaos.toml", &pipeline);
    let run_dir = dir.join("daisy_run/chaos");
    let started = Instant::now();
    let driver = ChildGuard::spawn_logged(
        &mut dir.driver(&["run", "chaos.toml"]),
        &dir.join("driver.log"),
    );
    let killer = Killer::start(dir.path().to_path_buf(), KILLS, Rng::from_env_or_clock());
    let status = driver.wait_for_exit();
    let victims = killer.stop();
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{BLOCKS} blocks in {seconds:.1} s, workers killed: {victims:?}");
    assert!(status.success(), "{status:?}\n{}", dir.read("driver.log"));
    assert!(
        victims.len() >= KILLS / 2,
        "the run should outlast most of the kills: {victims:?}"
    );
    assert_each_block_done_once(&run_dir, "t", BLOCKS);
    assert_completed_without_failures(&run_dir, "t", BLOCKS);
    let events = events(&run_dir);
    let lost = events
        .iter()
        .filter(|e| e["event"] == "worker_gone" && e["clean"] == false)
        .count();
    let runs = dir.read("ran.txt").lines().count();
    eprintln!("{lost} workers declared lost, {runs} block runs");
    assert!(
        runs as u64 > BLOCKS,
        "some blocks in flight were lost with their worker and ran again"
    );
    assert!(
        (1..=victims.len()).contains(&lost),
        "{lost} workers lost for {} killed",
        victims.len()
    );
    assert_no_process_left_in(dir.path());
}

/// The driver's context file with its addresses replaced by `address`.
fn context_via(dir: &TestDir, run_dir: &Path, address: &str) -> PathBuf {
    let text = std::fs::read_to_string(run_dir.join("context.json")).unwrap();
    let context = WorkerContext {
        addresses: vec![address.to_string()],
        ..WorkerContext::from_json(&text).unwrap()
    };
    dir.write("proxied-context.json", &context.to_json())
}

/// The driver's loopback address from its context file.
fn loopback_address(run_dir: &Path) -> String {
    let text = std::fs::read_to_string(run_dir.join("context.json")).unwrap();
    let context = WorkerContext::from_json(&text).unwrap();
    let port = context.addresses[0].rsplit(':').next().unwrap().to_string();
    format!("127.0.0.1:{port}")
}

#[test]
fn chaos_a_worker_cut_off_from_its_driver_exits_and_its_block_runs_elsewhere() {
    let dir = TestDir::new();
    // The first block to run sleeps (its pid in first.pid); later ones
    // finish at once.
    let command = "if [ ! -e first.pid ]; then echo $$ > first.pid; exec sleep 30; fi";
    let pipeline = format!(
        "name = \"cut\"\n{}",
        task("t", 4, command, "max_workers = 0")
    );
    dir.write("cut.toml", &pipeline);
    let run_dir = dir.join("daisy_run/cut");
    let heartbeat = ["--heartbeat-interval", "300ms", "--heartbeat-misses", "2"];
    let mut driver = dir.driver(&["run", "cut.toml"]);
    let driver = ChildGuard::spawn(driver.args(heartbeat));
    wait_until("the driver listens", || {
        run_dir.join("context.json").exists()
    });
    let proxy = Proxy::start(&loopback_address(&run_dir));
    let proxied = context_via(&dir, &run_dir, proxy.address());
    let args = ["--context-file", proxied.to_str().unwrap(), "--task", "t"];
    let log = dir.join("cut-off-worker.log");
    let cut_off = ChildGuard::spawn_logged(&mut dir.worker(&args), &log);
    wait_until("the worker runs a block", || {
        dir.read("first.pid").trim().parse::<i32>().is_ok()
    });
    let user_process: i32 = dir.read("first.pid").trim().parse().unwrap();
    assert_eq!(proxy.accepted(), 1, "the worker came through the proxy");

    proxy.cut();
    let cut_at = Instant::now();
    // Silent for 2 × 300 ms, then its user process gets SIGTERM: a few
    // seconds at most; 20 s leaves room for a loaded machine.
    let status = cut_off.wait_for_exit_within(Duration::from_secs(20));
    eprintln!(
        "the cut-off worker exited {:.1} s after the cut",
        cut_at.elapsed().as_secs_f64()
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(said.contains("lost the driver"), "{said}");
    assert!(!process_alive(user_process), "its block's process is dead");
    let first_gone = || {
        events(&run_dir)
            .into_iter()
            .find(|e| e["event"] == "worker_gone")
    };
    wait_until("the driver declares the worker lost", || {
        first_gone().is_some()
    });
    let gone = first_gone().unwrap();
    assert_eq!(gone["clean"], false, "{gone}");
    assert!(
        gone["why"].as_str().unwrap().contains("no message"),
        "{gone}"
    );
    proxy.close();

    let context = run_dir.join("context.json");
    let args = ["--context-file", context.to_str().unwrap(), "--task", "t"];
    let _rescuer = ChildGuard::spawn(&mut dir.worker(&args));
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}");
    assert_each_block_done_once(&run_dir, "t", 4);
    assert_completed_without_failures(&run_dir, "t", 4);
    assert_no_process_left_in(dir.path());
}

#[test]
fn chaos_a_killed_driver_leaves_no_process_and_a_rerun_resumes_counting_each_block_once() {
    const BLOCKS: u64 = 60;
    let dir = TestDir::new();
    // `sleep` is a child of the block's shell: a grandchild of the worker.
    let pipeline = format!(
        "name = \"killed\"\n{}",
        task("t", BLOCKS as u32, "sleep 0.3", "max_workers = 3")
    );
    dir.write("killed.toml", &pipeline);
    let run_dir = dir.join("daisy_run/killed");
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "killed.toml"]));
    wait_until("the driver listens", || {
        run_dir.join("context.json").exists()
    });
    wait_until("10 blocks are done", || {
        marked_done(&run_dir, "t").0.len() >= 10
    });
    let running: BTreeSet<i32> = processes_in(dir.path())
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    assert!(running.len() > 1, "workers are running: {running:?}");
    drop(driver); // SIGKILL: the driver's node is gone
    let killed_at = Instant::now();
    // Workers notice after 2 × 500 ms of silence and give their user
    // processes 5 s after SIGTERM: 30 s is generous.
    wait_within(
        "every worker and user process exits",
        Duration::from_secs(30),
        || processes_in(dir.path()).is_empty(),
    );
    eprintln!(
        "the run's {} processes were gone {:.1} s after the driver was killed",
        running.len(),
        killed_at.elapsed().as_secs_f64()
    );
    let (done_before, _) = marked_done(&run_dir, "t");
    assert!((done_before.len() as u64) < BLOCKS, "killed mid-run");

    let out = run_ok(&mut dir.driver(&["run", "killed.toml"]));
    let rerun: BTreeSet<u64> = event_blocks(&last_run_events(&run_dir), "block_done", "t")
        .into_iter()
        .collect();
    assert!(
        rerun.is_disjoint(&done_before),
        "blocks marked done before ran again: {:?}",
        rerun.intersection(&done_before).collect::<Vec<_>>()
    );
    assert_eq!(
        rerun.len() as u64,
        BLOCKS - done_before.len() as u64,
        "the rerun ran the rest: {out}"
    );
    assert_each_block_done_once_across_kills(&run_dir, "t", BLOCKS);
    assert_completed_without_failures(&run_dir, "t", BLOCKS);
    assert_no_process_left_in(dir.path());
}
