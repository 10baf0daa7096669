//! Block commands against the process-spawn floor: N runs of `true` as
//! block commands with W local workers through the real `daisy-driver`
//! and `daisy-worker` binaries (bench profile = release), and
//! `seq N | xargs -P W -n1 true`, which starts the same N processes W at
//! a time and does nothing else, in the same run.
//!
//! Ours is timed from starting `daisy-driver run` on a generated pipeline
//! (one 1-D task of N independent blocks, `max_workers = W`, the default
//! local launcher and batch size) to its exit: start-up, launching the
//! workers, every block's done marker and the final sync included, as a
//! user waits for it. xargs is timed from starting `sh -c 'seq N | xargs
//! ..'` to its exit. CPU: user + system time of everything each one
//! started (`getrusage(RUSAGE_CHILDREN)`, exact once reaped; the bench is
//! a child subreaper, so what outlives its parent, such as the workers'
//! user-process watchers, is reaped and counted here too). The two
//! alternate run by run (the order flips each round), so a change in the
//! machine's load hits both; the medians and their ratio are printed.
//!
//! `DAISY_SPAWN_BASELINE=path/to/daisy-worker` runs another worker build
//! too (same driver), interleaved, to compare builds within one run; a
//! `:`-separated list runs several (`base`, `base2`, ..).
//! docs/benchmarks.md records the figures.
//!
//! ```text
//! cargo bench -p daisy-worker --bench spawn [-- --blocks 3000 --workers 4 --runs 5 --batch 1]
//! ```

mod common;

use clap::Parser as _;
use nix::sys::resource::{getrusage, UsageWho};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The worker binary Cargo built for this bench.
const WORKER: &str = env!("CARGO_BIN_EXE_daisy-worker");
/// Another worker binary measured beside this one.
const BASELINE_ENV: &str = "DAISY_SPAWN_BASELINE";

/// What to measure, from the command line.
#[derive(Debug, Clone, clap::Parser)]
struct Settings {
    /// Blocks, and processes started by xargs.
    #[arg(long, default_value_t = 3000)]
    blocks: u64,
    /// Workers (`max_workers`), and xargs' `-P`.
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// Rounds; each runs every contender once.
    #[arg(long, default_value_t = 5)]
    runs: u32,
    /// The task's `batch_size`.
    #[arg(long, default_value_t = 1)]
    batch: u32,
    /// The program each block (and xargs) runs, without arguments.
    #[arg(long, default_value = "true")]
    program: String,
}

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Measurement {
    seconds: f64,
    /// User + system CPU seconds of the run's processes.
    cpu: f64,
}

/// Something timed: the floor, or the driver with one worker build.
#[derive(Debug, Clone)]
enum Contender {
    Xargs,
    Daisy { name: String, worker: PathBuf },
}

impl Contender {
    fn name(&self) -> &str {
        match self {
            Self::Xargs => "xargs",
            Self::Daisy { name, .. } => name,
        }
    }
}

/// One 1-D task of `blocks` independent blocks, each running `program`.
fn pipeline_toml(settings: &Settings) -> String {
    format!(
        r#"name = "spawn"

[[task]]
id = "true"
total_roi = {{ offset = [0], shape = [{blocks}] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
max_workers = {workers}
batch_size = {batch}
block_command = [{program:?}]
"#,
        blocks = settings.blocks,
        workers = settings.workers,
        batch = settings.batch,
        program = settings.program,
    )
}

/// User + system CPU seconds of every child reaped so far.
fn reaped_children_cpu() -> f64 {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage of children never fails");
    let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    seconds(usage.user_time()) + seconds(usage.system_time())
}

/// Runs `command` to its end, its output in `<dir>/<what>.{out,err}`.
fn timed(dir: &Path, what: &str, command: &mut Command) -> Result<Measurement, String> {
    let log = |suffix: &str| {
        std::fs::File::create(dir.join(format!("{what}.{suffix}")))
            .map(Stdio::from)
            .map_err(|e| e.to_string())
    };
    let cpu_before = reaped_children_cpu();
    let started = Instant::now();
    let status = command
        .stdin(Stdio::null())
        .stdout(log("out")?)
        .stderr(log("err")?)
        .status()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    let seconds = started.elapsed().as_secs_f64();
    reap_orphans();
    if !status.success() {
        let err = std::fs::read_to_string(dir.join(format!("{what}.err"))).unwrap_or_default();
        return Err(format!("{what} ended with {status}\n{err}"));
    }
    let cpu = reaped_children_cpu() - cpu_before;
    Ok(Measurement { seconds, cpu })
}

/// Makes this process the reaper of its orphaned descendants.
fn adopt_orphans() -> Result<(), String> {
    // SAFETY: prctl with plain integer arguments.
    match unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) } {
        0 => Ok(()),
        _ => Err(format!(
            "cannot become a child subreaper: {}",
            std::io::Error::last_os_error()
        )),
    }
}

/// Waits for every descendant left (adopted once its parent ended).
fn reap_orphans() {
    let mut status = 0;
    // SAFETY: waits for any child of this process; -1 once there is none.
    while unsafe { libc::waitpid(-1, &mut status, 0) } > 0 {}
}

fn measure(
    contender: &Contender,
    driver: &Path,
    settings: &Settings,
) -> Result<Measurement, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = dir.path();
    match contender {
        Contender::Xargs => {
            let script = format!(
                "seq {} | xargs -P {} -n1 {}",
                settings.blocks, settings.workers, settings.program
            );
            timed(dir, "xargs", Command::new("sh").args(["-c", &script]))
        }
        Contender::Daisy { worker, .. } => {
            let pipeline = dir.join("spawn.toml");
            std::fs::write(&pipeline, pipeline_toml(settings)).map_err(|e| e.to_string())?;
            let mut run = Command::new(driver);
            run.arg("run")
                .arg(&pipeline)
                .arg("--run-dir")
                .arg(dir.join("run"))
                .arg("--worker-bin")
                .arg(worker)
                .args(["--listen", "127.0.0.1:0", "--quiet"]);
            let m = timed(dir, "driver", &mut run)?;
            check_all_done(driver, &dir.join("run"))?;
            Ok(m)
        }
    }
}

/// Every block ran: `daisy-driver status` says the run finished (exit 0).
fn check_all_done(driver: &Path, run_dir: &Path) -> Result<(), String> {
    let out = Command::new(driver)
        .arg("status")
        .arg(run_dir)
        .output()
        .map_err(|e| format!("cannot run daisy-driver status: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "the run did not finish ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        )),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n % 2 {
        1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn run(settings: &Settings) -> Result<(), String> {
    let driver = common::build_driver(WORKER)?;
    adopt_orphans()?;
    let mut contenders = vec![
        Contender::Xargs,
        Contender::Daisy {
            name: "this".to_string(),
            worker: PathBuf::from(WORKER),
        },
    ];
    match std::env::var_os(BASELINE_ENV) {
        Some(bases) => {
            let paths: Vec<PathBuf> = std::env::split_paths(&bases).collect();
            for (i, worker) in paths.into_iter().enumerate() {
                let name = match i {
                    0 => "base".to_string(),
                    i => format!("base{}", i + 1),
                };
                println!("{name}: {}", worker.display());
                contenders.push(Contender::Daisy { name, worker });
            }
        }
        None => println!("(no {BASELINE_ENV}=path/to/daisy-worker: no baseline build measured)"),
    }
    println!("driver: {}; {settings:?}", driver.display());
    println!(
        "{:>5} {:>6} {:>9} {:>8}",
        "round", "what", "seconds", "CPU s"
    );
    let mut results: Vec<Vec<Measurement>> = vec![Vec::new(); contenders.len()];
    for round in 0..settings.runs.max(1) {
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let m = measure(&contenders[i], &driver, settings)?;
            let name = contenders[i].name();
            println!("{round:>5} {name:>6} {:>9.3} {:>8.3}", m.seconds, m.cpu);
            results[i].push(m);
        }
    }
    summarise(&contenders, &results);
    Ok(())
}

/// Medians per contender, and its time over xargs': the ratio of the
/// medians, and the median and range of the per-round ratios (each
/// against the xargs run of its own round, the steadier figure when the
/// machine's load changes during the bench).
fn summarise(contenders: &[Contender], results: &[Vec<Measurement>]) {
    let floor: Vec<f64> = results[0].iter().map(|m| m.seconds).collect();
    let floor_median = median(&mut floor.clone());
    println!(
        "{:>6} {:>15} {:>13} {:>14} {:>21}",
        "what", "median seconds", "median CPU s", "medians / xargs", "per round: median, range"
    );
    for (contender, runs) in contenders.iter().zip(results) {
        let mut seconds: Vec<f64> = runs.iter().map(|m| m.seconds).collect();
        let mut cpu: Vec<f64> = runs.iter().map(|m| m.cpu).collect();
        let mut ratios: Vec<f64> = runs
            .iter()
            .zip(&floor)
            .map(|(m, f)| m.seconds / f)
            .collect();
        let ratio = median(&mut ratios);
        println!(
            "{:>6} {:>15.3} {:>13.3} {:>14.3}x {:>8.3}x, {:.3}-{:.3}x",
            contender.name(),
            median(&mut seconds),
            median(&mut cpu),
            median(&mut seconds) / floor_median,
            ratio,
            ratios[0],
            ratios[ratios.len() - 1],
        );
    }
}

fn main() {
    // Cargo passes `--bench`; everything else is ours.
    let settings = Settings::parse_from(std::env::args().filter(|a| a != "--bench"));
    if let Err(error) = run(&settings) {
        eprintln!("spawn bench: {error}");
        std::process::exit(1);
    }
}
