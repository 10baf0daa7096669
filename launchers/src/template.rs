//! Job-script templates, shared by the cluster backends: the tiny
//! renderer that puts placeholder values into a template, and the quoting
//! rules for what goes in. Each backend decides which names it fills
//! (sbatch: `slurm-templates/worker.sbatch`, bsub: `worker.bsub`); the
//! rules are the same, so a user who edited one template knows the other.
//!
//! The syntax is `{{name}}`, nothing else: no escapes, conditionals or
//! loops. The one rule that replaces conditionals: a line holding a
//! placeholder without a value is left out, so `#BSUB -q {{queue}}` only
//! appears when a queue is set. A name the backend does not fill, or an
//! unclosed `{{`, is refused with the template's file and line, before
//! anything is submitted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{LaunchError, TemplateProblem, WorkerRequest};

/// A rendered job script and the file it is kept in, beside the task's
/// logs: what a cluster backend submits for a group of workers, and what
/// `daisy-driver plan` shows without submitting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobScript {
    /// `<log_dir>/worker-<first>-<last>.<sbatch|bsub>`.
    pub path: PathBuf,
    pub text: String,
}

impl JobScript {
    /// Keeps the script in its file (creating the log directory), just
    /// before it is submitted.
    pub(crate) fn write(&self) -> Result<(), LaunchError> {
        let error = |source| LaunchError::Script {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(error)?;
        }
        std::fs::write(&self.path, &self.text).map_err(error)
    }
}

/// Placeholder values by name; `None` leaves out the lines using it. The
/// keys are every name the template may use.
pub(crate) type Values = BTreeMap<&'static str, Option<String>>;

/// What a cluster backend's job scripts are made from.
pub(crate) struct Kind {
    /// The built-in template's text, and its name in errors.
    pub builtin: &'static str,
    pub builtin_name: &'static str,
    /// The kept script's file extension: `sbatch`, `bsub`.
    pub extension: &'static str,
    /// How a job of several workers starts them ("as job steps"), for
    /// the error about a template that cannot.
    pub starts_several: &'static str,
}

impl Kind {
    /// The job script of `group` (consecutive workers of one task) with
    /// its placeholder `values`, kept as
    /// `<log_dir>/worker-<first>-<last>.<extension>`.
    pub(crate) fn job_script(
        &self,
        group: &[WorkerRequest],
        values: &Values,
    ) -> Result<JobScript, LaunchError> {
        let (first, last) = (&group[0], &group[group.len() - 1]);
        Ok(JobScript {
            path: self.script_path(&first.log_dir, first.worker_id, last.worker_id),
            text: self.script_text(group, values)?,
        })
    }

    /// The script's text, from the user's template or the built-in one;
    /// a template that cannot start the several workers of a job (it has
    /// no `{{run_workers}}`) is refused.
    pub(crate) fn script_text(
        &self,
        group: &[WorkerRequest],
        values: &Values,
    ) -> Result<String, LaunchError> {
        let custom = group[0].cluster.template.as_deref();
        let script = render_template(custom, self.builtin, self.builtin_name, values)?;
        let per_job = crate::arrays::per_job(group);
        if per_job > 1 && !script.contains("DAISY_WORKER_ID=$id") {
            return Err(LaunchError::TemplateLacks {
                template: custom.map_or_else(|| self.builtin_name.into(), Path::to_path_buf),
                name: "run_workers",
                because: format!(
                    "workers_per_job = {per_job} starts its workers {}",
                    self.starts_several
                ),
            });
        }
        Ok(script)
    }

    /// Where the script of workers `first..=last` is kept before
    /// submission.
    pub(crate) fn script_path(&self, log_dir: &Path, first: u64, last: u64) -> PathBuf {
        log_dir.join(format!("worker-{first}-{last}.{}", self.extension))
    }
}

/// Renders the user's template at `custom` (read now, so edits apply to
/// the next submission) or else `builtin`, named `builtin_name` in errors.
pub(crate) fn render_template(
    custom: Option<&Path>,
    builtin: &str,
    builtin_name: &str,
    values: &Values,
) -> Result<String, LaunchError> {
    let Some(path) = custom else {
        return render(builtin, Path::new(builtin_name), values);
    };
    let template = std::fs::read_to_string(path).map_err(|source| LaunchError::TemplateRead {
        path: path.to_path_buf(),
        source,
    })?;
    render(&template, path, values)
}

/// Fills `template` (named `name` in errors) line by line; see the module
/// doc for the rules.
pub(crate) fn render(template: &str, name: &Path, values: &Values) -> Result<String, LaunchError> {
    let mut script = String::with_capacity(template.len() + 256);
    for (number, line) in template.lines().enumerate() {
        let error = |problem| LaunchError::Template {
            template: name.to_path_buf(),
            line: number + 1,
            problem,
        };
        if let Some(filled) = render_line(line, values).map_err(error)? {
            script.push_str(&filled);
            script.push('\n');
        }
    }
    Ok(script)
}

/// One line filled in, or `None` when one of its placeholders has no
/// value. Values are inserted as they are, never scanned again.
fn render_line(line: &str, values: &Values) -> Result<Option<String>, TemplateProblem> {
    let mut filled = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(open) = rest.find("{{") {
        filled.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or(TemplateProblem::Unclosed)?;
        let name = after[..close].trim();
        match values.get(name) {
            None => return Err(unknown(name, values)),
            Some(None) => return Ok(None),
            Some(Some(value)) => filled.push_str(value),
        }
        rest = &after[close + 2..];
    }
    filled.push_str(rest);
    Ok(Some(filled))
}

fn unknown(name: &str, values: &Values) -> TemplateProblem {
    TemplateProblem::UnknownName {
        name: name.to_owned(),
        known: values.keys().copied().collect(),
    }
}

/// `daisy-<task>`, keeping only characters that are safe in a job name
/// and in the scheduler's listings (others become `_`). Never the token.
pub(crate) fn job_name(task_id: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let task: String = task_id
        .chars()
        .map(|c| if safe(c) { c } else { '_' })
        .collect();
    format!("daisy-{task}")
}

/// Each directive as a `<prefix> ...` line (`#BSUB`, `#SBATCH`); one given
/// with the prefix is kept as it is. `None` when there are none.
pub(crate) fn directive_lines(prefix: &str, directives: &[String]) -> Option<String> {
    let lines: Vec<String> = directives
        .iter()
        .map(|directive| directive.trim())
        .filter(|directive| !directive.is_empty())
        .map(|directive| match directive.starts_with(prefix) {
            true => directive.to_owned(),
            false => format!("{prefix} {directive}"),
        })
        .collect();
    joined_lines(&lines)
}

/// The lines joined by newlines; `None` when there are none.
pub(crate) fn joined_lines(lines: &[String]) -> Option<String> {
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// The worker program and its arguments, each shell-quoted.
pub(crate) fn worker_command(request: &WorkerRequest) -> String {
    let program = request.program.display().to_string();
    std::iter::once(program.as_str())
        .chain(request.args.iter().map(String::as_str))
        .map(shell_quote)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as one shell word: unchanged when it holds only characters the
/// shell never interprets, else in single quotes (a `'` becomes `'\''`).
pub fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A value for a directive line: schedulers split those at whitespace but
/// honour double quotes, so values with spaces are double-quoted.
pub(crate) fn directive_quote(value: &str) -> String {
    match value.contains(char::is_whitespace) {
        true => format!("\"{value}\""),
        false => value.to_owned(),
    }
}

/// `bash -n`: a rendered job script parses (the backends' tests).
#[cfg(test)]
pub(crate) fn assert_bash_syntax(script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.sh");
    std::fs::write(&path, script).unwrap();
    let status = std::process::Command::new("bash")
        .arg("-n")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success(), "bash -n failed on:\n{script}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&'static str, Option<&str>)]) -> Values {
        pairs
            .iter()
            .map(|(name, value)| (*name, value.map(str::to_owned)))
            .collect()
    }

    fn rendered(template: &str, values: &Values) -> Result<String, LaunchError> {
        render(template, Path::new("t.bsub"), values)
    }

    #[test]
    fn placeholders_are_filled_and_lines_without_a_value_left_out() {
        let values = values(&[("queue", None), ("name", Some("daisy-x"))]);
        let script = rendered("#X -J {{name}}\n#X -q {{queue}}\nrun {{ name }}\n", &values);
        assert_eq!(script.unwrap(), "#X -J daisy-x\nrun daisy-x\n");
    }

    #[test]
    fn values_are_never_scanned_again() {
        let values = values(&[("a", Some("{{b}}")), ("b", None)]);
        assert_eq!(rendered("echo {{a}}", &values).unwrap(), "echo {{b}}\n");
    }

    #[test]
    fn an_unknown_name_is_refused_with_line_and_the_names_known() {
        let values = values(&[("queue", Some("q")), ("walltime", None)]);
        let error = rendered("ok\n#X -q {{queu}}\n", &values).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, LaunchError::Template { line: 2, .. }),
            "{message}"
        );
        assert!(
            message.contains("queu") && message.contains("t.bsub"),
            "{message}"
        );
        assert!(message.contains("queue, walltime"), "{message}");
    }

    #[test]
    fn an_unclosed_placeholder_is_refused() {
        let error = rendered("a {{b", &values(&[])).unwrap_err();
        assert!(matches!(
            error,
            LaunchError::Template {
                problem: TemplateProblem::Unclosed,
                line: 1,
                ..
            }
        ));
    }

    #[test]
    fn a_custom_template_is_read_and_a_missing_one_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.bsub");
        std::fs::write(&path, "custom {{x}}\n").unwrap();
        let values = values(&[("x", Some("1"))]);
        let script = render_template(Some(&path), "builtin", "<b>", &values);
        assert_eq!(script.unwrap(), "custom 1\n");
        assert_eq!(
            render_template(None, "builtin", "<b>", &values).unwrap(),
            "builtin\n"
        );
        let missing = dir.path().join("missing.bsub");
        let error = render_template(Some(&missing), "builtin", "<b>", &values).unwrap_err();
        assert!(matches!(error, LaunchError::TemplateRead { .. }), "{error}");
    }

    #[test]
    fn job_names_keep_safe_characters_only() {
        assert_eq!(job_name("predict"), "daisy-predict");
        assert_eq!(job_name("a b/c[1]"), "daisy-a_b_c_1_");
    }

    #[test]
    fn directives_get_their_prefix_once() {
        let directives = vec!["-x".to_owned(), " ".to_owned(), "#BSUB -H".to_owned()];
        let lines = directive_lines("#BSUB", &directives);
        assert_eq!(lines.as_deref(), Some("#BSUB -x\n#BSUB -H"));
        assert_eq!(directive_lines("#BSUB", &[]), None);
    }

    #[test]
    fn words_are_quoted_only_when_needed() {
        assert_eq!(shell_quote("/bin/daisy-worker"), "/bin/daisy-worker");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(directive_quote("/logs/a b/x.out"), "\"/logs/a b/x.out\"");
        assert_eq!(directive_quote("/logs/x.out"), "/logs/x.out");
    }
}
