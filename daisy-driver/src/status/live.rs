//! Asking a running driver for a snapshot, as an observer: the address
//! and token come from `<run-dir>/context.json`, the conversation is
//! `hello` (role observer) → `welcome`, `get_snapshot` → `snapshot`
//! (docs/protocol.md, "Observers"). Blocking and short: status is one
//! question, so a plain socket with timeouts is enough, and a driver that
//! does not answer quickly counts as not running.

use anyhow::{bail, Context as _};
use daisy_core::context::WorkerContext;
use daisy_core::protocol::frame::{decode, encode};
use daisy_core::protocol::messages::RunSnapshot;
use daisy_core::protocol::{FromDriver, Hello, Role, ToDriver, MAX_FRAME_BYTES, PROTOCOL_VERSION};
use std::io::{Read, Write};
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
    let mut stream = connect(&context.addresses)?;
    send(&mut stream, &ToDriver::Hello(hello(context.token)))?;
    match receive(&mut stream)? {
        FromDriver::Welcome(_) => {}
        FromDriver::Rejected { reason, .. } => bail!("the driver refused the connection: {reason}"),
        other => bail!("expected a welcome, got {other:?}"),
    }
    send(&mut stream, &ToDriver::GetSnapshot)?;
    loop {
        match receive(&mut stream)? {
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
                stream.set_read_timeout(Some(TIMEOUT))?;
                stream.set_write_timeout(Some(TIMEOUT))?;
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(error) => errors.push(format!("{address}: {error}")),
        }
    }
    bail!("no driver listens at {}", errors.join("; "))
}

fn send(stream: &mut TcpStream, message: &ToDriver) -> anyhow::Result<()> {
    stream
        .write_all(&encode(message)?)
        .context("writing to the driver")
}

fn receive(stream: &mut TcpStream) -> anyhow::Result<FromDriver> {
    let mut prefix = [0u8; 4];
    stream
        .read_exact(&mut prefix)
        .context("reading from the driver")?;
    let len = u32::from_be_bytes(prefix);
    if len > MAX_FRAME_BYTES {
        bail!("the driver sent a frame of {len} bytes, over the limit of {MAX_FRAME_BYTES}");
    }
    // Grows as bytes arrive: whatever answers on the port, a length
    // alone reserves nothing.
    let mut payload = Vec::new();
    Read::by_ref(stream)
        .take(u64::from(len))
        .read_to_end(&mut payload)
        .context("reading from the driver")?;
    if payload.len() < len as usize {
        bail!("the driver closed the connection in the middle of a frame");
    }
    Ok(decode(&payload)?)
}
