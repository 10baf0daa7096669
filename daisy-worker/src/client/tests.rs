//! The client against a stand-in driver speaking the real framing.

use super::*;
use crate::test_peer::{block, garbage_frame, within, Peer, PeerConn, PATIENCE};
use daisy_core::protocol::{FromDriver, ToDriver};

fn opts(address: String) -> ConnectOpts {
    let mut opts = ConnectOpts::new(vec![address], "secret".into(), "predict".into());
    opts.connect_timeout = PATIENCE;
    opts
}

/// A client welcomed with these heartbeat settings, and the driver's end.
async fn connected(interval_s: f64, misses: u32) -> (Client, PeerConn) {
    let peer = Peer::bind().await;
    let connecting = tokio::spawn(Client::connect(opts(peer.address())));
    let (mut conn, _) = peer.accept().await;
    conn.welcome(None, interval_s, misses).await;
    let client = within("the client to connect", connecting).await;
    (client.unwrap().unwrap(), conn)
}

/// An address where nothing listens (a port that was just free).
async fn free_address() -> String {
    Peer::bind().await.address()
}

#[tokio::test]
async fn connect_retries_until_the_driver_listens() {
    let address = free_address().await;
    let connecting = tokio::spawn(Client::connect(opts(address.clone())));
    // Long enough for a few refused attempts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peer = Peer::bind_at(&address).await;
    let (mut conn, _) = peer.accept().await;
    conn.welcome(None, 10.0, 3).await;
    let client = within("the client to connect", connecting).await;
    assert_eq!(client.unwrap().unwrap().welcome().worker_id, 7);
}

#[tokio::test]
async fn the_hello_says_who_is_connecting() {
    let peer = Peer::bind().await;
    let mut opts = opts(peer.address());
    opts.worker_id = Some(3);
    opts.job_id = Some("4242".into());
    let _connecting = tokio::spawn(Client::connect(opts));
    let (_, hello) = peer.accept().await;
    assert_eq!(hello.protocol, PROTOCOL_VERSION);
    assert_eq!((hello.token.as_str(), hello.role), ("secret", Role::Worker));
    assert_eq!(hello.task_id.as_deref(), Some("predict"));
    assert_eq!(
        (hello.worker_id, hello.job_id.as_deref()),
        (Some(3), Some("4242"))
    );
    assert_eq!(hello.pid, std::process::id());
    assert!(!hello.host.is_empty());
}

#[test]
fn the_token_never_shows_in_debug_output() {
    let shown = format!("{:?}", opts("127.0.0.1:1".into()));
    assert!(
        !shown.contains("secret") && shown.contains("redacted"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_rejection_is_not_retried_and_names_the_reason() {
    let peer = Peer::bind().await;
    let connecting = tokio::spawn(Client::connect(opts(peer.address())));
    let (mut conn, _) = peer.accept().await;
    let reason = "wrong token: this worker does not belong to this run".to_string();
    conn.send(&FromDriver::Rejected {
        reason: reason.clone(),
        retry_later: false,
    })
    .await;
    let error = within("the rejection", connecting).await.unwrap().err();
    assert_eq!(error, Some(ConnectError::Rejected { reason }));
    assert!(!peer.connection_within(Duration::from_millis(500)).await);
}

#[tokio::test]
async fn addresses_that_cannot_work_fail_with_what_is_wrong() {
    let address = free_address().await;
    let mut unreachable = opts(address.clone());
    unreachable.connect_timeout = Duration::from_millis(300);
    let error = within("connect", Client::connect(unreachable)).await.err();
    assert!(
        matches!(&error, Some(ConnectError::Unreachable { addresses, .. }) if *addresses == address),
        "{error:?}"
    );
    let error = within("connect", Client::connect(opts("no-port".into())))
        .await
        .err();
    assert!(
        matches!(error, Some(ConnectError::BadAddress { .. })),
        "{error:?}"
    );
    let mut none = opts(address);
    none.addresses.clear();
    let error = Client::connect(none).await.err();
    assert_eq!(error, Some(ConnectError::NoAddress));
}

#[tokio::test]
async fn garbage_instead_of_a_welcome_fails_the_handshake() {
    let peer = Peer::bind().await;
    let connecting = tokio::spawn(Client::connect(opts(peer.address())));
    let (mut conn, _) = peer.accept().await;
    conn.send_raw(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
    let error = within("the handshake", connecting).await.unwrap().err();
    assert!(
        matches!(&error, Some(ConnectError::Handshake { reason, .. }) if reason.contains("exceeds the limit")),
        "{error:?}"
    );
}

#[tokio::test]
async fn acquire_parks_until_blocks_arrive_and_survives_cancellation() {
    let (mut client, mut conn) = connected(10.0, 3).await;
    let parked = tokio::time::timeout(Duration::from_millis(200), client.acquire(1)).await;
    assert!(parked.is_err(), "answered without blocks: {parked:?}");
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    conn.send(&FromDriver::Blocks {
        blocks: vec![block(5)],
    })
    .await;
    let acquired = within("blocks", client.acquire(1)).await.unwrap();
    assert_eq!(acquired, Acquired::Blocks(vec![block(5)]));
    // The cancelled call's request was answered, not asked again.
    client.close().await.unwrap();
    conn.expect_closed().await;
}

#[tokio::test]
async fn shutdown_completes_a_parked_acquire_and_every_later_one() {
    let (mut client, mut conn) = connected(10.0, 3).await;
    let parked = tokio::spawn(async move {
        let acquired = client.acquire(2).await;
        (client, acquired)
    });
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 2 });
    let reason = "task predict is done".to_string();
    conn.send(&FromDriver::Shutdown {
        reason: reason.clone(),
    })
    .await;
    let (mut client, acquired) = within("the parked acquire", parked).await.unwrap();
    let shutdown = Acquired::Shutdown { reason };
    assert_eq!(acquired.unwrap(), shutdown);
    assert_eq!(client.acquire(1).await.unwrap(), shutdown);
    client.close().await.unwrap();
    conn.expect_closed().await;
}

#[tokio::test]
async fn heartbeats_are_sent_at_the_interval() {
    let (_client, mut conn) = connected(0.1, 1000).await;
    for _ in 0..3 {
        assert_eq!(conn.recv_any().await.unwrap(), ToDriver::Heartbeat);
    }
}

#[tokio::test]
async fn driver_heartbeats_keep_a_parked_acquire_alive() {
    let (mut client, mut conn) = connected(0.1, 10).await;
    let parked = tokio::spawn(async move { client.acquire(1).await });
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    // Twice the silence limit, in heartbeats.
    for _ in 0..40 {
        conn.send(&FromDriver::Heartbeat).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    conn.send(&FromDriver::Blocks {
        blocks: vec![block(1)],
    })
    .await;
    let acquired = within("blocks", parked).await.unwrap().unwrap();
    assert_eq!(acquired, Acquired::Blocks(vec![block(1)]));
}

#[tokio::test]
async fn driver_silence_is_driver_lost_for_pending_and_later_calls() {
    let (mut client, mut conn) = connected(0.1, 2).await;
    let lost = client.lost();
    let error = within("driver lost", client.acquire(1)).await.unwrap_err();
    let expected = ClientError::DriverLost {
        silent_for: Duration::from_millis(200),
    };
    assert_eq!(error, expected);
    assert_eq!(conn.recv().await, ToDriver::AcquireBlocks { max: 1 });
    assert_eq!(client.release(vec![]).await.unwrap_err(), expected);
    assert_eq!(within("lost", lost).await, expected);
}

#[tokio::test]
async fn garbage_after_the_welcome_is_a_protocol_error() {
    let (mut client, mut conn) = connected(10.0, 3).await;
    conn.send_raw(&garbage_frame()).await;
    let error = within("the error", client.acquire(1)).await.unwrap_err();
    assert!(
        matches!(&error, ClientError::Protocol { reason } if reason.contains("is not a MessagePack map")),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_driver_closing_the_connection_is_reported() {
    let (mut client, conn) = connected(10.0, 3).await;
    drop(conn);
    let error = within("the error", client.acquire(1)).await.unwrap_err();
    assert_eq!(error, ClientError::Disconnected);
}

#[tokio::test]
async fn an_error_from_the_driver_does_not_break_the_client() {
    let (mut client, mut conn) = connected(10.0, 3).await;
    conn.send(&FromDriver::Error {
        reason: "block 9 is not held by worker 7".into(),
    })
    .await;
    conn.send(&FromDriver::Blocks {
        blocks: vec![block(2)],
    })
    .await;
    let acquired = within("blocks", client.acquire(1)).await.unwrap();
    assert_eq!(acquired, Acquired::Blocks(vec![block(2)]));
}

#[tokio::test]
async fn close_writes_what_is_queued_then_ends_the_connection() {
    let (mut client, mut conn) = connected(10.0, 3).await;
    let result = BlockResult {
        block_id: 3,
        ok: false,
        skipped: false,
        error: Some("exit status 1".into()),
        seconds: None,
        cost: None,
    };
    client.release(vec![result.clone()]).await.unwrap();
    client.draining("SIGTERM".into(), false).await.unwrap();
    client.close().await.unwrap();
    let release = ToDriver::ReleaseBlocks {
        results: vec![result],
    };
    assert_eq!(conn.recv().await, release);
    let draining = ToDriver::Draining {
        reason: "SIGTERM".into(),
        out_of_time: false,
        by_choice: false,
    };
    assert_eq!(conn.recv().await, draining);
    conn.expect_closed().await;
}

#[tokio::test]
async fn a_driver_that_leaves_writes_unread_is_lost_though_it_talks() {
    let (mut client, mut conn) = connected(0.2, 2).await;
    let talking = tokio::spawn(async move {
        loop {
            conn.send(&FromDriver::Heartbeat).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let large = BlockResult {
        block_id: 1,
        ok: false,
        skipped: false,
        error: Some("x".repeat(100_000)),
        seconds: None,
        cost: None,
    };
    let sending = async {
        loop {
            if let Err(error) = client.release(vec![large.clone()]).await {
                return error;
            }
        }
    };
    let error = within("the driver lost", sending).await;
    talking.abort();
    let expected = ClientError::DriverLost {
        silent_for: Duration::from_millis(400),
    };
    assert_eq!(error, expected);
}

#[test]
fn a_job_step_is_named_by_its_job_and_step() {
    let env = crate::test_env::env_of;
    let step = env(&[("SLURM_JOB_ID", "27"), ("SLURM_STEP_ID", "3")]);
    assert_eq!(job_id_in(step).as_deref(), Some("27.3"));
    assert_eq!(
        job_id_in(env(&[("SLURM_JOB_ID", "27")])).as_deref(),
        Some("27")
    );
    let batch = env(&[("SLURM_JOB_ID", "27"), ("SLURM_STEP_ID", "batch")]);
    assert_eq!(job_id_in(batch).as_deref(), Some("27"));
    assert_eq!(job_id_in(env(&[("LSB_JOBID", "9")])).as_deref(), Some("9"));
    assert_eq!(job_id_in(env(&[])), None);
}
