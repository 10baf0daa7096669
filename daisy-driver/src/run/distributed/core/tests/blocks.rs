//! The core's rules for blocks: observers, batches, blocks of dead
//! workers, parked workers and resumed runs.

use super::*;

#[test]
fn an_observer_gets_snapshots_but_no_blocks() {
    let mut run = Run::new("", &[task("t", 3, "max_workers = 0")]);
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        token: "t".into(),
        role: Role::Observer,
        task_id: None,
        worker_id: None,
        job_id: None,
        host: "me".into(),
        pid: 1,
    };
    run.input(Input::Hello {
        conn: conn(5),
        hello,
    });
    let refused = run.acquire(5, 1);
    assert_eq!(
        error_to(&refused, 5).as_deref(),
        Some("observers take no blocks")
    );
    assert!(events(&refused).is_empty(), "an observer is no worker");
    let answered = run.message(5, ToDriver::GetSnapshot);
    let [Command::Send {
        message: FromDriver::Snapshot(snapshot),
        ..
    }] = &answered[..]
    else {
        panic!("{answered:?}");
    };
    assert_eq!(snapshot.tasks[0].counters.total, 3);
    assert_eq!(snapshot.tasks[0].workers_connected, 0);
    assert!(run.core.end().is_none());
    run.close(5, true);
    assert!(!run.core.has_connections());
}

#[test]
fn a_worker_of_an_unknown_task_is_refused_with_the_known_ones() {
    let mut run = Run::new("", &[task("t", 1, "max_workers = 0")]);
    let refused = run.hello(1, "nope", None).unwrap_err();
    assert_eq!(refused, "unknown task \"nope\"; this run has t");
}

#[test]
fn a_batch_goes_to_one_worker_and_comes_back_whole_if_the_worker_falls_silent() {
    let mut run = Run::new("", &[task("t", 20, "max_workers = 0\nmax_retries = 0")]);
    run.hello(1, "t", None).unwrap();
    let batch = blocks_to(&run.acquire(1, 8), 1);
    assert_eq!(batch, (0..8).collect::<Vec<_>>());
    let gone = run.cut_off(1);
    assert!(marked_done(&gone).is_empty());
    run.hello(2, "t", None).unwrap();
    let rescued = blocks_to(&run.acquire(2, 64), 2);
    assert_eq!(rescued.len(), 20, "lost, not failed: {rescued:?}");
    let counters = run.core.progress()[0].counters;
    assert_eq!((counters.failed, counters.processing), (0, 20));
}

/// The failures recorded: (block id, error, worker whose stderr is added).
fn failures(commands: &[Command]) -> Vec<(u64, String, Option<SlotId>)> {
    (commands.iter())
        .filter_map(|c| match c {
            Command::RecordFailure {
                block,
                error,
                stderr_of,
                ..
            } => Some((block.id.spatial, error.clone(), *stderr_of)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_block_whose_launched_worker_died_running_it_fails_with_how_the_job_ended() {
    let mut run = Run::new("", &[task("t", 3, "max_workers = 1\nmax_retries = 1")]);
    let [a] = run.start_workers()[..] else {
        panic!("one worker");
    };
    run.hello(1, "t", Some(a)).unwrap();
    assert_eq!(blocks_to(&run.acquire(1, 1), 1), [0]);
    let died = run.close(1, false);
    assert!(failures(&died).is_empty(), "it waits for the job's end");
    let ended = run.job_ended(
        a,
        JobEnd::Signalled {
            signal: "SIGKILL".into(),
        },
    );
    let expected = format!(
        "worker {} died while running this block: killed by SIGKILL",
        a.0
    );
    assert_eq!(failures(&ended), [(0, expected, Some(a))]);
    assert_eq!(
        run.core.slots.unclean_exits(TaskIdx(0)),
        0,
        "the block's doing"
    );
    assert_eq!(run.core.progress()[0].counters.ready, 3, "retried later");
}

#[test]
fn without_its_jobs_end_a_dead_workers_block_fails_with_what_the_connection_said() {
    let mut run = Run::new("", &[task("t", 3, "max_workers = 1")]);
    let [a] = run.start_workers()[..] else {
        panic!("one worker");
    };
    run.hello(1, "t", Some(a)).unwrap();
    run.acquire(1, 1);
    let died = run.close(1, false);
    assert!(cancelled(&died).is_empty(), "its job's end is awaited");
    let wait = deaths::JOB_END_WAIT.as_secs_f64();
    assert!(failures(&run.at(wait - 0.5).tick()).is_empty());
    let overdue = run.at(wait + 0.5).tick();
    let failed = failures(&overdue);
    assert_eq!(failed.len(), 1);
    assert!(failed[0]
        .1
        .ends_with("died while running this block: connection closed"));
    assert_eq!(cancelled(&overdue), [a], "it may linger");
}

#[test]
fn a_hand_started_workers_block_fails_at_once_when_it_dies() {
    let mut run = Run::new("", &[task("t", 3, "max_workers = 0\nmax_retries = 0")]);
    run.hello(1, "t", None).unwrap();
    run.acquire(1, 1);
    let failed = failures(&run.close(1, false));
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(run.core.progress()[0].counters.failed, 1, "max_retries = 0");
}

#[test]
fn a_batch_whose_worker_died_comes_back_and_its_blocks_then_go_out_alone() {
    let mut run = Run::new("", &[task("t", 20, "max_workers = 0\nmax_retries = 0")]);
    run.hello(1, "t", None).unwrap();
    assert_eq!(blocks_to(&run.acquire(1, 8), 1).len(), 8);
    let died = run.close(1, false);
    assert!(
        failures(&died).is_empty(),
        "which block killed it is unknown"
    );
    assert!(matches!(
        events(&died)[..],
        [Event::BlocksReturned { .. }, ..]
    ));
    run.hello(2, "t", None).unwrap();
    let others = blocks_to(&run.acquire(2, 64), 2);
    assert_eq!(
        others,
        (8..20).collect::<Vec<_>>(),
        "the suspects wait their turn"
    );
    others.iter().for_each(|&id| drop(run.release(2, id, true)));
    let alone = blocks_to(&run.acquire(2, 64), 2);
    assert_eq!(alone.len(), 1, "a suspect goes out alone: {alone:?}");
    let failed = failures(&run.close(2, false));
    assert_eq!(failed.len(), 1, "held alone, it is blamed");
    run.hello(3, "t", None).unwrap();
    for _ in 0..7 {
        let alone = blocks_to(&run.acquire(3, 64), 3);
        assert_eq!(alone.len(), 1, "{alone:?}");
        run.release(3, alone[0], true);
    }
    let counters = run.core.progress()[0].counters;
    assert_eq!((counters.completed, counters.failed), (19, 1));
}

#[test]
fn a_batch_is_capped_and_a_zero_batch_refused() {
    let mut run = Run::new("", &[task("t", 2000, "max_workers = 0")]);
    run.hello(1, "t", None).unwrap();
    let batch = blocks_to(&run.acquire(1, u32::MAX), 1);
    assert_eq!(batch.len(), hand_out::MAX_BATCH as usize);
    let refused = error_to(&run.acquire(1, 0), 1);
    assert_eq!(refused.as_deref(), Some("acquire_blocks needs max >= 1"));
}

#[test]
fn a_worker_started_by_hand_waits_while_the_last_block_runs_and_hears_when_the_task_is_done() {
    let extra = "max_workers = 1\nmax_retries = 1\nretry_backoff = \"2s\"";
    let mut run = Run::new("", &[task("t", 1, extra)]);
    let [slot] = run.start_workers()[..] else {
        panic!("one worker");
    };
    run.hello(2, "t", Some(slot)).unwrap();
    run.hello(1, "t", None).unwrap();
    run.acquire(2, 1);
    run.release(2, 0, false);
    assert!(
        run.acquire(2, 1).is_empty(),
        "the launched worker waits for the retry"
    );
    assert!(
        run.acquire(1, 1).is_empty(),
        "so does the one started by hand"
    );
    let due = run.at(2.5).tick();
    assert_eq!(blocks_to(&due, 2), [0], "launched workers first");
    assert!(shutdown_of(&due, 1).is_none(), "started by hand: it waits");
    let done = run.release(2, 0, true);
    assert_eq!(shutdown_of(&done, 1).as_deref(), Some("the task is done"));
}

#[test]
fn blocks_of_one_task_do_not_wake_the_waiting_workers_of_another() {
    let tasks = [
        task("a", 2, "max_workers = 0"),
        task(
            "b",
            1,
            "max_workers = 0\nmax_retries = 1\nretry_backoff = \"5s\"",
        ),
    ];
    let mut run = Run::new("", &tasks);
    run.hello(1, "a", None).unwrap();
    run.hello(2, "b", None).unwrap();
    run.acquire(2, 1);
    run.release(2, 0, false);
    assert!(
        run.acquire(2, 1).is_empty(),
        "b's worker waits for b's retry"
    );
    run.acquire(1, 1);
    let released = run.release(1, 0, true);
    assert!(blocks_to(&released, 2).is_empty() && shutdown_of(&released, 2).is_none());
    assert_eq!(blocks_to(&run.at(5.5).tick(), 2), [0]);
}

/// Blocks below this were done in an earlier run, in
/// [`a_resumed_run_skips_done_blocks_a_turn_at_a_time_between_other_inputs`].
const DONE_BELOW: u64 = 10 * hand_out::SKIPS_PER_TURN;
/// How often that test asked whether a block was done.
static LOOKED_AT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[test]
fn a_resumed_run_skips_done_blocks_a_turn_at_a_time_between_other_inputs() {
    use std::sync::atomic::Ordering::Relaxed;
    let mut run = Run::new("", &[task("t", DONE_BELOW as u32 + 10, "max_workers = 0")]);
    run.done_before = |b| {
        LOOKED_AT.fetch_add(1, Relaxed);
        b.id.spatial < DONE_BELOW
    };
    run.hello(1, "t", None).unwrap();
    let mut sent = blocks_to(&run.acquire(1, 4), 1);
    let mut turns = 0;
    while sent.is_empty() {
        assert!(run.core.is_catching_up());
        // Each input skips a bounded number of blocks (a call to the
        // scheduler per step of it: catching up, serving, staffing) and
        // others are handled in between.
        let looked_at = LOOKED_AT.swap(0, Relaxed);
        assert!(
            looked_at <= 3 * (hand_out::SKIPS_PER_TURN + 1),
            "{looked_at}"
        );
        turns += 1;
        run.hello(turns + 1, "t", None).unwrap();
        sent = blocks_to(&run.input(Input::CatchUp), 1);
    }
    assert!(turns >= 3, "{turns} turns");
    assert_eq!(sent, [0, 1, 2, 3].map(|i| DONE_BELOW + i));
    assert!(!run.core.is_catching_up());
    let c = run.core.scheduler.counters(TaskIdx(0));
    assert_eq!((c.skipped, c.processing, c.ready), (DONE_BELOW, 4, 6));
}

#[test]
fn a_worker_waiting_while_done_blocks_are_skipped_is_served_by_whatever_finds_its_block() {
    let mut run = Run::new("", &[task("t", DONE_BELOW as u32 + 10, "max_workers = 0")]);
    run.done_before = |b| b.id.spatial < DONE_BELOW;
    run.hello(1, "t", None).unwrap();
    assert!(blocks_to(&run.acquire(1, 4), 1).is_empty(), "it waits");
    // Ticks skip too (to count the workers a task wants); the one that
    // gets to the first block to run must hand it to the waiting worker.
    let mut sent = Vec::new();
    for _ in 0..2 * DONE_BELOW / hand_out::SKIPS_PER_TURN {
        sent = blocks_to(&run.tick(), 1);
        if !sent.is_empty() {
            break;
        }
    }
    assert_eq!(sent, [0, 1, 2, 3].map(|i| DONE_BELOW + i));
}
