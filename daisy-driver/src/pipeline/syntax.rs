//! From text to a value tree: the only place that tells TOML from JSON.
//!
//! Both formats become a `serde_json::Value`, so everything after this
//! reads one kind of tree and words its problems one way. TOML is read by
//! serde into [`Node`]s with their spans (`toml::Spanned`), which also
//! give the [`Lines`] each value starts on, so a problem can name its line;
//! serde_json keeps no spans, so a JSON file's problems name none. TOML datetimes
//! become their text, because the one place a user writes one is an
//! unquoted walltime (`time = 04:00:00`), which is what they meant.
//! Non-finite TOML floats (`nan`, `inf`) become their text too: JSON has
//! no number for them, and no field takes a float anyway.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use toml::Spanned;

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

    /// The value tree of `text` and the lines its values start on, or the
    /// syntax error with its line and column:
    /// `TOML syntax error at line 3, column 7: ..`.
    pub(super) fn parse(self, text: &str) -> Result<(Value, Lines), String> {
        match self {
            Format::Toml => toml::from_str::<Spanned<Node>>(text)
                .map(|node| top_tree(&LineStarts::of(text), node))
                .map_err(|error| toml_error(text, &error)),
            Format::Json => serde_json::from_str(text)
                .map(|tree| (tree, Lines::default()))
                .map_err(|error| json_error(&error)),
        }
    }
}

/// The line each value of a tree starts on, found by key or position;
/// empty (no line anywhere) for a JSON file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Lines {
    line: Option<usize>,
    keys: BTreeMap<String, Lines>,
    items: Vec<Lines>,
}

/// Lines of a value that is not in the file: none.
static NO_LINES: Lines = Lines {
    line: None,
    keys: BTreeMap::new(),
    items: Vec::new(),
};

impl Lines {
    /// The lines of this table's value at `key`.
    pub(super) fn key(&self, key: &str) -> &Lines {
        self.keys.get(key).unwrap_or(&NO_LINES)
    }

    /// The lines of this array's `index`-th item.
    pub(super) fn item(&self, index: usize) -> &Lines {
        self.items.get(index).unwrap_or(&NO_LINES)
    }

    /// The line of this table's value at `key`, or, if the file lacks the
    /// key, of the table itself.
    pub(super) fn of(&self, key: &str) -> Option<usize> {
        self.keys
            .get(key)
            .and_then(|lines| lines.line)
            .or(self.line)
    }
}

/// Where each line of a text starts, so that finding the line of every
/// value of a large file stays linear.
struct LineStarts(Vec<usize>);

impl LineStarts {
    fn of(text: &str) -> Self {
        let after_newlines = text.match_indices('\n').map(|(i, _)| i + 1);
        Self(std::iter::once(0).chain(after_newlines).collect())
    }

    /// The 1-based line of byte `offset`.
    fn line(&self, offset: usize) -> usize {
        self.0.partition_point(|&start| start <= offset)
    }
}

/// A TOML value as serde reads it, its children with their spans.
enum Node {
    Scalar(Value),
    Array(Vec<Spanned<Node>>),
    Table(BTreeMap<String, Spanned<Node>>),
}

/// The tree of the whole file. The top level spans the file, so a field
/// missing there is on no one line.
fn top_tree(starts: &LineStarts, node: Spanned<Node>) -> (Value, Lines) {
    let (tree, lines) = node_tree(starts, node);
    (
        tree,
        Lines {
            line: None,
            ..lines
        },
    )
}

/// The value tree and the lines of `node`.
fn node_tree(starts: &LineStarts, node: Spanned<Node>) -> (Value, Lines) {
    let line = Some(starts.line(node.span().start));
    let (tree, keys, items) = match node.into_inner() {
        Node::Scalar(value) => (value, BTreeMap::new(), Vec::new()),
        Node::Array(nodes) => {
            let (values, items) = nodes.into_iter().map(|n| node_tree(starts, n)).unzip();
            (Value::Array(values), BTreeMap::new(), items)
        }
        Node::Table(nodes) => {
            let (mut values, mut keys) = (Map::new(), BTreeMap::new());
            for (key, node) in nodes {
                let (value, lines) = node_tree(starts, node);
                values.insert(key.clone(), value);
                keys.insert(key, lines);
            }
            (Value::Object(values), keys, Vec::new())
        }
    };
    (tree, Lines { line, keys, items })
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

/// toml hands a datetime over as a one-entry table under this key.
const TOML_DATETIME_KEY: &str = "$__toml_private_datetime";

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a TOML value")
    }

    fn visit_bool<E: de::Error>(self, flag: bool) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Bool(flag)))
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::from(number)))
    }

    fn visit_u64<E: de::Error>(self, number: u64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::from(number)))
    }

    /// JSON has no number for `nan` or `inf`: they become their text.
    fn visit_f64<E: de::Error>(self, number: f64) -> Result<Node, E> {
        let value = serde_json::Number::from_f64(number)
            .map_or_else(|| Value::String(number.to_string()), Value::Number);
        Ok(Node::Scalar(value))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Node, E> {
        Ok(Node::Scalar(Value::String(text.to_string())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == TOML_DATETIME_KEY {
                return Ok(Node::Scalar(Value::String(map.next_value()?)));
            }
            entries.insert(key, map.next_value()?);
        }
        Ok(Node::Table(entries))
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
        assert_eq!(Format::Toml.parse(text).unwrap().0, expected);
        let (tree, lines) = Format::Json.parse(&expected.to_string()).unwrap();
        assert_eq!((tree, lines), (expected, Lines::default()));
    }

    #[test]
    fn datetimes_and_non_finite_floats_become_text() {
        let text = "time = 04:00:00\nx = nan\nd = 1979-05-27T07:32:00Z\ny = -inf\n";
        let (tree, _) = Format::Toml.parse(text).unwrap();
        let expected =
            json!({"time": "04:00:00", "x": "NaN", "d": "1979-05-27T07:32:00Z", "y": "-inf"});
        assert_eq!(tree, expected);
    }

    #[test]
    fn every_toml_value_knows_its_line() {
        let text = "a = 1\n[r]\ngpu = 2\n\n[[t]]\nid = \"x\"\nb = [\n  3,\n  4,\n]\n[[t]]\nc = { d = 5 }\n";
        let (_, lines) = Format::Toml.parse(text).unwrap();
        assert_eq!(lines.of("a"), Some(1));
        assert_eq!(lines.key("r").of("gpu"), Some(3));
        let first = lines.key("t").item(0);
        assert_eq!((first.of("id"), first.of("b")), (Some(6), Some(7)));
        assert_eq!(first.key("b").item(1).line, Some(9));
        let second = lines.key("t").item(1);
        assert_eq!(second.key("c").of("d"), Some(12));
        assert_eq!(
            lines.key("r").of("cpu"),
            Some(2),
            "the table of an absent key"
        );
        assert_eq!(lines.of("none"), None, "the top level is on no one line");
    }

    #[test]
    fn line_starts_find_the_line_of_an_offset() {
        let starts = LineStarts::of("ab\ncd\n\nef");
        let lines: Vec<usize> = (0..9).map(|offset| starts.line(offset)).collect();
        assert_eq!(lines, [1, 1, 1, 2, 2, 2, 3, 4, 4]);
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
