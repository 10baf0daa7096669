//! Finding the `daisy-worker` binary the driver asks launchers to start.
//!
//! Three places, in order: `DAISY_WORKER_BIN` (an explicit choice, so it
//! is never second-guessed), the directory of the running executable
//! (`cargo build` and release archives put both binaries side by side),
//! then PATH. The search is a pure function of those three inputs so
//! tests need not touch the process environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::LaunchError;

/// Environment variable naming the worker binary explicitly.
pub const DAISY_WORKER_BIN: &str = "DAISY_WORKER_BIN";

/// The worker binary's file name, beside the driver or on PATH.
pub const WORKER_PROGRAM_NAME: &str = "daisy-worker";

/// The `daisy-worker` to start: `DAISY_WORKER_BIN` if set, else the one
/// beside the current executable, else the one on PATH. The path returned
/// is absolute, so it means the same whatever a worker's working directory.
pub fn find_worker_program() -> Result<PathBuf, LaunchError> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    find_worker_program_in(
        std::env::var_os(DAISY_WORKER_BIN),
        exe_dir,
        std::env::var_os("PATH"),
    )
}

/// [`find_worker_program`] with its inputs given: the value of
/// `DAISY_WORKER_BIN` (empty counts as unset), the current executable's
/// directory and the value of PATH.
fn find_worker_program_in(
    env_value: Option<OsString>,
    exe_dir: Option<PathBuf>,
    path: Option<OsString>,
) -> Result<PathBuf, LaunchError> {
    if let Some(value) = env_value.filter(|value| !value.is_empty()) {
        let path = PathBuf::from(value);
        return std::fs::canonicalize(&path)
            .map_err(|source| LaunchError::WorkerBinMissing { path, source });
    }
    let beside_exe = exe_dir.map(|dir| dir.join(WORKER_PROGRAM_NAME));
    if let Some(beside) = beside_exe.as_ref().filter(|beside| beside.is_file()) {
        return Ok(beside.clone());
    }
    which::which_in_global(WORKER_PROGRAM_NAME, path)
        .ok()
        .and_then(|mut found| found.next())
        .ok_or(LaunchError::WorkerNotFound { beside_exe })
}

/// The middle clause of [`LaunchError::WorkerNotFound`]'s message.
pub(crate) fn describe_beside_exe(beside_exe: &Option<PathBuf>) -> String {
    match beside_exe {
        Some(path) => format!("{} does not exist", path.display()),
        None => "the current executable's directory is unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// An executable file named `daisy-worker` in a fresh directory.
    fn worker_in(dir: &Path) -> PathBuf {
        let program = dir.join(WORKER_PROGRAM_NAME);
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        program
    }

    #[test]
    fn daisy_worker_bin_wins_over_the_other_places() {
        let (chosen, beside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let program = worker_in(chosen.path());
        worker_in(beside.path());
        let found = find_worker_program_in(
            Some(program.clone().into()),
            Some(beside.path().to_path_buf()),
            Some(beside.path().into()),
        );
        assert_eq!(found.unwrap(), program.canonicalize().unwrap());
    }

    #[test]
    fn a_missing_daisy_worker_bin_is_an_error_not_a_fallback() {
        let beside = tempfile::tempdir().unwrap();
        worker_in(beside.path());
        let missing = beside.path().join("no-such-worker");
        let found = find_worker_program_in(
            Some(missing.clone().into()),
            Some(beside.path().to_path_buf()),
            None,
        );
        let error = found.unwrap_err();
        assert!(matches!(&error, LaunchError::WorkerBinMissing { path, .. } if *path == missing));
        assert!(error.to_string().contains("no-such-worker"), "{error}");
    }

    #[test]
    fn the_worker_beside_the_executable_comes_before_path() {
        let (beside, on_path) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let program = worker_in(beside.path());
        worker_in(on_path.path());
        let found = find_worker_program_in(
            Some(OsString::new()),
            Some(beside.path().to_path_buf()),
            Some(on_path.path().into()),
        );
        assert_eq!(found.unwrap(), program);
    }

    #[test]
    fn the_worker_on_path_is_the_last_resort() {
        let (empty, on_path) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let program = worker_in(on_path.path());
        let path = std::env::join_paths([empty.path(), on_path.path()]).unwrap();
        let found = find_worker_program_in(None, Some(empty.path().to_path_buf()), Some(path));
        assert_eq!(found.unwrap(), program);
    }

    #[test]
    fn not_found_names_every_place_looked_at() {
        let empty = tempfile::tempdir().unwrap();
        let found = find_worker_program_in(
            None,
            Some(empty.path().to_path_buf()),
            Some(empty.path().into()),
        );
        let message = found.unwrap_err().to_string();
        let beside = empty.path().join(WORKER_PROGRAM_NAME);
        assert!(message.contains(DAISY_WORKER_BIN), "{message}");
        assert!(message.contains(&*beside.to_string_lossy()), "{message}");
        assert!(message.contains("PATH"), "{message}");
    }
}
