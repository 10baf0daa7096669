//! The run directory: where a run keeps what outlives it.
//!
//! `<run-dir>/done/<task>/` holds the done markers, `events.jsonl` what
//! happened, `logs/<task>/` the output of user code. The default is
//! `./daisy_run/<pipeline name>`, so re-running the same pipeline from the
//! same place resumes it.

pub mod done_marker;
pub(crate) mod events;
pub(crate) mod lock;
pub(crate) mod outcome_recorder;
pub(crate) mod reset;
pub(crate) mod run_state;
pub(crate) mod start_checks;
pub(crate) mod user_logs;

use crate::pipeline::Pipeline;
use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// `explicit` if given, else `./daisy_run/<pipeline name>`.
    pub fn new(explicit: Option<&Path>, pipeline_name: &str) -> Self {
        match explicit {
            Some(path) => Self::at(path),
            None => Self::at(&Path::new("daisy_run").join(pipeline_name)),
        }
    }

    /// The run directory at `path`, whatever pipeline ran there (as
    /// `status` and `report` are given it).
    pub fn at(path: &Path) -> Self {
        let path = path.to_path_buf();
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

    /// The running driver's dashboard URL, token included (`run
    /// --dashboard`); removed when the run ends.
    pub fn dashboard_url(&self) -> PathBuf {
        self.path.join("dashboard.url")
    }

    /// The commands that start workers by hand, one line per task.
    pub fn worker_commands(&self) -> PathBuf {
        self.path.join("worker-commands.txt")
    }

    /// Locked by the driver or reset writing here (see `run_lock`).
    pub fn lock_file(&self) -> PathBuf {
        self.path.join("driver.lock")
    }

    pub fn events(&self) -> PathBuf {
        self.path.join("events.jsonl")
    }

    /// The pipeline of the last run, so that `status` and `report` need
    /// only the run directory.
    pub fn pipeline_record(&self) -> PathBuf {
        self.path.join("pipeline.json")
    }

    /// Keeps the pipeline file's text, and where it was (which anchors a
    /// relative job template), in the run directory. Written atomically.
    pub fn record_pipeline(&self, file: &Path) -> anyhow::Result<()> {
        let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let record = PipelineRecord { file, text };
        let target = self.pipeline_record();
        std::fs::create_dir_all(&self.path)
            .with_context(|| format!("creating the run directory {}", self.path.display()))?;
        let partial = target.with_extension("json.partial");
        std::fs::write(&partial, serde_json::to_vec_pretty(&record)?)
            .and_then(|()| std::fs::rename(&partial, &target))
            .with_context(|| format!("writing {}", target.display()))
    }

    /// The pipeline recorded by the last run in this directory.
    pub fn load_recorded_pipeline(&self, python: &str) -> anyhow::Result<Pipeline> {
        let path = self.pipeline_record();
        let bytes = std::fs::read(&path).with_context(|| {
            format!(
                "reading {} (is {} a run directory?)",
                path.display(),
                self.path.display()
            )
        })?;
        let record: PipelineRecord = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a pipeline record", path.display()))?;
        Pipeline::from_str(&record.text, &record.file, python)
            .with_context(|| format!("the pipeline recorded in {}", path.display()))
    }
}

/// `pipeline.json` in a run directory.
#[derive(Serialize, Deserialize)]
struct PipelineRecord {
    /// The absolute path the pipeline was read from.
    file: PathBuf,
    /// Its text at the time of the run.
    text: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_pipeline_loads_without_the_original_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.toml");
        let text = r#"
            name = "p"
            [[task]]
            id = "a"
            block_command = ["true"]
            total_roi = { offset = [0], shape = [10] }
            read_roi = { offset = [0], shape = [5] }
            write_roi = { offset = [0], shape = [5] }
        "#;
        std::fs::write(&file, text).unwrap();
        let run_dir = RunDir::at(&dir.path().join("run"));
        run_dir.record_pipeline(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        let pipeline = run_dir
            .load_recorded_pipeline(crate::pipeline::python_worker::PYTHON_ON_PATH)
            .unwrap();
        assert_eq!(pipeline.name, "p");
        assert_eq!(pipeline.tasks[0].spec.id, "a");
    }

    #[test]
    fn a_directory_without_a_record_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let run_dir = RunDir::at(dir.path());
        let error = format!(
            "{:#}",
            run_dir
                .load_recorded_pipeline(crate::pipeline::python_worker::PYTHON_ON_PATH)
                .unwrap_err()
        );
        assert!(error.contains("pipeline.json"), "{error}");
    }
}
