//! Runs that go wrong: workers that keep dying get their task abandoned
//! while unrelated tasks finish, a block that kills its worker fails
//! alone, and SIGTERM stops a run that a re-run then resumes.

use crate::util::*;
use std::collections::BTreeSet;

#[test]
fn a_task_whose_workers_keep_dying_is_abandoned_and_its_peer_finishes() {
    let dir = TestDir::new();
    // Each worker hangs (a stopped process, as on a dead node): it is lost
    // for silence, which is no block's doing, so it uses up a restart.
    let pipeline = format!(
        "name = \"dying\"\n{}{}{}",
        task("doomed", 10, "kill -STOP $PPID", "max_worker_restarts = 2"),
        task("after", 10, "true", "upstream = [\"doomed\"]"),
        task("peer", 10, "echo {block_id} >> peer.txt", "max_workers = 2"),
    );
    dir.write("dying.toml", &pipeline);
    let out = run_fails(&mut dir.driver(&["run", "dying.toml"]), 1);
    assert!(
        out.contains("task \"doomed\" was abandoned: 3 unclean worker exits"),
        "{out}"
    );
    let events = events(&dir.join("daisy_run/dying"));
    let lost = events
        .iter()
        .filter(|e| e["event"] == "worker_gone" && e["task"] == "doomed" && e["clean"] == false)
        .count();
    assert_eq!(lost, 3, "2 restarts after the first loss, then no more");
    let abandoned: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["event"] == "task_abandoned")
        .filter_map(|e| e["task"].as_str())
        .collect();
    assert_eq!(abandoned, BTreeSet::from(["doomed", "after"]));
    let done = |task: &str| {
        events
            .iter()
            .find(|e| e["event"] == "task_done" && e["task"] == task)
            .map(|e| e["counters"].clone())
            .unwrap()
    };
    assert_eq!(done("doomed")["orphaned"], 10);
    assert_eq!(done("after")["orphaned"], 10);
    assert_eq!(done("peer")["completed"], 10);
    let peer: BTreeSet<String> = dir.read("peer.txt").lines().map(String::from).collect();
    assert_eq!(peer.len(), 10);
}

#[test]
fn a_block_that_kills_its_worker_is_blamed_retried_and_fails_alone() {
    let dir = TestDir::new();
    let command = "echo {block_id} >> ran.txt; [ {block_id} != 3 ] || kill -9 $PPID";
    let pipeline = format!(
        "name = \"killer\"\n{}",
        task("t", 10, command, "max_retries = 1\nmax_worker_restarts = 0")
    );
    dir.write("killer.toml", &pipeline);
    let out = run_fails(&mut dir.driver(&["run", "killer.toml"]), 1);
    assert!(!out.contains("abandoned"), "a block's doing: {out}");
    let counters = task_done_counters(&dir.join("daisy_run/killer"), "t");
    assert_eq!(
        (counters["completed"].as_u64(), counters["failed"].as_u64()),
        (Some(9), Some(1))
    );
    let events = events(&dir.join("daisy_run/killer"));
    let failures: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "block_failed")
        .collect();
    assert_eq!(failures.len(), 2, "tried, then retried once");
    for failure in failures {
        assert_eq!(failure["block_id"], 3);
        let error = failure["error"].as_str().unwrap();
        assert!(
            error.contains("died while running this block: killed by SIGKILL"),
            "{error}"
        );
    }
}

#[test]
fn sigterm_stops_the_run_ends_its_workers_and_a_rerun_resumes() {
    let dir = TestDir::new();
    let pipeline = format!(
        "name = \"stop\"\n{}",
        task(
            "slow",
            40,
            "echo $PPID >> pids.txt; sleep 0.2; echo {block_id} >> ran.txt",
            "max_workers = 2"
        )
    );
    dir.write("stop.toml", &pipeline);
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "stop.toml"]));
    wait_until("some blocks ran", || {
        dir.read("ran.txt").lines().count() >= 4
    });
    let pid = nix::unistd::Pid::from_raw(driver.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = driver.wait_for_exit();
    assert_eq!(status.code(), Some(130), "interrupted: {status:?}");
    let workers: BTreeSet<i32> = dir
        .read("pids.txt")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(
        workers.iter().all(|pid| !process_alive(*pid)),
        "no worker left behind"
    );
    let events = events(&dir.join("daisy_run/stop"));
    assert_eq!(events.last().unwrap()["event"], "run_finished");
    assert_eq!(events.last().unwrap()["completed"], false);
    let done_before: BTreeSet<u64> = event_blocks(&events, "block_done", "slow")
        .into_iter()
        .collect();

    let out = run_ok(&mut dir.driver(&["run", "stop.toml"]));
    assert!(
        out.contains(&format!("{} blocks run", 40 - done_before.len())),
        "only the rest ran: {out}"
    );
}

#[test]
fn a_hand_started_worker_of_an_interrupted_run_exits_0_saying_so() {
    let dir = TestDir::new();
    let pipeline = format!(
        "name = \"hand\"\n{}",
        task(
            "t",
            6,
            "echo {block_id} >> ran.txt; sleep 5",
            "max_workers = 0"
        )
    );
    dir.write("hand.toml", &pipeline);
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "hand.toml"]));
    let context = dir.join("daisy_run/hand/context.json");
    wait_until("the driver serves", || context.exists());
    let context = context.display().to_string();
    let worker = ChildGuard::spawn_logged(
        &mut dir.worker(&["--context-file", &context, "--task", "t"]),
        &dir.join("worker.log"),
    );
    wait_until("the worker runs a block", || {
        !dir.read("ran.txt").is_empty()
    });
    let pid = nix::unistd::Pid::from_raw(driver.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    assert_eq!(driver.wait_for_exit().code(), Some(130));
    let status = worker.wait_for_exit();
    let log = dir.read("worker.log");
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("no more work: the run was interrupted; the driver ended before"),
        "{log}"
    );
}

#[test]
fn a_full_disk_for_the_event_log_is_counted_in_the_summary_and_the_exit_status() {
    let dir = TestDir::new();
    let pipeline = format!(
        "name = \"full\"\n{}",
        task("t", 100, "true", "max_workers = 2")
    );
    dir.write("full.toml", &pipeline);
    // A file size limit stands in for a full disk: writes past 2 KiB
    // fail (EFBIG, with SIGXFSZ ignored), as they would with ENOSPC.
    let mut command = std::process::Command::new("sh");
    command
        .args(["-c", "trap '' XFSZ; ulimit -f 4; exec \"$0\" run full.toml"])
        .arg(env!("CARGO_BIN_EXE_daisy-driver"))
        .current_dir(dir.path())
        .env("DAISY_WORKER_BIN", worker_program());
    let out = run_fails(&mut command, 4);
    assert!(
        out.contains("writes to daisy_run/full/events.jsonl failed (a full disk?)"),
        "{out}"
    );
    let (done, total) = marked_done(&dir.join("daisy_run/full"), "t");
    assert_eq!(done.len() as u64, total, "the done markers lost nothing");
}

/// The next message from the driver that is not a heartbeat.
fn receive(stream: &mut std::net::TcpStream) -> daisy_core::protocol::FromDriver {
    use std::io::Read;
    loop {
        let mut prefix = [0u8; 4];
        stream
            .read_exact(&mut prefix)
            .expect("a frame from the driver");
        let mut payload = vec![0u8; u32::from_be_bytes(prefix) as usize];
        stream.read_exact(&mut payload).unwrap();
        let message: daisy_core::protocol::FromDriver = rmp_serde::from_slice(&payload).unwrap();
        if message != daisy_core::protocol::FromDriver::Heartbeat {
            return message;
        }
    }
}

#[test]
fn an_observer_gets_a_snapshot_of_the_run() {
    use daisy_core::context::WorkerContext;
    use daisy_core::protocol::frame::encode;
    use daisy_core::protocol::{FromDriver, Hello, Role, ToDriver, PROTOCOL_VERSION};
    use std::io::Write;

    let dir = TestDir::new();
    let pipeline = format!("name = \"obs\"\n{}", task("t", 20, "sleep 0.1", ""));
    dir.write("obs.toml", &pipeline);
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "obs.toml"]));
    let context_file = dir.join("daisy_run/obs/context.json");
    wait_until("the driver listens", || context_file.exists());
    let context =
        WorkerContext::from_json(&std::fs::read_to_string(&context_file).unwrap()).unwrap();
    let mut stream = std::net::TcpStream::connect(context.addresses.last().unwrap()).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let hello = ToDriver::Hello(Hello {
        protocol: PROTOCOL_VERSION,
        token: context.token.clone(),
        role: Role::Observer,
        task_id: None,
        worker_id: None,
        job_id: None,
        host: "test".into(),
        pid: 1,
    });
    stream.write_all(&encode(&hello).unwrap()).unwrap();
    let FromDriver::Welcome(welcome) = receive(&mut stream) else {
        panic!("expected a welcome")
    };
    assert!(welcome.code.is_none(), "observers get no code to run");
    stream
        .write_all(&encode(&ToDriver::AcquireBlocks { max: 1 }).unwrap())
        .unwrap();
    assert!(
        matches!(receive(&mut stream), FromDriver::Error { .. }),
        "observers take no blocks"
    );
    stream
        .write_all(&encode(&ToDriver::GetSnapshot).unwrap())
        .unwrap();
    let FromDriver::Snapshot(snapshot) = receive(&mut stream) else {
        panic!("expected a snapshot")
    };
    assert_eq!(snapshot.pipeline, "obs");
    assert_eq!(snapshot.tasks[0].task_id, "t");
    assert_eq!(snapshot.tasks[0].counters.total, 20);
    drop(stream);
    assert!(driver.wait_for_exit().success());
}

#[test]
fn a_hung_worker_is_declared_lost_and_its_block_runs_elsewhere() {
    let dir = TestDir::new();
    let pipeline = format!(
        "name = \"hung\"\n{}",
        task(
            "t",
            20,
            "sleep 0.2; echo {block_id} >> ran.txt",
            "max_workers = 2"
        )
    );
    dir.write("hung.toml", &pipeline);
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "hung.toml"]));
    let run_dir = dir.join("daisy_run/hung");
    let first_worker = || {
        events(&run_dir)
            .iter()
            .find(|e| e["event"] == "worker_connected")
            .and_then(|e| e["pid"].as_i64())
    };
    wait_until("a worker connected", || first_worker().is_some());
    wait_until("blocks are running", || !dir.read("ran.txt").is_empty());
    // A hung node: the worker stops answering without closing its socket.
    let pid = nix::unistd::Pid::from_raw(first_worker().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}");
    let events = events(&run_dir);
    let silent = events
        .iter()
        .find(|e| e["event"] == "worker_gone" && e["clean"] == false)
        .expect("the hung worker was declared lost");
    assert!(
        silent["why"].as_str().unwrap().contains("no message"),
        "{silent}"
    );
    assert_each_block_done_once(&run_dir, "t", 20);
    assert_completed_without_failures(&run_dir, "t", 20);
    assert!(!process_alive(pid.as_raw()), "the hung worker was ended");
    assert_no_process_left_in(dir.path());
}

#[test]
fn a_block_that_hangs_past_its_timeout_and_ignores_sigterm_is_killed_and_retried() {
    let dir = TestDir::new();
    // Block 3 hangs the first time only (a marker file remembers).
    let command = "if [ {block_id} = 3 ] && [ ! -e hung-once ]; then touch hung-once; trap '' TERM; sleep 600 & echo $! > hung.pid; wait; fi; echo {block_id} >> ran.txt";
    let pipeline = format!(
        "name = \"slow\"\n{}",
        task("t", 6, command, "timeout = \"1s\"")
    );
    dir.write("slow.toml", &pipeline);
    run_ok(&mut dir.driver(&["run", "slow.toml"]));
    let run_dir = dir.join("daisy_run/slow");
    let events = events(&run_dir);
    let timed_out = events
        .iter()
        .find(|e| e["event"] == "block_failed" && e["block_id"] == 3)
        .expect("the hanging block failed");
    assert!(
        timed_out["error"].as_str().unwrap().contains("timed out"),
        "{timed_out}"
    );
    assert_eq!(timed_out["for_good"], false, "and was retried");
    assert_each_block_done_once(&run_dir, "t", 6);
    assert_completed_without_failures(&run_dir, "t", 6);
    let hung: i32 = dir.read("hung.pid").trim().parse().unwrap();
    assert!(!process_alive(hung), "no hanging process is left behind");
    assert_no_process_left_in(dir.path());
}

#[test]
fn a_lost_driver_leaves_no_user_process_behind() {
    let dir = TestDir::new();
    // Each block starts a grandchild (as a shell script or a Python pool
    // would) and waits for it.
    let command = "sleep 600 & echo $! > child.pid; wait";
    let pipeline = format!("name = \"lost\"\n{}", task("t", 4, command, ""));
    dir.write("lost.toml", &pipeline);
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "lost.toml"]));
    wait_until("a block started its child", || {
        dir.read("child.pid").trim().parse::<i32>().is_ok()
    });
    let child: i32 = dir.read("child.pid").trim().parse().unwrap();
    let worker = events(&dir.join("daisy_run/lost"))
        .iter()
        .find(|e| e["event"] == "worker_connected")
        .and_then(|e| e["pid"].as_i64())
        .unwrap() as i32;
    drop(driver); // SIGKILL: the driver's node is gone
    wait_until("the worker exits", || !process_alive(worker));
    wait_until("the block's child is gone too", || !process_alive(child));
}
