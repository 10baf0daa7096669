//! Protocol robustness: bad input over a raw socket is refused with a
//! reason, and the run it was sent to still completes.

use crate::util::*;
use daisy_core::context::WorkerContext;
use daisy_core::protocol::frame::encode;
use daisy_core::protocol::{BlockResult, FromDriver, Hello, Role, ToDriver, PROTOCOL_VERSION};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

const PIPELINE: &str = r#"name = "p"
[[task]]
id = "slow"
total_roi = { offset = [0], shape = [30] }
read_roi = { offset = [0], shape = [1] }
write_roi = { offset = [0], shape = [1] }
block_command = ["sleep", "0.1"]
"#;

pub(crate) fn connect(context: &WorkerContext) -> TcpStream {
    let address = context.addresses.last().unwrap();
    let stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

pub(crate) fn send(stream: &mut TcpStream, message: &ToDriver) {
    stream.write_all(&encode(message).unwrap()).unwrap();
}

/// The next frame from the driver that is not a heartbeat.
pub(crate) fn receive(stream: &mut TcpStream) -> FromDriver {
    loop {
        let mut prefix = [0u8; 4];
        stream
            .read_exact(&mut prefix)
            .expect("a frame from the driver");
        let mut payload = vec![0u8; u32::from_be_bytes(prefix) as usize];
        stream.read_exact(&mut payload).unwrap();
        let message: FromDriver = rmp_serde::from_slice(&payload).unwrap();
        if message != FromDriver::Heartbeat {
            return message;
        }
    }
}

pub(crate) fn hello(token: &str, task: &str) -> ToDriver {
    ToDriver::Hello(Hello {
        protocol: PROTOCOL_VERSION,
        token: token.to_string(),
        role: Role::Worker,
        task_id: Some(task.to_string()),
        worker_id: None,
        job_id: None,
        host: "test".into(),
        pid: std::process::id(),
    })
}

pub(crate) fn rejection(stream: &mut TcpStream) -> String {
    match receive(stream) {
        FromDriver::Rejected { reason, .. } => reason,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn raw_rejection(context: &WorkerContext, bytes: &[u8], close: bool) -> String {
    let mut stream = connect(context);
    stream.write_all(bytes).unwrap();
    if close {
        stream.shutdown(Shutdown::Write).unwrap();
    }
    rejection(&mut stream)
}

pub(crate) fn refusal(stream: &mut TcpStream) -> String {
    match receive(stream) {
        FromDriver::Error { reason } => reason,
        other => panic!("expected an error reply, got {other:?}"),
    }
}

#[test]
fn bad_input_is_refused_with_a_reason_and_the_run_completes() {
    let dir = TestDir::new();
    dir.write("p.toml", PIPELINE);
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "p.toml"]));
    let context_file = dir.join("daisy_run/p/context.json");
    wait_until("the driver listens", || context_file.exists());
    let context =
        WorkerContext::from_json(&std::fs::read_to_string(&context_file).unwrap()).unwrap();

    let garbage = raw_rejection(&context, b"GET / HTTP/1.1\r\n\r\n", false);
    assert!(garbage.contains("exceeds the limit"), "{garbage}");
    let truncated = raw_rejection(&context, &[0, 0, 0, 10, 1, 2], true);
    assert!(truncated.contains("middle of a frame"), "{truncated}");
    let oversized = raw_rejection(&context, &(64u32 << 20).to_be_bytes(), false);
    assert!(oversized.contains("exceeds the limit"), "{oversized}");
    let undecodable = raw_rejection(&context, &[0, 0, 0, 2, 0xc1, 0xc1], false);
    assert_eq!(
        undecodable,
        "the frame is not a MessagePack map (its first byte is 0xc1)"
    );

    let mut stream = connect(&context);
    send(&mut stream, &hello("not-the-token", "slow"));
    assert!(rejection(&mut stream).contains("wrong token"));
    let mut stream = connect(&context);
    send(&mut stream, &hello(&context.token, "nope"));
    assert!(rejection(&mut stream).contains("unknown task \"nope\""));

    let mut worker = connect(&context);
    send(&mut worker, &hello(&context.token, "slow"));
    assert!(matches!(receive(&mut worker), FromDriver::Welcome(_)));
    let release = |id| ToDriver::ReleaseBlocks {
        results: vec![BlockResult {
            block_id: id,
            ok: true,
            skipped: false,
            error: None,
            seconds: None,
            cost: None,
        }],
    };
    send(&mut worker, &release(999));
    assert!(refusal(&mut worker).contains("block 999 is not held"));
    send(&mut worker, &ToDriver::AcquireBlocks { max: 1 });
    let FromDriver::Blocks { blocks } = receive(&mut worker) else {
        panic!("expected blocks")
    };
    let id = blocks[0].block_id;
    send(&mut worker, &release(id));
    send(&mut worker, &release(id));
    assert!(
        refusal(&mut worker).contains("not held"),
        "a duplicate release is refused"
    );
    let unheld = ToDriver::ReturnBlocks {
        block_ids: vec![998],
        reason: "test".into(),
    };
    send(&mut worker, &unheld);
    assert!(refusal(&mut worker)
        .contains("block 998 is not held by this worker, so it cannot be returned"));
    drop(worker);

    let mut refusing = connect(&context);
    send(&mut refusing, &hello(&context.token, "slow"));
    assert!(matches!(receive(&mut refusing), FromDriver::Welcome(_)));
    let reason = "its code cannot run: a test".to_string();
    send(&mut refusing, &ToDriver::CannotServe { reason });
    drop(refusing);

    let status = driver.wait_for_exit();
    assert!(status.success(), "the run completed: {status:?}");
    let events = events(&dir.join("daisy_run/p"));
    let refused = events
        .iter()
        .filter(|e| e["event"] == "connection_refused")
        .count();
    assert_eq!(refused, 6);
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event"] == "request_refused")
            .count(),
        3
    );
    let gone = events
        .iter()
        .find(|e| e["event"] == "worker_gone" && e["why"] == "its code cannot run: a test")
        .expect("the worker that cannot serve is gone, saying why");
    assert_eq!(gone["clean"], false, "an unclean exit: {gone}");
    assert_eq!(
        event_blocks(&events, "block_done", "slow").len(),
        30,
        "every block counted once"
    );
}

/// The next frame that is not a heartbeat, if one comes within `limit`;
/// heartbeats are sent meanwhile, so the driver does not count this
/// worker as gone.
fn receive_within(stream: &mut TcpStream, limit: Duration) -> Option<FromDriver> {
    let deadline = std::time::Instant::now() + limit;
    let mut message = None;
    while message.is_none() && std::time::Instant::now() < deadline {
        send(stream, &ToDriver::Heartbeat);
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut prefix = [0u8; 4];
        match stream.read_exact(&mut prefix) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => panic!("reading a frame from the driver: {e}"),
        }
        let mut payload = vec![0u8; u32::from_be_bytes(prefix) as usize];
        stream.read_exact(&mut payload).unwrap();
        let frame: FromDriver = rmp_serde::from_slice(&payload).unwrap();
        message = Some(frame).filter(|m| *m != FromDriver::Heartbeat);
    }
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    message
}

#[test]
fn a_prefetching_worker_is_not_let_go_as_idle_while_it_holds_a_block() {
    let dir = TestDir::new();
    // Two blocks whose contexts overlap: the second waits for the first.
    dir.write(
        "p.toml",
        r#"name = "prefetch"
[[task]]
id = "t"
total_roi = { offset = [-1], shape = [4] }
read_roi = { offset = [-1], shape = [3] }
write_roi = { offset = [0], shape = [1] }
max_workers = 1
idle_timeout = "300ms"
block_command = ["true"]
"#,
    );
    // The launched "worker" only hands its context to the test, which
    // speaks the protocol in its place.
    let stand_in = dir.write(
        "worker.sh",
        "#!/bin/sh\necho \"$DAISY_CONTEXT\" > launched.tmp && mv launched.tmp launched.json\nexec sleep 60\n",
    );
    std::fs::set_permissions(
        &stand_in,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let driver = ChildGuard::spawn(
        dir.driver(&["run", "p.toml"])
            .env("DAISY_WORKER_BIN", &stand_in),
    );
    wait_until("the worker is launched", || {
        dir.join("launched.json").exists()
    });
    let context = WorkerContext::from_json(&dir.read("launched.json")).unwrap();
    let mut worker = connect(&context);
    let ToDriver::Hello(mut hello) = hello(&context.token, "t") else {
        unreachable!()
    };
    hello.worker_id = context.worker_id;
    send(&mut worker, &ToDriver::Hello(hello));
    assert!(matches!(receive(&mut worker), FromDriver::Welcome(_)));
    send(&mut worker, &ToDriver::AcquireBlocks { max: 1 });
    let FromDriver::Blocks { blocks } = receive(&mut worker) else {
        panic!("expected blocks")
    };
    let first = blocks[0].block_id;
    // Asking ahead while the first block runs (the protocol allows it):
    // nothing is ready, so the request parks. The worker is busy, not idle.
    send(&mut worker, &ToDriver::AcquireBlocks { max: 1 });
    let early = receive_within(&mut worker, Duration::from_secs(2));
    assert_eq!(early, None, "nothing is sent while the block runs");
    let done = |block_id| ToDriver::ReleaseBlocks {
        results: vec![BlockResult {
            block_id,
            ok: true,
            skipped: false,
            error: None,
            seconds: Some(2.0),
            cost: None,
        }],
    };
    send(&mut worker, &done(first));
    let FromDriver::Blocks { blocks } = receive(&mut worker) else {
        panic!("the parked request gets the second block")
    };
    send(&mut worker, &done(blocks[0].block_id));
    send(&mut worker, &ToDriver::AcquireBlocks { max: 1 });
    assert!(matches!(receive(&mut worker), FromDriver::Shutdown { .. }));
    worker.shutdown(Shutdown::Write).unwrap();
    let status = driver.wait_for_exit();
    assert!(status.success(), "{status:?}");
    let events = events(&dir.join("daisy_run/prefetch"));
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event"] == "worker_released")
            .count(),
        0,
        "{events:?}"
    );
}
