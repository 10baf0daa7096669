//! The main loop against a stand-in driver, running real user processes.

use super::*;
use crate::test_peer::{block, block_command, welcome, within, Peer, PeerConn, PATIENCE};
use daisy_core::protocol::{
    CodeKind, FromDriver, FunctionCode, FunctionSource, TaskCode, ToDriver,
};
use std::path::Path;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running worker, the driver's end of its connection, and the trigger
/// of its stop future (dropping it stops the worker too).
struct Started {
    worker: JoinHandle<Result<Stopped, RunError>>,
    conn: PeerConn,
    stop: oneshot::Sender<()>,
}

async fn start(code: Option<TaskCode>, log_dir: &Path, interval_s: f64, misses: u32) -> Started {
    start_in_job(code, log_dir, interval_s, misses, None, None).await
}

/// [`start`] for a worker whose job ends at `job_end`, told that the
/// task's blocks took up to `longest_block_s` so far.
async fn start_in_job(
    code: Option<TaskCode>,
    log_dir: &Path,
    interval_s: f64,
    misses: u32,
    job_end: Option<Instant>,
    longest_block_s: Option<f64>,
) -> Started {
    let peer = Peer::bind().await;
    let mut connect = ConnectOpts::new(vec![peer.address()], "t0ken".into(), "predict".into());
    connect.connect_timeout = PATIENCE;
    let config = RunConfig {
        connect,
        log_dir: log_dir.to_path_buf(),
        job_end,
    };
    let (stop, stopped) = oneshot::channel();
    let stop_future = async move {
        let _ = stopped.await;
        "told to stop".to_string()
    };
    let worker = tokio::spawn(run(config, stop_future));
    let (mut conn, _) = peer.accept().await;
    let mut hello = welcome(code, interval_s, misses);
    if let FromDriver::Welcome(welcome) = &mut hello {
        welcome.longest_block_s = longest_block_s;
    }
    conn.send(&hello).await;
    Started { worker, conn, stop }
}

/// Hands out `ids` one per request and returns the released results.
async fn hand_out(conn: &mut PeerConn, ids: &[u64]) -> Vec<BlockResult> {
    let mut results = Vec::new();
    for &id in ids {
        assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
        conn.send(&FromDriver::Blocks {
            blocks: vec![block(id)],
        })
        .await;
        match conn.recv().await {
            ToDriver::ReleaseBlocks { results: released } => results.extend(untimed(released)),
            other => panic!("expected a release of block {id}, got {other:?}"),
        }
    }
    results
}

/// `results` without their run times, once checked that each has one.
fn untimed(results: Vec<BlockResult>) -> Vec<BlockResult> {
    results
        .into_iter()
        .map(|result| {
            assert!(result.seconds.is_some_and(|s| s >= 0.0), "{result:?}");
            BlockResult {
                seconds: None,
                ..result
            }
        })
        .collect()
}

/// The next message, which must be a release: its results, untimed.
async fn released(conn: &mut PeerConn) -> Vec<BlockResult> {
    match conn.recv().await {
        ToDriver::ReleaseBlocks { results } => untimed(results),
        other => panic!("expected a release, got {other:?}"),
    }
}

async fn shut_down(conn: &mut PeerConn) {
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    let reason = "no more blocks".to_string();
    conn.send(&FromDriver::Shutdown { reason }).await;
    conn.expect_closed().await;
}

fn sh(script: &str) -> Option<TaskCode> {
    Some(block_command(&["sh", "-c", script]))
}

fn failed(block_id: u64, error: &str) -> BlockResult {
    BlockResult {
        block_id,
        ok: false,
        skipped: false,
        error: Some(error.into()),
        seconds: None,
        cost: None,
    }
}

async fn ended(worker: JoinHandle<Result<Stopped, RunError>>) -> Result<Stopped, RunError> {
    within("the worker to end", worker).await.unwrap()
}

#[tokio::test]
async fn blocks_are_released_ok_or_with_their_failure_until_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = format!(
        "if [ {{block_id}} = 2 ]; then echo broken >&2; exit 3; fi; echo {{block_id}} >> {}",
        out.display()
    );
    let mut started = start(sh(&script), dir.path(), 10.0, 3).await;
    let results = hand_out(&mut started.conn, &[1, 2, 3]).await;
    let failure = "exit status 3; stderr tail: broken";
    assert_eq!(
        results,
        [
            BlockResult::succeeded(1),
            failed(2, failure),
            BlockResult::succeeded(3)
        ]
    );
    shut_down(&mut started.conn).await;
    let stopped = ended(started.worker).await.unwrap();
    let reason = "no more blocks".to_string();
    assert_eq!(stopped, Stopped::Shutdown { reason });
    assert_eq!(std::fs::read_to_string(out).unwrap(), "1\n3\n");
    let user_err = std::fs::read_to_string(dir.path().join("worker-7-user.err")).unwrap();
    assert_eq!(user_err, "broken\n");
}

/// A worker (heartbeats every `interval_s`, `misses` missed end it)
/// running block 4, whose command goes on until the returned file exists.
async fn running_block(dir: &Path, interval_s: f64, misses: u32) -> (Started, PathBuf) {
    let (running, go) = (dir.join("running"), dir.join("go"));
    let mut started = start(sh(&runs_until(&running, &go)), dir, interval_s, misses).await;
    let conn = &mut started.conn;
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    let blocks = vec![block(4)];
    conn.send(&FromDriver::Blocks { blocks }).await;
    within("the block to start", wait_for_file(&running)).await;
    (started, go)
}

#[tokio::test]
async fn a_stop_during_a_block_lets_it_finish_and_be_released() {
    let dir = tempfile::tempdir().unwrap();
    let (mut started, go) = running_block(dir.path(), 10.0, 3).await;
    let conn = &mut started.conn;
    started.stop.send(()).unwrap();
    let draining = ToDriver::Draining {
        reason: "told to stop".into(),
        out_of_time: false,
        by_choice: false,
    };
    assert_eq!(conn.recv().await, draining);
    std::fs::write(&go, "").unwrap();
    assert_eq!(released(conn).await, [BlockResult::succeeded(4)]);
    conn.expect_closed().await;
    let stopped = ended(started.worker).await.unwrap();
    let reason = "told to stop".to_string();
    assert_eq!(stopped, Stopped::Drained { reason });
}

#[tokio::test]
async fn a_driver_that_said_the_run_is_over_and_left_mid_block_is_no_failure() {
    let dir = tempfile::tempdir().unwrap();
    let running = dir.path().join("running");
    let script = format!("touch {}; sleep 1", running.display());
    let mut started = start(sh(&script), dir.path(), 10.0, 3).await;
    let conn = &mut started.conn;
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    let blocks = vec![block(4)];
    conn.send(&FromDriver::Blocks { blocks }).await;
    within("the block to start", wait_for_file(&running)).await;
    let reason = "the run was interrupted".to_string();
    conn.send(&FromDriver::Shutdown {
        reason: reason.clone(),
    })
    .await;
    conn.hang_up().await;
    let stopped = ended(started.worker).await.unwrap();
    assert_eq!(stopped, Stopped::DriverGone { reason });
}

#[tokio::test]
async fn the_worker_heartbeats_while_a_block_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (mut started, go) = running_block(dir.path(), 0.05, 1000).await;
    let conn = &mut started.conn;
    for _ in 0..3 {
        let heard = within("a heartbeat", conn.recv_any()).await;
        assert!(matches!(heard, Ok(ToDriver::Heartbeat)), "{heard:?}");
    }
    std::fs::write(&go, "").unwrap();
    assert_eq!(released(conn).await, [BlockResult::succeeded(4)]);
    shut_down(conn).await;
    assert!(matches!(
        ended(started.worker).await,
        Ok(Stopped::Shutdown { .. })
    ));
}

/// A block script that creates `running`, then runs until `go` exists.
fn runs_until(running: &Path, go: &Path) -> String {
    format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done",
        running.display(),
        go.display()
    )
}

async fn wait_for_file(path: &Path) {
    while !path.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A worker parked in an acquire, told to stop; returns once the driver
/// has received its Draining.
async fn stopped_while_parked(log_dir: &Path) -> (JoinHandle<Result<Stopped, RunError>>, PeerConn) {
    let Started {
        worker,
        mut conn,
        stop,
    } = start(sh("true"), log_dir, 10.0, 3).await;
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    drop(stop);
    let draining = ToDriver::Draining {
        reason: "told to stop".into(),
        out_of_time: false,
        by_choice: false,
    };
    assert_eq!(conn.recv().await, draining);
    (worker, conn)
}

#[tokio::test]
async fn a_stop_while_parked_ends_with_the_drivers_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (worker, mut conn) = stopped_while_parked(dir.path()).await;
    let reason = "the worker is draining".to_string();
    conn.send(&FromDriver::Shutdown { reason }).await;
    conn.expect_closed().await;
    let reason = "told to stop".to_string();
    assert_eq!(ended(worker).await.unwrap(), Stopped::Drained { reason });
}

#[tokio::test]
async fn blocks_that_cross_the_draining_on_the_wire_are_handed_back() {
    let dir = tempfile::tempdir().unwrap();
    let (worker, mut conn) = stopped_while_parked(dir.path()).await;
    conn.send(&FromDriver::Blocks {
        blocks: vec![block(8)],
    })
    .await;
    let returned = ToDriver::ReturnBlocks {
        block_ids: vec![8],
        reason: "told to stop".into(),
    };
    assert_eq!(conn.recv().await, returned);
    conn.expect_closed().await;
    assert!(matches!(ended(worker).await, Ok(Stopped::Drained { .. })));
}

/// A batch of three whose first block waits for `go`; returns once it
/// runs. Block 5 fails if it ever runs.
async fn batch_waiting_for(go: &Path, dir: &Path, job_end: Option<Instant>) -> Started {
    let running = dir.join("running");
    let script = format!(
        "test {{block_id}} != 5 || exit 1; {}",
        runs_until(&running, go)
    );
    let code = TaskCode {
        batch_size: 3,
        ..block_command(&["sh", "-c", &script])
    };
    let mut started = start_in_job(Some(code), dir, 10.0, 3, job_end, None).await;
    let conn = &mut started.conn;
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 3 });
    let blocks = vec![block(4), block(5), block(6)];
    conn.send(&FromDriver::Blocks { blocks }).await;
    within("the block to start", wait_for_file(&running)).await;
    started
}

#[tokio::test]
async fn a_stop_mid_batch_releases_what_ran_and_hands_back_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let mut started = batch_waiting_for(&go, dir.path(), None).await;
    started.stop.send(()).unwrap();
    let conn = &mut started.conn;
    assert!(matches!(conn.recv().await, ToDriver::Draining { .. }));
    std::fs::write(&go, "").unwrap();
    assert_eq!(released(conn).await, [BlockResult::succeeded(4)]);
    let returned = ToDriver::ReturnBlocks {
        block_ids: vec![5, 6],
        reason: "told to stop".into(),
    };
    assert_eq!(conn.recv().await, returned);
    conn.expect_closed().await;
    assert!(matches!(
        ended(started.worker).await,
        Ok(Stopped::Drained { .. })
    ));
}

#[tokio::test]
async fn a_block_failing_after_a_stop_signal_is_handed_back_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (running, go) = (dir.path().join("running"), dir.path().join("go"));
    let script = format!("{}; exit 143", runs_until(&running, &go));
    let mut started = start(sh(&script), dir.path(), 10.0, 3).await;
    let conn = &mut started.conn;
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    conn.send(&FromDriver::Blocks {
        blocks: vec![block(4)],
    })
    .await;
    within("the block to start", wait_for_file(&running)).await;
    started.stop.send(()).unwrap();
    assert!(matches!(conn.recv().await, ToDriver::Draining { .. }));
    std::fs::write(&go, "").unwrap();
    let returned = ToDriver::ReturnBlocks {
        block_ids: vec![4],
        reason: "told to stop".into(),
    };
    assert_eq!(conn.recv().await, returned);
    conn.expect_closed().await;
}

#[tokio::test]
async fn a_walltime_too_short_for_another_block_drains_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    // Time for the first block, then about 2 s left: less than the margin.
    let job_end = Instant::now() + crate::drain::WALLTIME_MARGIN + Duration::from_secs(2);
    let mut started = batch_waiting_for(&go, dir.path(), Some(job_end)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::write(&go, "").unwrap();
    let conn = &mut started.conn;
    let ToDriver::Draining {
        reason,
        out_of_time: true,
        by_choice: false,
    } = conn.recv().await
    else {
        panic!("expected Draining");
    };
    assert!(reason.contains("walltime"), "{reason}");
    assert_eq!(released(conn).await, [BlockResult::succeeded(4)]);
    let ToDriver::ReturnBlocks { block_ids, .. } = conn.recv().await else {
        panic!("expected the rest of the batch back");
    };
    assert_eq!(block_ids, [5, 6]);
    let reason = "the worker is draining".to_string();
    conn.send(&FromDriver::Shutdown { reason }).await;
    conn.expect_closed().await;
    assert!(matches!(
        ended(started.worker).await,
        Ok(Stopped::Drained { .. })
    ));
}

/// Answers every block but block 2, on which it dies; logs its pid when it
/// starts and "bye" when its stdin closes.
const DIES_ON_BLOCK_2: &str = r#"
import json, os, sys
log = open(sys.argv[1], "a")
log.write(f"start {os.getpid()}\n"); log.flush()
for line in sys.stdin:
    i = json.loads(line)["block_id"]
    if i == 2:
        sys.exit(3)
    print(json.dumps({"block_id": i, "ok": True}))
log.write("bye\n")
"#;

#[tokio::test]
async fn a_worker_command_is_restarted_after_it_dies_and_finished_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let argv = [
        "python3",
        "-u",
        "-c",
        DIES_ON_BLOCK_2,
        log.to_str().unwrap(),
    ];
    let code = TaskCode {
        kind: CodeKind::WorkerCommand,
        timeout_s: Some(60.0),
        ..block_command(&argv)
    };
    let mut started = start(Some(code), dir.path(), 10.0, 3).await;
    let results = hand_out(&mut started.conn, &[1, 2, 3]).await;
    let failure = "worker command ended before answering block 2: exit status 3; stderr was empty";
    assert_eq!(
        results,
        [
            BlockResult::succeeded(1),
            failed(2, failure),
            BlockResult::succeeded(3)
        ]
    );
    shut_down(&mut started.conn).await;
    assert!(matches!(
        ended(started.worker).await,
        Ok(Stopped::Shutdown { .. })
    ));
    let log = std::fs::read_to_string(log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let two_starts_and_a_bye = lines.len() == 3
        && lines[..2].iter().all(|l| l.starts_with("start"))
        && lines[0] != lines[1]
        && lines[2] == "bye";
    assert!(two_starts_and_a_bye, "{log}");
}

#[tokio::test]
async fn a_silent_driver_during_a_block_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut started = start(sh("sleep 1"), dir.path(), 0.1, 2).await;
    assert_eq!(
        started.conn.recv().await,
        ToDriver::AcquireBlocks { max: 1 }
    );
    started
        .conn
        .send(&FromDriver::Blocks {
            blocks: vec![block(1)],
        })
        .await;
    let error = ended(started.worker).await.unwrap_err();
    assert!(
        matches!(error, RunError::Client(ClientError::DriverLost { .. })),
        "{error:?}"
    );
}

#[tokio::test]
async fn code_that_cannot_run_is_refused_and_the_driver_told_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut started = start(sh("echo {blok_id}"), dir.path(), 10.0, 3).await;
    let ToDriver::CannotServe { reason } = started.conn.recv().await else {
        panic!("expected CannotServe");
    };
    assert!(reason.contains("unknown placeholder {blok_id}"), "{reason}");
    started.conn.expect_closed().await;
    let error = ended(started.worker).await.unwrap_err();
    assert!(matches!(error, RunError::BadCode { .. }), "{error:?}");
    let started = start(None, dir.path(), 10.0, 3).await;
    let error = ended(started.worker).await.unwrap_err();
    assert!(error.to_string().contains("carries no code"), "{error}");
}

/// Issue 11, item 11: a program that does not exist used to fail every
/// try of every block; the worker now says so once and takes no block.
#[tokio::test]
async fn a_function_task_or_an_unknown_kind_is_refused_naming_what_can_run_it() {
    let dir = tempfile::tempdir().unwrap();
    let function = TaskCode {
        kind: CodeKind::ProcessFunction,
        function: Some(FunctionCode {
            source: FunctionSource::Reference("seg:process".into()),
            search_path: Vec::new(),
        }),
        ..block_command(&[])
    };
    let unknown = TaskCode {
        kind: CodeKind::Unknown,
        ..block_command(&[])
    };
    let cases = [
        (function, "its workers are `python -m daisy_rs.worker`"),
        (unknown, "a kind of code this worker does not know"),
    ];
    for (code, expected) in cases {
        let mut started = start(Some(code), dir.path(), 10.0, 3).await;
        let ToDriver::CannotServe { reason } = started.conn.recv().await else {
            panic!("expected CannotServe");
        };
        assert!(reason.contains(expected), "{reason}");
        started.conn.expect_closed().await;
        let error = ended(started.worker).await.unwrap_err();
        assert!(matches!(error, RunError::BadCode { .. }), "{error:?}");
    }
}

#[tokio::test]
async fn a_program_that_does_not_start_is_refused_before_any_block() {
    let dir = tempfile::tempdir().unwrap();
    let worker_command = TaskCode {
        kind: CodeKind::WorkerCommand,
        ..block_command(&["pyhton3", "predict.py"])
    };
    let missing = dir.path().join("segg.sh");
    let cases = [
        (
            Some(worker_command),
            "program \"pyhton3\" is not found on PATH".to_string(),
        ),
        (
            Some(block_command(&[missing.to_str().unwrap(), "{block_id}"])),
            format!("program {missing:?} does not exist"),
        ),
    ];
    for (code, expected) in cases {
        let mut started = start(code, dir.path(), 10.0, 3).await;
        let ToDriver::CannotServe { reason } = started.conn.recv().await else {
            panic!("expected CannotServe");
        };
        assert!(reason.starts_with("its code cannot run: "), "{reason}");
        assert!(reason.contains(&expected), "{reason}");
        started.conn.expect_closed().await;
        let error = ended(started.worker).await.unwrap_err();
        assert!(matches!(error, RunError::BadCode { .. }), "{error:?}");
    }
}

#[tokio::test]
async fn a_batch_is_asked_for_at_once_and_released_in_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let code = TaskCode {
        batch_size: 3,
        ..block_command(&["sh", "-c", "test {block_id} != 5"])
    };
    let mut started = start(Some(code), dir.path(), 10.0, 3).await;
    let conn = &mut started.conn;
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 3 });
    let blocks = vec![block(4), block(5), block(6)];
    conn.send(&FromDriver::Blocks { blocks }).await;
    let ToDriver::ReleaseBlocks { results } = conn.recv().await else {
        panic!("expected one release of the batch");
    };
    let ids: Vec<u64> = results.iter().map(|r| r.block_id).collect();
    assert_eq!(ids, [4, 5, 6]);
    assert_eq!(
        results.iter().map(|r| r.ok).collect::<Vec<_>>(),
        [true, false, true]
    );
    shut_down_after_request(conn).await;
    assert!(matches!(
        ended(started.worker).await,
        Ok(Stopped::Shutdown { .. })
    ));
}

#[tokio::test]
async fn a_worker_command_asks_for_enough_blocks_to_prefetch() {
    let dir = tempfile::tempdir().unwrap();
    let script = "import json,sys\nfor l in sys.stdin: print(json.dumps({'block_id': json.loads(l)['block_id'], 'ok': True}), flush=True)";
    let code = TaskCode {
        kind: CodeKind::WorkerCommand,
        prefetch: 2,
        ..block_command(&["python3", "-c", script])
    };
    let mut started = start(Some(code), dir.path(), 10.0, 3).await;
    let conn = &mut started.conn;
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 3 });
    let blocks = vec![block(1), block(2), block(3)];
    conn.send(&FromDriver::Blocks { blocks }).await;
    assert_eq!(
        released(conn).await,
        [
            BlockResult::succeeded(1),
            BlockResult::succeeded(2),
            BlockResult::succeeded(3)
        ]
    );
    shut_down_after_request(conn).await;
    assert!(matches!(
        ended(started.worker).await,
        Ok(Stopped::Shutdown { .. })
    ));
}

async fn shut_down_after_request(conn: &mut PeerConn) {
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 3 });
    let reason = "no more blocks".to_string();
    conn.send(&FromDriver::Shutdown { reason }).await;
}

#[tokio::test]
async fn a_worker_told_the_tasks_blocks_are_too_long_for_its_walltime_takes_none() {
    let dir = tempfile::tempdir().unwrap();
    // A minute left, but the task's blocks took up to an hour elsewhere.
    let job_end = Instant::now() + Duration::from_secs(60);
    let Started {
        worker,
        mut conn,
        stop: _keep_running,
    } = start_in_job(sh("true"), dir.path(), 10.0, 3, Some(job_end), Some(3600.0)).await;
    let ToDriver::Draining {
        reason,
        out_of_time: true,
        by_choice: false,
    } = conn.recv().await
    else {
        panic!("expected Draining before any acquire");
    };
    assert!(reason.contains("the longest took 3600.0s"), "{reason}");
    conn.expect_closed().await;
    drop(conn);
    let result = ended(worker).await;
    assert!(matches!(result, Ok(Stopped::Drained { .. })), "{result:?}");
}

#[tokio::test]
async fn a_worker_waiting_for_blocks_drains_when_its_walltime_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    // Room for no block 1.5 s from now.
    let job_end = Instant::now() + crate::drain::WALLTIME_MARGIN + Duration::from_millis(1500);
    let mut started = start_in_job(sh("true"), dir.path(), 10.0, 3, Some(job_end), None).await;
    let conn = &mut started.conn;
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    // No blocks for it: it waits, and drains on time by itself.
    let ToDriver::Draining {
        reason,
        out_of_time: true,
        by_choice: false,
    } = conn.recv().await
    else {
        panic!("expected Draining for the walltime");
    };
    assert!(reason.contains("walltime"), "{reason}");
    let reason = "the worker is draining".to_string();
    conn.send(&FromDriver::Shutdown { reason }).await;
    conn.expect_closed().await;
    assert!(matches!(
        ended(started.worker).await,
        Ok(Stopped::Drained { .. })
    ));
}
