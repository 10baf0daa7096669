//! What blocks cost, drawn for tasks that tracked resources: a histogram
//! per measure, and the done-marker picture ([`slice`]) coloured by each
//! block's run time, so slow regions of a volume stand out.

use super::slice::{self, Shading, LEGEND_HEIGHT, MARGIN};
use super::svg::{tick_label, Chart, Rect, Svg, AXIS};
use crate::inspect::cost_summary::{Measure, Unit, MEASURES};
use crate::inspect::human::human_seconds;
use crate::run_dir::done_marker::costs::StoredCost;
use crate::run_dir::run_state::BlockStates;
use daisy_core::TaskIdx;
use serde::Serialize;

/// Colours from the shortest run time to the longest.
const HEAT: [&str; 8] = [
    "#fff3b0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026",
];
const BINS: usize = 20;
const WIDTH: f64 = 270.0;
const HEIGHT: f64 = 150.0;
/// A histogram's plot area, inside its title and axis labels.
const PLOT_LEFT: f64 = 34.0;
const PLOT_TOP: f64 = 22.0;
const PLOT_WIDTH: f64 = WIDTH - PLOT_LEFT - 10.0;
const PLOT_HEIGHT: f64 = HEIGHT - PLOT_TOP - 28.0;

/// The task's cost pictures: its run-time picture, then a histogram per
/// one of its `distributions`; none if no block was measured.
pub fn render(states: &BlockStates, task: TaskIdx, distributions: &[Distribution]) -> Vec<Chart> {
    let blocks = states.measured_blocks(task);
    let Some(longest) = blocks.iter().map(|(_, c)| c.wall_seconds).reduce(f32::max) else {
        return Vec::new();
    };
    let id = &states.graph().task(task).id;
    let mut charts = vec![run_time_picture(states, task, longest as f64)];
    charts.extend(distributions.iter().map(|d| histogram(id, d)));
    charts
}

/// The heat level (1..=8) of a run time, against the longest.
fn level(seconds: f64, longest: f64) -> usize {
    ((seconds / longest * HEAT.len() as f64).ceil() as usize).clamp(1, HEAT.len())
}

fn run_time_picture(states: &BlockStates, task: TaskIdx, longest: f64) -> Chart {
    let step = longest / HEAT.len() as f64;
    let show = |level: usize| {
        let (from, to) = (step * (level - 1) as f64, step * level as f64);
        format!("run {} – {}", human_seconds(from), human_seconds(to))
    };
    let shading = Shading {
        level: &|block| {
            let cost = states.block_cost(block)?;
            Some(level(cost.wall_seconds as f64, longest))
        },
        colour: &|level| HEAT[level - 1],
        label: &show,
        cell_shows: "the longest run time",
        also: None,
    };
    let title = format!("{}, run time per block", states.graph().task(task).id);
    let mut chart = slice::draw(states.graph(), task, &title, &shading);
    draw_heat_legend(&mut chart, &show, longest);
    chart.finish()
}

/// A swatch per heat level, named by `show` on hover, and the range.
fn draw_heat_legend(chart: &mut Svg, show: &dyn Fn(usize) -> String, longest: f64) {
    let y = chart.height() - LEGEND_HEIGHT + 10.0;
    for (i, colour) in HEAT.iter().enumerate() {
        let swatch = Rect {
            x: MARGIN + 14.0 * i as f64,
            y,
            width: 14.0,
            height: 10.0,
        };
        chart.rect(swatch, colour, Some(&show(i + 1)));
    }
    let x = MARGIN + 14.0 * HEAT.len() as f64 + 6.0;
    let legend = format!("0 – {} (blank: not measured)", human_seconds(longest));
    chart.text(x, y + 9.0, "start", &legend);
}

/// How one measure's values are distributed over a task's measured
/// blocks: blocks per bin, the bins of equal width from 0 to the largest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Distribution {
    pub measure: &'static str,
    pub unit: Unit,
    pub bin_width: f64,
    pub counts: Vec<u64>,
}

impl Distribution {
    fn of(measure: &Measure, values: &[f64]) -> Self {
        let largest = values.iter().copied().fold(0.0, f64::max);
        let bin_width = (largest / BINS as f64).max(f64::MIN_POSITIVE);
        let mut counts = vec![0u64; BINS];
        for value in values {
            counts[((value / bin_width) as usize).min(BINS - 1)] += 1;
        }
        Self {
            measure: measure.name,
            unit: measure.unit,
            bin_width,
            counts,
        }
    }
}

/// The distribution of each measure `task`'s measured blocks have.
pub fn distributions(states: &BlockStates, task: TaskIdx) -> Vec<Distribution> {
    let blocks = states.measured_blocks(task);
    let costs: Vec<StoredCost> = blocks.into_iter().map(|(_, cost)| cost).collect();
    let of = |measure: &Measure| {
        let values: Vec<f64> = costs.iter().filter_map(measure.value).collect();
        (!values.is_empty()).then(|| Distribution::of(measure, &values))
    };
    MEASURES.iter().filter_map(of).collect()
}

/// The bars of a distribution of `task`'s blocks.
fn histogram(task: &str, distribution: &Distribution) -> Chart {
    let tallest = distribution
        .counts
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut chart = Svg::new(WIDTH, HEIGHT);
    let title = format!("{task}: {}", distribution.measure);
    chart.text(PLOT_LEFT, 14.0, "start", &title);
    draw_bars(&mut chart, distribution, tallest);
    let (base, unit) = (PLOT_TOP + PLOT_HEIGHT, distribution.unit);
    let right = PLOT_LEFT + PLOT_WIDTH;
    chart.line((PLOT_LEFT, base), (right, base), AXIS);
    chart.text(PLOT_LEFT, base + 14.0, "start", &unit.show(0.0));
    let largest = distribution.bin_width * BINS as f64;
    chart.text(right, base + 14.0, "end", &unit.show(largest));
    chart.text(PLOT_LEFT - 4.0, PLOT_TOP + 8.0, "end", &tick_label(tallest));
    chart.finish()
}

/// A bar per bin that has blocks, `tallest` blocks reaching the top.
fn draw_bars(chart: &mut Svg, distribution: &Distribution, tallest: f64) {
    let (unit, bin_width) = (distribution.unit, distribution.bin_width);
    let bar = PLOT_WIDTH / BINS as f64;
    for (bin, &count) in distribution
        .counts
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
    {
        let from = bin as f64 * bin_width;
        let height = PLOT_HEIGHT * count as f64 / tallest;
        let rect = Rect {
            x: PLOT_LEFT + bin as f64 * bar + 0.5,
            y: PLOT_TOP + PLOT_HEIGHT - height,
            width: (bar - 1.0).max(0.5),
            height,
        };
        let to = unit.show(from + bin_width);
        let title = format!("{} – {to}: {count} blocks", unit.show(from));
        chart.rect(rect, "#4a7ab5", Some(&title));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_times_take_one_of_eight_levels_up_to_the_longest() {
        assert_eq!(level(0.0, 2.0), 1);
        assert_eq!(level(0.2, 2.0), 1);
        assert_eq!(level(1.1, 2.0), 5);
        assert_eq!(level(2.0, 2.0), 8);
    }

    #[test]
    fn a_distribution_counts_every_value_in_equal_bins_from_zero() {
        let values: Vec<f64> = (1..=40).map(f64::from).collect();
        let distribution = Distribution::of(&MEASURES[0], &values);
        assert_eq!(distribution.bin_width, 2.0);
        assert_eq!(distribution.counts.iter().sum::<u64>(), 40);
        assert_eq!((distribution.counts[0], distribution.counts[19]), (1, 3));
    }
}
