//! `run --dashboard`: a read-only web page of the run, served by the
//! driver while the run goes and updated live: where each task is, its
//! workers (queued, running, draining, lost, with job and host), blocks
//! per second, the failed blocks and why, and the report's views (the
//! workers' timeline, the done markers filling in). When the run ends,
//! every open page gets its final state before the driver exits.
//!
//! - [`address`]: where it listens (`--dashboard[=ADDR]`) and its URL.
//! - [`snapshots`]: the run drawn again, on a thread of its own, only
//!   while someone watches.
//! - [`http`]: the routes, the token, GET only.
//! - [`stream`]: each drawing pushed to open pages as a server-sent event.
//! - [`page`]: the page's files and its live part's HTML.

mod address;
mod http;
mod page;
mod snapshots;
mod stream;

pub use address::DashboardAddr;
use snapshots::{Snapshot, Snapshots};

use crate::run::context::{new_token, write_secret};
use crate::run_dir::RunDir;
use anyhow::Context as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the driver waits, at the end of a run, for open pages to
/// receive its final state.
const FINAL_DELIVERY: Duration = Duration::from_secs(3);

/// The dashboard of a running run.
pub struct Dashboard {
    url_file: PathBuf,
    snapshots: Snapshots,
    server: tokio::task::JoinHandle<()>,
}

impl Dashboard {
    /// Serves the run in `run_dir` on `listener` (bound by the caller, so
    /// that a port in use refuses the run before it starts); prints the
    /// URL and writes it to the run directory. Must be called on the
    /// runtime the server is to run on.
    pub fn start(listener: std::net::TcpListener, run_dir: &RunDir) -> anyhow::Result<Self> {
        let bound = listener.local_addr().context("the dashboard's address")?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .context("serving the dashboard on its listener")?;
        let token = new_token()?;
        let url = address::url(bound, &token);
        let url_file = run_dir.dashboard_url();
        write_secret(&url_file, &format!("{url}\n"))?;
        let snapshots = Snapshots::start(run_dir).context("starting the dashboard's thread")?;
        let served = Arc::new(http::Served {
            token,
            snapshots: snapshots.clone(),
            run_dir: run_dir.clone(),
        });
        let server = tokio::spawn(http::serve(listener, served));
        crate::run::output::stdout::print_line(format_args!(
            "daisy-driver: dashboard at {url} (read-only; the URL is also in {})",
            url_file.display()
        ));
        Ok(Self {
            url_file,
            snapshots,
            server,
        })
    }

    /// The run is over: open pages get its final state (for a few seconds
    /// at most), then the server stops and the URL file goes.
    pub async fn finish(self) {
        self.snapshots.end();
        let deadline = Instant::now() + FINAL_DELIVERY;
        while self.snapshots.watchers() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.server.abort();
        let _ = std::fs::remove_file(&self.url_file);
    }
}
