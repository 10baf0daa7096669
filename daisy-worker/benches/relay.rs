//! The worker-command relay: CPU time `daisy-worker` spends per block
//! passing blocks from the driver's TCP connection to a worker command's
//! stdin and its answers back, with the real `daisy-driver` and
//! `daisy-worker` binaries (bench profile = release).
//!
//! Each measurement starts `daisy-driver run` on a generated pipeline (one
//! 1-D task of N independent blocks, `max_workers = 0`, `command` = a tiny
//! C echo program compiled here from `benches/relay_echo.c`), waits for
//! `<run-dir>/context.json`, starts W `daisy-worker --context-file`
//! processes and waits for all of them and the driver to exit.
//!
//! CPU times are exact: `getrusage(RUSAGE_CHILDREN)` grows by a child's
//! user + system time (and that of the children it reaped) when it is
//! reaped. The workers are reaped first: their share, minus what the echo
//! commands report of their own (they write it at end of input), is the
//! relay's, start-up included (a few ms per worker, under 1 µs per block
//! at the default sizes). The driver is reaped last; its CPU before the
//! workers started (`/proc/<pid>/stat`) is not counted.
//!
//! `DAISY_RELAY_BASELINE=path/to/daisy-worker` measures another build of
//! the worker too, in the same run, interleaved with this one, and prints
//! the ratio. docs/benchmarks.md records the figures.
//!
//! `--floor` measures a yardstick too (row `floor`, batch 1 only):
//! `benches/relay_floor.c`, a C stand-in for the driver and one for the
//! worker that relays each block line from a socket to the echo command
//! and its answer back with the fewest system calls a relay waiting on
//! both sides needs (six, two of them sleeping polls), and nothing else.
//! Its relay CPU is what those calls and sleeps cost on this machine.
//!
//! ```text
//! cargo bench -p daisy-worker --bench relay \
//!     [-- --blocks 100000 --workers 4 --batch 1,64 --prefetch 0 --runs 3 \
//!         --resource-tracking false,true --floor]
//! ```

mod common;

use clap::Parser as _;
use nix::sys::resource::{getrusage, UsageWho};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The worker binary Cargo built for this bench.
const WORKER: &str = env!("CARGO_BIN_EXE_daisy-worker");
/// Another worker binary measured beside this one.
const BASELINE_ENV: &str = "DAISY_RELAY_BASELINE";
/// Where the echo command writes its CPU time at exit.
const ECHO_CPU_ENV: &str = "RELAY_ECHO_CPU_DIR";
const ECHO_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/relay_echo.c");
const FLOOR_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/relay_floor.c");
/// How long the driver may take to write context.json.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// `/proc/<pid>/stat` counts CPU time in USER_HZ ticks, 100 on Linux.
const PROC_TICKS_PER_SECOND: f64 = 100.0;

/// What to measure, from the command line.
#[derive(Debug, Clone, clap::Parser)]
struct Settings {
    #[arg(long, default_value_t = 100_000)]
    blocks: u64,
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// `batch_size` of the task; one row each.
    #[arg(long = "batch", value_delimiter = ',', default_values_t = [1, 64])]
    batches: Vec<u32>,
    /// `prefetch` of the task; one row each.
    #[arg(long = "prefetch", value_delimiter = ',', default_values_t = [0])]
    prefetches: Vec<u32>,
    /// `resource_tracking` of the task (what each block cost); one row each.
    #[arg(long = "resource-tracking", value_delimiter = ',', default_values_t = [false])]
    trackings: Vec<bool>,
    /// Runs per row; the one with the least worker CPU counts.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Measures the C relay of `benches/relay_floor.c` too (batch 1 rows).
    #[arg(long)]
    floor: bool,
}

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Measurement {
    seconds: f64,
    /// All workers' user + system CPU seconds, their commands' excluded.
    workers_cpu: f64,
    /// The commands' own.
    commands_cpu: f64,
    /// The driver's, from the workers' start.
    driver_cpu: f64,
}

impl Measurement {
    fn per_block(cpu: f64, blocks: u64) -> f64 {
        cpu * 1e6 / blocks as f64
    }
}

/// One row: a task shape, measured with one worker binary.
#[derive(Debug, Clone, Copy)]
struct Row {
    batch: u32,
    prefetch: u32,
    tracking: bool,
}

/// `source` (C), compiled into `dir` as `name`.
fn compile(dir: &Path, name: &str, source: &str) -> Result<PathBuf, String> {
    let program = dir.join(name);
    let output = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&program)
        .arg(source)
        .output()
        .map_err(|e| format!("cannot run gcc (needed to build {name}): {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("gcc failed on {source}:\n{stderr}"));
    }
    Ok(program)
}

/// One 1-D task of `blocks` independent blocks, served only to workers
/// started by hand, its code the echo command.
fn pipeline_toml(blocks: u64, row: Row, echo: &Path, cpu_dir: &Path) -> String {
    format!(
        r#"name = "relay"

[[task]]
id = "echo"
total_roi = {{ offset = [0], shape = [{blocks}] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
max_workers = 0
batch_size = {batch}
prefetch = {prefetch}
resource_tracking = {tracking}
command = [{echo:?}]
env = {{ {ECHO_CPU_ENV} = {cpu_dir:?} }}
"#,
        batch = row.batch,
        prefetch = row.prefetch,
        tracking = row.tracking,
    )
}

/// A child process, killed if dropped before it was reaped.
struct Reaped(Option<Child>);

impl Reaped {
    fn wait(&mut self, what: &str, dir: &Path) -> Result<(), String> {
        let child = self.0.as_mut().ok_or("reaped twice")?;
        let status = child.wait().map_err(|e| e.to_string())?;
        self.0 = None;
        if status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(dir.join(format!("{what}.err"))).unwrap_or_default();
        Err(format!("{what} ended with {status}\n{log}"))
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn logged(dir: &Path, what: &str, command: &mut Command) -> Result<Reaped, String> {
    let log = |suffix: &str| {
        std::fs::File::create(dir.join(format!("{what}.{suffix}")))
            .map(Stdio::from)
            .map_err(|e| e.to_string())
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(log("out")?)
        .stderr(log("err")?)
        .spawn()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    Ok(Reaped(Some(child)))
}

/// Waits for `context.json`, failing early if the driver died.
fn wait_for_context(driver: &mut Reaped, run_dir: &Path) -> Result<PathBuf, String> {
    let path = run_dir.join("context.json");
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        let child = driver.0.as_mut().ok_or("no driver")?;
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the driver exited at start-up: {status}"));
        }
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
            return Ok(path);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(format!("no {} within {START_TIMEOUT:?}", path.display()))
}

/// CPU seconds a running process has used, from `/proc/<pid>/stat`
/// (utime and stime, fields 14 and 15; the name before them is in
/// parentheses and may hold spaces).
fn cpu_so_far(pid: u32) -> Result<f64, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let after_name = stat.rsplit_once(") ").ok_or(format!("{path}: no name"))?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
        .sum::<Option<f64>>()
        .ok_or(format!("{path}: no utime/stime"))?;
    Ok(ticks / PROC_TICKS_PER_SECOND)
}

/// User + system CPU seconds of every child reaped so far.
fn reaped_children_cpu() -> f64 {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage of children never fails");
    let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    seconds(usage.user_time()) + seconds(usage.system_time())
}

/// The CPU seconds the echo commands reported.
fn commands_cpu(cpu_dir: &Path, workers: u32) -> Result<f64, String> {
    let mut total = 0.0;
    let mut found = 0;
    for entry in std::fs::read_dir(cpu_dir).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        let us: f64 = (text.trim().parse()).map_err(|_| format!("{text:?} is not a number"))?;
        total += us * 1e-6;
        found += 1;
    }
    if found != workers {
        return Err(format!(
            "{found} echo commands reported, {workers} expected"
        ));
    }
    Ok(total)
}

/// One run: driver, workers, reap, account.
fn measure_once(
    (driver_bin, worker_bin, echo): (&Path, &Path, &Path),
    settings: &Settings,
    row: Row,
) -> Result<Measurement, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (dir, cpu_dir, run_dir) = (dir.path(), dir.path().join("cpu"), dir.path().join("run"));
    std::fs::create_dir(&cpu_dir).map_err(|e| e.to_string())?;
    let pipeline = dir.join("relay.toml");
    let toml = pipeline_toml(settings.blocks, row, echo, &cpu_dir);
    std::fs::write(&pipeline, toml).map_err(|e| e.to_string())?;
    let mut driver = logged(
        dir,
        "driver",
        Command::new(driver_bin)
            .arg("run")
            .arg(&pipeline)
            .arg("--run-dir")
            .arg(&run_dir)
            .args(["--listen", "127.0.0.1:0", "--worker-bin", "/bin/false"])
            .args(["--status-every", "1h"]),
    )?;
    let context = wait_for_context(&mut driver, &run_dir)?;
    let driver_pid = driver.0.as_ref().map(Child::id).unwrap_or_default();
    let driver_before = cpu_so_far(driver_pid)?;
    let started = Instant::now();
    let mut workers = (0..settings.workers)
        .map(|i| {
            let mut command = Command::new(worker_bin);
            command
                .arg("--context-file")
                .arg(&context)
                .args(["--task", "echo", "--log-dir"])
                .arg(dir.join("logs"));
            logged(dir, &format!("worker-{i}"), &mut command)
        })
        .collect::<Result<Vec<_>, _>>()?;
    account(
        (&mut driver, driver_before),
        &mut workers,
        (started, dir, &cpu_dir),
        settings,
    )
}

/// Reaps the workers, then the driver, and splits their CPU time.
fn account(
    (driver, driver_before): (&mut Reaped, f64),
    workers: &mut [Reaped],
    (started, dir, cpu_dir): (Instant, &Path, &Path),
    settings: &Settings,
) -> Result<Measurement, String> {
    let before = reaped_children_cpu();
    for (i, worker) in workers.iter_mut().enumerate() {
        worker.wait(&format!("worker-{i}"), dir)?;
    }
    let workers_and_commands = reaped_children_cpu() - before;
    driver.wait("driver", dir)?;
    let seconds = started.elapsed().as_secs_f64();
    let driver_cpu = reaped_children_cpu() - before - workers_and_commands - driver_before;
    let commands_cpu = commands_cpu(cpu_dir, settings.workers)?;
    Ok(Measurement {
        seconds,
        workers_cpu: workers_and_commands - commands_cpu,
        commands_cpu,
        driver_cpu,
    })
}

/// One run of the C floor: its stand-in driver, W relays, reap, account.
fn measure_floor(floor: &Path, echo: &Path, settings: &Settings) -> Result<Measurement, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (dir, cpu_dir) = (dir.path(), dir.path().join("cpu"));
    std::fs::create_dir(&cpu_dir).map_err(|e| e.to_string())?;
    let mut serve = Command::new(floor);
    serve.arg("serve").arg(settings.blocks.to_string());
    let mut driver = logged(dir, "driver", serve.arg(settings.workers.to_string()))?;
    let port = wait_for_port(&mut driver, &dir.join("driver.out"))?;
    let started = Instant::now();
    let mut workers = (0..settings.workers)
        .map(|i| {
            let mut command = Command::new(floor);
            command.args(["relay", &port]).arg(echo);
            command.env(ECHO_CPU_ENV, &cpu_dir);
            logged(dir, &format!("worker-{i}"), &mut command)
        })
        .collect::<Result<Vec<_>, _>>()?;
    account(
        (&mut driver, 0.0),
        &mut workers,
        (started, dir, &cpu_dir),
        settings,
    )
}

/// The port the floor's stand-in driver printed, once it did.
fn wait_for_port(serve: &mut Reaped, out: &Path) -> Result<String, String> {
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        if text.ends_with('\n') {
            return Ok(text.trim().to_string());
        }
        let child = serve.0.as_mut().ok_or("no stand-in driver")?;
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the floor's stand-in driver exited: {status}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(format!(
        "no port in {} within {START_TIMEOUT:?}",
        out.display()
    ))
}

fn print_header() {
    println!(
        "{:>8} {:>7} {:>5} {:>8} {:>5} {:>7} {:>9} {:>14} {:>15} {:>13} | {:>13}",
        "blocks",
        "workers",
        "batch",
        "prefetch",
        "costs",
        "worker",
        "blocks/s",
        "relay us/blk",
        "command us/blk",
        "driver us/blk",
        "relay vs base"
    );
}

fn print_row(settings: &Settings, row: Row, name: &str, m: Measurement, base: Option<f64>) {
    let blocks = settings.blocks;
    let relay = Measurement::per_block(m.workers_cpu, blocks);
    let ratio = base.map_or("-".to_string(), |b| format!("{:.2}x", relay / b));
    println!(
        "{:>8} {:>7} {:>5} {:>8} {:>5} {:>7} {:>9.0} {:>14.2} {:>15.2} {:>13.2} | {:>13}",
        blocks,
        settings.workers,
        row.batch,
        row.prefetch,
        if row.tracking { "on" } else { "off" },
        name,
        blocks as f64 / m.seconds,
        relay,
        Measurement::per_block(m.commands_cpu, blocks),
        Measurement::per_block(m.driver_cpu, blocks),
        ratio
    );
}

fn run(settings: &Settings) -> Result<(), String> {
    let tools = tempfile::tempdir().map_err(|e| e.to_string())?;
    let echo = compile(tools.path(), "relay_echo", ECHO_SOURCE)?;
    let floor = compile(tools.path(), "relay_floor", FLOOR_SOURCE)?;
    let driver = common::build_driver(WORKER)?;
    let mut builds = vec![("this", PathBuf::from(WORKER))];
    match std::env::var_os(BASELINE_ENV) {
        Some(base) => builds.push(("base", PathBuf::from(base))),
        None => println!("(no {BASELINE_ENV}=path/to/daisy-worker: no baseline build measured)"),
    }
    println!("driver: {}; {settings:?}", driver.display());
    let rows: Vec<Row> = (settings.batches.iter())
        .flat_map(|&batch| {
            settings
                .prefetches
                .iter()
                .map(move |&prefetch| (batch, prefetch))
        })
        .flat_map(|(batch, prefetch)| {
            (settings.trackings.iter()).map(move |&tracking| Row {
                batch,
                prefetch,
                tracking,
            })
        })
        .collect();
    print_header();
    for row in rows {
        // Interleaved, so a change in the machine's load hits both builds.
        let mut best: Vec<Option<Measurement>> = vec![None; builds.len() + 1];
        let floor_too = settings.floor && row.batch == 1 && row.prefetch == 0 && !row.tracking;
        for _ in 0..settings.runs.max(1) {
            for (slot, (_, worker)) in best.iter_mut().zip(&builds) {
                let m = measure_once((&driver, worker, &echo), settings, row)?;
                keep_least(slot, m);
            }
            if floor_too {
                let m = measure_floor(&floor, &echo, settings)?;
                keep_least(&mut best[builds.len()], m);
            }
        }
        let base = best[..builds.len()].get(1).copied().flatten();
        let base_relay = base.map(|b| Measurement::per_block(b.workers_cpu, settings.blocks));
        for ((name, _), m) in builds.iter().zip(&best) {
            let m = m.expect("at least one run");
            let base_relay = base_relay.filter(|_| *name == "this");
            print_row(settings, row, name, m, base_relay);
        }
        if let Some(m) = best[builds.len()] {
            print_row(settings, row, "floor", m, None);
        }
    }
    Ok(())
}

/// Keeps the run with the least worker CPU.
fn keep_least(slot: &mut Option<Measurement>, m: Measurement) {
    if slot.is_none_or(|b| m.workers_cpu < b.workers_cpu) {
        *slot = Some(m);
    }
}

fn main() {
    // Cargo passes `--bench`; everything else is ours.
    let settings = Settings::parse_from(std::env::args().filter(|a| a != "--bench"));
    if let Err(error) = run(&settings) {
        eprintln!("relay bench: {error}");
        std::process::exit(1);
    }
}
