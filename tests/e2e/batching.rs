//! Block batching and prefetch through the real driver: a batch taken and
//! released by an in-test `daisy_worker::Client`, and launched workers
//! with `batch_size` and `prefetch` running every block once. (What the
//! driver does with a lost worker's batch, and with a block held past its
//! timeout, are rules of its core, tested in `driver/core/tests.rs`.)

use crate::util::*;
use daisy_core::context::WorkerContext;
use daisy_core::protocol::BlockResult;
use daisy_worker::{Acquired, Client, ConnectOpts};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One 1-D task of `blocks` independent blocks (all ready at once), with
/// `extra` task fields; each block appends its id to ran.txt.
fn flat(blocks: u32, extra: &str) -> String {
    format!(
        r#"name = "flat"
[[task]]
id = "t"
total_roi = {{ offset = [0], shape = [{blocks}] }}
read_roi = {{ offset = [0], shape = [1] }}
write_roi = {{ offset = [0], shape = [1] }}
{extra}
"#
    )
}

/// A hand-started (`max_workers = 0`) task, its driver running.
fn hand_served(dir: &TestDir, blocks: u32) -> (ChildGuard, WorkerContext) {
    let extra = "max_workers = 0\nblock_command = [\"true\"]";
    dir.write("flat.toml", &flat(blocks, extra));
    let driver = ChildGuard::spawn(&mut dir.driver(&["run", "flat.toml"]));
    let file = dir.join("daisy_run/flat/context.json");
    wait_until("the driver listens", || file.exists());
    let text = std::fs::read_to_string(&file).unwrap();
    (driver, WorkerContext::from_json(&text).unwrap())
}

async fn connect(context: &WorkerContext) -> Client {
    let opts = ConnectOpts::new(context.addresses.clone(), context.token.clone(), "t".into());
    Client::connect(opts).await.unwrap()
}

async fn take(client: &mut Client, max: u32) -> Vec<u64> {
    match client.acquire(max).await.unwrap() {
        Acquired::Blocks(blocks) => blocks.iter().map(|b| b.block_id).collect(),
        Acquired::Shutdown { reason } => panic!("no blocks: {reason}"),
    }
}

/// Takes and releases batches until the driver says Shutdown.
async fn serve_the_rest(client: &mut Client) {
    while let Acquired::Blocks(blocks) = client.acquire(64).await.unwrap() {
        let results = blocks
            .iter()
            .map(|b| BlockResult::succeeded(b.block_id))
            .collect();
        client.release(results).await.unwrap();
    }
}

/// block id -> the workers that reported it done.
fn done_by(run_dir: &Path) -> BTreeMap<u64, Vec<u64>> {
    let mut done: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for event in events(run_dir)
        .iter()
        .filter(|e| e["event"] == "block_done")
    {
        let block = event["block_id"].as_u64().unwrap();
        let worker = event["worker_id"].as_u64().unwrap_or_default();
        done.entry(block).or_default().push(worker);
    }
    done
}

fn task_done_counters(run_dir: &Path) -> serde_json::Value {
    let events = events(run_dir);
    let done = events.iter().find(|e| e["event"] == "task_done");
    done.expect("a task_done event")["counters"].clone()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

#[test]
fn a_batch_of_eight_is_handed_to_one_worker_and_released_together() {
    let dir = TestDir::new();
    let (driver, context) = hand_served(&dir, 40);
    let (worker, batch) = runtime().block_on(async {
        let mut client = connect(&context).await;
        let batch = take(&mut client, 8).await;
        assert_eq!(batch.len(), 8, "exactly the 8 asked for: {batch:?}");
        client
            .release(batch.iter().map(|&id| BlockResult::succeeded(id)).collect())
            .await
            .unwrap();
        serve_the_rest(&mut client).await;
        let worker = client.welcome().worker_id;
        client.close().await.unwrap();
        (worker, batch)
    });
    assert!(driver.wait_for_exit().success());
    let run_dir = dir.join("daisy_run/flat");
    let done = done_by(&run_dir);
    assert_eq!(done.len(), 40, "every block done");
    assert!(done.values().all(|workers| workers.len() == 1), "once each");
    assert!(batch.iter().all(|id| done[id] == [worker]));
    let counters = task_done_counters(&run_dir);
    assert_eq!(
        (counters["completed"].as_u64(), counters["failed"].as_u64()),
        (Some(40), Some(0))
    );
}

/// Block ids in ran.txt, and how often each ran.
fn ran_counts(dir: &TestDir) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for id in dir
        .read("ran.txt")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
    {
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}

#[test]
fn launched_workers_with_batches_of_four_run_every_block_once() {
    let dir = TestDir::new();
    let extra = "max_workers = 3\nbatch_size = 4\n\
                 block_command = [\"sh\", \"-c\", \"echo {block_id} >> ran.txt\"]";
    dir.write("flat.toml", &flat(50, extra));
    run_ok(&mut dir.driver(&["run", "flat.toml"]));
    let counts = ran_counts(&dir);
    assert_eq!(
        counts.keys().copied().collect::<BTreeSet<_>>(),
        (0..50).collect()
    );
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    assert_eq!(done_by(&dir.join("daisy_run/flat")).len(), 50);
}

#[test]
fn a_worker_command_with_prefetch_runs_every_block_once() {
    let dir = TestDir::new();
    dir.write(
        "worker.py",
        r#"import json, sys
for line in sys.stdin:
    block_id = json.loads(line)["block_id"]
    with open("ran.txt", "a") as out:
        out.write(f"{block_id}\n")
    print(json.dumps({"block_id": block_id, "ok": True}), flush=True)
"#,
    );
    let extra = "max_workers = 2\nprefetch = 2\ncommand = [\"python3\", \"worker.py\"]";
    dir.write("flat.toml", &flat(30, extra));
    run_ok(&mut dir.driver(&["run", "flat.toml"]));
    let counts = ran_counts(&dir);
    assert_eq!(
        counts.keys().copied().collect::<BTreeSet<_>>(),
        (0..30).collect()
    );
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
}
