//! The done marker's unit tests: the layout on disk byte for byte
//! against daisy 2.0.0's, resume, failure counts, the earlier layout,
//! damaged markers and crash safety.

use super::costs::StoredCost;
use super::*;
use daisy_core::geometry::{BlockGrid, GridWalk};
use daisy_core::{BlockId, Coordinate, Fit, Roi, TaskIdx};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn roi(offset: &[i64], shape: &[i64]) -> Roi {
    Roi::from_slices(offset, shape)
}

/// A task at the origin whose blocks read and write `block` voxels.
fn simple_task(total: &[i64], block: &[i64]) -> TaskSpec {
    let zeros = vec![0; total.len()];
    TaskSpec::new(
        "t",
        roi(&zeros, total),
        roi(&zeros, block),
        roi(&zeros, block),
    )
}

/// Blocks read 30, write the middle 10, in a total region off the origin.
pub(super) fn context_task() -> TaskSpec {
    let mut spec = TaskSpec::new(
        "t",
        roi(&[-8, 0], &[100, 200]),
        roi(&[0, 0], &[30, 30]),
        roi(&[10, 10], &[10, 10]),
    );
    spec.fit = Fit::Shrink;
    spec
}

/// The block `index` write shapes away from the first, as the
/// dependency graph makes it (fit rule applied).
fn block(spec: &TaskSpec, index: &[i64]) -> Block {
    let k = Coordinate::new(index) * spec.write_roi.shape();
    BlockGrid::new(TaskIdx(0), spec)
        .block_at(k)
        .expect("the fit rule keeps this block")
}

/// The chunk of the array `name` (`done`, `failures`) of the marker at
/// `dir`, or of the earlier layout's array with `name` = "".
fn chunk_of(dir: &Path, name: &str, dims: usize) -> PathBuf {
    let mut path = dir.join(name).join("c");
    path.extend(std::iter::repeat_n("0", dims));
    path
}

/// The `done` chunk's bytes.
fn chunk_bytes(dir: &Path, dims: usize) -> Vec<u8> {
    fs::read(chunk_of(dir, "done", dims)).unwrap()
}

/// The `failures` chunk as counts.
fn failure_counts(dir: &Path, dims: usize) -> Vec<u32> {
    let bytes = fs::read(chunk_of(dir, "failures", dims)).unwrap();
    let words = bytes.chunks_exact(4);
    words
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

/// Every file below `dir` and its contents, to show nothing changed.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => todo.push(path),
                false => files.push((path.clone(), fs::read(&path).unwrap())),
            }
        }
    }
    files.sort();
    files
}

fn marker_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("done").join("t");
    (tmp, dir)
}

/// Marks `marked`, reopens, and checks that exactly those are done.
fn assert_round_trip(spec: &TaskSpec, marked: &[&[i64]]) {
    let (_tmp, dir) = marker_dir();
    let mut marker = DoneMarker::open(&dir, spec).unwrap();
    for index in marked {
        marker.mark_done(&block(spec, index)).unwrap();
        marker.mark_done(&block(spec, index)).unwrap();
    }
    marker.flush().unwrap();
    drop(marker);
    let marker = DoneMarker::open(&dir, spec).unwrap();
    assert_eq!(marker.count_done(), marked.len() as u64);
    let grid: Vec<i64> = marker.grid_shape().iter().map(|&n| n as i64).collect();
    let dims = grid.len();
    for index in GridWalk::new(Coordinate::zeros(dims), Coordinate::new(&grid)) {
        let expected = marked.contains(&index.as_slice());
        assert_eq!(
            marker.is_done(&block(spec, index.as_slice())),
            expected,
            "{index}"
        );
    }
}

#[test]
fn round_trip_2d_keeps_exactly_the_marked_blocks() {
    assert_round_trip(
        &simple_task(&[40, 30], &[10, 10]),
        &[&[0, 0], &[3, 2], &[1, 2]],
    );
}

#[test]
fn round_trip_3d_keeps_exactly_the_marked_blocks() {
    let spec = simple_task(&[20, 30, 40], &[10, 10, 10]);
    assert_round_trip(&spec, &[&[1, 2, 3], &[0, 1, 0], &[0, 0, 0]]);
}

#[test]
fn byte_position_is_the_row_major_grid_index() {
    let (_tmp, dir) = marker_dir();
    let spec = context_task();
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.grid_shape(), &[10, 20]);
    // Block (2, 5) writes at [2 + 20, 10 + 50] = [22, 60] (the write
    // region starts 10 into the read region, which starts at -8 + 20):
    // grid index ([22, 60] - [-8, 0]) / 10 = (3, 6), byte 3 * 20 + 6.
    let b = block(&spec, &[2, 5]);
    assert_eq!(b.write_roi.offset(), Coordinate::from([22, 60]));
    marker.mark_done(&b).unwrap();
    let bytes = chunk_bytes(&dir, 2);
    assert_eq!(bytes.len(), 200);
    let set: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != 0).collect();
    assert_eq!(set, [66]);
    assert_eq!(bytes[66], 1);
}

/// What daisy 2.0.0 (from PyPI) wrote for a task of 40x30 total, 10x10
/// valid blocks: `<dir>/zarr.json`, `<dir>/done/zarr.json` and
/// `<dir>/failures/zarr.json`, copied from its files.
const DAISY_GROUP_JSON: &str = r#"{
  "attributes": {
    "daisy_task_hash": "e9dba174c67a47594f5a0b2fd25f774761b7341cc898e91fdb5d5dc4b5c786c9"
  },
  "node_type": "group",
  "zarr_format": 3
}
"#;

/// The `done` array's file; `failures` differs only in `data_type`.
const DAISY_DONE_JSON: &str = r#"{
  "attributes": {},
  "chunk_grid": {
    "configuration": {
      "chunk_shape": [
        4,
        3
      ]
    },
    "name": "regular"
  },
  "chunk_key_encoding": {
    "configuration": {
      "separator": "/"
    },
    "name": "default"
  },
  "codecs": [
    {
      "configuration": {
        "endian": "little"
      },
      "name": "bytes"
    }
  ],
  "data_type": "uint8",
  "fill_value": 0,
  "node_type": "array",
  "shape": [
    4,
    3
  ],
  "storage_transformers": [],
  "zarr_format": 3
}
"#;

fn daisy_failures_json() -> String {
    DAISY_DONE_JSON.replace("\"uint8\"", "\"uint32\"")
}

#[test]
fn files_match_daisy_2_0_0_byte_for_byte() {
    let (_tmp, dir) = marker_dir();
    DoneMarker::open(&dir, &simple_task(&[40, 30], &[10, 10])).unwrap();
    let read = |path: PathBuf| fs::read_to_string(path).unwrap();
    assert_eq!(read(dir.join("zarr.json")), DAISY_GROUP_JSON);
    assert_eq!(read(dir.join("done/zarr.json")), DAISY_DONE_JSON);
    assert_eq!(read(dir.join("failures/zarr.json")), daisy_failures_json());
    assert_eq!(chunk_bytes(&dir, 2), vec![0; 12]);
    assert_eq!(failure_counts(&dir, 2), vec![0; 12]);
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["done", "failures", "zarr.json"]);
}

/// A marker as daisy 2.0.0 leaves it after blocks (0, 0), (0, 1) and
/// (1, 2) succeeded and (0, 2) failed three times.
fn write_daisy_marker(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("zarr.json"), DAISY_GROUP_JSON).unwrap();
    for (name, json) in [
        ("done", DAISY_DONE_JSON.to_string()),
        ("failures", daisy_failures_json()),
    ] {
        fs::create_dir_all(dir.join(name).join("c/0")).unwrap();
        fs::write(dir.join(name).join("zarr.json"), json).unwrap();
    }
    let mut done = vec![0u8; 12];
    for i in [0, 1, 5] {
        done[i] = 1;
    }
    fs::write(chunk_of(dir, "done", 2), done).unwrap();
    let mut failures = vec![0u8; 48];
    failures[2 * 4] = 3;
    fs::write(chunk_of(dir, "failures", 2), failures).unwrap();
}

#[test]
fn a_marker_written_by_daisy_2_0_0_is_resumed() {
    let (_tmp, dir) = marker_dir();
    write_daisy_marker(&dir);
    let spec = simple_task(&[40, 30], &[10, 10]);
    let before = snapshot(&dir);
    let peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(peek.count_done(), 3);
    assert_eq!(peek.failure_count(&block(&spec, &[0, 2])).unwrap(), 3);
    assert_eq!(snapshot(&dir), before, "reading changes nothing");
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(snapshot(&dir), before, "opening to write changes nothing");
    for (index, done) in [
        ([0, 0], true),
        ([0, 1], true),
        ([1, 2], true),
        ([0, 2], false),
    ] {
        assert_eq!(marker.is_done(&block(&spec, &index)), done, "{index:?}");
    }
    marker.note_failure(&block(&spec, &[0, 2])).unwrap();
    marker.mark_done(&block(&spec, &[0, 2])).unwrap();
    assert_eq!(chunk_bytes(&dir, 2)[..6], [1, 1, 1, 0, 0, 1]);
    assert_eq!(failure_counts(&dir, 2)[2], 4);
}

#[test]
fn failed_attempts_are_counted_per_block_little_endian() {
    let (_tmp, dir) = marker_dir();
    let spec = context_task();
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    let b = block(&spec, &[2, 5]);
    for _ in 0..3 {
        marker.note_failure(&b).unwrap();
    }
    marker.note_failure(&block(&spec, &[0, 0])).unwrap();
    marker.mark_done(&b).unwrap();
    marker.flush().unwrap();
    drop(marker);
    let counts = failure_counts(&dir, 2);
    assert_eq!(counts.len(), 200);
    let counted: Vec<(usize, u32)> = (0..200)
        .filter(|&i| counts[i] != 0)
        .map(|i| (i, counts[i]))
        .collect();
    // The first block writes at [2, 10], grid index (1, 1): byte 21.
    assert_eq!(counted, [(21, 1), (66, 3)], "a success keeps the count");
    let marker = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(marker.failure_count(&b).unwrap(), 3);
    assert!(marker.is_done(&b));
}

#[test]
fn a_group_without_hash_is_a_store_the_user_made() {
    let (_tmp, dir) = marker_dir();
    write_daisy_marker(&dir);
    fs::write(
        dir.join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group"}"#,
    )
    .unwrap();
    fs::remove_dir_all(dir.join("failures")).unwrap();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(peek.count_done(), 3);
    assert_eq!(peek.failure_count(&block(&spec, &[0, 2])).unwrap(), 0);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.note_failure(&block(&spec, &[0, 2])).unwrap();
    assert_eq!(failure_counts(&dir, 2)[2], 1, "failures is created");
}

/// Writes a marker of this project's earlier layout, with `done` blocks
/// (row-major positions) set and `hash` as its task hash.
fn write_legacy_marker(dir: &Path, hash: &str, done: &[usize]) {
    fs::create_dir_all(dir.join("c/0")).unwrap();
    let mut meta = read_json_str(DAISY_DONE_JSON);
    meta["attributes"] = json!({ "daisy_task_hash": hash });
    meta["codecs"] = json!([{ "name": "bytes" }]);
    fs::write(dir.join("zarr.json"), format!("{meta:#}\n")).unwrap();
    let mut bytes = vec![0u8; 12];
    for &i in done {
        bytes[i] = 1;
    }
    fs::write(chunk_of(dir, "", 2), bytes).unwrap();
}

fn read_json_str(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn an_earlier_marker_is_read_as_it_is_and_migrated_by_a_run() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    write_legacy_marker(&dir, &hash::legacy_task_hash(&spec), &[1, 7]);
    let before = snapshot(&dir);
    let peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(peek.count_done(), 2);
    assert!(peek.is_done(&block(&spec, &[2, 1])));
    assert_eq!(snapshot(&dir), before, "reading changes nothing");
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.count_done(), 2);
    drop(marker);
    assert_eq!(
        fs::read_to_string(dir.join("zarr.json")).unwrap(),
        DAISY_GROUP_JSON
    );
    assert_eq!(
        fs::read_to_string(dir.join("done/zarr.json")).unwrap(),
        DAISY_DONE_JSON
    );
    let mut expected = vec![0; 12];
    expected[1] = 1;
    expected[7] = 1;
    assert_eq!(chunk_bytes(&dir, 2), expected);
    assert_eq!(failure_counts(&dir, 2), vec![0; 12]);
    assert!(!dir.join("c").exists(), "the old chunk is gone");
}

#[test]
fn a_migration_killed_before_its_rename_is_done_again() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    write_legacy_marker(&dir, &hash::legacy_task_hash(&spec), &[4]);
    // As if killed after writing `done` (here: half of it), before the
    // group's zarr.json replaced the array's.
    fs::create_dir_all(dir.join("done/c/0")).unwrap();
    fs::write(chunk_of(&dir, "done", 2), [1u8; 5]).unwrap();
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.count_done(), 1);
    let mut expected = vec![0; 12];
    expected[4] = 1;
    assert_eq!(chunk_bytes(&dir, 2), expected);
}

#[test]
fn a_migration_killed_after_its_rename_loses_nothing() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done(&block(&spec, &[1, 1])).unwrap();
    drop(marker);
    // The earlier chunk left behind, as a kill before its removal leaves it.
    fs::create_dir_all(dir.join("c/0")).unwrap();
    fs::write(chunk_of(&dir, "", 2), [1u8; 12]).unwrap();
    let peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert_eq!(peek.count_done(), 1, "the group is the truth");
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.count_done(), 1);
    assert!(!dir.join("c").exists());
}

#[test]
fn an_earlier_marker_of_another_layout_is_refused() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let other = simple_task(&[40, 30], &[5, 5]);
    write_legacy_marker(&dir, &hash::legacy_task_hash(&other), &[1]);
    for err in [
        DoneMarker::open(&dir, &spec).unwrap_err(),
        DoneMarker::open_existing(&dir, &spec).unwrap_err(),
    ] {
        assert!(
            matches!(err, DoneMarkerError::LayoutMismatch { .. }),
            "{err:?}"
        );
        assert!(err
            .to_string()
            .contains(&format!("rm -rf {}", dir.display())));
    }
    assert!(dir.join("c/0/0").exists(), "refusing changes nothing");
}

/// Removes `metadata` (a `zarr.json` of the marker) after a block was
/// marked, then expects every open to refuse, keeping the done byte.
fn assert_lost_metadata_is_refused(metadata: &str) {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done(&block(&spec, &[0, 1])).unwrap();
    drop(marker);
    fs::remove_file(dir.join(metadata)).unwrap();
    for err in [
        DoneMarker::open_existing(&dir, &spec).unwrap_err(),
        DoneMarker::open(&dir, &spec).unwrap_err(),
    ] {
        assert!(
            matches!(&err, DoneMarkerError::MetadataMissing { .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("no zarr.json"), "{message}");
        assert!(
            message.contains(&format!("rm -rf {}", dir.display())),
            "{message}"
        );
    }
    let marked = chunk_bytes(&dir, 2).iter().filter(|&&b| b != 0).count();
    assert_eq!(marked, 1, "the done byte is kept");
}

#[test]
fn done_bytes_without_the_groups_zarr_json_are_refused() {
    assert_lost_metadata_is_refused("zarr.json");
}

#[test]
fn done_bytes_without_the_arrays_zarr_json_are_refused() {
    assert_lost_metadata_is_refused("done/zarr.json");
}

#[test]
fn done_bytes_of_an_earlier_marker_without_zarr_json_are_refused() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    write_legacy_marker(&dir, &hash::legacy_task_hash(&spec), &[3]);
    fs::remove_file(dir.join("zarr.json")).unwrap();
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(
        matches!(&err, DoneMarkerError::MetadataMissing { chunk, .. } if *chunk == chunk_of(&dir, "", 2)),
        "{err:?}"
    );
}

#[test]
fn interrupted_creation_is_redone_from_scratch() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    // As if killed after the arrays were written, before the group's
    // zarr.json was renamed into place: chunks are still zeroed.
    fs::remove_file(dir.join("zarr.json")).unwrap();
    fs::write(dir.join(zarr::ZARR_JSON_TMP), "{ half").unwrap();
    assert!(DoneMarker::open_existing(&dir, &spec).unwrap().is_none());
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.count_done(), 0);
    assert!(!dir.join(zarr::ZARR_JSON_TMP).exists());
    assert_eq!(
        fs::read_to_string(dir.join("zarr.json")).unwrap(),
        DAISY_GROUP_JSON
    );
}

#[test]
fn a_big_endian_failures_array_is_refused() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let path = dir.join("failures/zarr.json");
    let mut meta = read_json(&path);
    meta["codecs"][0]["configuration"]["endian"] = json!("big");
    fs::write(&path, meta.to_string()).unwrap();
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(
        matches!(&err, DoneMarkerError::Invalid { path: p, .. } if *p == path),
        "{err:?}"
    );
    assert!(err.to_string().contains("little-endian"), "{err}");
}

#[test]
fn reset_removes_a_marker_daisy_wrote_with_resource_arrays() {
    let (_tmp, dir) = marker_dir();
    write_daisy_marker(&dir);
    fs::create_dir_all(dir.join("wall_seconds/c/0")).unwrap();
    reset(&dir).unwrap();
    assert!(!dir.exists());
}

#[test]
fn layout_change_is_refused_with_the_rm_rf_hint() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done(&block(&spec, &[1, 1])).unwrap();
    drop(marker);
    let changed = simple_task(&[40, 30], &[5, 5]);
    let err = DoneMarker::open(&dir, &changed).unwrap_err();
    assert!(
        matches!(err, DoneMarkerError::LayoutMismatch { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("different task layout"), "{message}");
    assert!(message.contains(&task_hash(&spec)), "{message}");
    assert!(message.contains(&task_hash(&changed)), "{message}");
    assert!(
        message.contains(&format!("rm -rf {}", dir.display())),
        "{message}"
    );
    let peek = DoneMarker::open_existing(&dir, &changed).unwrap_err();
    assert!(matches!(peek, DoneMarkerError::LayoutMismatch { .. }));
    let kept = DoneMarker::open(&dir, &spec).unwrap();
    assert!(
        kept.is_done(&block(&spec, &[1, 1])),
        "refusing changes nothing"
    );
}

#[test]
fn garbage_zarr_json_is_invalid_and_named() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let path = dir.join("zarr.json");
    fs::write(&path, "{ not json").unwrap();
    for err in [
        DoneMarker::open(&dir, &spec).unwrap_err(),
        DoneMarker::open_existing(&dir, &spec).unwrap_err(),
    ] {
        assert!(matches!(&err, DoneMarkerError::Invalid { path: p, .. } if *p == path));
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        let hint = format!("rm -rf {}", dir.display());
        assert!(message.contains(&hint), "{message}");
    }
}

#[test]
fn wrong_shape_in_zarr_json_is_invalid() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let path = dir.join("done").join("zarr.json");
    let mut meta = read_json(&path);
    meta["shape"] = json!([5, 3]);
    fs::write(&path, meta.to_string()).unwrap();
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(matches!(&err, DoneMarkerError::Invalid { path: p, .. } if *p == path));
    assert!(
        err.to_string().contains("shape is [5,3], expected [4,3]")
            && err
                .to_string()
                .contains(&format!("rm -rf {}", dir.display())),
        "{err}"
    );
}

#[test]
fn truncated_chunk_is_invalid_and_named() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let chunk = chunk_of(&dir, "done", 2);
    File::options()
        .write(true)
        .open(&chunk)
        .unwrap()
        .set_len(5)
        .unwrap();
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(matches!(&err, DoneMarkerError::Invalid { path, .. } if *path == chunk));
    assert!(err.to_string().contains("5 bytes, expected 12"), "{err}");
}

#[test]
fn a_done_byte_other_than_0_or_1_is_damage_not_done() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    DoneMarker::open(&dir, &spec).unwrap();
    let chunk = chunk_of(&dir, "done", 2);
    let mut bytes = chunk_bytes(&dir, 2);
    bytes[3] = 0x7f;
    bytes[5] = 1;
    bytes[9] = 0xff;
    fs::write(&chunk, &bytes).unwrap();
    for err in [
        DoneMarker::open(&dir, &spec).unwrap_err(),
        DoneMarker::open_existing(&dir, &spec).err().unwrap(),
    ] {
        assert!(matches!(&err, DoneMarkerError::Invalid { path, .. } if *path == chunk));
        let text = err.to_string();
        assert!(
            text.contains("cell 3 holds byte 0x7f, and 2 cells"),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("rm -rf {}", dir.display())),
            "{text}"
        );
    }
}

#[test]
fn open_existing_on_an_absent_dir_returns_none_and_creates_nothing() {
    let (tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    assert!(DoneMarker::open_existing(&dir, &spec).unwrap().is_none());
    assert!(!tmp.path().join("done").exists());
}

#[test]
fn open_existing_sees_marks_and_refuses_to_mark() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done(&block(&spec, &[2, 1])).unwrap();
    let mut peek = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    assert!(peek.is_done(&block(&spec, &[2, 1])));
    assert_eq!(peek.count_done(), 1);
    let err = peek.mark_done(&block(&spec, &[0, 0])).unwrap_err();
    assert!(matches!(err, DoneMarkerError::ReadOnly { .. }), "{err:?}");
    let err = peek.note_failure(&block(&spec, &[0, 0])).unwrap_err();
    assert!(matches!(err, DoneMarkerError::ReadOnly { .. }), "{err:?}");
    peek.flush().unwrap();
    assert_eq!(chunk_bytes(&dir, 2).iter().filter(|&&b| b != 0).count(), 1);
}

#[test]
fn shrink_fit_border_block_counts_in_task_write_shapes() {
    let (_tmp, dir) = marker_dir();
    let mut spec = simple_task(&[25, 30], &[10, 10]);
    spec.fit = Fit::Shrink;
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    assert_eq!(marker.grid_shape(), &[3, 3]);
    let border = block(&spec, &[2, 2]);
    assert_eq!(border.write_roi, roi(&[20, 20], &[5, 10]), "shrunk");
    marker.mark_done(&border).unwrap();
    assert!(marker.is_done(&border));
    let mut expected = vec![0; 9];
    expected[2 * 3 + 2] = 1;
    assert_eq!(chunk_bytes(&dir, 2), expected);
}

#[test]
fn blocks_outside_the_grid_are_not_addressable() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[30, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    // Built by hand: the graph never makes these, but a caller may pass them.
    let at = |offset: &[i64]| {
        let r = roi(offset, &vec![10; offset.len()]);
        let id = BlockId {
            task: TaskIdx(0),
            spatial: 0,
        };
        Block {
            id,
            read_roi: r,
            write_roi: r,
        }
    };
    for outside in [
        at(&[-10, 0]),
        at(&[-1, 0]),
        at(&[30, 0]),
        at(&[0, 30]),
        at(&[0, 0, 0]),
    ] {
        assert!(!marker.is_done(&outside));
        marker.mark_done(&outside).unwrap();
        assert!(!marker.is_done(&outside));
    }
    assert_eq!(marker.count_done(), 0);
    assert_eq!(chunk_bytes(&dir, 2), vec![0; 9]);
}

#[test]
fn reset_removes_a_marker_and_nothing_else() {
    let (tmp, dir) = marker_dir();
    reset(&dir).unwrap();
    DoneMarker::open(&dir, &simple_task(&[40, 30], &[10, 10])).unwrap();
    reset(&dir).unwrap();
    assert!(!dir.exists());
    let not_a_marker = tmp.path().join("done");
    fs::write(not_a_marker.join("notes.txt"), "keep").unwrap();
    let err = reset(&not_a_marker).unwrap_err();
    assert!(matches!(err, DoneMarkerError::NotAMarker { .. }), "{err:?}");
    assert!(not_a_marker.join("notes.txt").exists());
}

#[test]
fn impossible_geometry_is_an_error_and_creates_nothing() {
    let (tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[0, 10]);
    let err = DoneMarker::open(&dir, &spec).unwrap_err();
    assert!(matches!(err, DoneMarkerError::Geometry { .. }), "{err:?}");
    assert!(err.to_string().contains("must be positive"), "{err}");
    assert!(!tmp.path().join("done").exists());
}

/// Set (to the marker dir) in the child that `kill_9_loses_no_returned_mark`
/// starts: it turns `crash_child_marks_until_killed` into the child.
const CRASH_CHILD_ENV: &str = "DAISY_DONE_MARKER_CRASH_CHILD";

/// A million blocks, so the child is killed long before it runs out.
fn crash_task() -> TaskSpec {
    simple_task(&[1000, 1000], &[1, 1])
}

/// Not a test by itself: without `CRASH_CHILD_ENV` it returns at once;
/// with it, it marks blocks and reports each one after `mark_done`
/// returns, until killed.
#[test]
fn crash_child_marks_until_killed() {
    let Some(dir) = std::env::var_os(CRASH_CHILD_ENV) else {
        return;
    };
    let spec = crash_task();
    let mut marker = DoneMarker::open(Path::new(&dir), &spec).unwrap();
    for k in GridWalk::new(Coordinate::zeros(2), Coordinate::from([1000, 1000])) {
        marker.mark_done(&block(&spec, k.as_slice())).unwrap();
        println!("marked {} {}", k[0], k[1]);
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Kills (SIGKILL) and reaps the child however the test ends, so a
/// failed assert leaves no process behind.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs this test binary as the crash child, writing to `dir`.
fn spawn_crash_child(dir: &Path) -> KillOnDrop {
    let (_, module) = module_path!().split_once("::").unwrap();
    let name = format!("{module}::crash_child_marks_until_killed");
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env(CRASH_CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// The first `n` grid indices the child reports, waiting at most a
/// minute for each.
fn reported_marks(child: &mut Child, n: usize) -> Vec<[i64; 2]> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut marks = Vec::new();
    while marks.len() < n {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("child stopped reporting after {} marks: {e}", marks.len()));
        if let Some(rest) = line.strip_prefix("marked ") {
            let (i, j) = rest.split_once(' ').unwrap();
            marks.push([i.parse().unwrap(), j.parse().unwrap()]);
        }
    }
    marks
}

#[test]
fn kill_9_loses_no_returned_mark() {
    let (_tmp, dir) = marker_dir();
    let mut child = spawn_crash_child(&dir);
    let marks = reported_marks(&mut child.0, 2000);
    drop(child);
    let spec = crash_task();
    let marker = DoneMarker::open(&dir, &spec).unwrap();
    for index in &marks {
        assert!(marker.is_done(&block(&spec, index)), "{index:?} lost");
    }
    assert!(marker.count_done() >= marks.len() as u64);
}

#[test]
fn a_batch_of_marks_lands_like_one_mark_each() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let blocks: Vec<Block> = [[0, 0], [0, 1], [0, 2], [2, 1], [0, 1]]
        .iter()
        .map(|index| block(&spec, index))
        .collect();
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker.mark_done_many(&blocks).unwrap();
    assert_eq!(marker.count_done(), 4, "a block given twice counts once");
    let reopened = DoneMarker::open(&dir, &spec).unwrap();
    assert!(blocks.iter().all(|b| reopened.is_done(b)));
    assert_eq!(chunk_bytes(&dir, 2).iter().filter(|&&b| b == 1).count(), 4);
}

fn cost(wall: f32, rss: u64) -> StoredCost {
    StoredCost {
        wall_seconds: wall,
        cpu_seconds: wall / 2.0,
        peak_rss_bytes: rss,
        io_read_bytes: 3,
        io_write_bytes: 4,
        gpu_util_pct: None,
        gpu_mem_bytes: 0,
    }
}

/// The stored cost of each block of `spec`, by grid index, as `status`
/// reads it (read-only).
fn stored_costs(dir: &Path, spec: &TaskSpec) -> Vec<Option<StoredCost>> {
    let marker = DoneMarker::open_existing(dir, spec).unwrap().unwrap();
    let table = marker.read_costs().unwrap().expect("cost arrays");
    (0..table.cells()).map(|cell| table.get(cell)).collect()
}

#[test]
fn costs_are_stored_per_block_and_read_back() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    assert!(marker.read_costs().unwrap().is_none(), "none before a cost");
    let gpu = StoredCost {
        gpu_util_pct: Some(75.0),
        gpu_mem_bytes: 1 << 30,
        ..cost(3.0, 9)
    };
    let (a, b, c) = (
        block(&spec, &[0, 1]),
        block(&spec, &[0, 2]),
        block(&spec, &[3, 2]),
    );
    marker
        .record_costs([(&a, cost(1.5, 7)), (&c, gpu), (&b, cost(2.5, 8))])
        .unwrap();
    let costs = stored_costs(&dir, &spec);
    assert_eq!(costs[1], Some(cost(1.5, 7)));
    assert_eq!(costs[2], Some(cost(2.5, 8)));
    assert_eq!(costs[11], Some(gpu));
    assert_eq!(
        costs.iter().flatten().count(),
        3,
        "the others are not measured"
    );
    let wall = fs::read(chunk_of(&dir, "wall_seconds", 2)).unwrap();
    assert_eq!(wall.len(), 12 * 4, "float32 per block");
    assert_eq!(wall[4..8], 1.5f32.to_le_bytes());
    let util = fs::read(chunk_of(&dir, "gpu_util_pct", 2)).unwrap();
    assert!(
        f32::from_le_bytes(util[4..8].try_into().unwrap()).is_nan(),
        "no GPU: NaN"
    );
    let rss = fs::read(chunk_of(&dir, "peak_rss_bytes", 2)).unwrap();
    assert_eq!((rss.len(), &rss[8..16]), (12 * 8, &7u64.to_le_bytes()[..]));
}

/// A marker of a 4×3 grid whose block (0, 0) has its costs stored.
fn marker_with_one_cost() -> (tempfile::TempDir, PathBuf, TaskSpec) {
    let (tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let mut marker = DoneMarker::open(&dir, &spec).unwrap();
    marker
        .record_costs([(&block(&spec, &[0, 0]), cost(1.0, 1))])
        .unwrap();
    (tmp, dir, spec)
}

#[test]
fn cost_arrays_have_daisy_2_0_0s_metadata() {
    let (_tmp, dir, _) = marker_with_one_cost();
    let read = |name: &str| fs::read_to_string(dir.join(name).join("zarr.json")).unwrap();
    let float = DAISY_DONE_JSON
        .replace("\"uint8\"", "\"float32\"")
        .replace("\"fill_value\": 0,", "\"fill_value\": 0.0,");
    let unsigned = DAISY_DONE_JSON.replace("\"uint8\"", "\"uint64\"");
    for name in ["wall_seconds", "cpu_seconds", "gpu_util_pct"] {
        assert_eq!(read(name), float, "{name}");
    }
    for name in [
        "peak_rss_bytes",
        "io_read_bytes",
        "io_write_bytes",
        "gpu_mem_bytes",
    ] {
        assert_eq!(read(name), unsigned, "{name}");
    }
}

#[test]
fn a_reopened_marker_keeps_the_costs_stored_before() {
    let (_tmp, dir) = marker_dir();
    let spec = simple_task(&[40, 30], &[10, 10]);
    let first = block(&spec, &[1, 1]);
    DoneMarker::open(&dir, &spec)
        .unwrap()
        .record_costs([(&first, cost(1.0, 1))])
        .unwrap();
    let mut again = DoneMarker::open(&dir, &spec).unwrap();
    again
        .record_costs([(&block(&spec, &[2, 2]), cost(2.0, 2))])
        .unwrap();
    let costs = stored_costs(&dir, &spec);
    assert_eq!(
        (costs[4], costs[8]),
        (Some(cost(1.0, 1)), Some(cost(2.0, 2)))
    );
}

#[test]
fn a_cost_array_of_another_type_is_refused_naming_it() {
    let (_tmp, dir, spec) = marker_with_one_cost();
    let path = dir.join("wall_seconds/zarr.json");
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("float32", "float64");
    fs::write(&path, text).unwrap();
    let marker = DoneMarker::open_existing(&dir, &spec).unwrap().unwrap();
    let error = marker.read_costs().unwrap_err().to_string();
    assert!(
        error.contains("wall_seconds/zarr.json") && error.contains("data_type"),
        "{error}"
    );
}
