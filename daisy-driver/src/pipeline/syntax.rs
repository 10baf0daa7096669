//! From text to a value tree: the only place that tells TOML from JSON.
//!
//! Both formats become a `serde_json::Value`, so everything after this
//! reads one kind of tree and words its problems one way. TOML datetimes
//! become their text, because the one place a user writes one is an
//! unquoted walltime (`time = 04:00:00`), which is what they meant.
//! Non-finite TOML floats (`nan`, `inf`) become their text too: JSON has
//! no number for them, and no field takes a float anyway.

use serde_json::Value;
use std::path::Path;

/// The syntax of a pipeline file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    Toml,
    Json,
}

impl Format {
    /// JSON for a file ending in `.json` (any case), TOML otherwise.
    pub(super) fn of(path: &Path) -> Self {
        match path.extension() {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Toml,
        }
    }

    /// The value tree of `text`, or the syntax error with its line and
    /// column: `TOML syntax error at line 3, column 7: ..`.
    pub(super) fn parse(self, text: &str) -> Result<Value, String> {
        match self {
            Format::Toml => text
                .parse::<toml::Table>()
                .map(|table| from_toml(toml::Value::Table(table)))
                .map_err(|error| toml_error(text, &error)),
            Format::Json => serde_json::from_str(text).map_err(|error| json_error(&error)),
        }
    }
}

fn from_toml(value: toml::Value) -> Value {
    match value {
        toml::Value::String(text) => Value::String(text),
        toml::Value::Integer(number) => Value::from(number),
        toml::Value::Float(number) => serde_json::Number::from_f64(number)
            .map_or_else(|| Value::String(number.to_string()), Value::Number),
        toml::Value::Boolean(flag) => Value::Bool(flag),
        toml::Value::Datetime(datetime) => Value::String(datetime.to_string()),
        toml::Value::Array(items) => Value::Array(items.into_iter().map(from_toml).collect()),
        toml::Value::Table(table) => {
            Value::Object(table.into_iter().map(|(k, v)| (k, from_toml(v))).collect())
        }
    }
}

/// toml's message may span lines (`invalid table header\nexpected ..`);
/// they are joined so an error stays one line.
fn toml_error(text: &str, error: &toml::de::Error) -> String {
    let lines: Vec<&str> = (error.message().lines().map(str::trim))
        .filter(|line| !line.is_empty())
        .collect();
    let detail = lines.join("; ");
    match error.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            format!("TOML syntax error at line {line}, column {column}: {detail}")
        }
        None => format!("TOML syntax error: {detail}"),
    }
}

/// serde_json's message ends in " at line L column C"; it is moved to the
/// front so both formats read alike.
fn json_error(error: &serde_json::Error) -> String {
    let (line, column) = (error.line(), error.column());
    let full = error.to_string();
    let suffix = format!(" at line {line} column {column}");
    let detail = full.strip_suffix(&suffix).unwrap_or(&full);
    format!("JSON syntax error at line {line}, column {column}: {detail}")
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn format_follows_the_extension() {
        assert_eq!(Format::of(Path::new("a/p.json")), Format::Json);
        assert_eq!(Format::of(Path::new("p.JSON")), Format::Json);
        assert_eq!(Format::of(Path::new("p.toml")), Format::Toml);
        assert_eq!(Format::of(Path::new("pipeline")), Format::Toml);
    }

    #[test]
    fn toml_becomes_the_same_tree_as_json() {
        let text = "a = 1\nb = [true, 1.5]\nc = { d = \"x\" }\n[[t]]\ne = 2\n";
        let expected = json!({"a": 1, "b": [true, 1.5], "c": {"d": "x"}, "t": [{"e": 2}]});
        assert_eq!(Format::Toml.parse(text).unwrap(), expected);
    }

    #[test]
    fn datetimes_and_non_finite_floats_become_text() {
        let tree = Format::Toml.parse("time = 04:00:00\nx = nan\n").unwrap();
        assert_eq!(tree, json!({"time": "04:00:00", "x": "NaN"}));
    }

    #[test]
    fn line_and_column_count_characters() {
        let text = "ab\nçd\nef";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 3), (2, 1));
        assert_eq!(line_column(text, 5), (2, 2));
        assert_eq!(line_column(text, 100), (3, 3));
    }
}
