//! One launcher per launcher kind the pipeline's tasks use, behind one
//! [`Launcher`]: a task's workers are started by its own kind (a cheap
//! task as local processes, a GPU task as SLURM jobs, another on LSF),
//! each worker is cancelled by the backend that started it, and each
//! backend is polled as often as it wants to be.

use crate::pipeline::{LauncherKind, Pipeline};
use crate::run::launching::fork_server;
use crate::run::launching::{self, LaunchSettings};
use launchers::{JobEnd, JobId, LaunchError, Launcher, LocalLauncher, WorkerRequest};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The launchers of a run, one per kind in use.
pub struct TaskLaunchers {
    backends: Vec<Backend>,
    /// Task id → its backend.
    task_backend: HashMap<String, usize>,
    /// Worker id → the backend that started it.
    owner: HashMap<u64, usize>,
}

struct Backend {
    kind: LauncherKind,
    launcher: Box<dyn Launcher>,
    next_poll: Instant,
}

impl TaskLaunchers {
    /// The launchers `pipeline`'s tasks ask for (the pipeline's own when
    /// it has no task), each set up once.
    pub fn new(pipeline: &Pipeline, settings: LaunchSettings) -> anyhow::Result<Self> {
        let mut backends: Vec<Backend> = Vec::new();
        let mut task_backend = HashMap::new();
        let configs = (pipeline.tasks.iter()).map(|t| (Some(&t.spec.id), &t.launcher));
        let configs = configs.chain(
            pipeline
                .tasks
                .is_empty()
                .then_some((None, &pipeline.launcher)),
        );
        for (task, config) in configs {
            let index = match backends.iter().position(|b| b.kind == config.kind) {
                Some(index) => index,
                None => {
                    let launcher: Box<dyn Launcher> = match config.kind {
                        LauncherKind::Local => Box::new(
                            LocalLauncher::with_grace(settings.stop_grace)
                                .with_fork_server_if(fork_server::for_run(pipeline, &settings)),
                        ),
                        _ => launching::launcher(config, settings)?,
                    };
                    backends.push(Backend {
                        kind: config.kind,
                        next_poll: Instant::now() + launcher.poll_interval(),
                        launcher,
                    });
                    backends.len() - 1
                }
            };
            if let Some(task) = task {
                task_backend.insert(task.clone(), index);
            }
        }
        Ok(Self {
            backends,
            task_backend,
            owner: HashMap::new(),
        })
    }

    /// Calls `call` on each backend with the workers of `worker_ids` it
    /// started.
    fn tell_owners(&mut self, worker_ids: &[u64], call: impl Fn(&mut dyn Launcher, &[u64])) {
        for (index, backend) in self.backends.iter_mut().enumerate() {
            let own: Vec<u64> = (worker_ids.iter().copied())
                .filter(|id| self.owner.get(id) == Some(&index))
                .collect();
            if !own.is_empty() {
                call(backend.launcher.as_mut(), &own);
            }
        }
    }

    fn backend_of(&self, request: &WorkerRequest) -> usize {
        self.task_backend
            .get(&request.task_id)
            .copied()
            .unwrap_or(0)
    }
}

impl Launcher for TaskLaunchers {
    fn name(&self) -> &'static str {
        match &self.backends[..] {
            [only] => only.launcher.name(),
            _ => "per-task",
        }
    }

    fn start(&mut self, request: &WorkerRequest) -> Result<JobId, LaunchError> {
        let index = self.backend_of(request);
        self.owner.insert(request.worker_id, index);
        self.backends[index].launcher.start(request)
    }

    /// A submission is one task's workers, so one backend's (one job
    /// array on a cluster).
    fn start_many(&mut self, requests: &[WorkerRequest]) -> Vec<Result<JobId, LaunchError>> {
        let Some(first) = requests.first() else {
            return Vec::new();
        };
        let index = self.backend_of(first);
        for request in requests {
            self.owner.insert(request.worker_id, index);
        }
        let backend = &mut self.backends[index];
        let results = backend.launcher.start_many(requests);
        // Submissions a limit held back may be due before the next poll.
        let due = Instant::now() + backend.launcher.poll_interval();
        backend.next_poll = backend.next_poll.min(due);
        results
    }

    fn poll_interval(&self) -> Duration {
        let next = self.backends.iter().map(|b| b.next_poll).min();
        next.map_or(Duration::from_secs(1), |next| {
            next.saturating_duration_since(Instant::now())
        })
    }

    /// Polls the backends that are due.
    fn poll_ended(&mut self) -> Vec<(u64, JobId, JobEnd)> {
        let now = Instant::now();
        let mut ended = Vec::new();
        for backend in self.backends.iter_mut().filter(|b| b.next_poll <= now) {
            ended.extend(backend.launcher.poll_ended());
            backend.next_poll = Instant::now() + backend.launcher.poll_interval();
        }
        for (worker_id, _, _) in &ended {
            self.owner.remove(worker_id);
        }
        ended
    }

    /// Every backend's: held submissions are tried at its polls, so
    /// their outcomes wait for the next call at the latest.
    fn poll_started(&mut self) -> Vec<(u64, Result<JobId, LaunchError>)> {
        let started: Vec<_> = (self.backends.iter_mut())
            .flat_map(|b| b.launcher.poll_started())
            .collect();
        for (worker_id, result) in &started {
            if result.is_err() && !matches!(result, Err(LaunchError::Waiting { .. })) {
                self.owner.remove(worker_id);
            }
        }
        started
    }

    fn cancel(&mut self, worker_ids: &[u64]) {
        self.tell_owners(worker_ids, |launcher, own| launcher.cancel(own));
    }

    fn left(&mut self, worker_ids: &[u64]) {
        self.tell_owners(worker_ids, |launcher, own| launcher.left(own));
        let now = Instant::now();
        for backend in &mut self.backends {
            let due = now + backend.launcher.poll_interval();
            backend.next_poll = backend.next_poll.min(due);
        }
    }

    /// Ends every backend's jobs; the next poll asks every backend, so
    /// that each reports its cancelled jobs' ends.
    fn cancel_all(&mut self) {
        let now = Instant::now();
        for backend in &mut self.backends {
            backend.launcher.cancel_all();
            backend.next_poll = now;
        }
    }
}
