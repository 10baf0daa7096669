//! Asking a running driver for a snapshot, as an observer: the address
//! and token come from `<run-dir>/context.json`, the conversation is
//! `hello` (role observer) → `welcome`, `get_snapshot` → `snapshot`
//! (docs/protocol.md, "Observers"). Short: status is one question, asked
//! on a runtime of its own through the transport workers use, and a driver
//! that does not answer quickly counts as not running.

use anyhow::{bail, Context as _};
use daisy_core::context::WorkerContext;
use daisy_core::protocol::messages::RunSnapshot;
use daisy_core::protocol::{
    FromDriver, Hello, Role, ToDriver, Transport, MAX_FRAME_BYTES, PROTOCOL_VERSION,
};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

/// How long connecting to one address, and each answer, may take.
const TIMEOUT: Duration = Duration::from_secs(3);

/// The driver's snapshot of the run whose context file is `context_file`.
pub(super) fn snapshot(context_file: &Path) -> anyhow::Result<RunSnapshot> {
    let text = std::fs::read_to_string(context_file)
        .with_context(|| format!("reading {}", context_file.display()))?;
    let context = WorkerContext::from_json(&text)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("reading {}", context_file.display()))?;
    let stream = connect(&context.addresses)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(ask(stream, context.token))
}

/// The observer's end of a connection.
type ObserverEnd = Transport<tokio::net::TcpStream, FromDriver, ToDriver>;

/// Says hello as an observer and asks for a snapshot.
async fn ask(stream: TcpStream, token: String) -> anyhow::Result<RunSnapshot> {
    stream.set_nonblocking(true)?;
    let stream = tokio::net::TcpStream::from_std(stream)?;
    let mut driver = ObserverEnd::new(stream, MAX_FRAME_BYTES);
    send(&mut driver, ToDriver::Hello(hello(token))).await?;
    match receive(&mut driver).await? {
        FromDriver::Welcome(_) => {}
        FromDriver::Rejected { reason, .. } => {
            bail!("the driver refused the connection: {reason}")
        }
        other => bail!("expected a welcome, got {other:?}"),
    }
    send(&mut driver, ToDriver::GetSnapshot).await?;
    loop {
        match receive(&mut driver).await? {
            FromDriver::Snapshot(snapshot) => return Ok(snapshot),
            FromDriver::Heartbeat => continue,
            FromDriver::Shutdown { reason } => bail!("the driver is ending the run: {reason}"),
            other => bail!("expected a snapshot, got {other:?}"),
        }
    }
}

fn hello(token: String) -> Hello {
    Hello {
        protocol: PROTOCOL_VERSION,
        token,
        role: Role::Observer,
        task_id: None,
        worker_id: None,
        job_id: None,
        host: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        pid: std::process::id(),
    }
}

/// The first of `addresses` that accepts a connection.
fn connect(addresses: &[String]) -> anyhow::Result<TcpStream> {
    let mut errors = Vec::new();
    for address in addresses {
        let resolved = address.to_socket_addrs().map(|mut a| a.next());
        let attempt = match resolved {
            Ok(Some(addr)) => TcpStream::connect_timeout(&addr, TIMEOUT),
            Ok(None) => Err(std::io::Error::other("resolves to nothing")),
            Err(error) => Err(error),
        };
        match attempt {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(error) => errors.push(format!("{address}: {error}")),
        }
    }
    bail!("no driver listens at {}", errors.join("; "))
}

async fn send(driver: &mut ObserverEnd, message: ToDriver) -> anyhow::Result<()> {
    let sent = tokio::time::timeout(TIMEOUT, driver.send(message)).await;
    sent.context("the driver reads nothing")?
        .context("writing to the driver")
}

async fn receive(driver: &mut ObserverEnd) -> anyhow::Result<FromDriver> {
    let received = tokio::time::timeout(TIMEOUT, driver.receive()).await;
    received
        .with_context(|| format!("no answer from the driver within {TIMEOUT:?}"))?
        .context("reading from the driver")
}
