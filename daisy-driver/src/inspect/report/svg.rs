//! SVG primitives for the report's charts: a string builder that writes
//! elements with escaped text, axis ticks, and the colours every chart
//! shares (so an outcome looks the same in the timeline, the histogram and
//! the done-marker view).
//!
//! Hover text is an SVG `<title>` child: browsers show it as a tooltip,
//! with no script.

use daisy_core::printable::printable;
use std::fmt::{self, Write as _};

/// A block that finished.
pub const DONE: &str = "#3a9a4a";
/// A failed attempt that will be retried.
pub const RETRIED: &str = "#f0a030";
/// A block failed for good.
pub const FAILED: &str = "#d0342c";
/// A block that will not run because something upstream failed.
pub const ORPHANED: &str = "#8e6bb8";
/// A block not run yet (or running).
pub const REMAINING: &str = "#dddddd";
/// A worker's job waiting in the queue before it connected.
pub const QUEUED: &str = "#b9cde0";
/// A worker's drain (a signal, its walltime).
pub const DRAINED: &str = "#1f4e9c";
/// Axis lines and labels.
pub const AXIS: &str = "#555555";

/// Colours of the tasks' series, in pipeline order (repeated beyond).
const TASK_COLOURS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// The colour of the task at `index`.
pub fn task_colour(index: usize) -> &'static str {
    TASK_COLOURS[index % TASK_COLOURS.len()]
}

/// Text escaped for XML content and attribute values.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                // Control characters are not allowed in XML 1.0; written
                // as `\x1b`, as the terminal output shows them.
                c if c.is_control() && c != '\n' && c != '\t' => {
                    f.write_str(&printable(c.encode_utf8(&mut [0; 4])))?
                }
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A rectangle: position, size and fill.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// A finished `<svg>` element and its size in pixels.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub svg: String,
    pub width: f64,
    pub height: f64,
}

/// Builds one `<svg>` element. Writing to a `String` cannot fail, so
/// the `fmt::Result`s are dropped.
pub struct Svg {
    out: String,
    width: f64,
    height: f64,
}

impl Svg {
    /// An `<svg>` of `width` × `height` pixels with the report's font.
    pub fn new(width: f64, height: f64) -> Self {
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
        );
        Self { out, width, height }
    }

    /// A nested chart at (`x`, `y`) (its own coordinates start there).
    pub fn embed(&mut self, x: f64, y: f64, chart: &str) {
        // The nested chart's own `<svg` gets a position.
        let positioned = chart.replacen("<svg ", &format!(r#"<svg x="{x:.0}" y="{y:.0}" "#), 1);
        self.out.push_str(&positioned);
    }

    /// Opens `<g class=...>`; close it with [`Svg::end_group`].
    pub fn group(&mut self, class: &str) {
        let _ = write!(self.out, r#"<g class="{}">"#, Escaped(class));
    }

    pub fn end_group(&mut self) {
        self.out.push_str("</g>");
    }

    /// A filled rectangle, with hover text if `title` is given.
    pub fn rect(&mut self, rect: Rect, fill: &str, title: Option<&str>) {
        let Rect {
            x,
            y,
            width,
            height,
        } = rect;
        let _ = write!(
            self.out,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{width:.1}" height="{height:.1}" fill="{fill}""#
        );
        self.close_with_title(title, "rect");
    }

    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: &str) {
        let _ = write!(
            self.out,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{stroke}"/>"#,
            from.0, from.1, to.0, to.1
        );
    }

    /// A line through `points`, with hover text if `title` is given.
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, title: Option<&str>) {
        self.out
            .push_str(r#"<polyline fill="none" stroke-width="1.5" points=""#);
        for (x, y) in points {
            let _ = write!(self.out, "{x:.1},{y:.1} ");
        }
        let _ = write!(self.out, r#"" stroke="{stroke}""#);
        self.close_with_title(title, "polyline");
    }

    /// Text at (`x`, `y`); `anchor` is start, middle or end.
    pub fn text(&mut self, x: f64, y: f64, anchor: &str, text: &str) {
        let _ = write!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" fill="{AXIS}">{}</text>"#,
            Escaped(text)
        );
    }

    /// A bold, larger line of text at (`x`, `y`).
    pub fn heading(&mut self, x: f64, y: f64, text: &str) {
        let _ = write!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="16" font-weight="bold">{}</text>"#,
            Escaped(text)
        );
    }

    fn close_with_title(&mut self, title: Option<&str>, element: &str) {
        match title {
            Some(title) => {
                let _ = write!(self.out, "><title>{}</title></{element}>", Escaped(title));
            }
            None => self.out.push_str("/>"),
        }
    }

    pub fn height(&self) -> f64 {
        self.height
    }

    pub fn finish(mut self) -> Chart {
        self.out.push_str("</svg>");
        Chart {
            svg: self.out,
            width: self.width,
            height: self.height,
        }
    }
}

/// Round tick values covering `[low, high]`, at most about `max_ticks`.
pub fn ticks(low: f64, high: f64, max_ticks: usize) -> Vec<f64> {
    let span = high - low;
    if !span.is_finite() || span <= 0.0 || max_ticks == 0 {
        return vec![low];
    }
    let rough = span / max_ticks as f64;
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|step| span / step <= max_ticks as f64)
        .unwrap_or(10.0 * magnitude);
    let first = (low / step).ceil() as i64;
    let last = (high / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// A tick label: `12`, `2.5`, `0.05`; never `-0` (a value that rounds
/// to zero from below).
pub fn tick_label(value: f64) -> String {
    let text = format!("{value:.3}");
    match text.trim_end_matches('0').trim_end_matches('.') {
        "-0" => "0".to_string(),
        trimmed => trimmed.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_titles_are_escaped() {
        let mut svg = Svg::new(10.0, 10.0);
        svg.text(1.0, 2.0, "start", "a<b & \"c\"");
        let rect = Rect {
            x: 0.0,
            y: 0.0,
            width: 1.0,
            height: 1.0,
        };
        svg.rect(rect, DONE, Some("exit <1>\u{1}"));
        let out = svg.finish().svg;
        assert!(out.contains(">a&lt;b &amp; &quot;c&quot;</text>"), "{out}");
        assert!(
            out.contains("<title>exit &lt;1&gt;\\x01</title></rect>"),
            "{out}"
        );
        assert!(out.ends_with("</svg>"));
    }

    #[test]
    fn ticks_are_round_and_inside_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            ticks(0.0, 0.35, 4),
            vec![0.0, 0.1, 0.2, 0.30000000000000004]
        );
        assert_eq!(ticks(3.0, 3.0, 5), vec![3.0]);
        assert_eq!(ticks(0.0, f64::NAN, 5).len(), 1);
    }

    #[test]
    fn labels_read_well() {
        assert_eq!(tick_label(2.5), "2.5");
        assert_eq!(tick_label(0.30000000000000004), "0.3");
        assert_eq!(tick_label(40.0), "40");
        // Issue 11, item 13: a hover text read `queued -0 ms`.
        assert_eq!(tick_label(-0.0001), "0");
    }

    #[test]
    fn an_embedded_chart_is_positioned() {
        let inner = Svg::new(5.0, 5.0).finish();
        let mut outer = Svg::new(10.0, 20.0);
        outer.embed(0.0, 7.0, &inner.svg);
        assert!(outer.finish().svg.contains(r#"<svg x="0" y="7" xmlns"#));
    }
}
