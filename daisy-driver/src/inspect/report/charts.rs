//! The report's two aggregate charts: blocks per second over time (one
//! line per task) and the distribution of block run times (one histogram
//! per task). Both bin their data, so their size does not grow with the
//! number of blocks.

use super::model::{Outcome, RunModel};
use super::svg::{self, task_colour, tick_label, ticks, Chart, Rect, Svg};
use super::timeline::{TimeAxis, WIDTH};
use crate::inspect::human::human_seconds;

/// Time bins of the throughput chart: at most this many, and few enough
/// that a bin holds [`BLOCKS_PER_BIN`] blocks on average, so a short run
/// is not all spikes.
const MAX_THROUGHPUT_BINS: usize = 60;
const MIN_THROUGHPUT_BINS: usize = 5;
const BLOCKS_PER_BIN: usize = 5;
const THROUGHPUT_HEIGHT: f64 = 220.0;
/// Left margin, as the timeline's, so the time axes line up.
const LEFT: f64 = 150.0;
const TOP: f64 = 26.0;
const BOTTOM: f64 = 34.0;

/// Duration bins of each histogram.
const HISTOGRAM_BINS: usize = 30;
const HISTOGRAM_WIDTH: f64 = 360.0;
const HISTOGRAM_HEIGHT: f64 = 170.0;

/// Blocks finished per second of each task, in `bins` equal time bins
/// over the run. The blocks of a bar of many (a `blocks_done` record)
/// are spread evenly from when the first ended to when the last did.
pub fn throughput(model: &RunModel, bins: usize) -> Vec<Vec<f64>> {
    let span = model.run.span.max(1e-3);
    let bin_seconds = span / bins as f64;
    let bin_of = |time: f64| ((time / bin_seconds).max(0.0) as usize).min(bins - 1);
    let mut rates = vec![vec![0.0; bins]; model.run.tasks.len()];
    for row in &model.workers {
        for bar in row.bars.iter().filter(|b| b.outcome == Outcome::Done) {
            let rates = &mut rates[row.task];
            let (first, last) = (bin_of(bar.first), bin_of(bar.end));
            let length = bar.end - bar.first;
            for (bin, rate) in rates.iter_mut().enumerate().take(last + 1).skip(first) {
                let share = if first == last {
                    1.0
                } else {
                    let from = (bin as f64 * bin_seconds).max(bar.first);
                    let to = ((bin + 1) as f64 * bin_seconds).min(bar.end);
                    (to - from).max(0.0) / length
                };
                *rate += share * bar.count as f64 / bin_seconds;
            }
        }
    }
    rates
}

/// Blocks per second over time, one line per task.
pub fn render_throughput(model: &RunModel) -> Chart {
    let done: usize = model
        .workers
        .iter()
        .flat_map(|row| &row.bars)
        .filter(|bar| bar.outcome == Outcome::Done)
        .map(|bar| bar.count as usize)
        .sum();
    let bins = (done / BLOCKS_PER_BIN).clamp(MIN_THROUGHPUT_BINS, MAX_THROUGHPUT_BINS);
    let rates = throughput(model, bins);
    let peak = rates.iter().flatten().copied().fold(0.0, f64::max);
    let top = if peak > 0.0 { peak * 1.1 } else { 1.0 };
    let plot_height = THROUGHPUT_HEIGHT - TOP - BOTTOM;
    let y = |rate: f64| TOP + plot_height * (1.0 - rate / top);
    let axis = TimeAxis::new(LEFT, WIDTH - LEFT - 20.0, model.run.span);
    let mut chart = Svg::new(WIDTH, THROUGHPUT_HEIGHT);
    axis.draw(&mut chart, TOP, TOP + plot_height);
    chart.line((LEFT, TOP), (LEFT, TOP + plot_height), svg::AXIS);
    for tick in ticks(0.0, top, 4) {
        chart.line((LEFT - 3.0, y(tick)), (LEFT, y(tick)), svg::AXIS);
        chart.text(LEFT - 6.0, y(tick) + 4.0, "end", &tick_label(tick));
    }
    chart.text(LEFT - 40.0, TOP + plot_height / 2.0, "end", "blocks/s");
    let bin_seconds = model.run.span.max(1e-3) / bins as f64;
    for (task, task_rates) in rates.iter().enumerate() {
        let mut points = Vec::with_capacity(2 * task_rates.len());
        for (bin, rate) in task_rates.iter().enumerate() {
            points.push((axis.x(bin as f64 * bin_seconds), y(*rate)));
            points.push((axis.x((bin + 1) as f64 * bin_seconds), y(*rate)));
        }
        let peak = task_rates.iter().copied().fold(0.0, f64::max);
        let title = format!(
            "{}: peak {:.1} blocks/s (bins of {})",
            model.run.tasks[task].id,
            peak,
            human_seconds(bin_seconds)
        );
        chart.polyline(&points, task_colour(task), Some(&title));
    }
    draw_task_legend(&mut chart, model, THROUGHPUT_HEIGHT - 8.0);
    chart.finish()
}

fn draw_task_legend(chart: &mut Svg, model: &RunModel, y: f64) {
    let mut x = LEFT;
    for (i, task) in model.run.tasks.iter().enumerate() {
        let swatch = Rect {
            x,
            y: y - 9.0,
            width: 10.0,
            height: 10.0,
        };
        chart.rect(swatch, task_colour(i), None);
        chart.text(x + 14.0, y, "start", &task.id);
        x += 30.0 + 7.0 * task.id.chars().count() as f64;
    }
}

/// Attempts per duration bin of one task: done and failed counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub bin_seconds: f64,
    pub done: Vec<u64>,
    pub failed: Vec<u64>,
}

/// The run times of the attempts of task `task` in `bins` bins from 0 to
/// the longest.
pub fn histogram(model: &RunModel, task: usize, bins: usize) -> Histogram {
    // Bars of single blocks carry their run times; the blocks of
    // `blocks_done` records are in the task's run times.
    let singles = || {
        (model.workers.iter())
            .filter(move |row| row.task == task)
            .flat_map(|row| row.bars.iter())
            .filter(|bar| bar.block_id.is_some())
    };
    let summed = &model.run.tasks[task].run_times;
    let longest = singles()
        .map(|b| b.seconds())
        .fold(summed.longest, f64::max);
    let bin_seconds = (longest / bins as f64).max(1e-3);
    let mut histogram = Histogram {
        bin_seconds,
        done: vec![0; bins],
        failed: vec![0; bins],
    };
    let bin_of = |seconds: f64| ((seconds / bin_seconds) as usize).min(bins - 1);
    for bar in singles() {
        let bin = bin_of(bar.seconds());
        match bar.outcome {
            Outcome::Done => histogram.done[bin] += 1,
            Outcome::Retried | Outcome::FailedForGood => histogram.failed[bin] += 1,
        }
    }
    for (seconds, count) in summed.middles() {
        histogram.done[bin_of(seconds)] += count;
    }
    histogram
}

/// One histogram of block run times per task that ran blocks.
pub fn render_histograms(model: &RunModel) -> Vec<Chart> {
    (0..model.run.tasks.len())
        .map(|task| (task, histogram(model, task, HISTOGRAM_BINS)))
        .filter(|(_, h)| h.done.iter().chain(&h.failed).any(|n| *n > 0))
        .map(|(task, h)| render_histogram(&model.run.tasks[task].id, &h))
        .collect()
}

fn render_histogram(task: &str, histogram: &Histogram) -> Chart {
    let (left, top, bottom) = (44.0, 22.0, 30.0);
    let plot_width = HISTOGRAM_WIDTH - left - 12.0;
    let plot_height = HISTOGRAM_HEIGHT - top - bottom;
    let tallest = histogram
        .done
        .iter()
        .zip(&histogram.failed)
        .map(|(d, f)| d + f)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let bins = histogram.done.len();
    let bar_width = plot_width / bins as f64;
    let y = |count: f64| top + plot_height * (1.0 - count / tallest);
    let mut chart = Svg::new(HISTOGRAM_WIDTH, HISTOGRAM_HEIGHT);
    chart.text(left, 14.0, "start", &format!("{task}: block run times"));
    for (bin, (&done, &failed)) in histogram.done.iter().zip(&histogram.failed).enumerate() {
        let x = left + bin as f64 * bar_width;
        let from = bin as f64 * histogram.bin_seconds;
        let title = format!(
            "{}–{}: {done} done, {failed} failed",
            human_seconds(from),
            human_seconds(from + histogram.bin_seconds)
        );
        let mut stack = |count: u64, below: u64, colour| {
            if count > 0 {
                let rect = Rect {
                    x: x + 0.5,
                    y: y((below + count) as f64),
                    width: (bar_width - 1.0).max(0.5),
                    height: plot_height * count as f64 / tallest,
                };
                chart.rect(rect, colour, Some(&title));
            }
        };
        stack(done, 0, svg::DONE);
        stack(failed, done, svg::FAILED);
    }
    let base = top + plot_height;
    chart.line((left, base), (left + plot_width, base), svg::AXIS);
    chart.line((left, top), (left, base), svg::AXIS);
    let longest = histogram.bin_seconds * bins as f64;
    for tick in ticks(0.0, longest, 5) {
        let x = left + tick / longest * plot_width;
        chart.text(x, base + 14.0, "middle", &tick_label(tick));
    }
    chart.text(left + plot_width, base + 27.0, "end", "seconds");
    for tick in ticks(0.0, tallest, 3) {
        chart.text(left - 5.0, y(tick) + 4.0, "end", &tick_label(tick));
    }
    chart.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::report::model::tests::{model_of, sample_model, SUMMED_UP_EVENTS};

    #[test]
    fn throughput_counts_done_blocks_per_second_of_each_bin() {
        let model = sample_model();
        let rates = throughput(&model, 3);
        // Blocks done at 4.5 s and 6.0 s of a 9 s run: 3 s bins.
        assert_eq!(rates, vec![vec![0.0, 1.0 / 3.0, 1.0 / 3.0]]);
        let chart = render_throughput(&model).svg;
        assert_eq!(chart.matches("<polyline").count(), 1);
        assert!(
            chart.contains("a: peak 0.6 blocks/s (bins of 1.8 s)"),
            "{chart}"
        );
    }

    #[test]
    fn histograms_split_done_and_failed_attempts() {
        let model = sample_model();
        let histogram = histogram(&model, 0, 4);
        // Run times 2.0, 1.5 (done) and 1.0 (failed) in bins of 0.5 s.
        assert_eq!(histogram.bin_seconds, 0.5);
        assert_eq!(histogram.done, vec![0, 0, 0, 2]);
        assert_eq!(histogram.failed, vec![0, 0, 1, 0]);
        let charts = render_histograms(&model);
        assert_eq!(charts.len(), 1);
        assert!(
            charts[0].svg.contains("1.9 s–2.0 s: 1 done, 0 failed"),
            "{}",
            charts[0].svg
        );
    }

    #[test]
    fn records_of_many_blocks_spread_over_their_time_and_bin_their_run_times() {
        let model = model_of(SUMMED_UP_EVENTS, &[]);
        assert_eq!(throughput(&model, 4), vec![vec![0.0, 4.0, 2.0, 0.0]]);
        let histogram = histogram(&model, 0, 4);
        assert_eq!(histogram.bin_seconds, 0.125);
        assert_eq!(
            histogram.done,
            vec![0, 0, 0, 4],
            "the 2 unmeasured are not in it"
        );
        let chart = render_throughput(&model).svg;
        assert!(chart.contains("a: peak"), "{chart}");
    }
}
