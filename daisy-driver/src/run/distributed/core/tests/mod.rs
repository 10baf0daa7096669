//! The core's rules, each driven by inputs at made-up times: no sockets,
//! no processes, no sleeps. Blocks are 1-D and one unit wide, so a
//! block's id is its position.

use super::*;
use crate::run::distributed::connection::Ending;
use crate::run_dir::events::Event;
use daisy_core::protocol::{BlockResult, Role, PROTOCOL_VERSION};
use launchers::{JobEnd, JobId, LaunchError};
use std::path::Path;

mod blocks;
mod retired;
mod writes;

/// A task of `blocks` blocks (ids 0..blocks) and its extra fields.
fn task(id: &str, blocks: u32, extra: &str) -> String {
    format!(
        r#"
[[task]]
id = "{id}"
total_roi = {{ offset = [0], shape = [{blocks}] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
read_write_conflict = false
block_command = ["true"]
{extra}
"#
    )
}

/// A core of the pipeline `header` + `tasks`, its clock, and what it
/// commanded since the last look.
struct Run {
    core: Core,
    start: Instant,
    now: Instant,
    /// Which blocks were done in an earlier run: none unless a test says.
    done_before: fn(&Block) -> bool,
}

/// The `n`-th connection of the run (from 1).
fn conn(n: u64) -> ConnId {
    (1..n).fold(ConnId::FIRST, |conn, _| conn.next())
}

impl Run {
    fn new(header: &str, tasks: &[String]) -> Self {
        let text = format!("name = \"core\"\n{header}\n{}", tasks.concat());
        let pipeline = Pipeline::from_str(
            &text,
            Path::new("core.toml"),
            crate::pipeline::python_worker::PYTHON_ON_PATH,
        )
        .unwrap();
        let scheduler = Scheduler::new(Arc::new(pipeline.graph()));
        let settings = CoreSettings {
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_misses: 3,
        };
        let start = Instant::now();
        let core = Core::new(Arc::new(pipeline), scheduler, settings, start);
        Self {
            core,
            start,
            now: start,
            done_before: |_| false,
        }
    }

    /// Moves the clock to `seconds` after the start.
    fn at(&mut self, seconds: f64) -> &mut Self {
        self.now = self.start + Duration::from_secs_f64(seconds);
        self
    }

    fn input(&mut self, input: Input) -> Vec<Command> {
        self.core.handle(self.now, input, &self.done_before);
        let mut commands = Vec::new();
        self.core.take_commands(&mut commands);
        commands
    }

    fn tick(&mut self) -> Vec<Command> {
        self.input(Input::Tick)
    }

    /// Ticks and returns the workers the core starts, as the launcher
    /// would have submitted them (job ids `job-<slot>`).
    fn start_workers(&mut self) -> Vec<SlotId> {
        let slots = started(&self.tick());
        let results = slots
            .iter()
            .map(|&s| (s, Ok(JobId(format!("job-{s}")))))
            .collect();
        self.input(Input::Launcher(LauncherEvent::Started(results)));
        slots
    }

    /// A worker of `task` says Hello on `conn`, claiming `slot` if
    /// launched; the core's answer.
    fn hello(&mut self, conn_n: u64, task: &str, slot: Option<SlotId>) -> Result<Welcome, String> {
        let hello = Hello {
            protocol: PROTOCOL_VERSION,
            token: "t".into(),
            role: Role::Worker,
            task_id: Some(task.into()),
            worker_id: slot.map(|s| s.0),
            job_id: None,
            host: "node".into(),
            pid: 7,
        };
        let commands = self.input(Input::Hello {
            conn: conn(conn_n),
            hello,
        });
        let answer = commands.into_iter().find_map(|c| match c {
            Command::Answer { answer, .. } => Some(answer),
            _ => None,
        });
        answer.expect("a Hello is answered")
    }

    fn message(&mut self, conn_n: u64, message: ToDriver) -> Vec<Command> {
        self.input(Input::Peer(PeerEvent::Message {
            conn: conn(conn_n),
            message,
        }))
    }

    /// The worker on `conn_n` asks for up to `max` blocks.
    fn acquire(&mut self, conn_n: u64, max: u32) -> Vec<Command> {
        self.message(conn_n, ToDriver::AcquireBlocks { max })
    }

    fn release(&mut self, conn_n: u64, block_id: u64, ok: bool) -> Vec<Command> {
        let result = BlockResult {
            block_id,
            ok,
            skipped: false,
            error: (!ok).then(|| "boom".to_string()),
            seconds: Some(0.1),
            cost: None,
        };
        let results = vec![result];
        self.message(conn_n, ToDriver::ReleaseBlocks { results })
    }

    fn close(&mut self, conn_n: u64, clean: bool) -> Vec<Command> {
        self.input(Input::Peer(PeerEvent::Closed {
            conn: conn(conn_n),
            ending: match clean {
                true => Ending::Goodbye,
                false => Ending::PeerLeft,
            },
            why: "connection closed".into(),
        }))
    }

    /// The driver ends `conn_n`'s connection: it fell silent.
    fn cut_off(&mut self, conn_n: u64) -> Vec<Command> {
        self.input(Input::Peer(PeerEvent::Closed {
            conn: conn(conn_n),
            ending: Ending::CutOff,
            why: "no message for 3.0 s".into(),
        }))
    }

    fn job_ended(&mut self, slot: SlotId, end: JobEnd) -> Vec<Command> {
        let ended = vec![(slot, JobId(format!("job-{slot}")), end)];
        self.input(Input::Launcher(LauncherEvent::Ended(ended)))
    }
}

/// The workers a tick started.
fn started(commands: &[Command]) -> Vec<SlotId> {
    commands
        .iter()
        .flat_map(|c| match c {
            Command::StartWorkers { slots, .. } => slots.clone(),
            _ => vec![],
        })
        .collect()
}

/// The blocks sent to `conn_n`.
fn blocks_to(commands: &[Command], conn_n: u64) -> Vec<u64> {
    commands
        .iter()
        .flat_map(|c| match c {
            Command::SendBlocks {
                conn: to, blocks, ..
            } if *to == conn(conn_n) => blocks.iter().map(|b| b.id.spatial).collect(),
            _ => vec![],
        })
        .collect()
}

/// The first message sent to `conn_n` that `pick` picks from.
fn sent_to<T>(
    commands: &[Command],
    conn_n: u64,
    pick: impl Fn(&FromDriver) -> Option<T>,
) -> Option<T> {
    commands.iter().find_map(|c| match c {
        Command::Send { conn: to, message } if *to == conn(conn_n) => pick(message),
        _ => None,
    })
}

/// Why `conn_n` was told to stop, if it was.
fn shutdown_of(commands: &[Command], conn_n: u64) -> Option<String> {
    sent_to(commands, conn_n, |m| match m {
        FromDriver::Shutdown { reason } => Some(reason.clone()),
        _ => None,
    })
}

fn error_to(commands: &[Command], conn_n: u64) -> Option<String> {
    sent_to(commands, conn_n, |m| match m {
        FromDriver::Error { reason } => Some(reason.clone()),
        _ => None,
    })
}

fn events(commands: &[Command]) -> Vec<&Event<'static>> {
    (commands.iter())
        .filter_map(|c| match c {
            Command::Record(event) => Some(event),
            _ => None,
        })
        .collect()
}

fn marked_done(commands: &[Command]) -> Vec<u64> {
    (commands.iter())
        .filter_map(|c| match c {
            Command::MarkDone { block, .. } => Some(block.id.spatial),
            _ => None,
        })
        .collect()
}

fn cancelled(commands: &[Command]) -> Vec<SlotId> {
    (commands.iter())
        .flat_map(|c| match c {
            Command::CancelJobs(slots) => slots.clone(),
            _ => vec![],
        })
        .collect()
}

#[test]
fn a_worker_counts_from_its_submission_and_is_known_by_its_connection() {
    let mut run = Run::new("", &[task("t", 4, "max_workers = 2")]);
    let [a, b] = run.start_workers()[..] else {
        panic!("two workers for four blocks and max_workers = 2");
    };
    assert!(
        started(&run.at(60.0).tick()).is_empty(),
        "queued jobs count"
    );
    let welcome = run.hello(1, "t", Some(a)).unwrap();
    assert_eq!(welcome.worker_id, a.0, "a launched worker claims its slot");
    let lost = run.close(1, false);
    let gone = events(&lost);
    assert!(
        matches!(gone[..], [Event::WorkerGone { clean: false, worker_id, .. }] if *worker_id == a.0),
        "{gone:?}"
    );
    assert_eq!(cancelled(&lost), [a], "a lost worker's job is ended");
    run.job_ended(a, JobEnd::Cancelled);
    let never_connected = run.job_ended(b, JobEnd::Exited { code: 1 });
    assert!(matches!(
        events(&never_connected)[..],
        [Event::WorkerStartFailed { .. }]
    ));
    assert_eq!(run.start_workers().len(), 2, "both replaced");
    let by_hand = run.hello(9, "t", None).unwrap();
    assert!(![a.0, b.0].contains(&by_hand.worker_id));
}

#[test]
fn a_budget_share_comes_back_exactly_once_however_the_worker_ends() {
    let header = "[resources]\ngpu = 2";
    let mut run = Run::new(
        header,
        &[task("t", 8, "max_workers = 8\nrequires = { gpu = 1 }")],
    );
    let [a, _b] = run.start_workers()[..] else {
        panic!("two GPUs, two workers");
    };
    run.hello(1, "t", Some(a)).unwrap();
    run.close(1, false);
    run.job_ended(a, JobEnd::Cancelled);
    run.close(1, false);
    assert_eq!(run.start_workers().len(), 1, "a's share, once");
    assert!(run.start_workers().is_empty(), "the budget is used up");
}

#[test]
fn a_block_held_past_its_timeout_is_reclaimed_and_its_late_release_refused() {
    let extra = "max_workers = 0\ntimeout = \"1s\"\nmax_retries = 1";
    let mut run = Run::new("", &[task("t", 1, extra)]);
    run.hello(1, "t", None).unwrap();
    assert_eq!(blocks_to(&run.acquire(1, 1), 1), [0]);
    let margin = timers::RECLAIM_MARGIN.as_secs_f64();
    assert!(run.at(1.0 + margin - 0.5).tick().is_empty(), "not yet");
    let reclaimed = run.at(1.0 + margin + 0.5).tick();
    let failure = reclaimed.iter().find_map(|c| match c {
        Command::RecordFailure {
            error, released, ..
        } => Some((error.clone(), released.clone())),
        _ => None,
    });
    let (error, released) = failure.expect("the reclaim is a failed attempt");
    assert!(error.starts_with("reclaimed from worker 1"), "{error}");
    assert_eq!(released, Released::Retrying { attempt: 1 });
    let late = run.release(1, 0, true);
    assert!(marked_done(&late).is_empty(), "a late release is not taken");
    let refusal = error_to(&late, 1).unwrap();
    assert!(refusal.starts_with("block 0 is not held"), "{refusal}");
    assert!(matches!(events(&late)[..], [Event::RequestRefused { .. }]));
    assert_eq!(blocks_to(&run.acquire(1, 1), 1), [0], "the retry");
}

/// `up` feeds `down` block by block; `down`'s workers wait for `up`.
fn chained(down_extra: &str) -> Run {
    let tasks = [
        task("up", 2, "max_workers = 0"),
        task("down", 2, &format!("upstream = [\"up\"]\n{down_extra}")),
    ];
    Run::new("", &tasks)
}

#[test]
fn a_parked_worker_is_served_when_its_upstream_block_is_done_after_the_mark() {
    let mut run = chained("max_workers = 0");
    run.hello(1, "up", None).unwrap();
    run.hello(2, "down", None).unwrap();
    assert_eq!(blocks_to(&run.acquire(1, 2), 1), [0, 1]);
    assert!(blocks_to(&run.acquire(2, 1), 2).is_empty(), "parked");
    let released = run.release(1, 0, true);
    assert_eq!(blocks_to(&released, 2), [0], "served at once");
    let mark = released
        .iter()
        .position(|c| matches!(c, Command::MarkDone { .. }));
    let send = (released.iter()).position(|c| matches!(c, Command::SendBlocks { .. }));
    assert!(
        mark < send,
        "the upstream block is marked before anything depends on it"
    );
}

#[test]
fn a_parked_worker_is_served_when_a_retry_comes_due() {
    let extra = "max_workers = 0\nmax_retries = 1\nretry_backoff = \"2s\"";
    let mut run = Run::new("", &[task("t", 1, extra)]);
    run.hello(1, "t", None).unwrap();
    run.acquire(1, 1);
    run.release(1, 0, false);
    let waiting = run.acquire(1, 1);
    assert!(blocks_to(&waiting, 1).is_empty() && shutdown_of(&waiting, 1).is_none());
    assert!(blocks_to(&run.at(1.0).tick(), 1).is_empty(), "backing off");
    assert_eq!(blocks_to(&run.at(2.5).tick(), 1), [0]);
}

#[test]
fn an_idle_launched_worker_is_let_go_but_not_one_asking_ahead() {
    let mut run = chained("max_workers = 2\nidle_timeout = \"1s\"");
    run.hello(1, "up", None).unwrap();
    run.acquire(1, 2);
    run.release(1, 0, true);
    let [slot] = run.start_workers()[..] else {
        panic!("one down block is runnable");
    };
    run.hello(2, "down", Some(slot)).unwrap();
    assert_eq!(blocks_to(&run.acquire(2, 1), 2), [0]);
    assert!(
        run.acquire(2, 1).is_empty(),
        "asks ahead while it runs block 0"
    );
    assert!(
        shutdown_of(&run.at(5.0).tick(), 2).is_none(),
        "busy, not idle"
    );
    run.release(2, 0, true);
    assert!(
        shutdown_of(&run.at(5.9).tick(), 2).is_none(),
        "idle since 5 s"
    );
    let released = run.at(6.1).tick();
    let reason = shutdown_of(&released, 2).expect("let go");
    assert!(reason.contains("idle_timeout of 1s"), "{reason}");
    assert!(matches!(
        events(&released)[..],
        [Event::WorkerReleased { .. }]
    ));
    let closed = run.close(2, true);
    assert!(cancelled(&closed).is_empty(), "a clean exit");
}

#[test]
fn a_worker_started_by_hand_is_never_let_go_for_idleness() {
    let mut run = chained("max_workers = 0\nidle_timeout = \"1s\"");
    run.hello(2, "down", None).unwrap();
    run.acquire(2, 1);
    assert!(shutdown_of(&run.at(100.0).tick(), 2).is_none());
}

#[test]
fn a_draining_worker_hands_blocks_back_without_a_retry_and_leaves_cleanly() {
    let extra = "max_workers = 1\nmax_retries = 0";
    let mut run = Run::new("", &[task("t", 2, extra)]);
    let [slot] = run.start_workers()[..] else {
        panic!("one worker");
    };
    run.hello(1, "t", Some(slot)).unwrap();
    assert_eq!(blocks_to(&run.acquire(1, 2), 1), [0, 1]);
    let reason = "walltime".to_string();
    let draining = ToDriver::Draining {
        reason,
        out_of_time: false,
        by_choice: false,
    };
    assert!(matches!(
        events(&run.message(1, draining))[..],
        [Event::WorkerDraining { .. }]
    ));
    let ids = vec![0, 1];
    let back = ToDriver::ReturnBlocks {
        block_ids: ids,
        reason: "walltime".into(),
    };
    assert!(matches!(
        events(&run.message(1, back))[..],
        [Event::BlocksReturned { .. }]
    ));
    let told = shutdown_of(&run.acquire(1, 1), 1);
    assert_eq!(told.as_deref(), Some("the worker is draining"));
    let gone = run.close(1, false);
    assert!(matches!(
        events(&gone)[..],
        [Event::WorkerGone { clean: true, .. }]
    ));
    assert!(cancelled(&gone).is_empty());
    run.hello(2, "t", None).unwrap();
    assert_eq!(
        blocks_to(&run.acquire(2, 2), 2),
        [0, 1],
        "handed back, not failed: max_retries = 0 still allows them"
    );
}

#[test]
fn a_worker_out_of_walltime_before_its_first_block_is_an_unclean_exit() {
    let mut run = Run::new("", &[task("t", 2, "max_workers = 1")]);
    let [slot] = run.start_workers()[..] else {
        panic!("one worker");
    };
    run.hello(1, "t", Some(slot)).unwrap();
    run.acquire(1, 1);
    let reason = "walltime".to_string();
    run.message(
        1,
        ToDriver::Draining {
            reason,
            out_of_time: true,
            by_choice: false,
        },
    );
    let gone = run.close(1, true);
    let [Event::WorkerGone { clean, why, .. }] = &events(&gone)[..] else {
        panic!("{gone:?}");
    };
    assert!(!clean);
    assert!(
        why.starts_with("drained before it reported a block"),
        "{why}"
    );
}

#[test]
fn a_requeued_job_takes_its_slot_again_unless_its_share_went_elsewhere() {
    let header = "[resources]\ngpu = 1";
    let mut run = Run::new(
        header,
        &[task("t", 4, "max_workers = 1\nrequires = { gpu = 1 }")],
    );
    let [slot] = run.start_workers()[..] else {
        panic!("one GPU");
    };
    run.hello(1, "t", Some(slot)).unwrap();
    run.close(1, true);
    let back = run.hello(2, "t", Some(slot)).unwrap();
    assert_eq!(back.worker_id, slot.0);
    run.close(2, true);
    let [successor] = run.start_workers()[..] else {
        panic!("the share is free again");
    };
    assert_ne!(successor, slot);
    let refused = run.hello(3, "t", Some(slot)).unwrap_err();
    assert!(refused.contains("went to another worker"), "{refused}");
}

#[test]
fn a_task_out_of_restarts_is_abandoned_with_its_downstream_blocks_orphaned() {
    let tasks = [
        task("up", 3, "max_workers = 1\nmax_worker_restarts = 1"),
        task("down", 3, "upstream = [\"up\"]\nmax_workers = 0"),
    ];
    let mut run = Run::new("", &tasks);
    for n in 1..=2 {
        let [slot] = run.start_workers()[..] else {
            panic!("a worker for up, then its restart");
        };
        run.hello(n, "up", Some(slot)).unwrap();
        if n == 1 {
            run.acquire(1, 1);
            run.release(1, 0, true);
        }
        run.close(n, false);
    }
    let abandoned = run.tick();
    let tasks: Vec<&str> = (events(&abandoned).into_iter())
        .filter_map(|e| match e {
            Event::TaskAbandoned { task, why, .. } => {
                assert!(why.starts_with("2 unclean worker exits"), "{why}");
                Some(&**task)
            }
            _ => None,
        })
        .collect();
    assert_eq!(tasks, ["up", "down"]);
    assert!(started(&abandoned).is_empty());
    let down = run.core.progress()[1].counters;
    assert_eq!((down.orphaned, down.completed), (3, 0));
    assert_eq!(run.core.end(), Some(RunEnd::Finished));
}

#[test]
fn a_permanent_submit_error_abandons_the_task_at_once() {
    let mut run = Run::new("", &[task("t", 2, "max_workers = 1")]);
    let slots = started(&run.tick());
    let error = LaunchError::Submit {
        stderr: "invalid partition".into(),
        permanent: true,
    };
    let refused = run.input(Input::Launcher(LauncherEvent::Started(vec![(
        slots[0],
        Err(error),
    )])));
    assert!(events(&refused)
        .iter()
        .any(|e| matches!(e, Event::TaskAbandoned { .. })));
    assert!(run.tick().is_empty(), "nothing more is started");
}

#[test]
fn a_submission_waiting_for_a_limit_keeps_its_slot_and_is_recorded() {
    let mut run = Run::new("", &[task("t", 4, "max_workers = 2")]);
    let slots = started(&run.tick());
    assert_eq!(slots.len(), 2);
    let waiting = LaunchError::Waiting {
        limit: "QOSMaxSubmitJobPerUserLimit".into(),
        message: "Job violates accounting/QOS policy".into(),
    };
    let held = run.input(Input::Launcher(LauncherEvent::Started(vec![
        (slots[0], Ok(JobId("7_0".into()))),
        (slots[1], Err(waiting)),
    ])));
    let recorded: Vec<_> = events(&held)
        .into_iter()
        .filter_map(|e| match e {
            Event::WorkerSubmitWaiting {
                worker_id, limit, ..
            } => Some((*worker_id, limit.to_string())),
            Event::WorkerStartFailed { .. } | Event::TaskAbandoned { .. } => {
                panic!("a limit is no failure: {e:?}")
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        recorded,
        [(slots[1].0, "QOSMaxSubmitJobPerUserLimit".to_string())]
    );
    assert!(
        started(&run.tick()).is_empty(),
        "the waiting slot still counts against max_workers"
    );
    let submitted = run.input(Input::Launcher(LauncherEvent::Started(vec![(
        slots[1],
        Ok(JobId("8_0".into())),
    )])));
    assert!(events(&submitted)
        .iter()
        .any(|e| matches!(e, Event::WorkerSubmitted { job, .. } if job == "8_0")));
}

#[test]
fn a_worker_that_cannot_serve_stops_further_starts_for_its_task() {
    let mut run = Run::new("", &[task("t", 4, "max_workers = 2")]);
    let [a, b] = run.start_workers()[..] else {
        panic!("two workers");
    };
    run.hello(1, "t", Some(a)).unwrap();
    let reason = "no module named foo".to_string();
    run.message(1, ToDriver::CannotServe { reason });
    let gone = run.close(1, true);
    assert!(matches!(
        events(&gone)[..],
        [Event::WorkerGone { clean: false, .. }]
    ));
    assert!(
        run.start_workers().is_empty(),
        "the next would fail the same way"
    );
    run.job_ended(b, JobEnd::Exited { code: 1 });
    let abandoned = run.tick();
    let why = events(&abandoned).into_iter().find_map(|e| match e {
        Event::TaskAbandoned { why, .. } => Some(why.to_string()),
        _ => None,
    });
    assert!(why.unwrap().contains("no module named foo"));
}

#[test]
fn a_done_task_cancels_its_jobs_still_queued() {
    let mut run = Run::new("", &[task("t", 2, "max_workers = 2")]);
    let [a, b] = run.start_workers()[..] else {
        panic!("two workers for two blocks");
    };
    run.hello(1, "t", Some(a)).unwrap();
    let mut commands = Vec::new();
    for _ in 0..2 {
        let block = blocks_to(&run.acquire(1, 1), 1)[0];
        commands.extend(run.release(1, block, true));
    }
    assert_eq!(
        cancelled(&commands),
        [b],
        "b's job never started: cancelled"
    );
    let gone: Vec<_> = (events(&commands).into_iter())
        .filter(
            |e| matches!(e, Event::WorkerGone { worker_id, clean: true, .. } if *worker_id == b.0),
        )
        .collect();
    assert_eq!(gone.len(), 1, "{commands:?}");
    assert!(
        !cancelled(&commands).contains(&a),
        "a connected worker leaves by itself"
    );
    assert!(
        run.job_ended(b, JobEnd::Cancelled).is_empty(),
        "its end is no failed start"
    );
}
