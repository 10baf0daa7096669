//! What the end-to-end benches share: the real `daisy-driver` binary
//! started on a generated pipeline, and in-process no-op workers.

use daisy_core::context::WorkerContext;
use daisy_core::protocol::BlockResult;
use daisy_worker::{Acquired, Client, ConnectOpts};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The driver binary Cargo built for this bench (bench profile).
const DRIVER: &str = env!("CARGO_BIN_EXE_daisy-driver");
/// Another driver binary to measure instead (comparing builds).
pub const DRIVER_ENV: &str = "DAISY_THROUGHPUT_DRIVER";
/// How long the driver may take to write context.json.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// `/proc/<pid>/stat` counts CPU time in USER_HZ ticks, 100 on Linux.
const PROC_TICKS_PER_SECOND: f64 = 100.0;

/// A running `daisy-driver run`; killed if dropped before it exits.
pub struct Driver {
    pub child: Child,
    pub run_dir: PathBuf,
}

impl Driver {
    /// Writes `pipeline` (TOML) into `dir` and starts the driver on it
    /// with `args` added, its output going to `dir/driver.out` and
    /// `dir/driver.err`.
    pub fn start(dir: &Path, pipeline: &str, args: &[&str]) -> Result<Self, String> {
        let file = dir.join("pipeline.toml");
        std::fs::write(&file, pipeline).map_err(|e| e.to_string())?;
        let run_dir = dir.join("run");
        let log = |name: &str| std::fs::File::create(dir.join(name)).map(Stdio::from);
        let child = Command::new(driver_program())
            .arg("run")
            .arg(&file)
            .arg("--run-dir")
            .arg(&run_dir)
            .args(["--listen", "127.0.0.1:0", "--worker-bin", "/bin/false"])
            .args(["--status-every", "1h"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(log("driver.out").map_err(|e| e.to_string())?)
            .stderr(log("driver.err").map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", driver_program().display()))?;
        Ok(Self { child, run_dir })
    }

    /// Waits for `context.json`, failing early if the driver died.
    pub fn wait_for_context(&mut self) -> Result<WorkerContext, String> {
        let path = self.run_dir.join("context.json");
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("the driver exited at start-up: {status}"));
            }
            if let Ok(text) = std::fs::read_to_string(&path) {
                if let Ok(context) = WorkerContext::from_json(&text) {
                    return Ok(context);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(format!("no {} within {START_TIMEOUT:?}", path.display()))
    }

    /// CPU seconds the driver has used so far, from `/proc/<pid>/stat`
    /// (utime and stime, fields 14 and 15; the name before them is in
    /// parentheses and may hold spaces).
    pub fn cpu_so_far(&self) -> Result<f64, String> {
        let path = format!("/proc/{}/stat", self.child.id());
        let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let after_name = stat.rsplit_once(") ").ok_or(format!("{path}: no name"))?.1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks: f64 = [11, 12]
            .iter()
            .map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
            .sum::<Option<f64>>()
            .ok_or(format!("{path}: no utime/stime"))?;
        Ok(ticks / PROC_TICKS_PER_SECOND)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The driver binary measured: Cargo's, or the one `DRIVER_ENV` names.
pub fn driver_program() -> PathBuf {
    std::env::var_os(DRIVER_ENV).map_or(PathBuf::from(DRIVER), PathBuf::from)
}

/// Acquires `batch` blocks at a time and releases them as done at once
/// (each reported to have run `seconds`), until the driver says
/// Shutdown; returns how many blocks it did.
pub async fn noop_worker(
    mut client: Client,
    batch: u32,
    seconds: Option<f64>,
) -> Result<u64, String> {
    let mut done = 0;
    loop {
        let blocks = match client.acquire(batch).await.map_err(|e| e.to_string())? {
            Acquired::Blocks(blocks) => blocks,
            Acquired::Shutdown { .. } => break,
        };
        done += blocks.len() as u64;
        let results = blocks
            .iter()
            .map(|b| BlockResult {
                block_id: b.block_id,
                ok: true,
                skipped: false,
                error: None,
                seconds,
                cost: None,
            })
            .collect();
        client.release(results).await.map_err(|e| e.to_string())?;
    }
    client.close().await.map_err(|e| e.to_string())?;
    Ok(done)
}

/// Connects `workers` clients to task `task`.
pub async fn connect(
    context: WorkerContext,
    task: &str,
    workers: u32,
) -> Result<Vec<Client>, String> {
    let opts = ConnectOpts::new(context.addresses, context.token, task.to_string());
    let mut clients = Vec::new();
    for _ in 0..workers {
        let client = Client::connect(opts.clone()).await;
        clients.push(client.map_err(|e| e.to_string())?);
    }
    Ok(clients)
}

/// Runs `clients` as no-op workers (see [`noop_worker`]) until
/// Shutdown; blocks done in all.
pub async fn run_noop(
    clients: Vec<Client>,
    batch: u32,
    seconds: Option<f64>,
) -> Result<u64, String> {
    let loops: Vec<_> = clients
        .into_iter()
        .map(|client| tokio::spawn(noop_worker(client, batch, seconds)))
        .collect();
    let mut done = 0;
    for worker in loops {
        done += worker.await.map_err(|e| e.to_string())??;
    }
    Ok(done)
}
