//! Retries as events.jsonl shows them: a failed block goes to the back of
//! the queue, and `retry_backoff` spaces out a block's attempts.

use crate::util::*;

#[test]
fn an_always_failing_block_uses_its_last_retry_after_the_other_99_are_done() {
    let dir = TestDir::new();
    let pipeline = format!(
        "name = \"back\"\n{}",
        task("t", 100, "test {block_id} -ne 0", "max_retries = 2")
    );
    dir.write("back.toml", &pipeline);
    run_fails(&mut dir.driver(&["run", "back.toml"]), 1);
    let events = events(&dir.join("daisy_run/back"));
    let position =
        |wanted: &dyn Fn(&serde_json::Value) -> bool| events.iter().rposition(wanted).unwrap();
    let last_done = position(&|e| e["event"] == "block_done");
    let for_good = position(&|e| e["event"] == "block_failed" && e["for_good"] == true);
    assert_eq!(event_blocks(&events, "block_done", "t").len(), 99);
    assert_eq!(events[for_good]["block_id"], 0);
    assert!(
        last_done < for_good,
        "all 99 block_done lines come before the bad block's last failure"
    );
    assert_eq!(event_blocks(&events, "block_failed", "t"), [0, 0, 0]);
}

#[test]
fn retry_backoff_spaces_out_a_failing_blocks_attempts() {
    let dir = TestDir::new();
    let flaky = "n=$(cat tries 2>/dev/null || echo 0); n=$((n+1)); echo $n > tries; test $n -ge 3";
    let pipeline = format!(
        "name = \"backoff\"\n{}",
        task("t", 1, flaky, "retry_backoff = \"300ms\"")
    );
    dir.write("backoff.toml", &pipeline);
    run_ok(&mut dir.driver(&["run", "backoff.toml"]));
    let events = events(&dir.join("daisy_run/backoff"));
    let times: Vec<f64> = events
        .iter()
        .filter(|e| e["event"] == "block_failed" || e["event"] == "block_done")
        .map(|e| e["time"].as_f64().unwrap())
        .collect();
    assert_eq!(times.len(), 3, "two failures, then done");
    let (first_gap, second_gap) = (times[1] - times[0], times[2] - times[1]);
    assert!(
        first_gap >= 0.3,
        "first retry after 300 ms, not {first_gap}"
    );
    assert!(
        second_gap >= 0.6,
        "second retry after 600 ms, not {second_gap}"
    );
}
