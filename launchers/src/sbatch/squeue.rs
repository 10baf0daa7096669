//! Reading what SLURM says about jobs: `squeue`, `sacct` and `scontrol`
//! output, job ids with array indices, states and exit codes. Pure, tested
//! on output recorded from SLURM 22.05.
//!
//! All three sources become [`Record`]s: an array job id, the array indices
//! the line covers, the raw job id, the state and, for finished jobs, the
//! exit code. One line may cover many elements: a pending part of an array
//! is one record (`squeue` without `--array`, `sacct`, `scontrol` print
//! `24_[1-2,4,8-9%1]` or `ArrayTaskId=1-2,4,8-9%1`), and is expanded here.
//!
//! Terms: the *array job id* (`24`) names the whole array; element `i` is
//! `24_i`; once it runs it also gets a *raw* job id of its own (`25`),
//! which is all the jobcomp file (`sacct -c`) knows. The array's last
//! element keeps the array job id as its raw id.

use crate::JobEnd;

/// What one output line says about one job or a set of array elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The array job id, or the job id of a job that is not an array.
    pub job: String,
    /// The array indices covered; empty for a job that is not an array
    /// (or a jobcomp line, which only knows raw ids).
    pub indices: Vec<u32>,
    /// The raw job id (for a pending array range, the array job id).
    pub raw: String,
    /// SLURM's state name, upper case, without suffixes ("CANCELLED").
    pub state: String,
    /// `ExitCode` when the source gives it (sacct, scontrol).
    pub exit: Option<ExitCode>,
}

/// SLURM's `ExitCode=<code>:<signal>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitCode {
    pub code: i32,
    pub signal: i32,
}

/// SLURM's largest array size is 4 000 001; a longer range is garbage.
const MAX_RANGE: u32 = 4_000_001;

/// `squeue --noheader --array --format=%i|%A|%T` output: one record per
/// line that parses (others are skipped with a debug log).
pub fn parse_squeue(output: &str) -> Vec<Record> {
    parse_lines(output, |line| {
        let [id, raw, state] = fields::<3>(line, '|')?;
        let (job, indices) = parse_job_id(id)?;
        Some(record(job, indices, raw, state, None))
    })
}

/// `sacct --noheader --parsable2 --format=JobID,JobIDRaw,State,ExitCode`
/// output; step lines (`25.batch`) are skipped. With accounting, array
/// elements show as `24_0`; from the jobcomp file (`sacct -c`) every job,
/// array element or not, shows as its raw id only.
pub fn parse_sacct(output: &str) -> Vec<Record> {
    parse_lines(output, |line| {
        let [id, raw, state, exit] = fields::<4>(line, '|')?;
        let (job, indices) = parse_job_id(id)?;
        Some(record(job, indices, raw, state, parse_exit(exit)))
    })
}

/// SLURM's "no value" (`NO_VAL`) where an array task id would be.
const NO_ARRAY_TASK: &str = "4294967294";

/// `scontrol -o show job` output, one job record per line. Elements
/// cancelled while pending may show `ArrayTaskId=4294967294` (no value):
/// such a record names no index, so it is matched by its raw job id, which
/// the only element of an array of one is known by.
pub fn parse_scontrol(output: &str) -> Vec<Record> {
    parse_lines(output, |line| {
        let field = |key: &str| scontrol_field(line, key);
        let raw = field("JobId")?;
        let state = field("JobState")?;
        let exit = field("ExitCode").and_then(parse_exit);
        let task = field("ArrayTaskId").filter(|task| *task != NO_ARRAY_TASK);
        let (job, indices) = match (field("ArrayJobId"), task) {
            (Some(job), Some(tasks)) => (job.to_owned(), expand_indices(tasks)?),
            _ => (raw.to_owned(), Vec::new()),
        };
        Some(record(job, indices, raw, state, exit))
    })
}

/// The job id in `sbatch --parsable` output: `<id>` or `<id>;<cluster>`.
pub fn parse_sbatch(stdout: &str) -> Option<String> {
    let line = stdout
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())?;
    let id = line.split(';').next()?.trim();
    is_number(id).then(|| id.to_owned())
}

/// How a job in `state` ended, or `None` while it is queued or running.
/// Every state SLURM does not document as active counts as an end.
pub fn job_end(state: &str, exit: Option<ExitCode>) -> Option<JobEnd> {
    let code = exit.map_or(0, |exit| exit.code);
    match state {
        "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "SUSPENDED" | "REQUEUED"
        | "REQUEUE_FED" | "REQUEUE_HOLD" | "RESIZING" | "SIGNALING" | "STAGE_OUT" | "STOPPED"
        | "RESV_DEL_HOLD" | "PREEMPTED_REQUEUE" => None,
        "COMPLETED" => Some(JobEnd::Exited { code }),
        "CANCELLED" => Some(JobEnd::Cancelled),
        _ => Some(JobEnd::Failed {
            reason: failure_reason(state, exit),
        }),
    }
}

/// "SLURM job state TIMEOUT (exit code 0, signal 15)".
fn failure_reason(state: &str, exit: Option<ExitCode>) -> String {
    match exit {
        Some(ExitCode { code, signal: 0 }) => {
            format!("SLURM job state {state} (exit code {code})")
        }
        Some(ExitCode { code, signal }) => {
            format!("SLURM job state {state} (exit code {code}, signal {signal})")
        }
        None => format!("SLURM job state {state}"),
    }
}

/// `24_3` → ("24", [3]); `24_[1-2,4%1]` → ("24", [1, 2, 4]); `4` → ("4",
/// []); a step (`24_3.batch`, `25.extern`) or anything else → `None`.
pub fn parse_job_id(id: &str) -> Option<(String, Vec<u32>)> {
    let id = id.trim();
    if id.contains('.') {
        return None;
    }
    match id.split_once('_') {
        Some((job, tasks)) if is_number(job) => {
            let tasks = tasks
                .strip_prefix('[')
                .map_or(tasks, |t| t.trim_end_matches(']'));
            Some((job.to_owned(), expand_indices(tasks)?))
        }
        Some(_) => None,
        None => is_number(id).then(|| (id.to_owned(), Vec::new())),
    }
}

/// SLURM's index list: `3`, `1-5`, `0-15:4` (step), comma-separated, with
/// an optional `%<cap>` suffix.
pub fn expand_indices(list: &str) -> Option<Vec<u32>> {
    let list = list.split('%').next()?;
    let mut indices = Vec::new();
    for part in list.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((range, step)) => (range, step.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (low, high) = match range.split_once('-') {
            Some((low, high)) => (low.parse::<u32>().ok()?, high.parse::<u32>().ok()?),
            None => (range.parse().ok()?, range.parse().ok()?),
        };
        if high < low || high - low > MAX_RANGE {
            return None;
        }
        indices.extend((low..=high).step_by(step as usize));
    }
    Some(indices)
}

/// `0:0` → code 0, signal 0; anything else → `None`.
pub fn parse_exit(text: &str) -> Option<ExitCode> {
    let (code, signal) = text.trim().split_once(':')?;
    Some(ExitCode {
        code: code.parse().ok()?,
        signal: signal.parse().ok()?,
    })
}

/// The value of `Key=` in a `scontrol -o` line (the first whole-word
/// match; values we read never contain spaces).
fn scontrol_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

fn record(
    job: String,
    indices: Vec<u32>,
    raw: &str,
    state: &str,
    exit: Option<ExitCode>,
) -> Record {
    Record {
        job,
        indices,
        raw: raw.trim().to_owned(),
        state: state_name(state),
        exit,
    }
}

/// `CANCELLED by 0` → `CANCELLED`; `cancelled+` → `CANCELLED`.
fn state_name(state: &str) -> String {
    let word = state.split_whitespace().next().unwrap_or("");
    word.trim_end_matches('+').to_ascii_uppercase()
}

/// Exactly `N` fields separated by `separator`.
fn fields<const N: usize>(line: &str, separator: char) -> Option<[&str; N]> {
    let parts: Vec<&str> = line.split(separator).collect();
    parts.try_into().ok()
}

fn parse_lines(output: &str, parse: impl Fn(&str) -> Option<Record>) -> Vec<Record> {
    let parsed = |line: &str| {
        let record = parse(line);
        if record.is_none() {
            tracing::debug!(line, "skipping SLURM output line");
        }
        record
    };
    output
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .filter_map(parsed)
        .collect()
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests;
