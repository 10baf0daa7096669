//! Workers of one task as job arrays, for the cluster launcher
//! (`queue.rs`): which requests go into one array, and failing a whole
//! array at once.

use crate::{LaunchError, WorkerRequest};

/// How many of `requests` go into the first one's array: the run of
/// consecutive worker ids of one task that are not `in_use` (the driver
/// sends nothing else, but a gap must not shift ids), in whole jobs of
/// the task's `workers_per_job`; fewer than one job's worth are one
/// smaller job, in an array of their own.
pub(crate) fn group_len(requests: &[WorkerRequest], in_use: impl Fn(u64) -> bool) -> usize {
    let run = consecutive_len(requests, in_use);
    let per_job = requests[0].cluster.workers_per_job() as usize;
    match run < per_job {
        true => run,
        false => run - run % per_job,
    }
}

/// The requests a cluster launcher submits first, as one array, of
/// `requests` (one submission of consecutive workers of one task).
pub fn first_array(requests: &[WorkerRequest]) -> &[WorkerRequest] {
    match requests.is_empty() {
        true => requests,
        false => &requests[..group_len(requests, |_| false)],
    }
}

/// Workers per job in an array of `group` (from [`group_len`]): the
/// task's `workers_per_job`, or all of them in a smaller last job.
pub(crate) fn per_job(group: &[WorkerRequest]) -> usize {
    (group[0].cluster.workers_per_job() as usize).min(group.len())
}

fn consecutive_len(requests: &[WorkerRequest], in_use: impl Fn(u64) -> bool) -> usize {
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

/// How many of `wanted` workers go into the next array: no more than the
/// task's room under `max_jobs`, the scheduler's largest array and the
/// launcher's window (halved after a limit refused an array), and at
/// least one.
pub(crate) fn split_len(
    wanted: usize,
    room: Option<usize>,
    max_array: Option<usize>,
    window: usize,
) -> usize {
    let most = [room, max_array]
        .into_iter()
        .flatten()
        .fold(window, usize::min);
    wanted.min(most.max(1))
}

/// One result per worker of a group whose submission failed: the error,
/// then copies of it.
pub(crate) fn failed_together<T>(
    error: LaunchError,
    workers: usize,
) -> Vec<Result<T, LaunchError>> {
    let copies: Vec<_> = (1..workers).map(|_| Err(copy_error(&error))).collect();
    std::iter::once(Err(error)).chain(copies).collect()
}

/// The same error again, for each worker of a group that failed together
/// (`LaunchError` holds `io::Error`s, which do not clone).
fn copy_error(error: &LaunchError) -> LaunchError {
    let io = |e: &std::io::Error| std::io::Error::new(e.kind(), e.to_string());
    match error {
        LaunchError::Submit { stderr, permanent } => LaunchError::Submit {
            stderr: stderr.clone(),
            permanent: *permanent,
        },
        LaunchError::Waiting { limit, message } => LaunchError::Waiting {
            limit: limit.clone(),
            message: message.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_split_to_the_smallest_cap() {
        // 20 workers, MaxArraySize 8 (indices 0-7): 8, 8, then 4.
        assert_eq!(split_len(20, None, Some(8), usize::MAX), 8);
        assert_eq!(split_len(4, None, Some(8), usize::MAX), 4);
        assert_eq!(
            split_len(20, Some(3), Some(8), usize::MAX),
            3,
            "max_jobs room"
        );
        assert_eq!(split_len(20, None, None, 2), 2, "halved window");
        assert_eq!(split_len(20, None, Some(0), usize::MAX), 1, "never none");
    }
}
