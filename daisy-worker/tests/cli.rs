//! The `daisy-worker` binary, run as a real process against a stand-in
//! driver: where its context comes from, what it does with blocks, and its
//! exit codes.

// Shared with the unit tests, which use the parts these tests do not.
#[allow(dead_code)]
mod peer;

use daisy_core::context::{WorkerContext, CONTEXT_ENV};
use daisy_core::protocol::{BlockResult, FromDriver, ToDriver, PROTOCOL_VERSION};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use peer::{block, block_command, within, Peer, PeerConn};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "s3cret-token";

/// A running `daisy-worker`, killed if the test ends before it does; its
/// stdout and stderr go to files in its directory.
struct Worker {
    child: Child,
    dir: PathBuf,
}

impl Worker {
    /// Starts the binary in `dir` with `args`, no DAISY_CONTEXT unless
    /// `context` is given, and verbose logs.
    fn start(dir: &Path, args: &[&str], context: Option<&WorkerContext>) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_daisy-worker"));
        cmd.args(args)
            .current_dir(dir)
            .env_remove(CONTEXT_ENV)
            .env("RUST_LOG", "trace")
            .stdin(Stdio::null())
            .stdout(fs::File::create(dir.join("worker.stdout")).unwrap())
            .stderr(fs::File::create(dir.join("worker.stderr")).unwrap());
        if let Some(context) = context {
            cmd.env(CONTEXT_ENV, context.to_json());
        }
        let child = cmd.spawn().expect("start daisy-worker");
        Self {
            child,
            dir: dir.to_path_buf(),
        }
    }

    async fn exit_code(&mut self) -> Option<i32> {
        within("daisy-worker to exit", async {
            loop {
                if let Some(status) = self.child.try_wait().unwrap() {
                    return status.code();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }

    fn stderr(&self) -> String {
        fs::read_to_string(self.dir.join("worker.stderr")).unwrap()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn context(address: String) -> WorkerContext {
    WorkerContext {
        addresses: vec![address],
        task_id: Some("predict".into()),
        worker_id: Some(5),
        token: TOKEN.into(),
        protocol: PROTOCOL_VERSION,
    }
}

#[tokio::test]
async fn without_a_context_the_worker_exits_2_naming_the_ways_to_give_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::start(dir.path(), &[], None);
    assert_eq!(worker.exit_code().await, Some(2));
    let stderr = worker.stderr();
    for way in [
        "--connect HOST:PORT",
        "--context-file FILE",
        "DAISY_CONTEXT",
    ] {
        assert!(stderr.contains(way), "{way} missing from: {stderr}");
    }
}

#[tokio::test]
async fn a_worker_runs_each_block_it_is_given_and_exits_0_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::bind().await;
    let mut worker = Worker::start(dir.path(), &[], Some(&context(peer.address())));
    let (mut conn, hello) = peer.accept().await;
    assert_eq!((hello.token.as_str(), hello.worker_id), (TOKEN, Some(5)));
    let script = r#"echo {block_id} >> out.txt; echo "context=$DAISY_CONTEXT" >> env.txt"#;
    conn.welcome(Some(block_command(&["sh", "-c", script])), 10.0, 3)
        .await;
    for id in [10, 11, 12] {
        hand_out_and_expect_success(&mut conn, id).await;
    }
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    let reason = "task predict is done".to_string();
    conn.send(&FromDriver::Shutdown { reason }).await;
    conn.expect_closed().await;
    assert_eq!(worker.exit_code().await, Some(0));
    let out = fs::read_to_string(dir.path().join("out.txt")).unwrap();
    assert_eq!(out, "10\n11\n12\n");
    let env = fs::read_to_string(dir.path().join("env.txt")).unwrap();
    assert_eq!(env, "context=\n".repeat(3), "user code saw the context");
    assert!(!worker.stderr().contains(TOKEN), "the token was logged");
}

/// Answers one acquire with block `id`; its release must be ok.
async fn hand_out_and_expect_success(conn: &mut PeerConn, id: u64) {
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    let blocks = vec![block(id)];
    conn.send(&FromDriver::Blocks { blocks }).await;
    let ToDriver::ReleaseBlocks { results } = conn.recv().await else {
        panic!("expected the release of block {id}");
    };
    let [BlockResult {
        block_id,
        ok: true,
        skipped: false,
        error: None,
        seconds: Some(_),
        cost: None,
    }] = results[..]
    else {
        panic!("expected one successful, timed result: {results:?}");
    };
    assert_eq!(block_id, id);
}

#[tokio::test]
async fn a_rejected_worker_exits_3_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let peer = Peer::bind().await;
    let address = peer.address();
    let args = [
        "--connect",
        &address,
        "--task",
        "predict",
        "--token-file",
        token_file.to_str().unwrap(),
    ];
    let mut worker = Worker::start(dir.path(), &args, None);
    let (mut conn, hello) = peer.accept().await;
    assert_eq!((hello.token.as_str(), hello.worker_id), (TOKEN, None));
    let reason = "unknown task \"predict\"".to_string();
    let retry_later = false;
    conn.send(&FromDriver::Rejected {
        reason,
        retry_later,
    })
    .await;
    assert_eq!(worker.exit_code().await, Some(3));
    let stderr = worker.stderr();
    let expected = "daisy-worker: rejected by the driver: unknown task \"predict\"";
    assert!(stderr.contains(expected), "{stderr}");
}

#[tokio::test]
async fn sigterm_while_waiting_for_blocks_drains_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::bind().await;
    let mut worker = Worker::start(dir.path(), &[], Some(&context(peer.address())));
    let (mut conn, _) = peer.accept().await;
    conn.welcome(Some(block_command(&["true"])), 10.0, 3).await;
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    let pid = Pid::from_raw(worker.child.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    let draining = ToDriver::Draining {
        reason: "received SIGTERM".into(),
        out_of_time: false,
        by_choice: false,
    };
    assert_eq!(conn.recv().await, draining);
    let reason = "the worker is draining".to_string();
    conn.send(&FromDriver::Shutdown { reason }).await;
    conn.expect_closed().await;
    assert_eq!(worker.exit_code().await, Some(0));
}
