//! Workers of one task as job arrays: what every cluster backend does the
//! same way. A backend says how to submit one array (`start_group`) and
//! which worker ids it still tracks; splitting a request list into arrays
//! and failing a whole array at once live here.

use crate::{JobId, LaunchError, WorkerRequest};

/// A backend that submits a run of consecutive worker ids as one array.
pub(crate) trait ArrayBackend {
    /// True while a job of this worker id is tracked (not reported ended).
    fn tracks(&self, worker_id: u64) -> bool;

    /// Submits `group` (consecutive worker ids of one task) as one array,
    /// one result per worker.
    fn start_group(&mut self, group: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>>;
}

/// `Launcher::start` of an array backend: an array of one.
pub(crate) fn start_one(
    backend: &mut impl ArrayBackend,
    request: &WorkerRequest,
) -> Result<JobId, LaunchError> {
    let mut results = start_in_arrays(backend, std::slice::from_ref(request));
    results.pop().expect("one result per request")
}

/// `Launcher::start_many` of an array backend: each run of consecutive
/// worker ids of one task as one array; a worker id still tracked is
/// refused on its own.
pub(crate) fn start_in_arrays(
    backend: &mut impl ArrayBackend,
    requests: &[WorkerRequest],
) -> Vec<Result<JobId, LaunchError>> {
    let mut results = Vec::with_capacity(requests.len());
    let mut rest = requests;
    while let Some(first) = rest.first() {
        if backend.tracks(first.worker_id) {
            results.push(Err(LaunchError::WorkerIdInUse {
                task_id: first.task_id.clone(),
                worker_id: first.worker_id,
            }));
            rest = &rest[1..];
            continue;
        }
        let len = group_len(rest, |worker| backend.tracks(worker));
        results.extend(backend.start_group(&rest[..len]));
        rest = &rest[len..];
    }
    results
}

/// How many of `requests` go into the first one's array: the run of
/// consecutive worker ids of one task that are not `in_use` (the driver
/// sends nothing else, but a gap must not shift ids).
fn group_len(requests: &[WorkerRequest], in_use: impl Fn(u64) -> bool) -> usize {
    let mut len = 1;
    while let Some(next) = requests.get(len) {
        let before = &requests[len - 1];
        let follows = next.worker_id == before.worker_id + 1 && next.task_id == before.task_id;
        if !follows || in_use(next.worker_id) {
            break;
        }
        len += 1;
    }
    len
}

/// The same error again, for each worker of a group that failed together
/// (`LaunchError` holds `io::Error`s, which do not clone).
pub(crate) fn copy_error(error: &LaunchError) -> LaunchError {
    let io = |e: &std::io::Error| std::io::Error::new(e.kind(), e.to_string());
    match error {
        LaunchError::Submit { stderr, permanent } => LaunchError::Submit {
            stderr: stderr.clone(),
            permanent: *permanent,
        },
        LaunchError::Spawn {
            program,
            working_dir,
            source,
        } => LaunchError::Spawn {
            program: program.clone(),
            working_dir: working_dir.clone(),
            source: io(source),
        },
        LaunchError::Script { path, source } => LaunchError::Script {
            path: path.clone(),
            source: io(source),
        },
        LaunchError::TemplateRead { path, source } => LaunchError::TemplateRead {
            path: path.clone(),
            source: io(source),
        },
        LaunchError::Template {
            template,
            line,
            problem,
        } => LaunchError::Template {
            template: template.clone(),
            line: *line,
            problem: problem.clone(),
        },
        LaunchError::UnexpectedOutput { command, output } => LaunchError::UnexpectedOutput {
            command,
            output: output.clone(),
        },
        other => LaunchError::Submit {
            stderr: other.to_string(),
            permanent: true,
        },
    }
}
