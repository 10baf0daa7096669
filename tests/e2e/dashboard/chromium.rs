//! The dashboard in real headless Chromium, during a run: the done count
//! grows, a failed block's error appears, a killed worker's row turns
//! lost, and the page settles on the run's final state, as `status` and
//! `report` find it; nothing on the console. A screenshot of the final
//! page is kept under `target/test-artifacts/`. Needs Chromium
//! (`ci/test.sh` counts these under it).

use super::serve;
use crate::browser::{artifacts, assert_picture, Browser};
use crate::util::*;
use serde_json::Value;

/// Blocks wait for `go`; then block 3 fails, blocks from 8 on wait for
/// `finish`, and the others take a moment each.
const BLOCK: &str = "while [ ! -e go ]; do sleep 0.05; done; \
    if [ {block_id} = 3 ]; then echo 'block three is bad' >&2; exit 1; fi; \
    if [ {block_id} -ge 8 ]; then while [ ! -e finish ]; do sleep 0.05; done; fi; \
    sleep 0.2";

const DONE: &str = "document.getElementById('done')?.textContent";
const STATE: &str = "document.getElementById('run-state')?.textContent";

#[test]
fn the_page_follows_a_run_live_and_keeps_its_final_state() {
    let dir = TestDir::new();
    let tasks = task("t", 12, BLOCK, "max_workers = 2\nmax_retries = 0");
    dir.write("live.toml", &format!("name = \"live\"\n{tasks}"));
    let served = serve(&dir, "live.toml", "live", "127.0.0.1:0");
    let mut browser = Browser::start(
        "the_page_follows_a_run_live_and_keeps_its_final_state",
        1200,
        1600,
    );
    let mut page = browser.open(&format!("{}/?token={}", served.base, served.token));

    // Both workers at work, nothing done yet.
    page.wait_for(
        "two running workers and nothing done",
        &format!(
            "{DONE} === '0' && {STATE} === 'running' && \
             document.querySelectorAll('tr.worker[data-state=\"running\"]').length === 2"
        ),
    );
    dir.write("go", "");
    page.wait_for("the done count to grow to 7", &format!("{DONE} === '7'"));
    page.wait_for(
        "the failed block's error",
        "document.body.innerText.includes('block three is bad')",
    );

    // Blocks 8 and up wait: kill a worker the page shows at work.
    let running = page.eval(
        "Array.from(document.querySelectorAll('tr.worker[data-state=\"running\"]'))
           .map(row => [row.dataset.worker, row.cells[4].textContent])[0]",
    );
    let (worker, pid) = (running[0].as_str().unwrap(), running[1].as_str().unwrap());
    let pid = nix::unistd::Pid::from_raw(pid.parse().unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    page.wait_for(
        "the killed worker's row to say lost",
        &format!("document.querySelector('tr.worker[data-worker=\"{worker}\"]')?.dataset.state === 'lost'"),
    );

    dir.write("finish", "");
    page.wait_for(
        "the final state",
        "document.getElementById('connection').className === 'over'",
    );
    assert!(!served.driver.wait_for_exit().success(), "blocks failed");
    // The page keeps it once the driver is gone.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let status = run_fails(&mut dir.driver(&["status", "daisy_run/live", "--json"]), 1);
    let status: Value = serde_json::from_str(&status).unwrap();
    let done = status["tasks"][0]["done"].as_u64().unwrap();
    assert_eq!(page.eval(DONE), Value::from(done.to_string()));
    assert_eq!(page.eval(STATE), Value::from("failed"));
    assert_eq!(status["state"], "failed");
    let failed_rows = page.eval("document.querySelectorAll('.failures tr').length - 1");
    assert_eq!(
        failed_rows, status["tasks"][0]["failed"],
        "as status finds them"
    );
    assert_eq!(page.errors(), Vec::<String>::new(), "console errors");

    let screenshot = artifacts().join("dashboard.png");
    page.screenshot(&screenshot);
    assert_picture(&screenshot, (1200, 1600), "the dashboard");
}
