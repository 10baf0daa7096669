//! The run directory's safety (issue 11): one driver at a time, a refused
//! run changes nothing, lost done-marker metadata is never read as "no
//! progress".

use crate::util::*;

/// A pipeline "line" of `blocks` one-voxel blocks, each running `command`.
fn line_pipeline(blocks: u32, command: &str) -> String {
    format!("name = \"line\"\n{}", task("line", blocks, command, ""))
}

#[test]
fn done_bytes_without_zarr_json_are_an_error_in_plan_run_and_status() {
    let dir = TestDir::new();
    dir.write("line.toml", &line_pipeline(5, "true"));
    run_ok(&mut dir.driver(&["run", "--serial", "line.toml"]));
    let marker = dir.join("daisy_run/line/done/line");
    std::fs::remove_file(marker.join("zarr.json")).unwrap();
    let hint = "rm -rf daisy_run/line/done/line";
    let plan = run_fails(&mut dir.driver(&["plan", "line.toml"]), 1);
    assert!(plan.contains("no zarr.json") && plan.contains(hint), "{plan}");
    let status = run_fails(&mut dir.driver(&["status", "daisy_run/line"]), 2);
    assert!(status.contains("no zarr.json"), "{status}");
    for mode in [&["run", "line.toml"][..], &["run", "--serial", "line.toml"]] {
        let run = run_fails(&mut dir.driver(mode), 2);
        assert!(run.contains("no zarr.json") && run.contains(hint), "{run}");
    }
    let chunk = std::fs::read(marker.join("c/0")).unwrap();
    assert_eq!(chunk, vec![1; 5], "the done bytes are kept");
}
