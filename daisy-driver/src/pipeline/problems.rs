//! What is wrong with a pipeline file, and how it is told: the error a
//! load returns, each [`Problem`] in it, and the wording they share.
//!
//! Reading and checking find problems; this module only words them, so
//! that every message reads the same way: `field = value` followed by what
//! is wrong with the value, values cut to a readable length, unknown names
//! with the known one they most resemble, and the report one problem per
//! line, placed on its line of the file.

use serde_json::Value;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Longest value, in characters, quoted in a message; longer ones are cut
/// so a stray megabyte array cannot drown the report.
const MAX_SHOWN_CHARS: usize = 80;

/// Longest name for which a similar known one is looked for; edit
/// distance is quadratic and a name that long is no typo.
const MAX_SUGGESTED_KEY_CHARS: usize = 64;

/// Why a pipeline file was refused. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The file could not be read: check the path and its permissions.
    #[error("cannot read pipeline file {}", file.display())]
    Read { file: PathBuf, source: io::Error },
    /// The text is not TOML (or JSON); nothing beyond syntax was checked.
    /// `message` says where: `TOML syntax error at line 3, column 7: ..`.
    #[error("pipeline file {}: {message}", file.display())]
    Syntax { file: PathBuf, message: String },
    /// The file parsed but breaks rules: every problem found, at once.
    #[error("{}", invalid_report(file, problems))]
    Invalid {
        file: PathBuf,
        problems: Vec<Problem>,
    },
}

/// The header line, then one problem per line, after its place in the
/// file when it has one: `pipeline.toml:12: task "p": ..`.
pub(super) fn invalid_report(file: &Path, problems: &[Problem]) -> String {
    let count = match problems.len() {
        1 => "1 problem".to_string(),
        n => format!("{n} problems"),
    };
    let mut report = format!("pipeline file {} has {count}:", file.display());
    for problem in problems {
        match problem.line {
            Some(line) => report.push_str(&format!("\n  - {}:{line}: {problem}", file.display())),
            None => report.push_str(&format!("\n  - {problem}")),
        }
    }
    report
}

/// One thing wrong with a pipeline file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The id of the task at fault; `None` for pipeline-level problems and
    /// for a task without a usable id (its message then starts with
    /// `[[task]] #n:`, counting tables from 1).
    pub task: Option<String>,
    /// The field at fault, as a path: `fit`, `requires.gpu`,
    /// `launcher.kind`.
    pub field: String,
    /// What is wrong, naming the field and the value:
    /// `fit = "sideways" is not one of valid, overhang, shrink`.
    pub message: String,
    /// The line (from 1) of the value at fault, or of the table holding
    /// a field that is missing; `None` in a JSON file (serde_json keeps
    /// no positions) and for a problem of no one place (a cycle).
    pub line: Option<usize>,
}

impl Problem {
    /// A problem with `field`, of no task yet ([`Subject::claim`] says
    /// whose it is).
    pub(super) fn new(field: &str, message: String, line: Option<usize>) -> Self {
        Self {
            task: None,
            field: field.to_string(),
            message,
            line,
        }
    }

    /// This problem, placed on `line`.
    pub(super) fn on_line(self, line: Option<usize>) -> Self {
        Self { line, ..self }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.task {
            None => f.write_str(&self.message),
            // The budget check reads as one sentence about the task, the
            // wording users are told to expect:
            // `task "p" requires {gpu: 8} but the global budget only has {gpu: 1}`.
            Some(task) if self.message.starts_with("requires {") => {
                write!(f, "task {task:?} {}", self.message)
            }
            Some(task) => write!(f, "task {task:?}: {}", self.message),
        }
    }
}

/// A problem of one task table checked alone
/// ([`task_problems`](super::task_problems)), worded for a caller that
/// shows the value as its user wrote it: Python's
/// `Task('predict', max_workers=-1): max_workers is not ..`, where the
/// table holds what Python made of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskProblem {
    /// The field at fault, as a path: `max_workers`, `requires.gpu`.
    pub field: String,
    /// What is wrong, naming the field but not its value as the table
    /// holds it: `max_workers is not a whole number from 0 to 4294967295`,
    /// `requires {gpu: 2} but the global budget only has {gpu: 1}`.
    pub what: String,
}

impl TaskProblem {
    /// `problem`, found in `table`, with its `field = value` lead (the
    /// reader's and the rules' wording) made `field`.
    pub(super) fn of(problem: &Problem, table: &Value) -> Self {
        let mut path = problem.field.split('.');
        let value = path.try_fold(table, |value, key| value.get(key));
        let lead = value.map(|value| format!("{} = {} ", problem.field, show(value)));
        let rest = lead.and_then(|lead| problem.message.strip_prefix(&lead));
        let what = match rest {
            Some(rest) => format!("{} {rest}", problem.field),
            None => problem.message.clone(),
        };
        Self {
            field: problem.field.clone(),
            what,
        }
    }
}

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
        self.claim(Problem::new(field, message, None))
    }

    /// `problem`, found in this subject's table, as about this subject.
    pub(super) fn claim(&self, problem: Problem) -> Problem {
        match self {
            Subject::Pipeline => problem,
            Subject::Task(id) => Problem {
                task: Some(id.clone()),
                ..problem
            },
            Subject::UnnamedTask(n) => Problem {
                message: format!("[[task]] #{n}: {}", problem.message),
                ..problem
            },
        }
    }
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
