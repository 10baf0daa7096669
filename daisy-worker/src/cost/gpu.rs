//! GPU utilisation and memory per block, from NVIDIA's management library
//! through its command-line face, `nvidia-smi`: absent (no figures at
//! all) where `nvidia-smi` is not installed or finds no GPU.
//!
//! A block's processes may be gone by the time it is measured, and NVML
//! reports only live ones, so a sampler thread queries once a
//! [`SAMPLE_EVERY`]: the GPUs' utilisation, and the memory each compute
//! process holds, filed under the process's group (a block command's
//! group, or a worker command's). A block's figures are then its group's
//! samples during the block: the most memory held at once and the mean
//! utilisation of the GPUs it used. A block shorter than the sampling
//! period may fall between two samples and show none.

use std::collections::{BTreeMap, VecDeque};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// How often the sampler queries `nvidia-smi`.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples older than this are dropped: a block longer than it is
/// measured over its last part only.
const KEEP: Duration = Duration::from_secs(3600);
const NVIDIA_SMI: &str = "nvidia-smi";
const APPS_QUERY: &str = "--query-compute-apps=pid,gpu_uuid,used_gpu_memory";
const GPUS_QUERY: &str = "--query-gpu=uuid,utilization.gpu";
const CSV: &str = "--format=csv,noheader,nounits";

/// One compute process on one GPU, as `nvidia-smi` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeApp {
    pub pid: i32,
    pub gpu: String,
    /// `None` where the driver does not say (`[N/A]`).
    pub mem_mib: Option<u64>,
}

/// Parses `--query-compute-apps=pid,gpu_uuid,used_gpu_memory
/// --format=csv,noheader,nounits`: `pid, uuid, MiB` per line.
pub fn parse_compute_apps(csv: &str) -> Vec<ComputeApp> {
    let row = |line: &str| {
        let [pid, gpu, mem] = fields(line)?;
        Some(ComputeApp {
            pid: pid.parse().ok()?,
            gpu: gpu.to_string(),
            mem_mib: mem.parse().ok(),
        })
    };
    csv.lines().filter_map(row).collect()
}

/// Parses `--query-gpu=uuid,utilization.gpu --format=csv,noheader,nounits`:
/// `uuid, percent` per line; a GPU that does not report is left out.
pub fn parse_utilisation(csv: &str) -> BTreeMap<String, f32> {
    let row = |line: &str| {
        let [gpu, util] = fields(line)?;
        Some((gpu.to_string(), util.parse().ok()?))
    };
    csv.lines().filter_map(row).collect()
}

fn fields<const N: usize>(line: &str) -> Option<[&str; N]> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    fields.try_into().ok()
}

/// What a block's group did on the GPUs during the block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuCost {
    pub util_pct: f32,
    pub mem_bytes: u64,
}

/// One query of both tables, its processes filed by process group.
#[derive(Clone, Debug)]
struct Sample {
    at: Instant,
    util: BTreeMap<String, f32>,
    /// (group, gpu, bytes)
    apps: Vec<(i32, String, u64)>,
}

/// The samples of the last [`KEEP`], filled by a thread.
#[derive(Default)]
pub struct GpuSampler {
    samples: Mutex<VecDeque<Sample>>,
}

/// The sampler, started on first use; `None` where there is no GPU to
/// sample (no `nvidia-smi`, or it fails).
pub fn sampler() -> Option<&'static GpuSampler> {
    static SAMPLER: OnceLock<Option<GpuSampler>> = OnceLock::new();
    let sampler = SAMPLER.get_or_init(|| sample(NVIDIA_SMI).map(|_| GpuSampler::default()));
    let sampler = sampler.as_ref()?;
    static THREAD: OnceLock<()> = OnceLock::new();
    THREAD.get_or_init(|| start_thread(sampler));
    Some(sampler)
}

fn start_thread(sampler: &'static GpuSampler) {
    let run = move || loop {
        if let Some(sample) = sample(NVIDIA_SMI) {
            sampler.push(sample);
        }
        thread::sleep(SAMPLE_EVERY);
    };
    if let Err(e) = thread::Builder::new().name("gpu-sampler".into()).spawn(run) {
        tracing::warn!("cannot start the GPU sampler, no GPU figures: {e}");
    }
}

/// Both tables now, or `None` if `program` cannot be run or fails.
fn sample(program: &str) -> Option<Sample> {
    let at = Instant::now();
    let apps = parse_compute_apps(&query(program, APPS_QUERY)?);
    let util = parse_utilisation(&query(program, GPUS_QUERY)?);
    let apps = apps.into_iter().filter_map(|app| {
        let group = super::proc_files::read_process_group(app.pid)?;
        Some((group, app.gpu, app.mem_mib.unwrap_or(0) * 1024 * 1024))
    });
    Some(Sample {
        at,
        util,
        apps: apps.collect(),
    })
}

fn query(program: &str, what: &str) -> Option<String> {
    let output = Command::new(program)
        .args([what, CSV])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

impl GpuSampler {
    fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        while samples.front().is_some_and(|s| s.at.elapsed() > KEEP) {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// What process group `group` did on the GPUs since `since`: zero if
    /// it held no GPU memory in any sample.
    pub fn cost_of(&self, group: i32, since: Instant) -> GpuCost {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        cost_in(samples.iter().filter(|s| s.at >= since), group)
    }
}

fn cost_in<'s>(samples: impl Iterator<Item = &'s Sample>, group: i32) -> GpuCost {
    let (mut mem_bytes, mut utils) = (0, Vec::new());
    for sample in samples {
        let mine = sample.apps.iter().filter(|(g, _, _)| *g == group);
        let mine: Vec<_> = mine.collect();
        if mine.is_empty() {
            continue;
        }
        mem_bytes = mem_bytes.max(mine.iter().map(|(_, _, bytes)| bytes).sum());
        let used = mine.iter().filter_map(|(_, gpu, _)| sample.util.get(gpu));
        utils.push(used.copied().fold(0.0, f32::max));
    }
    let util_pct = match utils.len() {
        0 => 0.0,
        n => utils.iter().sum::<f32>() / n as f32,
    };
    GpuCost {
        util_pct,
        mem_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded in nvidia-smi's documented CSV format (`nvidia-smi
    /// --help-query-compute-apps`, `--help-query-gpu`), two GPUs.
    const APPS: &str = "\
4242, GPU-5f3c9a1e-0b1d-4f2e-9c8a-2d7e6b1a0c11, 1536
4243, GPU-5f3c9a1e-0b1d-4f2e-9c8a-2d7e6b1a0c11, 512
5000, GPU-a0b1c2d3-e4f5-6789-abcd-ef0123456789, [N/A]
";
    const UTIL: &str = "\
GPU-5f3c9a1e-0b1d-4f2e-9c8a-2d7e6b1a0c11, 87
GPU-a0b1c2d3-e4f5-6789-abcd-ef0123456789, [Not Supported]
";

    #[test]
    fn compute_apps_are_parsed_and_unknown_memory_is_none() {
        let apps = parse_compute_apps(APPS);
        assert_eq!(apps.len(), 3);
        assert_eq!(
            apps[0],
            ComputeApp {
                pid: 4242,
                gpu: "GPU-5f3c9a1e-0b1d-4f2e-9c8a-2d7e6b1a0c11".into(),
                mem_mib: Some(1536),
            }
        );
        assert_eq!(apps[2].mem_mib, None);
        assert!(parse_compute_apps("").is_empty());
        assert!(parse_compute_apps("No running processes found\n").is_empty());
    }

    #[test]
    fn utilisation_is_parsed_and_a_gpu_without_it_left_out() {
        let util = parse_utilisation(UTIL);
        assert_eq!(util.len(), 1);
        assert_eq!(util["GPU-5f3c9a1e-0b1d-4f2e-9c8a-2d7e6b1a0c11"], 87.0);
    }

    #[test]
    fn a_group_costs_its_peak_memory_and_the_mean_use_of_its_gpus() {
        let gpu = "GPU-5f3c9a1e-0b1d-4f2e-9c8a-2d7e6b1a0c11".to_string();
        let sample = |util: f32, mine: u64, other: u64| Sample {
            at: Instant::now(),
            util: BTreeMap::from([(gpu.clone(), util)]),
            apps: vec![
                (7, gpu.clone(), mine),
                (7, gpu.clone(), 1),
                (8, gpu.clone(), other),
            ],
        };
        let samples = [sample(80.0, 100, 5000), sample(40.0, 300, 5000)];
        let cost = cost_in(samples.iter(), 7);
        assert_eq!(
            cost,
            GpuCost {
                util_pct: 60.0,
                mem_bytes: 301
            }
        );
        let absent = cost_in(samples.iter(), 9);
        assert_eq!(
            absent,
            GpuCost {
                util_pct: 0.0,
                mem_bytes: 0
            }
        );
    }

    #[test]
    fn without_nvidia_smi_there_is_nothing_to_sample() {
        assert!(sample("/nonexistent/nvidia-smi").is_none());
        assert!(sample("false").is_none());
    }
}
