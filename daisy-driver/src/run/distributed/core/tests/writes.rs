//! The core with write locks (`writes`): a task writing into 4 shards
//! of 4 blocks each gets no more than 4 workers, and a worker that found
//! every shard taken is served when one is given back.

use super::*;

/// A 1-D Zarr v3 array of 16 voxels in shards of 4 chunks of 1, as
/// zarr-python writes its metadata; the directory holding it.
fn sharded_array() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let array = dir.path().join("out.zarr");
    std::fs::create_dir(&array).expect("mkdir");
    let meta = r#"{"shape": [16], "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1]}}],
        "attributes": {}, "zarr_format": 3, "node_type": "array"}"#;
    std::fs::write(array.join("zarr.json"), meta).expect("write");
    dir
}

fn writes(dir: &tempfile::TempDir, extra: &str) -> String {
    let array = dir.path().join("out.zarr");
    task(
        "t",
        16,
        &format!("writes = [{:?}]\n{extra}", array.display().to_string()),
    )
}

#[test]
fn a_task_gets_no_more_workers_than_shards_it_writes() {
    let dir = sharded_array();
    let mut run = Run::new("", &[writes(&dir, "max_workers = 8")]);
    assert_eq!(run.start_workers().len(), 4);
}

#[test]
fn a_worker_waiting_for_a_taken_shard_gets_its_next_block_when_it_is_given_back() {
    let dir = sharded_array();
    let mut run = Run::new("", &[writes(&dir, "max_workers = 0")]);
    for worker in 1..=5 {
        run.hello(worker, "t", None).unwrap();
    }
    let first: Vec<Vec<u64>> = (1..=5).map(|w| blocks_to(&run.acquire(w, 1), w)).collect();
    assert_eq!(first, [vec![0], vec![4], vec![8], vec![12], vec![]]);
    let given_back = run.release(2, 4, true);
    assert_eq!(blocks_to(&given_back, 5), [5], "the shard's next block");
}
