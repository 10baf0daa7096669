//! What a big run costs and leaves in its run directory, and what reading
//! it back costs: a run of ~2M blocks (up to 10⁸) through the real
//! `daisy-driver` binary, then `status`, `report` and `run
//! --retry-failed` on its run directory.
//!
//! The pipeline: one 3-D task of `N³` blocks (write 8³, read 12³: a
//! context of 2 on each side), `read_write_conflict = true` (8 conflict
//! levels), `max_workers = 0`; W in-process no-op workers (as in the
//! throughput bench, each reporting a run time of 0.5 ms per block) at a
//! batch size B, to completion. It reports the driver's peak RSS (its
//! `getrusage(RUSAGE_CHILDREN)` maximum, exact once it is reaped) in all
//! and per block, then the bytes per block of `events.jsonl` and of the
//! whole run directory (done markers included, file sizes as `du
//! --apparent-size` counts them), and runs each command under
//! `/usr/bin/time` for its wall time and peak RSS. `run --retry-failed`
//! on the finished run finds nothing to retry; its planning is timed to
//! the line saying so (what follows is the resume that skips every done
//! block, as any run does).
//!
//! `--kill-half` kills the driver with SIGKILL once the workers have
//! released half the blocks, then starts it again on the same run
//! directory, which resumes. The workers note every block they release
//! before the kill and every block handed out after it: every block must
//! be among them (nothing lost), and the blocks in both (redone: released
//! but not yet marked done when the driver died) must be at most one
//! batch per worker, what can be in flight.
//!
//! `--keep DIR` runs in DIR and leaves it.
//! `DAISY_THROUGHPUT_DRIVER=path` measures another driver binary.
//! docs/benchmarks.md records the figures.
//!
//! ```text
//! cargo bench -p daisy-driver --bench run_dir_scale [-- --per-dim 126 --workers 2 --batch 256 --kill-half]
//! ```

// Each bench uses part of the shared harness.
#[allow(dead_code)]
mod common;

use clap::Parser as _;
use common::{driver_program, Driver};
use daisy_core::context::WorkerContext;
use daisy_core::protocol::BlockResult;
use daisy_worker::{Acquired, Client};
use nix::sys::resource::{getrusage, UsageWho};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Seconds each no-op block reports to have run.
const BLOCK_SECONDS: f64 = 0.0005;
/// How often the killer looks at how many blocks were released.
const KILL_POLL: Duration = Duration::from_millis(5);

/// What to measure, from the command line.
#[derive(Debug, Clone, clap::Parser)]
struct Settings {
    /// Blocks per dimension (126³ = 2,000,376 blocks; 465³ ≈ 10⁸).
    #[arg(long, default_value_t = 126)]
    per_dim: u64,
    #[arg(long, default_value_t = 2)]
    workers: u32,
    #[arg(long, default_value_t = 256)]
    batch: u32,
    /// Where to run, kept afterwards (else a temporary directory).
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Kill the driver (SIGKILL) half-way, resume, and count what was
    /// lost and redone.
    #[arg(long, default_value_t = false)]
    kill_half: bool,
}

impl Settings {
    fn blocks(&self) -> u64 {
        self.per_dim.pow(3)
    }
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

/// Block ids, a bit each (ids of a cubic grid are below `(3N)³/6`).
#[derive(Debug, Default)]
struct IdBits(Vec<u64>);

impl IdBits {
    fn insert(&mut self, id: u64) {
        let word = (id / 64) as usize;
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (id % 64);
    }

    /// Ids in `self`, and in `self` or `other`, and in both.
    fn counts(&self, other: &IdBits) -> (u64, u64, u64) {
        let word = |bits: &IdBits, i: usize| bits.0.get(i).copied().unwrap_or(0);
        let words = self.0.len().max(other.0.len());
        (0..words).fold((0, 0, 0), |(own, either, both), i| {
            let (a, b) = (word(self, i), word(other, i));
            let ones = |w: u64| w.count_ones() as u64;
            (own + ones(a), either + ones(a | b), both + ones(a & b))
        })
    }
}

/// What the workers of one driver run noted.
#[derive(Debug, Default)]
struct Seen {
    /// Blocks handed out, by id, noted before they are released.
    ids: Mutex<IdBits>,
    /// How many were released.
    released: AtomicU64,
}

impl Seen {
    fn note(&self, ids: impl Iterator<Item = u64>) {
        let mut bits = self.ids.lock().expect("no worker panics holding it");
        ids.for_each(|id| bits.insert(id));
    }
}

/// Acquires `batch` blocks at a time and releases them as done, noting
/// each in `seen`, until the driver says Shutdown (`Ok`) or is gone.
async fn noting_worker(mut client: Client, batch: u32, seen: Arc<Seen>) -> Result<(), String> {
    loop {
        let blocks = match client.acquire(batch).await.map_err(|e| e.to_string())? {
            Acquired::Blocks(blocks) => blocks,
            Acquired::Shutdown { .. } => break,
        };
        seen.note(blocks.iter().map(|b| b.block_id));
        let results: Vec<BlockResult> = (blocks.iter())
            .map(|b| BlockResult {
                block_id: b.block_id,
                ok: true,
                skipped: false,
                error: None,
                seconds: Some(BLOCK_SECONDS),
                cost: None,
            })
            .collect();
        let count = results.len() as u64;
        client.release(results).await.map_err(|e| e.to_string())?;
        seen.released.fetch_add(count, Relaxed);
    }
    client.close().await.map_err(|e| e.to_string())
}

/// Starts the driver in `dir` (resuming what is there), runs the
/// workers until it ends, or until `kill_at` blocks were released, when
/// it is killed. What the workers saw, and the seconds it took.
fn drive(dir: &Path, settings: &Settings, kill_at: Option<u64>) -> Result<(Seen, f64), String> {
    // A killed driver's context names its dead port.
    let _ = std::fs::remove_file(dir.join("run").join("context.json"));
    let mut driver = Driver::start(dir, &pipeline_toml(settings.per_dim), &[])?;
    let context = driver.wait_for_context()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let seen = Arc::new(Seen::default());
    let start = Instant::now();
    let outcomes = runtime.block_on(work(context, settings, &seen, kill_at, &mut driver))?;
    let failed = outcomes.iter().find_map(|o| o.as_ref().err());
    if failed.is_some() {
        // Workers that gave up leave a driver waiting for them.
        let _ = driver.child.kill();
    }
    let status = driver.child.wait().map_err(|e| e.to_string())?;
    let seconds = start.elapsed().as_secs_f64();
    if kill_at.is_none() && (!status.success() || failed.is_some()) {
        let log = std::fs::read_to_string(dir.join("driver.err")).unwrap_or_default();
        return Err(format!("driver {status}, worker {failed:?}\n{log}"));
    }
    let seen = Arc::into_inner(seen).ok_or("the workers still hold their notes")?;
    Ok((seen, seconds))
}

/// Runs the workers to their end, killing the driver once `kill_at`
/// blocks were released; each worker's outcome.
async fn work(
    context: WorkerContext,
    settings: &Settings,
    seen: &Arc<Seen>,
    kill_at: Option<u64>,
    driver: &mut Driver,
) -> Result<Vec<Result<(), String>>, String> {
    let clients = common::connect(context, "noop", settings.workers).await?;
    let workers: Vec<_> = (clients.into_iter())
        .map(|client| tokio::spawn(noting_worker(client, settings.batch, seen.clone())))
        .collect();
    if let Some(kill_at) = kill_at {
        let working = |workers: &[_]| workers.iter().any(|w: &JoinHandle<_>| !w.is_finished());
        while seen.released.load(Relaxed) < kill_at && working(&workers) {
            tokio::time::sleep(KILL_POLL).await;
        }
        driver
            .child
            .kill()
            .map_err(|e| format!("kill -9 the driver: {e}"))?;
    }
    let mut outcomes = Vec::new();
    for worker in workers {
        outcomes.push(worker.await.map_err(|e| e.to_string())?);
    }
    Ok(outcomes)
}

/// The peak RSS of the largest child reaped so far, in MB: the drivers,
/// before any other command runs.
fn drivers_peak_rss_mb() -> f64 {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage never fails for children");
    usage.max_rss() as f64 / 1024.0
}

/// Runs every block, in one go or killed half-way and resumed.
fn run(dir: &Path, settings: &Settings) -> Result<(), String> {
    let blocks = settings.blocks();
    let seconds = match settings.kill_half {
        false => run_through(dir, settings)?,
        true => kill_and_resume(dir, settings)?,
    };
    let rss = drivers_peak_rss_mb();
    let blocks = blocks as f64;
    println!(
        "run: {blocks} blocks in {seconds:.1} s ({:.0} blocks/s); driver peak RSS {rss:.0} MB, {:.2} B/block",
        blocks / seconds,
        rss * 1024.0 * 1024.0 / blocks
    );
    Ok(())
}

/// Runs every block in one go; the seconds it took.
fn run_through(dir: &Path, settings: &Settings) -> Result<f64, String> {
    let (seen, seconds) = drive(dir, settings, None)?;
    let (done, blocks) = (seen.released.load(Relaxed), settings.blocks());
    match done == blocks {
        true => Ok(seconds),
        false => Err(format!("{done} of {blocks} blocks done")),
    }
}

/// Kills the driver half-way and resumes; checks that no block was lost
/// and at most a batch per worker was done twice. The seconds both runs
/// took.
fn kill_and_resume(dir: &Path, settings: &Settings) -> Result<f64, String> {
    let blocks = settings.blocks();
    let (before, killed_after) = drive(dir, settings, Some(blocks / 2))?;
    let released = before.released.load(Relaxed);
    println!("killed: after {killed_after:.1} s, {released} blocks released");
    let (after, resumed) = drive(dir, settings, None)?;
    let before_ids = before.ids.lock().expect("not poisoned");
    let (handed_out, either, both) = after.ids.lock().expect("not poisoned").counts(&before_ids);
    println!("resumed: {handed_out} blocks handed out in {resumed:.1} s, {both} of them redone");
    let in_flight = settings.workers as u64 * settings.batch as u64;
    if either != blocks || both > in_flight {
        return Err(format!(
            "{either} of {blocks} blocks done in all; {both} redone, more than {in_flight} in flight"
        ));
    }
    Ok(killed_after + resumed)
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
    let blocks = settings.blocks() as f64;
    run(dir, settings)?;
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
    let settings = Settings::parse_from(std::env::args().filter(|a| a != "--bench"));
    println!("driver: {}; {settings:?}", driver_program().display());
    if let Err(error) = measure(&settings) {
        panic!("{error}");
    }
}
