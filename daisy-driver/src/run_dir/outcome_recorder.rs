//! What became of each block, recorded the same way by serial and
//! distributed runs: the done markers (the truth a resume reads) and
//! `events.jsonl`. A run of at most [`BLOCK_LINES_UP_TO`] blocks (all
//! tasks together; `DAISY_BLOCK_LINES_UP_TO` sets another limit) gets a
//! `block_done` line per done block; a bigger one gets `blocks_done`
//! records, per worker and task and about a second ([`DoneTally`]), so its
//! event log does not grow by ~110 bytes per block. Failures are a line
//! each in both.
//!
//! The order is what makes a run safe to kill: a block is marked done
//! before anything reports it done, so a driver killed at any moment never
//! loses a block it reported; its line or record is only buffered (see
//! [`crate::run_dir::events`]): a `kill -9` loses at most the last second's. A marker that cannot be written is the caller's
//! error to end the run with; an event that cannot be written is logged
//! and the run goes on ([`EventRecorder`]). The scheduler, which decides whether a
//! failed block is retried, stays with the caller: it passes the verdict in.

use crate::pipeline::Pipeline;
use crate::run_dir::done_marker::costs::StoredCost;
use crate::run_dir::done_marker::{DoneMarker, DoneMarkerError};
use crate::run_dir::events::done_tally::DoneTally;
use crate::run_dir::events::recorder::EventRecorder;
use crate::run_dir::events::{unix_now, Event, EventLog};
use crate::run_dir::RunDir;
use anyhow::Context as _;
use daisy_core::printable::printable;
use daisy_core::protocol::BlockCost;
use daisy_core::scheduler::Released;
use daisy_core::Block;

/// One run of a block: which worker ran it (none in a serial run), for
/// how long, and what else it cost (tasks tracking resources), as it was
/// measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Attempt {
    pub worker_id: Option<u64>,
    pub seconds: Option<f64>,
    pub cost: Option<BlockCost>,
}

/// Runs of up to this many blocks log a `block_done` line per block.
pub const BLOCK_LINES_UP_TO: u64 = 100_000;

/// Sets another limit than [`BLOCK_LINES_UP_TO`] (0: always sum up).
pub const BLOCK_LINES_UP_TO_ENV: &str = "DAISY_BLOCK_LINES_UP_TO";

/// Owns a run's done markers and event log.
pub struct OutcomeRecorder {
    /// Task ids by task index, as events name them.
    task_ids: Vec<String>,
    markers: Vec<DoneMarker>,
    events: EventRecorder,
    /// Done blocks not yet written, in a run too big for a line each.
    tally: Option<DoneTally>,
}

impl OutcomeRecorder {
    /// Opens every task's done marker and the event log of `run_dir`, and
    /// records the run's start (`mode`: `serial` or `distributed`).
    pub fn open(
        pipeline: &Pipeline,
        run_dir: &RunDir,
        mode: &str,
        retry_failed: bool,
    ) -> anyhow::Result<Self> {
        let markers = (pipeline.tasks.iter())
            .map(|t| DoneMarker::open(&run_dir.done_marker(&t.spec.id), &t.spec))
            .collect::<Result<Vec<_>, _>>()?;
        let mut events = EventLog::open(&run_dir.events())
            .with_context(|| format!("opening {}", run_dir.events().display()))?;
        events.record(&Event::RunStarted {
            pipeline: pipeline.name.as_str().into(),
            mode: mode.into(),
            retry_failed,
        })?;
        let blocks: u64 = markers
            .iter()
            .map(|m| m.grid_shape().iter().product::<u64>())
            .sum();
        Ok(Self {
            task_ids: pipeline.tasks.iter().map(|t| t.spec.id.clone()).collect(),
            markers,
            events: EventRecorder::new(events),
            tally: (blocks > block_lines_up_to()?).then(DoneTally::default),
        })
    }

    pub fn is_done(&self, block: &Block) -> bool {
        self.markers[block.id.task.index()].is_done(block)
    }

    /// Marks `block` done, then records it (buffered: the next
    /// [`Self::record`] or [`Self::flush`] writes the line, or its
    /// record once it is due). On an error nothing is recorded and the
    /// block must not count as done.
    pub fn done(&mut self, block: &Block, attempt: Attempt) -> Result<(), DoneMarkerError> {
        self.done_many(&[(*block, attempt)])
    }

    /// [`Self::done`] for the blocks of a release: each task's marks in
    /// one go (a write per run of neighbouring cells), then their records,
    /// all at the same time (a clock read per block was a twentieth of the
    /// driver's work per block in batches).
    pub fn done_many(&mut self, done: &[(Block, Attempt)]) -> Result<(), DoneMarkerError> {
        for (task, marker) in self.markers.iter_mut().enumerate() {
            let blocks = done.iter().map(|(block, _)| block);
            let mut of_task = blocks.filter(|b| b.id.task.index() == task).peekable();
            if of_task.peek().is_some() {
                marker.mark_done_many(of_task)?;
            }
        }
        self.record_costs(done);
        let now = unix_now();
        for (block, attempt) in done {
            self.record_done(block, *attempt, now);
        }
        Ok(())
    }

    /// Stores what the blocks of `done` that were measured cost, beside
    /// their marks. The figures are for the user's diagnosis, not for
    /// resuming: one that cannot be written is a warning.
    fn record_costs(&mut self, done: &[(Block, Attempt)]) {
        let costed: Vec<(&Block, StoredCost)> = (done.iter())
            .filter_map(|(block, attempt)| {
                let cost = attempt.cost.as_ref()?;
                Some((block, StoredCost::new(attempt.seconds.unwrap_or(0.0), cost)))
            })
            .collect();
        if costed.is_empty() {
            return;
        }
        for (task, marker) in self.markers.iter_mut().enumerate() {
            let of_task = costed
                .iter()
                .filter(|(block, _)| block.id.task.index() == task);
            if let Err(error) = marker.record_costs(of_task.copied()) {
                let error = anyhow::Error::new(error);
                let task = &self.task_ids[task];
                tracing::warn!("cannot store what blocks of task {task} cost: {error:#}");
            }
        }
    }

    /// Records `block` done at `time` (Unix seconds).
    fn record_done(&mut self, block: &Block, attempt: Attempt, time: f64) {
        let task = block.id.task.index();
        match &mut self.tally {
            Some(tally) => tally.add(task, attempt.worker_id, time, attempt.seconds),
            None => self.events.record_buffered_at(
                time,
                &Event::BlockDone {
                    task: self.task_ids[task].as_str().into(),
                    block_id: block.id.spatial,
                    worker_id: attempt.worker_id,
                    seconds: attempt.seconds,
                },
            ),
        }
    }

    /// Records a failed attempt of `block` (counted in its marker), which
    /// the scheduler `released` as retried or failed for good. `error`
    /// (a user process's stderr, as a worker sent it) is escaped before
    /// it reaches the events.
    pub fn failed(&mut self, block: &Block, attempt: Attempt, error: &str, released: &Released) {
        let task = block.id.task.index();
        self.markers[task].count_failed_attempt(block);
        let error = printable(error);
        let for_good = matches!(released, Released::FailedForGood { .. });
        self.events.record(&Event::BlockFailed {
            task: self.task_ids[task].as_str().into(),
            block_id: block.id.spatial,
            worker_id: attempt.worker_id,
            error,
            for_good,
            seconds: attempt.seconds,
        });
    }

    /// Records any other event at once, after the buffered ones and
    /// every done block so far.
    pub fn record(&mut self, event: &Event) {
        self.write_tally(true);
        self.events.record(event);
    }

    /// How many writes to `events.jsonl` failed in this run (a full
    /// disk): its record of the run is incomplete by that much.
    pub fn failed_event_writes(&self) -> u64 {
        self.events.failed_writes()
    }

    /// Writes the buffered events, and the records of done blocks that
    /// are due.
    pub fn flush(&mut self) {
        self.write_tally(false);
        self.events.flush();
    }

    /// Buffers the records of done blocks that are due, or all of them.
    fn write_tally(&mut self, all: bool) {
        let Some(tally) = &mut self.tally else {
            return;
        };
        for record in tally.take(unix_now(), all, &self.task_ids) {
            self.events.record_buffered_at(record.time, &record.event);
        }
    }

    /// Forces every done marker to disk (see [`DoneMarker::flush`]).
    pub fn flush_markers(&self) -> Result<(), DoneMarkerError> {
        self.markers.iter().try_for_each(DoneMarker::flush)
    }
}

impl Drop for OutcomeRecorder {
    /// A run that ends without a last event (an error) still writes its
    /// done blocks.
    fn drop(&mut self) {
        self.write_tally(true);
    }
}

/// The limit of [`BLOCK_LINES_UP_TO_ENV`], or the default.
fn block_lines_up_to() -> anyhow::Result<u64> {
    match std::env::var(BLOCK_LINES_UP_TO_ENV) {
        Err(_) => Ok(BLOCK_LINES_UP_TO),
        Ok(text) => text.trim().parse().map_err(|_| {
            anyhow::anyhow!("{BLOCK_LINES_UP_TO_ENV} = {text:?}: not a number of blocks")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::events::history::RunHistory;
    use daisy_core::{BlockId, Scheduler, TaskIdx};
    use std::path::Path;
    use std::sync::Arc;

    /// One task of 4 blocks.
    const PIPELINE: &str = r#"
        name = "p"
        [[task]]
        id = "paint"
        total_roi = { offset = [0], shape = [40] }
        read_roi = { offset = [0], shape = [10] }
        write_roi = { offset = [0], shape = [10] }
        read_write_conflict = false
        block_command = ["true"]
    "#;

    struct Run {
        _dir: tempfile::TempDir,
        pipeline: Pipeline,
        run_dir: RunDir,
        recorder: OutcomeRecorder,
        scheduler: Scheduler,
    }

    impl Run {
        fn open(mode: &str) -> Self {
            let pipeline = Pipeline::from_str(
                PIPELINE,
                Path::new("p.toml"),
                crate::pipeline::python_worker::PYTHON_ON_PATH,
            )
            .unwrap();
            let dir = tempfile::tempdir().unwrap();
            let run_dir = RunDir::at(dir.path());
            let recorder = OutcomeRecorder::open(&pipeline, &run_dir, mode, false).unwrap();
            let scheduler = Scheduler::new(Arc::new(pipeline.graph()));
            Self {
                _dir: dir,
                pipeline,
                run_dir,
                recorder,
                scheduler,
            }
        }

        fn next_block(&mut self) -> Block {
            let recorder = &self.recorder;
            (self.scheduler)
                .acquire(TaskIdx(0), &mut |b| recorder.is_done(b))
                .unwrap()
        }

        fn events(&self) -> Vec<Event<'static>> {
            let history = RunHistory::read(&self.run_dir.events(), Vec::new).unwrap();
            assert!(history.bad_lines.is_empty(), "{:?}", history.bad_lines);
            let events = history.last_run.unwrap_or_default();
            events.into_iter().map(|e| e.kind).collect()
        }

        /// The marker as the next run reads it.
        fn marker(&self) -> DoneMarker {
            let spec = &self.pipeline.tasks[0].spec;
            DoneMarker::open(&self.run_dir.done_marker("paint"), spec).unwrap()
        }
    }

    fn attempt(worker_id: Option<u64>) -> Attempt {
        Attempt {
            worker_id,
            seconds: Some(0.5),
            cost: None,
        }
    }

    #[test]
    fn opening_records_the_start_of_the_run() {
        let run = Run::open("serial");
        let [Event::RunStarted { pipeline, mode, .. }] = &run.events()[..] else {
            panic!("{:?}", run.events());
        };
        assert_eq!((&**pipeline, &**mode), ("p", "serial"));
    }

    #[test]
    fn a_done_block_is_marked_at_once_and_its_line_written_on_flush() {
        let mut run = Run::open("distributed");
        let block = run.next_block();
        run.recorder.done(&block, attempt(Some(3))).unwrap();
        assert!(run.marker().is_done(&block), "marked before any report");
        assert_eq!(run.events().len(), 1, "the line is only buffered");
        run.recorder.flush();
        let done = Event::BlockDone {
            task: "paint".into(),
            block_id: block.id.spatial,
            worker_id: Some(3),
            seconds: Some(0.5),
        };
        assert_eq!(run.events()[1], done);
    }

    #[test]
    fn failed_attempts_are_counted_and_the_last_is_failed_for_good() {
        let mut run = Run::open("serial");
        let block = run.next_block();
        let retrying = Released::Retrying { attempt: 1 };
        run.recorder
            .failed(&block, attempt(None), "no luck", &retrying);
        let orphaned = vec![BlockId {
            task: TaskIdx(0),
            spatial: 9,
        }];
        let for_good = Released::FailedForGood { orphaned };
        run.recorder
            .failed(&block, attempt(None), "no luck", &for_good);
        assert_eq!(run.marker().failure_count(&block).unwrap(), 2);
        let failed = |for_good| Event::BlockFailed {
            task: "paint".into(),
            block_id: block.id.spatial,
            worker_id: None,
            error: "no luck".into(),
            for_good,
            seconds: Some(0.5),
        };
        assert_eq!(run.events()[1..], [failed(false), failed(true)]);
    }

    #[test]
    fn a_failure_is_recorded_with_its_control_characters_escaped() {
        let mut run = Run::open("serial");
        let block = run.next_block();
        let released = Released::Retrying { attempt: 1 };
        (run.recorder).failed(&block, attempt(None), "red \x1b[31m", &released);
        let Event::BlockFailed { error, .. } = &run.events()[1] else {
            panic!("{:?}", run.events());
        };
        assert_eq!(error, "red \\x1b[31m");
    }

    #[test]
    fn a_marker_that_cannot_be_written_records_nothing() {
        let mut run = Run::open("serial");
        let block = run.next_block();
        let spec = run.pipeline.tasks[0].spec.clone();
        run.recorder.markers[0] = read_only_marker(&run.run_dir, &spec);
        assert!(run.recorder.done(&block, attempt(None)).is_err());
        run.recorder.flush();
        assert_eq!(run.events().len(), 1, "{:?}", run.events());
    }

    fn read_only_marker(run_dir: &RunDir, spec: &daisy_core::TaskSpec) -> DoneMarker {
        let dir = run_dir.done_marker(&spec.id);
        DoneMarker::open_existing(&dir, spec).unwrap().unwrap()
    }

    /// A run as one too big for a line per block records it.
    fn summing_up(mut run: Run) -> Run {
        run.recorder.tally = Some(DoneTally::default());
        run
    }

    #[test]
    fn a_big_run_sums_up_done_blocks_per_worker_in_one_record() {
        let mut run = summing_up(Run::open("distributed"));
        let blocks: Vec<Block> = (0..3).map(|_| run.next_block()).collect();
        for block in &blocks {
            run.recorder.done(block, attempt(Some(3))).unwrap();
        }
        assert!(blocks.iter().all(|b| run.marker().is_done(b)));
        run.recorder.flush();
        assert_eq!(run.events().len(), 1, "not due within a second");
        run.recorder.record(&Event::RunFinished {
            completed: true,
            seconds: 1.0,
        });
        let events = run.events();
        let [_, Event::BlocksDone {
            task,
            worker_id: Some(3),
            count: 3,
            run_times: Some(run_times),
            ..
        }, Event::RunFinished { .. }] = &events[..]
        else {
            panic!("{events:?}");
        };
        assert_eq!((&**task, run_times.longest), ("paint", 0.5));
    }

    #[test]
    fn a_big_run_writes_its_done_blocks_when_the_recorder_is_dropped() {
        let mut run = Run::open("serial");
        let block = run.next_block();
        let recorder = OutcomeRecorder::open(&run.pipeline, &run.run_dir, "serial", false);
        let mut recorder = summing_up_recorder(recorder.unwrap());
        recorder.done(&block, attempt(None)).unwrap();
        drop(recorder);
        let events = run.events();
        assert!(
            matches!(
                events[..],
                [Event::RunStarted { .. }, Event::BlocksDone { count: 1, .. }]
            ),
            "{events:?}"
        );
    }

    fn summing_up_recorder(mut recorder: OutcomeRecorder) -> OutcomeRecorder {
        recorder.tally = Some(DoneTally::default());
        recorder
    }

    #[test]
    fn a_small_run_writes_a_line_per_block_and_a_big_one_does_not() {
        let run = Run::open("serial");
        assert!(run.recorder.tally.is_none(), "4 blocks");
        std::env::set_var(BLOCK_LINES_UP_TO_ENV, "3");
        let big = OutcomeRecorder::open(&run.pipeline, &run.run_dir, "serial", false);
        std::env::set_var(BLOCK_LINES_UP_TO_ENV, "x");
        let bad = OutcomeRecorder::open(&run.pipeline, &run.run_dir, "serial", false);
        std::env::remove_var(BLOCK_LINES_UP_TO_ENV);
        assert!(big.unwrap().tally.is_some());
        let error = format!("{:#}", bad.err().unwrap());
        assert_eq!(
            error,
            "DAISY_BLOCK_LINES_UP_TO = \"x\": not a number of blocks"
        );
    }
}
