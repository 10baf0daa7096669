//! Workers that leave by their own decision (issue 34): their code ended
//! (a daisy 1.x spawn function whose child exited with status 0), which
//! daisy 1.2.3 answers by keeping the worker's place in its pool.

use super::*;

/// Four blocks, two launched workers connected on connections 1 and 2.
fn two_workers_of_four_blocks() -> Run {
    let mut run = Run::new("", &[task("t", 4, "max_workers = 2")]);
    let slots = run.start_workers();
    assert_eq!(slots.len(), 2);
    for (n, slot) in (1..).zip(slots) {
        run.hello(n, "t", Some(slot)).unwrap();
    }
    run
}

/// The worker on `conn_n` runs one block and leaves: drains (`by_choice`
/// or by a signal), is told to stop, closes cleanly.
fn run_one_block_and_leave(run: &mut Run, conn_n: u64, by_choice: bool) -> Vec<Command> {
    let [block] = blocks_to(&run.acquire(conn_n, 1), conn_n)[..] else {
        panic!("one block for worker {conn_n}");
    };
    run.release(conn_n, block, true);
    let draining = ToDriver::Draining {
        reason: "the worker function returned".into(),
        out_of_time: false,
        by_choice,
    };
    run.message(conn_n, draining);
    assert!(shutdown_of(&run.acquire(conn_n, 1), conn_n).is_some());
    run.close(conn_n, true)
}

#[test]
fn a_worker_that_left_by_choice_is_not_replaced_while_another_of_its_task_runs() {
    let mut run = two_workers_of_four_blocks();
    let gone = run_one_block_and_leave(&mut run, 1, true);
    assert!(matches!(
        events(&gone)[..],
        [Event::WorkerGone { clean: true, .. }]
    ));
    assert_eq!(run.start_workers(), [], "worker 2 still runs");
    // Worker 2 runs the other three blocks alone.
    for _ in 0..3 {
        let [block] = blocks_to(&run.acquire(2, 1), 2)[..] else {
            panic!("a block for worker 2");
        };
        run.release(2, block, true);
        assert_eq!(run.start_workers(), []);
    }
    assert!(run.core.scheduler.counters(TaskIdx(0)).is_done());
}

#[test]
fn a_worker_drained_by_a_signal_is_replaced() {
    let mut run = two_workers_of_four_blocks();
    run_one_block_and_leave(&mut run, 1, false);
    assert_eq!(run.start_workers().len(), 1);
}

#[test]
fn the_last_worker_of_a_task_with_blocks_left_is_replaced_even_if_it_left_by_choice() {
    let mut run = two_workers_of_four_blocks();
    run_one_block_and_leave(&mut run, 1, true);
    run_one_block_and_leave(&mut run, 2, true);
    // Two blocks left and no worker: one is started (daisy 1.2.3 waits
    // forever here), not two: the places of those that chose to leave
    // stay empty.
    let [slot] = run.start_workers()[..] else {
        panic!("one replacement");
    };
    run.hello(3, "t", Some(slot)).unwrap();
    assert_eq!(run.start_workers(), [], "the replacement runs");
    run_one_block_and_leave(&mut run, 3, true);
    assert_eq!(run.start_workers().len(), 1, "it is the last again");
}

#[test]
fn a_worker_that_leaves_by_choice_once_its_task_is_done_keeps_no_place() {
    let mut run = Run::new("", &[task("a", 1, "max_workers = 1")]);
    let [slot] = run.start_workers()[..] else {
        panic!("one worker of task a");
    };
    run.hello(1, "a", Some(slot)).unwrap();
    run_one_block_and_leave(&mut run, 1, true);
    let c = run.core.scheduler.counters(TaskIdx(0));
    assert_eq!(run.core.tasks[0].retired, 0, "{c:?}");
}
