//! The report as one self-contained HTML page: inline CSS and SVG, no
//! script, nothing fetched, so it opens offline and can be mailed.

use super::svg::Escaped;
use super::{failures, table, Drawings};
use std::fmt::Write as _;

pub const STYLE: &str = "\
body{font-family:sans-serif;margin:20px;color:#222;max-width:1120px}\
h1{font-size:20px;margin:0 0 6px}h2{font-size:16px;margin:26px 0 8px}\
p{margin:3px 0}.facts{color:#555;font-size:13px}.warning{color:#b00020;font-size:13px}\
table{border-collapse:collapse;font-size:13px}\
th,td{padding:3px 10px;text-align:right;border-bottom:1px solid #ddd}\
th:first-child,td:first-child{text-align:left}\
.charts svg{display:inline-block;vertical-align:top;margin:0 10px 10px 0}\
.hint,.legend{color:#777;font-size:12px}\
.failures td{text-align:left}.failures td.error{font-family:monospace}";

/// The page.
pub fn page(drawings: &Drawings) -> String {
    let title = Escaped(&drawings.title);
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{title}</title><style>{STYLE}</style></head><body><h1>{title}</h1>{}\
         </body></html>\n",
        body(drawings)
    )
}

/// What the page shows under its title: the facts, warnings, and every
/// view (the live dashboard shows this too, under its own live part).
pub fn body(drawings: &Drawings) -> String {
    let mut html = String::with_capacity(64 * 1024);
    for fact in &drawings.facts {
        let _ = write!(html, "<p class=\"facts\">{}</p>", Escaped(fact));
    }
    for warning in &drawings.warnings {
        let _ = write!(html, "<p class=\"warning\">{}</p>", Escaped(warning));
    }
    section(
        &mut html,
        "Execution summary",
        &table::to_html(&drawings.table),
    );
    html.push_str("<p class=\"hint\">Hover over a bar, a line or a cell for details.</p>");
    section(&mut html, "Workers", &drawings.timeline.svg);
    section(&mut html, "Blocks per second", &drawings.throughput.svg);
    let histograms: String = drawings.histograms.iter().map(|c| c.svg.as_str()).collect();
    section(&mut html, "Block run times", &histograms);
    let slices: String = drawings.slices.iter().map(|c| c.svg.as_str()).collect();
    if !slices.is_empty() {
        section(&mut html, "Done markers", &slices);
    }
    if let Some(table) = failures::to_html(&drawings.tasks) {
        section(&mut html, "Failed blocks", &table);
    }
    let costs: String = drawings.costs.iter().map(|c| c.svg.as_str()).collect();
    if !costs.is_empty() {
        section(&mut html, "What blocks cost", &costs);
    }
    html
}

fn section(html: &mut String, heading: &str, body: &str) {
    let _ = write!(html, "<h2>{heading}</h2><div class=\"charts\">{body}</div>");
}

#[cfg(test)]
mod tests {
    use super::STYLE;

    /// Issue 38: the note under the summary table had a class with no
    /// rule, and showed larger than the table it explains.
    #[test]
    fn every_paragraph_class_the_page_writes_has_a_rule() {
        let sources = [
            include_str!("html.rs"),
            include_str!("table.rs"),
            include_str!("failures.rs"),
        ];
        let opening = "<p class=\\\"";
        let classes: Vec<&str> = (sources.iter())
            .flat_map(|source| source.split(opening).skip(1))
            .map(|rest| rest.split('\\').next().unwrap())
            .collect();
        assert!(classes.contains(&"legend"), "{classes:?}");
        let ruled = |class: &str| {
            let name = format!(".{class}");
            STYLE.match_indices(&name).any(|(at, _)| {
                let after = STYLE[at + name.len()..].chars().next();
                matches!(after, Some('{' | ',' | ' '))
            })
        };
        for class in classes {
            assert!(ruled(class), "no rule for .{class} in {STYLE}");
        }
    }
}
