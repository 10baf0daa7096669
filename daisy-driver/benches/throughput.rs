//! End-to-end throughput: blocks per second through the real
//! `daisy-driver` binary with no-op workers over loopback, and the
//! driver's CPU time per block; daisy 2.0 measured in the same run.
//!
//! Each measurement starts `daisy-driver run` on a generated pipeline (one
//! 1-D task of N blocks, read = write shape 1, no read/write conflict so
//! every block is ready at once, `max_workers = 0` so the driver launches
//! nobody and its block command never runs), waits for
//! `<run-dir>/context.json`, connects W in-process workers (tokio tasks,
//! each a [`daisy_worker::Client`] looping acquire(batch) → release ok
//! until Shutdown; `--client light` for a lighter one that sends the
//! driver the same, see [`light_client`]) and times from the first acquire to the driver's exit.
//! The driver's CPU time is its `getrusage(RUSAGE_CHILDREN)` share (exact,
//! read after it is reaped) minus what it had spent before the first
//! acquire (`/proc/<pid>/stat`), so start-up is not counted per block;
//! the workers' is this process's own from the first acquire on. Runs
//! per row: `--runs`, the fastest counts. `DAISY_THROUGHPUT_DRIVER=path`
//! measures another driver binary (to compare builds).
//!
//! The baseline is `benches/daisy2_throughput.py` (`daisy.run_blockwise`
//! with a no-op block function and `max_workers = W`), run with the
//! interpreter named by `DAISY2_PYTHON`, at 10,000 blocks and each worker
//! count (`DAISY2_BLOCKS=10000,100000` for more sizes); without a usable
//! interpreter it is skipped with a loud line saying how to get it.
//! docs/benchmarks.md explains the set-up and records the figures.
//!
//! `--dashboard false,true` measures each row without and with `run
//! --dashboard`, a watcher reading the page's event stream (as an open
//! browser tab does) for the whole run, and prints the ratio.
//!
//! ```text
//! DAISY2_PYTHON=v/bin/python cargo bench -p daisy-driver --bench throughput \
//!     [-- --blocks 10000,100000 --workers 1,2,4,8,16 --batch 1 --runs 3 --client-threads 0 \
//!         --conflict false --client full --dashboard false]
//! ```

mod common;
mod light_client;

use clap::Parser as _;
use common::{driver_program, Driver};
use daisy_core::context::WorkerContext;
use nix::sys::resource::{getrusage, UsageWho};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// The Python interpreter with daisy 2.0.0 installed.
const PYTHON_ENV: &str = "DAISY2_PYTHON";
/// Block counts (comma separated) at which daisy 2.0 runs; default 10000.
const DAISY2_BLOCKS_ENV: &str = "DAISY2_BLOCKS";
const DAISY2_VERSION: &str = "2.0.0";
/// daisy's own figures, on its authors' machine, for reference only.
const PUBLISHED: &str = "published (daisy authors' machine): daisy 2.0 about 30,000-40,000 blocks/s, daisy 1.x about 5,000";

/// What to measure, from the command line.
#[derive(Debug, Clone, clap::Parser)]
struct Settings {
    #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000])]
    blocks: Vec<u64>,
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8, 16])]
    workers: Vec<u32>,
    /// Blocks asked for per acquire; each is a separate row.
    #[arg(long = "batch", value_delimiter = ',', default_values_t = [1])]
    batches: Vec<u32>,
    /// Runs per row; the fastest counts.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Threads of the workers' tokio runtime; 0 (the default) runs them
    /// all on this thread, so that workers and driver get a core each
    /// of a 2-core machine instead of fighting over both.
    #[arg(long, default_value_t = 0)]
    client_threads: usize,
    /// Blocks read one unit around what they write, with
    /// `read_write_conflict`: two conflict levels, so that many workers
    /// wait near the end of each (daisy 2.0 is then not measured).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    conflict: bool,
    /// The in-process workers: `full` ([`daisy_worker::Client`]) or
    /// `light` (one task and transport each, see [`light_client`]); the
    /// driver sees the same messages from either.
    #[arg(long, value_enum, default_value_t = ClientKind::Full)]
    client: ClientKind,
    /// Without (`false`) and with (`true`) the dashboard, watched; each a
    /// separate row, their runs taking turns.
    #[arg(long, value_delimiter = ',', default_values_t = [false], action = clap::ArgAction::Set)]
    dashboard: Vec<bool>,
}

/// Which in-process worker the bench runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ClientKind {
    Full,
    Light,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
struct Measurement {
    blocks: u64,
    workers: u32,
    batch: u32,
    seconds: f64,
    /// The driver's user + system CPU seconds after the first acquire.
    driver_cpu: f64,
    /// The same for this process (the workers), from the first acquire.
    workers_cpu: f64,
    /// With the dashboard: the snapshots its watcher received.
    dashboard: Option<u64>,
}

impl Measurement {
    fn blocks_per_second(&self) -> f64 {
        self.blocks as f64 / self.seconds
    }

    fn driver_us_per_block(&self) -> f64 {
        self.driver_cpu * 1e6 / self.blocks as f64
    }

    fn workers_us_per_block(&self) -> f64 {
        self.workers_cpu * 1e6 / self.blocks as f64
    }
}

/// One 1-D task of `blocks` blocks, independent unless `conflict`,
/// served only to workers started by hand; the block command is never run.
fn pipeline_toml(blocks: u64, conflict: bool) -> String {
    let (context, total) = match conflict {
        true => (1, blocks + 2),
        false => (0, blocks),
    };
    let read = 1 + 2 * context;
    format!(
        r#"name = "throughput"

[[task]]
id = "noop"
total_roi = {{ offset = [-{context}], shape = [{total}] }}
read_roi = {{ offset = [-{context}], shape = [{read}] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = {conflict}
max_workers = 0
block_command = ["true"]
"#
    )
}

/// User + system CPU seconds of every child reaped so far.
fn reaped_children_cpu() -> f64 {
    cpu_seconds(UsageWho::RUSAGE_CHILDREN)
}

/// User + system CPU seconds of this process so far.
fn own_cpu() -> f64 {
    cpu_seconds(UsageWho::RUSAGE_SELF)
}

fn cpu_seconds(who: UsageWho) -> f64 {
    let usage = getrusage(who).expect("getrusage of self or children never fails");
    let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    seconds(usage.user_time()) + seconds(usage.system_time())
}

/// When the workers started and what they did.
struct WorkersRun {
    /// Just before the first acquire.
    start: Instant,
    /// This process's CPU seconds at `start`.
    cpu_at_start: f64,
    /// Blocks done, over all workers.
    done: u64,
}

/// Connects `workers` clients, then runs them all until Shutdown.
async fn run_workers(
    context: WorkerContext,
    (workers, batch): (u32, u32),
    client: ClientKind,
) -> Result<WorkersRun, String> {
    let (start, cpu_at_start, done) = match client {
        ClientKind::Full => {
            let clients = common::connect(context, "noop", workers).await?;
            let (start, cpu_at_start) = (Instant::now(), own_cpu());
            (
                start,
                cpu_at_start,
                common::run_noop(clients, batch, None).await?,
            )
        }
        ClientKind::Light => {
            let clients = light_client::connect(&context, "noop", workers).await?;
            let (start, cpu_at_start) = (Instant::now(), own_cpu());
            (
                start,
                cpu_at_start,
                light_client::run(clients, batch).await?,
            )
        }
    };
    Ok(WorkersRun {
        start,
        cpu_at_start,
        done,
    })
}

/// Reads the dashboard's event stream, as an open page does, until it
/// ends; the snapshots received.
fn watch_dashboard(run_dir: &Path) -> Result<u64, String> {
    use std::io::BufRead as _;
    let url_file = run_dir.join("dashboard.url");
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while !url_file.exists() && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let url = std::fs::read_to_string(&url_file).map_err(|e| format!("{url_file:?}: {e}"))?;
    let (base, token) = url
        .trim()
        .split_once("/?token=")
        .ok_or("a URL without token")?;
    let stream = reqwest::blocking::Client::new()
        .get(format!("{base}/api/stream?token={token}"))
        .send()
        .map_err(|e| e.to_string())?;
    let lines = std::io::BufReader::new(stream).lines();
    let events = lines
        .map_while(Result::ok)
        .filter(|l| l == "event: snapshot");
    Ok(events.count() as u64)
}

/// One run: start the driver, serve every block, reap it.
fn measure_once(
    runtime: &tokio::runtime::Runtime,
    (blocks, workers, batch): (u64, u32, u32),
    settings: &Settings,
    dashboard: bool,
) -> Result<Measurement, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let pipeline = pipeline_toml(blocks, settings.conflict);
    let args: &[&str] = match dashboard {
        true => &["--dashboard=127.0.0.1:0"],
        false => &[],
    };
    let mut driver = Driver::start(dir.path(), &pipeline, args)?;
    let run_dir = driver.run_dir.clone();
    let watcher = dashboard.then(|| std::thread::spawn(move || watch_dashboard(&run_dir)));
    let context = driver.wait_for_context()?;
    let cpu_at_start = driver.cpu_so_far()?;
    let reaped_before = reaped_children_cpu();
    let run = runtime.block_on(run_workers(context, (workers, batch), settings.client))?;
    let workers_cpu = own_cpu() - run.cpu_at_start;
    let status = driver.child.wait().map_err(|e| e.to_string())?;
    let seconds = run.start.elapsed().as_secs_f64();
    let driver_cpu = reaped_children_cpu() - reaped_before - cpu_at_start;
    let done = run.done;
    let dashboard = match watcher.map(|w| w.join()) {
        Some(Ok(snapshots)) => Some(snapshots?),
        Some(Err(_)) => return Err("the dashboard's watcher panicked".into()),
        None => None,
    };
    if !status.success() || done != blocks {
        let log = std::fs::read_to_string(dir.path().join("driver.err")).unwrap_or_default();
        return Err(format!(
            "driver {status}, {done} of {blocks} blocks done\n{log}"
        ));
    }
    Ok(Measurement {
        blocks,
        workers,
        batch,
        seconds,
        driver_cpu,
        workers_cpu,
        dashboard,
    })
}

/// The fastest of `runs` runs, for each dashboard setting, the settings'
/// runs taking turns (so that a noisy spell hits them alike).
fn measure_ours(
    runtime: &tokio::runtime::Runtime,
    settings: &Settings,
    row: (u64, u32, u32),
) -> Result<Vec<Measurement>, String> {
    let mut best: Vec<Option<Measurement>> = vec![None; settings.dashboard.len()];
    for _ in 0..settings.runs.max(1) {
        for (best, &dashboard) in best.iter_mut().zip(&settings.dashboard) {
            let m = measure_once(runtime, row, settings, dashboard)?;
            if best.is_none_or(|b| m.seconds < b.seconds) {
                *best = Some(m);
            }
        }
    }
    Ok(best.into_iter().flatten().collect())
}

fn client_runtime(threads: usize) -> tokio::runtime::Runtime {
    let mut builder = match threads {
        0 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
    };
    builder.enable_all().build().expect("a tokio runtime")
}

/// daisy 2.0 at one size: blocks per second from its first block to the
/// return of `run_blockwise`.
fn measure_daisy2(python: &str, blocks: u64, workers: u32) -> Result<f64, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/daisy2_throughput.py");
    let what = format!("daisy 2.0, {blocks} blocks, {workers} workers");
    let output = Command::new(python)
        .arg(script)
        .args([blocks.to_string(), workers.to_string()])
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("{what}: {}\n{stdout}{stderr}", output.status));
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("{what}: no result line ({e})"))?;
    value["blocks_per_s"]
        .as_f64()
        .ok_or(format!("{what}: no blocks_per_s in {line}"))
}

/// The interpreter with daisy 2.0.0, or `None` after saying loudly why
/// the baseline is skipped and how to get it.
fn daisy2_python() -> Option<String> {
    let Ok(python) = std::env::var(PYTHON_ENV) else {
        println!("!!!! daisy 2.0 baseline SKIPPED: {PYTHON_ENV} is not set.");
        print_how_to_get_daisy2();
        return None;
    };
    let check = Command::new(&python)
        .args(["-c", "import daisy; print(daisy.__version__)"])
        // With `-c` the working directory is on sys.path; inside daisy's
        // package directory its logging.py would shadow the stdlib's.
        .current_dir(std::env::temp_dir())
        .output();
    let found = match check {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(_) => "no daisy".to_string(),
        Err(e) => format!("cannot run it: {e}"),
    };
    if found == DAISY2_VERSION {
        return Some(python);
    }
    println!("!!!! daisy 2.0 baseline SKIPPED: {PYTHON_ENV}={python} has {found}, need daisy {DAISY2_VERSION}.");
    print_how_to_get_daisy2();
    None
}

fn print_how_to_get_daisy2() {
    println!("!!!! To get it: python3 -m venv v && v/bin/pip install daisy=={DAISY2_VERSION} && {PYTHON_ENV}=v/bin/python cargo bench -p daisy-driver --bench throughput");
}

/// daisy 2.0's blocks/s per (blocks, workers), for the sizes it runs at.
fn baseline(settings: &Settings) -> Vec<((u64, u32), f64)> {
    if settings.conflict {
        println!("daisy 2.0 is measured without --conflict only");
        return Vec::new();
    }
    let Some(python) = daisy2_python() else {
        return Vec::new();
    };
    let sizes: Vec<u64> = std::env::var(DAISY2_BLOCKS_ENV)
        .ok()
        .and_then(|v| v.split(',').map(|n| n.trim().parse().ok()).collect())
        .unwrap_or(vec![10_000]);
    let mut found = Vec::new();
    for &blocks in &sizes {
        for &workers in &settings.workers {
            match measure_daisy2(&python, blocks, workers) {
                Ok(rate) => found.push(((blocks, workers), rate)),
                Err(error) => println!("!!!! {error}"),
            }
        }
    }
    found
}

fn print_table(rows: &[Measurement], daisy2: &[((u64, u32), f64)]) {
    println!();
    println!(
        "{:>8} {:>7} {:>5} {:>9} {:>8} {:>9} {:>13} {:>14} | {:>12} {:>7}",
        "blocks",
        "workers",
        "batch",
        "dashboard",
        "seconds",
        "blocks/s",
        "driver us/blk",
        "workers us/blk",
        "daisy2 blk/s",
        "ours/d2"
    );
    for m in rows {
        let d2 = daisy2
            .iter()
            .find(|(key, _)| *key == (m.blocks, m.workers))
            .map(|(_, rate)| *rate);
        let d2 = match d2 {
            Some(rate) => format!("{rate:>12.0} {:>6.1}x", m.blocks_per_second() / rate),
            None => format!("{:>12} {:>7}", "-", "-"),
        };
        let dashboard = m.dashboard.map_or("off".into(), |n| format!("{n} seen"));
        println!(
            "{:>8} {:>7} {:>5} {dashboard:>9} {:>8.3} {:>9.0} {:>13.2} {:>14.2} | {d2}",
            m.blocks,
            m.workers,
            m.batch,
            m.seconds,
            m.blocks_per_second(),
            m.driver_us_per_block(),
            m.workers_us_per_block()
        );
    }
    print_dashboard_cost(rows);
    println!("\n{PUBLISHED}");
}

/// Each row with the dashboard against the same row without it.
fn print_dashboard_cost(rows: &[Measurement]) {
    for on in rows.iter().filter(|m| m.dashboard.is_some()) {
        let same =
            |m: &&Measurement| (m.blocks, m.workers, m.batch) == (on.blocks, on.workers, on.batch);
        let Some(off) = rows.iter().filter(same).find(|m| m.dashboard.is_none()) else {
            continue;
        };
        println!(
            "dashboard watched, {} blocks, {} workers, batch {}: {:.3}x the time of off, \
             driver CPU {:.2} vs {:.2} us/block ({:.3}x)",
            on.blocks,
            on.workers,
            on.batch,
            on.seconds / off.seconds,
            on.driver_us_per_block(),
            off.driver_us_per_block(),
            on.driver_cpu / off.driver_cpu
        );
    }
}

fn main() {
    // Cargo passes `--bench`; everything else is ours.
    let settings = Settings::parse_from(std::env::args().filter(|a| a != "--bench"));
    println!("driver: {}; {settings:?}", driver_program().display());
    let daisy2 = baseline(&settings);
    let runtime = client_runtime(settings.client_threads);
    let mut rows = Vec::new();
    for &blocks in &settings.blocks {
        for &workers in &settings.workers {
            for &batch in &settings.batches {
                match measure_ours(&runtime, &settings, (blocks, workers, batch)) {
                    Ok(measured) => rows.extend(measured),
                    Err(error) => panic!("{blocks} blocks, {workers} workers: {error}"),
                }
            }
        }
    }
    print_table(&rows, &daisy2);
}
