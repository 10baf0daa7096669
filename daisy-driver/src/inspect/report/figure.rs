//! The report as one SVG picture (title, summary table, charts, done
//! markers stacked on a white page), for `--format svg` and as the page
//! that `--format png` renders: its size is known exactly, so the PNG is
//! cropped to it.

use super::svg::{Chart, Rect, Svg};
use super::table::{SummaryRow, HEADERS};
use super::timeline::WIDTH;
use super::Drawings;

const MARGIN: f64 = 16.0;
const LINE: f64 = 18.0;
const GAP: f64 = 14.0;
/// x of each table column's right edge (the task column is left-aligned).
const COLUMN_ENDS: [f64; 10] = [
    0.0, 230.0, 320.0, 400.0, 460.0, 540.0, 610.0, 690.0, 820.0, 900.0,
];

/// The figure.
pub fn figure(drawings: &Drawings) -> Chart {
    let mut placed: Vec<(f64, f64, &Chart)> = Vec::new();
    let table_top = MARGIN + LINE * (2 + drawings.facts.len() + drawings.warnings.len()) as f64;
    let mut y = table_top + LINE * (drawings.table.len() + 1) as f64 + GAP;
    for chart in [&drawings.timeline, &drawings.throughput] {
        placed.push((0.0, y, chart));
        y += chart.height + GAP;
    }
    y = flow(&drawings.histograms, y, &mut placed);
    y = flow(&drawings.slices, y, &mut placed);
    y = flow(&drawings.costs, y, &mut placed);
    let mut svg = Svg::new(WIDTH, y);
    let page = Rect {
        x: 0.0,
        y: 0.0,
        width: WIDTH,
        height: y,
    };
    svg.rect(page, "#ffffff", None);
    svg.heading(MARGIN, MARGIN + 8.0, &drawings.title);
    let mut line_y = MARGIN + 8.0 + 1.5 * LINE;
    for line in drawings.facts.iter().chain(&drawings.warnings) {
        svg.text(MARGIN, line_y, "start", line);
        line_y += LINE;
    }
    draw_table(&mut svg, &drawings.table, table_top);
    for (x, y, chart) in placed {
        svg.embed(x, y, &chart.svg);
    }
    svg.finish()
}

/// Places `charts` left to right from `y`, wrapping at the page width;
/// returns the y below them.
fn flow<'a>(charts: &'a [Chart], mut y: f64, placed: &mut Vec<(f64, f64, &'a Chart)>) -> f64 {
    let (mut x, mut row_height) = (0.0, 0.0f64);
    for chart in charts {
        if x > 0.0 && x + chart.width > WIDTH {
            y += row_height + GAP;
            (x, row_height) = (0.0, 0.0);
        }
        placed.push((x, y, chart));
        x += chart.width + GAP;
        row_height = row_height.max(chart.height);
    }
    y + row_height + if charts.is_empty() { 0.0 } else { GAP }
}

fn draw_table(svg: &mut Svg, rows: &[SummaryRow], top: f64) {
    let header = HEADERS.map(String::from);
    let cells = std::iter::once(header).chain(rows.iter().map(SummaryRow::cells));
    for (i, row) in cells.enumerate() {
        let y = top + LINE * i as f64 + 12.0;
        for (column, cell) in row.iter().enumerate() {
            match column {
                0 => svg.text(MARGIN, y, "start", cell),
                _ => svg.text(MARGIN + COLUMN_ENDS[column], y, "end", cell),
            }
        }
    }
}
