//! What is submitted for a group of workers: the job script, rendered
//! from the sbatch backend's template, and the job properties that sbatch
//! would have read from that script.
//!
//! slurmrestd runs the script as it is and never reads its `#SBATCH`
//! lines (sbatch parses them on the client side, and there is no sbatch
//! here: recorded on 22.05, a `#SBATCH --job-name` in a script submitted
//! over REST leaves the job unnamed). So the lines sbatch would read
//! (those before the script's first command) are translated here into
//! `v0.0.38_job_properties`, which keeps one template for both backends:
//! a user's copy, extra directives (`--hold`, `--constraint=a100`) and
//! requires (`--cpus-per-task`, `--gres=gpu:N`, `--mem=<N>M`) mean the
//! same over REST. An option without a property here is refused before
//! anything is submitted, rather than silently dropped.
//!
//! The environment is the other difference: a REST job inherits nothing,
//! so the job gets exactly the launcher's base environment (PATH and a
//! few more of the driver's, see `FORWARDED_ENV`) plus the request's,
//! `DAISY_CONTEXT` included.

use std::collections::BTreeMap;

use super::api::{Environment, JobProperties};
use crate::WorkerRequest;

/// The options translated, for the error that names the others.
const SUPPORTED: &str = "--job-name/-J, --output/-o, --error/-e, --partition/-p, \
    --account/-A, --qos/-q, --time/-t, --cpus-per-task/-c, --ntasks/-n, --nodes/-N (a count), \
    --ntasks-per-node, --mem, \
    --mem-per-cpu, --gres, --gpus/-G, --gpus-per-node, --gpus-per-task, \
    --constraint/-C, --reservation, --dependency/-d, --licenses/-L, --comment, \
    --wckey, --mail-type, --mail-user, --nice, --chdir/-D, --hold/-H, --requeue, \
    --no-requeue, --oversubscribe/-s";

/// Options that take no value.
const FLAGS: &[&str] = &["hold", "requeue", "no-requeue", "oversubscribe"];

/// Options with a value that is not text.
const NUMERIC: &[&str] = &[
    "time",
    "mem",
    "mem-per-cpu",
    "cpus-per-task",
    "ntasks",
    "nice",
];

/// The properties of a group's array job: its script's directives, the
/// array (`0-<N-1>[%cap]`), the working directory and the environment
/// (`base` overridden by the first request's). The error says which line
/// of the script could not be translated, and why.
pub fn job_for(
    group: &[WorkerRequest],
    script: &str,
    base: &[(String, String)],
) -> Result<JobProperties, String> {
    let first = &group[0];
    let mut job = JobProperties {
        current_working_directory: Some(first.working_dir.display().to_string()),
        ..JobProperties::default()
    };
    for (number, line) in directive_lines(script) {
        apply_line(&mut job, line)
            .map_err(|problem| format!("line {number} of the job script, {line:?}: {problem}"))?;
    }
    let size = group.len() / crate::arrays::per_job(group);
    job.array = Some(array_spec(size, first.cluster.max_array_parallel));
    job.environment = environment(base, &first.env);
    Ok(job)
}

/// `0-<size-1>` with `%<cap>` when a cap is set, as sbatch's `--array`.
pub fn array_spec(size: usize, cap: Option<u32>) -> String {
    let last = size.saturating_sub(1);
    match cap {
        Some(cap) => format!("0-{last}%{cap}"),
        None => format!("0-{last}"),
    }
}

/// `base` and then `extra` (which wins on a name both have).
pub fn environment(base: &[(String, String)], extra: &[(String, String)]) -> Environment {
    let all = base.iter().chain(extra);
    Environment(all.cloned().collect::<BTreeMap<_, _>>())
}

/// The `#SBATCH` lines sbatch would read, numbered from 1: those before
/// the first line that is neither blank nor a comment.
pub fn directive_lines(script: &str) -> Vec<(usize, &str)> {
    script
        .lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line))
        .take_while(|(_, line)| line.trim().is_empty() || line.trim_start().starts_with('#'))
        .filter(|(_, line)| is_directive(line))
        .collect()
}

/// `#SBATCH` at the start of the line, then whitespace.
fn is_directive(line: &str) -> bool {
    line.strip_prefix("#SBATCH")
        .is_some_and(|rest| rest.starts_with(char::is_whitespace))
}

/// Applies every option of one `#SBATCH` line.
fn apply_line(job: &mut JobProperties, line: &str) -> Result<(), String> {
    let words = split_words(&line["#SBATCH".len()..])?;
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let (name, inline) = option_name(&word)?;
        if !is_translated(&name) {
            return apply(job, &name, inline);
        }
        let value = match (inline, FLAGS.contains(&name.as_str())) {
            (Some(value), _) => Some(value),
            (None, true) => None,
            (None, false) => Some(words.next().ok_or(format!("{word} needs a value"))?),
        };
        apply(job, &name, value)?;
    }
    Ok(())
}

/// Whether option `name` has a property here.
fn is_translated(name: &str) -> bool {
    FLAGS.contains(&name)
        || NUMERIC.contains(&name)
        || text_field(&mut JobProperties::default(), name).is_some()
}

/// The words of a directive, split at whitespace outside double or
/// single quotes, quotes removed (as sbatch does).
pub fn split_words(text: &str) -> Result<Vec<String>, String> {
    let (mut words, mut word, mut quote) = (Vec::new(), None::<String>, None);
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if quote.is_some() {
        return Err("unclosed quote".into());
    }
    words.extend(word);
    Ok(words)
}

/// `--name=value` → ("name", Some(value)); `--name` → ("name", None);
/// `-p` → ("partition", None); `-pdebug` → ("partition", Some("debug")).
pub fn option_name(word: &str) -> Result<(String, Option<String>), String> {
    if let Some(long) = word.strip_prefix("--") {
        return Ok(match long.split_once('=') {
            Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
            None => (long.to_owned(), None),
        });
    }
    let mut chars = word.strip_prefix('-').unwrap_or("").chars();
    let short = chars.next().ok_or(format!("{word:?} is not an option"))?;
    let name = long_name(short).ok_or(format!("-{short} is not translated ({SUPPORTED})"))?;
    let rest: String = chars.collect();
    let inline = (!rest.is_empty()).then(|| rest.trim_start_matches('=').to_owned());
    Ok((name.to_owned(), inline))
}

/// sbatch's short options that have a translation.
fn long_name(short: char) -> Option<&'static str> {
    Some(match short {
        'J' => "job-name",
        'o' => "output",
        'e' => "error",
        'p' => "partition",
        'A' => "account",
        'q' => "qos",
        't' => "time",
        'c' => "cpus-per-task",
        'n' => "ntasks",
        'N' => "nodes",
        'G' => "gpus",
        'C' => "constraint",
        'd' => "dependency",
        'L' => "licenses",
        'D' => "chdir",
        'H' => "hold",
        's' => "oversubscribe",
        _ => return None,
    })
}

/// Sets the property of option `name` (long, without dashes).
pub fn apply(job: &mut JobProperties, name: &str, value: Option<String>) -> Result<(), String> {
    if let Some(field) = text_field(job, name) {
        *field = value;
        return Ok(());
    }
    if let Some((field, on)) = flag_field(job, name) {
        *field = Some(on);
        return Ok(());
    }
    let value = value.unwrap_or_default();
    let bad = || format!("--{name}={value:?} is not a value SLURM reads here");
    match name {
        "time" => job.time_limit = Some(minutes(&value).ok_or_else(bad)?),
        "mem" => job.memory_per_node = Some(megabytes(&value).ok_or_else(bad)?),
        "mem-per-cpu" => job.memory_per_cpu = Some(megabytes(&value).ok_or_else(bad)?),
        "cpus-per-task" => job.cpus_per_task = Some(value.parse().map_err(|_| bad())?),
        "ntasks" => job.tasks = Some(value.parse().map_err(|_| bad())?),
        "nodes" => {
            let nodes = value.parse().map_err(|_| bad())?;
            (job.minimum_nodes, job.maximum_nodes) = (Some(nodes), Some(nodes));
        }
        "ntasks-per-node" => job.tasks_per_node = Some(value.parse().map_err(|_| bad())?),
        "nice" => job.nice = Some(value.parse().map_err(|_| bad())?),
        "array" => return Err("daisy sets the array itself (max_array_parallel caps it)".into()),
        "export" | "get-user-env" => {
            return Err("over REST the job's environment is the launcher's to set".into())
        }
        _ => return Err(format!("--{name} is not translated ({SUPPORTED})")),
    }
    Ok(())
}

/// The property an option with a text value sets.
fn text_field<'a>(job: &'a mut JobProperties, name: &str) -> Option<&'a mut Option<String>> {
    Some(match name {
        "job-name" => &mut job.name,
        "output" => &mut job.standard_output,
        "error" => &mut job.standard_error,
        "partition" => &mut job.partition,
        "account" => &mut job.account,
        "qos" => &mut job.qos,
        "gres" => &mut job.gres,
        "gpus" => &mut job.gpus,
        "gpus-per-node" => &mut job.gpus_per_node,
        "gpus-per-task" => &mut job.gpus_per_task,
        "constraint" => &mut job.constraints,
        "reservation" => &mut job.reservation,
        "dependency" => &mut job.dependency,
        "licenses" => &mut job.licenses,
        "comment" => &mut job.comment,
        "wckey" => &mut job.wckey,
        "mail-type" => &mut job.mail_type,
        "mail-user" => &mut job.mail_user,
        "chdir" => &mut job.current_working_directory,
        _ => return None,
    })
}

/// The property a flag sets, and to what.
fn flag_field<'a>(job: &'a mut JobProperties, name: &str) -> Option<(&'a mut Option<bool>, bool)> {
    Some(match name {
        "hold" => (&mut job.hold, true),
        "requeue" => (&mut job.requeue, true),
        "no-requeue" => (&mut job.requeue, false),
        "oversubscribe" => (&mut job.oversubscribe, true),
        _ => return None,
    })
}

/// SLURM's time limit in minutes, seconds rounded up as sbatch does:
/// `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`; `UNLIMITED` and
/// `INFINITE` are SLURM's INFINITE (0xffffffff).
pub fn minutes(text: &str) -> Option<u32> {
    let text = text.trim();
    if ["unlimited", "infinite"].contains(&text.to_ascii_lowercase().as_str()) {
        return Some(u32::MAX);
    }
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (Some(days.parse::<u64>().ok()?), clock),
        None => (None, text),
    };
    let parts: Vec<u64> = clock
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (hours, mins, secs) = match (days.is_some(), parts.as_slice()) {
        (false, [m]) => (0, *m, 0),
        (false, [m, s]) => (0, *m, *s),
        (_, [h, m, s]) => (*h, *m, *s),
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        _ => return None,
    };
    let total = days.unwrap_or(0) * 1440 + hours * 60 + mins + secs.div_ceil(60);
    u32::try_from(total).ok().filter(|total| *total < u32::MAX)
}

/// sbatch's `--mem` sizes in megabytes: a number with an optional unit
/// K, M (the default), G or T; kilobytes round up.
pub fn megabytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    match unit.to_ascii_uppercase().trim_end_matches('B') {
        "K" => Some(number.div_ceil(1024)),
        "" | "M" => Some(number),
        "G" => number.checked_mul(1024),
        "T" => number.checked_mul(1024 * 1024),
        _ => None,
    }
}
