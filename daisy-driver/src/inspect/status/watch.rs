//! `status --watch`: the status drawn again every interval while the run's
//! driver answers, for those who watch a run from a terminal without a
//! browser. On a terminal each snapshot replaces the last (the screen is
//! cleared first); in a file or a pipe snapshots follow each other, each
//! under a line with its time, and `--json` makes one JSON object per
//! line. It ends by itself once the run is over (the last snapshot is the
//! final state, with its exit status), or when whoever reads stops. Over
//! means no driver answers and either the last run recorded its end or
//! [`UNANSWERED_SNAPSHOTS`] snapshots in a row found no driver (a killed
//! driver records no end; a driver just starting, or one too busy to
//! answer once, must not end the watch).

use super::{status, RunStatus};
use crate::run_dir::RunDir;
use anyhow::Context as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Clears a terminal and puts the cursor top left.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Snapshots in a row without a driver, and without a recorded end,
/// after which the run counts as over.
pub const UNANSWERED_SNAPSHOTS: u32 = 3;

/// Shows the status of `run_dir` every `every` until no driver runs;
/// returns the exit status of the last one (as `status` would).
pub fn watch(
    run_dir: &RunDir,
    pipeline_file: Option<&Path>,
    every: Duration,
    json: bool,
) -> anyhow::Result<u8> {
    let terminal = std::io::stdout().is_terminal();
    let mut unanswered = 0;
    loop {
        let status = status(run_dir, pipeline_file)?;
        let snapshot = match json {
            true => serde_json::to_string(&status).context("encoding the status")? + "\n",
            false => frame(&status, terminal),
        };
        let mut stdout = std::io::stdout().lock();
        if stdout
            .write_all(snapshot.as_bytes())
            .and_then(|()| stdout.flush())
            .is_err()
        {
            // Nobody reads any more (`| head`, a closed terminal).
            return Ok(status.state.exit_code());
        }
        let ended = status
            .last_run
            .as_ref()
            .is_some_and(|run| run.finished.is_some());
        unanswered = match status.running {
            true => 0,
            false => unanswered + 1,
        };
        if !status.running && (ended || unanswered >= UNANSWERED_SNAPSHOTS) {
            return Ok(status.state.exit_code());
        }
        drop(stdout);
        std::thread::sleep(every);
    }
}

/// One snapshot as text: replacing the last on a terminal, under a line
/// with its time elsewhere.
fn frame(status: &RunStatus, terminal: bool) -> String {
    let header = match terminal {
        true => CLEAR.to_string(),
        false => {
            let now = humantime::format_rfc3339_seconds(SystemTime::now());
            format!("--- {now} ---\n")
        }
    };
    header + &status.render()
}
