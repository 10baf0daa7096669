//! Reading LSF's answers about jobs: `bjobs -a -noheader -o "jobid jobindex
//! stat exit_code"` for states, and `bkill`'s replies. Pure functions of
//! the commands' output, tested on samples in LSF's documented formats.
//!
//! Why `jobindex`: bjobs prints an array element's JOBID as the array's id
//! (`12345`, not `12345[3]`, unless the site sets LSB_BJOBS_DISPLAY_ENH),
//! so the index column tells elements apart (0 outside arrays). Why `-a`:
//! without it bjobs hides finished jobs (DONE, EXIT) even when asked for
//! them by id, and finished is what the poll looks for. Jobs LSF has
//! forgotten (finished longer ago than CLEAN_PERIOD) only get
//! `Job <12345> is not found` on stderr, and bjobs then exits 255 if no
//! id was valid, so the output is read whatever the exit status.

use std::collections::BTreeSet;
use std::fmt;

use crate::queue::QueueJob;
use crate::{JobEnd, JobId};

/// The `-o` format asked for; [`parse_states`] reads these columns.
pub(crate) const BJOBS_FORMAT: &str = "jobid jobindex stat exit_code";

/// One LSF job or array element: `12345` (index 0) or `12345[3]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Element {
    pub(crate) job: u64,
    /// The array index, from 1; 0 for a job that is not an array.
    pub(crate) index: u32,
}

/// How LSF names it, the form bjobs and bkill take: `12345[3]`.
impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            0 => write!(f, "{}", self.job),
            index => write!(f, "{}[{index}]", self.job),
        }
    }
}

impl Element {
    /// Reads `12345` or `12345[3]`, as [`Element`]'s `Display` writes them.
    pub(crate) fn parse(text: &str) -> Option<Element> {
        let (job, index) = match text.strip_suffix(']') {
            Some(rest) => {
                let (job, index) = rest.split_once('[')?;
                (job, index.parse().ok()?)
            }
            None => (text, 0),
        };
        Some(Element {
            job: job.parse().ok()?,
            index,
        })
    }
}

/// `12345[3]`, both ways.
impl QueueJob for Element {
    fn job_id(&self) -> JobId {
        JobId(self.to_string())
    }

    fn from_job_id(id: &JobId) -> Option<Self> {
        Element::parse(&id.0)
    }
}

/// Where an element is in its life, as far as the poll cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ElementState {
    /// Waiting to start: PEND, PSUSP (held), WAIT, PROV.
    Queued,
    /// Started and not finished: RUN, USUSP, SSUSP (suspended jobs still
    /// hold their slot and resume).
    Running,
    /// Finished, and how.
    Ended(JobEnd),
}

/// What one `bjobs` call said.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct StatesReport {
    /// Each element printed, with its state.
    pub elements: Vec<(Element, ElementState)>,
    /// Jobs or elements bjobs does not know (`Job <id> is not found`).
    pub not_found: BTreeSet<Element>,
    /// Lines that fit neither form, kept for the log.
    pub unreadable: Vec<String>,
}

/// Reads bjobs' stdout (rows in [`BJOBS_FORMAT`]) and stderr ("not found"
/// lines); other stderr lines, such as "No job found", are ignored.
pub(crate) fn parse_states(stdout: &str, stderr: &str) -> StatesReport {
    let mut report = StatesReport::default();
    for line in stdout.lines().filter(|line| !line.trim().is_empty()) {
        match parse_row(line) {
            Some(row) => report.elements.push(row),
            None => report.unreadable.push(line.to_owned()),
        }
    }
    report.not_found = stderr.lines().filter_map(not_found_job).collect();
    report
}

/// `12345  3  EXIT  2` → element 12345[3], exited with 2. The JOBID
/// column may itself carry the index (LSB_BJOBS_DISPLAY_ENH=Y).
fn parse_row(line: &str) -> Option<(Element, ElementState)> {
    let mut columns = line.split_whitespace();
    let (job, index) = (columns.next()?, columns.next()?);
    let (stat, exit_code) = (columns.next()?, columns.next().unwrap_or("-"));
    let job = Element::parse(job)?.job;
    let element = Element {
        job,
        index: index.parse().ok()?,
    };
    Some((element, element_state(stat, exit_code)))
}

/// LSF's STAT (and EXIT_CODE for finished jobs) in the poll's terms.
/// Unknown states count as running: only a state known to be final ends
/// a job, so a newer LSF's state never ends a live worker's slot.
pub(crate) fn element_state(stat: &str, exit_code: &str) -> ElementState {
    match stat {
        "PEND" | "PSUSP" | "WAIT" | "PROV" => ElementState::Queued,
        "DONE" => ElementState::Ended(JobEnd::Exited { code: 0 }),
        "EXIT" => ElementState::Ended(exit_end(exit_code)),
        "ZOMBI" => ElementState::Ended(failed(
            "LSF says ZOMBI: killed while its host was unreachable",
        )),
        "UNKWN" => ElementState::Ended(failed(
            "LSF says UNKWN: it lost contact with the job's host",
        )),
        _ => ElementState::Running,
    }
}

/// An EXIT job's end: its exit code, or (`-`: none recorded, e.g. killed
/// before it started) a failure.
fn exit_end(exit_code: &str) -> JobEnd {
    match exit_code.parse() {
        Ok(code) => JobEnd::Exited { code },
        Err(_) => failed("LSF says EXIT without an exit code (killed before it ran?)"),
    }
}

fn failed(reason: &str) -> JobEnd {
    JobEnd::Failed {
        reason: reason.to_owned(),
    }
}

/// `Job <12345> is not found` or `Job <12345[3]> is not found`.
fn not_found_job(line: &str) -> Option<Element> {
    let rest = line.trim().strip_prefix("Job <")?;
    let (id, tail) = rest.split_once('>')?;
    (tail.trim() == "is not found").then_some(())?;
    Element::parse(id)
}

/// Compact bkill / bjobs arguments for a set of elements: one per job,
/// `12345` for a job outside arrays, else `12345[1-3,7]`, so cancelling
/// fifty workers is one short command line.
pub(crate) fn job_arguments(elements: &BTreeSet<Element>) -> Vec<String> {
    let mut arguments = Vec::new();
    let mut rest = elements.iter().peekable();
    while let Some(first) = rest.next() {
        let mut indices = vec![first.index];
        while let Some(next) = rest.next_if(|next| next.job == first.job) {
            indices.push(next.index);
        }
        arguments.push(match indices.as_slice() {
            [0] => first.job.to_string(),
            _ => format!("{}[{}]", first.job, index_list(&indices)),
        });
    }
    arguments
}

/// `1,2,3,7` → `1-3,7` (LSF's index_list syntax).
fn index_list(indices: &[u32]) -> String {
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for &index in indices {
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == index => *last = index,
            _ => ranges.push((index, index)),
        }
    }
    let text: Vec<String> = ranges
        .iter()
        .map(|&(first, last)| match first == last {
            true => first.to_string(),
            false => format!("{first}-{last}"),
        })
        .collect();
    text.join(",")
}

#[cfg(test)]
mod tests;
