//! The figure as PNG: headless Chromium renders the SVG and takes a
//! screenshot exactly the figure's size.
//!
//! Chromium is found through `DAISY_CHROMIUM`, else on `PATH`. It runs
//! with a fresh profile in a temporary directory, no network services, in
//! its own process group, which is killed when the screenshot is taken
//! (or the time runs out), so no helper process outlives the command.

use super::svg::Chart;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Names Chromium goes by on PATH, tried in order.
const CHROMIUM_NAMES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// Generous: a cold Chromium on a busy login node can take many seconds.
const RENDER_TIMEOUT: Duration = Duration::from_secs(120);

/// Why no PNG was written.
#[derive(Debug, thiserror::Error)]
pub enum PngError {
    #[error(
        "--format png needs Chromium, and none was found on PATH (tried {}); \
         install it (Debian: apt-get install chromium), set DAISY_CHROMIUM to its path, \
         or use --format svg",
        CHROMIUM_NAMES.join(", ")
    )]
    NoChromium,
    #[error("preparing the figure for Chromium in a temporary directory")]
    Prepare(#[source] std::io::Error),
    #[error("starting {program}")]
    Start {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} did not render the figure within {} s", RENDER_TIMEOUT.as_secs())]
    TimedOut { program: PathBuf },
    #[error("{program} failed ({status}); the end of its output:\n{stderr}")]
    Failed {
        program: PathBuf,
        status: ExitStatus,
        stderr: String,
    },
    #[error("{program} exited without writing {path}")]
    NoScreenshot { program: PathBuf, path: PathBuf },
}

/// `DAISY_CHROMIUM` if set, else the first Chromium on PATH.
pub fn find_chromium() -> Result<PathBuf, PngError> {
    if let Some(path) = std::env::var_os("DAISY_CHROMIUM") {
        return Ok(PathBuf::from(path));
    }
    CHROMIUM_NAMES
        .iter()
        .find_map(|name| which::which(name).ok())
        .ok_or(PngError::NoChromium)
}

/// Renders `figure` to the PNG file `output`.
pub fn render_svg(figure: &Chart, output: &Path) -> Result<(), PngError> {
    screenshot(&find_chromium()?, figure, output)
}

/// Renders `figure` to `output` with the Chromium at `program`.
fn screenshot(program: &Path, figure: &Chart, output: &Path) -> Result<(), PngError> {
    let program = program.to_path_buf();
    let scratch = tempfile::tempdir().map_err(PngError::Prepare)?;
    let page = scratch.path().join("report.svg");
    std::fs::write(&page, &figure.svg).map_err(PngError::Prepare)?;
    let output = std::path::absolute(output).map_err(PngError::Prepare)?;
    // A stale file must not pass for this run's screenshot.
    let _ = std::fs::remove_file(&output);
    let stderr_path = scratch.path().join("chromium.err");
    let stderr = std::fs::File::create(&stderr_path).map_err(PngError::Prepare)?;
    let mut command = Command::new(&program);
    command
        .args(headless_args(&scratch.path().join("profile")))
        .arg(format!("--screenshot={}", output.display()))
        .arg(format!(
            "--window-size={},{}",
            figure.width.ceil(),
            figure.height.ceil()
        ))
        .arg(&page)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .process_group(0);
    let child = command.spawn().map_err(|source| PngError::Start {
        program: program.clone(),
        source,
    })?;
    let status = ProcessGroup(child).wait(RENDER_TIMEOUT);
    match status {
        None => Err(PngError::TimedOut { program }),
        Some(status) if !status.success() => Err(PngError::Failed {
            program,
            status,
            stderr: tail(&std::fs::read_to_string(&stderr_path).unwrap_or_default()),
        }),
        Some(_) if !output.is_file() => Err(PngError::NoScreenshot {
            program,
            path: output,
        }),
        Some(_) => Ok(()),
    }
}

/// Headless, no GPU, no sandbox (containers and batch nodes often forbid
/// it), nothing phoning home, and a throwaway profile at `profile`.
pub fn headless_args(profile: &Path) -> Vec<String> {
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
    ]
    .into_iter()
    .map(String::from)
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect()
}

/// The last lines of Chromium's chatty stderr.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// A child leading its own process group; the whole group is killed on
/// drop, since Chromium leaves helper processes behind.
struct ProcessGroup(Child);

impl ProcessGroup {
    /// The exit status, or `None` if it took longer than `timeout`.
    fn wait(mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.0.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(_) => return None,
            }
        }
        None
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chromium_runs_headless_with_a_private_profile() {
        let args = headless_args(Path::new("/tmp/x/profile"));
        assert!(args.contains(&"--headless".to_string()));
        assert!(args.contains(&"--disable-background-networking".to_string()));
        assert_eq!(args.last().unwrap(), "--user-data-dir=/tmp/x/profile");
    }

    #[test]
    fn a_missing_chromium_is_a_clear_error() {
        let figure = Chart {
            svg: String::new(),
            width: 1.0,
            height: 1.0,
        };
        let program = Path::new("/nonexistent/chromium");
        let error = screenshot(program, &figure, Path::new("/tmp/never.png")).unwrap_err();
        assert!(
            error.to_string().contains("starting /nonexistent/chromium"),
            "{error}"
        );
        assert!(PngError::NoChromium.to_string().contains("DAISY_CHROMIUM"));
    }
}
