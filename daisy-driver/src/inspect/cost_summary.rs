//! What a task's blocks cost, summed up from the cost arrays of its done
//! marker ([`crate::run_dir::done_marker::costs`]) for `status` and `report`: per
//! measure the median, 95th percentile, maximum and total over the
//! measured blocks, and the slowest blocks by wall time, with their ids.
//! GPU measures appear only if some block was measured on a GPU.

use crate::inspect::human::{human_bytes, human_seconds};
use crate::run_dir::done_marker::costs::StoredCost;
use serde::Serialize;

/// The slowest blocks listed per task.
pub const SLOWEST_LISTED: usize = 5;

/// A task's measured blocks, summed up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskCosts {
    /// Blocks whose cost is stored (done while the task tracked resources).
    pub measured: u64,
    pub measures: Vec<MeasureSummary>,
    /// The longest-running blocks, longest first.
    pub slowest: Vec<BlockCostRow>,
}

/// One measure over a task's measured blocks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MeasureSummary {
    /// As daisy 2.0.0 names its array: `wall_seconds`, `peak_rss_bytes`, …
    pub measure: &'static str,
    pub unit: Unit,
    pub median: f64,
    pub p95: f64,
    pub max: f64,
    pub total: f64,
    /// The block with the largest value.
    pub max_block_id: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Seconds,
    Bytes,
    Percent,
}

impl Unit {
    /// `value` for people: `1.5 s`, `52.4 MB`, `87 %`.
    pub fn show(self, value: f64) -> String {
        match self {
            Unit::Seconds => human_seconds(value),
            Unit::Bytes => human_bytes(value),
            Unit::Percent => format!("{value:.0} %"),
        }
    }
}

/// One block's figures, with its id.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BlockCostRow {
    pub block_id: u64,
    pub wall_seconds: f64,
    pub cpu_seconds: f64,
    pub peak_rss_bytes: u64,
    pub io_read_bytes: u64,
    pub io_write_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_util_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_mem_bytes: Option<u64>,
}

/// A measure: its name, unit and value of a block (`None`: not measured).
pub struct Measure {
    pub name: &'static str,
    pub unit: Unit,
    pub value: fn(&StoredCost) -> Option<f64>,
}

/// Every measure, in the order shown.
pub const MEASURES: [Measure; 7] = [
    measure("wall_seconds", Unit::Seconds, |c| {
        Some(c.wall_seconds as f64)
    }),
    measure("cpu_seconds", Unit::Seconds, |c| Some(c.cpu_seconds as f64)),
    measure("peak_rss_bytes", Unit::Bytes, |c| {
        Some(c.peak_rss_bytes as f64)
    }),
    measure("io_read_bytes", Unit::Bytes, |c| {
        Some(c.io_read_bytes as f64)
    }),
    measure("io_write_bytes", Unit::Bytes, |c| {
        Some(c.io_write_bytes as f64)
    }),
    measure("gpu_util_pct", Unit::Percent, |c| {
        c.gpu_util_pct.map(f64::from)
    }),
    measure("gpu_mem_bytes", Unit::Bytes, |c| {
        c.gpu_util_pct.map(|_| c.gpu_mem_bytes as f64)
    }),
];

const fn measure(name: &'static str, unit: Unit, value: fn(&StoredCost) -> Option<f64>) -> Measure {
    Measure { name, unit, value }
}

/// The summary of a task's stored costs; `None` if no block was measured.
pub fn summarise(blocks: &[(u64, StoredCost)]) -> Option<TaskCosts> {
    if blocks.is_empty() {
        return None;
    }
    let measures = MEASURES.iter().filter_map(|m| summarise_measure(m, blocks));
    let mut by_wall: Vec<&(u64, StoredCost)> = blocks.iter().collect();
    by_wall.sort_by(|a, b| b.1.wall_seconds.total_cmp(&a.1.wall_seconds));
    let slowest = by_wall
        .iter()
        .take(SLOWEST_LISTED)
        .map(|(id, c)| row(*id, c));
    Some(TaskCosts {
        measured: blocks.len() as u64,
        measures: measures.collect(),
        slowest: slowest.collect(),
    })
}

fn summarise_measure(measure: &Measure, blocks: &[(u64, StoredCost)]) -> Option<MeasureSummary> {
    let mut values: Vec<(f64, u64)> = (blocks.iter())
        .filter_map(|(id, cost)| Some(((measure.value)(cost)?, *id)))
        .collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize].0;
    let &(max, max_block_id) = values.last().expect("not empty");
    Some(MeasureSummary {
        measure: measure.name,
        unit: measure.unit,
        median: at(0.5),
        p95: at(0.95),
        max,
        total: values.iter().map(|(v, _)| v).sum(),
        max_block_id,
    })
}

fn row(block_id: u64, cost: &StoredCost) -> BlockCostRow {
    BlockCostRow {
        block_id,
        wall_seconds: cost.wall_seconds as f64,
        cpu_seconds: cost.cpu_seconds as f64,
        peak_rss_bytes: cost.peak_rss_bytes,
        io_read_bytes: cost.io_read_bytes,
        io_write_bytes: cost.io_write_bytes,
        gpu_util_pct: cost.gpu_util_pct.map(f64::from),
        gpu_mem_bytes: cost.gpu_util_pct.map(|_| cost.gpu_mem_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(wall: f32, rss: u64, gpu: Option<f32>) -> StoredCost {
        StoredCost {
            wall_seconds: wall,
            cpu_seconds: wall / 2.0,
            peak_rss_bytes: rss,
            gpu_util_pct: gpu,
            gpu_mem_bytes: 7,
            ..StoredCost::default()
        }
    }

    #[test]
    fn measures_are_summed_up_and_the_slowest_blocks_named() {
        let blocks: Vec<(u64, StoredCost)> = (0..20)
            .map(|i| (100 + i, cost(1.0 + i as f32, 1000 * (20 - i), None)))
            .collect();
        let costs = summarise(&blocks).unwrap();
        assert_eq!(costs.measured, 20);
        let names: Vec<&str> = costs.measures.iter().map(|m| m.measure).collect();
        assert_eq!(
            names,
            [
                "wall_seconds",
                "cpu_seconds",
                "peak_rss_bytes",
                "io_read_bytes",
                "io_write_bytes"
            ],
            "no GPU columns without a GPU"
        );
        let wall = &costs.measures[0];
        assert_eq!(
            (wall.median, wall.p95, wall.max, wall.total),
            (11.0, 19.0, 20.0, 210.0)
        );
        assert_eq!(wall.max_block_id, 119);
        assert_eq!(costs.measures[2].max_block_id, 100);
        let slowest: Vec<u64> = costs.slowest.iter().map(|b| b.block_id).collect();
        assert_eq!(slowest, [119, 118, 117, 116, 115]);
        assert!(summarise(&[]).is_none());
    }

    #[test]
    fn gpu_measures_appear_when_a_block_had_a_gpu() {
        let blocks = [(1, cost(1.0, 1, Some(50.0))), (2, cost(1.0, 1, None))];
        let costs = summarise(&blocks).unwrap();
        let gpu = &costs.measures[5];
        assert_eq!(
            (gpu.measure, gpu.max, gpu.total),
            ("gpu_util_pct", 50.0, 50.0)
        );
        assert_eq!(costs.measures[6].max, 7.0);
    }

    #[test]
    fn units_read_as_people_write_them() {
        assert_eq!(Unit::Bytes.show(52_400_000.0), "52.4 MB");
        assert_eq!(Unit::Percent.show(87.4), "87 %");
    }
}
