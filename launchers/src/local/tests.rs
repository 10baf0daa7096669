//! Real processes: `/bin/sh -c SCRIPT` stands in for `daisy-worker`.
//! Every wait is bounded by [`WAIT`].

use super::*;
use std::fs;
use std::path::PathBuf;

/// The longest any test waits for a process to do something.
const WAIT: Duration = Duration::from_secs(10);

/// A short grace so that cancelling a SIGTERM-ignoring worker is quick.
const SHORT_GRACE: Duration = Duration::from_millis(200);

/// Script of a worker that ignores SIGTERM and has a child that does too;
/// the child's pid appears, whole, in `<dir>/grandchild-<id>`.
fn stubborn_script(dir: &Path, worker_id: u64) -> String {
    let file = dir.join(format!("grandchild-{worker_id}"));
    let file = file.display();
    format!("trap '' TERM; sleep 60 & echo $! > {file}.tmp; mv {file}.tmp {file}; wait")
}

fn sh(dir: &Path, worker_id: u64, script: &str) -> WorkerRequest {
    WorkerRequest {
        task_id: "task".into(),
        worker_id,
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: Vec::new(),
        working_dir: dir.to_path_buf(),
        log_dir: dir.join("logs").join("task"),
        requires: BTreeMap::new(),
        cluster: Default::default(),
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn next_ended(launcher: &mut LocalLauncher) -> Vec<(u64, JobId, JobEnd)> {
    let mut ended = Vec::new();
    wait_until("a worker to end", || {
        ended = launcher.poll_ended();
        !ended.is_empty()
    });
    ended
}

fn pid_of(job: &JobId) -> i32 {
    job.0.parse().unwrap()
}

/// The state letter in /proc/<pid>/stat ('Z' for a zombie), if it exists.
fn process_state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// Dead: no such process, or a zombie (reparented grandchildren may stay
/// zombies here, where PID 1 does not reap).
fn is_gone(pid: i32) -> bool {
    matches!(process_state(pid), None | Some('Z'))
}

fn read_pid_file(path: PathBuf) -> i32 {
    wait_until("a pid file", || path.exists());
    fs::read_to_string(&path).unwrap().trim().parse().unwrap()
}

#[test]
fn start_writes_stdout_and_stderr_to_the_worker_log_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::new();
    let request = sh(dir.path(), 7, "echo to-out; echo to-err >&2");
    launcher.start(&request).unwrap();
    next_ended(&mut launcher);
    let log = |extension: &str| {
        fs::read_to_string(request.log_dir.join(format!("worker-7.{extension}"))).unwrap()
    };
    assert_eq!(log("out"), "to-out\n");
    assert_eq!(log("err"), "to-err\n");
}

#[test]
fn environment_reaches_the_worker_and_secrets_stay_off_its_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::with_grace(SHORT_GRACE);
    let mut request = sh(dir.path(), 1, "sleep 30");
    request.env = vec![("DAISY_CONTEXT".into(), "token-s3cr3t".into())];
    let pid = pid_of(&launcher.start(&request).unwrap());
    // Between fork and exec the child still shows the parent's
    // environment: wait until it runs the program.
    let cmdline = || {
        String::from_utf8_lossy(&fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
            .into_owned()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cmdline().contains("sleep 30") {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never ran its program"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let environ = fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    let cmdline = cmdline();
    assert!(environ.contains("DAISY_CONTEXT=token-s3cr3t"), "{environ}");
    assert!(
        environ.contains("PATH="),
        "inherited environment lost: {environ}"
    );
    assert!(!cmdline.contains("s3cr3t"));
    launcher.cancel(&[1]);
}

#[test]
fn the_worker_runs_in_its_working_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mut request = sh(dir.path(), 1, "touch here");
    request.working_dir = dir.path().join("work");
    fs::create_dir(&request.working_dir).unwrap();
    let mut launcher = LocalLauncher::new();
    launcher.start(&request).unwrap();
    next_ended(&mut launcher);
    assert!(request.working_dir.join("here").exists());
}

#[test]
fn poll_ended_reports_an_exit_code_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::new();
    let job = launcher.start(&sh(dir.path(), 5, "exit 3")).unwrap();
    let ended = next_ended(&mut launcher);
    assert_eq!(ended, vec![(5, job, JobEnd::Exited { code: 3 })]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(launcher.poll_ended(), vec![]);
}

#[test]
fn poll_ended_names_the_signal_that_ended_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::new();
    launcher.start(&sh(dir.path(), 1, "kill -KILL $$")).unwrap();
    let (_, _, end) = next_ended(&mut launcher).remove(0);
    let signal = "SIGKILL".to_owned();
    assert_eq!(end, JobEnd::Signalled { signal });
}

#[test]
fn a_worker_that_exits_takes_its_process_group_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::new();
    let file = dir.path().join("grandchild").display().to_string();
    let script = format!("sleep 60 & echo $! > {file}.tmp; mv {file}.tmp {file}; exit 0");
    launcher.start(&sh(dir.path(), 1, &script)).unwrap();
    let (_, _, end) = next_ended(&mut launcher).remove(0);
    assert_eq!(end, JobEnd::Exited { code: 0 });
    let grandchild = read_pid_file(dir.path().join("grandchild"));
    wait_until("the grandchild to die", || is_gone(grandchild));
}

#[test]
fn cancel_kills_a_worker_that_ignores_sigterm_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::with_grace(SHORT_GRACE);
    let job = launcher
        .start(&sh(dir.path(), 1, &stubborn_script(dir.path(), 1)))
        .unwrap();
    let grandchild = read_pid_file(dir.path().join("grandchild-1"));
    launcher.cancel(&[1]);
    assert!(is_gone(pid_of(&job)), "the worker outlived cancel");
    wait_until("the grandchild to die", || is_gone(grandchild));
    assert_eq!(launcher.poll_ended(), vec![(1, job, JobEnd::Cancelled)]);
    assert_eq!(launcher.poll_ended(), vec![]);
}

#[test]
fn cancel_ends_many_workers_in_one_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::with_grace(SHORT_GRACE);
    let ids: Vec<u64> = (0..20).collect();
    let mut pids = Vec::new();
    for &id in &ids {
        let request = sh(dir.path(), id, &stubborn_script(dir.path(), id));
        pids.push(pid_of(&launcher.start(&request).unwrap()));
        pids.push(read_pid_file(dir.path().join(format!("grandchild-{id}"))));
    }
    let started = Instant::now();
    launcher.cancel(&ids);
    eprintln!("cancelled 20 workers in {:?}", started.elapsed());
    for pid in pids {
        wait_until("a cancelled process to die", || is_gone(pid));
    }
    let ended = launcher.poll_ended();
    let ended_ids: Vec<u64> = ended.iter().map(|(id, _, _)| *id).collect();
    assert_eq!(ended_ids, ids);
    assert!(ended.iter().all(|(_, _, end)| *end == JobEnd::Cancelled));
}

#[test]
fn cancel_reports_a_worker_that_had_already_exited_as_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::new();
    let job = launcher.start(&sh(dir.path(), 2, "exit 4")).unwrap();
    wait_until("the worker to exit", || {
        process_state(pid_of(&job)) == Some('Z')
    });
    launcher.cancel(&[2]);
    let ended = launcher.poll_ended();
    assert_eq!(ended, vec![(2, job, JobEnd::Exited { code: 4 })]);
}

#[test]
fn dropping_the_launcher_ends_every_worker() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::with_grace(SHORT_GRACE);
    let mut pids = Vec::new();
    for id in 0..3 {
        let request = sh(dir.path(), id, &stubborn_script(dir.path(), id));
        pids.push(pid_of(&launcher.start(&request).unwrap()));
        pids.push(read_pid_file(dir.path().join(format!("grandchild-{id}"))));
    }
    drop(launcher);
    for pid in pids {
        wait_until("a worker of the dropped launcher to die", || is_gone(pid));
    }
}

#[test]
fn a_missing_program_is_a_spawn_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut request = sh(dir.path(), 1, "");
    request.program = dir.path().join("no-such-daisy-worker");
    let error = LocalLauncher::new().start(&request).unwrap_err();
    assert!(
        matches!(&error, LaunchError::Spawn { program, .. } if *program == request.program),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("no-such-daisy-worker"),
        "{error}"
    );
}

#[test]
fn start_refuses_a_worker_id_that_is_still_running() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::with_grace(SHORT_GRACE);
    launcher.start(&sh(dir.path(), 1, "sleep 30")).unwrap();
    let error = launcher.start(&sh(dir.path(), 1, "sleep 30")).unwrap_err();
    assert!(matches!(
        error,
        LaunchError::WorkerIdInUse { worker_id: 1, .. }
    ));
}
