//! What a big run leaves in its run directory, and what reading it back
//! costs: a run of ~2M blocks through the real `daisy-driver` binary, then
//! `status`, `report` and `run --retry-failed` on its run directory.
//!
//! The pipeline: one 3-D task of `N³` blocks (write 8³, read 12³: a
//! context of 2 on each side), `read_write_conflict = true` (8 conflict
//! levels), `max_workers = 0`; W in-process no-op workers (as in the
//! throughput bench, each reporting a run time of 0.5 ms per block) at a
//! batch size B, to completion. Then it reports the bytes per block of
//! `events.jsonl` and of the whole run directory (done markers included,
//! file sizes as `du --apparent-size` counts them), and runs each command
//! under `/usr/bin/time` for its wall time and peak RSS. `run
//! --retry-failed` on the finished run finds nothing to retry; its
//! planning is timed to the line saying so (what follows is the resume
//! that skips every done block, as any run does). `--keep DIR` runs in DIR
//! and leaves it.
//! `DAISY_THROUGHPUT_DRIVER=path` measures another driver binary.
//! docs/benchmarks.md records the figures.
//!
//! ```text
//! cargo bench -p daisy-driver --bench run_dir_scale [-- --per-dim 126 --workers 2 --batch 256]
//! ```

// Each bench uses part of the shared harness.
#[allow(dead_code)]
mod common;

use common::{driver_program, Driver};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// What to measure, from the command line.
#[derive(Debug, Clone)]
struct Settings {
    /// Blocks per dimension (126³ = 2,000,376 blocks).
    per_dim: u64,
    workers: u32,
    batch: u32,
    /// Where to run, kept afterwards (else a temporary directory).
    keep: Option<std::path::PathBuf>,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Settings, String> {
    let mut settings = Settings {
        per_dim: 126,
        workers: 2,
        batch: 256,
        keep: None,
    };
    let mut args = args.filter(|a| a != "--bench");
    while let Some(name) = args.next() {
        let value = args.next().ok_or(format!("{name} needs a value"))?;
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{v:?} is not a number"))
        };
        match name.as_str() {
            "--per-dim" => settings.per_dim = number(&value)?,
            "--workers" => settings.workers = number(&value)? as u32,
            "--batch" => settings.batch = number(&value)? as u32,
            "--keep" => settings.keep = Some(value.into()),
            _ => return Err(format!("unknown option {name:?}")),
        }
    }
    Ok(settings)
}

/// One 3-D task of `per_dim³` blocks with context and conflict levels.
fn pipeline_toml(per_dim: u64) -> String {
    let total = per_dim * 8 + 4;
    format!(
        r#"name = "scale"

[[task]]
id = "noop"
total_roi = {{ offset = [0, 0, 0], shape = [{total}, {total}, {total}] }}
read_roi = {{ offset = [0, 0, 0], shape = [12, 12, 12] }}
write_roi = {{ offset = [2, 2, 2], shape = [8, 8, 8] }}
read_write_conflict = true
max_workers = 0
block_command = ["true"]
"#
    )
}

/// Runs every block; returns the seconds it took.
fn run(dir: &Path, settings: &Settings) -> Result<f64, String> {
    let mut driver = Driver::start(dir, &pipeline_toml(settings.per_dim))?;
    let context = driver.wait_for_context()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let done = runtime.block_on(async {
        let clients = common::connect(context, "noop", settings.workers).await?;
        common::run_noop(clients, settings.batch, Some(0.0005)).await
    })?;
    let status = driver.child.wait().map_err(|e| e.to_string())?;
    let blocks = settings.per_dim.pow(3);
    if !status.success() || done != blocks {
        let log = std::fs::read_to_string(dir.join("driver.err")).unwrap_or_default();
        return Err(format!("driver {status}, {done} of {blocks} blocks\n{log}"));
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Bytes of every file under `path`: their sizes, and what they take on
/// disk (sparse files take less).
fn bytes_under(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(path) else {
        return (0, 0);
    };
    let sizes = entries.flatten().map(|entry| match entry.metadata() {
        Ok(m) if m.is_dir() => bytes_under(&entry.path()),
        Ok(m) => (m.len(), m.blocks() * 512),
        Err(_) => (0, 0),
    });
    sizes.fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

/// Runs `daisy-driver ARGS` under `/usr/bin/time`, which must succeed:
/// wall seconds, peak RSS in MB, and the seconds until a line of its
/// output starts with `mark`, if one does.
fn timed(dir: &Path, args: &[&str], mark: &str) -> Result<(f64, f64, Option<f64>), String> {
    use std::io::BufRead as _;
    let times = dir.join("time.txt");
    let start = Instant::now();
    let mut child = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%e %M")
        .arg("-o")
        .arg(&times)
        .arg(driver_program())
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("/usr/bin/time: {e}"))?;
    let stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
    // Read to the end: a driver whose stdout is closed fails.
    let mut marked = None;
    for line in stdout.lines().map_while(Result::ok) {
        if marked.is_none() && line.starts_with(mark) {
            marked = Some(start.elapsed().as_secs_f64());
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("{args:?}: {status}"));
    }
    let text = std::fs::read_to_string(&times).map_err(|e| e.to_string())?;
    let last = text.lines().last().unwrap_or("");
    let mut fields = last.split_whitespace().map(|f| f.parse::<f64>());
    match (fields.next(), fields.next()) {
        (Some(Ok(seconds)), Some(Ok(kb))) => Ok((seconds, kb / 1024.0, marked)),
        _ => Err(format!("{}: cannot read {last:?}", times.display())),
    }
}

fn measure(settings: &Settings) -> Result<(), String> {
    let temporary = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = settings.keep.as_deref().unwrap_or(temporary.path());
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let blocks = settings.per_dim.pow(3) as f64;
    let seconds = run(dir, settings)?;
    println!(
        "run: {blocks} blocks in {seconds:.1} s ({:.0} blocks/s)",
        blocks / seconds
    );
    let run_dir = dir.join("run");
    let events = std::fs::metadata(run_dir.join("events.jsonl")).map_or(0, |m| m.len());
    let (total, on_disk) = bytes_under(&run_dir);
    println!(
        "events.jsonl: {events} bytes, {:.2} B/block; run directory: {total} bytes, {:.2} B/block ({:.2} B/block on disk)",
        events as f64 / blocks,
        total as f64 / blocks,
        on_disk as f64 / blocks
    );
    let commands: [(&str, Vec<&str>); 3] = [
        ("status", vec!["status", "run"]),
        ("report", vec!["report", "run", "-o", "report.html"]),
        (
            "run --retry-failed",
            vec!["run", "pipeline.toml", "--run-dir", "run", "--retry-failed"]
                .into_iter()
                .chain(["--listen", "127.0.0.1:0", "--worker-bin", "/bin/false"])
                .collect(),
        ),
    ];
    for (name, args) in commands {
        let (seconds, mb, planned) = timed(dir, &args, "daisy-driver: --retry-failed:")?;
        let planned = planned.map_or(String::new(), |s| format!(" (planned in {s:.2} s)"));
        println!("{name}: {seconds:.2} s{planned}, peak RSS {mb:.0} MB");
    }
    Ok(())
}

fn main() {
    let settings = match parse_args(std::env::args().skip(1)) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("run_dir_scale bench: {error}");
            std::process::exit(2);
        }
    };
    println!("driver: {}; {settings:?}", driver_program().display());
    if let Err(error) = measure(&settings) {
        panic!("{error}");
    }
}
