//! What the worker's benches share: the driver they run against.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The driver binary of this tree, built in the profile of `worker` (the
/// bench's `daisy-worker`) and beside it.
pub fn build_driver(worker: &str) -> Result<PathBuf, String> {
    let profile_dir = Path::new(worker).parent().ok_or("no profile directory")?;
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "-q", "-p", "daisy-driver", "--bin", "daisy-driver"]);
    if profile_dir.ends_with("release") {
        build.arg("--release");
    }
    let status = build
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building daisy-driver failed: {status}"));
    }
    Ok(profile_dir.join("daisy-driver"))
}
