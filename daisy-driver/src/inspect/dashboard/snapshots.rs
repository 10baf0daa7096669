//! The run drawn again and again for the dashboard, on a thread of its
//! own: only while someone watches (an open page, or a script that just
//! asked), at most every [`MIN_INTERVAL`], and further apart when drawing
//! takes long (a twentieth of the time at most), so that a watched run of
//! millions of blocks pays a bounded share of one core. Each drawing
//! reads the events recorded since the last one (never the whole file
//! again) and the done markers, and asks the driver for its snapshot, as
//! `status` and `report` do: the page shows their model, not another.
//! The block server's thread is never waited on.

use super::page;
use crate::inspect::report::LiveReport;
use crate::inspect::status::{self, RunStatus};
use crate::pipeline::Pipeline;
use crate::run_dir::run_state::RunEvents;
use crate::run_dir::RunDir;
use hyper::body::Bytes;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The shortest time between two drawings: `status --watch`'s, live
/// enough for a run of hours; each drawing costs the run (on 2 cores, a
/// drawing every second made the throughput bench's 100,000 no-op blocks
/// take 1.18× the time, every 2 s 1.06×).
pub const MIN_INTERVAL: Duration = Duration::from_secs(2);

/// How often the events recorded since are read while someone watches.
const READ_EVERY: Duration = Duration::from_millis(250);

/// Drawing takes one part in this many of the time at most: a page
/// watching a run of millions of blocks (a drawing of 150 ms at 10⁶
/// blocks, most of it the done-marker picture) costs the run 5% of a
/// core.
const BUSY_SHARE: u32 = 20;

/// One drawing of the run.
#[derive(Debug)]
pub struct Snapshot {
    /// The run is over: this is its final state.
    pub over: bool,
    pub drawn: Instant,
    /// What `status --json` prints.
    pub status_json: Bytes,
    /// The server-sent event that carries the page's parts.
    pub event: Bytes,
}

/// Who wants drawings, shared by the server and the drawing thread.
#[derive(Debug, Default)]
struct Demand {
    /// Pages open on the event stream.
    watchers: usize,
    /// A script asked for the status and waits for a drawing.
    asked: bool,
    /// The run ended: draw its final state, then stop.
    ending: bool,
}

#[derive(Debug, Default)]
struct Shared {
    demand: Mutex<Demand>,
    wake: Condvar,
}

/// The drawing thread's handle, shared by every connection.
#[derive(Clone, Debug)]
pub struct Snapshots {
    shared: Arc<Shared>,
    latest: watch::Receiver<Option<Arc<Snapshot>>>,
}

impl Snapshots {
    /// Starts the thread that draws the run in `run_dir`.
    pub fn start(run_dir: &RunDir) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let (publish, latest) = watch::channel(None);
        let drawer = Drawer {
            run_dir: run_dir.clone(),
            shared: Arc::clone(&shared),
            publish,
            followed: None,
        };
        std::thread::Builder::new()
            .name("daisy-dashboard".into())
            .spawn(move || drawer.run())?;
        Ok(Self { shared, latest })
    }

    /// The drawings as they come, the newest first.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Snapshot>>> {
        self.latest.clone()
    }

    /// A page opened (`true`) or closed its event stream.
    pub fn watching(&self, opened: bool) {
        let mut demand = self.demand();
        match opened {
            true => demand.watchers += 1,
            false => demand.watchers = demand.watchers.saturating_sub(1),
        }
        self.shared.wake.notify_all();
    }

    /// Pages with their event stream open.
    pub fn watchers(&self) -> usize {
        self.demand().watchers
    }

    /// A drawing at most [`MIN_INTERVAL`] old: the latest, or the next.
    /// `None` if none comes (the run ended and drawing stopped).
    pub async fn fresh(&self) -> Option<Arc<Snapshot>> {
        let mut latest = self.latest.clone();
        if let Some(snapshot) = latest.borrow_and_update().as_ref() {
            if snapshot.over || snapshot.drawn.elapsed() < MIN_INTERVAL {
                return Some(Arc::clone(snapshot));
            }
        }
        self.demand().asked = true;
        self.shared.wake.notify_all();
        latest.changed().await.ok()?;
        let snapshot = latest.borrow().clone();
        snapshot
    }

    /// The run is over: the final state is drawn once more, then drawing
    /// stops.
    pub fn end(&self) {
        self.demand().ending = true;
        self.shared.wake.notify_all();
    }

    fn demand(&self) -> MutexGuard<'_, Demand> {
        // A panic while drawing leaves plain counters behind: still valid.
        self.shared.demand.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The drawing thread's state.
struct Drawer {
    run_dir: RunDir,
    shared: Arc<Shared>,
    publish: watch::Sender<Option<Arc<Snapshot>>>,
    /// The run's pipeline and its report, followed as events come, once
    /// the pipeline could be read.
    followed: Option<(Pipeline, LiveReport)>,
}

/// What the drawing thread does next.
#[derive(Debug)]
enum Next {
    Draw {
        over: bool,
    },
    /// Read the events recorded since, between drawings, so that the
    /// final drawing has few left to read when the run ends.
    ReadEvents,
    /// Nobody can ask any more (the server is gone, or the run ended
    /// with no page open).
    Stop,
}

impl Drawer {
    fn run(mut self) {
        let mut interval = MIN_INTERVAL;
        let (mut drawn, mut read): (Option<Instant>, Instant) = (None, Instant::now());
        let mut sequence = 0;
        loop {
            match self.wait_for_demand(drawn, interval, read) {
                Next::Stop => return,
                Next::ReadEvents => {
                    if let Some((_, report)) = &mut self.followed {
                        // A failure shows in the next drawing.
                        let _ = report.update();
                    }
                }
                Next::Draw { over } => {
                    let started = Instant::now();
                    sequence += 1;
                    let snapshot = draw(&self.status_and_report(), sequence, over);
                    interval = MIN_INTERVAL.max(started.elapsed() * BUSY_SHARE);
                    drawn = Some(started);
                    let _ = self.publish.send(Some(Arc::new(snapshot)));
                    if over {
                        return;
                    }
                }
            }
            read = Instant::now();
        }
    }

    /// The status as `status` finds it, and the report's views, with the
    /// events recorded since the last drawing read.
    fn status_and_report(&mut self) -> anyhow::Result<(RunStatus, String)> {
        let (pipeline, report) = match &mut self.followed {
            Some(followed) => followed,
            None => {
                let pipeline = status::load_pipeline(&self.run_dir, None)?;
                let report = LiveReport::new(&self.run_dir, &pipeline);
                self.followed.insert((pipeline, report))
            }
        };
        report.update()?;
        let (body, tasks, warnings) = report.draw(&self.run_dir, pipeline);
        let none_yet = RunEvents::default();
        let events = report.run_events().unwrap_or(&none_yet);
        let status = status::status_from(&self.run_dir, pipeline, events, tasks, warnings);
        Ok((status, body))
    }

    /// Waits until a drawing is wanted and due (`drawn` the last,
    /// `interval` apart), or the events are to be read again (`read` the
    /// last time).
    fn wait_for_demand(&self, drawn: Option<Instant>, interval: Duration, read: Instant) -> Next {
        let mut demand = self.shared.demand.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if demand.ending {
                // The final state is drawn for those watching alone.
                return match demand.watchers {
                    0 => Next::Stop,
                    _ => Next::Draw { over: true },
                };
            }
            if self.publish.is_closed() {
                return Next::Stop;
            }
            let since = drawn.map_or(interval, |drawn| drawn.elapsed());
            let wanted = demand.watchers > 0 || demand.asked;
            if wanted && since >= interval {
                demand.asked = false;
                return Next::Draw { over: false };
            }
            if wanted && read.elapsed() >= READ_EVERY {
                return Next::ReadEvents;
            }
            // Wakes up now and then to notice a server that went away.
            let wait = match wanted {
                true => (interval - since).min(READ_EVERY.saturating_sub(read.elapsed())),
                false => Duration::from_secs(1),
            };
            demand = (self.shared.wake.wait_timeout(demand, wait))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The run as `status` and `report` find it now.
fn draw(drawn: &anyhow::Result<(RunStatus, String)>, sequence: u64, over: bool) -> Snapshot {
    let status_json = match drawn {
        Ok((status, _)) => serde_json::to_vec(status).unwrap_or_default(),
        Err(error) => serde_json::to_vec(&serde_json::json!({ "error": format!("{error:#}") }))
            .unwrap_or_default(),
    };
    let parts = page::Parts::of(drawn, over);
    let data = serde_json::json!({
        "sequence": sequence,
        "over": over,
        "title": parts.title,
        "pipeline": parts.pipeline,
        "live": parts.live,
        "report": parts.report,
    });
    Snapshot {
        over,
        drawn: Instant::now(),
        status_json: Bytes::from(status_json),
        event: Bytes::from(format!("event: snapshot\ndata: {data}\n\n")),
    }
}
