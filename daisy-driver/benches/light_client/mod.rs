//! A lighter in-process no-op worker for the throughput bench: one task
//! and one [`Transport`] per worker, where [`daisy_worker::Client`] has
//! two tasks, two channels and a 64 KiB read buffer per worker.
//!
//! Why: the bench's 2,000 clients share the driver's two cores and their
//! caches, so what the clients touch per block counts against the driver
//! too, which on a cluster would not be. The driver sees the same thing
//! from either client: the same Hello, a release and the next acquire in
//! one write, a heartbeat every interval (the driver checks it tells
//! nothing else apart). Only the client's own footprint differs.

use daisy_core::context::WorkerContext;
use daisy_core::protocol::{
    BlockResult, FromDriver, Hello, Message, Role, ToDriver, Transport, WireBlock, MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
};
use std::time::Duration;
use tokio::net::TcpStream;

/// The worker's end of a connection.
type WorkerEnd = Transport<TcpStream, FromDriver, ToDriver>;

/// A connected worker and how often it must send a heartbeat.
pub struct LightWorker {
    transport: WorkerEnd,
    heartbeat: Duration,
}

/// Connects `workers` light workers to task `task`, one after the other
/// (so the driver never has more than one waiting for its Welcome).
pub async fn connect(
    context: &WorkerContext,
    task: &str,
    workers: u32,
) -> Result<Vec<LightWorker>, String> {
    let mut connected = Vec::new();
    for _ in 0..workers {
        connected.push(connect_one(context, task).await?);
    }
    Ok(connected)
}

async fn connect_one(context: &WorkerContext, task: &str) -> Result<LightWorker, String> {
    let address = context.addresses.first().ok_or("no driver address")?;
    let stream = TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut transport = WorkerEnd::new(stream, MAX_FRAME_BYTES);
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        token: context.token.clone(),
        role: Role::Worker,
        task_id: Some(task.to_string()),
        worker_id: None,
        job_id: None,
        host: "bench".to_string(),
        pid: std::process::id(),
    };
    transport
        .send(ToDriver::Hello(hello))
        .await
        .map_err(|e| e.to_string())?;
    match transport.receive().await.map_err(|e| e.to_string())? {
        FromDriver::Welcome(welcome) => Ok(LightWorker {
            transport,
            heartbeat: Duration::from_secs_f64(welcome.heartbeat_interval_s),
        }),
        other => Err(format!("expected a Welcome, got {}", other.kind())),
    }
}

impl LightWorker {
    /// Acquires `batch` blocks at a time and releases them as done with
    /// the next acquire in one write, until Shutdown; blocks done.
    pub async fn run(mut self, batch: u32) -> Result<u64, String> {
        let start = tokio::time::Instant::now() + self.heartbeat;
        let mut heartbeat = tokio::time::interval_at(start, self.heartbeat);
        let mut done = 0;
        let mut results = Vec::new();
        loop {
            if !results.is_empty() {
                let results = std::mem::take(&mut results);
                self.feed(ToDriver::ReleaseBlocks { results }).await?;
            }
            self.feed(ToDriver::AcquireBlocks { max: batch }).await?;
            self.transport.flush().await.map_err(|e| e.to_string())?;
            let Some(blocks) = self.next_blocks(&mut heartbeat).await? else {
                return Ok(done);
            };
            done += blocks.len() as u64;
            results = blocks
                .iter()
                .map(|b| BlockResult::succeeded(b.block_id))
                .collect();
        }
    }

    async fn feed(&mut self, message: ToDriver) -> Result<(), String> {
        self.transport
            .feed(message)
            .await
            .map_err(|e| e.to_string())
    }

    /// The next Blocks (`None` at Shutdown), heartbeating while it waits.
    async fn next_blocks(
        &mut self,
        heartbeat: &mut tokio::time::Interval,
    ) -> Result<Option<Vec<WireBlock>>, String> {
        loop {
            let frame = tokio::select! {
                biased;
                frame = self.transport.receive() => frame.map_err(|e| e.to_string())?,
                _ = heartbeat.tick() => {
                    self.transport.send(ToDriver::Heartbeat).await.map_err(|e| e.to_string())?;
                    continue;
                }
            };
            match frame {
                FromDriver::Blocks { blocks, .. } => return Ok(Some(blocks)),
                FromDriver::Shutdown { .. } => return Ok(None),
                FromDriver::Heartbeat => {}
                other => return Err(format!("unexpected {}", other.kind())),
            }
        }
    }
}

/// Runs `workers` (see [`LightWorker::run`]) until Shutdown; blocks done
/// in all.
pub async fn run(workers: Vec<LightWorker>, batch: u32) -> Result<u64, String> {
    let loops: Vec<_> = (workers.into_iter())
        .map(|worker| tokio::spawn(worker.run(batch)))
        .collect();
    let mut done = 0;
    for worker in loops {
        done += worker.await.map_err(|e| e.to_string())??;
    }
    Ok(done)
}
