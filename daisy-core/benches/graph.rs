//! Graph benchmark: enumerate every block of every level, lazily, and look
//! up its upstream blocks (into one reused `Vec`), on daisy's four graph
//! cases; compare with daisy 2.0 measured in the same run.
//!
//! Each case runs in a child process (this executable again, with
//! `DAISY_GRAPH_BENCH_CASE` set) so that its peak RSS (`VmHWM`) belongs to
//! that case alone; the child prints one JSON line, the parent prints the
//! table. The daisy 2.0 baseline is `benches/daisy2_graph.py`, run with the
//! interpreter named by `DAISY2_PYTHON` (default `python3`); if that has no
//! daisy 2.0.0, the baseline is skipped with a loud line saying how to get
//! it. `docs/benchmarks.md` explains the cases and records the figures.
//!
//! ```text
//! DAISY2_PYTHON=v/bin/python cargo bench -p daisy-core --bench graph [-- CASE..]
//! ```

use daisy_core::{Block, DependencyGraph, Fit, Roi, TaskIdx, TaskSpec};
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Set in a child process to the number of the case it runs.
const CASE_ENV: &str = "DAISY_GRAPH_BENCH_CASE";
/// The Python interpreter with daisy 2.0.0 installed.
const PYTHON_ENV: &str = "DAISY2_PYTHON";
/// Overrides how often daisy 2.0 runs each case (the best counts).
const REPEAT_ENV: &str = "DAISY2_REPEAT";
/// `1`: time daisy's public Python wrapper instead of its extension class.
const WRAPPED_ENV: &str = "DAISY2_WRAPPED";
/// Runs of our enumeration per case; the best counts.
const RUNS: u32 = 3;
const DAISY2_VERSION: &str = "2.0.0";

/// One of daisy's graph cases: a cube of `total` voxels cut into blocks
/// that read `read` and write `write` (offset, shape per dimension,
/// relative to the block), fit valid, read/write conflicts on.
struct Case {
    number: u32,
    total: i64,
    read: (i64, i64),
    write: (i64, i64),
    /// daisy 2.0's figure on its authors' machine.
    published_seconds: f64,
}

impl Case {
    fn describe(&self) -> String {
        let context = self.write.0 - self.read.0;
        format!(
            "{}^3, blocks {}^3, context {context}",
            self.total, self.write.1
        )
    }

    /// The task. With no context, conflicts make no difference (one level);
    /// they stay on, as daisy's default.
    fn spec(&self) -> TaskSpec {
        let cube = |(offset, shape): (i64, i64)| Roi::from_slices(&[offset; 3], &[shape; 3]);
        let mut spec = TaskSpec::new(
            "bench",
            cube((0, self.total)),
            cube(self.read),
            cube(self.write),
        );
        spec.fit = Fit::Valid;
        spec.read_write_conflict = true;
        spec
    }

    /// Runs of daisy 2.0: one for the slow cases, unless overridden.
    fn daisy2_runs(&self) -> u32 {
        let default = if self.published_seconds > 3.0 { 1 } else { 3 };
        std::env::var(REPEAT_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }
}

const CASES: [Case; 4] = [
    Case {
        number: 1,
        total: 1000,
        read: (0, 10),
        write: (0, 10),
        published_seconds: 1.96,
    },
    Case {
        number: 2,
        total: 1000,
        read: (0, 14),
        write: (2, 10),
        published_seconds: 7.1,
    },
    Case {
        number: 3,
        total: 200,
        read: (0, 4),
        write: (0, 4),
        published_seconds: 0.25,
    },
    Case {
        number: 4,
        total: 500,
        read: (0, 7),
        write: (1, 5),
        published_seconds: 7.2,
    },
];

/// What one side measured for one case.
#[derive(Clone, Debug)]
struct Measurement {
    seconds: f64,
    blocks: u64,
    /// Sum over blocks of the number of upstream blocks.
    upstream: u64,
    /// Spatial ids of all blocks and all their upstream blocks, summed
    /// (wrapping): equal sums mean, in all likelihood, equal graphs.
    id_sum: u64,
    peak_kib: u64,
}

impl Measurement {
    fn blocks_per_second(&self) -> f64 {
        self.blocks as f64 / self.seconds
    }

    fn peak_mib(&self) -> f64 {
        self.peak_kib as f64 / 1024.0
    }

    /// Reads the JSON line a child or the Python script printed.
    fn parse(line: &str) -> Option<Self> {
        Some(Self {
            seconds: json_value(line, "seconds")?.parse().ok()?,
            blocks: json_value(line, "blocks")?.parse().ok()?,
            upstream: json_value(line, "upstream")?.parse().ok()?,
            id_sum: json_value(line, "id_sum")?.parse().ok()?,
            peak_kib: json_value(line, "peak_rss_kib")?.parse().ok()?,
        })
    }
}

/// Checksum of one enumeration, so that nothing is optimised away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Checksum {
    blocks: u64,
    upstream: u64,
    id_sum: u64,
}

/// Builds the graph, walks every level lazily and looks up the upstream
/// blocks of each block.
fn enumerate(spec: &TaskSpec) -> Checksum {
    let graph = DependencyGraph::new(vec![spec.clone()]).expect("benchmark geometry is valid");
    let task = graph.task_graph(TaskIdx(0));
    let mut sum = Checksum::default();
    let mut upstream: Vec<Block> = Vec::new();
    for level in 0..task.num_levels() {
        task.for_each_level_block(level, |block| {
            graph.upstream_into(black_box(block), &mut upstream);
            sum.blocks += 1;
            sum.upstream += upstream.len() as u64;
            sum.id_sum = upstream
                .iter()
                .fold(sum.id_sum.wrapping_add(block.id.spatial), |s, b| {
                    s.wrapping_add(b.id.spatial)
                });
        });
    }
    black_box(sum)
}

/// Child: runs one case `RUNS` times and prints the best as JSON.
fn run_child(case: &Case) {
    let spec = case.spec();
    let mut best = f64::INFINITY;
    let mut checksum = Checksum::default();
    for _ in 0..RUNS {
        let start = Instant::now();
        checksum = enumerate(&spec);
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "{{\"case\": {}, \"seconds\": {best}, \"runs\": {RUNS}, \"blocks\": {}, \"upstream\": {}, \
         \"id_sum\": {}, \"peak_rss_kib\": {}}}",
        case.number,
        checksum.blocks,
        checksum.upstream,
        checksum.id_sum,
        peak_rss_kib().unwrap_or(0)
    );
}

/// `VmHWM` of this process, in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The text of the value of `"key": value` in a flat JSON object (no
/// serde_json here: daisy-core does not depend on it).
fn json_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pattern = format!("\"{key}\":");
    let start = line.find(&pattern)? + pattern.len();
    let rest = line[start..].trim_start();
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// Runs `command` and parses the last JSON line it printed; on failure
/// says what went wrong, with the command's stderr.
fn measure(command: &mut Command, what: &str) -> Result<Measurement, String> {
    let output = command
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("{what}: {}\n{stderr}", output.status));
    }
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    line.and_then(Measurement::parse)
        .ok_or_else(|| format!("{what}: no result line in output:\n{stdout}{stderr}"))
}

fn measure_ours(case: &Case) -> Result<Measurement, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let mut command = Command::new(exe);
    command.env(CASE_ENV, case.number.to_string());
    measure(&mut command, &format!("case {} (ours)", case.number))
}

fn measure_daisy2(python: &str, case: &Case) -> Result<Measurement, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/daisy2_graph.py");
    let mut command = Command::new(python);
    command
        .arg(script)
        .arg(case.number.to_string())
        .arg("--repeat")
        .arg(case.daisy2_runs().to_string());
    if std::env::var(WRAPPED_ENV).is_ok_and(|v| v == "1") {
        command.arg("--wrapped");
    }
    measure(&mut command, &format!("case {} (daisy 2.0)", case.number))
}

/// The interpreter with daisy 2.0.0, or `None` after saying loudly why
/// the baseline is skipped and how to get it.
fn daisy2_python() -> Option<String> {
    let python = std::env::var(PYTHON_ENV).unwrap_or_else(|_| "python3".to_string());
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
    println!("!!!! To get it: python3 -m venv v && v/bin/pip install daisy=={DAISY2_VERSION} && {PYTHON_ENV}=v/bin/python cargo bench -p daisy-core --bench graph");
    None
}

/// What the columns measure.
fn print_setup(python: Option<&str>) {
    println!("ours: build the graph, walk all levels lazily, upstream_into() per block (one reused Vec); best of {RUNS}, one process per case (peak = VmHWM)");
    if let Some(python) = python {
        let api = match std::env::var(WRAPPED_ENV).is_ok_and(|v| v == "1") {
            true => "public Python wrapper daisy.BlockwiseDependencyGraph",
            false => "extension class daisy._daisy.BlockwiseDependencyGraph",
        };
        println!("daisy 2.0: {python}, {api}, enumerate_all_dependencies(); best of {REPEAT_ENV} or 3 (1 for the ~7 s cases); peak = ru_maxrss");
    }
}

/// One case, both sides.
struct Row<'a> {
    case: &'a Case,
    ours: Measurement,
    daisy2: Option<Measurement>,
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<4} {:<30} {:>9} {:>9} {:>12} {:>8} | {:>9} {:>12} {:>8} {:>8} | {:>9}",
        "case",
        "geometry",
        "blocks",
        "ours s",
        "ours blk/s",
        "ours MiB",
        "daisy2 s",
        "daisy2 blk/s",
        "d2 MiB",
        "speedup",
        "published"
    );
    for row in rows {
        let ours = &row.ours;
        let daisy2 = match &row.daisy2 {
            Some(d) => format!(
                "{:>9.3} {:>12.0} {:>8.0} {:>7.1}x",
                d.seconds,
                d.blocks_per_second(),
                d.peak_mib(),
                d.seconds / ours.seconds
            ),
            None => format!("{:>9} {:>12} {:>8} {:>8}", "-", "-", "-", "-"),
        };
        println!(
            "{:<4} {:<30} {:>9} {:>9.4} {:>12.0} {:>8.1} | {daisy2} | {:>8.2} s",
            row.case.number,
            row.case.describe(),
            ours.blocks,
            ours.seconds,
            ours.blocks_per_second(),
            ours.peak_mib(),
            row.case.published_seconds
        );
    }
}

/// Loud lines for every case where our counts differ from daisy's, or
/// where we are less than 10 times faster.
fn print_checks(rows: &[Row]) {
    for row in rows {
        let Some(daisy2) = &row.daisy2 else { continue };
        let (ours, n) = (&row.ours, row.case.number);
        println!(
            "case {n}: blocks ours {} daisy2 {}, upstream links ours {} daisy2 {}, \
             id sum ours {} daisy2 {}",
            ours.blocks, daisy2.blocks, ours.upstream, daisy2.upstream, ours.id_sum, daisy2.id_sum
        );
        let same = (ours.blocks, ours.upstream, ours.id_sum)
            == (daisy2.blocks, daisy2.upstream, daisy2.id_sum);
        if !same {
            println!("!!!! case {n}: MISMATCH between our graph and daisy 2.0's");
        }
        if daisy2.seconds / ours.seconds < 10.0 {
            println!("!!!! case {n}: less than 10x faster than daisy 2.0");
        }
    }
}

/// Case numbers given after `--` (none: all); cargo's `--bench` is ignored.
fn selected_cases() -> Vec<&'static Case> {
    let wanted: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    CASES
        .iter()
        .filter(|c| wanted.is_empty() || wanted.contains(&c.number))
        .collect()
}

fn main() {
    if let Ok(number) = std::env::var(CASE_ENV) {
        let case = CASES.iter().find(|c| c.number.to_string() == number);
        run_child(case.expect("DAISY_GRAPH_BENCH_CASE names a case"));
        return;
    }
    let python = daisy2_python();
    print_setup(python.as_deref());
    let mut rows = Vec::new();
    for case in selected_cases() {
        eprintln!("case {}: {} ...", case.number, case.describe());
        let ours = measure_ours(case).unwrap_or_else(|e| panic!("{e}"));
        let daisy2 = python.as_deref().and_then(|p| {
            measure_daisy2(p, case)
                .map_err(|e| println!("!!!! daisy 2.0 baseline failed: {e}"))
                .ok()
        });
        rows.push(Row { case, ours, daisy2 });
    }
    print_table(&rows);
    print_checks(&rows);
}
