//! `skip_mask` through the real driver: masked blocks are neither run nor
//! failed but skipped, the blocks downstream of them run, `plan` counts
//! them, and a mask of the wrong shape refuses the run naming both shapes.
//! (Masks written by zarr-python and compared with daisy 2.0.0 are in
//! `daisy2_compat`.)

use crate::util::*;
use std::collections::BTreeSet;

/// Writes an uncompressed Zarr v3 uint8 array of `cells` (1-D) at `name`.
pub(crate) fn write_mask(dir: &TestDir, name: &str, cells: &[u8]) {
    let meta = serde_json::json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": [cells.len()],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [cells.len()]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    });
    std::fs::create_dir_all(dir.join(&format!("{name}/c"))).unwrap();
    dir.write(&format!("{name}/zarr.json"), &meta.to_string());
    std::fs::write(dir.join(&format!("{name}/c/0")), cells).unwrap();
}

/// `up` (6 blocks, masked by `mask.zarr`) feeds `down` (6 blocks).
fn chained() -> String {
    format!(
        "name = \"sm\"\n{}{}",
        task(
            "up",
            6,
            "echo up {block_id} >> ran.txt",
            "skip_mask = \"mask.zarr\"\nmax_workers = 2"
        ),
        task(
            "down",
            6,
            "echo down {block_id} >> ran.txt",
            "upstream = [\"up\"]\nmax_workers = 2"
        ),
    )
}

fn ran(dir: &TestDir) -> BTreeSet<String> {
    dir.read("ran.txt").lines().map(String::from).collect()
}

#[test]
fn masked_blocks_are_skipped_and_what_depends_on_them_runs() {
    for serial in [false, true] {
        let dir = TestDir::new();
        write_mask(&dir, "mask.zarr", &[0, 1, 0, 0, 1, 0]);
        dir.write("p.toml", &chained());
        let plan = run_ok(&mut dir.driver(&["plan", "p.toml"]));
        assert!(
            plan.contains("0 done, 2 masked (skip_mask), 4 to run"),
            "{plan}"
        );
        let args: &[&str] = if serial {
            &["run", "--serial", "p.toml"]
        } else {
            &["run", "p.toml"]
        };
        run_ok(&mut dir.driver(args));
        let ran = ran(&dir);
        let up: BTreeSet<&str> = ran.iter().filter_map(|l| l.strip_prefix("up ")).collect();
        let down = ran.iter().filter(|l| l.starts_with("down ")).count();
        assert_eq!(up.len(), 4, "serial {serial}: {ran:?}");
        assert_eq!(down, 6, "downstream of masked blocks runs too");
        let status = run_ok(&mut dir.driver(&["status", "daisy_run/sm"]));
        assert!(
            status.contains("task \"up\": 2 blocks skipped (skip_mask)"),
            "{status}"
        );
        let counters = task_done_counters(&dir.join("daisy_run/sm"), "up");
        assert_eq!(
            (
                counters["skipped"].as_u64(),
                counters["completed"].as_u64(),
                counters["failed"].as_u64()
            ),
            (Some(2), Some(6), Some(0)),
            "serial {serial}"
        );
    }
}

#[test]
fn a_mask_of_the_wrong_shape_refuses_the_run_naming_both_shapes() {
    let dir = TestDir::new();
    write_mask(&dir, "mask.zarr", &[0, 1, 0]);
    dir.write("p.toml", &chained());
    let output = run_fails(&mut dir.driver(&["run", "p.toml"]), 2);
    assert!(
        output.contains(
            "task \"up\": skip_mask = \"mask.zarr\": its shape [3] is not the task's block grid [6]"
        ),
        "{output}"
    );
    assert!(!dir.join("daisy_run").exists(), "nothing written");
    std::fs::remove_dir_all(dir.join("mask.zarr")).unwrap();
    let output = run_fails(&mut dir.driver(&["run", "p.toml"]), 2);
    assert!(output.contains("is not a Zarr array"), "{output}");
}
