//! The run directory: where a run keeps what outlives it.
//!
//! `<run-dir>/done/<task>/` holds the done markers, `events.jsonl` what
//! happened, `logs/<task>/` the output of user code. The default is
//! `./daisy_run/<pipeline name>`, so re-running the same pipeline from the
//! same place resumes it.

use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// `explicit` if given, else `./daisy_run/<pipeline name>`.
    pub fn new(explicit: Option<&Path>, pipeline_name: &str) -> Self {
        let path = match explicit {
            Some(path) => path.to_path_buf(),
            None => Path::new("daisy_run").join(pipeline_name),
        };
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn done_marker(&self, task_id: &str) -> PathBuf {
        self.path.join("done").join(task_id)
    }

    pub fn task_logs(&self, task_id: &str) -> PathBuf {
        self.path.join("logs").join(task_id)
    }

    /// The driver's addresses and token, for workers started by hand.
    pub fn context_file(&self) -> PathBuf {
        self.path.join("context.json")
    }

    /// The commands that start workers by hand, one line per task.
    pub fn worker_commands(&self) -> PathBuf {
        self.path.join("worker-commands.txt")
    }

    pub fn events(&self) -> PathBuf {
        self.path.join("events.jsonl")
    }
}
