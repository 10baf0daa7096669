//! The worker timeline: one row per worker (`<g class="worker-row">`),
//! its queue wait before it connected, a thin line while it was connected,
//! and its blocks as bars coloured by outcome.
//!
//! A big run has far more blocks than pixels, so bars narrower than
//! [`MIN_BAR_PX`] are merged with their neighbours into one segment, its
//! hover text counting the blocks: a row never holds more segments than it
//! has pixels. A segment is drawn as stacked stripes, one per outcome, each
//! as high as its share of the blocks (at least [`MIN_STRIPE_PX`]), so a
//! row with one failure among a hundred blocks reads as mostly done, and
//! the failure still shows.

use super::model::{BlockBar, Outcome, RunModel, WorkerRow};
use super::svg::{self, tick_label, ticks, Chart, Rect, Svg};
use crate::inspect::human::human_seconds;

/// The whole chart's width in pixels.
pub const WIDTH: f64 = 1100.0;
/// Room for the row labels.
const LABEL_WIDTH: f64 = 150.0;
const RIGHT_MARGIN: f64 = 20.0;
const AXIS_HEIGHT: f64 = 26.0;
const LEGEND_HEIGHT: f64 = 26.0;
/// The rows share about this much height, each between the row limits.
const ROWS_HEIGHT: f64 = 480.0;
const MIN_ROW_HEIGHT: f64 = 2.0;
const MAX_ROW_HEIGHT: f64 = 18.0;
/// Bars narrower than this merge with their neighbours.
pub const MIN_BAR_PX: f64 = 2.0;
/// Bars closer than this count as adjacent.
const MERGE_GAP_PX: f64 = 1.0;
/// The least height of an outcome's stripe in a merged segment.
pub const MIN_STRIPE_PX: f64 = 1.0;

/// Maps run seconds to x pixels.
#[derive(Clone, Copy, Debug)]
pub struct TimeAxis {
    pub left: f64,
    pub width: f64,
    pub span: f64,
}

impl TimeAxis {
    pub fn new(left: f64, width: f64, span: f64) -> Self {
        Self {
            left,
            width,
            span: span.max(1e-3),
        }
    }

    pub fn x(&self, seconds: f64) -> f64 {
        self.left + seconds.clamp(0.0, self.span) / self.span * self.width
    }

    fn pixels_per_second(&self) -> f64 {
        self.width / self.span
    }

    /// Tick marks and labels along `y`, with grid lines down to `bottom`.
    pub fn draw(&self, chart: &mut Svg, y: f64, bottom: f64) {
        for tick in ticks(0.0, self.span, 10) {
            let x = self.x(tick);
            chart.line((x, y), (x, bottom), "#eeeeee");
            chart.text(x, y - 4.0, "middle", &format!("{} s", tick_label(tick)));
        }
        chart.line((self.left, y), (self.left + self.width, y), svg::AXIS);
    }
}

/// Adjacent attempts drawn as one bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub start: f64,
    pub end: f64,
    /// Attempts per outcome, indexed like [`OUTCOMES`].
    pub counts: [u64; 3],
    pub first_block: Option<u64>,
}

const OUTCOMES: [Outcome; 3] = [Outcome::Done, Outcome::Retried, Outcome::FailedForGood];

impl Segment {
    fn of(bar: &BlockBar) -> Self {
        let mut counts = [0; 3];
        counts[bar.outcome as usize] = bar.count;
        Self {
            start: bar.start,
            end: bar.end,
            counts,
            first_block: bar.block_id,
        }
    }

    /// `band` split into stripes stacked top down (done, retried, failed
    /// for good), one per outcome the segment holds, each as high as its
    /// share of the blocks but at least [`MIN_STRIPE_PX`] (the largest
    /// stripe gives up what the small ones need).
    pub fn stripes(&self, band: Rect) -> Vec<(Rect, Outcome)> {
        let present: Vec<Outcome> = (OUTCOMES.into_iter())
            .filter(|o| self.counts[*o as usize] > 0)
            .collect();
        let total: u64 = self.counts.iter().sum();
        let least = MIN_STRIPE_PX.min(band.height / present.len().max(1) as f64);
        let share = |o: &Outcome| self.counts[*o as usize] as f64 / total.max(1) as f64;
        let mut heights: Vec<f64> = (present.iter())
            .map(|o| (band.height * share(o)).max(least))
            .collect();
        let largest = (0..heights.len()).max_by(|&a, &b| heights[a].total_cmp(&heights[b]));
        if let Some(largest) = largest {
            heights[largest] -= heights.iter().sum::<f64>() - band.height;
        }
        let mut y = band.y;
        (present.into_iter().zip(heights))
            .map(|(outcome, height)| {
                y += height;
                (
                    Rect {
                        y: y - height,
                        height,
                        ..band
                    },
                    outcome,
                )
            })
            .collect()
    }

    /// The worst outcome in the segment.
    pub fn worst(&self) -> Outcome {
        OUTCOMES
            .into_iter()
            .rev()
            .find(|o| self.counts[*o as usize] > 0)
            .unwrap_or(Outcome::Done)
    }

    fn title(&self) -> String {
        let blocks: u64 = self.counts.iter().sum();
        let span = format!(
            "{}–{} s",
            tick_label(round_to_ms(self.start)),
            tick_label(round_to_ms(self.end))
        );
        if let (1, Some(block)) = (blocks, self.first_block) {
            return format!(
                "block {block}: {}, {} ({span})",
                self.worst().label(),
                human_seconds(self.end - self.start)
            );
        }
        let parts: Vec<String> = OUTCOMES
            .iter()
            .filter(|o| self.counts[**o as usize] > 0)
            .map(|o| format!("{} {}", self.counts[*o as usize], o.label()))
            .collect();
        format!("{blocks} blocks ({span}): {}", parts.join(", "))
    }
}

fn round_to_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// `bars` (sorted by start) as segments at `pixels_per_second`: a bar
/// joins the previous segment if it starts within [`MERGE_GAP_PX`] of its
/// end and either is narrower than [`MIN_BAR_PX`].
pub fn merge_bars(bars: &[BlockBar], pixels_per_second: f64) -> Vec<Segment> {
    let px = |seconds: f64| seconds * pixels_per_second;
    let mut segments: Vec<Segment> = Vec::new();
    for bar in bars {
        if let Some(last) = segments.last_mut() {
            let adjacent = px(bar.start - last.end) < MERGE_GAP_PX;
            let narrow = px(bar.seconds()) < MIN_BAR_PX || px(last.end - last.start) < MIN_BAR_PX;
            if adjacent && narrow {
                last.end = last.end.max(bar.end);
                last.counts[bar.outcome as usize] += bar.count;
                continue;
            }
        }
        segments.push(Segment::of(bar));
    }
    segments
}

pub fn outcome_colour(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Done => svg::DONE,
        Outcome::Retried => svg::RETRIED,
        Outcome::FailedForGood => svg::FAILED,
    }
}

/// The timeline of every worker in `model`.
pub fn render(model: &RunModel) -> Chart {
    let rows = model.workers.len().max(1) as f64;
    let row_height = (ROWS_HEIGHT / rows).clamp(MIN_ROW_HEIGHT, MAX_ROW_HEIGHT);
    let rows_bottom = AXIS_HEIGHT + rows * row_height;
    let axis = TimeAxis::new(
        LABEL_WIDTH,
        WIDTH - LABEL_WIDTH - RIGHT_MARGIN,
        model.run.span,
    );
    let mut chart = Svg::new(WIDTH, rows_bottom + LEGEND_HEIGHT);
    axis.draw(&mut chart, AXIS_HEIGHT, rows_bottom);
    for (i, row) in model.workers.iter().enumerate() {
        let top = AXIS_HEIGHT + i as f64 * row_height;
        draw_row(&mut chart, model, row, &axis, top, row_height);
    }
    draw_legend(&mut chart, rows_bottom + 18.0);
    chart.finish()
}

fn row_label(model: &RunModel, row: &WorkerRow) -> String {
    let task = &model.run.tasks[row.task].id;
    match row.worker_id {
        Some(id) => format!("{task} #{id}"),
        None => format!("{task} (in the driver)"),
    }
}

fn row_title(model: &RunModel, row: &WorkerRow) -> String {
    let mut title = format!("worker {}", row_label(model, row));
    if let Some(job) = &row.life.job {
        title.push_str(&format!(", job {job}"));
    }
    if let Some(host) = &row.life.host {
        title.push_str(&format!(", on {host}"));
    }
    if let (Some(submitted), Some(connected)) = (row.life.submitted, row.life.connected) {
        title.push_str(&format!(
            ", queued {}",
            human_seconds(connected - submitted)
        ));
    }
    if let Some((_, why)) = &row.life.drained {
        title.push_str(&format!(
            ", drained ({why}), {} blocks handed back",
            row.life.returned
        ));
    }
    let ended = match row.life.gone() {
        Some((_, true)) => ", left cleanly",
        Some((_, false)) if row.life.connected.is_none() => ", never connected",
        Some((_, false)) => ", lost",
        None => ", still connected at the last event",
    };
    let blocks: u64 = row.bars.iter().map(|bar| bar.count).sum();
    format!("{title}{ended}, {blocks} blocks")
}

fn draw_row(
    chart: &mut Svg,
    model: &RunModel,
    row: &WorkerRow,
    axis: &TimeAxis,
    top: f64,
    height: f64,
) {
    chart.group("worker-row");
    let middle = top + height / 2.0;
    let row_end = row.life.gone().map_or(model.run.span, |(t, _)| t);
    let band = |from: f64, to: f64, shrink: f64| Rect {
        x: axis.x(from),
        y: top + height * shrink,
        width: (axis.x(to) - axis.x(from)).max(1.0),
        height: height * (1.0 - 2.0 * shrink),
    };
    let title = row_title(model, row);
    if let Some(submitted) = row.life.submitted {
        let queued_until = row.life.connected.unwrap_or(row_end);
        chart.rect(
            band(submitted, queued_until, 0.3),
            svg::QUEUED,
            Some(&title),
        );
    }
    if let Some(connected) = row.life.connected {
        chart.line(
            (axis.x(connected), middle),
            (axis.x(row_end), middle),
            "#999999",
        );
    }
    for segment in merge_bars(&row.bars, axis.pixels_per_second()) {
        let title = segment.title();
        for (stripe, outcome) in segment.stripes(band(segment.start, segment.end, 0.15)) {
            chart.rect(stripe, outcome_colour(outcome), Some(&title));
        }
    }
    if height >= 9.0 {
        chart.text(
            LABEL_WIDTH - 6.0,
            middle + 4.0,
            "end",
            &row_label(model, row),
        );
    }
    // A drain is a dark tick, its reason in the hover text.
    if let Some((drained, why)) = &row.life.drained {
        let tick = Rect {
            x: axis.x(*drained) - 1.0,
            y: top,
            width: 3.0,
            height,
        };
        let text = format!("drained: {why}; {} blocks handed back", row.life.returned);
        chart.rect(tick, svg::DRAINED, Some(&text));
    }
    // A lost worker (or a failed start) ends with a red tick.
    if let Some((gone, false)) = row.life.gone() {
        let x = axis.x(gone);
        chart.line((x, top), (x, top + height), svg::FAILED);
    }
    chart.end_group();
}

fn draw_legend(chart: &mut Svg, y: f64) {
    let entries = [
        (svg::QUEUED, "queued (submitted, not connected)"),
        (svg::DONE, "block done"),
        (svg::RETRIED, "block failed, retried"),
        (svg::FAILED, "block failed for good / worker lost"),
        (svg::DRAINED, "worker drained (signal, walltime)"),
    ];
    let mut x = LABEL_WIDTH;
    for (colour, label) in entries {
        let swatch = Rect {
            x,
            y: y - 9.0,
            width: 10.0,
            height: 10.0,
        };
        chart.rect(swatch, colour, None);
        chart.text(x + 14.0, y, "start", label);
        x += 24.0 + 6.0 * label.len() as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::report::model::tests::{model_of, sample_model, SUMMED_UP_EVENTS};

    fn bar(start: f64, end: f64, outcome: Outcome, block_id: u64) -> BlockBar {
        BlockBar {
            start,
            end,
            first: end,
            count: 1,
            outcome,
            block_id: Some(block_id),
        }
    }

    #[test]
    fn narrow_adjacent_bars_merge_and_count_their_outcomes() {
        let bars = [
            bar(0.0, 0.1, Outcome::Done, 1),
            bar(0.1, 0.2, Outcome::FailedForGood, 2),
            bar(0.2, 0.3, Outcome::Done, 3),
            bar(5.0, 9.0, Outcome::Done, 4),
        ];
        let segments = merge_bars(&bars, 1.0);
        assert_eq!(segments.len(), 2, "{segments:?}");
        assert_eq!(segments[0].counts, [2, 0, 1]);
        assert_eq!(segments[0].worst(), Outcome::FailedForGood);
        assert_eq!(
            segments[0].title(),
            "3 blocks (0–0.3 s): 2 done, 1 failed for good"
        );
        assert_eq!(segments[1].title(), "block 4: done, 4.0 s (5–9 s)");
        assert_eq!(
            merge_bars(&bars, 1000.0).len(),
            4,
            "wide enough to draw each"
        );
    }

    /// Issue 11, item 13: a merged segment was coloured by its worst
    /// block, so a row 99 % successful looked failed.
    #[test]
    fn a_merged_segment_is_striped_by_its_share_of_outcomes() {
        let mut bars: Vec<BlockBar> = (0..99)
            .map(|i| bar(i as f64 * 0.01, (i + 1) as f64 * 0.01, Outcome::Done, i))
            .collect();
        bars.push(bar(0.99, 1.0, Outcome::FailedForGood, 99));
        let segments = merge_bars(&bars, 100.0);
        assert_eq!(segments.len(), 1);
        let band = Rect {
            x: 10.0,
            y: 4.0,
            width: 100.0,
            height: 12.0,
        };
        let stripes = segments[0].stripes(band);
        let heights: Vec<(f64, Outcome)> = stripes.iter().map(|(r, o)| (r.height, *o)).collect();
        assert_eq!(
            heights,
            [(11.0, Outcome::Done), (1.0, Outcome::FailedForGood)]
        );
        assert_eq!((stripes[0].0.y, stripes[1].0.y), (4.0, 15.0));
        assert!(stripes.iter().all(|(r, _)| r.x == 10.0 && r.width == 100.0));
        let even = Segment {
            counts: [2, 1, 1],
            ..segments[0].clone()
        };
        let heights: Vec<f64> = even.stripes(band).iter().map(|(r, _)| r.height).collect();
        assert_eq!(heights, [6.0, 3.0, 3.0]);
    }

    #[test]
    fn a_million_blocks_make_no_more_bars_than_pixels() {
        let bars: Vec<BlockBar> = (0..1_000_000)
            .map(|i| bar(i as f64 * 0.001, (i + 1) as f64 * 0.001, Outcome::Done, i))
            .collect();
        let axis = TimeAxis::new(0.0, 930.0, 1000.0);
        let segments = merge_bars(&bars, axis.pixels_per_second());
        assert!(segments.len() <= 930, "{} segments", segments.len());
        assert_eq!(segments.iter().map(|s| s.counts[0]).sum::<u64>(), 1_000_000);
    }

    #[test]
    fn each_worker_is_one_row() {
        let model = sample_model();
        let chart = render(&model).svg;
        assert_eq!(chart.matches(r#"<g class="worker-row">"#).count(), 2);
        assert!(chart.contains(
            "worker a #1, job local:11, on n1, queued 2.0 s, drained (received SIGTERM), \
             2 blocks handed back, left cleanly, 3 blocks"
        ));
        assert!(chart.contains("drained: received SIGTERM; 2 blocks handed back"));
        assert!(chart.contains("block 2: failed for good"));
        assert!(chart.contains(">a #2</text>"));
    }

    #[test]
    fn a_row_of_summed_up_blocks_counts_them_all() {
        let model = model_of(SUMMED_UP_EVENTS, &[]);
        let title = row_title(&model, &model.workers[0]);
        assert!(title.ends_with("left cleanly, 6 blocks"), "{title}");
        let chart = render(&model).svg;
        assert!(chart.contains("4 blocks (0.5–2 s): 4 done"), "{chart}");
    }
}
