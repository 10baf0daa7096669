//! Typed reads of one table of the pipeline file.
//!
//! A read either yields the value or records a [`Problem`] naming the
//! field and the value, and returns `None` so the caller carries on: one
//! pass over a table reports everything wrong with it. Unknown keys are
//! reported with the known field they most resemble, because a misspelt
//! optional field would otherwise be silently ignored.
//!
//! Messages are `field = value` followed by what is wrong with the value
//! (`is not a string`); the parsers here return only that second half.

use super::syntax::Lines;
use super::Problem;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt::Display;

/// One table of the tree `syntax` produces.
pub(super) type Table = Map<String, Value>;

/// Resource name to amount: the budget, or what one worker requires.
pub(super) type Amounts = BTreeMap<String, u64>;

/// Longest value, in characters, quoted in a message; longer ones are cut
/// so a stray megabyte array cannot drown the report.
const MAX_SHOWN_CHARS: usize = 80;

/// Longest key for which a similar known field is looked for; edit
/// distance is quadratic and a key that long is no typo.
const MAX_SUGGESTED_KEY_CHARS: usize = 64;

/// Whom the problems found in a table concern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Subject {
    /// The top level, `[resources]`, `[launcher]`, or several tasks.
    Pipeline,
    /// A task with a usable id.
    Task(String),
    /// The n-th `[[task]]` table (from 1), whose id is missing or unusable.
    UnnamedTask(usize),
}

impl Subject {
    /// A problem about this subject with `field` at fault.
    pub(super) fn problem(&self, field: &str, message: String) -> Problem {
        let (task, message) = match self {
            Subject::Pipeline => (None, message),
            Subject::Task(id) => (Some(id.clone()), message),
            Subject::UnnamedTask(n) => (None, format!("[[task]] #{n}: {message}")),
        };
        Problem {
            task,
            field: field.to_string(),
            message,
            line: None,
        }
    }
}

/// A table being read, and where its problems go. `'t` is the tree's
/// lifetime, so values read out of it outlive the reader.
pub(super) struct Fields<'t, 'p> {
    table: &'t Table,
    /// Where the table's values are in the file, for problems to name.
    lines: &'t Lines,
    /// Put before keys to make field paths: `"launcher."` for `[launcher]`.
    prefix: String,
    subject: Subject,
    problems: &'p mut Vec<Problem>,
}

impl<'t, 'p> Fields<'t, 'p> {
    pub(super) fn new(
        table: &'t Table,
        lines: &'t Lines,
        subject: Subject,
        problems: &'p mut Vec<Problem>,
    ) -> Self {
        Self {
            table,
            lines,
            prefix: String::new(),
            subject,
            problems,
        }
    }

    /// The fields of `table`, the value of this table's `key`; their paths
    /// are `key.field`.
    pub(super) fn nested<'s>(&'s mut self, key: &str, table: &'t Table) -> Fields<'t, 's> {
        Fields {
            table,
            lines: self.lines.key(key),
            prefix: format!("{}{key}.", self.prefix),
            subject: self.subject.clone(),
            problems: self.problems,
        }
    }

    pub(super) fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    /// Records a problem with `key` of this table, on the line of its
    /// value (or of the table, if the key is absent).
    pub(super) fn report(&mut self, key: &str, message: String) {
        let field = format!("{}{key}", self.prefix);
        let problem = self.subject.problem(&field, message);
        self.problems.push(problem.on_line(self.lines.of(key)));
    }

    /// The value of `key` read by `parse`; `None` if it is absent, or
    /// unreadable, and then a problem says why.
    pub(super) fn optional<T>(
        &mut self,
        key: &str,
        parse: impl FnOnce(&'t Value) -> Result<T, String>,
    ) -> Option<T> {
        let value = self.table.get(key)?;
        match parse(value) {
            Ok(parsed) => Some(parsed),
            Err(why) => {
                let message = format!("{}{key} = {} {why}", self.prefix, show(value));
                self.report(key, message);
                None
            }
        }
    }

    /// As [`Fields::optional`], and a problem if `key` is absent.
    pub(super) fn required<T>(
        &mut self,
        key: &str,
        parse: impl FnOnce(&'t Value) -> Result<T, String>,
    ) -> Option<T> {
        if !self.has(key) {
            let message = format!("missing required field \"{}{key}\"", self.prefix);
            self.report(key, message);
        }
        self.optional(key, parse)
    }

    /// Reports every key of this table that is not in `known`.
    pub(super) fn reject_unknown(&mut self, known: &[&str]) {
        let place = match self.prefix.strip_suffix('.') {
            Some(table) => format!(" in [{table}]"),
            None => String::new(),
        };
        let table = self.table;
        for key in table.keys().filter(|key| !known.contains(&key.as_str())) {
            let hint = hint(key, known.iter().copied());
            self.report(key, format!("unknown field {key:?}{place}{hint}"));
        }
    }

    /// A table of resource amounts (`[resources]`, `requires`); each bad
    /// amount is its own problem, named `key.resource`.
    pub(super) fn amounts(&mut self, key: &str) -> Amounts {
        let Some(table) = self.optional(key, object) else {
            return Amounts::new();
        };
        let mut amounts = self.nested(key, table);
        table
            .keys()
            .filter_map(|name| Some((name.clone(), amounts.optional(name, amount)?)))
            .collect()
    }
}

pub(super) fn object(value: &Value) -> Result<&Table, String> {
    value.as_object().ok_or_else(|| "is not a table".into())
}

pub(super) fn string(value: &Value) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "is not a string".into())
}

/// A string with something in it (scheduler settings, paths).
pub(super) fn non_empty(value: &Value) -> Result<String, String> {
    let text = string(value)?;
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    Ok(text)
}

pub(super) fn boolean(value: &Value) -> Result<bool, String> {
    value.as_bool().ok_or_else(|| "is not true or false".into())
}

/// A resource amount.
pub(super) fn amount(value: &Value) -> Result<u64, String> {
    value
        .as_u64()
        .ok_or_else(|| "is not a non-negative integer".into())
}

/// A count of workers, retries or restarts.
pub(super) fn count(value: &Value) -> Result<u32, String> {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("is not a whole number from 0 to {}", u32::MAX))
}

pub(super) fn strings(value: &Value) -> Result<Vec<String>, String> {
    let items = value.as_array().ok_or("is not an array of strings")?;
    items
        .iter()
        .map(|item| item.as_str().map(str::to_string))
        .collect::<Option<_>>()
        .ok_or_else(|| "is not an array of strings".into())
}

/// The option whose Display is the value's text.
pub(super) fn one_of<T: Copy + Display>(value: &Value, options: &[T]) -> Result<T, String> {
    let found = value
        .as_str()
        .and_then(|text| options.iter().find(|option| option.to_string() == text));
    found.copied().ok_or_else(|| {
        let names: Vec<String> = options.iter().map(ToString::to_string).collect();
        format!("is not one of {}", names.join(", "))
    })
}

/// A value as it appears in messages: JSON text, cut after
/// [`MAX_SHOWN_CHARS`] characters.
pub(super) fn show(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// ` (did you mean "name"?)` if `key` resembles one of `known`, else "".
pub(super) fn hint<'k>(key: &str, known: impl IntoIterator<Item = &'k str>) -> String {
    similar(key, known)
        .map(|name| format!(" (did you mean {name:?}?)"))
        .unwrap_or_default()
}

/// The entry of `known` closest to `key` within a third of their length
/// in edit distance (at least one edit), the first of equals.
fn similar<'k>(key: &str, known: impl IntoIterator<Item = &'k str>) -> Option<&'k str> {
    if key.chars().count() > MAX_SUGGESTED_KEY_CHARS {
        return None;
    }
    known
        .into_iter()
        .map(|name| (edit_distance(key, name), name))
        .filter(|&(distance, name)| distance <= (key.len().max(name.len()) / 3).max(1))
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, name)| name)
}

/// Edit distance in characters, a swap of neighbours counting as one
/// edit (optimal string alignment): `nmae` is one edit from `name`.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut two_above = vec![0; b.len() + 1];
    let mut above: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let substitution = above[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            row[j] = (above[j] + 1).min(row[j - 1] + 1).min(substitution);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(two_above[j - 2] + 1);
            }
        }
        two_above = std::mem::replace(&mut above, row);
    }
    above[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read<T>(tree: &Value, read: impl FnOnce(&mut Fields) -> T) -> (T, Vec<String>) {
        let mut problems = Vec::new();
        let table = tree.as_object().unwrap();
        let lines = Lines::default();
        let value = read(&mut Fields::new(
            table,
            &lines,
            Subject::Pipeline,
            &mut problems,
        ));
        (value, problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn similar_fields_are_suggested() {
        let known = ["max_workers", "max_retries", "name", "id", "requires"];
        assert_eq!(similar("max_worker", known), Some("max_workers"));
        assert_eq!(similar("max_retry", known), Some("max_retries"));
        assert_eq!(similar("Name", known), Some("name"));
        assert_eq!(similar("requirements", known), Some("requires"));
        assert_eq!(similar("x", known), None);
        assert_eq!(similar("colour", known), None);
        assert_eq!(hint("nmae", known), " (did you mean \"name\"?)");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("fti", "fit"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn unknown_keys_are_named_with_their_table() {
        let tree = json!({"launcher": {"partiton": "gpu", "kind": "local", "zzz": 1}});
        let (_, problems) = read(&tree, |top| {
            let table = top.optional("launcher", object).unwrap();
            top.nested("launcher", table)
                .reject_unknown(&["kind", "partition"]);
        });
        assert_eq!(
            problems,
            [
                r#"unknown field "partiton" in [launcher] (did you mean "partition"?)"#,
                r#"unknown field "zzz" in [launcher]"#,
            ]
        );
    }

    #[test]
    fn wrong_types_name_field_and_value() {
        let tree = json!({"a": -1, "b": "x", "c": [1], "d": {"gpu": 1.5, "cpu": 2}});
        let (values, problems) = read(&tree, |f| {
            let values = (f.optional("a", count), f.required("b", boolean));
            (
                values,
                f.optional("c", strings),
                f.amounts("d"),
                f.required("e", string),
            )
        });
        assert_eq!(values.2, Amounts::from([("cpu".to_string(), 2)]));
        assert_eq!(
            problems,
            [
                "a = -1 is not a whole number from 0 to 4294967295",
                "b = \"x\" is not true or false",
                "c = [1] is not an array of strings",
                "d.gpu = 1.5 is not a non-negative integer",
                "missing required field \"e\"",
            ]
        );
    }

    #[test]
    fn long_values_are_cut() {
        let long = Value::String("é".repeat(500));
        let shown = show(&long);
        assert_eq!(shown.chars().count(), MAX_SHOWN_CHARS + 3);
        assert!(shown.ends_with("é..."));
    }

    #[test]
    fn unnamed_tasks_are_counted() {
        let problem = Subject::UnnamedTask(2).problem("id", "missing".into());
        assert_eq!(problem.to_string(), "[[task]] #2: missing");
        assert_eq!(problem.task, None);
    }
}
